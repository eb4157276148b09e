//! A watch on the key a request was authenticated with: what a key opened (a stream, a
//! WebSocket relayed into a sandbox) ends when the key is revoked, on every protocol.

use sandlot_tenancy::Keys;
use std::future::Future;

/// The key a request was authenticated with, to learn of its revocation.
#[derive(Clone)]
pub struct KeyWatch {
    keys: Keys,
    key_id: String,
}

impl KeyWatch {
    pub fn new(keys: Keys, key_id: &str) -> Self {
        Self {
            keys,
            key_id: key_id.to_owned(),
        }
    }

    /// Resolves once the key is revoked.
    pub fn revoked(&self) -> impl Future<Output = ()> + Send + 'static {
        self.keys.revoked(&self.key_id)
    }
}
