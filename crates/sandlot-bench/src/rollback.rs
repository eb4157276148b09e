//! Benchmark 18, rollback (issue 23): what `"on_failure": "rollback"` adds to an execution.
//! One sandbox with a few variables and a 10 MB workspace; a cell that succeeds (`x += 1`) is
//! run alternately without and with rollback (the capture before it and its discard after it
//! are the cost), and a cell that fails after rebinding a variable and deleting a file is run
//! alternately without and with rollback (the rollback's own cost: processes replaced, files
//! and variables put back). Every rolled-back sample is checked: the variable and the file are
//! back.

use crate::bench::{Conditions, Ctx, Watch};
use crate::http::Conn;
use crate::server;
use crate::stats::{Samples, Summary};
use anyhow::{bail, Context};
use serde::Serialize;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const SETUP: &str = "\
import os
x = 0
name = 'sandlot'
table = {i: str(i) for i in range(100)}
values = list(range(1000))
os.makedirs('/workspace/data', exist_ok=True)
for i in range(10):
    open(f'/workspace/data/part{i}.bin', 'wb').write(os.urandom(1 << 20))
open('/workspace/keep.txt', 'w').write('kept')
";
const OK_CELL: &str = "x += 1";
const FAIL_CELL: &str = "\
import os
x = -1
os.remove('/workspace/keep.txt')
raise ValueError('after the damage')";
const CHECK: &str = "(x >= 0, open('/workspace/keep.txt').read())";
const CHECKED: &str = "(True, 'kept')";
/// Between samples, so background work of the previous one (a capture's removal) settles.
const SETTLE: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Serialize)]
pub struct RollbackResult {
    pub conditions: Conditions,
    /// A succeeding cell's round trip without rollback.
    pub ok_keep: Summary,
    /// The same with `on_failure: rollback` (captured, then discarded).
    pub ok_rollback: Summary,
    /// p50 of `ok_rollback` minus p50 of `ok_keep`: what rollback adds to a cell that succeeds.
    pub added_p50_ms: f64,
    /// A failing cell's round trip without rollback (its effects kept).
    pub fail_keep: Summary,
    /// The same with rollback (the answer comes once the state is back).
    pub fail_rollback: Summary,
    /// The server's `capture_ms` and `restore_ms` of the rolled-back cells.
    pub capture_ms: Summary,
    pub restore_ms: Summary,
}

pub fn rollback(ctx: &mut Ctx) -> anyhow::Result<RollbackResult> {
    let o = ctx.opts;
    let watch = Watch::start(ctx);
    let iters = o.state_iters;
    let limit = Duration::from_secs(o.loop_seconds);
    eprintln!(
        "[rollback] {iters} × a succeeding and a failing cell, each without and with rollback, on a sandbox with a few variables and a 10 MB workspace"
    );
    let mut c = ctx.conn();
    let id = server::create(&mut c)?;
    ctx.note_instance(&id);
    let out = measure(&mut c, &id, iters, limit);
    let deleted = server::delete(&mut c, &id);
    let (ok_keep, ok_rollback, fail_keep, fail_rollback, cap, res) = out?;
    deleted?;
    let r = RollbackResult {
        conditions: watch.finish(ctx),
        added_p50_ms: ok_rollback.p50 - ok_keep.p50,
        ok_keep,
        ok_rollback,
        fail_keep,
        fail_rollback,
        capture_ms: Summary::of(&cap),
        restore_ms: Summary::of(&res),
    };
    eprintln!(
        "[rollback] succeeding cell p50 {:.2} ms → {:.2} ms with rollback (+{:.2} ms); failing cell p50 {:.2} ms → {:.2} ms rolled back",
        r.ok_keep.p50, r.ok_rollback.p50, r.added_p50_ms, r.fail_keep.p50, r.fail_rollback.p50
    );
    Ok(r)
}

type Measured = (Summary, Summary, Summary, Summary, Vec<f64>, Vec<f64>);

fn measure(c: &mut Conn, id: &str, iters: usize, limit: Duration) -> anyhow::Result<Measured> {
    server::execute(c, id, SETUP).context("setting up the sandbox")?;
    let (mut ok_keep, mut ok_rb, mut fail_keep, mut fail_rb) = (
        Samples::new(),
        Samples::new(),
        Samples::new(),
        Samples::new(),
    );
    let (mut cap, mut res) = (Vec::new(), Vec::new());
    let t_loop = Instant::now();
    // The first round is a warm-up.
    for i in 0..(1 + iters) {
        if i > 1 && t_loop.elapsed() > limit {
            eprintln!(
                "[rollback] time limit reached after {} samples",
                ok_rb.len()
            );
            break;
        }
        let warm = i == 0;
        std::thread::sleep(SETTLE);
        let d = timed(c, id, OK_CELL, None, "ok")?.0;
        if !warm {
            ok_keep.push(d);
        }
        std::thread::sleep(SETTLE);
        let (d, v) = timed(c, id, OK_CELL, Some("rollback"), "ok")?;
        if v["rolled_back"] != false {
            bail!("a succeeding cell was rolled back: {v}");
        }
        if !warm {
            ok_rb.push(d);
        }
        std::thread::sleep(SETTLE);
        let (d, v) = timed(c, id, FAIL_CELL, Some("rollback"), "error")?;
        if v["rolled_back"] != true {
            bail!("a failing cell was not rolled back: {v}");
        }
        check(c, id)?;
        if !warm {
            fail_rb.push(d);
            cap.extend(v["rollback"]["capture_ms"].as_f64());
            res.extend(v["rollback"]["restore_ms"].as_f64());
        }
        std::thread::sleep(SETTLE);
        let d = timed(c, id, FAIL_CELL, None, "error")?.0;
        if !warm {
            fail_keep.push(d);
        }
        // Put back by hand what the kept failure changed.
        server::execute(
            c,
            id,
            "x = 0\nopen('/workspace/keep.txt', 'w').write('kept')",
        )?;
    }
    Ok((
        ok_keep.summary(),
        ok_rb.summary(),
        fail_keep.summary(),
        fail_rb.summary(),
        cap,
        res,
    ))
}

fn timed(
    c: &mut Conn,
    id: &str,
    code: &str,
    on_failure: Option<&str>,
    want: &str,
) -> anyhow::Result<(Duration, Value)> {
    let mut body = json!({"code": code, "language": "python"});
    if let Some(f) = on_failure {
        body["on_failure"] = json!(f);
    }
    let t = Instant::now();
    let v = server::execute_raw(c, id, &body)?;
    let d = t.elapsed();
    if v["end_state"] != want {
        bail!("`{code}` ended {} instead of {want}: {v}", v["end_state"]);
    }
    Ok((d, v))
}

fn check(c: &mut Conn, id: &str) -> anyhow::Result<()> {
    let v = server::execute(c, id, CHECK)?;
    if v["result"]["text/plain"] != CHECKED {
        bail!("after the rollback the sandbox answered {}", v["result"]);
    }
    Ok(())
}
