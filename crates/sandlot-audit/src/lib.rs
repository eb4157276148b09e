//! sandlot's audit log: an append-only, hash-chained record of every action, with signed
//! Merkle checkpoints, in `<data-dir>/audit/`.
//!
//! ```text
//! audit/
//!   seg-00000001.jsonl     records, one canonical JSON line each (see `record`)
//!   seg-00000002.jsonl     a new segment past 64 MiB or at a new UTC day, opened by a
//!                          checkpoint signed at its offset 0 (the end of the one before)
//!   checkpoints.jsonl      one line per signed checkpoint: the C2SP note and resume hints
//!   boundary.json          after `archive`: the signed checkpoint the records here start at
//!   signing.key  (0600)    the Ed25519 key, Go `sumdb/note` text form
//!   verifier.key           its public verifier key, `<origin>+<id>+<key>`
//!   lock                   held (flock) by the process that appends
//!   quarantine/            what `seal` cut out of the chain, kept as evidence
//! ```
//!
//! Every record carries the hash of the one before (`prev`) and its own (`hash`); the records'
//! lines are the leaves of an RFC 6962 Merkle tree whose root is signed every N records or T
//! seconds and at close ([`log::AuditLog`]). [`verify::verify`] proves the chain and every
//! checkpoint and names the first bad record (walking the [`chain`]); [`seal::seal`] is the operator's answer to a
//! corrupt log: the bad part is moved to `quarantine/` and an `audit.sealed` record links the
//! chain over it. [`archive`] moves sealed segments out with the chain provable across the
//! cut; [`refusals`] counts unauthenticated refusals so that no one can flood the log.

pub mod archive;
pub mod chain;
mod files;
pub mod log;
pub mod merkle;
pub mod note;
pub mod read;
pub mod record;
pub mod refusals;
pub mod seal;
pub mod verify;

pub use archive::{verify_archive, ArchiveReport};
pub use chain::{Bad, Failure};
pub use log::{Admission, AuditLog, Config, Status};
pub use read::{export, read_records, Query};
pub use record::{Entry, Record};
pub use refusals::Refusals;
pub use seal::{seal, SealReport};
pub use verify::{verify, VerifyReport};

/// Every way the audit log fails.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The log cannot append (its disk is full, a write failed): actions must be refused.
    #[error("the audit log cannot record: {0}")]
    Unavailable(String),
    /// The log is corrupt at `0`: nothing is appended until an operator seals it.
    #[error("the audit log is corrupt: {0}")]
    Corrupt(Bad),
    #[error("the audit log is in use by another process ({0})")]
    Locked(String),
    #[error("the audit key: {0}")]
    Key(String),
    #[error("{0}")]
    Invalid(String),
}

impl AuditError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            what: what.into(),
            source,
        }
    }
}

/// Now as RFC 3339 UTC with microseconds (the format the rest of sandlot writes).
pub fn now_rfc3339() -> String {
    let t = time::OffsetDateTime::now_utc();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.microsecond()
    )
}
