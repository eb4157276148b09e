//! Fair shares, for every protocol: a creation of something every tenant draws on (a paused
//! sandbox, a volume, a snapshot, a template, a job, a webhook, an event stream, an MCP
//! session) first claims its tenant's share (`sandlot_tenancy::Share`); over the cap it is
//! refused with 429 `tenant_quota_exceeded` naming the quota, its limit and what the tenant
//! holds, before anything is made. The operator and servers without keys are not capped.

use crate::governance::Governance;
use sandlot_runtime::Runtime;
use sandlot_tenancy::{Claim, QuotaError, Share, Slot};
use sandlot_types::{ApiError, ErrorCode, Principal, Role, Tenant, DEFAULT_TENANT};

/// The tenant whose shares `who` draws on; `None` for the operator, who is not capped.
pub fn capped(gov: &Governance, who: &Principal) -> Result<Option<Tenant>, ApiError> {
    if who.tenant == DEFAULT_TENANT && who.role == Role::Admin {
        return Ok(None);
    }
    match gov.keys.tenant(&who.tenant) {
        Some(t) => Ok(Some(t)),
        None => Err(ApiError::new(
            ErrorCode::TenantNotFound,
            format!("no tenant {}", who.tenant),
        )),
    }
}

/// 429 `tenant_quota_exceeded` with the quota's own words.
pub fn quota_error(e: QuotaError) -> ApiError {
    ApiError::new(ErrorCode::TenantQuotaExceeded, e.to_string())
}

/// Claims one more of `share` for `who`'s tenant, `held` counting what it holds of a share
/// now (from the live state); a snapshot's claim checks its bytes too. Hold the claim until
/// the thing exists (or its creation failed).
pub async fn claim(
    gov: Option<&Governance>,
    who: &Principal,
    share: Share,
    held: impl Fn(&str, Share) -> Result<u64, ApiError>,
) -> Result<Option<Claim>, ApiError> {
    let Some(gov) = gov else {
        return Ok(None);
    };
    let Some(tenant) = capped(gov, who)? else {
        return Ok(None);
    };
    let claim = gov.quotas.line(&tenant.name, share).await;
    let mut counted = vec![share];
    if share == Share::Snapshots {
        counted.push(Share::SnapshotBytes);
    }
    // A snapshot's workspace copy and a volume take new disk.
    if matches!(share, Share::Snapshots | Share::Volumes) {
        counted.push(Share::DiskBytes);
    }
    for share in counted {
        let n = held(&tenant.name, share)?;
        sandlot_tenancy::check_share(&tenant, share, n).map_err(quota_error)?;
    }
    Ok(Some(claim))
}

/// A slot for one more open stream of `share` (`EventStreams`, `McpSessions`) for `who`'s
/// tenant: the stream holds it while it is open.
pub fn open(
    gov: Option<&Governance>,
    who: &Principal,
    share: Share,
) -> Result<Option<Slot>, ApiError> {
    let Some(gov) = gov else {
        return Ok(None);
    };
    let Some(tenant) = capped(gov, who)? else {
        return Ok(None);
    };
    gov.quotas
        .open(&tenant, share)
        .map(Some)
        .map_err(quota_error)
}

/// The kernel cap on `tenant`'s disk bytes: its `max_disk_bytes` (or the server's default);
/// none for the operator's tenant `default`, which is not capped.
pub fn disk_cap(tenant: &Tenant) -> Option<u64> {
    (tenant.name != DEFAULT_TENANT).then(|| Share::DiskBytes.limit(&tenant.quotas))
}

/// Puts every tenant's `max_disk_bytes` into force on the disk, at startup: the qgroups
/// survive a restart, but a setting changed while the server was down reaches them only
/// here. A failure is logged: admission still checks the setting.
pub fn sync_disk_caps(rt: &Runtime, gov: &Governance) {
    for t in gov.keys.tenants() {
        if let Err(e) = rt.set_tenant_disk_cap(&t.name, disk_cap(&t)) {
            tracing::warn!(tenant = %t.name, error = %e, "could not set the tenant's disk cap");
        }
    }
}

/// What the runtime counts of a tenant's `share`; the shares it does not keep (jobs,
/// webhooks, streams, sessions) are counted where they live.
pub fn runtime_held(
    rt: &Runtime,
    tenant: &str,
    share: Share,
) -> Result<u64, sandlot_runtime::RuntimeError> {
    Ok(match share {
        Share::PausedSandboxes => rt.tenant_paused(tenant),
        Share::Volumes => rt.tenant_volumes(tenant)?,
        Share::Snapshots => rt.tenant_snapshots(tenant)?.0,
        Share::SnapshotBytes => rt.tenant_snapshots(tenant)?.1,
        Share::DiskBytes => rt.tenant_disk_bytes(tenant)?,
        Share::Templates => rt.tenant_templates(tenant)?,
        Share::McpSessions | Share::Jobs | Share::Webhooks | Share::EventStreams => 0,
    })
}

/// The gate an idle sandbox passes before it pauses (see `Runtime::set_idle_pause_gate`): its
/// tenant's `max_paused_sandboxes`, claimed as an explicit pause claims it. The operator's
/// tenant `default` is not capped (a local server pauses idle sandboxes as it always did).
pub fn idle_pause_gate(gov: std::sync::Arc<Governance>) -> sandlot_runtime::IdlePauseGate {
    std::sync::Arc::new(move |rt: &Runtime, tenant: String| {
        let (gov, rt) = (gov.clone(), rt.clone());
        Box::pin(async move {
            let none = || Ok(Box::new(()) as Box<dyn std::any::Any + Send>);
            if tenant == DEFAULT_TENANT {
                return none();
            }
            let Some(t) = gov.keys.tenant(&tenant) else {
                return none();
            };
            let claim = gov.quotas.line(&t.name, Share::PausedSandboxes).await;
            let held =
                runtime_held(&rt, &t.name, Share::PausedSandboxes).map_err(|e| e.to_string())?;
            sandlot_tenancy::check_share(&t, Share::PausedSandboxes, held)
                .map_err(|e| e.to_string())?;
            Ok(Box::new(claim) as Box<dyn std::any::Any + Send>)
        })
    })
}
