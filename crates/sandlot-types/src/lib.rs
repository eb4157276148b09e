//! The wire model of sandlot's HTTP API, shared by the server, the runtime, the store and the
//! CLI. Every type here is (de)serialized exactly as the OpenAPI document in
//! `crates/sandlot-api/openapi.json` describes it; change both together.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod diff;
mod error;
mod events;
mod stream;
mod template;
mod tenancy;

pub use diff::*;
pub use error::*;
pub use events::*;
pub use stream::*;
pub use template::*;
pub use tenancy::*;

/// Languages an execution can run in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    #[default]
    Python,
    Bash,
    /// JavaScript on Node, one persistent `node` per code context (see ARCHITECTURE.md,
    /// "The JavaScript kernel").
    Javascript,
    /// TypeScript: the types stripped, then run as JavaScript in the same kernel.
    Typescript,
}

impl Language {
    /// The wire name (`"python"`, `"bash"`, `"javascript"`, `"typescript"`): the serde name, also what the store keeps and the
    /// policy's `execute` gate sees. The one place the mapping is written.
    pub fn as_str(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::Bash => "bash",
            Language::Javascript => "javascript",
            Language::Typescript => "typescript",
        }
    }
}

/// What happens to an output in which the guardrails found something, most lenient first: the
/// policy engine's answer (`sandlot-policy`) and what the runtime applies (`sandlot-runtime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Release it as it is.
    Pass,
    /// Release it with the findings replaced.
    Redact,
    /// Do not release it.
    Withhold,
    /// Do not release it; freeze the sandbox, cut its egress, kill it.
    Contain,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Redact => "redact",
            Outcome::Withhold => "withhold",
            Outcome::Contain => "contain",
        }
    }
}

/// Resource limits of one sandbox. Every field is optional in requests; the server fills in
/// its defaults and clamps to its maxima, and responses always carry the effective values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Memory limit in MiB (cgroup memory limit for the whole sandbox).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// CPU share in thousandths of one core (1000 = one full core).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_millis: Option<u64>,
    /// Maximum number of processes and threads alive at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// Workspace size cap in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_mb: Option<u64>,
}

/// `POST /v1/sandboxes` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct CreateSandbox {
    /// Template name; `default` when absent.
    #[serde(default)]
    pub template: Option<String>,
    /// Extra environment variables visible to code in the sandbox.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Free-form labels, returned as given.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    #[serde(default)]
    pub limits: Limits,
    /// Seconds without an execution or file operation after which the sandbox is deleted.
    #[serde(default)]
    pub idle_timeout: Option<u64>,
    /// Seconds after creation after which the sandbox is deleted regardless of use.
    #[serde(default)]
    pub max_lifetime: Option<u64>,
    /// Start from this snapshot: its workspace files and interpreter state.
    #[serde(default)]
    pub from_snapshot: Option<String>,
    /// What reaching the idle timeout does: delete the sandbox (default) or pause it.
    #[serde(default)]
    pub on_idle: Option<IdleAction>,
    /// Named volumes to mount (each under `/workspace`).
    #[serde(default)]
    pub volumes: Vec<VolumeMount>,
    /// Read-only host paths to mount (the trusted tier only, each granted by the policy's
    /// `mount_host_path` gate): a host directory or file shown at a path under `/mnt`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<HostMount>,
    /// TCP ports inside the sandbox reachable from outside through
    /// `/v1/sandboxes/{id}/ports/{port}/...` (and E2B's `E2b-Sandbox-Port` header).
    #[serde(default)]
    pub ports: Vec<u16>,
    /// Every unprivileged port (1024-65535) is reachable, as E2B's contract has it; sandboxes
    /// created through the E2B-compatible API get this.
    #[serde(default)]
    pub all_ports: bool,
    /// Isolation tier asked for: `isolated` (the full jail, default) or `trusted` (more reach,
    /// for principals the policy allows). The least privileged tier that the request needs and
    /// the policy allows is chosen; the sandbox reports which and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// Egress allowlist: domains (`example.com`, `*.example.com`), IPs and CIDRs reachable
    /// through the host's egress proxy. Empty: no network (the default).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network: Vec<String>,
    /// Credentials the egress proxy adds to requests for named hosts; never visible inside the
    /// sandbox, never stored on disk, never returned.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<SecretSpec>,
    /// The tenant the sandbox belongs to: set by the server from the caller's key, never read
    /// from the request.
    #[serde(skip)]
    pub tenant: Option<String>,
    /// The directory code starts in, when not `/workspace`: set by a protocol adapter (E2B's
    /// sandboxes start in `/home/user`, the same workspace), never read from the request.
    #[serde(skip)]
    pub workdir: Option<String>,
}

/// A secret the egress proxy injects as a header into requests to matching hosts.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretSpec {
    /// A label for records (`[a-zA-Z0-9_.-]{1,64}`).
    pub name: String,
    /// Hosts it is sent to: the same patterns as the network allowlist's domains.
    pub hosts: Vec<String>,
    /// The header it is sent in (`Authorization`, `X-Api-Key`, ...).
    pub header: String,
    pub value: String,
}

impl std::fmt::Debug for SecretSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretSpec")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .field("header", &self.header)
            .field("value", &"<hidden>")
            .finish()
    }
}

/// `PUT /v1/sandboxes/{id}/network` body: replaces the egress allowlist (and, when given, the
/// secrets) of a running sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct NetworkUpdate {
    pub allow: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets: Option<Vec<SecretSpec>>,
}

/// A read-only host path mounted into a trusted-tier sandbox (`mounts` at creation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostMount {
    /// The host directory or file: absolute, without `.`/`..` or symlinks anywhere on it.
    pub host: String,
    /// Where it appears in the sandbox: an absolute path under `/mnt` (`/mnt/data`).
    pub path: String,
}

/// Most host paths one sandbox may mount.
pub const MAX_HOST_MOUNTS: usize = 4;

/// A named volume mounted into a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeMount {
    pub name: String,
    /// Where it appears: a directory under `/workspace` (`/workspace/data` or `data`).
    pub path: String,
    /// Mounted read-only (any number of sandboxes at once) rather than read-write (one
    /// sandbox at a time).
    #[serde(default)]
    pub read_only: bool,
}

/// `POST /v1/volumes` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateVolume {
    /// `[a-z0-9][a-z0-9_-]{0,47}`.
    pub name: String,
    /// Size cap in MiB (default 1024).
    #[serde(default)]
    pub size_mb: Option<u64>,
    /// The tenant it will belong to: set by the server from the caller's key.
    #[serde(skip)]
    pub tenant: Option<String>,
}

/// A named volume: files that live apart from any sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Volume {
    pub name: String,
    pub size_mb: u64,
    pub created_at: String,
    /// The sandboxes (not ended) that mount it.
    pub mounted_by: Vec<VolumeUse>,
    /// The tenant it belongs to.
    #[serde(default = "default_tenant")]
    pub tenant: String,
}

/// One sandbox's mount of a volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeUse {
    pub sandbox_id: String,
    pub path: String,
    pub read_only: bool,
}

/// What a sandbox's idle timeout does to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum IdleAction {
    /// The sandbox and its files are deleted.
    #[default]
    Delete,
    /// The sandbox is paused: its state is saved, its processes stop, the next call resumes it.
    Pause,
}

impl IdleAction {
    pub fn as_str(self) -> &'static str {
        match self {
            IdleAction::Delete => "delete",
            IdleAction::Pause => "pause",
        }
    }
}

/// Lifecycle state of a sandbox as stored and reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxState {
    /// Alive and accepting executions (its processes may be restarting in place).
    Running,
    /// Its processes are gone but its files are kept (the server stopped or crashed); the next
    /// execution restarts it in place.
    Stopped,
    /// It restarted too often in a short time (a restart loop); its files stay readable until
    /// it is deleted, executions are refused.
    Failed,
    /// Deleted by request.
    Deleted,
    /// Deleted because it was idle for longer than its idle timeout.
    Expired,
    /// Its processes died and its state was not kept (records of older servers).
    Lost,
    /// Its interpreter state and files are saved on disk and it holds no process, memory or
    /// cgroup; the next call to it (or `resume`) brings it back with its variables.
    Paused,
}

impl SandboxState {
    /// The state as the API and the store spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxState::Running => "running",
            SandboxState::Stopped => "stopped",
            SandboxState::Failed => "failed",
            SandboxState::Deleted => "deleted",
            SandboxState::Expired => "expired",
            SandboxState::Lost => "lost",
            SandboxState::Paused => "paused",
        }
    }

    /// Whether the sandbox has ended for good (its files are gone or going).
    pub fn is_ended(self) -> bool {
        matches!(
            self,
            SandboxState::Deleted | SandboxState::Expired | SandboxState::Lost
        )
    }
}

/// The last time a sandbox's processes were restarted in place, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastRestart {
    /// Why: `oom`, `timeout`, `crashed`, `server restarted`, ...
    pub reason: String,
    /// RFC 3339.
    pub at: String,
}

/// A sandbox as the API reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sandbox {
    pub id: String,
    pub template: String,
    /// Content hash of the template version this sandbox was forked from.
    pub template_version: String,
    pub state: SandboxState,
    pub env: BTreeMap<String, String>,
    pub metadata: BTreeMap<String, String>,
    pub limits: EffectiveLimits,
    pub idle_timeout: u64,
    pub max_lifetime: u64,
    /// RFC 3339 timestamps.
    pub created_at: String,
    pub last_active_at: String,
    pub expires_at: String,
    /// Why the sandbox ended, when it has (or why it failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_reason: Option<String>,
    /// How many times its processes were restarted in place.
    #[serde(default)]
    pub restart_count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_restart: Option<LastRestart>,
    /// What its idle timeout does.
    #[serde(default)]
    pub on_idle: IdleAction,
    /// The sandbox it was forked from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<String>,
    /// The snapshot it was started from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_snapshot: Option<String>,
    /// When it was paused (RFC 3339), while it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_at: Option<String>,
    /// The last time interpreter state was loaded into it (fork, snapshot, resume).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_restore: Option<LastRestore>,
    /// Named volumes it mounts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeMount>,
    /// Read-only host paths it mounts (see [`CreateSandbox::mounts`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<HostMount>,
    /// Ports reachable from outside (see [`CreateSandbox::ports`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<u16>,
    /// Every unprivileged port is reachable (see [`CreateSandbox::all_ports`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all_ports: bool,
    /// The tenant it belongs to.
    #[serde(default = "default_tenant")]
    pub tenant: String,
    /// Its isolation tier (`isolated` or `trusted`).
    #[serde(default = "default_tier")]
    pub tier: String,
    /// Its egress allowlist (empty: no network).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network: Vec<String>,
    /// Names of the secrets the egress proxy holds for it (never the values).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// Set when the sandbox was contained (a guardrail finding or its canary seen): why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contained: Option<String>,
    /// Opens this sandbox's exposed ports at `/v1/ports/{port_token}/{port}/` without an API
    /// key (a capability URL for browsers); given to the sandbox's own tenant, never stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_token: Option<String>,
}

/// The tenant of records written before tenants existed, and of the local single user.
pub const DEFAULT_TENANT: &str = "default";
/// The tier every sandbox gets unless the policy grants another.
pub const ISOLATED_TIER: &str = "isolated";
pub const TRUSTED_TIER: &str = "trusted";

fn default_tenant() -> String {
    DEFAULT_TENANT.to_owned()
}

fn default_tier() -> String {
    ISOLATED_TIER.to_owned()
}

/// A load of saved interpreter state into a sandbox, and what did not come back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastRestore {
    /// RFC 3339.
    pub at: String,
    /// `fork`, `snapshot` or `resume`.
    pub source: String,
    /// Variables restored.
    pub variables: u64,
    pub not_restored: Vec<NotCaptured>,
}

/// A variable (or module, or Bash session) that could not be saved or loaded, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotCaptured {
    pub name: String,
    pub context: String,
    pub reason: String,
}

/// `POST /v1/sandboxes/{id}/fork` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// How many children (1 to 100).
    #[serde(default = "one")]
    pub count: u64,
    /// Children keep the parent's random state instead of fresh entropy.
    #[serde(default)]
    pub same_seed: bool,
}

fn one() -> u64 {
    1
}

impl Default for ForkRequest {
    fn default() -> Self {
        Self {
            count: 1,
            same_seed: false,
        }
    }
}

/// `POST /v1/sandboxes/{id}/fork` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForkResult {
    pub sandboxes: Vec<Sandbox>,
    /// What of the parent's state the children did not get.
    pub not_captured: Vec<NotCaptured>,
    pub took_ms: f64,
}

/// `POST /v1/sandboxes/{id}/snapshots` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct CreateSnapshot {
    #[serde(default)]
    pub name: Option<String>,
}

/// A saved sandbox state (interpreter state and workspace files) new sandboxes start from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub id: String,
    pub name: Option<String>,
    /// The sandbox it was taken of.
    pub sandbox_id: String,
    pub template: String,
    pub template_version: String,
    pub created_at: String,
    /// Size of the saved interpreter state in bytes.
    pub state_bytes: u64,
    /// Whether the workspace's files were captured (always, on a disk workspace).
    pub workspace: bool,
    pub variables: u64,
    pub not_captured: Vec<NotCaptured>,
    /// Format version of the saved state.
    pub version: u32,
    /// The tenant it belongs to (its sandbox's).
    #[serde(default = "default_tenant")]
    pub tenant: String,
}

/// Limits with every value filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectiveLimits {
    pub memory_mb: u64,
    pub cpu_millis: u64,
    pub pids: u64,
    pub disk_mb: u64,
}

/// `POST /v1/sandboxes/{id}/execute` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecuteRequest {
    pub code: String,
    #[serde(default)]
    pub language: Language,
    /// Seconds; the server default applies when absent.
    #[serde(default)]
    pub timeout: Option<f64>,
    /// Stream events as Server-Sent Events instead of one JSON body.
    #[serde(default)]
    pub stream: bool,
    /// The code context to run in (see `POST /v1/sandboxes/{id}/contexts`); the sandbox's
    /// default context when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// What a cell that fails leaves behind: its effects (`keep`, the default) or the
    /// sandbox's variables and files as they were before it (`rollback`).
    #[serde(default, skip_serializing_if = "OnFailure::is_keep")]
    pub on_failure: OnFailure,
}

/// What happens to a sandbox's state when an execution fails (errors, times out, runs out of
/// memory, or fails its guardrails).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnFailure {
    /// The sandbox keeps whatever the cell did (the behaviour without the field).
    #[default]
    Keep,
    /// The sandbox's variables and workspace files are saved before the cell and put back
    /// when it fails; the result says `rolled_back`.
    Rollback,
}

impl OnFailure {
    pub fn is_keep(&self) -> bool {
        *self == OnFailure::Keep
    }
}

/// How a failed execution's rollback went, in its result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rollback {
    /// Why the cell counted as failed: `error`, `timeout`, `oom`, `interrupted`, `killed`,
    /// `guardrails`.
    pub reason: String,
    /// Variables put back (over every code context).
    pub variables: u64,
    /// What the capture could not hold and so was not put back (unpicklable values).
    #[serde(default)]
    pub not_restored: Vec<NotCaptured>,
    /// Milliseconds the capture before the cell took.
    pub capture_ms: f64,
    /// Milliseconds putting the state back took.
    pub restore_ms: f64,
}

/// How an execution ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndState {
    /// Ran to completion without an error.
    Ok,
    /// The code raised (Python) or exited non-zero (Bash).
    Error,
    /// The timeout passed; the code was interrupted (state kept) or, if it would not stop,
    /// the sandbox was killed (see `sandbox_alive`).
    Timeout,
    /// Interrupted by `POST /interrupt`.
    Interrupted,
    /// The sandbox hit its memory limit.
    Oom,
    /// The sandbox's processes were killed (deleted, expired, or died) during the execution.
    Killed,
}

/// The error an execution raised.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecError {
    pub name: String,
    pub value: String,
    /// Traceback lines, plain text (no ANSI colour).
    pub traceback: Vec<String>,
}

/// One output event of an execution, in the order the sandbox produced it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputEvent {
    Stdout {
        text: String,
    },
    Stderr {
        text: String,
    },
    /// A rich value shown with `display()` or a figure: a MIME bundle.
    DisplayData {
        data: BTreeMap<String, serde_json::Value>,
        #[serde(default)]
        metadata: serde_json::Value,
    },
    /// The value of the cell's last expression.
    Result {
        data: BTreeMap<String, serde_json::Value>,
        #[serde(default)]
        metadata: serde_json::Value,
    },
    Error(ExecError),
}

/// Bytes of a text stream that were kept and dropped under the output budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Truncation {
    pub kept_bytes: u64,
    pub dropped_bytes: u64,
}

/// The full result of one execution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionResult {
    pub id: String,
    pub sandbox_id: String,
    pub language: Language,
    pub end_state: EndState,
    /// All of stdout (after the output budget), for convenience.
    pub stdout: String,
    pub stderr: String,
    /// The MIME bundle of the last expression's value (Python), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<BTreeMap<String, serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ExecError>,
    /// Bash: the exit status of the last command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Every event in order (stdout/stderr chunks, display data, result, error).
    pub outputs: Vec<OutputEvent>,
    pub stdout_truncation: Truncation,
    pub stderr_truncation: Truncation,
    pub started_at: String,
    pub duration_ms: f64,
    /// CPU time (user + system) the sandbox used during the execution.
    pub cpu_time_ms: f64,
    /// Peak memory of the sandbox so far, in bytes.
    pub peak_memory_bytes: u64,
    /// Whether the sandbox (and its state) survived the execution.
    pub sandbox_alive: bool,
    /// Files of the workspace the execution created or changed.
    #[serde(default)]
    pub artifacts: Vec<Artifact>,
    /// The context the execution ran in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// Set when the sandbox's processes died or were killed during the execution and are being
    /// restarted in place (same id, files, limits, env); says what state was lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarted: Option<Restarted>,
    /// Bytes of background output (produced while no execution ran) waiting in the sandbox's
    /// buffer when this execution ended: `GET /v1/sandboxes/{id}/background` reads them.
    #[serde(default)]
    pub background_bytes: u64,
    /// The execution asked for `on_failure: rollback`, failed, and the sandbox's variables and
    /// files are back as they were before it (`rollback` says why and what).
    #[serde(default)]
    pub rolled_back: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<Rollback>,
    /// Its output was withheld by an output gate a policy holds for review (`@review`): the
    /// original is kept on the server and released at
    /// `GET /v1/sandboxes/{id}/executions/{eid}/held-output` once approved (dropped if denied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_held: Option<OutputHeld>,
}

/// The review holding an execution's withheld output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputHeld {
    pub review: String,
}

/// Which output stream a piece of text came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamName {
    Stdout,
    Stderr,
}

/// Output a sandbox's processes produced while no execution ran (background processes,
/// between executions), kept apart from every execution's output in a bounded buffer:
/// `GET /v1/sandboxes/{id}/background`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct BackgroundOutput {
    /// Oldest first. Chunks of one stream arriving close together share an entry.
    pub entries: Vec<BackgroundEntry>,
    /// Bytes dropped, oldest first, because the buffer was full (since it was last cleared).
    pub dropped_bytes: u64,
}

/// One piece of background output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackgroundEntry {
    pub stream: StreamName,
    pub text: String,
    /// When it arrived (RFC 3339, UTC).
    pub at: String,
    /// The execution that started the process or thread that wrote it, when the driver knows
    /// it (output of a process, job or thread that outlived its execution); absent for output
    /// written while no execution ran by a process the sandbox cannot attribute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_id: Option<String>,
}

/// A restart in place, as the execution that caused it reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restarted {
    /// Why: `oom`, `timeout`, `crashed`, ...
    pub reason: String,
    /// What did not survive: `python state`, `bash session`.
    pub lost: Vec<String>,
}

/// A file an execution created or changed, kept content-addressed in the data dir so it
/// outlives its sandbox for as long as the retention setting says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    /// Path relative to the workspace.
    pub path: String,
    pub size: u64,
    /// Hex SHA-256 of the content; `GET /v1/artifacts/{sha256}` downloads it.
    pub sha256: String,
    pub mime_type: String,
    /// `created` or `modified`.
    pub change: String,
    /// Path of the download URL, relative to the server: `/v1/artifacts/{sha256}`. Empty when
    /// the file was too large to keep (it is still listed).
    pub url: String,
}

/// A code context: an independent Python namespace (and Bash session) inside a sandbox,
/// sharing its filesystem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Context {
    pub id: String,
    pub created_at: String,
    /// The directory the context started in, when it was given one at creation (otherwise the
    /// sandbox's: `/workspace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// An execution as recorded in the store and listed by `GET /v1/sandboxes/{id}/executions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionRecord {
    pub id: String,
    pub sandbox_id: String,
    pub code: String,
    pub language: Language,
    pub started_at: String,
    /// `None` while the execution runs. An execution cut off by a server crash is recorded
    /// with end state `killed` when the server restarts.
    #[serde(default)]
    pub result: Option<ExecutionResult>,
}

/// One entry of a workspace listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Path relative to the workspace root.
    pub path: String,
    pub name: String,
    /// `file`, `dir`, `symlink` or `other`.
    pub kind: String,
    pub size: u64,
    /// Seconds since the epoch.
    pub modified: i64,
    pub mode: u32,
}
