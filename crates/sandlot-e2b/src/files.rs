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
use std::collections::BTreeMap;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

pub(crate) mod signed;

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

/// `/files` without `E2b-Sandbox-Id`: what E2B's signed URLs (`download_url`, `upload_url`)
/// reach, since they carry no header. The signature is the only credential, and names the
/// sandbox (see `signed`).
pub(crate) fn signed_routes() -> Router<Ctx> {
    Router::new()
        .route("/files", get(download).post(upload))
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
    /// Accepted and ignored (one user per sandbox), except that a signature covers it.
    #[serde(default)]
    username: Option<String>,
    /// A signed URL's signature (`v1_...`, see `signed`).
    #[serde(default)]
    signature: Option<String>,
    /// A signed URL's expiry (Unix seconds), covered by the signature.
    #[serde(default)]
    signature_expiration: Option<String>,
}

/// Who a `/files` request is for: the sandbox its credentials open. Credentials in headers
/// (`auth::check_sandbox`) come first; without them a signed URL's signature (for `op`) is
/// checked, against the sandbox `E2b-Sandbox-Id` names, or without that header against the
/// live sandboxes. A refusal of a signature is 401 in envd's words and shape.
async fn authorize(
    ctx: &Ctx,
    headers: &HeaderMap,
    q: &FileQuery,
    op: signed::Op,
) -> Result<String, Response> {
    let Some(sig) = q.signature.as_deref() else {
        return check_sandbox(ctx, headers).map_err(|d| Failure::from(d).into_response());
    };
    let named = headers.contains_key(crate::auth::SANDBOX_ID_HEADER);
    if named {
        if let Ok(id) = check_sandbox(ctx, headers) {
            return Ok(id);
        }
    }
    let claim = signed::Claim {
        path: q.path.as_deref().unwrap_or(""),
        op,
        user: q.username.as_deref().unwrap_or(""),
        signature: sig,
        expiration: q.signature_expiration.as_deref(),
    };
    let candidates = if named {
        headers
            .get(crate::auth::SANDBOX_ID_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(|s| vec![s.trim().to_owned()])
            .unwrap_or_default()
    } else {
        ctx.rt
            .list_sandboxes(false)
            .await
            .map(|l| l.into_iter().map(|s| s.id).collect())
            .unwrap_or_default()
    };
    signed::verify(ctx, &claim, &candidates).map_err(signed::Refused::into_response)
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
        // A paused sandbox's envd does not answer, as E2B's proxy says of one: the SDKs'
        // `is_running()` reads this 502 as false (`connect` resumes it).
        Ok(sb) if sb.state == sandlot_types::SandboxState::Paused => Failure {
            status: StatusCode::BAD_GATEWAY,
            message: format!("The sandbox {id} is paused"),
            code: "sandbox_paused",
        }
        .into_response(),
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => envd_failure(&id, e).into_response(),
    }
}

async fn download(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    q: Result<Query<FileQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let q = match query(q) {
        Ok(q) => q,
        Err(f) => return f.into_response(),
    };
    let id = match authorize(&ctx, &headers, &q, signed::Op::Read).await {
        Ok(id) => id,
        Err(r) => return r,
    };
    let gzip = accepts_gzip(&headers);
    match download_file(&ctx, &headers, &id, q).await {
        Ok((body, size)) => send(body, size, gzip),
        Err(f) => f.into_response(),
    }
}

/// Whether the client takes a gzip body (`Accept-Encoding: gzip`, the SDKs' `gzip=True`).
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(axum::http::header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let name = parts.next().unwrap_or("");
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            name.eq_ignore_ascii_case("gzip") && !refused
        })
}

/// A download's body as it is sent: as is, or gzip-compressed as it streams.
fn send(body: ByteStream, size: Option<u64>, gzip: bool) -> Response {
    if gzip {
        return (
            [
                (CONTENT_TYPE, "application/octet-stream".to_owned()),
                (CONTENT_ENCODING, "gzip".to_owned()),
                (axum::http::header::VARY, "Accept-Encoding".to_owned()),
            ],
            Body::from_stream(gzip_stream(body)),
        )
            .into_response();
    }
    let mut resp = Body::from_stream(body).into_response();
    let h = resp.headers_mut();
    h.insert(
        CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/octet-stream"),
    );
    if let Some(size) = size {
        h.insert(CONTENT_LENGTH, size.into());
    }
    resp
}

/// Compresses a stream with gzip (fast level: downloads are bounded by the network, not
/// the ratio).
fn gzip_stream(mut body: ByteStream) -> ByteStream {
    use flate2::write::GzEncoder;
    use std::io::Write;
    Box::pin(async_stream::stream! {
        let mut enc = GzEncoder::new(Vec::new(), flate2::Compression::fast());
        while let Some(chunk) = body.next().await {
            match chunk.and_then(|c| enc.write_all(&c)) {
                Ok(()) => {
                    let out = std::mem::take(enc.get_mut());
                    if !out.is_empty() {
                        yield Ok(Bytes::from(out));
                    }
                }
                Err(e) => {
                    yield Err(e);
                    return;
                }
            }
        }
        match enc.finish() {
            Ok(rest) => yield Ok(Bytes::from(rest)),
            Err(e) => yield Err(e),
        }
    })
}

/// Most decompressed bytes one piece of a gzip upload may turn into at once: the input is
/// fed in small pieces so a compression bomb grows memory by at most this much before the
/// runtime's size limit stops the upload.
const GUNZIP_PIECE: usize = 4 * 1024;

/// Decompresses a gzip request body (`Content-Encoding: gzip`) as it streams; a corrupt or
/// truncated body fails the upload (nothing is written).
fn gunzip_stream(mut body: ByteStream) -> ByteStream {
    use flate2::write::MultiGzDecoder;
    use std::io::Write;
    Box::pin(async_stream::stream! {
        let mut dec = MultiGzDecoder::new(Vec::new());
        while let Some(chunk) = body.next().await {
            let chunk = match chunk {
                Ok(c) => c,
                Err(e) => {
                    yield Err(e);
                    return;
                }
            };
            for piece in chunk.chunks(GUNZIP_PIECE) {
                if let Err(e) = dec.write_all(piece) {
                    yield Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("invalid gzip body: {e}"),
                    ));
                    return;
                }
                let out = std::mem::take(dec.get_mut());
                if !out.is_empty() {
                    yield Ok(Bytes::from(out));
                }
            }
        }
        match dec.try_finish() {
            Ok(()) => {
                let out = std::mem::take(dec.get_mut());
                if !out.is_empty() {
                    yield Ok(Bytes::from(out));
                }
            }
            Err(e) => yield Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("invalid gzip body: {e}"),
            )),
        }
    })
}

/// The file a download names, after its gates: its size when known and its bytes.
async fn download_file(
    ctx: &Ctx,
    headers: &HeaderMap,
    id: &str,
    q: FileQuery,
) -> Result<(ByteStream, Option<u64>), Failure> {
    let (ctx, id) = (ctx.clone(), id.to_owned());
    let path = q
        .path
        .as_deref()
        .filter(|p| !p.is_empty())
        .ok_or_else(|| Failure::bad_request("missing path"))?;
    let rel = workspace_path(path)?;
    let gate = Gate::open(&ctx, headers, &id)
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
        let len = bytes.len() as u64;
        let body: ByteStream = Box::pin(futures::stream::once(async move {
            Ok::<_, std::io::Error>(Bytes::from(bytes))
        }));
        return Ok((body, Some(len)));
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
    Ok((stream, Some(size)))
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

fn written(entry: &FileEntry, metadata: &Metadata) -> Value {
    let mut v = json!({ "name": entry.name, "type": "file", "path": e2b_path(&entry.path) });
    if !metadata.is_empty() {
        v["metadata"] = json!(metadata);
    }
    v
}

/// File metadata of an upload: `X-Metadata-<key>: <value>` headers, stored as the file's
/// `user.e2b.<key>` attributes.
type Metadata = BTreeMap<String, String>;
/// Most metadata entries per upload, longest key and value, and most bytes in all: xattrs
/// live in the inode (btrfs keeps them within a leaf), so a file's metadata stays small.
pub(crate) const MAX_METADATA_KEYS: usize = 32;
pub(crate) const MAX_METADATA_KEY: usize = 128;
pub(crate) const MAX_METADATA_VALUE: usize = 1024;
pub(crate) const MAX_METADATA_TOTAL: usize = 8 * 1024;
const METADATA_HEADER: &str = "x-metadata-";

/// The upload's metadata from its headers (keys lower-cased, as header names are), checked:
/// keys are HTTP tokens (header names are), values printable ASCII, within the bounds above.
fn metadata_of(headers: &HeaderMap) -> Result<Metadata, Failure> {
    let mut out = Metadata::new();
    let mut total = 0usize;
    for (name, value) in headers {
        let Some(key) = name.as_str().strip_prefix(METADATA_HEADER) else {
            continue;
        };
        if key.is_empty() {
            return Err(Failure::bad_request(
                "a metadata key is empty (X-Metadata-)",
            ));
        }
        if key.len() > MAX_METADATA_KEY {
            return Err(Failure::bad_request(format!(
                "metadata key {:?}... is longer than {MAX_METADATA_KEY} bytes",
                &key[..32]
            )));
        }
        let bytes = value.as_bytes();
        if !bytes.iter().all(|b| (0x20..=0x7e).contains(b)) {
            return Err(Failure::bad_request(format!(
                "metadata value of {key:?} must be printable ASCII"
            )));
        }
        if bytes.len() > MAX_METADATA_VALUE {
            return Err(Failure::bad_request(format!(
                "metadata value of {key:?} is longer than {MAX_METADATA_VALUE} bytes"
            )));
        }
        total += key.len() + bytes.len();
        let value = String::from_utf8_lossy(bytes).into_owned();
        if out.insert(key.to_owned(), value).is_some() {
            return Err(Failure::bad_request(format!(
                "metadata key {key:?} is given more than once"
            )));
        }
        if out.len() > MAX_METADATA_KEYS {
            return Err(Failure::bad_request(format!(
                "at most {MAX_METADATA_KEYS} metadata entries per file"
            )));
        }
        if total > MAX_METADATA_TOTAL {
            return Err(Failure::bad_request(format!(
                "file metadata is larger than {MAX_METADATA_TOTAL} bytes in all"
            )));
        }
    }
    Ok(out)
}

async fn upload(
    State(ctx): State<Ctx>,
    q: Result<Query<FileQuery>, axum::extract::rejection::QueryRejection>,
    req: Request,
) -> Response {
    let q = match query(q) {
        Ok(q) => q,
        Err(f) => return f.into_response(),
    };
    let id = match authorize(&ctx, req.headers(), &q, signed::Op::Write).await {
        Ok(id) => id,
        Err(r) => return r,
    };
    upload_as(ctx, id, q, req)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn upload_as(ctx: Ctx, id: String, q: FileQuery, req: Request) -> Result<Response, Failure> {
    // envd's `Content-Encoding`: the whole body is gzip (the SDKs send it with octet-stream).
    let gzip = match req.headers().get(CONTENT_ENCODING).map(|v| v.as_bytes()) {
        None => false,
        Some(v) if v.eq_ignore_ascii_case(b"identity") => false,
        Some(v) if v.eq_ignore_ascii_case(b"gzip") => true,
        Some(_) => {
            return Err(Failure::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported Content-Encoding: send gzip or an uncompressed body",
            ))
        }
    };
    let metadata = metadata_of(req.headers())?;
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
        if gzip {
            return Err(Failure::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "a gzip body is taken with application/octet-stream uploads only",
            ));
        }
        use axum::extract::FromRequest;
        let mp = Multipart::from_request(req, &()).await.map_err(|e| {
            Failure::bad_request(format!("invalid multipart body: {}", e.body_text()))
        })?;
        return upload_multipart(&ctx, &gate, &id, q.path, mp, declared, &metadata).await;
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
        let mut body: ByteStream = Box::pin(
            req.into_body()
                .into_data_stream()
                .map(|r| r.map_err(std::io::Error::other)),
        );
        if gzip {
            body = gunzip_stream(body);
        }
        let entry = ctx
            .rt
            .write_file_with_metadata(&id, &rel, body, &metadata)
            .await
            .map_err(|e| envd_failure(&id, e))?;
        return Ok(Json(vec![written(&entry, &metadata)]).into_response());
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
    metadata: &Metadata,
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
        out.push(write_field(ctx, id, &rel, field, metadata).await?);
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
    metadata: &Metadata,
) -> Result<Value, Failure> {
    // The field borrows the request; the runtime wants an owned stream: a channel between.
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    let body: ByteStream = Box::pin(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }));
    let (rt, id2, rel2) = (ctx.rt.clone(), id.to_owned(), rel.to_owned());
    let meta = metadata.clone();
    let writer =
        tokio::spawn(async move { rt.write_file_with_metadata(&id2, &rel2, body, &meta).await });
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
        (Ok(entry), _) => Ok(written(&entry, metadata)),
        (Err(_), Some(msg)) => Err(Failure::bad_request(format!(
            "invalid multipart body: {msg}"
        ))),
        (Err(e), None) => Err(envd_failure(id, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A compression bomb inflates in bounded pieces (so the runtime's size limit stops it
    /// before memory grows), and a corrupt or truncated body is an error.
    #[tokio::test]
    async fn gzip_bodies_inflate_in_bounded_pieces() {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..256 {
            enc.write_all(&zeros).unwrap();
        }
        let bomb = enc.finish().unwrap();
        assert!(bomb.len() < 1 << 20);
        let input: ByteStream = Box::pin(futures::stream::iter(
            bomb.chunks(64 * 1024)
                .map(|c| Ok(Bytes::copy_from_slice(c)))
                .collect::<Vec<_>>(),
        ));
        let mut out = gunzip_stream(input);
        let (mut total, mut largest) = (0usize, 0usize);
        while let Some(chunk) = out.next().await {
            let c = chunk.unwrap();
            total += c.len();
            largest = largest.max(c.len());
        }
        assert_eq!(total, 256 << 20);
        // deflate's ratio is at most ~1032:1: a 4 KiB piece inflates to ~4 MiB at most.
        assert!(largest <= GUNZIP_PIECE * 1100, "{largest}");

        let truncated: ByteStream = Box::pin(futures::stream::iter(vec![Ok(
            Bytes::copy_from_slice(&bomb[..bomb.len() / 2]),
        )]));
        let results: Vec<_> = gunzip_stream(truncated).collect().await;
        assert!(results.last().unwrap().is_err());
        let garbage: ByteStream = Box::pin(futures::stream::iter(vec![Ok(Bytes::from_static(
            b"not gzip",
        ))]));
        let results: Vec<_> = gunzip_stream(garbage).collect().await;
        assert!(results.iter().any(Result::is_err));
    }

    #[test]
    fn accept_encoding_is_parsed() {
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(axum::http::header::ACCEPT_ENCODING, v.parse().unwrap());
            accepts_gzip(&m)
        };
        assert!(h("gzip"));
        assert!(h("br, GZIP;q=0.5"));
        assert!(!h("gzip;q=0"));
        assert!(!h("identity"));
        assert!(!h("x-gzip"));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    #[test]
    fn metadata_headers_are_bounded() {
        let mut m = HeaderMap::new();
        m.insert("x-metadata-author", "ada".parse().unwrap());
        m.insert("content-type", "x".parse().unwrap());
        assert_eq!(
            metadata_of(&m).unwrap(),
            Metadata::from([("author".into(), "ada".into())])
        );
        let mut m = HeaderMap::new();
        for i in 0..=MAX_METADATA_KEYS {
            m.insert(
                axum::http::HeaderName::from_bytes(format!("x-metadata-k{i}").as_bytes()).unwrap(),
                "v".parse().unwrap(),
            );
        }
        assert_eq!(metadata_of(&m).unwrap_err().status, StatusCode::BAD_REQUEST);
        let mut m = HeaderMap::new();
        m.insert(
            "x-metadata-k",
            axum::http::HeaderValue::from_bytes(b"caf\xe9").unwrap(),
        );
        assert_eq!(metadata_of(&m).unwrap_err().status, StatusCode::BAD_REQUEST);
    }

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
