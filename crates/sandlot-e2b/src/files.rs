//! envd's HTTP side: `GET /files` (download), `POST /files` (upload, multipart with one or
//! more files, or one file as `application/octet-stream`) and `GET /health`.
//!
//! Paths: E2B's are absolute, with the user's home at `/home/user`; sandlot's workspace is
//! that home. `/home/user/a` (and `~/a`, `/workspace/a`, and relative `a`, which E2B resolves
//! against the home) name the workspace's `a`. Any other absolute path (`/tmp`, `/etc`) is
//! outside what sandlot's file API reaches and is refused with 400: the files of a sandbox
//! are its workspace; the rest of its filesystem is private to its processes. Every file
//! operation goes through the runtime's file API (fd-relative, no symlinks followed).
//! `username` is accepted and ignored: a sandbox has one user, whose files these are.
//!
//! Downloads pass the policy's `read_file` gate and the output guardrails (redacted or
//! withheld as the policy says, files up to 16 MiB, as `/v1`'s); each uploaded file passes
//! the `write_file` gate with the request's declared length (see `gates`).

use crate::auth::check_sandbox;
use crate::error::Failure;
use crate::gates::{Gate, MAX_SCANNED_DOWNLOAD};
use crate::Ctx;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Multipart, Query, Request, State};
use axum::http::header::{CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use bytes::Bytes;
use futures::StreamExt;
use sandlot_runtime::{ByteStream, RuntimeError};
use sandlot_types::{ApiError, ErrorCode, FileEntry};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

/// The user's home in E2B sandboxes: sandlot's workspace.
pub(crate) const HOME: &str = "/home/user";
/// Most files one multipart upload may carry.
const MAX_PARTS: usize = 1000;
/// Read size of downloads.
const CHUNK: usize = 64 * 1024;

pub(crate) fn routes() -> Router<Ctx> {
    Router::new()
        .route("/files", get(download).post(upload))
        .route("/health", get(health))
        // Uploads are bounded by the runtime's file size limit, not axum's 2 MB default.
        .layer(DefaultBodyLimit::disable())
}

/// An E2B path as a path relative to the workspace, or E2B's 400.
pub(crate) fn workspace_path(e2b: &str) -> Result<String, Failure> {
    let rest = if e2b == HOME || e2b == "~" || e2b == "/workspace" {
        ""
    } else if let Some(r) = e2b
        .strip_prefix("/home/user/")
        .or_else(|| e2b.strip_prefix("~/"))
        .or_else(|| e2b.strip_prefix("/workspace/"))
    {
        r
    } else if e2b.starts_with('/') {
        return Err(Failure::bad_request(format!(
            "path {e2b:?} is outside {HOME}: sandlot reaches only the sandbox's home directory \
             (its workspace) from outside"
        )));
    } else {
        e2b
    };
    Ok(rest.to_owned())
}

/// A workspace-relative path as E2B shows it: absolute, under `/home/user`.
pub(crate) fn e2b_path(rel: &str) -> String {
    let rel = rel.trim_start_matches('/');
    if rel.is_empty() {
        HOME.to_owned()
    } else {
        format!("{HOME}/{rel}")
    }
}

/// A runtime failure as envd's proxy reports it: a sandbox that is gone is a 502 whose message
/// says it "was not found" (what the SDKs turn into `SandboxNotRunningException`).
pub(crate) fn envd_failure(id: &str, e: RuntimeError) -> Failure {
    match e {
        RuntimeError::SandboxNotFound { .. } | RuntimeError::SandboxGone { .. } => Failure {
            status: StatusCode::BAD_GATEWAY,
            message: format!("The sandbox {id} was not found"),
            code: "sandbox_not_found",
        },
        e => Failure::runtime(e),
    }
}

#[derive(Deserialize)]
struct FileQuery {
    #[serde(default)]
    path: Option<String>,
}

fn query(
    q: Result<Query<FileQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<FileQuery, Failure> {
    q.map(|Query(q)| q)
        .map_err(|e| Failure::bad_request(format!("invalid query: {e}")))
}

async fn health(State(ctx): State<Ctx>, headers: HeaderMap) -> Response {
    let id = match check_sandbox(&ctx, &headers) {
        Ok(id) => id,
        Err(d) => return Failure::from(d).into_response(),
    };
    match ctx.rt.get_sandbox(&id).await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => envd_failure(&id, e).into_response(),
    }
}

async fn download(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    q: Result<Query<FileQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, Failure> {
    let id = check_sandbox(&ctx, &headers)?;
    let q = query(q)?;
    let path = q
        .path
        .as_deref()
        .filter(|p| !p.is_empty())
        .ok_or_else(|| Failure::bad_request("missing path"))?;
    let rel = workspace_path(path)?;
    let gate = Gate::open(&ctx, &headers, &id)
        .await
        .map_err(|e| envd_failure(&id, e))?;
    gate.read(&rel).map_err(|e| Failure::from_api(&e))?;
    let (size, mut file) = ctx
        .rt
        .read_file(&id, &rel)
        .await
        .map_err(|e| envd_failure(&id, e))?;
    // Downloads leave the sandbox as output does: scanned, and redacted or withheld as the
    // policy says (as `/v1`'s, up to the same bound).
    if gate.scans_downloads() && size <= MAX_SCANNED_DOWNLOAD {
        let mut bytes = Vec::with_capacity(size as usize);
        (&mut file)
            .take(size)
            .read_to_end(&mut bytes)
            .await
            .map_err(|e| {
                Failure::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("reading the file: {e}"),
                )
            })?;
        let Some(bytes) = ctx.rt.guard_file(&id, &rel, bytes).await else {
            return Err(Failure::from_api(&ApiError::new(
                ErrorCode::PolicyDenied,
                "the file was withheld: the guardrails found secrets in it and the policy withholds them",
            )));
        };
        return Ok((
            [
                (CONTENT_TYPE, "application/octet-stream".to_owned()),
                (CONTENT_LENGTH, bytes.len().to_string()),
            ],
            bytes,
        )
            .into_response());
    }
    let stream = async_stream_of(
        move |tx: mpsc::Sender<Result<Bytes, std::io::Error>>| async move {
            let mut buf = vec![0u8; CHUNK];
            loop {
                match file.read(&mut buf).await {
                    Ok(0) => break,
                    Ok(n) => {
                        if tx
                            .send(Ok(Bytes::copy_from_slice(&buf[..n])))
                            .await
                            .is_err()
                        {
                            break;
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        break;
                    }
                }
            }
        },
    );
    Ok((
        [
            (CONTENT_TYPE, "application/octet-stream".to_owned()),
            (CONTENT_LENGTH, size.to_string()),
        ],
        Body::from_stream(stream),
    )
        .into_response())
}

/// A stream fed by a task: `produce` gets the sending half.
fn async_stream_of<F, Fut>(produce: F) -> ByteStream
where
    F: FnOnce(mpsc::Sender<Result<Bytes, std::io::Error>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(produce(tx));
    Box::pin(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }))
}

fn written(entry: &FileEntry) -> Value {
    json!({ "name": entry.name, "type": "file", "path": e2b_path(&entry.path) })
}

async fn upload(
    State(ctx): State<Ctx>,
    q: Result<Query<FileQuery>, axum::extract::rejection::QueryRejection>,
    req: Request,
) -> Result<Response, Failure> {
    let id = check_sandbox(&ctx, req.headers())?;
    let q = query(q)?;
    if req.headers().contains_key(CONTENT_ENCODING) {
        return Err(Failure::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "compressed uploads are not supported: upload without gzip",
        ));
    }
    if req
        .headers()
        .keys()
        .any(|k| k.as_str().starts_with("x-metadata-"))
    {
        return Err(Failure::bad_request(
            "file metadata (X-Metadata-*) is not supported by sandlot",
        ));
    }
    let gate = Gate::open(&ctx, req.headers(), &id)
        .await
        .map_err(|e| envd_failure(&id, e))?;
    // What the write gates are told the upload carries: its declared length (a multipart
    // body's bounds each of its files), 0 when it declares none, as `/v1` does.
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let ctype = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    if ctype.starts_with("multipart/form-data") {
        use axum::extract::FromRequest;
        let mp = Multipart::from_request(req, &()).await.map_err(|e| {
            Failure::bad_request(format!("invalid multipart body: {}", e.body_text()))
        })?;
        return upload_multipart(&ctx, &gate, &id, q.path, mp, declared).await;
    }
    if ctype.starts_with("application/octet-stream") {
        let path = q
            .path
            .as_deref()
            .filter(|p| !p.is_empty())
            .ok_or_else(|| Failure::bad_request("missing path for an octet-stream upload"))?;
        let rel = workspace_path(path)?;
        gate.write(&rel, declared)
            .map_err(|e| Failure::from_api(&e))?;
        let body: ByteStream = Box::pin(
            req.into_body()
                .into_data_stream()
                .map(|r| r.map_err(std::io::Error::other)),
        );
        let entry = ctx
            .rt
            .write_file(&id, &rel, body)
            .await
            .map_err(|e| envd_failure(&id, e))?;
        return Ok(Json(vec![written(&entry)]).into_response());
    }
    Err(Failure::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "upload as multipart/form-data or application/octet-stream",
    ))
}

async fn upload_multipart(
    ctx: &Ctx,
    gate: &Gate,
    id: &str,
    path: Option<String>,
    mut mp: Multipart,
    declared: u64,
) -> Result<Response, Failure> {
    let path = path.filter(|p| !p.is_empty());
    let mut out = Vec::new();
    let mut parts = 0usize;
    loop {
        let field = match mp.next_field().await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                return Err(Failure::bad_request(format!(
                    "invalid multipart body: {}",
                    e.body_text()
                )))
            }
        };
        parts += 1;
        if parts > MAX_PARTS {
            return Err(Failure::bad_request(format!(
                "at most {MAX_PARTS} files per upload"
            )));
        }
        // The query's path names the file when there is one; else each part's file name is
        // its path (what E2B's SDKs send for several files).
        let target = match (&path, field.file_name()) {
            (Some(p), _) if parts == 1 => p.clone(),
            (_, Some(name)) if !name.is_empty() => name.to_owned(),
            _ => {
                return Err(Failure::bad_request(
                    "each file part needs a file name (its path), or give ?path= for one file",
                ))
            }
        };
        let rel = workspace_path(&target)?;
        // Files before a refused one stay written, as with any other failure mid-upload.
        gate.write(&rel, declared)
            .map_err(|e| Failure::from_api(&e))?;
        out.push(write_field(ctx, id, &rel, field).await?);
    }
    if out.is_empty() {
        return Err(Failure::bad_request("the upload has no file part"));
    }
    if path.is_some() && out.len() > 1 {
        // Only reachable after writing: say so rather than pretend the path applied to all.
        tracing::debug!(sandbox = %id, "?path= applied to the first of several files");
    }
    Ok(Json(out).into_response())
}

/// Streams one multipart field into a file through the runtime.
async fn write_field(
    ctx: &Ctx,
    id: &str,
    rel: &str,
    mut field: axum::extract::multipart::Field<'_>,
) -> Result<Value, Failure> {
    // The field borrows the request; the runtime wants an owned stream: a channel between.
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    let body: ByteStream = Box::pin(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }));
    let (rt, id2, rel2) = (ctx.rt.clone(), id.to_owned(), rel.to_owned());
    let writer = tokio::spawn(async move { rt.write_file(&id2, &rel2, body).await });
    let mut read_error = None;
    loop {
        match field.chunk().await {
            Ok(Some(chunk)) => {
                if tx.send(Ok(chunk)).await.is_err() {
                    break; // the writer stopped (too large, quota): its error says why
                }
            }
            Ok(None) => break,
            Err(e) => {
                let msg = e.body_text();
                let _ = tx.send(Err(std::io::Error::other(msg.clone()))).await;
                read_error = Some(msg);
                break;
            }
        }
    }
    drop(tx);
    let res = writer.await.map_err(|e| {
        Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("upload task: {e}"),
        )
    })?;
    match (res, read_error) {
        (Ok(entry), _) => Ok(written(&entry)),
        (Err(_), Some(msg)) => Err(Failure::bad_request(format!(
            "invalid multipart body: {msg}"
        ))),
        (Err(e), None) => Err(envd_failure(id, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e2b_paths_map_onto_the_workspace() {
        assert_eq!(workspace_path("/home/user").unwrap(), "");
        assert_eq!(workspace_path("/home/user/a/b.txt").unwrap(), "a/b.txt");
        assert_eq!(workspace_path("~/a").unwrap(), "a");
        assert_eq!(workspace_path("/workspace/a").unwrap(), "a");
        assert_eq!(workspace_path("a/b").unwrap(), "a/b");
        for bad in ["/etc/passwd", "/tmp/x", "/home/userx/a", "/home", "/"] {
            let e = workspace_path(bad).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{bad}");
        }
        // `..` is left to the runtime's check, which refuses it anywhere.
        assert_eq!(workspace_path("/home/user/../x").unwrap(), "../x");
        assert_eq!(e2b_path(""), "/home/user");
        assert_eq!(e2b_path("a/b"), "/home/user/a/b");
    }
}
