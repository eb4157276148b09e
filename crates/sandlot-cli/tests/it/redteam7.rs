//! Red-team cases for issue 7's ownership surfaces (keys, tenants, quotas, policy, egress,
//! guardrails, containment) that the tenancy and governance suites do not cover, each against
//! a real `sandlot serve` on 127.0.0.1: what a sandbox's template contributes to its limits
//! (quotas and the policy must see it), and what a contained sandbox still lets through
//! another interface (E2B's filesystem service).

use crate::common;

use common::{As, TestServer};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// How long a template without packages may take to build.
const BUILD_TIMEOUT: Duration = Duration::from_secs(300);
/// How long containment may take to show after the output that caused it.
const SETTLE: Duration = Duration::from_secs(20);
/// envd's port, as E2B's SDKs address it.
const ENVD: &str = "49983";

/// Polls template `name` (as `who`) until it is no longer building; returns it.
#[track_caller]
fn wait_built(who: &As, name: &str) -> Value {
    let deadline = Instant::now() + BUILD_TIMEOUT;
    loop {
        let t = who
            .get(&format!("/v1/templates/{name}"))
            .expect(200)
            .clone();
        if t["status"] != "building" {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "template {name} still building: {t}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Regression: a creation's quota reservation and its `create_sandbox`/`select_tier` policy
/// context were computed from the request's limits alone, while the runtime fills the
/// missing ones from the template's. A tenant whose quota is 2 GiB of memory built a template
/// with `limits.memory_mb = 8192` and created a sandbox from it with no limits: admitted as
/// 1 GiB (the server default), it ran with 8 GiB (four times the whole quota), and a policy
/// capping `context.memory_mb` never saw the 8192.
#[test]
fn template_limits_count_against_quotas_and_policy() {
    let server = TestServer::start();
    let key = server
        .tenant("thrifty")
        .quotas(json!({ "max_memory_mb": 2048 }))
        .role("member")
        .key();
    let t = As::key(&server, &key);
    t.post(
        "/v1/templates",
        &json!({ "name": "big-tpl", "limits": { "memory_mb": 8192 } }),
    )
    .expect(202);
    let built = wait_built(&t, "big-tpl");
    assert_eq!(built["status"], "ready", "{built}");

    // Larger than the whole quota: refused at once (400), as the same limits asked for
    // explicitly are.
    let explicit = t.post(
        "/v1/sandboxes",
        &json!({ "template": "big-tpl", "limits": { "memory_mb": 8192 } }),
    );
    explicit.expect_error(400, "invalid_argument");
    let implicit = t.post("/v1/sandboxes", &json!({ "template": "big-tpl" }));
    assert_eq!(
        (implicit.status, implicit.code()),
        (400, "invalid_argument"),
        "a template's limits got round the memory quota: {}",
        implicit.text
    );
    // Under the quota, the template's limits still apply when the request names none.
    let small = As::key(&server, server.key());
    small
        .post(
            "/v1/templates",
            &json!({ "name": "mid-tpl", "limits": { "memory_mb": 1536 } }),
        )
        .expect(202);
    assert_eq!(wait_built(&small, "mid-tpl")["status"], "ready");

    // The policy sees the memory the sandbox will get: cap it at 4096 for everyone.
    let policies = format!(
        "{}\n@id(\"memory-cap\")\n@reason(\"at most 4096 MiB\")\nforbid (principal, action == \
         Sandlot::Action::\"create_sandbox\", resource) when {{ context.memory_mb > 4096 }};\n",
        sandlot_policy::DEFAULT_POLICIES
    );
    let r = server
        .client()
        .put(format!("{}/v1/policies", server.url()))
        .header("content-type", "text/plain")
        .body(policies)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "{}", r.text().unwrap_or_default());
    // The operator (no quotas) uses the tenant-less big template's twin: build one of its own.
    let op = As::key(&server, server.key());
    op.post(
        "/v1/templates",
        &json!({ "name": "op-big", "limits": { "memory_mb": 8192 } }),
    )
    .expect(202);
    assert_eq!(wait_built(&op, "op-big")["status"], "ready");
    let r = op.post("/v1/sandboxes", &json!({ "template": "op-big" }));
    assert_eq!(
        (r.status, r.code()),
        (403, "policy_denied"),
        "a template's limits got round a policy on context.memory_mb: {}",
        r.text
    );
    // Within the cap, the sandbox gets the template's memory.
    let ok = op.post("/v1/sandboxes", &json!({ "template": "mid-tpl" }));
    assert_eq!(ok.expect(201)["limits"]["memory_mb"], 1536, "{}", ok.text);
}

/// envd's Connect RPC, unary, as JSON, with an API key.
fn envd_unary(server: &TestServer, id: &str, method: &str, msg: &Value) -> (u16, String) {
    let resp = common::client_builder()
        .build()
        .unwrap()
        .post(format!("{}/{method}", server.url()))
        .header("Content-Type", "application/json")
        .header("E2b-Sandbox-Port", ENVD)
        .header("E2b-Sandbox-Id", id)
        .header("X-API-KEY", server.key())
        .body(msg.to_string())
        .send()
        .unwrap();
    (resp.status().as_u16(), resp.text().unwrap_or_default())
}

/// Regression: containment refuses executions and writes (409 `sandbox_contained`), but
/// E2B's filesystem service made directories and renamed files in a contained sandbox's
/// workspace (`MakeDir`, `Move` answered 200): the runtime's `make_dir`/`move_path` had no
/// containment check and E2B's write gate did not look.
#[test]
fn a_contained_sandbox_takes_no_writes_through_e2b_either() {
    let server = TestServer::start();
    let a = As::key(&server, server.key());
    let id = a.post("/v1/sandboxes", &json!({})).expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = a.post(
        &format!("/v1/sandboxes/{id}/execute"),
        &json!({ "code": "open('/workspace/keep.txt', 'w').write('kept')" }),
    );
    assert_eq!(r.expect(200)["end_state"], "ok", "{}", r.text);
    // Printing its canary contains it.
    let _ = a.post(
        &format!("/v1/sandboxes/{id}/execute"),
        &json!({ "code": "import os\nprint(os.environ['AWS_ACCESS_KEY_ID'])" }),
    );
    let contained = common::wait_until(SETTLE, || {
        a.get(&format!("/v1/sandboxes/{id}"))
            .body
            .get("contained")
            .is_some()
    });
    assert!(contained, "not contained");

    let mut let_through = Vec::new();
    for (method, msg) in [
        (
            "filesystem.Filesystem/MakeDir",
            json!({ "path": "/home/user/after-containment" }),
        ),
        (
            "filesystem.Filesystem/Move",
            json!({ "source": "/home/user/keep.txt", "destination": "/home/user/moved.txt" }),
        ),
        (
            "filesystem.Filesystem/Remove",
            json!({ "path": "/home/user/keep.txt" }),
        ),
    ] {
        let (status, text) = envd_unary(&server, &id, method, &msg);
        if status == 200 {
            let_through.push(format!("{method}: {status} {text}"));
        }
    }
    // The workspace is as containment left it.
    let files = a
        .get(&format!("/v1/sandboxes/{id}/files"))
        .expect(200)
        .to_string();
    assert!(
        let_through.is_empty(),
        "writes into a contained sandbox were let through:\n{}\nfiles: {files}",
        let_through.join("\n")
    );
    assert!(
        files.contains("keep.txt") && !files.contains("moved.txt"),
        "{files}"
    );
    assert!(!files.contains("after-containment"), "{files}");
}

/// E2B's traffic token opens a sandbox's ports but not code (`/execute` on the interpreter's
/// port needs the envd token or an API key). Creating, deleting and restarting the code
/// interpreter's contexts change the sandbox's state as much as running code does (a restart
/// wipes every variable), yet E2B's own SDKs (Python and JS) manage contexts with the traffic
/// token only: requiring the envd token there breaks them. That known gap (SECURITY.md, known
/// gaps) is pinned here exactly: the traffic token runs no code, and its context calls reach
/// only the context routes, so a change of either rule fails this test and is decided on
/// purpose.
#[test]
fn the_e2b_traffic_token_runs_no_code_and_manages_contexts_only() {
    let server = TestServer::start();
    let http = common::client_builder().build().unwrap();
    let created: Value = http
        .post(format!("{}/sandboxes", server.url()))
        .header("X-API-KEY", server.key())
        .json(&json!({ "templateID": "code-interpreter-v1" }))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let id = created["sandboxID"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"));
    let traffic = created["trafficAccessToken"].as_str().unwrap();
    let envd = created["envdAccessToken"].as_str().unwrap();
    let send = |method: reqwest::Method, path: &str, token: (&str, &str)| {
        let r = http
            .request(method, format!("{}{path}", server.url()))
            .header("E2b-Sandbox-Id", id)
            .header("E2b-Sandbox-Port", "49999")
            .header(token.0, token.1)
            .header("Content-Type", "application/json")
            .body("{}")
            .send()
            .unwrap();
        (r.status().as_u16(), r.text().unwrap_or_default())
    };
    let owner = ("X-Access-Token", envd);
    let viewer = ("E2B-Traffic-Access-Token", traffic);
    let (s, ctx) = send(reqwest::Method::POST, "/contexts", owner);
    assert_eq!(s, 200, "{ctx}");
    let ctx: Value = serde_json::from_str(&ctx).unwrap();
    let ctx = ctx["id"].as_str().unwrap().to_owned();
    // Running code with the traffic token is refused ...
    let (s, _) = send(reqwest::Method::POST, "/execute", viewer);
    assert!(s == 401 || s == 403, "execute with the traffic token: {s}");
    // ... while the context routes answer it, as E2B's SDKs need (the known gap).
    for (method, path) in [
        (reqwest::Method::POST, "/contexts".to_owned()),
        (reqwest::Method::POST, format!("/contexts/{ctx}/restart")),
        (reqwest::Method::DELETE, format!("/contexts/{ctx}")),
    ] {
        let (s, text) = send(method.clone(), &path, viewer);
        assert!(
            s < 300,
            "{method} {path} with the traffic token: {s} {text}"
        );
    }
    // Nothing else of envd opens to it: the files route stays closed.
    let r = http
        .get(format!("{}/files?path=/workspace", server.url()))
        .header("E2b-Sandbox-Id", id)
        .header("E2b-Sandbox-Port", "49983")
        .header("E2B-Traffic-Access-Token", traffic)
        .send()
        .unwrap();
    let s = r.status().as_u16();
    assert!(
        s == 401 || s == 403,
        "envd /files with the traffic token: {s}"
    );
}

/// The always-refused address ranges (loopback, RFC 1918,
/// link-local, the metadata address) open when the sandbox's own allowlist lists a CIDR
/// inside them, and the allowlist is the creating key's to choose: a free-plan member asking for
/// `{"network": ["127.0.0.1"]}` would reach every service on the host's loopback (the API
/// itself, a database, the metadata service). Only the operator may list such entries now.
#[test]
fn a_free_plan_tenant_cannot_open_the_hosts_loopback_for_itself() {
    let server = TestServer::start();
    let key = server
        .tenant("freebie")
        .quotas(json!({}))
        .role("member")
        .key();
    let t = As::key(&server, &key);
    for entry in ["127.0.0.1", "127.0.0.0/8", "10.0.0.0/8", "169.254.169.254"] {
        let r = t.post("/v1/sandboxes", &json!({ "network": [entry] }));
        r.expect_error(403, "forbidden");
        assert!(
            r.message().contains("needs an operator key"),
            "{entry}: {}",
            r.text
        );
    }
    // Refused before anything was made: the tenant has no sandbox.
    let listed = t.get("/v1/sandboxes").expect(200).clone();
    assert_eq!(listed["sandboxes"], json!([]), "{listed}");
}
