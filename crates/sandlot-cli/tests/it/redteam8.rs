//! Red-team cases for issue 8's record (audit, events, webhooks, jobs) that its own suites do
//! not cover, each against a real `sandlot serve` on 127.0.0.1: a client that hangs up before
//! its answer must still leave an audit record, a webhook URL spelled oddly must not reach
//! loopback or the metadata address, and another tenant's events and jobs stay out of reach
//! in every spelling.

use crate::common;

use common::{wait_until, As, TestServer};
use serde_json::{json, Value};
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The audit records whose action starts with `action` (the operator's view).
fn records(server: &TestServer, action: &str) -> Vec<Value> {
    let q = action
        .replace(' ', "%20")
        .replace('{', "%7B")
        .replace('}', "%7D");
    let r = server.get(&format!("/v1/audit?limit=1000&action={q}"));
    r.expect(200)["records"].as_array().unwrap().clone()
}

/// One HTTP/2 frame: length, type, flags, stream, payload.
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let n = payload.len() as u32;
    let mut f = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An HPACK header list of literals without indexing (no Huffman): what any HTTP/2 server
/// must read, so the test needs no HTTP/2 client library.
fn hpack(headers: &[(&str, &str)]) -> Vec<u8> {
    fn int7(out: &mut Vec<u8>, n: usize) {
        if n < 127 {
            out.push(n as u8);
        } else {
            out.push(127);
            let mut n = n - 127;
            while n >= 128 {
                out.push((n % 128 + 128) as u8);
                n /= 128;
            }
            out.push(n as u8);
        }
    }
    let mut out = Vec::new();
    for (k, v) in headers {
        out.push(0);
        int7(&mut out, k.len());
        out.extend_from_slice(k.as_bytes());
        int7(&mut out, v.len());
        out.extend_from_slice(v.as_bytes());
    }
    out
}

/// Sends `POST path` with a JSON body over HTTP/2 (prior knowledge, as gRPC-style and
/// HTTP/2-enabled agent clients do), waits `linger`, then resets the stream (`CANCEL`, what a
/// client's own timeout does) and hangs up before any answer.
fn post_h2_and_reset(server: &TestServer, path: &str, body: &Value, linger: Duration) {
    use std::io::Read;
    let addr = server.url().trim_start_matches("http://").to_owned();
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
    s.write_all(&h2_frame(0x4, 0, 0, &[])).unwrap();
    // The server's SETTINGS, acknowledged (an unsolicited ACK would be a protocol error).
    let mut buf = [0u8; 4096];
    let _ = s.read(&mut buf);
    s.write_all(&h2_frame(0x4, 0x1, 0, &[])).unwrap();
    let body = body.to_string();
    let auth = format!("Bearer {}", server.key());
    let len = body.len().to_string();
    let block = hpack(&[
        (":method", "POST"),
        (":scheme", "http"),
        (":authority", &addr),
        (":path", path),
        ("authorization", &auth),
        ("content-type", "application/json"),
        ("content-length", &len),
    ]);
    s.write_all(&h2_frame(0x1, 0x4, 1, &block)).unwrap();
    s.write_all(&h2_frame(0x0, 0x1, 1, body.as_bytes()))
        .unwrap();
    std::thread::sleep(linger);
    s.write_all(&h2_frame(0x3, 0, 1, &8u32.to_be_bytes()))
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let _ = s.shutdown(std::net::Shutdown::Both);
}

/// The audit records of `action` naming sandbox `id`, waiting up to 30 s for at least `n`.
fn wait_records(server: &TestServer, action: &str, id: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let recs: Vec<Value> = records(server, action)
            .into_iter()
            .filter(|r| r["target"]["sandbox"] == id)
            .collect();
        if recs.len() >= n || Instant::now() > deadline {
            return recs;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn a_request_abandoned_before_its_answer_is_still_recorded() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let path = format!("/v1/sandboxes/{id}/execute");
    let action = "POST /v1/sandboxes/{id}/execute";
    post_h2_and_reset(
        &server,
        &path,
        &json!({"code": "import time; time.sleep(5)"}),
        Duration::from_millis(1500),
    );
    // The execution itself may be recorded by the runtime (`sandbox.executed`, by `system`);
    // the request — which key asked — must be on record too, saying the client went away.
    let recs = wait_records(&server, action, &id, 1);
    assert_eq!(
        recs.len(),
        1,
        "an execute whose HTTP/2 stream was reset left no audit record of who asked: \
         {recs:?}\n{}",
        server.stderr()
    );
    let r = &recs[0];
    assert!(r["actor"]["key_prefix"].is_string(), "{r}");
    assert_eq!(r["tenant"], "default", "{r}");
    assert_eq!(r["outcome"], "error:client_closed_request", "{r}");
    assert_eq!(r["status"], 499, "{r}");
    assert!(r["request_sha256"].is_string(), "{r}");
    assert!(r["response_sha256"].is_null(), "{r}");

    // A request answered in full is recorded once, as answered (the guard stands down).
    assert_eq!(server.execute(&id, "1+1")["end_state"], "ok");
    let recs = wait_records(&server, action, &id, 2);
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert_eq!(recs[1]["outcome"], "ok", "{:?}", recs[1]);
    assert_eq!(recs[1]["status"], 200);

    // The chain still verifies.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandlot"))
        .args(["audit", "verify", "--dir"])
        .arg(server.data_dir().join("audit"))
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
fn an_http1_client_that_hangs_up_is_recorded_as_answered() {
    // HTTP/1 connections allow half-close, so the handler runs to its end: the record is the
    // ordinary one. (What a future change to that setting must keep recording.)
    let server = TestServer::start();
    let id = server.create_sandbox();
    let addr = server.url().trim_start_matches("http://").to_owned();
    let mut s = TcpStream::connect(&addr).unwrap();
    let body = json!({"code": "import time; time.sleep(2)"}).to_string();
    let head = format!(
        "POST /v1/sandboxes/{id}/execute HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        server.key(),
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body.as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    s.shutdown(std::net::Shutdown::Both).unwrap();
    let recs = wait_records(&server, "POST /v1/sandboxes/{id}/execute", &id, 1);
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert!(recs[0]["actor"]["key_prefix"].is_string());
}

#[test]
fn webhook_urls_in_odd_spellings_cannot_reach_loopback_or_metadata() {
    let server = TestServer::start();
    let hostile = [
        "http://2130706433/",               // 127.0.0.1 as one decimal number
        "http://0x7f000001/",               // … in hex
        "http://0177.0.0.1/",               // … in octal
        "http://127.1/",                    // … shortened
        "http://0/",                        // 0.0.0.0
        "http://[::]/",                     // unspecified
        "http://[::1]:8080/",               // IPv6 loopback
        "http://[::ffff:127.0.0.1]/",       // IPv4-mapped loopback
        "http://[::ffff:169.254.169.254]/", // IPv4-mapped metadata
        "http://[::ffff:a9fe:a9fe]/",       // … in hex
        "http://[64:ff9b::a9fe:a9fe]/",     // NAT64 of the metadata address
        "http://[2002:a9fe:a9fe::1]/",      // 6to4 of it
        "http://[fd00:ec2::254]/",          // a cloud's IPv6 metadata address
        "http://[fe80::1]/",                // link-local
        "http://169.254.169.254/latest/meta-data/",
        "http://2852039166/",            // 169.254.169.254 as one number
        "http://localhost/",             // a name that resolves to loopback
        "http://user:pw@example.com/",   // credentials
        "http://@127.0.0.1/",            // an empty userinfo before loopback
        "http://example.com@127.0.0.1/", // userinfo that reads like a host
        "file:///etc/passwd",
        "gopher://127.0.0.1:25/",
    ];
    for url in hostile {
        let r = server.post("/v1/webhooks", &json!({ "url": url }));
        assert_eq!(r.status, 400, "{url} was accepted: {}", r.text);
    }
    let long = format!("https://example.com/{}", "a".repeat(5000));
    let r = server.post("/v1/webhooks", &json!({ "url": long }));
    assert_eq!(r.status, 400, "a 5 KB URL was accepted");
    let listed = server.get("/v1/webhooks");
    assert_eq!(listed.expect(200)["webhooks"], json!([]), "{}", listed.text);

    // A name that does not resolve when the webhook is created is accepted (it may resolve
    // later); deliveries check the addresses it resolves to then, so a loopback listener is
    // never called, whatever the spelling. Whether a name resolves here depends on the
    // machine's hosts file, so each is either refused now, saying why, or accepted and then
    // attempted (its record counts the attempt and says why it failed): a hook that was never
    // attempted would prove nothing about the listener.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut accepted = Vec::new();
    for host in ["LOCALHOST.", "localhost.localdomain.", "ip6-localhost"] {
        let url = format!("http://{host}:{port}/hook");
        let r = server.post("/v1/webhooks", &json!({ "url": url }));
        match r.status {
            201 => accepted.push(r.body["id"].as_str().unwrap().to_owned()),
            _ => {
                r.expect_error(400, "invalid_argument");
                assert!(r.message().contains("refused"), "{url}: {}", r.text);
            }
        }
    }
    server.create_sandbox();
    let hooks = || -> Vec<Value> {
        server.get("/v1/webhooks").expect(200)["webhooks"]
            .as_array()
            .unwrap()
            .clone()
    };
    let attempted = |h: &Value| {
        h["deliveries"]["attempts"].as_u64().unwrap_or(0) >= 1
            && h["deliveries"]["last_error"].is_string()
    };
    let all_attempted = wait_until(Duration::from_secs(60), || {
        hooks()
            .iter()
            .filter(|h| accepted.iter().any(|id| h["id"] == id.as_str()))
            .all(attempted)
    });
    let listed = hooks();
    assert!(all_attempted, "a delivery was never attempted: {listed:#?}");
    assert_eq!(listed.len(), accepted.len(), "{listed:#?}");
    assert!(
        listener.accept().is_err(),
        "a webhook delivery reached a loopback listener"
    );
    for h in listed {
        assert_eq!(h["deliveries"]["delivered"], 0, "{h}");
        assert!(h.get("secret").is_none(), "a listing shows a secret: {h}");
    }
}

#[test]
fn another_tenants_events_are_refused_in_every_spelling() {
    let server = TestServer::start();
    let key = server.tenant("acme").role("member").key();
    let acme = As::key(&server, &key);
    for t in [
        "default",
        "default%20",
        "DEFAULT",
        "%2A",
        "*",
        "acme%00",
        "acme%20",
        "",
    ] {
        let r = acme.get(&format!("/v1/events?tenant={t}"));
        if t.is_empty() {
            // An empty name is not the caller's and not a wildcard.
            assert!(r.status == 403 || r.status == 400, "tenant={t}: {}", r.text);
            continue;
        }
        assert_eq!(r.status, 403, "tenant={t}: {}", r.text);
        assert_eq!(r.code(), "forbidden", "tenant={t}");
    }
    let r = acme.get("/v1/events?kinds=executed,EXECUTED");
    assert_eq!(r.status, 400, "{}", r.text);
}

#[test]
fn another_tenants_jobs_are_missing_on_every_route() {
    let server = TestServer::start();
    let key = server.tenant("acme").role("member").key();
    let acme = As::key(&server, &key);
    let id = server.create_sandbox();
    let job = server
        .post(
            &format!("/v1/sandboxes/{id}/jobs"),
            &json!({"code": "import time; time.sleep(30)", "metadata": {"who": "default"}}),
        )
        .expect(202)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    acme.get(&format!("/v1/jobs/{job}"))
        .expect_error(404, "job_not_found");
    acme.delete(&format!("/v1/jobs/{job}"))
        .expect_error(404, "job_not_found");
    acme.get(&format!("/v1/jobs/{job}/events"))
        .expect_error(404, "job_not_found");
    acme.get(&format!("/v1/sandboxes/{id}/jobs"))
        .expect_error(404, "sandbox_not_found");
    acme.post(&format!("/v1/sandboxes/{id}/jobs"), &json!({"code": "1"}))
        .expect_error(404, "sandbox_not_found");
    // Percent-encoded spellings of the same ids are the same ids.
    let enc: String = job.bytes().map(|b| format!("%{b:02X}")).collect();
    acme.get(&format!("/v1/jobs/{enc}"))
        .expect_error(404, "job_not_found");
    let enc_sb: String = id.bytes().map(|b| format!("%{b:02X}")).collect();
    acme.get(&format!("/v1/sandboxes/{enc_sb}/jobs"))
        .expect_error(404, "sandbox_not_found");
    // The owner still sees it, untouched.
    let mine = server.get(&format!("/v1/jobs/{job}"));
    let st = mine.expect(200)["state"].as_str().unwrap().to_owned();
    assert!(st == "queued" || st == "running", "{}", mine.text);
    server.delete(&format!("/v1/jobs/{job}"));
}
