//! Code contexts end to end: a real `sandlot serve`, real sandboxes, over 127.0.0.1.

use crate::common;

use common::{assert_schema, TestServer};
use serde_json::{json, Value};

fn text_plain(result: &Value) -> &str {
    result["result"]["text/plain"]
        .as_str()
        .unwrap_or_else(|| panic!("no text/plain result: {result:#}"))
}

/// Runs code in a context; asserts a 200 and returns the ExecutionResult.
#[track_caller]
fn run(server: &TestServer, id: &str, ctx: &str, language: &str, code: &str) -> Value {
    let result = server
        .execute_with(
            id,
            &json!({ "code": code, "language": language, "context": ctx }),
        )
        .expect(200)
        .clone();
    assert_schema("ExecutionResult", &result);
    assert_eq!(result["context"], ctx, "{result:#}");
    result
}

#[track_caller]
fn create_context(server: &TestServer, id: &str) -> String {
    let ctx = server
        .post(&format!("/v1/sandboxes/{id}/contexts"), &json!({}))
        .expect(201)
        .clone();
    assert_schema("Context", &ctx);
    let ctx_id = ctx["id"].as_str().unwrap().to_owned();
    assert!(ctx_id.starts_with("ctx_"), "{ctx}");
    ctx_id
}

fn context_ids(server: &TestServer, id: &str) -> Vec<String> {
    let listed = server.get(&format!("/v1/sandboxes/{id}/contexts"));
    assert_schema("ContextList", listed.expect(200));
    listed.body["contexts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn contexts_are_separate_namespaces_sharing_the_filesystem() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    assert_eq!(context_ids(&server, &id), ["default"]);

    let a = create_context(&server, &id);
    let b = create_context(&server, &id);
    assert_ne!(a, b);
    assert_eq!(context_ids(&server, &id), ["default", &a, &b]);

    // Variables, imports and functions stay in their context.
    let plain = server.execute(&id, "x = 'default'\nimport json\ndef f(): return 1");
    assert_eq!(plain["end_state"], "ok", "{plain:#}");
    assert_eq!(plain["context"], "default");
    run(&server, &id, &a, "python", "x = 'a'");
    let r = run(&server, &id, &b, "python", "x");
    assert_eq!(r["end_state"], "error");
    assert_eq!(r["error"]["name"], "NameError");
    let r = run(&server, &id, &b, "python", "'json' in dir(), 'f' in dir()");
    assert_eq!(text_plain(&r), "(False, False)");
    assert_eq!(text_plain(&run(&server, &id, &a, "python", "x")), "'a'");
    assert_eq!(text_plain(&server.execute(&id, "x")), "'default'");
    assert_eq!(
        text_plain(&run(&server, &id, "default", "python", "x")),
        "'default'"
    );

    // Files are shared.
    run(
        &server,
        &id,
        &a,
        "python",
        "open('/workspace/shared.txt', 'w').write('from a')",
    );
    let r = run(
        &server,
        &id,
        &b,
        "python",
        "open('/workspace/shared.txt').read()",
    );
    assert_eq!(text_plain(&r), "'from a'");
    let r = run(&server, &id, &b, "bash", "cat /workspace/shared.txt");
    assert_eq!(r["stdout"], "from a");

    // Each context has its own bash session: cwd and variables.
    run(
        &server,
        &id,
        &a,
        "bash",
        "mkdir -p /workspace/sub && cd /workspace/sub && V=a",
    );
    server.execute_bash(&id, "cd /tmp; V=default");
    let r = run(&server, &id, &a, "bash", "pwd; echo $V");
    assert_eq!(r["stdout"], "/workspace/sub\na\n");
    let r = run(&server, &id, &b, "bash", "pwd; echo \"[$V]\"");
    assert_eq!(r["stdout"], "/workspace\n[]\n");
    let r = server.execute_bash(&id, "pwd; echo $V");
    assert_eq!(r["stdout"], "/tmp\ndefault\n");

    // Restart clears one context and nothing else.
    let restarted = server
        .post(
            &format!("/v1/sandboxes/{id}/contexts/{a}/restart"),
            &json!({}),
        )
        .expect(200)
        .clone();
    assert_schema("Context", &restarted);
    assert_eq!(restarted["id"], a.as_str());
    let r = run(&server, &id, &a, "python", "x");
    assert_eq!(r["error"]["name"], "NameError");
    let r = run(&server, &id, &a, "bash", "pwd; echo \"[$V]\"");
    assert_eq!(r["stdout"], "/workspace\n[]\n");
    assert_eq!(text_plain(&server.execute(&id, "x")), "'default'");
    assert_eq!(
        text_plain(&run(
            &server,
            &id,
            &a,
            "python",
            "open('/workspace/shared.txt').read()"
        )),
        "'from a'"
    );

    // Delete, then executing in it is a 400; the others are unaffected.
    server
        .delete(&format!("/v1/sandboxes/{id}/contexts/{b}"))
        .expect(204);
    assert_eq!(context_ids(&server, &id), ["default", &a]);
    let r = server.execute_with(&id, &json!({ "code": "1", "context": b }));
    r.expect_error(400, "invalid_argument");
    assert!(r.message().contains(&b), "{}", r.text);
    server
        .delete(&format!("/v1/sandboxes/{id}/contexts/{b}"))
        .expect_error(400, "invalid_argument");
    assert_eq!(text_plain(&server.execute(&id, "x")), "'default'");

    // Unknown contexts and the default one.
    server
        .execute_with(
            &id,
            &json!({ "code": "1", "context": "ctx_nope", "stream": true }),
        )
        .expect_error(400, "invalid_argument");
    server
        .execute_with(
            &id,
            &json!({ "code": "echo", "language": "bash", "context": "nope" }),
        )
        .expect_error(400, "invalid_argument");
    server
        .post(
            &format!("/v1/sandboxes/{id}/contexts/nope/restart"),
            &json!({}),
        )
        .expect_error(400, "invalid_argument");
    server
        .delete(&format!("/v1/sandboxes/{id}/contexts/default"))
        .expect_error(400, "invalid_argument");
    server
        .post("/v1/sandboxes/sb_nope/contexts", &json!({}))
        .expect_error(404, "sandbox_not_found");

    // Restarting default gives it a fresh namespace too.
    server
        .post(
            &format!("/v1/sandboxes/{id}/contexts/default/restart"),
            &json!({}),
        )
        .expect(200);
    assert_eq!(server.execute(&id, "x")["error"]["name"], "NameError");
    assert_eq!(
        text_plain(&run(&server, &id, &a, "python", "'a ok'")),
        "'a ok'"
    );

    // An ended sandbox has no contexts.
    server.delete(&format!("/v1/sandboxes/{id}")).expect(204);
    server
        .get(&format!("/v1/sandboxes/{id}/contexts"))
        .expect_error(410, "sandbox_gone");
}

#[test]
fn a_sandbox_has_at_most_32_contexts_and_they_work_in_turn() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let created: Vec<String> = (0..31).map(|_| create_context(&server, &id)).collect();
    server
        .post(&format!("/v1/sandboxes/{id}/contexts"), &json!({}))
        .expect_error(400, "invalid_argument");
    assert_eq!(context_ids(&server, &id).len(), 32);
    // Each holds its own value; the counter of each starts at 1.
    for (i, ctx) in created.iter().enumerate().take(4) {
        let r = run(&server, &id, ctx, "python", &format!("n = {i}\nlen(In)"));
        assert_eq!(text_plain(&r), "2", "{r:#}");
    }
    for (i, ctx) in created.iter().enumerate().take(4) {
        assert_eq!(
            text_plain(&run(&server, &id, ctx, "python", "n")),
            i.to_string()
        );
    }
    // Deleting one makes room for another.
    server
        .delete(&format!("/v1/sandboxes/{id}/contexts/{}", created[0]))
        .expect(204);
    create_context(&server, &id);
}

/// A context created with a `cwd` works there; each context keeps its own directory (a cell's
/// `os.chdir` or `cd` moves only its own), the list says where each started, a restart goes
/// back there, and a pause and resume bring every context back where its code left it.
#[test]
fn each_context_keeps_its_own_working_directory() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let made = server
        .post(
            &format!("/v1/sandboxes/{id}/contexts"),
            &json!({ "cwd": "/tmp" }),
        )
        .expect(201)
        .clone();
    assert_schema("Context", &made);
    assert_eq!(made["cwd"], "/tmp");
    let t = made["id"].as_str().unwrap().to_owned();
    let here = "import os; os.getcwd()";
    assert_eq!(text_plain(&run(&server, &id, &t, "python", here)), "'/tmp'");
    assert_eq!(text_plain(&server.execute(&id, here)), "'/workspace'");
    let out = run(&server, &id, &t, "bash", "pwd");
    assert_eq!(out["stdout"], "/tmp\n", "{out:#}");

    // Moves stay in their context, in Python and in Bash.
    server.execute(
        &id,
        "import os; os.makedirs('sub', exist_ok=True); os.chdir('sub')",
    );
    run(&server, &id, &t, "python", "os.chdir('/')");
    assert_eq!(text_plain(&server.execute(&id, here)), "'/workspace/sub'");
    assert_eq!(text_plain(&run(&server, &id, &t, "python", here)), "'/'");
    let listed = server.get(&format!("/v1/sandboxes/{id}/contexts"));
    let contexts = listed.expect(200)["contexts"].as_array().unwrap().clone();
    assert_eq!(contexts[0].get("cwd"), None, "{contexts:?}");
    assert_eq!(contexts[1]["cwd"], "/tmp");

    // A pause and resume keep each context where its code left it.
    server
        .post(&format!("/v1/sandboxes/{id}/pause"), &json!({}))
        .expect(200);
    server
        .post(&format!("/v1/sandboxes/{id}/resume"), &json!({}))
        .expect(200);
    assert_eq!(text_plain(&server.execute(&id, here)), "'/workspace/sub'");
    assert_eq!(text_plain(&run(&server, &id, &t, "python", here)), "'/'");

    // A restart starts the context again where it was created to work.
    server
        .post(
            &format!("/v1/sandboxes/{id}/contexts/{t}/restart"),
            &json!({}),
        )
        .expect(200);
    assert_eq!(text_plain(&run(&server, &id, &t, "python", here)), "'/tmp'");

    // Bad input: a clear 400 naming the problem, and no context made.
    for (cwd, says) in [
        (json!("relative"), "absolute"),
        (json!("/no/such/dir"), "not a directory"),
        (json!("/etc/hostname"), "not a directory"),
        (json!("/a\u{0}b"), "NUL"),
        (json!("/".repeat(5000)), "4096"),
        (json!(7), "expected a string"),
    ] {
        let r = server.post(
            &format!("/v1/sandboxes/{id}/contexts"),
            &json!({ "cwd": cwd }),
        );
        assert_eq!(r.status, 400, "{cwd}: {}", r.text);
        assert!(r.text.contains(says), "{cwd}: {}", r.text);
    }
    assert_eq!(context_ids(&server, &id), ["default", &t]);
}
