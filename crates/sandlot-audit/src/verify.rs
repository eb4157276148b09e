//! Reading the log back: the full proof ([`verify`]: every record's hash, the chain, every
//! checkpoint's signature and Merkle root), the operator's [`seal`] of a corrupt log, and
//! reads for export and the API ([`read_records`], [`export`]). All of it works on the files
//! alone, with or without the server running: the writer appends whole lines, so a reader
//! ignores at most one line in flight at the end of the last segment.

use crate::merkle::{leaf_hash, Frontier, Hash};
use crate::note::{parse_checkpoint_body, NoteVerifier};
use crate::record::{check_line, LineFault, Record};
use crate::AuditError;
use base64::Engine;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub(crate) const CHECKPOINTS: &str = "checkpoints.jsonl";
pub(crate) const VERIFIER_KEY: &str = "verifier.key";
pub(crate) const SIGNING_KEY: &str = "signing.key";
pub(crate) const QUARANTINE: &str = "quarantine";
pub(crate) const LOCK: &str = "lock";
/// The action of the record that links the chain over a sealed part.
pub const SEALED_ACTION: &str = "audit.sealed";

/// The first bad record: where it is and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bad {
    /// The sequence number the record should have.
    pub seq: u64,
    /// The segment file it is in.
    pub segment: String,
    /// Its line in that file, from 1.
    pub line: u64,
    pub reason: String,
}

impl std::fmt::Display for Bad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "record {} ({} line {}): {}",
            self.seq, self.segment, self.line, self.reason
        )
    }
}

/// What a verification found wrong first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Failure {
    Record(Bad),
    Checkpoint {
        line: u64,
        reason: String,
    },
    Key {
        reason: String,
    },
    /// Where the records start after an archive (`boundary.json`) does not prove itself, or
    /// is not the one the chain names.
    Boundary {
        reason: String,
    },
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Record(b) => write!(f, "{b}"),
            Failure::Checkpoint { line, reason } => {
                write!(f, "checkpoint ({CHECKPOINTS} line {line}): {reason}")
            }
            Failure::Key { reason } => write!(f, "the verifier key: {reason}"),
            Failure::Boundary { reason } => write!(f, "the archive boundary: {reason}"),
        }
    }
}

/// One line of `checkpoints.jsonl`: the signed note, and hints that let the writer resume
/// without reading the whole log (not trusted by [`verify`], which recomputes everything).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CheckpointLine {
    pub size: u64,
    /// The segment and byte offset where record `size + 1` goes.
    pub segment: u32,
    pub offset: u64,
    /// Hex hash of record `size` (zeros for an empty log).
    pub head: String,
    /// Hex roots of the Merkle frontier at `size`.
    pub frontier: Vec<String>,
    pub note: String,
}

/// A checkpoint whose signature verified.
#[derive(Debug, Clone)]
pub(crate) struct Verified {
    pub line: u64,
    pub size: u64,
    pub root: Hash,
    pub meta: CheckpointLine,
}

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

/// The verifier key: `key` if given (pinned by the caller), else `verifier.key` in `dir`.
pub(crate) fn load_verifier(dir: &Path, key: Option<&str>) -> Result<NoteVerifier, Failure> {
    let text = match key {
        Some(k) => k.to_owned(),
        None => std::fs::read_to_string(dir.join(VERIFIER_KEY)).map_err(|e| Failure::Key {
            reason: format!("reading {VERIFIER_KEY}: {e}"),
        })?,
    };
    NoteVerifier::from_text(&text).map_err(|e| Failure::Key {
        reason: e.to_string(),
    })
}

/// The checkpoints that verify, in order, and the first that does not.
pub(crate) fn read_checkpoints(
    dir: &Path,
    verifier: &NoteVerifier,
    tolerate_in_flight: bool,
) -> Result<(Vec<Verified>, Option<Failure>), AuditError> {
    let path = dir.join(CHECKPOINTS);
    let data = match std::fs::read(&path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), None)),
        Err(e) => return Err(AuditError::io(format!("reading {}", path.display()), e)),
    };
    let mut out: Vec<Verified> = Vec::new();
    let mut lineno = 0u64;
    let mut rest = &data[..];
    while !rest.is_empty() {
        lineno += 1;
        let (line, complete) = match rest.iter().position(|&b| b == b'\n') {
            Some(i) => {
                let l = &rest[..i];
                rest = &rest[i + 1..];
                (l, true)
            }
            None => {
                let l = rest;
                rest = &[];
                (l, false)
            }
        };
        let fail = |reason: String| Failure::Checkpoint {
            line: lineno,
            reason,
        };
        if !complete {
            if tolerate_in_flight {
                break;
            }
            return Ok((out, Some(fail("the last line is cut short".into()))));
        }
        let meta: CheckpointLine = match serde_json::from_slice(line) {
            Ok(m) => m,
            Err(e) => return Ok((out, Some(fail(format!("not a checkpoint line: {e}"))))),
        };
        let body = match verifier.open(&meta.note) {
            Ok(b) => b,
            Err(e) => return Ok((out, Some(fail(e)))),
        };
        let (origin, size, root) = match parse_checkpoint_body(body) {
            Ok(x) => x,
            Err(e) => return Ok((out, Some(fail(e)))),
        };
        if origin != verifier.name() {
            return Ok((
                out,
                Some(fail(format!("origin {origin:?} is not this log's"))),
            ));
        }
        if size != meta.size {
            return Ok((
                out,
                Some(fail("the size hint disagrees with the note".into())),
            ));
        }
        if out.last().is_some_and(|p| p.size > size) {
            return Ok((
                out,
                Some(fail("a checkpoint smaller than the one before".into())),
            ));
        }
        out.push(Verified {
            line: lineno,
            size,
            root,
            meta,
        });
    }
    Ok((out, None))
}

/// Checks records in order and keeps the chain and the tree.
#[derive(Debug, Clone)]
pub(crate) struct Walker {
    pub next_seq: u64,
    pub head: Hash,
    pub frontier: Frontier,
    pub seals: Vec<u64>,
    /// The boundaries (sizes) that `audit.archived` records name.
    pub archived: Vec<u64>,
}

impl Walker {
    pub fn new() -> Self {
        Self {
            next_seq: 1,
            head: [0; 32],
            frontier: Frontier::default(),
            seals: Vec::new(),
            archived: Vec::new(),
        }
    }

    /// Checks one line (without its newline); the reason when it is bad.
    pub fn feed(&mut self, line: &[u8]) -> Result<(), String> {
        let (rec, hash) = check_line(line).map_err(|f| match f {
            LineFault::HashMismatch => "its hash does not match its contents".to_owned(),
            LineFault::Malformed(m) => m,
        })?;
        if rec.seq != self.next_seq {
            return Err(format!("seq {} where {} was due", rec.seq, self.next_seq));
        }
        let mut prev = [0u8; 32];
        if hex::decode_to_slice(&rec.prev, &mut prev).is_err() || prev != self.head {
            return Err("its prev is not the hash of the record before".into());
        }
        if rec.action == SEALED_ACTION {
            self.seals.push(rec.seq);
        }
        if rec.action == crate::archive::ARCHIVED_ACTION {
            if let Some(b) = rec.target.get("boundary").and_then(|b| b.as_u64()) {
                self.archived.push(b);
            }
        }
        self.frontier.push(leaf_hash(line));
        self.head = hash;
        self.next_seq += 1;
        Ok(())
    }
}

/// Where a walk stopped on a bad record: the state just before it and its byte offset.
pub(crate) struct Stop {
    pub bad: Bad,
    pub before: Walker,
    pub segment: u32,
    pub offset: u64,
}

/// What [`walk_segments`] saw.
pub(crate) struct Walked {
    pub walker: Walker,
    pub segments: usize,
    /// Bytes of a last line in flight (no newline yet), ignored.
    pub in_flight: u64,
    /// The last segment and the length of its complete lines.
    pub end: Option<(u32, u64)>,
    pub stop: Option<Stop>,
    /// A checkpoint the records do not match (line, reason, first seq it covers).
    pub root_mismatch: Option<(u64, String, u64)>,
}

/// Walks the segments from `start` (segment, offset) with `walker`, checking each checkpoint
/// in `cps` (sorted) as the tree reaches its size.
pub(crate) fn walk_segments(
    dir: &Path,
    start: Option<(u32, u64)>,
    mut walker: Walker,
    cps: &[Verified],
    tolerate_in_flight: bool,
) -> Result<Walked, AuditError> {
    let segs = segments(dir)?;
    let mut cp_i = cps.partition_point(|c| c.size < walker.frontier.size());
    let mut last_checked = walker.frontier.size();
    let mut w = Walked {
        walker: Walker::new(),
        segments: 0,
        in_flight: 0,
        end: None,
        stop: None,
        root_mismatch: None,
    };
    // `at`: the segment and offset reached, and whether that is the segment's end.
    let check_cps = |walker: &Walker,
                     cp_i: &mut usize,
                     last_checked: &mut u64,
                     at: Option<(u32, u64, bool)>| {
        while let Some(cp) = cps.get(*cp_i) {
            if cp.size != walker.frontier.size() {
                break;
            }
            *cp_i += 1;
            if cp.root != walker.frontier.root() {
                return Some((
                    cp.line,
                    format!("the records up to {} do not match its signed root", cp.size),
                    *last_checked + 1,
                ));
            }
            let m = &cp.meta;
            let place_ok = at.is_none_or(|(seg, off, end)| {
                (m.segment == seg && m.offset == off)
                    || (end && m.segment == seg + 1 && m.offset == 0)
            });
            let stack: Vec<String> = walker.frontier.stack().iter().map(hex::encode).collect();
            if !place_ok || m.head != hex::encode(walker.head) || m.frontier != stack {
                return Some((
                    cp.line,
                    "its hints (segment, offset, head, frontier) do not match the records".into(),
                    cp.size + 1,
                ));
            }
            *last_checked = cp.size;
        }
        None
    };
    if let Some(m) = check_cps(&walker, &mut cp_i, &mut last_checked, None) {
        w.root_mismatch = Some(m);
        w.walker = walker;
        return Ok(w);
    }
    let n_segs = segs.len();
    for (i, (n, path)) in segs.iter().enumerate() {
        let offset0 = match start {
            Some((s, _)) if *n < s => continue,
            Some((s, off)) if *n == s => off,
            _ => 0,
        };
        w.segments += 1;
        let name = seg_name(*n);
        let data = read(path)?;
        if (data.len() as u64) < offset0 {
            w.stop = Some(Stop {
                bad: Bad {
                    seq: walker.next_seq,
                    segment: name,
                    line: 0,
                    reason: format!(
                        "the segment is {} bytes, cut short of the {offset0} a checkpoint saw",
                        data.len()
                    ),
                },
                before: walker.clone(),
                segment: *n,
                offset: data.len() as u64,
            });
            w.walker = walker;
            return Ok(w);
        }
        // Lines before the offset are counted for the line numbers reported.
        let mut lineno = data[..offset0 as usize]
            .iter()
            .filter(|&&b| b == b'\n')
            .count() as u64;
        let mut pos = offset0 as usize;
        let is_last = i + 1 == n_segs;
        while pos < data.len() {
            lineno += 1;
            let Some(len) = data[pos..].iter().position(|&b| b == b'\n') else {
                if is_last && tolerate_in_flight {
                    w.in_flight = (data.len() - pos) as u64;
                    break;
                }
                w.stop = Some(Stop {
                    bad: Bad {
                        seq: walker.next_seq,
                        segment: name.clone(),
                        line: lineno,
                        reason: "the line is cut short (no newline)".into(),
                    },
                    before: walker.clone(),
                    segment: *n,
                    offset: pos as u64,
                });
                w.walker = walker;
                return Ok(w);
            };
            let line = &data[pos..pos + len];
            let before = walker.clone();
            if let Err(reason) = walker.feed(line) {
                w.stop = Some(Stop {
                    bad: Bad {
                        seq: before.next_seq,
                        segment: name.clone(),
                        line: lineno,
                        reason,
                    },
                    before,
                    segment: *n,
                    offset: pos as u64,
                });
                w.walker = walker;
                return Ok(w);
            }
            pos += len + 1;
            let at = Some((*n, pos as u64, pos == data.len()));
            if let Some(m) = check_cps(&walker, &mut cp_i, &mut last_checked, at) {
                w.root_mismatch = Some(m);
                w.walker = walker;
                return Ok(w);
            }
        }
        w.end = Some((*n, (pos as u64).min(data.len() as u64 - w.in_flight)));
    }
    w.walker = walker;
    Ok(w)
}

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
    let start = match crate::archive::read_boundary(dir, &verifier) {
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
                s.size,
                crate::archive::ARCHIVED_ACTION
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
    let start = crate::archive::read_boundary(dir, &verifier)
        .map_err(|f| AuditError::Invalid(f.to_string()))?;
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

/// Filters of a read.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Query {
    /// Records with seq ≥ from.
    pub from: Option<u64>,
    /// Records with seq ≤ to.
    pub to: Option<u64>,
    pub actor: Option<String>,
    pub tenant: Option<String>,
    /// Records whose action starts with this.
    pub action: Option<String>,
    /// Records whose target mentions this id.
    pub target: Option<String>,
    pub outcome: Option<String>,
}

impl Query {
    fn matches(&self, r: &Record) -> bool {
        let actor_id = match &r.actor {
            serde_json::Value::String(s) => s.as_str(),
            v => v
                .get("key_id")
                .or_else(|| v.get("sandbox_token"))
                .and_then(|x| x.as_str())
                .unwrap_or(""),
        };
        self.actor.as_deref().is_none_or(|a| a == actor_id)
            && self
                .tenant
                .as_deref()
                .is_none_or(|t| r.tenant.as_deref() == Some(t))
            && self
                .action
                .as_deref()
                .is_none_or(|a| r.action.starts_with(a))
            && self.outcome.as_deref().is_none_or(|o| r.outcome == o)
            && self.target.as_deref().is_none_or(|t| match &r.target {
                serde_json::Value::Object(o) => o.values().any(|v| v.as_str() == Some(t)),
                _ => false,
            })
    }
}

/// The first seq of each segment (read from its first line).
fn segment_starts(dir: &Path) -> Result<Vec<(u64, PathBuf)>, AuditError> {
    use std::io::BufRead;
    let mut out = Vec::new();
    for (_, path) in segments(dir)? {
        let f = std::fs::File::open(&path)
            .map_err(|e| AuditError::io(format!("opening {}", path.display()), e))?;
        let mut first = Vec::new();
        let _ = std::io::BufReader::new(f)
            .take(64 << 10)
            .read_until(b'\n', &mut first);
        #[derive(Deserialize)]
        struct Seq {
            seq: u64,
        }
        let seq = serde_json::from_slice::<Seq>(first.trim_ascii_end())
            .map(|s| s.seq)
            .unwrap_or(0);
        out.push((seq, path));
    }
    Ok(out)
}

use std::io::Read as _;

/// Reads stored lines in order, from seq `from` on, calling `f(seq, line)` until it returns
/// false. Lines that do not parse are skipped (verify names them).
fn scan(dir: &Path, from: u64, mut f: impl FnMut(u64, &[u8]) -> bool) -> Result<(), AuditError> {
    let starts = segment_starts(dir)?;
    let first = starts
        .iter()
        .rposition(|(s, _)| *s != 0 && *s <= from)
        .unwrap_or(0);
    for (_, path) in &starts[first..] {
        let data = read(path)?;
        for line in data.split(|&b| b == b'\n') {
            if line.is_empty() {
                continue;
            }
            // `{"seq":N,` opens every line: read N without parsing the rest.
            let Some(rest) = line.strip_prefix(b"{\"seq\":") else {
                continue;
            };
            let end = rest.iter().position(|&b| b == b',').unwrap_or(0);
            let Some(seq) = std::str::from_utf8(&rest[..end])
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
            else {
                continue;
            };
            if seq < from {
                continue;
            }
            if !f(seq, line) {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Up to `limit` records matching `q` with seq > `after`, scanning at most `scan_cap` lines;
/// and the cursor to continue from (the last seq looked at) when there may be more.
pub fn read_records(
    dir: &Path,
    q: &Query,
    after: u64,
    limit: usize,
    scan_cap: usize,
) -> Result<(Vec<Record>, Option<u64>), AuditError> {
    let from = after.saturating_add(1).max(q.from.unwrap_or(1));
    let to = q.to.unwrap_or(u64::MAX);
    let mut out = Vec::new();
    let mut scanned = 0usize;
    let mut last = None;
    let mut more = false;
    scan(dir, from, |seq, line| {
        if seq > to {
            return false;
        }
        if out.len() >= limit || scanned >= scan_cap {
            more = true;
            return false;
        }
        scanned += 1;
        last = Some(seq);
        if let Ok(r) = serde_json::from_slice::<Record>(line) {
            if q.matches(&r) {
                out.push(r);
            }
        }
        true
    })?;
    Ok((out, if more { last } else { None }))
}

/// Writes the records with seq in `from..=to` to `out` as stored (JSON lines); returns how
/// many.
pub fn export(
    dir: &Path,
    from: Option<u64>,
    to: Option<u64>,
    out: &mut dyn Write,
) -> Result<u64, AuditError> {
    let to = to.unwrap_or(u64::MAX);
    let mut n = 0u64;
    let mut err = None;
    scan(dir, from.unwrap_or(1), |seq, line| {
        if seq > to {
            return false;
        }
        if let Err(e) = out.write_all(line).and_then(|()| out.write_all(b"\n")) {
            err = Some(e);
            return false;
        }
        n += 1;
        true
    })?;
    match err {
        Some(e) => Err(AuditError::io("writing the export", e)),
        None => Ok(n),
    }
}
