//! envd's PTY sessions (`process.Process/Start` with `pty`, pty input, `Update`) against a
//! real `sandlot serve`, and their attack surface: the terminal lives in the sandbox's own
//! devpts instance (no host terminal visible, owned by the sandbox's user, at most 32),
//! terminal input injection (`TIOCSTI`) fails with `EPERM`, input is bounded per message and
//! in flight, sizes are bounded, a sandbox's PTY sessions are counted, and a sandbox whose
//! devpts is exhausted by its own code gets a clear `resource_exhausted`. Also: a command's
//! stream ends with `unavailable` when its sandbox is killed under it, and commands start
//! through the sandbox's launcher while a cell runs, and still run when the sandbox kills it.

use crate::common;
use crate::e2b_rpc::{b64, sandbox, Answer, E2b};

use common::TestServer;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn b64e(data: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in data.chunks(3) {
        let n = c
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | (u32::from(b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The pty bytes of a finished stream, and its end event.
fn pty_output(a: &Answer) -> (String, Value) {
    let (mut out, mut end) = (Vec::new(), Value::Null);
    for (_, m) in a.envelopes() {
        if let Some(s) = m.pointer("/event/data/pty").and_then(Value::as_str) {
            out.extend(b64(s));
        }
        if let Some(e) = m.pointer("/event/end") {
            end = e.clone();
        }
    }
    (String::from_utf8_lossy(&out).into_owned(), end)
}

fn pty_start(sb: &E2b<'_>, args: &[&str], size: Value) -> Answer {
    sb.stream(
        "process.Process/Start",
        json!({
            "process": {"cmd": "/bin/bash", "args": args, "envs": {"TERM": "xterm-256color"}},
            "pty": {"size": size},
        }),
        &[("Connect-Timeout-Ms", "60000")],
    )
}

/// Waits until `n` more commands than `before` are listed; their pids, newest last.
fn listed(sb: &E2b<'_>, before: usize, n: usize) -> Vec<u64> {
    let t = Instant::now();
    loop {
        let procs = sb.processes();
        if procs.len() >= before + n {
            let mut pids: Vec<u64> = procs.iter().filter_map(|p| p["pid"].as_u64()).collect();
            pids.sort();
            return pids;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "never listed");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn input(sb: &E2b<'_>, pid: u64, data: &[u8]) -> Answer {
    sb.unary(
        "process.Process/SendInput",
        json!({"process": {"pid": pid}, "input": {"pty": b64e(data)}}),
    )
}

fn code(a: &Answer) -> String {
    a.json()["code"].as_str().unwrap_or("").to_owned()
}

#[test]
fn pty_sessions_run_in_the_sandboxs_own_devpts_and_are_bounded() {
    let server = TestServer::start();
    let sb = sandbox(&server);

    // A session: its size, its terminal, what the sandbox sees of /dev/pts, input injection.
    let script = "stty size; tty; ls /dev/pts | tr '\\n' ' '; echo; stat -c 'owner %u mode %a' $(tty); \
        python3 -c \"import fcntl, termios, errno\ntry:\n    fcntl.ioctl(0, termios.TIOCSTI, b'x')\n    print('TIOCSTI ok')\nexcept OSError as e:\n    print('TIOCSTI', errno.errorcode[e.errno])\"; \
        grep -c . /proc/self/mountinfo >/dev/null; grep ' /dev/pts ' /proc/self/mountinfo | grep -o 'max=[0-9]*'; exit 7\n";
    let a = std::thread::scope(|s| {
        let h = s.spawn(|| pty_start(&sb, &["-i", "-l"], json!({"cols": 91, "rows": 33})));
        let pid = *listed(&sb, 0, 1).last().unwrap();
        let a = input(&sb, pid, script.as_bytes());
        assert_eq!(a.status, 200, "{:?}", a.json());
        h.join().unwrap()
    });
    assert_eq!(a.stream_error(), None, "{:?}", a.envelopes());
    let (out, end) = pty_output(&a);
    assert_eq!(end["exitCode"], 7, "{out}");
    assert!(out.contains("33 91"), "the Start's size: {out}");
    assert!(
        out.contains("/dev/pts/0"),
        "the first terminal of a fresh instance: {out}"
    );
    // Only the instance's own ptmx and this session's terminal: no host terminal is visible.
    assert!(out.contains("\n0 ptmx \r\n"), "{out}");
    assert!(out.contains("owner 1000 mode 600"), "{out}");
    assert!(
        out.contains("TIOCSTI EPERM"),
        "input injection refused: {out}"
    );
    assert!(out.contains("max=32"), "{out}");

    // Resizes: a session's size changes; absurd sizes, and sizes of what is not a PTY, are
    // refused with their codes.
    let (out, _end) = std::thread::scope(|s| {
        let h = s.spawn(|| pty_start(&sb, &["-i"], json!({"cols": 80, "rows": 24})));
        let pid = *listed(&sb, 0, 1).last().unwrap();
        for bad in [
            json!({"cols": 0, "rows": 24}),
            json!({"cols": 80, "rows": 0}),
            json!({"cols": 100_000, "rows": 24}),
            json!({"cols": 80, "rows": 4_294_967_295u64}),
        ] {
            let a = sb.unary(
                "process.Process/Update",
                json!({"process": {"pid": pid}, "pty": {"size": bad}}),
            );
            assert_eq!(code(&a), "invalid_argument", "{bad}: {:?}", a.json());
        }
        let a = sb.unary(
            "process.Process/Update",
            json!({"process": {"pid": 4_000_000}, "pty": {"size": {"cols": 10, "rows": 10}}}),
        );
        assert_eq!(code(&a), "not_found");
        let a = sb.unary(
            "process.Process/Update",
            json!({"process": {"pid": pid}, "pty": {"size": {"cols": 132, "rows": 50}}}),
        );
        assert_eq!(a.status, 200, "{:?}", a.json());
        // Oversized input is refused whole; stdin input to a PTY is refused.
        let a = input(&sb, pid, &vec![b'a'; (64 << 10) + 1]);
        assert_eq!(code(&a), "invalid_argument", "{:?}", a.json());
        let a = sb.unary(
            "process.Process/SendInput",
            json!({"process": {"pid": pid}, "input": {"stdin": "aGk="}}),
        );
        assert_eq!(code(&a), "failed_precondition", "{:?}", a.json());
        let a = input(&sb, pid, b"stty size; exit\n");
        assert_eq!(a.status, 200, "{:?}", a.json());
        pty_output(&h.join().unwrap())
    });
    assert!(out.contains("50 132"), "{out}");

    // A Start with an absurd size is refused before anything runs.
    let a = pty_start(&sb, &["-i"], json!({"cols": 70_000, "rows": 24}));
    assert_eq!(a.stream_error().as_deref(), Some("invalid_argument"));

    // pty input to a command without a terminal: refused.
    std::thread::scope(|s| {
        let h = s.spawn(|| sb.run("sleep 30", json!({})));
        let pid = *listed(&sb, 0, 1).last().unwrap();
        assert_eq!(code(&input(&sb, pid, b"x")), "failed_precondition");
        let a = sb.unary(
            "process.Process/Update",
            json!({"process": {"pid": pid}, "pty": {"size": {"cols": 10, "rows": 10}}}),
        );
        assert_eq!(code(&a), "failed_precondition");
        sb.unary(
            "process.Process/SendSignal",
            json!({"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"}),
        );
        h.join().unwrap();
    });

    // At most 16 PTY sessions per sandbox: the 17th is resource_exhausted; kills free them.
    let (streams, pids) = std::thread::scope(|s| {
        let hs: Vec<_> = (0..16)
            .map(|_| {
                s.spawn(|| pty_start(&sb, &["-c", "sleep 60"], json!({"cols": 80, "rows": 24})))
            })
            .collect();
        let pids = listed(&sb, 0, 16);
        let a = pty_start(&sb, &["-c", "true"], json!({"cols": 80, "rows": 24}));
        assert_eq!(a.stream_error().as_deref(), Some("resource_exhausted"));
        let t = Instant::now();
        for pid in &pids {
            let a = sb.unary(
                "process.Process/SendSignal",
                json!({"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"}),
            );
            assert_eq!(a.status, 200);
        }
        let streams: Vec<Answer> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(t.elapsed() < Duration::from_secs(20));
        (streams, pids)
    });
    assert_eq!(pids.len(), 16);
    for a in &streams {
        assert_eq!(pty_output(a).1["status"], "signal: killed");
    }

    // The sandbox's own code holding every terminal of its devpts: a clear resource_exhausted.
    let hold = server.execute(
        &sb.id,
        "import os\nheld = []\ntry:\n    while True:\n        held.append(os.openpty())\nexcept OSError as e:\n    print(len(held), e.errno)",
    );
    assert_eq!(hold["stdout"], "32 28\n", "{hold}");
    let a = pty_start(&sb, &["-c", "true"], json!({"cols": 80, "rows": 24}));
    assert_eq!(a.stream_error().as_deref(), Some("resource_exhausted"));
    server.execute(
        &sb.id,
        "for m, s in held:\n    os.close(m); os.close(s)\ndel held",
    );
    let a = pty_start(&sb, &["-c", "echo back"], json!({"cols": 80, "rows": 24}));
    let (out, end) = pty_output(&a);
    assert_eq!(
        (out.as_str(), end["exitCode"].as_i64()),
        ("back\r\n", Some(0))
    );
}

#[test]
fn a_command_stream_ends_unavailable_when_its_sandbox_is_killed() {
    let server = TestServer::start();
    let sb = sandbox(&server);
    let key = std::fs::read_to_string(server.data_dir().join("e2b-api-key")).unwrap();
    let t = std::thread::scope(|s| {
        let h = s.spawn(|| {
            sb.stream(
                "process.Process/Start",
                json!({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "sleep 60"]}}),
                &[],
            )
        });
        listed(&sb, 0, 1);
        let t = Instant::now();
        let resp = server
            .client()
            .delete(format!("{}/sandboxes/{}", server.url(), sb.id))
            .header("X-API-KEY", key.trim())
            .send()
            .unwrap();
        assert_eq!(resp.status().as_u16(), 204);
        let a = h.join().unwrap();
        assert_eq!(
            a.stream_error().as_deref(),
            Some("unavailable"),
            "{:?}",
            a.envelopes()
        );
        let (_, end) = a.envelopes().pop().unwrap();
        let msg = end
            .pointer("/error/message")
            .and_then(Value::as_str)
            .unwrap_or("");
        // Not the proxy's "was not found" (which names no stream): the SDKs probe /health.
        assert!(!msg.contains("was not found"), "{msg}");
        t.elapsed()
    });
    // About a second alone (the kill's teardown, then the stream's end); generous under load.
    assert!(t < Duration::from_secs(15), "ended promptly: {t:?}");
}

#[test]
fn commands_start_beside_a_running_cell_and_survive_their_launcher_being_killed() {
    let server = TestServer::start();
    let sb = sandbox(&server);
    // The first command starts the sandbox's launcher.
    let (out, _, end) = sb.run("echo first", json!({}));
    assert_eq!(
        (out.as_str(), end["exitCode"].as_i64()),
        ("first\n", Some(0))
    );

    // A command while a cell runs: answered at once, before the cell ends.
    std::thread::scope(|s| {
        let cell = s.spawn(|| server.execute_bash(&sb.id, "sleep 3; echo cell"));
        std::thread::sleep(Duration::from_millis(500));
        let t = Instant::now();
        let (out, _, _) = sb.run("echo beside", json!({}));
        assert_eq!(out, "beside\n");
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        assert!(!cell.is_finished(), "the command waited for the cell");
        assert_eq!(cell.join().unwrap()["stdout"], "cell\n");
    });

    // The sandbox kills its launcher: the next command still runs (by an execution, which
    // starts a new launcher), and so do the ones after it.
    let killed = server.execute(
        &sb.id,
        "import os, signal\nn = 0\nfor p in os.listdir('/proc'):\n    try:\n        cmd = open(f'/proc/{p}/cmdline', 'rb').read()\n    except (OSError, ValueError):\n        continue\n    if b'sandlot-launcher' in cmd:\n        os.kill(int(p), signal.SIGKILL); n += 1\nprint(n)",
    );
    assert_eq!(killed["stdout"], "1\n", "{killed}");
    for i in 0..3 {
        let (out, _, end) = sb.run(&format!("echo again{i}"), json!({}));
        assert_eq!(out, format!("again{i}\n"));
        assert_eq!(end["exitCode"], 0);
    }
}
