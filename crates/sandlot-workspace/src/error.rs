//! The crate's error type: one variant per failing operation, tagged with the step and the path,
//! so the runtime can log it and map it to a stable API code without parsing messages.

use std::path::PathBuf;

use crate::BackendKind;

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// The sandbox id is not a safe path component.
    #[error("invalid workspace id {id:?}: {reason}")]
    InvalidId { id: String, reason: &'static str },

    #[error("workspace {id} already exists")]
    Exists { id: String },

    #[error("workspace {id} does not exist")]
    NotFound { id: String },

    /// The operation has no honest implementation on this backend (for example a copy-on-write
    /// snapshot of an ext4 loop image, or shrinking one).
    #[error("{op} is not supported by the {backend} backend")]
    Unsupported {
        op: &'static str,
        backend: BackendKind,
    },

    /// The filesystem holding the data dir is below its reserve: a new workspace is refused so
    /// that the host disk never fills under running sandboxes.
    #[error(
        "host disk low: {free_bytes} bytes free on the filesystem holding {path}, \
         below the reserve of {reserve_bytes} bytes"
    )]
    HostSpaceLow {
        path: PathBuf,
        free_bytes: u64,
        reserve_bytes: u64,
    },

    /// The workspace filesystem (the Btrfs image) is nearly full and cannot grow.
    #[error(
        "workspace filesystem at {path} nearly full: {free_bytes} bytes free, \
         below the reserve of {reserve_bytes} bytes"
    )]
    FilesystemFull {
        path: PathBuf,
        free_bytes: u64,
        reserve_bytes: u64,
    },

    /// A program the backend needs is not installed.
    #[error("{tool} not found (searched PATH and the sbin directories): install {package}")]
    MissingTool {
        tool: &'static str,
        package: &'static str,
    },

    /// The requested backend cannot run on this host.
    #[error("the {backend} backend is unavailable: {reason}")]
    BackendUnavailable {
        backend: BackendKind,
        reason: String,
    },

    /// An external program (mkfs) ran and failed.
    #[error("{tool} {path} failed ({status}): {stderr}")]
    Tool {
        tool: &'static str,
        path: PathBuf,
        status: String,
        stderr: String,
    },

    /// An image that already exists could not be mounted. It is left exactly as it was: sandlot
    /// never formats an image it did not just create.
    #[error(
        "mounting the existing image {image} failed: {source}; the image was left untouched \
         (sandlot never reformats an existing image): check it, or move it away to start empty"
    )]
    MountExisting { image: PathBuf, source: nix::Error },

    /// Something other than our image is mounted where the workspace filesystem belongs.
    #[error("{path} is already a mount point of {found}, not of the workspace image")]
    MountConflict { path: PathBuf, found: String },

    /// A copy or re-own would descend deeper than its limit.
    #[error("{path} is nested deeper than {max} directories")]
    TooDeep { path: PathBuf, max: usize },

    /// A system call or ioctl failed.
    #[error("{step} {path}: {source}")]
    Sys {
        step: &'static str,
        path: PathBuf,
        source: nix::Error,
    },

    /// A file operation failed.
    #[error("{step} {path}: {source}")]
    Io {
        step: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

impl WorkspaceError {
    /// True for the refusals that mean "out of disk" (the API answers these with 507).
    pub fn is_out_of_space(&self) -> bool {
        matches!(
            self,
            WorkspaceError::HostSpaceLow { .. } | WorkspaceError::FilesystemFull { .. }
        )
    }

    /// The errno behind the failure, when there is one (0 otherwise).
    pub fn errno(&self) -> i32 {
        match self {
            WorkspaceError::Sys { source, .. } | WorkspaceError::MountExisting { source, .. } => {
                *source as i32
            }
            WorkspaceError::Io { source, .. } => source.raw_os_error().unwrap_or(0),
            _ => 0,
        }
    }

    /// Short name of the failing step, for logs and doctor.
    pub fn step(&self) -> &'static str {
        match self {
            WorkspaceError::InvalidId { .. } => "validate id",
            WorkspaceError::Exists { .. } | WorkspaceError::NotFound { .. } => "lookup",
            WorkspaceError::Unsupported { op, .. } => op,
            WorkspaceError::HostSpaceLow { .. } => "host reserve",
            WorkspaceError::FilesystemFull { .. } => "filesystem reserve",
            WorkspaceError::MissingTool { tool, .. } | WorkspaceError::Tool { tool, .. } => tool,
            WorkspaceError::BackendUnavailable { .. } => "backend",
            WorkspaceError::TooDeep { .. } => "walk",
            WorkspaceError::MountExisting { .. } | WorkspaceError::MountConflict { .. } => "mount",
            WorkspaceError::Sys { step, .. } | WorkspaceError::Io { step, .. } => step,
        }
    }
}

pub type Result<T, E = WorkspaceError> = std::result::Result<T, E>;

/// Attaches a step name and path to a nix result.
pub(crate) trait SysStep<T> {
    fn sys(self, step: &'static str, path: impl Into<PathBuf>) -> Result<T>;
}

impl<T> SysStep<T> for nix::Result<T> {
    fn sys(self, step: &'static str, path: impl Into<PathBuf>) -> Result<T> {
        self.map_err(|source| WorkspaceError::Sys {
            step,
            path: path.into(),
            source,
        })
    }
}

/// Attaches a step name and path to an io result.
pub(crate) trait IoStep<T> {
    fn at(self, step: &'static str, path: impl Into<PathBuf>) -> Result<T>;
}

impl<T> IoStep<T> for std::io::Result<T> {
    fn at(self, step: &'static str, path: impl Into<PathBuf>) -> Result<T> {
        self.map_err(|source| WorkspaceError::Io {
            step,
            path: path.into(),
            source,
        })
    }
}
