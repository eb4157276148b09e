//! Tenants on `/mcp`: every MCP session acts as the principal (API key) that opened it.
//!
//! The server's authentication middleware puts the request's [`Principal`] in its extensions;
//! rmcp hands the request's parts to the tool call, where [`Scope::of`] finds it. `http`
//! makes sure every request of a session carries the key that opened it, so a tool call's
//! principal is its session's. A scope is the one service (`sandlot_service::Service`) with
//! that principal bound: each operation that changes a sandbox is a call of it, as on `/v1`
//! and E2B. With a scope:
//! - sandboxes the tools create (the session's own, `create_sandbox`), fork and resume pass
//!   the one creation pipeline: they are the tenant's, pass the same gates and wait for room
//!   in its quotas on the same line; pauses and snapshots claim the same fair shares;
//! - a `sandbox_id` (or a snapshot, or a template) of another tenant is answered exactly as
//!   one that does not exist;
//! - `list_sandboxes` lists the tenant's only;
//! - the policy decides as on `/v1`: creations (`create_sandbox`, `select_tier`), code
//!   (`execute`), files (`read_file` for read_file and list_files, `write_file`); a denial is
//!   a tool error `policy_denied: <why>`. read_file's bytes pass the output guardrails.
//!
//! stdio (`sandlot mcp`) has no scope here: it calls the server's `/v1` with its key, which
//! scopes every call there.

use crate::error::Error;
use sandlot_runtime::Runtime;
use sandlot_service::{Governance, Service};
use sandlot_types::{
    ApiError, CreateSandbox, CreateSnapshot, ErrorCode, ForkRequest, ForkResult, Language,
    Principal, Sandbox, Snapshot,
};
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

    /// The server's governance, when it runs with API keys.
    pub(crate) fn gov(&self) -> Option<&Governance> {
        self.gov.as_deref()
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

    /// The one service, with this scope's runtime and governance.
    fn svc(&self) -> Service<'_, Runtime> {
        Service::new(&self.tenancy.rt, self.tenancy.gov.as_deref())
    }

    /// `Ok` when sandbox `id` is the tenant's, else the not-found answer
    /// (`Service::scope_sandbox`, the one tenant check).
    pub(crate) fn check_sandbox(&self, id: &str) -> Result<(), Error> {
        Ok(self.svc().scope_sandbox(&self.who, id)?)
    }

    /// Creates a sandbox for the tenant through the pipeline every protocol shares
    /// (`Service::create`: references, template limits, the creation gates whose answer
    /// becomes its tier, the disk cap, the quota admission).
    pub(crate) async fn create(&self, req: CreateSandbox) -> Result<Sandbox, Error> {
        Ok(held().scope(self.svc().create(&self.who, req)).await?)
    }

    /// Deletes one of the tenant's sandboxes (`Service::delete`).
    pub(crate) async fn delete(&self, id: &str) -> Result<(), Error> {
        Ok(self.svc().delete(&self.who, id).await?)
    }

    /// Forks one of the tenant's sandboxes (`Service::fork`: each child admitted as a
    /// creation; they are the parent's tenant's).
    pub(crate) async fn fork(&self, id: &str, req: ForkRequest) -> Result<ForkResult, Error> {
        Ok(held().scope(self.svc().fork(&self.who, id, req)).await?)
    }

    /// Pauses one of the tenant's sandboxes within its paused share (`Service::pause`).
    pub(crate) async fn pause(&self, id: &str) -> Result<Sandbox, Error> {
        Ok(self.svc().pause(&self.who, id).await?)
    }

    /// Resumes one of the tenant's sandboxes, admitted as a creation (`Service::resume`).
    pub(crate) async fn resume(&self, id: &str) -> Result<Sandbox, Error> {
        Ok(held().scope(self.svc().resume(&self.who, id)).await?)
    }

    /// Snapshots one of the tenant's sandboxes within its snapshot shares
    /// (`Service::snapshot`).
    pub(crate) async fn snapshot(&self, id: &str, req: CreateSnapshot) -> Result<Snapshot, Error> {
        Ok(self.svc().snapshot(&self.who, id, req).await?)
    }

    /// The `execute` gate of sandbox `id` for `code` in `language`.
    pub(crate) async fn gate_execute(
        &self,
        id: &str,
        code: &str,
        language: Language,
    ) -> Result<(), Error> {
        Ok(held()
            .scope(self.svc().gate_execute(&self.who, id, code, language))
            .await?)
    }

    /// The `read_file` (`write: None`) or `write_file` (`Some(bytes)`) gate of `path` in
    /// sandbox `id`'s workspace.
    pub(crate) async fn gate_file(
        &self,
        id: &str,
        path: &str,
        write: Option<u64>,
    ) -> Result<(), Error> {
        Ok(self.svc().gate_file(&self.who, id, path, write).await?)
    }

    /// A file's bytes as they may leave the sandbox: scanned by the output guardrails and
    /// redacted, or `None` when the policy withholds them (as `/v1`'s downloads).
    pub(crate) async fn guard_file(&self, id: &str, path: &str, bytes: Vec<u8>) -> Option<Vec<u8>> {
        if self.tenancy.gov.is_none() {
            return Some(bytes);
        }
        self.tenancy.rt.guard_file(id, path, bytes).await
    }
}

/// The ask of an MCP call a policy holds for review: MCP's clients cannot poll a review, so
/// the call waits the server's `SANDLOT_REVIEW_WAIT` (default 30 s) for a person and, still
/// pending, is a tool error (`review_pending`) naming the review and what to do; the same
/// call made again after approval is released once, matched by what it holds (tenant, key,
/// gate, fingerprint).
fn held() -> sandlot_service::ReviewAsk {
    sandlot_service::ReviewAsk::retrying(None)
}
