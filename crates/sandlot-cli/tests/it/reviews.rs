//! Human approval as a policy outcome (issue 23), against a real `sandlot serve`: a
//! `@review` permit holds an execution; the caller waits (`?review_wait=`) or gets 202 and a
//! review to poll and re-submit with (`?review=`); an admin key of the tenant (never the key
//! that asked, never a member, never another tenant) or the operator approves or denies; a
//! held action runs only once approved and only once (100 concurrent held actions approved in
//! random order; re-submissions after release refused); a timeout denies; reviews survive
//! `kill -9`; every decision is in the journal and the audit chain, which verifies.

use crate::common;

use common::{As, Resp, TestServer};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The shipped set plus: bash executions need a person's approval.
fn review_policies() -> String {
    format!(
        "{}\n@id(\"review-bash\")\n@review(\"bash runs only after a person looks at it\")\n\
         permit (principal, action == Sandlot::Action::\"execute\", resource)\n\
         when {{ context.language == \"bash\" }};\n",
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
        .body(review_policies())
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

fn exec_path(id: &str, query: &str) -> String {
    format!("/v1/sandboxes/{id}/execute{query}")
}

fn bash(code: &str) -> Value {
    json!({"code": code, "language": "bash", "timeout": 60})
}

/// The content of `/workspace/<name>` in sandbox `id` (read by an unheld Python cell), or
/// `None` when absent.
fn file(who: &As<'_>, id: &str, name: &str) -> Option<String> {
    let r = who.post(
        &exec_path(id, ""),
        &json!({"code": format!(
            "import os\np='/workspace/{name}'\nprint(open(p).read() if os.path.exists(p) else '<absent>', end='')"
        )}),
    );
    let out = r.expect(200)["stdout"].as_str().unwrap_or("").to_owned();
    (out != "<absent>").then_some(out)
}

/// Waits until `n` reviews are pending for `who`; returns them.
#[track_caller]
fn pending(who: &As<'_>, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = who.get("/v1/reviews?state=pending&limit=1000");
        let list = r.expect(200)["reviews"].as_array().unwrap().clone();
        if list.len() >= n {
            return list;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {n} reviews pending after 60 s",
            list.len()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn decide(who: &As<'_>, id: &str, verb: &str, reason: &str) -> Resp {
    who.post(
        &format!("/v1/reviews/{id}/{verb}"),
        &json!({"reason": reason}),
    )
}

#[test]
fn held_execution_runs_once_after_approval_and_never_when_denied() {
    let server = governed(&[]);
    let asker = server.tenant("acme").role("admin").create();
    let (approver_key, approver_id) = key_of(&server, "acme", "admin");
    let (member_key, _) = key_of(&server, "acme", "member");
    let other = server.tenant("beta").role("admin").key();
    let a = As::key(&server, &asker.key);
    let approver = As::key(&server, &approver_key);
    let member = As::key(&server, &member_key);
    let beta = As::key(&server, &other);

    let sb = a.post("/v1/sandboxes", &json!({})).expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Python is not held.
    assert_eq!(file(&a, &sb, "ran.txt"), None);

    // The caller waits for the decision.
    let waiting = {
        let (url, key) = (
            a.url(&exec_path(&sb, "?review_wait=120")),
            asker.key.clone(),
        );
        std::thread::spawn(move || {
            let c = common::client_builder().build().unwrap();
            let r = c
                .post(url)
                .bearer_auth(key)
                .json(&bash("echo once >> /workspace/ran.txt; echo ran"))
                .send()
                .unwrap();
            (
                r.status().as_u16(),
                r.json::<Value>().unwrap_or(Value::Null),
            )
        })
    };
    let held = pending(&approver, 1);
    assert_eq!(held.len(), 1, "{held:?}");
    let review = held[0].clone();
    common::assert_schema("Review", &review);
    let rid = review["id"].as_str().unwrap().to_owned();
    assert_eq!(review["gate"], "execute");
    assert_eq!(review["state"], "pending");
    assert_eq!(review["key_id"], asker.id.as_str());
    assert_eq!(review["policies"], json!(["review-bash"]));
    assert_eq!(
        review["reason"],
        "bash runs only after a person looks at it"
    );
    assert_eq!(review["request"]["sandbox"], sb.as_str());
    assert!(review["request"]["code"]
        .as_str()
        .unwrap()
        .contains("echo once"));
    // Nothing ran while held.
    assert_eq!(file(&a, &sb, "ran.txt"), None);

    // Who may not decide: the key that asked, a member, another tenant (404, as if absent).
    decide(&a, &rid, "approve", "mine").expect_error(403, "forbidden");
    decide(&member, &rid, "approve", "ok").expect_error(403, "forbidden");
    decide(&beta, &rid, "approve", "ok").expect_error(404, "review_not_found");
    decide(&beta, &rid, "deny", "no").expect_error(404, "review_not_found");
    beta.get(&format!("/v1/reviews/{rid}"))
        .expect_error(404, "review_not_found");
    assert!(beta.get("/v1/reviews").expect(200)["reviews"]
        .as_array()
        .unwrap()
        .is_empty());
    // Without a key (a sandbox has none), or with a made-up one: 401, nothing decided.
    for key in [None, Some("sl_notakey00000000000000000000000000000000")] {
        let c = server.client_with_key(key);
        let r = c
            .post(format!("{}/v1/reviews/{rid}/approve", server.url()))
            .json(&json!({"reason": "forged"}))
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), 401);
        let r = c
            .get(format!("{}/v1/reviews", server.url()))
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), 401);
    }
    // The tenant's own keys see it, members included.
    member.get(&format!("/v1/reviews/{rid}")).expect(200);

    // Bad requests change nothing.
    approver
        .post(&format!("/v1/reviews/{rid}/approve"), &json!({}))
        .expect_error(400, "invalid_request");
    approver
        .post(
            &format!("/v1/reviews/{rid}/approve"),
            &json!({"reason": "x", "extra": 1}),
        )
        .expect_error(400, "invalid_request");
    approver
        .post(&format!("/v1/reviews/{rid}/approve"), &json!({"reason": 5}))
        .expect_error(400, "invalid_request");
    decide(&approver, &rid, "approve", &"x".repeat(5000)).expect_error(400, "invalid_argument");
    approver
        .get("/v1/reviews?state=bogus")
        .expect_error(400, "invalid_argument");
    for bad in ["rev_nope", "nope", "rev_", "rev_%2e%2e"] {
        approver
            .get(&format!("/v1/reviews/{bad}"))
            .expect_error(404, "review_not_found");
        decide(&approver, bad, "deny", "x").expect_error(404, "review_not_found");
    }
    a.post(&exec_path(&sb, "?review_wait=301"), &bash("echo no"))
        .expect_error(400, "invalid_argument");
    a.post(&exec_path(&sb, "?review=garbage"), &bash("echo no"))
        .expect_error(400, "invalid_argument");
    a.post(&exec_path(&sb, "?review_wait=x"), &bash("echo no"))
        .expect_error(400, "invalid_request");
    // A re-submission must be exactly the held request.
    a.post(
        &exec_path(&sb, &format!("?review={rid}")),
        &bash("echo other >> /workspace/ran.txt"),
    )
    .expect_error(400, "invalid_argument");
    assert_eq!(
        approver.get(&format!("/v1/reviews/{rid}")).expect(200)["review"]["state"],
        "pending"
    );

    // Approved: the waiting caller gets the result; it ran once.
    let t0 = Instant::now();
    let ok = decide(&approver, &rid, "approve", "looked at it");
    let ok = ok.expect(200);
    assert_eq!(ok["review"]["state"], "approved");
    assert_eq!(ok["review"]["decided_by"], approver_id.as_str());
    assert_eq!(ok["review"]["decision_reason"], "looked at it");
    let (status, body) = waiting.join().unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["stdout"], "ran\n");
    eprintln!("approval → result: {:?}", t0.elapsed());
    decide(&approver, &rid, "approve", "again").expect_error(409, "review_decided");
    decide(&approver, &rid, "deny", "late").expect_error(409, "review_decided");
    // Released once: a re-submission naming it is refused, and nothing ran twice.
    a.post(
        &exec_path(&sb, &format!("?review={rid}")),
        &bash("echo once >> /workspace/ran.txt; echo ran"),
    )
    .expect_error(409, "review_decided");
    assert_eq!(file(&a, &sb, "ran.txt").as_deref(), Some("once\n"));
    let got = approver.get(&format!("/v1/reviews/{rid}"));
    assert!(got.expect(200)["review"]["consumed_at"].is_string());

    // 202: held without waiting; denied → refused with the reason; the code never ran.
    let r = a.post(
        &exec_path(&sb, ""),
        &bash("echo bad > /workspace/denied.txt"),
    );
    let held = r.expect(202)["review"].clone();
    common::assert_schema("ReviewBody", r.expect(202));
    let did = held["id"].as_str().unwrap().to_owned();
    assert_eq!(held["state"], "pending");
    // Re-submitting while pending is still 202 (the same review).
    let again = a.post(
        &exec_path(&sb, &format!("?review={did}")),
        &bash("echo bad > /workspace/denied.txt"),
    );
    assert_eq!(again.expect(202)["review"]["id"], did.as_str());
    // The operator may decide any tenant's review.
    let denied = server.post(
        &format!("/v1/reviews/{did}/deny"),
        &json!({"reason": "not on a Monday"}),
    );
    assert_eq!(denied.expect(200)["review"]["state"], "denied");
    let r = a.post(
        &exec_path(&sb, &format!("?review={did}")),
        &bash("echo bad > /workspace/denied.txt"),
    );
    r.expect_error(403, "review_denied");
    assert!(r.message().contains("not on a Monday"), "{}", r.text);
    assert_eq!(file(&a, &sb, "denied.txt"), None);
    // A waiting caller of a denied action is refused too.
    let r = a.post(
        &exec_path(&sb, &format!("?review={did}&review_wait=5")),
        &bash("echo bad > /workspace/denied.txt"),
    );
    r.expect_error(403, "review_denied");
    assert_eq!(file(&a, &sb, "denied.txt"), None);

    // The operator lists every tenant's reviews; a tenant its own.
    let all = server.get("/v1/reviews").expect(200)["reviews"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(all, 2);
    common::assert_schema("ReviewList", server.get("/v1/reviews").expect(200));

    // The journal: the holds and each decision on a review, with who and why.
    let decisions = approver.get("/v1/decisions?gate=review&limit=100");
    let decisions = decisions.expect(200)["decisions"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(decisions.len(), 2, "{decisions:?}");
    let approved = decisions
        .iter()
        .find(|d| d["detail"]["review"] == rid.as_str())
        .expect("the approval is journaled");
    assert_eq!(approved["allowed"], true);
    assert_eq!(approved["key_id"], approver_id.as_str());
    assert_eq!(approved["detail"]["reason"], "looked at it");
    let refused = decisions
        .iter()
        .find(|d| d["detail"]["review"] == did.as_str())
        .expect("the denial is journaled");
    assert_eq!(refused["allowed"], false);
    let held_decisions = approver.get("/v1/decisions?gate=execute&limit=100");
    assert!(held_decisions.expect(200)["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d["reason"]
            .as_str()
            .unwrap_or("")
            .starts_with("needs review")));

    // The audit chain: the approving request's record names the approval's decision.
    let approval_decision = approved["id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let recs = server.get("/v1/audit?limit=1000&action=POST%20/v1/reviews/%7Bid%7D/approve");
        let recs = recs.expect(200)["records"].as_array().unwrap().clone();
        if recs.iter().any(|r| {
            r["decisions"]
                .as_array()
                .is_some_and(|d| d.iter().any(|x| x == approval_decision.as_str()))
        }) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no audit record names {approval_decision}: {recs:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandlot"))
        .args(["audit", "verify", "--data-dir"])
        .arg(server.data_dir())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn an_undecided_review_is_denied_by_timeout() {
    let server = governed(&[("SANDLOT_REVIEW_TIMEOUT", "2")]);
    let sb = server.create_sandbox();
    let me = As::key(&server, server.key());
    let t0 = Instant::now();
    let r = me.post(
        &exec_path(&sb, "?review_wait=30"),
        &bash("echo late > /workspace/late.txt"),
    );
    r.expect_error(403, "review_denied");
    assert!(r.message().contains("timeout"), "{}", r.text);
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert_eq!(file(&me, &sb, "late.txt"), None);
    // Held without waiting: the review shows denied by timeout once its time is up.
    let r = me.post(
        &exec_path(&sb, ""),
        &bash("echo late2 > /workspace/late.txt"),
    );
    let id = r.expect(202)["review"]["id"].as_str().unwrap().to_owned();
    std::thread::sleep(Duration::from_secs(3));
    let got = me.get(&format!("/v1/reviews/{id}"));
    let got = got.expect(200);
    assert_eq!(got["review"]["state"], "denied");
    assert_eq!(got["review"]["decided_by"], "timeout");
    // An approval after the timeout is too late.
    let (other, _) = key_of(&server, "default", "admin");
    decide(&As::key(&server, &other), &id, "approve", "late").expect_error(409, "review_decided");
    assert_eq!(file(&me, &sb, "late.txt"), None);
}

/// A small deterministic shuffle (no rand dependency needed for one permutation).
fn shuffle<T>(v: &mut [T], mut seed: u64) {
    for i in (1..v.len()).rev() {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        v.swap(i, (seed >> 33) as usize % (i + 1));
    }
}

#[test]
fn a_hundred_concurrent_held_actions_approved_in_random_order_each_run_once() {
    const SANDBOXES: usize = 10;
    const PER: usize = 10;
    let server = governed(&[]);
    let asker = server.tenant("acme").role("admin").create();
    let (approver_key, _) = key_of(&server, "acme", "admin");
    let a = As::key(&server, &asker.key);
    let approver = As::key(&server, &approver_key);
    let sandboxes: Vec<String> = (0..SANDBOXES)
        .map(|_| {
            a.post("/v1/sandboxes", &json!({})).expect(201)["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let mut callers = Vec::new();
    for (s, sb) in sandboxes.iter().enumerate() {
        for n in 0..PER {
            let tag = format!("a{s}-{n}");
            let url = a.url(&exec_path(sb, "?review_wait=240"));
            let key = asker.key.clone();
            callers.push(std::thread::spawn(move || {
                let c = common::client_builder()
                    .timeout(Duration::from_secs(300))
                    .build()
                    .unwrap();
                let r = c
                    .post(url)
                    .bearer_auth(key)
                    .json(&bash(&format!(
                        "echo {tag} >> /workspace/ran.txt; echo {tag}"
                    )))
                    .send()
                    .unwrap();
                (
                    tag,
                    r.status().as_u16(),
                    r.json::<Value>().unwrap_or(Value::Null),
                )
            }));
        }
    }
    let mut held: Vec<String> = pending(&approver, SANDBOXES * PER)
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(held.len(), SANDBOXES * PER);
    shuffle(&mut held, 0x5eed);
    // Approved from four threads at once, in that random order.
    let chunks: Vec<Vec<String>> = held.chunks(25).map(|c| c.to_vec()).collect();
    let deciders: Vec<_> = chunks
        .into_iter()
        .map(|ids| {
            let (url, key) = (server.url().to_owned(), approver_key.clone());
            std::thread::spawn(move || {
                let c = common::client_builder().build().unwrap();
                for id in ids {
                    let r = c
                        .post(format!("{url}/v1/reviews/{id}/approve"))
                        .bearer_auth(&key)
                        .json(&json!({"reason": "batch"}))
                        .send()
                        .unwrap();
                    assert_eq!(r.status().as_u16(), 200, "{id}");
                }
            })
        })
        .collect();
    for d in deciders {
        d.join().unwrap();
    }
    for c in callers {
        let (tag, status, body) = c.join().unwrap();
        assert_eq!(status, 200, "{tag}: {body}");
        assert_eq!(body["stdout"], format!("{tag}\n"), "{tag}");
    }
    // Each ran exactly once, in its own sandbox.
    for (s, sb) in sandboxes.iter().enumerate() {
        let ran = file(&a, sb, "ran.txt").unwrap_or_default();
        let mut lines: Vec<&str> = ran.lines().collect();
        lines.sort();
        let mut want: Vec<String> = (0..PER).map(|n| format!("a{s}-{n}")).collect();
        want.sort();
        assert_eq!(lines, want, "sandbox {s}");
    }
    // Every review was released exactly once.
    let all = approver.get("/v1/reviews?limit=1000");
    let all = all.expect(200)["reviews"].as_array().unwrap().clone();
    assert_eq!(all.len(), SANDBOXES * PER);
    assert!(all
        .iter()
        .all(|r| r["state"] == "approved" && r["consumed_at"].is_string()));
}

#[test]
fn held_actions_survive_kill_9_and_run_once_after_approval() {
    let mut server = governed(&[]);
    let asker = server.tenant("acme").role("admin").create();
    let (approver_key, _) = key_of(&server, "acme", "admin");
    let sb = As::key(&server, &asker.key)
        .post("/v1/sandboxes", &json!({}))
        .expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let codes: Vec<String> = (0..3)
        .map(|n| format!("echo k{n} >> /workspace/k{n}.txt; echo k{n}"))
        .collect();
    let ids: Vec<String> = codes
        .iter()
        .map(|code| {
            let a = As::key(&server, &asker.key);
            let r = a.post(&exec_path(&sb, ""), &bash(code));
            r.expect(202)["review"]["id"].as_str().unwrap().to_owned()
        })
        .collect();
    // A caller waiting when the server dies.
    let waiting = {
        let a = As::key(&server, &asker.key);
        let (url, key) = (a.url(&exec_path(&sb, "?review_wait=60")), asker.key.clone());
        std::thread::spawn(move || {
            let c = common::client_builder().build().unwrap();
            c.post(url)
                .bearer_auth(key)
                .json(&bash("echo w >> /workspace/w.txt"))
                .send()
                .map(|r| r.status().as_u16())
                .ok()
        })
    };
    pending(&As::key(&server, &approver_key), 4);
    server.kill9();
    let _ = waiting.join();
    server.restart();

    let a = As::key(&server, &asker.key);
    let approver = As::key(&server, &approver_key);
    let still = pending(&approver, 4);
    assert_eq!(still.len(), 4, "{still:?}");
    for n in 0..3 {
        assert_eq!(
            file(&a, &sb, &format!("k{n}.txt")),
            None,
            "k{n} ran unapproved"
        );
    }
    assert_eq!(
        file(&a, &sb, "w.txt"),
        None,
        "the waiting one ran unapproved"
    );

    // Approve one: its re-submission runs once; a second re-submission is refused.
    decide(&approver, &ids[0], "approve", "after the crash").expect(200);
    let r = a.post(
        &exec_path(&sb, &format!("?review={}", ids[0])),
        &bash(&codes[0]),
    );
    assert_eq!(r.expect(200)["stdout"], "k0\n");
    a.post(
        &exec_path(&sb, &format!("?review={}", ids[0])),
        &bash(&codes[0]),
    )
    .expect_error(409, "review_decided");
    assert_eq!(file(&a, &sb, "k0.txt").as_deref(), Some("k0\n"));
    // Deny another; the third stays held and has not run.
    decide(&approver, &ids[1], "deny", "no").expect(200);
    a.post(
        &exec_path(&sb, &format!("?review={}", ids[1])),
        &bash(&codes[1]),
    )
    .expect_error(403, "review_denied");
    assert_eq!(file(&a, &sb, "k1.txt"), None);
    let r = a.post(
        &exec_path(&sb, &format!("?review={}", ids[2])),
        &bash(&codes[2]),
    );
    assert_eq!(r.expect(202)["review"]["state"], "pending");
    assert_eq!(file(&a, &sb, "k2.txt"), None);
    // A second kill: the approved-and-released one is still released (never runs again).
    server.kill9();
    server.restart();
    let a = As::key(&server, &asker.key);
    a.post(
        &exec_path(&sb, &format!("?review={}", ids[0])),
        &bash(&codes[0]),
    )
    .expect_error(409, "review_decided");
    assert_eq!(file(&a, &sb, "k0.txt").as_deref(), Some("k0\n"));
}

/// One loopback HTTP server answering `hello` to anything (one request per connection).
fn hello_upstream(ip: &str) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind((ip, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
                let mut buf = [0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = conn.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
                );
            });
        }
    });
    port
}

/// Egress a `@review` permit holds is refused at once with "review pending" and one review
/// per sandbox, host and port; approved, the sandbox's next attempt goes through; denied, it
/// stays refused. The sandbox (no key) cannot decide it.
#[test]
fn held_egress_is_refused_until_approved() {
    let port = hello_upstream("127.0.0.3");
    let server = TestServer::start_with_env(&[
        ("SANDLOT_POOL_SIZE", "1"),
        ("SANDLOT_EGRESS_HOSTS", "api.test=127.0.0.3"),
    ]);
    let policies = format!(
        "{}\n@id(\"review-api\")\n@review(\"a new domain\")\n\
         permit (principal, action == Sandlot::Action::\"egress\", resource)\n\
         when {{ context.host == \"api.test\" }};\n",
        sandlot_policy::DEFAULT_POLICIES
    );
    let me = As::key(&server, server.key());
    me.put_raw("/v1/policies", "text/plain", policies.into_bytes())
        .expect(200);
    let allow = json!([format!("api.test:{port}"), "127.0.0.3/32"]);
    let fetch = format!(
        "import urllib.request, urllib.error\n\
         try:\n    r = urllib.request.urlopen('http://api.test:{port}/x', timeout=20); print(r.status, r.read().decode())\n\
         except urllib.error.HTTPError as e:\n    print(e.code, e.read().decode())\n\
         except Exception as e:\n    print(0, repr(e))"
    );
    let run = |sb: &str| -> String {
        me.post(&exec_path(sb, ""), &json!({"code": fetch}))
            .expect(200)["stdout"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    let sb = me
        .post("/v1/sandboxes", &json!({"network": allow}))
        .expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = run(&sb);
    assert!(!out.contains("hello"), "held egress went through: {out}");
    assert!(out.contains("review pending"), "{out}");
    let out = run(&sb);
    assert!(out.contains("review pending"), "{out}");
    let held = pending(&me, 1);
    assert_eq!(
        held.len(),
        1,
        "one review per sandbox, host and port: {held:?}"
    );
    let r = &held[0];
    assert_eq!(r["gate"], "egress");
    assert_eq!(r["request"]["host"], "api.test");
    assert_eq!(r["key_id"], format!("sandbox:{sb}"));
    let rid = r["id"].as_str().unwrap().to_owned();
    // From inside, the sandbox has no key: the API refuses it.
    let inside = run_in(&me, &sb, &format!(
        "import urllib.request, urllib.error\n\
         req = urllib.request.Request('{}/v1/reviews/{rid}/approve', data=b'{{\"reason\": \"me\"}}', headers={{'content-type': 'application/json'}}, method='POST')\n\
         try:\n    print(urllib.request.urlopen(req, timeout=5).status)\n\
         except urllib.error.HTTPError as e:\n    print(e.code)\n\
         except Exception as e:\n    print(0)",
        server.url()
    ));
    assert!(!inside.trim().starts_with("200"), "{inside}");
    assert_eq!(
        me.get(&format!("/v1/reviews/{rid}")).expect(200)["review"]["state"],
        "pending"
    );
    decide(&me, &rid, "approve", "known partner").expect(200);
    let out = run(&sb);
    assert!(out.starts_with("200 hello"), "{out}");
    let out = run(&sb);
    assert!(
        out.starts_with("200 hello"),
        "approved for the sandbox's life: {out}"
    );

    // Another sandbox asks anew; denied, it stays refused.
    let other = me
        .post("/v1/sandboxes", &json!({"network": allow}))
        .expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(run(&other).contains("review pending"));
    let held = pending(&me, 1);
    let oid = held
        .iter()
        .find(|r| r["request"]["sandbox"] == other.as_str())
        .expect("the other sandbox's review")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    decide(&me, &oid, "deny", "not for this one").expect(200);
    let out = run(&other);
    assert!(!out.contains("hello"), "{out}");
    assert!(out.contains("not for this one"), "{out}");
}

fn run_in(who: &As<'_>, sb: &str, code: &str) -> String {
    who.post(&exec_path(sb, ""), &json!({"code": code}))
        .expect(200)["stdout"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

/// The execute gate sees the code: code matching a pattern is held whatever the language, and
/// the same code sent through the job queue (another protocol's path) is held too (the job is
/// accepted `held`, naming its review) rather than run unreviewed.
#[test]
fn code_matching_a_pattern_is_held() {
    let server = TestServer::start_with_env(&[("SANDLOT_POOL_SIZE", "1")]);
    let policies = format!(
        "{}\n@id(\"review-rmrf\")\n@review(\"recursive deletion\")\n\
         permit (principal, action == Sandlot::Action::\"execute\", resource)\n\
         when {{ context.code like \"*rm -rf*\" }};\n",
        sandlot_policy::DEFAULT_POLICIES
    );
    let me = As::key(&server, server.key());
    me.put_raw("/v1/policies", "text/plain", policies.into_bytes())
        .expect(200);
    let sb = server.create_sandbox();
    let r = me.post(
        &exec_path(&sb, ""),
        &json!({"code": "open('/workspace/marker', 'w').write('x')  # rm -rf"}),
    );
    let review = r.expect(202)["review"].clone();
    assert_eq!(review["reason"], "recursive deletion");
    assert_eq!(file(&me, &sb, "marker"), None);
    me.post(&exec_path(&sb, ""), &bash("echo fine")).expect(200);
    let r = me.post(
        &format!("/v1/sandboxes/{sb}/jobs"),
        &json!({"code": "open('/workspace/marker', 'w').write('y')  # rm -rf"}),
    );
    let job = r.expect(202).clone();
    assert_eq!(job["state"], "held", "{job}");
    assert!(
        job["reason"]
            .as_str()
            .unwrap()
            .starts_with("held for review rev_"),
        "{job}"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(file(&me, &sb, "marker"), None);
    let id = job["id"].as_str().unwrap();
    assert_eq!(
        me.get(&format!("/v1/jobs/{id}")).expect(200)["state"],
        "held"
    );
}
