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
