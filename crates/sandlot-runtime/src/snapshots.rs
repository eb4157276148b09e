//! Snapshots: a sandbox's interpreter state and workspace files, saved under an id (and an
//! optional name) so any number of sandboxes can start from it later, on this server or after
//! a restart. A snapshot is a state file `<data-dir>/snapshots/<id>.state` (`saved.rs`), a
//! copy-on-write snapshot of the workspace kept among the workspaces under the snapshot's id,
//! and a record in the store (parent sandbox, template and version, sizes, what was not
//! captured, the body's checksum). It outlives its sandbox; deleting it never touches the
//! sandboxes started from it (each has its own copy).
//!
//! A sandbox started from a snapshot is booted like a fork's child (`fork.rs`): its own uid
//! and cgroup, the snapshot's workspace copied and re-owned, the state loaded with fresh
//! entropy. A snapshot whose state file is truncated or altered is refused with
//! `state_corrupt` naming it; nothing else is affected.

use crate::error::{store, RuntimeError};
use crate::saved::{self, FORMAT_VERSION};
use crate::task::blocking;
use crate::util::{lock, new_id, now_rfc3339};
use crate::Runtime;
use sandlot_store::SnapshotRecord;
use sandlot_types::{CreateSandbox, CreateSnapshot, Sandbox, Snapshot};

impl Runtime {
    /// Takes a snapshot of a sandbox (a paused one is resumed for it).
    pub async fn create_snapshot(
        &self,
        id: &str,
        req: CreateSnapshot,
    ) -> Result<Snapshot, RuntimeError> {
        if let Some(name) = &req.name {
            let n = name.chars().count();
            if n == 0 || n > 128 || name.chars().any(char::is_control) {
                return Err(RuntimeError::BadSnapshotName);
            }
        }
        let e = self.entry(id)?;
        let turn = self.turn(&e).await;
        let (turn, live, _) = self.ready_live(&e, turn).await?;
        self.touch(&e);
        let snap = new_id("snap_");
        let path = self.snapshot_state(&snap);
        let (turn, saved) = self
            .save_state(&e, turn, &live, &path, saved::Durability::Durable)
            .await?;
        let tenant = lock(&e.info).tenant.clone();
        let copied = self.snapshot_workspace(&e.id, &snap, Some(tenant)).await;
        drop(turn);
        if let Err(err) = copied {
            let _ = std::fs::remove_file(&path);
            return Err(err);
        }
        let info = lock(&e.info).clone();
        let record = SnapshotRecord {
            snapshot: Snapshot {
                id: snap.clone(),
                name: req.name,
                sandbox_id: info.id,
                template: info.template,
                template_version: info.template_version,
                created_at: now_rfc3339(),
                state_bytes: saved.bytes,
                workspace: true,
                variables: saved.variables,
                not_captured: saved.not_captured,
                version: FORMAT_VERSION,
                tenant: info.tenant,
            },
            state_sha256: saved.sha256,
            contexts: saved.contexts,
        };
        if let Err(err) = self.inner.storage.store.insert_snapshot(&record) {
            self.remove_snapshot_files(&snap).await;
            return Err(store("recording the snapshot")(err));
        }
        Ok(record.snapshot)
    }

    /// Every snapshot, oldest first.
    pub async fn list_snapshots(&self) -> Result<Vec<Snapshot>, RuntimeError> {
        Ok(self
            .inner
            .storage
            .store
            .list_snapshots()
            .map_err(store("listing snapshots"))?
            .into_iter()
            .map(|r| r.snapshot)
            .collect())
    }

    pub async fn get_snapshot(&self, id: &str) -> Result<Snapshot, RuntimeError> {
        Ok(self.snapshot_record(id)?.snapshot)
    }

    /// Deletes a snapshot: its record, state file and workspace copy.
    pub async fn delete_snapshot(&self, id: &str) -> Result<(), RuntimeError> {
        self.snapshot_record(id)?;
        let deleted = self
            .inner
            .storage
            .store
            .delete_snapshot(id)
            .map_err(store("deleting a snapshot"))?;
        if !deleted {
            return Err(RuntimeError::SnapshotNotFound { id: id.to_string() });
        }
        self.remove_snapshot_files(id).await;
        Ok(())
    }

    /// Checks a snapshot's state file on the host (its checksum over the whole body) without
    /// loading it; the error says what is wrong.
    pub async fn verify_snapshot(&self, id: &str) -> Result<Snapshot, RuntimeError> {
        let rec = self.snapshot_record(id)?;
        let path = self.snapshot_state(id);
        let sha = rec.state_sha256.clone();
        blocking("verifying a snapshot", move || {
            saved::verify(&path, Some(&sha))
        })
        .await?
        .map_err(|reason| RuntimeError::StateCorrupt {
            what: format!("snapshot {id}"),
            reason,
        })?;
        Ok(rec.snapshot)
    }

    fn snapshot_record(&self, id: &str) -> Result<SnapshotRecord, RuntimeError> {
        self.inner
            .storage
            .store
            .get_snapshot(id)
            .map_err(store("reading a snapshot"))?
            .ok_or_else(|| RuntimeError::SnapshotNotFound { id: id.to_string() })
    }

    /// Ids of every recorded snapshot (their workspace copies are not orphans).
    pub(crate) fn snapshot_ids(&self) -> Vec<String> {
        self.inner
            .storage
            .store
            .list_snapshots()
            .map(|v| v.into_iter().map(|r| r.snapshot.id).collect())
            .unwrap_or_default()
    }

    async fn remove_snapshot_files(&self, id: &str) {
        let (rt, id) = (self.clone(), id.to_string());
        let _ = blocking("removing a snapshot's files", move || {
            let _ = std::fs::remove_file(rt.snapshot_state(&id));
            rt.remove_workspace(&id);
        })
        .await;
    }

    /// `POST /v1/sandboxes` with `from_snapshot`: a sandbox with the snapshot's files and
    /// state, the template it was taken of, and the request's limits, env and lifetimes.
    pub(crate) async fn create_from_snapshot(
        &self,
        mut req: CreateSandbox,
        snapshot: &str,
    ) -> Result<Sandbox, RuntimeError> {
        let rec = self.snapshot_record(snapshot)?;
        let snap = &rec.snapshot;
        if let Some(asked) = &req.template {
            if *asked != snap.template {
                return Err(RuntimeError::SnapshotTemplate {
                    snapshot: snap.id.clone(),
                    has: snap.template.clone(),
                    asked: asked.clone(),
                });
            }
        }
        req.template = Some(snap.template.clone());
        let admitted = self.admit(&req)?;
        let ticket = self.enqueue_create()?;
        let saved = saved::Saved {
            bytes: snap.state_bytes,
            sha256: rec.state_sha256.clone(),
            variables: snap.variables,
            not_captured: snap.not_captured.clone(),
            contexts: rec.contexts.clone(),
        };
        let state = self.snapshot_state(&snap.id);
        let snap_id = snap.id.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let rt = self.clone();
        tokio::spawn(async move {
            let _ticket = ticket;
            let created = async {
                let _slot = rt
                    .inner
                    .registry
                    .create_slots
                    .acquire()
                    .await
                    .map_err(|_| RuntimeError::AdmissionClosed)?;
                let r = rt
                    .boot_from(
                        &admitted.tmpl,
                        &admitted.tenant,
                        admitted.limits,
                        &admitted.volumes,
                        &req.env,
                        &snap_id,
                        &state,
                        &saved,
                        true,
                        "snapshot",
                    )
                    .await
                    .map_err(|err| match err {
                        RuntimeError::StateCorrupt { reason, .. } => RuntimeError::StateCorrupt {
                            what: format!("snapshot {snap_id}"),
                            reason,
                        },
                        other => other,
                    })?;
                let mut info = crate::spawn::new_record(&r.live.id, &admitted, &req);
                info.from_snapshot = Some(snap_id.clone());
                info.last_restore = Some(r.restore);
                rt.adopt(r.live, info).await
            }
            .await;
            if let Err(Ok(sandbox)) = tx.send(created) {
                rt.abandon_created(&sandbox.id).await;
            }
        });
        rx.await.unwrap_or(Err(RuntimeError::AdmissionClosed))
    }
}
