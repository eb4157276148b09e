//! The one path from a principal to a new sandbox, for every protocol (`/v1`, E2B, MCP): what
//! a creation must pass before the runtime makes it, written once. Each protocol's adapter
//! parses its own body into a [`CreateSandbox`], calls [`admit_new`] (or [`admit_like`] for a
//! fork, resume or connect), maps the [`ApiError`] to its own error shape, holds the returned
//! admission until the sandbox exists, and nothing else.
//!
//! A new sandbox ([`admit_new`]), in this order:
//! 1. it is the principal's tenant's (`CreateSandbox::tenant`);
//! 2. what it names is the tenant's: a template of another tenant (names are per tenant) is
//!    as missing as one never made; with governance, a snapshot of another tenant answers
//!    as missing (volumes are resolved within the tenant by the runtime);
//! 3. with governance, only the operator may list special addresses (loopback, private
//!    networks, the metadata address) in its egress allowlist;
//! 4. the limits it leaves out are its template's (the one it names, else its snapshot's,
//!    which is then named in the request so the gates see the template the runtime gives it,
//!    else `default`);
//! 5. its effective limits; above the isolated tier's maxima they need the trusted tier
//!    (with governance, or when it asks for `trusted`), else they are refused;
//! 6. the creation gates (`create_sandbox`, then `select_tier`, whose answer becomes its
//!    tier); without governance, the tier asked for (or `isolated`);
//! 7. its tenant's disk cap (`max_disk_bytes`);
//! 8. the quota admission, waiting in the tenant's line while its quotas are full.
//!
//! A sandbox like an existing one ([`admit_like`]): the creation gates on the existing
//! sandbox's own request (`Governance::gate_like`), a fork's disk cap (a resume needs none:
//! its workspace exists, and a tenant at its cap must be able to resume to delete files),
//! then the quota admission of its limits.
//!
//! The pipeline reads the runtime through [`Lookups`]: implemented for
//! [`sandlot_runtime::Runtime`] (which E2B and MCP hold) and required of the REST router's
//! backend, so the router's own tests drive it with their scripted backend.

use crate::error::api_error;
use crate::governance::{fill_template_limits, Governance};
use futures::FutureExt;
use sandlot_runtime::{Runtime, RuntimeError};
use sandlot_tenancy::{Admission, Share, Want};
use sandlot_types::{
    ApiError, CreateSandbox, EffectiveLimits, ErrorCode, Limits, Principal, Role, Sandbox,
    DEFAULT_TENANT, TRUSTED_TIER,
};
use std::future::Future;

/// The handful of things the creation pipeline reads of the runtime.
pub trait Lookups: Clone + Send + Sync + 'static {
    /// Whether `tenant` may start from template `name`: its own, or the built-in `default`.
    fn has_template(&self, tenant: &str, name: &str) -> bool;
    /// The limits of `tenant`'s template `name`; `None` when it cannot be read.
    fn template_limits(
        &self,
        tenant: &str,
        name: &str,
    ) -> impl Future<Output = Option<Limits>> + Send;
    /// The tenant a snapshot belongs to; `None` when there is no such snapshot.
    fn snapshot_tenant(&self, id: &str) -> Option<String>;
    /// The template a snapshot was taken of; `None` when it cannot be read.
    fn snapshot_template(&self, id: &str) -> impl Future<Output = Option<String>> + Send;
    /// The limits a creation asking for `limits` would get, against the isolated tier's
    /// maxima.
    fn effective_limits(&self, limits: &Limits) -> Result<EffectiveLimits, ApiError>;
    /// [`Lookups::effective_limits`] against the `trusted` tier's maxima.
    fn effective_limits_trusted(&self, limits: &Limits) -> Result<EffectiveLimits, ApiError>;
    /// A sandbox (live or ended); `None` when it cannot be read.
    fn sandbox(&self, id: &str) -> impl Future<Output = Option<Sandbox>> + Send;
    /// A live sandbox's limits; `None` when it is not live.
    fn sandbox_limits(&self, id: &str) -> Option<EffectiveLimits>;
    /// What a tenant's sandboxes hold now (for its quotas).
    fn tenant_usage(&self, tenant: &str) -> Want;
    /// How much of `share` a tenant holds now (paused sandboxes, volumes, snapshots and
    /// their bytes, disk bytes, templates), for its fair-share caps.
    fn tenant_held(&self, tenant: &str, share: Share) -> Result<u64, ApiError>;
}

pub use crate::gates::Like;

/// Admits the creation `req` for `who` (see the module docs); `req` leaves with its tenant,
/// its limits filled from its template, the template of its snapshot named, and its tier.
/// Hold the returned admission until the sandbox exists (or its creation failed).
pub async fn admit_new<L: Lookups>(
    gov: Option<&Governance>,
    lookups: &L,
    who: &Principal,
    req: &mut CreateSandbox,
) -> Result<Option<Admission>, ApiError> {
    req.tenant = Some(who.tenant.clone());
    check_references(gov, lookups, who, req)?;
    if gov.is_some() {
        check_special_egress(who, &req.network)?;
    }
    with_template_limits(lookups, req).await;
    let (limits, needs_trusted) = creation_limits(gov, lookups, req)?;
    req.tier = Some(crate::gates::gate_create(gov, who, req, limits, needs_trusted).await?);
    crate::trusted::gate_mounts(gov, who, req)?;
    check_disk(gov, lookups, who).await?;
    admit(gov, lookups, who, limits, 1).await
}

/// Admits a sandbox like sandbox `id` (see [`Like`]) for `who`: the creation gates on its
/// own request, a fork's disk cap, and the quota admission of its limits. A sandbox that
/// cannot be read or is not live is left to the runtime's own answer. Hold the returned
/// admission until the sandboxes are live.
pub async fn admit_like<L: Lookups>(
    gov: Option<&Governance>,
    lookups: &L,
    who: &Principal,
    id: &str,
    like: Like,
) -> Result<Option<Admission>, ApiError> {
    if let Some(g) = gov {
        if let Some(sb) = lookups.sandbox(id).await {
            g.gate_like(who, &sb, like).await?;
            // Its host paths, asked again by `who` (a fork's children, a resume).
            g.gate_host_paths(who, &sb.mounts, &sb.tier)?;
        }
    }
    let count = match like {
        Like::Fork { count } => {
            check_disk(gov, lookups, who).await?;
            count.clamp(1, 100)
        }
        Like::Resume => 1,
    };
    match lookups.sandbox_limits(id) {
        Some(limits) => admit(gov, lookups, who, limits, count).await,
        None => Ok(None),
    }
}

/// An allowlist entry inside an always-refused range (loopback, private networks, the metadata
/// address, ...) opens the host's own neighbourhood to the sandbox: only the operator may list
/// one (a tenant choosing its own allowlist must not reach the host's loopback services).
pub fn check_special_egress(who: &Principal, allow: &[String]) -> Result<(), ApiError> {
    if who.role == Role::Admin && who.tenant == DEFAULT_TENANT {
        return Ok(());
    }
    let Ok(rules) = sandlot_egress::NetworkRules::parse(allow) else {
        return Ok(()); // the runtime says what is wrong with it
    };
    match rules.opens_special() {
        Some((entry, what)) => Err(ApiError::new(
            ErrorCode::Forbidden,
            format!("listing {entry} ({what}) in an allowlist needs an operator key"),
        )),
        None => Ok(()),
    }
}

/// The template a creation names must be its tenant's (or `default`); with governance, the
/// snapshot it starts from must be its tenant's. Another tenant's answers as a missing one.
fn check_references<L: Lookups>(
    gov: Option<&Governance>,
    lookups: &L,
    who: &Principal,
    req: &CreateSandbox,
) -> Result<(), ApiError> {
    if let Some(t) = &req.template {
        if !lookups.has_template(&who.tenant, t) {
            return Err(api_error(sandlot_runtime::RuntimeError::TemplateNotFound {
                name: t.clone(),
            }));
        }
    }
    if gov.is_none() {
        return Ok(());
    }
    if let Some(snap) = &req.from_snapshot {
        if lookups.snapshot_tenant(snap).as_deref() != Some(who.tenant.as_str()) {
            return Err(ApiError::new(
                ErrorCode::SnapshotNotFound,
                format!("no snapshot {}", crate::governance::short(snap)),
            ));
        }
    }
    Ok(())
}

/// Fills what `req`'s limits leave out from its template's, as the runtime will: its template
/// is the one it names, else the one its snapshot was taken of (then named in the request, so
/// the creation gates see the template the runtime gives it, not `default`), else `default`.
/// A template or snapshot that cannot be read is left to the runtime's own answer.
async fn with_template_limits<L: Lookups>(lookups: &L, req: &mut CreateSandbox) {
    let tenant = req
        .tenant
        .clone()
        .unwrap_or_else(|| DEFAULT_TENANT.to_owned());
    let name = match (&req.template, &req.from_snapshot) {
        (Some(t), _) => t.clone(),
        (None, Some(snap)) => match lookups.snapshot_template(snap).await {
            Some(t) => {
                req.template = Some(t.clone());
                t
            }
            None => return,
        },
        (None, None) => "default".to_owned(),
    };
    if let Some(limits) = lookups.template_limits(&tenant, &name).await {
        fill_template_limits(&mut req.limits, &limits);
    }
}

/// The limits a creation gets and whether they need the trusted tier (above the isolated
/// tier's maxima but within the trusted one's): with governance (or the trusted tier asked
/// for) limits past the isolated maxima are the policy's to allow; without, they are refused.
fn creation_limits<L: Lookups>(
    gov: Option<&Governance>,
    lookups: &L,
    req: &CreateSandbox,
) -> Result<(EffectiveLimits, bool), ApiError> {
    match lookups.effective_limits(&req.limits) {
        Ok(l) => Ok((l, false)),
        Err(e) if req.tier.as_deref() == Some(TRUSTED_TIER) || gov.is_some() => {
            match lookups.effective_limits_trusted(&req.limits) {
                Ok(l) => Ok((l, true)),
                Err(_) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// Refuses a creation that needs new disk (a sandbox, a fork) while `who`'s tenant is at its
/// `max_disk_bytes` (429 `tenant_quota_exceeded`). A check, not a claim: the kernel's qgroup
/// is what holds the line between concurrent creations' writes.
async fn check_disk<L: Lookups>(
    gov: Option<&Governance>,
    lookups: &L,
    who: &Principal,
) -> Result<(), ApiError> {
    crate::shares::claim(gov, who, Share::DiskBytes, |t, s| lookups.tenant_held(t, s))
        .await
        .map(drop)
}

/// Admits `count` sandboxes of `limits` for `who`'s tenant, waiting in its line while its
/// quotas are full. Without governance there are no quotas.
async fn admit<L: Lookups>(
    gov: Option<&Governance>,
    lookups: &L,
    who: &Principal,
    limits: EffectiveLimits,
    count: u64,
) -> Result<Option<Admission>, ApiError> {
    let Some(gov) = gov else {
        return Ok(None);
    };
    let lookups = lookups.clone();
    gov.admit_for(move |t| lookups.tenant_usage(t), who, limits, count)
        .await
        .map(Some)
}

/// A runtime result with its failure mapped to the service's error.
fn api<T>(r: Result<T, RuntimeError>) -> Result<T, ApiError> {
    r.map_err(api_error)
}

/// The runtime is what E2B and MCP hold, and the REST router's backend in production.
impl Lookups for Runtime {
    fn has_template(&self, tenant: &str, name: &str) -> bool {
        Runtime::has_template(self, tenant, name)
    }

    fn template_limits(
        &self,
        tenant: &str,
        name: &str,
    ) -> impl Future<Output = Option<sandlot_types::Limits>> + Send {
        Runtime::get_template(self, tenant, name).map(|t| t.ok().map(|t| t.spec.limits))
    }

    fn snapshot_tenant(&self, id: &str) -> Option<String> {
        Runtime::snapshot_tenant(self, id)
    }

    fn snapshot_template(&self, id: &str) -> impl Future<Output = Option<String>> + Send {
        Runtime::get_snapshot(self, id).map(|s| s.ok().map(|s| s.template))
    }

    fn effective_limits(
        &self,
        limits: &sandlot_types::Limits,
    ) -> Result<sandlot_types::EffectiveLimits, ApiError> {
        api(Runtime::effective_limits(self, limits))
    }

    fn effective_limits_trusted(
        &self,
        limits: &sandlot_types::Limits,
    ) -> Result<sandlot_types::EffectiveLimits, ApiError> {
        api(Runtime::effective_limits_trusted(self, limits))
    }

    fn sandbox(&self, id: &str) -> impl Future<Output = Option<Sandbox>> + Send {
        Runtime::get_sandbox(self, id).map(|s| s.ok())
    }

    fn sandbox_limits(&self, id: &str) -> Option<sandlot_types::EffectiveLimits> {
        Runtime::sandbox_limits(self, id)
    }

    fn tenant_usage(&self, tenant: &str) -> sandlot_tenancy::Want {
        let u = Runtime::tenant_usage(self, tenant);
        sandlot_tenancy::Want {
            sandboxes: u.sandboxes,
            cpu_millis: u.cpu_millis,
            memory_mb: u.memory_mb,
        }
    }

    fn tenant_held(&self, tenant: &str, share: sandlot_tenancy::Share) -> Result<u64, ApiError> {
        crate::shares::runtime_held(self, tenant, share).map_err(api_error)
    }
}
