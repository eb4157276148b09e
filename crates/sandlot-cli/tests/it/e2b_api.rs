//! The E2B-compatible API against a real `sandlot serve`: the control plane at the root, and
//! envd (`E2b-Sandbox-Port: 49983`) and the code interpreter (`49999`) addressed by the
//! `E2b-Sandbox-Id` header. What the real SDKs do is in sdk/python/tests/test_e2b.py; this
//! suite is the attack side: wrong and missing credentials, tokens of another sandbox,
//! unknown sandboxes and contexts, malformed bodies, hostile paths on `/files`, and tenants
//! (sandlot API keys as E2B keys, another tenant's sandboxes answered as missing ones).

use crate::common;

use common::TestServer;
use reqwest::blocking::RequestBuilder;
use serde_json::{json, Value};

const ENVD: &str = "49983";
const JUPYTER: &str = "49999";

/// A server and its E2B key (also `e2b_life.rs`'s).
pub(crate) struct E2b {
    pub(crate) server: TestServer,
    pub(crate) key: String,
}

/// A status, a body as text, and the body as JSON (`Null` when it is not).
pub(crate) struct Got {
    pub(crate) status: u16,
    pub(crate) text: String,
    pub(crate) json: Value,
}

impl E2b {
    pub(crate) fn start() -> E2b {
        let server = TestServer::start();
        let key = std::fs::read_to_string(server.data_dir().join("e2b-api-key"))
            .expect("the server writes its E2B key on start")
            .trim()
            .to_owned();
        E2b { server, key }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.url())
    }

    pub(crate) fn send(&self, req: RequestBuilder) -> Got {
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
    // The E2B API takes its key in X-API-KEY only: a key as a bearer token does not open it
    // (sandlot API keys in X-API-KEY do: see `e2b_tenants`).
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
    assert_eq!(detail.json["envdVersion"], "0.6.4");
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
    // JavaScript and TypeScript run (tests/it/js.rs, test_e2b_js_kernel.py); R and Java do not.
    let r = e.send(
        e.sandbox(M::POST, &id, JUPYTER, "/execute", Some(&token))
            .json(&json!({"code": "1", "language": "r"})),
    );
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.text.contains("not available"), "{}", r.text);
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
    // A context's cwd must be a directory the sandbox has, given as an absolute path.
    for cwd in ["/no/such/dir", "/etc/passwd", "relative/dir", "/a\u{0}b"] {
        let bad_cwd = e.send(
            e.sandbox(M::POST, &id, JUPYTER, "/contexts", Some(&token))
                .json(&json!({ "cwd": cwd })),
        );
        assert_eq!(bad_cwd.status, 400, "{cwd:?}: {}", bad_cwd.text);
    }
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
        .pool_idle_timeout(common::POOL_IDLE)
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

#[test]
fn e2b_tenants() {
    use reqwest::Method as M;
    let e = E2b::start();
    // Tenant b may hold one sandbox and waits at most half a second for room.
    let b_key = e
        .server
        .tenant("b")
        .quotas(json!({ "max_sandboxes": 1, "wait_seconds": 0.5 }))
        .key();
    // E2B clients send X-API-KEY and no bearer key.
    let plain = e.server.client_with_key(None);
    let with = |key: &str, m: M, path: &str| plain.request(m, e.url(path)).header("X-API-KEY", key);
    let admin_key = e.server.key().to_owned();

    // A sandlot API key is an E2B key: B's sandbox is tenant b's.
    let got = e.send(
        with(&b_key, M::POST, "/sandboxes")
            .json(&json!({ "templateID": "code-interpreter-v1", "timeout": 120 })),
    );
    assert_eq!(got.status, 201, "{}", got.text);
    let b_id = got.json["sandboxID"].as_str().unwrap().to_owned();
    let b_token = got.json["envdAccessToken"].as_str().unwrap().to_owned();
    let v1 = e.server.client_with_key(Some(&b_key));
    let r = v1
        .get(e.url(&format!("/v1/sandboxes/{b_id}")))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().unwrap()["tenant"], "b");

    // The legacy E2B key still works, as tenant default (whose admin key sees its sandbox).
    let (a_id, a_token, _) = e.create();
    assert_eq!(
        e.server.get(&format!("/v1/sandboxes/{a_id}")).body["tenant"],
        "default"
    );
    let got = e.send(with(&admin_key, M::GET, &format!("/sandboxes/{a_id}")));
    assert_eq!(got.status, 200, "{}", got.text);

    // Lists: each tenant its own.
    for path in ["/sandboxes", "/v2/sandboxes"] {
        let ids = |key: &str| -> Vec<String> {
            let got = e.send(with(key, M::GET, path));
            assert_eq!(got.status, 200, "{}", got.text);
            got.json
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["sandboxID"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(ids(&b_key), vec![b_id.clone()]);
        assert_eq!(ids(&e.key), vec![a_id.clone()]);
        assert_eq!(ids(&admin_key), vec![a_id.clone()]);
    }

    // Every control route naming B's sandbox answers A (legacy key or sandlot key) exactly as
    // for a sandbox that does not exist, and changes nothing.
    let routes: Vec<(M, &str, Option<Value>)> = vec![
        (M::GET, "/sandboxes/{}", None),
        (
            M::POST,
            "/sandboxes/{}/timeout",
            Some(json!({ "timeout": 1 })),
        ),
        (
            M::POST,
            "/sandboxes/{}/refreshes",
            Some(json!({ "duration": 1 })),
        ),
        (
            M::POST,
            "/sandboxes/{}/connect",
            Some(json!({ "timeout": 1 })),
        ),
        (M::POST, "/v2/sandboxes/{}/connect", Some(json!({}))),
        (M::POST, "/sandboxes/{}/pause", None),
        (M::POST, "/sandboxes/{}/resume", Some(json!({}))),
        (M::POST, "/sandboxes/{}/fork", Some(json!({}))),
        (M::DELETE, "/sandboxes/{}", None),
    ];
    let missing = "sb_doesnotexist0000000000";
    for key in [&e.key, &admin_key] {
        for (m, path, body) in &routes {
            let call = |id: &str| {
                let mut req = with(key, m.clone(), &path.replace("{}", id));
                if let Some(b) = body {
                    req = req.json(b);
                }
                e.send(req)
            };
            let unknown = call(missing);
            e2b_error(&unknown, 404);
            let foreign = call(&b_id);
            e2b_error(&foreign, 404);
            assert_eq!(
                foreign.text.replace(&b_id, missing),
                unknown.text,
                "{m} {path}"
            );
        }
    }
    // B's sandbox is untouched: running, and its detail (with its token) is B's to read.
    let got = e.send(with(&b_key, M::GET, &format!("/sandboxes/{b_id}")));
    assert_eq!(got.status, 200, "{}", got.text);
    assert_eq!(got.json["state"], "running");
    assert_eq!(got.json["envdAccessToken"], b_token.as_str());
    // And B does not reach A's.
    let got = e.send(with(&b_key, M::GET, &format!("/sandboxes/{a_id}")));
    e2b_error(&got, 404);
    let got = e.send(with(&b_key, M::DELETE, &format!("/sandboxes/{a_id}")));
    e2b_error(&got, 404);

    // Addressed to a sandbox: an API key opens its own tenant's only; another tenant's reads
    // as a missing one (E2B's proxy answer), in each face's format. Tokens open their own
    // sandbox only, whoever holds them.
    let health = |id: &str, key: Option<&str>, token: Option<&str>| {
        let mut req = e.sandbox(M::GET, id, ENVD, "/health", token);
        if let Some(k) = key {
            req = req.header("X-API-KEY", k);
        }
        e.send(req)
    };
    assert_eq!(health(&b_id, Some(b_key.as_str()), None).status, 204);
    assert_eq!(health(&b_id, None, Some(&b_token)).status, 204);
    assert_eq!(health(&a_id, Some(e.key.as_str()), None).status, 204);
    assert_eq!(health(&b_id, None, Some(&a_token)).status, 401);
    for key in [&e.key, &admin_key] {
        let unknown = health(missing, Some(key.as_str()), None);
        assert_eq!(unknown.status, 502, "{}", unknown.text);
        let foreign = health(&b_id, Some(key.as_str()), None);
        assert_eq!(foreign.status, 502, "{}", foreign.text);
        assert_eq!(foreign.text.replace(&b_id, missing), unknown.text);
        let run = |id: &str| {
            e.send(
                e.sandbox(M::POST, id, JUPYTER, "/execute", None)
                    .header("X-API-KEY", key.as_str())
                    .json(&json!({ "code": "open('/home/user/pwned', 'w')" })),
            )
        };
        let foreign = run(&b_id);
        assert_eq!(foreign.status, 502, "{}", foreign.text);
        assert_eq!(foreign.text.replace(&b_id, missing), run(missing).text);
        let rpc = |id: &str| {
            e.send(
                e.sandbox(M::POST, id, ENVD, "/filesystem.Filesystem/ListDir", None)
                    .header("X-API-KEY", key.as_str())
                    .header("content-type", "application/json")
                    .body(r#"{"path": "/home/user"}"#),
            )
        };
        let foreign = rpc(&b_id);
        assert_eq!(foreign.json["code"], "unavailable", "{}", foreign.text);
        assert_eq!(foreign.text.replace(&b_id, missing), rpc(missing).text);
    }
    // B's key runs code in B's sandbox; A's attempt left nothing there.
    let got = e.send(
        e.sandbox(M::POST, &b_id, JUPYTER, "/execute", None)
            .header("X-API-KEY", &b_key)
            .json(&json!({ "code": "import os; os.path.exists('/home/user/pwned')" })),
    );
    assert_eq!(got.status, 200, "{}", got.text);
    assert!(got.text.contains("False"), "{}", got.text);

    // B's quota (one sandbox) holds through E2B: a second waits, then 429 in E2B's format.
    let started = std::time::Instant::now();
    let got = e.send(with(&b_key, M::POST, "/sandboxes").json(&json!({ "templateID": "base" })));
    e2b_error(&got, 429);
    assert!(got.text.contains("quota"), "{}", got.text);
    assert!(started.elapsed() >= std::time::Duration::from_millis(400));
    // Tenant default has no quotas: the legacy key still creates.
    let (extra, _, _) = e.create();
    assert_eq!(
        e.send(e.api(M::DELETE, &format!("/sandboxes/{extra}")))
            .status,
        204
    );

    // Keys that are not keys, unknown and revoked ones: 401 in E2B's format, at once.
    let common::TenantKey {
        key: c_key,
        id: c_id,
    } = e.server.tenant("c").quotas(json!({})).create();
    assert_eq!(e.send(with(&c_key, M::GET, "/v2/sandboxes")).status, 200);
    assert_eq!(e.server.delete(&format!("/v1/keys/{c_id}")).status, 200);
    for bad in [
        c_key.as_str(),
        "sl_aaaaaaaa_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
        "nonsense",
        "",
    ] {
        let got = e.send(with(bad, M::GET, "/v2/sandboxes"));
        e2b_error(&got, 401);
        let got = e.send(with(bad, M::POST, "/sandboxes").json(&json!({ "templateID": "base" })));
        e2b_error(&got, 401);
        let got = health(&b_id, Some(bad), None);
        assert_eq!(got.status, 401, "{}", got.text);
    }

    // B kills its sandbox; then it is gone for B too, and B's quota has room again.
    let got = e.send(with(&b_key, M::DELETE, &format!("/sandboxes/{b_id}")));
    assert_eq!(got.status, 204, "{}", got.text);
    let got = e.send(with(&b_key, M::GET, &format!("/sandboxes/{b_id}")));
    e2b_error(&got, 404);
    let got = e.send(with(&b_key, M::POST, "/sandboxes").json(&json!({ "templateID": "base" })));
    assert_eq!(got.status, 201, "{}", got.text);
}

/// A shipped example policy set (examples/policies/).
fn example_policy(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/policies")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A GitHub token, made here so no secret-shaped literal sits in the source.
fn github_token() -> String {
    const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let body: String = (0..36).map(|i| ALNUM[(i * 17 + 5) % 62] as char).collect();
    format!("ghp_{body}")
}

/// The newest decisions at `gate` the operator's tenant sees.
fn decisions(e: &E2b, gate: &str) -> Vec<Value> {
    let r = e.server.get(&format!("/v1/decisions?gate={gate}&limit=50"));
    assert_eq!(r.status, 200, "{:?}", r.body);
    r.body["decisions"].as_array().unwrap().clone()
}

/// Asserts a 403 `policy_denied` in E2B's REST error format whose message names `policy`.
#[track_caller]
fn assert_e2b_denied(got: &Got, policy: &str) {
    e2b_error(got, 403);
    assert_eq!(got.json["sandlot_code"], "policy_denied", "{}", got.text);
    assert!(
        got.json["message"].as_str().unwrap().contains(policy),
        "the message should name {policy}: {}",
        got.text
    );
}

#[test]
fn e2b_policy_gates() {
    use reqwest::Method as M;
    let e = E2b::start();
    let (id, token, _) = e.create();
    let sb = format!("Sandbox::\"{id}\"");

    // --- execute: the code-size cap, through the interpreter's /execute.
    let r = e
        .server
        .put_bytes("/v1/policies", example_policy("code-size-cap.cedar"));
    assert_eq!(r.status, 200, "{:?}", r.body);
    let exec = |code: &str| {
        e.send(
            e.sandbox(M::POST, &id, JUPYTER, "/execute", Some(&token))
                .json(&json!({ "code": code })),
        )
    };
    let ok = exec("print(6 * 7)");
    assert_eq!(ok.status, 200, "{}", ok.text);
    assert!(ok.text.contains("42"), "{}", ok.text);
    let long = format!("x = 1\n#{}\nprint('ran')", "a".repeat(10_001));
    let denied = exec(&long);
    assert_eq!(denied.status, 403, "{}", denied.text);
    assert!(
        denied.text.starts_with("policy_denied: ") && denied.text.contains("code-size-cap"),
        "the interpreter's plain-text error names the policy: {}",
        denied.text
    );
    assert!(!denied.text.contains("ran"), "{}", denied.text);
    // Recorded, for the sandbox's tenant, as decided for its token (not a key).
    let d = decisions(&e, "execute")
        .into_iter()
        .find(|d| d["resource"] == sb && d["allowed"] == false)
        .expect("the denied execute is recorded");
    assert_eq!(d["policies"], json!(["code-size-cap"]), "{d:#}");
    assert_eq!(d["tenant"], "default", "{d:#}");
    assert_eq!(d["key_id"], format!("sandbox-token:{id}"), "{d:#}");
    // A Bash context is gated as well.
    let bash = e.send(
        e.sandbox(M::POST, &id, JUPYTER, "/execute", Some(&token))
            .json(&json!({ "code": format!("# {}\necho ran", "b".repeat(10_001)), "language": "bash" })),
    );
    assert_eq!(bash.status, 403, "{}", bash.text);
    // Through the server's E2B key instead of the token: decided for that key.
    let with_key = e.send(
        e.sandbox(M::POST, &id, JUPYTER, "/execute", None)
            .header("X-API-KEY", &e.key)
            .json(&json!({ "code": long })),
    );
    assert_eq!(with_key.status, 403, "{}", with_key.text);
    assert!(
        decisions(&e, "execute")
            .iter()
            .any(|d| d["resource"] == sb && d["allowed"] == false && d["key_id"] == "e2b"),
        "the key's denial is recorded as the key's"
    );
    // The E2B key is a member of the tenant default, not its admin (so never the operator):
    // a policy that keeps code to admins refuses it.
    let shipped =
        std::fs::read_to_string(e.server.data_dir().join("policies/policies.cedar")).unwrap();
    let admins_only = format!(
        "{shipped}\n@id(\"admins-only-code\")\nforbid (principal, \
         action == Sandlot::Action::\"execute\", resource) unless {{ principal.role == \"admin\" }};\n"
    );
    let r = e.server.put_bytes("/v1/policies", admins_only.into_bytes());
    assert_eq!(r.status, 200, "{:?}", r.body);
    let as_key = e.send(
        e.sandbox(M::POST, &id, JUPYTER, "/execute", None)
            .header("X-API-KEY", &e.key)
            .json(&json!({ "code": "1 + 1" })),
    );
    assert_eq!(as_key.status, 403, "{}", as_key.text);
    assert!(as_key.text.contains("admins-only-code"), "{}", as_key.text);

    // --- files: writes of secret*, reads of private*.
    let r = e.server.put_bytes("/v1/policies", common::file_policies());
    assert_eq!(r.status, 200, "{:?}", r.body);
    let upload = |path: &str, content: &[u8]| {
        let (ctype, body) = multipart(path, content);
        e.send(
            e.sandbox(M::POST, &id, ENVD, "/files", Some(&token))
                .header("content-type", ctype)
                .body(body),
        )
    };
    let octet = |path: &str, content: &[u8]| {
        e.send(
            e.sandbox(
                M::POST,
                &id,
                ENVD,
                &format!("/files?path={path}"),
                Some(&token),
            )
            .header("content-type", "application/octet-stream")
            .body(content.to_vec()),
        )
    };
    assert_eq!(upload("/home/user/notes.txt", b"fine").status, 200);
    // Every spelling of the same file is the same file to the policy.
    for path in [
        "/home/user/secret.txt",
        "secret.txt",
        "./secret.txt",
        "/home/user//secret.txt",
        "/home/user/./secret-2.txt",
        "~/secret.txt",
        "/workspace/secret.txt",
    ] {
        assert_e2b_denied(&upload(path, b"nope"), "no-secret-writes");
        assert_e2b_denied(&octet(path, b"nope"), "no-secret-writes");
    }
    // Several files in one upload: the refused one stops it.
    let boundary = "sandlot-e2b-two";
    let mut two = Vec::new();
    for name in ["/home/user/ok2.txt", "/home/user/secret3.txt"] {
        two.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n\r\nx\r\n"
            )
            .as_bytes(),
        );
    }
    two.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    let got = e.send(
        e.sandbox(M::POST, &id, ENVD, "/files", Some(&token))
            .header(
                "content-type",
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(two),
    );
    assert_e2b_denied(&got, "no-secret-writes");
    let ls = e.send(
        e.sandbox(M::POST, &id, JUPYTER, "/execute", Some(&token))
            .json(&json!({ "code": "ls /workspace", "language": "bash" })),
    );
    assert!(
        !ls.text.contains("secret"),
        "a refused write left a file: {}",
        ls.text
    );
    // The sandbox's own code is not the file API: it may write the file, the API may not
    // read a private one.
    let made = e.send(
        e.sandbox(M::POST, &id, JUPYTER, "/execute", Some(&token))
            .json(&json!({ "code": "echo hidden > /workspace/private.txt", "language": "bash" })),
    );
    assert_eq!(made.status, 200, "{}", made.text);
    for path in ["/home/user/private.txt", "private.txt", "./private.txt"] {
        let got = e.send(e.sandbox(
            M::GET,
            &id,
            ENVD,
            &format!("/files?path={path}"),
            Some(&token),
        ));
        assert_e2b_denied(&got, "no-private-reads");
        assert!(!got.text.contains("hidden"), "{}", got.text);
    }
    let d = decisions(&e, "write_file")
        .into_iter()
        .find(|d| d["allowed"] == false)
        .expect("the denied write is recorded");
    assert_eq!(d["policies"], json!(["no-secret-writes"]), "{d:#}");
    assert_eq!(d["resource"], sb, "{d:#}");

    // --- downloads pass the output guardrails: a secret comes back redacted.
    let secret = github_token();
    let content = format!("user = alice\ntoken = {secret}\n");
    assert_eq!(octet("config.txt", content.as_bytes()).status, 200);
    let got = e.send(e.sandbox(
        M::GET,
        &id,
        ENVD,
        "/files?path=/home/user/config.txt",
        Some(&token),
    ));
    assert_eq!(got.status, 200, "{}", got.text);
    assert!(!got.text.contains(&secret), "the secret left: {}", got.text);
    assert!(
        got.text.contains("[REDACTED:github-token]") && got.text.contains("user = alice"),
        "{}",
        got.text
    );
    let clean = e.send(e.sandbox(M::GET, &id, ENVD, "/files?path=notes.txt", Some(&token)));
    assert_eq!((clean.status, clean.text.as_str()), (200, "fine"));
    // A policy that withholds secrets: the download is refused, nothing of it sent.
    let file_policies = common::file_policies();
    let withhold = format!(
        "{file_policies}\n@id(\"withhold-secrets\")\n@reason(\"secrets are withheld\")\n\
         permit (principal, action == Sandlot::Action::\"output_withhold\", resource)\n\
         when {{ context.kind == \"secret\" }};\n"
    );
    let r = e.server.put_bytes("/v1/policies", withhold);
    assert_eq!(r.status, 200, "{:?}", r.body);
    let got = e.send(e.sandbox(M::GET, &id, ENVD, "/files?path=config.txt", Some(&token)));
    e2b_error(&got, 403);
    assert_eq!(got.json["sandlot_code"], "policy_denied", "{}", got.text);
    assert!(
        got.text.contains("withheld") && !got.text.contains("alice"),
        "{}",
        got.text
    );
    let r = e.server.put_bytes("/v1/policies", common::file_policies());
    assert_eq!(r.status, 200, "{:?}", r.body);

    // --- creation: a free tenant asking for the trusted tier is refused, and nothing made.
    let free_key = e.server.tenant("freebie").quotas(json!({})).key();
    let plain = e.server.client_with_key(None);
    let got = e.send(
        plain
            .post(e.url("/sandboxes"))
            .header("X-API-KEY", &free_key)
            .json(&json!({ "templateID": "base", "metadata": { "sandlot.tier": "trusted" } })),
    );
    e2b_error(&got, 403);
    assert_eq!(got.json["sandlot_code"], "policy_denied", "{}", got.text);
    assert!(got.text.contains("select_tier"), "{}", got.text);
    let listed = e.send(
        plain
            .get(e.url("/v2/sandboxes"))
            .header("X-API-KEY", &free_key),
    );
    assert_eq!(listed.json, json!([]), "a refused creation left a sandbox");
    let v1 = e.server.client_with_key(Some(&free_key));
    let d: Value = v1
        .get(e.url("/v1/decisions?gate=select_tier"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let d = &d["decisions"][0];
    assert_eq!(
        (&d["allowed"], &d["resource"], &d["tenant"]),
        (
            &json!(false),
            &json!("Tier::\"trusted\""),
            &json!("freebie")
        ),
        "{d:#}"
    );
    // Isolated (asked for or not) is fine; a tier that does not exist is a 400.
    for tier in [None, Some("isolated")] {
        let mut body = json!({ "templateID": "base", "timeout": 60 });
        if let Some(t) = tier {
            body["metadata"] = json!({ "sandlot.tier": t });
        }
        let got = e.send(
            plain
                .post(e.url("/sandboxes"))
                .header("X-API-KEY", &free_key)
                .json(&body),
        );
        assert_eq!(got.status, 201, "{}", got.text);
        let sid = got.json["sandboxID"].as_str().unwrap();
        let r: Value = v1
            .get(e.url(&format!("/v1/sandboxes/{sid}")))
            .send()
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(r["tier"], "isolated", "{r:#}");
        let got = e.send(
            plain
                .delete(e.url(&format!("/sandboxes/{sid}")))
                .header("X-API-KEY", &free_key),
        );
        assert_eq!(got.status, 204, "{}", got.text);
    }
    let got = e.send(
        plain
            .post(e.url("/sandboxes"))
            .header("X-API-KEY", &free_key)
            .json(&json!({ "templateID": "base", "metadata": { "sandlot.tier": "root" } })),
    );
    e2b_error(&got, 400);
    // The local plan (the server's E2B key) may have it.
    let got = e.send(e.api(M::POST, "/sandboxes").json(
        &json!({ "templateID": "base", "timeout": 60, "metadata": { "sandlot.tier": "trusted" } }),
    ));
    assert_eq!(got.status, 201, "{}", got.text);
    let tid = got.json["sandboxID"].as_str().unwrap().to_owned();
    assert_eq!(
        e.server.get(&format!("/v1/sandboxes/{tid}")).body["tier"],
        "trusted"
    );
    assert_eq!(
        e.send(e.api(M::DELETE, &format!("/sandboxes/{tid}")))
            .status,
        204
    );
    assert_eq!(
        e.send(e.api(M::DELETE, &format!("/sandboxes/{id}"))).status,
        204
    );
}
