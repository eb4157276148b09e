//! The LoopImage fallback on real (small) ext4 images: the same core cases as the Btrfs
//! backend, with ENOSPC at the image size and an inode cap.

use crate::common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::Duration;

use common::*;
use sandlot_workspace::{BackendChoice, BackendKind, Reserve, WorkspaceError, Workspaces};

const LIMIT: u64 = 64 * MIB;
const T: Duration = Duration::from_secs(60);

fn loop_images() -> Fixture {
    Fixture::new(BackendChoice::LoopImage)
}

fn has_cap_sys_resource() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .unwrap();
    const CAP_SYS_RESOURCE: u32 = 24;
    u64::from_str_radix(eff.trim(), 16).unwrap() & (1 << CAP_SYS_RESOURCE) != 0
}

#[test]
fn create_and_remove() {
    bounded(T, || {
        let fx = loop_images();
        let ws = fx.open();
        assert_eq!(ws.backend().kind, BackendKind::LoopImage);
        assert_eq!(ws.mount_point(), None);

        let a = ws.create("a", OWNER, OWNER, LIMIT).unwrap();
        assert_eq!(a.limit_bytes, LIMIT);
        assert!(a.inode_limit.unwrap() > 1000, "{a:?}");
        let meta = std::fs::metadata(&a.path).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (OWNER, OWNER));
        assert_eq!(meta.permissions().mode() & 0o7777, 0o755);
        assert_eq!(
            std::fs::read_dir(&a.path).unwrap().count(),
            0,
            "lost+found left"
        );
        let opts = mount_options(&a.path).unwrap();
        assert!(opts.contains("nosuid") && opts.contains("nodev"), "{opts}");
        assert!(matches!(
            ws.create("a", OWNER, OWNER, LIMIT),
            Err(WorkspaceError::Exists { .. })
        ));
        ws.create("b", OTHER, OTHER, LIMIT).unwrap();
        assert_eq!(ws.list().unwrap(), ["a", "b"]);

        assert!(matches!(
            ws.snapshot("a", "c"),
            Err(WorkspaceError::Unsupported { op: "snapshot", .. })
        ));

        std::fs::write(a.path.join("f"), vec![0u8; 8 * MIB as usize]).unwrap();
        syncfs(&a.path);
        assert!(ws.usage("a").unwrap() >= 8 * MIB);

        ws.remove("a").unwrap();
        assert!(!a.path.exists());
        assert!(matches!(
            ws.remove("a"),
            Err(WorkspaceError::NotFound { .. })
        ));
        assert_eq!(ws.list().unwrap(), ["b"]);
        assert!(
            ws.health().unwrap().ok(),
            "{:?}",
            ws.health().unwrap().problems
        );
        fx.finish(ws);
    });
}

#[test]
fn the_image_size_stops_the_owner_with_enospc_and_nobody_else() {
    bounded(T, || {
        let fx = loop_images();
        let ws = fx.open();
        let a = ws.create("full", OWNER, OWNER, LIMIT).unwrap();
        let b = ws.create("other", OTHER, OTHER, LIMIT).unwrap();
        let r = fill_as(OWNER, OWNER, &a.path.join("big"), 4 * LIMIT);
        assert_eq!(r.errno, libc::ENOSPC, "{r:?}");
        assert!(r.written <= LIMIT && r.written >= LIMIT - 12 * MIB, "{r:?}");
        assert_writable(&b.path);
        let r = fill_as(OTHER, OTHER, &b.path.join("some"), 16 * MIB);
        assert_eq!((r.errno, r.written), (0, 16 * MIB));
        let opts = mount_options(&a.path).unwrap();
        assert!(opts.starts_with("rw,") && opts.contains(" rw"), "{opts}");
        ws.create("after", OWNER, OWNER, LIMIT).unwrap();
        fx.finish(ws);
    });
}

#[test]
fn the_limit_can_grow_but_not_shrink() {
    bounded(T, || {
        let fx = loop_images();
        let ws = fx.open();
        let a = ws.create("a", OWNER, OWNER, 32 * MIB).unwrap();
        let r = fill_as(OWNER, OWNER, &a.path.join("one"), LIMIT);
        assert_eq!(r.errno, libc::ENOSPC, "{r:?}");
        if has_cap_sys_resource() {
            ws.set_limit("a", 96 * MIB).unwrap();
            assert_eq!(ws.get("a").unwrap().limit_bytes, 96 * MIB);
            let r = fill_as(OWNER, OWNER, &a.path.join("two"), 32 * MIB);
            assert_eq!((r.errno, r.written), (0, 32 * MIB), "{r:?}");
        } else {
            // Online ext4 growth needs CAP_SYS_RESOURCE: refused, and the image is put back.
            let err = ws.set_limit("a", 96 * MIB).unwrap_err();
            assert_eq!(
                (err.step(), err.errno()),
                ("EXT4_IOC_RESIZE_FS", libc::EPERM),
                "{err}"
            );
            assert_eq!(ws.get("a").unwrap().limit_bytes, 32 * MIB);
            assert!(ws.health().unwrap().ok());
        }
        assert!(matches!(
            ws.set_limit("a", 16 * MIB),
            Err(WorkspaceError::Unsupported { .. })
        ));
        fx.finish(ws);
    });
}

#[test]
fn reopen_after_crash_keeps_data() {
    bounded(T, || {
        let fx = loop_images();
        let ws = fx.open();
        let a = ws.create("keep", OWNER, OWNER, LIMIT).unwrap();
        std::fs::write(a.path.join("work.csv"), b"1,2,3").unwrap();
        ws.create("also", OWNER, OWNER, LIMIT).unwrap();
        drop(ws);

        // Mounts survived: reused.
        let ws = fx.open();
        assert_eq!(ws.list().unwrap(), ["also", "keep"]);
        assert_eq!(std::fs::read(a.path.join("work.csv")).unwrap(), b"1,2,3");
        assert_eq!(loops_backed_under(fx.dir()).len(), 2);
        drop(ws);

        // Mounts gone (loop devices with them): mounted again from the images.
        for mp in mounts_under(fx.dir()) {
            nix::mount::umount2(&mp, nix::mount::MntFlags::empty()).unwrap();
        }
        assert!(wait_until(Duration::from_secs(5), || loops_backed_under(
            fx.dir()
        )
        .is_empty()));
        let ws = fx.open();
        assert_eq!(std::fs::read(a.path.join("work.csv")).unwrap(), b"1,2,3");
        assert_eq!(ws.get("keep").unwrap().limit_bytes, LIMIT);
        assert!(
            ws.health().unwrap().ok(),
            "{:?}",
            ws.health().unwrap().problems
        );
        fx.finish(ws);
    });
}

#[test]
fn ids_are_validated() {
    bounded(T, || {
        let fx = loop_images();
        let ws = fx.open();
        let long = "x".repeat(65);
        for bad in ["../x", "a/b", "", long.as_str(), "..", "a b"] {
            for result in [
                ws.create(bad, OWNER, OWNER, LIMIT).map(drop),
                ws.remove(bad),
                ws.path(bad).map(drop),
                ws.set_limit(bad, LIMIT),
            ] {
                assert!(
                    matches!(result, Err(WorkspaceError::InvalidId { .. })),
                    "{bad:?}: {result:?}"
                );
            }
        }
        assert!(ws.list().unwrap().is_empty());
        fx.finish(ws);
    });
}

#[test]
fn create_is_refused_below_the_host_reserve() {
    bounded(T, || {
        let mut fx = loop_images();
        fx.cfg.host_reserve = Reserve {
            bytes: 1 << 60,
            percent: 0,
        };
        let ws = fx.open();
        let err = ws.create("a", OWNER, OWNER, LIMIT).unwrap_err();
        assert!(matches!(err, WorkspaceError::HostSpaceLow { .. }), "{err}");
        assert!(ws.list().unwrap().is_empty());
        assert!(!ws.health().unwrap().ok());
        fx.finish(ws);
    });
}

#[test]
fn open_tree_gives_a_detached_mount() {
    bounded(T, || {
        let fx = loop_images();
        let ws = fx.open();
        let a = ws.create("a", OWNER, OWNER, LIMIT).unwrap();
        std::fs::write(a.path.join("hello"), b"hi").unwrap();
        let fd = ws.open_tree("a").unwrap();
        let target = fx.tmp.path().join("attach");
        std::fs::create_dir(&target).unwrap();
        let t = std::ffi::CString::new(target.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: move_mount(2) with our fd, an empty from-path and a NUL-terminated target.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_move_mount,
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                c"".as_ptr(),
                libc::AT_FDCWD,
                t.as_ptr(),
                0x4u32,
            )
        };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
        drop(fd);
        assert_eq!(std::fs::read(target.join("hello")).unwrap(), b"hi");
        let opts = mount_options(&target).unwrap();
        assert!(opts.contains("nosuid") && opts.contains("nodev"), "{opts}");
        // A writer forked by a concurrent test may hold a copy of the fd for a moment.
        assert!(wait_until(Duration::from_secs(5), || {
            nix::mount::umount2(&target, nix::mount::MntFlags::empty()).is_ok()
        }));
        // Removing while nothing else holds it frees the loop device.
        ws.remove("a").unwrap();
        let ws2: &Workspaces = &ws;
        assert!(matches!(
            ws2.open_tree("a"),
            Err(WorkspaceError::NotFound { .. })
        ));
        fx.finish(ws);
    });
}
