//! Blocking work off the async threads. Apart from `util.rs` because its failure is a
//! [`RuntimeError`], and the error types sit above the plain helpers.

use crate::error::RuntimeError;

/// Runs blocking work (syscalls, file I/O, waits) on tokio's blocking pool; `task` names it in
/// the error if it panics.
pub(crate) async fn blocking<T: Send + 'static>(
    task: &'static str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, RuntimeError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|source| RuntimeError::Task { task, source })
}
