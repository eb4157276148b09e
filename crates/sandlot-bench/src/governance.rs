//! Benchmark 15 (issue 7): what governance costs a request. The hot `1+1` round trip of
//! benchmark 2, and optionally create → first result of benchmark 1, against two servers in the
//! same run: the harness's own (as shipped: API keys, the Cedar policy set with the shipped
//! defaults at every gate, each decision journaled, the output guard scanning every result, a
//! canary and proxy environment in every sandbox) and a peer started with `SANDLOT_AUTH=off`
//! (no keys, no policy, no guard; the server refuses that unless it listens on loopback, as it
//! does here). Rounds alternate between the two, and which of them goes first, so drift on the
//! machine (other work, frequency, the other server's pool refilling) falls on both alike.
//!
//! The target (issue 7) is hot `1+1` with governance on within 10% of the same run with it off:
//! p50(on) / p50(off) ≤ 1.10. The on server's journal is read back afterwards, to check that
//! the executions were decided and recorded, and to report the decisions' own latency.

use crate::bench::{Conditions, Ctx, Watch, FIRST_CODE, HOT_CODE};
use crate::http::Conn;
use crate::server::{self, Server};
use crate::stats::{median, Samples, Summary};
use anyhow::{bail, Context};
use serde::Serialize;
use std::time::{Duration, Instant};

/// The bound on p50(on) / p50(off).
pub const TARGET_RATIO: f64 = 1.10;
/// After a timed create's sandbox is deleted, the wait before the next create, so each timed
/// create finds its server's warm pool refilled (a refill is a cold boot of ~16 ms of CPU,
/// which would otherwise land on the other server's next sample).
pub const CREATE_SETTLE: Duration = Duration::from_millis(120);

/// One side's samples: the client's round trip and the server's own `duration_ms`.
#[derive(Debug, Default)]
struct Side {
    rtt: Samples,
    server_ms: Vec<f64>,
    /// Per-round medians of `rtt`, to show the ratio's spread over the run.
    round_p50: Vec<f64>,
    /// The server's CPU time over the timed rounds, µs (every thread of the process).
    cpu_us: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct CreatePair {
    /// `POST /v1/sandboxes` + `print(1)`, end to end.
    pub on: Summary,
    pub off: Summary,
    /// `POST /v1/sandboxes` alone.
    pub on_create: Summary,
    pub off_create: Summary,
    pub ratio_p50: f64,
}

/// The decisions the on server journaled for this benchmark's executions.
#[derive(Debug, Clone, Serialize)]
pub struct Journal {
    /// Execute decisions read back (at most the last 1000).
    pub execute_decisions: usize,
    /// How many of them allowed.
    pub allowed: usize,
    /// The server's own latency of one decision (`latency_us` in the journal), µs.
    pub decide_p50_us: f64,
    pub decide_p99_us: f64,
    /// The policy set in force: its version and how many policies it holds.
    pub policy_version: String,
    pub policies: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct GovernanceResult {
    pub conditions: Conditions,
    pub rounds: usize,
    pub per_round: usize,
    pub warmup: usize,
    /// Hot `1+1`, client round trip, governance on (the harness's server) and off (the peer).
    pub on: Summary,
    pub off: Summary,
    pub on_server_ms: Summary,
    pub off_server_ms: Summary,
    pub ratio_p50: f64,
    pub ratio_p99: f64,
    /// p50(on)/p50(off) of each round: min, median, max.
    pub round_ratio: (f64, f64, f64),
    /// The server process's CPU time per timed `1+1` (all its threads, from
    /// `/proc/<pid>/task/*/schedstat`), µs; 0 when unreadable.
    pub on_cpu_us: f64,
    pub off_cpu_us: f64,
    pub create: Option<CreatePair>,
    pub journal: Option<Journal>,
    /// How long the peer took to start.
    pub off_started_s: f64,
    pub target_ratio: f64,
}

/// Starts the ungoverned peer next to the harness's server, on its own data dir.
fn start_off(ctx: &Ctx) -> anyhow::Result<Server> {
    let dir = ctx.work.join("governance-off");
    let s = Server::start_env(
        &ctx.opts.sandlot,
        &dir.join("data"),
        &ctx.work.join("server-off.log"),
        &ctx.opts.env_dir(),
        &[],
        &[("SANDLOT_AUTH", "off")],
    )
    .context("starting the SANDLOT_AUTH=off peer")?;
    anyhow::ensure!(
        s.key.is_none(),
        "the SANDLOT_AUTH=off peer made an API key; it is not running without governance"
    );
    Ok(s)
}

/// CPU time of every thread of process `pid` so far, µs: the first field of each task's
/// `schedstat` (ns on the CPU). Threads that exited are not counted; the server's workers and
/// writer threads live as long as it does. 0 when unreadable.
pub(crate) fn process_cpu_us(pid: u32) -> f64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    let ns: u64 = tasks
        .filter_map(|t| t.ok())
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    ns as f64 / 1000.0
}

/// One timed `1+1`; checks the answer.
fn hot_once(c: &mut Conn, id: &str) -> anyhow::Result<(Duration, Option<f64>)> {
    let t = Instant::now();
    let r = server::execute(c, id, HOT_CODE)?;
    let d = t.elapsed();
    if r["result"]["text/plain"] != "2" {
        bail!("1+1 answered {}", r["result"]);
    }
    Ok((d, r["duration_ms"].as_f64()))
}

pub fn governance(ctx: &mut Ctx) -> anyhow::Result<GovernanceResult> {
    let o = ctx.opts;
    anyhow::ensure!(
        ctx.server.key.is_some(),
        "the harness's server runs without API keys (is SANDLOT_AUTH=off set in this \
         environment?); the governed side of the comparison needs the shipped defaults"
    );
    let watch = Watch::start(ctx);
    let limit = Duration::from_secs(o.loop_seconds);
    let per_round = o.gov_round.min(o.gov_iters).max(1);
    let rounds = o.gov_iters.div_ceil(per_round);
    eprintln!("[governance] starting a SANDLOT_AUTH=off peer server");
    let off_server = start_off(ctx)?;
    let off_started_s = off_server.started_in.as_secs_f64();
    eprintln!(
        "[governance] peer at {} after {off_started_s:.2} s; {rounds} rounds of {per_round} `1+1` on each \
         (after {} warm-up each), alternating",
        off_server.addr, o.hot_warmup
    );
    let mut on_c = ctx.conn();
    let mut off_c = Conn::new(&off_server.endpoint());
    let on_id = server::create(&mut on_c)?;
    ctx.note_instance(&on_id);
    let off_id = server::create(&mut off_c)?;
    for _ in 0..o.hot_warmup {
        hot_once(&mut on_c, &on_id)?;
        hot_once(&mut off_c, &off_id)?;
    }
    let (mut on, mut off) = (Side::default(), Side::default());
    let t_loop = Instant::now();
    let mut done_rounds = 0;
    for r in 0..rounds {
        if r > 0 && t_loop.elapsed() > limit {
            eprintln!("[governance] time limit reached after {r} rounds");
            break;
        }
        let order: [bool; 2] = if r % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for governed in order {
            let (c, id, side) = if governed {
                (&mut on_c, on_id.as_str(), &mut on)
            } else {
                (&mut off_c, off_id.as_str(), &mut off)
            };
            let pid = if governed {
                ctx.server.pid()
            } else {
                off_server.pid()
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
        done_rounds += 1;
    }
    let journal = match read_journal(&mut on_c) {
        Ok(j) => Some(j),
        Err(e) => {
            eprintln!("[governance] reading the decision journal failed: {e:#}");
            None
        }
    };
    server::delete(&mut on_c, &on_id)?;
    server::delete(&mut off_c, &off_id)?;
    let (on_s, off_s) = (on.rtt.summary(), off.rtt.summary());
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
    eprintln!(
        "[governance] hot 1+1: on p50 {:.3} ms p99 {:.3} ms; off p50 {:.3} ms p99 {:.3} ms; on/off p50 {:.3}",
        on_s.p50,
        on_s.p99,
        off_s.p50,
        off_s.p99,
        on_s.p50 / off_s.p50
    );

    let create = if o.gov_create_iters > 0 {
        Some(create_pair(ctx, &mut on_c, &mut off_c, limit)?)
    } else {
        None
    };
    drop(off_server);
    Ok(GovernanceResult {
        conditions: watch.finish(ctx),
        rounds: done_rounds,
        per_round,
        warmup: o.hot_warmup,
        ratio_p50: on_s.p50 / off_s.p50,
        ratio_p99: on_s.p99 / off_s.p99,
        on: on_s,
        off: off_s,
        on_cpu_us: on.cpu_us / on_s.n.max(1) as f64,
        off_cpu_us: off.cpu_us / off_s.n.max(1) as f64,
        on_server_ms: Summary::of(&on.server_ms),
        off_server_ms: Summary::of(&off.server_ms),
        round_ratio,
        create,
        journal,
        off_started_s,
        target_ratio: TARGET_RATIO,
    })
}

/// create → first result on each server, alternating one by one (which goes first
/// alternating too); the delete and a settle are not timed.
fn create_pair(
    ctx: &Ctx,
    on_c: &mut Conn,
    off_c: &mut Conn,
    limit: Duration,
) -> anyhow::Result<CreatePair> {
    let o = ctx.opts;
    eprintln!(
        "[governance] create + print(1): {} on each (after {} warm-up), alternating",
        o.gov_create_iters, o.warmup
    );
    let mut s = [
        (Samples::new(), Samples::new()),
        (Samples::new(), Samples::new()),
    ];
    let t_loop = Instant::now();
    for i in 0..(o.warmup + o.gov_create_iters) {
        if i >= o.warmup && t_loop.elapsed() > limit {
            eprintln!(
                "[governance] create: time limit reached after {} pairs",
                s[0].0.len()
            );
            break;
        }
        let order: [usize; 2] = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for side in order {
            let c: &mut Conn = if side == 0 { &mut *on_c } else { &mut *off_c };
            let t = Instant::now();
            let id = server::create(c)?;
            let created = t.elapsed();
            let r = server::execute(c, &id, FIRST_CODE)?;
            let total = t.elapsed();
            if r["stdout"] != "1\n" {
                bail!("print(1) in a fresh sandbox printed {:?}", r["stdout"]);
            }
            server::delete(c, &id)?;
            if i >= o.warmup {
                s[side].0.push(total);
                s[side].1.push(created);
            }
            std::thread::sleep(CREATE_SETTLE);
        }
    }
    let [(on, on_create), (off, off_create)] = s;
    let (on, off) = (on.summary(), off.summary());
    eprintln!(
        "[governance] create + print(1): on p50 {:.2} ms p99 {:.2} ms; off p50 {:.2} ms p99 {:.2} ms",
        on.p50, on.p99, off.p50, off.p99
    );
    Ok(CreatePair {
        ratio_p50: on.p50 / off.p50,
        on,
        off,
        on_create: on_create.summary(),
        off_create: off_create.summary(),
    })
}

/// The last execute decisions in the on server's journal, and the policy set in force.
fn read_journal(c: &mut Conn) -> anyhow::Result<Journal> {
    let r = c.request("GET", "/v1/decisions?gate=execute&limit=1000", None)?;
    if r.status != 200 {
        bail!("GET /v1/decisions answered {}: {}", r.status, r.text());
    }
    let v = r.json()?;
    let rows = v["decisions"]
        .as_array()
        .context("GET /v1/decisions answered without `decisions`")?;
    let lat: Vec<f64> = rows
        .iter()
        .filter_map(|d| d["latency_us"].as_f64())
        .collect();
    let allowed = rows.iter().filter(|d| d["allowed"] == true).count();
    let lat = Summary::of(&lat);
    let r = c.request("GET", "/v1/policies", None)?;
    if r.status != 200 {
        bail!("GET /v1/policies answered {}: {}", r.status, r.text());
    }
    let p = r.json()?;
    Ok(Journal {
        execute_decisions: rows.len(),
        allowed,
        decide_p50_us: lat.p50,
        decide_p99_us: lat.p99,
        policy_version: p["version"].as_str().unwrap_or("?").to_owned(),
        policies: p["policies"].as_array().map(Vec::len).unwrap_or(0),
    })
}
