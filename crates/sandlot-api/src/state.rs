//! Routes of state that outlives processes: fork, pause, resume, snapshots and volumes (see
//! `sandlot_runtime`'s `fork.rs`, `pause.rs`, `snapshots.rs` and `volumes.rs`). Volumes' file
//! routes are in `files.rs`.

use crate::backend::Backend;
use crate::error::HttpError;
use crate::extract::{ApiJson, ApiJsonOrDefault, ApiPath, ApiQuery};
use crate::govern::{self, Caller, NameOwner};
use crate::shares;
use crate::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandlot_service::admission::{self, Like};
use sandlot_tenancy::Share;
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
    ApiJsonOrDefault(req): ApiJsonOrDefault<ForkRequest>,
) -> Result<Response, HttpError> {
    let like = Like::Fork { count: req.count };
    let _admission =
        admission::admit_like(st.gov.as_deref(), &st.backend, &caller.0, &id, like).await?;
    let result = st.backend.fork_sandbox(&id, req).await?;
    Ok((StatusCode::CREATED, Json(result)).into_response())
}

/// `POST /v1/sandboxes/{id}/pause`.
pub(crate) async fn pause<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Sandbox>, HttpError> {
    // Each paused sandbox keeps its uid of the server's one pool.
    let _claim = shares::claim_held(&st, &caller.0, Share::PausedSandboxes).await?;
    let paused = st.backend.pause_sandbox(&id).await?;
    govern::released(&st, caller.tenant());
    Ok(Json(paused))
}

/// `POST /v1/sandboxes/{id}/resume`.
pub(crate) async fn resume<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Sandbox>, HttpError> {
    let _admission =
        admission::admit_like(st.gov.as_deref(), &st.backend, &caller.0, &id, Like::Resume).await?;
    Ok(Json(st.backend.resume_sandbox(&id).await?))
}

/// `POST /v1/sandboxes/{id}/snapshots`.
pub(crate) async fn create_snapshot<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJsonOrDefault(req): ApiJsonOrDefault<CreateSnapshot>,
) -> Result<Response, HttpError> {
    let _claim = shares::claim_held(&st, &caller.0, Share::Snapshots).await?;
    let snapshot = st.backend.create_snapshot(&id, req).await?;
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
    ApiJson(mut req): ApiJson<CreateVolume>,
) -> Result<Response, HttpError> {
    // Volume names are per tenant: the volume is the caller's tenant's, whatever other
    // tenants have.
    req.tenant = Some(caller.tenant().to_owned());
    let _claim = shares::claim_held(&st, &caller.0, Share::Volumes).await?;
    let volume = st.backend.create_volume(req).await?;
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
