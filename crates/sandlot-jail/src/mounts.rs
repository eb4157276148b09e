//! A sandbox's own mounts on top of its zygote's read-only base root: `/workspace` (the disk
//! workspace the server hands over as a detached mount, or a size- and inode-capped tmpfs),
//! capped tmpfs for `/tmp` and `/dev/shm`, a devpts instance of its own on `/dev/pts`, and a
//! fresh `/proc` for its pid namespace with the kernel-information files masked as container
//! runtimes mask them.

use crate::config::{JailConfig, INSIDE_GID, INSIDE_UID};
use crate::error::{JailError, Step};
use nix::fcntl::OFlag;
use nix::mount::{mount, MsFlags};
use nix::sys::stat::Mode;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

const FLAGS: MsFlags = MsFlags::MS_NOSUID.union(MsFlags::MS_NODEV);

/// `move_mount(2)`: the source is the fd itself (a detached mount), not a path beneath it.
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
/// `mount_setattr(2)`'s attributes (`linux/mount.h`).
pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;

/// `struct mount_attr` of `mount_setattr(2)` (`MOUNT_ATTR_SIZE_VER0`).
#[repr(C)]
pub struct MountAttr {
    pub attr_set: u64,
    pub attr_clr: u64,
    /// `MS_PRIVATE`, `MS_SLAVE`, ...; 0 leaves the propagation as it is.
    pub propagation: u64,
    pub userns_fd: u64,
}

/// `struct open_how` of `openat2(2)`.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// Files of `/proc` that sandboxes see as empty: `/dev/null` is bound over each, read-only.
/// They describe the kernel (its configuration, symbols, timers, keyrings, log), which helps an
/// attacker pick an exploit and helps no workload. Files this kernel lacks are skipped.
pub const MASKED_FILES: &[&str] = &[
    "/proc/config.gz",
    "/proc/kcore",
    "/proc/keys",
    "/proc/key-users",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/latency_stats",
    "/proc/kallsyms",
    "/proc/kmsg",
];

/// Directories of `/proc` replaced by an empty read-only tmpfs (hardware details).
pub const MASKED_DIRS: &[&str] = &["/proc/acpi", "/proc/scsi", "/proc/asound"];

/// Parts of `/proc` bound read-only onto themselves: readable, never writable, whatever their
/// permissions say inside the sandbox's namespaces.
pub const READ_ONLY: &[&str] = &[
    "/proc/sys",
    "/proc/sysrq-trigger",
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
];

/// Mounts the writable mounts: `/workspace` (the disk workspace when the server passed one,
/// else a tmpfs; bound at `/home/user` too), `/tmp`, `/dev/shm` and `/dev/pts`. Called in the new mount namespace, before the pid
/// namespace's init exists.
pub fn mount_writable(
    cfg: &JailConfig,
    workspace: Option<OwnedFd>,
    volumes: Vec<OwnedFd>,
) -> Result<(), JailError> {
    match workspace {
        Some(tree) => move_workspace(tree)?,
        None => mount_workspace_tmpfs(cfg)?,
    }
    if volumes.len() != cfg.volumes.len() + cfg.host_mounts.len() {
        return Err(JailError::Protocol(format!(
            "{} mounts for {} volumes and {} host paths",
            volumes.len(),
            cfg.volumes.len(),
            cfg.host_mounts.len()
        )));
    }
    let mut trees = volumes.into_iter();
    // The config's list drives the zip: `Zip` asks its first iterator first, and a tree it
    // took after the volumes ran out would be lost to the host paths.
    for (target, tree) in cfg.volumes.iter().zip(trees.by_ref()) {
        attach_volume(tree, target)?;
    }
    attach_host_paths(trees.collect(), &cfg.host_mounts)?;
    // E2B's home is the same workspace, volumes included: code written for E2B works in
    // `/home/user` and `pwd` there says so (a symlink would resolve to `/workspace`). The bind
    // keeps the workspace's nosuid and nodev.
    mount(
        Some("/workspace"),
        "/home/user",
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .step("bind /workspace onto /home/user")?;
    let tmp = format!("mode=1777,size={},nr_inodes=65536", cfg.tmp_bytes);
    mount(
        Some("tmpfs"),
        "/tmp",
        Some("tmpfs"),
        FLAGS,
        Some(tmp.as_str()),
    )
    .step("mount /tmp")?;
    let shm = format!("mode=1777,size={},nr_inodes=4096", cfg.shm_bytes);
    mount(
        Some("tmpfs"),
        "/dev/shm",
        Some("tmpfs"),
        FLAGS,
        Some(shm.as_str()),
    )
    .step("mount /dev/shm")?;
    mount_devpts()
}

/// Most pseudo-terminals one sandbox's devpts instance holds at once (the E2B layer's PTY
/// sessions and whatever the sandbox's own code opens through `/dev/ptmx`).
pub const MAX_PTYS: u32 = 32;

/// Options of the sandbox's devpts: a new instance (the only kind a user namespace may mount;
/// said explicitly), so no host or other sandbox's terminal is visible in it; `/dev/pts/ptmx`
/// openable by the sandbox's user (`/dev/ptmx` is a symlink to it), each terminal owned by
/// whoever opened its master and readable and writable by that user only, at most
/// [`MAX_PTYS`] of them.
pub fn devpts_options() -> String {
    format!("newinstance,ptmxmode=0666,mode=0600,max={MAX_PTYS}")
}

/// Mounts the sandbox's own devpts instance on `/dev/pts` (nosuid, noexec: terminals are the
/// only devices in it). Called in the sandbox's user and mount namespaces.
fn mount_devpts() -> Result<(), JailError> {
    let opts = devpts_options();
    mount(
        Some("devpts"),
        "/dev/pts",
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some(opts.as_str()),
    )
    .step("mount /dev/pts")
}

fn mount_workspace_tmpfs(cfg: &JailConfig) -> Result<(), JailError> {
    let ws = format!(
        "mode=0755,uid={INSIDE_UID},gid={INSIDE_GID},size={},nr_inodes={}",
        cfg.workspace_bytes, cfg.workspace_inodes
    );
    mount(
        Some("tmpfs"),
        "/workspace",
        Some("tmpfs"),
        FLAGS,
        Some(ws.as_str()),
    )
    .step("mount /workspace")
}

/// Attaches the server's detached workspace mount (made with `open_tree(OPEN_TREE_CLONE)` in the
/// host's namespace) onto `/workspace` in this mount namespace, forces nosuid and nodev on it
/// whatever the server set, and closes the fd.
fn move_workspace(tree: OwnedFd) -> Result<(), JailError> {
    // SAFETY: move_mount(2) with an fd we own, an empty path (MOVE_MOUNT_F_EMPTY_PATH: the fd
    // is the source) and a NUL-terminated target; the kernel only reads the strings.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            c"/workspace".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if rc != 0 {
        return Err(JailError::Sys {
            step: "move the workspace onto /workspace",
            source: nix::Error::last(),
        });
    }
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // Setting flags only ever restricts the mount.
    mount_setattr(libc::AT_FDCWD, c"/workspace", 0, &attr).map_err(|source| JailError::Sys {
        step: "make /workspace nosuid and nodev",
        source,
    })?;
    drop(tree);
    Ok(())
}

const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;
const RESOLVE_NO_XDEV: u64 = 0x01;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_BENEATH: u64 = 0x08;

/// Attaches a volume's detached mount (made by the server, read-only already when it should
/// be) at `target.path` under `/workspace`: each directory on the way is made if missing and
/// opened beneath `/workspace` without following a symlink or crossing a mount, so a link the
/// sandbox planted in its workspace cannot send the mount elsewhere. nosuid and nodev (and
/// read-only when asked) are forced on the attached mount.
fn attach_volume(tree: OwnedFd, target: &crate::config::VolumeTarget) -> Result<(), JailError> {
    let parts: Vec<&str> = target.path.split('/').collect();
    if parts.is_empty()
        || parts
            .iter()
            .any(|p| p.is_empty() || *p == "." || *p == ".." || p.len() > 255)
    {
        return Err(JailError::Protocol(format!(
            "volume path {:?} is not a plain relative path",
            target.path
        )));
    }
    let sys = |step: &'static str| move |source| JailError::Sys { step, source };
    let mut dir = nix::fcntl::open(
        "/workspace",
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(sys("open /workspace for a volume"))?;
    for part in parts {
        let name = std::ffi::CString::new(part)
            .map_err(|_| JailError::Protocol("volume path holds NUL".into()))?;
        // SAFETY: mkdirat with a directory fd we own and a NUL-terminated name.
        let rc = unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o755) };
        if rc != 0 && nix::Error::last() != nix::Error::EEXIST {
            return Err(sys("make a volume's mount point")(nix::Error::last()));
        }
        let how = OpenHow {
            flags: (libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64,
            mode: 0,
            resolve: RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV,
        };
        // SAFETY: openat2(2) with a directory fd we own, a NUL-terminated name and an
        // `open_how` of the size we pass; returns a new fd or -1.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                name.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        if fd < 0 {
            return Err(sys("open a volume's mount point")(nix::Error::last()));
        }
        // SAFETY: a fresh fd we own.
        dir = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    }
    // SAFETY: move_mount(2) from a detached tree we own onto a directory fd we own; both paths
    // are empty (F_EMPTY_PATH and T_EMPTY_PATH: the fds are source and target).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            dir.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    if rc != 0 {
        return Err(sys("attach a volume")(nix::Error::last()));
    }
    restrict_mount(&tree, target.read_only).map_err(sys("restrict a volume's mount"))
}

/// `mount_setattr(2)`'s noexec.
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;

/// Attaches the trusted tier's read-only host paths (detached mounts the server made with
/// `open_tree(OPEN_TREE_CLONE)` without `AT_RECURSIVE`, so no submount of the host path comes
/// along, from an fd opened without following any symlink) at their paths under `/mnt`. `/mnt`
/// of the shared base root is read-only: a small tmpfs of the sandbox's own is mounted there
/// for the mount points, then made read-only itself. Each attached mount is forced read-only,
/// nosuid, nodev and noexec (the server set them already; setting only ever restricts, and the
/// flags are locked in this less privileged namespace: code in the sandbox cannot clear them).
fn attach_host_paths(
    trees: Vec<OwnedFd>,
    targets: &[crate::config::HostMountTarget],
) -> Result<(), JailError> {
    if targets.is_empty() {
        return Ok(());
    }
    let sys = |step: &'static str| move |source| JailError::Sys { step, source };
    mount(
        Some("tmpfs"),
        "/mnt",
        Some("tmpfs"),
        FLAGS | MsFlags::MS_NOEXEC,
        Some("mode=0755,size=64k,nr_inodes=256"),
    )
    .step("mount /mnt")?;
    for (tree, target) in trees.into_iter().zip(targets) {
        let rel = target.path.strip_prefix("/mnt/").unwrap_or("");
        let parts: Vec<&str> = rel.split('/').collect();
        if rel.is_empty()
            || parts
                .iter()
                .any(|p| p.is_empty() || *p == "." || *p == ".." || p.len() > 255)
        {
            return Err(JailError::Protocol(format!(
                "host path target {:?} is not /mnt/<plain components>",
                target.path
            )));
        }
        // Only this sandbox's fresh tmpfs is under /mnt: no link can be there to follow.
        let mut at = std::path::PathBuf::from("/mnt");
        for (i, part) in parts.iter().enumerate() {
            at.push(part);
            let last = i + 1 == parts.len();
            if last && target.file {
                std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&at)
                    .map_err(|e| sys("make a host file's mount point")(io_errno(&e)))?;
            } else {
                match std::fs::create_dir(&at) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(sys("make a host path's mount point")(io_errno(&e))),
                }
            }
        }
        let dest = std::ffi::CString::new(at.as_os_str().as_encoded_bytes())
            .map_err(|_| JailError::Protocol("host path target holds NUL".into()))?;
        // SAFETY: move_mount(2) from a detached tree we own (F_EMPTY_PATH) onto a
        // NUL-terminated absolute path; the kernel only reads the strings.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_move_mount,
                tree.as_raw_fd(),
                c"".as_ptr(),
                libc::AT_FDCWD,
                dest.as_ptr(),
                MOVE_MOUNT_F_EMPTY_PATH,
            )
        };
        if rc != 0 {
            return Err(sys("attach a host path")(nix::Error::last()));
        }
        let attr = MountAttr {
            attr_set: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        };
        mount_setattr(tree.as_raw_fd(), c"", libc::AT_EMPTY_PATH, &attr)
            .map_err(sys("make a host path read-only, nosuid, nodev and noexec"))?;
    }
    mount(
        None::<&str>,
        "/mnt",
        None::<&str>,
        MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | FLAGS | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .step("make /mnt read-only")
}

fn io_errno(e: &std::io::Error) -> nix::Error {
    nix::Error::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
}

/// Forces nosuid and nodev (and read-only when asked) on the mount `tree` is (a detached or an
/// attached tree's fd). Setting flags only ever restricts a mount.
pub fn restrict_mount(tree: &OwnedFd, read_only: bool) -> Result<(), nix::Error> {
    let mut set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    if read_only {
        set |= MOUNT_ATTR_RDONLY;
    }
    let attr = MountAttr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    mount_setattr(tree.as_raw_fd(), c"", libc::AT_EMPTY_PATH, &attr)
}

/// `mount_setattr(2)`: applies `attr` to the mount at `path` relative to `dirfd` (the fd
/// itself with `AT_EMPTY_PATH` and an empty path). The one declaration of it in sandlot:
/// `sandlot-workspace` calls this one too (rustix has no `mount_setattr`, nix neither). No
/// allocation: it runs in a forked child (`restrict_mount`).
pub fn mount_setattr(
    dirfd: RawFd,
    path: &std::ffi::CStr,
    flags: libc::c_int,
    attr: &MountAttr,
) -> Result<(), nix::Error> {
    // SAFETY: mount_setattr(2) with a NUL-terminated path and a `struct mount_attr` of the
    // size we pass; the kernel only reads both.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            path.as_ptr(),
            flags,
            attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc != 0 {
        return Err(nix::Error::last());
    }
    Ok(())
}

/// Mounts a procfs for the current pid namespace over `/proc`. Must run in the namespace's
/// init (pid 1).
pub fn mount_proc() -> Result<(), JailError> {
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        FLAGS | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .step("mount /proc")
}

/// Masks the kernel-information parts of the fresh `/proc` ([`MASKED_FILES`], [`MASKED_DIRS`],
/// [`READ_ONLY`]). Runs in the init right after [`mount_proc`], before the driver exists.
pub fn mask_proc() -> Result<(), JailError> {
    for path in MASKED_FILES {
        if exists(path) {
            mount(
                Some("/dev/null"),
                *path,
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            )
            .step("mask a /proc file")?;
            // The bind keeps /dev/null's own locked nosuid and noexec; nodev would make it
            // unopenable, and it is the one device there.
            remount_read_only(path, MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC)?;
        }
    }
    for path in MASKED_DIRS {
        if exists(path) {
            mount(
                Some("tmpfs"),
                *path,
                Some("tmpfs"),
                FLAGS | MsFlags::MS_NOEXEC | MsFlags::MS_RDONLY,
                Some("mode=0555,size=4k,nr_inodes=2"),
            )
            .step("mask a /proc directory")?;
        }
    }
    for path in READ_ONLY {
        if exists(path) {
            mount(
                Some(*path),
                *path,
                None::<&str>,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None::<&str>,
            )
            .step("bind a /proc path onto itself")?;
            remount_read_only(path, FLAGS | MsFlags::MS_NOEXEC)?;
        }
    }
    Ok(())
}

/// Makes the bind mount at `path` read-only, keeping `keep` (flags the mount already has,
/// which a remount must repeat).
fn remount_read_only(path: &str, keep: MsFlags) -> Result<(), JailError> {
    mount(
        None::<&str>,
        path,
        None::<&str>,
        MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | keep,
        None::<&str>,
    )
    .step("remount a /proc mask read-only")
}

/// Whether `path` exists (without following a final symlink). A kernel built without a file
/// simply has nothing to mask there.
fn exists(path: &str) -> bool {
    std::fs::symlink_metadata(Path::new(path)).is_ok()
}
