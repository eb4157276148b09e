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
    caller: crate::govern::Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ArchiveQuery>,
    body: Body,
) -> Result<Json<ArchiveSummary>, HttpError> {
    crate::files::file_gate(&st, &caller, &id, &q.path, Some(0)).await?;
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

/// Archives up to this size (uncompressed) are scanned by the guardrails before they leave;
/// larger ones leave unscanned (documented), as large file downloads do.
const MAX_SCANNED_ARCHIVE: usize = 64 << 20;

/// The archive, whole, after the guardrails: a tar cannot be redacted (its sizes would lie),
/// so one with findings the policy does not pass is withheld (403 `policy_denied`). Built
/// uncompressed to scan, compressed here when asked.
async fn scanned_archive<B: Backend>(
    st: &AppState<B>,
    id: &str,
    q: &ArchiveQuery,
) -> Result<Response, HttpError> {
    let mut stream = st.backend.archive_dir(id, &q.path, false).await?;
    let mut tar = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| HttpError::internal(format!("packing the archive: {e}")))?;
        tar.extend_from_slice(&chunk);
        if tar.len() > MAX_SCANNED_ARCHIVE {
            // Too large to hold: the rest streams after what was read, unscanned.
            let head = futures::stream::once(async move { Ok(bytes::Bytes::from(tar)) });
            let rest: ByteStream = stream;
            let all = head.chain(rest);
            return Ok(if q.gzip {
                Body::from_stream(gzip_stream(Box::pin(all))).into_response()
            } else {
                Body::from_stream(all).into_response()
            });
        }
    }
    if !st.backend.guard_whole(id, &tar).await {
        return Err(HttpError::new(
            sandlot_types::ErrorCode::PolicyDenied,
            "the archive was withheld: the guardrails found secrets in it (download its files \
             one by one: they come back redacted)",
        ));
    }
    let body = if q.gzip {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&tar)
            .and_then(|()| enc.finish())
            .map_err(|e| HttpError::internal(format!("compressing the archive: {e}")))?
    } else {
        tar
    };
    Ok(Body::from(body).into_response())
}

/// `stream` gzip-compressed, chunk by chunk.
fn gzip_stream(mut stream: ByteStream) -> ByteStream {
    Box::pin(async_stream::stream! {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(c) => {
                    if let Err(e) = enc.write_all(&c) {
                        yield Err(e);
                        return;
                    }
                    let out = std::mem::take(enc.get_mut());
                    if !out.is_empty() {
                        yield Ok(bytes::Bytes::from(out));
                    }
                }
                Err(e) => {
                    yield Err(e);
                    return;
                }
            }
        }
        match enc.finish() {
            Ok(rest) => yield Ok(bytes::Bytes::from(rest)),
            Err(e) => yield Err(e),
        }
    })
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
    caller: crate::govern::Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ArchiveQuery>,
) -> Result<Response, HttpError> {
    crate::files::file_gate(&st, &caller, &id, &q.path, None).await?;
    let mut resp = if st.gov.is_some() {
        scanned_archive(&st, &id, &q).await?
    } else {
        let stream = st.backend.archive_dir(&id, &q.path, q.gzip).await?;
        Body::from_stream(stream).into_response()
    };
    let kind = match q.gzip {
        true => "application/gzip",
        false => "application/x-tar",
    };
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(kind));
    Ok(resp)
}
