//! Real tests of the resource-limit layer (`sandlot_jail::rlimits`): a forked child applies the
//! limits and reads them back with `getrlimit`, then goes past each one and gets the exact
//! signal or errno; one case checks the limits a real sandbox's driver runs with.

use serde_json::{json, Value};
use std::io::Write;

use crate::common;

use common::sandbox::{in_sandbox, test_config};
use common::{in_child, in_child_value, is_root, skip, SETUP_FAILED};
use sandlot_jail::caps;
use sandlot_jail::config::{JailConfig, RlimitConfig};
use sandlot_jail::rlimits;

/// Limits small enough to reach in a test, none equal to a default.
fn small() -> RlimitConfig {
    RlimitConfig {
        nofile: 48,
        fsize: 40_000,
        core: 0,
        stack: 3 << 20,
    }
}

/// `[soft, hard]` of `resource` in the calling process.
fn limits(resource: libc::__rlimit_resource_t) -> Value {
    // SAFETY: all-zero is a valid rlimit.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    if unsafe { libc::getrlimit(resource, &mut lim) } != 0 {
        return json!({"errno": common::errno()});
    }
    json!([lim.rlim_cur, lim.rlim_max])
}

fn all_limits() -> Value {
    json!({
        "nofile": limits(libc::RLIMIT_NOFILE),
        "fsize": limits(libc::RLIMIT_FSIZE),
        "core": limits(libc::RLIMIT_CORE),
        "stack": limits(libc::RLIMIT_STACK),
    })
}

fn expected(cfg: &RlimitConfig) -> Value {
    json!({
        "nofile": [cfg.nofile, cfg.nofile],
        "fsize": [cfg.fsize, cfg.fsize],
        "core": [cfg.core, cfg.core],
        "stack": [cfg.stack, cfg.stack],
    })
}

/// Applies `cfg` in the child; exits it if that fails.
fn apply_or_exit(cfg: &RlimitConfig) {
    if rlimits::apply(cfg).is_err() {
        // SAFETY: exiting the forked child.
        unsafe { libc::_exit(SETUP_FAILED) };
    }
}

#[test]
fn apply_sets_soft_and_hard_limits_exactly() {
    let cfg = small();
    let got = in_child_value(|| {
        apply_or_exit(&cfg);
        all_limits()
    });
    assert_eq!(got, expected(&cfg));
}

#[test]
fn writing_past_fsize_is_sigxfsz() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big");
    let cfg = small();
    let code = in_child(|| {
        apply_or_exit(&cfg);
        let Ok(mut f) = std::fs::File::create(&path) else {
            return SETUP_FAILED;
        };
        let _ = f.write_all(&vec![0u8; cfg.fsize as usize + 1]);
        0
    });
    assert_eq!(code, 1000 + libc::SIGXFSZ);
    // The limit stopped the file at its size, not one byte later.
    assert_eq!(std::fs::metadata(&path).unwrap().len(), cfg.fsize);
}

#[test]
fn writing_past_fsize_with_sigxfsz_ignored_is_efbig() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big");
    let cfg = small();
    let got = in_child_value(|| {
        apply_or_exit(&cfg);
        // SAFETY: installing SIG_IGN runs no handler code.
        unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
        let Ok(mut f) = std::fs::File::create(&path) else {
            return json!("create failed");
        };
        let buf = vec![0u8; cfg.fsize as usize + 100];
        let first = f.write(&buf).map_err(|e| e.raw_os_error());
        let second = f.write(&buf[..1]).map_err(|e| e.raw_os_error());
        json!({"first": first.ok(), "second": second.err()})
    });
    // The first write stops at the limit; the next one is refused.
    assert_eq!(got, json!({"first": cfg.fsize, "second": libc::EFBIG}));
}

#[test]
fn opening_past_nofile_is_emfile() {
    let cfg = small();
    let code = in_child(|| {
        // Only 0-2 open, so the descriptors below are exactly 3, 4, ...
        // SAFETY: closes every inherited descriptor above stderr; none is used afterwards.
        if unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) } != 0 {
            return SETUP_FAILED;
        }
        apply_or_exit(&cfg);
        let mut last = -1;
        loop {
            // SAFETY: duplicating stdin; the descriptors are left to the child's exit.
            let fd = unsafe { libc::dup(0) };
            if fd < 0 {
                return if common::errno() == libc::EMFILE {
                    last
                } else {
                    200
                };
            }
            last = fd;
        }
    });
    // Descriptors 0 to nofile - 1 exist, then EMFILE.
    assert_eq!(code, cfg.nofile as i32 - 1);
}

#[test]
fn raising_a_limit_without_privilege_fails_with_its_step() {
    let got = in_child_value(|| {
        apply_or_exit(&small());
        if caps::drop_all().is_err() {
            return json!("dropping capabilities failed");
        }
        // The default config raises nofile above the hard limit just set.
        match rlimits::apply(&RlimitConfig::default()) {
            Ok(()) => json!("raised"),
            Err(e) => json!({"step": e.step(), "errno": e.errno()}),
        }
    });
    assert_eq!(got, json!({"step": "setrlimit", "errno": libc::EPERM}));
}

#[test]
fn sandbox_driver_runs_with_the_configured_limits() {
    if !is_root() {
        skip("not root: a sandbox needs a base root and id maps");
        return;
    }
    let cfg = JailConfig {
        rlimits: small(),
        ..test_config()
    };
    let rl = cfg.rlimits.clone();
    let got = in_sandbox(&cfg, || {
        // SAFETY: installing SIG_IGN runs no handler code.
        unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
        let efbig = std::fs::write("/workspace/big", vec![0u8; rl.fsize as usize + 1])
            .err()
            .and_then(|e| e.raw_os_error());
        json!({"limits": all_limits(), "write past fsize": efbig})
    });
    assert_eq!(
        got,
        json!({"limits": expected(&cfg.rlimits), "write past fsize": libc::EFBIG})
    );
}

/// The hard limit of `resource` in this (the test's) process: what a sandbox inherits.
fn inherited_hard(resource: libc::__rlimit_resource_t) -> u64 {
    // SAFETY: all-zero is a valid rlimit.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { libc::getrlimit(resource, &mut lim) }, 0);
    lim.rlim_max
}

/// `/proc/<pid>/limits` as `{"Max address space": [soft, hard], ...}`, `unlimited` as
/// `RLIM_INFINITY`.
fn proc_limits(pid: &str) -> Value {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap_or_default();
    let mut out = serde_json::Map::new();
    for line in text.lines().skip(1) {
        // Columns: name (padded to 26), soft (21), hard (21), units.
        let (name, rest) = line.split_at(26.min(line.len()));
        let mut values = rest.split_whitespace().map(|v| match v {
            "unlimited" => libc::RLIM_INFINITY,
            n => n.parse().unwrap_or(u64::MAX - 1),
        });
        let (soft, hard) = (values.next(), values.next());
        out.insert(name.trim().to_string(), json!([soft, hard]));
    }
    Value::Object(out)
}

#[test]
fn sandbox_processes_run_with_every_hard_limit_finite_but_cpu() {
    if !is_root() {
        skip("not root: a sandbox needs a base root and id maps");
        return;
    }
    let got = in_sandbox(&test_config(), || {
        json!({
            "driver": {
                "as": limits(libc::RLIMIT_AS),
                "data": limits(libc::RLIMIT_DATA),
                "rss": limits(libc::RLIMIT_RSS),
                "nproc": limits(libc::RLIMIT_NPROC),
                "sigpending": limits(libc::RLIMIT_SIGPENDING),
                "msgqueue": limits(libc::RLIMIT_MSGQUEUE),
                "memlock": limits(libc::RLIMIT_MEMLOCK),
                "locks": limits(libc::RLIMIT_LOCKS),
                "nice": limits(libc::RLIMIT_NICE),
                "rtprio": limits(libc::RLIMIT_RTPRIO),
                "rttime": limits(libc::RLIMIT_RTTIME),
                "cpu": limits(libc::RLIMIT_CPU),
            },
            "init": proc_limits("1"),
        })
    });
    // The documented values (SECURITY.md), or the test's own hard limit where that is lower:
    // a sandbox can lower a limit, never raise one.
    let at_most = |value: u64, resource| {
        let v = value.min(inherited_hard(resource));
        json!([v, v])
    };
    let inf = libc::RLIM_INFINITY;
    let expected = json!({
        "as": at_most(1 << 40, libc::RLIMIT_AS),
        "data": at_most(1 << 40, libc::RLIMIT_DATA),
        "rss": at_most(1 << 40, libc::RLIMIT_RSS),
        "nproc": at_most(16_384, libc::RLIMIT_NPROC),
        "sigpending": at_most(4096, libc::RLIMIT_SIGPENDING),
        "msgqueue": at_most(819_200, libc::RLIMIT_MSGQUEUE),
        "memlock": at_most(8 << 20, libc::RLIMIT_MEMLOCK),
        "locks": at_most(4096, libc::RLIMIT_LOCKS),
        "nice": at_most(0, libc::RLIMIT_NICE),
        "rtprio": at_most(0, libc::RLIMIT_RTPRIO),
        "rttime": at_most(1_000_000, libc::RLIMIT_RTTIME),
        // Unlimited on purpose: see `rlimits::FIXED` and SECURITY.md.
        "cpu": [inf, inf],
    });
    assert_eq!(got["driver"], expected);
    // The init runs under the same limits (it is not user code, but /proc/1/limits is
    // readable inside).
    let init = &got["init"];
    for (name, key) in [
        ("Max address space", "as"),
        ("Max data size", "data"),
        ("Max processes", "nproc"),
        ("Max pending signals", "sigpending"),
        ("Max file locks", "locks"),
        ("Max cpu time", "cpu"),
    ] {
        assert_eq!(init[name], expected[key], "init: {name}");
    }
    let cfg = test_config().rlimits;
    assert_eq!(init["Max open files"], json!([cfg.nofile, cfg.nofile]));
}
