//! Every request's span and metrics, `GET /metrics` and `GET /v1/sandboxes/{id}/metrics`.
//!
//! The [`middleware`] wraps every request (REST, E2B, MCP): it counts it by interface, route
//! template, method and status (`sandlot_http_*`), times creations and executions to the end
//! of their response (`sandlot_create_sandbox_duration_seconds`,
//! `sandlot_execute_request_duration_seconds`), and, when traces are exported, gives it a span
//! whose parent is the caller's `traceparent`, with a child `sandlot.create_sandbox` or
//! `sandlot.execute` span for those operations. The request's trace id goes into the
//! [`Note`] (for the audit record) and into its log lines (JSON logs).
//!
//! Route labels are templates (axum's matched path) or, where a request is routed by header
//! (E2B's in-sandbox APIs), the path with every segment that is not a plain word blanked, under
//! a cap: ids never become labels. MCP calls are told apart by their tool, read from the
//! (small) JSON-RPC body.
//!
//! Everything here is cheap when traces are off: a few atomic counters, no span, no lock held
//! across the request.

use super::{RecordContext, RecordError, Recording};
use axum::body::Body;
use axum::extract::{MatchedPath, Path, Request, State};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use http_body::Body as HttpBody;
use sandlot_http::{principal_of, Caller};
use sandlot_http::{HttpError, SANDBOX_ID_HEADER};
use sandlot_service::Note;
use sandlot_telemetry::trace::{self, KeyValue, PastSpan};
use sandlot_telemetry::{metrics, Interface, Interner, Operation};
use sandlot_types::{ErrorCode, LifecycleEvent, LifecycleKind};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};
use tracing::Instrument;

/// Set to `1` to serve `/metrics` without an operator key (a scraper on a private network).
pub const METRICS_PUBLIC_VAR: &str = "SANDLOT_METRICS_PUBLIC";

/// Largest MCP body read to learn its tool (larger ones are counted as plain `/mcp`).
const MCP_PEEK_BYTES: u64 = 256 << 10;
/// Largest creation response read for the new sandbox's id (a span attribute).
const CREATE_PEEK_BYTES: usize = 256 << 10;

/// Shapes of header-routed paths and MCP tool names: client-chosen, so capped on their own
/// (a flood of junk cannot push the route templates into `other`).
static SHAPES: LazyLock<Interner> = LazyLock::new(|| Interner::new(64));

/// Traces and metrics of this server.
pub struct Telemetry {
    metrics_public: bool,
}

impl Telemetry {
    /// Registers the gauges read at scrape and, when traces are exported, the lifecycle
    /// listener that completes execution spans. (The exporter itself is set up with the log
    /// subscriber, `sandlot_telemetry::init_logging`, before the server starts.)
    pub async fn start(ctx: &RecordContext) -> Result<Self, RecordError> {
        let m = metrics();
        let rt = ctx.rt.clone();
        m.set_gauge_family_source("sandboxes", "Live sandboxes by state", "state", move || {
            rt.gauges()
                .sandboxes_by_state
                .into_iter()
                .map(|(s, n)| (s, n as f64))
                .collect()
        });
        let rt = ctx.rt.clone();
        m.set_gauge_source(
            "creation_queue",
            "Sandbox creations being served or waiting",
            move || rt.gauges().creating as i64,
        );
        let rt = ctx.rt.clone();
        m.set_gauge_family_source(
            "zygotes",
            "Template zygotes by state (up, down)",
            "state",
            move || {
                let z = rt.gauges().zygotes;
                let up = z.iter().filter(|(_, up)| *up).count();
                vec![
                    ("up".into(), up as f64),
                    ("down".into(), (z.len() - up) as f64),
                ]
            },
        );
        let rt = ctx.rt.clone();
        m.set_gauge_family_source(
            "uids_free",
            "Host uids that can be handed out now, by range (sandbox, zygote, builder)",
            "range",
            move || counts(rt.uid_use().free),
        );
        let rt = ctx.rt.clone();
        m.set_gauge_family_source(
            "uids_quarantined",
            "Host uids freed too recently to be handed out again, by range (sandbox, zygote, builder)",
            "range",
            move || counts(rt.uid_use().quarantined),
        );
        let rt = ctx.rt.clone();
        m.set_gauge_family_source(
            "uids_in_use",
            "Host uids held, by what holds them (sandbox, volume, zygote, builder)",
            "kind",
            move || counts(rt.uid_use().in_use),
        );
        let rt = ctx.rt.clone();
        m.set_gauge_source_f64(
            "recovery_duration_seconds",
            "How long this server's start took to recover what the previous run left",
            move || rt.recovery().map(|r| r.duration_ms / 1e3),
        );
        let rt = ctx.rt.clone();
        m.set_gauge_source(
            "recovery_sandboxes",
            "Sandboxes this server's start found left by the previous run",
            move || rt.recovery().map_or(0, |r| r.sandboxes as i64),
        );
        let rt = ctx.rt.clone();
        m.set_gauge_source(
            "recovery_executions_marked",
            "Executions the previous run left unfinished, recorded as killed at this start",
            move || rt.recovery().map_or(0, |r| r.executions_marked as i64),
        );
        if trace::enabled() {
            ctx.rt.on_event(Arc::new(on_event));
        }
        let metrics_public = std::env::var(METRICS_PUBLIC_VAR).is_ok_and(|v| v == "1");
        Ok(Self { metrics_public })
    }

    /// Sends the spans still queued.
    pub async fn shutdown(&self) {
        if trace::enabled() {
            let _ = tokio::task::spawn_blocking(trace::shutdown).await;
        }
    }
}

fn counts(v: Vec<(String, u64)>) -> Vec<(String, f64)> {
    v.into_iter().map(|(k, n)| (k, n as f64)).collect()
}

/// What the middleware learned about a request before running it.
struct Shape {
    interface: Interface,
    route: &'static str,
    op: Option<Operation>,
    /// The sandbox an execution runs in, when the request names it.
    sandbox: Option<String>,
}

fn method_label(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

/// A path with every segment that is not a plain word (letters, `.`, `_`, `-`) blanked to
/// `{}`, at most four segments deep.
fn path_shape(path: &str) -> String {
    let mut out = String::new();
    for (i, seg) in path.split('/').skip(1).enumerate() {
        if i == 4 {
            out.push_str("/…");
            break;
        }
        out.push('/');
        let word = !seg.is_empty()
            && seg.len() <= 40
            && seg
                .bytes()
                .all(|b| b.is_ascii_alphabetic() || matches!(b, b'.' | b'_' | b'-'));
        out.push_str(if word { seg } else { "{}" });
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

fn shape_of(req: &Request) -> Shape {
    let path = req.uri().path();
    let post = req.method() == Method::POST;
    let by_header = req
        .headers()
        .get(SANDBOX_ID_HEADER)
        .and_then(|v| v.to_str().ok());
    if let Some(sandbox) = by_header {
        // E2B's in-sandbox APIs (envd, the code interpreter), routed by header.
        let op = (post && matches!(path, "/execute" | "/process.Process/Start"))
            .then_some(Operation::Execute);
        return Shape {
            interface: Interface::E2b,
            route: SHAPES.intern(&path_shape(path)),
            op,
            sandbox: op.map(|_| sandbox.to_owned()),
        };
    }
    let matched = req
        .extensions()
        .get::<MatchedPath>()
        .map(MatchedPath::as_str);
    let interface = if path.starts_with("/v1/") {
        Interface::Rest
    } else if path == "/mcp" || path.starts_with("/mcp/") {
        Interface::Mcp
    } else if matched.is_some() && path != "/metrics" {
        Interface::E2b
    } else {
        Interface::Other
    };
    let route = match matched {
        Some(m) => metrics().route_label(m),
        None => "unmatched",
    };
    let (op, sandbox) = match (interface, post, route) {
        (Interface::Rest, true, "/v1/sandboxes") => (Some(Operation::CreateSandbox), None),
        (Interface::Rest, true, "/v1/sandboxes/{id}/execute") => (
            Some(Operation::Execute),
            path.split('/').nth(3).map(percent_decoded),
        ),
        (Interface::E2b, true, "/sandboxes" | "/v2/sandboxes") => {
            (Some(Operation::CreateSandbox), None)
        }
        _ => (None, None),
    };
    Shape {
        interface,
        route,
        op,
        sandbox,
    }
}

fn percent_decoded(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// Reads a small MCP `tools/call` body for its tool and sandbox, and puts the body back.
async fn peek_mcp(req: Request, shape: &mut Shape) -> Request {
    let small = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|n| n <= MCP_PEEK_BYTES);
    if req.method() != Method::POST || !small {
        return req;
    }
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, MCP_PEEK_BYTES as usize).await {
        Ok(b) => b,
        // The client went away mid-body: the handler sees an empty body and answers so.
        Err(_) => return Request::from_parts(parts, Body::empty()),
    };
    #[derive(serde::Deserialize)]
    struct Call {
        method: String,
        #[serde(default)]
        params: Option<Params>,
    }
    #[derive(serde::Deserialize)]
    struct Params {
        name: Option<String>,
        #[serde(default)]
        arguments: Option<serde_json::Value>,
    }
    if let Ok(call) = serde_json::from_slice::<Call>(&bytes) {
        if call.method == "tools/call" {
            if let Some(p) = call.params {
                let name = p.name.unwrap_or_default();
                let word = !name.is_empty()
                    && name.len() <= 40
                    && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
                let tool = if word { name.as_str() } else { "{}" };
                shape.route = SHAPES.intern(&format!("/mcp {tool}"));
                shape.op = match tool {
                    "create_sandbox" => Some(Operation::CreateSandbox),
                    "run_python" | "run_bash" => Some(Operation::Execute),
                    _ => None,
                };
                if shape.op == Some(Operation::Execute) {
                    shape.sandbox = p
                        .arguments
                        .as_ref()
                        .and_then(|a| a.get("sandbox_id"))
                        .and_then(|v| v.as_str())
                        .map(str::to_owned);
                }
            }
        }
    }
    Request::from_parts(parts, Body::from(bytes))
}

/// Execution spans of requests in flight, by the sandbox they execute in, oldest first (each
/// with the token its request removes it by).
type Waiting = HashMap<String, VecDeque<(u64, tracing::Span)>>;

static WAITING: LazyLock<Mutex<Waiting>> = LazyLock::new(Mutex::default);
static TOKENS: AtomicU64 = AtomicU64::new(0);

fn waiting() -> std::sync::MutexGuard<'static, Waiting> {
    WAITING.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Completes the execution span an `executed` event belongs to, when that span is known for
/// sure: the span the event was emitted in (work the request handed to a task carries its
/// span), or the only one waiting on that sandbox. Several requests queued on one sandbox are
/// not guessed between: a JSON answer names its execution itself (see [`Finishing`]). An
/// execution no traced request waits for (a job's, an MCP session's own sandbox's) gets a span
/// of its own.
fn on_event(ev: &LifecycleEvent) {
    if ev.kind != LifecycleKind::Executed {
        return;
    }
    let end_state =
        sandlot_telemetry::end_state_str(ev.detail.get("end_state").and_then(|v| v.as_str()));
    let exec_id = ev.execution_id.clone().unwrap_or_default();
    let current = tracing::Span::current().id();
    let found = {
        let w = waiting();
        match w.get(&ev.sandbox_id) {
            None => None,
            Some(q) => {
                let exact = current
                    .as_ref()
                    .and_then(|id| q.iter().find(|(_, s)| s.id().as_ref() == Some(id)));
                match (exact, q.len()) {
                    (Some((_, s)), _) => Some(Some(s.clone())),
                    (None, 1) => Some(Some(q[0].1.clone())),
                    // Ambiguous: left to the answers.
                    (None, _) => Some(None),
                }
            }
        }
    };
    match found {
        Some(Some(span)) => {
            span.record("sandlot.execution_id", exec_id.as_str());
            span.record("sandlot.end_state", end_state);
        }
        Some(None) => {}
        None => {
            let ms = ev
                .detail
                .get("duration_ms")
                .and_then(|v| v.as_f64())
                .unwrap_or(0.0);
            let end = SystemTime::now();
            trace::record_past(PastSpan {
                name: "sandlot.execute",
                start: end - Duration::from_secs_f64(ms.max(0.0) / 1e3),
                end,
                attributes: vec![
                    KeyValue::new("sandlot.sandbox_id", ev.sandbox_id.clone()),
                    KeyValue::new("sandlot.execution_id", exec_id),
                    KeyValue::new("sandlot.end_state", end_state),
                ],
                parent: None,
            });
        }
    }
}

/// The execution id and end state at the head of an `ExecutionResult`'s JSON (`id` is its
/// first field and `end_state` comes before any output, so what the code printed cannot pose
/// as either).
fn result_head(bytes: &[u8]) -> Option<(&str, &str)> {
    let n = bytes.len().min(1024);
    // A cut inside a multi-byte character: the head up to it.
    let head = match std::str::from_utf8(&bytes[..n]) {
        Ok(s) => s,
        Err(e) => std::str::from_utf8(&bytes[..e.valid_up_to()]).ok()?,
    };
    let value = |key: &str| {
        let at = head.find(&format!("\"{key}\":\""))? + key.len() + 4;
        let end = head[at..].find('"')?;
        Some(&head[at..at + end])
    };
    let id = head.strip_prefix("{\"id\":\"")?.split('"').next()?;
    Some((id, value("end_state")?))
}

/// Ends a request's operation when its response body is dropped (at its end, or when the
/// client goes away): the operation's
/// duration, its spans, its place among the waiting execution spans.
struct Finish {
    start: Instant,
    op: Option<(Operation, Interface, bool)>,
    spans: Vec<tracing::Span>,
    waiting: Option<(String, u64)>,
}

impl Drop for Finish {
    fn drop(&mut self) {
        if let Some((op, interface, ok)) = self.op {
            metrics().operation(op, interface, ok, self.start.elapsed());
        }
        if let Some((sandbox, token)) = self.waiting.take() {
            let mut w = waiting();
            if let Some(q) = w.get_mut(&sandbox) {
                q.retain(|(t, _)| *t != token);
                if q.is_empty() {
                    w.remove(&sandbox);
                }
            }
        }
        // Children first, so each span ends within its parent.
        while let Some(s) = self.spans.pop() {
            drop(s);
        }
    }
}

/// A response body that runs its [`Finish`] when it ends (or is dropped unfinished).
struct Finishing {
    inner: Body,
    finish: Option<Finish>,
    /// An execution span to name from the answer's first bytes (JSON answers).
    execution: Option<tracing::Span>,
}

impl HttpBody for Finishing {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            std::task::Poll::Ready(None) => self.finish = None,
            std::task::Poll::Ready(Some(Ok(frame))) => {
                if let (Some(span), Some(data)) = (self.execution.take(), frame.data_ref()) {
                    if let Some((id, end_state)) = result_head(data) {
                        span.record("sandlot.execution_id", id);
                        span.record(
                            "sandlot.end_state",
                            sandlot_telemetry::end_state_str(Some(end_state)),
                        );
                    }
                }
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Traces and counts the request.
pub async fn middleware(State(_rec): State<Arc<Recording>>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let method = method_label(req.method());
    let mut shape = shape_of(&req);
    let req = if shape.interface == Interface::Mcp {
        peek_mcp(req, &mut shape).await
    } else {
        req
    };
    let parent = req
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .and_then(trace::remote_parent);
    let exporting = trace::enabled();
    if !exporting && !sandlot_telemetry::logs::json_logs() {
        // The lean path: counters, and the caller's trace id for the audit record.
        if let Some(id) = parent.as_ref().and_then(trace::trace_id_of) {
            Note::set_trace_id(&id);
        }
        let resp = next.run(req).await;
        return finish(resp, &shape, method, start, None).await;
    }
    let span = tracing::info_span!(
        target: "sandlot::trace",
        "request",
        otel.name = %format_args!("{method} {}", shape.route),
        otel.kind = "server",
        http.request.method = method,
        http.route = shape.route,
        sandlot.interface = shape.interface.as_str(),
        http.response.status_code = tracing::field::Empty,
        trace_id = tracing::field::Empty,
    );
    if let Some(cx) = &parent {
        trace::set_parent(&span, cx);
    }
    let trace_id =
        trace::span_trace_id(&span).or_else(|| parent.as_ref().and_then(trace::trace_id_of));
    if let Some(id) = &trace_id {
        span.record("trace_id", id.as_str());
        Note::set_trace_id(id);
    }
    let mut spans = vec![span.clone()];
    let mut waiting_key = None;
    let inner = match (exporting, shape.op) {
        (true, Some(op)) => {
            let name = match op {
                Operation::CreateSandbox => "sandlot.create_sandbox",
                Operation::Execute => "sandlot.execute",
            };
            let child = tracing::info_span!(
                target: "sandlot::trace",
                parent: &span,
                "operation",
                otel.name = name,
                sandlot.sandbox_id = tracing::field::Empty,
                sandlot.execution_id = tracing::field::Empty,
                sandlot.end_state = tracing::field::Empty,
            );
            if let (Operation::Execute, Some(sandbox)) = (op, &shape.sandbox) {
                child.record("sandlot.sandbox_id", sandbox.as_str());
                let token = TOKENS.fetch_add(1, Ordering::Relaxed);
                waiting()
                    .entry(sandbox.clone())
                    .or_default()
                    .push_back((token, child.clone()));
                waiting_key = Some((sandbox.clone(), token));
            }
            spans.push(child.clone());
            child
        }
        _ => span.clone(),
    };
    let resp = next.run(req).instrument(inner).await;
    span.record("http.response.status_code", resp.status().as_u16());
    let traced = Traced {
        spans,
        waiting: waiting_key,
    };
    finish(resp, &shape, method, start, Some(traced)).await
}

/// The spans of a traced request.
struct Traced {
    spans: Vec<tracing::Span>,
    waiting: Option<(String, u64)>,
}

/// Counts the answered request and arranges for its operation and spans to end with its body.
async fn finish(
    resp: Response,
    shape: &Shape,
    method: &'static str,
    start: Instant,
    traced: Option<Traced>,
) -> Response {
    let status = resp.status();
    metrics().http_request(
        shape.interface,
        shape.route,
        method,
        status.as_u16(),
        start.elapsed(),
    );
    let ok = status.is_success();
    let op = shape.op.map(|op| (op, shape.interface, ok));
    if op.is_none() && traced.is_none() {
        return resp;
    }
    let (spans, waiting) = match traced {
        Some(t) => (t.spans, t.waiting),
        None => (Vec::new(), None),
    };
    // A created sandbox's id, from the (small, JSON) answer, for the creation span.
    let resp = match (shape.op, spans.get(1)) {
        (Some(Operation::CreateSandbox), Some(child)) if ok && is_small_json(&resp) => {
            let (parts, body) = resp.into_parts();
            match axum::body::to_bytes(body, CREATE_PEEK_BYTES).await {
                Ok(bytes) => {
                    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) {
                        let id = v.get("id").or_else(|| v.get("sandboxID"));
                        if let Some(id) = id.and_then(|v| v.as_str()) {
                            child.record("sandlot.sandbox_id", id);
                        }
                    }
                    Response::from_parts(parts, Body::from(bytes))
                }
                Err(e) => {
                    tracing::warn!(error = %e, "a creation's answer could not be read");
                    HttpError::internal("the answer could not be read").into_response()
                }
            }
        }
        _ => resp,
    };
    let json = resp
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let execution = match (shape.op, shape.interface, spans.get(1)) {
        (Some(Operation::Execute), Interface::Rest, Some(child)) if ok && json => {
            Some(child.clone())
        }
        _ => None,
    };
    let finish = Finish {
        start,
        op,
        spans,
        waiting,
    };
    resp.map(|inner| {
        Body::new(Finishing {
            inner,
            finish: Some(finish),
            execution,
        })
    })
}

fn is_small_json(resp: &Response) -> bool {
    let json = resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let small = resp
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .or_else(|| HttpBody::size_hint(resp.body()).exact().map(|n| n as usize))
        .is_some_and(|n| n <= CREATE_PEEK_BYTES);
    json && small
}

/// `GET /metrics`: every metric as OpenMetrics text. An operator key is required (unless
/// `SANDLOT_METRICS_PUBLIC=1`, or the server runs without keys).
async fn get_metrics(State(rec): State<Arc<Recording>>, headers: HeaderMap) -> Response {
    if let (Some(gov), false) = (rec.ctx.gov.as_deref(), rec.telemetry.metrics_public) {
        match principal_of(gov, &headers) {
            Ok(p) if Caller(p.clone()).is_operator() => {}
            Ok(_) => {
                return HttpError::new(
                    ErrorCode::Forbidden,
                    "metrics need an operator key (an admin key of tenant default)",
                )
                .into_response()
            }
            Err(e) => return e.into_response(),
        }
    }
    let text = metrics().render();
    ([(CONTENT_TYPE, sandlot_telemetry::CONTENT_TYPE)], text).into_response()
}

/// `GET /v1/sandboxes/{id}/metrics`: what the sandbox uses now (its tenant only: the `/v1`
/// layer answers another tenant's id as a missing one).
async fn sandbox_metrics(
    State(rec): State<Arc<Recording>>,
    Path(id): Path<String>,
) -> Result<Json<sandlot_runtime::SandboxUsage>, HttpError> {
    let rt = rec.ctx.rt.clone();
    let usage = tokio::task::spawn_blocking(move || rt.sandbox_usage(&id))
        .await
        .map_err(|e| HttpError::internal(format!("reading the sandbox's usage failed: {e}")))??;
    Ok(Json(usage))
}

/// Most ids one `GET /v1/metrics/sandboxes` names (the console asks for the rows in view).
pub const MAX_METRICS_IDS: usize = 200;
/// Readings kept per sandbox for its sparkline, and sandboxes kept (in-process only: a
/// restart starts the lines afresh; nothing is persisted).
const HISTORY_LEN: usize = 30;
const HISTORY_SANDBOXES: usize = 4096;
/// Readings closer together than this replace the last one rather than adding a point.
const HISTORY_MIN_GAP: Duration = Duration::from_secs(1);

/// One point of a sandbox's sparkline.
#[derive(Debug, Clone, serde::Serialize)]
pub struct UsagePoint {
    pub at: String,
    pub cpu_time_ms: f64,
    pub memory_bytes: u64,
}

/// A sandbox's usage now and its last readings (oldest first), for the console's sparklines.
#[derive(Debug, Clone, serde::Serialize)]
pub struct UsageWithHistory {
    #[serde(flatten)]
    pub usage: sandlot_runtime::SandboxUsage,
    pub history: Vec<UsagePoint>,
}

/// A sandbox's readings: when the last was taken, and the points (oldest first).
type Readings = (Instant, VecDeque<UsagePoint>);

/// The readings the batch route took, per sandbox: bounded in both directions.
static HISTORY: LazyLock<Mutex<HashMap<String, Readings>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn remember(u: &sandlot_runtime::SandboxUsage, now: Instant) -> Vec<UsagePoint> {
    let mut all = HISTORY.lock().unwrap_or_else(PoisonError::into_inner);
    if all.len() >= HISTORY_SANDBOXES && !all.contains_key(&u.sandbox_id) {
        // Forget the sandbox read longest ago (an ended one, most likely).
        if let Some(oldest) = all
            .iter()
            .min_by_key(|(_, (t, _))| *t)
            .map(|(k, _)| k.clone())
        {
            all.remove(&oldest);
        }
    }
    let (last, points) = all
        .entry(u.sandbox_id.clone())
        .or_insert_with(|| (now, VecDeque::new()));
    let point = UsagePoint {
        at: u.at.clone(),
        cpu_time_ms: u.cpu_time_ms,
        memory_bytes: u.memory_bytes,
    };
    if !points.is_empty() && now.duration_since(*last) < HISTORY_MIN_GAP {
        points.pop_back();
    }
    points.push_back(point);
    while points.len() > HISTORY_LEN {
        points.pop_front();
    }
    *last = now;
    points.iter().cloned().collect()
}

#[derive(Debug, serde::Deserialize)]
struct MetricsQuery {
    #[serde(default)]
    ids: String,
}

/// `GET /v1/metrics/sandboxes?ids=a,b,…`: the usage now and recent readings of up to
/// [`MAX_METRICS_IDS`] sandboxes in one request (the console's list draws a sparkline per row
/// in view). Not under `/v1/sandboxes/{id}`, so the authentication layer does not scope it:
/// ids that are not the caller's tenant's (the operator's: any tenant's), or that name no live
/// sandbox, are left out of the answer, never an error, so the answer says nothing about
/// other tenants' ids. More ids than the bound, or an empty or over-long id, is a 400.
async fn batch_metrics(
    State(rec): State<Arc<Recording>>,
    caller: Caller,
    axum::extract::Query(q): axum::extract::Query<MetricsQuery>,
) -> Result<Json<serde_json::Value>, HttpError> {
    let ids: Vec<String> = q
        .ids
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    if ids.len() > MAX_METRICS_IDS {
        return Err(HttpError::invalid_request(format!(
            "at most {MAX_METRICS_IDS} ids per request ({} given)",
            ids.len()
        )));
    }
    if ids.iter().any(|id| id.len() > 128) {
        return Err(HttpError::invalid_request("an id is longer than 128 bytes"));
    }
    let rt = rec.ctx.rt.clone();
    let (tenant, operator) = (caller.tenant().to_owned(), caller.is_operator());
    let out = tokio::task::spawn_blocking(move || {
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for id in ids {
            if !seen.insert(id.clone()) {
                continue;
            }
            let Some(owner) = rt.sandbox_tenant(&id) else {
                continue;
            };
            if owner != tenant && !operator {
                continue;
            }
            if let Ok(usage) = rt.sandbox_usage(&id) {
                let history = remember(&usage, Instant::now());
                out.push(UsageWithHistory { usage, history });
            }
        }
        out
    })
    .await
    .map_err(|e| HttpError::internal(format!("reading the sandboxes' usage failed: {e}")))?;
    Ok(Json(serde_json::json!({ "sandboxes": out })))
}

pub(crate) fn routes(rec: Arc<Recording>) -> Router {
    Router::new()
        .route("/metrics", get(get_metrics))
        .route("/v1/sandboxes/{id}/metrics", get(sandbox_metrics))
        .route("/v1/metrics/sandboxes", get(batch_metrics))
        .with_state(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandboxs_readings_are_bounded_and_close_ones_replace_each_other() {
        let usage = |cpu: f64| sandlot_runtime::SandboxUsage {
            sandbox_id: "sb_readings_test".into(),
            state: "running".into(),
            cpu_time_ms: cpu,
            memory_bytes: 1,
            memory_peak_bytes: 1,
            memory_limit_bytes: 2,
            pids: 1,
            at: String::new(),
        };
        let t0 = Instant::now();
        // Readings under a second apart: the last replaces the one before.
        for i in 0..5 {
            let h = remember(&usage(i as f64), t0 + Duration::from_millis(100 * i));
            assert_eq!(h.len(), 1);
            assert_eq!(h[0].cpu_time_ms, i as f64);
        }
        // A second or more apart: kept, the newest HISTORY_LEN of them.
        let mut h = Vec::new();
        for i in 1..=(HISTORY_LEN as u64 + 10) {
            h = remember(&usage(100.0 + i as f64), t0 + Duration::from_secs(i));
        }
        assert_eq!(h.len(), HISTORY_LEN);
        assert_eq!(
            h.last().unwrap().cpu_time_ms,
            100.0 + (HISTORY_LEN + 10) as f64
        );
        assert_eq!(h[0].cpu_time_ms, 100.0 + 11.0);
    }

    #[test]
    fn path_shapes_keep_words_and_blank_ids() {
        assert_eq!(path_shape("/execute"), "/execute");
        assert_eq!(
            path_shape("/process.Process/Start"),
            "/process.Process/Start"
        );
        assert_eq!(
            path_shape("/contexts/3f2a9c/restart"),
            "/contexts/{}/restart"
        );
        assert_eq!(path_shape("/a/b/c/d/e/f"), "/a/b/c/d/…");
        assert_eq!(path_shape("/"), "/{}");
        assert_eq!(path_shape("/sb_0123"), "/{}");
        assert_eq!(path_shape(&format!("/{}", "x".repeat(41))), "/{}");
    }

    #[test]
    fn an_answer_names_its_execution_from_its_head_only() {
        let r = br#"{"id":"ex_1","sandbox_id":"sb_1","language":"python","end_state":"ok","stdout":"\"end_state\":\"oom\""}"#;
        assert_eq!(result_head(r), Some(("ex_1", "ok")));
        assert_eq!(result_head(br#"{"sandbox_id":"x","id":"ex_1"}"#), None);
        assert_eq!(result_head(b"\xff\xfe"), None);
        assert_eq!(result_head(b""), None);
    }

    #[test]
    fn context_free_executions_get_no_waiting_span() {
        // Without an exporter the listener is never registered; calling it is harmless.
        let ev = LifecycleEvent {
            seq: 1,
            kind: LifecycleKind::Executed,
            sandbox_id: "sb_x".into(),
            tenant: "default".into(),
            at: String::new(),
            execution_id: Some("ex_1".into()),
            detail: serde_json::json!({"end_state": "ok", "duration_ms": 2.0}),
        };
        on_event(&ev);
        assert!(waiting().get("sb_x").is_none());
    }
}
