//! This server's cgroups: the hierarchy it found at start and `<parent>/<instance>`, the
//! group under which every sandbox's and zygote's own group is made.

use sandlot_jail::cgroup::{Cgroup, Hierarchy};
use std::path::{Path, PathBuf};

pub(crate) struct Cgroups {
    pub(crate) hierarchy: Hierarchy,
    /// `<parent>/<instance>`: this server's groups.
    pub(crate) base: PathBuf,
}

impl Cgroups {
    /// The group at `rel` (relative to the hierarchy's root), whether or not it exists.
    pub(crate) fn open(&self, rel: &Path) -> Cgroup {
        Cgroup::open(&self.hierarchy, rel)
    }

    /// The group of one sandbox or zygote named `name` under this server's base.
    pub(crate) fn child(&self, name: &str) -> PathBuf {
        self.base.join(name)
    }
}
