//! Pause and resume. A paused sandbox holds no process, no memory and no cgroup: its
//! interpreter state is saved into `<data-dir>/state/<id>.state` (`saved.rs`), its processes
//! are killed and its cgroup removed; it keeps its id, its workspace on disk and its host uid
//! (reserved, so no other sandbox runs under the uid that owns its files). It survives a
//! server restart (`housekeeping.rs` finds it `paused`), does not count against the running
//! sandboxes, and its paused time does not count toward its maximum lifetime. It expires after
//! the server's paused retention (default 30 days; unlimited allowed).
//!
//! Resume boots fresh processes for it in place (`restart.rs`'s `reboot`) and loads the state
//! into them with the random state it had. Any call that needs its processes (execute, a
//! context request, fork, snapshot, `resume`) resumes it, under its execution lock: two
//! resumes at once are one resume and the same sandbox; a resume racing a delete loses.
//!
//! A pause that cannot save (the disk fills, an object never finishes pickling past the
//! bounds, the driver dies) fails with `capture_failed` and leaves the sandbox running.

use crate::error::RuntimeError;
use crate::restart::Turn;
use crate::sandbox::Live;
use crate::saved::{self, Saved, StateFailure};
use crate::task::blocking;
use crate::util::{lock, now_rfc3339, secs_since};
use crate::{Entry, Runtime};
use sandlot_types::{IdleAction, LastRestore, Sandbox, SandboxState};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Decides whether an idle sandbox of a tenant may pause: `Ok` with what to hold until the
/// pause is done, or why not.
pub type IdlePauseGate = Arc<
    dyn Fn(
            &Runtime,
            String,
        ) -> std::pin::Pin<
            Box<
                dyn std::future::Future<Output = Result<Box<dyn std::any::Any + Send>, String>>
                    + Send,
            >,
        > + Send
        + Sync,
>;

impl Runtime {
    /// Pauses a sandbox (a paused one stays paused) and returns it.
    pub async fn pause_sandbox(&self, id: &str) -> Result<Sandbox, RuntimeError> {
        let e = self.entry(id)?;
        let turn = self.turn(&e).await;
        let was = e.state();
        self.pause_with(&e, turn).await?;
        let info = lock(&e.info).clone();
        if was != SandboxState::Paused {
            self.emit_for(
                sandlot_types::LifecycleKind::Paused,
                &e,
                None,
                serde_json::Value::Null,
            );
        }
        Ok(info)
    }

    /// Resumes a paused sandbox (a running one is returned as it is; a stopped one restarts).
    pub async fn resume_sandbox(&self, id: &str) -> Result<Sandbox, RuntimeError> {
        let e = self.entry(id)?;
        let turn = self.turn(&e).await;
        let was = e.state();
        let (_turn, _live, _) = self.ready_live(&e, turn).await?;
        let info = lock(&e.info).clone();
        if was == SandboxState::Paused {
            self.emit_for(
                sandlot_types::LifecycleKind::Resumed,
                &e,
                None,
                serde_json::Value::Null,
            );
        }
        Ok(info)
    }

    /// Drops a paused sandbox's saved interpreter state, so that its next resume boots fresh
    /// processes over its files (E2B's filesystem-only pause). Under its turn, so never in the
    /// middle of a resume; a sandbox that is not paused is left alone. Answers whether a state
    /// was dropped.
    pub async fn drop_paused_state(&self, id: &str) -> Result<bool, RuntimeError> {
        let e = self.entry(id)?;
        let turn = self.turn(&e).await;
        if e.state() != SandboxState::Paused {
            return Ok(false);
        }
        let path = self.paused_state(&e.id);
        let meta = meta_of(&path);
        let dropped = std::fs::remove_file(&path).is_ok();
        let _ = std::fs::remove_file(&meta);
        drop(turn);
        Ok(dropped)
    }

    /// Saves the sandbox's state and stops its processes; call with its turn (given back
    /// when the sandbox is paused, or kept by a restart when the processes died saving).
    pub(crate) async fn pause_with(&self, e: &Arc<Entry>, turn: Turn) -> Result<(), RuntimeError> {
        match e.state() {
            SandboxState::Paused => return Ok(()),
            SandboxState::Failed => {
                return Err(RuntimeError::CaptureFailed {
                    reason: "the sandbox is in the failed state".into(),
                })
            }
            _ => {}
        }
        if lock(&e.slot).ended {
            return Err(RuntimeError::SandboxGone {
                id: e.id.clone(),
                state: "ending",
                reason: "it is being removed".into(),
            });
        }
        if !e.disk {
            return Err(RuntimeError::CaptureFailed {
                reason: "its workspace is not on disk, so its files would not outlive it".into(),
            });
        }
        let path = self.paused_state(&e.id);
        let meta = meta_of(&path);
        let live = e.live().filter(|l| !l.is_dead() && !l.init_exited());
        // A stopped sandbox has no interpreter state to save: it resumes as it would restart.
        let (turn, saved) = match live {
            Some(live) => {
                let (turn, saved) = self
                    .save_state(e, turn, &live, &path, saved::Durability::Durable)
                    .await?;
                (turn, Some(saved))
            }
            None => {
                let _ = std::fs::remove_file(&path);
                let _ = std::fs::remove_file(&meta);
                (turn, None)
            }
        };
        let stopped = {
            let old = lock(&e.slot).live.take();
            let rt = self.clone();
            let cg = e.cgroup.clone();
            blocking("stopping a paused sandbox's processes", move || {
                if let Some(old) = old {
                    old.kill();
                }
                rt.clear_failed_boot(&cg);
                let _ = cg.remove();
                saved.map(|s| saved::write_json(&meta, &s)).transpose()
            })
            .await?
        };
        if let Err(source) = stopped {
            // Without its record the state cannot be checked on load; the processes are gone,
            // so the sandbox resumes fresh rather than from a state it cannot trust.
            tracing::error!(sandbox = %e.id, error = %source, "recording a paused state failed");
            let _ = std::fs::remove_file(&path);
        }
        {
            let mut info = lock(&e.info);
            info.state = SandboxState::Paused;
            info.paused_at = Some(now_rfc3339());
            info.ended_reason = None;
        }
        self.save(e);
        drop(turn);
        tracing::info!(sandbox = %e.id, "paused");
        Ok(())
    }

    /// Boots a paused sandbox's processes and loads its state; call from `ready_live` with its
    /// turn. On failure the sandbox stays paused with its state kept.
    pub(crate) async fn resume_in(
        &self,
        e: &Arc<Entry>,
        turn: Turn,
    ) -> Result<(Turn, Arc<Live>), RuntimeError> {
        let path = self.paused_state(&e.id);
        let meta_path = meta_of(&path);
        let meta: Option<Saved> = std::fs::read(&meta_path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .filter(|_| path.exists());
        let (turn, booted) = self.reboot_in_task(e.clone(), turn).await?;
        let live = booted?;
        let mut restore = None;
        if let Some(saved) = &meta {
            match saved::load(&live, &path, &saved.sha256, false).await {
                Ok(loaded) => {
                    *lock(&live.contexts) = saved.contexts.clone();
                    restore = Some(LastRestore {
                        at: now_rfc3339(),
                        source: "resume".into(),
                        variables: loaded.variables,
                        not_restored: loaded.not_restored,
                    });
                }
                Err(failure) => {
                    self.back_to_paused(e, live).await;
                    return Err(match failure {
                        StateFailure::Refused(reason) => RuntimeError::StateCorrupt {
                            what: format!("the paused state of sandbox {}", e.id),
                            reason,
                        },
                        StateFailure::Died(reason) => RuntimeError::StateLoad { reason },
                        StateFailure::Host(err) => err,
                    });
                }
            }
        }
        {
            let mut info = lock(&e.info);
            let paused_for = info.paused_at.as_deref().map(secs_since).unwrap_or(0.0);
            let paused_for = Duration::from_secs_f64(paused_for);
            // Paused time does not count toward the lifetime.
            *lock(&e.expires) += paused_for;
            if let Ok(t) = time::OffsetDateTime::parse(
                &info.expires_at,
                &time::format_description::well_known::Rfc3339,
            ) {
                info.expires_at = crate::util::rfc3339(t + paused_for);
            }
            info.paused_at = None;
            if restore.is_some() {
                info.last_restore = restore;
            }
        }
        self.save(e);
        self.touch(e);
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(&meta_path);
        tracing::info!(sandbox = %e.id, "resumed");
        Ok((turn, live))
    }

    /// Undoes a resume whose load failed: the fresh processes go, the sandbox is paused again.
    async fn back_to_paused(&self, e: &Arc<Entry>, live: Arc<Live>) {
        lock(&e.slot).live = None;
        let (rt, cg) = (self.clone(), e.cgroup.clone());
        let _ = blocking("stopping a failed resume", move || {
            live.kill();
            rt.clear_failed_boot(&cg);
            let _ = cg.remove();
        })
        .await;
        lock(&e.info).state = SandboxState::Paused;
        self.save(e);
    }

    /// Installs the gate an idle sandbox passes before it pauses (the server's: its tenant's
    /// `max_paused_sandboxes`). Once; later calls are ignored.
    pub fn set_idle_pause_gate(&self, gate: IdlePauseGate) {
        let _ = self.inner.hooks.idle_pause_gate.set(gate);
    }

    /// The idle timeout reached: pause or delete, as the sandbox asked.
    pub(crate) async fn idle_out(&self, e: &Arc<Entry>, idle: u64) {
        let action = lock(&e.info).on_idle;
        if action == IdleAction::Pause {
            // A tenant at its paused share cannot get round it by letting sandboxes idle: the
            // sandbox is deleted instead, as when a pause fails. The claim is held until the
            // pause is done, so the next count sees it.
            let tenant = lock(&e.info).tenant.clone();
            let claim = match self.inner.hooks.idle_pause_gate.get() {
                Some(gate) => {
                    match gate(self, tenant).await {
                        Ok(claim) => Some(claim),
                        Err(why) => {
                            tracing::warn!(sandbox = %e.id, why = %why, "an idle sandbox cannot pause; it is deleted instead");
                            let why = format!("expired: idle for more than its idle timeout of {idle} s, and {why}");
                            self.end(e, SandboxState::Expired, &why).await;
                            return;
                        }
                    }
                }
                None => None,
            };
            if let Ok(turn) = e.exec_lock.clone().try_lock_owned() {
                let paused = self.pause_with(e, turn).await;
                drop(claim);
                match paused {
                    Ok(()) => return,
                    Err(err) => {
                        tracing::warn!(sandbox = %e.id, error = %err, "pausing an idle sandbox failed; it is deleted instead");
                    }
                }
            } else {
                return; // busy after all: the next round looks again
            }
        }
        let why = format!("expired: idle for more than its idle timeout of {idle} s");
        self.end(e, SandboxState::Expired, &why).await;
    }

    /// A paused sandbox past the paused retention expires.
    pub(crate) async fn check_paused(&self, e: &Arc<Entry>) {
        let Some(keep) = self.inner.config.paused_retention_secs else {
            return;
        };
        let paused_for = lock(&e.info).paused_at.as_deref().map(secs_since);
        if paused_for.is_some_and(|s| s >= keep as f64) {
            let why = format!("expired: paused for more than the paused retention of {keep} s");
            self.end(e, SandboxState::Expired, &why).await;
        }
    }

    /// The code contexts a paused sandbox's saved state holds.
    pub(crate) fn paused_contexts(&self, id: &str) -> Option<Vec<sandlot_types::Context>> {
        let meta = std::fs::read(meta_of(&self.paused_state(id))).ok()?;
        serde_json::from_slice::<Saved>(&meta)
            .ok()
            .map(|s| s.contexts)
    }

    /// Removes a sandbox's paused state, if it has one (the sandbox ended). Blocking.
    pub(crate) fn remove_paused_state(&self, id: &str) {
        let path = self.paused_state(id);
        let _ = std::fs::remove_file(meta_of(&path));
        let _ = std::fs::remove_file(&path);
    }
}

/// The JSON record next to a paused state file.
fn meta_of(state: &std::path::Path) -> PathBuf {
    state.with_extension("json")
}
