//! The operator's [`seal`] of a corrupt log: what is bad is moved to `quarantine/`, out of the
//! chain, and the log is cut back to its last good record.

use crate::chain::{
    load_verifier, read_boundary, read_checkpoints, walk_segments, Failure, Walker,
};
use crate::files::{read, seg_name, segments, sync_dir, write_new, CHECKPOINTS, QUARANTINE};
use crate::AuditError;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// What [`seal`] cut out of the chain.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SealReport {
    pub failure: Failure,
    /// Records kept (the chain continues after the last of them).
    pub kept: u64,
    /// Files under `quarantine/` now holding what was cut, with their SHA-256 and size.
    pub quarantined: Vec<serde_json::Value>,
    pub checkpoints_quarantined: usize,
}

/// The operator's answer to a corrupt log (the log must not be open for appending, or the
/// caller holds its lock): finds the first bad record (or checkpoint), moves it and
/// everything after it to `quarantine/` (evidence, kept out of the chain), and truncates the
/// log to the last good record. Checkpoints over the cut part are moved out too. The caller
/// then appends an `audit.sealed` record naming this report, which links the chain over the
/// cut. `None` when nothing is wrong.
pub fn seal(dir: &Path) -> Result<Option<SealReport>, AuditError> {
    let verifier = load_verifier(dir, None).map_err(|f| AuditError::Key(f.to_string()))?;
    let (cps, cp_fail) = read_checkpoints(dir, &verifier, false)?;
    let start = read_boundary(dir, &verifier).map_err(|f| AuditError::Invalid(f.to_string()))?;
    let (pos, walker, first) = match &start {
        Some(s) => (Some((s.segment, 0)), s.walker.clone(), (s.size, s.segment)),
        None => (None, Walker::new(), (0, 0)),
    };
    let walked = walk_segments(dir, pos, walker, &cps, false)?;
    let stamp = time::OffsetDateTime::now_utc().unix_timestamp();
    let qdir = dir.join(QUARANTINE);
    let mut quarantined = Vec::new();
    // Where the records are cut: a bad record's position, else (a root mismatch) the start of
    // the records that checkpoint covers, else nowhere.
    let (failure, cut) = if let Some(stop) = walked.stop {
        (
            Failure::Record(stop.bad),
            Some((stop.segment, stop.offset, stop.before.next_seq - 1)),
        )
    } else if let Some((line, reason, seq)) = walked.root_mismatch {
        let f = Failure::Checkpoint { line, reason };
        (f, Some(position_of(dir, seq, first)?))
    } else if let Some(cp) = cps
        .last()
        .filter(|c| c.size > walked.walker.frontier.size())
    {
        let f = Failure::Checkpoint {
            line: cp.line,
            reason: format!(
                "records missing: signed at size {}, the log ends at {}",
                cp.size,
                walked.walker.frontier.size()
            ),
        };
        (f, None)
    } else if let Some(f) = cp_fail {
        (f, None)
    } else {
        return Ok(None);
    };
    std::fs::create_dir_all(&qdir).map_err(|e| AuditError::io("creating quarantine/", e))?;
    let mut keep_records = walked.walker.frontier.size();
    if let Some((seg, offset, kept)) = cut {
        keep_records = kept;
        for (n, path) in segments(dir)? {
            if n < seg {
                continue;
            }
            let data = read(&path)?;
            let from = if n == seg { offset as usize } else { 0 };
            let part = &data[from.min(data.len())..];
            let qname = format!("{stamp}-{}-from-byte-{from}", seg_name(n));
            write_new(&qdir.join(&qname), part)?;
            quarantined.push(serde_json::json!({
                "file": format!("{QUARANTINE}/{qname}"),
                "sha256": hex::encode(<sha2::Sha256 as sha2::Digest>::digest(part)),
                "bytes": part.len(),
            }));
            if n == seg && from > 0 {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(|e| AuditError::io("opening a segment", e))?;
                f.set_len(from as u64)
                    .and_then(|()| f.sync_all())
                    .map_err(|e| AuditError::io("truncating a segment", e))?;
            } else {
                std::fs::remove_file(&path).map_err(|e| AuditError::io("removing a segment", e))?;
            }
        }
    }
    // Keep the checkpoint lines that verified and cover only kept records.
    let cp_path = dir.join(CHECKPOINTS);
    let all = std::fs::read(&cp_path).unwrap_or_default();
    let lines: Vec<&[u8]> = all.split_inclusive(|&b| b == b'\n').collect();
    let good: Vec<u64> = cps
        .iter()
        .filter(|c| c.size <= keep_records)
        .filter(|c| !matches!(&failure, Failure::Checkpoint { line, .. } if c.line >= *line))
        .map(|c| c.line)
        .collect();
    let (mut kept_cp, mut cut_cp) = (Vec::new(), Vec::new());
    for (i, l) in lines.iter().enumerate() {
        if good.contains(&(i as u64 + 1)) {
            kept_cp.extend_from_slice(l);
        } else {
            cut_cp.extend_from_slice(l);
        }
    }
    let checkpoints_quarantined = lines.len() - good.len();
    if !cut_cp.is_empty() {
        let qname = format!("{stamp}-{CHECKPOINTS}");
        write_new(&qdir.join(&qname), &cut_cp)?;
        quarantined.push(serde_json::json!({
            "file": format!("{QUARANTINE}/{qname}"),
            "sha256": hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&cut_cp)),
            "bytes": cut_cp.len(),
        }));
        let tmp = dir.join(format!("{CHECKPOINTS}.tmp"));
        write_new(&tmp, &kept_cp)?;
        std::fs::rename(&tmp, &cp_path).map_err(|e| AuditError::io("replacing checkpoints", e))?;
    }
    sync_dir(dir);
    Ok(Some(SealReport {
        failure,
        kept: keep_records,
        quarantined,
        checkpoints_quarantined,
    }))
}

/// The segment, byte offset and records before record `seq`, counting from `start` (the
/// records before the boundary and the boundary's segment; zeros without one).
fn position_of(dir: &Path, seq: u64, start: (u64, u32)) -> Result<(u32, u64, u64), AuditError> {
    let mut count = start.0;
    let mut last = (start.1.max(1), 0);
    for (n, path) in segments(dir)? {
        if n < start.1 {
            continue;
        }
        let data = read(&path)?;
        let mut pos = 0usize;
        for l in data.split_inclusive(|&b| b == b'\n') {
            if count + 1 == seq {
                return Ok((n, pos as u64, count));
            }
            count += 1;
            pos += l.len();
        }
        last = (n, data.len() as u64);
    }
    Ok((last.0, last.1, count))
}
