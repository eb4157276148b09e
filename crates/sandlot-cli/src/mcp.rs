//! `sandlot mcp`: the MCP server over stdio, for desktop agents and IDEs, backed by a running
//! sandlot server.

use clap::Args;

#[derive(Debug, Args)]
pub struct McpArgs {}

pub fn run(args: McpArgs) -> anyhow::Result<u8> {
    let _ = args;
    anyhow::bail!("not yet")
}
