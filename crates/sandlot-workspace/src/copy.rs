//! Copying files between workspaces and re-owning them, without following a path a sandbox
//! can change. The destination of [`clone_tree`] may be the workspace of a pooled sandbox whose
//! code is already running and can rename, replace or symlink anything in it while the copy
//! runs; so both walks are fd-relative ([`crate::fsat`]): each directory is entered through an
//! fd of its parent, each name resolved with `openat2` refusing symlinks, `..` and other
//! mounts, and modes and owners are set on fds. Everything on the destination side also runs
//! with the destination's uid as the filesystem uid, so the kernel checks it as that user's
//! and root's capabilities never apply there. A swap makes the copy fail (the caller then
//! boots a fresh sandbox); it never makes it write, chmod or chown anything outside the
//! destination.

use crate::error::{Result, WorkspaceError};
use crate::fsat::{self, Errno};
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Deepest directory a copy or re-own descends into (each level holds one or two fds). Paths
/// were bounded by `PATH_MAX` (about 2 000 levels) before the walks were fd-relative.
pub const MAX_DEPTH: usize = 1024;

/// Mode bits carried over: everything but setuid and setgid.
const MODE_MASK: u32 = 0o1777;

/// One directory being walked: its fd(s), its names and the next one to do.
struct Frame {
    src: OwnedFd,
    dst: Option<OwnedFd>,
    rel: PathBuf,
    names: Vec<CString>,
    next: usize,
}

fn sys(step: &'static str, root: &Path, rel: &Path) -> impl FnOnce(Errno) -> WorkspaceError {
    let path = if rel.as_os_str().is_empty() {
        root.to_path_buf()
    } else {
        root.join(rel)
    };
    move |source| WorkspaceError::Sys { step, path, source }
}

fn name_path(rel: &Path, name: &CString) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    rel.join(std::ffi::OsStr::from_bytes(name.to_bytes()))
}

/// Copies every entry under `from` into `to` (whose existing entries stay; an existing name
/// that is not a directory, or a directory turned into anything else meanwhile, fails the
/// copy), owned by `uid:gid`. Regular files are reflinked where the filesystem can (else
/// copied), directories and symlinks recreated, modes kept without setuid and setgid; other
/// types are skipped. Returns the entries made.
pub(crate) fn clone_tree(from: &Path, to: &Path, uid: u32, gid: u32) -> Result<u64> {
    let dst_side =
        |f: &mut dyn FnMut() -> std::result::Result<(), Errno>| fsat::as_fsuid(uid, gid, f);
    let src = fsat::open_root(from).map_err(sys("open", from, Path::new("")))?;
    // Both roots sit under the root-only `<dir>/mnt/ws` (a sandbox cannot rename them), so they
    // are opened by path, as root; everything below them is the sandbox's.
    let dst = fsat::open_root(to).map_err(sys("open", to, Path::new("")))?;
    let names = fsat::list_names(&src).map_err(sys("read_dir", from, Path::new("")))?;
    let mut stack = vec![Frame {
        src,
        dst: Some(dst),
        rel: PathBuf::new(),
        names,
        next: 0,
    }];
    let mut count = 0u64;
    while let Some(top) = stack.last_mut() {
        let Some(name) = top.names.get(top.next).cloned() else {
            stack.pop();
            continue;
        };
        top.next += 1;
        let rel = name_path(&top.rel, &name);
        let (s, d) = (
            top.src.as_raw_fd(),
            top.dst.as_ref().map_or(-1, |d| d.as_raw_fd()),
        );
        let st = fsat::stat_at(s, &name).map_err(sys("stat", from, &rel))?;
        let mode = st.st_mode & MODE_MASK;
        match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => {
                if stack.len() >= MAX_DEPTH {
                    return Err(WorkspaceError::TooDeep {
                        path: from.join(&rel),
                        max: MAX_DEPTH,
                    });
                }
                let sub = fsat::open_dir_at(s, name.to_bytes()).map_err(sys("open", from, &rel))?;
                let mut made = None;
                dst_side(&mut || {
                    let (fd, _) = fsat::make_dir_at(d, &name)?;
                    fsat::fchmod(fd.as_raw_fd(), mode)?;
                    fsat::chown_at(fd.as_raw_fd(), c"", uid, gid)?;
                    made = Some(fd);
                    Ok(())
                })
                .map_err(sys("mkdir", to, &rel))?;
                let names = fsat::list_names(&sub).map_err(sys("read_dir", from, &rel))?;
                stack.push(Frame {
                    src: sub,
                    dst: made,
                    rel,
                    names,
                    next: 0,
                });
            }
            libc::S_IFLNK => {
                let target = fsat::read_link_at(s, &name, libc::PATH_MAX as usize)
                    .map_err(sys("readlink", from, &rel))?;
                let target = CString::new(target).map_err(|_| Errno::EINVAL);
                let target = target.map_err(sys("readlink", from, &rel))?;
                dst_side(&mut || fsat::symlink_at(&target, d, &name))
                    .map_err(sys("symlink", to, &rel))?;
            }
            libc::S_IFREG => {
                let input = fsat::openat2(s, name.to_bytes(), libc::O_RDONLY | libc::O_NOCTTY, 0)
                    .map(std::fs::File::from)
                    .map_err(sys("open", from, &rel))?;
                let mut step = "create";
                dst_side(&mut || {
                    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY;
                    let output = std::fs::File::from(fsat::openat2(
                        d,
                        name.to_bytes(),
                        flags,
                        mode & 0o777,
                    )?);
                    step = "copy";
                    copy_data(&output, &input)?;
                    step = "chmod";
                    fsat::fchmod(output.as_raw_fd(), mode)?;
                    fsat::chown_at(output.as_raw_fd(), c"", uid, gid)
                })
                .map_err(|e| sys(step, to, &rel)(e))?;
            }
            _ => continue, // sockets, FIFOs, devices: not carried
        }
        count += 1;
    }
    Ok(count)
}

/// Gives `root` and every entry under it to `uid:gid`, symlinks included and never followed.
/// Returns how many entries were re-owned.
pub(crate) fn reown_tree(root: &Path, uid: u32, gid: u32) -> Result<u64> {
    let fd = fsat::open_root(root).map_err(sys("open", root, Path::new("")))?;
    fsat::chown_at(fd.as_raw_fd(), c"", uid, gid).map_err(sys("lchown", root, Path::new("")))?;
    let names = fsat::list_names(&fd).map_err(sys("read_dir", root, Path::new("")))?;
    let mut stack = vec![Frame {
        src: fd,
        dst: None,
        rel: PathBuf::new(),
        names,
        next: 0,
    }];
    let mut count = 1u64;
    while let Some(top) = stack.last_mut() {
        let Some(name) = top.names.get(top.next).cloned() else {
            stack.pop();
            continue;
        };
        top.next += 1;
        let rel = name_path(&top.rel, &name);
        let dir = top.src.as_raw_fd();
        fsat::chown_at(dir, &name, uid, gid).map_err(sys("lchown", root, &rel))?;
        count += 1;
        let st = fsat::stat_at(dir, &name).map_err(sys("stat", root, &rel))?;
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            if stack.len() >= MAX_DEPTH {
                return Err(WorkspaceError::TooDeep {
                    path: root.join(&rel),
                    max: MAX_DEPTH,
                });
            }
            let sub = fsat::open_dir_at(dir, name.to_bytes()).map_err(sys("open", root, &rel))?;
            let names = fsat::list_names(&sub).map_err(sys("read_dir", root, &rel))?;
            stack.push(Frame {
                src: sub,
                dst: None,
                rel,
                names,
                next: 0,
            });
        }
    }
    Ok(count)
}

/// Clones `src`'s whole content into `dst` (`FICLONE`, copy-on-write, metadata only); a plain
/// copy where the filesystem cannot clone.
fn copy_data(dst: &std::fs::File, src: &std::fs::File) -> std::result::Result<(), Errno> {
    const FICLONE: libc::c_ulong = 0x4004_9409;
    // SAFETY: ioctl(FICLONE) with two fds we own; it reads no memory of ours.
    if unsafe { libc::ioctl(dst.as_raw_fd(), FICLONE, src.as_raw_fd()) } == 0 {
        return Ok(());
    }
    let (mut r, mut w) = (src, dst);
    std::io::copy(&mut r, &mut w)
        .map(drop)
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))
}
