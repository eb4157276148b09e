//! Sandbox lifecycle routes: create, list, get, delete.

use crate::backend::Backend;
use crate::error::HttpError;
use crate::extract::{ApiJsonOrDefault, ApiPath, ApiQuery};
use crate::govern::Caller;
use crate::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use sandlot_types::{CreateSandbox, Sandbox};
use serde::{Deserialize, Serialize};

/// `GET /v1/sandboxes` response.
#[derive(Debug, Serialize, Deserialize)]
pub struct SandboxList {
    pub sandboxes: Vec<Sandbox>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ListQuery {
    /// Include ended sandboxes (deleted, expired, lost).
    #[serde(default)]
    all: bool,
    /// The operator's only: one tenant's sandboxes, or `*` for every tenant's (the console's
    /// operator view); anyone else naming a tenant but their own gets 403.
    #[serde(default)]
    tenant: Option<String>,
}

pub(crate) async fn create<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiQuery(held): ApiQuery<crate::execute::HeldQuery>,
    ApiJsonOrDefault(req): ApiJsonOrDefault<CreateSandbox>,
) -> Result<Response, HttpError> {
    // A creation a policy holds for review: 202 with the review, or waits `review_wait`.
    let started = held.ask().run(st.svc().create(&caller.0, req)).await?;
    Ok(crate::execute::held_or(started, StatusCode::CREATED))
}

pub(crate) async fn list<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<SandboxList>, HttpError> {
    let tenant = crate::policies::scoped_tenant(&caller, q.tenant.as_deref())?;
    let mut sandboxes = st.backend.list_sandboxes(q.all).await?;
    if let Some(tenant) = tenant {
        sandboxes.retain(|s| s.tenant == tenant);
    }
    Ok(Json(SandboxList { sandboxes }))
}

/// `PUT /v1/sandboxes/{id}/network`: the egress allowlist (and secrets), live
/// (`Service::set_network`).
pub(crate) async fn set_network<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    crate::extract::ApiJson(update): crate::extract::ApiJson<sandlot_types::NetworkUpdate>,
) -> Result<Json<Sandbox>, HttpError> {
    Ok(Json(st.svc().set_network(&caller.0, &id, update).await?))
}

pub(crate) async fn get<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Sandbox>, HttpError> {
    Ok(Json(st.svc().sandbox(&caller.0, &id).await?))
}

pub(crate) async fn delete<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, HttpError> {
    st.svc().delete(&caller.0, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
