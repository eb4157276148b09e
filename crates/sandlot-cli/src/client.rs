//! The client of the commands that talk to a running server (`sandlot template`, `snapshots`,
//! `keys`, `audit seal`, `run --url`, `agent`, `bundle`, `replay`, `lineage`):
//! [`sandlot_client::Client`], sending the key this user has for the URL
//! ([`config::api_key_for`](crate::config::api_key_for)).

use sandlot_client::Client;
use std::time::Duration;

/// Bound of each call of the CLI's commands (a template build's polls, key and snapshot
/// management): generous, a person is waiting and can stop it.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(600);

/// A client of the server at `url`, each call bounded by [`CALL_TIMEOUT`].
pub(crate) fn connect(url: &str) -> anyhow::Result<Client> {
    connect_for(url, CALL_TIMEOUT)
}

/// A client of the server at `url`, each call bounded by `timeout`.
pub(crate) fn connect_for(url: &str, timeout: Duration) -> anyhow::Result<Client> {
    let key = crate::config::api_key_for(url);
    Ok(Client::new(url, key.as_deref())?.with_timeout(timeout))
}
