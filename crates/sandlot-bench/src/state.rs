//! Benchmarks 8–11, interpreter state that outlives a process (issue 12): fork, pause and
//! resume, create from a snapshot, and a server start with N paused sandboxes on disk.
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
//! The server start runs on a second server with its own data dir: N sandboxes are created,
//! given a few variables and paused, the server is stopped and started again on that data dir,
//! and the start is timed until it announces its address, until `GET /v1/health` answers, and
//! until one of the paused sandboxes (picked at random) answers `a + 1`.

use crate::bench::{Conditions, Ctx, Watch};
use crate::http::{Conn, Endpoint};
use crate::server::{self, Server};
use crate::stats::{Rng, Samples, Summary};
use anyhow::{bail, Context};
use serde::Serialize;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A few small variables and a function, and a cell that reads one of them.
pub const SMALL_SETUP: &str = "a = 41\nb = 'sandlot' * 10\nc = list(range(10))\nd = {'k': 'v'}\n\
                               def f(x):\n    return x + a\n";
pub const SMALL_CHECK: &str = "a + 1";
const SMALL_ANSWER: &str = "42";

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
/// Threads that create and pause the paused-start benchmark's sandboxes (the machine has 2 cores).
const MAKERS: usize = 2;

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
fn expect(c: &mut Conn, id: &str, code: &str, answer: &str) -> anyhow::Result<Duration> {
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

fn post_ok(c: &mut Conn, path: &str, body: &Value, want: u16) -> anyhow::Result<Value> {
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

// ---------------------------------------------------------------------------------------------
// 11. server start with N paused sandboxes on disk

#[derive(Debug, Clone, Serialize)]
pub struct PausedLevel {
    /// Paused sandboxes on disk at this level.
    pub n: usize,
    /// Seconds it took to create, set up and pause the ones added for this level.
    pub made_s: f64,
    /// Process spawned → it printed its address.
    pub listening: Summary,
    /// Process spawned → the first `GET /v1/health` 200.
    pub healthy: Summary,
    /// Process spawned → the server logged that it took over what the previous run left (the
    /// paused sandboxes restored): the part of the start that grows with N. From the log's
    /// timestamps (microseconds, UTC) against the spawn's wall-clock time.
    pub took_over: Summary,
    /// Process spawned → a paused sandbox's answer to `a + 1` (empty at N = 0).
    pub first_answer: Summary,
    /// That execute alone (a resume).
    pub resume: Summary,
    /// SIGTERM → the process exited.
    pub stop: Summary,
    /// Bytes of the state files on disk (`<data dir>/state`), all sandboxes.
    pub state_bytes: u64,
    pub server_warnings: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct PausedStartResult {
    pub conditions: Conditions,
    pub starts_per_level: usize,
    pub levels: Vec<PausedLevel>,
    /// Least-squares slope of the `took_over` p50s over N (ms per 1000 paused, never below 0):
    /// what each paused sandbox adds to a start. The rest of a start (the zygote's boot, about
    /// 1.1 s) does not depend on N and varies more from start to start than that part grows.
    pub took_over_ms_per_1000: f64,
    /// The largest level's healthy p50 carried along that slope to N = 10 000.
    pub healthy_at_10k_ms: f64,
    pub stopped: Option<String>,
}

impl PausedStartResult {
    pub fn largest(&self) -> Option<&PausedLevel> {
        self.levels.iter().max_by_key(|l| l.n)
    }
}

pub fn paused_start(ctx: &mut Ctx) -> anyhow::Result<PausedStartResult> {
    let o = ctx.opts;
    let watch = Watch::start(ctx);
    let mut targets = o.paused_n.clone();
    targets.sort_unstable();
    targets.dedup();
    let top = targets.last().copied().unwrap_or(0);
    let dir = ctx.work.join("paused-start");
    let data = dir.join("data");
    let env_dir = ctx.opts.env_dir();
    // Paused sandboxes do not count against the running limit, but a server that counted them
    // must not fail the setup for that reason alone: the limit is set above N.
    let extra = vec![
        "--max-sandboxes".to_owned(),
        (top + 100).max(2000).to_string(),
    ];
    let start = |tag: &str| {
        Server::start_with(
            &o.sandlot,
            &data,
            &dir.join(format!("server-{tag}.log")),
            &env_dir,
            &extra,
        )
    };
    eprintln!(
        "[paused-start] a second server on {}; levels {targets:?} paused sandboxes, {} starts each",
        data.display(),
        o.paused_starts
    );
    // The first start makes the store and the workspaces' image; it is not timed.
    let mut first = start("first")?;
    first.stop()?;
    drop(first);

    let mut levels = Vec::new();
    let mut ids: Vec<String> = Vec::new();
    let mut stopped = None;
    let mut rng = Rng::seeded();
    for n in std::iter::once(0).chain(targets) {
        let mut made_s = 0.0;
        if n > ids.len() {
            let mut srv = start(&format!("make-{n}"))?;
            let t = Instant::now();
            let made = make_paused(
                &srv.endpoint(),
                n - ids.len(),
                Duration::from_secs(o.loop_seconds * 2),
            );
            made_s = t.elapsed().as_secs_f64();
            ids.extend(made.ids);
            eprintln!(
                "[paused-start] {} paused sandboxes on disk ({:.1} s to make the last ones)",
                ids.len(),
                made_s
            );
            srv.stop()?;
            if let Some(e) = made.error {
                stopped = Some(format!("stopped at {} paused sandboxes: {e}", ids.len()));
            }
        }
        let level = measure_starts(o.paused_starts, &ids, &mut rng, |rep| {
            start(&format!("{}-{rep}", ids.len()))
        })?;
        let level = PausedLevel {
            n: ids.len(),
            made_s,
            state_bytes: dir_bytes(&data.join("state")),
            ..level
        };
        eprintln!(
            "[paused-start] N = {}: listening p50 {:.0} ms, healthy p50 {:.0} ms, first answer of a paused one p50 {:.0} ms",
            level.n, level.listening.p50, level.healthy.p50, level.first_answer.p50
        );
        levels.push(level);
        if stopped.is_some() {
            break;
        }
    }
    let points: Vec<(f64, f64)> = levels
        .iter()
        .map(|l| (l.n as f64, l.took_over.p50))
        .collect();
    let (slope, _) = extrapolate(&points, 10_000.0);
    let at_10k = levels.iter().max_by_key(|l| l.n).map_or(0.0, |l| {
        l.healthy.p50 + slope * (10_000.0 - l.n as f64).max(0.0)
    });
    Ok(PausedStartResult {
        conditions: watch.finish(ctx),
        starts_per_level: o.paused_starts,
        levels,
        took_over_ms_per_1000: slope * 1000.0,
        healthy_at_10k_ms: at_10k,
        stopped,
    })
}

struct Made {
    ids: Vec<String>,
    error: Option<String>,
}

/// Creates `n` small sandboxes and pauses them, `MAKERS` at a time.
fn make_paused(to: &Endpoint, n: usize, limit: Duration) -> Made {
    let left = Arc::new(Mutex::new(n));
    let t = Instant::now();
    let workers: Vec<_> = (0..MAKERS)
        .map(|_| {
            let (left, to) = (left.clone(), to.clone());
            std::thread::spawn(move || {
                let mut c = Conn::new(&to);
                let mut ids = Vec::new();
                loop {
                    {
                        let mut l = left.lock().unwrap_or_else(|p| p.into_inner());
                        if *l == 0 {
                            return (ids, None);
                        }
                        *l -= 1;
                    }
                    if t.elapsed() > limit {
                        return (ids, Some(format!("making them took longer than {limit:?}")));
                    }
                    let made = (|| {
                        let id = server::create(&mut c)?;
                        server::execute(&mut c, &id, SMALL_SETUP)?;
                        let v = post_ok(
                            &mut c,
                            &format!("/v1/sandboxes/{id}/pause"),
                            &json!({}),
                            200,
                        )?;
                        if v["state"] != "paused" {
                            bail!("after the pause, {id} is {}", v["state"]);
                        }
                        Ok(id)
                    })();
                    match made {
                        Ok(id) => ids.push(id),
                        Err(e) => return (ids, Some(format!("{e:#}"))),
                    }
                }
            })
        })
        .collect();
    let mut out = Made {
        ids: Vec::new(),
        error: None,
    };
    for w in workers {
        match w.join() {
            Ok((ids, err)) => {
                out.ids.extend(ids);
                if out.error.is_none() {
                    out.error = err;
                }
            }
            Err(_) => out.error = Some("a maker thread panicked".into()),
        }
    }
    out
}

/// Starts the server `reps` times on the same data dir and times each start.
fn measure_starts(
    reps: usize,
    ids: &[String],
    rng: &mut Rng,
    mut start: impl FnMut(usize) -> anyhow::Result<Server>,
) -> anyhow::Result<PausedLevel> {
    let (mut listening, mut healthy, mut first, mut resume, mut stop) = (
        Samples::new(),
        Samples::new(),
        Samples::new(),
        Samples::new(),
        Samples::new(),
    );
    let mut took_over = Vec::new();
    let mut warnings = 0;
    for rep in 0..reps {
        let mut srv = start(rep)?;
        listening.push(srv.started_in);
        let spawned_wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .saturating_sub(srv.spawned_at.elapsed());
        let mut c = Conn::new(&srv.endpoint());
        let t_health = Instant::now();
        loop {
            match c.request("GET", "/v1/health", None) {
                Ok(r) if r.status == 200 => break,
                _ if t_health.elapsed() > Duration::from_secs(120) => {
                    bail!("the restarted server did not answer /v1/health in 120 s")
                }
                _ => std::thread::sleep(Duration::from_millis(2)),
            }
        }
        healthy.push(srv.spawned_at.elapsed());
        if !ids.is_empty() {
            let id = &ids[rng.below(ids.len())];
            let d = expect(&mut c, id, SMALL_CHECK, SMALL_ANSWER)
                .with_context(|| format!("a paused sandbox ({id}) after the restart"))?;
            first.push(srv.spawned_at.elapsed());
            resume.push(d);
            // Back to paused, so the next start finds N paused again.
            post_ok(
                &mut c,
                &format!("/v1/sandboxes/{id}/pause"),
                &json!({}),
                200,
            )?;
        }
        let log = std::fs::read_to_string(&srv.log).unwrap_or_default();
        if let Some(ms) = logged_after(&log, TOOK_OVER, spawned_wall) {
            took_over.push(ms);
        }
        warnings += srv.log_problems().len();
        // Closed first: a server stopping waits a while for open keep-alive connections.
        drop(c);
        stop.push(srv.stop()?);
    }
    Ok(PausedLevel {
        n: ids.len(),
        made_s: 0.0,
        listening: listening.summary(),
        healthy: healthy.summary(),
        took_over: Summary::of(&took_over),
        first_answer: first.summary(),
        resume: resume.summary(),
        stop: stop.summary(),
        state_bytes: 0,
        server_warnings: warnings,
    })
}

/// What the server logs once it has restored what its previous run left (paused sandboxes).
const TOOK_OVER: &str = "took over what a previous run left";

/// Milliseconds from `since` (wall clock, since the epoch) to the first log line containing
/// `needle`, by the line's leading RFC 3339 UTC timestamp (`2026-11-25T14:14:07.710466Z …`).
/// Only the time of day is read, so a start that spans midnight still comes out right.
fn logged_after(log: &str, needle: &str, since: Duration) -> Option<f64> {
    let line = log.lines().find(|l| l.contains(needle))?;
    let clock = line
        .split_whitespace()
        .next()?
        .get(11..)?
        .trim_end_matches('Z');
    let mut parts = clock.split(':');
    let h: f64 = parts.next()?.parse().ok()?;
    let m: f64 = parts.next()?.parse().ok()?;
    let s: f64 = parts.next()?.parse().ok()?;
    let logged = h * 3600.0 + m * 60.0 + s;
    let spawned = since.as_secs_f64() % 86_400.0;
    Some((logged - spawned).rem_euclid(86_400.0) * 1000.0)
}

/// Total size of the regular files directly in `dir` (0 when it does not exist).
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// The least-squares slope through `(n, ms)` (ms per sandbox; a negative one, which is noise
/// in a start that cannot get faster with more on disk, counts as 0), and the value at `to`
/// carried from the point of largest n along it (anchored on a measurement, not the fit's mean).
pub fn extrapolate(points: &[(f64, f64)], to: f64) -> (f64, f64) {
    let Some(&(xl, yl)) = points.iter().max_by(|a, b| a.0.total_cmp(&b.0)) else {
        return (0.0, 0.0);
    };
    let k = points.len() as f64;
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), &(x, y)| (a + x, b + y));
    let (mx, my) = (sx / k, sy / k);
    let sxx: f64 = points.iter().map(|&(x, _)| (x - mx) * (x - mx)).sum();
    let sxy: f64 = points.iter().map(|&(x, y)| (x - mx) * (y - my)).sum();
    let slope = if sxx > 0.0 { (sxy / sxx).max(0.0) } else { 0.0 };
    (slope, yl + slope * (to - xl).max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extrapolates_from_the_largest_point() {
        let (s, y) = extrapolate(&[(0.0, 500.0), (1000.0, 600.0)], 10_000.0);
        assert!((s - 0.1).abs() < 1e-9, "{s}");
        assert!((y - 1500.0).abs() < 1e-6, "{y}");
        // Noise that makes the start look faster with more on disk is not extrapolated.
        assert_eq!(
            extrapolate(&[(0.0, 1255.0), (50.0, 1136.0)], 10_000.0),
            (0.0, 1136.0)
        );
        assert_eq!(extrapolate(&[(0.0, 7.0)], 10_000.0), (0.0, 7.0));
        assert_eq!(extrapolate(&[], 10_000.0), (0.0, 0.0));
    }

    #[test]
    fn reads_when_a_line_was_logged() {
        let log = "2026-11-25T14:14:07.655Z  INFO a\n2026-11-25T14:14:07.710466Z  INFO x: took over what a previous run left stopped=0 restored=1000\n";
        // Spawned at 14:14:07.500 UTC on some day.
        let since =
            Duration::from_secs_f64(20_000.0 * 86_400.0 + 14.0 * 3600.0 + 14.0 * 60.0 + 7.5);
        let ms = logged_after(log, TOOK_OVER, since).unwrap();
        assert!((ms - 210.466).abs() < 0.01, "{ms}");
        // Across midnight.
        let log = "2026-11-26T00:00:00.100000Z  INFO took over what a previous run left\n";
        let since = Duration::from_secs_f64(20_001.0 * 86_400.0 - 0.2);
        assert!((logged_after(log, TOOK_OVER, since).unwrap() - 300.0).abs() < 0.01);
        assert_eq!(logged_after("no such line", TOOK_OVER, since), None);
    }

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
