//! Fair shares: per-tenant caps on what every tenant draws from one pool (uids, disk, MCP
//! sessions, job slots, webhook deliveries, event streams), so that no tenant can starve
//! another.
//!
//! What a tenant holds is counted from the live state each time (the runtime's sandboxes, the
//! store's volumes, snapshots, templates, jobs and webhooks, the MCP server's sessions), never
//! counted up and down by hand. Streams, which exist only while a connection is open, are
//! counted by the [`Slot`]s their connections hold: a slot is given back when it is dropped,
//! however the connection ends.
//!
//! Check and create are one step per tenant and share: [`crate::Quotas::claim`] takes the
//! tenant's lock for that share, counts, and the returned [`Claim`] keeps the lock until the
//! creation is done (and visible to the next count), so concurrent creations cannot pass a cap.
//!
//! The operator (an admin of the tenant `default`) is never capped: callers skip the claim.

use crate::error::QuotaError;
use sandlot_types::{Tenant, TenantQuotas};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// A shared resource a tenant holds a share of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Share {
    PausedSandboxes,
    Volumes,
    Snapshots,
    SnapshotBytes,
    /// Bytes on the workspace disk: its sandboxes' (paused ones included), its snapshots'
    /// copies and its volumes together, enforced by the kernel (one Btrfs qgroup per tenant)
    /// and checked before a creation that needs new disk.
    DiskBytes,
    Templates,
    McpSessions,
    Jobs,
    Webhooks,
    EventStreams,
}

impl Share {
    pub const ALL: [Share; 10] = [
        Share::PausedSandboxes,
        Share::Volumes,
        Share::Snapshots,
        Share::SnapshotBytes,
        Share::DiskBytes,
        Share::Templates,
        Share::McpSessions,
        Share::Jobs,
        Share::Webhooks,
        Share::EventStreams,
    ];

    /// The quota's name, as `TenantQuotas` spells it.
    pub fn quota(self) -> &'static str {
        match self {
            Share::PausedSandboxes => "max_paused_sandboxes",
            Share::Volumes => "max_volumes",
            Share::Snapshots => "max_snapshots",
            Share::SnapshotBytes => "max_snapshot_bytes",
            Share::DiskBytes => "max_disk_bytes",
            Share::Templates => "max_templates",
            Share::McpSessions => "max_mcp_sessions",
            Share::Jobs => "max_jobs",
            Share::Webhooks => "max_webhooks",
            Share::EventStreams => "max_event_streams",
        }
    }

    /// The cap of a tenant that sets none. Sized so that 16 tenants at every cap fit one
    /// server of 65,536 uids and one disk: paused sandboxes and volumes take 16 × (1,024 +
    /// 1,024) = 32,768 uids, half the pool, leaving the rest to running sandboxes; MCP
    /// sessions are a sixteenth of the global 1,024; 16 × 64 GiB of disk is the workspace
    /// image's largest size (1 TiB).
    pub fn default_limit(self) -> u64 {
        match self {
            Share::PausedSandboxes => 1024,
            Share::Volumes => 1024,
            Share::Snapshots => 256,
            Share::SnapshotBytes => 16 << 30,
            Share::DiskBytes => 64 << 30,
            Share::Templates => 32,
            Share::McpSessions => 64,
            Share::Jobs => 1000,
            Share::Webhooks => 20,
            Share::EventStreams => 16,
        }
    }

    fn setting(self, q: &TenantQuotas) -> Option<u64> {
        match self {
            Share::PausedSandboxes => q.max_paused_sandboxes,
            Share::Volumes => q.max_volumes,
            Share::Snapshots => q.max_snapshots,
            Share::SnapshotBytes => q.max_snapshot_bytes,
            Share::DiskBytes => q.max_disk_bytes,
            Share::Templates => q.max_templates,
            Share::McpSessions => q.max_mcp_sessions,
            Share::Jobs => q.max_jobs,
            Share::Webhooks => q.max_webhooks,
            Share::EventStreams => q.max_event_streams,
        }
    }

    /// `q`'s cap on this share: its setting, else the server's default.
    pub fn limit(self, q: &TenantQuotas) -> u64 {
        self.setting(q).unwrap_or(self.default_limit())
    }

    /// What one more of the share needs at least: a creation needing disk is refused when
    /// less than this is left under the cap (a write that fails with `EDQUOT` may leave up to
    /// a few hundred KiB of the cap unused, and a new subvolume needs its first tree blocks).
    pub fn headroom(self) -> u64 {
        match self {
            Share::DiskBytes => 4 << 20,
            _ => 0,
        }
    }

    fn unit(self) -> &'static str {
        match self {
            Share::SnapshotBytes | Share::DiskBytes => " bytes",
            _ => "",
        }
    }
}

/// Whether `tenant`, holding `held` of `share`, may take one more.
pub fn check(tenant: &Tenant, share: Share, held: u64) -> Result<(), QuotaError> {
    let limit = share.limit(&tenant.quotas);
    if held.saturating_add(share.headroom()) < limit {
        return Ok(());
    }
    Err(QuotaError::Full {
        tenant: tenant.name.clone(),
        quota: share.quota(),
        limit,
        held,
        unit: share.unit(),
    })
}

/// A creation checked against a share: hold it until the creation is done (or failed), so the
/// next claim of the same tenant and share counts it.
pub struct Claim {
    _line: tokio::sync::OwnedMutexGuard<()>,
}

/// One open stream counted against its tenant until dropped.
pub struct Slot {
    open: OpenStreams,
    key: (String, Share),
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = open.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// Each tenant's line per share and its open streams; one per server, held by [`Quotas`]
/// (whose `claim`, `line` and `open` are these).
///
/// [`Quotas`]: crate::Quotas
#[derive(Default, Clone)]
pub(crate) struct Shares {
    lines: ShareLines,
    streams: OpenStreams,
}

type OpenStreams = Arc<Mutex<HashMap<(String, Share), u64>>>;
type ShareLines = Arc<Mutex<HashMap<(String, Share), Arc<tokio::sync::Mutex<()>>>>>;

impl Shares {
    fn share_line(&self, tenant: &str, share: Share) -> Arc<tokio::sync::Mutex<()>> {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry((tenant.to_owned(), share))
            .or_default()
            .clone()
    }

    /// Takes `tenant`'s line for `share` (creations of it wait for one another, never for
    /// other tenants), then checks what `held` counts now against the cap.
    pub async fn claim(
        &self,
        tenant: &Tenant,
        share: Share,
        held: impl FnOnce() -> u64,
    ) -> Result<Claim, QuotaError> {
        let claim = self.line(&tenant.name, share).await;
        check(tenant, share, held())?;
        Ok(claim)
    }

    /// Takes `tenant`'s line for `share` without checking (the caller counts, perhaps
    /// asynchronously, and checks with [`check`] while it holds the claim).
    pub async fn line(&self, tenant: &str, share: Share) -> Claim {
        Claim {
            _line: self.share_line(tenant, share).lock_owned().await,
        }
    }

    /// A slot for one more open stream of `share` (`EventStreams`, `McpSessions`), or why not.
    pub fn open(&self, tenant: &Tenant, share: Share) -> Result<Slot, QuotaError> {
        let open = self.streams.clone();
        let key = (tenant.name.clone(), share);
        let mut map = open.lock().unwrap_or_else(PoisonError::into_inner);
        let n = map.entry(key.clone()).or_default();
        check(tenant, share, *n)?;
        *n += 1;
        drop(map);
        Ok(Slot { open, key })
    }
}
