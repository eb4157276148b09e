//! The policy engine at every gate: the requests the HTTP edge sees (create and its tier,
//! execute, read and write a file, build a template) and what the runtime asks while a
//! sandbox runs ([`ServerGovernor`]: egress, output findings, containment).
//!
//! Every decision is recorded (the journal writes it behind the request) with the ids of the
//! policies that decided, the policy set's version and the latency; a denial answers 403
//! `policy_denied` naming them and why. Routes for the policy set itself
//! (`GET`/`PUT /v1/policies`) and the record (`GET /v1/decisions`) are here too.
//!
//! Tiers: `isolated` (the full jail, default) and `trusted` (limits up to the server's trusted
//! maxima). Tiers are ordered from least privileged upward; a creation gets the least one
//! that gives what it asks for (`trusted` when it names it or its limits need it), put to
//! `select_tier`. A request that needs `trusted` where it is not permitted is denied, never
//! quietly run with less; an `isolated` request denied its tier is not tried higher.

use crate::error::HttpError;
use crate::extract::ApiQuery;
use crate::govern::{Caller, Governance};
use crate::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use sandlot_policy::{
    Decision, Finding, GateRequest, PolicyInfo, PolicyPrincipal, Query, SandboxRef, SandboxRequest,
};
use sandlot_runtime::govern::{Governor, Outcome, OutputFinding};
use sandlot_store::{DecisionRecord, EgressRecord, FindingRecord};
use sandlot_types::{ErrorCode, Principal, Sandbox, ISOLATED_TIER, TRUSTED_TIER};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The tiers, least privileged first.
pub const TIERS: [&str; 2] = [ISOLATED_TIER, TRUSTED_TIER];

pub(crate) fn policy_principal(p: &Principal) -> PolicyPrincipal {
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
    let mut b = [0u8; 12];
    getrandom::fill(&mut b).expect("the kernel's random source works");
    format!("dec_{}", hex::encode(b))
}

impl Governance {
    /// Decides `request` for `who`, records the decision, and returns its id with it.
    pub(crate) fn decide(
        &self,
        who: &PolicyPrincipal,
        request: GateRequest,
        resource: String,
        detail: Option<serde_json::Value>,
    ) -> (String, Decision) {
        let d = self.policy.decide(&Query::new(who.clone(), request));
        let id = self.record(who, resource, &d, detail);
        (id, d)
    }

    pub(crate) fn record(
        &self,
        who: &PolicyPrincipal,
        resource: String,
        d: &Decision,
        mut detail: Option<serde_json::Value>,
    ) -> String {
        let id = decision_id();
        sandlot_telemetry::metrics().policy_decision(d.gate.as_str(), d.allowed);
        crate::record::Note::add_decision(&id);
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
    pub(crate) fn gate(
        &self,
        who: &Principal,
        request: GateRequest,
        resource: String,
    ) -> Result<(), HttpError> {
        let (id, d) = self.decide(&policy_principal(who), request, resource, None);
        if d.allowed {
            Ok(())
        } else {
            Err(denied(&d, &id))
        }
    }
}

/// The 403 of a denial: which policies, why, which set, and the decision's id.
pub(crate) fn denied(d: &Decision, id: &str) -> HttpError {
    let by = if d.policies.is_empty() {
        String::new()
    } else {
        format!(" by policy {}", d.policies.join(", "))
    };
    HttpError::new(
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
pub(crate) fn gate_create(
    gov: Option<&Governance>,
    who: &Principal,
    req: &sandlot_types::CreateSandbox,
    limits: sandlot_types::EffectiveLimits,
    needs_trusted: bool,
) -> Result<String, sandlot_types::ApiError> {
    match gov {
        Some(g) => g.gate_creation(who, req, limits, needs_trusted),
        None => Ok(req.tier.clone().unwrap_or_else(|| ISOLATED_TIER.into())),
    }
}

impl Governance {
    /// The creation gates, for every interface (REST, E2B, MCP): `create_sandbox` on its
    /// template, then `select_tier` for the least tier that gives what it asks for (`trusted`
    /// when it names it or `needs_trusted`: its limits are above the isolated maxima). The
    /// tier to run it in, or 403 `policy_denied`.
    pub fn gate_creation(
        &self,
        who: &Principal,
        req: &sandlot_types::CreateSandbox,
        limits: sandlot_types::EffectiveLimits,
        needs_trusted: bool,
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
        self.gate(
            who,
            GateRequest::CreateSandbox {
                template: template.clone(),
                request: request.clone(),
            },
            format!("Template::{template:?}"),
        )
        .map_err(|e| e.0)?;
        // Tiers above the least sufficient one are never tried: a denial there is the
        // answer, not a reason to run with more.
        let tier = if asked == TRUSTED_TIER || needs_trusted {
            TRUSTED_TIER
        } else {
            ISOLATED_TIER
        };
        let (id, d) = self.decide(
            &policy_principal(who),
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
        if d.allowed {
            Ok(tier.to_owned())
        } else {
            Err(denied(&d, &id).0)
        }
    }

    /// The creation gates for a sandbox made from an existing one (fork, resume, and any
    /// later way of bringing one back): the request is the existing sandbox's own (template,
    /// limits, egress, ports, tier), asked again by `who` now, so a policy that forbids
    /// creating it forbids getting more of it or getting it back. `Ok` or 403
    /// `policy_denied`; each decision is journaled as a creation's is.
    pub fn gate_like(
        &self,
        who: &Principal,
        sandbox: &Sandbox,
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
        self.gate_creation(who, &req, sandbox.limits, needs_trusted)
            .map(|_| ())
    }

    /// The `execute` gate of a sandbox, for every interface.
    pub fn gate_execute(
        &self,
        who: &Principal,
        sandbox: &Sandbox,
        code_bytes: usize,
        language: sandlot_types::Language,
    ) -> Result<(), sandlot_types::ApiError> {
        self.gate(
            who,
            GateRequest::Execute {
                sandbox: sandbox_ref(sandbox),
                code_bytes: code_bytes as u64,
                language: language.as_str().into(),
            },
            format!("Sandbox::{:?}", sandbox.id),
        )
        .map_err(|e| e.0)
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
            .map_err(|e| e.0)
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
}

/// `GET /v1/policies`: the whole set for the operator; for anyone else the policies that
/// could apply to them (`PolicyEngine::info_for`).
pub(crate) async fn get_policies<B>(
    State(st): State<AppState<B>>,
    caller: Caller,
) -> Result<Json<PolicyInfo>, HttpError> {
    let policy = &gov(&st)?.policy;
    Ok(Json(if caller.is_operator() {
        policy.info()
    } else {
        policy.info_for(caller.tenant(), &caller.0.key_id)
    }))
}

/// `PUT /v1/policies` (admin): the whole set as Cedar text (`text/plain`, or JSON
/// `{"policies": "..."}`). Validated against the schema before it replaces the set in force;
/// a refused set leaves it as it was.
pub(crate) async fn put_policies<B>(
    State(st): State<AppState<B>>,
    caller: Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<PolicyInfo>, HttpError> {
    caller.require_operator()?;
    let g = gov(&st)?;
    if body.len() > sandlot_policy::MAX_POLICY_BYTES {
        return Err(HttpError::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "the policy text is {} bytes; at most {} are accepted",
                body.len(),
                sandlot_policy::MAX_POLICY_BYTES
            ),
        ));
    }
    let is_json = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let text = if is_json {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Body {
            policies: String,
        }
        serde_json::from_slice::<Body>(&body)
            .map_err(|e| {
                HttpError::invalid_request(format!("expected {{\"policies\": \"...\"}}: {e}"))
            })?
            .policies
    } else {
        String::from_utf8(body.to_vec())
            .map_err(|_| HttpError::invalid_request("the policy text is not UTF-8"))?
    };
    let info = g.policy.replace(&text).map_err(|e| match e {
        sandlot_policy::PolicyError::Io { .. } => HttpError::internal(e.to_string()),
        other => HttpError::new(ErrorCode::InvalidPolicy, other.to_string()),
    })?;
    tracing::info!(version = %info.version, by = %caller.0.key_prefix, "policy set replaced");
    Ok(Json(info))
}

/// `GET /v1/decisions` response.
#[derive(Debug, Serialize, Deserialize)]
pub struct DecisionList {
    pub decisions: Vec<DecisionView>,
}

/// One recorded decision.
#[derive(Debug, Serialize, Deserialize)]
pub struct DecisionView {
    pub id: String,
    pub at: String,
    pub gate: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    pub resource: String,
    pub allowed: bool,
    pub policies: Vec<String>,
    pub reason: String,
    pub version: String,
    pub latency_us: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<serde_json::Value>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct DecisionQuery {
    #[serde(default)]
    gate: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
}

/// `GET /v1/decisions[?gate=&limit=]`: the caller's tenant's decisions, newest first.
pub(crate) async fn list_decisions<B>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiQuery(q): ApiQuery<DecisionQuery>,
) -> Result<Json<DecisionList>, HttpError> {
    let g = gov(&st)?;
    let g2 = g.journal.clone();
    tokio::task::spawn_blocking(move || g2.flush())
        .await
        .map_err(|e| HttpError::internal(e.to_string()))?;
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    let rows = g
        .store
        .list_decisions(Some(caller.tenant()), q.gate.as_deref(), limit)
        .map_err(|e| HttpError::internal(e.to_string()))?;
    Ok(Json(DecisionList {
        decisions: rows
            .into_iter()
            .map(|d| DecisionView {
                id: d.id,
                at: d.at,
                gate: d.gate,
                key_id: d.key_id,
                tenant: d.tenant,
                resource: d.resource,
                allowed: d.allowed,
                policies: d.policies,
                reason: d.reason,
                version: d.version,
                latency_us: d.latency_us,
                detail: d.detail,
            })
            .collect(),
    }))
}

fn gov<B>(st: &AppState<B>) -> Result<&Governance, HttpError> {
    st.gov.as_deref().ok_or_else(|| {
        HttpError::new(
            ErrorCode::Forbidden,
            "this server runs without governance (SANDLOT_AUTH=off): no policies",
        )
    })
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
