//! The block and targets of benchmark 20 (issue 23): the console in headless Chromium, first
//! paint of the Sandboxes page with N sandboxes listed and a live output line's way from the
//! sandbox to the page, each beside its floor measured by the harness's own HTTP client.

use super::*;
use crate::console::{ConsoleResult, FIRST_PAINT_TARGET_MS, LIVE_LINE_TARGET_MS};

pub(super) const CONSOLE_HEADING: &str =
    "### 20. console: first paint with N sandboxes listed, a live output line (issue 23)";

const PAINT_GOAL: &str =
    "console first paint ≤ 500 ms on loopback with 1,000 sandboxes listed (p50; issue 23)";
const LIVE_GOAL: &str =
    "a live output line reaches the page ≤ 50 ms after it is written in the sandbox (p50; issue 23)";

pub fn console_block(run: &Run, r: &ConsoleResult) -> String {
    let mut o = provenance(run, &r.conditions);
    let _ = writeln!(
        o,
        "Headless Chromium {} over WebDriver, signed in through the console's form; {} sandboxes \
         created for it ({}), {} rows drawn on every load, {} per-sandbox requests while drawing, \
         {} event streams refused while drawing (the list is drawn without it).\n",
        r.browser,
        r.created,
        if r.paused {
            "paused once created: the list is the same"
        } else {
            "live and idle"
        },
        r.rows,
        r.row_requests,
        r.streams_refused
    );
    o.push_str(SUMMARY_HEADER);
    summary_row(
        &mut o,
        &format!(
            "floor: `GET /v1/sandboxes` from a plain client ({} listed, {})",
            r.rows,
            fmt_bytes(r.list_bytes as f64)
        ),
        &r.list_api,
    );
    summary_row(&mut o, "page: navigation → first-contentful-paint", &r.fcp);
    summary_row(&mut o, "page: navigation → list fetched", &r.list_fetched);
    summary_row(
        &mut o,
        "page: navigation → every row in the document",
        &r.list_built,
    );
    summary_row(
        &mut o,
        "**page: navigation → the frame drawing every row (first paint)**",
        &r.first_paint,
    );
    summary_row(
        &mut o,
        "floor: a line printed in the sandbox → read off the SSE stream by a plain client",
        &r.live_sse,
    );
    summary_row(
        &mut o,
        "**a line printed in the sandbox → in the sandbox page**",
        &r.live_page,
    );
    let _ = writeln!(
        o,
        "\nA live line is timed from the sandbox's `time.time_ns()` printed in it to the page's \
         `performance.timeOrigin + mark.startTime` when the line is in the document: one host, one \
         clock (CLOCK_REALTIME), so the difference is meaningful."
    );
    o
}

pub(super) fn console_targets(run: &Run, t: &mut Vec<Target>) {
    if let Some(r) = &run.console {
        let mut paint = Target::at_most(
            "console-paint",
            PAINT_GOAL,
            r.first_paint.p50,
            FIRST_PAINT_TARGET_MS,
            "ms",
            format!(
                "{} ms p50, {} ms p99, {} rows (`GET /v1/sandboxes` {} ms)",
                fmt_ms(r.first_paint.p50),
                fmt_ms(r.first_paint.p99),
                r.rows,
                fmt_ms(r.list_api.p50)
            ),
        );
        if r.rows < 1000 {
            // Faster with fewer rows proves nothing about a thousand.
            paint.pass = None;
            paint.by = format!("not judged: {} rows listed, not 1000", r.rows);
        }
        t.push(paint);
        t.push(Target::at_most(
            "console-live",
            LIVE_GOAL,
            r.live_page.p50,
            LIVE_LINE_TARGET_MS,
            "ms",
            format!(
                "{} ms p50, {} ms p99 (SSE floor {} ms)",
                fmt_ms(r.live_page.p50),
                fmt_ms(r.live_page.p99),
                fmt_ms(r.live_sse.p50)
            ),
        ));
    }
}
