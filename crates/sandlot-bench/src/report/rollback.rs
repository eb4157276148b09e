//! The block and target of benchmark 18 (issue 23): what `"on_failure": "rollback"` adds to
//! an execution that succeeds, and what a rollback costs when one fails.

use super::*;
use crate::rollback::RollbackResult;

pub(super) const ROLLBACK_HEADING: &str =
    "### 18. rollback: what `on_failure: rollback` adds (issue 23)";

const GOAL: &str =
    "rollback adds ≤ 20 ms p50 to a cell (a few variables, a 10 MB workspace; issue 23)";

pub fn rollback_block(run: &Run, r: &RollbackResult) -> String {
    let mut o = provenance(run, &r.conditions);
    o.push_str(SUMMARY_HEADER);
    summary_row(&mut o, "succeeding cell (`x += 1`), keep", &r.ok_keep);
    summary_row(
        &mut o,
        "**succeeding cell, `on_failure: rollback`** (capture, then discard)",
        &r.ok_rollback,
    );
    summary_row(&mut o, "failing cell, keep", &r.fail_keep);
    summary_row(
        &mut o,
        "failing cell, rolled back (answer once variables and files are back)",
        &r.fail_rollback,
    );
    summary_row(&mut o, "… the server's `capture_ms`", &r.capture_ms);
    summary_row(&mut o, "… the server's `restore_ms`", &r.restore_ms);
    let _ = writeln!(
        o,
        "\nRollback adds {} ms (p50) to a cell that succeeds.",
        fmt_ms(r.added_p50_ms)
    );
    o
}

pub(super) fn rollback_targets(run: &Run, t: &mut Vec<Target>) {
    if let Some(r) = &run.rollback {
        t.push(Target::at_most(
            "rollback-added",
            GOAL,
            r.added_p50_ms,
            20.0,
            "ms",
            format!(
                "+{} ms ({} → {} ms)",
                fmt_ms(r.added_p50_ms),
                fmt_ms(r.ok_keep.p50),
                fmt_ms(r.ok_rollback.p50)
            ),
        ));
    }
}
