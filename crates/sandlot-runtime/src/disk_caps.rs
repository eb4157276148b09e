//! Per-tenant disk caps (issue 19): every workspace a tenant owns — its sandboxes' (paused ones
//! included), its snapshots' copies, its volumes — counts toward one level-1 Btrfs qgroup of
//! the tenant's (`sandlot_workspace::Workspaces::set_tenant_limit`), whose limit is the
//! tenant's `max_disk_bytes`. A write past it fails with `EDQUOT` in whichever of them makes
//! it; the API refuses creations that need new disk while the tenant is at its cap (429
//! `tenant_quota_exceeded`, `sandlot-service/src/shares.rs`).
//!
//! Membership is set where the owner becomes known: a volume and a snapshot copy are made in
//! the group (`create_for`, `snapshot_for`: the kernel's qgroup inherit, in the same
//! transaction); a sandbox's workspace, made before it has an owner (the pool boots sandboxes
//! for nobody), joins its tenant's group when it is adopted, before any of the tenant's code
//! runs in it (`assign`; exact under simple quotas, whose bytes are all exclusive). The
//! relations are on disk and survive a restart; [`Runtime::repair_disk_groups`] assigns every
//! recorded workspace again at startup (a no-op for those already in place).

use crate::error::RuntimeError;
use crate::util::lock;
use crate::Runtime;

impl Runtime {
    /// Sets `tenant`'s cap on disk bytes (`None`: none, the operator's tenant). Blocking.
    pub fn set_tenant_disk_cap(
        &self,
        tenant: &str,
        bytes: Option<u64>,
    ) -> Result<(), RuntimeError> {
        self.workspaces()?
            .set_tenant_limit(tenant, bytes)
            .map_err(|e| crate::workspace::workspace_error("set_tenant_limit", e))
    }

    /// The bytes `tenant`'s workspaces use together, as of the last transaction commit.
    pub fn tenant_disk_bytes(&self, tenant: &str) -> Result<u64, RuntimeError> {
        self.workspaces()?
            .tenant_usage(tenant)
            .map(|(used, _)| used)
            .map_err(|e| crate::workspace::workspace_error("tenant_usage", e))
    }

    /// Puts workspace `id` in `tenant`'s group. Blocking.
    pub(crate) fn assign_workspace(&self, id: &str, tenant: &str) -> Result<(), RuntimeError> {
        self.workspaces()?
            .assign(id, tenant)
            .map_err(|e| crate::workspace::workspace_error("assign", e))
    }

    /// Assigns every recorded workspace (live sandboxes, snapshots, volumes) to its tenant's
    /// group again, repairing any relation a crash or an older version left out. Blocking.
    pub(crate) fn repair_disk_groups(&self) {
        let Ok(ws) = self.workspaces() else { return };
        let mut owned: Vec<(String, String)> = Vec::new();
        for e in self.all_entries() {
            let info = lock(&e.info);
            if !info.state.is_ended() {
                owned.push((info.id.clone(), info.tenant.clone()));
            }
        }
        if let Ok(snaps) = self.inner.storage.store.list_snapshots() {
            owned.extend(
                snaps
                    .into_iter()
                    .map(|r| (r.snapshot.id, r.snapshot.tenant)),
            );
        }
        if let Ok(vols) = self.inner.storage.store.list_volumes() {
            owned.extend(vols.into_iter().map(|v| (v.workspace, v.tenant)));
        }
        for (id, tenant) in owned {
            match ws.assign(&id, &tenant) {
                Ok(()) | Err(sandlot_workspace::WorkspaceError::NotFound { .. }) => {}
                Err(e) => {
                    tracing::warn!(workspace = %id, %tenant, error = %e, "could not put a workspace in its tenant's disk group")
                }
            }
        }
    }
}
