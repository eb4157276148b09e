//! Lineage: inputs, policy versions and template digests of executions (skeleton: the lineage
//! work fills it in).

/// Version 7: lineage.
pub(crate) const SCHEMA_V7: &str = "SELECT 1;";
