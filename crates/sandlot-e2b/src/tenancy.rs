//! Tenants in the E2B layer: which sandboxes a caller may name, and the quota admission of
//! the sandboxes it creates, resumes or forks (the same admission `/v1` applies, on the same
//! per-tenant line, so a tenant cannot get round its quotas by switching protocols).
//!
//! Who the caller is comes from `auth` (the control plane's `X-API-KEY`). Another tenant's
//! sandbox is answered exactly as one that does not exist: nothing tells a caller that an id
//! it guessed or saw is in use.

use crate::error::Failure;
use crate::Ctx;
use sandlot_runtime::RuntimeError;
use sandlot_tenancy::{Admission, Want};
use sandlot_types::{CreateSandbox, EffectiveLimits, Principal, TRUSTED_TIER};

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
    let rt = ctx.rt.clone();
    let usage = move |tenant: &str| {
        let u = rt.tenant_usage(tenant);
        Want {
            sandboxes: u.sandboxes,
            cpu_millis: u.cpu_millis,
            memory_mb: u.memory_mb,
        }
    };
    gov.admit_for(usage, who, limits, count)
        .await
        .map(Some)
        .map_err(|e| Failure::from_api(&e))
}

/// Admits one more running sandbox like `id` (a resume) or `count` copies of it (a fork),
/// through the same creation gates as a new one (`Governance::gate_like`).
pub(crate) async fn admit_like(
    ctx: &Ctx,
    who: &Principal,
    id: &str,
    count: u64,
) -> Result<Option<Admission>, Failure> {
    if let Some(gov) = ctx.gov.as_deref() {
        if let Ok(sb) = ctx.rt.get_sandbox(id).await {
            gov.gate_like(who, &sb).map_err(|e| Failure::from_api(&e))?;
        }
    }
    match ctx.rt.sandbox_limits(id) {
        Some(limits) => admit(ctx, who, limits, count).await,
        // Not live: the runtime's own answer follows.
        None => Ok(None),
    }
}

/// Refuses a creation that needs new disk (a sandbox, a fork) while `who`'s tenant is at its
/// `max_disk_bytes`, with `/v1`'s 429 `tenant_quota_exceeded` (a resume needs none: its
/// workspace exists, and a tenant at its cap must be able to resume to delete files).
pub(crate) async fn check_disk(ctx: &Ctx, who: &Principal) -> Result<(), Failure> {
    let rt = &ctx.rt;
    sandlot_api::shares::claim(
        ctx.gov.as_deref(),
        who,
        sandlot_tenancy::Share::DiskBytes,
        |t, s| sandlot_api::runtime_held(rt, t, s).map_err(sandlot_api::api_error),
    )
    .await
    .map(drop)
    .map_err(|e| Failure::from_api(&e))
}

/// Wakes creations waiting for room in `tenant`'s quotas (one of its sandboxes ended or
/// paused).
pub(crate) fn released(ctx: &Ctx, tenant: &str) {
    if let Some(gov) = ctx.gov.as_deref() {
        Admission::nudge(&gov.quotas, tenant);
    }
}

/// Whether `who` may start from template `name`, as `/v1` decides: names are per tenant, so
/// it is its tenant's own template (or the built-in `default`); another tenant's is as
/// missing as one that never was.
pub(crate) fn template_visible(ctx: &Ctx, who: &Principal, name: &str) -> bool {
    ctx.rt.has_template(&who.tenant, name)
}

/// Fills what `req`'s limits leave out from its template's, as the runtime will: quota
/// admission and the creation gates must see the limits the sandbox gets (see
/// `sandlot_api::govern::fill_template_limits`). An unreadable template is left to the
/// runtime's own answer.
pub(crate) async fn with_template_limits(ctx: &Ctx, req: &mut CreateSandbox) {
    let name = req.template.clone().unwrap_or_else(|| "default".into());
    let tenant = req
        .tenant
        .clone()
        .unwrap_or_else(|| sandlot_types::DEFAULT_TENANT.to_owned());
    if let Ok(t) = ctx.rt.get_template(&tenant, &name).await {
        sandlot_api::govern::fill_template_limits(&mut req.limits, &t.spec.limits);
    }
}

/// The limits a creation gets and whether they need the trusted tier (above the isolated
/// tier's maxima but within the trusted one's), as `/v1` computes them: with governance (or
/// the trusted tier asked for) limits past the isolated maxima are the policy's to allow;
/// without, they are refused as they always were.
pub(crate) fn creation_limits(
    ctx: &Ctx,
    req: &CreateSandbox,
) -> Result<(EffectiveLimits, bool), RuntimeError> {
    match ctx.rt.effective_limits(&req.limits) {
        Ok(l) => Ok((l, false)),
        Err(e) if req.tier.as_deref() == Some(TRUSTED_TIER) || ctx.gov.is_some() => {
            match ctx.rt.effective_limits_trusted(&req.limits) {
                Ok(l) => Ok((l, true)),
                Err(_) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}
