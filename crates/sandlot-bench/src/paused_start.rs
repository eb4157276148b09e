//! Benchmark 11: a server start with N paused sandboxes on disk, on a second server with its
//! own data dir: N sandboxes are created, given a few variables and paused, the server is
//! stopped and started again on that data dir, and the start is timed until it announces its
//! address, until `GET /v1/health` answers, and until one of the paused sandboxes (picked at
//! random) answers `a + 1`. The sandboxes and checks are those of the other state benchmarks
//! (`state.rs`).

use crate::bench::{Conditions, Ctx, Watch};
use crate::http::{Conn, Endpoint};
use crate::server::{self, Server};
use crate::state::{expect, post_ok, SMALL_ANSWER, SMALL_CHECK, SMALL_SETUP};
use crate::stats::{Rng, Samples, Summary};
use anyhow::{bail, Context};
use serde::Serialize;
use serde_json::json;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Threads that create and pause the paused-start benchmark's sandboxes (the machine has 2 cores).
const MAKERS: usize = 2;

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
}
