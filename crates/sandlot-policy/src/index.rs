//! A guard index over each gate's policies, so a decision evaluates only the policies that
//! can apply to its query.
//!
//! Why: Cedar evaluates every policy of the set it is given, at about a microsecond each, so
//! 100 policies cost more than the decision budget. Most policies start by pinning something
//! the query carries: a scope (`principal == Key::"k"`, `resource == Tier::"trusted"`,
//! `principal in Tenant::"acme"`) or a first `when` conjunct comparing an attribute with a
//! literal (`principal.tenant == Tenant::"t1" && ...`, `context.kind == "canary"`). Such a
//! *guard* is evaluated here, on the typed query, in nanoseconds; a policy with a false guard
//! cannot be satisfied, so it is left out of the set handed to Cedar.
//!
//! Exactness: Cedar evaluates the scope, then the `when` clauses left to right, and `&&`
//! short-circuits. Only guards that cannot error are used (scope tests; equality of a
//! variable's declared attribute with a literal: the server's entities always carry every
//! attribute the schema declares, and `==` of different types is false, not an error), and
//! only the leading conjuncts of the first condition: whenever a guard is false, Cedar would
//! have stopped there with "not satisfied" and no error. So the decision is the same as over
//! the whole set; the tests compare both on every query they make.
//!
//! The candidate sets are cached per gate and candidate bitmap (a stream of queries from one
//! tenant keeps hitting the same one), bounded, and dropped with the policy set.

use crate::query::{GateRequest, Query};
use cedar_policy::{Policy, PolicySet};
use serde_json::Value as Json;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// At most this many cached candidate sets per policy set (a full cache is emptied: simple,
/// and a working set that large means the cache is not helping anyway).
const MAX_CACHED_SETS: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Var {
    Principal,
    Resource,
    Context,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Lit {
    Str(String),
    Long(i64),
    Bool(bool),
    Entity { ty: String, id: String },
}

/// A test on the query that must hold for the policy to be satisfiable.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Guard {
    /// `var == lit` (attr None) or `var.attr == lit`.
    Eq {
        var: Var,
        attr: Option<String>,
        lit: Lit,
    },
    /// `var in Type::"id"` (the scope form).
    In { var: Var, ty: String, id: String },
}

/// A value the query carries.
#[derive(Debug, PartialEq, Eq)]
enum Val<'a> {
    Str(Cow<'a, str>),
    Long(i64),
    Bool(bool),
    Entity(&'static str, Cow<'a, str>),
}

const KEY: &str = "Sandlot::Key";
const TENANT: &str = "Sandlot::Tenant";
const SANDBOX: &str = "Sandlot::Sandbox";
const TEMPLATE: &str = "Sandlot::Template";
const DOMAIN: &str = "Sandlot::Domain";
const TIER: &str = "Sandlot::Tier";
const OUTPUT: &str = "Sandlot::Output";
const HOST_PATH: &str = "Sandlot::HostPath";

fn s(v: &str) -> Option<Val<'_>> {
    Some(Val::Str(Cow::Borrowed(v)))
}

fn long(v: u64) -> Option<Val<'static>> {
    Some(Val::Long(i64::try_from(v).unwrap_or(i64::MAX)))
}

/// The query's value of `var` or `var.attr`, as the engine puts it in the Cedar request; None
/// for anything not known here (then the guard is not used: the policy stays a candidate).
fn value<'a>(q: &'a Query, var: Var, attr: Option<&str>) -> Option<Val<'a>> {
    use GateRequest as R;
    let p = &q.principal;
    match (var, attr) {
        (Var::Principal, None) => Some(Val::Entity(KEY, Cow::Borrowed(&p.key_id))),
        (Var::Principal, Some("tenant")) => Some(Val::Entity(TENANT, Cow::Borrowed(&p.tenant))),
        (Var::Principal, Some("role")) => s(&p.role),
        (Var::Principal, Some("plan")) => s(&p.plan),
        (Var::Principal, Some("prefix")) => s(&p.key_prefix),
        (Var::Principal, Some(_)) => None,
        (Var::Resource, attr) => match (&q.request, attr) {
            (R::CreateSandbox { template, .. } | R::BuildTemplate { template, .. }, None) => {
                Some(Val::Entity(TEMPLATE, Cow::Borrowed(template)))
            }
            (
                R::CreateSandbox { template, .. } | R::BuildTemplate { template, .. },
                Some("name"),
            ) => s(template),
            (R::SelectTier { tier, .. }, None) => Some(Val::Entity(TIER, Cow::Borrowed(tier))),
            (R::SelectTier { tier, .. }, Some("name")) => s(tier),
            (R::MountHostPath { host, .. }, None) => {
                Some(Val::Entity(HOST_PATH, Cow::Borrowed(host)))
            }
            (R::MountHostPath { host, .. }, Some("path")) => s(host),
            (R::Egress { host, .. }, None) => Some(Val::Entity(DOMAIN, lower(host))),
            (R::Egress { host, .. }, Some("name")) => Some(Val::Str(lower(host))),
            (
                R::Execute { sandbox, .. }
                | R::ReadFile { sandbox, .. }
                | R::WriteFile { sandbox, .. },
                attr,
            ) => match attr {
                None => Some(Val::Entity(SANDBOX, Cow::Borrowed(&sandbox.id))),
                Some("tenant") => Some(Val::Entity(TENANT, Cow::Borrowed(&sandbox.tenant))),
                Some("template") => s(&sandbox.template),
                Some("tier") => s(&sandbox.tier),
                Some(_) => None,
            },
            (
                R::Output {
                    sandbox, finding, ..
                },
                None,
            ) => Some(Val::Entity(
                OUTPUT,
                Cow::Owned(format!(
                    "{}/{}/{}",
                    sandbox.id, finding.stream, finding.rule
                )),
            )),
            (R::Output { sandbox, .. }, Some("sandbox")) => {
                Some(Val::Entity(SANDBOX, Cow::Borrowed(&sandbox.id)))
            }
            _ => None,
        },
        (Var::Context, None) => None,
        (Var::Context, Some(a)) => match (&q.request, a) {
            (R::CreateSandbox { request: r, .. } | R::SelectTier { request: r, .. }, a) => {
                match a {
                    "memory_mb" => long(r.memory_mb),
                    "cpu_millis" => long(r.cpu_millis),
                    "pids" => long(r.pids),
                    "disk_mb" => long(r.disk_mb),
                    "network" => Some(Val::Bool(r.network)),
                    "tier" => s(&r.tier),
                    "ports" => long(r.ports),
                    _ => None,
                }
            }
            (R::Execute { code_bytes, .. }, "code_bytes") => long(*code_bytes),
            (R::Execute { language, .. }, "language") => s(language),
            (R::ReadFile { path, .. } | R::WriteFile { path, .. }, "path") => s(path),
            (R::ReadFile { .. }, "bytes") => long(0),
            (R::WriteFile { bytes, .. }, "bytes") => long(*bytes),
            (R::Egress { host, .. }, "host") => Some(Val::Str(lower(host))),
            (R::Egress { port, .. }, "port") => long(u64::from(*port)),
            (R::Egress { ip, .. }, "ip") => s(ip),
            (R::Egress { method, .. }, "method") => s(method),
            (R::BuildTemplate { packages, .. }, "packages") => long(*packages),
            (R::MountHostPath { target, .. }, "target") => s(target),
            (R::MountHostPath { tier, .. }, "tier") => s(tier),
            (R::Output { finding, .. }, "rule") => s(&finding.rule),
            (R::Output { finding, .. }, "kind") => s(&finding.kind),
            (R::Output { finding, .. }, "stream") => s(&finding.stream),
            _ => None,
        },
    }
}

fn lower(host: &str) -> Cow<'_, str> {
    if host.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(host.to_ascii_lowercase())
    } else {
        Cow::Borrowed(host)
    }
}

impl Guard {
    /// False only when the policy cannot be satisfied by `q`.
    fn holds(&self, q: &Query) -> bool {
        match self {
            Guard::Eq { var, attr, lit } => match value(q, *var, attr.as_deref()) {
                None => true,
                Some(v) => match (lit, v) {
                    (Lit::Str(a), Val::Str(b)) => *a == b,
                    (Lit::Long(a), Val::Long(b)) => *a == b,
                    (Lit::Bool(a), Val::Bool(b)) => *a == b,
                    (Lit::Entity { ty, id }, Val::Entity(t, i)) => ty == t && *id == i,
                    // Cedar's `==` across types is false.
                    _ => false,
                },
            },
            Guard::In { var, ty, id } => {
                // The engine's entity store: a key's only ancestor is its tenant, a sandbox's
                // its tenant, other resources have none.
                let (own, parent) = match var {
                    Var::Principal => (
                        value(q, Var::Principal, None),
                        Some(Cow::Borrowed(q.principal.tenant.as_str())),
                    ),
                    Var::Resource => (
                        value(q, Var::Resource, None),
                        match &q.request {
                            GateRequest::Execute { sandbox, .. }
                            | GateRequest::ReadFile { sandbox, .. }
                            | GateRequest::WriteFile { sandbox, .. } => {
                                Some(Cow::Borrowed(sandbox.tenant.as_str()))
                            }
                            _ => None,
                        },
                    ),
                    Var::Context => return true,
                };
                let Some(Val::Entity(own_ty, own_id)) = own else {
                    return true;
                };
                (own_ty == ty && own_id == id.as_str())
                    || (ty == TENANT && parent.is_some_and(|t| t == id.as_str()))
            }
        }
    }
}

/// The guards of one policy, from its JSON form (EST).
fn guards_of(policy: &Policy) -> Vec<Guard> {
    let Ok(est) = policy.to_json() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (key, var) in [("principal", Var::Principal), ("resource", Var::Resource)] {
        let scope = &est[key];
        let entity = || -> Option<(String, String)> {
            Some((
                scope["entity"]["type"].as_str()?.to_string(),
                scope["entity"]["id"].as_str()?.to_string(),
            ))
        };
        match (scope["op"].as_str(), entity()) {
            (Some("=="), Some((ty, id))) => out.push(Guard::Eq {
                var,
                attr: None,
                lit: Lit::Entity { ty, id },
            }),
            (Some("in"), Some((ty, id))) => out.push(Guard::In { var, ty, id }),
            _ => {}
        }
    }
    if let Some(first) = est["conditions"].as_array().and_then(|c| c.first()) {
        if first["kind"] == "when" {
            let mut conjuncts = Vec::new();
            flatten_and(&first["body"], &mut conjuncts);
            for c in conjuncts {
                match equality_guard(c) {
                    Some(g) => out.push(g),
                    // Past a conjunct that is not a guard, later ones may not be reached
                    // without an error first.
                    None => break,
                }
            }
        }
    }
    out
}

/// The conjuncts of `a && b && ...` in evaluation order.
fn flatten_and<'a>(e: &'a Json, out: &mut Vec<&'a Json>) {
    match e.get("&&") {
        Some(and) => {
            flatten_and(&and["left"], out);
            flatten_and(&and["right"], out);
        }
        None => out.push(e),
    }
}

/// `var.attr == literal` or `var == literal` (either side), where var is principal, resource
/// or context.
fn equality_guard(e: &Json) -> Option<Guard> {
    let eq = e.get("==")?;
    let (l, r) = (&eq["left"], &eq["right"]);
    let (side, lit) = match (literal(l), literal(r)) {
        (None, Some(lit)) => (l, lit),
        (Some(lit), None) => (r, lit),
        _ => return None,
    };
    let (var, attr) = match side.get(".") {
        Some(dot) => (
            variable(&dot["left"])?,
            Some(dot["attr"].as_str()?.to_string()),
        ),
        None => (variable(side)?, None),
    };
    if var == Var::Context && attr.is_none() {
        return None;
    }
    Some(Guard::Eq { var, attr, lit })
}

fn variable(e: &Json) -> Option<Var> {
    match e.get("Var")?.as_str()? {
        "principal" => Some(Var::Principal),
        "resource" => Some(Var::Resource),
        "context" => Some(Var::Context),
        _ => None,
    }
}

fn literal(e: &Json) -> Option<Lit> {
    let v = e.get("Value")?;
    match v {
        Json::String(s) => Some(Lit::Str(s.clone())),
        Json::Bool(b) => Some(Lit::Bool(*b)),
        Json::Number(n) => n.as_i64().map(Lit::Long),
        Json::Object(o) => {
            let ent = o.get("__entity")?;
            Some(Lit::Entity {
                ty: ent["type"].as_str()?.to_string(),
                id: ent["id"].as_str()?.to_string(),
            })
        }
        _ => None,
    }
}

/// One gate's policies, with their guards.
pub(crate) struct GateIndex {
    policies: Vec<(Policy, Vec<Guard>)>,
    /// All of them (when every guard holds, or none exists).
    full: Arc<PolicySet>,
    cache: RwLock<HashMap<Vec<u64>, Arc<PolicySet>>>,
}

impl GateIndex {
    pub fn new(policies: Vec<Policy>) -> Result<GateIndex, String> {
        let full = Arc::new(
            PolicySet::from_policies(policies.iter().cloned()).map_err(|e| e.to_string())?,
        );
        Ok(GateIndex {
            policies: policies
                .into_iter()
                .map(|p| {
                    let g = guards_of(&p);
                    (p, g)
                })
                .collect(),
            full,
            cache: RwLock::new(HashMap::new()),
        })
    }

    /// Every policy of the gate (for comparisons in tests).
    pub fn full(&self) -> Arc<PolicySet> {
        self.full.clone()
    }

    /// The policies that can apply to `q`.
    pub fn candidates(&self, q: &Query) -> Arc<PolicySet> {
        let mut mask = vec![0u64; self.policies.len().div_ceil(64)];
        let mut all = true;
        for (i, (_, guards)) in self.policies.iter().enumerate() {
            if guards.iter().all(|g| g.holds(q)) {
                mask[i / 64] |= 1 << (i % 64);
            } else {
                all = false;
            }
        }
        if all {
            return self.full.clone();
        }
        if let Some(set) = self
            .cache
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&mask)
        {
            return set.clone();
        }
        let chosen = self
            .policies
            .iter()
            .enumerate()
            .filter(|(i, _)| mask[i / 64] & (1 << (i % 64)) != 0)
            .map(|(_, (p, _))| p.clone());
        let set = match PolicySet::from_policies(chosen) {
            Ok(set) => Arc::new(set),
            // Cannot happen (ids are unique in the full set); the full set is always right.
            Err(_) => return self.full.clone(),
        };
        let mut cache = self.cache.write().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= MAX_CACHED_SETS {
            cache.clear();
        }
        cache.insert(mask, set.clone());
        set
    }

    #[cfg(test)]
    fn guards(&self) -> Vec<Vec<Guard>> {
        self.policies.iter().map(|(_, g)| g.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn index(text: &str) -> GateIndex {
        let set = PolicySet::from_str(text).unwrap();
        let mut ps: Vec<Policy> = set.policies().cloned().collect();
        ps.sort_by_key(|p| p.id().to_string());
        GateIndex::new(ps).unwrap()
    }

    #[test]
    fn guards_are_the_scopes_and_leading_equalities() {
        let idx = index(
            r#"permit (principal == Sandlot::Key::"k", action, resource in Sandlot::Tenant::"t")
               when { principal.tenant == Sandlot::Tenant::"t" && "x" == context.kind
                      && context.code_bytes > 3 && principal.plan == "free" };
               forbid (principal, action, resource) unless { principal.plan == "free" };
               forbid (principal, action, resource) when { context.code_bytes > 3 && principal.plan == "free" };
               forbid (principal, action, resource) when { principal.role == "admin" } when { principal.plan == "free" };"#,
        );
        let g = idx.guards();
        let ent = |ty: &str, id: &str| Lit::Entity {
            ty: ty.into(),
            id: id.into(),
        };
        assert_eq!(
            g[0],
            vec![
                Guard::Eq {
                    var: Var::Principal,
                    attr: None,
                    lit: ent(KEY, "k")
                },
                Guard::In {
                    var: Var::Resource,
                    ty: TENANT.into(),
                    id: "t".into()
                },
                Guard::Eq {
                    var: Var::Principal,
                    attr: Some("tenant".into()),
                    lit: ent(TENANT, "t")
                },
                Guard::Eq {
                    var: Var::Context,
                    attr: Some("kind".into()),
                    lit: Lit::Str("x".into())
                },
            ]
        );
        assert!(g[1].is_empty(), "unless is not a guard");
        assert!(
            g[2].is_empty(),
            "a guard after a non-guard may not be reached"
        );
        assert_eq!(g[3].len(), 1, "only the first condition");
    }
}
