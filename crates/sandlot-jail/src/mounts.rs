//! A sandbox's own mounts on top of its zygote's read-only base root: size- and inode-capped
//! tmpfs for `/workspace`, `/tmp` and `/dev/shm`, and a fresh `/proc` for its pid namespace.

use crate::config::{JailConfig, INSIDE_GID, INSIDE_UID};
use crate::error::{JailError, Step};
use nix::mount::{mount, MsFlags};

const FLAGS: MsFlags = MsFlags::MS_NOSUID.union(MsFlags::MS_NODEV);

/// Mounts the writable tmpfs instances. Called in the new mount namespace, before the pid
/// namespace's init exists.
pub fn mount_writable(cfg: &JailConfig) -> Result<(), JailError> {
    let ws = format!(
        "mode=0755,uid={INSIDE_UID},gid={INSIDE_GID},size={},nr_inodes={}",
        cfg.workspace_bytes, cfg.workspace_inodes
    );
    mount(
        Some("tmpfs"),
        "/workspace",
        Some("tmpfs"),
        FLAGS,
        Some(ws.as_str()),
    )
    .step("mount /workspace")?;
    let tmp = format!("mode=1777,size={},nr_inodes=65536", cfg.tmp_bytes);
    mount(
        Some("tmpfs"),
        "/tmp",
        Some("tmpfs"),
        FLAGS,
        Some(tmp.as_str()),
    )
    .step("mount /tmp")?;
    let shm = format!("mode=1777,size={},nr_inodes=4096", cfg.shm_bytes);
    mount(
        Some("tmpfs"),
        "/dev/shm",
        Some("tmpfs"),
        FLAGS,
        Some(shm.as_str()),
    )
    .step("mount /dev/shm")?;
    Ok(())
}

/// Mounts a procfs for the current pid namespace over `/proc`. Must run in the namespace's
/// init (pid 1).
pub fn mount_proc() -> Result<(), JailError> {
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        FLAGS | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .step("mount /proc")
}
