//! `GET /v1/artifacts/{sha256}`: the content of a file an execution created or changed,
//! streamed from the runtime's content-addressed store (it outlives the sandbox).

use crate::backend::Backend;
use crate::error::HttpError;
use crate::extract::ApiPath;
use crate::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use tokio::io::AsyncReadExt;
use tokio_util::io::ReaderStream;

pub(crate) async fn get<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath(sha256): ApiPath<String>,
) -> Result<Response, HttpError> {
    let (size, mime, file) = st.backend.open_artifact(&sha256).await?;
    // `take` keeps the body to the announced length.
    let body = Body::from_stream(ReaderStream::new(file.take(size)));
    let mut resp = body.into_response();
    let headers = resp.headers_mut();
    let mime = HeaderValue::from_str(&mime)
        .unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"));
    headers.insert(CONTENT_TYPE, mime);
    headers.insert(CONTENT_LENGTH, HeaderValue::from(size));
    Ok(resp)
}
