//! The runtime's life around the requests: recovery from what a previous run left behind,
//! the housekeeping loop (expiry by idle timeout and lifetime, sandboxes found dead, dead
//! zygotes restarted, the artifact retention sweep) and shutdown.

use crate::error::{store, RuntimeError};
use crate::util::{lock, now_rfc3339};
use crate::Runtime;
use sandlot_types::SandboxState;
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// How often housekeeping runs.
const EVERY: Duration = Duration::from_millis(500);

impl Runtime {
    /// Takes over what a previous run left: kills whatever still runs in its cgroups (its
    /// sandboxes' inits normally die with the server, see SECURITY.md), marks its running
    /// sandboxes `stopped` (executions cut short `killed`), and gives every stopped or failed
    /// sandbox whose workspace is on disk its entry and uid back, so its files are readable
    /// and its next execution restarts it in place. A sandbox whose workspace is gone is
    /// `lost`; a workspace no record claims (a pooled sandbox, an end cut short) is removed.
    pub(crate) fn recover(&self) -> Result<(), RuntimeError> {
        let began = std::time::Instant::now();
        let inner = &self.inner;
        for name in inner.cgroups.hierarchy.children(&inner.cgroups.base) {
            let cg = inner.cgroups.open(&inner.cgroups.child(&name));
            if let Err(e) = cg.kill_all(Duration::from_secs(5)) {
                tracing::warn!(group = %name, error = %e, "could not empty a leftover cgroup");
            }
            let _ = cg.remove();
        }
        // Cells cut short with a rollback capture roll back before the workspaces are listed.
        self.recover_rollbacks();
        let stopped = inner
            .storage
            .store
            .mark_running(
                SandboxState::Stopped,
                "the server stopped; the sandbox's processes were stopped and its files kept",
                &now_rfc3339(),
            )
            .map_err(store("marking sandboxes of a previous run stopped"))?;
        let workspaces = self.workspaces()?;
        let on_disk: BTreeSet<String> = workspaces
            .list()
            .map_err(|e| crate::workspace::workspace_error("list", e))?
            .into_iter()
            .collect();
        let kept = inner
            .storage
            .store
            .sandboxes_in(&[
                SandboxState::Stopped,
                SandboxState::Failed,
                SandboxState::Paused,
            ])
            .map_err(store("listing stopped sandboxes"))?;
        let mut restored = BTreeSet::new();
        for (mut info, uid) in kept {
            let uid = uid.filter(|uid| {
                on_disk.contains(&info.id)
                    && lock(&inner.registry.slots).reserve(*uid, crate::uids::Kind::Sandbox)
            });
            let Some(uid) = uid else {
                info.state = SandboxState::Lost;
                info.ended_reason =
                    Some("its workspace was not found when the server restarted".into());
                if let Err(e) = inner.storage.store.update_sandbox(&info) {
                    tracing::error!(sandbox = %info.id, error = %e, "recording a lost sandbox failed");
                }
                continue;
            };
            // A crash between a pause's save and its record, or during a resume before the
            // state was loaded: the saved state is the sandbox's latest (no cell ran after it),
            // so it comes back paused rather than losing its variables.
            if info.state == SandboxState::Stopped && self.paused_contexts(&info.id).is_some() {
                info.state = SandboxState::Paused;
                info.paused_at = Some(now_rfc3339());
                info.ended_reason = None;
                if let Err(e) = inner.storage.store.update_sandbox(&info) {
                    tracing::error!(sandbox = %info.id, error = %e, "recording a paused sandbox failed");
                }
            }
            // Secrets lived in the previous run's memory only: the record stops naming them
            // (set them again with `PUT .../network`).
            if !info.secrets.is_empty() {
                info.secrets.clear();
                if let Err(e) = inner.storage.store.update_sandbox(&info) {
                    tracing::error!(sandbox = %info.id, error = %e, "recording forgotten secrets failed");
                }
            }
            let cg = inner.cgroups.open(&inner.cgroups.child(&info.id));
            restored.insert(info.id.clone());
            let entry = Arc::new(crate::Entry::restored(info, uid, cg));
            lock(&inner.registry.sandboxes).insert(entry.id.clone(), entry);
        }
        // Snapshots keep their workspace copies among the workspaces, volumes their files.
        restored.extend(self.snapshot_ids());
        restored.extend(self.recover_volumes());
        self.repair_disk_groups();
        self.sweep_state_leftovers();
        for id in on_disk.difference(&restored) {
            if let Err(e) = workspaces.remove(id) {
                tracing::warn!(workspace = %id, error = %e, "could not reclaim a workspace no sandbox owns");
            }
        }
        *lock(&inner.registry.recovery) = Some(crate::Recovery {
            sandboxes: stopped.len(),
            executions_marked: 0,
            duration_ms: began.elapsed().as_secs_f64() * 1e3,
        });
        tracing::info!(
            stopped = stopped.len(),
            restored = restored.len(),
            reclaimed = on_disk.difference(&restored).count(),
            "took over what a previous run left"
        );
        Ok(())
    }

    /// Removes what a crash left of saves in flight: partial state files and forks' states.
    fn sweep_state_leftovers(&self) {
        let dirs = [
            self.state_dir(),
            self.inner.storage.data_dir.join(crate::saved::SNAPSHOT_DIR),
        ];
        for dir in dirs {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.ends_with(".partial") || name.starts_with("fork-") {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
    }

    /// Runs housekeeping in the background for as long as the runtime exists.
    pub(crate) fn start_housekeeping(&self) {
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(EVERY).await;
                let Some(inner) = weak.upgrade() else { return };
                Runtime { inner }.housekeeping().await;
            }
        });
    }

    /// Expires idle and old sandboxes, restarts in place the processes of idle ones found
    /// dead, restarts a dead zygote, retries cgroups that could not be removed and reaps
    /// orphaned sandbox processes.
    async fn housekeeping(&self) {
        if self.inner.storage.artifacts.sweep_due() {
            let store = self.inner.storage.artifacts.clone();
            tokio::task::spawn_blocking(move || store.sweep());
        }
        for e in self.all_entries() {
            let (idle, lifetime) = {
                let i = lock(&e.info);
                (i.idle_timeout, i.max_lifetime)
            };
            let busy = e.exec_lock.try_lock().is_err() || e.waiting.load(Ordering::SeqCst) > 0;
            let idle_for = lock(&e.last_active).elapsed();
            if e.state() == SandboxState::Paused {
                self.check_paused(&e).await;
            } else if std::time::Instant::now() >= *lock(&e.expires) {
                let why = format!("expired: reached its maximum lifetime of {lifetime} s");
                self.end(&e, SandboxState::Expired, &why).await;
            } else if !busy && idle_for >= Duration::from_secs(idle) {
                self.idle_out(&e, idle).await;
            } else if let Ok(turn) = e.exec_lock.clone().try_lock_owned() {
                // Processes that died between executions (a background process that used all
                // the memory, a crash) come back now rather than on the next request.
                match e.live() {
                    Some(live) if live.is_dead() || live.init_exited() => {
                        live.signal_kill();
                        self.restart_after(&e, turn, crate::restart::reason::CRASHED);
                    }
                    _ => drop(turn),
                }
            }
        }
        for t in self.all_templates() {
            let dead = matches!(t.zygote.read().await.as_ref(), Some(z) if !z.alive());
            if dead {
                if let Err(e) = self.start_zygote(&t).await {
                    tracing::error!(template = %t.spec.name, error = %e, "restarting the zygote failed");
                }
            }
        }
        let rt = self.clone();
        let _ = tokio::task::spawn_blocking(move || {
            rt.sweep_graves();
            rt.reap_orphans();
        })
        .await;
    }

    /// Stops every sandbox (its processes killed, its files kept: the next start finds it
    /// `stopped`) and every zygote, then unmounts the workspaces; called on server shutdown.
    pub async fn shutdown(&self) {
        self.inner.registry.close();
        for e in self.all_entries() {
            self.stop(&e).await;
        }
        for t in self.all_templates() {
            self.stop_template(&t).await;
        }
        // Sandbox groups are removed in the background; give them a moment, then remove
        // this server's own group (it only goes when empty).
        let base = self.inner.cgroups.open(&self.inner.cgroups.base);
        for _ in 0..50 {
            if base.remove().is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.inner.storage.recorder.flush().await;
        let rt = self.clone();
        let _ = tokio::task::spawn_blocking(move || rt.unmount_workspaces()).await;
    }
}
