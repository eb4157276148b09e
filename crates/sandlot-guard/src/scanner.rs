//! The scanner: one `RegexSet` keyword prefilter, per-rule capture regexes, value checks, canaries.
//!
//! Scanning order for one text:
//! 1. canaries: an Aho-Corasick automaton over every canary in every encoding we know of;
//! 2. prefilter: the provider rules' keyword literals as one `RegexSet`, one pass over the text,
//!    telling which of them can possibly match (most output trips none); the generic rules always
//!    run, their regexes' literal search over their keywords being their prefilter;
//! 3. each candidate rule runs its full regex; the capture is checked (entropy, placeholders);
//! 4. overlaps are resolved: canaries beat rules, earlier (more specific) rules beat later ones.
//!
//! Everything is linear in the input: the `regex` crate guarantees linear-time matching (no
//! backtracking), and each step is a bounded number of passes. Rules are compiled once per
//! process; a `Scanner` is a cheap handle (an `Arc` to its canaries), so one per sandbox is fine.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine as _;
use regex::bytes::{Regex, RegexBuilder, RegexSet, RegexSetBuilder};
use sha2::{Digest, Sha256};

use crate::entropy::{looks_random, shannon};
use crate::rules::{Check, Rule, RULES};
use crate::{Finding, GuardError, Kind};

/// Canaries shorter than this would match ordinary text.
pub const MIN_CANARY_LEN: usize = 8;

/// Compiled built-in rules, shared by every scanner in the process.
struct Compiled {
    prefilter: RegexSet,
    /// Rule index of each prefilter pattern.
    prefiltered: Vec<usize>,
    /// Rules without keywords, run on every text.
    always: Vec<usize>,
    rules: Vec<Regex>,
}

static COMPILED: LazyLock<Compiled> = LazyLock::new(|| {
    // The patterns are constants covered by the tests; failing to compile one is a bug in this
    // crate, not a runtime condition a caller could handle.
    let (with, without): (Vec<_>, Vec<_>) =
        (0..RULES.len()).partition(|&i| RULES[i].keywords.is_some());
    let prefilter = RegexSetBuilder::new(with.iter().filter_map(|&i| RULES[i].keywords))
        .unicode(false)
        .build()
        .expect("built-in keyword patterns compile");
    let rules = RULES
        .iter()
        .map(|r| {
            RegexBuilder::new(r.pattern)
                .unicode(false)
                .build()
                .unwrap_or_else(|e| panic!("built-in rule {} compiles: {e}", r.id))
        })
        .collect();
    Compiled {
        prefilter,
        prefiltered: with,
        always: without,
        rules,
    }
});

/// Every canary variant, one automaton.
struct Canaries {
    matcher: AhoCorasick,
    /// Rule name per pattern index (which encoding it is).
    rule_of: Vec<&'static str>,
    count: usize,
}

/// Finds secrets and canaries in text. `Scanner::default()` has the built-in rules and no
/// canaries; [`Scanner::with_canaries`] adds a sandbox's canaries.
#[derive(Clone, Default)]
pub struct Scanner {
    canaries: Option<Arc<Canaries>>,
}

impl std::fmt::Debug for Scanner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scanner")
            .field("rules", &RULES.len())
            .field("canaries", &self.canaries.as_ref().map_or(0, |c| c.count))
            .finish()
    }
}

/// Description of one built-in rule, for documentation and policy authors.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct RuleInfo {
    pub id: &'static str,
    pub description: &'static str,
}

impl Scanner {
    /// The built-in rules, in priority order.
    pub fn rules() -> Vec<RuleInfo> {
        RULES
            .iter()
            .map(|r| RuleInfo {
                id: r.id,
                description: r.description,
            })
            .collect()
    }

    /// This scanner plus `canaries` (replacing any it had). Each canary is also matched in its
    /// base64 (standard and URL-safe, at any alignment inside a longer encoded text),
    /// percent-encoded and hex forms.
    pub fn with_canaries<S: AsRef<str>>(&self, canaries: &[S]) -> Result<Scanner, GuardError> {
        if canaries.is_empty() {
            return Ok(Scanner { canaries: None });
        }
        let mut patterns: Vec<String> = Vec::new();
        let mut rule_of = Vec::new();
        for canary in canaries {
            let canary = canary.as_ref();
            if canary.len() < MIN_CANARY_LEN {
                return Err(GuardError::CanaryTooShort {
                    len: canary.len(),
                    min: MIN_CANARY_LEN,
                });
            }
            for (variant, rule) in canary_variants(canary) {
                if !patterns.contains(&variant) {
                    patterns.push(variant);
                    rule_of.push(rule);
                }
            }
        }
        let matcher = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&patterns)
            .map_err(|e| GuardError::Canaries(e.to_string()))?;
        Ok(Scanner {
            canaries: Some(Arc::new(Canaries {
                matcher,
                rule_of,
                count: canaries.len(),
            })),
        })
    }

    /// Findings in `text`, sorted by start, non-overlapping. Offsets are byte offsets into
    /// `text` and always fall on character boundaries.
    pub fn scan(&self, text: &str) -> Vec<Finding> {
        self.scan_bytes(text.as_bytes())
    }

    /// [`Scanner::scan`] for bytes that may not be UTF-8 (downloaded files, raw streams).
    pub fn scan_bytes(&self, hay: &[u8]) -> Vec<Finding> {
        let mut candidates = Vec::new();
        if let Some(canaries) = &self.canaries {
            for m in canaries.matcher.find_iter(hay) {
                candidates.push((
                    0,
                    finding(
                        canaries.rule_of[m.pattern().as_usize()],
                        Kind::Canary,
                        hay,
                        m.start(),
                        m.end(),
                    ),
                ));
            }
        }
        let compiled = &*COMPILED;
        let hits = compiled.prefilter.matches(hay);
        let candidates_rules = hits
            .iter()
            .map(|i| compiled.prefiltered[i])
            .chain(compiled.always.iter().copied());
        for index in candidates_rules {
            let rule = &RULES[index];
            for caps in compiled.rules[index].captures_iter(hay) {
                let Some(m) = caps.iter().skip(1).flatten().next() else {
                    continue;
                };
                // Multi-line values (PEM) may end on the line break that closed them.
                let value = m.as_bytes().trim_ascii_end();
                if accept(rule, value) {
                    let end = m.start() + value.len();
                    candidates.push((
                        index + 1,
                        finding(rule.id, Kind::Secret, hay, m.start(), end),
                    ));
                }
            }
        }
        resolve_overlaps(candidates)
    }

    /// Number of canaries this scanner watches for.
    pub fn canary_count(&self) -> usize {
        self.canaries.as_ref().map_or(0, |c| c.count)
    }
}

fn accept(rule: &Rule, value: &[u8]) -> bool {
    if rule
        .allow_suffixes
        .iter()
        .any(|s| value.ends_with(s.as_bytes()))
    {
        return false;
    }
    match rule.check {
        Check::Entropy(min) => shannon(value) >= min,
        Check::Generic { strict } => looks_random(value, strict),
        Check::MinLen(min) => value.len() >= min,
    }
}

fn finding(rule: &'static str, kind: Kind, hay: &[u8], start: usize, end: usize) -> Finding {
    Finding {
        rule,
        kind,
        start,
        end,
        sha256: hex::encode(Sha256::digest(&hay[start..end])),
    }
}

/// Keeps the best finding for each stretch of text: lower priority number wins (0 = canary,
/// then rule order), then the earlier start. Kept spans are disjoint, so checking the nearest
/// kept neighbours on each side is enough.
fn resolve_overlaps(mut candidates: Vec<(usize, Finding)>) -> Vec<Finding> {
    candidates.sort_by_key(|(priority, f)| (*priority, f.start, std::cmp::Reverse(f.end)));
    let mut kept: BTreeMap<usize, Finding> = BTreeMap::new();
    for (_, f) in candidates {
        let clashes_before = kept
            .range(..=f.start)
            .next_back()
            .is_some_and(|(_, k)| k.end > f.start);
        let clashes_after = kept
            .range(f.start..)
            .next()
            .is_some_and(|(&start, _)| start < f.end);
        if !clashes_before && !clashes_after {
            kept.insert(f.start, f);
        }
    }
    kept.into_values().collect()
}

/// The encodings a canary is matched in, with the rule name each one reports.
fn canary_variants(canary: &str) -> Vec<(String, &'static str)> {
    let mut out = vec![(canary.to_string(), "canary")];
    let bytes = canary.as_bytes();
    for engine in [
        &base64::engine::general_purpose::STANDARD,
        &base64::engine::general_purpose::URL_SAFE,
    ] {
        for shift in 0..3 {
            out.push((base64_core(engine, bytes, shift), "canary-base64"));
        }
    }
    let upper = percent_encode(bytes);
    if upper != canary {
        out.push((upper.to_ascii_lowercase_escapes(), "canary-urlencoded"));
        out.push((upper, "canary-urlencoded"));
    }
    out.push((hex::encode(bytes), "canary-hex"));
    out.push((hex::encode_upper(bytes), "canary-hex"));
    out
}

/// The base64 characters that encode only `canary`'s bits when it sits `shift` bytes (mod 3)
/// into a longer encoded text: the characters touching the neighbours' bits are dropped.
fn base64_core(engine: &base64::engine::GeneralPurpose, canary: &[u8], shift: usize) -> String {
    let mut padded = vec![0u8; shift];
    padded.extend_from_slice(canary);
    let encoded = engine.encode(&padded);
    let first = (8 * shift).div_ceil(6);
    let last = 8 * padded.len() / 6;
    encoded[first..last].to_string()
}

/// Percent-encodes every byte outside RFC 3986's unreserved set, upper-case hex.
fn percent_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 3);
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

trait LowercaseEscapes {
    fn to_ascii_lowercase_escapes(&self) -> String;
}

impl LowercaseEscapes for String {
    /// `%2F` becomes `%2f`; the canary's own characters keep their case.
    fn to_ascii_lowercase_escapes(&self) -> String {
        let mut out = String::with_capacity(self.len());
        let mut rest = self.as_str();
        while let Some(i) = rest.find('%') {
            out.push_str(&rest[..i]);
            let end = (i + 3).min(rest.len());
            out.push_str(&rest[i..end].to_ascii_lowercase());
            rest = &rest[end..];
        }
        out.push_str(rest);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_compiles() {
        assert_eq!(COMPILED.rules.len(), RULES.len());
        assert_eq!(
            COMPILED.prefilter.len() + COMPILED.always.len(),
            RULES.len()
        );
    }

    #[test]
    fn rule_ids_are_unique() {
        let mut ids: Vec<_> = RULES.iter().map(|r| r.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), RULES.len());
    }

    #[test]
    fn base64_cores_are_found_at_every_alignment() {
        let canary = b"AKIAABCDEFGHIJKLMNOP";
        for prefix in ["", "x", "xy", "xyz"] {
            let mut text = prefix.as_bytes().to_vec();
            text.extend_from_slice(canary);
            text.extend_from_slice(b"trailing");
            let encoded = base64::engine::general_purpose::STANDARD.encode(&text);
            let found = (0..3).any(|shift| {
                encoded.contains(&base64_core(
                    &base64::engine::general_purpose::STANDARD,
                    canary,
                    shift,
                ))
            });
            assert!(found, "prefix {prefix:?}");
        }
    }

    #[test]
    fn percent_encoding_variants() {
        assert_eq!(percent_encode(b"a/b+c"), "a%2Fb%2Bc");
        assert_eq!(
            "a%2Fb%2Bc".to_string().to_ascii_lowercase_escapes(),
            "a%2fb%2bc"
        );
    }
}
