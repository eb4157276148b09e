//! What the env suites share.

/// Runs `f` in a new thread that has its own umask and current directory (`unshare(2)` with
/// `CLONE_FS`), so a test may change them without touching the other tests of this process.
/// Threads and processes `f` starts inherit the thread's copy, as they would the process's.
/// A panic in `f` is the caller's panic.
pub fn with_own_fs<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let thread = std::thread::spawn(move || {
        // SAFETY: unshare(2) with CLONE_FS only gives the calling thread its own copy of the
        // umask, root and current directory; no memory is involved.
        let rc = unsafe { libc::unshare(libc::CLONE_FS) };
        assert_eq!(
            rc,
            0,
            "unshare(CLONE_FS): {}",
            std::io::Error::last_os_error()
        );
        f()
    });
    match thread.join() {
        Ok(v) => v,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}
