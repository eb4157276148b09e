//! `sandlot`: self-hosted code execution sandboxes for AI agents.
//!
//! The binary is thin: it parses the command line, sets up logging and hands over to the
//! runtime, the API router or the jail's probe.

mod agent;
mod audit;
mod client;
mod config;
mod doctor;
mod keys;
mod mcp;
mod provision;
mod replay;
mod run;
mod serve;
mod setup;
mod snapshots;
mod template;
mod tools;

use clap::{Args, Parser, Subcommand, ValueEnum};
use config::{Capacity, ConfigError, Dirs};
use sandlot_types::{ExecuteRequest, Language};
use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

/// Exit status for usage errors (clap uses it too).
const EXIT_USAGE: u8 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "sandlot",
    version,
    about = "Self-hosted code execution sandboxes for AI agents"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the HTTP API.
    #[command(after_help = config::env_help(&[config::SERVE_VARS, config::RUNTIME_VARS].concat()))]
    Serve(ServeArgs),
    /// Run code once in a fresh sandbox and print its output.
    #[command(after_help = run_help())]
    Run(RunArgs),
    /// Report which kernel features and isolation layers this host has.
    #[command(after_help = doctor_help())]
    Doctor(DoctorArgs),
    /// Provision the Python environment sandboxes run in and print its path.
    #[command(after_help = config::env_help(config::ENV_VARS))]
    Env(EnvArgs),
    /// Build and list templates on a server.
    #[command(subcommand)]
    Template(TemplateCommand),
    /// List, verify, delete and collect a server's snapshots.
    #[command(subcommand)]
    Snapshots(SnapshotsCommand),
    /// Create, list and revoke a server's API keys.
    #[command(subcommand)]
    Keys(keys::KeysCommand),
    /// Create, list and change a server's tenants and their quotas (admin).
    #[command(subcommand)]
    Tenants(keys::TenantsCommand),
    /// Serve sandboxes as MCP tools over stdio (for Claude Desktop, IDEs), through a server.
    Mcp(mcp::McpArgs),
    /// Print the tool declarations for a model: OpenAI, Anthropic or JSON Schema.
    Tools(tools::ToolsArgs),
    /// Run a CodeAct agent loop against an OpenAI-compatible chat endpoint.
    Agent(agent::AgentArgs),
    /// Verify and export the audit log.
    #[command(subcommand)]
    Audit(audit::AuditCommand),
    /// Write a sandbox's run as a bundle to replay.
    Bundle(replay::BundleArgs),
    /// Re-run a bundle (or a sandbox's record) in a fresh sandbox and compare each step.
    Replay(replay::ReplayArgs),
    /// What an artifact, execution or sandbox came from; OpenLineage export.
    #[command(subcommand)]
    Lineage(replay::LineageCommand),
}

#[derive(Debug, Subcommand)]
enum SnapshotsCommand {
    /// List the server's snapshots.
    #[command(after_help = config::env_help(&[config::URL]))]
    Ls {
        #[command(flatten)]
        url: UrlArg,
        /// Print the snapshots as JSON
        #[arg(long)]
        json: bool,
    },
    /// Delete snapshots (sandboxes started from them keep their own copies).
    #[command(after_help = config::env_help(&[config::URL]))]
    Rm {
        #[command(flatten)]
        url: UrlArg,
        #[arg(value_name = "ID", required = true)]
        ids: Vec<String>,
    },
    /// Check snapshots' saved state on disk without loading it; exits 1 if any is corrupt.
    #[command(after_help = config::env_help(&[config::URL]))]
    Verify {
        #[command(flatten)]
        url: UrlArg,
        /// Snapshots to check [default: all]
        #[arg(value_name = "ID")]
        ids: Vec<String>,
    },
    /// Delete snapshots older than a number of days.
    #[command(after_help = config::env_help(&[config::URL]))]
    Gc {
        #[command(flatten)]
        url: UrlArg,
        /// Age in days past which a snapshot is deleted
        #[arg(long, value_name = "DAYS", default_value_t = 30)]
        older_than: u64,
        /// Only print what would be deleted
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Debug, Subcommand)]
enum TemplateCommand {
    /// Build a template from a TOML file and wait until it is ready or failed.
    #[command(after_help = template_build_help())]
    Build(TemplateBuildArgs),
    /// List the server's templates.
    #[command(after_help = config::env_help(&[config::URL]))]
    List(TemplateListArgs),
    /// Delete a template: its zygote and pool go, its share slot is freed. Refused while a
    /// sandbox that has not ended or a snapshot uses it.
    #[command(after_help = config::env_help(&[config::URL]))]
    Delete(TemplateDeleteArgs),
}

#[derive(Debug, Args)]
struct TemplateDeleteArgs {
    /// The template's name
    #[arg(value_name = "NAME")]
    name: String,
    /// Another tenant's template (operator keys only)
    #[arg(long, value_name = "TENANT")]
    tenant: Option<String>,
    #[command(flatten)]
    url: UrlArg,
}

#[derive(Debug, Args)]
struct UrlArg {
    /// The sandlot server
    #[arg(long, value_name = "URL", env = config::URL, default_value = config::DEFAULT_URL)]
    url: String,
}

#[derive(Debug, Args)]
struct TemplateBuildArgs {
    /// The template file (TOML)
    #[arg(value_name = "FILE")]
    file: PathBuf,
    #[command(flatten)]
    url: UrlArg,
    /// Stop waiting after this many seconds (the build goes on on the server)
    #[arg(long, value_name = "S", default_value_t = 1800)]
    timeout: u64,
}

#[derive(Debug, Args)]
struct TemplateListArgs {
    #[command(flatten)]
    url: UrlArg,
    /// Print the templates as JSON
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct EnvArgs {
    /// Where the environment is provisioned [default: <data-dir>/envs]
    #[arg(long, value_name = "DIR", env = config::ENV_DIR)]
    env_dir: Option<PathBuf>,
    /// Data dir, whose envs/ is the default env dir [default: $XDG_DATA_HOME/sandlot or ~/.local/share/sandlot]
    #[arg(long, value_name = "DIR", env = config::DATA_DIR)]
    data_dir: Option<PathBuf>,
    /// Print the path of the environment's python instead of its root
    #[arg(long)]
    print_python: bool,
    /// Extra package groups (bench, test) or name==version pins, comma-separated
    #[arg(long, value_name = "A,B", value_delimiter = ',')]
    extras: Vec<String>,
}

#[derive(Debug, Args)]
struct DirArgs {
    /// Data dir: store, templates, sandbox state [default: $XDG_DATA_HOME/sandlot or ~/.local/share/sandlot]
    #[arg(long, value_name = "DIR", env = config::DATA_DIR)]
    data_dir: Option<PathBuf>,
    /// Where the Python environment is provisioned [default: <data-dir>/envs]
    #[arg(long, value_name = "DIR", env = config::ENV_DIR)]
    env_dir: Option<PathBuf>,
}

impl DirArgs {
    fn resolve(self) -> Result<Dirs, ConfigError> {
        Dirs::resolve(self.data_dir, self.env_dir)
    }
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Address to listen on (port 0 picks a free one)
    #[arg(long, value_name = "ADDR", env = config::LISTEN, default_value = config::DEFAULT_LISTEN)]
    listen: SocketAddr,
    #[command(flatten)]
    dirs: DirArgs,
    /// Most live sandboxes at once [default: 2000]
    #[arg(long, value_name = "N", env = config::MAX_SANDBOXES, value_parser = at_least_one)]
    max_sandboxes: Option<usize>,
    /// Sandbox creations running at once; more wait in a queue [default: 4]
    #[arg(long, value_name = "N", env = config::MAX_CONCURRENT_CREATES, value_parser = at_least_one)]
    max_concurrent_creates: Option<usize>,
    /// Creations that may wait in that queue; past it creation fails with capacity_exhausted [default: 256]
    #[arg(long, value_name = "N", env = config::MAX_PENDING_CREATES, value_parser = at_least_one)]
    max_pending_creates: Option<usize>,
    /// Sandboxes kept booted and ready per template, handed out on creation; 0 turns it off [default: 2]
    #[arg(long, value_name = "N", env = config::POOL_SIZE)]
    pool_size: Option<usize>,
    /// MiB the workspaces' Btrfs image is first allocated at; it grows in steps while the host has room [default: 4096]
    #[arg(long, value_name = "MIB", env = config::DISK_IMAGE_MB)]
    disk_image_mb: Option<u64>,
    /// Most files (inodes) one workspace may hold; past it new files fail with EDQUOT; 0: no cap [default: 1000000]
    #[arg(long, value_name = "N", env = config::MAX_FILES)]
    max_files: Option<u64>,
    /// Days a paused sandbox is kept before it expires; 0 keeps it until deleted [default: 30]
    #[arg(long, value_name = "DAYS", env = config::PAUSED_RETENTION_DAYS)]
    paused_retention_days: Option<u64>,
}

impl ServeArgs {
    fn capacity(&self) -> Capacity {
        Capacity {
            max_sandboxes: self.max_sandboxes,
            max_concurrent_creates: self.max_concurrent_creates,
            max_pending_creates: self.max_pending_creates,
            pool_size: self.pool_size,
            disk_image_mb: self.disk_image_mb,
            max_files: self.max_files,
            paused_retention_days: self.paused_retention_days,
        }
    }
}

/// A count that must be at least 1.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("not a count: {e}")),
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Lang {
    Python,
    Bash,
    Javascript,
    Typescript,
}

impl From<Lang> for Language {
    fn from(l: Lang) -> Language {
        match l {
            Lang::Python => Language::Python,
            Lang::Bash => Language::Bash,
            Lang::Javascript => Language::Javascript,
            Lang::Typescript => Language::Typescript,
        }
    }
}

#[derive(Debug, Args)]
struct RunArgs {
    /// The code to run, or `-` to read it from stdin
    #[arg(value_name = "CODE|-")]
    code: String,
    #[arg(long, value_enum, default_value = "python")]
    lang: Lang,
    /// Use this sandlot server instead of an embedded runtime
    #[arg(long, value_name = "URL", env = config::URL)]
    url: Option<String>,
    /// Print the full execution result as JSON
    #[arg(long)]
    json: bool,
    /// Execution timeout in seconds [default: the server's]
    #[arg(long, value_name = "S")]
    timeout: Option<f64>,
    #[command(flatten)]
    dirs: DirArgs,
}

#[derive(Debug, Args)]
struct DoctorArgs {
    /// Print the report as JSON
    #[arg(long)]
    json: bool,
}

fn run_help() -> String {
    format!(
        "Exit status: 0 ok, 1 error, 124 timeout, 130 interrupted, 137 out of memory or killed, 2 usage error.\n\n{}",
        config::env_help(&[&[config::URL], config::RUNTIME_VARS].concat())
    )
}

fn template_build_help() -> String {
    format!(
        "The file is TOML: name (required), description, packages = [\"name==version\", ...], \
         requirements = \"requirements.txt\" (next to FILE, pinned lines only), imports = [...], \
         setup = \"\"\"python\"\"\", and a [limits] table (memory_mb, cpu_millis, pids, disk_mb).\n\n\
         Exit status: 0 ready, 1 failed (the server's reason is printed) or any other error, \
         2 usage error.\n\n{}",
        config::env_help(&[config::URL])
    )
}

fn doctor_help() -> String {
    "Exit status: 0 when every required layer is available, 1 otherwise.".into()
}

fn main() -> ExitCode {
    // The runtime re-executes this binary to launch a confined zygote; that mode must run
    // before anything else (no threads, no logging setup).
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("__zygote-launch") {
        let err = sandlot_runtime::zygote_launch_main(argv.get(2).map_or("", String::as_str));
        eprintln!("sandlot: {err:#}");
        return ExitCode::from(sandlot_jail::exit::JAIL_FAILED);
    }
    // Environment builds re-execute it the same way to run each step jailed.
    if argv.get(1).map(String::as_str) == Some(sandlot_env::BUILD_JAIL_ARG) {
        return ExitCode::from(sandlot_jail::build::main());
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve(args),
        Command::Run(args) => run(args),
        Command::Doctor(args) => doctor(args),
        Command::Env(args) => env(args),
        Command::Template(cmd) => template(cmd),
        Command::Snapshots(cmd) => snapshots_command(cmd),
        Command::Keys(cmd) => admin_command(keys::keys(cmd)),
        Command::Tenants(cmd) => admin_command(keys::tenants(cmd)),
        Command::Mcp(args) => mcp::run(args),
        Command::Tools(args) => tools::run(args),
        Command::Agent(args) => agent::run(args),
        Command::Audit(cmd) => audit::run(cmd),
        Command::Bundle(args) => replay::bundle(args),
        Command::Replay(args) => replay::replay(args),
        Command::Lineage(cmd) => replay::lineage(cmd),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("sandlot: error: {e:#}");
            if e.downcast_ref::<ConfigError>().is_some() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

fn serve(args: ServeArgs) -> anyhow::Result<u8> {
    init_logging(config::DEFAULT_SERVE_LOG);
    let capacity = args.capacity();
    let dirs = args.dirs.resolve()?;
    tokio_runtime()?.block_on(serve::serve(args.listen, dirs, capacity))?;
    Ok(0)
}

fn env(args: EnvArgs) -> anyhow::Result<u8> {
    init_logging(config::DEFAULT_CLI_LOG);
    // An explicit env dir needs no data dir (nor HOME to find one): its builds then run as
    // uids named after the env dir.
    let (env_dir, data_dir) = match (args.env_dir, args.data_dir) {
        (Some(env), Some(data)) => (env, data),
        (Some(env), None) => (env.clone(), env),
        (None, data) => {
            let dirs = Dirs::resolve(data, None)?;
            (dirs.env_dir, dirs.data_dir)
        }
    };
    provision::env(&env_dir, &data_dir, &args.extras, args.print_python)
}

fn snapshots_command(cmd: SnapshotsCommand) -> anyhow::Result<u8> {
    init_logging(config::DEFAULT_CLI_LOG);
    let rt = tokio_runtime()?;
    match cmd {
        SnapshotsCommand::Ls { url, json } => rt.block_on(snapshots::list(&url.url, json)),
        SnapshotsCommand::Rm { url, ids } => rt.block_on(snapshots::remove(&url.url, &ids)),
        SnapshotsCommand::Verify { url, ids } => rt.block_on(snapshots::verify(&url.url, &ids)),
        SnapshotsCommand::Gc {
            url,
            older_than,
            dry_run,
        } => rt.block_on(snapshots::gc(&url.url, older_than, dry_run)),
    }
}

fn admin_command(fut: impl std::future::Future<Output = anyhow::Result<u8>>) -> anyhow::Result<u8> {
    init_logging(config::DEFAULT_CLI_LOG);
    tokio_runtime()?.block_on(fut)
}

fn template(cmd: TemplateCommand) -> anyhow::Result<u8> {
    init_logging(config::DEFAULT_CLI_LOG);
    match cmd {
        TemplateCommand::Build(args) => tokio_runtime()?.block_on(template::build(
            &args.file,
            &args.url.url,
            std::time::Duration::from_secs(args.timeout),
        )),
        TemplateCommand::List(args) => {
            tokio_runtime()?.block_on(template::list(&args.url.url, args.json))
        }
        TemplateCommand::Delete(args) => tokio_runtime()?.block_on(template::delete(
            &args.url.url,
            &args.name,
            args.tenant.as_deref(),
        )),
    }
}

fn run(args: RunArgs) -> anyhow::Result<u8> {
    init_logging(config::DEFAULT_CLI_LOG);
    let code = if args.code == "-" {
        let mut code = String::new();
        std::io::stdin().read_to_string(&mut code)?;
        code
    } else {
        args.code
    };
    let req = ExecuteRequest {
        code,
        language: args.lang.into(),
        timeout: args.timeout,
        stream: false,
        context: None,
        on_failure: Default::default(),
    };
    let target = match args.url.filter(|u| !u.is_empty()) {
        Some(url) => run::Target::Server(url),
        None => run::Target::Embedded(args.dirs.resolve()?),
    };
    tokio_runtime()?.block_on(run::run(target, req, args.json))
}

fn doctor(args: DoctorArgs) -> anyhow::Result<u8> {
    init_logging(config::DEFAULT_CLI_LOG);
    // No async runtime here: the probe forks, which is simplest in a single-threaded process.
    Ok(if doctor::doctor(args.json)? { 0 } else { 1 })
}

fn tokio_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Logs go to stderr: stdout carries the command's output (and `serve`'s one line).
fn init_logging(default_filter: &str) {
    // Text or JSON lines (`SANDLOT_LOG_FORMAT=json`), and OTLP traces when configured.
    sandlot_telemetry::init_logging(config::LOG, default_filter);
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn serve_help_documents_its_environment() {
        let mut cmd = Cli::command();
        let help = cmd
            .find_subcommand_mut("serve")
            .unwrap()
            .render_long_help()
            .to_string();
        for var in [
            config::LISTEN,
            config::DATA_DIR,
            config::ENV_DIR,
            config::LOG,
            config::MAX_SANDBOXES,
            config::MAX_CONCURRENT_CREATES,
            config::MAX_PENDING_CREATES,
        ] {
            assert!(help.contains(var), "{help}");
        }
    }

    #[test]
    fn serve_capacity_flags() {
        let cli = Cli::try_parse_from([
            "sandlot",
            "serve",
            "--max-sandboxes",
            "10",
            "--max-pending-creates",
            "3",
        ])
        .unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("not serve")
        };
        let c = args.capacity();
        assert_eq!(
            (
                c.max_sandboxes,
                c.max_concurrent_creates,
                c.max_pending_creates
            ),
            (Some(10), None, Some(3))
        );
        for bad in ["0", "-1", "many"] {
            let r = Cli::try_parse_from(["sandlot", "serve", "--max-concurrent-creates", bad]);
            assert!(r.is_err(), "{bad}");
        }
    }

    #[test]
    fn env_and_template_parse() {
        let cli = Cli::try_parse_from([
            "sandlot",
            "env",
            "--env-dir",
            "/e",
            "--print-python",
            "--extras",
            "bench,test",
        ])
        .unwrap();
        let Command::Env(args) = cli.command else {
            panic!("not env")
        };
        assert_eq!(args.extras, ["bench", "test"]);
        assert!(args.print_python);
        let cli = Cli::try_parse_from([
            "sandlot",
            "template",
            "build",
            "t.toml",
            "--url",
            "http://127.0.0.1:1",
        ])
        .unwrap();
        let Command::Template(TemplateCommand::Build(args)) = cli.command else {
            panic!("not template build")
        };
        assert_eq!(args.url.url, "http://127.0.0.1:1");
        assert!(Cli::try_parse_from(["sandlot", "template", "build"]).is_err());
    }
}
