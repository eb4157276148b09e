//! Requests refused before anyone was authenticated, counted rather than recorded one by one.
//!
//! Anyone who can reach the server can send requests without a key; a record for each would
//! let them fill the disk, after which every tenant's actions are refused (nothing runs
//! unrecorded). So a refusal without a principal adds to a tally per source (the peer
//! address) and is written, once per interval, as one `requests.refused` record per source:
//! how many, the first and last time, how many per reason, a few of the routes. The table is
//! bounded too: past [`MAX_SOURCES`] sources in one interval, the rest share one `other`
//! tally, so a spray from many addresses grows neither the log nor memory. What a crash
//! loses is the current interval's counts; a clean stop writes them ([`Refusals::take`] at
//! shutdown).

use crate::{now_rfc3339, Entry};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};

/// The action of a tally's record.
pub const REFUSED_ACTION: &str = "requests.refused";
/// Sources tallied apart in one interval; the rest share [`OTHER`].
pub const MAX_SOURCES: usize = 1024;
/// The source of the shared tally.
pub const OTHER: &str = "other";
/// Reasons counted apart per source; the rest count as [`OTHER`].
pub const MAX_REASONS: usize = 8;
/// Routes kept per source, as samples.
pub const MAX_PATHS: usize = 4;

#[derive(Debug, Clone)]
struct Tally {
    count: u64,
    first: String,
    last: String,
    reasons: BTreeMap<String, u64>,
    paths: Vec<String>,
}

#[derive(Default)]
struct Table {
    since: Option<String>,
    sources: HashMap<String, Tally>,
}

/// The tallies of the current interval.
#[derive(Default)]
pub struct Refusals {
    table: Mutex<Table>,
}

impl Refusals {
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one refusal from `source` for `reason` (a stable code or a status) at `route`
    /// (a route template, e.g. `GET /v1/sandboxes/{id}`).
    pub fn count(&self, source: &str, reason: &str, route: &str) {
        let now = now_rfc3339();
        let mut t = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        t.since.get_or_insert_with(|| now.clone());
        let key = if t.sources.contains_key(source) || t.sources.len() < MAX_SOURCES {
            source
        } else {
            OTHER
        };
        let tally = t.sources.entry(cut(key, 64)).or_insert_with(|| Tally {
            count: 0,
            first: now.clone(),
            last: now.clone(),
            reasons: BTreeMap::new(),
            paths: Vec::new(),
        });
        tally.count += 1;
        tally.last = now;
        let reason = if tally.reasons.contains_key(reason) || tally.reasons.len() < MAX_REASONS {
            cut(reason, 64)
        } else {
            OTHER.to_owned()
        };
        *tally.reasons.entry(reason).or_default() += 1;
        if tally.paths.len() < MAX_PATHS && !tally.paths.iter().any(|p| p == route) {
            tally.paths.push(cut(route, 128));
        }
    }

    /// Ends the interval: one record per source (the shared tally last), and an empty table.
    pub fn take(&self) -> Vec<Entry> {
        let t = std::mem::take(&mut *self.table.lock().unwrap_or_else(PoisonError::into_inner));
        let mut sources: Vec<(String, Tally)> = t.sources.into_iter().collect();
        sources.sort_by(|a, b| (a.0 == OTHER, &a.1.first).cmp(&(b.0 == OTHER, &b.1.first)));
        let since = t.since.unwrap_or_default();
        sources
            .into_iter()
            .map(|(source, tally)| {
                let target = serde_json::json!({
                    "source": source,
                    "count": tally.count,
                    "first": tally.first,
                    "last": tally.last,
                    "reasons": tally.reasons,
                    "paths": tally.paths,
                    "interval_start": since,
                });
                Entry {
                    actor: "anonymous".into(),
                    tenant: None,
                    action: REFUSED_ACTION.into(),
                    target,
                    outcome: "refused".into(),
                    ..Default::default()
                }
            })
            .collect()
    }
}

fn cut(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_record_per_source_with_counts_reasons_and_samples() {
        let r = Refusals::new();
        for i in 0..10_000 {
            let reason = if i % 4 == 0 {
                "bad_request"
            } else {
                "unauthenticated"
            };
            r.count("10.0.0.1", reason, &format!("GET /v1/x{}", i % 10));
        }
        r.count("10.0.0.2", "unauthenticated", "POST /mcp");
        let entries = r.take();
        assert_eq!(entries.len(), 2);
        let a = &entries[0].target;
        assert_eq!(a["source"], "10.0.0.1");
        assert_eq!(a["count"], 10_000);
        assert_eq!(a["reasons"]["unauthenticated"], 7_500);
        assert_eq!(a["reasons"]["bad_request"], 2_500);
        assert_eq!(a["paths"].as_array().unwrap().len(), MAX_PATHS);
        assert_eq!(entries[1].target["count"], 1);
        assert_eq!(entries[0].action, REFUSED_ACTION);
        assert_eq!(entries[0].actor, "anonymous");
        // The interval ended: the table is empty.
        assert!(r.take().is_empty());
        // A record stays small and is not cut by the log's bounds.
        let e = entries[0].clone().bounded();
        assert_eq!(e.target["reasons"]["bad_request"], 2_500);
        assert!(e.middle().len() < 1024, "{}", e.middle().len());
    }

    #[test]
    fn many_sources_and_reasons_share_one_bounded_tally() {
        let r = Refusals::new();
        for i in 0..(MAX_SOURCES as u32 + 5000) {
            let ip = std::net::Ipv4Addr::from(0x0a00_0000 + i).to_string();
            r.count(&ip, &format!("reason{}", i % 20), "GET /v1/sandboxes");
        }
        for i in 0..20 {
            r.count("10.0.0.0", &format!("reason{i}"), "GET /v1/sandboxes");
        }
        let entries = r.take();
        assert_eq!(entries.len(), MAX_SOURCES + 1);
        let other = entries.last().unwrap();
        assert_eq!(other.target["source"], OTHER);
        assert_eq!(other.target["count"], 5000);
        let first = entries
            .iter()
            .find(|e| e.target["source"] == "10.0.0.0")
            .unwrap();
        assert_eq!(first.target["count"], 21);
        let reasons = first.target["reasons"].as_object().unwrap();
        assert_eq!(reasons.len(), MAX_REASONS + 1);
        assert_eq!(reasons[OTHER], 12);
        let total: u64 = entries
            .iter()
            .map(|e| e.target["count"].as_u64().unwrap())
            .sum();
        assert_eq!(total, MAX_SOURCES as u64 + 5000 + 20);
    }
}
