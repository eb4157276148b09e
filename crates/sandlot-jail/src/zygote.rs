//! The zygote launcher: runs as root in a fresh single-threaded process (`sandlot
//! __zygote-launch`), moves itself into the zygote's cgroup, builds the base root in a private
//! mount namespace, gives up every privilege (unprivileged uid, empty capability sets and
//! bounding set, `no_new_privs`) and execs the Python zygote.

use crate::config::ZygoteConfig;
use crate::error::{JailError, PathStep, Step};
use crate::{caps, rootfs};
use nix::sched::{unshare, CloneFlags};
use nix::unistd::{setgroups, setresgid, setresuid, Gid, Uid};
use std::convert::Infallible;
use std::ffi::CString;
use std::fs;

/// Confines the calling process as the zygote described by `cfg` and execs its program.
/// Returns only on failure.
pub fn launch(cfg: &ZygoteConfig) -> Result<Infallible, JailError> {
    for procs in &cfg.cgroup_procs {
        fs::write(procs, std::process::id().to_string()).at("join zygote cgroup", procs)?;
    }
    unshare(CloneFlags::CLONE_NEWNS).step("unshare mount namespace")?;
    rootfs::enter_base_root(cfg)?;
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
    exec(cfg)
}

fn exec(cfg: &ZygoteConfig) -> Result<Infallible, JailError> {
    let to_c = |s: &str| CString::new(s).map_err(|_| JailError::Protocol(format!("NUL in {s:?}")));
    let argv = cfg
        .argv
        .iter()
        .map(|a| to_c(a))
        .collect::<Result<Vec<_>, _>>()?;
    let env = cfg
        .env
        .iter()
        .map(|(k, v)| to_c(&format!("{k}={v}")))
        .collect::<Result<Vec<_>, _>>()?;
    let Some(program) = argv.first() else {
        return Err(JailError::Protocol("empty argv".into()));
    };
    let err = nix::unistd::execve(program, &argv, &env).unwrap_err();
    Err(JailError::Sys {
        step: "execve zygote",
        source: err,
    })
}
