//! Resource limits (setrlimit) of a sandbox's processes: the four the server configures per
//! sandbox ([`RlimitConfig`]) and a fixed table ([`FIXED`]) that makes every other hard limit
//! finite where that costs a real workload nothing. Soft and hard limits are set equal, so
//! nothing inside can raise one (raising a hard limit needs `CAP_SYS_RESOURCE` on the host).
//!
//! Only `RLIMIT_CPU` stays unlimited: see [`FIXED`].

use crate::config::RlimitConfig;
use crate::error::JailError;

/// One limit of the fixed table: the value every sandbox process gets (soft and hard), or the
/// hard limit it inherited if that is lower (a limit can only be lowered without privilege).
#[derive(Debug, Clone, Copy)]
pub struct Fixed {
    /// The name in `/proc/<pid>/limits` terms, for tests and docs.
    pub name: &'static str,
    pub resource: libc::__rlimit_resource_t,
    pub value: u64,
    /// Why this value.
    pub reason: &'static str,
}

const GIB: u64 = 1 << 30;

/// The fixed limits. Memory and processes are bounded for real by the sandbox's cgroup; these
/// are the second fence, set high enough that no real workload meets them.
///
/// `RLIMIT_CPU` is left unlimited on purpose: it counts one process's CPU seconds over its
/// whole life, and the driver lives as long as the sandbox (24 h by default, on up to the
/// sandbox's CPU quota of cores). Any value a long-lived sandbox never reaches bounds nothing;
/// any lower value would kill a legitimate driver. CPU is bounded by the cgroup's quota (rate)
/// and by execution timeouts and the sandbox's lifetime (duration).
pub const FIXED: &[Fixed] = &[
    Fixed {
        name: "as",
        resource: libc::RLIMIT_AS,
        value: 1024 * GIB,
        reason: "address space: 1 TiB is far above what Python, numpy, OpenBLAS and glibc's \
                 malloc arenas reserve (real memory is the cgroup's to bound)",
    },
    Fixed {
        name: "data",
        resource: libc::RLIMIT_DATA,
        value: 1024 * GIB,
        reason: "private writable mappings and the heap: as RLIMIT_AS",
    },
    Fixed {
        name: "rss",
        resource: libc::RLIMIT_RSS,
        value: 1024 * GIB,
        reason: "ignored by Linux; finite so that no hard limit reads unlimited",
    },
    Fixed {
        name: "nproc",
        resource: libc::RLIMIT_NPROC,
        value: 16_384,
        reason: "processes and threads of the sandbox's uid: four times the server's largest \
                 pids limit (4096), so the pids cgroup, not this, stops a fork bomb",
    },
    Fixed {
        name: "sigpending",
        resource: libc::RLIMIT_SIGPENDING,
        value: 4096,
        reason: "queued signals (and POSIX timers, which preallocate one): bounds the kernel \
                 memory a sandbox pins; workloads queue a handful",
    },
    Fixed {
        name: "msgqueue",
        resource: libc::RLIMIT_MSGQUEUE,
        value: 819_200,
        reason: "bytes in POSIX message queues: the kernel's default, made explicit",
    },
    Fixed {
        name: "memlock",
        resource: libc::RLIMIT_MEMLOCK,
        value: 8 << 20,
        reason: "locked memory: 8 MiB, the usual default (gpg, crypto libraries lock a few \
                 pages)",
    },
    Fixed {
        name: "locks",
        resource: libc::RLIMIT_LOCKS,
        value: 4096,
        reason: "ignored by Linux since 2.4.25; finite so that no hard limit reads unlimited",
    },
    Fixed {
        name: "nice",
        resource: libc::RLIMIT_NICE,
        value: 0,
        reason: "no raising of priority (nice can only go up)",
    },
    Fixed {
        name: "rtprio",
        resource: libc::RLIMIT_RTPRIO,
        value: 0,
        reason: "no real-time scheduling",
    },
    Fixed {
        name: "rttime",
        resource: libc::RLIMIT_RTTIME,
        value: 1_000_000,
        reason: "real-time CPU without blocking, in microseconds: moot without real-time \
                 scheduling; finite so that no hard limit reads unlimited",
    },
];

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

/// Sets soft and hard limit of `resource` to `value`, or to the current hard limit if that is
/// lower.
pub fn set_at_most(resource: libc::__rlimit_resource_t, value: u64) -> Result<(), JailError> {
    let mut cur = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `cur` is a valid out-pointer for the call.
    if unsafe { libc::getrlimit(resource, &mut cur) } != 0 {
        return Err(JailError::Sys {
            step: "getrlimit",
            source: nix::Error::last(),
        });
    }
    set(resource, value.min(cur.rlim_max))
}

/// Applies the sandbox's limits: the configured ones exactly, then the fixed table.
pub fn apply(cfg: &RlimitConfig) -> Result<(), JailError> {
    set(libc::RLIMIT_NOFILE, cfg.nofile)?;
    set(libc::RLIMIT_FSIZE, cfg.fsize)?;
    set(libc::RLIMIT_CORE, cfg.core)?;
    set(libc::RLIMIT_STACK, cfg.stack)?;
    for f in FIXED {
        set_at_most(f.resource, f.value)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_limits_are_finite_and_distinct() {
        let mut seen = std::collections::BTreeSet::new();
        for f in FIXED {
            assert!(f.value < libc::RLIM_INFINITY, "{} is unlimited", f.name);
            assert!(seen.insert(f.resource), "{} is listed twice", f.name);
            assert!(!f.reason.is_empty(), "{} has no reason", f.name);
        }
        // Every resource the kernel knows is either configured, fixed, or CPU (documented).
        let configured = [
            libc::RLIMIT_NOFILE,
            libc::RLIMIT_FSIZE,
            libc::RLIMIT_CORE,
            libc::RLIMIT_STACK,
        ];
        // Linux has 16 resources (RLIMIT_CPU = 0 to RLIMIT_RTTIME = 15).
        for r in 0..=libc::RLIMIT_RTTIME {
            assert!(
                configured.contains(&r) || seen.contains(&r) || r == libc::RLIMIT_CPU,
                "resource {r} is neither configured nor fixed"
            );
        }
    }
}
