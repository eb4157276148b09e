//! What the server installs into the runtime after start, and who listens to it: the
//! governance (egress, canaries, guardrails; `govern.rs`), the gate an idle sandbox passes
//! before it pauses (`pause.rs`), and the lifecycle events' listeners and subscribers
//! (`events.rs`).

use crate::{events, govern, pause};
use std::sync::OnceLock;

#[derive(Default)]
pub(crate) struct Hooks {
    /// The server's governance (egress, canaries, guardrails), once installed.
    pub(crate) governance: OnceLock<govern::Governance>,
    /// Decides whether an idle sandbox may pause (its tenant's paused share), once installed.
    pub(crate) idle_pause_gate: OnceLock<pause::IdlePauseGate>,
    /// Lifecycle events and who listens to them (`events.rs`).
    pub(crate) events: events::Events,
}
