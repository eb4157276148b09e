//! E2B's control plane over sandlot's sandboxes: create, list, get, kill, set timeout,
//! connect (resuming a paused sandbox), pause, resume, refresh and fork. Every route requires
//! `X-API-KEY`: a sandlot API key or the server's E2B key (see `auth`), and acts for its
//! tenant: sandboxes it creates are that tenant's, it lists only that tenant's, and a route
//! naming another tenant's sandbox answers 404 exactly as for one that does not exist.
//! Creations, resumes and forks wait for room in the tenant's quotas as `/v1`'s do.
//!
//! How E2B's terms map onto sandlot's:
//! - `timeout` (seconds the sandbox lives from now, default 300) is the sandbox's lifetime;
//!   E2B has no idle timeout, so the sandbox gets the longest one (a year). With `autoPause`
//!   (or `lifecycle.onTimeout = pause`), the sandbox instead pauses after `timeout` seconds
//!   without activity, which is the closest sandlot has to "pause instead of kill".
//!   `autoResume` (`{"enabled": true}`, with a pause on timeout only) makes a request to one
//!   of the paused sandbox's ports (through the `E2b-Sandbox-Port` traffic path, with the
//!   sandbox's token) resume it first, as the creating key would (`crate::Wakes`).
//!   `autoPauseMemory: false` makes that pause filesystem-only: the sandbox's memory is
//!   dropped before an E2B request resumes it, so it boots fresh over its files
//!   (`crate::FilesOnly`).
//! - templates `base`, `code-interpreter-v1` (and their tags) are sandlot's `default`
//!   template; any other name must be a sandlot template (else 404).
//! - states: `paused` is paused; any other sandbox that has not ended (running, or stopped and
//!   restarting on its next use) is `running`. Ended sandboxes do not exist for E2B (404).
//! - the policy's creation gates apply as on `/v1` (`create_sandbox` on the template, then
//!   `select_tier`; a denial is 403 with the policy's reason). E2B has no tier field: the
//!   metadata key `sandlot.tier` asks for one (`trusted`); without it, the isolated tier.
//! - sandboxes are created with `all_ports` (E2B exposes every port; requests are still
//!   authenticated) and no internet access: an explicit `allow_internet_access: true`, MCP
//!   servers and volume mounts are refused with 400 rather than silently not honoured.

use crate::auth::Auth;
use crate::error::{bad_json, Failure};
use crate::Ctx;
use axum::extract::rejection::{JsonRejection, RawPathParamsRejection};
use axum::extract::{Extension, Path, Query, RawPathParams, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use sandlot_runtime::RuntimeError;
use sandlot_types::{CreateSandbox, ForkRequest, IdleAction, Principal, Sandbox, SandboxState};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// The envd version sandboxes report: high enough that the SDKs use the features served here
/// (default user 0.4.0, octet-stream uploads 0.5.7, stdin close 0.5.2, file metadata as
/// extended attributes 0.6.2, watch events with entry info 0.6.3, watches allowing network
/// mounts 0.6.4).
pub(crate) const ENVD_VERSION: &str = "0.6.4";
/// What E2B calls the team/client a sandbox belongs to.
const CLIENT_ID: &str = "sandlot";
/// E2B's default lifetime of a sandbox, in seconds.
const DEFAULT_TIMEOUT: u64 = 300;
/// The longest idle timeout sandlot accepts (a year): "no idle timeout".
const NO_IDLE_TIMEOUT: u64 = 365 * 24 * 3600;
/// Template names E2B's SDKs use by default; they run on sandlot's default template.
const E2B_DEFAULT_TEMPLATES: &[&str] = &["base", "code-interpreter-v1", "code-interpreter"];
/// The metadata key that asks for a sandlot tier (`isolated`, `trusted`): E2B's create has
/// no such field, and metadata is what its SDKs let a caller set.
const TIER_METADATA: &str = "sandlot.tier";
/// Most sandboxes one list page holds.
const MAX_PAGE: usize = 1000;

pub(crate) fn routes(ctx: &Ctx) -> Router<Ctx> {
    Router::new()
        .route("/sandboxes", post(create).get(list_v1))
        .route("/v2/sandboxes", post(create).get(list_v2))
        .route("/sandboxes/{id}", get(detail).delete(kill))
        .route("/sandboxes/{id}/timeout", post(set_timeout))
        .route("/sandboxes/{id}/refreshes", post(refresh))
        .route("/sandboxes/{id}/connect", post(connect))
        .route("/v2/sandboxes/{id}/connect", post(connect))
        .route("/sandboxes/{id}/pause", post(pause))
        .route("/sandboxes/{id}/resume", post(resume))
        .route("/sandboxes/{id}/fork", post(fork))
        // E2B's snapshot API (`snapshots`), under the same key check.
        .merge(crate::snapshots::routes())
        .route(
            "/sandboxes/{id}/metrics",
            get(crate::metrics::sandbox_metrics),
        )
        .route("/sandboxes/metrics", get(crate::metrics::list_metrics))
        .route_layer(axum::middleware::from_fn_with_state(
            ctx.clone(),
            require_key,
        ))
}

/// The control plane's check, before any handler runs: who the key is (put in the request's
/// extensions for the handlers), and that the sandbox the path names (`{id}`, decoded as the
/// handler will read it) is that key's tenant's. Checking here rather than in each handler
/// scopes a route added later without anyone remembering to.
async fn require_key(
    State(ctx): State<Ctx>,
    params: Result<RawPathParams, RawPathParamsRejection>,
    mut req: Request,
    next: Next,
) -> Response {
    let who = match crate::auth::principal(&ctx, req.headers()) {
        Ok(who) => who,
        Err(denied) => return Failure::from(denied).into_response(),
    };
    sandlot_service::Note::set_principal(&who);
    let id = match &params {
        Ok(p) => p
            .iter()
            .find(|(k, _)| *k == "id")
            .map(|(_, v)| v.to_owned()),
        Err(RawPathParamsRejection::MissingPathParams(_)) => None,
        Err(e) => return Failure::bad_request(e.body_text()).into_response(),
    };
    if let Some(id) = id {
        if ctx.svc().scope_sandbox(&who, &id).is_err() {
            return not_found(id).into_response();
        }
    }
    req.extensions_mut().insert(who);
    next.run(req).await
}

/// What a route naming a sandbox answers when there is none (or it is another tenant's): the
/// runtime's own words for a missing sandbox, so the two cannot be told apart.
fn not_found(id: String) -> Failure {
    Failure::runtime(RuntimeError::SandboxNotFound { id })
}

type Reply = Result<Response, Failure>;

/// A JSON body, or E2B's 400.
fn body<T>(b: Result<Json<T>, JsonRejection>) -> Result<T, Failure> {
    b.map(|Json(v)| v).map_err(bad_json)
}

/// `POST /sandboxes` and `/v2/sandboxes` (`NewSandbox`, `NewSandboxV2`).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewSandbox {
    #[serde(rename = "templateID")]
    template_id: String,
    #[serde(default)]
    timeout: Option<u64>,
    #[serde(default)]
    auto_pause: Option<bool>,
    #[serde(default)]
    metadata: Option<BTreeMap<String, String>>,
    #[serde(default)]
    env_vars: Option<BTreeMap<String, String>>,
    #[serde(default, rename = "allow_internet_access")]
    allow_internet_access: Option<bool>,
    #[serde(default)]
    mcp: Option<Value>,
    #[serde(default)]
    volume_mounts: Option<Vec<Value>>,
    #[serde(default)]
    network: Option<Value>,
    #[serde(default)]
    lifecycle: Option<Value>,
    /// `{"enabled": bool}`: a request to one of the paused sandbox's ports resumes it.
    #[serde(default)]
    auto_resume: Option<Value>,
    /// `false`: the pause on timeout keeps the files only (resumes boot fresh).
    #[serde(default)]
    auto_pause_memory: Option<bool>,
}

async fn create(
    State(ctx): State<Ctx>,
    Extension(who): Extension<Principal>,
    headers: axum::http::HeaderMap,
    b: Result<Json<NewSandbox>, JsonRejection>,
) -> Reply {
    let req = body(b)?;
    if req.allow_internet_access == Some(true) {
        return Err(Failure::bad_request(
            "sandlot sandboxes have no internet access: leave allow_internet_access unset or false",
        ));
    }
    if req.mcp.as_ref().is_some_and(|v| !v.is_null()) {
        return Err(Failure::bad_request(
            "MCP servers in sandboxes are not supported by sandlot",
        ));
    }
    if req.volume_mounts.as_ref().is_some_and(|v| !v.is_empty()) {
        return Err(Failure::bad_request(
            "E2B volume mounts are not supported: use sandlot volumes (/v1/volumes)",
        ));
    }
    if let Some(net) = &req.network {
        let allows = |k: &str| {
            net.get(k)
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty())
        };
        if allows("allowOut") || net.get("allowPublicTraffic") == Some(&Value::Bool(true)) {
            return Err(Failure::bad_request(
                "sandlot sandboxes have no network: allowOut and allowPublicTraffic cannot be honoured",
            ));
        }
    }
    let timeout = match req.timeout {
        Some(0) => return Err(Failure::bad_request("timeout must be at least 1 second")),
        Some(t) => t,
        None => DEFAULT_TIMEOUT,
    };
    let pause_on_timeout = req.auto_pause == Some(true)
        || req
            .lifecycle
            .as_ref()
            .and_then(|l| l.get("onTimeout"))
            .is_some_and(|t| t == "pause" || t.get("action").is_some_and(|a| a == "pause"));
    let auto_resume = req
        .auto_resume
        .as_ref()
        .and_then(|a| a.get("enabled").or(Some(a)))
        .and_then(Value::as_bool)
        .unwrap_or(false)
        || req
            .lifecycle
            .as_ref()
            .and_then(|l| l.get("autoResume"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
    if auto_resume && !pause_on_timeout {
        return Err(Failure::bad_request(
            "autoResume needs the sandbox to pause on its timeout (autoPause)",
        ));
    }
    let files_only = pause_on_timeout && req.auto_pause_memory == Some(false);
    if files_only && auto_resume {
        return Err(Failure::bad_request(
            "a filesystem-only pause (autoPauseMemory: false) cannot auto-resume: connect resumes it",
        ));
    }
    let (idle, lifetime, on_idle) = if pause_on_timeout {
        (timeout, NO_IDLE_TIMEOUT, IdleAction::Pause)
    } else {
        (NO_IDLE_TIMEOUT, timeout, IdleAction::Delete)
    };
    let template = template_of(&req.template_id);
    // A snapshot's id as the template: a sandbox started from that snapshot (its template is
    // the snapshot's, filled in by the creation pipeline).
    let from_snapshot = crate::snapshots::snapshot_of(&req.template_id);
    let template = if from_snapshot.is_some() {
        None
    } else {
        template
    };
    let metadata = req.metadata.unwrap_or_default();
    let tier = metadata.get(TIER_METADATA).cloned();
    let create = CreateSandbox {
        template,
        env: req.env_vars.unwrap_or_default(),
        metadata,
        idle_timeout: Some(idle),
        max_lifetime: Some(lifetime),
        on_idle: Some(on_idle),
        all_ports: true,
        tenant: Some(who.tenant.clone()),
        tier,
        // E2B's code runs in the user's home (the workspace, mounted there too).
        workdir: Some(crate::files::HOME.to_owned()),
        from_snapshot,
        ..Default::default()
    };
    // The creation pipeline every protocol shares (`sandlot_service::admission`): references,
    // template limits, the creation gates (whose answer is the tier), the disk cap and the
    // quota admission.
    // A creation a policy holds for review waits for a person (see `crate::gates::review_ask`).
    let sb = crate::gates::review_ask(&headers)?
        .scope(ctx.svc().create(&who, create))
        .await?;
    if auto_resume {
        ctx.wakes.insert(&sb.id, who.clone());
    }
    if files_only {
        ctx.files_only.insert(&sb.id);
    }
    // A fresh sandbox has a metrics point at once; the sampler takes the next ones.
    ctx.metrics.start(&ctx.rt);
    ctx.metrics.sample(&ctx.rt, &sb.id).await;
    Ok((StatusCode::CREATED, Json(created(&ctx.auth, &sb))).into_response())
}

/// The sandlot template an E2B template id names (`None`: the default).
fn template_of(e2b: &str) -> Option<String> {
    let name = e2b.trim();
    let bare = name.split(':').next().unwrap_or(name);
    let bare = bare.rsplit('/').next().unwrap_or(bare);
    if name.is_empty() || E2B_DEFAULT_TEMPLATES.contains(&bare) || bare == "default" {
        None
    } else {
        Some(name.to_owned())
    }
}

/// E2B's `Sandbox`: what create, connect, resume and fork answer.
fn created(auth: &Auth, sb: &Sandbox) -> Value {
    json!({
        "templateID": sb.template,
        "sandboxID": sb.id,
        "clientID": CLIENT_ID,
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": auth.envd_token(&sb.id),
        "trafficAccessToken": auth.traffic_token(&sb.id),
        "domain": null,
    })
}

fn e2b_state(s: SandboxState) -> &'static str {
    if s == SandboxState::Paused {
        "paused"
    } else {
        "running"
    }
}

/// E2B's `ListedSandbox` (and the base of `SandboxDetail`).
fn listed(sb: &Sandbox) -> Value {
    json!({
        "templateID": sb.template,
        "sandboxID": sb.id,
        "clientID": CLIENT_ID,
        "startedAt": sb.created_at,
        "endAt": sb.expires_at,
        "cpuCount": sb.limits.cpu_millis.div_ceil(1000).max(1),
        "memoryMB": sb.limits.memory_mb,
        "diskSizeMB": sb.limits.disk_mb,
        "state": e2b_state(sb.state),
        "envdVersion": ENVD_VERSION,
        "metadata": sb.metadata,
    })
}

async fn detail(State(ctx): State<Ctx>, Path(id): Path<String>) -> Reply {
    let sb = ctx.rt.get_sandbox(&id).await?;
    let mut v = listed(&sb);
    if let Some(o) = v.as_object_mut() {
        o.insert("envdAccessToken".into(), ctx.auth.envd_token(&sb.id).into());
        o.insert("domain".into(), Value::Null);
        o.insert("allowInternetAccess".into(), false.into());
    }
    Ok(Json(v).into_response())
}

async fn kill(
    State(ctx): State<Ctx>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
) -> Reply {
    ctx.svc().delete(&who, &id).await?;
    ctx.forget(&id);
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Deserialize)]
struct TimeoutBody {
    timeout: u64,
}

async fn set_timeout(
    State(ctx): State<Ctx>,
    Path(id): Path<String>,
    b: Result<Json<TimeoutBody>, JsonRejection>,
) -> Reply {
    let t = body(b)?.timeout;
    time_out_in(&ctx, &id, Duration::from_secs(t), false).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Deserialize, Default)]
struct RefreshBody {
    #[serde(default)]
    duration: Option<u64>,
}

async fn refresh(
    State(ctx): State<Ctx>,
    Path(id): Path<String>,
    b: Result<Json<RefreshBody>, JsonRejection>,
) -> Reply {
    // The body is optional: E2B's default refresh is its default timeout.
    let d = match b {
        Ok(Json(r)) => r.duration,
        Err(JsonRejection::MissingJsonContentType(_)) => None,
        Err(e) => return Err(bad_json(e)),
    };
    let d = d.unwrap_or(DEFAULT_TIMEOUT);
    time_out_in(&ctx, &id, Duration::from_secs(d), false).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Deserialize, Default)]
struct ConnectBody {
    #[serde(default)]
    timeout: Option<u64>,
}

/// Connects to a sandbox: a paused one is resumed (201), a running one answered as it is
/// (200). A timeout given sets a resumed sandbox's expiry and extends (never shortens) a
/// running one's, as E2B's connect does.
async fn connect(
    State(ctx): State<Ctx>,
    Extension(who): Extension<Principal>,
    headers: axum::http::HeaderMap,
    Path(id): Path<String>,
    b: Result<Json<ConnectBody>, JsonRejection>,
) -> Reply {
    let timeout = match b {
        Ok(Json(c)) => c.timeout,
        Err(JsonRejection::MissingJsonContentType(_)) => None,
        Err(e) => return Err(bad_json(e)),
    };
    let sb = ctx.rt.get_sandbox(&id).await?;
    let resumed = sb.state == SandboxState::Paused;
    if resumed {
        ctx.files_only.before_resume(&ctx, &id).await;
        crate::gates::review_ask(&headers)?
            .scope(ctx.svc().resume(&who, &id))
            .await?;
    }
    // A resumed sandbox gets the timeout given; a running one only a later end than it has
    // (a connect never shortens a running sandbox's time, as E2B's does not).
    let sb = match timeout {
        Some(t) if t > 0 => time_out_in(&ctx, &id, Duration::from_secs(t), !resumed).await?,
        _ => sb,
    };
    let status = if resumed {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(created(&ctx.auth, &sb))).into_response())
}

async fn pause(
    State(ctx): State<Ctx>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
) -> Reply {
    let sb = ctx.rt.get_sandbox(&id).await?;
    if sb.state == SandboxState::Paused {
        // E2B's answer for a sandbox already paused; its SDKs then return False.
        return Err(Failure::new(
            StatusCode::CONFLICT,
            format!("sandbox {id} is already paused"),
        ));
    }
    // The tenant's `max_paused_sandboxes`, as on `/v1` (each keeps a uid while paused).
    ctx.svc().pause(&who, &id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Deserialize, Default)]
struct ResumeBody {
    #[serde(default)]
    timeout: Option<u64>,
}

async fn resume(
    State(ctx): State<Ctx>,
    Extension(who): Extension<Principal>,
    headers: axum::http::HeaderMap,
    Path(id): Path<String>,
    b: Result<Json<ResumeBody>, JsonRejection>,
) -> Reply {
    let timeout = match b {
        Ok(Json(r)) => r.timeout,
        Err(JsonRejection::MissingJsonContentType(_)) => None,
        Err(e) => return Err(bad_json(e)),
    };
    let sb = ctx.rt.get_sandbox(&id).await?;
    if sb.state != SandboxState::Paused {
        return Err(Failure::new(
            StatusCode::CONFLICT,
            format!("sandbox {id} is not paused"),
        ));
    }
    ctx.files_only.before_resume(&ctx, &id).await;
    let mut sb = crate::gates::review_ask(&headers)?
        .scope(ctx.svc().resume(&who, &id))
        .await?;
    if let Some(t) = timeout.filter(|t| *t > 0) {
        sb = time_out_in(&ctx, &id, Duration::from_secs(t), false).await?;
    }
    Ok((StatusCode::CREATED, Json(created(&ctx.auth, &sb))).into_response())
}

#[derive(Deserialize, Default)]
struct ForkBody {
    #[serde(default)]
    timeout: Option<u64>,
    #[serde(default)]
    count: Option<u64>,
}

/// Forks a sandbox (sandlot's fork: interpreter state and files); each child lives `timeout`
/// seconds (default 300), as a new E2B sandbox would.
async fn fork(
    State(ctx): State<Ctx>,
    Extension(who): Extension<Principal>,
    headers: axum::http::HeaderMap,
    Path(id): Path<String>,
    b: Result<Json<ForkBody>, JsonRejection>,
) -> Reply {
    let f = match b {
        Ok(Json(f)) => f,
        Err(JsonRejection::MissingJsonContentType(_)) => ForkBody::default(),
        Err(e) => return Err(bad_json(e)),
    };
    let req = ForkRequest {
        count: f.count.unwrap_or(1),
        same_seed: false,
    };
    // Children are their parent's tenant's (the runtime copies it).
    let forked = crate::gates::review_ask(&headers)?
        .scope(ctx.svc().fork(&who, &id, req))
        .await?;
    let timeout = Duration::from_secs(f.timeout.filter(|t| *t > 0).unwrap_or(DEFAULT_TIMEOUT));
    let mut out = Vec::new();
    for child in forked.sandboxes {
        let child = time_out_in(&ctx, &child.id, timeout, false)
            .await
            .unwrap_or(child);
        out.push(json!({ "sandbox": created(&ctx.auth, &child) }));
    }
    Ok((StatusCode::CREATED, Json(out)).into_response())
}

/// E2B's timeout of sandbox `id`, `d` from now: when it ends the sandbox, its lifetime (only
/// ever later with `later_only`: a connect never shortens it); when it pauses the sandbox
/// (`autoPause`), its idle timeout, so that `set_timeout`, `connect` and `resume` never
/// turn a pause into a kill.
async fn time_out_in(
    ctx: &Ctx,
    id: &str,
    d: Duration,
    later_only: bool,
) -> Result<Sandbox, RuntimeError> {
    let sb = ctx.rt.get_sandbox(id).await?;
    if sb.on_idle == IdleAction::Pause && sb.idle_timeout < NO_IDLE_TIMEOUT {
        if later_only && sb.idle_timeout >= d.as_secs() {
            return Ok(sb);
        }
        return ctx.rt.set_idle_timeout(id, d);
    }
    if later_only {
        ctx.rt.extend_timeout(id, d)
    } else {
        ctx.rt.set_timeout(id, d)
    }
}

/// The list filters E2B's SDKs send (`GET /sandboxes`, `GET /v2/sandboxes`).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ListQuery {
    #[serde(default)]
    metadata: Option<String>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    template: Option<String>,
    #[serde(default)]
    started_after: Option<String>,
    #[serde(default)]
    order: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    next_token: Option<String>,
}

async fn list_v1(
    ctx: State<Ctx>,
    who: Extension<Principal>,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Reply {
    list(ctx, who, q, "running").await
}

async fn list_v2(
    ctx: State<Ctx>,
    who: Extension<Principal>,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Reply {
    list(ctx, who, q, "running,paused").await
}

async fn list(
    State(ctx): State<Ctx>,
    Extension(who): Extension<Principal>,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
    default_states: &str,
) -> Reply {
    let Query(q) = q.map_err(|e| Failure::bad_request(format!("invalid query: {e}")))?;
    let states: Vec<&str> = q
        .state
        .as_deref()
        .unwrap_or(default_states)
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if let Some(bad) = states.iter().find(|s| !["running", "paused"].contains(s)) {
        return Err(Failure::bad_request(format!(
            "unknown state {bad:?}: running or paused"
        )));
    }
    let wanted_meta = match q.metadata.as_deref() {
        Some(m) => parse_metadata(m)?,
        None => HashMap::new(),
    };
    let started_after = match q.started_after.as_deref() {
        Some(t) => Some(
            time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339)
                .map_err(|_| Failure::bad_request(format!("startedAfter {t:?} is not RFC 3339")))?,
        ),
        None => None,
    };
    let template = q.template.as_deref().map(template_of);
    let limit = q.limit.unwrap_or(100).clamp(1, MAX_PAGE);
    let offset = match q.next_token.as_deref() {
        Some(t) => t
            .parse::<usize>()
            .map_err(|_| Failure::bad_request("invalid nextToken"))?,
        None => 0,
    };
    let mut all: Vec<Sandbox> = ctx
        .rt
        .list_sandboxes(false)
        .await?
        .into_iter()
        .filter(|sb| sb.tenant == who.tenant)
        .filter(|sb| !sb.state.is_ended())
        .filter(|sb| states.contains(&e2b_state(sb.state)))
        .filter(|sb| {
            wanted_meta
                .iter()
                .all(|(k, v)| sb.metadata.get(k) == Some(v))
        })
        .filter(|sb| match &template {
            None => true,
            Some(t) => sb.template == t.as_deref().unwrap_or("default"),
        })
        .filter(|sb| match started_after {
            None => true,
            Some(after) => time::OffsetDateTime::parse(
                &sb.created_at,
                &time::format_description::well_known::Rfc3339,
            )
            .is_ok_and(|c| c >= after),
        })
        .collect();
    all.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
    match q.order.as_deref() {
        None | Some("desc") => all.reverse(),
        Some("asc") => {}
        Some(o) => return Err(Failure::bad_request(format!("order {o:?}: asc or desc"))),
    }
    let page: Vec<Value> = all.iter().skip(offset).take(limit).map(listed).collect();
    let mut headers = HeaderMap::new();
    if offset + page.len() < all.len() {
        let next = (offset + page.len()).to_string();
        if let Ok(v) = HeaderValue::from_str(&next) {
            headers.insert("x-next-token", v);
        }
    }
    Ok((headers, Json(page)).into_response())
}

/// E2B's metadata filter: `k=v&k2=v2`, each key and value percent-encoded once more.
fn parse_metadata(m: &str) -> Result<HashMap<String, String>, Failure> {
    let mut out = HashMap::new();
    for pair in m.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let k = percent_decode(&percent_decode(&k.replace('+', " "))?)?;
        let v = percent_decode(&percent_decode(&v.replace('+', " "))?)?;
        out.insert(k, v);
    }
    Ok(out)
}

fn percent_decode(s: &str) -> Result<String, Failure> {
    let bad = || Failure::bad_request("invalid percent-encoding in metadata");
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3).ok_or_else(bad)?;
            let hex = std::str::from_utf8(hex).map_err(|_| bad())?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e2b_templates_map_to_default() {
        assert_eq!(template_of("base"), None);
        assert_eq!(template_of("code-interpreter-v1"), None);
        assert_eq!(template_of("e2b/base:latest"), None);
        assert_eq!(template_of("mine"), Some("mine".into()));
    }

    #[test]
    fn metadata_filter_is_decoded_twice() {
        let m = parse_metadata("user%2520id=a%2520b&k=v").unwrap();
        assert_eq!(m["user id"], "a b");
        assert_eq!(m["k"], "v");
        assert!(parse_metadata("k=%zz").is_err());
    }
}
