//! What the handling of one request learned, for the layers outside it: who it
//! authenticated as, the policy decisions taken, the execution it ran, its trace id and a
//! refusal's code. Every protocol's handler notes into the same [`Note`]; the record's layers
//! (audit, metrics, traces) read it when the request ends.

use sandlot_types::Principal;
use std::sync::{Arc, Mutex, PoisonError};

tokio::task_local! {
    static NOTE: Note;
}

/// What the handling of one request learned, for the layers outside it.
#[derive(Clone, Default)]
pub struct Note(Arc<Mutex<NoteData>>);

#[derive(Debug, Clone, Default)]
pub struct NoteData {
    /// Who the request authenticated as (unset: not authenticated, or no keys on this server).
    pub principal: Option<Principal>,
    /// Ids of the policy decisions taken for it, in order.
    pub decisions: Vec<String>,
    /// The execution it ran, if any.
    pub execution_id: Option<String>,
    /// The W3C trace id of its span (32 hex digits), when traced.
    pub trace_id: Option<String>,
    /// The stable code of a refusal whose answer does not carry it where the audit reads
    /// codes (a JSON `code`): E2B's sandbox tokens refused on the code interpreter (plain
    /// text) and on Connect RPC (whose `code` is Connect's).
    pub refusal: Option<&'static str>,
    /// An `execute` decision for it was an allow through a permit carrying
    /// `@on_failure("rollback")`: its execution runs with `on_failure: rollback` whatever the
    /// caller asked (`crate::trusted::apply_policy_rollback`).
    pub rollback: bool,
}

impl Note {
    /// The note of the request being handled, if any (none outside a request's task).
    pub fn current() -> Option<Note> {
        NOTE.try_with(Note::clone).ok()
    }

    fn with(f: impl FnOnce(&mut NoteData)) {
        let _ = NOTE.try_with(|n| f(&mut n.0.lock().unwrap_or_else(PoisonError::into_inner)));
    }

    pub fn set_principal(p: &Principal) {
        Self::with(|d| d.principal = Some(p.clone()));
    }

    pub fn add_decision(id: &str) {
        Self::with(|d| d.decisions.push(id.to_owned()));
    }

    pub fn set_execution(id: &str) {
        Self::with(|d| d.execution_id = Some(id.to_owned()));
    }

    pub fn set_refusal(code: &'static str) {
        Self::with(|d| d.refusal = Some(code));
    }

    pub fn require_rollback() {
        Self::with(|d| d.rollback = true);
    }

    pub fn set_trace_id(id: &str) {
        Self::with(|d| d.trace_id = Some(id.to_owned()));
    }

    /// What has been noted so far.
    pub fn data(&self) -> NoteData {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Runs `f` with this note as the current one (for work a request hands to another task).
    pub async fn scope<F: std::future::Future>(self, f: F) -> F::Output {
        NOTE.scope(self, f).await
    }
}
