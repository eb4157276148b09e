//! E2B's sandbox metrics (`Sandbox.get_metrics`, `GET /sandboxes/{id}/metrics`, and
//! `GET /sandboxes/metrics?sandbox_ids=a,b`): a bounded history per sandbox, sampled from
//! its cgroup (CPU time, memory) and its workspace's disk usage.
//!
//! A sampler task samples every running sandbox every [`EVERY`] (paused and stopped ones
//! have no processes to measure, so their history pauses too), and a sandbox created through
//! E2B's control plane is sampled once at once, so a fresh sandbox has a point. Each history
//! keeps its last [`MAX_SAMPLES`] points (an hour at [`EVERY`]); a sandbox's history goes
//! when the sandbox ends. Tenant scoping is the control plane's: a route naming another
//! tenant's sandbox is 404 before it gets here, and the list route drops such ids.
//!
//! `cpuUsedPct` is the CPU time used since the previous sample over the wall time between
//! them and the sandbox's CPU count (its share: 100 is every CPU it may use busy); the first
//! point has none before it and says 0. `memCache` is not measured (0).

use crate::error::Failure;
use crate::Ctx;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandlot_runtime::Runtime;
use sandlot_types::{Principal, SandboxState};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often running sandboxes are sampled (E2B collects in 5 s buckets too).
pub(crate) const EVERY: Duration = Duration::from_secs(5);
/// Most points one sandbox's history keeps.
pub(crate) const MAX_SAMPLES: usize = 720;
/// Most sandbox ids one list request may name.
const MAX_LISTED: usize = 100;

/// One point of a sandbox's history.
#[derive(Clone, Debug, PartialEq)]
struct Sample {
    /// Unix seconds.
    at: i64,
    /// Wall clock of the sample, for the CPU share of the next one.
    wall: f64,
    /// CPU time the sandbox's processes used in total, in seconds.
    cpu_total: f64,
    cpu_count: u64,
    cpu_used_pct: f64,
    mem_used: u64,
    mem_total: u64,
    disk_used: u64,
    disk_total: u64,
}

impl Sample {
    fn json(&self) -> Value {
        let ts = time::OffsetDateTime::from_unix_timestamp(self.at)
            .ok()
            .and_then(|t| {
                t.format(&time::format_description::well_known::Rfc3339)
                    .ok()
            })
            .unwrap_or_default();
        json!({
            "timestamp": ts,
            "timestampUnix": self.at,
            "cpuCount": self.cpu_count,
            "cpuUsedPct": self.cpu_used_pct,
            "memUsed": self.mem_used,
            "memTotal": self.mem_total,
            "memCache": 0,
            "diskUsed": self.disk_used,
            "diskTotal": self.disk_total,
        })
    }
}

/// Every sandbox's history.
#[derive(Default)]
pub(crate) struct Metrics {
    map: Mutex<HashMap<String, VecDeque<Sample>>>,
    started: std::sync::OnceLock<()>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Metrics {
    /// Appends `s` to `id`'s history (its CPU share from the point before), dropping the
    /// oldest point past [`MAX_SAMPLES`].
    fn push(&self, id: &str, mut s: Sample) {
        let mut map = lock(&self.map);
        let h = map.entry(id.to_owned()).or_default();
        if let Some(prev) = h.back() {
            let wall = s.wall - prev.wall;
            if wall > 0.0 && s.cpu_count > 0 {
                let used = (s.cpu_total - prev.cpu_total).max(0.0);
                s.cpu_used_pct = (used / wall / s.cpu_count as f64 * 100.0).clamp(0.0, 100.0);
            }
        }
        h.push_back(s);
        while h.len() > MAX_SAMPLES {
            h.pop_front();
        }
    }

    /// `id`'s points with `start <= at <= end`, oldest first.
    fn range(&self, id: &str, start: Option<i64>, end: Option<i64>) -> Vec<Value> {
        lock(&self.map)
            .get(id)
            .map(|h| {
                h.iter()
                    .filter(|s| start.is_none_or(|t| s.at >= t) && end.is_none_or(|t| s.at <= t))
                    .map(Sample::json)
                    .collect()
            })
            .unwrap_or_default()
    }

    fn latest(&self, id: &str) -> Option<Value> {
        lock(&self.map).get(id)?.back().map(Sample::json)
    }

    /// Drops the histories of sandboxes not in `keep`.
    fn retain(&self, keep: &HashSet<String>) {
        lock(&self.map).retain(|id, _| keep.contains(id));
    }

    #[cfg(test)]
    fn len(&self, id: &str) -> usize {
        lock(&self.map).get(id).map_or(0, VecDeque::len)
    }

    /// Forgets a sandbox that was killed.
    pub(crate) fn forget(&self, id: &str) {
        lock(&self.map).remove(id);
    }

    /// Starts the sampler, once per server (from the first request that needs it, inside the
    /// server's Tokio runtime).
    pub(crate) fn start(self: &Arc<Self>, rt: &Runtime) {
        self.started.get_or_init(|| {
            let (me, rt) = (Arc::downgrade(self), rt.clone());
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(EVERY);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let Some(me) = me.upgrade() else { return };
                    me.sample_all(&rt).await;
                }
            });
        });
    }

    /// One round: every running sandbox sampled, ended ones' histories dropped.
    async fn sample_all(&self, rt: &Runtime) {
        let Ok(all) = rt.list_sandboxes(false).await else {
            return;
        };
        let keep: HashSet<String> = all
            .iter()
            .filter(|sb| !sb.state.is_ended())
            .map(|sb| sb.id.clone())
            .collect();
        self.retain(&keep);
        for sb in all
            .into_iter()
            .filter(|sb| sb.state == SandboxState::Running)
        {
            self.sample_of(rt, sb).await;
        }
    }

    /// Samples sandbox `id` now (nothing when it is not running).
    pub(crate) async fn sample(&self, rt: &Runtime, id: &str) {
        if let Ok(sb) = rt.get_sandbox(id).await {
            if sb.state == SandboxState::Running {
                self.sample_of(rt, sb).await;
            }
        }
    }

    /// Samples running sandbox `sb` as listed (no second lookup).
    async fn sample_of(&self, rt: &Runtime, sb: sandlot_types::Sandbox) {
        let (rt2, id) = (rt.clone(), sb.id.clone());
        let taken = tokio::task::spawn_blocking(move || measure(&rt2, &sb)).await;
        if let Ok(Some(s)) = taken {
            self.push(&id, s);
        }
    }
}

/// A point of running sandbox `sb` as it is now. Blocking (cgroup files, a quota lookup).
fn measure(rt: &Runtime, sb: &sandlot_types::Sandbox) -> Option<Sample> {
    let usage = rt.sandbox_usage(&sb.id).ok()?;
    let disk_used = rt.workspace_bytes(&sb.id).unwrap_or(0);
    let now = time::OffsetDateTime::now_utc();
    Some(Sample {
        at: now.unix_timestamp(),
        wall: now.unix_timestamp_nanos() as f64 / 1e9,
        cpu_total: usage.cpu_time_ms / 1e3,
        cpu_count: sb.limits.cpu_millis.div_ceil(1000).max(1),
        cpu_used_pct: 0.0,
        mem_used: usage.memory_bytes,
        mem_total: usage.memory_limit_bytes,
        disk_used,
        disk_total: sb.limits.disk_mb.saturating_mul(1 << 20),
    })
}

/// `GET /sandboxes/{id}/metrics` query: Unix seconds.
#[derive(Deserialize)]
pub(crate) struct RangeQuery {
    #[serde(default)]
    start: Option<i64>,
    #[serde(default)]
    end: Option<i64>,
}

/// `GET /sandboxes/{id}/metrics`: the sandbox's points in `[start, end]` (both optional),
/// oldest first. The sandbox is the caller's tenant's (checked by the control plane's
/// middleware); one that ended is 404 as E2B's is.
pub(crate) async fn sandbox_metrics(
    State(ctx): State<Ctx>,
    Path(id): Path<String>,
    q: Result<Query<RangeQuery>, QueryRejection>,
) -> Result<Response, Failure> {
    let Query(q) = q.map_err(|e| Failure::bad_request(format!("invalid query: {e}")))?;
    if let (Some(s), Some(e)) = (q.start, q.end) {
        if s > e {
            return Err(Failure::bad_request("start must not be after end"));
        }
    }
    if q.start.is_some_and(|t| t < 0) || q.end.is_some_and(|t| t < 0) {
        return Err(Failure::bad_request("start and end are Unix seconds"));
    }
    let sb = ctx.rt.get_sandbox(&id).await?;
    if sb.state.is_ended() {
        return Err(Failure::runtime(
            sandlot_runtime::RuntimeError::SandboxNotFound { id },
        ));
    }
    ctx.metrics.start(&ctx.rt);
    Ok(Json(ctx.metrics.range(&id, q.start, q.end)).into_response())
}

/// `GET /sandboxes/metrics?sandbox_ids=a,b` query.
#[derive(Deserialize)]
pub(crate) struct ListQuery {
    #[serde(default)]
    sandbox_ids: Option<String>,
}

/// `GET /sandboxes/metrics`: the latest point of each named sandbox of the caller's tenant;
/// ids of other tenants' sandboxes, unknown ones and ones without a point yet are left out,
/// alike.
pub(crate) async fn list_metrics(
    State(ctx): State<Ctx>,
    Extension(who): Extension<Principal>,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, Failure> {
    let Query(q) = q.map_err(|e| Failure::bad_request(format!("invalid query: {e}")))?;
    let ids: Vec<&str> = q
        .sandbox_ids
        .as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if ids.len() > MAX_LISTED {
        return Err(Failure::bad_request(format!(
            "at most {MAX_LISTED} sandbox ids per request"
        )));
    }
    ctx.metrics.start(&ctx.rt);
    let mut out = Map::new();
    for id in ids {
        if ctx.svc().scope_sandbox(&who, id).is_err() {
            continue;
        }
        if let Some(m) = ctx.metrics.latest(id) {
            out.insert(id.to_owned(), m);
        }
    }
    Ok(Json(json!({ "sandboxes": out })).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t: i64, cpu_total: f64) -> Sample {
        Sample {
            at: t,
            wall: t as f64,
            cpu_total,
            cpu_count: 2,
            cpu_used_pct: 0.0,
            mem_used: 1,
            mem_total: 2,
            disk_used: 3,
            disk_total: 4,
        }
    }

    #[test]
    fn history_is_bounded_and_keeps_the_newest() {
        let m = Metrics::default();
        for t in 0..(MAX_SAMPLES as i64 + 50) {
            m.push("sb", at(t, 0.0));
        }
        assert_eq!(m.len("sb"), MAX_SAMPLES);
        let all = m.range("sb", None, None);
        assert_eq!(all[0]["timestampUnix"], 50);
    }

    #[test]
    fn cpu_share_is_the_time_used_between_points_over_the_cpus() {
        let m = Metrics::default();
        m.push("sb", at(0, 0.0));
        // 5 s of wall time, 5 s of CPU time on 2 CPUs: half of what it may use.
        m.push("sb", at(5, 5.0));
        let pts = m.range("sb", None, None);
        assert_eq!(pts[0]["cpuUsedPct"], 0.0);
        assert_eq!(pts[1]["cpuUsedPct"], 50.0);
    }

    #[test]
    fn range_is_inclusive_and_retain_drops_ended_sandboxes() {
        let m = Metrics::default();
        for t in [10, 15, 20] {
            m.push("a", at(t, 0.0));
        }
        m.push("b", at(10, 0.0));
        assert_eq!(m.range("a", Some(15), Some(20)).len(), 2);
        assert_eq!(m.range("a", Some(0), Some(5)).len(), 0);
        assert_eq!(m.range("a", None, Some(10)).len(), 1);
        m.retain(&HashSet::from(["a".to_owned()]));
        assert_eq!(m.len("b"), 0);
        assert_eq!(m.len("a"), 3);
        m.forget("a");
        assert!(m.latest("a").is_none());
    }
}
