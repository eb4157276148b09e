//! sandlot's runtime: owns how sandboxes run. One zygote per template forks each sandbox into
//! fresh namespaces (see ARCHITECTURE.md); this crate drives executions over the sandbox's
//! control channel, enforces timeouts and expiry from outside, moves files in and out through
//! fd-relative paths, and records everything in the store.

use bytes::Bytes;
use futures::Stream;
use sandlot_types::{
    ApiError, CreateSandbox, ExecuteRequest, ExecutionRecord, ExecutionResult, FileEntry,
    OutputEvent, Sandbox,
};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Configuration of the runtime; `sandlot serve` builds it from flags and environment.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// The data dir: store, templates, sandbox state.
    pub data_dir: PathBuf,
    /// The Python virtual environment sandboxes run in (provisioned by `sandlot-env`).
    pub python_env: PathBuf,
    /// Largest accepted code size in bytes.
    pub max_code_bytes: usize,
    /// Largest accepted file upload in bytes.
    pub max_file_bytes: u64,
    /// Default and maximum execution timeout in seconds.
    pub default_exec_timeout: f64,
    pub max_exec_timeout: f64,
    /// Output budget per stream per execution, in bytes.
    pub max_output_bytes: usize,
    /// Most live sandboxes at once.
    pub max_sandboxes: usize,
}

impl RuntimeConfig {
    pub fn new(data_dir: PathBuf, python_env: PathBuf) -> Self {
        Self {
            data_dir,
            python_env,
            max_code_bytes: 1 << 20,
            max_file_bytes: 1 << 30,
            default_exec_timeout: 60.0,
            max_exec_timeout: 3600.0,
            max_output_bytes: 1 << 20,
            max_sandboxes: 2000,
        }
    }
}

/// Handle to the runtime; cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    _config: RuntimeConfig,
}

/// A byte stream of a file being uploaded.
pub type ByteStream = std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, std::io::Error>> + Send>>;

impl Runtime {
    /// Starts the runtime: opens the store, cleans up what a previous server run left behind
    /// (marking its sandboxes lost), and starts the default template's zygote.
    pub async fn start(config: RuntimeConfig, store: sandlot_store::Store) -> anyhow::Result<Self> {
        let _ = store;
        Ok(Self { inner: Arc::new(Inner { _config: config }) })
    }

    pub async fn create_sandbox(&self, req: CreateSandbox) -> Result<Sandbox, ApiError> {
        let _ = (req, &self.inner);
        todo!()
    }

    /// Live sandboxes, or every recorded one with `include_ended`.
    pub async fn list_sandboxes(&self, include_ended: bool) -> Result<Vec<Sandbox>, ApiError> {
        let _ = include_ended;
        todo!()
    }

    /// A live sandbox; `sandbox_gone` (410) for one that ended, `sandbox_not_found` (404) for
    /// an id never seen.
    pub async fn get_sandbox(&self, id: &str) -> Result<Sandbox, ApiError> {
        let _ = id;
        todo!()
    }

    pub async fn delete_sandbox(&self, id: &str) -> Result<(), ApiError> {
        let _ = id;
        todo!()
    }

    /// Runs code; when `events` is given every output event is also sent there as it is
    /// produced (for SSE). Executions on one sandbox run one at a time, in arrival order.
    pub async fn execute(
        &self,
        id: &str,
        req: ExecuteRequest,
        events: Option<mpsc::UnboundedSender<OutputEvent>>,
    ) -> Result<ExecutionResult, ApiError> {
        let _ = (id, req, events);
        todo!()
    }

    /// Interrupts the running execution (KeyboardInterrupt in Python, SIGINT in Bash).
    /// Returns whether an execution was running.
    pub async fn interrupt(&self, id: &str) -> Result<bool, ApiError> {
        let _ = id;
        todo!()
    }

    pub async fn list_executions(&self, id: &str) -> Result<Vec<ExecutionRecord>, ApiError> {
        let _ = id;
        todo!()
    }

    /// Writes a file under the workspace (creating parent directories), streaming the body.
    pub async fn write_file(&self, id: &str, path: &str, body: ByteStream) -> Result<FileEntry, ApiError> {
        let _ = (id, path, body);
        todo!()
    }

    /// Opens a regular file of the workspace for reading; returns its size and a reader.
    pub async fn read_file(&self, id: &str, path: &str) -> Result<(u64, tokio::fs::File), ApiError> {
        let _ = (id, path);
        todo!()
    }

    /// Lists a directory of the workspace (`""` is the root), recursively when asked.
    pub async fn list_files(&self, id: &str, path: &str, recursive: bool) -> Result<Vec<FileEntry>, ApiError> {
        let _ = (id, path, recursive);
        todo!()
    }

    /// Removes a file or (recursively) a directory of the workspace.
    pub async fn delete_file(&self, id: &str, path: &str) -> Result<(), ApiError> {
        let _ = (id, path);
        todo!()
    }

    /// Kills every sandbox and zygote; called on server shutdown.
    pub async fn shutdown(&self) {}
}
