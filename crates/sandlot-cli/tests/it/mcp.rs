//! The MCP server against hostile and broken clients, speaking raw JSON-RPC to a real server
//! with real sandboxes: over streamable HTTP at `/mcp` (malformed JSON-RPC, unknown session ids,
//! oversized bodies, wrong media types, foreign Host/Origin, unknown tools and bad arguments,
//! a bounded number of sessions, a client dropping its connection mid-execution, session end
//! deleting the session's sandbox) and over stdio (`sandlot mcp --url`: garbage lines, hostile
//! ids and paths, EOF). Each answer is in MCP's own format and the server stays usable.
//! The happy paths through the official client are in sdk/python/tests/test_mcp.py.

use crate::common;

use common::TestServer;
use reqwest::blocking::{Client, RequestBuilder};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const PROTOCOL: &str = "2025-06-18";
/// The server's bound on live sessions (`sandlot_mcp::MAX_SESSIONS`).
const MAX_SESSIONS: usize = sandlot_mcp::MAX_SESSIONS;

/// A raw streamable-HTTP MCP client.
struct Mcp<'a> {
    server: &'a TestServer,
    http: Client,
    session: Option<String>,
    next_id: u64,
}

/// A status, headers and the JSON-RPC messages of a body (JSON or SSE `data:` lines).
struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    text: String,
    messages: Vec<Value>,
}

impl Answer {
    /// The one message that answers request `id`.
    #[track_caller]
    fn reply(&self, id: u64) -> &Value {
        self.messages
            .iter()
            .find(|m| m["id"] == json!(id))
            .unwrap_or_else(|| panic!("no reply to {id}: {} {}", self.status, self.text))
    }
}

fn read(resp: reqwest::blocking::Response) -> Answer {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().unwrap_or_default();
    let mut messages = Vec::new();
    if let Ok(v) = serde_json::from_str::<Value>(&text) {
        messages.push(v);
    } else {
        for line in text.lines() {
            if let Some(data) = line.strip_prefix("data:") {
                if let Ok(v) = serde_json::from_str::<Value>(data.trim()) {
                    messages.push(v);
                }
            }
        }
    }
    Answer {
        status,
        headers,
        text,
        messages,
    }
}

impl<'a> Mcp<'a> {
    fn new(server: &'a TestServer) -> Self {
        Mcp {
            server,
            http: server.client().clone(),
            session: None,
            next_id: 1,
        }
    }

    fn url(&self) -> String {
        format!("{}/mcp", self.server.url())
    }

    fn post(&self) -> RequestBuilder {
        let mut req = self
            .http
            .post(self.url())
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", PROTOCOL);
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s);
        }
        req
    }

    fn send(&self, req: RequestBuilder) -> Answer {
        read(req.send().expect("request"))
    }

    fn raw(&self, body: impl Into<Vec<u8>>) -> Answer {
        let body: Vec<u8> = body.into();
        self.send(self.post().body(body))
    }

    /// `initialize` then `notifications/initialized`; keeps the session id.
    fn initialize(&mut self) -> Answer {
        let id = self.take_id();
        let a = self.raw(
            json!({
                "jsonrpc": "2.0", "id": id, "method": "initialize",
                "params": {
                    "protocolVersion": PROTOCOL,
                    "capabilities": {},
                    "clientInfo": { "name": "attack-test", "version": "0" },
                },
            })
            .to_string(),
        );
        if a.status != 200 {
            return a;
        }
        assert_eq!(
            a.reply(id)["result"]["protocolVersion"],
            PROTOCOL,
            "{}",
            a.text
        );
        let sid = a.headers["mcp-session-id"].to_str().unwrap().to_string();
        self.session = Some(sid);
        let n =
            self.raw(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string());
        assert_eq!(n.status, 202, "{}", n.text);
        a
    }

    fn take_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// A request; returns its id and the answer.
    fn request(&mut self, method: &str, params: Value) -> (u64, Answer) {
        let id = self.take_id();
        let a = self.raw(
            json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }).to_string(),
        );
        (id, a)
    }

    /// `tools/call`; returns the JSON-RPC reply (a `result` or an `error`).
    fn call(&mut self, tool: &str, args: Value) -> Value {
        let (id, a) = self.request("tools/call", json!({ "name": tool, "arguments": args }));
        assert_eq!(a.status, 200, "{}", a.text);
        a.reply(id).clone()
    }

    fn delete(&self) -> Answer {
        let mut req = self.http.delete(self.url());
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s);
        }
        self.send(req)
    }
}

/// An HTTP-level refusal: this status and a JSON-RPC error body with this code.
#[track_caller]
fn assert_refused(a: &Answer, status: u16, code: i64) {
    assert_eq!(a.status, status, "{}", a.text);
    assert_eq!(
        a.headers["content-type"].to_str().unwrap(),
        "application/json",
        "{}",
        a.text
    );
    assert_eq!(a.messages.len(), 1, "{}", a.text);
    assert_eq!(a.messages[0]["jsonrpc"], "2.0", "{}", a.text);
    assert_rpc_error(&a.messages[0], code);
}

/// The text of a tool result's content blocks.
fn text(reply: &Value) -> String {
    reply["result"]["content"]
        .as_array()
        .unwrap_or_else(|| panic!("not a tool result: {reply}"))
        .iter()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

#[track_caller]
fn assert_ok(reply: &Value) {
    assert!(
        reply["result"]["isError"] != json!(true) && reply["error"].is_null(),
        "{reply}"
    );
}

#[track_caller]
fn assert_rpc_error(reply: &Value, code: i64) {
    assert_eq!(reply["error"]["code"], json!(code), "{reply}");
    assert!(
        !reply["error"]["message"].as_str().unwrap_or("").is_empty(),
        "{reply}"
    );
}

fn own_sandbox(mcp: &mut Mcp) -> String {
    let listed: Value =
        serde_json::from_str(&text(&mcp.call("list_sandboxes", json!({})))).unwrap();
    listed
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["this_session"] == json!(true))
        .and_then(|s| s["sandbox_id"].as_str())
        .expect("the session's own sandbox")
        .to_string()
}

fn alive(server: &TestServer, id: &str) -> bool {
    let r = server.get(&format!("/v1/sandboxes/{id}"));
    r.status == 200 && !["deleted", "expired", "lost"].contains(&r.body["state"].as_str().unwrap())
}

#[track_caller]
fn wait_until(what: &str, within: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !f() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn http_bad_input_gets_mcp_errors_and_the_server_stays_usable() {
    let server = TestServer::start();
    let mut mcp = Mcp::new(&server);

    // Before any session: requests other than initialize need one.
    let (_, a) = mcp.request("tools/list", json!({}));
    assert_refused(&a, 400, -32600);
    // Malformed JSON, and JSON that is not JSON-RPC: parse errors.
    for body in [
        &b"{not json"[..],
        b"[]",
        b"{\"jsonrpc\":\"2.0\"}",
        b"\x00\xff",
        b"",
    ] {
        assert_refused(&mcp.raw(body.to_vec()), 400, -32700);
    }
    // Wrong media types.
    let a = mcp.send(
        mcp.http
            .post(mcp.url())
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "text/plain")
            .body("{}"),
    );
    assert_refused(&a, 415, -32600);
    let a = mcp.send(
        mcp.http
            .post(mcp.url())
            .header("accept", "text/html")
            .header("content-type", "application/json")
            .body("{}"),
    );
    assert_refused(&a, 406, -32600);
    // Other methods.
    let a = mcp.send(mcp.http.put(mcp.url()).body("{}"));
    assert_refused(&a, 405, -32600);

    // Unknown session ids, on every method.
    mcp.session = Some("00000000-0000-0000-0000-000000000000".into());
    let (_, a) = mcp.request("tools/list", json!({}));
    assert_refused(&a, 404, -32001);
    assert_refused(&mcp.delete(), 404, -32001);
    let a = mcp.send(
        mcp.http
            .get(mcp.url())
            .header("accept", "text/event-stream")
            .header("mcp-session-id", "../../etc/passwd"),
    );
    assert_refused(&a, 404, -32001);
    mcp.session = None;

    // A real session.
    mcp.initialize();
    let (id, a) = mcp.request("tools/list", json!({}));
    let tools = a.reply(id)["result"]["tools"].as_array().unwrap().len();
    assert_eq!(tools, 12, "{}", a.text);

    // Malformed JSON inside a session.
    let a = mcp.raw(&b"{\"jsonrpc\": \"2.0\", \"id\": 5, \"method\": "[..]);
    assert_refused(&a, 400, -32700);

    // Unknown tools and bad arguments: JSON-RPC invalid params, never a crash.
    assert_rpc_error(&mcp.call("no_such_tool", json!({})), -32602);
    assert_rpc_error(&mcp.call("run_python", json!({})), -32602);
    assert_rpc_error(&mcp.call("run_python", json!({ "code": ["x"] })), -32602);
    assert_rpc_error(
        &mcp.call("run_python", json!({ "code": "1", "timeout": "soon" })),
        -32602,
    );
    assert_rpc_error(&mcp.call("list_files", json!({ "recursive": 3 })), -32602);
    assert_rpc_error(&mcp.call("read_file", json!({ "path": null })), -32602);
    let (id, a) = mcp.request(
        "tools/call",
        json!({ "name": "run_python", "arguments": "x=1" }),
    );
    assert!(a.reply(id)["error"]["code"].is_i64(), "{}", a.text);
    let (id, a) = mcp.request("tools/call", json!({ "arguments": {} }));
    assert!(a.reply(id)["error"]["code"].is_i64(), "{}", a.text);
    let (id, a) = mcp.request("no/such/method", json!({}));
    assert_rpc_error(a.reply(id), -32601);

    // What the tool itself refuses is a tool result with isError, readable by the model.
    let r = mcp.call(
        "run_python",
        json!({ "code": "1", "sandbox_id": "../../v1/templates" }),
    );
    assert_eq!(r["result"]["isError"], json!(true), "{r}");
    assert!(text(&r).starts_with("sandbox_not_found: "), "{r}");
    assert_eq!(text(&r).matches("sandbox_not_found").count(), 1, "{r}");
    for path in ["../../etc/passwd", "/etc/passwd", "a/\u{0}b"] {
        let r = mcp.call("read_file", json!({ "path": path }));
        assert_eq!(r["result"]["isError"], json!(true), "{path}: {r}");
    }
    let r = mcp.call("run_python", json!({ "code": "1", "timeout": 1e9 }));
    assert_eq!(r["result"]["isError"], json!(true), "{r}");
    let r = mcp.call("fork_sandbox", json!({ "count": 100000 }));
    assert_eq!(r["result"]["isError"], json!(true), "{r}");
    // Code over the runtime's limit (1 MiB) but within the body limit.
    let r = mcp.call("run_python", json!({ "code": "#".repeat(2 << 20) }));
    assert_eq!(r["result"]["isError"], json!(true), "{r}");
    assert!(text(&r).contains("payload_too_large"), "{r}");

    // An oversized body: 413 before it is parsed.
    let huge = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":{{\"name\":\"run_python\",\"arguments\":{{\"code\":\"{}\"}}}}}}",
        "x".repeat(sandlot_mcp::MAX_BODY_BYTES + 1)
    );
    let a = mcp.raw(huge);
    assert_refused(&a, 413, -32600);

    // Foreign Host (DNS rebinding) and a foreign page's Origin are refused.
    let a = mcp.send(mcp.post().header("host", "evil.example:80").body("{}"));
    assert_refused(&a, 403, -32600);
    let a = mcp.send(
        mcp.post()
            .header("origin", "https://evil.example")
            .body(json!({"jsonrpc": "2.0", "id": 77, "method": "tools/list"}).to_string()),
    );
    assert_refused(&a, 403, -32600);

    // Through all of it, the session works and so does the rest of the server.
    let r = mcp.call("run_python", json!({ "code": "6*7" }));
    assert_ok(&r);
    assert_eq!(text(&r), "42");
    let other = server.create_sandbox();
    assert_eq!(server.execute(&other, "1+1")["result"]["text/plain"], "2");

    // Ending the session (DELETE) deletes its sandbox, and the session is gone.
    let own = own_sandbox(&mut mcp);
    assert!(alive(&server, &own));
    assert_eq!(mcp.delete().status, 204);
    wait_until(
        "the session's sandbox deleted",
        Duration::from_secs(20),
        || !alive(&server, &own),
    );
    let (_, a) = mcp.request("tools/list", json!({}));
    assert_refused(&a, 404, -32001);
}

#[test]
fn http_sessions_are_bounded() {
    let server = TestServer::start();
    let mut sessions = Vec::new();
    for i in 0..MAX_SESSIONS {
        let mut m = Mcp::new(&server);
        let a = m.initialize();
        assert_eq!(a.status, 200, "session {i}: {}", a.text);
        sessions.push(m);
    }
    // One past the bound: 503 with a JSON-RPC error that says why.
    let mut extra = Mcp::new(&server);
    let a = extra.initialize();
    assert_refused(&a, 503, -32000);
    assert!(a.text.contains("too many MCP sessions"), "{}", a.text);
    assert_eq!(a.headers["retry-after"], "5");
    // Existing sessions are unaffected, and ending one makes room.
    let r = sessions[0].call("run_python", json!({ "code": "1+1" }));
    assert_eq!(text(&r), "2");
    let own = own_sandbox(&mut sessions[0]);
    assert_eq!(sessions[0].delete().status, 204);
    wait_until("a session's place freed", Duration::from_secs(10), || {
        Mcp::new(&server).initialize().status == 200
    });
    wait_until(
        "the ended session's sandbox deleted",
        Duration::from_secs(20),
        || !alive(&server, &own),
    );
    // The REST API never noticed.
    assert_eq!(server.get("/v1/health").status, 200);
}

#[test]
fn http_client_dropping_mid_execution_interrupts_it() {
    let server = TestServer::start();
    let mut mcp = Mcp::new(&server);
    mcp.initialize();
    assert_ok(&mcp.call("run_python", json!({ "code": "kept = 'state'" })));
    let own = own_sandbox(&mut mcp);

    // Start an endless execution and drop the connection once the stream has begun.
    let body = json!({
        "jsonrpc": "2.0", "id": 1000, "method": "tools/call",
        "params": { "name": "run_python", "arguments": { "code": "while True: pass" } },
    });
    let mut resp = mcp.post().body(body.to_string()).send().expect("call");
    assert_eq!(resp.status().as_u16(), 200);
    let mut first = [0u8; 1];
    resp.read_exact(&mut first).expect("the stream begins");
    std::thread::sleep(Duration::from_millis(1500));
    drop(resp);

    // The execution is interrupted well before its 60 s timeout; the sandbox keeps its state.
    let started = Instant::now();
    wait_until("the execution interrupted", Duration::from_secs(20), || {
        let list = server.get(&format!("/v1/sandboxes/{own}/executions")).body;
        list["executions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["code"] == "while True: pass" && e["result"]["end_state"] == "interrupted")
    });
    let r = mcp.call("run_python", json!({ "code": "kept" }));
    assert_eq!(text(&r), "'state'");
    assert!(started.elapsed() < Duration::from_secs(20));
}

/// `sandlot mcp --url` as a child, speaking newline-delimited JSON-RPC.
struct StdioMcp {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl StdioMcp {
    fn start(url: &str, key: &str) -> StdioMcp {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sandlot"))
            .args(["mcp", "--url", url])
            .env("SANDLOT_API_KEY", key)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("sandlot mcp");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        StdioMcp {
            child,
            stdin,
            lines,
        }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// The next message answering `id`.
    fn reply(&mut self, id: u64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no reply to {id}"));
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                panic!("stdout is not JSON-RPC: {line:?}")
            };
            if v["id"] == json!(id) {
                return v;
            }
        }
    }

    fn call(&mut self, id: u64, tool: &str, args: Value) -> Value {
        self.send(
            &json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
                     "params": { "name": tool, "arguments": args } })
            .to_string(),
        );
        self.reply(id)
    }
}

impl Drop for StdioMcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn stdio_bad_input_and_eof() {
    let server = TestServer::start();
    let mut s = StdioMcp::start(server.url(), server.key());
    s.send(
        &json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL, "capabilities": {},
            "clientInfo": { "name": "attack-test", "version": "0" } } })
        .to_string(),
    );
    assert_eq!(s.reply(1)["result"]["serverInfo"]["name"], "sandlot");
    s.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }).to_string());

    // Garbage lines do not end the session.
    s.send("{not json");
    s.send("[1, 2, 3]");
    s.send(&"x".repeat(1 << 20));
    assert_rpc_error(&s.call(2, "no_such_tool", json!({})), -32602);
    assert_rpc_error(&s.call(3, "run_python", json!({ "code": false })), -32602);

    // Hostile ids and paths go to the server percent-encoded, as one path segment: they name
    // nothing there.
    for (i, id) in ["../../v1/templates", "x/../../..", "%2e%2e", "a?b#c"]
        .iter()
        .enumerate()
    {
        let r = s.call(
            10 + i as u64,
            "run_python",
            json!({ "code": "1", "sandbox_id": id }),
        );
        assert_eq!(r["result"]["isError"], json!(true), "{id}: {r}");
        assert!(text(&r).contains("not_found"), "{id}: {r}");
    }
    let r = s.call(
        20,
        "write_file",
        json!({ "path": "sub dir/ü?#.txt", "content": "ok" }),
    );
    assert_ok(&r);
    let r = s.call(
        21,
        "read_file",
        json!({ "path": "/workspace/sub dir/ü?#.txt" }),
    );
    assert_eq!(text(&r), "ok");
    for (i, path) in ["../../etc/passwd", "/etc/passwd", "sub dir/../../x"]
        .iter()
        .enumerate()
    {
        let r = s.call(30 + i as u64, "read_file", json!({ "path": path }));
        assert_eq!(r["result"]["isError"], json!(true), "{path}: {r}");
    }
    let r = s.call(40, "run_python", json!({ "code": "6*7" }));
    assert_eq!(text(&r), "42");
    let listed: Value =
        serde_json::from_str(&text(&s.call(41, "list_sandboxes", json!({})))).unwrap();
    let own = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["this_session"] == json!(true))
        .unwrap()["sandbox_id"]
        .as_str()
        .unwrap()
        .to_string();

    // EOF: the process exits cleanly and the session's sandbox is deleted.
    drop(s.stdin.take());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = s.child.try_wait().unwrap() {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "sandlot mcp still running after EOF"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    assert!(
        !alive(&server, &own),
        "the session's sandbox outlived the session"
    );
}

#[test]
fn stdio_client_leaving_before_its_first_request_is_a_clean_exit() {
    let server = TestServer::start();
    for input in [
        &b""[..],
        b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"server/discover\"}\n",
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sandlot"))
            .args(["mcp", "--url", server.url()])
            .env("SANDLOT_API_KEY", server.key())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input).unwrap();
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn stdio_unreachable_server_is_a_tool_error() {
    // Nothing listens on this port (bound then dropped).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut s = StdioMcp::start(
        &format!("http://127.0.0.1:{port}"),
        "sl_aaaaaaaa_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    );
    s.send(
        &json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL, "capabilities": {},
            "clientInfo": { "name": "attack-test", "version": "0" } } })
        .to_string(),
    );
    s.reply(1);
    s.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }).to_string());
    let r = s.call(2, "run_python", json!({ "code": "1" }));
    assert_eq!(r["result"]["isError"], json!(true), "{r}");
    assert!(text(&r).contains("server_unreachable"), "{r}");
    // A URL that is not one fails at start, with a clear message.
    let out = Command::new(env!("CARGO_BIN_EXE_sandlot"))
        .args(["mcp", "--url", "not a url"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a server URL"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What a hostile "sandlot server" behind `--url` answers every request with.
#[derive(Clone, Copy)]
enum Hostile {
    /// 200 with a JSON content type and a chunked body that never ends.
    EndlessAnswer,
    /// 500 with a body that never ends.
    EndlessError,
    /// 307 to another listener on the host.
    RedirectTo(u16),
}

/// A fake server on 127.0.0.1 answering every request as `how` says; returns its port and
/// the number of body bytes it managed to send.
fn hostile_server(how: Hostile) -> (u16, std::sync::Arc<std::sync::atomic::AtomicU64>) {
    use std::sync::atomic::{AtomicU64, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let sent = std::sync::Arc::new(AtomicU64::new(0));
    let counter = sent.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let counter = counter.clone();
            std::thread::spawn(move || {
                let _ = conn.set_write_timeout(Some(Duration::from_secs(120)));
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if conn.read(&mut byte).unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let status = match how {
                    Hostile::EndlessAnswer => "200 OK",
                    Hostile::EndlessError => "500 Internal Server Error",
                    Hostile::RedirectTo(other) => {
                        let _ = write!(
                            conn,
                            "HTTP/1.1 307 Temporary Redirect\r\nLocation: \
                             http://127.0.0.1:{other}/v1/sandboxes\r\ncontent-length: 0\r\n\
                             connection: close\r\n\r\n"
                        );
                        return;
                    }
                };
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n\
                     transfer-encoding: chunked\r\n\r\n"
                );
                let chunk = format!("10000\r\n{}\r\n", " ".repeat(0x10000));
                while conn.write_all(chunk.as_bytes()).is_ok() {
                    counter.fetch_add(0x10000, Ordering::Relaxed);
                }
            });
        }
    });
    (port, sent)
}

fn stdio_session(url: &str, key: &str) -> StdioMcp {
    let mut s = StdioMcp::start(url, key);
    s.send(
        &json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL, "capabilities": {},
            "clientInfo": { "name": "attack-test", "version": "0" } } })
        .to_string(),
    );
    s.reply(1);
    s.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }).to_string());
    s
}

#[test]
fn stdio_hostile_server_answers_are_bounded() {
    use std::sync::atomic::Ordering;
    // An answer (or an error body) that never ends: the tool fails soon with a clear message,
    // after reading a bounded amount, instead of buffering until the call's timeout.
    for how in [Hostile::EndlessAnswer, Hostile::EndlessError] {
        let (port, sent) = hostile_server(how);
        let mut s = stdio_session(
            &format!("http://127.0.0.1:{port}"),
            "sl_aaaaaaaa_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        );
        let started = Instant::now();
        let r = s.call(2, "list_sandboxes", json!({}));
        assert_eq!(r["result"]["isError"], json!(true), "{r}");
        assert!(text(&r).contains("server_unreachable"), "{r}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{:?}",
            started.elapsed()
        );
        let read = sent.load(Ordering::Relaxed);
        assert!(read < 256 << 20, "{read} bytes read from the server");
        drop(s.stdin.take());
        let _ = s.child.wait();
    }

    // A redirect is not followed: the file's content goes nowhere but the server's URL.
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let other_port = other.local_addr().unwrap().port();
    other.set_nonblocking(true).unwrap();
    let (port, _) = hostile_server(Hostile::RedirectTo(other_port));
    let mut s = stdio_session(
        &format!("http://127.0.0.1:{port}"),
        "sl_aaaaaaaa_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    );
    let r = s.call(
        2,
        "write_file",
        json!({ "path": "secret.txt", "content": "top secret", "sandbox_id": "sb" }),
    );
    assert_eq!(r["result"]["isError"], json!(true), "{r}");
    assert!(text(&r).contains("307"), "{r}");
    assert!(
        other.accept().is_err(),
        "the redirect was followed to another listener"
    );
    drop(s.stdin.take());
    let _ = s.child.wait();
}

#[test]
fn http_host_and_page_checks_hold_for_every_spelling() {
    let server = TestServer::start();
    let mcp = Mcp::new(&server);
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    // DNS rebinding: whatever name resolves to 127.0.0.1, the Host is the attacker's. Names
    // that only look like loopback, or carry userinfo, are refused.
    for host in [
        "localhost.",
        "localhost.evil.example",
        "127.0.0.1.nip.io",
        "127.0.0.1@evil.example",
        "evil.example:7878",
        "[::ffff:127.0.0.1]",
        "0.0.0.0",
        "2130706433",
        "127.1",
        "",
    ] {
        let a = mcp.send(mcp.post().header("host", host).body(list.clone()));
        assert!(
            a.status == 403 || a.status == 400,
            "Host {host:?}: {} {}",
            a.status,
            a.text
        );
        assert!(
            a.messages
                .first()
                .is_some_and(|m| m["error"]["code"].is_i64()),
            "{host:?}: {}",
            a.text
        );
    }
    // Loopback spellings pass the check (and get MCP's own answer: no session yet).
    for host in ["localhost:1", "LOCALHOST", "127.0.0.1", "[::1]:7878"] {
        let a = mcp.send(mcp.post().header("host", host).body(list.clone()));
        assert_refused(&a, 400, -32600);
    }
    // A request with no Host at all (HTTP/1.0) is refused too.
    let addr = server.url().trim_start_matches("http://").to_string();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "POST /mcp HTTP/1.0\r\n{}Content-Type: application/json\r\nAccept: application/json, \
         text/event-stream\r\nContent-Length: {}\r\n\r\n{list}",
        server.auth_line(),
        list.len()
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert!(
        out.starts_with("HTTP/1.0 400") || out.starts_with("HTTP/1.1 400"),
        "{out}"
    );

    // Pages: a browser tags every request a page makes with Sec-Fetch-Site, whichever site
    // the page is on (an app served through the ports route is same-origin); all are refused.
    // Clients (no header, or `none` for what a user typed) pass.
    for site in ["same-origin", "same-site", "cross-site", "SAME-ORIGIN", ""] {
        let a = mcp.send(mcp.post().header("sec-fetch-site", site).body(list.clone()));
        assert_eq!(a.status, 403, "Sec-Fetch-Site {site:?}: {}", a.text);
    }
    let a = mcp.send(
        mcp.post()
            .header("sec-fetch-site", "none")
            .body(list.clone()),
    );
    assert_refused(&a, 400, -32600);
    // Origins that only look local.
    for origin in [
        "null",
        "http://localhost.evil.example",
        "http://127.0.0.1.nip.io:7878",
        "https://localhost:7878",
        "file://",
    ] {
        let a = mcp.send(mcp.post().header("origin", origin).body(list.clone()));
        assert_refused(&a, 403, -32600);
    }
}

/// The ids `list_sandboxes` shows a session.
fn listed_ids(mcp: &mut Mcp) -> Vec<String> {
    let reply = mcp.call("list_sandboxes", json!({}));
    assert_ok(&reply);
    let listed: Value = serde_json::from_str(&text(&reply)).unwrap();
    listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sandbox_id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn http_sessions_act_for_their_key_and_see_only_their_tenant() {
    let server = TestServer::start();
    // Tenant b may hold two sandboxes, and waits at most half a second for room.
    let b_key = server
        .tenant("b")
        .quotas(json!({ "max_sandboxes": 2, "wait_seconds": 0.5 }))
        .key();
    let mut a = Mcp::new(&server);
    a.initialize();
    let mut b = Mcp::new(&server);
    b.http = server.client_with_key(Some(&b_key));
    b.initialize();

    // B's own sandbox and one it creates are tenant b's, as /v1 with B's key says.
    assert_ok(&b.call("run_python", json!({ "code": "x = 41" })));
    let b_own = own_sandbox(&mut b);
    let created = b.call("create_sandbox", json!({}));
    assert_ok(&created);
    let created: Value = serde_json::from_str(&text(&created)).unwrap();
    let b_shared = created["sandbox_id"].as_str().unwrap().to_owned();
    let b_v1 = server.client_with_key(Some(&b_key));
    for id in [&b_own, &b_shared] {
        let r = b_v1
            .get(format!("{}/v1/sandboxes/{id}", server.url()))
            .send()
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.json::<Value>().unwrap()["tenant"], "b");
        // The admin of tenant default does not see it through /v1 either.
        assert_eq!(server.get(&format!("/v1/sandboxes/{id}")).status, 404);
    }

    // A's session: its own sandbox is tenant default's; lists show each tenant its own.
    assert_ok(&a.call("run_python", json!({ "code": "1" })));
    let a_own = own_sandbox(&mut a);
    assert_eq!(
        server.get(&format!("/v1/sandboxes/{a_own}")).body["tenant"],
        "default"
    );
    let a_list = listed_ids(&mut a);
    assert!(a_list.contains(&a_own), "{a_list:?}");
    assert!(
        !a_list.contains(&b_own) && !a_list.contains(&b_shared),
        "{a_list:?}"
    );
    let mut b_list = listed_ids(&mut b);
    b_list.sort();
    let mut want = vec![b_own.clone(), b_shared.clone()];
    want.sort();
    assert_eq!(b_list, want);

    // Every tool naming B's sandboxes answers A exactly as for a sandbox that does not
    // exist (the id aside), and changes nothing.
    let calls: Vec<(&str, Value)> = vec![
        ("run_python", json!({ "code": "x = 0" })),
        ("run_bash", json!({ "code": "rm -rf /workspace/*" })),
        ("write_file", json!({ "path": "pwned.txt", "content": "x" })),
        ("read_file", json!({ "path": "secret.txt" })),
        ("list_files", json!({})),
        ("fork_sandbox", json!({})),
        ("pause_sandbox", json!({})),
        ("resume_sandbox", json!({})),
        ("snapshot_sandbox", json!({})),
        ("delete_sandbox", json!({})),
    ];
    let missing = "sb_doesnotexist0000000000";
    for (tool, args) in &calls {
        let mut with = |id: &str| {
            let mut args = args.clone();
            args["sandbox_id"] = json!(id);
            let reply = a.call(tool, args);
            assert_eq!(reply["result"]["isError"], json!(true), "{tool}: {reply}");
            text(&reply)
        };
        let unknown = with(missing);
        assert!(unknown.contains("sandbox_not_found"), "{tool}: {unknown}");
        for id in [&b_own, &b_shared] {
            let foreign = with(id);
            assert_eq!(foreign.replace(id.as_str(), missing), unknown, "{tool}");
        }
    }
    // Nor through a creation from B's snapshot.
    let snap = b.call("snapshot_sandbox", json!({}));
    assert_ok(&snap);
    let snap: Value = serde_json::from_str(&text(&snap)).unwrap();
    let snap_id = snap["snapshot_id"].as_str().unwrap();
    let reply = a.call("create_sandbox", json!({ "from_snapshot": snap_id }));
    assert_eq!(reply["result"]["isError"], json!(true), "{reply}");
    assert!(text(&reply).contains("snapshot_not_found"), "{reply}");
    // B's sandboxes are untouched.
    let reply = b.call("run_python", json!({ "code": "x + 1" }));
    assert_ok(&reply);
    assert!(text(&reply).contains("42"), "{reply}");
    assert!(alive(&server, &a_own));
    let r = b_v1
        .get(format!("{}/v1/sandboxes/{b_shared}", server.url()))
        .send()
        .unwrap();
    assert_eq!(r.json::<Value>().unwrap()["state"], "running");

    // B's quota (two sandboxes) holds through MCP: a third waits, then is refused clearly.
    let started = Instant::now();
    let reply = b.call("create_sandbox", json!({}));
    assert_eq!(reply["result"]["isError"], json!(true), "{reply}");
    assert!(
        text(&reply).contains("tenant_quota_exceeded"),
        "{}",
        text(&reply)
    );
    assert!(started.elapsed() >= Duration::from_millis(400));
    // A (tenant default, no quotas) is not held by B's.
    assert_ok(&a.call("create_sandbox", json!({})));

    // B's session with another key: answered as a session that does not exist, on every
    // method; a key that is not one is refused before.
    let c_key = server.tenant("c").quotas(json!({})).key();
    let r = server.post("/v1/keys", &json!({ "tenant": "b" }));
    assert_eq!(r.status, 201);
    let b_second_key = r.body["key"].as_str().unwrap().to_owned();
    let mut unknown = Mcp::new(&server);
    unknown.session = Some("not-a-session".into());
    let (_, never) = unknown.request("tools/list", json!({}));
    assert_refused(&never, 404, -32001);
    for key in [server.key().to_owned(), b_second_key, c_key] {
        let mut thief = Mcp::new(&server);
        thief.http = server.client_with_key(Some(&key));
        thief.session = b.session.clone();
        let (_, got) = thief.request("tools/list", json!({}));
        assert_refused(&got, 404, -32001);
        assert_eq!(got.messages[0]["error"], never.messages[0]["error"]);
        let got = thief.delete();
        assert_refused(&got, 404, -32001);
        let got = thief.send(
            thief
                .http
                .get(thief.url())
                .header("accept", "text/event-stream")
                .header("mcp-session-id", b.session.clone().unwrap()),
        );
        assert_refused(&got, 404, -32001);
    }
    for bad in [
        None,
        Some("sl_aaaaaaaa_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"),
        Some("nonsense"),
    ] {
        let mut thief = Mcp::new(&server);
        thief.http = server.client_with_key(bad);
        thief.session = b.session.clone();
        let (_, got) = thief.request("tools/list", json!({}));
        assert_refused(&got, 401, -32001);
    }
    // B's session still works, and ending it deletes its own sandbox only.
    assert_ok(&b.call("run_python", json!({ "code": "x" })));
    let ended = b.delete();
    assert!(ended.status == 200 || ended.status == 204, "{}", ended.text);
    wait_until("B's own sandbox deleted", Duration::from_secs(30), || {
        let r = b_v1
            .get(format!("{}/v1/sandboxes/{b_own}", server.url()))
            .send()
            .unwrap();
        // Ended: 410 `sandbox_gone` (or its record, deleted).
        let status = r.status().as_u16();
        let body: Value = r.json().unwrap_or(Value::Null);
        status == 410 || body["state"] == "deleted"
    });
    assert!(alive(&server, &a_own));
}

#[test]
fn stdio_acts_for_its_key_tenant() {
    // `sandlot mcp` calls the server's /v1 with its key: its tools see that key's tenant only.
    let server = TestServer::start();
    let b_key = server.tenant("b").quotas(json!({})).key();
    let a_id = server.create_sandbox();
    let mut b = stdio_session(server.url(), &b_key);
    let r = b.call(2, "create_sandbox", json!({}));
    assert_ok(&r);
    let created: Value = serde_json::from_str(&text(&r)).unwrap();
    let b_id = created["sandbox_id"].as_str().unwrap().to_owned();
    assert_eq!(server.get(&format!("/v1/sandboxes/{b_id}")).status, 404);
    let r = b.call(3, "list_sandboxes", json!({}));
    assert_ok(&r);
    let listed = text(&r);
    assert!(
        listed.contains(&b_id) && !listed.contains(&a_id),
        "{listed}"
    );
    for (i, tool) in ["run_python", "read_file", "delete_sandbox"]
        .iter()
        .enumerate()
    {
        let mut args = json!({ "sandbox_id": a_id });
        if *tool == "run_python" {
            args["code"] = json!("1");
        }
        if *tool == "read_file" {
            args["path"] = json!("x");
        }
        let r = b.call(10 + i as u64, tool, args);
        assert_eq!(r["result"]["isError"], json!(true), "{tool}: {r}");
        assert!(text(&r).contains("sandbox_not_found"), "{tool}: {r}");
    }
    assert!(alive(&server, &a_id));
}

/// Asserts a tool error carrying `policy_denied` and naming `what` (a policy id, a gate).
#[track_caller]
fn assert_tool_denied(reply: &Value, what: &str) {
    assert_eq!(reply["result"]["isError"], json!(true), "{reply}");
    let t = text(reply);
    assert!(
        t.contains("policy_denied") && t.contains(what),
        "names {what}: {t}"
    );
}

#[test]
fn http_tools_pass_the_policy() {
    let server = TestServer::start();
    let mut a = Mcp::new(&server);
    a.initialize();

    // --- execute: the shipped code-size cap.
    let cap = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples/policies/code-size-cap.cedar"),
    )
    .unwrap();
    assert_eq!(server.put_bytes("/v1/policies", cap).status, 200);
    let short = a.call("run_python", json!({ "code": "print(6 * 7)" }));
    assert_ok(&short);
    assert_eq!(text(&short), "42\n");
    let own = own_sandbox(&mut a);
    let long = format!("x = 1\n#{}\nprint('ran')", "a".repeat(10_001));
    let denied = a.call("run_python", json!({ "code": long }));
    assert_tool_denied(&denied, "code-size-cap");
    assert!(!text(&denied).contains("ran\n"), "{denied}");
    let denied = a.call(
        "run_bash",
        json!({ "code": format!("# {}\necho ran", "b".repeat(10_001)) }),
    );
    assert_tool_denied(&denied, "code-size-cap");
    let sb = format!("Sandbox::\"{own}\"");
    let r = server.get("/v1/decisions?gate=execute&limit=20");
    let mine: Vec<&Value> = r.body["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["resource"] == sb && d["allowed"] == false)
        .collect();
    assert_eq!(mine.len(), 2, "{:#?}", r.body);
    for d in mine {
        assert_eq!(d["policies"], json!(["code-size-cap"]), "{d:#}");
        // Decided for the session's key, not for the sandbox.
        assert!(
            !d["key_id"].as_str().unwrap().starts_with("sandbox"),
            "{d:#}"
        );
    }

    // --- files: writes of secret*, reads of private*, list_files too.
    assert_eq!(
        server
            .put_bytes("/v1/policies", common::file_policies())
            .status,
        200
    );
    for path in [
        "secret.txt",
        "./secret.txt",
        "/workspace/secret.txt",
        "/workspace//secret",
    ] {
        let r = a.call("write_file", json!({ "path": path, "content": "nope" }));
        assert_tool_denied(&r, "no-secret-writes");
    }
    assert_ok(&a.call(
        "write_file",
        json!({ "path": "notes.txt", "content": "fine" }),
    ));
    assert_ok(&a.call(
        "run_bash",
        json!({ "code": "echo hidden > private.txt; mkdir -p private-d" }),
    ));
    let ls = a.call("run_bash", json!({ "code": "ls" }));
    assert!(
        !text(&ls).contains("secret"),
        "a refused write left a file: {ls}"
    );
    for (tool, args) in [
        ("read_file", json!({ "path": "private.txt" })),
        ("read_file", json!({ "path": "/workspace/./private.txt" })),
        ("list_files", json!({ "path": "private-d" })),
    ] {
        let r = a.call(tool, args);
        assert_tool_denied(&r, "no-private-reads");
        assert!(!text(&r).contains("hidden"), "{r}");
    }
    assert_ok(&a.call("list_files", json!({})));
    let r = server.get("/v1/decisions?gate=write_file&limit=20");
    let d = r.body["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["allowed"] == false)
        .cloned()
        .expect("the refused write is recorded");
    assert_eq!(d["policies"], json!(["no-secret-writes"]), "{d:#}");

    // --- read_file's bytes pass the output guardrails: a secret comes back redacted.
    const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let secret: String = std::iter::once("ghp_".to_owned())
        .chain((0..36).map(|i| (ALNUM[(i * 17 + 5) % 62] as char).to_string()))
        .collect();
    assert_ok(&a.call(
        "write_file",
        json!({ "path": "config.txt", "content": format!("user = alice\ntoken = {secret}\n") }),
    ));
    let r = a.call("read_file", json!({ "path": "config.txt" }));
    assert_ok(&r);
    let t = text(&r);
    assert!(!t.contains(&secret), "the secret left: {t}");
    assert!(
        t.contains("[REDACTED:github-token]") && t.contains("user = alice"),
        "{t}"
    );
    // A policy that withholds secrets: the file is refused, nothing of it returned.
    let file_policies = common::file_policies();
    let withhold = format!(
        "{file_policies}\n@id(\"withhold-secrets\")\n@reason(\"secrets are withheld\")\n\
         permit (principal, action == Sandlot::Action::\"output_withhold\", resource)\n\
         when {{ context.kind == \"secret\" }};\n"
    );
    assert_eq!(server.put_bytes("/v1/policies", withhold).status, 200);
    let r = a.call("read_file", json!({ "path": "config.txt" }));
    assert_tool_denied(&r, "withheld");
    assert!(!text(&r).contains("alice"), "{r}");
    assert_eq!(
        server
            .put_bytes("/v1/policies", common::file_policies())
            .status,
        200
    );

    // --- creation: a free tenant's session asking for the trusted tier is refused.
    let free_key = server.tenant("freebie").quotas(json!({})).key();
    let mut f = Mcp::new(&server);
    f.http = server.client_with_key(Some(&free_key));
    f.initialize();
    let r = f.call("create_sandbox", json!({ "tier": "trusted" }));
    assert_tool_denied(&r, "select_tier");
    assert!(
        listed_ids(&mut f).is_empty(),
        "a refused creation left a sandbox"
    );
    let r = f.call("create_sandbox", json!({ "tier": "isolated" }));
    assert_ok(&r);
    let made: Value = serde_json::from_str(&text(&r)).unwrap();
    let made = made["sandbox_id"].as_str().unwrap().to_owned();
    let v1 = server.client_with_key(Some(&free_key));
    let got: Value = v1
        .get(format!("{}/v1/sandboxes/{made}", server.url()))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(got["tier"], "isolated", "{got:#}");
    assert_ok(&f.call("delete_sandbox", json!({ "sandbox_id": made })));
    let r = f.call("create_sandbox", json!({ "tier": "root" }));
    assert_eq!(r["result"]["isError"], json!(true), "{r}");
    assert!(text(&r).contains("invalid_argument"), "{r}");
    // The local plan may have it.
    let r = a.call("create_sandbox", json!({ "tier": "trusted" }));
    assert_ok(&r);
    let made: Value = serde_json::from_str(&text(&r)).unwrap();
    let made = made["sandbox_id"].as_str().unwrap().to_owned();
    assert_eq!(
        server.get(&format!("/v1/sandboxes/{made}")).body["tier"],
        "trusted"
    );
    assert_ok(&a.call("delete_sandbox", json!({ "sandbox_id": made })));

    // --- the session's own sandbox, made on first use, passes the creation gate too.
    let file_policies = common::file_policies();
    let no_freebie = format!(
        "{file_policies}\n@id(\"no-freebie-sandboxes\")\n@reason(\"freebie creates no sandboxes\")\n\
         forbid (principal, action == Sandlot::Action::\"create_sandbox\", resource)\n\
         when {{ principal.tenant == Sandlot::Tenant::\"freebie\" }};\n"
    );
    let r = server.put_bytes("/v1/policies", no_freebie);
    assert_eq!(r.status, 200, "{:?}", r.body);
    let r = f.call("run_python", json!({ "code": "1 + 1" }));
    assert_tool_denied(&r, "no-freebie-sandboxes");
    assert!(listed_ids(&mut f).is_empty());
    // Other tenants are not affected.
    assert_ok(&a.call("run_python", json!({ "code": "1 + 1" })));
    f.delete();
    a.delete();
}

#[test]
fn run_python_and_run_bash_can_roll_back_a_failure() {
    let server = TestServer::start();
    let mut mcp = Mcp::new(&server);
    mcp.initialize();
    assert_ok(&mcp.call(
        "run_python",
        json!({"code": "x = 1\nopen('/workspace/k.txt', 'w').write('k')"}),
    ));
    let r = mcp.call(
        "run_python",
        json!({"code": "import os\nx = 2\nos.remove('/workspace/k.txt')\nraise ValueError('v')", "on_failure": "rollback"}),
    );
    assert_eq!(r["result"]["isError"], json!(true), "{r}");
    assert!(text(&r).contains("[rolled back (error)"), "{r}");
    let r = mcp.call(
        "run_bash",
        json!({"code": "rm /workspace/k.txt; exit 3", "on_failure": "rollback"}),
    );
    assert!(text(&r).contains("[rolled back (error)"), "{r}");
    let r = mcp.call(
        "run_python",
        json!({"code": "(x, open('/workspace/k.txt').read())"}),
    );
    assert_ok(&r);
    assert!(text(&r).contains("(1, 'k')"), "{r}");
    // Anything but keep or rollback is invalid params, and nothing ran.
    let r = mcp.call(
        "run_python",
        json!({"code": "x = 3", "on_failure": "sometimes"}),
    );
    assert_rpc_error(&r, -32602);
    assert!(text(&mcp.call("run_python", json!({"code": "x"}))).contains('1'));
}
