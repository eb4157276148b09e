//! Real tests of the sandbox's own mounts (`sandlot_jail::mounts`): each case starts a real
//! sandbox (base root, user, mount and pid namespaces, the real containment sequence with
//! seccomp and Landlock off) and checks its mounts from inside: the tmpfs instances' byte and
//! inode caps, `ENOSPC` exactly at them, `nosuid`/`nodev`; a disk workspace (a detached mount
//! of a host directory) moved onto `/workspace`; a `/proc` that shows only the sandbox's own
//! processes, with its kernel-information files masked.

use serde_json::{json, Value};
use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::common;

use common::sandbox::{in_sandbox, in_sandbox_with_workspace, test_config, HOST_UID};
use common::{is_root, skip};
use sandlot_jail::config::{JailConfig, INSIDE_UID};
use sandlot_jail::mounts;

/// The mounts and their caps as `test_config` sets them; `/tmp` and `/dev/shm` have fixed
/// inode caps in `mounts`.
fn writable(cfg: &JailConfig) -> [(&'static str, u64, u64); 3] {
    [
        ("/workspace", cfg.workspace_bytes, cfg.workspace_inodes),
        ("/tmp", cfg.tmp_bytes, 65536),
        ("/dev/shm", cfg.shm_bytes, 4096),
    ]
}

const TMPFS_MAGIC: libc::__fsword_t = 0x0102_1994;

/// `statvfs` and `statfs` of `path` as JSON.
fn fs_info(path: &str) -> Value {
    let p = CString::new(path).unwrap();
    // SAFETY: all-zero is a valid statvfs and statfs.
    let (mut v, mut f): (libc::statvfs, libc::statfs) = unsafe { std::mem::zeroed() };
    // SAFETY: valid C string and out-pointers, for both calls.
    let rc = unsafe { libc::statvfs(p.as_ptr(), &mut v) | libc::statfs(p.as_ptr(), &mut f) };
    if rc != 0 {
        return json!({"errno": common::errno()});
    }
    let meta = std::fs::metadata(path).ok();
    json!({
        "type": f.f_type,
        "bytes": v.f_blocks * v.f_frsize,
        "inodes": v.f_files,
        "flags": v.f_flag,
        "uid": meta.as_ref().map(|m| m.uid()),
        "mode": meta.as_ref().map(|m| m.mode()),
    })
}

/// Writes one file in `dir` in 64 KiB chunks until a write fails; the bytes written and the
/// errno of the failed write.
fn fill_with_bytes(dir: &str) -> Value {
    let mut file = match std::fs::File::create(format!("{dir}/fill")) {
        Ok(f) => f,
        Err(e) => return json!({"create": e.raw_os_error()}),
    };
    let chunk = vec![0x5a_u8; 64 << 10];
    let mut written: u64 = 0;
    loop {
        match file.write(&chunk) {
            Ok(0) => return json!({"written": written, "errno": 0}),
            Ok(n) => written += n as u64,
            Err(e) => return json!({"written": written, "errno": e.raw_os_error()}),
        }
    }
}

/// Creates empty files in `dir` until one fails; how many were created and the errno, then the
/// errno of a `mkdir` once full.
fn fill_with_inodes(dir: &str) -> Value {
    let mut created = 0u64;
    loop {
        match std::fs::File::create(format!("{dir}/f{created}")) {
            Ok(_) => created += 1,
            Err(e) => {
                let mkdir = std::fs::create_dir(format!("{dir}/d")).err();
                return json!({
                    "created": created,
                    "errno": e.raw_os_error(),
                    "mkdir": mkdir.and_then(|e| e.raw_os_error()),
                });
            }
        }
    }
}

fn require_root() -> bool {
    if !is_root() {
        skip("not root: a sandbox needs a base root and id maps");
        return false;
    }
    true
}

#[test]
fn writable_mounts_are_tmpfs_with_the_configured_caps_nosuid_nodev() {
    if !require_root() {
        return;
    }
    let cfg = test_config();
    let got = in_sandbox(&cfg, || {
        json!({
            "/workspace": fs_info("/workspace"),
            "/tmp": fs_info("/tmp"),
            "/dev/shm": fs_info("/dev/shm"),
        })
    });
    for (path, bytes, inodes) in writable(&cfg) {
        let info = &got[path];
        assert_eq!(info["type"], TMPFS_MAGIC, "{path}: {info}");
        assert_eq!(info["bytes"], bytes, "{path}: {info}");
        assert_eq!(info["inodes"], inodes, "{path}: {info}");
        let flags = info["flags"].as_u64().unwrap() as libc::c_ulong;
        let want = libc::ST_NOSUID | libc::ST_NODEV;
        assert_eq!(flags & want, want, "{path}: flags {flags:#x}");
        assert_eq!(flags & libc::ST_RDONLY, 0, "{path} is writable");
    }
    assert_eq!(got["/workspace"]["uid"], INSIDE_UID);
    assert_eq!(got["/workspace"]["mode"], libc::S_IFDIR | 0o755);
    assert_eq!(got["/tmp"]["mode"], libc::S_IFDIR | 0o1777);
    assert_eq!(got["/dev/shm"]["mode"], libc::S_IFDIR | 0o1777);
}

#[test]
fn each_writable_mount_gives_enospc_exactly_at_its_byte_cap() {
    if !require_root() {
        return;
    }
    let cfg = test_config();
    let got = in_sandbox(&cfg, || {
        json!({
            "/workspace": fill_with_bytes("/workspace"),
            "/tmp": fill_with_bytes("/tmp"),
            "/dev/shm": fill_with_bytes("/dev/shm"),
        })
    });
    for (path, bytes, _) in writable(&cfg) {
        assert_eq!(
            got[path],
            json!({"written": bytes, "errno": libc::ENOSPC}),
            "{path}"
        );
    }
}

#[test]
fn workspace_gives_enospc_at_its_inode_cap() {
    if !require_root() {
        return;
    }
    let cfg = test_config();
    let got = in_sandbox(&cfg, || fill_with_inodes("/workspace"));
    // The mount's root directory takes one inode of the cap.
    assert_eq!(
        got,
        json!({
            "created": cfg.workspace_inodes - 1,
            "errno": libc::ENOSPC,
            "mkdir": libc::ENOSPC,
        })
    );
}

#[test]
fn dev_shm_gives_enospc_at_its_inode_cap() {
    if !require_root() {
        return;
    }
    let cfg = JailConfig {
        // Room for the inodes, so the inode cap is what stops the writes.
        shm_bytes: 64 << 20,
        ..test_config()
    };
    let got = in_sandbox(&cfg, || fill_with_inodes("/dev/shm"));
    assert_eq!(
        got,
        json!({"created": 4095, "errno": libc::ENOSPC, "mkdir": libc::ENOSPC})
    );
}

#[test]
fn proc_shows_only_the_sandboxs_pid_namespace() {
    if !require_root() {
        return;
    }
    let got = in_sandbox(&test_config(), || {
        let mut pids: Vec<u32> = std::fs::read_dir("/proc")
            .map(|rd| {
                rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        pids.sort_unstable();
        json!({
            "pids": pids,
            "self": std::fs::read_link("/proc/self").ok(),
            "init": std::fs::read_to_string("/proc/1/status")
                .ok()
                .and_then(|s| s.lines().find(|l| l.starts_with("PPid:")).map(String::from)),
            "proc": fs_info("/proc"),
        })
    });
    // Pid 1 is the sandbox's init, pid 2 the driver; nothing of the host.
    assert_eq!(got["pids"], json!([1, 2]));
    assert_eq!(got["self"], "2");
    assert_eq!(got["init"], "PPid:\t0");
    let flags = got["proc"]["flags"].as_u64().unwrap() as libc::c_ulong;
    let want = libc::ST_NOSUID | libc::ST_NODEV | libc::ST_NOEXEC;
    assert_eq!(flags & want, want, "/proc flags {flags:#x}");
}

/// A detached copy of the mount of `dir` (`open_tree(OPEN_TREE_CLONE)` in the host's mount
/// namespace), as the runtime makes a sandbox's disk workspace; without nosuid and nodev, so
/// that the jail is seen to force them itself.
fn detached_tree(dir: &Path) -> OwnedFd {
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    let path = CString::new(dir.as_os_str().as_bytes()).unwrap();
    // SAFETY: open_tree(2) with a NUL-terminated path; returns a new fd or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint,
        )
    };
    assert!(fd >= 0, "open_tree: errno {}", common::errno());
    // SAFETY: the kernel just returned this fd and nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

#[test]
fn disk_workspace_is_moved_in_nosuid_nodev_and_writes_land_on_the_host() {
    if !require_root() {
        return;
    }
    let host = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(host.path(), Some(HOST_UID), Some(HOST_UID)).unwrap();
    let tree = detached_tree(host.path());
    let got = in_sandbox_with_workspace(&test_config(), tree.as_raw_fd(), || {
        let written = std::fs::write("/workspace/from-inside", b"hello")
            .err()
            .and_then(|e| e.raw_os_error());
        // SAFETY: F_GETFD on a number; no memory is passed.
        let fd4 = unsafe { libc::fcntl(4, libc::F_GETFD) };
        json!({
            "info": fs_info("/workspace"),
            "write errno": written,
            "fd 4": if fd4 < 0 { json!(common::errno()) } else { json!("open") },
            "cwd": std::env::current_dir().ok(),
        })
    });
    drop(tree);
    // SAFETY: all-zero is a valid statfs.
    let mut host_fs: libc::statfs = unsafe { std::mem::zeroed() };
    let c_host = CString::new(host.path().as_os_str().as_bytes()).unwrap();
    // SAFETY: valid C string and out-pointer.
    assert_eq!(unsafe { libc::statfs(c_host.as_ptr(), &mut host_fs) }, 0);
    let info = &got["info"];
    // The host directory's own filesystem, seen as the sandbox user's, writable.
    assert_eq!(info["type"], json!(host_fs.f_type), "{info}");
    assert_eq!(info["uid"], INSIDE_UID);
    let flags = info["flags"].as_u64().unwrap() as libc::c_ulong;
    let want = libc::ST_NOSUID | libc::ST_NODEV;
    assert_eq!(flags & want, want, "/workspace flags {flags:#x}");
    assert_eq!(flags & libc::ST_RDONLY, 0, "/workspace is writable");
    assert_eq!(got["write errno"], Value::Null);
    assert_eq!(got["cwd"], "/workspace");
    // P0 closed the mount's fd before anything else ran.
    assert_eq!(got["fd 4"], libc::EBADF);
    // The file is on the host, owned by the sandbox's host uid.
    let file = host.path().join("from-inside");
    assert_eq!(std::fs::read(&file).unwrap(), b"hello");
    let meta = std::fs::metadata(&file).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (HOST_UID, HOST_UID));
}

/// What reading `path` gives: its length, or the errno.
fn read_outcome(path: &str) -> Value {
    match std::fs::read(path) {
        Ok(bytes) => json!({"len": bytes.len()}),
        Err(e) => json!(e.raw_os_error()),
    }
}

/// errno of `open(path, flags)` (0: it opened).
fn open_errno(path: &str, flags: libc::c_int) -> i32 {
    let p = CString::new(path).unwrap();
    // SAFETY: valid C string; the descriptor is left to the child's exit.
    let fd = unsafe { libc::open(p.as_ptr(), flags | libc::O_CLOEXEC, 0o644) };
    if fd < 0 {
        common::errno()
    } else {
        0
    }
}

fn names(dir: &str) -> Value {
    match std::fs::read_dir(dir) {
        Ok(rd) => {
            let mut v: Vec<String> = rd
                .filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
                .collect();
            v.sort();
            json!(v)
        }
        Err(e) => json!(e.raw_os_error()),
    }
}

#[test]
fn proc_kernel_information_is_masked() {
    if !require_root() {
        return;
    }
    let got = in_sandbox(&test_config(), || {
        let files: serde_json::Map<String, Value> = mounts::MASKED_FILES
            .iter()
            .map(|p| (p.to_string(), read_outcome(p)))
            .collect();
        let dirs: serde_json::Map<String, Value> = mounts::MASKED_DIRS
            .iter()
            .map(|p| {
                let v = json!({
                    "names": names(p),
                    "create": open_errno(&format!("{p}/x"), libc::O_WRONLY | libc::O_CREAT),
                });
                (p.to_string(), v)
            })
            .collect();
        let read_only: serde_json::Map<String, Value> = mounts::READ_ONLY
            .iter()
            .map(|p| (p.to_string(), json!(fs_info(p)["flags"])))
            .collect();
        json!({
            "files": files,
            "dirs": dirs,
            "read-only flags": read_only,
            // Writing a sysctl: permission refuses a plain write first; a truncating one (as
            // `open(p, "w")` and `echo >` do) meets the read-only mount first.
            "write hostname": open_errno("/proc/sys/kernel/hostname", libc::O_WRONLY),
            "truncate hostname": open_errno(
                "/proc/sys/kernel/hostname",
                libc::O_WRONLY | libc::O_TRUNC
            ),
            "read ostype": std::fs::read_to_string("/proc/sys/kernel/ostype").ok(),
            "/sys": names("/sys"),
            "/sys/firmware": names("/sys/firmware"),
        })
    });
    let on_host = |p: &str| Path::new(p).exists();
    for p in mounts::MASKED_FILES {
        // Present on this kernel: /dev/null, read-only (reads as empty); absent: not there.
        let want = if on_host(p) {
            json!({"len": 0})
        } else {
            json!(libc::ENOENT)
        };
        assert_eq!(got["files"][p], want, "{p}");
    }
    for p in mounts::MASKED_DIRS {
        let want = if on_host(p) {
            json!({"names": [], "create": libc::EROFS})
        } else {
            json!({"names": libc::ENOENT, "create": libc::ENOENT})
        };
        assert_eq!(got["dirs"][p], want, "{p}");
    }
    for p in mounts::READ_ONLY {
        if on_host(p) {
            let flags = got["read-only flags"][p].as_u64().unwrap() as libc::c_ulong;
            assert_eq!(flags & libc::ST_RDONLY, libc::ST_RDONLY, "{p}: {flags:#x}");
        } else {
            assert_eq!(got["read-only flags"][p], Value::Null, "{p}");
        }
    }
    assert_eq!(got["write hostname"], libc::EACCES);
    assert_eq!(got["truncate hostname"], libc::EROFS);
    assert_eq!(got["read ostype"], "Linux\n");
    assert_eq!(got["/sys"], libc::ENOENT);
    assert_eq!(got["/sys/firmware"], libc::ENOENT);
}
