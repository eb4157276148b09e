//! The background-output route: what a sandbox's processes wrote while no execution ran,
//! kept apart from every execution's output (see `sandlot_runtime`'s `background.rs`).

use crate::backend::Backend;
use crate::error::HttpError;
use crate::extract::{ApiPath, ApiQuery};
use crate::AppState;
use axum::extract::State;
use axum::Json;
use sandlot_types::BackgroundOutput;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
pub(crate) struct BackgroundQuery {
    /// Empty the buffer in the same step as reading it.
    #[serde(default)]
    clear: bool,
}

/// `GET /v1/sandboxes/{id}/background[?clear=true]`.
pub(crate) async fn get<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<BackgroundQuery>,
) -> Result<Json<BackgroundOutput>, HttpError> {
    Ok(Json(st.backend.background_output(&id, q.clear).await?))
}
