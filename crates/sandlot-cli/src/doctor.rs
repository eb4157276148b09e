//! `sandlot doctor`: which kernel features this host has, which isolation layers sandboxes get,
//! which backend sandboxes' workspaces on disk use and why, and what to do about each one
//! missing.

use sandlot_jail::probe::Check;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Runs the probe, prints the report; returns whether every required layer is available.
pub fn doctor(json: bool) -> anyhow::Result<bool> {
    let mut checks = sandlot_jail::probe::probe();
    let dir = data_dir();
    checks.push(workspace_check(&Disk::detect(dir.as_deref())));
    checks.push(node_check());
    if let Some(usage) = dir.and_then(|d| sandlot_workspace::image_usage(&d.join("disk"))) {
        checks.push(image_check(&usage));
    }
    let ready = ready(&checks);
    let mut out = std::io::stdout().lock();
    if json {
        let report = serde_json::json!({ "ready": ready, "checks": checks });
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        out.write_all(report(&checks).as_bytes())?;
    }
    out.flush()?;
    Ok(ready)
}

fn ready(checks: &[Check]) -> bool {
    checks.iter().all(|c| c.ok || !c.required)
}

/// The report in plain words.
fn report(checks: &[Check]) -> String {
    let width = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    let mut s = String::from("Kernel features and isolation layers on this host:\n\n");
    for c in checks {
        let mark = match (c.ok, c.required) {
            (true, _) => "ok     ",
            (false, true) => "MISSING",
            (false, false) => "missing",
        };
        let kind = if c.required { "required" } else { "optional" };
        s.push_str(&format!(
            "  {mark}  {:<width$}  ({kind}) {}\n",
            c.name, c.detail
        ));
        if let (false, Some(fix)) = (c.ok, &c.fix) {
            s.push_str(&format!("           {:<width$}  to fix: {fix}\n", ""));
        }
    }
    let missing_required = checks.iter().filter(|c| !c.ok && c.required).count();
    let missing_optional = checks.iter().filter(|c| !c.ok && !c.required).count();
    s.push('\n');
    if missing_required > 0 {
        s.push_str(&format!(
            "{missing_required} required layer(s) missing: sandlot cannot isolate sandboxes on this host until they are fixed.\n"
        ));
    } else {
        s.push_str("Every required layer is available: sandboxes can run here.\n");
    }
    if missing_optional > 0 {
        s.push_str(&format!(
            "{missing_optional} optional layer(s) missing: sandboxes run without them, with weaker isolation.\n"
        ));
    }
    s
}

/// What decides the workspace backend on this host (mirrors `sandlot-workspace`'s choice:
/// an existing image wins, then Btrfs when the kernel has it and `mkfs.btrfs` is installed,
/// else one ext4 loop image per sandbox).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disk {
    pub kernel_btrfs: bool,
    pub mkfs_btrfs: Option<PathBuf>,
    pub loop_devices: bool,
    /// The backend an existing data dir already uses, if any.
    pub existing: Option<&'static str>,
}

impl Disk {
    /// Looks at this host (and at `data_dir`'s workspaces, when given).
    pub fn detect(data_dir: Option<&Path>) -> Disk {
        let kernel_btrfs = std::fs::read_to_string("/proc/filesystems")
            .map(|s| {
                s.lines()
                    .any(|l| l.split_whitespace().last() == Some("btrfs"))
            })
            .unwrap_or(false);
        let existing = data_dir.and_then(|d| {
            let disk = d.join("disk");
            if disk.join("workspaces.btrfs").exists() {
                Some("btrfs")
            } else if std::fs::read_dir(disk.join("images")).is_ok_and(|mut e| e.next().is_some()) {
                Some("loop-image")
            } else {
                None
            }
        });
        Disk {
            kernel_btrfs,
            mkfs_btrfs: find_program("mkfs.btrfs"),
            loop_devices: Path::new("/dev/loop-control").exists(),
            existing,
        }
    }
}

/// `data_dir` as `serve` would use it: `SANDLOT_DATA_DIR`, else the default.
fn data_dir() -> Option<PathBuf> {
    std::env::var_os(crate::config::DATA_DIR)
        .map(PathBuf::from)
        .or_else(|| {
            crate::config::default_data_dir(
                std::env::var_os(crate::config::XDG_DATA_HOME),
                std::env::var_os(crate::config::HOME),
            )
            .ok()
        })
}

/// A program on `PATH` or in the sbin directories a service's `PATH` often lacks.
pub fn find_program(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Where a sandbox finds node: its `PATH` (`/usr/local/bin:/usr/bin:/bin`) under the host's
/// `/usr`, which every sandbox sees read-only. A node elsewhere on the server's own `PATH` is
/// not one sandboxes can run.
pub const SANDBOX_NODE: [&str; 4] = [
    "/usr/local/bin/node",
    "/usr/bin/node",
    "/usr/bin/nodejs",
    "/bin/node",
];

/// The node that JavaScript and TypeScript cells run on, if the host has one sandboxes see.
pub fn sandbox_node() -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    SANDBOX_NODE.iter().map(PathBuf::from).find(|p| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// Node.js for JavaScript and TypeScript cells (optional: Python and Bash do not need it).
pub fn node_check() -> Check {
    let version = |p: &Path| {
        std::process::Command::new(p)
            .arg("--version")
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let found = sandbox_node().map(|p| (version(&p), p));
    let (ok, detail) = match &found {
        Some((Some(v), p)) => (
            true,
            format!(
                "{} {v}: JavaScript and TypeScript cells run on it",
                p.display()
            ),
        ),
        Some((None, p)) => (false, format!("{} does not run", p.display())),
        None => (
            false,
            "no node under /usr: JavaScript and TypeScript cells are refused with an error \
             naming this; Python and Bash are unaffected"
                .into(),
        ),
    };
    Check {
        name: "javascript (node)",
        ok,
        required: false,
        detail,
        fix: (!ok).then(|| {
            "install the distribution's Node.js (apt-get install nodejs); sandboxes see the \
             host's /usr"
                .into()
        }),
    }
}

/// The workspace backend a server would use here, and why, as one check.
pub fn workspace_check(d: &Disk) -> Check {
    const NAME: &str = "disk workspaces";
    let btrfs = "btrfs: a Btrfs subvolume per sandbox with a qgroup byte limit, each tenant's \
                 subvolumes under one level-1 qgroup capped at its max_disk_bytes, files per \
                 workspace capped by count (--max-files), on a loop-mounted image in \
                 <data-dir>/disk";
    let loop_image = "loop-image: one ext4 loop image per sandbox in <data-dir>/disk (mkfs's \
                      inode count caps files; no per-tenant disk cap)";
    let (ok, detail, fix) = match d.existing {
        Some("btrfs") if d.kernel_btrfs => (
            true,
            format!("{btrfs} (the data dir already has a Btrfs image)"),
            None,
        ),
        Some("btrfs") => (
            false,
            "the data dir has a Btrfs workspace image but the kernel has no btrfs".into(),
            Some("load the btrfs module (modprobe btrfs)".into()),
        ),
        Some(_) => (
            d.loop_devices,
            format!("{loop_image} (the data dir already has loop-image workspaces)"),
            None,
        ),
        None => match (d.kernel_btrfs, &d.mkfs_btrfs, d.loop_devices) {
            (true, Some(mkfs), true) => (
                true,
                format!("{btrfs} (the kernel has btrfs and {} is installed)", mkfs.display()),
                None,
            ),
            (false, _, true) => (
                true,
                format!("{loop_image} (the kernel has no btrfs; no byte-exact quota sharing, no snapshots)"),
                Some("load the btrfs module (modprobe btrfs) for Btrfs workspaces".into()),
            ),
            (true, None, true) => (
                true,
                format!("{loop_image} (mkfs.btrfs is not installed)"),
                Some(
                    "install btrfs-progs (apt-get install btrfs-progs; `sandlot serve` does it \
                     itself as root on Debian) for Btrfs workspaces"
                        .into(),
                ),
            ),
            (_, _, false) => (
                false,
                "no loop devices (/dev/loop-control is missing): workspaces cannot be made".into(),
                Some("load the loop module (modprobe loop) or give the container loop devices".into()),
            ),
        },
    };
    Check {
        name: NAME,
        ok,
        required: true,
        detail,
        fix,
    }
}

fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// The Btrfs image's size and what it takes on the host disk, against what it holds: space a
/// deleted workspace freed comes back to the host once the server shrinks the image (every 30
/// s while it runs), so a large gap that stays says it cannot (see the server's log).
pub fn image_check(u: &sandlot_workspace::ImageUsage) -> Check {
    let held = match u.held_bytes {
        Some(h) => format!("holding {}", gib(h)),
        None => "not mounted (no server running)".into(),
    };
    Check {
        name: "workspace image",
        ok: true,
        required: false,
        detail: format!(
            "{}: {} image, {} allocated on the host disk, {held}",
            u.path.display(),
            gib(u.size_bytes),
            gib(u.allocated_bytes),
        ),
        fix: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_backend_says_which_and_why() {
        let host = Disk {
            kernel_btrfs: true,
            mkfs_btrfs: Some("/usr/sbin/mkfs.btrfs".into()),
            loop_devices: true,
            existing: None,
        };
        let c = workspace_check(&host);
        assert!(c.ok && c.detail.starts_with("btrfs:"), "{c:?}");
        let no_progs = workspace_check(&Disk {
            mkfs_btrfs: None,
            ..host.clone()
        });
        assert!(
            no_progs.ok && no_progs.detail.starts_with("loop-image:"),
            "{no_progs:?}"
        );
        assert!(no_progs.detail.contains("mkfs.btrfs is not installed"));
        assert!(no_progs.fix.unwrap().contains("btrfs-progs"));
        let no_loop = workspace_check(&Disk {
            loop_devices: false,
            ..host.clone()
        });
        assert!(!no_loop.ok && no_loop.required, "{no_loop:?}");
        let kept = workspace_check(&Disk {
            mkfs_btrfs: None,
            existing: Some("btrfs"),
            ..host
        });
        assert!(
            kept.ok && kept.detail.contains("already has a Btrfs image"),
            "{kept:?}"
        );
    }

    fn check(name: &'static str, ok: bool, required: bool) -> Check {
        Check {
            name,
            ok,
            required,
            detail: format!("{name} detail"),
            fix: (!ok).then(|| format!("fix {name}")),
        }
    }

    #[test]
    fn ready_needs_only_required_layers() {
        assert!(ready(&[check("a", true, true), check("b", false, false)]));
        assert!(!ready(&[check("a", false, true), check("b", true, false)]));
    }

    #[test]
    fn report_says_what_to_do() {
        let r = report(&[
            check("user namespace", true, true),
            check("landlock", false, false),
            check("seccomp", false, true),
        ]);
        assert!(r.contains("ok       user namespace"), "{r}");
        assert!(r.contains("to fix: fix landlock"), "{r}");
        assert!(r.contains("MISSING  seccomp"), "{r}");
        assert!(r.contains("1 required layer(s) missing"), "{r}");
        assert!(r.contains("1 optional layer(s) missing"), "{r}");
    }
}
