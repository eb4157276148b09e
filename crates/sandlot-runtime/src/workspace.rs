//! Sandboxes' workspaces on disk (DESIGN §3), through `sandlot-workspace`: a Btrfs subvolume
//! with a qgroup byte limit per sandbox on a loop-mounted image in `<data-dir>/disk` (or a
//! per-sandbox ext4 loop image where the kernel has no Btrfs). A workspace belongs to the
//! sandbox, not to its processes:
//!
//! - it is made when the sandbox first boots (pooled sandboxes included), owned by the
//!   sandbox's host uid and capped at `disk_mb` (a pooled sandbox handed out with another
//!   `disk_mb` just gets a new limit);
//! - each boot (the first, and every restart in place) hands the child a detached mount of it
//!   as the fourth fd of the fork request, which the jail moves onto `/workspace` inside the
//!   sandbox's own mount namespace;
//! - the host reaches it (files API, artifacts, archives) through its directory on the host,
//!   opened `O_PATH | O_NOFOLLOW` and resolved beneath with `openat2` (`files.rs`), so files are
//!   readable while the processes are dead, restarting or stopped;
//! - it is removed only when the sandbox ends (`teardown.rs`), and a server restart finds it
//!   again (`housekeeping.rs`).
//!
//! A zygote that does not take the fourth fd gives its children a tmpfs at `/workspace` as
//! before; such sandboxes get no disk workspace and their files live and die with their
//! processes.

use crate::error::{FileError, RuntimeError};
use crate::task::blocking;
use crate::Runtime;
use sandlot_workspace::{WorkspaceError, Workspaces};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

/// The directory of the data dir the workspaces live in.
pub(crate) const DIR: &str = "disk";

impl Runtime {
    /// The workspaces of this data dir, until shutdown unmounts them.
    pub(crate) fn workspaces(&self) -> Result<Arc<Workspaces>, RuntimeError> {
        self.inner.storage.workspaces()
    }

    /// The workspace backend in use and why, in words (for logs and `sandlot doctor`).
    pub fn workspace_backend(&self) -> String {
        match self.workspaces() {
            Ok(ws) => format!("{} ({})", ws.backend().kind, ws.backend().reason),
            Err(_) => "unmounted".into(),
        }
    }

    /// Unmounts the workspaces at shutdown, once nothing else uses them (the data stays on
    /// disk for the next start). Blocking; gives up after a few seconds.
    pub(crate) fn unmount_workspaces(&self) {
        let Some(mut ws) = self.inner.storage.take_workspaces() else {
            return;
        };
        for _ in 0..100 {
            match Arc::try_unwrap(ws) {
                Ok(only) => {
                    if let Err(e) = only.unmount() {
                        tracing::warn!(error = %e, "unmounting the workspaces failed");
                    }
                    return;
                }
                Err(shared) => ws = shared,
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        tracing::warn!("the workspaces are still in use; leaving them mounted");
    }

    /// Makes the workspace of a new sandbox: owned by its host uid, capped at `disk_mb`.
    /// A full host disk refuses it with [`RuntimeError::InsufficientStorage`].
    pub(crate) async fn create_workspace(
        &self,
        id: &str,
        uid: u32,
        disk_mb: u64,
    ) -> Result<(), RuntimeError> {
        let (rt, id) = (self.clone(), id.to_string());
        blocking("creating a workspace", move || {
            rt.workspaces()?
                .create(&id, uid, uid, disk_mb << 20)
                .map(|_| ())
                .map_err(|e| workspace_error("create", e))
        })
        .await?
    }

    /// A copy-on-write snapshot of workspace `src` as the new workspace `dst` (a fork base, a
    /// snapshot's files), with `src`'s owner and limit, counting toward `tenant`'s disk cap.
    pub(crate) async fn snapshot_workspace(
        &self,
        src: &str,
        dst: &str,
        tenant: Option<String>,
    ) -> Result<(), RuntimeError> {
        let (rt, src, dst) = (self.clone(), src.to_string(), dst.to_string());
        blocking("snapshotting a workspace", move || {
            rt.workspaces()?
                .snapshot_for(&src, &dst, tenant.as_deref())
                .map(|_| ())
                .map_err(|err| workspace_error("snapshot", err))
        })
        .await?
    }

    /// A detached mount of the sandbox's workspace, for its child to move onto `/workspace`.
    pub(crate) fn workspace_mount(&self, id: &str) -> Result<OwnedFd, RuntimeError> {
        self.workspaces()?
            .open_tree(id)
            .map_err(|e| workspace_error("open_tree", e))
    }

    /// Sets the byte limit of a sandbox's workspace (`disk_mb`).
    pub(crate) fn set_workspace_limit(&self, id: &str, disk_mb: u64) -> Result<(), RuntimeError> {
        self.workspaces()?
            .set_limit(id, disk_mb << 20)
            .map_err(|e| workspace_error("set_limit", e))
    }

    /// Removes a sandbox's workspace and everything in it; true when it is gone. Blocking.
    pub(crate) fn remove_workspace(&self, id: &str) -> bool {
        let Ok(ws) = self.workspaces() else {
            return false;
        };
        match ws.remove(id) {
            Ok(()) | Err(WorkspaceError::NotFound { .. }) => true,
            Err(e) => {
                tracing::warn!(sandbox = id, error = %e, "removing a workspace failed");
                false
            }
        }
    }

    /// The sandbox's workspace directory on the host as an `O_PATH` fd, the root every
    /// host-side lookup resolves beneath. Blocking.
    pub(crate) fn workspace_dir(&self, id: &str) -> Result<OwnedFd, FileError> {
        let path = self
            .workspaces()
            .ok()
            .and_then(|ws| ws.path(id).ok())
            .ok_or(FileError::NoWorkspace)?;
        open_dir(&path)
    }
}

/// Opens a directory `O_PATH | O_DIRECTORY | O_NOFOLLOW`.
pub(crate) fn open_dir(path: &Path) -> Result<OwnedFd, FileError> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| FileError::PathHasNul)?;
    // SAFETY: opening a path we built; O_PATH gives no access by itself.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(FileError::NoWorkspace);
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A workspace failure as the runtime reports it: out of disk is the client's to know
/// (`insufficient_storage`); anything else is the server's.
pub(crate) fn workspace_error(op: &'static str, e: WorkspaceError) -> RuntimeError {
    if e.is_out_of_space() {
        // The details name host paths: they go to the log, not to the client.
        tracing::warn!(error = %e, "refusing a workspace: the disk is below its reserve");
        RuntimeError::InsufficientStorage
    } else {
        RuntimeError::Workspace { op, source: e }
    }
}

/// The workspace of the sandbox whose driver has host pid `pid`, as a directory fd.
pub fn workspace_fd(pid: i32) -> Result<OwnedFd, FileError> {
    let root = CString::new(format!("/proc/{pid}/root")).map_err(|_| FileError::PathHasNul)?;
    // SAFETY: opening a path we built; O_PATH gives no access by itself.
    let fd = unsafe {
        libc::open(
            root.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(FileError::ProcessesGone);
    }
    // SAFETY: a fresh fd we own.
    let root = unsafe { OwnedFd::from_raw_fd(fd) };
    // `workspace` sits on the sandbox's read-only, locked base root, so it cannot be swapped;
    // resolve it with the same rules anyway (it is a mount point, so allow crossing into it).
    let c = CString::new("workspace").unwrap_or_default();
    // SAFETY: openat relative to an fd we own, with a static name, not following symlinks.
    let ws = unsafe {
        libc::openat(
            root.as_raw_fd(),
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if ws < 0 {
        return Err(FileError::NoWorkspace);
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(ws) })
}
