//! The proxy itself: accepting a sandbox's connections, deciding each request, and the tunnel
//! or forwarded request that follows.
//!
//! The client side is HTTP/1.1 served by hyper, which bounds the request head (431 past
//! [`EgressConfig::max_head_bytes`], 400 for what does not parse) and closes a connection whose
//! head does not arrive within [`EgressConfig::head_timeout`]; keep-alive works, and every
//! request on a connection is decided on its own. The upstream side is one fresh connection per
//! CONNECT or plain-HTTP request, made by the proxy to an address it has checked, wrapped in
//! [`Counted`] so the record has the bytes and the idle timeout sees traffic. Each connection,
//! tunnel and forwarded request watches the sandbox's [`Policy`]: a cut or an allowlist that no
//! longer allows its host and address closes it.
//!
//! [`EgressConfig::max_head_bytes`]: crate::EgressConfig::max_head_bytes
//! [`EgressConfig::head_timeout`]: crate::EgressConfig::head_timeout

use crate::addr::canonical;
use crate::hooks::{EgressEvent, EgressHooks};
use crate::intercept::{Replayed, SandboxCa, Upstreams};
use crate::io::{Counted, Traffic};
use crate::rules::{normalize_domain, Host, NetworkRules};
use crate::secrets::{find_canary, ParsedSecret};
use crate::tls::{parse_client_hello, Hello, MAX_HELLO_BYTES};
use crate::EgressConfig;
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::http::request::Parts;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

mod forward;
pub use forward::HOP_BY_HOP;
mod intercept;
mod request;

use forward::{outgoing, strip_hop_by_hop, PrefixedBody};
use request::{Attempt, Recorder, Refusal, Target};

type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// A fatal TLS `access_denied` alert: what a client that was refused after the tunnel opened
/// (SNI mismatch) reads instead of a server's answer, so its error says "access denied".
const TLS_ALERT_ACCESS_DENIED: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31];

/// The server-wide state behind [`crate::Egress`].
pub(crate) struct Inner {
    pub cfg: EgressConfig,
    pub hooks: Arc<dyn EgressHooks>,
    /// Made when first needed (only sandboxes with secrets use it).
    pub upstreams: std::sync::OnceLock<Upstreams>,
    pub sandboxes: Mutex<HashMap<String, Arc<SandboxEntry>>>,
}

impl Inner {
    pub(crate) fn upstreams(&self) -> &Upstreams {
        self.upstreams
            .get_or_init(|| Upstreams::new(&self.cfg.extra_roots))
    }
}

/// What a sandbox may do, swapped whole on every change.
#[derive(Debug, Clone, Default)]
pub(crate) struct Policy {
    pub rules: NetworkRules,
    pub secrets: Vec<ParsedSecret>,
    pub canaries: Vec<String>,
    pub cut: bool,
}

/// One sandbox's proxy.
pub(crate) struct SandboxEntry {
    id: String,
    policy: watch::Sender<Arc<Policy>>,
    conns: Arc<Semaphore>,
    max_conns: usize,
    /// The current listener's token; its children are the connections' tokens.
    listener: Mutex<CancellationToken>,
    /// Its CA for intercepted tunnels, minted when first needed; kept across listeners (the
    /// sandbox's trust bundle names it).
    ca: Mutex<Option<Arc<SandboxCa>>>,
}

impl SandboxEntry {
    pub(crate) fn new(id: &str, max_conns: usize) -> Arc<SandboxEntry> {
        Arc::new(SandboxEntry {
            id: id.to_string(),
            policy: watch::Sender::new(Arc::new(Policy::default())),
            conns: Arc::new(Semaphore::new(max_conns)),
            max_conns,
            listener: Mutex::new(CancellationToken::new()),
            ca: Mutex::new(None),
        })
    }

    pub(crate) fn policy(&self) -> Arc<Policy> {
        self.policy.borrow().clone()
    }

    pub(crate) fn update(&self, change: impl FnOnce(&Policy) -> Policy) {
        self.policy.send_modify(|p| *p = Arc::new(change(p)));
    }

    /// A token for a new listener; the previous one (with its connections) is cancelled.
    pub(crate) fn replace_listener(&self) -> CancellationToken {
        let fresh = CancellationToken::new();
        let old = std::mem::replace(&mut *self.lock_listener(), fresh.clone());
        old.cancel();
        fresh
    }

    pub(crate) fn close(&self) {
        self.lock_listener().cancel();
    }

    pub(crate) fn ca(&self) -> Result<Arc<SandboxCa>, crate::EgressError> {
        let mut ca = self.ca.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(ca) = ca.as_ref() {
            return Ok(ca.clone());
        }
        let fresh = Arc::new(SandboxCa::generate(&self.id)?);
        *ca = Some(fresh.clone());
        Ok(fresh)
    }

    pub(crate) fn open_connections(&self) -> usize {
        self.max_conns - self.conns.available_permits()
    }

    fn lock_listener(&self) -> std::sync::MutexGuard<'_, CancellationToken> {
        self.listener
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Accepts the sandbox's connections until `token` is cancelled (detach, or a new listener).
pub(crate) async fn accept_loop(
    inner: Arc<Inner>,
    entry: Arc<SandboxEntry>,
    listener: TcpListener,
    token: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            () = token.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(err) => {
                // Out of fds or memory: back off instead of spinning; the listener stays.
                tracing::warn!(sandbox = %entry.id, error = %err, "egress proxy accept failed");
                tokio::select! {
                    () = token.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_millis(100)) => continue,
                }
            }
        };
        let _ = stream.set_nodelay(true);
        match entry.conns.clone().try_acquire_owned() {
            Ok(permit) => {
                let conn = Conn {
                    inner: inner.clone(),
                    entry: entry.clone(),
                    token: token.child_token(),
                    _permit: Arc::new(permit),
                    requests: Arc::new(AtomicU64::new(0)),
                };
                tokio::spawn(conn.serve(stream));
            }
            Err(_) => {
                tokio::spawn(over_limit(inner.clone(), entry.id.clone(), stream));
            }
        }
    }
}

/// Answers a connection past the sandbox's limit with 429 and closes it.
async fn over_limit(inner: Arc<Inner>, sandbox_id: String, mut stream: TcpStream) {
    let why = format!(
        "at most {} open connections to the egress proxy per sandbox",
        inner.cfg.max_connections
    );
    let body = format!("egress refused: {why}\n");
    let resp = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: text/plain; charset=utf-8\r\n\
         proxy-status: sandlot; error=proxy_internal_error\r\nconnection: close\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    let started = SystemTime::now();
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(resp.as_bytes()).await;
        let _ = stream.shutdown().await;
        // Read what the client sent, so closing does not reset the connection under the answer.
        let mut sink = [0u8; 4096];
        while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
    inner.hooks.record(EgressEvent {
        sandbox_id,
        host: String::new(),
        port: 0,
        ip: None,
        method: String::new(),
        allowed: false,
        reason: why,
        status: 429,
        decision_id: None,
        bytes_up: 0,
        bytes_down: 0,
        started,
        ended: SystemTime::now(),
    });
}

/// One connection from the sandbox to the proxy. Clones share the connection's permit (held
/// until its last tunnel or request ends) and token.
#[derive(Clone)]
struct Conn {
    inner: Arc<Inner>,
    entry: Arc<SandboxEntry>,
    token: CancellationToken,
    _permit: Arc<OwnedSemaphorePermit>,
    /// Requests handled on this connection (a head timeout before the first is slowloris,
    /// after it an idle keep-alive).
    requests: Arc<AtomicU64>,
}

impl Conn {
    /// Serves HTTP/1.1 on the connection until the client closes, the head timeout fires, the
    /// sandbox is cut, or the listener goes.
    async fn serve(self, stream: TcpStream) {
        let cfg = &self.inner.cfg;
        let me = self.clone();
        let svc = hyper::service::service_fn(move |req| {
            let me = me.clone();
            async move { Ok::<_, Infallible>(me.handle(req).await) }
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(cfg.head_timeout)
            .max_header_size(cfg.max_head_bytes)
            .max_buf_size(cfg.max_head_bytes.max(8192).max(cfg.body_scan_bytes));
        let served = builder
            .serve_connection(TokioIo::new(stream), svc)
            .with_upgrades();
        let mut policy = self.entry.policy.subscribe();
        policy.borrow_and_update();
        let started = SystemTime::now();
        tokio::select! {
            res = served => {
                if let Err(err) = res {
                    self.record_head_error(&err, started);
                }
            }
            () = self.token.cancelled() => {}
            () = became_cut(&mut policy) => {}
        }
    }

    /// Records a connection whose request head was refused before a request existed (too
    /// large, malformed, or not sent in time), which hyper answered itself.
    fn record_head_error(&self, err: &hyper::Error, started: SystemTime) {
        let cfg = &self.inner.cfg;
        let (status, reason) = if err.is_parse_too_large() {
            (
                431,
                format!("request head over {} bytes", cfg.max_head_bytes),
            )
        } else if err.is_parse() {
            (400, format!("malformed request head: {err}"))
        } else if err.is_timeout() && self.requests.load(Ordering::Relaxed) == 0 {
            (
                0,
                format!(
                    "no complete request head within {} s (connection closed)",
                    cfg.head_timeout.as_secs_f64()
                ),
            )
        } else {
            tracing::debug!(sandbox = %self.entry.id, error = %err, "egress connection ended");
            return;
        };
        self.inner.hooks.record(EgressEvent {
            sandbox_id: self.entry.id.clone(),
            host: String::new(),
            port: 0,
            ip: None,
            method: String::new(),
            allowed: false,
            reason,
            status,
            decision_id: None,
            bytes_up: 0,
            bytes_down: 0,
            started,
            ended: SystemTime::now(),
        });
    }

    /// Decides one request and answers it: a refusal, a tunnel's 200, or the upstream's answer.
    async fn handle(&self, mut req: Request<Incoming>) -> Response<ProxyBody> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let on_upgrade = (req.method() == Method::CONNECT).then(|| hyper::upgrade::on(&mut req));
        let (parts, body) = req.into_parts();
        let mut attempt = Attempt {
            host: String::new(),
            shown: String::new(),
            port: 0,
            ip: None,
            method: parts.method.to_string(),
            decision_id: None,
            started: SystemTime::now(),
        };
        match self.decide(&parts, body, &mut attempt).await {
            Err(refusal) => self.refuse(&attempt, refusal),
            Ok((target, ip, upstream, body, policy)) => match on_upgrade {
                Some(on_upgrade) => self.open_tunnel(attempt, target, ip, upstream, on_upgrade),
                None => {
                    self.forward(attempt, parts, target, ip, upstream, body, &policy, false)
                        .await
                }
            },
        }
    }

    /// Steps 1-6 of the crate docs: everything up to a connection to a checked address.
    async fn decide(
        &self,
        parts: &Parts,
        body: Incoming,
        attempt: &mut Attempt,
    ) -> Result<(Target, IpAddr, TcpStream, PrefixedBody, Arc<Policy>), Refusal> {
        let cfg = &self.inner.cfg;
        let policy = self.entry.policy();
        let target = Target::of(parts)?;
        attempt.host = target.host_str();
        attempt.port = target.port;
        attempt.shown = format!("{}:{}", target.host, target.port);
        refuse_cut_or_echo(parts, &policy)?;
        self.refuse_canary(&head_text(parts), "head", parts, &policy, attempt)?;
        policy
            .rules
            .check_host(&target.host, target.port, parts.method == Method::CONNECT)
            .map_err(Refusal::denied)?;
        let body = if parts.method != Method::CONNECT {
            target.check_host_header(&parts.headers, 80)?;
            self.scan_body(body, parts, &policy, attempt).await?
        } else {
            PrefixedBody {
                prefix: VecDeque::new(),
                rest: body,
            }
        };
        // An internal service the list names: exactly the operator's address and port, never
        // resolved, never any other port (its address is private or loopback: the ranges are
        // not checked for it, and nothing else reaches them through this entry).
        if let Host::Domain(name) = &target.host {
            if policy.rules.names_service(name) {
                let addr = *cfg.services.get(name).ok_or_else(|| {
                    Refusal::denied(format!("{name} is not an internal service of this server"))
                })?;
                attempt.ip = Some(addr.ip());
                if target.port != addr.port() {
                    return Err(Refusal::denied(format!(
                        "internal service {name} is reachable on port {} only",
                        addr.port()
                    )));
                }
                self.gate(attempt, addr.port(), addr.ip(), parts.method.as_str())?;
                let stream = connect(addr.ip(), addr.port(), cfg.connect_timeout).await?;
                return Ok((target, addr.ip(), stream, body, policy));
            }
        }
        let addrs = self
            .resolve(&target)
            .await
            .map_err(|why| Refusal::new(StatusCode::BAD_GATEWAY, "destination_not_found", why))?;
        for &ip in &addrs {
            if let Err(why) = policy.rules.check_addr(ip) {
                attempt.ip = Some(ip);
                return Err(Refusal::new(
                    StatusCode::FORBIDDEN,
                    "destination_ip_prohibited",
                    format!("{} resolves to {why}", attempt.host),
                ));
            }
        }
        let mut failure = None;
        for ip in addrs {
            attempt.ip = Some(ip);
            self.gate(attempt, target.port, ip, parts.method.as_str())?;
            match connect(ip, target.port, cfg.connect_timeout).await {
                Ok(stream) => return Ok((target, ip, stream, body, policy)),
                Err(refusal) => failure = Some(refusal),
            }
        }
        Err(failure.unwrap_or_else(|| Refusal::denied("no address to connect to")))
    }

    /// The answer to a refused request, recorded.
    fn refuse(&self, attempt: &Attempt, refusal: Refusal) -> Response<ProxyBody> {
        let text = if attempt.shown.is_empty() {
            format!("egress request refused: {}\n", refusal.reason)
        } else {
            format!("egress to {} refused: {}\n", attempt.shown, refusal.reason)
        };
        self.inner.hooks.record(attempt.event(
            &self.entry.id,
            refusal.allowed,
            refusal.status.as_u16(),
            refusal.reason,
        ));
        let mut resp = Response::new(full(text));
        *resp.status_mut() = refusal.status;
        let headers = resp.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        if let Ok(v) = HeaderValue::from_str(&format!("sandlot; error={}", refusal.proxy_error)) {
            headers.insert(HeaderName::from_static("proxy-status"), v);
        }
        if let Some(Ok(v)) = attempt.decision_id.as_deref().map(HeaderValue::from_str) {
            headers.insert(HeaderName::from_static("sandlot-decision-id"), v);
        }
        resp
    }

    /// The host's addresses: the configured map first, then getaddrinfo (bounded by the
    /// connect timeout).
    async fn resolve(&self, target: &Target) -> Result<Vec<IpAddr>, String> {
        let name = match &target.host {
            Host::Ip(ip) => return Ok(vec![canonical(*ip)]),
            Host::Domain(name) => name,
        };
        if let Some(addrs) = self.inner.cfg.hosts.get(name) {
            return Ok(addrs.iter().copied().map(canonical).collect());
        }
        let limit = self.inner.cfg.connect_timeout;
        let found = tokio::time::timeout(limit, tokio::net::lookup_host((name.as_str(), 0)))
            .await
            .map_err(|_| format!("resolving {name} took over {} s", limit.as_secs_f64()))?
            .map_err(|e| format!("{name} could not be resolved: {e}"))?;
        let mut addrs: Vec<IpAddr> = Vec::new();
        for addr in found {
            let ip = canonical(addr.ip());
            if !addrs.contains(&ip) {
                addrs.push(ip);
            }
        }
        if addrs.is_empty() {
            return Err(format!("{name} resolves to no address"));
        }
        Ok(addrs)
    }

    /// Answers a CONNECT with 200 and relays the tunnel on a task of its own.
    fn open_tunnel(
        &self,
        attempt: Attempt,
        target: Target,
        ip: IpAddr,
        upstream: TcpStream,
        on_upgrade: hyper::upgrade::OnUpgrade,
    ) -> Response<ProxyBody> {
        let traffic = Traffic::new();
        let recorder = Recorder::new(
            self.inner.hooks.clone(),
            attempt.event(&self.entry.id, true, 200, String::new()),
            traffic.clone(),
        );
        let upstream = Counted::new(upstream, traffic);
        tokio::spawn(
            self.clone()
                .tunnel(on_upgrade, target, ip, upstream, recorder),
        );
        Response::new(full(String::new()))
    }

    async fn tunnel(
        self,
        on_upgrade: hyper::upgrade::OnUpgrade,
        target: Target,
        ip: IpAddr,
        upstream: Counted<TcpStream>,
        recorder: Recorder,
    ) {
        let cfg = &self.inner.cfg;
        let client = match tokio::time::timeout(cfg.head_timeout, on_upgrade).await {
            Ok(Ok(upgraded)) => TokioIo::new(upgraded),
            _ => {
                recorder.note_reason("the client left before the tunnel opened".into());
                return;
            }
        };
        if let Host::Domain(name) = &target.host {
            if has_secret(&self.entry.policy(), name) {
                return self.intercept(client, target, ip, upstream, recorder).await;
            }
        }
        let (mut client_r, mut client_w) = tokio::io::split(client);
        let (mut up_r, mut up_w) = tokio::io::split(upstream);
        let mut policy = self.entry.policy.subscribe();
        policy.borrow_and_update();
        // Nothing of the upstream's reaches the sandbox before its ClientHello is checked: a
        // protocol where the server speaks first is not TLS, and gets no say.
        // An internal service's protocol is its own (a database's, not TLS): its tunnel is
        // plain TCP both ways from the start, to the operator's one address and port.
        let service = matches!(&target.host, Host::Domain(name) if self.entry.policy().rules.names_service(name));
        let (hello_checked, checked) = tokio::sync::oneshot::channel::<()>();
        let mut hello_checked = Some(hello_checked);
        if service {
            if let Some(h) = hello_checked.take() {
                let _ = h.send(());
            }
        }
        let outcome = {
            let up = async {
                // The sender moves into this future: when the first bytes fail the check, it
                // is dropped with the future and the way down closes without a word.
                let mut hello_checked = hello_checked;
                let first = if service {
                    Vec::new()
                } else {
                    first_bytes(&mut client_r, &target.host, cfg.head_timeout).await?
                };
                if !first.is_empty() {
                    if let Some(h) = hello_checked.take() {
                        let _ = h.send(());
                    }
                }
                if up_w.write_all(&first).await.is_ok() {
                    let _ = tokio::io::copy(&mut client_r, &mut up_w).await;
                }
                let _ = up_w.shutdown().await;
                Ok::<(), String>(())
            };
            let down = async {
                if checked.await.is_ok() {
                    let _ = tokio::io::copy(&mut up_r, &mut client_w).await;
                }
                let _ = client_w.shutdown().await;
            };
            let relay = async {
                tokio::pin!(up, down);
                let (mut up_done, mut down_done) = (false, false);
                while !(up_done && down_done) {
                    tokio::select! {
                        res = &mut up, if !up_done => { res?; up_done = true; }
                        () = &mut down, if !down_done => down_done = true,
                    }
                }
                Ok::<(), String>(())
            };
            tokio::select! {
                res = relay => res.map(|()| String::new()),
                () = self.token.cancelled() => Ok(closed_detached()),
                why = revoked(&mut policy, &target.host, target.port, true, ip) => Ok(format!("closed: {why}")),
                () = recorder.traffic.idle(cfg.idle_timeout) => Ok(closed_idle(cfg)),
            }
        };
        match outcome {
            Ok(reason) => recorder.note_reason(reason),
            Err(refusal) => {
                recorder.note(|e| {
                    e.allowed = false;
                    e.reason = refusal;
                });
                let _ = client_w.write_all(&TLS_ALERT_ACCESS_DENIED).await;
                let _ = client_w.shutdown().await;
            }
        }
    }

    /// Cedar's `egress` gate for a request to `ip`; the decision is noted in `attempt`.
    fn gate(
        &self,
        attempt: &mut Attempt,
        port: u16,
        ip: IpAddr,
        method: &str,
    ) -> Result<(), Refusal> {
        let decision = self
            .inner
            .hooks
            .gate(&self.entry.id, &attempt.host, port, ip, method);
        attempt.decision_id = Some(decision.decision_id.clone());
        if decision.allowed {
            Ok(())
        } else {
            Err(Refusal::denied(format!(
                "denied by policy: {}",
                decision.reason
            )))
        }
    }

    /// Sends a request upstream in origin form and answers with the response: a plain-HTTP
    /// one, or (`tunnelled`) one from inside an intercepted tunnel over TLS.
    #[allow(clippy::too_many_arguments)]
    async fn forward<S>(
        &self,
        attempt: Attempt,
        parts: Parts,
        target: Target,
        ip: IpAddr,
        upstream: S,
        body: PrefixedBody,
        policy: &Policy,
        tunnelled: bool,
    ) -> Response<ProxyBody>
    where
        S: AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let cfg = &self.inner.cfg;
        let traffic = Traffic::new();
        let recorder = Arc::new(Recorder::new(
            self.inner.hooks.clone(),
            attempt.event(&self.entry.id, true, 0, String::new()),
            traffic.clone(),
        ));
        let io = TokioIo::new(Counted::new(upstream, traffic.clone()));
        let (mut sender, conn) = match hyper::client::conn::http1::Builder::new()
            .handshake::<_, PrefixedBody>(io)
            .await
        {
            Ok(pair) => pair,
            Err(err) => return self.upstream_failed(&attempt, &recorder, err.to_string()),
        };
        let driver = self.clone();
        let driver_recorder = recorder.clone();
        let (host, port) = (target.host.clone(), target.port);
        let idle = cfg.idle_timeout;
        tokio::spawn(async move {
            let mut policy = driver.entry.policy.subscribe();
            policy.borrow_and_update();
            let ended = tokio::select! {
                res = conn => res.err().map(|e| format!("the upstream connection failed: {e}")),
                () = driver.token.cancelled() => Some(closed_detached()),
                why = revoked(&mut policy, &host, port, tunnelled, ip) => Some(format!("closed: {why}")),
                () = traffic.idle(idle) => Some(closed_idle(&driver.inner.cfg)),
            };
            if let Some(reason) = ended {
                driver_recorder.note_reason(reason);
            }
        });
        let out = outgoing(parts, &target, policy, body);
        let resp = match tokio::time::timeout(idle, sender.send_request(out)).await {
            Ok(Ok(resp)) => resp,
            Ok(Err(err)) => {
                return self.upstream_failed(
                    &attempt,
                    &recorder,
                    format!("the upstream did not answer: {err}"),
                )
            }
            Err(_) => {
                return self.upstream_failed(
                    &attempt,
                    &recorder,
                    format!("the upstream sent no answer within {} s", idle.as_secs()),
                )
            }
        };
        recorder.note(|e| e.status = resp.status().as_u16());
        let (mut parts, body) = resp.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        Response::from_parts(parts, body.boxed())
    }

    /// A 502 for an allowed request the upstream failed; recorded by `recorder` (with bytes).
    fn upstream_failed(
        &self,
        attempt: &Attempt,
        recorder: &Recorder,
        reason: String,
    ) -> Response<ProxyBody> {
        recorder.note(|e| {
            e.status = 502;
            e.reason = reason.clone();
        });
        let mut resp = Response::new(full(format!(
            "egress to {} failed: {reason}\n",
            attempt.shown
        )));
        *resp.status_mut() = StatusCode::BAD_GATEWAY;
        resp.headers_mut().insert(
            HeaderName::from_static("proxy-status"),
            HeaderValue::from_static("sandlot; error=http_response_incomplete"),
        );
        resp
    }
}

fn closed_detached() -> String {
    "closed: the sandbox's proxy was detached or restarted".into()
}

fn closed_idle(cfg: &EgressConfig) -> String {
    format!(
        "closed: no traffic for {} s",
        cfg.idle_timeout.as_secs_f64()
    )
}

fn full(text: String) -> ProxyBody {
    Full::new(Bytes::from(text))
        .map_err(|never| match never {})
        .boxed()
}

/// The request head as text, for the canary scan.
/// The first checks of every request, plain or inside an intercepted tunnel: egress not cut,
/// and not a method that echoes the request back.
fn refuse_cut_or_echo(parts: &Parts, policy: &Policy) -> Result<(), Refusal> {
    if policy.cut {
        return Err(Refusal::denied(
            "egress from this sandbox is cut (containment)",
        ));
    }
    let method = parts.method.as_str();
    if method.eq_ignore_ascii_case("TRACE") || method.eq_ignore_ascii_case("TRACK") {
        // They echo the request back, with any secret the proxy set on it.
        return Err(Refusal::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "http_request_denied",
            format!("the {method} method is not proxied (it echoes the request, secrets and all)"),
        ));
    }
    Ok(())
}

fn head_text(parts: &Parts) -> Vec<u8> {
    let mut text = Vec::with_capacity(1024);
    text.extend_from_slice(parts.method.as_str().as_bytes());
    text.push(b' ');
    text.extend_from_slice(parts.uri.to_string().as_bytes());
    text.extend_from_slice(b"\r\n");
    for (name, value) in &parts.headers {
        text.extend_from_slice(name.as_str().as_bytes());
        text.extend_from_slice(b": ");
        text.extend_from_slice(value.as_bytes());
        text.extend_from_slice(b"\r\n");
    }
    text
}

/// Resolves when the sandbox is cut (changes seen before the call do not count).
async fn became_cut(policy: &mut watch::Receiver<Arc<Policy>>) {
    loop {
        if policy.changed().await.is_err() {
            return std::future::pending().await;
        }
        if policy.borrow_and_update().cut {
            return;
        }
    }
}

/// Resolves, with why, when a change of the sandbox's policy refuses `host:port` at `ip`.
async fn revoked(
    policy: &mut watch::Receiver<Arc<Policy>>,
    host: &Host,
    port: u16,
    connect: bool,
    ip: IpAddr,
) -> String {
    loop {
        if policy.changed().await.is_err() {
            return std::future::pending().await;
        }
        let now = policy.borrow_and_update().clone();
        if now.cut {
            return "egress from this sandbox was cut (containment)".into();
        }
        let still = match host {
            // An internal service still listed keeps its tunnel (its address is the
            // operator's, in a range no list opens).
            Host::Domain(name) if now.rules.names_service(name) => Ok(()),
            _ => now
                .rules
                .check_host(host, port, connect)
                .and_then(|()| now.rules.check_addr(ip)),
        };
        if let Err(why) = still {
            return format!("the allowlist changed: {why}");
        }
    }
}

/// Connects to the checked address `ip` (no name: nothing is resolved again).
async fn connect(ip: IpAddr, port: u16, limit: Duration) -> Result<TcpStream, Refusal> {
    let addr = SocketAddr::new(ip, port);
    let failed = |status, proxy_error, reason: String| Refusal {
        status,
        proxy_error,
        reason,
        allowed: true,
    };
    match tokio::time::timeout(limit, TcpStream::connect(addr)).await {
        Ok(Ok(stream)) => {
            let _ = stream.set_nodelay(true);
            Ok(stream)
        }
        Ok(Err(err)) => Err(failed(
            StatusCode::BAD_GATEWAY,
            "connection_refused",
            format!("could not connect to {addr}: {err}"),
        )),
        Err(_) => Err(failed(
            StatusCode::GATEWAY_TIMEOUT,
            "connection_timeout",
            format!("connecting to {addr} took over {} s", limit.as_secs_f64()),
        )),
    }
}

/// The first bytes the client sends into a tunnel, which must be a whole TLS ClientHello
/// (within `limit` of its first byte) whose server name (SNI) is `host`: a tunnel carries TLS
/// to the host it was opened for, nothing else. A domain host needs an SNI equal to it (after
/// the normalization rules get: case, one trailing dot); an IP host needs a hello without SNI
/// (TLS clients send none for an IP, RFC 6066 §3), so a name cannot ride an IP rule. A client
/// that closes before sending anything gets nothing (empty bytes: the upstream's side is not
/// relayed either). `Err` is a refusal.
async fn first_bytes<R: AsyncRead + Unpin>(
    client: &mut R,
    host: &Host,
    limit: Duration,
) -> Result<Vec<u8>, String> {
    let mut buf = Vec::with_capacity(2048);
    let mut chunk = vec![0u8; 8192];
    // The first byte may take as long as the client likes; the tunnel's idle timeout bounds it.
    let n = client.read(&mut chunk).await.unwrap_or(0);
    if n == 0 {
        return Ok(buf);
    }
    buf.extend_from_slice(&chunk[..n]);
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match parse_client_hello(&buf) {
            Hello::NotTls => {
                return Err(
                    "the tunnel did not begin with a TLS ClientHello (tunnels carry TLS only)"
                        .into(),
                )
            }
            Hello::Complete { sni } => return sni_matches(sni.as_deref(), host).map(|()| buf),
            Hello::Malformed(why) => {
                return Err(format!(
                    "the tunnel began with a malformed TLS ClientHello ({why})"
                ))
            }
            Hello::Incomplete => {}
        }
        if buf.len() > MAX_HELLO_BYTES + 5 * 8 {
            return Err("the TLS ClientHello is larger than the proxy accepts".into());
        }
        match tokio::time::timeout_at(deadline, client.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            Ok(_) => {
                return Err("the client closed the tunnel in the middle of its ClientHello".into())
            }
            Err(_) => {
                return Err(format!(
                    "the TLS ClientHello did not arrive whole within {} s",
                    limit.as_secs_f64()
                ))
            }
        }
    }
}

/// Whether a ClientHello's server name `sni` fits the CONNECT host; see [`first_bytes`].
fn sni_matches(sni: Option<&str>, host: &Host) -> Result<(), String> {
    match (sni, host) {
        (Some(name), Host::Domain(d)) => match normalize_domain(name) {
            Ok(name) if name == *d => Ok(()),
            _ => Err(format!(
                "the TLS server name (SNI) {name:?} does not match the CONNECT host {host}"
            )),
        },
        (None, Host::Domain(_)) => Err(format!(
            "the TLS ClientHello names no server (SNI); a tunnel to {host} must name it"
        )),
        (None, Host::Ip(_)) => Ok(()),
        (Some(name), Host::Ip(_)) => Err(format!(
            "the TLS server name (SNI) {name:?} does not match the CONNECT host {host}, an IP \
             address (a tunnel to a name is CONNECTed by that name)"
        )),
    }
}

/// Whether one of the sandbox's secrets is for `host` (its tunnels are intercepted).
fn has_secret(policy: &Policy, host: &str) -> bool {
    policy
        .secrets
        .iter()
        .any(|s| s.hosts.iter().any(|p| p.matches(host)))
}
