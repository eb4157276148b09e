//! How the proxy asks the server and tells it what happened.
//!
//! The proxy knows networks, not tenants or policies: the server implements [`EgressHooks`]
//! to put its policy engine at the egress gate ([`EgressHooks::gate`], the Cedar `egress`
//! action), to record every attempt ([`EgressHooks::record`]) and to react to the sandbox's
//! canary credential leaving it ([`EgressHooks::canary`], which contains the sandbox). The hooks
//! are called on the proxy's tasks, so they must be quick and must not block on I/O: a policy
//! decision in memory, a send on a channel to a recorder.

use std::net::IpAddr;
use std::time::SystemTime;

/// The answer of the egress gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateDecision {
    pub allowed: bool,
    /// Why (the deciding policy's reason), quoted in the 403 of a denial.
    pub reason: String,
    /// An opaque reference to the recorded decision, carried into the [`EgressEvent`].
    pub decision_id: String,
}

impl GateDecision {
    pub fn allow(decision_id: impl Into<String>) -> GateDecision {
        GateDecision {
            allowed: true,
            reason: String::new(),
            decision_id: decision_id.into(),
        }
    }

    pub fn deny(reason: impl Into<String>, decision_id: impl Into<String>) -> GateDecision {
        GateDecision {
            allowed: false,
            reason: reason.into(),
            decision_id: decision_id.into(),
        }
    }
}

/// One egress attempt, recorded once: at once when refused, at the end of the tunnel or of the
/// forwarded request when allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressEvent {
    pub sandbox_id: String,
    /// The host asked for (a normalized domain, or an IP); empty when the request never said
    /// (a malformed request, a connection over the limit).
    pub host: String,
    pub port: u16,
    /// The address connected to (or that was refused); `None` before resolution.
    pub ip: Option<IpAddr>,
    /// `CONNECT`, `GET`, ...; empty when the request never said.
    pub method: String,
    /// Whether the request was let through (the tunnel opened, the request forwarded).
    pub allowed: bool,
    /// Why it was refused, or how an allowed one ended (empty when it ended normally).
    pub reason: String,
    /// The status the sandbox was answered: 200 for a tunnel (also one closed afterwards for its
    /// TLS SNI, which gets a TLS alert instead), the upstream's status for a forwarded request,
    /// the refusal's otherwise; 0 when the connection was closed with no answer (a head not
    /// sent in time).
    pub status: u16,
    /// The gate's decision reference, when the gate was asked.
    pub decision_id: Option<String>,
    /// Bytes sent upstream (request heads and bodies, or tunnel bytes from the sandbox).
    pub bytes_up: u64,
    /// Bytes received from upstream.
    pub bytes_down: u64,
    pub started: SystemTime,
    pub ended: SystemTime,
}

/// What the server plugs into the proxy. See the module docs.
pub trait EgressHooks: Send + Sync + 'static {
    /// The policy gate, asked once the host is allowed by the rules and resolved, before
    /// connecting; `ip` is the checked address the proxy is about to connect to.
    fn gate(
        &self,
        sandbox_id: &str,
        host: &str,
        port: u16,
        ip: IpAddr,
        method: &str,
    ) -> GateDecision;

    /// Records one attempt.
    fn record(&self, event: EgressEvent);

    /// The sandbox's canary appeared in egress; `location` says where
    /// (e.g. `"egress request head: GET http://a.test:80"`). The request is already refused.
    fn canary(&self, sandbox_id: &str, location: &str);
}

/// Hooks that allow every request the rules allow and record nothing (benchmarks, tools).
#[derive(Debug, Clone, Copy, Default)]
pub struct NullHooks;

impl EgressHooks for NullHooks {
    fn gate(&self, _: &str, _: &str, _: u16, _: IpAddr, _: &str) -> GateDecision {
        GateDecision::allow("")
    }

    fn record(&self, _: EgressEvent) {}

    fn canary(&self, _: &str, _: &str) {}
}
