//! The environment-build jail: every child process of a Python environment build (venv
//! creation, pip, compileall, the verifier's imports) runs here, because a package's
//! `__init__.py`, `.pth` file or byte-compilation is code its author wrote. `sandlot
//! __build-jail <config json>` is re-executed as root by the builder (`sandlot-env`) and reads
//! the whole containment order top to bottom in [`launch`]:
//!
//! ```text
//! launcher (root)   joins the build's cgroup; unshare(mnt net ipc uts pid); lo up;
//!                   [handshake: "U" on fd 3 → the builder plants the egress proxy's
//!                   listener in this network namespace → "G"]; fork P1; wait for it and
//!                   exit with its status
//! P1 (pid 1)        parent death signal; hostname; the root: a tmpfs with /usr, a few files
//!                   of /etc (CA bundle, pip.conf), a minimal /dev, a private /tmp and
//!                   /dev/shm, a fresh /proc (masked), the configured read-only paths and the
//!                   target directory read-write, pivoted onto; every other fd closed;
//!                   bounding and ambient capabilities dropped; setgroups, setresgid,
//!                   setresuid to the throw-away build uid; its own user namespace mapping only
//!                   that uid; capability sets cleared; no_new_privs; rlimits; Landlock (write
//!                   only to the target, /tmp, /dev/shm); chdir, umask 022; the seccomp
//!                   allowlist last; execve with the configured environment only
//! ```
//!
//! The program is pid 1 of its pid namespace: when it exits, every process it left behind is
//! killed by the kernel, and the builder kills the build's cgroup after every step anyway.
//! The data dir, the server's sockets and every other host path are simply not in the root.

use crate::config::RlimitConfig;
use crate::error::{JailError, PathStep, Step};
use crate::{caps, mounts, net, rlimits, rootfs};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{
    chdir, fork, pivot_root, setgroups, sethostname, setresgid, setresuid, ForkResult, Gid, Uid,
};
use serde::{Deserialize, Serialize};
use std::fs;
use std::os::fd::RawFd;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

/// The fd of the handshake with the builder, when [`BuildJailConfig::handshake`] is set.
pub const HANDSHAKE_FD: RawFd = 3;
/// Byte the launcher sends once the network namespace exists.
pub const UNSHARED: u8 = b'U';
/// Byte the builder answers once the namespace's proxy listener exists.
pub const GO: u8 = b'G';

/// The hostname inside.
const HOSTNAME: &str = "build";

/// Host `/etc` entries a build needs besides [`rootfs::ETC_ENTRIES`]: the operator's pip
/// configuration (index settings, the CA bundle pip must trust).
pub const PIP_ETC_ENTRIES: &[&str] = &["pip.conf", "xdg/pip"];

const NOSUID_NODEV: MsFlags = MsFlags::MS_NOSUID.union(MsFlags::MS_NODEV);

/// One jailed step of a build.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildJailConfig {
    /// An empty host directory the root's tmpfs is mounted on (in the jail's private mount
    /// namespace; the host never sees the mount).
    pub staging_dir: PathBuf,
    /// The throw-away host uid and gid the step runs as.
    pub uid: u32,
    pub gid: u32,
    /// `cgroup.procs` files of the build's cgroup, joined before anything else.
    pub cgroup_procs: Vec<PathBuf>,
    /// Host paths shown read-only at their own path (the base interpreter's prefix when it is
    /// not under `/usr`, a local find-links directory, the environment when it is only read).
    pub read_only: Vec<PathBuf>,
    /// Host directories shown read-write at their own path (the environment being built).
    pub read_write: Vec<PathBuf>,
    /// Wait on [`HANDSHAKE_FD`] for the builder to plant a listener in the network namespace.
    pub handshake: bool,
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// The complete environment of the program.
    pub env: Vec<(String, String)>,
    /// Its working directory (inside the root).
    pub cwd: PathBuf,
    /// Size caps of the private `/tmp` and `/dev/shm`.
    pub tmp_bytes: u64,
    pub rlimits: RlimitConfig,
}

/// Runs one jailed step: confines a child as described by `cfg`, execs its program, waits for
/// it, and returns its exit status (128 + the signal when it was killed). Runs as root in a
/// fresh single-threaded process (`sandlot __build-jail`).
pub fn launch(cfg: &BuildJailConfig) -> Result<i32, JailError> {
    for procs in &cfg.cgroup_procs {
        fs::write(procs, std::process::id().to_string()).at("join build cgroup", procs)?;
    }
    unshare(
        CloneFlags::CLONE_NEWNS
            | CloneFlags::CLONE_NEWNET
            | CloneFlags::CLONE_NEWIPC
            | CloneFlags::CLONE_NEWUTS
            | CloneFlags::CLONE_NEWPID,
    )
    .step("unshare namespaces")?;
    net::loopback_up()?;
    if cfg.handshake {
        handshake()?;
    }
    // SAFETY: the launcher is single-threaded (a fresh process that spawned no thread).
    match unsafe { fork() }.step("fork the build's init")? {
        ForkResult::Child => {
            let err = match confine_and_exec(cfg) {
                Ok(never) => match never {},
                Err(e) => e,
            };
            eprintln!("sandlot build jail: {err}");
            crate::exit::exit_now(crate::exit::JAIL_FAILED)
        }
        ForkResult::Parent { child } => loop {
            match waitpid(child, None) {
                Ok(WaitStatus::Exited(_, code)) => return Ok(code),
                Ok(WaitStatus::Signaled(_, sig, _)) => return Ok(128 + sig as i32),
                Ok(_) => continue,
                Err(nix::Error::EINTR) => continue,
                Err(e) => return Err(e).step("wait for the build's init"),
            }
        },
    }
}

/// P1: the containment sequence, then the program.
fn confine_and_exec(cfg: &BuildJailConfig) -> Result<std::convert::Infallible, JailError> {
    // SAFETY: integer-only prctl. The launcher dies only when the builder does.
    nix::errno::Errno::result(unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0)
    })
    .step("set parent death signal")?;
    sethostname(HOSTNAME).step("sethostname")?;
    enter_root(cfg)?;
    close_inherited_fds()?;
    // Emptying the bounding set needs CAP_SETPCAP, which the uid change below takes away.
    caps::drop_bounding_and_ambient()?;
    setgroups(&[]).step("setgroups")?;
    let (g, u) = (Gid::from_raw(cfg.gid), Uid::from_raw(cfg.uid));
    setresgid(g, g, g).step("setresgid")?;
    // Leaving uid 0 clears the permitted and effective sets (no SECBIT_KEEP_CAPS).
    setresuid(u, u, u).step("setresuid")?;
    // The uid change made the process non-dumpable, which leaves /proc/self owned by root:
    // its own uid_map would be unwritable.
    // SAFETY: integer-only prctl.
    nix::errno::Errno::result(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) })
        .step("set dumpable")?;
    own_user_namespace(cfg.uid, cfg.gid)?;
    caps::clear_sets()?;
    caps::set_no_new_privs()?;
    rlimits::apply(&cfg.rlimits)?;
    landlock(cfg)?;
    chdir(&cfg.cwd).step("chdir")?;
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    crate::seccomp::install()?;
    crate::program::exec(&cfg.argv, &cfg.env, "execve")
}

/// Tells the builder the network namespace exists and waits until it has planted its proxy
/// listener there; then closes the handshake fd.
fn handshake() -> Result<(), JailError> {
    // SAFETY: fd 3 is the handshake stream for the launcher's whole life.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(HANDSHAKE_FD) };
    nix::unistd::write(fd, &[UNSHARED]).step("handshake write")?;
    let mut b = [0u8; 1];
    let n = nix::unistd::read(fd, &mut b).step("handshake read")?;
    if n != 1 || b[0] != GO {
        return Err(JailError::Protocol(
            "the builder did not answer the handshake".into(),
        ));
    }
    // SAFETY: closing the handshake fd, which nothing else uses.
    unsafe { libc::close(HANDSHAKE_FD) };
    Ok(())
}

/// Builds the root on `cfg.staging_dir` and pivots onto it, in the new mount namespace.
fn enter_root(cfg: &BuildJailConfig) -> Result<(), JailError> {
    let root = cfg.staging_dir.as_path();
    rootfs::mount_root_tmpfs(root)?;
    for dir in ["usr", "etc", "dev", "proc", "tmp"] {
        fs::create_dir_all(root.join(dir)).at("mkdir", root.join(dir))?;
    }
    rootfs::bind_usr(root)?;
    populate_etc(&root.join("etc"), cfg.uid, cfg.gid)?;
    rootfs::populate_dev(&root.join("dev"))?;
    let tmp_opts = format!("mode=1777,size={}", cfg.tmp_bytes);
    for dir in ["tmp", "dev/shm"] {
        mount(
            Some("tmpfs"),
            &root.join(dir),
            Some("tmpfs"),
            NOSUID_NODEV,
            Some(tmp_opts.as_str()),
        )
        .step("mount a private tmpfs")?;
    }
    // After the tmpfs: a path under the host's /tmp is shown inside the private one.
    for path in &cfg.read_only {
        bind_at_own_path(root, path, false)?;
    }
    for path in &cfg.read_write {
        bind_at_own_path(root, path, true)?;
    }

    chdir(root).step("chdir new root")?;
    pivot_root(".", ".").step("pivot_root")?;
    umount2(".", MntFlags::MNT_DETACH).step("detach old root")?;
    chdir("/").step("chdir /")?;
    mounts::mount_proc()?;
    mounts::mask_proc()?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | NOSUID_NODEV,
        None::<&str>,
    )
    .step("remount root read-only")?;
    Ok(())
}

/// Shows the host path `path` at the same path inside the root at `root`: read-only, or
/// read-write (still nosuid, nodev). A file is bound onto an empty file.
fn bind_at_own_path(root: &Path, path: &Path, writable: bool) -> Result<(), JailError> {
    let rel = path.strip_prefix("/").unwrap_or(path);
    let target = root.join(rel);
    let meta = fs::metadata(path).at("stat bind source", path)?;
    if meta.is_dir() {
        fs::create_dir_all(&target).at("mkdir bind target", &target)?;
    } else {
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).at("mkdir bind target", parent)?;
        }
        fs::write(&target, b"").at("create bind target", &target)?;
    }
    if !writable {
        return rootfs::bind_ro(path, &target);
    }
    mount(
        Some(path),
        &target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .step("bind mount")?;
    mount(
        None::<&str>,
        &target,
        None::<&str>,
        MsFlags::MS_REMOUNT | MsFlags::MS_BIND | NOSUID_NODEV,
        None::<&str>,
    )
    .step("remount bind nosuid")
}

/// `/etc`: the entries code commonly needs ([`rootfs::ETC_ENTRIES`]: the CA bundle, the
/// resolver's configuration files, ...) and the operator's pip configuration, read-only; a
/// `passwd` and `group` naming the build uid only.
fn populate_etc(etc: &Path, uid: u32, gid: u32) -> Result<(), JailError> {
    for name in rootfs::ETC_ENTRIES.iter().chain(PIP_ETC_ENTRIES) {
        let host = Path::new("/etc").join(name);
        let Ok(meta) = fs::symlink_metadata(&host) else {
            continue;
        };
        let target = etc.join(name);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).at("mkdir", parent)?;
        }
        if meta.file_type().is_symlink() {
            let link = fs::read_link(&host).at("readlink", &host)?;
            symlink(&link, &target).at("symlink", &target)?;
        } else if meta.is_dir() {
            fs::create_dir_all(&target).at("mkdir", &target)?;
            rootfs::bind_ro(&host, &target)?;
        } else {
            fs::write(&target, b"").at("create", &target)?;
            rootfs::bind_ro(&host, &target)?;
        }
    }
    let files = [
        (
            "passwd",
            format!("build:x:{uid}:{gid}:environment build:/tmp:/usr/sbin/nologin\n"),
        ),
        ("group", format!("build:x:{gid}:\n")),
        ("hostname", format!("{HOSTNAME}\n")),
        ("hosts", "127.0.0.1 localhost build\n::1 localhost\n".into()),
        // No resolver: the proxy resolves names, outside.
        ("resolv.conf", String::new()),
    ];
    for (name, content) in files {
        fs::write(etc.join(name), content).at("write", etc.join(name))?;
    }
    Ok(())
}

/// Closes every fd but stdin, stdout and stderr.
fn close_inherited_fds() -> Result<(), JailError> {
    // SAFETY: close_range closes every fd from 3 up; the step needs none of them.
    if unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) } != 0 {
        return Err(JailError::Sys {
            step: "close_range",
            source: nix::Error::last(),
        });
    }
    Ok(())
}

/// Enters a user namespace of its own that maps only the build uid and gid to themselves: the
/// namespaces it lives in (mount, network, ...) belong to the host's user namespace, so the
/// capabilities it holds in its own are over nothing, and it can never map another id.
fn own_user_namespace(uid: u32, gid: u32) -> Result<(), JailError> {
    unshare(CloneFlags::CLONE_NEWUSER).step("unshare user namespace")?;
    fs::write("/proc/self/setgroups", "deny").at("write", "/proc/self/setgroups")?;
    fs::write("/proc/self/uid_map", format!("{uid} {uid} 1\n"))
        .at("write", "/proc/self/uid_map")?;
    fs::write("/proc/self/gid_map", format!("{gid} {gid} 1\n"))
        .at("write", "/proc/self/gid_map")?;
    Ok(())
}

/// Landlock: write only to the directories the step may write (the target, `/tmp`,
/// `/dev/shm`) and the harmless devices; read and execute the rest of the root.
fn landlock(cfg: &BuildJailConfig) -> Result<(), JailError> {
    let mut rw: Vec<&Path> = cfg.read_write.iter().map(PathBuf::as_path).collect();
    rw.extend(
        ["/tmp", "/dev/shm", "/dev/null", "/dev/zero", "/dev/full"]
            .iter()
            .map(Path::new),
    );
    crate::landlock::restrict(&rw, &[Path::new("/")])?;
    Ok(())
}

/// Entry point of `sandlot __build-jail`: reads the step's [`BuildJailConfig`] as JSON from
/// stdin (not argv, which every host process can read: an index URL may carry a token), runs
/// it, and returns the exit status to leave with.
pub fn main() -> u8 {
    let mut json = String::new();
    let cfg = match std::io::Read::read_to_string(&mut std::io::stdin(), &mut json)
        .map_err(|e| JailError::Protocol(format!("reading the config: {e}")))
        .and_then(|_| serde_json::from_str::<BuildJailConfig>(&json).map_err(JailError::from))
    {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("sandlot build jail: {e}");
            return crate::exit::JAIL_FAILED;
        }
    };
    match launch(&cfg) {
        Ok(status) => u8::try_from(status).unwrap_or(u8::MAX),
        Err(e) => {
            eprintln!("sandlot build jail: {} failed: {e}", e.step());
            crate::exit::JAIL_FAILED
        }
    }
}
