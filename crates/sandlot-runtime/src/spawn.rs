//! Creating a sandbox. An admitted request gets a warm sandbox from its template's pool or
//! boots one; then the creator's environment is sent and the sandbox is recorded.
//!
//! Booting is the server's half of the creation handshake; the child's half is
//! `sandlot_jail::child::enter`. [`Runtime::spawn_in`] reads like `enter`, one named step per
//! line, and the two are meant to be read side by side:
//!
//! ```text
//! server (spawn_in)                  zygote                 the forked child (child::enter)
//! request_fork ── spawn + 3 fds ───▶ fork() ──────────────▶ P0: fds in place, setsid,
//!              ◀── spawned, P0 pid ─                            unshare(user mnt net ipc uts pid)
//! join_cgroup: starts now (it can wait for an RCU grace period; P0 forks nothing before "G")
//! await_unshared ◀───────────────────────────────────────── "U"
//! write_id_maps: /proc/P0/{setgroups,uid_map,gid_map}
//! join_cgroup: P0 is in the sandbox's cgroup
//! send_go ─────────────────────────────────────────────────▶ "G"   P0: setresuid(1000),
//!                                                                  unshare(cgroup), tmpfs
//!                                                                  mounts, hostname, lo up
//! await_init ◀─────────────────────────────── {"type": "init", "pid": P1}   fork P1; P0 exits
//!                                                              P1: mount /proc, fork P2, drop
//!                                                                  capabilities, seccomp, reap
//! await_hello ◀──────────────────────────────────────── {"type": "hello"}
//!                                                              P2: Landlock, rlimits, caps,
//!                                                                  no_new_privs, seccomp; the
//!                                                                  driver starts
//! find_driver: P2 is P1's first child
//! open_pidfds: every later signal goes through them
//! verify_owner: P1 and P2 run as the sandbox's host uid, so the pidfds are the sandbox's
//! ```
//!
//! A failure at any step fails the creation with that step's name; the child reports its own
//! failures as a `jail_error` frame in place of `init` or `hello`. Whatever the boot held is
//! given back by `teardown`.

use crate::admission::{cgroup_limits, Admitted};
use crate::error::{at, encoding, store, CreateFailure, RuntimeError};
use crate::sandbox::{self, Live};
use crate::task::blocking;
use crate::templates::Tmpl;
use crate::util::{self, lock};
use crate::zygote::{Zygote, ZygoteError};
use crate::zygote_config::sandbox_env;
use crate::{contexts, Entry, Runtime};
use sandlot_jail::cgroup::{Cgroup, CgroupError};
use sandlot_jail::child::{GO, UNSHARED};
use sandlot_jail::config::{JailConfig, RlimitConfig, VolumeTarget};
use sandlot_types::{CreateSandbox, EffectiveLimits, Sandbox, SandboxState, VolumeMount};
use std::fmt;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::OwnedReadHalf;
use tokio::net::UnixStream;

/// How long the child gets from the fork to its driver's hello.
const START_TIMEOUT: Duration = Duration::from_secs(15);

impl Runtime {
    /// Creates a sandbox: admitted, then taken from the pool or booted, given the creator's
    /// environment and recorded.
    ///
    /// Once admitted, a creation runs to its end in a task of its own: a client that goes away
    /// mid-way (dropping this future) cannot cut the handshake short and leave processes,
    /// a cgroup or a uid behind; a sandbox whose creator is gone when it is ready is deleted.
    pub async fn create_sandbox(&self, req: CreateSandbox) -> Result<Sandbox, RuntimeError> {
        crate::ports::check_ports(&req)?;
        self.check_network(&req)?;
        if let Some(snapshot) = req.from_snapshot.clone() {
            return self.create_from_snapshot(req, &snapshot).await;
        }
        let admitted = self.admit(&req)?;
        let ticket = self.enqueue_create()?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let rt = self.clone();
        tokio::spawn(async move {
            let _ticket = ticket;
            let created = match rt.inner.registry.create_slots.acquire().await {
                Ok(_slot) => rt.hand_out(admitted, &req).await,
                Err(_) => Err(RuntimeError::AdmissionClosed),
            };
            if let Err(Ok(sandbox)) = tx.send(created) {
                rt.abandon_created(&sandbox.id).await;
            }
        });
        rx.await.unwrap_or(Err(RuntimeError::AdmissionClosed))
    }

    /// Deletes a sandbox whose creator went away before it was ready.
    pub(crate) async fn abandon_created(&self, id: &str) {
        tracing::info!(
            sandbox = id,
            "the client went away during creation; deleting the sandbox"
        );
        let e = self.inner.registry.get(id);
        if let Some(e) = e {
            self.end(
                &e,
                SandboxState::Deleted,
                "its creation was cancelled by the client",
            )
            .await;
        }
    }

    /// Gets a running sandbox for an admitted request and makes it the client's.
    async fn hand_out(&self, a: Admitted, req: &CreateSandbox) -> Result<Sandbox, RuntimeError> {
        // A pooled sandbox has its mounts already: one with volumes is booted for them.
        let pooled = if a.volumes.is_empty() && req.mounts.is_empty() {
            self.take_pooled(&a.tmpl, a.limits)
        } else {
            None
        };
        let live = match pooled {
            Some(live) => live,
            None => {
                let boot = self.boot(&a.tmpl, &a.tenant, a.limits, &a.volumes);
                crate::host_mounts::scope(req.mounts.clone(), boot).await?
            }
        };
        self.refill(&a.tmpl);
        if let Err(err) = live.send_env(&req.env, req.workdir.as_deref()).await {
            self.discard(live);
            return Err(err);
        }
        let info = new_record(&live.id, &a, req);
        if let Err(err) = self.stage_secrets(&live.id, &req.secrets) {
            self.discard(live);
            return Err(err);
        }
        self.adopt(live, info).await
    }

    /// Records a booted sandbox as the client's and lists it. On failure it is discarded.
    pub(crate) async fn adopt(
        &self,
        live: Arc<Live>,
        info: Sandbox,
    ) -> Result<Sandbox, RuntimeError> {
        if live.disk() {
            // Before any of the tenant's code runs in it: its bytes count toward the tenant.
            let (rt, id, tenant) = (self.clone(), info.id.clone(), info.tenant.clone());
            let assigned = blocking("assigning a workspace", move || {
                rt.assign_workspace(&id, &tenant)
            })
            .await
            .and_then(|r| r);
            if let Err(err) = assigned {
                self.discard(live);
                return Err(err);
            }
        }
        let recorded = self
            .inner
            .storage
            .store
            .insert_sandbox(&info)
            .and_then(|()| {
                self.inner
                    .storage
                    .store
                    .set_host_uid(&info.id, Some(live.host_uid))
            });
        if let Err(e) = recorded {
            self.discard(live);
            return Err(store("recording the sandbox")(e));
        }
        let entry = Arc::new(Entry::new(info.clone(), live.clone()));
        lock(&self.inner.registry.sandboxes).insert(info.id.clone(), entry.clone());
        if self.inner.registry.is_closing() {
            // Shutdown may have stopped every sandbox it knew before this one was inserted.
            self.stop(&entry).await;
            return Err(RuntimeError::AdmissionClosed);
        }
        if let Err(err) = self.govern_started(&entry, &live).await {
            self.end(
                &entry,
                SandboxState::Deleted,
                "its egress could not be set up",
            )
            .await;
            return Err(err);
        }
        let source = match (&info.forked_from, &info.from_snapshot) {
            (Some(parent), _) => serde_json::json!({"fork": parent}),
            (None, Some(snapshot)) => serde_json::json!({"snapshot": snapshot}),
            (None, None) => serde_json::json!("template"),
        };
        self.emit_for(
            sandlot_types::LifecycleKind::Created,
            &entry,
            None,
            serde_json::json!({
                "source": source,
                "template": info.template,
                "template_version": info.template_version,
                "tier": info.tier,
            }),
        );
        Ok(info)
    }

    /// What a new sandbox holds before it boots: its id, a uid (with its read-write volumes
    /// claimed for it) and its cgroup. Give them back with [`Runtime::abandon_allocated`].
    pub(crate) async fn allocate(
        &self,
        tenant: &str,
        limits: EffectiveLimits,
        volumes: &[VolumeMount],
    ) -> Result<(String, u32, Cgroup), RuntimeError> {
        let id = util::new_id("sb_");
        let uid = lock(&self.inner.registry.slots)
            .alloc(crate::uids::Kind::Sandbox)
            .ok_or(RuntimeError::NoFreeUid)?;
        if let Err(err) = self.claim_volumes(&id, tenant, uid, volumes).await {
            self.release_uid(uid);
            return Err(err);
        }
        let rel = self.inner.cgroups.child(&id);
        match Cgroup::create(&self.inner.cgroups.hierarchy, &rel, &cgroup_limits(limits)) {
            Ok(cg) => Ok((id, uid, cg)),
            Err(source) => {
                let (rt, sid) = (self.clone(), id.clone());
                let _ = blocking("giving back volumes", move || rt.release_volumes(&sid)).await;
                self.release_uid(uid);
                Err(RuntimeError::SandboxCgroup { source })
            }
        }
    }

    /// Gives back what [`Runtime::allocate`] took, once a boot failed: volumes, then
    /// whatever of the boot is left (`abandon_boot`).
    pub(crate) async fn abandon_allocated(&self, id: &str, uid: u32, cg: Cgroup) {
        let (rt, sid) = (self.clone(), id.to_string());
        let _ = blocking("giving back volumes", move || rt.release_volumes(&sid)).await;
        self.abandon_boot(id, uid, cg).await;
    }

    /// Boots a sandbox of `tmpl` with `limits`: a uid, a cgroup, a workspace on disk (when the
    /// zygote can hand it to its child), a fork of the zygote jailed.
    pub(crate) async fn boot(
        &self,
        tmpl: &Arc<Tmpl>,
        tenant: &str,
        limits: EffectiveLimits,
        volumes: &[VolumeMount],
    ) -> Result<Arc<Live>, RuntimeError> {
        let (id, uid, cg) = self.allocate(tenant, limits, volumes).await?;
        let booted = async {
            let disk = self.zygote(tmpl).await?.workspace_fd;
            if disk {
                self.create_workspace(&id, uid, limits.disk_mb).await?;
            }
            self.spawn_in(
                tmpl,
                &id,
                uid,
                &cg,
                limits,
                disk.then_some((tenant, volumes)),
            )
            .await
        };
        match booted.await {
            Ok(live) => Ok(live),
            Err(e) => {
                self.abandon_allocated(&id, uid, cg).await;
                Err(e)
            }
        }
    }

    /// The server's half of the creation handshake (the header of this file draws both
    /// halves): from a fork request to a sandbox whose driver said hello, with pidfds of its
    /// init and driver. Mirrors `sandlot_jail::child::enter` step for step.
    ///
    /// Used by a creation and by a restart in place (same id, uid and cgroup); callers run it
    /// in a task that is never cancelled, so the handshake always ends one way or the other.
    ///
    /// A child whose zygote died before the child was in its own cgroup may be killed with
    /// the zygote's leftovers when the zygote restarts: a handshake that fails while the
    /// zygote that forked it is dead is tried once more, from the restarted zygote, after
    /// whatever the first child left in the sandbox's cgroup is cleared.
    pub(crate) async fn spawn_in(
        &self,
        tmpl: &Arc<Tmpl>,
        id: &str,
        uid: u32,
        cg: &Cgroup,
        limits: EffectiveLimits,
        disk: Option<(&str, &[VolumeMount])>,
    ) -> Result<Arc<Live>, RuntimeError> {
        let mut forked_by = None;
        let first = self
            .spawn_once(tmpl, id, uid, cg, limits, disk, &mut forked_by)
            .await;
        match first {
            Err(e) if forked_by.is_some_and(|z: Arc<Zygote>| !z.alive()) => {
                tracing::warn!(sandbox = id, error = %e, "the zygote died under a creation; trying once more");
                let (rt, group) = (self.clone(), cg.clone());
                blocking("clearing a failed boot", move || {
                    rt.clear_failed_boot(&group)
                })
                .await?;
                let mut again = None;
                self.spawn_once(tmpl, id, uid, cg, limits, disk, &mut again)
                    .await
            }
            other => other,
        }
    }

    /// One try of [`Runtime::spawn_in`]; `forked_by` is set to the zygote that forked the
    /// child, once one did.
    #[allow(clippy::too_many_arguments)]
    async fn spawn_once(
        &self,
        tmpl: &Arc<Tmpl>,
        id: &str,
        uid: u32,
        cg: &Cgroup,
        limits: EffectiveLimits,
        disk: Option<(&str, &[VolumeMount])>,
        forked_by: &mut Option<Arc<Zygote>>,
    ) -> Result<Arc<Live>, RuntimeError> {
        let mut times = Timeline::start();
        let mount = disk.map(|_| self.workspace_mount(id)).transpose()?;
        let (tenant, volumes) = disk.unwrap_or_default();
        let trees = self.volume_trees(tenant, volumes)?;
        let targets: Vec<VolumeTarget> = volumes
            .iter()
            .take(trees.len())
            .map(|m| VolumeTarget {
                path: m.path.clone(),
                read_only: m.read_only,
            })
            .collect();
        let host = crate::host_mounts::current();
        if !host.is_empty() && mount.is_none() {
            return Err(RuntimeError::HostMount {
                host: host[0].host.clone(),
                source: std::io::Error::other("host paths need a template with a disk workspace"),
            });
        }
        let (host_targets, host_trees) = crate::host_mounts::trees(&host)?;
        let mut trees = trees;
        trees.extend(host_trees);
        let (p0, channels, zygote) = self
            .request_fork(tmpl, id, limits, mount, (targets, trees), host_targets)
            .await?;
        *forked_by = Some(zygote);
        let (mut ctrl, stdout, stderr) = channels.keep_ours()?;
        times.mark("fork");
        let mut joining = Some(join_cgroup(cg, p0));
        let handshake = async {
            await_unshared(&mut ctrl).await?;
            times.mark("unshared");
            write_id_maps(p0, uid)?;
            if let Some(j) = joining.take() {
                j.finish().await?;
            }
            send_go(&mut ctrl).await?;
            times.mark("go");
            let (mut reader, writer) = ctrl.into_split();
            let init_pid = await_init(&mut reader).await?;
            times.mark("init");
            await_hello(&mut reader).await?;
            times.mark("hello");
            Ok::<_, RuntimeError>((reader, writer, init_pid))
        };
        let shook = tokio::time::timeout(START_TIMEOUT, handshake)
            .await
            .map_err(|_| at("start")(CreateFailure::Protocol("timed out")))
            .and_then(|r| r);
        if shook.is_err() {
            // P0 may still be on its way into the cgroup: let that finish first, so the
            // caller's cleanup through the cgroup finds it.
            if let Some(j) = joining.take() {
                let _ = j.finish().await;
            }
        }
        let (reader, writer, init_pid) = shook?;
        tracing::debug!(sandbox = id, phases = %times, "sandbox start phases");
        let driver_pid = find_driver(init_pid)?;
        let (init_fd, driver_fd) = open_pidfds(init_pid, driver_pid)?;
        verify_owner(uid, &[init_pid, driver_pid])?;
        let (events, pump) = sandbox::start_pump(reader, stdout, stderr).map_err(at("pump"))?;
        Ok(Arc::new(Live {
            id: id.to_string(),
            limits,
            host_uid: uid,
            cgroup: cg.clone(),
            workspace_dir: disk.and_then(|_| self.workspaces().ok()?.path(id).ok()),
            init_pid,
            driver_pid,
            init_fd,
            driver_fd,
            writer: tokio::sync::Mutex::new(writer),
            events: tokio::sync::Mutex::new(events),
            pump,
            running: Mutex::new(None),
            dead: Default::default(),
            interrupt: Default::default(),
            contexts: Mutex::new(vec![contexts::default_context()]),
        }))
    }

    /// Step 1: asks the template's zygote to fork P0 with the child's ends of fresh channels;
    /// returns P0's host pid, the channels and the zygote that forked it. A zygote that died (or was killed mid-fork) is
    /// restarted once and asked again, with new channels: a P0 the dead zygote may have forked
    /// keeps the old ones, whose server ends are closed, so it reads end-of-stream and exits
    /// before it forks anything.
    ///
    /// `mount` is the sandbox's workspace (a detached mount), passed as the fourth fd; the
    /// child moves it onto `/workspace`. Our copy is closed once the zygote has passed it on.
    async fn request_fork(
        &self,
        tmpl: &Arc<Tmpl>,
        id: &str,
        limits: EffectiveLimits,
        mut mount: Option<OwnedFd>,
        (targets, trees): (Vec<VolumeTarget>, Vec<OwnedFd>),
        host_targets: Vec<sandlot_jail::config::HostMountTarget>,
    ) -> Result<(i32, Channels, Arc<Zygote>), RuntimeError> {
        let fsize_mb = if mount.is_some() {
            // The quota caps the workspace; a pooled sandbox may be handed out with a larger
            // one than it booted with, so single files may be as large as the server allows.
            self.inner.config.max_limits.disk_mb
        } else {
            limits.disk_mb
        };
        let mut cfg = jail_config(limits, fsize_mb);
        cfg.volumes = targets;
        // Their trees follow the volumes' in `trees`.
        cfg.host_mounts = host_targets;
        let jail = serde_json::to_value(cfg).map_err(encoding("the jail config"))?;
        let trees = Arc::new(trees);
        // Only the base environment goes through the zygote; the creator's variables are sent
        // on the sandbox's own channel once it is up.
        let env =
            serde_json::to_value(sandbox_env()).map_err(encoding("the sandbox environment"))?;
        let mut restarted = false;
        loop {
            let zygote = self.zygote(tmpl).await?;
            let channels = Channels::open()?;
            let (id, jail, env, z) = (id.to_string(), jail.clone(), env.clone(), zygote.clone());
            // The channels move into the blocking call and come back with its answer, so their
            // fds stay open (and theirs) for as long as the zygote may be reading them.
            let ws = mount.take();
            let vols = trees.clone();
            let (forked, channels, ws) = blocking("the fork request", move || {
                let mut fds = channels.child_fds().to_vec();
                fds.extend(ws.as_ref().map(|m| m.as_raw_fd()));
                fds.extend(vols.iter().map(|t| t.as_raw_fd()));
                let forked = z.spawn(&id, &jail, &env, &fds);
                (forked, channels, ws)
            })
            .await?;
            mount = ws;
            match forked {
                Ok(p0) => return Ok((p0, channels, zygote)),
                Err(e @ ZygoteError::Refused(_)) => return Err(at("fork")(e)),
                Err(e) if !restarted => {
                    tracing::warn!(error = %e, "the zygote failed while forking; restarting it");
                    drop(channels);
                    zygote.kill();
                    restarted = true;
                }
                Err(e) => return Err(at("fork")(e)),
            }
        }
    }
}

/// Size of the sandbox's `/tmp`: a tmpfs, so charged to its memory. Capped at half of
/// `memory_mb` (filling it gives `ENOSPC`, never an OOM of the sandbox), at `disk_mb` and at
/// 1 GiB; large files belong in the disk workspace.
/// The record of a sandbox created for `req`, admitted as `a`, running from now.
pub(crate) fn new_record(id: &str, a: &Admitted, req: &CreateSandbox) -> Sandbox {
    let now = time::OffsetDateTime::now_utc();
    Sandbox {
        id: id.to_string(),
        template: a.tmpl.spec.name.clone(),
        template_version: a.tmpl.version.clone(),
        state: SandboxState::Running,
        env: req.env.clone(),
        metadata: req.metadata.clone(),
        limits: a.limits,
        idle_timeout: a.idle,
        max_lifetime: a.lifetime,
        created_at: util::rfc3339(now),
        last_active_at: util::rfc3339(now),
        expires_at: util::rfc3339(now + Duration::from_secs(a.lifetime)),
        ended_reason: None,
        restart_count: 0,
        last_restart: None,
        on_idle: req.on_idle.unwrap_or_default(),
        forked_from: None,
        from_snapshot: None,
        paused_at: None,
        last_restore: None,
        volumes: a.volumes.clone(),
        mounts: req.mounts.clone(),
        ports: crate::ports::requested_ports(req),
        all_ports: req.all_ports,
        tenant: req
            .tenant
            .clone()
            .unwrap_or_else(|| sandlot_types::DEFAULT_TENANT.to_owned()),
        tier: req
            .tier
            .clone()
            .unwrap_or_else(|| sandlot_types::ISOLATED_TIER.to_owned()),
        network: req.network.clone(),
        secrets: req.secrets.iter().map(|s| s.name.clone()).collect(),
        contained: None,
        port_token: None,
    }
}

pub(crate) fn tmp_bytes(limits: EffectiveLimits) -> u64 {
    (limits.disk_mb << 20)
        .min((limits.memory_mb << 20) / 2)
        .min(1 << 30)
}

/// Size of the sandbox's `/dev/shm`: a quarter of `memory_mb`.
pub(crate) fn shm_bytes(limits: EffectiveLimits) -> u64 {
    (limits.memory_mb << 20) / 4
}

/// The jail the child enters, sized from the sandbox's limits. `workspace_bytes` and
/// `workspace_inodes` size the tmpfs a child without a disk workspace gets.
fn jail_config(limits: EffectiveLimits, fsize_mb: u64) -> JailConfig {
    JailConfig {
        hostname: "sandbox".into(),
        workspace_bytes: limits.disk_mb << 20,
        workspace_inodes: 65536.max(limits.disk_mb * 64),
        tmp_bytes: tmp_bytes(limits),
        shm_bytes: shm_bytes(limits),
        rlimits: RlimitConfig {
            fsize: fsize_mb << 20,
            ..RlimitConfig::default()
        },
        landlock: true,
        seccomp: true,
        volumes: Vec::new(),
        host_mounts: Vec::new(),
    }
}

/// The three channels a sandbox is born with, both ends: its control stream (a socketpair)
/// and its stdout and stderr pipes. The child's ends go to the zygote with the fork request;
/// the server keeps the others.
struct Channels {
    ours: std::os::unix::net::UnixStream,
    theirs: std::os::unix::net::UnixStream,
    stdout: (OwnedFd, OwnedFd),
    stderr: (OwnedFd, OwnedFd),
}

impl Channels {
    fn open() -> Result<Self, RuntimeError> {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().map_err(at("socketpair"))?;
        let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(at("pipe"));
        Ok(Self {
            ours,
            theirs,
            stdout: pipe()?,
            stderr: pipe()?,
        })
    }

    /// The child's ends, as the zygote passes them on: control stream, stdout, stderr.
    fn child_fds(&self) -> [RawFd; 3] {
        [
            self.theirs.as_raw_fd(),
            self.stdout.1.as_raw_fd(),
            self.stderr.1.as_raw_fd(),
        ]
    }

    /// Closes the child's ends (the zygote passed them on) and returns the server's: the
    /// control stream, ready for tokio, and the read ends of stdout and stderr.
    fn keep_ours(self) -> Result<(UnixStream, OwnedFd, OwnedFd), RuntimeError> {
        let Channels {
            ours,
            theirs,
            stdout,
            stderr,
        } = self;
        drop((theirs, stdout.1, stderr.1));
        ours.set_nonblocking(true).map_err(at("socket"))?;
        let ctrl = UnixStream::from_std(ours).map_err(at("socket"))?;
        Ok((ctrl, stdout.0, stderr.0))
    }
}

/// Starts moving P0 into the sandbox's cgroup while it unshares its namespaces: joining can
/// wait for an RCU grace period (milliseconds on cgroup v1), and P0 forks nothing before "go".
fn join_cgroup(cg: &Cgroup, p0: i32) -> Joining {
    let cg = cg.clone();
    Joining(tokio::task::spawn_blocking(move || cg.add(p0)))
}

/// P0 on its way into the sandbox's cgroup.
struct Joining(tokio::task::JoinHandle<Result<(), CgroupError>>);

impl Joining {
    /// Waits until P0 is in the cgroup.
    async fn finish(self) -> Result<(), RuntimeError> {
        let joined = self.0.await.map_err(|source| RuntimeError::Task {
            task: "joining the cgroup",
            source,
        })?;
        joined.map_err(at("cgroup"))
    }
}

/// P0 has unshared its namespaces when it sends [`UNSHARED`]; anything else (or nothing) means
/// it failed before.
async fn await_unshared(ctrl: &mut UnixStream) -> Result<(), RuntimeError> {
    let mut b = [0u8; 1];
    ctrl.read_exact(&mut b).await.map_err(at("handshake"))?;
    if b[0] != UNSHARED {
        return Err(at("namespaces")(CreateFailure::Protocol(
            "the child failed before unsharing",
        )));
    }
    Ok(())
}

/// Maps uid and gid 1000 inside P0's user namespace to the sandbox's host uid.
fn write_id_maps(p0: i32, uid: u32) -> Result<(), RuntimeError> {
    sandlot_jail::idmap::write_maps(Path::new("/proc"), p0, uid, uid).map_err(at("id maps"))
}

/// Lets P0 go on: its ids are mapped and it is in the sandbox's cgroup.
async fn send_go(ctrl: &mut UnixStream) -> Result<(), RuntimeError> {
    ctrl.write_all(&[GO]).await.map_err(at("handshake"))
}

/// P0 reports the host pid of P1, the sandbox's pid 1, then exits.
async fn await_init(r: &mut OwnedReadHalf) -> Result<i32, RuntimeError> {
    let init = sandbox::read_frame(r).await.map_err(at("init"))?;
    let pid = (init.get("type").and_then(|t| t.as_str()) == Some("init"))
        .then(|| init.get("pid")?.as_i64())
        .flatten();
    pid.map(|p| p as i32).ok_or_else(|| jail_failure(&init))
}

/// P2, fully confined, says hello from the driver.
async fn await_hello(r: &mut OwnedReadHalf) -> Result<(), RuntimeError> {
    let hello = sandbox::read_frame(r).await.map_err(at("driver start"))?;
    if hello.get("type").and_then(|t| t.as_str()) != Some("hello") {
        return Err(jail_failure(&hello));
    }
    Ok(())
}

/// P2 is P1's only child when the driver starts.
fn find_driver(init_pid: i32) -> Result<i32, RuntimeError> {
    let children = std::fs::read_to_string(format!("/proc/{init_pid}/task/{init_pid}/children"));
    children
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| at("driver")(CreateFailure::Protocol("no driver process")))
}

/// Pidfds of P1 and P2, opened before [`verify_owner`]: if the processes are still the
/// sandbox's after the pidfds exist, the pidfds refer to them for good.
fn open_pidfds(init_pid: i32, driver_pid: i32) -> Result<(OwnedFd, OwnedFd), RuntimeError> {
    let init_fd = sandbox::pidfd_open(init_pid).map_err(at("pidfd"))?;
    let driver_fd = sandbox::pidfd_open(driver_pid).map_err(at("pidfd"))?;
    Ok((init_fd, driver_fd))
}

/// Both processes run as the sandbox's host uid (a recycled pid would not).
fn verify_owner(uid: u32, pids: &[i32]) -> Result<(), RuntimeError> {
    use std::os::unix::fs::MetadataExt;
    for &pid in pids {
        let owner = std::fs::metadata(format!("/proc/{pid}")).map(|m| m.uid());
        if owner.ok() != Some(uid) {
            return Err(at("verify")(CreateFailure::NotOurs(pid)));
        }
    }
    Ok(())
}

/// The child's own account of a failed start: its `jail_error` message.
fn jail_failure(v: &serde_json::Value) -> RuntimeError {
    let message = v
        .get("message")
        .and_then(|m| m.as_str())
        .unwrap_or("unexpected message from the sandbox");
    RuntimeError::JailFailed {
        message: message.to_string(),
    }
}

/// When each step of a start finished, for the debug log.
struct Timeline {
    t0: Instant,
    marks: Vec<(&'static str, Duration)>,
}

impl Timeline {
    fn start() -> Self {
        Self {
            t0: Instant::now(),
            marks: Vec::with_capacity(5),
        }
    }

    fn mark(&mut self, step: &'static str) {
        self.marks.push((step, self.t0.elapsed()));
    }
}

impl fmt::Display for Timeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (step, at)) in self.marks.iter().enumerate() {
            let sep = if i == 0 { "" } else { " " };
            write!(f, "{sep}{step}={at:?}")?;
        }
        Ok(())
    }
}
