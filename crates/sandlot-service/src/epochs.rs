//! Sandboxes' credential epochs: the number every capability the server hands out for a
//! sandbox without storing it (port URLs, E2B's envd and traffic tokens) is MAC'd with.
//! `POST /v1/sandboxes/{id}/ports/rotate` moves it on, which ends every earlier one of them at
//! once; the store keeps it (`port_epochs`), so that holds across restarts. One copy per
//! server, shared by `/v1` and the E2B layer, so a rotation by either is seen by both.

use sandlot_store::{Store, StoreError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Most epochs kept in memory.
const CACHE: usize = 4096;

/// Sandboxes' epochs, as the store has them (cached).
pub struct Epochs {
    store: Arc<Store>,
    cache: Mutex<HashMap<String, u64>>,
}

impl Epochs {
    pub fn new(store: Arc<Store>) -> Self {
        Self {
            store,
            cache: Mutex::default(),
        }
    }

    fn cache(&self) -> MutexGuard<'_, HashMap<String, u64>> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sandbox `id`'s epoch: 0 until first rotated; [`u64::MAX`] when the store cannot answer,
    /// which callers treat as matching no token.
    pub fn get(&self, id: &str) -> u64 {
        if let Some(e) = self.cache().get(id) {
            return *e;
        }
        match self.store.port_epoch(id) {
            Ok(e) => {
                let mut cache = self.cache();
                // Ended sandboxes' entries would stay forever: the store has every epoch, so
                // the cache can start over now and then.
                if cache.len() >= CACHE {
                    cache.clear();
                }
                cache.insert(id.to_owned(), e);
                e
            }
            Err(_) => u64::MAX,
        }
    }

    /// Moves sandbox `id` to its next epoch (stored before it is used); returns it.
    pub fn rotate(&self, id: &str) -> Result<u64, StoreError> {
        let epoch = self
            .store
            .rotate_port_epoch(id, &sandlot_runtime::now_rfc3339())?;
        self.cache().insert(id.to_owned(), epoch);
        Ok(epoch)
    }
}
