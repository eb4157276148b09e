//! The trusted tier's read-only host paths (issue 23): opened without following any symlink,
//! cloned as detached mounts (no submounts), made read-only, nosuid, nodev and noexec here,
//! and attached by the sandbox's child under `/mnt` (`sandlot_jail::mounts`).
//!
//! Which host paths a sandbox mounts is the service's to decide (the policy's
//! `mount_host_path` gate, the trusted tier only); the runtime mounts what the sandbox's record
//! lists, at every boot of it: creation, restart in place, resume, and its forks. The list
//! reaches the boot as a task-local ([`scope`]) rather than as one more argument through every
//! boot path (create, fork, restore, restart), which the volumes' list already crosses.

use crate::error::RuntimeError;
use sandlot_jail::config::HostMountTarget;
use sandlot_jail::mounts::{
    mount_setattr, MountAttr, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID,
    MOUNT_ATTR_RDONLY,
};
use sandlot_types::HostMount;
use std::ffi::CString;
use std::future::Future;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

tokio::task_local! {
    static HOST_MOUNTS: Vec<HostMount>;
}

/// Runs `f` (a boot) with `mounts` as the host paths its sandbox mounts.
pub(crate) async fn scope<F: Future>(mounts: Vec<HostMount>, f: F) -> F::Output {
    HOST_MOUNTS.scope(mounts, f).await
}

/// The host paths the sandbox being booted mounts (none outside [`scope`]).
pub(crate) fn current() -> Vec<HostMount> {
    HOST_MOUNTS.try_with(Clone::clone).unwrap_or_default()
}

const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const OPEN_TREE_CLONE: libc::c_uint = 1;
const OPEN_TREE_CLOEXEC: libc::c_uint = libc::O_CLOEXEC as libc::c_uint;

/// `struct open_how` of `openat2(2)`.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// Opens absolute `host` as an `O_PATH` fd without following a symlink anywhere on it
/// (`RESOLVE_NO_SYMLINKS`: a symlink component, even a final one, is `ELOOP`), and says
/// whether it is a regular file (else a directory; anything else is `EINVAL`). What is
/// mounted is what this fd is: a symlink swapped in after this open cannot redirect it.
pub fn open_host_path(host: &str) -> std::io::Result<(OwnedFd, bool)> {
    let path = CString::new(host).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: openat2(2) with a NUL-terminated path and an `open_how` of the size we pass;
    // it returns a new fd or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd the kernel just returned; nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    let st = nix::sys::stat::fstat(&fd).map_err(std::io::Error::from)?;
    let kind = st.st_mode & libc::S_IFMT;
    match kind {
        libc::S_IFREG => Ok((fd, true)),
        libc::S_IFDIR => Ok((fd, false)),
        _ => Err(std::io::Error::from_raw_os_error(libc::EINVAL)),
    }
}

/// Why [`open_host_path`] refused, in words for the caller.
pub fn why_not(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ELOOP) => "it is, or passes through, a symlink".to_owned(),
        Some(libc::ENOENT) => "it does not exist".to_owned(),
        Some(libc::EINVAL) => "it is neither a directory nor a file".to_owned(),
        _ => e.to_string(),
    }
}

/// A detached, read-only, nosuid, nodev, noexec clone of the mount at `fd` (without its
/// submounts: no `AT_RECURSIVE`), private so host mount events never reach the sandbox.
fn detached_read_only(fd: &OwnedFd) -> std::io::Result<OwnedFd> {
    // SAFETY: open_tree(2) on an fd we own with an empty path (AT_EMPTY_PATH: the fd itself);
    // it returns a new fd or -1.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            fd.as_raw_fd(),
            c"".as_ptr(),
            OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | libc::AT_EMPTY_PATH as libc::c_uint,
        )
    };
    if tree < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd the kernel just returned; nothing else owns it.
    let tree = unsafe { OwnedFd::from_raw_fd(tree as RawFd) };
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
        attr_clr: 0,
        propagation: libc::MS_PRIVATE,
        userns_fd: 0,
    };
    mount_setattr(tree.as_raw_fd(), c"", libc::AT_EMPTY_PATH, &attr)
        .map_err(std::io::Error::from)?;
    Ok(tree)
}

/// The detached mounts of `mounts`, in order, with where each goes.
pub(crate) fn trees(
    mounts: &[HostMount],
) -> Result<(Vec<HostMountTarget>, Vec<OwnedFd>), RuntimeError> {
    let mut targets = Vec::with_capacity(mounts.len());
    let mut trees = Vec::with_capacity(mounts.len());
    for m in mounts {
        let err = |source| RuntimeError::HostMount {
            host: m.host.clone(),
            source,
        };
        let (fd, file) = open_host_path(&m.host).map_err(err)?;
        trees.push(detached_read_only(&fd).map_err(err)?);
        targets.push(HostMountTarget {
            path: m.path.clone(),
            file,
        });
    }
    Ok((targets, trees))
}
