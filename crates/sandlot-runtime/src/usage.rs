//! What a sandbox uses right now (its cgroup's CPU time and memory), and the runtime's own
//! gauges (sandboxes by state, creation queue, zygotes) that `/metrics` reads at each scrape.
//!
//! Skeleton: the metrics work fills these in.

use crate::Runtime;

/// One sandbox's resource use, read from its cgroup.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct SandboxUsage {
    pub sandbox_id: String,
    /// CPU time of all its processes since it started, in milliseconds.
    pub cpu_time_ms: f64,
    /// Memory in use now, and the most it has used, in bytes.
    pub memory_bytes: u64,
    pub memory_peak_bytes: u64,
    /// Its memory limit in bytes.
    pub memory_limit_bytes: u64,
    /// Processes now.
    pub pids: u64,
    /// When it was read (RFC 3339).
    pub at: String,
}

/// The runtime's gauges at one moment.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RuntimeGauges {
    /// Live sandboxes by state (`running`, `stopped`, `failed`, `paused`).
    pub sandboxes_by_state: Vec<(String, u64)>,
    /// Creations being served and waiting.
    pub creating: u64,
    /// Zygotes by template and whether each is up.
    pub zygotes: Vec<(String, bool)>,
}

impl Runtime {
    /// The runtime's gauges now.
    pub fn gauges(&self) -> RuntimeGauges {
        RuntimeGauges::default()
    }

    /// What the recovery at this server's start found and how long it took.
    pub fn recovery(&self) -> Option<crate::Recovery> {
        crate::util::lock(&self.inner.recovery).clone()
    }
}
