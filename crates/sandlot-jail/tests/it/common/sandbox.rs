//! A real sandbox for the layer tests, without a server or a Python zygote: a forked child
//! builds a zygote's base root (`rootfs::enter_base_root`, as root in a private mount
//! namespace) and runs the real containment sequence (`child::enter`); this process plays the
//! server's half of the handshake (id maps, "go", the `init` frame). The test's operation runs
//! in the driver and sends back one JSON value.
//!
//! Seccomp and Landlock are off unless the test's config turns them on, so the answer a test
//! asserts comes from the layer under test, not from a later fence.

use super::{wait_code, SETUP_FAILED};
use sandlot_jail::config::{Bind, JailConfig, ZygoteConfig};
use sandlot_jail::{child, frame, idmap, rootfs, seccomp};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Host uid and gid the test sandboxes' uid 1000 maps to: unused on the host, and nothing a
/// sandbox creates outlives it (its writable mounts are its own tmpfs).
pub const HOST_UID: u32 = 3_990_000;

/// How a sandbox sees the owner of the base root's files (host root, which it does not map).
pub const OVERFLOW_UID: u32 = 65534;

/// A zygote config whose base root is built on `staging` with no extra binds.
pub fn zygote_config(staging: &Path) -> ZygoteConfig {
    ZygoteConfig {
        staging_dir: staging.to_path_buf(),
        binds: Vec::new(),
        // Unused by the base root itself; the launcher would drop to it afterwards.
        uid: 65534,
        gid: 65534,
        cgroup_procs: Vec::new(),
        argv: Vec::new(),
        env: Vec::new(),
        tmp_bytes: 1 << 20,
        nofile: 1024,
    }
}

/// The jail config of the tests: small caps, seccomp and Landlock off.
pub fn test_config() -> JailConfig {
    JailConfig {
        workspace_bytes: 1 << 20,
        workspace_inodes: 64,
        tmp_bytes: 512 << 10,
        shm_bytes: 256 << 10,
        landlock: false,
        seccomp: false,
        ..JailConfig::default()
    }
}

/// Runs `f` in a forked child inside a fresh private mount namespace on a zygote's base root,
/// as root (the zygote launcher's view before it drops root); returns the value `f` produced.
pub fn in_base_root(f: impl FnOnce() -> Value) -> Value {
    in_base_root_with(Vec::new(), f)
}

/// [`in_base_root`] with `binds` in the base root.
pub fn in_base_root_with(binds: Vec<Bind>, f: impl FnOnce() -> Value) -> Value {
    let staging = tempfile::tempdir().unwrap();
    let zcfg = ZygoteConfig {
        binds,
        ..zygote_config(staging.path())
    };
    super::in_child_value(|| {
        // SAFETY: unshare in a single-threaded forked child.
        if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
            return json!({"setup": "unshare", "errno": super::errno()});
        }
        if let Err(e) = rootfs::enter_base_root(&zcfg) {
            return json!({"setup": e.to_string()});
        }
        f()
    })
}

/// Runs `op` in the driver of a real sandbox configured by `cfg` and returns the value it
/// produced. Panics with the jail's own report if the sandbox fails to start.
pub fn in_sandbox(cfg: &JailConfig, op: impl FnOnce() -> Value) -> Value {
    in_sandbox_with_workspace(cfg, -1, op)
}

/// [`in_sandbox`] with `workspace` (a detached mount, or -1 for a tmpfs) as the sandbox's disk
/// workspace.
pub fn in_sandbox_with_workspace(
    cfg: &JailConfig,
    workspace: RawFd,
    op: impl FnOnce() -> Value,
) -> Value {
    let mut started = start(cfg, HOST_UID, workspace, Linger::No, op);
    let result = read_frame(&mut started.server);
    assert_eq!(result["type"], "result", "the sandbox failed: {result}");
    assert_eq!(
        wait_code(started.p0),
        0,
        "P0 exits once it has reported the init"
    );
    result["value"].clone()
}

/// What the driver does once it has sent its value.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Linger {
    /// Exits, so the sandbox ends.
    No,
    /// Waits forever: the sandbox lives until something from outside ends it.
    Forever,
}

/// A sandbox that has started: the server's end of its control stream (its `init` frame
/// already read), the host pid of its P0 and of its init (P1).
pub struct Started {
    pub server: UnixStream,
    pub p0: libc::pid_t,
    pub init: libc::pid_t,
}

/// Starts a real sandbox whose uid 1000 maps to `host_uid`, and plays the server's half of the
/// handshake up to the `init` frame. Its driver runs `op`, sends the value as a `result` frame
/// and then does as `linger` says.
pub fn start(
    cfg: &JailConfig,
    host_uid: u32,
    workspace: RawFd,
    linger: Linger,
    op: impl FnOnce() -> Value,
) -> Started {
    let staging = tempfile::tempdir().unwrap();
    let zcfg = zygote_config(staging.path());
    let (mut server, sandbox_end) = UnixStream::pair().unwrap();
    let ctrl = sandbox_end.as_raw_fd();
    // Built here, as the zygote builds it before it forks: a child that built it itself could
    // wait forever on a policy `OnceLock` another test thread was initialising at the fork.
    child::SECCOMP_PROGRAM.get_or_init(|| seccomp::build_program().expect("seccomp program"));
    // SAFETY: the child runs the jail's sequence for a forked child and `_exit`s.
    let p0 = unsafe { libc::fork() };
    assert!(p0 >= 0, "fork failed");
    if p0 == 0 {
        let code = (|| {
            // SAFETY: unshare in a single-threaded forked child.
            if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
                return SETUP_FAILED;
            }
            if rootfs::enter_base_root(&zcfg).is_err() {
                return SETUP_FAILED;
            }
            // The driver's output goes to the test's stderr.
            match child::enter(cfg, ctrl, 2, 2, workspace, &[]) {
                Ok(child::Role::Driver) => {
                    let result = json!({"type": "result", "value": op()});
                    if child::write_frame(child::CTRL_FD, result.to_string().as_bytes()).is_err() {
                        return SETUP_FAILED;
                    }
                    if linger == Linger::Forever {
                        loop {
                            // SAFETY: pause has no preconditions.
                            unsafe { libc::pause() };
                        }
                    }
                    0
                }
                Err(err) => {
                    child::report_error(&err);
                    i32::from(sandlot_jail::exit::JAIL_FAILED)
                }
            }
        })();
        // SAFETY: leaving the forked child without running the parent's atexit handlers.
        unsafe { libc::_exit(code) };
    }
    drop(sandbox_end);
    server
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();

    // The server's half of the creation handshake (the runtime also joins a cgroup here).
    let mut byte = [0u8; 1];
    if server.read_exact(&mut byte).is_err() || byte[0] != child::UNSHARED {
        panic!(
            "the sandbox failed before unsharing: exit {}",
            wait_code(p0)
        );
    }
    idmap::write_maps(Path::new("/proc"), p0, host_uid, host_uid).expect("write id maps");
    server.write_all(&[child::GO]).unwrap();
    let init = read_frame(&mut server);
    assert_eq!(init["type"], "init", "first frame: {init}");
    let init = init["pid"].as_i64().expect("the init's pid") as libc::pid_t;
    Started { server, p0, init }
}

/// The next frame of a sandbox's control stream, as JSON.
pub fn read_frame(stream: &mut UnixStream) -> Value {
    let mut header = [0u8; frame::HEADER];
    stream.read_exact(&mut header).expect("read frame header");
    let len = frame::payload_len(header).expect("frame length");
    let mut payload = vec![0u8; len];
    stream.read_exact(&mut payload).expect("read frame payload");
    serde_json::from_slice(&payload).expect("frame is JSON")
}
