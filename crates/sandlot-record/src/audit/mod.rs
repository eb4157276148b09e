//! Every request's audit record, and the audit routes.
//!
//! [`middleware`] runs around every request (REST `/v1`, E2B's control plane and what is
//! addressed to a sandbox, `/mcp`), outside authentication so refusals are recorded too: a
//! refusal by a known key or token names it (authentication puts the principal in the Note
//! before it checks what the request names), and a refusal of a request without one (no key,
//! a wrong or revoked key: anyone can send those) is counted per source address and written
//! once per interval as one `requests.refused` record ([`sandlot_audit::Refusals`]), so a
//! flood of them cannot fill the disk. It
//! admits the request with the log first ([`sandlot_audit::AuditLog::admit`], which holds disk
//! room for its record): when the log cannot record, the request is answered 503
//! `audit_unavailable` before anything runs (but liveness, metrics and the operator's audit
//! routes, so the operator can see and repair). It wraps the request and response bodies to
//! hash them as they stream (digests, never contents), and appends the record when the
//! response body ends or is dropped: who (the Note's principal), the tenant, the action (the
//! verb and the path with its ids replaced: `POST /v1/sandboxes/{id}/execute`), the ids, the
//! outcome, the policy decisions, the execution, the trace.
//!
//! Lifecycle events (any interface, jobs, housekeeping) are recorded by a runtime listener as
//! `sandbox.<kind>` by `system`. `GET /v1/audit` (records, filtered and paged), `GET
//! /v1/audit/checkpoint` (the latest signed checkpoint and the verifier key), `PUT /v1/audit`
//! (on/off, itself recorded) and `POST /v1/audit/seal` (the answer to a corrupt log) are the
//! operator's.

use super::{RecordContext, RecordError, Recording};
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use sandlot_audit::{AuditLog, Config, Entry, Refusals};
use sandlot_http::ApiQuery;
use sandlot_http::Caller;
use sandlot_http::HttpError;
use sandlot_service::Note;
use sandlot_types::ErrorCode;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

mod routes;
mod source;
pub(crate) use routes::routes;
use source::request_source;
pub use source::{parse_trusted_proxies, TRUSTED_PROXIES};

/// The file whose presence keeps audit off across restarts (`PUT /v1/audit`).
const DISABLED_MARKER: &str = "disabled";

/// The server's audit log.
pub struct Audit {
    log: Arc<AuditLog>,
    /// Unauthenticated refusals of the current interval.
    refusals: Arc<Refusals>,
    enabled: Arc<AtomicBool>,
    /// No governance: every request is the local admin's.
    local: bool,
    rt: sandlot_runtime::Runtime,
    dir: PathBuf,
    /// The reverse proxies whose `X-Forwarded-For` names the client
    /// (`SANDLOT_TRUSTED_PROXIES`); empty: the TCP peer is the source.
    trusted_proxies: Arc<[ipnet::IpNet]>,
    /// The last full verification (`GET /v1/audit/status`), reused while the log has not
    /// grown and redone at most every [`routes::VERIFY_EVERY`]; the lock makes it one at a time.
    verified: Arc<tokio::sync::Mutex<Option<routes::Verified>>>,
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

impl Audit {
    /// Opens `<data-dir>/audit` (`SANDLOT_AUDIT=off` starts with recording off, which is
    /// recorded; `SANDLOT_AUDIT_CHECKPOINT_RECORDS`, `SANDLOT_AUDIT_CHECKPOINT_SECONDS` set
    /// the checkpoint cadence, `SANDLOT_AUDIT_SEGMENT_BYTES` the segment size,
    /// `SANDLOT_AUDIT_REFUSALS_SECONDS` the interval of the unauthenticated refusals' tallies)
    /// and records lifecycle events from now on.
    pub async fn start(ctx: &RecordContext) -> Result<Self, RecordError> {
        let dir = ctx.data_dir.join("audit");
        let mut cfg = Config::default();
        if let Some(n) = env_u64("SANDLOT_AUDIT_SEGMENT_BYTES").filter(|n| *n > 0) {
            cfg.segment_bytes = n;
        }
        if let Some(n) = env_u64("SANDLOT_AUDIT_CHECKPOINT_RECORDS").filter(|n| *n > 0) {
            cfg.checkpoint_every = n;
        }
        if let Some(s) = env_u64("SANDLOT_AUDIT_CHECKPOINT_SECONDS").filter(|n| *n > 0) {
            cfg.checkpoint_interval = Duration::from_secs(s);
        }
        let open_dir = dir.clone();
        let log = tokio::task::spawn_blocking(move || AuditLog::open(&open_dir, cfg))
            .await
            .map_err(|e| RecordError::Io {
                what: "opening the audit log".into(),
                source: std::io::Error::other(e.to_string()),
            })??;
        let env_off = std::env::var("SANDLOT_AUDIT")
            .map(|v| matches!(v.trim(), "off" | "0" | "false"))
            .unwrap_or(false);
        let marker_off = dir.join(DISABLED_MARKER).exists();
        let enabled = !(env_off || marker_off);
        if !enabled {
            let by = if env_off {
                "SANDLOT_AUDIT=off"
            } else {
                "PUT /v1/audit"
            };
            let _ = log.append(system_entry(
                "audit.disabled",
                serde_json::json!({"by": by, "at_start": true}),
            ));
        }
        if log.status().state == "corrupt" {
            tracing::error!(
                status = ?log.status(),
                "the audit log is corrupt: actions are refused until an operator seals it \
                 (sandlot audit seal, or POST /v1/audit/seal)"
            );
        }
        let enabled = Arc::new(AtomicBool::new(enabled));
        let (l, on) = (log.clone(), enabled.clone());
        ctx.rt.on_event(Arc::new(move |ev| {
            // Emitted inline: when the request that caused it is this task, its record
            // names the execution too (a no-op elsewhere).
            if let Some(x) = &ev.execution_id {
                Note::set_execution(x);
            }
            if !on.load(Ordering::Relaxed) {
                return;
            }
            let kind = serde_json::to_value(ev.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            let _ = l.append(Entry {
                actor: "system".into(),
                tenant: Some(ev.tenant.clone()),
                action: format!("sandbox.{kind}"),
                target: serde_json::json!({"sandbox": ev.sandbox_id}),
                outcome: "ok".into(),
                execution_id: ev.execution_id.clone(),
                ..Default::default()
            });
        }));
        let trusted_proxies: Arc<[ipnet::IpNet]> = match std::env::var(TRUSTED_PROXIES) {
            Ok(v) => parse_trusted_proxies(&v)
                .map_err(|why| RecordError::Setting {
                    name: TRUSTED_PROXIES,
                    why,
                })?
                .into(),
            Err(_) => Arc::new([]),
        };
        let refusals = Arc::new(Refusals::new());
        let every = env_u64("SANDLOT_AUDIT_REFUSALS_SECONDS")
            .filter(|n| *n > 0)
            .map_or(REFUSALS_INTERVAL, Duration::from_secs);
        let (l, r, on) = (log.clone(), refusals.clone(), enabled.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                flush_refusals(&l, &r, &on).await;
            }
        });
        Ok(Self {
            log,
            refusals,
            enabled,
            local: ctx.gov.is_none(),
            rt: ctx.rt.clone(),
            dir,
            trusted_proxies,
            verified: Arc::default(),
        })
    }

    /// Writes the refusals counted so far and signs the last checkpoint.
    pub async fn shutdown(&self) {
        flush_refusals(&self.log, &self.refusals, &self.enabled).await;
        let log = self.log.clone();
        let _ = tokio::task::spawn_blocking(move || log.close()).await;
    }

    pub fn log(&self) -> &Arc<AuditLog> {
        &self.log
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }
}

/// How long unauthenticated refusals are counted before their tallies are written.
const REFUSALS_INTERVAL: Duration = Duration::from_secs(60);

/// Ends the refusals' interval: one record per source.
async fn flush_refusals(log: &Arc<AuditLog>, refusals: &Arc<Refusals>, on: &AtomicBool) {
    let entries = refusals.take();
    if entries.is_empty() || !on.load(Ordering::Relaxed) {
        return;
    }
    let log = log.clone();
    let _ = tokio::task::spawn_blocking(move || {
        for e in entries {
            if let Err(e) = log.append(e) {
                tracing::error!(error = %e, "the refusals' tally could not be written");
            }
        }
    })
    .await;
}

fn system_entry(action: &str, target: serde_json::Value) -> Entry {
    Entry {
        actor: "system".into(),
        action: action.into(),
        target,
        outcome: "ok".into(),
        ..Default::default()
    }
}

/// Requests not recorded at all: liveness probes, metric scrapes and the public API document
/// read nothing of anyone's, and would fill the log (anyone may send them).
fn unrecorded(method: &Method, path: &str) -> bool {
    (method == Method::GET || method == Method::HEAD)
        && (path == "/v1/health" || path == "/metrics" || path == "/v1/openapi.json")
}

/// Requests served even when the log cannot record: the operator's way to see and repair.
fn exempt(path: &str) -> bool {
    path == "/v1/audit" || path.starts_with("/v1/audit/")
}

/// Path segments after which the next segment is an id, and the placeholder it becomes.
fn id_after(seg: &str) -> Option<&'static str> {
    Some(match seg {
        "sandboxes" | "snapshots" | "volumes" | "templates" | "tenants" | "keys" | "jobs"
        | "webhooks" | "sandbox" | "execution" | "reviews" => "{id}",
        "contexts" => "{ctx}",
        "artifacts" | "artifact" => "{sha256}",
        "diff" => "{other}",
        "ports" => "{port}",
        _ => return None,
    })
}

/// Segments that are never ids even after a collection (sub-routes of a collection).
fn is_static(seg: &str) -> bool {
    matches!(seg, "checkpoint" | "seal" | "status")
}

/// The route template of `path` and the ids it names: `/v1/sandboxes/sb_1/execute` →
/// `/v1/sandboxes/{id}/execute`, `{"id": "sb_1"}`. Derived from the path (the layer runs
/// before routing): an id follows a collection's name; a file path and what follows a port
/// is one `{*path}`; a port token's secret half is never kept.
pub(crate) fn route_of(path: &str) -> (String, serde_json::Map<String, serde_json::Value>) {
    let mut template = String::new();
    let mut target = serde_json::Map::new();
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let mut i = 0;
    let mut after_port = false;
    let short = |s: &str| -> serde_json::Value {
        let d = percent_encoding::percent_decode_str(s).decode_utf8_lossy();
        serde_json::Value::String(d.chars().take(128).collect())
    };
    while i < segs.len() {
        let seg = segs[i];
        let prev = if i > 0 { segs[i - 1] } else { "" };
        template.push('/');
        if (prev == "files" && i >= 2) || after_port {
            template.push_str("{*path}");
            let rest = segs[i..].join("/");
            target.insert("path".into(), short(&rest));
            break;
        }
        if prev == "ports" && i == 2 && segs.first() == Some(&"v1") {
            // `/v1/ports/{token}/{port}/...`: the token is `<sandbox>.<mac>`.
            template.push_str("{token}");
            let id = seg.split('.').next().unwrap_or("");
            target.insert("sandbox".into(), short(id));
            if let Some(port) = segs.get(i + 1) {
                template.push_str("/{port}");
                target.insert("port".into(), short(port));
                i += 1;
                after_port = segs.len() > i + 1;
            }
            i += 1;
            continue;
        }
        match id_after(prev) {
            Some(ph) if !seg.is_empty() && !is_static(seg) => {
                template.push_str(ph);
                let key = match ph {
                    "{id}" => match prev {
                        "sandboxes" | "sandbox" => "sandbox",
                        "snapshots" => "snapshot",
                        "volumes" => "volume",
                        "templates" => "template",
                        "tenants" => "tenant",
                        "keys" => "key",
                        "jobs" => "job",
                        "webhooks" => "webhook",
                        "execution" => "execution",
                        "reviews" => "review",
                        _ => "id",
                    },
                    "{ctx}" => "context",
                    "{sha256}" => "artifact",
                    "{other}" => "other",
                    "{port}" => {
                        after_port = segs.len() > i + 1;
                        "port"
                    }
                    _ => "id",
                };
                target.insert(key.into(), short(seg));
            }
            _ => {
                // Keep route words; anything else (an unknown path) is cut to a bounded size.
                let word: String = seg.chars().take(64).collect();
                template.push_str(&word);
            }
        }
        i += 1;
        if template.len() > 200 {
            template.truncate(200);
            break;
        }
    }
    if template.is_empty() {
        template.push('/');
    }
    (template, target)
}

/// A hash of bytes as they pass, shared between a body and the record.
#[derive(Clone, Default)]
struct Digest256(Arc<Mutex<(Sha256, u64)>>);

impl Digest256 {
    fn update(&self, b: &[u8]) {
        let mut g = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        g.0.update(b);
        g.1 += b.len() as u64;
    }

    /// The hex digest of what passed so far; `None` when nothing did.
    fn hex(&self) -> Option<String> {
        let g = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        (g.1 > 0).then(|| hex::encode(g.0.clone().finalize()))
    }
}

/// A body that hashes its data frames and calls `done` when it ends or is dropped.
struct Hashed {
    inner: Body,
    digest: Digest256,
    done: Option<Done>,
}

/// What a [`Hashed`] body calls once, with its digest.
type Done = Box<dyn FnOnce(&Digest256) + Send>;

impl Hashed {
    fn finish(&mut self) {
        if let Some(f) = self.done.take() {
            f(&self.digest);
        }
    }
}

impl Drop for Hashed {
    fn drop(&mut self) {
        self.finish();
    }
}

impl http_body::Body for Hashed {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(d) = frame.data_ref() {
                    this.digest.update(d);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(None) => {
                this.finish();
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                this.finish();
                Poll::Ready(Some(Err(e)))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Who asked, when the Note has no principal.
fn actor_without_principal(
    asker: &Asker,
    status: StatusCode,
) -> (serde_json::Value, Option<String>) {
    let refused = status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN;
    if let (Some(id), false) = (&asker.sandbox, refused) {
        if let Some(kind) = asker.token {
            return (
                serde_json::json!({"sandbox_token": id, "token": kind}),
                None,
            );
        }
    }
    ("anonymous".into(), None)
}

/// The stable code in a small JSON error body (`error.code`, or E2B's and JSON-RPC's
/// `code`), read from a body already in memory.
async fn error_code(resp: Response) -> (Response, Option<String>) {
    let small = http_body::Body::size_hint(resp.body())
        .upper()
        .is_some_and(|n| n <= 16 << 10);
    let json = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("json"));
    if !small || !json {
        return (resp, None);
    }
    let (parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 16 << 10).await else {
        return (Response::from_parts(parts, Body::empty()), None);
    };
    let code = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| {
            let c = v
                .pointer("/error/code")
                .or_else(|| v.get("code"))
                .cloned()?;
            Some(match c {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            })
        })
        .map(|c| c.chars().take(64).collect());
    (Response::from_parts(parts, Body::from(bytes)), code)
}

/// The refusal when the log cannot record, in the protocol's own shape.
fn refusal(path: &str, why: &str) -> Response {
    let message = format!("the audit log cannot record, so nothing runs: {why}");
    if path == "/mcp" || path.starts_with("/mcp/") {
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": null,
            "error": {"code": -32000, "message": message, "data": {"code": "audit_unavailable"}}
        });
        return (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    }
    HttpError::new(ErrorCode::AuditUnavailable, message).into_response()
}

/// Records the request in the audit log.
pub async fn middleware(State(rec): State<Arc<Recording>>, req: Request, next: Next) -> Response {
    let audit = &rec.audit;
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    if !audit.enabled() || unrecorded(&method, &path) {
        return next.run(req).await;
    }
    let admission = match audit.log.admit() {
        Ok(a) => Some(a),
        Err(_) if exempt(&path) => None,
        Err(e) => {
            sandlot_telemetry_refused();
            return refusal(&path, &e.to_string());
        }
    };
    let note = req.extensions().get::<Note>().cloned();
    let asker = Asker::of(req.headers());
    let peer = req
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip());
    let source = request_source(peer, req.headers(), &audit.trusted_proxies);
    let (req_parts, req_body) = req.into_parts();
    let req_digest = Digest256::default();
    let req = Request::from_parts(
        req_parts,
        Body::new(Hashed {
            inner: req_body,
            digest: req_digest.clone(),
            done: None,
        }),
    );
    // A client may go away before the answer (an HTTP/2 stream reset, a drained server
    // closing what is still open): the handler's future is then dropped here, and the guard
    // records the request anyway, as `499 client_closed_request`.
    let mut unanswered = Unanswered(Some(Pending {
        log: audit.log.clone(),
        refusals: audit.refusals.clone(),
        source,
        local: audit.local,
        rt: audit.rt.clone(),
        note,
        method,
        path,
        asker,
        req_digest,
        admission,
    }));
    let resp = next.run(req).await;
    let status = resp.status();
    let (resp, code) = if status.is_client_error() || status.is_server_error() {
        error_code(resp).await
    } else {
        (resp, None)
    };
    let noted = unanswered
        .0
        .as_ref()
        .and_then(|p| p.note.as_ref())
        .and_then(|n| n.data().refusal);
    let outcome = if status.is_success() || status.is_redirection() || status.is_informational() {
        "ok".to_owned()
    } else if let Some(c) = noted.map(str::to_owned).or(code) {
        format!("error:{c}")
    } else {
        status.as_u16().to_string()
    };
    let pending = unanswered
        .0
        .take()
        .expect("taken only here or when dropped");
    let done = Box::new(move |resp_digest: &Digest256| {
        pending.append(status, outcome, resp_digest.hex());
    });
    let (parts, body) = resp.into_parts();
    Response::from_parts(
        parts,
        Body::new(Hashed {
            inner: body,
            digest: Digest256::default(),
            done: Some(done),
        }),
    )
}

/// What the request's headers say about who asked, read before it runs (the few headers a
/// record needs, not a copy of them all).
struct Asker {
    /// Addressed to a sandbox by E2B's `E2b-Sandbox-Id` header.
    by_header: bool,
    /// That header's value (trimmed, at most 128 characters).
    sandbox: Option<String>,
    /// Which sandbox token it carried, if any: `envd` or `traffic`.
    token: Option<&'static str>,
}

impl Asker {
    fn of(headers: &HeaderMap) -> Asker {
        Asker {
            by_header: headers.contains_key(sandlot_http::SANDBOX_ID_HEADER),
            sandbox: headers
                .get(sandlot_http::SANDBOX_ID_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(|s| s.trim().chars().take(128).collect()),
            token: if headers.contains_key("x-access-token") {
                Some("envd")
            } else if headers.contains_key("e2b-traffic-access-token") {
                Some("traffic")
            } else {
                None
            },
        }
    }
}

/// What a request's record needs besides its answer, kept from before it runs.
struct Pending {
    log: Arc<AuditLog>,
    refusals: Arc<Refusals>,
    /// The peer's address, which tallies refusals without a principal.
    source: String,
    local: bool,
    rt: sandlot_runtime::Runtime,
    note: Option<Note>,
    method: Method,
    path: String,
    asker: Asker,
    req_digest: Digest256,
    /// Holds the record's disk room until it is written.
    admission: Option<sandlot_audit::Admission>,
}

impl Pending {
    /// Appends the request's record, with how it was answered.
    fn append(self, status: StatusCode, outcome: String, response_sha256: Option<String>) {
        let data = self.note.map(|n| n.data()).unwrap_or_default();
        let (mut template, mut target) = route_of(&self.path);
        let (actor, mut tenant) = match &data.principal {
            Some(p) => (
                serde_json::json!({"key_id": p.key_id, "key_prefix": p.key_prefix}),
                Some(p.tenant.clone()),
            ),
            None if self.local => {
                let p = sandlot_service::local_principal();
                (
                    serde_json::json!({"key_id": p.key_id, "key_prefix": p.key_prefix}),
                    Some(p.tenant),
                )
            }
            None => actor_without_principal(&self.asker, status),
        };
        if actor == "anonymous" && status.is_client_error() {
            let reason = outcome.strip_prefix("error:").unwrap_or(&outcome);
            let by = if self.asker.by_header { "sandbox:" } else { "" };
            self.refusals.count(
                &self.source,
                reason,
                &format!("{} {by}{template}", self.method),
            );
            return;
        }
        if self.asker.by_header {
            if let Some(id) = self.asker.sandbox.clone() {
                if tenant.is_none() && actor != "anonymous" {
                    tenant = self.rt.sandbox_tenant(&id);
                }
                target.insert("sandbox".into(), id.into());
            }
            template = format!("sandbox:{template}");
        }
        let entry = Entry {
            actor,
            tenant,
            action: format!("{} {template}", self.method),
            target: if target.is_empty() {
                serde_json::Value::Null
            } else {
                serde_json::Value::Object(target)
            },
            outcome,
            status: Some(status.as_u16()),
            decisions: data.decisions,
            request_sha256: self.req_digest.hex(),
            response_sha256,
            execution_id: data.execution_id,
            trace_id: data.trace_id,
        };
        if let Err(e) = self.log.append(entry) {
            tracing::error!(error = %e, "an audit record could not be written");
        }
        drop(self.admission);
    }
}

/// The status recorded for a request whose client went away before its answer (nginx's).
const CLIENT_CLOSED: u16 = 499;

/// Records a request whose handling was dropped before it answered.
struct Unanswered(Option<Pending>);

impl Drop for Unanswered {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let status = StatusCode::from_u16(CLIENT_CLOSED).unwrap_or(StatusCode::BAD_REQUEST);
            p.append(status, "error:client_closed_request".into(), None);
        }
    }
}

/// Where a refusal would be counted (the metrics helper owns the counters).
fn sandlot_telemetry_refused() {
    tracing::warn!("a request was refused: the audit log cannot record");
}

#[cfg(test)]
mod tests {
    use super::route_of;

    #[test]
    fn routes_are_templated() {
        let cases = [
            (
                "/v1/sandboxes/sb_1/execute",
                "/v1/sandboxes/{id}/execute",
                "sandbox",
                "sb_1",
            ),
            ("/v1/sandboxes", "/v1/sandboxes", "", ""),
            (
                "/v1/sandboxes/sb_1/files/a/b.txt",
                "/v1/sandboxes/{id}/files/{*path}",
                "path",
                "a/b.txt",
            ),
            (
                "/v1/sandboxes/sb_1/contexts/c1/restart",
                "/v1/sandboxes/{id}/contexts/{ctx}/restart",
                "context",
                "c1",
            ),
            (
                "/v1/ports/sb_9.deadbeef/8080/x/y",
                "/v1/ports/{token}/{port}/{*path}",
                "sandbox",
                "sb_9",
            ),
            (
                "/v1/sandboxes/sb_1/ports/8080/",
                "/v1/sandboxes/{id}/ports/{port}/{*path}",
                "port",
                "8080",
            ),
            ("/v1/audit/checkpoint", "/v1/audit/checkpoint", "", ""),
            (
                "/v1/reviews/rev_1/approve",
                "/v1/reviews/{id}/approve",
                "review",
                "rev_1",
            ),
            (
                "/v1/jobs/job_1/events",
                "/v1/jobs/{id}/events",
                "job",
                "job_1",
            ),
            (
                "/v1/lineage/artifact/abc",
                "/v1/lineage/artifact/{sha256}",
                "artifact",
                "abc",
            ),
            (
                "/sandboxes/x1/timeout",
                "/sandboxes/{id}/timeout",
                "sandbox",
                "x1",
            ),
            ("/process.Process/Start", "/process.Process/Start", "", ""),
            (
                "/v1/sandboxes/a/diff/b",
                "/v1/sandboxes/{id}/diff/{other}",
                "other",
                "b",
            ),
        ];
        for (path, want, key, id) in cases {
            let (t, target) = route_of(path);
            assert_eq!(t, want, "{path}");
            if !key.is_empty() {
                assert_eq!(target[key], id, "{path}");
            }
        }
        let (_, t) = route_of("/v1/ports/sb_9.secretmac/80");
        assert!(!t
            .values()
            .any(|v| v.as_str().unwrap().contains("secretmac")));
        let (t, _) = route_of(&format!("/v1/{}", "x".repeat(10_000)));
        assert!(t.len() <= 200);
    }
}
