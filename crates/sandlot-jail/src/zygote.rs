//! The zygote launcher: runs as root in a fresh single-threaded process (`sandlot
//! __zygote-launch`), moves itself into the zygote's cgroup, builds the base root in a private
//! mount namespace, gives up every privilege (unprivileged uid, empty capability sets and
//! bounding set, `no_new_privs`) and execs the Python zygote.

use crate::config::ZygoteConfig;
use crate::error::{JailError, PathStep, Step};
use crate::rootfs;
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
    drop_bounding_and_ambient()?;
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
    crate::caps::set_no_new_privs()?;
    // No PR_SET_PDEATHSIG: it fires when the parent *thread* exits, and the server launches
    // zygotes from worker threads that come and go. The zygote exits instead when its control
    // socket reaches end of file, which happens when the server dies.
    crate::rlimits::set(libc::RLIMIT_NOFILE, cfg.nofile)?;
    crate::rlimits::set(libc::RLIMIT_CORE, 0)?;
    exec(cfg)
}

fn drop_bounding_and_ambient() -> Result<(), JailError> {
    // SAFETY: prctl with integer arguments only.
    if unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    } != 0
    {
        return Err(JailError::Sys {
            step: "clear ambient capabilities",
            source: nix::Error::last(),
        });
    }
    for cap in 0..=last_cap() {
        // SAFETY: prctl with integer arguments only. EINVAL for caps this kernel lacks.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if rc != 0 && nix::Error::last() != nix::Error::EINVAL {
            return Err(JailError::Sys {
                step: "drop bounding set",
                source: nix::Error::last(),
            });
        }
    }
    Ok(())
}

/// The highest capability number the running kernel knows.
pub fn last_cap() -> u32 {
    fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40)
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
