//! `/mcp`: the MCP server over streamable HTTP, in-process on `sandlot serve`, one MCP session
//! (and at most one own sandbox) per `Mcp-Session-Id`.
//!
//! Around rmcp's service: a bound on live sessions ([`MAX_SESSIONS`](crate::MAX_SESSIONS),
//! idle ones expire after [`SESSION_IDLE`](crate::SESSION_IDLE)), and the watch that notices a
//! client gone mid-execution. rmcp keeps a request running when its response stream is
//! dropped (clients may resume a stream), so each response body here carries a token that is
//! cancelled when the body is dropped before its end; the tool call sees it and interrupts
//! the execution.
//!
//! Each session belongs to the API key that opened it (`initialize`): a request for an
//! existing session with another key (or none) is answered as one for a session that does
//! not exist, whatever its method, so a session id seen in a log gives nobody else its
//! sandbox, its streams or the power to end it. Tool calls then act as that key (`tenancy`).

use crate::backend::Backend;
use crate::server::{ClientGone, McpServer, Transport};
use crate::tenancy::Tenancy;
use crate::{MAX_BODY_BYTES, MAX_SESSIONS, SESSION_IDLE};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use bytes::Bytes;
use futures::Stream;
use http_body::{Frame, SizeHint};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, SessionConfig,
};
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId};
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use sandlot_tenancy::Share;
use sandlot_types::Principal;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Interval of SSE keep-alive comments on an open response: the write that fails tells a
/// client that went away (with half-closed HTTP/1 allowed, a write is the only sign), so it
/// bounds how long a disconnected client's execution keeps running.
const SSE_KEEP_ALIVE: Duration = Duration::from_secs(1);

/// Host names every request may carry (any port): loopback.
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The router serving `/mcp` with `backend`, scoped to tenants by `tenancy`; requests must
/// name a loopback host or one of `extra_hosts`.
pub(crate) fn router<B: Backend>(
    backend: Arc<B>,
    tenancy: Arc<Tenancy>,
    extra_hosts: Vec<String>,
) -> Router {
    let mut session_config = SessionConfig::default();
    session_config.keep_alive = Some(SESSION_IDLE);
    let mut local = LocalSessionManager::default();
    local.session_config = session_config;
    let sessions = Arc::new(Bounded {
        inner: local,
        owners: Default::default(),
        requires_keys: tenancy.requires_keys(),
        tenancy: tenancy.clone(),
    });

    let hosts = LOOPBACK_HOSTS
        .iter()
        .map(|h| h.to_string())
        .chain(extra_hosts);
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_sse_keep_alive(Some(SSE_KEEP_ALIVE))
        // Browsers' pages are not MCP clients: a request that carries an Origin must come from
        // a page on this machine (desktop clients and SDKs send none). The Host check stops
        // DNS rebinding.
        .with_allowed_origins(["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"]);
    config.max_request_body_bytes = MAX_BODY_BYTES;
    let service = StreamableHttpService::new(
        move || {
            Ok(McpServer::new(
                backend.clone(),
                Some(tenancy.clone()),
                Transport::Http,
            ))
        },
        sessions.clone(),
        config,
    );
    Router::new()
        .route_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(sessions, guard))
}

/// Refuses a new session past the bound (before rmcp reads the body) and a request for a
/// session opened by another key, records who opens a session, and watches the response for
/// a client that goes away.
async fn guard(State(sessions): State<Arc<Bounded>>, mut req: Request, next: Next) -> Response {
    let who = req.extensions().get::<Principal>().cloned();
    let key = who.as_ref().map(|p| p.key_id.clone());
    if sessions.requires_keys && key.is_none() {
        // The server's middleware answers first; this holds should it ever not run.
        return rpc_error(StatusCode::UNAUTHORIZED, "missing API key");
    }
    let session = req
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let opening = req.method() == Method::POST && !req.headers().contains_key("mcp-session-id");
    if opening && sessions.count().await >= MAX_SESSIONS {
        return too_many_sessions();
    }
    // The tenant's share of the pool: held while the session opens, so the next opening of
    // the same tenant counts it.
    let _claim = match (&who, opening) {
        (Some(who), true) => match sessions.claim(who).await {
            Ok(claim) => claim,
            Err(e) => return rpc_error(StatusCode::TOO_MANY_REQUESTS, &e),
        },
        _ => None,
    };
    let tenant = who.as_ref().map(|p| p.tenant.clone());
    if let Some(id) = &session {
        if sessions.exists(id).await && !sessions.opened_by(id, &key) {
            // rmcp's own words for an unknown session: the two read the same.
            return rpc_error(StatusCode::NOT_FOUND, "Not Found: Session not found");
        }
    }
    if req.method() == Method::DELETE {
        // rmcp answers 202 to ending a session it does not have; MCP's answer for an unknown
        // session id is 404, as on every other method.
        let id = req
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok());
        if let Some(id) = id {
            if !sessions.exists(id).await {
                return rpc_error(StatusCode::NOT_FOUND, "Not Found: Session not found");
            }
        }
    }
    let gone = CancellationToken::new();
    req.extensions_mut().insert(ClientGone(gone.clone()));
    let delete = req.method() == Method::DELETE;
    let mut resp = next.run(req).await;
    if opening && resp.status().is_success() {
        // Read before the client has the id, so its next request finds the owner.
        let opened = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok());
        if let Some(id) = opened {
            sessions.opened(id, key, tenant).await;
        }
    }
    if resp.status().is_client_error() || resp.status().is_server_error() {
        resp = as_rpc_error(resp).await;
    } else if delete && resp.status() == StatusCode::ACCEPTED {
        // The session is ended by now; clients (the official Python one among them) expect
        // 200 or 204 and warn on rmcp's 202.
        *resp.status_mut() = StatusCode::NO_CONTENT;
    }
    resp.map(|inner| {
        Body::new(Watched {
            inner,
            gone: Some(gone),
        })
    })
}

fn too_many_sessions() -> Response {
    let mut resp = rpc_error(
        StatusCode::SERVICE_UNAVAILABLE,
        &format!(
            "too many MCP sessions ({MAX_SESSIONS}); end one (DELETE /mcp with its \
             Mcp-Session-Id) or wait for idle ones to expire ({} s)",
            SESSION_IDLE.as_secs()
        ),
    );
    resp.headers_mut()
        .insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
    resp
}

/// JSON-RPC's code for an HTTP-level refusal: -32700 for a body that is not JSON-RPC,
/// -32001 for an unknown session (as other MCP servers answer it), -32603 for a server
/// failure, -32000 when the server is full, -32600 (invalid request) otherwise.
fn rpc_code(status: StatusCode, message: &str) -> i64 {
    match status {
        _ if message.starts_with("fail to deserialize") => -32700,
        StatusCode::NOT_FOUND => -32001,
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS => -32000,
        s if s.is_server_error() => -32603,
        _ => -32600,
    }
}

/// An HTTP-level refusal as a JSON-RPC error (no id: the request was not read as one).
fn rpc_error(status: StatusCode, message: &str) -> Response {
    // rmcp's "fail to deserialize" is its parse error, which it answers 415; it is a 400.
    let code = rpc_code(status, message);
    let status = if code == -32700 {
        StatusCode::BAD_REQUEST
    } else {
        status
    };
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": { "code": code, "message": message },
    });
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// rmcp answers HTTP-level refusals (bad media types, unknown sessions, oversized or
/// malformed bodies, foreign Host or Origin) in plain text; here they become JSON-RPC error
/// bodies, so every client reads the same format. JSON answers pass as they are.
async fn as_rpc_error(resp: Response) -> Response {
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/event-stream"));
    if is_json {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let text = match axum::body::to_bytes(body, 64 << 10).await {
        Ok(b) => String::from_utf8_lossy(&b).trim().to_string(),
        Err(_) => String::new(),
    };
    let text = if text.is_empty() {
        parts
            .status
            .canonical_reason()
            .unwrap_or("refused")
            .to_string()
    } else {
        text
    };
    let mut out = rpc_error(parts.status, &text);
    for name in [header::ALLOW, header::RETRY_AFTER] {
        if let Some(v) = parts.headers.get(&name) {
            out.headers_mut().insert(name, v.clone());
        }
    }
    out
}

/// A response body that cancels its token when dropped before its end.
struct Watched {
    inner: Body,
    gone: Option<CancellationToken>,
}

impl http_body::Body for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            self.gone = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let Some(gone) = self.gone.take() {
            gone.cancel();
        }
    }
}

/// rmcp's in-memory sessions, at most [`MAX_SESSIONS`] at once (and each tenant's
/// `max_mcp_sessions`), and the key that opened each.
struct Bounded {
    inner: LocalSessionManager,
    /// Session id → the id of the API key that opened it (`None` on a server without keys)
    /// and its tenant. Entries of sessions that expired are pruned when new ones are added.
    owners: std::sync::Mutex<HashMap<String, Owner>>,
    requires_keys: bool,
    tenancy: Arc<Tenancy>,
}

struct Owner {
    key: Option<String>,
    tenant: Option<String>,
}

impl Bounded {
    async fn count(&self) -> usize {
        self.inner.sessions.read().await.len()
    }

    async fn exists(&self, id: &str) -> bool {
        self.inner.sessions.read().await.contains_key(id)
    }

    fn owners(&self) -> std::sync::MutexGuard<'_, HashMap<String, Owner>> {
        self.owners
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether session `id` was opened by `key`. A session with no recorded opener belongs
    /// to nobody.
    fn opened_by(&self, id: &str, key: &Option<String>) -> bool {
        self.owners().get(id).is_some_and(|o| &o.key == key)
    }

    /// Claims one more session for `who`'s tenant: its live sessions (rmcp's, not the owners
    /// map, which keeps expired ones until pruned) against its `max_mcp_sessions`. `Err` is
    /// the refusal's message.
    async fn claim(&self, who: &Principal) -> Result<Option<sandlot_tenancy::Claim>, String> {
        let refused = |e: sandlot_types::ApiError| format!("{}: {}", e.code.as_str(), e.message);
        let Some(gov) = self.tenancy.gov() else {
            return Ok(None);
        };
        let Some(tenant) = sandlot_service::shares::capped(gov, who).map_err(refused)? else {
            return Ok(None);
        };
        let claim = gov.quotas.line(&tenant.name, Share::McpSessions).await;
        let live = self.inner.sessions.read().await;
        let held = self
            .owners()
            .iter()
            .filter(|(id, o)| {
                o.tenant.as_deref() == Some(tenant.name.as_str()) && live.contains_key(id.as_str())
            })
            .count();
        drop(live);
        sandlot_tenancy::check_share(&tenant, Share::McpSessions, held as u64)
            .map_err(|e| refused(sandlot_service::shares::quota_error(e)))?;
        Ok(Some(claim))
    }

    /// Records that `key` of `tenant` opened session `id`.
    async fn opened(&self, id: &str, key: Option<String>, tenant: Option<String>) {
        let stale = self.owners().len() >= MAX_SESSIONS;
        if stale {
            // Sessions expire inside rmcp without telling; their entries go here, at most
            // once per MAX_SESSIONS openings.
            let live: std::collections::HashSet<String> = self
                .inner
                .sessions
                .read()
                .await
                .keys()
                .map(|k| k.to_string())
                .collect();
            self.owners().retain(|k, _| live.contains(k));
        }
        self.owners().insert(id.to_owned(), Owner { key, tenant });
    }
}

#[derive(Debug, thiserror::Error)]
enum SessionsError {
    #[error("too many MCP sessions ({MAX_SESSIONS})")]
    Full,
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
}

impl SessionManager for Bounded {
    type Error = SessionsError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        // The guard refuses most past the bound with a clear answer; this is the hard bound
        // for those that raced it.
        if self.count().await >= MAX_SESSIONS {
            return Err(SessionsError::Full);
        }
        Ok(self.inner.create_session().await?)
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.inner.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.inner.close_session(id).await?;
        self.owners().remove(id.as_ref());
        Ok(())
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_stream(id, message).await?)
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_standalone_stream(id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.resume(id, last_event_id).await?)
    }
}
