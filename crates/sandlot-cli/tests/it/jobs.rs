//! Durable jobs against a real `sandlot serve` on 127.0.0.1: a job's result, order per
//! sandbox, the global concurrency bound, cancelling queued and running jobs, the bounded
//! queue (429 with `Retry-After`), a job's event stream, `kill -9` of the server with 100 jobs
//! queued (after the restart every job is done, queued or `lost` with its reason, and none ran
//! twice unless it was declared idempotent), jobs of a deleted sandbox, another tenant's job
//! ids, and bad input.

use crate::common;

use common::{Resp, TestServer};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const TERMINAL: [&str; 4] = ["succeeded", "failed", "cancelled", "lost"];

fn submit(server: &TestServer, sandbox: &str, body: Value) -> Value {
    let r = server.post(&format!("/v1/sandboxes/{sandbox}/jobs"), &body);
    let job = r.expect(202).clone();
    assert_eq!(
        r.headers.get("location").and_then(|v| v.to_str().ok()),
        Some(format!("/v1/jobs/{}", job["id"].as_str().unwrap()).as_str())
    );
    assert_eq!(job["state"], "queued", "{job}");
    job
}

fn job(server: &TestServer, id: &str) -> Value {
    server.get(&format!("/v1/jobs/{id}")).expect(200).clone()
}

/// Waits until job `id` has ended; returns it.
#[track_caller]
fn wait_done(server: &TestServer, id: &str, timeout: Duration) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let j = job(server, id);
        if TERMINAL.contains(&j["state"].as_str().unwrap_or("")) {
            return j;
        }
        assert!(Instant::now() < deadline, "job {id} did not end: {j}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn ts(s: &Value) -> String {
    s.as_str().unwrap_or_default().to_owned()
}

/// The events of an SSE response, read on a thread: (event, data).
struct SseReader {
    rx: mpsc::Receiver<(String, Value)>,
}

impl SseReader {
    fn open(server: &TestServer, path: &str) -> SseReader {
        let resp = server
            .client()
            .get(format!("{}{path}", server.url()))
            .send()
            .expect("GET events");
        assert_eq!(resp.status().as_u16(), 200, "{path}");
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
        SseReader { rx }
    }

    fn next(&self, timeout: Duration) -> Option<(String, Value)> {
        self.rx.recv_timeout(timeout).ok()
    }
}

#[test]
fn jobs_run_in_order_within_the_bound_can_be_cancelled_and_are_bounded() {
    let server = TestServer::start_with_env(&[
        ("SANDLOT_JOBS_CONCURRENCY", "2"),
        ("SANDLOT_JOBS_QUEUE_PER_SANDBOX", "6"),
    ]);
    let a = server.create_sandbox();

    // Submit → result.
    let j = submit(
        &server,
        &a,
        json!({"code": "x = 40 + 2\nprint(x)", "metadata": {"who": "test"}}),
    );
    assert_eq!(j["metadata"]["who"], "test");
    assert_eq!(j["idempotent"], false);
    let done = wait_done(&server, j["id"].as_str().unwrap(), Duration::from_secs(60));
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["result"]["stdout"], "42\n");
    let exec_id = done["execution_id"].as_str().unwrap();
    assert_eq!(done["result"]["id"], exec_id);
    let execs = server
        .get(&format!("/v1/sandboxes/{a}/executions"))
        .expect(200)
        .clone();
    assert!(
        execs["executions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["id"] == exec_id),
        "the job's execution is recorded like any other: {execs}"
    );
    // A failing execution fails the job, saying how it ended.
    let f = submit(&server, &a, json!({"code": "raise ValueError('no')"}));
    let f = wait_done(&server, f["id"].as_str().unwrap(), Duration::from_secs(60));
    assert_eq!(f["state"], "failed");
    assert!(f["reason"].as_str().unwrap().contains("error"), "{f}");
    assert_eq!(f["result"]["error"]["name"], "ValueError");

    // In order per sandbox: each job appends to the sandbox's own state.
    server.execute(&a, "order = []");
    let ids: Vec<String> = (0..5)
        .map(|i| {
            submit(
                &server,
                &a,
                json!({"code": format!("import time\ntime.sleep(0.05)\norder.append({i})")}),
            )["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    for id in &ids {
        assert_eq!(
            wait_done(&server, id, Duration::from_secs(60))["state"],
            "succeeded"
        );
    }
    assert_eq!(
        server.execute(&a, "order")["result"]["text/plain"],
        "[0, 1, 2, 3, 4]"
    );
    let list = server
        .get(&format!("/v1/sandboxes/{a}/jobs"))
        .expect(200)
        .clone();
    let listed: Vec<&str> = list["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        &listed[2..],
        ids.iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice()
    );
    let succeeded = server
        .get(&format!("/v1/sandboxes/{a}/jobs?state=failed"))
        .expect(200)
        .clone();
    assert_eq!(succeeded["jobs"].as_array().unwrap().len(), 1);

    // The global bound: 3 sandboxes × 2 jobs of 1 s, at most 2 at once.
    let sbs: Vec<String> = (0..3).map(|_| server.create_sandbox()).collect();
    let mut ids = Vec::new();
    for sb in &sbs {
        for _ in 0..2 {
            ids.push(
                submit(&server, sb, json!({"code": "import time\ntime.sleep(1)"}))["id"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            );
        }
    }
    let jobs: Vec<Value> = ids
        .iter()
        .map(|id| wait_done(&server, id, Duration::from_secs(90)))
        .collect();
    let mut edges: Vec<(String, i32)> = Vec::new();
    for j in &jobs {
        assert_eq!(j["state"], "succeeded", "{j}");
        edges.push((ts(&j["started_at"]), 1));
        edges.push((ts(&j["ended_at"]), -1));
    }
    edges.sort();
    let (mut now, mut max) = (0, 0);
    for (_, d) in &edges {
        now += d;
        max = max.max(now);
    }
    assert!(max <= 2, "more than 2 jobs ran at once: {edges:?}");
    assert_eq!(max, 2, "the bound was never used: {edges:?}");

    // Cancel: a queued job never runs; a running one is interrupted.
    let b = &sbs[0];
    let long = submit(&server, b, json!({"code": "import time\ntime.sleep(60)"}));
    let long_id = long["id"].as_str().unwrap();
    let queued = submit(&server, b, json!({"code": "print('never')"}));
    let queued_id = queued["id"].as_str().unwrap();
    assert!(common::wait_until(Duration::from_secs(30), || job(
        &server, long_id
    )["state"]
        == "running"));
    // The job's stream says what it is and ends with its result.
    let stream = SseReader::open(&server, &format!("/v1/jobs/{long_id}/events"));
    let (ev, data) = stream.next(Duration::from_secs(10)).expect("a first event");
    assert_eq!(
        (ev.as_str(), data["state"].as_str()),
        ("state", Some("running"))
    );
    let c = server.delete(&format!("/v1/jobs/{queued_id}"));
    assert_eq!(c.expect(200)["state"], "cancelled");
    let started = Instant::now();
    let c = server.delete(&format!("/v1/jobs/{long_id}"));
    let c = c.expect(200).clone();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(c["state"], "cancelled", "{c}");
    assert_eq!(c["result"]["end_state"], "interrupted", "{c}");
    // Its output (the interrupt's KeyboardInterrupt), then `done`.
    let (ev, data) = std::iter::from_fn(|| stream.next(Duration::from_secs(10)))
        .find(|(ev, _)| ev == "done")
        .expect("done");
    assert_eq!(
        (ev.as_str(), data["state"].as_str()),
        ("done", Some("cancelled"))
    );
    server
        .delete(&format!("/v1/jobs/{long_id}"))
        .expect_error(409, "job_ended");
    let q = job(&server, queued_id);
    assert_eq!(
        (q["started_at"].clone(), q["execution_id"].clone()),
        (Value::Null, Value::Null)
    );

    // A stream of a running job carries its output live.
    let live = submit(
        &server,
        b,
        json!({"code": "import time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(0.3)"}),
    );
    let live_id = live["id"].as_str().unwrap();
    let stream = SseReader::open(&server, &format!("/v1/jobs/{live_id}/events"));
    let mut seen = Vec::new();
    while let Some((ev, data)) = stream.next(Duration::from_secs(30)) {
        seen.push(ev.clone());
        if ev == "done" {
            assert_eq!(data["state"], "succeeded");
            assert_eq!(data["result"]["stdout"], "tick 0\ntick 1\ntick 2\n");
            break;
        }
    }
    assert_eq!(seen.last().map(String::as_str), Some("done"), "{seen:?}");
    assert!(
        seen.iter().any(|e| e == "stdout"),
        "no live output: {seen:?}"
    );
    // An ended job's stream is its result at once.
    let stream = SseReader::open(&server, &format!("/v1/jobs/{live_id}/events"));
    assert_eq!(stream.next(Duration::from_secs(5)).unwrap().0, "done");

    // The bounded queue: one running, six waiting, the next is refused with Retry-After.
    let c = &sbs[1];
    let blocker = submit(&server, c, json!({"code": "import time\ntime.sleep(60)"}));
    let blocker_id = blocker["id"].as_str().unwrap();
    assert!(common::wait_until(Duration::from_secs(30), || job(
        &server, blocker_id
    )["state"]
        == "running"));
    let waiting: Vec<String> = (0..6)
        .map(|_| {
            submit(&server, c, json!({"code": "1"}))["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let full = server.post(&format!("/v1/sandboxes/{c}/jobs"), &json!({"code": "1"}));
    full.expect_error(429, "job_queue_full");
    let retry: u64 = full.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry));
    // Other sandboxes still take jobs.
    let other = submit(&server, &sbs[2], json!({"code": "2"}));
    assert_eq!(
        wait_done(
            &server,
            other["id"].as_str().unwrap(),
            Duration::from_secs(60)
        )["state"],
        "succeeded"
    );
    for id in waiting.iter().chain([blocker_id.to_owned()].iter()) {
        server.delete(&format!("/v1/jobs/{id}")).expect(200);
    }
}

#[test]
fn a_crash_with_100_queued_jobs_loses_none_and_runs_none_twice() {
    let mut server = TestServer::start_with_env(&[("SANDLOT_JOBS_CONCURRENCY", "2")]);
    let a = server.create_sandbox();
    let b = server.create_sandbox();
    // Running at the crash: one idempotent (queued again after it), one not (lost).
    let idem = submit(
        &server,
        &a,
        json!({"code": "import time\ntime.sleep(4)\nprint('job-idem')", "idempotent": true}),
    );
    let plain = submit(
        &server,
        &b,
        json!({"code": "import time\ntime.sleep(4)\nprint('job-plain')"}),
    );
    let mut all: Vec<(String, String, String)> = vec![
        (
            idem["id"].as_str().unwrap().into(),
            a.clone(),
            "job-idem".into(),
        ),
        (
            plain["id"].as_str().unwrap().into(),
            b.clone(),
            "job-plain".into(),
        ),
    ];
    for n in 0..98 {
        let sb = if n % 2 == 0 { &a } else { &b };
        let marker = format!("job-{n}");
        let j = submit(&server, sb, json!({"code": format!("print('{marker}')")}));
        all.push((j["id"].as_str().unwrap().into(), sb.clone(), marker));
    }
    assert!(common::wait_until(Duration::from_secs(30), || {
        job(&server, &all[0].0)["state"] == "running"
            && job(&server, &all[1].0)["state"] == "running"
    }));
    server.kill9();
    server.restart();

    // Right after the restart: every job is queued, running or ended, a lost one with why.
    for (id, _, _) in &all {
        let j = job(&server, id);
        let st = j["state"].as_str().unwrap();
        assert!(
            ["queued", "running", "succeeded", "lost"].contains(&st),
            "{j}"
        );
        if st == "lost" {
            assert_eq!(j["reason"], "the server stopped while it ran", "{j}");
        }
    }
    let p = job(&server, &all[1].0);
    assert_eq!(p["state"], "lost", "{p}");
    let i = job(&server, &all[0].0);
    assert!(
        i["attempt"].as_i64().unwrap() >= 2,
        "the idempotent job was not queued again: {i}"
    );

    // Then every job ends; none ran twice (but the idempotent one, by request).
    let ended: HashMap<String, Value> = all
        .iter()
        .map(|(id, _, _)| (id.clone(), wait_done(&server, id, Duration::from_secs(240))))
        .collect();
    let mut runs: HashMap<String, usize> = HashMap::new();
    for sb in [&a, &b] {
        let execs = server
            .get(&format!("/v1/sandboxes/{sb}/executions"))
            .expect(200)
            .clone();
        for e in execs["executions"].as_array().unwrap() {
            let code = e["code"].as_str().unwrap();
            if let Some(m) = all
                .iter()
                .find(|(_, _, m)| code.contains(&format!("print('{m}')")))
            {
                *runs.entry(m.2.clone()).or_default() += 1;
            }
        }
    }
    for (id, _, marker) in &all {
        let j = &ended[id];
        let n = runs.get(marker).copied().unwrap_or(0);
        match j["state"].as_str().unwrap() {
            "succeeded" if marker == "job-idem" => {
                assert_eq!(j["attempt"], 2, "{j}");
                assert!((1..=2).contains(&n), "{marker} ran {n} times");
            }
            "succeeded" => assert_eq!(n, 1, "{marker} ran {n} times: {j}"),
            "lost" => assert!(n <= 1, "{marker} ran {n} times: {j}"),
            _ => panic!("unexpected end: {j}"),
        }
    }
    assert_eq!(ended[&all[0].0]["state"], "succeeded");
    assert_eq!(ended[&all[1].0]["state"], "lost");
    assert_eq!(
        ended.values().filter(|j| j["state"] == "succeeded").count(),
        99,
        "every job but the lost one ran"
    );
}

#[test]
fn deleted_sandboxes_other_tenants_and_bad_input() {
    let server = TestServer::start_with_env(&[("SANDLOT_JOBS_CONCURRENCY", "2")]);
    let a = server.create_sandbox();

    // A sandbox deleted with jobs waiting: they fail at once, saying why.
    let running = submit(&server, &a, json!({"code": "import time\ntime.sleep(60)"}));
    let running_id = running["id"].as_str().unwrap();
    let waiting: Vec<String> = (0..3)
        .map(|_| {
            submit(&server, &a, json!({"code": "1"}))["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert!(common::wait_until(Duration::from_secs(30), || job(
        &server, running_id
    )["state"]
        == "running"));
    server.delete(&format!("/v1/sandboxes/{a}")).expect(204);
    for id in &waiting {
        let j = wait_done(&server, id, Duration::from_secs(10));
        assert_eq!(j["state"], "failed", "{j}");
        assert!(j["reason"].as_str().unwrap().contains("ended"), "{j}");
    }
    let r = wait_done(&server, running_id, Duration::from_secs(30));
    assert_eq!(r["state"], "failed", "{r}");
    // Its jobs stay listed; new ones are refused.
    assert_eq!(
        server.get(&format!("/v1/sandboxes/{a}/jobs")).expect(200)["jobs"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
    server
        .post(&format!("/v1/sandboxes/{a}/jobs"), &json!({"code": "1"}))
        .expect_error(410, "sandbox_gone");

    // Another tenant's job is answered exactly as a missing one.
    let b = server.create_sandbox();
    let mine = submit(&server, &b, json!({"code": "1"}));
    let mine_id = mine["id"].as_str().unwrap();
    server
        .post("/v1/tenants", &json!({"name": "beta"}))
        .expect(201);
    let key = server
        .post("/v1/keys", &json!({"tenant": "beta", "role": "admin"}))
        .expect(201)["key"]
        .as_str()
        .unwrap()
        .to_owned();
    let beta = server.client_with_key(Some(&key));
    let as_beta = |method: reqwest::Method, path: &str| -> (u16, Value) {
        let r = beta
            .request(method, format!("{}{path}", server.url()))
            .json(&json!({"code": "1"}))
            .send()
            .unwrap();
        let s = r.status().as_u16();
        (s, r.json().unwrap_or(Value::Null))
    };
    let (s1, b1) = as_beta(reqwest::Method::GET, &format!("/v1/jobs/{mine_id}"));
    let (s2, b2) = as_beta(
        reqwest::Method::GET,
        "/v1/jobs/job_000000000000000000000000",
    );
    assert_eq!(
        (s1, b1["error"]["code"].as_str()),
        (404, Some("job_not_found"))
    );
    assert_eq!(
        (s2, b2["error"]["code"].as_str()),
        (404, Some("job_not_found"))
    );
    assert_eq!(
        b1["error"]["message"]
            .as_str()
            .unwrap()
            .replace(mine_id, "X"),
        b2["error"]["message"]
            .as_str()
            .unwrap()
            .replace("job_000000000000000000000000", "X")
    );
    for (m, p) in [
        (reqwest::Method::DELETE, format!("/v1/jobs/{mine_id}")),
        (reqwest::Method::GET, format!("/v1/jobs/{mine_id}/events")),
    ] {
        let (s, body) = as_beta(m, &p);
        assert_eq!(
            (s, body["error"]["code"].as_str()),
            (404, Some("job_not_found")),
            "{p}"
        );
    }
    for (m, p) in [
        (reqwest::Method::POST, format!("/v1/sandboxes/{b}/jobs")),
        (reqwest::Method::GET, format!("/v1/sandboxes/{b}/jobs")),
    ] {
        let (s, body) = as_beta(m, &p);
        assert_eq!(
            (s, body["error"]["code"].as_str()),
            (404, Some("sandbox_not_found")),
            "{p}"
        );
    }
    assert_eq!(
        wait_done(&server, mine_id, Duration::from_secs(60))["state"],
        "succeeded"
    );

    // Bad input.
    let path = format!("/v1/sandboxes/{b}/jobs");
    server
        .post("/v1/sandboxes/sb_nope/jobs", &json!({"code": "1"}))
        .expect_error(404, "sandbox_not_found");
    server
        .get("/v1/jobs/job_nope")
        .expect_error(404, "job_not_found");
    server
        .delete("/v1/jobs/job_nope")
        .expect_error(404, "job_not_found");
    server
        .get(&format!("/v1/jobs/{}", "x".repeat(5000)))
        .expect_error(404, "job_not_found");
    let big = "#".repeat((1 << 20) + 1);
    server
        .post(&path, &json!({"code": big}))
        .expect_error(413, "payload_too_large");
    server
        .post_raw(&path, "application/json", "{\"code\": ")
        .expect_error(400, "invalid_request");
    server
        .post_raw(&path, "text/plain", "print(1)")
        .expect_error(400, "invalid_request");
    server
        .post(&path, &json!({"language": "python"}))
        .expect_error(400, "invalid_request");
    server
        .post(&path, &json!({"code": "1", "language": "cobol"}))
        .expect_error(400, "invalid_request");
    server
        .post(&path, &json!({"code": "1", "timeout": -1}))
        .expect_error(400, "invalid_argument");
    server
        .post(&path, &json!({"code": "1", "timeout": 1e9}))
        .expect_error(400, "invalid_argument");
    server
        .post(
            &path,
            &json!({"code": "1", "metadata": {"k": "v".repeat(20_000)}}),
        )
        .expect_error(400, "invalid_argument");
    server
        .post(&path, &json!({"code": "1", "metadata": "x"}))
        .expect_error(400, "invalid_request");
    server
        .get(&format!("{path}?state=nope"))
        .expect_error(400, "invalid_argument");
    server
        .get(&format!("{path}?limit=x"))
        .expect_error(400, "invalid_request");
    let r: Resp = server.post(&path, &json!({"code": "1", "idempotent": "yes"}));
    r.expect_error(400, "invalid_request");
}

/// One tenant cannot fill the server's job queue for every other (a bound per tenant), and a
/// job runs as its key when its turn comes: a key revoked while its job waited fails the job,
/// saying why, and nothing runs.
/// A job that holds its permit until the file `go` appears in its sandbox (at most two minutes,
/// so a test that fails first does not leave it running).
const BLOCKER: &str = "import os, time\n\
    t = time.monotonic()\n\
    while not os.path.exists('go') and time.monotonic() - t < 120:\n    \
    time.sleep(0.05)";

#[test]
fn a_tenant_cannot_fill_the_queue_and_a_revoked_key_stops_its_waiting_jobs() {
    let server = TestServer::start_with_env(&[
        ("SANDLOT_JOBS_CONCURRENCY", "1"),
        ("SANDLOT_JOBS_QUEUE_MAX", "8"),
        ("SANDLOT_JOBS_QUEUE_PER_TENANT", "3"),
    ]);
    server
        .post("/v1/tenants", &json!({"name": "beta"}))
        .expect(201);
    let created = server
        .post("/v1/keys", &json!({"tenant": "beta", "role": "member"}))
        .expect(201)
        .clone();
    let (key, key_id) = (
        created["key"].as_str().unwrap().to_owned(),
        created["id"].as_str().unwrap().to_owned(),
    );
    let beta = server.client_with_key(Some(&key));
    // A second key of beta's reads the jobs once the first is revoked.
    let reader_key = server
        .post("/v1/keys", &json!({"tenant": "beta", "role": "member"}))
        .expect(201)["key"]
        .as_str()
        .unwrap()
        .to_owned();
    let reader = server.client_with_key(Some(&reader_key));
    let read = |path: &str| -> Value {
        reader
            .get(format!("{}{path}", server.url()))
            .send()
            .unwrap()
            .json()
            .unwrap()
    };
    let post = |path: &str, body: Value| -> (u16, Value, Option<String>) {
        let r = beta
            .post(format!("{}{path}", server.url()))
            .json(&body)
            .send()
            .unwrap();
        let retry = r
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        (r.status().as_u16(), r.json().unwrap_or(Value::Null), retry)
    };
    let (s, sb, _) = post("/v1/sandboxes", json!({}));
    assert_eq!(s, 201, "{sb}");
    let sb = sb["id"].as_str().unwrap().to_owned();
    // The operator's own sandbox holds the only permit, so beta's jobs wait, until the test
    // writes `go` (after the revocation). Under the whole suite's load a beta job twice took
    // the permit first (the fourth submission was then accepted): the blocker is running
    // before beta submits, and holds the permit for as long as the test needs, not 3 s.
    let a = server.create_sandbox();
    let blocker = submit(&server, &a, json!({"code": BLOCKER}));
    let blocker_id = blocker["id"].as_str().unwrap().to_owned();
    assert!(
        common::wait_until(Duration::from_secs(60), || job(&server, &blocker_id)
            ["state"]
            == "running"),
        "{}",
        job(&server, &blocker_id)
    );
    let mut waiting = Vec::new();
    for _ in 0..3 {
        let (s, j, _) = post(
            &format!("/v1/sandboxes/{sb}/jobs"),
            json!({"code": "open('ran.txt', 'a').write('x')"}),
        );
        assert_eq!(s, 202, "{j}");
        waiting.push(j["id"].as_str().unwrap().to_owned());
    }
    let (s, full, retry) = post(&format!("/v1/sandboxes/{sb}/jobs"), json!({"code": "1"}));
    assert_eq!(
        (s, full["error"]["code"].as_str()),
        (429, Some("job_queue_full"))
    );
    assert!(
        full["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tenant"),
        "{full}"
    );
    assert!(retry.is_some(), "429 without Retry-After");
    // The server's queue is not full: the operator's tenant still submits.
    submit(&server, &a, json!({"code": "2"}));

    // Revoked while its jobs wait: they fail when their turn comes, and none runs.
    server.delete(&format!("/v1/keys/{key_id}")).expect(200);
    server
        .put_bytes(&format!("/v1/sandboxes/{a}/files/go"), "go")
        .expect(201);
    for id in &waiting {
        let mut j = Value::Null;
        assert!(
            common::wait_until(Duration::from_secs(60), || {
                j = read(&format!("/v1/jobs/{id}"));
                TERMINAL.contains(&j["state"].as_str().unwrap_or(""))
            }),
            "{j}"
        );
        assert_eq!(j["state"], "failed", "{j}");
        assert!(j["reason"].as_str().unwrap().contains("revoked"), "{j}");
        assert!(j["execution_id"].is_null(), "{j}");
    }
    let j = wait_done(
        &server,
        blocker["id"].as_str().unwrap(),
        Duration::from_secs(60),
    );
    assert_eq!(j["state"], "succeeded", "{j}");
    let listed = read(&format!("/v1/sandboxes/{sb}/files"));
    assert!(listed["entries"].is_array(), "{listed}");
    assert!(!listed.to_string().contains("ran.txt"), "{listed}");
}
