//! The first four measurements (issue 3); restart, burst and disk (issue 9) have their own
//! modules. Every loop is bounded in count and in time, and all traffic goes
//! to the server under test on 127.0.0.1.

use crate::http::Conn;
use crate::machine::{self, GroupMemory};
use crate::peers::{self, ColdPeer, JupyterVenv};
use crate::server::{self, Server};
use crate::stats::{Rng, Samples, Summary};
use crate::Opts;
use anyhow::{bail, Context};
use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `print(1)` as the first cell of a fresh sandbox.
pub const FIRST_CODE: &str = "print(1)";
/// The hot-execution cell.
pub const HOT_CODE: &str = "1+1";

const GIB: f64 = (1u64 << 30) as f64;

pub struct Ctx<'a> {
    pub opts: &'a Opts,
    pub server: &'a Server,
    pub env_root: PathBuf,
    pub manifest: Value,
    pub work: PathBuf,
    /// The server's memory cgroup directory, once a sandbox has shown where it is.
    pub instance: Option<PathBuf>,
}

impl Ctx<'_> {
    pub(crate) fn conn(&self) -> Conn {
        Conn::new(&self.server.endpoint())
    }

    pub(crate) fn note_instance(&mut self, id: &str) {
        if self.instance.is_none() {
            self.instance = server::cgroup_instance(id);
        }
    }

    /// PSS of the default template's zygote (0 until the server's cgroup is known). Each
    /// zygote's group is named after its uid (`zygote-default.<uid>`).
    pub(crate) fn zygote_pss(&self) -> u64 {
        let Some(inst) = self.instance.as_ref() else {
            return 0;
        };
        std::fs::read_dir(inst)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("zygote-default.")
            })
            .map(|e| machine::group_pss(&e.path()).1)
            .sum()
    }

    /// Finds the server's cgroup directory with a throwaway sandbox, if not known yet.
    pub(crate) fn ensure_instance(&mut self) -> anyhow::Result<()> {
        if self.instance.is_none() {
            let mut c = self.conn();
            let id = server::create(&mut c)?;
            self.note_instance(&id);
            server::delete(&mut c, &id)?;
        }
        Ok(())
    }
}

/// What else was going on while a benchmark ran: the machine's load and zygote restarts.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Conditions {
    pub load_before: String,
    pub load_after: String,
    pub zygote_restarts: usize,
    pub seconds: f64,
}

pub(crate) struct Watch {
    load: String,
    restarts: usize,
    t: Instant,
}

impl Watch {
    pub(crate) fn start(ctx: &Ctx) -> Watch {
        Watch {
            load: machine::loadavg(),
            restarts: ctx.server.zygote_restarts(),
            t: Instant::now(),
        }
    }

    /// For a benchmark that does not use the server: its zygote is not watched.
    pub(crate) fn finish_in_process(self) -> Conditions {
        Conditions {
            load_before: self.load,
            load_after: machine::loadavg(),
            zygote_restarts: 0,
            seconds: self.t.elapsed().as_secs_f64(),
        }
    }

    pub(crate) fn finish(self, ctx: &Ctx) -> Conditions {
        Conditions {
            load_before: self.load,
            load_after: machine::loadavg(),
            zygote_restarts: ctx.server.zygote_restarts().saturating_sub(self.restarts),
            seconds: self.t.elapsed().as_secs_f64(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 1. create → first result

#[derive(Debug, Clone, Serialize)]
pub struct CreateResult {
    pub conditions: Conditions,
    pub iterations: usize,
    /// POST create + POST execute `print(1)`, end to end.
    pub sandlot: Summary,
    pub sandlot_create: Summary,
    pub sandlot_first_exec: Summary,
    pub cold_first: Summary,
    pub cold_exit: Summary,
    pub bwrap: Option<(Summary, Summary)>,
    pub bwrap_skipped: Option<String>,
    pub ratio_cold: f64,
    pub ratio_bwrap: Option<f64>,
}

pub fn create(ctx: &mut Ctx) -> anyhow::Result<CreateResult> {
    let o = ctx.opts;
    let watch = Watch::start(ctx);
    let limit = Duration::from_secs(o.loop_seconds);
    eprintln!(
        "[create] {} sandboxes (after {} warm-up), create + print(1), then delete (untimed)",
        o.create_iters, o.warmup
    );
    let mut c = ctx.conn();
    let (mut total, mut create, mut exec) = (Samples::new(), Samples::new(), Samples::new());
    let t_loop = Instant::now();
    for i in 0..(o.warmup + o.create_iters) {
        if i >= o.warmup && t_loop.elapsed() > limit {
            eprintln!(
                "[create] time limit reached after {} sandboxes",
                total.len()
            );
            break;
        }
        let t = Instant::now();
        let id = server::create(&mut c)?;
        let t_created = t.elapsed();
        let r = server::execute(&mut c, &id, FIRST_CODE)?;
        let t_done = t.elapsed();
        if r["stdout"] != "1\n" {
            bail!("print(1) in a fresh sandbox printed {:?}", r["stdout"]);
        }
        if i >= o.warmup {
            total.push(t_done);
            create.push(t_created);
            exec.push(t_done - t_created);
        }
        ctx.note_instance(&id);
        server::delete(&mut c, &id)?;
    }
    let sandlot = total.summary();
    eprintln!(
        "[create] sandlot p50 {:.2} ms p99 {:.2} ms",
        sandlot.p50, sandlot.p99
    );

    eprintln!(
        "[create] cold start peer: {} runs (after 2 warm-up)",
        o.cold_iters
    );
    let cold = ColdPeer::plain(&ctx.env_root, &ctx.work)?;
    let (cold_first, cold_exit) = cold.measure(2, o.cold_iters, limit)?;
    let (cold_first, cold_exit) = (cold_first.summary(), cold_exit.summary());
    eprintln!("[create] cold start p50 {:.1} ms", cold_first.p50);

    let (bwrap, bwrap_skipped) = match peers::find_bwrap() {
        Some(b) => {
            eprintln!(
                "[create] bubblewrap peer: {} runs (after 2 warm-up)",
                o.cold_iters
            );
            let peer = ColdPeer::bwrap(&b, &ctx.env_root, &ctx.work)?;
            let (f, e) = peer.measure(2, o.cold_iters, limit)?;
            eprintln!("[create] bubblewrap p50 {:.1} ms", f.summary().p50);
            (Some((f.summary(), e.summary())), None)
        }
        None => {
            eprintln!("[create] bwrap is not installed (apt-get install -y bubblewrap); skipping that peer");
            (None, Some("bwrap not installed".to_owned()))
        }
    };
    Ok(CreateResult {
        conditions: watch.finish(ctx),
        iterations: sandlot.n,
        ratio_cold: cold_first.p50 / sandlot.p50,
        ratio_bwrap: bwrap.map(|(f, _)| f.p50 / sandlot.p50),
        sandlot,
        sandlot_create: create.summary(),
        sandlot_first_exec: exec.summary(),
        cold_first,
        cold_exit,
        bwrap,
        bwrap_skipped,
    })
}

// ---------------------------------------------------------------------------------------------
// 2. hot execution

#[derive(Debug, Clone, Serialize)]
pub struct HotResult {
    pub conditions: Conditions,
    pub sandlot: Summary,
    /// Server-reported duration of the execution (`duration_ms`), to split server from HTTP.
    pub sandlot_server_ms: Summary,
    /// The same `1+1` as a JavaScript cell on the same sandbox (its node already started),
    /// through the same REST call; `None` when the host has no node.
    pub javascript: Option<Summary>,
    pub javascript_server_ms: Option<Summary>,
    /// What a chart's structured data adds to a plotting cell (issue 21); `None` when the
    /// template has no matplotlib.
    pub chart: Option<ChartCost>,
    pub jupyter: Option<Summary>,
    pub jupyter_idle: Option<Summary>,
    pub jupyter_info: Value,
    pub jupyter_skipped: Option<String>,
    pub ratio: Option<f64>,
}

/// What E2B-shaped chart data costs a cell that shows a figure: the same `display(fig)` of a
/// four-line, 1,000-point figure with the chart's data and with its MIME type excluded (the PNG
/// alone, drawn either way), alternated on one sandbox; and the extractor alone, timed inside
/// the sandbox.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ChartCost {
    pub with_chart: Summary,
    pub png_only: Summary,
    /// `charts.extras(fig)` in the sandbox's interpreter, ms.
    pub extractor: Summary,
}

impl ChartCost {
    /// What the chart's data adds, ms: p50 with it minus p50 without it, but never less than
    /// the extractor's own p50 (the two round trips differ by less than their noise, which can
    /// make the difference negative; the extractor's time is spent in every plotting cell).
    pub fn added_p50(&self) -> f64 {
        (self.with_chart.p50 - self.png_only.p50).max(self.extractor.p50)
    }
}

const CHART_MIME: &str = "application/vnd.sandlot.chart+json";
const CHART_SETUP: &str = "import matplotlib\nmatplotlib.use('agg')\n\
import matplotlib.pyplot as plt, numpy as np\nfrom IPython.display import display\n\
fig, ax = plt.subplots()\nx = np.arange(250)\n\
for k in range(4):\n    ax.plot(x, np.sin(x / 10 + k), label=f's{k}')\n\
ax.set_title('bench'); ax.set_xlabel('x'); ax.legend(); plt.close(fig); fig.canvas.draw()";
const CHART_EXTRACTOR: &str = "import json, time\nfrom sandlot_runtime.charts import extras\n\
_t = []\nfor _ in range(200):\n    _s = time.perf_counter(); extras(fig)\n    \
_t.append((time.perf_counter() - _s) * 1000)\nprint(json.dumps(_t))";

fn hot_chart(c: &mut Conn, id: &str, iters: usize) -> anyhow::Result<ChartCost> {
    server::execute(c, id, CHART_SETUP)?;
    let with = "display(fig)".to_owned();
    let without = format!("display(fig, exclude=['{CHART_MIME}'])");
    let has_chart = |v: &Value| {
        v["outputs"]
            .as_array()
            .is_some_and(|a| a.iter().any(|o| o["data"].get(CHART_MIME).is_some()))
    };
    let (mut a, mut b) = (Samples::new(), Samples::new());
    for i in 0..(iters + 5) {
        for (code, want, into) in [(&with, true, &mut a), (&without, false, &mut b)] {
            let t = Instant::now();
            let v = server::execute(c, id, code)?;
            let d = t.elapsed();
            if has_chart(&v) != want {
                bail!("`{code}` answered outputs {}", v["outputs"]);
            }
            if i >= 5 {
                into.push(d);
            }
        }
    }
    let v = server::execute(c, id, CHART_EXTRACTOR)?;
    let ms: Vec<f64> = serde_json::from_str(v["stdout"].as_str().unwrap_or_default().trim())
        .with_context(|| format!("the extractor timing printed {}", v["stdout"]))?;
    Ok(ChartCost {
        with_chart: a.summary(),
        png_only: b.summary(),
        extractor: Samples::from_ms(ms).summary(),
    })
}

/// `1+1` as JavaScript cells on sandbox `id`: the round trips and the server's durations.
fn hot_javascript(
    c: &mut Conn,
    id: &str,
    o: &Opts,
    limit: Duration,
) -> anyhow::Result<(Summary, Summary)> {
    let body = serde_json::json!({ "code": HOT_CODE, "language": "javascript" });
    let (mut s, mut srv) = (Samples::new(), Vec::new());
    let t_loop = Instant::now();
    for i in 0..(o.hot_warmup + o.hot_iters) {
        if i >= o.hot_warmup && t_loop.elapsed() > limit {
            break;
        }
        let t = Instant::now();
        let r = server::execute_raw(c, id, &body)?;
        let d = t.elapsed();
        if r["result"]["text/plain"] != "2" {
            bail!("javascript 1+1 answered {} ({})", r["result"], r["error"]);
        }
        if i >= o.hot_warmup {
            s.push(d);
            if let Some(ms) = r["duration_ms"].as_f64() {
                srv.push(ms);
            }
        }
    }
    Ok((s.summary(), Summary::of(&srv)))
}

pub fn hot(ctx: &mut Ctx) -> anyhow::Result<HotResult> {
    let o = ctx.opts;
    let watch = Watch::start(ctx);
    let limit = Duration::from_secs(o.loop_seconds);
    eprintln!(
        "[hot] {} round trips of 1+1 on one live sandbox (after {} warm-up)",
        o.hot_iters, o.hot_warmup
    );
    let mut c = ctx.conn();
    let id = server::create(&mut c)?;
    ctx.note_instance(&id);
    let mut s = Samples::new();
    let mut srv = Vec::new();
    let t_loop = Instant::now();
    for i in 0..(o.hot_warmup + o.hot_iters) {
        if i >= o.hot_warmup && t_loop.elapsed() > limit {
            eprintln!("[hot] time limit reached after {} round trips", s.len());
            break;
        }
        let t = Instant::now();
        let r = server::execute(&mut c, &id, HOT_CODE)?;
        let d = t.elapsed();
        if r["result"]["text/plain"] != "2" {
            bail!("1+1 answered {}", r["result"]);
        }
        if i >= o.hot_warmup {
            s.push(d);
            if let Some(ms) = r["duration_ms"].as_f64() {
                srv.push(ms);
            }
        }
    }
    let (javascript, javascript_server_ms) = match hot_javascript(&mut c, &id, o, limit) {
        Ok((js, js_srv)) => {
            eprintln!("[hot] javascript p50 {:.3} ms p99 {:.3} ms", js.p50, js.p99);
            (Some(js), Some(js_srv))
        }
        Err(e) => {
            eprintln!("[hot] javascript skipped: {e:#}");
            (None, None)
        }
    };
    let chart_iters = (o.hot_iters / 20).clamp(10, 100);
    let chart = match hot_chart(&mut c, &id, chart_iters) {
        Ok(ch) => {
            eprintln!(
                "[hot] plotting cell p50 {:.3} ms with chart data, {:.3} ms PNG only (+{:.3} ms); extractor p50 {:.3} ms",
                ch.with_chart.p50,
                ch.png_only.p50,
                ch.added_p50(),
                ch.extractor.p50
            );
            Some(ch)
        }
        Err(e) => {
            eprintln!("[hot] chart cost skipped: {e:#}");
            None
        }
    };
    server::delete(&mut c, &id)?;
    let sandlot = s.summary();
    eprintln!(
        "[hot] sandlot p50 {:.3} ms p99 {:.3} ms",
        sandlot.p50, sandlot.p99
    );

    let (jupyter, jupyter_idle, jupyter_info, jupyter_skipped) = if o.no_jupyter {
        (None, None, Value::Null, Some("--no-jupyter".to_owned()))
    } else {
        match jupyter_peer(ctx, limit) {
            Ok((d, i, info)) => (Some(d), Some(i), info, None),
            Err(e) => {
                eprintln!("[hot] the Jupyter peer failed: {e:#}");
                (None, None, Value::Null, Some(format!("failed: {e:#}")))
            }
        }
    };
    if let Some(j) = jupyter {
        eprintln!("[hot] jupyter p50 {:.3} ms p99 {:.3} ms", j.p50, j.p99);
    }
    Ok(HotResult {
        conditions: watch.finish(ctx),
        sandlot,
        sandlot_server_ms: Summary::of(&srv),
        javascript,
        javascript_server_ms,
        chart,
        ratio: jupyter.map(|j| j.p50 / sandlot.p50),
        jupyter,
        jupyter_idle,
        jupyter_info,
        jupyter_skipped,
    })
}

fn jupyter_peer(ctx: &Ctx, limit: Duration) -> anyhow::Result<(Summary, Summary, Value)> {
    let o = ctx.opts;
    let venv = JupyterVenv::ensure(&o.cache_dir(), &ctx.manifest)?;
    eprintln!(
        "[hot] jupyter peer: {} round trips (after {} warm-up) in {} ({})",
        o.hot_iters,
        o.hot_warmup,
        venv.dir.display(),
        venv.requirements.join(" ")
    );
    let mut v = venv.run(&ctx.work, o.hot_iters, o.hot_warmup, limit)?;
    let samples = |k: &str| -> Vec<f64> {
        v[k].as_array()
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default()
    };
    let done = Samples::from_ms(samples("done_ms"));
    let idle = Samples::from_ms(samples("idle_ms"));
    if done.is_empty() {
        bail!("the Jupyter peer measured nothing: {v}");
    }
    if v["result"] != "2" || v["wrong_results"] != 0 {
        bail!(
            "the Jupyter peer got wrong results: {} ({} wrong)",
            v["result"],
            v["wrong_results"]
        );
    }
    if let Some(o) = v.as_object_mut() {
        o.remove("done_ms");
        o.remove("idle_ms");
    }
    Ok((done.summary(), idle.summary(), v))
}

// ---------------------------------------------------------------------------------------------
// 3. density

#[derive(Debug, Clone, Serialize)]
pub struct DensityLevel {
    pub n: usize,
    /// Host used memory (MemTotal − MemAvailable) after settling, minus the baseline.
    pub host_used_delta: u64,
    pub host_used_after: u64,
    /// /proc/meminfo after settling (the baseline is in the result).
    pub meminfo: machine::MemInfo,
    pub groups: GroupMemory,
    pub zygote_pss: u64,
    pub server_rss: u64,
    /// Creation latency of the sandboxes added to reach this level.
    pub create: Summary,
    /// `1+1` on random live sandboxes.
    pub hot: Summary,
    /// `1+1` once on every sandbox.
    pub check: Summary,
    pub answered: usize,
    pub failed: usize,
    pub failures: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DensityResult {
    pub conditions: Conditions,
    /// Host used memory before the first sandbox, and what sandlot itself held then.
    pub baseline_used: u64,
    pub baseline_meminfo: machine::MemInfo,
    pub baseline_zygote_pss: u64,
    pub baseline_server_rss: u64,
    pub settle_s: f64,
    pub levels: Vec<DensityLevel>,
    pub delete: Summary,
    pub delete_total_s: f64,
    pub leftover_groups: usize,
    pub stopped: Option<String>,
}

pub fn density(ctx: &mut Ctx) -> anyhow::Result<DensityResult> {
    let o = ctx.opts;
    let watch = Watch::start(ctx);
    let mut targets = o.n.clone();
    targets.sort_unstable();
    targets.dedup();
    let cap = (o.max_host_used_gib * GIB) as u64;
    let limit = Duration::from_secs(o.loop_seconds);
    let mut c = ctx.conn();
    ctx.ensure_instance()?;
    std::thread::sleep(Duration::from_secs_f64(o.settle));
    let baseline_meminfo = machine::meminfo();
    let baseline = baseline_meminfo.used();
    let baseline_zygote_pss = ctx.zygote_pss();
    let baseline_server_rss = machine::rss_of(ctx.server.pid());
    eprintln!(
        "[density] levels {targets:?}; baseline host used {}",
        crate::stats::fmt_bytes(baseline as f64)
    );
    let mut ids: Vec<String> = Vec::new();
    let mut levels = Vec::new();
    let mut stopped = None;
    let mut rng = Rng::seeded();
    'levels: for &n in &targets {
        let mut create = Samples::new();
        let t_level = Instant::now();
        while ids.len() < n {
            if ids.len().is_multiple_of(50) {
                let used = machine::meminfo().used();
                if used > cap {
                    stopped = Some(format!(
                        "stopped at {} sandboxes: host used memory {} passed the {} GiB cap",
                        ids.len(),
                        crate::stats::fmt_bytes(used as f64),
                        o.max_host_used_gib
                    ));
                    break 'levels;
                }
                if t_level.elapsed() > limit * 4 {
                    stopped = Some(format!(
                        "stopped at {} sandboxes: creating took longer than {:?}",
                        ids.len(),
                        limit * 4
                    ));
                    break 'levels;
                }
            }
            let t = Instant::now();
            match server::create(&mut c) {
                Ok(id) => {
                    create.push(t.elapsed());
                    ctx.note_instance(&id);
                    ids.push(id);
                }
                Err(e) => {
                    stopped = Some(format!(
                        "stopped at {} sandboxes: create failed: {e:#}",
                        ids.len()
                    ));
                    break 'levels;
                }
            }
        }
        eprintln!("[density] {n} live; settling {}s", o.settle);
        std::thread::sleep(Duration::from_secs_f64(o.settle));
        let meminfo = machine::meminfo();
        let after = meminfo.used();
        let groups = match &ctx.instance {
            Some(inst) => machine::group_memory(inst, &ids, Duration::from_secs(60)),
            None => GroupMemory::default(),
        };
        let zygote_pss = ctx.zygote_pss();
        let server_rss = machine::rss_of(ctx.server.pid());

        // Every sandbox still answers (its first execution since it was created, for most).
        let mut failures = Vec::new();
        let mut check = Samples::new();
        let (mut answered, mut failed) = (0, 0);
        let t_check = Instant::now();
        for id in &ids {
            if t_check.elapsed() > limit * 2 {
                failures.push(format!("check stopped after {:?}", limit * 2));
                break;
            }
            let t = Instant::now();
            match server::execute(&mut c, id, HOT_CODE) {
                Ok(r) if r["result"]["text/plain"] == "2" => {
                    check.push(t.elapsed());
                    answered += 1;
                }
                Ok(r) => {
                    failed += 1;
                    failures.push(format!("{id}: answered {}", r["result"]));
                }
                Err(e) => {
                    failed += 1;
                    failures.push(format!("{id}: {e:#}"));
                }
            }
        }
        // Then hot executions on random live sandboxes, each already warmed by the check.
        let mut hot = Samples::new();
        let t_hot = Instant::now();
        for _ in 0..o.density_samples {
            if t_hot.elapsed() > limit {
                break;
            }
            let id = &ids[rng.below(ids.len())];
            let t = Instant::now();
            match server::execute(&mut c, id, HOT_CODE) {
                Ok(_) => hot.push(t.elapsed()),
                Err(e) => failures.push(format!("{id}: {e:#}")),
            }
        }
        failures.truncate(10);
        let level = DensityLevel {
            n: ids.len(),
            host_used_delta: after.saturating_sub(baseline),
            host_used_after: after,
            meminfo,
            groups,
            zygote_pss,
            server_rss,
            create: create.summary(),
            hot: hot.summary(),
            check: check.summary(),
            answered,
            failed,
            failures,
        };
        eprintln!(
            "[density] N={} host +{} ({} per sandbox), cgroups {} , hot p50 {:.3} ms p99 {:.3} ms, answered {}/{}",
            level.n,
            crate::stats::fmt_bytes(level.host_used_delta as f64),
            crate::stats::fmt_bytes(level.host_used_delta as f64 / level.n.max(1) as f64),
            crate::stats::fmt_bytes(level.groups.usage as f64),
            level.hot.p50,
            level.hot.p99,
            answered,
            ids.len()
        );
        levels.push(level);
    }
    if let Some(s) = &stopped {
        eprintln!("[density] {s}");
    }
    eprintln!("[density] deleting {} sandboxes", ids.len());
    let mut delete = Samples::new();
    let t_del = Instant::now();
    let mut delete_errors = 0;
    for id in &ids {
        let t = Instant::now();
        match server::delete(&mut c, id) {
            Ok(()) => delete.push(t.elapsed()),
            Err(e) => {
                delete_errors += 1;
                if delete_errors <= 3 {
                    eprintln!("[density] delete {id}: {e:#}");
                }
            }
        }
    }
    let delete_total_s = t_del.elapsed().as_secs_f64();
    let leftover = server::wait_groups_gone(ctx.instance.as_deref(), Duration::from_secs(10));
    if !leftover.is_empty() {
        eprintln!(
            "[density] {} sandbox cgroups still there 10 s after deleting",
            leftover.len()
        );
    }
    Ok(DensityResult {
        conditions: watch.finish(ctx),
        baseline_used: baseline,
        baseline_meminfo,
        baseline_zygote_pss,
        baseline_server_rss,
        settle_s: o.settle,
        levels,
        delete: delete.summary(),
        delete_total_s,
        leftover_groups: leftover.len(),
        stopped,
    })
}

// ---------------------------------------------------------------------------------------------
// 4. throughput

#[derive(Debug, Clone, Serialize)]
pub struct ThroughputResult {
    pub conditions: Conditions,
    pub seconds: f64,
    pub concurrency: usize,
    pub pairs: usize,
    pub rate: f64,
    pub errors: usize,
    pub first_errors: Vec<String>,
    pub create: Summary,
    pub delete: Summary,
    pub leftover_groups: usize,
}

pub fn throughput(ctx: &mut Ctx) -> anyhow::Result<ThroughputResult> {
    let o = ctx.opts;
    let dur = Duration::from_secs_f64(o.seconds);
    ctx.ensure_instance()?;
    let watch = Watch::start(ctx);
    eprintln!(
        "[throughput] create+delete for {}s with {} in flight",
        o.seconds, o.concurrency
    );
    let stop = Arc::new(AtomicBool::new(false));
    let to = ctx.server.endpoint();
    let started = Instant::now();
    let workers: Vec<_> = (0..o.concurrency)
        .map(|_| {
            let (stop, to) = (stop.clone(), to.clone());
            std::thread::spawn(move || {
                let mut c = Conn::new(&to);
                let (mut create, mut delete) = (Samples::new(), Samples::new());
                let mut errors = Vec::new();
                // Bounded by time, and by count as a backstop.
                for _ in 0..1_000_000 {
                    if stop.load(Ordering::Relaxed) || started.elapsed() >= dur {
                        break;
                    }
                    let t = Instant::now();
                    let id = match server::create(&mut c) {
                        Ok(id) => id,
                        Err(e) => {
                            errors.push(format!("create: {e:#}"));
                            std::thread::sleep(Duration::from_millis(10));
                            continue;
                        }
                    };
                    let t_created = t.elapsed();
                    let t2 = Instant::now();
                    match server::delete(&mut c, &id) {
                        Ok(()) => {
                            // A pair counts only if it completed inside the window.
                            if started.elapsed() <= dur {
                                create.push(t_created);
                                delete.push(t2.elapsed());
                            }
                        }
                        Err(e) => errors.push(format!("delete: {e:#}")),
                    }
                }
                (create, delete, errors)
            })
        })
        .collect();
    let mut create = Samples::new();
    let mut delete = Samples::new();
    let mut errors = Vec::new();
    for w in workers {
        let (c, d, e) = w
            .join()
            .map_err(|_| anyhow::anyhow!("a throughput worker panicked"))?;
        create.extend(&c);
        delete.extend(&d);
        errors.extend(e);
    }
    stop.store(true, Ordering::Relaxed);
    let pairs = delete.len();
    let rate = pairs as f64 / dur.as_secs_f64();
    let leftover = server::wait_groups_gone(ctx.instance.as_deref(), Duration::from_secs(10));
    eprintln!(
        "[throughput] {pairs} pairs in {}s = {rate:.1}/s, {} errors",
        o.seconds,
        errors.len()
    );
    let n_errors = errors.len();
    errors.truncate(5);
    Ok(ThroughputResult {
        conditions: watch.finish(ctx),
        seconds: dur.as_secs_f64(),
        concurrency: o.concurrency,
        pairs,
        rate,
        errors: n_errors,
        first_errors: errors,
        create: create.summary(),
        delete: delete.summary(),
        leftover_groups: leftover.len(),
    })
}

/// The bench's scratch directory for one run.
pub fn work_dir(base: Option<&Path>) -> anyhow::Result<tempfile::TempDir> {
    let b = tempfile::Builder::new()
        .prefix("sandlot-bench-")
        .tempdir_in(base.unwrap_or(&std::env::temp_dir()));
    b.context("could not create a scratch directory")
}
