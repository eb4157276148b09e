//! Console sessions: a random 256-bit id (the cookie's value) → the id of the API key it
//! signed in with. The key's principal is looked up again at every use, exactly as a bearer
//! key is authenticated, so a revoked key (or a changed role or plan) takes effect at the
//! session's next request; the key itself is not kept at all once sign-in checked it (not in
//! the cookie, not in a page, not in memory, not in the store).
//!
//! Sessions survive a restart: each is kept in the store (`console_sessions`) under the
//! sha256 of its id, never the id itself, so reading the database does not let anyone act as
//! a signed-in person. The map in memory is keyed the same way. A session's last use is
//! written back at most every [`TOUCH_EVERY`], so after a restart it may count as idle for
//! up to that much longer than it was.
//!
//! Bounded three ways: a session ends after [`Limits::idle`] without use and
//! [`Limits::absolute`] after sign-in, one key holds at most [`Limits::per_key`] sessions (its
//! least recently used one ends for a new one), and the server holds at most
//! [`Limits::total`] (expired ones are swept first, from memory and from the store; past that
//! a sign-in is refused rather than ending someone else's session).

use sandlot_store::{SessionRecord, Store};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use subtle::ConstantTimeEq;

/// How stale a stored session's last use may get before it is written back.
pub const TOUCH_EVERY: Duration = Duration::from_secs(30);

/// How long sessions live and how many there may be.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub idle: Duration,
    pub absolute: Duration,
    pub per_key: usize,
    pub total: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            idle: Duration::from_secs(3600),
            absolute: Duration::from_secs(12 * 3600),
            per_key: 32,
            total: 10_000,
        }
    }
}

/// What a live session resolves to.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The id of the key it signed in with, whose principal the caller looks up at each use.
    pub key_id: String,
    /// The token unsafe requests must echo in `X-Sandlot-CSRF`.
    pub csrf: String,
}

/// A session just created: the cookie's value and its CSRF token.
#[derive(Debug, Clone)]
pub struct Created {
    pub id: String,
    pub csrf: String,
}

/// Why no session was created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

struct Session {
    key_id: String,
    csrf: String,
    /// Unix milliseconds.
    created: i64,
    last_used: i64,
    /// The last use the store has.
    stored_last_used: i64,
}

/// Every live session of this server.
pub struct Sessions {
    limits: Limits,
    /// By sha256 (hex) of the session id.
    by_hash: Mutex<HashMap<String, Session>>,
    store: Option<Arc<Store>>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// sha256 (hex) of a session id: what the map and the store are keyed by.
pub fn id_hash(id: &str) -> String {
    hex::encode(Sha256::digest(id.as_bytes()))
}

impl Sessions {
    /// Sessions kept in this process's memory only (tests).
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            by_hash: Mutex::new(HashMap::new()),
            store: None,
        }
    }

    /// Sessions kept in `store` too: the ones stored and still live are loaded (the expired
    /// ones swept), so a restart signs no one out.
    pub fn open(limits: Limits, store: Arc<Store>) -> Self {
        let now = now_ms();
        let mut map = HashMap::new();
        if let Err(e) = store.sweep_console_sessions(now, ms(limits.idle)) {
            tracing::warn!(error = %e, "could not sweep expired console sessions");
        }
        match store.list_console_sessions() {
            Ok(rows) => {
                for r in rows {
                    map.insert(
                        r.id_sha256,
                        Session {
                            key_id: r.key_id,
                            csrf: r.csrf,
                            created: r.created_ms,
                            last_used: r.last_ms,
                            stored_last_used: r.last_ms,
                        },
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not load the console sessions"),
        }
        Self {
            limits,
            by_hash: Mutex::new(map),
            store: Some(store),
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Opens a session for the key with id `key_id`.
    pub fn create(&self, key_id: &str) -> Result<Created, Full> {
        let now = now_ms();
        let mut map = self.by_hash.lock().unwrap_or_else(PoisonError::into_inner);
        let mut gone = Vec::new();
        let mine: Vec<(String, i64)> = map
            .iter()
            .filter(|(_, s)| bool::from(s.key_id.as_bytes().ct_eq(key_id.as_bytes())))
            .map(|(h, s)| (h.clone(), s.last_used))
            .collect();
        if mine.len() >= self.limits.per_key {
            if let Some((oldest, _)) = mine.iter().min_by_key(|(_, at)| *at) {
                map.remove(oldest);
                gone.push(oldest.clone());
            }
        }
        if map.len() >= self.limits.total {
            map.retain(|h, s| {
                let live = self.live(s, now);
                if !live {
                    gone.push(h.clone());
                }
                live
            });
            if map.len() >= self.limits.total {
                self.forget(&gone);
                return Err(Full);
            }
        }
        let created = Created {
            id: random_hex(),
            csrf: random_hex(),
        };
        let hash = id_hash(&created.id);
        let session = Session {
            key_id: key_id.to_owned(),
            csrf: created.csrf.clone(),
            created: now,
            last_used: now,
            stored_last_used: now,
        };
        if let Some(store) = &self.store {
            let row = SessionRecord {
                id_sha256: hash.clone(),
                key_id: session.key_id.clone(),
                csrf: session.csrf.clone(),
                created_ms: now,
                last_ms: now,
                expires_ms: now.saturating_add(ms(self.limits.absolute)),
            };
            if let Err(e) = store.insert_console_session(&row) {
                // Signed in for this process's life only: said, not refused.
                tracing::warn!(error = %e, "could not store a console session");
            }
        }
        map.insert(hash, session);
        drop(map);
        self.forget(&gone);
        Ok(created)
    }

    /// The session `id` names, if it is live (and marks it used); an expired one is removed.
    pub fn resolve(&self, id: &str) -> Option<Resolved> {
        if !is_id(id) {
            return None;
        }
        let hash = id_hash(id);
        let now = now_ms();
        let mut map = self.by_hash.lock().unwrap_or_else(PoisonError::into_inner);
        let s = map.get_mut(&hash)?;
        if !self.live(s, now) {
            map.remove(&hash);
            drop(map);
            self.forget(&[hash]);
            return None;
        }
        s.last_used = now;
        let touch = now - s.stored_last_used >= ms(TOUCH_EVERY);
        if touch {
            s.stored_last_used = now;
        }
        let resolved = Resolved {
            key_id: s.key_id.clone(),
            csrf: s.csrf.clone(),
        };
        drop(map);
        if let (true, Some(store)) = (touch, &self.store) {
            if let Err(e) = store.touch_console_session(&hash, now) {
                tracing::warn!(error = %e, "could not store a console session's last use");
            }
        }
        Some(resolved)
    }

    /// Ends session `id` (sign-out, or its key found revoked).
    pub fn remove(&self, id: &str) {
        let hash = id_hash(id);
        let mut map = self.by_hash.lock().unwrap_or_else(PoisonError::into_inner);
        map.remove(&hash);
        drop(map);
        self.forget(&[hash]);
    }

    /// How many sessions are held (live or not yet swept).
    pub fn len(&self) -> usize {
        self.by_hash
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes ended sessions from the store.
    fn forget(&self, hashes: &[String]) {
        if let (false, Some(store)) = (hashes.is_empty(), &self.store) {
            if let Err(e) = store.delete_console_sessions(hashes) {
                tracing::warn!(error = %e, "could not remove ended console sessions");
            }
        }
    }

    fn live(&self, s: &Session, now: i64) -> bool {
        now - s.last_used < ms(self.limits.idle) && now - s.created < ms(self.limits.absolute)
    }
}

/// Constant-time equality of two tokens (a CSRF token against the one sent).
pub fn same_token(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// 256 random bits from the kernel, as 64 lowercase hex digits.
fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the kernel's random source works");
    hex::encode(bytes)
}

/// What a session id looks like: 64 lowercase hex digits (anything else is not looked up).
fn is_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(per_key: usize, total: usize) -> Limits {
        Limits {
            per_key,
            total,
            ..Limits::default()
        }
    }

    #[test]
    fn ids_and_tokens_are_random_256_bits() {
        let s = Sessions::new(Limits::default());
        let a = s.create("k").unwrap();
        let b = s.create("k").unwrap();
        assert_eq!(a.id.len(), 64);
        assert_ne!(a.id, b.id);
        assert_ne!(a.csrf, b.csrf);
        assert_ne!(a.id, a.csrf);
        assert_eq!(s.resolve(&a.id).unwrap().key_id, "k");
        assert!(s.resolve("nope").is_none());
        assert!(s.resolve(&a.csrf).is_none());
    }

    #[test]
    fn a_key_holds_at_most_per_key_sessions_and_its_oldest_goes() {
        let s = Sessions::new(limits(2, 100));
        let a = s.create("k").unwrap();
        std::thread::sleep(Duration::from_millis(2));
        let b = s.create("k").unwrap();
        std::thread::sleep(Duration::from_millis(2));
        let other = s.create("other").unwrap();
        let c = s.create("k").unwrap();
        assert!(
            s.resolve(&a.id).is_none(),
            "the oldest session of the key ends"
        );
        assert!(s.resolve(&b.id).is_some());
        assert!(s.resolve(&c.id).is_some());
        assert!(
            s.resolve(&other.id).is_some(),
            "another key's session stays"
        );
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn the_total_is_bounded_and_a_full_table_refuses_rather_than_evicts() {
        let s = Sessions::new(limits(10, 3));
        let held: Vec<_> = (0..3)
            .map(|i| s.create(&format!("k{i}")).unwrap())
            .collect();
        assert_eq!(s.create("k9").unwrap_err(), Full);
        for h in &held {
            assert!(s.resolve(&h.id).is_some());
        }
        s.remove(&held[0].id);
        assert!(s.create("k9").is_ok());
    }

    #[test]
    fn idle_and_absolute_expiry_end_a_session() {
        let s = Sessions::new(Limits {
            idle: Duration::from_millis(30),
            ..Limits::default()
        });
        let a = s.create("k").unwrap();
        std::thread::sleep(Duration::from_millis(40));
        assert!(s.resolve(&a.id).is_none());
        assert!(s.is_empty(), "an expired session is removed when seen");

        let s = Sessions::new(Limits {
            absolute: Duration::from_millis(30),
            ..Limits::default()
        });
        let a = s.create("k").unwrap();
        for _ in 0..4 {
            std::thread::sleep(Duration::from_millis(10));
            let _ = s.resolve(&a.id);
        }
        assert!(
            s.resolve(&a.id).is_none(),
            "use does not extend past the absolute limit"
        );
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same_token("abc", "abc"));
        assert!(!same_token("abc", "abd"));
        assert!(!same_token("abc", "ab"));
        assert!(!same_token("", "a"));
    }

    #[test]
    fn stored_sessions_survive_a_new_process_and_hold_only_hashes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let store = Arc::new(Store::open(&path).unwrap());
        let s = Sessions::open(Limits::default(), store.clone());
        let a = s.create("key_a").unwrap();
        let b = s.create("key_b").unwrap();
        s.remove(&b.id);
        let rows = store.list_console_sessions().unwrap();
        assert_eq!(rows.len(), 1, "a signed-out session leaves the store");
        assert_eq!(rows[0].id_sha256, id_hash(&a.id));
        assert_ne!(rows[0].id_sha256, a.id, "the id itself is never stored");
        drop(s);
        drop(store);
        // A new process over the same file.
        let store = Arc::new(Store::open(&path).unwrap());
        let s = Sessions::open(Limits::default(), store.clone());
        let r = s.resolve(&a.id).expect("the session survives");
        assert_eq!(
            (r.key_id.as_str(), r.csrf.as_str()),
            ("key_a", a.csrf.as_str())
        );
        assert!(s.resolve(&b.id).is_none());
        // An expired one is swept at load.
        drop(s);
        let s = Sessions::open(
            Limits {
                idle: Duration::from_millis(1),
                ..Limits::default()
            },
            store.clone(),
        );
        std::thread::sleep(Duration::from_millis(5));
        assert!(s.is_empty() || s.resolve(&a.id).is_none());
        let s2 = Sessions::open(
            Limits {
                idle: Duration::from_millis(1),
                ..Limits::default()
            },
            store.clone(),
        );
        assert!(s2.is_empty(), "expired rows are swept when loaded");
        assert!(store.list_console_sessions().unwrap().is_empty());
    }

    #[test]
    fn an_evicted_or_expired_session_leaves_the_store_too() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&dir.path().join("s.db")).unwrap());
        let s = Sessions::open(limits(1, 100), store.clone());
        let a = s.create("k").unwrap();
        std::thread::sleep(Duration::from_millis(2));
        let b = s.create("k").unwrap();
        let rows = store.list_console_sessions().unwrap();
        assert_eq!(
            rows.len(),
            1,
            "the key's older session is gone from the store"
        );
        assert_eq!(rows[0].id_sha256, id_hash(&b.id));
        assert!(s.resolve(&a.id).is_none());

        let s = Sessions::open(
            Limits {
                idle: Duration::from_millis(20),
                ..Limits::default()
            },
            store.clone(),
        );
        std::thread::sleep(Duration::from_millis(30));
        assert!(s.resolve(&b.id).is_none());
        assert!(
            store.list_console_sessions().unwrap().is_empty(),
            "an expired session found at use is removed from the store"
        );
    }
}
