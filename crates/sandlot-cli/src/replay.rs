//! `sandlot bundle`, `sandlot replay` and `sandlot lineage`.
//!
//! - `bundle SANDBOX -o FILE` saves a sandbox's run bundle (`GET /v1/sandboxes/{id}/bundle`,
//!   see `sandlot-api/src/record/bundle.rs` for the format).
//! - `replay BUNDLE|SANDBOX` reads a bundle (a file, or the named sandbox's, fetched), checks
//!   that the server has the bundle's template at the same version (else every step is
//!   `not_replayable`, and no sandbox is created), creates a fresh sandbox of it with the
//!   controlled environment, seeds `random` and numpy's global generator, then replays each
//!   step in order (writes each input, re-runs each execution) and gives it a verdict:
//!   `identical`, `equivalent` (equal after the declared normalisers), `diverged` (with a
//!   unified diff) or `not_replayable` (why). Exit status: 0 when every step is identical or
//!   equivalent, 1 otherwise, 2 for a bundle that cannot be used (newer format, corrupt,
//!   hostile).
//! - `lineage show KIND ID` prints `GET /v1/lineage/{kind}/{id}`; `lineage export --sandbox ID
//!   --to FILE|URL` writes the sandbox's OpenLineage events as JSON lines to a file, or POSTs
//!   each to an HTTP endpoint.
//!
//! Reading a bundle trusts nothing in it: entries are matched by their exact raw names
//! (`manifest.json`, `steps/NNNNNN.json`, `inputs/<sha256>`), anything else — absolute or
//! `..` paths, links, devices, unknown names — is refused; sizes are bounded per entry and in
//! total; inputs are written only under a private temporary directory with names this code
//! makes, and their content must match their sha256.

use crate::client::api_result;
use anyhow::{anyhow, Context};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The newest bundle format this sandlot reads.
pub const BUNDLE_VERSION: u64 = 1;
/// Exit status for a bundle that cannot be used.
const EXIT_BAD_BUNDLE: u8 = 2;

const MAX_MANIFEST: u64 = 16 << 20;
const MAX_STEP: u64 = 64 << 20;
const MAX_STEPS_TOTAL: u64 = 1 << 30;
const MAX_INPUT: u64 = 4 << 30;
const MAX_INPUTS_TOTAL: u64 = 16 << 30;
const MAX_ENTRIES: usize = 1_000_000;

#[derive(Debug, Args)]
pub struct UrlArg {
    /// The sandlot server
    #[arg(long, value_name = "URL", env = crate::config::URL, default_value = crate::config::DEFAULT_URL)]
    url: String,
}

#[derive(Debug, Args)]
pub struct BundleArgs {
    /// The sandbox (live or ended)
    #[arg(value_name = "SANDBOX")]
    sandbox: String,
    /// Where to write the bundle (a .tar.gz)
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: PathBuf,
    #[command(flatten)]
    url: UrlArg,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// A bundle file (from `sandlot bundle`), or the id of a sandbox on the server
    #[arg(value_name = "BUNDLE|SANDBOX")]
    source: String,
    /// Normalisers that make outputs equivalent: `addresses` (0x... memory addresses), `cells`
    /// (IPython's In[N]/Out[N] counters), `floats=N` (numbers to N decimals), `timestamps`
    /// (ISO 8601 date-times and Unix times), `png=decoded` (images compared by pixels),
    /// `png=dimensions` (by size only), `none`. Comma-separated or repeated
    /// [default: addresses,cells]
    #[arg(
        long = "normalise",
        alias = "normalize",
        value_name = "NORMALISER",
        value_delimiter = ','
    )]
    normalise: Vec<String>,
    /// Print the report as JSON
    #[arg(long)]
    json: bool,
    /// Keep the replay's sandbox instead of deleting it at the end
    #[arg(long)]
    keep: bool,
    /// Timeout of each replayed execution, in seconds
    #[arg(long, value_name = "SECONDS", default_value_t = 300.0)]
    timeout: f64,
    #[command(flatten)]
    url: UrlArg,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LineageKind {
    Artifact,
    Execution,
    Sandbox,
}

#[derive(Debug, Subcommand)]
pub enum LineageCommand {
    /// Print what an artifact (sha256), execution or sandbox came from, as JSON.
    Show {
        #[arg(value_enum)]
        kind: LineageKind,
        #[arg(value_name = "ID")]
        id: String,
        #[command(flatten)]
        url: UrlArg,
    },
    /// Export a sandbox's run as OpenLineage RunEvents (JSON lines) to a file or HTTP endpoint.
    Export {
        /// The sandbox
        #[arg(long, value_name = "ID")]
        sandbox: String,
        /// A file to write, or an http(s) URL to POST each event to
        #[arg(long, value_name = "FILE|URL")]
        to: String,
        #[command(flatten)]
        url: UrlArg,
    },
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

fn http(url: &str) -> anyhow::Result<reqwest::Client> {
    crate::config::http_builder(url)
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(3600))
        .build()
        .context("could not build the HTTP client")
}

fn base(url: &str) -> String {
    url.trim_end_matches('/').to_owned()
}

/// A path segment, percent-encoded.
fn seg(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// sandlot bundle

pub fn bundle(args: BundleArgs) -> anyhow::Result<u8> {
    runtime()?.block_on(async {
        let url = base(&args.url.url);
        let resp = http(&url)?
            .get(format!("{url}/v1/sandboxes/{}/bundle", seg(&args.sandbox)))
            .send()
            .await
            .with_context(|| format!("could not reach the server at {url}"))?;
        let mut resp = api_result(resp).await?;
        let tmp = args.output.with_extension("partial");
        let mut f = std::fs::File::create(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        let mut n = 0u64;
        while let Some(chunk) = resp.chunk().await.context("the bundle download broke")? {
            f.write_all(&chunk)?;
            n += chunk.len() as u64;
        }
        f.sync_all()?;
        std::fs::rename(&tmp, &args.output)?;
        eprintln!("wrote {} ({n} bytes)", args.output.display());
        Ok(0)
    })
}

// ---------------------------------------------------------------------------------------------
// Reading a bundle

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

fn corrupt(s: impl Into<String>) -> BundleError {
    BundleError::Corrupt(s.into())
}

/// A bundle read and checked: its manifest, its step files in order, and where each input's
/// content was put.
pub struct Bundle {
    pub manifest: Value,
    pub steps: Vec<Value>,
    inputs: HashMap<String, PathBuf>,
    _dir: tempfile::TempDir,
}

enum Name {
    Manifest,
    Step(usize),
    Input(String),
}

fn classify(raw: &[u8]) -> Option<Name> {
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

fn read_limited(r: &mut impl Read, max: u64, what: &str) -> Result<Vec<u8>, BundleError> {
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

fn check_version(v: &Value) -> Result<(), BundleError> {
    match v.get("bundle_version").and_then(Value::as_u64) {
        Some(found) if found > BUNDLE_VERSION => Err(BundleError::Unsupported { found }),
        Some(0) | None => Err(corrupt("manifest.json has no valid bundle_version")),
        Some(_) => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------------
// Normalisers and comparison

/// How outputs are made comparable.
#[derive(Debug, Clone, Default)]
pub struct Normalisers {
    addresses: bool,
    cells: bool,
    timestamps: bool,
    floats: Option<usize>,
    png: Png,
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
enum Png {
    #[default]
    Bytes,
    Decoded,
    Dimensions,
}

impl Normalisers {
    pub fn parse(list: &[String]) -> anyhow::Result<Normalisers> {
        if list.is_empty() {
            return Ok(Normalisers {
                addresses: true,
                cells: true,
                ..Default::default()
            });
        }
        let mut n = Normalisers::default();
        for item in list.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
            match item {
                "none" => {}
                "addresses" => n.addresses = true,
                "cells" => n.cells = true,
                "timestamps" => n.timestamps = true,
                "png=decoded" | "png" => n.png = Png::Decoded,
                "png=dimensions" => n.png = Png::Dimensions,
                other => match other.strip_prefix("floats=").map(str::parse::<usize>) {
                    Some(Ok(d)) if d <= 17 => n.floats = Some(d),
                    _ => {
                        return Err(anyhow!(
                            "unknown normaliser {other:?}: use addresses, cells, timestamps, \
                             floats=N (0-17), png=decoded, png=dimensions or none"
                        ))
                    }
                },
            }
        }
        Ok(n)
    }

    pub fn names(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.addresses {
            v.push("addresses".to_owned());
        }
        if self.cells {
            v.push("cells".to_owned());
        }
        if self.timestamps {
            v.push("timestamps".to_owned());
        }
        if let Some(d) = self.floats {
            v.push(format!("floats={d}"));
        }
        match self.png {
            Png::Bytes => {}
            Png::Decoded => v.push("png=decoded".to_owned()),
            Png::Dimensions => v.push("png=dimensions".to_owned()),
        }
        v
    }

    fn is_empty(&self) -> bool {
        self.names().is_empty()
    }

    fn text(&self, s: &str) -> String {
        use std::sync::OnceLock;
        static RE: OnceLock<[regex::Regex; 5]> = OnceLock::new();
        let [addr, cell, iso, epoch, float] = RE.get_or_init(|| {
            [
                regex::Regex::new(r"0x[0-9a-fA-F]{4,16}").expect("regex"),
                regex::Regex::new(r"\b(In|Out)\s*\[\d+\]").expect("regex"),
                regex::Regex::new(
                    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?",
                )
                .expect("regex"),
                regex::Regex::new(r"\b1[5-9]\d{8}(\.\d+)?\b").expect("regex"),
                regex::Regex::new(r"-?\b\d+\.\d+(?:[eE][-+]?\d+)?\b").expect("regex"),
            ]
        });
        let mut s = s.to_owned();
        if self.addresses {
            s = addr.replace_all(&s, "0x…").into_owned();
        }
        if self.cells {
            s = cell.replace_all(&s, "$1[…]").into_owned();
        }
        if self.timestamps {
            s = iso.replace_all(&s, "<timestamp>").into_owned();
            s = epoch.replace_all(&s, "<timestamp>").into_owned();
        }
        if let Some(d) = self.floats {
            s = float
                .replace_all(&s, |c: &regex::Captures<'_>| match c[0].parse::<f64>() {
                    Ok(v) => {
                        let r = format!("{v:.d$}");
                        // -0.000 and 0.000 are the same number.
                        if r.trim_start_matches('-')
                            .bytes()
                            .all(|b| b == b'0' || b == b'.')
                        {
                            r.trim_start_matches('-').to_owned()
                        } else {
                            r
                        }
                    }
                    Err(_) => c[0].to_owned(),
                })
                .into_owned();
        }
        s
    }

    /// A PNG (base64 or bytes) as a line: its bytes' hash, or after `png=` its pixels or size.
    fn png(&self, bytes: &[u8]) -> String {
        let exact = format!("<png sha256:{}>", hex::encode(Sha256::digest(bytes)));
        if self.png == Png::Bytes {
            return exact;
        }
        match decode_png(bytes) {
            Some((w, h, pixels)) => match self.png {
                Png::Dimensions => format!("<png {w}x{h}>"),
                _ => format!(
                    "<png {w}x{h} pixels:{}>",
                    hex::encode(Sha256::digest(&pixels))
                ),
            },
            None => exact,
        }
    }
}

fn decode_png(bytes: &[u8]) -> Option<(u32, u32, Vec<u8>)> {
    let mut dec = png::Decoder::new(std::io::Cursor::new(bytes));
    dec.set_transformations(png::Transformations::normalize_to_color8());
    let mut reader = dec.read_info().ok()?;
    let info = reader.info();
    // Refuse images whose pixels would not fit in a sensible amount of memory.
    if (info.width as u64) * (info.height as u64) > 100_000_000 {
        return None;
    }
    let mut buf = vec![0; reader.output_buffer_size()?];
    let frame = reader.next_frame(&mut buf).ok()?;
    buf.truncate(frame.buffer_size());
    Some((frame.width, frame.height, buf))
}

fn b64_decode(s: &str) -> Option<Vec<u8>> {
    fn val(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let clean: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    let mut out = Vec::with_capacity(clean.len() / 4 * 3);
    for chunk in clean.chunks(4) {
        let mut n = 0u32;
        let mut k = 0;
        for &c in chunk {
            if c == b'=' {
                break;
            }
            n = (n << 6) | val(c)?;
            k += 1;
        }
        n <<= 6 * (4 - k);
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..k.max(1)]);
    }
    Some(out)
}

/// A MIME bundle's entries as lines (`image/png` through [`Normalisers::png`]).
fn mime_lines(out: &mut Vec<String>, data: &Value, n: &Normalisers) {
    let Some(map) = data.as_object() else {
        return;
    };
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    for k in keys {
        let v = &map[k];
        if k == "image/png" {
            let shown = v
                .as_str()
                .and_then(b64_decode)
                .map(|b| n.png(&b))
                .unwrap_or_else(|| "<png unreadable>".into());
            out.push(format!("  {k}: {shown}"));
        } else {
            let text = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            for line in n.text(&text).lines() {
                out.push(format!("  {k}: {line}"));
            }
        }
    }
}

/// An execution's result as comparable lines. `artifact_png` gives an artifact's bytes (to
/// compare PNG files by pixels) when it can be had.
fn render(
    result: &Value,
    n: &Normalisers,
    artifact_png: &dyn Fn(&str) -> Option<Vec<u8>>,
) -> Vec<String> {
    let mut out = vec![format!(
        "end_state: {}",
        result["end_state"].as_str().unwrap_or("?")
    )];
    for stream in ["stdout", "stderr"] {
        let text = result[stream].as_str().unwrap_or("");
        if !text.is_empty() {
            out.push(format!("{stream}:"));
            out.extend(n.text(text).lines().map(|l| format!("  {l}")));
        }
    }
    let mut shown = 0;
    for ev in result["outputs"].as_array().into_iter().flatten() {
        let kind = ev["type"].as_str().unwrap_or("");
        if kind == "display_data" || kind == "result" {
            shown += 1;
            out.push(format!("output {shown}: {kind}"));
            mime_lines(&mut out, &ev["data"], n);
        }
    }
    if let Some(err) = result.get("error").filter(|e| !e.is_null()) {
        out.push(format!(
            "error: {}: {}",
            err["name"].as_str().unwrap_or(""),
            n.text(err["value"].as_str().unwrap_or(""))
        ));
        for line in err["traceback"].as_array().into_iter().flatten() {
            let line = strip_ansi(line.as_str().unwrap_or(""));
            out.extend(n.text(&line).lines().map(|l| format!("  {l}")));
        }
    }
    let mut artifacts: Vec<&Value> = result["artifacts"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    artifacts.sort_by_key(|a| a["path"].as_str().unwrap_or("").to_owned());
    for a in artifacts {
        let path = a["path"].as_str().unwrap_or("");
        let sha = a["sha256"].as_str().unwrap_or("");
        let is_png = a["mime_type"].as_str() == Some("image/png");
        let shown = match (is_png && n.png != Png::Bytes, sha.is_empty()) {
            (_, true) => format!("<{} bytes, not stored>", a["size"]),
            (true, false) => match artifact_png(sha) {
                Some(bytes) => n.png(&bytes),
                None => format!("sha256:{sha}"),
            },
            (false, false) => format!("sha256:{sha}"),
        };
        out.push(format!("artifact {path}: {shown}"));
    }
    out
}

fn strip_ansi(s: &str) -> String {
    use std::sync::OnceLock;
    static RE: OnceLock<regex::Regex> = OnceLock::new();
    RE.get_or_init(|| regex::Regex::new(r"\x1b\[[0-9;]*[A-Za-z]").expect("regex"))
        .replace_all(s, "")
        .into_owned()
}

/// A step's verdict.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Identical,
    Equivalent(Vec<String>),
    Diverged(String),
    NotReplayable(String),
}

impl Verdict {
    fn word(&self) -> &'static str {
        match self {
            Verdict::Identical => "identical",
            Verdict::Equivalent(_) => "equivalent",
            Verdict::Diverged(_) => "diverged",
            Verdict::NotReplayable(_) => "not_replayable",
        }
    }

    fn ok(&self) -> bool {
        matches!(self, Verdict::Identical | Verdict::Equivalent(_))
    }
}

/// Compares a recorded result with a replayed one.
pub fn compare(
    recorded: &Value,
    replayed: &Value,
    n: &Normalisers,
    artifact_png: &dyn Fn(&str) -> Option<Vec<u8>>,
) -> Verdict {
    let none = Normalisers::default();
    let no_fetch = |_: &str| None;
    if render(recorded, &none, &no_fetch) == render(replayed, &none, &no_fetch) {
        return Verdict::Identical;
    }
    let a = render(recorded, n, artifact_png);
    let b = render(replayed, n, artifact_png);
    if a == b && !n.is_empty() {
        // Which normalisers mattered: those without which the two still differ.
        let mut used = Vec::new();
        for name in n.names() {
            let without: Vec<String> = n.names().into_iter().filter(|x| *x != name).collect();
            let Ok(fewer) = Normalisers::parse(&if without.is_empty() {
                vec!["none".to_owned()]
            } else {
                without
            }) else {
                continue;
            };
            if render(recorded, &fewer, artifact_png) != render(replayed, &fewer, artifact_png) {
                used.push(name);
            }
        }
        return Verdict::Equivalent(used);
    }
    let (a, b) = (a.join("\n") + "\n", b.join("\n") + "\n");
    let diff = similar::TextDiff::from_lines(&a, &b)
        .unified_diff()
        .context_radius(3)
        .header("recorded", "replayed")
        .to_string();
    Verdict::Diverged(diff)
}

// ---------------------------------------------------------------------------------------------
// sandlot replay

/// What the replay sets and seeds, and what it cannot.
fn controls(seed: u64) -> Value {
    json!({
        "TZ": "UTC, set in the environment and applied with time.tzset() before the first step",
        "LC_ALL": "C.UTF-8",
        "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
        "random": format!("seeded with {seed} before the first step"),
        "numpy": format!("the global generator (numpy.random.seed) seeded with {seed} before \
                          the first step; generators made with default_rng() and no seed are \
                          not controlled"),
        "PYTHONHASHSEED": format!("{seed} for programs the sandbox starts (python scripts run \
                           from bash, subprocesses); NOT for the sandbox's own interpreter, which \
                           is forked from the template's zygote and keeps the zygote's hash \
                           secret, so the iteration order of sets of strings may differ"),
        "not_controlled": [
            "the clock (time.time, datetime.now)", "os.urandom and secrets", "process ids",
            "network access", "the interpreter's string hash secret",
            "IPython's execution counter (one higher: the seeding runs as a cell)",
        ],
    })
}

fn seeding_code(seed: u64) -> String {
    format!(
        "def __sandlot_replay_seed():\n    import random, time\n    time.tzset()\n    \
         random.seed({seed})\n    try:\n        import numpy\n        numpy.random.seed({seed})\n    \
         except Exception:\n        pass\n__sandlot_replay_seed()\ndel __sandlot_replay_seed\n"
    )
}

struct Replayer {
    http: reqwest::Client,
    url: String,
}

impl Replayer {
    async fn get_json(&self, path: &str) -> anyhow::Result<Value> {
        let resp = self
            .http
            .get(format!("{}{path}", self.url))
            .send()
            .await
            .with_context(|| format!("could not reach the server at {}", self.url))?;
        Ok(api_result(resp).await?.json().await?)
    }

    async fn post_json(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let resp = self
            .http
            .post(format!("{}{path}", self.url))
            .json(body)
            .send()
            .await
            .with_context(|| format!("could not reach the server at {}", self.url))?;
        Ok(api_result(resp).await?.json().await?)
    }

    async fn bytes(&self, path: &str) -> anyhow::Result<Vec<u8>> {
        let resp = self
            .http
            .get(format!("{}{path}", self.url))
            .send()
            .await
            .with_context(|| format!("could not reach the server at {}", self.url))?;
        Ok(api_result(resp).await?.bytes().await?.to_vec())
    }
}

pub fn replay(args: ReplayArgs) -> anyhow::Result<u8> {
    let normalisers = match Normalisers::parse(&args.normalise) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("sandlot: error: {e}");
            return Ok(EXIT_BAD_BUNDLE);
        }
    };
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        eprintln!("sandlot: error: --timeout must be a positive number of seconds");
        return Ok(EXIT_BAD_BUNDLE);
    }
    runtime()?.block_on(replay_async(args, normalisers))
}

async fn replay_async(args: ReplayArgs, normalisers: Normalisers) -> anyhow::Result<u8> {
    let url = base(&args.url.url);
    let r = Replayer {
        http: http(&url)?,
        url: url.clone(),
    };
    let path = Path::new(&args.source);
    let read = if path.is_file() {
        let f =
            std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        tokio::task::spawn_blocking(move || read_bundle(std::io::BufReader::new(f))).await?
    } else if args.source.starts_with("sb_") {
        let bytes = r
            .bytes(&format!("/v1/sandboxes/{}/bundle", seg(&args.source)))
            .await?;
        tokio::task::spawn_blocking(move || read_bundle(std::io::Cursor::new(bytes))).await?
    } else {
        eprintln!(
            "sandlot: error: {:?} is neither a bundle file nor a sandbox id (sb_...)",
            args.source
        );
        return Ok(EXIT_BAD_BUNDLE);
    };
    let b = match read {
        Ok(b) => b,
        Err(e) => {
            eprintln!("sandlot: error: {e}");
            return Ok(EXIT_BAD_BUNDLE);
        }
    };
    let report = run_replay(&r, &b, &normalisers, &args).await?;
    let ok = report["steps"]
        .as_array()
        .map(|s| {
            s.iter()
                .all(|x| matches!(x["verdict"].as_str(), Some("identical" | "equivalent")))
        })
        .unwrap_or(false);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(if ok { 0 } else { 1 })
}

async fn run_replay(
    r: &Replayer,
    b: &Bundle,
    n: &Normalisers,
    args: &ReplayArgs,
) -> anyhow::Result<Value> {
    let m = &b.manifest;
    let template = m["template"]["name"]
        .as_str()
        .unwrap_or("default")
        .to_owned();
    let version = m["template"]["version"].as_str().unwrap_or("").to_owned();
    let seed = m["seeds"]["replay_seed"].as_u64().unwrap_or(0);
    let mut report = json!({
        "source": args.source,
        "bundle_version": m["bundle_version"],
        "recorded_sandbox": m["sandbox"]["id"],
        "template": {"name": template, "version": version},
        "normalisers": n.names(),
        "controls": controls(seed),
        "replay_sandbox": null,
        "steps": [],
    });
    let step_head = |i: usize, s: &Value| {
        let mut h = json!({"index": i + 1, "kind": s["kind"]});
        match s["kind"].as_str() {
            Some("input") => h["path"] = s["path"].clone(),
            _ => h["id"] = s["id"].clone(),
        }
        h
    };
    // The same template at the same version, or nothing is replayed.
    let why_not = match r
        .get_json(&format!("/v1/templates/{}", seg(&template)))
        .await
    {
        Ok(t) if t["version"].as_str() == Some(version.as_str()) => None,
        Ok(t) => Some(format!(
            "the bundle ran on template {template:?} version {version}; this server's {template:?} \
             is version {}",
            t["version"].as_str().unwrap_or("?")
        )),
        Err(e) => Some(format!(
            "the bundle ran on template {template:?} version {version}, which this server does \
             not have ({e})"
        )),
    };
    if let Some(why) = why_not {
        let steps: Vec<Value> = b
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let mut h = step_head(i, s);
                h["verdict"] = json!("not_replayable");
                h["reason"] = json!(why);
                h
            })
            .collect();
        report["steps"] = json!(steps);
        report["error"] = json!(why);
        return Ok(report);
    }
    let mut env: serde_json::Map<String, Value> = m["environment"]["env"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for (k, v) in [
        ("TZ", "UTC".to_owned()),
        ("LC_ALL", "C.UTF-8".to_owned()),
        ("LANG", "C.UTF-8".to_owned()),
        ("PYTHONHASHSEED", seed.to_string()),
        ("OMP_NUM_THREADS", "1".to_owned()),
        ("OPENBLAS_NUM_THREADS", "1".to_owned()),
        ("MKL_NUM_THREADS", "1".to_owned()),
    ] {
        env.insert(k.to_owned(), json!(v));
    }
    let recorded = m["sandbox"]["id"]
        .as_str()
        .unwrap_or("")
        .chars()
        .take(200)
        .collect::<String>();
    let sb = r
        .post_json(
            "/v1/sandboxes",
            &json!({"template": template, "env": env,
                    "metadata": {"sandlot.replay_of": recorded}}),
        )
        .await
        .context("creating the replay's sandbox")?;
    let id = sb["id"].as_str().unwrap_or("").to_owned();
    report["replay_sandbox"] = json!(id);
    let outcome = replay_steps(r, b, n, args, &id, seed, &step_head).await;
    if !args.keep {
        let _ = r
            .http
            .delete(format!("{}/v1/sandboxes/{}", r.url, seg(&id)))
            .send()
            .await;
    }
    report["steps"] = json!(outcome?);
    Ok(report)
}

async fn replay_steps(
    r: &Replayer,
    b: &Bundle,
    n: &Normalisers,
    args: &ReplayArgs,
    id: &str,
    seed: u64,
    step_head: &dyn Fn(usize, &Value) -> Value,
) -> anyhow::Result<Vec<Value>> {
    let seeded = r
        .post_json(
            &format!("/v1/sandboxes/{}/execute", seg(id)),
            &json!({"code": seeding_code(seed), "language": "python"}),
        )
        .await
        .context("seeding the replay's sandbox")?;
    if seeded["end_state"] != "ok" {
        return Err(anyhow!("seeding the replay's sandbox failed: {seeded}"));
    }
    let mut out = Vec::new();
    // Original artifacts' bytes, fetched only to compare PNG files by pixels.
    let mut fetched: HashMap<String, Option<Vec<u8>>> = HashMap::new();
    for (i, s) in b.steps.iter().enumerate() {
        let mut h = step_head(i, s);
        let verdict = match s["kind"].as_str() {
            Some("input") => {
                let sha = s["sha256"].as_str().unwrap_or("");
                match b.inputs.get(sha) {
                    Some(file) => {
                        let body = tokio::fs::read(file).await?;
                        let path = s["path"].as_str().unwrap_or("");
                        let url = format!(
                            "{}/v1/sandboxes/{}/files/{}",
                            r.url,
                            seg(id),
                            path.split('/').map(seg).collect::<Vec<_>>().join("/")
                        );
                        let resp = r.http.put(url).body(body).send().await?;
                        match api_result(resp).await {
                            Ok(_) => Verdict::Identical,
                            Err(e) => Verdict::NotReplayable(format!("writing the input: {e}")),
                        }
                    }
                    None => Verdict::NotReplayable(format!(
                        "the input's content is not in the bundle: {}",
                        s["missing"].as_str().unwrap_or("missing")
                    )),
                }
            }
            _ => {
                let body = json!({"code": s["code"], "language": s["language"],
                                  "timeout": args.timeout});
                match r
                    .post_json(&format!("/v1/sandboxes/{}/execute", seg(id)), &body)
                    .await
                {
                    Err(e) => Verdict::NotReplayable(format!("the execution was refused: {e}")),
                    Ok(replayed) => {
                        h["replayed_id"] = replayed["id"].clone();
                        if s["result"].is_null() {
                            Verdict::NotReplayable(
                                "the recorded execution has no result (it was cut off)".into(),
                            )
                        } else {
                            let mut need = Vec::new();
                            if n.png != Png::Bytes {
                                for a in s["result"]["artifacts"].as_array().into_iter().flatten() {
                                    let sha = a["sha256"].as_str().unwrap_or("");
                                    if a["mime_type"] == "image/png"
                                        && sandlot_like_sha(sha)
                                        && !fetched.contains_key(sha)
                                    {
                                        need.push(sha.to_owned());
                                    }
                                }
                                for a in replayed["artifacts"].as_array().into_iter().flatten() {
                                    let sha = a["sha256"].as_str().unwrap_or("");
                                    if a["mime_type"] == "image/png"
                                        && sandlot_like_sha(sha)
                                        && !fetched.contains_key(sha)
                                    {
                                        need.push(sha.to_owned());
                                    }
                                }
                            }
                            for sha in need {
                                let got = r.bytes(&format!("/v1/artifacts/{sha}")).await.ok();
                                fetched.insert(sha, got);
                            }
                            let lookup = |sha: &str| fetched.get(sha).cloned().flatten();
                            compare(&s["result"], &replayed, n, &lookup)
                        }
                    }
                }
            }
        };
        h["verdict"] = json!(verdict.word());
        match &verdict {
            Verdict::Equivalent(used) => h["normalisers_applied"] = json!(used),
            Verdict::Diverged(diff) => h["diff"] = json!(diff),
            Verdict::NotReplayable(why) => h["reason"] = json!(why),
            Verdict::Identical => {}
        }
        let _ = verdict.ok();
        out.push(h);
    }
    Ok(out)
}

fn sandlot_like_sha(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn print_report(report: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "replay of {} (template {} {}) in {}",
        report["recorded_sandbox"].as_str().unwrap_or("?"),
        report["template"]["name"].as_str().unwrap_or("?"),
        report["template"]["version"].as_str().unwrap_or("?"),
        report["replay_sandbox"].as_str().unwrap_or("no sandbox"),
    );
    let names: Vec<&str> = report["normalisers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let _ = writeln!(
        out,
        "normalisers: {}",
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    );
    if let Some(e) = report["error"].as_str() {
        let _ = writeln!(out, "not replayable: {e}");
    }
    let mut counts: HashMap<String, usize> = HashMap::new();
    for s in report["steps"].as_array().into_iter().flatten() {
        let verdict = s["verdict"].as_str().unwrap_or("?");
        *counts.entry(verdict.to_owned()).or_default() += 1;
        let what = s["path"].as_str().or(s["id"].as_str()).unwrap_or("");
        let mut line = format!(
            "{:>4}  {:<9}  {:<14}  {what}",
            s["index"],
            s["kind"].as_str().unwrap_or("?"),
            verdict
        );
        if let Some(used) = s["normalisers_applied"].as_array() {
            let used: Vec<&str> = used.iter().filter_map(Value::as_str).collect();
            line.push_str(&format!("  (after {})", used.join(", ")));
        }
        if let Some(why) = s["reason"].as_str() {
            line.push_str(&format!("  ({why})"));
        }
        let _ = writeln!(out, "{line}");
        if let Some(diff) = s["diff"].as_str() {
            for l in diff.lines() {
                let _ = writeln!(out, "        {l}");
            }
        }
    }
    let mut summary: Vec<String> = counts.iter().map(|(k, v)| format!("{v} {k}")).collect();
    summary.sort();
    let _ = writeln!(out, "{}", summary.join(", "));
}

// ---------------------------------------------------------------------------------------------
// sandlot lineage

pub fn lineage(cmd: LineageCommand) -> anyhow::Result<u8> {
    runtime()?.block_on(async {
        match cmd {
            LineageCommand::Show { kind, id, url } => {
                let url = base(&url.url);
                let r = Replayer {
                    http: http(&url)?,
                    url,
                };
                let kind = match kind {
                    LineageKind::Artifact => "artifact",
                    LineageKind::Execution => "execution",
                    LineageKind::Sandbox => "sandbox",
                };
                let v = r
                    .get_json(&format!("/v1/lineage/{kind}/{}", seg(&id)))
                    .await?;
                println!("{}", serde_json::to_string_pretty(&v)?);
                Ok(0)
            }
            LineageCommand::Export { sandbox, to, url } => {
                let url = base(&url.url);
                let r = Replayer {
                    http: http(&url)?,
                    url,
                };
                let body = r
                    .bytes(&format!(
                        "/v1/lineage/sandbox/{}/openlineage",
                        seg(&sandbox)
                    ))
                    .await?;
                let text = String::from_utf8(body).context("the server's events are not UTF-8")?;
                let events: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
                if to.starts_with("http://") || to.starts_with("https://") {
                    // The endpoint is the user's choice, not the sandlot server: no API key.
                    let client = reqwest::Client::builder()
                        .connect_timeout(Duration::from_secs(10))
                        .timeout(Duration::from_secs(60))
                        .build()?;
                    for (i, ev) in events.iter().enumerate() {
                        let resp = client
                            .post(&to)
                            .header(reqwest::header::CONTENT_TYPE, "application/json")
                            .body(ev.to_string())
                            .send()
                            .await
                            .with_context(|| format!("could not POST event {} to {to}", i + 1))?;
                        if !resp.status().is_success() {
                            return Err(anyhow!(
                                "{to} answered {} to event {} of {}",
                                resp.status(),
                                i + 1,
                                events.len()
                            ));
                        }
                    }
                    eprintln!("sent {} OpenLineage events to {to}", events.len());
                } else {
                    let mut f =
                        std::fs::File::create(&to).with_context(|| format!("cannot write {to}"))?;
                    for ev in &events {
                        writeln!(f, "{ev}")?;
                    }
                    eprintln!("wrote {} OpenLineage events to {to}", events.len());
                }
                Ok(0)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_gz(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut t = tar::Builder::new(gz);
        for (name, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_entry_type(tar::EntryType::Regular);
            // Raw names, so hostile ones reach the reader as they are.
            let raw = name.as_bytes();
            h.as_old_mut().name[..raw.len()].copy_from_slice(raw);
            h.set_cksum();
            t.append(&h, *data).unwrap();
        }
        t.into_inner().unwrap().finish().unwrap()
    }

    fn manifest(version: u64) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "bundle_version": version,
            "template": {"name": "default", "version": "v"},
            "steps": [{"index": 1, "kind": "execution", "file": "steps/000001.json"}],
        }))
        .unwrap()
    }

    fn step() -> Vec<u8> {
        serde_json::to_vec(&json!({"index": 1, "kind": "execution", "code": "1", "result": null}))
            .unwrap()
    }

    #[test]
    fn a_good_bundle_reads_and_bad_ones_are_refused() {
        let ok = tar_gz(&[
            ("manifest.json", &manifest(1)),
            ("steps/000001.json", &step()),
        ]);
        let b = read_bundle(&ok[..]).unwrap();
        assert_eq!(b.steps.len(), 1);

        let newer = tar_gz(&[
            ("manifest.json", &manifest(2)),
            ("steps/000001.json", &step()),
        ]);
        assert!(matches!(
            read_bundle(&newer[..]),
            Err(BundleError::Unsupported { found: 2 })
        ));
        for hostile in [
            "../evil",
            "/etc/passwd",
            "steps/../../x",
            "inputs/abc",
            "steps/1.json",
        ] {
            let bad = tar_gz(&[
                ("manifest.json", &manifest(1)),
                ("steps/000001.json", &step()),
                (hostile, b"x"),
            ]);
            let e = read_bundle(&bad[..]).err().expect(hostile).to_string();
            assert!(e.contains("refused"), "{hostile}: {e}");
        }
        let invalid = tar_gz(&[("manifest.json", b"{not json")]);
        assert!(read_bundle(&invalid[..])
            .err()
            .unwrap()
            .to_string()
            .contains("not valid JSON"));
        let missing = tar_gz(&[("manifest.json", &manifest(1))]);
        assert!(read_bundle(&missing[..]).is_err());
        let tampered = tar_gz(&[
            ("manifest.json", &manifest(1)),
            ("steps/000001.json", &step()),
            (&format!("inputs/{}", "0".repeat(64)), b"not that"),
        ]);
        assert!(read_bundle(&tampered[..])
            .err()
            .unwrap()
            .to_string()
            .contains("does not match"));
        assert!(read_bundle(&b"not gzip at all"[..]).is_err());
    }

    #[test]
    fn normalisers_make_noise_equivalent_and_not_more() {
        let n = Normalisers::parse(&[]).unwrap();
        assert_eq!(n.names(), ["addresses", "cells"]);
        assert_eq!(
            n.text("[<Line2D at 0x7f3a2b1c0d90>] In [3]"),
            "[<Line2D at 0x…>] In[…]"
        );
        let f = Normalisers::parse(&["floats=3".into(), "timestamps".into()]).unwrap();
        assert_eq!(f.text("0.12345 -0.0001 2.0"), "0.123 0.000 2.000");
        assert_eq!(
            f.text("at 2026-05-01T10:20:30.5Z or 1767225600.25"),
            "at <timestamp> or <timestamp>"
        );
        assert!(Normalisers::parse(&["bogus".into()]).is_err());
        assert!(Normalisers::parse(&["none".into()]).unwrap().is_empty());

        let result = |out: &str| {
            json!({"end_state": "ok", "stdout": out, "stderr": "", "outputs": [],
                   "artifacts": []})
        };
        let no = |_: &str| None;
        assert_eq!(
            compare(&result("1\n"), &result("1\n"), &n, &no),
            Verdict::Identical
        );
        assert_eq!(
            compare(
                &result("<x at 0x7f0000aa>\n"),
                &result("<x at 0x7f0000bb>\n"),
                &n,
                &no
            ),
            Verdict::Equivalent(vec!["addresses".into()])
        );
        match compare(&result("1.0\n"), &result("2.0\n"), &n, &no) {
            Verdict::Diverged(d) => assert!(d.contains("-  1.0") && d.contains("+  2.0"), "{d}"),
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn base64_decodes() {
        assert_eq!(b64_decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(b64_decode("aGVsbG8h").unwrap(), b"hello!");
        assert_eq!(b64_decode("aGk=\n").unwrap(), b"hi");
        assert!(b64_decode("a$b=").is_none());
    }
}
