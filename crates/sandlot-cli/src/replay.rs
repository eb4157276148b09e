//! `sandlot bundle`, `sandlot replay` and `sandlot lineage`.
//!
//! - `bundle SANDBOX -o FILE` saves a sandbox's run bundle (`GET /v1/sandboxes/{id}/bundle`,
//!   see `sandlot-record/src/bundle.rs` for the format).
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

use anyhow::{anyhow, Context};
use clap::{Args, Subcommand, ValueEnum};
use sandlot_client::{segment as seg, Client, ClientError, Method};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Exit status for a bundle that cannot be used.
const EXIT_BAD_BUNDLE: u8 = 2;

mod bundle;
mod compare;

use bundle::*;
use compare::*;

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

/// Bound of each call: a bundle download and a replayed execution (up to `--timeout`) are the
/// longest.
const CALL_TIMEOUT: Duration = Duration::from_secs(3600);
/// Largest bundle fetched into memory for `replay SANDBOX`: what the bundle reader accepts.
const MAX_FETCHED_BUNDLE: u64 = MAX_MANIFEST + MAX_STEPS_TOTAL + MAX_INPUTS_TOTAL;
/// Largest artifact fetched to compare PNG images by pixels (as large as an input may be).
const MAX_FETCHED_ARTIFACT: u64 = MAX_INPUT;
/// Largest OpenLineage export read (JSON lines, a few KiB an event).
const MAX_LINEAGE_EXPORT: u64 = 1 << 30;

fn connect(url: &str) -> anyhow::Result<Client> {
    crate::client::connect_for(url, CALL_TIMEOUT)
}

// ---------------------------------------------------------------------------------------------
// sandlot bundle

pub fn bundle(args: BundleArgs) -> anyhow::Result<u8> {
    runtime()?.block_on(async {
        let client = connect(&args.url.url)?;
        let path = format!("/v1/sandboxes/{}/bundle", seg(&args.sandbox));
        let mut resp = client.send(client.request(Method::GET, &path)).await?;
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
    client: Client,
}

impl Replayer {
    async fn get_json(&self, path: &str) -> anyhow::Result<Value> {
        Ok(self.client.get_json(path).await?)
    }

    async fn post_json(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        Ok(self.client.post_json(path, body).await?)
    }

    async fn bytes(&self, path: &str, limit: u64) -> anyhow::Result<Vec<u8>> {
        Ok(self.client.get_bytes(path, limit).await?)
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
    let r = Replayer {
        client: connect(&args.url.url)?,
    };
    let path = Path::new(&args.source);
    let read = if path.is_file() {
        let f =
            std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        tokio::task::spawn_blocking(move || read_bundle(std::io::BufReader::new(f))).await?
    } else if args.source.starts_with("sb_") {
        let bytes = r
            .bytes(
                &format!("/v1/sandboxes/{}/bundle", seg(&args.source)),
                MAX_FETCHED_BUNDLE,
            )
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
            .client
            .delete(&format!("/v1/sandboxes/{}", seg(&id)))
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
                            "/v1/sandboxes/{}/files/{}",
                            seg(id),
                            path.split('/').map(seg).collect::<Vec<_>>().join("/")
                        );
                        let req = r.client.request(Method::PUT, &url).body(body);
                        match r.client.send(req).await {
                            Ok(_) => Verdict::Identical,
                            // Not reaching the server ends the replay; a refusal is the step's.
                            Err(e @ ClientError::Transport { .. }) => return Err(e.into()),
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
                                let got = r
                                    .bytes(&format!("/v1/artifacts/{sha}"), MAX_FETCHED_ARTIFACT)
                                    .await
                                    .ok();
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
                let r = Replayer {
                    client: connect(&url.url)?,
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
                let r = Replayer {
                    client: connect(&url.url)?,
                };
                let body = r
                    .bytes(
                        &format!("/v1/lineage/sandbox/{}/openlineage", seg(&sandbox)),
                        MAX_LINEAGE_EXPORT,
                    )
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
