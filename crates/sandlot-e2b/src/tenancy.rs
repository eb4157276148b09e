//! Tenants in the E2B layer: which sandboxes a caller may name, and the admission of the
//! sandboxes it creates, resumes or forks: `sandlot_service::admission`, the one creation
//! pipeline `/v1` and MCP use too (the same gates and the same per-tenant quota line, so a
//! tenant cannot get round them by switching protocols), answered in E2B's error shape.
//!
//! Who the caller is comes from `auth` (the control plane's `X-API-KEY`). Another tenant's
//! sandbox is answered exactly as one that does not exist: nothing tells a caller that an id
//! it guessed or saw is in use.

use crate::error::Failure;
use crate::Ctx;
use sandlot_service::admission::{self, Like};
use sandlot_tenancy::Admission;
use sandlot_types::{CreateSandbox, Principal};

/// Admits the creation `req` for `who` through the pipeline every protocol shares
/// (`sandlot_service::admission::admit_new`), in E2B's error shape. Hold the admission until the
/// sandbox is in the runtime's live set.
pub(crate) async fn admit_new(
    ctx: &Ctx,
    who: &Principal,
    req: &mut CreateSandbox,
) -> Result<Option<Admission>, Failure> {
    admission::admit_new(ctx.gov.as_deref(), &ctx.rt, who, req)
        .await
        .map_err(|e| Failure::from_api(&e))
}

/// Admits a fork of sandbox `id` or its resume (`sandlot_service::admission::admit_like`), in
/// E2B's error shape.
pub(crate) async fn admit_like(
    ctx: &Ctx,
    who: &Principal,
    id: &str,
    like: Like,
) -> Result<Option<Admission>, Failure> {
    admission::admit_like(ctx.gov.as_deref(), &ctx.rt, who, id, like)
        .await
        .map_err(|e| Failure::from_api(&e))
}

/// Wakes creations waiting for room in `tenant`'s quotas (one of its sandboxes ended or
/// paused).
pub(crate) fn released(ctx: &Ctx, tenant: &str) {
    if let Some(gov) = ctx.gov.as_deref() {
        Admission::nudge(&gov.quotas, tenant);
    }
}
