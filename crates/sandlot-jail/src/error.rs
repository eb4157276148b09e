//! The jail's error type: which step of the containment sequence failed, and the errno.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum JailError {
    #[error("invalid jail config: {0}")]
    Config(#[from] serde_json::Error),
    #[error("{step} failed: {source}")]
    Sys {
        step: &'static str,
        source: nix::Error,
    },
    #[error("{step} {path}: {source}")]
    Path {
        step: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("protocol with the server: {0}")]
    Protocol(String),
    #[error("capabilities: {0}")]
    Caps(#[from] crate::caps::CapsError),
    #[error("landlock: {0}")]
    Landlock(#[from] crate::landlock::LandlockError),
    #[error("seccomp: {0}")]
    Seccomp(#[from] crate::seccomp::SeccompError),
}

impl JailError {
    /// The errno behind the failure, when there is one.
    pub fn errno(&self) -> i32 {
        match self {
            JailError::Sys { source, .. } => *source as i32,
            JailError::Path { source, .. } => source.raw_os_error().unwrap_or(0),
            _ => 0,
        }
    }

    /// Short name of the failing step, for the server's log and the API error.
    pub fn step(&self) -> &'static str {
        match self {
            JailError::Config(_) => "config",
            JailError::Sys { step, .. } | JailError::Path { step, .. } => step,
            JailError::Protocol(_) => "protocol",
            JailError::Caps(_) => "capabilities",
            JailError::Landlock(_) => "landlock",
            JailError::Seccomp(_) => "seccomp",
        }
    }
}

/// Attaches a step name to a nix result.
pub(crate) trait Step<T> {
    fn step(self, step: &'static str) -> Result<T, JailError>;
}

impl<T> Step<T> for nix::Result<T> {
    fn step(self, step: &'static str) -> Result<T, JailError> {
        self.map_err(|source| JailError::Sys { step, source })
    }
}

/// Attaches a step name and path to an io result.
pub(crate) trait PathStep<T> {
    fn at(self, step: &'static str, path: impl Into<PathBuf>) -> Result<T, JailError>;
}

impl<T> PathStep<T> for std::io::Result<T> {
    fn at(self, step: &'static str, path: impl Into<PathBuf>) -> Result<T, JailError> {
        self.map_err(|source| JailError::Path {
            step,
            path: path.into(),
            source,
        })
    }
}
