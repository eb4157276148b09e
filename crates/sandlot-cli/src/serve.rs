//! `sandlot serve`: the HTTP server. Before the runtime starts it makes sure the tools disk
//! workspaces need are there: on a Debian host, as root, it installs `btrfs-progs` when the
//! kernel has Btrfs but `mkfs.btrfs` is missing; elsewhere it says what to install and the
//! workspaces fall back to loop images (`sandlot doctor` shows which backend and why).

use crate::config::{Capacity, Dirs};
use crate::setup;
use anyhow::Context;
use sandlot_api::ApiConfig;
use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, Signal, SignalKind};

/// How long a connection may go without starting a request while none is open: a client that
/// sends half a request head (slowloris), or nothing, or stays idle between requests, is
/// disconnected after it, so such clients cannot hold the server's descriptors forever.
/// One timer per connection rather than hyper's header-read timer per request, and it also
/// covers a connection that sends nothing (hyper's timers start only once the HTTP version has
/// been sniffed from the first bytes) and idle HTTP/2 connections.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long requests still open after the runtime has shut down may take to finish.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn serve(listen: SocketAddr, dirs: Dirs, capacity: Capacity) -> anyhow::Result<()> {
    check_settings()?;
    let disk = crate::doctor::Disk::detect(Some(&dirs.data_dir));
    tokio::task::spawn_blocking(move || ensure_btrfs_progs(&disk))
        .await
        .context("the btrfs-progs check failed")?;
    if crate::doctor::sandbox_node().is_none() {
        // Not installed for the operator: a large package most servers may not want. Asked for.
        eprintln!(
            "sandlot: no Node.js under /usr: JavaScript and TypeScript cells will fail until \
             the distribution's nodejs is installed (apt-get install nodejs; see `sandlot doctor`)"
        );
    }
    let (rt, rt_cfg) = setup::start_runtime(&dirs.data_dir, &dirs.env_dir, capacity).await?;
    // Installed before the announcement, so a signal sent as soon as it is read shuts down
    // gracefully rather than by the default action.
    let mut signals = ShutdownSignals::install()?;
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("could not listen on {listen}"))?;
    let addr = listener
        .local_addr()
        .context("could not read the listening address")?;
    let (governance, new_key) = governance(&rt, &dirs, addr)?;
    // E2B and /mcp act for the tenant of the key a request carries.
    let e2b = sandlot_e2b::E2b::start(
        rt.clone(),
        &dirs.data_dir,
        governance.clone(),
        seconds_var(crate::config::ENVD_TOKEN_TTL)?,
    )?;
    // /mcp accepts loopback Host names only (against DNS rebinding), and the address the
    // server listens on when that is a specific one.
    let mcp = if addr.ip().is_loopback() || addr.ip().is_unspecified() {
        sandlot_mcp::http_router(rt.clone(), governance.clone())
    } else {
        sandlot_mcp::http_router_with_hosts(rt.clone(), governance.clone(), [addr.ip().to_string()])
    };
    let recording = sandlot_record::Recording::start(sandlot_record::RecordContext {
        rt: rt.clone(),
        gov: governance.clone(),
        store: rt.store(),
        data_dir: dirs.data_dir.clone(),
    })
    .await
    .context("could not start the record (audit, metrics, events, jobs)")?;
    // The web console at /console: its sessions stand in for a key on /v1 (`sandlot-console`).
    let console = sandlot_console::Console::new(
        governance.clone(),
        sandlot_console::ConsoleConfig {
            secure_cookie: std::env::var(crate::config::CONSOLE_SECURE_COOKIE)
                .is_ok_and(|v| v == "1"),
            ..Default::default()
        },
        {
            let rt = rt.clone();
            Box::new(move |id: &str| rt.sandbox_tenant(id))
        },
    );
    let ext = sandlot_api::Extensions {
        // The record's routes are authenticated and scoped by the REST adapter's layer, like
        // `/v1`'s own.
        routes: e2b
            .routes()
            .merge(mcp)
            .merge(sandlot_record::router(recording.clone()))
            .merge(sandlot_console::router(console.clone())),
        sandbox_header: Some(e2b.sandbox_router()),
        governance,
        console: Some(console),
    };
    let app = sandlot_api::router_extended(rt.clone(), ApiConfig::for_runtime(&rt_cfg), ext);
    let app = with_record(app, recording.clone());

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve_http(listener, app, async move {
        let _ = stop_rx.await;
    }));
    tracing::info!(
        %addr,
        data_dir = %dirs.data_dir.display(),
        max_sandboxes = rt_cfg.max_sandboxes,
        max_concurrent_creates = rt_cfg.max_concurrent_creates,
        max_pending_creates = rt_cfg.max_pending_creates,
        pool_size = rt_cfg.pool_size,
        workspaces = %rt.workspace_backend(),
        "serving"
    );
    tracing::info!(
        key_file = %dirs.data_dir.join(sandlot_e2b::KEY_FILE).display(),
        "E2B-compatible API: set E2B_API_URL and E2B_SANDBOX_URL to this server's URL and \
         E2B_API_KEY to the key in key_file (or {})",
        sandlot_e2b::KEY_ENV
    );
    if let Some(key) = new_key {
        // Shown once, to whoever started the server; it stays in the data dir for local
        // clients (`sandlot run`, the SDK on loopback), readable by this user only.
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "sandlot: created the admin API key of tenant default (kept in {}): {key}",
            dirs.data_dir
                .join(sandlot_tenancy::BOOTSTRAP_KEY_FILE)
                .display()
        )?;
    }
    // After the log lines, so whoever reads the announcement finds the settings logged.
    announce(addr)?;

    let signal = signals.wait().await;
    tracing::info!(
        signal,
        "shutting down: no new connections; stopping sandboxes"
    );
    let _ = stop_tx.send(());
    recording.shutdown().await;
    rt.shutdown().await;
    match tokio::time::timeout(DRAIN_TIMEOUT, server).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "server error while draining"),
        Ok(Err(e)) => tracing::warn!(error = %e, "server task failed"),
        Err(_) => tracing::warn!("requests still open after {DRAIN_TIMEOUT:?}; closing them"),
    }
    tracing::info!("stopped");
    Ok(())
}

/// Wraps every request (REST, E2B, MCP alike) in the record's layers, outermost first:
///
/// ```text
/// note → observe → audit → (the API's) log_request → catch panic → refuse pages → authenticate
/// ```
///
/// Outside every refusal, so refused requests are recorded and counted too; outside the API's
/// `log_request`, so its line is logged in the request's span (trace id). The note comes first
/// so the layers inside it (and the handlers) write to it and the audit and metrics read it.
fn with_record(app: axum::Router, rec: Arc<sandlot_record::Recording>) -> axum::Router {
    app.layer(axum::middleware::from_fn_with_state(
        rec.clone(),
        sandlot_record::audit::middleware,
    ))
    .layer(axum::middleware::from_fn_with_state(
        rec,
        sandlot_record::observe::middleware,
    ))
    .layer(axum::middleware::from_fn(sandlot_record::note_layer))
}

/// Serves `app` on `listener` until `stop` resolves, then lets open requests finish.
///
/// `axum::serve` cannot be configured, and hyper's HTTP/1 default treats a client that shuts
/// down its write side after sending a request (`shutdown(SHUT_WR)`, as some clients and
/// proxies do) as gone: it drops the request halfway and answers nothing. Here HTTP/1
/// connections allow half-close, so such a client gets its response (and a request whose
/// client did go away still runs to its end). HTTP/2 is served too, as `axum::serve` does.
async fn serve_http(
    listener: TcpListener,
    app: axum::Router,
    stop: impl Future<Output = ()>,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    use hyper_util::server::conn::auto;
    use hyper_util::service::TowerToHyperService;

    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().half_close(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(20));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of fds or memory, or a connection reset before it was accepted: the
                    // listener itself is fine; pause briefly rather than spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let _ = stream.set_nodelay(true);
        let activity = Arc::new(Activity::default());
        let service = TowerToHyperService::new(Tracked {
            app: app.clone(),
            activity: activity.clone(),
            peer,
        });
        let builder = builder.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            tokio::select! {
                ended = watcher.watch(conn.into_owned()) => {
                    if let Err(e) = ended {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                }
                () = activity.idle(IDLE_TIMEOUT) => {
                    tracing::debug!("closing a connection that started no request for {IDLE_TIMEOUT:?}");
                }
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// Installs `btrfs-progs` when the kernel has Btrfs, `mkfs.btrfs` is missing and a new data dir
/// would use it: as root on Debian with `apt-get`, with a progress line on stderr; otherwise it
/// says what to install. Either way the server starts (on loop-image workspaces if need be).
fn ensure_btrfs_progs(disk: &crate::doctor::Disk) {
    if !disk.kernel_btrfs || disk.mkfs_btrfs.is_some() || disk.existing.is_some() {
        return;
    }
    // The effective uid, the second field of `Uid:`.
    let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    });
    let debian = std::path::Path::new("/etc/debian_version").exists();
    let apt = crate::doctor::find_program("apt-get");
    let Some(apt) = apt.filter(|_| root && debian) else {
        eprintln!(
            "sandlot: mkfs.btrfs is missing, so sandbox workspaces use one ext4 loop image each; \
             install btrfs-progs (e.g. `apt-get install btrfs-progs`) for Btrfs workspaces"
        );
        return;
    };
    eprintln!(
        "sandlot: installing btrfs-progs for disk workspaces (apt-get install btrfs-progs)..."
    );
    let install = || {
        std::process::Command::new(&apt)
            .args(["install", "-y", "--no-install-recommends", "btrfs-progs"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    // A fresh host may have no package lists yet: fetch them once and retry.
    let installed = install()
        || (std::process::Command::new(&apt)
            .arg("update")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
            && install());
    if installed && crate::doctor::find_program("mkfs.btrfs").is_some() {
        eprintln!("sandlot: btrfs-progs installed; sandbox workspaces use Btrfs");
    } else {
        eprintln!(
            "sandlot: installing btrfs-progs failed; sandbox workspaces use one ext4 loop image \
             each (install btrfs-progs by hand for Btrfs workspaces)"
        );
    }
}

/// A duration in seconds from the environment variable `name` (unset or empty: none).
/// Settings read only once the runtime is up, checked before anything starts: a typo stops the
/// server at once rather than after booting the runtime (tens of seconds on a first run).
fn check_settings() -> anyhow::Result<()> {
    seconds_var(crate::config::ENVD_TOKEN_TTL)?;
    if let Ok(v) = std::env::var(sandlot_record::audit::TRUSTED_PROXIES) {
        sandlot_record::audit::parse_trusted_proxies(&v)
            .map_err(|why| anyhow::anyhow!("{}: {why}", sandlot_record::audit::TRUSTED_PROXIES))?;
    }
    Ok(())
}

fn seconds_var(name: &str) -> anyhow::Result<Option<std::time::Duration>> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => Ok(Some(std::time::Duration::from_secs(
            v.trim()
                .parse()
                .with_context(|| format!("{name} must be a number of seconds"))?,
        ))),
        _ => Ok(None),
    }
}

/// API keys, tenants and quotas, unless `SANDLOT_AUTH=off` (benchmarks comparing the cost of
/// auth, on loopback only). On the first start, the admin key of the tenant `default` is
/// created and returned, to be shown once.
fn governance(
    rt: &sandlot_runtime::Runtime,
    dirs: &Dirs,
    addr: SocketAddr,
) -> anyhow::Result<(Option<Arc<sandlot_service::Governance>>, Option<String>)> {
    if std::env::var("SANDLOT_AUTH").is_ok_and(|v| v == "off") {
        anyhow::ensure!(
            addr.ip().is_loopback(),
            "SANDLOT_AUTH=off serves without API keys and is refused unless the server listens \
             on a loopback address (it listens on {addr})"
        );
        tracing::warn!("SANDLOT_AUTH=off: no API keys, tenants, quotas or policies");
        return Ok((None, None));
    }
    let secret = port_secret(&dirs.data_dir.join("port-secret"))
        .context("could not read or create the port-token secret")?;
    let policy_dir = dirs.data_dir.join("policies");
    let policy = sandlot_policy::PolicyEngine::open(&policy_dir).with_context(|| {
        format!(
            "could not load the policies in {} (fix or remove the files; the defaults are \
             written where they are missing)",
            policy_dir.display()
        )
    })?;
    let hosts = match std::env::var("SANDLOT_EGRESS_HOSTS") {
        Ok(spec) if !spec.trim().is_empty() => sandlot_egress::parse_hosts(&spec)
            .context("SANDLOT_EGRESS_HOSTS must be name=ip[,name=ip...]")?,
        _ => Default::default(),
    };
    let port_url_ttl = seconds_var(crate::config::PORT_URL_TTL)?;
    let extra_roots = match std::env::var("SANDLOT_EGRESS_EXTRA_ROOTS") {
        Ok(path) if !path.trim().is_empty() => {
            sandlot_egress::ExtraRoots::read(std::path::Path::new(path.trim()))
                .context("SANDLOT_EGRESS_EXTRA_ROOTS must name a PEM file of CA certificates")?
        }
        _ => Default::default(),
    };
    let gov = Arc::new(
        sandlot_service::Governance::new(rt.store(), policy.clone(), secret)
            .context("could not load tenants and API keys")?
            .with_port_url_ttl(port_url_ttl)
            .with_held_output_dir(dirs.data_dir.join("held-output")),
    );
    // The operator's internal services (issue 23): reachable by name from trusted-tier
    // sandboxes whose allowlist names them (`service:<name>`), at exactly this address.
    let services = match std::env::var("SANDLOT_INTERNAL_SERVICES") {
        Ok(spec) if !spec.trim().is_empty() => sandlot_egress::parse_services(&spec)
            .context("SANDLOT_INTERNAL_SERVICES must be name=ip:port[,name=ip:port...]")?,
        _ => Default::default(),
    };
    rt.install_governor(
        Arc::new(sandlot_service::gates::ServerGovernor::new(gov.clone())),
        hosts,
        extra_roots,
        services,
    );
    rt.set_idle_pause_gate(sandlot_service::shares::idle_pause_gate(gov.clone()));
    sandlot_service::shares::sync_disk_caps(rt, &gov);
    tracing::info!(
        version = %policy.version(),
        dir = %policy_dir.display(),
        "policies in force"
    );
    let created = gov
        .keys
        .bootstrap(&dirs.data_dir)
        .context("could not create the local admin API key")?;
    tracing::info!(
        key_file = %dirs.data_dir.join(sandlot_tenancy::BOOTSTRAP_KEY_FILE).display(),
        "API keys required: send `Authorization: Bearer <key>`; the local admin key is in key_file"
    );
    Ok((Some(gov), created))
}

/// The 32 random bytes that key port tokens, created (mode 0600) on the first start.
fn port_secret(path: &std::path::Path) -> anyhow::Result<[u8; 32]> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Ok(bytes) = std::fs::read(path) {
        if let Ok(secret) = <[u8; 32]>::try_from(bytes.as_slice()) {
            return Ok(secret);
        }
        tracing::warn!(path = %path.display(), "port-token secret malformed; making a new one");
    }
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(&secret)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    Ok(secret)
}

/// The line on stdout scripts and tests wait for (and parse when the port was 0).
fn announce(addr: SocketAddr) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "sandlot listening on http://{addr}")?;
    out.flush()?;
    Ok(())
}

struct ShutdownSignals {
    term: Signal,
    int: Signal,
}

impl ShutdownSignals {
    fn install() -> anyhow::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate()).context("could not handle SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("could not handle SIGINT")?,
        })
    }

    /// Waits for SIGINT or SIGTERM; returns which.
    async fn wait(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

/// What one connection is doing: requests started, and requests whose response (body included)
/// is still open.
#[derive(Default)]
struct Activity {
    started: AtomicU64,
    open: AtomicU64,
}

impl Activity {
    /// Resolves once `period` (to within a sixth of it) passes with no request started and
    /// none open.
    async fn idle(&self, period: Duration) {
        let step = period / 6;
        let mut seen = self.started.load(Ordering::Relaxed);
        let mut quiet = Duration::ZERO;
        loop {
            tokio::time::sleep(step).await;
            let now = self.started.load(Ordering::Relaxed);
            if now != seen || self.open.load(Ordering::Relaxed) > 0 {
                seen = now;
                quiet = Duration::ZERO;
                continue;
            }
            quiet += step;
            if quiet >= period {
                return;
            }
        }
    }
}

/// Counts a request open until its response body has been sent or dropped.
struct Open(Arc<Activity>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The application, counting each connection's requests for [`Activity::idle`].
#[derive(Clone)]
struct Tracked {
    app: axum::Router,
    activity: Arc<Activity>,
    /// The client's address, for the layers that tell sources apart (the audit's tallies of
    /// unauthenticated refusals).
    peer: SocketAddr,
}

impl<B> tower::Service<axum::http::Request<B>> for Tracked
where
    B: axum::body::HttpBody<Data = axum::body::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<
        Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send + 'static>,
    >;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: axum::http::Request<B>) -> Self::Future {
        use tower::ServiceExt;
        self.activity.started.fetch_add(1, Ordering::Relaxed);
        self.activity.open.fetch_add(1, Ordering::Relaxed);
        let open = Open(self.activity.clone());
        let app = self.app.clone();
        let mut req = req.map(axum::body::Body::new);
        req.extensions_mut()
            .insert(axum::extract::ConnectInfo(self.peer));
        Box::pin(async move {
            let resp = app.oneshot(req).await?;
            Ok(resp.map(|body| axum::body::Body::new(Counted { body, _open: open })))
        })
    }
}

/// A response body that keeps its request counted open while it lives.
struct Counted {
    body: axum::body::Body,
    _open: Open,
}

impl axum::body::HttpBody for Counted {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
