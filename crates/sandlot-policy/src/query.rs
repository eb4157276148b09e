//! What a decision is asked about: the gate, the principal, and per gate its resource and
//! context as typed Rust values, turned into a Cedar request and entity store.
//!
//! The conversion skips Cedar's per-request schema checks (they cost more than the decision):
//! the shapes here are fixed in code and checked against the loaded schema once, when the
//! engine opens ([`crate::engine`] builds a sample of every gate and validates it).

use crate::gate::Gate;
use crate::schema::NAMES;
use cedar_policy::{Context, Entities, Entity, EntityUid, Request, RestrictedExpression, Schema};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};

/// The principal: an authenticated API key and its tenant (the shape of
/// `sandlot_types::Principal`, with the role as its lowercase name).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PolicyPrincipal {
    /// Uid of the `Sandlot::Key` entity.
    pub key_id: String,
    pub key_prefix: String,
    pub tenant: String,
    /// "admin" | "member".
    pub role: String,
    /// The tenant's plan ("free", "local", ...).
    pub plan: String,
}

/// A sandbox as a resource (`Sandlot::Sandbox`) or as the sandbox of an output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxRef {
    pub id: String,
    /// The owning tenant (the principal's, after tenant scoping).
    pub tenant: String,
    pub template: String,
    pub tier: String,
}

/// What a sandbox creation asks for: the context of `create_sandbox` and `select_tier`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxRequest {
    pub memory_mb: u64,
    pub cpu_millis: u64,
    pub pids: u64,
    pub disk_mb: u64,
    /// True when any egress is asked for.
    pub network: bool,
    /// The egress allowlist asked for (domains, CIDRs).
    pub allow: Vec<String>,
    /// The tier asked for.
    pub tier: String,
    /// How many ports are exposed.
    pub ports: u64,
}

/// A guardrail finding: the context of the output gates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// The detector rule, e.g. "aws-access-key-id".
    pub rule: String,
    /// "secret" | "canary".
    pub kind: String,
    /// "stdout" | "stderr" | "result" | "file" | "egress".
    pub stream: String,
}

/// One of the three output outcome gates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputGate {
    Redact,
    Withhold,
    Contain,
}

impl OutputGate {
    pub fn gate(self) -> Gate {
        match self {
            OutputGate::Redact => Gate::OutputRedact,
            OutputGate::Withhold => Gate::OutputWithhold,
            OutputGate::Contain => Gate::OutputContain,
        }
    }
}

/// A gate with its resource and context. Each variant fixes the resource type and the context
/// shape the schema declares for that action, so a mismatched query cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "gate", rename_all = "snake_case")]
pub enum GateRequest {
    /// Resource `Template::"<template>"`.
    CreateSandbox {
        template: String,
        request: SandboxRequest,
    },
    /// Resource `Tier::"<tier>"` (the tier being tried).
    SelectTier {
        tier: String,
        request: SandboxRequest,
    },
    /// Resource the sandbox.
    Execute {
        sandbox: SandboxRef,
        code_bytes: u64,
        language: String,
        /// The code itself.
        #[serde(default)]
        code: String,
    },
    ReadFile {
        sandbox: SandboxRef,
        path: String,
    },
    WriteFile {
        sandbox: SandboxRef,
        path: String,
        bytes: u64,
    },
    /// Resource `Domain::"<host>"` (the host lowercased).
    Egress {
        host: String,
        port: u16,
        /// "" before name resolution.
        ip: String,
        method: String,
    },
    /// Resource `Template::"<template>"`.
    BuildTemplate {
        template: String,
        packages: u64,
    },
    /// Resource `HostPath::"<host path>"`: a read-only host path a trusted-tier sandbox asks
    /// to mount at `target` (context also the tier asked for).
    MountHostPath {
        host: String,
        target: String,
        tier: String,
    },
    /// Resource `Output::"<sandbox id>/<stream>/<rule>"` with the sandbox.
    Output {
        outcome: OutputGate,
        sandbox: SandboxRef,
        finding: Finding,
    },
}

impl GateRequest {
    pub fn gate(&self) -> Gate {
        match self {
            GateRequest::CreateSandbox { .. } => Gate::CreateSandbox,
            GateRequest::SelectTier { .. } => Gate::SelectTier,
            GateRequest::Execute { .. } => Gate::Execute,
            GateRequest::ReadFile { .. } => Gate::ReadFile,
            GateRequest::WriteFile { .. } => Gate::WriteFile,
            GateRequest::Egress { .. } => Gate::Egress,
            GateRequest::BuildTemplate { .. } => Gate::BuildTemplate,
            GateRequest::Output { outcome, .. } => outcome.gate(),
            GateRequest::MountHostPath { .. } => Gate::MountHostPath,
        }
    }
}

/// A question for the engine: may `principal` pass this gate?
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Query {
    pub principal: PolicyPrincipal,
    pub request: GateRequest,
}

impl Query {
    pub fn new(principal: PolicyPrincipal, request: GateRequest) -> Query {
        Query { principal, request }
    }

    pub fn gate(&self) -> Gate {
        self.request.gate()
    }

    /// The Cedar request and the entities it refers to, checked against `schema` when given
    /// (only when the engine opens: the check costs more than a decision). Errors are Cedar's;
    /// the engine turns them into a recorded deny.
    pub(crate) fn to_cedar(&self, schema: Option<&Schema>) -> Result<(Request, Entities), String> {
        let n = &*NAMES;
        let p = &self.principal;
        let tenant_uid = n.uid(&n.tenant, &p.tenant);
        let key_uid = n.uid(&n.key, &p.key_id);
        let mut entities = Vec::with_capacity(5);
        entities.push(entity(
            key_uid.clone(),
            [
                (
                    "tenant",
                    RestrictedExpression::new_entity_uid(tenant_uid.clone()),
                ),
                ("role", string(&p.role)),
                ("plan", string(&p.plan)),
                ("prefix", string(&p.key_prefix)),
            ],
            Some(tenant_uid.clone()),
        )?);
        entities.push(entity(tenant_uid, [("plan", string(&p.plan))], None)?);

        let (resource, context) = match &self.request {
            GateRequest::CreateSandbox { template, request } => {
                let uid = n.uid(&n.template, template);
                entities.push(entity(uid.clone(), [("name", string(template))], None)?);
                (uid, sandbox_request(request))
            }
            GateRequest::SelectTier { tier, request } => {
                let uid = n.uid(&n.tier, tier);
                entities.push(entity(uid.clone(), [("name", string(tier))], None)?);
                (uid, sandbox_request(request))
            }
            GateRequest::Execute {
                sandbox,
                code_bytes,
                language,
                code,
            } => (
                sandbox_entity(sandbox, &mut entities)?,
                vec![
                    ("code_bytes", long(*code_bytes)),
                    ("language", string(language)),
                    ("code", string(code)),
                ],
            ),
            GateRequest::ReadFile { sandbox, path } => (
                sandbox_entity(sandbox, &mut entities)?,
                vec![("path", string(path)), ("bytes", long(0))],
            ),
            GateRequest::WriteFile {
                sandbox,
                path,
                bytes,
            } => (
                sandbox_entity(sandbox, &mut entities)?,
                vec![("path", string(path)), ("bytes", long(*bytes))],
            ),
            GateRequest::Egress {
                host,
                port,
                ip,
                method,
            } => {
                let host = host.to_ascii_lowercase();
                let uid = n.uid(&n.domain, &host);
                entities.push(entity(uid.clone(), [("name", string(&host))], None)?);
                (
                    uid,
                    vec![
                        ("host", string(&host)),
                        ("port", long(u64::from(*port))),
                        ("ip", string(ip)),
                        ("method", string(method)),
                    ],
                )
            }
            GateRequest::BuildTemplate { template, packages } => {
                let uid = n.uid(&n.template, template);
                entities.push(entity(uid.clone(), [("name", string(template))], None)?);
                (uid, vec![("packages", long(*packages))])
            }
            GateRequest::MountHostPath { host, target, tier } => {
                let uid = n.uid(&n.host_path, host);
                entities.push(entity(uid.clone(), [("path", string(host))], None)?);
                (
                    uid,
                    vec![("target", string(target)), ("tier", string(tier))],
                )
            }
            GateRequest::Output {
                sandbox, finding, ..
            } => {
                let sandbox_uid = sandbox_entity(sandbox, &mut entities)?;
                let id = format!("{}/{}/{}", sandbox.id, finding.stream, finding.rule);
                let uid = n.uid(&n.output, &id);
                entities.push(entity(
                    uid.clone(),
                    [("sandbox", RestrictedExpression::new_entity_uid(sandbox_uid))],
                    None,
                )?);
                (
                    uid,
                    vec![
                        ("rule", string(&finding.rule)),
                        ("kind", string(&finding.kind)),
                        ("stream", string(&finding.stream)),
                    ],
                )
            }
        };
        let context = Context::from_pairs(context.into_iter().map(|(k, v)| (k.to_string(), v)))
            .map_err(|e| format!("context: {e}"))?;
        let request = Request::new(
            key_uid,
            n.action(self.gate()).clone(),
            resource,
            context,
            schema,
        )
        .map_err(|e| format!("request: {e}"))?;
        let entities =
            Entities::from_entities(entities, schema).map_err(|e| format!("entities: {e}"))?;
        Ok((request, entities))
    }
}

fn string(s: &str) -> RestrictedExpression {
    RestrictedExpression::new_string(s.to_string())
}

/// Cedar longs are i64: larger counts saturate (a limit check against them still holds).
fn long(v: u64) -> RestrictedExpression {
    RestrictedExpression::new_long(i64::try_from(v).unwrap_or(i64::MAX))
}

fn entity<const N: usize>(
    uid: EntityUid,
    attrs: [(&str, RestrictedExpression); N],
    parent: Option<EntityUid>,
) -> Result<Entity, String> {
    let attrs: HashMap<String, RestrictedExpression> =
        attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let parents: HashSet<EntityUid> = parent.into_iter().collect();
    Entity::new(uid, attrs, parents).map_err(|e| format!("entity: {e}"))
}

fn sandbox_entity(s: &SandboxRef, entities: &mut Vec<Entity>) -> Result<EntityUid, String> {
    let n = &*NAMES;
    let uid = n.uid(&n.sandbox, &s.id);
    let tenant = n.uid(&n.tenant, &s.tenant);
    entities.push(entity(
        uid.clone(),
        [
            (
                "tenant",
                RestrictedExpression::new_entity_uid(tenant.clone()),
            ),
            ("template", string(&s.template)),
            ("tier", string(&s.tier)),
        ],
        Some(tenant),
    )?);
    Ok(uid)
}

fn sandbox_request(r: &SandboxRequest) -> Vec<(&'static str, RestrictedExpression)> {
    vec![
        ("memory_mb", long(r.memory_mb)),
        ("cpu_millis", long(r.cpu_millis)),
        ("pids", long(r.pids)),
        ("disk_mb", long(r.disk_mb)),
        ("network", RestrictedExpression::new_bool(r.network)),
        (
            "allow",
            RestrictedExpression::new_set(r.allow.iter().map(|a| string(a))),
        ),
        ("tier", string(&r.tier)),
        ("ports", long(r.ports)),
    ]
}
