//! Governance: who may do what, for every protocol. API keys and tenants ([`Keys`]), quotas
//! ([`Quotas`]), the policy set in force and its decision journal, and the sandboxes'
//! credentials (port URLs' tokens, E2B's tokens through [`crate::epochs`]).
//!
//! Nothing here knows HTTP: the REST, E2B and MCP adapters authenticate a request their own
//! way, then ask the same [`Governance`] for the same decisions.

use sandlot_store::{Journal, Store};
use sandlot_tenancy::{Keys, QuotaError, Quotas, TenancyError, Want};
use sandlot_types::{ApiError, ErrorCode, Principal, Role, DEFAULT_TENANT};
use std::sync::Arc;

/// Everything the edge needs to decide who may do what.
pub struct Governance {
    pub keys: Keys,
    pub quotas: Quotas,
    pub store: Arc<Store>,
    pub journal: Journal,
    /// The policy set in force, decided at every gate (`gates.rs`).
    pub policy: sandlot_policy::PolicyEngine,
    /// Actions the policy held for a person's approval (`reviews.rs`).
    pub reviews: crate::reviews::Reviews,
    /// Keys port tokens (see [`Governance::port_token`]).
    port_secret: [u8; 32],
    /// How long a port URL handed out stays valid (none: until rotated).
    port_url_ttl: Option<std::time::Duration>,
    /// Sandboxes' credential epochs (port URLs and E2B's tokens), as the store has them.
    epochs: Arc<crate::epochs::Epochs>,
    /// Where output withheld for a person's review is kept until released or dropped
    /// (`held_output.rs`); none: nothing is kept (a held output stays withheld).
    pub(crate) held_output_dir: Option<std::path::PathBuf>,
    /// Executions whose output a decision held for review withheld, waiting for their end
    /// (`held_output.rs`).
    pub(crate) held_outputs: crate::pending_output::Pending,
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Governance {
    /// Loads tenants and keys from `store`; `port_secret` keys the sandboxes' port tokens
    /// (kept in the data dir so they survive restarts).
    pub fn new(
        store: Arc<Store>,
        policy: sandlot_policy::PolicyEngine,
        port_secret: [u8; 32],
    ) -> Result<Self, TenancyError> {
        let journal = Journal::start(store.clone());
        // The set the server starts with is the first of the history (or the newest again:
        // recorded only when it differs from the last one recorded).
        if let Err(e) = store.record_policy_version(
            &policy.version(),
            &policy.text(),
            "startup",
            &sandlot_runtime::now_rfc3339(),
        ) {
            tracing::warn!(error = %e, "could not record the policy set in force in its history");
        }
        Ok(Self {
            keys: Keys::load(store.clone())?,
            quotas: Quotas::default(),
            reviews: crate::reviews::Reviews::new(store.clone(), journal.clone()),
            journal,
            epochs: Arc::new(crate::epochs::Epochs::new(store.clone())),
            store,
            policy,
            port_secret,
            port_url_ttl: None,
            held_output_dir: None,
            held_outputs: Default::default(),
        })
    }

    /// Puts `text` in force (validated exactly as [`sandlot_policy::PolicyEngine::replace`]
    /// does) and keeps it in the policy history, with who put it there. A refused set changes
    /// nothing and is not recorded.
    pub fn replace_policy(
        &self,
        text: &str,
        key_prefix: &str,
    ) -> Result<sandlot_policy::PolicyInfo, sandlot_policy::PolicyError> {
        let info = self.policy.replace(text)?;
        if let Err(e) = self.store.record_policy_version(
            &info.version,
            text,
            key_prefix,
            &sandlot_runtime::now_rfc3339(),
        ) {
            // The set is in force (its file written); the history misses it, which is said.
            tracing::warn!(error = %e, version = %info.version, "could not record a policy version");
        }
        Ok(info)
    }

    /// "What if": how the set in force, or `draft` (validated exactly as a `PUT` would be),
    /// decides `query`, without acting and without journaling it as a decision: nothing is
    /// held, run or recorded, and the answer is only returned to the caller.
    pub fn what_if(
        &self,
        query: &sandlot_policy::Query,
        draft: Option<&str>,
    ) -> Result<sandlot_policy::Decision, sandlot_policy::PolicyError> {
        match draft {
            Some(text) => Ok(self.policy.draft(text)?.decide(query)),
            None => Ok(self.policy.decide(query)),
        }
    }

    /// The capability URL token of sandbox `id`'s exposed ports, for whoever holds it (a
    /// browser given the URL): an HMAC, so nothing stored, and code inside the sandbox that
    /// learns its own token gains nothing it did not have.
    ///
    /// `<id>.<epoch>-<expiry>.<mac>`, the MAC covering the id, the sandbox's epoch (moved on by
    /// [`Governance::rotate_port_token`], which ends every earlier token) and the expiry (unix
    /// seconds, `now + port_url_ttl`; 0 without a TTL). A sandbox never rotated on a server
    /// without a TTL keeps the older `<id>.<mac>` form, so URLs handed out before stay valid.
    pub fn port_token(&self, id: &str) -> String {
        let epoch = self.port_epoch(id);
        let expiry = self
            .port_url_ttl
            .map(|ttl| unix_now().saturating_add(ttl.as_secs()))
            .unwrap_or(0);
        if epoch == 0 && expiry == 0 {
            return format!("{id}.{}", self.port_mac(id, None));
        }
        format!(
            "{id}.{epoch}-{expiry}.{}",
            self.port_mac(id, Some((epoch, expiry)))
        )
    }

    /// When a token made now expires (RFC 3339), if port URLs expire.
    pub fn port_token_expiry(&self) -> Option<String> {
        let ttl = self.port_url_ttl?;
        let at = time::OffsetDateTime::now_utc() + ttl;
        at.format(&time::format_description::well_known::Rfc3339)
            .ok()
    }

    fn port_mac(&self, id: &str, epoch_expiry: Option<(u64, u64)>) -> String {
        use hmac::Mac;
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&self.port_secret)
            .expect("HMAC takes keys of any length");
        mac.update(b"ports:");
        mac.update(id.as_bytes());
        if let Some((epoch, expiry)) = epoch_expiry {
            mac.update(format!("\0{epoch}\0{expiry}").as_bytes());
        }
        hex::encode(&mac.finalize().into_bytes()[..16])
    }

    /// The sandbox a port token opens, if it is genuine, of the sandbox's current epoch and
    /// not expired (a token without an expiry is refused once port URLs expire).
    pub fn sandbox_of_port_token(&self, token: &str) -> Option<String> {
        use subtle::ConstantTimeEq;
        let (rest, mac) = token.rsplit_once('.')?;
        let parsed = rest.rsplit_once('.').and_then(|(id, middle)| {
            let (epoch, expiry) = middle.split_once('-')?;
            Some((id, epoch.parse::<u64>().ok()?, expiry.parse::<u64>().ok()?))
        });
        let (id, want, epoch_expiry) = match parsed {
            Some((id, epoch, expiry)) => (
                id,
                self.port_mac(id, Some((epoch, expiry))),
                Some((epoch, expiry)),
            ),
            None => (rest, self.port_mac(rest, None), None),
        };
        if !bool::from(want.as_bytes().ct_eq(mac.as_bytes())) {
            return None;
        }
        let (epoch, expiry) = epoch_expiry.unwrap_or((0, 0));
        let expired = match (self.port_url_ttl, expiry) {
            (Some(_), 0) => true,
            (_, 0) => false,
            (_, at) => unix_now() > at,
        };
        // `u64::MAX` is the answer of a store that cannot say: it matches nothing.
        (!expired && epoch != u64::MAX && epoch == self.port_epoch(id)).then(|| id.to_owned())
    }

    /// Ends every port URL of sandbox `id` handed out so far, and every E2B token (the
    /// epoch is the sandbox's, see [`crate::epochs`]); returns the new port token.
    pub fn rotate_port_token(&self, id: &str) -> Result<String, sandlot_store::StoreError> {
        self.epochs.rotate(id)?;
        Ok(self.port_token(id))
    }

    /// Sandbox `id`'s epoch (a store that cannot answer opens nothing rotated).
    fn port_epoch(&self, id: &str) -> u64 {
        self.epochs.get(id)
    }

    /// The sandboxes' credential epochs, for the other protocols' capabilities (E2B's tokens).
    pub fn epochs(&self) -> &Arc<crate::epochs::Epochs> {
        &self.epochs
    }

    /// Port URLs expire this long after they are handed out (`SANDLOT_PORT_URL_TTL`).
    /// Keeps output withheld for review under `dir` (created when needed).
    pub fn with_held_output_dir(mut self, dir: std::path::PathBuf) -> Self {
        self.held_output_dir = Some(dir);
        self
    }

    pub fn with_port_url_ttl(mut self, ttl: Option<std::time::Duration>) -> Self {
        self.port_url_ttl = ttl.filter(|t| !t.is_zero());
        self
    }

    /// `s` with its port token, for its tenant's eyes.
    pub fn with_port_token(&self, mut s: sandlot_types::Sandbox) -> sandlot_types::Sandbox {
        if !s.ports.is_empty() || s.all_ports {
            s.port_token = Some(self.port_token(&s.id));
        }
        s
    }
}

/// Who requests act as when the server runs without keys.
pub fn local_principal() -> Principal {
    Principal {
        key_id: "local".into(),
        key_prefix: "local".into(),
        tenant: DEFAULT_TENANT.into(),
        role: Role::Admin,
        plan: "local".into(),
    }
}

pub use crate::error::short;

pub fn sandbox_not_found(id: &str) -> ApiError {
    ApiError::new(
        ErrorCode::SandboxNotFound,
        format!("no sandbox {}", short(id)),
    )
}

/// `limits` with what it leaves out taken from `template`'s: the limits the runtime will
/// give the sandbox (it fills a request's missing limits from its template). Quota admission
/// and the policy's creation context must see these, not the request's alone: a template
/// with `memory_mb: 8192` once ran sandboxes admitted (and decided) as the server's default.
pub fn fill_template_limits(limits: &mut sandlot_types::Limits, template: &sandlot_types::Limits) {
    limits.memory_mb = limits.memory_mb.or(template.memory_mb);
    limits.cpu_millis = limits.cpu_millis.or(template.cpu_millis);
    limits.pids = limits.pids.or(template.pids);
    limits.disk_mb = limits.disk_mb.or(template.disk_mb);
}

impl Governance {
    /// Admits a creation of `count` sandboxes of `limits` for `who`'s tenant (for every
    /// interface), waiting in its line while its quotas are full; `usage` reads what a
    /// tenant's sandboxes hold now (`Runtime::tenant_usage`). Hold the admission until the
    /// sandboxes exist (or the creation failed).
    pub async fn admit_for(
        &self,
        usage: impl Fn(&str) -> Want + Send + Sync + 'static,
        who: &Principal,
        limits: sandlot_types::EffectiveLimits,
        count: u64,
    ) -> Result<sandlot_tenancy::Admission, sandlot_types::ApiError> {
        let Some(tenant) = self.keys.tenant(&who.tenant) else {
            return Err(sandlot_types::ApiError::new(
                ErrorCode::TenantNotFound,
                format!("no tenant {}", who.tenant),
            ));
        };
        let want = Want {
            sandboxes: count,
            cpu_millis: limits.cpu_millis * count,
            memory_mb: limits.memory_mb * count,
        };
        let name = tenant.name.clone();
        self.quotas
            .admit(&tenant, want, move || usage(&name))
            .await
            .map_err(|e| match e {
                // Waiting cannot help: not a 429 a client would retry.
                QuotaError::TooLarge { .. } => {
                    sandlot_types::ApiError::new(ErrorCode::InvalidArgument, e.to_string())
                }
                QuotaError::Exceeded { .. } | QuotaError::Full { .. } => {
                    sandlot_types::ApiError::new(ErrorCode::TenantQuotaExceeded, e.to_string())
                }
            })
    }
}

/// A tenancy failure as every protocol reports it.
pub fn tenancy_error(e: TenancyError) -> ApiError {
    let code = match &e {
        TenancyError::MissingKey
        | TenancyError::MalformedKey
        | TenancyError::UnknownKey
        | TenancyError::RevokedKey { .. } => ErrorCode::Unauthenticated,
        TenancyError::TenantNotFound { .. } => ErrorCode::TenantNotFound,
        TenancyError::KeyNotFound { .. } => ErrorCode::KeyNotFound,
        TenancyError::TenantExists { .. } => ErrorCode::NameTaken,
        TenancyError::Invalid { .. } => ErrorCode::InvalidArgument,
        TenancyError::Store(_) | TenancyError::KeyFile { .. } => {
            return ApiError::new(ErrorCode::Internal, format!("{e}: {}", source_chain(&e)))
        }
    };
    ApiError::new(code, e.to_string())
}

fn source_chain(e: &dyn std::error::Error) -> String {
    let mut out = Vec::new();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push(s.to_string());
        cur = s.source();
    }
    out.join(": ")
}
