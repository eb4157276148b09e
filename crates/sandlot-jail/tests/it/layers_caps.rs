//! Real enforcement tests of the capabilities layer (`sandlot_jail::caps`). The tests run as
//! root: each case forks a child of root, drops everything and checks what is left; the last
//! one checks the init and the driver of a real sandbox with every layer on.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;

use crate::common;

use common::{errno, in_child, is_root, skip, SETUP_FAILED};
use sandlot_jail::caps;

#[test]
fn snapshot_parses_proc_status() {
    let text = "Name:\tx\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\n\
                CapEff:\t000001ffffffffff\nCapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\n\
                NoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t3\n";
    let s = caps::CapsSnapshot::parse(text);
    assert_eq!(s.inheritable, Some(0));
    assert_eq!(s.permitted, Some(0x1ff_ffff_ffff));
    assert_eq!(s.effective, Some(0x1ff_ffff_ffff));
    assert_eq!(s.bounding, Some(0x1ff_ffff_ffff));
    assert_eq!(s.ambient, Some(0));
    assert_eq!(s.no_new_privs, Some(true));
    assert_eq!(s.seccomp, Some(2));
    assert_eq!(s.seccomp_filters, Some(3));
    assert!(!s.all_dropped());
    let now = caps::current();
    assert!(now.effective.is_some() && now.bounding.is_some() && now.seccomp.is_some());
}

#[test]
fn last_cap_matches_proc() {
    let text = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap").unwrap();
    assert_eq!(caps::last_cap(), text.trim().parse::<u32>().unwrap());
}

#[test]
fn drop_all_leaves_nothing_and_chown_is_eperm() {
    if !is_root() {
        skip("not root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f");
    std::fs::write(&file, b"x").unwrap();
    let cfile = CString::new(file.as_os_str().as_bytes()).unwrap();
    let cfile_ptr = cfile.as_ptr();

    // Control: root can give the file away.
    let control = in_child(|| {
        // SAFETY: valid C string.
        if unsafe { libc::chown(cfile_ptr, 12345, 12345) } == 0 {
            0
        } else {
            errno()
        }
    });
    assert_eq!(control, 0);
    // SAFETY: valid C string; give the file back to root for the next step.
    assert_eq!(unsafe { libc::chown(cfile_ptr, 0, 0) }, 0);

    let code = in_child(|| {
        let before = caps::current();
        if before.effective == Some(0) {
            return SETUP_FAILED; // not really root
        }
        if caps::drop_all().is_err() {
            return 1;
        }
        let s = caps::current();
        if s.effective != Some(0) {
            return 2;
        }
        if s.permitted != Some(0) {
            return 3;
        }
        if s.bounding != Some(0) {
            return 4;
        }
        if s.inheritable != Some(0) || s.ambient != Some(0) {
            return 5;
        }
        if !s.all_dropped() {
            return 6;
        }
        // SAFETY: valid C string.
        if unsafe { libc::chown(cfile_ptr, 12345, 12345) } == 0 {
            return 7;
        }
        errno()
    });
    assert_eq!(code, libc::EPERM);
    // SAFETY: `st` is a writable stat buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid C string and out-pointer.
    assert_eq!(unsafe { libc::stat(cfile_ptr, &mut st) }, 0);
    assert_eq!(st.st_uid, 0, "the file must still belong to root");
}

#[test]
fn drop_all_is_idempotent() {
    let code = in_child(|| match (caps::drop_all(), caps::drop_all()) {
        (Ok(()), Ok(())) => 0,
        _ => 1,
    });
    assert_eq!(code, 0);
}

#[test]
fn capabilities_do_not_come_back_on_exec_as_root() {
    if !is_root() {
        skip("not root");
        return;
    }
    // uid 0 normally regains the bounding set on execve; with it emptied nothing comes back.
    let code = in_child(|| {
        if caps::drop_all().is_err() {
            return SETUP_FAILED;
        }
        let sh = c"/bin/sh";
        let dash_c = c"-c";
        let script = c"test \"$(grep -cE '^Cap(Inh|Prm|Eff|Bnd|Amb):[[:space:]]+0{16}$' /proc/self/status)\" = 5";
        let argv = [
            sh.as_ptr(),
            dash_c.as_ptr(),
            script.as_ptr(),
            std::ptr::null(),
        ];
        // SAFETY: NUL-terminated argv of valid C strings; environ is inherited.
        unsafe { libc::execv(sh.as_ptr(), argv.as_ptr()) };
        100 + errno()
    });
    assert_eq!(code, 0);
}

#[test]
fn set_no_new_privs_shows_in_proc_status() {
    let code = in_child(|| {
        if caps::current().no_new_privs != Some(false) {
            return SETUP_FAILED;
        }
        if caps::set_no_new_privs().is_err() {
            return 1;
        }
        match caps::current().no_new_privs {
            Some(true) => 0,
            _ => 2,
        }
    });
    assert_eq!(code, 0);
}

/// Runs a setuid-root copy of `id -u` as uid 65534 in a child, with or without
/// `no_new_privs`; returns the uid it printed (or an error marker).
fn setuid_id_as_nobody(id_copy: &std::path::Path, nnp: bool) -> String {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let prog = CString::new(id_copy.as_os_str().as_bytes()).unwrap();
    let code = in_child(|| {
        // SAFETY: fd plumbing and credential changes in the forked child.
        unsafe {
            libc::close(fds[0]);
            libc::dup2(fds[1], 1);
            if nnp && caps::set_no_new_privs().is_err() {
                return SETUP_FAILED;
            }
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setresgid(65534, 65534, 65534) != 0
                || libc::setresuid(65534, 65534, 65534) != 0
            {
                return SETUP_FAILED;
            }
            let argv = [prog.as_ptr(), c"-u".as_ptr(), std::ptr::null()];
            libc::execv(prog.as_ptr(), argv.as_ptr());
        }
        100 + errno()
    });
    // SAFETY: closing our write end, then reading the child's output.
    unsafe { libc::close(fds[1]) };
    let mut buf = [0u8; 64];
    // SAFETY: reading into a local buffer.
    let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
    // SAFETY: closing the read end.
    unsafe { libc::close(fds[0]) };
    if code != 0 {
        return format!("exit {code}");
    }
    String::from_utf8_lossy(&buf[..n.max(0) as usize])
        .trim()
        .to_string()
}

#[test]
fn no_new_privs_blocks_setuid_gain() {
    if !is_root() {
        skip("not root");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    // Control: without no_new_privs the setuid bit works. A tmpfs /tmp is often nosuid, so the
    // target dir is tried as well.
    let mut tried = Vec::new();
    for parent in [std::env::temp_dir(), env!("CARGO_TARGET_TMPDIR").into()] {
        let dir = tempfile::tempdir_in(&parent).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let id_copy = dir.path().join("id");
        std::fs::copy("/usr/bin/id", &id_copy).unwrap();
        std::fs::set_permissions(&id_copy, std::fs::Permissions::from_mode(0o4755)).unwrap();
        let control = setuid_id_as_nobody(&id_copy, false);
        if control == "0" {
            assert_eq!(setuid_id_as_nobody(&id_copy, true), "65534");
            return;
        }
        tried.push(format!("{parent:?}: {control}"));
    }
    skip(&format!("setuid does not work in {tried:?}"));
}

#[test]
fn sandbox_init_and_driver_keep_no_capability_under_seccomp() {
    if !is_root() {
        skip("not root: a sandbox needs a base root and id maps");
        return;
    }
    let cfg = sandlot_jail::JailConfig {
        landlock: true,
        seccomp: true,
        ..common::sandbox::test_config()
    };
    // The real sequence with every layer on. The init (pid 1) confines itself after forking
    // the driver, concurrently with the driver's own steps, and the driver returns only once
    // the init is confined: its first look must find the init's filter in place.
    let got = common::sandbox::in_sandbox(&cfg, || {
        let of = |pid: &str| {
            let s = std::fs::read_to_string(format!("/proc/{pid}/status"))
                .map(|t| caps::CapsSnapshot::parse(&t))
                .unwrap_or_default();
            serde_json::json!({
                "all dropped": s.all_dropped(),
                "no_new_privs": s.no_new_privs,
                "seccomp": s.seccomp,
            })
        };
        serde_json::json!({"init": of("1"), "driver": of("self")})
    });
    let confined = serde_json::json!({"all dropped": true, "no_new_privs": true, "seccomp": 2});
    assert_eq!(
        got,
        serde_json::json!({"init": confined, "driver": confined})
    );
}
