//! Loop devices through the kernel's own interface (`linux/loop.h`): `LOOP_CTL_GET_FREE` on
//! `/dev/loop-control`, then `LOOP_CONFIGURE` (one ioctl: backing fd, flags, no window where
//! the device is bound but unconfigured). Written here rather than taken from a crate because
//! the loop crates generate their bindings with bindgen, which needs libclang at build time.
//!
//! Every device is configured with `LO_FLAGS_AUTOCLEAR`: the kernel detaches it when its last
//! user goes (the mount, or our fd if the mount never happened), so a crash between attach and
//! mount, or an unmount, never leaks a device. `LO_FLAGS_DIRECT_IO` makes the loop driver write
//! to the image with O_DIRECT, so the data is not cached twice (once in the workspace
//! filesystem's page cache, once in the image file's).

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{IoStep, Result, SysStep};

const LOOP_CONTROL: &str = "/dev/loop-control";
const LO_FLAGS_AUTOCLEAR: u32 = 4;
const LO_FLAGS_DIRECT_IO: u32 = 16;
const LO_NAME_SIZE: usize = 64;
/// How many times to retry when another process takes the free device between our
/// `LOOP_CTL_GET_FREE` and `LOOP_CONFIGURE`.
const ATTACH_ATTEMPTS: usize = 16;

/// `struct loop_info64`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; LO_NAME_SIZE],
    lo_crypt_name: [u8; LO_NAME_SIZE],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// `struct loop_config`.
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

const _: () = assert!(std::mem::size_of::<LoopInfo64>() == 232);
const _: () = assert!(std::mem::size_of::<LoopConfig>() == 304);

impl LoopInfo64 {
    fn zeroed() -> Self {
        // SAFETY: plain integers and byte arrays; all-zero is a valid value (and what the kernel
        // expects for the fields we do not set).
        unsafe { std::mem::zeroed() }
    }
}

// The loop ioctls predate the _IOC encoding: their numbers are bare constants.
nix::ioctl_none_bad!(loop_ctl_get_free, 0x4C82);
nix::ioctl_write_ptr_bad!(loop_configure, 0x4C0A, LoopConfig);
nix::ioctl_read_bad!(loop_get_status64, 0x4C05, LoopInfo64);
nix::ioctl_none_bad!(loop_set_capacity, 0x4C07);

/// A loop device we just bound. Keep `device` open until the filesystem is mounted: closing it
/// first would let autoclear detach the device.
pub(crate) struct Attached {
    pub path: PathBuf,
    /// Held only to keep the device bound until the mount holds it.
    pub _device: File,
    pub direct_io: bool,
}

/// Binds `image` to a free loop device with autoclear and, when the backing filesystem allows
/// it, direct I/O.
pub(crate) fn attach(image: &Path) -> Result<Attached> {
    let backing = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(image)
        .at("open image", image)?;
    let control = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(LOOP_CONTROL)
        .at("open", LOOP_CONTROL)?;
    let mut last = nix::Error::EBUSY;
    for _ in 0..ATTACH_ATTEMPTS {
        // SAFETY: LOOP_CTL_GET_FREE takes no argument; the fd is a live /dev/loop-control.
        let index = unsafe { loop_ctl_get_free(control.as_raw_fd()) }
            .sys("LOOP_CTL_GET_FREE", LOOP_CONTROL)?;
        let path = PathBuf::from(format!("/dev/loop{index}"));
        let device = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(&path)
            .at("open loop device", &path)?;
        match configure(&device, &backing, image, true) {
            // Some filesystems (or block sizes) refuse direct I/O: fall back to buffered.
            Err(nix::Error::EINVAL) => match configure(&device, &backing, image, false) {
                Ok(()) => {}
                Err(nix::Error::EBUSY) => continue,
                Err(e) => return Err(e).sys("LOOP_CONFIGURE", &path),
            },
            Err(nix::Error::EBUSY) => {
                last = nix::Error::EBUSY;
                continue;
            }
            Err(e) => return Err(e).sys("LOOP_CONFIGURE", &path),
            Ok(()) => {}
        }
        let flags = status(&device, &path)?.lo_flags;
        return Ok(Attached {
            path,
            _device: device,
            direct_io: flags & LO_FLAGS_DIRECT_IO != 0,
        });
    }
    Err(last).sys("LOOP_CONFIGURE (every free device was taken)", image)
}

fn configure(device: &File, backing: &File, image: &Path, direct_io: bool) -> nix::Result<()> {
    let mut info = LoopInfo64::zeroed();
    info.lo_flags = LO_FLAGS_AUTOCLEAR | if direct_io { LO_FLAGS_DIRECT_IO } else { 0 };
    // Informational only (what `losetup -a` shows); the kernel keeps the backing file itself.
    let name = image.as_os_str().as_encoded_bytes();
    let n = name.len().min(LO_NAME_SIZE - 1);
    info.lo_file_name[..n].copy_from_slice(&name[..n]);
    let config = LoopConfig {
        fd: backing.as_raw_fd() as u32,
        // 0: the kernel picks the backing device's logical block size, which direct I/O needs.
        block_size: 0,
        info,
        reserved: [0; 8],
    };
    // SAFETY: `config` is a fully initialised `struct loop_config` that outlives the call; both
    // fds are open.
    unsafe { loop_configure(device.as_raw_fd(), &config) }.map(drop)
}

fn status(device: &File, path: &Path) -> Result<LoopInfo64> {
    let mut info = LoopInfo64::zeroed();
    // SAFETY: the kernel fills a `struct loop_info64` we own.
    unsafe { loop_get_status64(device.as_raw_fd(), &mut info) }.sys("LOOP_GET_STATUS64", path)?;
    Ok(info)
}

/// What a bound loop device reports about itself.
#[derive(Debug, Clone)]
pub(crate) struct LoopState {
    pub device: PathBuf,
    /// `st_dev` and `st_ino` of the backing file.
    pub backing: (u64, u64),
    pub direct_io: bool,
}

fn state_of(device: &Path) -> Option<LoopState> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(device)
        .ok()?;
    let mut info = LoopInfo64::zeroed();
    // SAFETY: the kernel fills a `struct loop_info64` we own; ENXIO means "not bound".
    unsafe { loop_get_status64(file.as_raw_fd(), &mut info) }.ok()?;
    Some(LoopState {
        device: device.to_path_buf(),
        // The kernel reports the backing file's st_dev in the same encoding as stat(2).
        backing: (info.lo_device, info.lo_inode),
        direct_io: info.lo_flags & LO_FLAGS_DIRECT_IO != 0,
    })
}

fn identity(image: &Path) -> Result<(u64, u64)> {
    let meta = std::fs::metadata(image).at("stat image", image)?;
    Ok((meta.dev(), meta.ino()))
}

/// The state of `device` if it is bound to `image` (same device and inode), `None` otherwise.
pub(crate) fn bound_to(device: &Path, image: &Path) -> Result<Option<LoopState>> {
    let id = identity(image)?;
    Ok(state_of(device).filter(|s| s.backing == id))
}

/// Every bound loop device (only bound devices have a `loop` directory in sysfs).
pub(crate) fn bound_devices() -> Result<Vec<LoopState>> {
    let entries = std::fs::read_dir("/sys/block").at("read_dir", "/sys/block")?;
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with("loop") && entry.path().join("loop").exists() {
            found.extend(state_of(Path::new(&format!("/dev/{name}"))));
        }
    }
    Ok(found)
}

/// A loop device already bound to `image`, if any (after a crash the mount may be gone while
/// the device is still held open by someone). Mounting a second device with the same Btrfs
/// fsid would confuse the kernel's device list, so an existing binding must be reused.
pub(crate) fn find_bound(image: &Path) -> Result<Option<LoopState>> {
    let id = identity(image)?;
    Ok(bound_devices()?.into_iter().find(|s| s.backing == id))
}

/// Makes the loop device re-read its backing file's size after the image grew.
pub(crate) fn set_capacity(device: &Path) -> Result<()> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(device)
        .at("open loop device", device)?;
    // SAFETY: LOOP_SET_CAPACITY takes no argument; the fd is an open loop device.
    unsafe { loop_set_capacity(file.as_raw_fd()) }.sys("LOOP_SET_CAPACITY", device)?;
    Ok(())
}
