//! Executions whose output a decision held for review withheld, noted until their result is
//! kept for release (see `held_output`); governance holds the map, so it sits below both.

use sandlot_policy::{Decision, PolicyPrincipal};
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// Executions waiting for their end with a held decision, at most (past it, not kept).
const MAX_PENDING: usize = 10_000;

/// Executions whose output a held decision withheld, until their result is kept.
#[derive(Default)]
pub struct Pending(Mutex<HashMap<String, (Decision, PolicyPrincipal)>>);

impl Pending {
    /// Notes that execution `exec`'s output was withheld by held decision `d` (the first
    /// one is kept).
    pub(crate) fn note(&self, exec: &str, d: &Decision, who: &PolicyPrincipal) {
        let mut m = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if m.len() < MAX_PENDING && !m.contains_key(exec) {
            m.insert(exec.to_owned(), (d.clone(), who.clone()));
        }
    }

    pub(crate) fn take(&self, exec: &str) -> Option<(Decision, PolicyPrincipal)> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(exec)
    }
}
