//! [`Remote`]: the [`Backend`] of `sandlot mcp` over stdio, a client of a running server's
//! HTTP API through [`sandlot_client::Client`], the client the CLI shares: the URL checked up
//! front, the bearer key, no redirects (nothing this client sends, file contents or code, goes
//! anywhere but the URL it was given), a time bound on every call and a size bound on every
//! answer (the server at the URL is trusted to run code, not to be well-behaved), and the
//! server's error body turned back into its [`ApiError`](sandlot_types::ApiError).

use crate::backend::{Backend, ReadFile};
use crate::error::Error;
use bytes::Bytes;
use sandlot_client::{path, Bounded, Client, Method};
use sandlot_types::{
    CreateSandbox, CreateSnapshot, ExecuteRequest, ExecutionResult, FileEntry, ForkRequest,
    ForkResult, Sandbox, Snapshot,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A client of a sandlot server's `/v1` API.
#[derive(Clone)]
pub struct Remote {
    client: Client,
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
    /// bearer key; nothing is sent yet. Every call but executions is bounded by
    /// [`sandlot_client::DEFAULT_TIMEOUT`]; an execution by its own timeout and some slack.
    pub fn new(url: &str, api_key: Option<&str>) -> Result<Remote, Error> {
        Ok(Remote {
            client: Client::new(url, api_key)?,
        })
    }

    async fn post<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        body: &impl Serialize,
    ) -> Result<T, Error> {
        Ok(self.client.post_json(&path(segments), body).await?)
    }
}

impl Backend for Remote {
    async fn create_sandbox(&self, req: CreateSandbox) -> Result<Sandbox, Error> {
        self.post(&["v1", "sandboxes"], &req).await
    }

    async fn list_sandboxes(&self) -> Result<Vec<Sandbox>, Error> {
        let list: SandboxList = self.client.get_json(&path(&["v1", "sandboxes"])).await?;
        Ok(list.sandboxes)
    }

    async fn delete_sandbox(&self, id: &str) -> Result<(), Error> {
        Ok(self.client.delete(&path(&["v1", "sandboxes", id])).await?)
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
        Ok(self.client.execute(id, &req).await?)
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

    async fn write_file(&self, id: &str, file: &str, content: Bytes) -> Result<FileEntry, Error> {
        let req = self
            .client
            .request(Method::PUT, &path(&["v1", "sandboxes", id, "files", file]))
            .body(content);
        Ok(self.client.json(req).await?)
    }

    async fn read_file(&self, id: &str, file: &str, limit: u64) -> Result<ReadFile, Error> {
        let req = self
            .client
            .request(Method::GET, &path(&["v1", "sandboxes", id, "files", file]));
        let resp = self.client.send(req).await?;
        if let Some(size) = resp.content_length().filter(|&n| n > limit) {
            return Ok(ReadFile::TooLarge(size));
        }
        Ok(match self.client.read_bounded(resp, limit).await? {
            Bounded::Whole(b) => ReadFile::Content(b),
            Bounded::TooLarge(b) => ReadFile::TooLarge(b.len() as u64),
        })
    }

    async fn list_files(
        &self,
        id: &str,
        dir: &str,
        recursive: bool,
    ) -> Result<Vec<FileEntry>, Error> {
        let req = self
            .client
            .request(Method::GET, &path(&["v1", "sandboxes", id, "files"]))
            .query(&[
                ("path", dir),
                ("recursive", if recursive { "true" } else { "false" }),
            ]);
        let list: FileList = self.client.json(req).await?;
        Ok(list.entries)
    }
}
