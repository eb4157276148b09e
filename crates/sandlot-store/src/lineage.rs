//! Lineage: what a sandbox was given (its inputs: files uploaded into it, by any interface),
//! under which template version and policy set each execution ran, and which execution
//! produced each artifact.
//!
//! Three tables, none with a foreign key: lineage is kept for ended sandboxes (whose rows stay
//! in `sandboxes` as `deleted`, `expired`...; nothing deletes a sandbox row) and must never make
//! a write to `executions` fail.
//!
//! - `inputs`: one row per upload: `sandbox_id`, `path`, `sha256`, `size`, `at` (when it was
//!   committed into the workspace: steps are ordered by `at` against the executions'
//!   `started_at`), `stored` (whether the content was kept in the artifacts store).
//! - `execution_lineage`: per execution the sandbox's `template` and `template_version` (filled
//!   by a trigger on `executions` inserts, so every execution has one whatever wrote it) and the
//!   `policy_version` and policy `decisions` (ids, JSON) the server noted for it.
//! - `artifact_lineage`: `sha256 → execution` for every stored artifact, filled by a trigger
//!   when an execution's result is written (the artifacts are in the result's JSON), so the
//!   index cannot miss one; the migration fills it for executions recorded before it.

use crate::govern::{decision_from_row, DECISION_COLUMNS};
use crate::{DecisionRecord, Store, StoreError};
use rusqlite::{params, OptionalExtension, Row};

/// Version 7: lineage.
pub(crate) const SCHEMA_V7: &str = "
CREATE TABLE inputs (
    id          INTEGER PRIMARY KEY,
    sandbox_id  TEXT NOT NULL,
    path        TEXT NOT NULL,
    sha256      TEXT NOT NULL,
    size        INTEGER NOT NULL,
    at          TEXT NOT NULL,
    stored      INTEGER NOT NULL
);
CREATE INDEX inputs_sandbox ON inputs (sandbox_id, at, id);
CREATE INDEX inputs_sha256 ON inputs (sha256);

CREATE TABLE execution_lineage (
    execution_id     TEXT PRIMARY KEY NOT NULL,
    sandbox_id       TEXT NOT NULL,
    template         TEXT NOT NULL,
    template_version TEXT NOT NULL,
    policy_version   TEXT,
    decisions        TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX execution_lineage_sandbox ON execution_lineage (sandbox_id);

CREATE TABLE artifact_lineage (
    sha256       TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    sandbox_id   TEXT NOT NULL,
    path         TEXT NOT NULL,
    size         INTEGER NOT NULL,
    mime_type    TEXT NOT NULL,
    at           TEXT NOT NULL,
    PRIMARY KEY (sha256, execution_id, path)
) WITHOUT ROWID;
CREATE INDEX artifact_lineage_execution ON artifact_lineage (execution_id);

CREATE TRIGGER execution_lineage_insert AFTER INSERT ON executions BEGIN
    INSERT OR IGNORE INTO execution_lineage (execution_id, sandbox_id, template, template_version)
    SELECT NEW.id, NEW.sandbox_id, s.template, s.template_version
    FROM sandboxes s WHERE s.id = NEW.sandbox_id;
END;

CREATE TRIGGER artifact_lineage_result AFTER UPDATE OF result ON executions
WHEN NEW.result IS NOT NULL BEGIN
    DELETE FROM artifact_lineage WHERE execution_id = NEW.id;
    INSERT OR IGNORE INTO artifact_lineage
        (sha256, execution_id, sandbox_id, path, size, mime_type, at)
    SELECT json_extract(a.value, '$.sha256'), NEW.id, NEW.sandbox_id,
           json_extract(a.value, '$.path'),
           CAST(coalesce(json_extract(a.value, '$.size'), 0) AS INTEGER),
           coalesce(json_extract(a.value, '$.mime_type'), ''), NEW.started_at
    FROM json_each(CASE WHEN json_valid(NEW.result) THEN NEW.result ELSE '{}' END,
                   '$.artifacts') AS a
    WHERE a.type = 'object'
      AND typeof(json_extract(a.value, '$.sha256')) = 'text'
      AND json_extract(a.value, '$.sha256') != ''
      AND typeof(json_extract(a.value, '$.path')) = 'text';
END;

INSERT OR IGNORE INTO execution_lineage (execution_id, sandbox_id, template, template_version)
SELECT e.id, e.sandbox_id, s.template, s.template_version
FROM executions e JOIN sandboxes s ON s.id = e.sandbox_id;

INSERT OR IGNORE INTO artifact_lineage (sha256, execution_id, sandbox_id, path, size, mime_type, at)
SELECT json_extract(a.value, '$.sha256'), e.id, e.sandbox_id, json_extract(a.value, '$.path'),
       CAST(coalesce(json_extract(a.value, '$.size'), 0) AS INTEGER),
       coalesce(json_extract(a.value, '$.mime_type'), ''), e.started_at
FROM executions e,
     json_each(CASE WHEN json_valid(e.result) THEN e.result ELSE '{}' END, '$.artifacts') AS a
WHERE e.result IS NOT NULL
  AND a.type = 'object'
  AND typeof(json_extract(a.value, '$.sha256')) = 'text'
  AND json_extract(a.value, '$.sha256') != ''
  AND typeof(json_extract(a.value, '$.path')) = 'text';
";

/// A file written into a sandbox's workspace by a client (REST, E2B, MCP alike).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputRecord {
    pub sandbox_id: String,
    /// Workspace-relative, as the upload named it after normalization (`data/in.csv`).
    pub path: String,
    pub sha256: String,
    pub size: u64,
    /// When it was committed into the workspace (RFC 3339, as the runtime writes it).
    pub at: String,
    /// Whether its content is in the artifacts store (false: over the size limit, kept by
    /// hash only).
    pub stored: bool,
}

/// Under what an execution ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionLineage {
    pub execution_id: String,
    pub sandbox_id: String,
    pub template: String,
    pub template_version: String,
    /// The policy set's version in force (`None`: no policy on this server, or not noted).
    pub policy_version: Option<String>,
    /// Ids of the policy decisions taken for the request that ran it.
    pub decisions: Vec<String>,
}

/// One artifact an execution produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactProduct {
    pub sha256: String,
    pub execution_id: String,
    pub sandbox_id: String,
    pub path: String,
    pub size: u64,
    pub mime_type: String,
    /// When the execution that produced it started.
    pub at: String,
}

fn lineage<T>(op: &'static str, r: rusqlite::Result<T>) -> Result<T, StoreError> {
    r.map_err(|source| StoreError::Govern { op, source })
}

const INPUT_COLUMNS: &str = "sandbox_id, path, sha256, size, at, stored";

fn input_from_row(r: &Row<'_>) -> rusqlite::Result<InputRecord> {
    Ok(InputRecord {
        sandbox_id: r.get(0)?,
        path: r.get(1)?,
        sha256: r.get(2)?,
        size: r.get(3)?,
        at: r.get(4)?,
        stored: r.get(5)?,
    })
}

const EXECUTION_LINEAGE_COLUMNS: &str =
    "execution_id, sandbox_id, template, template_version, policy_version, decisions";

fn execution_lineage_from_row(r: &Row<'_>) -> rusqlite::Result<ExecutionLineage> {
    let decisions: String = r.get(5)?;
    Ok(ExecutionLineage {
        execution_id: r.get(0)?,
        sandbox_id: r.get(1)?,
        template: r.get(2)?,
        template_version: r.get(3)?,
        policy_version: r.get(4)?,
        // Written by this file only; a value that does not parse is treated as none noted.
        decisions: serde_json::from_str(&decisions).unwrap_or_default(),
    })
}

const PRODUCT_COLUMNS: &str = "sha256, execution_id, sandbox_id, path, size, mime_type, at";

fn product_from_row(r: &Row<'_>) -> rusqlite::Result<ArtifactProduct> {
    Ok(ArtifactProduct {
        sha256: r.get(0)?,
        execution_id: r.get(1)?,
        sandbox_id: r.get(2)?,
        path: r.get(3)?,
        size: r.get(4)?,
        mime_type: r.get(5)?,
        at: r.get(6)?,
    })
}

/// Most rows one lineage listing returns (a sandbox with more inputs or executions is cut).
pub const MAX_LINEAGE_ROWS: usize = 100_000;

impl Store {
    /// Records an input written into sandbox `sandbox_id` at `at`: `size` bytes with this
    /// `sha256` at workspace path `path`; `stored` when its content is in the artifacts store.
    pub fn insert_input(
        &self,
        sandbox_id: &str,
        path: &str,
        sha256: &str,
        size: u64,
        at: &str,
        stored: bool,
    ) -> Result<(), StoreError> {
        let run = || -> rusqlite::Result<usize> {
            let conn = self.conn();
            let mut stmt = conn.prepare_cached(&format!(
                "INSERT INTO inputs ({INPUT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
            ))?;
            stmt.execute(params![sandbox_id, path, sha256, size, at, stored])
        };
        lineage("record an input", run()).map(|_| ())
    }

    /// A sandbox's inputs in the order they were written.
    pub fn list_inputs(&self, sandbox_id: &str) -> Result<Vec<InputRecord>, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<Vec<InputRecord>> {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {INPUT_COLUMNS} FROM inputs WHERE sandbox_id = ?1 ORDER BY at, id LIMIT ?2"
            ))?;
            let rows =
                stmt.query_map(params![sandbox_id, MAX_LINEAGE_ROWS as i64], input_from_row)?;
            rows.collect()
        };
        lineage("list inputs", run())
    }

    /// Every upload of this content, oldest first.
    pub fn inputs_with_sha256(&self, sha256: &str) -> Result<Vec<InputRecord>, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<Vec<InputRecord>> {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {INPUT_COLUMNS} FROM inputs WHERE sha256 = ?1 ORDER BY at, id LIMIT ?2"
            ))?;
            let rows = stmt.query_map(params![sha256, MAX_LINEAGE_ROWS as i64], input_from_row)?;
            rows.collect()
        };
        lineage("list inputs by hash", run())
    }

    /// Notes the policy set's version and the decisions of the request that ran execution
    /// `execution_id`. Works whether or not the execution's own row is written yet (executions
    /// are written behind): the template comes from the sandbox's row.
    pub fn note_execution_policy(
        &self,
        execution_id: &str,
        sandbox_id: &str,
        policy_version: Option<&str>,
        decisions: &[String],
    ) -> Result<(), StoreError> {
        let decisions = serde_json::to_string(decisions).unwrap_or_else(|_| "[]".into());
        let run = || -> rusqlite::Result<usize> {
            let conn = self.conn();
            let mut stmt = conn.prepare_cached(
                "INSERT INTO execution_lineage \
                 (execution_id, sandbox_id, template, template_version, policy_version, decisions) \
                 SELECT ?1, ?2, s.template, s.template_version, ?3, ?4 \
                 FROM sandboxes s WHERE s.id = ?2 \
                 ON CONFLICT (execution_id) DO UPDATE SET \
                 policy_version = excluded.policy_version, decisions = excluded.decisions",
            )?;
            stmt.execute(params![execution_id, sandbox_id, policy_version, decisions])
        };
        lineage("note an execution's policy", run()).map(|_| ())
    }

    /// Under what execution `id` ran, if it is recorded.
    pub fn execution_lineage(&self, id: &str) -> Result<Option<ExecutionLineage>, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<Option<ExecutionLineage>> {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {EXECUTION_LINEAGE_COLUMNS} FROM execution_lineage WHERE execution_id = ?1"
            ))?;
            stmt.query_row([id], execution_lineage_from_row).optional()
        };
        lineage("read an execution's lineage", run())
    }

    /// The lineage of every execution of a sandbox (in no particular order: join with the
    /// executions' `started_at`).
    pub fn list_execution_lineage(
        &self,
        sandbox_id: &str,
    ) -> Result<Vec<ExecutionLineage>, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<Vec<ExecutionLineage>> {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {EXECUTION_LINEAGE_COLUMNS} FROM execution_lineage \
                 WHERE sandbox_id = ?1 LIMIT ?2"
            ))?;
            let rows = stmt.query_map(
                params![sandbox_id, MAX_LINEAGE_ROWS as i64],
                execution_lineage_from_row,
            )?;
            rows.collect()
        };
        lineage("list a sandbox's execution lineage", run())
    }

    /// The executions that produced this content, oldest first.
    pub fn artifact_producers(&self, sha256: &str) -> Result<Vec<ArtifactProduct>, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<Vec<ArtifactProduct>> {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {PRODUCT_COLUMNS} FROM artifact_lineage WHERE sha256 = ?1 \
                 ORDER BY at, execution_id, path LIMIT ?2"
            ))?;
            let rows =
                stmt.query_map(params![sha256, MAX_LINEAGE_ROWS as i64], product_from_row)?;
            rows.collect()
        };
        lineage("list an artifact's producers", run())
    }

    /// The artifacts an execution produced, by path.
    pub fn execution_artifacts(
        &self,
        execution_id: &str,
    ) -> Result<Vec<ArtifactProduct>, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<Vec<ArtifactProduct>> {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {PRODUCT_COLUMNS} FROM artifact_lineage WHERE execution_id = ?1 \
                 ORDER BY path"
            ))?;
            let rows = stmt.query_map([execution_id], product_from_row)?;
            rows.collect()
        };
        lineage("list an execution's artifacts", run())
    }

    /// The last `execute` decision about sandbox `sandbox_id` taken at or before `at`: the
    /// decision of an execution whose request noted none (the decision is taken just before
    /// the execution starts, in the same request).
    pub fn execute_decision_before(
        &self,
        sandbox_id: &str,
        at: &str,
    ) -> Result<Option<DecisionRecord>, StoreError> {
        let resource = format!("Sandbox::{sandbox_id:?}");
        let conn = self.conn();
        let run = || -> rusqlite::Result<Option<DecisionRecord>> {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {DECISION_COLUMNS} FROM decisions \
                 WHERE gate = 'execute' AND resource = ?1 AND at <= ?2 \
                 ORDER BY at DESC, rowid DESC LIMIT 1"
            ))?;
            stmt.query_row(params![resource, at], decision_from_row)
                .optional()
        };
        lineage("find an execution's decision", run())
    }

    /// The decisions recorded under these ids (unknown ids are left out).
    pub fn decisions_by_id(&self, ids: &[String]) -> Result<Vec<DecisionRecord>, StoreError> {
        let conn = self.conn();
        let mut out = Vec::new();
        let mut run = || -> rusqlite::Result<()> {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {DECISION_COLUMNS} FROM decisions WHERE id = ?1"
            ))?;
            for id in ids.iter().take(1000) {
                let d = stmt.query_row([id], decision_from_row).optional()?;
                out.extend(d);
            }
            Ok(())
        };
        lineage("read decisions", run())?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandlot_types::{
        Artifact, EffectiveLimits, EndState, ExecutionRecord, ExecutionResult, IdleAction,
        Language, Sandbox, SandboxState,
    };
    use std::collections::BTreeMap;

    fn sandbox(id: &str, state: SandboxState) -> Sandbox {
        Sandbox {
            id: id.to_owned(),
            template: "default".to_owned(),
            template_version: "v1abc".to_owned(),
            state,
            env: BTreeMap::new(),
            metadata: BTreeMap::new(),
            limits: EffectiveLimits {
                memory_mb: 512,
                cpu_millis: 1000,
                pids: 64,
                disk_mb: 256,
            },
            idle_timeout: 600,
            max_lifetime: 3600,
            created_at: "2026-01-01T00:00:00.000000Z".to_owned(),
            last_active_at: "2026-01-01T00:00:00.000000Z".to_owned(),
            expires_at: "2030-01-01T00:00:00.000000Z".to_owned(),
            ended_reason: None,
            restart_count: 0,
            last_restart: None,
            on_idle: IdleAction::Delete,
            forked_from: None,
            from_snapshot: None,
            paused_at: None,
            last_restore: None,
            volumes: Vec::new(),
            ports: Vec::new(),
            all_ports: false,
            tenant: "acme".to_owned(),
            tier: "isolated".to_owned(),
            network: vec![],
            secrets: vec![],
            contained: None,
            mounts: Vec::new(),
            port_token: None,
        }
    }

    fn execution(id: &str, sandbox_id: &str, at: &str) -> ExecutionRecord {
        ExecutionRecord {
            id: id.to_owned(),
            sandbox_id: sandbox_id.to_owned(),
            code: "open('out.txt','w').write('x')".to_owned(),
            language: Language::Python,
            started_at: at.to_owned(),
            result: None,
        }
    }

    fn artifact(path: &str, sha: &str) -> Artifact {
        Artifact {
            path: path.to_owned(),
            size: 1,
            sha256: sha.to_owned(),
            mime_type: "text/plain".to_owned(),
            change: "created".to_owned(),
            url: if sha.is_empty() {
                String::new()
            } else {
                format!("/v1/artifacts/{sha}")
            },
        }
    }

    fn result(rec: &ExecutionRecord, artifacts: Vec<Artifact>) -> ExecutionResult {
        let mut v = serde_json::json!({
            "id": rec.id, "sandbox_id": rec.sandbox_id, "language": "python",
            "end_state": "ok", "stdout": "", "stderr": "", "outputs": [],
            "duration_ms": 1.0, "cpu_time_ms": 1.0, "peak_memory_bytes": 0,
            "sandbox_alive": true, "started_at": rec.started_at,
            "stdout_truncation": {"kept_bytes": 0, "dropped_bytes": 0},
            "stderr_truncation": {"kept_bytes": 0, "dropped_bytes": 0},
        });
        v["artifacts"] = serde_json::to_value(artifacts).unwrap();
        let mut r: ExecutionResult = serde_json::from_value(v).unwrap();
        r.end_state = EndState::Ok;
        r
    }

    #[test]
    fn inputs_keep_their_order_and_outlive_the_sandbox() {
        let store = Store::open_in_memory().unwrap();
        store
            .insert_sandbox(&sandbox("sb_1", SandboxState::Running))
            .unwrap();
        for (i, at) in ["2026-01-01T00:00:02.000000Z", "2026-01-01T00:00:01.000000Z"]
            .iter()
            .enumerate()
        {
            store
                .insert_input(
                    "sb_1",
                    &format!("in{i}.csv"),
                    &"a".repeat(64),
                    3,
                    at,
                    i == 0,
                )
                .unwrap();
        }
        let mut ended = sandbox("sb_1", SandboxState::Deleted);
        ended.ended_reason = Some("deleted".into());
        store.update_sandbox(&ended).unwrap();
        let got = store.list_inputs("sb_1").unwrap();
        assert_eq!(
            got.iter().map(|i| i.path.as_str()).collect::<Vec<_>>(),
            ["in1.csv", "in0.csv"]
        );
        assert!(got[1].stored && !got[0].stored);
        assert_eq!(store.inputs_with_sha256(&"a".repeat(64)).unwrap().len(), 2);
        assert!(store.list_inputs("sb_other").unwrap().is_empty());
    }

    #[test]
    fn executions_get_their_template_and_artifacts_indexed_by_trigger() {
        let store = Store::open_in_memory().unwrap();
        store
            .insert_sandbox(&sandbox("sb_1", SandboxState::Running))
            .unwrap();
        let rec = execution("ex_1", "sb_1", "2026-01-01T00:00:03.000000Z");
        store.insert_execution(&rec).unwrap();
        let l = store.execution_lineage("ex_1").unwrap().unwrap();
        assert_eq!(
            (
                l.template.as_str(),
                l.template_version.as_str(),
                l.policy_version
            ),
            ("default", "v1abc", None)
        );
        let sha = "b".repeat(64);
        store
            .finish_execution(
                "ex_1",
                &result(
                    &rec,
                    vec![artifact("out.txt", &sha), artifact("huge.bin", "")],
                ),
            )
            .unwrap();
        let produced = store.artifact_producers(&sha).unwrap();
        assert_eq!(produced.len(), 1, "{produced:?}");
        assert_eq!(
            (produced[0].execution_id.as_str(), produced[0].path.as_str()),
            ("ex_1", "out.txt")
        );
        assert_eq!(
            (
                produced[0].sandbox_id.as_str(),
                produced[0].mime_type.as_str()
            ),
            ("sb_1", "text/plain")
        );
        // A result written again replaces the index entries of the first one.
        store
            .finish_execution("ex_1", &result(&rec, vec![artifact("other.txt", &sha)]))
            .unwrap();
        let again = store.execution_artifacts("ex_1").unwrap();
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].path, "other.txt");

        store
            .note_execution_policy("ex_1", "sb_1", Some("pv1"), &["dec_1".into()])
            .unwrap();
        let l = store.execution_lineage("ex_1").unwrap().unwrap();
        assert_eq!(l.policy_version.as_deref(), Some("pv1"));
        assert_eq!(l.decisions, vec!["dec_1".to_string()]);
        assert_eq!(store.list_execution_lineage("sb_1").unwrap().len(), 1);
    }

    #[test]
    fn the_policy_can_be_noted_before_the_execution_is_written() {
        let store = Store::open_in_memory().unwrap();
        store
            .insert_sandbox(&sandbox("sb_1", SandboxState::Running))
            .unwrap();
        store
            .note_execution_policy("ex_2", "sb_1", Some("pv"), &[])
            .unwrap();
        store
            .insert_execution(&execution("ex_2", "sb_1", "2026-01-01T00:00:00.000000Z"))
            .unwrap();
        let l = store.execution_lineage("ex_2").unwrap().unwrap();
        assert_eq!(l.policy_version.as_deref(), Some("pv"));
        assert_eq!(l.template_version, "v1abc");
        // Unknown sandbox: nothing noted, no error.
        store
            .note_execution_policy("ex_3", "sb_x", None, &[])
            .unwrap();
        assert!(store.execution_lineage("ex_3").unwrap().is_none());
    }

    #[test]
    fn a_malformed_result_never_fails_the_write() {
        let store = Store::open_in_memory().unwrap();
        store
            .insert_sandbox(&sandbox("sb_1", SandboxState::Running))
            .unwrap();
        store
            .insert_execution(&execution("ex_1", "sb_1", "2026-01-01T00:00:00.000000Z"))
            .unwrap();
        // Written by hand: neither JSON nor an artifact list of objects.
        for text in ["not json", r#"{"artifacts": [1, "x", {"sha256": 5}]}"#] {
            store
                .conn()
                .execute(
                    "UPDATE executions SET result = ?1 WHERE id = 'ex_1'",
                    [text],
                )
                .unwrap();
        }
        assert!(store.execution_artifacts("ex_1").unwrap().is_empty());
    }

    #[test]
    fn the_migration_indexes_executions_recorded_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let sha = "c".repeat(64);
        {
            let store = Store::open(&path).unwrap();
            store
                .insert_sandbox(&sandbox("sb_1", SandboxState::Expired))
                .unwrap();
            let rec = execution("ex_1", "sb_1", "2026-01-01T00:00:00.000000Z");
            store.insert_execution(&rec).unwrap();
            store
                .finish_execution("ex_1", &result(&rec, vec![artifact("p.png", &sha)]))
                .unwrap();
            // As a version 6 database: no lineage tables (nor what later versions added).
            store
                .conn()
                .execute_batch(
                    "DROP TRIGGER execution_lineage_insert; DROP TRIGGER artifact_lineage_result;
                     DROP TABLE inputs; DROP TABLE execution_lineage; DROP TABLE artifact_lineage;
                     DROP TABLE port_epochs; DROP TABLE reviews; DROP TABLE policy_versions;
                     DROP TABLE console_sessions; PRAGMA user_version = 6;",
                )
                .unwrap();
        }
        let store = Store::open(&path).unwrap();
        assert_eq!(store.artifact_producers(&sha).unwrap().len(), 1);
        assert_eq!(
            store.execution_lineage("ex_1").unwrap().unwrap().template,
            "default"
        );
    }

    #[test]
    fn the_execute_decision_before_an_execution_is_found() {
        let store = Store::open_in_memory().unwrap();
        let d = |id: &str, at: &str, resource: &str| DecisionRecord {
            id: id.into(),
            at: at.into(),
            gate: "execute".into(),
            key_id: None,
            tenant: Some("acme".into()),
            resource: resource.into(),
            allowed: true,
            policies: vec!["p0".into()],
            reason: "permit".into(),
            version: "pv9".into(),
            latency_us: 1.0,
            detail: None,
        };
        store
            .insert_decisions(&[
                d("dec_a", "2026-01-01T00:00:01.000000Z", "Sandbox::\"sb_1\""),
                d("dec_b", "2026-01-01T00:00:03.000000Z", "Sandbox::\"sb_1\""),
                d("dec_c", "2026-01-01T00:00:02.000000Z", "Sandbox::\"sb_2\""),
            ])
            .unwrap();
        let got = store
            .execute_decision_before("sb_1", "2026-01-01T00:00:02.500000Z")
            .unwrap()
            .unwrap();
        assert_eq!(got.id, "dec_a");
        assert!(store
            .execute_decision_before("sb_1", "2026-01-01T00:00:00.000000Z")
            .unwrap()
            .is_none());
        let by_id = store
            .decisions_by_id(&["dec_c".into(), "dec_zz".into()])
            .unwrap();
        assert_eq!(by_id.len(), 1);
        assert_eq!(by_id[0].version, "pv9");
    }
}
