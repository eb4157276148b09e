//! The layered namespace jail, one module per isolation layer (see SECURITY.md). `child::enter`
//! reads the whole containment sequence of a sandbox top to bottom; `zygote::launch` confines a
//! zygote; `build::launch` runs one step of an environment build; `cgroup` and `idmap` are the
//! server's side of the same layers; `probe` tells what the running kernel supports; `frame` is the control stream's codec and `exit` names the exit
//! statuses of the jail's processes.

pub mod build;
pub mod caps;
pub mod cgroup;
pub mod child;
pub mod config;
pub mod error;
pub mod exit;
pub mod ffi;
pub mod frame;
pub mod idmap;
pub mod landlock;
pub mod mounts;
pub mod net;
pub mod probe;
pub mod program;
pub mod rlimits;
pub mod rootfs;
pub mod seccomp;
pub mod zygote;

pub use config::{JailConfig, ZygoteConfig};
pub use error::JailError;
