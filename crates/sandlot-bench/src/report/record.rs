//! The blocks, targets and history cell of the record's benchmarks (issue 8): the audit log's
//! append rate and `verify` of a million records, in process (16), and hot `1+1` on a server
//! with audit, metrics and OTLP traces on against one with them off, in the same run (17).

use super::*;
use crate::audit::{self, AuditBenchResult};
use crate::record::{self, RecordOn, RecordResult};

pub(super) const AUDIT_HEADING: &str =
    "### 16. audit log: append and `verify` of a million records (in process)";
pub(super) const RECORD_HEADING: &str =
    "### 17. the record on against off: hot `1+1`, two servers in one run";

const AUDIT_APPEND_GOAL: &str = "audit append ≥ 20 000 records/s (issue 8)";
const AUDIT_VERIFY_GOAL: &str = "`sandlot audit verify` of 1 million records ≤ 10 s (issue 8)";
const RECORD_GOAL: &str =
    "hot `1+1` with audit, metrics and traces on within 10% of the same run with them off (p50 / p50 ≤ 1.10; issue 8)";
/// The record count the verify target is stated for.
const VERIFY_TARGET_RECORDS: u64 = 1_000_000;

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

pub fn audit_block(run: &Run, a: &InProcess<AuditBenchResult>) -> String {
    let r = &a.result;
    let mut o = provenance_in_process(run, &a.conditions);
    o.push_str(&audit::markdown(r));
    o.push('\n');
    o.push_str("| | records | time, s | per record, µs | rate, records/s | target |\n| --- | ---: | ---: | ---: | ---: | --- |\n");
    let per = |s: f64| 1e6 * s / r.records.max(1) as f64;
    let _ = writeln!(
        o,
        "| **append** (`AuditLog::append`, then `close`) | {} | {:.2} | {:.2} | {:.0} | ≥ {:.0} records/s |",
        r.records,
        r.append_seconds,
        per(r.append_seconds),
        r.append_per_s,
        r.append_target_per_s
    );
    let _ = writeln!(
        o,
        "| **verify** (`sandlot audit verify`'s check) | {} | {:.2} | {:.2} | {:.0} | ≤ {:.0} s for {} |",
        r.records,
        r.verify_seconds,
        per(r.verify_seconds),
        r.records as f64 / r.verify_seconds.max(1e-9),
        r.verify_target_s,
        VERIFY_TARGET_RECORDS
    );
    let _ = writeln!(
        o,
        "\n{:.0} bytes per record on disk ({:.0} MiB in all).",
        r.bytes as f64 / r.records.max(1) as f64,
        mib(r.bytes)
    );
    o
}

pub fn record_block(run: &Run, r: &RecordResult) -> String {
    let mut o = provenance(run, &r.conditions);
    if r.on_records != RecordOn::All {
        let _ = writeln!(
            o,
            "**A diagnostic run: the on server recorded {} only** (`--record-on`); the target is judged \
             on everything on.\n",
            r.on_records.describe()
        );
    }
    let _ = writeln!(
        o,
        "Two servers started for this benchmark on the same binary and env, both with API keys and the shipped \
         policy (governance costs both alike): **on** records everything as shipped (the audit log appending a \
         hash-chained record per request and per lifecycle event with signed checkpoints, Prometheus metrics, \
         and OTLP/HTTP traces batched to a sink on loopback that accepts and drops every export); **off** runs \
         with `SANDLOT_AUDIT=off` and no OTLP endpoint (its metrics are still counted: they are atomics). \
         Hot `1+1`: one sandbox on each, {} untimed round trips on each, then {} rounds of {} on each, \
         alternating which server goes first.\n",
        r.warmup, r.rounds, r.per_round
    );
    o.push_str(SUMMARY_HEADER);
    summary_row(&mut o, "**on**: `POST …/execute` `1+1`", &r.on);
    summary_row(&mut o, "**off**: `POST …/execute` `1+1`", &r.off);
    summary_row(
        &mut o,
        "on: the server's own `duration_ms`",
        &r.on_server_ms,
    );
    summary_row(
        &mut o,
        "off: the server's own `duration_ms`",
        &r.off_server_ms,
    );
    let (lo, mid, hi) = r.round_ratio;
    let _ = write!(
        o,
        "\nHot `1+1`: on / off is **{:.3}** at p50 (+{} ms) and {:.3} at p99 (+{} ms) (target: p50 / p50 ≤ {:.2}); \
         per round, p50 / p50 ranged {lo:.3}–{hi:.3} (median {mid:.3}).",
        r.ratio_p50,
        fmt_ms(r.on.p50 - r.off.p50),
        r.ratio_p99,
        fmt_ms(r.on.p99 - r.off.p99),
        r.target_ratio
    );
    if r.on_cpu_us > 0.0 && r.off_cpu_us > 0.0 {
        let _ = write!(
            o,
            " The server process's CPU time per `1+1` (all its threads): on {:.0} µs, off {:.0} µs (+{:.0} µs).",
            r.on_cpu_us,
            r.off_cpu_us,
            r.on_cpu_us - r.off_cpu_us
        );
    }
    let _ = write!(
        o,
        " The on server's `sandlot_executions_total` counted {:.0} executions over the run ({} timed and {} \
         warm-up were sent); the sink received {} OTLP exports ({:.1} KiB).",
        r.executions_counted,
        r.on.n,
        r.warmup,
        r.otlp_requests,
        r.otlp_bytes as f64 / 1024.0
    );
    o.push('\n');
    o
}

pub(super) fn record_targets(run: &Run, t: &mut Vec<Target>) {
    if let Some(a) = &run.audit {
        let r = &a.result;
        t.push(Target::at_least(
            "audit-append",
            AUDIT_APPEND_GOAL,
            r.append_per_s,
            audit::TARGET_APPEND_PER_S,
            "records/s",
            format!(
                "{:.0} records/s ({} records in {:.2} s)",
                r.append_per_s, r.records, r.append_seconds
            ),
        ));
        if r.records >= VERIFY_TARGET_RECORDS {
            t.push(Target::at_most(
                "audit-verify",
                AUDIT_VERIFY_GOAL,
                r.verify_seconds,
                audit::TARGET_VERIFY_S,
                "s",
                format!(
                    "{:.2} s ({} records, {} checkpoints)",
                    r.verify_seconds, r.records, r.checkpoints
                ),
            ));
        } else {
            t.push(Target::unmeasured(
                "audit-verify",
                AUDIT_VERIFY_GOAL,
                format!(
                    "only {} records verified ({:.2} s); the target is for {VERIFY_TARGET_RECORDS}",
                    r.records, r.verify_seconds
                ),
            ));
        }
    }
    if let Some(r) = run
        .record
        .as_ref()
        .filter(|r| r.on_records != RecordOn::All)
    {
        t.push(Target::unmeasured(
            "record-hot",
            RECORD_GOAL,
            format!(
                "diagnostic run, on = {} only: {:.3} ({} vs {} ms)",
                r.on_records.describe(),
                r.ratio_p50,
                fmt_ms(r.on.p50),
                fmt_ms(r.off.p50)
            ),
        ));
    } else if let Some(r) = &run.record {
        t.push(Target::at_most(
            "record-hot",
            RECORD_GOAL,
            r.ratio_p50,
            record::TARGET_RATIO,
            "",
            format!(
                "{:.3} ({} vs {} ms; p99 {} vs {} ms)",
                r.ratio_p50,
                fmt_ms(r.on.p50),
                fmt_ms(r.off.p50),
                fmt_ms(r.on.p99),
                fmt_ms(r.off.p99)
            ),
        ));
    }
}

/// The history table's cell: audit append rate and verify time / hot on-off ratio.
pub(super) fn record_history_cell(run: &Run) -> String {
    let mut parts = Vec::new();
    if let Some(a) = &run.audit {
        let r = &a.result;
        parts.push(format!(
            "audit {:.0}/s, verify {:.2} s ({} records)",
            r.append_per_s, r.verify_seconds, r.records
        ));
    }
    if let Some(r) = &run.record {
        parts.push(format!(
            "hot on/off {:.3} ({} / {} ms){}",
            r.ratio_p50,
            fmt_ms(r.on.p50),
            fmt_ms(r.off.p50),
            match r.on_records {
                RecordOn::All => String::new(),
                o => format!(", on = {} only", o.describe()),
            }
        ));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(p50: f64) -> Summary {
        Summary {
            n: 3000,
            p50,
            p99: p50 * 2.0,
            ..Summary::default()
        }
    }

    fn run(audit: Option<AuditBenchResult>, record: Option<RecordResult>) -> Run {
        Run {
            command: "sandlot-bench audit record".into(),
            date: "2026-11-27 18:00 UTC".into(),
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
            egress: None,
            governance: None,
            audit: audit.map(|result| InProcess {
                conditions: Conditions::default(),
                result,
            }),
            record,
            review: None,
            rollback: None,
            console: None,
        }
    }

    fn audit_result(records: u64, append_s: f64, verify_s: f64) -> AuditBenchResult {
        let append_per_s = records as f64 / append_s;
        AuditBenchResult {
            records,
            bytes: records * 700,
            checkpoints: (records / 1000) as usize,
            append_seconds: append_s,
            append_per_s,
            append_target_per_s: audit::TARGET_APPEND_PER_S,
            append_met: append_per_s >= audit::TARGET_APPEND_PER_S,
            verify_seconds: verify_s,
            verify_target_s: audit::TARGET_VERIFY_S,
            verify_met: verify_s <= audit::TARGET_VERIFY_S,
        }
    }

    fn record_result(on: f64, off: f64) -> RecordResult {
        RecordResult {
            conditions: Conditions::default(),
            on_records: RecordOn::All,
            rounds: 30,
            per_round: 100,
            warmup: 100,
            on: ms(on),
            off: ms(off),
            on_server_ms: ms(0.6),
            off_server_ms: ms(0.5),
            ratio_p50: on / off,
            ratio_p99: on / off,
            on_cpu_us: 450.0,
            off_cpu_us: 300.0,
            round_ratio: (1.0, on / off, 1.5),
            executions_counted: 3100.0,
            otlp_requests: 12,
            otlp_bytes: 4096,
            target_ratio: record::TARGET_RATIO,
        }
    }

    fn target<'a>(t: &'a [Target], k: &str) -> &'a Target {
        t.iter()
            .find(|t| t.key == k)
            .unwrap_or_else(|| panic!("{k}"))
    }

    #[test]
    fn targets_are_judged() {
        // 1 M records in 40 s is 25 000/s: met; verify in 12 s: missed; 1.2 on/off: missed.
        let r = run(
            Some(audit_result(1_000_000, 40.0, 12.0)),
            Some(record_result(1.2, 1.0)),
        );
        let t = targets(&r);
        assert_eq!(target(&t, "audit-append").pass, Some(true));
        assert_eq!(target(&t, "audit-verify").pass, Some(false));
        assert_eq!(target(&t, "record-hot").pass, Some(false));
        let r = run(
            Some(audit_result(1_000_000, 100.0, 4.0)),
            Some(record_result(1.05, 1.0)),
        );
        let t = targets(&r);
        assert_eq!(target(&t, "audit-append").pass, Some(false));
        assert_eq!(target(&t, "audit-verify").pass, Some(true));
        assert_eq!(target(&t, "record-hot").pass, Some(true));
        // Fewer records than the target names: verify is not judged, the rate still is.
        let r = run(Some(audit_result(10_000, 0.2, 0.05)), None);
        let t = targets(&r);
        assert_eq!(target(&t, "audit-verify").pass, None);
        assert!(target(&t, "audit-verify").measured.contains("only 10000"));
        assert_eq!(target(&t, "audit-append").pass, Some(true));
        assert!(t.iter().all(|t| t.key != "record-hot"));
        // A diagnostic run (one part on) is shown, not judged.
        let mut d = record_result(1.5, 1.0);
        d.on_records = RecordOn::Audit;
        let r = run(None, Some(d));
        let t = targets(&r);
        assert_eq!(target(&t, "record-hot").pass, None);
        assert!(target(&t, "record-hot")
            .measured
            .contains("audit and metrics (no traces) only"));
        assert!(record_block(&r, r.record.as_ref().unwrap()).contains("A diagnostic run"));
        assert!(record_history_cell(&r).ends_with(", on = audit and metrics (no traces) only"));
    }

    #[test]
    fn blocks_and_history_cell() {
        let r = run(
            Some(audit_result(1_000_000, 40.0, 4.5)),
            Some(record_result(0.9, 0.75)),
        );
        let a = audit_block(&r, r.audit.as_ref().unwrap());
        assert!(a.contains("**25000 records/s**"), "{a}");
        assert!(a.contains("| **verify**"), "{a}");
        assert!(a.contains("700 bytes per record"), "{a}");
        let b = record_block(&r, r.record.as_ref().unwrap());
        assert!(b.contains("**1.200** at p50 (+0.150 ms)"), "{b}");
        assert!(b.contains("SANDLOT_AUDIT=off"), "{b}");
        assert!(b.contains("on 450 µs, off 300 µs (+150 µs)"), "{b}");
        assert!(b.contains("12 OTLP exports"), "{b}");
        assert_eq!(
            record_history_cell(&r),
            "audit 25000/s, verify 4.50 s (1000000 records); hot on/off 1.200 (0.900 / 0.750 ms)"
        );
    }

    #[test]
    fn the_document_gains_both_sections_rows_and_history() {
        let r = run(
            Some(audit_result(1_000_000, 40.0, 4.5)),
            Some(record_result(0.9, 0.75)),
        );
        let doc = update_doc(TEMPLATE, &r);
        assert!(block(&doc, "audit").unwrap().contains("records/s"));
        assert!(block(&doc, "record").unwrap().contains("SANDLOT_AUDIT=off"));
        let targets = block(&doc, "targets").unwrap();
        let keys: Vec<String> = table_rows(targets).iter().map(|r| row_key(r)).collect();
        assert_eq!(keys, ["audit-append", "audit-verify", "record-hot"]);
        let history = block(&doc, "history").unwrap();
        assert!(history.ends_with("| audit 25000/s, verify 4.50 s (1000000 records); hot on/off 1.200 (0.900 / 0.750 ms) |"), "{history}");
    }

    #[test]
    fn an_older_document_keeps_its_history_and_gains_the_sections() {
        // The history table as issue 7 left it: 13 columns, rows of 13 cells and fewer.
        let old_header = "| date | commit | command | create→first result p50 / p99 | hot `1+1` p50 / p99 | density (largest N) | create+delete/s | restart p50 / p99 | burst p50 / p99 | disk write / read vs host | state p50 | clients p50 | governance |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |";
        let rows = [
            "| 2026-11-22 05:18 UTC | `eda2144-dirty` | `sandlot-bench hot` |  | 0.617 / 1.22 ms |  |  |",
            "| 2026-11-26 15:00 UTC | `abc` | `sandlot-bench governance` |  |  |  |  |  |  |  |  |  | hot on/off 1.050 (0.800 / 0.762 ms) |",
        ];
        let old = format!(
            "# B\n\n### 15. governance\n\n<!-- sandlot-bench:governance -->\nkept\n<!-- /sandlot-bench:governance -->\n\n## History\n\n<!-- sandlot-bench:history -->\n{old_header}\n{}\n<!-- /sandlot-bench:history -->\n",
            rows.join("\n")
        );
        let r = run(
            Some(audit_result(1_000_000, 40.0, 4.5)),
            Some(record_result(0.9, 0.75)),
        );
        let d = update_doc(&update_doc(&old, &r), &r);
        assert_eq!(d.matches(AUDIT_HEADING).count(), 1, "{d}");
        assert_eq!(d.matches(RECORD_HEADING).count(), 1, "{d}");
        assert!(d.find(RECORD_HEADING).unwrap() < d.find("## History").unwrap());
        assert_eq!(block(&d, "governance"), Some("kept"));
        let history = block(&d, "history").unwrap();
        let lines: Vec<&str> = history.lines().collect();
        // The new header (14 columns, its separator too), the old rows as they were, two new.
        assert_eq!(lines[..2].join("\n"), HISTORY_HEADER);
        let columns = |l: &str| l.matches('|').count() - 1;
        assert_eq!((columns(lines[0]), columns(lines[1])), (14, 14));
        assert_eq!(&lines[2..4], &rows);
        assert_eq!(lines.len(), 6);
        assert_eq!(columns(lines[5]), 14, "{}", lines[5]);
    }
}
