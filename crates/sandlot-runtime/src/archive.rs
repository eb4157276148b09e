//! Directories in and out of a sandbox's workspace as tar streams: [`Runtime::extract_archive`]
//! unpacks a tar (plain or gzip, told apart by its first two bytes) into a directory, and
//! [`Runtime::archive_dir`] streams a tar of one. Both directions run on a blocking thread
//! joined to the HTTP body by a bounded channel, so neither ever holds an archive in memory.
//!
//! Extracting is the hostile direction; every entry is checked before anything is created:
//!
//! - names: relative, UTF-8, no NUL, no `..`, at most [`MAX_PATH_BYTES`] bytes (255 per
//!   component) and [`MAX_DEPTH`] components; at most [`MAX_ENTRIES`] entries;
//! - types: regular files, directories, symlinks whose target stays inside the target
//!   directory (read lexically from the link's place; relative only), and hard links to a
//!   regular file extracted earlier from the same archive. Devices, FIFOs, sparse files and
//!   every other type are refused;
//! - room: the file bytes may not exceed what the workspace has left (its `disk_mb` quota
//!   less its usage, and the filesystem's free space): a header that would pass it is refused
//!   before its data is written, and ENOSPC/EDQUOT while writing is the same failure. A gzip
//!   stream may expand at most [`MAX_GZIP_RATIO`] times (plus 1 MiB); the extension headers
//!   (long names, pax records) between two entries are at most [`MAX_META_BYTES`].
//!
//! Entries are written into a staging directory (`.sandlot-extract-<random>`) inside the
//! workspace: in the target when it exists, else in its deepest existing ancestor, standing
//! for the first missing component. Every call is fd-relative (`openat2` with the `files.rs`
//! resolve flags, `mkdirat`, `symlinkat`, `linkat`, `renameat2`) and runs with the sandbox's
//! uid as the filesystem uid, so none of the server's capabilities applies to the sandbox's
//! files and everything created belongs to the sandbox. Modes keep the rwx bits minus
//! world-write (no setuid, setgid or sticky bit). Once the whole archive is in, the staging
//! directory is renamed into place (a missing target) or merged name by name into the
//! existing target (checked for file/directory clashes before anything moves). On any failure
//! the staging directory is removed: nothing outside it was touched.
//!
//! Archiving never follows a symlink: directories, regular files and symlinks (stored as
//! symlinks, whatever they point at) go into the tar; FIFOs, sockets and devices are skipped.

use crate::error::{FileError, RuntimeError};
use crate::files::{self, as_sandbox, fstat, kind_of, map_errno, openat2, ByteStream};
use crate::util::{blocking, new_id};
use crate::Runtime;
use bytes::{Buf, Bytes};
use futures::StreamExt;
use sandlot_workspace::Workspaces;
use serde::{Deserialize, Serialize};
use std::cell::Cell;
use std::ffi::{CStr, CString, OsStr};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::rc::Rc;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Most entries one archive may hold.
pub const MAX_ENTRIES: u64 = 100_000;
/// Most components of an entry's name (directories below the target, plus the name).
pub const MAX_DEPTH: usize = 64;
/// Longest entry name, and longest symlink target, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// Most a gzip body may expand: tar bytes per compressed byte (beyond [`GZIP_SLACK`]).
pub const MAX_GZIP_RATIO: u64 = 200;
/// Tar bytes a gzip body may produce regardless of the ratio (small archives of zeros).
const GZIP_SLACK: u64 = 1 << 20;
/// Most bytes of headers (long names, pax records, sparse maps) between two entries.
pub const MAX_META_BYTES: u64 = 1 << 20;
/// Deepest directory an archive of a directory descends into.
const MAX_ARCHIVE_DEPTH: usize = 256;
/// Names of staging directories; archives of a directory leave them out.
const STAGING_PREFIX: &str = ".sandlot-extract-";
/// Mode bits kept from an archive: rwx for all, less world-write.
const MODE_MASK: u32 = 0o775;
/// Chunks of the channels between a body and its blocking thread.
const CHUNK: usize = 64 << 10;
/// Chunks in flight in those channels.
const DEPTH: usize = 8;

/// Why an archive entry was refused; the message a client sees after the entry's name.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("absolute paths are not accepted")]
    Absolute,
    #[error("'..' is not accepted in a name")]
    DotDot,
    #[error("the name contains a NUL byte")]
    Nul,
    #[error("the name is not UTF-8")]
    NotUtf8,
    #[error(
        "the name is longer than {MAX_PATH_BYTES} bytes, or one of its components longer than \
         255"
    )]
    TooLong,
    #[error("nested deeper than {MAX_DEPTH} levels")]
    TooDeep,
    #[error("the archive has more than {MAX_ENTRIES} entries")]
    TooManyEntries,
    #[error("{0} entries are not accepted")]
    Type(&'static str),
    #[error("entries of type {:?} are not accepted", char::from(*.0))]
    UnknownType(u8),
    #[error("symlink to {0:?} points outside the target directory")]
    SymlinkOutside(String),
    #[error("hard link to {0:?} points outside the target directory")]
    HardlinkOutside(String),
    #[error("hard link to {0:?}, which is not a regular file extracted earlier from this archive")]
    HardlinkMissing(String),
    #[error("a parent of it is a symlink or not a directory")]
    Through,
    #[error("it is a {0} in the target directory")]
    Clash(&'static str),
    #[error("its headers (long names, pax records) are larger than {MAX_META_BYTES} bytes")]
    HugeHeaders,
    #[error("the gzip stream expands more than {MAX_GZIP_RATIO} times")]
    Ratio,
    #[error("the archive ends inside it")]
    Truncated,
    #[error("{0}")]
    Malformed(String),
}

/// What an extraction wrote, the answer to `PUT .../archive`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveSummary {
    /// The target directory, relative to the workspace (`""` is the workspace itself).
    pub path: String,
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub hardlinks: u64,
    /// Bytes of file data written.
    pub bytes: u64,
}

/// Why an extraction stopped.
#[derive(Debug)]
enum Fail {
    Refused {
        entry: String,
        why: Refusal,
    },
    /// The workspace's room ran out.
    Quota,
    File(FileError),
}

impl Fail {
    fn refused(entry: &str, why: Refusal) -> Self {
        Fail::Refused {
            entry: entry.to_string(),
            why,
        }
    }

    fn into_runtime(self, disk_mb: u64) -> RuntimeError {
        match self {
            Fail::Refused { entry, why } => RuntimeError::InvalidArchive { entry, why },
            Fail::Quota | Fail::File(FileError::WorkspaceFull) => {
                RuntimeError::QuotaExceeded { disk_mb }
            }
            Fail::File(e) => e.into(),
        }
    }
}

impl From<FileError> for Fail {
    fn from(e: FileError) -> Self {
        Fail::File(e)
    }
}

impl Runtime {
    /// Extracts a tar (or gzip-compressed tar) body into the directory `path` of the workspace
    /// (created if missing), as the module header describes. The body is read as it arrives;
    /// an extraction that stops early leaves the rest unread.
    pub async fn extract_archive(
        &self,
        id: &str,
        path: &str,
        mut body: ByteStream,
    ) -> Result<ArchiveSummary, RuntimeError> {
        let parts = files::normalize(path)?;
        let ws = self.workspace_root(id)?;
        // The quota is the sandbox's (`disk_mb`) where its workspace is on disk; a tmpfs
        // workspace has only its size, which its free space tells.
        let room = match self.entry(id)?.disk {
            true => Room::Quota {
                workspaces: self.workspaces()?,
                id: id.to_string(),
                limit: ws.disk_mb << 20,
            },
            false => Room::Free,
        };
        let (uid, disk_mb) = (ws.uid, ws.disk_mb);
        let (tx, rx) = mpsc::channel::<Bytes>(DEPTH);
        // Started before the body is read, so the archive is written as it streams in.
        let task = tokio::task::spawn_blocking(move || -> Result<ArchiveSummary, Fail> {
            let root = ws.open()?;
            let body = BodyReader {
                rx,
                cur: Bytes::new(),
            };
            // The ids are restored even if the extraction panics; the panic goes on after.
            let out = as_sandbox(uid, || {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    extract(&root, &parts, body, &room)
                }))
            });
            out.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        });
        let mut failure = None;
        while let Some(chunk) = body.next().await {
            match chunk {
                Ok(c) => {
                    if tx.send(c).await.is_err() {
                        break;
                    }
                }
                Err(source) => {
                    failure = Some(source);
                    break;
                }
            }
        }
        drop(tx);
        let out = task.await.map_err(|source| RuntimeError::Task {
            task: "extracting an archive",
            source,
        })?;
        // A body that broke off reads as a truncated archive; say what it really was.
        if let (Err(_), Some(source)) = (&out, failure) {
            return Err(RuntimeError::UploadRead { source });
        }
        out.map_err(|f| f.into_runtime(disk_mb))
    }

    /// A tar of the directory `path` of the workspace (gzip-compressed if asked), streamed as
    /// it is read. Errors about the directory itself come before the stream; a failure while
    /// streaming ends the stream with an error, so the client sees an incomplete body.
    pub async fn archive_dir(
        &self,
        id: &str,
        path: &str,
        gzip: bool,
    ) -> Result<ByteStream, RuntimeError> {
        let parts = files::normalize(path)?;
        let ws = self.workspace_root(id)?;
        let dir = blocking("opening a directory", move || {
            let root = ws.open()?;
            open_source(&root, &parts)
        })
        .await??;
        let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(DEPTH);
        tokio::task::spawn_blocking(move || {
            let out = ChannelWriter {
                tx: tx.clone(),
                buf: Vec::with_capacity(CHUNK),
            };
            let written = if gzip {
                let gz = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
                write_tar(&dir, gz).and_then(|gz| gz.finish()?.flush_all())
            } else {
                write_tar(&dir, out).and_then(|out| out.flush_all())
            };
            match written {
                Ok(()) => {}
                // The client went away.
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {}
                Err(e) => {
                    tracing::warn!(error = %e, "archiving a directory failed midway");
                    let _ = tx.blocking_send(Err(e));
                }
            }
        });
        Ok(Box::pin(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        })))
    }
}

/// How much the workspace may still take.
enum Room {
    /// A tmpfs workspace: its free space.
    Free,
    /// A workspace on disk: its quota less its usage.
    Quota {
        workspaces: Arc<Workspaces>,
        id: String,
        limit: u64,
    },
    #[cfg(test)]
    Fixed(u64),
}

impl Room {
    /// Bytes left now. Btrfs reports usage as of its last commit; `settle` commits first
    /// (a sync of the workspace's filesystem), for a measure worth refusing an entry on.
    fn measure(&self, root: &OwnedFd, settle: bool) -> u64 {
        match self {
            Room::Free => free_bytes(root),
            Room::Quota {
                workspaces,
                id,
                limit,
            } => {
                if settle {
                    sync(root);
                }
                // The usage is read on the host's side of the workspace (the data dir), which
                // needs the server's own filesystem ids, not the sandbox's it may run with.
                let used = as_sandbox(0, || workspaces.usage(id)).unwrap_or(0);
                limit.saturating_sub(used)
            }
            #[cfg(test)]
            Room::Fixed(n) => *n,
        }
    }
}

/// The free space of the filesystem `root` is on.
fn free_bytes(root: &OwnedFd) -> u64 {
    // SAFETY: statvfs is plain old data; fstatvfs fills it from an fd we own.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    match unsafe { libc::fstatvfs(root.as_raw_fd(), &mut st) } {
        0 => (st.f_bavail as u64).saturating_mul(st.f_frsize as u64),
        _ => u64::MAX,
    }
}

/// Commits the filesystem `root` is on (best effort).
fn sync(root: &OwnedFd) {
    // syncfs needs a real fd, not an O_PATH one.
    if let Ok(fd) = open_dir_at(root.as_raw_fd(), b".") {
        // SAFETY: syncfs on a directory fd we own.
        unsafe { libc::syncfs(fd.as_raw_fd()) };
    }
}

// ---------------------------------------------------------------------------------------------
// Extraction.

/// Extracts `body` into the directory `parts` under the workspace `ws`. Runs with the
/// sandbox's filesystem ids.
fn extract(
    ws: &OwnedFd,
    parts: &[String],
    body: BodyReader,
    room: &Room,
) -> Result<ArchiveSummary, Fail> {
    let shown = parts.join("/");
    // The deepest directory of the target's path that exists.
    let mut base = openat2(ws.as_raw_fd(), ".", libc::O_PATH | libc::O_DIRECTORY, 0)
        .map_err(|e| target_error(e, &shown))?;
    let mut existing = 0;
    for p in parts {
        match openat2(base.as_raw_fd(), p, libc::O_PATH | libc::O_DIRECTORY, 0) {
            Ok(fd) => {
                base = fd;
                existing += 1;
            }
            Err(nix::Error::ENOENT) => break,
            Err(e) => return Err(target_error(e, &shown).into()),
        }
    }
    let stage_name = format!("{STAGING_PREFIX}{}", new_id(""));
    let stage_c = cstring(&stage_name);
    // SAFETY: mkdirat relative to a dir fd we own, with a name we made.
    if unsafe { libc::mkdirat(base.as_raw_fd(), stage_c.as_ptr(), 0o700) } != 0 {
        return Err(create_error(nix::Error::last(), &shown));
    }
    let placed = (|| {
        let stage = open_dir_at(base.as_raw_fd(), stage_c.as_bytes())
            .map_err(|e| create_error(e, &shown))?;
        // A missing target: the staging directory stands for its first missing component,
        // and the archive goes into the rest of the path below it.
        let below = parts.get(existing + 1..).unwrap_or(&[]);
        let mut root = stage
            .try_clone()
            .map_err(|e| Fail::File(FileError::Write(e)))?;
        for p in below {
            root = make_dir(root.as_raw_fd(), p).map_err(|e| create_error(e, &shown))?;
        }
        let mut summary = Extraction::new(&root, ws, room).run(body)?;
        summary.path = shown.clone();
        drop(root);
        match parts.get(existing) {
            None => merge_checked(&stage, &base)?,
            Some(first) => {
                let first_c = cstring(first);
                // SAFETY: fchmod on a directory fd we own.
                unsafe { libc::fchmod(stage.as_raw_fd(), 0o755) };
                match rename(
                    base.as_raw_fd(),
                    &stage_c,
                    base.as_raw_fd(),
                    &first_c,
                    libc::RENAME_NOREPLACE,
                ) {
                    Ok(()) => {}
                    // Made meanwhile (by the sandbox, or another extraction): merge into it.
                    Err(nix::Error::EEXIST) => {
                        let into = open_dir_at(base.as_raw_fd(), first.as_bytes())
                            .map_err(|e| target_error(e, &shown))?;
                        merge_checked(&stage, &into)?;
                    }
                    Err(e) => return Err(create_error(e, &shown)),
                }
            }
        }
        Ok(summary)
    })();
    // Whatever is left of the staging directory (all of it after a failure).
    if let Err(e) = remove_tree(base.as_raw_fd(), &stage_c, 0) {
        if e != nix::Error::ENOENT {
            tracing::warn!(error = %e, "removing a staging directory failed");
        }
    }
    placed
}

/// One archive being written below `root`.
struct Extraction<'a> {
    root: &'a OwnedFd,
    /// The directories along the previous entry's path, open, so that entries of one
    /// directory (the usual order) cost no lookups; at most [`MAX_DEPTH`] fds.
    open: Vec<(String, OwnedFd)>,
    /// The workspace, and how much it may still take.
    ws: &'a OwnedFd,
    room: &'a Room,
    /// File bytes this archive may write: the room at the start (measured again, settled,
    /// once, before an entry would be refused for lack of it).
    budget: u64,
    settled: bool,
    summary: ArchiveSummary,
    gauge: Rc<Gauge>,
    buf: Vec<u8>,
}

impl<'a> Extraction<'a> {
    fn new(root: &'a OwnedFd, ws: &'a OwnedFd, room: &'a Room) -> Self {
        Self {
            root,
            open: Vec::new(),
            ws,
            room,
            budget: room.measure(ws, false),
            settled: false,
            summary: ArchiveSummary::default(),
            gauge: Rc::new(Gauge::default()),
            buf: vec![0; 256 << 10],
        }
    }

    fn run(mut self, body: BodyReader) -> Result<ArchiveSummary, Fail> {
        let gauge = self.gauge.clone();
        gauge.allow(MAX_META_BYTES);
        let stream = open_stream(body, &gauge).map_err(|e| Fail::refused("", malformed(&e)))?;
        let mut archive = tar::Archive::new(Metered {
            inner: stream,
            gauge: gauge.clone(),
        });
        let mut entries = archive.entries().map_err(|e| stream_error(&gauge, "", e))?;
        let mut count = 0u64;
        let mut last = String::new();
        loop {
            let mut entry = match entries.next() {
                None => return Ok(self.summary),
                Some(Ok(entry)) => entry,
                Some(Err(e)) => {
                    let near = match last.is_empty() {
                        true => "(the first entry)".to_string(),
                        false => format!("(after {last})"),
                    };
                    return Err(stream_error(&gauge, &near, e));
                }
            };
            let shown = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
            count += 1;
            if count > MAX_ENTRIES {
                return Err(Fail::refused(&shown, Refusal::TooManyEntries));
            }
            // Its data and padding, and the headers of the next entry.
            gauge.allow(entry.size().div_ceil(512) * 512 + MAX_META_BYTES);
            self.entry(&mut entry, &shown)?;
            last = shown;
        }
    }

    fn entry<R: Read>(&mut self, entry: &mut tar::Entry<R>, shown: &str) -> Result<(), Fail> {
        use tar::EntryType as T;
        let raw = entry.path_bytes().into_owned();
        let parts = entry_parts(&raw).map_err(|why| Fail::refused(shown, why))?;
        let kind = entry.header().entry_type();
        let dir_like = kind == T::Directory || (kind == T::Regular && raw.ends_with(b"/"));
        if parts.is_empty() {
            // `./`: the target itself, which keeps its mode.
            return match dir_like || kind == T::XGlobalHeader {
                true => Ok(()),
                false => Err(Fail::refused(
                    shown,
                    Refusal::Malformed("an entry other than a directory has an empty name".into()),
                )),
            };
        }
        let mode = entry.header().mode().unwrap_or(0o644) & MODE_MASK;
        match kind {
            _ if dir_like => {
                let fd = self.dir(&parts, shown)?;
                // The owner keeps rwx so the rest of the archive can go in.
                // SAFETY: fchmod on a directory fd we own.
                unsafe { libc::fchmod(fd, mode | 0o700) };
                self.summary.dirs += 1;
                Ok(())
            }
            T::Regular | T::Continuous => {
                if is_pax_sparse(entry) {
                    return Err(Fail::refused(shown, Refusal::Type("sparse file")));
                }
                let mtime = entry.header().mtime().ok();
                self.file(entry, &parts, shown, mode, mtime)
            }
            T::Symlink => self.symlink(entry, &parts, shown),
            T::Link => self.hardlink(entry, &parts, shown),
            // Pax defaults for the whole archive: nothing in them applies here.
            T::XGlobalHeader => Ok(()),
            T::Char => Err(Fail::refused(shown, Refusal::Type("character device"))),
            T::Block => Err(Fail::refused(shown, Refusal::Type("block device"))),
            T::Fifo => Err(Fail::refused(shown, Refusal::Type("FIFO"))),
            T::GNUSparse => Err(Fail::refused(shown, Refusal::Type("sparse file"))),
            other => Err(Fail::refused(shown, Refusal::UnknownType(other.as_byte()))),
        }
    }

    /// The directory `parts` below the root, made as needed (0755, the sandbox's).
    fn dir(&mut self, parts: &[String], shown: &str) -> Result<RawFd, Fail> {
        let keep = self
            .open
            .iter()
            .zip(parts)
            .take_while(|((open, _), p)| open == *p)
            .count();
        self.open.truncate(keep);
        for p in &parts[keep..] {
            let parent = self
                .open
                .last()
                .map_or(self.root.as_raw_fd(), |(_, fd)| fd.as_raw_fd());
            let fd = make_dir(parent, p).map_err(|e| create_error(e, shown))?;
            self.open.push((p.clone(), fd));
        }
        Ok(self
            .open
            .last()
            .map_or(self.root.as_raw_fd(), |(_, fd)| fd.as_raw_fd()))
    }

    fn file<R: Read>(
        &mut self,
        entry: &mut tar::Entry<R>,
        parts: &[String],
        shown: &str,
        mode: u32,
        mtime: Option<u64>,
    ) -> Result<(), Fail> {
        let size = entry.size();
        if size > self.budget.saturating_sub(self.summary.bytes) && !self.settled {
            // The usage measured may be stale (Btrfs counts as of its last commit): measure
            // again, settled, before refusing. It now counts what this archive wrote.
            self.settled = true;
            self.budget = self
                .room
                .measure(self.ws, true)
                .saturating_add(self.summary.bytes);
        }
        if size > self.budget.saturating_sub(self.summary.bytes) {
            return Err(Fail::Quota);
        }
        let (name, dirs) = parts.split_last().expect("a non-empty name");
        let dir = self.dir(dirs, shown)?;
        let fd = replace(dir, name, |dir, c| {
            openat2(
                dir,
                c.to_bytes(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
                0o600,
            )
        })
        .map_err(|e| create_error(e, shown))?;
        let mut file = std::fs::File::from(fd);
        let mut left = size;
        while left > 0 {
            let want = left.min(self.buf.len() as u64) as usize;
            let n = entry
                .read(&mut self.buf[..want])
                .map_err(|e| stream_error(&self.gauge, shown, e))?;
            if n == 0 {
                return Err(Fail::refused(shown, Refusal::Truncated));
            }
            file.write_all(&self.buf[..n])
                .map_err(|e| write_error(e, shown))?;
            left -= n as u64;
        }
        let fd = file.as_raw_fd();
        // SAFETY: fchmod on a file fd we own.
        unsafe { libc::fchmod(fd, mode) };
        if let Some(mtime) = mtime.and_then(|t| libc::time_t::try_from(t).ok()) {
            let times = [
                libc::timespec {
                    tv_sec: 0,
                    tv_nsec: libc::UTIME_OMIT,
                },
                libc::timespec {
                    tv_sec: mtime,
                    tv_nsec: 0,
                },
            ];
            // SAFETY: futimens on a file fd we own, with two valid timespecs.
            unsafe { libc::futimens(fd, times.as_ptr()) };
        }
        self.summary.files += 1;
        self.summary.bytes += size;
        Ok(())
    }

    fn symlink<R: Read>(
        &mut self,
        entry: &tar::Entry<R>,
        parts: &[String],
        shown: &str,
    ) -> Result<(), Fail> {
        let target = entry.link_name_bytes().unwrap_or_default().into_owned();
        let target_shown = String::from_utf8_lossy(&target).into_owned();
        if target.is_empty() || target.len() > MAX_PATH_BYTES || target.contains(&0) {
            return Err(Fail::refused(
                shown,
                Refusal::Malformed(format!("bad symlink target {target_shown:?}")),
            ));
        }
        if !stays_inside(parts.len() - 1, &target) {
            return Err(Fail::refused(shown, Refusal::SymlinkOutside(target_shown)));
        }
        let (name, dirs) = parts.split_last().expect("a non-empty name");
        let dir = self.dir(dirs, shown)?;
        let target = CString::new(target).expect("checked for NUL above");
        replace(dir, name, |dir, c| {
            // SAFETY: symlinkat relative to a dir fd we own; both strings are valid C strings.
            match unsafe { libc::symlinkat(target.as_ptr(), dir, c.as_ptr()) } {
                0 => Ok(()),
                _ => Err(nix::Error::last()),
            }
        })
        .map_err(|e| create_error(e, shown))?;
        self.summary.symlinks += 1;
        Ok(())
    }

    fn hardlink<R: Read>(
        &mut self,
        entry: &tar::Entry<R>,
        parts: &[String],
        shown: &str,
    ) -> Result<(), Fail> {
        let target = entry.link_name_bytes().unwrap_or_default().into_owned();
        let target_shown = String::from_utf8_lossy(&target).into_owned();
        let outside = || Fail::refused(shown, Refusal::HardlinkOutside(target_shown.clone()));
        let missing = || Fail::refused(shown, Refusal::HardlinkMissing(target_shown.clone()));
        let tparts = entry_parts(&target).map_err(|_| outside())?;
        let Some((tname, tdirs)) = tparts.split_last() else {
            return Err(outside());
        };
        // Resolved from the archive's root, never following a symlink: only what this
        // extraction wrote can be linked.
        let tdir = match tdirs.is_empty() {
            true => ".".to_string(),
            false => tdirs.join("/"),
        };
        let src = openat2(
            self.root.as_raw_fd(),
            &tdir,
            libc::O_PATH | libc::O_DIRECTORY,
            0,
        )
        .map_err(|_| missing())?;
        let tname_c = cstring(tname);
        match stat_at(src.as_raw_fd(), &tname_c) {
            Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFREG => {}
            _ => return Err(missing()),
        }
        let (name, dirs) = parts.split_last().expect("a non-empty name");
        let dir = self.dir(dirs, shown)?;
        replace(dir, name, |dir, c| {
            // SAFETY: linkat between dir fds we own; flags 0 never follows a symlink.
            match unsafe { libc::linkat(src.as_raw_fd(), tname_c.as_ptr(), dir, c.as_ptr(), 0) } {
                0 => Ok(()),
                _ => Err(nix::Error::last()),
            }
        })
        .map_err(|e| create_error(e, shown))?;
        self.summary.hardlinks += 1;
        Ok(())
    }
}

/// The components of an entry's name, or why it is refused.
fn entry_parts(raw: &[u8]) -> Result<Vec<String>, Refusal> {
    if raw.contains(&0) {
        return Err(Refusal::Nul);
    }
    if raw.len() > MAX_PATH_BYTES {
        return Err(Refusal::TooLong);
    }
    let name = std::str::from_utf8(raw).map_err(|_| Refusal::NotUtf8)?;
    if name.starts_with('/') {
        return Err(Refusal::Absolute);
    }
    let mut parts = Vec::new();
    for c in name.split('/') {
        match c {
            "" | "." => continue,
            ".." => return Err(Refusal::DotDot),
            c if c.len() > 255 => return Err(Refusal::TooLong),
            c => parts.push(c.to_string()),
        }
    }
    if parts.len() > MAX_DEPTH {
        return Err(Refusal::TooDeep);
    }
    Ok(parts)
}

/// Whether a symlink `depth` directories below the target, pointing at `target`, stays inside
/// the target when read lexically. (Containment does not rest on it: the host never follows a
/// symlink in a workspace.)
fn stays_inside(depth: usize, target: &[u8]) -> bool {
    if target.starts_with(b"/") {
        return false;
    }
    let mut depth = depth as i64;
    for c in target.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            _ => depth += 1,
        }
    }
    true
}

/// Whether pax records describe the entry as a GNU sparse file (formats 0.1 to 1.0).
fn is_pax_sparse<R: Read>(entry: &mut tar::Entry<R>) -> bool {
    match entry.pax_extensions() {
        Ok(Some(exts)) => exts
            .filter_map(Result::ok)
            .any(|e| e.key_bytes().starts_with(b"GNU.sparse")),
        _ => false,
    }
}

/// Creates a name in `dir` with `make`; an existing non-directory of that name (an earlier
/// entry, or the sandbox's) is replaced, an existing directory is a clash.
fn replace<T>(
    dir: RawFd,
    name: &str,
    make: impl Fn(RawFd, &CStr) -> Result<T, nix::Error>,
) -> Result<T, nix::Error> {
    let c = cstring(name);
    match make(dir, &c) {
        Err(nix::Error::EEXIST) => {
            if stat_at(dir, &c).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR) {
                return Err(nix::Error::EISDIR);
            }
            unlink_at(dir, &c, false)?;
            make(dir, &c)
        }
        r => r,
    }
}

/// A failure to create something for `entry`, as the extraction's failure.
fn create_error(e: nix::Error, entry: &str) -> Fail {
    match e {
        nix::Error::ENOSPC | nix::Error::EDQUOT => Fail::Quota,
        nix::Error::ELOOP | nix::Error::ENOTDIR => Fail::refused(entry, Refusal::Through),
        nix::Error::EISDIR => Fail::refused(entry, Refusal::Clash("directory")),
        e => Fail::File(FileError::Os {
            path: entry.to_string(),
            errno: e,
        }),
    }
}

/// A failed write of `entry`'s data.
fn write_error(e: io::Error, entry: &str) -> Fail {
    match e.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => Fail::Quota,
        Some(libc::EFBIG) => Fail::File(FileError::WriteTooLarge),
        _ => Fail::File(FileError::Os {
            path: entry.to_string(),
            errno: nix::Error::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
        }),
    }
}

/// The target path refused: it passes through a non-directory or a symlink.
fn target_error(e: nix::Error, shown: &str) -> FileError {
    match e {
        nix::Error::ENOTDIR => FileError::NotADirectory(shown.to_string()),
        e => map_errno(e, shown),
    }
}

/// A failed read of the tar stream: a limit the gauge tripped, or a malformed archive.
fn stream_error(gauge: &Gauge, entry: &str, e: io::Error) -> Fail {
    match gauge.tripped.get() {
        Some(Trip::Headers) => Fail::refused(entry, Refusal::HugeHeaders),
        Some(Trip::Ratio) => Fail::refused(entry, Refusal::Ratio),
        None if e.kind() == io::ErrorKind::UnexpectedEof => {
            Fail::refused(entry, Refusal::Truncated)
        }
        None => Fail::refused(entry, malformed(&e)),
    }
}

fn malformed(e: &io::Error) -> Refusal {
    Refusal::Malformed(e.to_string())
}

// ---------------------------------------------------------------------------------------------
// Placing the staging directory.

/// Merges `from` into `into` once a dry run found no file/directory clash.
fn merge_checked(from: &OwnedFd, into: &OwnedFd) -> Result<(), Fail> {
    merge(from, into, "", 0, false)?;
    merge(from, into, "", 0, true)
}

/// Moves every name of `from` into `into`: a name `into` lacks moves whole, directories on
/// both sides merge, anything else replaces what `into` has (rename is atomic, never
/// following a symlink). With `apply` false, only checks for clashes.
fn merge(from: &OwnedFd, into: &OwnedFd, rel: &str, depth: usize, apply: bool) -> Result<(), Fail> {
    if depth > MAX_DEPTH + 1 {
        return Err(Fail::refused(rel, Refusal::TooDeep));
    }
    for name in list_names(from).map_err(|e| create_error(e, rel))? {
        let entry = match rel.is_empty() {
            true => name.to_string_lossy().into_owned(),
            false => format!("{rel}/{}", name.to_string_lossy()),
        };
        let src = stat_at(from.as_raw_fd(), &name).map_err(|e| create_error(e, &entry))?;
        let src_dir = src.st_mode & libc::S_IFMT == libc::S_IFDIR;
        let dst = match stat_at(into.as_raw_fd(), &name) {
            Ok(st) => Some(st.st_mode),
            Err(nix::Error::ENOENT) => None,
            Err(e) => return Err(create_error(e, &entry)),
        };
        let dst_dir = dst.map(|m| m & libc::S_IFMT == libc::S_IFDIR);
        match (src_dir, dst_dir) {
            (true, Some(true)) => {
                let a = open_dir_at(from.as_raw_fd(), name.to_bytes())
                    .map_err(|e| create_error(e, &entry))?;
                let b = open_dir_at(into.as_raw_fd(), name.to_bytes())
                    .map_err(|e| create_error(e, &entry))?;
                merge(&a, &b, &entry, depth + 1, apply)?;
            }
            (true, Some(false)) => {
                let kind = kind_of(dst.unwrap_or(0));
                return Err(Fail::refused(&entry, Refusal::Clash(kind)));
            }
            (false, Some(true)) => {
                return Err(Fail::refused(&entry, Refusal::Clash("directory")));
            }
            (_, None) if apply => rename(
                from.as_raw_fd(),
                &name,
                into.as_raw_fd(),
                &name,
                libc::RENAME_NOREPLACE,
            )
            .map_err(|e| create_error(e, &entry))?,
            (false, Some(false)) if apply => {
                rename(from.as_raw_fd(), &name, into.as_raw_fd(), &name, 0)
                    .map_err(|e| create_error(e, &entry))?
            }
            _ => {}
        }
    }
    Ok(())
}

/// Removes `name` in `dir` and, if it is a directory, everything in it, never following a
/// symlink.
fn remove_tree(dir: RawFd, name: &CStr, depth: usize) -> Result<(), nix::Error> {
    let st = stat_at(dir, name)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return unlink_at(dir, name, false);
    }
    if depth > MAX_DEPTH + 8 {
        return Err(nix::Error::ELOOP);
    }
    let sub = open_dir_at(dir, name.to_bytes())?;
    for child in list_names(&sub)? {
        remove_tree(sub.as_raw_fd(), &child, depth + 1)?;
    }
    unlink_at(dir, name, true)
}

// ---------------------------------------------------------------------------------------------
// Archiving a directory.

/// The directory `parts` of the workspace, open for reading; anything else is refused.
fn open_source(ws: &OwnedFd, parts: &[String]) -> Result<OwnedFd, FileError> {
    let shown = parts.join("/");
    let path = match parts.is_empty() {
        true => ".",
        false => shown.as_str(),
    };
    openat2(
        ws.as_raw_fd(),
        path,
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOCTTY,
        0,
    )
    .map_err(|e| target_error(e, &shown))
}

/// Writes a tar of `dir` into `out` and returns `out`.
fn write_tar<W: Write>(dir: &OwnedFd, out: W) -> io::Result<W> {
    let mut tar = tar::Builder::new(out);
    add_dir(&mut tar, dir, &[], 0)?;
    tar.into_inner()
}

/// Adds what `dir` holds, by name, depth first.
fn add_dir<W: Write>(
    tar: &mut tar::Builder<W>,
    dir: &OwnedFd,
    rel: &[u8],
    depth: usize,
) -> io::Result<()> {
    let mut names = list_names(dir).map_err(io::Error::from)?;
    names.sort();
    for name in names {
        if name.to_bytes().starts_with(STAGING_PREFIX.as_bytes()) {
            continue;
        }
        let path = match rel.is_empty() {
            true => name.to_bytes().to_vec(),
            false => [rel, b"/", name.to_bytes()].concat(),
        };
        let path_os = OsStr::from_bytes(&path);
        // Gone since the listing (the sandbox is running): leave it out.
        let Ok(st) = stat_at(dir.as_raw_fd(), &name) else {
            continue;
        };
        let mut header = tar::Header::new_gnu();
        header.set_mode(st.st_mode & 0o777);
        header.set_mtime(st.st_mtime.max(0) as u64);
        header.set_uid(0);
        header.set_gid(0);
        header.set_size(0);
        match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => {
                if depth >= MAX_ARCHIVE_DEPTH {
                    return Err(io::Error::other(format!(
                        "{}: nested deeper than {MAX_ARCHIVE_DEPTH} levels",
                        path_os.to_string_lossy()
                    )));
                }
                let Ok(sub) = open_dir_at(dir.as_raw_fd(), name.to_bytes()) else {
                    continue;
                };
                header.set_entry_type(tar::EntryType::Directory);
                tar.append_data(&mut header, path_os, io::empty())?;
                add_dir(tar, &sub, &path, depth + 1)?;
            }
            libc::S_IFREG => {
                // O_NONBLOCK: if it became a FIFO meanwhile, opening it must not hang.
                let Ok(fd) = openat2(
                    dir.as_raw_fd(),
                    name.to_bytes(),
                    libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
                    0,
                ) else {
                    continue;
                };
                let Ok(st) = fstat(fd.as_raw_fd()) else {
                    continue;
                };
                if st.st_mode & libc::S_IFMT != libc::S_IFREG {
                    continue;
                }
                let size = st.st_size.max(0) as u64;
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(size);
                let data = Exact {
                    file: std::fs::File::from(fd),
                    left: size,
                };
                tar.append_data(&mut header, path_os, data)?;
            }
            libc::S_IFLNK => {
                let Ok(target) = read_link_at(dir.as_raw_fd(), &name) else {
                    continue;
                };
                header.set_entry_type(tar::EntryType::Symlink);
                tar.append_link(&mut header, path_os, OsStr::from_bytes(&target))?;
            }
            // FIFOs, sockets, devices: nothing to carry.
            _ => {}
        }
    }
    Ok(())
}

/// A file read as exactly `left` bytes: a file that shrank while being read is padded with
/// zeros, one that grew is cut, so the tar stays well-formed.
struct Exact {
    file: std::fs::File,
    left: u64,
}

impl Read for Exact {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = self.left.min(buf.len() as u64) as usize;
        if want == 0 {
            return Ok(0);
        }
        let n = match self.file.read(&mut buf[..want])? {
            0 => {
                buf[..want].fill(0);
                want
            }
            n => n,
        };
        self.left -= n as u64;
        Ok(n)
    }
}

/// The write half of a streamed response: chunks of [`CHUNK`] bytes into a bounded channel.
/// A client that went away closes it, which fails the next write with `BrokenPipe`.
struct ChannelWriter {
    tx: mpsc::Sender<io::Result<Bytes>>,
    buf: Vec<u8>,
}

impl ChannelWriter {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))
    }

    fn flush_all(mut self) -> io::Result<()> {
        self.send()
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(CHUNK - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The request body as a reader, and the limits on what it expands to.

/// The read half of a streamed request body.
struct BodyReader {
    rx: mpsc::Receiver<Bytes>,
    cur: Bytes,
}

impl Read for BodyReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.cur.is_empty() {
            match self.rx.blocking_recv() {
                Some(chunk) => self.cur = chunk,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.cur.len());
        buf[..n].copy_from_slice(&self.cur[..n]);
        self.cur.advance(n);
        Ok(n)
    }
}

/// The tar stream of a body: gunzipped when it starts with gzip's magic bytes.
fn open_stream(mut body: BodyReader, gauge: &Rc<Gauge>) -> io::Result<Box<dyn Read>> {
    let mut head = [0u8; 2];
    let mut got = 0;
    while got < head.len() {
        match body.read(&mut head[got..])? {
            0 => break,
            n => got += n,
        }
    }
    let stream = Read::chain(io::Cursor::new(head[..got].to_vec()), body);
    if head[..got] == [0x1f, 0x8b] {
        let counted = Counted {
            inner: stream,
            gauge: gauge.clone(),
        };
        gauge.gzip.set(true);
        return Ok(Box::new(flate2::read::MultiGzDecoder::new(counted)));
    }
    Ok(Box::new(stream))
}

/// Counts of the body and the tar stream, and which limit tripped.
#[derive(Default)]
struct Gauge {
    /// Tar bytes read.
    read: Cell<u64>,
    /// How far the tar stream may be read before the next entry is seen.
    limit: Cell<u64>,
    gzip: Cell<bool>,
    /// Compressed bytes read.
    compressed: Cell<u64>,
    tripped: Cell<Option<Trip>>,
}

#[derive(Debug, Clone, Copy)]
enum Trip {
    Headers,
    Ratio,
}

impl Gauge {
    /// Lets the tar stream be read `more` bytes past where it is.
    fn allow(&self, more: u64) {
        self.limit.set(self.read.get().saturating_add(more));
    }

    fn trip(&self, why: Trip) -> io::Error {
        self.tripped.set(Some(why));
        io::Error::other(format!("archive limit: {why:?}"))
    }
}

/// The compressed body, counted.
struct Counted<R> {
    inner: R,
    gauge: Rc<Gauge>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.gauge
            .compressed
            .set(self.gauge.compressed.get() + n as u64);
        Ok(n)
    }
}

/// The tar stream, counted against the header allowance and the gzip ratio.
struct Metered<R> {
    inner: R,
    gauge: Rc<Gauge>,
}

impl<R: Read> Read for Metered<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let g = &self.gauge;
        let room = g.limit.get().saturating_sub(g.read.get());
        if room == 0 && !buf.is_empty() {
            return Err(g.trip(Trip::Headers));
        }
        let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        let read = g.read.get() + n as u64;
        g.read.set(read);
        if g.gzip.get()
            && read
                > g.compressed
                    .get()
                    .saturating_mul(MAX_GZIP_RATIO)
                    .saturating_add(GZIP_SLACK)
        {
            return Err(g.trip(Trip::Ratio));
        }
        Ok(n)
    }
}

// ---------------------------------------------------------------------------------------------
// fd-relative syscalls on byte names.

fn cstring(name: &str) -> CString {
    // Names come from `entry_parts` or `files::normalize`, which refuse NUL bytes.
    CString::new(name).unwrap_or_default()
}

fn stat_at(dir: RawFd, name: &CStr) -> Result<libc::stat, nix::Error> {
    // SAFETY: stat is plain old data.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstatat relative to a dir fd we own, not following a symlink.
    match unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } {
        0 => Ok(st),
        _ => Err(nix::Error::last()),
    }
}

fn unlink_at(dir: RawFd, name: &CStr, is_dir: bool) -> Result<(), nix::Error> {
    let flags = if is_dir { libc::AT_REMOVEDIR } else { 0 };
    // SAFETY: unlinkat relative to a dir fd we own; it never follows a symlink.
    match unsafe { libc::unlinkat(dir, name.as_ptr(), flags) } {
        0 => Ok(()),
        _ => Err(nix::Error::last()),
    }
}

fn rename(
    from: RawFd,
    old: &CStr,
    into: RawFd,
    new: &CStr,
    flags: libc::c_uint,
) -> Result<(), nix::Error> {
    // SAFETY: renameat2 between dir fds we own; single-component names, never followed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            from,
            old.as_ptr(),
            into,
            new.as_ptr(),
            flags,
        )
    };
    match r {
        0 => Ok(()),
        _ => Err(nix::Error::last()),
    }
}

fn read_link_at(dir: RawFd, name: &CStr) -> Result<Vec<u8>, nix::Error> {
    let mut buf = vec![0u8; MAX_PATH_BYTES + 1];
    // SAFETY: readlinkat into a buffer we own, of the length given.
    let n = unsafe { libc::readlinkat(dir, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(nix::Error::last());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// Opens the directory `name` of `dir` for reading, through the safe resolution.
fn open_dir_at(dir: RawFd, name: &[u8]) -> Result<OwnedFd, nix::Error> {
    openat2(dir, name, libc::O_RDONLY | libc::O_DIRECTORY, 0)
}

/// Makes (if missing) and opens the directory `name` of `dir`; a new one gets mode 0755.
fn make_dir(dir: RawFd, name: &str) -> Result<OwnedFd, nix::Error> {
    let c = cstring(name);
    // SAFETY: mkdirat relative to a dir fd we own.
    let made = unsafe { libc::mkdirat(dir, c.as_ptr(), 0o700) } == 0;
    if !made && nix::Error::last() != nix::Error::EEXIST {
        return Err(nix::Error::last());
    }
    let fd = open_dir_at(dir, name.as_bytes())?;
    if made {
        // SAFETY: fchmod on a directory fd we own.
        unsafe { libc::fchmod(fd.as_raw_fd(), 0o755) };
    }
    Ok(fd)
}

/// The names in a directory (without `.` and `..`).
fn list_names(dir: &OwnedFd) -> Result<Vec<CString>, nix::Error> {
    let readable = open_dir_at(dir.as_raw_fd(), b".")?;
    let mut d = nix::dir::Dir::from_fd(readable)?;
    let mut out = Vec::new();
    for ent in d.iter() {
        let name = ent?.file_name().to_owned();
        if name.as_bytes() != b"." && name.as_bytes() != b".." {
            out.push(name);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names() {
        assert_eq!(entry_parts(b"./a/b.txt").unwrap(), vec!["a", "b.txt"]);
        assert_eq!(entry_parts(b"a//b/").unwrap(), vec!["a", "b"]);
        assert!(entry_parts(b"./").unwrap().is_empty());
        assert!(matches!(entry_parts(b"../x"), Err(Refusal::DotDot)));
        assert!(matches!(entry_parts(b"a/../../x"), Err(Refusal::DotDot)));
        assert!(matches!(entry_parts(b"/etc/x"), Err(Refusal::Absolute)));
        assert!(matches!(entry_parts(b"a\0b"), Err(Refusal::Nul)));
        assert!(matches!(entry_parts(b"\xff"), Err(Refusal::NotUtf8)));
        let deep = "d/".repeat(MAX_DEPTH) + "f";
        assert!(matches!(
            entry_parts(deep.as_bytes()),
            Err(Refusal::TooDeep)
        ));
        let ok = "d/".repeat(MAX_DEPTH - 1) + "f";
        assert!(entry_parts(ok.as_bytes()).is_ok());
        assert!(matches!(
            entry_parts("x".repeat(256).as_bytes()),
            Err(Refusal::TooLong)
        ));
    }

    #[test]
    fn symlink_targets() {
        assert!(stays_inside(0, b"b"));
        assert!(stays_inside(1, b"../b"));
        assert!(stays_inside(2, b"../../b/./c"));
        assert!(!stays_inside(0, b"../b"));
        assert!(!stays_inside(1, b"../../b"));
        assert!(!stays_inside(3, b"/"));
        assert!(!stays_inside(0, b"a/../../b"));
    }

    /// A body already received, as the extraction reads it.
    fn body(bytes: &[u8]) -> BodyReader {
        let chunks: Vec<&[u8]> = bytes.chunks(CHUNK).collect();
        let (tx, rx) = mpsc::channel(chunks.len() + 1);
        for c in chunks {
            tx.try_send(Bytes::copy_from_slice(c)).unwrap();
        }
        BodyReader {
            rx,
            cur: Bytes::new(),
        }
    }

    fn raw_entry(name: &[u8], kind: u8, link: &[u8], data: &[u8]) -> Vec<u8> {
        let mut h = tar::Header::new_gnu();
        h.as_old_mut().name[..name.len()].copy_from_slice(name);
        h.as_old_mut().linkname[..link.len()].copy_from_slice(link);
        h.set_entry_type(tar::EntryType::new(kind));
        h.set_size(data.len() as u64);
        h.set_mode(0o4777);
        h.set_cksum();
        let mut out = h.as_bytes().to_vec();
        out.extend(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
        out
    }

    fn open(path: &std::path::Path) -> OwnedFd {
        crate::workspace::open_dir(path).unwrap()
    }

    fn names(dir: &std::path::Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn extracts_merges_and_archives_back() {
        use std::os::unix::fs::PermissionsExt;
        let ws = tempfile::tempdir().unwrap();
        let tar = [
            raw_entry(b"./", b'5', b"", b""),
            raw_entry(b"a.txt", b'0', b"", b"hello"),
            raw_entry(b"sub/b.txt", b'0', b"", b"bee"),
            raw_entry(b"sub/link", b'2', b"b.txt", b""),
            raw_entry(b"sub/hard", b'1', b"sub/b.txt", b""),
            vec![0; 1024],
        ]
        .concat();
        let parts = vec!["x".to_string(), "proj".to_string()];
        let summary =
            extract(&open(ws.path()), &parts, body(&tar), &Room::Fixed(u64::MAX)).unwrap();
        assert_eq!(
            (
                summary.files,
                summary.symlinks,
                summary.hardlinks,
                summary.bytes
            ),
            (2, 1, 1, 8)
        );
        let proj = ws.path().join("x/proj");
        assert_eq!(names(ws.path()), ["x"]);
        assert_eq!(std::fs::read(proj.join("sub/hard")).unwrap(), b"bee");
        assert_eq!(
            std::fs::read_link(proj.join("sub/link")).unwrap().to_str(),
            Some("b.txt")
        );
        // setuid and world-write are gone.
        let mode = std::fs::metadata(proj.join("a.txt"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o775);

        // Into the existing directory: a.txt replaced, the rest kept.
        let update = [raw_entry(b"a.txt", b'0', b"", b"again"), vec![0; 1024]].concat();
        extract(
            &open(ws.path()),
            &parts,
            body(&update),
            &Room::Fixed(u64::MAX),
        )
        .unwrap();
        assert_eq!(std::fs::read(proj.join("a.txt")).unwrap(), b"again");
        assert_eq!(names(&proj), ["a.txt", "sub"]);

        let out = write_tar(&open_source(&open(ws.path()), &parts).unwrap(), Vec::new()).unwrap();
        let mut listed = Vec::new();
        for e in tar::Archive::new(&out[..]).entries().unwrap() {
            let e = e.unwrap();
            listed.push((
                String::from_utf8(e.path_bytes().into_owned()).unwrap(),
                e.header().entry_type(),
                e.size(),
            ));
        }
        use tar::EntryType as T;
        assert_eq!(
            listed,
            [
                ("a.txt".to_string(), T::Regular, 5),
                ("sub".to_string(), T::Directory, 0),
                ("sub/b.txt".to_string(), T::Regular, 3),
                ("sub/hard".to_string(), T::Regular, 3),
                ("sub/link".to_string(), T::Symlink, 0),
            ]
        );
    }

    #[test]
    fn refusals_leave_nothing_behind() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("keep"), "k").unwrap();
        let ok = raw_entry(b"fine", b'0', b"", b"fine");
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (raw_entry(b"../x", b'0', b"", b"x"), "../x"),
            (raw_entry(b"/etc/x", b'0', b"", b"x"), "/etc/x"),
            (raw_entry(b"esc", b'2', b"/", b""), "esc"),
            (raw_entry(b"pw", b'1', b"/etc/passwd", b""), "pw"),
            (raw_entry(b"null", b'3', b"", b""), "null"),
            (raw_entry(b"fifo", b'6', b"", b""), "fifo"),
            (raw_entry(b"vol", b'V', b"", b""), "vol"),
        ];
        for (bad, name) in cases {
            let tar = [ok.clone(), bad, vec![0; 1024]].concat();
            let parts = vec!["t".to_string()];
            match extract(&open(ws.path()), &parts, body(&tar), &Room::Fixed(u64::MAX)) {
                Err(Fail::Refused { entry, .. }) => assert_eq!(entry, name),
                other => panic!("{name}: {other:?}"),
            }
            assert_eq!(names(ws.path()), ["keep"], "{name}");
        }
        // Past the room: refused before the data, as a quota failure.
        let tar = [ok.clone(), vec![0; 1024]].concat();
        let out = extract(
            &open(ws.path()),
            &["t".to_string()],
            body(&tar),
            &Room::Fixed(3),
        );
        assert!(matches!(out, Err(Fail::Quota)), "{out:?}");
        assert_eq!(names(ws.path()), ["keep"]);
    }

    /// A gzip stream that expands past the ratio trips the gauge, whatever reads it.
    #[test]
    fn gzip_ratio_is_bounded() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&vec![0u8; 64 << 20]).unwrap();
        let packed = gz.finish().unwrap();
        let (tx, rx) = mpsc::channel(1);
        tx.try_send(Bytes::from(packed)).unwrap();
        drop(tx);
        let gauge = Rc::new(Gauge::default());
        gauge.allow(u64::MAX / 2);
        let stream = open_stream(
            BodyReader {
                rx,
                cur: Bytes::new(),
            },
            &gauge,
        )
        .unwrap();
        let mut metered = Metered {
            inner: stream,
            gauge: gauge.clone(),
        };
        let err = io::copy(&mut metered, &mut io::sink()).unwrap_err();
        assert!(matches!(
            stream_error(&gauge, "x", err),
            Fail::Refused {
                why: Refusal::Ratio,
                ..
            }
        ));
    }
}
