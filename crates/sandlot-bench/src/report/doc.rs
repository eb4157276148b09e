//! BENCHMARKS.md as a whole: the template, replacing and adding blocks, upserting target rows,
//! appending history; and the report printed to the terminal.

use super::*;

/// The document as it is first written; the blocks are then filled in.
pub const TEMPLATE: &str = include_str!("../benchmarks_template.md");

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
pub(super) const HISTORY_HEADING: &str = "\n## History";

/// Replaces block `name`; when the document lacks it, adds it under `heading` before the
/// history section (or at the end), so that older documents gain the new benchmarks' sections.
pub(super) fn upsert_result_block(doc: &str, name: &str, heading: &str, content: &str) -> String {
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

pub(super) const TARGETS_HEADER: &str =
    "| key | target (issues 3, 7, 8, 9, 10 and 12) | measured | result | by how much | measured on |\n| --- | --- | --- | --- | --- | --- |";
pub(super) const HISTORY_HEADER: &str = "| date | commit | command | create→first result p50 / p99 | hot `1+1` p50 / p99 | density (largest N) | create+delete/s | restart p50 / p99 | burst p50 / p99 | disk write / read vs host | state p50: fork(1) / fork(5) 50 MB / fork(100); pause 50 MB; resume small / 50 MB; from snapshot small / 50 MB; start with N paused | clients p50: E2B / MCP / REST from Python | governance: decision p99; proxy adds p50 / p99; hot (create) on / off | record: audit append/s, verify; hot on / off |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |";

/// Data rows of a table block (every `|` line after the header and separator).
pub(super) fn table_rows(block: &str) -> Vec<String> {
    block
        .lines()
        .filter(|l| l.starts_with('|'))
        .skip(2)
        .map(str::to_owned)
        .collect()
}

pub(super) fn row_key(row: &str) -> String {
    row.trim_start_matches('|')
        .split('|')
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned()
}

pub(super) fn measured_anything(run: &Run) -> bool {
    run.create.is_some()
        || run.hot.is_some()
        || run.density.is_some()
        || run.throughput.is_some()
        || run.restart.is_some()
        || run.burst.is_some()
        || run.disk.is_some()
        || run.fork.is_some()
        || run.pause.is_some()
        || run.snapshot.is_some()
        || run.paused_start.is_some()
        || run.clients.is_some()
        || run.policy.is_some()
        || run.egress.is_some()
        || run.governance.is_some()
        || run.audit.is_some()
        || run.record.is_some()
        || run.rollback.is_some()
        || run.console.is_some()
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
    if let Some(c) = &run.clients {
        doc = upsert_result_block(&doc, "clients", CLIENTS_HEADING, &clients_block(run, c));
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
    if let Some(f) = &run.fork {
        doc = upsert_result_block(&doc, "fork", FORK_HEADING, &fork_block(run, f));
    }
    if let Some(p) = &run.pause {
        doc = upsert_result_block(&doc, "pause", PAUSE_HEADING, &pause_block(run, p));
    }
    if let Some(s) = &run.snapshot {
        doc = upsert_result_block(&doc, "snapshot", SNAPSHOT_HEADING, &snapshot_block(run, s));
    }
    if let Some(p) = &run.paused_start {
        doc = upsert_result_block(
            &doc,
            "paused-start",
            PAUSED_START_HEADING,
            &paused_start_block(run, p),
        );
    }
    if let Some(p) = &run.policy {
        doc = upsert_result_block(&doc, "policy", POLICY_HEADING, &policy_block(run, p));
    }
    if let Some(e) = &run.egress {
        doc = upsert_result_block(&doc, "egress", EGRESS_HEADING, &egress_block(run, e));
    }
    if let Some(g) = &run.governance {
        doc = upsert_result_block(
            &doc,
            "governance",
            GOVERNANCE_HEADING,
            &governance_block(run, g),
        );
    }
    if let Some(a) = &run.audit {
        doc = upsert_result_block(&doc, "audit", AUDIT_HEADING, &audit_block(run, a));
    }
    if let Some(r) = &run.record {
        doc = upsert_result_block(&doc, "record", RECORD_HEADING, &record_block(run, r));
    }
    if let Some(r) = &run.rollback {
        doc = upsert_result_block(&doc, "rollback", ROLLBACK_HEADING, &rollback_block(run, r));
    }
    if let Some(r) = &run.console {
        doc = upsert_result_block(&doc, "console", CONSOLE_HEADING, &console_block(run, r));
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
    if let Some(c) = &run.clients {
        println!(
            "== 12. E2B SDK and MCP through their official clients ==\n{}",
            strip_md(&clients_block(run, c))
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
    if let Some(f) = &run.fork {
        println!("== 8. fork ==\n{}", strip_md(&fork_block(run, f)));
    }
    if let Some(p) = &run.pause {
        println!(
            "== 9. pause and resume ==\n{}",
            strip_md(&pause_block(run, p))
        );
    }
    if let Some(s) = &run.snapshot {
        println!(
            "== 10. create from a snapshot ==\n{}",
            strip_md(&snapshot_block(run, s))
        );
    }
    if let Some(p) = &run.paused_start {
        println!(
            "== 11. server start with N paused sandboxes ==\n{}",
            strip_md(&paused_start_block(run, p))
        );
    }
    if let Some(p) = &run.policy {
        println!(
            "== 13. a policy decision ==\n{}",
            strip_md(&policy_block(run, p))
        );
    }
    if let Some(e) = &run.egress {
        println!(
            "== 14. egress through the proxy ==\n{}",
            strip_md(&egress_block(run, e))
        );
    }
    if let Some(g) = &run.governance {
        println!(
            "== 15. governance on vs off ==\n{}",
            strip_md(&governance_block(run, g))
        );
    }
    if let Some(a) = &run.audit {
        println!(
            "== 16. audit log append and verify ==\n{}",
            strip_md(&audit_block(run, a))
        );
    }
    if let Some(r) = &run.record {
        println!(
            "== 17. the record on vs off ==\n{}",
            strip_md(&record_block(run, r))
        );
    }
    if let Some(r) = &run.rollback {
        println!("== 18. rollback ==\n{}", strip_md(&rollback_block(run, r)));
    }
    if let Some(r) = &run.console {
        println!("== 20. console ==\n{}", strip_md(&console_block(run, r)));
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

pub(super) fn strip_md(s: &str) -> String {
    s.lines()
        .filter(|l| !l.starts_with("_Measured") && !l.starts_with("| ---"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("**", "")
}
