//! sandlot-guard: output guardrails.
//!
//! Finds secrets and canary credentials in what a sandbox emits (stdout, stderr, results,
//! downloaded files) so the server can pass, redact, withhold or contain per policy.
//!
//! - [`Scanner`]: built-in rules in the style of gitleaks and detect-secrets (keywords as a
//!   `RegexSet` prefilter, provider regexes, entropy checks for generic rules), plus exact-string
//!   canaries in plain, base64, percent- and hex-encoded forms. Linear time.
//! - [`Finding`]: which rule, where, and the sha256 of the matched value. It never holds the value,
//!   so no `Debug`, `Display` or `Serialize` of a finding can leak one.
//! - [`redact`]: replaces each finding with `[REDACTED:<rule>]`.
//! - [`Canary`]: a fresh fake AWS key pair per sandbox, with its env vars and credentials file.
//! - [`StreamScanner`]: chunked output; holds back the unfinished tail so a secret split across
//!   writes is found before any of it is released.

mod canary;
mod entropy;
mod error;
mod rules;
mod scanner;
mod stream;

pub use canary::Canary;
pub use error::GuardError;
pub use scanner::{RuleInfo, Scanner, MIN_CANARY_LEN};
pub use stream::{Released, StreamScanner, CONTEXT, HARD_CAP, PEM_HOLD, WINDOW};

/// What kind of thing was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A credential matched by a rule.
    Secret,
    /// This sandbox's canary (or an encoding of it): exfiltration.
    Canary,
}

impl Kind {
    /// `"secret"` or `"canary"`, as used in policy contexts and records.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Secret => "secret",
            Kind::Canary => "canary",
        }
    }
}

/// One match. Holds no part of the matched value: only its location and its sha256, so it can be
/// logged, recorded and serialized freely.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Finding {
    /// Rule id (see [`Scanner::rules`]) or `canary`, `canary-base64`, `canary-urlencoded`,
    /// `canary-hex`.
    pub rule: &'static str,
    pub kind: Kind,
    /// Byte offsets of the value, `start..end`: into the scanned text, or into the whole stream
    /// for findings from a [`StreamScanner`].
    pub start: usize,
    pub end: usize,
    /// Lowercase hex sha256 of the matched value.
    pub sha256: String,
}

/// `text` with every finding replaced by `[REDACTED:<rule>]`. Overlapping findings merge into one
/// marker (the first one's rule). Offsets off a character boundary widen to the enclosing
/// characters, and offsets past the end are clipped, so this never panics and never redacts less
/// than asked.
pub fn redact(text: &str, findings: &[Finding]) -> String {
    let spans = merged_spans(findings, text.len(), |i| text.is_char_boundary(i));
    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    for (start, end, rule) in spans {
        out.push_str(&text[pos..start]);
        push_marker(&mut out, rule);
        pos = end;
    }
    out.push_str(&text[pos..]);
    out
}

/// [`redact`] for bytes that may not be UTF-8.
pub fn redact_bytes(bytes: &[u8], findings: &[Finding]) -> Vec<u8> {
    let spans = merged_spans(findings, bytes.len(), |_| true);
    let mut out = Vec::with_capacity(bytes.len());
    let mut pos = 0;
    for (start, end, rule) in spans {
        out.extend_from_slice(&bytes[pos..start]);
        let mut marker = String::new();
        push_marker(&mut marker, rule);
        out.extend_from_slice(marker.as_bytes());
        pos = end;
    }
    out.extend_from_slice(&bytes[pos..]);
    out
}

fn push_marker(out: &mut String, rule: &str) {
    out.push_str("[REDACTED:");
    out.push_str(rule);
    out.push(']');
}

/// Findings as sorted, disjoint `(start, end, rule)` spans within `0..len`, widened to
/// boundaries.
fn merged_spans(
    findings: &[Finding],
    len: usize,
    is_boundary: impl Fn(usize) -> bool,
) -> Vec<(usize, usize, &'static str)> {
    let mut sorted: Vec<&Finding> = findings.iter().filter(|f| f.start < len).collect();
    sorted.sort_by_key(|f| (f.start, f.kind != Kind::Canary));
    let mut spans: Vec<(usize, usize, &'static str)> = Vec::with_capacity(sorted.len());
    for f in sorted {
        let mut start = f.start;
        while !is_boundary(start) {
            start -= 1;
        }
        let mut end = f.end.min(len).max(start);
        while !is_boundary(end) {
            end += 1;
        }
        if start >= end {
            continue;
        }
        match spans.last_mut() {
            Some(last) if start < last.1 => last.1 = last.1.max(end),
            _ => spans.push((start, end, f.rule)),
        }
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(rule: &'static str, start: usize, end: usize) -> Finding {
        Finding {
            rule,
            kind: Kind::Secret,
            start,
            end,
            sha256: String::new(),
        }
    }

    #[test]
    fn redact_replaces_and_merges() {
        let text = "a SECRET b OTHER c";
        let out = redact(text, &[f("x", 2, 8), f("y", 11, 16)]);
        assert_eq!(out, "a [REDACTED:x] b [REDACTED:y] c");
        let out = redact(text, &[f("x", 2, 12), f("y", 11, 16)]);
        assert_eq!(out, "a [REDACTED:x] c");
    }

    #[test]
    fn redact_widens_to_char_boundaries_and_clips() {
        let text = "é secret ü";
        // Offset 1 is inside 'é': widened to 0.
        assert_eq!(redact(text, &[f("x", 1, 9)]), "[REDACTED:x] ü");
        assert_eq!(redact(text, &[f("x", 3, 1000)]), "é [REDACTED:x]");
        assert_eq!(redact(text, &[f("x", 1000, 2000)]), text);
    }

    #[test]
    fn finding_serializes_without_value() {
        let finding = f("github-token", 3, 7);
        let json = serde_json::to_value(&finding).unwrap();
        assert_eq!(json["rule"], "github-token");
        assert_eq!(json["kind"], "secret");
        assert_eq!(json["start"], 3);
    }
}
