//! Benchmarks 8–10, interpreter state that outlives a process (issue 12): fork, pause and
//! resume, and create from a snapshot.
//!
//! Two kinds of sandbox are measured: *small* (a few small variables and a function) and
//! *50 MB* (`df = pd.DataFrame(np.random.rand(655360, 10))`, 52 MB of float64, plus a 20 MiB
//! file in `/workspace`). Every time is wall-clock over HTTP on loopback, from the request that
//! starts the operation to the answer of a cell that reads the carried state (`a + 1` → `42`,
//! `len(df)` → `655360`), so a child or a resumed sandbox that lost its state fails the run
//! instead of looking fast. Forked children run their cells at once, one keep-alive connection
//! each (opened before the clock starts). The first child, resumed sandbox or snapshot child of
//! the 50 MB kind is also checked (untimed) to hold the 20 MiB workspace file. Children and
//! snapshot-made sandboxes are deleted between samples, untimed.
//!
//! The server start with N paused sandboxes on disk (benchmark 11) is `paused_start.rs`.

use crate::bench::{Conditions, Ctx, Watch};
use crate::http::{Conn, Endpoint};
use crate::server;
use crate::stats::{Samples, Summary};
use anyhow::{bail, Context};
use serde::Serialize;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A few small variables and a function, and a cell that reads one of them.
pub const SMALL_SETUP: &str = "a = 41\nb = 'sandlot' * 10\nc = list(range(10))\nd = {'k': 'v'}\n\
                               def f(x):\n    return x + a\n";
pub const SMALL_CHECK: &str = "a + 1";
pub(crate) const SMALL_ANSWER: &str = "42";

/// 655 360 rows × 10 float64 columns = 52 428 800 bytes of DataFrame, and 20 MiB of random
/// bytes in the workspace (`fh` is deleted so no closed file is left to report as uncapturable).
pub const BIG_SETUP: &str = "import os\nimport numpy as np\nimport pandas as pd\n\
                             df = pd.DataFrame(np.random.rand(655360, 10))\n\
                             with open('/workspace/data.bin', 'wb') as fh:\n    fh.write(os.urandom(20 << 20))\n\
                             del fh\n";
pub const BIG_CHECK: &str = "len(df)";
const BIG_ANSWER: &str = "655360";
/// Untimed: the DataFrame and the workspace file both came along.
const BIG_VERIFY: &str = "import os\n(len(df), os.path.getsize('/workspace/data.bin'))";
const BIG_VERIFIED: &str = "(655360, 20971520)";
const BIG_FILE_BYTES: u64 = 20 << 20;

/// Pause between samples, so the warm pool's refill and the previous sample's teardown do not
/// share the measured span.
const SETTLE: Duration = Duration::from_millis(300);
/// After deleting 100 children: their teardown runs in the background.
const SETTLE_AFTER_100: Duration = Duration::from_secs(3);
/// Snapshots taken of each parent (the first is kept for the creates, the rest deleted).
const SNAPSHOT_TAKES: usize = 5;
/// Longest a forked child's cell may take before the sample fails.
const CHILD_TIMEOUT: Duration = Duration::from_secs(150);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Kind {
    Small,
    Big,
}

impl Kind {
    fn setup(self) -> &'static str {
        match self {
            Kind::Small => SMALL_SETUP,
            Kind::Big => BIG_SETUP,
        }
    }

    pub fn check(self) -> &'static str {
        match self {
            Kind::Small => SMALL_CHECK,
            Kind::Big => BIG_CHECK,
        }
    }

    fn answer(self) -> &'static str {
        match self {
            Kind::Small => SMALL_ANSWER,
            Kind::Big => BIG_ANSWER,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Kind::Small => "a few small variables",
            Kind::Big => "50 MB DataFrame + 20 MiB workspace file",
        }
    }
}

/// One sandbox of this kind, set up and checked; its id.
fn parent(c: &mut Conn, kind: Kind) -> anyhow::Result<String> {
    let id = server::create(c)?;
    let set = (|| {
        server::execute(c, &id, kind.setup()).context("setting up the parent")?;
        expect(c, &id, kind.check(), kind.answer())?;
        Ok::<_, anyhow::Error>(())
    })();
    if let Err(e) = set {
        let _ = server::delete(c, &id);
        return Err(e);
    }
    Ok(id)
}

/// Runs `code` and checks its `text/plain` result; the round trip.
pub(crate) fn expect(c: &mut Conn, id: &str, code: &str, answer: &str) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let v = server::execute(c, id, code)?;
    let d = t.elapsed();
    if v["result"]["text/plain"] != answer {
        bail!(
            "`{code}` in {id} answered {} instead of {answer}: its state did not come along",
            v["result"]
        );
    }
    Ok(d)
}

/// The untimed check that the 50 MB kind's workspace file came along too.
fn verify_big(c: &mut Conn, id: &str) -> anyhow::Result<()> {
    expect(c, id, BIG_VERIFY, BIG_VERIFIED)
        .map(|_| ())
        .with_context(|| format!("the DataFrame and the {BIG_FILE_BYTES}-byte workspace file"))
}

fn delete_all(c: &mut Conn, ids: &[String]) -> Vec<String> {
    ids.iter()
        .filter_map(|id| {
            server::delete(c, id)
                .err()
                .map(|e| format!("delete {id}: {e:#}"))
        })
        .collect()
}

pub(crate) fn post_ok(c: &mut Conn, path: &str, body: &Value, want: u16) -> anyhow::Result<Value> {
    let r = c.post_json(path, body)?;
    if r.status != want {
        bail!("POST {path} answered {}: {}", r.status, r.text());
    }
    r.json()
}

/// Names (and reasons) of what the server said it could not carry over.
fn not_captured(v: &Value) -> Vec<String> {
    v["not_captured"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|n| {
                    format!(
                        "{} ({})",
                        n["name"].as_str().unwrap_or("?"),
                        n["reason"].as_str().unwrap_or("?")
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Workers that run the children's cells at once

type Job = (String, &'static str, &'static str);

/// Threads, each with its own keep-alive connection opened in advance, that run one cell each
/// when handed a sandbox id.
struct Crew {
    jobs: Vec<mpsc::Sender<Job>>,
    done: mpsc::Receiver<Result<Instant, String>>,
    handles: Vec<std::thread::JoinHandle<()>>,
}

impl Crew {
    fn new(to: &Endpoint, n: usize) -> Crew {
        let (done_tx, done) = mpsc::channel();
        let mut jobs = Vec::with_capacity(n);
        let mut handles = Vec::with_capacity(n);
        for _ in 0..n {
            let (tx, rx) = mpsc::channel::<Job>();
            let (done_tx, to) = (done_tx.clone(), to.clone());
            handles.push(std::thread::spawn(move || {
                let mut c = Conn::new(&to);
                // Connected before any clock starts: the samples time sandboxes, not handshakes.
                let _ = c.request("GET", "/v1/health", None);
                for (id, code, answer) in rx {
                    let r = server::execute(&mut c, &id, code);
                    let at = Instant::now();
                    let out = match r {
                        Ok(v) if v["result"]["text/plain"] == answer => Ok(at),
                        Ok(v) => Err(format!(
                            "{id}: `{code}` answered {} instead of {answer}",
                            v["result"]
                        )),
                        Err(e) => Err(format!("{id}: {e:#}")),
                    };
                    if done_tx.send(out).is_err() {
                        break;
                    }
                }
            }));
            jobs.push(tx);
        }
        Crew {
            jobs,
            done,
            handles,
        }
    }

    /// Runs `code` in every sandbox of `ids` at once; the moment the last one answered.
    fn run_all(
        &self,
        ids: &[String],
        code: &'static str,
        answer: &'static str,
    ) -> anyhow::Result<Instant> {
        anyhow::ensure!(ids.len() <= self.jobs.len(), "more children than workers");
        for (tx, id) in self.jobs.iter().zip(ids) {
            tx.send((id.clone(), code, answer))
                .map_err(|_| anyhow::anyhow!("a worker thread is gone"))?;
        }
        let mut last: Option<Instant> = None;
        let mut first_error = None;
        for _ in ids {
            match self.done.recv_timeout(CHILD_TIMEOUT) {
                Ok(Ok(t)) => last = Some(last.map_or(t, |l| l.max(t))),
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(_) => bail!("a child did not answer within {CHILD_TIMEOUT:?}"),
            }
        }
        if let Some(e) = first_error {
            bail!("a child failed: {e}");
        }
        last.context("no child answered")
    }
}

impl Drop for Crew {
    fn drop(&mut self) {
        self.jobs.clear();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 8. fork

#[derive(Debug, Clone, Serialize)]
pub struct ForkCase {
    pub count: usize,
    pub kind: Kind,
    /// The fork request sent → the last child's answer.
    pub total: Summary,
    /// … of which the fork request, until its 201.
    pub fork_request: Summary,
    /// … of which the children's cells, run at once, until the last answer.
    pub children: Summary,
    /// The server's own `took_ms` in the fork's answer.
    pub server_took_ms: Summary,
    /// The parent's `1+1`-like cell right after each fork (the parent keeps running).
    pub parent_after: Summary,
    pub not_captured: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ForkResult {
    pub conditions: Conditions,
    pub cases: Vec<ForkCase>,
    pub cleanup_errors: Vec<String>,
}

impl ForkResult {
    pub fn case(&self, count: usize, kind: Kind) -> Option<&ForkCase> {
        self.cases
            .iter()
            .find(|c| c.count == count && c.kind == kind)
    }
}

pub fn fork(ctx: &mut Ctx) -> anyhow::Result<ForkResult> {
    let o = ctx.opts;
    let watch = Watch::start(ctx);
    let limit = Duration::from_secs(o.loop_seconds);
    eprintln!(
        "[fork] fork(1) and fork(5) × {} of a small sandbox, fork(5) × {} of a 50 MB one, fork(100) × {}; \
         each until every child answered a cell reading the parent's state",
        o.fork_iters, o.fork_iters, o.fork100_iters
    );
    let mut c = ctx.conn();
    let crew = Crew::new(&ctx.server.endpoint(), 100);
    let mut cases = Vec::new();
    let mut cleanup = Vec::new();
    let plan: [(Kind, &[(usize, usize)]); 2] = [
        (
            Kind::Small,
            &[(1, o.fork_iters), (5, o.fork_iters), (100, o.fork100_iters)],
        ),
        (Kind::Big, &[(5, o.fork_iters)]),
    ];
    for (kind, runs) in plan {
        let id = parent(&mut c, kind)?;
        ctx.note_instance(&id);
        let out = (|| {
            for &(count, iters) in runs {
                let case = fork_case(&mut c, &crew, &id, kind, count, iters, limit, &mut cleanup)?;
                eprintln!(
                    "[fork] fork({count}), {}: p50 {:.1} ms p99 {:.1} ms (n {}; the fork request p50 {:.1} ms)",
                    kind.label(),
                    case.total.p50,
                    case.total.p99,
                    case.total.n,
                    case.fork_request.p50
                );
                cases.push(case);
            }
            Ok::<_, anyhow::Error>(())
        })();
        if let Err(e) = server::delete(&mut c, &id) {
            cleanup.push(format!("delete the parent {id}: {e:#}"));
        }
        out?;
    }
    Ok(ForkResult {
        conditions: watch.finish(ctx),
        cases,
        cleanup_errors: cleanup,
    })
}

#[allow(clippy::too_many_arguments)]
fn fork_case(
    c: &mut Conn,
    crew: &Crew,
    parent: &str,
    kind: Kind,
    count: usize,
    iters: usize,
    limit: Duration,
    cleanup: &mut Vec<String>,
) -> anyhow::Result<ForkCase> {
    // One untimed fork first, except of 100 (each of those is expensive, and fork(5) of the same
    // parent warmed the path).
    let warmup = usize::from(count < 100);
    let settle = if count >= 100 {
        SETTLE_AFTER_100
    } else {
        SETTLE
    };
    let (mut total, mut request, mut children, mut parent_after) = (
        Samples::new(),
        Samples::new(),
        Samples::new(),
        Samples::new(),
    );
    let mut took = Vec::new();
    let mut missed = Vec::new();
    let t_loop = Instant::now();
    for i in 0..(warmup + iters) {
        if i > warmup && t_loop.elapsed() > limit {
            eprintln!(
                "[fork] fork({count}): time limit reached after {} samples",
                total.len()
            );
            break;
        }
        std::thread::sleep(settle);
        let t0 = Instant::now();
        let v = post_ok(
            c,
            &format!("/v1/sandboxes/{parent}/fork"),
            &json!({"count": count}),
            201,
        )?;
        let t1 = Instant::now();
        let ids: Vec<String> = v["sandboxes"]
            .as_array()
            .context("the fork answered without `sandboxes`")?
            .iter()
            .filter_map(|s| s["id"].as_str().map(str::to_owned))
            .collect();
        let ran = (|| {
            if ids.len() != count {
                bail!("fork({count}) answered {} sandboxes", ids.len());
            }
            let last = crew.run_all(&ids, kind.check(), kind.answer())?;
            let after = expect(c, parent, kind.check(), kind.answer())
                .context("the parent after the fork")?;
            if i == 0 && kind == Kind::Big {
                verify_big(c, &ids[0]).context("a forked child")?;
            }
            Ok((last, after))
        })();
        cleanup.extend(delete_all(c, &ids));
        let (last, after) = ran?;
        if i >= warmup {
            total.push(last - t0);
            request.push(t1 - t0);
            children.push(last - t1);
            parent_after.push(after);
            if let Some(ms) = v["took_ms"].as_f64() {
                took.push(ms);
            }
        }
        if missed.is_empty() {
            missed = not_captured(&v);
        }
    }
    Ok(ForkCase {
        count,
        kind,
        total: total.summary(),
        fork_request: request.summary(),
        children: children.summary(),
        server_took_ms: Summary::of(&took),
        parent_after: parent_after.summary(),
        not_captured: missed,
    })
}

// ---------------------------------------------------------------------------------------------
// 9. pause and resume

#[derive(Debug, Clone, Serialize)]
pub struct PauseCase {
    pub kind: Kind,
    /// `POST …/pause` → its 200.
    pub pause: Summary,
    /// An execute on the paused sandbox (it resumes on its own) → its answer.
    pub resume: Summary,
    /// The resumed sandbox's next cell (is it as fast as before the pause?).
    pub after_resume: Summary,
    /// The same cell before any pause, for reference.
    pub hot_before: Summary,
    /// Size of the state file while paused (`<data dir>/state/<id>.state`), when found.
    pub state_bytes: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PauseResult {
    pub conditions: Conditions,
    pub cases: Vec<PauseCase>,
}

impl PauseResult {
    pub fn case(&self, kind: Kind) -> Option<&PauseCase> {
        self.cases.iter().find(|c| c.kind == kind)
    }
}

pub fn pause(ctx: &mut Ctx) -> anyhow::Result<PauseResult> {
    let o = ctx.opts;
    let watch = Watch::start(ctx);
    let limit = Duration::from_secs(o.loop_seconds);
    eprintln!(
        "[pause] {} × pause, then an execute on the paused sandbox until its answer, for a small and a 50 MB sandbox",
        o.state_iters
    );
    let mut c = ctx.conn();
    let state_dir = ctx.work.join("data").join("state");
    let mut cases = Vec::new();
    for kind in [Kind::Small, Kind::Big] {
        let id = parent(&mut c, kind)?;
        ctx.note_instance(&id);
        let out = pause_case(&mut c, &id, kind, o.state_iters, limit, &state_dir);
        let deleted = server::delete(&mut c, &id);
        let case = out?;
        deleted?;
        eprintln!(
            "[pause] {}: pause p50 {:.1} ms p99 {:.1} ms; resume → answer p50 {:.1} ms p99 {:.1} ms (n {})",
            kind.label(),
            case.pause.p50,
            case.pause.p99,
            case.resume.p50,
            case.resume.p99,
            case.resume.n
        );
        cases.push(case);
    }
    Ok(PauseResult {
        conditions: watch.finish(ctx),
        cases,
    })
}

fn pause_case(
    c: &mut Conn,
    id: &str,
    kind: Kind,
    iters: usize,
    limit: Duration,
    state_dir: &Path,
) -> anyhow::Result<PauseCase> {
    let mut hot = Samples::new();
    for _ in 0..5 {
        hot.push(expect(c, id, kind.check(), kind.answer())?);
    }
    let (mut pause, mut resume, mut after) = (Samples::new(), Samples::new(), Samples::new());
    let mut state_bytes = None;
    let t_loop = Instant::now();
    // The first round is a warm-up.
    for i in 0..(1 + iters) {
        if i > 1 && t_loop.elapsed() > limit {
            eprintln!("[pause] time limit reached after {} samples", pause.len());
            break;
        }
        std::thread::sleep(SETTLE);
        let t = Instant::now();
        let v = post_ok(c, &format!("/v1/sandboxes/{id}/pause"), &json!({}), 200)?;
        let d_pause = t.elapsed();
        if v["state"] != "paused" {
            bail!("after the pause, {id} is {}", v["state"]);
        }
        if let Ok(m) = std::fs::metadata(state_dir.join(format!("{id}.state"))) {
            state_bytes = Some(m.len());
        }
        std::thread::sleep(SETTLE);
        let d_resume = expect(c, id, kind.check(), kind.answer()).context("resuming")?;
        let d_after = expect(c, id, kind.check(), kind.answer())?;
        if i == 0 && kind == Kind::Big {
            verify_big(c, id).context("the resumed sandbox")?;
        }
        if i >= 1 {
            pause.push(d_pause);
            resume.push(d_resume);
            after.push(d_after);
        }
    }
    Ok(PauseCase {
        kind,
        pause: pause.summary(),
        resume: resume.summary(),
        after_resume: after.summary(),
        hot_before: hot.summary(),
        state_bytes,
    })
}

// ---------------------------------------------------------------------------------------------
// 10. snapshots

#[derive(Debug, Clone, Serialize)]
pub struct SnapshotCase {
    pub kind: Kind,
    /// `POST …/snapshots` → its 201.
    pub take: Summary,
    /// `POST /v1/sandboxes {"from_snapshot"}` + the cell reading its state, end to end.
    pub create_first: Summary,
    pub create: Summary,
    pub first_exec: Summary,
    pub state_bytes: Option<u64>,
    pub variables: Option<u64>,
    pub workspace: Option<bool>,
    pub not_captured: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SnapshotResult {
    pub conditions: Conditions,
    pub cases: Vec<SnapshotCase>,
    pub cleanup_errors: Vec<String>,
}

impl SnapshotResult {
    pub fn case(&self, kind: Kind) -> Option<&SnapshotCase> {
        self.cases.iter().find(|c| c.kind == kind)
    }
}

pub fn snapshot(ctx: &mut Ctx) -> anyhow::Result<SnapshotResult> {
    let o = ctx.opts;
    let watch = Watch::start(ctx);
    let limit = Duration::from_secs(o.loop_seconds);
    eprintln!(
        "[snapshot] {SNAPSHOT_TAKES} snapshots, then {} × create from one → first result, for a small and a 50 MB sandbox",
        o.state_iters
    );
    let mut c = ctx.conn();
    let mut cases = Vec::new();
    let mut cleanup = Vec::new();
    for kind in [Kind::Small, Kind::Big] {
        let id = parent(&mut c, kind)?;
        ctx.note_instance(&id);
        let mut snaps = Vec::new();
        let out = snapshot_case(&mut c, &id, kind, o.state_iters, limit, &mut snaps);
        for s in &snaps {
            match c.delete(&format!("/v1/snapshots/{s}")) {
                Ok(r) if r.status == 204 => {}
                Ok(r) => cleanup.push(format!("delete {s}: {} {}", r.status, r.text())),
                Err(e) => cleanup.push(format!("delete {s}: {e:#}")),
            }
        }
        if let Err(e) = server::delete(&mut c, &id) {
            cleanup.push(format!("delete the parent {id}: {e:#}"));
        }
        let case = out?;
        eprintln!(
            "[snapshot] {}: snapshot p50 {:.1} ms; create from it → answer p50 {:.1} ms p99 {:.1} ms (n {})",
            kind.label(),
            case.take.p50,
            case.create_first.p50,
            case.create_first.p99,
            case.create_first.n
        );
        cases.push(case);
    }
    Ok(SnapshotResult {
        conditions: watch.finish(ctx),
        cases,
        cleanup_errors: cleanup,
    })
}

fn snapshot_case(
    c: &mut Conn,
    parent: &str,
    kind: Kind,
    iters: usize,
    limit: Duration,
    snaps: &mut Vec<String>,
) -> anyhow::Result<SnapshotCase> {
    let mut take = Samples::new();
    let mut first: Option<Value> = None;
    for _ in 0..SNAPSHOT_TAKES {
        std::thread::sleep(SETTLE);
        let t = Instant::now();
        let v = post_ok(
            c,
            &format!("/v1/sandboxes/{parent}/snapshots"),
            &json!({}),
            201,
        )?;
        take.push(t.elapsed());
        let sid = v["id"]
            .as_str()
            .context("the snapshot answered without an id")?
            .to_owned();
        snaps.push(sid);
        first.get_or_insert(v);
    }
    let snap = first.context("no snapshot taken")?;
    let sid = snaps[0].clone();
    let (mut total, mut create, mut exec) = (Samples::new(), Samples::new(), Samples::new());
    let t_loop = Instant::now();
    for i in 0..(1 + iters) {
        if i > 1 && t_loop.elapsed() > limit {
            eprintln!(
                "[snapshot] time limit reached after {} samples",
                total.len()
            );
            break;
        }
        std::thread::sleep(SETTLE);
        let t = Instant::now();
        let child = server::create_with(c, &json!({"idle_timeout": 3600, "from_snapshot": sid}))?;
        let t_created = t.elapsed();
        let ran = (|| {
            expect(c, &child, kind.check(), kind.answer())?;
            let t_done = t.elapsed();
            if i == 0 && kind == Kind::Big {
                verify_big(c, &child).context("a sandbox made from the snapshot")?;
            }
            Ok::<_, anyhow::Error>(t_done)
        })();
        let deleted = server::delete(c, &child);
        let t_done = ran?;
        deleted?;
        if i >= 1 {
            total.push(t_done);
            create.push(t_created);
            exec.push(t_done - t_created);
        }
    }
    Ok(SnapshotCase {
        kind,
        take: take.summary(),
        create_first: total.summary(),
        create: create.summary(),
        first_exec: exec.summary(),
        state_bytes: snap["state_bytes"].as_u64(),
        variables: snap["variables"].as_u64(),
        workspace: snap["workspace"].as_bool(),
        not_captured: not_captured(&snap),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_big_frame_is_about_50_mb() {
        // 655 360 × 10 float64.
        assert_eq!(655_360u64 * 10 * 8, 52_428_800);
        assert!(BIG_SETUP.contains("655360") && BIG_VERIFIED.contains("20971520"));
        assert_eq!(BIG_FILE_BYTES, 20_971_520);
    }

    #[test]
    fn reads_what_was_not_captured() {
        let v = json!({"not_captured": [{"name": "fh", "context": "default", "reason": "TypeError: x"}]});
        assert_eq!(not_captured(&v), vec!["fh (TypeError: x)".to_owned()]);
        assert!(not_captured(&json!({})).is_empty());
    }
}
