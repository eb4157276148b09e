//! The trusted tier's grants and the policy's requirements on what it lets run (issue 23).
//!
//! **Rollback required by policy.** A permit on `execute` annotated `@on_failure("rollback")`
//! makes every execution it allows run with `on_failure: rollback`, whatever the caller asked
//! (the caller cannot opt out: the request's own `on_failure` is only ever raised, never
//! lowered). The decision carries it (`Decision::on_failure`); deciding it notes it in the
//! request's [`Note`], and the execution the request then starts (REST, MCP, E2B, every path
//! through [`crate::Backend::execute`] or [`apply_policy_rollback`]) reads it there. A permit
//! scoped to `resource.tier == "trusted"` is how a policy says it "for a tier".

use crate::note::Note;
use sandlot_policy::{Decision, Gate};
use sandlot_types::{ExecuteRequest, OnFailure};

/// Notes, for the request being handled, that `d` requires its execution to roll back on
/// failure (an allowed `execute` through an `@on_failure("rollback")` permit).
pub fn note_rollback(d: &Decision) {
    if d.allowed && d.gate == Gate::Execute && d.on_failure.as_deref() == Some("rollback") {
        Note::require_rollback();
    }
}

/// Whether the request being handled must roll back its execution on failure.
pub fn rollback_required() -> bool {
    Note::current().is_some_and(|n| n.data().rollback)
}

/// `req`, with `on_failure: rollback` when the policy that allowed it requires it.
pub fn apply_policy_rollback(mut req: ExecuteRequest) -> ExecuteRequest {
    if rollback_required() {
        req.on_failure = OnFailure::Rollback;
    }
    req
}
