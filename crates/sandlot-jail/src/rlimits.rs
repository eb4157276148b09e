//! Resource limits (setrlimit) of a sandbox's processes.

use crate::config::RlimitConfig;
use crate::error::JailError;

/// Sets soft and hard limit of `resource` to `value`.
pub fn set(resource: libc::__rlimit_resource_t, value: u64) -> Result<(), JailError> {
    let lim = libc::rlimit {
        rlim_cur: value as libc::rlim_t,
        rlim_max: value as libc::rlim_t,
    };
    // SAFETY: `lim` is a valid rlimit that outlives the call.
    if unsafe { libc::setrlimit(resource, &lim) } != 0 {
        return Err(JailError::Sys {
            step: "setrlimit",
            source: nix::Error::last(),
        });
    }
    Ok(())
}

/// Applies the sandbox's limits. Processes and memory are bounded by the cgroup, not here.
pub fn apply(cfg: &RlimitConfig) -> Result<(), JailError> {
    set(libc::RLIMIT_NOFILE, cfg.nofile)?;
    set(libc::RLIMIT_FSIZE, cfg.fsize)?;
    set(libc::RLIMIT_CORE, cfg.core)?;
    set(libc::RLIMIT_STACK, cfg.stack)?;
    Ok(())
}
