//! Metrics, per-sandbox metrics and JSON logs (issue 8), against the real server: `/metrics`
//! accounts for every one of 200 concurrent executions and parses with the Prometheus
//! project's own parser, policy decisions, OOMs and timeouts are counted, it is refused
//! without an operator key, per-sandbox CPU and memory move when code works and another
//! tenant's sandbox answers as missing, the recovery time shows after a `kill -9`, the uids
//! environment builds hold are counted beside sandboxes' and zygotes', and the server's stderr
//! is JSON lines under `SANDLOT_LOG_FORMAT=json`.

use crate::common;

use common::{HostView, Resp, TestServer};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// One sample of the text format: name, labels, value.
type Sample = (String, BTreeMap<String, String>, f64);

fn samples(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (head, value) = line.rsplit_once(' ').expect("a sample line");
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("value of {line}"));
        let (name, labels) = match head.split_once('{') {
            Some((n, rest)) => {
                let body = rest.strip_suffix('}').expect("closing brace");
                let mut labels = BTreeMap::new();
                // Label values in these tests never hold `",`.
                for pair in body.split("\",").filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once("=\"").expect("label");
                    labels.insert(k.to_owned(), v.trim_end_matches('"').to_owned());
                }
                (n.to_owned(), labels)
            }
            None => (head.to_owned(), BTreeMap::new()),
        };
        out.push((name, labels, value));
    }
    out
}

/// The sum of `name`'s samples whose labels include `with`.
fn sum(text: &str, name: &str, with: &[(&str, &str)]) -> f64 {
    samples(text)
        .into_iter()
        .filter(|(n, l, _)| {
            n == name
                && with
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, _, v)| v)
        .sum()
}

fn scrape(server: &TestServer) -> String {
    let r = server.get("/metrics");
    assert_eq!(r.status, 200, "{}", r.text);
    let ct = r.headers["content-type"].to_str().unwrap();
    assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
    r.text
}

/// The SDK tests' virtualenv, where the Prometheus client library is installed.
fn venv_python() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/sdk-venv/bin/python");
    assert!(
        p.exists(),
        "{} is missing: scripts/test provisions it (with prometheus-client)",
        p.display()
    );
    p
}

/// Parses `text` with the Prometheus project's OpenMetrics parser (Python `prometheus_client`)
/// and returns {family: {"type", "samples"}}.
fn parse_with_prometheus(text: &str) -> Value {
    use std::io::Write;
    let script = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = {}
for fam in text_string_to_metric_families(sys.stdin.read()):
    out[fam.name] = {"type": fam.type, "samples": len(fam.samples)}
print(json.dumps(out))
"#;
    let mut child = std::process::Command::new(venv_python())
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the OpenMetrics parser refused /metrics: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn get_with(server: &TestServer, key: Option<&str>, path: &str) -> Resp {
    let c = server.client_with_key(key);
    let r = c.get(format!("{}{path}", server.url())).send().unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r.text().unwrap();
    Resp {
        status,
        headers,
        body: serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    }
}

#[test]
fn metrics_account_for_200_concurrent_executions_and_need_an_operator_key() {
    let server = TestServer::start();
    let ids: Vec<String> = (0..20).map(|_| server.create_sandbox()).collect();
    let before = scrape(&server);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..200)
            .map(|i| {
                let (server, id) = (&server, &ids[i % ids.len()]);
                s.spawn(move || server.execute(id, &format!("{i} + 1")))
            })
            .collect();
        for (i, h) in handles.into_iter().enumerate() {
            let r = h.join().unwrap();
            assert_eq!(r["result"]["text/plain"], (i + 1).to_string(), "{r:#}");
        }
    });
    let after = scrape(&server);
    let delta =
        |name: &str, with: &[(&str, &str)]| sum(&after, name, with) - sum(&before, name, with);
    assert_eq!(delta("sandlot_executions_total", &[]), 200.0);
    assert_eq!(
        delta("sandlot_executions_total", &[("end_state", "ok")]),
        200.0
    );
    assert_eq!(
        delta(
            "sandlot_execution_duration_seconds_count",
            &[("language", "python")]
        ),
        200.0
    );
    assert_eq!(
        delta(
            "sandlot_execute_request_duration_seconds_count",
            &[("interface", "rest"), ("outcome", "ok")]
        ),
        200.0
    );
    assert_eq!(
        delta(
            "sandlot_http_requests_total",
            &[
                ("route", "/v1/sandboxes/{id}/execute"),
                ("method", "POST"),
                ("status", "200")
            ]
        ),
        200.0
    );
    assert_eq!(
        delta(
            "sandlot_policy_decisions_total",
            &[("gate", "execute"), ("outcome", "allow")]
        ),
        200.0
    );
    assert!(sum(&after, "sandlot_sandboxes", &[("state", "running")]) >= 20.0);
    assert!(
        sum(
            &after,
            "sandlot_create_sandbox_duration_seconds_count",
            &[("interface", "rest")]
        ) >= 4.0
    );
    assert!(
        sum(&after, "sandlot_zygotes", &[("state", "up")]) >= 1.0,
        "{after}"
    );
    assert_eq!(sum(&after, "sandlot_creation_queue", &[]), 0.0);
    for id in &ids {
        assert!(
            !after.contains(id.as_str()),
            "a sandbox id in /metrics:\n{after}"
        );
    }

    // The Prometheus project's own parser reads it, with the types we meant.
    let parsed = parse_with_prometheus(&after);
    assert_eq!(
        parsed["sandlot_executions"]["type"], "counter",
        "{parsed:#}"
    );
    assert_eq!(
        parsed["sandlot_execution_duration_seconds"]["type"],
        "histogram"
    );
    assert_eq!(parsed["sandlot_sandboxes"]["type"], "gauge");
    assert_eq!(parsed["sandlot_policy_decisions"]["type"], "counter");

    // A denial is counted at its gate.
    let r = server.put_bytes(
        "/v1/policies",
        std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/policies/code-size-cap.cedar"
        ))
        .unwrap(),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    let denied = server.execute_with(
        &ids[0],
        &json!({ "code": format!("x = '{}'", "a".repeat(10_050)) }),
    );
    denied.expect_error(403, "policy_denied");
    let text = scrape(&server);
    assert_eq!(
        sum(
            &text,
            "sandlot_policy_decisions_total",
            &[("gate", "execute"), ("outcome", "deny")]
        ),
        1.0,
        "{text}"
    );

    // Only the operator reads it.
    let r = get_with(&server, None, "/metrics");
    r.expect_error(401, "unauthenticated");
    let r = get_with(&server, Some("sl_not-a-key"), "/metrics");
    r.expect_error(401, "unauthenticated");
    let other_admin = server.tenant("acme").role("admin").key();
    let r = get_with(&server, Some(&other_admin), "/metrics");
    r.expect_error(403, "forbidden");
    assert!(!r.text.contains("sandlot_"), "{}", r.text);
}

#[test]
fn metrics_are_public_only_when_the_operator_says_so() {
    let server = TestServer::start_with_env(&[("SANDLOT_METRICS_PUBLIC", "1")]);
    let r = get_with(&server, None, "/metrics");
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.text.contains("sandlot_sandboxes{"), "{}", r.text);
}

#[test]
fn ooms_and_timeouts_are_counted() {
    let server = TestServer::start();
    let id = server.create_sandbox_with(&json!({ "limits": { "memory_mb": 128 } }))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let before = scrape(&server);
    let r = server.execute_with(
        &id,
        &json!({ "code": "hog = []\nwhile True:\n    hog.append(bytearray(16 * 2**20))", "timeout": 60 }),
    );
    assert_eq!(r.body["end_state"], "oom", "{}", r.text);
    let r = server.execute_with(
        &id,
        &json!({ "code": "import time\ntime.sleep(60)", "timeout": 1 }),
    );
    assert_eq!(r.body["end_state"], "timeout", "{}", r.text);
    let after = scrape(&server);
    let delta =
        |name: &str, with: &[(&str, &str)]| sum(&after, name, with) - sum(&before, name, with);
    assert_eq!(delta("sandlot_ooms_total", &[]), 1.0, "{after}");
    assert_eq!(delta("sandlot_timeouts_total", &[]), 1.0);
    assert_eq!(
        delta("sandlot_executions_total", &[("end_state", "oom")]),
        1.0
    );
    assert_eq!(
        delta("sandlot_executions_total", &[("end_state", "timeout")]),
        1.0
    );
    assert_eq!(
        delta("sandlot_lifecycle_events_total", &[("kind", "restarted")]),
        1.0
    );
}

#[test]
fn per_sandbox_metrics_move_with_the_code_and_are_the_tenants_own() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let usage = |id: &str| server.get(&format!("/v1/sandboxes/{id}/metrics"));
    let first = usage(&id).expect(200).clone();
    assert_eq!(first["sandbox_id"], id.as_str());
    assert_eq!(first["state"], "running");
    assert!(first["pids"].as_u64().unwrap() >= 1, "{first:#}");
    assert!(first["memory_limit_bytes"].as_u64().unwrap() >= 64 << 20);
    server.execute(
        &id,
        "hold = bytearray(96 * 2**20)\nfor i in range(0, len(hold), 4096): hold[i] = 1\n\
         import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass",
    );
    let second = usage(&id).expect(200).clone();
    let mem = |v: &Value| v["memory_bytes"].as_u64().unwrap();
    assert!(
        mem(&second) >= mem(&first) + (80 << 20),
        "memory did not move: {first:#} then {second:#}"
    );
    assert!(second["memory_peak_bytes"].as_u64().unwrap() >= mem(&second));
    let cpu = |v: &Value| v["cpu_time_ms"].as_f64().unwrap();
    assert!(
        cpu(&second) >= cpu(&first) + 250.0,
        "CPU did not move: {first:#} then {second:#}"
    );
    server.execute(&id, "del hold\nimport gc; gc.collect()");
    let third = usage(&id).expect(200).clone();
    assert!(
        mem(&third) + (64 << 20) <= mem(&second),
        "{second:#} then {third:#}"
    );

    // Another tenant's sandbox answers exactly as a missing one.
    let key = server.tenant("acme").role("member").key();
    let theirs = get_with(&server, Some(&key), &format!("/v1/sandboxes/{id}/metrics"));
    let missing = get_with(
        &server,
        Some(&key),
        "/v1/sandboxes/sb_0000000000000000/metrics",
    );
    theirs.expect_error(404, "sandbox_not_found");
    missing.expect_error(404, "sandbox_not_found");
    let mine = get_with(&server, None, &format!("/v1/sandboxes/{id}/metrics"));
    mine.expect_error(401, "unauthenticated");
    for hostile in ["..%2F..%2Fetc", "%00", "sb_%2F..", &"a".repeat(5000)] {
        let r = server.get(&format!("/v1/sandboxes/{hostile}/metrics"));
        assert!(
            r.status == 404 || r.status == 400,
            "{hostile}: {} {}",
            r.status,
            r.text
        );
    }
    // A deleted sandbox has no metrics.
    assert_eq!(
        server.delete(&format!("/v1/sandboxes/{id}")).status / 100,
        2
    );
    let r = usage(&id);
    assert_eq!(r.status / 100, 4, "{}", r.text);
}

#[test]
fn the_recovery_time_shows_after_a_crash() {
    let mut server = TestServer::start();
    let id = server.create_sandbox();
    server.execute(&id, "x = 1");
    server.kill9();
    server.restart();
    let text = scrape(&server);
    let duration = samples(&text)
        .into_iter()
        .find(|(n, _, _)| n == "sandlot_recovery_duration_seconds")
        .unwrap_or_else(|| panic!("no recovery duration in:\n{text}"))
        .2;
    assert!(duration > 0.0 && duration < 120.0, "{duration}");
    assert!(
        sum(&text, "sandlot_recovery_sandboxes", &[]) >= 1.0,
        "{text}"
    );
    // The sandbox left by the crash is back (stopped) and runs again.
    assert_eq!(server.execute(&id, "1 + 1")["result"]["text/plain"], "2");
}

#[test]
fn json_logs_are_one_object_per_line_with_the_trace_id() {
    let server = TestServer::start_with_env(&[
        ("SANDLOT_LOG_FORMAT", "json"),
        (
            "SANDLOT_LOG",
            "debug,rmcp=error,hyper=info,h2=info,reqwest=info",
        ),
    ]);
    let id = server.create_sandbox();
    server.execute(&id, "1 + 1");
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let r = server
        .client()
        .get(format!("{}/v1/sandboxes/sb_0000000000000000", server.url()))
        .header("traceparent", format!("00-{trace}-00f067aa0ba902b7-01"))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    // The request's line is logged at info (a 404); it carries the request's trace id.
    let ok = common::wait_until(Duration::from_secs(10), || server.stderr().contains(trace));
    let stderr = server.stderr();
    let mut lines = 0;
    for line in stderr.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        assert!(
            v["timestamp"].is_string() && v["level"].is_string(),
            "{line}"
        );
        lines += 1;
    }
    assert!(lines >= 3, "{stderr}");
    assert!(ok, "no line with the trace id:\n{stderr}");
    let request_line = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["trace_id"] == trace && v["message"] == "request")
        .unwrap_or_else(|| panic!("no request line with the trace id:\n{stderr}"));
    assert_eq!(request_line["fields"]["status"], 404);
}

#[test]
fn e2b_and_mcp_creations_and_executions_are_counted_by_interface() {
    let server = TestServer::start();
    let before = scrape(&server);
    // E2B: the control plane's creation, then the code interpreter's /execute by header.
    let e2b_key = std::fs::read_to_string(server.data_dir().join("e2b-api-key"))
        .unwrap()
        .trim()
        .to_owned();
    let created = server
        .client()
        .post(format!("{}/sandboxes", server.url()))
        .header("X-API-KEY", &e2b_key)
        .json(&json!({ "templateID": "code-interpreter-v1", "timeout": 120 }))
        .send()
        .unwrap();
    let status = created.status().as_u16();
    let created: Value = created.json().unwrap();
    assert_eq!(status, 201, "{created}");
    let ran = server
        .client()
        .post(format!("{}/execute", server.url()))
        .header("E2b-Sandbox-Id", created["sandboxID"].as_str().unwrap())
        .header("E2b-Sandbox-Port", "49999")
        .header(
            "X-Access-Token",
            created["envdAccessToken"].as_str().unwrap(),
        )
        .json(&json!({ "code": "1 + 1" }))
        .send()
        .unwrap();
    assert_eq!(ran.status().as_u16(), 200);
    assert!(ran.text().unwrap().contains('2'));
    // MCP: a session, a sandbox of its own, one run_python.
    let mcp = |session: Option<&str>, body: Value| {
        let mut req = server
            .client()
            .post(format!("{}/mcp", server.url()))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .json(&body);
        if let Some(s) = session {
            req = req.header("mcp-session-id", s);
        }
        req.send().unwrap()
    };
    let init = mcp(
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "observe-test", "version": "0"}}}),
    );
    assert_eq!(init.status().as_u16(), 200);
    let session = init.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let _ = init.text();
    let n = mcp(
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert_eq!(n.status().as_u16(), 202);
    let call = mcp(
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "run_python", "arguments": {"code": "20 + 22"}}}),
    );
    assert_eq!(call.status().as_u16(), 200);
    assert!(call.text().unwrap().contains("42"));

    let after = scrape(&server);
    let delta =
        |name: &str, with: &[(&str, &str)]| sum(&after, name, with) - sum(&before, name, with);
    assert_eq!(
        delta(
            "sandlot_create_sandbox_duration_seconds_count",
            &[("interface", "e2b")]
        ),
        1.0,
        "{after}"
    );
    assert_eq!(
        delta(
            "sandlot_execute_request_duration_seconds_count",
            &[("interface", "e2b")]
        ),
        1.0
    );
    assert_eq!(
        delta(
            "sandlot_execute_request_duration_seconds_count",
            &[("interface", "mcp")]
        ),
        1.0
    );
    assert_eq!(
        delta(
            "sandlot_http_requests_total",
            &[("interface", "mcp"), ("route", "/mcp run_python")]
        ),
        1.0
    );
    assert_eq!(
        delta(
            "sandlot_http_requests_total",
            &[("interface", "e2b"), ("route", "/execute")]
        ),
        1.0
    );
    // Every execution, whichever interface ran it, reached the runtime's counter: E2B's
    // run_code and MCP's run_python, and before E2B's first cell the one short execution that
    // starts the sandbox's command launcher (sandlot-e2b's `process::warm`).
    assert_eq!(delta("sandlot_executions_total", &[]), 3.0);
    assert!(!after.contains(created["sandboxID"].as_str().unwrap()));
    assert!(!after.contains(&session));
}

/// Environment builds' uids (the builders' range of the server's uid block,
/// `sandlot-runtime/src/uids.rs`) are on `/metrics` beside sandboxes' and zygotes', in the same
/// series: `range="builder"` free and quarantined, `kind="builder"` in use. A build holds its
/// uid for its whole life with an exclusive `flock` on `<data-dir>/run/build/<uid>.lock`,
/// whether this server runs it or `sandlot env` with the same data dir does; the test holds
/// one the same way.
#[test]
fn the_uids_environment_builds_hold_are_on_metrics() {
    let server = TestServer::start();
    let size = f64::from(0xFFFE - 0xF000 + 1);
    let builders = |text: &str| {
        (
            sum(text, "sandlot_uids_free", &[("range", "builder")]),
            sum(text, "sandlot_uids_quarantined", &[("range", "builder")]),
            sum(text, "sandlot_uids_in_use", &[("kind", "builder")]),
        )
    };
    let text = scrape(&server);
    for series in [
        r#"sandlot_uids_free{range="sandbox"}"#,
        r#"sandlot_uids_free{range="zygote"}"#,
        r#"sandlot_uids_free{range="builder"}"#,
        r#"sandlot_uids_quarantined{range="builder"}"#,
        r#"sandlot_uids_in_use{kind="sandbox"}"#,
        r#"sandlot_uids_in_use{kind="builder"}"#,
    ] {
        assert!(text.contains(series), "{series} missing:\n{text}");
    }
    assert_eq!(builders(&text), (size, 0.0, 0.0), "{text}");

    let dir = std::fs::canonicalize(server.data_dir())
        .unwrap()
        .join("run")
        .join("build");
    std::fs::create_dir_all(&dir).unwrap();
    let base = HostView::of(&server).uid_base;
    let hold = |offset: u32| {
        let file = std::fs::File::create(dir.join(format!("{}.lock", base + offset))).unwrap();
        // SAFETY: a valid fd borrowed from a live File; flock touches no memory of ours.
        let rc = unsafe {
            libc::flock(
                std::os::fd::AsRawFd::as_raw_fd(&file),
                libc::LOCK_EX | libc::LOCK_NB,
            )
        };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
        file
    };
    let build = hold(0xF000 + 3);
    // A lock file named for a uid outside the range is no build's.
    let _stray = hold(0xE000);
    let text = scrape(&server);
    assert_eq!(builders(&text), (size - 1.0, 0.0, 1.0), "{text}");
    drop(build);
    let text = scrape(&server);
    assert_eq!(builders(&text), (size, 0.0, 0.0), "{text}");
}
