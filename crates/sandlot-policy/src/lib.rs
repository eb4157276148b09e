//! `sandlot-policy`: Cedar policies evaluated at every sandlot gate.
//!
//! The policy directory (`<data-dir>/policies/`) holds `policies.cedar` (the set in force) and
//! `schema.cedarschema` (the `Sandlot` namespace: entity types `Key`, `Tenant`, `Sandbox`,
//! `Template`, `Domain`, `Tier`, `Output`; one action per [`Gate`]), both written with the
//! shipped defaults when absent. Every policy carries a readable `@id("...")` (the id decisions
//! name) and optionally a `@reason("...")` (the text a denial gives). Sets are validated
//! strictly against the schema when loaded and on [`PolicyEngine::replace`]; a refused set
//! leaves the one in force. The version of a set is a hash of its text and the schema.
//!
//! [`PolicyEngine::decide`] answers a [`Query`] (principal, gate, resource and context as
//! typed values) with a [`Decision`]: allowed or not, the deciding policy ids, the reason, any
//! evaluation errors (which make it a deny), the set's version and the time it took.
//! [`PolicyEngine::output_outcome`] turns a guardrail finding into pass, redact, withhold or
//! contain.

mod decision;
mod engine;
mod error;
mod gate;
mod index;
mod query;
mod schema;
mod set;

pub use decision::{Decision, Outcome};
pub use engine::{PolicyEngine, POLICIES_FILE, SCHEMA_FILE};
pub use error::PolicyError;
pub use gate::Gate;
pub use query::{
    Finding, GateRequest, OutputGate, PolicyPrincipal, Query, SandboxRef, SandboxRequest,
};
pub use schema::{DEFAULT_POLICIES, SCHEMA};
pub use set::{
    valid_policy_id, PolicyEntry, PolicyInfo, MAX_EXPR_DEPTH, MAX_NESTING, MAX_OPERATORS,
    MAX_POLICY_BYTES,
};

/// Synthetic policy sets and queries for benchmarks and tests (not part of the stable API).
#[doc(hidden)]
pub mod testing {
    use crate::query::Query;

    /// A set of `n` policies (at least the shipped ones): the defaults plus forbids and
    /// permits spread over the gates, a tenth of them on every action, none of which applies
    /// to the queries of [`sample_queries`]; so every decision evaluates its gate's share.
    pub fn policy_set(n: usize) -> String {
        let mut s = String::from(crate::DEFAULT_POLICIES);
        let shipped = crate::DEFAULT_POLICIES.matches("\n@id(").count();
        for i in 0..n.saturating_sub(shipped) {
            let p = match i % 10 {
                0 => format!(
                    "forbid (principal, action, resource) when {{ principal.prefix == \"revoked{i}\" }};"
                ),
                1 | 6 => format!(
                    "forbid (principal, action == Sandlot::Action::\"execute\", resource) when {{ principal.tenant == Sandlot::Tenant::\"t{i}\" && context.code_bytes > {} }};",
                    1000 + i
                ),
                2 | 7 => format!(
                    "forbid (principal, action == Sandlot::Action::\"create_sandbox\", resource) when {{ principal.plan == \"plan{i}\" && (context.memory_mb > {} || context.network) }};",
                    64 * i
                ),
                3 => format!(
                    "forbid (principal, action == Sandlot::Action::\"egress\", resource) when {{ resource.name == \"blocked{i}.test\" || context.host like \"*.blocked{i}.test\" }};"
                ),
                4 | 8 => format!(
                    "permit (principal, action in [Sandlot::Action::\"read_file\", Sandlot::Action::\"write_file\"], resource) when {{ resource.tenant == Sandlot::Tenant::\"t{i}\" && context.path like \"/workspace/*\" }};"
                ),
                5 => format!(
                    "forbid (principal, action == Sandlot::Action::\"select_tier\", resource == Sandlot::Tier::\"tier{i}\") unless {{ principal.role == \"admin\" }};"
                ),
                _ => format!(
                    "forbid (principal, action in [Sandlot::Action::\"output_redact\", Sandlot::Action::\"output_withhold\", Sandlot::Action::\"output_contain\"], resource) when {{ context.rule == \"rule{i}\" && resource.sandbox.tier == \"trusted\" }};"
                ),
            };
            s.push_str(&format!(
                "\n@id(\"synthetic-{i}\")\n@reason(\"synthetic policy {i}\")\n{p}\n"
            ));
        }
        s
    }

    /// One query per gate, every field filled (the engine's schema check uses the same).
    pub fn sample_queries() -> Vec<Query> {
        crate::engine::sample_queries()
    }
}
