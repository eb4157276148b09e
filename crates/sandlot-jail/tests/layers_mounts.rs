//! Real tests of the sandbox's own mounts (`sandlot_jail::mounts`): each case starts a real
//! sandbox (base root, user, mount and pid namespaces, the real containment sequence with
//! seccomp and Landlock off) and checks its tmpfs instances and `/proc` from inside: the
//! configured byte and inode caps, `ENOSPC` exactly at them, `nosuid`/`nodev`, and a `/proc`
//! that shows only the sandbox's own processes.

use serde_json::{json, Value};
use std::ffi::CString;
use std::io::Write;
use std::os::unix::fs::MetadataExt;

mod common;

use common::sandbox::{in_sandbox, test_config};
use common::{is_root, skip};
use sandlot_jail::config::{JailConfig, INSIDE_UID};

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
