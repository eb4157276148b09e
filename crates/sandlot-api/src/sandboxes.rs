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
    // Held until the sandbox is in the live set (or the creation failed).
    let _admission =
        sandlot_service::admission::admit_new(st.gov.as_deref(), &st.backend, &caller.0, &mut req)
            .await?;
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

/// `PUT /v1/sandboxes/{id}/network`: the egress allowlist (and secrets), live. Goes through
/// the `create_sandbox` gate again with the new allowlist, as if the sandbox were asked for
/// with it.
pub(crate) async fn set_network<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    crate::extract::ApiJson(update): crate::extract::ApiJson<sandlot_types::NetworkUpdate>,
) -> Result<Json<Sandbox>, HttpError> {
    if st.gov.is_some() {
        sandlot_service::admission::check_special_egress(&caller.0, &update.allow)?;
    }
    let current = st.backend.get_sandbox(&id).await?;
    let mut asked = CreateSandbox {
        template: Some(current.template.clone()),
        network: update.allow.clone(),
        tier: Some(current.tier.clone()),
        ports: current.ports.clone(),
        all_ports: current.all_ports,
        ..Default::default()
    };
    asked.tenant = Some(caller.tenant().to_owned());
    let tier = sandlot_service::gates::gate_create(
        st.gov.as_deref(),
        &caller.0,
        &asked,
        current.limits,
        current.tier == sandlot_types::TRUSTED_TIER,
    )?;
    if tier != current.tier {
        return Err(HttpError::new(
            sandlot_types::ErrorCode::PolicyDenied,
            format!(
                "the new allowlist would need the {tier} tier; this sandbox is {}",
                current.tier
            ),
        ));
    }
    Ok(Json(govern::tokened(
        &st,
        st.backend.set_network(&id, update).await?,
    )))
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
