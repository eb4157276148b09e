//! The crate's one error type.

/// What can go wrong building a scanner or a canary. Scanning itself cannot fail.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    #[error("canary is {len} bytes; canaries must be at least {min} bytes so they never match ordinary text")]
    CanaryTooShort { len: usize, min: usize },
    #[error("building the canary matcher: {0}")]
    Canaries(String),
    #[error("reading the OS random source for a canary: {0}")]
    Random(String),
}
