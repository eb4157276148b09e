//! API keys and tenants: the store holds them; a map in memory answers every request.
//!
//! A key is `sl_` + an 8-character public prefix + `_` + a 32-character secret, both lowercase
//! base32 (160 bits of secret). The prefix finds the record; the sha256 of the whole key is
//! compared in constant time. Keys carry their own entropy, so a fast hash is the right one
//! (a slow password hash protects low-entropy secrets, and would cost every request).

use crate::{now, TenancyError};
use sandlot_store::{KeyRecord, Store};
use sandlot_types::{
    ApiKeyInfo, CreateKey, CreateTenant, CreatedKey, Principal, Role, Tenant, TenantQuotas,
    DEFAULT_TENANT,
};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};
use subtle::ConstantTimeEq;

/// What every key starts with.
pub const KEY_PREFIX: &str = "sl_";
/// The bootstrap admin key's file in the data dir.
pub const BOOTSTRAP_KEY_FILE: &str = "api-key";

const PREFIX_LEN: usize = 8;
const SECRET_LEN: usize = 32;
const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// Tenants and keys, shared by every request.
#[derive(Clone)]
pub struct Keys {
    store: Arc<Store>,
    state: Arc<RwLock<State>>,
    /// Bumped at every revocation, so open streams learn of it at once ([`Keys::revoked`]).
    revocations: Arc<tokio::sync::watch::Sender<u64>>,
}

#[derive(Default)]
struct State {
    /// By public prefix.
    keys: HashMap<String, KeyRecord>,
    tenants: HashMap<String, Tenant>,
}

impl Keys {
    /// Loads every tenant and key from the store.
    pub fn load(store: Arc<Store>) -> Result<Self, TenancyError> {
        let mut state = State::default();
        for t in store.list_tenants()? {
            state.tenants.insert(t.name.clone(), t);
        }
        for k in store.list_keys()? {
            state.keys.insert(k.info.prefix.clone(), k);
        }
        Ok(Self {
            store,
            state: Arc::new(RwLock::new(state)),
            revocations: Arc::new(tokio::sync::watch::Sender::new(0)),
        })
    }

    /// Resolves once the key with id `key_id` is revoked (at once if it is already): what a
    /// stream opened with that key waits on, to end when the key stops being valid. A key id
    /// that names no stored key (the local principal, E2B's key) is never revoked here.
    pub fn revoked(&self, key_id: &str) -> impl std::future::Future<Output = ()> + Send + 'static {
        let keys = self.clone();
        let id = key_id.to_owned();
        let mut changes = self.revocations.subscribe();
        async move {
            loop {
                if keys.is_revoked(&id) {
                    return;
                }
                if changes.changed().await.is_err() {
                    return std::future::pending().await;
                }
            }
        }
    }

    fn is_revoked(&self, key_id: &str) -> bool {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        state
            .keys
            .values()
            .any(|k| k.info.id == key_id && k.info.revoked_at.is_some())
    }

    /// Local single-user mode: makes sure the tenant `default` exists and that
    /// `<data_dir>/api-key` holds a working admin key for it. Returns the key when it was
    /// created now (to print once), `None` when the file already held a valid one.
    pub fn bootstrap(&self, data_dir: &Path) -> Result<Option<String>, TenancyError> {
        if self.tenant(DEFAULT_TENANT).is_none() {
            self.put_tenant(
                DEFAULT_TENANT,
                CreateTenant {
                    plan: Some("local".into()),
                    ..Default::default()
                },
                true,
            )?;
        }
        let path = data_dir.join(BOOTSTRAP_KEY_FILE);
        if let Ok(text) = std::fs::read_to_string(&path) {
            if let Ok(p) = self.authenticate(text.trim()) {
                if p.role == Role::Admin {
                    return Ok(None);
                }
            }
        }
        let created = self.create_key(CreateKey {
            tenant: DEFAULT_TENANT.into(),
            role: Role::Admin,
            name: Some("bootstrap (local admin)".into()),
        })?;
        write_private(&path, &created.key).map_err(|source| TenancyError::KeyFile {
            op: "write",
            path: path.clone(),
            source,
        })?;
        Ok(Some(created.key))
    }

    /// The principal `key` stands for, or why it is refused.
    pub fn authenticate(&self, key: &str) -> Result<Principal, TenancyError> {
        let prefix = parse(key).ok_or(TenancyError::MalformedKey)?;
        let digest = sha256_hex(key);
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        let rec = state.keys.get(prefix).ok_or(TenancyError::UnknownKey)?;
        if !bool::from(rec.sha256.as_bytes().ct_eq(digest.as_bytes())) {
            return Err(TenancyError::UnknownKey);
        }
        if rec.info.revoked_at.is_some() {
            return Err(TenancyError::RevokedKey {
                prefix: display_prefix(&rec.info.prefix),
            });
        }
        let plan = state
            .tenants
            .get(&rec.info.tenant)
            .map(|t| t.plan.clone())
            .unwrap_or_default();
        Ok(Principal {
            key_id: rec.info.id.clone(),
            key_prefix: display_prefix(&rec.info.prefix),
            tenant: rec.info.tenant.clone(),
            role: rec.info.role,
            plan,
        })
    }

    /// The principal of the stored key with id `key_id`, or why it is refused (unknown or
    /// revoked): what a console session, which keeps the key's id and never the key, is
    /// checked against at every use.
    pub fn principal_by_id(&self, key_id: &str) -> Result<Principal, TenancyError> {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        let rec = state
            .keys
            .values()
            .find(|k| k.info.id == key_id)
            .ok_or(TenancyError::UnknownKey)?;
        if rec.info.revoked_at.is_some() {
            return Err(TenancyError::RevokedKey {
                prefix: display_prefix(&rec.info.prefix),
            });
        }
        let plan = state
            .tenants
            .get(&rec.info.tenant)
            .map(|t| t.plan.clone())
            .unwrap_or_default();
        Ok(Principal {
            key_id: rec.info.id.clone(),
            key_prefix: display_prefix(&rec.info.prefix),
            tenant: rec.info.tenant.clone(),
            role: rec.info.role,
            plan,
        })
    }

    /// Creates a key for an existing tenant; the response is the only place the key appears.
    pub fn create_key(&self, req: CreateKey) -> Result<CreatedKey, TenancyError> {
        if self.tenant(&req.tenant).is_none() {
            return Err(TenancyError::TenantNotFound { name: req.tenant });
        }
        if let Some(name) = &req.name {
            if name.len() > 128 || name.chars().any(char::is_control) {
                return Err(TenancyError::Invalid {
                    field: "name",
                    why: "at most 128 characters, no control characters".into(),
                });
            }
        }
        let prefix = random_chars(PREFIX_LEN);
        let key = format!("{KEY_PREFIX}{prefix}_{}", random_chars(SECRET_LEN));
        let info = ApiKeyInfo {
            id: format!("key_{}", random_chars(16)),
            prefix: prefix.clone(),
            tenant: req.tenant,
            role: req.role,
            name: req.name,
            created_at: now(),
            revoked_at: None,
        };
        let rec = KeyRecord {
            info,
            sha256: sha256_hex(&key),
        };
        self.store.insert_key(&rec)?;
        let mut shown = rec.info.clone();
        shown.prefix = display_prefix(&shown.prefix);
        self.write().keys.insert(prefix, rec);
        Ok(CreatedKey { key, info: shown })
    }

    /// Keys, oldest first; only `tenant`'s when given.
    pub fn list_keys(&self, tenant: Option<&str>) -> Vec<ApiKeyInfo> {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        let mut v: Vec<ApiKeyInfo> = state
            .keys
            .values()
            .filter(|k| tenant.is_none_or(|t| k.info.tenant == t))
            .map(|k| {
                let mut info = k.info.clone();
                info.prefix = display_prefix(&info.prefix);
                info
            })
            .collect();
        v.sort_by(|a, b| (&a.created_at, &a.id).cmp(&(&b.created_at, &b.id)));
        v
    }

    /// Revokes a key, in the store and for every request from now on.
    pub fn revoke_key(&self, id: &str) -> Result<ApiKeyInfo, TenancyError> {
        let rec = self
            .store
            .revoke_key(id, &now())?
            .ok_or_else(|| TenancyError::KeyNotFound { id: id.to_owned() })?;
        let mut info = rec.info.clone();
        self.write().keys.insert(rec.info.prefix.clone(), rec);
        self.revocations.send_modify(|n| *n += 1);
        info.prefix = display_prefix(&info.prefix);
        Ok(info)
    }

    /// A tenant, if it exists.
    pub fn tenant(&self, name: &str) -> Option<Tenant> {
        self.state
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .tenants
            .get(name)
            .cloned()
    }

    /// Every tenant, by name.
    pub fn tenants(&self) -> Vec<Tenant> {
        let mut v: Vec<Tenant> = self
            .state
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .tenants
            .values()
            .cloned()
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// Creates tenant `name` (`create`), or updates its plan and quotas (`!create`, which
    /// needs it to exist).
    pub fn put_tenant(
        &self,
        name: &str,
        req: CreateTenant,
        create: bool,
    ) -> Result<Tenant, TenancyError> {
        check_tenant_name(name)?;
        if let Some(plan) = &req.plan {
            check_word("plan", plan)?;
        }
        if let Some(q) = &req.quotas {
            check_quotas(q)?;
        }
        let existing = self.tenant(name);
        let t = match (existing, create) {
            (Some(_), true) => {
                return Err(TenancyError::TenantExists {
                    name: name.to_owned(),
                })
            }
            (None, false) => {
                return Err(TenancyError::TenantNotFound {
                    name: name.to_owned(),
                })
            }
            (None, true) => Tenant {
                name: name.to_owned(),
                plan: req.plan.unwrap_or_else(|| "free".into()),
                quotas: req.quotas.unwrap_or_default(),
                created_at: now(),
            },
            (Some(mut t), false) => {
                if let Some(plan) = req.plan {
                    t.plan = plan;
                }
                if let Some(q) = req.quotas {
                    t.quotas = q;
                }
                t
            }
        };
        self.store.upsert_tenant(&t)?;
        self.write().tenants.insert(t.name.clone(), t.clone());
        Ok(t)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The prefix of a well-formed key.
fn parse(key: &str) -> Option<&str> {
    let rest = key.strip_prefix(KEY_PREFIX)?;
    let (prefix, secret) = rest.split_once('_')?;
    let ok = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| ALPHABET.contains(&b));
    (ok(prefix, PREFIX_LEN) && ok(secret, SECRET_LEN)).then_some(prefix)
}

/// How a key is shown once its secret is gone: `sl_abcd2345`.
fn display_prefix(prefix: &str) -> String {
    format!("{KEY_PREFIX}{prefix}")
}

fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

fn random_chars(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).expect("the kernel's random source works");
    // 256 is a multiple of 32: no bias.
    bytes
        .iter()
        .map(|b| ALPHABET[(*b % 32) as usize] as char)
        .collect()
}

/// Whether `name` is a tenant name: `[a-z0-9][a-z0-9_-]{0,47}`.
pub fn valid_tenant_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 48
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

fn check_tenant_name(name: &str) -> Result<(), TenancyError> {
    if valid_tenant_name(name) {
        Ok(())
    } else {
        Err(TenancyError::Invalid {
            field: "name",
            why: "tenant names are [a-z0-9][a-z0-9_-]{0,47}".into(),
        })
    }
}

fn check_word(field: &'static str, s: &str) -> Result<(), TenancyError> {
    if !s.is_empty()
        && s.len() <= 48
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        Ok(())
    } else {
        Err(TenancyError::Invalid {
            field,
            why: "1-48 characters of [A-Za-z0-9_-]".into(),
        })
    }
}

fn check_quotas(q: &TenantQuotas) -> Result<(), TenancyError> {
    if let Some(r) = q.creates_per_second {
        if !(r.is_finite() && r > 0.0 && r <= 1e6) {
            return Err(TenancyError::Invalid {
                field: "quotas.creates_per_second",
                why: "a number above 0 and at most 1000000".into(),
            });
        }
    }
    if let Some(w) = q.wait_seconds {
        if !(w.is_finite() && (0.0..=300.0).contains(&w)) {
            return Err(TenancyError::Invalid {
                field: "quotas.wait_seconds",
                why: "between 0 and 300".into(),
            });
        }
    }
    Ok(())
}

/// Writes `text` to a new file only its owner can read, replacing `path` atomically.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> (tempfile::TempDir, Keys) {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&dir.path().join("db")).unwrap());
        (dir, Keys::load(store).unwrap())
    }

    #[test]
    fn bootstrap_creates_an_admin_key_once_and_reuses_it() {
        let (dir, k) = keys();
        let key = k.bootstrap(dir.path()).unwrap().expect("created");
        let p = k.authenticate(&key).unwrap();
        assert_eq!(
            (p.tenant.as_str(), p.role, p.plan.as_str()),
            ("default", Role::Admin, "local")
        );
        assert!(k.bootstrap(dir.path()).unwrap().is_none());
        let mode = std::fs::metadata(dir.path().join(BOOTSTRAP_KEY_FILE)).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(mode.permissions().mode() & 0o777, 0o600);
        // A reload from the store knows the key too.
        let again = Keys::load(k.store.clone()).unwrap();
        assert_eq!(again.authenticate(&key).unwrap().key_id, p.key_id);
    }

    #[test]
    fn wrong_malformed_and_revoked_keys_are_refused() {
        let (dir, k) = keys();
        k.bootstrap(dir.path()).unwrap();
        k.put_tenant("acme", CreateTenant::default(), true).unwrap();
        let created = k
            .create_key(CreateKey {
                tenant: "acme".into(),
                role: Role::Member,
                name: None,
            })
            .unwrap();
        assert_eq!(k.authenticate(&created.key).unwrap().tenant, "acme");
        // Same prefix, another secret.
        let mut forged = created.key.clone();
        let last = forged.pop().unwrap();
        forged.push(if last == 'a' { 'b' } else { 'a' });
        assert!(matches!(
            k.authenticate(&forged),
            Err(TenancyError::UnknownKey)
        ));
        for bad in [
            "",
            "sl_",
            "Bearer x",
            "sl_ABCDEFGH_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "sl_abcd_efg",
        ] {
            assert!(
                matches!(k.authenticate(bad), Err(TenancyError::MalformedKey)),
                "{bad}"
            );
        }
        k.revoke_key(&created.info.id).unwrap();
        assert!(matches!(
            k.authenticate(&created.key),
            Err(TenancyError::RevokedKey { .. })
        ));
        assert!(matches!(
            k.revoke_key("key_nope"),
            Err(TenancyError::KeyNotFound { .. })
        ));
    }

    #[test]
    fn tenants_are_validated() {
        let (_dir, k) = keys();
        assert!(k
            .put_tenant("Bad Name", CreateTenant::default(), true)
            .is_err());
        assert!(k.put_tenant("x", CreateTenant::default(), false).is_err());
        k.put_tenant("x", CreateTenant::default(), true).unwrap();
        assert!(matches!(
            k.put_tenant("x", CreateTenant::default(), true),
            Err(TenancyError::TenantExists { .. })
        ));
        let bad = CreateTenant {
            quotas: Some(TenantQuotas {
                creates_per_second: Some(f64::NAN),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(k.put_tenant("x", bad, false).is_err());
        assert_eq!(k.tenant("x").unwrap().plan, "free");
    }
}
