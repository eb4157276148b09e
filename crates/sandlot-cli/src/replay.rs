//! `sandlot bundle`, `sandlot replay` and `sandlot lineage` (skeleton: the lineage work fills
//! it in).

use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct BundleArgs {}

#[derive(Debug, Args)]
pub struct ReplayArgs {}

#[derive(Debug, Subcommand)]
pub enum LineageCommand {
    /// Print what an artifact, execution or sandbox came from.
    Show {},
}

pub fn bundle(_args: BundleArgs) -> anyhow::Result<u8> {
    Ok(0)
}

pub fn replay(_args: ReplayArgs) -> anyhow::Result<u8> {
    Ok(0)
}

pub fn lineage(_cmd: LineageCommand) -> anyhow::Result<u8> {
    Ok(0)
}
