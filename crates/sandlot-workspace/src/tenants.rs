//! Which level-1 qgroup holds each tenant's workspaces (the per-tenant disk cap).
//!
//! A tenant's number `n` (its qgroup is `1/n`) is derived from its name (FNV-1a, 48 bits, the
//! width of a qgroup id's number) and recorded in `<dir>/tenant-qgroups`, one `<n> <name>`
//! line each: the record, not the hash, is what counts, so a number never changes once given
//! and two names whose hashes collide get distinct numbers (the later one probes upward). The
//! file is rewritten whole (temporary file, fsync, rename) whenever a tenant is added.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::btrfs_ioctl::QGROUP_LEVEL_SHIFT;
use crate::error::{IoStep, Result, WorkspaceError};

pub(crate) const FILE: &str = "tenant-qgroups";
const NUMBER_MASK: u64 = (1 << QGROUP_LEVEL_SHIFT) - 1;

/// The qgroup id `1/n`.
pub(crate) fn level1(n: u64) -> u64 {
    (1 << QGROUP_LEVEL_SHIFT) | (n & NUMBER_MASK)
}

/// The number a tenant's name hashes to: never 0 (kept free, as btrfs-progs does).
pub(crate) fn hashed(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h & NUMBER_MASK).max(1)
}

/// A tenant name the record can hold: non-empty, at most 255 bytes, no whitespace or control
/// characters (the record is one line per tenant, split at the first space).
pub(crate) fn validate(name: &str) -> Result<()> {
    let bad = name.is_empty()
        || name.len() > 255
        || name.chars().any(|c| c.is_whitespace() || c.is_control());
    if bad {
        return Err(WorkspaceError::InvalidId {
            id: name.into(),
            reason: "a tenant name is 1-255 bytes without whitespace or control characters",
        });
    }
    Ok(())
}

/// The tenants' numbers, as recorded.
#[derive(Debug, Default)]
pub(crate) struct TenantGroups {
    path: PathBuf,
    by_name: BTreeMap<String, u64>,
}

impl TenantGroups {
    /// Reads the record in `dir` (none yet: empty). Lines that do not parse are skipped
    /// with a warning; their tenants get a number again when next used.
    pub(crate) fn load(dir: &Path) -> Result<TenantGroups> {
        let path = dir.join(FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e).at("read", &path),
        };
        Ok(TenantGroups {
            by_name: parse(&text),
            path,
        })
    }

    /// The number of `name`, if it has one.
    pub(crate) fn get(&self, name: &str) -> Option<u64> {
        self.by_name.get(name).copied()
    }

    /// Every recorded tenant and its number.
    pub(crate) fn all(&self) -> impl Iterator<Item = (&str, u64)> {
        self.by_name.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// The number of `name`, giving (and recording) one if it has none.
    pub(crate) fn number(&mut self, name: &str) -> Result<u64> {
        validate(name)?;
        if let Some(n) = self.get(name) {
            return Ok(n);
        }
        let n = pick(name, |n| self.by_name.values().any(|&v| v == n));
        self.by_name.insert(name.to_owned(), n);
        if let Err(e) = self.save() {
            self.by_name.remove(name);
            return Err(e);
        }
        Ok(n)
    }

    fn save(&self) -> Result<()> {
        let tmp = self.path.with_extension("new");
        let mut f = std::fs::File::create(&tmp).at("create", &tmp)?;
        f.write_all(format(&self.by_name).as_bytes())
            .at("write", &tmp)?;
        f.sync_all().at("fsync", &tmp)?;
        std::fs::rename(&tmp, &self.path).at("rename", &self.path)
    }
}

/// The first free number from `name`'s hash upward (wrapping, never 0).
pub(crate) fn pick(name: &str, taken: impl Fn(u64) -> bool) -> u64 {
    let mut n = hashed(name);
    while taken(n) {
        n = (n % NUMBER_MASK) + 1;
    }
    n
}

pub(crate) fn parse(text: &str) -> BTreeMap<String, u64> {
    let mut map = BTreeMap::new();
    for line in text.lines() {
        let parsed = line
            .split_once(' ')
            .and_then(|(n, name)| Some((n.parse::<u64>().ok()?, name)))
            .filter(|(n, name)| *n != 0 && *n <= NUMBER_MASK && validate(name).is_ok());
        match parsed {
            Some((n, name)) => {
                map.insert(name.to_owned(), n);
            }
            None if line.is_empty() => {}
            None => tracing::warn!("{FILE}: skipping the unreadable line {line:?}"),
        }
    }
    map
}

pub(crate) fn format(map: &BTreeMap<String, u64>) -> String {
    map.iter()
        .map(|(name, n)| format!("{n} {name}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_stable_recorded_and_distinct() {
        let dir = tempfile::tempdir().unwrap();
        let mut g = TenantGroups::load(dir.path()).unwrap();
        let a = g.number("acme").unwrap();
        let b = g.number("beta").unwrap();
        assert_eq!(a, hashed("acme"));
        assert_ne!(a, b);
        assert_eq!(g.number("acme").unwrap(), a);
        let again = TenantGroups::load(dir.path()).unwrap();
        assert_eq!(again.get("acme"), Some(a));
        assert_eq!(again.get("beta"), Some(b));
        assert_eq!(level1(a) >> 48, 1);
        assert_eq!(level1(a) & NUMBER_MASK, a);
    }

    #[test]
    fn a_collision_probes_upward_and_wraps() {
        let h = hashed("x");
        assert_eq!(pick("x", |n| n == h), h % NUMBER_MASK + 1);
        // The last number wraps to 1, never 0.
        assert_eq!((NUMBER_MASK % NUMBER_MASK) + 1, 1);
    }

    #[test]
    fn bad_names_and_lines_are_refused() {
        for bad in ["", "a b", "a\nb", "tab\t", &"x".repeat(256)] {
            assert!(validate(bad).is_err(), "{bad:?}");
        }
        let map = parse("7 ok\nnot-a-number x\n0 zero\n9 two words\n\n");
        assert_eq!(map.len(), 1);
        assert_eq!(map.get("ok"), Some(&7));
        assert_eq!(parse(&format(&map)), map);
    }
}
