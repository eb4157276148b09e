//! The Connect protocol (connectrpc.com/docs/protocol) with the JSON codec, the way envd
//! speaks it to the E2B SDKs, over HTTP/1.1 and cleartext HTTP/2 alike.
//!
//! Unary calls are `POST /<package>.<Service>/<Method>` with an `application/json` body; the
//! answer is the response message as JSON, or an error `{"code", "message"}` with the HTTP
//! status the Connect spec gives its code. Server-streaming calls send one enveloped message
//! (`application/connect+json`: a flag byte, a 4-byte big-endian length, the JSON) and get
//! HTTP 200 with a stream of envelopes, closed by an end-of-stream envelope (flag `0x02`)
//! carrying `{}` or `{"error": {...}}`; errors in a stream always travel there.
//!
//! Written here rather than taken from a crate: the Rust Connect implementations are built
//! around generated protobuf types and their own servers, while envd's surface is a dozen
//! JSON messages behind routes the E2B layer already authenticates and dispatches; what is
//! needed is the framing, the error format and the deadline, a few hundred lines.
//!
//! Bounds: a request message is at most [`MAX_MESSAGE`] bytes (larger: `resource_exhausted`,
//! as connect-go answers); a server stream's request holds exactly one envelope, uncompressed
//! (anything else: `invalid_argument`/`unimplemented`), a client stream's any number, each
//! bounded the same way and read as it arrives; `Connect-Timeout-Ms` (at most 10 digits, as the
//! spec says) bounds the call, past it the call ends with `deadline_exceeded`.

use crate::auth::Denied;
use crate::Ctx;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures::stream::{BoxStream, StreamExt};
use sandlot_types::{ApiError, ErrorCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// Largest request message accepted, in bytes (envd's requests are a path or a command line).
pub(crate) const MAX_MESSAGE: usize = 1 << 20;
/// How much of an oversized body is read (and dropped) before answering, and for how long.
const DRAIN_MAX: usize = 16 << 20;
const DRAIN_TIME: Duration = Duration::from_secs(5);
/// Most and least keepalive interval a client may ask for (`Keepalive-Ping-Interval`, seconds).
const KEEPALIVE_BOUNDS: (u64, u64) = (1, 600);

const JSON: &str = "application/json";
const STREAM_JSON: &str = "application/connect+json";
/// The end-of-stream flag of an envelope.
const END_STREAM: u8 = 0x02;
/// The compressed flag of an envelope.
const COMPRESSED: u8 = 0x01;

/// The Connect protocol needs no routes of its own: each service's module routes its methods
/// through [`unary`] and [`server_stream`].
pub(crate) fn routes() -> Router<Ctx> {
    Router::new()
}

/// A Connect error code (connectrpc.com/docs/protocol#error-codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Code {
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
}

impl Code {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Code::Unknown => "unknown",
            Code::InvalidArgument => "invalid_argument",
            Code::DeadlineExceeded => "deadline_exceeded",
            Code::NotFound => "not_found",
            Code::AlreadyExists => "already_exists",
            Code::PermissionDenied => "permission_denied",
            Code::ResourceExhausted => "resource_exhausted",
            Code::FailedPrecondition => "failed_precondition",
            Code::Unimplemented => "unimplemented",
            Code::Internal => "internal",
            Code::Unavailable => "unavailable",
            Code::DataLoss => "data_loss",
            Code::Unauthenticated => "unauthenticated",
        }
    }

    /// The HTTP status of a unary error with this code, as the spec maps them.
    fn status(self) -> StatusCode {
        match self {
            Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
            Code::InvalidArgument | Code::FailedPrecondition => StatusCode::BAD_REQUEST,
            Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::AlreadyExists => StatusCode::CONFLICT,
            Code::PermissionDenied => StatusCode::FORBIDDEN,
            Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        }
    }
}

/// A failed call: a Connect code and a message safe to show the client.
#[derive(Debug, Clone)]
pub(crate) struct RpcError {
    pub(crate) code: Code,
    pub(crate) message: String,
}

impl RpcError {
    pub(crate) fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(Code::InvalidArgument, message)
    }

    fn body(&self) -> serde_json::Value {
        serde_json::json!({"code": self.code.as_str(), "message": self.message})
    }

    /// The error as a unary response.
    fn response(&self) -> Response {
        let mut resp = (self.code.status(), self.body().to_string()).into_response();
        resp.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(JSON));
        resp
    }
}

impl From<Denied> for RpcError {
    fn from(d: Denied) -> Self {
        let code = match d.status {
            StatusCode::UNAUTHORIZED => Code::Unauthenticated,
            StatusCode::FORBIDDEN => Code::PermissionDenied,
            StatusCode::NOT_FOUND => Code::NotFound,
            StatusCode::BAD_REQUEST => Code::InvalidArgument,
            // A sandbox that is not there (or not the caller's), as E2B's proxy says it.
            StatusCode::BAD_GATEWAY => Code::Unavailable,
            _ => Code::Unknown,
        };
        // Connect's `code` is Connect's: a refused token's stable code leads the message.
        match (code, d.code) {
            (Code::Unauthenticated, Some(c)) => Self::new(code, format!("{c}: {}", d.message)),
            _ => Self::new(code, d.message),
        }
    }
}

impl From<ApiError> for RpcError {
    fn from(e: ApiError) -> Self {
        use ErrorCode as C;
        let code = match e.code {
            C::InvalidRequest | C::InvalidArgument | C::InvalidPath | C::NotARegularFile => {
                Code::InvalidArgument
            }
            C::InvalidArchive => Code::InvalidArgument,
            C::SandboxNotFound
            | C::SandboxGone
            | C::ExecutionNotFound
            | C::TemplateNotFound
            | C::FileNotFound
            | C::SnapshotNotFound
            | C::VolumeNotFound => Code::NotFound,
            C::PayloadTooLarge
            | C::FileTooLarge
            | C::WorkspaceFull
            | C::QuotaExceeded
            | C::InsufficientStorage
            | C::CapacityExhausted
            | C::SandboxBusy => Code::ResourceExhausted,
            C::TemplateNotReady | C::SandboxFailed | C::CaptureFailed | C::VolumeInUse => {
                Code::FailedPrecondition
            }
            C::StateCorrupt => Code::DataLoss,
            C::Internal => {
                tracing::warn!(message = %e.message, "internal error in an E2B RPC");
                return Self::new(Code::Internal, "internal server error");
            }
            // Codes this layer does not name (added later): by their HTTP status.
            #[allow(unreachable_patterns)]
            other => match StatusCode::from_u16(other.http_status())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            {
                StatusCode::BAD_REQUEST => Code::InvalidArgument,
                StatusCode::NOT_FOUND => Code::NotFound,
                StatusCode::FORBIDDEN => Code::PermissionDenied,
                StatusCode::CONFLICT => Code::FailedPrecondition,
                StatusCode::BAD_GATEWAY | StatusCode::SERVICE_UNAVAILABLE => Code::Unavailable,
                _ => Code::Unknown,
            },
        };
        Self::new(code, e.message)
    }
}

impl From<sandlot_runtime::RuntimeError> for RpcError {
    fn from(e: sandlot_runtime::RuntimeError) -> Self {
        use sandlot_runtime::RuntimeError as R;
        match &e {
            // What E2B's proxy answers for a sandbox that is gone, in the words the SDKs look
            // for ("was not found"), so they raise their sandbox-not-running exception.
            R::SandboxNotFound { id } | R::SandboxGone { id, .. } => {
                Self::new(Code::Unavailable, format!("The sandbox {id} was not found"))
            }
            _ => sandlot_service::api_error(e).into(),
        }
    }
}

/// What a call knows besides its message: the sandbox it is for, and its headers.
pub(crate) struct Call {
    pub(crate) sandbox: String,
    pub(crate) headers: HeaderMap,
    /// When the client's `Connect-Timeout-Ms` runs out.
    pub(crate) deadline: Option<Instant>,
}

impl Call {
    /// The keepalive interval the client asked for (`Keepalive-Ping-Interval`, seconds).
    fn keepalive(&self) -> Option<Duration> {
        let secs: u64 = self
            .headers
            .get("keepalive-ping-interval")?
            .to_str()
            .ok()?
            .trim()
            .parse()
            .ok()?;
        Some(Duration::from_secs(
            secs.clamp(KEEPALIVE_BOUNDS.0, KEEPALIVE_BOUNDS.1),
        ))
    }
}

/// The checks every call starts with: the method, the content type, no compression, the
/// token; then the deadline and the body within [`MAX_MESSAGE`].
async fn open(ctx: &Ctx, req: Request, streaming: bool) -> Result<(Call, Bytes), RpcError> {
    let (parts, body) = req.into_parts();
    let call = check(ctx, &parts, streaming)?;
    let limit = MAX_MESSAGE + if streaming { 5 } else { 0 };
    let body = read_body(body, limit).await?;
    Ok((call, body))
}

/// The checks of every call before its body: POST, the content type, no compression, the
/// sandbox's credentials, the deadline.
fn check(ctx: &Ctx, req: &axum::http::request::Parts, streaming: bool) -> Result<Call, RpcError> {
    let want = if streaming { STREAM_JSON } else { JSON };
    if req.method != Method::POST {
        return Err(RpcError::new(
            Code::Unimplemented,
            format!("{} is not served: Connect calls are POST", req.method),
        ));
    }
    let headers = req.headers.clone();
    let ctype = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let base = ctype
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if base != want {
        return Err(RpcError::invalid(format!(
            "content type {ctype:?} is not served here: this method takes {want} (Connect, JSON codec)"
        )));
    }
    for h in ["content-encoding", "connect-content-encoding"] {
        if let Some(v) = headers.get(h) {
            if v.as_bytes() != b"identity" {
                return Err(RpcError::new(
                    Code::Unimplemented,
                    format!("{h} {v:?} is not supported: send uncompressed messages"),
                ));
            }
        }
    }
    let sandbox = crate::auth::check_sandbox(ctx, &headers)?;
    let deadline = match headers.get("connect-timeout-ms") {
        None => None,
        Some(v) => {
            let ms = v
                .to_str()
                .ok()
                .filter(|s| !s.is_empty() && s.len() <= 10 && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| {
                    RpcError::invalid("Connect-Timeout-Ms must be 1 to 10 decimal digits")
                })?;
            Some(Instant::now() + Duration::from_millis(ms))
        }
    };
    Ok(Call {
        sandbox,
        headers,
        deadline,
    })
}

/// The messages of a client stream, decoded one envelope at a time as the body arrives; at
/// most [`MAX_MESSAGE`] bytes each, uncompressed, no flags (a client sends no end-of-stream
/// envelope: its stream ends with the body). A malformed one ends the stream with its error.
pub(crate) type Incoming<T> = BoxStream<'static, Result<T, RpcError>>;

fn incoming<T: DeserializeOwned + Send + 'static>(body: Body) -> Incoming<T> {
    use http_body_util::BodyExt;
    let state = (body, Vec::<u8>::new(), false);
    futures::stream::unfold(state, |(mut body, mut buf, done)| async move {
        if done {
            return None;
        }
        loop {
            if buf.len() >= 5 {
                let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
                if len > MAX_MESSAGE {
                    return Some((Err(too_large()), (body, buf, true)));
                }
                if buf.len() >= 5 + len {
                    let rest = buf.split_off(5 + len);
                    let frame = std::mem::replace(&mut buf, rest);
                    let item = unwrap_envelope(&frame).and_then(decode::<T>);
                    let failed = item.is_err();
                    return Some((item, (body, buf, failed)));
                }
            }
            match body.frame().await {
                None if buf.is_empty() => return None,
                None => {
                    let e = RpcError::invalid(format!(
                        "malformed envelope: the request stream ended inside a message ({} bytes left)",
                        buf.len()
                    ));
                    return Some((Err(e), (body, buf, true)));
                }
                Some(Err(e)) => {
                    let e = RpcError::invalid(format!("reading the request body: {e}"));
                    return Some((Err(e), (body, buf, true)));
                }
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        buf.extend_from_slice(&data);
                    }
                }
            }
        }
    })
    .boxed()
}

/// A client-streaming call (`StreamInput`): `f` gets the request messages as they arrive and
/// answers one message; the answer is an enveloped message and the end-of-stream, or the
/// end-of-stream with the error. The call's deadline bounds the whole stream.
pub(crate) async fn client_stream<T, R, F, Fut>(ctx: Ctx, req: Request, f: F) -> Response
where
    T: DeserializeOwned + Send + 'static,
    R: Serialize,
    F: FnOnce(Ctx, Call, Incoming<T>) -> Fut,
    Fut: Future<Output = Result<R, RpcError>>,
{
    let answered = async {
        let (parts, body) = req.into_parts();
        let call = check(&ctx, &parts, true)?;
        let deadline = call.deadline;
        let fut = f(ctx.clone(), call, incoming::<T>(body));
        match deadline {
            None => fut.await,
            Some(d) => tokio::time::timeout_at(d, fut)
                .await
                .unwrap_or_else(|_| Err(deadline_exceeded())),
        }
    }
    .await;
    let frames = match answered {
        Ok(r) => {
            let json = serde_json::to_vec(&r).unwrap_or_else(|_| b"{}".to_vec());
            [
                envelope(0, &json),
                envelope(END_STREAM, &end_of_stream(None)),
            ]
            .concat()
        }
        Err(e) => envelope(END_STREAM, &end_of_stream(Some(&e))).to_vec(),
    };
    let mut resp = (StatusCode::OK, Body::from(frames)).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(STREAM_JSON));
    resp
}

/// Reads a request body of at most `limit` bytes. A larger one is refused with
/// `resource_exhausted` after the rest is read and dropped (up to [`DRAIN_MAX`] bytes within
/// [`DRAIN_TIME`]), so the client, still sending, reads the error instead of a reset
/// connection; past those bounds the connection is simply closed.
async fn read_body(body: Body, limit: usize) -> Result<Bytes, RpcError> {
    use http_body_util::BodyExt;
    let mut body = body;
    let mut buf = Vec::new();
    loop {
        match body.frame().await {
            None => return Ok(Bytes::from(buf)),
            Some(Err(e)) => {
                return Err(RpcError::invalid(format!("reading the request body: {e}")))
            }
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    buf.extend_from_slice(&data);
                    if buf.len() > limit {
                        break;
                    }
                }
            }
        }
    }
    let mut seen = buf.len();
    drop(buf);
    let _ = tokio::time::timeout(DRAIN_TIME, async {
        while seen < DRAIN_MAX {
            match body.frame().await {
                Some(Ok(frame)) => {
                    seen += frame.data_ref().map_or(0, |d| d.len());
                }
                _ => break,
            }
        }
    })
    .await;
    Err(too_large())
}

fn too_large() -> RpcError {
    RpcError::new(
        Code::ResourceExhausted,
        format!("message is larger than {MAX_MESSAGE} bytes"),
    )
}

/// The one message of a request stream: exactly one uncompressed envelope.
fn unwrap_envelope(body: &[u8]) -> Result<&[u8], RpcError> {
    if body.len() < 5 {
        return Err(RpcError::invalid(
            "malformed envelope: a request stream starts with a 5-byte envelope header",
        ));
    }
    let flags = body[0];
    if flags & COMPRESSED != 0 {
        return Err(RpcError::new(
            Code::Unimplemented,
            "compressed envelopes are not supported",
        ));
    }
    if flags != 0 {
        return Err(RpcError::invalid(format!(
            "malformed envelope: unexpected flags {flags:#04x} on a request message"
        )));
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    if len > MAX_MESSAGE {
        return Err(too_large());
    }
    let rest = &body[5..];
    if rest.len() < len {
        return Err(RpcError::invalid(format!(
            "malformed envelope: it announces {len} bytes and {} follow",
            rest.len()
        )));
    }
    if rest.len() > len {
        return Err(RpcError::invalid(
            "malformed envelope: a server-streaming call takes exactly one request message",
        ));
    }
    Ok(rest)
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, RpcError> {
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    serde_json::from_slice(bytes).map_err(|e| RpcError::invalid(format!("invalid message: {e}")))
}

/// Serves a unary call: checks, decodes the request, runs `f` within the deadline, encodes
/// its answer or error.
pub(crate) async fn unary<T, R, F, Fut>(ctx: Ctx, req: Request, f: F) -> Response
where
    T: DeserializeOwned,
    R: Serialize,
    F: FnOnce(Ctx, Call, T) -> Fut,
    Fut: Future<Output = Result<R, RpcError>>,
{
    let answer = async {
        let (call, body) = open(&ctx, req, false).await?;
        let msg: T = decode(&body)?;
        let deadline = call.deadline;
        let fut = f(ctx.clone(), call, msg);
        match deadline {
            None => fut.await,
            Some(d) => tokio::time::timeout_at(d, fut)
                .await
                .unwrap_or_else(|_| Err(deadline_exceeded())),
        }
    }
    .await;
    match answer.and_then(|r| {
        serde_json::to_vec(&r).map_err(|e| RpcError::new(Code::Internal, e.to_string()))
    }) {
        Ok(bytes) => {
            let mut resp = (StatusCode::OK, bytes).into_response();
            resp.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(JSON));
            resp
        }
        Err(e) => e.response(),
    }
}

pub(crate) fn deadline_exceeded() -> RpcError {
    RpcError::new(
        Code::DeadlineExceeded,
        "the call's deadline (Connect-Timeout-Ms) passed",
    )
}

/// The messages of a server stream; an `Err` ends the stream with that error.
pub(crate) type Messages<R> = BoxStream<'static, Result<R, RpcError>>;

/// Serves a server-streaming call. `f` answers the request with a stream of messages (or an
/// error, sent as the end of an otherwise empty stream). While the stream is idle for the
/// client's keepalive interval, `keepalive` is sent; at the deadline the stream ends with
/// `deadline_exceeded`.
pub(crate) async fn server_stream<T, R, F, Fut>(
    ctx: Ctx,
    req: Request,
    keepalive: Option<R>,
    f: F,
) -> Response
where
    T: DeserializeOwned,
    R: Serialize + Clone + Send + 'static,
    F: FnOnce(Ctx, Call, T) -> Fut,
    Fut: Future<Output = Result<Messages<R>, RpcError>>,
{
    let opened = async {
        let (call, body) = open(&ctx, req, true).await?;
        let msg: T = decode(unwrap_envelope(&body)?)?;
        let deadline = call.deadline;
        let interval = call.keepalive();
        let fut = f(ctx.clone(), call, msg);
        let messages = match deadline {
            None => fut.await?,
            Some(d) => tokio::time::timeout_at(d, fut)
                .await
                .unwrap_or_else(|_| Err(deadline_exceeded()))?,
        };
        Ok::<_, RpcError>((messages, deadline, interval))
    }
    .await;
    let body = match opened {
        Err(e) => {
            // A stream that fails before its first message: 415 for a wrong content type
            // would also be allowed, but one answer shape is simpler for every client.
            Body::from(envelope(END_STREAM, &end_of_stream(Some(&e))))
        }
        Ok((messages, deadline, interval)) => {
            let ka = keepalive.zip(interval);
            Body::from_stream(frames(messages, deadline, ka))
        }
    };
    let mut resp = (StatusCode::OK, body).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(STREAM_JSON));
    resp
}

/// The envelopes of a stream: each message, keepalives while idle, and the end-of-stream.
fn frames<R: Serialize + Clone + Send + 'static>(
    mut messages: Messages<R>,
    deadline: Option<Instant>,
    keepalive: Option<(R, Duration)>,
) -> BoxStream<'static, Result<Bytes, std::convert::Infallible>> {
    let s = async_stream(move |tx| async move {
        let far = Instant::now() + Duration::from_secs(100 * 365 * 86400);
        let deadline = deadline.unwrap_or(far);
        loop {
            let idle = keepalive
                .as_ref()
                .map(|(_, d)| Instant::now() + *d)
                .unwrap_or(far);
            let next = tokio::select! {
                m = messages.next() => m,
                _ = tokio::time::sleep_until(deadline) => {
                    let _ = tx.send(envelope(END_STREAM, &end_of_stream(Some(&deadline_exceeded())))).await;
                    return;
                }
                _ = tokio::time::sleep_until(idle) => {
                    if let Some((msg, _)) = &keepalive {
                        if let Ok(b) = serde_json::to_vec(msg) {
                            if tx.send(envelope(0, &b)).await.is_err() { return; }
                        }
                    }
                    continue;
                }
            };
            match next {
                None => {
                    let _ = tx.send(envelope(END_STREAM, &end_of_stream(None))).await;
                    return;
                }
                Some(Err(e)) => {
                    let _ = tx
                        .send(envelope(END_STREAM, &end_of_stream(Some(&e))))
                        .await;
                    return;
                }
                Some(Ok(m)) => {
                    let bytes = match serde_json::to_vec(&m) {
                        Ok(b) => b,
                        Err(e) => {
                            let e = RpcError::new(Code::Internal, e.to_string());
                            let _ = tx
                                .send(envelope(END_STREAM, &end_of_stream(Some(&e))))
                                .await;
                            return;
                        }
                    };
                    // A client that went away ends the stream (and drops `messages`).
                    if tx.send(envelope(0, &bytes)).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    s.map(Ok).boxed()
}

/// A stream fed by a task through a small channel: the task stops when the client goes away.
fn async_stream<F, Fut>(f: F) -> BoxStream<'static, Bytes>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Bytes>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    let task = tokio::spawn(f(tx));
    let guard = AbortOnDrop(task);
    futures::stream::unfold((rx, guard), |(mut rx, guard)| async move {
        rx.recv().await.map(|b| (b, (rx, guard)))
    })
    .boxed()
}

/// Aborts the task feeding a stream once the stream (the response body) is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn end_of_stream(err: Option<&RpcError>) -> Vec<u8> {
    let v = match err {
        None => serde_json::json!({}),
        Some(e) => serde_json::json!({"error": e.body()}),
    };
    v.to_string().into_bytes()
}

fn envelope(flags: u8, payload: &[u8]) -> Bytes {
    let mut b = Vec::with_capacity(5 + payload.len());
    b.push(flags);
    b.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    b.extend_from_slice(payload);
    Bytes::from(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_round_trip() {
        let e = envelope(0, b"{\"a\":1}");
        assert_eq!(&e[..5], &[0, 0, 0, 0, 7]);
        assert_eq!(unwrap_envelope(&e).unwrap(), b"{\"a\":1}");
    }

    #[test]
    fn malformed_envelopes_are_refused() {
        let short = unwrap_envelope(&[0, 0, 0]).unwrap_err();
        assert_eq!(short.code, Code::InvalidArgument);
        let truncated = unwrap_envelope(&[0, 0, 0, 0, 9, b'{']).unwrap_err();
        assert_eq!(truncated.code, Code::InvalidArgument);
        let two = [envelope(0, b"{}"), envelope(0, b"{}")].concat();
        assert_eq!(
            unwrap_envelope(&two).unwrap_err().code,
            Code::InvalidArgument
        );
        let compressed = envelope(COMPRESSED, b"{}");
        assert_eq!(
            unwrap_envelope(&compressed).unwrap_err().code,
            Code::Unimplemented
        );
        let end = envelope(END_STREAM, b"{}");
        assert_eq!(
            unwrap_envelope(&end).unwrap_err().code,
            Code::InvalidArgument
        );
        let huge = [0u8, 0xff, 0xff, 0xff, 0xff];
        assert_eq!(
            unwrap_envelope(&huge).unwrap_err().code,
            Code::ResourceExhausted
        );
    }

    #[test]
    fn empty_unary_body_is_the_empty_message() {
        let v: serde_json::Value = decode(b"").unwrap();
        assert_eq!(v, serde_json::json!({}));
        assert_eq!(
            decode::<serde_json::Value>(b"{").unwrap_err().code,
            Code::InvalidArgument
        );
    }

    #[test]
    fn codes_map_to_the_spec_statuses() {
        assert_eq!(Code::NotFound.status(), StatusCode::NOT_FOUND);
        assert_eq!(Code::Unauthenticated.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(Code::Unimplemented.status(), StatusCode::NOT_IMPLEMENTED);
    }
}
