//! The pinned packages: the set every sandbox environment has and the optional extra groups.
//!
//! Plain data on the bottom floor of the crate: both the errors (which name the groups in their
//! messages) and the spec (which expands them) read it, and it reads nothing of the crate.

/// The packages every sandbox environment has, pinned to versions that install as binary
/// wheels on CPython 3.10–3.13 x86_64 (checked on Debian 12's CPython 3.11.2).
pub const DEFAULT_PACKAGES: &[&str] = &[
    "ipython==8.39.0",
    "numpy==2.2.6",
    "pandas==2.3.3",
    "matplotlib==3.10.9",
    "matplotlib-inline==0.2.2",
    "cloudpickle==3.1.2",
];

/// Optional groups for [`crate::EnvSpec::with_extras`]: name and pinned packages.
pub const EXTRA_GROUPS: &[(&str, &[&str])] = &[
    // The benchmark peer: a stock Jupyter kernel driven through jupyter_client.
    ("bench", &["ipykernel==6.31.0", "jupyter_client==8.10.0"]),
    ("test", &["pytest==9.2.0"]),
];

/// The names of [`EXTRA_GROUPS`], for messages.
pub(crate) const EXTRA_GROUP_NAMES: &[&str] = &["bench", "test"];

/// The packages of an extra group.
pub fn extra_group(name: &str) -> Option<&'static [&'static str]> {
    EXTRA_GROUPS
        .iter()
        .find(|(group, _)| *group == name)
        .map(|(_, packages)| *packages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_names_match_groups() {
        let names: Vec<&str> = EXTRA_GROUPS.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, EXTRA_GROUP_NAMES);
    }

    #[test]
    fn extra_group_finds_each_group_and_nothing_else() {
        for (name, packages) in EXTRA_GROUPS {
            assert_eq!(extra_group(name), Some(*packages));
        }
        assert_eq!(extra_group("benchh"), None);
    }
}
