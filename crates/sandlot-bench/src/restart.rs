//! Benchmark 5, restart in place (issue 9): a cell kills its own driver with SIGKILL; the runtime
//! boots fresh processes for the same sandbox, and the next cell (`1+1`) answers from them. Timed
//! from sending the kill cell to the next cell's result, with the kill cell's own round trip apart.
//! Each sample is checked to be a real restart: a variable set before the kill is gone after it,
//! and the sandbox counts its restarts.

use crate::bench::{Conditions, Ctx, Watch, HOT_CODE};
use crate::server;
use crate::stats::{Samples, Summary};
use anyhow::{bail, Context};
use serde::Serialize;
use serde_json::json;
use std::time::{Duration, Instant};

/// The cell that kills the driver it runs in.
pub const KILL_CODE: &str = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)";
/// State the restart must lose.
const MARK_CODE: &str = "sandlot_bench_mark = 1";
const CHECK_CODE: &str = "'sandlot_bench_mark' in globals()";
/// Pause before each kill, so the pool's refill after a create or the previous restart's
/// teardown does not share the measured span.
const SETTLE: Duration = Duration::from_millis(150);

#[derive(Debug, Clone, Serialize)]
pub struct RestartResult {
    pub conditions: Conditions,
    pub sandboxes: usize,
    pub restarts_per_sandbox: usize,
    /// Sending the kill cell → the next cell's result.
    pub total: Summary,
    /// The kill cell's own round trip (its response comes back once the driver is dead).
    pub kill_cell: Summary,
    /// The next cell's round trip (it waits for the fresh processes).
    pub next_cell: Summary,
    /// The server's `duration_ms` of that next cell.
    pub next_cell_server_ms: Summary,
    /// `1+1` on the same sandbox just before the kill, for reference.
    pub hot_before: Summary,
    /// `end_state` and `restarted.reason` of the kill cells, with counts.
    pub kill_states: Vec<(String, usize)>,
    /// Kill cells whose result carried no `restarted` field.
    pub without_restarted_field: usize,
    /// Sandboxes whose `restart_count` did not match the kills sent to them.
    pub count_mismatches: Vec<String>,
}

pub fn restart(ctx: &mut Ctx) -> anyhow::Result<RestartResult> {
    let o = ctx.opts;
    let watch = Watch::start(ctx);
    let limit = Duration::from_secs(o.loop_seconds);
    let per = o.restarts_per_sandbox;
    eprintln!(
        "[restart] {} kills of the driver, {per} per sandbox (one more than 5 within 60 s would mark it failed)",
        o.restart_iters
    );
    let mut c = ctx.conn();
    let (mut total, mut kill, mut next, mut hot) = (
        Samples::new(),
        Samples::new(),
        Samples::new(),
        Samples::new(),
    );
    let mut next_srv = Vec::new();
    let mut states: Vec<(String, usize)> = Vec::new();
    let mut without_field = 0;
    let mut mismatches = Vec::new();
    let mut sandboxes = 0;
    let t_loop = Instant::now();
    while total.len() < o.restart_iters {
        if t_loop.elapsed() > limit {
            eprintln!(
                "[restart] time limit reached after {} restarts",
                total.len()
            );
            break;
        }
        let id = server::create(&mut c)?;
        ctx.note_instance(&id);
        sandboxes += 1;
        server::execute(&mut c, &id, HOT_CODE)?;
        let mut kills: u64 = 0;
        for _ in 0..per {
            if total.len() >= o.restart_iters || t_loop.elapsed() > limit {
                break;
            }
            server::execute(&mut c, &id, MARK_CODE)?;
            std::thread::sleep(SETTLE);
            let t = Instant::now();
            server::execute(&mut c, &id, HOT_CODE)?;
            hot.push(t.elapsed());

            let t0 = Instant::now();
            let k = server::execute_raw(
                &mut c,
                &id,
                &json!({"code": KILL_CODE, "language": "python"}),
            )
            .context("the kill cell")?;
            let t1 = Instant::now();
            kills += 1;
            let next_r = server::execute_raw(
                &mut c,
                &id,
                &json!({"code": HOT_CODE, "language": "python"}),
            )
            .context("the cell after the kill (did the sandbox restart in place?)")?;
            let t2 = Instant::now();
            if k["end_state"] == "ok" {
                bail!("the kill cell ended ok: the driver did not die ({k})");
            }
            if next_r["end_state"] != "ok" || next_r["result"]["text/plain"] != "2" {
                bail!(
                    "after the kill, 1+1 ended {} with {}: the sandbox did not restart in place",
                    next_r["end_state"],
                    next_r["result"]
                );
            }
            let state = format!(
                "{} ({})",
                k["end_state"].as_str().unwrap_or("?"),
                k["restarted"]["reason"]
                    .as_str()
                    .unwrap_or("no restarted field")
            );
            match states.iter_mut().find(|(s, _)| *s == state) {
                Some(slot) => slot.1 += 1,
                None => states.push((state, 1)),
            }
            if k["restarted"].is_null() {
                without_field += 1;
            }
            total.push(t2 - t0);
            kill.push(t1 - t0);
            next.push(t2 - t1);
            if let Some(ms) = next_r["duration_ms"].as_f64() {
                next_srv.push(ms);
            }
            let lost = server::execute(&mut c, &id, CHECK_CODE)?;
            if lost["result"]["text/plain"] != "False" {
                bail!("a variable set before the kill survived it: the driver was not restarted");
            }
        }
        let count = server::sandbox(&mut c, &id)?["restart_count"].as_u64();
        if count != Some(kills) {
            mismatches.push(format!("{id}: restart_count {count:?} after {kills} kills"));
        }
        server::delete(&mut c, &id)?;
    }
    let r = RestartResult {
        conditions: watch.finish(ctx),
        sandboxes,
        restarts_per_sandbox: per,
        total: total.summary(),
        kill_cell: kill.summary(),
        next_cell: next.summary(),
        next_cell_server_ms: Summary::of(&next_srv),
        hot_before: hot.summary(),
        kill_states: states,
        without_restarted_field: without_field,
        count_mismatches: mismatches,
    };
    eprintln!(
        "[restart] kill → next result p50 {:.2} ms p99 {:.2} ms (kill cell p50 {:.2} ms)",
        r.total.p50, r.total.p99, r.kill_cell.p50
    );
    Ok(r)
}
