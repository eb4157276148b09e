//! The sandboxes the runtime knows: looking one up (live, or why it is gone), listing,
//! reading, deleting, and marking activity for the idle timeout.

use crate::error::{store, RuntimeError};
use crate::util::{lock, now_rfc3339};
use crate::{Entry, Runtime};
use sandlot_types::{Sandbox, SandboxState};
use std::sync::Arc;
use std::time::Instant;

/// What a tenant's sandboxes hold (see [`Runtime::tenant_usage`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantUsage {
    pub sandboxes: u64,
    pub cpu_millis: u64,
    pub memory_mb: u64,
}

impl Runtime {
    /// A live sandbox's entry, or why there is none.
    pub(crate) fn entry(&self, id: &str) -> Result<Arc<Entry>, RuntimeError> {
        if let Some(e) = lock(&self.inner.registry.sandboxes).get(id) {
            return Ok(e.clone());
        }
        Err(self.gone_or_missing(id))
    }

    /// `SandboxGone` for a sandbox the store saw end, `SandboxNotFound` for an id never seen.
    pub(crate) fn gone_or_missing(&self, id: &str) -> RuntimeError {
        match self.inner.storage.store.get_sandbox(id) {
            Ok(Some(s)) => RuntimeError::SandboxGone {
                id: id.to_string(),
                state: state_word(s.state),
                reason: s.ended_reason.unwrap_or_else(|| "it ended".into()),
            },
            _ => RuntimeError::SandboxNotFound { id: id.to_string() },
        }
    }

    /// The tenant sandbox `id` belongs to, live or recorded; `None` for an id never seen.
    pub fn sandbox_tenant(&self, id: &str) -> Option<String> {
        if let Some(e) = lock(&self.inner.registry.sandboxes).get(id) {
            return Some(lock(&e.info).tenant.clone());
        }
        match self.inner.storage.store.get_sandbox(id) {
            Ok(Some(s)) => Some(s.tenant),
            _ => None,
        }
    }

    /// The tenant snapshot `id` belongs to, if it is recorded.
    pub fn snapshot_tenant(&self, id: &str) -> Option<String> {
        match self.inner.storage.store.get_snapshot(id) {
            Ok(Some(r)) => Some(r.snapshot.tenant),
            _ => None,
        }
    }

    /// The limits of a live sandbox.
    pub fn sandbox_limits(&self, id: &str) -> Option<sandlot_types::EffectiveLimits> {
        lock(&self.inner.registry.sandboxes)
            .get(id)
            .map(|e| lock(&e.info).limits)
    }

    /// The store this runtime records into (tenancy and policy records share it).
    pub fn store(&self) -> Arc<sandlot_store::Store> {
        self.inner.storage.store.clone()
    }

    /// What `tenant`'s sandboxes hold now: how many run (or are stopped and restart on their
    /// next call), and the sum of their CPU (`cpu_millis`) and memory (`memory_mb`) limits.
    /// Paused and ended sandboxes hold nothing. Derived from the live set every time, so a
    /// quota cannot leak across deletes, crashes or restarts.
    pub fn tenant_usage(&self, tenant: &str) -> TenantUsage {
        self.inner.registry.tenant_usage(tenant)
    }

    /// How many of `tenant`'s sandboxes are paused (each holds a uid while it is). From the
    /// live set, as [`Runtime::tenant_usage`].
    pub fn tenant_paused(&self, tenant: &str) -> u64 {
        self.inner.registry.tenant_paused(tenant)
    }

    /// How many volumes `tenant` has, from the store.
    pub fn tenant_volumes(&self, tenant: &str) -> Result<u64, RuntimeError> {
        Ok(self
            .inner
            .storage
            .store
            .list_volumes()
            .map_err(store("listing volumes"))?
            .iter()
            .filter(|v| v.tenant == tenant)
            .count() as u64)
    }

    /// How many snapshots `tenant` has and the bytes of their saved state, from the store.
    /// A snapshot's workspace copy is a copy-on-write snapshot of its sandbox's and is not
    /// counted: what it costs the disk is what changes after, which nothing measures cheaply.
    pub fn tenant_snapshots(&self, tenant: &str) -> Result<(u64, u64), RuntimeError> {
        let all = self
            .inner
            .storage
            .store
            .list_snapshots()
            .map_err(store("listing snapshots"))?;
        Ok(all
            .iter()
            .filter(|r| r.snapshot.tenant == tenant)
            .fold((0, 0), |(n, bytes), r| {
                (n + 1, bytes + r.snapshot.state_bytes)
            }))
    }

    /// How many templates `tenant` owns (those made before tenants existed are the tenant
    /// `default`'s; the template `default` is nobody's).
    pub fn tenant_templates(&self, tenant: &str) -> Result<u64, RuntimeError> {
        Ok(self
            .all_templates()
            .iter()
            .filter(|t| t.spec.name != "default" && t.tenant == tenant)
            .count() as u64)
    }

    /// Every live sandbox's entry, at this moment.
    pub(crate) fn all_entries(&self) -> Vec<Arc<Entry>> {
        self.inner.registry.entries()
    }

    /// Sandboxes that have not ended, or every recorded one with `include_ended`.
    pub async fn list_sandboxes(&self, include_ended: bool) -> Result<Vec<Sandbox>, RuntimeError> {
        if include_ended {
            return self
                .inner
                .storage
                .store
                .list_sandboxes(true)
                .map_err(store("listing sandboxes"));
        }
        let mut v: Vec<Sandbox> = lock(&self.inner.registry.sandboxes)
            .values()
            .map(|e| lock(&e.info).clone())
            .collect();
        v.sort_by(|a, b| a.created_at.cmp(&b.created_at));
        Ok(v)
    }

    /// A sandbox that has not ended (running, stopped or failed); `SandboxGone` for one that
    /// ended, `SandboxNotFound` for an id never seen.
    pub async fn get_sandbox(&self, id: &str) -> Result<Sandbox, RuntimeError> {
        let e = self.entry(id)?;
        let info = lock(&e.info).clone();
        Ok(info)
    }

    /// Deletes a sandbox in any state (running, stopped, failed): its processes, files,
    /// cgroup and uid go. Answers once; a sandbox already deleted, or being deleted by a
    /// concurrent request, is not found.
    pub async fn delete_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        let missing = || RuntimeError::SandboxNotFound { id: id.to_string() };
        let e = lock(&self.inner.registry.sandboxes)
            .get(id)
            .cloned()
            .ok_or_else(missing)?;
        if self
            .end(&e, SandboxState::Deleted, "deleted by request")
            .await
        {
            Ok(())
        } else {
            Err(missing())
        }
    }

    /// Marks a sandbox active now (it restarts the idle timeout).
    pub(crate) fn touch(&self, e: &Entry) {
        *lock(&e.last_active) = Instant::now();
        lock(&e.info).last_active_at = now_rfc3339();
    }
}

fn state_word(s: SandboxState) -> &'static str {
    s.as_str()
}
