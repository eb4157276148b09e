//! Disk caps, tested against a real server and real writes inside sandboxes:
//!
//! - a tenant's `max_disk_bytes` bounds the bytes of all its workspaces together (issue 19):
//!   writes from two of its sandboxes stop with `EDQUOT` (errno 122) at the cap, its next
//!   snapshot, volume and sandbox are refused with 429 `tenant_quota_exceeded` naming the
//!   quota, another tenant writes as much as it likes, the cap holds after a server restart,
//!   and deleting a sandbox gives its bytes back;
//! - files per workspace are capped by count (issue 18): creating empty files in a loop stops
//!   with `EDQUOT` a bounded number past `--max-files`, and deleting files lets it create again.

use crate::common;

use common::{wait_until, As, TestServer};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
/// The cap of the tenant under test.
const CAP: u64 = 300 * MIB;

/// A tenant with `quotas` and an admin key of it (capped: not the operator).
fn tenant(server: &TestServer, name: &str, quotas: Value) -> String {
    server
        .post("/v1/tenants", &json!({"name": name, "quotas": quotas}))
        .expect(201);
    server
        .post("/v1/keys", &json!({"tenant": name, "role": "admin"}))
        .expect(201)["key"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn sandbox(a: &As) -> String {
    a.post("/v1/sandboxes", &json!({})).expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Runs `code` in sandbox `id` and parses the JSON line it prints last.
fn run_json(a: &As, id: &str, code: &str) -> Value {
    let r = a
        .post(
            &format!("/v1/sandboxes/{id}/execute"),
            &json!({"code": code, "timeout": 50}),
        )
        .expect(200)
        .clone();
    assert_eq!(r["end_state"], "ok", "{r:#}");
    let out = r["stdout"].as_str().unwrap_or("");
    let line = out
        .lines()
        .last()
        .unwrap_or_else(|| panic!("no output: {r:#}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// Python writing into `/workspace/<name>` (appending) until `limit` bytes are written or a
/// write fails, in 1 MiB chunks and then 64 KiB ones; prints the bytes written by this call
/// and the errno of the failure (0: none).
fn fill(name: &str, limit: u64) -> String {
    format!(
        r#"
import json, os
written, err = 0, 0
try:
    with open("/workspace/{name}", "ab", buffering=0) as f:
        for chunk in (1 << 20, 64 << 10):
            block = b"x" * chunk
            try:
                while written + chunk <= {limit}:
                    written += f.write(block)
            except OSError as e:
                err = e.errno
except OSError as e:
    err = e.errno
print(json.dumps({{"written": written, "errno": err}}))
"#
    )
}

/// Calls MCP tool `tool` with `args` as `key` over a fresh streamable-HTTP session; returns
/// the `tools/call` result.
fn mcp_call(server: &TestServer, key: &str, tool: &str, args: Value) -> Value {
    const PROTOCOL: &str = "2025-06-18";
    let http = server.client_with_key(Some(key));
    let url = format!("{}/mcp", server.url());
    let post = |session: Option<&str>, body: Value| {
        let mut req = http
            .post(&url)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", PROTOCOL)
            .json(&body);
        if let Some(s) = session {
            req = req.header("mcp-session-id", s);
        }
        req.send().expect("MCP request")
    };
    let init = post(
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL, "capabilities": {},
            "clientInfo": {"name": "disk-caps", "version": "0"}}}),
    );
    assert_eq!(init.status().as_u16(), 200);
    let session = init.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    drop(init.text());
    let note = post(
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert_eq!(note.status().as_u16(), 202);
    let text = post(
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": tool, "arguments": args}}),
    )
    .text()
    .unwrap();
    // A JSON body, or SSE `data:` lines of which one answers id 2.
    std::iter::once(text.as_str())
        .chain(text.lines().filter_map(|l| l.strip_prefix("data:")))
        .filter_map(|m| serde_json::from_str::<Value>(m.trim()).ok())
        .find(|m| m["id"] == json!(2))
        .unwrap_or_else(|| panic!("no answer to tools/call: {text}"))["result"]
        .clone()
}

/// What `a` is refused with at its disk cap: 429 naming `max_disk_bytes`.
#[track_caller]
fn refused_at_disk_cap(r: &common::Resp) {
    r.expect_error(429, "tenant_quota_exceeded");
    assert!(
        r.message().contains("max_disk_bytes"),
        "the refusal names the quota: {}",
        r.message()
    );
}

#[test]
fn a_tenant_cap_bounds_all_its_workspaces_and_survives_a_restart() {
    let mut server = TestServer::start_with_env(&[("SANDLOT_POOL_SIZE", "0")]);
    let key_a = tenant(&server, "alpha", json!({"max_disk_bytes": CAP}));
    let key_b = tenant(&server, "beta", json!({}));
    let a = As::key(&server, &key_a);

    // Two sandboxes of alpha: the first writes 200 MiB, the second until the cap stops it,
    // then the first again: both end with EDQUOT and together hold about the cap.
    let (s1, s2) = (sandbox(&a), sandbox(&a));
    let first = run_json(&a, &s1, &fill("f", 200 * MIB));
    assert_eq!(first["errno"], 0, "{first}");
    let second = run_json(&a, &s2, &fill("f", CAP));
    assert_eq!(
        second["errno"], 122,
        "EDQUOT in the second sandbox: {second}"
    );
    let third = run_json(&a, &s1, &fill("g", CAP));
    assert_eq!(third["errno"], 122, "EDQUOT in the first sandbox: {third}");
    let total: u64 = [&first, &second, &third]
        .iter()
        .map(|v| v["written"].as_u64().unwrap())
        .sum();
    eprintln!("alpha wrote {total} bytes against a cap of {CAP}");
    assert!(
        (CAP - 8 * MIB..=CAP).contains(&total),
        "alpha wrote {total} bytes against a cap of {CAP}"
    );

    // At the cap: what needs new disk is refused, before anything is made.
    refused_at_disk_cap(&a.post(&format!("/v1/sandboxes/{s1}/snapshots"), &json!({})));
    refused_at_disk_cap(&a.post("/v1/volumes", &json!({"name": "alpha-v", "size_mb": 16})));
    refused_at_disk_cap(&a.post("/v1/sandboxes", &json!({})));
    refused_at_disk_cap(&a.post(&format!("/v1/sandboxes/{s1}/fork"), &json!({})));
    // E2B's control plane (a sandlot key is an E2B API key) answers the same.
    for path in ["/sandboxes".to_string(), format!("/sandboxes/{s1}/fork")] {
        let r = server
            .client()
            .post(format!("{}{path}", server.url()))
            .header("X-API-KEY", &key_a)
            .json(&json!({"templateID": "base"}))
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), 429, "E2B {path}");
        let text = r.text().unwrap();
        assert!(text.contains("max_disk_bytes"), "E2B {path}: {text}");
    }
    // So does MCP, for a creation and a fork, as a tool error naming the quota.
    for (tool, args) in [
        ("create_sandbox", json!({})),
        ("fork_sandbox", json!({"sandbox_id": s1})),
    ] {
        let r = mcp_call(&server, &key_a, tool, args);
        assert_eq!(r["isError"], true, "MCP {tool}: {r}");
        assert!(r.to_string().contains("max_disk_bytes"), "MCP {tool}: {r}");
    }
    assert_eq!(
        a.get("/v1/sandboxes").expect(200)["sandboxes"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "nothing was made past the cap"
    );
    // A resume needs no new disk: a tenant at its cap resumes (REST and MCP) to delete files.
    for via_mcp in [false, true] {
        a.post(&format!("/v1/sandboxes/{s1}/pause"), &json!({}))
            .expect(200);
        if via_mcp {
            let r = mcp_call(&server, &key_a, "resume_sandbox", json!({"sandbox_id": s1}));
            assert_ne!(r["isError"], true, "MCP resume at the cap: {r}");
        } else {
            a.post(&format!("/v1/sandboxes/{s1}/resume"), &json!({}))
                .expect(200);
        }
    }
    assert_eq!(
        a.get("/v1/snapshots").expect(200)["snapshots"]
            .as_array()
            .unwrap()
            .len(),
        0
    );
    a.get("/v1/volumes/alpha-v")
        .expect_error(404, "volume_not_found");

    // Another tenant on the same disk is unaffected.
    let b = As::key(&server, &key_b);
    let sb = sandbox(&b);
    let wrote = run_json(&b, &sb, &fill("f", CAP));
    assert_eq!(wrote, json!({"written": CAP, "errno": 0}));

    // The cap is on disk: after a restart the second sandbox still cannot write past it.
    server.restart();
    let a = As::key(&server, &key_a);
    let after = run_json(&a, &s2, &fill("h", 16 * MIB));
    assert_eq!(after["errno"], 122, "EDQUOT after the restart: {after}");
    assert!(after["written"].as_u64().unwrap() < 4 * MIB, "{after}");
    refused_at_disk_cap(&a.post(&format!("/v1/sandboxes/{s2}/snapshots"), &json!({})));

    // Deleting the first sandbox gives its ~250 MiB back to alpha.
    a.delete(&format!("/v1/sandboxes/{s1}")).expect(204);
    let mut last = Value::Null;
    let freed = wait_until(Duration::from_secs(10), || {
        last = run_json(&a, &s2, &fill("i", 64 * MIB));
        last["errno"] == 0
    });
    assert!(freed, "alpha's share came back after the delete: {last}");
    a.post(&format!("/v1/sandboxes/{s2}/snapshots"), &json!({}))
        .expect(201);
}

#[test]
fn a_tenant_disk_setting_is_validated_changes_the_cap_in_place_and_holds_forks() {
    let server = TestServer::start_with_env(&[("SANDLOT_POOL_SIZE", "0")]);
    for bad in [json!(-1), json!("lots"), json!(1.5)] {
        server
            .post(
                "/v1/tenants",
                &json!({"name": "gamma", "quotas": {"max_disk_bytes": bad}}),
            )
            .expect_error(400, "invalid_request");
    }
    server
        .get("/v1/tenants/gamma")
        .expect_error(404, "tenant_not_found");

    let key = tenant(&server, "gamma", json!({"max_disk_bytes": 64 * MIB}));
    let g = As::key(&server, &key);
    let id = sandbox(&g);
    let capped = run_json(&g, &id, &fill("f", 128 * MIB));
    assert_eq!(capped["errno"], 122, "{capped}");
    // Raised in place: the same sandbox writes on without a restart.
    As::key(&server, server.key())
        .put(
            "/v1/tenants/gamma",
            &json!({"quotas": {"max_disk_bytes": 256 * MIB}}),
        )
        .expect(200);
    let raised = run_json(&g, &id, &fill("g", 64 * MIB));
    assert_eq!(raised, json!({"written": 64 * MIB, "errno": 0}));

    // A fork's workspace is the tenant's too: the child writes only what is left of the cap
    // (256 MiB, of which the parent holds about 128).
    let forked = g
        .post(&format!("/v1/sandboxes/{id}/fork"), &json!({}))
        .expect(201)
        .clone();
    let child = forked["sandboxes"][0]["id"].as_str().unwrap().to_owned();
    let wrote = run_json(&g, &child, &fill("c", 256 * MIB));
    assert_eq!(wrote["errno"], 122, "{wrote}");
    let n = wrote["written"].as_u64().unwrap();
    assert!((112 * MIB..=128 * MIB).contains(&n), "the child wrote {n}");
}

/// Python creating empty files in `/workspace/<dir>` until one fails or `seconds` pass;
/// prints how many it made, the errno and the time it took.
fn create_files(dir: &str, seconds: u64) -> String {
    format!(
        r#"
import json, os, time
os.makedirs("/workspace/{dir}", exist_ok=True)
n, err, t0 = 0, 0, time.monotonic()
try:
    while time.monotonic() - t0 < {seconds}:
        os.close(os.open("/workspace/{dir}/%d" % n, os.O_CREAT | os.O_WRONLY, 0o644))
        n += 1
except OSError as e:
    err = e.errno
print(json.dumps({{"made": n, "errno": err, "seconds": time.monotonic() - t0}}))
"#
    )
}

#[test]
fn files_per_workspace_are_capped_by_count() {
    const MAX_FILES: u64 = 5_000;
    let server = TestServer::start_with_env(&[
        ("SANDLOT_POOL_SIZE", "0"),
        ("SANDLOT_MAX_FILES", &MAX_FILES.to_string()),
    ]);
    let op = As::key(&server, server.key());
    let id = sandbox(&op);
    let t0 = Instant::now();
    let made = run_json(&op, &id, &create_files("d", 30));
    eprintln!("file cap {MAX_FILES}: {made} ({:?})", t0.elapsed());
    assert_eq!(made["errno"], 122, "EDQUOT past the cap: {made}");
    let n = made["made"].as_u64().unwrap();
    // The bound SECURITY.md states: the maintenance thread checks every 250 ms, so a burst
    // overshoots by what the sandbox creates in about one tick and a count; the test allows
    // a whole second's worth at the rate the loop itself measured (50,000 to 95,000 files a
    // second here), so a loaded machine does not make it fail.
    let seconds = made["seconds"].as_f64().unwrap();
    let per_second = n as f64 / seconds.max(0.001);
    assert!(n >= MAX_FILES - 10, "{made}");
    assert!(
        ((n - MAX_FILES) as f64) < per_second,
        "{n} files made against a cap of {MAX_FILES}: more than a second's worth past it"
    );
    assert!(seconds < 20.0, "{made}");

    // Deleting files (allowed at the clamp) brings the count under the cap and the clamp is
    // lifted: creating works again.
    let removed = run_json(
        &op,
        &id,
        r#"
import json, os
names = os.listdir("/workspace/d")
for name in names[100:]:
    os.unlink("/workspace/d/" + name)
print(json.dumps({"removed": len(names) - 100}))
"#,
    );
    assert!(removed["removed"].as_u64().unwrap() > 0, "{removed}");
    let mut last = Value::Null;
    let again = wait_until(Duration::from_secs(10), || {
        last = run_json(
            &op,
            &id,
            r#"
import json, os
try:
    os.close(os.open("/workspace/again", os.O_CREAT | os.O_WRONLY, 0o644))
    print(json.dumps({"errno": 0}))
except OSError as e:
    print(json.dumps({"errno": e.errno}))
"#,
        );
        last["errno"] == 0
    });
    assert!(again, "creating after deleting: {last}");
}

#[test]
fn a_bad_file_cap_setting_stops_the_server_with_a_clear_error() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandlot"))
        .args(["serve", "--max-files", "lots"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--max-files"), "{err}");
}
