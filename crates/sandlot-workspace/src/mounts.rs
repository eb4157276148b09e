//! Mounts: reading `/proc/self/mountinfo` (to find what a crash left mounted), mounting a loop
//! device, unmounting, and the detached clone of a workspace that the sandbox attaches as its
//! `/workspace` (`open_tree(OPEN_TREE_CLONE)` + `mount_setattr`).

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags};
use sandlot_jail::mounts::{mount_setattr, MountAttr, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID};

use crate::error::{IoStep, Result, SysStep};

/// One line of `/proc/self/mountinfo`, the fields we use.
#[derive(Debug, Clone)]
pub(crate) struct MountEntry {
    pub mount_point: PathBuf,
    /// Per-mount options (`rw`, `nosuid`, ...).
    pub options: String,
    pub fstype: String,
    pub source: String,
    /// Superblock options (`rw` or `ro` for the filesystem itself).
    pub super_options: String,
}

impl MountEntry {
    /// True when either the mount or the filesystem under it is read-only (Btrfs switches its
    /// superblock to `ro` after an I/O error it cannot survive).
    pub fn read_only(&self) -> bool {
        let ro = |opts: &str| opts.split(',').any(|o| o == "ro");
        ro(&self.options) || ro(&self.super_options)
    }
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(field: &str) -> PathBuf {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let oct = &bytes[i + 1..i + 4];
            if oct.iter().all(|b| (b'0'..=b'7').contains(b)) {
                let v = oct
                    .iter()
                    .fold(0u16, |acc, b| acc * 8 + u16::from(b - b'0'));
                if let Ok(v) = u8::try_from(v) {
                    out.push(v);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    PathBuf::from(std::ffi::OsStr::from_bytes(&out))
}

fn parse_line(line: &str) -> Option<MountEntry> {
    let (left, right) = line.split_once(" - ")?;
    let left: Vec<&str> = left.split(' ').collect();
    let mut right = right.split(' ');
    Some(MountEntry {
        mount_point: unescape(left.get(4)?),
        options: left.get(5)?.to_string(),
        fstype: right.next()?.to_string(),
        source: right.next()?.to_string(),
        super_options: right.next().unwrap_or("").to_string(),
    })
}

/// Every mount visible to this process, in mount order.
pub(crate) fn mountinfo() -> Result<Vec<MountEntry>> {
    let path = "/proc/self/mountinfo";
    let text = std::fs::read_to_string(path).at("read", path)?;
    Ok(text.lines().filter_map(parse_line).collect())
}

/// The mount visible at `path` (the topmost when several are stacked), if `path` is a mount point.
pub(crate) fn mount_at(path: &Path) -> Result<Option<MountEntry>> {
    Ok(mountinfo()?
        .into_iter()
        .rev()
        .find(|m| m.mount_point == path))
}

/// Mounts `device` on `target` with the flags every workspace mount gets.
pub(crate) fn mount_device(
    device: &Path,
    target: &Path,
    fstype: &str,
    data: &str,
) -> nix::Result<()> {
    nix::mount::mount(
        Some(device),
        target,
        Some(fstype),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOATIME,
        Some(data),
    )
}

/// Unmounts `path`; if something still has it busy (a process with its cwd there), detaches it
/// lazily so the name is free now and the filesystem goes when its last user does.
pub(crate) fn unmount(path: &Path) -> Result<()> {
    match nix::mount::umount2(path, MntFlags::empty()) {
        Ok(()) => Ok(()),
        Err(nix::Error::EBUSY) => {
            nix::mount::umount2(path, MntFlags::MNT_DETACH).sys("umount2 (detach)", path)
        }
        Err(e) => Err(e).sys("umount2", path),
    }
}

const OPEN_TREE_CLONE: libc::c_uint = 1;
const OPEN_TREE_CLOEXEC: libc::c_uint = libc::O_CLOEXEC as libc::c_uint;

/// A detached copy of the mount tree at `path` (a new mount, attached nowhere, owned by the fd)
/// with nosuid and nodev forced and private propagation, so events in the host's mount table
/// never reach the sandbox that attaches it. The sandbox `move_mount`s it onto `/workspace`;
/// it disappears when the fd is closed without being attached, or when the sandbox's mount
/// namespace goes.
pub(crate) fn open_tree_detached(path: &Path) -> Result<OwnedFd> {
    let cpath = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| nix::Error::EINVAL)
        .sys("open_tree", path)?;
    // SAFETY: open_tree(2) with a NUL-terminated path; it returns a new fd or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            cpath.as_ptr(),
            OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(nix::Error::last()).sys("open_tree", path);
    }
    // SAFETY: the kernel just returned this fd to us and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        attr_clr: 0,
        propagation: libc::MS_PRIVATE,
        userns_fd: 0,
    };
    mount_setattr(fd.as_raw_fd(), c"", libc::AT_EMPTY_PATH, &attr).sys("mount_setattr", path)?;
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mountinfo_lines() {
        let m = parse_line(
            "36 35 0:33 / /tmp/a\\040b rw,nosuid,nodev,noatime shared:1 - btrfs /dev/loop3 rw,space_cache=v2",
        )
        .unwrap();
        assert_eq!(m.mount_point, Path::new("/tmp/a b"));
        assert_eq!(m.fstype, "btrfs");
        assert_eq!(m.source, "/dev/loop3");
        assert!(!m.read_only());
        let ro = parse_line("1 2 0:1 / /x rw - btrfs /dev/loop0 ro,space_cache=v2").unwrap();
        assert!(ro.read_only());
    }
}
