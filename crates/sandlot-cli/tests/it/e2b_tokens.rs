//! E2B sandbox tokens rotate and expire (issue 19), against a real `sandlot serve`.
//!
//! - `POST /v1/sandboxes/{id}/ports/rotate` moves the sandbox's epoch on: every envd token
//!   handed out before is refused at once on envd's files, its process RPC and the code
//!   interpreter's `/execute`, and every traffic token on the sandbox's ports (401
//!   `token_revoked`); E2B's connect hands out the new ones, which work; after a restart the
//!   old ones stay refused.
//! - With `SANDLOT_ENVD_TOKEN_TTL`, tokens without an expiry are refused, tokens handed out
//!   stop working when their time is up (401 `token_expired`), and connect hands out fresh ones.
//! - Every bad spelling (garbage, truncated, upper case, another sandbox's, the traffic token
//!   as the envd one, a 60 KB header) is 401 `token_invalid`, and the refusals are in the
//!   audit log's tallies with their codes.

use crate::common;

use common::TestServer;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const ENVD: &str = "49983";
const JUPYTER: &str = "49999";
/// A port with nothing listening: a request the traffic token lets through gets 502.
const APP_PORT: &str = "8000";

/// What came back.
struct Got {
    status: u16,
    text: String,
}

impl Got {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or(Value::Null)
    }
}

struct E2b {
    server: TestServer,
    key: String,
}

/// A sandbox's tokens, as the control plane handed them out.
#[derive(Clone, Debug)]
struct Tokens {
    envd: String,
    traffic: String,
}

impl E2b {
    fn start(env: &[(&str, &str)]) -> E2b {
        let server = TestServer::start_with_env(env);
        let key = std::fs::read_to_string(server.data_dir().join("e2b-api-key"))
            .expect("the server writes its E2B key on start")
            .trim()
            .to_owned();
        E2b { server, key }
    }

    fn send(&self, req: reqwest::blocking::RequestBuilder) -> Got {
        let resp = req.send().expect("request");
        let status = resp.status().as_u16();
        Got {
            status,
            text: resp.text().unwrap_or_default(),
        }
    }

    fn control(&self, path: &str, body: Value) -> Got {
        self.send(
            self.server
                .client()
                .post(format!("{}{path}", self.server.url()))
                .header("X-API-KEY", &self.key)
                .json(&body),
        )
    }

    fn tokens_of(got: &Got) -> Tokens {
        let b = got.json();
        Tokens {
            envd: b["envdAccessToken"]
                .as_str()
                .expect("envdAccessToken")
                .into(),
            traffic: b["trafficAccessToken"]
                .as_str()
                .expect("trafficAccessToken")
                .into(),
        }
    }

    /// Creates a sandbox through E2B's control plane: its id and tokens.
    fn create(&self) -> (String, Tokens) {
        let got = self.control(
            "/sandboxes",
            json!({"templateID": "code-interpreter-v1", "timeout": 600}),
        );
        assert_eq!(got.status, 201, "{}", got.text);
        let id = got.json()["sandboxID"].as_str().unwrap().to_owned();
        (id, Self::tokens_of(&got))
    }

    /// `Sandbox.connect(id)`: the tokens it hands out now.
    fn connect(&self, id: &str) -> Tokens {
        let got = self.control(&format!("/sandboxes/{id}/connect"), json!({"timeout": 600}));
        assert!(got.status == 200 || got.status == 201, "{}", got.text);
        Self::tokens_of(&got)
    }

    fn to_sandbox(
        &self,
        method: reqwest::Method,
        id: &str,
        port: &str,
        path: &str,
    ) -> reqwest::blocking::RequestBuilder {
        self.server
            .client()
            .request(method, format!("{}{path}", self.server.url()))
            .header("E2b-Sandbox-Id", id)
            .header("E2b-Sandbox-Port", port)
    }

    /// envd's `GET /files` with `token` as the envd token.
    fn read_file(&self, id: &str, token: &str) -> Got {
        self.send(
            self.to_sandbox(
                reqwest::Method::GET,
                id,
                ENVD,
                "/files?path=/home/user/note.txt",
            )
            .header("X-Access-Token", token),
        )
    }

    /// envd's `process.Process/List` (Connect, unary JSON).
    fn list_processes(&self, id: &str, token: &str) -> Got {
        self.send(
            self.to_sandbox(reqwest::Method::POST, id, ENVD, "/process.Process/List")
                .header("X-Access-Token", token)
                .header("Content-Type", "application/json")
                .body("{}"),
        )
    }

    /// The code interpreter's `/execute`.
    fn execute(&self, id: &str, token: &str) -> Got {
        self.send(
            self.to_sandbox(reqwest::Method::POST, id, JUPYTER, "/execute")
                .header("X-Access-Token", token)
                .json(&json!({"code": "print(6 * 7)"})),
        )
    }

    /// A request to an app port with `token` as the traffic token.
    fn app(&self, id: &str, token: &str) -> Got {
        self.send(
            self.to_sandbox(reqwest::Method::GET, id, APP_PORT, "/")
                .header("E2B-Traffic-Access-Token", token),
        )
    }

    /// Every envd route the test uses opens with `t`.
    #[track_caller]
    fn assert_opens(&self, id: &str, t: &Tokens) {
        let got = self.read_file(id, &t.envd);
        assert_eq!(got.status, 200, "files: {}", got.text);
        assert_eq!(got.text, "kept");
        let got = self.list_processes(id, &t.envd);
        assert_eq!(got.status, 200, "process RPC: {}", got.text);
        let got = self.execute(id, &t.envd);
        assert_eq!(got.status, 200, "execute: {}", got.text);
        assert!(got.text.contains("42"), "{}", got.text);
        // Past authentication: nothing listens there.
        let got = self.app(id, &t.traffic);
        assert_eq!(got.status, 502, "traffic token: {}", got.text);
    }

    /// Every route refuses `t` with 401 `code`, each in its protocol's format.
    #[track_caller]
    fn assert_refused(&self, id: &str, t: &Tokens, code: &str) {
        let got = self.read_file(id, &t.envd);
        assert_eq!(got.status, 401, "files: {}", got.text);
        assert_eq!(got.json()["sandlot_code"], code, "{}", got.text);
        assert_eq!(got.json()["code"], 401, "{}", got.text);
        let got = self.list_processes(id, &t.envd);
        assert_eq!(got.status, 401, "process RPC: {}", got.text);
        assert_eq!(got.json()["code"], "unauthenticated", "{}", got.text);
        let message = got.json()["message"].as_str().unwrap_or("").to_owned();
        assert!(message.starts_with(&format!("{code}: ")), "{message}");
        let got = self.execute(id, &t.envd);
        assert_eq!(got.status, 401, "execute: {}", got.text);
        assert!(got.text.starts_with(&format!("{code}: ")), "{}", got.text);
        let got = self.app(id, &t.traffic);
        assert_eq!(got.status, 401, "traffic token: {}", got.text);
        assert_eq!(got.json()["sandlot_code"], code, "{}", got.text);
    }

    fn rotate(&self, id: &str) -> Value {
        self.server
            .post(&format!("/v1/sandboxes/{id}/ports/rotate"), &json!({}))
            .expect(200)
            .clone()
    }

    /// The refusals' tallies in the audit log, by reason, once they include `want`.
    fn refusal_reasons(&self, want: &[&str]) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let records = self
                .server
                .get("/v1/audit?action=requests.refused&limit=1000")
                .expect(200)["records"]
                .as_array()
                .unwrap()
                .clone();
            let mut reasons = serde_json::Map::new();
            for r in &records {
                if let Some(m) = r["target"]["reasons"].as_object() {
                    for (k, v) in m {
                        let n = reasons.get(k).and_then(Value::as_u64).unwrap_or(0);
                        reasons.insert(k.clone(), json!(n + v.as_u64().unwrap_or(0)));
                    }
                }
            }
            if want.iter().all(|w| reasons.contains_key(*w)) {
                return Value::Object(reasons);
            }
            assert!(
                Instant::now() < deadline,
                "no tallies of {want:?} in the audit log: {records:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Rotation ends every earlier envd and traffic token at once, on every envd face and the
/// ports, and across a restart; connect hands out the new ones; every bad spelling is
/// refused with its code, and the refusals are tallied in the audit log. Regression: E2B
/// tokens were valid for the sandbox's whole life and could not be revoked.
#[test]
fn e2b_tokens_rotate_and_bad_ones_are_refused() {
    let mut e = E2b::start(&[("SANDLOT_AUDIT_REFUSALS_SECONDS", "1")]);
    let (id, first) = e.create();
    // Never rotated, no TTL: the form tokens had before, so those handed out still work.
    assert_eq!(first.envd.len(), 64, "{first:?}");
    assert!(first.envd.bytes().all(|b| b.is_ascii_hexdigit()));
    e.server
        .put_bytes(&format!("/v1/sandboxes/{id}/files/note.txt"), "kept")
        .expect(201);
    e.assert_opens(&id, &first);
    // Connecting again before a rotation hands out the same tokens.
    let again = e.connect(&id);
    assert_eq!(again.envd, first.envd);

    let rotated = e.rotate(&id);
    // E2B's sandboxes expose every port: the answer carries the new port token too.
    assert!(rotated["port_token"].is_string(), "{rotated}");
    e.assert_refused(&id, &first, "token_revoked");
    let second = e.connect(&id);
    assert_ne!(second.envd, first.envd);
    assert!(second.envd.starts_with("1-0."), "{second:?}");
    assert_eq!(second.envd.len(), "1-0.".len() + 32);
    e.assert_opens(&id, &second);

    // Bad spellings: each 401 token_invalid on envd's files (and nothing read).
    let (other_id, other) = e.create();
    let mut upper = second.envd.clone();
    upper.make_ascii_uppercase();
    let huge = "1".repeat(60_000);
    let bad = [
        ("garbage", "not-a-token".to_owned()),
        ("empty-ish", "-.".to_owned()),
        ("truncated", second.envd[..second.envd.len() - 1].to_owned()),
        ("extended", format!("{}0", second.envd)),
        ("upper case", upper),
        ("another sandbox's", other.envd.clone()),
        ("the traffic token", second.traffic.clone()),
        ("zero-padded epoch", format!("0{}", second.envd)),
        ("huge", huge),
    ];
    for (what, token) in &bad {
        let got = e.read_file(&id, token);
        assert_eq!(got.status, 401, "{what}: {}", got.text);
        assert_eq!(
            got.json()["sandlot_code"],
            "token_invalid",
            "{what}: {}",
            got.text
        );
        assert!(!got.text.contains("kept"), "{what}");
    }
    // The traffic token never opens envd, even genuine and current.
    let got = e.send(
        e.to_sandbox(
            reqwest::Method::GET,
            &id,
            ENVD,
            "/files?path=/home/user/note.txt",
        )
        .header("E2B-Traffic-Access-Token", &second.traffic),
    );
    assert_eq!(got.status, 401, "{}", got.text);
    assert_eq!(got.json()["sandlot_code"], "token_invalid");
    // The other sandbox is untouched by this one's rotation.
    let got = e.list_processes(&other_id, &other.envd);
    assert_eq!(got.status, 200, "{}", got.text);
    // A sandbox created through /v1 without ports has E2B tokens too: rotating it is allowed
    // and answers no port token.
    let plain = e.server.create_sandbox();
    let r = e.rotate(&plain);
    assert_eq!(r, json!({ "sandbox_id": plain }));

    // The refusals are recorded: tallied per source with their codes.
    let reasons = e.refusal_reasons(&["token_revoked", "token_invalid"]);
    // Four faces refused `first`; nine spellings and the traffic token on envd.
    assert_eq!(reasons["token_revoked"], 4, "{reasons}");
    assert_eq!(reasons["token_invalid"], 10, "{reasons}");

    // After a restart the rotation holds: the epoch is stored.
    e.server.restart();
    e.assert_refused(&id, &first, "token_revoked");
    e.assert_opens(&id, &second);
}

/// With `SANDLOT_ENVD_TOKEN_TTL`, a token stops working once its time is up and connect hands
/// out a fresh one; tokens made without an expiry are refused there. Regression: E2B tokens
/// never expired.
#[test]
fn e2b_tokens_expire_with_a_ttl() {
    let mut e = E2b::start(&[]);
    let (id, forever) = e.create();
    e.server
        .put_bytes(&format!("/v1/sandboxes/{id}/files/note.txt"), "kept")
        .expect(201);
    e.assert_opens(&id, &forever);

    e.server
        .restart_with_env(&[("SANDLOT_ENVD_TOKEN_TTL", "2")]);
    // Made without an expiry: refused once tokens expire.
    e.assert_refused(&id, &forever, "token_expired");
    // The sandbox restarted on this use, before any 2 s token is handed out.
    e.server.execute(&id, "1");
    let timed = e.connect(&id);
    assert!(timed.envd.starts_with("0-"), "{timed:?}");
    // Polled until its time is up: 200 until then (at least 2 s after connect), then 401.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut opened = 0;
    loop {
        let got = e.read_file(&id, &timed.envd);
        if got.status == 401 {
            assert_eq!(got.json()["sandlot_code"], "token_expired", "{}", got.text);
            break;
        }
        assert_eq!(got.status, 200, "{}", got.text);
        opened += 1;
        assert!(Instant::now() < deadline, "the token never expired");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(opened > 0, "the token opened nothing before it expired");
    e.assert_refused(&id, &timed, "token_expired");
    // Connect hands out a fresh one.
    let fresh = e.connect(&id);
    let got = e.read_file(&id, &fresh.envd);
    assert_eq!(got.status, 200, "{}", got.text);
    // A rotation under a TTL: the old ones are told as rotated, whatever their time.
    e.rotate(&id);
    e.assert_refused(&id, &fresh, "token_revoked");
    let now = e.connect(&id);
    assert!(now.envd.starts_with("1-"), "{now:?}");
    let got = e.read_file(&id, &now.envd);
    assert_eq!(got.status, 200, "{}", got.text);
}
