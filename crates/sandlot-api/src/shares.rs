//! Fair shares at the edge, for every interface (REST here, MCP and E2B through the same
//! functions): a creation of something every tenant draws on (a paused sandbox, a volume, a
//! snapshot, a template, a job, a webhook, an event stream, an MCP session) first claims its
//! tenant's share (`sandlot_tenancy::Share`); over the cap it is refused with 429
//! `tenant_quota_exceeded` naming the quota, its limit and what the tenant holds, before
//! anything is made. The operator and servers without keys are not capped.

use crate::backend::Backend;
use crate::error::HttpError;
use crate::govern::Governance;
use crate::AppState;
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

/// Puts `tenant`'s `max_disk_bytes` into force on the disk (at startup and whenever a
/// tenant is made or changed). A failure is logged: admission still checks the setting.
pub(crate) fn sync_disk_cap<B: Backend>(backend: &B, tenant: &Tenant) {
    if let Err(e) = backend.set_tenant_disk_cap(&tenant.name, disk_cap(tenant)) {
        tracing::warn!(tenant = %tenant.name, error = %e.message, "could not set the tenant's disk cap");
    }
}

/// [`sync_disk_cap`] for every tenant, at startup: the qgroups survive a restart, but a
/// setting changed while the server was down reaches them only here.
pub fn sync_disk_caps(rt: &sandlot_runtime::Runtime, gov: &Governance) {
    for t in gov.keys.tenants() {
        sync_disk_cap(rt, &t);
    }
}

/// [`claim`] with what the backend counts of `share` (paused sandboxes, volumes, snapshots,
/// templates).
pub(crate) async fn claim_held<B: Backend>(
    st: &AppState<B>,
    who: &Principal,
    share: Share,
) -> Result<Option<Claim>, HttpError> {
    claim(st.gov.as_deref(), who, share, |t, share| {
        st.backend.tenant_held(t, share)
    })
    .await
    .map_err(HttpError)
}

/// The gate an idle sandbox passes before it pauses (see `Runtime::set_idle_pause_gate`): its
/// tenant's `max_paused_sandboxes`, claimed as an explicit pause claims it. The operator's
/// tenant `default` is not capped (a local server pauses idle sandboxes as it always did).
pub fn idle_pause_gate(gov: std::sync::Arc<Governance>) -> sandlot_runtime::IdlePauseGate {
    std::sync::Arc::new(move |rt: &sandlot_runtime::Runtime, tenant: String| {
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
            let held = crate::runtime_held(&rt, &t.name, Share::PausedSandboxes)
                .map_err(|e| e.to_string())?;
            sandlot_tenancy::check_share(&t, Share::PausedSandboxes, held)
                .map_err(|e| e.to_string())?;
            Ok(Box::new(claim) as Box<dyn std::any::Any + Send>)
        })
    })
}
