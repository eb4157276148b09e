//! Records the unit tests of lineage and bundles build their runs from: sandboxes, executions
//! with their results, steps, and a store in a temporary directory.

use crate::lineage::{ExecStep, Step};
use sandlot_store::Store;
use sandlot_types::{
    Artifact, EffectiveLimits, EndState, ExecError, ExecutionRecord, ExecutionResult, IdleAction,
    Language, Sandbox, SandboxState, Truncation,
};
use std::collections::BTreeMap;

pub(crate) const T0: &str = "2026-01-01T00:00:00.000000Z";

/// A store in a temporary directory (kept alive with it), as `sandlot serve` opens one.
pub(crate) fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("sandlot.db")).unwrap();
    (dir, store)
}

pub(crate) fn sandbox(id: &str, tenant: &str, state: SandboxState) -> Sandbox {
    Sandbox {
        id: id.to_owned(),
        template: "default".to_owned(),
        template_version: format!("v-{id}"),
        state,
        env: BTreeMap::from([
            ("PYTHONHASHSEED".to_owned(), "0".to_owned()),
            ("TZ".to_owned(), "UTC".to_owned()),
        ]),
        metadata: BTreeMap::new(),
        limits: EffectiveLimits {
            memory_mb: 512,
            cpu_millis: 1000,
            pids: 64,
            disk_mb: 256,
        },
        idle_timeout: 600,
        max_lifetime: 3600,
        created_at: T0.to_owned(),
        last_active_at: "2026-01-01T01:00:00.000000Z".to_owned(),
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
        tenant: tenant.to_owned(),
        tier: "isolated".to_owned(),
        network: Vec::new(),
        secrets: Vec::new(),
        contained: None,
        mounts: Vec::new(),
        port_token: None,
    }
}

pub(crate) fn artifact(path: &str, sha256: &str, size: u64) -> Artifact {
    Artifact {
        path: path.to_owned(),
        size,
        sha256: sha256.to_owned(),
        mime_type: "text/plain".to_owned(),
        change: "created".to_owned(),
        url: if sha256.is_empty() {
            String::new()
        } else {
            format!("/v1/artifacts/{sha256}")
        },
    }
}

/// An execution of `code` at `at` on `sb`, ended `end` (no result when `None`).
pub(crate) fn execution(
    id: &str,
    sb: &str,
    code: &str,
    at: &str,
    end: Option<EndState>,
    artifacts: Vec<Artifact>,
) -> ExecutionRecord {
    let result = end.map(|end_state| ExecutionResult {
        output_held: None,
        id: id.to_owned(),
        sandbox_id: sb.to_owned(),
        language: Language::Python,
        end_state,
        stdout: "out\n".to_owned(),
        stderr: String::new(),
        result: None,
        error: (end_state == EndState::Error).then(|| ExecError {
            name: "ValueError".to_owned(),
            value: "bad".to_owned(),
            traceback: vec!["line 1".to_owned(), "line 2".to_owned()],
        }),
        exit_code: None,
        outputs: Vec::new(),
        stdout_truncation: Truncation {
            kept_bytes: 4,
            dropped_bytes: 0,
        },
        stderr_truncation: Truncation {
            kept_bytes: 0,
            dropped_bytes: 0,
        },
        started_at: at.to_owned(),
        duration_ms: 1500.0,
        cpu_time_ms: 10.0,
        peak_memory_bytes: 1 << 20,
        sandbox_alive: true,
        artifacts,
        context: None,
        restarted: None,
        background_bytes: 0,
        rolled_back: false,
        rollback: None,
    });
    ExecutionRecord {
        id: id.to_owned(),
        sandbox_id: sb.to_owned(),
        code: code.to_owned(),
        language: Language::Python,
        started_at: at.to_owned(),
        result,
    }
}

pub(crate) fn exec_step(rec: ExecutionRecord, policy_version: Option<&str>) -> Step {
    Step::Execution(Box::new(ExecStep {
        rec,
        template: "default".to_owned(),
        template_version: "v1".to_owned(),
        policy_version: policy_version.map(str::to_owned),
        decisions: policy_version
            .map(|v| vec![format!("dec_{v}")])
            .unwrap_or_default(),
    }))
}

pub(crate) fn input(path: &str, sha256: &str, size: u64, at: &str, stored: bool) -> Step {
    Step::Input {
        path: path.to_owned(),
        sha256: sha256.to_owned(),
        size,
        at: at.to_owned(),
        stored,
    }
}
