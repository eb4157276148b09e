//! The containment sequence of one sandbox, run in the child the zygote forks for it. This is
//! the one function to read to know the order of the layers; each step lives in its own module.
//!
//! ```text
//! P0 (forked zygote child)    fds in place (the disk workspace's detached mount at fd 4),
//!                             setsid, unshare(user mnt net ipc uts pid)
//!                             ─ "U" → server writes uid/gid maps, joins the cgroup ─ "G" ←
//!                             setresuid(1000), unshare(cgroup), /workspace (the disk workspace
//!                             moved in, or a tmpfs), tmpfs /tmp and /dev/shm, a new devpts
//!                             instance on /dev/pts, hostname, lo up
//!                             fork P1, report its pid, exit
//! P1 (pid 1 of the sandbox)   mount /proc, mask its kernel-information files, fork P2;
//!                             stdout/stderr to /dev/null, rlimits, capabilities dropped,
//!                             seccomp → tells P2 it is confined; then reaps orphans until P2
//!                             exits or the server's end of the control stream closes (its
//!                             lifeline), and leaves, which ends the pid namespace
//! P2 (the driver)             parent death signal, control stream close-on-exec; Landlock,
//!                             rlimits, chdir, umask, capabilities dropped, no_new_privs,
//!                             seccomp allowlist last; waits until P1 is confined → return to
//!                             Python
//! ```
//!
//! Every step's return value is checked; a failed step is reported as a `jail_error` frame
//! naming it, and the process exits with a status of [`crate::exit`].

use crate::config::{JailConfig, INSIDE_GID, INSIDE_UID};
use crate::error::{JailError, Step};
use crate::{exit, frame, mounts, net, rlimits, rootfs};
use nix::errno::Errno;
use nix::sched::{unshare, CloneFlags};
use nix::sys::signal::{signal, SigHandler, Signal};
use nix::unistd::{fork, sethostname, setresgid, setresuid, setsid, ForkResult, Gid, Pid, Uid};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;

/// The seccomp program, built once in the zygote (`sandlot_prepare`) and inherited by every
/// forked child, so children only install it.
pub static SECCOMP_PROGRAM: OnceLock<seccompiler::BpfProgram> = OnceLock::new();

fn install_seccomp() -> Result<(), JailError> {
    match SECCOMP_PROGRAM.get() {
        Some(p) => crate::seccomp::install_program(p)?,
        None => crate::seccomp::install()?,
    }
    Ok(())
}

/// The namespaces P0 makes for its sandbox in its first `unshare`. The server's unshare
/// supervisor lets a zygote's child through with exactly this, then [`CGROUP_NAMESPACE`].
pub const SANDBOX_NAMESPACES: CloneFlags = CloneFlags::CLONE_NEWUSER
    .union(CloneFlags::CLONE_NEWNS)
    .union(CloneFlags::CLONE_NEWNET)
    .union(CloneFlags::CLONE_NEWIPC)
    .union(CloneFlags::CLONE_NEWUTS)
    .union(CloneFlags::CLONE_NEWPID);

/// P0's second `unshare`, once it runs as the sandbox's uid.
pub const CGROUP_NAMESPACE: CloneFlags = CloneFlags::CLONE_NEWCGROUP;

/// The control stream's fd in the sandbox.
pub const CTRL_FD: RawFd = 3;

/// Where P0 keeps the disk workspace's detached mount from [`setup_fds`] until it moves it onto
/// `/workspace`; closed before anything else runs.
pub const WORKSPACE_FD: RawFd = 4;

/// Byte P0 sends once its namespaces exist; the server answers [`GO`] after writing the id maps
/// and moving P0 into the sandbox's cgroup.
pub const UNSHARED: u8 = b'U';
pub const GO: u8 = b'G';

/// Byte P1 sends the driver once its own seccomp filter is installed.
const INIT_CONFINED: u8 = b'C';

/// Which process of the sandbox returned from [`enter`].
pub enum Role {
    /// The driver: fully confined, continue running the sandbox's program.
    Driver,
}

/// Runs the containment sequence. Returns only in the driver (P2); P0 and P1 never return.
///
/// `workspace` is the sandbox's disk workspace, a detached mount the server made with
/// `open_tree(OPEN_TREE_CLONE)`, or a negative number for a tmpfs workspace.
///
/// `volumes` are the detached mounts of the named volumes in `cfg.volumes`, in that order.
pub fn enter(
    cfg: &JailConfig,
    ctrl: RawFd,
    stdout: RawFd,
    stderr: RawFd,
    workspace: RawFd,
    volumes: &[RawFd],
) -> Result<Role, JailError> {
    let (workspace, volumes) = setup_fds(ctrl, stdout, stderr, workspace, volumes)?;
    // The zygote ignores SIGCHLD to auto-reap; sandboxes need the default for waitpid.
    // SAFETY: installing SIG_DFL runs no handler code.
    unsafe { signal(Signal::SIGCHLD, SigHandler::SigDfl) }.step("reset SIGCHLD")?;
    setsid().step("setsid")?;
    unshare(SANDBOX_NAMESPACES).step("unshare namespaces")?;
    handshake()?;
    let (g, u) = (Gid::from_raw(INSIDE_GID), Uid::from_raw(INSIDE_UID));
    setresgid(g, g, g).step("setresgid")?;
    // The uid is 1000 already (mapped): no uid change, so P0 keeps its capabilities in its own
    // user namespace for the mounts below.
    setresuid(u, u, u).step("setresuid")?;
    unshare(CGROUP_NAMESPACE).step("unshare cgroup namespace")?;
    mounts::mount_writable(cfg, workspace, volumes)?;
    sethostname(&cfg.hostname).step("sethostname")?;
    net::loopback_up()?;

    let (ready_r, ready_w) = nix::unistd::pipe().step("pipe")?;
    // SAFETY: single-threaded here (the zygote forks from a single thread).
    match unsafe { fork() }.step("fork init")? {
        ForkResult::Parent { child } => {
            // P0: report the init's host pid, then let it go on and leave.
            let msg = format!("{{\"type\":\"init\",\"pid\":{child}}}");
            let res = write_frame(CTRL_FD, msg.as_bytes());
            drop(ready_w);
            drop(ready_r);
            exit::exit_now(if res.is_ok() { 0 } else { exit::JAIL_FAILED })
        }
        ForkResult::Child => {
            drop(ready_w);
            await_init_reported(&ready_r)?;
            drop(ready_r);
        }
    }
    // P1: pid 1 of the new pid namespace.
    mounts::mount_proc()?;
    mounts::mask_proc()?;
    let (confined_r, confined_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).step("pipe")?;
    // SAFETY: still single-threaded.
    match unsafe { fork() }.step("fork driver")? {
        ForkResult::Parent { child } => {
            drop(confined_r);
            init_main(cfg, child, confined_w)
        }
        ForkResult::Child => drop(confined_w),
    }
    // P2: the driver.
    // SAFETY: integer-only prctl.
    Errno::result(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) })
        .step("set parent death signal")?;
    // The control stream must not leak into the processes user code starts.
    // SAFETY: integer-only fcntl on the control stream's fd.
    Errno::result(unsafe { libc::fcntl(CTRL_FD, libc::F_SETFD, libc::FD_CLOEXEC) })
        .step("control stream close-on-exec")?;
    driver_confine(cfg)?;
    // The init confines itself while the driver does: no user code runs before both are.
    await_init_confined(&confined_r)?;
    drop(confined_r);
    Ok(Role::Driver)
}

/// P1 waits for P0 to have reported the init's pid: P0 closes its end of the pipe, never
/// writing, so the init frame is the first the server reads from the sandbox.
fn await_init_reported(ready: &OwnedFd) -> Result<(), JailError> {
    let mut b = [0u8; 1];
    loop {
        match nix::unistd::read(ready, &mut b) {
            Ok(0) => return Ok(()),
            Ok(_) => {
                return Err(JailError::Protocol(
                    "unexpected byte on the init's ready pipe".into(),
                ))
            }
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e).step("wait for init report"),
        }
    }
}

/// The driver waits for [`INIT_CONFINED`] from P1. End of file means the init failed (it
/// reported why and is taking the pid namespace down).
fn await_init_confined(confined: &OwnedFd) -> Result<(), JailError> {
    let mut b = [0u8; 1];
    loop {
        match nix::unistd::read(confined, &mut b) {
            Ok(1) if b[0] == INIT_CONFINED => return Ok(()),
            Ok(_) => {
                return Err(JailError::Protocol(
                    "the init did not confine itself".into(),
                ))
            }
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e).step("wait for the init's confinement"),
        }
    }
}

/// Moves the inherited fds to 1, 2, 3, (the workspace mount, when there is one)
/// [`WORKSPACE_FD`] and the volumes' mounts right after it, opens /dev/null as 0, and closes
/// every other fd. Returns the workspace mount and the volumes' mounts.
fn setup_fds(
    ctrl: RawFd,
    stdout: RawFd,
    stderr: RawFd,
    workspace: RawFd,
    volumes: &[RawFd],
) -> Result<(Option<OwnedFd>, Vec<OwnedFd>), JailError> {
    // `volumes` holds the named volumes' mounts, then the host paths' (see `mount_writable`).
    let most = crate::config::MAX_VOLUMES + crate::config::MAX_HOST_MOUNTS;
    if volumes.len() > most || (workspace < 0 && !volumes.is_empty()) {
        return Err(JailError::Protocol(format!(
            "volumes and host paths need a disk workspace and are at most {most}"
        )));
    }
    // Lift them all above 4 first so that moving one never clobbers another.
    let lift = |fd: RawFd| -> Result<RawFd, JailError> {
        // SAFETY: F_DUPFD_CLOEXEC on an fd we were handed; returns a new fd or -1.
        let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10) };
        if new < 0 {
            Err(JailError::Sys {
                step: "dup fd",
                source: nix::Error::last(),
            })
        } else {
            Ok(new)
        }
    };
    let (c, o, e) = (lift(ctrl)?, lift(stdout)?, lift(stderr)?);
    let w = if workspace >= 0 {
        Some(lift(workspace)?)
    } else {
        None
    };
    let lifted_volumes = volumes
        .iter()
        .map(|v| lift(*v))
        .collect::<Result<Vec<_>, _>>()?;
    let mut moves = vec![(o, 1), (e, 2), (c, CTRL_FD)];
    moves.extend(w.map(|w| (w, WORKSPACE_FD)));
    for (i, v) in lifted_volumes.iter().enumerate() {
        moves.push((*v, WORKSPACE_FD + 1 + i as RawFd));
    }
    for (from, to) in moves {
        // SAFETY: dup2 onto a small fixed number; the target is replaced atomically.
        if unsafe { libc::dup2(from, to) } < 0 {
            return Err(JailError::Sys {
                step: "dup2",
                source: nix::Error::last(),
            });
        }
    }
    // SAFETY: opening /dev/null with a static C string.
    let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY) };
    if null < 0 {
        return Err(JailError::Sys {
            step: "open /dev/null",
            source: nix::Error::last(),
        });
    }
    if null != 0 {
        // SAFETY: dup2 onto fd 0, then close of the fd we opened above.
        Errno::result(unsafe { libc::dup2(null, 0) }).step("dup2 /dev/null to stdin")?;
        // SAFETY: as above; `null` is ours and closed exactly once.
        Errno::result(unsafe { libc::close(null) }).step("close /dev/null")?;
    }
    let first_unused = if w.is_some() {
        WORKSPACE_FD + 1 + volumes.len() as RawFd
    } else {
        CTRL_FD + 1
    };
    // SAFETY: close_range closes every fd from `first_unused` up; none of them is needed.
    if unsafe { libc::syscall(libc::SYS_close_range, first_unused as u32, u32::MAX, 0u32) } != 0 {
        return Err(JailError::Sys {
            step: "close_range",
            source: nix::Error::last(),
        });
    }
    // SAFETY: WORKSPACE_FD and the fds after it were just made copies of the mounts' fds, and
    // nothing else in this process owns them.
    let owned = |fd: RawFd| unsafe { OwnedFd::from_raw_fd(fd) };
    let volumes = (0..volumes.len())
        .map(|i| owned(WORKSPACE_FD + 1 + i as RawFd))
        .collect();
    Ok((w.map(|_| owned(WORKSPACE_FD)), volumes))
}

/// Tells the server the namespaces exist and waits for it to map ids and set the cgroup.
fn handshake() -> Result<(), JailError> {
    nix::unistd::write(fd3(), &[UNSHARED]).step("handshake write")?;
    let mut b = [0u8; 1];
    let n = nix::unistd::read(fd3(), &mut b).step("handshake read")?;
    if n != 1 || b[0] != GO {
        return Err(JailError::Protocol(
            "server did not answer the handshake".into(),
        ));
    }
    Ok(())
}

fn fd3() -> std::os::fd::BorrowedFd<'static> {
    // SAFETY: fd 3 is the control stream for the whole life of the sandbox processes.
    unsafe { std::os::fd::BorrowedFd::borrow_raw(CTRL_FD) }
}

/// Writes one frame ([`frame::encode`]) on `fd`, in one buffer so that a small frame is one
/// `write`.
pub fn write_frame(fd: RawFd, payload: &[u8]) -> Result<(), JailError> {
    let buf = frame::encode(payload);
    let mut off = 0;
    // SAFETY: the caller owns `fd` for the duration of the call.
    let bfd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    while off < buf.len() {
        off += nix::unistd::write(bfd, &buf[off..]).step("write frame")?;
    }
    Ok(())
}

/// The init from the driver's fork on: confines itself, lets the driver run on, then reaps
/// until the driver exits or the server goes. Never returns; its exit ends the pid namespace
/// and every process left in it.
fn init_main(cfg: &JailConfig, driver: Pid, confined: OwnedFd) -> ! {
    let status = match init_confine(cfg) {
        Ok(sigchld) => {
            // A driver that already died cannot read this; the reaper finds out why.
            let _ = nix::unistd::write(&confined, &[INIT_CONFINED]);
            drop(confined);
            reap_until(driver, &sigchld)
        }
        Err(err) => {
            report_error(&err);
            i32::from(exit::INIT_CONFINE_FAILED)
        }
    };
    // SAFETY: _exit is the correct way to leave a forked init.
    unsafe { libc::_exit(status) }
}

/// Confines the init: its stdout and stderr go to /dev/null, SIGCHLD arrives on a signalfd,
/// it runs under the sandbox's rlimits, keeps no capability, and may make only the syscalls of
/// the allowlist. It keeps its copy of the control stream, never reading it: that is its
/// lifeline to the server. Returns the SIGCHLD signalfd.
fn init_confine(cfg: &JailConfig) -> Result<OwnedFd, JailError> {
    // SAFETY: dup2 of fd 0 (/dev/null, from setup_fds) onto 1 and 2.
    Errno::result(unsafe { libc::dup2(0, 1) }).step("init: stdout to /dev/null")?;
    // SAFETY: as above.
    Errno::result(unsafe { libc::dup2(0, 2) }).step("init: stderr to /dev/null")?;
    let sigchld = sigchld_fd()?;
    rlimits::apply(&cfg.rlimits)?;
    crate::caps::drop_all()?;
    crate::caps::set_no_new_privs()?;
    if cfg.seccomp {
        install_seccomp()?;
    }
    Ok(sigchld)
}

/// Blocks SIGCHLD and returns a non-blocking signalfd that reads it. Blocked after the
/// driver's fork, so the driver and what it starts keep the default mask; a child that died
/// before is still a zombie the first reaping pass finds.
fn sigchld_fd() -> Result<OwnedFd, JailError> {
    let mut set = nix::sys::signal::SigSet::empty();
    set.add(Signal::SIGCHLD);
    set.thread_block().step("init: block SIGCHLD")?;
    // SAFETY: signalfd(2) with a new fd (-1) and a valid sigset; returns a new fd or -1.
    let fd = unsafe { libc::signalfd(-1, set.as_ref(), libc::SFD_NONBLOCK | libc::SFD_CLOEXEC) };
    if fd < 0 {
        return Err(JailError::Sys {
            step: "init: signalfd",
            source: nix::Error::last(),
        });
    }
    // SAFETY: the kernel just returned this fd and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The init's loop: reap every child (orphans reparent here) until the driver exits, then exit
/// with its status; or, when the lifeline (the control stream) reports the server's end closed,
/// exit with [`exit::SERVER_GONE`]. Either exit ends the pid namespace and every process left
/// in it, so no sandbox outlives its server.
///
/// The lifeline is polled for hang-up only (`POLLRDHUP`; `POLLHUP` and `POLLERR` are always
/// reported), never for input, so the driver's data stays the driver's.
fn reap_until(driver: Pid, sigchld: &OwnedFd) -> i32 {
    let gone = libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR | libc::POLLNVAL;
    loop {
        if let Some(status) = reap_exited(driver) {
            return status;
        }
        let mut fds = [
            libc::pollfd {
                fd: sigchld.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: CTRL_FD,
                events: libc::POLLRDHUP,
                revents: 0,
            },
        ];
        // SAFETY: `fds` is a valid array of two pollfd for the duration of the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if n < 0 {
            if nix::Error::last() == Errno::EINTR {
                continue;
            }
            return i32::from(exit::INIT_WAIT_FAILED);
        }
        if fds[1].revents & gone != 0 {
            return i32::from(exit::SERVER_GONE);
        }
        if fds[0].revents & libc::POLLIN != 0 {
            drain(sigchld);
        }
    }
}

/// Reaps every child that has exited. `Some(status)` once the driver is among them (its exit
/// status, or `128 + signal`), or when `waitpid` fails; `None` while it runs.
fn reap_exited(driver: Pid) -> Option<i32> {
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a valid out-pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid == driver.as_raw() {
            if libc::WIFEXITED(status) {
                return Some(libc::WEXITSTATUS(status));
            }
            return Some(128 + libc::WTERMSIG(status));
        }
        if pid > 0 {
            continue;
        }
        if pid == 0 {
            return None;
        }
        if nix::Error::last() != Errno::EINTR {
            return Some(i32::from(exit::INIT_WAIT_FAILED));
        }
    }
}

/// Empties the SIGCHLD signalfd (non-blocking); the reaping pass that follows does the work.
fn drain(sigchld: &OwnedFd) {
    let mut buf = [0u8; 4 * std::mem::size_of::<libc::signalfd_siginfo>()];
    while matches!(nix::unistd::read(sigchld, &mut buf), Ok(n) if n > 0) {}
}

/// The driver's layers, in order; seccomp last.
fn driver_confine(cfg: &JailConfig) -> Result<(), JailError> {
    if cfg.landlock {
        let rw = rootfs::writable_paths();
        let rw_refs: Vec<&std::path::Path> = rw.iter().map(|p| p.as_path()).collect();
        // `/dev/pts` is the sandbox's own devpts instance: its terminals are opened, written
        // and configured (ioctls) by the programs that run on them.
        let dev: Vec<&std::path::Path> = [
            "/dev/null",
            "/dev/zero",
            "/dev/full",
            "/dev/tty",
            "/dev/pts",
        ]
        .iter()
        .map(std::path::Path::new)
        .collect();
        let mut all_rw = rw_refs;
        all_rw.extend(dev);
        crate::landlock::restrict(&all_rw, &[std::path::Path::new("/")])?;
    }
    rlimits::apply(&cfg.rlimits)?;
    nix::unistd::chdir("/workspace").step("chdir /workspace")?;
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    crate::caps::drop_all()?;
    crate::caps::set_no_new_privs()?;
    if cfg.seccomp {
        install_seccomp()?;
    }
    Ok(())
}

/// Reports a failure of the sequence on the control stream (best effort) as a `jail_error`
/// frame, for the server to log and return.
pub fn report_error(err: &JailError) {
    let msg = serde_json::json!({
        "type": "jail_error",
        "step": err.step(),
        "errno": err.errno(),
        "message": err.to_string(),
    });
    let _ = write_frame(CTRL_FD, msg.to_string().as_bytes());
}
