//! Signed webhooks for lifecycle events: `POST /v1/webhooks` (a URL and which kinds),
//! `GET /v1/webhooks`, `DELETE /v1/webhooks/{id}`, each a tenant's own.
//!
//! # Delivery
//!
//! One task reads the runtime's broadcast ([`sandlot_runtime::Runtime::subscribe`]) and puts
//! each event in the queue of every webhook of its tenant that wants its kind; it never waits
//! on a webhook, and the runtime never waits on it, so an endpoint that hangs or fails cannot
//! slow an execution. Each webhook's queue is bounded (`SANDLOT_WEBHOOK_QUEUE`, default 1000):
//! when full, the oldest event is dropped and counted (`dropped` in the listing). Each webhook
//! has its own delivery task, so one slow endpoint does not hold up another's. A delivery is
//! a `POST` of `{"delivery_id", "webhook_id", "event"}` with
//!
//! - `Sandlot-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`
//!   (the receiver recomputes it over the raw body and refuses an old `t` against replays);
//! - `Sandlot-Delivery: dlv_<hex>` (the same on every attempt: receivers dedupe on it) and
//!   `Sandlot-Event: <kind>`.
//!
//! A `2xx` is delivered. A timeout (`SANDLOT_WEBHOOK_TIMEOUT_MS`, default 5000 per attempt),
//! a connection error, `408`, `429` or a `5xx` is retried, at most
//! `SANDLOT_WEBHOOK_MAX_ATTEMPTS` (default 6) attempts, waiting `SANDLOT_WEBHOOK_BACKOFF_MS`
//! (default 1000) doubled after each one, capped at a minute, with full jitter (so a
//! recovering endpoint is not hit by every sender at once); any other status is final.
//! Deliveries are kept in memory only: those queued when the server stops are lost (the event
//! stream's `seq` and the audit log keep what happened).
//!
//! # Outbound requests to a URL a tenant chose (SSRF)
//!
//! Only `http` and `https` URLs, without credentials, are accepted. Addresses are checked by
//! the egress proxy's classifier ([`sandlot_egress::classify`]), the same for both. The server
//! refuses to connect to link-local addresses (169.254.0.0/16 — cloud metadata services —,
//! fe80::/10, fd00:ec2::254), unspecified, multicast, broadcast, reserved and documentation
//! ones, and the IPv6 spellings of an IPv4 address that a network may translate anywhere
//! (IPv4-compatible `::a.b.c.d`, NAT64 `64:ff9b::/96` and `64:ff9b:1::/48`, 6to4, Teredo),
//! always; to loopback, private (RFC 1918, unique-local, site-local, CGNAT, benchmarking)
//! addresses and the host's own addresses (read from its interfaces) unless the operator sets
//! `SANDLOT_WEBHOOK_ALLOW_PRIVATE=1`. An IPv4-mapped address (`::ffff:a.b.c.d`) is the IPv4
//! address it carries. The check is made when the webhook is created (for an
//! answer that says why) and again on the addresses every delivery actually connects to (a
//! resolver that filters them), so a name that later resolves elsewhere (DNS rebinding) is
//! refused too. Redirects are not followed and no proxy from the environment is used.
//!
//! # Secrets
//!
//! A webhook's secret is shown once, when it is created. It is not stored: it is derived from
//! the webhook's id with a key of the server's (`<data-dir>/webhooks.key`, 32 random bytes,
//! mode 0600), HMAC-SHA256("sandlot-webhook:" + id). A copy of the store (a backup, a
//! bundle) therefore carries no secret; whoever can read the data dir's key could sign as the
//! server, as whoever can read the server's memory could. Replacing the key changes every
//! secret (webhooks are then recreated).

use super::{RecordContext, RecordError, Recording};
use axum::extract::{FromRef, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use axum::{Json, Router};
use hmac::Mac;
use sandlot_http::ApiConfig;
use sandlot_http::Caller;
use sandlot_http::HttpError;
use sandlot_http::{ApiJson, ApiPath};
use sandlot_runtime::{now_rfc3339, Runtime};
use sandlot_store::Store;
use sandlot_tenancy::Share;
use sandlot_types::{ErrorCode, LifecycleEvent, LifecycleKind};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::Notify;

/// The file of the key secrets are derived from, in the data dir.
pub const KEY_FILE: &str = "webhooks.key";
/// Most webhooks one tenant may have.
const MAX_PER_TENANT: usize = 20;
/// Longest URL accepted.
const MAX_URL_BYTES: usize = 2048;
/// Longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How long `shutdown` lets queued deliveries go out.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// How long creating a webhook waits for its host name to resolve.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(3);

/// Delivery settings, from the environment.
#[derive(Debug, Clone)]
struct Settings {
    timeout: Duration,
    max_attempts: u32,
    backoff: Duration,
    queue: usize,
    allow_private: bool,
}

impl Settings {
    fn from_env() -> Self {
        let num = |name: &str, default: u64| -> u64 {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .filter(|n| *n > 0)
                .unwrap_or(default)
        };
        Self {
            timeout: Duration::from_millis(num("SANDLOT_WEBHOOK_TIMEOUT_MS", 5000)),
            max_attempts: num("SANDLOT_WEBHOOK_MAX_ATTEMPTS", 6).min(20) as u32,
            backoff: Duration::from_millis(num("SANDLOT_WEBHOOK_BACKOFF_MS", 1000)),
            queue: num("SANDLOT_WEBHOOK_QUEUE", 1000) as usize,
            allow_private: std::env::var("SANDLOT_WEBHOOK_ALLOW_PRIVATE").as_deref() == Ok("1"),
        }
    }
}

/// The webhooks component.
pub struct Webhooks {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<Store>,
    key: [u8; 32],
    client: reqwest::Client,
    settings: Settings,
    hooks: Mutex<HashMap<String, Arc<Hook>>>,
    stopping: AtomicBool,
    /// Events the dispatcher missed because it fell behind the runtime.
    missed: AtomicU64,
}

/// One webhook, live.
struct Hook {
    id: String,
    tenant: String,
    url: String,
    kinds: Vec<LifecycleKind>,
    created_at: String,
    queue: Mutex<VecDeque<Pending>>,
    wake: Notify,
    deleted: AtomicBool,
    stats: Mutex<Stats>,
}

struct Pending {
    delivery_id: String,
    event: LifecycleEvent,
}

/// What a webhook's deliveries came to, since the server started.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Stats {
    pub delivered: u64,
    /// Events given up on (attempts exhausted, or a final status).
    pub failed: u64,
    /// Events dropped from a full queue.
    pub dropped: u64,
    pub attempts: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_attempt_at: Option<String>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Reads the data dir's key, creating it (0600) the first time.
fn load_key(data_dir: &Path) -> Result<[u8; 32], RecordError> {
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let path = data_dir.join(KEY_FILE);
    let io = |what: &str| {
        let what = format!("{what} {}", path.display());
        move |source| RecordError::Io { what, source }
    };
    let mut key = [0u8; 32];
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
    {
        Ok(mut f) => {
            getrandom::fill(&mut key).expect("the kernel's random source works");
            f.write_all(&key).map_err(io("cannot write"))?;
            f.sync_all().map_err(io("cannot sync"))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let mut f = std::fs::File::open(&path).map_err(io("cannot open"))?;
            f.read_exact(&mut key)
                .map_err(io("cannot read 32 bytes from"))?;
        }
        Err(e) => return Err(io("cannot create")(e)),
    }
    Ok(key)
}

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

fn hmac_hex(key: &[u8], parts: &[&[u8]]) -> String {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    for p in parts {
        mac.update(p);
    }
    hex::encode(mac.finalize().into_bytes())
}

/// The secret of webhook `id` under the server's `key`.
fn secret_of(key: &[u8; 32], id: &str) -> String {
    format!(
        "whsec_{}",
        hmac_hex(key, &[b"sandlot-webhook:", id.as_bytes()])
    )
}

/// The `Sandlot-Signature` value of `body` sent at unix time `t` with `secret`.
pub fn signature(secret: &str, t: u64, body: &[u8]) -> String {
    let v1 = hmac_hex(secret.as_bytes(), &[t.to_string().as_bytes(), b".", body]);
    format!("t={t},v1={v1}")
}

// ---------------------------------------------------------------------------------------------
// Which addresses may be called.

/// Why the server will not connect to `ip`, if it will not: the egress proxy's classifier
/// ([`sandlot_egress::classify`]), whose loopback, private and host's own addresses the
/// operator may open with `SANDLOT_WEBHOOK_ALLOW_PRIVATE=1`; the rest (link-local and metadata,
/// multicast, documentation, the IPv6 transition spellings...) never.
pub fn refusal(ip: IpAddr, allow_private: bool) -> Option<String> {
    let why = sandlot_egress::classify(ip)?;
    match (why.private(), allow_private) {
        (true, true) => None,
        (true, false) => Some(format!(
            "{why} (the operator may allow loopback and private addresses with \
             SANDLOT_WEBHOOK_ALLOW_PRIVATE=1)"
        )),
        (false, _) => Some(why.to_string()),
    }
}

/// A resolver that gives the HTTP client only the addresses it may connect to, so the check
/// holds for the address actually used, whatever the name resolved to when it was created.
struct GuardedResolver {
    allow_private: bool,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = addrs
                .iter()
                .copied()
                .filter(|a| refusal(a.ip(), allow_private).is_none())
                .collect();
            if allowed.is_empty() {
                let why = addrs
                    .first()
                    .and_then(|a| refusal(a.ip(), allow_private))
                    .unwrap_or_else(|| "no address".into());
                return Err(format!("{host} resolves to {why}; refused").into());
            }
            let addrs: reqwest::dns::Addrs = Box::new(allowed.into_iter());
            Ok(addrs)
        })
    }
}

/// The address a URL names literally (`http://10.0.0.1/`, `http://[::1]/`), if it does.
fn literal_ip(url: &reqwest::Url) -> Option<IpAddr> {
    let host = url.host_str()?;
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

/// Checks a webhook URL: `http(s)`, a host, no credentials, and (for an IP, or the addresses
/// a name resolves to now) an address the server may call. The URL as it will be called.
pub async fn check_url(raw: &str, allow_private: bool) -> Result<reqwest::Url, HttpError> {
    let bad = |why: String| HttpError::new(ErrorCode::InvalidArgument, why);
    if raw.len() > MAX_URL_BYTES {
        return Err(bad(format!("url is longer than {MAX_URL_BYTES} bytes")));
    }
    let url = reqwest::Url::parse(raw).map_err(|e| bad(format!("url is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad(format!(
            "url must be http or https, not {:?}",
            url.scheme().chars().take(16).collect::<String>()
        )));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad(
            "url must not carry credentials (user:password@); put a token in its path or \
             query, and verify the signature"
                .into(),
        ));
    }
    let refused = |what: &str, why: &str| bad(format!("url host {what} is {why}; refused"));
    let Some(host) = url.host_str() else {
        return Err(bad("url has no host".into()));
    };
    if let Some(ip) = literal_ip(&url) {
        if let Some(why) = refusal(ip, allow_private) {
            return Err(refused(&ip.to_string(), &why));
        }
    } else {
        // A name that does not resolve now may later (deliveries check again); one that
        // resolves only to refused addresses is refused now, saying why.
        let port = url.port_or_known_default().unwrap_or(80);
        let lookup = tokio::net::lookup_host((host, port));
        if let Ok(Ok(addrs)) = tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await {
            let addrs: Vec<SocketAddr> = addrs.collect();
            let why: Vec<String> = addrs
                .iter()
                .filter_map(|a| refusal(a.ip(), allow_private))
                .collect();
            if !addrs.is_empty() && why.len() == addrs.len() {
                return Err(refused(host, &why[0]));
            }
        }
    }
    Ok(url)
}

// ---------------------------------------------------------------------------------------------
// The component.

fn hook_from(v: &Value) -> Option<Hook> {
    let kinds = v["events"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|k| k.as_str().and_then(super::events::kind_named))
                .collect()
        })
        .unwrap_or_default();
    Some(Hook {
        id: v["id"].as_str()?.to_owned(),
        tenant: v["tenant"].as_str()?.to_owned(),
        url: v["url"].as_str()?.to_owned(),
        kinds,
        created_at: v["created_at"].as_str().unwrap_or_default().to_owned(),
        queue: Mutex::default(),
        wake: Notify::new(),
        deleted: AtomicBool::new(false),
        stats: Mutex::default(),
    })
}

impl Webhooks {
    pub async fn start(ctx: &RecordContext) -> Result<Self, RecordError> {
        let settings = Settings::from_env();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout)
            .user_agent(concat!("sandlot/", env!("CARGO_PKG_VERSION"), " (webhook)"))
            .dns_resolver(Arc::new(GuardedResolver {
                allow_private: settings.allow_private,
            }))
            .build()
            .map_err(|e| RecordError::Telemetry(format!("the webhook HTTP client: {e}")))?;
        let inner = Arc::new(Inner {
            store: ctx.store.clone(),
            key: load_key(&ctx.data_dir)?,
            client,
            settings,
            hooks: Mutex::default(),
            stopping: AtomicBool::new(false),
            missed: AtomicU64::new(0),
        });
        for v in ctx.store.list_webhooks(None)? {
            if let Some(h) = hook_from(&v) {
                inner.add(h);
            }
        }
        tokio::spawn(dispatch(inner.clone(), ctx.rt.clone()));
        Ok(Self { inner })
    }

    /// Lets queued deliveries go out for a moment, then stops.
    pub async fn shutdown(&self) {
        let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
        while tokio::time::Instant::now() < deadline {
            let pending = lock(&self.inner.hooks)
                .values()
                .any(|h| !lock(&h.queue).is_empty());
            if !pending {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.inner.stopping.store(true, Ordering::SeqCst);
        for h in lock(&self.inner.hooks).values() {
            h.wake.notify_one();
        }
    }
}

impl Inner {
    fn add(self: &Arc<Self>, hook: Hook) -> Arc<Hook> {
        let hook = Arc::new(hook);
        lock(&self.hooks).insert(hook.id.clone(), hook.clone());
        tokio::spawn(deliver_loop(self.clone(), hook.clone()));
        hook
    }

    fn done(&self, hook: &Hook) -> bool {
        hook.deleted.load(Ordering::SeqCst) || self.stopping.load(Ordering::SeqCst)
    }
}

/// Puts every event in the queues of the webhooks that want it; never waits on them.
async fn dispatch(inner: Arc<Inner>, rt: Runtime) {
    let mut rx = rt.subscribe();
    loop {
        let ev = match rx.recv().await {
            Ok(ev) => ev,
            Err(RecvError::Lagged(n)) => {
                inner.missed.fetch_add(n, Ordering::Relaxed);
                tracing::warn!(missed = n, "webhook deliveries fell behind the events");
                continue;
            }
            Err(RecvError::Closed) => return,
        };
        if inner.stopping.load(Ordering::SeqCst) {
            return;
        }
        let hooks: Vec<Arc<Hook>> = lock(&inner.hooks)
            .values()
            .filter(|h| h.tenant == ev.tenant && (h.kinds.is_empty() || h.kinds.contains(&ev.kind)))
            .cloned()
            .collect();
        for h in hooks {
            {
                let mut q = lock(&h.queue);
                if q.len() >= inner.settings.queue {
                    q.pop_front();
                    lock(&h.stats).dropped += 1;
                }
                q.push_back(Pending {
                    delivery_id: sandlot_runtime::new_id("dlv_"),
                    event: ev.clone(),
                });
            }
            h.wake.notify_one();
        }
    }
}

/// Delivers one webhook's queue, in order, until it is deleted or the server stops.
async fn deliver_loop(inner: Arc<Inner>, hook: Arc<Hook>) {
    let secret = secret_of(&inner.key, &hook.id);
    loop {
        if inner.done(&hook) {
            return;
        }
        let next = lock(&hook.queue).pop_front();
        match next {
            Some(p) => deliver(&inner, &hook, &secret, p).await,
            None => hook.wake.notified().await,
        }
    }
}

/// What one attempt came to.
enum Attempt {
    Delivered,
    Retry(String),
    Final(String),
}

async fn deliver(inner: &Inner, hook: &Hook, secret: &str, p: Pending) {
    let body = json!({
        "delivery_id": p.delivery_id,
        "webhook_id": hook.id,
        "event": p.event,
    })
    .to_string();
    let s = &inner.settings;
    for attempt in 1..=s.max_attempts {
        let outcome = attempt_once(inner, hook, secret, &p, &body).await;
        // Whether to try again (the guard is not held across the wait below).
        let again = {
            let mut stats = lock(&hook.stats);
            stats.attempts += 1;
            stats.last_attempt_at = Some(now_rfc3339());
            match outcome {
                Attempt::Delivered => {
                    stats.delivered += 1;
                    stats.last_error = None;
                    false
                }
                Attempt::Final(why) => {
                    stats.failed += 1;
                    stats.last_error = Some(why);
                    false
                }
                Attempt::Retry(why) => {
                    stats.last_error = Some(why);
                    if attempt == s.max_attempts {
                        stats.failed += 1;
                    }
                    attempt < s.max_attempts
                }
            }
        };
        if !again {
            return;
        }
        // Waits in short steps, so a deletion or the shutdown ends the wait early.
        let until = tokio::time::Instant::now() + backoff(s.backoff, attempt);
        while tokio::time::Instant::now() < until {
            if inner.done(hook) {
                return;
            }
            let step = until.saturating_duration_since(tokio::time::Instant::now());
            tokio::time::sleep(step.min(Duration::from_millis(100))).await;
        }
    }
}

/// Full jitter: a random wait in [0, min(cap, base × 2^(attempt-1))].
fn backoff(base: Duration, attempt: u32) -> Duration {
    let ceiling = base
        .saturating_mul(1u32 << (attempt - 1).min(16))
        .min(MAX_BACKOFF);
    let mut b = [0u8; 4];
    getrandom::fill(&mut b).expect("the kernel's random source works");
    ceiling.mul_f64(f64::from(u32::from_le_bytes(b)) / f64::from(u32::MAX))
}

async fn attempt_once(
    inner: &Inner,
    hook: &Hook,
    secret: &str,
    p: &Pending,
    body: &str,
) -> Attempt {
    let url = match reqwest::Url::parse(&hook.url) {
        Ok(u) => u,
        Err(e) => return Attempt::Final(format!("bad url: {e}")),
    };
    // The resolver checks names; an address written in the URL is checked here.
    if let Some(why) = literal_ip(&url).and_then(|ip| refusal(ip, inner.settings.allow_private)) {
        return Attempt::Final(format!("refused: the host is {why}"));
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let sent = inner
        .client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header("Sandlot-Signature", signature(secret, t, body.as_bytes()))
        .header("Sandlot-Delivery", &p.delivery_id)
        .header("Sandlot-Event", p.event.kind.as_str())
        .body(body.to_owned())
        .send()
        .await;
    match sent {
        Ok(resp) => {
            let status = resp.status();
            lock(&hook.stats).last_status = Some(status.as_u16());
            if status.is_success() {
                Attempt::Delivered
            } else if status.is_server_error()
                || status == reqwest::StatusCode::REQUEST_TIMEOUT
                || status == reqwest::StatusCode::TOO_MANY_REQUESTS
            {
                Attempt::Retry(format!("the endpoint answered {status}"))
            } else {
                Attempt::Final(format!("the endpoint answered {status}"))
            }
        }
        Err(e) if e.is_timeout() => Attempt::Retry(format!(
            "no answer within {} ms",
            inner.settings.timeout.as_millis()
        )),
        Err(e) => {
            // The resolver's refusal is final; a connection error may pass.
            let text = error_chain(&e);
            if text.contains("refused") && text.contains("resolves to") {
                Attempt::Final(text)
            } else {
                Attempt::Retry(text)
            }
        }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

// ---------------------------------------------------------------------------------------------
// Routes.

#[derive(Clone)]
struct St {
    rec: Arc<Recording>,
    cfg: Arc<ApiConfig>,
}

impl FromRef<St> for Arc<ApiConfig> {
    fn from_ref(st: &St) -> Self {
        st.cfg.clone()
    }
}

pub(crate) fn routes(rec: Arc<Recording>) -> Router {
    let st = St {
        rec,
        cfg: Arc::new(ApiConfig::default()),
    };
    Router::new()
        .route("/v1/webhooks", get(list).post(create))
        .route("/v1/webhooks/{id}", delete(remove))
        .with_state(st)
}

/// `POST /v1/webhooks` body.
#[derive(Debug, Deserialize)]
pub struct CreateWebhook {
    pub url: String,
    /// Kinds to deliver; every kind when absent or empty.
    #[serde(default)]
    pub events: Vec<String>,
}

/// A webhook as listed (its secret is shown once, when created).
#[derive(Debug, Serialize, Deserialize)]
pub struct WebhookView {
    pub id: String,
    pub url: String,
    pub events: Vec<String>,
    pub created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    pub deliveries: Stats,
}

/// `GET /v1/webhooks` response.
#[derive(Debug, Serialize, Deserialize)]
pub struct WebhookList {
    pub webhooks: Vec<WebhookView>,
}

fn view(h: &Hook, secret: Option<String>) -> WebhookView {
    WebhookView {
        id: h.id.clone(),
        url: h.url.clone(),
        events: h.kinds.iter().map(|k| k.as_str().to_owned()).collect(),
        created_at: h.created_at.clone(),
        secret,
        deliveries: lock(&h.stats).clone(),
    }
}

async fn create(
    State(st): State<St>,
    caller: Caller,
    ApiJson(body): ApiJson<CreateWebhook>,
) -> Result<Response, HttpError> {
    let inner = &st.rec.webhooks.inner;
    let kinds = super::events::parse_kinds(body.events.iter().map(String::as_str))?;
    let url = check_url(&body.url, inner.settings.allow_private).await?;
    let tenant = caller.tenant().to_owned();
    let mine = |tenant: &str| {
        lock(&inner.hooks)
            .values()
            .filter(|h| h.tenant == tenant)
            .count()
    };
    let gov = st.rec.ctx.gov.as_deref();
    // With keys, the tenant's `max_webhooks` (held until the hook is in the map the next
    // claim counts); without, the server's own bound.
    let _claim =
        sandlot_service::shares::claim(gov, &caller.0, Share::Webhooks, |t, _| Ok(mine(t) as u64))
            .await
            .map_err(HttpError)?;
    if gov.is_none() && mine(&tenant) >= MAX_PER_TENANT {
        return Err(HttpError::new(
            ErrorCode::InvalidArgument,
            format!("a tenant may have at most {MAX_PER_TENANT} webhooks; delete one first"),
        ));
    }
    let id = sandlot_runtime::new_id("wh_");
    let record = json!({
        "id": id,
        "tenant": tenant,
        "url": url.as_str(),
        "events": kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
        "created_at": now_rfc3339(),
    });
    inner
        .store
        .insert_webhook(&record)
        .map_err(|e| HttpError::internal(format!("the webhook store: {e}")))?;
    let hook = hook_from(&record).expect("a webhook just built");
    let hook = inner.add(hook);
    let secret = secret_of(&inner.key, &id);
    Ok((StatusCode::CREATED, Json(view(&hook, Some(secret)))).into_response())
}

async fn list(State(st): State<St>, caller: Caller) -> Json<WebhookList> {
    let inner = &st.rec.webhooks.inner;
    let mut hooks: Vec<WebhookView> = lock(&inner.hooks)
        .values()
        .filter(|h| h.tenant == caller.tenant())
        .map(|h| view(h, None))
        .collect();
    hooks.sort_by(|a, b| (&a.created_at, &a.id).cmp(&(&b.created_at, &b.id)));
    Json(WebhookList { webhooks: hooks })
}

async fn remove(
    State(st): State<St>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, HttpError> {
    let inner = &st.rec.webhooks.inner;
    let removed = inner
        .store
        .delete_webhook(&id, caller.tenant())
        .map_err(|e| HttpError::internal(format!("the webhook store: {e}")))?;
    if !removed {
        return Err(HttpError::new(
            ErrorCode::WebhookNotFound,
            format!("no webhook {}", id.chars().take(64).collect::<String>()),
        ));
    }
    if let Some(h) = lock(&inner.hooks).remove(&id) {
        h.deleted.store(true, Ordering::SeqCst);
        h.wake.notify_one();
    }
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_an_hmac_of_the_time_and_the_body() {
        // Computed independently: printf '1700000000.{"a":1}' | openssl dgst -sha256 -hmac whsec_test
        let sig = signature("whsec_test", 1_700_000_000, br#"{"a":1}"#);
        let want = hmac_hex(b"whsec_test", &[b"1700000000.{\"a\":1}"]);
        assert_eq!(sig, format!("t=1700000000,v1={want}"));
        assert_eq!(want.len(), 64);
    }

    #[test]
    fn secrets_differ_per_webhook_and_per_server_key() {
        let (k1, k2) = ([1u8; 32], [2u8; 32]);
        assert_ne!(secret_of(&k1, "wh_a"), secret_of(&k1, "wh_b"));
        assert_ne!(secret_of(&k1, "wh_a"), secret_of(&k2, "wh_a"));
        assert_eq!(secret_of(&k1, "wh_a"), secret_of(&k1, "wh_a"));
        assert!(secret_of(&k1, "wh_a").starts_with("whsec_"));
    }

    #[test]
    fn metadata_and_link_local_addresses_are_always_refused() {
        for ip in [
            "169.254.169.254",
            "169.254.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "fe80::1",
            "fd00:ec2::254",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "2002:a9fe:a9fe::1",
            "::",
            // IPv6 spellings of loopback a network may translate: never, whatever the operator
            // allows (they are no way to call a local endpoint on purpose).
            "::127.0.0.1",
            "64:ff9b::7f00:1",
            "64:ff9b:1::1",
            "2002:7f00:1::1",
            "2001:0:4136:e378:8000:63bf:80ff:fffe",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(refusal(ip, true).is_some(), "{ip} allowed");
        }
    }

    #[test]
    fn the_hosts_own_addresses_need_the_operator() {
        let own: Vec<IpAddr> = sandlot_egress::own_addresses()
            .iter()
            .copied()
            .filter(|ip| !ip.is_loopback())
            .collect();
        assert!(!own.is_empty(), "this host has no address but loopback");
        for ip in own {
            let why = refusal(ip, false).unwrap_or_else(|| panic!("{ip} allowed"));
            assert!(why.contains("this host's own"), "{ip}: {why}");
        }
    }

    #[test]
    fn private_addresses_need_the_operator() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "::1",
            "fd12::1",
            "::ffff:127.0.0.1",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(refusal(ip, false).is_some(), "{ip} allowed");
            assert!(
                refusal(ip, true).is_none(),
                "{ip} refused with the operator's leave"
            );
        }
        for ip in ["93.184.216.34", "2606:4700::1111", "8.8.8.8"] {
            assert!(refusal(ip.parse().unwrap(), false).is_none(), "{ip}");
        }
    }

    #[tokio::test]
    async fn urls_are_checked() {
        let code = |r: Result<reqwest::Url, HttpError>| r.err().map(|e| e.0.message);
        assert!(code(check_url("ftp://example.test/x", true).await)
            .unwrap()
            .contains("http or https"));
        assert!(code(check_url("http://u:p@example.test/x", true).await)
            .unwrap()
            .contains("credentials"));
        assert!(code(check_url("not a url", true).await).is_some());
        assert!(code(check_url("http://169.254.169.254/latest", true).await)
            .unwrap()
            .contains("link-local"));
        assert!(code(check_url("http://[fe80::1]/", true).await).is_some());
        assert!(code(check_url("http://127.0.0.1:9/", false).await)
            .unwrap()
            .contains("SANDLOT_WEBHOOK_ALLOW_PRIVATE"));
        assert!(code(check_url("http://localhost:9/", false).await).is_some());
        assert!(check_url("http://127.0.0.1:9/hook", true).await.is_ok());
        let long = format!("http://example.test/{}", "a".repeat(MAX_URL_BYTES));
        assert!(code(check_url(&long, true).await).is_some());
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let base = Duration::from_millis(100);
        for attempt in 1..30 {
            let d = backoff(base, attempt);
            let ceiling = (base * 2u32.pow((attempt - 1).min(16))).min(MAX_BACKOFF);
            assert!(d <= ceiling, "{d:?} > {ceiling:?}");
        }
    }
}
