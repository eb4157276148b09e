//! The user namespace's id maps, written by the server (root on the host) for a child that has
//! just unshared its user namespace: one uid and one gid inside (1000) map to a host id unique
//! to the sandbox, and `setgroups` is denied so the sandbox can never drop into a group.

use crate::config::{INSIDE_GID, INSIDE_UID};
use std::fs;
use std::io;
use std::path::Path;

/// Writes `/proc/<pid>/{setgroups,uid_map,gid_map}` for `pid`.
pub fn write_maps(proc_root: &Path, pid: i32, host_uid: u32, host_gid: u32) -> io::Result<()> {
    let dir = proc_root.join(pid.to_string());
    fs::write(dir.join("setgroups"), "deny")?;
    fs::write(dir.join("uid_map"), format!("{INSIDE_UID} {host_uid} 1\n"))?;
    fs::write(dir.join("gid_map"), format!("{INSIDE_GID} {host_gid} 1\n"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_single_id_maps() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("42")).unwrap();
        write_maps(dir.path(), 42, 200_001, 200_001).unwrap();
        let read = |f: &str| fs::read_to_string(dir.path().join("42").join(f)).unwrap();
        assert_eq!(read("setgroups"), "deny");
        assert_eq!(read("uid_map"), "1000 200001 1\n");
        assert_eq!(read("gid_map"), "1000 200001 1\n");
    }
}
