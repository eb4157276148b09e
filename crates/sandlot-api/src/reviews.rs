//! The held actions' routes: `GET /v1/reviews` (the caller's tenant's; every tenant's for the
//! operator), `GET /v1/reviews/{id}`, and `POST /v1/reviews/{id}/approve|deny` with
//! `{"reason": "..."}`. Who may decide, and what a decision releases, is the service's
//! (`sandlot_service::reviews`).

use crate::error::HttpError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::govern::Caller;
use crate::AppState;
use axum::extract::State;
use axum::Json;
use sandlot_service::Governance;
use sandlot_store::ReviewRecord;
use sandlot_types::ErrorCode;
use serde::{Deserialize, Serialize};

/// `GET /v1/reviews` response.
#[derive(Debug, Serialize, Deserialize)]
pub struct ReviewList {
    pub reviews: Vec<ReviewRecord>,
}

/// The body of a held action's answer (202) and of a review's routes.
#[derive(Debug, Serialize, Deserialize)]
pub struct ReviewBody {
    pub review: ReviewRecord,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    tenant: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
}

/// `POST /v1/reviews/{id}/approve|deny` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DecideBody {
    reason: String,
}

fn gov<B>(st: &AppState<B>) -> Result<&Governance, HttpError> {
    st.gov.as_deref().ok_or_else(|| {
        HttpError::new(
            ErrorCode::Forbidden,
            "this server runs without governance (SANDLOT_AUTH=off): nothing is held for review",
        )
    })
}

/// `GET /v1/reviews[?state=pending|approved|denied&tenant=&limit=]`, newest first.
pub(crate) async fn list<B>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<ReviewList>, HttpError> {
    let g = gov(&st)?;
    if let Some(s) = &q.state {
        if !matches!(s.as_str(), "pending" | "approved" | "denied") {
            return Err(HttpError::new(
                ErrorCode::InvalidArgument,
                "state must be pending, approved or denied",
            ));
        }
    }
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    let reviews = g
        .reviews
        .list_for(&caller.0, q.tenant.as_deref(), q.state.as_deref(), limit)?;
    Ok(Json(ReviewList { reviews }))
}

/// `GET /v1/reviews/{id}`.
pub(crate) async fn get<B>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<ReviewBody>, HttpError> {
    let review = gov(&st)?.reviews.get_for(&caller.0, &id)?;
    Ok(Json(ReviewBody { review }))
}

/// `POST /v1/reviews/{id}/approve`.
pub(crate) async fn approve<B>(
    st: State<AppState<B>>,
    caller: Caller,
    id: ApiPath<String>,
    body: ApiJson<DecideBody>,
) -> Result<Json<ReviewBody>, HttpError> {
    decide(st, caller, id, body, true).await
}

/// `POST /v1/reviews/{id}/deny`.
pub(crate) async fn deny<B>(
    st: State<AppState<B>>,
    caller: Caller,
    id: ApiPath<String>,
    body: ApiJson<DecideBody>,
) -> Result<Json<ReviewBody>, HttpError> {
    decide(st, caller, id, body, false).await
}

async fn decide<B>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<DecideBody>,
    approve: bool,
) -> Result<Json<ReviewBody>, HttpError> {
    let g = gov(&st)?;
    let review = g.reviews.decide(&caller.0, &id, approve, &body.reason)?;
    // A denied release of held output drops the kept copy now.
    g.drop_denied_output(&review);
    Ok(Json(ReviewBody { review }))
}

/// `GET /v1/sandboxes/{id}/executions/{eid}/held-output`: the original result of an execution
/// whose output a decision held for review withheld (`sandlot_service::held_output`): 200 once
/// approved, 202 with the review while pending, 403 `review_denied` once denied (dropped).
pub(crate) async fn held_output<B>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiPath((id, eid)): ApiPath<(String, String)>,
) -> Result<axum::response::Response, HttpError> {
    use axum::response::IntoResponse;
    let g = gov(&st)?;
    match g.held_output(&caller.0, &id, &eid)? {
        sandlot_service::held_output::Held::Released(r) => Ok(Json(*r).into_response()),
        sandlot_service::held_output::Held::Pending(review) => Ok(held_response(*review)),
    }
}

/// 202 with the review holding the call (every route whose action a policy can hold).
pub(crate) fn held_response(review: ReviewRecord) -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        axum::http::StatusCode::ACCEPTED,
        Json(ReviewBody { review }),
    )
        .into_response()
}
