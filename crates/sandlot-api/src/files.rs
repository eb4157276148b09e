//! Workspace file routes. Bodies are streamed both ways: an upload goes to the runtime chunk by
//! chunk as it arrives, a download is read from the open file as the client takes it. Paths are
//! passed to the runtime as the client sent them; the runtime resolves them inside the sandbox
//! root and refuses what escapes it.

use crate::backend::Backend;
use crate::error::HttpError;
use crate::extract::{declared_length, discard, discard_stream, ApiPath, ApiQuery};
use crate::govern::NameOwner;
use crate::AppState;
use axum::body::{Body, BodyDataStream};
use axum::extract::State;
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use sandlot_runtime::ByteStream;
use sandlot_types::{ErrorCode, FileEntry};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::io::AsyncReadExt;
use tokio::sync::Mutex;
use tokio_util::io::ReaderStream;

/// `GET /v1/sandboxes/{id}/files` response.
#[derive(Debug, Serialize, Deserialize)]
pub struct FileList {
    pub entries: Vec<FileEntry>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ListQuery {
    /// Directory to list, relative to the workspace root; the root when absent.
    #[serde(default)]
    path: String,
    #[serde(default)]
    recursive: bool,
}

fn file_too_large(limit: u64) -> HttpError {
    HttpError::new(
        ErrorCode::FileTooLarge,
        format!("the file is larger than the {limit} bytes this server accepts"),
    )
}

pub(crate) async fn put<B: Backend>(
    State(st): State<AppState<B>>,
    caller: crate::govern::Caller,
    ApiPath((id, path)): ApiPath<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, HttpError> {
    let bytes = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    file_gate(&st, &caller, &id, &path, Some(bytes)).await?;
    upload(st, headers, body, move |b, stream| async move {
        let written = b.write_file(&id, &path, stream).await;
        // A sandbox deleted while its file was being written: its workspace vanished under
        // the write ("no such file", "no workspace"); the sandbox's own state is the answer.
        match written {
            Err(e) if matches!(e.code, ErrorCode::FileNotFound | ErrorCode::SandboxFailed) => {
                match b.get_sandbox(&id).await {
                    Err(gone) => Err(gone),
                    Ok(_) => Err(e),
                }
            }
            other => other,
        }
    })
    .await
}

/// `PUT /v1/volumes/{name}/files/{*path}`.
pub(crate) async fn put_volume<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath((name, path)): ApiPath<(String, String)>,
    NameOwner(owner): NameOwner,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, HttpError> {
    upload(st, headers, body, move |b, stream| async move {
        b.write_volume_file(&owner, &name, &path, stream).await
    })
    .await
}

/// An upload to wherever `write` puts it: the size limit checked on the declared length and
/// on the bytes as they arrive, the rest of a refused body drained.
async fn upload<B, W, F>(
    st: AppState<B>,
    headers: HeaderMap,
    body: Body,
    write: W,
) -> Result<Response, HttpError>
where
    B: Backend,
    W: FnOnce(B, ByteStream) -> F,
    F: std::future::Future<Output = Result<FileEntry, sandlot_types::ApiError>>,
{
    let limit = st.cfg.max_file_bytes;
    if declared_length(&headers).is_some_and(|len| len > limit) {
        discard(body).await;
        return Err(file_too_large(limit));
    }
    let exceeded = Arc::new(AtomicBool::new(false));
    let body = Arc::new(Mutex::new(body.into_data_stream()));
    let written = write(
        st.backend.clone(),
        limited_stream(body.clone(), limit, exceeded.clone()),
    )
    .await;
    // Whatever the runtime left unread (it refused the file, or the limit cut it) is read and
    // dropped, so the client gets this response rather than a reset connection.
    discard_stream(&mut *body.lock().await).await;
    // The runtime sees an over-limit upload as a failed read of the body; say what it was.
    if exceeded.load(Ordering::SeqCst) {
        return Err(file_too_large(limit));
    }
    Ok((StatusCode::CREATED, Json(written?)).into_response())
}

/// The body as a [`ByteStream`] that fails once more than `limit` bytes have arrived, setting
/// `exceeded` so the handler can answer `file_too_large`. The body stays shared so the handler
/// can drain what the runtime did not read.
fn limited_stream(
    body: Arc<Mutex<BodyDataStream>>,
    limit: u64,
    exceeded: Arc<AtomicBool>,
) -> ByteStream {
    Box::pin(async_stream::stream! {
        let mut seen: u64 = 0;
        loop {
            let next = body.lock().await.next().await;
            let Some(chunk) = next else { break };
            match chunk {
                Err(e) => {
                    yield Err(std::io::Error::other(e));
                    break;
                }
                Ok(chunk) => {
                    seen += chunk.len() as u64;
                    if seen > limit {
                        exceeded.store(true, Ordering::SeqCst);
                        yield Err(std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!("upload larger than {limit} bytes"),
                        ));
                        break;
                    }
                    yield Ok(chunk);
                }
            }
        }
    })
}

pub(crate) async fn get<B: Backend>(
    State(st): State<AppState<B>>,
    caller: crate::govern::Caller,
    ApiPath((id, path)): ApiPath<(String, String)>,
) -> Result<Response, HttpError> {
    file_gate(&st, &caller, &id, &path, None).await?;
    let (size, file) = st.backend.read_file(&id, &path).await?;
    if st.gov.is_none() {
        return download((size, file));
    }
    // Downloads leave the sandbox like output does: scanned, and redacted or withheld as the
    // policy says. Files past the scan bound go out unscanned (documented).
    if size > MAX_SCANNED_DOWNLOAD {
        return download((size, file));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(size)
        .read_to_end(&mut bytes)
        .await
        .map_err(|e| HttpError::internal(format!("reading the file: {e}")))?;
    match st.backend.guard_file(&id, &path, bytes).await {
        Some(bytes) => {
            let mut resp = Body::from(bytes).into_response();
            resp.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            Ok(resp)
        }
        None => Err(HttpError::new(
            ErrorCode::PolicyDenied,
            "the file was withheld: the guardrails found secrets in it and the policy withholds them",
        )),
    }
}

/// Downloads scanned by the guardrails at most (larger ones go out as they are).
const MAX_SCANNED_DOWNLOAD: u64 = 16 << 20;

/// The `read_file` / `write_file` gate of a sandbox's file (`bytes` for a write).
pub(crate) async fn file_gate<B: Backend>(
    st: &AppState<B>,
    caller: &crate::govern::Caller,
    id: &str,
    path: &str,
    bytes: Option<u64>,
) -> Result<(), HttpError> {
    st.svc()
        .gate_file(&caller.0, id, path, bytes)
        .await
        .map_err(HttpError)
}

/// `GET /v1/volumes/{name}/files/{*path}`.
pub(crate) async fn get_volume<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath((name, path)): ApiPath<(String, String)>,
    NameOwner(owner): NameOwner,
) -> Result<Response, HttpError> {
    let (size, file) = st.backend.read_volume_file(&owner, &name, &path).await?;
    if st.gov.is_none() || size > MAX_SCANNED_DOWNLOAD {
        return download((size, file));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(size)
        .read_to_end(&mut bytes)
        .await
        .map_err(|e| HttpError::internal(format!("reading the file: {e}")))?;
    match st.backend.guard_volume_file(&owner, &name, bytes).await {
        Some(bytes) => {
            let mut resp = Body::from(bytes).into_response();
            resp.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            Ok(resp)
        }
        None => Err(HttpError::new(
            ErrorCode::PolicyDenied,
            "the file was withheld: the guardrails found secrets in it and the policy withholds them",
        )),
    }
}

fn download((size, file): (u64, tokio::fs::File)) -> Result<Response, HttpError> {
    // `take` keeps the body to the length announced even if the file grows meanwhile.
    let body = Body::from_stream(ReaderStream::new(file.take(size)));
    let mut resp = body.into_response();
    let headers = resp.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    headers.insert(CONTENT_LENGTH, HeaderValue::from(size));
    Ok(resp)
}

pub(crate) async fn list<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath(id): ApiPath<String>,
    caller: crate::govern::Caller,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<FileList>, HttpError> {
    file_gate(&st, &caller, &id, &q.path, None).await?;
    let entries = st.backend.list_files(&id, &q.path, q.recursive).await?;
    Ok(Json(FileList { entries }))
}

/// `GET /v1/volumes/{name}/files`.
pub(crate) async fn list_volume<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath(name): ApiPath<String>,
    NameOwner(owner): NameOwner,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<FileList>, HttpError> {
    let entries = st
        .backend
        .list_volume_files(&owner, &name, &q.path, q.recursive)
        .await?;
    Ok(Json(FileList { entries }))
}

/// `DELETE /v1/volumes/{name}/files/{*path}`.
pub(crate) async fn delete_volume<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath((name, path)): ApiPath<(String, String)>,
    NameOwner(owner): NameOwner,
) -> Result<StatusCode, HttpError> {
    st.backend.delete_volume_file(&owner, &name, &path).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) async fn delete<B: Backend>(
    State(st): State<AppState<B>>,
    caller: crate::govern::Caller,
    ApiPath((id, path)): ApiPath<(String, String)>,
) -> Result<StatusCode, HttpError> {
    st.svc().delete_file(&caller.0, &id, &path).await?;
    Ok(StatusCode::NO_CONTENT)
}
