//! Benchmark 6, a burst after a quiet period (issue 9): nothing runs for `--quiet-seconds` (so the
//! warm pool is at its idle size), then `--burst-size` clients, each on a connection opened
//! beforehand, are released at once and each creates a sandbox and runs `print(1)` in it. Timed per
//! client from the common release to its first result. Memory (host, server, the pool's sandboxes)
//! is read before, at the peak, after deleting, and after another quiet period, to show what the
//! pool costs as it grows with demand and shrinks when idle.

use crate::bench::{Conditions, Ctx, Watch, FIRST_CODE};
use crate::http::Conn;
use crate::machine;
use crate::server;
use crate::stats::{fmt_bytes, Samples, Summary};
use serde::Serialize;
use std::collections::HashSet;
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

/// CubeSandbox's published figure for 50 creations in parallel, quoted (not measured here).
pub const CUBE_P95_MS: f64 = 508.4;
pub const CUBE_SOURCE: &str =
    "CubeSandbox's benchmark report of 2026-06-01 (TencentCloud/CubeSandbox, \
     `docs/blog/posts/2026-06-01-cubesandbox-perf-benchmark.md`, §3.2): `POST /sandboxes` until \
     `running`, 50 concurrent, 500 requests, avg 276.1 ms, p95 508.4 ms, max 681.3 ms, on a \
     bare-metal host with 96 logical cores running KVM microVMs (2 vCPU / 2 GiB each)";

/// Memory at one moment of the burst.
#[derive(Debug, Clone, Serialize, Default)]
pub struct MemPoint {
    pub label: String,
    /// Host used memory (MemTotal − MemAvailable).
    pub host_used: u64,
    pub server_rss: u64,
    pub zygote_pss: u64,
    /// Sandboxes handed out by the burst that are still alive, and their cgroups' usage.
    pub handed_out: usize,
    pub handed_out_usage: u64,
    /// Every other sandbox cgroup: the warm pool (nothing else runs during the burst).
    pub pooled: usize,
    pub pooled_usage: u64,
    pub pooled_pss: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct BurstResult {
    pub conditions: Conditions,
    pub quiet_s: f64,
    pub size: usize,
    /// Release → `print(1)`'s result, per client.
    pub first_result: Summary,
    /// Release → `POST /v1/sandboxes` answered.
    pub create: Summary,
    /// The first `POST …/execute`, after the create.
    pub first_exec: Summary,
    /// Release → the last client's result.
    pub wall_ms: f64,
    pub errors: usize,
    pub first_errors: Vec<String>,
    pub memory: Vec<MemPoint>,
    pub delete_total_s: f64,
}

struct ClientOutcome {
    id: Option<String>,
    create: Option<Duration>,
    done: Option<Duration>,
    error: Option<String>,
}

pub fn burst(ctx: &mut Ctx) -> anyhow::Result<BurstResult> {
    let o = ctx.opts;
    ctx.ensure_instance()?;
    let watch = Watch::start(ctx);
    let quiet = Duration::from_secs_f64(o.quiet_seconds);
    eprintln!(
        "[burst] quiet for {:.0} s, then {} clients create + print(1) at once",
        o.quiet_seconds, o.burst_size
    );
    std::thread::sleep(quiet);
    let mut memory = vec![mem_point(
        ctx,
        "after the quiet period, before the burst",
        &[],
    )];

    let to = ctx.server.endpoint();
    let barrier = Arc::new(Barrier::new(o.burst_size + 1));
    let start: Arc<OnceLock<Instant>> = Arc::new(OnceLock::new());
    let clients: Vec<_> = (0..o.burst_size)
        .map(|_| {
            let (barrier, start, to) = (barrier.clone(), start.clone(), to.clone());
            std::thread::spawn(move || {
                let mut c = Conn::new(&to);
                // Connected before the release: the burst times sandboxes, not TCP handshakes.
                let connected = c.request("GET", "/v1/health", None);
                barrier.wait();
                let t0 = *start.get().expect("set before the release");
                let mut out = ClientOutcome {
                    id: None,
                    create: None,
                    done: None,
                    error: None,
                };
                if let Err(e) = connected {
                    out.error = Some(format!("connect: {e:#}"));
                    return out;
                }
                match server::create(&mut c) {
                    Ok(id) => {
                        out.create = Some(t0.elapsed());
                        match server::execute(&mut c, &id, FIRST_CODE) {
                            Ok(r) if r["stdout"] == "1\n" => out.done = Some(t0.elapsed()),
                            Ok(r) => out.error = Some(format!("print(1) printed {}", r["stdout"])),
                            Err(e) => out.error = Some(format!("execute: {e:#}")),
                        }
                        out.id = Some(id);
                    }
                    Err(e) => out.error = Some(format!("create: {e:#}")),
                }
                out
            })
        })
        .collect();
    // Every client is connected and waiting; the clock starts as they are released.
    let _ = start.set(Instant::now());
    barrier.wait();
    let mut outcomes = Vec::new();
    for c in clients {
        outcomes.push(
            c.join()
                .map_err(|_| anyhow::anyhow!("a burst client panicked"))?,
        );
    }
    let (mut first, mut create, mut exec) = (Samples::new(), Samples::new(), Samples::new());
    let mut errors = Vec::new();
    let mut ids = Vec::new();
    for out in outcomes {
        if let (Some(cr), Some(done)) = (out.create, out.done) {
            first.push(done);
            create.push(cr);
            exec.push(done - cr);
        }
        errors.extend(out.error);
        ids.extend(out.id);
    }
    if let Some(id) = ids.first() {
        ctx.note_instance(id);
    }
    let first = first.summary();
    eprintln!(
        "[burst] {} results: p50 {:.1} ms p95 {:.1} ms p99 {:.1} ms, {} errors",
        first.n,
        first.p50,
        first.p95,
        first.p99,
        errors.len()
    );
    memory.push(mem_point(
        ctx,
        "at the peak: the burst's sandboxes alive",
        &ids,
    ));

    let mut c = ctx.conn();
    let t_del = Instant::now();
    for id in &ids {
        if let Err(e) = server::delete(&mut c, id) {
            errors.push(format!("delete {id}: {e:#}"));
        }
    }
    let delete_total_s = t_del.elapsed().as_secs_f64();
    wait_gone(ctx, &ids, Duration::from_secs(10));
    std::thread::sleep(Duration::from_secs(3));
    memory.push(mem_point(ctx, "3 s after deleting them", &[]));
    eprintln!("[burst] quiet for {:.0} s again", o.quiet_seconds);
    std::thread::sleep(quiet);
    memory.push(mem_point(ctx, "after another quiet period", &[]));
    for m in &memory {
        eprintln!(
            "[burst] {}: host used {}, server RSS {}, pool {} ({})",
            m.label,
            fmt_bytes(m.host_used as f64),
            fmt_bytes(m.server_rss as f64),
            m.pooled,
            fmt_bytes(m.pooled_usage as f64)
        );
    }
    let n_errors = errors.len();
    errors.truncate(5);
    Ok(BurstResult {
        conditions: watch.finish(ctx),
        quiet_s: o.quiet_seconds,
        size: o.burst_size,
        wall_ms: first.max,
        first_result: first,
        create: create.summary(),
        first_exec: exec.summary(),
        errors: n_errors,
        first_errors: errors,
        memory,
        delete_total_s,
    })
}

/// Memory now; `handed_out` are the burst's live sandboxes, every other sandbox cgroup is
/// counted as pooled.
fn mem_point(ctx: &Ctx, label: &str, handed_out: &[String]) -> MemPoint {
    let mut m = MemPoint {
        label: label.to_owned(),
        host_used: machine::meminfo().used(),
        server_rss: machine::rss_of(ctx.server.pid()),
        zygote_pss: ctx.zygote_pss(),
        handed_out: handed_out.len(),
        ..MemPoint::default()
    };
    let Some(inst) = &ctx.instance else {
        return m;
    };
    let ours: HashSet<&str> = handed_out.iter().map(String::as_str).collect();
    let pooled: Vec<String> = server::leftover_groups(inst)
        .into_iter()
        .filter(|g| !ours.contains(g.as_str()))
        .collect();
    let limit = Duration::from_secs(20);
    let h = machine::group_memory(inst, handed_out, limit);
    let p = machine::group_memory(inst, &pooled, limit);
    m.handed_out_usage = h.usage;
    m.pooled = p.groups;
    m.pooled_usage = p.usage;
    m.pooled_pss = p.pss;
    m
}

/// Waits up to `limit` for the cgroups of `ids` to be removed.
fn wait_gone(ctx: &Ctx, ids: &[String], limit: Duration) {
    let Some(inst) = &ctx.instance else {
        return;
    };
    let t = Instant::now();
    while t.elapsed() < limit && ids.iter().any(|id| inst.join(id).exists()) {
        std::thread::sleep(Duration::from_millis(100));
    }
}
