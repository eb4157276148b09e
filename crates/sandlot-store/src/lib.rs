//! The record of every sandbox and execution: one SQLite database in the data dir.
//!
//! [`Store`] wraps a single [`rusqlite::Connection`] behind a mutex, so it is `Send + Sync` and
//! can be shared (in an `Arc`) by every task of the server; each method is one short statement
//! or one transaction. A file-backed store runs in WAL mode with foreign keys on and a 5 s busy
//! timeout, so a second process (say `sandlot doctor`) can read it while the server writes.
//!
//! # Schema
//!
//! Four tables. Whatever is queried or filtered on is a real column; nested values are JSON text
//! in the same shape as the wire model of [`sandlot_types`]:
//!
//! - `sandboxes`: `id`, `template`, `template_version`, `state`, `env` (JSON), `metadata`
//!   (JSON), `limits` (JSON), `idle_timeout`, `max_lifetime`, `created_at`, `last_active_at`,
//!   `expires_at`, `ended_reason`, `restart_count`, `last_restart` (JSON), and `host_uid` (the
//!   host uid its workspace belongs to: not part of the wire model, kept so a restarted server
//!   gives a stopped sandbox back its uid), `on_idle`, `forked_from`, `from_snapshot`,
//!   `paused_at`, `last_restore` (JSON), `volumes` (JSON), `ports` (JSON list of the TCP ports
//!   it exposes) and `all_ports` (0/1); indexed by `(state, created_at)` and `created_at`.
//! - `snapshots`: the wire model's fields ([`Snapshot`], `not_captured` as JSON) plus
//!   `state_sha256` (of the saved state's body, checked before it is loaded and by `sandlot
//!   snapshots verify`) and `contexts` (JSON); no foreign key: a snapshot outlives its sandbox.
//! - `volumes`: keyed by `(tenant, name)`: `size_mb`, `created_at`, `host_uid` (who owns its
//!   files at rest), `workspace` (the workspace id holding its files); which sandboxes mount it
//!   is their `volumes` column (JSON).
//! - `executions`: `id`, `sandbox_id` (foreign key to `sandboxes`), `language`, `code`,
//!   `started_at`, and once finished `end_state`, `duration_ms`, `cpu_time_ms`,
//!   `peak_memory_bytes` and `result` (the whole [`ExecutionResult`] as JSON, which is what is
//!   read back); indexed by `(sandbox_id, started_at)`.
//!
//! Enum columns hold the same snake_case strings as the API (`running`, `python`, `killed`).
//! The schema version is SQLite's `PRAGMA user_version`; [`Store::open`] applies the missing
//! migrations in one transaction and refuses a database written by a newer sandlot.
//!
//! # Ordering
//!
//! Lists are ordered by the RFC 3339 timestamp text (`created_at`, `started_at`), ties broken
//! by insertion order. Text order is time order only when every timestamp is written the same
//! way: UTC (`Z`) with a fixed number of fractional digits, which is what the runtime writes.
//!
//! # Restart recovery
//!
//! A sandbox's processes do not survive the server; its files may. At start the server calls
//! [`Store::mark_running`] with `stopped` (or [`Store::mark_running_lost`]), which marks every
//! `running` sandbox so and gives every execution without a result a `killed` one.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use sandlot_types::{
    EndState, ExecError, ExecutionRecord, ExecutionResult, Sandbox, SandboxState, Truncation,
};

mod console;
mod govern;
mod jobs;
mod lineage;
mod reviews;
mod rows;
mod schema;
#[cfg(test)]
mod tests;

pub use console::{PolicyVersionRecord, SessionRecord};
pub use govern::{DecisionFilter, DecisionRecord, EgressRecord, FindingRecord, Journal, KeyRecord};
pub use reviews::ReviewRecord;
pub use rows::{SnapshotRecord, VolumeRecord};
pub use schema::SCHEMA_VERSION;

use rows::*;
use schema::{migrate, set_wal, BUSY_TIMEOUT};

/// Every way a [`Store`] operation fails. The SQLite error (or the JSON error wrapped in one,
/// for a value that cannot be encoded or a stored value that cannot be decoded) is the source.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the store database {}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot configure the store database ({setting})")]
    Configure {
        setting: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    #[error("the store database cannot use WAL journaling (journal mode is {mode:?})")]
    WalUnavailable { mode: String },
    #[error("cannot migrate the store schema to version {version}")]
    Migrate {
        version: i64,
        #[source]
        source: rusqlite::Error,
    },
    #[error(
        "the store database has schema version {found}, but this sandlot understands only up \
         to {supported}"
    )]
    UnsupportedSchema { found: i64, supported: i64 },
    #[error("cannot insert sandbox {id}")]
    InsertSandbox {
        id: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot update sandbox {id}")]
    UpdateSandbox {
        id: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot read sandbox {id}")]
    GetSandbox {
        id: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot {op} snapshot {id}")]
    Snapshot {
        op: &'static str,
        id: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot {op}")]
    Govern {
        op: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot {op} volume {name}")]
    Volume {
        op: &'static str,
        name: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot list sandboxes")]
    ListSandboxes {
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot mark running sandboxes {state}")]
    MarkRunning {
        state: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot insert execution {id}")]
    InsertExecution {
        id: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot record the result of execution {id}")]
    FinishExecution {
        id: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot read execution {id}")]
    GetExecution {
        id: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot list the executions of sandbox {sandbox_id}")]
    ListExecutions {
        sandbox_id: String,
        #[source]
        source: rusqlite::Error,
    },
    /// [`Store::update_sandbox`] of an id that was never inserted.
    #[error("no sandbox {id} in the store")]
    SandboxNotFound { id: String },
    /// [`Store::finish_execution`] of an id that was never inserted.
    #[error("no execution {id} in the store")]
    ExecutionNotFound { id: String },
}

impl StoreError {
    /// Whether the operation failed because it would break a constraint: an id inserted twice,
    /// or an execution of a sandbox the store does not know.
    pub fn is_constraint_violation(&self) -> bool {
        let source = match self {
            StoreError::InsertSandbox { source, .. }
            | StoreError::UpdateSandbox { source, .. }
            | StoreError::InsertExecution { source, .. }
            | StoreError::FinishExecution { source, .. }
            | StoreError::Snapshot { source, .. }
            | StoreError::Volume { source, .. }
            | StoreError::Govern { source, .. } => source,
            _ => return false,
        };
        source.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation)
    }
}

/// The SQLite record of every sandbox and execution. Cheap to share: wrap it in an `Arc`.
#[derive(Debug)]
pub struct Store {
    conn: Mutex<Connection>,
}

impl Store {
    /// Opens (creating if needed) the database file at `path` and brings its schema up to date.
    /// The parent directory must exist. Sets WAL mode, `synchronous = NORMAL`, foreign keys on
    /// and a 5 s busy timeout.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let conn = Connection::open(path).map_err(|source| StoreError::Open {
            path: path.to_owned(),
            source,
        })?;
        Self::init(conn, true)
    }

    /// A private, empty store that lives as long as the value (for tests and `--ephemeral`).
    pub fn open_in_memory() -> Result<Store, StoreError> {
        let conn = Connection::open_in_memory().map_err(|source| StoreError::Open {
            path: PathBuf::from(":memory:"),
            source,
        })?;
        Self::init(conn, false)
    }

    fn init(mut conn: Connection, file_backed: bool) -> Result<Store, StoreError> {
        let configure = |setting| move |source| StoreError::Configure { setting, source };
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(configure("busy_timeout"))?;
        conn.pragma_update(None, "foreign_keys", true)
            .map_err(configure("foreign_keys"))?;
        if file_backed {
            let mode = set_wal(&conn).map_err(configure("journal_mode"))?;
            if !mode.eq_ignore_ascii_case("wal") {
                return Err(StoreError::WalUnavailable { mode });
            }
            conn.pragma_update(None, "synchronous", "NORMAL")
                .map_err(configure("synchronous"))?;
        }
        migrate(&mut conn)?;
        Ok(Store {
            conn: Mutex::new(conn),
        })
    }

    /// The connection. A panic in another thread while it held the lock cannot leave a
    /// transaction open (dropping a `Transaction` rolls it back), so poisoning is ignored.
    pub(crate) fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a new sandbox. Fails (a constraint violation) if the id is already recorded.
    pub fn insert_sandbox(&self, s: &Sandbox) -> Result<(), StoreError> {
        let run = || -> rusqlite::Result<()> {
            let conn = self.conn();
            let mut stmt = conn.prepare_cached(&format!(
                "INSERT INTO sandboxes ({SANDBOX_COLUMNS}) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, \
                 ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28)"
            ))?;
            stmt.execute(params![
                s.id,
                s.template,
                s.template_version,
                state_str(s.state),
                to_json(serde_json::to_string(&s.env))?,
                to_json(serde_json::to_string(&s.metadata))?,
                to_json(serde_json::to_string(&s.limits))?,
                s.idle_timeout,
                s.max_lifetime,
                s.created_at,
                s.last_active_at,
                s.expires_at,
                s.ended_reason,
                s.restart_count,
                last_restart_json(s)?,
                s.on_idle.as_str(),
                s.forked_from,
                s.from_snapshot,
                s.paused_at,
                s.last_restore
                    .as_ref()
                    .map(|r| to_json(serde_json::to_string(r)))
                    .transpose()?,
                to_json(rows::mounts_json(s))?,
                to_json(serde_json::to_string(&s.ports))?,
                s.all_ports,
                s.tenant,
                s.tier,
                to_json(serde_json::to_string(&s.network))?,
                to_json(serde_json::to_string(&s.secrets))?,
                s.contained,
            ])?;
            Ok(())
        };
        run().map_err(|source| StoreError::InsertSandbox {
            id: s.id.clone(),
            source,
        })
    }

    /// Replaces every field of the sandbox recorded under `s.id`.
    pub fn update_sandbox(&self, s: &Sandbox) -> Result<(), StoreError> {
        let run = || -> rusqlite::Result<usize> {
            let conn = self.conn();
            let mut stmt = conn.prepare_cached(
                "UPDATE sandboxes SET template = ?2, template_version = ?3, state = ?4, \
                 env = ?5, metadata = ?6, limits = ?7, idle_timeout = ?8, max_lifetime = ?9, \
                 created_at = ?10, last_active_at = ?11, expires_at = ?12, ended_reason = ?13, \
                 restart_count = ?14, last_restart = ?15, on_idle = ?16, forked_from = ?17, \
                 from_snapshot = ?18, paused_at = ?19, last_restore = ?20, volumes = ?21, \
                 ports = ?22, all_ports = ?23, tenant = ?24, tier = ?25, network = ?26, \
                 secrets = ?27, contained = ?28 WHERE id = ?1",
            )?;
            stmt.execute(params![
                s.id,
                s.template,
                s.template_version,
                state_str(s.state),
                to_json(serde_json::to_string(&s.env))?,
                to_json(serde_json::to_string(&s.metadata))?,
                to_json(serde_json::to_string(&s.limits))?,
                s.idle_timeout,
                s.max_lifetime,
                s.created_at,
                s.last_active_at,
                s.expires_at,
                s.ended_reason,
                s.restart_count,
                last_restart_json(s)?,
                s.on_idle.as_str(),
                s.forked_from,
                s.from_snapshot,
                s.paused_at,
                s.last_restore
                    .as_ref()
                    .map(|r| to_json(serde_json::to_string(r)))
                    .transpose()?,
                to_json(rows::mounts_json(s))?,
                to_json(serde_json::to_string(&s.ports))?,
                s.all_ports,
                s.tenant,
                s.tier,
                to_json(serde_json::to_string(&s.network))?,
                to_json(serde_json::to_string(&s.secrets))?,
                s.contained,
            ])
        };
        match run() {
            Ok(0) => Err(StoreError::SandboxNotFound { id: s.id.clone() }),
            Ok(_) => Ok(()),
            Err(source) => Err(StoreError::UpdateSandbox {
                id: s.id.clone(),
                source,
            }),
        }
    }

    /// The sandbox recorded under `id`, if any.
    pub fn get_sandbox(&self, id: &str) -> Result<Option<Sandbox>, StoreError> {
        let run = || -> rusqlite::Result<Option<Sandbox>> {
            let conn = self.conn();
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {SANDBOX_COLUMNS} FROM sandboxes WHERE id = ?1"
            ))?;
            stmt.query_row([id], sandbox_from_row).optional()
        };
        run().map_err(|source| StoreError::GetSandbox {
            id: id.to_owned(),
            source,
        })
    }

    /// Every recorded sandbox (`include_ended`) or only the running ones, oldest first.
    pub fn list_sandboxes(&self, include_ended: bool) -> Result<Vec<Sandbox>, StoreError> {
        let run = || -> rusqlite::Result<Vec<Sandbox>> {
            let conn = self.conn();
            if include_ended {
                let mut stmt = conn.prepare_cached(&format!(
                    "SELECT {SANDBOX_COLUMNS} FROM sandboxes ORDER BY created_at, rowid"
                ))?;
                let rows = stmt.query_map([], sandbox_from_row)?;
                rows.collect()
            } else {
                let mut stmt = conn.prepare_cached(&format!(
                    "SELECT {SANDBOX_COLUMNS} FROM sandboxes WHERE state = ?1 \
                     ORDER BY created_at, rowid"
                ))?;
                let rows = stmt.query_map([state_str(SandboxState::Running)], sandbox_from_row)?;
                rows.collect()
            }
        };
        run().map_err(|source| StoreError::ListSandboxes { source })
    }

    /// Restart recovery: every sandbox still `running` becomes `lost` with `ended_reason =
    /// reason`; see [`Store::mark_running`].
    pub fn mark_running_lost(
        &self,
        reason: &str,
        now_rfc3339: &str,
    ) -> Result<Vec<String>, StoreError> {
        self.mark_running(SandboxState::Lost, reason, now_rfc3339)
    }

    /// Restart recovery: every sandbox still `running` becomes `state` (`stopped` when its
    /// files are kept, `lost` when not) with `ended_reason = reason`; every execution without
    /// a result gets a result with end state `killed`,
    /// `sandbox_alive` false, and the error `{name: "ServerRestart", value: reason, traceback:
    /// []}` (also its one output event). Its duration runs from its start to `now_rfc3339` (0
    /// when either timestamp does not parse); its stdout, stderr, CPU time and peak memory are
    /// unknown and recorded as empty and 0. Returns the ids of the sandboxes it marked, oldest
    /// first. One transaction: either everything is marked or nothing is.
    pub fn mark_running(
        &self,
        state: SandboxState,
        reason: &str,
        now_rfc3339: &str,
    ) -> Result<Vec<String>, StoreError> {
        let now = parse_rfc3339(now_rfc3339);
        let run = || -> rusqlite::Result<Vec<String>> {
            let mut conn = self.conn();
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let running = state_str(SandboxState::Running);
            let marked = {
                let mut select = tx.prepare(
                    "SELECT id FROM sandboxes WHERE state = ?1 ORDER BY created_at, rowid",
                )?;
                let ids = select
                    .query_map([running], |row| row.get(0))?
                    .collect::<rusqlite::Result<Vec<String>>>()?;
                tx.execute(
                    "UPDATE sandboxes SET state = ?1, ended_reason = ?2 WHERE state = ?3",
                    params![state_str(state), reason, running],
                )?;
                ids
            };
            {
                let mut select = tx.prepare(
                    "SELECT id, sandbox_id, language, started_at FROM executions \
                     WHERE result IS NULL ORDER BY started_at, rowid",
                )?;
                let unfinished = select
                    .query_map([], |row| {
                        Ok((
                            row.get::<_, String>(0)?,
                            row.get::<_, String>(1)?,
                            language_from_row(row, 2)?,
                            row.get::<_, String>(3)?,
                        ))
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                for (id, sandbox_id, language, started_at) in unfinished {
                    let duration_ms = match (parse_rfc3339(&started_at), now) {
                        (Some(start), Some(now)) => {
                            ((now - start).as_seconds_f64() * 1000.0).max(0.0)
                        }
                        _ => 0.0,
                    };
                    let error = ExecError {
                        name: "ServerRestart".to_owned(),
                        value: reason.to_owned(),
                        traceback: Vec::new(),
                    };
                    let result = ExecutionResult {
                        output_held: None,
                        id,
                        sandbox_id,
                        language,
                        end_state: EndState::Killed,
                        stdout: String::new(),
                        stderr: String::new(),
                        result: None,
                        error: Some(error.clone()),
                        exit_code: None,
                        outputs: vec![sandlot_types::OutputEvent::Error(error)],
                        stdout_truncation: Truncation::default(),
                        stderr_truncation: Truncation::default(),
                        started_at,
                        duration_ms,
                        cpu_time_ms: 0.0,
                        peak_memory_bytes: 0,
                        sandbox_alive: false,
                        artifacts: Vec::new(),
                        context: None,
                        restarted: None,
                        background_bytes: 0,
                        rolled_back: false,
                        rollback: None,
                    };
                    write_result(&tx, &result.id, &result)?;
                }
            }
            tx.commit()?;
            Ok(marked)
        };
        run().map_err(|source| StoreError::MarkRunning {
            state: state_str(state),
            source,
        })
    }

    /// Records the host uid a sandbox's workspace belongs to (`None` forgets it).
    pub fn set_host_uid(&self, id: &str, uid: Option<u32>) -> Result<(), StoreError> {
        let run = || -> rusqlite::Result<usize> {
            let conn = self.conn();
            let mut stmt =
                conn.prepare_cached("UPDATE sandboxes SET host_uid = ?2 WHERE id = ?1")?;
            stmt.execute(params![id, uid])
        };
        match run() {
            Ok(0) => Err(StoreError::SandboxNotFound { id: id.to_owned() }),
            Ok(_) => Ok(()),
            Err(source) => Err(StoreError::UpdateSandbox {
                id: id.to_owned(),
                source,
            }),
        }
    }

    /// Every sandbox in one of `states`, oldest first, with the host uid recorded for it.
    pub fn sandboxes_in(
        &self,
        states: &[SandboxState],
    ) -> Result<Vec<(Sandbox, Option<u32>)>, StoreError> {
        let run = || -> rusqlite::Result<Vec<(Sandbox, Option<u32>)>> {
            let conn = self.conn();
            let marks = vec!["?"; states.len()].join(", ");
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {SANDBOX_COLUMNS}, host_uid FROM sandboxes WHERE state IN ({marks}) \
                 ORDER BY created_at, rowid"
            ))?;
            let names: Vec<&str> = states.iter().map(|s| state_str(*s)).collect();
            let rows = stmt.query_map(rusqlite::params_from_iter(names), |row| {
                Ok((
                    sandbox_from_row(row)?,
                    row.get::<_, Option<u32>>(SANDBOX_COLUMN_COUNT)?,
                ))
            })?;
            rows.collect()
        };
        run().map_err(|source| StoreError::ListSandboxes { source })
    }

    /// Records a snapshot. Fails (a constraint violation) if the id is already recorded.
    pub fn insert_snapshot(&self, r: &SnapshotRecord) -> Result<(), StoreError> {
        let s = &r.snapshot;
        let run = || -> rusqlite::Result<()> {
            let conn = self.conn();
            let mut stmt = conn.prepare_cached(&format!(
                "INSERT INTO snapshots ({SNAPSHOT_COLUMNS}) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"
            ))?;
            stmt.execute(params![
                s.id,
                s.name,
                s.sandbox_id,
                s.template,
                s.template_version,
                s.created_at,
                s.state_bytes,
                r.state_sha256,
                s.workspace,
                s.variables,
                to_json(serde_json::to_string(&s.not_captured))?,
                to_json(serde_json::to_string(&r.contexts))?,
                s.version,
                s.tenant,
            ])?;
            Ok(())
        };
        run().map_err(|source| StoreError::Snapshot {
            op: "insert",
            id: s.id.clone(),
            source,
        })
    }

    /// The snapshot recorded under `id`, if any.
    pub fn get_snapshot(&self, id: &str) -> Result<Option<SnapshotRecord>, StoreError> {
        let run = || -> rusqlite::Result<Option<SnapshotRecord>> {
            let conn = self.conn();
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {SNAPSHOT_COLUMNS} FROM snapshots WHERE id = ?1"
            ))?;
            stmt.query_row([id], snapshot_from_row).optional()
        };
        run().map_err(|source| StoreError::Snapshot {
            op: "get",
            id: id.to_owned(),
            source,
        })
    }

    /// Every snapshot, oldest first.
    pub fn list_snapshots(&self) -> Result<Vec<SnapshotRecord>, StoreError> {
        let run = || -> rusqlite::Result<Vec<SnapshotRecord>> {
            let conn = self.conn();
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {SNAPSHOT_COLUMNS} FROM snapshots ORDER BY created_at, rowid"
            ))?;
            let rows = stmt.query_map([], snapshot_from_row)?;
            rows.collect()
        };
        run().map_err(|source| StoreError::Snapshot {
            op: "list",
            id: String::new(),
            source,
        })
    }

    /// Forgets a snapshot; true when it was recorded.
    pub fn delete_snapshot(&self, id: &str) -> Result<bool, StoreError> {
        let run = || -> rusqlite::Result<usize> {
            let conn = self.conn();
            conn.execute("DELETE FROM snapshots WHERE id = ?1", [id])
        };
        run().map(|n| n > 0).map_err(|source| StoreError::Snapshot {
            op: "delete",
            id: id.to_owned(),
            source,
        })
    }

    /// Records a volume. Fails (a constraint violation) if its tenant has one of that name.
    pub fn insert_volume(&self, v: &VolumeRecord) -> Result<(), StoreError> {
        let run = || -> rusqlite::Result<usize> {
            self.conn().execute(
                "INSERT INTO volumes (name, size_mb, created_at, host_uid, tenant, workspace) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    v.name,
                    v.size_mb,
                    v.created_at,
                    v.host_uid,
                    v.tenant,
                    v.workspace
                ],
            )
        };
        run().map(|_| ()).map_err(|source| StoreError::Volume {
            op: "insert",
            name: v.name.clone(),
            source,
        })
    }

    /// `tenant`'s volume `name`, if it has one.
    pub fn get_volume(&self, tenant: &str, name: &str) -> Result<Option<VolumeRecord>, StoreError> {
        let run = || -> rusqlite::Result<Option<VolumeRecord>> {
            let conn = self.conn();
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {VOLUME_COLUMNS} FROM volumes WHERE tenant = ?1 AND name = ?2"
            ))?;
            stmt.query_row([tenant, name], volume_from_row).optional()
        };
        run().map_err(|source| StoreError::Volume {
            op: "get",
            name: name.to_owned(),
            source,
        })
    }

    /// Every volume of every tenant, by name then tenant.
    pub fn list_volumes(&self) -> Result<Vec<VolumeRecord>, StoreError> {
        let run = || -> rusqlite::Result<Vec<VolumeRecord>> {
            let conn = self.conn();
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {VOLUME_COLUMNS} FROM volumes ORDER BY name, tenant"
            ))?;
            let rows = stmt.query_map([], volume_from_row)?;
            rows.collect()
        };
        run().map_err(|source| StoreError::Volume {
            op: "list",
            name: String::new(),
            source,
        })
    }

    /// Forgets `tenant`'s volume `name`; true when it was recorded.
    pub fn delete_volume(&self, tenant: &str, name: &str) -> Result<bool, StoreError> {
        let run = || {
            self.conn().execute(
                "DELETE FROM volumes WHERE tenant = ?1 AND name = ?2",
                [tenant, name],
            )
        };
        run().map(|n| n > 0).map_err(|source| StoreError::Volume {
            op: "delete",
            name: name.to_owned(),
            source,
        })
    }

    /// Records an execution as it starts (`rec.result` is normally `None`; a result given here
    /// is stored too). Fails (a constraint violation) if the id is already recorded or the
    /// sandbox is not.
    pub fn insert_execution(&self, rec: &ExecutionRecord) -> Result<(), StoreError> {
        let run = || -> rusqlite::Result<()> {
            let mut conn = self.conn();
            let tx = conn.transaction()?;
            {
                let mut stmt = tx.prepare_cached(
                    "INSERT INTO executions (id, sandbox_id, language, code, started_at) \
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )?;
                stmt.execute(params![
                    rec.id,
                    rec.sandbox_id,
                    rec.language.as_str(),
                    rec.code,
                    rec.started_at,
                ])?;
            }
            if let Some(result) = &rec.result {
                write_result(&tx, &rec.id, result)?;
            }
            tx.commit()
        };
        run().map_err(|source| StoreError::InsertExecution {
            id: rec.id.clone(),
            source,
        })
    }

    /// Records how the execution `id` ended, replacing any result recorded before. The result
    /// is stored as given (its `id` should be `id`).
    pub fn finish_execution(&self, id: &str, result: &ExecutionResult) -> Result<(), StoreError> {
        let run = || -> rusqlite::Result<usize> {
            let conn = self.conn();
            write_result(&conn, id, result)
        };
        match run() {
            Ok(0) => Err(StoreError::ExecutionNotFound { id: id.to_owned() }),
            Ok(_) => Ok(()),
            Err(source) => Err(StoreError::FinishExecution {
                id: id.to_owned(),
                source,
            }),
        }
    }

    /// The execution recorded under `id`, if any.
    pub fn get_execution(&self, id: &str) -> Result<Option<ExecutionRecord>, StoreError> {
        let run = || -> rusqlite::Result<Option<ExecutionRecord>> {
            let conn = self.conn();
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {EXECUTION_COLUMNS} FROM executions WHERE id = ?1"
            ))?;
            stmt.query_row([id], execution_from_row).optional()
        };
        run().map_err(|source| StoreError::GetExecution {
            id: id.to_owned(),
            source,
        })
    }

    /// Every execution of the sandbox, in the order they started (empty for an unknown id).
    pub fn list_executions(&self, sandbox_id: &str) -> Result<Vec<ExecutionRecord>, StoreError> {
        let run = || -> rusqlite::Result<Vec<ExecutionRecord>> {
            let conn = self.conn();
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {EXECUTION_COLUMNS} FROM executions WHERE sandbox_id = ?1 \
                 ORDER BY started_at, rowid"
            ))?;
            let rows = stmt.query_map([sandbox_id], execution_from_row)?;
            rows.collect()
        };
        run().map_err(|source| StoreError::ListExecutions {
            sandbox_id: sandbox_id.to_owned(),
            source,
        })
    }
}

/// Writes `result` as the outcome of execution `id`; returns the number of rows changed.
fn write_result(conn: &Connection, id: &str, result: &ExecutionResult) -> rusqlite::Result<usize> {
    // JSON has no NaN or infinity: serde_json would write `null`, which would not read back.
    let sanitized;
    let result = if result.duration_ms.is_finite() && result.cpu_time_ms.is_finite() {
        result
    } else {
        let mut copy = result.clone();
        for v in [&mut copy.duration_ms, &mut copy.cpu_time_ms] {
            if !v.is_finite() {
                *v = 0.0;
            }
        }
        sanitized = copy;
        &sanitized
    };
    let mut stmt = conn.prepare_cached(
        "UPDATE executions SET end_state = ?2, duration_ms = ?3, cpu_time_ms = ?4, \
         peak_memory_bytes = ?5, result = ?6 WHERE id = ?1",
    )?;
    stmt.execute(params![
        id,
        end_state_str(result.end_state),
        result.duration_ms,
        result.cpu_time_ms,
        result.peak_memory_bytes,
        to_json(serde_json::to_string(result))?,
    ])
}
