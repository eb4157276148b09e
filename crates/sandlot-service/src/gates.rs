//! The policy engine at every gate: the requests every protocol's edge sees (create and its tier,
//! execute, read and write a file, build a template) and what the runtime asks while a
//! sandbox runs ([`ServerGovernor`]: egress, output findings, containment).
//!
//! Every decision is recorded (the journal writes it behind the request) with the ids of the
//! policies that decided, the policy set's version and the latency; a denial answers 403
//! `policy_denied` naming them and why. The routes of the policy set and of the decision record
//! are the REST adapter's.
//!
//! Tiers: `isolated` (the full jail, default) and `trusted` (limits up to the server's trusted
//! maxima). Tiers are ordered from least privileged upward; a creation gets the least one
//! that gives what it asks for (`trusted` when it names it or its limits need it), put to
//! `select_tier`. A request that needs `trusted` where it is not permitted is denied, never
//! quietly run with less; an `isolated` request denied its tier is not tried higher.

use crate::governance::Governance;
use crate::note::Note;
use crate::reviews::{
    fingerprint, review_denied, review_not_found, review_pending, Gated, ReviewAsk,
};
use sandlot_policy::{
    Decision, Finding, GateRequest, PolicyPrincipal, Query, SandboxRef, SandboxRequest,
};
use sandlot_runtime::govern::{Governor, Outcome, OutputFinding};
use sandlot_store::{DecisionRecord, EgressRecord, FindingRecord};
use sandlot_types::{ApiError, ErrorCode, Principal, Sandbox, ISOLATED_TIER, TRUSTED_TIER};
use std::sync::Arc;

/// The tiers, least privileged first.
pub const TIERS: [&str; 2] = [ISOLATED_TIER, TRUSTED_TIER];

/// What a creation like an existing sandbox is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Like {
    /// `count` forks (clamped to 1..=100, as the runtime does): new disk, so the disk cap.
    Fork { count: u64 },
    /// Bringing a paused sandbox back (resume, E2B's connect): no new disk.
    Resume,
}

/// Notes, for the request being handled, that `d` requires its execution to roll back on
/// failure (an allowed `execute` through an `@on_failure("rollback")` permit).
pub fn note_rollback(d: &sandlot_policy::Decision) {
    if d.allowed
        && d.gate == sandlot_policy::Gate::Execute
        && d.on_failure.as_deref() == Some("rollback")
    {
        crate::note::Note::require_rollback();
    }
}

pub fn policy_principal(p: &Principal) -> PolicyPrincipal {
    PolicyPrincipal {
        key_id: p.key_id.clone(),
        key_prefix: p.key_prefix.clone(),
        tenant: p.tenant.clone(),
        role: p.role.as_str().to_owned(),
        plan: p.plan.clone(),
    }
}

pub fn sandbox_ref(s: &Sandbox) -> SandboxRef {
    SandboxRef {
        id: s.id.clone(),
        tenant: s.tenant.clone(),
        template: s.template.clone(),
        tier: s.tier.clone(),
    }
}

fn now() -> String {
    sandlot_runtime::now_rfc3339()
}

fn decision_id() -> String {
    sandlot_runtime::new_id("dec_")
}

impl Governance {
    /// Decides `request` for `who`, records the decision, and returns its id with it.
    pub fn decide(
        &self,
        who: &PolicyPrincipal,
        request: GateRequest,
        resource: String,
        detail: Option<serde_json::Value>,
    ) -> (String, Decision) {
        let d = self.policy.decide(&Query::new(who.clone(), request));
        note_rollback(&d);
        let id = self.record(who, resource, &d, detail);
        (id, d)
    }

    pub fn record(
        &self,
        who: &PolicyPrincipal,
        resource: String,
        d: &Decision,
        mut detail: Option<serde_json::Value>,
    ) -> String {
        let id = decision_id();
        sandlot_telemetry::metrics().policy_decision_of(
            d.gate.as_str(),
            d.allowed,
            d.needs_review(),
        );
        Note::add_decision(&id);
        if !d.errors.is_empty() {
            let errors = serde_json::json!(d.errors);
            match detail.as_mut().and_then(|v| v.as_object_mut()) {
                Some(map) => {
                    map.insert("errors".into(), errors);
                }
                None => detail = Some(serde_json::json!({ "errors": errors })),
            }
        }
        self.journal.decision(DecisionRecord {
            id: id.clone(),
            at: now(),
            gate: d.gate.as_str().to_owned(),
            key_id: Some(who.key_id.clone()),
            tenant: Some(who.tenant.clone()),
            resource,
            allowed: d.allowed,
            policies: d.policies.clone(),
            reason: d.reason.clone(),
            version: d.version.clone(),
            latency_us: d.latency_us,
            detail,
        });
        id
    }

    /// A gate the request must pass: `Ok` when allowed, else 403 `policy_denied`.
    pub fn gate(
        &self,
        who: &Principal,
        request: GateRequest,
        resource: String,
    ) -> Result<(), ApiError> {
        let (id, d) = self.decide(&policy_principal(who), request, resource, None);
        if d.allowed {
            Ok(())
        } else {
            Err(denied(&d, &id))
        }
    }
}

/// The 403 of a denial: which policies, why, which set, and the decision's id.
pub fn denied(d: &Decision, id: &str) -> ApiError {
    let by = if d.policies.is_empty() {
        String::new()
    } else {
        format!(" by policy {}", d.policies.join(", "))
    };
    ApiError::new(
        ErrorCode::PolicyDenied,
        format!(
            "{} denied{by}: {} (policy set {}, decision {id})",
            d.gate.as_str(),
            d.reason,
            d.version
        ),
    )
}

/// Gates a creation and picks its tier (see [`Governance::gate_creation`]); without
/// governance, the tier asked for (or `isolated`).
pub async fn gate_create(
    gov: Option<&Governance>,
    who: &Principal,
    req: &sandlot_types::CreateSandbox,
    limits: sandlot_types::EffectiveLimits,
    needs_trusted: bool,
) -> Result<String, sandlot_types::ApiError> {
    match gov {
        Some(g) => g.gate_creation(who, req, limits, needs_trusted).await,
        None => Ok(req.tier.clone().unwrap_or_else(|| ISOLATED_TIER.into())),
    }
}

impl Governance {
    /// The creation gates, for every interface (REST, E2B, MCP): `create_sandbox` on its
    /// template, then `select_tier` for the least tier that gives what it asks for (`trusted`
    /// when it names it or `needs_trusted`: its limits are above the isolated maxima). The
    /// tier to run it in, or 403 `policy_denied`. A creation either gate holds for review is
    /// held once, as a whole (one review, at the first gate that holds), when the call has an
    /// ask in force ([`ReviewAsk::run`]); see [`Governance::settle`].
    pub async fn gate_creation(
        &self,
        who: &Principal,
        req: &sandlot_types::CreateSandbox,
        limits: sandlot_types::EffectiveLimits,
        needs_trusted: bool,
    ) -> Result<String, sandlot_types::ApiError> {
        self.gate_creation_of(who, req, limits, needs_trusted, None)
            .await
    }

    /// [`Governance::gate_creation`]; `like`: the sandbox it is made from and how (a fork's
    /// or a resume's review holds exactly that: the source sandbox, the action, the count).
    async fn gate_creation_of(
        &self,
        who: &Principal,
        req: &sandlot_types::CreateSandbox,
        limits: sandlot_types::EffectiveLimits,
        needs_trusted: bool,
        like: Option<(&str, Like)>,
    ) -> Result<String, sandlot_types::ApiError> {
        let asked = req.tier.as_deref().unwrap_or(ISOLATED_TIER);
        if !TIERS.contains(&asked) {
            return Err(sandlot_types::ApiError::new(
                ErrorCode::InvalidArgument,
                format!("tier must be one of {}, not {asked:?}", TIERS.join(", ")),
            ));
        }
        let request = SandboxRequest {
            memory_mb: limits.memory_mb,
            cpu_millis: limits.cpu_millis,
            pids: limits.pids,
            disk_mb: limits.disk_mb,
            network: !req.network.is_empty(),
            allow: req.network.clone(),
            tier: asked.to_owned(),
            ports: if req.all_ports {
                64512
            } else {
                req.ports.len() as u64
            },
        };
        let template = req.template.clone().unwrap_or_else(|| "default".into());
        let pp = policy_principal(who);
        let template_resource = format!("Template::{template:?}");
        let (cid, cd) = self.decide(
            &pp,
            GateRequest::CreateSandbox {
                template: template.clone(),
                request: request.clone(),
            },
            template_resource.clone(),
            None,
        );
        if !cd.allowed && !cd.needs_review() {
            return Err(denied(&cd, &cid));
        }
        // Tiers above the least sufficient one are never tried: a denial there is the
        // answer, not a reason to run with more.
        let tier = if asked == TRUSTED_TIER || needs_trusted {
            TRUSTED_TIER
        } else {
            ISOLATED_TIER
        };
        let (tid, td) = self.decide(
            &pp,
            GateRequest::SelectTier {
                tier: tier.to_owned(),
                request,
            },
            format!("Tier::{tier:?}"),
            Some(serde_json::json!({
                "asked": asked,
                "needs_trusted_limits": needs_trusted,
            })),
        );
        if !td.allowed && !td.needs_review() {
            return Err(denied(&td, &tid));
        }
        // Held by either gate (neither denies): one review for the whole creation.
        let (d, id, resource) = if !cd.allowed {
            (cd, cid, template_resource)
        } else if !td.allowed {
            (td, tid, format!("Tier::{tier:?}"))
        } else {
            return Ok(tier.to_owned());
        };
        let limits_json = serde_json::to_vec(&limits).unwrap_or_default();
        let network = req.network.join("\n");
        let ports = serde_json::to_vec(&req.ports).unwrap_or_default();
        let snapshot = req.from_snapshot.clone().unwrap_or_default();
        let (action, source, count) = match like {
            None => ("create", String::new(), 1),
            Some((id, Like::Fork { count })) => ("fork", id.to_owned(), count.clamp(1, 100)),
            Some((id, Like::Resume)) => ("resume", id.to_owned(), 1),
        };
        let fp = fingerprint(&[
            action.as_bytes(),
            who.tenant.as_bytes(),
            source.as_bytes(),
            &count.to_le_bytes(),
            template.as_bytes(),
            &limits_json,
            network.as_bytes(),
            asked.as_bytes(),
            tier.as_bytes(),
            &ports,
            &[u8::from(req.all_ports)],
            snapshot.as_bytes(),
        ]);
        // What the person approves: what the sandbox will be and may reach.
        let summary = serde_json::json!({
            "action": action,
            "source": (!source.is_empty()).then_some(&source),
            "count": count,
            "template": template,
            "tier": tier,
            "limits": limits,
            "network": req.network,
            "ports": req.ports,
            "all_ports": req.all_ports,
            "from_snapshot": req.from_snapshot,
        });
        self.settle(who, &d, &id, resource, fp, summary).await?;
        Ok(tier.to_owned())
    }

    /// The creation gates for a sandbox made from an existing one (fork, resume, and any
    /// later way of bringing one back): the request is the existing sandbox's own (template,
    /// limits, egress, ports, tier), asked again by `who` now, so a policy that forbids
    /// creating it forbids getting more of it or getting it back. `Ok` or 403
    /// `policy_denied`; each decision is journaled as a creation's is; held for review as a
    /// creation is (the review holds this source sandbox, this action and count).
    pub async fn gate_like(
        &self,
        who: &Principal,
        sandbox: &Sandbox,
        like: Like,
    ) -> Result<(), sandlot_types::ApiError> {
        let req = sandlot_types::CreateSandbox {
            template: Some(sandbox.template.clone()),
            ports: sandbox.ports.clone(),
            all_ports: sandbox.all_ports,
            tier: Some(sandbox.tier.clone()),
            network: sandbox.network.clone(),
            tenant: Some(sandbox.tenant.clone()),
            ..Default::default()
        };
        let needs_trusted = sandbox.tier == TRUSTED_TIER;
        self.gate_creation_of(
            who,
            &req,
            sandbox.limits,
            needs_trusted,
            Some((&sandbox.id, like)),
        )
        .await
        .map(|_| ())
    }

    /// A decision of a gate whose caller may be held: allowed → `Ok`; denied → 403
    /// `policy_denied`; held for review → when the call has an ask in force
    /// ([`ReviewAsk::run`], [`ReviewAsk::scope`]), the review of exactly `fp`
    /// ([`Governance::hold_decided`]): `Ok` once approved and released for this call, 403
    /// `review_denied`, or 409 `review_pending` (the review noted for the adapter's 202);
    /// without an ask, 403 `policy_denied` (a caller that cannot be held is refused).
    pub async fn settle(
        &self,
        who: &Principal,
        d: &Decision,
        id: &str,
        resource: String,
        fp: String,
        summary: serde_json::Value,
    ) -> Result<(), ApiError> {
        if d.allowed {
            return Ok(());
        }
        if !d.needs_review() {
            return Err(denied(d, id));
        }
        let Some(ask) = ReviewAsk::current() else {
            return Err(denied(d, id));
        };
        match self
            .hold_decided(who, d, id, resource, fp, summary, &ask)
            .await?
        {
            Gated::Proceed => Ok(()),
            Gated::Held(r) => {
                ReviewAsk::note_held(&r);
                Err(review_pending(&r))
            }
        }
    }

    /// The `execute` gate of a sandbox for `code`, for every interface (the policy sees the
    /// code itself, so a pattern in it cannot be run past the gate through another protocol).
    pub fn gate_execute(
        &self,
        who: &Principal,
        sandbox: &Sandbox,
        code: &str,
        language: sandlot_types::Language,
    ) -> Result<(), sandlot_types::ApiError> {
        self.gate(
            who,
            GateRequest::Execute {
                sandbox: sandbox_ref(sandbox),
                code_bytes: code.len() as u64,
                language: language.as_str().into(),
                code: code.to_owned(),
            },
            format!("Sandbox::{:?}", sandbox.id),
        )
    }

    /// The `execute` gate of a sandbox for a caller that can be held (REST): a decision
    /// that needs review holds the execution of exactly this code in this sandbox and
    /// context (see [`Governance::gate_held`]).
    pub async fn gate_execute_held(
        &self,
        who: &Principal,
        sandbox: &Sandbox,
        req: &sandlot_types::ExecuteRequest,
        ask: &ReviewAsk,
    ) -> Result<Gated, ApiError> {
        let (fp, summary) =
            execute_review(sandbox, &req.code, req.language, req.context.as_deref());
        self.gate_held(
            who,
            GateRequest::Execute {
                sandbox: sandbox_ref(sandbox),
                code_bytes: req.code.len() as u64,
                language: req.language.as_str().into(),
                code: req.code.clone(),
            },
            format!("Sandbox::{:?}", sandbox.id),
            fp,
            summary,
            ask,
        )
        .await
    }

    /// The `execute` gate for a caller whose ask is the one in force ([`ReviewAsk::current`]:
    /// E2B, MCP, jobs): see [`Governance::settle`].
    pub async fn gate_execute_settled(
        &self,
        who: &Principal,
        sandbox: &Sandbox,
        code: &str,
        language: sandlot_types::Language,
        context: Option<&str>,
    ) -> Result<(), ApiError> {
        let resource = format!("Sandbox::{:?}", sandbox.id);
        let (id, d) = self.decide(
            &policy_principal(who),
            GateRequest::Execute {
                sandbox: sandbox_ref(sandbox),
                code_bytes: code.len() as u64,
                language: language.as_str().into(),
                code: code.to_owned(),
            },
            resource.clone(),
            None,
        );
        let (fp, summary) = execute_review(sandbox, code, language, context);
        self.settle(who, &d, &id, resource, fp, summary).await
    }

    /// The `execute` gate of work that runs later (a job): allowed → `None`; denied → 403
    /// `policy_denied`; held for review → the review that holds it (this key's pending or
    /// approved and unreleased one for exactly this code, or a new pending one), neither
    /// waited on nor released: the work runs once its runner's own gate
    /// ([`crate::Service::gate_execute`] under a retrying ask) finds it approved and
    /// releases it.
    pub fn gate_execute_later(
        &self,
        who: &Principal,
        sandbox: &Sandbox,
        code: &str,
        language: sandlot_types::Language,
    ) -> Result<Option<sandlot_store::ReviewRecord>, ApiError> {
        let pp = policy_principal(who);
        let resource = format!("Sandbox::{:?}", sandbox.id);
        let (id, d) = self.decide(
            &pp,
            GateRequest::Execute {
                sandbox: sandbox_ref(sandbox),
                code_bytes: code.len() as u64,
                language: language.as_str().into(),
                code: code.to_owned(),
            },
            resource.clone(),
            None,
        );
        if d.allowed {
            return Ok(None);
        }
        if !d.needs_review() {
            return Err(denied(&d, &id));
        }
        // The runner's gate goes through `Service::gate_execute` (no context).
        let (fp, summary) = execute_review(sandbox, code, language, None);
        let found = self.reviews.for_retry(&pp, d.gate.as_str(), &fp)?;
        match found {
            Some(r) => Ok(Some(r)),
            None => self
                .reviews
                .hold(&pp, &d, &id, resource, fp, summary)
                .map(Some),
        }
    }

    /// A gate whose caller can be held: allowed → proceed; denied → 403 `policy_denied`;
    /// held for review → see [`Governance::hold_decided`].
    pub async fn gate_held(
        &self,
        who: &Principal,
        request: GateRequest,
        resource: String,
        fp: String,
        summary: serde_json::Value,
        ask: &ReviewAsk,
    ) -> Result<Gated, ApiError> {
        ask.validate()?;
        let pp = policy_principal(who);
        let (id, d) = self.decide(&pp, request, resource.clone(), None);
        if d.allowed {
            return Ok(Gated::Proceed);
        }
        if !d.needs_review() {
            return Err(denied(&d, &id));
        }
        self.hold_decided(who, &d, &id, resource, fp, summary, ask)
            .await
    }

    /// A decision `d` (journaled as `id`) that needs review: a new pending review (or,
    /// re-submitted, the one `ask.review` names, which must hold exactly this action: same
    /// tenant, gate and fingerprint; or, for a caller that retries, the pending or approved
    /// and unreleased review of this tenant, key, gate and fingerprint), waited on for
    /// `ask.wait` seconds. Approved → released for this call only (proceed); denied → 403
    /// `review_denied`; still pending → [`Gated::Held`].
    #[allow(clippy::too_many_arguments)]
    pub async fn hold_decided(
        &self,
        who: &Principal,
        d: &Decision,
        id: &str,
        resource: String,
        fp: String,
        summary: serde_json::Value,
        ask: &ReviewAsk,
    ) -> Result<Gated, ApiError> {
        let pp = policy_principal(who);
        let gate = d.gate;
        let review = match &ask.review {
            Some(rid) => {
                let r = self.reviews.get_for(who, rid)?;
                // The operator sees every tenant's reviews, but releases only its own
                // tenant's actions: a re-submission is an action of the caller's tenant.
                if r.tenant != who.tenant {
                    return Err(review_not_found(rid));
                }
                if r.gate != gate.as_str() || r.fingerprint != fp {
                    return Err(ApiError::new(
                        ErrorCode::InvalidArgument,
                        format!(
                            "review {rid} holds another action; re-submit exactly the request it held"
                        ),
                    ));
                }
                r
            }
            None => {
                // A retry finds its review again only among the same key's own (a key
                // cannot be released by another key's approval, nor a tenant by another's).
                let found = if ask.retry {
                    self.reviews.for_retry(&pp, gate.as_str(), &fp)?
                } else {
                    None
                };
                match found {
                    Some(r) => r,
                    None => self.reviews.hold(&pp, d, id, resource, fp, summary)?,
                }
            }
        };
        let review = if review.state == "pending" && ask.wait > 0 {
            self.reviews
                .wait(&review.id, std::time::Duration::from_secs(ask.wait))
                .await?
        } else {
            review
        };
        match review.state.as_str() {
            "approved" => {
                self.reviews.release(&review)?;
                Ok(Gated::Proceed)
            }
            "denied" => Err(review_denied(&review)),
            _ => Ok(Gated::Held(Box::new(review))),
        }
    }

    /// The `build_template` gate of a build of `spec`, for every interface; a build held
    /// for review is held as [`Governance::settle`] says (the review holds exactly this
    /// spec, and shows its packages, imports, setup and limits).
    pub async fn gate_build(
        &self,
        who: &Principal,
        spec: &sandlot_types::TemplateSpec,
    ) -> Result<(), ApiError> {
        /// The most setup script a review shows.
        const SHOWN: usize = 16 << 10;
        let resource = format!("Template::{:?}", spec.name);
        let (id, d) = self.decide(
            &policy_principal(who),
            GateRequest::BuildTemplate {
                template: spec.name.clone(),
                packages: spec.packages.len() as u64,
            },
            resource.clone(),
            None,
        );
        if d.allowed {
            return Ok(());
        }
        let spec_json = serde_json::to_vec(spec).unwrap_or_default();
        let fp = fingerprint(&[b"build_template", who.tenant.as_bytes(), &spec_json]);
        let setup = spec.setup.as_deref().map(|s| {
            let mut cut = s.len().min(SHOWN);
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            &s[..cut]
        });
        let summary = serde_json::json!({
            "template": spec.name,
            "packages": spec.packages,
            "imports": spec.imports,
            "setup": setup,
            "limits": spec.limits,
        });
        self.settle(who, &d, &id, resource, fp, summary).await
    }

    /// The `build_template` gate: building template `name` with `packages` packages, or
    /// deleting it (`packages: 0`).
    pub fn gate_build_template(
        &self,
        who: &Principal,
        name: &str,
        packages: usize,
    ) -> Result<(), ApiError> {
        self.gate(
            who,
            GateRequest::BuildTemplate {
                template: name.to_owned(),
                packages: packages as u64,
            },
            format!("Template::{name:?}"),
        )
    }

    /// The `read_file` (`write: None`) or `write_file` (`write: Some(bytes)`) gate of a file
    /// of a sandbox's workspace (`path` relative to it, or absolute under `/workspace`).
    pub fn gate_file(
        &self,
        who: &Principal,
        sandbox: &Sandbox,
        path: &str,
        write: Option<u64>,
    ) -> Result<(), sandlot_types::ApiError> {
        let path = policy_path(path);
        let sandbox_r = sandbox_ref(sandbox);
        let request = match write {
            Some(bytes) => GateRequest::WriteFile {
                sandbox: sandbox_r,
                path,
                bytes,
            },
            None => GateRequest::ReadFile {
                sandbox: sandbox_r,
                path,
            },
        };
        self.gate(who, request, format!("Sandbox::{:?}", sandbox.id))
    }

    /// Who acts on a sandbox through a per-sandbox token rather than a key (E2B's envd
    /// routes): its tenant, as a member.
    pub fn sandbox_principal(&self, s: &Sandbox) -> Principal {
        Principal {
            key_id: format!("sandbox-token:{}", s.id),
            key_prefix: "sandbox-token".into(),
            tenant: s.tenant.clone(),
            role: sandlot_types::Role::Member,
            plan: self
                .keys
                .tenant(&s.tenant)
                .map(|t| t.plan)
                .unwrap_or_default(),
        }
    }
}

/// The fingerprint and summary of an execution held for review: exactly this code, in this
/// language, sandbox and context; the person sees the code (up to 64 KiB of it).
fn execute_review(
    sandbox: &Sandbox,
    code: &str,
    language: sandlot_types::Language,
    context: Option<&str>,
) -> (String, serde_json::Value) {
    /// The most code a review shows the person deciding.
    const SHOWN: usize = 64 << 10;
    let fp = fingerprint(&[
        b"execute",
        sandbox.id.as_bytes(),
        language.as_str().as_bytes(),
        context.unwrap_or("").as_bytes(),
        code.as_bytes(),
    ]);
    let mut cut = code.len().min(SHOWN);
    while !code.is_char_boundary(cut) {
        cut -= 1;
    }
    let summary = serde_json::json!({
        "sandbox": sandbox.id,
        "language": language.as_str(),
        "context": context,
        "code_bytes": code.len(),
        "code": &code[..cut],
        "code_truncated": cut < code.len(),
    });
    (fp, summary)
}

/// The path a file gate sees: `/workspace/` + the path without `.` or empty components, the
/// way the runtime resolves it (it refuses `..`), so `./secret` and `//secret` are `secret`.
pub fn policy_path(path: &str) -> String {
    let rel = path
        .strip_prefix("/workspace")
        .filter(|r| r.is_empty() || r.starts_with('/'))
        .unwrap_or(path);
    let parts: Vec<&str> = rel
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    format!("/workspace/{}", parts.join("/"))
}

/// The governor the runtime consults while sandboxes run.
pub struct ServerGovernor {
    gov: Arc<Governance>,
}

impl ServerGovernor {
    pub fn new(gov: Arc<Governance>) -> Self {
        Self { gov }
    }

    /// Who a sandbox's own actions (egress, output) are decided for: its tenant, as a member.
    fn principal_of(&self, s: &Sandbox) -> PolicyPrincipal {
        let plan = self
            .gov
            .keys
            .tenant(&s.tenant)
            .map(|t| t.plan)
            .unwrap_or_default();
        PolicyPrincipal {
            key_id: format!("sandbox:{}", s.id),
            key_prefix: "sandbox".into(),
            tenant: s.tenant.clone(),
            role: "member".into(),
            plan,
        }
    }
}

impl ServerGovernor {
    /// Egress a `@review` permit holds. The connection is refused at once (a proxy
    /// connection cannot wait minutes for a person) with "review pending" and the review's
    /// id; the review is made on the first attempt and found again on the next ones (one per
    /// sandbox, host and port). Once approved, that sandbox may reach that host and port for
    /// the rest of its life (the code retries: egress is re-playable by design); once denied,
    /// it may not.
    fn egress_review(
        &self,
        sandbox: &Sandbox,
        host: &str,
        port: u16,
        d: &Decision,
        decision: String,
    ) -> sandlot_egress::GateDecision {
        let host = host.to_ascii_lowercase();
        let fp = fingerprint(&[
            b"egress",
            sandbox.id.as_bytes(),
            host.as_bytes(),
            &port.to_be_bytes(),
        ]);
        let deny = |why: String| sandlot_egress::GateDecision::deny(why, decision.clone());
        self.gov.reviews.expire();
        let found = match self
            .gov
            .store
            .review_by_fingerprint(&sandbox.tenant, "egress", &fp)
        {
            Ok(found) => found,
            Err(e) => return deny(format!("review pending: the review store failed: {e}")),
        };
        match found {
            Some(r) if r.state == "approved" => {
                sandlot_egress::GateDecision::allow(decision.clone())
            }
            Some(r) if r.state == "denied" => deny(format!(
                "review {} denied by {}: {}",
                r.id,
                r.decided_by.as_deref().unwrap_or("?"),
                r.decision_reason.as_deref().unwrap_or("")
            )),
            Some(r) => deny(format!("review pending: {} ({})", r.id, r.reason)),
            None => {
                let summary = serde_json::json!({
                    "sandbox": sandbox.id,
                    "host": host,
                    "port": port,
                });
                match self.gov.reviews.hold(
                    &self.principal_of(sandbox),
                    d,
                    &decision,
                    format!("Domain::{host:?}"),
                    fp,
                    summary,
                ) {
                    Ok(r) => deny(format!("review pending: {} ({})", r.id, r.reason)),
                    Err(e) => deny(format!("review pending: {}", e.message)),
                }
            }
        }
    }
}

impl Governor for ServerGovernor {
    fn egress_gate(
        &self,
        sandbox: &Sandbox,
        host: &str,
        port: u16,
        ip: std::net::IpAddr,
        method: &str,
    ) -> sandlot_egress::GateDecision {
        let (id, d) = self.gov.decide(
            &self.principal_of(sandbox),
            GateRequest::Egress {
                host: host.to_ascii_lowercase(),
                port,
                ip: ip.to_string(),
                method: method.to_owned(),
            },
            format!("Domain::{:?}", host.to_ascii_lowercase()),
            Some(serde_json::json!({"sandbox": sandbox.id})),
        );
        if d.allowed {
            sandlot_egress::GateDecision::allow(id)
        } else if d.needs_review() {
            self.egress_review(sandbox, host, port, &d, id)
        } else {
            let by = d.policies.join(", ");
            sandlot_egress::GateDecision::deny(format!("policy {by}: {}", d.reason), id)
        }
    }

    fn egress_record(&self, e: sandlot_egress::EgressEvent) {
        let at = time::OffsetDateTime::from(e.started);
        sandlot_telemetry::metrics().egress_decision(e.allowed);
        self.gov.journal.egress(EgressRecord {
            sandbox_id: e.sandbox_id,
            at: at
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default(),
            host: e.host,
            port: e.port,
            ip: e.ip.map(|ip| ip.to_string()),
            method: e.method,
            allowed: e.allowed,
            reason: e.reason,
            bytes_up: e.bytes_up,
            bytes_down: e.bytes_down,
            decision_id: e.decision_id,
        });
    }

    fn output(&self, f: &OutputFinding<'_>) -> Outcome {
        let finding = Finding {
            rule: f.finding.rule.to_owned(),
            kind: sandlot_runtime::govern::kind_str(f.finding).to_owned(),
            stream: f.stream.to_owned(),
        };
        let pp = self.principal_of(f.sandbox);
        let (outcome, d) = self
            .gov
            .policy
            .output_outcome(&pp, &sandbox_ref(f.sandbox), &finding);
        // Withheld by a decision held for review: the execution's original output may be
        // released by a person (kept when the execution ends, `hold_output`).
        if d.needs_review() && outcome == Outcome::Withhold {
            if let Some(exec) = f.execution_id {
                self.gov.held_outputs.note(exec, &d, &pp);
            }
        }
        if f.record {
            sandlot_telemetry::metrics().guardrail_finding(outcome.as_str());
            let decision = self.gov.record(
                &pp,
                format!(
                    "Output::\"{}/{}/{}\"",
                    f.sandbox.id, f.stream, f.finding.rule
                ),
                &d,
                Some(serde_json::json!({"outcome": outcome.as_str()})),
            );
            self.gov.journal.finding(FindingRecord {
                sandbox_id: f.sandbox.id.clone(),
                execution_id: f.execution_id.map(str::to_owned),
                at: now(),
                rule: f.finding.rule.to_owned(),
                kind: finding.kind,
                stream: f.stream.to_owned(),
                sha256: f.finding.sha256.clone(),
                outcome: outcome.as_str().to_owned(),
                decision_id: Some(decision),
            });
        }
        outcome
    }

    fn contained(&self, sandbox: &Sandbox, why: &str) {
        tracing::warn!(sandbox = %sandbox.id, tenant = %sandbox.tenant, why, "contained");
    }

    fn hold_output(
        &self,
        sandbox: &Sandbox,
        execution_id: &str,
        outcome: Outcome,
        original: &sandlot_types::ExecutionResult,
    ) -> Option<String> {
        self.gov.hold_output(
            sandbox,
            execution_id,
            outcome == Outcome::Withhold,
            original,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::policy_path;

    #[test]
    fn policy_paths_name_the_file_the_runtime_opens() {
        assert_eq!(policy_path("secret.txt"), "/workspace/secret.txt");
        assert_eq!(policy_path("./secret.txt"), "/workspace/secret.txt");
        assert_eq!(policy_path("a//./b"), "/workspace/a/b");
        assert_eq!(policy_path("/workspace/./secret"), "/workspace/secret");
        assert_eq!(policy_path("/workspace//./secret"), "/workspace/secret");
        assert_eq!(policy_path(""), "/workspace/");
        assert_eq!(policy_path("/workspacex/a"), "/workspace/workspacex/a");
        // `..` is kept: the runtime refuses it anyway.
        assert_eq!(policy_path("a/../b"), "/workspace/a/../b");
        // Every protocol's path goes through it once; twice changes nothing.
        for p in ["secret.txt", "./a//b", "/workspacex/a", "", "a/../b"] {
            assert_eq!(policy_path(&policy_path(p)), policy_path(p), "{p}");
        }
    }
}
