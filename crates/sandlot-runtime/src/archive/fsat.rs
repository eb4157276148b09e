//! fd-relative syscalls on byte names, for extraction and archiving.

use super::*;

pub(super) fn cstring(name: &str) -> CString {
    // Names come from `entry_parts` or `files::normalize`, which refuse NUL bytes.
    CString::new(name).unwrap_or_default()
}

pub(super) fn stat_at(dir: RawFd, name: &CStr) -> Result<libc::stat, nix::Error> {
    // SAFETY: stat is plain old data.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstatat relative to a dir fd we own, not following a symlink.
    match unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } {
        0 => Ok(st),
        _ => Err(nix::Error::last()),
    }
}

pub(super) fn unlink_at(dir: RawFd, name: &CStr, is_dir: bool) -> Result<(), nix::Error> {
    let flags = if is_dir { libc::AT_REMOVEDIR } else { 0 };
    // SAFETY: unlinkat relative to a dir fd we own; it never follows a symlink.
    match unsafe { libc::unlinkat(dir, name.as_ptr(), flags) } {
        0 => Ok(()),
        _ => Err(nix::Error::last()),
    }
}

pub(super) fn rename(
    from: RawFd,
    old: &CStr,
    into: RawFd,
    new: &CStr,
    flags: libc::c_uint,
) -> Result<(), nix::Error> {
    // SAFETY: renameat2 between dir fds we own; single-component names, never followed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            from,
            old.as_ptr(),
            into,
            new.as_ptr(),
            flags,
        )
    };
    match r {
        0 => Ok(()),
        _ => Err(nix::Error::last()),
    }
}

pub(super) fn read_link_at(dir: RawFd, name: &CStr) -> Result<Vec<u8>, nix::Error> {
    let mut buf = vec![0u8; MAX_PATH_BYTES + 1];
    // SAFETY: readlinkat into a buffer we own, of the length given.
    let n = unsafe { libc::readlinkat(dir, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(nix::Error::last());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// Opens the directory `name` of `dir` for reading, through the safe resolution.
pub(super) fn open_dir_at(dir: RawFd, name: &[u8]) -> Result<OwnedFd, nix::Error> {
    openat2(dir, name, libc::O_RDONLY | libc::O_DIRECTORY, 0)
}

/// Makes (if missing) and opens the directory `name` of `dir`; a new one gets mode 0755.
pub(super) fn make_dir(dir: RawFd, name: &str) -> Result<OwnedFd, nix::Error> {
    let c = cstring(name);
    // SAFETY: mkdirat relative to a dir fd we own.
    let made = unsafe { libc::mkdirat(dir, c.as_ptr(), 0o700) } == 0;
    if !made && nix::Error::last() != nix::Error::EEXIST {
        return Err(nix::Error::last());
    }
    let fd = open_dir_at(dir, name.as_bytes())?;
    if made {
        // SAFETY: fchmod on a directory fd we own.
        unsafe { libc::fchmod(fd.as_raw_fd(), 0o755) };
    }
    Ok(fd)
}

/// The names in a directory (without `.` and `..`).
pub(super) fn list_names(dir: &OwnedFd) -> Result<Vec<CString>, nix::Error> {
    let readable = open_dir_at(dir.as_raw_fd(), b".")?;
    let mut d = nix::dir::Dir::from_fd(readable)?;
    let mut out = Vec::new();
    for ent in d.iter() {
        let name = ent?.file_name().to_owned();
        if name.as_bytes() != b"." && name.as_bytes() != b".." {
            out.push(name);
        }
    }
    Ok(out)
}
