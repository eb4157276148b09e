//! `sandlot serve`: the HTTP server.

use crate::config::{Capacity, Dirs};
use crate::setup;
use anyhow::Context;
use sandlot_api::ApiConfig;
use std::future::IntoFuture;
use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, Signal, SignalKind};

/// How long requests still open after the runtime has shut down may take to finish.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn serve(listen: SocketAddr, dirs: Dirs, capacity: Capacity) -> anyhow::Result<()> {
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
    let app = sandlot_api::router(rt.clone(), ApiConfig::for_runtime(&rt_cfg));

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stop_rx.await;
            })
            .into_future(),
    );
    tracing::info!(
        %addr,
        data_dir = %dirs.data_dir.display(),
        max_sandboxes = rt_cfg.max_sandboxes,
        max_concurrent_creates = rt_cfg.max_concurrent_creates,
        max_pending_creates = rt_cfg.max_pending_creates,
        pool_size = rt_cfg.pool_size,
        "serving"
    );
    // After the log line, so whoever reads the announcement finds the settings logged.
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
