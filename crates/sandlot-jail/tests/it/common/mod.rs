//! Fork helpers shared by the layer tests: each case runs in a forked child that applies a
//! layer, tries one operation and `_exit`s with the errno it got; the parent asserts it. Also
//! [`skip`], the one way a layer test may decline to run, and [`sandbox`], a real sandbox for
//! the layers that only exist inside one.

#![allow(dead_code)] // each suite uses its own subset

pub mod sandbox;

/// Exit code of a child whose set-up failed before the operation under test.
pub const SETUP_FAILED: i32 = 250;

/// Seconds a forked child may run before `SIGALRM` ends it: a child that hangs (say, on a lock
/// another test thread held when it forked) fails its test instead of stalling the suite.
pub const CHILD_DEADLINE_SECS: u32 = 60;

/// Arms the watchdog of a freshly forked child (`alarm` is async-signal-safe and survives
/// `execve`, so it bounds whatever the child goes on to run).
fn arm_watchdog() {
    // SAFETY: a plain syscall with no memory arguments.
    unsafe { libc::alarm(CHILD_DEADLINE_SECS) };
}

/// Runs `f` in a forked child and returns its exit code (`1000 + signal` if it was killed).
pub fn in_child(f: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the child only runs `f` (test code designed for a forked child) and `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        arm_watchdog();
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(249);
        // SAFETY: terminating the forked child without running the parent's atexit handlers.
        unsafe { libc::_exit(code) };
    }
    wait_code(pid)
}

/// Runs `f` in a forked child and returns the JSON value it produced, sent back on a pipe; for
/// cases that check several things in one child. Panics if the child did not send a value.
pub fn in_child_value(f: impl FnOnce() -> serde_json::Value) -> serde_json::Value {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    let (r, w) = (fds[0], fds[1]);
    // SAFETY: the child only runs `f` (test code designed for a forked child) and `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        arm_watchdog();
        // SAFETY: `w` is this process's copy of the pipe's write end; it is closed by `_exit`.
        let mut out = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(w) };
        let value = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let code = match value {
            Ok(v) if std::io::Write::write_all(&mut out, v.to_string().as_bytes()).is_ok() => 0,
            Ok(_) => SETUP_FAILED,
            Err(_) => 249,
        };
        // SAFETY: terminating the forked child without running the parent's atexit handlers.
        unsafe { libc::_exit(code) };
    }
    // SAFETY: closing our copy of the write end, then owning the read end.
    unsafe { libc::close(w) };
    // SAFETY: `r` is open and ours alone from here on.
    let mut input = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(r) };
    let mut text = String::new();
    let read = std::io::Read::read_to_string(&mut input, &mut text);
    let code = wait_code(pid);
    assert!(
        read.is_ok() && code == 0,
        "child exited with {code}: {text:?}"
    );
    serde_json::from_str(&text).expect("the child sent JSON")
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
        let signal = libc::WTERMSIG(status);
        assert_ne!(
            signal,
            libc::SIGALRM,
            "child {pid} still running after {CHILD_DEADLINE_SECS} s: hung"
        );
        1000 + signal
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

/// Whether the tests run as root (the jail's layers need it: namespaces, mounts, id maps).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Declines to run a test for `reason` (the caller returns right after). Under CI (the `CI`
/// environment variable set) that is a failure instead: a skipped layer must never pass as
/// tested.
#[track_caller]
pub fn skip(reason: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{reason}: a layer test may not be skipped under CI");
    }
    eprintln!("{reason}: skipped");
}
