//! The runtime's errors: one variant per operation that can fail, carrying what it was about
//! (the sandbox, template, path or step) and the underlying error. Messages are written for the
//! client: the API crate sends them as they are, under the stable code it picks for each
//! variant in its one mapping (`crates/sandlot-service/src/error.rs`), except that `internal`
//! messages go to the log only.

use crate::archive::limits::Refusal;
use crate::assets::AssetError;
use crate::zygote::ZygoteError;
use sandlot_env::EnvError;
use sandlot_jail::cgroup::CgroupError;
use sandlot_jail::frame::FrameError;
use sandlot_jail::JailError;
use sandlot_store::StoreError;
use std::io;
use std::path::PathBuf;
use tokio::task::JoinError;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    // Starting the runtime.
    #[error(
        "sandlot needs root for its jail: a host uid per sandbox (uid maps for other uids), \
         cgroup limits and the zygote's private base root all need it, and a rootless mode \
         is not built yet. Run it as root (e.g. with sudo); `sandlot doctor` shows which \
         layers this machine supports"
    )]
    NotRoot,
    #[error("detecting cgroups: {source}")]
    DetectCgroups { source: CgroupError },
    #[error("{op} {path}: {source}")]
    DataDir {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("the Python environment {path}: {source}")]
    PythonEnv { path: PathBuf, source: io::Error },
    #[error(
        "the Python environment's base interpreter {env} lies under {under}, which every \
         sandbox replaces with its own; use a base Python elsewhere (SANDLOT_PYTHON)"
    )]
    EnvShadowed { env: PathBuf, under: &'static str },
    #[error(transparent)]
    Assets(#[from] AssetError),
    #[error("{op}: {source}")]
    Store {
        op: &'static str,
        /// Boxed: the store's errors carry ids and SQLite's error, and would make every
        /// `Result` of the runtime as large.
        source: Box<StoreError>,
    },

    // Templates and their zygotes.
    #[error("no template named {name:?}")]
    TemplateNotFound { name: String },
    #[error("template {name:?} is still building")]
    TemplateBuilding { name: String },
    #[error("template {name:?} was replaced by a new version while this request used it; retry")]
    TemplateReplaced { name: String },
    #[error("template {name:?} failed to build: {reason}")]
    TemplateFailed { name: String, reason: String },
    #[error("the template has no environment yet")]
    TemplateNoEnvironment,
    #[error("template {template:?} failed: {source}")]
    ZygoteStart {
        template: String,
        source: ZygoteStartError,
    },
    #[error(transparent)]
    InvalidTemplate(#[from] TemplateSpecError),
    #[error("the default template cannot be replaced or deleted")]
    DefaultTemplateReadOnly,
    #[error("template {name:?} is in use by {by}; delete that first")]
    TemplateInUse { name: String, by: String },
    #[error("saving the template {path}: {source}")]
    SaveTemplate { path: PathBuf, source: io::Error },
    #[error("no free uid for a zygote")]
    NoFreeZygoteUid,
    #[error(
        "this server has no environments directory configured; templates with packages are refused"
    )]
    NoEnvsDir,
    #[error(transparent)]
    Environment(#[from] EnvError),

    // Admission of a new sandbox.
    #[error("{field} must be greater than 0")]
    NotPositive { field: &'static str },
    #[error("{field} = {value} is above the server's maximum of {max}")]
    AboveMax {
        field: &'static str,
        value: u64,
        max: u64,
    },
    #[error("{field} must be at most one year")]
    OverOneYear { field: &'static str },
    #[error("at most 256 environment variables")]
    TooManyEnvVars,
    #[error("invalid environment variable name {name:?}")]
    InvalidEnvName { name: String },
    #[error("environment variable {name} has a NUL byte or is longer than 32768 bytes")]
    InvalidEnvValue { name: String },
    #[error("metadata: at most 64 entries and 16 KiB")]
    MetadataTooLarge,
    #[error("the server already runs its maximum of {max} sandboxes")]
    AtCapacity { max: usize },
    #[error("{queued} sandbox creations are already queued (the limit is {limit}); retry shortly")]
    CreateQueueFull { queued: usize, limit: usize },
    #[error("the creation queue is closed")]
    AdmissionClosed,
    #[error("no free sandbox uid")]
    NoFreeUid,
    #[error("the server's disk is too full for a new workspace; retry later or free disk space")]
    InsufficientStorage,
    #[error("workspace {op}: {source}")]
    Workspace {
        op: &'static str,
        source: sandlot_workspace::WorkspaceError,
    },
    #[error("opening the workspaces in the data dir: {source}")]
    OpenWorkspaces {
        source: sandlot_workspace::WorkspaceError,
    },

    // Creating a sandbox: the server's half of the handshake (see `spawn.rs`).
    #[error("creating the sandbox's cgroup: {source}")]
    SandboxCgroup { source: CgroupError },
    #[error("creating the sandbox failed at {step}: {source}")]
    Create {
        step: &'static str,
        source: CreateFailure,
    },
    /// The child reported a failed step of its jail (`jail_error`), or sent something else
    /// where `init` or `hello` belonged.
    #[error("the sandbox failed to start: {message}")]
    JailFailed { message: String },
    #[error("the sandbox died while starting: {source}")]
    DiedStarting { source: io::Error },

    // Sandboxes and executions.
    #[error("no sandbox with id {id:?}")]
    SandboxNotFound { id: String },
    #[error("sandbox {id} is {state}: {reason}")]
    SandboxGone {
        id: String,
        state: &'static str,
        reason: String,
    },
    #[error("sandbox {id} has failed: {reason}")]
    SandboxInFailedState { id: String, reason: String },
    #[error("code is {size} bytes; the limit is {limit}")]
    CodeTooLarge { size: usize, limit: usize },
    #[error("timeout {timeout} must be greater than 0 and at most {max}")]
    BadTimeout { timeout: f64, max: f64 },
    #[error("{waiting} executions are already waiting on this sandbox")]
    SandboxBusy { waiting: usize },

    // Ports (`ports.rs`).
    #[error("ports: {reason}")]
    BadPorts { reason: String },
    #[error(
        "sandbox {id} does not expose port {port}; create it with \"ports\": [{port}] (or \
         \"all_ports\": true for ports 1024-65535)"
    )]
    PortNotExposed { id: String, port: u16 },
    #[error("nothing in sandbox {id} answers on port {port}: {reason}")]
    PortUnreachable {
        id: String,
        port: u16,
        reason: String,
    },

    // Code contexts.
    #[error("no context {context:?} in sandbox {sandbox}")]
    NoContext { sandbox: String, context: String },
    #[error("sandbox {sandbox} already has {max} contexts, the most it may have")]
    TooManyContexts { sandbox: String, max: usize },
    #[error("the default context cannot be deleted (restart it instead)")]
    DefaultContextPermanent,
    #[error("the sandbox refused {kind} for {context:?}: {reason}")]
    ContextRefused {
        kind: &'static str,
        context: String,
        reason: String,
    },
    #[error("the sandbox did not answer {kind} within {secs} s")]
    ContextNoAnswer { kind: &'static str, secs: u64 },
    #[error("the sandbox's processes died ({why}); its state is lost")]
    DiedInContextRequest { why: String },

    // Saved state: pause and resume, forks, snapshots.
    #[error("no snapshot {id}")]
    SnapshotNotFound { id: String },
    #[error("{what} is corrupt: {reason}")]
    StateCorrupt { what: String, reason: String },
    #[error("the sandbox's state could not be saved ({reason}); the sandbox is unchanged")]
    CaptureFailed { reason: String },
    #[error(
        "the sandbox's processes died while saving its state ({why}); they restart in place \
         and its variables are lost (its files are kept)"
    )]
    DiedSaving { why: String },
    #[error("the saved state could not be loaded into the new processes: {reason}")]
    StateLoad { reason: String },
    #[error("count must be between 1 and {max}, not {count}")]
    BadForkCount { count: u64, max: u64 },
    #[error("a snapshot name is 1 to 128 characters without control characters")]
    BadSnapshotName,
    #[error("snapshot {snapshot} is of template {has:?}, not {asked:?}")]
    SnapshotTemplate {
        snapshot: String,
        has: String,
        asked: String,
    },
    #[error("sandboxes {a} and {b} are not of one family: neither descends from the other's first ancestor")]
    NotOneFamily { a: String, b: String },
    #[error("sandbox {sandbox} could not digest its variables: {reason}")]
    DigestFailed { sandbox: String, reason: String },
    #[error("a volume name is 1 to 48 of a-z, 0-9, '_' and '-', starting with a letter or digit, not {name:?}")]
    BadVolumeName { name: String },
    #[error("volume path {path:?}: {reason}")]
    BadVolumePath { path: String, reason: &'static str },
    #[error("a sandbox mounts at most {max} volumes")]
    TooManyVolumes { max: usize },
    #[error("no volume named {name:?}")]
    VolumeNotFound { name: String },
    #[error("a volume named {name:?} exists already")]
    VolumeExists { name: String },
    #[error("volume {name:?} is mounted {how} by sandbox {by}")]
    VolumeInUse {
        name: String,
        by: String,
        how: &'static str,
    },
    #[error("preparing a volume's mount: {source}")]
    VolumeMount { source: io::Error },
    /// A granted host path could not be opened without following a symlink, or cloned as a
    /// read-only mount (it changed since it was checked, or went away).
    #[error("host path {host:?} cannot be mounted: {source}")]
    HostMount { host: String, source: io::Error },
    #[error("{op} {path}: {source}")]
    StateFile {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },

    // Files and artifacts.
    #[error(transparent)]
    File(#[from] FileError),
    #[error(
        "the sandbox's disk quota is full (disk_mb = {disk_mb}); the partial file was removed"
    )]
    QuotaExceeded { disk_mb: u64 },
    #[error("the upload is larger than the limit of {limit} bytes")]
    UploadTooLarge { limit: u64 },
    #[error("reading the upload failed: {source}")]
    UploadRead { source: io::Error },
    /// A tar entry refused before anything was written outside the staging directory.
    #[error("invalid archive: entry {entry:?}: {why}")]
    InvalidArchive { entry: String, why: Refusal },
    #[error("an artifact is named by its SHA-256: 64 lowercase hex digits")]
    BadArtifactName,
    #[error("no artifact {sha} (never stored, or past its retention)")]
    ArtifactNotFound { sha: String },
    #[error("artifact store: {op}: {source}")]
    Artifacts { op: &'static str, source: io::Error },

    #[error(
        "this server runs without governance (SANDLOT_AUTH=off): sandboxes get no network \
         and no secrets"
    )]
    NetworkUnavailable,
    #[error("invalid network settings: {why}")]
    BadNetwork { why: String },
    #[error("cannot make the sandbox's egress listener: {source}")]
    EgressListener { source: io::Error },
    #[error(
        "sandbox {id} was contained after a guardrail finding: it takes no more executions or \
         writes (its files can still be read; delete it when done)"
    )]
    Contained { id: String },

    // Failures of the server itself.
    #[error("{task} did not finish: {source}")]
    Task {
        task: &'static str,
        source: JoinError,
    },
    #[error("encoding {what}: {source}")]
    Encode {
        what: &'static str,
        source: serde_json::Error,
    },
}

/// Why a template's zygote did not start; its message becomes the template's `error`.
#[derive(Debug, thiserror::Error)]
pub enum ZygoteStartError {
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    #[error(transparent)]
    Zygote(#[from] ZygoteError),
    #[error(
        "its imports or setup started {0} threads; a zygote must be single-threaded to fork \
         (cap thread pools, e.g. OMP_NUM_THREADS=1, and start no threads in setup)"
    )]
    Threaded(u64),
}

/// What went wrong at one step of creating a sandbox (the step is in [`RuntimeError::Create`]).
#[derive(Debug, thiserror::Error)]
pub enum CreateFailure {
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error(transparent)]
    Sys(#[from] nix::Error),
    #[error(transparent)]
    Zygote(#[from] ZygoteError),
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("control stream closed: {0}")]
    Closed(io::Error),
    #[error("{0}")]
    Protocol(&'static str),
    #[error("process {0} does not belong to the sandbox")]
    NotOurs(i32),
}

/// Why a template spec was refused before anything was built.
#[derive(Debug, thiserror::Error)]
pub enum TemplateSpecError {
    #[error(
        "template name {0:?} must be 1-63 characters of a-z, 0-9, '-' and '_', starting with a \
         letter or digit"
    )]
    Name(String),
    #[error("at most 200 packages")]
    TooManyPackages,
    #[error("package {0:?} must be pinned as name==version")]
    Unpinned(String),
    #[error("package {0:?} is not a valid name==version pin")]
    BadPin(String),
    #[error("at most 200 imports")]
    TooManyImports,
    #[error("import {0:?} is not a module name")]
    BadImport(String),
    #[error("setup code must be at most 1 MiB and contain no NUL byte")]
    Setup,
    #[error("description must be at most 4096 bytes")]
    Description,
}

/// Why a file operation on a sandbox's workspace failed: the client's path refused, what the
/// kernel answered for it, or the sandbox gone.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    // The path itself, refused before anything is opened.
    #[error("path contains a NUL byte")]
    PathHasNul,
    #[error("path is longer than 4096 bytes")]
    PathTooLong,
    #[error("absolute path {0:?} is outside /workspace")]
    OutsideWorkspace(String),
    #[error("path {0:?} contains '..'")]
    DotDot(String),
    #[error("a path component is longer than 255 bytes")]
    ComponentTooLong,
    #[error("path names the workspace itself")]
    NamesWorkspace,
    #[error("refusing to remove the workspace itself")]
    RemoveWorkspace,
    #[error("the workspace is a directory")]
    ReadWorkspace,

    // What the kernel answered for the path (`files::map_errno`).
    #[error("{0}: no such file or directory")]
    NotFound(String),
    #[error("{0}: a parent is not a directory")]
    ParentNotDirectory(String),
    #[error("{0}: is or passes through a symlink")]
    Symlink(String),
    #[error("{0}: leaves the workspace")]
    LeavesWorkspace(String),
    #[error("{0}: is a directory")]
    IsDirectory(String),
    #[error("{path}: is a {kind}, not a regular file")]
    NotRegular { path: String, kind: &'static str },
    #[error("{0}: is a FIFO or socket, not a regular file")]
    Fifo(String),
    #[error("{0}: name too long")]
    NameTooLong(String),
    #[error("{0}: exists and is not a directory")]
    NotADirectory(String),
    #[error("{0}: file too large")]
    TooLarge(String),
    #[error("the workspace is full")]
    WorkspaceFull,
    #[error("the file is larger than the sandbox allows")]
    WriteTooLarge,
    #[error("{path}: {}", .errno.desc())]
    Os { path: String, errno: nix::Error },
    #[error("write: {0}")]
    Write(io::Error),

    // The sandbox behind the workspace.
    #[error("the sandbox is gone")]
    SandboxGone,
    #[error("the sandbox's processes are gone")]
    ProcessesGone,
    #[error("the sandbox has no workspace")]
    NoWorkspace,
    #[error(
        "the sandbox has no free pseudo-terminal: its programs hold all its devpts instance has"
    )]
    NoFreePty,
}

/// Why `sandlot __zygote-launch` could not become a zygote.
#[derive(Debug, thiserror::Error)]
pub enum ZygoteLaunchError {
    #[error("bad zygote config: {0}")]
    Config(serde_json::Error),
    #[error("zygote launch failed: {0}")]
    Launch(JailError),
}

/// Tags a failure with the step of creation it happened at.
pub(crate) fn at<E: Into<CreateFailure>>(step: &'static str) -> impl FnOnce(E) -> RuntimeError {
    move |e| RuntimeError::Create {
        step,
        source: e.into(),
    }
}

/// Tags a serialization failure with what was being encoded.
pub(crate) fn encoding(what: &'static str) -> impl FnOnce(serde_json::Error) -> RuntimeError {
    move |source| RuntimeError::Encode { what, source }
}

/// Tags a store failure with the operation.
pub(crate) fn store(op: &'static str) -> impl FnOnce(StoreError) -> RuntimeError {
    move |source| RuntimeError::Store {
        op,
        source: Box::new(source),
    }
}
