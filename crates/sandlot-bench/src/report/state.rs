//! The blocks, targets and history cell of the state benchmarks of issue 12 (fork, pause and
//! resume, create from a snapshot, a server start with N paused sandboxes), with the peers'
//! published figures quoted beside them (quoted from the issue, not measured here).

use super::*;
use crate::paused_start::PausedStartResult;
use crate::state::{
    ForkCase, ForkResult, Kind, PauseResult, SnapshotResult, BIG_CHECK, SMALL_CHECK,
};

pub(super) const FORK_HEADING: &str =
    "### 8. fork: every child answers a cell reading the parent's state";
pub(super) const PAUSE_HEADING: &str = "### 9. pause, and resume to the first result";
pub(super) const SNAPSHOT_HEADING: &str = "### 10. create from a snapshot to the first result";
pub(super) const PAUSED_START_HEADING: &str =
    "### 11. server start with N paused sandboxes on disk";

/// Where the peers' figures come from.
pub const PEERS_SOURCE: &str = "the peers' own published figures as quoted in issue 12; \
     not measured here, and on their hardware (KVM microVMs for CubeSandbox), not this machine";

/// The target of issue 12 for the server start, in paused sandboxes.
pub const PAUSED_TARGET_N: usize = 10_000;

fn cell_of(kind: Kind) -> &'static str {
    match kind {
        Kind::Small => SMALL_CHECK,
        Kind::Big => BIG_CHECK,
    }
}

/// Bytes as KiB below a MiB (a few variables' state is a few KiB), else as `fmt_bytes` does.
fn fmt_size(b: f64) -> String {
    if b.abs() < 1024.0 * 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        fmt_bytes(b)
    }
}

fn quoted_row(o: &mut String, name: &str, p50: &str) {
    let _ = writeln!(
        o,
        "| {name}, **quoted, not measured here**¹ | {p50} | | | | | |"
    );
}

fn with_p99(s: &Summary) -> String {
    format!("{} ms (p99 {} ms, n {})", fmt_ms(s.p50), fmt_ms(s.p99), s.n)
}

pub fn fork_block(run: &Run, f: &ForkResult) -> String {
    let mut o = provenance(run, &f.conditions);
    o.push_str(
        "Each sample: `POST /v1/sandboxes/{id}/fork {\"count\": n}`, then every child runs a cell reading the \
         parent's state at once (one keep-alive connection each, opened beforehand), timed from the fork request \
         to the last child's answer; then the parent runs the same cell. Children are deleted between samples \
         (untimed).\n\n",
    );
    o.push_str(SUMMARY_HEADER);
    for c in &f.cases {
        fork_rows(&mut o, c);
    }
    quoted_row(&mut o, "Podflare: fork of a live sandbox", "80–100");
    quoted_row(&mut o, "CubeSandbox (KVM): clone", "220");
    for c in &f.cases {
        if !c.not_captured.is_empty() {
            let _ = writeln!(
                o,
                "\nfork({}) of the sandbox with {}: not carried over: {}.",
                c.count,
                c.kind.label(),
                c.not_captured.join("; ")
            );
        }
    }
    if !f.cleanup_errors.is_empty() {
        let _ = writeln!(
            o,
            "\nCleaning up failed {} times, first: `{}`.",
            f.cleanup_errors.len(),
            f.cleanup_errors[0]
        );
    }
    let _ = writeln!(o, "\n¹ {PEERS_SOURCE}.");
    o
}

fn fork_rows(o: &mut String, c: &ForkCase) {
    let cell = cell_of(c.kind);
    summary_row(
        o,
        &format!(
            "**fork({})**, {}: fork request → all {} answered `{cell}`",
            c.count,
            c.kind.label(),
            c.count
        ),
        &c.total,
    );
    summary_row(o, "… of which `POST …/fork` until its 201", &c.fork_request);
    summary_row(
        o,
        "… of which the children's cells, all at once",
        &c.children,
    );
    summary_row(o, "… the server's own `took_ms`", &c.server_took_ms);
    summary_row(
        o,
        &format!("the parent's `{cell}` right after the fork"),
        &c.parent_after,
    );
}

pub fn pause_block(run: &Run, p: &PauseResult) -> String {
    let mut o = provenance(run, &p.conditions);
    o.push_str(
        "Each round: `POST /v1/sandboxes/{id}/pause` (timed until its 200), 0.3 s, then an execute on the paused \
         sandbox, which resumes it (timed until its answer), then the same cell again. One warm-up round first.\n\n",
    );
    o.push_str(SUMMARY_HEADER);
    for c in &p.cases {
        let cell = cell_of(c.kind);
        summary_row(
            &mut o,
            &format!("**pause**, {}: `POST …/pause` → 200", c.kind.label()),
            &c.pause,
        );
        summary_row(
            &mut o,
            &format!(
                "**resume**, {}: `{cell}` on the paused sandbox → its answer",
                c.kind.label()
            ),
            &c.resume,
        );
        summary_row(&mut o, "… the resumed sandbox's next cell", &c.after_resume);
        summary_row(
            &mut o,
            "… for reference: the same cell before any pause",
            &c.hot_before,
        );
    }
    quoted_row(&mut o, "E2B: pause (about 4 s per GB)", "≈ 200 for 50 MB");
    quoted_row(&mut o, "E2B: resume", "≈ 1000");
    quoted_row(&mut o, "CubeSandbox (KVM): resume", "42");
    quoted_row(&mut o, "Blaxel: resume from standby", "< 25");
    let sizes: Vec<String> = p
        .cases
        .iter()
        .filter_map(|c| {
            c.state_bytes
                .map(|b| format!("{}: {}", c.kind.label(), fmt_size(b as f64)))
        })
        .collect();
    if !sizes.is_empty() {
        let _ = writeln!(
            o,
            "\nState file while paused (`<data dir>/state/<id>.state`): {}.",
            sizes.join("; ")
        );
    }
    let _ = writeln!(
        o,
        "\n¹ {PEERS_SOURCE}; E2B's pause for 50 MB is its quoted rate applied to 50 MB."
    );
    o
}

pub fn snapshot_block(run: &Run, s: &SnapshotResult) -> String {
    let mut o = provenance(run, &s.conditions);
    o.push_str(
        "`POST /v1/sandboxes/{id}/snapshots {}` five times (timed until its 201; the first snapshot is kept), then \
         `POST /v1/sandboxes {\"from_snapshot\": …}` and a cell reading the snapshot's state, timed together; each \
         sandbox made is deleted (untimed). One warm-up create first.\n\n",
    );
    o.push_str(SUMMARY_HEADER);
    for c in &s.cases {
        let cell = cell_of(c.kind);
        summary_row(
            &mut o,
            &format!("**snapshot**, {}: `POST …/snapshots` → 201", c.kind.label()),
            &c.take,
        );
        summary_row(
            &mut o,
            &format!(
                "**create from it**, {}: `POST /v1/sandboxes` + `{cell}` → its answer",
                c.kind.label()
            ),
            &c.create_first,
        );
        summary_row(&mut o, "… of which `POST /v1/sandboxes` (201)", &c.create);
        summary_row(&mut o, "… of which the first execute", &c.first_exec);
    }
    quoted_row(&mut o, "CubeSandbox (KVM): snapshot", "46");
    quoted_row(&mut o, "CubeSandbox (KVM): create from a snapshot", "60–85");
    for c in &s.cases {
        let _ = write!(
            o,
            "\nSnapshot of the sandbox with {}: state {}, {} variables, workspace captured: {}",
            c.kind.label(),
            c.state_bytes
                .map(|b| fmt_size(b as f64))
                .unwrap_or_else(|| "?".into()),
            c.variables
                .map(|v| v.to_string())
                .unwrap_or_else(|| "?".into()),
            c.workspace
                .map(|w| w.to_string())
                .unwrap_or_else(|| "?".into()),
        );
        if c.not_captured.is_empty() {
            o.push_str(".\n");
        } else {
            let _ = writeln!(o, "; not captured: {}.", c.not_captured.join("; "));
        }
    }
    if !s.cleanup_errors.is_empty() {
        let _ = writeln!(
            o,
            "\nCleaning up failed {} times, first: `{}`.",
            s.cleanup_errors.len(),
            s.cleanup_errors[0]
        );
    }
    let _ = writeln!(o, "\n¹ {PEERS_SOURCE}.");
    o
}

pub fn paused_start_block(run: &Run, p: &PausedStartResult) -> String {
    let mut o = provenance(run, &p.conditions);
    let _ = writeln!(
        o,
        "A second `sandlot serve` with its own data dir: N sandboxes are created, given a few variables \
         (`a = 41`, …) and paused, two at a time; the server is stopped (SIGTERM) and started again on that data \
         dir {} times per level. Timed from spawning the process. After each start one paused sandbox, picked at \
         random, runs `{SMALL_CHECK}` (it resumes) and is paused again.\n",
        p.starts_per_level
    );
    o.push_str(
        "| paused on disk | spawn → paused ones restored (log) p50 / p99 | spawn → address printed p50 / p99 | spawn → `/v1/health` 200 p50 / p99 | spawn → a paused sandbox's answer p50 / p99 | that resume alone p50 | stop p50 | state files | made in | starts | server warnings |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    let pair = |s: &Summary| {
        if s.n == 0 {
            "—".to_owned()
        } else {
            format!("{} / {}", fmt_ms(s.p50), fmt_ms(s.p99))
        }
    };
    for l in &p.levels {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            l.n,
            pair(&l.took_over),
            pair(&l.listening),
            pair(&l.healthy),
            pair(&l.first_answer),
            if l.resume.n == 0 {
                "—".to_owned()
            } else {
                fmt_ms(l.resume.p50)
            },
            fmt_ms(l.stop.p50),
            fmt_size(l.state_bytes as f64),
            if l.made_s > 0.0 {
                format!("{:.1} s", l.made_s)
            } else {
                "—".into()
            },
            l.listening.n,
            l.server_warnings
        );
    }
    let _ = writeln!(
        o,
        "\nWhat grows with N is the restore of the paused sandboxes (spawn → the server's `took over what a \
         previous run left … restored=N` log line): a least-squares line through those p50s gives **{} ms per \
         1000 paused sandboxes** (a negative slope, which is noise, counts as 0). The rest of a start, mostly \
         the default template's zygote importing the data stack, does not depend on N and varies more from one \
         start to the next than that part grows. The largest N's `/v1/health` p50 carried along that slope: \
         **{} ms at {PAUSED_TARGET_N}** (extrapolated{}).",
        trim(p.took_over_ms_per_1000),
        fmt_ms(p.healthy_at_10k_ms),
        match p.largest() {
            Some(l) if l.n >= PAUSED_TARGET_N => ", but measured too".to_owned(),
            Some(l) => format!(", not measured: the largest N here is {}", l.n),
            None => String::new(),
        }
    );
    if let Some(l) = p.largest().filter(|l| l.n > 0 && l.made_s > 0.0) {
        let _ = writeln!(
            o,
            "\nMaking them costs about {:.0} ms each on this machine (the last {} took {:.1} s), so {PAUSED_TARGET_N} \
             would take about {:.0} s to make: `--paused-n {PAUSED_TARGET_N}` measures it directly.",
            1000.0 * l.made_s / made_count(p, l.n) as f64,
            made_count(p, l.n),
            l.made_s,
            l.made_s / made_count(p, l.n) as f64 * PAUSED_TARGET_N as f64
        );
    }
    if let Some(s) = &p.stopped {
        let _ = writeln!(o, "\n**Stopped early**: {s}.");
    }
    o
}

/// How many sandboxes were made for the level of `n` (its N minus the previous level's).
fn made_count(p: &PausedStartResult, n: usize) -> usize {
    let prev = p
        .levels
        .iter()
        .map(|l| l.n)
        .filter(|&m| m < n)
        .max()
        .unwrap_or(0);
    (n - prev).max(1)
}

pub(super) fn state_targets(run: &Run, t: &mut Vec<Target>) {
    if let Some(f) = &run.fork {
        if let Some(c) = f.case(1, Kind::Small) {
            t.push(Target::at_most(
                "fork-1",
                "fork(1) of a sandbox with a few variables → the child's answer, p50 ≤ 20 ms (issue 12)",
                c.total.p50,
                20.0,
                "ms",
                format!("{}; Podflare, quoted: 80–100 ms", with_p99(&c.total)),
            ));
        }
        if let Some(c) = f.case(5, Kind::Big) {
            t.push(Target::at_most(
                "fork-5-50mb",
                "fork(5) of a sandbox with a 50 MB DataFrame and a 20 MB workspace → all five answered `len(df)`, p50 ≤ 50 ms (issue 12)",
                c.total.p50,
                50.0,
                "ms",
                with_p99(&c.total),
            ));
        }
        if let Some(c) = f.case(100, Kind::Small) {
            t.push(Target::at_most(
                "fork-100",
                "fork(100) → all 100 answered, p50 ≤ 1 s (issue 12)",
                c.total.p50,
                1000.0,
                "ms",
                with_p99(&c.total),
            ));
        }
    }
    if let Some(p) = &run.pause {
        if let Some(c) = p.case(Kind::Big) {
            t.push(Target::at_most(
                "pause-50mb",
                "pause of the 50 MB sandbox, p50 ≤ 100 ms (issue 12)",
                c.pause.p50,
                100.0,
                "ms",
                format!("{}; E2B, quoted: about 4 s per GB", with_p99(&c.pause)),
            ));
            t.push(Target::at_most(
                "resume-50mb",
                "resume → first result with the 50 MB DataFrame, p50 ≤ 100 ms (issue 12)",
                c.resume.p50,
                100.0,
                "ms",
                with_p99(&c.resume),
            ));
        }
        if let Some(c) = p.case(Kind::Small) {
            t.push(Target::at_most(
                "resume-small",
                "resume → first result with a few variables, p50 ≤ 25 ms (issue 12)",
                c.resume.p50,
                25.0,
                "ms",
                format!(
                    "{}; quoted: Blaxel < 25 ms, CubeSandbox 42 ms, E2B about 1 s",
                    with_p99(&c.resume)
                ),
            ));
        }
    }
    if let Some(s) = &run.snapshot {
        if let Some(c) = s.case(Kind::Small) {
            t.push(Target::at_most(
                "snapshot-create-small",
                "create from a snapshot → first result, a few variables, p50 ≤ 20 ms (issue 12)",
                c.create_first.p50,
                20.0,
                "ms",
                format!(
                    "{}; CubeSandbox, quoted: 60–85 ms",
                    with_p99(&c.create_first)
                ),
            ));
        }
        if let Some(c) = s.case(Kind::Big) {
            t.push(Target::at_most(
                "snapshot-create-50mb",
                "create from a snapshot → first result with the 50 MB DataFrame, p50 ≤ 100 ms (issue 12)",
                c.create_first.p50,
                100.0,
                "ms",
                with_p99(&c.create_first),
            ));
        }
    }
    if let Some(p) = &run.paused_start {
        const GOAL: &str = "server start with 10 000 paused sandboxes on disk → `/v1/health` answers, p50 ≤ 2 s (issue 12)";
        if let Some(l) = p.largest().filter(|l| l.n >= PAUSED_TARGET_N) {
            t.push(Target::at_most(
                "paused-start",
                GOAL,
                l.healthy.p50,
                2000.0,
                "ms",
                format!(
                    "{} at N = {} (a paused one answered {} ms after the spawn)",
                    with_p99(&l.healthy),
                    l.n,
                    fmt_ms(l.first_answer.p50)
                ),
            ));
        } else if let Some(l) = p.largest() {
            let x = p.healthy_at_10k_ms;
            t.push(Target {
                key: "paused-start",
                goal: GOAL,
                measured: format!(
                    "{} at N = {} (a paused one answered {} ms after the spawn); extrapolated to 10 000: {} ms",
                    with_p99(&l.healthy),
                    l.n,
                    fmt_ms(l.first_answer.p50),
                    fmt_ms(x)
                ),
                pass: None,
                by: format!(
                    "extrapolated: {:.0}% of the limit",
                    100.0 * x / 2000.0
                ),
            });
        }
    }
}

/// The history table's cell for this run's state benchmarks (p50s).
pub(super) fn state_history_cell(run: &Run) -> String {
    let mut parts = Vec::new();
    if let Some(f) = &run.fork {
        let p = |c: Option<&ForkCase>| c.map(|c| fmt_ms(c.total.p50)).unwrap_or("—".into());
        parts.push(format!(
            "fork {} / {} / {} ms",
            p(f.case(1, Kind::Small)),
            p(f.case(5, Kind::Big)),
            p(f.case(100, Kind::Small))
        ));
    }
    if let Some(p) = &run.pause {
        if let Some(b) = p.case(Kind::Big) {
            parts.push(format!("pause {} ms", fmt_ms(b.pause.p50)));
        }
        let r = |k| {
            p.case(k)
                .map(|c| fmt_ms(c.resume.p50))
                .unwrap_or("—".into())
        };
        parts.push(format!("resume {} / {} ms", r(Kind::Small), r(Kind::Big)));
    }
    if let Some(s) = &run.snapshot {
        let r = |k| {
            s.case(k)
                .map(|c| fmt_ms(c.create_first.p50))
                .unwrap_or("—".into())
        };
        parts.push(format!("snapshot {} / {} ms", r(Kind::Small), r(Kind::Big)));
    }
    if let Some(l) = run.paused_start.as_ref().and_then(|p| p.largest()) {
        parts.push(format!("N={}: {} ms", l.n, fmt_ms(l.healthy.p50)));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paused_start::PausedLevel;
    use crate::state::{ForkCase, PauseCase, SnapshotCase};

    fn ms(p50: f64) -> Summary {
        Summary {
            n: 20,
            min: p50 / 2.0,
            p50,
            p90: p50 * 1.5,
            p95: p50 * 1.8,
            p99: p50 * 2.0,
            max: p50 * 2.0,
            mean: p50,
        }
    }

    fn run() -> Run {
        let fork = |count, kind, p50| ForkCase {
            count,
            kind,
            total: ms(p50),
            fork_request: ms(p50 / 2.0),
            children: ms(p50 / 2.0),
            server_took_ms: ms(p50 / 3.0),
            parent_after: ms(1.0),
            not_captured: vec![],
        };
        let pause = |kind, p, r| PauseCase {
            kind,
            pause: ms(p),
            resume: ms(r),
            after_resume: ms(1.0),
            hot_before: ms(1.0),
            state_bytes: Some(1 << 20),
        };
        let snap = |kind, p50| SnapshotCase {
            kind,
            take: ms(10.0),
            create_first: ms(p50),
            create: ms(p50 / 2.0),
            first_exec: ms(p50 / 2.0),
            state_bytes: Some(1000),
            variables: Some(5),
            workspace: Some(true),
            not_captured: vec!["lock (TypeError: cannot pickle)".into()],
        };
        let level = |n, h| PausedLevel {
            n,
            made_s: if n > 0 { 30.0 } else { 0.0 },
            listening: ms(h - 5.0),
            healthy: ms(h),
            took_over: ms(n as f64 / 100.0 + 20.0),
            first_answer: if n > 0 {
                ms(h + 20.0)
            } else {
                Summary::default()
            },
            resume: if n > 0 { ms(20.0) } else { Summary::default() },
            stop: ms(100.0),
            state_bytes: 4096 * n as u64,
            server_warnings: 0,
        };
        Run {
            command: "sandlot-bench fork pause snapshot paused-start".into(),
            date: "2026-11-25 14:00 UTC".into(),
            commit: "abc".into(),
            machine: crate::machine::Machine::detect(),
            server_start_s: 1.0,
            workspaces: Some("btrfs".into()),
            create: None,
            hot: None,
            clients: None,
            density: None,
            throughput: None,
            restart: None,
            burst: None,
            disk: None,
            fork: Some(ForkResult {
                conditions: Conditions::default(),
                cases: vec![
                    fork(1, Kind::Small, 15.0),
                    fork(5, Kind::Small, 30.0),
                    fork(100, Kind::Small, 1500.0),
                    fork(5, Kind::Big, 40.0),
                ],
                cleanup_errors: vec![],
            }),
            pause: Some(PauseResult {
                conditions: Conditions::default(),
                cases: vec![
                    pause(Kind::Small, 20.0, 20.0),
                    pause(Kind::Big, 150.0, 90.0),
                ],
            }),
            snapshot: Some(SnapshotResult {
                conditions: Conditions::default(),
                cases: vec![snap(Kind::Small, 12.0), snap(Kind::Big, 120.0)],
                cleanup_errors: vec![],
            }),
            paused_start: Some(PausedStartResult {
                conditions: Conditions::default(),
                starts_per_level: 3,
                levels: vec![level(0, 500.0), level(1000, 600.0)],
                took_over_ms_per_1000: 8.0,
                healthy_at_10k_ms: 1500.0,
                stopped: None,
            }),
            policy: None,
            egress: None,
            governance: None,
            audit: None,
            record: None,
            review: None,
            rollback: None,
            console: None,
        }
    }

    #[test]
    fn small_sizes_in_kib() {
        assert_eq!(fmt_size(7362.0), "7.2 KiB");
        assert_eq!(fmt_size(52_436_019.0), "50.0 MiB");
    }

    #[test]
    fn state_targets_are_judged_and_the_10k_start_is_not_claimed() {
        let r = run();
        let t = targets(&r);
        let get = |k: &str| {
            t.iter()
                .find(|t| t.key == k)
                .unwrap_or_else(|| panic!("{k}"))
        };
        assert_eq!(get("fork-1").pass, Some(true));
        assert_eq!(get("fork-5-50mb").pass, Some(true));
        assert_eq!(get("fork-100").pass, Some(false));
        assert_eq!(get("pause-50mb").pass, Some(false));
        assert_eq!(get("resume-small").pass, Some(true));
        assert_eq!(get("resume-50mb").pass, Some(true));
        assert_eq!(get("snapshot-create-small").pass, Some(true));
        assert_eq!(get("snapshot-create-50mb").pass, Some(false));
        let p = get("paused-start");
        assert_eq!(p.pass, None, "1000 measured, 10 000 only extrapolated");
        assert!(p.measured.contains("1500"), "{}", p.measured);
    }

    #[test]
    fn the_document_gains_the_state_sections_before_the_history() {
        let r = run();
        let doc = update_doc(TEMPLATE, &r);
        for name in ["fork", "pause", "snapshot", "paused-start"] {
            let b = block(&doc, name).unwrap_or_else(|| panic!("{name}"));
            assert!(!b.contains("not measured yet"), "{name}");
        }
        assert!(block(&doc, "fork")
            .unwrap()
            .contains("quoted, not measured here"));
        assert!(block(&doc, "paused-start")
            .unwrap()
            .contains("not measured: the largest N here is 1000"));
        assert!(doc.find("### 11.").unwrap() < doc.find("## History").unwrap());
        let targets = block(&doc, "targets").unwrap();
        assert!(targets.contains("| fork-5-50mb |") && targets.contains("| paused-start |"));
        let history = block(&doc, "history").unwrap();
        assert!(
            history.contains("fork 15.00 / 40.00 / 1500 ms"),
            "{history}"
        );
        // An older document without the sections gets them too, once.
        let old = "# B\n\n## History\n\n<!-- sandlot-bench:history -->\n<!-- /sandlot-bench:history -->\n";
        let d = update_doc(&update_doc(old, &r), &r);
        assert_eq!(d.matches("### 8. fork").count(), 1, "{d}");
    }
}
