//! The `sandlot serve` under test: started on 127.0.0.1:0 with a temporary data dir, stopped
//! (SIGTERM, then SIGKILL) when the harness is done, and its log kept in a file.

use crate::http::{Conn, Endpoint};
use anyhow::{bail, Context};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long the server may take to announce itself (the first start provisions the Python
/// environment, which takes minutes).
const START_TIMEOUT: Duration = Duration::from_secs(900);
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    /// Its data dir (its API key is `api-key` in it, the E2B API key `e2b-api-key`).
    pub data_dir: PathBuf,
    /// The local admin key it made on its first start (read from `<data_dir>/api-key`), sent
    /// with every request; `None` when it serves without keys (`SANDLOT_AUTH=off`).
    pub key: Option<String>,
    pub log: PathBuf,
    /// When the process was spawned, and how long after that it announced its address.
    pub spawned_at: Instant,
    pub started_in: Duration,
}

impl Server {
    pub fn start(bin: &Path, work: &Path, env_dir: &Path) -> anyhow::Result<Server> {
        Server::start_with(
            bin,
            &work.join("data"),
            &work.join("server.log"),
            env_dir,
            &[],
        )
    }

    /// Starts a server on `data_dir` (kept if it exists: a restart), logging to `log`, with
    /// extra `serve` options.
    pub fn start_with(
        bin: &Path,
        data_dir: &Path,
        log: &Path,
        env_dir: &Path,
        extra: &[String],
    ) -> anyhow::Result<Server> {
        Server::start_env(bin, data_dir, log, env_dir, extra, &[])
    }

    /// As [`Server::start_with`], with extra environment variables for the server (e.g.
    /// `SANDLOT_AUTH=off` for the governance benchmark's peer).
    pub fn start_env(
        bin: &Path,
        data_dir: &Path,
        log: &Path,
        env_dir: &Path,
        extra: &[String],
        envs: &[(&str, &str)],
    ) -> anyhow::Result<Server> {
        if !bin.exists() {
            bail!(
                "{} does not exist: build it with `cargo build --release --workspace` or pass --sandlot",
                bin.display()
            );
        }
        std::fs::create_dir_all(data_dir)?;
        let log = log.to_path_buf();
        let log_file = std::fs::File::create(&log)?;
        let started = Instant::now();
        let mut child = Command::new(bin)
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .arg("--env-dir")
            .arg(env_dir)
            .args(extra)
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            .spawn()
            .with_context(|| format!("could not start {}", bin.display()))?;
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            // Keep draining after the announcement, so the server never writes into a closed pipe.
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        let mut server = Server {
            child,
            addr: "127.0.0.1:0".parse()?,
            data_dir: data_dir.to_path_buf(),
            key: None,
            log,
            spawned_at: started,
            started_in: Duration::ZERO,
        };
        let deadline = started + START_TIMEOUT;
        loop {
            if let Some(status) = server.child.try_wait()? {
                bail!(
                    "sandlot serve exited with {status} before listening; its log:\n{}",
                    server.log_tail(40)
                );
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!(
                    "sandlot serve did not announce itself in {START_TIMEOUT:?}; log:\n{}",
                    server.log_tail(40)
                );
            }
            match rx.recv_timeout(left.min(Duration::from_millis(200))) {
                Ok(line) => {
                    if let Some(url) = line.trim().strip_prefix("sandlot listening on http://") {
                        server.addr = url
                            .trim_end_matches('/')
                            .parse()
                            .context("bad listening address")?;
                        server.started_in = started.elapsed();
                        server.key = read_key(data_dir)?;
                        return Ok(server);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    std::thread::sleep(Duration::from_millis(50))
                }
            }
        }
    }

    /// Where to send requests, with the key.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint::new(self.addr, self.key.as_deref())
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        let v: Vec<&str> = s.lines().collect();
        v[v.len().saturating_sub(lines)..].join("\n")
    }

    /// Lines of the log at WARN or ERROR level.
    pub fn log_problems(&self) -> Vec<String> {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        s.lines()
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
            .map(str::to_owned)
            .collect()
    }

    /// The workspace backend the server logged when it started (`workspaces=…` on its
    /// "serving" line), e.g. `btrfs (…)`; `None` for a server that does not log one.
    pub fn workspaces(&self) -> Option<String> {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        workspaces_in_log(&s)
    }

    /// How many times the log says the zygote died and was restarted.
    pub fn zygote_restarts(&self) -> usize {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        s.lines().filter(|l| l.contains("zygote died")).count()
    }

    pub fn stop(&mut self) -> anyhow::Result<Duration> {
        let t = Instant::now();
        if self.child.try_wait()?.is_none() {
            // SAFETY: kill(2) on the pid of a child we spawned and have not yet reaped.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            while self.child.try_wait()?.is_none() {
                if t.elapsed() > STOP_TIMEOUT {
                    eprintln!("sandlot serve did not stop in {STOP_TIMEOUT:?}; killing it");
                    self.child.kill()?;
                    self.child.wait()?;
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(t.elapsed())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// The key in `<data_dir>/api-key`, written before the server announces itself; no file means
/// a server without keys.
fn read_key(data_dir: &Path) -> anyhow::Result<Option<String>> {
    let path = data_dir.join("api-key");
    match std::fs::read_to_string(&path) {
        Ok(k) if !k.trim().is_empty() => Ok(Some(k.trim().to_owned())),
        Ok(_) => bail!("{} is empty", path.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => {
            Err(e).with_context(|| format!("reading the server's API key {}", path.display()))
        }
    }
}

fn workspaces_in_log(log: &str) -> Option<String> {
    log.lines()
        .filter(|l| l.contains(" serving"))
        .find_map(|l| {
            l.split_once(" workspaces=")
                .map(|(_, w)| w.trim().to_owned())
        })
        .filter(|w| !w.is_empty())
}

/// The body for a create: the default template, a long idle timeout so nothing expires while
/// a benchmark runs.
pub fn create_body() -> Value {
    json!({"idle_timeout": 3600})
}

/// Creates a sandbox of the default template; returns its id.
pub fn create(c: &mut Conn) -> anyhow::Result<String> {
    create_with(c, &create_body())
}

/// Creates a sandbox from this request body; returns its id.
pub fn create_with(c: &mut Conn, body: &Value) -> anyhow::Result<String> {
    let r = c.post_json("/v1/sandboxes", body)?;
    if r.status != 201 {
        bail!("create answered {}: {}", r.status, r.text());
    }
    let v = r.json()?;
    v["id"]
        .as_str()
        .map(str::to_owned)
        .context("create answered without an id")
}

/// Runs Python code; returns the parsed execution result.
pub fn execute(c: &mut Conn, id: &str, code: &str) -> anyhow::Result<Value> {
    let r = c.post_json(
        &format!("/v1/sandboxes/{id}/execute"),
        &json!({"code": code, "language": "python"}),
    )?;
    if r.status != 200 {
        bail!("execute answered {}: {}", r.status, r.text());
    }
    let v = r.json()?;
    if v["end_state"] != "ok" {
        bail!("execute ended {}: {}", v["end_state"], r.text());
    }
    Ok(v)
}

/// Runs an execution request; returns its result whatever state it ended in (`killed`,
/// `error`, ...), as long as the server answered 200.
pub fn execute_raw(c: &mut Conn, id: &str, body: &Value) -> anyhow::Result<Value> {
    let r = c.post_json(&format!("/v1/sandboxes/{id}/execute"), body)?;
    if r.status != 200 {
        bail!("execute answered {}: {}", r.status, r.text());
    }
    r.json()
}

/// Runs Bash code with a timeout in seconds; the result must end `ok` with exit code 0.
pub fn execute_bash(c: &mut Conn, id: &str, code: &str, timeout_s: f64) -> anyhow::Result<Value> {
    let v = execute_raw(
        c,
        id,
        &json!({"code": code, "language": "bash", "timeout": timeout_s}),
    )?;
    if v["end_state"] != "ok" || v["exit_code"].as_i64().unwrap_or(0) != 0 {
        bail!(
            "bash `{code}` ended {} (exit code {}): {} {}",
            v["end_state"],
            v["exit_code"],
            v["stdout"],
            v["stderr"]
        );
    }
    Ok(v)
}

/// `GET /v1/sandboxes/{id}`.
pub fn sandbox(c: &mut Conn, id: &str) -> anyhow::Result<Value> {
    let r = c.request("GET", &format!("/v1/sandboxes/{id}"), None)?;
    if r.status != 200 {
        bail!("get sandbox answered {}: {}", r.status, r.text());
    }
    r.json()
}

pub fn delete(c: &mut Conn, id: &str) -> anyhow::Result<()> {
    let r = c.delete(&format!("/v1/sandboxes/{id}"))?;
    if r.status != 204 {
        bail!("delete answered {}: {}", r.status, r.text());
    }
    Ok(())
}

/// The Python environment the server runs sandboxes in: the provisioned env under `env_dir`
/// (the one with `.sandlot-ready`; the newest if there are several).
pub fn find_env(env_dir: &Path) -> anyhow::Result<PathBuf> {
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    for e in
        std::fs::read_dir(env_dir).with_context(|| format!("cannot read {}", env_dir.display()))?
    {
        let p = e?.path();
        let ready = p.join(".sandlot-ready");
        if let Ok(m) = std::fs::metadata(&ready).and_then(|m| m.modified()) {
            if best.as_ref().is_none_or(|(t, _)| m > *t) {
                best = Some((m, p));
            }
        }
    }
    best.map(|(_, p)| p)
        .with_context(|| format!("no provisioned environment in {}", env_dir.display()))
}

/// The env's manifest (`.sandlot-ready`): its spec and the versions installed.
pub fn env_manifest(env: &Path) -> anyhow::Result<Value> {
    let s = std::fs::read_to_string(env.join(".sandlot-ready"))?;
    Ok(serde_json::from_str(&s)?)
}

/// The v1 memory cgroup directory that holds this server's sandboxes, found by a sandbox id.
pub fn cgroup_instance(sandbox_id: &str) -> Option<PathBuf> {
    let root = Path::new("/sys/fs/cgroup/memory/sandlot");
    for e in std::fs::read_dir(root).ok()? {
        let p = e.ok()?.path();
        if p.join(sandbox_id).is_dir() {
            return Some(p);
        }
    }
    None
}

/// Sandbox cgroups left under the instance (every child group but the zygotes').
pub fn leftover_groups(instance: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(instance) else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("zygote"))
        .collect()
}

/// Waits up to `limit` for the sandbox groups to be gone; returns those still there.
pub fn wait_groups_gone(instance: Option<&Path>, limit: Duration) -> Vec<String> {
    let Some(instance) = instance else {
        return Vec::new();
    };
    let t = Instant::now();
    loop {
        let left = leftover_groups(instance);
        if left.is_empty() || t.elapsed() > limit {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_workspace_backend_on_the_serving_line() {
        let log = "2026-11-25T10:00:00Z  INFO sandlot_runtime: workspaces on disk backend=btrfs\n\
                   2026-11-25T10:00:01Z  INFO sandlot_cli::serve: serving addr=127.0.0.1:9 pool_size=2 \
                   workspaces=btrfs (loop image, qgroups)\n";
        assert_eq!(
            workspaces_in_log(log).as_deref(),
            Some("btrfs (loop image, qgroups)")
        );
        assert_eq!(workspaces_in_log("INFO serving addr=1"), None);
    }
}
