//! Code context routes: create, list, restart, delete.

use crate::backend::Backend;
use crate::error::HttpError;
use crate::extract::{ApiJsonOrDefault, ApiPath};
use crate::govern::Caller;
use crate::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandlot_types::Context;
use serde::{Deserialize, Serialize};

/// `GET /v1/sandboxes/{id}/contexts` response.
#[derive(Debug, Serialize, Deserialize)]
pub struct ContextList {
    pub contexts: Vec<Context>,
}

/// `POST /v1/sandboxes/{id}/contexts` body (optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewContext {
    /// The directory the context starts in (absolute, a directory inside the sandbox);
    /// without it, `/workspace`.
    #[serde(default)]
    pub cwd: Option<String>,
}

pub(crate) async fn create<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJsonOrDefault(req): ApiJsonOrDefault<NewContext>,
) -> Result<Response, HttpError> {
    let ctx = st
        .svc()
        .create_context(&caller.0, &id, req.cwd.as_deref())
        .await?;
    Ok((StatusCode::CREATED, Json(ctx)).into_response())
}

pub(crate) async fn list<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<ContextList>, HttpError> {
    let contexts = st.svc().list_contexts(&caller.0, &id).await?;
    Ok(Json(ContextList { contexts }))
}

pub(crate) async fn restart<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiPath((id, ctx)): ApiPath<(String, String)>,
) -> Result<Json<Context>, HttpError> {
    Ok(Json(st.svc().restart_context(&caller.0, &id, &ctx).await?))
}

pub(crate) async fn delete<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiPath((id, ctx)): ApiPath<(String, String)>,
) -> Result<StatusCode, HttpError> {
    st.svc().delete_context(&caller.0, &id, &ctx).await?;
    Ok(StatusCode::NO_CONTENT)
}
