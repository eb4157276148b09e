//! Durable jobs and webhooks (schema version 6).
//!
//! A job is an execution queued for later: it is written here, committed, before its
//! submission is acknowledged, so a crash after the `202` cannot lose it. Its lifecycle is
//! `queued → running → succeeded | failed | cancelled`, or `lost` when the server stopped while
//! it ran (see [`Store::recover_jobs`]); a job declared idempotent is queued again instead
//! (its `attempt` counts the runs).
//!
//! Jobs and webhooks cross this boundary as JSON objects in their wire shape (the fields of
//! the API's `Job` and `Webhook`, which `sandlot-record` owns): every field that is queried is
//! a real column, nested values (`request`, `metadata`, `result`, `events`) are JSON text.
//!
//! A webhook's signing secret is not stored at all: the server derives it from a key of its
//! own kept in the data dir (see `sandlot-record`'s `webhooks.rs`), so a copy of this
//! database (a backup, a bundle) never carries secrets that would let its reader forge
//! deliveries.

use crate::{Store, StoreError};
use rusqlite::{params, OptionalExtension, Row, TransactionBehavior};
use serde_json::{json, Map, Value};

/// Version 6: jobs and webhooks.
pub(crate) const SCHEMA_V6: &str = "
CREATE TABLE jobs (
    id           TEXT PRIMARY KEY NOT NULL,
    sandbox_id   TEXT NOT NULL,
    tenant       TEXT NOT NULL,
    key_id       TEXT,
    state        TEXT NOT NULL,
    request      TEXT NOT NULL,
    metadata     TEXT NOT NULL,
    idempotent   INTEGER NOT NULL,
    submitted_at TEXT NOT NULL,
    started_at   TEXT,
    ended_at     TEXT,
    execution_id TEXT,
    result       TEXT,
    reason       TEXT,
    attempt      INTEGER NOT NULL DEFAULT 1,
    position     INTEGER NOT NULL UNIQUE
);
CREATE INDEX jobs_sandbox ON jobs (sandbox_id, position);
CREATE INDEX jobs_open ON jobs (state, position) WHERE state IN ('queued', 'running');

CREATE TABLE webhooks (
    id         TEXT PRIMARY KEY NOT NULL,
    tenant     TEXT NOT NULL,
    url        TEXT NOT NULL,
    events     TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX webhooks_tenant ON webhooks (tenant, created_at);
";

/// The states a job may still leave.
/// Jobs not ended: waiting, running, or held for a person's review (issue 23).
const OPEN: &str = "('queued', 'running', 'held')";

const JOB_COLUMNS: &str = "id, sandbox_id, tenant, key_id, state, request, metadata, idempotent, \
     submitted_at, started_at, ended_at, execution_id, result, reason, attempt, position";

fn jobs<T>(op: &'static str, r: rusqlite::Result<T>) -> Result<T, StoreError> {
    r.map_err(|source| StoreError::Govern { op, source })
}

/// A JSON column, as a value (`Null` when SQL NULL).
fn json_col(row: &Row<'_>, i: usize) -> rusqlite::Result<Value> {
    let text: Option<String> = row.get(i)?;
    match text {
        None => Ok(Value::Null),
        Some(t) => serde_json::from_str(&t).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e))
        }),
    }
}

fn job_from_row(row: &Row<'_>) -> rusqlite::Result<Value> {
    let opt = |i: usize| -> rusqlite::Result<Value> {
        Ok(row
            .get::<_, Option<String>>(i)?
            .map_or(Value::Null, Value::String))
    };
    Ok(json!({
        "id": row.get::<_, String>(0)?,
        "sandbox_id": row.get::<_, String>(1)?,
        "tenant": row.get::<_, String>(2)?,
        "key_id": opt(3)?,
        "state": row.get::<_, String>(4)?,
        "request": json_col(row, 5)?,
        "metadata": json_col(row, 6)?,
        "idempotent": row.get::<_, bool>(7)?,
        "submitted_at": row.get::<_, String>(8)?,
        "started_at": opt(9)?,
        "ended_at": opt(10)?,
        "execution_id": opt(11)?,
        "result": json_col(row, 12)?,
        "reason": opt(13)?,
        "attempt": row.get::<_, i64>(14)?,
        "position": row.get::<_, i64>(15)?,
    }))
}

fn field<'a>(v: &'a Map<String, Value>, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

/// A value that must be there, or the conversion error SQLite reports for a bad column.
fn required<'a>(v: &'a Map<String, Value>, k: &'static str) -> rusqlite::Result<&'a str> {
    field(v, k).ok_or_else(|| {
        rusqlite::Error::ToSqlConversionFailure(format!("the job has no {k}").into())
    })
}

impl Store {
    /// Records a new job, committed before this returns: `job` is a JSON object with at least
    /// `id`, `sandbox_id`, `tenant`, `state`, `request`, `submitted_at` (and optionally
    /// `key_id`, `metadata`, `idempotent`). Returns its position: the order in which jobs were
    /// submitted, the order they run in on one sandbox.
    pub fn insert_job(&self, job: &Value) -> Result<i64, StoreError> {
        let mut conn = self.conn();
        let mut run = || -> rusqlite::Result<i64> {
            let empty = Map::new();
            let j = job.as_object().unwrap_or(&empty);
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let position: i64 =
                tx.query_row("SELECT COALESCE(MAX(position), 0) + 1 FROM jobs", [], |r| {
                    r.get(0)
                })?;
            tx.execute(
                &format!(
                    "INSERT INTO jobs ({JOB_COLUMNS}) VALUES \
                     (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, NULL, NULL, NULL, NULL, NULL, 1, ?10)"
                ),
                params![
                    required(j, "id")?,
                    required(j, "sandbox_id")?,
                    required(j, "tenant")?,
                    field(j, "key_id"),
                    required(j, "state")?,
                    j.get("request").unwrap_or(&Value::Null).to_string(),
                    j.get("metadata").unwrap_or(&json!({})).to_string(),
                    j.get("idempotent")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                    required(j, "submitted_at")?,
                    position,
                ],
            )?;
            tx.commit()?;
            Ok(position)
        };
        jobs("record a job", run())
    }

    /// A job, if it exists.
    pub fn get_job(&self, id: &str) -> Result<Option<Value>, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<Option<Value>> {
            conn.prepare_cached(&format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?1"))?
                .query_row([id], job_from_row)
                .optional()
        };
        jobs("read a job", run())
    }

    /// The jobs of a sandbox in submission order, optionally only those in `state`; at most
    /// `limit`, after position `after`.
    pub fn list_jobs(
        &self,
        sandbox_id: &str,
        state: Option<&str>,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Value>, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<Vec<Value>> {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {JOB_COLUMNS} FROM jobs WHERE sandbox_id = ?1 \
                 AND (?2 IS NULL OR state = ?2) AND position > ?3 ORDER BY position LIMIT ?4"
            ))?;
            let rows = stmt.query_map(params![sandbox_id, state, after, limit], job_from_row)?;
            rows.collect()
        };
        jobs("list jobs", run())
    }

    /// Every job still `queued` or `running`, in submission order.
    pub fn open_jobs(&self) -> Result<Vec<Value>, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<Vec<Value>> {
            let mut stmt = conn.prepare(&format!(
                "SELECT {JOB_COLUMNS} FROM jobs WHERE state IN {OPEN} ORDER BY position"
            ))?;
            let rows = stmt.query_map([], job_from_row)?;
            rows.collect()
        };
        jobs("list open jobs", run())
    }

    /// `queued` or `running` → `held` (for a person's review; `reason` names it); false when
    /// the job had ended meanwhile.
    pub fn hold_job(&self, id: &str, reason: &str) -> Result<bool, StoreError> {
        let conn = self.conn();
        let n = conn.execute(
            "UPDATE jobs SET state = 'held', started_at = NULL, reason = ?2 \
             WHERE id = ?1 AND state IN ('queued', 'running')",
            params![id, reason],
        );
        jobs("hold a job", n).map(|n| n == 1)
    }

    /// `held` → `queued` (its review approved); false when it was not held (cancelled).
    pub fn release_held_job(&self, id: &str) -> Result<bool, StoreError> {
        let conn = self.conn();
        let n = conn.execute(
            "UPDATE jobs SET state = 'queued', reason = NULL WHERE id = ?1 AND state = 'held'",
            params![id],
        );
        jobs("release a held job", n).map(|n| n == 1)
    }

    /// `queued` → `running` at `at`; false when the job was not queued (cancelled meanwhile).
    pub fn start_job(&self, id: &str, at: &str) -> Result<bool, StoreError> {
        let conn = self.conn();
        let n = conn.execute(
            "UPDATE jobs SET state = 'running', started_at = ?2 WHERE id = ?1 AND state = 'queued'",
            params![id, at],
        );
        jobs("start a job", n).map(|n| n == 1)
    }

    /// Ends a job that is still `queued` or `running`: `state` with what it ran and why. False
    /// when it had already ended (an end is recorded once).
    pub fn end_job(
        &self,
        id: &str,
        state: &str,
        at: &str,
        execution_id: Option<&str>,
        result: Option<&Value>,
        reason: Option<&str>,
    ) -> Result<bool, StoreError> {
        let conn = self.conn();
        let n = conn.execute(
            &format!(
                "UPDATE jobs SET state = ?2, ended_at = ?3, execution_id = ?4, result = ?5, \
                 reason = ?6 WHERE id = ?1 AND state IN {OPEN}"
            ),
            params![
                id,
                state,
                at,
                execution_id,
                result.map(Value::to_string),
                reason
            ],
        );
        jobs("end a job", n).map(|n| n == 1)
    }

    /// Restart recovery (one transaction): every job still `running` ran when the server
    /// stopped. An idempotent one is `queued` again (`attempt` + 1, `reason` says why); any
    /// other becomes `lost` with `reason`, never silently run twice. With `only`, just that
    /// job. Returns (lost, requeued) counts.
    pub fn recover_jobs(
        &self,
        reason: &str,
        at: &str,
        only: Option<&str>,
    ) -> Result<(usize, usize), StoreError> {
        let mut conn = self.conn();
        let mut run = || -> rusqlite::Result<(usize, usize)> {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let requeued = tx.execute(
                "UPDATE jobs SET state = 'queued', attempt = attempt + 1, started_at = NULL, \
                 reason = ?1 WHERE state = 'running' AND idempotent = 1 \
                 AND (?2 IS NULL OR id = ?2)",
                params![format!("{reason}; queued again (idempotent)"), only],
            )?;
            let lost = tx.execute(
                "UPDATE jobs SET state = 'lost', ended_at = ?2, reason = ?1 \
                 WHERE state = 'running' AND idempotent = 0 AND (?3 IS NULL OR id = ?3)",
                params![reason, at, only],
            )?;
            tx.commit()?;
            Ok((lost, requeued))
        };
        jobs("recover jobs", run())
    }

    /// How many jobs are in each state (for the operator and tests).
    pub fn count_jobs(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<Vec<(String, u64)>> {
            let mut stmt =
                conn.prepare("SELECT state, COUNT(*) FROM jobs GROUP BY state ORDER BY state")?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect()
        };
        jobs("count jobs", run())
    }

    /// Records a webhook: `id`, `tenant`, `url`, `events` (a list of kinds; empty: all),
    /// `created_at`.
    pub fn insert_webhook(&self, hook: &Value) -> Result<(), StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<usize> {
            let empty = Map::new();
            let h = hook.as_object().unwrap_or(&empty);
            conn.execute(
                "INSERT INTO webhooks (id, tenant, url, events, created_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    required(h, "id")?,
                    required(h, "tenant")?,
                    required(h, "url")?,
                    h.get("events").unwrap_or(&json!([])).to_string(),
                    required(h, "created_at")?,
                ],
            )
        };
        jobs("record a webhook", run()).map(|_| ())
    }

    /// The webhooks of `tenant` (every tenant's with `None`), oldest first.
    pub fn list_webhooks(&self, tenant: Option<&str>) -> Result<Vec<Value>, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<Vec<Value>> {
            let mut stmt = conn.prepare_cached(
                "SELECT id, tenant, url, events, created_at FROM webhooks \
                 WHERE ?1 IS NULL OR tenant = ?1 ORDER BY created_at, rowid",
            )?;
            let rows = stmt.query_map([tenant], |r| {
                Ok(json!({
                    "id": r.get::<_, String>(0)?,
                    "tenant": r.get::<_, String>(1)?,
                    "url": r.get::<_, String>(2)?,
                    "events": json_col(r, 3)?,
                    "created_at": r.get::<_, String>(4)?,
                }))
            })?;
            rows.collect()
        };
        jobs("list webhooks", run())
    }

    /// Deletes `tenant`'s webhook `id`; false when it has none by that id.
    pub fn delete_webhook(&self, id: &str, tenant: &str) -> Result<bool, StoreError> {
        let conn = self.conn();
        let n = conn.execute(
            "DELETE FROM webhooks WHERE id = ?1 AND tenant = ?2",
            params![id, tenant],
        );
        jobs("delete a webhook", n).map(|n| n == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: &str, sandbox: &str, idempotent: bool) -> Value {
        json!({
            "id": id, "sandbox_id": sandbox, "tenant": "t1", "key_id": "key_1",
            "state": "queued", "request": {"code": "1+1", "language": "python"},
            "metadata": {"k": "v"}, "idempotent": idempotent,
            "submitted_at": "2026-01-01T00:00:00.000000Z",
        })
    }

    #[test]
    fn a_job_is_recorded_and_read_back_in_its_wire_shape() {
        let s = Store::open_in_memory().unwrap();
        assert_eq!(s.insert_job(&job("job_a", "sb_1", false)).unwrap(), 1);
        assert_eq!(s.insert_job(&job("job_b", "sb_1", false)).unwrap(), 2);
        let a = s.get_job("job_a").unwrap().unwrap();
        assert_eq!(a["state"], "queued");
        assert_eq!(a["request"]["code"], "1+1");
        assert_eq!(a["metadata"]["k"], "v");
        assert_eq!(a["key_id"], "key_1");
        assert_eq!(a["attempt"], 1);
        assert_eq!(a["result"], Value::Null);
        assert!(s.get_job("job_zzz").unwrap().is_none());
        // The same id twice is refused.
        assert!(s.insert_job(&job("job_a", "sb_1", false)).is_err());
        // A job missing a required field is refused, not stored half.
        assert!(s.insert_job(&json!({"id": "job_c"})).is_err());
        assert!(s.get_job("job_c").unwrap().is_none());
    }

    #[test]
    fn a_job_runs_once_and_ends_once() {
        let s = Store::open_in_memory().unwrap();
        s.insert_job(&job("job_a", "sb_1", false)).unwrap();
        assert!(s.start_job("job_a", "t1").unwrap());
        assert!(!s.start_job("job_a", "t2").unwrap(), "started twice");
        let result = json!({"id": "ex_1", "end_state": "ok"});
        assert!(s
            .end_job(
                "job_a",
                "succeeded",
                "t3",
                Some("ex_1"),
                Some(&result),
                None
            )
            .unwrap());
        assert!(!s
            .end_job("job_a", "cancelled", "t4", None, None, Some("late"))
            .unwrap());
        let a = s.get_job("job_a").unwrap().unwrap();
        assert_eq!(a["state"], "succeeded");
        assert_eq!(a["execution_id"], "ex_1");
        assert_eq!(a["result"]["end_state"], "ok");
        assert_eq!(a["ended_at"], "t3");
        // A queued job cancelled never starts.
        s.insert_job(&job("job_b", "sb_1", false)).unwrap();
        assert!(s
            .end_job("job_b", "cancelled", "t5", None, None, Some("cancelled"))
            .unwrap());
        assert!(!s.start_job("job_b", "t6").unwrap());
    }

    #[test]
    fn recovery_loses_running_jobs_and_requeues_idempotent_ones() {
        let s = Store::open_in_memory().unwrap();
        for (id, idem) in [("job_a", false), ("job_b", true), ("job_c", false)] {
            s.insert_job(&job(id, "sb_1", idem)).unwrap();
        }
        s.start_job("job_a", "t").unwrap();
        s.start_job("job_b", "t").unwrap();
        let (lost, requeued) = s.recover_jobs("the server stopped", "t9", None).unwrap();
        assert_eq!((lost, requeued), (1, 1));
        let a = s.get_job("job_a").unwrap().unwrap();
        assert_eq!(
            (a["state"].as_str(), a["reason"].as_str()),
            (Some("lost"), Some("the server stopped"))
        );
        let b = s.get_job("job_b").unwrap().unwrap();
        assert_eq!(b["state"], "queued");
        assert_eq!(b["attempt"], 2);
        assert_eq!(b["started_at"], Value::Null);
        let c = s.get_job("job_c").unwrap().unwrap();
        assert_eq!(c["state"], "queued");
        assert_eq!(c["attempt"], 1);
        // Open jobs come back in submission order.
        let open: Vec<String> = s
            .open_jobs()
            .unwrap()
            .iter()
            .map(|j| j["id"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(open, ["job_b", "job_c"]);
        let counts = s.count_jobs().unwrap();
        assert_eq!(counts, [("lost".to_owned(), 1), ("queued".to_owned(), 2)]);
    }

    #[test]
    fn lists_are_per_sandbox_in_order_and_filtered() {
        let s = Store::open_in_memory().unwrap();
        for i in 0..5 {
            s.insert_job(&job(
                &format!("job_{i}"),
                if i % 2 == 0 { "sb_1" } else { "sb_2" },
                false,
            ))
            .unwrap();
        }
        s.start_job("job_2", "t").unwrap();
        let ids = |v: Vec<Value>| -> Vec<String> {
            v.iter()
                .map(|j| j["id"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(
            ids(s.list_jobs("sb_1", None, 0, 100).unwrap()),
            ["job_0", "job_2", "job_4"]
        );
        assert_eq!(
            ids(s.list_jobs("sb_1", Some("running"), 0, 100).unwrap()),
            ["job_2"]
        );
        assert_eq!(ids(s.list_jobs("sb_1", None, 1, 1).unwrap()), ["job_2"]);
        assert!(s.list_jobs("sb_9", None, 0, 100).unwrap().is_empty());
    }

    #[test]
    fn webhooks_belong_to_their_tenant() {
        let s = Store::open_in_memory().unwrap();
        let hook = |id: &str, tenant: &str| {
            json!({"id": id, "tenant": tenant, "url": "https://example.test/h",
                   "events": ["executed"], "created_at": "2026-01-01T00:00:00Z"})
        };
        s.insert_webhook(&hook("wh_1", "t1")).unwrap();
        s.insert_webhook(&hook("wh_2", "t2")).unwrap();
        assert_eq!(s.list_webhooks(Some("t1")).unwrap().len(), 1);
        assert_eq!(s.list_webhooks(None).unwrap().len(), 2);
        assert_eq!(
            s.list_webhooks(Some("t1")).unwrap()[0]["events"][0],
            "executed"
        );
        assert!(!s.delete_webhook("wh_1", "t2").unwrap(), "another tenant's");
        assert!(s.delete_webhook("wh_1", "t1").unwrap());
        assert!(!s.delete_webhook("wh_1", "t1").unwrap());
        assert!(s.list_webhooks(Some("t1")).unwrap().is_empty());
    }

    #[test]
    fn the_migration_applies_to_a_file_and_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        {
            let s = Store::open(&path).unwrap();
            s.insert_job(&job("job_a", "sb_1", false)).unwrap();
        }
        let s = Store::open(&path).unwrap();
        assert_eq!(s.get_job("job_a").unwrap().unwrap()["state"], "queued");
    }
}
