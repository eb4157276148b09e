//! One audit record: a canonical JSON line. Fields in a fixed order (`seq, at, actor, tenant,
//! action, target, outcome, status, decisions, request_sha256, response_sha256, execution_id,
//! trace_id, prev, hash`), compact, no whitespace. `hash` is the hex SHA-256 of the line's
//! bytes without the `hash` member (the object closed right after `prev`): editing any byte of
//! a record changes its hash, and `prev` (the previous record's hash) chains it to the rest.

use crate::merkle::Hash;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Longest text kept in one field; longer values are cut (a record stays small).
pub const MAX_FIELD: usize = 256;
/// Most decision ids kept in one record.
pub const MAX_DECISIONS: usize = 64;

/// What a caller asks to record; the log adds `seq`, `at`, `prev` and `hash`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Entry {
    /// `"system"`, `"anonymous"`, `{"key_id", "key_prefix"}` or `{"sandbox_token"}`.
    pub actor: serde_json::Value,
    pub tenant: Option<String>,
    pub action: String,
    /// The ids the action named (an object), or null.
    pub target: serde_json::Value,
    /// `ok`, `error:<code>`, or the HTTP status.
    pub outcome: String,
    pub status: Option<u16>,
    pub decisions: Vec<String>,
    pub request_sha256: Option<String>,
    pub response_sha256: Option<String>,
    pub execution_id: Option<String>,
    pub trace_id: Option<String>,
}

/// A record as stored (what export and the API return).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Record {
    pub seq: u64,
    pub at: String,
    pub actor: serde_json::Value,
    pub tenant: Option<String>,
    pub action: String,
    pub target: serde_json::Value,
    pub outcome: String,
    pub status: Option<u16>,
    pub decisions: Vec<String>,
    pub request_sha256: Option<String>,
    pub response_sha256: Option<String>,
    pub execution_id: Option<String>,
    pub trace_id: Option<String>,
    pub prev: String,
    pub hash: String,
}

fn cut(s: &mut String) {
    if s.len() > MAX_FIELD {
        let mut end = MAX_FIELD;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

fn cut_opt(s: &mut Option<String>) {
    if let Some(s) = s {
        cut(s);
    }
}

impl Entry {
    /// Bounds every field so no record grows past a few KiB.
    pub fn bounded(mut self) -> Self {
        cut(&mut self.action);
        cut(&mut self.outcome);
        cut_opt(&mut self.tenant);
        cut_opt(&mut self.request_sha256);
        cut_opt(&mut self.response_sha256);
        cut_opt(&mut self.execution_id);
        cut_opt(&mut self.trace_id);
        self.decisions.truncate(MAX_DECISIONS);
        self.decisions.iter_mut().for_each(cut);
        bound_value(&mut self.actor, 0);
        bound_value(&mut self.target, 0);
        self
    }

    /// The JSON members from `actor` to `trace_id`, comma separated, without braces: the part
    /// of the line that does not depend on the log's position (built outside its lock).
    pub fn middle(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct Middle<'a> {
            actor: &'a serde_json::Value,
            tenant: &'a Option<String>,
            action: &'a str,
            target: &'a serde_json::Value,
            outcome: &'a str,
            status: Option<u16>,
            decisions: &'a [String],
            request_sha256: &'a Option<String>,
            response_sha256: &'a Option<String>,
            execution_id: &'a Option<String>,
            trace_id: &'a Option<String>,
        }
        let mut v = serde_json::to_vec(&Middle {
            actor: &self.actor,
            tenant: &self.tenant,
            action: &self.action,
            target: &self.target,
            outcome: &self.outcome,
            status: self.status,
            decisions: &self.decisions,
            request_sha256: &self.request_sha256,
            response_sha256: &self.response_sha256,
            execution_id: &self.execution_id,
            trace_id: &self.trace_id,
        })
        .expect("serializing plain data cannot fail");
        v.remove(0);
        v.pop();
        v
    }
}

/// Cuts strings, arrays and objects in `v` (an actor or target) to sane sizes.
fn bound_value(v: &mut serde_json::Value, depth: usize) {
    use serde_json::Value;
    match v {
        Value::String(s) => cut(s),
        Value::Array(a) => {
            a.truncate(16);
            if depth > 2 {
                a.clear();
            }
            a.iter_mut().for_each(|x| bound_value(x, depth + 1));
        }
        Value::Object(o) => {
            if depth > 2 || o.len() > 16 {
                *v = Value::Null;
                return;
            }
            o.values_mut().for_each(|x| bound_value(x, depth + 1));
        }
        _ => {}
    }
}

/// The full line (with its trailing newline) and its hash, for record `seq` after `prev`.
pub fn build_line(seq: u64, at: &str, middle: &[u8], prev: &Hash) -> (Vec<u8>, Hash) {
    let mut line = Vec::with_capacity(middle.len() + 220);
    line.extend_from_slice(b"{\"seq\":");
    line.extend_from_slice(seq.to_string().as_bytes());
    line.extend_from_slice(b",\"at\":\"");
    line.extend_from_slice(at.as_bytes());
    line.extend_from_slice(b"\",");
    line.extend_from_slice(middle);
    line.extend_from_slice(b",\"prev\":\"");
    line.extend_from_slice(hex::encode(prev).as_bytes());
    line.extend_from_slice(b"\"}");
    let hash: Hash = Sha256::digest(&line).into();
    line.pop();
    line.extend_from_slice(b",\"hash\":\"");
    line.extend_from_slice(hex::encode(hash).as_bytes());
    line.extend_from_slice(b"\"}\n");
    (line, hash)
}

/// Length of `,"hash":"<64 hex>"}`.
const HASH_TAIL: usize = 9 + 64 + 2;

/// Why a stored line is not a valid record.
#[derive(Debug, Clone, PartialEq)]
pub enum LineFault {
    Malformed(String),
    HashMismatch,
}

/// Checks a stored line (without its newline): its `hash` is the hash of the rest, and it
/// parses as a record. Returns the record and its hash.
pub fn check_line(line: &[u8]) -> Result<(Record, Hash), LineFault> {
    if line.len() < HASH_TAIL + 2 || !line.ends_with(b"\"}") {
        return Err(LineFault::Malformed("not a record".into()));
    }
    let split = line.len() - HASH_TAIL;
    let tail = &line[split..];
    if !tail.starts_with(b",\"hash\":\"") {
        return Err(LineFault::Malformed("no hash at the end".into()));
    }
    let mut stated = [0u8; 32];
    hex::decode_to_slice(&tail[9..9 + 64], &mut stated)
        .map_err(|_| LineFault::Malformed("the hash is not hex".into()))?;
    let mut h = Sha256::new();
    h.update(&line[..split]);
    h.update(b"}");
    let actual: Hash = h.finalize().into();
    if actual != stated {
        return Err(LineFault::HashMismatch);
    }
    let rec: Record = serde_json::from_slice(line)
        .map_err(|e| LineFault::Malformed(format!("not a record: {e}")))?;
    if !line.starts_with(b"{\"seq\":") {
        return Err(LineFault::Malformed("fields out of order".into()));
    }
    Ok((rec, actual))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_roundtrip_and_canonical_order() {
        let e = Entry {
            actor: serde_json::json!({"key_id": "k1", "key_prefix": "sl_ab"}),
            tenant: Some("t".into()),
            action: "POST /v1/sandboxes".into(),
            target: serde_json::json!({"sandbox": "sb1"}),
            outcome: "ok".into(),
            status: Some(201),
            ..Default::default()
        };
        let (line, hash) = build_line(7, "2026-01-01T00:00:00.000000Z", &e.middle(), &[0; 32]);
        let text = std::str::from_utf8(&line).unwrap();
        let keys: Vec<&str> = [
            "seq",
            "at",
            "actor",
            "tenant",
            "action",
            "target",
            "outcome",
            "status",
            "decisions",
            "request_sha256",
            "response_sha256",
            "execution_id",
            "trace_id",
            "prev",
            "hash",
        ]
        .to_vec();
        let mut last = 0;
        for k in keys {
            let at = text
                .find(&format!("\"{k}\":"))
                .unwrap_or_else(|| panic!("{k}"));
            assert!(at >= last, "{k} out of order");
            last = at;
        }
        let (rec, h) = check_line(&line[..line.len() - 1]).unwrap();
        assert_eq!(h, hash);
        assert_eq!(rec.seq, 7);
        assert_eq!(rec.hash, hex::encode(hash));
        assert_eq!(rec.prev, hex::encode([0u8; 32]));
    }

    #[test]
    fn bounded_cuts_long_fields() {
        let e = Entry {
            action: "x".repeat(10_000),
            decisions: vec!["d".repeat(1000); 1000],
            target: serde_json::json!({"a": "é".repeat(5000)}),
            ..Default::default()
        }
        .bounded();
        assert!(e.middle().len() < 64 * 1024);
    }
}
