//! [`Remote`]: the [`Backend`] of `sandlot mcp` over stdio, a client of a running server's
//! HTTP API (JSON in and out, the server's error body turned back into its [`ApiError`], as the
//! CLI's own client does).
//!
//! The server at the URL is trusted to run code, not to be well-behaved: its answers are read
//! with a size bound ([`MAX_ANSWER_BYTES`], error bodies [`MAX_ERROR_BYTES`]) as well as a time
//! bound, and redirects are not followed, so nothing this client sends (file contents, code)
//! goes anywhere but the URL it was given.

use crate::backend::{Backend, ReadFile};
use crate::error::Error;
use bytes::Bytes;
use futures::StreamExt;
use sandlot_types::{
    ApiError, CreateSandbox, CreateSnapshot, ErrorBody, ExecuteRequest, ExecutionResult, FileEntry,
    ForkRequest, ForkResult, Sandbox, Snapshot,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Bound of every call but executions (whose bound follows their own timeout).
const CALL_TIMEOUT: Duration = Duration::from_secs(300);
/// What an execution's HTTP call may take beyond the execution's timeout (queueing behind
/// another execution, a restart, the answer).
const EXECUTE_SLACK: Duration = Duration::from_secs(120);
/// The server's default execution timeout, for the bound when none is given.
const DEFAULT_EXEC_TIMEOUT_SECS: f64 = 60.0;
/// Largest answer read from the server (an execution's result with its images is the largest
/// the API gives; the runtime caps its output at a few MiB).
const MAX_ANSWER_BYTES: u64 = 64 << 20;
/// Largest error body read from the server; only its start is shown anyway.
const MAX_ERROR_BYTES: u64 = 64 << 10;

/// A client of a sandlot server's `/v1` API.
#[derive(Clone)]
pub struct Remote {
    http: reqwest::Client,
    base: reqwest::Url,
}

/// A body read with a size bound.
enum Bounded {
    Whole(Vec<u8>),
    TooLarge(Vec<u8>),
}

#[derive(Deserialize)]
struct SandboxList {
    sandboxes: Vec<Sandbox>,
}

#[derive(Deserialize)]
struct FileList {
    entries: Vec<FileEntry>,
}

#[derive(Deserialize)]
struct Interrupted {
    interrupted: bool,
}

impl Remote {
    /// A client of the server at `url` (`http://127.0.0.1:7878`), sending `api_key` as the
    /// bearer key; nothing is sent yet.
    pub fn new(url: &str, api_key: Option<&str>) -> Result<Remote, Error> {
        let base = reqwest::Url::parse(url.trim_end_matches('/')).map_err(|e| {
            Error::Transport(format!(
                "{url:?} is not a server URL ({e}); expected e.g. http://127.0.0.1:7878"
            ))
        })?;
        if base.cannot_be_a_base() || !matches!(base.scheme(), "http" | "https") {
            return Err(Error::Transport(format!(
                "{url:?} is not an http(s) URL; expected e.g. http://127.0.0.1:7878"
            )));
        }
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(key) = api_key {
            let mut v =
                reqwest::header::HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                    Error::Transport("the API key has characters a header cannot carry".into())
                })?;
            v.set_sensitive(true);
            headers.insert(reqwest::header::AUTHORIZATION, v);
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .default_headers(headers)
            // A redirect would send the call (and the file or code it carries) elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| Error::Transport(format!("could not build the HTTP client: {e}")))?;
        Ok(Remote { http, base })
    }

    /// `base` + the given path segments (each percent-encoded as one segment).
    fn url(&self, segments: &[&str]) -> reqwest::Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    fn unreachable(&self, source: reqwest::Error) -> Error {
        Error::Unreachable {
            url: self.base.to_string(),
            source,
        }
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Response, Error> {
        let resp = req.send().await.map_err(|e| self.unreachable(e))?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status().as_u16();
        let text = match self.bounded(resp, MAX_ERROR_BYTES).await {
            Ok(Bounded::Whole(b)) | Ok(Bounded::TooLarge(b)) => {
                String::from_utf8_lossy(&b).into_owned()
            }
            Err(_) => String::new(),
        };
        match serde_json::from_str::<ErrorBody>(&text) {
            Ok(body) => Err(ApiError::new(body.error.code, body.error.message).into()),
            Err(_) => Err(Error::BadResponse {
                url: self.base.to_string(),
                status,
                body: text.trim().chars().take(500).collect(),
            }),
        }
    }

    async fn json<T: DeserializeOwned>(&self, req: reqwest::RequestBuilder) -> Result<T, Error> {
        let resp = self.send(req).await?;
        let status = resp.status().as_u16();
        let bytes = match self.bounded(resp, MAX_ANSWER_BYTES).await? {
            Bounded::Whole(b) => b,
            Bounded::TooLarge(_) => {
                return Err(Error::BadResponse {
                    url: self.base.to_string(),
                    status,
                    body: format!("an answer larger than {MAX_ANSWER_BYTES} bytes"),
                })
            }
        };
        serde_json::from_slice(&bytes).map_err(|e| Error::BadResponse {
            url: self.base.to_string(),
            status,
            body: format!("not the expected JSON: {e}"),
        })
    }

    /// The body of `resp`, read as it streams in up to `limit` bytes: past it, what was read
    /// (at most `limit` bytes and one chunk) comes back as `TooLarge` and the rest is not read.
    async fn bounded(&self, resp: reqwest::Response, limit: u64) -> Result<Bounded, Error> {
        if resp.content_length().is_some_and(|n| n > limit) {
            return Ok(Bounded::TooLarge(Vec::new()));
        }
        let mut body = resp.bytes_stream();
        let mut buf = Vec::new();
        while let Some(chunk) = body.next().await {
            buf.extend_from_slice(&chunk.map_err(|e| self.unreachable(e))?);
            if buf.len() as u64 > limit {
                return Ok(Bounded::TooLarge(buf));
            }
        }
        Ok(Bounded::Whole(buf))
    }

    async fn post<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        body: &impl Serialize,
    ) -> Result<T, Error> {
        self.json(
            self.http
                .post(self.url(segments))
                .timeout(CALL_TIMEOUT)
                .json(body),
        )
        .await
    }
}

impl Backend for Remote {
    async fn create_sandbox(&self, req: CreateSandbox) -> Result<Sandbox, Error> {
        self.post(&["v1", "sandboxes"], &req).await
    }

    async fn list_sandboxes(&self) -> Result<Vec<Sandbox>, Error> {
        let req = self
            .http
            .get(self.url(&["v1", "sandboxes"]))
            .timeout(CALL_TIMEOUT);
        Ok(self.json::<SandboxList>(req).await?.sandboxes)
    }

    async fn delete_sandbox(&self, id: &str) -> Result<(), Error> {
        let req = self
            .http
            .delete(self.url(&["v1", "sandboxes", id]))
            .timeout(CALL_TIMEOUT);
        self.send(req).await.map(drop)
    }

    async fn fork_sandbox(&self, id: &str, req: ForkRequest) -> Result<ForkResult, Error> {
        self.post(&["v1", "sandboxes", id, "fork"], &req).await
    }

    async fn pause_sandbox(&self, id: &str) -> Result<Sandbox, Error> {
        self.post(&["v1", "sandboxes", id, "pause"], &serde_json::json!({}))
            .await
    }

    async fn resume_sandbox(&self, id: &str) -> Result<Sandbox, Error> {
        self.post(&["v1", "sandboxes", id, "resume"], &serde_json::json!({}))
            .await
    }

    async fn snapshot_sandbox(&self, id: &str, req: CreateSnapshot) -> Result<Snapshot, Error> {
        self.post(&["v1", "sandboxes", id, "snapshots"], &req).await
    }

    async fn execute(&self, id: &str, req: ExecuteRequest) -> Result<ExecutionResult, Error> {
        let secs = req.timeout.unwrap_or(DEFAULT_EXEC_TIMEOUT_SECS);
        let bound = Duration::try_from_secs_f64(secs)
            .unwrap_or(CALL_TIMEOUT)
            .saturating_add(EXECUTE_SLACK);
        let http = self
            .http
            .post(self.url(&["v1", "sandboxes", id, "execute"]))
            .timeout(bound)
            .json(&req);
        self.json(http).await
    }

    async fn interrupt(&self, id: &str) -> Result<bool, Error> {
        let r: Interrupted = self
            .post(
                &["v1", "sandboxes", id, "interrupt"],
                &serde_json::json!({}),
            )
            .await?;
        Ok(r.interrupted)
    }

    async fn write_file(&self, id: &str, path: &str, content: Bytes) -> Result<FileEntry, Error> {
        let req = self
            .http
            .put(self.url(&["v1", "sandboxes", id, "files", path]))
            .timeout(CALL_TIMEOUT)
            .body(content);
        self.json(req).await
    }

    async fn read_file(&self, id: &str, path: &str, limit: u64) -> Result<ReadFile, Error> {
        let req = self
            .http
            .get(self.url(&["v1", "sandboxes", id, "files", path]))
            .timeout(CALL_TIMEOUT);
        let resp = self.send(req).await?;
        if let Some(size) = resp.content_length().filter(|&n| n > limit) {
            return Ok(ReadFile::TooLarge(size));
        }
        Ok(match self.bounded(resp, limit).await? {
            Bounded::Whole(b) => ReadFile::Content(b),
            Bounded::TooLarge(b) => ReadFile::TooLarge(b.len() as u64),
        })
    }

    async fn list_files(
        &self,
        id: &str,
        path: &str,
        recursive: bool,
    ) -> Result<Vec<FileEntry>, Error> {
        let req = self
            .http
            .get(self.url(&["v1", "sandboxes", id, "files"]))
            .query(&[
                ("path", path),
                ("recursive", if recursive { "true" } else { "false" }),
            ])
            .timeout(CALL_TIMEOUT);
        Ok(self.json::<FileList>(req).await?.entries)
    }
}
