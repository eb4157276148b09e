//! The server's KPIs over the last hour and the last day, kept in process so the console (and
//! `GET /v1/kpis`) can show them without a Prometheus.
//!
//! [`Kpis`] is fed by the same calls that count the metrics ([`crate::Metrics`]): a creation or
//! execution request ending, an HTTP answer, an execution's lifecycle event, a policy
//! decision, a guardrail finding, a containment, a restart in place; queue depths are sampled
//! by the record every [`FINE_SECS`] seconds. What it keeps is bounded and allocated once: two
//! rings of fixed-size buckets — [`FINE_LEN`] buckets of [`FINE_SECS`] s (the last hour) and
//! [`COARSE_LEN`] of [`COARSE_SECS`] s (the last day) — each bucket holding counters and two
//! fixed log-scale latency histograms ([`LogHist`]), which merge by adding, so a window's
//! quantiles are read from the merged buckets. A bucket is reused (cleared) when the ring comes
//! round to it again; nothing grows with the number of events.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// Width of a bucket of the hour ring, seconds.
pub const FINE_SECS: u64 = 10;
/// Buckets of the hour ring.
pub const FINE_LEN: usize = 360;
/// Width of a bucket of the day ring, seconds.
pub const COARSE_SECS: u64 = 60;
/// Buckets of the day ring.
pub const COARSE_LEN: usize = 1440;

/// Bins of a [`LogHist`] between its underflow and overflow bins.
const HIST_BINS: usize = 72;
/// The lower edge of the first bin, seconds (100 µs).
const HIST_MIN: f64 = 1e-4;
/// Bins per doubling: each bin is 2^(1/3) ≈ 1.26 times as wide as the one before, so a
/// quantile read at a bin's geometric middle is within ±13 % of the true value; 72 bins reach
/// 100 µs × 2^24 ≈ 28 min.
const BINS_PER_DOUBLING: f64 = 3.0;

/// A latency histogram of fixed log-scale bins (seconds): constant size, merged by adding.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogHist {
    /// Bin 0: below [`HIST_MIN`]; bin `HIST_BINS + 1`: past the last edge.
    bins: [u32; HIST_BINS + 2],
}

impl Default for LogHist {
    fn default() -> Self {
        Self {
            bins: [0; HIST_BINS + 2],
        }
    }
}

impl LogHist {
    fn bin_of(secs: f64) -> usize {
        if secs.is_nan() || secs < HIST_MIN {
            return 0;
        }
        let i = ((secs / HIST_MIN).log2() * BINS_PER_DOUBLING).floor();
        if i >= HIST_BINS as f64 {
            HIST_BINS + 1
        } else {
            i as usize + 1
        }
    }

    /// The value a bin stands for: its geometric middle (the edges for the outer bins).
    fn value_of(bin: usize) -> f64 {
        match bin {
            0 => HIST_MIN,
            b if b > HIST_BINS => HIST_MIN * 2f64.powf(HIST_BINS as f64 / BINS_PER_DOUBLING),
            b => HIST_MIN * 2f64.powf((b as f64 - 0.5) / BINS_PER_DOUBLING),
        }
    }

    pub fn add(&mut self, secs: f64) {
        let b = &mut self.bins[Self::bin_of(secs)];
        *b = b.saturating_add(1);
    }

    pub fn merge(&mut self, other: &LogHist) {
        for (a, b) in self.bins.iter_mut().zip(other.bins.iter()) {
            *a = a.saturating_add(*b);
        }
    }

    pub fn count(&self) -> u64 {
        self.bins.iter().map(|n| u64::from(*n)).sum()
    }

    /// The `q` quantile (0..=1), seconds; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        // The rank of the quantile, 1-based: the smallest value with at least q of the
        // samples at or below it.
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, n) in self.bins.iter().enumerate() {
            seen += u64::from(*n);
            if seen >= rank {
                return Some(Self::value_of(i));
            }
        }
        Some(Self::value_of(HIST_BINS + 1))
    }
}

/// One bucket of a ring: what happened in its seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Bucket {
    /// Which bucket of time this is (`t / width`); `u64::MAX` when unused.
    index: u64,
    create: LogHist,
    create_errors: u32,
    execute: LogHist,
    execute_errors: u32,
    executions: u32,
    executions_failed: u32,
    http: u32,
    http_5xx: u32,
    decisions: u32,
    denied: u32,
    findings: u32,
    containments: u32,
    containment_sum: f64,
    containment_max: f64,
    recoveries: u32,
    recovery_sum: f64,
    recovery_max: f64,
    /// The largest queue depths sampled in the bucket (none sampled: `queues_sampled` false).
    queues_sampled: bool,
    reviews_pending: u32,
    jobs_queued: u32,
    creates_waiting: u32,
}

impl Bucket {
    fn empty(index: u64) -> Self {
        Self {
            index,
            ..Self::default()
        }
    }

    fn merge(&mut self, o: &Bucket) {
        self.create.merge(&o.create);
        self.create_errors += o.create_errors;
        self.execute.merge(&o.execute);
        self.execute_errors += o.execute_errors;
        self.executions += o.executions;
        self.executions_failed += o.executions_failed;
        self.http += o.http;
        self.http_5xx += o.http_5xx;
        self.decisions += o.decisions;
        self.denied += o.denied;
        self.findings += o.findings;
        self.containments += o.containments;
        self.containment_sum += o.containment_sum;
        self.containment_max = self.containment_max.max(o.containment_max);
        self.recoveries += o.recoveries;
        self.recovery_sum += o.recovery_sum;
        self.recovery_max = self.recovery_max.max(o.recovery_max);
        if o.queues_sampled {
            self.queues_sampled = true;
            self.reviews_pending = self.reviews_pending.max(o.reviews_pending);
            self.jobs_queued = self.jobs_queued.max(o.jobs_queued);
            self.creates_waiting = self.creates_waiting.max(o.creates_waiting);
        }
    }

    fn apply(&mut self, s: &Sample) {
        let inc = |n: &mut u32| *n = n.saturating_add(1);
        match *s {
            Sample::Create { secs, ok } => {
                self.create.add(secs);
                if !ok {
                    inc(&mut self.create_errors);
                }
            }
            Sample::Execute { secs, ok } => {
                self.execute.add(secs);
                if !ok {
                    inc(&mut self.execute_errors);
                }
            }
            Sample::Execution { failed } => {
                inc(&mut self.executions);
                if failed {
                    inc(&mut self.executions_failed);
                }
            }
            Sample::Http { server_error } => {
                inc(&mut self.http);
                if server_error {
                    inc(&mut self.http_5xx);
                }
            }
            Sample::Decision { denied } => {
                inc(&mut self.decisions);
                if denied {
                    inc(&mut self.denied);
                }
            }
            Sample::Finding => inc(&mut self.findings),
            Sample::Containment { secs } => {
                inc(&mut self.containments);
                self.containment_sum += secs;
                self.containment_max = self.containment_max.max(secs);
            }
            Sample::Recovery { secs } => {
                inc(&mut self.recoveries);
                self.recovery_sum += secs;
                self.recovery_max = self.recovery_max.max(secs);
            }
            Sample::Queues {
                reviews_pending,
                jobs_queued,
                creates_waiting,
            } => {
                self.queues_sampled = true;
                self.reviews_pending = self.reviews_pending.max(sat(reviews_pending));
                self.jobs_queued = self.jobs_queued.max(sat(jobs_queued));
                self.creates_waiting = self.creates_waiting.max(sat(creates_waiting));
            }
        }
    }
}

fn sat(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// One thing that happened, as the KPIs count it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sample {
    /// A creation request ended (to the end of its response), ok or not.
    Create { secs: f64, ok: bool },
    /// An execute request ended (to the end of its response), ok or not.
    Execute { secs: f64, ok: bool },
    /// An execution ended in the runtime; `failed` unless its end state is `ok`.
    Execution { failed: bool },
    /// An HTTP request was answered; `server_error` for a 5xx.
    Http { server_error: bool },
    /// A policy decision at a gate (held-for-review bookkeeping excluded).
    Decision { denied: bool },
    /// A guardrail finding (any outcome).
    Finding,
    /// A sandbox was contained `secs` after the finding that contains it was detected.
    Containment { secs: f64 },
    /// A sandbox answered again `secs` after its fault was detected (restart in place).
    Recovery { secs: f64 },
    /// Queue depths now.
    Queues {
        reviews_pending: u64,
        jobs_queued: u64,
        creates_waiting: u64,
    },
}

/// A fixed ring of buckets `width` seconds wide.
struct Ring {
    width: u64,
    buckets: Box<[Bucket]>,
}

impl Ring {
    fn new(width: u64, len: usize) -> Self {
        Self {
            width,
            buckets: vec![Bucket::empty(u64::MAX); len].into_boxed_slice(),
        }
    }

    fn record(&mut self, t: u64, s: &Sample) {
        let index = t / self.width;
        let len = self.buckets.len() as u64;
        let b = &mut self.buckets[(index % len) as usize];
        if b.index != index {
            if b.index != u64::MAX && b.index > index {
                // A sample older than the ring's oldest (a clock step back): dropped.
                return;
            }
            *b = Bucket::empty(index);
        }
        b.apply(s);
    }

    /// The ring's buckets from oldest to the one holding `now`, an empty one where nothing
    /// was recorded.
    fn window(&self, now: u64) -> Vec<Bucket> {
        let last = now / self.width;
        let len = self.buckets.len() as u64;
        let first = last.saturating_sub(len - 1);
        (first..=last)
            .map(|i| {
                let b = &self.buckets[(i % len) as usize];
                if b.index == i {
                    *b
                } else {
                    Bucket::empty(i)
                }
            })
            .collect()
    }
}

/// Which history a report covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// The last hour, in [`FINE_SECS`] s buckets.
    Hour,
    /// The last day, in [`COARSE_SECS`] s buckets.
    Day,
}

impl Window {
    pub fn parse(s: &str) -> Option<Window> {
        match s {
            "1h" => Some(Window::Hour),
            "1d" => Some(Window::Day),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Window::Hour => "1h",
            Window::Day => "1d",
        }
    }
}

/// The KPI history of this process.
pub struct Kpis {
    rings: Mutex<(Ring, Ring)>,
}

impl Default for Kpis {
    fn default() -> Self {
        Self::new()
    }
}

/// Seconds since the epoch, now.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn ms(secs: f64) -> f64 {
    (secs * 1e6).round() / 1e3
}

fn ratio(n: u32, of: u32) -> Option<f64> {
    (of > 0).then(|| f64::from(n) / f64::from(of))
}

fn mean_ms(sum: f64, n: u32) -> Option<f64> {
    (n > 0).then(|| ms(sum / f64::from(n)))
}

impl Kpis {
    pub fn new() -> Self {
        Self {
            rings: Mutex::new((
                Ring::new(FINE_SECS, FINE_LEN),
                Ring::new(COARSE_SECS, COARSE_LEN),
            )),
        }
    }

    /// Counts `s` now.
    pub fn record(&self, s: Sample) {
        self.record_at(unix_now(), s);
    }

    /// Counts `s` at `t` (seconds since the epoch).
    pub fn record_at(&self, t: u64, s: Sample) {
        let mut rings = crate::lock(&self.rings);
        rings.0.record(t, &s);
        rings.1.record(t, &s);
    }

    /// Bytes the history holds: the same from the first event to the millionth.
    pub fn footprint(&self) -> usize {
        let rings = crate::lock(&self.rings);
        (rings.0.buckets.len() + rings.1.buckets.len()) * std::mem::size_of::<Bucket>()
    }

    /// The hour's policy-violation ratio (denied / decisions), for the `/metrics` gauge.
    pub fn violation_ratio(&self, now: u64) -> f64 {
        let total = self.merged(Window::Hour, now);
        ratio(total.denied, total.decisions).unwrap_or(0.0)
    }

    fn buckets(&self, window: Window, now: u64) -> (u64, Vec<Bucket>) {
        let rings = crate::lock(&self.rings);
        match window {
            Window::Hour => (rings.0.width, rings.0.window(now)),
            Window::Day => (rings.1.width, rings.1.window(now)),
        }
    }

    fn merged(&self, window: Window, now: u64) -> Bucket {
        let (_, buckets) = self.buckets(window, now);
        let mut total = Bucket::empty(0);
        for b in &buckets {
            total.merge(b);
        }
        total
    }

    /// The window's summary and series (one value per bucket, oldest first) as JSON: the body
    /// of `GET /v1/kpis` (the record adds the queue depths of now).
    pub fn report(&self, window: Window, now: u64) -> serde_json::Value {
        let (width, buckets) = self.buckets(window, now);
        let mut total = Bucket::empty(0);
        for b in &buckets {
            total.merge(b);
        }
        let q = |h: &LogHist, q: f64| h.quantile(q).map(ms);
        let col = |f: &dyn Fn(&Bucket) -> serde_json::Value| -> Vec<serde_json::Value> {
            buckets.iter().map(f).collect()
        };
        let opt = |v: Option<f64>| v.map_or(serde_json::Value::Null, serde_json::Value::from);
        let queue = |b: &Bucket, v: u32| {
            if b.queues_sampled {
                serde_json::Value::from(v)
            } else {
                serde_json::Value::Null
            }
        };
        let start = buckets.first().map_or(0, |b| b.index * width);
        serde_json::json!({
            "window": window.as_str(),
            "start": start,
            "step_seconds": width,
            "buckets": buckets.len(),
            "summary": {
                "create_latency_ms": {
                    "count": total.create.count(),
                    "errors": total.create_errors,
                    "p50": q(&total.create, 0.5),
                    "p99": q(&total.create, 0.99),
                },
                "execute_latency_ms": {
                    "count": total.execute.count(),
                    "errors": total.execute_errors,
                    "p50": q(&total.execute, 0.5),
                    "p99": q(&total.execute, 0.99),
                },
                "error_rate": {
                    "executions": total.executions,
                    "failed": total.executions_failed,
                    "ratio": ratio(total.executions_failed, total.executions),
                    "http_requests": total.http,
                    "http_5xx": total.http_5xx,
                    "http_5xx_ratio": ratio(total.http_5xx, total.http),
                },
                "policy_violation_rate": {
                    "decisions": total.decisions,
                    "denied": total.denied,
                    "ratio": ratio(total.denied, total.decisions),
                    "findings": total.findings,
                },
                "containment": {
                    "count": total.containments,
                    "mean_ms": mean_ms(total.containment_sum, total.containments),
                    "max_ms": (total.containments > 0).then(|| ms(total.containment_max)),
                },
                "recovery": {
                    "count": total.recoveries,
                    "mean_ms": mean_ms(total.recovery_sum, total.recoveries),
                    "max_ms": (total.recoveries > 0).then(|| ms(total.recovery_max)),
                },
                "queues_max": {
                    "reviews_pending": total.reviews_pending,
                    "jobs_queued": total.jobs_queued,
                    "creates_waiting": total.creates_waiting,
                },
            },
            "series": {
                "create_p50_ms": col(&|b| opt(q(&b.create, 0.5))),
                "create_p99_ms": col(&|b| opt(q(&b.create, 0.99))),
                "execute_p50_ms": col(&|b| opt(q(&b.execute, 0.5))),
                "execute_p99_ms": col(&|b| opt(q(&b.execute, 0.99))),
                "executions": col(&|b| b.executions.into()),
                "executions_failed": col(&|b| b.executions_failed.into()),
                "error_ratio": col(&|b| opt(ratio(b.executions_failed, b.executions))),
                "http_requests": col(&|b| b.http.into()),
                "http_5xx": col(&|b| b.http_5xx.into()),
                "decisions": col(&|b| b.decisions.into()),
                "denied": col(&|b| b.denied.into()),
                "violation_ratio": col(&|b| opt(ratio(b.denied, b.decisions))),
                "findings": col(&|b| b.findings.into()),
                "containments": col(&|b| b.containments.into()),
                "containment_mean_ms": col(&|b| opt(mean_ms(b.containment_sum, b.containments))),
                "recoveries": col(&|b| b.recoveries.into()),
                "recovery_mean_ms": col(&|b| opt(mean_ms(b.recovery_sum, b.recoveries))),
                "reviews_pending": col(&|b| queue(b, b.reviews_pending)),
                "jobs_queued": col(&|b| queue(b, b.jobs_queued)),
                "creates_waiting": col(&|b| queue(b, b.creates_waiting)),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_histogram_quantiles_are_close() {
        let mut h = LogHist::default();
        for i in 1..=1000 {
            h.add(f64::from(i) / 1000.0); // 1 ms .. 1 s
        }
        let p50 = h.quantile(0.5).unwrap();
        let p99 = h.quantile(0.99).unwrap();
        assert!((p50 - 0.5).abs() / 0.5 < 0.15, "p50 {p50}");
        assert!((p99 - 0.99).abs() / 0.99 < 0.15, "p99 {p99}");
        assert_eq!(h.count(), 1000);
        let mut other = LogHist::default();
        other.add(100_000.0);
        other.add(0.0);
        other.add(f64::NAN);
        h.merge(&other);
        assert_eq!(h.count(), 1003);
        assert_eq!(LogHist::default().quantile(0.5), None);
    }

    #[test]
    fn history_is_bounded_and_rolls_over() {
        let k = Kpis::new();
        let before = k.footprint();
        let t0 = 1_700_000_000u64;
        // Two days of events, one every 7 s, each kind.
        let mut t = t0;
        while t < t0 + 2 * 86_400 {
            k.record_at(
                t,
                Sample::Execute {
                    secs: 0.01,
                    ok: true,
                },
            );
            k.record_at(
                t,
                Sample::Execution {
                    failed: t.is_multiple_of(2),
                },
            );
            k.record_at(
                t,
                Sample::Decision {
                    denied: t.is_multiple_of(3),
                },
            );
            k.record_at(t, Sample::Recovery { secs: 0.2 });
            t += 7;
        }
        assert_eq!(k.footprint(), before, "the history never grows");
        let now = t;
        let hour = k.report(Window::Hour, now);
        assert_eq!(hour["buckets"], FINE_LEN);
        assert_eq!(
            hour["series"]["executions"].as_array().unwrap().len(),
            FINE_LEN
        );
        // Only the last hour's events are in the hour's summary (about 3600/7).
        let n = hour["summary"]["error_rate"]["executions"]
            .as_u64()
            .unwrap();
        assert!((500..=520).contains(&n), "{n}");
        let day = k.report(Window::Day, now);
        assert_eq!(day["buckets"], COARSE_LEN);
        let n = day["summary"]["error_rate"]["executions"].as_u64().unwrap();
        assert!((12_300..=12_400).contains(&n), "{n}");
        let ratio = day["summary"]["policy_violation_rate"]["ratio"]
            .as_f64()
            .unwrap();
        assert!((ratio - 1.0 / 3.0).abs() < 0.01, "{ratio}");
        assert_eq!(day["summary"]["recovery"]["mean_ms"], 200.0);
        // An hour later with nothing recorded, the hour is empty.
        let quiet = k.report(Window::Hour, now + 3_700);
        assert_eq!(quiet["summary"]["error_rate"]["executions"], 0);
        assert_eq!(
            quiet["summary"]["execute_latency_ms"]["p50"],
            serde_json::Value::Null
        );
    }

    #[test]
    fn summaries_add_up() {
        let k = Kpis::new();
        let t = 1_700_000_005u64;
        for _ in 0..9 {
            k.record_at(
                t,
                Sample::Create {
                    secs: 0.1,
                    ok: true,
                },
            );
        }
        k.record_at(
            t,
            Sample::Create {
                secs: 5.0,
                ok: false,
            },
        );
        k.record_at(t, Sample::Http { server_error: true });
        k.record_at(
            t,
            Sample::Http {
                server_error: false,
            },
        );
        k.record_at(t, Sample::Containment { secs: 0.002 });
        k.record_at(t, Sample::Containment { secs: 0.004 });
        k.record_at(t, Sample::Finding);
        k.record_at(
            t,
            Sample::Queues {
                reviews_pending: 3,
                jobs_queued: 1,
                creates_waiting: 0,
            },
        );
        k.record_at(
            t + 1,
            Sample::Queues {
                reviews_pending: 1,
                jobs_queued: 4,
                creates_waiting: 2,
            },
        );
        let r = k.report(Window::Hour, t + 2);
        let s = &r["summary"];
        assert_eq!(s["create_latency_ms"]["count"], 10);
        assert_eq!(s["create_latency_ms"]["errors"], 1);
        let p50 = s["create_latency_ms"]["p50"].as_f64().unwrap();
        assert!((p50 - 100.0).abs() < 15.0, "{p50}");
        let p99 = s["create_latency_ms"]["p99"].as_f64().unwrap();
        assert!((p99 - 5000.0).abs() < 700.0, "{p99}");
        assert_eq!(s["error_rate"]["http_5xx_ratio"], 0.5);
        assert_eq!(s["containment"]["count"], 2);
        assert_eq!(s["containment"]["mean_ms"], 3.0);
        assert_eq!(s["containment"]["max_ms"], 4.0);
        assert_eq!(s["policy_violation_rate"]["findings"], 1);
        assert_eq!(s["policy_violation_rate"]["ratio"], serde_json::Value::Null);
        assert_eq!(s["queues_max"]["reviews_pending"], 3);
        assert_eq!(s["queues_max"]["jobs_queued"], 4);
        let last = r["series"]["jobs_queued"].as_array().unwrap();
        assert_eq!(last.last().unwrap(), 4);
        assert_eq!(last[0], serde_json::Value::Null);
        assert!(r["start"].as_u64().unwrap().is_multiple_of(FINE_SECS));
    }

    #[test]
    fn a_clock_step_back_past_the_ring_is_dropped() {
        let k = Kpis::new();
        let t = 1_700_000_000u64;
        k.record_at(t, Sample::Finding);
        k.record_at(t - FINE_SECS * FINE_LEN as u64, Sample::Finding);
        let r = k.report(Window::Hour, t);
        assert_eq!(r["summary"]["policy_violation_rate"]["findings"], 1);
    }
}
