//! The crate's one error type.

use std::path::PathBuf;

/// Why a policy set or schema was refused, or the policy files could not be read or written.
/// A refused replace leaves the set in force untouched.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The policy text does not parse; the message carries line and column.
    #[error("the policies do not parse: {0}")]
    Parse(String),
    /// The policies parse but fail strict validation against the schema (the validator's
    /// messages, one per line, each naming the policy by its @id).
    #[error("the policies do not validate against the schema: {0}")]
    Validation(String),
    /// A policy has no `@id`, a malformed one, or one used twice.
    #[error("{0}")]
    Id(String),
    /// Policy templates (`?principal`/`?resource` slots) are not used by sandlot.
    #[error("{0}")]
    Unsupported(String),
    /// The policy text is larger than the bound.
    #[error("the policy text is {size} bytes; at most {max} are accepted")]
    TooLarge { size: usize, max: usize },
    /// The schema does not parse, or does not declare what the server fills in.
    #[error("the policy schema {path} is not usable: {message}")]
    Schema { path: PathBuf, message: String },
    /// The policy set stored in the policy directory is refused (the server must not start
    /// with policies it cannot enforce).
    #[error("the policies in {path} are refused: {source}")]
    Stored {
        path: PathBuf,
        #[source]
        source: Box<PolicyError>,
    },
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl PolicyError {
    /// A stable code for API errors: `invalid_policy` for anything wrong with submitted policy
    /// text; `policy_schema`, `policy_stored` and `policy_io` for server-side problems.
    pub fn code(&self) -> &'static str {
        match self {
            PolicyError::Parse(_)
            | PolicyError::Validation(_)
            | PolicyError::Id(_)
            | PolicyError::Unsupported(_)
            | PolicyError::TooLarge { .. } => "invalid_policy",
            PolicyError::Schema { .. } => "policy_schema",
            PolicyError::Stored { .. } => "policy_stored",
            PolicyError::Io { .. } => "policy_io",
        }
    }

    /// True when the error is the submitter's (bad policy text), false for the server's.
    pub fn is_invalid_input(&self) -> bool {
        self.code() == "invalid_policy"
    }
}
