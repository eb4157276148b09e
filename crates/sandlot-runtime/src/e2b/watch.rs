//! Directory watches for E2B's `watch_dir`: inotify on the workspace, from the host.
//!
//! The watched directory is opened like every other file operation (from the workspace's fd,
//! `openat2` without symlinks or leaving the mount), and the watch is added through that fd's
//! `/proc/self/fd` link, so no path the sandbox controls is resolved by name: a watch cannot
//! land outside the workspace. inotify watches inodes, so writes made inside the sandbox (its
//! mount of the same filesystem) and through the file API are both seen.
//!
//! Events are named relative to the watched directory and typed as envd's (fsnotify's):
//! create (also a name moved in), write, remove, rename (a name moved away), chmod
//! (attributes). An upload through the file API writes a hidden file beside its target and
//! renames it into place; that is reported as envd reports the write of a file (create, write,
//! chmod of the target), and the hidden file's own events are not shown.
//!
//! Bounds: a recursive watch covers at most [`MAX_WATCHED_DIRS`] directories (deeper ones
//! added past that are not watched, and a warning is logged); one read returns at most what
//! the kernel queued (its own `max_queued_events` bound). Who may watch, and how many
//! watches a sandbox may have, is the caller's to decide.

use crate::error::{FileError, RuntimeError};
use crate::files::{fstat, map_errno, normalize, openat2, WorkspaceRoot};
use crate::Runtime;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use tokio::io::unix::AsyncFd;

/// Most directories one recursive watch covers.
pub const MAX_WATCHED_DIRS: usize = 1024;
/// The prefix of an upload's hidden file (`files::create_file`).
const UPLOAD_PREFIX: &str = ".sandlot-upload-";

/// What happened to an entry, as envd names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchEventKind {
    Create,
    Write,
    Remove,
    Rename,
    Chmod,
}

/// One change under a watched directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    /// The entry's path relative to the watched directory.
    pub name: String,
    pub kind: WatchEventKind,
}

/// A live watch on a directory of a workspace. Dropping it removes every inotify watch.
pub struct DirWatch {
    fd: AsyncFd<OwnedFd>,
    ws: WorkspaceRoot,
    /// The watched directory, relative to the workspace.
    root: String,
    recursive: bool,
    /// Watch descriptor -> directory relative to the watched one (`""`: itself).
    dirs: HashMap<i32, String>,
    /// Cookies of uploads' hidden files moved away (their move in is the upload's commit).
    upload_cookies: Vec<u32>,
    /// The watched directory itself was removed or moved: nothing more will come.
    ended: bool,
}

const MASK: u32 = libc::IN_CREATE
    | libc::IN_MODIFY
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_ATTRIB
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_ONLYDIR;

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

impl DirWatch {
    /// Adds a watch on `rel` (relative to the watched directory), and when recursive on the
    /// directories under it, up to the bound.
    ///
    /// `found`: the directory is new (created under a recursive watch), and what is already
    /// in it was made before its watch was: each entry is reported as created (a file with
    /// content also as written), so nothing made in the gap is missed.
    fn add(
        &mut self,
        root_fd: &OwnedFd,
        rel: &str,
        mut found: Option<&mut Vec<WatchEvent>>,
    ) -> Result<(), FileError> {
        let full = join(&self.root, rel);
        let parts = normalize(&full)?;
        let at = if parts.is_empty() {
            ".".to_owned()
        } else {
            parts.join("/")
        };
        let dir = openat2(
            root_fd.as_raw_fd(),
            at.as_bytes(),
            libc::O_PATH | libc::O_DIRECTORY,
            0,
        )
        .map_err(|e| map_errno(e, &full))?;
        if self.dirs.len() >= MAX_WATCHED_DIRS {
            tracing::warn!(dir = %full, "a recursive watch reached {MAX_WATCHED_DIRS} directories: not watching more");
            return Ok(());
        }
        let link = std::ffi::CString::new(format!("/proc/self/fd/{}", dir.as_raw_fd()))
            .map_err(|_| FileError::PathHasNul)?;
        // SAFETY: inotify_add_watch on our inotify fd and a NUL-terminated path: the magic
        // link of a directory fd opened beneath the workspace.
        let wd = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), link.as_ptr(), MASK) };
        if wd < 0 {
            return Err(map_errno(nix::Error::last(), &full));
        }
        self.dirs.insert(wd, rel.to_owned());
        if self.recursive {
            let dirfd = openat2(dir.as_raw_fd(), ".", libc::O_RDONLY | libc::O_DIRECTORY, 0)
                .map_err(|e| map_errno(e, &full))?;
            for (name, is_dir) in children(dirfd) {
                let child = join(rel, &name);
                if let Some(out) = found.as_deref_mut() {
                    out.push(WatchEvent {
                        name: child.clone(),
                        kind: WatchEventKind::Create,
                    });
                    if !is_dir {
                        out.push(WatchEvent {
                            name: child.clone(),
                            kind: WatchEventKind::Write,
                        });
                    }
                }
                if is_dir {
                    self.add(root_fd, &child, found.as_deref_mut())?;
                }
            }
        }
        Ok(())
    }

    /// Whether the watched directory is gone (removed or moved away).
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The events queued so far, without waiting.
    pub fn read(&mut self) -> Vec<WatchEvent> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: read into a buffer of its length from our non-blocking inotify fd.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            self.parse(&buf[..n as usize], &mut out);
        }
        out
    }

    /// Waits for the next events (empty: the watch ended).
    pub async fn next(&mut self) -> Vec<WatchEvent> {
        loop {
            if self.ended {
                return Vec::new();
            }
            let Ok(mut guard) = self.fd.readable().await else {
                self.ended = true;
                return Vec::new();
            };
            guard.clear_ready();
            drop(guard);
            let events = self.read();
            if !events.is_empty() || self.ended {
                return events;
            }
        }
    }

    fn parse(&mut self, buf: &[u8], out: &mut Vec<WatchEvent>) {
        const HEAD: usize = std::mem::size_of::<libc::inotify_event>();
        let mut at = 0;
        let mut new_dirs = Vec::new();
        while at + HEAD <= buf.len() {
            // SAFETY: the kernel wrote whole events; read_unaligned copes with any alignment.
            let ev: libc::inotify_event =
                unsafe { std::ptr::read_unaligned(buf[at..].as_ptr().cast()) };
            let name_bytes = &buf[at + HEAD..(at + HEAD + ev.len as usize).min(buf.len())];
            at += HEAD + ev.len as usize;
            let name =
                String::from_utf8_lossy(name_bytes.split(|b| *b == 0).next().unwrap_or_default())
                    .into_owned();
            if ev.mask & libc::IN_IGNORED != 0 {
                if self.dirs.remove(&ev.wd).is_some_and(|d| d.is_empty()) {
                    self.ended = true;
                }
                continue;
            }
            let Some(dir) = self.dirs.get(&ev.wd).cloned() else {
                continue;
            };
            if ev.mask & (libc::IN_DELETE_SELF | libc::IN_MOVE_SELF) != 0 {
                if dir.is_empty() {
                    self.ended = true;
                }
                continue;
            }
            let rel = join(&dir, &name);
            let is_dir = ev.mask & libc::IN_ISDIR != 0;
            if name.starts_with(UPLOAD_PREFIX) {
                if ev.mask & libc::IN_MOVED_FROM != 0 {
                    self.upload_cookies.push(ev.cookie);
                }
                continue;
            }
            let push = |out: &mut Vec<WatchEvent>, kind| {
                out.push(WatchEvent {
                    name: rel.clone(),
                    kind,
                })
            };
            if ev.mask & libc::IN_MOVED_TO != 0 {
                if let Some(i) = self.upload_cookies.iter().position(|c| *c == ev.cookie) {
                    self.upload_cookies.swap_remove(i);
                    push(out, WatchEventKind::Create);
                    push(out, WatchEventKind::Write);
                    push(out, WatchEventKind::Chmod);
                    continue;
                }
                push(out, WatchEventKind::Create);
                if is_dir && self.recursive {
                    new_dirs.push(rel.clone());
                }
            } else if ev.mask & libc::IN_CREATE != 0 {
                push(out, WatchEventKind::Create);
                if is_dir && self.recursive {
                    new_dirs.push(rel.clone());
                }
            } else if ev.mask & libc::IN_MODIFY != 0 {
                push(out, WatchEventKind::Write);
            } else if ev.mask & libc::IN_DELETE != 0 {
                push(out, WatchEventKind::Remove);
            } else if ev.mask & libc::IN_MOVED_FROM != 0 {
                push(out, WatchEventKind::Rename);
            } else if ev.mask & libc::IN_ATTRIB != 0 {
                push(out, WatchEventKind::Chmod);
            }
        }
        // Only a few cookies are ever pending; a stale one (its move went elsewhere) goes.
        if self.upload_cookies.len() > 64 {
            self.upload_cookies.drain(..32);
        }
        if !new_dirs.is_empty() {
            if let Ok(root_fd) = self.ws.open() {
                for d in new_dirs {
                    // A directory removed again before this ran is simply not watched.
                    let _ = self.add(&root_fd, &d, Some(out));
                }
            }
        }
    }
}

/// The entries of `dir` (name, whether a directory; symlinks are not followed), uploads'
/// hidden files left out.
fn children(dir: OwnedFd) -> Vec<(String, bool)> {
    let Ok(mut d) = nix::dir::Dir::from_fd(dir) else {
        return Vec::new();
    };
    d.iter()
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_str().ok()?.to_owned();
            let is_dir = e.file_type() == Some(nix::dir::Type::Directory);
            Some((name, is_dir))
        })
        .filter(|(n, _)| n != "." && n != ".." && !n.starts_with(UPLOAD_PREFIX))
        .collect()
}

/// A new inotify instance, non-blocking and close-on-exec.
fn inotify() -> Result<OwnedFd, nix::Error> {
    // SAFETY: inotify_init1 returns a new fd we own, or -1.
    let fd: RawFd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
    if fd < 0 {
        return Err(nix::Error::last());
    }
    // SAFETY: `fd` was just returned to us and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl Runtime {
    /// Starts watching directory `path` of sandbox `id`'s workspace (`""`: the workspace),
    /// and its subdirectories when `recursive`. A missing path is `NotFound`; one that is not
    /// a directory (or passes through a symlink) is refused.
    pub async fn watch_dir(
        &self,
        id: &str,
        path: &str,
        recursive: bool,
    ) -> Result<DirWatch, RuntimeError> {
        let ws = self.workspace_root(id)?;
        let parts = normalize(path)?;
        let root = parts.join("/");
        let w = ws.clone();
        let r = root.clone();
        let (ifd, root_fd) = crate::task::blocking("watching a directory", move || {
            let root_fd = w.open()?;
            let at = if r.is_empty() { "." } else { r.as_str() };
            let target = openat2(root_fd.as_raw_fd(), at.as_bytes(), libc::O_PATH, 0)
                .map_err(|e| map_errno(e, &r))?;
            let st = fstat(target.as_raw_fd()).map_err(|e| map_errno(e, &r))?;
            if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                return Err(FileError::NotADirectory(r));
            }
            let ifd = inotify().map_err(|e| map_errno(e, &r))?;
            Ok::<_, FileError>((ifd, root_fd))
        })
        .await??;
        // SAFETY: `ifd` is an open inotify fd the AsyncFd owns from here on: it stays open,
        // and its `as_raw_fd` is that same fd, until the AsyncFd is dropped.
        let fd = unsafe { AsyncFd::register_with_interest(ifd, tokio::io::Interest::READABLE) }
            .map_err(|e| FileError::Os {
                path: root.clone(),
                errno: nix::Error::from_raw(e.into_parts().1.raw_os_error().unwrap_or(libc::EIO)),
            })?;
        let mut watch = DirWatch {
            fd,
            ws,
            root,
            recursive,
            dirs: HashMap::new(),
            upload_cookies: Vec::new(),
            ended: false,
        };
        watch.add(&root_fd, "", None)?;
        Ok(watch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_join_under_the_watched_directory() {
        assert_eq!(join("", "a"), "a");
        assert_eq!(join("d/e", "a"), "d/e/a");
    }
}
