//! E2B compatibility: the unmodified E2B SDKs (Python and JavaScript, `e2b` and the code
//! interpreter) work against `sandlot serve` by configuration only.
//!
//! Two parts, one listener: the control plane (`/sandboxes`, `/v2/sandboxes`, ...) served as
//! ordinary routes, and everything a client sends to a sandbox (envd's `/files`, its Connect RPC
//! services, the code interpreter's `/execute` and `/contexts`, and any other port) recognised
//! by the `E2b-Sandbox-Id` and `E2b-Sandbox-Port` headers.
//!
//! - `auth`: who a request is (the server's E2B key, sandlot API keys), per-sandbox tokens,
//!   the checks
//! - `gates`: the policy's `execute`, `read_file` and `write_file` gates on sandboxes (the
//!   creation gates are the control plane's)
//! - `control`: the control plane (create, list, get, kill, timeout, connect, pause/resume),
//!   each operation a call of the one service (`sandlot_service::Service`: tenant scoping,
//!   the creation gates, quotas and fair shares, as on `/v1` and MCP)
//! - `snapshots`: E2B's snapshot API (create, list, delete, and sandboxes started from one)
//!   over sandlot's snapshots, through the same service
//! - `files`: envd's `GET/POST /files` and `/health`
//! - `connect`, `process`, `filesystem`: envd's Connect RPC services
//! - `interpreter`: the code interpreter's `/execute` and `/contexts`
//! - `metrics`: sandboxes' metrics (a bounded history sampled from cgroups and workspaces)
//! - `error`: E2B's error bodies

mod auth;
mod connect;
mod control;
mod error;
mod files;
mod filesystem;
mod gates;
mod interpreter;
mod metrics;
mod process;
mod snapshots;

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::Router;
use sandlot_runtime::Runtime;
use sandlot_service::Governance;
use std::path::Path;
use std::sync::Arc;
use tower::ServiceExt;

pub use auth::{KEY_ENV, KEY_FILE};

/// Errors of the E2B layer's setup.
#[derive(Debug, thiserror::Error)]
pub enum E2bError {
    #[error("the E2B API key file {path}: {source}")]
    KeyFile {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// What every E2B handler gets: the runtime, the server's credentials and its tenants.
#[derive(Clone)]
pub(crate) struct Ctx {
    pub(crate) rt: Runtime,
    pub(crate) auth: Arc<auth::Auth>,
    /// API keys, tenants and quotas; `None` (`SANDLOT_AUTH=off`): only the E2B key, and
    /// every sandbox is the tenant `default`'s.
    pub(crate) gov: Option<Arc<Governance>>,
    /// The code interpreter's per-sandbox bookkeeping.
    pub(crate) interp: Arc<interpreter::Sessions>,
    /// envd's directory watches (`filesystem::watch`).
    pub(crate) watches: Arc<filesystem::watch::Watches>,
    /// Sandboxes' metrics histories (`metrics`).
    pub(crate) metrics: Arc<metrics::Metrics>,
    /// Sandboxes created with E2B's `autoResume`.
    pub(crate) wakes: Arc<Wakes>,
    /// Sandboxes created with E2B's `autoPauseMemory: false`.
    pub(crate) files_only: Arc<FilesOnly>,
}

/// The sandboxes created with E2B's `autoPauseMemory: false` (a filesystem-only pause): a
/// pause keeps their files and drops their memory, so they resume as a fresh boot. Sandlot's
/// pause saves the interpreter's state; for these sandboxes that state is dropped before any
/// E2B request (control-plane `connect`/`resume`, or one addressed to the sandbox, once its
/// credentials pass) could resume them. Kept in memory, as [`Wakes`]; a resume through `/v1`
/// or MCP restores the state.
#[derive(Default)]
pub(crate) struct FilesOnly {
    set: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl FilesOnly {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.set.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn insert(&self, id: &str) {
        self.lock().insert(id.to_owned());
    }

    pub(crate) fn contains(&self, id: &str) -> bool {
        self.lock().contains(id)
    }

    fn forget(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Before a request may resume sandbox `id`: drops its paused state if it is one of these
    /// and paused.
    pub(crate) async fn before_resume(&self, ctx: &Ctx, id: &str) {
        if !self.contains(id) {
            return;
        }
        match ctx.rt.drop_paused_state(id).await {
            Ok(true) => tracing::debug!(sandbox = %id, "E2B filesystem-only pause: memory dropped"),
            Ok(false) => {}
            Err(_) => self.forget(id),
        }
    }
}

/// The sandboxes created with E2B's `autoResume`, each with the key that created it: a
/// request to one of its ports while it is paused resumes it as that key would (its
/// tenant's quotas and paused/running shares apply as to any resume). Kept in memory: after
/// a server restart such a sandbox needs `connect` (or `/v1`'s resume) once, as one without
/// `autoResume` does.
#[derive(Default)]
pub(crate) struct Wakes {
    map: std::sync::Mutex<std::collections::HashMap<String, sandlot_types::Principal>>,
}

impl Wakes {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, sandlot_types::Principal>>
    {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn insert(&self, id: &str, who: sandlot_types::Principal) {
        self.lock().insert(id.to_owned(), who);
    }

    fn forget(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Resumes sandbox `id` when it is paused and was created with `autoResume`. A resume
    /// that fails (a quota, a concurrent resume or kill) is left to the request that follows,
    /// which then answers as for any sandbox that is not running.
    async fn wake(&self, ctx: &Ctx, id: &str) {
        let Some(who) = self.lock().get(id).cloned() else {
            return;
        };
        match ctx.rt.get_sandbox(id).await {
            Ok(sb) if sb.state == sandlot_types::SandboxState::Paused => {
                match ctx.svc().resume(&who, id).await {
                    Ok(_) => tracing::debug!(sandbox = %id, "E2B auto-resume on a port request"),
                    Err(e) => {
                        tracing::debug!(sandbox = %id, error = %e.message, "E2B auto-resume failed")
                    }
                }
            }
            Ok(_) => {}
            Err(_) => self.forget(id),
        }
    }
}

impl Ctx {
    /// The one service, over this server's runtime and governance: every operation that
    /// changes a sandbox goes through it, as on `/v1` and MCP.
    pub(crate) fn svc(&self) -> sandlot_service::Service<'_, Runtime> {
        sandlot_service::Service::new(&self.rt, self.gov.as_deref())
    }

    /// Drops what the E2B layer keeps about a sandbox that was killed.
    pub(crate) fn forget(&self, id: &str) {
        self.interp.forget(id);
        self.watches.forget(id);
        self.metrics.forget(id);
        self.wakes.forget(id);
        self.files_only.forget(id);
    }
}

/// The E2B-compatible API of one server.
#[derive(Clone)]
pub struct E2b {
    ctx: Ctx,
}

/// The port E2B's code interpreter listens on in its sandboxes.
pub(crate) const INTERPRETER_PORT: u16 = 49999;

impl E2b {
    /// Loads (or creates, on first start) the server's E2B API key under `data_dir`
    /// (`SANDLOT_E2B_API_KEY` overrides it). With `gov`, the control plane also accepts any
    /// sandlot API key as `X-API-KEY` and acts for its tenant; the E2B key acts for the
    /// tenant `default`'s local admin.
    ///
    /// Sandboxes' tokens share `/v1`'s credential epochs (so rotating a sandbox's port URLs
    /// rotates its tokens too); `token_ttl` makes them expire that long after they are handed
    /// out (`SANDLOT_ENVD_TOKEN_TTL`; none: they last until rotated).
    pub fn start(
        rt: Runtime,
        data_dir: &Path,
        gov: Option<Arc<Governance>>,
        token_ttl: Option<std::time::Duration>,
    ) -> Result<Self, E2bError> {
        // Without governance nothing rotates, but epochs stored by an earlier run still count.
        let epochs = match gov.as_deref() {
            Some(g) => g.epochs().clone(),
            None => Arc::new(sandlot_service::epochs::Epochs::new(rt.store())),
        };
        let auth = Arc::new(auth::Auth::load(data_dir, epochs, token_ttl)?);
        Ok(Self {
            ctx: Ctx {
                rt,
                auth,
                gov,
                interp: Default::default(),
                watches: Default::default(),
                metrics: Default::default(),
                wakes: Default::default(),
                files_only: Default::default(),
            },
        })
    }

    /// The control plane, beside `/v1`, and `/files` for signed URLs (which carry no
    /// sandbox header).
    pub fn routes(&self) -> Router {
        control::routes(&self.ctx)
            .merge(files::signed_routes())
            .with_state(self.ctx.clone())
    }

    /// Everything addressed to a sandbox by `E2b-Sandbox-Id`, dispatched on
    /// `E2b-Sandbox-Port`: envd (49983), the code interpreter (49999), else the sandbox's port.
    pub fn sandbox_router(&self) -> Router {
        let envd = files::routes()
            .merge(connect::routes())
            .merge(process::routes())
            .merge(filesystem::routes())
            .fallback(error::envd_route_not_found)
            .with_state(self.ctx.clone());
        let interpreter = interpreter::routes()
            .fallback(error::interpreter_route_not_found)
            .with_state(self.ctx.clone());
        let faces = Arc::new(Faces {
            envd,
            interpreter,
            ctx: self.ctx.clone(),
        });
        Router::new().fallback(dispatch).with_state(faces)
    }
}

/// The routers behind the sandbox header, one per face.
struct Faces {
    envd: Router,
    interpreter: Router,
    ctx: Ctx,
}

async fn dispatch(State(faces): State<Arc<Faces>>, req: Request) -> Response {
    let port = auth::sandbox_port(req.headers());
    // A filesystem-only paused sandbox loses its memory before any request can resume it
    // (only once the request's credentials open it).
    let named = req
        .headers()
        .get(auth::SANDBOX_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    if named.is_some_and(|id| faces.ctx.files_only.contains(id)) {
        if let Ok(id) = auth::check_sandbox(&faces.ctx, req.headers()) {
            faces.ctx.files_only.before_resume(&faces.ctx, &id).await;
        }
    }
    let router = match port {
        Some(auth::ENVD_PORT) => faces.envd.clone(),
        Some(INTERPRETER_PORT) => faces.interpreter.clone(),
        Some(port) => return other_port(&faces.ctx, port, req).await,
        None => {
            return error::Failure::new(
                axum::http::StatusCode::BAD_REQUEST,
                "missing or invalid E2b-Sandbox-Port header",
            )
            .into_response()
        }
    };
    match router.oneshot(req).await {
        Ok(resp) => resp,
        Err(never) => match never {},
    }
}

/// A request for another port of the sandbox: authenticated here, then relayed to the app
/// listening on that port inside the sandbox.
async fn other_port(ctx: &Ctx, port: u16, req: Request) -> Response {
    let id = match auth::check_sandbox(ctx, req.headers()) {
        Ok(id) => id,
        Err(denied) => return error::Failure::from(denied).into_response(),
    };
    // A paused sandbox created with `autoResume` wakes for the request (after the token
    // check: only a client that may reach its ports can wake it).
    ctx.wakes.wake(ctx, &id).await;
    let path_and_query = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".into());
    match sandlot_ports::proxy(&ctx.rt, &id, port, req, &path_and_query).await {
        Ok(resp) => resp,
        Err(e) => error::Failure::from_api(&e).into_response(),
    }
}
