//! Holds everywhere (issue 23), against a real `sandlot serve`: a `@review` permit holds a
//! creation (`create_sandbox`/`select_tier`), a fork, a resume and a template build on REST
//! with execute's contract (202 + `?review=` re-submission, or `?review_wait=`), released
//! once after approval, never run when denied, and a re-submission of another request
//! naming the review is 400; E2B's control plane and code interpreter and MCP's tools, whose
//! clients cannot poll, wait then answer `review_pending` naming the review, and the
//! identical retry after approval is released once (no id needed; another key's retry is
//! not); review events (`review.created`, `review.decided`) reach the tenant's
//! `GET /v1/events` and no other tenant's.

use crate::common;

use common::{As, Resp, TestServer};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The shipped set plus: sandboxes of 200 MB, templates named `held*`, code that says
/// `held-marker`, every creation of tenant `e2bt`, and releasing output with a GitHub token
/// need a person.
fn hold_policies() -> String {
    format!(
        "{}\n@id(\"review-200mb\")\n@review(\"a 200 MB sandbox needs a person\")\n\
         permit (principal, action == Sandlot::Action::\"create_sandbox\", resource)\n\
         when {{ context.memory_mb == 200 }};\n\
         @id(\"review-held-templates\")\n@review(\"held templates need a person\")\n\
         permit (principal, action == Sandlot::Action::\"build_template\", resource)\n\
         when {{ resource.name like \"held*\" }};\n\
         @id(\"review-marker\")\n@review(\"marked code needs a person\")\n\
         permit (principal, action == Sandlot::Action::\"execute\", resource)\n\
         when {{ context.code like \"*held-marker*\" }};\n\
         @id(\"review-e2bt\")\n@review(\"e2bt's sandboxes need a person\")\n\
         permit (principal, action == Sandlot::Action::\"create_sandbox\", resource)\n\
         when {{ principal in Sandlot::Tenant::\"e2bt\" }};\n\
         @id(\"review-release\")\n@review(\"a token in output is released only after a person looks\")\n\
         permit (principal, action == Sandlot::Action::\"output_withhold\", resource)\n\
         when {{ context.rule == \"github-token\" }};\n",
        sandlot_policy::DEFAULT_POLICIES
    )
}

fn governed(env: &[(&str, &str)]) -> TestServer {
    let mut all = vec![("SANDLOT_POOL_SIZE", "1")];
    all.extend_from_slice(env);
    let server = TestServer::start_with_env(&all);
    server
        .client()
        .put(format!("{}/v1/policies", server.url()))
        .header("content-type", "text/plain")
        .body(hold_policies())
        .send()
        .unwrap()
        .error_for_status()
        .unwrap();
    server
}

/// Another key of tenant `tenant` (made with the operator's key).
fn key_of(server: &TestServer, tenant: &str, role: &str) -> (String, String) {
    let r = server.post("/v1/keys", &json!({"tenant": tenant, "role": role}));
    let b = r.expect(201);
    (
        b["key"].as_str().unwrap().to_owned(),
        b["id"].as_str().unwrap().to_owned(),
    )
}

fn decide(who: &As<'_>, id: &str, verb: &str, reason: &str) -> Resp {
    who.post(
        &format!("/v1/reviews/{id}/{verb}"),
        &json!({"reason": reason}),
    )
}

/// The ids of `who`'s tenant's live sandboxes.
fn sandboxes(who: &As<'_>) -> Vec<String> {
    who.get("/v1/sandboxes").expect(200)["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect()
}

/// The reviews of `who`'s tenant in state `state`.
fn reviews(who: &As<'_>, state: &str) -> Vec<Value> {
    who.get(&format!("/v1/reviews?state={state}&limit=1000"))
        .expect(200)["reviews"]
        .as_array()
        .unwrap()
        .clone()
}

/// Waits until `who`'s tenant has `n` pending reviews.
#[track_caller]
fn pending(who: &As<'_>, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let list = reviews(who, "pending");
        if list.len() >= n {
            return list;
        }
        assert!(Instant::now() < deadline, "{} of {n} pending", list.len());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A 202 with a pending review; its id.
#[track_caller]
fn held(r: &Resp, gate: &str) -> String {
    let b = r.expect(202);
    common::assert_schema("ReviewBody", b);
    assert_eq!(b["review"]["state"], "pending", "{b}");
    assert_eq!(b["review"]["gate"], gate, "{b}");
    b["review"]["id"].as_str().unwrap().to_owned()
}

/// The events of an SSE response, read on a thread: (event, data).
struct Events {
    rx: mpsc::Receiver<(String, Value)>,
}

impl Events {
    fn open(who: &As<'_>, query: &str) -> Events {
        let resp = who
            .http
            .get(who.url(&format!("/v1/events{query}")))
            .send()
            .expect("GET events");
        assert_eq!(resp.status().as_u16(), 200);
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let (mut name, mut data) = (String::new(), String::new());
            for line in BufReader::new(resp).lines() {
                let Ok(line) = line else { return };
                if let Some(v) = line.strip_prefix("event:") {
                    name = v.trim().to_owned();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim_start());
                } else if line.is_empty() && !name.is_empty() {
                    let v = serde_json::from_str(&data).unwrap_or(Value::Null);
                    if tx.send((std::mem::take(&mut name), v)).is_err() {
                        return;
                    }
                    data.clear();
                }
            }
        });
        Events { rx }
    }

    /// Every event that arrives within `quiet` of the previous one.
    fn drain(&self, quiet: Duration) -> Vec<(String, Value)> {
        let mut out = Vec::new();
        while let Ok(e) = self.rx.recv_timeout(quiet) {
            out.push(e);
        }
        out
    }
}

#[test]
fn held_creation_fork_resume_and_build_run_once_when_approved_never_when_denied() {
    let server = governed(&[]);
    let asker = server.tenant("acme").role("admin").create();
    let (approver_key, approver_id) = key_of(&server, "acme", "admin");
    let beta_key = server.tenant("beta").role("admin").key();
    let a = As::key(&server, &asker.key);
    let approver = As::key(&server, &approver_key);
    let beta = As::key(&server, &beta_key);
    // Review events: the tenant's stream sees its reviews; another tenant's sees none.
    let acme_events = Events::open(&approver, "?kinds=review.created,review.decided");
    let beta_events = Events::open(&beta, "");
    beta.get("/v1/events?kinds=review.nope")
        .expect_error(400, "invalid_argument");

    let big = json!({"limits": {"memory_mb": 200}});
    // --- create: 202 at once, nothing made.
    let r = a.post("/v1/sandboxes", &big);
    let rid = held(&r, "create_sandbox");
    let review = &r.body["review"];
    assert_eq!(review["request"]["limits"]["memory_mb"], 200, "{review}");
    assert_eq!(review["request"]["template"], "default", "{review}");
    assert_eq!(review["request"]["action"], "create", "{review}");
    assert!(review["request"]["network"].is_array(), "{review}");
    assert_eq!(review["policies"], json!(["review-200mb"]));
    assert!(sandboxes(&a).is_empty());
    // Unheld creations are not held.
    let plain = a.post("/v1/sandboxes", &json!({})).expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(sandboxes(&a), vec![plain.clone()]);
    // Another request naming the review: 400, nothing made, the review still pending.
    a.post(
        &format!("/v1/sandboxes?review={rid}"),
        &json!({"limits": {"memory_mb": 200}, "ports": [8080]}),
    )
    .expect_error(400, "invalid_argument");
    a.post("/v1/sandboxes?review_wait=301", &big)
        .expect_error(400, "invalid_argument");
    // Another tenant cannot re-submit it (not found, as if absent).
    beta.post(&format!("/v1/sandboxes?review={rid}"), &big)
        .expect_error(404, "review_not_found");
    // Still pending: the same review again.
    let r = a.post(&format!("/v1/sandboxes?review={rid}"), &big);
    assert_eq!(held(&r, "create_sandbox"), rid);
    assert_eq!(sandboxes(&a).len(), 1);
    // Approved: the re-submission runs once.
    decide(&approver, &rid, "approve", "fine").expect(200);
    let sb = a
        .post(&format!("/v1/sandboxes?review={rid}"), &big)
        .expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    a.post(&format!("/v1/sandboxes?review={rid}"), &big)
        .expect_error(409, "review_decided");
    assert_eq!(sandboxes(&a).len(), 2);
    // Denied: refused with the reason; nothing made.
    let did = held(&a.post("/v1/sandboxes", &big), "create_sandbox");
    decide(&approver, &did, "deny", "too big today").expect(200);
    let r = a.post(&format!("/v1/sandboxes?review={did}"), &big);
    r.expect_error(403, "review_denied");
    assert!(r.message().contains("too big today"), "{}", r.text);
    assert_eq!(sandboxes(&a).len(), 2);

    // --- fork of the 200 MB sandbox: held as its creation is; a caller that waits.
    let waiting = {
        let (url, key) = (
            a.url(&format!("/v1/sandboxes/{sb}/fork?review_wait=120")),
            asker.key.clone(),
        );
        std::thread::spawn(move || {
            let c = common::client_builder().build().unwrap();
            let r = c
                .post(url)
                .bearer_auth(key)
                .json(&json!({"count": 1}))
                .send()
                .unwrap();
            (
                r.status().as_u16(),
                r.json::<Value>().unwrap_or(Value::Null),
            )
        })
    };
    let fork_review = pending(&approver, 1)[0].clone();
    assert_eq!(fork_review["request"]["action"], "fork", "{fork_review}");
    assert_eq!(fork_review["request"]["source"], sb.as_str());
    let fid = fork_review["id"].as_str().unwrap().to_owned();
    // Not the creation's review: another action.
    a.post(
        &format!("/v1/sandboxes/{sb}/fork?review={rid}"),
        &json!({"count": 1}),
    )
    .expect_error(400, "invalid_argument");
    assert_eq!(sandboxes(&a).len(), 2);
    decide(&approver, &fid, "approve", "ok").expect(200);
    let (status, body) = waiting.join().unwrap();
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["sandboxes"].as_array().unwrap().len(), 1, "{body}");
    assert_eq!(sandboxes(&a).len(), 3);
    // A denied fork makes no child.
    let r = a.post(&format!("/v1/sandboxes/{sb}/fork"), &json!({"count": 2}));
    let fd = held(&r, "create_sandbox");
    decide(&approver, &fd, "deny", "no").expect(200);
    a.post(
        &format!("/v1/sandboxes/{sb}/fork?review={fd}"),
        &json!({"count": 2}),
    )
    .expect_error(403, "review_denied");
    assert_eq!(sandboxes(&a).len(), 3);

    // --- resume: pausing is not held; bringing it back is.
    a.post(&format!("/v1/sandboxes/{sb}/pause"), &json!({}))
        .expect(200);
    let r = a.post(&format!("/v1/sandboxes/{sb}/resume"), &json!({}));
    let res = held(&r, "create_sandbox");
    assert_eq!(r.body["review"]["request"]["action"], "resume");
    let state = |id: &str| a.get(&format!("/v1/sandboxes/{id}")).expect(200)["state"].clone();
    assert_eq!(state(&sb), "paused");
    decide(&approver, &res, "approve", "ok").expect(200);
    let r = a.post(
        &format!("/v1/sandboxes/{sb}/resume?review={res}"),
        &json!({}),
    );
    assert_eq!(r.expect(200)["state"], "running");

    // --- build_template: held with its spec shown; denied → no template.
    let spec = json!({"name": "heldtpl", "imports": ["json"]});
    let r = a.post("/v1/templates", &spec);
    let tid = held(&r, "build_template");
    assert_eq!(r.body["review"]["request"]["template"], "heldtpl");
    assert_eq!(r.body["review"]["request"]["imports"], json!(["json"]));
    a.get("/v1/templates/heldtpl")
        .expect_error(404, "template_not_found");
    a.post(
        &format!("/v1/templates?review={tid}"),
        &json!({"name": "heldtpl", "imports": ["os"]}),
    )
    .expect_error(400, "invalid_argument");
    decide(&approver, &tid, "approve", "ok").expect(200);
    let r = a.post(&format!("/v1/templates?review={tid}"), &spec);
    assert_eq!(r.expect(202)["name"], "heldtpl", "{}", r.text);
    a.get("/v1/templates/heldtpl").expect(200);
    let r = a.post("/v1/templates", &json!({"name": "heldtpl2"}));
    let td = held(&r, "build_template");
    decide(&approver, &td, "deny", "no").expect(200);
    a.post(
        &format!("/v1/templates?review={td}"),
        &json!({"name": "heldtpl2"}),
    )
    .expect_error(403, "review_denied");
    a.get("/v1/templates/heldtpl2")
        .expect_error(404, "template_not_found");

    // --- the review events: created and decided for each, the tenant's only.
    let got = acme_events.drain(Duration::from_secs(2));
    let created: Vec<&Value> = got
        .iter()
        .filter(|(k, _)| k == "review.created")
        .map(|(_, v)| v)
        .collect();
    let decided: Vec<&Value> = got
        .iter()
        .filter(|(k, _)| k == "review.decided")
        .map(|(_, v)| v)
        .collect();
    for id in [&rid, &did, &fid, &fd, &res, &tid, &td] {
        assert!(
            created.iter().any(|v| v["review"] == id.as_str()),
            "review.created of {id}: {got:?}"
        );
        assert!(
            decided.iter().any(|v| v["review"] == id.as_str()),
            "review.decided of {id}: {got:?}"
        );
    }
    let approval = decided
        .iter()
        .find(|v| v["review"] == rid.as_str())
        .unwrap();
    assert_eq!(approval["state"], "approved");
    assert_eq!(approval["by"], approver_id.as_str());
    assert_eq!(approval["reason"], "fine");
    assert_eq!(approval["tenant"], "acme");
    let denial = decided
        .iter()
        .find(|v| v["review"] == did.as_str())
        .unwrap();
    assert_eq!(denial["state"], "denied");
    assert_eq!(denial["reason"], "too big today");
    let leaked: Vec<_> = beta_events
        .drain(Duration::from_millis(500))
        .into_iter()
        .filter(|(k, _)| k.starts_with("review."))
        .collect();
    assert!(
        leaked.is_empty(),
        "another tenant's review events: {leaked:?}"
    );
    // The operator sees every tenant's.
    let all = Events::open(
        &As::key(&server, server.key()),
        "?tenant=*&kinds=review.created",
    );
    a.post("/v1/sandboxes", &big).expect(202);
    let seen = all.drain(Duration::from_secs(2));
    assert!(
        seen.iter()
            .any(|(k, v)| k == "review.created" && v["tenant"] == "acme"),
        "{seen:?}"
    );
}

/// An E2B control-plane or envd request.
fn e2b(
    server: &TestServer,
    key: &str,
    m: reqwest::Method,
    path: &str,
) -> reqwest::blocking::RequestBuilder {
    server
        .client_with_key(None)
        .request(m, format!("{}{path}", server.url()))
        .header("X-API-KEY", key)
}

fn send(req: reqwest::blocking::RequestBuilder) -> (u16, String, Value) {
    let r = req.send().expect("request");
    let status = r.status().as_u16();
    let text = r.text().unwrap_or_default();
    let json = serde_json::from_str(&text).unwrap_or(Value::Null);
    (status, text, json)
}

/// The review id a `review_pending` message names.
fn review_named(text: &str) -> String {
    let at = text
        .find("rev_")
        .unwrap_or_else(|| panic!("no review named: {text}"));
    text[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

#[test]
fn e2b_and_mcp_held_calls_wait_then_are_released_by_the_identical_retry() {
    use reqwest::Method as M;
    // Callers that cannot poll wait a second by default here.
    let server = governed(&[("SANDLOT_REVIEW_WAIT", "1")]);
    let asker = server.tenant("e2bt").role("admin").create();
    let (approver_key, _) = key_of(&server, "e2bt", "admin");
    let (other_key, _) = key_of(&server, "e2bt", "admin");
    let approver = As::key(&server, &approver_key);
    let body = json!({"templateID": "code-interpreter-v1", "timeout": 120});

    // --- E2B create: waits, then 409 review_pending naming the review (E2B's error shape).
    let t0 = Instant::now();
    let (status, text, j) = send(e2b(&server, &asker.key, M::POST, "/sandboxes").json(&body));
    assert_eq!(status, 409, "{text}");
    assert!(t0.elapsed() >= Duration::from_millis(900), "it waited");
    assert_eq!(j["code"], 409, "{text}");
    assert_eq!(j["sandlot_code"], "review_pending", "{text}");
    let rid = review_named(j["message"].as_str().unwrap());
    assert!(j["message"].as_str().unwrap().contains("retry"), "{text}");
    // The identical retry waits on the same review (no second one); the header bounds the wait.
    let (status, _, j) = send(
        e2b(&server, &asker.key, M::POST, "/sandboxes")
            .header("x-sandlot-review-wait", "0")
            .json(&body),
    );
    assert_eq!(status, 409);
    assert_eq!(review_named(j["message"].as_str().unwrap()), rid);
    assert_eq!(pending(&approver, 1).len(), 1);
    let (status, text, _) = send(
        e2b(&server, &asker.key, M::POST, "/sandboxes")
            .header("x-sandlot-review-wait", "301")
            .json(&body),
    );
    assert_eq!(status, 400, "{text}");
    assert!(sandboxes(&approver).is_empty());
    decide(&approver, &rid, "approve", "ok").expect(200);
    // Another key's identical call is not released by this approval: a review of its own.
    let (status, _, j) = send(
        e2b(&server, &other_key, M::POST, "/sandboxes")
            .header("x-sandlot-review-wait", "0")
            .json(&body),
    );
    assert_eq!(status, 409);
    let other_rid = review_named(j["message"].as_str().unwrap());
    assert_ne!(other_rid, rid);
    assert!(sandboxes(&approver).is_empty());
    // The asker's identical retry is released, once.
    let (status, text, j) = send(e2b(&server, &asker.key, M::POST, "/sandboxes").json(&body));
    assert_eq!(status, 201, "{text}");
    let id = j["sandboxID"].as_str().unwrap().to_owned();
    let token = j["envdAccessToken"].as_str().unwrap().to_owned();
    assert_eq!(sandboxes(&approver), vec![id.clone()]);
    let (status, _, j) = send(
        e2b(&server, &asker.key, M::POST, "/sandboxes")
            .header("x-sandlot-review-wait", "0")
            .json(&body),
    );
    assert_eq!(status, 409, "released once: a new review");
    let again = review_named(j["message"].as_str().unwrap());
    assert!(again != rid && again != other_rid);
    // Denied: the retry is refused (403), then asks anew.
    decide(&approver, &again, "deny", "enough").expect(200);
    assert_eq!(sandboxes(&approver).len(), 1);

    // --- E2B run_code: the interpreter's plain-text error names the review.
    let run = |code: &str| {
        send(
            server
                .client_with_key(None)
                .post(format!("{}/execute", server.url()))
                .header("E2b-Sandbox-Id", &id)
                .header("E2b-Sandbox-Port", "49999")
                .header("X-Access-Token", &token)
                .json(&json!({"code": code})),
        )
    };
    let code = "print('held-marker', 6 * 7)";
    let (status, text, _) = run(code);
    assert_eq!(status, 409, "{text}");
    assert!(text.starts_with("review_pending: "), "{text}");
    assert!(!text.contains("42"), "{text}");
    let xid = review_named(&text);
    decide(&approver, &xid, "approve", "ok").expect(200);
    // Different code is not released by it.
    let (status, text, _) = run("print('held-marker', 'other')");
    assert_eq!(status, 409, "{text}");
    assert_ne!(review_named(&text), xid);
    let (status, text, _) = run(code);
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("held-marker 42"), "{text}");
    let (status, text, _) = run(code);
    assert_eq!(status, 409, "released once: {text}");

    // --- MCP: a tool error naming the review; the same call after approval runs.
    let http = server.client_with_key(Some(&asker.key));
    let mcp_url = format!("{}/mcp", server.url());
    let post = |session: Option<&str>, body: Value| {
        let mut req = http
            .post(&mcp_url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2025-06-18");
        if let Some(s) = session {
            req = req.header("mcp-session-id", s);
        }
        let r = req.body(body.to_string()).send().unwrap();
        let sid = r
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_owned());
        let text = r.text().unwrap();
        // JSON, or SSE `data:` lines.
        let msg = serde_json::from_str::<Value>(&text).unwrap_or_else(|_| {
            text.lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
                .find(|v| v.get("id").is_some())
                .unwrap_or(Value::Null)
        });
        (sid, msg)
    };
    let (sid, init) = post(
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "holds-test", "version": "0"}}}),
    );
    assert!(init["result"].is_object(), "{init}");
    let sid = sid.expect("a session id");
    post(
        Some(&sid),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    let call = |n: u64| {
        post(
            Some(&sid),
            json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {
                "name": "run_bash",
                "arguments": {"code": "echo held-marker-mcp", "sandbox_id": id}}}),
        )
        .1
    };
    let tool_text = |v: &Value| -> String {
        v["result"]["content"]
            .as_array()
            .unwrap_or_else(|| panic!("not a tool result: {v}"))
            .iter()
            .filter_map(|c| c["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let first = call(2);
    assert_eq!(first["result"]["isError"], true, "{first}");
    let t = tool_text(&first);
    assert!(t.contains("review_pending"), "{t}");
    let mid = review_named(&t);
    decide(&approver, &mid, "approve", "ok").expect(200);
    let second = call(3);
    assert_ne!(second["result"]["isError"], true, "{second}");
    assert!(tool_text(&second).contains("held-marker-mcp"), "{second}");
    let third = call(4);
    assert_eq!(third["result"]["isError"], true, "released once: {third}");
}

/// Job `id` as `who` sees it.
fn job(who: &As<'_>, id: &str) -> Value {
    who.get(&format!("/v1/jobs/{id}")).expect(200).clone()
}

/// Waits until job `id` is in `state`.
#[track_caller]
fn job_reaches(who: &As<'_>, id: &str, state: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let j = job(who, id);
        if j["state"] == state {
            return j;
        }
        assert!(Instant::now() < deadline, "job {id} not {state}: {j}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_held_job_waits_survives_kill_9_and_runs_once_after_approval() {
    let mut server = governed(&[]);
    let asker = server.tenant("acme").role("admin").create();
    let (approver_key, _) = key_of(&server, "acme", "admin");
    let (sb, held_id, denied_id, plain_id, rid, did) = {
        let a = As::key(&server, &asker.key);
        let approver = As::key(&server, &approver_key);
        let sb = a.post("/v1/sandboxes", &json!({})).expect(201)["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let submit = |code: &str| {
            let r = a.post(
                &format!("/v1/sandboxes/{sb}/jobs"),
                &json!({"code": code, "language": "bash"}),
            );
            r.expect(202).clone()
        };
        // Held: accepted `held`, its reason naming the review; nothing ran.
        let h = submit("echo held-marker >> /workspace/job.txt; echo done");
        assert_eq!(h["state"], "held", "{h}");
        let reason = h["reason"].as_str().unwrap().to_owned();
        assert!(reason.starts_with("held for review rev_"), "{reason}");
        let rid = review_named(&reason);
        // A held job does not hold up the next one on its sandbox.
        let p = submit("echo plain");
        let plain_id = p["id"].as_str().unwrap().to_owned();
        assert_eq!(
            job_reaches(&a, &plain_id, "succeeded")["result"]["stdout"],
            "plain\n"
        );
        let d = submit("echo held-marker > /workspace/denied.txt");
        let did = review_named(d["reason"].as_str().unwrap());
        assert_ne!(did, rid);
        assert_eq!(pending(&approver, 2).len(), 2);
        a.get(&format!("/v1/sandboxes/{sb}/jobs?state=held"))
            .expect(200);
        (
            sb,
            h["id"].as_str().unwrap().to_owned(),
            d["id"].as_str().unwrap().to_owned(),
            plain_id,
            rid,
            did,
        )
    };

    // kill -9 while held: still held after the restart, never run unapproved.
    server.kill9();
    server.restart();
    let a = As::key(&server, &asker.key);
    let approver = As::key(&server, &approver_key);
    assert_eq!(job(&a, &held_id)["state"], "held");
    assert_eq!(job(&a, &denied_id)["state"], "held");
    assert_eq!(job(&a, &plain_id)["state"], "succeeded");
    let files = |name: &str| {
        let r = a.post(
            &format!("/v1/sandboxes/{sb}/execute"),
            &json!({"code": format!(
                "import os\np='/workspace/{name}'\nprint(open(p).read() if os.path.exists(p) else '<absent>', end='')"
            )}),
        );
        r.expect(200)["stdout"].as_str().unwrap_or("").to_owned()
    };
    assert_eq!(files("job.txt"), "<absent>");

    // Approved: it continues by itself, once.
    decide(&approver, &rid, "approve", "ok").expect(200);
    let done = job_reaches(&a, &held_id, "succeeded");
    assert_eq!(done["result"]["stdout"], "done\n", "{done}");
    assert_eq!(files("job.txt"), "held-marker\n");
    // Denied: it fails saying so; it never ran.
    decide(&approver, &did, "deny", "not this one").expect(200);
    let failed = job_reaches(&a, &denied_id, "failed");
    let why = failed["reason"].as_str().unwrap();
    assert!(
        why.contains("review_denied") && why.contains("not this one"),
        "{why}"
    );
    assert_eq!(files("denied.txt"), "<absent>");
    // The approval was used once.
    let r = approver.get(&format!("/v1/reviews/{rid}"));
    assert!(r.expect(200)["review"]["consumed_at"].is_string());
}

#[test]
fn held_output_is_released_after_approval_survives_kill_9_and_is_dropped_after_deny() {
    let mut server = governed(&[]);
    let asker = server.tenant("acme").role("admin").create();
    let (approver_key, _) = key_of(&server, "acme", "admin");
    let beta_key = server.tenant("beta").role("admin").key();
    let token = format!("ghp_{}", "a1B2c3D4e5".repeat(4).get(..36).unwrap());
    // The code builds the token, so only the output holds it.
    let code = format!("t = 'ghp_' + '{}'\nprint('token:', t)", &token[4..]);
    let (sb, eid, rid) = {
        let a = As::key(&server, &asker.key);
        let sb = a.post("/v1/sandboxes", &json!({})).expect(201)["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let r = a.post(
            &format!("/v1/sandboxes/{sb}/execute"),
            &json!({"code": code}),
        );
        let b = r.expect(200).clone();
        assert!(!r.text.contains(&token), "withheld: {b}");
        assert!(b["stdout"].as_str().unwrap().contains("withheld"), "{b}");
        let rid = b["output_held"]["review"]
            .as_str()
            .expect("output_held")
            .to_owned();
        let eid = b["id"].as_str().unwrap().to_owned();
        // Pending: 202 with the review, which never shows the output.
        let held = a.get(&format!("/v1/sandboxes/{sb}/executions/{eid}/held-output"));
        assert_eq!(held.expect(202)["review"]["id"], rid.as_str());
        assert!(!held.text.contains(&token), "{}", held.text);
        let rv = a.get(&format!("/v1/reviews/{rid}"));
        assert!(!rv.text.contains(&token), "{}", rv.text);
        assert_eq!(
            rv.expect(200)["review"]["request"]["execution"],
            eid.as_str()
        );
        // Another tenant: as if absent.
        let beta = As::key(&server, &beta_key);
        let r = beta.get(&format!("/v1/sandboxes/{sb}/executions/{eid}/held-output"));
        assert_eq!(r.status, 404, "{}", r.text);
        assert!(!r.text.contains(&token));
        for bad in ["..%2f..%2fx", "nope"] {
            let r = a.get(&format!("/v1/sandboxes/{sb}/executions/{bad}/held-output"));
            assert_eq!(r.status, 404, "{}", r.text);
        }
        (sb, eid, rid)
    };
    // Kept across kill -9.
    server.kill9();
    server.restart();
    let a = As::key(&server, &asker.key);
    let approver = As::key(&server, &approver_key);
    let path = format!("/v1/sandboxes/{sb}/executions/{eid}/held-output");
    a.get(&path).expect(202);
    decide(&approver, &rid, "approve", "fine to see").expect(200);
    let released = a.get(&path);
    let out = released.expect(200)["stdout"].as_str().unwrap().to_owned();
    assert_eq!(out, format!("token: {token}\n"));
    assert!(
        approver.get(&format!("/v1/reviews/{rid}")).expect(200)["review"]["consumed_at"]
            .is_string()
    );
    a.get(&path).expect(200);

    // Denied: dropped, stays withheld.
    let r = a.post(
        &format!("/v1/sandboxes/{sb}/execute"),
        &json!({"code": code}),
    );
    let b = r.expect(200).clone();
    let rid2 = b["output_held"]["review"].as_str().unwrap().to_owned();
    let eid2 = b["id"].as_str().unwrap().to_owned();
    let kept = server
        .data_dir()
        .join("held-output")
        .join(format!("{eid2}.json"));
    assert!(kept.exists());
    decide(&approver, &rid2, "deny", "no").expect(200);
    assert!(!kept.exists(), "dropped when denied");
    let path2 = format!("/v1/sandboxes/{sb}/executions/{eid2}/held-output");
    let r = a.get(&path2);
    assert_eq!(r.status, 404, "{}", r.text);
    assert!(!r.text.contains(&token));
}
