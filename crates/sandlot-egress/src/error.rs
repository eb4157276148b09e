//! The one error type of the crate.
//!
//! Refusals of a sandbox's request are not errors of this type: they are answers (403, 400,
//! 431, 502...) written to the sandbox and recorded as [`crate::EgressEvent`]s. This type is for
//! the server's own calls: a bad allowlist entry or secret given to the API, a listener that
//! could not be made.

use std::io;

/// What went wrong configuring or starting the egress proxy.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    /// An allowlist entry that is neither a domain, a `*.` wildcard, an IP nor a CIDR.
    #[error("network rule {entry:?} is not valid: {reason}")]
    BadRule { entry: String, reason: String },
    /// A secret whose header, value or hosts are not usable.
    #[error("secret {name:?} is not valid: {reason}")]
    BadSecret { name: String, reason: String },
    /// A `name=ip` entry of the hosts override map that does not parse.
    #[error("egress hosts entry {entry:?} is not valid: {reason}")]
    BadHostsEntry { entry: String, reason: String },
    /// The operator's extra roots for intercepted upstreams that could not be read.
    #[error("the egress extra roots file {path}: {reason}")]
    BadRoots { path: String, reason: String },
    /// Minting a sandbox's CA or a host certificate failed.
    #[error("{what}: {reason}")]
    Tls { what: String, reason: String },
    /// `attach` was called outside a tokio runtime.
    #[error("the egress proxy needs a tokio runtime: attach must be called from within one")]
    NoRuntime,
    /// Making or entering the sandbox's network namespace listener failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
}
