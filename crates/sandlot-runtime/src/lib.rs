//! sandlot's runtime: owns how sandboxes run. One zygote per template forks each sandbox into
//! fresh namespaces (see ARCHITECTURE.md); this crate drives executions over the sandbox's
//! control channel, enforces timeouts and expiry from outside, moves files in and out through
//! fd-relative paths, and records everything in the store.

pub mod artifacts;
pub mod assets;
mod contexts;
mod exec;
pub mod files;
mod recorder;
mod sandbox;
pub mod templates;
mod util;
pub mod zygote;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use sandbox::Live;
use sandlot_jail::cgroup::{Cgroup, CgroupLimits, Hierarchy};
use sandlot_jail::config::{Bind, JailConfig, RlimitConfig, ZygoteConfig};
use sandlot_store::Store;
use sandlot_types::{
    ApiError, CreateSandbox, EffectiveLimits, ErrorCode, ExecuteRequest, ExecutionRecord,
    ExecutionResult, FileEntry, OutputEvent, Sandbox, SandboxState, Template, TemplateSpec,
    TemplateStatus,
};
use std::collections::HashMap;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use templates::Tmpl;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use zygote::{Zygote, ZygoteSpec};

pub use util::now_rfc3339;

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
    /// The executable that implements `__zygote-launch` (normally the running `sandlot`).
    pub launcher: PathBuf,
    /// Default limits and lifetimes of new sandboxes.
    pub default_limits: EffectiveLimits,
    pub max_limits: EffectiveLimits,
    pub default_idle_timeout: u64,
    pub default_max_lifetime: u64,
    /// Largest file kept as an artifact; larger ones are listed without content.
    pub max_artifact_bytes: u64,
    /// Artifacts not stored again for this long are deleted.
    pub artifact_retention_secs: u64,
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
            default_limits: EffectiveLimits {
                memory_mb: 1024,
                cpu_millis: 1000,
                pids: 256,
                disk_mb: 1024,
            },
            max_limits: EffectiveLimits {
                memory_mb: 16384,
                cpu_millis: 64000,
                pids: 4096,
                disk_mb: 16384,
            },
            default_idle_timeout: 20 * 60,
            default_max_lifetime: 24 * 3600,
            max_artifact_bytes: 256 << 20,
            artifact_retention_secs: 7 * 24 * 3600,
        }
    }
}

/// Host uids of sandboxes: a block of 65536 ids derived from the data dir, so that servers
/// with different data dirs on one host do not hand out the same uid.
struct Slots {
    base: u32,
    free: Vec<u32>,
}

impl Slots {
    fn new(instance: &str) -> Self {
        let h = instance
            .bytes()
            .fold(0u32, |a, b| a.wrapping_mul(31).wrapping_add(b as u32));
        let base = 0x4000_0000 + (h % 16000) * 65536;
        Self {
            base,
            free: (1..65535).rev().collect(),
        }
    }
    fn alloc(&mut self) -> Option<u32> {
        self.free.pop().map(|s| self.base + s)
    }
    fn release(&mut self, uid: u32) {
        self.free.push(uid - self.base);
    }
}

/// A sandbox the runtime knows about right now.
struct Entry {
    info: Mutex<Sandbox>,
    live: Arc<Live>,
    last_active: Mutex<Instant>,
    created: Instant,
    waiting: AtomicUsize,
}

/// Handle to the runtime; cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    config: RuntimeConfig,
    store: Arc<Store>,
    recorder: recorder::Recorder,
    hierarchy: Hierarchy,
    /// `<parent>/<instance>`: this server's groups.
    cgroup_base: PathBuf,
    slots: Mutex<Slots>,
    sandboxes: Mutex<HashMap<String, Arc<Entry>>>,
    templates: Mutex<HashMap<String, Arc<Tmpl>>>,
    lib_dir: PathBuf,
    staging: PathBuf,
    default_env: PathBuf,
    /// Sandboxes being created or waiting to be (counted against capacity).
    creating: AtomicUsize,
    create_slots: tokio::sync::Semaphore,
    /// Set on shutdown: no more pool refills.
    closing: std::sync::atomic::AtomicBool,
    /// Files executions created or changed, content-addressed under `<data-dir>/artifacts/`.
    artifacts: Arc<artifacts::Store>,
}

/// A byte stream of a file being uploaded.
pub type ByteStream = std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, std::io::Error>> + Send>>;

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(ErrorCode::Internal, e.to_string())
}

/// Most executions that may wait behind a running one on the same sandbox.
const MAX_QUEUED: usize = 16;

impl Runtime {
    /// Starts the runtime: cleans up what a previous server run left behind (marking its
    /// sandboxes lost), installs the Python side, and starts the default template's zygote.
    pub async fn start(config: RuntimeConfig, store: Store) -> anyhow::Result<Self> {
        if !nix::unistd::geteuid().is_root() {
            anyhow::bail!(
                "sandlot needs root for its jail: a host uid per sandbox (uid maps for other uids), \
                 cgroup limits and the zygote's private base root all need it, and a rootless mode \
                 is not built yet. Run it as root (e.g. with sudo); `sandlot doctor` shows which \
                 layers this machine supports"
            );
        }
        // SAFETY: prctl with integer arguments. Sandbox inits reparent to us when the zygote's
        // child that forked them exits, so we can reap them.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        let hierarchy = Hierarchy::detect(&config.cgroup_root)?;
        let data_dir = std::fs::canonicalize(&config.data_dir)?;
        let instance = util::short_hash(data_dir.to_string_lossy().as_bytes());
        let cgroup_base = config.cgroup_parent.join(&instance);
        let slots = Slots::new(&instance);

        let lib_dir = data_dir.join("lib");
        assets::install(&lib_dir, &[])?;
        let staging = data_dir.join("run").join("root");
        std::fs::create_dir_all(&staging)?;
        std::fs::create_dir_all(data_dir.join("templates"))?;
        let env_root = std::fs::canonicalize(&config.python_env)?;
        check_env_visible(&env_root)?;
        let config_slots = config.max_concurrent_creates.max(1);
        let store = Arc::new(store);
        let artifact_store = Arc::new(artifacts::Store::open(
            data_dir.join("artifacts"),
            config.max_artifact_bytes,
            Duration::from_secs(config.artifact_retention_secs),
        )?);
        let runtime_inner = Inner {
            config,
            recorder: recorder::Recorder::start(store.clone()),
            store,
            hierarchy,
            cgroup_base,
            slots: Mutex::new(slots),
            sandboxes: Mutex::new(HashMap::new()),
            templates: Mutex::new(HashMap::new()),
            lib_dir,
            staging,
            default_env: env_root.clone(),
            creating: AtomicUsize::new(0),
            create_slots: tokio::sync::Semaphore::new(config_slots),
            closing: Default::default(),
            artifacts: artifact_store,
        };
        let rt = Runtime {
            inner: Arc::new(runtime_inner),
        };
        rt.recover()?;
        let default = rt.register(templates::default_spec(), env_root.clone())?;
        rt.start_zygote(&default)
            .await
            .map_err(|e| anyhow::anyhow!(e.message))?;
        // Templates created by earlier runs are rebuilt in the background.
        for spec in rt.saved_templates() {
            let rt2 = rt.clone();
            tokio::spawn(async move {
                let _ = rt2.create_template(spec).await;
            });
        }
        let weak = Arc::downgrade(&rt.inner);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let Some(inner) = weak.upgrade() else { return };
                Runtime { inner }.housekeeping().await;
            }
        });
        Ok(rt)
    }

    /// Marks what a previous run left as lost and kills its processes.
    fn recover(&self) -> anyhow::Result<()> {
        let inner = &self.inner;
        let lost = inner.store.mark_running_lost(
            "the server restarted; the sandbox's processes were killed",
            &now_rfc3339(),
        )?;
        if !lost.is_empty() {
            tracing::info!(
                count = lost.len(),
                "marked sandboxes of a previous run lost"
            );
        }
        for name in inner.hierarchy.children(&inner.cgroup_base) {
            let cg = Cgroup::open(&inner.hierarchy, &inner.cgroup_base.join(&name));
            if let Err(e) = cg.kill_all(Duration::from_secs(5)) {
                tracing::warn!(group = %name, error = %e, "could not empty a leftover cgroup");
            }
            let _ = cg.remove();
        }
        Ok(())
    }

    /// Registers a template with the environment it runs in (replacing one of the same name;
    /// sandboxes already forked from the old one live on). Its zygote starts later.
    fn register(&self, spec: TemplateSpec, env_root: PathBuf) -> anyhow::Result<Arc<Tmpl>> {
        let name = spec.name.clone();
        assets::install_templates(
            &self.inner.lib_dir,
            &[(name.clone(), templates::zygote_file(&spec))],
        )?;
        let version = util::short_hash(
            format!("{}|{}", serde_json::to_string(&spec)?, env_root.display()).as_bytes(),
        );
        let zygote_uid = self
            .inner
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .alloc()
            .ok_or_else(|| anyhow::anyhow!("no free uid for a zygote"))?;
        let cfg = zygote_config(
            &env_root,
            &self.inner.lib_dir,
            &self.inner.staging,
            zygote_uid,
            &self.inner.hierarchy,
            &self.inner.cgroup_base.join(format!("zygote-{name}")),
            &name,
        )?;
        let tmpl = Arc::new(Tmpl {
            spec,
            version,
            created_at: now_rfc3339(),
            state: Mutex::new((TemplateStatus::Building, None, None)),
            zygote_spec: Mutex::new(Some(ZygoteSpec {
                template: name.clone(),
                launcher: self.inner.config.launcher.clone(),
                config: cfg,
                ready_timeout: Duration::from_secs(300),
            })),
            zygote: tokio::sync::RwLock::new(None),
            zygote_uid,
            env_root,
            pool: Mutex::new(Vec::new()),
            refilling: Default::default(),
        });
        let old = self
            .inner
            .templates
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name, tmpl.clone());
        if let Some(old) = old {
            let rt = self.clone();
            rt.drain_pool(&old);
            tokio::spawn(async move {
                if let Some(z) = old.zygote.write().await.take() {
                    z.kill();
                }
                rt.release_uid(old.zygote_uid);
            });
        }
        Ok(tmpl)
    }

    /// Starts (or restarts) a template's zygote and marks the template ready or failed.
    async fn start_zygote(&self, t: &Arc<Tmpl>) -> Result<Arc<Zygote>, ApiError> {
        let mut slot = t.zygote.write().await;
        if let Some(z) = slot.as_ref() {
            if z.alive() {
                return Ok(z.clone());
            }
            tracing::warn!(template = %t.spec.name, "zygote died; restarting it");
        }
        let Some(spec) = t
            .zygote_spec
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        else {
            return Err(ApiError::new(
                ErrorCode::TemplateNotReady,
                "the template has no environment yet",
            ));
        };
        let cg_rel = self
            .inner
            .cgroup_base
            .join(format!("zygote-{}", t.spec.name));
        let hierarchy = self.inner.hierarchy.clone();
        let started = Instant::now();
        let res = tokio::task::spawn_blocking(move || {
            // The zygote's own limits: its memory is what every sandbox shares.
            Cgroup::create(&hierarchy, &cg_rel, &CgroupLimits { memory_bytes: 8 << 30, pids: 64, cpu_millis: 0 })
                .map_err(|e| e.to_string())?;
            let z = Zygote::start(&spec).map_err(|e| e.to_string())?;
            if z.threads > 1 {
                let n = z.threads;
                z.kill();
                return Err(format!(
                    "its imports or setup started {n} threads; a zygote must be single-threaded to fork \
                     (cap thread pools, e.g. OMP_NUM_THREADS=1, and start no threads in setup)"
                ));
            }
            Ok(z)
        })
        .await
        .map_err(internal)?;
        let z = match res {
            Ok(z) => z,
            Err(e) => {
                tracing::error!(template = %t.spec.name, error = %e, "zygote failed to start");
                t.set(TemplateStatus::Failed, Some(e.clone()), None);
                return Err(ApiError::new(
                    ErrorCode::TemplateNotReady,
                    format!("template {:?} failed: {e}", t.spec.name),
                ));
            }
        };
        tracing::info!(
            template = %t.spec.name,
            pid = z.pid,
            prepare_s = z.prepare_seconds,
            total_ms = started.elapsed().as_millis() as u64,
            "zygote ready"
        );
        t.set(TemplateStatus::Ready, None, Some(z.prepare_seconds));
        let z = Arc::new(z);
        *slot = Some(z.clone());
        drop(slot);
        self.refill(t);
        Ok(z)
    }

    async fn zygote(&self, t: &Arc<Tmpl>) -> Result<Arc<Zygote>, ApiError> {
        if let Some(z) = t.zygote.read().await.as_ref() {
            if z.alive() {
                return Ok(z.clone());
            }
        }
        self.start_zygote(t).await
    }

    fn template(&self, name: &str) -> Result<Arc<Tmpl>, ApiError> {
        self.inner
            .templates
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
            .ok_or_else(|| {
                ApiError::new(
                    ErrorCode::TemplateNotFound,
                    format!("no template named {name:?}"),
                )
            })
    }

    fn saved_templates(&self) -> Vec<TemplateSpec> {
        let dir = self.inner.config.data_dir.join("templates");
        let Ok(rd) = std::fs::read_dir(&dir) else {
            return vec![];
        };
        rd.filter_map(|e| e.ok())
            .filter_map(|e| std::fs::read(e.path()).ok())
            .filter_map(|b| serde_json::from_slice::<TemplateSpec>(&b).ok())
            .filter(|s| s.name != "default")
            .collect()
    }

    /// Registers a template and builds it in the background: provisions its environment when
    /// it has extra packages, then starts its zygote (imports and setup). Returns at once with
    /// status `building`; poll `get_template`.
    pub async fn create_template(&self, spec: TemplateSpec) -> Result<Template, ApiError> {
        templates::validate(&spec)?;
        if spec.name == "default" {
            return Err(ApiError::new(
                ErrorCode::InvalidArgument,
                "the default template cannot be replaced",
            ));
        }
        self.resolve_limits(&spec.limits)?;
        let path = self
            .inner
            .config
            .data_dir
            .join("templates")
            .join(format!("{}.json", spec.name));
        let json = serde_json::to_vec_pretty(&spec).map_err(internal)?;
        std::fs::write(&path, json).map_err(internal)?;
        // Listed at once as building; registered for real once its environment exists.
        let placeholder = self
            .register(spec.clone(), self.inner.default_env.clone())
            .map_err(internal)?;
        *placeholder
            .zygote_spec
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
        let view = placeholder.view();
        let rt = self.clone();
        tokio::spawn(async move {
            let env = match rt.template_env(&placeholder.spec).await {
                Ok(env) => env,
                Err(e) => {
                    tracing::error!(template = %placeholder.spec.name, error = %e, "template environment failed");
                    placeholder.set(TemplateStatus::Failed, Some(e), None);
                    return;
                }
            };
            match rt.register(placeholder.spec.clone(), env) {
                Ok(t) => {
                    let _ = rt.start_zygote(&t).await;
                }
                Err(e) => placeholder.set(TemplateStatus::Failed, Some(e.to_string()), None),
            }
        });
        Ok(view)
    }

    /// The environment a template runs in: the default one, or one with its extra packages.
    async fn template_env(&self, spec: &TemplateSpec) -> Result<PathBuf, String> {
        if spec.packages.is_empty() {
            return Ok(self.inner.default_env.clone());
        }
        let Some(envs) = self.inner.config.envs_dir.clone() else {
            return Err("this server has no environments directory configured; templates with packages are refused".into());
        };
        let pins = spec.packages.clone();
        tokio::task::spawn_blocking(move || {
            let refs: Vec<&str> = pins.iter().map(String::as_str).collect();
            let env_spec = sandlot_env::EnvSpec::default_spec()
                .try_with_extras(&refs)
                .map_err(|e| e.to_string())?;
            sandlot_env::ensure(&envs, &env_spec, sandlot_env::Progress::Plain)
                .map(|env| env.root)
                .map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| e.to_string())?
    }

    pub async fn list_templates(&self) -> Vec<Template> {
        let map = self
            .inner
            .templates
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<Template> = map.values().map(|t| t.view()).collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    pub async fn get_template(&self, name: &str) -> Result<Template, ApiError> {
        Ok(self.template(name)?.view())
    }

    fn resolve_limits(&self, req: &sandlot_types::Limits) -> Result<EffectiveLimits, ApiError> {
        let d = self.inner.config.default_limits;
        let m = self.inner.config.max_limits;
        let pick = |name: &str, v: Option<u64>, def: u64, max: u64| -> Result<u64, ApiError> {
            match v {
                None => Ok(def),
                Some(0) => Err(ApiError::new(
                    ErrorCode::InvalidArgument,
                    format!("limits.{name} must be greater than 0"),
                )),
                Some(v) if v > max => Err(ApiError::new(
                    ErrorCode::InvalidArgument,
                    format!("limits.{name} = {v} is above the server's maximum of {max}"),
                )),
                Some(v) => Ok(v),
            }
        };
        Ok(EffectiveLimits {
            memory_mb: pick("memory_mb", req.memory_mb, d.memory_mb, m.memory_mb)?,
            cpu_millis: pick("cpu_millis", req.cpu_millis, d.cpu_millis, m.cpu_millis)?,
            pids: pick("pids", req.pids, d.pids, m.pids)?,
            disk_mb: pick("disk_mb", req.disk_mb, d.disk_mb, m.disk_mb)?,
        })
    }

    pub async fn create_sandbox(&self, req: CreateSandbox) -> Result<Sandbox, ApiError> {
        let template = req.template.clone().unwrap_or_else(|| "default".into());
        let tmpl = self.template(&template)?;
        match tmpl.status() {
            (TemplateStatus::Ready, _) => {}
            (TemplateStatus::Building, _) => {
                return Err(ApiError::new(
                    ErrorCode::TemplateNotReady,
                    format!("template {template:?} is still building"),
                ))
            }
            (TemplateStatus::Failed, e) => {
                return Err(ApiError::new(
                    ErrorCode::TemplateNotReady,
                    format!(
                        "template {template:?} failed to build: {}",
                        e.unwrap_or_default()
                    ),
                ))
            }
        }
        validate_env(&req.env)?;
        validate_metadata(&req.metadata)?;
        let mut wanted = tmpl.spec.limits.clone();
        let r = &req.limits;
        wanted.memory_mb = r.memory_mb.or(wanted.memory_mb);
        wanted.cpu_millis = r.cpu_millis.or(wanted.cpu_millis);
        wanted.pids = r.pids.or(wanted.pids);
        wanted.disk_mb = r.disk_mb.or(wanted.disk_mb);
        let limits = self.resolve_limits(&wanted)?;

        let idle = positive(
            "idle_timeout",
            req.idle_timeout,
            self.inner.config.default_idle_timeout,
        )?;
        let lifetime = positive(
            "max_lifetime",
            req.max_lifetime,
            self.inner.config.default_max_lifetime,
        )?;

        let live_count = self
            .inner
            .sandboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len();
        if live_count + self.inner.creating.load(Ordering::SeqCst)
            >= self.inner.config.max_sandboxes
        {
            return Err(ApiError::new(
                ErrorCode::CapacityExhausted,
                format!(
                    "the server already runs its maximum of {} sandboxes",
                    self.inner.config.max_sandboxes
                ),
            ));
        }
        let queued = self.inner.creating.fetch_add(1, Ordering::SeqCst);
        if queued >= self.inner.config.max_pending_creates {
            self.inner.creating.fetch_sub(1, Ordering::SeqCst);
            return Err(ApiError::new(
                ErrorCode::CapacityExhausted,
                format!(
                    "{queued} sandbox creations are already queued (the limit is {}); retry shortly",
                    self.inner.config.max_pending_creates
                ),
            ));
        }
        let result = async {
            let _permit = self.inner.create_slots.acquire().await.map_err(internal)?;
            self.spawn(&tmpl, &req, limits, idle, lifetime).await
        }
        .await;
        self.inner.creating.fetch_sub(1, Ordering::SeqCst);
        result
    }

    async fn spawn(
        &self,
        tmpl: &Arc<Tmpl>,
        req: &CreateSandbox,
        limits: EffectiveLimits,
        idle: u64,
        lifetime: u64,
    ) -> Result<Sandbox, ApiError> {
        let live = match self.take_pooled(tmpl, limits) {
            Some(live) => live,
            None => self.boot(tmpl, limits).await?,
        };
        self.refill(tmpl);
        let id = live.id.clone();
        if !req.env.is_empty() {
            let msg = serde_json::json!({"type": "env", "env": req.env});
            if let Err(e) = live.send(&msg).await {
                self.discard(live);
                return Err(ApiError::new(
                    ErrorCode::SandboxFailed,
                    format!("the sandbox died while starting: {e}"),
                ));
            }
        }
        let now = time::OffsetDateTime::now_utc();
        let info = Sandbox {
            id: id.clone(),
            template: tmpl.spec.name.clone(),
            template_version: tmpl.version.clone(),
            state: SandboxState::Running,
            env: req.env.clone(),
            metadata: req.metadata.clone(),
            limits,
            idle_timeout: idle,
            max_lifetime: lifetime,
            created_at: util::rfc3339(now),
            last_active_at: util::rfc3339(now),
            expires_at: util::rfc3339(now + Duration::from_secs(lifetime)),
            ended_reason: None,
        };
        if let Err(e) = self.inner.store.insert_sandbox(&info) {
            self.discard(live);
            return Err(internal(e));
        }
        let entry = Arc::new(Entry {
            info: Mutex::new(info.clone()),
            live,
            last_active: Mutex::new(Instant::now()),
            created: Instant::now(),
            waiting: AtomicUsize::new(0),
        });
        self.inner
            .sandboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, entry);
        Ok(info)
    }

    /// Boots a sandbox of `tmpl` with `limits`: a uid, a cgroup, a fork of the zygote jailed.
    async fn boot(&self, tmpl: &Arc<Tmpl>, limits: EffectiveLimits) -> Result<Arc<Live>, ApiError> {
        let id = util::new_id("sb_");
        let uid = self
            .inner
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .alloc()
            .ok_or_else(|| ApiError::new(ErrorCode::CapacityExhausted, "no free sandbox uid"))?;
        let cg = match Cgroup::create(
            &self.inner.hierarchy,
            &self.inner.cgroup_base.join(&id),
            &cgroup_limits(limits),
        ) {
            Ok(cg) => cg,
            Err(e) => {
                self.release_uid(uid);
                return Err(internal(e));
            }
        };
        match self.spawn_in(tmpl, &id, uid, &cg, limits).await {
            Ok(live) => Ok(live),
            Err(e) => {
                let _ = cg.kill_all(Duration::from_secs(5));
                let _ = cg.remove();
                self.release_uid(uid);
                Err(e)
            }
        }
    }

    /// A booted, idle sandbox of `tmpl` from its pool, with its cgroup set to `limits`; `None`
    /// when the pool is empty or the workspace size differs (a tmpfs is sized when mounted).
    fn take_pooled(&self, tmpl: &Arc<Tmpl>, limits: EffectiveLimits) -> Option<Arc<Live>> {
        loop {
            let live = {
                let mut pool = tmpl.pool.lock().unwrap_or_else(|e| e.into_inner());
                match pool.first() {
                    Some(l) if l.limits.disk_mb == limits.disk_mb => pool.remove(0),
                    _ => return None,
                }
            };
            if live.is_dead() || live.init_exited() {
                self.discard(live);
                continue;
            }
            if live.limits != limits && live.cgroup.set_limits(&cgroup_limits(limits)).is_err() {
                self.discard(live);
                continue;
            }
            return Some(live);
        }
    }

    /// Tops up `tmpl`'s pool in the background, one boot at a time.
    fn refill(&self, tmpl: &Arc<Tmpl>) {
        let want = self.inner.config.pool_size;
        if want == 0 || tmpl.refilling.swap(true, Ordering::SeqCst) {
            return;
        }
        let rt = self.clone();
        let tmpl = tmpl.clone();
        tokio::spawn(async move {
            let limits = match rt.resolve_limits(&tmpl.spec.limits) {
                Ok(l) => l,
                Err(_) => rt.inner.config.default_limits,
            };
            loop {
                let have = tmpl.pool.lock().unwrap_or_else(|e| e.into_inner()).len();
                let current = rt
                    .template(&tmpl.spec.name)
                    .map(|t| Arc::ptr_eq(&t, &tmpl))
                    .unwrap_or(false);
                if have >= want || !current || rt.inner.closing.load(Ordering::SeqCst) {
                    break;
                }
                match rt.boot(&tmpl, limits).await {
                    Ok(live) => {
                        // Touch the pages a first cell needs now, not on the client's time.
                        let _ = live.send(&serde_json::json!({"type": "warm"})).await;
                        tmpl.pool
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(live);
                    }
                    Err(e) => {
                        tracing::warn!(template = %tmpl.spec.name, error = %e.message, "could not boot a pooled sandbox");
                        break;
                    }
                }
            }
            tmpl.refilling.store(false, Ordering::SeqCst);
        });
    }

    /// Kills a sandbox that never reached a client.
    fn discard(&self, live: Arc<Live>) -> tokio::task::JoinHandle<()> {
        let rt = self.clone();
        tokio::task::spawn_blocking(move || {
            live.kill();
            rt.cleanup(&live);
        })
    }

    /// Kills every pooled sandbox of `tmpl`; the handles finish when each is gone.
    fn drain_pool(&self, tmpl: &Tmpl) -> Vec<tokio::task::JoinHandle<()>> {
        let pooled: Vec<Arc<Live>> =
            std::mem::take(&mut *tmpl.pool.lock().unwrap_or_else(|e| e.into_inner()));
        pooled.into_iter().map(|live| self.discard(live)).collect()
    }

    fn release_uid(&self, uid: u32) {
        self.inner
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .release(uid);
    }

    async fn spawn_in(
        &self,
        tmpl: &Arc<Tmpl>,
        id: &str,
        uid: u32,
        cg: &Cgroup,
        limits: EffectiveLimits,
    ) -> Result<Arc<Live>, ApiError> {
        let failed = |step: &str, e: &dyn std::fmt::Display| {
            ApiError::new(
                ErrorCode::SandboxFailed,
                format!("creating the sandbox failed at {step}: {e}"),
            )
        };
        let (ours, theirs) =
            std::os::unix::net::UnixStream::pair().map_err(|e| failed("socketpair", &e))?;
        let (out_r, out_w) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| failed("pipe", &e))?;
        let (err_r, err_w) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| failed("pipe", &e))?;
        let jail = JailConfig {
            hostname: "sandbox".into(),
            workspace_bytes: limits.disk_mb << 20,
            workspace_inodes: 65536.max(limits.disk_mb * 64),
            tmp_bytes: (limits.disk_mb << 20).min(1 << 30),
            shm_bytes: (limits.memory_mb << 20) / 4,
            rlimits: RlimitConfig {
                fsize: limits.disk_mb << 20,
                ..RlimitConfig::default()
            },
            landlock: true,
            seccomp: true,
        };
        let jail = serde_json::to_value(&jail).map_err(internal)?;
        let env_root = tmpl.env_root.clone();
        // Only the base environment goes through the zygote; the creator's variables (often
        // secrets) are sent on the sandbox's own channel once it is up.
        let env = serde_json::to_value(sandbox_env(&env_root)).map_err(internal)?;

        let t0 = Instant::now();
        let fds = [theirs.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd()];
        // A zygote that died (or was killed mid-fork) is restarted once and asked again.
        let mut attempt = 0;
        let p0 = loop {
            let zygote = self.zygote(tmpl).await?;
            let (idc, jail, env, z2) = (id.to_string(), jail.clone(), env.clone(), zygote.clone());
            let r = tokio::task::spawn_blocking(move || z2.spawn(&idc, &jail, &env, fds))
                .await
                .map_err(internal)?;
            match r {
                Ok(p) => break p,
                Err(e @ zygote::ZygoteError::Refused(_)) => return Err(failed("fork", &e)),
                Err(e) if attempt == 0 => {
                    tracing::warn!(error = %e, "the zygote failed while forking; restarting it");
                    zygote.kill();
                    attempt += 1;
                }
                Err(e) => return Err(failed("fork", &e)),
            }
        };
        drop((theirs, out_w, err_w));
        let t_fork = t0.elapsed();
        ours.set_nonblocking(true)
            .map_err(|e| failed("socket", &e))?;
        let mut ctrl = tokio::net::UnixStream::from_std(ours).map_err(|e| failed("socket", &e))?;
        let deadline = Duration::from_secs(15);
        // Joining a cgroup can wait for an RCU grace period (milliseconds on cgroup v1); do it
        // while the child unshares its namespaces. The child forks nothing before "go".
        let cg_join = {
            let cg = cg.clone();
            tokio::task::spawn_blocking(move || cg.add(p0))
        };
        let handshake = async {
            let b = sandbox::read_byte(&mut ctrl)
                .await
                .map_err(|e| failed("handshake", &e))?;
            if b != sandlot_jail::child::UNSHARED {
                return Err(failed("namespaces", &"the child failed before unsharing"));
            }
            let t_unshared = t0.elapsed();
            sandlot_jail::idmap::write_maps(Path::new("/proc"), p0, uid, uid)
                .map_err(|e| failed("id maps", &e))?;
            cg_join
                .await
                .map_err(internal)?
                .map_err(|e| failed("cgroup", &e))?;
            ctrl.write_all(&[sandlot_jail::child::GO])
                .await
                .map_err(|e| failed("handshake", &e))?;
            let t_go = t0.elapsed();
            let (mut r, w) = ctrl.into_split();
            let init = sandbox::read_frame(&mut r)
                .await
                .map_err(|e| failed("init", &e))?;
            let init_pid = frame_pid(&init).ok_or_else(|| jail_failure(&init))?;
            let t_init = t0.elapsed();
            let hello = sandbox::read_frame(&mut r)
                .await
                .map_err(|e| failed("driver start", &e))?;
            if hello.get("type").and_then(|t| t.as_str()) != Some("hello") {
                return Err(jail_failure(&hello));
            }
            tracing::debug!(fork = ?t_fork, unshared = ?t_unshared, go = ?t_go, init = ?t_init, hello = ?t0.elapsed(), "sandbox start phases");
            Ok((r, w, init_pid))
        };
        let (r, w, init_pid) = match tokio::time::timeout(deadline, handshake).await {
            Ok(res) => res?,
            Err(_) => return Err(failed("start", &"timed out")),
        };
        let driver_pid =
            first_child(init_pid).ok_or_else(|| failed("driver", &"no driver process"))?;
        // Pidfds first, then the check: if the processes are still the sandbox's after the
        // pidfds exist, the pidfds refer to them for good.
        let init_fd = sandbox::pidfd_open(init_pid).map_err(|e| failed("pidfd", &e))?;
        let driver_fd = sandbox::pidfd_open(driver_pid).map_err(|e| failed("pidfd", &e))?;
        for pid in [init_pid, driver_pid] {
            if owner_uid(pid) != Some(uid) {
                return Err(failed(
                    "verify",
                    &format!("process {pid} does not belong to the sandbox"),
                ));
            }
        }
        let events = sandbox::start_pump(r, out_r, err_r).map_err(|e| failed("pump", &e))?;
        let live = Arc::new(Live {
            id: id.to_string(),
            limits,
            host_uid: uid,
            cgroup: cg.clone(),
            init_pid,
            driver_pid,
            init_fd,
            driver_fd,
            writer: tokio::sync::Mutex::new(w),
            events: tokio::sync::Mutex::new(events),
            exec_lock: tokio::sync::Mutex::new(()),
            running: Mutex::new(None),
            dead: Default::default(),
            interrupt: Default::default(),
            contexts: Mutex::new(vec![contexts::default_context()]),
        });
        Ok(live)
    }

    fn entry(&self, id: &str) -> Result<Arc<Entry>, ApiError> {
        if let Some(e) = self
            .inner
            .sandboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
        {
            return Ok(e.clone());
        }
        Err(self.gone_or_missing(id))
    }

    fn gone_or_missing(&self, id: &str) -> ApiError {
        match self.inner.store.get_sandbox(id) {
            Ok(Some(s)) => ApiError::new(
                ErrorCode::SandboxGone,
                format!(
                    "sandbox {id} is {}: {}",
                    state_word(s.state),
                    s.ended_reason.unwrap_or_else(|| "it ended".into())
                ),
            ),
            _ => ApiError::new(
                ErrorCode::SandboxNotFound,
                format!("no sandbox with id {id:?}"),
            ),
        }
    }

    /// Live sandboxes, or every recorded one with `include_ended`.
    pub async fn list_sandboxes(&self, include_ended: bool) -> Result<Vec<Sandbox>, ApiError> {
        if include_ended {
            return self.inner.store.list_sandboxes(true).map_err(internal);
        }
        let map = self
            .inner
            .sandboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<Sandbox> = map
            .values()
            .map(|e| e.info.lock().unwrap_or_else(|e| e.into_inner()).clone())
            .collect();
        v.sort_by(|a, b| a.created_at.cmp(&b.created_at));
        Ok(v)
    }

    /// A live sandbox; `sandbox_gone` (410) for one that ended, `sandbox_not_found` (404) for
    /// an id never seen.
    pub async fn get_sandbox(&self, id: &str) -> Result<Sandbox, ApiError> {
        let e = self.entry(id)?;
        let info = e.info.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Ok(info)
    }

    pub async fn delete_sandbox(&self, id: &str) -> Result<(), ApiError> {
        let e = self.entry(id)?;
        self.end(&e, SandboxState::Deleted, "deleted by request")
            .await;
        Ok(())
    }

    /// Ends a sandbox: kills its processes, removes its cgroup, records why.
    async fn end(&self, e: &Arc<Entry>, state: SandboxState, reason: &str) {
        let removed = {
            let mut map = self
                .inner
                .sandboxes
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            map.remove(&e.live.id).is_some()
        };
        if !removed {
            return;
        }
        let live = e.live.clone();
        let rt = self.clone();
        // The processes are gone when this returns; removing the cgroup (which waits for the
        // kernel to retire it) and freeing the uid happen in the background.
        let killed = live.clone();
        let _ = tokio::task::spawn_blocking(move || killed.kill()).await;
        tokio::task::spawn_blocking(move || rt.cleanup(&live));
        let mut info = e.info.lock().unwrap_or_else(|e| e.into_inner()).clone();
        info.state = state;
        info.ended_reason = Some(reason.to_string());
        info.last_active_at = now_rfc3339();
        if let Err(err) = self.inner.store.update_sandbox(&info) {
            tracing::error!(error = %err, "recording the end of a sandbox failed");
        }
    }

    fn cleanup(&self, live: &Live) {
        for _ in 0..100 {
            if live.cgroup.remove().is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.release_uid(live.host_uid);
    }

    /// Runs code; when `events` is given every output event is also sent there as it is
    /// produced (for SSE). Executions on one sandbox run one at a time, in arrival order.
    pub async fn execute(
        &self,
        id: &str,
        req: ExecuteRequest,
        events: Option<mpsc::UnboundedSender<OutputEvent>>,
    ) -> Result<ExecutionResult, ApiError> {
        let cfg = &self.inner.config;
        if req.code.len() > cfg.max_code_bytes {
            return Err(ApiError::new(
                ErrorCode::PayloadTooLarge,
                format!(
                    "code is {} bytes; the limit is {}",
                    req.code.len(),
                    cfg.max_code_bytes
                ),
            ));
        }
        let timeout = match req.timeout {
            None => cfg.default_exec_timeout,
            Some(t) if t.is_finite() && t > 0.0 && t <= cfg.max_exec_timeout => t,
            Some(t) => {
                return Err(ApiError::new(
                    ErrorCode::InvalidArgument,
                    format!(
                        "timeout {t} must be greater than 0 and at most {}",
                        cfg.max_exec_timeout
                    ),
                ))
            }
        };
        let e = self.entry(id)?;
        if e.waiting.fetch_add(1, Ordering::SeqCst) >= MAX_QUEUED {
            e.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(ApiError::new(
                ErrorCode::SandboxBusy,
                format!("{MAX_QUEUED} executions are already waiting on this sandbox"),
            ));
        }
        let guard = e.live.exec_lock.lock().await;
        e.waiting.fetch_sub(1, Ordering::SeqCst);
        if e.live.is_dead() {
            return Err(self.gone_or_missing(id));
        }
        // Checked under the lock: a context deleted by a request queued ahead is gone.
        e.live.check_context(req.context.as_deref())?;
        self.touch(&e);
        let exec_id = util::new_id("ex_");
        let record = ExecutionRecord {
            id: exec_id.clone(),
            sandbox_id: id.to_string(),
            code: req.code.clone(),
            language: req.language,
            started_at: now_rfc3339(),
            result: None,
        };
        self.inner.recorder.started(record);
        let result = exec::run(
            &e.live,
            &exec_id,
            &req,
            timeout,
            cfg.max_output_bytes,
            events,
            &self.inner.artifacts,
        )
        .await;
        self.inner.recorder.finished(&exec_id, &result);
        drop(guard);
        self.touch(&e);
        if !result.sandbox_alive {
            let why = match result.end_state {
                sandlot_types::EndState::Oom => {
                    "the sandbox ran out of memory and its driver was killed"
                }
                sandlot_types::EndState::Timeout => {
                    "an execution would not stop after its timeout; the sandbox was killed"
                }
                _ => "the sandbox's processes died during an execution",
            };
            self.end(&e, SandboxState::Lost, why).await;
        }
        Ok(result)
    }

    fn touch(&self, e: &Entry) {
        *e.last_active.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        e.info
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last_active_at = now_rfc3339();
    }

    /// Interrupts the running execution (KeyboardInterrupt in Python, SIGINT in Bash).
    /// Returns whether an execution was running.
    pub async fn interrupt(&self, id: &str) -> Result<bool, ApiError> {
        let e = self.entry(id)?;
        let running = e
            .live
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some();
        if running {
            e.live.interrupt.notify_one();
        }
        Ok(running)
    }

    pub async fn list_executions(&self, id: &str) -> Result<Vec<ExecutionRecord>, ApiError> {
        let known = self
            .inner
            .sandboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(id)
            || matches!(self.inner.store.get_sandbox(id), Ok(Some(_)));
        if !known {
            return Err(ApiError::new(
                ErrorCode::SandboxNotFound,
                format!("no sandbox with id {id:?}"),
            ));
        }
        self.inner.recorder.flush().await;
        self.inner.store.list_executions(id).map_err(internal)
    }

    /// Writes a file under the workspace (creating parent directories), streaming the body.
    pub async fn write_file(
        &self,
        id: &str,
        path: &str,
        mut body: ByteStream,
    ) -> Result<FileEntry, ApiError> {
        let e = self.entry(id)?;
        self.touch(&e);
        let (live, uid) = (e.live.clone(), e.live.host_uid);
        let p = path.to_string();
        let l1 = live.clone();
        let (file, shown) = tokio::task::spawn_blocking(move || {
            l1.workspace()
                .and_then(|ws| files::create_file(&ws, uid, &p))
        })
        .await
        .map_err(internal)??;
        let max = self.inner.config.max_file_bytes;
        let (tx, mut rx) = mpsc::channel::<Bytes>(8);
        let writer = tokio::task::spawn_blocking(move || -> Result<(), ApiError> {
            let mut file = file;
            while let Some(chunk) = rx.blocking_recv() {
                file.write_all(&chunk).map_err(|e| io_to_api(e, "write"))?;
            }
            Ok(())
        });
        let mut total = 0u64;
        let mut failure = None;
        while let Some(chunk) = body.next().await {
            match chunk {
                Ok(c) => {
                    total += c.len() as u64;
                    if total > max {
                        failure = Some(ApiError::new(
                            ErrorCode::FileTooLarge,
                            format!("the upload is larger than the limit of {max} bytes"),
                        ));
                        break;
                    }
                    if tx.send(c).await.is_err() {
                        break;
                    }
                }
                Err(err) => {
                    failure = Some(ApiError::new(
                        ErrorCode::InvalidRequest,
                        format!("reading the upload failed: {err}"),
                    ));
                    break;
                }
            }
        }
        drop(tx);
        let written = writer.await.map_err(internal)?;
        if let Some(f) = failure.or(written.err()) {
            let p = shown.clone();
            let l2 = live.clone();
            let _ = tokio::task::spawn_blocking(move || {
                l2.workspace().and_then(|ws| files::remove(&ws, &p))
            })
            .await;
            return Err(f);
        }
        tokio::task::spawn_blocking(move || {
            live.workspace().and_then(|ws| files::entry_of(&ws, &shown))
        })
        .await
        .map_err(internal)?
    }

    /// Opens a regular file of the workspace for reading; returns its size and a reader.
    pub async fn read_file(
        &self,
        id: &str,
        path: &str,
    ) -> Result<(u64, tokio::fs::File), ApiError> {
        let e = self.entry(id)?;
        self.touch(&e);
        let live = e.live.clone();
        let p = path.to_string();
        let (f, size) = tokio::task::spawn_blocking(move || {
            live.workspace().and_then(|ws| files::open_file(&ws, &p))
        })
        .await
        .map_err(internal)??;
        Ok((size, tokio::fs::File::from_std(f)))
    }

    /// Lists a directory of the workspace (`""` is the root), recursively when asked.
    pub async fn list_files(
        &self,
        id: &str,
        path: &str,
        recursive: bool,
    ) -> Result<Vec<FileEntry>, ApiError> {
        let e = self.entry(id)?;
        self.touch(&e);
        let live = e.live.clone();
        let p = path.to_string();
        tokio::task::spawn_blocking(move || {
            live.workspace()
                .and_then(|ws| files::list(&ws, &p, recursive))
        })
        .await
        .map_err(internal)?
    }

    /// Opens a stored artifact by its SHA-256: its size, MIME type and a reader. Artifacts
    /// outlive their sandboxes (until their retention passes).
    pub async fn open_artifact(
        &self,
        sha256: &str,
    ) -> Result<(u64, String, tokio::fs::File), ApiError> {
        let store = self.inner.artifacts.clone();
        let sha = sha256.to_string();
        let (size, mime, f) = tokio::task::spawn_blocking(move || store.open_artifact(&sha))
            .await
            .map_err(internal)??;
        Ok((size, mime, tokio::fs::File::from_std(f)))
    }

    /// Removes a file or (recursively) a directory of the workspace.
    pub async fn delete_file(&self, id: &str, path: &str) -> Result<(), ApiError> {
        let e = self.entry(id)?;
        self.touch(&e);
        let live = e.live.clone();
        let p = path.to_string();
        tokio::task::spawn_blocking(move || live.workspace().and_then(|ws| files::remove(&ws, &p)))
            .await
            .map_err(internal)?
    }

    /// Expires idle and old sandboxes, notices dead ones, restarts a dead zygote.
    async fn housekeeping(&self) {
        if self.inner.artifacts.sweep_due() {
            let store = self.inner.artifacts.clone();
            tokio::task::spawn_blocking(move || store.sweep());
        }
        let entries = self.all_entries();
        for e in entries {
            let (idle, lifetime) = {
                let i = e.info.lock().unwrap_or_else(|e| e.into_inner());
                (i.idle_timeout, i.max_lifetime)
            };
            let busy = e
                .live
                .running
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_some()
                || e.waiting.load(Ordering::SeqCst) > 0;
            let idle_for = e
                .last_active
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .elapsed();
            if e.created.elapsed() >= Duration::from_secs(lifetime) {
                let why = format!("expired: reached its maximum lifetime of {lifetime} s");
                self.end(&e, SandboxState::Expired, &why).await;
            } else if !busy && idle_for >= Duration::from_secs(idle) {
                let why = format!("expired: idle for more than its idle timeout of {idle} s");
                self.end(&e, SandboxState::Expired, &why).await;
            } else if !busy && e.live.init_exited() {
                self.end(&e, SandboxState::Lost, "the sandbox's processes exited")
                    .await;
            }
        }
        let tmpls = self.all_templates();
        for t in tmpls {
            let dead = matches!(t.zygote.read().await.as_ref(), Some(z) if !z.alive());
            if dead {
                if let Err(e) = self.start_zygote(&t).await {
                    tracing::error!(template = %t.spec.name, error = %e.message, "restarting the zygote failed");
                }
            }
        }
    }

    fn all_templates(&self) -> Vec<Arc<Tmpl>> {
        let map = self
            .inner
            .templates
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        map.values().cloned().collect()
    }

    fn all_entries(&self) -> Vec<Arc<Entry>> {
        let map = self
            .inner
            .sandboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        map.values().cloned().collect()
    }

    /// Kills every sandbox and zygote; called on server shutdown.
    pub async fn shutdown(&self) {
        self.inner.closing.store(true, Ordering::SeqCst);
        let entries = self.all_entries();
        for e in entries {
            self.end(&e, SandboxState::Lost, "the server shut down")
                .await;
        }
        let tmpls = self.all_templates();
        for t in tmpls {
            for gone in self.drain_pool(&t) {
                let _ = gone.await;
            }
            if let Some(z) = t.zygote.write().await.take() {
                z.kill();
            }
            let zcg = self
                .inner
                .cgroup_base
                .join(format!("zygote-{}", t.spec.name));
            let _ = Cgroup::open(&self.inner.hierarchy, &zcg).remove();
        }
        // Sandbox groups are removed in the background; give them a moment, then remove
        // this server's own group (it only goes when empty).
        let base = Cgroup::open(&self.inner.hierarchy, &self.inner.cgroup_base);
        for _ in 0..50 {
            if base.remove().is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.inner.recorder.flush().await;
    }
}

/// Paths every sandbox (or zygote) mounts something of its own over: a Python environment
/// there would be hidden from the code that needs it.
const SHADOWED: &[&str] = &[
    "/tmp",
    "/var/tmp",
    "/workspace",
    "/dev",
    "/proc",
    "/opt/sandlot",
    "/etc",
];

/// The environment is bound into sandboxes at its own path (scripts in it name that path), so
/// it must not lie where a sandbox mounts its own directories.
fn check_env_visible(env_root: &Path) -> anyhow::Result<()> {
    for p in SHADOWED {
        if env_root.starts_with(p) {
            anyhow::bail!(
                "the Python environment {} lies under {p}, which every sandbox replaces with its own; \
                 choose an environments directory elsewhere (--env-dir or SANDLOT_ENV_DIR)",
                env_root.display()
            );
        }
    }
    Ok(())
}

fn cgroup_limits(l: EffectiveLimits) -> CgroupLimits {
    CgroupLimits {
        memory_bytes: l.memory_mb << 20,
        pids: l.pids,
        cpu_millis: l.cpu_millis,
    }
}

fn state_word(s: SandboxState) -> &'static str {
    match s {
        SandboxState::Running => "running",
        SandboxState::Deleted => "deleted",
        SandboxState::Expired => "expired",
        SandboxState::Lost => "lost",
    }
}

fn positive(name: &str, v: Option<u64>, def: u64) -> Result<u64, ApiError> {
    match v {
        None => Ok(def),
        Some(0) => Err(ApiError::new(
            ErrorCode::InvalidArgument,
            format!("{name} must be greater than 0"),
        )),
        Some(v) if v > 365 * 24 * 3600 => Err(ApiError::new(
            ErrorCode::InvalidArgument,
            format!("{name} must be at most one year"),
        )),
        Some(v) => Ok(v),
    }
}

fn validate_env(env: &std::collections::BTreeMap<String, String>) -> Result<(), ApiError> {
    if env.len() > 256 {
        return Err(ApiError::new(
            ErrorCode::InvalidArgument,
            "at most 256 environment variables",
        ));
    }
    for (k, v) in env {
        let ok_key = !k.is_empty()
            && k.len() <= 256
            && !k.starts_with(|c: char| c.is_ascii_digit())
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok_key {
            return Err(ApiError::new(
                ErrorCode::InvalidArgument,
                format!("invalid environment variable name {k:?}"),
            ));
        }
        if v.contains('\0') || v.len() > 32768 {
            return Err(ApiError::new(
                ErrorCode::InvalidArgument,
                format!("environment variable {k} has a NUL byte or is longer than 32768 bytes"),
            ));
        }
    }
    Ok(())
}

fn validate_metadata(m: &std::collections::BTreeMap<String, String>) -> Result<(), ApiError> {
    let size: usize = m.iter().map(|(k, v)| k.len() + v.len()).sum();
    if m.len() > 64 || size > 16384 {
        return Err(ApiError::new(
            ErrorCode::InvalidArgument,
            "metadata: at most 64 entries and 16 KiB",
        ));
    }
    Ok(())
}

fn frame_pid(v: &serde_json::Value) -> Option<i32> {
    (v.get("type")?.as_str()? == "init").then(|| v.get("pid")?.as_i64().map(|p| p as i32))?
}

fn jail_failure(v: &serde_json::Value) -> ApiError {
    let msg = v
        .get("message")
        .and_then(|m| m.as_str())
        .unwrap_or("unexpected message from the sandbox");
    ApiError::new(
        ErrorCode::SandboxFailed,
        format!("the sandbox failed to start: {msg}"),
    )
}

fn first_child(pid: i32) -> Option<i32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    s.split_whitespace().next()?.parse().ok()
}

fn owner_uid(pid: i32) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}"))
        .ok()
        .map(|m| m.uid())
}

fn io_to_api(e: std::io::Error, what: &str) -> ApiError {
    match e.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => {
            ApiError::new(ErrorCode::WorkspaceFull, "the workspace is full")
        }
        Some(libc::EFBIG) => ApiError::new(
            ErrorCode::FileTooLarge,
            "the file is larger than the sandbox allows",
        ),
        _ => ApiError::new(ErrorCode::Internal, format!("{what}: {e}")),
    }
}

/// The environment of zygotes and sandboxes: nothing of the server's own, an allowlist only.
fn sandbox_env(env_root: &Path) -> std::collections::BTreeMap<String, String> {
    let mut m = std::collections::BTreeMap::new();
    let bin = env_root.join("bin");
    let pairs = [
        (
            "PATH",
            format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display()),
        ),
        ("HOME", "/workspace".into()),
        ("USER", "user".into()),
        ("LANG", "C.UTF-8".into()),
        ("LC_ALL", "C.UTF-8".into()),
        ("TERM", "dumb".into()),
        ("SHELL", "/bin/bash".into()),
        ("VIRTUAL_ENV", env_root.display().to_string()),
        ("PYTHONPATH", format!("{}/python", assets::INSIDE_ROOT)),
        ("PYTHONDONTWRITEBYTECODE", "1".into()),
        ("PYTHONUNBUFFERED", "1".into()),
        ("MPLBACKEND", "Agg".into()),
        ("MPLCONFIGDIR", "/tmp/.config/matplotlib".into()),
        ("IPYTHONDIR", "/tmp/.ipython".into()),
        ("XDG_CACHE_HOME", "/tmp/.cache".into()),
        ("PIP_NO_INPUT", "1".into()),
        ("OPENBLAS_NUM_THREADS", "1".into()),
        ("OMP_NUM_THREADS", "1".into()),
        ("MKL_NUM_THREADS", "1".into()),
        ("NUMEXPR_NUM_THREADS", "1".into()),
    ];
    for (k, v) in pairs {
        m.insert(k.to_string(), v);
    }
    // Some CPUs need OpenBLAS told which kernel to use; pass that through.
    for k in ["OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"] {
        if let Ok(v) = std::env::var(k) {
            m.insert(k.to_string(), v);
        }
    }
    m
}

fn zygote_config(
    env_root: &Path,
    lib_dir: &Path,
    staging: &Path,
    uid: u32,
    hierarchy: &Hierarchy,
    cgroup_rel: &Path,
    template: &str,
) -> anyhow::Result<ZygoteConfig> {
    let mut binds = vec![
        Bind {
            source: env_root.to_path_buf(),
            target: env_root.to_path_buf(),
        },
        Bind {
            source: lib_dir.to_path_buf(),
            target: PathBuf::from(assets::INSIDE_ROOT),
        },
    ];
    // The venv's interpreter lives in its base prefix; bind it too when it is not under /usr.
    if let Ok(cfg) = std::fs::read_to_string(env_root.join("pyvenv.cfg")) {
        for line in cfg.lines() {
            if let Some(home) = line
                .strip_prefix("home")
                .map(|r| r.trim_start_matches([' ', '=']))
            {
                let home = Path::new(home.trim());
                if let Some(prefix) = home.parent() {
                    if !prefix.starts_with("/usr") && prefix.is_dir() {
                        binds.push(Bind {
                            source: prefix.to_path_buf(),
                            target: prefix.to_path_buf(),
                        });
                    }
                }
            }
        }
    }
    let cg = Cgroup::open(hierarchy, cgroup_rel);
    let python = env_root.join("bin/python");
    Ok(ZygoteConfig {
        staging_dir: staging.to_path_buf(),
        binds,
        uid,
        gid: uid,
        cgroup_procs: cg.procs_files(),
        argv: vec![
            python.display().to_string(),
            "-s".into(),
            format!("{}/python/sandlot_runtime/zygote.py", assets::INSIDE_ROOT),
            format!("{}/templates/{template}.json", assets::INSIDE_ROOT),
            format!("{}/lib/{}", assets::INSIDE_ROOT, assets::JAIL_LIB),
        ],
        env: sandbox_env(env_root).into_iter().collect(),
        tmp_bytes: 64 << 20,
        nofile: 4096,
    })
}

/// Entry point of `sandlot __zygote-launch <config json>`: confines this process as a zygote
/// and execs it. Never returns on success.
pub fn zygote_launch_main(config_json: &str) -> anyhow::Error {
    let cfg: ZygoteConfig = match serde_json::from_str(config_json) {
        Ok(c) => c,
        Err(e) => return anyhow::anyhow!("bad zygote config: {e}"),
    };
    match sandlot_jail::zygote::launch(&cfg) {
        Ok(never) => match never {},
        Err(e) => anyhow::anyhow!("zygote launch failed: {e}"),
    }
}
