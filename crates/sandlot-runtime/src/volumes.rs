//! Named volumes: files that live apart from any sandbox (a team's dataset, a cache), mounted
//! into sandboxes at creation (`volumes: [{name, path, read_only}]`) under `/workspace`.
//!
//! A volume is a workspace of its own among the workspaces on disk (with its own byte limit), a
//! record in the store, and a host uid reserved for it while it exists. Names are per tenant:
//! every lookup is by `(tenant, name)`, so another tenant's volume of the same name is another
//! volume, and one of another tenant is exactly as missing as one that never was. The
//! workspace id is recorded with the volume: `vol-<hash of tenant and name>` for a volume made
//! now, `vol_<name>` for one made before names were per tenant (its files stay where they are). Any
//! number of sandboxes may mount it read-only at once; one at a time read-write (a second
//! read-write mount is refused with `volume_in_use` naming the holder). The read-write holder
//! owns the files while it holds them (they are re-owned to its host uid when it claims the
//! volume, and back to the volume's own uid when it ends), so no uid is ever shared by a
//! sandbox and another's files. Deleting a sandbox never deletes a volume; a volume that is
//! mounted cannot be deleted.
//!
//! Each boot (creation, restart in place, resume) passes each volume's detached mount (read-only
//! already when it should be) to the child after the workspace's, and the jail attaches it at
//! its path beneath `/workspace` without following links (`sandlot_jail::mounts`). Forks carry
//! the parent's read-only volumes; its read-write ones are reported as not carried.

use crate::error::{store, RuntimeError};
use crate::files::{delete_file_in, list_files_in, read_file_in, WorkspaceRoot};
use crate::task::blocking;
use crate::util::{lock, now_rfc3339};
use crate::{ByteStream, Runtime};
use sandlot_store::VolumeRecord;
use sandlot_types::{CreateVolume, FileEntry, Volume, VolumeMount, VolumeUse};
use std::os::fd::OwnedFd;

/// Size of a volume created without `size_mb`.
const DEFAULT_SIZE_MB: u64 = 1024;

/// The workspace id of a new volume `name` of `tenant`: one path component, distinct for each
/// `(tenant, name)` (and from the `vol_<name>` of volumes made before names were per tenant).
fn new_workspace_id(tenant: &str, name: &str) -> String {
    use sha2::Digest;
    let h = sha2::Sha256::digest(format!("{tenant}\0{name}").as_bytes());
    format!("vol-{}", &hex::encode(h)[..40])
}

/// `[a-z0-9][a-z0-9_-]{0,47}`.
pub(crate) fn check_name(name: &str) -> Result<(), RuntimeError> {
    let ok = !name.is_empty()
        && name.len() <= 48
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(RuntimeError::BadVolumeName {
            name: name.chars().take(64).collect(),
        })
    }
}

/// The key of a volume in the runtime's read-write claims.
fn claim_key(tenant: &str, name: &str) -> (String, String) {
    (tenant.to_owned(), name.to_owned())
}

/// A mount path as the jail takes it: relative to `/workspace`, plain components only.
fn mount_path(path: &str) -> Result<String, RuntimeError> {
    let bad = |reason: &'static str| RuntimeError::BadVolumePath {
        path: path.chars().take(200).collect(),
        reason,
    };
    let rel = match path.strip_prefix("/workspace") {
        Some(rest) if rest.starts_with('/') => rest.trim_start_matches('/'),
        Some(_) => return Err(bad("it must be a directory under /workspace")),
        None if path.starts_with('/') => return Err(bad("it must be under /workspace")),
        None => path,
    };
    let rel = rel.trim_end_matches('/');
    if rel.is_empty() {
        return Err(bad(
            "it must be a directory under /workspace, not /workspace",
        ));
    }
    if rel.len() > 1024 {
        return Err(bad("it is longer than 1024 bytes"));
    }
    for part in rel.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return Err(bad("it may not hold empty, '.' or '..' components"));
        }
        if part.len() > 255 || part.contains('\0') {
            return Err(bad("a component is too long or holds NUL"));
        }
    }
    Ok(rel.to_string())
}

impl Runtime {
    pub async fn create_volume(&self, req: CreateVolume) -> Result<Volume, RuntimeError> {
        check_name(&req.name)?;
        let max = self.inner.config.max_limits.disk_mb;
        let size_mb = match req.size_mb {
            None => DEFAULT_SIZE_MB.min(max),
            Some(0) => return Err(RuntimeError::NotPositive { field: "size_mb" }),
            Some(v) if v > max => {
                return Err(RuntimeError::AboveMax {
                    field: "size_mb",
                    value: v,
                    max,
                })
            }
            Some(v) => v,
        };
        let tenant = req
            .tenant
            .clone()
            .unwrap_or_else(|| sandlot_types::DEFAULT_TENANT.to_owned());
        let _guard = self.inner.storage.volume_ops.lock().await;
        if self.volume_record(&tenant, &req.name).is_ok() {
            return Err(RuntimeError::VolumeExists { name: req.name });
        }
        let uid = lock(&self.inner.registry.slots)
            .alloc(crate::uids::Kind::Volume)
            .ok_or(RuntimeError::NoFreeUid)?;
        let workspace = new_workspace_id(&tenant, &req.name);
        let (rt, id, owner) = (self.clone(), workspace.clone(), tenant.clone());
        let made = blocking("creating a volume", move || {
            rt.workspaces()?
                .create_for(&id, uid, uid, size_mb << 20, Some(&owner))
                .map(|_| ())
                .map_err(|e| crate::workspace::workspace_error("create", e))
        })
        .await
        .and_then(|r| r);
        if let Err(err) = made {
            self.release_uid(uid);
            return Err(err);
        }
        let rec = VolumeRecord {
            name: req.name.clone(),
            size_mb,
            created_at: now_rfc3339(),
            host_uid: uid,
            tenant,
            workspace,
        };
        if let Err(err) = self.inner.storage.store.insert_volume(&rec) {
            let (rt, id) = (self.clone(), rec.workspace.clone());
            let _ = blocking("removing a volume", move || rt.remove_workspace(&id)).await;
            self.release_uid(uid);
            return Err(store("recording a volume")(err));
        }
        Ok(self.volume_view(rec))
    }

    /// Every tenant's volumes.
    pub async fn list_volumes(&self) -> Result<Vec<Volume>, RuntimeError> {
        Ok(self
            .inner
            .storage
            .store
            .list_volumes()
            .map_err(store("listing volumes"))?
            .into_iter()
            .map(|r| self.volume_view(r))
            .collect())
    }

    pub async fn get_volume(&self, tenant: &str, name: &str) -> Result<Volume, RuntimeError> {
        Ok(self.volume_view(self.volume_record(tenant, name)?))
    }

    /// Deletes `tenant`'s volume `name` and its files; refused while any sandbox (running,
    /// paused, stopped) mounts it.
    pub async fn delete_volume(&self, tenant: &str, name: &str) -> Result<(), RuntimeError> {
        let _guard = self.inner.storage.volume_ops.lock().await;
        let rec = self.volume_record(tenant, name)?;
        let users = self.volume_users(tenant, name);
        if let Some(u) = users.first() {
            return Err(RuntimeError::VolumeInUse {
                name: name.to_string(),
                by: u.sandbox_id.clone(),
                how: if u.read_only {
                    "read-only"
                } else {
                    "read-write"
                },
            });
        }
        self.inner
            .storage
            .store
            .delete_volume(tenant, name)
            .map_err(store("deleting a volume"))?;
        let (rt, id) = (self.clone(), rec.workspace.clone());
        let removed = blocking("removing a volume", move || rt.remove_workspace(&id)).await?;
        if removed {
            self.release_uid(rec.host_uid);
        }
        Ok(())
    }

    /// Writes a file into a volume (its files API).
    pub async fn write_volume_file(
        &self,
        tenant: &str,
        name: &str,
        path: &str,
        body: ByteStream,
    ) -> Result<FileEntry, RuntimeError> {
        let root = self.volume_root(tenant, name)?;
        self.write_file_in(root, path, body).await
    }

    pub async fn read_volume_file(
        &self,
        tenant: &str,
        name: &str,
        path: &str,
    ) -> Result<(u64, tokio::fs::File), RuntimeError> {
        read_file_in(self.volume_root(tenant, name)?, path).await
    }

    pub async fn list_volume_files(
        &self,
        tenant: &str,
        name: &str,
        path: &str,
        recursive: bool,
    ) -> Result<Vec<FileEntry>, RuntimeError> {
        list_files_in(self.volume_root(tenant, name)?, path, recursive).await
    }

    pub async fn delete_volume_file(
        &self,
        tenant: &str,
        name: &str,
        path: &str,
    ) -> Result<(), RuntimeError> {
        delete_file_in(self.volume_root(tenant, name)?, path).await
    }

    /// `tenant`'s volume `name`: a name that is not a volume name is refused as such (400),
    /// another tenant's volume is as missing as one that never was.
    fn volume_record(&self, tenant: &str, name: &str) -> Result<VolumeRecord, RuntimeError> {
        check_name(name)?;
        self.inner
            .storage
            .store
            .get_volume(tenant, name)
            .map_err(store("reading a volume"))?
            .ok_or_else(|| RuntimeError::VolumeNotFound {
                name: name.chars().take(64).collect(),
            })
    }

    fn volume_view(&self, r: VolumeRecord) -> Volume {
        Volume {
            mounted_by: self.volume_users(&r.tenant, &r.name),
            name: r.name,
            size_mb: r.size_mb,
            created_at: r.created_at,
            tenant: r.tenant,
        }
    }

    /// The sandboxes (not ended) that mount `tenant`'s volume `name` (a sandbox mounts its
    /// own tenant's volumes only).
    fn volume_users(&self, tenant: &str, name: &str) -> Vec<VolumeUse> {
        let mut users: Vec<VolumeUse> = self
            .all_entries()
            .iter()
            .flat_map(|e| {
                let info = lock(&e.info);
                info.volumes
                    .iter()
                    .filter(|m| info.tenant == tenant && m.name == name)
                    .map(|m| VolumeUse {
                        sandbox_id: info.id.clone(),
                        path: m.path.clone(),
                        read_only: m.read_only,
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        users.sort_by(|a, b| a.sandbox_id.cmp(&b.sandbox_id));
        users
    }

    /// The host's way into a volume: its files belong to its read-write holder while there is
    /// one, else to the volume's own uid.
    fn volume_root(&self, tenant: &str, name: &str) -> Result<WorkspaceRoot, RuntimeError> {
        let rec = self.volume_record(tenant, name)?;
        let holder = lock(&self.inner.storage.volume_claims)
            .get(&claim_key(tenant, name))
            .cloned();
        let uid = holder
            .and_then(|id| {
                lock(&self.inner.registry.sandboxes)
                    .get(&id)
                    .map(|e| e.host_uid)
            })
            .unwrap_or(rec.host_uid);
        Ok(self.disk_root(&rec.workspace, uid, rec.size_mb))
    }

    /// Checks a creation's volume mounts: each is a volume of `tenant`, paths are plain
    /// directories under `/workspace`, none inside another, at most 8. Returns them with
    /// normalized paths.
    pub(crate) fn check_volume_mounts(
        &self,
        tenant: &str,
        mounts: &[VolumeMount],
    ) -> Result<Vec<VolumeMount>, RuntimeError> {
        if mounts.len() > sandlot_jail::config::MAX_VOLUMES {
            return Err(RuntimeError::TooManyVolumes {
                max: sandlot_jail::config::MAX_VOLUMES,
            });
        }
        let mut out: Vec<VolumeMount> = Vec::with_capacity(mounts.len());
        for m in mounts {
            self.volume_record(tenant, &m.name)?;
            let path = mount_path(&m.path)?;
            for other in &out {
                let nested = |a: &str, b: &str| a == b || a.starts_with(&format!("{b}/"));
                if nested(&path, &other.path) || nested(&other.path, &path) {
                    return Err(RuntimeError::BadVolumePath {
                        path: m.path.clone(),
                        reason: "two volumes may not share a path or nest",
                    });
                }
                if other.name == m.name {
                    return Err(RuntimeError::BadVolumePath {
                        path: m.path.clone(),
                        reason: "a volume is mounted once per sandbox",
                    });
                }
            }
            out.push(VolumeMount {
                name: m.name.clone(),
                path,
                read_only: m.read_only,
            });
        }
        Ok(out)
    }

    /// Claims `tenant`'s read-write volumes of `mounts` for sandbox `id` (refused when another
    /// sandbox holds one) and gives their files to `uid`. All or nothing.
    pub(crate) async fn claim_volumes(
        &self,
        id: &str,
        tenant: &str,
        uid: u32,
        mounts: &[VolumeMount],
    ) -> Result<(), RuntimeError> {
        let rw: Vec<VolumeRecord> = mounts
            .iter()
            .filter(|m| !m.read_only)
            .map(|m| self.volume_record(tenant, &m.name))
            .collect::<Result<_, _>>()?;
        if rw.is_empty() {
            return Ok(());
        }
        {
            let mut claims = lock(&self.inner.storage.volume_claims);
            if let Some((name, by)) = rw.iter().find_map(|v| {
                claims
                    .get(&claim_key(tenant, &v.name))
                    .map(|by| (v.name.clone(), by.clone()))
            }) {
                return Err(RuntimeError::VolumeInUse {
                    name,
                    by,
                    how: "read-write",
                });
            }
            for v in &rw {
                claims.insert(claim_key(tenant, &v.name), id.to_string());
            }
        }
        let (rt, vols) = (self.clone(), rw.clone());
        let reowned = blocking("giving a volume to its sandbox", move || {
            let ws = rt.workspaces()?;
            for v in &vols {
                ws.reown(&v.workspace, uid, uid)
                    .map_err(|e| crate::workspace::workspace_error("reown", e))?;
            }
            Ok::<_, RuntimeError>(())
        })
        .await
        .and_then(|r| r);
        if let Err(err) = reowned {
            self.release_volumes(id);
            return Err(err);
        }
        Ok(())
    }

    /// Gives back the volumes sandbox `id` holds read-write: their files go back to each
    /// volume's own uid. Blocking; call before the sandbox's uid is freed.
    pub(crate) fn release_volumes(&self, id: &str) {
        let names: Vec<(String, String)> = {
            let mut claims = lock(&self.inner.storage.volume_claims);
            let names: Vec<(String, String)> = claims
                .iter()
                .filter(|(_, by)| by.as_str() == id)
                .map(|(n, _)| n.clone())
                .collect();
            for n in &names {
                claims.remove(n);
            }
            names
        };
        for v in names
            .iter()
            .filter_map(|(t, n)| self.volume_record(t, n).ok())
        {
            self.reown_volume(&v);
        }
    }

    /// Gives a volume's files back to its own uid. Blocking.
    fn reown_volume(&self, v: &VolumeRecord) {
        if let Ok(ws) = self.workspaces() {
            if let Err(e) = ws.reown(&v.workspace, v.host_uid, v.host_uid) {
                tracing::warn!(volume = %v.name, error = %e, "giving a volume's files back failed");
            }
        }
    }

    /// After a restart: every volume's uid reserved; the read-write claims of the sandboxes
    /// that came back restored; volumes nobody holds read-write re-owned to their own uid.
    /// Returns the volumes' workspace ids (their files are not orphans).
    pub(crate) fn recover_volumes(&self) -> Vec<String> {
        let Ok(volumes) = self.inner.storage.store.list_volumes() else {
            return Vec::new();
        };
        for v in &volumes {
            lock(&self.inner.registry.slots).reserve(v.host_uid, crate::uids::Kind::Volume);
        }
        for e in self.all_entries() {
            let info = lock(&e.info);
            if info.state.is_ended() {
                continue;
            }
            for m in info.volumes.iter().filter(|m| !m.read_only) {
                lock(&self.inner.storage.volume_claims)
                    .insert(claim_key(&info.tenant, &m.name), info.id.clone());
            }
        }
        for v in &volumes {
            if !lock(&self.inner.storage.volume_claims).contains_key(&claim_key(&v.tenant, &v.name))
            {
                self.reown_volume(v);
            }
        }
        volumes.iter().map(|v| v.workspace.clone()).collect()
    }

    /// Detached mounts of `tenant`'s volumes, in order, for a child to attach (read-only ones
    /// made read-only here already).
    pub(crate) fn volume_trees(
        &self,
        tenant: &str,
        mounts: &[VolumeMount],
    ) -> Result<Vec<OwnedFd>, RuntimeError> {
        let ws = self.workspaces()?;
        mounts
            .iter()
            .map(|m| {
                let rec = self.volume_record(tenant, &m.name)?;
                let tree = ws
                    .open_tree(&rec.workspace)
                    .map_err(|e| crate::workspace::workspace_error("open_tree", e))?;
                if m.read_only {
                    sandlot_jail::mounts::restrict_mount(&tree, true).map_err(|e| {
                        RuntimeError::VolumeMount {
                            source: std::io::Error::from(e),
                        }
                    })?;
                }
                Ok(tree)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_ids_are_per_tenant_and_valid() {
        let a = new_workspace_id("alpha", "data");
        let b = new_workspace_id("beta", "data");
        assert_ne!(a, b);
        assert_ne!(new_workspace_id("a-b", "c"), new_workspace_id("a", "b-c"));
        assert!(a.starts_with("vol-") && a.len() == 44, "{a}");
        // Never the `vol_<name>` of a volume made before names were per tenant.
        assert!(!a.starts_with("vol_"));
        for bad in ["", "..", "a/b", "Data", "a\0b", &"x".repeat(49)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
