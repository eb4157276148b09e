//! Durable jobs and webhooks (skeleton: the jobs work fills it in).

/// Version 6: jobs and webhooks.
pub(crate) const SCHEMA_V6: &str = "SELECT 1;";
