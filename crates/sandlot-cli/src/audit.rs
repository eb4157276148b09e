//! `sandlot audit`: the audit log from the command line. `verify` and `export` read the files
//! in `<data-dir>/audit/` directly, with the server running or not (the writer appends whole
//! lines; a line being written is ignored). `seal` is the operator's answer to a corrupt log:
//! the first bad record and everything after it move to `audit/quarantine/`, and an
//! `audit.sealed` record continues the chain from the last good one; offline it opens the log
//! itself (the server must be stopped), with `--url` it asks the running server. `archive`
//! moves sealed segments older than a date out of the data dir (the server must be stopped:
//! it opens the log to record the archive in its chain); `verify --archive DIR` proves an
//! archive and that it ends where the log's records start.

use crate::config::{self, Dirs};
use clap::{Args, Subcommand, ValueEnum};
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct Where {
    /// The server's data dir (its audit log is <data-dir>/audit) [default: $XDG_DATA_HOME/sandlot or ~/.local/share/sandlot]
    #[arg(long, value_name = "DIR", env = config::DATA_DIR, conflicts_with = "dir")]
    data_dir: Option<PathBuf>,
    /// The audit directory itself (e.g. a copy of <data-dir>/audit)
    #[arg(long, value_name = "AUDITDIR")]
    dir: Option<PathBuf>,
}

impl Where {
    fn dir(self) -> anyhow::Result<PathBuf> {
        match self.dir {
            Some(d) => Ok(d),
            None => Ok(Dirs::resolve(self.data_dir, None)?.data_dir.join("audit")),
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    Jsonl,
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Prove the audit log's hash chain and signed checkpoints; exits 1 naming the first bad
    /// record.
    Verify {
        #[command(flatten)]
        at: Where,
        /// The verifier key to trust (`<origin>+<id>+<key>`, from GET /v1/audit/checkpoint),
        /// rather than the log's own verifier.key
        #[arg(long, value_name = "VKEY")]
        key: Option<String>,
        /// Print the report as JSON
        #[arg(long)]
        json: bool,
        /// Also prove this archive (made by `sandlot audit archive`) and that it ends exactly
        /// where the log's records start
        #[arg(long, value_name = "ARCHIVEDIR")]
        archive: Option<PathBuf>,
    },
    /// Move the sealed segments whose records are all before DATE out of the log, into DIR;
    /// the log keeps the signed checkpoint at the cut and records the archive in its chain.
    /// The server must be stopped.
    Archive {
        #[command(flatten)]
        at: Where,
        /// A date (`YYYY-MM-DD`, UTC: records of that day stay) or an RFC 3339 time
        #[arg(long, value_name = "DATE")]
        before: String,
        /// An empty or new directory to move the segments to [default:
        /// ./sandlot-audit-archive-<DATE>]
        #[arg(long, value_name = "DIR")]
        to: Option<PathBuf>,
    },
    /// Write the records as stored, one JSON object per line.
    Export {
        #[command(flatten)]
        at: Where,
        #[arg(long, value_enum, default_value = "jsonl")]
        format: Format,
        /// First seq
        #[arg(long, value_name = "N")]
        from: Option<u64>,
        /// Last seq
        #[arg(long, value_name = "M")]
        to: Option<u64>,
        /// Write here instead of stdout
        #[arg(short = 'o', long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Seal a corrupt log: quarantine the bad part, continue the chain with a record saying so.
    Seal {
        #[command(flatten)]
        at: Where,
        /// Ask the running server at this URL (POST /v1/audit/seal) instead of opening the
        /// files (which needs the server stopped)
        #[arg(long, value_name = "URL")]
        url: Option<String>,
    },
}

pub fn run(cmd: AuditCommand) -> anyhow::Result<u8> {
    match cmd {
        AuditCommand::Verify {
            at,
            key,
            json,
            archive,
        } => verify(at.dir()?, key, json, archive),
        AuditCommand::Archive { at, before, to } => archive(at.dir()?, &before, to),
        AuditCommand::Export {
            at,
            format: Format::Jsonl,
            from,
            to,
            output,
        } => export(at.dir()?, from, to, output),
        AuditCommand::Seal { at, url } => match url {
            Some(url) => {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                rt.block_on(async {
                    let r: serde_json::Value = crate::client::connect(&url)?
                        .post_json("/v1/audit/seal", &serde_json::json!({}))
                        .await?;
                    println!("{}", serde_json::to_string_pretty(&r)?);
                    Ok(0)
                })
            }
            None => seal_offline(at.dir()?),
        },
    }
}

fn verify(
    dir: PathBuf,
    key: Option<String>,
    json: bool,
    archive: Option<PathBuf>,
) -> anyhow::Result<u8> {
    let r = sandlot_audit::verify(&dir, key.as_deref())?;
    let a = match &archive {
        Some(a) => Some(sandlot_audit::verify_archive(a, &dir, key.as_deref())?),
        None => None,
    };
    if json {
        let v = match &a {
            Some(a) => serde_json::json!({"log": r, "archive": a}),
            None => serde_json::to_value(&r)?,
        };
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        say(&r, "");
        if let (Some(a), Some(path)) = (&a, &archive) {
            say(a, &format!("archive {}: ", path.display()));
        }
    }
    let failed = r.failure.is_some() || a.as_ref().is_some_and(|a| a.failure.is_some());
    Ok(if failed { 1 } else { 0 })
}

/// Prints what a verification proved, or its failure, prefixed by `what`.
fn say(r: &sandlot_audit::VerifyReport, what: &str) {
    match &r.failure {
        None => {
            let from = if r.from > 1 {
                format!(" (from record {}: the ones before are archived)", r.from)
            } else {
                String::new()
            };
            println!(
                "{what}ok: {} records{from} in {} segments, {} signed checkpoints (last at {}), root {}, {:.2} s",
                r.records,
                r.segments,
                r.checkpoints,
                r.last_checkpoint.map_or("none".into(), |s| s.to_string()),
                r.root,
                r.seconds
            );
            if !r.seals.is_empty() {
                println!("sealed by the operator at records {:?}", r.seals);
            }
            if r.in_flight_bytes > 0 {
                println!(
                    "({} bytes of a record being written ignored)",
                    r.in_flight_bytes
                );
            }
        }
        Some(f) => eprintln!("{what}FAILED: {f}"),
    }
}

fn archive(dir: PathBuf, before: &str, to: Option<PathBuf>) -> anyhow::Result<u8> {
    let valid = |s: &str| {
        s.len() >= 10
            && s.as_bytes()[..10].iter().enumerate().all(|(i, b)| {
                if i == 4 || i == 7 {
                    *b == b'-'
                } else {
                    b.is_ascii_digit()
                }
            })
    };
    anyhow::ensure!(
        valid(before),
        "--before must be a date (YYYY-MM-DD) or an RFC 3339 time, not {before:?}"
    );
    let to =
        to.unwrap_or_else(|| PathBuf::from(format!("sandlot-audit-archive-{}", &before[..10])));
    let log = open_offline(&dir)?;
    let user = std::env::var("USER").unwrap_or_else(|_| "unknown".into());
    let actor = serde_json::json!({"operator_cli": user});
    match log.archive(before, &to, actor) {
        Ok(report) => {
            println!("{}", serde_json::to_string_pretty(&report)?);
            log.close()?;
            Ok(0)
        }
        Err(sandlot_audit::AuditError::Invalid(m)) => {
            eprintln!("{m}");
            Ok(1)
        }
        Err(e) => Err(e.into()),
    }
}

/// Opens the log for appending, which needs the server stopped.
fn open_offline(dir: &std::path::Path) -> anyhow::Result<std::sync::Arc<sandlot_audit::AuditLog>> {
    anyhow::ensure!(dir.is_dir(), "{} is not an audit directory", dir.display());
    match sandlot_audit::AuditLog::open(dir, sandlot_audit::Config::default()) {
        Ok(l) => Ok(l),
        Err(sandlot_audit::AuditError::Locked(_)) => {
            anyhow::bail!("the audit log is in use (is the server running?): stop it first")
        }
        Err(e) => Err(e.into()),
    }
}

fn export(
    dir: PathBuf,
    from: Option<u64>,
    to: Option<u64>,
    output: Option<PathBuf>,
) -> anyhow::Result<u8> {
    if !dir.is_dir() {
        anyhow::bail!("{} is not an audit directory", dir.display());
    }
    if let (Some(f), Some(t)) = (from, to) {
        anyhow::ensure!(f <= t, "--from is after --to");
    }
    let n = match output {
        Some(path) => {
            let mut f = std::io::BufWriter::new(std::fs::File::create(&path)?);
            let n = sandlot_audit::export(&dir, from, to, &mut f)?;
            f.flush()?;
            n
        }
        None => {
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            let n = sandlot_audit::export(&dir, from, to, &mut out)?;
            out.flush()?;
            n
        }
    };
    eprintln!("{n} records");
    Ok(0)
}

fn seal_offline(dir: PathBuf) -> anyhow::Result<u8> {
    let log = match sandlot_audit::AuditLog::open(&dir, sandlot_audit::Config::default()) {
        Ok(l) => l,
        Err(sandlot_audit::AuditError::Locked(_)) => anyhow::bail!(
            "the audit log is in use (is the server running?): stop it, or ask it with --url"
        ),
        Err(e) => return Err(e.into()),
    };
    let user = std::env::var("USER").unwrap_or_else(|_| "unknown".into());
    let actor = serde_json::json!({"operator_cli": user});
    match log.seal(actor, None) {
        Ok(report) => {
            println!("{}", serde_json::to_string_pretty(&report)?);
            log.close()?;
            Ok(0)
        }
        Err(sandlot_audit::AuditError::Invalid(m)) => {
            eprintln!("{m}");
            Ok(1)
        }
        Err(e) => Err(e.into()),
    }
}
