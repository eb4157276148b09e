//! The MCP server handler: one [`McpServer`] per MCP session (streamable HTTP makes one per
//! session; stdio serves one), generic over the [`Backend`] it reaches sandlot through.

use crate::backend::Backend;
use crate::session::Session;
use crate::tenancy::Tenancy;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Which transport serves the handler; it decides the protocol versions offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    /// One process per client: every version, the stateless 2026-07-28 one included (the
    /// process is the session).
    Stdio,
    /// Versions with the `initialize` handshake only: their `Mcp-Session-Id` is what a
    /// session's sandbox belongs to (2026-07-28 has no sessions). A client that probes with
    /// `server/discover` sees no modern version and falls back to the handshake.
    Http,
}

pub(crate) const INSTRUCTIONS: &str =
    "sandlot runs code in isolated sandboxes. run_python and run_bash \
    run in this session's own sandbox (created on first use, deleted when the session ends; \
    variables and files persist between calls). To share a sandbox between sessions or \
    clients, create_sandbox and pass its id as sandbox_id.";

pub(crate) struct McpServer<B: Backend> {
    pub(crate) backend: Arc<B>,
    pub(crate) session: Arc<Session<B>>,
    /// In-process `/mcp`: the tenants' checks (stdio: `None`, the server it calls scopes).
    pub(crate) tenancy: Option<Arc<Tenancy>>,
    pub(crate) transport: Transport,
}

impl<B: Backend> Clone for McpServer<B> {
    fn clone(&self) -> Self {
        Self {
            backend: self.backend.clone(),
            session: self.session.clone(),
            tenancy: self.tenancy.clone(),
            transport: self.transport,
        }
    }
}

impl<B: Backend> McpServer<B> {
    pub(crate) fn new(
        backend: Arc<B>,
        tenancy: Option<Arc<Tenancy>>,
        transport: Transport,
    ) -> Self {
        Self {
            session: Arc::new(Session::new(backend.clone())),
            backend,
            tenancy,
            transport,
        }
    }
}

/// Cancelled when the HTTP response of the request that carries it is dropped before its end:
/// the client went away. rmcp hands the request's parts (with this) to the tool call.
#[derive(Clone)]
pub(crate) struct ClientGone(pub(crate) CancellationToken);
