//! E2B's snapshot API (`POST /sandboxes/{id}/snapshots`, `GET /snapshots`,
//! `DELETE /templates/{id}`, `POST /sandboxes` from a snapshot id) against a real `sandlot
//! serve`: the attack side of what sdk/python/tests/test_e2b_snapshots.py does with the SDKs.
//! Another tenant's snapshots and sandboxes answered exactly as missing ones everywhere, the
//! tenant's snapshot quota, bad names and bodies, hostile ids, missing keys, and a snapshot's
//! deletion leaving the sandboxes started from it whole.

use crate::common;

use common::TestServer;
use reqwest::blocking::RequestBuilder;
use reqwest::Method as M;
use serde_json::{json, Value};

struct Api {
    server: TestServer,
}

struct Got {
    status: u16,
    json: Value,
    text: String,
}

impl Api {
    fn send(&self, req: RequestBuilder) -> Got {
        let resp = req.send().expect("request");
        let status = resp.status().as_u16();
        let text = resp.text().unwrap_or_default();
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Got { status, json, text }
    }

    /// A control-plane request with `key` as E2B's `X-API-KEY` (and no bearer key).
    fn req(&self, key: &str, m: M, path: &str) -> RequestBuilder {
        self.server
            .client_with_key(None)
            .request(m, format!("{}{path}", self.server.url()))
            .header("X-API-KEY", key)
    }

    fn create_sandbox(&self, key: &str, template: &str) -> Got {
        self.send(
            self.req(key, M::POST, "/sandboxes")
                .json(&json!({ "templateID": template, "timeout": 120 })),
        )
    }

    fn snapshot(&self, key: &str, sandbox: &str, body: Value) -> Got {
        self.send(
            self.req(key, M::POST, &format!("/sandboxes/{sandbox}/snapshots"))
                .json(&body),
        )
    }

    fn ids(&self, key: &str, query: &str) -> Vec<String> {
        let got = self.send(self.req(key, M::GET, &format!("/snapshots{query}")));
        assert_eq!(got.status, 200, "{}", got.text);
        got.json
            .as_array()
            .expect("a list")
            .iter()
            .map(|s| s["snapshotID"].as_str().unwrap().to_owned())
            .collect()
    }
}

#[track_caller]
fn refused(got: &Got, status: u16, code: &str) {
    assert_eq!(got.status, status, "{}", got.text);
    assert_eq!(got.json["code"], status, "{}", got.text);
    assert_eq!(got.json["sandlot_code"], code, "{}", got.text);
}

#[test]
fn snapshots_stay_with_their_tenant_and_bad_input_takes_nothing() {
    let api = Api {
        server: TestServer::start(),
    };
    let a_key = api.server.tenant("a").key();
    let b_key = api.server.tenant("b").key();
    let c_key = api
        .server
        .tenant("c")
        .quotas(json!({ "max_snapshots": 0, "wait_seconds": 0 }))
        .key();

    let got = api.create_sandbox(&a_key, "base");
    assert_eq!(got.status, 201, "{}", got.text);
    let a_sb = got.json["sandboxID"].as_str().unwrap().to_owned();
    let got = api.snapshot(&a_key, &a_sb, json!({ "name": "a-snap" }));
    assert_eq!(got.status, 201, "{}", got.text);
    assert_eq!(got.json["names"], json!(["a-snap"]));
    let a_snap = got.json["snapshotID"].as_str().unwrap().to_owned();
    assert_eq!(api.ids(&a_key, ""), vec![a_snap.clone()]);

    // --- another tenant: every route answers as for a snapshot (or sandbox) never made.
    let never = "snap_00000000000000000000000000000000";
    assert!(api.ids(&b_key, "").is_empty());
    assert!(api.ids(&b_key, &format!("?sandboxID={a_sb}")).is_empty());
    assert!(api.ids(&b_key, "?name=a-snap").is_empty());
    let theirs = api.send(api.req(&b_key, M::DELETE, &format!("/templates/{a_snap}")));
    let missing = api.send(api.req(&b_key, M::DELETE, &format!("/templates/{never}")));
    refused(&theirs, 404, "snapshot_not_found");
    refused(&missing, 404, "snapshot_not_found");
    assert_eq!(
        theirs.json["message"]
            .as_str()
            .unwrap()
            .replace(&a_snap, "ID"),
        missing.json["message"]
            .as_str()
            .unwrap()
            .replace(never, "ID"),
    );
    let theirs = api.create_sandbox(&b_key, &a_snap);
    let missing = api.create_sandbox(&b_key, never);
    refused(&theirs, 404, "snapshot_not_found");
    refused(&missing, 404, "snapshot_not_found");
    assert_eq!(
        theirs.json["message"]
            .as_str()
            .unwrap()
            .replace(&a_snap, "ID"),
        missing.json["message"]
            .as_str()
            .unwrap()
            .replace(never, "ID"),
    );
    // Snapshotting another tenant's sandbox: its sandbox is not found.
    refused(
        &api.snapshot(&b_key, &a_sb, json!({})),
        404,
        "sandbox_not_found",
    );
    // Nor does sandlot's own API show it to them.
    let v1 = api.server.client_with_key(Some(&b_key));
    let r = v1
        .get(format!("{}/v1/snapshots/{a_snap}", api.server.url()))
        .send()
        .unwrap();
    assert_eq!(r.status(), 404);
    // Still whole for its owner.
    assert_eq!(api.ids(&a_key, ""), vec![a_snap.clone()]);

    // --- the tenant's snapshot quota applies as on /v1: nothing is taken.
    let got = api.create_sandbox(&c_key, "base");
    assert_eq!(got.status, 201, "{}", got.text);
    let c_sb = got.json["sandboxID"].as_str().unwrap().to_owned();
    let got = api.snapshot(&c_key, &c_sb, json!({}));
    assert_eq!(got.status, 429, "{}", got.text);
    assert!(api.ids(&c_key, "").is_empty());

    // --- bad names and bodies: 400 with a code, and no snapshot taken.
    for name in [
        json!("a/b"),
        json!("../x"),
        json!("a:b"),
        json!("a b"),
        json!("-x"),
        json!("x\u{0}y"),
        json!("ünï"),
        json!("x".repeat(129)),
    ] {
        refused(
            &api.snapshot(&a_key, &a_sb, json!({ "name": name })),
            400,
            "bad_snapshot_name",
        );
    }
    refused(
        &api.snapshot(&a_key, &a_sb, json!({ "memory": false })),
        400,
        "snapshot_filesystem_only_unsupported",
    );
    let got = api.send(
        api.req(&a_key, M::POST, &format!("/sandboxes/{a_sb}/snapshots"))
            .header("content-type", "application/json")
            .body("{not json"),
    );
    assert_eq!(got.status, 400, "{}", got.text);
    let got = api.snapshot(&a_key, &a_sb, json!({ "name": 7 }));
    assert_eq!(got.status, 400, "{}", got.text);
    assert_eq!(api.ids(&a_key, ""), vec![a_snap.clone()]);
    let got = api.send(api.req(&a_key, M::GET, "/snapshots?nextToken=x"));
    assert_eq!(got.status, 400, "{}", got.text);
    // Limits out of range are clamped, not errors.
    assert_eq!(api.ids(&a_key, "?limit=0"), vec![a_snap.clone()]);
    assert_eq!(api.ids(&a_key, "?limit=99999999"), vec![a_snap.clone()]);

    // --- hostile ids: no path outside the snapshots' directory is ever looked up.
    for id in [
        "snap_..%2F..%2Fetc%2Fpasswd",
        "snap_%2E%2E",
        "..%2Fsnapshots%2Fx",
    ] {
        let got = api.send(api.req(&a_key, M::DELETE, &format!("/templates/{id}")));
        assert_eq!(got.status, 404, "{id}: {}", got.text);
    }
    for id in ["snap_../../etc/passwd", "snap_/x", "snap_x:y:z"] {
        let got = api.create_sandbox(&a_key, id);
        assert_eq!(got.status, 404, "{id}: {}", got.text);
    }

    // --- no key, or a wrong one: 401 before anything is looked up.
    for (m, path) in [
        (M::GET, "/snapshots".to_owned()),
        (M::DELETE, format!("/templates/{a_snap}")),
        (M::POST, format!("/sandboxes/{a_sb}/snapshots")),
    ] {
        let got = api.send(
            api.server
                .client_with_key(None)
                .request(m.clone(), format!("{}{path}", api.server.url())),
        );
        assert_eq!(got.status, 401, "{path}: {}", got.text);
        let got = api.send(api.req("e2b_wrong", m, &path));
        assert_eq!(got.status, 401, "{path}: {}", got.text);
    }
    assert_eq!(api.ids(&a_key, ""), vec![a_snap.clone()]);

    // --- sandboxes started from it keep their copy when it is deleted.
    let got = api.create_sandbox(&a_key, &format!("{a_snap}:default"));
    assert_eq!(got.status, 201, "{}", got.text);
    let child = got.json["sandboxID"].as_str().unwrap().to_owned();
    let got = api.send(api.req(&a_key, M::DELETE, &format!("/templates/{a_snap}")));
    assert_eq!(got.status, 204, "{}", got.text);
    let got = api.send(api.req(&a_key, M::DELETE, &format!("/templates/{a_snap}")));
    refused(&got, 404, "snapshot_not_found");
    let got = api.send(api.req(&a_key, M::GET, &format!("/sandboxes/{child}")));
    assert_eq!(got.status, 200, "{}", got.text);
    assert_eq!(got.json["state"], "running");
    // A template id that is no snapshot's is not deleted here either.
    let got = api.send(api.req(&a_key, M::DELETE, "/templates/base"));
    assert_eq!(got.status, 404, "{}", got.text);
}

/// A JavaScript cell's answer in `ctx` (`None`: the default context).
#[track_caller]
fn js(server: &TestServer, id: &str, ctx: Option<&str>, code: &str) -> Value {
    let mut body = json!({ "code": code, "language": "javascript" });
    if let Some(ctx) = ctx {
        body["context"] = json!(ctx);
    }
    server.execute_with(id, &body).expect(200).clone()
}

#[track_caller]
fn js_text(server: &TestServer, id: &str, ctx: Option<&str>, code: &str) -> String {
    let r = js(server, id, ctx, code);
    assert_eq!(r["end_state"], "ok", "{r:#}");
    assert_eq!(r["stderr"], "", "{r:#}");
    r["result"]["text/plain"].as_str().unwrap_or("").to_owned()
}

#[test]
fn javascript_state_survives_pause_fork_and_snapshots() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let ctx = server
        .post(&format!("/v1/sandboxes/{id}/contexts"), &json!({}))
        .expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for code in [
        "const greeting = 'hi'",
        "let count = 1",
        "function twice(x) { return x * 2 }",
        "class Box { constructor(v) { this.v = v } }",
        "count += 1; console.log('printed once')",
    ] {
        assert_eq!(js(&server, &id, None, code)["end_state"], "ok");
    }
    assert_eq!(
        js(&server, &id, Some(&ctx), "const where = 'second'")["end_state"],
        "ok"
    );
    let probe = "[greeting, count, twice(count), new Box(5).v]";
    let want = "[ 'hi', 2, 4, 5 ]";

    // Pause and resume: the next cell resumes the sandbox and replays both contexts' cells.
    server
        .post(&format!("/v1/sandboxes/{id}/pause"), &json!({}))
        .expect(200);
    assert_eq!(js_text(&server, &id, None, probe), want);
    assert_eq!(js_text(&server, &id, Some(&ctx), "where"), "'second'");

    // A fork's children replay the parent's cells, then go their own ways.
    let forked = server
        .post(&format!("/v1/sandboxes/{id}/fork"), &json!({ "count": 2 }))
        .expect(201)
        .clone();
    let children: Vec<String> = forked["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(children.len(), 2);
    assert_eq!(js_text(&server, &children[0], None, "count += 10"), "12");
    assert_eq!(js_text(&server, &children[1], None, probe), want);
    assert_eq!(js_text(&server, &id, None, "count"), "2");

    // A snapshot of a child carries the child's state, replayed in a sandbox started from it.
    let snap = server
        .post(
            &format!("/v1/sandboxes/{}/snapshots", children[0]),
            &json!({}),
        )
        .expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let from = server.create_sandbox_with(&json!({ "from_snapshot": snap }))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        js_text(&server, &from, None, "[count, twice(count)]"),
        "[ 12, 24 ]"
    );

    // A context whose cells cannot be replayed says so on its next cell, and goes on fresh.
    assert_eq!(
        js(
            &server,
            &id,
            None,
            "const secret = require('fs').readFileSync('only-here.txt', 'utf8')"
        )["end_state"],
        "error"
    );
    server.execute(&id, "open('only-here.txt', 'w').write('x')");
    assert_eq!(
        js(
            &server,
            &id,
            None,
            "const secret2 = require('fs').readFileSync('only-here.txt', 'utf8')"
        )["end_state"],
        "ok"
    );
    server.execute(&id, "import os; os.remove('only-here.txt')");
    server
        .post(&format!("/v1/sandboxes/{id}/pause"), &json!({}))
        .expect(200);
    let r = js(&server, &id, None, "typeof greeting");
    assert_eq!(r["result"]["text/plain"], "'undefined'", "{r:#}");
    let stderr = r["stderr"].as_str().unwrap();
    assert!(
        stderr.contains("JavaScript state was not restored: replaying cell")
            && stderr.contains("failed with Error: ENOENT"),
        "{stderr}"
    );
    // Said once: the context goes on with a fresh node.
    assert_eq!(js_text(&server, &id, None, "1 + 1"), "2");
}
