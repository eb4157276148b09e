//! Tenants in the E2B layer: which sandboxes a caller may name, and the quota admission of
//! the sandboxes it creates, resumes or forks (the same admission `/v1` applies, on the same
//! per-tenant line, so a tenant cannot get round its quotas by switching protocols).
//!
//! Who the caller is comes from `auth` (the control plane's `X-API-KEY`). Another tenant's
//! sandbox is answered exactly as one that does not exist: nothing tells a caller that an id
//! it guessed or saw is in use.

use crate::error::Failure;
use crate::Ctx;
use sandlot_tenancy::{Admission, QuotaError, Want};
use sandlot_types::{ApiError, EffectiveLimits, ErrorCode, Principal};

/// Whether sandbox `id` (live, or recorded after it ended) belongs to `who`'s tenant. An id
/// never seen belongs to nobody.
pub(crate) fn owns(ctx: &Ctx, who: &Principal, id: &str) -> bool {
    ctx.rt.sandbox_tenant(id).as_deref() == Some(who.tenant.as_str())
}

/// Admits `count` sandboxes of `limits` for `who`'s tenant, waiting in its line while its
/// quotas are full; the reservation lasts as long as the returned admission (hold it until
/// the sandboxes are in the runtime's live set). Without governance there are no quotas.
pub(crate) async fn admit(
    ctx: &Ctx,
    who: &Principal,
    limits: EffectiveLimits,
    count: u64,
) -> Result<Option<Admission>, Failure> {
    let Some(gov) = ctx.gov.as_deref() else {
        return Ok(None);
    };
    let Some(tenant) = gov.keys.tenant(&who.tenant) else {
        return Err(Failure::from_api(&ApiError::new(
            ErrorCode::TenantNotFound,
            format!("no tenant {}", who.tenant),
        )));
    };
    let want = Want {
        sandboxes: count,
        cpu_millis: limits.cpu_millis * count,
        memory_mb: limits.memory_mb * count,
    };
    let rt = ctx.rt.clone();
    let name = tenant.name.clone();
    let usage = move || {
        let u = rt.tenant_usage(&name);
        Want {
            sandboxes: u.sandboxes,
            cpu_millis: u.cpu_millis,
            memory_mb: u.memory_mb,
        }
    };
    gov.quotas
        .admit(&tenant, want, usage)
        .await
        .map(Some)
        .map_err(|e| {
            let message = match &e {
                QuotaError::TooLarge { .. } => format!("{e}; retry in 0 s"),
                QuotaError::Exceeded { .. } => e.to_string(),
            };
            Failure::from_api(&ApiError::new(ErrorCode::TenantQuotaExceeded, message))
        })
}

/// Admits one more running sandbox like `id` (a resume) or `count` copies of it (a fork).
pub(crate) async fn admit_like(
    ctx: &Ctx,
    who: &Principal,
    id: &str,
    count: u64,
) -> Result<Option<Admission>, Failure> {
    match ctx.rt.sandbox_limits(id) {
        Some(limits) => admit(ctx, who, limits, count).await,
        // Not live: the runtime's own answer follows.
        None => Ok(None),
    }
}

/// Wakes creations waiting for room in `tenant`'s quotas (one of its sandboxes ended or
/// paused).
pub(crate) fn released(ctx: &Ctx, tenant: &str) {
    if let Some(gov) = ctx.gov.as_deref() {
        Admission::nudge(&gov.quotas, tenant);
    }
}

/// Whether `who` may start from template `name`: built-in templates (no owner) are
/// everyone's, others their owner tenant's (as `/v1` decides).
pub(crate) fn template_visible(ctx: &Ctx, who: &Principal, name: &str) -> bool {
    let Some(gov) = ctx.gov.as_deref() else {
        return true;
    };
    match gov.store.template_owners() {
        Ok(owners) => owners
            .iter()
            .find(|(n, _)| n == name)
            .is_none_or(|(_, t)| *t == who.tenant),
        Err(_) => false,
    }
}
