//! Template routes: create (build in the background), list, get, delete. Names are per
//! tenant (see `govern::NameOwner`).

use crate::backend::Backend;
use crate::error::HttpError;
use crate::extract::{ApiJson, ApiPath};
use crate::govern::{Caller, NameOwner};
use crate::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use sandlot_types::{Template, TemplateSpec};
use serde::{Deserialize, Serialize};

/// `GET /v1/templates` response.
#[derive(Debug, Serialize, Deserialize)]
pub struct TemplateList {
    pub templates: Vec<Template>,
}

/// `202 Accepted`: the template is registered with status `building`; poll
/// `GET /v1/templates/{name}` until it is `ready` or `failed`. The template is the caller's
/// tenant's (names are per tenant: another tenant's of the same name is another template).
pub(crate) async fn create<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    crate::extract::ApiQuery(held): crate::extract::ApiQuery<crate::execute::HeldQuery>,
    ApiJson(spec): ApiJson<TemplateSpec>,
) -> Result<Response, HttpError> {
    // A build a policy holds for review: 202 with `{"review": ...}` (a started build's 202
    // is the template), or waits `review_wait`.
    let started = held
        .ask()
        .run(st.svc().create_template(&caller.0, spec))
        .await?;
    Ok(crate::execute::held_or(started, StatusCode::ACCEPTED))
}

/// `GET /v1/templates`: the caller's tenant's and the built-in `default`; the operator's
/// lists every tenant's (each with its `tenant`), or one tenant's with `?tenant=`.
pub(crate) async fn list<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    owner: NameOwner,
    uri: axum::http::Uri,
) -> Json<TemplateList> {
    let mut templates = st.backend.list_templates().await;
    let every = caller.is_operator() && !crate::state::has_tenant_param(&uri);
    templates.retain(|t| every || t.tenant == owner.0 || t.name == "default");
    Json(TemplateList { templates })
}

/// `GET /v1/templates/{name}`: the tenant's own, or the built-in `default`.
pub(crate) async fn get<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath(name): ApiPath<String>,
    NameOwner(owner): NameOwner,
) -> Result<Json<Template>, HttpError> {
    Ok(Json(st.backend.get_template(&owner, &name).await?))
}

/// `DELETE /v1/templates/{name}`: the tenant's own (the operator's, any tenant's with
/// `?tenant=`). Its zygote and pool are retired, its spec forgotten, its share slot freed.
/// Refused with 409 `template_in_use` while a sandbox that has not ended or a snapshot of
/// the tenant names it; 400 for the built-in `default`. Gated as a build of it is
/// (`build_template`, no packages): who may make a template may unmake it.
pub(crate) async fn delete<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    NameOwner(owner): NameOwner,
) -> Result<StatusCode, HttpError> {
    st.svc().delete_template(&caller.0, &owner, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
