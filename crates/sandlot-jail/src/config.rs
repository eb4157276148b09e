//! The configuration of one sandbox's jail, passed as JSON from the server through the zygote
//! to the forked child, and of one zygote's base root.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The uid and gid code runs as inside every sandbox. The server maps it to a host uid that is
/// unique to the sandbox.
pub const INSIDE_UID: u32 = 1000;
pub const INSIDE_GID: u32 = 1000;

/// Everything the forked child needs to confine itself. Built by the server per sandbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JailConfig {
    /// Hostname inside the uts namespace.
    pub hostname: String,
    /// Size cap of the `/workspace` tmpfs, in bytes, and its inode cap: for a sandbox the
    /// server passes no disk workspace (`sandlot_child_enter` with `workspace < 0`).
    pub workspace_bytes: u64,
    pub workspace_inodes: u64,
    /// Size caps of the per-sandbox `/tmp` and `/dev/shm`.
    pub tmp_bytes: u64,
    pub shm_bytes: u64,
    /// Resource limits applied with setrlimit.
    pub rlimits: RlimitConfig,
    /// Apply Landlock (read-only everywhere but the writable mounts).
    pub landlock: bool,
    /// Apply the seccomp allowlist (last).
    pub seccomp: bool,
    /// Named volumes, in the order of their detached mounts after the workspace's fd: each is
    /// attached at its path under `/workspace`.
    #[serde(default)]
    pub volumes: Vec<VolumeTarget>,
    /// Read-only host paths (the trusted tier's grants), in the order of their detached mounts
    /// after the volumes' fds: each is attached at its path under `/mnt`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_mounts: Vec<HostMountTarget>,
}

/// Most host paths one sandbox may mount (`sandlot_types::MAX_HOST_MOUNTS` too).
pub const MAX_HOST_MOUNTS: usize = 4;

/// Where a host path is attached: `path` is absolute, `/mnt/<plain components>` (checked again
/// in the child); `file` when the host path is a file (its mount point is an empty file).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostMountTarget {
    pub path: String,
    pub file: bool,
}

/// Most volumes one sandbox may mount.
pub const MAX_VOLUMES: usize = 8;

/// Where a volume is attached: `path` is relative to `/workspace` (checked again in the child:
/// plain components only).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeTarget {
    pub path: String,
    pub read_only: bool,
}

impl Default for JailConfig {
    fn default() -> Self {
        Self {
            hostname: "sandbox".into(),
            workspace_bytes: 1 << 30,
            workspace_inodes: 65536,
            tmp_bytes: 256 << 20,
            shm_bytes: 64 << 20,
            rlimits: RlimitConfig::default(),
            landlock: true,
            seccomp: true,
            volumes: Vec::new(),
            host_mounts: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RlimitConfig {
    pub nofile: u64,
    /// Largest file a process may write, in bytes.
    pub fsize: u64,
    pub core: u64,
    pub stack: u64,
}

impl Default for RlimitConfig {
    fn default() -> Self {
        Self {
            nofile: 4096,
            fsize: 1 << 30,
            core: 0,
            stack: 8 << 20,
        }
    }
}

/// A host file or directory shown read-only in a zygote's base root (a directory through an
/// overlay, so the host path does not show inside; see `rootfs`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Bind {
    pub source: PathBuf,
    /// Where it appears inside; absolute.
    pub target: PathBuf,
}

/// The base root a zygote (and every sandbox forked from it) sees, plus the zygote's identity.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ZygoteConfig {
    /// An empty host directory the base root's tmpfs is mounted on (in the zygote's private
    /// mount namespace; the host never sees the mount).
    pub staging_dir: PathBuf,
    /// Extra read-only binds: sandlot's lib dir and the Python env at neutral paths, the base
    /// interpreter's prefix at its own path when it is not under `/usr`. One may nest in another.
    pub binds: Vec<Bind>,
    /// Host uid/gid the zygote runs as: unprivileged, no capabilities.
    pub uid: u32,
    pub gid: u32,
    /// Cgroup `cgroup.procs`/`tasks` files the launcher moves itself into before dropping root.
    pub cgroup_procs: Vec<PathBuf>,
    /// The program and arguments to exec once confined.
    pub argv: Vec<String>,
    /// The complete environment of the zygote.
    pub env: Vec<(String, String)>,
    /// Size of the zygote's own `/tmp`.
    pub tmp_bytes: u64,
    /// Address-space-independent rlimits for the zygote.
    pub nofile: u64,
}
