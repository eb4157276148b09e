//! How this server builds Python environments: every child process of a build jailed (see
//! `sandlot_env::BuildJail`), as a throw-away uid of the server's builder range
//! ([`uids::builder_uids`]), in a cgroup of its own under `<cgroup_parent>/build-<instance>`,
//! with its per-uid locks in `<data-dir>/run/build`. The same settings serve the server's
//! template builds and the CLI's provisioning of the default environment.

use crate::uids;
use sandlot_env::{BuildJail, BuildLimits, Isolation};
use std::path::{Path, PathBuf};

/// Where the builds of the server with data dir `data_dir` run. A caller that is not root
/// builds as itself: it has nothing more to give away.
pub fn isolation(
    data_dir: &Path,
    launcher: &Path,
    cgroup_root: &Path,
    cgroup_parent: &Path,
    index_url: Option<String>,
) -> Isolation {
    if !nix::unistd::geteuid().is_root() {
        return Isolation::None;
    }
    // The same identity the runtime derives its uid block from.
    let data_dir = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let instance = crate::util::short_hash(data_dir.to_string_lossy().as_bytes());
    Isolation::Jail(BuildJail {
        launcher: launcher.to_path_buf(),
        uids: uids::builder_uids(&data_dir),
        state_dir: uids::builder_state_dir(&data_dir),
        cgroup_root: cgroup_root.to_path_buf(),
        cgroup_parent: cgroup_parent.join(format!("build-{instance}")),
        index_url,
        limits: BuildLimits::default(),
    })
}

/// [`isolation`] with the defaults the runtime uses for the cgroup hierarchy and the launcher
/// (the running executable): for the CLI, which provisions before any runtime exists.
pub fn default_isolation(data_dir: &Path, index_url: Option<String>) -> Isolation {
    let defaults = crate::RuntimeConfig::new(PathBuf::from(data_dir), PathBuf::new());
    isolation(
        data_dir,
        &defaults.launcher,
        &defaults.cgroup_root,
        &defaults.cgroup_parent,
        index_url,
    )
}

impl crate::RuntimeConfig {
    /// Where this runtime's environment builds run.
    pub fn env_isolation(&self) -> Isolation {
        isolation(
            &self.data_dir,
            &self.launcher,
            &self.cgroup_root,
            &self.cgroup_parent,
            self.pip_index_url.clone(),
        )
    }
}
