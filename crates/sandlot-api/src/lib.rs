//! sandlot's HTTP API: the axum router under `/v1`, Server-Sent Events for streamed executions,
//! the mapping of every error to `{"error": {"code", "message"}}` with its status, and the
//! OpenAPI document (`crates/sandlot-api/openapi.json`, served at `/v1/openapi.json`).
//!
//! [`router`] builds the whole application without a socket, so tests can call it directly;
//! `sandlot serve` binds it to a listener.

mod archive;
mod artifacts;
mod backend;
mod background;
mod contexts;
mod diff;
mod error;
mod execute;
mod extract;
mod files;
pub mod govern;
mod policies;
pub mod ports;
mod reviews;
mod revoke;
mod sandboxes;
pub mod shares;
mod state;
mod templates;
#[cfg(test)]
mod tests;

pub use contexts::ContextList;
pub use error::{api_error, code_of, status_of, HttpError, METHOD_NOT_ALLOWED, ROUTE_NOT_FOUND};
pub use execute::{event_name, ExecutionList, InterruptResponse, API_ERROR_EVENT, DONE_EVENT};
pub use files::FileList;
pub use sandboxes::SandboxList;
/// The HTTP plumbing shared with the record, at the paths it always had here.
pub use sandlot_http::{ApiConfig, SANDBOX_ID_HEADER};
pub use templates::TemplateList;

use axum::extract::{FromRef, Request};
use axum::handler::Handler;
use axum::http::header::CONTENT_TYPE;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{on, MethodFilter, MethodRouter};
use axum::{Json, Router};
use backend::Backend;
use sandlot_runtime::Runtime;
use std::sync::Arc;
use std::time::Instant;
use tower_http::catch_panic::CatchPanicLayer;

/// The OpenAPI 3.1 document of this API.
pub const OPENAPI_JSON: &str = include_str!("../openapi.json");

/// The server's version, as `/v1/health` reports it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Builds the application: every route under `/v1`, JSON errors for unknown routes and
/// methods, panics turned into 500 `internal`, and one log line per request.
pub fn router(rt: Runtime, cfg: ApiConfig) -> Router {
    router_with(rt, cfg, Extensions::default())
}

/// What other crates add to the application: routes of their own (the E2B control plane,
/// `/mcp`, the record's), and the router that serves every request addressed to a sandbox by
/// E2B's `E2b-Sandbox-Id` header, whatever its path.
#[derive(Default)]
pub struct Extensions {
    /// Merged beside `/v1` (inside authentication and the fallbacks, like `/v1`'s own);
    /// must not overlap it nor set a fallback.
    pub routes: Router,
    /// Serves requests that carry `E2b-Sandbox-Id`.
    pub sandbox_header: Option<Router>,
    /// API keys, tenants and quotas; `None` serves every request as the local admin.
    pub governance: Option<Arc<sandlot_service::Governance>>,
    /// The web console, whose session cookie `/v1` accepts from the console's own pages
    /// (`sandlot_console::Console::authenticate`).
    pub console: Option<Arc<sandlot_console::Console>>,
}

/// [`router`] with `ext` added.
pub fn router_extended(rt: Runtime, cfg: ApiConfig, ext: Extensions) -> Router {
    router_with(rt, cfg, ext)
}

/// State shared by the handlers.
pub(crate) struct AppState<B> {
    pub(crate) backend: B,
    pub(crate) cfg: Arc<ApiConfig>,
    pub(crate) gov: Option<Arc<sandlot_service::Governance>>,
    /// Requests carrying [`SANDBOX_ID_HEADER`] go to E2B's envd router (which checks its own
    /// tokens); without that router they are `/v1` requests like any other.
    pub(crate) by_header: bool,
    pub(crate) console: Option<Arc<sandlot_console::Console>>,
}

impl<B: Backend> AppState<B> {
    /// The one service, over this router's backend and governance.
    pub(crate) fn svc(&self) -> sandlot_service::Service<'_, B> {
        sandlot_service::Service::new(&self.backend, self.gov.as_deref())
    }
}

impl<B: Clone> Clone for AppState<B> {
    fn clone(&self) -> Self {
        Self {
            backend: self.backend.clone(),
            cfg: self.cfg.clone(),
            gov: self.gov.clone(),
            by_header: self.by_header,
            console: self.console.clone(),
        }
    }
}

impl<B> FromRef<AppState<B>> for Arc<ApiConfig> {
    fn from_ref(st: &AppState<B>) -> Self {
        st.cfg.clone()
    }
}

/// HTTP methods the API uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verb {
    Get,
    Post,
    Put,
    Delete,
}

impl Verb {
    fn filter(self) -> MethodFilter {
        match self {
            Verb::Get => MethodFilter::GET,
            Verb::Post => MethodFilter::POST,
            Verb::Put => MethodFilter::PUT,
            Verb::Delete => MethodFilter::DELETE,
        }
    }

    /// The operation key in an OpenAPI path item.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn openapi_key(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::Post => "post",
            Verb::Put => "put",
            Verb::Delete => "delete",
        }
    }
}

/// One route: the table below is the single list of what the API serves, which the OpenAPI
/// test checks against the document.
pub(crate) struct Route<B> {
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) verb: Verb,
    pub(crate) path: &'static str,
    handler: MethodRouter<AppState<B>>,
}

fn route<B, H, T>(verb: Verb, path: &'static str, handler: H) -> Route<B>
where
    B: Backend,
    H: Handler<T, AppState<B>>,
    T: 'static,
{
    Route {
        verb,
        path,
        handler: on(verb.filter(), handler),
    }
}

pub(crate) fn routes<B: Backend>() -> Vec<Route<B>> {
    use Verb::*;
    const FILE: &str = "/v1/sandboxes/{id}/files/{*path}";
    const CONTEXTS: &str = "/v1/sandboxes/{id}/contexts";
    const ARCHIVE: &str = "/v1/sandboxes/{id}/archive";
    const VOLUME_FILE: &str = "/v1/volumes/{name}/files/{*path}";
    const PORT: &str = "/v1/sandboxes/{id}/ports/{port}";
    // A catch-all matches no empty rest: `.../{port}/` is a route of its own.
    const PORT_SLASH: &str = "/v1/sandboxes/{id}/ports/{port}/";
    const PORT_PATH: &str = "/v1/sandboxes/{id}/ports/{port}/{*path}";
    const TOKEN_PORT: &str = "/v1/ports/{token}/{port}";
    const TOKEN_PORT_SLASH: &str = "/v1/ports/{token}/{port}/";
    const TOKEN_PORT_PATH: &str = "/v1/ports/{token}/{port}/{*path}";
    vec![
        route(Get, "/v1/health", health),
        route(Get, "/v1/openapi.json", openapi),
        route(Get, "/v1/whoami", govern::whoami),
        route(Post, "/v1/tenants", govern::create_tenant::<B>),
        route(Get, "/v1/tenants", govern::list_tenants::<B>),
        route(Get, "/v1/tenants/{name}", govern::get_tenant::<B>),
        route(Put, "/v1/tenants/{name}", govern::put_tenant::<B>),
        route(Post, "/v1/keys", govern::create_key::<B>),
        route(Get, "/v1/keys", govern::list_keys::<B>),
        route(Delete, "/v1/keys/{id}", govern::revoke_key::<B>),
        route(Get, "/v1/policies", policies::get_policies::<B>),
        route(Put, "/v1/policies", policies::put_policies::<B>),
        route(Get, "/v1/policies/versions", policies::list_versions::<B>),
        route(Get, "/v1/policies/versions/{v}", policies::get_version::<B>),
        route(Post, "/v1/policies/evaluate", policies::evaluate::<B>),
        route(Get, "/v1/decisions", policies::list_decisions::<B>),
        route(Get, "/v1/reviews", reviews::list::<B>),
        route(Get, "/v1/reviews/{id}", reviews::get::<B>),
        route(Post, "/v1/reviews/{id}/approve", reviews::approve::<B>),
        route(Post, "/v1/reviews/{id}/deny", reviews::deny::<B>),
        route(
            Put,
            "/v1/sandboxes/{id}/network",
            sandboxes::set_network::<B>,
        ),
        route(Get, "/v1/sandboxes/{id}/egress", govern::list_egress::<B>),
        route(
            Get,
            "/v1/sandboxes/{id}/findings",
            govern::list_findings::<B>,
        ),
        route(Post, "/v1/sandboxes", sandboxes::create::<B>),
        route(Get, "/v1/sandboxes", sandboxes::list::<B>),
        route(Get, "/v1/sandboxes/{id}", sandboxes::get::<B>),
        route(Delete, "/v1/sandboxes/{id}", sandboxes::delete::<B>),
        route(Post, "/v1/sandboxes/{id}/execute", execute::execute::<B>),
        route(
            Post,
            "/v1/sandboxes/{id}/interrupt",
            execute::interrupt::<B>,
        ),
        route(Get, "/v1/sandboxes/{id}/executions", execute::list::<B>),
        route(
            Get,
            "/v1/sandboxes/{id}/executions/{eid}/held-output",
            reviews::held_output::<B>,
        ),
        route(Get, "/v1/sandboxes/{id}/background", background::get::<B>),
        route(Post, "/v1/sandboxes/{id}/fork", state::fork::<B>),
        route(Post, "/v1/sandboxes/{id}/pause", state::pause::<B>),
        route(Post, "/v1/sandboxes/{id}/resume", state::resume::<B>),
        route(
            Post,
            "/v1/sandboxes/{id}/snapshots",
            state::create_snapshot::<B>,
        ),
        route(Get, "/v1/snapshots", state::list_snapshots::<B>),
        route(Get, "/v1/snapshots/{id}", state::get_snapshot::<B>),
        route(Delete, "/v1/snapshots/{id}", state::delete_snapshot::<B>),
        route(Get, "/v1/sandboxes/{id}/diff/{other}", diff::get::<B>),
        route(Post, "/v1/volumes", state::create_volume::<B>),
        route(Get, "/v1/volumes", state::list_volumes::<B>),
        route(Get, "/v1/volumes/{name}", state::get_volume::<B>),
        route(Delete, "/v1/volumes/{name}", state::delete_volume::<B>),
        route(Get, "/v1/volumes/{name}/files", files::list_volume::<B>),
        route(Put, VOLUME_FILE, files::put_volume::<B>),
        route(Get, VOLUME_FILE, files::get_volume::<B>),
        route(Delete, VOLUME_FILE, files::delete_volume::<B>),
        route(Post, CONTEXTS, contexts::create::<B>),
        route(Get, CONTEXTS, contexts::list::<B>),
        route(
            Post,
            "/v1/sandboxes/{id}/contexts/{ctx}/restart",
            contexts::restart::<B>,
        ),
        route(
            Delete,
            "/v1/sandboxes/{id}/contexts/{ctx}",
            contexts::delete::<B>,
        ),
        route(Get, "/v1/sandboxes/{id}/files", files::list::<B>),
        route(Put, FILE, files::put::<B>),
        route(Get, FILE, files::get::<B>),
        route(Delete, FILE, files::delete::<B>),
        route(Put, ARCHIVE, archive::put::<B>),
        route(Get, ARCHIVE, archive::get::<B>),
        route(Get, "/v1/artifacts/{sha256}", artifacts::get::<B>),
        route(Post, "/v1/templates", templates::create::<B>),
        route(Get, "/v1/templates", templates::list::<B>),
        route(Get, "/v1/templates/{name}", templates::get::<B>),
        route(Delete, "/v1/templates/{name}", templates::delete::<B>),
        // Every method is forwarded to the app: GET's entry takes any method the others do
        // not, and the others are listed so the OpenAPI document shows them.
        Route {
            verb: Get,
            path: PORT,
            handler: axum::routing::any(ports::forward::<B>),
        },
        route(Post, "/v1/sandboxes/{id}/ports/rotate", ports::rotate::<B>),
        route(Post, PORT, ports::forward::<B>),
        route(Put, PORT, ports::forward::<B>),
        route(Delete, PORT, ports::forward::<B>),
        Route {
            verb: Get,
            path: PORT_SLASH,
            handler: axum::routing::any(ports::forward::<B>),
        },
        route(Post, PORT_SLASH, ports::forward::<B>),
        route(Put, PORT_SLASH, ports::forward::<B>),
        route(Delete, PORT_SLASH, ports::forward::<B>),
        Route {
            verb: Get,
            path: PORT_PATH,
            handler: axum::routing::any(ports::forward::<B>),
        },
        route(Post, PORT_PATH, ports::forward::<B>),
        route(Put, PORT_PATH, ports::forward::<B>),
        route(Delete, PORT_PATH, ports::forward::<B>),
        Route {
            verb: Get,
            path: TOKEN_PORT,
            handler: axum::routing::any(ports::forward_token::<B>),
        },
        route(Post, TOKEN_PORT, ports::forward_token::<B>),
        route(Put, TOKEN_PORT, ports::forward_token::<B>),
        route(Delete, TOKEN_PORT, ports::forward_token::<B>),
        Route {
            verb: Get,
            path: TOKEN_PORT_SLASH,
            handler: axum::routing::any(ports::forward_token::<B>),
        },
        route(Post, TOKEN_PORT_SLASH, ports::forward_token::<B>),
        route(Put, TOKEN_PORT_SLASH, ports::forward_token::<B>),
        route(Delete, TOKEN_PORT_SLASH, ports::forward_token::<B>),
        Route {
            verb: Get,
            path: TOKEN_PORT_PATH,
            handler: axum::routing::any(ports::forward_token::<B>),
        },
        route(Post, TOKEN_PORT_PATH, ports::forward_token::<B>),
        route(Put, TOKEN_PORT_PATH, ports::forward_token::<B>),
        route(Delete, TOKEN_PORT_PATH, ports::forward_token::<B>),
    ]
}

pub(crate) fn router_with<B: Backend>(backend: B, cfg: ApiConfig, ext: Extensions) -> Router {
    let state = AppState {
        backend,
        cfg: Arc::new(cfg),
        gov: ext.governance.clone(),
        by_header: ext.sandbox_header.is_some(),
        console: ext.console.clone(),
    };
    let mut app = Router::new();
    for r in routes::<B>() {
        app = app.route(r.path, r.handler);
    }
    let mut app = app
        .with_state(state.clone())
        .merge(ext.routes)
        .method_not_allowed_fallback(error::method_not_allowed)
        .fallback(error::route_not_found);
    if let Some(by_header) = ext.sandbox_header {
        app = app.layer(axum::middleware::from_fn(
            move |req: Request, next: Next| {
                let by_header = by_header.clone();
                async move {
                    if req.headers().contains_key(SANDBOX_ID_HEADER) {
                        use tower::ServiceExt;
                        match by_header.oneshot(req).await {
                            Ok(resp) => resp,
                            Err(never) => match never {},
                        }
                    } else {
                        next.run(req).await
                    }
                }
            },
        ));
    }
    // `sandlot serve` wraps what this returns in the record's layers (`sandlot-record`):
    // outside every refusal, so refused requests are recorded and counted too, and outside
    // `log_request`, so its line is logged in the request's span (trace id).
    app.layer(axum::middleware::from_fn_with_state(
        state,
        govern::authenticate::<B>,
    ))
    .layer(axum::middleware::from_fn(refuse_pages))
    .layer(CatchPanicLayer::custom(error::panic_response))
    .layer(axum::middleware::from_fn(log_request))
}

/// Pages an app serves through `/v1/sandboxes/{id}/ports/...` share the server's origin in a
/// browser, so a script on such a page could call the API same-origin. Browsers tag every
/// request a page makes with `Sec-Fetch-Site` (`none` only for what the user typed or
/// bookmarked); HTTP clients and the SDKs never send it, nor `Origin`. Requests made by pages
/// reach the ports routes only.
async fn refuse_pages(req: Request, next: Next) -> Response {
    // Browsers without Fetch Metadata (before 2020-2023) still send `Origin` on the requests
    // that matter (cross-origin ones and every non-GET); HTTP clients and the SDKs send neither.
    let headers = req.headers();
    let from_page = headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() != b"none")
        || headers.contains_key(axum::http::header::ORIGIN);
    let path = req.uri().path();
    if !from_page || is_ports_path(path) || is_console_request(path, headers) {
        return next.run(req).await;
    }
    // Each protocol's own error shape: REST under /v1, JSON-RPC at /mcp, E2B's elsewhere.
    const WHY: &str = "requests made by web pages are refused outside /v1/sandboxes/{id}/ports/";
    let status = axum::http::StatusCode::FORBIDDEN;
    if path == "/mcp" || path.starts_with("/mcp/") {
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": WHY}
        });
        (status, Json(body)).into_response()
    } else if path.starts_with("/v1/") && !req.headers().contains_key(SANDBOX_ID_HEADER) {
        error::error_response(status, "forbidden", WHY)
    } else {
        (
            status,
            Json(serde_json::json!({"code": 403, "message": WHY})),
        )
            .into_response()
    }
}

/// The console's own pages, and `/v1` requests its pages make: with its session cookie and no
/// key of their own (authentication then asks the console to check their CSRF token and
/// origin, `govern.rs`).
fn is_console_request(path: &str, headers: &axum::http::HeaderMap) -> bool {
    path == "/console"
        || path.starts_with("/console/")
        || (path.starts_with("/v1/")
            && !headers.contains_key(SANDBOX_ID_HEADER)
            && sandlot_http::bearer(headers).is_none()
            && sandlot_console::has_session_cookie(headers))
}

/// `/v1/sandboxes/{id}/ports/...` or `/v1/ports/...`.
fn is_ports_path(path: &str) -> bool {
    if path.starts_with("/v1/ports/") {
        return true;
    }
    let mut parts = path.split('/');
    parts.next() == Some("")
        && parts.next() == Some("v1")
        && parts.next() == Some("sandboxes")
        && parts.next().is_some_and(|id| !id.is_empty())
        && parts.next() == Some("ports")
        // `.../ports/rotate` is an API route like any other, not a page's.
        && parts.next() != Some("rotate")
}

async fn health() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "ok", "version": VERSION }))
}

async fn openapi() -> Response {
    ([(CONTENT_TYPE, "application/json")], OPENAPI_JSON).into_response()
}

/// One line per request: method, path, status and latency (to the response head; a stream may
/// go on after it). Bodies are never logged.
async fn log_request(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let start = Instant::now();
    let resp = next.run(req).await;
    let status = resp.status().as_u16();
    let latency_ms = (start.elapsed().as_secs_f64() * 1e6).round() / 1e3;
    // Agents send thousands of requests a second; successes are logged at debug, failures at
    // info, so the default log shows what went wrong without costing the hot path a write.
    if status >= 400 {
        tracing::info!(%method, %path, status, latency_ms, "request");
    } else {
        tracing::debug!(%method, %path, status, latency_ms, "request");
    }
    resp
}
