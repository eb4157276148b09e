//! The integration-test harness: a real `sandlot serve` on `127.0.0.1:0` with a temp data dir,
//! and a blocking JSON client for it. Every suite that drives the server uses this:
//!
//! ```ignore
//! use crate::common;
//! let server = common::TestServer::start();
//! let id = server.create_sandbox();
//! let result = server.execute(&id, "x = 41\nx + 1");
//! ```
//!
//! The Python environment is provisioned once per machine, in `SANDLOT_TEST_ENV_DIR` or else
//! `<CARGO_TARGET_TMPDIR>/sandlot-envs`; the first start may take minutes, later ones seconds.
#![allow(dead_code)]

use reqwest::blocking::{Client, Response};
use reqwest::header::{HeaderMap, CONTENT_TYPE};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

mod serial;
pub mod tenants;
pub use serial::serial;
pub use tenants::TenantKey;

/// Longest wait for the listening line: the first start on a machine provisions the Python
/// environment.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(600);
/// Longest wait for a graceful stop.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// Timeout of each HTTP request (the longest execution in the tests is well under it).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a test client keeps an idle connection for reuse: well under the server's own idle
/// timeout (30 s, `serve.rs`), so a client never sends a request on a connection the server is
/// closing at that moment (a test that waits 30 s between two requests otherwise races it).
pub const POOL_IDLE: Duration = Duration::from_secs(10);

/// A client builder with the tests' request timeout and [`POOL_IDLE`].
pub fn client_builder() -> reqwest::blocking::ClientBuilder {
    Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .pool_idle_timeout(POOL_IDLE)
}

const LISTENING_PREFIX: &str = "sandlot listening on ";

/// Starts are serialized within the test binary (all suites share it): the first provisions the
/// environment, and on two cores parallel zygote start-ups only slow each other down.
static STARTUP: Mutex<()> = Mutex::new(());

/// The shared environment dir.
pub fn env_dir() -> PathBuf {
    std::env::var_os("SANDLOT_TEST_ENV_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("sandlot-envs"))
}

/// A status and a JSON body (`Null` when the body is empty or not JSON).
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Value,
    pub text: String,
}

impl Resp {
    fn read(resp: Response) -> Resp {
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Resp {
            status,
            headers,
            body,
            text,
        }
    }

    /// The `error.code` of an error body.
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }

    pub fn message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap_or("")
    }

    /// Asserts the status and returns the body.
    #[track_caller]
    pub fn expect(&self, status: u16) -> &Value {
        assert_eq!(
            self.status, status,
            "expected {status}, got {}: {}",
            self.status, self.text
        );
        &self.body
    }

    /// Asserts an error response with this status and code.
    #[track_caller]
    pub fn expect_error(&self, status: u16, code: &str) {
        assert_eq!(
            (self.status, self.code()),
            (status, code),
            "expected {status} {code}, got {}: {}",
            self.status,
            self.text
        );
        assert!(
            !self.message().is_empty(),
            "error without a message: {}",
            self.text
        );
        assert_schema("Error", &self.body);
    }
}

/// Asserts that `value` is valid under the OpenAPI document's schema `schema` (a name under
/// `components/schemas`): the server's answers must be what the document promises.
#[track_caller]
pub fn assert_schema(schema: &str, value: &Value) {
    static DOC: OnceLock<Value> = OnceLock::new();
    let doc =
        DOC.get_or_init(|| serde_json::from_str(sandlot_api::OPENAPI_JSON).expect("openapi.json"));
    let root = json!({ "$ref": format!("#/components/schemas/{schema}"), "components": doc["components"] });
    let validator =
        jsonschema::draft202012::new(&root).unwrap_or_else(|e| panic!("schema {schema}: {e}"));
    let errors: Vec<String> = validator
        .iter_errors(value)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "not a valid {schema}: {errors:?}\n{value:#}"
    );
}

pub struct TestServer {
    child: Option<Child>,
    url: String,
    data_dir: tempfile::TempDir,
    logs: tempfile::TempDir,
    generation: u32,
    client: Client,
    /// The local admin key the server created in its data dir (`None` with `SANDLOT_AUTH=off`).
    key: Option<String>,
    /// Extra environment of the server process (kept across restarts).
    env: Vec<(String, String)>,
    /// Held from the start to the drop, after the server has stopped (see [`serial`]).
    _share: serial::Share,
}

impl TestServer {
    /// Starts `sandlot serve` on a free port with a fresh data dir.
    pub fn start() -> TestServer {
        TestServer::start_with_env(&[])
    }

    /// Like [`TestServer::start`], with extra environment variables for the server (its
    /// settings, e.g. `SANDLOT_POOL_SIZE`), without touching this process's environment.
    pub fn start_with_env(env: &[(&str, &str)]) -> TestServer {
        let share = serial::Share::take();
        let data_dir = tempfile::Builder::new()
            .prefix("sandlot-test-data-")
            .tempdir()
            .unwrap();
        let logs = tempfile::Builder::new()
            .prefix("sandlot-test-logs-")
            .tempdir()
            .unwrap();
        let client = client_builder().build().unwrap();
        let mut server = TestServer {
            child: None,
            url: String::new(),
            data_dir,
            logs,
            generation: 0,
            client,
            key: None,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            _share: share,
        };
        server.spawn();
        server
    }

    fn stderr_path(&self) -> PathBuf {
        self.logs
            .path()
            .join(format!("server-{}.stderr", self.generation))
    }

    fn spawn(&mut self) {
        let _guard = STARTUP
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        self.generation += 1;
        let env_dir = env_dir();
        std::fs::create_dir_all(&env_dir).unwrap();
        let stderr = std::fs::File::create(self.stderr_path()).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_sandlot"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(self.data_dir.path())
            .arg("--env-dir")
            .arg(&env_dir)
            .env_remove("SANDLOT_URL")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn sandlot serve");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            // Keep draining stdout after the line so the server never blocks on a full pipe.
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(url) = line.strip_prefix(LISTENING_PREFIX) {
                    let _ = tx.send(url.trim().to_owned());
                }
            }
        });
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        let url = loop {
            match rx.recv_timeout(Duration::from_millis(250)) {
                Ok(url) => break url,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = child.wait().ok();
                    panic!(
                        "sandlot serve exited ({status:?}) before listening; stderr:\n{}",
                        std::fs::read_to_string(self.stderr_path()).unwrap_or_default()
                    );
                }
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "sandlot serve exited ({status}) before listening; stderr:\n{}",
                    std::fs::read_to_string(self.stderr_path()).unwrap_or_default()
                );
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "sandlot serve did not listen within {STARTUP_TIMEOUT:?}; stderr:\n{}",
                    std::fs::read_to_string(self.stderr_path()).unwrap_or_default()
                );
            }
        };
        assert!(
            url.starts_with("http://127.0.0.1:"),
            "unexpected listening line: {url}"
        );
        self.url = url;
        self.child = Some(child);
        self.key = std::fs::read_to_string(self.data_dir.path().join("api-key"))
            .ok()
            .map(|k| k.trim().to_owned());
        self.client = self.client_with_key(self.key.as_deref());
    }

    /// A client that sends `key` as the bearer key with every request.
    pub fn client_with_key(&self, key: Option<&str>) -> Client {
        let mut headers = HeaderMap::new();
        if let Some(key) = key {
            headers.insert(
                reqwest::header::AUTHORIZATION,
                format!("Bearer {key}").parse().unwrap(),
            );
        }
        client_builder().default_headers(headers).build().unwrap()
    }

    /// `raw` (one or more HTTP/1.1 requests written by hand) with the bearer key added to each.
    pub fn authorize(&self, raw: &str) -> String {
        raw.replace(
            " HTTP/1.1\r\n",
            &format!(" HTTP/1.1\r\n{}", self.auth_line()),
        )
    }

    /// The local admin key (`sl_...`).
    pub fn key(&self) -> &str {
        self.key.as_deref().expect("the server runs with API keys")
    }

    /// `Authorization: Bearer <key>\r\n`, for requests written by hand on a socket (empty
    /// when the server runs without keys).
    pub fn auth_line(&self) -> String {
        match &self.key {
            Some(k) => format!("Authorization: Bearer {k}\r\n"),
            None => String::new(),
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn data_dir(&self) -> &Path {
        self.data_dir.path()
    }

    /// The server's pid (panics when it is not running).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server not running").id()
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Everything the current server process wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.stderr_path()).unwrap_or_default()
    }

    fn full(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    fn send(&self, req: reqwest::blocking::RequestBuilder) -> Resp {
        match req.send() {
            Ok(resp) => Resp::read(resp),
            Err(e) => panic!("request failed: {e}; server stderr:\n{}", self.stderr()),
        }
    }

    pub fn get(&self, path: &str) -> Resp {
        self.send(self.client.get(self.full(path)))
    }

    pub fn delete(&self, path: &str) -> Resp {
        self.send(self.client.delete(self.full(path)))
    }

    pub fn post(&self, path: &str, body: &Value) -> Resp {
        self.send(self.client.post(self.full(path)).json(body))
    }

    /// A POST with a raw body and content type, for malformed requests.
    pub fn post_raw(&self, path: &str, content_type: &str, body: impl Into<Vec<u8>>) -> Resp {
        let body: Vec<u8> = body.into();
        self.send(
            self.client
                .post(self.full(path))
                .header(CONTENT_TYPE, content_type)
                .body(body),
        )
    }

    pub fn put_bytes(&self, path: &str, bytes: impl Into<Vec<u8>>) -> Resp {
        let bytes: Vec<u8> = bytes.into();
        self.send(self.client.put(self.full(path)).body(bytes))
    }

    /// A GET whose body is raw bytes: (status, headers, bytes).
    pub fn get_bytes(&self, path: &str) -> (u16, HeaderMap, Vec<u8>) {
        let resp = self.client.get(self.full(path)).send().expect("GET");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        (status, headers, resp.bytes().expect("body").to_vec())
    }

    /// Creates a sandbox with defaults; returns its id.
    pub fn create_sandbox(&self) -> String {
        self.create_sandbox_with(&json!({}))["id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Creates a sandbox from this body; returns the sandbox.
    pub fn create_sandbox_with(&self, body: &Value) -> Value {
        let sandbox = self.post("/v1/sandboxes", body).expect(201).clone();
        assert_schema("Sandbox", &sandbox);
        sandbox
    }

    /// Runs Python code; asserts a 200 and returns the ExecutionResult.
    pub fn execute(&self, id: &str, code: &str) -> Value {
        self.execute_with(id, &json!({ "code": code }))
            .expect(200)
            .clone()
    }

    pub fn execute_bash(&self, id: &str, code: &str) -> Value {
        self.execute_with(id, &json!({ "code": code, "language": "bash" }))
            .expect(200)
            .clone()
    }

    pub fn execute_with(&self, id: &str, body: &Value) -> Resp {
        self.post(&format!("/v1/sandboxes/{id}/execute"), body)
    }

    /// SIGKILLs the server, as a crash would.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server gracefully (SIGTERM); returns its exit status.
    pub fn stop(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("server not running");
        signal(child.id(), nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "sandlot serve did not stop within {STOP_TIMEOUT:?} of SIGTERM; stderr:\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts a new server on the same data dir (stopping the current one first if it runs).
    pub fn restart(&mut self) {
        if self.child.is_some() {
            self.stop();
        }
        self.spawn();
    }

    /// [`TestServer::restart`] with these variables added to the server's environment.
    pub fn restart_with_env(&mut self, env: &[(&str, &str)]) {
        self.env
            .extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        self.restart();
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // Gracefully when possible, so the server kills its sandboxes; SIGKILL if it hangs.
        signal(child.id(), nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

fn signal(pid: u32, sig: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig);
}

// ---------------------------------------------------------------------------------------------
// Processes, through /proc.

/// A process identified across pid reuse: its pid and its start time (field 22 of stat).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Proc {
    pub pid: u32,
    pub start_time: u64,
}

/// (ppid, start time) of a process, from `/proc/<pid>/stat`.
fn stat(pid: u32) -> Option<(u32, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces: split after the last ')'.
    let rest = &s[s.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): ppid is field 4, starttime field 22.
    Some((fields.get(1)?.parse().ok()?, fields.get(19)?.parse().ok()?))
}

fn all_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Every process descending from `root` (not `root` itself).
pub fn descendants(root: u32) -> Vec<Proc> {
    let mut children: HashMap<u32, Vec<Proc>> = HashMap::new();
    for pid in all_pids() {
        if let Some((ppid, start_time)) = stat(pid) {
            children
                .entry(ppid)
                .or_default()
                .push(Proc { pid, start_time });
        }
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    let mut seen = HashSet::new();
    while let Some(p) = stack.pop() {
        for child in children.get(&p).into_iter().flatten() {
            if seen.insert(child.pid) {
                out.push(*child);
                stack.push(child.pid);
            }
        }
    }
    out
}

/// Whether this very process (not a later one with its pid) still exists (zombies count as
/// gone: they run nothing).
pub fn alive(p: Proc) -> bool {
    let zombie = std::fs::read_to_string(format!("/proc/{}/stat", p.pid))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 2..].starts_with('Z')))
        .unwrap_or(false);
    !zombie && stat(p.pid).is_some_and(|(_, start)| start == p.start_time)
}

/// Pids of live processes whose real uid is `uid`.
pub fn processes_with_uid(uid: u32) -> Vec<u32> {
    all_pids()
        .into_iter()
        .filter(|pid| {
            let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
                return false;
            };
            let is_zombie = status
                .lines()
                .any(|l| l.starts_with("State:") && l.contains('Z'));
            let real_uid = status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u32>().ok());
            !is_zombie && real_uid == Some(uid)
        })
        .collect()
}

/// Polls `cond` every 100 ms until it holds or `timeout` passes; returns whether it held.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ---------------------------------------------------------------------------------------------
// One server's sandboxes, as the host sees them.

/// What one server owns on the host, derived from its data dir the way the runtime derives it
/// (`util::short_hash` and `Slots::new` in sandlot-runtime): its cgroups, `sandlot/<instance>`
/// in each controller, and its block of 65536 host uids (sandboxes' and zygotes').
pub struct HostView {
    pub cgroup_rel: PathBuf,
    /// The uids of the server's sandboxes and zygotes are `(uid_base, uid_base + 65535)`.
    pub uid_base: u32,
}

impl HostView {
    pub fn of(server: &TestServer) -> HostView {
        let data_dir = std::fs::canonicalize(server.data_dir()).unwrap();
        let mut h: u64 = 0xcbf29ce484222325;
        for b in data_dir.to_string_lossy().as_bytes() {
            h ^= *b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
        let instance = format!("{h:016x}")[..12].to_string();
        let slot_hash = instance
            .bytes()
            .fold(0u32, |a, b| a.wrapping_mul(31).wrapping_add(b as u32));
        HostView {
            cgroup_rel: Path::new("sandlot").join(&instance),
            uid_base: 0x4000_0000 + (slot_hash % 16000) * 65536,
        }
    }

    pub fn in_block(&self, uid: u32) -> bool {
        uid > self.uid_base && uid < self.uid_base + 65535
    }

    /// The server's own cgroup directory in every mounted hierarchy (v1 controllers, named
    /// hierarchies, the unified one), each once.
    fn server_cgroup_dirs(&self) -> Vec<PathBuf> {
        let root = Path::new("/sys/fs/cgroup");
        let mut hierarchies: Vec<PathBuf> = std::fs::read_dir(root)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        hierarchies.push(root.to_path_buf());
        let mut seen = HashSet::new();
        hierarchies
            .into_iter()
            .map(|h| h.join(&self.cgroup_rel))
            .filter(|d| d.is_dir())
            .filter(|d| seen.insert(std::fs::canonicalize(d).unwrap_or_else(|_| d.clone())))
            .collect()
    }

    /// Every cgroup directory of sandbox `id`, in any hierarchy: none once it is deleted.
    pub fn cgroup_dirs(&self, id: &str) -> Vec<PathBuf> {
        self.server_cgroup_dirs()
            .into_iter()
            .map(|d| d.join(id))
            .filter(|d| d.exists())
            .collect()
    }

    /// The sandbox cgroups (`sb_*`) of this server, as `<hierarchy>:<id>`.
    pub fn sandbox_cgroups(&self) -> Vec<String> {
        let mut out = Vec::new();
        for dir in self.server_cgroup_dirs() {
            let hierarchy = dir
                .strip_prefix("/sys/fs/cgroup")
                .ok()
                .and_then(|p| p.components().next())
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .unwrap_or_default();
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with("sb_") && e.path().is_dir() {
                    out.push(format!("{hierarchy}:{name}"));
                }
            }
        }
        out.sort();
        out
    }

    /// Every host process running as one of the server's uids (zombies included) except its
    /// zygotes, with where it is.
    pub fn sandbox_processes(&self) -> Vec<HostProc> {
        all_pids()
            .into_iter()
            .filter_map(HostProc::read)
            .filter(|p| self.in_block(p.uid) && !p.memory_cgroup.contains("/zygote-"))
            .collect()
    }
}

/// A host process as `/proc` shows it.
#[derive(Debug, Clone)]
pub struct HostProc {
    pub pid: u32,
    pub ppid: u32,
    /// Real uid.
    pub uid: u32,
    /// The state letter of `/proc/<pid>/status` (`R`, `S`, `D`, `T`, `Z`, ...).
    pub state: char,
    pub zombie: bool,
    /// Its cgroup in the memory controller (the unified hierarchy's when there is none).
    pub memory_cgroup: String,
    pub pids_cgroup: String,
    pub comm: String,
}

impl HostProc {
    pub fn read(pid: u32) -> Option<HostProc> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let field = |k: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(k))
                .map(|v| v.trim().to_string())
        };
        let uid = field("Uid:")?.split_whitespace().next()?.parse().ok()?;
        let ppid = field("PPid:")?.parse().ok()?;
        let state = field("State:")?.chars().next()?;
        let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        let cg = |ctrl: &str| {
            let v1 = cgroups.lines().find_map(|l| {
                let mut parts = l.splitn(3, ':');
                let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
                ctrls
                    .split(',')
                    .any(|c| c == ctrl)
                    .then(|| path.to_string())
            });
            v1.or_else(|| {
                cgroups
                    .lines()
                    .find_map(|l| l.strip_prefix("0::").map(str::to_string))
            })
            .unwrap_or_default()
        };
        Some(HostProc {
            pid,
            ppid,
            uid,
            state,
            zombie: state == 'Z',
            memory_cgroup: cg("memory"),
            pids_cgroup: cg("pids"),
            comm: field("Name:").unwrap_or_default(),
        })
    }
}

/// Two file rules of the tests' own (no writes to `secret*`, no reads of `private*` through the
/// file APIs), on top of the shipped policy set.
const FILE_RULES: &str = r#"
@id("no-secret-writes")
@reason("files named secret* are not written through the file API")
forbid (principal, action == Sandlot::Action::"write_file", resource)
when { context.path like "/workspace/secret*" };

@id("no-private-reads")
@reason("files named private* are not read through the file API")
forbid (principal, action == Sandlot::Action::"read_file", resource)
when { context.path like "/workspace/private*" };
"#;

/// The shipped policy set plus [`FILE_RULES`], to `PUT /v1/policies`.
pub fn file_policies() -> String {
    format!("{}\n{FILE_RULES}", sandlot_policy::DEFAULT_POLICIES)
}

/// Requests with one key (the suites that act as several tenants or keys).
pub struct As<'a> {
    pub server: &'a TestServer,
    pub http: Client,
}

impl<'a> As<'a> {
    pub fn key(server: &'a TestServer, key: &str) -> As<'a> {
        As {
            server,
            http: server.client_with_key(Some(key)),
        }
    }

    pub fn send(&self, req: reqwest::blocking::RequestBuilder, what: &str) -> Resp {
        let resp = req
            .send()
            .unwrap_or_else(|e| panic!("{what}: {e}\n{}", self.server.stderr()));
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Resp {
            status,
            headers,
            body,
            text,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.url())
    }

    pub fn get(&self, path: &str) -> Resp {
        self.send(self.http.get(self.url(path)), path)
    }

    pub fn post(&self, path: &str, body: &Value) -> Resp {
        self.send(self.http.post(self.url(path)).json(body), path)
    }

    pub fn put(&self, path: &str, body: &Value) -> Resp {
        self.send(self.http.put(self.url(path)).json(body), path)
    }

    pub fn put_raw(&self, path: &str, content_type: &str, body: impl Into<Vec<u8>>) -> Resp {
        let body: Vec<u8> = body.into();
        self.send(
            self.http
                .put(self.url(path))
                .header(reqwest::header::CONTENT_TYPE, content_type)
                .body(body),
            path,
        )
    }

    pub fn delete(&self, path: &str) -> Resp {
        self.send(self.http.delete(self.url(path)), path)
    }
}
