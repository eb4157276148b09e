//! What an environment contains: the base interpreter and pinned packages, and its content hash.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::EnvError;
use crate::pins::{extra_group, DEFAULT_PACKAGES};
use crate::python;

/// Salt of the content hash; bump it when the layout of a built environment changes (2: a
/// relocatable environment, naming no build path).
const HASH_FORMAT: &str = "sandlot-env/2";

/// What to build: a base interpreter and a list of pinned `name==version` requirements.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvSpec {
    /// The interpreter the venv is created from (`python -m venv`).
    pub base_python: PathBuf,
    /// Pinned requirements, `name==version` (an `[extra]` after the name is allowed).
    pub packages: Vec<String>,
}

impl EnvSpec {
    /// The standard sandbox environment: [`DEFAULT_PACKAGES`] on the base interpreter named by
    /// `SANDLOT_PYTHON`, else `/usr/bin/python3`. The interpreter is checked by [`crate::ensure`]
    /// (or up front with [`crate::find_base_python`]).
    pub fn default_spec() -> EnvSpec {
        EnvSpec {
            base_python: python::base_python_candidate(),
            packages: DEFAULT_PACKAGES.iter().map(|p| p.to_string()).collect(),
        }
    }

    /// Adds extra groups (`"bench"`, `"test"`) or explicit `name==version` pins. A pin replaces an
    /// earlier pin of the same package. A name that is neither is kept as it is, and
    /// [`crate::ensure`] rejects it with [`EnvError::InvalidRequirement`]; use
    /// [`EnvSpec::try_with_extras`] to fail early instead.
    pub fn with_extras(mut self, extra: &[&str]) -> EnvSpec {
        for name in extra {
            match extra_group(name) {
                Some(packages) => {
                    for p in packages {
                        self.add_requirement(p);
                    }
                }
                None => self.add_requirement(name),
            }
        }
        self
    }

    /// Like [`EnvSpec::with_extras`], but an unknown group name is an error.
    pub fn try_with_extras(self, extra: &[&str]) -> Result<EnvSpec, EnvError> {
        if let Some(bad) = extra
            .iter()
            .find(|name| extra_group(name).is_none() && parse_requirement(name).is_none())
        {
            return Err(EnvError::UnknownExtra {
                name: bad.to_string(),
            });
        }
        Ok(self.with_extras(extra))
    }

    /// The short content hash (16 hex digits) of the base interpreter (implementation, version,
    /// resolved path) and the sorted, normalized package pins. It names the environment's
    /// directory. Runs the base interpreter once per process to learn its version; if it cannot be
    /// run, its path stands in (and [`crate::ensure`] reports the error).
    pub fn hash(&self) -> String {
        let identity = match python::probe_base(&self.base_python) {
            Ok(base) => base.identity(),
            Err(_) => format!("unprobed {}", self.base_python.display()),
        };
        hash_parts(&identity, &self.packages)
    }

    /// Checks that every entry is a pinned requirement.
    pub(crate) fn validate(&self) -> Result<(), EnvError> {
        match self
            .packages
            .iter()
            .find(|p| parse_requirement(p).is_none())
        {
            Some(bad) => Err(EnvError::InvalidRequirement {
                requirement: bad.clone(),
            }),
            None => Ok(()),
        }
    }

    fn add_requirement(&mut self, requirement: &str) {
        let requirement = requirement.trim();
        if let Some(new) = parse_requirement(requirement) {
            self.packages.retain(|old| {
                parse_requirement(old).is_none_or(|old| old.normalized_name != new.normalized_name)
            });
        } else if self.packages.iter().any(|p| p == requirement) {
            return;
        }
        self.packages.push(requirement.to_string());
    }
}

/// The hash of a base-interpreter identity and a package list (order and name spelling do not
/// matter: `Foo_Bar==1` and `foo-bar==1` are the same pin).
pub(crate) fn hash_parts(python_identity: &str, packages: &[String]) -> String {
    let mut lines: Vec<String> = packages
        .iter()
        .map(|p| match parse_requirement(p) {
            Some(r) => r.canonical(),
            None => p.trim().to_string(),
        })
        .collect();
    lines.sort();
    lines.dedup();
    let mut hasher = Sha256::new();
    hasher.update(HASH_FORMAT.as_bytes());
    hasher.update(b"\npython ");
    hasher.update(python_identity.as_bytes());
    for line in &lines {
        hasher.update(b"\n");
        hasher.update(line.as_bytes());
    }
    hex::encode(&hasher.finalize()[..8])
}

/// A parsed `name[extras]==version` pin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Requirement {
    /// PEP 503 normalized: lowercase, runs of `-_.` folded to `-`.
    pub normalized_name: String,
    /// The name as written.
    pub name: String,
    /// Sorted, normalized extras.
    pub extras: Vec<String>,
    pub version: String,
}

impl Requirement {
    fn canonical(&self) -> String {
        if self.extras.is_empty() {
            format!("{}=={}", self.normalized_name, self.version)
        } else {
            format!(
                "{}[{}]=={}",
                self.normalized_name,
                self.extras.join(","),
                self.version
            )
        }
    }
}

/// Parses a pinned requirement; `None` for anything else (ranges, URLs, options, whitespace).
/// Strict on purpose: entries are passed to pip as arguments.
pub(crate) fn parse_requirement(s: &str) -> Option<Requirement> {
    let s = s.trim();
    let (head, version) = s.split_once("==")?;
    if version.is_empty()
        || version.starts_with('=')
        || !version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '+' | '!' | '-' | '_'))
    {
        return None;
    }
    let (name, extras) = match head.split_once('[') {
        Some((name, rest)) => {
            let inner = rest.strip_suffix(']')?;
            let extras: Option<Vec<String>> = inner
                .split(',')
                .map(|e| {
                    let e = e.trim();
                    is_valid_name(e).then(|| normalize_name(e))
                })
                .collect();
            let mut extras = extras?;
            extras.sort();
            (name, extras)
        }
        None => (head, Vec::new()),
    };
    if !is_valid_name(name) {
        return None;
    }
    Some(Requirement {
        normalized_name: normalize_name(name),
        name: name.to_string(),
        extras,
        version: version.to_string(),
    })
}

/// PEP 508 names: ASCII letters and digits, with `.-_` inside.
fn is_valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

/// PEP 503 normalization.
pub(crate) fn normalize_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_sep = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !in_sep {
                out.push('-');
            }
            in_sep = true;
        } else {
            out.push(c.to_ascii_lowercase());
            in_sep = false;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pins::EXTRA_GROUPS;

    fn pkgs(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn hash_is_short_hex_and_stable() {
        let h = hash_parts(
            "cpython 3.11.2 /usr/bin/python3.11",
            &pkgs(DEFAULT_PACKAGES),
        );
        assert_eq!(h.len(), 16);
        assert!(h.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(
            h,
            hash_parts(
                "cpython 3.11.2 /usr/bin/python3.11",
                &pkgs(DEFAULT_PACKAGES)
            )
        );
    }

    #[test]
    fn hash_ignores_order_spelling_and_duplicates() {
        let a = hash_parts("py", &pkgs(&["numpy==2.2.6", "Matplotlib_Inline==0.2.2"]));
        let b = hash_parts(
            "py",
            &pkgs(&["matplotlib-inline==0.2.2", " numpy==2.2.6", "numpy==2.2.6"]),
        );
        assert_eq!(a, b);
    }

    #[test]
    fn hash_depends_on_python_and_pins() {
        let base = hash_parts(
            "cpython 3.11.2 /usr/bin/python3.11",
            &pkgs(&["six==1.16.0"]),
        );
        assert_ne!(
            base,
            hash_parts(
                "cpython 3.11.4 /usr/bin/python3.11",
                &pkgs(&["six==1.16.0"])
            )
        );
        assert_ne!(
            base,
            hash_parts(
                "cpython 3.11.2 /usr/bin/python3.11",
                &pkgs(&["six==1.17.0"])
            )
        );
        assert_ne!(
            base,
            hash_parts(
                "cpython 3.11.2 /usr/bin/python3.11",
                &pkgs(&["six==1.16.0", "pytest==9.2.0"])
            )
        );
    }

    #[test]
    fn requirements_parse_strictly() {
        let r = parse_requirement("Jupyter_Client[Test, docs]==8.10.0").unwrap();
        assert_eq!(r.normalized_name, "jupyter-client");
        assert_eq!(r.extras, vec!["docs", "test"]);
        assert_eq!(r.version, "8.10.0");
        assert_eq!(r.canonical(), "jupyter-client[docs,test]==8.10.0");
        for bad in [
            "numpy",
            "numpy>=2",
            "numpy==",
            "numpy===2",
            "--index-url=x==1",
            "-e==1",
            "numpy==2 ; python_version>'3'",
            "numpy[==2",
            "git+https://x==1",
            "bench",
        ] {
            assert!(parse_requirement(bad).is_none(), "{bad} should be rejected");
        }
        for good in DEFAULT_PACKAGES
            .iter()
            .chain(EXTRA_GROUPS.iter().flat_map(|(_, p)| p.iter()))
        {
            assert!(parse_requirement(good).is_some(), "{good} should parse");
        }
    }

    #[test]
    fn extras_expand_and_override() {
        let spec = EnvSpec {
            base_python: "/usr/bin/python3".into(),
            packages: pkgs(DEFAULT_PACKAGES),
        }
        .with_extras(&["bench", "test", "numpy==2.3.5", "test"]);
        assert!(spec.packages.contains(&"ipykernel==6.31.0".to_string()));
        assert!(spec
            .packages
            .contains(&"jupyter_client==8.10.0".to_string()));
        assert_eq!(
            spec.packages
                .iter()
                .filter(|p| p.starts_with("pytest"))
                .count(),
            1
        );
        assert!(spec.packages.contains(&"numpy==2.3.5".to_string()));
        assert!(!spec.packages.contains(&"numpy==2.2.6".to_string()));
        assert!(spec.validate().is_ok());
    }

    #[test]
    fn unknown_extras_are_reported() {
        let spec = EnvSpec {
            base_python: "/usr/bin/python3".into(),
            packages: pkgs(&["six==1.16.0"]),
        };
        let kept = spec.clone().with_extras(&["benchh"]);
        assert!(matches!(
            kept.validate(),
            Err(EnvError::InvalidRequirement { requirement }) if requirement == "benchh"
        ));
        assert!(matches!(
            spec.try_with_extras(&["benchh"]),
            Err(EnvError::UnknownExtra { name }) if name == "benchh"
        ));
    }
}
