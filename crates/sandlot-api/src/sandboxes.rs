//! Sandbox lifecycle routes: create, list, get, delete.

use crate::backend::Backend;
use crate::error::HttpError;
use crate::extract::{ApiJsonOrDefault, ApiPath, ApiQuery};
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
    ApiJsonOrDefault(req): ApiJsonOrDefault<CreateSandbox>,
) -> Result<Response, HttpError> {
    let sandbox = st.backend.create_sandbox(req).await?;
    Ok((StatusCode::CREATED, Json(sandbox)).into_response())
}

pub(crate) async fn list<B: Backend>(
    State(st): State<AppState<B>>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<SandboxList>, HttpError> {
    let sandboxes = st.backend.list_sandboxes(q.all).await?;
    Ok(Json(SandboxList { sandboxes }))
}

pub(crate) async fn get<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Sandbox>, HttpError> {
    Ok(Json(st.backend.get_sandbox(&id).await?))
}

pub(crate) async fn delete<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, HttpError> {
    st.backend.delete_sandbox(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}
