//! The MCP server handler: one [`McpServer`] per MCP session (streamable HTTP makes one per
//! session; stdio serves one), generic over the [`Backend`] it reaches sandlot through.

use crate::backend::Backend;
use crate::session::Session;
use crate::tenancy::Tenancy;
use crate::tools;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use std::borrow::Cow;
use std::sync::Arc;

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

const INSTRUCTIONS: &str = "sandlot runs code in isolated sandboxes. run_python and run_bash \
    run in this session's own sandbox (created on first use, deleted when the session ends; \
    variables and files persist between calls). To share a sandbox between sessions or \
    clients, create_sandbox and pass its id as sandbox_id.";

pub(crate) struct McpServer<B: Backend> {
    pub(crate) backend: Arc<B>,
    pub(crate) session: Arc<Session<B>>,
    /// In-process `/mcp`: the tenants' checks (stdio: `None`, the server it calls scopes).
    pub(crate) tenancy: Option<Arc<Tenancy>>,
    transport: Transport,
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

impl<B: Backend> ServerHandler for McpServer<B> {
    fn get_info(&self) -> ServerConfig {
        let version = match self.transport {
            Transport::Stdio => ProtocolVersion::LATEST_WITH_INITIALIZE,
            Transport::Http => ProtocolVersion::LATEST_WITH_INITIALIZE,
        };
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("sandlot", env!("CARGO_PKG_VERSION")))
            .with_protocol_version(version)
            .with_instructions(INSTRUCTIONS)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        match self.transport {
            Transport::Stdio => Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS),
            Transport::Http => Cow::Borrowed(ProtocolVersion::known_up_to(
                &ProtocolVersion::LATEST_WITH_INITIALIZE,
            )),
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(
            tools::declarations().to_vec(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools::find(name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        tools::call(self, request, context).await.map(Into::into)
    }
}
