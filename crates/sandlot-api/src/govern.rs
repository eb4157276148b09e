//! Ownership at the HTTP edge: who is calling (API keys), what they may see (their tenant's
//! sandboxes, snapshots, volumes, templates and artifacts; anything else answers 404 as if it
//! did not exist), how much they may hold (quotas), and the admin routes for tenants and keys.
//!
//! Volume and template names are per tenant: a route that names one resolves the name within
//! the tenant [`NameOwner`] says (the caller's own; the operator may name another tenant's
//! with `?tenant=<name>`), so another tenant's object is not found by the very lookup that
//! finds no object at all, and the answers cannot differ.
//!
//! One middleware, [`authenticate`], runs before every route: it resolves the bearer key to a
//! [`Principal`], puts it in the request's extensions for the handlers ([`Caller`]), and checks
//! that the resource a path names belongs to the caller's tenant. Scoping by path in one place
//! rather than in each handler means a route added later is scoped without anyone
//! remembering to: every `/v1/<kind>/{id}` path is checked by its kind. Resources named in
//! bodies (a template, a snapshot, volumes) are checked by the handlers that read them.
//!
//! Without a [`Governance`] (the router's own tests; `SANDLOT_AUTH=off` for benchmarks on
//! loopback) every request acts as the local admin of the tenant `default`.

use crate::backend::Backend;
use crate::error::HttpError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::AppState;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandlot_service::governance::{sandbox_not_found, short, tenancy_error};
use sandlot_service::{local_principal, Governance};
use sandlot_types::{ApiKeyInfo, CreateKey, CreateTenant, ErrorCode, Principal, Tenant};
use serde::{Deserialize, Serialize};

pub use sandlot_http::caller::Caller;

/// Paths anyone may read: liveness and the API's description.
fn is_public(path: &str) -> bool {
    path == "/v1/health" || path == "/v1/openapi.json"
}

pub use sandlot_http::caller::{bearer, principal_of};

/// Authenticates `/v1` (but its public paths) and `/mcp`, and scopes `/v1` paths to the
/// caller's tenant. Requests for E2B's API are left to its own keys and tokens.
pub(crate) async fn authenticate<B: Backend>(
    State(st): State<AppState<B>>,
    mut req: Request,
    next: Next,
) -> Response {
    let Some(gov) = st.gov.as_deref() else {
        req.extensions_mut().insert(local_principal());
        return next.run(req).await;
    };
    let path = req.uri().path();
    let is_mcp = path == "/mcp" || path.starts_with("/mcp/");
    let to_envd = st.by_header && req.headers().contains_key(crate::SANDBOX_ID_HEADER);
    let is_v1 = path.starts_with("/v1/") && !to_envd;
    // `/v1/ports/{token}/...` carries its own capability (checked by its handler).
    if !(is_v1 || is_mcp) || is_public(path) || path.starts_with("/v1/ports/") {
        return next.run(req).await;
    }
    // The console's session cookie stands in for a key on `/v1` when no key is sent.
    let by_cookie = match st.console.as_deref() {
        Some(console) if is_v1 && bearer(req.headers()).is_none() => {
            console.authenticate(req.headers())
        }
        _ => None,
    };
    let principal = match by_cookie.unwrap_or_else(|| principal_of(gov, req.headers())) {
        Ok(p) => p,
        Err(e) => {
            // Read what a small body the client sent, so the connection stays usable for its
            // next request (an unread body makes the server close it under the client).
            drain(req).await;
            return refusal(e, is_mcp);
        }
    };
    // Noted before the scope check, so a refusal of another tenant's object is recorded with
    // the key that asked.
    sandlot_service::Note::set_principal(&principal);
    if is_v1 {
        if let Err(e) = scope(&st.backend, gov, &principal, path) {
            drain(req).await;
            return e.into_response();
        }
    }
    let watch = sandlot_service::KeyWatch::new(gov.keys.clone(), &principal.key_id);
    req.extensions_mut().insert(principal);
    req.extensions_mut().insert(watch.clone());
    crate::revoke::until_revoked(next.run(req).await, &watch)
}

/// Reads and drops up to 64 KiB of a refused request's body (more is not worth waiting for:
/// the connection closes instead).
async fn drain(req: Request) {
    let body = req.into_body();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        axum::body::to_bytes(body, 64 << 10),
    )
    .await;
}

/// A 401 in each protocol's shape: JSON-RPC at `/mcp`, the REST error elsewhere.
fn refusal(e: HttpError, is_mcp: bool) -> Response {
    match is_mcp {
        true => {
            let body = serde_json::json!({
                "jsonrpc": "2.0", "id": null,
                "error": {"code": -32001, "message": e.0.message}
            });
            let mut resp = (StatusCode::UNAUTHORIZED, Json(body)).into_response();
            resp.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer realm=\"sandlot\""),
            );
            resp
        }
        false => e.into_response(),
    }
}

/// Checks that what `path` names belongs to the caller's tenant; another tenant's resource is
/// reported exactly as a missing one.
fn scope<B: Backend>(
    backend: &B,
    gov: &Governance,
    who: &Principal,
    path: &str,
) -> Result<(), HttpError> {
    let mut parts = path.trim_start_matches("/v1/").split('/');
    let (Some(kind), Some(raw)) = (parts.next(), parts.next()) else {
        return Ok(());
    };
    if raw.is_empty() {
        return Ok(());
    }
    // The handlers get the segment percent-decoded: check the same spelling they will use.
    let decoded = percent_encoding::percent_decode_str(raw).decode_utf8();
    let Ok(id) = decoded.as_deref() else {
        return Err(HttpError::invalid_request("a path segment is not UTF-8"));
    };
    let mine = |owner: Option<String>| owner.as_deref() == Some(who.tenant.as_str());
    match kind {
        "sandboxes" => {
            if !mine(backend.sandbox_tenant(id)) {
                return Err(HttpError(sandbox_not_found(id)));
            }
            // `/v1/sandboxes/{id}/diff/{other}` names two.
            if let (Some("diff"), Some(other)) = (parts.next(), parts.next()) {
                let other = percent_encoding::percent_decode_str(other)
                    .decode_utf8()
                    .map_err(|_| HttpError::invalid_request("a path segment is not UTF-8"))?;
                if !other.is_empty() && !mine(backend.sandbox_tenant(&other)) {
                    return Err(HttpError(sandbox_not_found(&other)));
                }
            }
        }
        "snapshots" if !mine(backend.snapshot_tenant(id)) => {
            return Err(HttpError::new(
                ErrorCode::SnapshotNotFound,
                format!("no snapshot {}", short(id)),
            ))
        }
        // Volumes and templates are looked up within the tenant `NameOwner` gives each
        // handler: nothing to check here.
        // A malformed hash gets the handler's 400; a well-formed one must be the tenant's.
        "artifacts" if is_sha256(id) && !artifact_visible(gov, who, id) => {
            return Err(HttpError::new(
                ErrorCode::FileNotFound,
                format!(
                    "no artifact {} (never stored, or past its retention)",
                    short(id)
                ),
            ))
        }
        _ => {}
    }
    Ok(())
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The tenant whose volume or template a request names: the caller's own, or, for the
/// operator only, the tenant `?tenant=<name>` says. A tenant that names another tenant is
/// refused (403) whether or not that tenant has anything of the name, so the refusal tells
/// nothing; the operator naming a tenant that does not exist finds nothing there (404).
#[derive(Debug, Clone)]
pub struct NameOwner(pub String);

#[derive(Deserialize)]
struct TenantParam {
    tenant: Option<String>,
}

impl<S: Send + Sync> FromRequestParts<S> for NameOwner {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, s: &S) -> Result<Self, Self::Rejection> {
        let caller = Caller::from_request_parts(parts, s).await?;
        let asked = match parts.uri.query() {
            None => None,
            Some(_) => {
                axum::extract::Query::<TenantParam>::try_from_uri(&parts.uri)
                    .map_err(|e| HttpError::invalid_request(format!("bad query: {e}")))?
                    .0
                    .tenant
            }
        };
        let Some(asked) = asked else {
            return Ok(NameOwner(caller.tenant().to_owned()));
        };
        if !sandlot_tenancy::valid_tenant_name(&asked) {
            return Err(HttpError::new(
                ErrorCode::InvalidArgument,
                "tenant must be a tenant name ([a-z0-9][a-z0-9_-]{0,47})",
            ));
        }
        if asked != caller.tenant() && !caller.is_operator() {
            return Err(HttpError::new(
                ErrorCode::Forbidden,
                "only the operator may name another tenant's volume or template (?tenant=)",
            ));
        }
        Ok(NameOwner(asked))
    }
}

/// An artifact is readable by the tenants whose executions produced it.
fn artifact_visible(gov: &Governance, who: &Principal, sha: &str) -> bool {
    gov.store.artifact_owned(sha, &who.tenant).unwrap_or(false)
}

fn gov<B>(st: &AppState<B>) -> Result<&Governance, HttpError> {
    st.gov.as_deref().ok_or_else(|| {
        HttpError::new(
            ErrorCode::Forbidden,
            "this server runs without API keys (SANDLOT_AUTH=off): tenants and keys are off",
        )
    })
}

/// `GET /v1/whoami`.
pub(crate) async fn whoami(caller: Caller) -> Json<Principal> {
    Json(caller.0)
}

/// `GET /v1/tenants` response.
#[derive(Debug, Serialize, Deserialize)]
pub struct TenantList {
    pub tenants: Vec<Tenant>,
}

/// `GET /v1/keys` response.
#[derive(Debug, Serialize, Deserialize)]
pub struct KeyList {
    pub keys: Vec<ApiKeyInfo>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct KeyQuery {
    #[serde(default)]
    tenant: Option<String>,
}

/// `POST /v1/tenants` (admin).
pub(crate) async fn create_tenant<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiJson(req): ApiJson<CreateTenant>,
) -> Result<Response, HttpError> {
    caller.require_operator()?;
    let name = req.name.clone();
    let t = gov(&st)?
        .keys
        .put_tenant(&name, req, true)
        .map_err(|e| HttpError(tenancy_error(e)))?;
    crate::shares::sync_disk_cap(&st.backend, &t);
    Ok((StatusCode::CREATED, Json(t)).into_response())
}

/// `GET /v1/tenants` (admin).
pub(crate) async fn list_tenants<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
) -> Result<Json<TenantList>, HttpError> {
    caller.require_operator()?;
    Ok(Json(TenantList {
        tenants: gov(&st)?.keys.tenants(),
    }))
}

/// `GET /v1/tenants/{name}`: an admin sees any, a member its own.
pub(crate) async fn get_tenant<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<Tenant>, HttpError> {
    let not_found = || {
        HttpError::new(
            ErrorCode::TenantNotFound,
            format!("no tenant {}", short(&name)),
        )
    };
    if !caller.is_operator() && caller.tenant() != name {
        return Err(not_found());
    }
    gov(&st)?.keys.tenant(&name).map(Json).ok_or_else(not_found)
}

/// `PUT /v1/tenants/{name}` (admin): plan and quotas.
pub(crate) async fn put_tenant<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<CreateTenant>,
) -> Result<Json<Tenant>, HttpError> {
    caller.require_operator()?;
    if !req.name.is_empty() && req.name != name {
        return Err(HttpError::new(
            ErrorCode::InvalidArgument,
            "the body's name differs from the path's",
        ));
    }
    let t = gov(&st)?
        .keys
        .put_tenant(&name, req, false)
        .map_err(|e| HttpError(tenancy_error(e)))?;
    crate::shares::sync_disk_cap(&st.backend, &t);
    st.svc().released(&name);
    Ok(Json(t))
}

/// `POST /v1/keys` (admin): the response is the only time the key is shown.
pub(crate) async fn create_key<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiJson(req): ApiJson<CreateKey>,
) -> Result<Response, HttpError> {
    caller.require_admin()?;
    // A tenant's admin mints keys for its own tenant only; another looks like no tenant.
    if !caller.is_operator() && req.tenant != caller.tenant() {
        return Err(HttpError::new(
            ErrorCode::TenantNotFound,
            format!("no tenant {}", short(&req.tenant)),
        ));
    }
    let k = gov(&st)?
        .keys
        .create_key(req)
        .map_err(|e| HttpError(tenancy_error(e)))?;
    Ok((StatusCode::CREATED, Json(k)).into_response())
}

/// `GET /v1/keys[?tenant=]`: an admin lists any tenant's, a member its own tenant's.
pub(crate) async fn list_keys<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiQuery(q): ApiQuery<KeyQuery>,
) -> Result<Json<KeyList>, HttpError> {
    let tenant = if caller.is_operator() {
        q.tenant
    } else {
        Some(caller.0.tenant.clone())
    };
    Ok(Json(KeyList {
        keys: gov(&st)?.keys.list_keys(tenant.as_deref()),
    }))
}

/// `DELETE /v1/keys/{id}`: an admin revokes any key, a member its own tenant's.
pub(crate) async fn revoke_key<B: Backend>(
    State(st): State<AppState<B>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<ApiKeyInfo>, HttpError> {
    let g = gov(&st)?;
    let not_found = || HttpError::new(ErrorCode::KeyNotFound, format!("no API key {}", short(&id)));
    if !caller.is_operator() {
        let own = g
            .keys
            .list_keys(Some(caller.tenant()))
            .iter()
            .any(|k| k.id == id);
        if !own {
            return Err(not_found());
        }
    }
    g.keys
        .revoke_key(&id)
        .map(Json)
        .map_err(|e| HttpError(tenancy_error(e)))
}

/// One egress attempt of a sandbox, as recorded.
#[derive(Debug, Serialize, Deserialize)]
pub struct EgressView {
    pub at: String,
    pub host: String,
    pub port: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    pub method: String,
    pub allowed: bool,
    pub reason: String,
    pub bytes_up: u64,
    pub bytes_down: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_id: Option<String>,
}

/// `GET /v1/sandboxes/{id}/egress` response.
#[derive(Debug, Serialize, Deserialize)]
pub struct EgressList {
    pub egress: Vec<EgressView>,
}

/// One guardrail finding of a sandbox: the rule and a hash, never the value.
#[derive(Debug, Serialize, Deserialize)]
pub struct FindingView {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_id: Option<String>,
    pub at: String,
    pub rule: String,
    pub kind: String,
    pub stream: String,
    pub sha256: String,
    pub outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_id: Option<String>,
}

/// `GET /v1/sandboxes/{id}/findings` response.
#[derive(Debug, Serialize, Deserialize)]
pub struct FindingList {
    pub findings: Vec<FindingView>,
}

/// The journal's records so far are in the store.
async fn flushed(g: &Governance) -> Result<(), HttpError> {
    let j = g.journal.clone();
    tokio::task::spawn_blocking(move || j.flush())
        .await
        .map_err(|e| HttpError::internal(e.to_string()))
}

/// `GET /v1/sandboxes/{id}/egress`: its egress attempts, oldest first (the last 1000).
pub(crate) async fn list_egress<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<EgressList>, HttpError> {
    let g = gov(&st)?;
    flushed(g).await?;
    let rows = g
        .store
        .list_egress(&id, 1000)
        .map_err(|e| HttpError::internal(e.to_string()))?;
    Ok(Json(EgressList {
        egress: rows
            .into_iter()
            .map(|e| EgressView {
                at: e.at,
                host: e.host,
                port: e.port,
                ip: e.ip,
                method: e.method,
                allowed: e.allowed,
                reason: e.reason,
                bytes_up: e.bytes_up,
                bytes_down: e.bytes_down,
                decision_id: e.decision_id,
            })
            .collect(),
    }))
}

/// `GET /v1/sandboxes/{id}/findings`: its guardrail findings, oldest first.
pub(crate) async fn list_findings<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<FindingList>, HttpError> {
    let g = gov(&st)?;
    flushed(g).await?;
    let rows = g
        .store
        .list_findings(&id)
        .map_err(|e| HttpError::internal(e.to_string()))?;
    Ok(Json(FindingList {
        findings: rows
            .into_iter()
            .map(|f| FindingView {
                execution_id: f.execution_id,
                at: f.at,
                rule: f.rule,
                kind: f.kind,
                stream: f.stream,
                sha256: f.sha256,
                outcome: f.outcome,
                decision_id: f.decision_id,
            })
            .collect(),
    }))
}
