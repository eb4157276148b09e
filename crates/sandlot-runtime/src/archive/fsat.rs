//! fd-relative syscalls on byte names, for extraction and archiving: the shared ones
//! (`sandlot_workspace::fsat`, also used by the workspace copies of fork and restore) with the
//! archive's conventions.

use super::*;

pub(super) use sandlot_workspace::fsat::{
    list_names, open_dir_at, rename_at as rename, stat_at, unlink_at,
};

pub(super) fn cstring(name: &str) -> CString {
    // Names come from `entry_parts` or `files::normalize`, which refuse NUL bytes.
    sandlot_workspace::fsat::cstring(name)
}

pub(super) fn read_link_at(dir: RawFd, name: &CStr) -> Result<Vec<u8>, nix::Error> {
    // One byte over the limit, so a caller can tell a target that is too long.
    sandlot_workspace::fsat::read_link_at(dir, name, MAX_PATH_BYTES + 1)
}

/// Makes (if missing) and opens the directory `name` of `dir`; a new one gets mode 0755.
pub(super) fn make_dir(dir: RawFd, name: &str) -> Result<OwnedFd, nix::Error> {
    let (fd, made) = sandlot_workspace::fsat::make_dir_at(dir, &cstring(name))?;
    if made {
        sandlot_workspace::fsat::fchmod(fd.as_raw_fd(), 0o755)?;
    }
    Ok(fd)
}
