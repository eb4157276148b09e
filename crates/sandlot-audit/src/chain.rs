//! The chain as a reader proves it: the checkpoints that verify, the walk over the segments
//! that checks every record's hash, its link to the one before and the Merkle roots the
//! checkpoints sign, what it finds wrong first, and where a directory's records start after
//! an archive (its signed boundary). [`crate::verify`], [`crate::seal`] and
//! [`crate::archive`] are built on it.

use crate::files::{read, seg_name, segments, BOUNDARY, CHECKPOINTS, VERIFIER_KEY};
use crate::merkle::{leaf_hash, Frontier, Hash};
use crate::note::{parse_checkpoint_body, NoteVerifier};
use crate::record::{check_line, LineFault};
use crate::AuditError;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The action of the record that links the chain over a sealed part.
pub const SEALED_ACTION: &str = "audit.sealed";

/// The action of the record that names an archive's boundary.
pub const ARCHIVED_ACTION: &str = "audit.archived";

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

/// Where a directory's records start, proven by the signature of its checkpoint.
#[derive(Debug, Clone)]
pub(crate) struct Start {
    pub size: u64,
    pub segment: u32,
    pub root: Hash,
    pub walker: Walker,
}

/// The boundary of `dir`, if its first records were archived; a failure when the file is
/// there but does not prove itself.
pub(crate) fn read_boundary(dir: &Path, verifier: &NoteVerifier) -> Result<Option<Start>, Failure> {
    let path = dir.join(BOUNDARY);
    let data = match std::fs::read(&path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Failure::Boundary {
                reason: format!("reading {BOUNDARY}: {e}"),
            })
        }
    };
    let bad = |reason: String| Failure::Boundary { reason };
    let line: CheckpointLine = serde_json::from_slice(data.trim_ascii_end())
        .map_err(|e| bad(format!("not a checkpoint line: {e}")))?;
    let body = verifier.open(&line.note).map_err(bad)?;
    let (origin, size, root) = parse_checkpoint_body(body).map_err(bad)?;
    if origin != verifier.name() || size != line.size {
        return Err(bad("its note is not this log's at its size".into()));
    }
    let decode = |h: &str| {
        let mut o = [0u8; 32];
        hex::decode_to_slice(h, &mut o).ok().map(|()| o)
    };
    let stack: Option<Vec<Hash>> = line.frontier.iter().map(|h| decode(h)).collect();
    let frontier = stack
        .and_then(|s| Frontier::from_parts(size, s))
        .filter(|f| f.root() == root)
        .ok_or_else(|| bad("its frontier does not hash to the signed root".into()))?;
    let head = decode(&line.head).ok_or_else(|| bad("its head is not a hash".into()))?;
    if line.offset != 0 || size == 0 {
        return Err(bad("it is not at the start of a segment".into()));
    }
    Ok(Some(Start {
        size,
        segment: line.segment,
        root,
        walker: Walker {
            next_seq: size + 1,
            head,
            frontier,
            seals: Vec::new(),
            archived: Vec::new(),
        },
    }))
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
        if rec.action == ARCHIVED_ACTION {
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
