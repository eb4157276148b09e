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
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, Signal, SignalKind};

/// How long a connection may take to send a request head (and stay idle between requests).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long requests still open after the runtime has shut down may take to finish.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn serve(listen: SocketAddr, dirs: Dirs, capacity: Capacity) -> anyhow::Result<()> {
    let disk = crate::doctor::Disk::detect(Some(&dirs.data_dir));
    tokio::task::spawn_blocking(move || ensure_btrfs_progs(&disk))
        .await
        .context("the btrfs-progs check failed")?;
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
    let e2b = sandlot_e2b::E2b::start(rt.clone(), &dirs.data_dir)?;
    // /mcp accepts loopback Host names only (against DNS rebinding), and the address the
    // server listens on when that is a specific one.
    let mcp = if addr.ip().is_loopback() || addr.ip().is_unspecified() {
        sandlot_mcp::http_router(rt.clone())
    } else {
        sandlot_mcp::http_router_with_hosts(rt.clone(), [addr.ip().to_string()])
    };
    let ext = sandlot_api::Extensions {
        routes: e2b.routes().merge(mcp),
        sandbox_header: Some(e2b.sandbox_router()),
    };
    let app = sandlot_api::router_extended(rt.clone(), ApiConfig::for_runtime(&rt_cfg), ext);

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
    // After the log lines, so whoever reads the announcement finds the settings logged.
    announce(addr)?;

    let signal = signals.wait().await;
    tracing::info!(
        signal,
        "shutting down: no new connections; stopping sandboxes"
    );
    let _ = stop_tx.send(());
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
    // A request head must arrive within HEADER_READ_TIMEOUT of a connection waiting for one
    // (this also closes idle keep-alive connections), so a client that sends half a head, or
    // opens connections and sends nothing, cannot hold the server's descriptors forever.
    builder
        .http1()
        .half_close(true)
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(20));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(stop);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
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
        let service = TowerToHyperService::new(app.clone());
        let builder = builder.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            // The HTTP version is sniffed from the first bytes, before hyper's own timers run:
            // a connection that sends nothing at all is dropped here.
            let mut first = [0u8; 1];
            match tokio::time::timeout(HEADER_READ_TIMEOUT, stream.peek(&mut first)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return,
            }
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            if let Err(e) = watcher.watch(conn.into_owned()).await {
                tracing::debug!(error = %e, "connection ended with an error");
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

/// The one line on stdout, which scripts and tests wait for (and parse when the port was 0).
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
