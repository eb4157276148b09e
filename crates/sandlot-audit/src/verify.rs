//! The full proof of a log ([`verify`]): every record's hash, the chain, every checkpoint's
//! signature and Merkle root. It works on the files alone, with or without the server
//! running: the writer appends whole lines, so a reader ignores at most one line in flight at
//! the end of the last segment.

use crate::chain::{
    load_verifier, read_boundary, read_checkpoints, walk_segments, Bad, Failure, Walker,
    ARCHIVED_ACTION,
};
use crate::files::{read, seg_name, segments, LOCK};
use crate::AuditError;
use base64::Engine;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Instant;

/// What [`verify`] proved.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VerifyReport {
    pub records: u64,
    pub segments: usize,
    pub checkpoints: usize,
    /// The size of the last signed checkpoint (records after it are chained but not yet signed).
    pub last_checkpoint: Option<u64>,
    /// Base64 Merkle root of every record.
    pub root: String,
    /// Records that link the chain over a sealed part.
    pub seals: Vec<u64>,
    /// Bytes of a record being written when the files were read (server running).
    pub in_flight_bytes: u64,
    /// The first record here: 1, or the one after an archive's boundary (the records before
    /// it are proven by the archive; the ones here by the signed boundary and what follows).
    #[serde(default)]
    pub from: u64,
    pub seconds: f64,
    pub failure: Option<Failure>,
}

/// Whether another process holds the log's lock (a server appending).
pub fn in_use(dir: &Path) -> bool {
    let Ok(f) = std::fs::File::open(dir.join(LOCK)) else {
        return false;
    };
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor we own; released when `f` closes.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
    r != 0
}

/// Proves the whole log in `dir`: every record's hash, the chain, every checkpoint's signature
/// (with `key`, a verifier key pinned by the caller, or else `verifier.key`) and Merkle root.
pub fn verify(dir: &Path, key: Option<&str>) -> Result<VerifyReport, AuditError> {
    verify_dir(dir, key, true)
}

/// [`verify`], of a log (`live`: an archive boundary must be named by an `audit.archived`
/// record after it) or of an archive (whose start an earlier archive's record names).
pub(crate) fn verify_dir(
    dir: &Path,
    key: Option<&str>,
    live: bool,
) -> Result<VerifyReport, AuditError> {
    let t0 = Instant::now();
    let tolerate = in_use(dir);
    let mut report = VerifyReport {
        records: 0,
        segments: 0,
        checkpoints: 0,
        last_checkpoint: None,
        root: String::new(),
        seals: Vec::new(),
        in_flight_bytes: 0,
        from: 1,
        seconds: 0.0,
        failure: None,
    };
    if !dir.is_dir() {
        return Err(AuditError::Invalid(format!(
            "{} is not an audit directory",
            dir.display()
        )));
    }
    let verifier = match load_verifier(dir, key) {
        Ok(v) => v,
        Err(f) => {
            report.failure = Some(f);
            return Ok(report);
        }
    };
    let start = match read_boundary(dir, &verifier) {
        Ok(s) => s,
        Err(f) => {
            report.failure = Some(f);
            return Ok(report);
        }
    };
    let (cps, cp_fail) = read_checkpoints(dir, &verifier, tolerate)?;
    report.checkpoints = cps.len();
    report.last_checkpoint = cps.last().map(|c| c.size);
    let (pos, walker) = match &start {
        Some(s) => {
            report.from = s.size + 1;
            (Some((s.segment, 0)), s.walker.clone())
        }
        None => (None, Walker::new()),
    };
    let walked = walk_segments(dir, pos, walker, &cps, tolerate)?;
    let unnamed = start
        .as_ref()
        .filter(|s| live && !walked.walker.archived.contains(&s.size));
    report.records = walked.walker.frontier.size();
    report.segments = walked.segments;
    report.root = base64::engine::general_purpose::STANDARD.encode(walked.walker.frontier.root());
    report.seals = walked.walker.seals.clone();
    report.in_flight_bytes = walked.in_flight;
    report.failure = if let Some(stop) = walked.stop {
        Some(Failure::Record(stop.bad))
    } else if let Some((line, reason, first)) = walked.root_mismatch {
        let _ = line;
        Some(Failure::Record(Bad {
            seq: first,
            segment: String::new(),
            line: 0,
            reason: format!("records {first}..: {reason} (checkpoint line {line})"),
        }))
    } else if let Some(s) = unnamed {
        Some(Failure::Boundary {
            reason: format!(
                "records 1..={} are not here, and no {} record after them says they were \
                 archived",
                s.size, ARCHIVED_ACTION
            ),
        })
    } else if let Some(cp) = cps.last().filter(|c| c.size > report.records) {
        let (seg, line) = last_position(dir)?;
        Some(Failure::Record(Bad {
            seq: report.records + 1,
            segment: seg,
            line,
            reason: format!(
                "missing: the checkpoint signed at size {} (line {}) covers it, the log ends at {}",
                cp.size, cp.line, report.records
            ),
        }))
    } else {
        cp_fail
    };
    report.seconds = t0.elapsed().as_secs_f64();
    Ok(report)
}

/// The last segment's name and the line after its last.
fn last_position(dir: &Path) -> Result<(String, u64), AuditError> {
    let segs = segments(dir)?;
    match segs.last() {
        Some((n, p)) => {
            let lines = read(p)?.iter().filter(|&&b| b == b'\n').count() as u64;
            Ok((seg_name(*n), lines + 1))
        }
        None => Ok((seg_name(1), 1)),
    }
}
