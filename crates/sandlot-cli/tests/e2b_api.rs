//! The E2B-compatible API against a real `sandlot serve`: the control plane at the root, and
//! envd (`E2b-Sandbox-Port: 49983`) and the code interpreter (`49999`) addressed by the
//! `E2b-Sandbox-Id` header. What the real SDKs do is in sdk/python/tests/test_e2b.py; this
//! suite is the attack side: wrong and missing credentials, tokens of another sandbox,
//! unknown sandboxes and contexts, malformed bodies, hostile paths on `/files`.

mod common;

use common::TestServer;
use reqwest::blocking::RequestBuilder;
use serde_json::{json, Value};

const ENVD: &str = "49983";
const JUPYTER: &str = "49999";

struct E2b {
    server: TestServer,
    key: String,
}

/// A status, a body as text, and the body as JSON (`Null` when it is not).
struct Got {
    status: u16,
    text: String,
    json: Value,
}

impl E2b {
    fn start() -> E2b {
        let server = TestServer::start();
        let key = std::fs::read_to_string(server.data_dir().join("e2b-api-key"))
            .expect("the server writes its E2B key on start")
            .trim()
            .to_owned();
        E2b { server, key }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.url())
    }

    fn send(&self, req: RequestBuilder) -> Got {
        let resp = req.send().expect("request");
        let status = resp.status().as_u16();
        let text = resp.text().unwrap_or_default();
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Got { status, text, json }
    }

    /// A control-plane request with the server's key.
    fn api(&self, method: reqwest::Method, path: &str) -> RequestBuilder {
        self.server
            .client()
            .request(method, self.url(path))
            .header("X-API-KEY", &self.key)
    }

    /// A request to a sandbox's port, with `token` as its `X-Access-Token` (if any).
    fn sandbox(
        &self,
        method: reqwest::Method,
        id: &str,
        port: &str,
        path: &str,
        token: Option<&str>,
    ) -> RequestBuilder {
        let mut req = self
            .server
            .client()
            .request(method, self.url(path))
            .header("E2b-Sandbox-Id", id)
            .header("E2b-Sandbox-Port", port);
        if let Some(t) = token {
            req = req.header("X-Access-Token", t);
        }
        req
    }

    /// Creates a sandbox; returns (id, envd token, traffic token).
    fn create(&self) -> (String, String, String) {
        let got = self.send(
            self.api(reqwest::Method::POST, "/sandboxes")
                .json(&json!({ "templateID": "code-interpreter-v1", "timeout": 120 })),
        );
        assert_eq!(got.status, 201, "{}", got.text);
        let b = &got.json;
        for field in [
            "sandboxID",
            "templateID",
            "clientID",
            "envdVersion",
            "envdAccessToken",
        ] {
            assert!(b[field].is_string(), "{field} missing: {b}");
        }
        assert!(b["domain"].is_null());
        (
            b["sandboxID"].as_str().unwrap().to_owned(),
            b["envdAccessToken"].as_str().unwrap().to_owned(),
            b["trafficAccessToken"].as_str().unwrap().to_owned(),
        )
    }
}

/// Asserts E2B's error body: `{"code": status, "message": "..."}`.
#[track_caller]
fn e2b_error(got: &Got, status: u16) {
    assert_eq!(got.status, status, "{}", got.text);
    assert_eq!(got.json["code"], status, "{}", got.text);
    assert!(
        got.json["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{}",
        got.text
    );
}

/// A multipart body with one file part named `file` whose file name is `name`.
fn multipart(name: &str, content: &[u8]) -> (String, Vec<u8>) {
    let boundary = "sandlot-e2b-test-boundary";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n\
         Content-Type: application/octet-stream\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(content);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

#[test]
fn e2b_api() {
    use reqwest::Method as M;
    let e = E2b::start();

    // The key file: 0600, E2B's shape.
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(e.server.data_dir().join("e2b-api-key")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert!(e.key.starts_with("e2b_") && e.key.len() == 44, "{}", e.key);
    }

    // Control plane: no key, a wrong key, a key of the right length but other content.
    let no_key = e.send(e.server.client().get(e.url("/v2/sandboxes")));
    e2b_error(&no_key, 401);
    let wrong = e.send(
        e.server
            .client()
            .get(e.url("/v2/sandboxes"))
            .header("X-API-KEY", "e2b_wrong"),
    );
    e2b_error(&wrong, 401);
    let mut near = e.key.clone().into_bytes();
    near[43] = if near[43] == b'0' { b'1' } else { b'0' };
    let near = e.send(
        e.server
            .client()
            .post(e.url("/sandboxes"))
            .header("X-API-KEY", String::from_utf8(near).unwrap())
            .json(&json!({"templateID": "base"})),
    );
    e2b_error(&near, 401);
    // sandlot's own API key does not open the E2B API, nor the reverse: different headers.
    let bearer = e.send(
        e.server
            .client()
            .get(e.url("/v2/sandboxes"))
            .bearer_auth(&e.key),
    );
    e2b_error(&bearer, 401);

    // Malformed bodies.
    let not_json = e.send(
        e.api(M::POST, "/sandboxes")
            .header("content-type", "application/json")
            .body("{nope"),
    );
    e2b_error(&not_json, 400);
    let wrong_type = e.send(e.api(M::POST, "/sandboxes").json(&json!({"templateID": 7})));
    e2b_error(&wrong_type, 400);
    let no_template = e.send(e.api(M::POST, "/sandboxes").json(&json!({"timeout": 5})));
    e2b_error(&no_template, 400);
    let internet = e.send(
        e.api(M::POST, "/v2/sandboxes")
            .json(&json!({"templateID": "base", "allow_internet_access": true})),
    );
    e2b_error(&internet, 400);
    let unknown_template = e.send(
        e.api(M::POST, "/sandboxes")
            .json(&json!({"templateID": "no-such-template"})),
    );
    e2b_error(&unknown_template, 404);

    // Unknown sandboxes: 404 in E2B's format for every control route.
    for (m, path) in [
        (M::GET, "/sandboxes/sb_nope"),
        (M::DELETE, "/sandboxes/sb_nope"),
        (M::POST, "/sandboxes/sb_nope/pause"),
        (M::POST, "/v2/sandboxes/sb_nope/connect"),
    ] {
        let got = e.send(e.api(m, path).json(&json!({})));
        e2b_error(&got, 404);
    }
    let got = e.send(
        e.api(M::POST, "/sandboxes/sb_nope/timeout")
            .json(&json!({"timeout": 10})),
    );
    e2b_error(&got, 404);

    let (id, token, traffic) = e.create();
    let (other, other_token, _) = e.create();

    // Get, list (with filters), timeout.
    let detail = e.send(e.api(M::GET, &format!("/sandboxes/{id}")));
    assert_eq!(detail.status, 200, "{}", detail.text);
    assert_eq!(detail.json["state"], "running");
    assert_eq!(detail.json["envdVersion"], "0.5.7");
    let list = e.send(e.api(M::GET, "/v2/sandboxes?state=running&limit=1"));
    assert_eq!(list.status, 200, "{}", list.text);
    assert_eq!(list.json.as_array().unwrap().len(), 1);
    let bad_state = e.send(e.api(M::GET, "/v2/sandboxes?state=exploded"));
    e2b_error(&bad_state, 400);
    let t = e.send(
        e.api(M::POST, &format!("/sandboxes/{id}/timeout"))
            .json(&json!({"timeout": 600})),
    );
    assert_eq!(t.status, 204, "{}", t.text);
    let t = e.send(
        e.api(M::POST, &format!("/sandboxes/{id}/timeout"))
            .json(&json!({"timeout": "soon"})),
    );
    e2b_error(&t, 400);

    // envd and the interpreter: no token, a wrong token, the other sandbox's token, the
    // traffic token on envd; all 401, nothing done.
    for t in [
        None,
        Some("0".repeat(64).as_str()),
        Some(other_token.as_str()),
    ] {
        let got = e.send(e.sandbox(M::GET, &id, ENVD, "/files?path=/home/user/x", t));
        e2b_error(&got, 401);
        let got = e.send(
            e.sandbox(M::POST, &id, JUPYTER, "/execute", t)
                .json(&json!({"code": "open('/workspace/pwned','w')"})),
        );
        assert_eq!(got.status, 401, "{}", got.text);
    }
    let got = e.send(
        e.sandbox(M::GET, &id, ENVD, "/files?path=x", None)
            .header("E2B-Traffic-Access-Token", &traffic),
    );
    e2b_error(&got, 401);
    // The traffic token opens the interpreter's contexts, not its /execute.
    let got = e.send(
        e.sandbox(M::POST, &id, JUPYTER, "/execute", None)
            .header("E2B-Traffic-Access-Token", &traffic)
            .json(&json!({"code": "1"})),
    );
    assert_eq!(got.status, 401, "{}", got.text);
    let got = e.send(
        e.sandbox(M::GET, &id, JUPYTER, "/contexts", None)
            .header("E2B-Traffic-Access-Token", &traffic),
    );
    assert_eq!(got.status, 200, "{}", got.text);
    // No port header, a port that is not a number.
    let got = e.send(
        e.server
            .client()
            .get(e.url("/files?path=x"))
            .header("E2b-Sandbox-Id", &id)
            .header("X-Access-Token", &token),
    );
    e2b_error(&got, 400);

    // Files: a round trip under /home/user, then hostile paths.
    let (ctype, body) = multipart("/home/user/dir/hello.txt", b"hello");
    let up = e.send(
        e.sandbox(M::POST, &id, ENVD, "/files", Some(&token))
            .header("content-type", ctype)
            .body(body),
    );
    assert_eq!(up.status, 200, "{}", up.text);
    assert_eq!(
        up.json,
        json!([{"name": "hello.txt", "type": "file", "path": "/home/user/dir/hello.txt"}])
    );
    let down = e.send(e.sandbox(
        M::GET,
        &id,
        ENVD,
        "/files?path=%2Fhome%2Fuser%2Fdir%2Fhello.txt",
        Some(&token),
    ));
    assert_eq!((down.status, down.text.as_str()), (200, "hello"));
    // The other sandbox does not see it, with its own valid token.
    let got = e.send(e.sandbox(
        M::GET,
        &other,
        ENVD,
        "/files?path=/home/user/dir/hello.txt",
        Some(&other_token),
    ));
    e2b_error(&got, 404);
    let octet = e.send(
        e.sandbox(M::POST, &id, ENVD, "/files?path=raw.bin", Some(&token))
            .header("content-type", "application/octet-stream")
            .body(vec![0u8, 1, 2]),
    );
    assert_eq!(octet.status, 200, "{}", octet.text);
    assert_eq!(octet.json[0]["path"], "/home/user/raw.bin");

    for hostile in [
        "/etc/passwd",
        "/home/user/../../etc/passwd",
        "../etc/passwd",
        "/proc/self/environ",
        "/home/userx/a",
        "/home/user/a%00b",
    ] {
        let q = hostile.replace('/', "%2F");
        let got = e.send(e.sandbox(M::GET, &id, ENVD, &format!("/files?path={q}"), Some(&token)));
        e2b_error(&got, 400);
        if hostile.contains('%') {
            continue; // in a file name, `%00` is three characters
        }
        let (ctype, body) = multipart(hostile, b"x");
        let got = e.send(
            e.sandbox(M::POST, &id, ENVD, "/files", Some(&token))
                .header("content-type", ctype)
                .body(body),
        );
        e2b_error(&got, 400);
    }
    // A symlink the sandbox makes is not followed out of the workspace.
    let link = e.send(
        e.sandbox(M::POST, &id, JUPYTER, "/execute", Some(&token))
            .json(&json!({"code": "ln -s /etc/passwd /workspace/link", "language": "bash"})),
    );
    assert_eq!(link.status, 200, "{}", link.text);
    let got = e.send(e.sandbox(M::GET, &id, ENVD, "/files?path=link", Some(&token)));
    assert!(
        got.status == 400 || got.status == 404,
        "{} {}",
        got.status,
        got.text
    );
    assert!(!got.text.contains("root:"), "{}", got.text);
    let missing = e.send(e.sandbox(M::GET, &id, ENVD, "/files?path=nope", Some(&token)));
    e2b_error(&missing, 404);
    let no_path = e.send(e.sandbox(M::GET, &id, ENVD, "/files", Some(&token)));
    e2b_error(&no_path, 400);
    let garbage = e.send(
        e.sandbox(M::POST, &id, ENVD, "/files", Some(&token))
            .header("content-type", "multipart/form-data; boundary=x")
            .body("not multipart at all"),
    );
    e2b_error(&garbage, 400);
    let wrong_type = e.send(
        e.sandbox(M::POST, &id, ENVD, "/files?path=a", Some(&token))
            .header("content-type", "text/plain")
            .body("x"),
    );
    e2b_error(&wrong_type, 415);

    // The interpreter: NDJSON events, errors, unknown contexts and languages, bad bodies.
    let run = e.send(
        e.sandbox(M::POST, &id, JUPYTER, "/execute", Some(&token))
            .json(&json!({"code": "print('hi')\n40 + 2"})),
    );
    assert_eq!(run.status, 200, "{}", run.text);
    let events: Vec<Value> = run
        .text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Output may come in several chunks: one type per run of events.
    let mut types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    types.dedup();
    assert_eq!(
        types,
        [
            "stdout",
            "result",
            "number_of_executions",
            "end_of_execution"
        ],
        "{}",
        run.text
    );
    let stdout: String = events
        .iter()
        .filter(|e| e["type"] == "stdout")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(stdout, "hi\n");
    let result = events.iter().find(|e| e["type"] == "result").unwrap();
    assert_eq!(result["text"], "42");
    assert_eq!(result["is_main_result"], true);
    let err = e.send(
        e.sandbox(M::POST, &id, JUPYTER, "/execute", Some(&token))
            .json(&json!({"code": "raise ValueError('boom')"})),
    );
    assert!(err.text.contains(r#""name":"ValueError""#), "{}", err.text);
    let no_ctx = e.send(
        e.sandbox(M::POST, &id, JUPYTER, "/execute", Some(&token))
            .json(&json!({"code": "1", "context_id": "ctx_nope"})),
    );
    assert_eq!(no_ctx.status, 404, "{}", no_ctx.text);
    let js = e.send(
        e.sandbox(M::POST, &id, JUPYTER, "/execute", Some(&token))
            .json(&json!({"code": "1", "language": "javascript"})),
    );
    assert_eq!(js.status, 400, "{}", js.text);
    assert!(js.text.contains("not available"), "{}", js.text);
    let both = e.send(
        e.sandbox(M::POST, &id, JUPYTER, "/execute", Some(&token))
            .json(&json!({"code": "1", "language": "python", "context_id": "default"})),
    );
    assert_eq!(both.status, 400, "{}", both.text);
    let bad_env = e.send(
        e.sandbox(M::POST, &id, JUPYTER, "/execute", Some(&token))
            .json(&json!({"code": "1", "env_vars": {"A;rm -rf /": "x"}})),
    );
    assert_eq!(bad_env.status, 400, "{}", bad_env.text);
    let bad_body = e.send(
        e.sandbox(M::POST, &id, JUPYTER, "/execute", Some(&token))
            .header("content-type", "application/json")
            .body("[1,2"),
    );
    assert_eq!(bad_body.status, 400, "{}", bad_body.text);
    let bad_cwd = e.send(
        e.sandbox(M::POST, &id, JUPYTER, "/contexts", Some(&token))
            .json(&json!({"cwd": "/etc"})),
    );
    assert_eq!(bad_cwd.status, 400, "{}", bad_cwd.text);
    let del = e.send(e.sandbox(M::DELETE, &id, JUPYTER, "/contexts/ctx_nope", Some(&token)));
    assert_eq!(del.status, 404, "{}", del.text);
    let route = e.send(e.sandbox(M::GET, &id, JUPYTER, "/nope", Some(&token)));
    assert_eq!(route.status, 404, "{}", route.text);

    // Kill: 204, then the sandbox is gone for every face.
    let k = e.send(e.api(M::DELETE, &format!("/sandboxes/{id}")));
    assert_eq!(k.status, 204, "{}", k.text);
    let k = e.send(e.api(M::DELETE, &format!("/sandboxes/{id}")));
    e2b_error(&k, 404);
    let gone = e.send(e.sandbox(M::GET, &id, ENVD, "/files?path=raw.bin", Some(&token)));
    e2b_error(&gone, 502);
    assert!(gone.text.contains("was not found"), "{}", gone.text);
    let gone = e.send(
        e.sandbox(M::POST, &id, JUPYTER, "/execute", Some(&token))
            .json(&json!({"code": "1"})),
    );
    assert_eq!(gone.status, 502, "{}", gone.text);
    // The server and the other sandbox are unaffected.
    let ok = e.send(
        e.sandbox(M::POST, &other, JUPYTER, "/execute", Some(&other_token))
            .json(&json!({"code": "1 + 1"})),
    );
    assert!(ok.text.contains(r#""text":"2""#), "{}", ok.text);
    let k = e.send(e.api(M::DELETE, &format!("/sandboxes/{other}")));
    assert_eq!(k.status, 204, "{}", k.text);
}

#[test]
fn e2b_client_disconnect_interrupts() {
    use reqwest::Method as M;
    let e = E2b::start();
    let (id, token, _) = e.create();
    let client = reqwest::blocking::Client::builder()
        .timeout(std::time::Duration::from_millis(1500))
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let cut = client
        .post(e.url("/execute"))
        .header("E2b-Sandbox-Id", &id)
        .header("E2b-Sandbox-Port", JUPYTER)
        .header("X-Access-Token", &token)
        .json(&json!({"code": "import time\nprint('start', flush=True)\ntime.sleep(60)\n"}))
        .send()
        .and_then(|r| r.text());
    assert!(cut.is_err(), "the read should time out");
    // The next execution runs at once: the sleeping one was interrupted when the client left.
    let next = e.send(
        e.sandbox(M::POST, &id, JUPYTER, "/execute", Some(&token))
            .json(&json!({"code": "'alive'"})),
    );
    assert!(next.text.contains(r#""text":"alive""#), "{}", next.text);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
}
