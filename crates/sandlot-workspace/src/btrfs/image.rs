//! The image file itself: made (allocated, formatted, renamed into place), attached to a loop
//! device and mounted, its quotas enabled, and whether it is backed by the host's disk.

use std::fs::{File, OpenOptions};
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::FallocateFlags;

use crate::btrfs_ioctl as ioc;
use crate::error::{IoStep, Result, SysStep, WorkspaceError};
use crate::{loopdev, mounts, tools, QuotaMode, WorkspaceConfig};

pub(crate) const IMAGE_NAME: &str = "workspaces.btrfs";
pub(crate) const MIB: u64 = 1 << 20;
/// mkfs.btrfs refuses smaller devices (with DUP metadata).
pub(super) const MIN_IMAGE: u64 = 128 * MIB;

pub(super) fn round_down_mib(bytes: u64) -> u64 {
    bytes / MIB * MIB
}

pub(super) fn round_up_mib(bytes: u64) -> u64 {
    bytes.div_ceil(MIB) * MIB
}

/// Makes the image under a temporary name and renames it into place only once formatted, so a
/// crash mid-way never leaves a half-made image under the real name (and an image under the real
/// name is never formatted again).
pub(super) fn make_image(
    dir: &Path,
    image: &Path,
    cfg: &WorkspaceConfig,
    max_bytes: u64,
    host_room: u64,
) -> Result<()> {
    tools::MKFS_BTRFS.require()?;
    let tmp = dir.join(format!("{IMAGE_NAME}.new"));
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).at("remove", &tmp),
    }
    let size = if cfg.image.sparse {
        max_bytes
    } else {
        round_down_mib(cfg.image.initial_bytes.min(max_bytes).min(host_room)).max(MIN_IMAGE)
    };
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(&tmp)
        .at("create", &tmp)?;
    let allocated = !cfg.image.sparse
        && match nix::fcntl::fallocate(file.as_fd(), FallocateFlags::empty(), 0, size as i64) {
            Ok(()) => true,
            // The data dir's filesystem cannot allocate ahead (health says the image is sparse).
            Err(nix::Error::EOPNOTSUPP) => false,
            Err(e) => return Err(e).sys("fallocate", &tmp),
        };
    if !allocated {
        file.set_len(size).at("truncate", &tmp)?;
    }
    // -K: no discard of the image (it would punch out the allocation we just made).
    tools::MKFS_BTRFS.run(&["-q", "-f", "-K", "-L", "sandlot-workspaces"], &tmp)?;
    file.sync_all().at("fsync", &tmp)?;
    drop(file);
    std::fs::rename(&tmp, image).at("rename", image)?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .at("fsync", dir)?;
    tracing::info!(image = %image.display(), size, "workspace image created");
    Ok(())
}

/// Mounts the image at `mnt`, reusing what is there: an existing mount of this image, or a loop
/// device still bound to it. Returns the loop device and whether it does direct I/O.
pub(super) fn ensure_mounted(
    image: &Path,
    mnt: &Path,
    backed: bool,
    fresh: bool,
) -> Result<(PathBuf, bool)> {
    // A fully allocated image must not be discarded by the filesystem (the loop driver would
    // punch holes in it); a sparse one returns freed space to the host.
    let data = if backed { "nodiscard" } else { "discard=async" };
    if let Some(m) = mounts::mount_at(mnt)? {
        let device = PathBuf::from(&m.source);
        if m.fstype == "btrfs" {
            if let Some(state) = loopdev::bound_to(&device, image)? {
                tracing::info!(mnt = %mnt.display(), "reusing the mounted workspace filesystem");
                return Ok((device, state.direct_io));
            }
        }
        return Err(WorkspaceError::MountConflict {
            path: mnt.to_path_buf(),
            found: format!("{} from {}", m.fstype, m.source),
        });
    }
    let mount_err = |source| {
        if fresh {
            WorkspaceError::Sys {
                step: "mount",
                path: mnt.to_path_buf(),
                source,
            }
        } else {
            WorkspaceError::MountExisting {
                image: image.to_path_buf(),
                source,
            }
        }
    };
    if let Some(state) = loopdev::find_bound(image)? {
        tracing::info!(
            device = %state.device.display(),
            "reusing the loop device still bound to the image"
        );
        mounts::mount_device(&state.device, mnt, "btrfs", data).map_err(mount_err)?;
        return Ok((state.device, state.direct_io));
    }
    let attached = loopdev::attach(image)?;
    mounts::mount_device(&attached.path, mnt, "btrfs", data).map_err(mount_err)?;
    // The mount now holds the device; closing ours lets autoclear detach it at unmount.
    Ok((attached.path, attached.direct_io))
}

/// Turns quotas on if they are off, in the configured mode; an existing mode is kept (switching
/// would need a full rescan and is the operator's call).
pub(super) fn enable_quota(
    fs: &File,
    mnt: &Path,
    uuid: &str,
    want: QuotaMode,
) -> Result<QuotaMode> {
    let mode_file = Path::new("/sys/fs/btrfs").join(uuid).join("qgroups/mode");
    if !mode_file.exists() {
        let simple = want == QuotaMode::Simple;
        if let Err(e) = ioc::quota_enable(fs, mnt, simple) {
            if !simple {
                return Err(e);
            }
            // Kernels before 6.7 have no simple quotas.
            tracing::warn!("simple quotas unavailable ({e}); using full qgroups");
            ioc::quota_enable(fs, mnt, false)?;
        }
    }
    let mode = std::fs::read_to_string(&mode_file).at("read", &mode_file)?;
    Ok(if mode.trim() == "squota" {
        QuotaMode::Simple
    } else {
        QuotaMode::Full
    })
}

/// Makes a configured-as-backed image fully allocated (an image made sparse by an older
/// configuration, or one whose filesystem cannot allocate ahead stays sparse).
pub(super) fn is_backed(image: &Path, want_backed: bool) -> Result<bool> {
    let meta = std::fs::metadata(image).at("stat", image)?;
    if !want_backed {
        return Ok(false);
    }
    if meta.blocks() * 512 >= meta.len() {
        return Ok(true);
    }
    let file = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(image)
        .at("open", image)?;
    // Mode 0 only fills holes: data already in the image is not touched.
    match nix::fcntl::fallocate(file.as_fd(), FallocateFlags::empty(), 0, meta.len() as i64) {
        Ok(()) => Ok(true),
        Err(e) => {
            tracing::warn!(image = %image.display(), "image stays sparse: fallocate: {e}");
            Ok(false)
        }
    }
}
