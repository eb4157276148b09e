//! The zygote launcher: runs as root in a fresh single-threaded process (`sandlot
//! __zygote-launch`), moves itself into the zygote's cgroup, makes its own mount, network
//! (loopback only), IPC and UTS namespaces, builds the base root (with a `/proc` that shows only
//! the zygote's own processes), gives up every privilege (unprivileged uid, empty capability
//! sets and bounding set, `no_new_privs`), installs the zygote's seccomp filters and execs the
//! Python zygote.
//!
//! The zygote runs the template's imports and setup: tenant code. It is confined like a sandbox
//! but for one thing a sandbox must not have: its forked children make their sandbox's
//! namespaces. That power is not the zygote's: the zygote's filters hand every `unshare` to the
//! server ([`seccomp::install_unshare_notifier`]; the listener is sent to the server on the
//! control socket before anything of the template runs), which lets through exactly the two
//! calls of a child it asked the zygote for ([`crate::child::SANDBOX_NAMESPACES`], then
//! [`crate::child::CGROUP_NAMESPACE`]) and refuses every other.

use crate::config::ZygoteConfig;
use crate::error::{JailError, PathStep, Step};
use crate::{caps, net, rootfs, seccomp};
use nix::sched::{unshare, CloneFlags};
use nix::unistd::{setgroups, setresgid, setresuid, Gid, Uid};
use std::convert::Infallible;
use std::fs;

/// Confines the calling process as the zygote described by `cfg` and execs its program.
/// Returns only on failure.
pub fn launch(cfg: &ZygoteConfig) -> Result<Infallible, JailError> {
    for procs in &cfg.cgroup_procs {
        fs::write(procs, std::process::id().to_string()).at("join zygote cgroup", procs)?;
    }
    // Tenant code runs here: no host network (the API's port, other hosts), no host IPC, no
    // host name to change.
    unshare(
        CloneFlags::CLONE_NEWNS
            | CloneFlags::CLONE_NEWNET
            | CloneFlags::CLONE_NEWIPC
            | CloneFlags::CLONE_NEWUTS,
    )
    .step("unshare zygote namespaces")?;
    rootfs::enter_base_root(cfg)?;
    nix::unistd::sethostname("zygote").step("sethostname")?;
    net::loopback_up()?;
    // Emptying the bounding set needs CAP_SETPCAP, which the uid change below takes away.
    caps::drop_bounding_and_ambient()?;
    setgroups(&[]).step("setgroups")?;
    setresgid(
        Gid::from_raw(cfg.gid),
        Gid::from_raw(cfg.gid),
        Gid::from_raw(cfg.gid),
    )
    .step("setresgid")?;
    // Leaving uid 0 clears the permitted and effective sets (no SECBIT_KEEP_CAPS).
    setresuid(
        Uid::from_raw(cfg.uid),
        Uid::from_raw(cfg.uid),
        Uid::from_raw(cfg.uid),
    )
    .step("setresuid")?;
    // Leaves no set non-empty: inheritable survives a uid change.
    caps::clear_sets()?;
    caps::set_no_new_privs()?;
    // No PR_SET_PDEATHSIG: it fires when the parent *thread* exits, and the server launches
    // zygotes from worker threads that come and go. The zygote exits instead when its control
    // socket reaches end of file, which happens when the server dies.
    crate::rlimits::set(libc::RLIMIT_NOFILE, cfg.nofile)?;
    crate::rlimits::set(libc::RLIMIT_CORE, 0)?;
    let program = seccomp::build_program_for(seccomp::Profile::Zygote)?;
    seccomp::install_program(&program)?;
    let listener = seccomp::install_unshare_notifier()?;
    hand_over_listener(listener)?;
    crate::program::exec(&cfg.argv, &cfg.env, "execve zygote")
}

/// The control socket's fd (the server's socketpair, `SOCK_SEQPACKET`).
const CONTROL_FD: std::os::fd::RawFd = 3;

/// Sends the unshare listener to the server (`{"op": "supervise"}` with the fd attached) and
/// closes this process's copy: no zygote code ever holds it.
fn hand_over_listener(listener: std::os::fd::OwnedFd) -> Result<(), JailError> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    use std::os::fd::AsRawFd;
    let msg = br#"{"op":"supervise"}"#;
    let iov = [std::io::IoSlice::new(msg)];
    let fds = [listener.as_raw_fd()];
    sendmsg::<()>(
        CONTROL_FD,
        &iov,
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .step("send the unshare listener")?;
    Ok(())
}
