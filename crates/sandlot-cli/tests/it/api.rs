//! The HTTP API driven end to end: a real `sandlot serve`, real sandboxes, over 127.0.0.1.

use crate::common;

use common::{assert_schema, Resp, TestServer};
use reqwest::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

fn text_plain(result: &Value) -> &str {
    result["result"]["text/plain"]
        .as_str()
        .unwrap_or_else(|| panic!("no text/plain result: {result}"))
}

#[track_caller]
fn assert_ok(result: &Value) {
    assert_eq!(result["end_state"], "ok", "{result:#}");
}

// ---------------------------------------------------------------------------------------------
// Sandboxes.

#[test]
fn sandbox_lifecycle() {
    let server = TestServer::start();
    let health = server.get("/v1/health");
    assert_eq!(health.expect(200)["status"], "ok");
    assert_schema("Health", &health.body);

    let created = server.create_sandbox_with(
        &json!({ "metadata": { "owner": "tests" }, "env": { "GREETING": "hi" } }),
    );
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["state"], "running");
    assert_eq!(created["template"], "default");
    assert_eq!(created["metadata"]["owner"], "tests");
    assert!(
        created["limits"]["memory_mb"].as_u64().unwrap() > 0,
        "{created}"
    );

    let got = server.get(&format!("/v1/sandboxes/{id}"));
    assert_eq!(got.expect(200)["id"], id.as_str());

    let listed = server.get("/v1/sandboxes");
    assert_schema("SandboxList", &listed.body);
    let ids: Vec<&str> = listed.expect(200)["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&id.as_str()), "{ids:?}");

    // The env given at creation is visible to code.
    let r = server.execute(&id, "import os; os.environ['GREETING']");
    assert_eq!(text_plain(&r), "'hi'");

    server.delete(&format!("/v1/sandboxes/{id}")).expect(204);
    server
        .get(&format!("/v1/sandboxes/{id}"))
        .expect_error(410, "sandbox_gone");
    // DELETE answers once; after that the sandbox is not found.
    server
        .delete(&format!("/v1/sandboxes/{id}"))
        .expect_error(404, "sandbox_not_found");

    let live = server.get("/v1/sandboxes");
    assert!(live.expect(200)["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["id"] != id.as_str()));
    let all = server.get("/v1/sandboxes?all=true");
    let ended = all.expect(200)["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id.as_str())
        .cloned();
    assert_eq!(
        ended.expect("deleted sandbox listed with all=true")["state"],
        "deleted"
    );
}

#[test]
fn unknown_and_deleted_sandboxes() {
    let server = TestServer::start();
    let missing = "sb-does-not-exist";
    server
        .get(&format!("/v1/sandboxes/{missing}"))
        .expect_error(404, "sandbox_not_found");
    server
        .execute_with(missing, &json!({ "code": "1" }))
        .expect_error(404, "sandbox_not_found");
    server
        .delete(&format!("/v1/sandboxes/{missing}"))
        .expect_error(404, "sandbox_not_found");
    server
        .get(&format!("/v1/sandboxes/{missing}/files/a.txt"))
        .expect_error(404, "sandbox_not_found");

    let id = server.create_sandbox();
    server.delete(&format!("/v1/sandboxes/{id}")).expect(204);
    server
        .get(&format!("/v1/sandboxes/{id}"))
        .expect_error(410, "sandbox_gone");
    server
        .execute_with(&id, &json!({ "code": "1" }))
        .expect_error(410, "sandbox_gone");
    server
        .put_bytes(&format!("/v1/sandboxes/{id}/files/a.txt"), b"x".to_vec())
        .expect_error(410, "sandbox_gone");
    server
        .post(&format!("/v1/sandboxes/{id}/interrupt"), &json!({}))
        .expect_error(410, "sandbox_gone");
}

#[test]
fn idle_sandboxes_expire() {
    let server = TestServer::start();
    let sandbox = server.create_sandbox_with(&json!({ "idle_timeout": 2 }));
    let id = sandbox["id"].as_str().unwrap().to_owned();
    assert_eq!(sandbox["idle_timeout"], 2);
    server.get(&format!("/v1/sandboxes/{id}")).expect(200);
    std::thread::sleep(Duration::from_secs(4));
    // The expiry sweep may lag its deadline, more so on a busy machine: poll for the outcome
    // with a generous deadline (how promptly it sweeps is not what this test is about).
    let mut resp = server.get(&format!("/v1/sandboxes/{id}"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while resp.status == 200 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        resp = server.get(&format!("/v1/sandboxes/{id}"));
    }
    resp.expect_error(410, "sandbox_gone");
    let all = server.get("/v1/sandboxes?all=true");
    let ended = all.expect(200)["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id.as_str())
        .cloned();
    assert_eq!(ended.expect("expired sandbox listed")["state"], "expired");
}

// ---------------------------------------------------------------------------------------------
// Executions.

#[test]
fn python_state_persists_between_executions() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let first = server.execute(&id, "x = 41");
    assert_ok(&first);
    assert!(first.get("result").is_none_or(Value::is_null), "{first}");
    let second = server.execute(&id, "x + 1");
    assert_ok(&second);
    assert_eq!(text_plain(&second), "42");
    assert_eq!(second["sandbox_id"], id.as_str());
    assert_eq!(second["language"], "python");
    assert!(second["sandbox_alive"].as_bool().unwrap());

    let printed = server.execute(
        &id,
        "print('hello'); import sys; print('oops', file=sys.stderr)",
    );
    assert_eq!(printed["stdout"], "hello\n");
    assert_eq!(printed["stderr"], "oops\n");

    let failed = server.execute(&id, "1/0");
    assert_eq!(failed["end_state"], "error");
    assert_eq!(failed["error"]["name"], "ZeroDivisionError");
    assert!(!failed["error"]["traceback"].as_array().unwrap().is_empty());
}

#[test]
fn bash_cwd_and_env_persist() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    assert_ok(&server.execute_bash(&id, "cd /tmp && export FOO=bar"));
    let r = server.execute_bash(&id, "pwd; echo $FOO");
    assert_ok(&r);
    assert_eq!(r["stdout"], "/tmp\nbar\n");
    let failed = server.execute_bash(&id, "false");
    assert_eq!(failed["end_state"], "error");
    assert_eq!(failed["exit_code"], 1);
}

/// An SSE event and when it arrived.
struct Received {
    event: String,
    data: Value,
    at: Duration,
}

/// Runs an execution as a stream; returns the response head and the events as they arrived.
fn execute_streaming(
    server: &TestServer,
    id: &str,
    body: &Value,
    accept: bool,
) -> (u16, String, Vec<Received>) {
    let mut req = server
        .client()
        .post(format!("{}/v1/sandboxes/{id}/execute", server.url()))
        .json(body);
    if accept {
        req = req.header(ACCEPT, "text/event-stream");
    }
    let start = Instant::now();
    let resp = req.send().expect("execute");
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get(CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let mut events = Vec::new();
    let (mut event, mut data) = (String::new(), String::new());
    for line in BufReader::new(resp).lines() {
        let line = line.expect("read stream");
        if line.is_empty() {
            if !event.is_empty() {
                let data_json = serde_json::from_str(&data)
                    .unwrap_or_else(|e| panic!("bad data ({e}): {data}"));
                events.push(Received {
                    event: std::mem::take(&mut event),
                    data: data_json,
                    at: start.elapsed(),
                });
            }
            data.clear();
        } else if let Some(v) = line.strip_prefix("event:") {
            event = v.trim().to_owned();
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push_str(v.strip_prefix(' ').unwrap_or(v));
        }
    }
    (status, content_type, events)
}

#[test]
fn streaming_delivers_output_as_it_is_produced() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    // Printed 0.5 s apart, so chunks that arrive at least 400 ms apart were not held back, with
    // room for a busy machine to delay the first one.
    let code =
        "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.5)\n'end'";
    let (status, content_type, events) = execute_streaming(
        &server,
        &id,
        &json!({ "code": code, "stream": true }),
        false,
    );
    assert_eq!(status, 200);
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(names.last(), Some(&"done"), "{names:?}");
    assert_eq!(
        names.iter().filter(|n| **n == "done").count(),
        1,
        "{names:?}"
    );

    let stdout: Vec<&Received> = events.iter().filter(|e| e.event == "stdout").collect();
    assert!(!stdout.is_empty(), "{names:?}");
    let text: String = stdout
        .iter()
        .map(|e| e.data["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "0\n1\n2\n");
    for e in &events[..events.len() - 1] {
        assert_eq!(
            e.data["type"],
            e.event.as_str(),
            "event name is the OutputEvent type"
        );
    }
    // The chunks came as they were printed, spaced in time, not all at the end.
    let first = stdout.first().unwrap().at;
    let last = stdout.last().unwrap().at;
    assert!(
        last - first >= Duration::from_millis(400),
        "stdout chunks arrived together: {first:?}..{last:?}"
    );
    let done = &events.last().unwrap();
    assert!(done.at - first >= Duration::from_millis(400));

    let result = &done.data;
    assert_schema("ExecutionResult", result);
    assert_ok(result);
    assert_eq!(result["stdout"], "0\n1\n2\n");
    assert_eq!(text_plain(result), "'end'");
    let streamed_result = events
        .iter()
        .find(|e| e.event == "result")
        .expect("result event");
    assert_eq!(streamed_result.data["data"]["text/plain"], "'end'");

    // `Accept: text/event-stream` asks for a stream too.
    let (status, _, events) =
        execute_streaming(&server, &id, &json!({ "code": "print('a')" }), true);
    assert_eq!(status, 200);
    let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(names.first(), Some(&"stdout"));
    assert_eq!(names.last(), Some(&"done"));

    // An error before the stream starts is a JSON error.
    let resp = server.post_raw(
        "/v1/sandboxes/sb-nope/execute",
        "application/json",
        json!({ "code": "1", "stream": true }).to_string(),
    );
    resp.expect_error(404, "sandbox_not_found");
}

#[test]
fn timeout_interrupts_and_keeps_state() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    assert_ok(&server.execute(&id, "x = 5"));
    let started = Instant::now();
    let r = server
        .execute_with(
            &id,
            &json!({ "code": "import time\ntime.sleep(60)", "timeout": 1 }),
        )
        .expect(200)
        .clone();
    assert_eq!(r["end_state"], "timeout", "{r:#}");
    // The 1 s timeout is enforced: the call ends long before the 60 s sleep would. The grace is
    // generous on purpose; how tightly timeouts are kept has its own test.
    assert!(
        started.elapsed() < Duration::from_secs(1 + 10),
        "took {:?}",
        started.elapsed()
    );
    assert!(r["sandbox_alive"].as_bool().unwrap(), "{r:#}");
    let after = server.execute(&id, "x");
    assert_eq!(text_plain(&after), "5");
}

#[test]
fn interrupt_from_another_thread() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    assert_ok(&server.execute(&id, "y = 'kept'"));
    let interrupted = std::thread::scope(|s| {
        let running = s.spawn(|| server.execute(&id, "import time\ntime.sleep(20)"));
        // Wait until the execution is recorded as running.
        let started = common::wait_until(Duration::from_secs(10), || {
            let list = server.get(&format!("/v1/sandboxes/{id}/executions"));
            list.body["executions"]
                .as_array()
                .is_some_and(|a| a.iter().any(|e| e["result"].is_null()))
        });
        assert!(started, "the execution never showed as running");
        std::thread::sleep(Duration::from_millis(300));
        let resp = server.post(&format!("/v1/sandboxes/{id}/interrupt"), &json!({}));
        assert_eq!(resp.expect(200)["interrupted"], true);
        running.join().unwrap()
    });
    assert_eq!(interrupted["end_state"], "interrupted", "{interrupted:#}");
    assert!(interrupted["sandbox_alive"].as_bool().unwrap());
    assert_eq!(text_plain(&server.execute(&id, "y")), "'kept'");
    let idle = server.post(&format!("/v1/sandboxes/{id}/interrupt"), &json!({}));
    assert_eq!(idle.expect(200)["interrupted"], false);
}

#[test]
fn concurrent_executions_run_in_order() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let (first, second) = std::thread::scope(|s| {
        let first = s.spawn(|| server.execute(&id, "import time\ntime.sleep(1)\nseq = [1]"));
        // The second is sent once the first is recorded as running, not after a fixed pause a
        // busy machine could outlast.
        let running = common::wait_until(Duration::from_secs(30), || {
            let list = server.get(&format!("/v1/sandboxes/{id}/executions"));
            list.body["executions"]
                .as_array()
                .is_some_and(|a| a.iter().any(|e| e["result"].is_null()))
        });
        assert!(running, "the first execution never showed as running");
        let second = s.spawn(|| server.execute(&id, "seq.append(2)\nseq"));
        (first.join().unwrap(), second.join().unwrap())
    });
    assert_ok(&first);
    assert_ok(&second);
    assert_eq!(text_plain(&second), "[1, 2]");
}

#[test]
fn executions_are_listed_in_order() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let codes = ["a = 1", "b = a + 1", "print(a + b)"];
    let ids: Vec<String> = codes
        .iter()
        .map(|c| server.execute(&id, c)["id"].as_str().unwrap().to_owned())
        .collect();
    let list = server.get(&format!("/v1/sandboxes/{id}/executions"));
    assert_schema("ExecutionList", &list.body);
    let execs = list.expect(200)["executions"].as_array().unwrap().clone();
    assert_eq!(execs.len(), 3);
    for ((rec, code), exec_id) in execs.iter().zip(codes).zip(&ids) {
        assert_eq!(rec["code"], code);
        assert_eq!(rec["id"], exec_id.as_str());
        assert_eq!(rec["sandbox_id"], id.as_str());
        assert_eq!(rec["result"]["end_state"], "ok");
    }
    assert_eq!(execs[2]["result"]["stdout"], "3\n");
}

#[test]
fn nul_bytes_and_invalid_utf8() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    // A NUL byte in the code is the code's problem, not the server's.
    let nul = server.execute(&id, "x = 1\0");
    assert_eq!(nul["end_state"], "error", "{nul:#}");
    assert!(nul["sandbox_alive"].as_bool().unwrap());
    // Output that is not UTF-8 arrives with replacement characters.
    let bytes = server.execute(&id, "import os\nos.write(1, b'\\xff\\xfe')");
    assert_ok(&bytes);
    assert!(
        bytes["stdout"].as_str().unwrap().contains('\u{FFFD}'),
        "{bytes:#}"
    );
    assert_ok(&server.execute(&id, "1"));
}

// ---------------------------------------------------------------------------------------------
// Files.

#[test]
fn files_roundtrip() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let bytes: Vec<u8> = (0..=255u8).cycle().take(1024).collect();
    let files = format!("/v1/sandboxes/{id}/files");

    let entry = server.put_bytes(&format!("{files}/data/bin.dat"), bytes.clone());
    let entry = entry.expect(201);
    assert_schema("FileEntry", entry);
    assert_eq!(entry["path"], "data/bin.dat");
    assert_eq!(entry["name"], "bin.dat");
    assert_eq!(entry["kind"], "file");
    assert_eq!(entry["size"], 1024);

    let (status, headers, got) = server.get_bytes(&format!("{files}/data/bin.dat"));
    assert_eq!(status, 200);
    assert_eq!(headers[CONTENT_TYPE], "application/octet-stream");
    assert_eq!(headers[CONTENT_LENGTH], "1024");
    assert_eq!(got, bytes);

    // The sandbox sees the upload, and its own files can be downloaded.
    let seen = server.execute(
        &id,
        "open('/workspace/data/bin.dat', 'rb').read() == bytes(range(256)) * 4",
    );
    assert_eq!(text_plain(&seen), "True");
    assert_ok(&server.execute(&id, "open('/workspace/out.txt', 'w').write('made inside')"));
    let (status, _, got) = server.get_bytes(&format!("{files}/out.txt"));
    assert_eq!((status, got.as_slice()), (200, b"made inside".as_slice()));

    let listing = server.get(&format!("{files}?path=data"));
    let names: Vec<&str> = listing.expect(200)["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["bin.dat"]);
    let listing = server.get(&format!("{files}?recursive=true"));
    assert_schema("FileList", &listing.body);
    let paths: Vec<&str> = listing.expect(200)["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    for p in ["data/bin.dat", "out.txt"] {
        assert!(paths.contains(&p), "{p} missing from {paths:?}");
    }

    server.delete(&format!("{files}/data/bin.dat")).expect(204);
    server
        .get(&format!("{files}/data/bin.dat"))
        .expect_error(404, "file_not_found");
    server
        .delete(&format!("{files}/data/bin.dat"))
        .expect_error(404, "file_not_found");
    server
        .get(&format!("{files}/data"))
        .expect_error(400, "not_a_regular_file");
}

#[test]
fn paths_outside_the_workspace_are_refused() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let files = format!("/v1/sandboxes/{id}/files");
    let marker = format!("sandlot-escape-{}", std::process::id());
    let host_target = std::path::Path::new("/tmp").join(&marker);
    // `%2F` keeps clients from normalizing the `..` away; the server decodes it.
    let escapes = [
        format!("..%2F..%2F..%2F..%2Ftmp%2F{marker}"),
        format!("data%2F..%2F..%2F{marker}"),
        format!("%2Ftmp%2F{marker}"),
        format!("%2Fworkspace%2F..%2Ftmp%2F{marker}"),
    ];
    for path in &escapes {
        let put = server.put_bytes(&format!("{files}/{path}"), b"escaped".to_vec());
        put.expect_error(400, "invalid_path");
        server
            .get(&format!("{files}/{path}"))
            .expect_error(400, "invalid_path");
        server
            .delete(&format!("{files}/{path}"))
            .expect_error(400, "invalid_path");
    }
    server
        .get(&format!("{files}?path=.."))
        .expect_error(400, "invalid_path");
    server
        .get(&format!("{files}/a%00b"))
        .expect_error(400, "invalid_path");
    assert!(
        !host_target.exists(),
        "a file escaped the workspace: {}",
        host_target.display()
    );
}

// ---------------------------------------------------------------------------------------------
// Bad input.

#[test]
fn bad_requests_get_json_errors() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let exec = format!("/v1/sandboxes/{id}/execute");

    server
        .post_raw(&exec, "application/json", "{\"code\": ")
        .expect_error(400, "invalid_request");
    let unknown = server.post_raw(&exec, "application/json", r#"{"code": "1", "foo": true}"#);
    unknown.expect_error(400, "invalid_request");
    assert!(
        unknown.message().contains("unknown field `foo`"),
        "{}",
        unknown.text
    );
    let lang = server.post_raw(
        &exec,
        "application/json",
        r#"{"code": "1", "language": "ruby"}"#,
    );
    lang.expect_error(400, "invalid_request");
    assert!(lang.message().contains("ruby"), "{}", lang.text);
    server
        .post_raw(&exec, "text/plain", r#"{"code": "1"}"#)
        .expect_error(400, "invalid_request");
    server
        .post_raw(&exec, "application/json", b"{\"code\": \"\xff\"}".to_vec())
        .expect_error(400, "invalid_request");
    server
        .post_raw(
            "/v1/sandboxes",
            "application/json",
            r#"{"limits": {"memory_mb": "lots"}}"#,
        )
        .expect_error(400, "invalid_request");

    // Code over the limit (1 MiB by default), and a body over the JSON limit.
    let big_code = "#".repeat((1 << 20) + 1);
    server
        .execute_with(&id, &json!({ "code": big_code }))
        .expect_error(413, "payload_too_large");
    let huge = json!({ "code": "1", "padding": "x".repeat(4 << 20) }).to_string();
    server
        .post_raw(&exec, "application/json", huge)
        .expect_error(413, "payload_too_large");

    server
        .get("/v1/nothing-here")
        .expect_error(404, "not_found");
    server.get("/").expect_error(404, "not_found");
    let resp: Resp = {
        let r = server
            .client()
            .patch(format!("{}/v1/sandboxes", server.url()))
            .send()
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().unwrap();
        Resp {
            status,
            headers: Default::default(),
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
            text,
        }
    };
    resp.expect_error(405, "method_not_allowed");

    // None of that hurt the sandbox.
    assert_ok(&server.execute(&id, "1 + 1"));
}

#[test]
fn openapi_document_is_served() {
    let server = TestServer::start();
    let doc = server.get("/v1/openapi.json");
    let doc = doc.expect(200);
    assert_eq!(doc["openapi"], "3.1.0");
    assert!(doc["paths"]["/v1/sandboxes/{id}/execute"]["post"].is_object());
}

// ---------------------------------------------------------------------------------------------
// Restarts.

/// The host uid the sandbox's code runs as: its own uid translated through its `uid_map`, read
/// from inside it. Panics when that cannot be read, so the checks built on it never pass
/// vacuously.
fn sandbox_host_uid(server: &TestServer, id: &str) -> u32 {
    let r = server.execute(
        id,
        "import os\nprint(os.getuid())\nprint(open('/proc/self/uid_map').read())",
    );
    assert_ok(&r);
    let out = r["stdout"]
        .as_str()
        .unwrap_or_else(|| panic!("no stdout: {r}"));
    let mut lines = out.lines();
    let uid: u32 = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no uid in {out:?}"));
    lines
        .filter_map(|l| {
            let f: Vec<u64> = l
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            match f[..] {
                [inside, outside, count] if (inside..inside + count).contains(&u64::from(uid)) => {
                    u32::try_from(outside + (u64::from(uid) - inside)).ok()
                }
                _ => None,
            }
        })
        .next()
        .unwrap_or_else(|| panic!("uid {uid} is not mapped in {out:?}"))
}

#[test]
fn restart_marks_cut_sandboxes_stopped_and_leaves_no_process() {
    let mut server = TestServer::start();
    let id = server.create_sandbox();
    let finished = server.execute(&id, "done_before = True");
    assert_ok(&finished);
    let host_uid = sandbox_host_uid(&server, &id);
    assert_ne!(host_uid, 0, "sandbox code runs as host root");

    // Cut an execution off mid-sleep by SIGKILLing the server.
    let url = server.url().to_owned();
    let sid = id.clone();
    let client = server.client().clone();
    let running = std::thread::spawn(move || {
        let body = json!({ "code": "import time\ntime.sleep(30)" });
        let _ = client
            .post(format!("{url}/v1/sandboxes/{sid}/execute"))
            .json(&body)
            .send();
    });
    let started = common::wait_until(Duration::from_secs(10), || {
        let list = server.get(&format!("/v1/sandboxes/{id}/executions"));
        list.body["executions"]
            .as_array()
            .is_some_and(|a| a.iter().any(|e| e["result"].is_null()))
    });
    assert!(started, "the execution never showed as running");
    let first_run = common::descendants(server.pid());
    let uid_procs_before = common::processes_with_uid(host_uid);
    assert!(
        !first_run.is_empty(),
        "the server has no child processes (zygote, sandbox)"
    );
    server.kill9();
    running.join().unwrap();

    server.restart();
    // Its processes died with the server; its files are kept, so it is stopped, not gone.
    let stopped = server.get(&format!("/v1/sandboxes/{id}"));
    assert_eq!(stopped.expect(200)["state"], "stopped");
    let all = server.get("/v1/sandboxes?all=true");
    let listed = all.expect(200)["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id.as_str())
        .cloned();
    assert_eq!(
        listed.expect("sandbox listed after restart")["state"],
        "stopped"
    );

    let list = server.get(&format!("/v1/sandboxes/{id}/executions"));
    assert_schema("ExecutionList", &list.body);
    let execs = list.expect(200)["executions"].as_array().unwrap().clone();
    let code_of = |e: &Value| e["code"].as_str().unwrap_or("").to_owned();
    let before = execs
        .iter()
        .find(|e| code_of(e) == "done_before = True")
        .expect("finished execution kept");
    assert_eq!(before["id"], finished["id"]);
    assert_eq!(before["result"]["end_state"], "ok");
    let cut = execs
        .iter()
        .find(|e| code_of(e).contains("time.sleep(30)"))
        .expect("cut execution recorded");
    assert_eq!(cut["result"]["end_state"], "killed", "{cut:#}");

    // Nothing of the first server survives: not its zygote, not the sandbox.
    let gone = common::wait_until(Duration::from_secs(15), || {
        first_run.iter().all(|p| !common::alive(*p))
    });
    let left: Vec<_> = first_run.iter().filter(|p| common::alive(**p)).collect();
    assert!(gone, "processes of the first server still alive: {left:?}");
    // Positive control first: the uid had processes while the sandbox ran (else "none left"
    // would hold for any uid).
    assert!(
        !uid_procs_before.is_empty(),
        "no host process ran as the sandbox's uid {host_uid} while it lived"
    );
    let procs = common::processes_with_uid(host_uid);
    assert!(
        procs.is_empty(),
        "processes still run as the lost sandbox's uid {host_uid}: {procs:?}"
    );

    // The restarted server works.
    let fresh = server.create_sandbox();
    assert_eq!(text_plain(&server.execute(&fresh, "6 * 7")), "42");
}

#[test]
fn graceful_shutdown_exits_zero_and_stops_sandboxes() {
    let mut server = TestServer::start();
    let id = server.create_sandbox();
    assert_ok(&server.execute(&id, "1"));
    let procs = common::descendants(server.pid());
    let status = server.stop();
    assert!(status.success(), "sandlot serve exited with {status}");
    let gone = common::wait_until(Duration::from_secs(10), || {
        procs.iter().all(|p| !common::alive(*p))
    });
    assert!(
        gone,
        "processes left after shutdown: {:?}",
        procs
            .iter()
            .filter(|p| common::alive(**p))
            .collect::<Vec<_>>()
    );
}

/// A client that sends half a request head (slowloris), or opens a connection and sends
/// nothing, or stays idle after a request, is disconnected once the header-read timeout (30 s)
/// passes, so such clients cannot hold the server's descriptors forever; the server goes on
/// answering others meanwhile.
#[test]
fn slow_and_idle_connections_are_closed() {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::{Duration, Instant};

    let srv = TestServer::start();
    let addr = srv.url().trim_start_matches("http://").to_owned();
    let open = |first: &[u8]| {
        let mut c = TcpStream::connect(&addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        c.write_all(first).unwrap();
        c
    };
    let mut half = open(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-A: ");
    let mut silent = open(b"");
    let mut idle = open(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut head = [0u8; 512];
    let n = idle.read(&mut head).unwrap();
    assert!(
        head[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&head[..n])
    );
    srv.get("/v1/health").expect(200);

    let start = Instant::now();
    for (name, c) in [
        ("half a head", &mut half),
        ("nothing", &mut silent),
        ("idle", &mut idle),
    ] {
        let mut rest = Vec::new();
        // EOF (or a reset, or a 408 then EOF): the server let go of the connection.
        let _ = c.read_to_end(&mut rest);
        assert!(
            start.elapsed() < Duration::from_secs(50),
            "a connection that sent {name} was held {:?}",
            start.elapsed()
        );
    }
    srv.get("/v1/health").expect(200);
}

/// Browsers too old to send Fetch Metadata still send `Origin`: such requests count as a
/// page's, refused outside the ports routes, each in its protocol's own error shape.
#[test]
fn requests_carrying_an_origin_are_refused_as_pages() {
    let srv = TestServer::start();
    let send = |method: reqwest::Method, path: &str| {
        let r = srv
            .client()
            .request(method, format!("{}{path}", srv.url()))
            .header("origin", "http://127.0.0.1:8501")
            .header(CONTENT_TYPE, "application/json")
            .body("{}")
            .send()
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json::<Value>().unwrap())
    };
    let (status, body) = send(reqwest::Method::POST, "/v1/sandboxes");
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("forbidden"))
    );
    let (status, body) = send(reqwest::Method::GET, "/sandboxes");
    assert_eq!((status, body["code"].as_u64()), (403, Some(403)));
    let (status, body) = send(reqwest::Method::POST, "/mcp");
    assert_eq!(
        (status, body["error"]["code"].as_i64()),
        (403, Some(-32600))
    );
    // Nothing was created on the page's behalf.
    let list = srv.get("/v1/sandboxes").expect(200).clone();
    assert_eq!(
        list["sandboxes"].as_array().map(Vec::len),
        Some(0),
        "{list}"
    );
}
