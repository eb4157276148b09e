//! sandlot's metrics, traces and logs.
//!
//! [`metrics`] is the process's one set of metrics, counted wherever something happens (the
//! HTTP layer, the gates, the egress proxy, the guardrails, the runtime's lifecycle events) and
//! rendered at `/metrics` as OpenMetrics text ([`Metrics::render`]). Gauges that are cheaper to
//! read than to keep (sandboxes by state, queue depths) are read at each scrape from callbacks
//! ([`Metrics::set_gauge_source`], [`Metrics::set_gauge_family_source`]).
//!
//! No label ever carries a sandbox id, a tenant, a key or anything a client chose freely: the
//! label values are fixed words, route templates, or values interned under a cap
//! ([`Interner`]), so a hostile client cannot grow the series without bound.
//!
//! [`trace`] sets up OpenTelemetry (OTLP over HTTP, only when configured) and [`logs`] the log
//! subscriber (text, or one JSON object per line).

pub mod kpi;
pub mod logs;
pub mod trace;

pub use logs::init_logging;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use sandlot_types::{LifecycleEvent, LifecycleKind};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Latency buckets (seconds) for requests and executions: a hot `1+1` is around a millisecond,
/// a cold creation a few hundred, a long execution minutes.
const LATENCY_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    120.0,
];

/// Containment buckets (seconds): from the finding to the sandbox's processes being killed.
const CONTAINMENT_BUCKETS: [f64; 10] = [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0];

/// Recovery buckets (seconds): from a fault detected to fresh processes answering (a restart
/// in place boots from the template's zygote: tens to hundreds of milliseconds).
const RECOVERY_BUCKETS: [f64; 12] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0,
];

/// How many detections may wait for their containment at once (older ones are dropped).
const PENDING_CONTAINMENTS: usize = 4096;

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

fn containment_histogram() -> Histogram {
    Histogram::new(CONTAINMENT_BUCKETS)
}

/// Why a sandbox restarted in place, as `sandlot_recovery_seconds{reason}` says.
const RECOVERY_REASONS: [&str; 5] = [
    "oom",
    "timeout",
    "crashed",
    "server_restarted",
    "interrupt_ignored",
];

fn recovery_histogram() -> Histogram {
    Histogram::new(RECOVERY_BUCKETS)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Turns label values that come from outside (route shapes, gate names, tool names) into
/// `&'static str`s, at most `cap` distinct ones; past that every new value is `other`. Keeps
/// both the series bounded and the hot path free of allocations (a known value is a lookup).
pub struct Interner {
    cap: usize,
    /// Read on every request, written once per new value: a read lock is the common case.
    known: RwLock<HashMap<String, &'static str>>,
}

impl Interner {
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            known: RwLock::new(HashMap::new()),
        }
    }

    /// `value` as a label value (`other` once the cap is reached).
    pub fn intern(&self, value: &str) -> &'static str {
        if let Some(v) = self
            .known
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(value)
        {
            return v;
        }
        let mut known = self.known.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(v) = known.get(value) {
            return v;
        }
        if known.len() >= self.cap {
            return "other";
        }
        // Leaked on purpose: at most `cap` small strings for the life of the process.
        let v: &'static str = Box::leak(value.to_owned().into_boxed_str());
        known.insert(value.to_owned(), v);
        v
    }
}

/// One HTTP request's series: which interface, which route (a template), which method, which
/// status.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    interface: &'static str,
    route: &'static str,
    method: &'static str,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    interface: &'static str,
    route: &'static str,
    method: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    interface: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ExecutionLabels {
    language: &'static str,
    end_state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndStateLabels {
    end_state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GateLabels {
    gate: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// A gauge read at each scrape: one value, or one per value of a label.
type Source = Box<dyn Fn() -> Vec<(String, f64)> + Send + Sync>;

struct GaugeSource {
    name: String,
    help: String,
    /// `None`: a single value (the source's first, label ignored).
    label: Option<String>,
    read: Source,
}

/// The gauges read at scrape, as a collector of the registry.
#[derive(Default)]
struct Sources(Mutex<Vec<GaugeSource>>);

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sources")
    }
}

impl Collector for Sources {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let sources = lock(&self.0);
        for s in sources.iter() {
            let values = (s.read)();
            let gauge = ConstGauge::new(0.0f64);
            let mut metric =
                encoder.encode_descriptor(&s.name, &s.help, None, gauge.metric_type())?;
            match &s.label {
                None => {
                    let v = values.first().map(|(_, v)| *v).unwrap_or(0.0);
                    ConstGauge::new(v).encode(metric)?;
                }
                Some(label) => {
                    for (value, v) in &values {
                        let labels = [(label.as_str(), value.as_str())];
                        ConstGauge::new(*v).encode(metric.encode_family(&labels)?)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// The process's metrics.
pub struct Metrics {
    registry: Registry,
    sources: Arc<Sources>,
    routes: Interner,
    gates: Interner,
    http_requests: Family<HttpLabels, Counter>,
    http_duration: Family<RouteLabels, Histogram, fn() -> Histogram>,
    create_duration: Family<OperationLabels, Histogram, fn() -> Histogram>,
    execute_request_duration: Family<OperationLabels, Histogram, fn() -> Histogram>,
    execution_duration: Family<ExecutionLabels, Histogram, fn() -> Histogram>,
    executions: Family<EndStateLabels, Counter>,
    sandboxes_created: Family<SourceLabels, Counter>,
    sandboxes_ended: Family<StateLabels, Counter>,
    lifecycle_events: Family<KindLabels, Counter>,
    ooms: Counter,
    timeouts: Counter,
    policy_decisions: Family<GateLabels, Counter>,
    egress_decisions: Family<OutcomeLabels, Counter>,
    guardrail_findings: Family<OutcomeLabels, Counter>,
    containments: Counter,
    containment_duration: Histogram,
    /// When a finding that contains was detected, by sandbox, until its containment.
    pending_containments: Mutex<HashMap<String, Instant>>,
    /// Restarts in place by why (`oom`, `timeout`, `crashed`, ...): fault detected → answering.
    recovery: Family<ReasonLabels, Histogram, fn() -> Histogram>,
    /// The last hour's and day's KPIs (`kpi.rs`), fed by the calls above.
    kpis: Arc<kpi::Kpis>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// The process's one set of metrics.
pub fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

/// Which API a request came through, for the `interface` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interface {
    /// sandlot's own API under `/v1`.
    Rest,
    /// E2B's control plane and its in-sandbox APIs.
    E2b,
    /// MCP's streamable HTTP at `/mcp`.
    Mcp,
    /// Anything else (`/metrics`, unknown paths).
    Other,
}

impl Interface {
    pub fn as_str(self) -> &'static str {
        match self {
            Interface::Rest => "rest",
            Interface::E2b => "e2b",
            Interface::Mcp => "mcp",
            Interface::Other => "other",
        }
    }
}

/// What a request did, for the operation histograms and spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    CreateSandbox,
    Execute,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("sandlot");
        let m = Self {
            registry: Registry::default(),
            sources: Arc::default(),
            routes: Interner::new(512),
            gates: Interner::new(64),
            http_requests: Family::default(),
            http_duration: Family::new_with_constructor(latency_histogram),
            create_duration: Family::new_with_constructor(latency_histogram),
            execute_request_duration: Family::new_with_constructor(latency_histogram),
            execution_duration: Family::new_with_constructor(latency_histogram),
            executions: Family::default(),
            sandboxes_created: Family::default(),
            sandboxes_ended: Family::default(),
            lifecycle_events: Family::default(),
            ooms: Counter::default(),
            timeouts: Counter::default(),
            policy_decisions: Family::default(),
            egress_decisions: Family::default(),
            guardrail_findings: Family::default(),
            containments: Counter::default(),
            containment_duration: containment_histogram(),
            pending_containments: Mutex::default(),
            recovery: Family::new_with_constructor(recovery_histogram),
            kpis: Arc::default(),
        };
        registry.register(
            "http_requests",
            "HTTP requests by interface, route template, method and status",
            m.http_requests.clone(),
        );
        registry.register_with_unit(
            "http_request_duration",
            "Time to the response head of HTTP requests",
            Unit::Seconds,
            m.http_duration.clone(),
        );
        registry.register_with_unit(
            "create_sandbox_duration",
            "Sandbox creations as the client sees them (REST, E2B, MCP), whole request",
            Unit::Seconds,
            m.create_duration.clone(),
        );
        registry.register_with_unit(
            "execute_request_duration",
            "Execute requests as the client sees them (REST, E2B, MCP), to the end of the response",
            Unit::Seconds,
            m.execute_request_duration.clone(),
        );
        registry.register_with_unit(
            "execution_duration",
            "Executions in the runtime by language and end state (every interface, jobs too)",
            Unit::Seconds,
            m.execution_duration.clone(),
        );
        registry.register(
            "executions",
            "Executions ended, by end state",
            m.executions.clone(),
        );
        registry.register(
            "sandboxes_created",
            "Sandboxes created, by source (template, fork, snapshot)",
            m.sandboxes_created.clone(),
        );
        registry.register(
            "sandboxes_ended",
            "Sandboxes ended, by end state (deleted, expired, failed)",
            m.sandboxes_ended.clone(),
        );
        registry.register(
            "lifecycle_events",
            "Lifecycle events by kind",
            m.lifecycle_events.clone(),
        );
        registry.register(
            "ooms",
            "Executions ended by the sandbox's memory limit",
            m.ooms.clone(),
        );
        registry.register(
            "timeouts",
            "Executions ended by their timeout",
            m.timeouts.clone(),
        );
        registry.register(
            "policy_decisions",
            "Policy decisions by gate and outcome (allow, deny)",
            m.policy_decisions.clone(),
        );
        registry.register(
            "egress_decisions",
            "Egress attempts by outcome (allow, deny)",
            m.egress_decisions.clone(),
        );
        registry.register(
            "guardrail_findings",
            "Guardrail findings by outcome (pass, redact, withhold, contain)",
            m.guardrail_findings.clone(),
        );
        registry.register(
            "containments",
            "Sandboxes contained",
            m.containments.clone(),
        );
        registry.register_with_unit(
            "containment_duration",
            "From a finding that contains to the sandbox contained",
            Unit::Seconds,
            m.containment_duration.clone(),
        );
        registry.register_with_unit(
            "recovery",
            "Restarts in place by reason (oom, timeout, crashed, server_restarted, ...): from the fault detected to fresh processes ready to answer",
            Unit::Seconds,
            m.recovery.clone(),
        );
        // Series that exist from the start, at zero, so a board's `rate()` has them before the
        // first finding or restart (and a scrape shows what can be counted).
        for outcome in ["pass", "redact", "withhold", "contain"] {
            let _ = m
                .guardrail_findings
                .get_or_create(&OutcomeLabels { outcome });
        }
        for reason in RECOVERY_REASONS {
            let _ = m.recovery.get_or_create(&ReasonLabels { reason });
        }
        let kpis = m.kpis.clone();
        m.add_source(
            "policy_violation_ratio",
            "Denied policy decisions over all decisions in the last hour (held-for-review bookkeeping excluded; 0 when none)",
            None,
            Box::new(move || vec![(String::new(), kpis.violation_ratio(kpi::unix_now()))]),
        );
        registry.register_collector(Box::new(m.sources.clone()));
        Self { registry, ..m }
    }

    /// A route shape from a request (a template, or a path with its ids blanked) as a bounded
    /// label value.
    pub fn route_label(&self, route: &str) -> &'static str {
        self.routes.intern(route)
    }

    /// One HTTP request answered: its status and the time to its response head.
    pub fn http_request(
        &self,
        interface: Interface,
        route: &'static str,
        method: &'static str,
        status: u16,
        elapsed: Duration,
    ) {
        let interface = interface.as_str();
        self.http_requests
            .get_or_create(&HttpLabels {
                interface,
                route,
                method,
                status,
            })
            .inc();
        self.http_duration
            .get_or_create(&RouteLabels {
                interface,
                route,
                method,
            })
            .observe(elapsed.as_secs_f64());
        self.kpis.record(kpi::Sample::Http {
            server_error: status >= 500,
        });
    }

    /// A creation or execution request ended (its response fully sent or dropped).
    pub fn operation(&self, op: Operation, interface: Interface, ok: bool, elapsed: Duration) {
        let labels = OperationLabels {
            interface: interface.as_str(),
            outcome: if ok { "ok" } else { "error" },
        };
        let family = match op {
            Operation::CreateSandbox => &self.create_duration,
            Operation::Execute => &self.execute_request_duration,
        };
        let secs = elapsed.as_secs_f64();
        family.get_or_create(&labels).observe(secs);
        self.kpis.record(match op {
            Operation::CreateSandbox => kpi::Sample::Create { secs, ok },
            Operation::Execute => kpi::Sample::Execute { secs, ok },
        });
    }

    /// A policy decision at `gate` (`create_sandbox`, `execute`, ...).
    pub fn policy_decision(&self, gate: &str, allowed: bool) {
        self.policy_decision_of(gate, allowed, false);
    }

    /// A policy decision at `gate` that may have held the action for a person's review
    /// (`outcome="review"`: neither allowed nor denied yet; the person's decision is counted
    /// at the gate `review`). The KPIs' violation rate counts every allow and deny except the
    /// `review_held` bookkeeping.
    pub fn policy_decision_of(&self, gate: &str, allowed: bool, held: bool) {
        let outcome = if held { "review" } else { allow_deny(allowed) };
        self.policy_decisions
            .get_or_create(&GateLabels {
                gate: self.gates.intern(gate),
                outcome,
            })
            .inc();
        if !held && gate != "review_held" {
            self.kpis.record(kpi::Sample::Decision { denied: !allowed });
        }
    }

    /// A sandbox answered again `elapsed` after its fault (`reason`: `oom`, `timeout`,
    /// `crashed`, `server restarted`, `interrupt ignored`) was detected: its restart in place.
    pub fn recovered(&self, reason: &str, elapsed: Duration) {
        let reason = match reason {
            "server restarted" => "server_restarted",
            "interrupt ignored" => "interrupt_ignored",
            r => RECOVERY_REASONS
                .iter()
                .find(|k| **k == r)
                .copied()
                .unwrap_or("other"),
        };
        let secs = elapsed.as_secs_f64();
        self.recovery
            .get_or_create(&ReasonLabels { reason })
            .observe(secs);
        self.kpis.record(kpi::Sample::Recovery { secs });
    }

    /// The KPI history (`GET /v1/kpis`).
    pub fn kpis(&self) -> &kpi::Kpis {
        &self.kpis
    }

    /// An egress attempt the proxy allowed or refused.
    pub fn egress_decision(&self, allowed: bool) {
        self.egress_decisions
            .get_or_create(&OutcomeLabels {
                outcome: allow_deny(allowed),
            })
            .inc();
    }

    /// A guardrail finding and what was done about it (`pass`, `redact`, `withhold`, `contain`).
    pub fn guardrail_finding(&self, outcome: &str) {
        let outcome = match outcome {
            "pass" => "pass",
            "redact" => "redact",
            "withhold" => "withhold",
            "contain" => "contain",
            _ => "other",
        };
        self.guardrail_findings
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
        self.kpis.record(kpi::Sample::Finding);
    }

    /// A finding that contains `sandbox` was detected now: its `contained` event measures the
    /// containment duration from here.
    pub fn finding_detected(&self, sandbox: &str) {
        let mut pending = lock(&self.pending_containments);
        if pending.len() >= PENDING_CONTAINMENTS {
            // A detection whose containment never came (the sandbox ended first) is dropped.
            let now = Instant::now();
            pending.retain(|_, t| now.duration_since(*t) < Duration::from_secs(60));
            if pending.len() >= PENDING_CONTAINMENTS {
                return;
            }
        }
        pending
            .entry(sandbox.to_owned())
            .or_insert_with(Instant::now);
    }

    /// A lifecycle event of the runtime (sandboxes by end state, executions by end state,
    /// OOMs, timeouts, containment).
    pub fn lifecycle(&self, ev: &LifecycleEvent) {
        self.lifecycle_events
            .get_or_create(&KindLabels {
                kind: kind_str(ev.kind),
            })
            .inc();
        let detail = |k: &str| ev.detail.get(k).and_then(|v| v.as_str());
        match ev.kind {
            LifecycleKind::Executed => {
                let end_state = end_state_str(detail("end_state"));
                let language = match detail("language") {
                    Some("python") => "python",
                    Some("bash") => "bash",
                    Some("javascript") => "javascript",
                    Some("typescript") => "typescript",
                    _ => "other",
                };
                self.executions
                    .get_or_create(&EndStateLabels { end_state })
                    .inc();
                if let Some(ms) = ev.detail.get("duration_ms").and_then(|v| v.as_f64()) {
                    self.execution_duration
                        .get_or_create(&ExecutionLabels {
                            language,
                            end_state,
                        })
                        .observe(ms / 1e3);
                }
                // An interruption is the caller's own doing, not a failure.
                self.kpis.record(kpi::Sample::Execution {
                    failed: !matches!(end_state, "ok" | "interrupted"),
                });
                match end_state {
                    "oom" => {
                        self.ooms.inc();
                    }
                    "timeout" => {
                        self.timeouts.inc();
                    }
                    _ => {}
                }
            }
            LifecycleKind::Created => {
                let source = match ev.detail.get("source") {
                    Some(serde_json::Value::Object(o)) if o.contains_key("fork") => "fork",
                    Some(serde_json::Value::Object(o)) if o.contains_key("snapshot") => "snapshot",
                    _ => "template",
                };
                self.sandboxes_created
                    .get_or_create(&SourceLabels { source })
                    .inc();
            }
            LifecycleKind::Killed | LifecycleKind::Expired | LifecycleKind::Failed => {
                let state = match ev.kind {
                    LifecycleKind::Killed => "deleted",
                    LifecycleKind::Expired => "expired",
                    _ => "failed",
                };
                self.sandboxes_ended
                    .get_or_create(&StateLabels { state })
                    .inc();
            }
            LifecycleKind::Contained => {
                self.containments.inc();
                let detected = lock(&self.pending_containments).remove(&ev.sandbox_id);
                if let Some(t) = detected {
                    let secs = t.elapsed().as_secs_f64();
                    self.containment_duration.observe(secs);
                    self.kpis.record(kpi::Sample::Containment { secs });
                }
            }
            _ => {}
        }
    }

    /// Reads `read` at each scrape as the gauge `sandlot_<name>` (replacing an earlier source of
    /// that name). For components that own a count (the jobs queue):
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// let queued = Arc::new(AtomicUsize::new(0));
    /// let count = queued.clone();
    /// sandlot_telemetry::metrics().set_gauge_source(
    ///     "jobs_queued", "Jobs waiting to run", move || count.load(Ordering::Relaxed) as i64);
    /// queued.fetch_add(1, Ordering::Relaxed);
    /// ```
    ///
    /// `read` runs on the scraping request's task: it must be quick and must not block.
    pub fn set_gauge_source(
        &self,
        name: &str,
        help: &str,
        read: impl Fn() -> i64 + Send + Sync + 'static,
    ) {
        self.add_source(
            name,
            help,
            None,
            Box::new(move || vec![(String::new(), read() as f64)]),
        );
    }

    /// Like [`Metrics::set_gauge_source`] for a gauge with one label: `read` gives each label
    /// value and its gauge value (values must be a bounded set of words, never ids).
    pub fn set_gauge_family_source(
        &self,
        name: &str,
        help: &str,
        label: &str,
        read: impl Fn() -> Vec<(String, f64)> + Send + Sync + 'static,
    ) {
        self.add_source(name, help, Some(label.to_owned()), Box::new(read));
    }

    /// A single-valued gauge read at scrape as an `f64` (durations, for instance).
    pub fn set_gauge_source_f64(
        &self,
        name: &str,
        help: &str,
        read: impl Fn() -> Option<f64> + Send + Sync + 'static,
    ) {
        self.add_source(
            name,
            help,
            None,
            Box::new(move || read().map(|v| (String::new(), v)).into_iter().collect()),
        );
    }

    fn add_source(&self, name: &str, help: &str, label: Option<String>, read: Source) {
        let mut sources = lock(&self.sources.0);
        sources.retain(|s| s.name != name);
        sources.push(GaugeSource {
            name: name.to_owned(),
            help: help.to_owned(),
            label,
            read,
        });
    }

    /// Every metric as OpenMetrics text (serve it as [`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(16 << 10);
        // Writing to a String cannot fail; an encoding error would be a bug in a metric.
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "metrics could not be encoded");
        }
        out
    }
}

fn allow_deny(allowed: bool) -> &'static str {
    if allowed {
        "allow"
    } else {
        "deny"
    }
}

/// A lifecycle kind as a label value.
pub fn kind_str(kind: LifecycleKind) -> &'static str {
    match kind {
        LifecycleKind::Created => "created",
        LifecycleKind::Executed => "executed",
        LifecycleKind::Paused => "paused",
        LifecycleKind::Resumed => "resumed",
        LifecycleKind::Forked => "forked",
        LifecycleKind::Restarted => "restarted",
        LifecycleKind::Stopped => "stopped",
        LifecycleKind::Killed => "killed",
        LifecycleKind::Expired => "expired",
        LifecycleKind::Contained => "contained",
        LifecycleKind::Failed => "failed",
    }
}

/// An execution's end state as a label value.
pub fn end_state_str(s: Option<&str>) -> &'static str {
    match s {
        Some("ok") => "ok",
        Some("error") => "error",
        Some("timeout") => "timeout",
        Some("interrupted") => "interrupted",
        Some("oom") => "oom",
        Some("killed") => "killed",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: LifecycleKind, detail: serde_json::Value) -> LifecycleEvent {
        LifecycleEvent {
            seq: 1,
            kind,
            sandbox_id: "sb_1".into(),
            tenant: "t".into(),
            at: String::new(),
            execution_id: Some("ex_1".into()),
            detail,
        }
    }

    #[test]
    fn lifecycle_events_are_counted_without_ids() {
        let m = Metrics::new();
        for end in ["ok", "ok", "oom", "timeout", "weird"] {
            m.lifecycle(&event(
                LifecycleKind::Executed,
                serde_json::json!({"language": "python", "end_state": end, "duration_ms": 1.5}),
            ));
        }
        m.lifecycle(&event(
            LifecycleKind::Created,
            serde_json::json!({"source": {"fork": "sb_0"}}),
        ));
        m.finding_detected("sb_1");
        m.lifecycle(&event(LifecycleKind::Contained, serde_json::Value::Null));
        m.policy_decision("execute", false);
        m.set_gauge_source("jobs_queued", "Jobs waiting", || 7);
        m.set_gauge_family_source("sandboxes", "Sandboxes by state", "state", || {
            vec![("running".into(), 2.0)]
        });
        let text = m.render();
        assert!(
            text.contains("sandlot_executions_total{end_state=\"ok\"} 2"),
            "{text}"
        );
        assert!(text.contains("sandlot_executions_total{end_state=\"other\"} 1"));
        assert!(text.contains("sandlot_ooms_total 1"));
        assert!(text.contains("sandlot_timeouts_total 1"));
        assert!(text.contains("sandlot_sandboxes_created_total{source=\"fork\"} 1"));
        assert!(text.contains("sandlot_containment_duration_seconds_count 1"));
        assert!(
            text.contains("sandlot_policy_decisions_total{gate=\"execute\",outcome=\"deny\"} 1")
        );
        assert!(text.contains("sandlot_jobs_queued 7"));
        m.policy_decision("execute", true);
        m.policy_decision_of("egress", false, true);
        m.policy_decision("review_held", false);
        m.recovered("oom", Duration::from_millis(40));
        m.recovered("server restarted", Duration::from_millis(60));
        let text = m.render();
        assert!(
            text.contains("sandlot_policy_decisions_total{gate=\"egress\",outcome=\"review\"} 1")
        );
        // Of the execute deny, the execute allow (the hold and its bookkeeping not counted).
        assert!(
            text.contains("sandlot_policy_violation_ratio 0.5"),
            "{text}"
        );
        assert!(text.contains("sandlot_recovery_seconds_count{reason=\"oom\"} 1"));
        assert!(text.contains("sandlot_recovery_seconds_count{reason=\"server_restarted\"} 1"));
        assert!(text.contains("sandlot_recovery_seconds_count{reason=\"crashed\"} 0"));
        assert!(text.contains("sandlot_guardrail_findings_total{outcome=\"redact\"} 0"));
        let kpis = m.kpis().report(kpi::Window::Hour, kpi::unix_now());
        let s = &kpis["summary"];
        assert_eq!(s["recovery"]["count"], 2);
        assert_eq!(s["containment"]["count"], 1);
        assert_eq!(s["error_rate"]["executions"], 5);
        assert_eq!(s["error_rate"]["failed"], 3);
        assert_eq!(s["policy_violation_rate"]["decisions"], 2);
        assert!(text.contains("sandlot_sandboxes{state=\"running\"} 2"));
        assert!(!text.contains("sb_"), "no ids in labels: {text}");
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn interned_labels_are_capped() {
        let i = Interner::new(2);
        assert_eq!(i.intern("a"), "a");
        assert_eq!(i.intern("b"), "b");
        assert_eq!(i.intern("c"), "other");
        assert_eq!(i.intern("a"), "a");
    }
}
