//! The HTTP client of a sandlot server's `/v1` API, the one the CLI's client commands,
//! `sandlot mcp` over stdio and `sandlot agent` share.
//!
//! reqwest does the HTTP; what is sandlot's is around it, the same for every caller:
//! - the URL is checked once, up front (an http(s) base, else a clear error), and every call
//!   goes to a path under it;
//! - the API key goes as the bearer key, marked sensitive (never logged);
//! - redirects are not followed: a redirect would send the call, and the file or code it
//!   carries, somewhere other than the URL given;
//! - every call has a connect bound and a time bound, and every answer is read with a size
//!   bound: the server at the URL is trusted to run code, not to be well-behaved;
//! - a non-2xx answer's body (read with its own, smaller bound) is sandlot's error body, turned
//!   back into the [`ApiError`] with its stable code, or else a [`ClientError::Status`] with
//!   the status and the start of the body;
//! - executions come back as one JSON result ([`Client::execute`]) or as Server-Sent Events
//!   ([`Client::execute_stream`]): output events as they are produced, then the result.

mod error;
mod sse;

pub use error::ClientError;
pub use reqwest::{Method, RequestBuilder, Response, StatusCode};
pub use sse::{SseEvent, SseParser};

use sandlot_types::{ApiError, ErrorBody, ExecuteRequest, ExecutionResult, OutputEvent};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::VecDeque;
use std::time::Duration;

/// The stream's event names, as the server writes them.
pub use sandlot_types::{API_ERROR_EVENT, DONE_EVENT};

/// Bound of establishing a connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound of every call, unless [`Client::with_timeout`] says otherwise (executions have their
/// own, which follows the execution's timeout).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// What an execution's call may take beyond the execution's timeout (queueing behind another
/// execution, a restart, the answer).
pub const EXECUTE_SLACK: Duration = Duration::from_secs(120);
/// The server's default execution timeout, for the bound when a request gives none.
const DEFAULT_EXEC_TIMEOUT_SECS: f64 = 60.0;
/// Largest answer read from the server (an execution's result with its images is the largest
/// the API gives; the runtime caps its output at a few MiB).
pub const MAX_ANSWER_BYTES: u64 = 64 << 20;
/// Largest error body read from the server; only its start is shown anyway.
pub const MAX_ERROR_BYTES: u64 = 64 << 10;
/// Largest event of an execution's stream (the last one holds the whole result): a server
/// that sends more without ending an event is cut off rather than buffered.
pub const MAX_EVENT_BYTES: u64 = 32 << 20;
/// How much of a non-sandlot error body a [`ClientError::Status`] keeps.
const ERROR_START_CHARS: usize = 500;

/// A client of the sandlot server at one URL. Cloning it is cheap (the connection pool is
/// shared).
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    /// The URL as given, without trailing slashes: paths are appended to it, and errors name
    /// it as the user wrote it.
    base: String,
    timeout: Duration,
}

/// A body read with a size bound.
#[derive(Debug)]
pub enum Bounded {
    Whole(Vec<u8>),
    /// Past the bound: what was read (at most the bound and one chunk; nothing when the
    /// answer's length said so up front). The rest is not read.
    TooLarge(Vec<u8>),
}

impl Client {
    /// A client of the server at `url` (`http://127.0.0.1:7878`), sending `api_key` as the
    /// bearer key; nothing is sent yet.
    pub fn new(url: &str, api_key: Option<&str>) -> Result<Client, ClientError> {
        let base = url.trim_end_matches('/');
        let parsed = reqwest::Url::parse(base).map_err(|e| {
            ClientError::InvalidUrl(format!(
                "{url:?} is not a server URL ({e}); expected e.g. http://127.0.0.1:7878"
            ))
        })?;
        if parsed.cannot_be_a_base() || !matches!(parsed.scheme(), "http" | "https") {
            return Err(ClientError::InvalidUrl(format!(
                "{url:?} is not an http(s) URL; expected e.g. http://127.0.0.1:7878"
            )));
        }
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(key) = api_key {
            let mut v = reqwest::header::HeaderValue::from_str(&format!("Bearer {key}"))
                .map_err(|_| ClientError::InvalidKey)?;
            v.set_sensitive(true);
            headers.insert(reqwest::header::AUTHORIZATION, v);
        }
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .default_headers(headers)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(ClientError::Build)?;
        Ok(Client {
            http,
            base: base.to_owned(),
            timeout: DEFAULT_TIMEOUT,
        })
    }

    /// The same client with `timeout` as the bound of each call.
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    /// The server's URL, as given (without trailing slashes).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The URL of `path` (`/v1/...`, already encoded, with its query if any) on the server.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A request to `path` with the call's time bound, to be sent with [`Client::send`] (for
    /// uploads, downloads, queries: anything the JSON helpers do not cover).
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.http
            .request(method, self.url(path))
            .timeout(self.timeout)
    }

    /// Sends `req`: the answer when it is a success, else its error body as a [`ClientError`].
    pub async fn send(&self, req: RequestBuilder) -> Result<Response, ClientError> {
        let resp = req.send().await.map_err(|source| ClientError::Transport {
            url: self.base.clone(),
            source,
        })?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        Err(self.error_of(resp).await)
    }

    /// The error a non-2xx answer stands for.
    async fn error_of(&self, resp: Response) -> ClientError {
        let status = resp.status();
        let text = match self.read_bounded(resp, MAX_ERROR_BYTES).await {
            Ok(Bounded::Whole(b) | Bounded::TooLarge(b)) => {
                String::from_utf8_lossy(&b).into_owned()
            }
            Err(_) => String::new(),
        };
        match serde_json::from_str::<ErrorBody>(&text) {
            Ok(body) => ApiError::new(body.error.code, body.error.message).into(),
            Err(_) => ClientError::Status {
                url: self.base.clone(),
                status,
                body: text.trim().chars().take(ERROR_START_CHARS).collect(),
            },
        }
    }

    /// The body of `resp`, read as it streams in up to `limit` bytes.
    pub async fn read_bounded(
        &self,
        mut resp: Response,
        limit: u64,
    ) -> Result<Bounded, ClientError> {
        if resp.content_length().is_some_and(|n| n > limit) {
            return Ok(Bounded::TooLarge(Vec::new()));
        }
        let mut buf = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.broken(e))? {
            buf.extend_from_slice(&chunk);
            if buf.len() as u64 > limit {
                return Ok(Bounded::TooLarge(buf));
            }
        }
        Ok(Bounded::Whole(buf))
    }

    /// The whole body of `resp`, or [`ClientError::TooLarge`] past `limit` bytes.
    pub async fn bytes_of(&self, resp: Response, limit: u64) -> Result<Vec<u8>, ClientError> {
        match self.read_bounded(resp, limit).await? {
            Bounded::Whole(b) => Ok(b),
            Bounded::TooLarge(_) => Err(self.too_large("an answer", limit)),
        }
    }

    /// Sends `req` and reads its answer as JSON (at most [`MAX_ANSWER_BYTES`]).
    pub async fn json<T: DeserializeOwned>(&self, req: RequestBuilder) -> Result<T, ClientError> {
        let resp = self.send(req).await?;
        let bytes = self.bytes_of(resp, MAX_ANSWER_BYTES).await?;
        self.decode(&bytes)
    }

    /// `GET path`, its answer as JSON.
    pub async fn get_json<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.json(self.request(Method::GET, path)).await
    }

    /// `POST path` with `body` as JSON, its answer as JSON.
    pub async fn post_json<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, ClientError> {
        self.json(self.request(Method::POST, path).json(body)).await
    }

    /// `PUT path` with `body` as JSON, its answer as JSON.
    pub async fn put_json<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, ClientError> {
        self.json(self.request(Method::PUT, path).json(body)).await
    }

    /// `DELETE path`; its answer's body is not read.
    pub async fn delete(&self, path: &str) -> Result<(), ClientError> {
        self.send(self.request(Method::DELETE, path))
            .await
            .map(drop)
    }

    /// `GET path`, its whole body (at most `limit` bytes).
    pub async fn get_bytes(&self, path: &str, limit: u64) -> Result<Vec<u8>, ClientError> {
        let resp = self.send(self.request(Method::GET, path)).await?;
        self.bytes_of(resp, limit).await
    }

    /// Runs `req` in the sandbox `id` and waits for its result (one JSON answer), for as long
    /// as the execution's own timeout plus [`EXECUTE_SLACK`].
    pub async fn execute(
        &self,
        id: &str,
        req: &ExecuteRequest,
    ) -> Result<ExecutionResult, ClientError> {
        let secs = req.timeout.unwrap_or(DEFAULT_EXEC_TIMEOUT_SECS);
        let bound = Duration::try_from_secs_f64(secs)
            .unwrap_or(self.timeout)
            .saturating_add(EXECUTE_SLACK);
        let http = self
            .request(Method::POST, &path(&["v1", "sandboxes", id, "execute"]))
            .timeout(bound)
            .json(req);
        self.json(http).await
    }

    /// Runs `req` in the sandbox `id` with its output streamed (Server-Sent Events): the
    /// stream gives each output event as it is produced, then the result. The call has no time
    /// bound of its own (the server ends executions at their timeout; a caller that cannot
    /// rely on that bounds the whole with its own timer); each event is bounded in size
    /// ([`MAX_EVENT_BYTES`]).
    pub async fn execute_stream(
        &self,
        id: &str,
        req: ExecuteRequest,
    ) -> Result<ExecutionStream, ClientError> {
        let req = ExecuteRequest {
            stream: true,
            ..req
        };
        let http = self
            .http
            .post(self.url(&path(&["v1", "sandboxes", id, "execute"])))
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .json(&req);
        let resp = self.send(http).await?;
        Ok(ExecutionStream {
            client: self.clone(),
            resp: Some(resp),
            parser: SseParser::default(),
            queued: VecDeque::new(),
        })
    }

    fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, ClientError> {
        serde_json::from_slice(bytes).map_err(|source| ClientError::Decode {
            url: self.base.clone(),
            source,
        })
    }

    fn broken(&self, source: reqwest::Error) -> ClientError {
        ClientError::Broken {
            url: self.base.clone(),
            source,
        }
    }

    fn too_large(&self, what: &'static str, limit: u64) -> ClientError {
        ClientError::TooLarge {
            url: self.base.clone(),
            what,
            limit,
        }
    }
}

/// What an execution's stream gives next.
#[derive(Debug)]
pub enum Streamed {
    /// An output event (stdout, stderr, a display value, an error raised by the code).
    Output(OutputEvent),
    /// The execution's result: the stream is over.
    Done(Box<ExecutionResult>),
}

/// An execution's event stream (see [`Client::execute_stream`]).
pub struct ExecutionStream {
    client: Client,
    /// The answer being read; gone once the stream ended.
    resp: Option<Response>,
    parser: SseParser,
    /// Events parsed but not given yet (one chunk may complete several).
    queued: VecDeque<SseEvent>,
}

impl ExecutionStream {
    /// The next output event, or the result. After the result (or an error), the stream is
    /// over and this fails with [`ClientError::StreamEnded`].
    pub async fn next(&mut self) -> Result<Streamed, ClientError> {
        loop {
            if let Some(ev) = self.queued.pop_front() {
                return self.event(ev);
            }
            let Some(resp) = self.resp.as_mut() else {
                return Err(ClientError::StreamEnded);
            };
            let chunk = match resp.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => {
                    self.resp = None;
                    return Err(ClientError::StreamEnded);
                }
                Err(e) => {
                    self.resp = None;
                    return Err(self.client.broken(e));
                }
            };
            self.queued.extend(self.parser.push(&chunk));
            if self.parser.buffered() as u64 > MAX_EVENT_BYTES {
                self.resp = None;
                self.queued.clear();
                return Err(self.client.too_large("an event", MAX_EVENT_BYTES));
            }
        }
    }

    fn event(&mut self, ev: SseEvent) -> Result<Streamed, ClientError> {
        match ev.event.as_str() {
            DONE_EVENT => {
                self.end();
                Ok(Streamed::Done(self.client.decode(ev.data.as_bytes())?))
            }
            API_ERROR_EVENT => {
                self.end();
                Err(match serde_json::from_str::<ErrorBody>(&ev.data) {
                    Ok(body) => ApiError::new(body.error.code, body.error.message).into(),
                    Err(_) => ClientError::Execution(ev.data),
                })
            }
            _ => Ok(Streamed::Output(self.client.decode(ev.data.as_bytes())?)),
        }
    }

    fn end(&mut self) {
        self.resp = None;
        self.queued.clear();
    }
}

/// `/` + `parts`, each percent-encoded as one path segment (a `/` in a part is `%2F`; parts
/// `.` and `..` are left out), as the url crate encodes segments.
pub fn path(parts: &[&str]) -> String {
    let mut url = reqwest::Url::parse("http://sandlot.invalid/").expect("a valid URL");
    if let Ok(mut segments) = url.path_segments_mut() {
        segments.pop_if_empty().extend(parts);
    }
    url.path().to_owned()
}

/// `s` as one path segment or query value, percent-encoded outside the unreserved set: names
/// and ids go into URLs verbatim otherwise, and `../x` or `a?b` would name another route.
pub fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    // A segment of only dots would still be a relative path step.
    if out.bytes().all(|b| b == b'.') {
        out = out.replace('.', "%2E");
    }
    out
}

#[cfg(test)]
mod tests;
