//! The `sandlot` command line: `--version`, usage errors, `doctor`, and `run` against a real
//! server and in-process.

use crate::common;

use common::TestServer;
use serde_json::Value;
use std::io::Write;
use std::process::{Command, Output, Stdio};

fn sandlot(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandlot"));
    cmd.args(args)
        .env_remove("SANDLOT_URL")
        .stdin(Stdio::null());
    cmd
}

fn output(cmd: &mut Command) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("run sandlot");
    let code = status.code().expect("sandlot killed by a signal");
    (
        code,
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

#[test]
fn version() {
    let (code, out, _) = output(&mut sandlot(&["--version"]));
    assert_eq!(code, 0);
    assert_eq!(out.trim(), format!("sandlot {}", env!("CARGO_PKG_VERSION")));
}

#[test]
fn usage_errors_exit_2() {
    let (code, _, err) = output(&mut sandlot(&["run"]));
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = output(&mut sandlot(&["run", "--lang", "ruby", "1"]));
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = output(&mut sandlot(&["serve", "--listen", "not-an-address"]));
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = output(&mut sandlot(&["frobnicate"]));
    assert_eq!(code, 2, "{err}");
}

#[test]
fn serve_help_lists_the_environment() {
    let (code, out, _) = output(&mut sandlot(&["serve", "--help"]));
    assert_eq!(code, 0);
    for var in [
        "SANDLOT_LISTEN",
        "SANDLOT_DATA_DIR",
        "SANDLOT_ENV_DIR",
        "SANDLOT_LOG",
        "SANDLOT_MAX_SANDBOXES",
        "SANDLOT_MAX_CONCURRENT_CREATES",
        "SANDLOT_MAX_PENDING_CREATES",
    ] {
        assert!(out.contains(var), "{out}");
    }
    for flag in [
        "--max-sandboxes",
        "--max-concurrent-creates",
        "--max-pending-creates",
    ] {
        assert!(out.contains(flag), "{out}");
    }
    let (code, out, _) = output(&mut sandlot(&["template", "build", "--help"]));
    assert_eq!(code, 0);
    assert!(
        out.contains("SANDLOT_URL") && out.contains("requirements"),
        "{out}"
    );
    let (code, out, _) = output(&mut sandlot(&["env", "--help"]));
    assert_eq!(code, 0);
    assert!(
        out.contains("--print-python") && out.contains("--extras"),
        "{out}"
    );
}

#[test]
fn capacity_flags_are_checked() {
    for args in [
        &["serve", "--max-sandboxes", "0"][..],
        &["serve", "--max-concurrent-creates", "-1"],
        &["serve", "--max-pending-creates", "lots"],
        &["template", "build"],
        &["template", "frobnicate"],
    ] {
        let (code, _, err) = output(&mut sandlot(args));
        assert_eq!(code, 2, "{args:?}: {err}");
    }
    let (code, _, err) = output(
        sandlot(&["serve", "--listen", "127.0.0.1:0"]).env("SANDLOT_MAX_PENDING_CREATES", "0"),
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("at least 1"), "{err}");
}

/// A `sandlot serve` with extra environment, stopped (SIGTERM, then SIGKILL) when dropped.
struct Serve {
    child: std::process::Child,
    url: String,
    /// Sends the server's local admin key.
    client: reqwest::blocking::Client,
    stderr: std::path::PathBuf,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

impl Serve {
    fn start(envs: &[(&str, &str)]) -> Serve {
        use std::io::BufRead;
        let data = tempfile::tempdir().unwrap();
        let logs = tempfile::tempdir().unwrap();
        let stderr = logs.path().join("stderr");
        let mut cmd = sandlot(&["serve", "--listen", "127.0.0.1:0", "--data-dir"]);
        cmd.arg(data.path())
            .arg("--env-dir")
            .arg(common::env_dir())
            .envs(envs.iter().copied())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap());
        let mut child = cmd.spawn().unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        // The first start prints the new admin key before the listening line.
        let url = match lines.find(|l| {
            l.as_ref()
                .map_or(true, |l| l.starts_with("sandlot listening on "))
        }) {
            Some(Ok(line)) => line["sandlot listening on ".len()..].to_owned(),
            other => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "no listening line ({other:?}); stderr:\n{}",
                    std::fs::read_to_string(&stderr).unwrap_or_default()
                );
            }
        };
        std::thread::spawn(move || lines.for_each(drop));
        let key = std::fs::read_to_string(data.path().join("api-key")).unwrap();
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {}", key.trim()).parse().unwrap(),
        );
        let client = reqwest::blocking::Client::builder()
            .pool_idle_timeout(common::POOL_IDLE)
            .default_headers(headers)
            .build()
            .unwrap();
        Serve {
            child,
            url,
            client,
            stderr,
            _dirs: (data, logs),
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        for _ in 0..300 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn serve_takes_capacity_from_the_environment() {
    let server = Serve::start(&[
        ("SANDLOT_MAX_SANDBOXES", "1"),
        ("SANDLOT_MAX_CONCURRENT_CREATES", "2"),
        ("SANDLOT_MAX_PENDING_CREATES", "3"),
    ]);
    let err = server.stderr();
    for want in [
        "max_sandboxes=1",
        "max_concurrent_creates=2",
        "max_pending_creates=3",
    ] {
        assert!(err.contains(want), "{want}: {err}");
    }
    let client = server.client.clone();
    let create = || {
        client
            .post(format!("{}/v1/sandboxes", server.url))
            .json(&serde_json::json!({}))
            .send()
            .unwrap()
    };
    let first = create();
    assert_eq!(first.status().as_u16(), 201);
    let second = create();
    assert_eq!(second.status().as_u16(), 503);
    let body: Value = second.json().unwrap();
    assert_eq!(body["error"]["code"], "capacity_exhausted", "{body}");
}

#[test]
fn doctor_reports_every_check() {
    let (code, out, err) = output(&mut sandlot(&["doctor", "--json"]));
    let report: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    let checks = report["checks"].as_array().unwrap();
    assert!(!checks.is_empty());
    for c in checks {
        assert!(
            c["name"].is_string() && c["ok"].is_boolean() && c["detail"].is_string(),
            "{c}"
        );
        if c["ok"] == false {
            assert!(c["fix"].is_string(), "a missing layer without a fix: {c}");
        }
    }
    let ready = report["ready"].as_bool().unwrap();
    assert_eq!(code, if ready { 0 } else { 1 });

    let (code_plain, out, _) = output(&mut sandlot(&["doctor"]));
    assert_eq!(code_plain, code);
    for c in checks {
        assert!(out.contains(c["name"].as_str().unwrap()), "{out}");
    }
}

fn run_remote(server: &TestServer, args: &[&str]) -> (i32, String, String) {
    let mut cmd = sandlot(&["run", "--url", server.url()]);
    cmd.env("SANDLOT_API_KEY", server.key()).args(args);
    output(&mut cmd)
}

#[test]
fn run_against_a_server() {
    let server = TestServer::start();

    let (code, out, err) = run_remote(&server, &["print('hello'); 6 * 7"]);
    assert_eq!((code, out.as_str()), (0, "hello\n42\n"), "{err}");

    let (code, _, err) = run_remote(&server, &["1/0"]);
    assert_eq!(code, 1);
    assert!(err.contains("ZeroDivisionError"), "{err}");

    let (code, out, err) = run_remote(
        &server,
        &["--lang", "bash", "echo from bash; echo oops >&2; (exit 3)"],
    );
    assert_eq!((code, out.as_str()), (1, "from bash\n"));
    assert!(err.contains("oops"), "{err}");

    let (code, _, err) = run_remote(&server, &["--timeout", "1", "import time; time.sleep(10)"]);
    assert_eq!(code, 124, "{err}");

    let (code, out, err) = run_remote(&server, &["--json", "x = 2\nx * 21"]);
    assert_eq!(code, 0, "{err}");
    let result: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(result["end_state"], "ok");
    assert_eq!(result["result"]["text/plain"], "42");

    // A figure shows as a placeholder.
    let plot = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()";
    let (code, out, err) = run_remote(&server, &[plot]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("[image/png ") && out.contains("KiB]"), "{out}");

    // Code from stdin.
    let mut child = sandlot(&["run", "--url", server.url(), "-"])
        .env("SANDLOT_API_KEY", server.key())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"print('from stdin')")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "from stdin\n");

    // Every sandbox `run` created was deleted.
    let live = server.get("/v1/sandboxes");
    assert_eq!(
        live.expect(200)["sandboxes"].as_array().unwrap().len(),
        0,
        "{}",
        live.text
    );
}

#[test]
fn run_reports_an_unreachable_server() {
    // A port nothing listens on: bind one, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let (code, _, err) = output(&mut sandlot(&["run", "--url", &url, "1"]));
    assert_eq!(code, 1);
    assert!(err.contains("could not reach the server"), "{err}");
}

#[test]
fn run_in_process() {
    let data_dir = tempfile::tempdir().unwrap();
    let mut cmd = sandlot(&["run", "--data-dir"]);
    cmd.arg(data_dir.path())
        .arg("--env-dir")
        .arg(common::env_dir())
        .arg("print(1 + 1)");
    let (code, out, err) = output(&mut cmd);
    assert_eq!((code, out.as_str()), (0, "2\n"), "{err}");
    let (code, _, _) = output(
        sandlot(&["run", "--data-dir"])
            .arg(data_dir.path())
            .arg("--env-dir")
            .arg(common::env_dir())
            .arg("raise SystemError('x')"),
    );
    assert_eq!(code, 1);
}

#[test]
fn creations_past_the_queue_bound_fail_fast_and_the_rest_succeed() {
    let server = Serve::start(&[
        ("SANDLOT_POOL_SIZE", "0"),
        ("SANDLOT_MAX_CONCURRENT_CREATES", "1"),
        ("SANDLOT_MAX_PENDING_CREATES", "2"),
    ]);
    assert!(
        server.stderr().contains("pool_size=0"),
        "{}",
        server.stderr()
    );
    let url = server.url.clone();
    let started = std::time::Instant::now();
    let burst: Vec<_> = (0..10)
        .map(|_| {
            let (url, client) = (url.clone(), server.client.clone());
            std::thread::spawn(move || {
                let resp = client
                    .post(format!("{url}/v1/sandboxes"))
                    .json(&serde_json::json!({}))
                    .timeout(std::time::Duration::from_secs(120))
                    .send()
                    .unwrap();
                let status = resp.status().as_u16();
                let body: Value = resp.json().unwrap();
                // When the answer was in, on one clock for the whole burst.
                (status, body, started.elapsed())
            })
        })
        .collect();
    let results: Vec<_> = burst.into_iter().map(|t| t.join().unwrap()).collect();
    let created = results.iter().filter(|r| r.0 == 201).count();
    let refused: Vec<_> = results.iter().filter(|r| r.0 == 503).collect();
    assert_eq!(created + refused.len(), 10, "{results:?}");
    assert!(
        created >= 2,
        "the queue admits up to its bound: {results:?}"
    );
    assert!(
        !refused.is_empty(),
        "a burst of 10 over a queue of 2 is refused in part"
    );
    // Refused at once, not after waiting in line: each refusal is in before the last admitted
    // creation is done (a refusal that waited for its turn would come after it). An order of
    // events, not a time limit, so a busy machine does not change the verdict.
    let last_created = results
        .iter()
        .filter(|r| r.0 == 201)
        .map(|r| r.2)
        .max()
        .expect("created >= 2");
    for (_, body, answered) in refused {
        assert_eq!(body["error"]["code"], "capacity_exhausted", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("queued"),
            "{body}"
        );
        assert!(
            *answered < last_created,
            "refused at {answered:?}, after the last creation ended at {last_created:?}"
        );
    }
}
