//! Rollback (`execute` with `"on_failure": "rollback"`), against a real server with real
//! sandboxes: a cell that deletes files, rebinds variables and then fails (an error, a Bash
//! exit status, a timeout, a driver that dies, output the guardrails withhold, a containment)
//! leaves the sandbox's variables and files as they were, checked by the next cell; a cell
//! that succeeds is kept and its capture goes; the stream's final event says it; a server
//! killed mid-cell brings the sandbox back as it was before the cell; a bad value is a 400
//! that changes nothing; a second execute queued behind a rollback cell sees the state put
//! back, as executes queue today.

use crate::common;

use common::{As, TestServer};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

/// What every check of a sandbox reads back: its variables and files, as one JSON line.
const LOOK: &str = "\
import json, os
print(json.dumps({
    'x': globals().get('x'),
    'data': globals().get('data'),
    'y': 'y' in globals(),
    'keep': open('/workspace/keep.txt').read() if os.path.exists('/workspace/keep.txt') else None,
    'nested': os.path.exists('/workspace/dir/nested.txt'),
    'big': os.path.getsize('/workspace/big.bin') if os.path.exists('/workspace/big.bin') else None,
    'new': os.path.exists('/workspace/new.txt'),
}))";

/// The state [`SETUP`] makes, as [`LOOK`] reads it.
fn before() -> Value {
    json!({"x": 1, "data": [1, 2, 3], "y": false, "keep": "kept", "nested": true,
           "big": 1 << 20, "new": false})
}

const SETUP: &str = "\
import os
x = 1
data = [1, 2, 3]
os.makedirs('/workspace/dir', exist_ok=True)
open('/workspace/keep.txt', 'w').write('kept')
open('/workspace/dir/nested.txt', 'w').write('nested')
open('/workspace/big.bin', 'wb').write(os.urandom(1 << 20))
";

/// Deletes and rewrites files and rebinds variables; whatever follows decides how it ends.
const DAMAGE: &str = "\
import os, shutil
os.remove('/workspace/keep.txt')
shutil.rmtree('/workspace/dir')
open('/workspace/big.bin', 'wb').write(b'short')
open('/workspace/new.txt', 'w').write('new')
x = 2
del data
y = 'bound by the failed cell'
";

fn look(server: &TestServer, id: &str) -> Value {
    let r = server.execute(id, LOOK);
    assert_eq!(r["end_state"], "ok", "{r:#}");
    let out = r["stdout"].as_str().unwrap();
    serde_json::from_str(out.lines().last().unwrap()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn rollback_cell(server: &TestServer, id: &str, body: Value) -> Value {
    let mut body = body;
    body["on_failure"] = json!("rollback");
    let r = server.execute_with(id, &body).expect(200).clone();
    common::assert_schema("ExecutionResult", &r);
    r
}

fn setup(server: &TestServer) -> String {
    let id = server.create_sandbox();
    let r = server.execute(&id, SETUP);
    assert_eq!(r["end_state"], "ok", "{r:#}");
    assert_eq!(look(server, &id), before());
    id
}

fn workspace_dir(server: &TestServer, id: &str) -> PathBuf {
    server.data_dir().join("disk/mnt/ws").join(id)
}

/// No capture is left behind once the executions are answered (their files go in the
/// background).
fn no_captures_left(server: &TestServer) {
    let gone = common::wait_until(Duration::from_secs(10), || {
        let files = std::fs::read_dir(server.data_dir().join("state/rollback"))
            .map(|d| d.count())
            .unwrap_or(0);
        let snapshots = std::fs::read_dir(server.data_dir().join("disk/mnt/ws"))
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("rbk_"))
                    .count()
            })
            .unwrap_or(0);
        files == 0 && snapshots == 0
    });
    assert!(gone, "captures were left behind");
}

#[test]
fn a_failing_cell_leaves_variables_and_files_as_they_were() {
    let server = TestServer::start();
    let id = setup(&server);
    let r = rollback_cell(
        &server,
        &id,
        json!({"code": format!("{DAMAGE}\nraise ValueError('after the damage')")}),
    );
    assert_eq!(r["end_state"], "error", "{r:#}");
    assert_eq!(r["error"]["name"], "ValueError", "{r:#}");
    assert_eq!(r["rolled_back"], true, "{r:#}");
    assert_eq!(r["rollback"]["reason"], "error", "{r:#}");
    assert!(r["rollback"]["variables"].as_u64().unwrap() >= 2, "{r:#}");
    assert_eq!(look(&server, &id), before());

    // A Bash cell that exits non-zero is a failure too.
    let r = rollback_cell(
        &server,
        &id,
        json!({"language": "bash", "code": "rm -rf /workspace/keep.txt /workspace/dir && echo new > /workspace/new.txt && false"}),
    );
    assert_eq!(r["end_state"], "error", "{r:#}");
    assert_eq!(r["rolled_back"], true, "{r:#}");
    assert_eq!(look(&server, &id), before());

    // The record of the execution says so.
    let list = server
        .get(&format!("/v1/sandboxes/{id}/executions"))
        .expect(200)
        .clone();
    let rolled: Vec<&Value> = list["executions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["result"]["rolled_back"] == true)
        .collect();
    assert_eq!(rolled.len(), 2, "{list:#}");
    assert_eq!(rolled[0]["result"]["rollback"]["reason"], "error");
    // Without the field a failing cell keeps its effects, as before.
    let r = server
        .execute_with(
            &id,
            &json!({"code": "x = 7\nos.remove('/workspace/keep.txt')\nraise ValueError('kept')"}),
        )
        .expect(200)
        .clone();
    assert_eq!(r["rolled_back"], false, "{r:#}");
    assert!(r.get("rollback").is_none(), "{r:#}");
    let after = look(&server, &id);
    assert_eq!(
        (after["x"].clone(), after["keep"].clone()),
        (json!(7), Value::Null)
    );
    no_captures_left(&server);
}

#[test]
fn a_cell_that_succeeds_is_kept_and_its_capture_goes() {
    let server = TestServer::start();
    let id = setup(&server);
    let r = rollback_cell(&server, &id, json!({"code": format!("{DAMAGE}\nx")}));
    assert_eq!(r["end_state"], "ok", "{r:#}");
    assert_eq!(r["rolled_back"], false, "{r:#}");
    assert!(r.get("rollback").is_none(), "{r:#}");
    let after = look(&server, &id);
    assert_eq!(
        after,
        json!({"x": 2, "data": null, "y": true, "keep": null, "nested": false, "big": 5, "new": true})
    );
    no_captures_left(&server);
    // Many in a row: nothing accumulates.
    for i in 0..5 {
        let r = rollback_cell(&server, &id, json!({"code": format!("x = {i}")}));
        assert_eq!(r["end_state"], "ok", "{r:#}");
    }
    assert_eq!(look(&server, &id)["x"], 4);
    no_captures_left(&server);
}

#[test]
fn a_timeout_or_a_driver_that_dies_rolls_back() {
    let server = TestServer::start();
    let id = setup(&server);
    // Interrupted at its timeout.
    let r = rollback_cell(
        &server,
        &id,
        json!({"code": format!("{DAMAGE}\nimport time\ntime.sleep(60)"), "timeout": 1}),
    );
    assert_eq!(r["end_state"], "timeout", "{r:#}");
    assert_eq!(r["rolled_back"], true, "{r:#}");
    assert_eq!(r["rollback"]["reason"], "timeout", "{r:#}");
    assert_eq!(look(&server, &id), before());
    // Ignores the interrupt: killed after the grace, restarted, rolled back.
    let r = rollback_cell(
        &server,
        &id,
        json!({"code": format!("{DAMAGE}\nimport signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)"), "timeout": 1}),
    );
    assert_eq!(r["end_state"], "timeout", "{r:#}");
    assert_eq!(r["sandbox_alive"], false, "{r:#}");
    assert_eq!(r["rolled_back"], true, "{r:#}");
    assert_eq!(look(&server, &id), before());
    // The interpreter dies mid-cell.
    let r = rollback_cell(
        &server,
        &id,
        json!({"code": format!("{DAMAGE}\nos.kill(os.getpid(), 9)")}),
    );
    assert_eq!(r["sandbox_alive"], false, "{r:#}");
    assert_eq!(r["rolled_back"], true, "{r:#}");
    assert_eq!(r["rollback"]["reason"], "killed", "{r:#}");
    assert_eq!(look(&server, &id), before());
    no_captures_left(&server);
}

#[test]
fn the_stream_ends_with_the_rollback() {
    let server = TestServer::start();
    let id = setup(&server);
    let resp = server
        .client()
        .post(format!("{}/v1/sandboxes/{id}/execute", server.url()))
        .header("Accept", "text/event-stream")
        .json(
            &json!({"code": format!("{DAMAGE}\nprint('damaged')\nraise KeyError('k')"),
                      "on_failure": "rollback", "stream": true}),
        )
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let text = resp.text().unwrap();
    assert!(text.contains("damaged"), "{text}");
    let done = text
        .split("event: done")
        .nth(1)
        .and_then(|rest| rest.lines().find_map(|l| l.strip_prefix("data: ")))
        .unwrap_or_else(|| panic!("no done event: {text}"));
    let done: Value = serde_json::from_str(done).unwrap();
    assert_eq!(done["rolled_back"], true, "{done:#}");
    assert_eq!(done["rollback"]["reason"], "error", "{done:#}");
    assert_eq!(look(&server, &id), before());
}

#[test]
fn guardrails_that_withhold_or_contain_roll_back() {
    let server = TestServer::start();
    let admin = As::key(&server, server.key());
    let withhold = format!(
        "{}\n@id(\"withhold-secrets\")\n@reason(\"secrets are withheld\")\npermit (principal, action == Sandlot::Action::\"output_withhold\", resource)\nwhen {{ context.kind == \"secret\" }};\n",
        sandlot_policy::DEFAULT_POLICIES
    );
    admin
        .put_raw("/v1/policies", "text/plain", withhold.into_bytes())
        .expect(200);
    let id = setup(&server);
    // A cell that succeeds but prints a secret: withheld, and rolled back.
    let token = "ghp_0123456789abcdefghijABCDEFGHIJ012345";
    let (head, tail) = token.split_at(6);
    let r = rollback_cell(
        &server,
        &id,
        json!({"code": format!("{DAMAGE}\nprint({head:?} + {tail:?})")}),
    );
    assert!(!r.to_string().contains(token), "{r:#}");
    assert!(r["stdout"].as_str().unwrap().contains("withheld"), "{r:#}");
    assert_eq!(r["rolled_back"], true, "{r:#}");
    assert_eq!(r["rollback"]["reason"], "guardrails", "{r:#}");
    assert_eq!(look(&server, &id), before());

    // The canary credential in the output contains the sandbox: its files come back (its
    // processes stay stopped, as containment wants).
    let r = rollback_cell(
        &server,
        &id,
        json!({"code": format!("{DAMAGE}\nprint(dict(os.environ))")}),
    );
    assert_eq!(r["error"]["name"], "SandboxContained", "{r:#}");
    assert_eq!(r["rolled_back"], true, "{r:#}");
    assert_eq!(r["rollback"]["reason"], "guardrails", "{r:#}");
    let ws = workspace_dir(&server, &id);
    assert_eq!(
        std::fs::read_to_string(ws.join("keep.txt")).unwrap(),
        "kept"
    );
    assert!(ws.join("dir/nested.txt").is_file());
    assert!(!ws.join("new.txt").exists());
    assert_eq!(
        std::fs::metadata(ws.join("big.bin")).unwrap().len(),
        1 << 20
    );
    server
        .execute_with(&id, &json!({"code": "1"}))
        .expect_error(409, "sandbox_contained");
    no_captures_left(&server);
}

#[test]
fn a_server_killed_mid_cell_brings_the_sandbox_back_as_it_was() {
    let mut server = TestServer::start();
    let id = setup(&server);
    let ws = workspace_dir(&server, &id);
    let url = format!("{}/v1/sandboxes/{id}/execute", server.url());
    let client = server.client().clone();
    let cell = std::thread::spawn(move || {
        // Cut short by the kill: whatever it answers (or not) does not matter.
        let _ = client
            .post(url)
            .json(
                &json!({"code": format!("{DAMAGE}\nimport time\ntime.sleep(60)"),
                          "on_failure": "rollback", "timeout": 120}),
            )
            .send();
    });
    assert!(
        common::wait_until(Duration::from_secs(30), || ws.join("new.txt").exists()),
        "the cell never ran"
    );
    server.kill9();
    let _ = cell.join();
    server.restart();
    let s = server
        .get(&format!("/v1/sandboxes/{id}"))
        .expect(200)
        .clone();
    assert_eq!(s["state"], "paused", "{s:#}");
    // Files first (readable without processes), then variables (the next call resumes it).
    assert_eq!(
        std::fs::read_to_string(ws.join("keep.txt")).unwrap(),
        "kept"
    );
    assert!(!ws.join("new.txt").exists());
    assert_eq!(look(&server, &id), before());
    no_captures_left(&server);

    // A cell that succeeded before the kill stays: the capture went with its answer.
    let r = rollback_cell(&server, &id, json!({"code": "x = 10"}));
    assert_eq!(r["rolled_back"], false, "{r:#}");
    server.kill9();
    server.restart();
    let s = server
        .get(&format!("/v1/sandboxes/{id}"))
        .expect(200)
        .clone();
    assert_eq!(s["state"], "stopped", "{s:#}");
    // Files as the cell left them; variables lost as in any server restart.
    assert_eq!(look(&server, &id)["keep"], "kept");

    // A capture the server died taking (no marker yet: the cell never ran) is discarded.
    let dir = server.data_dir().join("state/rollback");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("rbk_cut.state.partial"), b"half a state").unwrap();
    std::fs::write(dir.join("rbk_cut.json.partial"), b"{").unwrap();
    server.execute(&id, "x = 11");
    server.kill9();
    server.restart();
    let s = server
        .get(&format!("/v1/sandboxes/{id}"))
        .expect(200)
        .clone();
    assert_eq!(s["state"], "stopped", "{s:#}");
    assert_eq!(look(&server, &id)["keep"], "kept");
    no_captures_left(&server);
}

#[test]
fn a_bad_on_failure_is_refused_and_changes_nothing() {
    let server = TestServer::start();
    let id = setup(&server);
    for bad in [
        json!("sometimes"),
        json!(true),
        json!(1),
        json!(null),
        json!("ROLLBACK"),
    ] {
        let r = server.execute_with(
            &id,
            &json!({"code": format!("{DAMAGE}"), "on_failure": bad}),
        );
        r.expect_error(400, "invalid_request");
    }
    assert_eq!(look(&server, &id), before());
    // "keep" is the default, spelled out.
    let r = server
        .execute_with(&id, &json!({"code": "x = 3", "on_failure": "keep"}))
        .expect(200)
        .clone();
    assert_eq!(r["end_state"], "ok");
    assert_eq!(look(&server, &id)["x"], 3);
}

#[test]
fn an_execute_queued_behind_a_rollback_cell_sees_the_state_put_back() {
    let server = TestServer::start();
    let id = setup(&server);
    let (url, client) = (
        format!("{}/v1/sandboxes/{id}/execute", server.url()),
        server.client().clone(),
    );
    let ws = workspace_dir(&server, &id);
    let first = std::thread::spawn(move || {
        client
            .post(url)
            .json(&json!({"code": format!("{DAMAGE}\nimport time\ntime.sleep(1.5)\nraise RuntimeError('late')"),
                          "on_failure": "rollback"}))
            .send()
            .unwrap()
            .json::<Value>()
            .unwrap()
    });
    assert!(common::wait_until(Duration::from_secs(30), || ws
        .join("new.txt")
        .exists()));
    // Queued behind it, as any execute is: it runs after the rollback.
    let second = look(&server, &id);
    let first = first.join().unwrap();
    assert_eq!(first["rolled_back"], true, "{first:#}");
    assert_eq!(second, before());
}
