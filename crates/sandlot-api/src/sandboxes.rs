//! Sandbox lifecycle routes: create, list, get, delete.

use crate::backend::Backend;
use crate::error::HttpError;
use crate::extract::{ApiJsonOrDefault, ApiPath, ApiQuery};
use crate::govern::{self, Caller};
use crate::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
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
}

pub(crate) async fn create<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiJsonOrDefault(mut req): ApiJsonOrDefault<CreateSandbox>,
) -> Result<Response, HttpError> {
    req.tenant = Some(caller.tenant().to_owned());
    govern::check_references(&st, &caller, &req)?;
    let limits = st.backend.effective_limits(&req.limits)?;
    // Held until the sandbox is in the live set (or the creation failed).
    let _admission = govern::admit(&st, &caller.0, limits, 1).await?;
    let sandbox = st.backend.create_sandbox(req).await?;
    Ok((StatusCode::CREATED, Json(govern::tokened(&st, sandbox))).into_response())
}

pub(crate) async fn list<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<SandboxList>, HttpError> {
    let mut sandboxes = st.backend.list_sandboxes(q.all).await?;
    sandboxes.retain(|s| s.tenant == caller.tenant());
    Ok(Json(SandboxList { sandboxes }))
}

pub(crate) async fn get<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Sandbox>, HttpError> {
    Ok(Json(govern::tokened(
        &st,
        st.backend.get_sandbox(&id).await?,
    )))
}

pub(crate) async fn delete<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, HttpError> {
    st.backend.delete_sandbox(&id).await?;
    govern::released(&st, caller.tenant());
    Ok(StatusCode::NO_CONTENT)
}
