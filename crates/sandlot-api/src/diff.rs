//! `GET /v1/sandboxes/{id}/diff/{other}`: which variables and workspace entries differ between
//! two sandboxes of one family (see `sandlot_runtime`'s `diff.rs`).

use crate::backend::Backend;
use crate::error::HttpError;
use crate::extract::ApiPath;
use crate::AppState;
use axum::extract::State;
use axum::Json;
use sandlot_types::SandboxDiff;

/// `GET /v1/sandboxes/{id}/diff/{other}`: `a` is `{id}`, `b` is `{other}`.
pub(crate) async fn get<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath((a, b)): ApiPath<(String, String)>,
) -> Result<Json<SandboxDiff>, HttpError> {
    Ok(Json(st.backend.diff_sandboxes(&a, &b).await?))
}
