//! Rollback (`execute` with `"on_failure": "rollback"`). Before the cell, the sandbox's state
//! is captured with the machinery pause and snapshots use: the driver saves every code context
//! (variables, functions, imports, each Bash session's cwd and exports) into a state file
//! (`saved.rs`, not fsynced: it lives for one execution), and the workspace gets a Btrfs
//! snapshot (copy-on-write, O(1) in the files it holds) named after the capture. A marker
//! `<data-dir>/state/rollback/<capture>.json` written last says the capture is whole.
//!
//! - The cell succeeds: the marker goes first (from then on nothing can roll the cell back),
//!   then, off the answer's path, the state file and the workspace snapshot.
//! - The cell fails (an error, a timeout, out of memory, killed, interrupted, or its output
//!   withheld or the sandbox contained by the guardrails): the sandbox's processes are killed,
//!   its workspace is replaced by the snapshot, fresh processes boot in place (`restart.rs`)
//!   and load the saved state, then the capture is discarded. The result says `rolled_back`
//!   and why. A contained sandbox gets its files back but no processes (containment stopped
//!   them on purpose).
//! - The server dies in between: on the next start, every whole capture (its marker is there)
//!   rolls its sandbox back: the workspace is replaced by the snapshot and the state file
//!   becomes the sandbox's paused state, so the sandbox comes back `paused` and its next call
//!   resumes it with the variables it had before the cell. A capture without its marker (the
//!   server died while capturing, before the cell ran) is discarded: the sandbox is as the
//!   cell found it. Either way there is no half state: the replacement of the workspace is
//!   redone from the start if the server dies during it.
//!
//! What is not rolled back: processes the cell started in the background (they end with the
//! processes that are replaced), sockets and connections, anything outside the sandbox
//! (requests it sent, files written to volumes, which are not part of the workspace), and
//! values the state cannot pickle (listed in the result as `not_restored`).

use crate::error::RuntimeError;
use crate::restart::Turn;
use crate::sandbox::Live;
use crate::saved::{self, Saved, StateFailure};
use crate::task::blocking;
use crate::util::{lock, new_id};
use crate::{Entry, Runtime};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// The directory of the state dir that holds captures in flight.
const DIR: &str = "rollback";

/// A capture taken before a cell, until it is discarded or rolled back to.
pub(crate) struct Capture {
    /// The capture's id: its files' names and its workspace snapshot's.
    id: String,
    saved: Saved,
    pub(crate) capture_ms: f64,
}

/// What the marker of a whole capture records, for a rollback after a restart.
#[derive(Serialize, Deserialize)]
struct Marker {
    sandbox: String,
    saved: Saved,
}

/// What putting a capture back restored.
pub(crate) struct Restored {
    pub(crate) variables: u64,
    pub(crate) not_restored: Vec<sandlot_types::NotCaptured>,
    pub(crate) restore_ms: f64,
}

impl Runtime {
    fn rollback_dir(&self) -> PathBuf {
        self.state_dir().join(DIR)
    }

    fn capture_state(&self, cap: &str) -> PathBuf {
        self.rollback_dir().join(format!("{cap}.state"))
    }

    fn capture_marker(&self, cap: &str) -> PathBuf {
        self.rollback_dir().join(format!("{cap}.json"))
    }

    /// Captures the sandbox's state before a cell (call with its turn held, `live` up). The
    /// turn comes back unless the driver died saving (then a restart holds it).
    pub(crate) async fn capture(
        &self,
        e: &Arc<Entry>,
        turn: Turn,
        live: &Live,
    ) -> Result<(Turn, Capture), RuntimeError> {
        if !e.disk {
            return Err(RuntimeError::CaptureFailed {
                reason: "its workspace is not on disk, so its files cannot be rolled back".into(),
            });
        }
        let t0 = Instant::now();
        let cap = new_id("rbk_");
        let state = self.capture_state(&cap);
        // The save (in the driver) and the snapshot (a kernel ioctl) are independent: side by
        // side, the capture costs the longer of the two. The sandbox runs no cell meanwhile
        // (its turn is held), so both see the state between cells.
        let (saving, snapshot) = tokio::join!(
            self.save_state(e, turn, live, &state, saved::Durability::Transient),
            self.snapshot_workspace(&e.id, &cap, None),
        );
        let snapshot_err = snapshot.err().map(|err| match err {
            RuntimeError::Workspace { source, .. } => RuntimeError::CaptureFailed {
                reason: format!("the workspace could not be snapshotted: {source}"),
            },
            other => other,
        });
        let (turn, saved) = match (saving, snapshot_err) {
            (Ok(saved), None) => saved,
            (Ok(_), Some(err)) => {
                self.drop_capture_files(&cap).await;
                return Err(err);
            }
            (Err(err), _) => {
                self.drop_capture_files(&cap).await;
                return Err(err);
            }
        };
        // The marker last: a capture is whole (and a restart rolls back to it) only with it.
        let marker = Marker {
            sandbox: e.id.clone(),
            saved: saved.clone(),
        };
        let path = self.capture_marker(&cap);
        let written = blocking("writing a rollback marker", move || {
            write_marker(&path, &marker)
        })
        .await?;
        if let Err(source) = written {
            self.drop_capture_files(&cap).await;
            return Err(RuntimeError::CaptureFailed {
                reason: format!("its marker could not be written: {source}"),
            });
        }
        Ok((
            turn,
            Capture {
                id: cap,
                saved,
                capture_ms: t0.elapsed().as_secs_f64() * 1e3,
            },
        ))
    }

    /// The cell succeeded: the capture goes. Its marker synchronously (once this returns no
    /// restart can roll the cell back), the rest in the background.
    pub(crate) async fn discard_capture(&self, cap: Capture) {
        let _ = std::fs::remove_file(self.capture_marker(&cap.id));
        let rt = self.clone();
        tokio::spawn(async move { rt.drop_capture_files(&cap.id).await });
    }

    /// Removes a capture's state file and workspace snapshot.
    async fn drop_capture_files(&self, cap: &str) {
        let (rt, cap) = (self.clone(), cap.to_string());
        let _ = blocking("removing a rollback capture", move || {
            let _ = std::fs::remove_file(rt.capture_state(&cap));
            rt.remove_workspace(&cap);
            let _ = std::fs::remove_file(rt.capture_marker(&cap));
        })
        .await;
    }

    /// The cell failed: puts the sandbox back as the capture found it. Call with the turn
    /// held; the old processes (alive or not) are replaced. A contained sandbox gets its files
    /// back and stays without processes.
    pub(crate) async fn roll_back(
        &self,
        e: &Arc<Entry>,
        turn: Turn,
        cap: Capture,
    ) -> (Turn, Result<Restored, RuntimeError>) {
        let t0 = Instant::now();
        let old = lock(&e.slot).live.take();
        let (rt, cg) = (self.clone(), e.cgroup.clone());
        let cleared = blocking("stopping a rolled-back sandbox's processes", move || {
            if let Some(old) = old {
                old.kill();
            }
            rt.clear_failed_boot(&cg);
        })
        .await;
        if let Err(err) = cleared {
            return (turn, Err(err));
        }
        if lock(&e.slot).ended {
            // Being deleted: its workspace goes with it, so nothing is put back.
            self.drop_capture_files(&cap.id).await;
            return (
                turn,
                Err(RuntimeError::SandboxGone {
                    id: e.id.clone(),
                    state: "ending",
                    reason: "it is being removed".into(),
                }),
            );
        }
        let tenant = lock(&e.info).tenant.clone();
        let (rt, id, capid) = (self.clone(), e.id.clone(), cap.id.clone());
        let swapped = blocking("putting a workspace back", move || {
            rt.put_workspace_back(&id, &capid, &tenant)
        })
        .await
        .and_then(|r| r);
        if let Err(err) = swapped {
            // The marker stays: the next start of the server tries again.
            return (turn, Err(err));
        }
        if lock(&e.info).contained.is_some() {
            self.drop_capture_files(&cap.id).await;
            return (
                turn,
                Ok(Restored {
                    variables: 0,
                    not_restored: vec![],
                    restore_ms: t0.elapsed().as_secs_f64() * 1e3,
                }),
            );
        }
        let (turn, booted) = match self.reboot_in_task(e.clone(), turn).await {
            Ok(r) => r,
            Err(err) => {
                // The task panicked and took the turn: nobody holds it any more, which only a
                // bug can cause; the capture is dropped and the error says what happened.
                self.drop_capture_files(&cap.id).await;
                let fresh = self.turn(e).await;
                return (fresh, Err(err));
            }
        };
        let live = match booted {
            Ok(live) => live,
            Err(err) => {
                self.drop_capture_files(&cap.id).await;
                return (turn, Err(err));
            }
        };
        let loaded = saved::load(
            &live,
            &self.capture_state(&cap.id),
            &cap.saved.sha256,
            false,
        )
        .await;
        self.drop_capture_files(&cap.id).await;
        match loaded {
            Ok(l) => {
                *lock(&live.contexts) = cap.saved.contexts.clone();
                (
                    turn,
                    Ok(Restored {
                        variables: l.variables,
                        not_restored: l.not_restored,
                        restore_ms: t0.elapsed().as_secs_f64() * 1e3,
                    }),
                )
            }
            Err(failure) => {
                let reason = match failure {
                    StateFailure::Refused(r) | StateFailure::Died(r) => r,
                    StateFailure::Host(err) => err.to_string(),
                };
                // Fresh processes with the files put back but no variables: restart them so
                // nothing half-loaded stays.
                live.signal_kill();
                let _ = self.restart_after(e, turn, crate::restart::reason::CRASHED);
                let fresh = self.turn(e).await;
                (fresh, Err(RuntimeError::StateLoad { reason }))
            }
        }
    }

    /// Replaces workspace `id` by a copy of the capture's snapshot `cap` (then removes the
    /// snapshot). Idempotent, so a restart can redo it from any step. Blocking.
    fn put_workspace_back(&self, id: &str, cap: &str, tenant: &str) -> Result<(), RuntimeError> {
        let ws = self.workspaces()?;
        let err = |op| move |e| crate::workspace::workspace_error(op, e);
        if ws.get(cap).is_err() {
            // Done already (the snapshot is removed last).
            return Ok(());
        }
        match ws.remove(id) {
            Ok(()) | Err(sandlot_workspace::WorkspaceError::NotFound { .. }) => {}
            Err(e) => return Err(err("remove")(e)),
        }
        ws.snapshot_for(cap, id, Some(tenant))
            .map_err(err("snapshot"))?;
        let _ = ws.remove(cap);
        Ok(())
    }

    /// At start, before sandboxes are taken over: every whole capture a previous run left
    /// rolls its sandbox back (its files now, its variables as a paused state); partial ones
    /// go. Blocking.
    pub(crate) fn recover_rollbacks(&self) {
        let dir = self.rollback_dir();
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return;
        };
        let mut captures = std::collections::BTreeSet::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(cap) = name.split('.').next() {
                captures.insert(cap.to_string());
            }
        }
        for cap in captures {
            let marker: Option<Marker> = std::fs::read(self.capture_marker(&cap))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            if let Some(m) = marker {
                self.recover_capture(&cap, m);
            }
        }
        // No capture is in flight at start: whatever is left (their state files, markers and
        // partial writes) goes; their workspace snapshots are reclaimed with the orphans.
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

impl Runtime {
    /// Rolls back the sandbox of one whole capture a previous run left, if it is still one
    /// the server takes over (it was running when the server died). Blocking.
    fn recover_capture(&self, cap: &str, m: Marker) {
        use sandlot_types::SandboxState;
        let record = self
            .inner
            .storage
            .store
            .get_sandbox(&m.sandbox)
            .ok()
            .flatten();
        let Some(info) =
            record.filter(|s| matches!(s.state, SandboxState::Running | SandboxState::Stopped))
        else {
            return;
        };
        if let Err(e) = self.put_workspace_back(&m.sandbox, cap, &info.tenant) {
            tracing::error!(sandbox = %m.sandbox, capture = %cap, error = %e,
                "rolling back a cell cut short failed; its files stay as it left them");
            return;
        }
        // Its variables as a paused state: recovery then finds the sandbox paused, and its
        // next call resumes it with them.
        let paused = self.paused_state(&m.sandbox);
        let moved = std::fs::rename(self.capture_state(cap), &paused)
            .and_then(|()| saved::write_json(&paused.with_extension("json"), &m.saved));
        match moved {
            Ok(()) => tracing::info!(sandbox = %m.sandbox, capture = %cap,
                "rolled back a cell cut short by the server's end"),
            Err(e) => {
                let _ = std::fs::remove_file(&paused);
                tracing::warn!(sandbox = %m.sandbox, error = %e,
                    "rolled back the files of a cell cut short; its variables are lost")
            }
        }
    }
}

/// Writes the marker aside and renames it into place (not fsynced: a capture lives for one
/// execution, and a host crash loses it whole, which leaves the sandbox as the cell left it).
fn write_marker(path: &Path, marker: &Marker) -> std::io::Result<()> {
    let text = serde_json::to_vec(marker).map_err(std::io::Error::other)?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let partial = path.with_extension("json.partial");
    std::fs::write(&partial, text)?;
    std::fs::rename(&partial, path)
}
