//! The blocks, targets and history cell of the governance benchmarks of issue 7: one Cedar
//! decision with 100 policies loaded (13), the latency the egress proxy adds (14), and hot
//! `1+1` and create with governance on against a `SANDLOT_AUTH=off` server in the same run (15).

use super::*;
use crate::egress::EgressResult;
use crate::governance::{self, GovernanceResult};
use crate::policy::{self, PolicyBenchResult};
use serde::Serialize;

pub(super) const POLICY_HEADING: &str =
    "### 13. a policy decision with 100 policies loaded (in process)";
pub(super) const EGRESS_HEADING: &str =
    "### 14. egress: a GET to a loopback server, direct and through the proxy";
pub(super) const GOVERNANCE_HEADING: &str =
    "### 15. governance on against off: hot `1+1` and create, two servers in one run";

const POLICY_GOAL: &str = "a policy decision p99 ≤ 50 µs with 100 policies loaded (issue 7)";
const EGRESS_GOAL: &str =
    "egress through the proxy adds ≤ 1 ms to a request to a loopback server, at p50 and p99 (issue 7)";
const GOVERNANCE_GOAL: &str =
    "hot `1+1` with auth and policy on within 10% of the same run with them off (p50 / p50 ≤ 1.10; issue 7)";
/// The bound on what the proxy adds, ms.
const EGRESS_LIMIT_MS: f64 = 1.0;

/// A benchmark that runs in the harness's process (no server), with the load around it.
#[derive(Debug, Clone, Serialize)]
pub struct InProcess<T> {
    pub conditions: Conditions,
    pub result: T,
}

pub(super) fn provenance_in_process(run: &Run, c: &Conditions) -> String {
    format!(
        "_Measured {} with `{}` at commit `{}` on {}; in the harness's process; took {:.1} s; load average {} → {}._\n\n",
        run.date,
        run.command,
        run.commit,
        run.machine.describe(),
        c.seconds,
        c.load_before,
        c.load_after,
    )
}

fn us(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.2}")
    } else if v < 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

pub fn policy_block(run: &Run, p: &InProcess<PolicyBenchResult>) -> String {
    let r = &p.result;
    let mut o = provenance_in_process(run, &p.conditions);
    let _ = writeln!(
        o,
        "`PolicyEngine::decide` as the server calls it (building the Cedar request included) over a \
         synthetic set of {} policies spread over every gate, with queries from 20 principals of 20 tenants \
         on several plans, every gate in turn; {} timed decisions after 2000 untimed ones, one thread. \
         {} allowed, {} denied.\n",
        r.policies, r.samples, r.allowed, r.denied
    );
    o.push_str("| µs | p50 | p90 | p99 | max | n |\n| --- | ---: | ---: | ---: | ---: | ---: |\n");
    let _ = writeln!(
        o,
        "| **one decision**, wall clock, all gates | {} | {} | {} | {} | {} |",
        us(r.p50_us),
        us(r.p90_us),
        us(r.p99_us),
        us(r.max_us),
        r.samples
    );
    let _ = writeln!(
        o,
        "| … the same on the thread's CPU clock (preemption left out) | {} | | {} | | {} |",
        us(r.cpu_p50_us),
        us(r.cpu_p99_us),
        r.samples
    );
    let _ = writeln!(
        o,
        "| … every policy of the gate evaluated (no guard index) | {} | | {} | | {} |",
        us(r.unindexed_p50_us),
        us(r.unindexed_p99_us),
        r.samples
    );
    for g in &r.per_gate {
        let _ = writeln!(
            o,
            "| gate `{}` | {} | | {} | | {} |",
            g.gate,
            us(g.p50_us),
            us(g.p99_us),
            g.n
        );
    }
    let _ = writeln!(
        o,
        "\nValidating the {}-policy set against the schema and swapping it in (`PUT /v1/policies`): {:.1} ms (median of 5).",
        r.policies, r.replace_ms
    );
    o
}

pub fn egress_block(run: &Run, e: &InProcess<EgressResult>) -> String {
    let r = &e.result;
    let mut o = provenance_in_process(run, &e.conditions);
    o.push_str(
        "A GET on a fresh connection (as pip does through a proxy) to a small HTTP server on loopback, timed \
         until the whole answer arrived, direct and through `sandlot-egress`'s proxy as the server runs it \
         (allowlist naming the server's address, every check on, its own tokio runtime with one worker), \
         interleaved one by one, after 50 untimed pairs.\n\n",
    );
    o.push_str(SUMMARY_HEADER);
    summary_row(&mut o, "direct GET", &r.direct);
    summary_row(
        &mut o,
        "**through the proxy** (`GET http://…` to the proxy)",
        &r.proxied,
    );
    let _ = writeln!(
        o,
        "\nThe proxy adds **{} ms** at p50 and **{} ms** at p99 (target: ≤ 1 ms).",
        fmt_ms(r.added_p50_ms),
        fmt_ms(r.added_p99_ms)
    );
    o
}

pub fn governance_block(run: &Run, g: &GovernanceResult) -> String {
    let mut o = provenance(run, &g.conditions);
    let _ = writeln!(
        o,
        "Two servers in this run on the same binary and env: **on** is the harness's server as shipped (API key \
         on every request, the shipped Cedar policy set decided at every gate and each decision journaled, the \
         output guard scanning every result, canary and proxy environment in every sandbox); **off** is a second \
         server started with `SANDLOT_AUTH=off` (no keys, no policy, no guard; loopback only; started in {:.2} s). \
         Hot `1+1`: one sandbox on each, {} untimed round trips on each, then {} rounds of {} on each, \
         alternating which server goes first.\n",
        g.off_started_s, g.warmup, g.rounds, g.per_round
    );
    o.push_str(SUMMARY_HEADER);
    summary_row(&mut o, "**on**: `POST …/execute` `1+1`", &g.on);
    summary_row(&mut o, "**off**: `POST …/execute` `1+1`", &g.off);
    summary_row(
        &mut o,
        "on: the server's own `duration_ms`",
        &g.on_server_ms,
    );
    summary_row(
        &mut o,
        "off: the server's own `duration_ms`",
        &g.off_server_ms,
    );
    if let Some(c) = &g.create {
        summary_row(&mut o, "on: `POST /v1/sandboxes` + `print(1)`", &c.on);
        summary_row(&mut o, "off: `POST /v1/sandboxes` + `print(1)`", &c.off);
        summary_row(&mut o, "on: … of which `POST /v1/sandboxes`", &c.on_create);
        summary_row(
            &mut o,
            "off: … of which `POST /v1/sandboxes`",
            &c.off_create,
        );
    }
    let (lo, mid, hi) = g.round_ratio;
    let _ = write!(
        o,
        "\nHot `1+1`: on / off is **{:.3}** at p50 (+{} ms) and {:.3} at p99 (target: p50 / p50 ≤ {:.2}); \
         per round, p50 / p50 ranged {lo:.3}–{hi:.3} (median {mid:.3}).",
        g.ratio_p50,
        fmt_ms(g.on.p50 - g.off.p50),
        g.ratio_p99,
        g.target_ratio
    );
    if g.on_cpu_us > 0.0 && g.off_cpu_us > 0.0 {
        let _ = write!(
            o,
            " The server process's CPU time per `1+1` (all its threads): on {:.0} µs, off {:.0} µs (+{:.0} µs).",
            g.on_cpu_us,
            g.off_cpu_us,
            g.on_cpu_us - g.off_cpu_us
        );
    }
    if let Some(c) = &g.create {
        let _ = write!(
            o,
            " Create → first result: on / off **{:.3}** at p50 ({} vs {} ms; {} on each, alternating, \
             each after its pool had {} ms to refill).",
            c.ratio_p50,
            fmt_ms(c.on.p50),
            fmt_ms(c.off.p50),
            c.on.n,
            governance::CREATE_SETTLE.as_millis()
        );
    }
    if let Some(j) = &g.journal {
        let _ = write!(
            o,
            " The on server journaled {} execute decisions (the last ones read back; {} allowed) under policy \
             set `{}` ({} policies); their recorded latency: p50 {} µs, p99 {} µs.",
            j.execute_decisions,
            j.allowed,
            j.policy_version,
            j.policies,
            us(j.decide_p50_us),
            us(j.decide_p99_us)
        );
    }
    o.push('\n');
    o
}

pub(super) fn governance_targets(run: &Run, t: &mut Vec<Target>) {
    if let Some(p) = &run.policy {
        let r = &p.result;
        t.push(Target::at_most(
            "policy-p99",
            POLICY_GOAL,
            r.p99_us,
            policy::TARGET_P99_US,
            "µs",
            format!(
                "{} µs (p50 {} µs, CPU-clock p99 {} µs, n {}, {} policies)",
                us(r.p99_us),
                us(r.p50_us),
                us(r.cpu_p99_us),
                r.samples,
                r.policies
            ),
        ));
    }
    if let Some(e) = &run.egress {
        let r = &e.result;
        let worst = r.added_p50_ms.max(r.added_p99_ms);
        t.push(Target::at_most(
            "egress-added",
            EGRESS_GOAL,
            worst,
            EGRESS_LIMIT_MS,
            "ms",
            format!(
                "+{} ms p50, +{} ms p99 ({} → {} ms p50, n {})",
                fmt_ms(r.added_p50_ms),
                fmt_ms(r.added_p99_ms),
                fmt_ms(r.direct.p50),
                fmt_ms(r.proxied.p50),
                r.proxied.n
            ),
        ));
    }
    if let Some(g) = &run.governance {
        t.push(Target::at_most(
            "governance-hot",
            GOVERNANCE_GOAL,
            g.ratio_p50,
            governance::TARGET_RATIO,
            "",
            format!(
                "{:.3} ({} vs {} ms; p99 {} vs {} ms)",
                g.ratio_p50,
                fmt_ms(g.on.p50),
                fmt_ms(g.off.p50),
                fmt_ms(g.on.p99),
                fmt_ms(g.off.p99)
            ),
        ));
    }
}

/// The history table's cell: policy p99 / egress added p50 / hot on-off ratio.
pub(super) fn governance_history_cell(run: &Run) -> String {
    let mut parts = Vec::new();
    if let Some(p) = &run.policy {
        parts.push(format!("decision p99 {} µs", us(p.result.p99_us)));
    }
    if let Some(e) = &run.egress {
        parts.push(format!(
            "proxy +{} / +{} ms",
            fmt_ms(e.result.added_p50_ms),
            fmt_ms(e.result.added_p99_ms)
        ));
    }
    if let Some(g) = &run.governance {
        parts.push(format!(
            "hot on/off {:.3} ({} / {} ms)",
            g.ratio_p50,
            fmt_ms(g.on.p50),
            fmt_ms(g.off.p50)
        ));
        if let Some(c) = &g.create {
            parts.push(format!("create on/off {:.3}", c.ratio_p50));
        }
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::governance::{CreatePair, Journal};

    fn ms(p50: f64) -> Summary {
        Summary {
            n: 100,
            p50,
            p99: p50 * 2.0,
            ..Summary::default()
        }
    }

    fn run(g: GovernanceResult) -> Run {
        Run {
            command: "sandlot-bench governance".into(),
            date: "2026-11-26 15:00 UTC".into(),
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
            fork: None,
            pause: None,
            snapshot: None,
            paused_start: None,
            policy: None,
            egress: Some(InProcess {
                conditions: Conditions::default(),
                result: EgressResult {
                    direct: ms(0.03),
                    proxied: ms(0.08),
                    added_p50_ms: 0.05,
                    added_p99_ms: 1.2,
                },
            }),
            governance: Some(g),
            audit: None,
            record: None,
            review: None,
            rollback: None,
            console: None,
        }
    }

    fn result(on: f64, off: f64) -> GovernanceResult {
        GovernanceResult {
            conditions: Conditions::default(),
            rounds: 30,
            per_round: 100,
            warmup: 100,
            on: ms(on),
            off: ms(off),
            on_server_ms: ms(0.7),
            off_server_ms: ms(0.7),
            ratio_p50: on / off,
            ratio_p99: on / off,
            round_ratio: (1.0, on / off, 2.0),
            on_cpu_us: 500.0,
            off_cpu_us: 300.0,
            create: Some(CreatePair {
                on: ms(7.0),
                off: ms(6.0),
                on_create: ms(1.6),
                off_create: ms(1.2),
                ratio_p50: 7.0 / 6.0,
            }),
            journal: Some(Journal {
                execute_decisions: 1000,
                allowed: 1000,
                decide_p50_us: 70.0,
                decide_p99_us: 130.0,
                policy_version: "d07adb0c7de69ea2".into(),
                policies: 5,
            }),
            off_started_s: 1.5,
            target_ratio: governance::TARGET_RATIO,
        }
    }

    fn target<'a>(t: &'a [Target], k: &str) -> &'a Target {
        t.iter()
            .find(|t| t.key == k)
            .unwrap_or_else(|| panic!("{k}"))
    }

    #[test]
    fn ratio_and_proxy_are_judged() {
        let r = run(result(1.5, 1.0));
        let t = targets(&r);
        assert_eq!(target(&t, "governance-hot").pass, Some(false));
        // The worse of the two added latencies decides: p99 adds 1.2 ms here.
        assert_eq!(target(&t, "egress-added").pass, Some(false));
        let r = run(result(1.05, 1.0));
        assert_eq!(target(&targets(&r), "governance-hot").pass, Some(true));
    }

    #[test]
    fn block_history_and_doc() {
        let r = run(result(1.5, 1.0));
        let b = governance_block(&r, r.governance.as_ref().unwrap());
        assert!(b.contains("**1.500** at p50"), "{b}");
        assert!(b.contains("5 policies"), "{b}");
        assert!(b.contains("+200 µs"), "{b}");
        let h = governance_history_cell(&r);
        assert!(
            h.contains("hot on/off 1.500") && h.contains("proxy +0.050"),
            "{h}"
        );
        let doc = update_doc(TEMPLATE, &r);
        assert!(block(&doc, "governance")
            .unwrap()
            .contains("SANDLOT_AUTH=off"));
        assert!(block(&doc, "egress").unwrap().contains("0.050"));
        assert_eq!(block(&doc, "policy"), Some("_not measured yet_"));
        assert!(block(&doc, "targets")
            .unwrap()
            .contains("| governance-hot |"));
    }
}
