//! Real tests of the sandbox's init (P1 in `sandlot_jail::child`): it ends the sandbox when the
//! server's end of the control stream closes (its lifeline), exits with the driver's status
//! otherwise, and never reads the control stream itself.
//!
//! Each case runs in a forked child that plays the server and is a child subreaper, so the
//! init (whose parent P0 exits) becomes its child and its exit status can be read; each uses
//! its own host uid, so the processes it counts on the host are its sandbox's alone.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use crate::common;

use common::sandbox::{read_frame, start, test_config, Linger};
use common::{in_child_value, is_root, skip};
use sandlot_jail::{child, exit, JailConfig};

/// How long the sandbox may take to be gone once the server's end closes.
const GONE_WITHIN: Duration = Duration::from_secs(2);

/// Every layer on, as in production: the init's loop (poll, signalfd, waitpid) runs under its
/// own seccomp filter.
fn all_layers() -> JailConfig {
    JailConfig {
        landlock: true,
        seccomp: true,
        ..test_config()
    }
}

fn require_root() -> bool {
    if !is_root() {
        skip("not root: a sandbox needs a base root and id maps");
        return false;
    }
    true
}

/// Runs `f` in a forked child that is a child subreaper (see the module doc).
fn as_server(f: impl FnOnce() -> Value) -> Value {
    in_child_value(|| {
        // SAFETY: integer-only prctl.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
            return json!({"setup": "subreaper", "errno": common::errno()});
        }
        f()
    })
}

/// Host pids and states (`S`, `Z`, ...) of the processes whose real uid is `uid`.
fn processes_of(uid: u32) -> BTreeMap<i32, String> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_string())
        };
        let ruid = field("Uid:").and_then(|v| v.split_whitespace().next()?.parse::<u32>().ok());
        if ruid == Some(uid) {
            let state = field("State:").unwrap_or_default();
            out.insert(pid, state.chars().take(1).collect());
        }
    }
    out
}

/// Reaps every child until there is none left; their exit codes (`1000 + signal` if killed).
fn reap_all() -> BTreeMap<i32, i32> {
    let mut out = BTreeMap::new();
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a valid out-pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
        if pid < 0 {
            if common::errno() == libc::EINTR {
                continue;
            }
            return out;
        }
        let code = if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            1000 + libc::WTERMSIG(status)
        };
        out.insert(pid, code);
    }
}

fn pause_forever() -> ! {
    loop {
        // SAFETY: pause has no preconditions.
        unsafe { libc::pause() };
    }
}

/// In the driver: two children that sleep forever and an orphan (its parent exits at once, so
/// it is reparented to the init).
fn spawn_sleepers_and_an_orphan() -> Value {
    for orphan in [false, false, true] {
        // SAFETY: fork in the driver of a test sandbox; the child only pauses or forks and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: as above.
            if orphan && unsafe { libc::fork() } != 0 {
                // SAFETY: leaving the orphan's parent at once.
                unsafe { libc::_exit(0) };
            }
            pause_forever();
        }
        if orphan {
            let mut status = 0;
            // SAFETY: waitpid on our own child with a valid out-pointer.
            unsafe { libc::waitpid(pid, &mut status, 0) };
        }
    }
    json!("spawned")
}

#[test]
fn the_servers_hang_up_ends_every_sandbox_process() {
    if !require_root() {
        return;
    }
    const UID: u32 = 3_990_101;
    let got = as_server(|| {
        let mut sb = start(
            &all_layers(),
            UID,
            -1,
            Linger::Forever,
            spawn_sleepers_and_an_orphan,
        );
        let result = read_frame(&mut sb.server);
        let p0 = common::wait_code(sb.p0);
        // The init, the driver, two sleepers and the orphan.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut before = processes_of(UID);
        while before.len() < 5 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
            before = processes_of(UID);
        }
        // The server dies: its end of the control stream closes.
        let hung_up = Instant::now();
        drop(sb.server);
        let statuses = reap_all();
        let elapsed = hung_up.elapsed();
        json!({
            "result": result["value"],
            "p0": p0,
            "before": before.len(),
            "after": processes_of(UID),
            "init status": statuses.get(&sb.init),
            "elapsed_ms": elapsed.as_secs_f64() * 1e3,
        })
    });
    eprintln!(
        "sandbox gone {:.2} ms after the server's hang-up",
        got["elapsed_ms"]
    );
    assert_eq!(got["result"], "spawned");
    assert_eq!(got["p0"], 0);
    assert_eq!(got["before"], 5, "{got}");
    assert_eq!(got["after"], json!({}), "processes left: {got}");
    assert_eq!(got["init status"], i32::from(exit::SERVER_GONE));
    assert!(
        got["elapsed_ms"].as_f64().unwrap() < GONE_WITHIN.as_secs_f64() * 1e3,
        "{got}"
    );
}

#[test]
fn the_init_exits_with_the_drivers_status_and_takes_every_process_with_it() {
    if !require_root() {
        return;
    }
    const UID: u32 = 3_990_102;
    let got = as_server(|| {
        let mut sb = start(&all_layers(), UID, -1, Linger::No, || {
            spawn_sleepers_and_an_orphan();
            let done = json!({"type": "result", "value": "exiting"});
            let _ = child::write_frame(child::CTRL_FD, done.to_string().as_bytes());
            // SAFETY: the driver leaves with a status of its own.
            unsafe { libc::_exit(7) }
        });
        let result = read_frame(&mut sb.server);
        let statuses = reap_all();
        json!({
            "result": result["value"],
            "init status": statuses.get(&sb.init),
            "after": processes_of(UID),
            // The server still holds its end: the stream ends because the sandbox did.
            "stream": sb.server.read(&mut [0u8; 1]).ok(),
        })
    });
    assert_eq!(
        got,
        json!({"result": "exiting", "init status": 7, "after": {}, "stream": 0})
    );
}

#[test]
fn the_init_never_reads_the_control_stream() {
    if !require_root() {
        return;
    }
    const UID: u32 = 3_990_103;
    const LEN: usize = 16 << 10;
    let payload: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
    let expected = payload.clone();
    let got = as_server(|| {
        let mut sb = start(&test_config(), UID, -1, Linger::No, move || {
            // The init is in its loop by now (the driver runs only once the init is confined);
            // give it every chance to take bytes that are not its own.
            std::thread::sleep(Duration::from_millis(50));
            let mut buf = vec![0u8; LEN];
            // SAFETY: fd 3 is the driver's control stream; ManuallyDrop keeps it open.
            let mut ctrl = std::mem::ManuallyDrop::new(unsafe {
                <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(child::CTRL_FD)
            });
            match ctrl.read_exact(&mut buf) {
                Ok(()) => json!({"intact": buf == expected}),
                Err(e) => json!({"read": e.to_string()}),
            }
        });
        sb.server.write_all(&payload).unwrap();
        let result = read_frame(&mut sb.server);
        reap_all();
        result["value"].clone()
    });
    assert_eq!(got, json!({"intact": true}));
}
