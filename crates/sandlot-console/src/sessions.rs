//! Console sessions: a random 256-bit id (the cookie's value) → the API key it signed in with,
//! kept in this process's memory only. The key is authenticated again at every use, exactly as
//! a bearer key is, so a revoked key (or a changed role or plan) takes effect at the session's
//! next request; the key itself never leaves the server (not in the cookie, not in a page).
//!
//! Bounded three ways: a session ends after [`Limits::idle`] without use and
//! [`Limits::absolute`] after sign-in, one key holds at most [`Limits::per_key`] sessions (its
//! least recently used one ends for a new one), and the server holds at most
//! [`Limits::total`] (expired ones are swept first; past that a sign-in is refused rather than
//! ending someone else's session).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

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
    /// The API key it signed in with, authenticated again by the caller at each use.
    pub key: String,
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
    key: String,
    csrf: String,
    created: Instant,
    last_used: Instant,
}

/// Every live session of this server.
pub struct Sessions {
    limits: Limits,
    by_id: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            by_id: Mutex::new(HashMap::new()),
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Opens a session for `key`.
    pub fn create(&self, key: &str) -> Result<Created, Full> {
        let now = Instant::now();
        let mut map = self.by_id.lock().unwrap_or_else(PoisonError::into_inner);
        let mine: Vec<(String, Instant)> = map
            .iter()
            .filter(|(_, s)| bool::from(s.key.as_bytes().ct_eq(key.as_bytes())))
            .map(|(id, s)| (id.clone(), s.last_used))
            .collect();
        if mine.len() >= self.limits.per_key {
            if let Some((oldest, _)) = mine.iter().min_by_key(|(_, at)| *at) {
                map.remove(oldest);
            }
        }
        if map.len() >= self.limits.total {
            map.retain(|_, s| self.live(s, now));
            if map.len() >= self.limits.total {
                return Err(Full);
            }
        }
        let created = Created {
            id: random_hex(),
            csrf: random_hex(),
        };
        map.insert(
            created.id.clone(),
            Session {
                key: key.to_owned(),
                csrf: created.csrf.clone(),
                created: now,
                last_used: now,
            },
        );
        Ok(created)
    }

    /// The session `id` names, if it is live (and marks it used); an expired one is removed.
    pub fn resolve(&self, id: &str) -> Option<Resolved> {
        if !is_id(id) {
            return None;
        }
        let now = Instant::now();
        let mut map = self.by_id.lock().unwrap_or_else(PoisonError::into_inner);
        let s = map.get_mut(id)?;
        if !self.live(s, now) {
            map.remove(id);
            return None;
        }
        s.last_used = now;
        Some(Resolved {
            key: s.key.clone(),
            csrf: s.csrf.clone(),
        })
    }

    /// Ends session `id` (sign-out, or its key found revoked).
    pub fn remove(&self, id: &str) {
        let mut map = self.by_id.lock().unwrap_or_else(PoisonError::into_inner);
        map.remove(id);
    }

    /// How many sessions are held (live or not yet swept).
    pub fn len(&self) -> usize {
        self.by_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn live(&self, s: &Session, now: Instant) -> bool {
        now.duration_since(s.last_used) < self.limits.idle
            && now.duration_since(s.created) < self.limits.absolute
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
        assert_eq!(s.resolve(&a.id).unwrap().key, "k");
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
}
