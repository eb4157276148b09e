//! Reviews: actions a policy held for a person's approval (a `@review` permit), durable so
//! that a server restart (or `kill -9`) neither loses a held action nor runs one unapproved.
//!
//! A review moves `pending` → `approved` | `denied` once ([`Store::decide_review`] only
//! changes a pending row); an approved review is used at most once ([`Store::consume_review`]
//! only marks an approved, unused row), which is what makes the held action run exactly once
//! whichever caller (the one that waited, or one that re-submits with the review's id) gets
//! there first. A pending review past its `expires_unix` is denied by timeout
//! ([`Store::expire_reviews`]).

use crate::{Store, StoreError};
use rusqlite::{params, OptionalExtension, Row};
use serde::{Deserialize, Serialize};

/// Version 10: held actions.
pub(crate) const SCHEMA_V10: &str = "
CREATE TABLE reviews (
    id              TEXT PRIMARY KEY NOT NULL,
    tenant          TEXT NOT NULL,
    key_id          TEXT NOT NULL,
    gate            TEXT NOT NULL,
    resource        TEXT NOT NULL,
    fingerprint     TEXT NOT NULL,
    request         TEXT NOT NULL,
    reason          TEXT NOT NULL,
    policies        TEXT NOT NULL,
    decision_id     TEXT NOT NULL,
    state           TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    expires_at      TEXT NOT NULL,
    expires_unix    INTEGER NOT NULL,
    decided_by      TEXT,
    decided_at      TEXT,
    decision_reason TEXT,
    consumed_at     TEXT
);
CREATE INDEX reviews_pending ON reviews (expires_unix) WHERE state = 'pending';
CREATE INDEX reviews_tenant ON reviews (tenant, created_at);
CREATE INDEX reviews_fingerprint ON reviews (fingerprint);
";

/// One held action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewRecord {
    /// `rev_...`.
    pub id: String,
    /// The tenant whose action is held.
    pub tenant: String,
    /// The key that asked (`sandbox:<id>` for a sandbox's own egress).
    pub key_id: String,
    /// The gate that held it (`execute`, `egress`, `create_sandbox`, ...).
    pub gate: String,
    /// What it acts on (`Sandbox::"sb_..."`, `Domain::"x.test"`).
    pub resource: String,
    /// sha256 of exactly what is held (for an execution: the sandbox, the language and the
    /// code), so an approval only ever releases that action.
    pub fingerprint: String,
    /// A summary of the held request for the person deciding (JSON).
    pub request: serde_json::Value,
    /// Why it is held: the `@review` text of the holding permits.
    pub reason: String,
    /// The holding permits' ids.
    pub policies: Vec<String>,
    /// The decision (journal) that held it.
    pub decision_id: String,
    /// `pending` | `approved` | `denied`.
    pub state: String,
    pub created_at: String,
    /// A pending review is denied by timeout at this time.
    pub expires_at: String,
    #[serde(skip)]
    pub expires_unix: i64,
    /// The approving or denying key's id, or `timeout`.
    pub decided_by: Option<String>,
    pub decided_at: Option<String>,
    /// The reason the person (or the timeout) gave.
    pub decision_reason: Option<String>,
    /// When the approved action was released (it is released once).
    pub consumed_at: Option<String>,
}

const COLUMNS: &str = "id, tenant, key_id, gate, resource, fingerprint, request, reason, \
     policies, decision_id, state, created_at, expires_at, expires_unix, decided_by, \
     decided_at, decision_reason, consumed_at";

fn from_row(r: &Row<'_>) -> rusqlite::Result<ReviewRecord> {
    let request: String = r.get(6)?;
    let policies: String = r.get(8)?;
    Ok(ReviewRecord {
        id: r.get(0)?,
        tenant: r.get(1)?,
        key_id: r.get(2)?,
        gate: r.get(3)?,
        resource: r.get(4)?,
        fingerprint: r.get(5)?,
        request: serde_json::from_str(&request).unwrap_or(serde_json::Value::Null),
        reason: r.get(7)?,
        policies: serde_json::from_str(&policies).unwrap_or_default(),
        decision_id: r.get(9)?,
        state: r.get(10)?,
        created_at: r.get(11)?,
        expires_at: r.get(12)?,
        expires_unix: r.get(13)?,
        decided_by: r.get(14)?,
        decided_at: r.get(15)?,
        decision_reason: r.get(16)?,
        consumed_at: r.get(17)?,
    })
}

fn reviews<T>(op: &'static str, r: rusqlite::Result<T>) -> Result<T, StoreError> {
    r.map_err(|source| StoreError::Govern { op, source })
}

impl Store {
    /// Records a new held action (state `pending`), synchronously: the hold is durable
    /// before the caller hears about it.
    pub fn insert_review(&self, r: &ReviewRecord) -> Result<(), StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<()> {
            conn.prepare_cached(&format!(
                "INSERT INTO reviews ({COLUMNS}) VALUES \
                 (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)"
            ))?
            .execute(params![
                r.id,
                r.tenant,
                r.key_id,
                r.gate,
                r.resource,
                r.fingerprint,
                r.request.to_string(),
                r.reason,
                serde_json::to_string(&r.policies).expect("strings serialize"),
                r.decision_id,
                r.state,
                r.created_at,
                r.expires_at,
                r.expires_unix,
                r.decided_by,
                r.decided_at,
                r.decision_reason,
                r.consumed_at,
            ])?;
            Ok(())
        };
        reviews("record a held action", run())
    }

    pub fn get_review(&self, id: &str) -> Result<Option<ReviewRecord>, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<Option<ReviewRecord>> {
            conn.prepare_cached(&format!("SELECT {COLUMNS} FROM reviews WHERE id = ?1"))?
                .query_row([id], from_row)
                .optional()
        };
        reviews("look up a held action", run())
    }

    /// Reviews, newest first, at most `limit`, optionally of one tenant and one state.
    pub fn list_reviews(
        &self,
        tenant: Option<&str>,
        state: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ReviewRecord>, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<Vec<ReviewRecord>> {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM reviews WHERE (?1 IS NULL OR tenant = ?1) \
                 AND (?2 IS NULL OR state = ?2) ORDER BY created_at DESC, rowid DESC LIMIT ?3"
            ))?;
            let rows = stmt.query_map(params![tenant, state, limit as i64], from_row)?;
            rows.collect()
        };
        reviews("list held actions", run())
    }

    /// The newest review of `tenant` and `gate` holding exactly `fingerprint`, if any.
    pub fn review_by_fingerprint(
        &self,
        tenant: &str,
        gate: &str,
        fingerprint: &str,
    ) -> Result<Option<ReviewRecord>, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<Option<ReviewRecord>> {
            conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM reviews WHERE fingerprint = ?1 AND tenant = ?2 \
                 AND gate = ?3 ORDER BY created_at DESC, rowid DESC LIMIT 1"
            ))?
            .query_row(params![fingerprint, tenant, gate], from_row)
            .optional()
        };
        reviews("look up a held action", run())
    }

    /// The review an identical retry of a held action finds again (protocols whose clients
    /// cannot re-submit with a review's id: E2B, MCP): the newest of `tenant`, asked by
    /// `key_id`, at `gate`, holding exactly `fingerprint`, that is still pending or approved
    /// and not yet released. Denied and released ones are never found, so an action is
    /// released once and a denied one is asked for again.
    pub fn review_for_retry(
        &self,
        tenant: &str,
        key_id: &str,
        gate: &str,
        fingerprint: &str,
    ) -> Result<Option<ReviewRecord>, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<Option<ReviewRecord>> {
            conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM reviews WHERE fingerprint = ?1 AND tenant = ?2 \
                 AND key_id = ?3 AND gate = ?4 AND consumed_at IS NULL \
                 AND state IN ('pending', 'approved') \
                 ORDER BY created_at DESC, rowid DESC LIMIT 1"
            ))?
            .query_row(params![fingerprint, tenant, key_id, gate], from_row)
            .optional()
        };
        reviews("look up a held action", run())
    }

    /// Decides a pending review: `approved` or `denied` by `by`, at `at`, for `reason`. The
    /// decided row, or `None` when it was not pending (decided already, or no such review):
    /// a review is decided once.
    pub fn decide_review(
        &self,
        id: &str,
        approve: bool,
        by: &str,
        at: &str,
        reason: &str,
    ) -> Result<Option<ReviewRecord>, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<Option<ReviewRecord>> {
            conn.prepare_cached(&format!(
                "UPDATE reviews SET state = ?2, decided_by = ?3, decided_at = ?4, \
                 decision_reason = ?5 WHERE id = ?1 AND state = 'pending' RETURNING {COLUMNS}"
            ))?
            .query_row(
                params![
                    id,
                    if approve { "approved" } else { "denied" },
                    by,
                    at,
                    reason
                ],
                from_row,
            )
            .optional()
        };
        reviews("decide a held action", run())
    }

    /// Marks an approved review used: true for the one caller that releases the action, false
    /// for every other (not approved, or used already).
    pub fn consume_review(&self, id: &str, at: &str) -> Result<bool, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<bool> {
            let n = conn
                .prepare_cached(
                    "UPDATE reviews SET consumed_at = ?2 \
                     WHERE id = ?1 AND state = 'approved' AND consumed_at IS NULL",
                )?
                .execute(params![id, at])?;
            Ok(n == 1)
        };
        reviews("release a held action", run())
    }

    /// Denies by timeout every pending review whose time ran out by `now_unix`; the rows it
    /// denied.
    pub fn expire_reviews(&self, now_unix: i64, at: &str) -> Result<Vec<ReviewRecord>, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<Vec<ReviewRecord>> {
            let mut stmt = conn.prepare_cached(&format!(
                "UPDATE reviews SET state = 'denied', decided_by = 'timeout', decided_at = ?2, \
                 decision_reason = 'no one approved it in time' \
                 WHERE state = 'pending' AND expires_unix <= ?1 RETURNING {COLUMNS}"
            ))?;
            let rows = stmt.query_map(params![now_unix, at], from_row)?;
            rows.collect()
        };
        reviews("deny held actions that timed out", run())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(id: &str, expires_unix: i64) -> ReviewRecord {
        ReviewRecord {
            id: id.into(),
            tenant: "acme".into(),
            key_id: "key_1".into(),
            gate: "execute".into(),
            resource: "Sandbox::\"sb_1\"".into(),
            fingerprint: format!("fp-{id}"),
            request: serde_json::json!({"sandbox": "sb_1"}),
            reason: "big code".into(),
            policies: vec!["review-big".into()],
            decision_id: "dec_1".into(),
            state: "pending".into(),
            created_at: "2026-01-01T00:00:00Z".into(),
            expires_at: "2026-01-01T01:00:00Z".into(),
            expires_unix,
            decided_by: None,
            decided_at: None,
            decision_reason: None,
            consumed_at: None,
        }
    }

    /// A retry finds only its own key's, tenant's, gate's and fingerprint's review, pending
    /// or approved and unreleased; never a denied or released one.
    #[test]
    fn a_retry_finds_only_its_own_open_review() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("sandlot.db")).unwrap();
        let mut r = review("rev_r", 100);
        r.fingerprint = "fp".into();
        store.insert_review(&r).unwrap();
        let find = |tenant: &str, key: &str, gate: &str, fp: &str| {
            store
                .review_for_retry(tenant, key, gate, fp)
                .unwrap()
                .map(|r| r.id)
        };
        assert_eq!(
            find("acme", "key_1", "execute", "fp").as_deref(),
            Some("rev_r")
        );
        assert_eq!(find("acme", "key_2", "execute", "fp"), None, "another key");
        assert_eq!(
            find("beta", "key_1", "execute", "fp"),
            None,
            "another tenant"
        );
        assert_eq!(find("acme", "key_1", "egress", "fp"), None, "another gate");
        assert_eq!(
            find("acme", "key_1", "execute", "fp2"),
            None,
            "another action"
        );
        store
            .decide_review("rev_r", true, "key_admin", "t1", "ok")
            .unwrap()
            .unwrap();
        assert_eq!(
            find("acme", "key_1", "execute", "fp").as_deref(),
            Some("rev_r")
        );
        assert!(store.consume_review("rev_r", "t2").unwrap());
        assert_eq!(find("acme", "key_1", "execute", "fp"), None, "released");
        let mut d = review("rev_d", 100);
        d.fingerprint = "fp".into();
        store.insert_review(&d).unwrap();
        store
            .decide_review("rev_d", false, "key_admin", "t3", "no")
            .unwrap()
            .unwrap();
        assert_eq!(find("acme", "key_1", "execute", "fp"), None, "denied");
    }

    /// Decided once, consumed once, expired only while pending, and all of it on disk.
    #[test]
    fn a_review_is_decided_once_and_released_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sandlot.db");
        let store = Store::open(&path).unwrap();
        store.insert_review(&review("rev_a", 100)).unwrap();
        store.insert_review(&review("rev_b", 100)).unwrap();
        store.insert_review(&review("rev_c", 10)).unwrap();

        // Not approved yet: nothing to release.
        assert!(!store.consume_review("rev_a", "t").unwrap());
        let a = store
            .decide_review("rev_a", true, "key_admin", "t1", "looks fine")
            .unwrap()
            .unwrap();
        assert_eq!(a.state, "approved");
        assert_eq!(a.decided_by.as_deref(), Some("key_admin"));
        // A second decision changes nothing.
        assert!(store
            .decide_review("rev_a", false, "key_x", "t2", "no")
            .unwrap()
            .is_none());
        assert!(store.consume_review("rev_a", "t3").unwrap());
        assert!(!store.consume_review("rev_a", "t4").unwrap());

        // Timeout denies the pending one past its time only.
        let expired = store.expire_reviews(50, "t5").unwrap();
        assert_eq!(expired.len(), 1);
        assert_eq!(expired[0].id, "rev_c");
        assert_eq!(expired[0].decided_by.as_deref(), Some("timeout"));
        assert!(!store.consume_review("rev_c", "t6").unwrap());

        drop(store);
        let store = Store::open(&path).unwrap();
        let b = store.get_review("rev_b").unwrap().unwrap();
        assert_eq!(b.state, "pending");
        assert_eq!(b.request["sandbox"], "sb_1");
        let a = store.get_review("rev_a").unwrap().unwrap();
        assert_eq!(a.consumed_at.as_deref(), Some("t3"));
        assert_eq!(store.list_reviews(Some("acme"), None, 10).unwrap().len(), 3);
        assert_eq!(
            store
                .list_reviews(Some("acme"), Some("pending"), 10)
                .unwrap()
                .len(),
            1
        );
        assert!(store
            .list_reviews(Some("other"), None, 10)
            .unwrap()
            .is_empty());
        assert_eq!(
            store
                .review_by_fingerprint("acme", "execute", "fp-rev_b")
                .unwrap()
                .unwrap()
                .id,
            "rev_b"
        );
        assert!(store.get_review("rev_zzz").unwrap().is_none());
    }
}
