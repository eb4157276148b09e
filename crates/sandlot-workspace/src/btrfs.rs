//! The Btrfs backend: one image file `<dir>/workspaces.btrfs` on a loop device, mounted at
//! `<dir>/mnt`; each workspace is a subvolume `<dir>/mnt/ws/<id>` whose qgroup carries the byte
//! limit. The image is fully allocated on the host and grows in steps while the host has room
//! (see the crate doc for why); a background thread keeps some headroom.
//!
//! Layout inside the filesystem:
//!
//! ```text
//! <dir>/mnt            the filesystem's top-level subvolume (id 5), mode 0700
//! <dir>/mnt/ws         mode 0700: only root on the host walks into workspaces
//! <dir>/mnt/ws/<id>    a subvolume per workspace, owned by the sandbox uid, mode 0755
//! <dir>/mnt/ws/.new-*  a workspace being made (renamed into place when complete)
//! ```

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use nix::fcntl::{FallocateFlags, RenameFlags};
use nix::sys::stat::Mode;
use nix::unistd::{Gid, Uid};

use crate::btrfs_ioctl as ioc;
use crate::error::{IoStep, Result, SysStep, WorkspaceError};
use crate::space::{self, SpaceReport};
use crate::tenants::{self, TenantGroups};
use crate::{id, loopdev, mounts};
use crate::{ImageReport, QuotaMode, Workspace, WorkspaceConfig};

mod grow;
mod image;

pub(crate) use image::IMAGE_NAME;
use image::{
    enable_quota, ensure_mounted, is_backed, make_image, round_down_mib, round_up_mib, MIB,
    MIN_IMAGE,
};

const TIB: u64 = 1 << 40;
/// Do not bother growing by less than this.
const MIN_GROW: u64 = 64 * MIB;

pub(crate) struct Btrfs {
    dir: PathBuf,
    image: PathBuf,
    mnt: PathBuf,
    ws: PathBuf,
    /// The filesystem's top-level directory, for filesystem-wide ioctls.
    fs: File,
    /// `<mnt>/ws`, the parent of every workspace.
    ws_dir: File,
    /// Names the filesystem under /sys/fs/btrfs.
    uuid: String,
    loop_device: PathBuf,
    direct_io: bool,
    quota: QuotaMode,
    /// True when every byte of the image is allocated on the host.
    backed: bool,
    max_bytes: u64,
    cfg: WorkspaceConfig,
    grow_lock: Mutex<()>,
    last_grow_problem: Mutex<Option<String>>,
    /// The tenant groups and the file cap's state (boxed: kept out of `Backend`'s size).
    caps: Box<Caps>,
}

struct Caps {
    /// Each tenant's level-1 qgroup number (`tenants.rs`).
    tenants: Mutex<TenantGroups>,
    /// `<dir>/clamped`: a file per workspace whose limit the file cap clamped, holding the
    /// limit to give back (`none` for no limit).
    clamped: PathBuf,
    /// A workspace was removed since the cleaner was last poked ([`Btrfs::poke_cleaner`]).
    removed: AtomicBool,
    /// The last file-cap error of each workspace, so one that keeps failing is logged once,
    /// not four times a second.
    file_cap_errors: Mutex<HashMap<String, String>>,
    /// The tenant qgroups made (or found) in this run.
    groups_made: Mutex<HashSet<u64>>,
}

fn open_dir(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Creates `path` (and parents) if missing and makes it root-only. The mode is only written
/// when it differs, so a filesystem that went read-only can still be opened (and inspected).
fn private_dir(path: &Path) -> Result<()> {
    std::fs::create_dir_all(path).at("mkdir", path)?;
    let mode = std::fs::metadata(path)
        .at("stat", path)?
        .permissions()
        .mode();
    if mode & 0o7777 != 0o700 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).at("chmod", path)?;
    }
    Ok(())
}

impl Btrfs {
    /// Opens the workspace filesystem in `cfg.dir`, making it the first time and reusing
    /// whatever a crash left (mount, loop device) otherwise.
    pub(crate) fn open(cfg: WorkspaceConfig) -> Result<Btrfs> {
        private_dir(&cfg.dir)?;
        let dir = cfg.dir.canonicalize().at("canonicalize", &cfg.dir)?;
        let image = dir.join(IMAGE_NAME);
        let mnt = dir.join("mnt");
        std::fs::create_dir_all(&mnt).at("mkdir", &mnt)?;

        let (host_total, host_free) = space::statvfs(&dir)?;
        let max_bytes = match cfg.image.max_bytes {
            Some(max) => round_down_mib(max).max(MIN_IMAGE),
            None => {
                let current = std::fs::metadata(&image).map(|m| m.len()).unwrap_or(0);
                // The default cap: what the image has now plus 80% of what the host has free,
                // never more than 1 TiB.
                round_down_mib((current + host_free / 10 * 8).min(TIB)).max(MIN_IMAGE)
            }
        };
        let fresh = !image.exists();
        if fresh {
            // The image is gone but something is still mounted here: never make a new image
            // over a live mount.
            if let Some(m) = mounts::mount_at(&mnt)? {
                return Err(WorkspaceError::MountConflict {
                    path: mnt,
                    found: format!("{} from {} (and no image)", m.fstype, m.source),
                });
            }
            let reserve = cfg.host_reserve.for_total(host_total);
            make_image(
                &dir,
                &image,
                &cfg,
                max_bytes,
                host_free.saturating_sub(reserve),
            )?;
        }
        let (loop_device, direct_io) = ensure_mounted(&image, &mnt, !cfg.image.sparse, fresh)?;
        // 0700 on the top of the filesystem: host users other than root never see workspaces.
        private_dir(&mnt)?;
        let fs = open_dir(&mnt).at("open", &mnt)?;
        let uuid = ioc::fs_uuid(&fs, &mnt)?;
        let quota = enable_quota(&fs, &mnt, &uuid, cfg.quota)?;
        let ws = mnt.join("ws");
        private_dir(&ws)?;
        let ws_dir = open_dir(&ws).at("open", &ws)?;
        let backed = is_backed(&image, !cfg.image.sparse)?;
        let tenants = Mutex::new(TenantGroups::load(&dir)?);
        let clamped = dir.join("clamped");
        private_dir(&clamped)?;
        let this = Btrfs {
            dir,
            image,
            mnt,
            ws,
            fs,
            ws_dir,
            uuid,
            loop_device,
            direct_io,
            quota,
            backed,
            max_bytes,
            cfg,
            grow_lock: Mutex::new(()),
            last_grow_problem: Mutex::new(None),
            caps: Box::new(Caps {
                tenants,
                clamped,
                removed: AtomicBool::new(false),
                file_cap_errors: Mutex::new(HashMap::new()),
                groups_made: Mutex::new(HashSet::new()),
            }),
        };
        this.reclaim_temporaries();
        this.sweep_qgroups();
        if let Err(e) = this.grow_if_needed() {
            // Not fatal: the workspaces are usable, health() reports it.
            tracing::warn!("growing the workspace image: {e}");
        }
        Ok(this)
    }

    pub(crate) fn mount_point(&self) -> &Path {
        &self.mnt
    }

    pub(crate) fn path(&self, id: &str) -> PathBuf {
        self.ws.join(id)
    }

    pub(crate) fn quota_mode(&self) -> QuotaMode {
        self.quota
    }

    /// Creates the workspace: subvolume (in `tenant`'s qgroup, if given), owner, mode, byte
    /// limit, then renames it into place.
    pub(crate) fn create(
        &self,
        id: &str,
        uid: u32,
        gid: u32,
        limit: u64,
        tenant: Option<&str>,
    ) -> Result<Workspace> {
        self.check_space()?;
        if self.exists(id) {
            return Err(WorkspaceError::Exists { id: id.into() });
        }
        let group = tenant.map(|t| self.tenant_group(t)).transpose()?;
        let tmp = id::temp_name(id);
        ioc::subvol_create(&self.ws_dir, &self.ws, &tmp, group).map_err(|e| match e.errno() {
            libc::EEXIST => WorkspaceError::Exists { id: id.into() },
            _ => e,
        })?;
        let made = (|| {
            let path = self.ws.join(&tmp);
            let fd = open_dir(&path).at("open", &path)?;
            let subvolid = ioc::subvol_id(&fd, &path)?;
            nix::unistd::fchown(
                fd.as_fd(),
                Some(Uid::from_raw(uid)),
                Some(Gid::from_raw(gid)),
            )
            .sys("fchown", &path)?;
            nix::sys::stat::fchmod(fd.as_fd(), Mode::from_bits_truncate(0o755))
                .sys("fchmod", &path)?;
            ioc::qgroup_limit(&self.fs, &path, subvolid, Some(limit))?;
            self.rename_into_place(&tmp, id)
        })();
        if let Err(e) = made {
            self.destroy_quietly(&tmp);
            return Err(e);
        }
        Ok(self.workspace(id, limit))
    }

    /// A writable copy-on-write snapshot of `src` named `dst`, with `src`'s owner and limit
    /// (the one it had before a file-cap clamp), in `tenant`'s qgroup if given.
    pub(crate) fn snapshot(&self, src: &str, dst: &str, tenant: Option<&str>) -> Result<Workspace> {
        self.check_space()?;
        if self.exists(dst) {
            return Err(WorkspaceError::Exists { id: dst.into() });
        }
        let (src_fd, src_id) = self.open_workspace(src)?;
        let limit = self
            .clamped_from(src)
            .unwrap_or_else(|| self.limit_of(src_id));
        let group = tenant.map(|t| self.tenant_group(t)).transpose()?;
        let tmp = id::temp_name(dst);
        ioc::snapshot(&src_fd, &self.ws_dir, &self.ws, &tmp, group).map_err(|e| {
            match e.errno() {
                libc::EEXIST => WorkspaceError::Exists { id: dst.into() },
                _ => e,
            }
        })?;
        let made = (|| {
            let path = self.ws.join(&tmp);
            let fd = open_dir(&path).at("open", &path)?;
            let subvolid = ioc::subvol_id(&fd, &path)?;
            ioc::qgroup_limit(&self.fs, &path, subvolid, limit)?;
            self.rename_into_place(&tmp, dst)
        })();
        if let Err(e) = made {
            self.destroy_quietly(&tmp);
            return Err(e);
        }
        Ok(self.workspace(dst, limit.unwrap_or(u64::MAX)))
    }

    /// Deletes the workspace and every subvolume a sandbox made inside it, then its qgroup.
    pub(crate) fn remove(&self, id: &str) -> Result<()> {
        let (fd, subvolid) = self.open_workspace(id)?;
        drop(fd);
        self.destroy_tree(id, subvolid)?;
        let _ = std::fs::remove_file(self.caps.clamped.join(id));
        self.caps.removed.store(true, Ordering::SeqCst);
        self.sweep_qgroups();
        Ok(())
    }

    /// After a remove, has the cleaner drop the deleted subvolumes now, so their bytes go back
    /// to their tenant's cap within a maintenance interval instead of the 30 s commit interval
    /// (called from the maintenance thread, off the delete's path: it commits the filesystem).
    pub(crate) fn poke_cleaner(&self) {
        if self.caps.removed.swap(false, Ordering::SeqCst) {
            if let Err(e) = ioc::sync(&self.fs, &self.mnt) {
                tracing::warn!("poking the Btrfs cleaner: {e}");
            }
        }
    }

    /// Sets the byte limit; while the file cap clamps the workspace, the new limit is what the
    /// clamp gives back.
    pub(crate) fn set_limit(&self, id: &str, bytes: u64) -> Result<()> {
        let (_, subvolid) = self.open_workspace(id)?;
        if self.clamped_from(id).is_some() {
            return self.record_clamp(id, Some(bytes));
        }
        ioc::qgroup_limit(&self.fs, &self.path(id), subvolid, Some(bytes))
    }

    /// Referenced bytes of the workspace's qgroup, as of the last transaction commit.
    pub(crate) fn usage(&self, id: &str) -> Result<u64> {
        let (_, subvolid) = self.open_workspace(id)?;
        let path = self.qgroup_sysfs(subvolid, "referenced");
        let text = std::fs::read_to_string(&path).at("read", &path)?;
        text.trim()
            .parse()
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidData))
            .at("parse", &path)
    }

    pub(crate) fn get(&self, id: &str) -> Result<Workspace> {
        let (_, subvolid) = self.open_workspace(id)?;
        let limit = self
            .clamped_from(id)
            .unwrap_or_else(|| self.limit_of(subvolid));
        Ok(self.workspace(id, limit.unwrap_or(u64::MAX)))
    }

    /// The level-1 qgroup of `tenant`, made (and its number recorded) the first time.
    pub(crate) fn tenant_group(&self, tenant: &str) -> Result<u64> {
        let n = self
            .caps
            .tenants
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .number(tenant)?;
        let group = tenants::level1(n);
        // Making a qgroup joins a transaction even when it exists: once per group and run.
        let mut made = self
            .caps
            .groups_made
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if !made.contains(&group) {
            ioc::qgroup_create(&self.fs, &self.mnt, group)?;
            made.insert(group);
        }
        Ok(group)
    }

    /// Sets (or with `None` lifts) the cap on the bytes of all of `tenant`'s workspaces.
    pub(crate) fn set_tenant_limit(&self, tenant: &str, bytes: Option<u64>) -> Result<()> {
        let group = self.tenant_group(tenant)?;
        ioc::qgroup_limit(&self.fs, &self.mnt, group, bytes)
    }

    /// Makes workspace `id` count toward `tenant`'s cap (already counting is fine).
    pub(crate) fn assign(&self, id: &str, tenant: &str) -> Result<()> {
        let (_, subvolid) = self.open_workspace(id)?;
        let group = self.tenant_group(tenant)?;
        ioc::qgroup_assign(&self.fs, &self.path(id), subvolid, group)
    }

    /// Bytes charged to `tenant`'s qgroup and its limit; `(0, None)` for a tenant that never
    /// had a workspace. The charge is what the kernel weighs a new write against: the bytes
    /// accounted at the last transaction commit plus those reserved since (dirty data and
    /// metadata not yet written), so a tenant whose writer just got `EDQUOT` reads as full at
    /// once rather than after the next commit.
    pub(crate) fn tenant_usage(&self, tenant: &str) -> Result<(u64, Option<u64>)> {
        let n = self
            .caps
            .tenants
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(tenant);
        let Some(n) = n else { return Ok((0, None)) };
        let dir = self.sysfs(&format!("qgroups/1_{n}"));
        let mut used = read_u64(&dir.join("referenced"))?;
        for rsv in ["rsv_data", "rsv_meta_pertrans", "rsv_meta_prealloc"] {
            used = used.saturating_add(read_u64(&dir.join(rsv)).unwrap_or(0));
        }
        Ok((used, limit_in(&dir)))
    }

    /// Every tenant with a qgroup, and its number.
    pub(crate) fn tenants(&self) -> Vec<(String, u64)> {
        let g = self.caps.tenants.lock().unwrap_or_else(|e| e.into_inner());
        g.all().map(|(t, n)| (t.to_owned(), n)).collect()
    }

    /// The limit a clamped workspace had before its clamp (`Some(None)`: it had none);
    /// `None` if it is not clamped.
    fn clamped_from(&self, id: &str) -> Option<Option<u64>> {
        let text = std::fs::read_to_string(self.caps.clamped.join(id)).ok()?;
        Some(text.trim().parse::<u64>().ok())
    }

    fn record_clamp(&self, id: &str, limit: Option<u64>) -> Result<()> {
        let path = self.caps.clamped.join(id);
        let text = limit.map_or_else(|| "none".to_owned(), |l| l.to_string());
        let tmp = self.caps.clamped.join(format!(".{id}"));
        std::fs::write(&tmp, text).at("write", &tmp)?;
        std::fs::rename(&tmp, &path).at("rename", &path)
    }

    /// One pass of the file cap over every workspace (see the crate doc, "Files"): clamps the
    /// byte limit of one holding more than `max_files` inodes to what it uses, and gives the
    /// limit back once it holds fewer. Returns how many are clamped after the pass.
    pub(crate) fn enforce_file_cap(&self, max_files: u64) -> Result<usize> {
        let mut clamped = 0;
        let mut errors = HashMap::new();
        for id in self.list()? {
            match self.enforce_file_cap_on(&id, max_files) {
                Ok(true) => clamped += 1,
                Ok(false) | Err(WorkspaceError::NotFound { .. }) => {}
                Err(e) => {
                    errors.insert(id, e.to_string());
                }
            }
        }
        let mut last = self
            .caps
            .file_cap_errors
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for (id, e) in &errors {
            if last.get(id) != Some(e) {
                tracing::warn!(workspace = %id, "file cap: {e}");
            }
        }
        *last = errors;
        Ok(clamped)
    }

    /// Whether `id` is clamped after this check.
    fn enforce_file_cap_on(&self, id: &str, max_files: u64) -> Result<bool> {
        let (_, subvolid) = self.open_workspace(id)?;
        let path = self.path(id);
        let was = self.clamped_from(id);
        // Inode numbers only grow: none at `max_files + 256` or above means at most
        // `max_files` inodes (the root directory is 256), with one ioctl.
        let over_mark = max_files.saturating_add(ioc::BTRFS_FIRST_FREE_OBJECTID);
        let maybe_over = ioc::has_inode_from(&self.fs, &path, subvolid, over_mark)?;
        let count = if maybe_over {
            ioc::count_inodes(&self.fs, &path, subvolid, max_files)?
        } else {
            0
        };
        match crate::file_cap::decide(was.is_some(), count, max_files) {
            crate::file_cap::Decision::Keep => Ok(was.is_some()),
            crate::file_cap::Decision::Clamp => {
                let used = read_u64(&self.qgroup_sysfs(subvolid, "referenced"))?;
                let (limit, first) = match was {
                    Some(_) => (self.limit_of(subvolid).unwrap_or(u64::MAX), false),
                    None => (u64::MAX, true),
                };
                if first {
                    self.record_clamp(id, self.limit_of(subvolid))?;
                    tracing::info!(workspace = %id, count, max_files, "file cap: clamping the workspace's bytes");
                }
                // Ratchets down only: bytes freed while clamped are not room for new files.
                ioc::qgroup_limit(&self.fs, &path, subvolid, Some(used.min(limit)))?;
                Ok(true)
            }
            crate::file_cap::Decision::Release => {
                let back = was.flatten();
                ioc::qgroup_limit(&self.fs, &path, subvolid, back)?;
                std::fs::remove_file(self.caps.clamped.join(id))
                    .at("unlink", self.caps.clamped.join(id))?;
                tracing::info!(workspace = %id, count, max_files, "file cap: lifting the clamp");
                Ok(false)
            }
        }
    }

    pub(crate) fn list(&self) -> Result<Vec<String>> {
        let mut ids = Vec::new();
        for entry in std::fs::read_dir(&self.ws).at("read_dir", &self.ws)? {
            let entry = entry.at("read_dir", &self.ws)?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if id::is_valid(&name) && entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                ids.push(name);
            }
        }
        ids.sort();
        Ok(ids)
    }

    pub(crate) fn exists(&self, id: &str) -> bool {
        self.ws.join(id).symlink_metadata().is_ok()
    }

    /// What `create` would be allowed to use now: free space in the filesystem plus what the
    /// image may still grow by without eating the host's reserve.
    pub(crate) fn free_bytes(&self) -> Result<u64> {
        let host = self.host_space()?;
        let fs = self.fs_space()?;
        let host_room = host.free_bytes.saturating_sub(host.reserve_bytes);
        if self.backed {
            let size = self.image_size()?;
            Ok(fs.free_bytes + self.max_bytes.saturating_sub(size).min(host_room))
        } else {
            Ok(fs.free_bytes.min(host_room))
        }
    }

    pub(crate) fn host_space(&self) -> Result<SpaceReport> {
        space::report(&self.dir, self.cfg.host_reserve)
    }

    pub(crate) fn fs_space(&self) -> Result<SpaceReport> {
        space::report(&self.mnt, self.cfg.fs_reserve)
    }

    /// Everything doctor shows, and the list of what is wrong.
    pub(crate) fn health(&self, problems: &mut Vec<String>) -> Result<(SpaceReport, ImageReport)> {
        let fs = self.fs_space()?;
        let meta = std::fs::metadata(&self.image).at("stat", &self.image)?;
        let image = ImageReport {
            path: self.image.clone(),
            size_bytes: meta.len(),
            allocated_bytes: meta.blocks() * 512,
            max_bytes: self.max_bytes,
            loop_device: self.loop_device.clone(),
            direct_io: self.direct_io,
            fully_backed: self.backed && meta.blocks() * 512 >= meta.len(),
        };
        match mounts::mount_at(&self.mnt)? {
            None => problems.push(format!("{} is no longer mounted", self.mnt.display())),
            Some(m) if m.read_only() => problems.push(format!(
                "{} is read-only (Btrfs stops writing after an I/O error; see dmesg)",
                self.mnt.display()
            )),
            Some(_) => {}
        }
        if fs.below_reserve() && image.size_bytes >= self.max_bytes {
            problems.push(format!(
                "workspace filesystem nearly full ({} bytes free) and at its maximum size",
                fs.free_bytes
            ));
        }
        if !image.fully_backed {
            let host = self.host_space()?;
            let unbacked = image.size_bytes.saturating_sub(image.allocated_bytes);
            if unbacked > host.free_bytes {
                problems.push(format!(
                    "sparse image may need {unbacked} more bytes than the host's {} free: a full \
                     host disk would turn into I/O errors and a read-only workspace filesystem",
                    host.free_bytes
                ));
            }
        }
        let inconsistent = std::fs::read_to_string(self.sysfs("qgroups/inconsistent"));
        if inconsistent.map(|s| s.trim() == "1").unwrap_or(false) {
            problems.push("qgroup accounting is inconsistent (a rescan is needed)".into());
        }
        if let Some(p) = self
            .last_grow_problem
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            problems.push(p);
        }
        Ok((fs, image))
    }

    /// Releases our descriptors and unmounts the filesystem; the loop device detaches itself.
    pub(crate) fn unmount(self) -> Result<()> {
        let mnt = self.mnt.clone();
        drop(self);
        match mounts::mount_at(&mnt)? {
            Some(_) => mounts::unmount(&mnt),
            None => Ok(()),
        }
    }

    fn workspace(&self, id: &str, limit_bytes: u64) -> Workspace {
        Workspace {
            id: id.to_string(),
            path: self.path(id),
            limit_bytes,
            inode_limit: None,
        }
    }

    fn image_size(&self) -> Result<u64> {
        Ok(std::fs::metadata(&self.image)
            .at("stat", &self.image)?
            .len())
    }

    /// Refuses a new workspace when the host or the workspace filesystem is below its reserve
    /// (after trying to grow the image).
    fn check_space(&self) -> Result<()> {
        let host = self.host_space()?;
        if host.below_reserve() {
            return Err(WorkspaceError::HostSpaceLow {
                path: host.path,
                free_bytes: host.free_bytes,
                reserve_bytes: host.reserve_bytes,
            });
        }
        let mut fs = self.fs_space()?;
        if fs.below_reserve() && self.grow_if_needed()? {
            fs = self.fs_space()?;
        }
        if fs.below_reserve() {
            return Err(WorkspaceError::FilesystemFull {
                path: fs.path,
                free_bytes: fs.free_bytes,
                reserve_bytes: fs.reserve_bytes,
            });
        }
        Ok(())
    }

    /// Opens an existing workspace's root and returns it with its subvolume id.
    fn open_workspace(&self, id: &str) -> Result<(File, u64)> {
        let path = self.path(id);
        let fd = match open_dir(&path) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                return Err(WorkspaceError::NotFound { id: id.into() })
            }
            Err(e) => return Err(e).at("open", &path),
        };
        let ino = fd.metadata().at("stat", &path)?.ino();
        if ino != ioc::BTRFS_FIRST_FREE_OBJECTID {
            // A plain directory, not a subvolume we made.
            return Err(WorkspaceError::NotFound { id: id.into() });
        }
        let subvolid = ioc::subvol_id(&fd, &path)?;
        Ok((fd, subvolid))
    }

    fn rename_into_place(&self, tmp: &str, id: &str) -> Result<()> {
        nix::fcntl::renameat2(
            self.ws_dir.as_fd(),
            tmp,
            self.ws_dir.as_fd(),
            id,
            RenameFlags::RENAME_NOREPLACE,
        )
        .map_err(|e| match e {
            nix::Error::EEXIST => WorkspaceError::Exists { id: id.into() },
            e => WorkspaceError::Sys {
                step: "renameat2",
                path: self.path(id),
                source: e,
            },
        })
    }

    /// The qgroup's referenced-bytes limit, `None` if it has none (sysfs then shows a
    /// `max_referenced` of 0, so the flag decides).
    fn limit_of(&self, subvolid: u64) -> Option<u64> {
        let read = |file| {
            std::fs::read_to_string(self.qgroup_sysfs(subvolid, file))
                .ok()?
                .trim()
                .parse::<u64>()
                .ok()
        };
        let flags = read("limit_flags")?;
        (flags & ioc::BTRFS_QGROUP_LIMIT_MAX_RFER != 0)
            .then(|| read("max_referenced"))
            .flatten()
    }

    fn sysfs(&self, rel: &str) -> PathBuf {
        Path::new("/sys/fs/btrfs").join(&self.uuid).join(rel)
    }

    pub(crate) fn qgroup_sysfs(&self, subvolid: u64, file: &str) -> PathBuf {
        self.sysfs(&format!("qgroups/0_{subvolid}/{file}"))
    }

    /// Deletes the subvolume `name` in `ws` and everything nested in it, deepest first.
    fn destroy_tree(&self, name: &str, subvolid: u64) -> Result<()> {
        let path = self.ws.join(name);
        self.destroy_children(subvolid)?;
        ioc::subvol_destroy(&self.ws_dir, &self.ws, name)?;
        // The kernel refuses (EBUSY) while the cleaner has not dropped the subvolume yet and
        // removes the qgroup itself once it has; `sweep_qgroups` catches any it leaves.
        let _ = ioc::qgroup_remove(&self.fs, &path, subvolid);
        Ok(())
    }

    fn destroy_children(&self, subvolid: u64) -> Result<()> {
        let children = ioc::child_subvols(&self.fs, &self.mnt, subvolid)?;
        if !children.is_empty() {
            // Deleting a subvolume needs metadata space charged to its parent: lift the parent's
            // limit so a workspace filled to its quota can still be emptied (else EDQUOT).
            let _ = ioc::qgroup_limit(&self.fs, &self.mnt, subvolid, None);
        }
        for child in children {
            let _ = ioc::qgroup_limit(&self.fs, &self.mnt, child, None);
            self.destroy_children(child)?;
            ioc::subvol_destroy_by_id(&self.fs, &self.mnt, child)?;
            let _ = ioc::qgroup_remove(&self.fs, &self.mnt, child);
        }
        Ok(())
    }

    fn destroy_quietly(&self, name: &str) {
        let path = self.ws.join(name);
        let result = open_dir(&path)
            .at("open", &path)
            .and_then(|fd| ioc::subvol_id(&fd, &path))
            .and_then(|subvolid| self.destroy_tree(name, subvolid));
        if let Err(e) = result {
            tracing::warn!(
                "could not remove the half-made workspace {}: {e}",
                path.display()
            );
        }
    }

    /// Removes workspaces a crash left half-made (`.new-*`).
    fn reclaim_temporaries(&self) {
        let Ok(entries) = std::fs::read_dir(&self.ws) else {
            return;
        };
        for entry in entries.flatten() {
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if name.starts_with(".new-") {
                tracing::info!("removing the half-made workspace {name} left by a crash");
                self.destroy_quietly(&name);
            }
        }
    }

    /// Deletes level-0 qgroups whose subvolume is gone, so none accumulate. The kernel drops
    /// most itself once the cleaner has freed the subvolume, but not one whose extents were
    /// still shared (with a snapshot) at that moment; and it refuses while the cleaner has not
    /// run, so this is retried at open, after each remove and from the maintenance thread.
    pub(crate) fn sweep_qgroups(&self) {
        let linked: HashSet<u64> = match ioc::linked_subvols(&self.fs, &self.mnt) {
            Ok(ids) => ids.into_iter().collect(),
            Err(e) => {
                tracing::warn!("listing subvolumes for the qgroup sweep: {e}");
                return;
            }
        };
        let Ok(entries) = std::fs::read_dir(self.sysfs("qgroups")) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_prefix("0_")) else {
                continue;
            };
            let Ok(id) = id.parse::<u64>() else { continue };
            if id < ioc::BTRFS_FIRST_FREE_OBJECTID || linked.contains(&id) {
                continue;
            }
            // Still charged: the cleaner has not dropped it yet; the kernel would say EBUSY.
            let used = std::fs::read_to_string(entry.path().join("referenced"));
            if used.map(|u| u.trim() == "0").unwrap_or(false) {
                let _ = ioc::qgroup_remove(&self.fs, &self.mnt, id);
            }
        }
    }
}

fn read_u64(path: &Path) -> Result<u64> {
    let text = std::fs::read_to_string(path).at("read", path)?;
    text.trim()
        .parse()
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidData))
        .at("parse", path)
}

/// The referenced-bytes limit in a qgroup's sysfs directory, `None` when it has none.
fn limit_in(dir: &Path) -> Option<u64> {
    let read = |file: &str| {
        std::fs::read_to_string(dir.join(file))
            .ok()?
            .trim()
            .parse::<u64>()
            .ok()
    };
    let flags = read("limit_flags")?;
    (flags & ioc::BTRFS_QGROUP_LIMIT_MAX_RFER != 0)
        .then(|| read("max_referenced"))
        .flatten()
}
