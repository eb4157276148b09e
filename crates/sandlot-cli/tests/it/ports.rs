//! The ports route against a real server and real sandboxes: apps started inside a sandbox
//! (`python -m http.server`, a request-reflecting app, a WebSocket echo server written with the
//! standard library) answer through `/v1/sandboxes/{id}/ports/{port}/...`, with a real HTTP
//! client and a real WebSocket client; ports not exposed, nothing listening, bad port lists;
//! hostile paths, absolute-form targets and foreign `Host` headers cannot point the proxy
//! anywhere but `127.0.0.1:<port>` inside that sandbox; the sandbox still cannot reach the host.

use crate::common;

use common::TestServer;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

/// A server that answers every method with what it received, as JSON, plus headers the proxy
/// must not pass on (`Service-Worker-Allowed`, a header its `Connection` names).
const REFLECT_APP: &str = r#"
import http.server, json, sys

class Reflect(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def reflect(self):
        n = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(n) if n else b""
        out = json.dumps({
            "method": self.command,
            "path": self.path,
            "headers": [[k.lower(), v] for k, v in self.headers.items()],
            "body_len": len(body),
            "body_head": body[:64].decode("latin-1"),
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.send_header("X-App", "reflect")
        self.send_header("Service-Worker-Allowed", "/")
        self.send_header("Connection", "keep-alive, X-Hop")
        self.send_header("X-Hop", "1")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(out)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = reflect

    def log_message(self, *args):
        pass

http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Reflect).serve_forever()
"#;

/// A WebSocket echo server with the standard library only (RFC 6455: handshake, masked client
/// frames, text/binary echoed, ping answered, close returned). Its first message says the path
/// it was reached at.
const WS_ECHO_APP: &str = r#"
import base64, hashlib, socket, struct, sys, threading

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

def recv_exact(c, n):
    b = b""
    while len(b) < n:
        chunk = c.recv(n - len(b))
        if not chunk:
            raise EOFError
        b += chunk
    return b

def send(c, op, payload):
    n = len(payload)
    if n < 126:
        head = struct.pack(">BB", 128 | op, n)
    elif n < 65536:
        head = struct.pack(">BBH", 128 | op, 126, n)
    else:
        head = struct.pack(">BBQ", 128 | op, 127, n)
    c.sendall(head + payload)

def serve(c):
    try:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = c.recv(4096)
            if not chunk:
                return
            data += chunk
        head = data.split(b"\r\n\r\n")[0].decode()
        lines = head.split("\r\n")
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        accept = base64.b64encode(
            hashlib.sha1((headers["sec-websocket-key"] + GUID).encode()).digest()).decode()
        c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                   "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n" % accept).encode())
        send(c, 1, ("path " + lines[0].split(" ")[1]).encode())
        while True:
            b0, b1 = recv_exact(c, 2)
            op, n = b0 & 15, b1 & 127
            if n == 126:
                n = struct.unpack(">H", recv_exact(c, 2))[0]
            elif n == 127:
                n = struct.unpack(">Q", recv_exact(c, 8))[0]
            mask = recv_exact(c, 4) if b1 & 128 else b"\0\0\0\0"
            payload = bytes(x ^ mask[i % 4] for i, x in enumerate(recv_exact(c, n)))
            if op == 8:
                send(c, 8, payload[:2])
                return
            if op == 9:
                send(c, 10, payload)
            elif op in (1, 2):
                send(c, op, payload)
    except (EOFError, OSError, KeyError):
        pass
    finally:
        c.close()

s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(16)
while True:
    conn, _ = s.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"#;

/// An app that answers badly: a response head of 1 MiB, bytes that are not HTTP, or nothing
/// before it closes, depending on the path.
const BAD_APP: &str = r#"
import socket, sys, threading

def serve(c):
    try:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = c.recv(4096)
            if not chunk:
                return
            data += chunk
        path = data.split(b" ")[1]
        if path == b"/huge":
            c.sendall(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n")
        elif path == b"/garbage":
            c.sendall(b"SSH-2.0-OpenSSH\r\n\r\n")
        elif path == b"/many":
            many = b"".join(b"X-%d: 1\r\n" % i for i in range(500))
            c.sendall(b"HTTP/1.1 200 OK\r\n" + many + b"Content-Length: 0\r\n\r\n")
    except OSError:
        pass
    finally:
        c.close()

s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(16)
while True:
    threading.Thread(target=serve, args=(s.accept()[0],), daemon=True).start()
"#;

const HTTP_PORT: u16 = 8000;
const REFLECT_PORT: u16 = 8001;
const SILENT_PORT: u16 = 8002;
const BAD_PORT: u16 = 8003;
const V6_PORT: u16 = 8004;
const WS_PORT: u16 = 8765;

/// Starts `args` in the background inside the sandbox and waits until it accepts on `port`.
fn start_app(server: &TestServer, id: &str, args: &str, port: u16) {
    let code = format!(
        "import socket, subprocess, sys, time\n\
         subprocess.Popen([sys.executable, {args}], stdout=subprocess.DEVNULL, \
         stderr=subprocess.DEVNULL, start_new_session=True, cwd='/workspace')\n\
         for _ in range(400):\n\
         \x20   try:\n\
         \x20       socket.create_connection(('127.0.0.1', {port}), timeout=1).close()\n\
         \x20       break\n\
         \x20   except OSError:\n\
         \x20       time.sleep(0.05)\n\
         else:\n\
         \x20   raise RuntimeError('the app did not start')\n"
    );
    let r = server.execute(id, &code);
    assert!(r["error"].is_null(), "starting {args}: {r}");
}

fn port_path(id: &str, port: u16, rest: &str) -> String {
    format!("/v1/sandboxes/{id}/ports/{port}{rest}")
}

/// Sends `raw` (a whole HTTP/1.1 request, sent as it is) to the server; returns the status and
/// the body of the answer.
fn raw_request(server: &TestServer, raw: &str) -> (u16, String) {
    let addr = server.url().trim_start_matches("http://").to_string();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(server.authorize(raw).as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// The value of a header the reflecting app received.
fn received<'a>(reflected: &'a Value, name: &str) -> Option<&'a str> {
    reflected["headers"]
        .as_array()?
        .iter()
        .find(|h| h[0] == name)
        .and_then(|h| h[1].as_str())
}

#[test]
fn apps_in_a_sandbox_answer_through_the_port_route() {
    let server = TestServer::start();
    let sb = server.create_sandbox_with(&json!({
        "ports": [WS_PORT, REFLECT_PORT, HTTP_PORT, SILENT_PORT, HTTP_PORT, BAD_PORT, V6_PORT]
    }));
    assert_eq!(
        sb["ports"],
        json!([
            HTTP_PORT,
            REFLECT_PORT,
            SILENT_PORT,
            BAD_PORT,
            V6_PORT,
            WS_PORT
        ])
    );
    assert!(sb.get("all_ports").is_none(), "{sb}");
    let id = sb["id"].as_str().unwrap().to_string();

    // Files the apps serve and run.
    let big: Vec<u8> = (0..(6 << 20)).map(|i| (i % 251) as u8).collect();
    let files = [
        ("site/hello.txt", b"hello from the sandbox\n".to_vec()),
        ("site/big.bin", big.clone()),
        ("reflect.py", REFLECT_APP.as_bytes().to_vec()),
        ("ws_echo.py", WS_ECHO_APP.as_bytes().to_vec()),
        ("bad.py", BAD_APP.as_bytes().to_vec()),
    ];
    for (path, bytes) in files {
        server
            .put_bytes(&format!("/v1/sandboxes/{id}/files/{path}"), bytes)
            .expect(201);
    }
    start_app(
        &server,
        &id,
        &format!(
            "'-m', 'http.server', '{HTTP_PORT}', '--bind', '127.0.0.1', '--directory', 'site'"
        ),
        HTTP_PORT,
    );
    start_app(
        &server,
        &id,
        &format!("'reflect.py', '{REFLECT_PORT}'"),
        REFLECT_PORT,
    );
    start_app(&server, &id, &format!("'ws_echo.py', '{WS_PORT}'"), WS_PORT);
    start_app(&server, &id, &format!("'bad.py', '{BAD_PORT}'"), BAD_PORT);
    // Bound to IPv6 loopback only, as apps that bind `localhost` may be.
    let r = server.execute(
        &id,
        &format!(
            "import subprocess, sys, time, socket\n\
             subprocess.Popen([sys.executable, '-m', 'http.server', '{V6_PORT}', '--bind', '::1', \
             '--directory', 'site'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, \
             start_new_session=True, cwd='/workspace')\n\
             for _ in range(400):\n\
             \x20   try:\n\
             \x20       socket.create_connection(('::1', {V6_PORT}), timeout=1).close()\n\
             \x20       break\n\
             \x20   except OSError:\n\
             \x20       time.sleep(0.05)\n"
        ),
    );
    assert!(r["error"].is_null(), "{r}");

    // python -m http.server: a file, a large file streamed whole, the directory listing with
    // and without the trailing slash.
    let (status, _, body) = server.get_bytes(&port_path(&id, HTTP_PORT, "/hello.txt"));
    assert_eq!(
        (status, body.as_slice()),
        (200, &b"hello from the sandbox\n"[..])
    );
    let (status, headers, body) = server.get_bytes(&port_path(&id, HTTP_PORT, "/big.bin"));
    assert_eq!(status, 200);
    assert_eq!(headers["content-length"], big.len().to_string().as_str());
    assert!(body == big, "the large file came back changed");
    for rest in ["", "/", "/?x=1"] {
        let r = server.get(&port_path(&id, HTTP_PORT, rest));
        assert_eq!(r.status, 200, "{rest:?}: {}", r.text);
        assert!(r.text.contains("hello.txt"), "{rest:?}: {}", r.text);
    }
    server
        .get(&port_path(&id, HTTP_PORT, "/missing"))
        .expect(404);
    let (status, _, body) = server.get_bytes(&port_path(&id, V6_PORT, "/hello.txt"));
    assert_eq!(
        (status, body.as_slice()),
        (200, &b"hello from the sandbox\n"[..])
    );

    reflect_forwards_what_it_should(&server, &id);
    hostile_targets_stay_in_the_sandbox(&server, &id);
    websocket_echoes(&server, &id);

    // Many requests at once, each its own connection into the sandbox.
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..32)
            .map(|i| {
                let (server, id) = (&server, &id);
                scope.spawn(move || {
                    let r = server.get(&port_path(id, REFLECT_PORT, &format!("/n/{i}")));
                    assert_eq!(r.status, 200, "{}", r.text);
                    assert_eq!(r.body["path"], format!("/n/{i}"));
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    });
    no_server_thread_is_left_in_a_sandbox_network(&server);

    // Refusals: a port not exposed, nothing listening, unknown sandbox, bad port numbers.
    server
        .get(&port_path(&id, 9999, "/"))
        .expect_error(403, "port_not_exposed");
    server
        .post(&port_path(&id, 22, "/x"), &json!({}))
        .expect_error(403, "port_not_exposed");
    let silent = server.get(&port_path(&id, SILENT_PORT, "/"));
    silent.expect_error(502, "port_unreachable");
    assert!(
        silent.message().contains("nothing listens"),
        "{}",
        silent.text
    );
    // An app that answers badly gets the client a 502, never a hang or a broken server.
    for path in ["/huge", "/garbage", "/many", "/closes"] {
        let r = server.get(&port_path(&id, BAD_PORT, path));
        r.expect_error(502, "port_unreachable");
    }
    server
        .get(&port_path("sb_doesnotexist", HTTP_PORT, "/"))
        .expect_error(404, "sandbox_not_found");
    for bad in ["0", "65536", "http", "-1", "80.5"] {
        server
            .get(&format!("/v1/sandboxes/{id}/ports/{bad}/"))
            .expect_error(400, "invalid_request");
    }

    // The sandbox still reaches nothing outside: not a listener on the host's loopback, not the
    // server itself.
    let host = TcpListener::bind("127.0.0.1:0").unwrap();
    host.set_nonblocking(true).unwrap();
    let host_port = host.local_addr().unwrap().port();
    let server_port = server.url().rsplit(':').next().unwrap().to_string();
    let r = server.execute(
        &id,
        &format!(
            "import socket\nout = []\nfor p in ({host_port}, {server_port}):\n\
             \x20   try:\n\
             \x20       socket.create_connection(('127.0.0.1', p), timeout=2)\n\
             \x20       out.append('connected')\n\
             \x20   except OSError as e:\n\
             \x20       out.append(type(e).__name__)\n\
             out"
        ),
    );
    let text = r["result"]["text/plain"].as_str().unwrap_or("");
    assert_eq!(r["end_state"], "ok", "{r}");
    assert!(!text.contains("connected"), "{r}");
    assert!(host.accept().is_err(), "the sandbox reached the host");

    server.delete(&format!("/v1/sandboxes/{id}")).expect(204);
    server
        .get(&port_path(&id, HTTP_PORT, "/"))
        .expect_error(410, "sandbox_gone");
}

/// Every thread of the server is in the server's own network namespace: the threads that
/// entered a sandbox's to make a socket have exited.
fn no_server_thread_is_left_in_a_sandbox_network(server: &TestServer) {
    let ns = |path: String| std::fs::read_link(path).ok();
    let own = ns(format!("/proc/{}/ns/net", server.pid())).expect("the server's netns");
    let tasks = std::fs::read_dir(format!("/proc/{}/task", server.pid())).unwrap();
    for task in tasks.flatten() {
        let tid = task.file_name().to_string_lossy().into_owned();
        if let Some(theirs) = ns(format!("/proc/{}/task/{tid}/ns/net", server.pid())) {
            assert_eq!(
                theirs, own,
                "server thread {tid} is in another network namespace"
            );
        }
    }
}

/// Methods and bodies pass through; the app sees its own `Host`, the client's in
/// `X-Forwarded-Host`, and no hop-by-hop headers or server credentials; the client sees no
/// hop-by-hop headers nor `Service-Worker-Allowed` of the app.
fn reflect_forwards_what_it_should(server: &TestServer, id: &str) {
    let client = server.client();
    let url = format!(
        "{}{}",
        server.url(),
        port_path(id, REFLECT_PORT, "/api/items?q=1&r=a%20b")
    );
    let body = vec![b'z'; 3 << 20];
    let resp = client
        .post(&url)
        .header("x-api-key", "e2b_secret")
        .header("x-access-token", "secret")
        .header("e2b-traffic-access-token", "secret")
        .header("cookie", "session=1")
        .header("x-forwarded-host", "spoofed.test")
        .header("te", "trailers")
        .body(body.clone())
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-app"], "reflect");
    assert!(resp.headers().get("service-worker-allowed").is_none());
    assert!(resp.headers().get("x-hop").is_none());
    let seen: Value = resp.json().unwrap();
    assert_eq!(seen["method"], "POST");
    assert_eq!(seen["path"], "/api/items?q=1&r=a%20b");
    assert_eq!(seen["body_len"], body.len());
    assert_eq!(
        received(&seen, "host"),
        Some(format!("127.0.0.1:{REFLECT_PORT}").as_str())
    );
    let server_host = server.url().trim_start_matches("http://");
    assert_eq!(received(&seen, "x-forwarded-host"), Some(server_host));
    assert_eq!(received(&seen, "x-forwarded-proto"), Some("http"));
    assert_eq!(
        received(&seen, "x-forwarded-prefix"),
        Some(port_path(id, REFLECT_PORT, "").as_str())
    );
    assert_eq!(received(&seen, "cookie"), Some("session=1"));
    for gone in [
        // sandlot's API key opened the route: the app never gets it.
        "authorization",
        "x-api-key",
        "x-access-token",
        "e2b-traffic-access-token",
        "te",
    ] {
        assert_eq!(
            received(&seen, gone),
            None,
            "{gone} reached the app: {seen}"
        );
    }

    for method in ["GET", "PUT", "DELETE", "PATCH", "OPTIONS"] {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let r = client
            .request(
                m,
                format!("{}{}", server.url(), port_path(id, REFLECT_PORT, "/m")),
            )
            .send()
            .unwrap();
        assert_eq!(r.status(), 200, "{method}");
        let seen: Value = r.json().unwrap();
        assert_eq!(seen["method"], method);
    }
    let head = client
        .head(format!(
            "{}{}",
            server.url(),
            port_path(id, REFLECT_PORT, "/h")
        ))
        .send()
        .unwrap();
    assert_eq!(head.status(), 200);
}

/// `..` segments, encoded slashes, absolute-form targets and foreign `Host` headers reach the
/// same app in the same sandbox (which sees them as a path), never another destination.
fn hostile_targets_stay_in_the_sandbox(server: &TestServer, id: &str) {
    let host = TcpListener::bind("127.0.0.1:0").unwrap();
    host.set_nonblocking(true).unwrap();
    let host_port = host.local_addr().unwrap().port();
    let prefix = port_path(id, REFLECT_PORT, "");
    let cases = [
        (
            format!("GET {prefix}/../../../../v1/health HTTP/1.1\r\nHost: x\r\n"),
            "/../../../../v1/health".to_string(),
        ),
        (
            // Another port named after `..`: still this port's app.
            format!("GET {prefix}/../{HTTP_PORT}/hello.txt HTTP/1.1\r\nHost: x\r\n"),
            format!("/../{HTTP_PORT}/hello.txt"),
        ),
        (
            format!("GET {prefix}/%2e%2e/%2e%2e/v1/sandboxes HTTP/1.1\r\nHost: x\r\n"),
            "/%2e%2e/%2e%2e/v1/sandboxes".to_string(),
        ),
        (
            format!("GET {prefix}/a%2F..%2F..%2Fb?c=%2F HTTP/1.1\r\nHost: x\r\n"),
            "/a%2F..%2F..%2Fb?c=%2F".to_string(),
        ),
        (
            // Python's http.server folds the leading `//` of a path (its own defence).
            format!("GET {prefix}//127.0.0.1:{host_port}/x HTTP/1.1\r\nHost: x\r\n"),
            format!("/127.0.0.1:{host_port}/x"),
        ),
        (
            format!(
                "GET http://127.0.0.1:{host_port}{prefix}/abs HTTP/1.1\r\n\
                 Host: 127.0.0.1:{host_port}\r\n"
            ),
            "/abs".to_string(),
        ),
        (
            format!("GET {prefix}/h HTTP/1.1\r\nHost: 127.0.0.1:{host_port}\r\n"),
            "/h".to_string(),
        ),
        (
            format!(
                "GET {prefix}/h HTTP/1.1\r\nHost: 169.254.169.254\r\n\
                 X-Forwarded-Host: 10.0.0.1\r\n"
            ),
            "/h".to_string(),
        ),
    ];
    for (head, want) in cases {
        let (status, body) = raw_request(server, &format!("{head}Connection: close\r\n\r\n"));
        assert_eq!(status, 200, "{head}: {body}");
        let seen: Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("{head}: {body}"));
        assert_eq!(seen["path"], want.as_str(), "{head}");
        assert_eq!(
            received(&seen, "host"),
            Some(format!("127.0.0.1:{REFLECT_PORT}").as_str()),
            "{head}"
        );
    }
    assert!(host.accept().is_err(), "the proxy connected to the host");
}

/// A real WebSocket client through the route: text and binary echoed, a large message, ping,
/// close.
fn websocket_echoes(server: &TestServer, id: &str) {
    let url = format!(
        "{}{}",
        server.url().replacen("http://", "ws://", 1),
        port_path(id, WS_PORT, "/socket?room=1")
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(60), async {
            use tokio_tungstenite::tungstenite::client::IntoClientRequest;
            let mut request = url.as_str().into_client_request().unwrap();
            request.headers_mut().insert(
                "authorization",
                format!("Bearer {}", server.key()).parse().unwrap(),
            );
            let (mut ws, resp) = tokio_tungstenite::connect_async(request).await.unwrap();
            assert_eq!(resp.status(), 101);
            let first = ws.next().await.unwrap().unwrap();
            assert_eq!(first, Message::text("path /socket?room=1"));
            ws.send(Message::text("hello")).await.unwrap();
            assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("hello"));
            let blob: Vec<u8> = (0..200_000).map(|i| (i % 256) as u8).collect();
            ws.send(Message::binary(blob.clone())).await.unwrap();
            assert_eq!(ws.next().await.unwrap().unwrap(), Message::binary(blob));
            ws.send(Message::Ping(b"p".to_vec().into())).await.unwrap();
            assert_eq!(
                ws.next().await.unwrap().unwrap(),
                Message::Pong(b"p".to_vec().into())
            );
            ws.close(None).await.unwrap();
            while let Some(Ok(m)) = ws.next().await {
                assert!(m.is_close(), "{m:?}");
            }
        })
        .await
        .expect("the WebSocket exchange took over 60 s");
    });
    // The server is unaffected: ordinary requests still answer.
    server.get("/v1/health").expect(200);
}

#[test]
fn port_lists_are_checked_and_kept() {
    let mut server = TestServer::start();
    for (body, what) in [
        (json!({"ports": [0]}), "port 0"),
        (json!({"ports": [70000]}), "port above 65535"),
        (json!({"ports": [-1]}), "negative port"),
        (json!({"ports": ["80"]}), "port as a string"),
        (json!({"ports": (1..=33).collect::<Vec<u16>>()}), "33 ports"),
        (json!({"all_ports": "yes"}), "all_ports not a boolean"),
    ] {
        let r = server.post("/v1/sandboxes", &body);
        assert_eq!(
            (r.status, r.code()),
            (400, "invalid_request"),
            "{what}: {}",
            r.text
        );
    }
    server
        .post(
            "/v1/sandboxes",
            &json!({"ports": (1..=32).collect::<Vec<u16>>()}),
        )
        .expect(201);

    // all_ports: every unprivileged port, nothing below.
    let all = server.create_sandbox_with(&json!({"all_ports": true, "ports": [80]}));
    assert_eq!(all["all_ports"], true);
    let id = all["id"].as_str().unwrap().to_string();
    for port in [1024, 8080, 65535, 80] {
        server
            .get(&port_path(&id, port, "/"))
            .expect_error(502, "port_unreachable");
    }
    server
        .get(&port_path(&id, 1023, "/"))
        .expect_error(403, "port_not_exposed");

    // Forks inherit the ports; a restarted server still knows them.
    let one = server.create_sandbox_with(&json!({"ports": [8000]}));
    let one_id = one["id"].as_str().unwrap().to_string();
    let forked = server
        .post(&format!("/v1/sandboxes/{one_id}/fork"), &json!({}))
        .expect(201)
        .clone();
    let child = forked["sandboxes"][0].clone();
    assert_eq!(child["ports"], json!([8000]), "{forked}");

    // A request to a port is activity: it restarts the idle timeout.
    let active = |s: &TestServer| {
        s.get(&format!("/v1/sandboxes/{one_id}")).body["last_active_at"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let before = active(&server);
    std::thread::sleep(Duration::from_millis(1100));
    server
        .get(&port_path(&one_id, 8000, "/"))
        .expect_error(502, "port_unreachable");
    assert!(
        active(&server) > before,
        "the port request did not count as activity"
    );

    // Paused: not resumed for a port; says why.
    server
        .post(&format!("/v1/sandboxes/{one_id}/pause"), &json!({}))
        .expect(200);
    let paused = server.get(&port_path(&one_id, 8000, "/"));
    paused.expect_error(502, "port_unreachable");
    assert!(paused.message().contains("paused"), "{}", paused.text);
    assert_eq!(
        server.get(&format!("/v1/sandboxes/{one_id}")).body["state"],
        "paused"
    );
    server
        .get(&port_path(&one_id, 8001, "/"))
        .expect_error(403, "port_not_exposed");

    server.restart();
    let again = server
        .get(&format!("/v1/sandboxes/{id}"))
        .expect(200)
        .clone();
    assert_eq!(
        (&again["ports"], &again["all_ports"]),
        (&json!([80]), &json!(true))
    );
    let r = server
        .get(&format!("/v1/sandboxes/{one_id}"))
        .expect(200)
        .clone();
    assert_eq!(r["ports"], json!([8000]));
    server
        .get(&port_path(&id, 9000, "/"))
        .expect_error(502, "port_unreachable");
}

/// An app whose answers try to desynchronise the proxy's connection to its client (response
/// splitting and smuggling): conflicting framing, folded or broken header lines, bytes after
/// the body, a body shorter than announced, a 101 to a plain request, a slow trickle. Every
/// smuggled response carries `X-Smuggled`.
const SMUGGLER_APP: &str = r#"
import socket, sys, threading, time

SMUGGLED = b"HTTP/1.1 200 OK\r\nX-Smuggled: 1\r\nContent-Length: 0\r\n\r\n"

def chunked(data):
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data)

ANSWERS = {
    b"/cl-te": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(SMUGGLED),
    b"/te-cl": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n" + chunked(SMUGGLED),
    b"/two-cl": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 60\r\n\r\nok" + SMUGGLED,
    b"/te-weird": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 2\r\n\r\n" + chunked(SMUGGLED),
    b"/obs-fold": b"HTTP/1.1 200 OK\r\nX-A: 1\r\n X-Smuggled: 1\r\nContent-Length: 2\r\n\r\nok",
    b"/bare-cr": b"HTTP/1.1 200 OK\r\nX-A: 1\rX-Smuggled: 1\r\nContent-Length: 2\r\n\r\nok",
    b"/nul": b"HTTP/1.1 200 OK\r\nX-A: 1\x00X-Smuggled: 1\r\nContent-Length: 2\r\n\r\nok",
    b"/after-body": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" + SMUGGLED,
    b"/short": b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nok",
    b"/switch": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n" + SMUGGLED,
    b"/connection-cl": b"HTTP/1.1 200 OK\r\nConnection: Content-Length\r\nContent-Length: 2\r\n\r\nok" + SMUGGLED,
}

def serve(c):
    try:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = c.recv(4096)
            if not chunk:
                return
            data += chunk
        path = data.split(b" ")[1]
        c.sendall(ANSWERS.get(path, b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"))
        time.sleep(0.5)
    except OSError:
        pass
    finally:
        c.close()

s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
while True:
    threading.Thread(target=serve, args=(s.accept()[0],), daemon=True).start()
"#;

const SMUGGLER_PORT: u16 = 8010;

/// Reads one HTTP/1.1 response from `r`: status, lower-cased header lines, body (by its
/// Content-Length or chunked framing; until EOF otherwise).
fn read_response(r: &mut impl std::io::BufRead) -> Option<(u16, Vec<String>, Vec<u8>)> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let status: u16 = line.split(' ').nth(1)?.parse().ok()?;
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end().to_ascii_lowercase();
        if h.is_empty() {
            break;
        }
        headers.push(h);
    }
    let value = |name: &str| {
        headers
            .iter()
            .find_map(|h| h.strip_prefix(&format!("{name}: ")).map(str::to_string))
    };
    let mut body = Vec::new();
    if value("transfer-encoding").as_deref() == Some("chunked") {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).ok()?;
            let n = usize::from_str_radix(size.trim(), 16).ok()?;
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk).ok()?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else if let Some(n) = value("content-length").and_then(|v| v.parse::<usize>().ok()) {
        // A body shorter than announced ends with the connection: what came is the body.
        r.take(n as u64).read_to_end(&mut body).ok()?;
    } else if status != 101 && status != 204 && status != 304 {
        r.read_to_end(&mut body).ok()?;
    }
    Some((status, headers, body))
}

#[test]
fn hostile_app_answers_cannot_desync_the_client_connection() {
    let server = TestServer::start();
    let sb = server.create_sandbox_with(&json!({ "ports": [SMUGGLER_PORT] }));
    let id = sb["id"].as_str().unwrap().to_string();
    server
        .put_bytes(
            &format!("/v1/sandboxes/{id}/files/smuggler.py"),
            SMUGGLER_APP.as_bytes().to_vec(),
        )
        .expect(201);
    start_app(
        &server,
        &id,
        &format!("'smuggler.py', '{SMUGGLER_PORT}'"),
        SMUGGLER_PORT,
    );
    let addr = server.url().trim_start_matches("http://").to_string();
    for path in [
        "/cl-te",
        "/te-cl",
        "/two-cl",
        "/te-weird",
        "/obs-fold",
        "/bare-cr",
        "/nul",
        "/after-body",
        "/short",
        "/switch",
        "/connection-cl",
    ] {
        // The hostile request and a health check pipelined on one keep-alive connection: the
        // second answer must be the server's own, whatever the app sent for the first.
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let target = port_path(&id, SMUGGLER_PORT, path);
        let raw = format!(
            "GET {target} HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/health HTTP/1.1\r\nHost: x\r\n\
             Connection: close\r\n\r\n"
        );
        s.write_all(server.authorize(&raw).as_bytes()).unwrap();
        let mut r = std::io::BufReader::new(s);
        let mut answers = Vec::new();
        while let Some(a) = read_response(&mut r) {
            answers.push(a);
        }
        for (status, headers, _) in &answers {
            assert!(
                !headers.iter().any(|h| h.starts_with("x-smuggled")),
                "{path}: a smuggled header reached the client: {status} {headers:?}"
            );
        }
        // The first answer is refused (502) or is the app's body exactly as it framed it:
        // chunked framing wins over a Content-Length beside it, and nothing is cut short.
        let smuggled_len = 53;
        let first = answers.first().map(|(s, _, b)| (*s, b.len()));
        let expected: &[(u16, usize)] = match path {
            "/cl-te" | "/te-cl" | "/te-weird" => &[(200, smuggled_len), (502, 0)],
            "/after-body" | "/connection-cl" | "/short" => &[(200, 2)],
            _ => &[(502, 0)],
        };
        assert!(
            first.is_some_and(|(s, n)| expected
                .iter()
                .any(|&(es, en)| es == s && (es == 502 || en == n))),
            "{path}: {:?}, expected one of {expected:?}",
            answers
                .iter()
                .map(|a| (a.0, &a.1, String::from_utf8_lossy(&a.2)))
                .collect::<Vec<_>>()
        );
        // Either the health check was answered, as the second response, or the server closed
        // the connection after a broken first answer; never a third.
        assert!(answers.len() <= 2, "{path}: {} answers", answers.len());
        if let Some((status, _, body)) = answers.get(1) {
            assert_eq!(*status, 200, "{path}");
            assert!(
                String::from_utf8_lossy(body).contains("\"status\":\"ok\""),
                "{path}: the second answer is not the server's health: {}",
                String::from_utf8_lossy(body)
            );
        }
        eprintln!(
            "{path}: {:?}",
            answers.iter().map(|a| (a.0, a.2.len())).collect::<Vec<_>>()
        );
    }
    // The server still works, and so does the app.
    let (status, _) = raw_request(
        &server,
        &format!(
            "GET {} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            port_path(&id, SMUGGLER_PORT, "/after-body")
        ),
    );
    assert_eq!(status, 200);
}

/// An app that streams forever on `/endless` (a kilobyte every 10 ms) and tells on `/count`
/// how many such streams are open.
const ENDLESS_APP: &str = r#"
import socket, sys, threading, time

lock = threading.Lock()
open_streams = [0]

def serve(c):
    try:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = c.recv(4096)
            if not chunk:
                return
            data += chunk
        path = data.split(b" ")[1]
        if path == b"/count":
            with lock:
                body = str(open_streams[0]).encode()
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            return
        with lock:
            open_streams[0] += 1
        try:
            c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            while True:
                c.sendall(b"400\r\n" + b"x" * 1024 + b"\r\n")
                time.sleep(0.01)
        finally:
            with lock:
                open_streams[0] -= 1
    except OSError:
        pass
    finally:
        c.close()

s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(256)
while True:
    threading.Thread(target=serve, args=(s.accept()[0],), daemon=True).start()
"#;

const ENDLESS_PORT: u16 = 8011;

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Opens a stream of `/endless` through the proxy and reads its first bytes.
fn open_stream(server: &TestServer, id: &str) -> TcpStream {
    let addr = server.url().trim_start_matches("http://").to_string();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let raw = format!(
        "GET {} HTTP/1.1\r\nHost: x\r\n\r\n",
        port_path(id, ENDLESS_PORT, "/endless")
    );
    s.write_all(server.authorize(&raw).as_bytes()).unwrap();
    let mut head = [0u8; 64];
    s.read_exact(&mut head).unwrap();
    assert!(head.starts_with(b"HTTP/1.1 200"), "{head:?}");
    s
}

fn wait_for(what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + within;
    while !ok() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn proxied_connections_end_with_their_client_or_their_sandbox() {
    let server = TestServer::start();
    let sb = server.create_sandbox_with(&json!({ "ports": [ENDLESS_PORT] }));
    let id = sb["id"].as_str().unwrap().to_string();
    server
        .put_bytes(
            &format!("/v1/sandboxes/{id}/files/endless.py"),
            ENDLESS_APP.as_bytes().to_vec(),
        )
        .expect(201);
    start_app(
        &server,
        &id,
        &format!("'endless.py', '{ENDLESS_PORT}'"),
        ENDLESS_PORT,
    );
    let count = |server: &TestServer| -> Option<usize> {
        let (status, _, body) = server.get_bytes(&port_path(&id, ENDLESS_PORT, "/count"));
        (status == 200).then(|| String::from_utf8_lossy(&body).parse().ok())?
    };
    let baseline = open_fds(server.pid());

    // Many clients at once, each holding an endless response, then all gone: every connection
    // to the app and every fd of the server is released (no relay outlives its client).
    let streams: Vec<TcpStream> = (0..100).map(|_| open_stream(&server, &id)).collect();
    assert_eq!(count(&server), Some(100));
    assert!(open_fds(server.pid()) >= baseline + 150);
    drop(streams);
    wait_for(
        "the app's streams ended with their clients",
        Duration::from_secs(20),
        || count(&server) == Some(0),
    );
    wait_for(
        "the server released the connections' fds",
        Duration::from_secs(20),
        || open_fds(server.pid()) <= baseline + 5,
    );

    // A sandbox deleted under an open stream: the stream ends, and its fds go.
    let mut s = open_stream(&server, &id);
    server.delete(&format!("/v1/sandboxes/{id}")).expect(204);
    let mut buf = vec![0u8; 1 << 16];
    let ended = std::time::Instant::now();
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => assert!(
                ended.elapsed() < Duration::from_secs(20),
                "the stream outlived its sandbox"
            ),
        }
    }
    drop(s);
    wait_for(
        "the server released the deleted sandbox's connection",
        Duration::from_secs(20),
        || open_fds(server.pid()) <= baseline + 5,
    );
    // And the ports of a sandbox that is gone answer 410 sandbox_gone.
    let (status, _, _) = server.get_bytes(&port_path(&id, ENDLESS_PORT, "/count"));
    assert_eq!(status, 410);
}

#[test]
fn requests_from_pages_reach_only_the_ports_routes() {
    let server = TestServer::start();
    let sb = server.create_sandbox_with(&json!({ "ports": [8020] }));
    let id = sb["id"].as_str().unwrap().to_string();
    let page = |method: &str, path: &str, site: &str, extra: &str| {
        raw_request(
            &server,
            &format!(
                "{method} {path} HTTP/1.1\r\nHost: x\r\nSec-Fetch-Site: {site}\r\n{extra}\
                 Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
            ),
        )
    };
    // A page of an app served here (same-origin), of another port on this host (same-site),
    // or of any site: the API, MCP and the E2B control plane refuse it.
    for site in ["same-origin", "same-site", "cross-site"] {
        for (method, path) in [
            ("GET", "/v1/sandboxes".to_string()),
            ("POST", "/v1/sandboxes".to_string()),
            ("POST", format!("/v1/sandboxes/{id}/execute")),
            ("DELETE", format!("/v1/sandboxes/{id}")),
            ("GET", "/v1/health".to_string()),
            ("POST", "/mcp".to_string()),
            ("GET", "/sandboxes".to_string()),
            ("GET", format!("/v1/sandboxes/{id}/portsx/1/")),
            ("GET", "//v1/sandboxes/x/ports/1/".to_string()),
        ] {
            let (status, body) = page(method, &path, site, "");
            assert_eq!(status, 403, "{site} {method} {path}: {body}");
        }
        // E2B's sandbox header does not carry a page past the check.
        let (status, body) = page(
            "GET",
            "/files?path=/etc/passwd",
            site,
            &format!("E2b-Sandbox-Id: {id}\r\nE2b-Sandbox-Port: 49983\r\n"),
        );
        assert_eq!(status, 403, "{site} E2B header: {body}");
        // On a ports path it reaches E2B's router, which wants the sandbox's token and has no
        // route under /v1/sandboxes/.
        let (status, body) = page(
            "GET",
            &format!("/v1/sandboxes/{id}/ports/8020/files?path=/etc/passwd"),
            site,
            &format!("E2b-Sandbox-Id: {id}\r\nE2b-Sandbox-Port: 49983\r\n"),
        );
        assert!(
            matches!(status, 401 | 404),
            "{site} E2B header on a ports path: {status} {body}"
        );
    }
    // The ports routes take pages (the app's own requests): nothing listens here, so the
    // answer is the proxy's 502, which shows the request got through to it. Dot segments and
    // encodings a raw client sends stay inside the ports route.
    for path in [
        format!("/v1/sandboxes/{id}/ports/8020/"),
        format!("/v1/sandboxes/{id}/ports/8020/../../../../sandboxes"),
        format!("/v1/sandboxes/{id}/ports/8020/%2e%2e/%2e%2e/%2e%2e/%2e%2e/sandboxes"),
        format!("/v1/sandboxes/{id}/ports/8020/..%2f..%2f..%2f..%2fsandboxes"),
        format!("/v1/sandboxes/{id}/ports/8020/;/../../../../sandboxes"),
        format!("/v1/sandboxes/{id}/ports/8020/..\\..\\..\\..\\sandboxes"),
    ] {
        let (status, body) = page("GET", &path, "same-origin", "");
        assert_eq!(status, 502, "{path}: {body}");
        assert!(body.contains("port_unreachable"), "{path}: {body}");
    }
    // Another sandbox's ports and an unlisted port: the route's own answers.
    let (status, _) = page("GET", "/v1/sandboxes/nope/ports/8020/", "same-origin", "");
    assert_eq!(status, 404);
    let (status, _) = page(
        "GET",
        &format!("/v1/sandboxes/{id}/ports/8021/"),
        "same-origin",
        "",
    );
    assert_eq!(status, 403);
    for port in ["0", "65536", "-1", "80a", "%00"] {
        let (status, body) = page(
            "GET",
            &format!("/v1/sandboxes/{id}/ports/{port}/"),
            "none",
            "",
        );
        assert_eq!(status, 400, "port {port}: {body}");
    }
    // What a user types or bookmarks (`none`) and clients without the header reach the API.
    let (status, _) = page("GET", "/v1/health", "none", "");
    assert_eq!(status, 200);
}

/// A sandbox's `port_token` opens its exposed ports at `/v1/ports/{token}/{port}/...` without
/// an API key (what a browser gets), with the whole path forwarded; a forged token, another
/// sandbox's token for this one's id, or a token on a port not exposed opens nothing; the
/// keyed route needs the key, which the app never sees.
#[test]
fn capability_urls_open_one_sandboxs_ports_without_a_key() {
    let server = TestServer::start();
    let sb = server.create_sandbox_with(&json!({ "ports": [HTTP_PORT, REFLECT_PORT] }));
    let id = sb["id"].as_str().unwrap().to_string();
    let token = sb["port_token"]
        .as_str()
        .expect("a sandbox with ports has a token");
    assert!(token.starts_with(&format!("{id}.")), "{token}");
    let other = server.create_sandbox_with(&json!({ "ports": [HTTP_PORT] }));
    let other_token = other["port_token"].as_str().unwrap().to_string();
    assert!(
        server.create_sandbox_with(&json!({}))["port_token"].is_null(),
        "no ports, no token"
    );
    let put = server.put_bytes(
        &format!("/v1/sandboxes/{id}/files/site/sub/page.html"),
        "deep",
    );
    put.expect(201);
    start_app(
        &server,
        &id,
        &format!(
            "'-m', 'http.server', '{HTTP_PORT}', '--bind', '127.0.0.1', '--directory', 'site'"
        ),
        HTTP_PORT,
    );
    server
        .put_bytes(&format!("/v1/sandboxes/{id}/files/reflect.py"), REFLECT_APP)
        .expect(201);
    start_app(
        &server,
        &id,
        &format!("'reflect.py', '{REFLECT_PORT}'"),
        REFLECT_PORT,
    );

    let anonymous = reqwest::blocking::Client::new();
    let get = |path: &str| {
        let r = anonymous
            .get(format!("{}{path}", server.url()))
            .send()
            .unwrap();
        (r.status().as_u16(), r.text().unwrap())
    };
    assert_eq!(
        get(&format!("/v1/ports/{token}/{HTTP_PORT}/sub/page.html")),
        (200, "deep".to_string())
    );
    // The keyed route needs the key.
    assert_eq!(get(&port_path(&id, HTTP_PORT, "/sub/page.html")).0, 401);
    // A forged token, or another sandbox's mac under this id, opens nothing.
    let mac = other_token.rsplit_once('.').unwrap().1;
    for bad in [
        format!("{id}.{}", "0".repeat(32)),
        format!("{id}.{mac}"),
        id.clone(),
        "x".to_string(),
    ] {
        let (status, body) = get(&format!("/v1/ports/{bad}/{HTTP_PORT}/sub/page.html"));
        assert_eq!(status, 404, "{bad}: {body}");
        assert!(body.contains("sandbox_not_found"), "{body}");
    }
    // A port the sandbox does not expose stays closed through its token too.
    assert_eq!(get(&format!("/v1/ports/{token}/9999/")).0, 403);
    // The app never sees the API key of the keyed route; through the capability URL an
    // `Authorization` header is the app's own and reaches it.
    let seen = server.get(&port_path(&id, REFLECT_PORT, "/seen")).body;
    assert!(received(&seen, "authorization").is_none(), "{seen}");
    assert!(!seen.to_string().contains(server.key()), "{seen}");
    let seen: Value = anonymous
        .get(format!(
            "{}/v1/ports/{token}/{REFLECT_PORT}/own",
            server.url()
        ))
        .header("authorization", "Bearer app-token")
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(received(&seen, "authorization"), Some("Bearer app-token"));
    assert_eq!(seen["path"], "/own");
}

/// Port capability URLs can be ended and can expire: `POST .../ports/rotate` gives a new token
/// and every earlier one stops working at once (also after a server restart); with
/// `SANDLOT_PORT_URL_TTL` a token stops working once its time is up, and a token without an
/// expiry is refused there. Regression: port URLs never expired and could not be revoked.
#[test]
fn port_urls_rotate_and_expire() {
    let mut server = TestServer::start();
    let sb = server.create_sandbox_with(&json!({ "ports": [HTTP_PORT] }));
    let id = sb["id"].as_str().unwrap().to_string();
    let first = sb["port_token"].as_str().unwrap().to_string();
    server
        .put_bytes(&format!("/v1/sandboxes/{id}/files/site/index.html"), "up")
        .expect(201);
    start_app(
        &server,
        &id,
        &format!(
            "'-m', 'http.server', '{HTTP_PORT}', '--bind', '127.0.0.1', '--directory', 'site'"
        ),
        HTTP_PORT,
    );
    let anonymous = reqwest::blocking::Client::new();
    let status = |server: &TestServer, token: &str| {
        anonymous
            .get(format!("{}/v1/ports/{token}/{HTTP_PORT}/", server.url()))
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(status(&server, &first), 200);

    let r = server.post(&format!("/v1/sandboxes/{id}/ports/rotate"), &json!({}));
    let rotated = r.expect(200).clone();
    common::assert_schema("RotatedPortToken", &rotated);
    let second = rotated["port_token"].as_str().unwrap().to_string();
    assert_ne!(second, first);
    assert!(rotated.get("expires_at").is_none(), "{rotated}");
    assert_eq!(status(&server, &first), 404, "the old URL is void at once");
    assert_eq!(status(&server, &second), 200);
    // The sandbox's record hands out the new token, and a second rotation voids it too.
    let now = server.get(&format!("/v1/sandboxes/{id}")).body["port_token"].clone();
    assert_eq!(now, json!(second));
    let third = server
        .post(&format!("/v1/sandboxes/{id}/ports/rotate"), &json!({}))
        .expect(200)["port_token"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(status(&server, &second), 404);
    assert_eq!(status(&server, &third), 200);
    // A sandbox without ports has no port token to answer (its E2B tokens are rotated, see
    // e2b_tokens.rs); a missing one is not found.
    let plain = server.create_sandbox();
    let r = server.post(&format!("/v1/sandboxes/{plain}/ports/rotate"), &json!({}));
    assert_eq!(r.expect(200), &json!({ "sandbox_id": plain }));
    server
        .post("/v1/sandboxes/sb_doesnotexist/ports/rotate", &json!({}))
        .expect_error(404, "sandbox_not_found");

    // After a restart the rotation holds (the epoch is stored), and with a TTL tokens expire.
    server.restart_with_env(&[("SANDLOT_PORT_URL_TTL", "3")]);
    start_app(
        &server,
        &id,
        &format!(
            "'-m', 'http.server', '{HTTP_PORT}', '--bind', '127.0.0.1', '--directory', 'site'"
        ),
        HTTP_PORT,
    );
    assert_eq!(status(&server, &first), 404);
    assert_eq!(status(&server, &second), 404);
    // `third` was made without an expiry: under a TTL it no longer opens anything.
    assert_eq!(status(&server, &third), 404);
    let r = server.post(&format!("/v1/sandboxes/{id}/ports/rotate"), &json!({}));
    let timed = r.expect(200).clone();
    assert!(timed["expires_at"].is_string(), "{timed}");
    let timed = timed["port_token"].as_str().unwrap().to_string();
    assert_eq!(status(&server, &timed), 200);
    // It expires 3 s after it was handed out (a whole-second clock): poll, bounded.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while status(&server, &timed) != 404 {
        assert!(
            std::time::Instant::now() < deadline,
            "an expired URL opens nothing"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // What the sandbox's record hands out now is a fresh one.
    let fresh = server.get(&format!("/v1/sandboxes/{id}")).body["port_token"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(status(&server, &fresh), 200);
}
