//! Policy decisions (issue 7): the Cedar engine in process with 100 policies loaded, every
//! gate in turn, from 20 principals of 20 tenants; p50/p99 of one `decide` call as the server
//! makes it (building the Cedar request included), against the target of 50 µs p99. Also the
//! same decisions without the engine's guard index (every policy of the gate evaluated), and
//! the time to validate and swap in the set (`PUT /v1/policies`). No server, no I/O. Each
//! decision is timed on the wall clock (the figure judged) and on the thread's CPU clock, which
//! leaves out preemption: on a loaded machine the wall p99 measures the scheduler.

use crate::stats::percentile;
use anyhow::Context;
use sandlot_policy::{testing, PolicyEngine, Query};
use serde::Serialize;
use std::time::Instant;

/// Policies loaded.
pub const POLICIES: usize = 100;
/// The target for one decision, p99.
pub const TARGET_P99_US: f64 = 50.0;
/// Untimed decisions first.
const WARMUP: usize = 2000;

/// Latency of one gate's decisions, µs.
#[derive(Debug, Clone, Serialize)]
pub struct GateLatency {
    pub gate: &'static str,
    pub n: usize,
    pub p50_us: f64,
    pub p99_us: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PolicyBenchResult {
    pub policies: usize,
    pub samples: usize,
    /// All gates together, µs (nearest-rank percentiles).
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    pub mean_us: f64,
    pub per_gate: Vec<GateLatency>,
    /// The same decisions on the thread's CPU clock, µs (without time the thread was not
    /// running; the clock read adds a few hundred ns).
    pub cpu_p50_us: f64,
    pub cpu_p99_us: f64,
    /// The same queries evaluated over every policy of the gate (no guard index), µs.
    pub unindexed_p50_us: f64,
    pub unindexed_p99_us: f64,
    /// Validating and swapping in the 100-policy set, ms (median of 5).
    pub replace_ms: f64,
    pub target_p99_us: f64,
    pub target_met: bool,
    pub allowed: usize,
    pub denied: usize,
}

/// The queries: each gate's sample from 20 principals (tenants t0..t19, some on plans and
/// prefixes the synthetic policies name, so their guards hold for some queries).
fn queries() -> Vec<Query> {
    let mut out = Vec::new();
    for i in 0..20 {
        for mut q in testing::sample_queries() {
            q.principal.key_id = format!("key{i}");
            q.principal.tenant = format!("t{i}");
            q.principal.plan = ["free", "local", "plan2", "pro"][i % 4].to_string();
            q.principal.role = if i % 3 == 0 { "admin" } else { "member" }.to_string();
            if i == 10 {
                q.principal.key_prefix = "revoked0".into();
            }
            out.push(q);
        }
    }
    out
}

/// This thread's CPU time, µs.
fn thread_cpu_us() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e6 + ts.tv_nsec as f64 / 1e3
}

fn summary(mut v: Vec<f64>) -> (f64, f64, f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return (0.0, 0.0, 0.0, 0.0, 0.0);
    }
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    (
        percentile(&v, 50.0),
        percentile(&v, 90.0),
        percentile(&v, 99.0),
        v[v.len() - 1],
        mean,
    )
}

pub fn run(samples: usize) -> anyhow::Result<PolicyBenchResult> {
    let text = testing::policy_set(POLICIES);
    let engine = PolicyEngine::from_text(&text).context("loading the benchmark policy set")?;
    let queries = queries();

    let mut replace = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        engine.replace(&text).context("replacing the policy set")?;
        replace.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    replace.sort_by(f64::total_cmp);

    for i in 0..WARMUP {
        std::hint::black_box(engine.decide(&queries[i % queries.len()]));
    }
    let mut all = Vec::with_capacity(samples);
    let mut cpu = Vec::with_capacity(samples);
    let mut by_gate: Vec<(&'static str, Vec<f64>)> = Vec::new();
    let (mut allowed, mut denied) = (0, 0);
    for i in 0..samples {
        let q = &queries[i % queries.len()];
        let c = thread_cpu_us();
        let t = Instant::now();
        let d = engine.decide(q);
        let us = t.elapsed().as_secs_f64() * 1e6;
        cpu.push(thread_cpu_us() - c);
        if d.allowed {
            allowed += 1;
        } else {
            denied += 1;
        }
        all.push(us);
        let gate = q.gate().as_str();
        match by_gate.iter_mut().find(|(g, _)| *g == gate) {
            Some((_, v)) => v.push(us),
            None => by_gate.push((gate, vec![us])),
        }
    }
    let mut unindexed = Vec::with_capacity(samples);
    for i in 0..samples {
        let q = &queries[i % queries.len()];
        let t = Instant::now();
        std::hint::black_box(engine.decide_unindexed(q));
        unindexed.push(t.elapsed().as_secs_f64() * 1e6);
    }

    let (p50, p90, p99, max, mean) = summary(all);
    let (u50, _, u99, _, _) = summary(unindexed);
    let (c50, _, c99, _, _) = summary(cpu);
    let per_gate = by_gate
        .into_iter()
        .map(|(gate, v)| {
            let n = v.len();
            let (p50_us, _, p99_us, _, _) = summary(v);
            GateLatency {
                gate,
                n,
                p50_us,
                p99_us,
            }
        })
        .collect();
    Ok(PolicyBenchResult {
        policies: engine.info().policies.len(),
        samples,
        p50_us: p50,
        p90_us: p90,
        p99_us: p99,
        max_us: max,
        mean_us: mean,
        per_gate,
        cpu_p50_us: c50,
        cpu_p99_us: c99,
        unindexed_p50_us: u50,
        unindexed_p99_us: u99,
        replace_ms: replace[replace.len() / 2],
        target_p99_us: TARGET_P99_US,
        target_met: p99 <= TARGET_P99_US,
        allowed,
        denied,
    })
}

/// One line per figure, for the console.
pub fn print(r: &PolicyBenchResult) {
    println!(
        "policy: {} policies, {} decisions: p50 {:.1} µs, p90 {:.1} µs, p99 {:.1} µs (target ≤ {:.0} µs: {}), max {:.1} µs; CPU time p50 {:.1} µs, p99 {:.1} µs; without the guard index p50 {:.1} µs, p99 {:.1} µs; replace {:.1} ms",
        r.policies,
        r.samples,
        r.p50_us,
        r.p90_us,
        r.p99_us,
        r.target_p99_us,
        if r.target_met { "met" } else { "missed" },
        r.max_us,
        r.cpu_p50_us,
        r.cpu_p99_us,
        r.unindexed_p50_us,
        r.unindexed_p99_us,
        r.replace_ms
    );
    for g in &r.per_gate {
        println!(
            "  {:<16} n={:<6} p50 {:>6.1} µs  p99 {:>6.1} µs",
            g.gate, g.n, g.p50_us, g.p99_us
        );
    }
}
