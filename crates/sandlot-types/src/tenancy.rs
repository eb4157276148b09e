//! Who calls and what they may hold: principals and roles, tenants and their quotas, API keys.

use serde::{Deserialize, Serialize};

/// Who is calling: the key a request authenticated with and what it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Principal {
    /// The key's id (`key_...`), what records and audit name.
    pub key_id: String,
    /// The key's public prefix (`sl_abcd2345`), safe to show.
    pub key_prefix: String,
    pub tenant: String,
    pub role: Role,
    /// The tenant's plan (`local`, `free`, `team`, ...), what policies usually test.
    pub plan: String,
}

/// What a key may manage beyond its tenant's own resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Manages tenants, keys and policies.
    Admin,
    #[default]
    Member,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Member => "member",
        }
    }
}

/// Per-tenant quotas. An absent running-sandbox quota (`max_sandboxes` to `wait_seconds`) is
/// unlimited; an absent share (`max_paused_sandboxes` on) is the server's default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TenantQuotas {
    /// Most sandboxes running at once (paused ones do not count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sandboxes: Option<u64>,
    /// Most CPU across its running sandboxes, in thousandths of a core (their `cpu_millis`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cpu_millis: Option<u64>,
    /// Most memory across its running sandboxes, in MiB (their `memory_mb`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_mb: Option<u64>,
    /// Sandbox creations per second (a token bucket with a burst of one second's worth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creates_per_second: Option<f64>,
    /// How long a creation over quota waits in line before it fails (seconds; default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_seconds: Option<f64>,
    // Shares of what every tenant draws on. Unlike the quotas above, an absent value is the
    // server's default (`sandlot_tenancy::Share::default_limit`), never unlimited: a tenant
    // without settings must not be able to starve the others.
    /// Most paused sandboxes (each holds a uid of the server's shared pool). Absent: the server's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_paused_sandboxes: Option<u64>,
    /// Most volumes (each holds a uid of the shared pool and disk). Absent: the server's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_volumes: Option<u64>,
    /// Most snapshots. Absent: the server's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_snapshots: Option<u64>,
    /// Most bytes of saved state across its snapshots; a snapshot is refused once they hold this much. Absent: the server's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_snapshot_bytes: Option<u64>,
    /// Most bytes on the workspace disk across its sandboxes (paused ones included), snapshot
    /// copies and volumes; a write past it fails with EDQUOT, and a creation needing disk is
    /// refused once they hold this much. Absent: the server's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_disk_bytes: Option<u64>,
    /// Most templates it owns (each an environment and a zygote). Absent: the server's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_templates: Option<u64>,
    /// Most MCP sessions open at once (of the server's global pool). Absent: the server's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_mcp_sessions: Option<u64>,
    /// Most jobs queued or running at once. Absent: the server's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_jobs: Option<u64>,
    /// Most webhooks. Absent: the server's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_webhooks: Option<u64>,
    /// Most event streams open at once (`GET /v1/events`, `GET /v1/jobs/{id}/events`). Absent: the server's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_event_streams: Option<u64>,
}

/// A tenant: who owns sandboxes, snapshots, volumes and templates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tenant {
    pub name: String,
    pub plan: String,
    pub quotas: TenantQuotas,
    pub created_at: String,
}

/// `POST /v1/tenants` body; `PUT /v1/tenants/{name}` takes the same without `name`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct CreateTenant {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quotas: Option<TenantQuotas>,
}

/// `POST /v1/keys` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct CreateKey {
    /// The tenant the key acts for; it must exist.
    pub tenant: String,
    #[serde(default)]
    pub role: Role,
    /// A label to recognise it by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// An API key as listed: never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKeyInfo {
    pub id: String,
    pub prefix: String,
    pub tenant: String,
    pub role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<String>,
}

/// `POST /v1/keys` response: the only time the key itself is shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedKey {
    pub key: String,
    #[serde(flatten)]
    pub info: ApiKeyInfo,
}
