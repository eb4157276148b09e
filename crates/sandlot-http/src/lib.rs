//! The HTTP plumbing sandlot's REST adapter (`sandlot-api`) and its record (`sandlot-record`)
//! share, so that neither depends on the other: every failure as
//! `{"error": {"code", "message"}}` with its status ([`HttpError`], `error.rs`), extractors
//! whose rejections come out in that shape (`extract.rs`), the principal of a request
//! ([`Caller`], `caller.rs`), the SSE event names of an execution's output (re-exported from
//! `sandlot-types`, which its clients share), and the limits the HTTP layer enforces
//! ([`ApiConfig`]).

pub mod caller;
pub mod error;
pub mod extract;

pub use caller::{bearer, principal_of, Caller};
pub use error::{
    api_error, code_of, error_body, error_response, status_of, HttpError, METHOD_NOT_ALLOWED,
    ROUTE_NOT_FOUND,
};
pub use extract::{ApiJson, ApiJsonOrDefault, ApiPath, ApiQuery};
pub use sandlot_types::{event_name, API_ERROR_EVENT, DONE_EVENT};

use sandlot_runtime::RuntimeConfig;

/// The header E2B's SDKs address a sandbox with when one listener serves them all.
pub const SANDBOX_ID_HEADER: &str = "e2b-sandbox-id";

/// Limits the HTTP layer enforces before a request reaches the runtime.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// Largest JSON request body in bytes.
    pub max_json_bytes: usize,
    /// Largest `code` of an execution in bytes (the runtime checks it too).
    pub max_code_bytes: usize,
    /// Largest file upload in bytes (the runtime checks it too while streaming).
    pub max_file_bytes: u64,
}

/// Room a JSON body gets beyond its code: the other fields, escaping.
const JSON_OVERHEAD_BYTES: usize = 2 << 20;

impl ApiConfig {
    /// Limits that agree with the runtime's: a JSON body may be 2 MiB plus the code limit.
    pub fn for_runtime(cfg: &RuntimeConfig) -> Self {
        Self {
            max_json_bytes: JSON_OVERHEAD_BYTES + cfg.max_code_bytes,
            max_code_bytes: cfg.max_code_bytes,
            max_file_bytes: cfg.max_file_bytes,
        }
    }
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self::for_runtime(&RuntimeConfig::new(Default::default(), Default::default()))
    }
}

#[cfg(test)]
mod tests;
