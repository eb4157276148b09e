//! The files of an audit directory (see the crate's layout) and the plain file operations
//! every part (writer, verifier, seal, archive) does on them, with the writer's disk
//! reservations (space allocated ahead, so that a full disk refuses an action before it runs
//! rather than losing its record).

use crate::AuditError;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

pub(crate) const CHECKPOINTS: &str = "checkpoints.jsonl";
pub(crate) const VERIFIER_KEY: &str = "verifier.key";
pub(crate) const SIGNING_KEY: &str = "signing.key";
pub(crate) const QUARANTINE: &str = "quarantine";
pub(crate) const LOCK: &str = "lock";
/// The file that says where a directory's chain starts.
pub const BOUNDARY: &str = "boundary.json";
pub(crate) fn seg_name(n: u32) -> String {
    format!("seg-{n:08}.jsonl")
}

/// The segment files, in order.
pub(crate) fn segments(dir: &Path) -> Result<Vec<(u32, PathBuf)>, AuditError> {
    let mut out = Vec::new();
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(AuditError::io(format!("reading {}", dir.display()), e)),
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(n) = name
            .strip_prefix("seg-")
            .and_then(|r| r.strip_suffix(".jsonl"))
            .filter(|n| n.len() == 8)
            .and_then(|n| n.parse::<u32>().ok())
        {
            out.push((n, e.path()));
        }
    }
    out.sort();
    Ok(out)
}

pub(crate) fn read(path: &Path) -> Result<Vec<u8>, AuditError> {
    std::fs::read(path).map_err(|e| AuditError::io(format!("reading {}", path.display()), e))
}

pub(crate) fn write_new(path: &Path, data: &[u8]) -> Result<(), AuditError> {
    let mut f = std::fs::File::create(path)
        .map_err(|e| AuditError::io(format!("creating {}", path.display()), e))?;
    f.write_all(data)
        .and_then(|()| f.sync_all())
        .map_err(|e| AuditError::io(format!("writing {}", path.display()), e))
}

pub(crate) fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Opens `path` for appending (created 0600).
pub(crate) fn open_append(path: &Path) -> Result<File, AuditError> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| AuditError::io(format!("opening {}", path.display()), e))
}

pub(crate) fn errno_of(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

/// Allocates `[from, to)` of `f` without changing its size; `Ok(false)` when the filesystem
/// cannot.
pub(crate) fn fallocate_keep(f: &File, from: u64, to: u64) -> std::io::Result<bool> {
    if to <= from {
        return Ok(true);
    }
    // SAFETY: fallocate on a descriptor we own, with a valid range; no memory is passed.
    let r = unsafe {
        libc::fallocate(
            f.as_raw_fd(),
            libc::FALLOC_FL_KEEP_SIZE,
            from as libc::off_t,
            (to - from) as libc::off_t,
        )
    };
    if r == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    match errno_of(&e) {
        libc::EOPNOTSUPP | libc::ENOSYS => Ok(false),
        _ => Err(e),
    }
}

/// Frees what was reserved past `len` (best effort).
pub(crate) fn release(f: &File, len: u64, reserved_to: u64) {
    if reserved_to > len {
        // SAFETY: as in `fallocate_keep`.
        unsafe {
            libc::fallocate(
                f.as_raw_fd(),
                libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE,
                len as libc::off_t,
                (reserved_to - len) as libc::off_t,
            )
        };
    }
}
