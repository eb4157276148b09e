//! Real tests of the base root layer (`sandlot_jail::rootfs`): a forked child builds a zygote's
//! base root in a private mount namespace and pivots onto it, then checks what is there and
//! what can be written, with the exact errno. First as root (the launcher's view: read-only
//! even for root), then from inside a real sandbox (uid 1000 in its user namespace).

use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::ffi::CString;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use crate::common;

use common::sandbox::{in_base_root, in_base_root_with, in_sandbox, test_config, OVERFLOW_UID};
use common::{errno_of, is_root, skip};
use sandlot_jail::config::Bind;
use sandlot_jail::rootfs;

fn c(path: &str) -> CString {
    CString::new(path).unwrap()
}

/// errno of `open(path, flags)` (0: it opened).
fn open_errno(path: &str, flags: libc::c_int) -> i32 {
    let p = c(path);
    // SAFETY: valid C string; the descriptor is left to the child's exit.
    errno_of(unsafe { libc::open(p.as_ptr(), flags | libc::O_CLOEXEC, 0o644) } as _)
}

fn mkdir_errno(path: &str) -> i32 {
    let p = c(path);
    // SAFETY: valid C string.
    errno_of(unsafe { libc::mkdir(p.as_ptr(), 0o755) } as _)
}

fn mknod_errno(path: &str) -> i32 {
    let p = c(path);
    // SAFETY: valid C string; a character device 1:3 (null) if it were allowed.
    errno_of(unsafe { libc::mknod(p.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) } as _)
}

/// `statvfs(path).f_flag`, or -errno.
fn mount_flags(path: &str) -> i64 {
    let p = c(path);
    // SAFETY: all-zero is a valid statvfs.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid C string and out-pointer.
    if unsafe { libc::statvfs(p.as_ptr(), &mut st) } != 0 {
        return -i64::from(common::errno());
    }
    st.f_flag as i64
}

fn names(dir: &str) -> Value {
    let mut v: Vec<String> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(e) => return json!({"error": e.raw_os_error()}),
    };
    v.sort();
    json!(v)
}

/// The filesystem types of the mounts whose mount point is `/`, from `/proc/self/mountinfo`.
fn root_mounts() -> Value {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let types: Vec<&str> = info
        .lines()
        .filter(|l| l.split(' ').nth(4) == Some("/"))
        .filter_map(|l| l.split(" - ").nth(1)?.split(' ').next())
        .collect();
    json!(types)
}

fn require_root() -> bool {
    if !is_root() {
        skip("not root: the base root needs mount privileges");
        return false;
    }
    true
}

#[test]
fn base_root_is_read_only_even_for_root() {
    if !require_root() {
        return;
    }
    let got = in_base_root(|| {
        json!({
            "create /x": open_errno("/x", libc::O_WRONLY | libc::O_CREAT),
            "mkdir /x": mkdir_errno("/x"),
            "create /usr/x": open_errno("/usr/x", libc::O_WRONLY | libc::O_CREAT),
            "write /usr/bin/env": open_errno("/usr/bin/env", libc::O_WRONLY),
            "write /etc/passwd": open_errno("/etc/passwd", libc::O_WRONLY),
            "create /etc/x": open_errno("/etc/x", libc::O_WRONLY | libc::O_CREAT),
            "mknod /dev/x": mknod_errno("/dev/x"),
            "create /workspace/x": open_errno("/workspace/x", libc::O_WRONLY | libc::O_CREAT),
            // Control: the zygote's own /tmp is writable.
            "create /tmp/x": open_errno("/tmp/x", libc::O_WRONLY | libc::O_CREAT),
        })
    });
    let erofs = libc::EROFS;
    assert_eq!(
        got,
        json!({
            "create /x": erofs,
            "mkdir /x": erofs,
            "create /usr/x": erofs,
            "write /usr/bin/env": erofs,
            "write /etc/passwd": erofs,
            "create /etc/x": erofs,
            "mknod /dev/x": erofs,
            "create /workspace/x": erofs,
            "create /tmp/x": 0,
        })
    );
}

#[test]
fn base_mounts_are_read_only_nosuid_nodev() {
    if !require_root() {
        return;
    }
    let paths = [
        "/",
        "/usr",
        "/etc/ld.so.cache",
        "/dev",
        "/dev/null",
        "/tmp",
        "/proc",
    ];
    let got = in_base_root(|| {
        let flags: serde_json::Map<String, Value> = paths
            .iter()
            .map(|p| (p.to_string(), json!(mount_flags(p))))
            .collect();
        Value::Object(flags)
    });
    let flags = |p: &str| {
        let f = got[p].as_i64().unwrap();
        assert!(f >= 0, "statvfs {p}: errno {}", -f);
        f as libc::c_ulong
    };
    let has = |p: &str, want: libc::c_ulong| {
        assert_eq!(flags(p) & want, want, "{p}: flags {:#x}", flags(p));
    };
    let (ro, nosuid, nodev, noexec) = (
        libc::ST_RDONLY,
        libc::ST_NOSUID,
        libc::ST_NODEV,
        libc::ST_NOEXEC,
    );
    for p in ["/", "/usr", "/etc/ld.so.cache"] {
        has(p, ro | nosuid | nodev);
    }
    // /dev must allow device nodes; it is read-only and nosuid, each node also noexec.
    has("/dev", ro | nosuid);
    has("/dev/null", nosuid | noexec);
    has("/tmp", nosuid | nodev);
    assert_eq!(flags("/tmp") & ro, 0, "the zygote's /tmp is writable");
    has("/proc", nosuid | nodev | noexec);
}

#[test]
fn etc_holds_only_the_allowlist_and_the_generated_files() {
    if !require_root() {
        return;
    }
    let got = in_base_root(|| {
        json!({
            "etc": names("/etc"),
            "passwd": std::fs::read_to_string("/etc/passwd").ok(),
            "resolv.conf": std::fs::read_to_string("/etc/resolv.conf").ok(),
            "profile": std::fs::read_to_string("/etc/profile").ok(),
        })
    });
    // What the host has of the allowlist, plus the files the base root writes itself.
    let mut expected: BTreeSet<String> = rootfs::ETC_ENTRIES
        .iter()
        .filter(|n| std::fs::symlink_metadata(Path::new("/etc").join(n)).is_ok())
        .map(|n| n.to_string())
        .collect();
    for generated in [
        "passwd",
        "group",
        "hostname",
        "hosts",
        "resolv.conf",
        "profile",
    ] {
        expected.insert(generated.into());
    }
    let etc: BTreeSet<String> = serde_json::from_value(got["etc"].clone()).unwrap();
    assert_eq!(etc, expected);
    for secret in [
        "shadow",
        "gshadow",
        "sudoers",
        "ssh",
        "machine-id",
        "crontab",
    ] {
        assert!(!etc.contains(secret), "/etc/{secret} is visible");
    }
    // The generated passwd knows only root, the sandbox user and nobody, never the host's users.
    let passwd = got["passwd"].as_str().unwrap();
    let users: Vec<&str> = passwd
        .lines()
        .map(|l| l.split(':').next().unwrap())
        .collect();
    assert_eq!(users, ["root", "user", "nobody"]);
    assert!(passwd.contains(":1000:1000:"), "{passwd}");
    assert_eq!(
        got["resolv.conf"], "",
        "no resolver: the sandbox has no network"
    );
    // Sandlot's own profile: a login shell keeps the sandbox's PATH (the host's resets it).
    let profile = got["profile"].as_str().unwrap();
    assert!(!profile.contains("PATH"), "{profile}");
    assert!(profile.contains("/etc/bash.bashrc"), "{profile}");
    assert!(profile.contains("sudo()"), "{profile}");
}

#[test]
fn dev_holds_only_the_minimal_nodes() {
    if !require_root() {
        return;
    }
    let got = in_base_root(|| {
        let rdev: serde_json::Map<String, Value> = rootfs::DEV_NODES
            .iter()
            .map(|n| {
                let m = std::fs::metadata(Path::new("/dev").join(n));
                let v = match m {
                    Ok(m) if m.file_type().is_char_device() => json!(m.rdev()),
                    Ok(_) => json!("not a character device"),
                    Err(e) => json!(e.raw_os_error()),
                };
                (n.to_string(), v)
            })
            .collect();
        json!({"dev": names("/dev"), "rdev": rdev, "shm": names("/dev/shm")})
    });
    let dev: BTreeSet<String> = serde_json::from_value(got["dev"].clone()).unwrap();
    let expected: BTreeSet<String> = rootfs::DEV_NODES
        .iter()
        .copied()
        .chain(["shm", "pts", "ptmx", "fd", "stdin", "stdout", "stderr"])
        .map(String::from)
        .collect();
    assert_eq!(dev, expected);
    // Each node is the host's own device, not a look-alike.
    for node in rootfs::DEV_NODES {
        let host = std::fs::metadata(Path::new("/dev").join(node)).unwrap();
        assert_eq!(got["rdev"][node], json!(host.rdev()), "/dev/{node}");
    }
    assert_eq!(got["shm"], json!([]));
}

#[test]
fn host_files_and_the_old_root_are_gone() {
    if !require_root() {
        return;
    }
    let here = env!("CARGO_MANIFEST_DIR");
    let got = in_base_root(|| {
        json!({
            "/root": names("/root"),
            "/sys": open_errno("/sys", libc::O_RDONLY),
            "/etc/shadow": open_errno("/etc/shadow", libc::O_RDONLY),
            "/var/log": open_errno("/var/log", libc::O_RDONLY),
            "this source tree": open_errno(here, libc::O_RDONLY),
            "/home": names("/home"),
            // The old root is detached: the only mount at "/" is the base root's tmpfs.
            "mounts at /": root_mounts(),
        })
    });
    let enoent = libc::ENOENT;
    // The host's /root is not there: the base root's own, empty (E2B's contexts may work in it).
    assert_eq!(got["/root"], json!([]));
    assert_eq!(got["/sys"], enoent);
    assert_eq!(got["/etc/shadow"], enoent);
    assert_eq!(got["/var/log"], enoent);
    assert_eq!(got["this source tree"], enoent);
    // Only E2B's home: the mount point each sandbox binds its workspace on.
    assert_eq!(got["/home"], json!(["user"]));
    assert_eq!(got["mounts at /"], json!(["tmpfs"]));
}

#[test]
fn sandbox_sees_the_base_root_read_only_and_owned_by_nobody() {
    if !require_root() {
        return;
    }
    let got = in_sandbox(&test_config(), || {
        let owner = std::fs::metadata("/etc/passwd").map(|m| m.uid()).ok();
        json!({
            "create /x": open_errno("/x", libc::O_WRONLY | libc::O_CREAT),
            "mkdir /usr/x": mkdir_errno("/usr/x"),
            "create /etc/x": open_errno("/etc/x", libc::O_WRONLY | libc::O_CREAT),
            "write /etc/passwd": open_errno("/etc/passwd", libc::O_WRONLY),
            "write /usr/bin/env": open_errno("/usr/bin/env", libc::O_WRONLY),
            "mknod /dev/x": mknod_errno("/dev/x"),
            "owner of /etc/passwd": owner,
            // Control: the sandbox's own workspace is writable.
            "create /workspace/x": open_errno("/workspace/x", libc::O_WRONLY | libc::O_CREAT),
        })
    });
    assert_eq!(
        got,
        json!({
            // Creating anything outside the writable mounts: the mount is read-only.
            "create /x": libc::EROFS,
            "mkdir /usr/x": libc::EROFS,
            "create /etc/x": libc::EROFS,
            // Existing files belong to an unmapped uid, so permission fails first.
            "write /etc/passwd": libc::EACCES,
            "write /usr/bin/env": libc::EACCES,
            "mknod /dev/x": libc::EROFS,
            "owner of /etc/passwd": OVERFLOW_UID,
            "create /workspace/x": 0,
        })
    );
}

#[test]
fn configured_dirs_appear_read_only_and_name_no_host_path() {
    if !require_root() {
        return;
    }
    // A stand-in for the server's data dir: its lib dir and an environment under it.
    let data = tempfile::tempdir().unwrap();
    let (lib, env) = (data.path().join("lib"), data.path().join("envs/abc"));
    std::fs::create_dir_all(lib.join("python")).unwrap();
    std::fs::create_dir_all(env.join("bin")).unwrap();
    std::fs::write(lib.join("python/mod.py"), "x = 1\n").unwrap();
    std::fs::write(env.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
    // Listed child first: the base root mounts a parent before what nests in it.
    let binds = vec![
        Bind {
            source: env.clone(),
            target: "/opt/sandlot/env".into(),
        },
        Bind {
            source: lib.clone(),
            target: "/opt/sandlot".into(),
        },
    ];
    let got = in_base_root_with(binds, || {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let entry = |point: &str| {
            mountinfo
                .lines()
                .find(|l| l.split(' ').nth(4) == Some(point))
                .map(|l| {
                    let f: Vec<&str> = l.split(' ').collect();
                    json!({"root": f[3], "type": l.split(" - ").nth(1).and_then(|t| t.split(' ').next())})
                })
        };
        json!({
            "/opt/sandlot": names("/opt/sandlot"),
            "/opt/sandlot/env": names("/opt/sandlot/env"),
            "mod.py": std::fs::read_to_string("/opt/sandlot/python/mod.py").ok(),
            "pyvenv.cfg": std::fs::read_to_string("/opt/sandlot/env/pyvenv.cfg").ok(),
            "create in lib": open_errno("/opt/sandlot/x", libc::O_WRONLY | libc::O_CREAT),
            "create in env": open_errno("/opt/sandlot/env/x", libc::O_WRONLY | libc::O_CREAT),
            "lib flags": mount_flags("/opt/sandlot"),
            "env flags": mount_flags("/opt/sandlot/env"),
            "lib mount": entry("/opt/sandlot"),
            "env mount": entry("/opt/sandlot/env"),
            "mountinfo": mountinfo,
        })
    });
    assert_eq!(got["/opt/sandlot"], json!(["env", "python"]));
    assert_eq!(got["/opt/sandlot/env"], json!(["bin", "pyvenv.cfg"]));
    assert_eq!(got["mod.py"], "x = 1\n");
    assert_eq!(got["pyvenv.cfg"], "home = /usr/bin\n");
    assert_eq!(got["create in lib"], libc::EROFS);
    assert_eq!(got["create in env"], libc::EROFS);
    let want = libc::ST_RDONLY | libc::ST_NOSUID | libc::ST_NODEV;
    for key in ["lib flags", "env flags"] {
        let flags = got[key].as_i64().unwrap() as libc::c_ulong;
        assert_eq!(flags & want, want, "{key}: {flags:#x}");
    }
    // Each is an overlay rooted at "/": the mount table names no host path.
    for key in ["lib mount", "env mount"] {
        assert_eq!(got[key], json!({"root": "/", "type": "overlay"}), "{key}");
    }
    let mountinfo = got["mountinfo"].as_str().unwrap();
    let host = data.path().to_str().unwrap();
    assert!(!mountinfo.contains(host), "{host} in:\n{mountinfo}");
}
