//! Shared machinery of the attack suite (`tests/it/attacks.rs`): a Python prelude every snippet
//! starts with, tables of cases run against a live sandbox, a failure collector that runs every
//! case and reports all failures at once, a neighbour sandbox and a host canary that must come
//! out of each attack untouched, and the host-side view of a sandbox's processes.
#![allow(dead_code)]

use crate::common::{alive, descendants, Proc, TestServer};
use serde_json::{json, Value};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Defined at the start of every Python snippet:
/// - `sc(nr, *args)`: a raw x86_64 syscall through libc's `syscall(2)`; `"OK"` or the errno
///   name (`"EPERM"`). Ints are passed as `long`, bytes as `char *`, ctypes values as they are.
/// - `op(fn, *args)`: calls `fn`; `"OK"` or the errno name of the `OSError` it raised.
/// - `rd(path, n=64)`: the first `n` bytes of a file as hex (`""` when it reads empty), or the
///   errno name of the `OSError` opening or reading it raised.
/// - `report(**kw)`: prints the one `ATTACK {json}` line the Rust side parses.
pub const PRELUDE: &str = r#"
import ctypes as _ct, errno as _errno, json as _json, os, socket, struct, subprocess, sys, signal, time
_libc = _ct.CDLL(None, use_errno=True)
_libc.syscall.restype = _ct.c_long
def en(e):
    return _errno.errorcode.get(e, str(e)) if e else "OK"
def _arg(a):
    if a is None:
        return _ct.c_void_p(0)
    if isinstance(a, bytes):
        return _ct.c_char_p(a)
    if isinstance(a, int):
        return _ct.c_long(a)
    return a
def sc(nr, *args):
    _ct.set_errno(0)
    r = _libc.syscall(_ct.c_long(nr), *[_arg(a) for a in args])
    return "OK" if r >= 0 else en(_ct.get_errno())
def op(fn, *a, **k):
    try:
        fn(*a, **k)
        return "OK"
    except OSError as ex:
        return en(ex.errno)
def rd(p, n=64):
    try:
        with open(p, 'rb') as f:
            return f.read(n).hex()
    except OSError as ex:
        return en(ex.errno)
def report(**kw):
    print("ATTACK " + _json.dumps(kw, sort_keys=True), flush=True)
"#;

#[derive(Clone, Copy, Debug)]
pub enum Lang {
    Py,
    Bash,
}

/// The key of an expectation made by [`any_of`].
const ANY_OF: &str = "$any_of";

/// An expected value that may be any of `values`: for outcomes that differ between kernels (a
/// file one kernel lacks, ENOENT, is refused with EACCES or EROFS by another). Still exact: an
/// answer outside the list, `"OK"` above all, fails.
pub fn any_of(values: &[&str]) -> Value {
    json!({ ANY_OF: values })
}

/// Whether `got` is what `want` asks for: equal, with [`any_of`] expectations matching any of
/// their values, at any depth.
pub fn matches(want: &Value, got: &Value) -> bool {
    match want {
        Value::Object(w) if w.len() == 1 && w.contains_key(ANY_OF) => w[ANY_OF]
            .as_array()
            .is_some_and(|options| options.contains(got)),
        Value::Object(w) => got.as_object().is_some_and(|g| {
            w.len() == g.len()
                && w.iter()
                    .all(|(k, wv)| g.get(k).is_some_and(|gv| matches(wv, gv)))
        }),
        Value::Array(w) => got
            .as_array()
            .is_some_and(|g| w.len() == g.len() && w.iter().zip(g).all(|(wv, gv)| matches(wv, gv))),
        _ => want == got,
    }
}

/// What reading a kernel-information file under `/proc` that the sandbox's init masks gives
/// inside (through `rd`): empty where this kernel has the file (masked with `/dev/null`),
/// `ENOENT` where it does not (nothing to mask). Exact for the kernel the test runs on.
pub fn masked_proc(name: &str) -> Value {
    if std::path::Path::new("/proc").join(name).exists() {
        json!("")
    } else {
        json!("ENOENT")
    }
}

/// One attack: a snippet and the exact `ATTACK` object it must print (see [`any_of`]).
pub struct Case {
    pub name: String,
    pub lang: Lang,
    pub code: String,
    pub expect: Value,
}

/// A Python case; the prelude is prepended.
pub fn py(name: &str, code: &str, expect: Value) -> Case {
    Case {
        name: name.into(),
        lang: Lang::Py,
        code: format!("{PRELUDE}\n{code}"),
        expect,
    }
}

/// A Bash case; it must print `ATTACK {json}` itself.
pub fn bash(name: &str, code: &str, expect: Value) -> Case {
    Case {
        name: name.into(),
        lang: Lang::Bash,
        code: code.into(),
        expect,
    }
}

/// The last `ATTACK {...}` line of an execution's stdout.
pub fn attack_line(result: &Value) -> Option<Value> {
    result["stdout"]
        .as_str()?
        .lines()
        .rev()
        .find_map(|l| l.trim_end().strip_prefix("ATTACK "))
        .and_then(|j| serde_json::from_str(j).ok())
}

/// A short description of an execution result for failure messages.
pub fn brief(r: &Value) -> String {
    let cut = |s: &str| -> String {
        let s = s.trim();
        if s.len() > 600 {
            let mut i = 600;
            while !s.is_char_boundary(i) {
                i -= 1;
            }
            format!("{}…", &s[..i])
        } else {
            s.to_string()
        }
    };
    format!(
        "end_state={} alive={} exit_code={} stdout={:?} stderr={:?} error={}",
        r["end_state"],
        r["sandbox_alive"],
        r["exit_code"],
        cut(r["stdout"].as_str().unwrap_or("")),
        cut(r["stderr"].as_str().unwrap_or("")),
        r["error"]
    )
}

/// Runs code in a sandbox; Err when the HTTP status is not 200.
pub fn exec(
    server: &TestServer,
    id: &str,
    lang: Lang,
    code: &str,
    timeout: f64,
) -> Result<Value, String> {
    let language = match lang {
        Lang::Py => "python",
        Lang::Bash => "bash",
    };
    let resp = server.execute_with(
        id,
        &json!({ "code": code, "language": language, "timeout": timeout }),
    );
    if resp.status != 200 {
        return Err(format!(
            "execute answered HTTP {}: {}",
            resp.status, resp.text
        ));
    }
    Ok(resp.body)
}

/// [`exec`], timed: the result and how long the request took.
pub fn exec_timed(
    server: &TestServer,
    id: &str,
    lang: Lang,
    code: &str,
    timeout: f64,
) -> Result<(Value, Duration), String> {
    let t0 = Instant::now();
    let r = exec(server, id, lang, code, timeout)?;
    Ok((r, t0.elapsed()))
}

/// What a restart in place loses, every time (`restarted.lost`).
pub const RESTART_LOST: [&str; 2] = ["python state", "bash session"];

/// The execution ended in `end_state` and its sandbox's processes were restarted in place for
/// `reason` (the sandbox lives on under the same id; `sandbox_alive` speaks of the processes
/// the execution ran in, which are gone).
pub fn expect_restarted(r: &Value, end_state: &str, reason: &str) -> Result<(), String> {
    let got = (
        r["end_state"].as_str(),
        r["sandbox_alive"].as_bool(),
        r["restarted"].clone(),
    );
    let want = (
        Some(end_state),
        Some(false),
        json!({ "reason": reason, "lost": RESTART_LOST }),
    );
    if got == want {
        Ok(())
    } else {
        Err(format!(
            "expected end_state {end_state}, sandbox_alive false, restarted for {reason:?}; got {}; restarted {}",
            brief(r),
            r["restarted"]
        ))
    }
}

/// A Bash cell that ignored the interrupt at its timeout: only its Bash session was ended
/// (0.5 s after the interrupt), not the sandbox's processes.
pub fn expect_bash_session_ended(r: &Value) -> Result<(), String> {
    let stderr = r["stderr"].as_str().unwrap_or("");
    ensure(
        r["end_state"] == "timeout"
            && r["sandbox_alive"] == true
            && r["restarted"].is_null()
            && r["exit_code"] == 137
            && r["error"]["name"] == "TimeoutError"
            && stderr.contains("did not stop within 0.5 s of the interrupt"),
        || {
            format!(
                "expected end_state timeout, sandbox alive, not restarted, exit code 137 (the \
                 session SIGKILLed) and \"did not stop within 0.5 s of the interrupt\"; got {}; restarted {}",
                brief(r),
                r["restarted"]
            )
        },
    )
}

/// Runs one case: the snippet must end `ok` and print exactly the expected object.
pub fn run_case(server: &TestServer, id: &str, case: &Case) -> Result<Value, String> {
    let r = exec(server, id, case.lang, &case.code, 60.0)?;
    let Some(got) = attack_line(&r) else {
        return Err(format!("no ATTACK line; {}", brief(&r)));
    };
    if !matches(&case.expect, &got) {
        return Err(format!(
            "expected {}\n      got      {}\n      ({})",
            case.expect,
            got,
            brief(&r)
        ));
    }
    if r["end_state"] != "ok" {
        return Err(format!("the snippet did not end ok: {}", brief(&r)));
    }
    Ok(r)
}

/// Collects the outcome of every case of a group, so one failure does not hide the others.
pub struct Report {
    group: &'static str,
    total: usize,
    failures: Vec<String>,
}

impl Report {
    pub fn new(group: &'static str) -> Self {
        Report {
            group,
            total: 0,
            failures: Vec::new(),
        }
    }

    /// A custom check; a panic inside counts as a failure of this case only.
    pub fn check(&mut self, name: &str, f: impl FnOnce() -> Result<(), String>) {
        self.total += 1;
        let t0 = Instant::now();
        let outcome = match catch_unwind(AssertUnwindSafe(f)) {
            Ok(r) => r,
            Err(p) => Err(format!(
                "panicked: {}",
                p.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            )),
        };
        match outcome {
            Ok(()) => eprintln!(
                "[{}] {name:<44} ok ({} ms)",
                self.group,
                t0.elapsed().as_millis()
            ),
            Err(e) => {
                eprintln!("[{}] {name:<44} FAILED: {e}", self.group);
                self.failures.push(format!("{name}: {e}"));
            }
        }
    }

    /// Runs a table of cases in one sandbox.
    pub fn table(&mut self, server: &TestServer, id: &str, cases: &[Case]) {
        for c in cases {
            self.check(&c.name, || run_case(server, id, c).map(|_| ()));
        }
    }

    /// Panics listing every failed case.
    #[track_caller]
    pub fn finish(self) {
        eprintln!(
            "[{}] {} cases, {} failed",
            self.group,
            self.total,
            self.failures.len()
        );
        assert!(
            self.failures.is_empty(),
            "{}: {} of {} attack cases failed:\n  {}",
            self.group,
            self.failures.len(),
            self.total,
            self.failures.join("\n  ")
        );
    }
}

/// `Ok` when equal, else a message naming what differed.
pub fn expect_eq<T: PartialEq + std::fmt::Debug>(
    what: &str,
    got: T,
    want: T,
) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: expected {want:?}, got {got:?}"))
    }
}

/// `Ok` when `cond` holds, else the message.
pub fn ensure(cond: bool, msg: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(msg())
    }
}

/// A unique token (secrets and markers the attacks look for).
pub fn token() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{:x}{:x}{:x}",
        nanos,
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// Slack allowed past a deadline the system enforces (an execution timeout, a kill grace
/// period) before a test calls it not enforced. Generous on purpose: a busy two-core machine
/// delays everything, and how tightly deadlines are kept is for their own test and the
/// benchmark, not for the attack suite.
pub const SLACK: Duration = Duration::from_secs(10);

/// How long `GET /v1/health` may take while a neighbour attacks: far above any normal answer
/// (milliseconds), far below the client's request timeout, so a wedged server fails here.
pub const HEALTH_DEADLINE: Duration = Duration::from_secs(30);

/// `GET /v1/health` answers `ok` within [`HEALTH_DEADLINE`].
pub fn health(server: &TestServer) -> Result<(), String> {
    let t0 = Instant::now();
    let r = server.get("/v1/health");
    let took = t0.elapsed();
    ensure(r.status == 200 && r.body["status"] == "ok", || {
        format!("health: {} {}", r.status, r.text)
    })?;
    ensure(took < HEALTH_DEADLINE, || format!("health took {took:?}"))
}

/// Waits until the server's warm pool is full (its default size, 2) besides `others` sandboxes
/// already handed out, each booted (its init and driver running), so that the next creation
/// takes a pooled sandbox.
pub fn wait_for_pool(server: &TestServer, others: usize) {
    const POOL: usize = 2;
    let host = crate::common::HostView::of(server);
    let prefix = format!("/{}/", host.cgroup_rel.display());
    let booted = || {
        let mut per_sandbox: std::collections::BTreeMap<String, usize> = Default::default();
        for p in host.sandbox_processes() {
            if let Some(id) = p
                .memory_cgroup
                .strip_prefix(&prefix)
                .and_then(|r| r.split('/').next())
            {
                *per_sandbox.entry(id.to_string()).or_default() += 1;
            }
        }
        per_sandbox.len() == others + POOL && per_sandbox.values().all(|n| *n >= 2)
    };
    assert!(
        crate::common::wait_until(Duration::from_secs(60), booted),
        "the warm pool never filled: {:?}",
        host.sandbox_cgroups()
    );
    // Booted is not yet handed to the pool (it is warmed first).
    std::thread::sleep(Duration::from_millis(500));
}

/// A sandbox living next to the attacked one: a canary file in its workspace, a variable in its
/// interpreter. Both must survive every attack.
pub struct Neighbour {
    pub id: String,
    canary: String,
}

impl Neighbour {
    pub fn new(server: &TestServer) -> Neighbour {
        let id = server.create_sandbox();
        let canary = format!("neighbour canary {}", token());
        let put = server.put_bytes(
            &format!("/v1/sandboxes/{id}/files/canary.txt"),
            canary.clone(),
        );
        assert!(
            put.status / 100 == 2,
            "upload of the neighbour's canary: {} {}",
            put.status,
            put.text
        );
        let r = server.execute(&id, &format!("neighbour_state = {canary:?}"));
        assert_eq!(r["end_state"], "ok", "{r}");
        Neighbour { id, canary }
    }

    /// The neighbour still answers, its interpreter state and its workspace file are intact.
    pub fn intact(&self, server: &TestServer) -> Result<(), String> {
        let resp = server.execute_with(
            &self.id,
            &json!({ "code": "neighbour_state + '|' + open('/workspace/canary.txt').read()", "timeout": 30 }),
        );
        ensure(resp.status == 200, || {
            format!("neighbour execute: {} {}", resp.status, resp.text)
        })?;
        let want = format!("'{}|{}'", self.canary, self.canary);
        expect_eq(
            "neighbour result",
            resp.body["result"]["text/plain"].as_str().unwrap_or(""),
            want.as_str(),
        )
        .map_err(|e| format!("{e} ({})", brief(&resp.body)))?;
        let (status, _, bytes) =
            server.get_bytes(&format!("/v1/sandboxes/{}/files/canary.txt", self.id));
        expect_eq("neighbour canary download status", status, 200)?;
        expect_eq(
            "neighbour canary",
            String::from_utf8_lossy(&bytes).to_string(),
            self.canary.clone(),
        )
    }
}

/// A file on the host, outside anything a sandbox sees; it must stay unchanged.
pub struct HostCanary {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
    content: String,
}

impl HostCanary {
    pub fn new() -> HostCanary {
        let dir = tempfile::Builder::new()
            .prefix("sandlot-attack-canary-")
            .tempdir()
            .unwrap();
        let path = dir.path().join("canary.txt");
        let content = format!("host canary {}", token());
        std::fs::write(&path, &content).unwrap();
        HostCanary {
            _dir: dir,
            path,
            content,
        }
    }

    pub fn intact(&self) -> Result<(), String> {
        let now = std::fs::read_to_string(&self.path).map_err(|e| format!("host canary: {e}"))?;
        expect_eq("host canary", now, self.content.clone())?;
        let n = std::fs::read_dir(self.path.parent().unwrap())
            .unwrap()
            .count();
        expect_eq("files next to the host canary", n, 1)
    }
}

/// Real uid of a host process.
pub fn real_uid(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A process with its start time, to follow it across pid reuse.
pub fn proc_of(pid: u32) -> Option<Proc> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let start_time = rest.split_whitespace().nth(19)?.parse().ok()?;
    Some(Proc { pid, start_time })
}

/// Every live (non-zombie) host process whose real uid is `uid`.
pub fn procs_with_uid(uid: u32) -> Vec<Proc> {
    crate::common::processes_with_uid(uid)
        .into_iter()
        .filter_map(proc_of)
        .filter(|p| alive(*p))
        .collect()
}

/// The host uid a sandbox runs as: the sandbox writes a marker into its workspace, the host
/// finds the server descendant whose root holds that marker.
pub fn sandbox_host_uid(server: &TestServer, id: &str) -> u32 {
    let tok = token();
    let r = server.execute(
        id,
        &format!("open('/workspace/.uid-probe', 'w').write({tok:?})"),
    );
    assert_eq!(r["end_state"], "ok", "{}", brief(&r));
    for p in descendants(server.pid()) {
        let marker = std::fs::read_to_string(format!("/proc/{}/root/workspace/.uid-probe", p.pid));
        if marker.ok().as_deref() == Some(tok.as_str()) {
            let uid = real_uid(p.pid).expect("uid of a sandbox process");
            assert!(uid != 0, "sandbox process {} runs as host root", p.pid);
            return uid;
        }
    }
    panic!("no server descendant has the marker of sandbox {id}");
}

/// The environment of a host process.
pub fn environ_of(pid: u32) -> Vec<(String, String)> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    raw.split(|b| *b == 0)
        .filter(|kv| !kv.is_empty())
        .filter_map(|kv| {
            let s = String::from_utf8_lossy(kv);
            let (k, v) = s.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect()
}

/// The matcher every case goes through: a lax one would let every case pass.
#[test]
fn expectations_match_exactly() {
    let want = json!({"a": "EACCES", "b": any_of(&["ENOENT", "EROFS"]), "c": [1, any_of(&["x"])]});
    assert!(matches(
        &want,
        &json!({"a": "EACCES", "b": "ENOENT", "c": [1, "x"]})
    ));
    assert!(matches(
        &want,
        &json!({"a": "EACCES", "b": "EROFS", "c": [1, "x"]})
    ));
    for wrong in [
        json!({"a": "EACCES", "b": "OK", "c": [1, "x"]}),
        json!({"a": "EPERM", "b": "ENOENT", "c": [1, "x"]}),
        json!({"a": "EACCES", "b": "ENOENT", "c": [1, "y"]}),
        json!({"a": "EACCES", "b": "ENOENT", "c": [1]}),
        json!({"a": "EACCES", "b": "ENOENT"}),
        json!({"a": "EACCES", "b": "ENOENT", "c": [1, "x"], "d": 0}),
        json!({"a": "EACCES", "b": ["ENOENT", "EROFS"], "c": [1, "x"]}),
    ] {
        assert!(!matches(&want, &wrong), "{wrong} matched {want}");
    }
}
