//! [`Remote`]: the [`Backend`] of `sandlot mcp` over stdio, a client of a running server's
//! HTTP API (JSON in and out, the server's error body turned back into its [`ApiError`], as the
//! CLI's own client does).

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

/// A client of a sandlot server's `/v1` API.
#[derive(Clone)]
pub struct Remote {
    http: reqwest::Client,
    base: reqwest::Url,
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
    /// A client of the server at `url` (`http://127.0.0.1:7878`); nothing is sent yet.
    pub fn new(url: &str) -> Result<Remote, Error> {
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
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
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
        let text = resp.text().await.unwrap_or_default();
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
        let bytes = resp.bytes().await.map_err(|e| self.unreachable(e))?;
        serde_json::from_slice(&bytes).map_err(|e| Error::BadResponse {
            url: self.base.to_string(),
            status,
            body: format!("not the expected JSON: {e}"),
        })
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
        let mut body = resp.bytes_stream();
        let mut buf = Vec::new();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| self.unreachable(e))?;
            buf.extend_from_slice(&chunk);
            if buf.len() as u64 > limit {
                return Ok(ReadFile::TooLarge(buf.len() as u64));
            }
        }
        Ok(ReadFile::Content(buf))
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
