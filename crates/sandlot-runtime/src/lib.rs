//! sandlot's runtime: owns how sandboxes run. One zygote per template forks each sandbox into
//! fresh namespaces (see ARCHITECTURE.md); this crate drives executions over the sandbox's
//! control channel, enforces timeouts and expiry from outside, moves files in and out through
//! fd-relative paths, and records everything in the store.
//!
//! This file holds the configuration, the [`Runtime`] handle and [`Runtime::start`]. The
//! runtime's state is a handful of owned parts, each its own type in its own module with the
//! methods that touch only its state:
//!
//! - `registry`: the sandboxes (`Entry`), their uids, the creation queue, graves, recovery
//! - `templates::Templates`: templates and what their zygotes are built from
//! - `storage`: the store and recorder, artifacts, workspaces, volumes' claims
//! - `hooks`: what the server installs after start (governance, idle-pause gate, events)
//! - `cgroups`: this server's cgroup hierarchy and base group
//!
//! `Runtime` is the facade over them. Every concern of `Runtime` is its own `impl Runtime`
//! block in its own file:
//!
//! - `admission`: limits, env and metadata checks, capacity and the creation queue
//! - `spawn`: creating a sandbox, and the server's half of the creation handshake
//! - `pool`: warm sandboxes booted ahead of requests
//! - `teardown`: killing a sandbox, removing its cgroup, freeing its uid (the one place)
//! - `restart`: restarting a sandbox's processes in place, and the restart-loop bound
//! - `sandboxes`: looking sandboxes up, listing, deleting
//! - `exec`: executions; `contexts`: code contexts; `files`: the workspace; `artifacts`
//! - `workspace`: the sandbox's files on disk, which outlive its processes
//! - `templates`: templates and their zygotes; `housekeeping`: recovery, expiry, shutdown
//! - `e2b`: what only E2B's envd and process protocol need (command pipes, stat/mkdir/move,
//!   moving a sandbox's expiry)

mod admission;
pub mod archive;
pub mod artifacts;
pub mod assets;
mod background;
mod cgroups;
mod contexts;
mod diff;
mod disk_caps;
pub mod e2b;
pub mod env_build;
pub mod error;
mod events;
mod exec;
pub mod files;
mod fork;
pub mod govern;
mod hooks;
pub mod host_mounts;
mod housekeeping;
mod inputs;
mod kill;
mod pause;
mod pool;
mod ports;
mod recorder;
mod registry;
mod request;
mod restart;
mod rollback;
mod sandbox;
mod sandboxes;
mod saved;
mod snapshots;
mod spawn;
mod storage;
mod task;
mod teardown;
pub mod templates;
pub mod uids;
mod unshare_guard;
mod usage;
mod util;
mod volumes;
mod workspace;
pub mod zygote;
mod zygote_config;

use registry::Entry;
use sandlot_jail::cgroup::Hierarchy;
use sandlot_store::Store;
use sandlot_types::EffectiveLimits;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use error::{FileError, RuntimeError, ZygoteLaunchError};
pub use events::Listener;
pub use files::ByteStream;
pub use pause::IdlePauseGate;
pub use sandboxes::TenantUsage;
pub use usage::{RuntimeGauges, SandboxUsage};
pub use util::{new_id, now_rfc3339};
pub use zygote_config::zygote_launch_main;

/// Configuration of the runtime; `sandlot serve` builds it from flags and environment.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// The data dir: store, templates, sandbox state.
    pub data_dir: PathBuf,
    /// The Python virtual environment sandboxes run in (provisioned by `sandlot-env`).
    pub python_env: PathBuf,
    /// Where environments of templates with extra packages are provisioned; `None` refuses
    /// such templates.
    pub envs_dir: Option<PathBuf>,
    /// Largest accepted code size in bytes.
    pub max_code_bytes: usize,
    /// Largest accepted file upload in bytes.
    pub max_file_bytes: u64,
    /// Default and maximum execution timeout in seconds.
    pub default_exec_timeout: f64,
    pub max_exec_timeout: f64,
    /// Output budget per stream per execution, in bytes.
    pub max_output_bytes: usize,
    /// Most live sandboxes at once.
    pub max_sandboxes: usize,
    /// Sandboxes kept booted and ready per template, handed out on creation.
    pub pool_size: usize,
    /// Creations run at most this many at a time; more wait in a queue of at most
    /// `max_pending_creates`, past which creation fails with `capacity_exhausted`.
    pub max_concurrent_creates: usize,
    pub max_pending_creates: usize,
    /// The cgroup hierarchy's mount point (normally `/sys/fs/cgroup`).
    pub cgroup_root: PathBuf,
    /// The group under which sandlot creates its own (relative to each hierarchy's root).
    pub cgroup_parent: PathBuf,
    /// The executable that implements `__zygote-launch` and `__build-jail` (normally the
    /// running `sandlot`).
    pub launcher: PathBuf,
    /// The package index environment builds may download from (`SANDLOT_PIP_INDEX_URL`);
    /// `None`: pip's own default index.
    pub pip_index_url: Option<String>,
    /// Default limits and lifetimes of new sandboxes.
    pub default_limits: EffectiveLimits,
    /// The most an `isolated` sandbox may ask for.
    pub max_limits: EffectiveLimits,
    /// The most a `trusted` sandbox (a tier the policy grants) may ask for.
    pub trusted_max_limits: EffectiveLimits,
    pub default_idle_timeout: u64,
    pub default_max_lifetime: u64,
    /// Largest file kept as an artifact; larger ones are listed without content.
    pub max_artifact_bytes: u64,
    /// Artifacts not stored again for this long are deleted.
    pub artifact_retention_secs: u64,
    /// Which workspace backend to use in `<data-dir>/disk` (Btrfs where the kernel and
    /// `mkfs.btrfs` allow, else per-sandbox loop images).
    pub workspace_backend: sandlot_workspace::BackendChoice,
    /// How long a paused sandbox is kept before it expires; `None` keeps it until deleted.
    pub paused_retention_secs: Option<u64>,
    /// Size the Btrfs workspace image is first allocated at (it grows in steps while the host
    /// has room); `None` keeps the workspace crate's default (4 GiB).
    pub workspace_image_bytes: Option<u64>,
    /// Most files (inodes) one workspace may hold (`sandlot_workspace::WorkspaceConfig::max_files`);
    /// `None`: no cap beyond its bytes.
    pub max_files: Option<u64>,
}

impl RuntimeConfig {
    pub fn new(data_dir: PathBuf, python_env: PathBuf) -> Self {
        Self {
            data_dir,
            python_env,
            envs_dir: None,
            max_code_bytes: 1 << 20,
            max_file_bytes: 1 << 30,
            default_exec_timeout: 60.0,
            max_exec_timeout: 3600.0,
            max_output_bytes: 1 << 20,
            max_sandboxes: 2000,
            pool_size: 2,
            max_concurrent_creates: 4,
            max_pending_creates: 256,
            cgroup_root: PathBuf::from("/sys/fs/cgroup"),
            cgroup_parent: PathBuf::from("sandlot"),
            launcher: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("sandlot")),
            pip_index_url: None,
            default_limits: EffectiveLimits {
                memory_mb: 1024,
                cpu_millis: 1000,
                pids: 256,
                disk_mb: 5120,
            },
            max_limits: EffectiveLimits {
                memory_mb: 16384,
                cpu_millis: 64000,
                pids: 4096,
                disk_mb: 16384,
            },
            trusted_max_limits: EffectiveLimits {
                memory_mb: 65536,
                cpu_millis: 64000,
                pids: 16384,
                disk_mb: 65536,
            },
            default_idle_timeout: 20 * 60,
            default_max_lifetime: 24 * 3600,
            max_artifact_bytes: 256 << 20,
            artifact_retention_secs: 7 * 24 * 3600,
            workspace_backend: Default::default(),
            workspace_image_bytes: None,
            max_files: Some(sandlot_workspace::DEFAULT_MAX_FILES),
            paused_retention_secs: Some(30 * 24 * 3600),
        }
    }
}

/// Handle to the runtime; cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

/// The runtime's state: its configuration and the parts that own the rest, each with its own
/// state and the methods that touch only that state. `impl Runtime` blocks (one per concern,
/// in their own files) combine them.
struct Inner {
    config: RuntimeConfig,
    /// This server's cgroup hierarchy and base group (`cgroups.rs`).
    cgroups: cgroups::Cgroups,
    /// The sandboxes, their uids, the creation queue, graves (`registry.rs`).
    registry: registry::Registry,
    /// Templates and what their zygotes are built from (`templates.rs`).
    templates: templates::Templates,
    /// The store and recorder, artifacts, workspaces, volumes (`storage.rs`).
    storage: storage::Storage,
    /// What the server installs after start: governance, the idle-pause gate, event
    /// listeners (`hooks.rs`).
    hooks: hooks::Hooks,
}

/// What the start of this server found and did about what the previous run left behind.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Recovery {
    /// Sandboxes the previous run left (stopped, failed, paused, or lost without a workspace).
    pub sandboxes: usize,
    /// Executions it left unfinished, now recorded as killed.
    pub executions_marked: usize,
    /// From the start of recovery to the runtime being ready, in milliseconds.
    pub duration_ms: f64,
}

impl Runtime {
    /// Starts the runtime: cleans up what a previous server run left behind (marking its
    /// sandboxes lost), installs the Python side, and starts the default template's zygote.
    pub async fn start(config: RuntimeConfig, store: Store) -> Result<Self, RuntimeError> {
        if !nix::unistd::geteuid().is_root() {
            return Err(RuntimeError::NotRoot);
        }
        // SAFETY: prctl with integer arguments. Sandbox inits reparent to us when the zygote's
        // child that forked them exits, so we can reap them.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        let hierarchy = Hierarchy::detect(&config.cgroup_root)
            .map_err(|source| RuntimeError::DetectCgroups { source })?;
        let data_dir = std::fs::canonicalize(&config.data_dir)
            .map_err(data_dir_error("canonicalize", &config.data_dir))?;
        let instance = util::short_hash(data_dir.to_string_lossy().as_bytes());
        let cgroup_base = config.cgroup_parent.join(&instance);
        let slots = uids::Slots::new(&instance);

        let lib_dir = data_dir.join("lib");
        assets::install(&lib_dir, &[])?;
        let staging = data_dir.join("run").join("root");
        std::fs::create_dir_all(&staging).map_err(data_dir_error("mkdir", &staging))?;
        let templates_dir = data_dir.join("templates");
        std::fs::create_dir_all(&templates_dir).map_err(data_dir_error("mkdir", &templates_dir))?;
        let env_root = std::fs::canonicalize(&config.python_env).map_err(|source| {
            RuntimeError::PythonEnv {
                path: config.python_env.clone(),
                source,
            }
        })?;
        zygote_config::check_env_visible(&env_root)?;
        let config_slots = config.max_concurrent_creates.max(1);
        let store = Arc::new(store);
        let artifacts_dir = data_dir.join("artifacts");
        let artifact_store = Arc::new(
            artifacts::Store::open(
                artifacts_dir,
                config.max_artifact_bytes,
                Duration::from_secs(config.artifact_retention_secs),
            )
            .map_err(|source| RuntimeError::Artifacts { op: "open", source })?,
        );
        // Before any zygote: a server restart finds every workspace a previous run left.
        let mut disk_cfg = sandlot_workspace::WorkspaceConfig {
            backend: config.workspace_backend,
            max_files: config.max_files,
            ..sandlot_workspace::WorkspaceConfig::new(data_dir.join(workspace::DIR))
        };
        if let Some(bytes) = config.workspace_image_bytes {
            // A small first image keeps small growth steps and headroom, so it stays small
            // until workspaces really fill it.
            let image = &mut disk_cfg.image;
            image.initial_bytes = bytes;
            image.grow_step_bytes = image.grow_step_bytes.min(bytes.max(256 << 20));
            image.headroom_bytes = image.headroom_bytes.min((bytes / 2).max(128 << 20));
        }
        let workspaces = crate::task::blocking("opening the workspaces", move || {
            sandlot_workspace::Workspaces::open(disk_cfg)
        })
        .await?
        .map_err(|source| RuntimeError::OpenWorkspaces { source })?;
        tracing::info!(
            backend = %workspaces.backend().kind,
            reason = %workspaces.backend().reason,
            "workspaces on disk"
        );
        let runtime_inner = Inner {
            config,
            cgroups: cgroups::Cgroups {
                hierarchy,
                base: cgroup_base,
            },
            registry: registry::Registry::new(slots, config_slots),
            templates: templates::Templates::new(lib_dir, staging, env_root.clone()),
            storage: storage::Storage::new(store, artifact_store, workspaces, data_dir.clone()),
            hooks: Default::default(),
        };
        let rt = Runtime {
            inner: Arc::new(runtime_inner),
        };
        rt.recover()?;
        let default = rt.register(
            sandlot_types::DEFAULT_TENANT,
            templates::default_spec(),
            env_root,
        )?;
        rt.start_zygote(&default).await?;
        // Templates created by earlier runs are rebuilt in the background.
        for (tenant, spec) in rt.saved_templates() {
            let rt2 = rt.clone();
            tokio::spawn(async move {
                let _ = rt2.create_template(&tenant, spec).await;
            });
        }
        rt.start_housekeeping();
        Ok(rt)
    }
}

/// Names the operation and the path of the data dir in a failure to prepare it.
fn data_dir_error(
    op: &'static str,
    path: &std::path::Path,
) -> impl FnOnce(std::io::Error) -> RuntimeError {
    let path = path.to_path_buf();
    move |source| RuntimeError::DataDir { op, path, source }
}
