//! The Btrfs backend on real (small) images: workspaces made, snapshotted and removed; the quota
//! stopping the owner with EDQUOT and nobody else; crash recovery without data loss; refusals
//! when the disk is low; the detached mount the sandbox attaches.

use crate::common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use common::*;
use sandlot_workspace::{
    BackendChoice, BackendKind, QuotaMode, Reserve, WorkspaceError, Workspaces,
};

const LIMIT: u64 = 64 * MIB;
const T: Duration = Duration::from_secs(60);

fn btrfs() -> Fixture {
    Fixture::new(BackendChoice::Btrfs)
}

/// The level-0 qgroups of subvolumes (not the top level) on the filesystem behind `ws`.
fn subvol_qgroups(ws: &Workspaces) -> Vec<String> {
    let device = ws.health().unwrap().image.unwrap().loop_device;
    let name = device.file_name().unwrap().to_owned();
    for fs in std::fs::read_dir("/sys/fs/btrfs").unwrap().flatten() {
        if fs.path().join("devices").join(&name).exists() {
            let mut q: Vec<String> = std::fs::read_dir(fs.path().join("qgroups"))
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("0_") && n != "0_5")
                .collect();
            q.sort();
            return q;
        }
    }
    panic!("no sysfs entry for {}", device.display());
}

#[test]
fn create_snapshot_remove() {
    bounded(T, || {
        let fx = btrfs();
        let ws = fx.open();
        assert_eq!(ws.backend().kind, BackendKind::Btrfs);

        let a = ws.create("a", OWNER, OWNER, LIMIT).unwrap();
        assert_eq!(a.path, ws.path("a").unwrap());
        assert_eq!(a.limit_bytes, LIMIT);
        assert_eq!(a.inode_limit, None);
        let meta = std::fs::metadata(&a.path).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (OWNER, OWNER));
        assert_eq!(meta.permissions().mode() & 0o7777, 0o755);
        assert!(matches!(
            ws.create("a", OWNER, OWNER, LIMIT),
            Err(WorkspaceError::Exists { .. })
        ));

        std::fs::write(a.path.join("data.txt"), b"before").unwrap();
        let b = ws.snapshot("a", "b").unwrap();
        assert_eq!(b.limit_bytes, LIMIT);
        assert_eq!(ws.get("b").unwrap().limit_bytes, LIMIT);
        assert_eq!(std::fs::metadata(&b.path).unwrap().uid(), OWNER);
        assert_eq!(std::fs::read(b.path.join("data.txt")).unwrap(), b"before");
        std::fs::write(b.path.join("data.txt"), b"after").unwrap();
        assert_eq!(std::fs::read(a.path.join("data.txt")).unwrap(), b"before");
        assert!(matches!(
            ws.snapshot("missing", "c"),
            Err(WorkspaceError::NotFound { .. })
        ));

        ws.set_limit("b", 2 * LIMIT).unwrap();
        assert_eq!(ws.get("b").unwrap().limit_bytes, 2 * LIMIT);
        assert_eq!(ws.list().unwrap(), ["a", "b"]);

        ws.remove("a").unwrap();
        ws.remove("b").unwrap();
        assert!(matches!(
            ws.remove("a"),
            Err(WorkspaceError::NotFound { .. })
        ));
        assert!(ws.list().unwrap().is_empty());
        assert!(!a.path.exists());
        // No qgroup outlives its workspace once the cleaner has dropped the subvolumes
        // (`btrfs filesystem sync` wakes it; otherwise it runs at the next commit, within 30 s).
        let mnt = ws.mount_point().unwrap().to_path_buf();
        let settled = (0..50).any(|_| {
            let synced = std::process::Command::new("btrfs")
                .args(["-q", "filesystem", "sync"])
                .arg(&mnt)
                .status()
                .unwrap();
            assert!(synced.success());
            ws.maintain().unwrap();
            std::thread::sleep(Duration::from_millis(200));
            subvol_qgroups(&ws).is_empty()
        });
        assert!(settled, "qgroups left: {:?}", subvol_qgroups(&ws));
        assert!(
            ws.health().unwrap().ok(),
            "{:?}",
            ws.health().unwrap().problems
        );
        fx.finish(ws);
    });
}

#[test]
fn quota_stops_the_owner_with_edquot_and_nobody_else() {
    bounded(T, || quota_stops_the_owner(QuotaMode::Simple));
}

#[test]
fn full_qgroups_stop_the_owner_with_edquot_too() {
    bounded(T, || quota_stops_the_owner(QuotaMode::Full));
}

fn quota_stops_the_owner(mode: QuotaMode) {
    {
        let mut fx = btrfs();
        fx.cfg.quota = mode;
        let ws = fx.open();
        assert_eq!(ws.health().unwrap().quota, Some(mode));
        let a = ws.create("full", OWNER, OWNER, LIMIT).unwrap();
        let b = ws.create("other", OTHER, OTHER, LIMIT).unwrap();

        let r = fill_as(OWNER, OWNER, &a.path.join("big"), 4 * LIMIT);
        assert_eq!(r.errno, libc::EDQUOT, "{r:?}");
        assert!(r.written <= LIMIT, "{r:?}");
        assert!(r.written >= LIMIT - 8 * MIB, "{r:?}");

        // The other workspace, the filesystem and new workspaces are unaffected.
        assert_writable(&b.path);
        let r = fill_as(OTHER, OTHER, &b.path.join("some"), 16 * MIB);
        assert_eq!((r.errno, r.written), (0, 16 * MIB));
        let c = ws.create("after", OWNER, OWNER, LIMIT).unwrap();
        assert_writable(&c.path);
        let opts = mount_options(ws.mount_point().unwrap()).unwrap();
        assert!(opts.starts_with("rw,") && opts.contains(" rw,"), "{opts}");
        syncfs(&a.path);
        let used = ws.usage("full").unwrap();
        assert!(
            (LIMIT - 8 * MIB..=LIMIT + MIB).contains(&used),
            "usage {used}"
        );

        // The owner can delete to make room again, and a full workspace can still be removed.
        std::fs::remove_file(a.path.join("big")).unwrap();
        syncfs(&a.path);
        let r = fill_as(OWNER, OWNER, &a.path.join("again"), 8 * MIB);
        assert_eq!(r.errno, 0, "{r:?}");
        let _ = fill_as(OWNER, OWNER, &a.path.join("fill"), 4 * LIMIT);
        ws.remove("full").unwrap();
        assert!(
            ws.health().unwrap().ok(),
            "{:?}",
            ws.health().unwrap().problems
        );
        fx.finish(ws);
    }
}

#[test]
fn lowering_the_limit_applies_to_the_next_write() {
    bounded(T, || {
        let fx = btrfs();
        let ws = fx.open();
        let a = ws.create("a", OWNER, OWNER, LIMIT).unwrap();
        ws.set_limit("a", 16 * MIB).unwrap();
        let r = fill_as(OWNER, OWNER, &a.path.join("f"), LIMIT);
        assert_eq!(r.errno, libc::EDQUOT, "{r:?}");
        assert!(r.written <= 16 * MIB, "{r:?}");
        fx.finish(ws);
    });
}

/// A subvolume made inside a workspace has its own qgroup, without a limit: the owner can write
/// past its quota there. Sandboxes must therefore not reach the subvolume ioctls (the jail's
/// seccomp policy refuses them); on the host side, `remove` deletes such subvolumes with the
/// workspace, even when the workspace is full.
#[test]
fn nested_subvolumes_escape_the_quota_and_are_removed_with_the_workspace() {
    bounded(T, || {
        let fx = btrfs();
        let ws = fx.open();
        let a = ws.create("a", OWNER, OWNER, LIMIT).unwrap();
        // The owner can make subvolumes in its own directory (unless seccomp stops the ioctl).
        for sub in ["n1", "n1/n2"] {
            assert!(run_in(
                &a.path,
                OWNER,
                OWNER,
                "btrfs",
                &["-q", "subvolume", "create", sub]
            ));
        }
        let r = fill_as(
            OWNER,
            OWNER,
            &a.path.join("n1/n2/past-the-limit"),
            LIMIT + 16 * MIB,
        );
        assert_eq!((r.errno, r.written), (0, LIMIT + 16 * MIB), "{r:?}");
        let _ = fill_as(OWNER, OWNER, &a.path.join("fill"), 4 * LIMIT);
        ws.remove("a").unwrap();
        assert!(!a.path.exists());
        assert!(ws.list().unwrap().is_empty());
        fx.finish(ws);
    });
}

#[test]
fn reopen_after_crash_keeps_data() {
    bounded(T, || {
        let fx = btrfs();
        let ws = fx.open();
        let a = ws.create("keep", OWNER, OWNER, LIMIT).unwrap();
        std::fs::write(a.path.join("work.csv"), b"1,2,3").unwrap();
        ws.create("also", OWNER, OWNER, LIMIT).unwrap();
        let first_device = ws.health().unwrap().image.unwrap().loop_device;
        // A crash: nothing is unmounted.
        drop(ws);

        // 1. Mount and loop device survived: reused as they are.
        let ws = fx.open();
        assert_eq!(
            ws.health().unwrap().image.unwrap().loop_device,
            first_device
        );
        assert_eq!(ws.list().unwrap(), ["also", "keep"]);
        assert_eq!(std::fs::read(a.path.join("work.csv")).unwrap(), b"1,2,3");
        assert_eq!(ws.get("keep").unwrap().limit_bytes, LIMIT);
        drop(ws);

        // 2. The mount is gone (and with it the autoclear loop device): mounted again, not
        //    reformatted.
        let mnt = fx.dir().join("mnt");
        // Another test's forked child may hold an fd of this mount for a moment (forked
        // children inherit every fd, close-on-exec ones included): retry while it is busy.
        assert!(wait_until(Duration::from_secs(10), || {
            nix::mount::umount2(&mnt, nix::mount::MntFlags::empty()).is_ok()
        }));
        assert!(wait_until(Duration::from_secs(5), || loops_backed_under(
            fx.dir()
        )
        .is_empty()));
        let ws = fx.open();
        assert_eq!(std::fs::read(a.path.join("work.csv")).unwrap(), b"1,2,3");
        let device = ws.health().unwrap().image.unwrap().loop_device;
        drop(ws);

        // 3. The mount is gone but the loop device is still bound (someone holds it open): the
        //    same device is mounted again rather than a second one with the same fsid.
        let holder = std::fs::File::open(&device).unwrap();
        // Another test's forked child may hold an fd of this mount for a moment (forked
        // children inherit every fd, close-on-exec ones included): retry while it is busy.
        assert!(wait_until(Duration::from_secs(10), || {
            nix::mount::umount2(&mnt, nix::mount::MntFlags::empty()).is_ok()
        }));
        let ws = fx.open();
        assert_eq!(ws.health().unwrap().image.unwrap().loop_device, device);
        assert_eq!(loops_backed_under(fx.dir()).len(), 1);
        drop(holder);
        assert_eq!(std::fs::read(a.path.join("work.csv")).unwrap(), b"1,2,3");
        assert_eq!(ws.list().unwrap(), ["also", "keep"]);
        fx.finish(ws);
    });
}

#[test]
fn half_made_workspaces_are_reclaimed_at_open() {
    bounded(T, || {
        let fx = btrfs();
        let ws = fx.open();
        ws.create("real", OWNER, OWNER, LIMIT).unwrap();
        // What a crash between the subvolume ioctl and the rename leaves.
        let half = fx.dir().join("mnt/ws/.new-half");
        let status = std::process::Command::new("btrfs")
            .args(["-q", "subvolume", "create"])
            .arg(&half)
            .status()
            .unwrap();
        assert!(status.success());
        drop(ws);
        let ws = fx.open();
        assert!(!half.exists());
        assert_eq!(ws.list().unwrap(), ["real"]);
        fx.finish(ws);
    });
}

#[test]
fn an_existing_image_that_does_not_mount_is_never_reformatted() {
    bounded(T, || {
        let fx = btrfs();
        std::fs::create_dir_all(fx.dir()).unwrap();
        let image = fx.dir().join("workspaces.btrfs");
        let content: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
        std::fs::write(&image, &content).unwrap();
        let err = Workspaces::open(fx.cfg.clone())
            .err()
            .expect("open must fail");
        assert!(matches!(err, WorkspaceError::MountExisting { .. }), "{err}");
        assert_eq!(std::fs::read(&image).unwrap(), content);
        assert!(
            loops_backed_under(fx.tmp.path()).is_empty()
                || wait_until(Duration::from_secs(5), || loops_backed_under(fx.tmp.path())
                    .is_empty())
        );
    });
}

#[test]
fn ids_are_validated() {
    bounded(T, || {
        let fx = btrfs();
        let ws = fx.open();
        let long = "x".repeat(65);
        for bad in ["../x", "a/b", "", long.as_str(), ".", "..", ".new-a", "a b"] {
            for result in [
                ws.create(bad, OWNER, OWNER, LIMIT).map(drop),
                ws.remove(bad),
                ws.snapshot("a", bad).map(drop),
                ws.path(bad).map(drop),
                ws.open_tree(bad).map(drop),
                ws.usage(bad).map(drop),
            ] {
                assert!(
                    matches!(result, Err(WorkspaceError::InvalidId { .. })),
                    "{bad:?}: {result:?}"
                );
            }
        }
        ws.create(&"x".repeat(64), OWNER, OWNER, LIMIT).unwrap();
        assert!(!fx.dir().join("x").exists());
        fx.finish(ws);
    });
}

#[test]
fn create_is_refused_below_the_reserves() {
    bounded(T, || {
        let mut fx = btrfs();
        // Larger than any disk here.
        fx.cfg.host_reserve = Reserve {
            bytes: 1 << 60,
            percent: 0,
        };
        let ws = fx.open();
        let err = ws.create("a", OWNER, OWNER, LIMIT).unwrap_err();
        assert!(matches!(err, WorkspaceError::HostSpaceLow { .. }), "{err}");
        assert!(err.is_out_of_space());
        assert!(!ws.health().unwrap().ok());
        assert!(ws.list().unwrap().is_empty());
        drop(ws);

        fx.cfg.host_reserve = Reserve {
            bytes: 256 * MIB,
            percent: 0,
        };
        fx.cfg.fs_reserve = Reserve {
            bytes: 1 << 40,
            percent: 0,
        };
        let ws = fx.open();
        let err = ws.create("a", OWNER, OWNER, LIMIT).unwrap_err();
        assert!(
            matches!(err, WorkspaceError::FilesystemFull { .. }),
            "{err}"
        );
        assert!(ws.list().unwrap().is_empty());
        fx.finish(ws);
    });
}

#[test]
fn the_image_grows_while_the_host_has_room() {
    bounded(T, || {
        let mut fx = btrfs();
        fx.cfg.image.initial_bytes = 256 * MIB;
        fx.cfg.image.max_bytes = Some(768 * MIB);
        fx.cfg.maintenance_interval = Some(Duration::from_millis(50));
        let ws = fx.open();
        let start = ws.health().unwrap().image.unwrap();
        assert!(start.fully_backed, "{start:?}");
        let a = ws.create("big", OWNER, OWNER, 700 * MIB).unwrap();
        // Write 400 MiB (more than the first image holds) in steps the grower can follow.
        for i in 0..25 {
            let r = fill_as(OWNER, OWNER, &a.path.join(format!("f{i}")), 16 * MIB);
            assert_eq!(r.errno, 0, "after {} MiB: {r:?}", i * 16);
            syncfs(&a.path);
            ws.maintain().unwrap();
        }
        let end = ws.health().unwrap().image.unwrap();
        assert!(end.size_bytes > start.size_bytes, "{start:?} -> {end:?}");
        assert!(end.size_bytes <= 768 * MIB);
        assert!(end.fully_backed, "{end:?}");
        assert!(ws.free_bytes().unwrap() > 0);
        fx.finish(ws);
    });
}

/// A sandbox fills its quota and is deleted: the image grew for it, and gives the space back
/// to the host (allocated blocks, as `du` counts them) once the maintenance shrinks it; it
/// stays fully allocated and usable, and `image_usage` (doctor) says what it takes and holds.
#[test]
fn deleted_data_returns_to_the_host() {
    bounded(T, || {
        let mut fx = btrfs();
        fx.cfg.image.initial_bytes = 256 * MIB;
        fx.cfg.image.max_bytes = Some(1024 * MIB);
        fx.cfg.image.grow_step_bytes = 128 * MIB;
        let ws = fx.open();
        let blocks = |ws: &Workspaces| ws.health().unwrap().image.unwrap().allocated_bytes;
        let start = blocks(&ws);
        let a = ws.create("big", OWNER, OWNER, 600 * MIB).unwrap();
        // 512 MiB in, and past the quota: EDQUOT, as a sandbox filling its quota sees.
        for i in 0..40 {
            let r = fill_as(OWNER, OWNER, &a.path.join(format!("f{i}")), 16 * MIB);
            syncfs(&a.path);
            ws.maintain().unwrap();
            if r.errno != 0 {
                assert_eq!(r.errno, libc::EDQUOT, "after {} MiB: {r:?}", i * 16);
                break;
            }
        }
        let full = blocks(&ws);
        assert!(
            full >= start + 384 * MIB,
            "the image did not grow: {start} -> {full}"
        );
        let usage = sandlot_workspace::image_usage(fx.dir()).unwrap();
        assert_eq!(usage.allocated_bytes, full);
        assert!(usage.held_bytes.unwrap() >= 512 * MIB, "{usage:?}");

        ws.remove("big").unwrap();
        // The cleaner drops the subvolume in the background; then the image shrinks.
        let shrunk = wait_until(Duration::from_secs(30), || {
            syncfs(ws.mount_point().unwrap());
            ws.shrink().unwrap()
        });
        assert!(
            shrunk,
            "the image never shrank: {:?}",
            ws.health().unwrap().image
        );
        let after = ws.health().unwrap().image.unwrap();
        assert!(
            after.allocated_bytes <= start + 128 * MIB,
            "{start} at the start, {full} full, {} after the delete",
            after.allocated_bytes
        );
        assert!(after.fully_backed, "{after:?}");
        let usage = sandlot_workspace::image_usage(fx.dir()).unwrap();
        assert_eq!(usage.allocated_bytes, after.allocated_bytes);
        assert!(usage.held_bytes.unwrap() < 128 * MIB, "{usage:?}");
        // Nothing more to give back, and the filesystem still takes a workspace's writes.
        assert!(!ws.shrink().unwrap());
        let b = ws.create("again", OWNER, OWNER, 200 * MIB).unwrap();
        let r = fill_as(OWNER, OWNER, &b.path.join("f"), 100 * MIB);
        assert_eq!(r.errno, 0, "{r:?}");
        assert!(
            ws.health().unwrap().ok(),
            "{:?}",
            ws.health().unwrap().problems
        );
        fx.finish(ws);
    });
}

#[test]
fn open_tree_gives_a_nosuid_nodev_detached_mount() {
    bounded(T, || {
        let fx = btrfs();
        let ws = fx.open();
        let a = ws.create("a", OWNER, OWNER, LIMIT).unwrap();
        std::fs::write(a.path.join("hello"), b"hi").unwrap();
        let target = fx.tmp.path().join("attach");
        std::fs::create_dir(&target).unwrap();
        std::fs::set_permissions(fx.tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();

        // Attached in the host namespace: nosuid and nodev, same files.
        let fd = ws.open_tree("a").unwrap();
        move_mount(&fd, &target).unwrap();
        // The fd pins the mount; the sandbox closes it once attached.
        drop(fd);
        let opts = mount_options(&target).unwrap();
        assert!(opts.contains("nosuid") && opts.contains("nodev"), "{opts}");
        assert_eq!(std::fs::read(target.join("hello")).unwrap(), b"hi");
        // A writer forked by a concurrent test may hold a copy of the fd for a moment.
        assert!(wait_until(Duration::from_secs(5), || {
            nix::mount::umount2(&target, nix::mount::MntFlags::empty()).is_ok()
        }));

        // Attached from inside a new user + mount namespace, as the sandbox does.
        let fd = ws.open_tree("a").unwrap();
        assert_eq!(attach_in_user_namespace(&fd, &target), 0);
        assert!(
            !target.join("hello").exists(),
            "the child's mount leaked to the host"
        );
        drop(fd);
        assert!(matches!(
            ws.open_tree("nope"),
            Err(WorkspaceError::NotFound { .. })
        ));
        fx.finish(ws);
    });
}

fn move_mount(fd: &impl std::os::fd::AsRawFd, target: &Path) -> std::io::Result<()> {
    let t = std::ffi::CString::new(target.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: move_mount(2) with a valid fd, an empty from-path and a NUL-terminated target.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            0x4u32, // MOVE_MOUNT_F_EMPTY_PATH
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Forks a child that enters new user and mount namespaces, attaches `fd` at `target` and reads
/// `target/hello`. Returns 0 on success, else the step that failed.
fn attach_in_user_namespace(fd: &impl std::os::fd::AsRawFd, target: &Path) -> i32 {
    let t = std::ffi::CString::new(target.as_os_str().as_encoded_bytes()).unwrap();
    let hello =
        std::ffi::CString::new(target.join("hello").as_os_str().as_encoded_bytes()).unwrap();
    let raw = fd.as_raw_fd();
    // SAFETY: the child makes only raw syscalls on memory allocated before the fork, then _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: as above.
        unsafe {
            if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0 {
                libc::_exit(10);
            }
            if libc::syscall(
                libc::SYS_move_mount,
                raw,
                c"".as_ptr(),
                libc::AT_FDCWD,
                t.as_ptr(),
                0x4u32,
            ) != 0
            {
                libc::_exit(11);
            }
            let f = libc::open(hello.as_ptr(), libc::O_RDONLY);
            libc::_exit(if f >= 0 { 0 } else { 12 });
        }
    }
    let mut status = 0;
    // SAFETY: reaping our child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    libc::WEXITSTATUS(status)
}

/// The data dir on a small tmpfs that then fills completely: with the image fully allocated,
/// running workspaces see only their own quota (EDQUOT), never an I/O error, the filesystem stays
/// writable, and new workspaces are refused with HostSpaceLow.
#[test]
fn a_full_host_disk_harms_no_running_workspace() {
    bounded(T, || full_host(false));
}

/// The same with a sparse image (`ImageConfig::sparse`): the image cannot grow, the loop device
/// fails the write, Btrfs aborts its transaction and the whole workspace filesystem turns
/// read-only (EROFS for every workspace). This is why images are allocated by default. (It
/// puts Btrfs's transaction-abort errors in the kernel log, on purpose.)
#[test]
fn a_full_host_disk_turns_a_sparse_image_read_only() {
    bounded(T, || full_host(true));
}

fn full_host(sparse: bool) {
    {
        let mut fx = btrfs();
        fx.cfg.image.sparse = sparse;
        let host = fx.tmp.path().join("host");
        std::fs::create_dir(&host).unwrap();
        nix::mount::mount(
            Some("tmpfs"),
            &host,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some("size=640m,mode=0700"),
        )
        .unwrap();
        fx.cfg.dir = host.join("disk");
        fx.cfg.host_reserve = Reserve {
            bytes: 32 * MIB,
            percent: 0,
        };
        let ws = fx.open();
        let a = ws.create("a", OWNER, OWNER, 128 * MIB).unwrap();
        let b = ws.create("b", OTHER, OTHER, 128 * MIB).unwrap();

        // Something else fills the host filesystem to the last byte.
        let r = fill_as(0, 0, &host.join("filler"), 1 << 40);
        assert_eq!(r.errno, libc::ENOSPC, "{r:?}");
        if sparse {
            let r = fill_as(OWNER, OWNER, &a.path.join("big"), 1 << 30);
            assert!([libc::EROFS, libc::EIO].contains(&r.errno), "{r:?}");
            let opts = mount_options(ws.mount_point().unwrap()).unwrap();
            assert!(opts.contains(" ro,"), "{opts}");
            let health = ws.health().unwrap();
            assert!(
                health.problems.iter().any(|p| p.contains("read-only")),
                "{health:?}"
            );
            ws.unmount().unwrap();
            nix::mount::umount2(&host, nix::mount::MntFlags::MNT_DETACH).unwrap();
            return;
        }

        let r = fill_as(OWNER, OWNER, &a.path.join("big"), 1 << 30);
        assert_eq!(r.errno, libc::EDQUOT, "{r:?}");
        let r = fill_as(OTHER, OTHER, &b.path.join("some"), 32 * MIB);
        assert_eq!((r.errno, r.written), (0, 32 * MIB), "{r:?}");
        syncfs(&b.path);
        let opts = mount_options(ws.mount_point().unwrap()).unwrap();
        assert!(opts.starts_with("rw,") && opts.contains(" rw,"), "{opts}");
        let err = ws.create("c", OWNER, OWNER, LIMIT).unwrap_err();
        assert!(matches!(err, WorkspaceError::HostSpaceLow { .. }), "{err}");
        let health = ws.health().unwrap();
        assert_eq!(health.problems.len(), 1, "{:?}", health.problems);
        assert!(health.problems[0].starts_with("host disk below its reserve"));

        // Room again: creation works again.
        std::fs::remove_file(host.join("filler")).unwrap();
        ws.create("c", OWNER, OWNER, LIMIT).unwrap();
        fx.finish(ws);
        // A writer forked by a concurrent test may hold a copy of an fd for a moment.
        assert!(wait_until(Duration::from_secs(5), || {
            nix::mount::umount2(&host, nix::mount::MntFlags::empty()).is_ok()
        }));
    }
}

#[test]
fn a_tenant_group_caps_its_workspaces_together() {
    bounded(T, || tenant_group_caps(QuotaMode::Simple));
}

#[test]
fn a_tenant_group_caps_under_full_qgroups_too() {
    bounded(T, || tenant_group_caps(QuotaMode::Full));
}

/// A write at the tenant's cap: `EDQUOT`, at the first write or already when creating the file
/// (which needs metadata bytes; `fill_as` reports a failed open as -2).
#[track_caller]
fn assert_capped(r: &FillResult) {
    assert!(
        r.errno == libc::EDQUOT || (r.errno == -2 && r.written == 0),
        "{r:?}"
    );
    assert!(r.written < 2 * MIB, "{r:?}");
}

fn tenant_group_caps(mode: QuotaMode) {
    const CAP: u64 = 64 * MIB;
    let mut fx = btrfs();
    fx.cfg.quota = mode;
    {
        let ws = fx.open();
        ws.set_tenant_limit("acme", Some(CAP)).unwrap();
        let a = ws
            .create_for("a", OWNER, OWNER, 4 * CAP, Some("acme"))
            .unwrap();
        let b = ws
            .create_for("b", OTHER, OTHER, 4 * CAP, Some("acme"))
            .unwrap();
        let c = ws
            .create_for("c", OWNER, OWNER, 4 * CAP, Some("zeta"))
            .unwrap();

        let first = fill_as(OWNER, OWNER, &a.path.join("f"), 40 * MIB);
        assert_eq!((first.errno, first.written), (0, 40 * MIB));
        let second = fill_as(OTHER, OTHER, &b.path.join("f"), CAP);
        assert_eq!(second.errno, libc::EDQUOT, "{second:?}");
        let total = first.written + second.written;
        assert!((CAP - 8 * MIB..=CAP).contains(&total), "{total}");
        let (used, limit) = ws.tenant_usage("acme").unwrap();
        assert_eq!(limit, Some(CAP));
        assert!((CAP - 8 * MIB..=CAP + MIB).contains(&used), "{used}");

        // Another tenant's workspace is not in the group.
        let other = fill_as(OWNER, OWNER, &c.path.join("f"), CAP);
        assert_eq!((other.errno, other.written), (0, CAP));

        // A snapshot made in the group is capped with it.
        ws.snapshot_for("a", "snap", Some("acme")).unwrap();
        let snap = ws.path("snap").unwrap();
        assert_capped(&fill_as(OWNER, OWNER, &snap.join("g"), 16 * MIB));

        // Raising the cap lets the same workspaces write on.
        ws.set_tenant_limit("acme", Some(2 * CAP)).unwrap();
        let more = fill_as(OTHER, OTHER, &b.path.join("g"), 16 * MIB);
        assert_eq!((more.errno, more.written), (0, 16 * MIB));
        ws.set_tenant_limit("acme", Some(CAP)).unwrap();

        // A workspace made for nobody joins with its bytes (simple quotas: exactly).
        let p = ws.create("pooled", OWNER, OWNER, 4 * CAP).unwrap();
        let w = fill_as(OWNER, OWNER, &p.path.join("f"), 4 * MIB);
        assert_eq!(w.errno, 0);
        syncfs(&p.path);
        let before = ws.tenant_usage("zeta").unwrap().0;
        ws.assign("pooled", "zeta").unwrap();
        ws.assign("pooled", "zeta").unwrap();
        syncfs(&p.path);
        let after = ws.tenant_usage("zeta").unwrap().0;
        assert!(after >= before + 4 * MIB, "{before} -> {after}");
        let names: Vec<String> = ws.tenant_groups().into_iter().map(|(t, _)| t).collect();
        assert_eq!(names, ["acme", "zeta"]);
        assert!(ws.assign("pooled", "bad name").is_err());
        assert!(
            ws.health().unwrap().problems.is_empty(),
            "{:?}",
            ws.health()
        );
        drop(ws);
    }
    // The group, its members and its limit are on disk: a reopen keeps the cap.
    let ws = fx.open();
    assert_capped(&fill_as(
        OTHER,
        OTHER,
        &ws.path("b").unwrap().join("h"),
        16 * MIB,
    ));
    // Removing a member gives its bytes back to the tenant.
    ws.remove("b").unwrap();
    ws.remove("snap").unwrap();
    // The maintenance pass pokes the cleaner: the bytes come back well before the 30 s commit
    // interval would.
    let back = wait_until(Duration::from_secs(5), || {
        ws.maintain().unwrap();
        ws.tenant_usage("acme").unwrap().0 < 48 * MIB
    });
    assert!(back, "{:?}", ws.tenant_usage("acme"));
    let r = fill_as(OWNER, OWNER, &ws.path("a").unwrap().join("h"), 8 * MIB);
    assert_eq!((r.errno, r.written), (0, 8 * MIB));
    fx.finish(ws);
}

#[test]
fn the_file_cap_clamps_past_the_count_and_releases_under_it() {
    bounded(T, || {
        let mut fx = btrfs();
        fx.cfg.max_files = Some(1000);
        let ws = fx.open();
        assert_eq!(ws.max_files(), Some(1000));
        let w = ws.create("w", OWNER, OWNER, LIMIT).unwrap();
        let make = |from: usize, n: usize| -> std::io::Result<()> {
            for i in from..from + n {
                std::fs::File::create(w.path.join(i.to_string()))?;
            }
            Ok(())
        };
        make(0, 900).unwrap();
        assert_eq!(ws.enforce_file_cap().unwrap(), 0);
        make(900, 600).unwrap();
        assert_eq!(ws.enforce_file_cap().unwrap(), 1);
        let e = make(2000, 1).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EDQUOT), "{e}");
        // The limit it will get back is what it reports, and can change while clamped.
        assert_eq!(ws.get("w").unwrap().limit_bytes, LIMIT);
        ws.set_limit("w", 2 * LIMIT).unwrap();
        assert_eq!(ws.get("w").unwrap().limit_bytes, 2 * LIMIT);
        // Deleting works at the clamp; at or under the cap the limit comes back.
        for i in 0..600 {
            std::fs::remove_file(w.path.join(i.to_string())).unwrap();
        }
        assert_eq!(ws.enforce_file_cap().unwrap(), 0);
        make(3000, 10).unwrap();
        let r = fill_as(OWNER, OWNER, &w.path.join("big"), LIMIT + 8 * MIB);
        assert_eq!(
            (r.errno, r.written),
            (0, LIMIT + 8 * MIB),
            "the raised limit"
        );
        fx.finish(ws);
    });
}
