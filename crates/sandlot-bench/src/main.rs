//! `sandlot-bench`: the benchmark harness of issues 3 and 9.
//!
//! Starts its own `sandlot serve` on 127.0.0.1:0 with a temporary data dir and measures, side
//! by side in one run, (1) create → first result against a cold start and bubblewrap, (2) the
//! hot `1+1` round trip against jupyter_client + ipykernel, (3) memory and latency with N live
//! sandboxes, (4) sustained create+delete throughput, (5) restart in place after the driver
//! is killed, (6) a burst of concurrent creates after a quiet period, with a peer's published
//! figure beside it, (7) the workspace's disk throughput against the host disk's, (issue 12)
//! (8) fork, (9) pause and resume, (10) create from a snapshot, (11) a server start with N paused
//! sandboxes on disk, with peers' published figures quoted beside them, and (issue 10) (12) the
//! E2B SDK's `run_code` and MCP's `run_python` round trips through their official Python
//! clients, against sandlot's own REST execute from the same Python, and (issue 7) (13) one
//! Cedar policy decision with 100 policies loaded, (14) the latency the egress proxy adds to a
//! request to a loopback server, (15) hot `1+1` and create with governance on against a
//! `SANDLOT_AUTH=off` server in the same run, and (issue 8) (16) the audit log's append rate and
//! `verify` of a million records, in process, and (17) hot `1+1` on a server with audit, metrics
//! and OTLP traces on against one with them off, in the same run, and (issue 23) (20) the
//! console in headless Chromium: first paint of the Sandboxes page with N sandboxes listed and
//! a live output line's way from the sandbox to the page. Prints medians and p99s
//! and, with `--write`, updates BENCHMARKS.md. Every loop is bounded in count and time; all
//! traffic goes to loopback.

mod audit;
mod bench;
mod burst;
mod clients;
mod console;
mod disk;
mod egress;
mod governance;
mod http;
mod machine;
mod paused_start;
mod peers;
mod policy;
mod record;
mod report;
mod restart;
mod review;
mod rollback;
mod server;
mod state;
mod stats;
mod webdriver;

use anyhow::Context;
use clap::{Args, Parser, ValueEnum};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "sandlot-bench",
    about = "Benchmarks a sandlot server against its peers, in one run, over HTTP on loopback",
    after_help = "Examples:\n  sandlot-bench --env-dir /work/env-cache all --write BENCHMARKS.md\n  sandlot-bench create hot restart burst disk --quiet-seconds 5\n  sandlot-bench fork pause snapshot paused-start --paused-n 100,1000\n  sandlot-bench hot clients\n  sandlot-bench policy egress governance\n  sandlot-bench audit record\n  sandlot-bench console --n 1000 --console-pause"
)]
struct Cli {
    /// The benchmarks to run, on one server (in the order of the list below, whatever the
    /// order given)
    #[arg(value_enum, required = true, num_args = 1..)]
    benchmarks: Vec<Bench>,
    #[command(flatten)]
    opts: Opts,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Bench {
    /// Every benchmark below
    All,
    /// 1. create → first result of print(1), against a cold start and bubblewrap
    Create,
    /// 2. hot 1+1 round trip, against jupyter_client + ipykernel
    Hot,
    /// 12. E2B SDK run_code("1+1") and MCP run_python via their official clients, vs REST (issue 10)
    Clients,
    /// 5. restart in place: a cell kills its driver; time until the next cell's result
    Restart,
    /// 6. a burst of concurrent creates + print(1) after a quiet period
    Burst,
    /// 7. dd write + read of a file in /workspace against the host disk
    Disk,
    /// 8. fork(1), fork(5) and fork(100) until every child answered (issue 12)
    Fork,
    /// 9. pause, and an execute on the paused sandbox until its answer (issue 12)
    Pause,
    /// 10. snapshot, and create from it until the first result (issue 12)
    Snapshot,
    /// 4. sustained create+delete throughput
    Throughput,
    /// 3. memory and hot-exec latency with N live idle sandboxes
    Density,
    /// 11. a second server restarted with N paused sandboxes on disk (issue 12)
    PausedStart,
    /// 13. one Cedar policy decision with 100 policies loaded, in process (issue 7)
    Policy,
    /// 14. a GET to a loopback server direct and through the egress proxy (issue 7)
    Egress,
    /// 15. hot 1+1 (and create) with governance on vs a SANDLOT_AUTH=off server (issue 7)
    Governance,
    /// 16. audit log: append rate and `verify` of a million records, in process (issue 8)
    Audit,
    /// 17. hot 1+1 with audit, metrics and OTLP traces on vs a server with them off (issue 8)
    Record,
    /// 19. approval decision → held action resumes, in process (issue 23)
    Review,
    /// 18. a cell with and without `on_failure: rollback`, succeeding and failing (issue 23)
    Rollback,
    /// 20. the console in headless Chromium: first paint with N listed, live output line (issue 23)
    Console,
}

#[derive(Debug, Clone, Args)]
pub struct Opts {
    /// The sandlot binary to benchmark (libsandlot_jail.so next to it, or SANDLOT_JAIL_LIB)
    #[arg(long, value_name = "PATH", default_value = "target/release/sandlot")]
    sandlot: PathBuf,
    /// Where the server provisions (or finds) its Python environment
    #[arg(long, value_name = "DIR", env = "SANDLOT_ENV_DIR")]
    env_dir: Option<PathBuf>,
    /// Write or update this markdown file (normally BENCHMARKS.md)
    #[arg(long, value_name = "FILE")]
    write: Option<PathBuf>,
    /// Also write the raw results as JSON
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Where the scratch directory (server data dir, peer homes) is made [default: system temp]
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
    /// Keep the scratch directory (with the server's log) after the run
    #[arg(long)]
    keep: bool,
    /// Where the Jupyter peer's and the clients' venvs are cached [default: $XDG_CACHE_HOME/sandlot-bench or ~/.cache/sandlot-bench]
    #[arg(long, value_name = "DIR")]
    cache: Option<PathBuf>,
    /// Time bound of each measurement loop, in seconds
    #[arg(long, value_name = "S", default_value_t = 120)]
    loop_seconds: u64,

    /// create: timed sandboxes
    #[arg(long, default_value_t = 200)]
    create_iters: usize,
    /// create: untimed sandboxes first
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// create: timed runs of each cold-start peer
    #[arg(long, default_value_t = 20)]
    cold_iters: usize,

    /// hot, clients: timed round trips (sandlot, Jupyter, and each client)
    #[arg(long, default_value_t = 2000)]
    hot_iters: usize,
    /// hot, clients: untimed round trips first
    #[arg(long, default_value_t = 100)]
    hot_warmup: usize,
    /// hot: skip the Jupyter peer
    #[arg(long)]
    no_jupyter: bool,

    /// density: numbers of live sandboxes to measure at; console: the largest is how many are listed
    #[arg(long, value_delimiter = ',', default_value = "100,500,1000")]
    n: Vec<usize>,
    /// density: hot executions on random sandboxes at each level
    #[arg(long, default_value_t = 1000)]
    density_samples: usize,
    /// density: seconds to wait before reading memory
    #[arg(long, value_name = "S", default_value_t = 3.0)]
    settle: f64,
    /// density: stop creating when host used memory passes this many GiB
    #[arg(long, value_name = "GIB", default_value_t = 16.0)]
    max_host_used_gib: f64,

    /// throughput: duration in seconds
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    seconds: f64,
    /// throughput: create+delete pairs in flight
    #[arg(long, default_value_t = 4)]
    concurrency: usize,

    /// restart: timed kills of the driver
    #[arg(long, default_value_t = 30)]
    restart_iters: usize,
    /// restart: kills per sandbox (a sixth restart within 60 s marks a sandbox failed)
    #[arg(long, default_value_t = 3)]
    restarts_per_sandbox: usize,

    /// burst: seconds without any request before the burst (and again after it)
    #[arg(long, value_name = "S", default_value_t = 60.0)]
    quiet_seconds: f64,
    /// burst: clients creating at once
    #[arg(long, default_value_t = 50)]
    burst_size: usize,

    /// disk: size of the file written and read back, in MiB
    #[arg(long, value_name = "MIB", default_value_t = 1024)]
    disk_mib: u64,
    /// disk: repetitions (medians are reported)
    #[arg(long, default_value_t = 3)]
    disk_reps: usize,
    /// disk: do not drop the host's page cache before the second read
    #[arg(long)]
    no_drop_caches: bool,

    /// fork: timed forks of 1 and 5 (small sandbox) and of 5 (50 MB sandbox), each
    #[arg(long, default_value_t = 20)]
    fork_iters: usize,
    /// fork: timed forks of 100 (children deleted between them)
    #[arg(long, default_value_t = 3)]
    fork100_iters: usize,
    /// pause, snapshot, rollback: timed pause/resume rounds and creates from a snapshot, per sandbox kind; rounds of cells with and without rollback
    #[arg(long, default_value_t = 20)]
    state_iters: usize,
    /// paused-start: numbers of paused sandboxes on disk to restart the server with
    #[arg(long, value_delimiter = ',', default_value = "1000")]
    paused_n: Vec<usize>,
    /// paused-start: server starts timed at each level
    #[arg(long, default_value_t = 3)]
    paused_starts: usize,

    /// review: timed approvals (each with one waiting caller)
    #[arg(long, default_value_t = 500)]
    review_samples: usize,
    /// policy: timed decisions (all gates in turn)
    #[arg(long, default_value_t = 20_000)]
    policy_samples: usize,
    /// egress: timed GETs each way (direct and through the proxy, interleaved)
    #[arg(long, default_value_t = 2000)]
    egress_iters: usize,
    /// governance, record: timed `1+1` round trips on each server (warm-up: --hot-warmup)
    #[arg(long, default_value_t = 3000)]
    gov_iters: usize,
    /// governance, record: round trips per round; rounds alternate between the two servers
    #[arg(long, default_value_t = 100)]
    gov_round: usize,
    /// governance: timed create + print(1) on each server (0: skip; warm-up: --warmup)
    #[arg(long, default_value_t = 100)]
    gov_create_iters: usize,

    /// audit: records appended to a fresh log, then verified
    #[arg(long, default_value_t = 1_000_000)]
    audit_records: u64,
    /// console: timed loads of the Sandboxes page (after one untimed)
    #[arg(long, default_value_t = 20)]
    console_loads: usize,
    /// console: lines the live cell prints, 50 ms apart (the first 3 are not counted)
    #[arg(long, default_value_t = 120)]
    console_lines: usize,
    /// console: pause each listed sandbox once created (the list is the same; the host keeps
    /// their state on disk instead of ~10 MiB of memory each)
    #[arg(long)]
    console_pause: bool,
    /// console: the Chromium to drive (a bare name is looked up on PATH)
    #[arg(long, value_name = "PATH", default_value = "chromium")]
    chromium: PathBuf,
    /// console: the chromedriver that drives it (Debian's chromium-driver)
    #[arg(long, value_name = "PATH", default_value = "chromedriver")]
    chromedriver: PathBuf,
    /// record: what the on server records (a part alone shows what it costs; the target is
    /// judged on all)
    #[arg(long, value_enum, default_value_t = record::RecordOn::All)]
    record_on: record::RecordOn,
}

impl Opts {
    pub fn cache_dir(&self) -> PathBuf {
        if let Some(c) = &self.cache {
            return c.clone();
        }
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .unwrap_or_else(std::env::temp_dir);
        base.join("sandlot-bench")
    }

    fn env_dir(&self) -> PathBuf {
        self.env_dir
            .clone()
            .unwrap_or_else(|| self.cache_dir().join("envs"))
    }

    fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.n.iter().all(|&n| n > 0), "--n takes positive counts");
        anyhow::ensure!(
            self.concurrency > 0 && self.concurrency <= 64,
            "--concurrency must be 1..=64"
        );
        anyhow::ensure!(
            self.seconds > 0.0 && self.seconds <= 600.0,
            "--seconds must be in (0, 600]"
        );
        anyhow::ensure!(
            self.create_iters > 0 && self.hot_iters > 0,
            "iteration counts must be positive"
        );
        anyhow::ensure!(self.cold_iters > 0, "--cold-iters must be positive");
        anyhow::ensure!(
            self.settle >= 0.0 && self.settle <= 120.0,
            "--settle must be in [0, 120]"
        );
        anyhow::ensure!(
            self.restart_iters > 0 && (1..=5).contains(&self.restarts_per_sandbox),
            "--restart-iters must be positive and --restarts-per-sandbox in 1..=5"
        );
        anyhow::ensure!(
            self.quiet_seconds >= 0.0 && self.quiet_seconds <= 600.0,
            "--quiet-seconds must be in [0, 600]"
        );
        anyhow::ensure!(
            (1..=200).contains(&self.burst_size),
            "--burst-size must be 1..=200"
        );
        anyhow::ensure!(
            (1..=8192).contains(&self.disk_mib) && (1..=10).contains(&self.disk_reps),
            "--disk-mib must be 1..=8192 and --disk-reps 1..=10"
        );
        anyhow::ensure!(
            (1..=1000).contains(&self.fork_iters)
                && (1..=20).contains(&self.fork100_iters)
                && (1..=1000).contains(&self.state_iters),
            "--fork-iters and --state-iters must be 1..=1000, --fork100-iters 1..=20"
        );
        anyhow::ensure!(
            self.paused_n.iter().all(|&n| (1..=20_000).contains(&n))
                && (1..=20).contains(&self.paused_starts),
            "--paused-n takes counts in 1..=20000 and --paused-starts must be 1..=20"
        );
        anyhow::ensure!(
            (1..=10_000_000).contains(&self.policy_samples)
                && (1..=100_000).contains(&self.egress_iters),
            "--policy-samples must be 1..=10000000 and --egress-iters 1..=100000"
        );
        anyhow::ensure!(
            (1..=1_000_000).contains(&self.gov_iters)
                && self.gov_round > 0
                && self.gov_create_iters <= 10_000,
            "--gov-iters must be 1..=1000000, --gov-round positive, --gov-create-iters at most 10000"
        );
        anyhow::ensure!(
            (1..=100_000_000).contains(&self.audit_records),
            "--audit-records must be 1..=100000000"
        );
        anyhow::ensure!(
            (1..=1000).contains(&self.console_loads)
                && (LIVE_MIN_LINES..=10_000).contains(&self.console_lines),
            "--console-loads must be 1..=1000 and --console-lines {LIVE_MIN_LINES}..=10000"
        );
        Ok(())
    }
}

/// The live cell prints at least this many lines: 100 counted after the first 3.
const LIVE_MIN_LINES: usize = 103;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("sandlot-bench: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quoted: Vec<String> = args
        .iter()
        .map(|a| {
            if a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=,:".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect();
    format!("sandlot-bench {}", quoted.join(" "))
}

fn now_utc() -> String {
    let now = time::OffsetDateTime::now_utc();
    let s = now
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    format!("{} UTC", s.get(..16).unwrap_or(&s).replace('T', " "))
}

/// Runs the benchmarks; Ok(false) when one of them failed (the others still ran).
fn run(cli: Cli) -> anyhow::Result<bool> {
    let o = &cli.opts;
    o.validate()?;
    let machine = machine::Machine::detect();
    let env_dir = o.env_dir();
    let scratch = bench::work_dir(o.work_dir.as_deref())?;
    let work = scratch.path().to_path_buf();
    eprintln!(
        "sandlot-bench: {}; scratch {}",
        machine.describe(),
        work.display()
    );
    eprintln!(
        "starting {} serve (env dir {})",
        o.sandlot.display(),
        env_dir.display()
    );
    let mut server = server::Server::start(&o.sandlot, &work, &env_dir)?;
    eprintln!(
        "server at {} after {:.2} s",
        server.addr,
        server.started_in.as_secs_f64()
    );
    let env_root = server::find_env(&env_dir)?;
    let manifest = server::env_manifest(&env_root).unwrap_or_default();

    let mut ctx = bench::Ctx {
        opts: o,
        server: &server,
        env_root,
        manifest,
        work: work.clone(),
        instance: None,
    };
    let want = |b: Bench| cli.benchmarks.iter().any(|&x| x == Bench::All || x == b);
    let mut ok = true;
    let mut failed = |name: &str, e: anyhow::Error| {
        eprintln!("[{name}] FAILED: {e:#}");
        ok = false;
    };
    let mut run = report::Run {
        command: command_line(),
        date: now_utc(),
        commit: machine::git_commit(Path::new(".")),
        machine,
        server_start_s: server.started_in.as_secs_f64(),
        workspaces: server.workspaces(),
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
        audit: None,
        record: None,
        review: None,
        rollback: None,
        console: None,
    };
    if want(Bench::Create) {
        match bench::create(&mut ctx) {
            Ok(r) => run.create = Some(r),
            Err(e) => failed("create", e),
        }
    }
    if want(Bench::Hot) {
        match bench::hot(&mut ctx) {
            Ok(r) => run.hot = Some(r),
            Err(e) => failed("hot", e),
        }
    }
    // Right after hot, on a quiet server, and reusing hot's numbers as references.
    if want(Bench::Clients) {
        match clients::clients(&mut ctx, run.hot.as_ref()) {
            Ok(r) => run.clients = Some(r),
            Err(e) => failed("clients", e),
        }
    }
    if want(Bench::Restart) {
        match restart::restart(&mut ctx) {
            Ok(r) => run.restart = Some(r),
            Err(e) => failed("restart", e),
        }
    }
    // The burst waits out its own quiet period first, so what ran before it does not matter.
    if want(Bench::Burst) {
        match burst::burst(&mut ctx) {
            Ok(r) => run.burst = Some(r),
            Err(e) => failed("burst", e),
        }
    }
    if want(Bench::Disk) {
        match disk::disk(&mut ctx) {
            Ok(r) => run.disk = Some(r),
            Err(e) => failed("disk", e),
        }
    }
    if want(Bench::Fork) {
        match state::fork(&mut ctx) {
            Ok(r) => run.fork = Some(r),
            Err(e) => failed("fork", e),
        }
    }
    if want(Bench::Pause) {
        match state::pause(&mut ctx) {
            Ok(r) => run.pause = Some(r),
            Err(e) => failed("pause", e),
        }
    }
    if want(Bench::Rollback) {
        match rollback::rollback(&mut ctx) {
            Ok(r) => run.rollback = Some(r),
            Err(e) => failed("rollback", e),
        }
    }
    if want(Bench::Snapshot) {
        match state::snapshot(&mut ctx) {
            Ok(r) => run.snapshot = Some(r),
            Err(e) => failed("snapshot", e),
        }
    }
    // Throughput before density, so it does not run in the wake of a thousand deletions.
    if want(Bench::Throughput) {
        match bench::throughput(&mut ctx) {
            Ok(r) => run.throughput = Some(r),
            Err(e) => failed("throughput", e),
        }
    }
    if want(Bench::Density) {
        match bench::density(&mut ctx) {
            Ok(r) => run.density = Some(r),
            Err(e) => failed("density", e),
        }
    }
    // After density (whose sandboxes are gone by then): it makes N of its own to list.
    if want(Bench::Console) {
        match console::console(&mut ctx) {
            Ok(r) => run.console = Some(r),
            Err(e) => failed("console", e),
        }
    }
    // In process, no server: only the harness's own threads run while it measures.
    if want(Bench::Policy) {
        eprintln!(
            "[policy] {} decisions with {} policies loaded",
            o.policy_samples,
            policy::POLICIES
        );
        let watch = bench::Watch::start(&ctx);
        match policy::run(o.policy_samples) {
            Ok(r) => {
                policy::print(&r);
                run.policy = Some(report::InProcess {
                    conditions: watch.finish_in_process(),
                    result: r,
                })
            }
            Err(e) => failed("policy", e),
        }
    }
    if want(Bench::Egress) {
        eprintln!(
            "[egress] {} GETs direct and {} through the proxy, interleaved",
            o.egress_iters, o.egress_iters
        );
        let watch = bench::Watch::start(&ctx);
        match egress::run(o.egress_iters) {
            Ok(r) => {
                eprintln!(
                    "[egress] direct p50 {:.3} ms p99 {:.3} ms; proxied p50 {:.3} ms p99 {:.3} ms",
                    r.direct.p50, r.direct.p99, r.proxied.p50, r.proxied.p99
                );
                run.egress = Some(report::InProcess {
                    conditions: watch.finish_in_process(),
                    result: r,
                })
            }
            Err(e) => failed("egress", e),
        }
    }
    // Starts a second server of its own (SANDLOT_AUTH=off) for the comparison, and stops it.
    if want(Bench::Governance) {
        match governance::governance(&mut ctx) {
            Ok(r) => run.governance = Some(r),
            Err(e) => failed("governance", e),
        }
    }
    // In process, no server; the log is written under the scratch directory (the data dir's
    // disk by default) and removed afterwards.
    if want(Bench::Audit) {
        eprintln!(
            "[audit] {} records appended to a fresh log, then verified",
            o.audit_records
        );
        let watch = bench::Watch::start(&ctx);
        match audit::audit(o.audit_records, &work) {
            Ok(r) => {
                audit::print(&r);
                run.audit = Some(report::InProcess {
                    conditions: watch.finish_in_process(),
                    result: r,
                })
            }
            Err(e) => failed("audit", e),
        }
    }
    // In process, no server: the store in the scratch directory.
    if want(Bench::Review) {
        eprintln!(
            "[review] {} approvals, each with a waiting caller",
            o.review_samples
        );
        let watch = bench::Watch::start(&ctx);
        match review::run(o.review_samples.max(1), &work) {
            Ok(r) => {
                review::print(&r);
                run.review = Some(report::InProcess {
                    conditions: watch.finish_in_process(),
                    result: r,
                })
            }
            Err(e) => failed("review", e),
        }
    }
    // Starts two servers of its own (record on, record off) and an OTLP sink, and stops them.
    if want(Bench::Record) {
        match record::record(
            &ctx,
            o.gov_iters,
            o.gov_round,
            o.hot_warmup,
            std::time::Duration::from_secs(o.loop_seconds),
        ) {
            Ok(r) => run.record = Some(r),
            Err(e) => failed("record", e),
        }
    }
    // On a second server of its own, which it stops and starts again.
    if want(Bench::PausedStart) {
        match paused_start::paused_start(&mut ctx) {
            Ok(r) => run.paused_start = Some(r),
            Err(e) => failed("paused-start", e),
        }
    }
    drop(ctx);
    let problems = server.log_problems();
    let stop = server.stop()?;
    eprintln!("server stopped in {:.2} s", stop.as_secs_f64());
    if !problems.is_empty() {
        eprintln!(
            "the server logged {} warnings/errors; the first ones:",
            problems.len()
        );
        for p in problems.iter().take(8) {
            eprintln!("  {p}");
        }
    }

    report::print_report(&run);
    if let Some(path) = &o.json {
        let v = serde_json::json!({
            "command": run.command, "date": run.date, "commit": run.commit, "machine": run.machine,
            "workspaces": run.workspaces,
            "create": run.create, "hot": run.hot, "clients": run.clients, "density": run.density, "throughput": run.throughput,
            "restart": run.restart, "burst": run.burst, "disk": run.disk,
            "fork": run.fork, "pause": run.pause, "snapshot": run.snapshot,
            "paused_start": run.paused_start,
            "policy": run.policy, "egress": run.egress, "governance": run.governance,
            "audit": run.audit, "record": run.record, "review": run.review, "rollback": run.rollback,
            "console": run.console,
            "server_warnings": problems.len(),
        });
        std::fs::write(path, serde_json::to_string_pretty(&v)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &o.write {
        let old = std::fs::read_to_string(path).unwrap_or_default();
        let new = report::update_doc(&old, &run);
        std::fs::write(path, new).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("updated {}", path.display());
    }
    drop(server);
    if o.keep {
        let kept = scratch.keep();
        eprintln!(
            "kept the scratch directory {} (server log: server.log)",
            kept.display()
        );
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn options_after_the_benchmarks() {
        let cli = Cli::try_parse_from([
            "sandlot-bench",
            "density",
            "--n",
            "100,500",
            "--write",
            "B.md",
        ])
        .unwrap();
        assert_eq!(cli.benchmarks, vec![Bench::Density]);
        assert_eq!(cli.opts.n, vec![100, 500]);
        assert_eq!(cli.opts.write, Some(PathBuf::from("B.md")));
        let cli = Cli::try_parse_from(["sandlot-bench", "throughput", "--seconds", "3"]).unwrap();
        assert_eq!(cli.opts.seconds, 3.0);
        assert_eq!(cli.opts.concurrency, 4);
    }

    #[test]
    fn several_benchmarks_in_one_run() {
        let cli = Cli::try_parse_from([
            "sandlot-bench",
            "--env-dir",
            "/e",
            "create",
            "hot",
            "restart",
            "burst",
            "disk",
            "--quiet-seconds",
            "5",
        ])
        .unwrap();
        assert_eq!(
            cli.benchmarks,
            vec![
                Bench::Create,
                Bench::Hot,
                Bench::Restart,
                Bench::Burst,
                Bench::Disk
            ]
        );
        assert_eq!(cli.opts.quiet_seconds, 5.0);
        assert_eq!((cli.opts.burst_size, cli.opts.disk_mib), (50, 1024));
        assert!(Cli::try_parse_from(["sandlot-bench"]).is_err());
        let cli =
            Cli::try_parse_from(["sandlot-bench", "clients", "hot", "--hot-iters", "200"]).unwrap();
        assert_eq!(cli.benchmarks, vec![Bench::Clients, Bench::Hot]);
        assert_eq!(cli.opts.hot_iters, 200);
        assert!(Cli::try_parse_from(["sandlot-bench", "nope"]).is_err());
    }

    #[test]
    fn console_options() {
        let cli = Cli::try_parse_from(["sandlot-bench", "console"]).unwrap();
        assert_eq!(cli.benchmarks, vec![Bench::Console]);
        // The largest --n is how many are listed: 1000 by default.
        assert_eq!(cli.opts.n.iter().max(), Some(&1000));
        assert_eq!((cli.opts.console_loads, cli.opts.console_lines), (20, 120));
        assert!(!cli.opts.console_pause);
        assert_eq!(cli.opts.chromedriver, PathBuf::from("chromedriver"));
        cli.opts.validate().unwrap();
        let cli = Cli::try_parse_from([
            "sandlot-bench",
            "console",
            "--n",
            "50",
            "--console-pause",
            "--chromium",
            "/opt/c/chrome",
            "--console-lines",
            "10",
        ])
        .unwrap();
        assert!(cli.opts.console_pause);
        assert_eq!(cli.opts.chromium, PathBuf::from("/opt/c/chrome"));
        // Fewer lines than 100 counted ones is refused before anything starts.
        let e = cli.opts.validate().unwrap_err().to_string();
        assert!(e.contains("--console-lines"), "{e}");
    }
}
