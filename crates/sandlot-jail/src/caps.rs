//! Capabilities and `no_new_privs`, the one code path that drops them: for the sandbox's init
//! and driver ([`drop_all`]) and for the zygote launcher ([`drop_bounding_and_ambient`] before
//! its uid change, [`clear_sets`] after).
//!
//! [`drop_all`] empties every capability set of the calling thread: ambient, bounding (so no
//! `execve` of a setuid/file-capability binary, or of anything as uid 0, can bring a capability
//! back), then inheritable, permitted and effective in one `capset`. [`set_no_new_privs`] makes
//! the kernel refuse privilege gains on `execve` (and allows an unprivileged seccomp filter).
//!
//! These functions run in a freshly forked child and are reached from a C-ABI entry point: they
//! never panic and do not allocate (the `/proc` read uses a stack buffer).
//! [`current`] is for tests and `sandlot doctor` and may allocate.

use std::io;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum CapsError {
    /// `prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)` failed.
    #[error("cannot clear the ambient capability set")]
    ClearAmbient(#[source] io::Error),
    /// `prctl(PR_CAPBSET_READ, cap)` failed for a capability at or below `cap_last_cap`.
    #[error("cannot read capability {cap} of the bounding set")]
    ReadBounding {
        cap: u32,
        #[source]
        source: io::Error,
    },
    /// `prctl(PR_CAPBSET_DROP, cap)` failed (needs `CAP_SETPCAP` in the effective set).
    #[error("cannot drop capability {cap} from the bounding set")]
    DropBounding {
        cap: u32,
        #[source]
        source: io::Error,
    },
    /// `capset` clearing the inheritable, permitted and effective sets failed.
    #[error("cannot clear the inheritable, permitted and effective capability sets")]
    ClearSets(#[source] io::Error),
    /// `prctl(PR_SET_NO_NEW_PRIVS, 1)` failed.
    #[error("cannot set no_new_privs")]
    SetNoNewPrivs(#[source] io::Error),
}

/// Highest capability number the kernel knows, from `/proc/sys/kernel/cap_last_cap`; when that
/// file cannot be read (no `/proc` yet), found by probing `PR_CAPBSET_READ`, which fails with
/// `EINVAL` past the last capability.
pub fn last_cap() -> u32 {
    if let Some(n) = read_cap_last_cap() {
        return n;
    }
    let mut last = 0;
    for cap in 0..64u32 {
        // SAFETY: PR_CAPBSET_READ takes an integer; no memory is passed.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_READ, libc::c_ulong::from(cap), 0, 0, 0) };
        if rc < 0 {
            break;
        }
        last = cap;
    }
    last
}

fn read_cap_last_cap() -> Option<u32> {
    let path = c"/proc/sys/kernel/cap_last_cap";
    // SAFETY: `path` is a NUL-terminated string; the flags open a read-only descriptor.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let mut buf = [0u8; 16];
    // SAFETY: `buf` is a writable buffer of `buf.len()` bytes and `fd` is open.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    // SAFETY: `fd` was opened above and is closed exactly once.
    unsafe { libc::close(fd) };
    let n = usize::try_from(n).ok()?;
    let text = std::str::from_utf8(buf.get(..n)?).ok()?;
    let v: u32 = text.trim().parse().ok()?;
    (v < 64).then_some(v)
}

/// Drops every capability of the calling thread: clears the ambient set, drops every capability
/// up to `cap_last_cap` from the bounding set, then clears inheritable, permitted and effective.
///
/// Dropping from the bounding set needs `CAP_SETPCAP`; capabilities already absent from it are
/// skipped, so calling this twice is fine.
pub fn drop_all() -> Result<(), CapsError> {
    drop_bounding_and_ambient()?;
    clear_sets()
}

/// The first half of [`drop_all`]: clears the ambient set and empties the bounding set, leaving
/// permitted and effective as they are. The zygote launcher calls it while still root, because
/// it needs `CAP_SETUID`/`CAP_SETGID` afterwards to change its uid (which then clears permitted
/// and effective), and emptying the bounding set needs `CAP_SETPCAP`, gone after that change.
pub fn drop_bounding_and_ambient() -> Result<(), CapsError> {
    // SAFETY: integer-only prctl; unused arguments are zero as the kernel requires.
    let rc = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    // EINVAL: kernel without ambient capabilities (< 4.3), nothing to clear.
    if rc != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(CapsError::ClearAmbient(e));
        }
    }

    for cap in 0..=last_cap() {
        let arg = libc::c_ulong::from(cap);
        // SAFETY: integer-only prctl.
        let present = unsafe { libc::prctl(libc::PR_CAPBSET_READ, arg, 0, 0, 0) };
        if present < 0 {
            return Err(CapsError::ReadBounding {
                cap,
                source: io::Error::last_os_error(),
            });
        }
        if present == 0 {
            continue;
        }
        // SAFETY: integer-only prctl.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, arg, 0, 0, 0) };
        if rc != 0 {
            return Err(CapsError::DropBounding {
                cap,
                source: io::Error::last_os_error(),
            });
        }
    }
    Ok(())
}

/// The second half of [`drop_all`]: clears the inheritable, permitted and effective sets in one
/// `capset` (always allowed: a process may give up what it holds).
pub fn clear_sets() -> Result<(), CapsError> {
    let mut header = CapUserHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapUserData::default(); 2];
    // SAFETY: `header` and `data` are valid `__user_cap_header_struct` and two
    // `__user_cap_data_struct`s, as capset(2) with _LINUX_CAPABILITY_VERSION_3 expects; the kernel
    // only reads `data` and may write `header.version`.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_capset,
            &mut header as *mut CapUserHeader,
            data.as_ptr(),
        )
    };
    if rc != 0 {
        return Err(CapsError::ClearSets(io::Error::last_os_error()));
    }
    Ok(())
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapUserHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapUserData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Sets `no_new_privs` on the calling thread (inherited by children, irreversible).
pub fn set_no_new_privs() -> Result<(), CapsError> {
    // SAFETY: integer-only prctl; unused arguments are zero as the kernel requires.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_NO_NEW_PRIVS,
            1 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    if rc != 0 {
        return Err(CapsError::SetNoNewPrivs(io::Error::last_os_error()));
    }
    Ok(())
}

/// Capability and confinement state of the calling thread, from `/proc/thread-self/status`
/// (falling back to `/proc/self/status`). A field is `None` when the file or the line is missing
/// (no `/proc`, or an older kernel).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CapsSnapshot {
    /// `CapInh`
    pub inheritable: Option<u64>,
    /// `CapPrm`
    pub permitted: Option<u64>,
    /// `CapEff`
    pub effective: Option<u64>,
    /// `CapBnd`
    pub bounding: Option<u64>,
    /// `CapAmb`
    pub ambient: Option<u64>,
    /// `NoNewPrivs`
    pub no_new_privs: Option<bool>,
    /// `Seccomp`: 0 none, 1 strict, 2 filter.
    pub seccomp: Option<u32>,
    /// `Seccomp_filters`: how many filters are stacked on the thread.
    pub seccomp_filters: Option<u32>,
}

impl CapsSnapshot {
    /// Whether every capability set is known and empty.
    pub fn all_dropped(&self) -> bool {
        [
            self.inheritable,
            self.permitted,
            self.effective,
            self.bounding,
            self.ambient,
        ]
        .iter()
        .all(|s| *s == Some(0))
    }

    /// Parses the text of a `/proc/<pid>/status` file.
    pub fn parse(status: &str) -> CapsSnapshot {
        let mut s = CapsSnapshot::default();
        for line in status.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            let hex = || u64::from_str_radix(value, 16).ok();
            match key {
                "CapInh" => s.inheritable = hex(),
                "CapPrm" => s.permitted = hex(),
                "CapEff" => s.effective = hex(),
                "CapBnd" => s.bounding = hex(),
                "CapAmb" => s.ambient = hex(),
                "NoNewPrivs" => s.no_new_privs = value.parse::<u8>().ok().map(|v| v != 0),
                "Seccomp" => s.seccomp = value.parse().ok(),
                "Seccomp_filters" => s.seccomp_filters = value.parse().ok(),
                _ => {}
            }
        }
        s
    }
}

/// Reads the calling thread's [`CapsSnapshot`].
pub fn current() -> CapsSnapshot {
    let text = std::fs::read_to_string("/proc/thread-self/status")
        .or_else(|_| std::fs::read_to_string("/proc/self/status"));
    match text {
        Ok(t) => CapsSnapshot::parse(&t),
        Err(_) => CapsSnapshot::default(),
    }
}
