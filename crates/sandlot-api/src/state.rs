//! Routes of state that outlives processes: fork, pause, resume, snapshots and volumes (see
//! `sandlot_runtime`'s `fork.rs`, `pause.rs`, `snapshots.rs` and `volumes.rs`). Volumes' file
//! routes are in `files.rs`.

use crate::backend::Backend;
use crate::error::HttpError;
use crate::extract::{ApiJson, ApiJsonOrDefault, ApiPath, ApiQuery};
use crate::govern::{Caller, NameOwner};
use crate::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandlot_types::{CreateSnapshot, CreateVolume, ForkRequest, Sandbox, Snapshot, Volume};
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
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(held): ApiQuery<crate::execute::HeldQuery>,
    ApiJsonOrDefault(req): ApiJsonOrDefault<ForkRequest>,
) -> Result<Response, HttpError> {
    // A fork a policy holds for review: 202 with the review, or waits `review_wait`.
    let started = held.ask().run(st.svc().fork(&caller.0, &id, req)).await?;
    Ok(crate::execute::held_or(started, StatusCode::CREATED))
}

/// `POST /v1/sandboxes/{id}/pause`.
pub(crate) async fn pause<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Sandbox>, HttpError> {
    Ok(Json(st.svc().pause(&caller.0, &id).await?))
}

/// `POST /v1/sandboxes/{id}/resume`.
pub(crate) async fn resume<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(held): ApiQuery<crate::execute::HeldQuery>,
) -> Result<Response, HttpError> {
    // A resume a policy holds for review: 202 with the review, or waits `review_wait`.
    let started = held.ask().run(st.svc().resume(&caller.0, &id)).await?;
    Ok(crate::execute::held_or(started, StatusCode::OK))
}

/// `POST /v1/sandboxes/{id}/snapshots`.
pub(crate) async fn create_snapshot<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJsonOrDefault(req): ApiJsonOrDefault<CreateSnapshot>,
) -> Result<Response, HttpError> {
    let snapshot = st.svc().snapshot(&caller.0, &id, req).await?;
    Ok((StatusCode::CREATED, Json(snapshot)).into_response())
}

/// `GET /v1/snapshots`.
pub(crate) async fn list_snapshots<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
) -> Result<Json<SnapshotList>, HttpError> {
    let mut snapshots = st.backend.list_snapshots().await?;
    snapshots.retain(|s| s.tenant == caller.tenant());
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

/// `GET /v1/volumes` response.
#[derive(Debug, Serialize, Deserialize)]
pub struct VolumeList {
    pub volumes: Vec<Volume>,
}

/// `POST /v1/volumes`.
pub(crate) async fn create_volume<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiJson(req): ApiJson<CreateVolume>,
) -> Result<Response, HttpError> {
    // Volume names are per tenant: the volume is the caller's tenant's, whatever other
    // tenants have.
    let volume = st.svc().create_volume(&caller.0, req).await?;
    Ok((StatusCode::CREATED, Json(volume)).into_response())
}

/// `GET /v1/volumes`: the caller's tenant's; the operator's lists every tenant's (each with
/// its `tenant`), or one tenant's with `?tenant=`.
pub(crate) async fn list_volumes<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    owner: NameOwner,
    uri: axum::http::Uri,
) -> Result<Json<VolumeList>, HttpError> {
    let mut volumes = st.backend.list_volumes().await?;
    let every = caller.is_operator() && !has_tenant_param(&uri);
    volumes.retain(|v| every || v.tenant == owner.0);
    Ok(Json(VolumeList { volumes }))
}

/// Whether a request names a tenant with `?tenant=`.
pub(crate) fn has_tenant_param(uri: &axum::http::Uri) -> bool {
    uri.query().is_some_and(|q| {
        q.split('&')
            .any(|kv| kv.split('=').next() == Some("tenant"))
    })
}

/// `GET /v1/volumes/{name}`.
pub(crate) async fn get_volume<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath(name): ApiPath<String>,
    NameOwner(owner): NameOwner,
) -> Result<Json<Volume>, HttpError> {
    Ok(Json(st.backend.get_volume(&owner, &name).await?))
}

/// `DELETE /v1/volumes/{name}`.
pub(crate) async fn delete_volume<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath(name): ApiPath<String>,
    NameOwner(owner): NameOwner,
) -> Result<StatusCode, HttpError> {
    st.backend.delete_volume(&owner, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
