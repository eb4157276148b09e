//! JavaScript and TypeScript cells end to end: a real `sandlot serve`, node inside the jail
//! (seccomp and Landlock applied), over 127.0.0.1. The kernel's own behaviour in detail is
//! python/tests/test_js.py's; here, what the server adds: the wire language names, streaming,
//! contexts, interrupts and timeouts killing or keeping node, and bad input.

use crate::common;

use common::{assert_schema, TestServer};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

#[track_caller]
fn js(server: &TestServer, id: &str, code: &str) -> Value {
    run(
        server,
        id,
        &json!({ "code": code, "language": "javascript" }),
    )
}

#[track_caller]
fn run(server: &TestServer, id: &str, body: &Value) -> Value {
    let result = server.execute_with(id, body).expect(200).clone();
    assert_schema("ExecutionResult", &result);
    result
}

fn text(result: &Value) -> &str {
    result["result"]["text/plain"]
        .as_str()
        .unwrap_or_else(|| panic!("no text/plain result: {result:#}"))
}

#[test]
fn javascript_cells_keep_state_print_fail_and_await() {
    let server = TestServer::start();
    let id = server.create_sandbox();

    let first = js(&server, &id, "1 + 1");
    assert_eq!(first["end_state"], "ok", "{first:#}");
    assert_eq!(first["language"], "javascript");
    assert_eq!(text(&first), "2");

    let declared = js(
        &server,
        &id,
        "const name = 'sandlot'\nlet n = 1\nfunction twice(x) { return 2 * x }\nconsole.log('hello', name)",
    );
    assert_eq!(declared["stdout"], "hello sandlot\n", "{declared:#}");
    assert!(declared["result"].is_null(), "{declared:#}");
    assert_eq!(text(&js(&server, &id, "n += 1; twice(n)")), "4");

    let failed = js(
        &server,
        &id,
        "function deep() { throw new RangeError('too far') }\ndeep()",
    );
    assert_eq!(failed["end_state"], "error");
    assert_eq!(failed["error"]["name"], "RangeError");
    assert_eq!(failed["error"]["value"], "too far");
    let trace = failed["error"]["traceback"].to_string();
    assert!(trace.contains("at deep (<cell"), "{trace}");
    assert!(!trace.contains("js_kernel") && !trace.contains("/opt/sandlot"));

    let awaited = js(
        &server,
        &id,
        "import { readFileSync } from 'fs'\nawait new Promise((r) => setTimeout(() => r(typeof readFileSync), 10))",
    );
    assert_eq!(text(&awaited), "'function'", "{awaited:#}");

    // TypeScript runs in the same node as the context's JavaScript.
    let ts = run(
        &server,
        &id,
        &json!({ "code": "const m: number = twice(n) as number; m", "language": "typescript" }),
    );
    assert_eq!(text(&ts), "4", "{ts:#}");
    assert_eq!(ts["language"], "typescript");

    // Python in the same sandbox is untouched by all this.
    assert_eq!(text(&server.execute(&id, "1 + 2")), "3");

    // The sandbox's environment and files are node's too.
    server
        .put_bytes(
            &format!("/v1/sandboxes/{id}/files/data.txt"),
            b"file!".to_vec(),
        )
        .expect(201);
    let read = js(
        &server,
        &id,
        "require('fs').readFileSync('data.txt', 'utf8')",
    );
    assert_eq!(text(&read), "'file!'", "{read:#}");
}

#[test]
fn javascript_contexts_have_their_own_node() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let ctx = server
        .post(&format!("/v1/sandboxes/{id}/contexts"), &json!({}))
        .expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    js(&server, &id, "globalThis.where = 'default'");
    let body = |code: &str| json!({ "code": code, "language": "javascript", "context": ctx });
    run(&server, &id, &body("globalThis.where = 'ctx'"));
    assert_eq!(text(&js(&server, &id, "where")), "'default'");
    assert_eq!(text(&run(&server, &id, &body("where"))), "'ctx'");
    server
        .post(
            &format!("/v1/sandboxes/{id}/contexts/{ctx}/restart"),
            &json!({}),
        )
        .expect(200);
    assert_eq!(
        text(&run(&server, &id, &body("typeof where"))),
        "'undefined'"
    );
}

#[test]
fn javascript_output_streams_as_it_is_printed() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let code = "for (let i = 0; i < 3; i++) { console.log(i); await new Promise((r) => setTimeout(r, 400)) }";
    let start = Instant::now();
    let resp = server
        .client()
        .post(format!("{}/v1/sandboxes/{id}/execute", server.url()))
        .json(&json!({ "code": code, "language": "javascript", "stream": true }))
        .send()
        .expect("execute");
    assert_eq!(resp.status().as_u16(), 200);
    let mut stdout_at = Vec::new();
    let mut event = String::new();
    for line in BufReader::new(resp).lines() {
        let line = line.expect("read stream");
        if let Some(name) = line.strip_prefix("event:") {
            event = name.trim().to_owned();
            if event == "stdout" {
                stdout_at.push(start.elapsed());
            }
        }
    }
    assert_eq!(event, "done");
    assert!(stdout_at.len() >= 2, "{stdout_at:?}");
    let spread = *stdout_at.last().unwrap() - stdout_at[0];
    assert!(
        spread >= Duration::from_millis(300),
        "stdout came at once: {stdout_at:?}"
    );
}

#[test]
fn javascript_timeouts_and_interrupts_stop_node_cells() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    js(&server, &id, "globalThis.kept = 'yes'");

    // A cell waiting on a promise is abandoned at its timeout: node and its state stay.
    let waited = run(
        &server,
        &id,
        &json!({ "code": "await new Promise(() => {})", "language": "javascript", "timeout": 1 }),
    );
    assert_eq!(waited["end_state"], "timeout", "{waited:#}");
    assert_eq!(waited["sandbox_alive"], true);
    assert_eq!(text(&js(&server, &id, "kept")), "'yes'");

    // A synchronous loop never lets node see SIGINT: node is killed and replaced, the
    // sandbox (and its Python) stays, and the cell says what was lost.
    server.execute(&id, "py = 'alive'");
    let interrupted = std::thread::scope(|s| {
        let running = s.spawn(|| js(&server, &id, "console.log('started'); while (true) {}"));
        std::thread::sleep(Duration::from_millis(1500));
        let resp = server.post(&format!("/v1/sandboxes/{id}/interrupt"), &json!({}));
        assert_eq!(resp.expect(200)["interrupted"], true);
        running.join().unwrap()
    });
    assert_eq!(interrupted["end_state"], "interrupted", "{interrupted:#}");
    assert_eq!(interrupted["sandbox_alive"], true);
    let stderr = interrupted["stderr"].as_str().unwrap();
    assert!(stderr.contains("JavaScript kernel exited"), "{stderr}");
    assert_eq!(text(&js(&server, &id, "typeof kept")), "'undefined'");
    assert_eq!(text(&server.execute(&id, "py")), "'alive'");

    // The same at a timeout: the execution ends within its timeout and the server's grace.
    let started = Instant::now();
    let looped = run(
        &server,
        &id,
        &json!({ "code": "while (true) {}", "language": "javascript", "timeout": 1 }),
    );
    assert_eq!(looped["end_state"], "timeout", "{looped:#}");
    assert_eq!(looped["sandbox_alive"], true);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(text(&js(&server, &id, "'next'")), "'next'");
}

#[test]
fn unknown_languages_are_refused() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    for language in ["ruby", "js", "JavaScript", ""] {
        let resp = server.execute_with(&id, &json!({ "code": "1", "language": language }));
        assert_eq!(resp.status, 400, "{language}: {:?}", resp.body);
    }
    // A JavaScript cell that is not JavaScript is the cell's error, not the server's.
    let bad = js(&server, &id, "this is not javascript");
    assert_eq!(bad["end_state"], "error");
    assert_eq!(bad["error"]["name"], "SyntaxError");
    let bad_ts = run(
        &server,
        &id,
        &json!({ "code": "enum Color { Red }", "language": "typescript" }),
    );
    assert_eq!(bad_ts["end_state"], "error", "{bad_ts:#}");
    assert_eq!(text(&js(&server, &id, "'still here'")), "'still here'");
}
