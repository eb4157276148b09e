//! Root never follows a path a sandbox can change: `clone_files_into` (fork and restore into a
//! pooled sandbox whose code already runs) and `reown` against a thread that, with the
//! destination owner's filesystem uid as a sandbox's code has, swaps every directory and file
//! it finds in the destination for a symlink to a canary tree outside the workspace, in a loop,
//! while the copy runs. The canary is world-writable, so only the copy's refusal to follow a
//! symlink (not the owner's lack of permission) keeps it intact: after every round its names,
//! contents, modes and owners are exactly what they were.

use crate::common;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use sandlot_workspace::{fsat, BackendChoice, Workspaces};

const LIMIT: u64 = 256 * MIB;
const ROUNDS: usize = 1000;

/// Everything about a tree that a wrong chmod, chown, create or write would change.
fn tree_state(root: &Path) -> BTreeMap<PathBuf, (u32, u32, u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let m = std::fs::symlink_metadata(&p).unwrap();
        let body = if m.is_file() {
            std::fs::read(&p).unwrap()
        } else if m.file_type().is_symlink() {
            std::fs::read_link(&p)
                .unwrap()
                .as_os_str()
                .as_bytes()
                .to_vec()
        } else {
            Vec::new()
        };
        out.insert(
            p.strip_prefix(root).unwrap().to_path_buf(),
            (m.mode(), m.uid(), m.gid(), body),
        );
        if m.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        }
    }
    out
}

/// A canary outside every workspace, writable by anyone: a sub-directory, files, a symlink.
fn make_canary(root: &Path) -> PathBuf {
    let canary = root.join("canary");
    std::fs::create_dir_all(canary.join("sub")).unwrap();
    std::fs::write(canary.join("passwd"), b"root:x:0:0\n").unwrap();
    std::fs::write(canary.join("sub/shadow"), b"secret\n").unwrap();
    std::os::unix::fs::symlink("passwd", canary.join("link")).unwrap();
    for (p, mode) in [
        ("", 0o777),
        ("sub", 0o777),
        ("passwd", 0o666),
        ("sub/shadow", 0o666),
    ] {
        std::fs::set_permissions(canary.join(p), std::fs::Permissions::from_mode(mode)).unwrap();
    }
    // The way there must be open to the owner uid too.
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
    canary
}

/// The source workspace: directories (mode 0700, unlike the canary's), files (0600, one
/// setuid), symlinks pointing anywhere, a few levels deep.
fn fill_source(ws: &Workspaces) {
    ws.create("src", OWNER, OWNER, LIMIT).unwrap();
    let src = ws.path("src").unwrap();
    for d in 0..12 {
        let dir = src.join(format!("d{d}"));
        std::fs::create_dir_all(dir.join("sub/deeper")).unwrap();
        for f in 0..4 {
            std::fs::write(dir.join(format!("f{f}")), format!("{d}/{f}")).unwrap();
            std::fs::write(dir.join(format!("sub/g{f}")), b"x").unwrap();
        }
        std::fs::write(dir.join("sub/deeper/h"), b"deep").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.join("abs")).unwrap();
        std::fs::set_permissions(dir.join("f0"), std::fs::Permissions::from_mode(0o4755)).unwrap();
        for p in ["", "sub", "sub/deeper"] {
            std::fs::set_permissions(dir.join(p), std::fs::Permissions::from_mode(0o700)).unwrap();
        }
    }
    ws.reown("src", OTHER, OTHER).unwrap();
}

/// Swaps what it finds in `dst` for symlinks to the canary until told to stop, with the
/// owner's filesystem uid (a sandbox reaches its workspace through its own mount; the test
/// through an fd of it, since the host path's parents are root-only).
fn attacker(dst: OwnedFd, canary: PathBuf, stop: Arc<AtomicBool>, swaps: Arc<AtomicU64>) {
    fsat::as_fsuid(OWNER, OWNER, || {
        let target = CString::new(canary.as_os_str().as_bytes()).unwrap();
        let root = dst.as_raw_fd();
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let Ok(top) = fsat::open_dir_at(root, b".") else {
                continue;
            };
            let mut dirs = vec![top];
            while let Some(dir) = dirs.pop() {
                let Ok(names) = fsat::list_names(&dir) else {
                    continue;
                };
                for name in names {
                    if name.as_bytes().starts_with(b".moved") {
                        continue;
                    }
                    let Ok(st) = fsat::stat_at(dir.as_raw_fd(), &name) else {
                        continue;
                    };
                    n += 1;
                    let moved = CString::new(format!(".moved{n}")).unwrap();
                    if fsat::rename_at(dir.as_raw_fd(), &name, root, &moved, 0).is_ok() {
                        if fsat::symlink_at(&target, dir.as_raw_fd(), &name).is_ok() {
                            swaps.fetch_add(1, Ordering::Relaxed);
                        }
                        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
                            if let Ok(fd) = fsat::open_dir_at(root, moved.as_bytes()) {
                                dirs.push(fd);
                            }
                        }
                    }
                }
            }
            // Names the copy is about to make: take them first.
            for d in 0..12 {
                let name = CString::new(format!("d{d}")).unwrap();
                let _ = fsat::symlink_at(&target, root, &name);
            }
        }
    })
}

fn race_rounds(rounds: usize) {
    let fx = Fixture::new(BackendChoice::Btrfs);
    let ws = fx.open();
    let canary = make_canary(fx.tmp.path());
    let before = tree_state(&canary);
    fill_source(&ws);
    let (mut copied, mut refused, mut reowned) = (0u64, 0u64, 0u64);
    let swaps = Arc::new(AtomicU64::new(0));
    for round in 0..rounds {
        ws.create("dst", OWNER, OWNER, LIMIT).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let t = {
            let dst = fsat::open_root(&ws.path("dst").unwrap()).unwrap();
            let canary = canary.clone();
            let (stop, swaps) = (stop.clone(), swaps.clone());
            std::thread::spawn(move || attacker(dst, canary, stop, swaps))
        };
        // Give the attacker a head start on some rounds, none on others.
        if round % 2 == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
        match ws.clone_files_into("src", "dst", OWNER, OWNER) {
            Ok(_) => copied += 1,
            Err(_) => refused += 1,
        }
        // Re-owning a tree the attacker is still changing (a volume given to a new sandbox).
        if ws.reown("dst", OWNER, OWNER).is_ok() {
            reowned += 1;
        }
        stop.store(true, Ordering::Relaxed);
        t.join().unwrap();
        assert_eq!(
            tree_state(&canary),
            before,
            "round {round}: the canary outside the workspace changed"
        );
        // Whatever the copy made in the workspace is the owner's, without setuid.
        for (p, (mode, uid, _, _)) in tree_state(&ws.path("dst").unwrap()) {
            assert_eq!(uid, OWNER, "round {round}: {} not the owner's", p.display());
            assert_eq!(
                mode & 0o6000,
                0,
                "round {round}: {} keeps setuid",
                p.display()
            );
        }
        ws.remove("dst").unwrap();
    }
    eprintln!(
        "{rounds} rounds: {copied} copies completed, {refused} refused by a swap, {reowned} \
         re-owns completed, {} swaps made; canary unchanged",
        swaps.load(Ordering::Relaxed)
    );
    assert!(
        swaps.load(Ordering::Relaxed) > rounds as u64,
        "the attacker never swapped"
    );
    assert!(refused > 0, "no swap ever landed in the copy's way");
    fx.finish(ws);
}

#[test]
fn clone_and_reown_never_leave_the_workspace_while_it_is_swapped() {
    bounded(Duration::from_secs(1500), || race_rounds(ROUNDS));
}

/// Without interference the copy is exact: names, contents, symlink targets, modes without
/// setuid/setgid, everything the new owner's.
#[test]
fn clone_copies_everything_as_the_new_owner() {
    bounded(Duration::from_secs(60), || {
        let fx = Fixture::new(BackendChoice::Btrfs);
        let ws = fx.open();
        fill_source(&ws);
        ws.create("dst", OWNER, OWNER, LIMIT).unwrap();
        let made = ws.clone_files_into("src", "dst", OWNER, OWNER).unwrap();
        let src = tree_state(&ws.path("src").unwrap());
        let dst = tree_state(&ws.path("dst").unwrap());
        assert_eq!(made as usize, src.len() - 1);
        assert_eq!(
            src.keys().collect::<Vec<_>>(),
            dst.keys().collect::<Vec<_>>()
        );
        for (p, (mode, uid, gid, body)) in &dst {
            let (smode, suid, _, sbody) = &src[p];
            assert_eq!((*uid, *gid), (OWNER, OWNER), "{}", p.display());
            assert_eq!(*suid, OTHER);
            if !p.as_os_str().is_empty() {
                assert_eq!(*mode, smode & !0o6000, "{}", p.display());
            }
            assert_eq!(body, sbody, "{}", p.display());
        }
        assert_eq!(dst[Path::new("d3/abs")].3, b"/etc/passwd");
        fx.finish(ws);
    });
}
