//! E2B's snapshot API over sandlot's snapshots (`sandlot_runtime`'s `snapshots.rs`): what
//! `Sandbox.create_snapshot`, `Sandbox.list_snapshots`, `Sandbox.delete_snapshot` and
//! `Sandbox.create(<snapshot id>)` call. Every operation is a call of the one service
//! (`sandlot_service::Service`), as `/v1/sandboxes/{id}/snapshots` and `/v1/snapshots` are:
//! tenant scoping (another tenant's snapshot, or its sandbox, answers 404 exactly as one that
//! does not exist, in the list, the delete and a creation from it), the tenant's snapshot
//! shares, and the creation pipeline for sandboxes started from one.
//!
//! How E2B's terms map onto sandlot's:
//! - E2B's snapshot is a template built from a sandbox; its `snapshotID` is what
//!   `Sandbox.create` takes as a template id. Here it is sandlot's snapshot id (`snap_...`),
//!   optionally with a tag (`snap_...:default`), which the control plane's create recognises.
//!   The snapshot carries the workspace's files and the interpreter's state, as on `/v1`.
//! - `name` is sandlot's snapshot name; `names` lists it (E2B lists the template's full
//!   names). Names are not unique: listing by name answers every snapshot of that name.
//! - `DELETE /templates/{id}` (how the SDKs delete a snapshot) deletes a snapshot; any other
//!   template id answers 404 (sandlot's templates are managed on `/v1/templates`).
//! - `memory: false` (a filesystem-only snapshot) is refused with 400: a sandlot snapshot
//!   always carries the interpreter's state with the files.

use crate::error::{bad_json, Failure};
use crate::Ctx;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use sandlot_types::{CreateSnapshot, Principal, Snapshot};
use serde::Deserialize;
use serde_json::{json, Value};

/// What sandlot's snapshot ids start with: a template id that does is a snapshot's.
const SNAPSHOT_PREFIX: &str = "snap_";
/// The longest snapshot name E2B's API takes here.
const MAX_NAME: usize = 128;
/// Most snapshots one list page holds.
const MAX_PAGE: usize = 1000;
/// A page's size when the client names none (E2B's default).
const DEFAULT_PAGE: usize = 100;

/// The routes, registered by `control::routes` under its key check (which also scopes the
/// sandbox a `{id}` segment names).
pub(crate) fn routes() -> Router<Ctx> {
    Router::new()
        .route("/sandboxes/{id}/snapshots", post(create))
        .route("/snapshots", get(list))
        // Not `{id}`: that segment would be checked as a sandbox's id.
        .route("/templates/{template_id}", delete(remove))
}

/// The snapshot a template id names, when it names one (`snap_<id>` or `snap_<id>:<tag>`);
/// the control plane's create starts a sandbox from it.
pub(crate) fn snapshot_of(template_id: &str) -> Option<String> {
    let id = template_id.trim();
    let id = id.split_once(':').map_or(id, |(id, _tag)| id);
    (id.starts_with(SNAPSHOT_PREFIX) && id.len() > SNAPSHOT_PREFIX.len()).then(|| id.to_owned())
}

/// Why a snapshot name is refused, if it is: 1 to [`MAX_NAME`] ASCII letters, digits, `-`,
/// `_` and `.`, starting with a letter or digit. Names show up in E2B's template ids and URL
/// paths, where `/`, `:` and spaces mean something else.
fn check_name(name: &str) -> Result<(), Failure> {
    let refuse = |why: &str| {
        let mut f = Failure::bad_request(format!("invalid snapshot name: {why}"));
        f.code = "bad_snapshot_name";
        Err(f)
    };
    if name.is_empty() {
        return refuse("it is empty");
    }
    if name.len() > MAX_NAME {
        return refuse(&format!("it is longer than {MAX_NAME} characters"));
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return refuse("it must start with a letter or a digit");
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return refuse(&format!(
            "{c:?} is not allowed (letters, digits, '-', '_' and '.')"
        ));
    }
    Ok(())
}

/// E2B's `SnapshotInfo`.
fn info(s: &Snapshot) -> Value {
    json!({
        "snapshotID": s.id,
        "names": s.name.iter().collect::<Vec<_>>(),
    })
}

/// `POST /sandboxes/{id}/snapshots` (`SandboxSnapshotRequest`).
#[derive(Deserialize, Default)]
struct NewSnapshot {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    memory: Option<bool>,
}

async fn create(
    State(ctx): State<Ctx>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
    b: Result<Json<NewSnapshot>, JsonRejection>,
) -> Result<Response, Failure> {
    let req = match b {
        Ok(Json(r)) => r,
        Err(JsonRejection::MissingJsonContentType(_)) => NewSnapshot::default(),
        Err(e) => return Err(bad_json(e)),
    };
    if req.memory == Some(false) {
        let mut f = Failure::bad_request(
            "filesystem-only snapshots are not supported: a sandlot snapshot carries the \
             interpreter's state with the files (leave memory unset or true)",
        );
        f.code = "snapshot_filesystem_only_unsupported";
        return Err(f);
    }
    // An empty name is E2B's "no name" (its SDKs leave it out).
    let name = req.name.filter(|n| !n.is_empty());
    if let Some(n) = &name {
        check_name(n)?;
    }
    let snap = ctx
        .svc()
        .snapshot(&who, &id, CreateSnapshot { name })
        .await?;
    Ok((StatusCode::CREATED, Json(info(&snap))).into_response())
}

/// `GET /snapshots` filters.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ListQuery {
    #[serde(default, rename = "sandboxID")]
    sandbox_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    next_token: Option<String>,
}

/// The tenant's snapshots, newest first, filtered by the sandbox they were taken of and by
/// name; paged by `limit` and `nextToken` (an offset, as the sandbox list's).
async fn list(
    State(ctx): State<Ctx>,
    Extension(who): Extension<Principal>,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, Failure> {
    let Query(q) = q.map_err(|e| Failure::bad_request(format!("invalid query: {e}")))?;
    let limit = q.limit.unwrap_or(DEFAULT_PAGE).clamp(1, MAX_PAGE);
    let offset = match q.next_token.as_deref() {
        Some(t) => t
            .parse::<usize>()
            .map_err(|_| Failure::bad_request("invalid nextToken"))?,
        None => 0,
    };
    // Only the tenant's own: a filter naming another tenant's sandbox finds nothing.
    let mut all: Vec<Snapshot> = ctx
        .svc()
        .snapshots(&who)
        .await?
        .into_iter()
        .filter(|s| q.sandbox_id.as_ref().is_none_or(|id| s.sandbox_id == *id))
        .filter(|s| q.name.as_ref().is_none_or(|n| s.name.as_ref() == Some(n)))
        .collect();
    all.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
    let page: Vec<Value> = all.iter().skip(offset).take(limit).map(info).collect();
    let mut headers = HeaderMap::new();
    if offset + page.len() < all.len() {
        if let Ok(v) = HeaderValue::from_str(&(offset + page.len()).to_string()) {
            headers.insert("x-next-token", v);
        }
    }
    Ok((headers, Json(page)).into_response())
}

/// `DELETE /templates/{id}`: deletes the snapshot the id names (204), else 404, which the
/// SDKs' `delete_snapshot` reports as `False`.
async fn remove(
    State(ctx): State<Ctx>,
    Extension(who): Extension<Principal>,
    Path(template_id): Path<String>,
) -> Result<Response, Failure> {
    let Some(id) = snapshot_of(&template_id) else {
        return Err(Failure::new(
            StatusCode::NOT_FOUND,
            format!(
                "no snapshot {}: sandlot templates are deleted with DELETE /v1/templates/{{name}}",
                sandlot_service::governance::short(&template_id)
            ),
        ));
    };
    ctx.svc().delete_snapshot(&who, &id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_ids_are_recognised_with_or_without_a_tag() {
        assert_eq!(snapshot_of("snap_abc"), Some("snap_abc".into()));
        assert_eq!(snapshot_of("snap_abc:default"), Some("snap_abc".into()));
        assert_eq!(snapshot_of("snap_"), None);
        assert_eq!(snapshot_of("base"), None);
        assert_eq!(snapshot_of("my-template"), None);
    }

    #[test]
    fn names_are_bounded_and_plain() {
        assert!(check_name("snap-filter-test_ab12").is_ok());
        assert!(check_name("v1.2").is_ok());
        for bad in ["", "-x", "a/b", "a:b", "a b", "é", "a\nb"] {
            let f = check_name(bad).unwrap_err();
            assert_eq!(f.status, StatusCode::BAD_REQUEST, "{bad:?}");
            assert_eq!(f.code, "bad_snapshot_name", "{bad:?}");
        }
        assert!(check_name(&"a".repeat(MAX_NAME)).is_ok());
        assert!(check_name(&"a".repeat(MAX_NAME + 1)).is_err());
    }
}
