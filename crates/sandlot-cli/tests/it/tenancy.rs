//! API keys, tenants and quotas against a real `sandlot serve` on 127.0.0.1: who is refused
//! (no key, malformed, unknown, revoked: 401 at once), what another tenant sees of a tenant's
//! sandboxes, snapshots, volumes, templates and artifacts (404, exactly as for an id never
//! seen, on every route of the OpenAPI document that names one), who may manage tenants and
//! keys, and quotas under burst (50 concurrent creations against 10, in arrival order, no leak
//! across deletes, crashes and restarts), bad input, and the `sandlot keys|tenants` commands.

use crate::common;

use common::{Resp, TestServer};
use reqwest::blocking::Client;
use reqwest::header::HeaderMap;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Helpers.

/// Requests sent with one key (or none).
struct As<'a> {
    server: &'a TestServer,
    http: Client,
}

impl<'a> As<'a> {
    fn key(server: &'a TestServer, key: &str) -> As<'a> {
        As {
            server,
            http: server.client_with_key(Some(key)),
        }
    }

    fn nobody(server: &'a TestServer) -> As<'a> {
        As {
            server,
            http: server.client_with_key(None),
        }
    }

    /// A client sending these raw headers instead of a bearer key.
    fn headers(server: &'a TestServer, headers: &[(&str, &str)]) -> As<'a> {
        let mut h = HeaderMap::new();
        for (k, v) in headers {
            h.insert(
                reqwest::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        As {
            server,
            http: common::client_builder().default_headers(h).build().unwrap(),
        }
    }

    fn send(&self, method: &str, path: &str, body: Option<&Value>) -> Resp {
        let url = format!("{}{path}", self.server.url());
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self.http.request(method, url);
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req
            .send()
            .unwrap_or_else(|e| panic!("{path}: {e}\n{}", self.server.stderr()));
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Resp {
            status,
            headers,
            body,
            text,
        }
    }

    fn get(&self, path: &str) -> Resp {
        self.send("GET", path, None)
    }

    fn post(&self, path: &str, body: &Value) -> Resp {
        self.send("POST", path, Some(body))
    }

    fn put(&self, path: &str, body: &Value) -> Resp {
        self.send("PUT", path, Some(body))
    }

    fn delete(&self, path: &str) -> Resp {
        self.send("DELETE", path, None)
    }

    /// Creates a sandbox; returns its id.
    #[track_caller]
    fn sandbox(&self, body: &Value) -> String {
        let s = self.post("/v1/sandboxes", body);
        s.expect(201)["id"].as_str().unwrap().to_owned()
    }
}

/// Creates tenant `name` with these quotas (as the local admin).
#[track_caller]
fn tenant(server: &TestServer, name: &str, quotas: Value) -> Value {
    let r = server.post("/v1/tenants", &json!({ "name": name, "quotas": quotas }));
    r.expect(201).clone()
}

/// A new key for `tenant`; returns (key, id).
#[track_caller]
fn new_key(server: &TestServer, tenant: &str, admin: bool) -> (String, String) {
    let role = if admin { "admin" } else { "member" };
    let r = server.post("/v1/keys", &json!({ "tenant": tenant, "role": role }));
    let b = r.expect(201);
    (
        b["key"].as_str().unwrap().to_owned(),
        b["id"].as_str().unwrap().to_owned(),
    )
}

#[track_caller]
fn set_quotas(server: &TestServer, tenant: &str, quotas: Value) {
    server
        .send_put(
            &format!("/v1/tenants/{tenant}"),
            &json!({ "quotas": quotas }),
        )
        .expect(200);
}

trait Put {
    fn send_put(&self, path: &str, body: &Value) -> Resp;
}

impl Put for TestServer {
    fn send_put(&self, path: &str, body: &Value) -> Resp {
        As::key(self, self.key()).put(path, body)
    }
}

/// Asserts a 401 `unauthenticated` with a `WWW-Authenticate: Bearer` challenge.
#[track_caller]
fn assert_401(r: &Resp, what: &str) {
    assert_eq!(r.status, 401, "{what}: {}", r.text);
    let challenge = r
        .headers
        .get("www-authenticate")
        .unwrap_or_else(|| panic!("{what}: no WWW-Authenticate: {:?}", r.headers));
    assert!(
        challenge.to_str().unwrap().starts_with("Bearer"),
        "{what}: {challenge:?}"
    );
}

/// Asserts a 429 `tenant_quota_exceeded` naming `quota`, with a numeric Retry-After.
#[track_caller]
fn assert_quota(r: &Resp, quota: &str) -> u64 {
    r.expect_error(429, "tenant_quota_exceeded");
    assert!(
        r.message().contains(quota),
        "should name {quota}: {}",
        r.text
    );
    r.headers
        .get("retry-after")
        .unwrap_or_else(|| panic!("no Retry-After: {:?}", r.headers))
        .to_str()
        .unwrap()
        .parse::<u64>()
        .unwrap()
}

/// Asserts a request larger than the whole quota: 400 `invalid_argument` at once (waiting
/// cannot help, so it is no 429 a client would retry), naming `quota`.
#[track_caller]
fn assert_never_fits(r: &Resp, quota: &str) {
    r.expect_error(400, "invalid_argument");
    assert!(
        r.message().contains(quota),
        "should name {quota}: {}",
        r.text
    );
    assert!(r.headers.get("retry-after").is_none(), "{:?}", r.headers);
}

/// Ids of `tenant`'s sandboxes that have not ended, as its key lists them.
fn live(who: &As) -> Vec<String> {
    who.get("/v1/sandboxes").expect(200)["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Percent-encodes every byte: a path segment that decodes to `s`.
fn pct(s: &str) -> String {
    s.bytes().map(|b| format!("%{b:02X}")).collect()
}

/// SIGKILLs every process in sandbox `id`'s cgroups, from the host; returns how many.
fn kill_sandbox_processes(server: &TestServer, id: &str) -> usize {
    fn walk(dir: &std::path::Path, pids: &mut BTreeSet<i32>) {
        if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
            pids.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
        }
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                walk(&e.path(), pids);
            }
        }
    }
    let mut pids = BTreeSet::new();
    for dir in common::HostView::of(server).cgroup_dirs(id) {
        walk(&dir, &mut pids);
    }
    for pid in &pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    pids.len()
}

/// `sandlot <args>` against the server with `key`, bounded in time.
fn cli(server: &TestServer, key: &str, args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sandlot"))
        .args(args)
        .env("SANDLOT_URL", server.url())
        .env("SANDLOT_API_KEY", key)
        .env_remove("SANDLOT_DATA_DIR")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("sandlot {args:?} did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

// ---------------------------------------------------------------------------------------------
// Authentication.

#[test]
fn missing_malformed_unknown_and_revoked_keys_are_refused_at_once() {
    let server = TestServer::start();
    tenant(&server, "acme", json!({}));
    let (k1, k1_id) = new_key(&server, "acme", false);
    let (k2, _) = new_key(&server, "acme", false);
    let forged = {
        let mut f = k1.clone();
        let last = f.pop().unwrap();
        f.push(if last == 'a' { 'b' } else { 'a' });
        f
    };
    let unknown = format!("sl_aaaaaaaa_{}", "a".repeat(32));

    let artifact = format!("/v1/artifacts/{}", "0".repeat(64));
    let routes: Vec<(&str, &str, Option<Value>)> = vec![
        ("GET", "/v1/sandboxes", None),
        ("POST", "/v1/sandboxes", Some(json!({}))),
        ("GET", "/v1/sandboxes/sb_nope", None),
        (
            "POST",
            "/v1/sandboxes/sb_nope/execute",
            Some(json!({"code": "1"})),
        ),
        ("GET", "/v1/whoami", None),
        ("GET", "/v1/keys", None),
        ("POST", "/v1/tenants", Some(json!({"name": "x"}))),
        ("GET", "/v1/templates", None),
        ("GET", "/v1/snapshots", None),
        ("GET", "/v1/volumes", None),
        ("GET", &artifact, None),
        ("GET", "/v1/no-such-route", None),
    ];
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "tenancy-test", "version": "0"}}
    });
    let bearer = |k: &str| format!("Bearer {k}");
    let clients: Vec<(&str, As)> = vec![
        ("no key", As::nobody(&server)),
        (
            "empty bearer",
            As::headers(&server, &[("authorization", "Bearer ")]),
        ),
        (
            "basic auth",
            As::headers(&server, &[("authorization", "Basic dXNlcjpwYXNz")]),
        ),
        (
            "not a key",
            As::headers(&server, &[("authorization", "Bearer not-a-key")]),
        ),
        (
            "uppercase key",
            As::headers(&server, &[("authorization", &bearer(&k1.to_uppercase()))]),
        ),
        (
            "key with a trailing byte",
            As::headers(&server, &[("authorization", &bearer(&format!("{k1}x")))]),
        ),
        ("unknown key", As::key(&server, &unknown)),
        ("forged secret", As::key(&server, &forged)),
        (
            "x-api-key garbage",
            As::headers(&server, &[("x-api-key", "sl_zzz")]),
        ),
    ];
    for (what, c) in &clients {
        for (method, path, body) in &routes {
            let r = c.send(method, path, body.as_ref());
            assert_401(&r, &format!("{what}: {method} {path}"));
            r.expect_error(401, "unauthenticated");
        }
        let r = c.post("/mcp", &initialize);
        assert_401(&r, &format!("{what}: /mcp"));
        assert_eq!(r.body["jsonrpc"], "2.0", "{what}: {}", r.text);
        // Open to anyone: liveness and the API's description.
        c.get("/v1/health").expect(200);
        c.get("/v1/openapi.json").expect(200);
    }
    // A message that says what is wrong, and never echoes the key.
    let r = As::key(&server, &forged).get("/v1/whoami");
    assert!(!r.text.contains(&forged), "{}", r.text);
    let r = As::nobody(&server).get("/v1/whoami");
    assert!(r.message().contains("Bearer"), "{}", r.text);

    // The E2B sandbox header routes a request to E2B's own handlers, never to /v1 unauthenticated.
    let r = As::headers(&server, &[("e2b-sandbox-id", "x")]).get("/v1/sandboxes");
    assert!(
        r.status >= 400 && r.body.get("sandboxes").is_none(),
        "e2b header without a key reached /v1: {} {}",
        r.status,
        r.text
    );

    // Both ways of sending a key work.
    let me = As::key(&server, &k1).get("/v1/whoami");
    assert_eq!(me.expect(200)["tenant"], "acme");
    assert_eq!(me.body["role"], "member");
    assert!(!me.text.contains(&k1), "{}", me.text);
    let r = As::headers(&server, &[("x-api-key", &k1)]).get("/v1/whoami");
    assert_eq!(r.expect(200)["tenant"], "acme");

    // Revocation takes effect at the very next request; other keys keep working.
    let a1 = As::key(&server, &k1);
    let a2 = As::key(&server, &k2);
    a1.get("/v1/sandboxes").expect(200);
    let revoked = server.delete(&format!("/v1/keys/{k1_id}"));
    assert!(
        revoked.expect(200)["revoked_at"].is_string(),
        "{}",
        revoked.text
    );
    let r = a1.get("/v1/sandboxes");
    assert_401(&r, "revoked key");
    assert!(r.message().contains("revoked"), "{}", r.text);
    assert_401(&a1.post("/mcp", &initialize), "revoked key on /mcp");
    assert_401(
        &As::headers(&server, &[("x-api-key", &k1)]).get("/v1/whoami"),
        "revoked x-api-key",
    );
    a2.get("/v1/sandboxes").expect(200);
    server.get("/v1/sandboxes").expect(200);
    // Revoking again answers the record; an unknown id is key_not_found.
    server.delete(&format!("/v1/keys/{k1_id}")).expect(200);
    server
        .delete("/v1/keys/key_doesnotexist")
        .expect_error(404, "key_not_found");
}

// ---------------------------------------------------------------------------------------------
// Tenant scoping.

/// What tenant `alpha` owns, to be probed by another tenant.
struct Owned {
    sandbox: String,
    snapshot: String,
    volume: String,
    template: String,
    artifact: String,
    ctx: String,
    file: &'static str,
    volume_file: &'static str,
    execution: String,
    job: String,
    webhook: String,
}

/// Tenant `alpha` creates one of everything.
fn alpha_owns(a: &As) -> Owned {
    let volume = "alpha-vol".to_owned();
    a.post("/v1/volumes", &json!({ "name": volume, "size_mb": 64 }))
        .expect(201);
    let r = a.send("PUT", &format!("/v1/volumes/{volume}/files/v.txt"), None);
    assert!(r.status < 300, "{}", r.text);
    let sandbox = a.sandbox(&json!({
        "ports": [8000],
        "volumes": [{ "name": volume, "path": "data" }],
    }));
    let r = a.post(
        &format!("/v1/sandboxes/{sandbox}/execute"),
        &json!({ "code": "open('art.txt', 'w').write('alpha secret')\nopen('f.txt', 'w').write('alpha file')" }),
    );
    let r = r.expect(200);
    assert_eq!(r["end_state"], "ok", "{r}");
    let execution = r["id"].as_str().unwrap().to_owned();
    let artifact = r["artifacts"]
        .as_array()
        .and_then(|l| l.iter().find(|x| x["path"] == "art.txt"))
        .unwrap_or_else(|| panic!("no artifact: {r:#}"))["sha256"]
        .as_str()
        .unwrap()
        .to_owned();
    a.get(&format!("/v1/artifacts/{artifact}")).expect(200);
    let ctx = a
        .post(&format!("/v1/sandboxes/{sandbox}/contexts"), &json!({}))
        .expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let snapshot = a
        .post(&format!("/v1/sandboxes/{sandbox}/snapshots"), &json!({}))
        .expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Registered (and its name claimed) at once; the build goes on in the background.
    let template = "alpha-tpl".to_owned();
    a.post("/v1/templates", &json!({ "name": template }))
        .expect(202);
    let job = a
        .post(
            &format!("/v1/sandboxes/{sandbox}/jobs"),
            &json!({ "code": "1 + 1" }),
        )
        .expect(202)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let webhook = a
        .post(
            "/v1/webhooks",
            &json!({ "url": "http://127.0.0.1:9/hook", "events": ["executed"] }),
        )
        .expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    Owned {
        execution,
        job,
        webhook,
        sandbox,
        snapshot,
        volume,
        template,
        artifact,
        ctx,
        file: "f.txt",
        volume_file: "v.txt",
    }
}

/// Every (method, concrete path) of the OpenAPI document that names a resource, filled with
/// `owned`'s (and `own_sandbox` for the other side of a diff), with the not-found code
/// expected; plus the same route filled with ids never seen, whose answer must be the same.
fn probes(owned: &Owned, own_sandbox: &str) -> Vec<(String, String, String, &'static str)> {
    let doc: Value = serde_json::from_str(sandlot_api::OPENAPI_JSON).unwrap();
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        // `/v1/ports/{token}/...` is a capability URL (whoever holds the token), not a tenant's;
        // `/v1/policies/versions/{v}` is the operator's alone (403 for every tenant's key,
        // it/console.rs), not a tenant's object.
        if !path.contains('{')
            || path.starts_with("/v1/tenants")
            || path.starts_with("/v1/keys")
            || path.starts_with("/v1/ports/")
            || path.starts_with("/v1/policies/versions/")
        {
            continue;
        }
        let mut segments = path.trim_start_matches("/v1/").split('/');
        let kind = segments.next().unwrap();
        // `/v1/lineage/{artifact|execution|sandbox}/...` names what its second segment says.
        let kind = match (kind, segments.next()) {
            ("lineage", Some("artifact")) => "artifacts",
            ("lineage", Some("execution")) => "executions",
            ("lineage", Some("sandbox")) => "sandboxes",
            (kind, _) => kind,
        };
        let code = match kind {
            "sandboxes" => "sandbox_not_found",
            "executions" => "execution_not_found",
            "jobs" => "job_not_found",
            "webhooks" => "webhook_not_found",
            "snapshots" => "snapshot_not_found",
            "volumes" => "volume_not_found",
            "templates" => "template_not_found",
            "artifacts" => "file_not_found",
            // Alpha owns no review here (one needs a holding policy): another tenant's real
            // review is 404 on each of these routes in reviews.rs.
            "reviews" => "review_not_found",
            other => panic!("a route of an unknown kind {other}: {path}: add it to this test"),
        };
        let fill = |mine: bool, other: &str| {
            let id = match (kind, mine) {
                ("snapshots", true) => owned.snapshot.clone(),
                ("snapshots", false) => "snap_neverseen0000".into(),
                ("executions", true) => owned.execution.clone(),
                ("executions", false) => "ex_neverseen0000".into(),
                ("jobs", true) => owned.job.clone(),
                ("jobs", false) => "job_neverseen0000".into(),
                ("webhooks", true) => owned.webhook.clone(),
                ("webhooks", false) => "wh_neverseen0000".into(),
                ("reviews", _) => "rev_neverseen0000".into(),
                (_, true) => owned.sandbox.clone(),
                (_, false) => "sb_neverseen0000".into(),
            };
            let name = match (kind, mine) {
                ("volumes", true) => owned.volume.clone(),
                ("volumes", false) => "never-seen-vol".into(),
                (_, true) => owned.template.clone(),
                (_, false) => "never-seen-tpl".into(),
            };
            let sha = if mine {
                owned.artifact.clone()
            } else {
                "0".repeat(64)
            };
            let file = if kind == "volumes" {
                owned.volume_file
            } else {
                owned.file
            };
            path.replace("{id}", &id)
                .replace("{other}", other)
                .replace("{ctx}", &owned.ctx)
                .replace("{path}", file)
                .replace("{port}", "8000")
                .replace("{name}", &name)
                .replace("{sha256}", &sha)
        };
        for method in ["get", "post", "put", "delete"] {
            if item.get(method).is_none() {
                continue;
            }
            let m = method.to_uppercase();
            out.push((
                m.clone(),
                fill(true, own_sandbox),
                fill(false, own_sandbox),
                code,
            ));
            // A diff names two sandboxes: the foreign one on either side.
            if path.contains("{other}") {
                let swapped = path
                    .replace("{id}", own_sandbox)
                    .replace("{other}", &owned.sandbox);
                let never = path
                    .replace("{id}", own_sandbox)
                    .replace("{other}", "sb_neverseen0000");
                out.push((m.clone(), swapped, never, code));
            }
        }
    }
    // Deletions last: were one let through, the probes after it would still be meaningful.
    out.sort_by_key(|(m, ..)| m == "DELETE");
    out
}

/// A body that would be accepted were the resource the caller's.
fn body_for(path: &str, method: &str) -> Option<Value> {
    match method {
        "GET" | "DELETE" => None,
        _ if path.ends_with("/execute") => {
            Some(json!({ "code": "open('f.txt','w').write('pwned')" }))
        }
        _ if path.ends_with("/approve") || path.ends_with("/deny") => {
            Some(json!({ "reason": "decided by another tenant" }))
        }
        _ => Some(json!({})),
    }
}

#[test]
fn another_tenants_ids_answer_404_on_every_route() {
    // Webhooks to loopback, so alpha can own one without a network.
    let server = TestServer::start_with_env(&[("SANDLOT_WEBHOOK_ALLOW_PRIVATE", "1")]);
    tenant(&server, "alpha", json!({}));
    tenant(&server, "beta", json!({}));
    let (ka, _) = new_key(&server, "alpha", false);
    let (kb, _) = new_key(&server, "beta", false);
    let (kb_admin, _) = new_key(&server, "beta", true);
    let a = As::key(&server, &ka);
    let owned = alpha_owns(&a);
    let b_member = As::key(&server, &kb);
    let b_admin = As::key(&server, &kb_admin);
    let b_sandbox = b_member.sandbox(&json!({}));

    let probes = probes(&owned, &b_sandbox);
    // The document's routes cover everything the issue names.
    let covered: BTreeSet<String> = probes
        .iter()
        .map(|(m, p, ..)| {
            format!(
                "{m} {}",
                p.replace(&owned.sandbox, "{id}")
                    .replace(&b_sandbox, "{mine}")
                    .replace(&owned.snapshot, "{id}")
            )
        })
        .collect();
    for must in [
        "GET /v1/sandboxes/{id}",
        "DELETE /v1/sandboxes/{id}",
        "POST /v1/sandboxes/{id}/execute",
        "POST /v1/sandboxes/{id}/interrupt",
        "GET /v1/sandboxes/{id}/executions",
        "GET /v1/sandboxes/{id}/background",
        "POST /v1/sandboxes/{id}/fork",
        "POST /v1/sandboxes/{id}/pause",
        "POST /v1/sandboxes/{id}/resume",
        "POST /v1/sandboxes/{id}/snapshots",
        "GET /v1/sandboxes/{id}/diff/{mine}",
        "GET /v1/sandboxes/{mine}/diff/{id}",
        "GET /v1/sandboxes/{id}/files",
        "PUT /v1/sandboxes/{id}/files/f.txt",
        "GET /v1/sandboxes/{id}/files/f.txt",
        "DELETE /v1/sandboxes/{id}/files/f.txt",
        "GET /v1/sandboxes/{id}/archive",
        "PUT /v1/sandboxes/{id}/archive",
        "POST /v1/sandboxes/{id}/contexts",
        "GET /v1/sandboxes/{id}/contexts",
        "GET /v1/sandboxes/{id}/ports/8000",
        "GET /v1/snapshots/{id}",
        "DELETE /v1/snapshots/{id}",
        "GET /v1/volumes/alpha-vol",
        "DELETE /v1/volumes/alpha-vol",
        "GET /v1/volumes/alpha-vol/files",
        "GET /v1/volumes/alpha-vol/files/v.txt",
        "PUT /v1/volumes/alpha-vol/files/v.txt",
        "GET /v1/templates/alpha-tpl",
        "POST /v1/sandboxes/{id}/jobs",
        "GET /v1/sandboxes/{id}/jobs",
        "GET /v1/sandboxes/{id}/metrics",
        "GET /v1/sandboxes/{id}/bundle",
        "GET /v1/lineage/sandbox/{id}",
        "GET /v1/lineage/sandbox/{id}/openlineage",
    ] {
        assert!(covered.contains(must), "{must} not probed: {covered:#?}");
    }
    assert!(
        covered.iter().any(|p| p.starts_with("GET /v1/artifacts/")),
        "{covered:#?}"
    );

    let mut failures = Vec::new();
    for (who, b) in [("beta member", &b_member), ("beta admin", &b_admin)] {
        for (method, path, never, code) in &probes {
            let body = body_for(path, method);
            let r = b.send(method, path, body.as_ref());
            let n = b.send(method, never, body.as_ref());
            if (r.status, r.code()) != (404, *code) || (n.status, n.code()) != (r.status, r.code())
            {
                failures.push(format!(
                    "{who}: {method} {path}: {} {} (an id never seen: {} {})",
                    r.status,
                    r.text.chars().take(200).collect::<String>(),
                    n.status,
                    n.code()
                ));
            }
            // The answer says nothing about the owner (names A chose may be echoed as ids).
            assert!(
                !r.text.contains("tenant alpha") && !r.text.contains("\"alpha\""),
                "{who}: {method} {path}: {}",
                r.text
            );
        }
        // Hostile spellings of the same ids: percent-encoded segments decode to A's names in
        // the handlers, and must not slip past the scoping (templates once did).
        for (path, code) in [
            (
                format!("/v1/sandboxes/{}", pct(&owned.sandbox)),
                "sandbox_not_found",
            ),
            (
                format!("/v1/snapshots/{}", pct(&owned.snapshot)),
                "snapshot_not_found",
            ),
            (
                format!("/v1/volumes/{}", pct(&owned.volume)),
                "volume_not_found",
            ),
            (
                format!("/v1/templates/{}", pct(&owned.template)),
                "template_not_found",
            ),
            (
                format!("/v1/artifacts/{}", pct(&owned.artifact)),
                "file_not_found",
            ),
            (
                format!("/v1/sandboxes/{b_sandbox}/diff/{}", pct(&owned.sandbox)),
                "sandbox_not_found",
            ),
        ] {
            let r = b.get(&path);
            if (r.status, r.code()) != (404, code) {
                failures.push(format!(
                    "{who}: GET {path}: {} {}",
                    r.status,
                    r.text.chars().take(200).collect::<String>()
                ));
            }
        }
        // Lists show none of A's.
        for path in [
            "/v1/sandboxes",
            "/v1/sandboxes?all=true",
            "/v1/snapshots",
            "/v1/volumes",
            "/v1/templates",
        ] {
            let r = b.get(path);
            r.expect(200);
            for id in [
                &owned.sandbox,
                &owned.snapshot,
                &owned.volume,
                &owned.template,
            ] {
                assert!(
                    !r.text.contains(id.as_str()),
                    "{who}: {path} shows {id}: {}",
                    r.text
                );
            }
            assert!(!r.text.contains("\"alpha\""), "{who}: {path}: {}", r.text);
        }
        // Creating from A's snapshot, template or volume: as if they did not exist.
        b.post("/v1/sandboxes", &json!({ "from_snapshot": owned.snapshot }))
            .expect_error(404, "snapshot_not_found");
        b.post("/v1/sandboxes", &json!({ "template": owned.template }))
            .expect_error(404, "template_not_found");
        b.post(
            "/v1/sandboxes",
            &json!({ "volumes": [{ "name": owned.volume, "path": "data" }] }),
        )
        .expect_error(404, "volume_not_found");
        // Names are per tenant: B's volume and template of A's names are B's own, and
        // deleting them leaves A's (checked below).
        let v = b.post("/v1/volumes", &json!({ "name": owned.volume }));
        assert_eq!(v.expect(201)["tenant"], "beta", "{}", v.text);
        let t = b.post("/v1/templates", &json!({ "name": owned.template }));
        assert_eq!(t.expect(202)["tenant"], "beta", "{}", t.text);
        b.delete(&format!("/v1/volumes/{}", owned.volume))
            .expect(204);
        b.delete(&format!("/v1/templates/{}", owned.template))
            .expect(204);
    }
    // Another tenant's record and keys are not found either (for its admin, see
    // `a_tenants_admin_is_not_a_superuser`).
    b_member
        .get("/v1/tenants/alpha")
        .expect_error(404, "tenant_not_found");
    assert!(!b_member.get("/v1/keys").text.contains("\"alpha\""));
    assert!(
        failures.is_empty(),
        "{} cross-tenant probes did not answer as for an id never seen:\n{}",
        failures.len(),
        failures.join("\n")
    );

    // Nothing of A's changed: its sandbox runs, its files, snapshot, volume, artifact and
    // template are all there.
    let r = a.post(
        &format!("/v1/sandboxes/{}/execute", owned.sandbox),
        &json!({ "code": "open('f.txt').read()" }),
    );
    assert_eq!(
        r.expect(200)["result"]["text/plain"],
        "'alpha file'",
        "{}",
        r.text
    );
    for path in [
        format!("/v1/sandboxes/{}", owned.sandbox),
        format!("/v1/snapshots/{}", owned.snapshot),
        format!("/v1/volumes/{}", owned.volume),
        format!("/v1/artifacts/{}", owned.artifact),
        format!("/v1/templates/{}", owned.template),
        format!("/v1/sandboxes/{}/contexts", owned.sandbox),
    ] {
        a.get(&path).expect(200);
    }
    // And A sees its own through the lists.
    let mine = a.get("/v1/sandboxes").expect(200).to_string();
    assert!(
        mine.contains(&owned.sandbox) && !mine.contains(&b_sandbox),
        "{mine}"
    );
}

/// MCP tools act for the caller's tenant like the REST routes do (they once acted on every
/// tenant's sandboxes).
#[test]
fn mcp_tools_see_only_the_callers_tenant() {
    let server = TestServer::start();
    tenant(&server, "alpha", json!({}));
    tenant(
        &server,
        "beta",
        json!({ "max_sandboxes": 1, "wait_seconds": 0.5 }),
    );
    let (ka, _) = new_key(&server, "alpha", false);
    let (kb, _) = new_key(&server, "beta", false);
    let a = As::key(&server, &ka);
    let a_sandbox = a.sandbox(&json!({}));
    a.post(
        &format!("/v1/sandboxes/{a_sandbox}/execute"),
        &json!({ "code": "open('f.txt', 'w').write('alpha file')" }),
    )
    .expect(200);

    let b = As::key(&server, &kb);
    let headers = |session: Option<&str>| {
        let mut h = vec![
            (
                "accept".to_owned(),
                "application/json, text/event-stream".to_owned(),
            ),
            ("mcp-protocol-version".to_owned(), "2025-06-18".to_owned()),
        ];
        if let Some(s) = session {
            h.push(("mcp-session-id".to_owned(), s.to_owned()));
        }
        h
    };
    let rpc = |session: Option<&str>, body: Value| -> (HeaderMap, Value) {
        let mut req = b.http.post(format!("{}/mcp", server.url())).json(&body);
        for (k, v) in headers(session) {
            req = req.header(k, v);
        }
        let resp = req.send().unwrap();
        let h = resp.headers().clone();
        let text = resp.text().unwrap();
        let v = serde_json::from_str(&text).unwrap_or_else(|_| {
            text.lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
                .find(|m| m.get("id").is_some())
                .unwrap_or(Value::Null)
        });
        (h, v)
    };
    let (h, init) = rpc(
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "tenancy-test", "version": "0"}}}),
    );
    assert!(init["result"].is_object(), "{init}");
    let sid = h["mcp-session-id"].to_str().unwrap().to_owned();
    let mut req = b
        .http
        .post(format!("{}/mcp", server.url()))
        .json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    for (k, v) in headers(Some(&sid)) {
        req = req.header(k, v);
    }
    req.send().unwrap();
    let call = |id: u64, tool: &str, args: Value| -> Value {
        rpc(
            Some(&sid),
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                   "params": {"name": tool, "arguments": args}}),
        )
        .1
    };
    let refused =
        |reply: &Value| reply["result"]["isError"] == json!(true) || reply["error"].is_object();

    let mut failures = Vec::new();
    let listed = call(2, "list_sandboxes", json!({}));
    if listed.to_string().contains(&a_sandbox) {
        failures.push(format!("list_sandboxes shows alpha's sandbox: {listed}"));
    }
    for (i, (tool, args)) in [
        (
            "run_python",
            json!({"sandbox_id": a_sandbox, "code": "open('f.txt').read()"}),
        ),
        (
            "run_bash",
            json!({"sandbox_id": a_sandbox, "code": "cat f.txt"}),
        ),
        (
            "read_file",
            json!({"sandbox_id": a_sandbox, "path": "f.txt"}),
        ),
        (
            "write_file",
            json!({"sandbox_id": a_sandbox, "path": "f.txt", "content": "pwned"}),
        ),
        ("list_files", json!({"sandbox_id": a_sandbox})),
        ("snapshot_sandbox", json!({"sandbox_id": a_sandbox})),
        ("fork_sandbox", json!({"sandbox_id": a_sandbox})),
        ("pause_sandbox", json!({"sandbox_id": a_sandbox})),
        ("delete_sandbox", json!({"sandbox_id": a_sandbox})),
    ]
    .into_iter()
    .enumerate()
    {
        let reply = call(10 + i as u64, tool, args);
        if !refused(&reply) || reply.to_string().contains("alpha file") {
            failures.push(format!("{tool} on alpha's sandbox: {reply}"));
        }
    }
    // A sandbox beta creates over MCP is beta's, and counts against beta's quota.
    let created = call(30, "create_sandbox", json!({}));
    let text = created.to_string();
    let b_ids: Vec<String> = live(&b);
    if b_ids.len() != 1 || !text.contains(&b_ids[0]) {
        failures.push(format!(
            "create_sandbox over MCP is not beta's: {created}; beta lists {b_ids:?}"
        ));
    }
    let second = call(31, "create_sandbox", json!({}));
    if !refused(&second) {
        failures.push(format!(
            "create_sandbox over MCP ignores beta's quota: {second}"
        ));
    }
    // Whatever happened above, alpha's sandbox and file are intact.
    let r = a.post(
        &format!("/v1/sandboxes/{a_sandbox}/execute"),
        &json!({ "code": "open('f.txt').read()" }),
    );
    let intact = r.status == 200 && r.body["result"]["text/plain"] == "'alpha file'";
    if !intact {
        failures.push(format!("alpha's sandbox was changed over MCP: {}", r.text));
    }
    assert!(
        failures.is_empty(),
        "(MCP is not tenant-scoped):\n{}",
        failures.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// Admin routes.

#[test]
fn members_cannot_manage_tenants_or_other_tenants_keys() {
    let server = TestServer::start();
    tenant(&server, "alpha", json!({}));
    tenant(&server, "beta", json!({}));
    let (_ka, ka_id) = new_key(&server, "alpha", false);
    let (kb, kb_id) = new_key(&server, "beta", false);
    let (_kb2, kb2_id) = new_key(&server, "beta", false);
    let b = As::key(&server, &kb);

    // Admin-only routes: 403 forbidden for a member, and nothing created.
    b.post("/v1/tenants", &json!({ "name": "gamma" }))
        .expect_error(403, "forbidden");
    b.post("/v1/keys", &json!({ "tenant": "beta", "role": "admin" }))
        .expect_error(403, "forbidden");
    b.post("/v1/keys", &json!({ "tenant": "beta" }))
        .expect_error(403, "forbidden");
    b.get("/v1/tenants").expect_error(403, "forbidden");
    b.put("/v1/tenants/beta", &json!({ "quotas": {} }))
        .expect_error(403, "forbidden");
    b.put("/v1/tenants/alpha", &json!({ "plan": "x" }))
        .expect_error(403, "forbidden");
    server
        .get("/v1/tenants/gamma")
        .expect_error(404, "tenant_not_found");

    // A member sees its own tenant's record and keys only.
    assert_eq!(b.get("/v1/tenants/beta").expect(200)["name"], "beta");
    b.get("/v1/tenants/alpha")
        .expect_error(404, "tenant_not_found");
    b.get("/v1/tenants/default")
        .expect_error(404, "tenant_not_found");
    for path in [
        "/v1/keys",
        "/v1/keys?tenant=alpha",
        "/v1/keys?tenant=default",
    ] {
        let keys = b.get(path).expect(200)["keys"].as_array().unwrap().clone();
        assert!(!keys.is_empty(), "{path}");
        assert!(
            keys.iter().all(|k| k["tenant"] == "beta"),
            "{path}: {keys:?}"
        );
        assert!(
            keys.iter()
                .all(|k| k.get("key").is_none() && k.get("sha256").is_none()),
            "{path}: {keys:?}"
        );
    }
    // It may revoke its own tenant's keys, not another tenant's (which it cannot tell exist).
    b.delete(&format!("/v1/keys/{ka_id}"))
        .expect_error(404, "key_not_found");
    let admin_id = server.get("/v1/whoami").expect(200)["key_id"]
        .as_str()
        .unwrap()
        .to_owned();
    b.delete(&format!("/v1/keys/{admin_id}"))
        .expect_error(404, "key_not_found");
    server.get("/v1/whoami").expect(200);
    b.delete(&format!("/v1/keys/{kb2_id}")).expect(200);
    // Even its own key (then it is refused).
    b.delete(&format!("/v1/keys/{kb_id}")).expect(200);
    assert_401(&b.get("/v1/whoami"), "self-revoked key");
    // The other tenant's key was untouched.
    let alpha_keys = server.get("/v1/keys?tenant=alpha").expect(200)["keys"].clone();
    assert!(alpha_keys[0]["revoked_at"].is_null(), "{alpha_keys}");
}

/// An admin key of one tenant is not a superuser: it must not mint keys for another tenant,
/// revoke them, or lift its own tenant's quotas (every admin key once could).
#[test]
fn a_tenants_admin_is_not_a_superuser() {
    let server = TestServer::start();
    tenant(&server, "alpha", json!({}));
    tenant(&server, "beta", json!({ "max_sandboxes": 1 }));
    let (_ka, ka_id) = new_key(&server, "alpha", false);
    let (kb_admin, _) = new_key(&server, "beta", true);
    let b = As::key(&server, &kb_admin);
    let mut failures = Vec::new();
    let mut check = |what: &str, r: Resp| {
        if r.status < 400 {
            failures.push(format!("{what}: {} {}", r.status, r.text));
        }
    };
    check(
        "beta's admin mints a key for alpha",
        b.post("/v1/keys", &json!({ "tenant": "alpha", "role": "member" })),
    );
    check(
        "beta's admin mints an admin key for the operator tenant",
        b.post("/v1/keys", &json!({ "tenant": "default", "role": "admin" })),
    );
    check(
        "beta's admin revokes alpha's key",
        b.delete(&format!("/v1/keys/{ka_id}")),
    );
    check(
        "beta's admin lifts beta's own quota",
        b.put("/v1/tenants/beta", &json!({ "quotas": {} })),
    );
    check(
        "beta's admin changes alpha's plan",
        b.put("/v1/tenants/alpha", &json!({ "plan": "evil" })),
    );
    let listed = b.get("/v1/keys?tenant=alpha");
    if listed.text.contains(&ka_id) {
        failures.push(format!("beta's admin lists alpha's keys: {}", listed.text));
    }
    let alpha = b.get("/v1/tenants/alpha");
    if alpha.status != 404 {
        failures.push(format!("beta's admin reads alpha's record: {}", alpha.text));
    }
    let tenants = b.get("/v1/tenants");
    if tenants.text.contains("\"alpha\"") {
        failures.push(format!("beta's admin lists every tenant: {}", tenants.text));
    }
    // It may manage its own tenant's member keys (what a tenant admin is for).
    let own = b.post("/v1/keys", &json!({ "tenant": "beta" }));
    if own.status != 201 {
        failures.push(format!("beta's admin cannot mint a beta key: {}", own.text));
    }
    assert!(
        failures.is_empty(),
        "(a tenant's admin key manages every tenant):\n{}",
        failures.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// Quotas.

#[test]
fn fifty_concurrent_creations_against_a_quota_of_ten_fail_cleanly_and_in_order() {
    const WAIT: f64 = 3.0;
    let server = TestServer::start();
    tenant(
        &server,
        "burst",
        json!({ "max_sandboxes": 10, "wait_seconds": WAIT }),
    );
    let (k, _) = new_key(&server, "burst", false);
    let who = As::key(&server, &k);

    // 50 at once.
    let start = Instant::now();
    let results: Vec<(Resp, Duration)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..50)
            .map(|_| {
                let who = &who;
                s.spawn(move || {
                    let t = Instant::now();
                    let r = who.post("/v1/sandboxes", &json!({}));
                    (r, t.elapsed())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let took = start.elapsed();
    let ok: Vec<&(Resp, Duration)> = results.iter().filter(|(r, _)| r.status == 201).collect();
    let refused: Vec<&(Resp, Duration)> = results.iter().filter(|(r, _)| r.status != 201).collect();
    assert_eq!(
        (ok.len(), refused.len()),
        (10, 40),
        "statuses: {:?}",
        results
            .iter()
            .map(|(r, _)| (r.status, r.code().to_owned()))
            .collect::<Vec<_>>()
    );
    for (r, t) in &refused {
        // Every refusal names the quota that was full (`max_sandboxes`).
        let retry = assert_quota(r, "sandboxes");
        assert!((1..=60).contains(&retry), "{retry}");
        // Each waited its bound, and no longer than it plus slack for two busy cores.
        assert!(
            t.as_secs_f64() >= WAIT - 0.25 && t.as_secs_f64() <= WAIT + 15.0,
            "refused after {t:?}"
        );
    }
    eprintln!("50 creations against 10: {took:?}");
    assert!(took < Duration::from_secs(90), "{took:?}");
    assert_eq!(live(&who).len(), 10);

    // Waiters are admitted in arrival order as room appears.
    set_quotas(
        &server,
        "burst",
        json!({ "max_sandboxes": 10, "wait_seconds": 60 }),
    );
    let mut ids = live(&who);
    let order: Arc<Mutex<Vec<usize>>> = Arc::new(Mutex::new(Vec::new()));
    std::thread::scope(|s| {
        let mut handles = Vec::new();
        for i in 0..5 {
            let who = &who;
            let order = order.clone();
            handles.push(s.spawn(move || {
                let r = who.post("/v1/sandboxes", &json!({}));
                order.lock().unwrap().push(i);
                r
            }));
            // Arrivals well apart, so the line's order is known.
            std::thread::sleep(Duration::from_millis(300));
        }
        std::thread::sleep(Duration::from_millis(500));
        assert!(
            order.lock().unwrap().is_empty(),
            "a waiter got in over quota"
        );
        for n in 1..=5 {
            let id = ids.pop().unwrap();
            who.delete(&format!("/v1/sandboxes/{id}")).expect(204);
            // One room, one admission: the next in line, and no one else.
            assert!(
                common::wait_until(Duration::from_secs(30), || order.lock().unwrap().len() == n),
                "after {n} deletes: {:?}",
                order.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(300));
            assert_eq!(order.lock().unwrap().len(), n, "two admitted for one room");
        }
        for h in handles {
            h.join().unwrap().expect(201);
        }
    });
    assert_eq!(
        *order.lock().unwrap(),
        vec![0, 1, 2, 3, 4],
        "not in arrival order"
    );

    // Usage is exact after deletes: free everything, then the whole quota again, at once.
    for id in live(&who) {
        who.delete(&format!("/v1/sandboxes/{id}")).expect(204);
    }
    assert!(live(&who).is_empty());
    set_quotas(
        &server,
        "burst",
        json!({ "max_sandboxes": 10, "wait_seconds": 1 }),
    );
    let statuses: Vec<u16> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..10)
            .map(|_| {
                let who = &who;
                s.spawn(move || who.post("/v1/sandboxes", &json!({})).status)
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(statuses, vec![201; 10]);
    assert_quota(&who.post("/v1/sandboxes", &json!({})), "max_sandboxes");
    // Another tenant is not affected by this one's full quota.
    server.post("/v1/sandboxes", &json!({})).expect(201);
}

#[test]
fn quota_usage_survives_killed_processes_and_server_crashes() {
    let mut server = TestServer::start();
    tenant(
        &server,
        "crashy",
        json!({ "max_sandboxes": 3, "wait_seconds": 0.5 }),
    );
    let (k, _) = new_key(&server, "crashy", false);
    let (k_revoked, k_revoked_id) = new_key(&server, "crashy", false);
    let ids: Vec<String> = {
        let who = As::key(&server, &k);
        (0..3).map(|_| who.sandbox(&json!({}))).collect()
    };
    {
        let who = As::key(&server, &k);
        assert_quota(&who.post("/v1/sandboxes", &json!({})), "max_sandboxes");

        // A sandbox whose processes are SIGKILLed restarts in place: still counted.
        let n = kill_sandbox_processes(&server, &ids[0]);
        assert!(n > 0, "no processes found for {}", ids[0]);
        assert_quota(&who.post("/v1/sandboxes", &json!({})), "max_sandboxes");
        let r = who.post(
            &format!("/v1/sandboxes/{}/execute", ids[0]),
            &json!({ "code": "1 + 1" }),
        );
        // The first call after the kill may report the crash; the sandbox runs again after.
        if r.body["end_state"] != "ok" {
            let again = who.post(
                &format!("/v1/sandboxes/{}/execute", ids[0]),
                &json!({ "code": "1 + 1" }),
            );
            assert_eq!(again.expect(200)["end_state"], "ok", "{}", again.text);
        }
        assert_eq!(live(&who).len(), 3);
        assert_quota(&who.post("/v1/sandboxes", &json!({})), "max_sandboxes");
        // Deleting it frees its room.
        who.delete(&format!("/v1/sandboxes/{}", ids[0])).expect(204);
        let replacement = who.sandbox(&json!({}));
        assert_quota(&who.post("/v1/sandboxes", &json!({})), "max_sandboxes");
        server
            .delete(&format!("/v1/keys/{k_revoked_id}"))
            .expect(200);
        let _ = replacement;
    }

    // A crash: the server is SIGKILLed and started again on the same data dir.
    server.kill9();
    server.restart();
    let who = As::key(&server, &k);
    let after = live(&who);
    assert_eq!(after.len(), 3, "{after:?}");
    // Stopped sandboxes still count.
    assert_quota(&who.post("/v1/sandboxes", &json!({})), "max_sandboxes");
    // Keys, tenants and revocations survived too.
    assert_401(
        &As::key(&server, &k_revoked).get("/v1/whoami"),
        "revoked before the crash",
    );
    let t = server.get("/v1/tenants/crashy").expect(200).clone();
    assert_eq!(t["quotas"]["max_sandboxes"], 3, "{t}");
    // Deleting them frees the quota, exactly.
    for id in &after {
        who.delete(&format!("/v1/sandboxes/{id}")).expect(204);
    }
    for _ in 0..3 {
        who.sandbox(&json!({}));
    }
    assert_quota(&who.post("/v1/sandboxes", &json!({})), "max_sandboxes");
}

#[test]
fn memory_cpu_and_rate_quotas() {
    let server = TestServer::start();
    // The server's default limits, from a sandbox of the (unlimited) local tenant.
    let probe = server.create_sandbox_with(&json!({}));
    let mem = probe["limits"]["memory_mb"].as_u64().unwrap();
    let cpu = probe["limits"]["cpu_millis"].as_u64().unwrap();
    server
        .delete(&format!("/v1/sandboxes/{}", probe["id"].as_str().unwrap()))
        .expect(204);

    // Memory: two default sandboxes fit, a third waits then fails naming the quota.
    tenant(
        &server,
        "mem",
        json!({ "max_memory_mb": 2 * mem, "wait_seconds": 1 }),
    );
    let (k, _) = new_key(&server, "mem", false);
    let m = As::key(&server, &k);
    let s1 = m.sandbox(&json!({}));
    m.sandbox(&json!({}));
    let t = Instant::now();
    assert_quota(&m.post("/v1/sandboxes", &json!({})), "max_memory_mb");
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
    // A paused sandbox holds nothing; resuming it needs room again.
    m.post(&format!("/v1/sandboxes/{s1}/pause"), &json!({}))
        .expect(200);
    let s3 = m.sandbox(&json!({}));
    assert_quota(
        &m.post(&format!("/v1/sandboxes/{s1}/resume"), &json!({})),
        "max_memory_mb",
    );
    m.delete(&format!("/v1/sandboxes/{s3}")).expect(204);
    m.post(&format!("/v1/sandboxes/{s1}/resume"), &json!({}))
        .expect(200);
    // A smaller sandbox fits where a default one does not.
    m.delete(&format!("/v1/sandboxes/{s1}")).expect(204);
    m.sandbox(&json!({ "limits": { "memory_mb": mem / 2 } }));
    m.sandbox(&json!({ "limits": { "memory_mb": mem / 2 } }));
    assert_quota(
        &m.post(
            "/v1/sandboxes",
            &json!({ "limits": { "memory_mb": mem / 2 } }),
        ),
        "max_memory_mb",
    );

    // CPU, and forks count as the sandboxes they create.
    tenant(
        &server,
        "cpu",
        json!({ "max_cpu_millis": 2 * cpu, "wait_seconds": 1 }),
    );
    let (k, _) = new_key(&server, "cpu", false);
    let c = As::key(&server, &k);
    let parent = c.sandbox(&json!({}));
    let t = Instant::now();
    let r = c.post(
        &format!("/v1/sandboxes/{parent}/fork"),
        &json!({ "count": 3 }),
    );
    assert_never_fits(&r, "max_cpu_millis");
    assert!(
        t.elapsed() < Duration::from_millis(900),
        "a fork larger than the quota waited"
    );
    c.post(
        &format!("/v1/sandboxes/{parent}/fork"),
        &json!({ "count": 1 }),
    )
    .expect(201);
    assert_quota(&c.post("/v1/sandboxes", &json!({})), "max_cpu_millis");
    assert_quota(
        &c.post(&format!("/v1/sandboxes/{parent}/fork"), &json!({})),
        "max_cpu_millis",
    );

    // A request larger than the whole quota fails at once, whatever the wait.
    tenant(
        &server,
        "tiny",
        json!({ "max_memory_mb": mem / 2, "wait_seconds": 30 }),
    );
    let (k, _) = new_key(&server, "tiny", false);
    let tiny = As::key(&server, &k);
    let t = Instant::now();
    let r = tiny.post("/v1/sandboxes", &json!({}));
    assert_never_fits(&r, "max_memory_mb");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert!(live(&tiny).is_empty());
    tiny.sandbox(&json!({ "limits": { "memory_mb": mem / 2 } }));

    // Creations per second: a burst of one, then one per second.
    tenant(
        &server,
        "rate",
        json!({ "creates_per_second": 0.2, "wait_seconds": 0 }),
    );
    let (k, _) = new_key(&server, "rate", false);
    let rate = As::key(&server, &k);
    // One token every 5 s, a burst of one.
    let t0 = Instant::now();
    rate.sandbox(&json!({}));
    let r = rate.post("/v1/sandboxes", &json!({}));
    if t0.elapsed() < Duration::from_secs(4) {
        let retry = assert_quota(&r, "creates_per_second");
        assert!((1..=5).contains(&retry), "{retry}");
    }
    std::thread::sleep(Duration::from_millis(5500).saturating_sub(t0.elapsed()));
    rate.sandbox(&json!({}));
    // With a wait, a creation waits for its token instead of failing.
    set_quotas(
        &server,
        "rate",
        json!({ "creates_per_second": 0.2, "wait_seconds": 10 }),
    );
    let t = Instant::now();
    rate.sandbox(&json!({}));
    assert!(
        t.elapsed() >= Duration::from_secs(1),
        "did not wait for a token: {:?}",
        t.elapsed()
    );
}

// ---------------------------------------------------------------------------------------------
// Bad input.

#[test]
fn bad_tenants_quotas_and_keys_are_refused_clearly() {
    let server = TestServer::start();
    tenant(&server, "ok", json!({ "max_sandboxes": 2 }));
    let (k, _) = new_key(&server, "ok", false);
    let before = server.get("/v1/tenants").expect(200).clone();

    let long = "a".repeat(49);
    let huge = "a".repeat(1 << 20);
    for name in [
        "", "Upper", "-lead", "_lead", "a b", "../x", "a/b", "ä", "x\u{0}", "a.b", &long, &huge,
    ] {
        let r = server.post("/v1/tenants", &json!({ "name": name }));
        assert!(
            r.status == 400 || r.status == 413,
            "tenant name {:?}: {} {}",
            name.chars().take(20).collect::<String>(),
            r.status,
            r.text.chars().take(300).collect::<String>()
        );
        if r.status == 400 {
            r.expect_error(400, r.code());
            assert!(
                r.message().contains("name") || r.code() == "invalid_request",
                "{}",
                r.text
            );
        }
    }
    let bad_quotas = [
        (json!({ "max_sandboxes": -1 }), "max_sandboxes"),
        (json!({ "max_sandboxes": 1.5 }), "max_sandboxes"),
        (json!({ "max_sandboxes": "10" }), "max_sandboxes"),
        (json!({ "max_memory_mb": -512 }), "max_memory_mb"),
        (json!({ "creates_per_second": -1 }), "creates_per_second"),
        (json!({ "creates_per_second": 0 }), "creates_per_second"),
        (json!({ "creates_per_second": 1e7 }), "creates_per_second"),
        (json!({ "wait_seconds": 301 }), "wait_seconds"),
        (json!({ "wait_seconds": -1 }), "wait_seconds"),
        (json!({ "max_sandbox": 1 }), "max_sandbox"),
    ];
    for (q, field) in &bad_quotas {
        for r in [
            server.post("/v1/tenants", &json!({ "name": "new", "quotas": q })),
            server.send_put("/v1/tenants/ok", &json!({ "quotas": q })),
        ] {
            assert_eq!(r.status, 400, "{q}: {}", r.text);
            assert!(
                ["invalid_argument", "invalid_request"].contains(&r.code()),
                "{q}: {}",
                r.text
            );
            // Semantic errors name the field; JSON type errors may give only its position.
            assert!(
                r.message().contains(field) || r.code() == "invalid_request",
                "{q}: should name {field}: {}",
                r.text
            );
        }
    }
    // NaN and infinity are not JSON: refused as malformed bodies.
    for raw in [
        r#"{"name": "new", "quotas": {"creates_per_second": NaN}}"#,
        r#"{"name": "new", "quotas": {"wait_seconds": Infinity}}"#,
        r#"{"name": "new", "quotas": {"wait_seconds": 1e999}}"#,
        r#"{"name": "new""#,
    ] {
        let r = server.post_raw("/v1/tenants", "application/json", raw);
        assert_eq!(r.status, 400, "{raw}: {}", r.text);
    }
    // Plans are words.
    for plan in ["", "a b", "x\n", &long] {
        let r = server.post("/v1/tenants", &json!({ "name": "new", "plan": plan }));
        r.expect_error(400, "invalid_argument");
    }
    // Renaming through PUT is refused; updating a tenant that does not exist too.
    server
        .send_put("/v1/tenants/ok", &json!({ "name": "other" }))
        .expect_error(400, "invalid_argument");
    server
        .send_put("/v1/tenants/nope", &json!({ "plan": "x" }))
        .expect_error(404, "tenant_not_found");
    server
        .post("/v1/tenants", &json!({ "name": "ok" }))
        .expect_error(409, "name_taken");

    // Keys: unknown tenant, bad role, oversized or control-character names, unknown fields.
    server
        .post("/v1/keys", &json!({ "tenant": "nope" }))
        .expect_error(404, "tenant_not_found");
    server
        .post("/v1/keys", &json!({ "tenant": "../ok" }))
        .expect_error(404, "tenant_not_found");
    for body in [
        json!({ "tenant": "ok", "role": "superuser" }),
        json!({ "tenant": "ok", "role": "ADMIN" }),
        json!({ "tenant": "ok", "name": "n".repeat(129) }),
        json!({ "tenant": "ok", "name": "a\nb" }),
        json!({ "tenant": "ok", "sha256": "00" }),
        json!({ "tenant": "ok", "key": format!("sl_aaaaaaaa_{}", "a".repeat(32)) }),
        json!({}),
    ] {
        let r = server.post("/v1/keys", &body);
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        assert!(!r.message().is_empty());
    }
    // Ids of every shape: not found, never a crash.
    for id in ["key_nope", "x", &"k".repeat(5000), "..%2F..%2Fetc"] {
        let r = server.delete(&format!("/v1/keys/{id}"));
        assert_eq!(r.status, 404, "{}", r.text);
    }

    // Nothing else was affected: the tenants are as they were, the key still works.
    assert_eq!(server.get("/v1/tenants").expect(200), &before);
    assert_eq!(
        As::key(&server, &k).get("/v1/whoami").expect(200)["tenant"],
        "ok"
    );
    // A tenant with odd but valid values works.
    tenant(
        &server,
        "z9_-",
        json!({ "max_sandboxes": 0, "wait_seconds": 0 }),
    );
    let (kz, _) = new_key(&server, "z9_-", false);
    let r = As::key(&server, &kz).post("/v1/sandboxes", &json!({}));
    assert_never_fits(&r, "max_sandboxes");
}

// ---------------------------------------------------------------------------------------------
// The command line.

#[test]
fn the_cli_manages_keys_and_tenants() {
    let server = TestServer::start();
    let admin = server.key().to_owned();

    let o = cli(
        &server,
        &admin,
        &[
            "tenants",
            "create",
            "acme",
            "--plan",
            "team",
            "--max-sandboxes",
            "3",
            "--wait-seconds",
            "2",
            "--max-memory-mb",
            "4096",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("acme"), "{}", stdout(&o));
    let t = server.get("/v1/tenants/acme").expect(200).clone();
    assert_eq!(t["plan"], "team");
    assert_eq!(
        t["quotas"],
        json!({ "max_sandboxes": 3, "wait_seconds": 2.0, "max_memory_mb": 4096 })
    );

    // `set` changes the flags given and keeps the rest; `unlimited` removes one.
    let o = cli(
        &server,
        &admin,
        &[
            "tenants",
            "set",
            "acme",
            "--max-sandboxes",
            "5",
            "--max-memory-mb",
            "unlimited",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let t: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        t["quotas"],
        json!({ "max_sandboxes": 5, "wait_seconds": 2.0 }),
        "{t}"
    );
    assert_eq!(t["plan"], "team");
    assert_eq!(
        server.get("/v1/tenants/acme").expect(200)["quotas"]["max_sandboxes"],
        5
    );
    let o = cli(
        &server,
        &admin,
        &["tenants", "set", "acme", "--plan", "pro"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        server.get("/v1/tenants/acme").expect(200)["quotas"]["max_sandboxes"],
        5,
        "a plan change kept the quotas"
    );

    let o = cli(&server, &admin, &["tenants", "list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("NAME"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("acme ") && l.contains("pro")),
        "{out}"
    );
    assert!(out.lines().any(|l| l.starts_with("default ")), "{out}");
    let o = cli(&server, &admin, &["tenants", "list", "--json"]);
    let list: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 2, "{list}");

    // A key: printed once, alone on stdout; the record on stderr.
    let o = cli(
        &server,
        &admin,
        &["keys", "create", "--tenant", "acme", "--name", "ci bot"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let key = stdout(&o).trim().to_owned();
    assert!(key.starts_with("sl_") && !key.contains('\n'), "{key:?}");
    assert!(stderr(&o).contains("not shown again"), "{}", stderr(&o));
    let me = As::key(&server, &key).get("/v1/whoami").expect(200).clone();
    assert_eq!(
        (me["tenant"].as_str(), me["role"].as_str()),
        (Some("acme"), Some("member"))
    );
    let key_id = me["key_id"].as_str().unwrap().to_owned();
    assert!(stderr(&o).contains(&key_id), "{}", stderr(&o));

    let o = cli(
        &server,
        &admin,
        &["keys", "create", "--tenant", "acme", "--admin", "--json"],
    );
    let created: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(created["role"], "admin");
    assert!(created["key"]
        .as_str()
        .unwrap()
        .starts_with(created["prefix"].as_str().unwrap()));

    let o = cli(&server, &admin, &["keys", "list", "--tenant", "acme"]);
    let out = stdout(&o);
    assert!(out.starts_with("ID"), "{out}");
    assert!(out.contains(&key_id) && out.contains("ci bot"), "{out}");
    assert!(!out.contains(&key) && !out.contains("default"), "{out}");
    let o = cli(&server, &admin, &["keys", "list", "--json"]);
    let keys: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(keys.as_array().unwrap().len(), 3, "{keys}");
    // A member lists its own tenant's keys through the same command.
    let o = cli(&server, &key, &["keys", "list", "--json"]);
    let keys: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        keys.as_array()
            .unwrap()
            .iter()
            .all(|k| k["tenant"] == "acme"),
        "{keys}"
    );

    // Errors: the server's code and message, exit status 1.
    let o = cli(&server, &key, &["tenants", "list"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("forbidden"), "{}", stderr(&o));
    let o = cli(&server, &admin, &["keys", "create", "--tenant", "nope"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("tenant_not_found"), "{}", stderr(&o));
    assert!(stdout(&o).is_empty());
    let o = cli(&server, &admin, &["tenants", "set", "nope", "--plan", "x"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("tenant_not_found"), "{}", stderr(&o));
    let o = cli(&server, &admin, &["tenants", "create", "Bad Name"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("invalid_argument"), "{}", stderr(&o));
    let o = cli(
        &server,
        &admin,
        &["tenants", "set", "acme", "--wait-seconds", "301"],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("wait_seconds"), "{}", stderr(&o));
    // NaN cannot be sent as JSON: refused on the command line (usage error), not lifted.
    for bad in ["NaN", "inf", "-1"] {
        let o = cli(
            &server,
            &admin,
            &["tenants", "set", "acme", "--creates-per-second", bad],
        );
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", stderr(&o));
    }
    let o = cli(&server, &admin, &["tenants", "set", "acme"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("nothing to change"), "{}", stderr(&o));
    let o = cli(
        &server,
        "sl_aaaaaaaa_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        &["keys", "list"],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("unauthenticated"), "{}", stderr(&o));
    assert_eq!(
        server.get("/v1/tenants/acme").expect(200)["quotas"]["max_sandboxes"],
        5
    );

    // Revoke: refused from the next request on; an unknown id fails the command.
    let o = cli(&server, &admin, &["keys", "revoke", &key_id]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains(&key_id));
    assert_401(
        &As::key(&server, &key).get("/v1/whoami"),
        "revoked by the CLI",
    );
    let o = cli(&server, &admin, &["keys", "revoke", "key_nope", "../keys"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("key_not_found"), "{}", stderr(&o));
    let o = cli(
        &server,
        &admin,
        &["keys", "list", "--tenant", "acme", "--json"],
    );
    let keys: Value = serde_json::from_slice(&o.stdout).unwrap();
    let revoked = keys
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["id"] == key_id.as_str())
        .unwrap();
    assert!(revoked["revoked_at"].is_string(), "{revoked}");
}

/// Reads `resp` to its end on a thread; the receiver gets the moment it ended.
fn read_to_end(resp: reqwest::blocking::Response) -> std::sync::mpsc::Receiver<Instant> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::Read;
        let mut resp = resp;
        let mut buf = [0u8; 4096];
        while matches!(resp.read(&mut buf), Ok(n) if n > 0) {}
        let _ = tx.send(Instant::now());
    });
    rx
}

/// A key that is revoked stops working at once, also for what it already opened: its event
/// stream and its MCP stream end within moments of the revocation instead of running on.
/// Regression: both were still delivering 8 s after `sandlot keys revoke`.
#[test]
fn revoking_a_key_ends_its_open_streams() {
    let server = TestServer::start();
    tenant(&server, "gamma", json!({}));
    let (key, key_id) = new_key(&server, "gamma", false);
    // Streams never time out on their own here: only the revocation can end them.
    let http = Client::builder().timeout(None::<Duration>).build().unwrap();
    let events = http
        .get(format!("{}/v1/events", server.url()))
        .bearer_auth(&key)
        .send()
        .unwrap();
    assert_eq!(events.status(), 200);
    let events_ended = read_to_end(events);

    let mcp = |session: Option<&str>, body: Value| {
        let mut req = http
            .post(format!("{}/mcp", server.url()))
            .bearer_auth(&key)
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
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "revocation-test", "version": "0"}}}),
    );
    let session = init.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let _ = init.text();
    let _ = mcp(
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .text();
    let stream = http
        .get(format!("{}/mcp", server.url()))
        .bearer_auth(&key)
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .header("mcp-session-id", &session)
        .send()
        .unwrap();
    assert_eq!(stream.status(), 200, "the MCP stream opens");
    let mcp_ended = read_to_end(stream);

    // Both are open and stay open while the key is valid.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        events_ended.try_recv().is_err(),
        "the event stream ended early"
    );
    assert!(mcp_ended.try_recv().is_err(), "the MCP stream ended early");

    server.delete(&format!("/v1/keys/{key_id}")).expect(200);
    let revoked_at = Instant::now();
    for (what, ended) in [("event", events_ended), ("MCP", mcp_ended)] {
        let at = ended
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("the {what} stream is still open 10 s after revocation"));
        eprintln!(
            "{what} stream ended {:?} after the revocation",
            at.saturating_duration_since(revoked_at)
        );
    }
    // And a new request with the key is refused.
    let r = http
        .get(format!("{}/v1/sandboxes", server.url()))
        .bearer_auth(&key)
        .send()
        .unwrap();
    assert_eq!(r.status(), 401);
}
