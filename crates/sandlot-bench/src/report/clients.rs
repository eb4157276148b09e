//! The block, targets and history cell of benchmark 12 (issue 10): the E2B SDK's `run_code`
//! and MCP's `run_python` through their official clients, against sandlot's REST execute from
//! the same Python, measured in the same run.

use super::*;
use crate::clients::ClientsResult;

pub(super) const CLIENTS_HEADING: &str =
    "### 12. E2B SDK and MCP round trips through their official clients";

const E2B_GOAL: &str = "E2B SDK run_code(\"1+1\") ≤ 2 ms p50";
const MCP_GOAL: &str = "MCP run_python over streamable HTTP ≤ 3 ms p50";

/// `name version` of a client the run reported, or the pin it asked for.
fn version(c: &ClientsResult, name: &str) -> String {
    match c.versions.get(name) {
        Some(v) => format!("{name} {v}"),
        None => c
            .requirements
            .iter()
            .find(|r| r.split("==").next() == Some(name))
            .map(|r| r.replace("==", " "))
            .unwrap_or_else(|| name.to_owned()),
    }
}

/// `1.23× (+0.41 ms)`: p50 over REST's p50, and what that adds per call.
fn vs_rest(c: &ClientsResult, s: &Summary) -> String {
    match (c.vs_rest(s), c.rest) {
        (Some(r), Some(rest)) => {
            let d = s.p50 - rest.p50;
            let sign = if d < 0.0 { "−" } else { "+" };
            format!("{r:.2}× ({sign}{} ms)", fmt_ms(d.abs()))
        }
        _ => "—".into(),
    }
}

/// What a row shows: a client's numbers, or that it failed or did not run.
enum Cell<'a> {
    Measured(&'a Summary),
    /// The REST peer itself, which the others are compared with.
    Peer(&'a Summary),
    Failed,
    NotRun,
}

impl<'a> Cell<'a> {
    fn of(s: Option<&'a Summary>, failed: bool) -> Cell<'a> {
        match (s, failed) {
            (Some(s), _) => Cell::Measured(s),
            (None, true) => Cell::Failed,
            (None, false) => Cell::NotRun,
        }
    }
}

fn row(o: &mut String, c: &ClientsResult, name: &str, cell: Cell) {
    let numbers =
        |s: &Summary, vs: String| format!("{} | {} | {} | {vs}", fmt_ms(s.p50), fmt_ms(s.p99), s.n);
    let cells = match cell {
        Cell::Measured(s) => numbers(s, vs_rest(c, s)),
        Cell::Peer(s) => numbers(s, "1 (the peer)".into()),
        Cell::Failed => "failed¹ | | |".into(),
        Cell::NotRun => "not run | | |".into(),
    };
    let _ = writeln!(o, "| {name} | {cells} |");
}

pub fn clients_block(run: &Run, c: &ClientsResult) -> String {
    let mut o = provenance(run, &c.conditions);
    let _ = writeln!(
        o,
        "Each client runs in a venv of the env's base Python {} ({}) against this run's server over loopback, \
         on one sandbox of its own (E2B: `Sandbox.create()`; MCP: one session, whose sandbox its first call makes; \
         REST: `POST /v1/sandboxes`), with {} untimed calls first, then up to {} timed ones within {} s, each \
         checked against the first call's answer (`2`). Times are the client library's call as its user sees \
         it, taken in the client process.\n",
        c.versions
            .get("python")
            .map(String::as_str)
            .unwrap_or("?"),
        c.requirements.join(", "),
        c.warmup,
        c.iterations,
        c.loop_seconds
    );
    o.push_str(
        "| client | p50 ms | p99 ms | n | vs REST (p50 / p50) |\n| --- | ---: | ---: | ---: | ---: |\n",
    );
    row(
        &mut o,
        c,
        &format!(
            "**E2B SDK**: `Sandbox.run_code(\"1+1\")` ({}, {}): `POST /execute`, NDJSON events",
            version(c, "e2b-code-interpreter"),
            version(c, "e2b")
        ),
        Cell::of(c.e2b.as_ref(), c.failure("e2b").is_some()),
    );
    row(
        &mut o,
        c,
        &format!(
            "**MCP SDK**: `call_tool(\"run_python\", {{\"code\": \"1+1\"}})` over streamable HTTP ({}{})",
            version(c, "mcp"),
            c.mcp_protocol
                .as_deref()
                .map(|p| format!(", protocol {p}"))
                .unwrap_or_default()
        ),
        Cell::of(c.mcp.as_ref(), c.failure("mcp").is_some()),
    );
    row(
        &mut o,
        c,
        "… the same `tools/call` as raw JSON-RPC POSTs (`http.client`, one connection)",
        Cell::of(
            c.mcp_raw.as_ref(),
            c.failure("mcp").or(c.failure("mcp raw")).is_some(),
        ),
    );
    row(
        &mut o,
        c,
        &format!(
            "**REST**, the peer: `POST /v1/sandboxes/{{id}}/execute` `1+1` from Python ({}, one kept-alive connection)",
            version(c, "httpx")
        ),
        match &c.rest {
            Some(r) => Cell::Peer(r),
            None => Cell::of(None, c.failure("rest").is_some()),
        },
    );
    if let Some(h) = &c.hot_sandlot {
        row(
            &mut o,
            c,
            "for reference: the same REST call from the harness's Rust client (benchmark 2, this run)",
            Cell::Measured(h),
        );
    }
    if let Some(j) = &c.jupyter {
        row(
            &mut o,
            c,
            "for reference: Jupyter, `jupyter_client` → a local ipykernel (benchmark 2, this run)",
            Cell::Measured(j),
        );
    }
    match &c.watch {
        Some(w) => {
            let _ = writeln!(
                o,
                "\nE2B `watch_dir` (async SDK, envd's streamed `WatchDir`): a command in the sandbox creates a file every 50 ms \
                 after reading the clock (`date +%s%N`, so that process's start counts against us); time to its create event \
                 in the client's callback: p50 **{} ms**, p99 **{} ms**, max {} ms (n {}, {} missed).",
                fmt_ms(w.p50),
                fmt_ms(w.p99),
                fmt_ms(w.max),
                w.n,
                c.watch_missed.unwrap_or(0)
            );
        }
        None if c.failure("watch").is_some() => {
            o.push_str("\nE2B `watch_dir`: failed (¹).\n");
        }
        None => {}
    }
    let mut adds = Vec::new();
    if let (Some(e), Some(r)) = (&c.e2b, &c.rest) {
        adds.push(format!(
            "the E2B protocol and SDK add **{} ms** per `run_code` (p50, {:.2}×)",
            fmt_ms(e.p50 - r.p50),
            e.p50 / r.p50
        ));
    }
    if let (Some(m), Some(r)) = (&c.mcp, &c.rest) {
        let raw = c
            .mcp_raw
            .map(|w| {
                format!(
                    "; as raw JSON-RPC POSTs it is {} ms, so {} ms of that is the client library",
                    fmt_ms(w.p50),
                    fmt_ms(m.p50 - w.p50)
                )
            })
            .unwrap_or_default();
        adds.push(format!(
            "MCP over streamable HTTP with its SDK adds **{} ms** per `run_python` (p50, {:.2}×){raw}",
            fmt_ms(m.p50 - r.p50),
            m.p50 / r.p50
        ));
    }
    if !adds.is_empty() {
        let _ = writeln!(
            o,
            "\nOver sandlot's REST execute from the same Python: {}.",
            adds.join("; ")
        );
    }
    if !c.failures.is_empty() {
        let _ = writeln!(
            o,
            "\n¹ {}",
            c.failures
                .iter()
                .map(|f| format!("`{}`", one_line(f)))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    o
}

/// An error on one line, shortened, for a table's footnote.
fn one_line(s: &str) -> String {
    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    let s = s.replace('`', "'");
    if s.chars().count() > 300 {
        format!("{}…", s.chars().take(300).collect::<String>())
    } else {
        s
    }
}

pub(super) fn clients_targets(run: &Run, t: &mut Vec<Target>) {
    let Some(c) = &run.clients else { return };
    let measured = |s: &Summary| {
        format!(
            "{} ms (p99 {} ms, n {}; REST from Python {})",
            fmt_ms(s.p50),
            fmt_ms(s.p99),
            s.n,
            c.rest
                .map(|r| format!("{} ms", fmt_ms(r.p50)))
                .unwrap_or_else(|| "not measured".into())
        )
    };
    const RATIO: &str = "E2B run_code(\"1+1\") p50 ≤ 1.5× REST's from the same Python (issue 21)";
    const WATCH: &str = "E2B watch_dir event ≤ 50 ms p99 after the write (issue 21)";
    t.push(match (&c.e2b, &c.rest) {
        (Some(e), Some(r)) if r.p50 > 0.0 => Target::at_most(
            "e2b-vs-rest",
            RATIO,
            e.p50 / r.p50,
            1.5,
            "×",
            format!(
                "{:.2}× ({} ms vs {} ms)",
                e.p50 / r.p50,
                fmt_ms(e.p50),
                fmt_ms(r.p50)
            ),
        ),
        _ => Target::unmeasured("e2b-vs-rest", RATIO, "E2B or REST not measured".into()),
    });
    t.push(match &c.watch {
        Some(w) => Target::at_most(
            "watch-event",
            WATCH,
            w.p99,
            50.0,
            "ms",
            format!(
                "p99 {} ms (p50 {} ms, n {}, {} missed)",
                fmt_ms(w.p99),
                fmt_ms(w.p50),
                w.n,
                c.watch_missed.unwrap_or(0)
            ),
        ),
        None => Target::unmeasured(
            "watch-event",
            WATCH,
            format!(
                "failed: {}",
                one_line(c.failure("watch").unwrap_or("no samples"))
            ),
        ),
    });
    for (key, goal, s, limit, name) in [
        ("e2b-rtt", E2B_GOAL, &c.e2b, 2.0, "e2b"),
        ("mcp-rtt", MCP_GOAL, &c.mcp, 3.0, "mcp"),
    ] {
        t.push(match s {
            Some(s) => Target::at_most(key, goal, s.p50, limit, "ms", measured(s)),
            None => Target::unmeasured(
                key,
                goal,
                format!(
                    "failed: {}",
                    one_line(c.failure(name).unwrap_or("no samples"))
                ),
            ),
        });
    }
}

/// The history table's cell: E2B / MCP / REST-from-Python p50s.
pub(super) fn clients_history_cell(run: &Run) -> String {
    let Some(c) = &run.clients else {
        return String::new();
    };
    let p = |s: &Option<Summary>| s.map(|s| fmt_ms(s.p50)).unwrap_or("—".into());
    format!("{} / {} / {} ms", p(&c.e2b), p(&c.mcp), p(&c.rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(p50: f64, n: usize) -> Summary {
        Summary {
            n,
            min: p50 / 2.0,
            p50,
            p90: p50 * 1.5,
            p95: p50 * 1.8,
            p99: p50 * 2.0,
            max: p50 * 3.0,
            mean: p50,
        }
    }

    fn clients() -> ClientsResult {
        ClientsResult {
            conditions: Conditions::default(),
            iterations: 2000,
            warmup: 100,
            loop_seconds: 120,
            rest: Some(ms(0.8, 2000)),
            e2b: Some(ms(1.6, 2000)),
            mcp: Some(ms(3.5, 1900)),
            mcp_raw: Some(ms(1.2, 2000)),
            watch: Some(ms(3.0, 200)),
            watch_missed: Some(0),
            hot_sandlot: None,
            jupyter: None,
            requirements: crate::clients::REQUIREMENTS
                .iter()
                .map(|r| (*r).to_owned())
                .collect(),
            versions: [
                ("python", "3.11.2"),
                ("httpx", "0.28.1"),
                ("e2b", "2.63.0"),
                ("e2b-code-interpreter", "2.11.5"),
                ("mcp", "2.3.0"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
            mcp_protocol: Some("2025-11-25".into()),
            failures: vec![],
        }
    }

    fn run(c: ClientsResult) -> Run {
        Run {
            command: "sandlot-bench clients".into(),
            date: "2026-11-26 12:00 UTC".into(),
            commit: "abc".into(),
            machine: crate::machine::Machine::detect(),
            server_start_s: 1.0,
            workspaces: Some("btrfs".into()),
            create: None,
            hot: None,
            clients: Some(c),
            density: None,
            throughput: None,
            restart: None,
            burst: None,
            disk: None,
            fork: None,
            pause: None,
            snapshot: None,
            paused_start: None,
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

    fn target<'a>(t: &'a [Target], k: &str) -> &'a Target {
        t.iter()
            .find(|t| t.key == k)
            .unwrap_or_else(|| panic!("{k}"))
    }

    #[test]
    fn the_block_compares_every_client_with_rest_from_python() {
        let c = clients_with_refs();
        let b = clients_block(&run(c.clone()), &c);
        assert!(
            b.contains("| client | p50 ms | p99 ms | n | vs REST (p50 / p50) |"),
            "{b}"
        );
        assert!(
            b.contains("(e2b-code-interpreter 2.11.5, e2b 2.63.0)")
                && b.contains("| 1.60 | 3.20 | 2000 | 2.00× (+0.800 ms) |"),
            "{b}"
        );
        assert!(
            b.contains(
                "(mcp 2.3.0, protocol 2025-11-25) | 3.50 | 7.00 | 1900 | 4.38× (+2.70 ms) |"
            ),
            "{b}"
        );
        assert!(b.contains("raw JSON-RPC POSTs (`http.client`, one connection) | 1.20 | 2.40 | 2000 | 1.50× (+0.400 ms) |"), "{b}");
        assert!(
            b.contains(
                "(httpx 0.28.1, one kept-alive connection) | 0.800 | 1.60 | 2000 | 1 (the peer) |"
            ),
            "{b}"
        );
        assert!(
            b.contains(
                "Rust client (benchmark 2, this run) | 0.250 | 0.500 | 2000 | 0.31× (−0.550 ms) |"
            ),
            "{b}"
        );
        assert!(b.contains("Jupyter"), "{b}");
        assert!(b.contains("add **0.800 ms** per `run_code`"), "{b}");
        assert!(
            b.contains("so 2.30 ms of that is the client library"),
            "{b}"
        );
        assert!(b.contains("Python 3.11.2"), "{b}");
        assert!(!b.contains('¹'), "no failures, no footnote: {b}");
    }

    fn clients_with_refs() -> ClientsResult {
        let mut c = clients();
        c.hot_sandlot = Some(ms(0.25, 2000));
        c.jupyter = Some(ms(1.1, 2000));
        c
    }

    #[test]
    fn targets_judge_the_p50s_and_failures_are_not_judged() {
        let t = targets(&run(clients()));
        let e = target(&t, "e2b-rtt");
        assert_eq!(e.pass, Some(true));
        assert_eq!(e.goal, "E2B SDK run_code(\"1+1\") ≤ 2 ms p50");
        assert!(
            e.measured.contains("REST from Python 0.800 ms"),
            "{}",
            e.measured
        );
        let m = target(&t, "mcp-rtt");
        assert_eq!(m.pass, Some(false));
        assert!(m.by.contains("1.17×"), "{}", m.by);

        let mut c = clients();
        c.mcp = None;
        c.mcp_raw = None;
        c.rest = None;
        c.failures = vec![
            "mcp: python mcp_rtt.py failed (exit status: 1):\nConnectError `x`".into(),
            "rest: boom".into(),
        ];
        let r = run(c);
        let t = targets(&r);
        let m = target(&t, "mcp-rtt");
        assert_eq!(m.pass, None);
        assert!(m.measured.contains("ConnectError 'x'"), "{}", m.measured);
        assert!(target(&t, "e2b-rtt")
            .measured
            .contains("REST from Python not measured"));
        let b = clients_block(&r, r.clients.as_ref().unwrap());
        assert!(b.contains("| failed¹ |"), "{b}");
        assert!(b.contains("| 1.60 | 3.20 | 2000 | — |"), "{b}");
        assert!(b.contains("¹ `mcp: python mcp_rtt.py failed"), "{b}");
        assert!(!b.contains("Over sandlot's REST"), "{b}");
        assert_eq!(clients_history_cell(&r), "1.60 / — / — ms");
    }

    #[test]
    fn the_document_gains_the_clients_section_rows_and_history() {
        let r = run(clients());
        let doc = update_doc(TEMPLATE, &r);
        let b = block(&doc, "clients").expect("clients block");
        assert!(!b.contains("not measured yet"));
        assert!(doc.find(CLIENTS_HEADING).unwrap() < doc.find("## History").unwrap());
        let targets = block(&doc, "targets").unwrap();
        assert!(
            targets.contains("| e2b-rtt |") && targets.contains("| mcp-rtt |"),
            "{targets}"
        );
        let history = block(&doc, "history").unwrap();
        assert!(history.contains("| 1.60 / 3.50 / 0.800 ms |"), "{history}");
        // An older document without the section gets it once, with the other rows kept.
        let old = "# B\n\n<!-- sandlot-bench:targets -->\n| key | t | m | r | b | d |\n| --- | --- | --- | --- | --- | --- |\n| hot-p50 | x | y | z | w | d |\n<!-- /sandlot-bench:targets -->\n\n## History\n\n<!-- sandlot-bench:history -->\n<!-- /sandlot-bench:history -->\n";
        let d = update_doc(&update_doc(old, &r), &r);
        assert_eq!(d.matches(CLIENTS_HEADING).count(), 1, "{d}");
        let targets = block(&d, "targets").unwrap();
        let keys: Vec<String> = table_rows(targets).iter().map(|r| row_key(r)).collect();
        assert_eq!(
            keys,
            [
                "hot-p50",
                "e2b-rtt",
                "e2b-vs-rest",
                "watch-event",
                "mcp-rtt"
            ]
        );
    }
}
