//! Where a build's children run: in the build jail (`sandlot-jail`'s `build` module, reached by
//! re-executing the `sandlot` binary as `sandlot __build-jail`), as a throw-away uid of the
//! caller's builder range, or — for a caller that is not root, who has no more rights to give
//! away than its own — as the caller ([`Isolation::None`]).
//!
//! One build holds one uid for its whole life ([`Jailer`]): a free uid is found by taking an
//! exclusive `flock` on `<state_dir>/<uid>.lock` (so two concurrent builds, in one process or
//! two, never share one), its cgroup `<cgroup_parent>/<uid>` is emptied before use and after
//! every step, and the uid goes back (the lock is dropped) only once that cgroup is empty.
//!
//! Only the download step has a network: its namespace gets a listener of the egress proxy
//! (`sandlot-egress`, run on a small runtime of its own for the step) that lets through only
//! the package index ([`IndexAccess`]): its host on its port, and for pip's default index its
//! file host on 443. Every other step runs with a loopback and nothing behind it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use sandlot_jail::build::BuildJailConfig;
use sandlot_jail::cgroup::{Cgroup, CgroupLimits, Hierarchy};
use sandlot_jail::config::RlimitConfig;

use crate::error::EnvError;
use crate::lock::FileLock;

/// The hidden first argument that makes the `sandlot` binary run one jailed step.
pub const BUILD_JAIL_ARG: &str = "__build-jail";

/// How a build's children run.
#[derive(Debug, Clone)]
pub enum Isolation {
    /// As the calling process, with its uid and namespaces. Only for a caller that is not
    /// root: it can give package code no more than it has.
    None,
    /// Each child in the build jail.
    Jail(BuildJail),
}

/// The build jail's settings, from the caller (the server or the CLI).
#[derive(Debug, Clone)]
pub struct BuildJail {
    /// The executable that implements [`BUILD_JAIL_ARG`] (normally the running `sandlot`).
    pub launcher: PathBuf,
    /// Host uids builds may run as (the server's builder range); one per build at a time.
    pub uids: RangeInclusive<u32>,
    /// Where the per-uid lock files and the jails' empty staging directories live (root-only).
    pub state_dir: PathBuf,
    /// The cgroup hierarchy's mount point (normally `/sys/fs/cgroup`).
    pub cgroup_root: PathBuf,
    /// The group (relative to each hierarchy's root) under which each build gets its own.
    pub cgroup_parent: PathBuf,
    /// The package index the operator configured; `None`: pip's own default index.
    pub index_url: Option<String>,
    pub limits: BuildLimits,
}

/// Limits of one build's cgroup, and the wall time of each step.
#[derive(Debug, Clone, Copy)]
pub struct BuildLimits {
    pub memory_bytes: u64,
    pub pids: u64,
    /// Thousandths of a core.
    pub cpu_millis: u64,
    pub step_timeout: Duration,
}

impl Default for BuildLimits {
    fn default() -> BuildLimits {
        BuildLimits {
            memory_bytes: 4 << 30,
            pids: 512,
            cpu_millis: 2000,
            step_timeout: Duration::from_secs(900),
        }
    }
}

/// What a step may see of the environment being built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    ReadWrite,
    ReadOnly,
}

/// One child of a build.
pub(crate) struct Step<'a> {
    pub argv: Vec<String>,
    /// Variables besides the jail's base environment.
    pub env: Vec<(String, String)>,
    pub cwd: &'a Path,
    /// The environment's root and how the step sees it.
    pub root: &'a Path,
    pub access: Access,
    /// The index the step may download from; `None`: no network.
    pub network: Option<&'a IndexAccess>,
}

/// What a finished step printed.
pub(crate) struct StepOutput {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// The package index a download step may reach: `PIP_INDEX_URL` and the (host, port) pairs the
/// proxy lets through.
#[derive(Debug, Clone)]
pub(crate) struct IndexAccess {
    pub index_url: String,
    pub allowed: Vec<(String, u16)>,
}

impl IndexAccess {
    /// The operator's index (only its own host and port), or pip's default index (learned from
    /// pip itself: `simple_url` and `file_host`) and its file host on 443.
    pub fn new(
        configured: Option<&str>,
        simple_url: &str,
        file_host: &str,
    ) -> Result<IndexAccess, EnvError> {
        let index_url = configured.unwrap_or(simple_url).to_string();
        let bad = |reason: &str| EnvError::IndexUrl {
            url: index_url.clone(),
            reason: reason.to_string(),
        };
        let (host, port) = host_port(&index_url).map_err(bad)?;
        let mut allowed = vec![(host, port)];
        if configured.is_none() && !file_host.is_empty() {
            allowed.push((file_host.to_ascii_lowercase(), 443));
        }
        Ok(IndexAccess { index_url, allowed })
    }
}

/// The host (lowercase; an IPv6 literal without brackets) and port of an http(s) URL.
pub(crate) fn host_port(url: &str) -> Result<(String, u16), &'static str> {
    let (scheme, rest) = url.split_once("://").ok_or("not an absolute URL")?;
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "https" => 443,
        "http" => 80,
        _ => return Err("only http and https indexes are supported"),
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or("unclosed IPv6 literal")?;
        (host, after.strip_prefix(':'))
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    if host.is_empty() {
        return Err("no host");
    }
    let port = match port {
        Some(p) => p.parse().map_err(|_| "invalid port")?,
        None => default_port,
    };
    Ok((host.to_ascii_lowercase(), port))
}

/// The jail's base environment: nothing of the caller's but the operator's pip settings
/// ([`PASSED_PIP_VARS`]).
fn base_env() -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = [
        ("PATH", "/usr/local/bin:/usr/bin:/bin"),
        ("HOME", "/tmp"),
        ("TMPDIR", "/tmp"),
        ("LANG", "C.UTF-8"),
        ("LC_ALL", "C.UTF-8"),
        ("PYTHONUNBUFFERED", "1"),
        ("PYTHONDONTWRITEBYTECODE", "1"),
        ("XDG_CACHE_HOME", "/tmp/.cache"),
        ("MPLCONFIGDIR", "/tmp/.matplotlib"),
        ("MPLBACKEND", "Agg"),
        ("PIP_NO_INPUT", "1"),
        ("PIP_NO_CACHE_DIR", "1"),
        ("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for var in PASSED_PIP_VARS {
        if let Some(v) = std::env::var_os(var) {
            env.push((var.to_string(), v.to_string_lossy().into_owned()));
        }
    }
    env
}

/// The operator's pip settings a build passes on: how to trust and wait for the index, and
/// local wheel directories. Not the index itself (`PIP_INDEX_URL`, `PIP_EXTRA_INDEX_URL`): the
/// build sets the one index its proxy lets through.
const PASSED_PIP_VARS: &[&str] = &[
    "PIP_CERT",
    "PIP_CLIENT_CERT",
    "PIP_DEFAULT_TIMEOUT",
    "PIP_TIMEOUT",
    "PIP_RETRIES",
    "PIP_TRUSTED_HOST",
    "PIP_FIND_LINKS",
    "PIP_PREFER_BINARY",
];

/// Host paths the operator's pip settings name (a CA bundle, a client certificate, local
/// wheel directories) outside what the jail shows anyway: shown read-only at their own path.
fn pip_paths() -> Vec<PathBuf> {
    let mut paths = Vec::new();
    for var in ["PIP_CERT", "PIP_CLIENT_CERT", "PIP_FIND_LINKS"] {
        let Some(value) = std::env::var_os(var) else {
            continue;
        };
        for item in value.to_string_lossy().split_whitespace() {
            let item = item.strip_prefix("file://").unwrap_or(item);
            let path = Path::new(item);
            if path.is_absolute()
                && !path.starts_with("/usr")
                && !path.starts_with("/etc")
                && path.exists()
            {
                paths.push(path.to_path_buf());
            }
        }
    }
    paths
}

/// The runner of one build's children.
pub(crate) enum Runner {
    /// As the caller ([`Isolation::None`]), holding the build lock in each child.
    Host {
        lock_fd: Option<std::os::fd::RawFd>,
    },
    Jail(Box<Jailer>),
}

impl Runner {
    /// `base` is the base interpreter (resolved): a jail shows its prefix when it is not
    /// under `/usr`. Never learned from the environment, which a build wrote.
    pub fn new(isolation: &Isolation, base: &Path) -> Result<Runner, EnvError> {
        Ok(match isolation {
            Isolation::None => Runner::Host { lock_fd: None },
            Isolation::Jail(cfg) => Runner::Jail(Box::new(Jailer::acquire(cfg, base)?)),
        })
    }

    /// Makes every later child hold the build lock (as the caller: see
    /// [`crate::python::hold_lock_in_child`]; a jailed step dies with its launcher instead).
    pub fn hold_lock(&mut self, fd: std::os::fd::RawFd) {
        if let Runner::Host { lock_fd } = self {
            *lock_fd = Some(fd);
        }
    }

    /// The configured index, when jailed.
    pub fn configured_index(&self) -> Option<&str> {
        match self {
            Runner::Host { .. } => None,
            Runner::Jail(j) => j.cfg.index_url.as_deref(),
        }
    }

    pub fn is_jailed(&self) -> bool {
        matches!(self, Runner::Jail(_))
    }

    /// The uid the build's files are owned by until they are sealed.
    pub fn build_uid(&self) -> Option<u32> {
        match self {
            Runner::Host { .. } => None,
            Runner::Jail(j) => Some(j.uid),
        }
    }

    /// Runs `step` to its end, handing each line it prints (stdout and stderr, as they come)
    /// to `on_line`, and `None` every `tick` while it prints nothing.
    pub fn run(
        &self,
        step: &Step<'_>,
        tick: Duration,
        on_line: &mut dyn FnMut(Option<&str>),
    ) -> Result<StepOutput, EnvError> {
        match self {
            Runner::Host { lock_fd } => {
                let mut cmd = crate::python::command(&step.argv[0]);
                cmd.args(&step.argv[1..])
                    .envs(step.env.iter().map(|(k, v)| (k, v)))
                    .current_dir(step.cwd)
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                if let Some(fd) = lock_fd {
                    crate::python::hold_lock_in_child(&mut cmd, *fd);
                }
                let child = cmd.spawn().map_err(|source| EnvError::Spawn {
                    command: step.argv.join(" "),
                    source,
                })?;
                collect(child, tick, on_line, &step.argv)
            }
            Runner::Jail(j) => j.run(step, tick, on_line),
        }
    }
}

/// One build's hold on a throw-away uid and its cgroup.
pub(crate) struct Jailer {
    cfg: BuildJail,
    uid: u32,
    cgroup: Cgroup,
    staging: PathBuf,
    /// The base interpreter's prefix, when not under `/usr`.
    base_prefix: Option<PathBuf>,
    /// Held for the build's life; dropped (the uid freed) only after the cgroup is emptied.
    _lock: FileLock,
}

/// How long emptying a build's cgroup may take.
const KILL_WAIT: Duration = Duration::from_secs(10);

impl Jailer {
    /// Takes the first uid of the range no other build holds, and empties its cgroup (what a
    /// crashed build may have left).
    fn acquire(cfg: &BuildJail, base: &Path) -> Result<Jailer, EnvError> {
        let state_err = |source| EnvError::BuildState {
            path: cfg.state_dir.clone(),
            source,
        };
        std::fs::create_dir_all(&cfg.state_dir).map_err(state_err)?;
        std::fs::set_permissions(
            &cfg.state_dir,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .map_err(state_err)?;
        let hierarchy = Hierarchy::detect(&cfg.cgroup_root)
            .map_err(|source| EnvError::BuildCgroup { source })?;
        for uid in cfg.uids.clone() {
            let Some(lock) = FileLock::try_exclusive(&cfg.state_dir.join(format!("{uid}.lock")))?
            else {
                continue;
            };
            let limits = CgroupLimits {
                memory_bytes: cfg.limits.memory_bytes,
                pids: cfg.limits.pids,
                cpu_millis: cfg.limits.cpu_millis,
            };
            let rel = cfg.cgroup_parent.join(uid.to_string());
            let cgroup = Cgroup::create(&hierarchy, &rel, &limits)
                .map_err(|source| EnvError::BuildCgroup { source })?;
            cgroup
                .kill_all(KILL_WAIT)
                .map_err(|source| EnvError::BuildCgroup { source })?;
            let staging = cfg.state_dir.join(format!("{uid}.root"));
            std::fs::create_dir_all(&staging).map_err(|source| EnvError::BuildState {
                path: staging.clone(),
                source,
            })?;
            return Ok(Jailer {
                cfg: cfg.clone(),
                uid,
                cgroup,
                staging,
                base_prefix: base_prefix(base),
                _lock: lock,
            });
        }
        Err(EnvError::NoBuildUid {
            first: *cfg.uids.start(),
            last: *cfg.uids.end(),
        })
    }

    fn run(
        &self,
        step: &Step<'_>,
        tick: Duration,
        on_line: &mut dyn FnMut(Option<&str>),
    ) -> Result<StepOutput, EnvError> {
        let describe = step.argv.join(" ");
        let config = self.config(step);
        let json = serde_json::to_vec(&config).map_err(|e| EnvError::Spawn {
            command: describe.clone(),
            source: std::io::Error::other(e),
        })?;
        let spawn_err = |source| EnvError::Spawn {
            command: describe.clone(),
            source,
        };
        let mut cmd = Command::new(&self.cfg.launcher);
        cmd.arg(BUILD_JAIL_ARG)
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let handshake = match step.network {
            Some(_) => {
                let (ours, theirs) = std::os::unix::net::UnixStream::pair().map_err(spawn_err)?;
                let fd = theirs.as_raw_fd();
                // SAFETY: the closure only calls dup2 (async-signal-safe), which also clears
                // FD_CLOEXEC on fd 3 so that it survives exec.
                unsafe {
                    cmd.pre_exec(move || {
                        if libc::dup2(fd, sandlot_jail::build::HANDSHAKE_FD) < 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
                Some((ours, theirs))
            }
            None => None,
        };
        // The launcher dies with the thread that waits for it, and takes the step with it.
        // SAFETY: integer-only prctl in the forked child before exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(spawn_err)?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(&json).map_err(spawn_err)?;
        }
        let watchdog = Watchdog::start(self.cgroup.clone(), self.cfg.limits.step_timeout);
        let proxy = match (step.network, handshake) {
            (Some(index), Some((ours, theirs))) => {
                drop(theirs);
                match Proxy::plant(child.id(), ours, index) {
                    Ok(proxy) => Some(proxy),
                    Err(e) => {
                        let _ = self.cgroup.kill_all(KILL_WAIT);
                        let _ = child.wait();
                        return Err(e);
                    }
                }
            }
            _ => None,
        };
        let result = collect(child, tick, on_line, &step.argv);
        drop(proxy);
        let timed_out = watchdog.stop();
        self.cgroup
            .kill_all(KILL_WAIT)
            .map_err(|source| EnvError::BuildCgroup { source })?;
        if timed_out {
            return Err(EnvError::StepTimeout {
                command: describe,
                seconds: self.cfg.limits.step_timeout.as_secs(),
            });
        }
        result
    }

    fn config(&self, step: &Step<'_>) -> BuildJailConfig {
        let mut env = base_env();
        env.extend(step.env.iter().cloned());
        let mut read_only = pip_paths();
        let mut read_write = Vec::new();
        match step.access {
            Access::ReadWrite => read_write.push(step.root.to_path_buf()),
            Access::ReadOnly => read_only.push(step.root.to_path_buf()),
        }
        read_only.extend(self.base_prefix.clone());
        if let Some(index) = step.network {
            env.push(("PIP_INDEX_URL".into(), index.index_url.clone()));
            // Everything through the proxy, loopback included: the index may be on the host's
            // loopback, which is not the jail's.
            let proxy = format!("http://127.0.0.1:{}", sandlot_egress::PROXY_PORT);
            for var in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
                env.push((var.into(), proxy.clone()));
            }
        }
        BuildJailConfig {
            staging_dir: self.staging.clone(),
            uid: self.uid,
            gid: self.uid,
            cgroup_procs: self.cgroup.procs_files(),
            read_only,
            read_write,
            handshake: step.network.is_some(),
            argv: step.argv.clone(),
            env,
            cwd: step.cwd.to_path_buf(),
            tmp_bytes: 1 << 30,
            rlimits: RlimitConfig {
                nofile: 4096,
                fsize: 2 << 30,
                core: 0,
                stack: 8 << 20,
            },
        }
    }
}

impl Drop for Jailer {
    fn drop(&mut self) {
        // The uid is free again only once nothing runs as it: the lock drops after this.
        if self.cgroup.kill_all(KILL_WAIT).is_ok() {
            let _ = self.cgroup.remove();
        }
    }
}

/// The prefix of a base interpreter (`realpath(sys.executable)`) outside `/usr` (which the
/// jail always shows): the venv's `bin/python` links to it there.
fn base_prefix(executable: &Path) -> Option<PathBuf> {
    let prefix = executable.parent()?.parent()?;
    (!prefix.starts_with("/usr") && prefix != Path::new("/")).then(|| prefix.to_path_buf())
}

/// Kills a step's cgroup when it runs past its wall time.
struct Watchdog {
    stop: mpsc::Sender<()>,
    fired: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Watchdog {
    fn start(cgroup: Cgroup, limit: Duration) -> Watchdog {
        let (stop, stopped) = mpsc::channel::<()>();
        let fired = Arc::new(AtomicBool::new(false));
        let flag = fired.clone();
        let thread = std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(limit) {
                flag.store(true, Ordering::SeqCst);
                let _ = cgroup.kill_all(KILL_WAIT);
            }
        });
        Watchdog {
            stop,
            fired,
            thread,
        }
    }

    /// Whether it fired.
    fn stop(self) -> bool {
        let _ = self.stop.send(());
        let _ = self.thread.join();
        self.fired.load(Ordering::SeqCst)
    }
}

/// The egress proxy of one download step: a listener in the step's network namespace, served
/// on a runtime of its own until dropped.
struct Proxy {
    runtime: Option<tokio::runtime::Runtime>,
}

/// The proxy's name for the step (it keys its state by sandbox id).
const PROXY_ID: &str = "environment-build";

impl Proxy {
    /// Waits for the launcher's namespaces, plants the listener in its network namespace, lets
    /// it go on.
    fn plant(
        pid: u32,
        mut handshake: std::os::unix::net::UnixStream,
        index: &IndexAccess,
    ) -> Result<Proxy, EnvError> {
        let err = |what: &str| {
            let what = what.to_string();
            move |e: std::io::Error| EnvError::Egress {
                what: what.clone(),
                detail: e.to_string(),
            }
        };
        handshake
            .set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(err("handshake"))?;
        let mut b = [0u8; 1];
        handshake.read_exact(&mut b).map_err(err("handshake"))?;
        if b[0] != sandlot_jail::build::UNSHARED {
            return Err(EnvError::Egress {
                what: "handshake".into(),
                detail: format!("unexpected byte {}", b[0]),
            });
        }
        let listener = sandlot_egress::listen_in_netns(pid, sandlot_egress::PROXY_PORT)
            .map_err(err("listening in the build's network namespace"))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("sandlot-build-egress")
            .enable_all()
            .build()
            .map_err(err("starting the proxy's runtime"))?;
        let (rules, hosts) = index_rules(index)?;
        let egress = sandlot_egress::Egress::new(
            sandlot_egress::EgressConfig {
                hosts,
                ..sandlot_egress::EgressConfig::default()
            },
            Arc::new(IndexOnly {
                allowed: index.allowed.clone(),
            }),
        );
        egress.set_rules(PROXY_ID, rules);
        {
            let _guard = runtime.enter();
            egress
                .attach(PROXY_ID, listener)
                .map_err(|e| EnvError::Egress {
                    what: "attaching the proxy".into(),
                    detail: e.to_string(),
                })?;
        }
        handshake
            .write_all(&[sandlot_jail::build::GO])
            .map_err(err("handshake"))?;
        Ok(Proxy {
            runtime: Some(runtime),
        })
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// The proxy's allowlist for a download step, and its names pinned to the addresses they have
/// now. The index is the operator's (or pip's own), so the addresses its names resolve to are
/// let through even in the ranges the proxy refuses by default (a mirror on a private network,
/// an index on 127.0.0.1), each as an exact address: a name that resolves elsewhere later
/// (rebinding) reaches nothing new, and the gate ([`IndexOnly`]) still allows only the index's
/// ports.
fn index_rules(
    index: &IndexAccess,
) -> Result<
    (
        sandlot_egress::NetworkRules,
        std::collections::HashMap<String, Vec<IpAddr>>,
    ),
    EnvError,
> {
    let mut entries = Vec::new();
    let mut hosts = std::collections::HashMap::new();
    // Each entry names the index's port: an entry without one would allow 443 and 80 only.
    let on_port = |host: &str, port: u16| match host.contains(':') {
        true => format!("[{host}]:{port}"),
        false => format!("{host}:{port}"),
    };
    for (host, port) in &index.allowed {
        entries.push(on_port(host, *port));
        if host.parse::<IpAddr>().is_ok() {
            continue;
        }
        let addrs: Vec<IpAddr> = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), *port))
            .map_err(|e| EnvError::Egress {
                what: format!("resolving the index host {host}"),
                detail: e.to_string(),
            })?
            .map(|a| a.ip())
            .collect();
        for ip in &addrs {
            entries.push(on_port(&ip.to_string(), *port));
        }
        hosts.insert(host.clone(), addrs);
    }
    entries.sort();
    entries.dedup();
    let rules = sandlot_egress::NetworkRules::parse(&entries).map_err(|e| EnvError::Egress {
        what: "the index's allowlist".into(),
        detail: e.to_string(),
    })?;
    Ok((rules, hosts))
}

/// The proxy's gate for a build: the index's host on its port only, whatever the address
/// checks let through (the rules name the ports too; the gate also keeps the index's
/// addresses, listed to open them, from being reached by a raw IP).
struct IndexOnly {
    allowed: Vec<(String, u16)>,
}

impl sandlot_egress::EgressHooks for IndexOnly {
    fn gate(
        &self,
        _: &str,
        host: &str,
        port: u16,
        _: IpAddr,
        _: &str,
    ) -> sandlot_egress::GateDecision {
        if self
            .allowed
            .iter()
            .any(|(h, p)| h.eq_ignore_ascii_case(host) && *p == port)
        {
            sandlot_egress::GateDecision::allow("")
        } else {
            sandlot_egress::GateDecision::deny("not the package index", "")
        }
    }

    fn record(&self, _: sandlot_egress::EgressEvent) {}

    fn canary(&self, _: &str, _: &str) {}
}

/// Reads a child's stdout and stderr to their end, line by line, then waits for it.
fn collect(
    mut child: std::process::Child,
    tick: Duration,
    on_line: &mut dyn FnMut(Option<&str>),
    argv: &[String],
) -> Result<StepOutput, EnvError> {
    let (tx, rx) = mpsc::channel::<(bool, String)>();
    let readers: Vec<_> = [
        child
            .stdout
            .take()
            .map(|s| (true, Box::new(s) as Box<dyn Read + Send>)),
        child
            .stderr
            .take()
            .map(|s| (false, Box::new(s) as Box<dyn Read + Send>)),
    ]
    .into_iter()
    .flatten()
    .map(|(is_stdout, stream)| {
        let tx = tx.clone();
        std::thread::spawn(move || forward_lines(stream, is_stdout, &tx))
    })
    .collect();
    drop(tx);
    let (mut stdout, mut stderr) = (String::new(), String::new());
    loop {
        match rx.recv_timeout(tick) {
            Ok((is_stdout, line)) => {
                on_line(Some(&line));
                let out = if is_stdout { &mut stdout } else { &mut stderr };
                out.push_str(&line);
                out.push('\n');
            }
            Err(mpsc::RecvTimeoutError::Timeout) => on_line(None),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    for reader in readers {
        let _ = reader.join();
    }
    let status = child.wait().map_err(|source| EnvError::Spawn {
        command: argv.join(" "),
        source,
    })?;
    Ok(StepOutput {
        status,
        stdout,
        stderr,
    })
}

/// Sends each line of `stream` (lossily decoded, without the newline) to `tx`.
fn forward_lines(stream: Box<dyn Read + Send>, is_stdout: bool, tx: &mpsc::Sender<(bool, String)>) {
    let mut reader = BufReader::new(stream);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let line = String::from_utf8_lossy(&buf);
                let line = line.trim_end_matches(['\n', '\r']);
                if tx.send((is_stdout, line.to_string())).is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_urls_give_host_and_port() {
        assert_eq!(
            host_port("http://127.0.0.1:8123/simple/").unwrap(),
            ("127.0.0.1".into(), 8123)
        );
        assert_eq!(
            host_port("https://user:tok@Mirror.Example.test/simple").unwrap(),
            ("mirror.example.test".into(), 443)
        );
        assert_eq!(host_port("http://[::1]:9/x").unwrap(), ("::1".into(), 9));
        assert!(host_port("ftp://x/").is_err());
        assert!(host_port("/local/dir").is_err());
    }

    #[test]
    fn the_default_index_adds_its_file_host_a_configured_one_does_not() {
        let a = IndexAccess::new(None, "https://index.test/simple", "files.test").unwrap();
        assert_eq!(
            a.allowed,
            vec![("index.test".into(), 443), ("files.test".into(), 443)]
        );
        let b = IndexAccess::new(
            Some("http://127.0.0.1:7/simple"),
            "https://index.test/simple",
            "files.test",
        )
        .unwrap();
        assert_eq!(b.allowed, vec![("127.0.0.1".into(), 7)]);
        assert_eq!(b.index_url, "http://127.0.0.1:7/simple");
    }
}
