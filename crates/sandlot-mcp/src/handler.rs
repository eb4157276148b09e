//! rmcp's `ServerHandler` for [`McpServer`]: what the server says of itself (versions,
//! capabilities, instructions) and the tool calls, handed to [`crate::tools`].

use crate::backend::Backend;
use crate::server::{McpServer, Transport, INSTRUCTIONS};
use crate::{declarations, tools};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use std::borrow::Cow;

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
            declarations::declarations().to_vec(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        declarations::find(name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        tools::call(self, request, context).await.map(Into::into)
    }
}
