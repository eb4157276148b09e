//! The base root of a zygote: a read-only tmpfs holding only what code needs (`/usr`, a few
//! files of `/etc`, a minimal `/dev`, `/proc`, and the configured binds: the Python env and
//! sandlot's own files at neutral paths), pivoted onto in a private mount namespace. Every
//! sandbox forked from the zygote starts from this root and adds its own writable mounts (see
//! `mounts`). Runs as root in the zygote launcher.
//!
//! A configured directory appears through a read-only overlay, not a bind mount, so that no
//! host path shows inside (see [`view_ro`]). There is no `/sys`.

use crate::config::{Bind, ZygoteConfig, INSIDE_GID, INSIDE_UID};
use crate::error::{JailError, PathStep, Step};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::unistd::{chdir, pivot_root};
use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{symlink, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Top-level host entries that are symlinks on merged-/usr systems, bound when directories.
const USR_ALIASES: &[&str] = &["bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// Host `/etc` entries code commonly needs; everything else of `/etc` stays hidden.
pub const ETC_ENTRIES: &[&str] = &[
    "alternatives",
    "bash.bashrc",
    "ca-certificates",
    "ca-certificates.conf",
    "fonts",
    "gai.conf",
    "host.conf",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "magic",
    "magic.mime",
    "mime.types",
    "nsswitch.conf",
    "protocols",
    "python3",
    "python3.11",
    "services",
    "ssl",
    "timezone",
];

/// Device nodes bound from the host into the minimal `/dev`.
pub const DEV_NODES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

const NOSUID_NODEV: MsFlags = MsFlags::MS_NOSUID.union(MsFlags::MS_NODEV);

/// Builds the base root on `cfg.staging_dir` and pivots onto it. The caller must already be in
/// a new mount namespace.
pub fn enter_base_root(cfg: &ZygoteConfig) -> Result<(), JailError> {
    let root = cfg.staging_dir.as_path();
    mount_root_tmpfs(root)?;

    for dir in [
        "usr",
        "etc",
        "dev",
        "proc",
        "tmp",
        "workspace",
        "opt",
        // E2B's home: each sandbox binds its workspace here too (`mounts`).
        "home/user",
        // Root's home, empty and read-only: E2B's examples create contexts working in it.
        "root",
        "run",
        "var/tmp",
        // Where a trusted-tier sandbox's read-only host paths appear (`mounts::attach_host`).
        "mnt",
    ] {
        fs::create_dir_all(root.join(dir)).at("mkdir", root.join(dir))?;
    }
    bind_usr(root)?;
    populate_etc(&root.join("etc"))?;
    populate_dev(&root.join("dev"))?;
    mount_binds(root, &cfg.binds)?;
    let tmp_opts = format!("mode=1777,size={}", cfg.tmp_bytes);
    mount(
        Some("tmpfs"),
        &root.join("tmp"),
        Some("tmpfs"),
        NOSUID_NODEV,
        Some(tmp_opts.as_str()),
    )
    .step("mount zygote /tmp")?;
    // A fully visible procfs must exist in the namespace before a sandbox may mount its own.
    // `hidepid=invisible`: the zygote (tenant code) sees only its own processes, not the host's
    // (no command lines or environments of other uids' processes, no pid 1).
    mount(
        Some("proc"),
        &root.join("proc"),
        Some("proc"),
        NOSUID_NODEV | MsFlags::MS_NOEXEC,
        Some("hidepid=invisible"),
    )
    .step("mount /proc")?;

    chdir(root).step("chdir new root")?;
    pivot_root(".", ".").step("pivot_root")?;
    umount2(".", MntFlags::MNT_DETACH).step("detach old root")?;
    chdir("/").step("chdir /")?;
    // The root tmpfs itself is read-only from here on.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | NOSUID_NODEV,
        None::<&str>,
    )
    .step("remount root read-only")?;
    Ok(())
}

/// Makes `/` private (nothing mounted after propagates back to the host) and mounts the tmpfs
/// a launcher's root is built on at `root`. The caller must be in a new mount namespace.
pub(crate) fn mount_root_tmpfs(root: &Path) -> Result<(), JailError> {
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .step("make / private")?;
    mount(
        Some("tmpfs"),
        root,
        Some("tmpfs"),
        NOSUID_NODEV,
        Some("mode=0755,size=16m"),
    )
    .step("mount root tmpfs")
}

/// Binds the host's `/usr` read-only at `root/usr` (which must exist) and recreates the
/// merged-`/usr` aliases (`/bin`, `/lib`, ...): a symlink stays a symlink, a directory is bound
/// read-only.
pub(crate) fn bind_usr(root: &Path) -> Result<(), JailError> {
    bind_ro(Path::new("/usr"), &root.join("usr"))?;
    for name in USR_ALIASES {
        let host = Path::new("/").join(name);
        match fs::symlink_metadata(&host) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = fs::read_link(&host).at("readlink", &host)?;
                symlink(&target, root.join(name)).at("symlink", root.join(name))?;
            }
            Ok(m) if m.is_dir() => {
                fs::create_dir_all(root.join(name)).at("mkdir", root.join(name))?;
                bind_ro(&host, &root.join(name))?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Bind-mounts `source` read-only, nosuid, nodev onto `target` (which must exist).
pub fn bind_ro(source: &Path, target: &Path) -> Result<(), JailError> {
    mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .step("bind mount")?;
    mount(
        None::<&str>,
        target,
        None::<&str>,
        MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | NOSUID_NODEV,
        None::<&str>,
    )
    .step("remount bind read-only")
}

/// Mounts the configured binds into the root at `root`, read-only: a directory as an overlay
/// ([`view_ro`]), a file as a bind. A bind may nest in another (`/opt/sandlot/env` in
/// `/opt/sandlot`): every mount point is made first on the root tmpfs itself, and parents are
/// mounted before what nests in them, their overlay carrying those mount points.
fn mount_binds(root: &Path, binds: &[Bind]) -> Result<(), JailError> {
    let mut binds: Vec<&Bind> = binds.iter().collect();
    binds.sort_by_key(|b| b.target.components().count());
    let mut planned = Vec::with_capacity(binds.len());
    for bind in binds {
        let rel = bind.target.strip_prefix("/").unwrap_or(&bind.target);
        let target = root.join(rel);
        let meta = fs::metadata(&bind.source).at("stat bind source", &bind.source)?;
        let beneath = if meta.is_dir() {
            fs::create_dir_all(&target).at("mkdir bind target", &target)?;
            // Opened now, before any overlay covers it.
            Some(open_dir_path(&target)?)
        } else {
            if let Some(parent) = target.parent() {
                fs::create_dir_all(parent).at("mkdir bind target", parent)?;
            }
            fs::write(&target, b"").at("create bind target", &target)?;
            None
        };
        planned.push((bind, target, beneath));
    }
    for (bind, target, beneath) in planned {
        match beneath {
            Some(beneath) => view_ro(&bind.source, &beneath, &target)?,
            None => bind_ro(&bind.source, &target)?,
        }
    }
    Ok(())
}

/// Mounts a read-only view of the host directory `source` on `target`: an overlay with no upper
/// layer whose two lower layers are `source` and `beneath` (the directory under `target` on the
/// root tmpfs, empty but for the mount points of nested binds).
///
/// Why not a bind mount: a bind's entry in `/proc/self/mountinfo` shows the path of its source
/// within the source's filesystem, which would put the host's layout (the data dir) in every
/// sandbox. The overlay's entry shows `/` as its root and names its layers by descriptor
/// (`lowerdir=/proc/self/fd/N:/proc/self/fd/M`), numbers meaningless once the launcher has
/// exec'd. Nothing is ever copied up (no upper layer), redirect xattrs are not followed, and
/// files read through it are the host's own pages.
fn view_ro(source: &Path, beneath: &File, target: &Path) -> Result<(), JailError> {
    let layer = open_dir_path(source)?;
    let opts = format!(
        "lowerdir=/proc/self/fd/{}:/proc/self/fd/{},redirect_dir=nofollow,metacopy=off",
        layer.as_raw_fd(),
        beneath.as_raw_fd()
    );
    mount(
        Some("overlay"),
        target,
        Some("overlay"),
        MsFlags::MS_RDONLY | NOSUID_NODEV,
        Some(opts.as_str()),
    )
    .step("mount read-only overlay")
}

/// An `O_PATH` descriptor of the directory `path`, to name it as an overlay layer.
fn open_dir_path(path: &Path) -> Result<File, JailError> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(path)
        .at("open overlay layer", path)
}

fn populate_etc(etc: &Path) -> Result<(), JailError> {
    for name in ETC_ENTRIES {
        let host = Path::new("/etc").join(name);
        let Ok(meta) = fs::symlink_metadata(&host) else {
            continue;
        };
        let target = etc.join(name);
        if meta.file_type().is_symlink() {
            let link = fs::read_link(&host).at("readlink", &host)?;
            symlink(&link, &target).at("symlink", &target)?;
        } else if meta.is_dir() {
            fs::create_dir_all(&target).at("mkdir", &target)?;
            bind_ro(&host, &target)?;
        } else {
            fs::write(&target, b"").at("create", &target)?;
            bind_ro(&host, &target)?;
        }
    }
    let files: [(&str, String); 6] = [
        // Login shells (E2B's commands are `bash -l -c ...`) read /etc/profile, and a
        // distribution's resets PATH, dropping the sandbox's Python environment from it
        // (`python` not found). Sandlot's keeps the PATH the sandbox was started with and does
        // what else a login shell's profile does: the interactive bashrc.
        //
        // E2B's sandboxes give their user password-less `sudo`, and scripts (and models) put
        // it in front of commands out of habit. A sandlot sandbox has no root to become and no
        // setuid binary, so a login shell's `sudo` is a function that drops sudo's options and
        // runs the command as the sandbox's user: it grants nothing, and a command that needs
        // root fails with its own permission error.
        (
            "profile",
            "if [ \"${PS1-}\" ] && [ \"${BASH-}\" ] && [ \"$BASH\" != /bin/sh ] && [ -f /etc/bash.bashrc ]; then\n  . /etc/bash.bashrc\nfi\n\
             if [ \"${BASH-}\" ]; then\n  sudo() {\n    while [ $# -gt 0 ]; do\n      case \"$1\" in\n        -u|-g|-p|-C|-h|-r|-t|-U|-D) shift 2 ;;\n        --) shift; break ;;\n        -*) shift ;;\n        *) break ;;\n      esac\n    done\n    \"$@\"\n  }\nfi\n"
                .into(),
        ),
        (
            "passwd",
            format!(
                "root:x:0:0:root:/root:/usr/sbin/nologin\n\
                 user:x:{INSIDE_UID}:{INSIDE_GID}:sandbox user:/workspace:/bin/bash\n\
                 nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
            ),
        ),
        (
            "group",
            format!("root:x:0:\nuser:x:{INSIDE_GID}:\nnogroup:x:65534:\n"),
        ),
        ("hostname", "sandbox\n".into()),
        (
            "hosts",
            "127.0.0.1 localhost sandbox\n::1 localhost ip6-localhost\n".into(),
        ),
        // No resolver: the sandbox has no network beyond its own loopback.
        ("resolv.conf", String::new()),
    ];
    for (name, content) in files {
        fs::write(etc.join(name), content).at("write", etc.join(name))?;
    }
    Ok(())
}

/// A minimal, read-only `/dev`: a tmpfs with the harmless character devices ([`DEV_NODES`])
/// bound in (nosuid, noexec), `shm` and `pts` mount points and the usual symlinks (`ptmx` points
/// into `pts`, where each sandbox mounts a devpts instance of its own; until then, and in the
/// build jail, it leads nowhere). Shared by the base root and the build jail's root.
pub(crate) fn populate_dev(dev: &Path) -> Result<(), JailError> {
    mount(
        Some("tmpfs"),
        dev,
        Some("tmpfs"),
        MsFlags::MS_NOSUID,
        Some("mode=0755,size=64k"),
    )
    .step("mount /dev tmpfs")?;
    for node in DEV_NODES {
        let host = Path::new("/dev").join(node);
        if fs::metadata(&host).is_err() {
            continue;
        }
        let target = dev.join(node);
        fs::write(&target, b"").at("create dev node", &target)?;
        mount(
            Some(&host),
            &target,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .step("bind dev node")?;
        mount(
            None::<&str>,
            &target,
            None::<&str>,
            MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
            None::<&str>,
        )
        .step("remount dev node")?;
    }
    for dir in ["shm", "pts"] {
        fs::create_dir_all(dev.join(dir)).at("mkdir", dev.join(dir))?;
    }
    fs::set_permissions(dev.join("shm"), fs::Permissions::from_mode(0o1777))
        .at("chmod", dev.join("shm"))?;
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ] {
        symlink(target, dev.join(name)).at("symlink", dev.join(name))?;
    }
    mount(
        None::<&str>,
        dev,
        None::<&str>,
        MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID,
        Some("mode=0755,size=64k"),
    )
    .step("remount /dev read-only")?;
    Ok(())
}

/// Paths inside the base root that sandboxes may write (each its own tmpfs).
pub fn writable_paths() -> [PathBuf; 3] {
    [
        PathBuf::from("/workspace"),
        PathBuf::from("/tmp"),
        PathBuf::from("/dev/shm"),
    ]
}
