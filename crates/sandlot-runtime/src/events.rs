//! Lifecycle events: what the runtime did to a sandbox, told to whoever listens, whichever
//! interface (REST, E2B, MCP, a job, housekeeping) caused it.
//!
//! Two ways to listen. A *listener* ([`Runtime::on_event`]) is called inline, in order, on the
//! thread that emitted the event, and never misses one: it must be quick and must not block
//! (the audit log appends, metrics count). A *subscriber* ([`Runtime::subscribe`]) gets events
//! through a bounded broadcast channel and may fall behind: it is told how many it lost (the
//! event stream and webhooks, which say so to their clients).

use crate::util::{lock, now_rfc3339};
use crate::Runtime;
use sandlot_types::{LifecycleEvent, LifecycleKind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// How many events a slow subscriber may be behind before it loses the oldest.
const CHANNEL_CAPACITY: usize = 8192;

/// A function called with every event, inline.
pub type Listener = Arc<dyn Fn(&LifecycleEvent) + Send + Sync>;

pub(crate) struct Events {
    seq: AtomicU64,
    listeners: Mutex<Vec<Listener>>,
    tx: tokio::sync::broadcast::Sender<LifecycleEvent>,
}

impl Default for Events {
    fn default() -> Self {
        Self {
            seq: AtomicU64::new(0),
            listeners: Mutex::default(),
            tx: tokio::sync::broadcast::channel(CHANNEL_CAPACITY).0,
        }
    }
}

impl Runtime {
    /// Calls `listener` with every event from now on, inline and in order.
    pub fn on_event(&self, listener: Listener) {
        lock(&self.inner.hooks.events.listeners).push(listener);
    }

    /// Events from now on, through a channel that drops the oldest for a subscriber more than
    /// 8192 events behind (its next `recv` says how many).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<LifecycleEvent> {
        self.inner.hooks.events.tx.subscribe()
    }

    /// Tells every listener and subscriber that `kind` happened to the sandbox `id`.
    pub(crate) fn emit(
        &self,
        kind: LifecycleKind,
        id: &str,
        tenant: &str,
        execution_id: Option<&str>,
        detail: serde_json::Value,
    ) {
        let events = &self.inner.hooks.events;
        let ev = LifecycleEvent {
            seq: events.seq.fetch_add(1, Ordering::SeqCst) + 1,
            kind,
            sandbox_id: id.to_owned(),
            tenant: tenant.to_owned(),
            at: now_rfc3339(),
            execution_id: execution_id.map(str::to_owned),
            detail,
        };
        sandlot_telemetry::metrics().lifecycle(&ev);
        let listeners = lock(&events.listeners).clone();
        for l in &listeners {
            l(&ev);
        }
        // No subscriber is not an error.
        let _ = events.tx.send(ev);
    }

    /// [`Runtime::emit`] for the sandbox of entry `e`.
    pub(crate) fn emit_for(
        &self,
        kind: LifecycleKind,
        e: &crate::Entry,
        execution_id: Option<&str>,
        detail: serde_json::Value,
    ) {
        let tenant = lock(&e.info).tenant.clone();
        self.emit(kind, &e.id, &tenant, execution_id, detail);
    }
}
