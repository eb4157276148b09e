//! Files in and out of a sandbox's workspace without ever following a path the sandbox
//! controls: every lookup starts from an fd of the workspace (its directory on disk, see
//! `workspace.rs`, or for a sandbox without one the tmpfs reached through the kernel's
//! `/proc/<pid>/root` link) and goes through `openat2` with `RESOLVE_IN_ROOT`,
//! `RESOLVE_NO_SYMLINKS`, `RESOLVE_NO_MAGICLINKS` and `RESOLVE_NO_XDEV`. Only regular files are
//! read or written; created files and directories belong to the sandbox's uid.
//!
//! The runtime's file operations (`impl Runtime`: write, read, list, delete) are at the end;
//! they run these blocking primitives off the async threads.

use crate::error::{FileError, RuntimeError};
use crate::sandbox::Live;
use crate::task::blocking;
use crate::util::lock;
use crate::Runtime;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use sandlot_types::FileEntry;
use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use tokio::sync::mpsc;

/// A byte stream of a file being uploaded.
pub type ByteStream = std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, std::io::Error>> + Send>>;

// The fd-relative primitives are shared with the workspace copies (`sandlot_workspace::fsat`).
pub(crate) use sandlot_workspace::fsat::{fstat, openat2};

/// Most entries a listing returns.
pub const MAX_LIST: usize = 10_000;

/// Checks a client path and returns it relative to the workspace. Accepts `a/b`, `./a/b` and
/// `/workspace/a/b`; refuses other absolute paths, `..`, NUL bytes and over-long paths.
pub fn normalize(path: &str) -> Result<Vec<String>, FileError> {
    if path.contains('\0') {
        return Err(FileError::PathHasNul);
    }
    if path.len() > 4096 {
        return Err(FileError::PathTooLong);
    }
    let rel = if let Some(rest) = path.strip_prefix("/workspace") {
        if !(rest.is_empty() || rest.starts_with('/')) {
            return Err(FileError::OutsideWorkspace(path.to_string()));
        }
        rest
    } else if path.starts_with('/') {
        return Err(FileError::OutsideWorkspace(path.to_string()));
    } else {
        path
    };
    let mut parts = Vec::new();
    for comp in rel.split('/') {
        match comp {
            "" | "." => continue,
            ".." => return Err(FileError::DotDot(path.to_string())),
            c if c.len() > 255 => return Err(FileError::ComponentTooLong),
            c => parts.push(c.to_string()),
        }
    }
    Ok(parts)
}

/// What the kernel answered for `path`, as the file error a client sees.
pub(crate) fn map_errno(e: nix::Error, path: &str) -> FileError {
    let path = path.to_string();
    match e {
        nix::Error::ENOENT => FileError::NotFound(path),
        nix::Error::ELOOP => FileError::Symlink(path),
        nix::Error::EXDEV => FileError::LeavesWorkspace(path),
        nix::Error::ENOTDIR => FileError::ParentNotDirectory(path),
        nix::Error::EISDIR => FileError::IsDirectory(path),
        nix::Error::ENOSPC | nix::Error::EDQUOT => FileError::WorkspaceFull,
        nix::Error::EFBIG => FileError::TooLarge(path),
        nix::Error::ENAMETOOLONG => FileError::NameTooLong(path),
        nix::Error::EEXIST => FileError::NotADirectory(path),
        nix::Error::ESRCH => FileError::SandboxGone,
        nix::Error::ENXIO => FileError::Fifo(path),
        errno => FileError::Os { path, errno },
    }
}

/// A failed write into the workspace, as the file error a client sees.
fn write_error(e: std::io::Error) -> FileError {
    match e.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => FileError::WorkspaceFull,
        Some(libc::EFBIG) => FileError::WriteTooLarge,
        _ => FileError::Write(e),
    }
}

pub(crate) fn kind_of(mode: u32) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFREG => "file",
        libc::S_IFDIR => "dir",
        libc::S_IFLNK => "symlink",
        _ => "other",
    }
}

/// Runs `f` with this thread's filesystem uid and gid set to the sandbox's host uid. Files the
/// host creates in a sandbox's tmpfs must belong to an id mapped in the sandbox's user
/// namespace (the kernel refuses others with EOVERFLOW), and they should be the sandbox's anyway.
pub(crate) fn as_sandbox<T>(uid: u32, f: impl FnOnce() -> T) -> T {
    sandlot_workspace::fsat::as_fsuid(uid, uid, f)
}

/// Opens (creating as needed, owned by `uid`) the directory `parts` under the workspace.
fn open_dir(
    ws: &OwnedFd,
    parts: &[String],
    create: bool,
    uid: u32,
    shown: &str,
) -> Result<OwnedFd, FileError> {
    let mut cur = openat2(ws.as_raw_fd(), ".", libc::O_PATH | libc::O_DIRECTORY, 0)
        .map_err(|e| map_errno(e, shown))?;
    for p in parts {
        if create {
            let c = CString::new(p.as_str()).map_err(|_| FileError::PathHasNul)?;
            let r = as_sandbox(uid, || {
                // SAFETY: mkdirat relative to a dir fd we own.
                let r = unsafe { libc::mkdirat(cur.as_raw_fd(), c.as_ptr(), 0o755) };
                (r, nix::Error::last())
            });
            if r.0 != 0 && r.1 != nix::Error::EEXIST {
                return Err(map_errno(r.1, shown));
            }
        }
        let next = openat2(cur.as_raw_fd(), p, libc::O_PATH | libc::O_DIRECTORY, 0)
            .map_err(|e| map_errno(e, shown))?;
        cur = next;
    }
    Ok(cur)
}

/// Creates or truncates a regular file for writing, owned by `uid`.
/// An upload being written aside: a new file beside its target, renamed over the target only
/// once it is whole, so a reader racing the upload gets the old file or the new one, never a
/// part.
pub struct Upload {
    /// The new file, open for writing.
    pub file: std::fs::File,
    /// The target's path as clients name it.
    pub shown: String,
    dir: OwnedFd,
    tmp: String,
    name: String,
    uid: u32,
}

impl Upload {
    /// Renames the finished file over its target (as the sandbox's uid, through the directory
    /// fd, so no path the sandbox controls is followed).
    pub fn commit(self) -> Result<String, FileError> {
        let (tmp, name) = (cstr(&self.tmp)?, cstr(&self.name)?);
        // SAFETY: renameat on a directory fd we own and two NUL-terminated names.
        let r = as_sandbox(self.uid, || unsafe {
            libc::renameat(
                self.dir.as_raw_fd(),
                tmp.as_ptr(),
                self.dir.as_raw_fd(),
                name.as_ptr(),
            )
        });
        if r != 0 {
            let e = nix::Error::last();
            self.discard();
            return Err(map_errno(e, &self.shown));
        }
        Ok(self.shown)
    }

    /// Removes the unfinished file; the target is untouched.
    pub fn discard(&self) {
        if let Ok(tmp) = cstr(&self.tmp) {
            // SAFETY: unlinkat on a directory fd we own and a NUL-terminated name.
            unsafe { libc::unlinkat(self.dir.as_raw_fd(), tmp.as_ptr(), 0) };
        }
    }
}

fn cstr(name: &str) -> Result<std::ffi::CString, FileError> {
    std::ffi::CString::new(name).map_err(|_| FileError::Os {
        path: name.to_string(),
        errno: nix::Error::EINVAL,
    })
}

/// Starts an upload to `path`: checks the target (absent or a regular file; symlinks, FIFOs
/// and directories are refused as before), then creates the file it will be written to aside.
pub fn create_file(ws: &OwnedFd, uid: u32, path: &str) -> Result<Upload, FileError> {
    let parts = normalize(path)?;
    let Some((name, dirs)) = parts.split_last() else {
        return Err(FileError::NamesWorkspace);
    };
    let shown = parts.join("/");
    let dir = open_dir(ws, dirs, true, uid, &shown)?;
    // O_NONBLOCK so a FIFO cannot block us; O_PATH would not tell a FIFO from a file.
    match openat2(
        dir.as_raw_fd(),
        name,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
        0,
    ) {
        Ok(fd) => {
            let st = fstat(fd.as_raw_fd()).map_err(|e| map_errno(e, &shown))?;
            if st.st_mode & libc::S_IFMT != libc::S_IFREG {
                return Err(FileError::NotRegular {
                    path: shown,
                    kind: kind_of(st.st_mode),
                });
            }
        }
        Err(nix::Error::ENOENT) => {}
        Err(e) => return Err(map_errno(e, &shown)),
    }
    let tmp = format!(".sandlot-upload-{}", crate::util::new_id(""));
    let fd = as_sandbox(uid, || {
        openat2(
            dir.as_raw_fd(),
            &tmp,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
            0o644,
        )
    })
    .map_err(|e| map_errno(e, &shown))?;
    Ok(Upload {
        file: std::fs::File::from(fd),
        shown,
        dir,
        tmp,
        name: name.clone(),
        uid,
    })
}

/// Opens a regular file for reading; returns it and its size.
pub fn open_file(ws: &OwnedFd, path: &str) -> Result<(std::fs::File, u64), FileError> {
    let parts = normalize(path)?;
    if parts.is_empty() {
        return Err(FileError::ReadWorkspace);
    }
    let shown = parts.join("/");
    // O_NONBLOCK so a FIFO cannot block us; regular files ignore it.
    let fd = openat2(
        ws.as_raw_fd(),
        &shown,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
        0,
    )
    .map_err(|e| map_errno(e, &shown))?;
    let st = fstat(fd.as_raw_fd()).map_err(|e| map_errno(e, &shown))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(FileError::NotRegular {
            path: shown,
            kind: kind_of(st.st_mode),
        });
    }
    // SAFETY: fcntl flag change on our own fd.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, libc::O_RDONLY) };
    Ok((std::fs::File::from(fd), st.st_size as u64))
}

/// Stat of a path (not following a final symlink), as a listing entry.
pub fn entry_of(ws: &OwnedFd, path: &str) -> Result<FileEntry, FileError> {
    let parts = normalize(path)?;
    let shown = parts.join("/");
    let Some((name, dirs)) = parts.split_last() else {
        return Err(FileError::NamesWorkspace);
    };
    let dir = open_dir(ws, dirs, false, 0, &shown)?;
    stat_entry(dir.as_raw_fd(), name, &shown).map_err(|e| map_errno(e, &shown))
}

fn stat_entry(dir: RawFd, name: &str, rel: &str) -> Result<FileEntry, nix::Error> {
    let c = CString::new(name).map_err(|_| nix::Error::EINVAL)?;
    // SAFETY: stat is plain old data.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstatat relative to a dir fd we own, not following symlinks.
    if unsafe { libc::fstatat(dir, c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } != 0 {
        return Err(nix::Error::last());
    }
    Ok(FileEntry {
        path: rel.to_string(),
        name: name.to_string(),
        kind: kind_of(st.st_mode).to_string(),
        size: st.st_size as u64,
        modified: st.st_mtime,
        mode: st.st_mode & 0o7777,
    })
}

/// Lists a directory of the workspace.
pub fn list(ws: &OwnedFd, path: &str, recursive: bool) -> Result<Vec<FileEntry>, FileError> {
    let parts = normalize(path)?;
    let shown = parts.join("/");
    let dir = open_dir(ws, &parts, false, 0, &shown)?;
    let mut out = Vec::new();
    walk(&dir, &shown, recursive, 0, &mut out).map_err(|e| map_errno(e, &shown))?;
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

fn walk(
    dir: &OwnedFd,
    rel: &str,
    recursive: bool,
    depth: usize,
    out: &mut Vec<FileEntry>,
) -> Result<(), nix::Error> {
    let readable = openat2(dir.as_raw_fd(), ".", libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
    let mut d = nix::dir::Dir::from_fd(readable)?;
    let mut subdirs = Vec::new();
    for ent in d.iter() {
        let ent = ent?;
        let name = ent.file_name().to_string_lossy().into_owned();
        if name == "." || name == ".." {
            continue;
        }
        if out.len() >= MAX_LIST {
            return Ok(());
        }
        let child_rel = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        let Ok(e) = stat_entry(dir.as_raw_fd(), &name, &child_rel) else {
            continue;
        };
        if recursive && e.kind == "dir" && depth < 32 {
            subdirs.push((name, child_rel));
        }
        out.push(e);
    }
    for (name, child_rel) in subdirs {
        if let Ok(sub) = openat2(dir.as_raw_fd(), &name, libc::O_PATH | libc::O_DIRECTORY, 0) {
            walk(&sub, &child_rel, recursive, depth + 1, out)?;
        }
    }
    Ok(())
}

/// Removes a file, or a directory and everything in it.
pub fn remove(ws: &OwnedFd, path: &str) -> Result<(), FileError> {
    let parts = normalize(path)?;
    let shown = parts.join("/");
    let Some((name, dirs)) = parts.split_last() else {
        return Err(FileError::RemoveWorkspace);
    };
    let dir = open_dir(ws, dirs, false, 0, &shown)?;
    let e = stat_entry(dir.as_raw_fd(), name, &shown).map_err(|e| map_errno(e, &shown))?;
    if e.kind == "dir" {
        let sub = openat2(dir.as_raw_fd(), name, libc::O_PATH | libc::O_DIRECTORY, 0)
            .map_err(|e| map_errno(e, &shown))?;
        empty_dir(&sub, 0).map_err(|e| map_errno(e, &shown))?;
    }
    unlink(dir.as_raw_fd(), name, e.kind == "dir").map_err(|e| map_errno(e, &shown))
}

fn unlink(dir: RawFd, name: &str, is_dir: bool) -> Result<(), nix::Error> {
    let c = CString::new(name).map_err(|_| nix::Error::EINVAL)?;
    let flags = if is_dir { libc::AT_REMOVEDIR } else { 0 };
    // SAFETY: unlinkat relative to a dir fd we own; never follows symlinks.
    if unsafe { libc::unlinkat(dir, c.as_ptr(), flags) } != 0 {
        return Err(nix::Error::last());
    }
    Ok(())
}

fn empty_dir(dir: &OwnedFd, depth: usize) -> Result<(), nix::Error> {
    if depth > 64 {
        return Err(nix::Error::ELOOP);
    }
    let mut entries = Vec::new();
    walk(dir, "", false, 0, &mut entries)?;
    for e in entries {
        if e.kind == "dir" {
            let sub = openat2(
                dir.as_raw_fd(),
                &e.name,
                libc::O_PATH | libc::O_DIRECTORY,
                0,
            )?;
            empty_dir(&sub, depth + 1)?;
        }
        unlink(dir.as_raw_fd(), &e.name, e.kind == "dir")?;
    }
    Ok(())
}

/// Where the host reaches a sandbox's workspace: its directory on disk, usable whatever its
/// processes are doing, or (a sandbox without a disk workspace) the tmpfs in its processes'
/// root. Cheap to clone; [`WorkspaceRoot::open`] is blocking.
#[derive(Clone)]
pub(crate) struct WorkspaceRoot {
    root: Root,
    /// The sandbox's host uid: files the host creates belong to it.
    pub uid: u32,
    /// The sandbox's quota, for the message of a write that hits it.
    pub disk_mb: u64,
}

#[derive(Clone)]
enum Root {
    Disk { rt: Runtime, id: String },
    Processes(Arc<Live>),
}

impl WorkspaceRoot {
    /// The workspace's root directory as an `O_PATH` fd every lookup resolves beneath.
    pub(crate) fn open(&self) -> Result<OwnedFd, FileError> {
        match &self.root {
            Root::Disk { rt, id } => rt.workspace_dir(id),
            Root::Processes(live) if live.is_dead() => Err(FileError::ProcessesGone),
            Root::Processes(live) => live.workspace(),
        }
    }

    /// A write that failed for lack of room, as the client sees it: the quota named.
    fn quota(&self, e: FileError) -> RuntimeError {
        match e {
            FileError::WorkspaceFull => RuntimeError::QuotaExceeded {
                disk_mb: self.disk_mb,
            },
            e => e.into(),
        }
    }
}

impl Runtime {
    /// Where the host reaches the directory of workspace `id` on disk (a volume's), whose files
    /// belong to `uid`, capped at `disk_mb`.
    pub(crate) fn disk_root(&self, id: &str, uid: u32, disk_mb: u64) -> WorkspaceRoot {
        WorkspaceRoot {
            root: Root::Disk {
                rt: self.clone(),
                id: id.to_string(),
            },
            uid,
            disk_mb,
        }
    }

    /// Where the host reaches the workspace of sandbox `id` (any state but ended), which is
    /// marked active.
    pub(crate) fn workspace_root(&self, id: &str) -> Result<WorkspaceRoot, RuntimeError> {
        let e = self.entry(id)?;
        self.touch(&e);
        let root = if e.disk {
            Root::Disk {
                rt: self.clone(),
                id: e.id.clone(),
            }
        } else {
            Root::Processes(e.live().ok_or(FileError::ProcessesGone)?)
        };
        let disk_mb = lock(&e.info).limits.disk_mb;
        Ok(WorkspaceRoot {
            root,
            uid: e.host_uid,
            disk_mb,
        })
    }

    /// Writes a file under the workspace (creating parent directories), streaming the body.
    /// A failed upload leaves no file behind; one that hits the sandbox's disk quota fails
    /// with `QuotaExceeded`.
    pub async fn write_file(
        &self,
        id: &str,
        path: &str,
        body: ByteStream,
    ) -> Result<FileEntry, RuntimeError> {
        self.check_not_contained(&*self.entry(id)?)?;
        let root = self.workspace_root(id)?;
        // Lineage: the bytes are hashed (and kept) as they stream; see `inputs.rs`.
        let (body, tap) = self.tap_input(body);
        let written = self.write_file_in(root, path, body).await;
        self.record_input(id, written.as_ref().ok(), tap).await;
        written
    }

    /// [`Runtime::write_file`] under any root (a workspace, a volume).
    pub(crate) async fn write_file_in(
        &self,
        ws: WorkspaceRoot,
        path: &str,
        body: ByteStream,
    ) -> Result<FileEntry, RuntimeError> {
        self.write_file_in_with(ws, path, body, Vec::new()).await
    }

    /// [`Runtime::write_file_in`] that also sets extended attributes `xattrs` (full names) on
    /// the new file before it replaces the target: the file appears with them, and a file it
    /// replaces takes its own away (a new inode).
    pub(crate) async fn write_file_in_with(
        &self,
        ws: WorkspaceRoot,
        path: &str,
        mut body: ByteStream,
        xattrs: Vec<(String, Vec<u8>)>,
    ) -> Result<FileEntry, RuntimeError> {
        let (p, w1, uid) = (path.to_string(), ws.clone(), ws.uid);
        let opened = blocking("opening the file", move || {
            w1.open().and_then(|root| create_file(&root, uid, &p))
        })
        .await?;
        let upload = opened.map_err(|e| ws.quota(e))?;
        let max = self.inner.config.max_file_bytes;
        let (tx, mut rx) = mpsc::channel::<Bytes>(8);
        // Started now, so it writes while the body streams in. It gives the upload back so a
        // complete one can be committed and a broken one discarded.
        let writer = tokio::task::spawn_blocking(move || -> (Upload, Result<(), FileError>) {
            let mut upload = upload;
            while let Some(chunk) = rx.blocking_recv() {
                if let Err(e) = upload.file.write_all(&chunk) {
                    return (upload, Err(write_error(e)));
                }
            }
            for (name, value) in &xattrs {
                if let Err(e) = crate::e2b::set_xattr(&upload.file, name, value) {
                    let e = map_errno(e, &upload.shown);
                    return (upload, Err(e));
                }
            }
            (upload, Ok(()))
        });
        let mut total = 0u64;
        let mut failure = None;
        while let Some(chunk) = body.next().await {
            match chunk {
                Ok(c) => {
                    total += c.len() as u64;
                    if total > max {
                        failure = Some(RuntimeError::UploadTooLarge { limit: max });
                        break;
                    }
                    if tx.send(c).await.is_err() {
                        break;
                    }
                }
                Err(source) => {
                    failure = Some(RuntimeError::UploadRead { source });
                    break;
                }
            }
        }
        drop(tx);
        let (upload, written) = writer.await.map_err(|source| RuntimeError::Task {
            task: "writing the file",
            source,
        })?;
        if let Some(f) = failure.or(written.err().map(|e| ws.quota(e))) {
            let _ = blocking("removing a failed upload", move || upload.discard()).await;
            return Err(f);
        }
        let committed = blocking("renaming the upload into place", move || upload.commit()).await?;
        let shown = committed.map_err(|e| ws.quota(e))?;
        let entry = blocking("reading the new file", move || {
            ws.open().and_then(|root| entry_of(&root, &shown))
        })
        .await??;
        Ok(entry)
    }

    /// Opens a regular file of the workspace for reading; returns its size and a reader.
    pub async fn read_file(
        &self,
        id: &str,
        path: &str,
    ) -> Result<(u64, tokio::fs::File), RuntimeError> {
        read_file_in(self.workspace_root(id)?, path).await
    }

    /// Lists a directory of the workspace (`""` is the root), recursively when asked.
    pub async fn list_files(
        &self,
        id: &str,
        path: &str,
        recursive: bool,
    ) -> Result<Vec<FileEntry>, RuntimeError> {
        list_files_in(self.workspace_root(id)?, path, recursive).await
    }

    /// Removes a file or (recursively) a directory of the workspace.
    pub async fn delete_file(&self, id: &str, path: &str) -> Result<(), RuntimeError> {
        self.check_not_contained(&*self.entry(id)?)?;
        delete_file_in(self.workspace_root(id)?, path).await
    }
}

/// [`Runtime::read_file`] under any root.
pub(crate) async fn read_file_in(
    ws: WorkspaceRoot,
    path: &str,
) -> Result<(u64, tokio::fs::File), RuntimeError> {
    {
        let p = path.to_string();
        let (f, size) = blocking("opening the file", move || {
            ws.open().and_then(|root| open_file(&root, &p))
        })
        .await??;
        Ok((size, tokio::fs::File::from_std(f)))
    }
}

/// [`Runtime::list_files`] under any root.
pub(crate) async fn list_files_in(
    ws: WorkspaceRoot,
    path: &str,
    recursive: bool,
) -> Result<Vec<FileEntry>, RuntimeError> {
    let p = path.to_string();
    let entries = blocking("listing files", move || {
        ws.open().and_then(|root| list(&root, &p, recursive))
    })
    .await??;
    Ok(entries)
}

/// [`Runtime::delete_file`] under any root.
pub(crate) async fn delete_file_in(ws: WorkspaceRoot, path: &str) -> Result<(), RuntimeError> {
    let p = path.to_string();
    blocking("deleting a file", move || {
        ws.open().and_then(|root| remove(&root, &p))
    })
    .await??;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_paths() {
        assert_eq!(normalize("a/b.txt").unwrap(), vec!["a", "b.txt"]);
        assert_eq!(normalize("./a//b").unwrap(), vec!["a", "b"]);
        assert_eq!(normalize("/workspace/a").unwrap(), vec!["a"]);
        assert!(normalize("/workspace").unwrap().is_empty());
        assert!(matches!(normalize("../x"), Err(FileError::DotDot(_))));
        assert!(matches!(normalize("a/../../x"), Err(FileError::DotDot(_))));
        assert!(matches!(
            normalize("/etc/passwd"),
            Err(FileError::OutsideWorkspace(_))
        ));
        assert!(matches!(
            normalize("/workspacex/a"),
            Err(FileError::OutsideWorkspace(_))
        ));
        assert!(matches!(normalize("a\0b"), Err(FileError::PathHasNul)));
    }
}
