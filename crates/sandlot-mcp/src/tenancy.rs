//! Tenants on `/mcp`: every MCP session acts as the principal (API key) that opened it.
//!
//! The server's authentication middleware puts the request's [`Principal`] in its extensions;
//! rmcp hands the request's parts to the tool call, where [`Scope::of`] finds it. `http`
//! makes sure every request of a session carries the key that opened it, so a tool call's
//! principal is its session's. With a scope:
//! - sandboxes the tools create (the session's own, `create_sandbox`) are the tenant's, and
//!   wait for room in its quotas as `/v1`'s creations do (resumes and forks too);
//! - a `sandbox_id` (or a snapshot, or a template) of another tenant is answered exactly as
//!   one that does not exist;
//! - `list_sandboxes` lists the tenant's only.
//!
//! stdio (`sandlot mcp`) has no scope here: it calls the server's `/v1` with its key, which
//! scopes every call there.

use crate::error::Error;
use sandlot_api::govern::Governance;
use sandlot_runtime::{Runtime, RuntimeError};
use sandlot_tenancy::{Admission, QuotaError, Want};
use sandlot_types::{ApiError, CreateSandbox, EffectiveLimits, ErrorCode, Principal};
use std::sync::Arc;

/// What the in-process `/mcp` knows of tenants: who owns what (the runtime) and the quotas
/// (the server's governance; `None` when it runs without keys).
pub(crate) struct Tenancy {
    rt: Runtime,
    gov: Option<Arc<Governance>>,
}

impl Tenancy {
    pub(crate) fn new(rt: Runtime, gov: Option<Arc<Governance>>) -> Self {
        Self { rt, gov }
    }

    /// Whether requests must carry a principal (the server runs with API keys).
    pub(crate) fn requires_keys(&self) -> bool {
        self.gov.is_some()
    }
}

/// One tool call's tenant: the principal it acts as and what checks it.
#[derive(Clone)]
pub(crate) struct Scope {
    pub(crate) who: Principal,
    tenancy: Arc<Tenancy>,
}

/// A missing sandbox, in the runtime's own words (another tenant's reads the same).
pub(crate) fn sandbox_not_found(id: &str) -> Error {
    Error::Api(sandlot_api::api_error(RuntimeError::SandboxNotFound {
        id: id.to_owned(),
    }))
}

impl Scope {
    /// The scope of a tool call: its request's principal, when the server has tenants.
    /// `Err` when keys are required and the request carries none (the server's middleware
    /// refuses such requests first; this holds should it ever not run).
    pub(crate) fn of(
        tenancy: Option<&Arc<Tenancy>>,
        who: Option<&Principal>,
    ) -> Result<Option<Scope>, Error> {
        let Some(tenancy) = tenancy else {
            return Ok(None);
        };
        match who {
            Some(who) => Ok(Some(Scope {
                who: who.clone(),
                tenancy: tenancy.clone(),
            })),
            None if tenancy.requires_keys() => Err(Error::Api(ApiError::new(
                ErrorCode::Unauthenticated,
                "this request carries no API key",
            ))),
            None => Ok(None),
        }
    }

    pub(crate) fn tenant(&self) -> &str {
        &self.who.tenant
    }

    /// `Ok` when sandbox `id` is the tenant's, else the not-found answer.
    pub(crate) fn check_sandbox(&self, id: &str) -> Result<(), Error> {
        if self.tenancy.rt.sandbox_tenant(id).as_deref() == Some(self.tenant()) {
            Ok(())
        } else {
            Err(sandbox_not_found(id))
        }
    }

    /// Makes `req` a creation for the tenant, after checking that what it names (template,
    /// snapshot, volumes) is the tenant's.
    pub(crate) fn prepare(&self, req: &mut CreateSandbox) -> Result<(), Error> {
        req.tenant = Some(self.tenant().to_owned());
        let rt = &self.tenancy.rt;
        if let Some(t) = &req.template {
            if !self.template_visible(t) {
                return Err(runtime(RuntimeError::TemplateNotFound { name: t.clone() }));
            }
        }
        if let Some(s) = &req.from_snapshot {
            if rt.snapshot_tenant(s).as_deref() != Some(self.tenant()) {
                return Err(runtime(RuntimeError::SnapshotNotFound { id: s.clone() }));
            }
        }
        for v in &req.volumes {
            if rt.volume_tenant(&v.name).as_deref() != Some(self.tenant()) {
                return Err(runtime(RuntimeError::VolumeNotFound {
                    name: v.name.clone(),
                }));
            }
        }
        Ok(())
    }

    /// Built-in templates (no owner) are everyone's, others their owner's (as `/v1` decides).
    fn template_visible(&self, name: &str) -> bool {
        let Some(gov) = self.tenancy.gov.as_deref() else {
            return true;
        };
        match gov.store.template_owners() {
            Ok(owners) => owners
                .iter()
                .find(|(n, _)| n == name)
                .is_none_or(|(_, t)| *t == self.who.tenant),
            Err(_) => false,
        }
    }

    /// Admits the creation `req` under the tenant's quotas, waiting in its line while they are
    /// full. Hold the admission until the sandbox is created.
    pub(crate) async fn admit_create(
        &self,
        req: &CreateSandbox,
    ) -> Result<Option<Admission>, Error> {
        let limits = self
            .tenancy
            .rt
            .effective_limits(&req.limits)
            .map_err(runtime)?;
        self.admit(limits, 1).await
    }

    /// Admits `count` more running sandboxes like `id` (a resume, a fork).
    pub(crate) async fn admit_like(
        &self,
        id: &str,
        count: u64,
    ) -> Result<Option<Admission>, Error> {
        match self.tenancy.rt.sandbox_limits(id) {
            Some(limits) => self.admit(limits, count).await,
            // Not live: the runtime's own answer follows.
            None => Ok(None),
        }
    }

    async fn admit(&self, limits: EffectiveLimits, count: u64) -> Result<Option<Admission>, Error> {
        let Some(gov) = self.tenancy.gov.as_deref() else {
            return Ok(None);
        };
        let Some(tenant) = gov.keys.tenant(self.tenant()) else {
            return Err(Error::Api(ApiError::new(
                ErrorCode::TenantNotFound,
                format!("no tenant {}", self.tenant()),
            )));
        };
        let want = Want {
            sandboxes: count,
            cpu_millis: limits.cpu_millis * count,
            memory_mb: limits.memory_mb * count,
        };
        let rt = self.tenancy.rt.clone();
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
                Error::Api(ApiError::new(ErrorCode::TenantQuotaExceeded, message))
            })
    }

    /// Wakes creations waiting for room in the tenant's quotas (a sandbox ended or paused).
    pub(crate) fn released(&self) {
        if let Some(gov) = self.tenancy.gov.as_deref() {
            Admission::nudge(&gov.quotas, self.tenant());
        }
    }
}

fn runtime(e: RuntimeError) -> Error {
    Error::Api(sandlot_api::api_error(e))
}
