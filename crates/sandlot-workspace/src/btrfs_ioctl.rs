//! The Btrfs ioctls the backend uses (`linux/btrfs.h`), each wrapped in a small safe function.
//! Subvolumes and quota groups are made with ioctls rather than `btrfs` subprocesses: a
//! workspace costs a few syscalls, not a fork and exec of btrfs-progs.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

use crate::error::{Result, SysStep};

const BTRFS_IOCTL_MAGIC: u8 = 0x94;
const BTRFS_PATH_NAME_MAX: usize = 4087;
const BTRFS_SUBVOL_NAME_MAX: usize = 4039;
const BTRFS_SUBVOL_SPEC_BY_ID: u64 = 1 << 4;
const BTRFS_QUOTA_CTL_ENABLE: u64 = 1;
const BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA: u64 = 4;
pub(crate) const BTRFS_QGROUP_LIMIT_MAX_RFER: u64 = 1;
/// The inode number of every subvolume's root directory.
pub(crate) const BTRFS_FIRST_FREE_OBJECTID: u64 = 256;
const BTRFS_ROOT_TREE_OBJECTID: u64 = 1;
const BTRFS_ROOT_REF_KEY: u32 = 156;
const BTRFS_ROOT_BACKREF_KEY: u32 = 144;

/// `struct btrfs_ioctl_vol_args`.
#[repr(C)]
pub(crate) struct VolArgs {
    fd: i64,
    name: [u8; BTRFS_PATH_NAME_MAX + 1],
}

/// `struct btrfs_ioctl_vol_args_v2`; the trailing union is `name` or, with
/// `BTRFS_SUBVOL_SPEC_BY_ID`, a subvolume id in its first eight bytes.
#[repr(C)]
pub(crate) struct VolArgsV2 {
    fd: i64,
    transid: u64,
    flags: u64,
    unused: [u64; 4],
    name: [u8; BTRFS_SUBVOL_NAME_MAX + 1],
}

/// `struct btrfs_ioctl_quota_ctl_args`.
#[repr(C)]
pub(crate) struct QuotaCtlArgs {
    cmd: u64,
    status: u64,
}

/// `struct btrfs_qgroup_limit`.
#[repr(C)]
#[derive(Default)]
struct QgroupLimit {
    flags: u64,
    max_rfer: u64,
    max_excl: u64,
    rsv_rfer: u64,
    rsv_excl: u64,
}

/// `struct btrfs_ioctl_qgroup_limit_args`.
#[repr(C)]
pub(crate) struct QgroupLimitArgs {
    qgroupid: u64,
    lim: QgroupLimit,
}

/// `struct btrfs_ioctl_qgroup_create_args`.
#[repr(C)]
pub(crate) struct QgroupCreateArgs {
    create: u64,
    qgroupid: u64,
}

/// `struct btrfs_ioctl_ino_lookup_args`.
#[repr(C)]
pub(crate) struct InoLookupArgs {
    treeid: u64,
    objectid: u64,
    name: [u8; 4080],
}

/// `struct btrfs_ioctl_fs_info_args`.
#[repr(C)]
pub(crate) struct FsInfoArgs {
    max_id: u64,
    num_devices: u64,
    fsid: [u8; 16],
    nodesize: u32,
    sectorsize: u32,
    clone_alignment: u32,
    csum_type: u16,
    csum_size: u16,
    flags: u64,
    generation: u64,
    metadata_uuid: [u8; 16],
    reserved: [u8; 944],
}

/// `struct btrfs_ioctl_search_key`.
#[repr(C)]
#[derive(Default)]
struct SearchKey {
    tree_id: u64,
    min_objectid: u64,
    max_objectid: u64,
    min_offset: u64,
    max_offset: u64,
    min_transid: u64,
    max_transid: u64,
    min_type: u32,
    max_type: u32,
    nr_items: u32,
    unused: u32,
    unused1: u64,
    unused2: u64,
    unused3: u64,
    unused4: u64,
}

const SEARCH_BUF: usize = 4096 - std::mem::size_of::<SearchKey>();

/// `struct btrfs_ioctl_search_args`.
#[repr(C)]
pub(crate) struct SearchArgs {
    key: SearchKey,
    buf: [u8; SEARCH_BUF],
}

/// `struct btrfs_ioctl_search_header`.
#[repr(C)]
#[derive(Clone, Copy)]
struct SearchHeader {
    transid: u64,
    objectid: u64,
    offset: u64,
    kind: u32,
    len: u32,
}

const _: () = assert!(std::mem::size_of::<VolArgs>() == 4096);
const _: () = assert!(std::mem::size_of::<VolArgsV2>() == 4096);
const _: () = assert!(std::mem::size_of::<FsInfoArgs>() == 1024);
const _: () = assert!(std::mem::size_of::<InoLookupArgs>() == 4096);
const _: () = assert!(std::mem::size_of::<SearchArgs>() == 4096);
const _: () = assert!(std::mem::size_of::<QgroupLimitArgs>() == 48);

nix::ioctl_write_ptr!(ioc_resize, BTRFS_IOCTL_MAGIC, 3, VolArgs);
nix::ioctl_write_ptr!(ioc_subvol_create, BTRFS_IOCTL_MAGIC, 14, VolArgs);
nix::ioctl_readwrite!(ioc_tree_search, BTRFS_IOCTL_MAGIC, 17, SearchArgs);
nix::ioctl_readwrite!(ioc_ino_lookup, BTRFS_IOCTL_MAGIC, 18, InoLookupArgs);
nix::ioctl_write_ptr!(ioc_snap_create_v2, BTRFS_IOCTL_MAGIC, 23, VolArgsV2);
nix::ioctl_read!(ioc_fs_info, BTRFS_IOCTL_MAGIC, 31, FsInfoArgs);
nix::ioctl_readwrite!(ioc_quota_ctl, BTRFS_IOCTL_MAGIC, 40, QuotaCtlArgs);
nix::ioctl_write_ptr!(ioc_qgroup_create, BTRFS_IOCTL_MAGIC, 42, QgroupCreateArgs);
// The header declares QGROUP_LIMIT as _IOR although the kernel only reads the argument.
nix::ioctl_read!(ioc_qgroup_limit, BTRFS_IOCTL_MAGIC, 43, QgroupLimitArgs);
nix::ioctl_write_ptr!(ioc_snap_destroy_v2, BTRFS_IOCTL_MAGIC, 63, VolArgsV2);

fn zeroed<T>() -> Box<T> {
    // SAFETY: only used for the plain-integer `#[repr(C)]` argument structs of this module, for
    // which all-zero bytes are a valid (and the kernel's expected default) value. Boxed because
    // several are 4 KiB.
    unsafe { Box::new(std::mem::zeroed()) }
}

/// Copies `name` into a NUL-terminated fixed buffer; callers pass validated ids.
fn put_name(buf: &mut [u8], name: &str) -> nix::Result<()> {
    if name.len() >= buf.len() || name.as_bytes().contains(&0) {
        return Err(nix::Error::ENAMETOOLONG);
    }
    buf[..name.len()].copy_from_slice(name.as_bytes());
    Ok(())
}

/// Creates the subvolume `name` in the directory `dir`.
pub(crate) fn subvol_create(dir: &File, dir_path: &Path, name: &str) -> Result<()> {
    let mut args = zeroed::<VolArgs>();
    put_name(&mut args.name, name).sys("BTRFS_IOC_SUBVOL_CREATE", dir_path.join(name))?;
    // SAFETY: `args` is a valid `btrfs_ioctl_vol_args`; `dir` is an open directory.
    unsafe { ioc_subvol_create(dir.as_raw_fd(), &*args) }
        .sys("BTRFS_IOC_SUBVOL_CREATE", dir_path.join(name))?;
    Ok(())
}

/// Creates a writable snapshot of the subvolume open as `src`, named `name` in `dir`.
pub(crate) fn snapshot(src: &File, dir: &File, dir_path: &Path, name: &str) -> Result<()> {
    let mut args = zeroed::<VolArgsV2>();
    args.fd = i64::from(src.as_raw_fd());
    put_name(&mut args.name, name).sys("BTRFS_IOC_SNAP_CREATE_V2", dir_path.join(name))?;
    // SAFETY: `args` is a valid `btrfs_ioctl_vol_args_v2`; both fds are open.
    unsafe { ioc_snap_create_v2(dir.as_raw_fd(), &*args) }
        .sys("BTRFS_IOC_SNAP_CREATE_V2", dir_path.join(name))?;
    Ok(())
}

/// Deletes the subvolume `name` in `dir` (it must hold no other subvolume).
pub(crate) fn subvol_destroy(dir: &File, dir_path: &Path, name: &str) -> Result<()> {
    let mut args = zeroed::<VolArgsV2>();
    put_name(&mut args.name, name).sys("BTRFS_IOC_SNAP_DESTROY_V2", dir_path.join(name))?;
    // SAFETY: `args` is a valid `btrfs_ioctl_vol_args_v2`; `dir` is an open directory.
    unsafe { ioc_snap_destroy_v2(dir.as_raw_fd(), &*args) }
        .sys("BTRFS_IOC_SNAP_DESTROY_V2", dir_path.join(name))?;
    Ok(())
}

/// Deletes the subvolume with id `subvolid`, wherever it sits in the filesystem of `fs`.
pub(crate) fn subvol_destroy_by_id(fs: &File, fs_path: &Path, subvolid: u64) -> Result<()> {
    let mut args = zeroed::<VolArgsV2>();
    args.flags = BTRFS_SUBVOL_SPEC_BY_ID;
    args.name[..8].copy_from_slice(&subvolid.to_ne_bytes());
    // SAFETY: `args` is a valid `btrfs_ioctl_vol_args_v2` with the id in the union; `fs` is open.
    unsafe { ioc_snap_destroy_v2(fs.as_raw_fd(), &*args) }
        .sys("BTRFS_IOC_SNAP_DESTROY_V2 (by id)", fs_path)?;
    Ok(())
}

/// The id of the subvolume `fd` lives in.
pub(crate) fn subvol_id(fd: &File, path: &Path) -> Result<u64> {
    let mut args = zeroed::<InoLookupArgs>();
    args.objectid = BTRFS_FIRST_FREE_OBJECTID;
    // SAFETY: `args` is a valid `btrfs_ioctl_ino_lookup_args`; the kernel fills `treeid`.
    unsafe { ioc_ino_lookup(fd.as_raw_fd(), &mut *args) }.sys("BTRFS_IOC_INO_LOOKUP", path)?;
    Ok(args.treeid)
}

/// The filesystem's UUID, as named under /sys/fs/btrfs.
pub(crate) fn fs_uuid(fd: &File, path: &Path) -> Result<String> {
    let mut args = zeroed::<FsInfoArgs>();
    // SAFETY: the kernel fills a `btrfs_ioctl_fs_info_args` we own.
    unsafe { ioc_fs_info(fd.as_raw_fd(), &mut *args) }.sys("BTRFS_IOC_FS_INFO", path)?;
    let h: String = args.fsid.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    ))
}

/// Turns quota accounting on (a no-op if it already is on, in whichever mode).
pub(crate) fn quota_enable(fs: &File, path: &Path, simple: bool) -> Result<()> {
    let mut args = QuotaCtlArgs {
        cmd: if simple {
            BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA
        } else {
            BTRFS_QUOTA_CTL_ENABLE
        },
        status: 0,
    };
    // SAFETY: `args` is a valid `btrfs_ioctl_quota_ctl_args`; `fs` is open on the filesystem.
    unsafe { ioc_quota_ctl(fs.as_raw_fd(), &mut args) }.sys("BTRFS_IOC_QUOTA_CTL", path)?;
    Ok(())
}

/// Sets (or with `None` clears) the referenced-bytes limit of the level-0 qgroup of `subvolid`.
pub(crate) fn qgroup_limit(
    fs: &File,
    path: &Path,
    subvolid: u64,
    bytes: Option<u64>,
) -> Result<()> {
    let mut args = QgroupLimitArgs {
        qgroupid: subvolid,
        lim: QgroupLimit {
            // Setting the flag with a value of u64::MAX is how "no limit" is written.
            flags: BTRFS_QGROUP_LIMIT_MAX_RFER,
            max_rfer: bytes.unwrap_or(u64::MAX),
            ..QgroupLimit::default()
        },
    };
    // SAFETY: `args` is a valid `btrfs_ioctl_qgroup_limit_args`; the kernel only reads it.
    unsafe { ioc_qgroup_limit(fs.as_raw_fd(), &mut args) }.sys("BTRFS_IOC_QGROUP_LIMIT", path)?;
    Ok(())
}

/// Deletes the level-0 qgroup of a deleted subvolume.
pub(crate) fn qgroup_remove(fs: &File, path: &Path, subvolid: u64) -> nix::Result<()> {
    let args = QgroupCreateArgs {
        create: 0,
        qgroupid: subvolid,
    };
    // SAFETY: `args` is a valid `btrfs_ioctl_qgroup_create_args`; `fs` is open.
    unsafe { ioc_qgroup_create(fs.as_raw_fd(), &args) }
        .map(drop)
        .inspect_err(|e| tracing::debug!(path = %path.display(), subvolid, "qgroup remove: {e}"))
}

/// A key found by a tree search: (objectid, type, offset).
type Key = (u64, u32, u64);

/// Every item key in the root tree between `min` and `max` (compared as whole keys, so keys of
/// other types in between are returned too; callers filter).
fn search_root_tree(fs: &File, path: &Path, min: Key, max: Key) -> Result<Vec<Key>> {
    let mut keys = Vec::new();
    let mut from = min;
    loop {
        let mut args = zeroed::<SearchArgs>();
        args.key = SearchKey {
            tree_id: BTRFS_ROOT_TREE_OBJECTID,
            min_objectid: from.0,
            min_type: from.1,
            min_offset: from.2,
            max_objectid: max.0,
            max_type: max.1,
            max_offset: max.2,
            max_transid: u64::MAX,
            nr_items: u32::MAX,
            ..SearchKey::default()
        };
        // SAFETY: `args` is a valid `btrfs_ioctl_search_args`; the kernel fills `buf` with
        // `nr_items` (header, item) pairs.
        unsafe { ioc_tree_search(fs.as_raw_fd(), &mut *args) }
            .sys("BTRFS_IOC_TREE_SEARCH", path)?;
        let found = args.key.nr_items;
        if found == 0 {
            return Ok(keys);
        }
        let mut at = 0usize;
        let mut last = from;
        for _ in 0..found {
            if at + std::mem::size_of::<SearchHeader>() > SEARCH_BUF {
                break;
            }
            // SAFETY: the kernel wrote a `btrfs_ioctl_search_header` at `at`, inside `buf`
            // (checked above); it may be unaligned.
            let header: SearchHeader =
                unsafe { std::ptr::read_unaligned(args.buf.as_ptr().add(at).cast()) };
            at += std::mem::size_of::<SearchHeader>() + header.len as usize;
            last = (header.objectid, header.kind, header.offset);
            keys.push(last);
        }
        // Continue just after the last key returned.
        from = match last {
            (o, t, off) if off < u64::MAX => (o, t, off + 1),
            (o, t, _) if t < u32::MAX => (o, t + 1, 0),
            (o, _, _) if o < u64::MAX => (o + 1, 0, 0),
            _ => return Ok(keys),
        };
        if from > max {
            return Ok(keys);
        }
    }
}

/// Ids of the subvolumes directly inside subvolume `parent` (its ROOT_REF items).
pub(crate) fn child_subvols(fs: &File, path: &Path, parent: u64) -> Result<Vec<u64>> {
    let keys = search_root_tree(
        fs,
        path,
        (parent, BTRFS_ROOT_REF_KEY, 0),
        (parent, BTRFS_ROOT_REF_KEY, u64::MAX),
    )?;
    Ok(keys
        .into_iter()
        .filter(|k| k.0 == parent && k.1 == BTRFS_ROOT_REF_KEY)
        .map(|k| k.2)
        .collect())
}

/// Ids of every subvolume still linked into the filesystem (it has a ROOT_BACKREF item; a
/// deleted one loses it at once, before the cleaner drops its tree).
pub(crate) fn linked_subvols(fs: &File, path: &Path) -> Result<Vec<u64>> {
    let keys = search_root_tree(
        fs,
        path,
        (BTRFS_FIRST_FREE_OBJECTID, BTRFS_ROOT_BACKREF_KEY, 0),
        (u64::MAX, BTRFS_ROOT_BACKREF_KEY, u64::MAX),
    )?;
    let mut ids: Vec<u64> = keys
        .into_iter()
        .filter(|k| k.1 == BTRFS_ROOT_BACKREF_KEY)
        .map(|k| k.0)
        .collect();
    ids.dedup();
    Ok(ids)
}

/// Grows the filesystem to the full size of its (single) device.
pub(crate) fn resize_max(fs: &File, path: &Path) -> Result<()> {
    let mut args = zeroed::<VolArgs>();
    put_name(&mut args.name, "max").sys("BTRFS_IOC_RESIZE", path)?;
    // SAFETY: `args` is a valid `btrfs_ioctl_vol_args` holding "max"; `fs` is open.
    unsafe { ioc_resize(fs.as_raw_fd(), &*args) }.sys("BTRFS_IOC_RESIZE", path)?;
    Ok(())
}

/// Shrinks (or grows) the filesystem on its (single) device to `bytes`; Btrfs first moves the
/// chunks that lie beyond into the room below (`ENOSPC` when they do not fit).
pub(crate) fn resize_to(fs: &File, path: &Path, bytes: u64) -> Result<()> {
    let mut args = zeroed::<VolArgs>();
    put_name(&mut args.name, &bytes.to_string()).sys("BTRFS_IOC_RESIZE", path)?;
    // SAFETY: `args` is a valid `btrfs_ioctl_vol_args` holding a size; `fs` is open.
    unsafe { ioc_resize(fs.as_raw_fd(), &*args) }.sys("BTRFS_IOC_RESIZE", path)?;
    Ok(())
}
