//! Reads of the stored records for export and the API ([`read_records`], [`export`]),
//! filtered by a [`Query`]; they trust the files (proving them is [`crate::verify`]'s work).

use crate::files::{read, segments};
use crate::record::Record;
use crate::AuditError;
use serde::Deserialize;
use std::io::{Read as _, Write};
use std::path::{Path, PathBuf};

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
