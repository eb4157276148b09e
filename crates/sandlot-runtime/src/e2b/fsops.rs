//! File operations beyond read/write/list/delete, for clients that manage a workspace like a
//! filesystem (E2B's `files.get_info`, `make_dir`, `rename`): stat, make a directory (with its
//! parents), move. The same rules as `files.rs`: every lookup starts from the workspace's fd
//! and goes through `openat2` without following any symlink or leaving the workspace's mount;
//! what is created belongs to the sandbox's uid; the final component is never followed
//! (`fstatat(AT_SYMLINK_NOFOLLOW)`, `mkdirat`, `renameat` act on the name itself).

use crate::error::{FileError, RuntimeError};
use crate::files::{as_sandbox, entry_of, fstat, kind_of, map_errno, normalize, openat2};
use crate::task::blocking;
use crate::Runtime;
use sandlot_types::FileEntry;
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};

/// Opens directory `parts` under the workspace (creating missing ones as `uid` when asked).
fn open_dir(
    ws: &OwnedFd,
    parts: &[String],
    create: Option<u32>,
    shown: &str,
) -> Result<OwnedFd, FileError> {
    let mut cur = openat2(ws.as_raw_fd(), ".", libc::O_PATH | libc::O_DIRECTORY, 0)
        .map_err(|e| map_errno(e, shown))?;
    for p in parts {
        if let Some(uid) = create {
            mkdir(&cur, p, uid).map_err(|e| map_errno(e, shown))?;
        }
        cur = openat2(cur.as_raw_fd(), p, libc::O_PATH | libc::O_DIRECTORY, 0)
            .map_err(|e| map_errno(e, shown))?;
    }
    Ok(cur)
}

/// `mkdirat` as the sandbox; an existing entry is left for the caller to look at.
fn mkdir(dir: &OwnedFd, name: &str, uid: u32) -> Result<bool, nix::Error> {
    let c = CString::new(name).map_err(|_| nix::Error::EINVAL)?;
    let (r, e) = as_sandbox(uid, || {
        // SAFETY: mkdirat relative to a directory fd we own, with a NUL-terminated name.
        let r = unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), 0o755) };
        (r, nix::Error::last())
    });
    match (r, e) {
        (0, _) => Ok(true),
        (_, nix::Error::EEXIST) => Ok(false),
        (_, e) => Err(e),
    }
}

/// The workspace root as a listing entry (`entry_of` refuses to name it).
fn root_entry(ws: &OwnedFd) -> Result<FileEntry, FileError> {
    let dir = openat2(ws.as_raw_fd(), ".", libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .map_err(|e| map_errno(e, ""))?;
    let st = fstat(dir.as_raw_fd()).map_err(|e| map_errno(e, ""))?;
    Ok(FileEntry {
        path: String::new(),
        name: String::new(),
        kind: kind_of(st.st_mode).to_string(),
        size: st.st_size as u64,
        modified: st.st_mtime,
        mode: st.st_mode & 0o7777,
    })
}

/// Stat of a path, not following a final symlink; `""` is the workspace itself.
pub fn stat(ws: &OwnedFd, path: &str) -> Result<FileEntry, FileError> {
    if normalize(path)?.is_empty() {
        return root_entry(ws);
    }
    entry_of(ws, path)
}

/// Makes directory `path` and any missing parents. `Ok(false)`: it was already a directory.
pub fn make_dir(ws: &OwnedFd, uid: u32, path: &str) -> Result<bool, FileError> {
    let parts = normalize(path)?;
    let shown = parts.join("/");
    let Some((name, dirs)) = parts.split_last() else {
        return Ok(false);
    };
    let parent = open_dir(ws, dirs, Some(uid), &shown)?;
    let created = mkdir(&parent, name, uid).map_err(|e| map_errno(e, &shown))?;
    if !created {
        let e = entry_of(ws, &shown)?;
        if e.kind != "dir" {
            return Err(FileError::NotADirectory(shown));
        }
    }
    Ok(created)
}

/// Moves `from` to `to` (replacing a file there, as rename does; creating `to`'s parents).
pub fn move_path(ws: &OwnedFd, uid: u32, from: &str, to: &str) -> Result<FileEntry, FileError> {
    let src = normalize(from)?;
    let dst = normalize(to)?;
    let (Some((src_name, src_dirs)), Some((dst_name, dst_dirs))) =
        (src.split_last(), dst.split_last())
    else {
        return Err(FileError::NamesWorkspace);
    };
    let (src_shown, dst_shown) = (src.join("/"), dst.join("/"));
    let src_dir = open_dir(ws, src_dirs, None, &src_shown)?;
    let dst_dir = open_dir(ws, dst_dirs, Some(uid), &dst_shown)?;
    let (a, b) = (
        CString::new(src_name.as_str()).map_err(|_| FileError::PathHasNul)?,
        CString::new(dst_name.as_str()).map_err(|_| FileError::PathHasNul)?,
    );
    let (r, e) = as_sandbox(uid, || {
        // SAFETY: renameat between two directory fds we own, with NUL-terminated names; it
        // acts on the names themselves and follows no symlink.
        let r = unsafe {
            libc::renameat(
                src_dir.as_raw_fd(),
                a.as_ptr(),
                dst_dir.as_raw_fd(),
                b.as_ptr(),
            )
        };
        (r, nix::Error::last())
    });
    if r != 0 {
        let shown = if e == nix::Error::ENOENT {
            &src_shown
        } else {
            &dst_shown
        };
        return Err(map_errno(e, shown));
    }
    entry_of(ws, &dst_shown)
}

impl Runtime {
    /// Stat of a workspace path (`""` is the workspace), not following a final symlink.
    pub async fn stat_path(&self, id: &str, path: &str) -> Result<FileEntry, RuntimeError> {
        let ws = self.workspace_root(id)?;
        let p = path.to_string();
        Ok(blocking("stat", move || ws.open().and_then(|root| stat(&root, &p))).await??)
    }

    /// Makes a directory of the workspace and its parents; `false` if it already was one.
    pub async fn make_dir(&self, id: &str, path: &str) -> Result<bool, RuntimeError> {
        let ws = self.workspace_root(id)?;
        let (p, uid) = (path.to_string(), ws.uid);
        Ok(blocking("making a directory", move || {
            ws.open().and_then(|root| make_dir(&root, uid, &p))
        })
        .await??)
    }

    /// Moves (renames) a file or directory of the workspace; returns the moved entry.
    pub async fn move_path(
        &self,
        id: &str,
        from: &str,
        to: &str,
    ) -> Result<FileEntry, RuntimeError> {
        let ws = self.workspace_root(id)?;
        let (a, b, uid) = (from.to_string(), to.to_string(), ws.uid);
        Ok(blocking("moving a file", move || {
            ws.open().and_then(|root| move_path(&root, uid, &a, &b))
        })
        .await??)
    }
}
