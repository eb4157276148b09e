//! Template routes: create (build in the background), list, get.

use crate::backend::Backend;
use crate::error::HttpError;
use crate::extract::{ApiJson, ApiPath};
use crate::govern::{self, Caller};
use crate::shares;
use crate::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandlot_tenancy::Share;
use sandlot_types::{Template, TemplateSpec};
use serde::{Deserialize, Serialize};

/// `GET /v1/templates` response.
#[derive(Debug, Serialize, Deserialize)]
pub struct TemplateList {
    pub templates: Vec<Template>,
}

/// `202 Accepted`: the template is registered with status `building`; poll
/// `GET /v1/templates/{name}` until it is `ready` or `failed`.
pub(crate) async fn create<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiJson(spec): ApiJson<TemplateSpec>,
) -> Result<Response, HttpError> {
    if let Some(g) = st.gov.as_deref() {
        g.gate(
            &caller.0,
            sandlot_policy::GateRequest::BuildTemplate {
                template: spec.name.clone(),
                packages: spec.packages.len() as u64,
            },
            format!("Template::{:?}", spec.name),
        )?;
    }
    // A template is an environment and a zygote on the server's one disk. Building one the
    // tenant already owns again adds none.
    let owned = st.backend.get_template(&spec.name).await.is_ok()
        && govern::template_visible_to(&st, &caller, &spec.name);
    let _claim = if owned {
        None
    } else {
        shares::claim_held(&st, &caller.0, Share::Templates).await?
    };
    govern::claim_template(&st, &caller, &spec.name)?;
    let template = st.backend.create_template(spec).await?;
    Ok((StatusCode::ACCEPTED, Json(template)).into_response())
}

pub(crate) async fn list<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
) -> Json<TemplateList> {
    let mut templates = st.backend.list_templates().await;
    templates.retain(|t| govern::template_visible_to(&st, &caller, &t.name));
    Json(TemplateList { templates })
}

pub(crate) async fn get<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<Template>, HttpError> {
    Ok(Json(st.backend.get_template(&name).await?))
}
