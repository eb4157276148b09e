//! Benchmark 12 (issue 10): the E2B SDK's `run_code("1+1")` and MCP's `run_python("1+1")`
//! round trips through sandlot, each driven by its official Python client, with sandlot's own
//! REST execute from the same Python (httpx) as the peer, all against the bench's server on
//! 127.0.0.1 in the same run, so that the report can say what each protocol layer adds.
//!
//! The clients run the scripts in `bench/` (embedded here, written into the scratch dir) in a
//! venv of the env's base Python with pinned client versions, built once and cached like the
//! Jupyter peer's. Each script times its own calls (`--samples` prints every sample) so what is
//! measured is the client library's call, as a user of it sees it; the harness only computes
//! the percentiles, the same nearest-rank way as for every other benchmark.

use crate::bench::{Conditions, Ctx, HotResult, Watch};
use crate::peers::{ensure_venv, run_bounded};
use crate::stats::{Samples, Summary};
use anyhow::{bail, Context};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The scripts, also in `bench/` for running by hand.
const REST_RTT: &str = include_str!("../../../bench/rest_rtt.py");
const E2B_RTT: &str = include_str!("../../../bench/e2b_rtt.py");
const MCP_RTT: &str = include_str!("../../../bench/mcp_rtt.py");
const E2B_WATCH: &str = include_str!("../../../bench/e2b_watch.py");

/// Files the watch script writes (50 ms apart), after its 5 untimed ones.
const WATCH_WRITES: &str = "200";

/// What the clients' venv holds (and is keyed by). httpx is what the E2B and MCP clients talk
/// HTTP with, so the REST peer uses it too.
pub const REQUIREMENTS: &[&str] = &[
    "e2b-code-interpreter==2.11.5",
    "e2b==2.63.0",
    "mcp==2.3.0",
    "httpx==0.28.1",
];

/// Time for a script's start (imports, session, sandbox) and cleanup, beyond its loops.
const SCRIPT_OVERHEAD: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, Serialize)]
pub struct ClientsResult {
    pub conditions: Conditions,
    /// Timed calls asked of each client (fewer when the time bound came first) and untimed
    /// ones before them.
    pub iterations: usize,
    pub warmup: usize,
    pub loop_seconds: u64,
    /// `POST /v1/sandboxes/{id}/execute` `1+1` from Python (httpx, one kept-alive connection):
    /// the peer the clients are compared with.
    pub rest: Option<Summary>,
    /// `Sandbox.run_code("1+1")` with e2b-code-interpreter.
    pub e2b: Option<Summary>,
    /// `call_tool("run_python", {"code": "1+1"})` with the MCP SDK over streamable HTTP.
    pub mcp: Option<Summary>,
    /// The same `tools/call` as raw JSON-RPC POSTs (`http.client`, one connection).
    pub mcp_raw: Option<Summary>,
    /// E2B's `watch_dir` (async SDK, streamed): a write inside the sandbox to its event at the
    /// client (issue 21).
    pub watch: Option<Summary>,
    /// Writes whose event never arrived.
    pub watch_missed: Option<u64>,
    /// The hot benchmark's sandlot round trip (the harness's Rust client), when it ran in this
    /// run.
    pub hot_sandlot: Option<Summary>,
    /// The Jupyter peer of the hot benchmark, when it ran in this run.
    pub jupyter: Option<Summary>,
    pub requirements: Vec<String>,
    /// Versions the clients reported (python, httpx, e2b, e2b-code-interpreter, mcp).
    pub versions: BTreeMap<String, String>,
    pub mcp_protocol: Option<String>,
    /// `client: error` for each client that failed (the others still ran).
    pub failures: Vec<String>,
}

impl ClientsResult {
    /// `s.p50 / rest.p50`, when both were measured.
    pub fn vs_rest(&self, s: &Summary) -> Option<f64> {
        self.rest
            .filter(|r| r.n > 0 && r.p50 > 0.0)
            .map(|r| s.p50 / r.p50)
    }

    /// Why `client` has no numbers, if it failed.
    pub fn failure(&self, client: &str) -> Option<&str> {
        let prefix = format!("{client}: ");
        self.failures
            .iter()
            .find_map(|f| f.strip_prefix(prefix.as_str()))
    }
}

pub fn clients(ctx: &mut Ctx, hot: Option<&HotResult>) -> anyhow::Result<ClientsResult> {
    let o = ctx.opts;
    let watch = Watch::start(ctx);
    let base = ctx.manifest["spec"]["base_python"]
        .as_str()
        .unwrap_or("/usr/bin/python3")
        .to_owned();
    let requirements: Vec<String> = REQUIREMENTS.iter().map(|r| (*r).to_owned()).collect();
    let venv = ensure_venv(&o.cache_dir(), "clients", &base, &requirements)?;
    let limit = Duration::from_secs(o.loop_seconds);
    eprintln!(
        "[clients] REST, E2B SDK and MCP: up to {} calls of 1+1 each (after {} warm-up) within {:?}, in {} ({})",
        o.hot_iters,
        o.hot_warmup,
        limit,
        venv.display(),
        requirements.join(" ")
    );
    let runner = Runner::new(ctx, &venv)?;
    let mut versions = BTreeMap::new();
    let mut failures = Vec::new();
    let rest = note(
        &mut failures,
        "rest",
        runner
            .run("rest_rtt.py", REST_RTT, &[], false, 1)
            .and_then(|v| {
                if v["result"] != "2" {
                    bail!("1+1 answered {}", v["result"]);
                }
                Ok(v)
            }),
    )
    .and_then(|v| {
        for k in ["client", "python"] {
            if let Some((name, ver)) = v[k].as_str().and_then(split_version) {
                versions.insert(name, ver);
            }
        }
        note(&mut failures, "rest", summary_of(&v, "samples"))
    });
    let e2b = note(
        &mut failures,
        "e2b",
        runner.run("e2b_rtt.py", E2B_RTT, &[], true, 1),
    )
    .and_then(|v| {
        if let Some(m) = v["sdk"].as_object() {
            for (k, ver) in m {
                versions.insert(k.clone(), ver.as_str().unwrap_or("?").to_owned());
            }
        }
        note(&mut failures, "e2b", summary_of(&v, "samples"))
    });
    let mcp_v = note(
        &mut failures,
        "mcp",
        runner.run("mcp_rtt.py", MCP_RTT, &["--raw"], false, 2),
    );
    let mut mcp_protocol = None;
    let (mcp, mcp_raw) = match mcp_v {
        Some(v) => {
            if let Some((name, ver)) = v["client"].as_str().and_then(split_version) {
                versions.insert(name, ver);
            }
            mcp_protocol = v["protocol_version"].as_str().map(str::to_owned);
            (
                note(&mut failures, "mcp", summary_of(&v, "samples")),
                note(&mut failures, "mcp raw", summary_of(&v["raw"], "samples")),
            )
        }
        None => (None, None),
    };
    let watch_v = note(
        &mut failures,
        "watch",
        runner.run(
            "e2b_watch.py",
            E2B_WATCH,
            &["--writes", WATCH_WRITES],
            true,
            1,
        ),
    );
    let watch_missed = watch_v.as_ref().and_then(|v| v["missed"].as_u64());
    let watch_summary =
        watch_v.and_then(|v| note(&mut failures, "watch", summary_of(&v, "watch samples")));
    if rest.is_none() && e2b.is_none() && mcp.is_none() {
        bail!("every client failed: {}", failures.join("; "));
    }
    for (name, s) in [
        ("REST", &rest),
        ("E2B", &e2b),
        ("MCP", &mcp),
        ("MCP raw", &mcp_raw),
        ("E2B watch_dir event", &watch_summary),
    ] {
        if let Some(s) = s {
            eprintln!(
                "[clients] {name} p50 {:.3} ms p99 {:.3} ms (n {})",
                s.p50, s.p99, s.n
            );
        }
    }
    Ok(ClientsResult {
        conditions: watch.finish(ctx),
        iterations: o.hot_iters,
        warmup: o.hot_warmup,
        loop_seconds: o.loop_seconds,
        rest,
        e2b,
        mcp,
        mcp_raw,
        watch: watch_summary,
        watch_missed,
        hot_sandlot: hot.map(|h| h.sandlot),
        jupyter: hot.and_then(|h| h.jupyter),
        requirements,
        versions,
        mcp_protocol,
        failures,
    })
}

/// The value, or None with the failure noted (and shown) as `name: error`.
fn note<T>(failures: &mut Vec<String>, name: &str, r: anyhow::Result<T>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            eprintln!("[clients] {name} FAILED: {e:#}");
            failures.push(format!("{name}: {e:#}"));
            None
        }
    }
}

/// `"httpx 0.28.1"` → (`httpx`, `0.28.1`); a bare version (`"3.11.2"`) is Python's.
fn split_version(s: &str) -> Option<(String, String)> {
    match s.split_once(' ') {
        Some((n, v)) => Some((n.to_owned(), v.to_owned())),
        None if !s.is_empty() => Some(("python".to_owned(), s.to_owned())),
        None => None,
    }
}

/// The summary of a script's `samples_ms`.
fn summary_of(v: &Value, what: &str) -> anyhow::Result<Summary> {
    let ms: Vec<f64> = v["samples_ms"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default();
    if ms.is_empty() {
        bail!("{what}: no samples in {v}");
    }
    Ok(Samples::from_ms(ms).summary())
}

/// Runs the client scripts in the venv, with only what they need in their environment: E2B's
/// own settings pointing at this server (its E2B key), or sandlot's URL and API key
/// (`SANDLOT_API_KEY`, which the REST and MCP scripts send), and no proxy for loopback.
struct Runner {
    python: PathBuf,
    work: PathBuf,
    url: String,
    env: BTreeMap<String, String>,
    e2b_key: anyhow::Result<String>,
    /// The server's API key, for the REST and MCP scripts.
    key: Option<String>,
    iterations: usize,
    warmup: usize,
    limit: Duration,
}

impl Runner {
    fn new(ctx: &Ctx, venv: &Path) -> anyhow::Result<Runner> {
        let home = ctx.work.join("clients-home");
        std::fs::create_dir_all(&home)?;
        let mut env = BTreeMap::new();
        for (k, v) in [
            (
                "PATH",
                format!("{}/bin:/usr/local/bin:/usr/bin:/bin", venv.display()),
            ),
            ("HOME", home.display().to_string()),
            ("LANG", "C.UTF-8".into()),
            ("LC_ALL", "C.UTF-8".into()),
            ("PYTHONDONTWRITEBYTECODE", "1".into()),
            ("PYTHONUNBUFFERED", "1".into()),
            ("NO_PROXY", "127.0.0.1,localhost".into()),
            ("no_proxy", "127.0.0.1,localhost".into()),
        ] {
            env.insert(k.to_owned(), v);
        }
        let key_file = ctx.server.data_dir.join("e2b-api-key");
        let e2b_key = std::fs::read_to_string(&key_file)
            .map(|k| k.trim().to_owned())
            .with_context(|| format!("reading the server's E2B API key {}", key_file.display()));
        Ok(Runner {
            python: venv.join("bin/python"),
            work: ctx.work.clone(),
            url: format!("http://{}", ctx.server.addr),
            env,
            e2b_key,
            key: ctx.server.key.clone(),
            iterations: ctx.opts.hot_iters,
            warmup: ctx.opts.hot_warmup,
            limit: Duration::from_secs(ctx.opts.loop_seconds),
        })
    }

    /// Runs one script (`loops` timed loops, each bounded by the loop time); returns its JSON.
    fn run(
        &self,
        name: &str,
        text: &str,
        extra: &[&str],
        e2b: bool,
        loops: u32,
    ) -> anyhow::Result<Value> {
        let script = self.work.join(name);
        std::fs::write(&script, text)?;
        let mut cmd = Command::new(&self.python);
        cmd.arg(&script)
            .args(["--iterations", &self.iterations.to_string()])
            .args(["--warmup", &self.warmup.to_string()])
            .args(["--time-limit", &self.limit.as_secs_f64().to_string()])
            .arg("--samples")
            .args(extra)
            .env_clear()
            .envs(&self.env);
        if e2b {
            let key = self
                .e2b_key
                .as_ref()
                .map_err(|e| anyhow::anyhow!("{e:#}"))?;
            cmd.env("E2B_API_URL", &self.url)
                .env("E2B_SANDBOX_URL", &self.url)
                .env("E2B_API_KEY", key);
        } else {
            cmd.args(["--url", &self.url]);
            if let Some(key) = &self.key {
                cmd.env("SANDLOT_API_KEY", key);
            }
        }
        let out = run_bounded(&mut cmd, self.limit * loops + SCRIPT_OVERHEAD)?;
        last_json_line(&out)
    }
}

/// The script's report: the last line of its stdout that is a JSON object.
fn last_json_line(out: &str) -> anyhow::Result<Value> {
    let line = out
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .with_context(|| format!("no JSON on the script's stdout: {out:?}"))?;
    Ok(serde_json::from_str(line)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_samples_are_read_from_the_scripts_reports() {
        assert_eq!(
            split_version("httpx 0.28.1"),
            Some(("httpx".into(), "0.28.1".into()))
        );
        assert_eq!(
            split_version("3.11.2"),
            Some(("python".into(), "3.11.2".into()))
        );
        assert_eq!(split_version(""), None);
        let v =
            last_json_line("warming up\n{\"samples_ms\": [2.0, 1.0, 3.0], \"n\": 3}\n").unwrap();
        let s = summary_of(&v, "x").unwrap();
        assert_eq!((s.n, s.p50, s.max), (3, 2.0, 3.0));
        assert!(summary_of(&serde_json::json!({"n": 0}), "x").is_err());
        assert!(last_json_line("Traceback ...\n").is_err());
    }

    #[test]
    fn the_venv_is_keyed_by_pinned_requirements() {
        assert!(REQUIREMENTS.iter().all(|r| r.contains("==")));
        assert!(REQUIREMENTS.contains(&"e2b-code-interpreter==2.11.5"));
        assert!(REQUIREMENTS.contains(&"mcp==2.3.0"));
    }
}
