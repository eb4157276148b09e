//! Lifecycle events: what happened to a sandbox, as the runtime tells whoever listens.

use serde::{Deserialize, Serialize};

/// What happened to a sandbox, as the runtime tells it to whoever listens (the event stream,
/// webhooks, metrics, the audit log), whichever interface asked for it (REST, E2B, MCP, a job,
/// the server itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LifecycleKind {
    /// Created and running (from a template, a fork or a snapshot; `detail.source` says which).
    Created,
    /// An execution finished (`execution_id`; `detail`: end state, duration, CPU, memory).
    Executed,
    Paused,
    Resumed,
    /// Forked into children (`detail.children`); each child also has its `created`.
    Forked,
    /// Its processes restarted in place (`detail.reason`).
    Restarted,
    /// Its processes stopped (the server shut down, or a restart could not boot).
    Stopped,
    /// Deleted by a request.
    Killed,
    /// Ended by its idle timeout or maximum lifetime (`detail.reason`).
    Expired,
    /// Contained after a guardrail finding (`detail.rule`).
    Contained,
    /// Failed while starting or restarting, or lost with the server.
    Failed,
}

impl LifecycleKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LifecycleKind::Created => "created",
            LifecycleKind::Executed => "executed",
            LifecycleKind::Paused => "paused",
            LifecycleKind::Resumed => "resumed",
            LifecycleKind::Forked => "forked",
            LifecycleKind::Restarted => "restarted",
            LifecycleKind::Stopped => "stopped",
            LifecycleKind::Killed => "killed",
            LifecycleKind::Expired => "expired",
            LifecycleKind::Contained => "contained",
            LifecycleKind::Failed => "failed",
        }
    }
}

/// One lifecycle event. `seq` counts from 1 for each server run (so a consumer can tell what it
/// missed); `at` is RFC 3339 UTC.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LifecycleEvent {
    pub seq: u64,
    pub kind: LifecycleKind,
    pub sandbox_id: String,
    pub tenant: String,
    pub at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_id: Option<String>,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub detail: serde_json::Value,
}
