//! [`Service`]: the operations every protocol serves, each taking the caller. An adapter
//! authenticates a request its own way, turns it into a [`Principal`] and a typed request, and
//! calls one method here; the method runs tenant scoping → the Cedar gates → the tenant's
//! quotas and fair shares → the runtime, in that order, whatever the protocol, and answers a
//! domain type or one [`ApiError`]. The request's [`crate::Note`] is filled on the way (the
//! gates record their decisions in it; the execution its id).
//!
//! Reads that only look (get, list, info) stay with the backend: an adapter scopes them with
//! [`Service::scope_sandbox`] or filters by tenant. What this type adds is every step of an
//! operation that changes something or reaches into a sandbox, written once.

use crate::admission::{admit_like, admit_new, check_special_egress, Like};
use crate::backend::Backend;
use crate::execution::{self, Dropped, ExecutionHandle};
use crate::gates::gate_create;
use crate::governance::{sandbox_not_found, Governance};
use sandlot_tenancy::{Admission, Claim, Share};
use sandlot_types::{
    ApiError, Context, CreateSandbox, CreateSnapshot, CreateVolume, ErrorCode, ExecuteRequest,
    ForkRequest, ForkResult, Language, NetworkUpdate, Principal, Sandbox, Snapshot, Template,
    TemplateSpec, Volume, TRUSTED_TIER,
};

/// The service over `backend` (the runtime, or a scripted one in an adapter's tests), with the
/// server's governance (`None`: the server runs without keys, every caller is the local
/// admin and nothing is gated or capped). Cheap to make: it borrows both.
pub struct Service<'a, B> {
    backend: &'a B,
    gov: Option<&'a Governance>,
}

impl<B> Clone for Service<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B> Copy for Service<'_, B> {}

impl<'a, B: Backend> Service<'a, B> {
    pub fn new(backend: &'a B, gov: Option<&'a Governance>) -> Self {
        Self { backend, gov }
    }

    /// `Ok` when sandbox `id` (live, or recorded after it ended) is `who`'s tenant's; another
    /// tenant's, or one never seen, is the not-found answer, word for word.
    pub fn scope_sandbox(&self, who: &Principal, id: &str) -> Result<(), ApiError> {
        if self.gov.is_none() {
            return Ok(());
        }
        match self.backend.sandbox_tenant(id) {
            Some(owner) if owner == who.tenant => Ok(()),
            _ => Err(sandbox_not_found(id)),
        }
    }

    /// A sandbox of `who`'s tenant, with its port token when the server gives them.
    pub async fn sandbox(&self, who: &Principal, id: &str) -> Result<Sandbox, ApiError> {
        self.scope_sandbox(who, id)?;
        Ok(self.tokened(self.backend.get_sandbox(id).await?))
    }

    /// `s` with its port URL token, when the server gives them.
    pub fn tokened(&self, s: Sandbox) -> Sandbox {
        match self.gov {
            Some(g) => g.with_port_token(s),
            None => s,
        }
    }

    /// Creates a sandbox for `who` through the one creation pipeline (references, template
    /// limits, the creation gates, the disk cap, the quota admission).
    pub async fn create(
        &self,
        who: &Principal,
        mut req: CreateSandbox,
    ) -> Result<Sandbox, ApiError> {
        // Held until the sandbox is in the live set (or the creation failed).
        let _admission = admit_new(self.gov, self.backend, who, &mut req).await?;
        let sandbox = self.backend.create_sandbox(req).await?;
        Ok(self.tokened(sandbox))
    }

    /// Deletes one of `who`'s sandboxes, waking creations waiting for room.
    pub async fn delete(&self, who: &Principal, id: &str) -> Result<(), ApiError> {
        self.scope_sandbox(who, id)?;
        self.backend.delete_sandbox(id).await?;
        self.released(&who.tenant);
        Ok(())
    }

    /// Forks one of `who`'s sandboxes into `req.count` children, each admitted as a creation.
    pub async fn fork(
        &self,
        who: &Principal,
        id: &str,
        req: ForkRequest,
    ) -> Result<ForkResult, ApiError> {
        self.scope_sandbox(who, id)?;
        let like = Like::Fork { count: req.count };
        let _admission = admit_like(self.gov, self.backend, who, id, like).await?;
        self.backend.fork_sandbox(id, req).await
    }

    /// Pauses one of `who`'s sandboxes, within the tenant's paused share (each paused sandbox
    /// keeps its uid of the server's one pool).
    pub async fn pause(&self, who: &Principal, id: &str) -> Result<Sandbox, ApiError> {
        self.scope_sandbox(who, id)?;
        let _claim = self.claim(who, Share::PausedSandboxes).await?;
        let paused = self.backend.pause_sandbox(id).await?;
        self.released(&who.tenant);
        Ok(paused)
    }

    /// Resumes one of `who`'s paused sandboxes, admitted as a creation.
    pub async fn resume(&self, who: &Principal, id: &str) -> Result<Sandbox, ApiError> {
        self.scope_sandbox(who, id)?;
        let _admission = admit_like(self.gov, self.backend, who, id, Like::Resume).await?;
        self.backend.resume_sandbox(id).await
    }

    /// Snapshots one of `who`'s sandboxes, within the tenant's snapshot shares.
    pub async fn snapshot(
        &self,
        who: &Principal,
        id: &str,
        req: CreateSnapshot,
    ) -> Result<Snapshot, ApiError> {
        self.scope_sandbox(who, id)?;
        let _claim = self.claim(who, Share::Snapshots).await?;
        self.backend.create_snapshot(id, req).await
    }

    /// `Ok` when snapshot `id` is `who`'s tenant's; another tenant's, or one never taken,
    /// is the not-found answer, word for word (the runtime's own words for a missing one).
    pub fn scope_snapshot(&self, who: &Principal, id: &str) -> Result<(), ApiError> {
        if self.gov.is_none() {
            return Ok(());
        }
        match self.backend.snapshot_tenant(id) {
            Some(owner) if owner == who.tenant => Ok(()),
            _ => Err(ApiError::new(
                ErrorCode::SnapshotNotFound,
                format!("no snapshot {}", crate::governance::short(id)),
            )),
        }
    }

    /// The snapshots of `who`'s tenant, oldest first.
    pub async fn snapshots(&self, who: &Principal) -> Result<Vec<Snapshot>, ApiError> {
        let mut all = self.backend.list_snapshots().await?;
        all.retain(|s| s.tenant == who.tenant);
        Ok(all)
    }

    /// Deletes one of `who`'s snapshots (the sandboxes started from it keep their copies).
    pub async fn delete_snapshot(&self, who: &Principal, id: &str) -> Result<(), ApiError> {
        self.scope_snapshot(who, id)?;
        self.backend.delete_snapshot(id).await
    }

    /// Creates a volume of `who`'s tenant (volume names are per tenant), within its share.
    pub async fn create_volume(
        &self,
        who: &Principal,
        mut req: CreateVolume,
    ) -> Result<Volume, ApiError> {
        req.tenant = Some(who.tenant.clone());
        let _claim = self.claim(who, Share::Volumes).await?;
        self.backend.create_volume(req).await
    }

    /// Replaces the egress allowlist (and secrets) of one of `who`'s sandboxes, live. It goes
    /// through the creation gate again with the new allowlist, as if the sandbox were asked
    /// for with it; an allowlist that would need another tier is refused.
    pub async fn set_network(
        &self,
        who: &Principal,
        id: &str,
        update: NetworkUpdate,
    ) -> Result<Sandbox, ApiError> {
        self.scope_sandbox(who, id)?;
        if self.gov.is_some() {
            check_special_egress(who, &update.allow)?;
        }
        let current = self.backend.get_sandbox(id).await?;
        let asked = CreateSandbox {
            template: Some(current.template.clone()),
            network: update.allow.clone(),
            tier: Some(current.tier.clone()),
            ports: current.ports.clone(),
            all_ports: current.all_ports,
            tenant: Some(who.tenant.clone()),
            ..Default::default()
        };
        let trusted = current.tier == TRUSTED_TIER;
        let tier = gate_create(self.gov, who, &asked, current.limits, trusted).await?;
        crate::trusted::check_internal(&asked.network, &tier)?;
        if tier != current.tier {
            return Err(ApiError::new(
                ErrorCode::PolicyDenied,
                format!(
                    "the new allowlist would need the {tier} tier; this sandbox is {}",
                    current.tier
                ),
            ));
        }
        Ok(self.tokened(self.backend.set_network(id, update).await?))
    }

    /// The `execute` gate of one of `who`'s sandboxes for `code` in `language`.
    pub async fn gate_execute(
        &self,
        who: &Principal,
        id: &str,
        code: &str,
        language: Language,
    ) -> Result<(), ApiError> {
        self.scope_sandbox(who, id)?;
        if let Some(g) = self.gov {
            let sandbox = self.backend.get_sandbox(id).await?;
            // A call with an ask in force (E2B, MCP, jobs) may be held for review.
            g.gate_execute_settled(who, &sandbox, code, language, None)
                .await?;
        }
        Ok(())
    }

    /// The `read_file` (`write: None`) or `write_file` (`Some(bytes)`) gate of `path` in one
    /// of `who`'s sandboxes.
    pub async fn gate_file(
        &self,
        who: &Principal,
        id: &str,
        path: &str,
        write: Option<u64>,
    ) -> Result<(), ApiError> {
        self.scope_sandbox(who, id)?;
        if let Some(g) = self.gov {
            let sandbox = self.backend.get_sandbox(id).await?;
            g.gate_file(who, &sandbox, path, write)?;
        }
        Ok(())
    }

    /// Interrupts the execution running in one of `who`'s sandboxes; whether one ran.
    pub async fn interrupt(&self, who: &Principal, id: &str) -> Result<bool, ApiError> {
        self.scope_sandbox(who, id)?;
        self.backend.interrupt(id).await
    }

    /// Deletes `path` from one of `who`'s sandboxes' workspace, past the `write_file` gate (a
    /// deletion changes the file as much as a write does: no protocol deletes what the policy
    /// forbids it to write).
    pub async fn delete_file(&self, who: &Principal, id: &str, path: &str) -> Result<(), ApiError> {
        self.gate_file(who, id, path, Some(0)).await?;
        self.backend.delete_file(id, path).await
    }

    /// A new interpreter context in one of `who`'s sandboxes, starting in `cwd` when given.
    pub async fn create_context(
        &self,
        who: &Principal,
        id: &str,
        cwd: Option<&str>,
    ) -> Result<Context, ApiError> {
        self.scope_sandbox(who, id)?;
        self.backend.create_context(id, cwd).await
    }

    /// The interpreter contexts of one of `who`'s sandboxes.
    pub async fn list_contexts(&self, who: &Principal, id: &str) -> Result<Vec<Context>, ApiError> {
        self.scope_sandbox(who, id)?;
        self.backend.list_contexts(id).await
    }

    /// Restarts context `ctx` of one of `who`'s sandboxes (its variables are lost).
    pub async fn restart_context(
        &self,
        who: &Principal,
        id: &str,
        ctx: &str,
    ) -> Result<Context, ApiError> {
        self.scope_sandbox(who, id)?;
        self.backend.restart_context(id, ctx).await
    }

    /// Deletes context `ctx` of one of `who`'s sandboxes.
    pub async fn delete_context(
        &self,
        who: &Principal,
        id: &str,
        ctx: &str,
    ) -> Result<(), ApiError> {
        self.scope_sandbox(who, id)?;
        self.backend.delete_context(id, ctx).await
    }

    /// Builds (in the background) template `spec.name` of `who`'s tenant, past the
    /// `build_template` gate and within the tenant's template share. A template is an
    /// environment and a zygote on the server's one disk; building one the tenant already
    /// owns again takes no new share.
    pub async fn create_template(
        &self,
        who: &Principal,
        spec: TemplateSpec,
    ) -> Result<Template, ApiError> {
        if let Some(g) = self.gov {
            g.gate_build(who, &spec).await?;
        }
        let owned = spec.name != "default"
            && self
                .backend
                .get_template(&who.tenant, &spec.name)
                .await
                .is_ok();
        let _claim = match owned {
            true => None,
            false => self.claim(who, Share::Templates).await?,
        };
        self.backend.create_template(&who.tenant, spec).await
    }

    /// Deletes template `name` of tenant `owner` (the caller's own; the operator's choice of
    /// tenant is the adapter's to resolve), gated as a build of it is (`build_template`, no
    /// packages): who may make a template may unmake it.
    pub async fn delete_template(
        &self,
        who: &Principal,
        owner: &str,
        name: &str,
    ) -> Result<(), ApiError> {
        if let Some(g) = self.gov {
            g.gate_build_template(who, name, 0)?;
        }
        self.backend.delete_template(owner, name).await
    }

    /// Claims one more of `share` for `who`'s tenant (see `crate::shares::claim`); hold the
    /// claim until the thing exists.
    pub async fn claim(&self, who: &Principal, share: Share) -> Result<Option<Claim>, ApiError> {
        let backend = self.backend;
        crate::shares::claim(self.gov, who, share, |t, s| backend.tenant_held(t, s)).await
    }

    /// Wakes creations waiting for room in `tenant`'s quotas (one of its sandboxes ended or
    /// paused, or its quotas grew).
    pub fn released(&self, tenant: &str) {
        if let Some(g) = self.gov {
            Admission::nudge(&g.quotas, tenant);
        }
    }
}

impl<'a, B: Backend + Clone> Service<'a, B> {
    /// Runs `req` in one of `who`'s sandboxes past its `execute` gate, in a task of its own
    /// (`crate::execution`): the handle yields its events then its result. `dropped` says what
    /// a handle dropped before the end does; [`Dropped::Interrupt`] interrupts this execution
    /// only while it runs.
    pub async fn start_execution(
        &self,
        who: &Principal,
        id: &str,
        req: ExecuteRequest,
        stream: bool,
        dropped: OnDrop,
    ) -> Result<ExecutionHandle<ApiError>, ApiError> {
        self.gate_execute(who, id, &req.code, req.language).await?;
        Ok(self.spawn_execution(id, req, stream, dropped))
    }

    /// [`Service::start_execution`] for a caller that can be held (REST): an execution the
    /// policy holds for review waits `ask.wait` seconds for a person, then runs once approved,
    /// or answers [`Started::Held`] with the review to poll and re-submit with.
    pub async fn start_execution_held(
        &self,
        who: &Principal,
        id: &str,
        req: ExecuteRequest,
        stream: bool,
        dropped: OnDrop,
        ask: &crate::reviews::ReviewAsk,
    ) -> Result<Started<ExecutionHandle<ApiError>>, ApiError> {
        ask.validate()?;
        self.scope_sandbox(who, id)?;
        if let Some(g) = self.gov {
            let sandbox = self.backend.get_sandbox(id).await?;
            if let crate::reviews::Gated::Held(r) =
                g.gate_execute_held(who, &sandbox, &req, ask).await?
            {
                return Ok(Started::Held(r));
            }
        }
        Ok(Started::Running(
            self.spawn_execution(id, req, stream, dropped),
        ))
    }

    fn spawn_execution(
        &self,
        id: &str,
        req: ExecuteRequest,
        stream: bool,
        dropped: OnDrop,
    ) -> ExecutionHandle<ApiError> {
        let dropped = match dropped {
            OnDrop::RunOn => Dropped::RunOn,
            OnDrop::Interrupt => {
                let (backend, id) = (self.backend.clone(), id.to_owned());
                Dropped::Interrupt(Box::new(move || {
                    tokio::spawn(async move {
                        let _ = backend.interrupt(&id).await;
                    });
                }))
            }
        };
        let (backend, id) = (self.backend.clone(), id.to_owned());
        execution::start(
            move |tx| async move {
                let events = stream.then_some(tx);
                backend.execute(&id, req, events).await
            },
            dropped,
        )
    }
}

/// What a start that can be held answers: the action running, or the review holding it.
pub enum Started<T> {
    Running(T),
    Held(Box<sandlot_store::ReviewRecord>),
}

/// What a dropped [`ExecutionHandle`] from [`Service::start_execution`] does to an execution
/// still running: let it finish and be recorded (a client that left a stream), or interrupt it
/// (a protocol whose client cancels by going away).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnDrop {
    RunOn,
    Interrupt,
}
