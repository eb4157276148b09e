//! Reading a bundle, trusting nothing in it: entries matched by their exact raw names, sizes
//! bounded per entry and in total, inputs written only under a private directory with names
//! this code makes and checked against their sha256.

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::PathBuf;

/// The newest bundle format this sandlot reads.
pub(crate) const BUNDLE_VERSION: u64 = 1;

pub(super) const MAX_MANIFEST: u64 = 16 << 20;
pub(super) const MAX_STEP: u64 = 64 << 20;
pub(super) const MAX_STEPS_TOTAL: u64 = 1 << 30;
pub(super) const MAX_INPUT: u64 = 4 << 30;
pub(super) const MAX_INPUTS_TOTAL: u64 = 16 << 30;
pub(super) const MAX_ENTRIES: usize = 1_000_000;

/// Why a bundle cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error(
        "unsupported_bundle: bundle_version {found} was written by a newer sandlot; this one \
         reads bundles up to version {BUNDLE_VERSION}"
    )]
    Unsupported { found: u64 },
    #[error("not a usable bundle: {0}")]
    Corrupt(String),
    #[error("reading the bundle: {0}")]
    Io(#[from] std::io::Error),
}

pub(super) fn corrupt(s: impl Into<String>) -> BundleError {
    BundleError::Corrupt(s.into())
}

/// A bundle read and checked: its manifest, its step files in order, and where each input's
/// content was put.
pub struct Bundle {
    pub manifest: Value,
    pub steps: Vec<Value>,
    pub(super) inputs: HashMap<String, PathBuf>,
    pub(super) _dir: tempfile::TempDir,
}

pub(super) enum Name {
    Manifest,
    Step(usize),
    Input(String),
}

pub(super) fn classify(raw: &[u8]) -> Option<Name> {
    let s = std::str::from_utf8(raw).ok()?;
    if s == "manifest.json" {
        return Some(Name::Manifest);
    }
    if let Some(n) = s
        .strip_prefix("steps/")
        .and_then(|r| r.strip_suffix(".json"))
    {
        if n.len() == 6 && n.bytes().all(|b| b.is_ascii_digit()) {
            return n.parse().ok().filter(|i| *i > 0).map(Name::Step);
        }
        return None;
    }
    if let Some(h) = s.strip_prefix("inputs/") {
        if h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Some(Name::Input(h.to_owned()));
        }
    }
    None
}

pub(super) fn read_limited(
    r: &mut impl Read,
    max: u64,
    what: &str,
) -> Result<Vec<u8>, BundleError> {
    let mut buf = Vec::new();
    r.take(max + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > max {
        return Err(corrupt(format!("{what} is larger than {max} bytes")));
    }
    Ok(buf)
}

/// Reads a bundle (gzip-compressed tar) from `r`.
pub fn read_bundle(r: impl Read) -> Result<Bundle, BundleError> {
    let dir = tempfile::Builder::new()
        .prefix("sandlot-replay-")
        .tempdir()?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(r));
    let mut manifest = None;
    let mut steps: HashMap<usize, Value> = HashMap::new();
    let mut inputs = HashMap::new();
    let (mut step_bytes, mut input_bytes, mut entries) = (0u64, 0u64, 0usize);
    for entry in archive
        .entries()
        .map_err(|e| corrupt(format!("not a tar.gz archive: {e}")))?
    {
        let mut entry = entry.map_err(|e| corrupt(format!("a broken archive entry: {e}")))?;
        entries += 1;
        if entries > MAX_ENTRIES {
            return Err(corrupt(format!("more than {MAX_ENTRIES} entries")));
        }
        let raw = entry.path_bytes().into_owned();
        let shown = String::from_utf8_lossy(&raw)
            .chars()
            .take(200)
            .collect::<String>();
        let kind = entry.header().entry_type();
        if !kind.is_file() {
            return Err(corrupt(format!(
                "entry {shown:?} is not a regular file ({kind:?}): refused"
            )));
        }
        let Some(name) = classify(&raw) else {
            return Err(corrupt(format!(
                "entry {shown:?} is not a bundle file (manifest.json, steps/NNNNNN.json, \
                 inputs/<sha256>): refused"
            )));
        };
        match name {
            Name::Manifest => {
                if manifest.is_some() {
                    return Err(corrupt("manifest.json appears twice"));
                }
                let bytes = read_limited(&mut entry, MAX_MANIFEST, "manifest.json")?;
                let v: Value = serde_json::from_slice(&bytes)
                    .map_err(|e| corrupt(format!("manifest.json is not valid JSON: {e}")))?;
                check_version(&v)?;
                manifest = Some(v);
            }
            Name::Step(i) => {
                let bytes = read_limited(&mut entry, MAX_STEP, &shown)?;
                step_bytes += bytes.len() as u64;
                if step_bytes > MAX_STEPS_TOTAL {
                    return Err(corrupt(format!(
                        "steps larger than {MAX_STEPS_TOTAL} bytes"
                    )));
                }
                let v: Value = serde_json::from_slice(&bytes)
                    .map_err(|e| corrupt(format!("{shown} is not valid JSON: {e}")))?;
                if steps.insert(i, v).is_some() {
                    return Err(corrupt(format!("{shown} appears twice")));
                }
            }
            Name::Input(sha) => {
                if inputs.contains_key(&sha) {
                    return Err(corrupt(format!("{shown} appears twice")));
                }
                // Our own name, never the archive's.
                let path = dir.path().join(format!("input-{}", inputs.len()));
                let mut out = std::fs::File::create(&path)?;
                let mut hasher = Sha256::new();
                let mut limited = (&mut entry).take(MAX_INPUT + 1);
                let mut buf = vec![0u8; 256 << 10];
                let mut n = 0u64;
                loop {
                    let k = limited.read(&mut buf)?;
                    if k == 0 {
                        break;
                    }
                    n += k as u64;
                    input_bytes += k as u64;
                    if n > MAX_INPUT || input_bytes > MAX_INPUTS_TOTAL {
                        return Err(corrupt("the inputs are larger than this reader accepts"));
                    }
                    hasher.update(&buf[..k]);
                    out.write_all(&buf[..k])?;
                }
                if hex::encode(hasher.finalize()) != sha {
                    return Err(corrupt(format!(
                        "{shown}: the content does not match its sha256 (tampered or truncated)"
                    )));
                }
                inputs.insert(sha, path);
            }
        }
    }
    let manifest = manifest.ok_or_else(|| corrupt("no manifest.json"))?;
    let listed = manifest["steps"]
        .as_array()
        .ok_or_else(|| corrupt("manifest.json has no steps list"))?;
    let mut ordered = Vec::with_capacity(listed.len());
    for (i, entry) in listed.iter().enumerate() {
        let index = i + 1;
        if entry["index"].as_u64() != Some(index as u64) {
            return Err(corrupt(format!("manifest step {index} is out of order")));
        }
        let step = steps
            .remove(&index)
            .ok_or_else(|| corrupt(format!("step {index}'s file is missing")))?;
        if step["kind"] != entry["kind"] || step["index"].as_u64() != Some(index as u64) {
            return Err(corrupt(format!(
                "step {index}'s file does not match the manifest"
            )));
        }
        match step["kind"].as_str() {
            Some("input") => {
                if step["path"].as_str().is_none() || step["sha256"].as_str().is_none() {
                    return Err(corrupt(format!(
                        "input step {index} lacks its path or sha256"
                    )));
                }
            }
            Some("execution") => {
                if step["code"].as_str().is_none() {
                    return Err(corrupt(format!("execution step {index} has no code")));
                }
            }
            _ => return Err(corrupt(format!("step {index} is of an unknown kind"))),
        }
        ordered.push(step);
    }
    if !steps.is_empty() {
        return Err(corrupt(
            "the archive holds steps the manifest does not list",
        ));
    }
    if manifest["template"]["name"].as_str().is_none() {
        return Err(corrupt("manifest.json names no template"));
    }
    Ok(Bundle {
        manifest,
        steps: ordered,
        inputs,
        _dir: dir,
    })
}

pub(super) fn check_version(v: &Value) -> Result<(), BundleError> {
    match v.get("bundle_version").and_then(Value::as_u64) {
        Some(found) if found > BUNDLE_VERSION => Err(BundleError::Unsupported { found }),
        Some(0) | None => Err(corrupt("manifest.json has no valid bundle_version")),
        Some(_) => Ok(()),
    }
}
