//! Moving sealed segments out of the log, with the chain still provable across the cut.
//!
//! Every segment after the first starts at a checkpoint signed when it was opened (at offset
//! 0, see `log`), so the end of each sealed segment is a signed tree size and root. An
//! archive cuts at such a boundary (size `s`):
//!
//! ```text
//! <to>/                      an audit directory of its own, verifiable alone
//!   seg-*.jsonl              the sealed segments, records up to s
//!   checkpoints.jsonl        the checkpoints of size ≤ s (the last is the boundary's)
//!   verifier.key             the log's public key
//!   boundary.json            where the archive starts, if an earlier archive cut before it
//! audit/boundary.json        the boundary's checkpoint line: signed size and root, the chain
//!                            head and Merkle frontier at s
//! ```
//!
//! The log keeps going from the boundary: [`crate::verify::verify`] starts its walk from
//! `boundary.json` (the signature checked, the frontier's root equal to the signed root), so
//! every later checkpoint, which signs the root of the whole tree from record 1, still proves
//! every record that remains. The archive is named in the chain: an `audit.archived` record
//! (appended, and signed by a checkpoint, before anything is removed) names the boundary's
//! size and root, and the log verifies only when such a record follows its boundary: moving
//! `boundary.json` forward (deleting the first remaining segments) or deleting it is found.
//! [`verify_archive`] proves an archive, that it ends exactly at the log's boundary, and that
//! it starts at the record the log's `audit.archived` record names.

pub use crate::chain::ARCHIVED_ACTION;
use crate::chain::{load_verifier, read_boundary, read_checkpoints, CheckpointLine, Failure};
use crate::files::{
    read, seg_name, segments, sync_dir, write_new, BOUNDARY, CHECKPOINTS, VERIFIER_KEY,
};
use crate::merkle::Hash;
use crate::note::NoteVerifier;
use crate::read::{read_records, Query};
use crate::verify::{verify_dir, VerifyReport};
use crate::AuditError;
use base64::Engine;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// What [`archive`] moved.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ArchiveReport {
    /// The directory the segments were moved to.
    pub to: PathBuf,
    /// The records now in the archive (`from..=to`) and the boundary (`to`).
    pub from_record: u64,
    pub boundary: u64,
    /// Base64 Merkle root at the boundary, as signed.
    pub root: String,
    pub segments: Vec<String>,
    pub bytes: u64,
}

/// The time of the last record of segment `path` (`None` when it has none).
pub(crate) fn last_at(path: &Path) -> Result<Option<String>, AuditError> {
    let data = read(path)?;
    let Some(line) = data
        .trim_ascii_end()
        .rsplit(|&b| b == b'\n')
        .next()
        .filter(|l| !l.is_empty())
    else {
        return Ok(None);
    };
    #[derive(Deserialize)]
    struct At {
        at: String,
    }
    Ok(serde_json::from_slice::<At>(line).ok().map(|a| a.at))
}

/// The plan of an archive: the sealed segments whose last record is before `before` (a
/// prefix of them: archives cut the oldest part), and the signed boundary after the last.
pub(crate) struct Plan {
    pub segments: Vec<(u32, PathBuf)>,
    pub boundary: CheckpointLine,
    pub boundary_root: Hash,
    pub from_record: u64,
}

/// Plans the archive of `dir` (whose open segment is `current`) up to `before`.
pub(crate) fn plan(
    dir: &Path,
    verifier: &NoteVerifier,
    current: u32,
    before: &str,
) -> Result<Plan, AuditError> {
    let (cps, fail) = read_checkpoints(dir, verifier, true)?;
    if let Some(f) = fail {
        return Err(AuditError::Invalid(format!(
            "the checkpoints do not verify: {f}"
        )));
    }
    let start = read_boundary(dir, verifier).map_err(|f| AuditError::Invalid(f.to_string()))?;
    let first_seg = start.as_ref().map_or(0, |s| s.segment);
    let mut chosen = Vec::new();
    let mut boundary = None;
    for (n, path) in segments(dir)? {
        // Left behind by an archive cut short after its boundary was written: already out.
        if n < first_seg {
            continue;
        }
        if n >= current {
            break;
        }
        match last_at(&path)? {
            Some(at) if at.as_str() < before => {}
            _ => break,
        }
        let Some(cp) = cps
            .iter()
            .find(|c| c.meta.segment == n + 1 && c.meta.offset == 0)
        else {
            break;
        };
        chosen.push((n, path));
        boundary = Some((cp.meta.clone(), cp.root));
    }
    let Some((boundary, boundary_root)) = boundary else {
        return Err(AuditError::Invalid(format!(
            "no sealed segment ends before {before}: nothing to archive"
        )));
    };
    Ok(Plan {
        segments: chosen,
        boundary,
        boundary_root,
        from_record: start.map_or(1, |s| s.size + 1),
    })
}

/// Writes the archive of `plan` into `to` (which must hold no audit files) and proves it:
/// the copies verify, and end at the boundary.
pub(crate) fn write_archive(dir: &Path, plan: &Plan, to: &Path) -> Result<u64, AuditError> {
    std::fs::create_dir_all(to)
        .map_err(|e| AuditError::io(format!("creating {}", to.display()), e))?;
    let taken = std::fs::read_dir(to)
        .map_err(|e| AuditError::io(format!("reading {}", to.display()), e))?
        .flatten()
        .any(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.starts_with("seg-") || n == CHECKPOINTS || n == BOUNDARY
        });
    if taken {
        return Err(AuditError::Invalid(format!(
            "{} already holds audit files: archive into an empty directory",
            to.display()
        )));
    }
    let mut bytes = 0u64;
    for (n, path) in &plan.segments {
        let data = read(path)?;
        bytes += data.len() as u64;
        write_new(&to.join(seg_name(*n)), &data)?;
    }
    let cps = std::fs::read(dir.join(CHECKPOINTS)).unwrap_or_default();
    let mut kept = Vec::new();
    for l in cps.split_inclusive(|&b| b == b'\n') {
        let size = serde_json::from_slice::<CheckpointLine>(l.trim_ascii_end())
            .map(|c| c.size)
            .unwrap_or(u64::MAX);
        if size <= plan.boundary.size {
            kept.extend_from_slice(l);
        }
    }
    write_new(&to.join(CHECKPOINTS), &kept)?;
    write_new(&to.join(VERIFIER_KEY), &read(&dir.join(VERIFIER_KEY))?)?;
    if dir.join(BOUNDARY).exists() {
        write_new(&to.join(BOUNDARY), &read(&dir.join(BOUNDARY))?)?;
    }
    sync_dir(to);
    Ok(bytes)
}

/// Replaces `dir`'s boundary with `plan`'s, then removes the archived segments and the
/// checkpoints before the boundary (the caller holds the log's lock and reopens
/// `checkpoints.jsonl`).
pub(crate) fn cut(dir: &Path, plan: &Plan) -> Result<(), AuditError> {
    let mut line = serde_json::to_vec(&plan.boundary).expect("plain data");
    line.push(b'\n');
    let tmp = dir.join(format!("{BOUNDARY}.tmp"));
    write_new(&tmp, &line)?;
    std::fs::rename(&tmp, dir.join(BOUNDARY))
        .map_err(|e| AuditError::io("placing boundary.json", e))?;
    sync_dir(dir);
    for (_, path) in &plan.segments {
        std::fs::remove_file(path)
            .map_err(|e| AuditError::io(format!("removing {}", path.display()), e))?;
    }
    let cps_path = dir.join(CHECKPOINTS);
    let cps = read(&cps_path)?;
    let mut kept = Vec::new();
    for l in cps.split_inclusive(|&b| b == b'\n') {
        let keep = serde_json::from_slice::<CheckpointLine>(l.trim_ascii_end())
            .map_or(true, |c| c.size >= plan.boundary.size);
        if keep {
            kept.extend_from_slice(l);
        }
    }
    let tmp = dir.join(format!("{CHECKPOINTS}.tmp"));
    write_new(&tmp, &kept)?;
    std::fs::rename(&tmp, &cps_path).map_err(|e| AuditError::io("replacing checkpoints", e))?;
    sync_dir(dir);
    Ok(())
}

/// Proves the archive in `archive` (as [`crate::verify::verify`] proves a log) and that it ends
/// exactly at the boundary of the log in `log_dir`: its records reach the boundary's size,
/// and their root is the boundary's signed root.
pub fn verify_archive(
    archive: &Path,
    log_dir: &Path,
    key: Option<&str>,
) -> Result<VerifyReport, AuditError> {
    // The log's key, not the archive's copy of it: an archive re-signed under another key is
    // not this log's.
    let verifier = match load_verifier(log_dir, key) {
        Ok(v) => v,
        Err(f) => return Err(AuditError::Key(f.to_string())),
    };
    let mut report = verify_dir(archive, Some(&verifier.to_text()), false)?;
    if report.failure.is_some() {
        return Ok(report);
    }
    let start = match read_boundary(log_dir, &verifier) {
        Ok(Some(s)) => s,
        Ok(None) => {
            report.failure = Some(Failure::Boundary {
                reason: format!(
                    "{} has no {BOUNDARY}: nothing was archived from it",
                    log_dir.display()
                ),
            });
            return Ok(report);
        }
        Err(f) => {
            report.failure = Some(f);
            return Ok(report);
        }
    };
    report.failure = ends_at(&report, start.size, &start.root);
    if report.failure.is_none() {
        report.failure = starts_as_named(log_dir, start.size, report.from)?;
    }
    Ok(report)
}

/// Whether the archive's first record is the one the log's `audit.archived` record for
/// `boundary` names: an archive whose first segments were cut off (its own `boundary.json`
/// moved forward to a later signed checkpoint) proves itself alone, but not this.
fn starts_as_named(
    log_dir: &Path,
    boundary: u64,
    from: u64,
) -> Result<Option<Failure>, AuditError> {
    let q = Query {
        action: Some(ARCHIVED_ACTION.into()),
        ..Default::default()
    };
    let (records, _) = read_records(log_dir, &q, 0, 10_000, usize::MAX)?;
    let named = records
        .iter()
        .rev()
        .find(|r| r.target.get("boundary").and_then(|b| b.as_u64()) == Some(boundary))
        .and_then(|r| r.target.get("from_record").and_then(|f| f.as_u64()));
    Ok(match named {
        Some(f) if f == from => None,
        Some(f) => Some(Failure::Boundary {
            reason: format!(
                "the archive starts at record {from}, the log's {ARCHIVED_ACTION} record says {f}"
            ),
        }),
        None => Some(Failure::Boundary {
            reason: format!("no {ARCHIVED_ACTION} record in the log names the boundary {boundary}"),
        }),
    })
}

/// Proves the archive in `archive` with `verifier` and that it ends at `size` with `root`.
pub(crate) fn verify_archive_at(
    archive: &Path,
    verifier: &NoteVerifier,
    size: u64,
    root: &Hash,
) -> Result<Option<Failure>, AuditError> {
    let report = verify_dir(archive, Some(&verifier.to_text()), false)?;
    Ok(report
        .failure
        .clone()
        .or_else(|| ends_at(&report, size, root)))
}

/// Whether a verified archive ends exactly at the boundary `size` with `root`.
fn ends_at(report: &VerifyReport, size: u64, root: &Hash) -> Option<Failure> {
    let root = base64::engine::general_purpose::STANDARD.encode(root);
    (report.records != size || report.root != root).then(|| Failure::Boundary {
        reason: format!(
            "the archive ends at record {} (root {}), the log's boundary is record {size} \
             (root {root})",
            report.records, report.root
        ),
    })
}
