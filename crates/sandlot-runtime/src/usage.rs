//! What a sandbox uses right now (its cgroup's CPU time and memory), and the runtime's own
//! gauges (sandboxes by state, creation queue, zygotes, the uid pool) that `/metrics` reads at each scrape.
//!
//! Both read what the runtime already keeps (its map of sandboxes, its counters, the cgroup
//! files the kernel maintains, v1 or v2 alike through `sandlot_jail::cgroup`): nothing is
//! counted on the hot path for them.

use crate::error::RuntimeError;
use crate::util::{lock, now_rfc3339};
use crate::Runtime;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

/// One sandbox's resource use, read from its cgroup.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct SandboxUsage {
    pub sandbox_id: String,
    /// Its state (`running`, `paused`, `stopped`, `failed`): a sandbox without processes uses
    /// nothing now.
    #[serde(default)]
    pub state: String,
    /// CPU time of all its processes since they started, in milliseconds.
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
    /// The runtime's gauges now. Cheap: a walk of the in-memory maps, no I/O.
    pub fn gauges(&self) -> RuntimeGauges {
        let mut by_state: BTreeMap<&'static str, u64> = BTreeMap::new();
        // Every state a live sandbox can be in is reported, at 0 when none is, so a series
        // does not vanish when its last sandbox leaves it.
        for s in ["running", "stopped", "failed", "paused"] {
            by_state.insert(s, 0);
        }
        let entries: Vec<_> = self.inner.registry.entries();
        for e in entries {
            *by_state.entry(e.state().as_str()).or_default() += 1;
        }
        let zygotes = self
            .all_templates()
            .iter()
            .map(|t| {
                // A zygote being (re)started holds the write lock: it is not up yet.
                let up = t
                    .zygote
                    .try_read()
                    .ok()
                    .and_then(|z| z.as_ref().map(|z| z.alive()))
                    .unwrap_or(false);
                (t.spec.name.clone(), up)
            })
            .collect();
        RuntimeGauges {
            sandboxes_by_state: by_state
                .into_iter()
                .map(|(s, n)| (s.to_owned(), n))
                .collect(),
            creating: self.inner.registry.creating.load(Ordering::SeqCst) as u64,
            zygotes,
        }
    }

    /// The host uid pool now: free and quarantined uids by range, held ones by what holds
    /// them. Cheap: counts in memory, and for the builders' range a look at the few lock files
    /// of `<data-dir>/run/build` ([`crate::uids::builders_held`]).
    pub fn uid_use(&self) -> crate::uids::UidUse {
        let usage = lock(&self.inner.registry.slots).usage();
        let data_dir = &self.inner.storage.data_dir;
        usage.with_builders(crate::uids::builders_held(
            &crate::uids::builder_state_dir(data_dir),
            &crate::uids::builder_uids(data_dir),
        ))
    }

    /// What the sandbox `id` uses now, from its cgroup (a sandbox without processes, paused or
    /// stopped, reads as using nothing). Reads a few files under the cgroup mount: quick, but
    /// file I/O all the same.
    pub fn sandbox_usage(&self, id: &str) -> Result<SandboxUsage, RuntimeError> {
        let e = self.entry(id)?;
        let (state, limit_mb) = {
            let info = lock(&e.info);
            (info.state, info.limits.memory_mb)
        };
        let live = e.live().is_some();
        let (cpu, memory, peak, pids) = if live {
            (
                e.cgroup.cpu_time(),
                e.cgroup.current_memory(),
                e.cgroup.peak_memory(),
                e.cgroup.pids().len() as u64,
            )
        } else {
            Default::default()
        };
        Ok(SandboxUsage {
            sandbox_id: e.id.clone(),
            state: state.as_str().to_owned(),
            cpu_time_ms: (cpu.as_secs_f64() * 1e6).round() / 1e3,
            memory_bytes: memory,
            memory_peak_bytes: peak.max(memory),
            memory_limit_bytes: limit_mb.saturating_mul(1 << 20),
            pids,
            at: now_rfc3339(),
        })
    }

    /// Bytes the workspace of sandbox `id` uses (on Btrfs as of the last transaction commit,
    /// at most 30 s old), for E2B's sandbox metrics. Blocking: a quota lookup.
    pub fn workspace_bytes(&self, id: &str) -> Result<u64, RuntimeError> {
        let e = self.entry(id)?;
        self.workspaces()?
            .usage(&e.id)
            .map_err(|err| crate::workspace::workspace_error("usage", err))
    }

    /// What the recovery at this server's start found and how long it took.
    pub fn recovery(&self) -> Option<crate::Recovery> {
        crate::util::lock(&self.inner.registry.recovery).clone()
    }
}
