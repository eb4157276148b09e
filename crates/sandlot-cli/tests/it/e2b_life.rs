//! E2B's sandbox lifecycle against a real `sandlot serve`, the protocol and attack side (what
//! the real SDKs do is in sdk/python/tests/test_e2b_lifecycle.py): metrics (ranges, bad
//! input, other tenants' and unknown sandboxes), a code execution whose sandbox is killed
//! (its stream is cut, envd's `/health` then says 502), and `autoResume` (a port request
//! wakes only a sandbox created with it, and only with that sandbox's own credentials).

use crate::e2b_api::{E2b, Got};
use reqwest::blocking::RequestBuilder;
use reqwest::Method as M;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

impl E2b {
    /// A control-plane request with `key` as `X-API-KEY`.
    fn api_as(&self, key: &str, method: M, path: &str) -> RequestBuilder {
        self.server
            .client_with_key(None)
            .request(method, self.url(path))
            .header("X-API-KEY", key)
    }

    /// A control-plane request with the server's E2B key alone.
    fn control(&self, method: M, path: &str) -> RequestBuilder {
        self.api_as(&self.key, method, path)
    }

    /// Creates a sandbox with `body`'s fields added; returns its create answer.
    fn create_as(&self, key: &str, extra: Value) -> Value {
        let mut body = json!({ "templateID": "base", "timeout": 120 });
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let got = self.send(self.api_as(key, M::POST, "/sandboxes").json(&body));
        assert_eq!(got.status, 201, "{}", got.text);
        got.json
    }

    fn state(&self, id: &str) -> String {
        let got = self.send(self.control(M::GET, &format!("/sandboxes/{id}")));
        assert_eq!(got.status, 200, "{}", got.text);
        got.json["state"].as_str().unwrap().to_owned()
    }

    /// Waits (at most 30 s) for sandbox `id` to be in E2B's `state`.
    fn wait_state(&self, id: &str, state: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.state(id) != state {
            assert!(Instant::now() < deadline, "{id} never became {state}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// A request to port `port` of sandbox `id` with `header: value` as its credential.
    fn port(&self, id: &str, port: u16, header: &str, value: &str) -> Got {
        self.send(
            self.server
                .client_with_key(None)
                .get(self.url("/"))
                .header("E2b-Sandbox-Id", id)
                .header("E2b-Sandbox-Port", port.to_string())
                .header(header, value),
        )
    }
}

#[test]
fn e2b_metrics() {
    let e = E2b::start();
    let b_key = e.server.tenant("b").quotas(json!({})).key();
    let mine = e.create_as(&e.key, json!({}));
    let id = mine["sandboxID"].as_str().unwrap().to_owned();
    let theirs = e.create_as(&b_key, json!({}));
    let b_id = theirs["sandboxID"].as_str().unwrap().to_owned();

    // A fresh sandbox has a point at once, with E2B's fields.
    let got = e.send(e.control(M::GET, &format!("/sandboxes/{id}/metrics")));
    assert_eq!(got.status, 200, "{}", got.text);
    let points = got.json.as_array().unwrap();
    assert!(!points.is_empty(), "{}", got.text);
    let p = &points[0];
    for field in [
        "cpuCount",
        "cpuUsedPct",
        "memUsed",
        "memTotal",
        "memCache",
        "diskUsed",
        "diskTotal",
        "timestampUnix",
    ] {
        assert!(p[field].is_number(), "{field} missing: {p}");
    }
    assert!(p["timestamp"].is_string(), "{p}");
    assert!(p["cpuCount"].as_u64().unwrap() >= 1);
    assert!(p["memTotal"].as_u64().unwrap() > 0);
    assert!(p["diskTotal"].as_u64().unwrap() > 0);
    let at = p["timestampUnix"].as_i64().unwrap();

    // Ranges: inclusive, in Unix seconds; one before the sandbox existed is empty.
    let range = |q: &str| e.send(e.control(M::GET, &format!("/sandboxes/{id}/metrics?{q}")));
    let got = range(&format!("start={}&end={}", at - 1, at + 1));
    assert!(!got.json.as_array().unwrap().is_empty(), "{}", got.text);
    let got = range(&format!("start={}&end={}", at - 3600, at - 1800));
    assert_eq!(got.status, 200, "{}", got.text);
    assert_eq!(got.json, json!([]));
    // Bad ranges: 400.
    for q in ["start=10&end=5", "start=abc", "end=-1", "start=1e99"] {
        let got = range(q);
        assert_eq!(got.status, 400, "{q}: {}", got.text);
    }

    // Another tenant's sandbox and an unknown one: 404 alike.
    for other in [b_id.as_str(), "sb_doesnotexist"] {
        let got = e.send(e.control(M::GET, &format!("/sandboxes/{other}/metrics")));
        assert_eq!(got.status, 404, "{other}: {}", got.text);
    }
    // Tenant b sees its own.
    let got = e.send(e.api_as(&b_key, M::GET, &format!("/sandboxes/{b_id}/metrics")));
    assert_eq!(got.status, 200, "{}", got.text);
    // Without a key: 401.
    let got = e.send(
        e.server
            .client_with_key(None)
            .get(e.url(&format!("/sandboxes/{id}/metrics"))),
    );
    assert_eq!(got.status, 401, "{}", got.text);

    // The list: the latest point of each of the caller's own, others' and unknown ids left
    // out alike.
    let got = e.send(e.control(
        M::GET,
        &format!("/sandboxes/metrics?sandbox_ids={id},{b_id},sb_nope"),
    ));
    assert_eq!(got.status, 200, "{}", got.text);
    let listed = got.json["sandboxes"].as_object().unwrap();
    assert_eq!(listed.keys().collect::<Vec<_>>(), vec![&id], "{}", got.text);
    assert!(listed[&id]["memTotal"].is_number());
    let many: Vec<String> = (0..101).map(|i| format!("sb_{i}")).collect();
    let got = e.send(e.control(
        M::GET,
        &format!("/sandboxes/metrics?sandbox_ids={}", many.join(",")),
    ));
    assert_eq!(got.status, 400, "{}", got.text);

    // A killed sandbox has no metrics (404), and is not listed.
    assert_eq!(
        e.send(e.control(M::DELETE, &format!("/sandboxes/{id}")))
            .status,
        204
    );
    assert_eq!(
        e.send(e.control(M::GET, &format!("/sandboxes/{id}/metrics")))
            .status,
        404
    );
    let got = e.send(e.control(M::GET, &format!("/sandboxes/metrics?sandbox_ids={id}")));
    assert_eq!(got.json["sandboxes"], json!({}), "{}", got.text);
}

#[test]
fn e2b_execution_of_a_killed_sandbox_is_cut() {
    let e = E2b::start();
    let sb = e.create_as(&e.key, json!({}));
    let id = sb["sandboxID"].as_str().unwrap().to_owned();
    let token = sb["envdAccessToken"].as_str().unwrap().to_owned();
    let client = e.server.client_with_key(None);
    let resp = client
        .post(e.url("/execute"))
        .header("E2b-Sandbox-Id", &id)
        .header("E2b-Sandbox-Port", "49999")
        .header("X-Access-Token", &token)
        .json(&json!({ "code": "import time; time.sleep(300)" }))
        .timeout(Duration::from_secs(60))
        .send()
        .expect("the execution starts");
    assert_eq!(resp.status(), 200);
    let killer = {
        let req = e.control(M::DELETE, &format!("/sandboxes/{id}"));
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1500));
            req.send().unwrap().status().as_u16()
        })
    };
    let t = Instant::now();
    // The body ends without its last chunk: a transport error, not a clean end.
    let body = resp.text();
    assert!(body.is_err(), "the stream ended cleanly: {body:?}");
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    assert_eq!(killer.join().unwrap(), 204);
    // Then envd says the sandbox is gone (what the SDKs ask before raising).
    let got = e.send(
        client
            .get(e.url("/health"))
            .header("E2b-Sandbox-Id", &id)
            .header("E2b-Sandbox-Port", "49983")
            .header("X-Access-Token", &token),
    );
    assert_eq!(got.status, 502, "{}", got.text);
    // An execution on the killed sandbox: 502 before any stream.
    let got = e.send(
        client
            .post(e.url("/execute"))
            .header("E2b-Sandbox-Id", &id)
            .header("E2b-Sandbox-Port", "49999")
            .header("X-Access-Token", &token)
            .json(&json!({ "code": "1" })),
    );
    assert_eq!(got.status, 502, "{}", got.text);
}

#[test]
fn e2b_auto_resume() {
    let e = E2b::start();
    let b_key = e.server.tenant("b").quotas(json!({})).key();
    // autoResume needs a pause on timeout.
    let got =
        e.send(e.control(M::POST, "/sandboxes").json(
            &json!({ "templateID": "base", "timeout": 60, "autoResume": { "enabled": true } }),
        ));
    assert_eq!(got.status, 400, "{}", got.text);

    let pausing = json!({ "timeout": 2, "autoPause": true });
    let mut waking = pausing.clone();
    waking["autoResume"] = json!({ "enabled": true });
    let wakes = e.create_as(&e.key, waking.clone());
    let sleeps = e.create_as(&e.key, pausing);
    let theirs = e.create_as(&b_key, waking);
    let [w_id, s_id, b_id] =
        [&wakes, &sleeps, &theirs].map(|s| s["sandboxID"].as_str().unwrap().to_owned());
    let traffic = |s: &Value| s["trafficAccessToken"].as_str().unwrap().to_owned();
    for id in [&w_id, &s_id] {
        e.wait_state(id, "paused");
    }
    let b_state = || {
        let got = e.send(e.api_as(&b_key, M::GET, &format!("/sandboxes/{b_id}")));
        got.json["state"].as_str().unwrap().to_owned()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while b_state() != "paused" {
        assert!(Instant::now() < deadline, "b's sandbox never paused");
        std::thread::sleep(Duration::from_millis(200));
    }

    // Credentials that do not open the sandbox wake nothing: another sandbox's traffic
    // token, another tenant's key (the E2B key is tenant default's), a forged token.
    for (header, value) in [
        ("E2B-Traffic-Access-Token", traffic(&wakes)),
        ("X-API-KEY", e.key.clone()),
        ("E2B-Traffic-Access-Token", "0".repeat(64)),
    ] {
        // Refused as a bad token (401) or a sandbox that is not there for the key (envd's
        // 502 `sandbox_not_found`).
        let got = e.port(&b_id, 8000, header, &value);
        assert!(
            got.status == 401 || got.text.contains("sandbox_not_found"),
            "{header}: {} {}",
            got.status,
            got.text
        );
    }
    assert_eq!(b_state(), "paused");

    // Without autoResume a port request leaves it paused (and says so).
    let got = e.port(&s_id, 8000, "E2B-Traffic-Access-Token", &traffic(&sleeps));
    assert_eq!(got.status, 502, "{}", got.text);
    assert_eq!(e.state(&s_id), "paused");

    // With it, the request resumes it first (nothing listens on the port: 502 from the
    // app's side, the sandbox running).
    let got = e.port(&w_id, 8000, "E2B-Traffic-Access-Token", &traffic(&wakes));
    assert_eq!(got.status, 502, "{}", got.text);
    assert!(got.text.contains("nothing listens"), "{}", got.text);
    assert_eq!(e.state(&w_id), "running");
    // Tenant b's own token wakes b's.
    let got = e.port(&b_id, 8000, "E2B-Traffic-Access-Token", &traffic(&theirs));
    assert_eq!(got.status, 502, "{}", got.text);
    assert_eq!(b_state(), "running");
}

#[test]
fn e2b_filesystem_only_pause() {
    let e = E2b::start();
    // A filesystem-only pause cannot auto-resume.
    let got = e.send(e.control(M::POST, "/sandboxes").json(&json!({
        "templateID": "base", "timeout": 60, "autoPause": true,
        "autoPauseMemory": false, "autoResume": { "enabled": true },
    })));
    assert_eq!(got.status, 400, "{}", got.text);

    let sb = e.create_as(
        &e.key,
        json!({ "timeout": 2, "autoPause": true, "autoPauseMemory": false }),
    );
    let id = sb["sandboxID"].as_str().unwrap().to_owned();
    let stdout = |r: &Value| r["stdout"].as_str().unwrap_or("").to_owned();
    e.server.execute(&id, "x = 41");
    e.wait_state(&id, "paused");
    // Requests whose credentials do not open the sandbox drop nothing: a forged token, the
    // envd token of another sandbox.
    let other = e.create_as(&e.key, json!({}));
    for token in [
        "0".repeat(64),
        other["envdAccessToken"].as_str().unwrap().to_owned(),
    ] {
        let got = e.send(
            e.server
                .client_with_key(None)
                .get(e.url("/health"))
                .header("E2b-Sandbox-Id", &id)
                .header("E2b-Sandbox-Port", "49983")
                .header("X-Access-Token", &token),
        );
        assert_eq!(got.status, 401, "{}", got.text);
    }
    // `/v1`'s resume (an execution) restores the memory: nothing dropped it.
    assert_eq!(stdout(&e.server.execute(&id, "print(x + 1)")), "42\n");

    // E2B's connect after the next pause: the files stay, the memory is gone.
    e.wait_state(&id, "paused");
    let got = e.send(
        e.control(M::POST, &format!("/sandboxes/{id}/connect"))
            .json(&json!({})),
    );
    assert_eq!(got.status, 201, "{}", got.text);
    let r = e.server.execute(&id, "print('x' in globals())");
    assert_eq!(stdout(&r), "False\n", "{r:#}");
}
