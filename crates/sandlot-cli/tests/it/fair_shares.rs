//! Fair shares: one tenant at every per-tenant cap (paused sandboxes, volumes, snapshots,
//! templates, jobs, webhooks, event streams, MCP sessions) is refused with 429
//! `tenant_quota_exceeded` and nothing is made; another tenant's creations still succeed;
//! deleting one of the first tenant's things lets it create again; concurrent creations never
//! pass a cap. The last test measures another tenant's create → first result with the first
//! tenant idle and at every cap (printed for BENCHMARKS.md, not asserted: timings under load
//! are not a test).

use crate::common;

use common::{wait_until, As, Resp, TestServer};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Caps small enough to reach in a test.
fn small_caps() -> Value {
    json!({
        "max_paused_sandboxes": 1,
        "max_volumes": 2,
        "max_snapshots": 1,
        "max_templates": 1,
        "max_jobs": 1,
        "max_webhooks": 1,
        "max_event_streams": 1,
        "max_mcp_sessions": 1,
    })
}

/// Asserts the refusal of a share at its cap: 429, the code, the quota and the count named.
#[track_caller]
fn refused(r: &Resp, quota: &str, held: u64) {
    r.expect_error(429, "tenant_quota_exceeded");
    let m = r.message();
    assert!(
        m.contains(quota) && m.contains(&format!("holds {held} of {held}")),
        "{m}"
    );
}

fn count(a: &As, path: &str, field: &str) -> usize {
    a.get(path).expect(200)[field].as_array().unwrap().len()
}

fn sandbox(a: &As) -> String {
    a.post("/v1/sandboxes", &json!({})).expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn volume(a: &As, name: &str) -> Resp {
    a.post("/v1/volumes", &json!({"name": name, "size_mb": 16}))
}

fn webhook(a: &As) -> Resp {
    a.post(
        "/v1/webhooks",
        &json!({"url": "http://127.0.0.1:9/hook", "events": ["killed"]}),
    )
}

fn events(a: &As) -> reqwest::blocking::Response {
    a.http.get(a.url("/v1/events")).send().unwrap()
}

/// `initialize` on `/mcp`: the status, the session id and the body.
fn mcp_open(a: &As) -> (u16, Option<String>, String) {
    let resp = a
        .http
        .post(a.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                      "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                 "clientInfo": {"name": "fair-shares", "version": "0"}}}))
        .send()
        .unwrap();
    let status = resp.status().as_u16();
    let sid = resp
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, sid, resp.text().unwrap_or_default())
}

/// A JSON-RPC message on session `sid`; the response's text (JSON or SSE).
fn mcp_send(a: &As, sid: &str, body: Value) -> String {
    a.http
        .post(a.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .header("mcp-session-id", sid)
        .json(&body)
        .send()
        .unwrap()
        .text()
        .unwrap_or_default()
}

fn mcp_close(a: &As, sid: &str) {
    let r = a
        .http
        .delete(a.url("/mcp"))
        .header("mcp-session-id", sid)
        .header("mcp-protocol-version", "2025-06-18")
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
}

/// What a tenant holds at every cap of [`small_caps`].
struct AtCaps {
    running: String,
    paused: String,
    volumes: Vec<String>,
    snapshot: String,
    job: String,
    webhook: String,
    stream: reqwest::blocking::Response,
    session: String,
}

/// Fills every cap of tenant `a` (named `name`), asserting at each that one more is refused
/// and that the refusal made nothing.
fn fill_every_cap(a: &As, name: &str) -> AtCaps {
    let running = sandbox(a);
    let other = sandbox(a);

    a.post(&format!("/v1/sandboxes/{other}/pause"), &json!({}))
        .expect(200);
    refused(
        &a.post(&format!("/v1/sandboxes/{running}/pause"), &json!({})),
        "max_paused_sandboxes",
        1,
    );
    assert_eq!(
        a.get(&format!("/v1/sandboxes/{running}")).expect(200)["state"],
        "running"
    );

    let volumes: Vec<String> = (0..2).map(|i| format!("{name}-v{i}")).collect();
    for v in &volumes {
        volume(a, v).expect(201);
    }
    refused(&volume(a, &format!("{name}-v9")), "max_volumes", 2);
    assert_eq!(count(a, "/v1/volumes", "volumes"), 2);
    a.get(&format!("/v1/volumes/{name}-v9"))
        .expect_error(404, "volume_not_found");

    let snapshot = a
        .post(&format!("/v1/sandboxes/{running}/snapshots"), &json!({}))
        .expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    refused(
        &a.post(&format!("/v1/sandboxes/{running}/snapshots"), &json!({})),
        "max_snapshots",
        1,
    );
    assert_eq!(count(a, "/v1/snapshots", "snapshots"), 1);

    a.post("/v1/templates", &json!({"name": format!("{name}-t0")}))
        .expect(202);
    refused(
        &a.post("/v1/templates", &json!({"name": format!("{name}-t1")})),
        "max_templates",
        1,
    );
    a.get(&format!("/v1/templates/{name}-t1"))
        .expect_error(404, "template_not_found");

    let job = a
        .post(
            &format!("/v1/sandboxes/{running}/jobs"),
            &json!({"code": "import time; time.sleep(120)"}),
        )
        .expect(202)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    refused(
        &a.post(
            &format!("/v1/sandboxes/{running}/jobs"),
            &json!({"code": "1"}),
        ),
        "max_jobs",
        1,
    );
    assert_eq!(
        count(a, &format!("/v1/sandboxes/{running}/jobs"), "jobs"),
        1
    );

    let webhook_id = webhook(a).expect(201)["id"].as_str().unwrap().to_owned();
    refused(&webhook(a), "max_webhooks", 1);
    assert_eq!(count(a, "/v1/webhooks", "webhooks"), 1);

    let stream = events(a);
    assert_eq!(stream.status().as_u16(), 200);
    let second = events(a);
    assert_eq!(second.status().as_u16(), 429);
    let body: Value = second.json().unwrap();
    assert_eq!(body["error"]["code"], "tenant_quota_exceeded");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_event_streams quota of tenant"),
        "{body}"
    );

    let (status, session, text) = mcp_open(a);
    assert_eq!(status, 200, "{text}");
    let (status, none, text) = mcp_open(a);
    assert_eq!((status, none), (429, None), "{text}");
    assert!(
        text.contains("tenant_quota_exceeded")
            && text.contains("max_mcp_sessions")
            && text.contains("holds 1 of 1"),
        "{text}"
    );

    AtCaps {
        running,
        paused: other,
        volumes,
        snapshot,
        job,
        webhook: webhook_id,
        stream,
        session: session.expect("a session id"),
    }
}

#[test]
fn a_tenant_at_every_cap_is_refused_alone_and_deleting_makes_room() {
    let server = TestServer::start_with_env(&[("SANDLOT_WEBHOOK_ALLOW_PRIVATE", "1")]);
    let ka = server
        .tenant("alpha")
        .quotas(small_caps())
        .role("admin")
        .key();
    let kb = server.tenant("beta").quotas(json!({})).role("admin").key();
    let a = As::key(&server, &ka);
    let b = As::key(&server, &kb);

    let held = fill_every_cap(&a, "alpha");

    // The other protocols draw on the same shares: an E2B pause, an MCP snapshot.
    let e2b = server
        .client_with_key(None)
        .post(a.url(&format!("/sandboxes/{}/pause", held.running)))
        .header("X-API-KEY", &ka)
        .send()
        .unwrap();
    assert_eq!(e2b.status().as_u16(), 429);
    assert!(e2b.text().unwrap().contains("max_paused_sandboxes"));
    assert_eq!(
        a.get(&format!("/v1/sandboxes/{}", held.running))
            .expect(200)["state"],
        "running"
    );
    mcp_send(
        &a,
        &held.session,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    let answer = mcp_send(
        &a,
        &held.session,
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "snapshot_sandbox",
                          "arguments": {"sandbox_id": held.running}}}),
    );
    assert!(
        answer.contains("tenant_quota_exceeded") && answer.contains("max_snapshots"),
        "{answer}"
    );
    assert_eq!(count(&a, "/v1/snapshots", "snapshots"), 1);

    // Beta (server defaults) creates one of each meanwhile.
    let bs = sandbox(&b);
    volume(&b, "beta-v0").expect(201);
    b.post(&format!("/v1/sandboxes/{bs}/snapshots"), &json!({}))
        .expect(201);
    b.post("/v1/templates", &json!({"name": "beta-t0"}))
        .expect(202);
    let bjob = b
        .post(
            &format!("/v1/sandboxes/{bs}/jobs"),
            &json!({"code": "print(1)"}),
        )
        .expect(202)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    webhook(&b).expect(201);
    let bstream = events(&b);
    assert_eq!(bstream.status().as_u16(), 200);
    let (status, bsession, text) = mcp_open(&b);
    assert_eq!(status, 200, "{text}");
    b.post(&format!("/v1/sandboxes/{bs}/pause"), &json!({}))
        .expect(200);

    // Deleting one of alpha's things makes room for one more, and only one.
    a.delete(&format!("/v1/sandboxes/{}", held.paused))
        .expect(204);
    a.post(&format!("/v1/sandboxes/{}/pause", held.running), &json!({}))
        .expect(200);
    a.post(
        &format!("/v1/sandboxes/{}/resume", held.running),
        &json!({}),
    )
    .expect(200);

    a.delete(&format!("/v1/volumes/{}", held.volumes[0]))
        .expect(204);
    volume(&a, "alpha-v8").expect(201);
    refused(&volume(&a, "alpha-v9"), "max_volumes", 2);

    a.delete(&format!("/v1/snapshots/{}", held.snapshot))
        .expect(204);
    a.post(
        &format!("/v1/sandboxes/{}/snapshots", held.running),
        &json!({}),
    )
    .expect(201);

    a.delete(&format!("/v1/jobs/{}", held.job));
    assert!(
        wait_until(Duration::from_secs(20), || {
            let s = &a.get(&format!("/v1/jobs/{}", held.job)).body["state"];
            s != "queued" && s != "running"
        }),
        "the cancelled job did not end"
    );
    a.post(
        &format!("/v1/sandboxes/{}/jobs", held.running),
        &json!({"code": "print(2)"}),
    )
    .expect(202);

    a.delete(&format!("/v1/webhooks/{}", held.webhook))
        .expect(204);
    webhook(&a).expect(201);

    mcp_close(&a, &held.session);
    let (status, _, text) = mcp_open(&a);
    assert_eq!(status, 200, "{text}");

    // A closed stream is noticed when the next event is written to it: alpha's executions
    // make events until the server lets go of the stream's slot.
    drop(held.stream);
    let mut reopened = None;
    let ok = wait_until(Duration::from_secs(20), || {
        a.post(
            &format!("/v1/sandboxes/{}/execute", held.running),
            &json!({"code": "1"}),
        );
        let r = events(&a);
        if r.status().as_u16() == 200 {
            reopened = Some(r);
            true
        } else {
            false
        }
    });
    assert!(ok, "the closed stream's slot was never given back");

    // Beta's job ran to its end whatever alpha held.
    assert!(wait_until(Duration::from_secs(30), || {
        b.get(&format!("/v1/jobs/{bjob}")).body["state"] == "succeeded"
    }));
    drop((bstream, bsession));
}

#[test]
fn concurrent_creations_never_pass_a_cap() {
    let server = TestServer::start();
    let key = server
        .tenant("gamma")
        .quotas(json!({"max_volumes": 3}))
        .role("admin")
        .key();
    let statuses: Vec<Resp> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let (server, key) = (&server, &key);
                s.spawn(move || volume(&As::key(server, key), &format!("gamma-{i}")))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let created = statuses.iter().filter(|r| r.status == 201).count();
    for r in statuses.iter().filter(|r| r.status != 201) {
        refused(r, "max_volumes", 3);
    }
    assert_eq!(created, 3);
    let a = As::key(&server, &key);
    assert_eq!(count(&a, "/v1/volumes", "volumes"), 3);

    // Snapshot bytes: the first snapshot fits under one byte held, the next does not.
    let key = server
        .tenant("delta")
        .quotas(json!({"max_snapshot_bytes": 1}))
        .role("admin")
        .key();
    let d = As::key(&server, &key);
    let id = sandbox(&d);
    d.post(
        &format!("/v1/sandboxes/{id}/execute"),
        &json!({"code": "x = 1"}),
    )
    .expect(200);
    let first = d
        .post(&format!("/v1/sandboxes/{id}/snapshots"), &json!({}))
        .expect(201)
        .clone();
    let bytes = first["state_bytes"].as_u64().unwrap();
    assert!(bytes > 0, "{first}");
    let r = d.post(&format!("/v1/sandboxes/{id}/snapshots"), &json!({}));
    r.expect_error(429, "tenant_quota_exceeded");
    assert!(
        r.message().contains(&format!(
            "max_snapshot_bytes quota of tenant delta is full: it holds {bytes} bytes of 1 bytes"
        )),
        "{}",
        r.message()
    );
    assert_eq!(count(&d, "/v1/snapshots", "snapshots"), 1);

    // Idling does not get round the paused share: of two sandboxes that pause when idle,
    // one pauses and the other, its tenant at the cap, is deleted instead.
    let key = server
        .tenant("epsilon")
        .quotas(json!({"max_paused_sandboxes": 1}))
        .role("admin")
        .key();
    let e = As::key(&server, &key);
    for _ in 0..2 {
        e.post(
            "/v1/sandboxes",
            &json!({"idle_timeout": 1, "on_idle": "pause"}),
        )
        .expect(201);
    }
    let settled = wait_until(Duration::from_secs(30), || {
        let list = e.get("/v1/sandboxes").expect(200).clone();
        let states: Vec<&str> = list["sandboxes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["state"].as_str().unwrap())
            .collect();
        states == ["paused"]
    });
    assert!(settled, "{}", e.get("/v1/sandboxes").text);
}

/// create → first result (`print(1 + 1)`) for `b`, `n` times: sorted durations.
fn create_to_first_result(b: &As, n: usize) -> Vec<Duration> {
    let mut took: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            let id = sandbox(b);
            let r = b.post(
                &format!("/v1/sandboxes/{id}/execute"),
                &json!({"code": "print(1 + 1)"}),
            );
            let took = t.elapsed();
            assert_eq!(r.expect(200)["stdout"], "2\n", "{}", r.text);
            b.delete(&format!("/v1/sandboxes/{id}")).expect(204);
            took
        })
        .collect();
    took.sort();
    took
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1000.0
}

/// Measures, not asserts: another tenant's create → first result with the first tenant idle
/// and with it at every cap, printed as one line for BENCHMARKS.md. Every creation must
/// succeed.
#[test]
fn another_tenants_create_to_first_result_with_one_tenant_at_every_cap() {
    // 30 by default (a suite's run); more for a benchmark (`SANDLOT_FAIRNESS_RUNS`).
    let n: usize = std::env::var("SANDLOT_FAIRNESS_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let server = TestServer::start_with_env(&[("SANDLOT_WEBHOOK_ALLOW_PRIVATE", "1")]);
    let ka = server
        .tenant("alpha")
        .quotas(small_caps())
        .role("admin")
        .key();
    let kb = server.tenant("beta").quotas(json!({})).role("admin").key();
    let a = As::key(&server, &ka);
    let b = As::key(&server, &kb);
    // One creation first, so neither run pays for the first start of the template.
    create_to_first_result(&b, 1);
    let idle = create_to_first_result(&b, n);
    let held = fill_every_cap(&a, "alpha");
    // Alpha's template builds once; what is measured is alpha holding, not alpha building.
    assert!(wait_until(Duration::from_secs(180), || {
        a.get("/v1/templates/alpha-t0").body["status"] != "building"
    }));
    let capped = create_to_first_result(&b, n);
    eprintln!(
        "fairness: tenant B create -> first result over {n} runs: A idle p50 {:.1} ms p99 {:.1} ms; \
         A at every cap p50 {:.1} ms p99 {:.1} ms; p99 ratio {:.2}",
        pct(&idle, 0.5),
        pct(&idle, 0.99),
        pct(&capped, 0.5),
        pct(&capped, 0.99),
        pct(&capped, 0.99) / pct(&idle, 0.99),
    );
    drop(held);
}
