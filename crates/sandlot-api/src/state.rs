//! Routes that save and restore a sandbox's state: fork, pause, resume, and snapshots (see
//! `sandlot_runtime`'s `fork.rs`, `pause.rs` and `snapshots.rs`).

use crate::backend::Backend;
use crate::error::HttpError;
use crate::extract::{ApiJsonOrDefault, ApiPath, ApiQuery};
use crate::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandlot_types::{CreateSnapshot, ForkRequest, Sandbox, Snapshot};
use serde::{Deserialize, Serialize};

/// `GET /v1/snapshots` response.
#[derive(Debug, Serialize, Deserialize)]
pub struct SnapshotList {
    pub snapshots: Vec<Snapshot>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct SnapshotQuery {
    /// Check the snapshot's saved state on the host (its checksum) before answering.
    #[serde(default)]
    verify: bool,
}

/// `POST /v1/sandboxes/{id}/fork`.
pub(crate) async fn fork<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath(id): ApiPath<String>,
    ApiJsonOrDefault(req): ApiJsonOrDefault<ForkRequest>,
) -> Result<Response, HttpError> {
    let result = st.backend.fork_sandbox(&id, req).await?;
    Ok((StatusCode::CREATED, Json(result)).into_response())
}

/// `POST /v1/sandboxes/{id}/pause`.
pub(crate) async fn pause<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Sandbox>, HttpError> {
    Ok(Json(st.backend.pause_sandbox(&id).await?))
}

/// `POST /v1/sandboxes/{id}/resume`.
pub(crate) async fn resume<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Sandbox>, HttpError> {
    Ok(Json(st.backend.resume_sandbox(&id).await?))
}

/// `POST /v1/sandboxes/{id}/snapshots`.
pub(crate) async fn create_snapshot<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath(id): ApiPath<String>,
    ApiJsonOrDefault(req): ApiJsonOrDefault<CreateSnapshot>,
) -> Result<Response, HttpError> {
    let snapshot = st.backend.create_snapshot(&id, req).await?;
    Ok((StatusCode::CREATED, Json(snapshot)).into_response())
}

/// `GET /v1/snapshots`.
pub(crate) async fn list_snapshots<B: Backend>(
    State(st): State<AppState<B>>,
) -> Result<Json<SnapshotList>, HttpError> {
    let snapshots = st.backend.list_snapshots().await?;
    Ok(Json(SnapshotList { snapshots }))
}

/// `GET /v1/snapshots/{id}[?verify=true]`.
pub(crate) async fn get_snapshot<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<SnapshotQuery>,
) -> Result<Json<Snapshot>, HttpError> {
    Ok(Json(st.backend.get_snapshot(&id, q.verify).await?))
}

/// `DELETE /v1/snapshots/{id}`.
pub(crate) async fn delete_snapshot<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, HttpError> {
    st.backend.delete_snapshot(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}
