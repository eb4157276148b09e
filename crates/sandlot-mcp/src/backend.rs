//! What the tools need from sandlot, as one small trait with two implementations: the
//! in-process [`Runtime`] (streamable HTTP on the server) and [`crate::remote::Remote`], a
//! client of a running server's HTTP API (`sandlot mcp` over stdio). The tool layer is written
//! once against the trait.

use crate::error::Error;
use bytes::Bytes;
use sandlot_runtime::Runtime;
use sandlot_types::{
    CreateSandbox, CreateSnapshot, ExecuteRequest, ExecutionResult, FileEntry, ForkRequest,
    ForkResult, Sandbox, Snapshot,
};
use std::future::Future;
use tokio::io::AsyncReadExt;

/// A file read back, at most the limit asked for.
pub enum ReadFile {
    Content(Vec<u8>),
    /// Larger than the limit: its size.
    TooLarge(u64),
}

/// The sandlot operations behind the MCP tools.
pub trait Backend: Send + Sync + 'static {
    fn create_sandbox(
        &self,
        req: CreateSandbox,
    ) -> impl Future<Output = Result<Sandbox, Error>> + Send;
    /// The sandboxes that have not ended.
    fn list_sandboxes(&self) -> impl Future<Output = Result<Vec<Sandbox>, Error>> + Send;
    fn delete_sandbox(&self, id: &str) -> impl Future<Output = Result<(), Error>> + Send;
    fn fork_sandbox(
        &self,
        id: &str,
        req: ForkRequest,
    ) -> impl Future<Output = Result<ForkResult, Error>> + Send;
    fn pause_sandbox(&self, id: &str) -> impl Future<Output = Result<Sandbox, Error>> + Send;
    fn resume_sandbox(&self, id: &str) -> impl Future<Output = Result<Sandbox, Error>> + Send;
    fn snapshot_sandbox(
        &self,
        id: &str,
        req: CreateSnapshot,
    ) -> impl Future<Output = Result<Snapshot, Error>> + Send;
    fn execute(
        &self,
        id: &str,
        req: ExecuteRequest,
    ) -> impl Future<Output = Result<ExecutionResult, Error>> + Send;
    /// Interrupts the running execution; whether one was running.
    fn interrupt(&self, id: &str) -> impl Future<Output = Result<bool, Error>> + Send;
    fn write_file(
        &self,
        id: &str,
        path: &str,
        content: Bytes,
    ) -> impl Future<Output = Result<FileEntry, Error>> + Send;
    fn read_file(
        &self,
        id: &str,
        path: &str,
        limit: u64,
    ) -> impl Future<Output = Result<ReadFile, Error>> + Send;
    fn list_files(
        &self,
        id: &str,
        path: &str,
        recursive: bool,
    ) -> impl Future<Output = Result<Vec<FileEntry>, Error>> + Send;
}

fn api(e: sandlot_runtime::RuntimeError) -> Error {
    Error::Api(sandlot_service::api_error(e))
}

impl Backend for Runtime {
    async fn create_sandbox(&self, req: CreateSandbox) -> Result<Sandbox, Error> {
        Runtime::create_sandbox(self, req).await.map_err(api)
    }

    async fn list_sandboxes(&self) -> Result<Vec<Sandbox>, Error> {
        Runtime::list_sandboxes(self, false).await.map_err(api)
    }

    async fn delete_sandbox(&self, id: &str) -> Result<(), Error> {
        Runtime::delete_sandbox(self, id).await.map_err(api)
    }

    async fn fork_sandbox(&self, id: &str, req: ForkRequest) -> Result<ForkResult, Error> {
        Runtime::fork_sandbox(self, id, req).await.map_err(api)
    }

    async fn pause_sandbox(&self, id: &str) -> Result<Sandbox, Error> {
        Runtime::pause_sandbox(self, id).await.map_err(api)
    }

    async fn resume_sandbox(&self, id: &str) -> Result<Sandbox, Error> {
        Runtime::resume_sandbox(self, id).await.map_err(api)
    }

    async fn snapshot_sandbox(&self, id: &str, req: CreateSnapshot) -> Result<Snapshot, Error> {
        Runtime::create_snapshot(self, id, req).await.map_err(api)
    }

    async fn execute(&self, id: &str, req: ExecuteRequest) -> Result<ExecutionResult, Error> {
        Runtime::execute(self, id, req, None).await.map_err(api)
    }

    async fn interrupt(&self, id: &str) -> Result<bool, Error> {
        Runtime::interrupt(self, id).await.map_err(api)
    }

    async fn write_file(&self, id: &str, path: &str, content: Bytes) -> Result<FileEntry, Error> {
        let body: sandlot_runtime::ByteStream =
            Box::pin(futures::stream::once(async move { Ok(content) }));
        Runtime::write_file(self, id, path, body).await.map_err(api)
    }

    async fn read_file(&self, id: &str, path: &str, limit: u64) -> Result<ReadFile, Error> {
        let (size, file) = Runtime::read_file(self, id, path).await.map_err(api)?;
        if size > limit {
            return Ok(ReadFile::TooLarge(size));
        }
        let mut buf = Vec::with_capacity(size as usize);
        // One byte past the limit tells a file that grew since it was opened.
        file.take(limit + 1)
            .read_to_end(&mut buf)
            .await
            .map_err(|e| {
                Error::Api(sandlot_types::ApiError::new(
                    sandlot_types::ErrorCode::Internal,
                    format!("reading the file failed: {e}"),
                ))
            })?;
        if buf.len() as u64 > limit {
            return Ok(ReadFile::TooLarge(buf.len() as u64));
        }
        Ok(ReadFile::Content(buf))
    }

    async fn list_files(
        &self,
        id: &str,
        path: &str,
        recursive: bool,
    ) -> Result<Vec<FileEntry>, Error> {
        Runtime::list_files(self, id, path, recursive)
            .await
            .map_err(api)
    }
}
