//! Directory archive routes. `PUT /v1/sandboxes/{id}/archive?path=DIR` extracts a tar body
//! (gzip-compressed or not: the runtime tells by its first bytes, whatever the headers say)
//! into `DIR`, created if missing; `GET` of the same streams a tar of `DIR` (`?gzip=true`
//! compresses it). Both directions stream: the body goes to the runtime chunk by chunk as it
//! arrives, and the tar is sent as the runtime writes it. What an archive may hold, and what
//! is refused (`invalid_archive`, naming the entry), is the runtime's (`archive.rs` there).

use crate::backend::Backend;
use crate::error::HttpError;
use crate::extract::{discard_stream, ApiPath, ApiQuery};
use crate::AppState;
use axum::body::{Body, BodyDataStream};
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use sandlot_runtime::archive::ArchiveSummary;
use sandlot_runtime::ByteStream;
use serde::Deserialize;
use std::sync::Arc;
use tokio::sync::Mutex;

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ArchiveQuery {
    /// The directory, relative to the workspace root (or under `/workspace`); the root when
    /// absent.
    #[serde(default)]
    path: String,
    /// `GET` only: gzip the tar.
    #[serde(default)]
    gzip: bool,
}

pub(crate) async fn put<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ArchiveQuery>,
    body: Body,
) -> Result<Json<ArchiveSummary>, HttpError> {
    let body = Arc::new(Mutex::new(body.into_data_stream()));
    let summary = st
        .backend
        .extract_archive(&id, &q.path, shared(body.clone()))
        .await;
    // A refused archive leaves the rest of the body unread; read a bounded amount of it so the
    // client gets this answer rather than a reset connection.
    discard_stream(&mut *body.lock().await).await;
    Ok(Json(summary?))
}

/// The body as a [`ByteStream`], kept shared so the handler can drain what the runtime left.
fn shared(body: Arc<Mutex<BodyDataStream>>) -> ByteStream {
    Box::pin(async_stream::stream! {
        loop {
            let next = body.lock().await.next().await;
            match next {
                None => break,
                Some(Ok(chunk)) => yield Ok(chunk),
                Some(Err(e)) => {
                    yield Err(std::io::Error::other(e));
                    break;
                }
            }
        }
    })
}

pub(crate) async fn get<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ArchiveQuery>,
) -> Result<Response, HttpError> {
    let stream = st.backend.archive_dir(&id, &q.path, q.gzip).await?;
    let mut resp = Body::from_stream(stream).into_response();
    let kind = match q.gzip {
        true => "application/gzip",
        false => "application/x-tar",
    };
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(kind));
    Ok(resp)
}
