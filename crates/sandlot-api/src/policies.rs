//! The policy set's routes (`GET`/`PUT /v1/policies`) and the decision record
//! (`GET /v1/decisions`). The gates themselves are the service's (`sandlot_service::gates`).

use crate::error::HttpError;
use crate::extract::ApiQuery;
use crate::govern::Caller;
use crate::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use sandlot_policy::PolicyInfo;
use sandlot_service::Governance;
use sandlot_types::ErrorCode;
use serde::{Deserialize, Serialize};

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
    let info = g
        .replace_policy(&text, &caller.0.key_prefix)
        .map_err(|e| match e {
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
    /// `allowed` | `denied`.
    #[serde(default)]
    outcome: Option<String>,
    /// A policy id among the deciding ones.
    #[serde(default)]
    policy: Option<String>,
    /// The operator's only: one tenant's decisions, or `*` for every tenant's.
    #[serde(default)]
    tenant: Option<String>,
}

/// `GET /v1/decisions[?gate=&outcome=&policy=&tenant=&limit=]`: the caller's tenant's
/// decisions, newest first. The operator may ask for another tenant's (`tenant=<name>`) or
/// every tenant's (`tenant=*`); anyone else naming a tenant but their own is refused (403).
pub(crate) async fn list_decisions<B>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiQuery(q): ApiQuery<DecisionQuery>,
) -> Result<Json<DecisionList>, HttpError> {
    let g = gov(&st)?;
    let tenant = scoped_tenant(&caller, q.tenant.as_deref())?;
    let allowed = match q.outcome.as_deref() {
        None | Some("") => None,
        Some("allowed") => Some(true),
        Some("denied") => Some(false),
        Some(other) => {
            return Err(HttpError::invalid_request(format!(
                "outcome must be allowed or denied, not {other:?}"
            )))
        }
    };
    let gate = q.gate.as_deref().filter(|g| !g.is_empty());
    let policy = q.policy.as_deref().filter(|p| !p.is_empty());
    for v in [gate, policy].into_iter().flatten() {
        if v.len() > 128 {
            return Err(HttpError::invalid_request(
                "a filter is longer than 128 bytes",
            ));
        }
    }
    let g2 = g.journal.clone();
    tokio::task::spawn_blocking(move || g2.flush())
        .await
        .map_err(|e| HttpError::internal(e.to_string()))?;
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    let rows = g
        .store
        .list_decisions_filtered(&sandlot_store::DecisionFilter {
            tenant: tenant.as_deref(),
            gate,
            allowed,
            policy,
            limit,
        })
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

/// The tenant a listing is narrowed to: the caller's own, or for the operator the one it
/// names (`None` for `*`: every tenant). Anyone else naming another tenant is refused.
pub(crate) fn scoped_tenant(
    caller: &Caller,
    asked: Option<&str>,
) -> Result<Option<String>, HttpError> {
    match asked.filter(|t| !t.is_empty()) {
        None => Ok(Some(caller.tenant().to_owned())),
        Some(t) if t == caller.tenant() => Ok(Some(t.to_owned())),
        Some(t) if caller.is_operator() => Ok((t != "*").then(|| t.to_owned())),
        Some(_) => Err(HttpError::new(
            ErrorCode::Forbidden,
            "only the operator lists another tenant's objects",
        )),
    }
}

/// How many versions one listing returns at most.
const MAX_VERSIONS: usize = 1000;

/// `GET /v1/policies/versions` response.
#[derive(Debug, Serialize, Deserialize)]
pub struct PolicyVersionList {
    /// Newest first; the first is the set in force. Without their text.
    pub versions: Vec<PolicyVersionView>,
    /// The version of the set in force.
    pub current: String,
}

/// One set that was put in force.
#[derive(Debug, Serialize, Deserialize)]
pub struct PolicyVersionView {
    /// The order sets were put in force (1, 2, ...).
    pub seq: i64,
    pub version: String,
    /// The prefix of the key that put it in force (`startup`: the set the server started with).
    pub set_by: String,
    pub at: String,
    /// The Cedar text (in `GET /v1/policies/versions/{v}` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

fn version_view(v: sandlot_store::PolicyVersionRecord, with_text: bool) -> PolicyVersionView {
    PolicyVersionView {
        seq: v.seq,
        version: v.version,
        set_by: v.key_prefix,
        at: v.at,
        text: with_text.then_some(v.text),
    }
}

/// `GET /v1/policies/versions` (operator): every set put in force, newest first. The whole
/// text of every set names every tenant it governs, so only the operator reads the history.
pub(crate) async fn list_versions<B>(
    State(st): State<AppState<B>>,
    caller: Caller,
) -> Result<Json<PolicyVersionList>, HttpError> {
    caller.require_operator()?;
    let g = gov(&st)?;
    let versions = g
        .store
        .list_policy_versions(MAX_VERSIONS)
        .map_err(|e| HttpError::internal(e.to_string()))?;
    Ok(Json(PolicyVersionList {
        versions: versions
            .into_iter()
            .map(|v| version_view(v, false))
            .collect(),
        current: g.policy.version(),
    }))
}

/// `GET /v1/policies/versions/{v}` (operator): one set by its version (the newest time it
/// was put in force) or its `seq`, with its text.
pub(crate) async fn get_version<B>(
    State(st): State<AppState<B>>,
    caller: Caller,
    crate::extract::ApiPath(v): crate::extract::ApiPath<String>,
) -> Result<axum::response::Response, HttpError> {
    use axum::response::IntoResponse;
    caller.require_operator()?;
    let g = gov(&st)?;
    // Not a version: the generic 404 (`not_found`), as for a path no route matches.
    let missing = || {
        sandlot_http::error_response(
            axum::http::StatusCode::NOT_FOUND,
            sandlot_http::ROUTE_NOT_FOUND,
            "no such policy version",
        )
    };
    if v.len() > 64 {
        return Ok(missing());
    }
    let found = g
        .store
        .get_policy_version(&v)
        .map_err(|e| HttpError::internal(e.to_string()))?;
    Ok(match found {
        Some(found) => Json(version_view(found, true)).into_response(),
        None => missing(),
    })
}

/// Largest "what if" body: a draft set of the largest size PUT accepts and the request.
const MAX_EVALUATE_BYTES: usize = sandlot_policy::MAX_POLICY_BYTES + 64 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EvaluateBody {
    /// `{gate, principal?, ...the gate's resource and context fields}`.
    request: serde_json::Value,
    /// A draft set (Cedar text) to decide with instead of the set in force.
    #[serde(default)]
    policies: Option<String>,
}

/// `POST /v1/policies/evaluate` answer.
#[derive(Debug, Serialize, Deserialize)]
pub struct EvaluateAnswer {
    /// `allow` | `deny` | `review`.
    pub decision: String,
    pub allowed: bool,
    pub needs_review: bool,
    /// The deciding policies' ids.
    pub policies: Vec<String>,
    pub reasons: Vec<String>,
    pub errors: Vec<String>,
    /// The version of the set that decided (the draft's, when one was given).
    pub version: String,
    /// Whether a draft decided (false: the set in force).
    pub draft: bool,
    /// The principal and request decided, with the defaults filled in.
    pub query: sandlot_policy::Query,
    /// Always true: nothing was run, held or journaled.
    pub dry_run: bool,
}

/// `POST /v1/policies/evaluate` (admin keys): how the set in force, or a draft set, decides
/// a request, without acting: nothing runs, nothing is held for review, and no decision is
/// journaled or audited as a real one (the request itself is audited as any call is). The
/// operator may ask as any principal; a tenant's admin asks as a key of its own tenant and is
/// answered only with the policies it may see. A draft is validated as `PUT /v1/policies`
/// validates it (a bad one is a 400 with the validator's message).
pub(crate) async fn evaluate<B>(
    State(st): State<AppState<B>>,
    caller: Caller,
    body: Bytes,
) -> Result<Json<EvaluateAnswer>, HttpError> {
    caller.require_admin()?;
    let g = gov(&st)?;
    if body.len() > MAX_EVALUATE_BYTES {
        return Err(HttpError::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "the body is {} bytes; at most {MAX_EVALUATE_BYTES} are accepted",
                body.len()
            ),
        ));
    }
    let b: EvaluateBody = serde_json::from_slice(&body).map_err(|e| {
        HttpError::invalid_request(format!(
            "expected {{\"request\": {{\"gate\": ..., ...}}, \"policies\"?: \"...\"}}: {e}"
        ))
    })?;
    if let Some(d) = &b.policies {
        if d.len() > sandlot_policy::MAX_POLICY_BYTES {
            return Err(HttpError::new(
                ErrorCode::PayloadTooLarge,
                format!(
                    "the draft is {} bytes; at most {} are accepted",
                    d.len(),
                    sandlot_policy::MAX_POLICY_BYTES
                ),
            ));
        }
    }
    let query = what_if_query(&caller, b.request)?;
    let g2 = st.gov.clone().expect("checked above");
    let draft = b.policies.clone();
    let q2 = query.clone();
    let decided = tokio::task::spawn_blocking(move || g2.what_if(&q2, draft.as_deref()))
        .await
        .map_err(|e| HttpError::internal(e.to_string()))?
        .map_err(|e| match e {
            sandlot_policy::PolicyError::Io { .. } => HttpError::internal(e.to_string()),
            other => {
                HttpError::invalid_request(format!("the draft policy set is refused: {other}"))
            }
        })?;
    let mut policies = decided.policies.clone();
    let mut reasons: Vec<String> = decided
        .review
        .iter()
        .cloned()
        .chain(std::iter::once(decided.reason.clone()))
        .filter(|r| !r.is_empty())
        .collect();
    let mut errors = decided.errors.clone();
    // A tenant's admin asking of the set in force sees only the policies it may see: ids of
    // others (which may name other tenants) and the reasons they gave are not shown.
    if b.policies.is_none() && !caller.is_operator() {
        let visible: std::collections::HashSet<String> = g
            .policy
            .info_for(caller.tenant(), &caller.0.key_id)
            .policies
            .into_iter()
            .map(|p| p.id)
            .collect();
        if policies.iter().any(|p| !visible.contains(p)) {
            policies.retain(|p| visible.contains(p));
            reasons = vec!["decided by a policy not shown to this tenant".into()];
            errors.clear();
        }
    }
    let decision = if decided.needs_review() {
        "review"
    } else if decided.allowed {
        "allow"
    } else {
        "deny"
    };
    Ok(Json(EvaluateAnswer {
        decision: decision.into(),
        allowed: decided.allowed,
        needs_review: decided.needs_review(),
        policies,
        reasons,
        errors,
        version: decided.version,
        draft: b.policies.is_some(),
        query,
        dry_run: true,
    }))
}

/// The query a "what if" asks: the request's principal (the caller's own by default; only
/// the operator may name another, and a tenant's admin is always of its own tenant), the
/// gate, and its fields with defaults filled in (a sandbox of the principal's tenant, the
/// code's length, port 443, ...).
fn what_if_query(
    caller: &Caller,
    mut request: serde_json::Value,
) -> Result<sandlot_policy::Query, HttpError> {
    use serde_json::{json, Value};
    let obj = request
        .as_object_mut()
        .ok_or_else(|| HttpError::invalid_request("request must be an object with a gate"))?;
    let mut principal = sandlot_service::gates::policy_principal(&caller.0);
    if let Some(p) = obj.remove("principal") {
        let Value::Object(p) = p else {
            return Err(HttpError::invalid_request("principal must be an object"));
        };
        for (k, v) in p {
            let Value::String(v) = v else {
                return Err(HttpError::invalid_request(format!(
                    "principal.{k} must be a string"
                )));
            };
            match k.as_str() {
                "key_id" => principal.key_id = v,
                "key_prefix" => principal.key_prefix = v,
                "tenant" => principal.tenant = v,
                "role" => principal.role = v,
                "plan" => principal.plan = v,
                other => {
                    return Err(HttpError::invalid_request(format!(
                        "principal has no field {other:?}"
                    )))
                }
            }
        }
        if !caller.is_operator() && principal.tenant != caller.tenant() {
            return Err(HttpError::new(
                ErrorCode::Forbidden,
                "only the operator asks as a principal of another tenant",
            ));
        }
    }
    let gate = obj
        .get("gate")
        .and_then(Value::as_str)
        .ok_or_else(|| HttpError::invalid_request("request.gate is required"))?
        .to_owned();
    let mut fill = |k: &str, v: Value| {
        obj.entry(k.to_owned()).or_insert(v);
    };
    let sandbox_default = json!({
        "id": "sb_whatif",
        "tenant": principal.tenant,
        "template": "default",
        "tier": sandlot_types::ISOLATED_TIER,
    });
    let sandbox_request = json!({
        "memory_mb": 512, "cpu_millis": 1000, "pids": 256, "disk_mb": 1024,
        "network": false, "allow": [], "tier": sandlot_types::ISOLATED_TIER, "ports": 0,
    });
    match gate.as_str() {
        "create_sandbox" => {
            fill("template", json!("default"));
            fill("request", sandbox_request.clone());
        }
        "select_tier" => {
            fill("tier", json!(sandlot_types::ISOLATED_TIER));
            fill("request", sandbox_request.clone());
        }
        "execute" => {
            fill("sandbox", sandbox_default.clone());
            fill("language", json!("python"));
            fill("code", json!(""));
        }
        "read_file" => {
            fill("sandbox", sandbox_default.clone());
        }
        "write_file" => {
            fill("sandbox", sandbox_default.clone());
            fill("bytes", json!(0));
        }
        "egress" => {
            fill("port", json!(443));
            fill("ip", json!(""));
            fill("method", json!("GET"));
        }
        "build_template" => {
            fill("packages", json!(0));
        }
        "output" => {
            fill("sandbox", sandbox_default.clone());
        }
        _ => {}
    }
    // Partial objects get the rest of their defaults (a sandbox given only its template).
    for (k, defaults) in [("sandbox", &sandbox_default), ("request", &sandbox_request)] {
        if let (Some(Value::Object(given)), Value::Object(d)) = (obj.get_mut(k), defaults) {
            for (dk, dv) in d {
                given.entry(dk.clone()).or_insert(dv.clone());
            }
        }
    }
    if gate == "execute" && !obj.contains_key("code_bytes") {
        let n = obj.get("code").and_then(Value::as_str).map_or(0, str::len);
        obj.insert("code_bytes".into(), json!(n));
    }
    // A sandbox decided for is always of the principal's tenant, as at the real gates.
    if let Some(Value::Object(sb)) = obj.get_mut("sandbox") {
        sb.insert("tenant".into(), json!(principal.tenant));
    }
    let request: sandlot_policy::GateRequest = serde_json::from_value(request)
        .map_err(|e| HttpError::invalid_request(format!("request for gate {gate:?}: {e}")))?;
    Ok(sandlot_policy::Query::new(principal, request))
}
