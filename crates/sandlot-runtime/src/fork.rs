//! Fork: N new sandboxes from one running sandbox, each with its parent's interpreter state
//! (every code context's variables, functions, classes and imports; each Bash session's cwd
//! and exports) and a copy-on-write copy of its workspace; the parent runs on untouched.
//!
//! Under the parent's execution lock (a fork of a sandbox that is executing waits for the cell
//! to end, like any request, in arrival order) its state is saved once (`saved.rs`) and its
//! workspace snapshotted once into a fork base; then the lock is released and the parent's
//! next cell runs while the children boot. Each child gets its own id, host uid and cgroup, a
//! snapshot of the fork base re-owned to its uid, fresh processes from the template's zygote,
//! and loads the saved state with fresh entropy (unless `same_seed`). All or nothing: the
//! children are admitted together against capacity, and if one fails the others are removed.
//! What could not be carried over is listed by name and reason.
//!
//! [`Runtime::boot_from`] (a sandbox from a saved state and a workspace) is shared with
//! sandboxes started from a snapshot (`snapshots.rs`).

use crate::error::RuntimeError;
use crate::sandbox::Live;
use crate::saved::{self, Saved, StateFailure};
use crate::task::blocking;
use crate::templates::Tmpl;
use crate::util::{self, lock, new_id, now_rfc3339};
use crate::Runtime;
use futures::StreamExt;
use sandlot_jail::cgroup::Cgroup;
use sandlot_types::{
    EffectiveLimits, ForkRequest, ForkResult, LastRestore, NotCaptured, Sandbox, SandboxState,
    VolumeMount,
};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most children one fork may make.
pub(crate) const MAX_FORK: u64 = 100;

/// A sandbox booted from a saved state, not yet the client's.
pub(crate) struct Restored {
    pub live: Arc<Live>,
    pub restore: LastRestore,
}

impl Restored {
    fn new(live: Arc<Live>, loaded: saved::Loaded, source: &str) -> Self {
        Restored {
            live,
            restore: LastRestore {
                at: now_rfc3339(),
                source: source.to_string(),
                variables: loaded.variables,
                not_restored: loaded.not_restored,
            },
        }
    }
}

impl Runtime {
    /// Forks a sandbox into `count` children; see the module documentation.
    pub async fn fork_sandbox(
        &self,
        id: &str,
        req: ForkRequest,
    ) -> Result<ForkResult, RuntimeError> {
        if !(1..=MAX_FORK).contains(&req.count) {
            return Err(RuntimeError::BadForkCount {
                count: req.count,
                max: MAX_FORK,
            });
        }
        let e = self.entry(id)?;
        // All or nothing: every child's place is taken before anything is done.
        let tickets = (0..req.count)
            .map(|_| self.enqueue_create())
            .collect::<Result<Vec<_>, _>>()?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let rt = self.clone();
        // In a task of its own: a client that goes away cannot leave half a fork behind.
        tokio::spawn(async move {
            let _tickets = tickets;
            let forked = rt.fork_now(&e, &req).await;
            if let Err(Ok(result)) = tx.send(forked) {
                for child in result.sandboxes {
                    rt.abandon_created(&child.id).await;
                }
            }
        });
        rx.await.unwrap_or(Err(RuntimeError::AdmissionClosed))
    }

    async fn fork_now(
        &self,
        e: &Arc<crate::Entry>,
        req: &ForkRequest,
    ) -> Result<ForkResult, RuntimeError> {
        let t0 = Instant::now();
        let turn = self.turn(e).await;
        let (turn, live, _) = self.ready_live(e, turn).await?;
        self.touch(e);
        let state = self.fork_state();
        let (turn, saved) = self
            .save_state(e, turn, &live, &state, saved::Durability::Transient)
            .await?;
        let base = new_id("forkbase_");
        let tenant = lock(&e.info).tenant.clone();
        let snapped = self.snapshot_workspace(&e.id, &base, Some(tenant)).await;
        // The parent's state and files are captured: its next cell may run.
        drop(turn);
        let parent = lock(&e.info).clone();
        let children = match snapped {
            Ok(()) => {
                self.fork_children(&parent, &base, &state, &saved, req)
                    .await
            }
            Err(err) => Err(err),
        };
        // Off the answer's path: the children have their copies.
        let (rt, state2, base2) = (self.clone(), state.clone(), base.clone());
        tokio::task::spawn_blocking(move || {
            let _ = std::fs::remove_file(&state2);
            rt.remove_workspace(&base2);
        });
        let sandboxes = children?;
        let mut not_captured = saved.not_captured;
        for m in parent.volumes.iter().filter(|m| !m.read_only) {
            not_captured.push(NotCaptured {
                name: format!("volume {}", m.name),
                context: String::new(),
                reason: "mounted read-write by the parent; a volume is read-write in one sandbox at a time"
                    .into(),
            });
        }
        Ok(ForkResult {
            sandboxes,
            not_captured,
            took_ms: t0.elapsed().as_secs_f64() * 1000.0,
        })
    }

    /// Boots and adopts every child, a few at a time; on any failure the ones made go again.
    async fn fork_children(
        &self,
        parent: &Sandbox,
        base: &str,
        state: &Path,
        saved: &Saved,
        req: &ForkRequest,
    ) -> Result<Vec<Sandbox>, RuntimeError> {
        let tmpl = self.template(&parent.tenant, &parent.template)?;
        let slots = self.inner.config.max_concurrent_creates.max(1);
        // A volume is read-write in one sandbox at a time: children get the read-only ones.
        let volumes: Vec<VolumeMount> = parent
            .volumes
            .iter()
            .filter(|m| m.read_only)
            .cloned()
            .collect();
        let booted: Vec<Result<Restored, RuntimeError>> =
            futures::stream::iter((0..req.count).map(|_| {
                // The children mount the parent's host paths (the service gated the forking
                // key for them again).
                crate::host_mounts::scope(
                    parent.mounts.clone(),
                    self.boot_from(
                        &tmpl,
                        &parent.tenant,
                        parent.limits,
                        &volumes,
                        &parent.env,
                        base,
                        state,
                        saved,
                        !req.same_seed,
                        "fork",
                    ),
                )
            }))
            .buffer_unordered(slots)
            .collect()
            .await;
        let (ok, failed): (Vec<_>, Vec<_>) = booted.into_iter().partition(|r| r.is_ok());
        let ok: Vec<Restored> = ok.into_iter().filter_map(Result::ok).collect();
        if let Some(Err(err)) = failed.into_iter().next() {
            for r in ok {
                self.discard(r.live);
            }
            return Err(err);
        }
        let mut made: Vec<Sandbox> = Vec::with_capacity(ok.len());
        let mut lives = ok.into_iter();
        while let Some(r) = lives.next() {
            let mut info = child_info(parent, &r);
            info.volumes = volumes.clone();
            match self.adopt(r.live, info).await {
                Ok(s) => made.push(s),
                Err(err) => {
                    for rest in lives {
                        self.discard(rest.live);
                    }
                    for child in &made {
                        self.abandon_created(&child.id).await;
                    }
                    return Err(err);
                }
            }
        }
        let children: Vec<&str> = made.iter().map(|s| s.id.as_str()).collect();
        self.emit(
            sandlot_types::LifecycleKind::Forked,
            &parent.id,
            &parent.tenant,
            None,
            serde_json::json!({"children": children}),
        );
        Ok(made)
    }

    /// A new sandbox of `tmpl`: its own id, uid and cgroup; its workspace a copy-on-write
    /// snapshot of workspace `base` re-owned to its uid; fresh processes into which `state` is
    /// loaded (fresh entropy when `reseed`). Not yet the client's (see `adopt`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn boot_from(
        &self,
        tmpl: &Arc<Tmpl>,
        tenant: &str,
        limits: EffectiveLimits,
        volumes: &[VolumeMount],
        env: &std::collections::BTreeMap<String, String>,
        base: &str,
        state: &Path,
        saved: &Saved,
        reseed: bool,
        source: &str,
    ) -> Result<Restored, RuntimeError> {
        // A warm sandbox from the pool, with the files cloned into its (empty) workspace, is
        // the fast way; one with volumes is booted for its mounts.
        if volumes.is_empty() && crate::host_mounts::current().is_empty() {
            if let Some(live) = self.take_pooled(tmpl, limits) {
                self.refill(tmpl);
                let restored = self
                    .restore_into_pooled(live, env, base, state, saved, reseed, source)
                    .await;
                match restored {
                    Ok(r) => return Ok(r),
                    Err(err) => {
                        tracing::debug!(error = %err, "restoring into a pooled sandbox failed; booting one")
                    }
                }
            }
        }
        let (id, uid, cg) = self.allocate(tenant, limits, volumes).await?;
        let booted = self
            .boot_restored(
                tmpl,
                &id,
                uid,
                &cg,
                limits,
                (tenant, volumes),
                env,
                base,
                state,
                saved,
                reseed,
            )
            .await;
        match booted {
            Ok((live, loaded)) => Ok(Restored::new(live, loaded, source)),
            Err(err) => {
                self.abandon_allocated(&id, uid, cg).await;
                Err(err)
            }
        }
    }

    /// Gives a pooled sandbox the files of workspace `base` (reflinks, owned by its uid) and
    /// the saved state. On failure it is discarded.
    #[allow(clippy::too_many_arguments)]
    async fn restore_into_pooled(
        &self,
        live: Arc<Live>,
        env: &std::collections::BTreeMap<String, String>,
        base: &str,
        state: &Path,
        saved: &Saved,
        reseed: bool,
        source: &str,
    ) -> Result<Restored, RuntimeError> {
        let ready = async {
            let (rt, base, id, uid) = (
                self.clone(),
                base.to_string(),
                live.id.clone(),
                live.host_uid,
            );
            blocking("cloning a workspace", move || {
                rt.workspaces()?
                    .clone_files_into(&base, &id, uid, uid)
                    .map_err(|e| crate::workspace::workspace_error("clone_files_into", e))
            })
            .await??;
            prime(&live, env, state, saved, reseed).await
        };
        match ready.await {
            Ok(loaded) => Ok(Restored::new(live, loaded, source)),
            Err(err) => {
                self.discard(live);
                Err(err)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn boot_restored(
        &self,
        tmpl: &Arc<Tmpl>,
        id: &str,
        uid: u32,
        cg: &Cgroup,
        limits: EffectiveLimits,
        volumes: (&str, &[VolumeMount]),
        env: &std::collections::BTreeMap<String, String>,
        base: &str,
        state: &Path,
        saved: &Saved,
        reseed: bool,
    ) -> Result<(Arc<Live>, saved::Loaded), RuntimeError> {
        if !self.zygote(tmpl).await?.workspace_fd {
            return Err(RuntimeError::CaptureFailed {
                reason: "this template's sandboxes have no workspace on disk to copy".into(),
            });
        }
        {
            let (rt, base, id) = (self.clone(), base.to_string(), id.to_string());
            let disk = limits.disk_mb << 20;
            blocking("copying a workspace", move || {
                let ws = rt.workspaces()?;
                let err = |op| move |e| crate::workspace::workspace_error(op, e);
                ws.snapshot(&base, &id).map_err(err("snapshot"))?;
                ws.set_limit(&id, disk).map_err(err("set_limit"))?;
                ws.reown(&id, uid, uid).map_err(err("reown"))?;
                Ok::<_, RuntimeError>(())
            })
            .await??;
        }
        let live = self
            .spawn_in(tmpl, id, uid, cg, limits, Some(volumes))
            .await?;
        match prime(&live, env, state, saved, reseed).await {
            Ok(loaded) => Ok((live, loaded)),
            Err(err) => {
                // Only the processes go here: `boot_from` gives back the cgroup, workspace and
                // uid once (`abandon_boot`).
                let _ = blocking("killing a failed restore", move || live.kill()).await;
                Err(err)
            }
        }
    }
}

/// Makes fresh processes the restored sandbox's: the creator's env sent, `state` loaded, the
/// saved contexts listed.
async fn prime(
    live: &Live,
    env: &std::collections::BTreeMap<String, String>,
    state: &Path,
    saved: &Saved,
    reseed: bool,
) -> Result<saved::Loaded, RuntimeError> {
    live.send_env(env, None).await?;
    match saved::load(live, state, &saved.sha256, reseed).await {
        Ok(loaded) => {
            *lock(&live.contexts) = saved.contexts.clone();
            Ok(loaded)
        }
        Err(StateFailure::Refused(reason)) => Err(RuntimeError::StateCorrupt {
            what: "the saved state".into(),
            reason,
        }),
        Err(StateFailure::Died(reason)) => Err(RuntimeError::StateLoad { reason }),
        Err(StateFailure::Host(err)) => Err(err),
    }
}

/// The record of a child of `parent`, with its settings, running from now.
fn child_info(parent: &Sandbox, r: &Restored) -> Sandbox {
    let now = time::OffsetDateTime::now_utc();
    Sandbox {
        id: r.live.id.clone(),
        template: parent.template.clone(),
        template_version: parent.template_version.clone(),
        state: SandboxState::Running,
        env: parent.env.clone(),
        metadata: parent.metadata.clone(),
        limits: parent.limits,
        idle_timeout: parent.idle_timeout,
        max_lifetime: parent.max_lifetime,
        created_at: util::rfc3339(now),
        last_active_at: util::rfc3339(now),
        expires_at: util::rfc3339(now + Duration::from_secs(parent.max_lifetime)),
        ended_reason: None,
        restart_count: 0,
        last_restart: None,
        on_idle: parent.on_idle,
        forked_from: Some(parent.id.clone()),
        from_snapshot: None,
        paused_at: None,
        last_restore: Some(r.restore.clone()),
        volumes: Vec::new(),
        // A fork serves what its parent served: the same ports are reachable.
        ports: parent.ports.clone(),
        all_ports: parent.all_ports,
        // A fork belongs where its parent does, with its tier and egress allowlist; secrets
        // are not copied (the proxy holds them per sandbox).
        tenant: parent.tenant.clone(),
        tier: parent.tier.clone(),
        network: parent.network.clone(),
        secrets: Vec::new(),
        contained: None,
        // The service gated the forking key for each of them again (`trusted::gate_fork`).
        mounts: parent.mounts.clone(),
        port_token: None,
    }
}
