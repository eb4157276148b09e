//! Who may call sandlot and how much they may hold: tenants, their API keys and their quotas.
//!
//! - [`Keys`]: API keys, `sl_<prefix>_<secret>`, stored as the sha256 of the whole key (never
//!   the key), shown once at creation. Every request is checked against an in-memory map kept
//!   in step with the store, so a revoked key is refused from the next request on.
//! - Tenants own sandboxes, snapshots, volumes and templates; each has a plan (what policies
//!   test) and [`sandlot_types::TenantQuotas`].
//! - [`Quotas`]: admission of sandbox creations against a tenant's quotas, with a bounded,
//!   first-come-first-served wait queue (see `quotas.rs`), and the caps on each tenant's share
//!   of what all tenants draw on (see `shares.rs`).
//!
//! Local single-user mode: on the first start the server creates the tenant `default` (plan
//! `local`, no quotas) and an admin key for it, prints it once and keeps it in
//! `<data-dir>/api-key` (mode 0600) so local clients (`sandlot run`, the SDK on loopback) find
//! it without configuration.

mod error;
mod keys;
mod quotas;
mod shares;

pub use error::QuotaError;
pub use keys::{valid_tenant_name, Keys, BOOTSTRAP_KEY_FILE, KEY_PREFIX};
pub use quotas::{Admission, Quotas, Want};
pub use shares::{check as check_share, Claim, Share, Slot};

/// Every way a tenancy operation fails.
#[derive(Debug, thiserror::Error)]
pub enum TenancyError {
    #[error("missing API key: send `Authorization: Bearer <key>`")]
    MissingKey,
    #[error("malformed API key: keys look like `sl_<8 characters>_<32 characters>`")]
    MalformedKey,
    #[error("unknown API key")]
    UnknownKey,
    #[error("the API key {prefix} was revoked")]
    RevokedKey { prefix: String },
    #[error("no tenant named {name:?}")]
    TenantNotFound { name: String },
    #[error("no API key with id {id:?}")]
    KeyNotFound { id: String },
    #[error("a tenant named {name:?} exists")]
    TenantExists { name: String },
    #[error("invalid {field}: {why}")]
    Invalid { field: &'static str, why: String },
    #[error("the store failed")]
    Store(#[from] sandlot_store::StoreError),
    #[error("cannot {op} the key file {}", path.display())]
    KeyFile {
        op: &'static str,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// RFC 3339 UTC with microseconds, as the store orders by.
pub(crate) fn now() -> String {
    let t = time::OffsetDateTime::now_utc();
    let fmt = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z"
    );
    t.format(&fmt).expect("a UTC time formats")
}
