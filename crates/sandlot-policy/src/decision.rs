//! What a decision answers, in a shape the server stores as JSON and returns in denials.

use crate::gate::Gate;
use serde::{Deserialize, Serialize};

/// The answer of one gate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub gate: Gate,
    pub allowed: bool,
    /// The ids of the policies that decided: the satisfied permits for an allow, the satisfied
    /// forbids for an explicit deny, the erroring policies for a deny by evaluation error;
    /// empty for the default deny (no permit applied). Sorted.
    pub policies: Vec<String>,
    /// For a deny: the `@reason` of the deciding forbids (or "forbidden by policy <id>"),
    /// "no policy permits <gate>" for the default deny, or the evaluation errors. For an
    /// allow: the `@reason` of the permits (or "permitted by policy <id>").
    pub reason: String,
    /// Evaluation errors (each names its policy). Any error makes the decision a deny.
    pub errors: Vec<String>,
    /// The version of the policy set that decided.
    pub version: String,
    /// Time spent deciding, including building the request, in microseconds.
    pub latency_us: f64,
    /// Set when the request needs a person's approval: a satisfied permit carries
    /// `@review("why")` and no forbid applies. The decision is then *not* allowed (`allowed`
    /// is false, so a gate that does not hold actions refuses it: fail closed), `policies`
    /// names the reviewing permits and this is their `@review` text. Precedence: a satisfied
    /// forbid denies (no review); a satisfied `@review` permit holds even when an
    /// unannotated permit is satisfied too (review wins over a plain permit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<String>,
    /// Set on an allow through a permit annotated `@on_failure("rollback")`: the action (an
    /// `execute`) must run with `on_failure: rollback` whatever its caller asked — the
    /// sandbox's state is saved before it and restored if it fails. Only `"rollback"` exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<String>,
}

impl Decision {
    /// Whether the request may go ahead once a person approves it.
    pub fn needs_review(&self) -> bool {
        self.review.is_some()
    }
}

/// What happens to an output in which the guardrails found something (the one type, in
/// `sandlot-types`, that the runtime applies too).
pub use sandlot_types::Outcome;
