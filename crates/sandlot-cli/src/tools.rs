//! `sandlot tools`: the tool declarations for a model (OpenAI, Anthropic, JSON Schema).

use clap::Args;

#[derive(Debug, Args)]
pub struct ToolsArgs {}

pub fn run(args: ToolsArgs) -> anyhow::Result<u8> {
    let _ = args;
    anyhow::bail!("not yet")
}
