//! Benchmark (issue 7): the latency the egress proxy adds to a request.
//!
//! A GET to a loopback HTTP server, each on a fresh connection (as pip and requests do through
//! a proxy without keep-alive), measured direct and through `sandlot-egress`'s proxy, the two
//! interleaved so drift on the machine hits both alike. The proxy runs as the server runs it
//! (the same `Egress`, with an allowlist naming the server's address explicitly, every check
//! on) on its own tokio runtime; its listener is on the host's loopback rather than inside a
//! sandbox's namespace, which makes no difference to the path a request takes once accepted.
//! The target (issue 7) is ≤ 1 ms added at p50 and p99. No sandlot server is needed.

use crate::stats::{Samples, Summary};
use anyhow::Context;
use sandlot_egress::{Egress, EgressConfig, NetworkRules, NullHooks};
use serde::Serialize;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Requests not measured before the measured ones (connection setup paths, allocator).
const WARMUP: usize = 50;
/// Bound on one request; a request over it fails the benchmark.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Direct and proxied latencies of the same GET, in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct EgressResult {
    pub direct: Summary,
    pub proxied: Summary,
    /// `proxied.p50 - direct.p50`.
    pub added_p50_ms: f64,
    /// `proxied.p99 - direct.p99`.
    pub added_p99_ms: f64,
}

/// Runs `n` direct and `n` proxied GETs (after a warm-up) and summarizes them.
pub fn run(n: usize) -> anyhow::Result<EgressResult> {
    let upstream = serve_upstream()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("bench-egress")
        .enable_all()
        .build()
        .context("starting the proxy's runtime")?;
    let egress = Egress::new(EgressConfig::default(), Arc::new(NullHooks));
    let listener = TcpListener::bind("127.0.0.1:0").context("binding the proxy")?;
    let proxy = listener.local_addr()?;
    {
        let _guard = rt.enter();
        egress.attach("bench", listener)?;
    }
    let rule = format!("127.0.0.1/32:{}", upstream.port());
    egress.set_rules("bench", NetworkRules::parse(&[rule])?);

    let direct_req = format!("GET / HTTP/1.1\r\nHost: {upstream}\r\nConnection: close\r\n\r\n");
    let proxied_req =
        format!("GET http://{upstream}/ HTTP/1.1\r\nHost: {upstream}\r\nConnection: close\r\n\r\n");
    let (mut direct, mut proxied) = (Samples::new(), Samples::new());
    for i in 0..WARMUP + n {
        let d = get(upstream, &direct_req).context("a direct GET")?;
        let p = get(proxy, &proxied_req).context("a GET through the proxy")?;
        if i >= WARMUP {
            direct.push(d);
            proxied.push(p);
        }
    }
    egress.detach("bench");
    let (direct, proxied) = (direct.summary(), proxied.summary());
    Ok(EgressResult {
        direct,
        proxied,
        added_p50_ms: proxied.p50 - direct.p50,
        added_p99_ms: proxied.p99 - direct.p99,
    })
}

/// One GET on a fresh connection to `to`, until the response has been read whole.
fn get(to: SocketAddr, request: &str) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let mut conn = TcpStream::connect_timeout(&to, REQUEST_TIMEOUT)?;
    conn.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    conn.set_nodelay(true)?;
    conn.write_all(request.as_bytes())?;
    let mut resp = Vec::with_capacity(256);
    conn.read_to_end(&mut resp)?;
    let took = start.elapsed();
    anyhow::ensure!(
        resp.starts_with(b"HTTP/1.1 200") && resp.ends_with(b"ok"),
        "unexpected answer: {}",
        String::from_utf8_lossy(&resp)
    );
    Ok(took)
}

/// A loopback HTTP server answering every request with a small 200, one connection at a time
/// (the benchmark's requests are sequential).
fn serve_upstream() -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding the upstream server")?;
    let addr = listener.local_addr()?;
    std::thread::Builder::new()
        .name("bench-upstream".into())
        .spawn(move || {
            for mut conn in listener.incoming().flatten() {
                let _ = conn.set_read_timeout(Some(REQUEST_TIMEOUT));
                let _ = conn.set_nodelay(true);
                let mut head = Vec::with_capacity(512);
                let mut buf = [0u8; 2048];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(k) => head.extend_from_slice(&buf[..k]),
                    }
                }
                let _ = conn.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                );
                let _ = conn.shutdown(Shutdown::Write);
            }
        })?;
    Ok(addr)
}
