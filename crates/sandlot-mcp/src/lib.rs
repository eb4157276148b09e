//! sandlot's MCP server: run Python and Bash, move files and manage sandboxes as MCP tools,
//! over stdio (`sandlot mcp`, for desktop agents and IDEs) and streamable HTTP (`/mcp` on the
//! server). Built on rmcp, the official Rust SDK.
//!
//! The tools (`tools`) are written once over [`backend::Backend`]: the in-process
//! [`Runtime`] serves `/mcp`, [`remote::Remote`] (a client of the server's HTTP API) serves
//! stdio. Each MCP session gets its own sandbox on first use (`session`), deleted when the
//! session ends; every sandbox tool takes a `sandbox_id` to use a shared one instead.
//!
//! On `/mcp` each session acts as the API key that opened it: its sandboxes are that key's
//! tenant's, it sees and names no other tenant's (`tenancy`). Over stdio the server's `/v1`
//! scopes every call by the key `sandlot mcp` sends.

mod backend;
mod declarations;
mod error;
mod handler;
mod http;
mod remote;
mod render;
mod server;
mod session;
mod stdio;
mod tenancy;
mod tools;

pub use backend::{Backend, ReadFile};
pub use declarations::READ_LIMIT;
pub use error::Error;
pub use remote::Remote;
pub use stdio::serve_stdio;

use axum::Router;
use sandlot_runtime::Runtime;
use sandlot_service::Governance;
use std::sync::Arc;
use std::time::Duration;

/// Most streamable-HTTP MCP sessions alive at once; an `initialize` past it answers 503.
/// Sessions cost little until they make a sandbox, and sandboxes have their own bound
/// (`max_sandboxes`); this bounds the memory a client opening sessions in a loop can take.
pub const MAX_SESSIONS: usize = 1024;
/// A streamable-HTTP session with no message for this long ends (its sandbox is deleted).
/// Longer than the longest execution (3600 s), which sends nothing while it runs: a session
/// must not expire under its own call. Its sandbox does not wait that long to free its
/// memory: idle for the server's idle timeout, it is paused (and resumed by the next call).
pub const SESSION_IDLE: Duration = Duration::from_secs(65 * 60);
/// Largest `/mcp` request body: room for `write_file` of a few MiB in base64, and for code up
/// to the runtime's own limit (1 MiB).
pub const MAX_BODY_BYTES: usize = 8 << 20;

/// `/mcp`: the MCP server over streamable HTTP, a sandbox per MCP session. Requests must
/// name a loopback host (`localhost`, `127.0.0.1`, `::1`, any port): the guard against DNS
/// rebinding. With `gov`, every request must carry the [`sandlot_types::Principal`] the
/// server's authentication put in its extensions, and a session acts as the key that opened
/// it (its tenant, its quotas).
pub fn http_router(rt: Runtime, gov: Option<Arc<Governance>>) -> Router {
    http_router_with_hosts(rt, gov, Vec::new())
}

/// [`http_router`] that also accepts requests whose `Host` is one of `hosts` (`name` or
/// `name:port`), for a server reached by another name than loopback.
pub fn http_router_with_hosts(
    rt: Runtime,
    gov: Option<Arc<Governance>>,
    hosts: impl IntoIterator<Item = String>,
) -> Router {
    let tenancy = Arc::new(tenancy::Tenancy::new(rt.clone(), gov));
    http::router(Arc::new(rt), tenancy, hosts.into_iter().collect())
}
