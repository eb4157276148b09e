//! Restart in place. A sandbox's files, id, uid, cgroup, limits, env and metadata belong to the
//! sandbox; its processes do not. When the driver dies or has to be killed (out of memory, a
//! timeout it ignored, a crash, a broken control stream), or the sandbox was stopped by a
//! server restart, fresh processes are booted for the same sandbox from its template's zygote
//! (the same handshake as a creation, `spawn.rs`) and the creator's environment is sent again.
//! Python state, the Bash session and code contexts do not survive; the execution that caused
//! the restart says so (`restarted` in its result) and the sandbox counts it (`restart_count`,
//! `last_restart`).
//!
//! A restart runs under the sandbox's execution lock, in a task of its own: the request that
//! caused it answers at once, the next one waits for the fresh processes, and a client that
//! goes away cannot cut a boot short. A restart loop is bounded: a sandbox that needs more
//! than [`MAX_RESTARTS`] restarts within [`RESTART_WINDOW`] is marked `failed` (its files stay
//! readable until it is deleted).

use crate::error::RuntimeError;
use crate::sandbox::Live;
use crate::task::blocking;
use crate::util::{lock, now_rfc3339};
use crate::{Entry, Runtime};
use sandlot_types::{LastRestart, Restarted, SandboxState, TemplateStatus};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::OwnedMutexGuard;

/// Most restarts a sandbox may need within [`RESTART_WINDOW`]; one more marks it `failed`.
pub(crate) const MAX_RESTARTS: usize = 5;
pub(crate) const RESTART_WINDOW: Duration = Duration::from_secs(60);

/// Why a sandbox's processes restarted, as `restarted.reason` and `last_restart.reason` say.
pub(crate) mod reason {
    pub const OOM: &str = "oom";
    pub const TIMEOUT: &str = "timeout";
    pub const INTERRUPT_IGNORED: &str = "interrupt ignored";
    pub const CRASHED: &str = "crashed";
    pub const SERVER_RESTARTED: &str = "server restarted";
}

/// What a restart loses, every time.
fn lost() -> Vec<String> {
    vec!["python state".into(), "bash session".into()]
}

/// The sandbox's execution lock, held.
pub(crate) type Turn = OwnedMutexGuard<()>;

impl Runtime {
    /// Takes the sandbox's turn: waits behind the execution, context request or restart ahead
    /// of it (in arrival order).
    pub(crate) async fn turn(&self, e: &Arc<Entry>) -> Turn {
        e.exec_lock.clone().lock_owned().await
    }

    /// The processes to serve a request in, with the sandbox's turn held: the current ones, or
    /// fresh ones restarted in place when they died or the sandbox was stopped (then the
    /// restart is returned too). Refuses a sandbox that failed or is ending.
    pub(crate) async fn ready_live(
        &self,
        e: &Arc<Entry>,
        turn: Turn,
    ) -> Result<(Turn, Arc<Live>, Option<Restarted>), RuntimeError> {
        let (current, ended) = {
            let slot = lock(&e.slot);
            (slot.live.clone(), slot.ended)
        };
        if ended {
            return Err(ending(&e.id));
        }
        let state = e.state();
        if state == SandboxState::Failed {
            return Err(failed(e));
        }
        self.check_not_contained(e)?;
        if state == SandboxState::Paused {
            let (turn, live) = self.resume_in(e, turn).await?;
            return Ok((turn, live, None));
        }
        if let Some(live) = current {
            if !live.is_dead() && !live.init_exited() {
                return Ok((turn, live, None));
            }
        }
        let why = if state == SandboxState::Stopped {
            reason::SERVER_RESTARTED
        } else {
            reason::CRASHED
        };
        // The fault is detected now (this request found the processes gone): the time to
        // recover runs from here to fresh processes ready (the KPI, `sandlot_recovery_seconds`).
        let detected = Instant::now();
        let restarted = match self.count_restart(e, why) {
            Ok(r) => r,
            Err(err) => {
                self.put_down(e).await;
                return Err(err);
            }
        };
        let (turn, booted) = self.reboot_in_task(e.clone(), turn).await?;
        let booted = booted?;
        sandlot_telemetry::metrics().recovered(why, detected.elapsed());
        Ok((turn, booted, Some(restarted)))
    }

    /// After an execution or request in which the processes died or were killed: counts the
    /// restart and boots fresh processes in the background, holding the sandbox's turn until
    /// they are up. Returns what the answer says about it; `None` when the sandbox is ending
    /// or has just failed (a restart loop).
    pub(crate) fn restart_after(&self, e: &Arc<Entry>, turn: Turn, why: &str) -> Option<Restarted> {
        if lock(&e.slot).ended {
            return None;
        }
        // A contained sandbox stays without processes: containment killed them on purpose.
        if lock(&e.info).contained.is_some() {
            drop(turn);
            return None;
        }
        // The fault (OOM, timeout, a crash seen by the execution) is detected now.
        let t0 = Instant::now();
        let restarted = match self.count_restart(e, why) {
            Ok(r) => r,
            Err(err) => {
                tracing::warn!(sandbox = %e.id, error = %err, "not restarting the sandbox");
                let rt = self.clone();
                let e = e.clone();
                tokio::spawn(async move {
                    rt.put_down(&e).await;
                    drop(turn);
                });
                return None;
            }
        };
        let rt = self.clone();
        let e = e.clone();
        let why = why.to_owned();
        tokio::spawn(async move {
            match rt.reboot(&e).await {
                Ok(_) => {
                    sandlot_telemetry::metrics().recovered(&why, t0.elapsed());
                    tracing::debug!(sandbox = %e.id, took = ?t0.elapsed(), "restarted in place")
                }
                Err(err) => {
                    tracing::warn!(sandbox = %e.id, error = %err, "restarting in place failed; the next request retries")
                }
            }
            drop(turn);
        });
        Some(restarted)
    }

    /// [`Runtime::reboot`] in a task of its own, so a caller that goes away cannot cut it
    /// short; the turn comes back with the outcome.
    pub(crate) async fn reboot_in_task(
        &self,
        e: Arc<Entry>,
        turn: Turn,
    ) -> Result<(Turn, Result<Arc<Live>, RuntimeError>), RuntimeError> {
        let rt = self.clone();
        tokio::spawn(async move {
            let booted = rt.reboot(&e).await;
            (turn, booted)
        })
        .await
        .map_err(|source| RuntimeError::Task {
            task: "restarting a sandbox",
            source,
        })
    }

    /// Boots fresh processes for the sandbox in place: what is left of the old ones is killed
    /// and reaped, then its template's zygote forks a new child into the sandbox's own uid,
    /// cgroup and limits, the creator's environment is sent, and the new processes are
    /// installed unless the sandbox ended meanwhile. Call with the sandbox's turn held.
    async fn reboot(&self, e: &Arc<Entry>) -> Result<Arc<Live>, RuntimeError> {
        let old = lock(&e.slot).live.take();
        let (cg, rt) = (e.cgroup.clone(), self.clone());
        blocking("clearing a sandbox's old processes", move || {
            if let Some(old) = old {
                old.kill();
            }
            rt.clear_failed_boot(&cg);
        })
        .await?;
        if lock(&e.slot).ended {
            return Err(ending(&e.id));
        }
        let (template, tenant, limits, env, volumes, host_mounts) = {
            let info = lock(&e.info);
            (
                info.template.clone(),
                info.tenant.clone(),
                info.limits,
                info.env.clone(),
                info.volumes.clone(),
                info.mounts.clone(),
            )
        };
        let tmpl = self.template(&tenant, &template)?;
        if let (TemplateStatus::Building, _) = tmpl.status() {
            return Err(RuntimeError::TemplateBuilding { name: template });
        }
        // The group exists unless a server restart removed it (a stopped sandbox); either way
        // it gets the sandbox's limits again.
        sandlot_jail::cgroup::Cgroup::create(
            &self.inner.cgroups.hierarchy,
            e.cgroup.rel(),
            &crate::admission::cgroup_limits(limits),
        )
        .map_err(|source| RuntimeError::SandboxCgroup { source })?;
        // Its read-only host paths come back with it (restart in place, resume).
        let spawn = self.spawn_in(
            &tmpl,
            &e.id,
            e.host_uid,
            &e.cgroup,
            limits,
            e.disk.then_some((&tenant[..], &volumes[..])),
        );
        let live = match crate::host_mounts::scope(host_mounts, spawn).await {
            Ok(live) => live,
            Err(err) => {
                let (cg, rt) = (e.cgroup.clone(), self.clone());
                let _ = blocking("clearing a failed restart", move || {
                    rt.clear_failed_boot(&cg)
                })
                .await;
                return Err(err);
            }
        };
        if let Err(err) = live.send_env(&env, None).await {
            let _ = blocking("clearing a failed restart", move || live.kill()).await;
            return Err(err);
        }
        let installed = {
            let mut slot = lock(&e.slot);
            if slot.ended {
                false
            } else {
                slot.live = Some(live.clone());
                true
            }
        };
        if !installed {
            let _ = blocking("clearing a restart of an ended sandbox", move || {
                live.kill()
            })
            .await;
            return Err(ending(&e.id));
        }
        if let Err(err) = self.govern_started(e, &live).await {
            tracing::warn!(sandbox = %e.id, error = %err, "egress not restored after the restart");
        }
        {
            let mut info = lock(&e.info);
            if info.template_version != tmpl.version {
                info.template_version = tmpl.version.clone();
            }
            info.state = SandboxState::Running;
            info.ended_reason = None;
        }
        self.save(e);
        Ok(live)
    }

    /// Counts a restart of the sandbox (its `restart_count` and `last_restart`, recorded), or
    /// marks it `failed` when it has already restarted [`MAX_RESTARTS`] times within
    /// [`RESTART_WINDOW`].
    fn count_restart(&self, e: &Arc<Entry>, why: &str) -> Result<Restarted, RuntimeError> {
        let now = Instant::now();
        let looping = {
            let mut recent = lock(&e.restarts);
            while recent
                .front()
                .is_some_and(|t| now.duration_since(*t) > RESTART_WINDOW)
            {
                recent.pop_front();
            }
            let looping = recent.len() >= MAX_RESTARTS && why != reason::SERVER_RESTARTED;
            if !looping {
                recent.push_back(now);
            }
            looping
        };
        if looping {
            let reason = format!(
                "its processes needed more than {MAX_RESTARTS} restarts within {} s (last: {why}); \
                 its files stay readable until it is deleted",
                RESTART_WINDOW.as_secs()
            );
            {
                let mut info = lock(&e.info);
                info.state = SandboxState::Failed;
                info.ended_reason = Some(reason.clone());
            }
            self.save(e);
            self.emit_for(
                sandlot_types::LifecycleKind::Failed,
                e,
                None,
                serde_json::json!({"state": SandboxState::Failed, "reason": reason}),
            );
            return Err(failed(e));
        }
        {
            let mut info = lock(&e.info);
            info.restart_count += 1;
            info.last_restart = Some(LastRestart {
                reason: why.to_string(),
                at: now_rfc3339(),
            });
        }
        self.save(e);
        self.emit_for(
            sandlot_types::LifecycleKind::Restarted,
            e,
            None,
            serde_json::json!({"reason": why}),
        );
        Ok(Restarted {
            reason: why.to_string(),
            lost: lost(),
        })
    }

    /// Kills a failed sandbox's processes (its files, cgroup and uid stay until it ends). Call
    /// with its turn held.
    async fn put_down(&self, e: &Arc<Entry>) {
        let old = lock(&e.slot).live.take();
        let (cg, rt) = (e.cgroup.clone(), self.clone());
        let _ = blocking("stopping a failed sandbox", move || {
            if let Some(old) = old {
                old.kill();
            }
            rt.clear_failed_boot(&cg);
        })
        .await;
    }

    /// Writes the sandbox's record as it is now.
    pub(crate) fn save(&self, e: &Entry) {
        let info = lock(&e.info).clone();
        if let Err(err) = self.inner.storage.store.update_sandbox(&info) {
            tracing::error!(sandbox = %e.id, error = %err, "recording the sandbox failed");
        }
    }
}

/// The error for a sandbox that is being deleted or expired right now.
fn ending(id: &str) -> RuntimeError {
    RuntimeError::SandboxGone {
        id: id.to_string(),
        state: "ending",
        reason: "it is being removed".into(),
    }
}

/// The error for a request to a sandbox in the `failed` state.
fn failed(e: &Entry) -> RuntimeError {
    RuntimeError::SandboxInFailedState {
        id: e.id.clone(),
        reason: lock(&e.info).ended_reason.clone().unwrap_or_default(),
    }
}
