//! Targets, the printed report and BENCHMARKS.md.
//!
//! BENCHMARKS.md is prose written by people plus blocks this harness owns, each between
//! `<!-- sandlot-bench:NAME -->` and `<!-- /sandlot-bench:NAME -->`. A run replaces the blocks
//! of the benchmarks it ran, upserts its rows of the targets table, and appends one row to the
//! history; everything outside the blocks is left as it is. A block the document does not
//! have yet is added, under its own heading, before the history.

use crate::bench::{
    Conditions, CreateResult, DensityLevel, DensityResult, HotResult, ThroughputResult,
};
use crate::burst::{self, BurstResult};
use crate::disk::DiskResult;
use crate::machine::Machine;
use crate::restart::RestartResult;
use crate::stats::{fmt_bytes, fmt_ms, Summary};
use std::fmt::Write as _;

const GIB: f64 = (1u64 << 30) as f64;

/// Everything one run measured, and where.
pub struct Run {
    pub command: String,
    pub date: String,
    pub commit: String,
    pub machine: Machine,
    pub server_start_s: f64,
    /// The server's workspace backend, as it logged it at start.
    pub workspaces: Option<String>,
    pub create: Option<CreateResult>,
    pub hot: Option<HotResult>,
    pub density: Option<DensityResult>,
    pub throughput: Option<ThroughputResult>,
    pub restart: Option<RestartResult>,
    pub burst: Option<BurstResult>,
    pub disk: Option<DiskResult>,
}

/// One target of issue 3 or 9 and how this run did against it.
pub struct Target {
    pub key: &'static str,
    pub goal: &'static str,
    pub measured: String,
    /// None: not measured in a way the target can be judged.
    pub pass: Option<bool>,
    pub by: String,
}

impl Target {
    /// A "lower is better" target: `value ≤ limit`.
    fn at_most(
        key: &'static str,
        goal: &'static str,
        value: f64,
        limit: f64,
        unit: &str,
        measured: String,
    ) -> Target {
        let pass = value <= limit;
        let by = if pass {
            format!("{:.0}% of the limit", 100.0 * value / limit)
        } else {
            format!(
                "{:.2}× the limit (+{} {unit})",
                value / limit,
                trim(value - limit)
            )
        };
        Target {
            key,
            goal,
            measured,
            pass: Some(pass),
            by,
        }
    }

    /// A "higher is better" target: `value ≥ floor`.
    fn at_least(
        key: &'static str,
        goal: &'static str,
        value: f64,
        floor: f64,
        unit: &str,
        measured: String,
    ) -> Target {
        let pass = value >= floor;
        let by = if pass {
            format!("{:.2}× the floor", value / floor)
        } else {
            format!(
                "reaches {:.0}% of the floor (−{} {unit})",
                100.0 * value / floor,
                trim(floor - value)
            )
        };
        Target {
            key,
            goal,
            measured,
            pass: Some(pass),
            by,
        }
    }

    fn unmeasured(key: &'static str, goal: &'static str, why: String) -> Target {
        Target {
            key,
            goal,
            measured: why,
            pass: None,
            by: String::new(),
        }
    }

    fn verdict(&self) -> &'static str {
        match self.pass {
            Some(true) => "**pass**",
            Some(false) => "**MISS**",
            None => "not measured",
        }
    }
}

fn trim(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// Order of the rows in the targets table.
const TARGET_KEYS: &[&str] = &[
    "create-p50",
    "create-p99",
    "create-p50-disk",
    "create-vs-cold",
    "hot-p50",
    "hot-vs-jupyter",
    "density-memory",
    "density-answer",
    "density-p99",
    "throughput",
    "restart-p50",
    "burst-p99",
    "disk-write",
    "disk-read",
];

/// The density level the targets are judged at: N = 1000 if measured.
pub const DENSITY_TARGET_N: usize = 1000;

pub fn targets(run: &Run) -> Vec<Target> {
    let mut t = Vec::new();
    if let Some(c) = &run.create {
        let m = |s: &Summary| format!("{} ms", fmt_ms(s.p50));
        t.push(Target::at_most(
            "create-p50",
            "create → first result p50 ≤ 10 ms",
            c.sandlot.p50,
            10.0,
            "ms",
            m(&c.sandlot),
        ));
        t.push(Target::at_most(
            "create-p99",
            "create → first result p99 ≤ 40 ms",
            c.sandlot.p99,
            40.0,
            "ms",
            format!("{} ms", fmt_ms(c.sandlot.p99)),
        ));
        t.push(Target::at_most(
            "create-p50-disk",
            "create → first result p50 ≤ 5 ms with workspaces on disk (issue 9; p99 as above)",
            c.sandlot.p50,
            5.0,
            "ms",
            format!(
                "{} ms (workspaces: {})",
                fmt_ms(c.sandlot.p50),
                backend_kind(run)
            ),
        ));
        t.push(Target::at_least(
            "create-vs-cold",
            "≥ 50× faster than a cold start (p50 / p50)",
            c.ratio_cold,
            50.0,
            "×",
            format!(
                "{:.1}× ({} ms vs {} ms)",
                c.ratio_cold,
                fmt_ms(c.cold_first.p50),
                fmt_ms(c.sandlot.p50)
            ),
        ));
    }
    if let Some(h) = &run.hot {
        t.push(Target::at_most(
            "hot-p50",
            "hot `1+1` over HTTP p50 ≤ 0.5 ms",
            h.sandlot.p50,
            0.5,
            "ms",
            format!("{} ms", fmt_ms(h.sandlot.p50)),
        ));
        match (h.jupyter, h.ratio) {
            (Some(j), Some(_)) => {
                let frac = h.sandlot.p50 / j.p50;
                t.push(Target::at_most(
                    "hot-vs-jupyter",
                    "hot `1+1` ≤ half of Jupyter's (p50 / p50 ≤ 0.5)",
                    frac,
                    0.5,
                    "",
                    format!(
                        "{frac:.2} ({} ms vs {} ms)",
                        fmt_ms(h.sandlot.p50),
                        fmt_ms(j.p50)
                    ),
                ));
            }
            _ => t.push(Target::unmeasured(
                "hot-vs-jupyter",
                "hot `1+1` ≤ half of Jupyter's (p50 / p50 ≤ 0.5)",
                format!(
                    "Jupyter peer not run: {}",
                    h.jupyter_skipped.as_deref().unwrap_or("?")
                ),
            )),
        }
    }
    if let Some(d) = &run.density {
        const MEM: &str = "1000 live sandboxes ≤ 8 GiB host memory in total";
        const ANS: &str = "every one of the 1000 still answering";
        const P99: &str = "hot-exec p99 ≤ 20 ms with 1000 alive";
        match d.levels.iter().find(|l| l.n == DENSITY_TARGET_N) {
            Some(l) => {
                let total = sandlot_total(d, l);
                t.push(Target::at_most(
                    "density-memory",
                    MEM,
                    total / GIB,
                    8.0,
                    "GiB",
                    format!(
                        "{} ({} per sandbox)",
                        fmt_bytes(total),
                        fmt_bytes(l.host_used_delta as f64 / l.n as f64)
                    ),
                ));
                t.push(Target {
                    key: "density-answer",
                    goal: ANS,
                    measured: format!("{}/{}", l.answered, l.n),
                    pass: Some(l.failed == 0 && l.answered == l.n),
                    by: if l.failed == 0 {
                        String::new()
                    } else {
                        format!("{} failed", l.failed)
                    },
                });
                t.push(Target::at_most(
                    "density-p99",
                    P99,
                    l.hot.p99,
                    20.0,
                    "ms",
                    format!("{} ms", fmt_ms(l.hot.p99)),
                ));
            }
            None => {
                let why = match (&d.stopped, d.levels.last()) {
                    (Some(s), _) => s.clone(),
                    (None, Some(l)) => format!("largest N measured was {}", l.n),
                    (None, None) => "nothing measured".into(),
                };
                for (k, g) in [
                    ("density-memory", MEM),
                    ("density-answer", ANS),
                    ("density-p99", P99),
                ] {
                    t.push(Target::unmeasured(k, g, why.clone()));
                }
            }
        }
    }
    if let Some(tp) = &run.throughput {
        t.push(Target::at_least(
            "throughput",
            "≥ 100 create+delete per second sustained",
            tp.rate,
            100.0,
            "/s",
            format!("{:.1}/s ({} in flight)", tp.rate, tp.concurrency),
        ));
    }
    if let Some(r) = &run.restart {
        t.push(Target::at_most(
            "restart-p50",
            "restart in place: kill → next cell's result p50 ≤ 100 ms (issue 9)",
            r.total.p50,
            100.0,
            "ms",
            format!(
                "{} ms (kill cell {} ms, next cell {} ms)",
                fmt_ms(r.total.p50),
                fmt_ms(r.kill_cell.p50),
                fmt_ms(r.next_cell.p50)
            ),
        ));
    }
    if let Some(b) = &run.burst {
        let mut target = Target::at_most(
            "burst-p99",
            "burst of 50 creates after a quiet minute: p99 to first result ≤ 100 ms (issue 9)",
            b.first_result.p99,
            100.0,
            "ms",
            format!(
                "{} ms (p95 {} ms; CubeSandbox, quoted from its report: p95 {:.0} ms on 96 cores)",
                fmt_ms(b.first_result.p99),
                fmt_ms(b.first_result.p95),
                burst::CUBE_P95_MS
            ),
        );
        if b.errors > 0 || b.first_result.n < b.size {
            target.pass = Some(false);
            target.by = format!(
                "{} of {} clients got no result",
                b.size - b.first_result.n.min(b.size),
                b.size
            );
        }
        t.push(target);
    }
    if let Some(d) = &run.disk {
        t.push(Target::at_least(
            "disk-write",
            "workspace write of 1 GiB ≥ 50% of the host disk's, same run (issue 9)",
            100.0 * d.write_ratio,
            50.0,
            "points",
            format!(
                "{:.0}% ({:.0} vs {:.0} MiB/s)",
                100.0 * d.write_ratio,
                d.sandbox_write,
                d.host_write
            ),
        ));
        let (s, h, how) = match (d.read_ratio_cold, d.sandbox_read_cold, d.host_read_cold) {
            (true, Some(s), Some(h)) => (s, h, "after dropping caches"),
            _ => (d.sandbox_read, d.host_read, "right after the write"),
        };
        t.push(Target::at_least(
            "disk-read",
            "workspace read-back of 1 GiB ≥ 50% of the host disk's, same run (issue 9)",
            100.0 * d.read_ratio,
            50.0,
            "points",
            format!(
                "{:.0}% ({s:.0} vs {h:.0} MiB/s, {how})",
                100.0 * d.read_ratio
            ),
        ));
    }
    t
}

/// The workspace backend's kind (`btrfs`, …) from the server's log line, or why it is unknown.
fn backend_kind(run: &Run) -> String {
    match &run.workspaces {
        Some(w) => w.split(" (").next().unwrap_or(w).to_owned(),
        None => "not logged by this server".into(),
    }
}

/// What sandlot holds with N sandboxes alive: the host's used memory over the baseline, plus
/// the zygote and the server as they were at the baseline.
pub fn sandlot_total(d: &DensityResult, l: &DensityLevel) -> f64 {
    (l.host_used_delta + d.baseline_zygote_pss + d.baseline_server_rss) as f64
}

fn summary_row(out: &mut String, name: &str, s: &Summary) {
    let _ = writeln!(
        out,
        "| {name} | {} | {} | {} | {} | {} | {} |",
        fmt_ms(s.p50),
        fmt_ms(s.p90),
        fmt_ms(s.p99),
        fmt_ms(s.min),
        fmt_ms(s.max),
        s.n
    );
}

const SUMMARY_HEADER: &str =
    "| ms | p50 | p90 | p99 | min | max | n |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n";

fn provenance(run: &Run, c: &Conditions) -> String {
    format!(
        "_Measured {} with `{}` at commit `{}` on {}; took {:.0} s; load average {} → {}; zygote restarts during it: {}; workspaces: {}._\n\n",
        run.date,
        run.command,
        run.commit,
        run.machine.describe(),
        c.seconds,
        c.load_before,
        c.load_after,
        c.zygote_restarts,
        backend_kind(run)
    )
}

pub fn create_block(run: &Run, c: &CreateResult) -> String {
    let mut o = provenance(run, &c.conditions);
    o.push_str(SUMMARY_HEADER);
    summary_row(
        &mut o,
        "**sandlot**: `POST /v1/sandboxes` + `print(1)` over HTTP",
        &c.sandlot,
    );
    summary_row(
        &mut o,
        "… of which `POST /v1/sandboxes` (201)",
        &c.sandlot_create,
    );
    summary_row(
        &mut o,
        "… of which the first `POST …/execute`",
        &c.sandlot_first_exec,
    );
    summary_row(
        &mut o,
        "cold start: `python -c \"import …; print(1)\"`, `1` on stdout",
        &c.cold_first,
    );
    summary_row(&mut o, "cold start, until the process exited", &c.cold_exit);
    match &c.bwrap {
        Some((f, e)) => {
            summary_row(&mut o, "bubblewrap + cold start, `1` on stdout", f);
            summary_row(&mut o, "bubblewrap + cold start, until exit", e);
        }
        None => {
            let _ = writeln!(
                o,
                "| bubblewrap + cold start | {} | | | | | |",
                c.bwrap_skipped.as_deref().unwrap_or("skipped")
            );
        }
    }
    let _ = write!(
        o,
        "\nsandlot is **{:.1}×** faster than the cold start (p50 / p50){}.\n",
        c.ratio_cold,
        c.ratio_bwrap
            .map(|r| format!(" and **{r:.1}×** faster than bubblewrap around it"))
            .unwrap_or_default()
    );
    o
}

pub fn hot_block(run: &Run, h: &HotResult) -> String {
    let mut o = provenance(run, &h.conditions);
    o.push_str(SUMMARY_HEADER);
    summary_row(
        &mut o,
        "**sandlot**: `POST …/execute` `1+1` over HTTP keep-alive",
        &h.sandlot,
    );
    summary_row(
        &mut o,
        "… the server's own `duration_ms` for it",
        &h.sandlot_server_ms,
    );
    match (&h.jupyter, &h.jupyter_idle) {
        (Some(j), Some(i)) => {
            summary_row(&mut o, "**Jupyter**: `execute_result` + `execute_reply`", j);
            summary_row(&mut o, "Jupyter, until the kernel's `status: idle`", i);
        }
        _ => {
            let _ = writeln!(
                o,
                "| Jupyter | {} | | | | | |",
                h.jupyter_skipped.as_deref().unwrap_or("skipped")
            );
        }
    }
    if let (Some(r), Some(info)) = (h.ratio, h.jupyter_info.as_object()) {
        let versions = info
            .get("versions")
            .and_then(|v| v.as_object())
            .map(|m| {
                m.iter()
                    .map(|(k, v)| format!("{k} {}", v.as_str().unwrap_or("?")))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        let _ = write!(
            o,
            "\nJupyter p50 / sandlot p50 = **{r:.2}×**. Peer: Python {} ({versions}), kernel started in {:.0} ms.\n",
            info.get("python").and_then(|v| v.as_str()).unwrap_or("?"),
            info.get("kernel_start_ms").and_then(|v| v.as_f64()).unwrap_or(0.0)
        );
    }
    o
}

pub fn density_block(run: &Run, d: &DensityResult) -> String {
    let mut o = provenance(run, &d.conditions);
    let _ = writeln!(
        o,
        "Baseline before the first sandbox: host used {}, zygote PSS {}, server RSS {}.\n",
        fmt_bytes(d.baseline_used as f64),
        fmt_bytes(d.baseline_zygote_pss as f64),
        fmt_bytes(d.baseline_server_rss as f64)
    );
    o.push_str("Memory:\n\n");
    o.push_str(
        "| N | host used Δ | Δ / sandbox | sandlot total¹ | Σ cgroup usage | Σ cgroup rss | Σ PSS of sandbox processes | zygote PSS | server RSS |\n",
    );
    o.push_str("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for l in &d.levels {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} ({} procs) | {} | {} |",
            l.n,
            fmt_bytes(l.host_used_delta as f64),
            fmt_bytes(l.host_used_delta as f64 / l.n.max(1) as f64),
            fmt_bytes(sandlot_total(d, l)),
            fmt_bytes(l.groups.usage as f64),
            fmt_bytes(l.groups.rss as f64),
            fmt_bytes(l.groups.pss as f64),
            l.groups.procs,
            fmt_bytes(l.zygote_pss as f64),
            fmt_bytes(l.server_rss as f64),
        );
    }
    o.push_str("\nKernel memory over the baseline (from /proc/meminfo; not all of it is charged to the sandboxes' cgroups):\n\n");
    o.push_str("| N | page tables Δ | unreclaimable slab Δ | kernel stacks Δ | shmem Δ |\n| ---: | ---: | ---: | ---: | ---: |\n");
    let b = &d.baseline_meminfo;
    let delta = |a: u64, b: u64| fmt_bytes(a as f64 - b as f64);
    for l in &d.levels {
        let m = &l.meminfo;
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} |",
            l.n,
            delta(m.page_tables, b.page_tables),
            delta(m.slab_unreclaimable, b.slab_unreclaimable),
            delta(m.kernel_stack, b.kernel_stack),
            delta(m.shmem, b.shmem),
        );
    }
    o.push_str("\nLatency with N alive (ms):\n\n");
    o.push_str("| N | hot `1+1` p50 | p90 | p99 | max | n | every sandbox answered | its first `1+1` p50 / p99 | create p50 / p99 |\n");
    o.push_str("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for l in &d.levels {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {}/{} | {} / {} | {} / {} |",
            l.n,
            fmt_ms(l.hot.p50),
            fmt_ms(l.hot.p90),
            fmt_ms(l.hot.p99),
            fmt_ms(l.hot.max),
            l.hot.n,
            l.answered,
            l.n,
            fmt_ms(l.check.p50),
            fmt_ms(l.check.p99),
            fmt_ms(l.create.p50),
            fmt_ms(l.create.p99),
        );
    }
    let _ = writeln!(
        o,
        "\n¹ host used Δ + the zygote's PSS and the server's RSS at the baseline. Memory is read after a \
         {:.0} s settle. Latency: first `1+1` once on every sandbox (all must answer; for the sandboxes added at \
         that level it is their first execution), then hot = `1+1` on random live sandboxes; create = the \
         sandboxes added to reach that level, one at a time.",
        d.settle_s
    );
    for l in &d.levels {
        if !l.failures.is_empty() {
            let _ = writeln!(
                o,
                "\nFailures at N = {}: {}",
                l.n,
                l.failures
                    .iter()
                    .map(|f| format!("`{f}`"))
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        }
    }
    let _ = writeln!(
        o,
        "\nDeleting all {} took {:.1} s (delete p50 {} ms, p99 {} ms); sandbox cgroups left 10 s later: {}.",
        d.levels.last().map(|l| l.n).unwrap_or(0),
        d.delete_total_s,
        fmt_ms(d.delete.p50),
        fmt_ms(d.delete.p99),
        d.leftover_groups
    );
    if let Some(s) = &d.stopped {
        let _ = writeln!(o, "\n**Stopped early**: {s}.");
    }
    o
}

pub fn throughput_block(run: &Run, t: &ThroughputResult) -> String {
    let mut o = provenance(run, &t.conditions);
    let _ = writeln!(
        o,
        "**{:.1} create+delete pairs per second**: {} pairs in {:.0} s with {} in flight (one keep-alive connection each), {} errors; sandbox cgroups left 10 s later: {}.\n",
        t.rate, t.pairs, t.seconds, t.concurrency, t.errors, t.leftover_groups
    );
    o.push_str(SUMMARY_HEADER);
    summary_row(&mut o, "`POST /v1/sandboxes` under load", &t.create);
    summary_row(&mut o, "`DELETE /v1/sandboxes/{id}` under load", &t.delete);
    if !t.first_errors.is_empty() {
        let _ = writeln!(
            o,
            "\nFirst errors: {}",
            t.first_errors
                .iter()
                .map(|e| format!("`{e}`"))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    o
}

pub fn restart_block(run: &Run, r: &RestartResult) -> String {
    let mut o = provenance(run, &r.conditions);
    o.push_str(SUMMARY_HEADER);
    summary_row(
        &mut o,
        "**sandlot**: kill cell sent → the next cell's (`1+1`) result",
        &r.total,
    );
    summary_row(
        &mut o,
        "… of which the kill cell, until its response",
        &r.kill_cell,
    );
    summary_row(
        &mut o,
        "… of which the next cell (waits for the fresh processes)",
        &r.next_cell,
    );
    summary_row(
        &mut o,
        "the next cell's own `duration_ms` on the server",
        &r.next_cell_server_ms,
    );
    summary_row(
        &mut o,
        "for reference: hot `1+1` on the same sandbox before the kill",
        &r.hot_before,
    );
    let states = r
        .kill_states
        .iter()
        .map(|(s, n)| format!("`{s}` × {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = write!(
        o,
        "\n{} kills (`{}`) in {} sandboxes, {} per sandbox; a variable set before each kill was gone after it. \
         The kill cells ended {states}",
        r.total.n,
        crate::restart::KILL_CODE,
        r.sandboxes,
        r.restarts_per_sandbox,
    );
    if r.without_restarted_field > 0 {
        let _ = write!(
            o,
            "; {} of them without a `restarted` field",
            r.without_restarted_field
        );
    }
    if r.count_mismatches.is_empty() {
        o.push_str("; every sandbox's `restart_count` matched the kills it got.\n");
    } else {
        let _ = writeln!(
            o,
            "; `restart_count` did not match: {}.",
            r.count_mismatches.join("; ")
        );
    }
    o
}

pub fn burst_block(run: &Run, b: &BurstResult) -> String {
    let mut o = provenance(run, &b.conditions);
    let _ = writeln!(
        o,
        "{} clients, each on a keep-alive connection opened beforehand, released at once after {:.0} s without \
         requests; each `POST /v1/sandboxes` then `print(1)`, timed from the release. {} errors; the last result \
         came {} ms after the release; deleting them took {:.1} s.\n",
        b.size,
        b.quiet_s,
        b.errors,
        fmt_ms(b.wall_ms),
        b.delete_total_s
    );
    o.push_str("| ms | p50 | p90 | p95 | p99 | max | n |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    let row = |o: &mut String, name: &str, s: &Summary| {
        let _ = writeln!(
            o,
            "| {name} | {} | {} | {} | {} | {} | {} |",
            fmt_ms(s.p50),
            fmt_ms(s.p90),
            fmt_ms(s.p95),
            fmt_ms(s.p99),
            fmt_ms(s.max),
            s.n
        );
    };
    row(
        &mut o,
        "**sandlot**: release → `print(1)`'s result",
        &b.first_result,
    );
    row(
        &mut o,
        "… release → `POST /v1/sandboxes` answered",
        &b.create,
    );
    row(&mut o, "… the first `POST …/execute`", &b.first_exec);
    let _ = writeln!(
        o,
        "| CubeSandbox, **quoted, not measured here**: create until `running`, 50 concurrent (avg 276.1)¹ | | | {:.0} | | 681 | 500 |",
        burst::CUBE_P95_MS
    );
    if !b.first_errors.is_empty() {
        let _ = writeln!(
            o,
            "\nFirst errors: {}",
            b.first_errors
                .iter()
                .map(|e| format!("`{e}`"))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    o.push_str(
        "\nMemory: the pool is every sandbox cgroup not handed out to a client (nothing else runs meanwhile).\n\n",
    );
    o.push_str("| when | host used | server RSS | zygote PSS | pooled sandboxes | their cgroup usage | their PSS | burst's sandboxes alive | their cgroup usage |\n");
    o.push_str("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for m in &b.memory {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            m.label,
            fmt_bytes(m.host_used as f64),
            fmt_bytes(m.server_rss as f64),
            fmt_bytes(m.zygote_pss as f64),
            m.pooled,
            fmt_bytes(m.pooled_usage as f64),
            fmt_bytes(m.pooled_pss as f64),
            m.handed_out,
            fmt_bytes(m.handed_out_usage as f64),
        );
    }
    let _ = writeln!(o, "\n¹ {}.", burst::CUBE_SOURCE);
    o
}

pub fn disk_block(run: &Run, d: &DiskResult) -> String {
    let mut o = provenance(run, &d.conditions);
    let _ = writeln!(
        o,
        "`dd` of {} MiB (`bs=1M`; the write with `conv=fsync`), {} repetitions alternating which side goes first, \
         medians in MiB/s as `dd` reports them. Sandbox: `memory_mb` {}, `disk_mb` {}, `/workspace` is {} \
         (the server's workspaces: {}). Host: `dd` outside any sandbox in the scratch dir, on the filesystem that holds the \
         server's data dir ({}).\n",
        d.size_mib,
        d.reps,
        d.memory_mb,
        d.disk_mb,
        d.sandbox_fs,
        d.workspaces
            .as_deref()
            .map(|w| w.replacen(" (", ": ", 1).trim_end_matches(')').to_owned())
            .unwrap_or_else(|| "backend not logged".into()),
        d.host_fs
    );
    let opt = |v: Option<f64>| v.map(|v| format!("{v:.0}")).unwrap_or_else(|| "—".into());
    o.push_str("| MiB/s | write | read right after | read after dropping caches |\n| --- | ---: | ---: | ---: |\n");
    let _ = writeln!(
        o,
        "| **sandlot**: `/workspace` | {:.0} | {:.0} | {} |",
        d.sandbox_write,
        d.sandbox_read,
        opt(d.sandbox_read_cold)
    );
    let _ = writeln!(
        o,
        "| host disk, outside any sandbox | {:.0} | {:.0} | {} |",
        d.host_write,
        d.host_read,
        opt(d.host_read_cold)
    );
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => format!("{:.0}%", 100.0 * a / b),
        _ => "—".into(),
    };
    let _ = writeln!(
        o,
        "| sandbox / host | {:.0}% | {:.0}% | {} |",
        100.0 * d.write_ratio,
        100.0 * d.sandbox_read / d.host_read,
        ratio(d.sandbox_read_cold, d.host_read_cold)
    );
    let each = |runs: &[crate::disk::DiskRun]| {
        runs.iter()
            .map(|r| format!("{:.0}/{:.0}/{}", r.write, r.read, opt(r.read_cold)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(
        o,
        "\nEach repetition, write/read/read after dropping caches: sandbox {}; host {}. {} \
         The sandbox's peak memory (its cgroup's, page cache included) was {} of its {} MiB; it was not killed.",
        each(&d.sandbox),
        each(&d.host),
        if d.caches_dropped {
            "The harness dropped the host's page cache (`/proc/sys/vm/drop_caches`, every cgroup's) before each second read."
        } else {
            "The page cache could not be dropped (not root, or `--no-drop-caches`): reads are as they came."
        },
        fmt_bytes(d.sandbox_peak_memory as f64),
        d.memory_mb
    );
    o
}

fn target_row(t: &Target, run: &Run) -> String {
    format!(
        "| {} | {} | {} | {} | {} | {} |",
        t.key,
        t.goal,
        t.measured,
        t.verdict(),
        t.by,
        run.date
    )
}

fn history_row(run: &Run) -> String {
    let c = run
        .create
        .as_ref()
        .map(|c| {
            format!(
                "{} / {} ms ({:.0}× cold)",
                fmt_ms(c.sandlot.p50),
                fmt_ms(c.sandlot.p99),
                c.ratio_cold
            )
        })
        .unwrap_or_default();
    let h = run
        .hot
        .as_ref()
        .map(|h| {
            format!(
                "{} / {} ms{}",
                fmt_ms(h.sandlot.p50),
                fmt_ms(h.sandlot.p99),
                h.jupyter
                    .map(|j| format!(" (Jupyter {} ms)", fmt_ms(j.p50)))
                    .unwrap_or_default()
            )
        })
        .unwrap_or_default();
    let d = run
        .density
        .as_ref()
        .and_then(|d| d.levels.last().map(|l| (d, l)))
        .map(|(d, l)| {
            format!(
                "N={}: {}, p99 {} ms, {}/{} ok",
                l.n,
                fmt_bytes(sandlot_total(d, l)),
                fmt_ms(l.hot.p99),
                l.answered,
                l.n
            )
        })
        .unwrap_or_default();
    let t = run
        .throughput
        .as_ref()
        .map(|t| format!("{:.1}/s", t.rate))
        .unwrap_or_default();
    let r = run
        .restart
        .as_ref()
        .map(|r| format!("{} / {} ms", fmt_ms(r.total.p50), fmt_ms(r.total.p99)))
        .unwrap_or_default();
    let b = run
        .burst
        .as_ref()
        .map(|b| {
            format!(
                "{} / {} ms ({} of {})",
                fmt_ms(b.first_result.p50),
                fmt_ms(b.first_result.p99),
                b.first_result.n,
                b.size
            )
        })
        .unwrap_or_default();
    let k = run
        .disk
        .as_ref()
        .map(|d| {
            format!(
                "{:.0}% / {:.0}% ({:.0} / {:.0} MiB/s)",
                100.0 * d.write_ratio,
                100.0 * d.read_ratio,
                d.sandbox_write,
                d.sandbox_read_cold.unwrap_or(d.sandbox_read)
            )
        })
        .unwrap_or_default();
    format!(
        "| {} | `{}` | `{}` | {c} | {h} | {d} | {t} | {r} | {b} | {k} |",
        run.date, run.commit, run.command
    )
}

/// The document as it is first written; the blocks are then filled in.
pub const TEMPLATE: &str = include_str!("benchmarks_template.md");

/// Replaces the content of block `name` (creating it at the end when missing).
pub fn replace_block(doc: &str, name: &str, content: &str) -> String {
    let open = format!("<!-- sandlot-bench:{name} -->");
    let close = format!("<!-- /sandlot-bench:{name} -->");
    let body = format!("{open}\n{}\n{close}", content.trim_end());
    match (doc.find(&open), doc.find(&close)) {
        (Some(a), Some(b)) if b > a => format!("{}{}{}", &doc[..a], body, &doc[b + close.len()..]),
        _ => format!("{}\n\n{}\n", doc.trim_end(), body),
    }
}

/// The heading of the history section: results blocks a document lacks go before it.
const HISTORY_HEADING: &str = "\n## History";

/// Replaces block `name`; when the document lacks it, adds it under `heading` before the
/// history section (or at the end), so that older documents gain the new benchmarks' sections.
fn upsert_result_block(doc: &str, name: &str, heading: &str, content: &str) -> String {
    if block(doc, name).is_some() {
        return replace_block(doc, name, content);
    }
    let section = format!(
        "{heading}\n\n<!-- sandlot-bench:{name} -->\n{}\n<!-- /sandlot-bench:{name} -->\n",
        content.trim_end()
    );
    match doc.find(HISTORY_HEADING) {
        Some(at) => format!("{}{section}{}", &doc[..at + 1], &doc[at..]),
        None => format!("{}\n\n{section}", doc.trim_end()),
    }
}

/// The content of block `name`, if present.
pub fn block<'a>(doc: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<!-- sandlot-bench:{name} -->");
    let close = format!("<!-- /sandlot-bench:{name} -->");
    let a = doc.find(&open)? + open.len();
    let b = doc[a..].find(&close)? + a;
    Some(doc[a..b].trim_matches('\n'))
}

const TARGETS_HEADER: &str =
    "| key | target (issues 3 and 9) | measured | result | by how much | measured on |\n| --- | --- | --- | --- | --- | --- |";
const HISTORY_HEADER: &str = "| date | commit | command | create→first result p50 / p99 | hot `1+1` p50 / p99 | density (largest N) | create+delete/s | restart p50 / p99 | burst p50 / p99 | disk write / read vs host |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |";

/// Data rows of a table block (every `|` line after the header and separator).
fn table_rows(block: &str) -> Vec<String> {
    block
        .lines()
        .filter(|l| l.starts_with('|'))
        .skip(2)
        .map(str::to_owned)
        .collect()
}

fn row_key(row: &str) -> String {
    row.trim_start_matches('|')
        .split('|')
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned()
}

fn measured_anything(run: &Run) -> bool {
    run.create.is_some()
        || run.hot.is_some()
        || run.density.is_some()
        || run.throughput.is_some()
        || run.restart.is_some()
        || run.burst.is_some()
        || run.disk.is_some()
}

/// The updated document: this run's blocks, targets upserted, a history row appended.
pub fn update_doc(doc: &str, run: &Run) -> String {
    let mut doc = if doc.trim().is_empty() {
        TEMPLATE.to_owned()
    } else {
        doc.to_owned()
    };
    if let Some(c) = &run.create {
        doc = replace_block(&doc, "create", &create_block(run, c));
    }
    if let Some(h) = &run.hot {
        doc = replace_block(&doc, "hot", &hot_block(run, h));
    }
    if let Some(d) = &run.density {
        doc = replace_block(&doc, "density", &density_block(run, d));
    }
    if let Some(t) = &run.throughput {
        doc = replace_block(&doc, "throughput", &throughput_block(run, t));
    }
    if let Some(r) = &run.restart {
        doc = upsert_result_block(
            &doc,
            "restart",
            "### 5. restart in place after the driver is killed",
            &restart_block(run, r),
        );
    }
    if let Some(b) = &run.burst {
        doc = upsert_result_block(
            &doc,
            "burst",
            "### 6. a burst of concurrent creates after a quiet period",
            &burst_block(run, b),
        );
    }
    if let Some(d) = &run.disk {
        doc = upsert_result_block(
            &doc,
            "disk",
            "### 7. workspace disk throughput against the host disk",
            &disk_block(run, d),
        );
    }

    let mut rows: Vec<(String, String)> = block(&doc, "targets")
        .map(table_rows)
        .unwrap_or_default()
        .into_iter()
        .map(|r| (row_key(&r), r))
        .filter(|(k, _)| TARGET_KEYS.contains(&k.as_str()))
        .collect();
    for t in targets(run) {
        let row = target_row(&t, run);
        match rows.iter_mut().find(|(k, _)| k == t.key) {
            Some(slot) => slot.1 = row,
            None => rows.push((t.key.to_owned(), row)),
        }
    }
    rows.sort_by_key(|(k, _)| {
        TARGET_KEYS
            .iter()
            .position(|x| x == k)
            .unwrap_or(usize::MAX)
    });
    let table = std::iter::once(TARGETS_HEADER.to_owned())
        .chain(rows.into_iter().map(|(_, r)| r))
        .collect::<Vec<_>>();
    doc = replace_block(&doc, "targets", &table.join("\n"));

    let mut history = block(&doc, "history").map(table_rows).unwrap_or_default();
    // A run in which every benchmark failed adds no row of empty cells.
    if measured_anything(run) {
        history.push(history_row(run));
    }
    let table = std::iter::once(HISTORY_HEADER.to_owned())
        .chain(history)
        .collect::<Vec<_>>();
    doc = replace_block(&doc, "history", &table.join("\n"));
    doc
}

/// The report printed at the end of a run.
pub fn print_report(run: &Run) {
    println!(
        "\nsandlot-bench: {} at {} on {}",
        run.command,
        run.commit,
        run.machine.describe()
    );
    println!("server ready {:.2} s after start\n", run.server_start_s);
    if let Some(c) = &run.create {
        println!(
            "== 1. create → first result of print(1) ==\n{}",
            strip_md(&create_block(run, c))
        );
    }
    if let Some(h) = &run.hot {
        println!(
            "== 2. hot 1+1 round trip ==\n{}",
            strip_md(&hot_block(run, h))
        );
    }
    if let Some(d) = &run.density {
        println!("== 3. density ==\n{}", strip_md(&density_block(run, d)));
    }
    if let Some(t) = &run.throughput {
        println!(
            "== 4. create+delete throughput ==\n{}",
            strip_md(&throughput_block(run, t))
        );
    }
    if let Some(r) = &run.restart {
        println!(
            "== 5. restart in place ==\n{}",
            strip_md(&restart_block(run, r))
        );
    }
    if let Some(b) = &run.burst {
        println!(
            "== 6. burst after a quiet period ==\n{}",
            strip_md(&burst_block(run, b))
        );
    }
    if let Some(d) = &run.disk {
        println!("== 7. disk ==\n{}", strip_md(&disk_block(run, d)));
    }
    println!("== targets ==");
    for t in targets(run) {
        println!(
            "{:<16} {:<13} {:<52} {}  {}",
            t.key,
            t.verdict().trim_matches('*'),
            t.goal,
            t.measured,
            t.by
        );
    }
}

fn strip_md(s: &str) -> String {
    s.lines()
        .filter(|l| !l.starts_with("_Measured") && !l.starts_with("| ---"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("**", "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_replaced_in_place_and_appended_when_missing() {
        let doc =
            "# t\n\nprose\n<!-- sandlot-bench:a -->\nold\n<!-- /sandlot-bench:a -->\nmore prose\n";
        let d = replace_block(doc, "a", "new");
        assert_eq!(
            d,
            "# t\n\nprose\n<!-- sandlot-bench:a -->\nnew\n<!-- /sandlot-bench:a -->\nmore prose\n"
        );
        assert_eq!(block(&d, "a"), Some("new"));
        let d = replace_block(&d, "b", "bee");
        assert!(d.ends_with("<!-- sandlot-bench:b -->\nbee\n<!-- /sandlot-bench:b -->\n"));
        assert!(d.contains("more prose"));
    }

    #[test]
    fn targets_judge_both_directions() {
        let t = Target::at_most("k", "g", 23.0, 10.0, "ms", String::new());
        assert_eq!(t.pass, Some(false));
        assert!(t.by.contains("2.30×"), "{}", t.by);
        let t = Target::at_least("k", "g", 62.0, 100.0, "/s", String::new());
        assert_eq!(t.pass, Some(false));
        assert!(t.by.contains("62%"), "{}", t.by);
        assert_eq!(
            Target::at_least("k", "g", 120.0, 100.0, "/s", String::new()).pass,
            Some(true)
        );
    }

    #[test]
    fn template_has_every_block() {
        for name in [
            "targets",
            "create",
            "hot",
            "density",
            "throughput",
            "restart",
            "burst",
            "disk",
            "history",
        ] {
            assert!(block(TEMPLATE, name).is_some(), "{name}");
        }
    }

    #[test]
    fn table_rows_skip_header() {
        let b = format!("{TARGETS_HEADER}\n| hot-p50 | x | y | z | w | d |");
        let rows = table_rows(&b);
        assert_eq!(rows.len(), 1);
        assert_eq!(row_key(&rows[0]), "hot-p50");
    }

    #[test]
    fn missing_result_blocks_go_before_the_history() {
        let doc = "# B\n\n### 4. t\n\n<!-- sandlot-bench:throughput -->\nx\n<!-- /sandlot-bench:throughput -->\n\n## History\n\n<!-- sandlot-bench:history -->\n<!-- /sandlot-bench:history -->\n";
        let d = upsert_result_block(doc, "restart", "### 5. restart", "numbers");
        let (r, h) = (
            d.find("### 5. restart").unwrap(),
            d.find("## History").unwrap(),
        );
        assert!(
            d.find("sandlot-bench:throughput").unwrap() < r && r < h,
            "{d}"
        );
        assert_eq!(block(&d, "restart"), Some("numbers"));
        assert!(!d.contains("\n\n\n"), "{d}");
        // Once there, it is replaced in place.
        let d2 = upsert_result_block(&d, "restart", "### 5. restart", "new");
        assert_eq!(d2.matches("### 5. restart").count(), 1);
        assert_eq!(block(&d2, "restart"), Some("new"));
        let d3 = upsert_result_block("# B\n", "disk", "### 7. disk", "n");
        assert!(d3.ends_with("<!-- /sandlot-bench:disk -->\n"), "{d3}");
    }
}
