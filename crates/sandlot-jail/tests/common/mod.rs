//! Fork helpers shared by the layer tests: each case runs in a forked child that applies a
//! layer, tries one operation and `_exit`s with the errno it got; the parent asserts it.

#![allow(dead_code)] // each test binary uses its own subset

/// Exit code of a child whose set-up failed before the operation under test.
pub const SETUP_FAILED: i32 = 250;

/// Runs `f` in a forked child and returns its exit code (`1000 + signal` if it was killed).
pub fn in_child(f: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the child only runs `f` (test code designed for a forked child) and `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(249);
        // SAFETY: terminating the forked child without running the parent's atexit handlers.
        unsafe { libc::_exit(code) };
    }
    wait_code(pid)
}

/// Waits for `pid`: its exit code, or `1000 + signal` if it was killed.
pub fn wait_code(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: `status` is a valid out-pointer; `pid` is our child.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid, "waitpid");
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        1000 + libc::WTERMSIG(status)
    } else {
        999
    }
}

pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// 0 if `rc` is not -1, else errno.
pub fn errno_of(rc: libc::c_long) -> i32 {
    if rc == -1 {
        errno()
    } else {
        0
    }
}
