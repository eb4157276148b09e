//! Lifecycle events and webhooks against a real `sandlot serve` on 127.0.0.1: the SSE stream
//! shows a tenant its own sandboxes' created, executed, paused, resumed, forked, killed and
//! expired events and nobody else's, filters by kind, is bounded per tenant; webhooks are
//! delivered to a loopback receiver with a signature that verifies, a receiver that answers
//! 500 or hangs gets a bounded number of attempts while executions stay fast, and URLs that
//! would make the server call its own network (SSRF) are refused.

use crate::common;

use common::TestServer;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// The events of an SSE response, read on a thread: (event, id, data). Dropping it closes the
/// connection at the next line the server sends (an event or a keep-alive comment).
struct SseReader {
    rx: mpsc::Receiver<(String, String, Value)>,
    dropped: Arc<AtomicBool>,
}

impl Drop for SseReader {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::Relaxed);
    }
}

impl SseReader {
    fn open(client: &reqwest::blocking::Client, url: String) -> SseReader {
        let resp = client.get(&url).send().expect("GET events");
        assert_eq!(resp.status().as_u16(), 200, "{url}");
        assert!(resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream"));
        let (tx, rx) = mpsc::channel();
        let dropped = Arc::new(AtomicBool::new(false));
        let closed = dropped.clone();
        std::thread::spawn(move || {
            let (mut name, mut id, mut data) = (String::new(), String::new(), String::new());
            for line in BufReader::new(resp).lines() {
                let Ok(line) = line else { return };
                if closed.load(Ordering::Relaxed) {
                    return;
                }
                if let Some(v) = line.strip_prefix("event:") {
                    name = v.trim().to_owned();
                } else if let Some(v) = line.strip_prefix("id:") {
                    id = v.trim().to_owned();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim_start());
                } else if line.is_empty() && !name.is_empty() {
                    let v = serde_json::from_str(&data).unwrap_or(Value::Null);
                    if tx
                        .send((std::mem::take(&mut name), std::mem::take(&mut id), v))
                        .is_err()
                    {
                        return;
                    }
                    data.clear();
                }
            }
        });
        SseReader { rx, dropped }
    }

    /// Every event that arrives within `quiet` of the previous one (at most `max` in all).
    fn drain(&self, quiet: Duration, max: Duration) -> Vec<(String, String, Value)> {
        let deadline = Instant::now() + max;
        let mut out = Vec::new();
        while Instant::now() < deadline {
            match self.rx.recv_timeout(quiet) {
                Ok(e) => out.push(e),
                Err(_) => break,
            }
        }
        out
    }

    /// Waits for an event matching `f`.
    fn wait_for(&self, timeout: Duration, f: impl Fn(&str, &Value) -> bool) -> Option<Value> {
        let deadline = Instant::now() + timeout;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.rx.recv_timeout(left) {
                Ok((name, _, v)) if f(&name, &v) => return Some(v),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        None
    }
}

fn kinds_of(events: &[(String, String, Value)], sandbox: &str) -> Vec<String> {
    events
        .iter()
        .filter(|(_, _, v)| v["sandbox_id"] == sandbox)
        .map(|(k, _, _)| k.clone())
        .collect()
}

fn new_tenant_key(server: &TestServer, name: &str) -> String {
    server
        .post("/v1/tenants", &json!({"name": name}))
        .expect(201);
    server
        .post("/v1/keys", &json!({"tenant": name, "role": "admin"}))
        .expect(201)["key"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn the_event_stream_tells_each_tenant_its_own_lifecycle() {
    let server = TestServer::start_with_env(&[("SANDLOT_EVENT_STREAMS_PER_TENANT", "4")]);
    let beta_key = new_tenant_key(&server, "beta");
    let beta = server.client_with_key(Some(&beta_key));
    let url = |q: &str| format!("{}/v1/events{q}", server.url());
    let mine = SseReader::open(server.client(), url(""));
    let only_executed = SseReader::open(server.client(), url("?kinds=executed"));
    let everyone = SseReader::open(server.client(), url("?tenant=*"));
    let theirs = SseReader::open(&beta, url(""));

    // The default tenant's sandbox goes through its life.
    let a = server.create_sandbox_with(&json!({"idle_timeout": 2}))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let b = server.create_sandbox();
    server.execute(&b, "x = 1");
    server
        .post(&format!("/v1/sandboxes/{b}/pause"), &json!({}))
        .expect(200);
    server
        .post(&format!("/v1/sandboxes/{b}/resume"), &json!({}))
        .expect(200);
    let forked = server
        .post(&format!("/v1/sandboxes/{b}/fork"), &json!({"count": 1}))
        .expect(201)
        .clone();
    let child = forked["sandboxes"][0]["id"].as_str().unwrap().to_owned();
    server.delete(&format!("/v1/sandboxes/{b}")).expect(204);
    // Beta's sandbox.
    let r = beta
        .post(format!("{}/v1/sandboxes", server.url()))
        .json(&json!({}))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let beta_sb = r.json::<Value>().unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // `a` expires by its idle timeout.
    let expired = mine.wait_for(Duration::from_secs(60), |k, v| {
        k == "expired" && v["sandbox_id"] == a.as_str()
    });
    assert!(expired.is_some(), "no expired event for {a}");
    let seen = mine.drain(Duration::from_secs(2), Duration::from_secs(10));
    let _ = seen;
    // Collected from the start on a second look: the "everyone" stream kept them all.
    let all = everyone.drain(Duration::from_secs(2), Duration::from_secs(20));
    let b_kinds = kinds_of(&all, &b);
    for k in [
        "created", "executed", "paused", "resumed", "forked", "killed",
    ] {
        assert!(
            b_kinds.iter().any(|x| x == k),
            "no {k} for {b}: {b_kinds:?}"
        );
    }
    assert_eq!(
        kinds_of(&all, &child).first().map(String::as_str),
        Some("created")
    );
    assert!(kinds_of(&all, &a).iter().any(|k| k == "expired"));
    assert!(
        kinds_of(&all, &beta_sb).iter().any(|k| k == "created"),
        "the operator's * sees beta"
    );
    // Ids are the events' seq, increasing.
    let seqs: Vec<u64> = all
        .iter()
        .filter_map(|(_, id, _)| id.parse().ok())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    for (k, id, v) in &all {
        assert_eq!(v["kind"], k.as_str());
        assert_eq!(v["seq"].to_string(), *id);
    }
    let created = all
        .iter()
        .find(|(k, _, v)| k == "executed" && v["sandbox_id"] == b.as_str())
        .unwrap();
    assert_eq!(created.2["detail"]["end_state"], "ok");
    assert!(created.2["execution_id"]
        .as_str()
        .unwrap()
        .starts_with("ex_"));

    // Beta sees its own sandbox and nothing of default's.
    let beta_events = theirs.drain(Duration::from_secs(1), Duration::from_secs(5));
    assert!(!beta_events.is_empty());
    for (_, _, v) in &beta_events {
        assert_eq!(v["tenant"], "beta", "beta saw {v}");
    }
    // The filtered stream only has executed events.
    let ex = only_executed.drain(Duration::from_secs(1), Duration::from_secs(5));
    assert!(!ex.is_empty());
    assert!(ex.iter().all(|(k, _, _)| k == "executed"), "{ex:?}");

    // Beta may not ask for everyone's, or default's; bad kinds are refused.
    for q in ["?tenant=*", "?tenant=default"] {
        let r = beta.get(url(q)).send().unwrap();
        assert_eq!(r.status().as_u16(), 403, "{q}");
    }
    let r = server.get("/v1/events?kinds=executed,exploded");
    r.expect_error(400, "invalid_argument");
    let r = server.client_with_key(None).get(url("")).send().unwrap();
    assert_eq!(r.status().as_u16(), 401);

    // Streams per tenant are bounded (4 for default): a fifth one is refused.
    let fourth = SseReader::open(server.client(), url(""));
    let r = server.get("/v1/events");
    r.expect_error(429, "tenant_quota_exceeded");
    assert!(r.headers.contains_key("retry-after"));
    drop(mine);
    drop(only_executed);
    drop(fourth);
    // A closed stream frees its slot (the server notices when it next writes to it: events
    // are made for it to write).
    let poke = server.create_sandbox();
    assert!(common::wait_until(Duration::from_secs(40), || {
        server.execute(&poke, "1");
        let resp = server.client().get(url("")).send().unwrap();
        resp.status().as_u16() == 200
    }));
    // A stream whose client closed frees its slot within two keep-alive writes (2 s apart)
    // even with nothing happening: a console tab closed or reloaded does not hold it for long.
    // (`everyone` still holds one of default's four.)
    let hold_all = |within: Duration| -> Vec<reqwest::blocking::Response> {
        let deadline = Instant::now() + within;
        let mut held = Vec::new();
        while held.len() < 3 && Instant::now() < deadline {
            let r = server.client().get(url("")).send().unwrap();
            match r.status().as_u16() {
                200 => held.push(r),
                429 => std::thread::sleep(Duration::from_millis(200)),
                other => panic!("events answered {other}"),
            }
        }
        held
    };
    let held = hold_all(Duration::from_secs(20));
    assert_eq!(held.len(), 3, "the three free slots never came free");
    drop(held);
    let again = Instant::now();
    let held = hold_all(Duration::from_secs(9));
    assert_eq!(
        held.len(),
        3,
        "closed streams still held their slots {:?} after the close",
        again.elapsed()
    );
    drop(held);
    // Beta's own slots are its own.
    let r = beta.get(url("")).send().unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

// ---------------------------------------------------------------------------------------------
// A loopback webhook receiver.

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Ok,
    Fail,
    Hang,
}

#[derive(Debug, Clone)]
struct Received {
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

struct Receiver {
    url: String,
    got: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    fn start(mode: Mode) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let got = Arc::new(Mutex::new(Vec::new()));
        let store = got.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let store = store.clone();
                std::thread::spawn(move || handle(conn, mode, &store));
            }
        });
        Receiver { url, got }
    }

    fn got(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }
}

fn handle(mut conn: TcpStream, mode: Mode, store: &Mutex<Vec<Received>>) {
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut headers = HashMap::new();
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    store.lock().unwrap().push(Received { headers, body });
    match mode {
        Mode::Ok => {
            let _ = conn
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
        Mode::Fail => {
            let _ = conn.write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
        Mode::Hang => std::thread::sleep(Duration::from_secs(60)),
    }
}

fn hmac_sha256(key: &[u8], msg: &[u8]) -> String {
    // HMAC (RFC 2104) over SHA-256, written out rather than adding a crate to the tests.
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let pad = |b: u8| k.iter().map(|x| x ^ b).collect::<Vec<u8>>();
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(msg)
        .finalize();
    hex::encode(
        Sha256::new()
            .chain_update(pad(0x5c))
            .chain_update(inner)
            .finalize(),
    )
}

/// Checks a delivery's signature with `secret`; returns its event.
#[track_caller]
fn verify(r: &Received, secret: &str) -> Value {
    let sig = &r.headers["sandlot-signature"];
    let (t, v1) = sig.split_once(',').unwrap();
    let t = t.strip_prefix("t=").unwrap();
    let v1 = v1.strip_prefix("v1=").unwrap();
    let mut msg = t.as_bytes().to_vec();
    msg.push(b'.');
    msg.extend_from_slice(&r.body);
    assert_eq!(hmac_sha256(secret.as_bytes(), &msg), v1, "bad signature");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(now.abs_diff(t.parse::<u64>().unwrap()) < 120, "stale t");
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(
        body["delivery_id"].as_str(),
        Some(r.headers["sandlot-delivery"].as_str())
    );
    assert_eq!(
        body["event"]["kind"].as_str(),
        Some(r.headers["sandlot-event"].as_str())
    );
    body
}

#[test]
fn webhooks_are_signed_retried_within_bounds_and_never_slow_executions() {
    let server = TestServer::start_with_env(&[
        ("SANDLOT_WEBHOOK_ALLOW_PRIVATE", "1"),
        ("SANDLOT_WEBHOOK_BACKOFF_MS", "50"),
        ("SANDLOT_WEBHOOK_TIMEOUT_MS", "500"),
        ("SANDLOT_WEBHOOK_MAX_ATTEMPTS", "3"),
    ]);
    let ok = Receiver::start(Mode::Ok);
    let fail = Receiver::start(Mode::Fail);
    let hang = Receiver::start(Mode::Hang);
    let mut secrets = HashMap::new();
    let mut ids = HashMap::new();
    for (name, r) in [("ok", &ok), ("fail", &fail), ("hang", &hang)] {
        let w = server
            .post(
                "/v1/webhooks",
                &json!({"url": r.url, "events": ["executed", "killed"]}),
            )
            .expect(201)
            .clone();
        assert!(w["id"].as_str().unwrap().starts_with("wh_"));
        assert_eq!(w["events"], json!(["executed", "killed"]));
        secrets.insert(name, w["secret"].as_str().unwrap().to_owned());
        ids.insert(name, w["id"].as_str().unwrap().to_owned());
    }
    // The secret is shown once.
    let listed = server.get("/v1/webhooks").expect(200).clone();
    assert_eq!(listed["webhooks"].as_array().unwrap().len(), 3);
    assert!(!listed.to_string().contains("whsec_"), "{listed}");

    // Executions stay fast with one endpoint failing and one hanging.
    let sb = server.create_sandbox();
    server.execute(&sb, "0");
    let mut slowest = Duration::ZERO;
    for i in 0..10 {
        let t = Instant::now();
        server.execute(&sb, &format!("{i} + 1"));
        slowest = slowest.max(t.elapsed());
    }
    assert!(
        slowest < Duration::from_secs(2),
        "an execution took {slowest:?}"
    );
    server.delete(&format!("/v1/sandboxes/{sb}")).expect(204);

    // The good receiver got each executed event (11) and the kill, signed.
    assert!(
        common::wait_until(Duration::from_secs(20), || ok.got().len() >= 12),
        "{}",
        ok.got().len()
    );
    let bodies: Vec<Value> = ok.got().iter().map(|r| verify(r, &secrets["ok"])).collect();
    let kinds: Vec<&str> = bodies
        .iter()
        .map(|b| b["event"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "executed").count(),
        11,
        "{kinds:?}"
    );
    assert_eq!(kinds.last(), Some(&"killed"));
    assert!(bodies
        .iter()
        .all(|b| b["webhook_id"] == ids["ok"].as_str() && b["event"]["sandbox_id"] == sb.as_str()));
    // Another webhook's secret does not verify it.
    let wrong = std::panic::catch_unwind(|| verify(&ok.got()[0], &secrets["fail"]));
    assert!(wrong.is_err());

    // The failing receiver: every event tried exactly 3 times under one delivery id.
    assert!(
        common::wait_until(Duration::from_secs(60), || fail.got().len() >= 36),
        "{}",
        fail.got().len()
    );
    std::thread::sleep(Duration::from_secs(2));
    let mut tries: HashMap<String, usize> = HashMap::new();
    for r in fail.got() {
        verify(&r, &secrets["fail"]);
        *tries
            .entry(r.headers["sandlot-delivery"].clone())
            .or_default() += 1;
    }
    assert_eq!(tries.len(), 12, "{tries:?}");
    assert!(tries.values().all(|n| *n == 3), "{tries:?}");
    // The hanging one: at most 3 attempts per event, each cut off by the timeout.
    let mut tries: HashMap<String, usize> = HashMap::new();
    for r in hang.got() {
        *tries
            .entry(r.headers["sandlot-delivery"].clone())
            .or_default() += 1;
    }
    assert!(!tries.is_empty());
    assert!(tries.values().all(|n| *n <= 3), "{tries:?}");

    // The listing counts what happened.
    let listed = server.get("/v1/webhooks").expect(200).clone();
    let by_id = |id: &str| {
        listed["webhooks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(by_id(&ids["ok"])["deliveries"]["delivered"], 12);
    assert_eq!(by_id(&ids["fail"])["deliveries"]["failed"], 12);
    assert_eq!(by_id(&ids["fail"])["deliveries"]["last_status"], 500);

    // Webhooks belong to their tenant; deleted ones stop.
    let beta = server.client_with_key(Some(&new_tenant_key(&server, "beta")));
    let r = beta
        .get(format!("{}/v1/webhooks", server.url()))
        .send()
        .unwrap();
    assert_eq!(r.json::<Value>().unwrap()["webhooks"], json!([]));
    let r = beta
        .delete(format!("{}/v1/webhooks/{}", server.url(), ids["ok"]))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    server
        .delete(&format!("/v1/webhooks/{}", ids["ok"]))
        .expect(204);
    server
        .delete(&format!("/v1/webhooks/{}", ids["ok"]))
        .expect_error(404, "webhook_not_found");
    let before = ok.got().len();
    let fail_before = fail.got().len();
    let sb = server.create_sandbox();
    server.execute(&sb, "1");
    // The webhook still registered got the event: it went out, so the deleted one's silence
    // means something (a fixed sleep would pass on a machine too slow to deliver at all).
    assert!(
        common::wait_until(Duration::from_secs(60), || fail.got().len() > fail_before),
        "the event never went out to the webhook that is still registered"
    );
    assert_eq!(ok.got().len(), before, "a deleted webhook was called");
}

/// The IPv6 spellings of loopback that webhooks used to accept (egress refused them), and
/// the host's own addresses: the one classifier both use refuses each at registration. The
/// spellings are refused even when the operator allows loopback and private addresses (they
/// are no way to call a local endpoint on purpose); the host's own addresses are refused as
/// loopback is.
#[test]
fn webhook_urls_in_ipv6_spellings_and_the_hosts_own_addresses_are_refused() {
    let spellings = [
        ("http://[::127.0.0.1]:8080/hook", "IPv4-compatible"),
        ("http://[::ffff:127.0.0.1]:8080/hook", "loopback"),
        ("http://[64:ff9b::7f00:1]:8080/hook", "NAT64"),
        ("http://[64:ff9b:1::1]:8080/hook", "NAT64"),
        ("http://[2002:7f00:1::1]:8080/hook", "6to4"),
        (
            "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]:8080/hook",
            "Teredo",
        ),
    ];
    let own: Vec<std::net::IpAddr> = sandlot_egress::read_own_addresses()
        .expect("reading this host's addresses")
        .into_iter()
        .filter(|ip| !ip.is_loopback())
        .collect();
    assert!(!own.is_empty(), "this host has no address but loopback");
    let own_urls: Vec<String> = own
        .iter()
        .map(|ip| match ip {
            std::net::IpAddr::V4(v4) => format!("http://{v4}:8080/hook"),
            std::net::IpAddr::V6(v6) => format!("http://[{v6}]:8080/hook"),
        })
        .collect();

    let server = TestServer::start();
    for (url, why) in spellings {
        let r = server.post("/v1/webhooks", &json!({ "url": url }));
        r.expect_error(400, "invalid_argument");
        assert!(r.message().contains(why), "{url}: {}", r.message());
    }
    for url in &own_urls {
        let r = server.post("/v1/webhooks", &json!({ "url": url }));
        r.expect_error(400, "invalid_argument");
        assert!(
            r.message().contains("this host's own addresses"),
            "{url}: {}",
            r.message()
        );
    }

    let lenient = TestServer::start_with_env(&[("SANDLOT_WEBHOOK_ALLOW_PRIVATE", "1")]);
    for (url, why) in spellings.iter().filter(|(u, _)| !u.contains("::ffff:")) {
        let r = lenient.post("/v1/webhooks", &json!({ "url": url }));
        r.expect_error(400, "invalid_argument");
        assert!(r.message().contains(why), "{url}: {}", r.message());
    }
    // What the operator allowed is allowed: loopback, in its own spellings.
    for url in [
        "http://127.0.0.1:8080/hook",
        "http://[::ffff:127.0.0.1]:8080/hook",
    ] {
        lenient
            .post("/v1/webhooks", &json!({ "url": url }))
            .expect(201);
    }
    assert_eq!(
        server.get("/v1/webhooks").expect(200)["webhooks"],
        json!([])
    );
}

#[test]
fn webhook_urls_that_reach_the_servers_own_network_are_refused() {
    // Without SANDLOT_WEBHOOK_ALLOW_PRIVATE: loopback and private addresses are refused too.
    let server = TestServer::start();
    for (url, why) in [
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://[fe80::1]/", "link-local"),
        ("http://[::ffff:169.254.169.254]/", "link-local"),
        (
            "http://127.0.0.1:8080/hook",
            "SANDLOT_WEBHOOK_ALLOW_PRIVATE",
        ),
        (
            "http://localhost:8080/hook",
            "SANDLOT_WEBHOOK_ALLOW_PRIVATE",
        ),
        ("http://10.0.0.1/hook", "private"),
        ("http://[::1]/hook", "private"),
        ("http://0.0.0.0/hook", "unspecified"),
        ("ftp://example.test/hook", "http or https"),
        ("file:///etc/passwd", "http or https"),
        ("http://user:pw@example.test/hook", "credentials"),
        ("not a url", "not a URL"),
    ] {
        let r = server.post("/v1/webhooks", &json!({ "url": url }));
        r.expect_error(400, "invalid_argument");
        assert!(r.message().contains(why), "{url}: {}", r.message());
    }
    let long = format!("https://example.test/{}", "a".repeat(3000));
    server
        .post("/v1/webhooks", &json!({ "url": long }))
        .expect_error(400, "invalid_argument");
    server
        .post(
            "/v1/webhooks",
            &json!({ "url": "https://example.test/h", "events": ["exploded"] }),
        )
        .expect_error(400, "invalid_argument");
    server
        .post("/v1/webhooks", &json!({ "events": [] }))
        .expect_error(400, "invalid_request");
    server
        .post_raw("/v1/webhooks", "application/json", "{")
        .expect_error(400, "invalid_request");
    server
        .delete("/v1/webhooks/wh_nope")
        .expect_error(404, "webhook_not_found");
    // A public name is accepted (it is only called when an event comes).
    let w = server
        .post("/v1/webhooks", &json!({ "url": "https://example.test/h" }))
        .expect(201)
        .clone();
    assert_eq!(w["events"], json!([]));
    assert!(server.data_dir().join("webhooks.key").exists());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(server.data_dir().join("webhooks.key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}
