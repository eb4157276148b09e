//! `sandlot mcp`: the MCP server over stdio, for desktop agents and IDEs, backed by a running
//! sandlot server.

use crate::config;
use clap::Args;

#[derive(Debug, Args)]
#[command(after_help = mcp_help())]
pub struct McpArgs {
    #[command(flatten)]
    url: crate::UrlArg,
}

fn mcp_help() -> String {
    format!(
        "Speaks MCP on stdin/stdout (logs go to stderr) until stdin closes. The tools run code \
         in sandboxes of the server at --url: a sandbox of its own for this session, created on \
         first use and deleted at exit, or any sandbox named by a tool's sandbox_id.\n\n\
         Claude Desktop (claude_desktop_config.json):\n  \
         {{\"mcpServers\": {{\"sandlot\": {{\"command\": \"sandlot\", \"args\": [\"mcp\"], \
         \"env\": {{\"SANDLOT_URL\": \"http://127.0.0.1:7878\"}}}}}}}}\n\n{}",
        config::env_help(&[config::URL, config::LOG])
    )
}

pub fn run(args: McpArgs) -> anyhow::Result<u8> {
    crate::init_logging(config::DEFAULT_CLI_LOG);
    crate::tokio_runtime()?.block_on(sandlot_mcp::serve_stdio(
        &args.url.url,
        crate::config::api_key_for(&args.url.url).as_deref(),
    ))?;
    Ok(0)
}
