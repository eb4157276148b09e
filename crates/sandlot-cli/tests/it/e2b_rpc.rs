//! envd's Connect RPC services (`process.Process`, `filesystem.Filesystem`) against a real
//! `sandlot serve` and real sandboxes: the protocol's framing and errors, commands (output,
//! exit codes, cwd/env, no leak into the Bash session, kill, deadlines, commands side by side,
//! stdin, a sandbox attacking its commands' pipes), the filesystem calls,
//! and attacks: malformed and oversized envelopes, wrong or missing tokens, unknown
//! sandboxes, hostile paths (`..`, absolute paths outside the home, symlinks out of the
//! workspace).

use crate::common;

use common::TestServer;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

pub(crate) const ENVD: &str = "49983";

pub(crate) struct E2b<'a> {
    pub(crate) server: &'a TestServer,
    pub(crate) id: String,
    pub(crate) token: String,
}

/// A sandbox created through E2B's control plane (so the test holds its envdAccessToken).
pub(crate) fn sandbox(server: &TestServer) -> E2b<'_> {
    let key = std::fs::read_to_string(server.data_dir().join("e2b-api-key"))
        .expect("the server's E2B key file")
        .trim()
        .to_owned();
    let resp = server
        .client()
        .post(format!("{}/sandboxes", server.url()))
        .header("X-API-KEY", &key)
        .json(&json!({"templateID": "base", "timeout": 600}))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201, "create");
    let body: Value = resp.json().unwrap();
    E2b {
        server,
        id: body["sandboxID"].as_str().unwrap().to_owned(),
        token: body["envdAccessToken"].as_str().unwrap().to_owned(),
    }
}

/// What came back: the status, the content type, the body.
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) ctype: String,
    pub(crate) body: Vec<u8>,
}

impl Answer {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The envelopes of a stream: (flags, JSON).
    pub(crate) fn envelopes(&self) -> Vec<(u8, Value)> {
        let mut out = Vec::new();
        let mut b = &self.body[..];
        while !b.is_empty() {
            assert!(b.len() >= 5, "truncated envelope header: {b:?}");
            let len = u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
            let v: Value = serde_json::from_slice(&b[5..5 + len]).unwrap();
            out.push((b[0], v));
            b = &b[5 + len..];
        }
        out
    }

    /// The end-of-stream's error code, if any (and checks the stream ends with one).
    pub(crate) fn stream_error(&self) -> Option<String> {
        let env = self.envelopes();
        let (flags, end) = env.last().expect("an end-of-stream envelope");
        assert_eq!(*flags, 2, "last envelope is the end of stream: {env:?}");
        end.pointer("/error/code")
            .and_then(Value::as_str)
            .map(str::to_owned)
    }
}

/// A Connect envelope: its flags, then one message (also `protocols.rs`'s).
pub(crate) fn envelope(flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut b = vec![flags];
    b.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    b.extend_from_slice(payload);
    b
}

impl E2b<'_> {
    pub(crate) fn raw(
        &self,
        method: &str,
        ctype: &str,
        body: Vec<u8>,
        headers: &[(&str, &str)],
    ) -> Answer {
        let mut req = self
            .server
            .client()
            .post(format!("{}/{method}", self.server.url()))
            .header("Content-Type", ctype)
            .header("E2b-Sandbox-Port", ENVD)
            .body(body);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.send().unwrap();
        let status = resp.status().as_u16();
        let ctype = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        Answer {
            status,
            ctype,
            body: resp.bytes().unwrap().to_vec(),
        }
    }

    pub(crate) fn auth(&self) -> [(&str, &str); 2] {
        [
            ("E2b-Sandbox-Id", &self.id),
            ("X-Access-Token", &self.token),
        ]
    }

    pub(crate) fn unary(&self, method: &str, msg: Value) -> Answer {
        self.raw(
            method,
            "application/json",
            msg.to_string().into_bytes(),
            &self.auth(),
        )
    }

    pub(crate) fn stream(&self, method: &str, msg: Value, extra: &[(&str, &str)]) -> Answer {
        let mut h = self.auth().to_vec();
        h.extend_from_slice(extra);
        self.raw(
            method,
            "application/connect+json",
            envelope(0, msg.to_string().as_bytes()),
            &h,
        )
    }

    /// Runs a command like the SDKs do (`/bin/bash -l -c CMD`): (stdout, stderr, end event).
    pub(crate) fn run(&self, cmd: &str, extra: Value) -> (String, String, Value) {
        let mut process = json!({"cmd": "/bin/bash", "args": ["-l", "-c", cmd]});
        if let Value::Object(m) = extra {
            process.as_object_mut().unwrap().extend(m);
        }
        let a = self.stream(
            "process.Process/Start",
            json!({"process": process, "stdin": false}),
            &[],
        );
        assert_eq!(a.status, 200);
        assert_eq!(a.ctype, "application/connect+json");
        assert_eq!(a.stream_error(), None, "{:?}", a.envelopes());
        let (mut out, mut err, mut end) = (Vec::new(), Vec::new(), Value::Null);
        let env = a.envelopes();
        assert!(env[0].1.pointer("/event/start/pid").is_some(), "{env:?}");
        for (_, m) in &env[1..env.len() - 1] {
            if let Some(s) = m.pointer("/event/data/stdout").and_then(Value::as_str) {
                out.extend(b64(s));
            }
            if let Some(s) = m.pointer("/event/data/stderr").and_then(Value::as_str) {
                err.extend(b64(s));
            }
            if let Some(e) = m.pointer("/event/end") {
                end = e.clone();
            }
        }
        (
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
            end,
        )
    }

    pub(crate) fn processes(&self) -> Vec<Value> {
        let a = self.unary("process.Process/List", json!({}));
        assert_eq!(a.status, 200);
        a.json()["processes"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

pub(crate) fn b64(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=').map(val).collect();
    let mut out = Vec::new();
    for chunk in bytes.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &v)| n | (u32::from(v) << (18 - 6 * i)));
        for i in 0..chunk.len().saturating_sub(1) {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    out
}

#[test]
fn connect_framing_tokens_and_unknown_sandboxes() {
    let server = TestServer::start();
    let sb = sandbox(&server);
    let start = |body: Vec<u8>| {
        sb.raw(
            "process.Process/Start",
            "application/connect+json",
            body,
            &sb.auth(),
        )
    };

    // Malformed envelopes: each an end-of-stream with invalid_argument; the server lives on.
    for bad in [
        vec![0u8, 0, 0],                                   // a short header
        vec![0, 0, 0, 0, 50, b'{'],                        // a length past the body
        [envelope(0, b"{}"), envelope(0, b"{}")].concat(), // two messages
        envelope(2, b"{}"),                                // an end-of-stream flag from a client
        envelope(0, b"{not json"),                         // not JSON
        envelope(0, b"{\"process\": 5}"),                  // wrong type
    ] {
        let a = start(bad);
        assert_eq!(a.status, 200);
        assert_eq!(a.envelopes().len(), 1);
        assert_eq!(a.stream_error().as_deref(), Some("invalid_argument"));
    }
    let a = start(envelope(1, b"{}"));
    assert_eq!(
        a.stream_error().as_deref(),
        Some("unimplemented"),
        "compressed"
    );
    // Oversized: announced, and sent.
    let a = start(vec![0, 0x7f, 0xff, 0xff, 0xff]);
    assert_eq!(a.stream_error().as_deref(), Some("resource_exhausted"));
    let a = start(envelope(0, &vec![b' '; 2 << 20]));
    assert_eq!(a.stream_error().as_deref(), Some("resource_exhausted"));
    let a = sb.raw(
        "filesystem.Filesystem/Stat",
        "application/json",
        vec![b' '; 2 << 20],
        &sb.auth(),
    );
    assert_eq!(a.status, 429);
    assert_eq!(a.json()["code"], "resource_exhausted");

    // Unary errors are Connect JSON with the spec's status.
    let a = sb.raw(
        "filesystem.Filesystem/Stat",
        "application/json",
        b"{".to_vec(),
        &sb.auth(),
    );
    assert_eq!((a.status, a.ctype.as_str()), (400, "application/json"));
    assert_eq!(a.json()["code"], "invalid_argument");
    let a = sb.raw(
        "filesystem.Filesystem/Stat",
        "application/proto",
        vec![],
        &sb.auth(),
    );
    assert_eq!(a.json()["code"], "invalid_argument", "binary codec refused");
    let mut h = sb.auth().to_vec();
    h.push(("Connect-Timeout-Ms", "soon"));
    let a = sb.raw(
        "filesystem.Filesystem/Stat",
        "application/json",
        b"{}".to_vec(),
        &h,
    );
    assert_eq!(a.json()["code"], "invalid_argument");

    // Tokens: missing, wrong, another sandbox's.
    let other = sandbox(&server);
    for headers in [
        vec![("E2b-Sandbox-Id", sb.id.as_str())],
        vec![
            ("E2b-Sandbox-Id", sb.id.as_str()),
            ("X-Access-Token", "0000"),
        ],
        vec![
            ("E2b-Sandbox-Id", sb.id.as_str()),
            ("X-Access-Token", other.token.as_str()),
        ],
    ] {
        let a = sb.raw(
            "filesystem.Filesystem/ListDir",
            "application/json",
            b"{}".to_vec(),
            &headers,
        );
        assert_eq!(a.status, 401);
        assert_eq!(a.json()["code"], "unauthenticated");
        let a = sb.raw(
            "process.Process/Start",
            "application/connect+json",
            envelope(0, br#"{"process":{"cmd":"/bin/true"}}"#),
            &headers,
        );
        assert_eq!(a.stream_error().as_deref(), Some("unauthenticated"));
    }
    // The server's API key opens any sandbox, for an id that does not exist too; the answer
    // is then what E2B's proxy says of a sandbox that is gone.
    let key = std::fs::read_to_string(server.data_dir().join("e2b-api-key")).unwrap();
    let a = sb.raw(
        "filesystem.Filesystem/ListDir",
        "application/json",
        b"{}".to_vec(),
        &[("E2b-Sandbox-Id", "sb_nope"), ("X-API-KEY", key.trim())],
    );
    assert_eq!(a.json()["code"], "unavailable");
    assert!(a.json()["message"]
        .as_str()
        .unwrap()
        .contains("was not found"));
    let a = sb.raw(
        "process.Process/Start",
        "application/connect+json",
        envelope(0, br#"{"process":{"cmd":"/bin/true"}}"#),
        &[("E2b-Sandbox-Id", "sb_nope"), ("X-API-KEY", key.trim())],
    );
    assert_eq!(a.stream_error().as_deref(), Some("unavailable"));

    // A watch streams its start, then (nothing changing) runs to the client's deadline.
    let a = sb.stream(
        "filesystem.Filesystem/WatchDir",
        json!({"path": "/home/user"}),
        &[("Connect-Timeout-Ms", "300")],
    );
    assert_eq!(a.envelopes()[0], (0, json!({"start": {}})));
    assert_eq!(a.stream_error().as_deref(), Some("deadline_exceeded"));
    // (PTY sessions are served now: `e2b_pty.rs`.) StreamInput to a process not there.
    let a = sb.stream(
        "process.Process/StreamInput",
        json!({"start": {"process": {"pid": 1000}}}),
        &[],
    );
    assert_eq!(a.stream_error().as_deref(), Some("not_found"));

    // The sandbox still works after all that.
    let (out, _, end) = sb.run("echo still here", json!({}));
    assert_eq!(out, "still here\n");
    assert_eq!(end["exitCode"], 0);
}

#[test]
fn commands_stream_exit_kill_and_deadline() {
    let server = TestServer::start();
    let sb = sandbox(&server);

    let (out, err, end) = sb.run("echo hello; echo oops >&2", json!({}));
    assert_eq!((out.as_str(), err.as_str()), ("hello\n", "oops\n"));
    assert_eq!(end["exitCode"], 0);
    assert_eq!(end["status"], "exit status 0");

    let (_, _, end) = sb.run("exit 3", json!({}));
    assert_eq!(end["exitCode"], 3);

    // cwd (E2B's home is the workspace, mounted at /home/user) and env, and nothing leaks into
    // the Bash session.
    let before = server.execute_bash(&sb.id, "pwd; echo \"[$LEAK]\"");
    sb.run("mkdir -p sub", json!({}));
    let (out, _, _) = sb.run(
        "pwd; echo $LEAK; cd /tmp; export LEAK2=1",
        json!({"cwd": "/home/user/sub", "envs": {"LEAK": "it's set"}}),
    );
    assert_eq!(out, "/home/user/sub\nit's set\n");
    let after = server.execute_bash(&sb.id, "pwd; echo \"[$LEAK]\"");
    assert_eq!(before["stdout"], after["stdout"]);

    // A background command: listed while it runs, killed, then gone; its stream ends killed.
    let sb2 = &sb;
    let started = Instant::now();
    let bg = std::thread::scope(|s| {
        let h = s.spawn(move || {
            sb2.stream(
                "process.Process/Start",
                json!({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "echo begun; sleep 60"]}, "tag": "bg"}),
                &[],
            )
        });
        let pid = loop {
            let procs = sb.processes();
            if let Some(p) = procs.first() {
                assert_eq!(p["tag"], "bg");
                assert_eq!(p["config"]["cmd"], "/bin/bash");
                break p["pid"].as_u64().unwrap();
            }
            assert!(started.elapsed() < Duration::from_secs(30), "never listed");
            std::thread::sleep(Duration::from_millis(50));
        };
        // Let it start (and print) before the kill.
        std::thread::sleep(Duration::from_millis(500));
        let a = sb.unary(
            "process.Process/SendSignal",
            json!({"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"}),
        );
        assert_eq!(a.status, 200, "{:?}", a.json());
        assert!(
            sb.processes().is_empty(),
            "a killed command leaves the list at once"
        );
        h.join().unwrap()
    });
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the kill ended it"
    );
    assert_eq!(bg.stream_error(), None);
    let env = bg.envelopes();
    let end = env
        .iter()
        .find_map(|(_, m)| m.pointer("/event/end"))
        .expect("an end event");
    assert_eq!(end["status"], "signal: killed");
    assert_ne!(end["exitCode"], 0);

    // Killing what does not exist: not_found (the SDKs answer False).
    let a = sb.unary(
        "process.Process/SendSignal",
        json!({"process": {"pid": 4_000_000}, "signal": "SIGNAL_SIGKILL"}),
    );
    assert_eq!(
        (a.status, a.json()["code"].as_str()),
        (404, Some("not_found"))
    );
    let a = sb.unary(
        "process.Process/SendInput",
        json!({"process": {"pid": 4_000_000}, "input": {"stdin": "aGk="}}),
    );
    assert_eq!(a.json()["code"], "not_found");

    // The client's deadline ends the stream with deadline_exceeded and stops the command.
    let t = Instant::now();
    let a = sb.stream(
        "process.Process/Start",
        json!({"process": {"cmd": "/bin/bash", "args": ["-c", "sleep 30"]}}),
        &[("Connect-Timeout-Ms", "1500")],
    );
    assert_eq!(a.stream_error().as_deref(), Some("deadline_exceeded"));
    assert!(t.elapsed() < Duration::from_secs(10));
    // ... and the sandbox is free again soon after.
    let (out, _, _) = sb.run("echo after", json!({}));
    assert_eq!(out, "after\n");
}

#[test]
fn filesystem_calls_and_hostile_paths() {
    let server = TestServer::start();
    let sb = sandbox(&server);
    let code = |a: &Answer| a.json()["code"].as_str().unwrap_or("").to_owned();

    let a = sb.unary(
        "filesystem.Filesystem/MakeDir",
        json!({"path": "/home/user/a/b"}),
    );
    assert_eq!(a.status, 200, "{:?}", a.json());
    assert_eq!(a.json()["entry"]["type"], "FILE_TYPE_DIRECTORY");
    assert_eq!(a.json()["entry"]["path"], "/home/user/a/b");
    let a = sb.unary("filesystem.Filesystem/MakeDir", json!({"path": "a/b"}));
    assert_eq!((a.status, code(&a).as_str()), (409, "already_exists"));

    sb.run("echo -n 12345 > a/b/f.txt", json!({}));
    let a = sb.unary(
        "filesystem.Filesystem/Stat",
        json!({"path": "/home/user/a/b/f.txt"}),
    );
    let e = &a.json()["entry"];
    assert_eq!(e["type"], "FILE_TYPE_FILE");
    assert_eq!(e["size"], "5");
    assert_eq!(e["name"], "f.txt");
    assert!(e["modifiedTime"].as_str().unwrap().ends_with('Z'));
    let a = sb.unary("filesystem.Filesystem/Stat", json!({"path": "/home/user"}));
    assert_eq!(a.json()["entry"]["type"], "FILE_TYPE_DIRECTORY");

    let a = sb.unary(
        "filesystem.Filesystem/ListDir",
        json!({"path": "/home/user", "depth": 1}),
    );
    let names: Vec<_> = a.json()["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_owned())
        .collect();
    assert!(names.contains(&"/home/user/a".to_owned()), "{names:?}");
    assert!(
        !names.iter().any(|n| n.starts_with("/home/user/a/")),
        "{names:?}"
    );
    let a = sb.unary(
        "filesystem.Filesystem/ListDir",
        json!({"path": "/home/user", "depth": 3}),
    );
    let all = a.json()["entries"].to_string();
    assert!(all.contains("/home/user/a/b/f.txt"), "{all}");
    let a = sb.unary(
        "filesystem.Filesystem/ListDir",
        json!({"path": "/home/user/a/b/f.txt"}),
    );
    assert_eq!(code(&a), "invalid_argument");

    let a = sb.unary(
        "filesystem.Filesystem/Move",
        json!({"source": "/home/user/a/b/f.txt", "destination": "/home/user/c/g.txt"}),
    );
    assert_eq!(a.status, 200, "{:?}", a.json());
    assert_eq!(a.json()["entry"]["path"], "/home/user/c/g.txt");
    let (out, _, _) = sb.run("cat c/g.txt", json!({}));
    assert_eq!(out, "12345");
    let a = sb.unary(
        "filesystem.Filesystem/Remove",
        json!({"path": "/home/user/c"}),
    );
    assert_eq!(a.status, 200);
    let a = sb.unary(
        "filesystem.Filesystem/Stat",
        json!({"path": "/home/user/c"}),
    );
    assert_eq!((a.status, code(&a).as_str()), (404, "not_found"));

    // Hostile paths: outside the home, `..`, NUL, and a symlink out of the workspace.
    sb.run("ln -s /etc out; ln -s /etc/passwd pw", json!({}));
    for (method, msg) in [
        ("Stat", json!({"path": "/etc/passwd"})),
        ("Stat", json!({"path": "/home/user/../../etc/passwd"})),
        ("ListDir", json!({"path": "/"})),
        ("ListDir", json!({"path": "/home/user/out"})),
        ("ListDir", json!({"path": "out/"})),
        ("Stat", json!({"path": "/home/user/out/passwd"})),
        ("MakeDir", json!({"path": "/home/user/out/evil"})),
        ("MakeDir", json!({"path": "/tmp/x"})),
        ("Remove", json!({"path": "/home/user/out/passwd"})),
        ("Remove", json!({"path": "/home/user"})),
        (
            "Move",
            json!({"source": "/home/user/a", "destination": "/home/user/out/a"}),
        ),
        (
            "Move",
            json!({"source": "/home/user/out/passwd", "destination": "/home/user/p"}),
        ),
        (
            "Move",
            json!({"source": "/home/user/a", "destination": "/tmp/a"}),
        ),
        ("Stat", json!({"path": "a\u{0}b"})),
    ] {
        let a = sb.unary(&format!("filesystem.Filesystem/{method}"), msg.clone());
        assert!(
            a.status >= 400 && ["invalid_argument", "not_found"].contains(&code(&a).as_str()),
            "{method} {msg}: {} {:?}",
            a.status,
            a.json()
        );
    }
    // The symlink itself is reported, not followed; removing it removes the link only.
    let a = sb.unary(
        "filesystem.Filesystem/Stat",
        json!({"path": "/home/user/pw"}),
    );
    assert_eq!(a.json()["entry"]["type"], "FILE_TYPE_SYMLINK");
    assert_eq!(a.json()["entry"]["isSymlink"], true);
    let a = sb.unary(
        "filesystem.Filesystem/Remove",
        json!({"path": "/home/user/pw"}),
    );
    assert_eq!(a.status, 200);
    let (out, _, _) = sb.run("test -f /etc/passwd && echo kept", json!({}));
    assert_eq!(out, "kept\n");
}

#[test]
fn commands_run_side_by_side_and_their_pipes_resist_the_sandbox() {
    let server = TestServer::start();
    let sb = sandbox(&server);
    sb.run("true", json!({}));

    // Two commands at once: each sleeps 1 s, both are done well before 2 s.
    let t = Instant::now();
    let outs: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|i| {
                let sb = &sb;
                s.spawn(move || sb.run(&format!("sleep 1; echo {i}"), json!({})).0)
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(outs, ["0\n", "1\n"]);
    assert!(
        t.elapsed() < Duration::from_millis(1800),
        "{:?}",
        t.elapsed()
    );

    // A command that, while it runs, replaces every name of its pipes: a symlink to
    // /etc/shadow, a FIFO, a 1 GB sparse file, and then deletes the directory. The server
    // holds its own descriptors: the output still arrives, whole and bounded, with the status.
    let t = Instant::now();
    let (out, err, end) = sb.run(
        "d=/tmp/.e2b-proc; echo before; for f in \"$d\"/*; do rm -f \"$f\"; done; \
         for f in a.out a.err a.st; do ln -s /etc/shadow \"$d/$f\"; done; \
         mkfifo \"$d/b.out\"; truncate -s 1G \"$d/c.out\"; ls \"$d\" | wc -l; \
         rm -rf \"$d\"; echo after; echo err >&2; exit 4",
        json!({}),
    );
    assert_eq!(out, "before\n5\nafter\n");
    assert_eq!(err, "err\n");
    assert_eq!(end["exitCode"], 4);
    assert!(t.elapsed() < Duration::from_secs(10));

    // What the sandbox leaves at the directory's name before a command: a symlink out of /tmp,
    // a FIFO, a huge sparse file, a directory it filled with traps. Each is replaced (or its
    // traps ignored); nothing is followed, nothing blocks.
    let setups = [
        "rm -rf /tmp/.e2b-proc; mkdir -p /workspace/trap; ln -s /workspace/trap /tmp/.e2b-proc",
        "rm -rf /tmp/.e2b-proc; ln -s /etc /tmp/.e2b-proc",
        "rm -rf /tmp/.e2b-proc; mkfifo /tmp/.e2b-proc",
        "rm -rf /tmp/.e2b-proc; truncate -s 1G /tmp/.e2b-proc",
        "rm -rf /tmp/.e2b-proc; mkdir /tmp/.e2b-proc; \
         for i in $(seq 1000 1010); do mkfifo /tmp/.e2b-proc/$i.out; \
         ln -s /etc/shadow /tmp/.e2b-proc/$i.err; truncate -s 1G /tmp/.e2b-proc/$i.st; done",
    ];
    for setup in setups {
        let r = server.execute_bash(&sb.id, setup);
        assert_eq!(r["exit_code"], 0, "{setup}: {r}");
        let t = Instant::now();
        let (out, _, end) = sb.run("echo fine", json!({}));
        assert_eq!(out, "fine\n", "after {setup}");
        assert_eq!(end["exitCode"], 0);
        assert!(t.elapsed() < Duration::from_secs(10), "{setup}");
    }
    let r = server.execute_bash(&sb.id, "ls -A /workspace/trap | wc -l");
    assert_eq!(r["stdout"], "0\n", "nothing was made through the symlink");

    // A background command that never ends does not hold the sandbox: an execution answers
    // at once beside it, and it is killed from the host.
    std::thread::scope(|s| {
        let sb2 = &sb;
        let h = s.spawn(move || {
            sb2.stream(
                "process.Process/Start",
                json!({"process": {"cmd": "/bin/bash", "args": ["-c", "sleep 600"]}}),
                &[],
            )
        });
        let t = Instant::now();
        let pid = loop {
            if let Some(p) = sb.processes().first() {
                break p["pid"].as_u64().unwrap();
            }
            assert!(t.elapsed() < Duration::from_secs(30), "never listed");
            std::thread::sleep(Duration::from_millis(20));
        };
        let t = Instant::now();
        let r = server.execute_bash(&sb.id, "echo beside");
        assert_eq!(r["stdout"], "beside\n");
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        let a = sb.unary(
            "process.Process/SendSignal",
            json!({"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"}),
        );
        assert_eq!(a.status, 200);
        let a = h.join().unwrap();
        let end = a
            .envelopes()
            .iter()
            .find_map(|(_, m)| m.pointer("/event/end").cloned())
            .expect("an end event");
        assert_eq!(end["status"], "signal: killed");
    });
    let r = server.execute_bash(
        &sb.id,
        "for p in /proc/[0-9]*; do cat $p/comm 2>/dev/null; done | grep -cx sleep",
    );
    assert_eq!(
        r["stdout"], "0\n",
        "the kill reached the command's processes"
    );

    // Stdin: a command started with one reads what SendInput sends, until CloseStdin.
    std::thread::scope(|s| {
        let sb2 = &sb;
        let h = s.spawn(move || {
            sb2.stream(
                "process.Process/Start",
                json!({"process": {"cmd": "/bin/bash", "args": ["-c", "tr a-z A-Z"]}, "stdin": true, "tag": "in"}),
                &[],
            )
        });
        let t = Instant::now();
        let pid = loop {
            if let Some(p) = sb.processes().first() {
                break p["pid"].as_u64().unwrap();
            }
            assert!(t.elapsed() < Duration::from_secs(30), "never listed");
            std::thread::sleep(Duration::from_millis(20));
        };
        for (msg, want) in [
            (
                json!({"process": {"pid": pid}, "input": {"stdin": "aGVsbG8K"}}),
                200,
            ),
            (
                json!({"process": {"pid": pid}, "input": {"stdin": "!!"}}),
                400,
            ),
            (json!({"process": {"pid": pid}}), 400),
        ] {
            let a = sb.unary("process.Process/SendInput", msg);
            assert_eq!(a.status, want, "{:?}", a.json());
        }
        // StreamInput, a client stream: several envelopes on one request, written in order.
        let frames = |msgs: &[Value]| -> Vec<u8> {
            msgs.iter()
                .flat_map(|m| envelope(0, m.to_string().as_bytes()))
                .collect()
        };
        let start = json!({"start": {"process": {"pid": pid}}});
        let data = |b: &str| json!({"data": {"input": {"stdin": b}}});
        let a = sb.raw(
            "process.Process/StreamInput",
            "application/connect+json",
            frames(&[
                start.clone(),
                data("d29y"),
                json!({"keepalive": {}}),
                data("bGQK"),
            ]),
            &sb.auth(),
        );
        assert_eq!(a.stream_error(), None, "{:?}", a.envelopes());
        // Hostile streams end with their error and write nothing.
        let huge = [vec![0u8], (1u32 << 30).to_be_bytes().to_vec()].concat();
        let compressed = envelope(1, start.to_string().as_bytes());
        let truncated = envelope(0, start.to_string().as_bytes())[..9].to_vec();
        for (body, want) in [
            (frames(&[data("eHh4Cg==")]), "invalid_argument"),
            (frames(&[start.clone(), start.clone()]), "invalid_argument"),
            (
                frames(&[json!({"start": {"process": {"pid": pid}}, "data": {}})]),
                "invalid_argument",
            ),
            (frames(&[json!({})]), "invalid_argument"),
            (frames(&[start.clone(), data("!!")]), "invalid_argument"),
            (huge, "resource_exhausted"),
            (compressed, "unimplemented"),
            (truncated, "invalid_argument"),
            (b"not an envelope".to_vec(), "resource_exhausted"), // "ot a": 1.8 GB announced
            (vec![0u8, 0, 0], "invalid_argument"),
        ] {
            let a = sb.raw(
                "process.Process/StreamInput",
                "application/connect+json",
                body,
                &sb.auth(),
            );
            assert_eq!(
                a.stream_error().as_deref(),
                Some(want),
                "{:?}",
                a.envelopes()
            );
        }
        // Another sandbox's token opens nothing.
        let a = sb.raw(
            "process.Process/StreamInput",
            "application/connect+json",
            frames(&[start.clone(), data("eHh4Cg==")]),
            &[
                ("E2b-Sandbox-Id", sb.id.as_str()),
                ("X-Access-Token", "forged"),
            ],
        );
        assert_eq!(a.stream_error().as_deref(), Some("unauthenticated"));
        let a = sb.unary(
            "process.Process/CloseStdin",
            json!({"process": {"tag": "in"}}),
        );
        assert_eq!(a.status, 200, "{:?}", a.json());
        let a = h.join().unwrap();
        let out: Vec<u8> = a
            .envelopes()
            .iter()
            .filter_map(|(_, m)| m.pointer("/event/data/stdout").and_then(Value::as_str))
            .flat_map(b64)
            .collect();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HELLO\nWORLD\n",
            "{:?}",
            a.envelopes()
        );
    });
    // A command without stdin refuses input.
    let a = sb.unary(
        "process.Process/SendInput",
        json!({"process": {"pid": 1}, "input": {"stdin": "aGk="}}),
    );
    assert_eq!(a.json()["code"], "not_found");

    // The sandbox is fine, and its commands' pipes (named PID-NONCE.*; the traps above are
    // the sandbox's own) are cleaned up.
    let r = server.execute_bash(&sb.id, "ls -A /tmp/.e2b-proc | grep -c -- -");
    assert_eq!(r["stdout"], "0\n");
}

/// Asserts a Connect `permission_denied` whose message names `policy`.
#[track_caller]
fn assert_rpc_denied(a: &Answer, policy: &str) {
    assert_eq!(a.status, 403, "{:?}", a.json());
    assert_eq!(a.json()["code"], "permission_denied", "{:?}", a.json());
    let message = a.json()["message"].as_str().unwrap_or("").to_owned();
    assert!(message.contains(policy), "names {policy}: {message}");
}

#[test]
fn commands_and_filesystem_calls_pass_the_policy() {
    let server = TestServer::start();
    let sb = sandbox(&server);
    let code_size = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples/policies/code-size-cap.cedar"),
    )
    .unwrap();
    let r = server.put_bytes("/v1/policies", code_size);
    assert_eq!(r.status, 200, "{:?}", r.body);

    // A command is code: a short one runs, one past the cap is refused before it starts.
    let (out, _, _) = sb.run("echo short", json!({}));
    assert_eq!(out, "short\n");
    let long = format!("echo ran # {}", "c".repeat(10_001));
    let a = sb.stream(
        "process.Process/Start",
        json!({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", long]}, "stdin": false}),
        &[],
    );
    assert_eq!(a.status, 200);
    assert_eq!(a.stream_error().as_deref(), Some("permission_denied"));
    let env = a.envelopes();
    assert_eq!(env.len(), 1, "nothing but the end of stream: {env:?}");
    let message = env[0]
        .1
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap();
    assert!(message.contains("code-size-cap"), "{message}");
    assert!(
        sb.processes().is_empty(),
        "a refused command was registered: {:?}",
        sb.processes()
    );
    let r = server.get("/v1/decisions?gate=execute&limit=20");
    let d = r.body["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["allowed"] == false)
        .cloned()
        .expect("the refused command is recorded");
    assert_eq!(d["policies"], json!(["code-size-cap"]), "{d:#}");
    assert_eq!(d["resource"], format!("Sandbox::\"{}\"", sb.id), "{d:#}");
    assert_eq!(d["key_id"], format!("sandbox-token:{}", sb.id), "{d:#}");

    // The file API's calls: writes of secret*, reads of private*.
    let r = server.put_bytes("/v1/policies", common::file_policies());
    assert_eq!(r.status, 200, "{:?}", r.body);
    sb.run(
        "echo x > notes.txt; echo y > private.txt; mkdir -p private-d sub/private",
        json!({}),
    );
    let fs = |method: &str, msg: Value| sb.unary(&format!("filesystem.Filesystem/{method}"), msg);
    for (method, msg) in [
        ("MakeDir", json!({"path": "/home/user/secret-dir"})),
        ("MakeDir", json!({"path": "./secret-dir"})),
        ("MakeDir", json!({"path": "/home/user//secret-dir"})),
        (
            "Move",
            json!({"source": "/home/user/notes.txt", "destination": "/home/user/secret.txt"}),
        ),
        (
            "Move",
            json!({"source": "/home/user/notes.txt", "destination": "secret.txt"}),
        ),
        ("Remove", json!({"path": "/home/user/secret.txt"})),
    ] {
        assert_rpc_denied(&fs(method, msg.clone()), "no-secret-writes");
    }
    for (method, msg) in [
        ("Stat", json!({"path": "/home/user/private.txt"})),
        ("Stat", json!({"path": "./private.txt"})),
        (
            "ListDir",
            json!({"path": "/home/user/private-d", "depth": 1}),
        ),
    ] {
        assert_rpc_denied(&fs(method, msg.clone()), "no-private-reads");
    }
    // The rule is on the path: `sub/private` is not `/workspace/private*`.
    let a = fs(
        "ListDir",
        json!({"path": "/home/user/sub/private", "depth": 1}),
    );
    assert_eq!(a.status, 200, "{:?}", a.json());
    // Nothing was written or moved; allowed calls still work.
    let (out, _, _) = sb.run("ls", json!({}));
    assert!(!out.contains("secret"), "{out}");
    assert!(out.contains("notes.txt"), "{out}");
    let a = fs(
        "Move",
        json!({"source": "/home/user/notes.txt", "destination": "/home/user/kept.txt"}),
    );
    assert_eq!(a.status, 200, "{:?}", a.json());
    let a = fs("MakeDir", json!({"path": "/home/user/fine-dir"}));
    assert_eq!(a.status, 200, "{:?}", a.json());
    let r = server.get("/v1/decisions?gate=write_file&limit=50");
    let denied: Vec<&Value> = r.body["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["allowed"] == false)
        .collect();
    assert!(denied.len() >= 6, "{denied:#?}");
    assert!(
        denied
            .iter()
            .all(|d| d["policies"] == json!(["no-secret-writes"])),
        "{denied:#?}"
    );
}
