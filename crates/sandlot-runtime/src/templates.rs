//! Templates: named environments sandboxes are forked from. Each has a spec (extra pinned
//! packages, modules to pre-import, setup code, default limits), a content-addressed version, a
//! Python environment (the default one, or one provisioned with its extra packages) and a
//! zygote that has imported its modules and run its setup once.
//!
//! The runtime's side (`impl Runtime`): registering a template, building it in the background
//! (its environment, then its zygote), starting and restarting zygotes, and looking templates
//! up. Replacing a template retires the old one (`teardown`); so does deleting it.
//!
//! Names are per tenant: templates are keyed by `(tenant, name)` (the registry, the spec saved
//! in the data dir at `templates/<tenant>/<name>.json`, the zygote's template file and cgroup),
//! so two tenants' `analysis` are two templates. The built-in `default` is the tenant
//! `default`'s and every tenant resolves `default` to it; no tenant may make its own
//! `default`. A spec saved before names were per tenant is the flat `templates/<name>.json`,
//! whose tenant the store's owner row says (`flat`), else `default`.

use crate::error::{encoding, store, RuntimeError, TemplateSpecError, ZygoteStartError};
use crate::kill::{empty_cgroup, KILL_WAIT};
use crate::task::blocking;
use crate::util::{self, lock, now_rfc3339};
use crate::zygote::{Zygote, ZygoteSpec};
use crate::zygote_config::zygote_config;
use crate::{assets, Runtime};
use sandlot_jail::cgroup::{Cgroup, CgroupLimits};
use sandlot_types::{Template, TemplateSpec, TemplateStatus};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The templates part of the runtime: every template by `(tenant, name)`, what their zygotes
/// are built from (the installed Python side, the staging root, the default environment), and
/// the lock that runs template deletions one at a time.
pub(crate) struct Templates {
    /// Templates by `(tenant, name)`.
    pub(crate) map: Mutex<HashMap<(String, String), Arc<Tmpl>>>,
    /// Template deletions, one at a time.
    pub(crate) ops: tokio::sync::Mutex<()>,
    /// `<data-dir>/lib`: the Python side and each template's zygote file (`assets.rs`).
    pub(crate) lib_dir: PathBuf,
    /// `<data-dir>/run/root`: where a zygote's base root is staged.
    pub(crate) staging: PathBuf,
    /// The Python environment of templates without extra packages.
    pub(crate) default_env: PathBuf,
}

impl Templates {
    pub(crate) fn new(lib_dir: PathBuf, staging: PathBuf, default_env: PathBuf) -> Self {
        Self {
            map: Default::default(),
            ops: Default::default(),
            lib_dir,
            staging,
            default_env,
        }
    }

    /// The template `(tenant, name)`, exactly (no `default` fallback).
    pub(crate) fn get(&self, tenant: &str, name: &str) -> Option<Arc<Tmpl>> {
        lock(&self.map)
            .get(&(tenant.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Every template, at this moment.
    pub(crate) fn all(&self) -> Vec<Arc<Tmpl>> {
        lock(&self.map).values().cloned().collect()
    }

    /// Puts `tmpl` under its key; returns the one it replaces.
    pub(crate) fn insert(&self, key: (String, String), tmpl: Arc<Tmpl>) -> Option<Arc<Tmpl>> {
        lock(&self.map).insert(key, tmpl)
    }
}

/// How long a zygote gets to import its modules and run its setup.
const ZYGOTE_READY_TIMEOUT: Duration = Duration::from_secs(300);

/// The built-in template: the data stack, imported once.
pub fn default_spec() -> TemplateSpec {
    TemplateSpec {
        name: "default".into(),
        description: Some(
            "Python with numpy, pandas, matplotlib (inline PNG figures) and IPython pre-imported"
                .into(),
        ),
        packages: vec![],
        imports: [
            "numpy",
            "pandas",
            "matplotlib",
            "matplotlib.pyplot",
            "IPython",
        ]
        .map(String::from)
        .to_vec(),
        setup: None,
        limits: Default::default(),
    }
}

/// A template the runtime knows, and its zygote once built.
pub struct Tmpl {
    /// The tenant whose template it is.
    pub tenant: String,
    pub spec: TemplateSpec,
    pub version: String,
    pub created_at: String,
    pub state: Mutex<(TemplateStatus, Option<String>, Option<f64>)>,
    pub zygote_spec: Mutex<Option<ZygoteSpec>>,
    pub zygote: tokio::sync::RwLock<Option<Arc<Zygote>>>,
    /// Host uid of this template's zygote.
    pub zygote_uid: u32,
    /// The zygote's cgroup (relative to the hierarchy): its own, named after its uid, so the
    /// zygote of a template re-posted under the same name never shares it.
    pub zygote_cgroup: PathBuf,
    /// Set when a template of the same name replaced this one: its zygote is not started
    /// again and its pool not refilled.
    pub retired: std::sync::atomic::AtomicBool,
    /// The Python environment its zygote and sandboxes run in.
    pub env_root: std::path::PathBuf,
    /// Booted, idle sandboxes waiting to be handed out, and whether a refill is running.
    pub pool: Mutex<Vec<Arc<crate::sandbox::Live>>>,
    pub refilling: std::sync::atomic::AtomicBool,
}

impl Tmpl {
    pub fn view(&self) -> Template {
        let (status, error, prepare) = lock(&self.state).clone();
        Template {
            name: self.spec.name.clone(),
            version: self.version.clone(),
            status,
            error,
            spec: self.spec.clone(),
            created_at: self.created_at.clone(),
            tenant: self.tenant.clone(),
            prepare_seconds: prepare,
        }
    }

    pub fn set(&self, status: TemplateStatus, error: Option<String>, prepare: Option<f64>) {
        *lock(&self.state) = (status, error, prepare);
    }

    pub fn status(&self) -> (TemplateStatus, Option<String>) {
        let s = lock(&self.state);
        (s.0, s.1.clone())
    }
}

/// Refuses what is not a template name (`[a-z0-9][a-z0-9_-]{0,62}`), as a spec with it would be.
pub(crate) fn check_template_name(name: &str) -> Result<(), TemplateSpecError> {
    if name_ok(name) {
        Ok(())
    } else {
        Err(TemplateSpecError::Name(name.chars().take(64).collect()))
    }
}

fn name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

fn is_identifier_path(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 200
        && s.split('.').all(|part| {
            let mut c = part.chars();
            matches!(c.next(), Some(f) if f.is_ascii_alphabetic() || f == '_')
                && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
        })
}

/// Checks a spec before anything is built.
pub fn validate(spec: &TemplateSpec) -> Result<(), TemplateSpecError> {
    check_template_name(&spec.name)?;
    if spec.packages.len() > 200 {
        return Err(TemplateSpecError::TooManyPackages);
    }
    for p in &spec.packages {
        let Some((name, version)) = p.split_once("==") else {
            return Err(TemplateSpecError::Unpinned(p.clone()));
        };
        let name_ok = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && name.starts_with(|c: char| c.is_ascii_alphanumeric());
        let version_ok = !version.is_empty()
            && version
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._+!-".contains(c));
        if !name_ok || !version_ok {
            return Err(TemplateSpecError::BadPin(p.clone()));
        }
    }
    if spec.imports.len() > 200 {
        return Err(TemplateSpecError::TooManyImports);
    }
    for m in &spec.imports {
        if !is_identifier_path(m) {
            return Err(TemplateSpecError::BadImport(m.clone()));
        }
    }
    if spec
        .setup
        .as_ref()
        .is_some_and(|s| s.len() > (1 << 20) || s.contains('\0'))
    {
        return Err(TemplateSpecError::Setup);
    }
    if spec.description.as_ref().is_some_and(|d| d.len() > 4096) {
        return Err(TemplateSpecError::Description);
    }
    Ok(())
}

/// The name of `tenant`'s template `name` among files and cgroups shared by every tenant (the
/// zygote's template file, its cgroup): the name itself for the tenant `default`, else
/// `<tenant>+<name>` (`+` is in neither tenant nor template names, so no two collide).
pub(crate) fn file_key(tenant: &str, name: &str) -> String {
    if tenant == sandlot_types::DEFAULT_TENANT {
        name.to_owned()
    } else {
        format!("{tenant}+{name}")
    }
}

/// The template file the zygote reads: what to import and the setup code.
pub fn zygote_file(spec: &TemplateSpec) -> String {
    serde_json::json!({"name": spec.name, "imports": spec.imports, "setup": spec.setup}).to_string()
}

impl Runtime {
    /// The cgroup of a template's zygote running as `uid`, relative to the hierarchy. Everything
    /// the zygote's imports and setup start stays in it (only the server moves a process out,
    /// and only a sandbox's first process, into the sandbox's own group), so killing it kills
    /// all that runs as the zygote's uid. (`.` is not in template names: no two templates'
    /// groups share a name.)
    pub(crate) fn zygote_cgroup(&self, template: &str, uid: u32) -> PathBuf {
        // `template` is a `file_key`.
        self.inner
            .cgroups
            .child(&format!("zygote-{template}.{uid}"))
    }

    /// Registers a template with the environment it runs in (replacing one of the same name;
    /// sandboxes already forked from the old one live on). Its zygote starts later.
    pub(crate) fn register(
        &self,
        tenant: &str,
        spec: TemplateSpec,
        env_root: PathBuf,
    ) -> Result<Arc<Tmpl>, RuntimeError> {
        let name = file_key(tenant, &spec.name);
        assets::install_templates(
            &self.inner.templates.lib_dir,
            &[(name.clone(), zygote_file(&spec))],
        )?;
        let spec_json = serde_json::to_string(&spec).map_err(encoding("the template spec"))?;
        let version = util::short_hash(format!("{spec_json}|{}", env_root.display()).as_bytes());
        let zygote_uid = lock(&self.inner.registry.slots)
            .alloc(crate::uids::Kind::Zygote)
            .ok_or(RuntimeError::NoFreeZygoteUid)?;
        let zygote_cgroup = self.zygote_cgroup(&name, zygote_uid);
        let cfg = zygote_config(
            &env_root,
            &self.inner.templates.lib_dir,
            &self.inner.templates.staging,
            zygote_uid,
            &self.inner.cgroups.open(&zygote_cgroup),
            &name,
        );
        let key = (tenant.to_owned(), spec.name.clone());
        let tmpl = Arc::new(Tmpl {
            tenant: tenant.to_owned(),
            spec,
            version,
            created_at: now_rfc3339(),
            state: Mutex::new((TemplateStatus::Building, None, None)),
            zygote_spec: Mutex::new(Some(ZygoteSpec {
                template: name.clone(),
                launcher: self.inner.config.launcher.clone(),
                config: cfg,
                ready_timeout: ZYGOTE_READY_TIMEOUT,
            })),
            zygote: tokio::sync::RwLock::new(None),
            zygote_uid,
            zygote_cgroup,
            retired: Default::default(),
            env_root,
            pool: Mutex::new(Vec::new()),
            refilling: Default::default(),
        });
        let old = self.inner.templates.insert(key, tmpl.clone());
        if let Some(old) = old {
            self.retire_template(old);
        }
        Ok(tmpl)
    }

    /// Starts (or restarts) a template's zygote and marks the template ready or failed.
    pub(crate) async fn start_zygote(&self, t: &Arc<Tmpl>) -> Result<Arc<Zygote>, RuntimeError> {
        let mut slot = t.zygote.write().await;
        if let Some(z) = slot.as_ref() {
            if z.alive() {
                return Ok(z.clone());
            }
            tracing::warn!(template = %t.spec.name, "zygote died; restarting it");
        }
        // Checked under the write lock retirement also takes: once retirement has taken the
        // zygote, nothing starts another in the group it is about to kill.
        if t.retired.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(RuntimeError::TemplateReplaced {
                name: t.spec.name.clone(),
            });
        }
        let Some(spec) = lock(&t.zygote_spec).clone() else {
            return Err(RuntimeError::TemplateNoEnvironment);
        };
        let cg_rel = t.zygote_cgroup.clone();
        let hierarchy = self.inner.cgroups.hierarchy.clone();
        let started = Instant::now();
        let res = blocking("starting a zygote", move || {
            // A restart after the zygote died: what its setup left running goes first, so the
            // new zygote's uid is shared with nothing of the old one.
            empty_cgroup(&Cgroup::open(&hierarchy, &cg_rel), KILL_WAIT);
            // The zygote's own limits: its memory is what every sandbox shares.
            let limits = CgroupLimits {
                memory_bytes: 8 << 30,
                pids: 64,
                cpu_millis: 0,
            };
            Cgroup::create(&hierarchy, &cg_rel, &limits)?;
            let z = Zygote::start(&spec)?;
            if z.threads > 1 {
                let n = z.threads;
                z.kill();
                return Err(ZygoteStartError::Threaded(n));
            }
            Ok(z)
        })
        .await?;
        let z = match res {
            Ok(z) => z,
            Err(source) => {
                tracing::error!(template = %t.spec.name, error = %source, "zygote failed to start");
                t.set(TemplateStatus::Failed, Some(source.to_string()), None);
                return Err(RuntimeError::ZygoteStart {
                    template: t.spec.name.clone(),
                    source,
                });
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

    /// The template's running zygote, restarted first if it died.
    pub(crate) async fn zygote(&self, t: &Arc<Tmpl>) -> Result<Arc<Zygote>, RuntimeError> {
        if let Some(z) = t.zygote.read().await.as_ref() {
            if z.alive() {
                return Ok(z.clone());
            }
        }
        self.start_zygote(t).await
    }

    /// `tenant`'s template `name` (`default` is the built-in for every tenant). Another
    /// tenant's template is as missing as one that never was.
    pub(crate) fn template(&self, tenant: &str, name: &str) -> Result<Arc<Tmpl>, RuntimeError> {
        let owner = if name == "default" {
            sandlot_types::DEFAULT_TENANT
        } else {
            tenant
        };
        self.inner
            .templates
            .get(owner, name)
            .ok_or_else(|| RuntimeError::TemplateNotFound {
                name: name.chars().take(64).collect(),
            })
    }

    /// Whether `tenant` has a template `name` to start from (its own, or the built-in
    /// `default`).
    pub fn has_template(&self, tenant: &str, name: &str) -> bool {
        self.template(tenant, name).is_ok()
    }

    /// Every template, at this moment.
    pub(crate) fn all_templates(&self) -> Vec<Arc<Tmpl>> {
        self.inner.templates.all()
    }

    /// Specs saved by earlier runs, with their tenants (the default template is built in):
    /// `templates/<tenant>/<name>.json`, then the flat `templates/<name>.json` of runs before
    /// names were per tenant (unless the same tenant's template was saved since).
    pub(crate) fn saved_templates(&self) -> Vec<(String, TemplateSpec)> {
        let dir = self.inner.config.data_dir.join("templates");
        let Ok(rd) = std::fs::read_dir(&dir) else {
            return vec![];
        };
        let read_spec = |p: &std::path::Path| {
            std::fs::read(p)
                .ok()
                .and_then(|b| serde_json::from_slice::<TemplateSpec>(&b).ok())
                .filter(|s| s.name != "default" && validate(s).is_ok())
        };
        let (mut out, mut flat) = (Vec::new(), Vec::new());
        for e in rd.filter_map(|e| e.ok()) {
            let path = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let tenant = e.file_name().to_string_lossy().into_owned();
                let tenant_like = !tenant.is_empty()
                    && tenant.bytes().all(|b| {
                        b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_'
                    });
                if !tenant_like {
                    continue;
                }
                let Ok(inner) = std::fs::read_dir(&path) else {
                    continue;
                };
                for f in inner.filter_map(|f| f.ok()) {
                    if let Some(spec) = read_spec(&f.path()) {
                        out.push((tenant.clone(), spec));
                    }
                }
            } else if let Some(spec) = read_spec(&path) {
                flat.push(spec);
            }
        }
        for spec in flat {
            let tenant = self
                .inner
                .storage
                .store
                .flat_template_owner(&spec.name)
                .ok()
                .flatten()
                .unwrap_or_else(|| sandlot_types::DEFAULT_TENANT.to_owned());
            if !out.iter().any(|(t, s)| *t == tenant && s.name == spec.name) {
                out.push((tenant, spec));
            }
        }
        out
    }

    /// Where `tenant`'s template `name` is saved, and the flat file of a run before names
    /// were per tenant that may hold it too.
    fn spec_paths(&self, tenant: &str, name: &str) -> (PathBuf, Option<PathBuf>) {
        let dir = self.inner.config.data_dir.join("templates");
        let flat_owner = self
            .inner
            .storage
            .store
            .flat_template_owner(name)
            .ok()
            .flatten();
        let flat = (flat_owner
            .as_deref()
            .unwrap_or(sandlot_types::DEFAULT_TENANT)
            == tenant)
            .then(|| dir.join(format!("{name}.json")));
        (dir.join(tenant).join(format!("{name}.json")), flat)
    }

    /// Registers a template and builds it in the background: provisions its environment when
    /// it has extra packages, then starts its zygote (imports and setup). Returns at once with
    /// status `building`; poll `get_template`.
    ///
    /// The template is `tenant`'s: no other tenant sees or uses it, and another tenant's
    /// template of the same name is another template.
    pub async fn create_template(
        &self,
        tenant: &str,
        spec: TemplateSpec,
    ) -> Result<Template, RuntimeError> {
        validate(&spec)?;
        if spec.name == "default" {
            return Err(RuntimeError::DefaultTemplateReadOnly);
        }
        self.resolve_limits(&spec.limits)?;
        // Saving and registering are one step against a deletion of the same template.
        let _ops = self.inner.templates.ops.lock().await;
        let (path, flat) = self.spec_paths(tenant, &spec.name);
        let json = serde_json::to_vec_pretty(&spec).map_err(encoding("the template spec"))?;
        let saved = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|_| std::fs::write(&path, json));
        if let Err(source) = saved {
            return Err(RuntimeError::SaveTemplate { path, source });
        }
        // The spec lives in the per-tenant layout from now on.
        if let Some(flat) = flat {
            let _ = std::fs::remove_file(flat);
        }
        self.inner
            .storage
            .store
            .record_template(tenant, &spec.name)
            .map_err(store("recording a template"))?;
        // Listed at once as building; registered for real once its environment exists.
        let placeholder = self.register(
            tenant,
            spec.clone(),
            self.inner.templates.default_env.clone(),
        )?;
        *lock(&placeholder.zygote_spec) = None;
        let view = placeholder.view();
        let rt = self.clone();
        tokio::spawn(async move {
            let env = match rt.template_env(&placeholder.spec).await {
                Ok(env) => env,
                Err(e) => {
                    tracing::error!(template = %placeholder.spec.name, error = %e, "template environment failed");
                    placeholder.set(TemplateStatus::Failed, Some(e.to_string()), None);
                    return;
                }
            };
            let registered = {
                let _ops = rt.inner.templates.ops.lock().await;
                // Deleted (or replaced) while its environment was made: nothing to register.
                if placeholder
                    .retired
                    .load(std::sync::atomic::Ordering::SeqCst)
                {
                    return;
                }
                rt.register(&placeholder.tenant, placeholder.spec.clone(), env)
            };
            match registered {
                Ok(t) => {
                    let _ = rt.start_zygote(&t).await;
                }
                Err(e) => placeholder.set(TemplateStatus::Failed, Some(e.to_string()), None),
            }
        });
        Ok(view)
    }

    /// The environment a template runs in: the default one, or one with its extra packages.
    async fn template_env(&self, spec: &TemplateSpec) -> Result<PathBuf, RuntimeError> {
        if spec.packages.is_empty() {
            return Ok(self.inner.templates.default_env.clone());
        }
        let Some(envs) = self.inner.config.envs_dir.clone() else {
            return Err(RuntimeError::NoEnvsDir);
        };
        let pins = spec.packages.clone();
        let isolation = self.inner.config.env_isolation();
        let env = blocking("provisioning a template environment", move || {
            let refs: Vec<&str> = pins.iter().map(String::as_str).collect();
            let env_spec = sandlot_env::EnvSpec::default_spec().try_with_extras(&refs)?;
            sandlot_env::ensure(&envs, &env_spec, sandlot_env::Progress::Plain, &isolation)
                .map(|env| env.root)
        })
        .await??;
        Ok(env)
    }

    /// Every tenant's templates, by name then tenant.
    pub async fn list_templates(&self) -> Vec<Template> {
        let mut v: Vec<Template> = self.all_templates().iter().map(|t| t.view()).collect();
        v.sort_by(|a, b| (&a.name, &a.tenant).cmp(&(&b.name, &b.tenant)));
        v
    }

    /// `tenant`'s template `name` (or the built-in `default`). A name that is not a template
    /// name is refused as such (400).
    pub async fn get_template(&self, tenant: &str, name: &str) -> Result<Template, RuntimeError> {
        check_template_name(name)?;
        Ok(self.template(tenant, name)?.view())
    }

    /// Deletes `tenant`'s template `name`: its zygote, its pool and its cgroup go (retired as
    /// a replaced template's are), its spec is forgotten. Refused with `template_in_use` while
    /// a sandbox of the tenant that has not ended (running, paused, stopped) or one of its
    /// snapshots names it: each of those needs the template's zygote again (a restart in
    /// place, a resume, a fork, a restore). The built-in `default` cannot be deleted.
    pub async fn delete_template(&self, tenant: &str, name: &str) -> Result<(), RuntimeError> {
        check_template_name(name)?;
        if name == "default" {
            // Another tenant asking is told what anyone may know: it is the built-in one.
            return Err(RuntimeError::DefaultTemplateReadOnly);
        }
        let _guard = self.inner.templates.ops.lock().await;
        let t = self.template(tenant, name)?;
        let by_sandbox = self.all_entries().iter().find_map(|e| {
            let info = lock(&e.info);
            (info.tenant == tenant && info.template == name && !info.state.is_ended())
                .then(|| format!("sandbox {} ({})", info.id, info.state.as_str()))
        });
        let by_snapshot = || {
            self.inner
                .storage
                .store
                .list_snapshots()
                .map(|all| {
                    all.into_iter()
                        .find(|s| s.snapshot.tenant == tenant && s.snapshot.template == name)
                        .map(|s| format!("snapshot {}", s.snapshot.id))
                })
                .map_err(store("listing snapshots"))
        };
        let by = match by_sandbox {
            Some(by) => Some(by),
            None => by_snapshot()?,
        };
        if let Some(by) = by {
            return Err(RuntimeError::TemplateInUse {
                name: name.to_owned(),
                by,
            });
        }
        let key = (tenant.to_owned(), name.to_owned());
        {
            let mut all = lock(&self.inner.templates.map);
            match all.get(&key) {
                Some(now) if Arc::ptr_eq(now, &t) => {
                    all.remove(&key);
                }
                _ => {
                    return Err(RuntimeError::TemplateReplaced {
                        name: name.to_owned(),
                    })
                }
            }
        }
        let (path, flat) = self.spec_paths(tenant, name);
        let _ = std::fs::remove_file(path);
        if let Some(flat) = flat {
            let _ = std::fs::remove_file(flat);
        }
        let _ = std::fs::remove_file(
            self.inner
                .templates
                .lib_dir
                .join("templates")
                .join(format!("{}.json", file_key(tenant, name))),
        );
        self.inner
            .storage
            .store
            .forget_template(tenant, name)
            .map_err(store("forgetting a template"))?;
        self.retire_template(t);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> TemplateSpec {
        TemplateSpec {
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn per_tenant_keys_never_collide() {
        assert_eq!(file_key("default", "t1"), "t1");
        assert_eq!(file_key("alpha", "t1"), "alpha+t1");
        // `+` is in no tenant or template name: no tenant's key is another's.
        assert_ne!(file_key("a-b", "c"), file_key("a", "b-c"));
        assert!(check_template_name("alpha+t1").is_err());
        for bad in ["", "..", "a/b", "A", "a\0b", &"x".repeat(64)] {
            assert!(check_template_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_template_name(&"x".repeat(63)).is_ok());
    }

    #[test]
    fn validates_names_packages_imports() {
        assert!(validate(&spec("data-2")).is_ok());
        assert!(validate(&spec("Data")).is_err());
        assert!(validate(&spec("../x")).is_err());
        assert!(validate(&spec("")).is_err());
        let mut s = spec("ok");
        s.packages = vec!["requests".into()];
        assert!(validate(&s).is_err(), "unpinned");
        s.packages = vec!["requests==2.32.3".into()];
        assert!(validate(&s).is_ok());
        s.packages = vec!["--index-url==x".into()];
        assert!(validate(&s).is_err());
        s.packages.clear();
        s.imports = vec!["os.path".into(), "numpy".into()];
        assert!(validate(&s).is_ok());
        s.imports = vec!["os; import sys".into()];
        assert!(validate(&s).is_err());
    }
}
