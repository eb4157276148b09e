//! fd-relative file system calls for root code that works inside a tree a sandbox can change
//! (a workspace, a volume, a sandbox's tmpfs): every lookup starts from a directory fd the
//! caller holds and resolves one name with `openat2` under `RESOLVE_IN_ROOT`,
//! `RESOLVE_NO_SYMLINKS`, `RESOLVE_NO_MAGICLINKS` and `RESOLVE_NO_XDEV`; every change (mode,
//! owner, link, removal) is made on an fd or on a single name relative to one, never following
//! a symlink. A sandbox that swaps a directory for a symlink meanwhile makes the next step fail
//! (`ELOOP`, `ENOTDIR`, `EEXIST`); it can never make it act outside the tree.
//!
//! Shared by this crate's copies between workspaces and by the runtime's files, archives,
//! diffs and output tails.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

pub use nix::Error as Errno;

const RESOLVE_NO_XDEV: u64 = 0x01;
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_IN_ROOT: u64 = 0x10;
/// How every lookup resolves: inside the directory fd (`..` and absolute names stay in it), no
/// symlink (not even the last component), no `/proc` magic link, no other mount.
pub const SAFE_RESOLVE: u64 =
    RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS | RESOLVE_IN_ROOT;

/// A name as a C string; a name with a NUL byte becomes empty (which every call refuses).
pub fn cstring(name: impl AsRef<[u8]>) -> CString {
    CString::new(name.as_ref()).unwrap_or_default()
}

/// `openat2(dir, path, flags | O_CLOEXEC, mode)` resolved with [`SAFE_RESOLVE`], retried on
/// `EAGAIN` (a rename elsewhere on the filesystem) and `EINTR`.
pub fn openat2(
    dir: RawFd,
    path: impl AsRef<[u8]>,
    flags: i32,
    mode: u32,
) -> Result<OwnedFd, Errno> {
    let c = CString::new(path.as_ref()).map_err(|_| Errno::EINVAL)?;
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: mode as u64,
        resolve: SAFE_RESOLVE,
    };
    loop {
        // SAFETY: `c` and `how` are valid for the duration of the call; the size matches.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir,
                c.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        if fd >= 0 {
            // SAFETY: the kernel returned a new fd that we now own.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
        }
        let e = Errno::last();
        if e != Errno::EAGAIN && e != Errno::EINTR {
            return Err(e);
        }
    }
}

/// Opens a host path the server alone controls (a workspace's root under the root-only
/// `<dir>/mnt/ws`) as a directory fd, not following a symlink in its last component.
pub fn open_root(path: &std::path::Path) -> Result<OwnedFd, Errno> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)?;
    // SAFETY: open of a path we built, with flags that create nothing.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fstat` of an fd.
pub fn fstat(fd: RawFd) -> Result<libc::stat, Errno> {
    // SAFETY: stat is plain old data; zeroed is valid; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd and out-pointer.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(Errno::last());
    }
    Ok(st)
}

/// `fstatat` of one name in `dir`, not following a symlink.
pub fn stat_at(dir: RawFd, name: &CStr) -> Result<libc::stat, Errno> {
    // SAFETY: stat is plain old data.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstatat relative to a dir fd we own, not following a symlink.
    match unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } {
        0 => Ok(st),
        _ => Err(Errno::last()),
    }
}

/// Removes one name of `dir` (an empty directory when `is_dir`); never follows a symlink.
pub fn unlink_at(dir: RawFd, name: &CStr, is_dir: bool) -> Result<(), Errno> {
    let flags = if is_dir { libc::AT_REMOVEDIR } else { 0 };
    // SAFETY: unlinkat relative to a dir fd we own; it never follows a symlink.
    match unsafe { libc::unlinkat(dir, name.as_ptr(), flags) } {
        0 => Ok(()),
        _ => Err(Errno::last()),
    }
}

/// `renameat2` of one name between two directory fds.
pub fn rename_at(
    from: RawFd,
    old: &CStr,
    into: RawFd,
    new: &CStr,
    flags: libc::c_uint,
) -> Result<(), Errno> {
    // SAFETY: renameat2 between dir fds we own; single-component names, never followed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            from,
            old.as_ptr(),
            into,
            new.as_ptr(),
            flags,
        )
    };
    match r {
        0 => Ok(()),
        _ => Err(Errno::last()),
    }
}

/// The target of the symlink `name` of `dir`, at most `max` bytes (longer: `ENAMETOOLONG`).
pub fn read_link_at(dir: RawFd, name: &CStr, max: usize) -> Result<Vec<u8>, Errno> {
    let mut buf = vec![0u8; max + 1];
    // SAFETY: readlinkat into a buffer we own, of the length given.
    let n = unsafe { libc::readlinkat(dir, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(Errno::last());
    }
    if n as usize > max {
        return Err(Errno::ENAMETOOLONG);
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// Makes the symlink `name` in `dir` pointing at `target` (never followed by us).
pub fn symlink_at(target: &CStr, dir: RawFd, name: &CStr) -> Result<(), Errno> {
    // SAFETY: symlinkat relative to a dir fd we own; both strings are NUL-terminated.
    match unsafe { libc::symlinkat(target.as_ptr(), dir, name.as_ptr()) } {
        0 => Ok(()),
        _ => Err(Errno::last()),
    }
}

/// Opens the directory `name` of `dir` for reading, through the safe resolution.
pub fn open_dir_at(dir: RawFd, name: &[u8]) -> Result<OwnedFd, Errno> {
    openat2(dir, name, libc::O_RDONLY | libc::O_DIRECTORY, 0)
}

/// Makes (if missing) and opens the directory `name` of `dir`; returns whether it was made.
/// It is made with mode 0700 and opened before anything else may use it; the caller sets the
/// final mode on the fd.
pub fn make_dir_at(dir: RawFd, name: &CStr) -> Result<(OwnedFd, bool), Errno> {
    // SAFETY: mkdirat relative to a dir fd we own.
    let made = unsafe { libc::mkdirat(dir, name.as_ptr(), 0o700) } == 0;
    if !made && Errno::last() != Errno::EEXIST {
        return Err(Errno::last());
    }
    Ok((open_dir_at(dir, name.to_bytes())?, made))
}

/// `fchmod` on an fd.
pub fn fchmod(fd: RawFd, mode: u32) -> Result<(), Errno> {
    // SAFETY: fchmod on an fd we own.
    match unsafe { libc::fchmod(fd, mode) } {
        0 => Ok(()),
        _ => Err(Errno::last()),
    }
}

/// Changes the owner of the name `name` of `dir` (of `dir` itself when `name` is empty),
/// never following a symlink.
pub fn chown_at(dir: RawFd, name: &CStr, uid: u32, gid: u32) -> Result<(), Errno> {
    let flags = if name.is_empty() {
        libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW
    } else {
        libc::AT_SYMLINK_NOFOLLOW
    };
    // SAFETY: fchownat relative to a dir fd we own, with a single component never followed.
    match unsafe { libc::fchownat(dir, name.as_ptr(), uid, gid, flags) } {
        0 => Ok(()),
        _ => Err(Errno::last()),
    }
}

/// The names in a directory (without `.` and `..`).
pub fn list_names(dir: &OwnedFd) -> Result<Vec<CString>, Errno> {
    let readable = open_dir_at(dir.as_raw_fd(), b".")?;
    let mut d = nix::dir::Dir::from_fd(readable)?;
    let mut out = Vec::new();
    for ent in d.iter() {
        let name = ent?.file_name().to_owned();
        if name.as_bytes() != b"." && name.as_bytes() != b".." {
            out.push(name);
        }
    }
    Ok(out)
}

/// Runs `f` with this thread's filesystem uid and gid set to `uid:gid`. For a non-zero uid
/// the kernel also drops the thread's filesystem capabilities (`CAP_CHOWN`, `CAP_DAC_OVERRIDE`,
/// `CAP_FOWNER`, ...) meanwhile, so what `f` does is checked as that user's: root's privileges
/// cannot be turned against the host through a name a sandbox changed. Things `f` creates
/// belong to `uid:gid`. The previous ids (and capabilities) are back when it returns.
pub fn as_fsuid<T>(uid: u32, gid: u32, f: impl FnOnce() -> T) -> T {
    // SAFETY: setfsuid/setfsgid change only the calling thread's filesystem ids; they are
    // restored below before the thread runs anything else.
    let (old_uid, old_gid) = unsafe {
        let g = libc::syscall(libc::SYS_setfsgid, gid);
        let u = libc::syscall(libc::SYS_setfsuid, uid);
        (u as u32, g as u32)
    };
    struct Restore(u32, u32);
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: as above, restoring the previous ids (also when `f` panics).
            unsafe {
                libc::syscall(libc::SYS_setfsuid, self.0);
                libc::syscall(libc::SYS_setfsgid, self.1);
            }
        }
    }
    let _restore = Restore(old_uid, old_gid);
    f()
}
