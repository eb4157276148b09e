//! `sandlot agent`: a CodeAct loop against any OpenAI-compatible chat endpoint.

use clap::Args;

#[derive(Debug, Args)]
pub struct AgentArgs {}

pub fn run(args: AgentArgs) -> anyhow::Result<u8> {
    let _ = args;
    anyhow::bail!("not yet")
}
