//! What the running kernel and host support, layer by layer, for `sandlot doctor` and for the
//! server's start-up report. Each check tries the real operation in a throwaway child.

use crate::cgroup::Hierarchy;
use std::path::Path;

/// One line of the report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    /// Whether sandlot refuses to run sandboxes without it.
    pub required: bool,
    pub detail: String,
    pub fix: Option<String>,
}

/// Runs every check.
pub fn probe() -> Vec<Check> {
    let root = nix::unistd::geteuid().is_root();
    let mut out = vec![Check {
        name: "root",
        ok: root,
        required: true,
        detail: if root {
            "running as root: a host uid per sandbox, cgroup limits and the zygote's base root are available".into()
        } else {
            "not root: sandlot serve needs root for its jail (a rootless mode is not built yet)"
                .into()
        },
        fix: (!root).then(|| "run `sandlot serve` as root (or via sudo)".into()),
    }];
    let ns = [
        ("user namespace", libc::CLONE_NEWUSER),
        ("mount namespace", libc::CLONE_NEWUSER | libc::CLONE_NEWNS),
        ("pid namespace", libc::CLONE_NEWUSER | libc::CLONE_NEWPID),
        (
            "network namespace",
            libc::CLONE_NEWUSER | libc::CLONE_NEWNET,
        ),
        ("ipc namespace", libc::CLONE_NEWUSER | libc::CLONE_NEWIPC),
        ("uts namespace", libc::CLONE_NEWUSER | libc::CLONE_NEWUTS),
        (
            "cgroup namespace",
            libc::CLONE_NEWUSER | libc::CLONE_NEWCGROUP,
        ),
    ];
    for (name, flags) in ns {
        let errno = in_child(|| {
            // SAFETY: unshare in a throwaway child.
            if unsafe { libc::unshare(flags) } == 0 {
                0
            } else {
                nix::Error::last() as i32
            }
        });
        out.push(Check {
            name,
            ok: errno == 0,
            required: true,
            detail: if errno == 0 { "available".into() } else { format!("unshare failed: {}", nix::Error::from_raw(errno)) },
            fix: (errno != 0).then(|| {
                "enable unprivileged user namespaces: sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces>0".into()
            }),
        });
    }
    match Hierarchy::detect(Path::new("/sys/fs/cgroup")) {
        Ok(h) => out.push(Check {
            name: "cgroups",
            ok: root,
            required: false,
            detail: format!("cgroup v{} with memory, pids and cpu{}", h.version(), if root { "" } else { " (needs root to write)" }),
            fix: (!root).then(|| "run as root, or delegate a cgroup v2 subtree to this user".into()),
        }),
        Err(e) => out.push(Check {
            name: "cgroups",
            ok: false,
            required: false,
            detail: e.to_string(),
            fix: Some("mount cgroup v2 with the memory, pids and cpu controllers enabled, or the v1 controllers".into()),
        }),
    }
    // SAFETY: landlock_create_ruleset with the VERSION flag only queries the ABI.
    let abi = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, 0usize, 0usize, 1u32) };
    out.push(Check {
        name: "landlock",
        ok: abi > 0,
        required: false,
        detail: if abi > 0 {
            format!("ABI {abi}")
        } else {
            "not available on this kernel".into()
        },
        fix: (abi <= 0).then(|| {
            "boot a kernel with CONFIG_SECURITY_LANDLOCK=y and landlock in the lsm= list".into()
        }),
    });
    // SAFETY: PR_GET_SECCOMP only reads the caller's mode.
    let seccomp = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) } >= 0;
    out.push(Check {
        name: "seccomp",
        ok: seccomp,
        required: true,
        detail: if seccomp {
            "filter mode available".into()
        } else {
            "not available".into()
        },
        fix: (!seccomp).then(|| "use a kernel built with CONFIG_SECCOMP_FILTER".into()),
    });
    let openat2 = in_child(|| {
        let how = [0u64, 0, 0];
        // SAFETY: openat2 with a valid open_how on a static path; the fd is leaked in a child that exits.
        let r = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                libc::AT_FDCWD,
                c"/".as_ptr(),
                how.as_ptr(),
                24usize,
            )
        };
        if r >= 0 {
            0
        } else {
            nix::Error::last() as i32
        }
    });
    out.push(Check {
        name: "openat2",
        ok: openat2 == 0,
        required: true,
        detail: if openat2 == 0 {
            "RESOLVE_IN_ROOT available for file transfer".into()
        } else {
            "missing (kernel < 5.6)".into()
        },
        fix: (openat2 != 0).then(|| "use Linux 5.6 or newer".into()),
    });
    out
}

/// Runs `f` in a forked child and returns its exit status (an errno, 0 for success).
fn in_child(f: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the child only runs `f` (a syscall) and `_exit`s.
    match unsafe { libc::fork() } {
        0 => {
            let code = f();
            // SAFETY: leaving the forked child.
            unsafe { libc::_exit(code) }
        }
        pid if pid > 0 => {
            let mut status = 0;
            // SAFETY: waiting for our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                255
            }
        }
        _ => nix::Error::last() as i32,
    }
}
