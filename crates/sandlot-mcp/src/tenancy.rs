//! Tenants on `/mcp`: every MCP session acts as the principal (API key) that opened it.
//!
//! The server's authentication middleware puts the request's [`Principal`] in its extensions;
//! rmcp hands the request's parts to the tool call, where [`Scope::of`] finds it. `http`
//! makes sure every request of a session carries the key that opened it, so a tool call's
//! principal is its session's. With a scope:
//! - sandboxes the tools create (the session's own, `create_sandbox`), fork and resume pass
//!   `sandlot_service::admission`, the creation pipeline `/v1` and E2B use too: they are the
//!   tenant's, pass the same gates and wait for room in its quotas on the same line;
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
use sandlot_runtime::{Runtime, RuntimeError};
use sandlot_service::admission::{self, Like};
use sandlot_service::Governance;
use sandlot_tenancy::{Admission, Claim, Share};
use sandlot_types::{ApiError, CreateSandbox, ErrorCode, Language, Principal};
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

/// A missing sandbox, in the runtime's own words (another tenant's reads the same).
pub(crate) fn sandbox_not_found(id: &str) -> Error {
    Error::Api(sandlot_service::api_error(RuntimeError::SandboxNotFound {
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

    /// Admits the creation `req` for the tenant through the pipeline every protocol shares
    /// (`sandlot_service::admission::admit_new`: references, template limits, the creation gates
    /// whose answer becomes `req.tier`, the disk cap, the quota admission). Hold the
    /// admission until the sandbox is created.
    pub(crate) async fn admit_new(
        &self,
        req: &mut CreateSandbox,
    ) -> Result<Option<Admission>, Error> {
        let t = &self.tenancy;
        Ok(admission::admit_new(t.gov.as_deref(), &t.rt, &self.who, req).await?)
    }

    /// The `execute` gate of sandbox `id` (the tenant's: checked before) for `code_bytes` of
    /// `language`.
    pub(crate) async fn gate_execute(
        &self,
        id: &str,
        code_bytes: usize,
        language: Language,
    ) -> Result<(), Error> {
        let Some(gov) = self.tenancy.gov.as_deref() else {
            return Ok(());
        };
        let sb = self.tenancy.rt.get_sandbox(id).await.map_err(runtime)?;
        Ok(gov.gate_execute(&self.who, &sb, code_bytes, language)?)
    }

    /// The `read_file` (`write: None`) or `write_file` (`Some(bytes)`) gate of `path` in
    /// sandbox `id`'s workspace.
    pub(crate) async fn gate_file(
        &self,
        id: &str,
        path: &str,
        write: Option<u64>,
    ) -> Result<(), Error> {
        let Some(gov) = self.tenancy.gov.as_deref() else {
            return Ok(());
        };
        let sb = self.tenancy.rt.get_sandbox(id).await.map_err(runtime)?;
        // The governance puts `path` in the policy's form (`gates::policy_path`).
        Ok(gov.gate_file(&self.who, &sb, path, write)?)
    }

    /// A file's bytes as they may leave the sandbox: scanned by the output guardrails and
    /// redacted, or `None` when the policy withholds them (as `/v1`'s downloads).
    pub(crate) async fn guard_file(&self, id: &str, path: &str, bytes: Vec<u8>) -> Option<Vec<u8>> {
        if self.tenancy.gov.is_none() {
            return Some(bytes);
        }
        self.tenancy.rt.guard_file(id, path, bytes).await
    }

    /// Admits a fork of sandbox `id` or its resume (`sandlot_service::admission::admit_like`).
    /// Hold the admission until the sandboxes are live.
    pub(crate) async fn admit_like(
        &self,
        id: &str,
        like: Like,
    ) -> Result<Option<Admission>, Error> {
        let t = &self.tenancy;
        Ok(admission::admit_like(t.gov.as_deref(), &t.rt, &self.who, id, like).await?)
    }

    /// Claims one more of `share` (a paused sandbox, a snapshot) for the tenant, as `/v1`
    /// does; hold the claim until the thing exists.
    pub(crate) async fn claim(&self, share: Share) -> Result<Option<Claim>, Error> {
        let rt = &self.tenancy.rt;
        sandlot_service::shares::claim(self.tenancy.gov.as_deref(), &self.who, share, |t, s| {
            sandlot_service::shares::runtime_held(rt, t, s).map_err(sandlot_service::api_error)
        })
        .await
        .map_err(Error::Api)
    }

    /// Wakes creations waiting for room in the tenant's quotas (a sandbox ended or paused).
    pub(crate) fn released(&self) {
        if let Some(gov) = self.tenancy.gov.as_deref() {
            Admission::nudge(&gov.quotas, self.tenant());
        }
    }
}

fn runtime(e: RuntimeError) -> Error {
    Error::Api(sandlot_service::api_error(e))
}
