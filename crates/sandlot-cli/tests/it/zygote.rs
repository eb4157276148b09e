//! The zygote's life: sandboxes outlive it, it comes back when killed (also in the middle of
//! creations), and a burst of creations larger than the queue is refused cleanly.

use crate::common;

use common::{alive, descendants, wait_until, Proc, TestServer};
use serde_json::json;
use std::time::Duration;

/// The server's zygotes: processes running `zygote.py` in the host's pid namespace whose parent
/// is the server, each with its start time, so a later process that reuses the pid is not taken
/// for it. (Sandboxes are forks of a zygote too: each lives in a pid namespace of its own, so its
/// `NSpid` line has two entries, except for a moment while the zygote's fresh child has not
/// unshared yet; that child's parent is the zygote.)
fn zygotes(server: &TestServer) -> Vec<Proc> {
    descendants(server.pid())
        .into_iter()
        .filter(|p| {
            let pid = p.pid;
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let nspids = status
                .lines()
                .find(|l| l.starts_with("NSpid:"))
                .map(|l| l.split_whitespace().count() - 1)
                .unwrap_or(0);
            let ppid = status
                .lines()
                .find(|l| l.starts_with("PPid:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u32>().ok());
            String::from_utf8_lossy(&cmd).contains("zygote.py")
                && nspids == 1
                && ppid == Some(server.pid())
        })
        .collect()
}

/// SIGKILLs a zygote and waits until it is gone, so a test never goes on believing it killed
/// one that still runs.
fn kill9(zygote: Proc) {
    sigkill(zygote);
    wait_gone(zygote);
}

fn sigkill(zygote: Proc) {
    // SAFETY: kill has no memory effects.
    let rc = unsafe { libc::kill(zygote.pid as i32, libc::SIGKILL) };
    assert_eq!(
        rc,
        0,
        "kill {}: {}",
        zygote.pid,
        std::io::Error::last_os_error()
    );
}

fn wait_gone(zygote: Proc) {
    assert!(
        wait_until(Duration::from_secs(30), || !alive(zygote)),
        "zygote {} survived SIGKILL",
        zygote.pid
    );
}

#[test]
fn sandboxes_outlive_a_killed_zygote_and_it_restarts() {
    let server = TestServer::start();
    let before = server.create_sandbox();
    let r = server.execute(&before, "x = 41");
    assert_eq!(r["end_state"], "ok", "{r}");
    let z = zygotes(&server);
    assert_eq!(z.len(), 1, "one zygote for the default template: {z:?}");
    kill9(z[0]);

    // The sandbox forked before does not depend on it.
    let r = server.execute(&before, "x + 1");
    assert_eq!(r["result"]["text/plain"], "42", "{r}");

    // A new zygote comes up (by itself, or on the next creation) and creations work.
    for _ in 0..5 {
        let id = server.create_sandbox();
        let r = server.execute(&id, "import numpy; int(numpy.arange(4).sum())");
        assert_eq!(r["result"]["text/plain"], "6", "{r}");
    }
    assert!(
        wait_until(Duration::from_secs(30), || {
            let now = zygotes(&server);
            now.len() == 1 && now[0] != z[0]
        }),
        "a new zygote replaced the killed one"
    );
}

#[test]
fn zygote_killed_during_a_burst_of_creations() {
    let server = TestServer::start();
    // The zygote is up before the burst: killing it below is what the test is about, so an
    // empty list there must fail rather than pass as "survived a kill" that never happened.
    assert!(
        wait_until(Duration::from_secs(30), || !zygotes(&server).is_empty()),
        "no zygote before the burst"
    );
    let url = server.url().to_string();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let url = url.clone();
            let client = server.client().clone();
            std::thread::spawn(move || {
                let resp = client
                    .post(format!("{url}/v1/sandboxes"))
                    .json(&json!({}))
                    .timeout(Duration::from_secs(120))
                    .send()
                    .expect("request");
                (resp.status().as_u16(), resp.text().unwrap_or_default())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(20));
    let killed = zygotes(&server);
    assert!(!killed.is_empty(), "no zygote to kill during the burst");
    for z in &killed {
        sigkill(*z);
    }
    // The kill landed while creations were still under way (else it tested a plain restart).
    let in_flight = threads.iter().filter(|t| !t.is_finished()).count();
    assert!(in_flight > 0, "the whole burst was over before the kill");
    for z in &killed {
        wait_gone(*z);
    }
    for t in threads {
        let (status, body) = t.join().expect("thread");
        // Every creation succeeds: one whose fork request met the dead zygote asks the
        // restarted one, and one whose child the restart killed mid-handshake boots again.
        assert_eq!(status, 201, "{body}");
    }
    // Afterwards the server is healthy and creates sandboxes again.
    let id = server.create_sandbox();
    let r = server.execute(&id, "1 + 1");
    assert_eq!(r["result"]["text/plain"], "2", "{r}");
}

/// What a template's setup sees of its surroundings: each probe stores the errno name it got (or
/// what it reached), in a dict that every sandbox of the template then prints.
const PROBE_SETUP: &str = r#"
import ctypes, errno, json, os, socket
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

def _name(e):
    return errno.errorcode.get(e, str(e))

def _sys(nr, *args):
    ctypes.set_errno(0)
    r = _libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return "ok" if r >= 0 else _name(ctypes.get_errno())

def _try(fn):
    try:
        fn()
        return "ok"
    except OSError as e:
        return _name(e.errno)

def _read(path):
    with open(path, "rb") as f:
        return f.read()

def _connect():
    socket.create_connection(("127.0.0.1", API_PORT), timeout=5).close()

def _write_data_dir():
    with open(os.path.join(DATA_DIR, "pwned-by-setup"), "w") as f:
        f.write("x")

def _in_child(fn):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(w, fn().encode())
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    out = os.read(r, 100).decode()
    os.close(r)
    return out

_NR = {"unshare": 272, "io_uring_setup": 425, "bpf": 321, "keyctl": 250, "mount": 165}
_params = ctypes.create_string_buffer(256)
_tmp, _tmpfs = ctypes.create_string_buffer(b"/tmp"), ctypes.create_string_buffer(b"tmpfs")
probe = {
    "api_port": _try(_connect),
    "data_dir_write": _try(_write_data_dir),
    "api_key": _try(lambda: _read(os.path.join(DATA_DIR, "api-key"))),
    "pid1_cmdline": _try(lambda: _read("/proc/1/cmdline")),
    "pid1_environ": _try(lambda: _read("/proc/1/environ")),
    "userns": _sys(_NR["unshare"], 0x10000000),
    "userns_in_child": _in_child(lambda: _sys(_NR["unshare"], 0x10000000)),
    "netns": _sys(_NR["unshare"], 0x40000000),
    "io_uring": _sys(_NR["io_uring_setup"], 1, ctypes.addressof(_params)),
    "bpf": _sys(_NR["bpf"], 0, ctypes.addressof(_params), 64),
    "keyctl": _sys(_NR["keyctl"], 0, -3, 0),
    "mount": _sys(_NR["mount"], ctypes.addressof(_tmpfs), ctypes.addressof(_tmp), ctypes.addressof(_tmpfs), 0, 0),
    "raw_socket": _try(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close()),
    "packet_socket": _try(lambda: socket.socket(17, socket.SOCK_RAW, 0).close()),
    "hostname": socket.gethostname(),
    "interfaces": sorted(l.split(":")[0].strip() for l in open("/proc/self/net/dev").readlines()[2:]),
}
"#;

/// A template's setup is tenant code: it runs with a sandbox's layers. It cannot reach the
/// server's port or the host's network, read the data dir or the host's processes, make a user
/// namespace (itself or in a child), or reach the kernel surfaces the seccomp allowlist removes;
/// each probe asserts the exact errno, and the host shows none of the effects.
#[cfg(target_arch = "x86_64")]
#[test]
fn template_setup_runs_confined() {
    let server = TestServer::start();
    let port = server
        .url()
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse::<u16>().ok())
        .expect("port in the server's url");
    let setup = format!(
        "API_PORT = {port}\nDATA_DIR = {:?}\n{PROBE_SETUP}",
        server.data_dir().display().to_string()
    );
    let spec = json!({"name": "prober", "setup": setup});
    server.post("/v1/templates", &spec).expect(202);
    assert!(
        wait_until(Duration::from_secs(180), || {
            server.get("/v1/templates/prober").expect(200)["status"] != "building"
        }),
        "template still building"
    );
    let t = server.get("/v1/templates/prober").expect(200).clone();
    assert_eq!(t["status"], "ready", "{t}\n{}", server.stderr());
    let sb = server.create_sandbox_with(&json!({"template": "prober"}));
    let id = sb["id"].as_str().unwrap();
    let r = server.execute(id, "import json; print(json.dumps(probe))");
    assert_eq!(r["end_state"], "ok", "{r}");
    let probe: serde_json::Value =
        serde_json::from_str(r["stdout"].as_str().unwrap()).expect("the probe as JSON");
    let expect = json!({
        "api_port": "ECONNREFUSED",   // its own network namespace: nothing listens there
        "data_dir_write": "ENOENT",   // the data dir is not in its filesystem view
        "api_key": "ENOENT",
        "pid1_cmdline": "ENOENT",     // /proc shows the zygote's own processes only
        "pid1_environ": "ENOENT",
        "userns": "EPERM",            // the server's unshare supervisor refused it
        "userns_in_child": "EPERM",
        "netns": "EPERM",
        "io_uring": "EPERM",          // the seccomp allowlist
        "bpf": "EPERM",
        "keyctl": "EPERM",
        "mount": "EPERM",             // allowed by the filter for its children, but no capability
        "raw_socket": "EPERM",        // no CAP_NET_RAW
        "packet_socket": "EAFNOSUPPORT",
        "hostname": "zygote",
        "interfaces": ["lo"],
    });
    assert_eq!(probe, expect, "what the setup saw");
    assert!(!server.data_dir().join("pwned-by-setup").exists());
    // Sandboxes of the template still work: their children's namespaces were let through.
    let r = server.execute(id, "import os; os.getpid()");
    assert_eq!(r["result"]["text/plain"], "2", "{r}");
}
