//! The fallback backend for kernels without Btrfs: each workspace is its own sparse ext4 image
//! `<dir>/images/<id>.img` of exactly the byte limit, on its own loop device, mounted at
//! `<dir>/mnt/ws/<id>`. The image size is the quota (writes past it get ENOSPC) and the inode
//! count mkfs gives it is the inode cap. No copy-on-write snapshots: `snapshot` is refused.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::fcntl::RenameFlags;
use nix::sys::stat::Mode;
use nix::unistd::{Gid, Uid};

use crate::error::{IoStep, Result, SysStep, WorkspaceError};
use crate::loopdev::{self, LoopState};
use crate::space::{self, SpaceReport};
use crate::{id, mounts, tools, BackendKind, Workspace, WorkspaceConfig};

pub(crate) const IMAGES_DIR: &str = "images";
const BLOCK: u64 = 4096;

nix::ioctl_write_ptr!(ext4_ioc_resize_fs, b'f', 16, u64);

pub(crate) struct LoopImages {
    dir: PathBuf,
    images: PathBuf,
    ws: PathBuf,
    cfg: WorkspaceConfig,
    /// Images found at open that could not be mounted (doctor lists them).
    problems: Mutex<Vec<String>>,
}

fn private_dir(path: &Path) -> Result<()> {
    std::fs::create_dir_all(path).at("mkdir", path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).at("chmod", path)
}

fn remove_if_exists(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e).at("remove", path),
        _ => Ok(()),
    }
}

impl LoopImages {
    /// Opens `<dir>` and mounts every image a previous run (or a crash) left unmounted.
    pub(crate) fn open(cfg: WorkspaceConfig) -> Result<LoopImages> {
        private_dir(&cfg.dir)?;
        let dir = cfg.dir.canonicalize().at("canonicalize", &cfg.dir)?;
        let images = dir.join(IMAGES_DIR);
        let mnt = dir.join("mnt");
        let ws = mnt.join("ws");
        for d in [&images, &mnt, &ws] {
            private_dir(d)?;
        }
        let this = LoopImages {
            dir,
            images,
            ws,
            cfg,
            problems: Mutex::new(Vec::new()),
        };
        this.reclaim_temporaries()?;
        let bound = loopdev::bound_devices()?;
        for id in this.list()? {
            if let Err(e) = this.ensure_mounted(&id, &bound) {
                tracing::warn!("workspace {id}: {e}");
                this.problems
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(format!("workspace {id} is not mounted: {e}"));
            }
        }
        Ok(this)
    }

    pub(crate) fn path(&self, id: &str) -> PathBuf {
        self.ws.join(id)
    }

    fn image(&self, id: &str) -> PathBuf {
        self.images.join(format!("{id}.img"))
    }

    pub(crate) fn exists(&self, id: &str) -> bool {
        self.image(id).exists()
    }

    pub(crate) fn create(&self, id: &str, uid: u32, gid: u32, limit: u64) -> Result<Workspace> {
        let host = self.host_space()?;
        if host.below_reserve() {
            return Err(WorkspaceError::HostSpaceLow {
                path: host.path,
                free_bytes: host.free_bytes,
                reserve_bytes: host.reserve_bytes,
            });
        }
        if self.exists(id) {
            return Err(WorkspaceError::Exists { id: id.into() });
        }
        let size = limit.div_ceil(BLOCK) * BLOCK;
        let tmp = self.images.join(format!("{}.img", id::temp_name(id)));
        let made = self.format(&tmp, size, uid, gid);
        if let Err(e) = made {
            let _ = remove_if_exists(&tmp);
            return Err(e);
        }
        let image = self.image(id);
        let renamed = nix::fcntl::renameat2(
            nix::fcntl::AT_FDCWD,
            &tmp,
            nix::fcntl::AT_FDCWD,
            &image,
            RenameFlags::RENAME_NOREPLACE,
        );
        if let Err(e) = renamed {
            let _ = remove_if_exists(&tmp);
            return Err(match e {
                nix::Error::EEXIST => WorkspaceError::Exists { id: id.into() },
                e => WorkspaceError::Sys {
                    step: "renameat2",
                    path: image,
                    source: e,
                },
            });
        }
        match self.mount_new(id, &image, uid, gid) {
            Ok(ws) => Ok(ws),
            Err(e) => {
                let _ = self.remove(id);
                Err(e)
            }
        }
    }

    fn format(&self, tmp: &Path, size: u64, uid: u32, gid: u32) -> Result<()> {
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(tmp)
            .at("create", tmp)?;
        file.set_len(size).at("truncate", tmp)?;
        drop(file);
        // Lazy inode-table and journal init plus no discard keep mkfs to a few writes; the
        // unwritten parts of a sparse file read back as zeros, which is what lazy init assumes.
        let ext =
            format!("lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner={uid}:{gid}");
        tools::MKFS_EXT4.run(&["-q", "-F", "-b", "4096", "-m", "0", "-E", &ext], tmp)
    }

    fn mount_new(&self, id: &str, image: &Path, uid: u32, gid: u32) -> Result<Workspace> {
        let mp = self.path(id);
        std::fs::create_dir_all(&mp).at("mkdir", &mp)?;
        let attached = loopdev::attach(image)?;
        mount_ext4(&attached.path, &mp)?;
        drop(attached);
        let root = File::open(&mp).at("open", &mp)?;
        nix::unistd::fchown(
            root.as_fd(),
            Some(Uid::from_raw(uid)),
            Some(Gid::from_raw(gid)),
        )
        .sys("fchown", &mp)?;
        nix::sys::stat::fchmod(root.as_fd(), Mode::from_bits_truncate(0o755)).sys("fchmod", &mp)?;
        // A sandbox has no use for lost+found (e2fsck recreates it if it ever needs it).
        let lost = mp.join("lost+found");
        std::fs::remove_dir(&lost).at("rmdir", &lost)?;
        self.get(id)
    }

    pub(crate) fn remove(&self, id: &str) -> Result<()> {
        let image = self.image(id);
        let mp = self.path(id);
        if !image.exists() && !mp.exists() {
            return Err(WorkspaceError::NotFound { id: id.into() });
        }
        if mounts::mount_at(&mp)?.is_some() {
            mounts::unmount(&mp)?;
        }
        match std::fs::remove_dir(&mp) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e).at("rmdir", &mp),
            _ => {}
        }
        // The loop device detaches itself (autoclear) when the filesystem's last user goes; the
        // image's blocks are freed then too.
        remove_if_exists(&image)
    }

    /// Grows the image and the filesystem online; shrinking an ext4 filesystem in use is not
    /// possible, so a smaller limit is refused.
    pub(crate) fn set_limit(&self, id: &str, bytes: u64) -> Result<()> {
        let image = self.image(id);
        let size = std::fs::metadata(&image)
            .map_err(|_| WorkspaceError::NotFound { id: id.into() })?
            .len();
        let new = bytes.div_ceil(BLOCK) * BLOCK;
        if new == size {
            return Ok(());
        }
        if new < size {
            return Err(WorkspaceError::Unsupported {
                op: "lowering the limit",
                backend: BackendKind::LoopImage,
            });
        }
        let mp = self.path(id);
        let mount = mounts::mount_at(&mp)?.ok_or(WorkspaceError::NotFound { id: id.into() })?;
        let device = PathBuf::from(&mount.source);
        let resize_image = |to: u64| -> Result<()> {
            OpenOptions::new()
                .write(true)
                .open(&image)
                .and_then(|f| f.set_len(to))
                .at("truncate", &image)?;
            loopdev::set_capacity(&device)
        };
        resize_image(new)?;
        let root = File::open(&mp).at("open", &mp)?;
        let blocks = new / BLOCK;
        // SAFETY: EXT4_IOC_RESIZE_FS reads one u64 (the new block count) from the pointer.
        if let Err(e) = unsafe { ext4_ioc_resize_fs(root.as_raw_fd(), &blocks) } {
            // The filesystem never used the new blocks: give them back. (EPERM: the server
            // lacks CAP_SYS_RESOURCE, which online ext4 growth needs.)
            let _ = resize_image(size);
            return Err(e).sys("EXT4_IOC_RESIZE_FS", &mp);
        }
        Ok(())
    }

    /// Bytes in use in the workspace's filesystem (ext4's own metadata included).
    pub(crate) fn usage(&self, id: &str) -> Result<u64> {
        let mp = self.mounted(id)?;
        let st = nix::sys::statvfs::statvfs(&mp).sys("statvfs", &mp)?;
        Ok((st.blocks() - st.blocks_free()) * st.fragment_size())
    }

    pub(crate) fn get(&self, id: &str) -> Result<Workspace> {
        let mp = self.mounted(id)?;
        let image = self.image(id);
        let limit_bytes = std::fs::metadata(&image).at("stat", &image)?.len();
        let st = nix::sys::statvfs::statvfs(&mp).sys("statvfs", &mp)?;
        Ok(Workspace {
            id: id.to_string(),
            path: mp,
            limit_bytes,
            inode_limit: Some(st.files()),
        })
    }

    /// The mount point of a workspace that exists and is mounted.
    pub(crate) fn mounted(&self, id: &str) -> Result<PathBuf> {
        let mp = self.path(id);
        if !self.exists(id) || mounts::mount_at(&mp)?.is_none() {
            return Err(WorkspaceError::NotFound { id: id.into() });
        }
        Ok(mp)
    }

    pub(crate) fn list(&self) -> Result<Vec<String>> {
        let mut ids = Vec::new();
        for entry in std::fs::read_dir(&self.images).at("read_dir", &self.images)? {
            let entry = entry.at("read_dir", &self.images)?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if let Some(id) = name.strip_suffix(".img").filter(|s| id::is_valid(s)) {
                ids.push(id.to_string());
            }
        }
        ids.sort();
        Ok(ids)
    }

    pub(crate) fn host_space(&self) -> Result<SpaceReport> {
        space::report(&self.dir, self.cfg.host_reserve)
    }

    pub(crate) fn free_bytes(&self) -> Result<u64> {
        let host = self.host_space()?;
        Ok(host.free_bytes.saturating_sub(host.reserve_bytes))
    }

    pub(crate) fn health(&self, problems: &mut Vec<String>) -> Result<()> {
        problems.extend(
            self.problems
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .cloned(),
        );
        let host = self.host_space()?;
        let mut committed = 0u64;
        for id in self.list()? {
            let image = self.image(id.as_str());
            if let Ok(meta) = std::fs::metadata(&image) {
                use std::os::unix::fs::MetadataExt;
                committed += meta.len().saturating_sub(meta.blocks() * 512);
            }
            if let Some(m) = mounts::mount_at(&self.path(&id))? {
                if m.read_only() {
                    problems.push(format!(
                        "workspace {id} is read-only (ext4 error; see dmesg)"
                    ));
                }
            }
        }
        if committed > host.free_bytes {
            problems.push(format!(
                "the sparse workspace images may need {committed} more bytes than the host's {} \
                 free: a full host disk would turn into I/O errors in those workspaces",
                host.free_bytes
            ));
        }
        Ok(())
    }

    /// Unmounts every workspace; their loop devices detach themselves.
    pub(crate) fn unmount(self) -> Result<()> {
        for id in self.list()? {
            let mp = self.path(&id);
            if mounts::mount_at(&mp)?.is_some() {
                mounts::unmount(&mp)?;
            }
        }
        Ok(())
    }

    fn ensure_mounted(&self, id: &str, bound: &[LoopState]) -> Result<()> {
        let image = self.image(id);
        let mp = self.path(id);
        if let Some(m) = mounts::mount_at(&mp)? {
            if m.fstype == "ext4" && loopdev::bound_to(Path::new(&m.source), &image)?.is_some() {
                return Ok(());
            }
            return Err(WorkspaceError::MountConflict {
                path: mp,
                found: format!("{} from {}", m.fstype, m.source),
            });
        }
        std::fs::create_dir_all(&mp).at("mkdir", &mp)?;
        let meta = std::fs::metadata(&image).at("stat", &image)?;
        let identity = (
            std::os::unix::fs::MetadataExt::dev(&meta),
            std::os::unix::fs::MetadataExt::ino(&meta),
        );
        let existing = bound.iter().find(|s| s.backing == identity);
        let mounted = match existing {
            Some(state) => mount_ext4(&state.device, &mp),
            None => {
                let attached = loopdev::attach(&image)?;
                mount_ext4(&attached.path, &mp)
            }
        };
        mounted.map_err(|e| match e {
            WorkspaceError::Sys { source, .. } => WorkspaceError::MountExisting { image, source },
            e => e,
        })
    }

    /// Removes images a crash left half-made, and mount points left without an image.
    fn reclaim_temporaries(&self) -> Result<()> {
        for entry in std::fs::read_dir(&self.images)
            .at("read_dir", &self.images)?
            .flatten()
        {
            let name = entry.file_name();
            if name.to_string_lossy().starts_with(".new-") {
                remove_if_exists(&entry.path())?;
            }
        }
        for entry in std::fs::read_dir(&self.ws)
            .at("read_dir", &self.ws)?
            .flatten()
        {
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let mp = entry.path();
            if !self.exists(&name) && mounts::mount_at(&mp)?.is_none() {
                let _ = std::fs::remove_dir(&mp);
            }
        }
        Ok(())
    }
}

fn mount_ext4(device: &Path, mp: &Path) -> Result<()> {
    // discard: blocks freed in the workspace are punched out of the sparse image, so the host
    // gets them back. noinit_itable: no background zeroing of inode tables (a fresh sparse image
    // already reads as zeros).
    mounts::mount_device(device, mp, "ext4", "discard,noinit_itable").sys("mount", mp)
}
