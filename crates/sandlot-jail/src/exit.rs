//! The exit statuses the jail's own processes use for their own failures, each named once with
//! one meaning. The Python zygote names the ones it uses in `python/sandlot_runtime/zygote.py`
//! (`EXIT_JAIL_FAILED`, `EXIT_DRIVER_FAILED`); a test below keeps the two sides in step.
//!
//! | status | set by | meaning |
//! | --- | --- | --- |
//! | 111 [`JAIL_FAILED`] | a sandbox's P0 or driver (`sandlot_child_enter`), or `sandlot __zygote-launch` | a step of the containment sequence failed before the program ran; a sandbox reports the step first as a `jail_error` frame on its control stream, the zygote launcher on its stderr |
//! | 112 [`DRIVER_FAILED`] | the driver (`zygote.py`), passed on by the init | the confined driver raised out of its main loop; the exception is on its stderr |
//! | 113 [`INIT_WAIT_FAILED`] | the sandbox's init (P1) | `waitpid` failed before the driver exited, so the init cannot know the driver's status |
//! | 114 [`INIT_CONFINE_FAILED`] | the sandbox's init (P1) | the init could not drop its capabilities or install the seccomp filter; it never runs the reaper loop unconfined |
//! | 115 [`SERVER_GONE`] | the sandbox's init (P1) | the server's end of the control stream closed (the server died or let the sandbox go): the init leaves, which ends the pid namespace and every process in it |
//!
//! Otherwise the init exits with the driver's own status, or `128 + signal` when a signal killed
//! the driver (the shell's convention). Nothing in the server branches on these numbers: the
//! server learns what failed from the `jail_error` frame or the stderr it logs. They exist so a
//! status seen in a log or by `strace` names one cause.

/// A step of the containment sequence failed before the program ran (see the module table).
pub const JAIL_FAILED: u8 = 111;

/// The confined driver raised out of its main loop (Python side only; see the module table).
pub const DRIVER_FAILED: u8 = 112;

/// The init's `waitpid` failed before the driver exited.
pub const INIT_WAIT_FAILED: u8 = 113;

/// The init could not confine itself (capabilities, seccomp).
pub const INIT_CONFINE_FAILED: u8 = 114;

/// The init saw its lifeline, the server's end of the control stream, close.
pub const SERVER_GONE: u8 = 115;

/// Leaves the calling forked process with `status`, without running the parent's atexit
/// handlers or any destructor, as a forked child must.
pub fn exit_now(status: u8) -> ! {
    // SAFETY: _exit never returns and touches no Rust state.
    unsafe { libc::_exit(libc::c_int::from(status)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value `NAME = <int>` is given in the Python source, if any.
    fn python_const(source: &str, name: &str) -> Option<u8> {
        source.lines().find_map(|line| {
            let rest = line.strip_prefix(name)?.trim_start().strip_prefix('=')?;
            let value = rest.split('#').next()?.trim();
            value.parse().ok()
        })
    }

    #[test]
    fn python_zygote_uses_the_same_numbers() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../python/sandlot_runtime/zygote.py"
        );
        let source = std::fs::read_to_string(path).expect("read zygote.py");
        assert_eq!(python_const(&source, "EXIT_JAIL_FAILED"), Some(JAIL_FAILED));
        assert_eq!(
            python_const(&source, "EXIT_DRIVER_FAILED"),
            Some(DRIVER_FAILED)
        );
        // Only the names may appear at the exit sites, never the bare numbers.
        for n in [
            JAIL_FAILED,
            DRIVER_FAILED,
            INIT_WAIT_FAILED,
            INIT_CONFINE_FAILED,
            SERVER_GONE,
        ] {
            assert!(
                !source.contains(&format!("_exit({n})")),
                "zygote.py exits with a bare {n}"
            );
        }
    }

    #[test]
    fn statuses_are_distinct() {
        let all = [
            JAIL_FAILED,
            DRIVER_FAILED,
            INIT_WAIT_FAILED,
            INIT_CONFINE_FAILED,
            SERVER_GONE,
        ];
        let unique: std::collections::BTreeSet<_> = all.iter().collect();
        assert_eq!(unique.len(), all.len());
    }
}
