//! The wire model of sandlot's HTTP API, shared by the server, the runtime, the store and the
//! CLI. Every type here is (de)serialized exactly as the OpenAPI document in
//! `crates/sandlot-api/openapi.json` describes it; change both together.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Languages an execution can run in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    #[default]
    Python,
    Bash,
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

/// Stable error codes of the API. Each maps to one HTTP status in `sandlot-api`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The body is not valid JSON, has unknown fields or wrong types (400).
    InvalidRequest,
    /// A value is out of range or not allowed (400/422).
    InvalidArgument,
    /// The body or the code is larger than the server accepts (413).
    PayloadTooLarge,
    /// No sandbox with that id (404).
    SandboxNotFound,
    /// The sandbox existed but ended: deleted, expired or lost (410).
    SandboxGone,
    /// No execution with that id (404).
    ExecutionNotFound,
    /// No template with that name (404).
    TemplateNotFound,
    /// The template is still building, or its build failed (409).
    TemplateNotReady,
    /// The path is absolute, escapes the workspace, or contains forbidden parts (400).
    InvalidPath,
    /// No such file or directory in the workspace (404).
    FileNotFound,
    /// The path is not a regular file (a directory, a symlink, a device) (400).
    NotARegularFile,
    /// The file is larger than the server accepts (413).
    FileTooLarge,
    /// The sandbox's workspace is full (507).
    WorkspaceFull,
    /// Another execution is running in this sandbox and the queue is full (409).
    SandboxBusy,
    /// The server cannot take more sandboxes right now (503).
    CapacityExhausted,
    /// The sandbox died while starting, or is in the `failed` state (409).
    SandboxFailed,
    /// The sandbox's disk quota (`disk_mb`) was hit while writing (507).
    QuotaExceeded,
    /// The host's disk is too full to create a workspace (507).
    InsufficientStorage,
    /// An archive entry is hostile or malformed (400).
    InvalidArchive,
    /// No snapshot with that id (404).
    SnapshotNotFound,
    /// A saved state on disk is truncated or corrupted (422).
    StateCorrupt,
    /// The sandbox's state could not be saved; the sandbox is unchanged (409).
    CaptureFailed,
    /// No volume with that name (404).
    VolumeNotFound,
    /// The volume exists already, or is mounted where that is not allowed (409).
    VolumeInUse,
    /// The sandbox was not created to expose that port (403).
    PortNotExposed,
    /// Nothing inside the sandbox accepts connections on that port (502).
    PortUnreachable,
    /// No API key, or a key that is malformed, unknown or revoked (401).
    Unauthenticated,
    /// The key may not do this (an admin-only operation) (403).
    Forbidden,
    /// A policy denied the request; the message names the deciding policies and why (403).
    PolicyDenied,
    /// A tenant quota (sandboxes, CPU, memory, creation rate) stayed full for the whole wait
    /// bound; the message says which and `Retry-After` when to retry (429).
    TenantQuotaExceeded,
    /// No tenant with that name (404).
    TenantNotFound,
    /// No API key with that id (404).
    KeyNotFound,
    /// The name is taken (a tenant's name; volume and template names are per tenant) (409).
    NameTaken,
    /// The template is still needed: a sandbox that has not ended or a snapshot names it
    /// (409).
    TemplateInUse,
    /// The policy set does not parse or does not validate against the schema (422).
    InvalidPolicy,
    /// The sandbox was contained after a guardrail finding; it takes no more work (409).
    SandboxContained,
    /// The audit log cannot record (its disk is full, or a corrupted segment stops it until an
    /// operator acts); actions are refused rather than run unrecorded (503).
    AuditUnavailable,
    /// No job with that id (404).
    JobNotFound,
    /// The job queue (the sandbox's or the server's) is full; `Retry-After` says when to retry
    /// (429).
    JobQueueFull,
    /// The job has ended and cannot be cancelled (409).
    JobEnded,
    /// No webhook with that id (404).
    WebhookNotFound,
    /// A bundle written by a newer sandlot, or not a bundle at all (400).
    UnsupportedBundle,
    /// Something went wrong on the server (500).
    Internal,
}

impl ErrorCode {
    /// The HTTP status this code stands for, on every protocol that speaks HTTP (REST, E2B,
    /// MCP's transport): part of the code's contract, like its name.
    pub fn http_status(self) -> u16 {
        match self {
            Self::InvalidRequest => 400,
            Self::InvalidArgument => 400,
            Self::PayloadTooLarge => 413,
            Self::SandboxNotFound => 404,
            Self::SandboxGone => 410,
            Self::ExecutionNotFound => 404,
            Self::TemplateNotFound => 404,
            Self::TemplateNotReady => 409,
            Self::InvalidPath => 400,
            Self::FileNotFound => 404,
            Self::NotARegularFile => 400,
            Self::FileTooLarge => 413,
            Self::WorkspaceFull => 507,
            Self::SandboxBusy => 409,
            Self::CapacityExhausted => 503,
            Self::SandboxFailed => 409,
            Self::QuotaExceeded => 507,
            Self::InsufficientStorage => 507,
            Self::InvalidArchive => 400,
            Self::SnapshotNotFound => 404,
            Self::StateCorrupt => 422,
            Self::CaptureFailed => 409,
            Self::VolumeNotFound => 404,
            Self::VolumeInUse => 409,
            Self::PortNotExposed => 403,
            Self::PortUnreachable => 502,
            Self::Unauthenticated => 401,
            Self::Forbidden => 403,
            Self::PolicyDenied => 403,
            Self::TenantQuotaExceeded => 429,
            Self::TenantNotFound => 404,
            Self::KeyNotFound => 404,
            Self::NameTaken => 409,
            Self::TemplateInUse => 409,
            Self::InvalidPolicy => 422,
            Self::SandboxContained => 409,
            Self::AuditUnavailable => 503,
            Self::JobNotFound => 404,
            Self::JobQueueFull => 429,
            Self::JobEnded => 409,
            Self::WebhookNotFound => 404,
            Self::UnsupportedBundle => 400,
            Self::Internal => 500,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::InvalidArgument => "invalid_argument",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::SandboxNotFound => "sandbox_not_found",
            ErrorCode::SandboxGone => "sandbox_gone",
            ErrorCode::ExecutionNotFound => "execution_not_found",
            ErrorCode::TemplateNotFound => "template_not_found",
            ErrorCode::TemplateNotReady => "template_not_ready",
            ErrorCode::InvalidPath => "invalid_path",
            ErrorCode::FileNotFound => "file_not_found",
            ErrorCode::NotARegularFile => "not_a_regular_file",
            ErrorCode::FileTooLarge => "file_too_large",
            ErrorCode::WorkspaceFull => "workspace_full",
            ErrorCode::SandboxBusy => "sandbox_busy",
            ErrorCode::CapacityExhausted => "capacity_exhausted",
            ErrorCode::SandboxFailed => "sandbox_failed",
            ErrorCode::QuotaExceeded => "quota_exceeded",
            ErrorCode::InsufficientStorage => "insufficient_storage",
            ErrorCode::InvalidArchive => "invalid_archive",
            ErrorCode::SnapshotNotFound => "snapshot_not_found",
            ErrorCode::StateCorrupt => "state_corrupt",
            ErrorCode::CaptureFailed => "capture_failed",
            ErrorCode::VolumeNotFound => "volume_not_found",
            ErrorCode::VolumeInUse => "volume_in_use",
            ErrorCode::PortNotExposed => "port_not_exposed",
            ErrorCode::PortUnreachable => "port_unreachable",
            ErrorCode::Unauthenticated => "unauthenticated",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::PolicyDenied => "policy_denied",
            ErrorCode::TenantQuotaExceeded => "tenant_quota_exceeded",
            ErrorCode::TenantNotFound => "tenant_not_found",
            ErrorCode::KeyNotFound => "key_not_found",
            ErrorCode::NameTaken => "name_taken",
            ErrorCode::TemplateInUse => "template_in_use",
            ErrorCode::InvalidPolicy => "invalid_policy",
            ErrorCode::SandboxContained => "sandbox_contained",
            ErrorCode::AuditUnavailable => "audit_unavailable",
            ErrorCode::JobNotFound => "job_not_found",
            ErrorCode::JobQueueFull => "job_queue_full",
            ErrorCode::JobEnded => "job_ended",
            ErrorCode::WebhookNotFound => "webhook_not_found",
            ErrorCode::UnsupportedBundle => "unsupported_bundle",
            ErrorCode::Internal => "internal",
        }
    }
}

/// An error with a stable code and a client-safe message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for ApiError {}

/// JSON body of every error response: `{"error": {"code": "...", "message": "..."}}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub code: ErrorCode,
    pub message: String,
}

impl From<&ApiError> for ErrorBody {
    fn from(e: &ApiError) -> Self {
        ErrorBody {
            error: ErrorDetail {
                code: e.code,
                message: e.message.clone(),
            },
        }
    }
}

/// A template: a named environment sandboxes are forked from. Body of `POST /v1/templates`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TemplateSpec {
    /// `[a-z0-9][a-z0-9_-]{0,62}`; `default` is the built-in template and cannot be replaced.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Extra Python packages, each pinned as `name==version`, installed on top of the default
    /// stack (ipython, numpy, pandas, matplotlib, cloudpickle).
    #[serde(default)]
    pub packages: Vec<String>,
    /// Modules imported once in the template's zygote, so every sandbox starts with them loaded.
    #[serde(default)]
    pub imports: Vec<String>,
    /// Python run once in the zygote; the variables it leaves are in every sandbox, shared
    /// copy-on-write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<String>,
    /// Default limits of the template's sandboxes (a create request may override them).
    #[serde(default)]
    pub limits: Limits,
}

/// Where a template's build is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TemplateStatus {
    Building,
    Ready,
    Failed,
}

/// A template as the API reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Template {
    pub name: String,
    /// Content hash of the spec and the environment it resolved to.
    pub version: String,
    pub status: TemplateStatus,
    /// Why the build failed (an unknown package, a setup script that raised, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub spec: TemplateSpec,
    pub created_at: String,
    /// The tenant whose template it is (names are per tenant; the built-in `default` is the
    /// tenant `default`'s and every tenant's to use).
    #[serde(default)]
    pub tenant: String,
    /// Seconds the zygote took to import the modules and run the setup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepare_seconds: Option<f64>,
}

/// `GET /v1/sandboxes/{id}/diff/{other}` response: which variables and which workspace
/// entries differ between two sandboxes of one family. `a` is `{id}`, `b` is `{other}`;
/// `added` means only in `b`, `removed` only in `a`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxDiff {
    pub a: String,
    pub b: String,
    /// Variables that differ, `default` context first, then by context and name.
    pub variables: Vec<VariableDiff>,
    /// Workspace entries that differ, by path.
    pub files: Vec<FileDiff>,
    /// Whether the file comparison stopped short: a workspace with more entries than a diff
    /// walks (only paths up to where both walks stopped are compared), or more differing
    /// entries than a diff lists.
    pub truncated: bool,
    /// What could not be compared, and why.
    pub not_compared: Vec<NotCompared>,
}

/// How an entry differs between `a` and `b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiffChange {
    /// Only in `b`.
    Added,
    /// Only in `a`.
    Removed,
    /// In both, different.
    Changed,
}

/// A variable that differs: `a` and `b` are what each side holds (null where it has none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VariableDiff {
    pub context: String,
    pub name: String,
    pub change: DiffChange,
    pub a: Option<VariableSummary>,
    pub b: Option<VariableSummary>,
}

/// One side of a differing variable: its type's name and the size of its pickle in bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VariableSummary {
    #[serde(rename = "type")]
    pub type_name: String,
    pub size: u64,
}

/// A workspace entry (path relative to `/workspace`) that differs. Kinds are `file`, `dir`,
/// `symlink` or `other`; sizes are a file's length, a symlink's target length, 0 for the rest;
/// null on the side that does not have it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDiff {
    pub path: String,
    pub change: DiffChange,
    pub a_kind: Option<String>,
    pub b_kind: Option<String>,
    pub a_size: Option<u64>,
    pub b_size: Option<u64>,
}

/// What a diff compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiffItemKind {
    Variable,
    File,
}

/// Something a diff could not compare: a variable one side could not digest (as a save
/// could not capture it), or a workspace entry it could not read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotCompared {
    /// The sandbox it concerns; null when it concerns both.
    pub sandbox: Option<String>,
    pub kind: DiffItemKind,
    /// The code context of a variable; null for a file.
    pub context: Option<String>,
    /// The variable's name, or the entry's path.
    pub name: String,
    pub reason: String,
}

/// Who is calling: the key a request authenticated with and what it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Principal {
    /// The key's id (`key_...`), what records and audit name.
    pub key_id: String,
    /// The key's public prefix (`sl_abcd2345`), safe to show.
    pub key_prefix: String,
    pub tenant: String,
    pub role: Role,
    /// The tenant's plan (`local`, `free`, `team`, ...), what policies usually test.
    pub plan: String,
}

/// What a key may manage beyond its tenant's own resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Manages tenants, keys and policies.
    Admin,
    #[default]
    Member,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Member => "member",
        }
    }
}

/// Per-tenant quotas. An absent running-sandbox quota (`max_sandboxes` to `wait_seconds`) is
/// unlimited; an absent share (`max_paused_sandboxes` on) is the server's default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TenantQuotas {
    /// Most sandboxes running at once (paused ones do not count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sandboxes: Option<u64>,
    /// Most CPU across its running sandboxes, in thousandths of a core (their `cpu_millis`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cpu_millis: Option<u64>,
    /// Most memory across its running sandboxes, in MiB (their `memory_mb`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_mb: Option<u64>,
    /// Sandbox creations per second (a token bucket with a burst of one second's worth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creates_per_second: Option<f64>,
    /// How long a creation over quota waits in line before it fails (seconds; default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_seconds: Option<f64>,
    // Shares of what every tenant draws on. Unlike the quotas above, an absent value is the
    // server's default (`sandlot_tenancy::Share::default_limit`), never unlimited: a tenant
    // without settings must not be able to starve the others.
    /// Most paused sandboxes (each holds a uid of the server's shared pool). Absent: the server's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_paused_sandboxes: Option<u64>,
    /// Most volumes (each holds a uid of the shared pool and disk). Absent: the server's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_volumes: Option<u64>,
    /// Most snapshots. Absent: the server's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_snapshots: Option<u64>,
    /// Most bytes of saved state across its snapshots; a snapshot is refused once they hold this much. Absent: the server's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_snapshot_bytes: Option<u64>,
    /// Most bytes on the workspace disk across its sandboxes (paused ones included), snapshot
    /// copies and volumes; a write past it fails with EDQUOT, and a creation needing disk is
    /// refused once they hold this much. Absent: the server's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_disk_bytes: Option<u64>,
    /// Most templates it owns (each an environment and a zygote). Absent: the server's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_templates: Option<u64>,
    /// Most MCP sessions open at once (of the server's global pool). Absent: the server's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_mcp_sessions: Option<u64>,
    /// Most jobs queued or running at once. Absent: the server's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_jobs: Option<u64>,
    /// Most webhooks. Absent: the server's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_webhooks: Option<u64>,
    /// Most event streams open at once (`GET /v1/events`, `GET /v1/jobs/{id}/events`). Absent: the server's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_event_streams: Option<u64>,
}

/// A tenant: who owns sandboxes, snapshots, volumes and templates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tenant {
    pub name: String,
    pub plan: String,
    pub quotas: TenantQuotas,
    pub created_at: String,
}

/// `POST /v1/tenants` body; `PUT /v1/tenants/{name}` takes the same without `name`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct CreateTenant {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quotas: Option<TenantQuotas>,
}

/// `POST /v1/keys` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct CreateKey {
    /// The tenant the key acts for; it must exist.
    pub tenant: String,
    #[serde(default)]
    pub role: Role,
    /// A label to recognise it by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// An API key as listed: never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKeyInfo {
    pub id: String,
    pub prefix: String,
    pub tenant: String,
    pub role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<String>,
}

/// `POST /v1/keys` response: the only time the key itself is shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedKey {
    pub key: String,
    #[serde(flatten)]
    pub info: ApiKeyInfo,
}

/// What happened to a sandbox, as the runtime tells it to whoever listens (the event stream,
/// webhooks, metrics, the audit log), whichever interface asked for it (REST, E2B, MCP, a job,
/// the server itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LifecycleKind {
    /// Created and running (from a template, a fork or a snapshot; `detail.source` says which).
    Created,
    /// An execution finished (`execution_id`; `detail`: end state, duration, CPU, memory).
    Executed,
    Paused,
    Resumed,
    /// Forked into children (`detail.children`); each child also has its `created`.
    Forked,
    /// Its processes restarted in place (`detail.reason`).
    Restarted,
    /// Its processes stopped (the server shut down, or a restart could not boot).
    Stopped,
    /// Deleted by a request.
    Killed,
    /// Ended by its idle timeout or maximum lifetime (`detail.reason`).
    Expired,
    /// Contained after a guardrail finding (`detail.rule`).
    Contained,
    /// Failed while starting or restarting, or lost with the server.
    Failed,
}

impl LifecycleKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LifecycleKind::Created => "created",
            LifecycleKind::Executed => "executed",
            LifecycleKind::Paused => "paused",
            LifecycleKind::Resumed => "resumed",
            LifecycleKind::Forked => "forked",
            LifecycleKind::Restarted => "restarted",
            LifecycleKind::Stopped => "stopped",
            LifecycleKind::Killed => "killed",
            LifecycleKind::Expired => "expired",
            LifecycleKind::Contained => "contained",
            LifecycleKind::Failed => "failed",
        }
    }
}

/// One lifecycle event. `seq` counts from 1 for each server run (so a consumer can tell what it
/// missed); `at` is RFC 3339 UTC.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LifecycleEvent {
    pub seq: u64,
    pub kind: LifecycleKind,
    pub sandbox_id: String,
    pub tenant: String,
    pub at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_id: Option<String>,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub detail: serde_json::Value,
}
