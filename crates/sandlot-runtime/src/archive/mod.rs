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
use crate::task::blocking;
use crate::util::new_id;
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

mod body;
mod extract;
mod fsat;
pub(crate) mod limits;
mod pack;

pub use limits::{Refusal, MAX_DEPTH, MAX_ENTRIES, MAX_GZIP_RATIO, MAX_META_BYTES, MAX_PATH_BYTES};

use body::*;
use extract::*;
use fsat::*;
use pack::*;

/// Tar bytes a gzip body may produce regardless of the ratio (small archives of zeros).
const GZIP_SLACK: u64 = 1 << 20;
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
        self.check_not_contained(&*self.entry(id)?)?;
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
