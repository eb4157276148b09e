//! The schema and its migrations (`PRAGMA user_version`), and opening a file in WAL mode: what
//! [`crate::Store::open`] does before the first statement.

use crate::{console, jobs, lineage, reviews, StoreError};
use rusqlite::{Connection, TransactionBehavior};
use std::time::{Duration, Instant};

/// How long a statement waits for a lock held by another connection before it fails.
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The schema, one migration per version: `MIGRATIONS[n]` takes `user_version` `n` to `n + 1`.
/// Never edit a migration that has shipped; append a new one.
pub(crate) const MIGRATIONS: &[&str] = &[
    SCHEMA_V1,
    SCHEMA_V2,
    SCHEMA_V3,
    SCHEMA_V4,
    SCHEMA_V5,
    jobs::SCHEMA_V6,
    lineage::SCHEMA_V7,
    SCHEMA_V8,
    SCHEMA_V9,
    reviews::SCHEMA_V10,
    console::SCHEMA_V11,
];

pub(crate) const SCHEMA_V1: &str = "
CREATE TABLE sandboxes (
    id               TEXT PRIMARY KEY NOT NULL,
    template         TEXT NOT NULL,
    template_version TEXT NOT NULL,
    state            TEXT NOT NULL,
    env              TEXT NOT NULL,
    metadata         TEXT NOT NULL,
    limits           TEXT NOT NULL,
    idle_timeout     INTEGER NOT NULL,
    max_lifetime     INTEGER NOT NULL,
    created_at       TEXT NOT NULL,
    last_active_at   TEXT NOT NULL,
    expires_at       TEXT NOT NULL,
    ended_reason     TEXT
);
CREATE INDEX sandboxes_state_created ON sandboxes (state, created_at);
CREATE INDEX sandboxes_created ON sandboxes (created_at);

CREATE TABLE executions (
    id                TEXT PRIMARY KEY NOT NULL,
    sandbox_id        TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
    language          TEXT NOT NULL,
    code              TEXT NOT NULL,
    started_at        TEXT NOT NULL,
    end_state         TEXT,
    duration_ms       REAL,
    cpu_time_ms       REAL,
    peak_memory_bytes INTEGER,
    result            TEXT
);
CREATE INDEX executions_sandbox_started ON executions (sandbox_id, started_at);
CREATE INDEX executions_unfinished ON executions (id) WHERE result IS NULL;
";

/// Version 2: restarts in place and workspaces that outlive the server.
pub(crate) const SCHEMA_V2: &str = "
ALTER TABLE sandboxes ADD COLUMN restart_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN last_restart TEXT;
ALTER TABLE sandboxes ADD COLUMN host_uid INTEGER;
";

/// Version 3: pause and resume, forks and snapshots.
pub(crate) const SCHEMA_V3: &str = "
ALTER TABLE sandboxes ADD COLUMN on_idle TEXT NOT NULL DEFAULT 'delete';
ALTER TABLE sandboxes ADD COLUMN forked_from TEXT;
ALTER TABLE sandboxes ADD COLUMN from_snapshot TEXT;
ALTER TABLE sandboxes ADD COLUMN paused_at TEXT;
ALTER TABLE sandboxes ADD COLUMN last_restore TEXT;
ALTER TABLE sandboxes ADD COLUMN volumes TEXT NOT NULL DEFAULT '[]';

CREATE TABLE volumes (
    name       TEXT PRIMARY KEY NOT NULL,
    size_mb    INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    host_uid   INTEGER NOT NULL
);

CREATE TABLE snapshots (
    id               TEXT PRIMARY KEY NOT NULL,
    name             TEXT,
    sandbox_id       TEXT NOT NULL,
    template         TEXT NOT NULL,
    template_version TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    state_bytes      INTEGER NOT NULL,
    state_sha256     TEXT NOT NULL,
    workspace        INTEGER NOT NULL,
    variables        INTEGER NOT NULL,
    not_captured     TEXT NOT NULL,
    contexts         TEXT NOT NULL,
    version          INTEGER NOT NULL
);
CREATE INDEX snapshots_created ON snapshots (created_at);
";

/// Version 4: ports a sandbox exposes through the server.
pub(crate) const SCHEMA_V4: &str = "
ALTER TABLE sandboxes ADD COLUMN ports TEXT NOT NULL DEFAULT '[]';
ALTER TABLE sandboxes ADD COLUMN all_ports INTEGER NOT NULL DEFAULT 0;
";

/// Version 5: tenants and their keys, tiers, egress, policy decisions, guardrail findings.
/// Records written before it belong to the tenant `default`.
pub(crate) const SCHEMA_V5: &str = "
ALTER TABLE sandboxes ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
ALTER TABLE sandboxes ADD COLUMN tier TEXT NOT NULL DEFAULT 'isolated';
ALTER TABLE sandboxes ADD COLUMN network TEXT NOT NULL DEFAULT '[]';
ALTER TABLE sandboxes ADD COLUMN secrets TEXT NOT NULL DEFAULT '[]';
ALTER TABLE sandboxes ADD COLUMN contained TEXT;
CREATE INDEX sandboxes_tenant ON sandboxes (tenant, created_at);
ALTER TABLE snapshots ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
ALTER TABLE volumes ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';

CREATE TABLE tenants (
    name       TEXT PRIMARY KEY NOT NULL,
    plan       TEXT NOT NULL,
    quotas     TEXT NOT NULL,
    created_at TEXT NOT NULL
);

CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY NOT NULL,
    prefix     TEXT NOT NULL UNIQUE,
    sha256     TEXT NOT NULL,
    tenant     TEXT NOT NULL REFERENCES tenants (name),
    role       TEXT NOT NULL,
    name       TEXT,
    created_at TEXT NOT NULL,
    revoked_at TEXT
);

CREATE TABLE template_owners (
    name   TEXT PRIMARY KEY NOT NULL,
    tenant TEXT NOT NULL
);

CREATE TABLE artifact_owners (
    sha256 TEXT NOT NULL,
    tenant TEXT NOT NULL,
    PRIMARY KEY (sha256, tenant)
) WITHOUT ROWID;

CREATE TABLE decisions (
    id          TEXT PRIMARY KEY NOT NULL,
    at          TEXT NOT NULL,
    gate        TEXT NOT NULL,
    key_id      TEXT,
    tenant      TEXT,
    resource    TEXT NOT NULL,
    allowed     INTEGER NOT NULL,
    policies    TEXT NOT NULL,
    reason      TEXT NOT NULL,
    version     TEXT NOT NULL,
    latency_us  REAL NOT NULL,
    detail      TEXT
);
CREATE INDEX decisions_at ON decisions (at);

CREATE TABLE egress_events (
    id          INTEGER PRIMARY KEY,
    sandbox_id  TEXT NOT NULL,
    at          TEXT NOT NULL,
    host        TEXT NOT NULL,
    port        INTEGER NOT NULL,
    ip          TEXT,
    method      TEXT NOT NULL,
    allowed     INTEGER NOT NULL,
    reason      TEXT NOT NULL,
    bytes_up    INTEGER NOT NULL,
    bytes_down  INTEGER NOT NULL,
    decision_id TEXT
);
CREATE INDEX egress_sandbox ON egress_events (sandbox_id, id);

CREATE TABLE findings (
    id           INTEGER PRIMARY KEY,
    sandbox_id   TEXT NOT NULL,
    execution_id TEXT,
    at           TEXT NOT NULL,
    rule         TEXT NOT NULL,
    kind         TEXT NOT NULL,
    stream       TEXT NOT NULL,
    sha256       TEXT NOT NULL,
    outcome      TEXT NOT NULL,
    decision_id  TEXT
);
CREATE INDEX findings_sandbox ON findings (sandbox_id, id);
";

/// Port capability URLs can be rotated: their MAC covers the sandbox's epoch.
pub(crate) const SCHEMA_V8: &str = "
CREATE TABLE port_epochs (
    sandbox_id TEXT PRIMARY KEY NOT NULL,
    epoch      INTEGER NOT NULL,
    rotated_at TEXT NOT NULL
) WITHOUT ROWID;
";

/// Volume and template names are per tenant: both tables are keyed by `(tenant, name)`. A
/// volume records the workspace that holds its files (`vol_<name>` for the volumes made before,
/// which keep theirs); a template owner row made before says its spec file is the flat
/// `templates/<name>.json` of the data dir (`flat`), later ones are `templates/<tenant>/`.
pub(crate) const SCHEMA_V9: &str = "
CREATE TABLE volumes_v9 (
    tenant     TEXT NOT NULL,
    name       TEXT NOT NULL,
    size_mb    INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    host_uid   INTEGER NOT NULL,
    workspace  TEXT NOT NULL,
    PRIMARY KEY (tenant, name)
);
INSERT INTO volumes_v9 (tenant, name, size_mb, created_at, host_uid, workspace)
    SELECT tenant, name, size_mb, created_at, host_uid, 'vol_' || name FROM volumes;
DROP TABLE volumes;
ALTER TABLE volumes_v9 RENAME TO volumes;

CREATE TABLE template_owners_v9 (
    tenant TEXT NOT NULL,
    name   TEXT NOT NULL,
    flat   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, name)
) WITHOUT ROWID;
INSERT INTO template_owners_v9 (tenant, name, flat) SELECT tenant, name, 1 FROM template_owners;
DROP TABLE template_owners;
ALTER TABLE template_owners_v9 RENAME TO template_owners;
";

/// The schema version this build writes and understands.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Switches the database to WAL and returns the journal mode it is now in. Switching takes an
/// exclusive lock and SQLite answers `SQLITE_BUSY` at once instead of waiting for it (two
/// processes opening a new file together), so this retries for up to [`BUSY_TIMEOUT`].
pub(crate) fn set_wal(conn: &Connection) -> rusqlite::Result<String> {
    let start = Instant::now();
    loop {
        match conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0)) {
            Err(e)
                if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                    && start.elapsed() < BUSY_TIMEOUT =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// Applies the migrations the database lacks, in one immediate transaction (so two processes
/// opening a new file at once cannot both create the schema).
pub(crate) fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let err = |version| move |source| StoreError::Migrate { version, source };
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(err(SCHEMA_VERSION))?;
    let found: i64 = tx
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(err(SCHEMA_VERSION))?;
    let Ok(start) = usize::try_from(found) else {
        return Err(StoreError::UnsupportedSchema {
            found,
            supported: SCHEMA_VERSION,
        });
    };
    if start > MIGRATIONS.len() {
        return Err(StoreError::UnsupportedSchema {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    if start == MIGRATIONS.len() {
        return Ok(());
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(start) {
        let version = index as i64 + 1;
        tx.execute_batch(sql).map_err(err(version))?;
        tx.pragma_update(None, "user_version", version)
            .map_err(err(version))?;
    }
    tx.commit().map_err(err(SCHEMA_VERSION))
}
