//! sandlot's metrics, traces and logs (skeleton: the metrics work fills it in).
//!
//! [`metrics`] is the process's one set of metrics, counted wherever something happens (the
//! HTTP layer, the gates, the egress proxy, the guardrails, the runtime's lifecycle events) and
//! rendered at `/metrics`.

use sandlot_types::LifecycleEvent;
use std::sync::OnceLock;

/// The process's metrics.
#[derive(Default)]
pub struct Metrics {}

/// The process's one set of metrics.
pub fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::default)
}

impl Metrics {
    /// A policy decision at `gate` (`create_sandbox`, `execute`, ...).
    pub fn policy_decision(&self, gate: &str, allowed: bool) {
        let _ = (gate, allowed);
    }

    /// An egress attempt the proxy allowed or refused.
    pub fn egress_decision(&self, allowed: bool) {
        let _ = allowed;
    }

    /// A guardrail finding and what was done about it (`pass`, `redact`, `withhold`, `contain`).
    pub fn guardrail_finding(&self, outcome: &str) {
        let _ = outcome;
    }

    /// A lifecycle event of the runtime (sandboxes by end state, executions by end state,
    /// OOMs, timeouts, containment).
    pub fn lifecycle(&self, ev: &LifecycleEvent) {
        let _ = ev;
    }
}
