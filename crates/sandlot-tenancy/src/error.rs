//! Why a creation or a share was refused: the one error of the quotas (`quotas.rs`) and the
//! fair shares (`shares.rs`), below both.

/// Why a creation was not admitted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QuotaError {
    /// The quota stayed full for the whole wait (or the line was full).
    #[error("{quota} quota of tenant {tenant} is full ({detail}); retry in {retry_after_secs} s")]
    Exceeded {
        tenant: String,
        quota: &'static str,
        detail: String,
        retry_after_secs: u64,
    },
    /// The request alone is larger than the quota: waiting cannot help.
    #[error("the request needs more than tenant {tenant}'s whole {quota} quota ({detail})")]
    TooLarge {
        tenant: String,
        quota: &'static str,
        detail: String,
    },
    /// A share (`shares.rs`) is at its cap: another one needs one of these deleted first.
    #[error(
        "the {quota} quota of tenant {tenant} is full: it holds {held}{unit} of {limit}{unit}"
    )]
    Full {
        tenant: String,
        quota: &'static str,
        limit: u64,
        held: u64,
        unit: &'static str,
    },
}
