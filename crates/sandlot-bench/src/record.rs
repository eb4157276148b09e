//! Benchmark (issue 8): what the record costs a request. The hot `1+1` round trip against two
//! servers started side by side for this benchmark: one with the record on (the audit log as
//! shipped, metrics, and traces exported over OTLP/HTTP to a sink on loopback that this
//! benchmark runs and that accepts and drops every batch) and one with it off
//! (`SANDLOT_AUDIT=off`, no OTLP endpoint; metrics are always counted, they are atomics).
//! Both run with API keys and the shipped policy, so governance costs both alike. Rounds
//! alternate between them, and which goes first, as the governance benchmark does.
//!
//! The target (issue 8) is p50(on) / p50(off) ≤ 1.10. Afterwards the on server's `/metrics`
//! is read (its execution counter must account for every timed `1+1`) and the sink says how
//! many span batches it was sent.

use crate::bench::{Conditions, Ctx, Watch, HOT_CODE};
use crate::governance::process_cpu_us;
use crate::http::Conn;
use crate::server::{self, Server};
use crate::stats::{median, Samples, Summary};
use anyhow::{bail, Context};
use serde::Serialize;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The bound on p50(on) / p50(off).
pub const TARGET_RATIO: f64 = 1.10;

/// What the on server records (`--record-on`): everything as shipped (the benchmark the
/// target judges), or one part alone, to tell what each costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordOn {
    /// The audit log, metrics and OTLP traces
    All,
    /// The audit log and metrics, no OTLP endpoint
    Audit,
    /// Metrics and OTLP traces, `SANDLOT_AUDIT=off`
    Traces,
}

impl RecordOn {
    pub fn describe(self) -> &'static str {
        match self {
            RecordOn::All => "audit, metrics and traces",
            RecordOn::Audit => "audit and metrics (no traces)",
            RecordOn::Traces => "metrics and traces (no audit)",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct RecordResult {
    pub conditions: Conditions,
    /// What the on server recorded; the target is judged only on `all`.
    pub on_records: RecordOn,
    pub rounds: usize,
    pub per_round: usize,
    pub warmup: usize,
    /// Hot `1+1`, client round trip: record on and off.
    pub on: Summary,
    pub off: Summary,
    /// The servers' own `duration_ms` of the same executions.
    pub on_server_ms: Summary,
    pub off_server_ms: Summary,
    pub ratio_p50: f64,
    pub ratio_p99: f64,
    /// The server process's CPU time per timed `1+1` (all its threads, from
    /// `/proc/<pid>/task/*/schedstat`), µs; 0 when unreadable.
    pub on_cpu_us: f64,
    pub off_cpu_us: f64,
    /// p50(on)/p50(off) of each round: min, median, max.
    pub round_ratio: (f64, f64, f64),
    /// `sandlot_executions_total` on the on server after the run (all end states).
    pub executions_counted: f64,
    /// OTLP export requests and bytes the sink received from the on server.
    pub otlp_requests: u64,
    pub otlp_bytes: u64,
    pub target_ratio: f64,
}

/// A loopback OTLP/HTTP endpoint that reads each request and answers 200 with an empty
/// (valid, empty protobuf) body.
struct Sink {
    addr: std::net::SocketAddr,
    requests: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
}

impl Sink {
    fn start() -> anyhow::Result<Sink> {
        let listener = TcpListener::bind("127.0.0.1:0").context("binding the OTLP sink")?;
        let addr = listener.local_addr()?;
        let (requests, bytes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (r, b) = (requests.clone(), bytes.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { break };
                let (r, b) = (r.clone(), b.clone());
                std::thread::spawn(move || {
                    let _ = serve_sink(stream, &r, &b);
                });
            }
        });
        Ok(Sink {
            addr,
            requests,
            bytes,
        })
    }
}

fn serve_sink(stream: TcpStream, requests: &AtomicU64, bytes: &AtomicU64) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut w = stream.try_clone()?;
    let mut r = BufReader::new(stream);
    loop {
        let mut len = 0usize;
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Ok(());
        }
        loop {
            line.clear();
            r.read_line(&mut line)?;
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; len];
        r.read_exact(&mut body)?;
        requests.fetch_add(1, Ordering::Relaxed);
        bytes.fetch_add(len as u64, Ordering::Relaxed);
        w.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n",
        )?;
    }
}

fn start(ctx: &Ctx, name: &str, envs: &[(&str, &str)]) -> anyhow::Result<Server> {
    let dir = ctx.work.join(format!("record-{name}"));
    Server::start_env(
        &ctx.opts.sandlot,
        &dir.join("data"),
        &ctx.work.join(format!("server-record-{name}.log")),
        &ctx.opts.env_dir(),
        &[],
        envs,
    )
    .with_context(|| format!("starting the record-{name} server"))
}

/// One timed `1+1`; checks the answer. The client's round trip and the server's `duration_ms`.
fn hot_once(c: &mut Conn, id: &str) -> anyhow::Result<(Duration, Option<f64>)> {
    let t = Instant::now();
    let r = server::execute(c, id, HOT_CODE)?;
    let d = t.elapsed();
    if r["result"]["text/plain"] != "2" {
        bail!("1+1 answered {}", r["result"]);
    }
    Ok((d, r["duration_ms"].as_f64()))
}

/// One server's samples over the timed rounds.
#[derive(Default)]
struct Side {
    rtt: Samples,
    server_ms: Vec<f64>,
    round_p50: Vec<f64>,
    cpu_us: f64,
}

/// The sum of `sandlot_executions_total` over its end states.
fn executions_counted(c: &mut Conn) -> anyhow::Result<f64> {
    let r = c.request("GET", "/metrics", None)?;
    if r.status != 200 {
        bail!("GET /metrics answered {}: {}", r.status, r.text());
    }
    let text = String::from_utf8_lossy(&r.body).into_owned();
    Ok(text
        .lines()
        .filter(|l| l.starts_with("sandlot_executions_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

/// Runs the comparison: `iters` timed `1+1` on each server in rounds of `per_round`, after
/// `warmup` untimed ones each, stopping early (after a whole round) past `limit`.
pub fn record(
    ctx: &Ctx,
    iters: usize,
    per_round: usize,
    warmup: usize,
    limit: Duration,
) -> anyhow::Result<RecordResult> {
    let watch = Watch::start(ctx);
    let per_round = per_round.min(iters).max(1);
    let rounds = iters.div_ceil(per_round);
    let sink = Sink::start()?;
    let endpoint = format!("http://{}", sink.addr);
    let what = ctx.opts.record_on;
    eprintln!(
        "[record] starting a server with {} (OTLP sink at {endpoint})",
        what.describe()
    );
    // The SDK's batching as shipped: an export every 5 s at most, 512 spans each. Both
    // servers get every switch explicitly, so that none is inherited from the harness's
    // environment (an empty endpoint is no endpoint).
    let traces = format!("{endpoint}/v1/traces");
    let (audit, base, traces) = match what {
        RecordOn::All => ("on", endpoint.as_str(), traces.as_str()),
        RecordOn::Audit => ("on", "", ""),
        RecordOn::Traces => ("off", endpoint.as_str(), traces.as_str()),
    };
    let on_server = start(
        ctx,
        "on",
        &[
            ("SANDLOT_AUDIT", audit),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", base),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces),
        ],
    )?;
    eprintln!("[record] starting a server with the record off (SANDLOT_AUDIT=off, no OTLP)");
    let off_server = start(
        ctx,
        "off",
        &[
            ("SANDLOT_AUDIT", "off"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", ""),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", ""),
        ],
    )?;
    let mut on_c = Conn::new(&on_server.endpoint());
    let mut off_c = Conn::new(&off_server.endpoint());
    let counted_before = executions_counted(&mut on_c).unwrap_or(0.0);
    let on_id = server::create(&mut on_c)?;
    let off_id = server::create(&mut off_c)?;
    for _ in 0..warmup {
        hot_once(&mut on_c, &on_id)?;
        hot_once(&mut off_c, &off_id)?;
    }
    eprintln!(
        "[record] {rounds} rounds of {per_round} `1+1` on each (after {warmup} warm-up each), alternating"
    );
    let (mut on, mut off) = (Side::default(), Side::default());
    let t_loop = Instant::now();
    let mut done = 0;
    for r in 0..rounds {
        if r > 0 && t_loop.elapsed() > limit {
            eprintln!("[record] time limit reached after {r} rounds");
            break;
        }
        let order = if r % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for recorded in order {
            let (c, id, side, pid) = if recorded {
                (&mut on_c, on_id.as_str(), &mut on, on_server.pid())
            } else {
                (&mut off_c, off_id.as_str(), &mut off, off_server.pid())
            };
            let cpu0 = process_cpu_us(pid);
            let mut round = Samples::new();
            for _ in 0..per_round {
                let (d, srv) = hot_once(c, id)?;
                round.push(d);
                side.server_ms.extend(srv);
            }
            side.cpu_us += process_cpu_us(pid) - cpu0;
            side.round_p50.push(round.summary().p50);
            side.rtt.extend(&round);
        }
        done += 1;
    }
    let counted = executions_counted(&mut on_c)? - counted_before;
    server::delete(&mut on_c, &on_id)?;
    server::delete(&mut off_c, &off_id)?;
    // Stopping the on server flushes its last spans to the sink.
    drop(on_server);
    drop(off_server);
    let (on_s, off_s) = (on.rtt.summary(), off.rtt.summary());
    let expected = (warmup + on_s.n) as f64;
    if counted < expected {
        bail!("the on server's metrics counted {counted} executions of the {expected} it ran");
    }
    let ratios: Vec<f64> = on
        .round_p50
        .iter()
        .zip(&off.round_p50)
        .map(|(a, b)| a / b)
        .collect();
    let round_ratio = (
        ratios.iter().copied().fold(f64::INFINITY, f64::min),
        median(&ratios),
        ratios.iter().copied().fold(0.0, f64::max),
    );
    let (on_cpu_us, off_cpu_us) = (
        on.cpu_us / on_s.n.max(1) as f64,
        off.cpu_us / off_s.n.max(1) as f64,
    );
    eprintln!(
        "[record] hot 1+1: on p50 {:.3} ms p99 {:.3} ms; off p50 {:.3} ms p99 {:.3} ms; on/off p50 {:.3}; \
         server CPU per 1+1 on {on_cpu_us:.0} µs off {off_cpu_us:.0} µs; {} OTLP exports ({} bytes)",
        on_s.p50,
        on_s.p99,
        off_s.p50,
        off_s.p99,
        on_s.p50 / off_s.p50,
        sink.requests.load(Ordering::Relaxed),
        sink.bytes.load(Ordering::Relaxed),
    );
    Ok(RecordResult {
        conditions: watch.finish(ctx),
        on_records: what,
        rounds: done,
        per_round,
        warmup,
        ratio_p50: on_s.p50 / off_s.p50,
        ratio_p99: on_s.p99 / off_s.p99,
        on: on_s,
        off: off_s,
        on_server_ms: Summary::of(&on.server_ms),
        off_server_ms: Summary::of(&off.server_ms),
        on_cpu_us,
        off_cpu_us,
        round_ratio,
        executions_counted: counted,
        otlp_requests: sink.requests.load(Ordering::Relaxed),
        otlp_bytes: sink.bytes.load(Ordering::Relaxed),
        target_ratio: TARGET_RATIO,
    })
}
