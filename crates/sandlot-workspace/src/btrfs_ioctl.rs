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
const BTRFS_INODE_ITEM_KEY: u32 = 1;
/// The highest objectid an inode of a subvolume can have; orphan, free-space and log items
/// use the objectids above it.
const BTRFS_LAST_FREE_OBJECTID: u64 = (-256i64) as u64;
/// `vol_args_v2.flags`: `size` and `qgroup_inherit` are set.
const BTRFS_SUBVOL_QGROUP_INHERIT: u64 = 1 << 2;
/// A qgroup id's level sits in its top 16 bits (`btrfs_qgroup_level`).
pub(crate) const QGROUP_LEVEL_SHIFT: u32 = 48;

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

/// `struct btrfs_ioctl_qgroup_assign_args`.
#[repr(C)]
pub(crate) struct QgroupAssignArgs {
    assign: u64,
    src: u64,
    dst: u64,
}

/// `struct btrfs_ioctl_search_args_v2` without its trailing `buf[]`.
#[repr(C)]
pub(crate) struct SearchArgsV2 {
    key: SearchKey,
    buf_size: u64,
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
const _: () = assert!(std::mem::size_of::<SearchArgsV2>() == 112);
const _: () = assert!(std::mem::size_of::<QgroupAssignArgs>() == 24);

nix::ioctl_write_ptr!(ioc_resize, BTRFS_IOCTL_MAGIC, 3, VolArgs);
nix::ioctl_none!(ioc_sync, BTRFS_IOCTL_MAGIC, 8);
nix::ioctl_write_ptr!(ioc_subvol_create, BTRFS_IOCTL_MAGIC, 14, VolArgs);
nix::ioctl_readwrite!(ioc_tree_search, BTRFS_IOCTL_MAGIC, 17, SearchArgs);
nix::ioctl_readwrite!(ioc_ino_lookup, BTRFS_IOCTL_MAGIC, 18, InoLookupArgs);
nix::ioctl_write_ptr!(ioc_snap_create_v2, BTRFS_IOCTL_MAGIC, 23, VolArgsV2);
nix::ioctl_write_ptr!(ioc_subvol_create_v2, BTRFS_IOCTL_MAGIC, 24, VolArgsV2);
nix::ioctl_readwrite!(ioc_tree_search_v2, BTRFS_IOCTL_MAGIC, 17, SearchArgsV2);
nix::ioctl_write_ptr!(ioc_qgroup_assign, BTRFS_IOCTL_MAGIC, 41, QgroupAssignArgs);
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

/// `struct btrfs_qgroup_inherit` as u64 words: flags, num_qgroups, num_ref_copies,
/// num_excl_copies, a zero `btrfs_qgroup_limit` (five words), then the qgroup ids. The kernel
/// wants `size` to be exactly this many bytes, every id a level ≥ 1 qgroup that exists, and
/// no copies (it refuses them since 6.8).
pub(crate) fn inherit_words(groups: &[u64]) -> Vec<u64> {
    let mut words = vec![0u64; 9];
    words[1] = groups.len() as u64;
    words.extend_from_slice(groups);
    words
}

/// Fills the `qgroup_inherit` half of `args` with `words` (which must outlive the ioctl).
fn set_inherit(args: &mut VolArgsV2, words: &[u64]) {
    args.flags |= BTRFS_SUBVOL_QGROUP_INHERIT;
    args.unused[0] = std::mem::size_of_val(words) as u64;
    args.unused[1] = words.as_ptr() as u64;
}

/// Creates the subvolume `name` in the directory `dir`; with `group`, its level-0 qgroup is
/// made a member of that level-1 qgroup in the same transaction (`BTRFS_SUBVOL_QGROUP_INHERIT`),
/// so the group's accounting never needs a rescan.
pub(crate) fn subvol_create(
    dir: &File,
    dir_path: &Path,
    name: &str,
    group: Option<u64>,
) -> Result<()> {
    let Some(group) = group else {
        let mut args = zeroed::<VolArgs>();
        put_name(&mut args.name, name).sys("BTRFS_IOC_SUBVOL_CREATE", dir_path.join(name))?;
        // SAFETY: `args` is a valid `btrfs_ioctl_vol_args`; `dir` is an open directory.
        unsafe { ioc_subvol_create(dir.as_raw_fd(), &*args) }
            .sys("BTRFS_IOC_SUBVOL_CREATE", dir_path.join(name))?;
        return Ok(());
    };
    let words = inherit_words(&[group]);
    let mut args = zeroed::<VolArgsV2>();
    set_inherit(&mut args, &words);
    put_name(&mut args.name, name).sys("BTRFS_IOC_SUBVOL_CREATE_V2", dir_path.join(name))?;
    // SAFETY: `args` is a valid `btrfs_ioctl_vol_args_v2` whose inherit pointer and size name
    // `words`, alive until the call returns; `dir` is an open directory.
    unsafe { ioc_subvol_create_v2(dir.as_raw_fd(), &*args) }
        .sys("BTRFS_IOC_SUBVOL_CREATE_V2", dir_path.join(name))?;
    Ok(())
}

/// Creates a writable snapshot of the subvolume open as `src`, named `name` in `dir`, in the
/// level-1 qgroup `group` if given (as [`subvol_create`]).
pub(crate) fn snapshot(
    src: &File,
    dir: &File,
    dir_path: &Path,
    name: &str,
    group: Option<u64>,
) -> Result<()> {
    let words = group.map(|g| inherit_words(&[g]));
    let mut args = zeroed::<VolArgsV2>();
    args.fd = i64::from(src.as_raw_fd());
    if let Some(words) = &words {
        set_inherit(&mut args, words);
    }
    put_name(&mut args.name, name).sys("BTRFS_IOC_SNAP_CREATE_V2", dir_path.join(name))?;
    // SAFETY: `args` is a valid `btrfs_ioctl_vol_args_v2` (its inherit pointer, when set, names
    // `words`, alive until the call returns); both fds are open.
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

/// Sets (or with `None` clears) the referenced-bytes limit of the qgroup `qgroupid` (a
/// subvolume id is its level-0 qgroup's id).
pub(crate) fn qgroup_limit(
    fs: &File,
    path: &Path,
    qgroupid: u64,
    bytes: Option<u64>,
) -> Result<()> {
    let mut args = QgroupLimitArgs {
        qgroupid,
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

/// Makes the (higher-level) qgroup `qgroupid`; one that exists already is fine.
pub(crate) fn qgroup_create(fs: &File, path: &Path, qgroupid: u64) -> Result<()> {
    let args = QgroupCreateArgs {
        create: 1,
        qgroupid,
    };
    // SAFETY: `args` is a valid `btrfs_ioctl_qgroup_create_args`; `fs` is open.
    match unsafe { ioc_qgroup_create(fs.as_raw_fd(), &args) } {
        Ok(_) | Err(nix::Error::EEXIST) => Ok(()),
        Err(e) => Err(e).sys("BTRFS_IOC_QGROUP_CREATE", path),
    }
}

/// Makes qgroup `member` a member of the higher-level qgroup `group`; already being one is
/// fine. Under simple quotas (and for a qgroup whose bytes are all exclusive) the kernel moves
/// the member's usage into the group at once; otherwise it marks the accounting inconsistent,
/// which is why creations use [`subvol_create`]'s inherit instead.
pub(crate) fn qgroup_assign(fs: &File, path: &Path, member: u64, group: u64) -> Result<()> {
    let args = QgroupAssignArgs {
        assign: 1,
        src: member,
        dst: group,
    };
    // SAFETY: `args` is a valid `btrfs_ioctl_qgroup_assign_args`; `fs` is open.
    match unsafe { ioc_qgroup_assign(fs.as_raw_fd(), &args) } {
        Ok(_) | Err(nix::Error::EEXIST) => Ok(()),
        Err(e) => Err(e).sys("BTRFS_IOC_QGROUP_ASSIGN", path),
    }
}

/// Whether subvolume `subvolid` has any item of an inode numbered `from` or higher: Btrfs
/// hands out inode numbers in increasing order, so `false` proves the subvolume has fewer
/// than `from - 255` inodes at this moment. One ioctl, one tree descent.
pub(crate) fn has_inode_from(fs: &File, path: &Path, subvolid: u64, from: u64) -> Result<bool> {
    let mut buf = SearchV2Buf::new(4096);
    let n = buf.search(
        fs,
        path,
        subvolid,
        (from.max(BTRFS_FIRST_FREE_OBJECTID), 0, 0),
        (BTRFS_LAST_FREE_OBJECTID, u32::MAX, u64::MAX),
        1,
    )?;
    Ok(n > 0)
}

/// How many inodes (INODE_ITEMs) subvolume `subvolid` holds, counting no further than
/// `stop_after` (the answer is then `stop_after + 1` or more). Reads the subvolume's tree in
/// 256 KiB batches (`BTRFS_IOC_TREE_SEARCH_V2`): the kernel returns every item in the key
/// range, so the cost is about 400 bytes copied per file.
pub(crate) fn count_inodes(fs: &File, path: &Path, subvolid: u64, stop_after: u64) -> Result<u64> {
    let mut buf = SearchV2Buf::new(256 << 10);
    let mut from: Key = (BTRFS_FIRST_FREE_OBJECTID, 0, 0);
    let max: Key = (BTRFS_LAST_FREE_OBJECTID, u32::MAX, u64::MAX);
    let mut count = 0u64;
    loop {
        let n = buf.search(fs, path, subvolid, from, max, u32::MAX)?;
        if n == 0 {
            return Ok(count);
        }
        let (inodes, last) = count_items(buf.items(), n, BTRFS_INODE_ITEM_KEY);
        count += inodes;
        if count > stop_after {
            return Ok(count);
        }
        match last.and_then(next_key) {
            Some(next) if next <= max => from = next,
            _ => return Ok(count),
        }
    }
}

/// The key just after `k`, if there is one.
fn next_key(k: Key) -> Option<Key> {
    match k {
        (o, t, off) if off < u64::MAX => Some((o, t, off + 1)),
        (o, t, _) if t < u32::MAX => Some((o, t + 1, 0)),
        (o, _, _) if o < u64::MAX => Some((o + 1, 0, 0)),
        _ => None,
    }
}

/// Counts the items of type `kind` among the `n` (header, item) pairs at the start of `buf`,
/// and returns the last key seen. Stops at a header that would not fit `buf`.
pub(crate) fn count_items(buf: &[u8], n: u32, kind: u32) -> (u64, Option<Key>) {
    let header = std::mem::size_of::<SearchHeader>();
    let (mut at, mut count, mut last) = (0usize, 0u64, None);
    for _ in 0..n {
        if at + header > buf.len() {
            break;
        }
        // SAFETY: `at + header <= buf.len()` (checked above): the read stays inside `buf`;
        // `SearchHeader` is plain integers, valid for any bytes, and may be unaligned.
        let h: SearchHeader = unsafe { std::ptr::read_unaligned(buf.as_ptr().add(at).cast()) };
        if h.kind == kind {
            count += 1;
        }
        last = Some((h.objectid, h.kind, h.offset));
        at = at.saturating_add(header + h.len as usize);
    }
    (count, last)
}

/// An 8-byte-aligned buffer holding `btrfs_ioctl_search_args_v2` and its `buf[]`.
struct SearchV2Buf {
    words: Vec<u64>,
}

impl SearchV2Buf {
    const HEAD: usize = std::mem::size_of::<SearchArgsV2>();

    fn new(buf_bytes: usize) -> SearchV2Buf {
        SearchV2Buf {
            words: vec![0u64; (Self::HEAD + buf_bytes).div_ceil(8)],
        }
    }

    /// Searches tree `tree` for at most `nr` items with keys in `min..=max`; returns how many
    /// the kernel put in [`SearchV2Buf::items`].
    fn search(
        &mut self,
        fs: &File,
        path: &Path,
        tree: u64,
        min: Key,
        max: Key,
        nr: u32,
    ) -> Result<u32> {
        let buf_size = (self.words.len() * 8 - Self::HEAD) as u64;
        let args = self.words.as_mut_ptr().cast::<SearchArgsV2>();
        // SAFETY: `words` is 8-byte aligned and at least `HEAD` bytes long, so `args` points
        // to a writable `SearchArgsV2` (plain integers); `buf_size` bytes follow it inside
        // `words`, which is what the kernel may write. Nothing else borrows `words` meanwhile.
        unsafe {
            *args = SearchArgsV2 {
                key: SearchKey {
                    tree_id: tree,
                    min_objectid: min.0,
                    min_type: min.1,
                    min_offset: min.2,
                    max_objectid: max.0,
                    max_type: max.1,
                    max_offset: max.2,
                    max_transid: u64::MAX,
                    nr_items: nr,
                    ..SearchKey::default()
                },
                buf_size,
            };
            ioc_tree_search_v2(fs.as_raw_fd(), args).sys("BTRFS_IOC_TREE_SEARCH_V2", path)?;
            Ok((*args).key.nr_items)
        }
    }

    fn items(&self) -> &[u8] {
        // SAFETY: viewing the `u64` words as bytes (alignment 1, same length in bytes).
        let bytes: &[u8] =
            unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast(), self.words.len() * 8) };
        &bytes[Self::HEAD..]
    }
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

/// Commits the filesystem and wakes its transaction thread, which pokes the cleaner: a
/// deleted subvolume is dropped (and its bytes leave its qgroups) now rather than at the next
/// commit interval (30 s). `syncfs` alone does not wake the cleaner.
pub(crate) fn sync(fs: &File, path: &Path) -> Result<()> {
    // SAFETY: BTRFS_IOC_SYNC takes no argument; `fs` is open on the filesystem.
    unsafe { ioc_sync(fs.as_raw_fd()) }.sys("BTRFS_IOC_SYNC", path)?;
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inherit_is_the_kernel_layout_with_no_copies() {
        let w = inherit_words(&[(1 << 48) | 7]);
        // flags, num_qgroups, num_ref_copies, num_excl_copies, five limit words, the ids.
        assert_eq!(w.len(), 10);
        assert_eq!(w[1], 1);
        assert_eq!(&w[2..9], &[0; 7]);
        assert_eq!(w[9], (1 << 48) | 7);
        assert_eq!(std::mem::size_of_val(&w[..]), 80);
        assert_eq!(inherit_words(&[]).len(), 9);
    }

    #[test]
    fn vol_args_v2_keeps_size_and_pointer_where_the_kernel_reads_them() {
        let words = inherit_words(&[(1 << 48) | 3]);
        let mut args = zeroed::<VolArgsV2>();
        set_inherit(&mut args, &words);
        assert_eq!(args.flags, BTRFS_SUBVOL_QGROUP_INHERIT);
        assert_eq!(std::mem::offset_of!(VolArgsV2, unused), 24);
        assert_eq!(args.unused[0], 80);
        assert_eq!(args.unused[1], words.as_ptr() as u64);
        assert_eq!(std::mem::offset_of!(VolArgsV2, name), 56);
    }

    fn item(buf: &mut Vec<u8>, objectid: u64, kind: u32, len: u32) {
        let h = SearchHeader {
            transid: 1,
            objectid,
            offset: 0,
            kind,
            len,
        };
        // SAFETY: viewing a plain-integer `#[repr(C)]` struct as its bytes.
        let bytes: [u8; 32] = unsafe { std::mem::transmute(h) };
        buf.extend_from_slice(&bytes);
        buf.extend(std::iter::repeat_n(0u8, len as usize));
    }

    #[test]
    fn count_items_counts_one_kind_and_stops_at_the_buffer_end() {
        let mut buf = Vec::new();
        item(&mut buf, 256, BTRFS_INODE_ITEM_KEY, 160);
        item(&mut buf, 256, 12, 14);
        item(&mut buf, 257, BTRFS_INODE_ITEM_KEY, 160);
        item(&mut buf, 257, 84, 40);
        assert_eq!(count_items(&buf, 4, 1), (2, Some((257, 84, 0))));
        // The kernel's count says more than the buffer holds: stop at the end, never past it.
        assert_eq!(count_items(&buf, 9, 1), (2, Some((257, 84, 0))));
        assert_eq!(count_items(&buf[..40], 4, 1), (1, Some((256, 1, 0))));
        assert_eq!(count_items(&[], 3, 1), (0, None));
    }

    #[test]
    fn next_key_steps_through_offset_type_and_objectid() {
        assert_eq!(next_key((5, 1, 7)), Some((5, 1, 8)));
        assert_eq!(next_key((5, 1, u64::MAX)), Some((5, 2, 0)));
        assert_eq!(next_key((5, u32::MAX, u64::MAX)), Some((6, 0, 0)));
        assert_eq!(next_key((u64::MAX, u32::MAX, u64::MAX)), None);
    }
}
