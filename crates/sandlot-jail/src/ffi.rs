//! The C ABI the Python zygote calls through `ctypes` in each forked child.

use crate::config::JailConfig;
use crate::{child, exit};
use std::os::raw::{c_char, c_int};

/// Enters the jail described by the JSON at `cfg`/`len`. Returns 0 in the fully confined driver
/// process; never returns in the sandbox's other processes; on failure reports the error on the
/// control stream and exits the process with status [`exit::JAIL_FAILED`].
///
/// `ctrl`, `stdout` and `stderr` are the child's ends of its control stream and output pipes;
/// `workspace` is the detached mount of its disk workspace, or negative for a tmpfs workspace.
///
/// # Safety
/// `cfg` must point to `len` readable bytes. Must be called in a freshly forked child of a
/// single-threaded process.
#[no_mangle]
pub unsafe extern "C" fn sandlot_child_enter(
    cfg: *const c_char,
    len: usize,
    ctrl: c_int,
    stdout: c_int,
    stderr: c_int,
    workspace: c_int,
    volumes: *const c_int,
    nvolumes: usize,
) -> c_int {
    // SAFETY: the caller guarantees `cfg` points to `len` bytes.
    let bytes = unsafe { std::slice::from_raw_parts(cfg as *const u8, len) };
    let volumes: &[c_int] = if nvolumes == 0 || volumes.is_null() {
        &[]
    } else {
        // SAFETY: the caller guarantees `volumes` points to `nvolumes` ints.
        unsafe { std::slice::from_raw_parts(volumes, nvolumes) }
    };
    let result = serde_json::from_slice::<JailConfig>(bytes)
        .map_err(Into::into)
        .and_then(|cfg| child::enter(&cfg, ctrl, stdout, stderr, workspace, volumes));
    match result {
        Ok(child::Role::Driver) => 0,
        Err(err) => {
            child::report_error(&err);
            exit::exit_now(exit::JAIL_FAILED)
        }
    }
}

/// Builds the seccomp program once in the zygote so each child only installs it.
#[no_mangle]
pub extern "C" fn sandlot_prepare() -> c_int {
    match crate::seccomp::build_program() {
        Ok(p) => {
            let _ = child::SECCOMP_PROGRAM.set(p);
            0
        }
        Err(_) => -1,
    }
}
