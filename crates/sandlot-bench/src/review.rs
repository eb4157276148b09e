//! Benchmark 18 (issue 23): approval decision → held action resumes. In process: the server's
//! own reviews (`sandlot_service::reviews::Reviews`) over a SQLite store in the scratch
//! directory, a policy set with a `@review` permit, and one waiting caller per review (a task
//! in `Reviews::wait`, as a REST execute with `?review_wait=` is). Timed: from the moment the
//! approver's `decide` starts (its store update, journal entry and wake-up included) until the
//! waiting caller has the approved review *and has released it* (`Reviews::release`, the
//! conditional update that lets the action run once). Target (issue 23): ≤ 10 ms.
//! Loopback HTTP adds one request's round trip on each side.

use crate::stats::percentile;
use anyhow::Context;
use sandlot_policy::{GateRequest, PolicyEngine, PolicyPrincipal, Query, SandboxRef};
use sandlot_service::reviews::Reviews;
use sandlot_types::{Principal, Role};
use serde::Serialize;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The target, ms.
pub const TARGET_MS: f64 = 10.0;

#[derive(Debug, Clone, Serialize)]
pub struct ReviewBenchResult {
    pub samples: usize,
    /// Approval → the waiting caller released the action, ms.
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// The approver's `decide` alone (store update, journal, wake-up), ms.
    pub decide_p50_ms: f64,
    pub target_ms: f64,
    pub target_met: bool,
}

pub fn run(samples: usize, work: &Path) -> anyhow::Result<ReviewBenchResult> {
    let dir = tempfile::Builder::new()
        .prefix("review-bench-")
        .tempdir_in(work)
        .context("scratch directory")?;
    let store = Arc::new(sandlot_store::Store::open(&dir.path().join("sandlot.db"))?);
    let journal = sandlot_store::Journal::start(store.clone());
    let reviews = Arc::new(Reviews::new(store, journal.clone()));
    let engine = PolicyEngine::from_text(&format!(
        "{}\n@id(\"review-all-exec\")\n@review(\"benchmark\")\n\
         permit (principal, action == Sandlot::Action::\"execute\", resource);\n",
        sandlot_policy::DEFAULT_POLICIES
    ))?;
    let asker = PolicyPrincipal {
        key_id: "key_asker".into(),
        key_prefix: "asker000".into(),
        tenant: "acme".into(),
        role: "admin".into(),
        plan: "free".into(),
    };
    let approver = Principal {
        key_id: "key_approver".into(),
        key_prefix: "approver".into(),
        tenant: "acme".into(),
        role: Role::Admin,
        plan: "free".into(),
    };
    let d = engine.decide(&Query::new(
        asker.clone(),
        GateRequest::Execute {
            sandbox: SandboxRef {
                id: "sb_bench".into(),
                tenant: "acme".into(),
                template: "default".into(),
                tier: "isolated".into(),
            },
            code_bytes: 3,
            language: "bash".into(),
            code: "1+1".into(),
        },
    ));
    anyhow::ensure!(d.needs_review(), "the benchmark policy did not hold: {d:?}");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut total = Vec::with_capacity(samples);
    let mut decide = Vec::with_capacity(samples);
    for i in 0..samples + 20 {
        let r = reviews
            .hold(
                &asker,
                &d,
                "dec_bench",
                "Sandbox::\"sb_bench\"".into(),
                format!("fp{i}"),
                serde_json::json!({}),
            )
            .map_err(|e| anyhow::anyhow!("{}", e.message))?;
        let (rv, id) = (reviews.clone(), r.id.clone());
        let waiter = rt.spawn(async move {
            let got = rv.wait(&id, Duration::from_secs(30)).await?;
            rv.release(&got)?;
            Ok::<_, sandlot_types::ApiError>(Instant::now())
        });
        // Let the waiter reach its wait.
        std::thread::sleep(Duration::from_millis(2));
        let t0 = Instant::now();
        reviews
            .decide(&approver, &r.id, true, "bench")
            .map_err(|e| anyhow::anyhow!("{}", e.message))?;
        let t_decided = t0.elapsed();
        let resumed = rt
            .block_on(waiter)?
            .map_err(|e| anyhow::anyhow!("{}", e.message))?;
        if i >= 20 {
            total.push((resumed - t0).as_secs_f64() * 1e3);
            decide.push(t_decided.as_secs_f64() * 1e3);
        }
    }
    journal.flush();
    total.sort_by(f64::total_cmp);
    decide.sort_by(f64::total_cmp);
    let p99 = percentile(&total, 99.0);
    Ok(ReviewBenchResult {
        samples,
        p50_ms: percentile(&total, 50.0),
        p90_ms: percentile(&total, 90.0),
        p99_ms: p99,
        max_ms: *total.last().unwrap_or(&0.0),
        decide_p50_ms: percentile(&decide, 50.0),
        target_ms: TARGET_MS,
        target_met: p99 <= TARGET_MS,
    })
}

pub fn print(r: &ReviewBenchResult) {
    eprintln!(
        "[review] approval → action released: p50 {:.3} ms p90 {:.3} ms p99 {:.3} ms max {:.3} ms \
         (decide alone p50 {:.3} ms); target ≤ {} ms: {}",
        r.p50_ms,
        r.p90_ms,
        r.p99_ms,
        r.max_ms,
        r.decide_p50_ms,
        r.target_ms,
        if r.target_met { "met" } else { "NOT met" }
    );
}
