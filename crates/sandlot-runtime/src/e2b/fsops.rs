//! File operations beyond read/write/list/delete, for clients that manage a workspace like a
//! filesystem (E2B's `files.get_info`, `make_dir`, `rename`): stat, make a directory (with its
//! parents), move. The same rules as `files.rs`: every lookup starts from the workspace's fd
//! and goes through `openat2` without following any symlink or leaving the workspace's mount;
//! what is created belongs to the sandbox's uid; the final component is never followed
//! (`fstatat(AT_SYMLINK_NOFOLLOW)`, `mkdirat`, `renameat` act on the name itself).
//!
//! Also what E2B shows of an entry beyond its stat: its metadata (`user.e2b.<key>` extended
//! attributes, written with an upload by `write_file_with_metadata` or set inside the
//! sandbox) and a symlink's target (its text, resolved lexically, never followed to read).

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

/// The extended-attribute namespace E2B's file metadata lives in: key `k` is `user.e2b.k`.
pub const METADATA_XATTR_PREFIX: &str = "user.e2b.";
/// Most bytes of the attribute names one file's listing is read up to (more: the rest of its
/// metadata is not shown).
const XATTR_LIST_MAX: usize = 64 * 1024;
/// Longest value read back (longer ones, set from inside the sandbox, are left out).
const XATTR_VALUE_MAX: usize = 4096;

/// Sets extended attribute `name` on an open file.
pub(crate) fn set_xattr(file: &std::fs::File, name: &str, value: &[u8]) -> Result<(), nix::Error> {
    let c = CString::new(name).map_err(|_| nix::Error::EINVAL)?;
    // SAFETY: fsetxattr on an fd we own, with a NUL-terminated name and a buffer of `len`.
    let r = unsafe {
        libc::fsetxattr(
            file.as_raw_fd(),
            c.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if r != 0 {
        return Err(nix::Error::last());
    }
    Ok(())
}

/// What E2B shows of an entry beyond its stat: its `user.e2b.*` metadata, and for a symlink
/// where it points.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EntryExtra {
    /// `user.e2b.<key>` attributes as `key -> value` (values that are UTF-8 only).
    pub metadata: std::collections::BTreeMap<String, String>,
    /// The entry is a symlink: its target.
    pub symlink: Option<SymlinkTarget>,
}

/// Where a symlink of the workspace points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymlinkTarget {
    /// The target inside the workspace (relative to it), when it resolves there lexically.
    pub workspace_path: Option<String>,
    /// The link's text as stored.
    pub raw: String,
    /// The target's kind (`file`, `dir`, ...) when it is inside the workspace and exists (not
    /// followed further: a link to a link is `symlink`).
    pub kind: Option<String>,
}

/// Reads the `user.e2b.*` attributes of an entry opened `O_PATH` (through its `/proc/self/fd`
/// link, since the `f*xattr` calls refuse `O_PATH` fds). A filesystem without user xattrs
/// has none.
fn read_metadata(fd: &OwnedFd) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(path) = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())) else {
        return out;
    };
    let mut names = vec![0u8; XATTR_LIST_MAX];
    // SAFETY: listxattr into a buffer of the given length; the path is NUL-terminated.
    let n = unsafe { libc::listxattr(path.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    if n <= 0 {
        return out;
    }
    names.truncate(n as usize);
    let mut value = vec![0u8; XATTR_VALUE_MAX];
    for name in names.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let Some(key) = name.strip_prefix(METADATA_XATTR_PREFIX.as_bytes()) else {
            continue;
        };
        let (Ok(key), Ok(cname)) = (std::str::from_utf8(key), CString::new(name)) else {
            continue;
        };
        // SAFETY: getxattr into a buffer of the given length; both strings NUL-terminated.
        let len = unsafe {
            libc::getxattr(
                path.as_ptr(),
                cname.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        if len < 0 || key.is_empty() {
            continue;
        }
        if let Ok(v) = std::str::from_utf8(&value[..len as usize]) {
            out.insert(key.to_owned(), v.to_owned());
        }
    }
    out
}

/// Resolves a symlink's text lexically against the directory `dir` (workspace-relative) that
/// holds it: the workspace-relative target, or `None` when it leaves the workspace. The
/// workspace is `/workspace` and `/home/user` inside the sandbox.
fn resolve_link(dir: &[String], raw: &str) -> Option<String> {
    let (mut parts, rest): (Vec<String>, &str) = if let Some(r) = raw.strip_prefix('/') {
        let r = ["workspace", "home/user"].iter().find_map(|p| {
            r.strip_prefix(p)
                .filter(|t| t.is_empty() || t.starts_with('/'))
        })?;
        (Vec::new(), r)
    } else {
        (dir.to_vec(), raw)
    };
    for c in rest.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            c => parts.push(c.to_owned()),
        }
    }
    Some(parts.join("/"))
}

/// [`EntryExtra`] of a workspace path (`""`: the workspace); never follows a symlink to read
/// anything but the link's own text.
pub fn entry_extra(ws: &OwnedFd, path: &str) -> Result<EntryExtra, FileError> {
    let parts = normalize(path)?;
    let shown = parts.join("/");
    let Some((name, dirs)) = parts.split_last() else {
        let fd = openat2(ws.as_raw_fd(), ".", libc::O_PATH, 0).map_err(|e| map_errno(e, ""))?;
        return Ok(EntryExtra {
            metadata: read_metadata(&fd),
            symlink: None,
        });
    };
    let dir = open_dir(ws, dirs, None, &shown)?;
    match openat2(dir.as_raw_fd(), name, libc::O_PATH, 0) {
        Ok(fd) => Ok(EntryExtra {
            metadata: read_metadata(&fd),
            symlink: None,
        }),
        Err(nix::Error::ELOOP) => {
            let c = CString::new(name.as_str()).map_err(|_| FileError::PathHasNul)?;
            let mut buf = vec![0u8; libc::PATH_MAX as usize];
            // SAFETY: readlinkat of one name in a directory fd we own, into a buffer of len.
            let n = unsafe {
                libc::readlinkat(
                    dir.as_raw_fd(),
                    c.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            };
            if n < 0 {
                return Err(map_errno(nix::Error::last(), &shown));
            }
            let raw = String::from_utf8_lossy(&buf[..n as usize]).into_owned();
            let workspace_path = resolve_link(dirs, &raw);
            let kind = workspace_path
                .as_deref()
                .and_then(|t| stat(ws, t).ok())
                .map(|e| e.kind);
            Ok(EntryExtra {
                metadata: Default::default(),
                symlink: Some(SymlinkTarget {
                    workspace_path,
                    raw,
                    kind,
                }),
            })
        }
        Err(e) => Err(map_errno(e, &shown)),
    }
}

impl Runtime {
    /// [`EntryExtra`] of each of `paths` (workspace-relative) in one pass; an entry gone
    /// since it was listed has none.
    pub async fn entry_extras(
        &self,
        id: &str,
        paths: Vec<String>,
    ) -> Result<Vec<EntryExtra>, RuntimeError> {
        let ws = self.workspace_root(id)?;
        Ok(blocking("reading file metadata", move || {
            ws.open().map(|root| {
                paths
                    .iter()
                    .map(|p| entry_extra(&root, p).unwrap_or_default())
                    .collect()
            })
        })
        .await??)
    }

    /// [`Runtime::write_file`] that also stores `metadata` as `user.e2b.<key>` attributes of
    /// the new file (set before it replaces the target, so an overwrite drops the old ones).
    /// The caller bounds and checks the keys and values.
    pub async fn write_file_with_metadata(
        &self,
        id: &str,
        path: &str,
        body: crate::files::ByteStream,
        metadata: &std::collections::BTreeMap<String, String>,
    ) -> Result<FileEntry, RuntimeError> {
        self.check_not_contained(&*self.entry(id)?)?;
        let root = self.workspace_root(id)?;
        let xattrs = metadata
            .iter()
            .map(|(k, v)| (format!("{METADATA_XATTR_PREFIX}{k}"), v.as_bytes().to_vec()))
            .collect();
        let (body, tap) = self.tap_input(body);
        let written = self.write_file_in_with(root, path, body, xattrs).await;
        self.record_input(id, written.as_ref().ok(), tap).await;
        written
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_resolve_lexically_inside_the_workspace() {
        let d = |s: &str| -> Vec<String> {
            s.split('/')
                .filter(|c| !c.is_empty())
                .map(String::from)
                .collect()
        };
        assert_eq!(resolve_link(&d("a"), "t.txt").as_deref(), Some("a/t.txt"));
        assert_eq!(resolve_link(&d("a/b"), "../t").as_deref(), Some("a/t"));
        assert_eq!(resolve_link(&d("a"), "/home/user/x").as_deref(), Some("x"));
        assert_eq!(
            resolve_link(&d("a"), "/workspace/y/./z").as_deref(),
            Some("y/z")
        );
        assert_eq!(resolve_link(&d(""), "../etc/passwd"), None);
        assert_eq!(resolve_link(&d("a"), "/etc/passwd"), None);
        assert_eq!(resolve_link(&d("a"), "/home/userx"), None);
        assert_eq!(resolve_link(&d("a"), "/workspace/../../x"), None);
    }
}
