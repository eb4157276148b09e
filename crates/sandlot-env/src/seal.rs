//! Sealing a jailed build's tree: once the steps that write it have run (and nothing of the
//! build runs any more: its cgroup is empty), every entry is handed to root and made
//! read-only for everyone else (directories 0755, files 0644, or 0755 when their owner could
//! execute them; no setuid, setgid or sticky bit), so that the verifier, every sandbox and
//! the next build see a tree no build uid can change.
//!
//! The tree was written by package code, so the walk never follows a path it holds: each
//! directory is opened relative to its parent's descriptor with `O_NOFOLLOW`, each file is
//! changed through its own descriptor, symlinks are changed themselves (`AT_SYMLINK_NOFOLLOW`)
//! and never opened, and anything else (FIFOs, sockets) is removed. An entry owned by anyone
//! but the build's uid cannot have been made honestly (a hard link to a file of someone else)
//! and fails the build; so does a tree deeper than [`MAX_DEPTH`].

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::error::EnvError;

/// Deepest directory nesting accepted (a Python environment is a dozen levels deep).
pub(crate) const MAX_DEPTH: usize = 128;

/// What sealing did, for the build log.
#[derive(Debug, Default)]
pub(crate) struct Sealed {
    /// Entries handed to root.
    pub entries: usize,
    /// Special files removed, by path.
    pub removed: Vec<PathBuf>,
}

/// Seals the tree at `root`, every entry of which must be owned by `uid`.
pub(crate) fn seal(root: &Path, uid: u32) -> Result<Sealed, EnvError> {
    let c_root = CString::new(root.as_os_str().as_bytes()).map_err(|_| EnvError::Seal {
        path: root.to_path_buf(),
        detail: "NUL in path".into(),
    })?;
    let dir = open_at(libc::AT_FDCWD, &c_root, libc::O_DIRECTORY, root)?;
    let st = fstat(&dir, root)?;
    check_owner(&st, uid, root)?;
    let mut sealed = Sealed::default();
    seal_dir(&dir, root, uid, 0, &mut sealed)?;
    change(&dir, 0o755, root)?;
    sealed.entries += 1;
    Ok(sealed)
}

fn seal_dir(
    dir: &OwnedFd,
    path: &Path,
    uid: u32,
    depth: usize,
    sealed: &mut Sealed,
) -> Result<(), EnvError> {
    if depth >= MAX_DEPTH {
        return Err(EnvError::Seal {
            path: path.to_path_buf(),
            detail: format!("nested deeper than {MAX_DEPTH} directories"),
        });
    }
    for name in list(dir, path)? {
        let entry_path = path.join(std::ffi::OsStr::from_bytes(name.as_bytes()));
        let st = fstatat(dir, &name, &entry_path)?;
        check_owner(&st, uid, &entry_path)?;
        match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => {
                let sub = open_at(dir.as_raw_fd(), &name, libc::O_DIRECTORY, &entry_path)?;
                same_inode(&sub, &st, &entry_path)?;
                seal_dir(&sub, &entry_path, uid, depth + 1, sealed)?;
                change(&sub, 0o755, &entry_path)?;
            }
            libc::S_IFREG => {
                let file = open_at(dir.as_raw_fd(), &name, libc::O_NONBLOCK, &entry_path)?;
                same_inode(&file, &st, &entry_path)?;
                let mode = if st.st_mode & 0o100 != 0 {
                    0o755
                } else {
                    0o644
                };
                change(&file, mode, &entry_path)?;
            }
            libc::S_IFLNK => {
                // SAFETY: valid dir fd and NUL-terminated name; AT_SYMLINK_NOFOLLOW changes
                // the link itself.
                let rc = unsafe {
                    libc::fchownat(
                        dir.as_raw_fd(),
                        name.as_ptr(),
                        0,
                        0,
                        libc::AT_SYMLINK_NOFOLLOW,
                    )
                };
                if rc != 0 {
                    return Err(seal_io(&entry_path, io::Error::last_os_error()));
                }
            }
            _ => {
                // SAFETY: valid dir fd and NUL-terminated name; unlinkat removes the entry
                // itself, never what it names.
                if unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) } != 0 {
                    return Err(seal_io(&entry_path, io::Error::last_os_error()));
                }
                sealed.removed.push(entry_path);
                continue;
            }
        }
        sealed.entries += 1;
    }
    Ok(())
}

/// The names in the directory open at `dir` (through its descriptor, not its path).
fn list(dir: &OwnedFd, path: &Path) -> Result<Vec<CString>, EnvError> {
    let entries = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))
        .map_err(|e| seal_io(path, e))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| seal_io(path, e))?;
        let name = CString::new(entry.file_name().as_bytes()).map_err(|_| EnvError::Seal {
            path: path.to_path_buf(),
            detail: "NUL in a file name".into(),
        })?;
        names.push(name);
    }
    Ok(names)
}

/// `openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | extra)`.
fn open_at(
    dirfd: RawFd,
    name: &CStr,
    extra: libc::c_int,
    path: &Path,
) -> Result<OwnedFd, EnvError> {
    // SAFETY: a valid dir fd (or AT_FDCWD) and a NUL-terminated name; returns a new fd or -1.
    let fd = unsafe {
        libc::openat(
            dirfd,
            name.as_ptr(),
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC | extra,
        )
    };
    if fd < 0 {
        return Err(seal_io(path, io::Error::last_os_error()));
    }
    // SAFETY: the kernel just returned this fd and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn fstat(fd: &OwnedFd, path: &Path) -> Result<libc::stat, EnvError> {
    // SAFETY: all-zero is a valid `stat`, which fstat fills.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd and a valid out-pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(seal_io(path, io::Error::last_os_error()));
    }
    Ok(st)
}

fn fstatat(dir: &OwnedFd, name: &CStr, path: &Path) -> Result<libc::stat, EnvError> {
    // SAFETY: all-zero is a valid `stat`, which fstatat fills.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid dir fd, a NUL-terminated name and a valid out-pointer.
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        return Err(seal_io(path, io::Error::last_os_error()));
    }
    Ok(st)
}

fn check_owner(st: &libc::stat, uid: u32, path: &Path) -> Result<(), EnvError> {
    if st.st_uid == uid {
        Ok(())
    } else {
        Err(EnvError::Seal {
            path: path.to_path_buf(),
            detail: format!(
                "owned by uid {}, not the build's uid {uid}: a build cannot make that",
                st.st_uid
            ),
        })
    }
}

/// The opened entry is the one stat'ed (nothing runs that could swap it, but say so if it
/// did).
fn same_inode(fd: &OwnedFd, st: &libc::stat, path: &Path) -> Result<(), EnvError> {
    let now = fstat(fd, path)?;
    if now.st_dev == st.st_dev && now.st_ino == st.st_ino {
        Ok(())
    } else {
        Err(EnvError::Seal {
            path: path.to_path_buf(),
            detail: "changed while it was sealed".into(),
        })
    }
}

/// Hands the open entry to root:root with `mode` (which also clears setuid, setgid, sticky).
fn change(fd: &OwnedFd, mode: libc::mode_t, path: &Path) -> Result<(), EnvError> {
    // SAFETY: a valid fd; fchown and fchmod change the open file only.
    if unsafe { libc::fchown(fd.as_raw_fd(), 0, 0) } != 0 {
        return Err(seal_io(path, io::Error::last_os_error()));
    }
    // SAFETY: as above.
    if unsafe { libc::fchmod(fd.as_raw_fd(), mode) } != 0 {
        return Err(seal_io(path, io::Error::last_os_error()));
    }
    Ok(())
}

fn seal_io(path: &Path, e: io::Error) -> EnvError {
    EnvError::Seal {
        path: path.to_path_buf(),
        detail: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};

    /// Runs only as root (the build's callers are): hands a tree of another uid to root,
    /// without following the symlink planted in it, and refuses a foreign file.
    #[test]
    fn a_build_tree_is_handed_to_root_without_following_its_symlinks() {
        if !nix_is_root() {
            assert!(std::env::var_os("CI").is_none(), "CI runs as root");
            return;
        }
        let uid = 0x7fff_0123;
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::write(&outside, b"x").unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o600)).unwrap();
        let root = dir.path().join("env");
        std::fs::create_dir_all(root.join("lib/sub")).unwrap();
        std::fs::write(root.join("lib/sub/mod.py"), b"").unwrap();
        std::fs::set_permissions(
            root.join("lib/sub/mod.py"),
            std::fs::Permissions::from_mode(0o4777),
        )
        .unwrap();
        symlink(&outside, root.join("lib/escape")).unwrap();
        nix_mkfifo(&root.join("lib/fifo"));
        for p in [
            "",
            "lib",
            "lib/sub",
            "lib/sub/mod.py",
            "lib/escape",
            "lib/fifo",
        ] {
            std::os::unix::fs::lchown(root.join(p), Some(uid), Some(uid)).unwrap();
        }
        let sealed = seal(&root, uid).unwrap();
        assert_eq!(sealed.removed, vec![root.join("lib/fifo")]);
        let m = std::fs::metadata(root.join("lib/sub/mod.py")).unwrap();
        assert_eq!((m.uid(), m.mode() & 0o7777), (0, 0o755));
        let l = std::fs::symlink_metadata(root.join("lib/escape")).unwrap();
        assert_eq!(l.uid(), 0);
        // The symlink's target was not touched.
        let o = std::fs::metadata(&outside).unwrap();
        assert_eq!(o.mode() & 0o7777, 0o600);

        // A file of another owner (a hard link to someone else's file) fails the seal.
        let root2 = dir.path().join("env2");
        std::fs::create_dir(&root2).unwrap();
        std::fs::write(root2.join("foreign"), b"").unwrap();
        std::os::unix::fs::lchown(&root2, Some(uid), Some(uid)).unwrap();
        let err = seal(&root2, uid).unwrap_err().to_string();
        assert!(err.contains("owned by uid 0"), "{err}");
    }

    fn nix_is_root() -> bool {
        // SAFETY: geteuid cannot fail and touches no memory.
        unsafe { libc::geteuid() == 0 }
    }

    fn nix_mkfifo(path: &Path) {
        let c = CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    }
}
