//! `sandlot audit`: verify and export the audit log (skeleton: the audit work fills it in).

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Prove the audit log's hash chain and signed checkpoints; exits 1 naming the first bad
    /// record.
    Verify {},
}

pub fn run(cmd: AuditCommand) -> anyhow::Result<u8> {
    match cmd {
        AuditCommand::Verify {} => Ok(0),
    }
}
