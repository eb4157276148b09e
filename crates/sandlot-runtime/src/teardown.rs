//! Teardown, in one place: everything that gives back what a sandbox or a zygote held on the
//! host. A sandbox always goes the same way, in an order that is safe: its processes are
//! killed ([`Live::kill`]) and its init reaped, then its cgroup is removed, and its uid is freed
//! last, so a uid is handed out again only when nothing of the old sandbox can run under it.
//! A zygote goes the same way: its whole cgroup is killed (whatever its imports and setup
//! started, daemons included), then removed, then its uid freed. A freed uid is quarantined
//! before it is handed out again (`uids.rs`).
//! No step waits unboundedly on anything the sandbox controls: a cgroup that cannot be emptied
//! at once (a process in uninterruptible sleep) becomes a [`Grave`] that housekeeping retries,
//! and the uid stays reserved until it is gone. The entry points differ only in what exists
//! and who waits:
//!
//! - [`Runtime::end`]: a client's sandbox (deleted, expired, shut down)
//! - [`Runtime::discard`]: a sandbox that never reached a client (pool, failed hand-out)
//! - [`Runtime::abandon_boot`]: a boot that failed before there was a [`Live`]
//! - [`Runtime::retire_template`] and [`Runtime::stop_template`]: a template's pool and zygote
//!
//! [`Runtime::reap_orphans`] is the backstop: sandbox inits are reparented to the server (a
//! subreaper), and any that died without being reaped (a boot that failed after the fork) are
//! reaped there, so no zombie of a sandbox outlives it.

use crate::kill::{empty_cgroup, KILL_WAIT};
use crate::sandbox::{pidfd_signal, reap_within, Live};
use crate::templates::Tmpl;
use crate::util::{lock, now_rfc3339};
use crate::{Entry, Runtime};
use sandlot_jail::cgroup::Cgroup;
use sandlot_types::SandboxState;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a kill waits for the init to be reapable once the cgroup is empty.
const REAP_WAIT: Duration = Duration::from_millis(200);

/// A sandbox's cgroup, workspace and uid, still held because the cgroup (or the workspace)
/// could not be removed yet.
pub(crate) struct Grave {
    id: String,
    uid: u32,
    cgroup: Cgroup,
    /// Whether the workspace on disk is still to be removed.
    workspace: bool,
    since: Instant,
}

impl Live {
    /// Starts killing every process of the sandbox and returns at once: SIGKILL to its
    /// pid-namespace init (which takes the whole namespace with it), then the cgroup frozen,
    /// every process in it SIGKILLed and thawed, so nothing can fork away meanwhile. Writing
    /// to cgroup files does not wait for the processes, so this is safe on the response path.
    pub fn signal_kill(&self) {
        tracing::debug!(sandbox = %self.id, init = self.init_pid, "killing the sandbox");
        self.dead.store(true, Ordering::SeqCst);
        pidfd_signal(&self.init_fd, libc::SIGKILL);
        let _ = self.cgroup.kill_all(Duration::ZERO);
    }

    /// Kills every process of the sandbox and waits, bounded, until they are gone and the
    /// init is reaped. Blocking. True when nothing of it is left.
    pub fn kill(&self) -> bool {
        self.signal_kill();
        let emptied = empty_cgroup(&self.cgroup, KILL_WAIT);
        let reaped = reap_within(&self.init_fd, REAP_WAIT);
        if !reaped {
            tracing::debug!(sandbox = %self.id, init = self.init_pid, "init not reaped yet");
        }
        emptied
    }
}

impl Runtime {
    /// Ends a client's sandbox in any state: takes it out of the live map, kills its processes,
    /// waits for the execution or restart that holds it to finish (they finish at once once
    /// the processes are dead), records why it ended, and releases its cgroup, workspace and
    /// uid. A sandbox ends once; later calls do nothing and return false.
    pub(crate) async fn end(&self, e: &Arc<Entry>, state: SandboxState, reason: &str) -> bool {
        if lock(&self.inner.registry.sandboxes).remove(&e.id).is_none() {
            return false;
        }
        self.govern_ended(&e.id);
        let current = {
            let mut slot = lock(&e.slot);
            slot.ended = true;
            slot.live.clone()
        };
        // Killed first, so an execution running in it ends now instead of at its timeout.
        if let Some(live) = &current {
            live.signal_kill();
        }
        let guard = e.exec_lock.clone().lock_owned().await;
        let last = lock(&e.slot).live.take();
        let rt = self.clone();
        let entry = e.clone();
        let released = tokio::task::spawn_blocking(move || {
            for live in [current, last].into_iter().flatten() {
                live.kill();
            }
            // Before its uid is freed: the volumes it wrote go back to their own uids.
            rt.release_volumes(&entry.id);
            rt.release(&entry.id, entry.host_uid, &entry.cgroup, entry.disk);
        });
        let mut info = lock(&e.info).clone();
        info.state = state;
        info.ended_reason = Some(reason.to_string());
        info.last_active_at = now_rfc3339();
        *lock(&e.info) = info.clone();
        if let Err(err) = self.inner.storage.store.update_sandbox(&info) {
            tracing::error!(error = %err, "recording the end of a sandbox failed");
        }
        let _ = released.await;
        drop(guard);
        let kind = match state {
            SandboxState::Deleted => sandlot_types::LifecycleKind::Killed,
            SandboxState::Expired => sandlot_types::LifecycleKind::Expired,
            _ => sandlot_types::LifecycleKind::Failed,
        };
        self.emit(
            kind,
            &info.id,
            &info.tenant,
            None,
            serde_json::json!({"state": state, "reason": reason}),
        );
        true
    }

    /// Stops a sandbox at shutdown: its processes are killed and its cgroup removed, but its
    /// workspace and record stay (`stopped`, or `failed` as it was), so the next start gives
    /// it back. A sandbox without a disk workspace has nothing to keep and ends `lost`.
    pub(crate) async fn stop(&self, e: &Arc<Entry>) {
        if !e.disk {
            self.end(e, SandboxState::Lost, "the server shut down")
                .await;
            return;
        }
        let current = {
            let mut slot = lock(&e.slot);
            slot.ended = true;
            slot.live.clone()
        };
        if let Some(live) = &current {
            live.signal_kill();
        }
        let guard = e.exec_lock.clone().lock_owned().await;
        let last = lock(&e.slot).live.take();
        let entry = e.clone();
        let _ = tokio::task::spawn_blocking(move || {
            for live in [current, last].into_iter().flatten() {
                live.kill();
            }
            empty_cgroup(&entry.cgroup, KILL_WAIT);
            let _ = entry.cgroup.remove();
        })
        .await;
        {
            let mut info = lock(&e.info);
            // A failed sandbox stays failed and a paused one paused (its state is on disk).
            if !matches!(info.state, SandboxState::Failed | SandboxState::Paused) {
                info.state = SandboxState::Stopped;
                info.ended_reason = Some(
                    "the server stopped; the sandbox's processes were stopped and its files kept"
                        .into(),
                );
            }
        }
        self.save(e);
        drop(guard);
        self.emit_for(
            sandlot_types::LifecycleKind::Stopped,
            e,
            None,
            serde_json::json!({"reason": "the server shut down"}),
        );
    }

    /// Kills a sandbox that never reached a client and releases what it held; the handle
    /// finishes when all of it is gone (or handed to housekeeping).
    pub(crate) fn discard(&self, live: Arc<Live>) -> tokio::task::JoinHandle<()> {
        let rt = self.clone();
        tokio::task::spawn_blocking(move || {
            live.kill();
            rt.release(&live.id, live.host_uid, &live.cgroup, live.disk());
        })
    }

    /// Undoes a boot that failed before a sandbox existed: whatever of it joined the cgroup is
    /// killed through the cgroup (there are no pidfds yet), an init it left is reaped, then the
    /// cgroup, workspace and uid are released. Returns when all of it is gone (or handed to
    /// housekeeping).
    pub(crate) async fn abandon_boot(&self, id: &str, uid: u32, cg: Cgroup) {
        let (rt, id) = (self.clone(), id.to_string());
        let _ = tokio::task::spawn_blocking(move || {
            empty_cgroup(&cg, KILL_WAIT);
            rt.reap_orphans();
            rt.release(&id, uid, &cg, true);
        })
        .await;
    }

    /// Kills what a failed restart left in a sandbox's cgroup (the sandbox keeps its cgroup
    /// and uid). Blocking.
    pub(crate) fn clear_failed_boot(&self, cg: &Cgroup) {
        empty_cgroup(cg, KILL_WAIT);
        self.reap_orphans();
    }

    /// The last steps of every sandbox teardown, once its processes are dead: removes its
    /// cgroup (retrying while the kernel retires the group) and its workspace (`workspace`),
    /// and frees its uid. What cannot go yet (a group that still holds processes) is left to
    /// housekeeping, and the uid stays reserved meanwhile. Blocking.
    fn release(&self, id: &str, uid: u32, cg: &Cgroup, workspace: bool) {
        if workspace {
            self.remove_paused_state(id);
        }
        let mut removed = false;
        for _ in 0..20 {
            if cg.remove().is_ok() {
                removed = true;
                break;
            }
            if !cg.pids().is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let workspace = workspace && !self.remove_workspace(id);
        if removed && !workspace {
            self.release_uid(uid);
            return;
        }
        tracing::warn!(
            sandbox = id,
            uid,
            "a sandbox's cgroup or workspace cannot be removed yet; housekeeping retries"
        );
        self.inner.registry.bury(Grave {
            id: id.to_string(),
            uid,
            cgroup: cg.clone(),
            workspace,
            since: Instant::now(),
        });
    }

    /// Housekeeping's retry of cgroups that could not be removed: kills what is left, removes
    /// the group, frees the uid. Blocking.
    pub(crate) fn sweep_graves(&self) {
        let graves: Vec<Grave> = self.inner.registry.take_graves();
        let mut left = Vec::new();
        for mut g in graves {
            empty_cgroup(&g.cgroup, Duration::from_millis(50));
            self.reap_orphans();
            let removed = g.cgroup.remove().is_ok();
            if removed && g.workspace {
                g.workspace = !self.remove_workspace(&g.id);
            }
            if removed && !g.workspace {
                tracing::info!(sandbox = %g.id, uid = g.uid, after = ?g.since.elapsed(), "a sandbox was finally released");
                self.release_uid(g.uid);
            } else {
                left.push(g);
            }
        }
        self.inner.registry.rebury(left);
    }

    /// Reaps every exited child of the server that ran as one of this server's sandbox uids:
    /// inits of sandboxes (reparented to us when their P0 exited) whose pidfd was never opened
    /// or already dropped. Zygotes (also children, also such uids) are left to their own
    /// handles. Blocking, but never waits.
    pub(crate) fn reap_orphans(&self) {
        for pid in zombie_children() {
            let Some(uid) = proc_uid(pid) else { continue };
            if !lock(&self.inner.registry.slots).is_sandbox_uid(uid) {
                continue;
            }
            // SAFETY: waitpid on a specific pid of ours, without blocking.
            let r = unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
            if r == pid {
                tracing::debug!(pid, uid, "reaped an orphaned sandbox process");
            }
        }
    }

    /// Frees a host uid of a sandbox or zygote for reuse.
    pub(crate) fn release_uid(&self, uid: u32) {
        self.inner.registry.release_uid(uid);
    }

    /// Retires a template replaced by one of the same name: its pool is killed, then its
    /// zygote and every process in the zygote's cgroup (what its setup left running, a
    /// double-forked daemon included), the cgroup removed and only then the zygote's uid freed
    /// (to quarantine). Sandboxes already handed out live on in their own cgroups.
    pub(crate) fn retire_template(&self, old: Arc<Tmpl>) {
        // Before the zygote is taken: a start that comes after sees it and refuses.
        old.retired.store(true, Ordering::SeqCst);
        let rt = self.clone();
        let pool = rt.drain_pool(&old);
        tokio::spawn(async move {
            for gone in pool {
                let _ = gone.await;
            }
            let zygote = old.zygote.write().await.take();
            let _ = tokio::task::spawn_blocking(move || {
                rt.end_zygote(&old, zygote);
            })
            .await;
        });
    }

    /// Kills a template's zygote and its whole cgroup, then releases the group and the uid as
    /// a sandbox's are (a group that cannot be emptied yet is left to housekeeping, its uid
    /// held meanwhile). Blocking.
    fn end_zygote(&self, t: &Tmpl, zygote: Option<Arc<crate::zygote::Zygote>>) {
        let cg = self.inner.cgroups.open(&t.zygote_cgroup);
        // The group first, so nothing the setup started can act in between; then the zygote's
        // handle reaps it.
        empty_cgroup(&cg, KILL_WAIT);
        if let Some(z) = zygote {
            z.kill();
        }
        empty_cgroup(&cg, KILL_WAIT);
        // What its setup double-forked was reparented to the server (a subreaper) and is a
        // zombie now; the zygote itself was reaped by its handle above.
        for pid in zombie_children() {
            if proc_uid(pid) == Some(t.zygote_uid) {
                // SAFETY: waitpid on a specific pid of ours, without blocking.
                unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
            }
        }
        let label = format!("zygote of {}", t.spec.name);
        self.release(&label, t.zygote_uid, &cg, false);
    }

    /// Stops a template at shutdown: its pool killed (waited for), its zygote and its cgroup
    /// killed, the cgroup removed.
    pub(crate) async fn stop_template(&self, t: &Tmpl) {
        t.retired.store(true, Ordering::SeqCst);
        for gone in self.drain_pool(t) {
            let _ = gone.await;
        }
        let zygote = t.zygote.write().await.take();
        let cg = self.inner.cgroups.open(&t.zygote_cgroup);
        let _ = tokio::task::spawn_blocking(move || {
            empty_cgroup(&cg, KILL_WAIT);
            if let Some(z) = zygote {
                z.kill();
            }
            empty_cgroup(&cg, KILL_WAIT);
            let _ = cg.remove();
        })
        .await;
    }
}

/// Pids of the server's children that have exited and wait to be reaped. Children hang off
/// the thread that forked them or, reparented, off any thread, so every thread is read.
fn zombie_children() -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for t in tasks.flatten() {
        let Ok(list) = std::fs::read_to_string(t.path().join("children")) else {
            continue;
        };
        for pid in list
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    s.rfind(')')
                        .map(|i| s[i + 1..].trim_start().starts_with('Z'))
                })
                .unwrap_or(false);
            if zombie {
                out.push(pid);
            }
        }
    }
    out
}

/// The real uid of a process, from `/proc/<pid>/status`.
fn proc_uid(pid: i32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
