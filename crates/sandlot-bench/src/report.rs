//! Targets, the printed report and BENCHMARKS.md.
//!
//! BENCHMARKS.md is prose written by people plus blocks this harness owns, each between
//! `<!-- sandlot-bench:NAME -->` and `<!-- /sandlot-bench:NAME -->`. A run replaces the blocks
//! of the benchmarks it ran, upserts its rows of the targets table, and appends one row to the
//! history; everything outside the blocks is left as it is.

use crate::bench::{
    Conditions, CreateResult, DensityLevel, DensityResult, HotResult, ThroughputResult,
};
use crate::machine::Machine;
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
    pub create: Option<CreateResult>,
    pub hot: Option<HotResult>,
    pub density: Option<DensityResult>,
    pub throughput: Option<ThroughputResult>,
}

/// One target of issue 3 and how this run did against it.
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
    "create-vs-cold",
    "hot-p50",
    "hot-vs-jupyter",
    "density-memory",
    "density-answer",
    "density-p99",
    "throughput",
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
    t
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
        "_Measured {} with `{}` at commit `{}` on {}; took {:.0} s; load average {} → {}; zygote restarts during it: {}._\n\n",
        run.date,
        run.command,
        run.commit,
        run.machine.describe(),
        c.seconds,
        c.load_before,
        c.load_after,
        c.zygote_restarts
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
    format!(
        "| {} | `{}` | `{}` | {c} | {h} | {d} | {t} |",
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

/// The content of block `name`, if present.
pub fn block<'a>(doc: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<!-- sandlot-bench:{name} -->");
    let close = format!("<!-- /sandlot-bench:{name} -->");
    let a = doc.find(&open)? + open.len();
    let b = doc[a..].find(&close)? + a;
    Some(doc[a..b].trim_matches('\n'))
}

const TARGETS_HEADER: &str =
    "| key | target (issue 3) | measured | result | by how much | measured on |\n| --- | --- | --- | --- | --- | --- |";
const HISTORY_HEADER: &str = "| date | commit | command | create→first result p50 / p99 | hot `1+1` p50 / p99 | density (largest N) | create+delete/s |\n| --- | --- | --- | --- | --- | --- | --- |";

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
    history.push(history_row(run));
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
    println!("== targets ==");
    for t in targets(run) {
        println!(
            "{:<15} {:<13} {:<52} {}  {}",
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
}
