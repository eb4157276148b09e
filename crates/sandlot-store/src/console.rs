//! What the console keeps: every policy set that was put in force (its history, for the
//! Policy page's versions and diffs) and the console's sessions, so that a signed-in person
//! stays signed in across a server restart.
//!
//! A session row holds the sha256 of the session id, never the id itself (the cookie's value):
//! someone who reads the database cannot act as a signed-in person. It names the key by id;
//! the key is authenticated again at every use (a revoked key ends its sessions).

use crate::{Store, StoreError};
use rusqlite::{params, OptionalExtension, Row};
use serde::{Deserialize, Serialize};

/// Version 11: policy history and console sessions.
pub(crate) const SCHEMA_V11: &str = "
CREATE TABLE policy_versions (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    version    TEXT NOT NULL,
    text       TEXT NOT NULL,
    key_prefix TEXT NOT NULL,
    at         TEXT NOT NULL
);
CREATE INDEX policy_versions_version ON policy_versions (version);

CREATE TABLE console_sessions (
    id_sha256   TEXT PRIMARY KEY NOT NULL,
    key_id      TEXT NOT NULL,
    csrf        TEXT NOT NULL,
    created_ms  INTEGER NOT NULL,
    last_ms     INTEGER NOT NULL,
    expires_ms  INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX console_sessions_key ON console_sessions (key_id);
CREATE INDEX console_sessions_expires ON console_sessions (expires_ms);
";

/// One accepted policy set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyVersionRecord {
    /// 1, 2, ...: the order sets were put in force.
    pub seq: i64,
    /// The set's version (hash of its text and the schema).
    pub version: String,
    pub text: String,
    /// The prefix of the key that put it in force (`startup` for the set the server began with).
    pub key_prefix: String,
    pub at: String,
}

/// One console session as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    /// sha256 (hex) of the session id.
    pub id_sha256: String,
    /// The id of the key it signed in with.
    pub key_id: String,
    pub csrf: String,
    /// Unix milliseconds.
    pub created_ms: i64,
    pub last_ms: i64,
    /// Absolute end (created + the absolute limit).
    pub expires_ms: i64,
}

fn err<T>(op: &'static str, r: rusqlite::Result<T>) -> Result<T, StoreError> {
    r.map_err(|source| StoreError::Govern { op, source })
}

fn version_from_row(r: &Row<'_>) -> rusqlite::Result<PolicyVersionRecord> {
    Ok(PolicyVersionRecord {
        seq: r.get(0)?,
        version: r.get(1)?,
        text: r.get(2)?,
        key_prefix: r.get(3)?,
        at: r.get(4)?,
    })
}

fn session_from_row(r: &Row<'_>) -> rusqlite::Result<SessionRecord> {
    Ok(SessionRecord {
        id_sha256: r.get(0)?,
        key_id: r.get(1)?,
        csrf: r.get(2)?,
        created_ms: r.get(3)?,
        last_ms: r.get(4)?,
        expires_ms: r.get(5)?,
    })
}

const SESSION_COLUMNS: &str = "id_sha256, key_id, csrf, created_ms, last_ms, expires_ms";

impl Store {
    /// Records a set put in force, unless it is the newest recorded already (a restart with
    /// the same set, or the same text put again). Returns whether a row was added.
    pub fn record_policy_version(
        &self,
        version: &str,
        text: &str,
        key_prefix: &str,
        at: &str,
    ) -> Result<bool, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<bool> {
            let newest: Option<String> = conn
                .prepare_cached("SELECT version FROM policy_versions ORDER BY seq DESC LIMIT 1")?
                .query_row([], |r| r.get(0))
                .optional()?;
            if newest.as_deref() == Some(version) {
                return Ok(false);
            }
            conn.prepare_cached(
                "INSERT INTO policy_versions (version, text, key_prefix, at) \
                 VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![version, text, key_prefix, at])?;
            Ok(true)
        };
        err("record a policy version", run())
    }

    /// The recorded sets, newest first, at most `limit`, without their text (`text` empty).
    pub fn list_policy_versions(
        &self,
        limit: usize,
    ) -> Result<Vec<PolicyVersionRecord>, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<Vec<PolicyVersionRecord>> {
            let mut stmt = conn.prepare_cached(
                "SELECT seq, version, '', key_prefix, at FROM policy_versions \
                 ORDER BY seq DESC LIMIT ?1",
            )?;
            let rows = stmt.query_map([limit as i64], version_from_row)?;
            rows.collect()
        };
        err("list policy versions", run())
    }

    /// One recorded set by its version (the newest row of that version) or by its `seq`.
    pub fn get_policy_version(
        &self,
        version_or_seq: &str,
    ) -> Result<Option<PolicyVersionRecord>, StoreError> {
        let conn = self.conn();
        let seq: Option<i64> = version_or_seq.parse().ok();
        let run = || -> rusqlite::Result<Option<PolicyVersionRecord>> {
            conn.prepare_cached(
                "SELECT seq, version, text, key_prefix, at FROM policy_versions \
                 WHERE version = ?1 OR seq = ?2 ORDER BY (version = ?1) DESC, seq DESC LIMIT 1",
            )?
            .query_row(params![version_or_seq, seq], version_from_row)
            .optional()
        };
        err("look up a policy version", run())
    }

    /// Records a new console session.
    pub fn insert_console_session(&self, s: &SessionRecord) -> Result<(), StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<()> {
            conn.prepare_cached(&format!(
                "INSERT INTO console_sessions ({SESSION_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
            ))?
            .execute(params![
                s.id_sha256,
                s.key_id,
                s.csrf,
                s.created_ms,
                s.last_ms,
                s.expires_ms
            ])?;
            Ok(())
        };
        err("record a console session", run())
    }

    /// Every stored console session (loaded once at start; the table is bounded).
    pub fn list_console_sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<Vec<SessionRecord>> {
            let mut stmt =
                conn.prepare_cached(&format!("SELECT {SESSION_COLUMNS} FROM console_sessions"))?;
            let rows = stmt.query_map([], session_from_row)?;
            rows.collect()
        };
        err("list console sessions", run())
    }

    /// Marks a session used at `last_ms`.
    pub fn touch_console_session(&self, id_sha256: &str, last_ms: i64) -> Result<(), StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<()> {
            conn.prepare_cached("UPDATE console_sessions SET last_ms = ?2 WHERE id_sha256 = ?1")?
                .execute(params![id_sha256, last_ms])?;
            Ok(())
        };
        err("mark a console session used", run())
    }

    /// Ends sessions by the sha256 of their ids.
    pub fn delete_console_sessions(&self, ids_sha256: &[String]) -> Result<(), StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<()> {
            let mut stmt =
                conn.prepare_cached("DELETE FROM console_sessions WHERE id_sha256 = ?1")?;
            for id in ids_sha256 {
                stmt.execute([id])?;
            }
            Ok(())
        };
        err("end console sessions", run())
    }

    /// Sweeps the sessions past their absolute end or idle for `idle_ms` at `now_ms`;
    /// returns how many were removed.
    pub fn sweep_console_sessions(&self, now_ms: i64, idle_ms: i64) -> Result<usize, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<usize> {
            conn.prepare_cached(
                "DELETE FROM console_sessions WHERE expires_ms <= ?1 OR last_ms + ?2 <= ?1",
            )?
            .execute(params![now_ms, idle_ms])
        };
        err("sweep console sessions", run())
    }
}

#[cfg(test)]
mod tests {
    use crate::Store;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&dir.path().join("s.db")).unwrap();
        (dir, s)
    }

    #[test]
    fn policy_versions_keep_every_set_once_in_order() {
        let (_d, s) = store();
        assert!(s.record_policy_version("v1", "a", "startup", "t1").unwrap());
        assert!(!s.record_policy_version("v1", "a", "startup", "t2").unwrap());
        assert!(s.record_policy_version("v2", "b", "sl_x", "t3").unwrap());
        assert!(s.record_policy_version("v1", "a", "sl_x", "t4").unwrap());
        let list = s.list_policy_versions(10).unwrap();
        let seqs: Vec<_> = list.iter().map(|v| (v.seq, v.version.as_str())).collect();
        assert_eq!(seqs, [(3, "v1"), (2, "v2"), (1, "v1")]);
        assert!(list.iter().all(|v| v.text.is_empty()));
        let v = s.get_policy_version("v2").unwrap().unwrap();
        assert_eq!((v.text.as_str(), v.key_prefix.as_str()), ("b", "sl_x"));
        assert_eq!(s.get_policy_version("v1").unwrap().unwrap().seq, 3);
        assert_eq!(s.get_policy_version("2").unwrap().unwrap().version, "v2");
        assert!(s.get_policy_version("nope").unwrap().is_none());
        assert_eq!(s.list_policy_versions(1).unwrap().len(), 1);
    }

    #[test]
    fn console_sessions_are_stored_touched_and_swept() {
        let (_d, s) = store();
        let row = |id: &str, created: i64, expires: i64| super::SessionRecord {
            id_sha256: id.into(),
            key_id: "key_1".into(),
            csrf: "c".into(),
            created_ms: created,
            last_ms: created,
            expires_ms: expires,
        };
        s.insert_console_session(&row("a", 0, 1000)).unwrap();
        s.insert_console_session(&row("b", 0, 10_000)).unwrap();
        s.insert_console_session(&row("c", 0, 10_000)).unwrap();
        s.touch_console_session("c", 900).unwrap();
        // At 1000: a is past its end; b idle for 1000 ≥ 500; c used 100 ago.
        assert_eq!(s.sweep_console_sessions(1000, 500).unwrap(), 2);
        let left = s.list_console_sessions().unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!((left[0].id_sha256.as_str(), left[0].last_ms), ("c", 900));
        s.delete_console_sessions(&["c".into()]).unwrap();
        assert!(s.list_console_sessions().unwrap().is_empty());
    }
}

#[cfg(test)]
mod decision_filter_tests {
    use crate::{DecisionFilter, DecisionRecord, Store};

    #[test]
    fn decisions_filter_by_tenant_gate_outcome_and_policy() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&dir.path().join("s.db")).unwrap();
        let d =
            |id: &str, tenant: &str, gate: &str, allowed: bool, policies: &[&str]| DecisionRecord {
                id: id.into(),
                at: format!("2026-01-01T00:00:0{}Z", id.len()),
                gate: gate.into(),
                key_id: None,
                tenant: Some(tenant.into()),
                resource: "r".into(),
                allowed,
                policies: policies.iter().map(|p| p.to_string()).collect(),
                reason: String::new(),
                version: "v".into(),
                latency_us: 1.0,
                detail: None,
            };
        s.insert_decisions(&[
            d("a", "t1", "execute", true, &["allow-all"]),
            d("bb", "t1", "egress", false, &["no-egress", "x"]),
            d("ccc", "t2", "execute", false, &["no-egress"]),
        ])
        .unwrap();
        let ids = |f: DecisionFilter<'_>| -> Vec<String> {
            let f = DecisionFilter { limit: 10, ..f };
            s.list_decisions_filtered(&f)
                .unwrap()
                .into_iter()
                .map(|d| d.id)
                .collect()
        };
        assert_eq!(ids(DecisionFilter::default()), ["ccc", "bb", "a"]);
        let t1 = Some("t1");
        assert_eq!(
            ids(DecisionFilter {
                tenant: t1,
                ..Default::default()
            }),
            ["bb", "a"]
        );
        assert_eq!(
            ids(DecisionFilter {
                allowed: Some(false),
                ..Default::default()
            }),
            ["ccc", "bb"]
        );
        assert_eq!(
            ids(DecisionFilter {
                policy: Some("no-egress"),
                tenant: t1,
                ..Default::default()
            }),
            ["bb"]
        );
        assert_eq!(
            ids(DecisionFilter {
                gate: Some("execute"),
                allowed: Some(true),
                ..Default::default()
            }),
            ["a"]
        );
        assert!(ids(DecisionFilter {
            policy: Some("no-egres"),
            ..Default::default()
        })
        .is_empty());
    }
}
