//! The markdown blocks of each benchmark's results, and the rows of the targets and history
//! tables.

use super::*;

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
    if let Some(js) = &h.javascript {
        summary_row(
            &mut o,
            "**JavaScript** `1+1` cell, same sandbox and call (`\"language\": \"javascript\"`, its node started)",
            js,
        );
        if let Some(cell) = &h.javascript_server_ms {
            summary_row(&mut o, "… the server's own `duration_ms` for it", cell);
        }
    }
    if let Some(c) = &h.chart {
        summary_row(
            &mut o,
            "plotting cell `display(fig)` (4 lines × 250 points): PNG + chart data",
            &c.with_chart,
        );
        summary_row(
            &mut o,
            "… the same with the chart's MIME type excluded: PNG only",
            &c.png_only,
        );
        summary_row(
            &mut o,
            "… the chart extractor alone, timed in the sandbox",
            &c.extractor,
        );
    }
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

pub(super) fn target_row(t: &Target, run: &Run) -> String {
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

pub(super) fn history_row(run: &Run) -> String {
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
    let s = state_history_cell(run);
    let e = clients_history_cell(run);
    let g = governance_history_cell(run);
    let a = record_history_cell(run);
    format!(
        "| {} | `{}` | `{}` | {c} | {h} | {d} | {t} | {r} | {b} | {k} | {s} | {e} | {g} | {a} |",
        run.date, run.commit, run.command
    )
}
