//! Rows and columns: the column lists the statements select, and the conversions between a
//! row and the wire model of [`sandlot_types`] (enum columns as the API's snake_case strings,
//! nested values as JSON text).

use rusqlite::types::Type;
use rusqlite::Row;
use sandlot_types::{
    Context, EndState, ExecutionRecord, IdleAction, Language, Sandbox, SandboxState, Snapshot,
};

pub(crate) const SANDBOX_COLUMNS: &str =
    "id, template, template_version, state, env, metadata, limits, \
     idle_timeout, max_lifetime, created_at, last_active_at, expires_at, ended_reason, \
     restart_count, last_restart, on_idle, forked_from, from_snapshot, paused_at, last_restore, \
     volumes, ports, all_ports, tenant, tier, network, secrets, contained";
/// How many columns [`SANDBOX_COLUMNS`] names (a column selected after them has this index).
pub(crate) const SANDBOX_COLUMN_COUNT: usize = 28;

pub(crate) const SNAPSHOT_COLUMNS: &str =
    "id, name, sandbox_id, template, template_version, created_at, \
     state_bytes, state_sha256, workspace, variables, not_captured, contexts, version, tenant";

pub(crate) const EXECUTION_COLUMNS: &str = "id, sandbox_id, code, language, started_at, result";

pub(crate) fn sandbox_from_row(row: &Row<'_>) -> rusqlite::Result<Sandbox> {
    Ok(Sandbox {
        id: row.get(0)?,
        template: row.get(1)?,
        template_version: row.get(2)?,
        state: state_from_row(row, 3)?,
        env: json_column(row, 4, |s| serde_json::from_str(s))?,
        metadata: json_column(row, 5, |s| serde_json::from_str(s))?,
        limits: json_column(row, 6, |s| serde_json::from_str(s))?,
        idle_timeout: row.get(7)?,
        max_lifetime: row.get(8)?,
        created_at: row.get(9)?,
        last_active_at: row.get(10)?,
        expires_at: row.get(11)?,
        ended_reason: row.get(12)?,
        restart_count: row.get(13)?,
        last_restart: match row.get::<_, Option<String>>(14)? {
            None => None,
            Some(text) => {
                Some(serde_json::from_str(&text).map_err(|e| conversion_failure(14, Box::new(e)))?)
            }
        },
        on_idle: enum_column(row, 15, "idle action", |s| {
            Some(match s {
                "delete" => IdleAction::Delete,
                "pause" => IdleAction::Pause,
                _ => return None,
            })
        })?,
        forked_from: row.get(16)?,
        from_snapshot: row.get(17)?,
        paused_at: row.get(18)?,
        last_restore: match row.get::<_, Option<String>>(19)? {
            None => None,
            Some(text) => {
                Some(serde_json::from_str(&text).map_err(|e| conversion_failure(19, Box::new(e)))?)
            }
        },
        volumes: json_column(row, 20, |s| decode_mounts(s).map(|m| m.0))?,
        ports: json_column(row, 21, |s| serde_json::from_str(s))?,
        all_ports: row.get(22)?,
        tenant: row.get(23)?,
        tier: row.get(24)?,
        network: json_column(row, 25, |s| serde_json::from_str(s))?,
        secrets: json_column(row, 26, |s| serde_json::from_str(s))?,
        contained: row.get(27)?,
        mounts: json_column(row, 20, |s| decode_mounts(s).map(|m| m.1))?,
        port_token: None,
    })
}

/// The `volumes` column of a sandbox: the list of its volumes, or — when it mounts host paths
/// too (issue 23's trusted tier) — `{"volumes": [...], "host_mounts": [...]}`. The same column
/// carries both so that no schema version is spent on it; a row written before reads as a list.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
enum MountsColumn {
    Volumes(Vec<sandlot_types::VolumeMount>),
    Both {
        volumes: Vec<sandlot_types::VolumeMount>,
        host_mounts: Vec<sandlot_types::HostMount>,
    },
}

pub(crate) fn mounts_json(s: &Sandbox) -> serde_json::Result<String> {
    if s.mounts.is_empty() {
        serde_json::to_string(&s.volumes)
    } else {
        serde_json::to_string(&MountsColumn::Both {
            volumes: s.volumes.clone(),
            host_mounts: s.mounts.clone(),
        })
    }
}

#[allow(clippy::type_complexity)]
fn decode_mounts(
    text: &str,
) -> serde_json::Result<(
    Vec<sandlot_types::VolumeMount>,
    Vec<sandlot_types::HostMount>,
)> {
    Ok(match serde_json::from_str(text)? {
        MountsColumn::Volumes(v) => (v, Vec::new()),
        MountsColumn::Both {
            volumes,
            host_mounts,
        } => (volumes, host_mounts),
    })
}

pub(crate) const VOLUME_COLUMNS: &str = "name, size_mb, created_at, host_uid, tenant, workspace";

pub(crate) fn volume_from_row(row: &Row<'_>) -> rusqlite::Result<VolumeRecord> {
    Ok(VolumeRecord {
        name: row.get(0)?,
        size_mb: row.get(1)?,
        created_at: row.get(2)?,
        host_uid: row.get(3)?,
        tenant: row.get(4)?,
        workspace: row.get(5)?,
    })
}

/// A volume as recorded: its wire fields (without who mounts it, which the runtime knows)
/// and the host uid its files belong to while no sandbox mounts it read-write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeRecord {
    pub name: String,
    pub size_mb: u64,
    pub created_at: String,
    pub host_uid: u32,
    pub tenant: String,
    /// The workspace id that holds its files.
    pub workspace: String,
}

/// A snapshot as recorded: the wire model plus the sha256 of its state file's body and the
/// code contexts it holds (ids and creation times), which a sandbox started from it gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotRecord {
    pub snapshot: Snapshot,
    pub state_sha256: String,
    pub contexts: Vec<Context>,
}

pub(crate) fn snapshot_from_row(row: &Row<'_>) -> rusqlite::Result<SnapshotRecord> {
    Ok(SnapshotRecord {
        snapshot: Snapshot {
            id: row.get(0)?,
            name: row.get(1)?,
            sandbox_id: row.get(2)?,
            template: row.get(3)?,
            template_version: row.get(4)?,
            created_at: row.get(5)?,
            state_bytes: row.get(6)?,
            workspace: row.get(8)?,
            variables: row.get(9)?,
            not_captured: json_column(row, 10, |s| serde_json::from_str(s))?,
            version: row.get(12)?,
            tenant: row.get(13)?,
        },
        state_sha256: row.get(7)?,
        contexts: json_column(row, 11, |s| serde_json::from_str(s))?,
    })
}

pub(crate) fn execution_from_row(row: &Row<'_>) -> rusqlite::Result<ExecutionRecord> {
    let result: Option<String> = row.get(5)?;
    let result = match result {
        None => None,
        Some(text) => {
            Some(serde_json::from_str(&text).map_err(|e| conversion_failure(5, Box::new(e)))?)
        }
    };
    Ok(ExecutionRecord {
        id: row.get(0)?,
        sandbox_id: row.get(1)?,
        code: row.get(2)?,
        language: language_from_row(row, 3)?,
        started_at: row.get(4)?,
        result,
    })
}

/// The `last_restart` column of a sandbox: JSON text, or NULL.
pub(crate) fn last_restart_json(s: &Sandbox) -> rusqlite::Result<Option<String>> {
    s.last_restart
        .as_ref()
        .map(|r| to_json(serde_json::to_string(r)))
        .transpose()
}

/// Turns a JSON encoding failure into the error rusqlite uses for values it cannot bind.
pub(crate) fn to_json(encoded: serde_json::Result<String>) -> rusqlite::Result<String> {
    encoded.map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))
}

/// Decodes the JSON text column `idx` with `decode`.
pub(crate) fn json_column<T>(
    row: &Row<'_>,
    idx: usize,
    decode: impl FnOnce(&str) -> serde_json::Result<T>,
) -> rusqlite::Result<T> {
    let text: String = row.get(idx)?;
    decode(&text).map_err(|e| conversion_failure(idx, Box::new(e)))
}

pub(crate) fn conversion_failure(
    idx: usize,
    e: Box<dyn std::error::Error + Send + Sync + 'static>,
) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(idx, Type::Text, e)
}

/// A stored enum value this build does not know.
#[derive(Debug, thiserror::Error)]
#[error("unknown {kind} {value:?}")]
pub(crate) struct UnknownValue {
    kind: &'static str,
    value: String,
}

pub(crate) fn enum_column<T>(
    row: &Row<'_>,
    idx: usize,
    kind: &'static str,
    parse: impl FnOnce(&str) -> Option<T>,
) -> rusqlite::Result<T> {
    let text: String = row.get(idx)?;
    parse(&text)
        .ok_or_else(|| conversion_failure(idx, Box::new(UnknownValue { kind, value: text })))
}

pub(crate) fn state_str(state: SandboxState) -> &'static str {
    state.as_str()
}

pub(crate) fn state_from_row(row: &Row<'_>, idx: usize) -> rusqlite::Result<SandboxState> {
    enum_column(row, idx, "sandbox state", |s| {
        Some(match s {
            "running" => SandboxState::Running,
            "stopped" => SandboxState::Stopped,
            "failed" => SandboxState::Failed,
            "deleted" => SandboxState::Deleted,
            "expired" => SandboxState::Expired,
            "lost" => SandboxState::Lost,
            "paused" => SandboxState::Paused,
            _ => return None,
        })
    })
}

pub(crate) fn language_from_row(row: &Row<'_>, idx: usize) -> rusqlite::Result<Language> {
    enum_column(row, idx, "language", |s| {
        Some(match s {
            "python" => Language::Python,
            "bash" => Language::Bash,
            "javascript" => Language::Javascript,
            "typescript" => Language::Typescript,
            _ => return None,
        })
    })
}

pub(crate) fn end_state_str(end_state: EndState) -> &'static str {
    match end_state {
        EndState::Ok => "ok",
        EndState::Error => "error",
        EndState::Timeout => "timeout",
        EndState::Interrupted => "interrupted",
        EndState::Oom => "oom",
        EndState::Killed => "killed",
    }
}

pub(crate) fn parse_rfc3339(s: &str) -> Option<time::OffsetDateTime> {
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()
}
