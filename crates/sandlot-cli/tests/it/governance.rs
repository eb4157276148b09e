//! Governance end to end against a real `sandlot serve` on 127.0.0.1 (issue 7): the Cedar
//! policy set (each shipped example changes behaviour as written; decisions name the deciding
//! policy, the set's version and a latency; bad sets are refused and the old one stays),
//! tiers (no silent escalation or downgrade), egress through the per-sandbox proxy (off by
//! default; allowlisted domains and ports over plain HTTP and CONNECT (TLS only); other domains,
//! raw IPs, a name
//! rebinding to loopback and the metadata address refused and recorded; live allowlist
//! changes; restarts in place), `pip install` from a package index served on loopback,
//! secrets injected by the proxy and never visible inside (over plain HTTP, and over HTTPS
//! through the sandbox's own CA, against TLS upstreams on loopback with a CA made by the
//! test), and output guardrails (redaction
//! in results, streams and downloads; the canary contains the sandbox).
//!
//! Upstream servers run in this process on 127.0.0.2 (`pkgs.test`) and 127.0.0.3
//! (`api.test`); the server maps those names with `SANDLOT_EGRESS_HOSTS`, and `rebind.test`
//! to 127.0.0.1. No traffic leaves loopback.

use crate::common;

use common::{As, Resp, TestServer};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The server's name mapping for the proxy.
const EGRESS_HOSTS: &str =
    "pkgs.test=127.0.0.2,api.test=127.0.0.3,rebind.test=127.0.0.1,meta.test=169.254.169.254";

/// How long an egress effect (a record, a containment) may take to show.
const SETTLE: Duration = Duration::from_secs(15);

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/policies")
}

fn example(name: &str) -> String {
    std::fs::read_to_string(examples_dir().join(name))
        .unwrap_or_else(|e| panic!("examples/policies/{name}: {e}"))
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/governance")
}

/// A governed server: API keys on, the proxy's name mapping, one warm sandbox.
fn server() -> TestServer {
    TestServer::start_with_env(&[
        ("SANDLOT_EGRESS_HOSTS", EGRESS_HOSTS),
        ("SANDLOT_POOL_SIZE", "1"),
    ])
}

// ---------------------------------------------------------------------------------------------
// Requests with one key.

impl<'a> As<'a> {
    /// Replaces the policy set with Cedar text (`text/plain`); returns the response.
    fn put_policies(&self, text: &str) -> Resp {
        self.put_raw("/v1/policies", "text/plain", text.as_bytes().to_vec())
    }

    #[track_caller]
    fn create(&self, body: &Value) -> Value {
        let r = self.post("/v1/sandboxes", body);
        let s = r.expect(201).clone();
        common::assert_schema("Sandbox", &s);
        s
    }

    fn execute(&self, id: &str, code: &str) -> Resp {
        self.post(
            &format!("/v1/sandboxes/{id}/execute"),
            &json!({ "code": code, "timeout": 60 }),
        )
    }

    /// Runs `code` and returns its stdout (asserting the cell ran without an error).
    #[track_caller]
    fn run(&self, id: &str, code: &str) -> String {
        let r = self.execute(id, code);
        let b = r.expect(200);
        assert_eq!(b["end_state"], "ok", "{code}\n{b:#}");
        b["stdout"].as_str().unwrap_or_default().to_owned()
    }

    /// Runs `code`, whose last stdout line is JSON; returns it.
    #[track_caller]
    fn run_json(&self, id: &str, code: &str) -> Value {
        let out = self.run(id, code);
        let last = out.lines().last().unwrap_or_default();
        serde_json::from_str(last).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
    }

    fn decisions(&self, gate: &str) -> Vec<Value> {
        let r = self.get(&format!("/v1/decisions?gate={gate}&limit=50"));
        let b = r.expect(200);
        common::assert_schema("DecisionList", b);
        b["decisions"].as_array().unwrap().clone()
    }

    fn egress(&self, id: &str) -> Vec<Value> {
        let r = self.get(&format!("/v1/sandboxes/{id}/egress"));
        let b = r.expect(200);
        common::assert_schema("EgressList", b);
        b["egress"].as_array().unwrap().clone()
    }

    fn findings(&self, id: &str) -> Vec<Value> {
        let r = self.get(&format!("/v1/sandboxes/{id}/findings"));
        let b = r.expect(200);
        common::assert_schema("FindingList", b);
        b["findings"].as_array().unwrap().clone()
    }

    fn sandbox(&self, id: &str) -> Value {
        self.get(&format!("/v1/sandboxes/{id}")).expect(200).clone()
    }

    fn policy_version(&self) -> String {
        let r = self.get("/v1/policies");
        let b = r.expect(200);
        common::assert_schema("PolicyInfo", b);
        b["version"].as_str().unwrap().to_owned()
    }
}

fn admin(server: &TestServer) -> As<'_> {
    As::key(server, server.key())
}

/// Asserts a 403 `policy_denied` that names `policy`.
#[track_caller]
fn assert_denied_by(r: &Resp, policy: &str) {
    r.expect_error(403, "policy_denied");
    assert!(
        r.message().contains(policy),
        "the denial should name {policy}: {}",
        r.text
    );
}

/// The newest decision of `gate` on `resource` (as the record writes it).
#[track_caller]
fn newest(who: &As, gate: &str, resource: &str) -> Value {
    who.decisions(gate)
        .into_iter()
        .find(|d| d["resource"] == resource)
        .unwrap_or_else(|| {
            panic!(
                "no {gate} decision on {resource}: {:#?}",
                who.decisions(gate)
            )
        })
}

/// Asserts a recorded decision: allowed or not, by exactly these policies, in this set.
#[track_caller]
fn assert_decision(d: &Value, allowed: bool, policies: &[&str], version: &str) {
    assert_eq!(d["allowed"], allowed, "{d:#}");
    assert_eq!(d["policies"], json!(policies), "{d:#}");
    assert_eq!(d["version"], version, "{d:#}");
    let latency = d["latency_us"].as_f64().unwrap();
    assert!(
        latency > 0.0 && latency < 50_000.0,
        "latency {latency}: {d:#}"
    );
    assert!(!d["reason"].as_str().unwrap().is_empty(), "{d:#}");
}

fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// A fresh random-looking string of `n` alphanumerics (different in every run).
fn random_alnum(n: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut out = String::new();
    let mut counter = 0u64;
    while out.len() < n {
        let seed = format!("{:?}{}{counter}", Instant::now(), std::process::id());
        for b in Sha256::digest(seed.as_bytes()) {
            if out.len() < n {
                out.push(ALPHABET[b as usize % ALPHABET.len()] as char);
            }
        }
        counter += 1;
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Upstream servers on loopback.

/// One request an upstream server received.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A tiny HTTP/1.1 server on a loopback address: serves fixed paths (anything else answers
/// `hello from <name>`), one request per connection, and records what it was sent. It never
/// echoes a request back, so nothing it was sent can reach a sandbox through it.
struct Upstream {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Upstream {
    fn start(ip: &str, name: &'static str, routes: HashMap<String, (String, Vec<u8>)>) -> Upstream {
        let listener = TcpListener::bind((ip, 0)).unwrap_or_else(|e| panic!("bind {ip}: {e}"));
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let routes = Arc::new(routes);
        let s = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (s, routes) = (s.clone(), routes.clone());
                let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
                std::thread::spawn(move || serve_one(conn, name, &s, &routes));
            }
        });
        Upstream { addr, seen }
    }

    fn port(&self) -> u16 {
        self.addr.port()
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve_one(
    mut conn: impl Read + Write,
    name: &str,
    seen: &Mutex<Vec<Seen>>,
    routes: &HashMap<String, (String, Vec<u8>)>,
) {
    let mut reader = BufReader::new(&mut conn);
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let target = parts.next().unwrap_or_default().to_owned();
    let mut headers = Vec::new();
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 {
            break;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
            headers.push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    let mut body = vec![0u8; length.min(1 << 20)];
    let _ = reader.read_exact(&mut body);
    seen.lock().unwrap().push(Seen {
        method,
        target: target.clone(),
        headers,
    });
    let path = target.split('?').next().unwrap_or_default();
    let (ctype, body) = routes.get(path).cloned().unwrap_or_else(|| {
        (
            "text/plain".into(),
            format!("hello from {name}").into_bytes(),
        )
    });
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = conn.write_all(head.as_bytes());
    let _ = conn.write_all(&body);
}

impl Upstream {
    /// The same server over TLS (rustls, `config`'s certificate).
    fn start_tls(ip: &str, name: &'static str, config: Arc<rustls::ServerConfig>) -> Upstream {
        let listener = TcpListener::bind((ip, 0)).unwrap_or_else(|e| panic!("bind {ip}: {e}"));
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let s = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (s, config) = (s.clone(), config.clone());
                let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
                std::thread::spawn(move || {
                    let tls = rustls::ServerConnection::new(config).unwrap();
                    let mut stream = rustls::StreamOwned::new(tls, conn);
                    serve_one(&mut stream, name, &s, &HashMap::new());
                    stream.conn.send_close_notify();
                    let _ = stream.flush();
                });
            }
        });
        Upstream { addr, seen }
    }
}

/// A CA made for a test, and TLS server configurations with certificates it signed.
struct TestCa {
    key: rcgen::KeyPair,
    cert: rcgen::Certificate,
}

impl TestCa {
    fn new(name: &str) -> TestCa {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let cert = params.self_signed(&key).unwrap();
        TestCa { key, cert }
    }

    fn server_config(&self, names: &[&str]) -> Arc<rustls::ServerConfig> {
        let key = rcgen::KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(names).unwrap();
        params.use_authority_key_identifier_extension = true;
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let leaf = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone()], key)
        .unwrap();
        Arc::new(config)
    }
}

/// A TCP echo server (`echo:` + what it read), for CONNECT tunnels; with the first bytes of
/// every connection it was sent.
fn echo_server(ip: &str) -> (SocketAddr, Arc<Mutex<Vec<Vec<u8>>>>) {
    let listener = TcpListener::bind((ip, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    let got: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let g = got.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let g = g.clone();
            std::thread::spawn(move || {
                let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
                let mut buf = [0u8; 1024];
                if let Ok(n) = conn.read(&mut buf) {
                    g.lock().unwrap().push(buf[..n].to_vec());
                    let mut out = b"echo:".to_vec();
                    out.extend_from_slice(&buf[..n]);
                    let _ = conn.write_all(&out);
                }
            });
        }
    });
    (addr, got)
}

/// Python run inside sandboxes: `fetch(url, headers)` through the environment's proxy
/// (urllib reads `HTTP_PROXY`), `[status, body]`, status 0 with the error when there is no
/// response at all; `connect(host, port, payload)` opens a CONNECT tunnel by hand through the
/// proxy and returns `[status line, what came back]` (`hello(sni)` is a real ClientHello, the
/// only first bytes a tunnel relays); `direct(url)` bypasses the proxy.
const PY_NET: &str = r#"
import json, os, socket, urllib.request, urllib.error
def fetch(url, headers=None, data=None):
    req = urllib.request.Request(url, headers=headers or {}, data=data)
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return [r.status, r.read().decode(errors="replace")]
    except urllib.error.HTTPError as e:
        return [e.code, e.read().decode(errors="replace")]
    except Exception as e:
        return [0, repr(e)]
def direct(url):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=5) as r:
            return [r.status, r.read().decode(errors="replace")]
    except Exception as e:
        return [0, repr(e)]
def connect(host, port, payload=b"ping"):
    try:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    except Exception as e:
        return ["", repr(e)]
    s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        if not chunk:
            break
        head += chunk
    status, _, rest = head.partition(b"\r\n\r\n")
    status = status.split(b"\r\n")[0].decode(errors="replace")
    if " 200" not in status:
        return [status, rest.decode(errors="replace")]
    s.sendall(payload)
    got = rest
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
    except Exception:
        pass
    return [status, got.decode(errors="replace")]
def hello(sni):
    import ssl
    ctx = ssl.create_default_context()
    inb, outb = ssl.MemoryBIO(), ssl.MemoryBIO()
    try:
        ctx.wrap_bio(inb, outb, server_hostname=sni).do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outb.read()
def fronted(host, port, sni):
    import ssl
    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    head = s.recv(4096).decode(errors="replace").split("\r\n")[0]
    ctx = ssl.create_default_context()
    try:
        ctx.wrap_socket(s, server_hostname=sni)
        return [head, "handshake completed"]
    except Exception as e:
        return [head, repr(e)]
def raw_http(host_port, host_header):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    s.sendall(f"GET http://{host_port}/spoof HTTP/1.1\r\nHost: {host_header}\r\nConnection: close\r\n\r\n".encode())
    out = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        out += chunk
    return out.decode(errors="replace").split("\r\n")[0]
"#;

/// Waits until `cond` holds on the sandbox's egress records; returns them.
#[track_caller]
fn egress_until(who: &As, id: &str, what: &str, cond: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + SETTLE;
    loop {
        let e = who.egress(id);
        if cond(&e) {
            return e;
        }
        assert!(Instant::now() < deadline, "{what}: egress records {e:#?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn is_refused_record(e: &Value, host: &str) -> bool {
    e["host"] == host && e["allowed"] == false && !e["reason"].as_str().unwrap_or("").is_empty()
}

// ---------------------------------------------------------------------------------------------
// Policies.

#[test]
fn each_example_policy_changes_behaviour_as_written_and_decisions_name_it() {
    let server = server();
    let a = admin(&server);
    let v0 = a.policy_version();
    let info = a.get("/v1/policies");
    let ids: Vec<&str> = info.body["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    for id in [
        "allow-all-gates",
        "templates-without-packages",
        "templates-with-packages-operator",
        "isolated-tier",
        "trusted-tier-local",
        "contain-canary",
        "redact-secrets",
    ] {
        assert!(ids.contains(&id), "default set lacks {id}: {ids:?}");
    }
    // The files the server wrote are the set in force.
    let on_disk =
        std::fs::read_to_string(server.data_dir().join("policies/policies.cedar")).unwrap();
    assert!(on_disk.contains("@id(\"allow-all-gates\")"), "{on_disk}");
    assert!(server
        .data_dir()
        .join("policies/schema.cedarschema")
        .is_file());

    // --- code-size cap.
    let id = a.create(&json!({}))["id"].as_str().unwrap().to_owned();
    let r = a.put_policies(&example("code-size-cap.cedar"));
    let v1 = r.expect(200)["version"].as_str().unwrap().to_owned();
    common::assert_schema("PolicyInfo", &r.body);
    assert_ne!(v1, v0);
    assert_eq!(a.policy_version(), v1);
    let on_disk =
        std::fs::read_to_string(server.data_dir().join("policies/policies.cedar")).unwrap();
    assert!(
        on_disk.contains("code-size-cap"),
        "not persisted: {on_disk}"
    );
    assert_eq!(a.run(&id, "print(1 + 1)"), "2\n");
    let big = format!("x = 1\n#{}\nprint(x)", "a".repeat(10_001));
    let denied = a.execute(&id, &big);
    assert_denied_by(&denied, "code-size-cap");
    assert!(
        denied.message().contains("10000 bytes"),
        "the reason should be the policy's @reason: {}",
        denied.text
    );
    let sb = format!("Sandbox::\"{id}\"");
    let d = newest(&a, "execute", &sb);
    assert_decision(&d, false, &["code-size-cap"], &v1);
    let allowed = a
        .decisions("execute")
        .into_iter()
        .find(|d| d["allowed"] == true && d["resource"] == sb)
        .expect("the allowed execute is recorded");
    assert_decision(&allowed, true, &["allow-all-gates"], &v1);
    a.delete(&format!("/v1/sandboxes/{id}")).expect(204);

    // --- free plan has no network (sent as JSON this time).
    let free = server.tenant("freebie").role("member").key();
    let f = As::key(&server, &free);
    assert_eq!(f.get("/v1/whoami").expect(200)["plan"], "free");
    let r = a.put(
        "/v1/policies",
        &json!({ "policies": example("free-plan-no-network.cedar") }),
    );
    let v2 = r.expect(200)["version"].as_str().unwrap().to_owned();
    let r = f.post("/v1/sandboxes", &json!({ "network": ["pkgs.test"] }));
    assert_denied_by(&r, "free-plan-no-network");
    let d = newest(&f, "create_sandbox", "Template::\"default\"");
    assert_decision(&d, false, &["free-plan-no-network"], &v2);
    assert_eq!(d["tenant"], "freebie", "{d:#}");
    let ok = f.create(&json!({}));
    assert_eq!(ok["tier"], "isolated");
    // Nor can it be given network afterwards.
    let r = f.put(
        &format!("/v1/sandboxes/{}/network", ok["id"].as_str().unwrap()),
        &json!({ "allow": ["pkgs.test"] }),
    );
    assert_denied_by(&r, "free-plan-no-network");
    assert!(f
        .sandbox(ok["id"].as_str().unwrap())
        .get("network")
        .is_none());
    f.delete(&format!("/v1/sandboxes/{}", ok["id"].as_str().unwrap()))
        .expect(204);
    // The local plan is not the free plan.
    let local = a.create(&json!({ "network": ["pkgs.test"] }));
    assert_eq!(local["network"], json!(["pkgs.test"]));
    a.delete(&format!("/v1/sandboxes/{}", local["id"].as_str().unwrap()))
        .expect(204);
    // Another tenant's decisions are not listed to this one.
    assert!(
        a.decisions("create_sandbox")
            .iter()
            .all(|d| d["tenant"] != "freebie"),
        "the default tenant sees freebie's decisions"
    );

    // --- trusted tier only for tenant acme.
    let acme = As::key(
        &server,
        &server.tenant("acme").plan("pro").role("member").key(),
    );
    let other = As::key(
        &server,
        &server.tenant("other").plan("pro").role("member").key(),
    );
    let v3 = a
        .put_policies(&example("trusted-tier-acme.cedar"))
        .expect(200)["version"]
        .as_str()
        .unwrap()
        .to_owned();
    // Above the isolated tier's maximum (4096 pids), within the trusted tier's.
    let needs_trusted = json!({ "limits": { "pids": 8000 } });
    let asks = acme.create(&json!({ "tier": "trusted" }));
    assert_eq!(asks["tier"], "trusted", "{asks:#}");
    let needs = acme.create(&needs_trusted);
    assert_eq!(needs["tier"], "trusted", "{needs:#}");
    assert_eq!(needs["limits"]["pids"], 8000, "{needs:#}");
    let plain = acme.create(&json!({}));
    assert_eq!(
        plain["tier"], "isolated",
        "no escalation without need: {plain:#}"
    );
    let d = newest(&acme, "select_tier", "Tier::\"trusted\"");
    assert_decision(&d, true, &["any-tier"], &v3);
    assert_eq!(d["detail"]["needs_trusted_limits"], true, "{d:#}");
    // The trusted tier really runs with its limits.
    let tid = needs["id"].as_str().unwrap();
    assert_eq!(acme.sandbox(tid)["limits"]["pids"], 8000);
    assert_eq!(acme.run(tid, "print('trusted ok')"), "trusted ok\n");
    for s in [&asks, &needs, &plain] {
        acme.delete(&format!("/v1/sandboxes/{}", s["id"].as_str().unwrap()))
            .expect(204);
    }
    // Another tenant: refused, never quietly given less (or more).
    let r = other.post("/v1/sandboxes", &json!({ "tier": "trusted" }));
    assert_denied_by(&r, "trusted-tier-acme-only");
    let r = other.post("/v1/sandboxes", &needs_trusted);
    assert_denied_by(&r, "trusted-tier-acme-only");
    let d = newest(&other, "select_tier", "Tier::\"trusted\"");
    assert_decision(&d, false, &["trusted-tier-acme-only"], &v3);
    assert_eq!(d["tenant"], "other");
    assert!(
        other.get("/v1/sandboxes").expect(200)["sandboxes"]
            .as_array()
            .unwrap()
            .is_empty(),
        "a denied creation left a sandbox"
    );
    let iso = other.create(&json!({ "tier": "isolated" }));
    assert_eq!(iso["tier"], "isolated");
    let d = newest(&other, "select_tier", "Tier::\"isolated\"");
    assert_decision(&d, true, &["any-tier"], &v3);
    let bad = other.post("/v1/sandboxes", &json!({ "tier": "root" }));
    bad.expect_error(400, "invalid_argument");
}

#[test]
fn bad_policy_sets_are_refused_and_the_set_in_force_stays() {
    let server = server();
    let a = admin(&server);
    let id = a.create(&json!({}))["id"].as_str().unwrap().to_owned();
    let v0 = a.policy_version();
    let before = a.get("/v1/policies").text;
    let refused: Vec<(&str, String, &str)> = vec![
        (
            "an attribute the schema does not declare",
            "@id(\"typo\")\npermit (principal, action == Sandlot::Action::\"execute\", resource) when { context.code_size > 1 };".into(),
            "code_size",
        ),
        (
            "a syntax error",
            "@id(\"broken\")\npermit (principal, action, resource".into(),
            "",
        ),
        (
            "a policy without an @id",
            "permit (principal, action == Sandlot::Action::\"execute\", resource);".into(),
            "@id",
        ),
        (
            "two policies with one @id",
            format!(
                "{}\n@id(\"allow-all-gates\")\npermit (principal, action == Sandlot::Action::\"execute\", resource);",
                example("code-size-cap.cedar")
            ),
            "allow-all-gates",
        ),
        (
            "an action that does not exist",
            "@id(\"nope\")\npermit (principal, action == Sandlot::Action::\"launch_missiles\", resource);".into(),
            "launch_missiles",
        ),
    ];
    for (what, text, mentions) in &refused {
        let r = a.put_policies(text);
        assert_eq!(r.code(), "invalid_policy", "{what}: {}", r.text);
        assert_eq!(r.status, 422, "{what}: {}", r.text);
        r.expect_error(422, "invalid_policy");
        assert!(
            r.message().contains(mentions),
            "{what}: the validator's message should mention {mentions:?}: {}",
            r.text
        );
        assert_eq!(a.policy_version(), v0, "{what} changed the set in force");
        assert_eq!(a.get("/v1/policies").text, before, "{what}");
    }
    // Behaviour is unchanged: the shipped set still lets everything through.
    assert_eq!(a.run(&id, "print('still')"), "still\n");

    // Who may replace the set: an admin key only.
    let member = As::key(&server, &server.tenant("members").role("member").key());
    member
        .put_policies(&example("code-size-cap.cedar"))
        .expect_error(403, "forbidden");
    let nobody = As {
        server: &server,
        http: server.client_with_key(None),
    };
    assert_eq!(nobody.put_policies("").status, 401);
    assert_eq!(nobody.get("/v1/policies").status, 401);
    assert_eq!(nobody.get("/v1/decisions").status, 401);
    // Oversized, not UTF-8, malformed JSON.
    let huge = format!("// {}\n", "x".repeat(1 << 20));
    a.put_policies(&huge).expect_error(413, "payload_too_large");
    let r = a.put_raw("/v1/policies", "text/plain", vec![0xff, 0xfe, 0x00]);
    assert_eq!(r.status, 400, "{}", r.text);
    let r = a.put_raw("/v1/policies", "application/json", "{\"policy\": \"\"}");
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(a.policy_version(), v0);

    // A policy that errors when evaluated: the decision is a deny, recorded with the error.
    let erroring = format!(
        "{}\n@id(\"overflowing\")\n@reason(\"never\")\npermit (principal, action == Sandlot::Action::\"execute\", resource)\nwhen {{ context.code_bytes + 9223372036854775807 > 0 }};\n",
        sandlot_policy::DEFAULT_POLICIES
    );
    let v1 = a.put_policies(&erroring).expect(200)["version"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = a.execute(&id, "print('no')");
    assert_denied_by(&r, "overflowing");
    let d = newest(&a, "execute", &format!("Sandbox::\"{id}\""));
    assert_decision(&d, false, &["overflowing"], &v1);
    let errors = d["detail"]["errors"].as_array().expect("errors recorded");
    assert!(
        errors
            .iter()
            .any(|e| e.as_str().unwrap().contains("overflow")),
        "{d:#}"
    );
    // Other gates are unaffected.
    assert_eq!(
        a.get(&format!("/v1/sandboxes/{id}/files/x.txt")).status,
        404,
        "read_file should still be allowed (the file just does not exist)"
    );
    // Back to the shipped set: the same version as at the start.
    let v2 = a.put_policies(sandlot_policy::DEFAULT_POLICIES).expect(200)["version"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(v2, v0, "the version is the hash of the text and schema");
    assert_eq!(a.run(&id, "print('yes')"), "yes\n");

    // The set survives a restart.
    let mut server = server;
    admin(&server)
        .put_policies(&example("code-size-cap.cedar"))
        .expect(200);
    let v3 = admin(&server).policy_version();
    server.restart();
    assert_eq!(admin(&server).policy_version(), v3);
}

// ---------------------------------------------------------------------------------------------
// Egress.

#[test]
fn egress_is_off_by_default_allowlisted_and_recorded() {
    let pkgs = Upstream::start("127.0.0.2", "pkgs", HashMap::new());
    let api = Upstream::start("127.0.0.3", "api", HashMap::new());
    let (echo, echoed) = echo_server("127.0.0.2");
    // What the fronted ClientHello would carry (the allowed tunnel carries one for pkgs.test).
    let echo_saw_fronting = || {
        echoed
            .lock()
            .unwrap()
            .iter()
            .any(|b| b.windows(8).any(|w| w == b"api.test"))
    };
    let server = server();
    let a = admin(&server);
    let (pp, ap, ep) = (pkgs.port(), api.port(), echo.port());

    // --- No network by default.
    let closed = a.create(&json!({}))["id"].as_str().unwrap().to_owned();
    let env = a.run_json(
        &closed,
        "import os, json\nprint(json.dumps({k: os.environ.get(k) for k in ['HTTP_PROXY', 'https_proxy', 'NO_PROXY']}))",
    );
    assert_eq!(env["HTTP_PROXY"], "http://127.0.0.1:3128", "{env}");
    let r = a.run_json(
        &closed,
        &format!("{PY_NET}\nprint(json.dumps([fetch('http://pkgs.test:{pp}/x'), direct('http://127.0.0.2:{pp}/x'), connect('pkgs.test', {ep})]))"),
    );
    assert_eq!(r[0][0], 0, "no network should mean no response: {r}");
    assert_eq!(r[1][0], 0, "the host's loopback must not be reachable: {r}");
    assert!(
        r[2][0].as_str().unwrap().is_empty(),
        "no proxy to CONNECT to: {r}"
    );
    assert!(pkgs.seen().is_empty(), "{:?}", pkgs.seen());
    assert!(
        a.egress(&closed).iter().all(|e| e["allowed"] == false),
        "nothing may be recorded as allowed"
    );

    // --- An allowlist.
    let allow = [
        format!("pkgs.test:{pp}"),
        format!("pkgs.test:{ep}"),
        format!("127.0.0.2/32:{pp}"),
        format!("rebind.test:{pp}"),
        "meta.test".to_owned(),
        "*.wild.test".to_owned(),
    ];
    let s = a.create(&json!({ "network": allow }));
    let id = s["id"].as_str().unwrap().to_owned();
    assert_eq!(s["network"], json!(allow));
    let r = a.run_json(
        &id,
        &format!(
            "{PY_NET}\nprint(json.dumps({{\
             'http': fetch('http://pkgs.test:{pp}/hello'),\
             'connect': connect('pkgs.test', {ep}, hello('pkgs.test')),\
             'connect_plain': connect('pkgs.test', {ep}, b'GET / HTTP/1.1\\r\\nHost: api.test\\r\\n\\r\\n'),\
             'connect_port_80': connect('pkgs.test', 80),\
             'raw_ip_allowed': fetch('http://127.0.0.2:{pp}/by-ip'),\
             'other_domain': fetch('http://api.test:{ap}/x'),\
             'unknown': fetch('http://evil.test/x'),\
             'raw_ip': fetch('http://127.0.0.3:{ap}/x'),\
             'rebind': fetch('http://rebind.test:{pp}/x'),\
             'metadata': fetch('http://169.254.169.254/latest/meta-data/'),\
             'metadata_by_name': fetch('http://meta.test/latest/meta-data/'),\
             'metadata_connect': connect('169.254.169.254', 80),\
             'other_connect': connect('api.test', {ap}),\
             'direct': direct('http://127.0.0.2:{pp}/x'),\
             'fronted': fronted('pkgs.test', {ep}, 'api.test'),\
             'host_mismatch': raw_http('pkgs.test:{pp}', 'api.test'),\
             }}))"
        ),
    );
    eprintln!("egress probes: {r:#}");
    assert_eq!(r["http"], json!([200, "hello from pkgs"]), "{r:#}");
    assert!(r["connect"][0].as_str().unwrap().contains(" 200"), "{r:#}");
    assert!(
        r["connect"][1].as_str().unwrap().starts_with("echo:"),
        "{r:#}"
    );
    // Plain HTTP inside a tunnel is not relayed; a port the rules do not list is refused.
    assert!(
        r["connect_plain"][0].as_str().unwrap().contains(" 200"),
        "{r:#}"
    );
    assert!(
        !r["connect_plain"][1].as_str().unwrap().contains("echo:"),
        "{r:#}"
    );
    assert!(
        r["connect_port_80"][0].as_str().unwrap().contains(" 403"),
        "{r:#}"
    );
    assert_eq!(r["raw_ip_allowed"][0], 200, "{r:#}");
    for k in [
        "other_domain",
        "unknown",
        "raw_ip",
        "rebind",
        "metadata",
        "metadata_by_name",
    ] {
        assert_eq!(r[k][0], 403, "{k} should be refused by the proxy: {r:#}");
        assert!(
            r[k][1].as_str().unwrap().contains("refused"),
            "{k}: the refusal should say why: {r:#}"
        );
    }
    for k in ["metadata_connect", "other_connect"] {
        assert!(
            r[k][0].as_str().unwrap().contains(" 403"),
            "{k} should be refused: {r:#}"
        );
    }
    assert_eq!(r["direct"][0], 0, "bypassing the proxy must fail: {r:#}");
    // Domain fronting (CONNECT to an allowed host, TLS for another) and a Host header that
    // differs from the request's authority are refused.
    assert!(r["fronted"][0].as_str().unwrap().contains(" 200"), "{r:#}");
    assert_ne!(r["fronted"][1], "handshake completed", "{r:#}");
    let status = r["host_mismatch"].as_str().unwrap();
    assert!(
        status.contains(" 400") || status.contains(" 403"),
        "a Host header naming another host: {r:#}"
    );
    let hosts: Vec<String> = pkgs.seen().iter().map(|s| s.target.clone()).collect();
    assert_eq!(hosts, ["/hello", "/by-ip"], "{:?}", pkgs.seen());
    assert!(
        !echo_saw_fronting(),
        "the fronted ClientHello reached the upstream"
    );
    assert!(
        !echoed
            .lock()
            .unwrap()
            .iter()
            .any(|b| b.starts_with(b"GET ")),
        "plain HTTP in a tunnel reached the upstream"
    );
    assert!(api.seen().is_empty(), "{:?}", api.seen());
    let seen = pkgs.seen();
    assert_eq!(
        seen[0].header("host"),
        Some(format!("pkgs.test:{pp}").as_str())
    );
    assert!(seen[0].header("proxy-authorization").is_none());
    assert_eq!(seen[0].method, "GET");

    // Every attempt is recorded, with why.
    let e = egress_until(&a, &id, "all attempts recorded", |e| e.len() >= 15);
    let allowed: Vec<&Value> = e.iter().filter(|e| e["allowed"] == true).collect();
    assert!(
        allowed.iter().any(|e| e["host"] == "pkgs.test"
            && e["method"] == "GET"
            && e["bytes_down"].as_u64() > Some(0)),
        "{e:#?}"
    );
    assert!(
        allowed
            .iter()
            .any(|e| e["host"] == "pkgs.test" && e["method"] == "CONNECT" && e["port"] == ep),
        "{e:#?}"
    );
    for host in [
        "api.test",
        "evil.test",
        "127.0.0.3",
        "rebind.test",
        "169.254.169.254",
    ] {
        assert!(
            e.iter().any(|e| is_refused_record(e, host)),
            "{host} refused and recorded with a reason: {e:#?}"
        );
    }
    let meta = e.iter().find(|e| e["host"] == "meta.test").unwrap();
    assert_eq!(meta["ip"], "169.254.169.254", "{meta:#}");
    assert_eq!(meta["allowed"], false, "{meta:#}");
    let rebind = e.iter().find(|e| e["host"] == "rebind.test").unwrap();
    assert_eq!(rebind["ip"], "127.0.0.1", "{rebind:#}");
    assert!(
        rebind["reason"].as_str().unwrap().contains("loopback"),
        "{rebind:#}"
    );
    // The allowed ones went through the egress gate, by the shipped policy.
    let v = a.policy_version();
    let d = newest(&a, "egress", "Domain::\"pkgs.test\"");
    assert_decision(&d, true, &["allow-all-gates"], &v);
    assert_eq!(d["detail"]["sandbox"], id.as_str(), "{d:#}");

    // --- The allowlist changes live.
    let api_only = [format!("api.test:{ap}"), "127.0.0.3/32".to_owned()];
    let r = a.put(
        &format!("/v1/sandboxes/{id}/network"),
        &json!({ "allow": api_only }),
    );
    assert_eq!(r.expect(200)["network"], json!(api_only));
    let r = a.run_json(
        &id,
        &format!("{PY_NET}\nprint(json.dumps([fetch('http://api.test:{ap}/now'), fetch('http://pkgs.test:{pp}/not-now')]))"),
    );
    assert_eq!(r[0], json!([200, "hello from api"]), "{r}");
    assert_eq!(r[1][0], 403, "{r}");
    assert_eq!(a.sandbox(&id)["network"], json!(api_only));
    // Bad allowlists are refused.
    for bad in [
        json!({ "allow": ["not a domain!"] }),
        json!({ "allow": ["10.0.0.0/99"] }),
    ] {
        let r = a.put(&format!("/v1/sandboxes/{id}/network"), &bad);
        assert_eq!(r.status, 400, "{bad}: {}", r.text);
    }
    let r = a.put("/v1/sandboxes/sb_nope/network", &json!({ "allow": [] }));
    assert_eq!(r.status, 404, "{}", r.text);

    // A sandbox created without network gets its proxy.
    a.put(
        &format!("/v1/sandboxes/{closed}/network"),
        &json!({ "allow": [format!("pkgs.test:{pp}"), "127.0.0.2/32"] }),
    )
    .expect(200);
    let r = a.run_json(
        &closed,
        &format!("{PY_NET}\nprint(json.dumps(fetch('http://pkgs.test:{pp}/opened')))"),
    );
    assert_eq!(r, json!([200, "hello from pkgs"]));

    // --- A restart in place: new processes, new network namespace, egress still works.
    let r = a.execute(&id, "import os\nos.kill(os.getpid(), 9)");
    assert_eq!(r.expect(200)["end_state"], "killed", "{}", r.text);
    let r = a.run_json(
        &id,
        &format!("{PY_NET}\nprint(json.dumps([fetch('http://api.test:{ap}/after-restart'), fetch('http://pkgs.test:{pp}/x')]))"),
    );
    assert_eq!(r[0], json!([200, "hello from api"]), "{r}");
    assert_eq!(r[1][0], 403, "{r}");
    assert_eq!(a.sandbox(&id)["restart_count"], 1);

    // --- Policy narrows the allowlist: egress to one domain.
    a.put(
        &format!("/v1/sandboxes/{id}/network"),
        &json!({ "allow": [format!("pkgs.test:{pp}"), format!("api.test:{ap}"), "127.0.0.2/32", "127.0.0.3/32"] }),
    )
    .expect(200);
    let v = a
        .put_policies(&example("egress-one-domain.cedar"))
        .expect(200)["version"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = a.run_json(
        &id,
        &format!("{PY_NET}\nprint(json.dumps([fetch('http://pkgs.test:{pp}/one'), fetch('http://api.test:{ap}/two')]))"),
    );
    assert_eq!(r[0], json!([200, "hello from pkgs"]), "{r}");
    assert_eq!(r[1][0], 403, "{r}");
    assert!(
        r[1][1].as_str().unwrap().contains("egress-pkgs-only"),
        "the refusal names the policy: {r}"
    );
    assert!(!api.seen().iter().any(|s| s.target == "/two"));
    let d = newest(&a, "egress", "Domain::\"api.test\"");
    assert_decision(&d, false, &["egress-pkgs-only"], &v);
    let e = egress_until(&a, &id, "the policy refusal recorded", |e| {
        e.iter().any(|e| {
            e["host"] == "api.test"
                && e["allowed"] == false
                && e["reason"]
                    .as_str()
                    .unwrap_or("")
                    .contains("egress-pkgs-only")
        })
    });
    let rec = e
        .iter()
        .rev()
        .find(|e| e["host"] == "api.test" && e["allowed"] == false)
        .unwrap();
    assert_eq!(rec["decision_id"], d["id"], "{rec:#}\n{d:#}");
}

// ---------------------------------------------------------------------------------------------
// pip through the proxy.

/// The host Python that builds the test wheel.
fn host_python() -> String {
    std::env::var("SANDLOT_TEST_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// A PEP 503 index of one package (built now) at `/simple/`, with the wheel at `/files/`.
fn package_index(dist: &str, marker: &str) -> HashMap<String, (String, Vec<u8>)> {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(host_python())
        .arg(fixtures().join("make_wheel.py"))
        .arg(dir.path())
        .args([dist, "0.1.0", marker])
        .output()
        .expect("run make_wheel.py");
    assert!(out.status.success(), "{out:?}");
    let wheel = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let bytes = std::fs::read(dir.path().join(&wheel)).unwrap();
    let sha = hex::encode(Sha256::digest(&bytes));
    let html = |body: String| {
        (
            "text/html".to_owned(),
            format!("<!DOCTYPE html><html><body>{body}</body></html>").into_bytes(),
        )
    };
    let mut routes = HashMap::new();
    routes.insert(
        "/simple/".to_owned(),
        html(format!("<a href=\"/simple/{dist}/\">{dist}</a>")),
    );
    routes.insert(
        format!("/simple/{dist}/"),
        html(format!(
            "<a href=\"/files/{wheel}#sha256={sha}\">{wheel}</a>"
        )),
    );
    routes.insert(
        format!("/files/{wheel}"),
        ("application/octet-stream".to_owned(), bytes),
    );
    routes
}

/// `pip install` from the index on `pkgs.test:<port>`, quick to fail.
fn pip_command(port: u16) -> String {
    format!(
        "python -m pip install --disable-pip-version-check --no-cache-dir --timeout 15 --retries 1 \
         --index-url http://pkgs.test:{port}/simple/ --trusted-host pkgs.test"
    )
}

/// Runs bash `code` (2 minutes at most); returns the result.
fn bash(a: &As, id: &str, code: &str) -> Value {
    a.post(
        &format!("/v1/sandboxes/{id}/execute"),
        &json!({ "language": "bash", "timeout": 120, "code": code }),
    )
    .expect(200)
    .clone()
}

#[test]
fn pip_installs_from_an_allowed_local_index_and_fails_clearly_without() {
    let dist = "sandlot-gov-probe";
    let marker = random_alnum(12);
    let index = Upstream::start("127.0.0.2", "pkgs", package_index(dist, &marker));
    let p = index.port();
    let server = server();
    let a = admin(&server);
    let pip = pip_command(p);

    let open = a.create(&json!({ "network": [format!("pkgs.test:{p}"), "127.0.0.2/32"] }))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Where pip can install: the environment is read-only, so into the workspace.
    let r = bash(
        &a,
        &open,
        &format!("{pip} --target /workspace/.pip {dist} 2>&1; echo exit=$?"),
    );
    let out = r["stdout"].as_str().unwrap_or_default();
    assert!(
        out.contains("Successfully installed") && out.contains("exit=0"),
        "pip install --target through the proxy: {r:#}"
    );
    let got = a.run(
        &open,
        "import sys\nsys.path.insert(0, '/workspace/.pip')\nimport sandlot_gov_probe\nprint(sandlot_gov_probe.MARKER)",
    );
    assert_eq!(got.trim(), marker);
    let paths: Vec<String> = index.seen().iter().map(|s| s.target.clone()).collect();
    assert!(paths.iter().any(|p| p.starts_with("/files/")), "{paths:?}");
    let e = a.egress(&open);
    assert!(
        e.iter()
            .any(|e| e["host"] == "pkgs.test" && e["allowed"] == true),
        "{e:#?}"
    );

    // `%pip install` from Python (the notebook form), then import in the same cell.
    let got = a.run(
        &open,
        &format!(
            "import sys\nsys.path.append('/workspace/.pip2')\n%pip install -q --target /workspace/.pip2 --index-url http://pkgs.test:{p}/simple/ --trusted-host pkgs.test {dist}\nimport sandlot_gov_probe\nprint(sandlot_gov_probe.MARKER)"
        ),
    );
    assert_eq!(got.lines().last(), Some(marker.as_str()), "{got}");

    // Without the index allowed: a clear failure.
    let closed = a.create(&json!({}))["id"].as_str().unwrap().to_owned();
    let before = index.seen().len();
    let r = bash(
        &a,
        &closed,
        &format!("{pip} --target /workspace/.pip {dist} 2>&1; echo exit=$?"),
    );
    let out = r["stdout"].as_str().unwrap_or_default();
    assert!(!out.contains("exit=0"), "{out}");
    assert!(
        out.contains("Cannot connect to proxy") || out.contains("ProxyError"),
        "pip's error should say the proxy is unreachable: {out}"
    );
    let other = a.create(&json!({ "network": ["api.test"] }))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = bash(
        &a,
        &other,
        &format!("{pip} --target /workspace/.pip {dist} 2>&1; echo exit=$?"),
    );
    let out = r["stdout"].as_str().unwrap_or_default();
    // pip hides an index page's 403 (it logs it at debug level only, even with -v) and says
    // there is no such version; the why is in the sandbox's egress record.
    assert!(!out.contains("exit=0"), "{out}");
    assert!(out.contains("No matching distribution"), "{out}");
    assert_eq!(index.seen().len(), before, "the index was reached");
    let e = egress_until(&a, &other, "pip's refused attempt recorded", |e| {
        e.iter().any(|e| is_refused_record(e, "pkgs.test"))
    });
    let refused = e
        .iter()
        .find(|e| is_refused_record(e, "pkgs.test"))
        .unwrap();
    assert!(
        refused["reason"].as_str().unwrap().contains("allowlist"),
        "{refused:#}"
    );
}

// ---------------------------------------------------------------------------------------------
// Secrets.

#[test]
fn secrets_reach_their_host_only_and_are_never_visible_inside() {
    let pkgs = Upstream::start("127.0.0.2", "pkgs", HashMap::new());
    let api = Upstream::start("127.0.0.3", "api", HashMap::new());
    let (pp, ap) = (pkgs.port(), api.port());
    let server = server();
    let a = admin(&server);
    let value = format!("Bearer s3cret-{}", random_alnum(24));
    let s = a.create(&json!({
        "network": [format!("pkgs.test:{pp}"), format!("api.test:{ap}"), "127.0.0.2/32", "127.0.0.3/32"],
        "secrets": [{ "name": "tok", "hosts": ["api.test"], "header": "Authorization", "value": value }],
    }));
    let id = s["id"].as_str().unwrap().to_owned();
    assert_eq!(s["secrets"], json!(["tok"]), "{s:#}");
    for text in [
        a.get(&format!("/v1/sandboxes/{id}")).text,
        a.get("/v1/sandboxes").text,
        a.get("/v1/decisions?limit=1000").text,
    ] {
        assert!(
            !text.contains(&value),
            "the secret's value is shown: {text}"
        );
    }
    let r = a.run_json(
        &id,
        &format!(
            "{PY_NET}\nprint(json.dumps([fetch('http://api.test:{ap}/with'), fetch('http://pkgs.test:{pp}/without'), \
             fetch('http://api.test:{ap}/spoofed', {{'Authorization': 'Bearer mine'}})]))"
        ),
    );
    assert_eq!(r[0], json!([200, "hello from api"]), "{r}");
    assert_eq!(r[1], json!([200, "hello from pkgs"]), "{r}");
    let seen = api.seen();
    let with = seen.iter().find(|s| s.target == "/with").unwrap();
    assert_eq!(
        with.header("authorization"),
        Some(value.as_str()),
        "{seen:?}"
    );
    let spoofed = seen.iter().find(|s| s.target == "/spoofed").unwrap();
    assert_eq!(
        spoofed.header("authorization"),
        Some(value.as_str()),
        "the proxy replaces the sandbox's own header: {seen:?}"
    );
    assert!(
        pkgs.seen()
            .iter()
            .all(|s| s.header("authorization").is_none()),
        "sent to another host: {:?}",
        pkgs.seen()
    );

    // Nowhere inside: environment, any process's environ or command line, files. The code
    // carries the value reversed, so a copy of the code found anywhere is not a hit.
    let reversed: String = value.chars().rev().collect();
    let probe = format!(
        r#"
import os, json
needle = {reversed:?}[::-1].encode()
hits = []
if any(needle in (k + "=" + v).encode() for k, v in os.environ.items()):
    hits.append("os.environ")
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    for f in ("environ", "cmdline"):
        try:
            if needle in open(f"/proc/{{pid}}/{{f}}", "rb").read():
                hits.append(f"/proc/{{pid}}/{{f}}")
        except OSError:
            pass
for root in ("/workspace", "/tmp", "/etc", "/home", "/opt/sandlot/env/bin", "/dev/shm"):
    for d, _, files in os.walk(root):
        for name in files:
            p = os.path.join(d, name)
            try:
                if os.path.getsize(p) < (8 << 20) and needle in open(p, "rb").read():
                    hits.append(p)
            except OSError:
                pass
print(json.dumps(hits))
"#
    );
    let hits = a.run_json(&id, &probe);
    assert_eq!(hits, json!([]), "the secret is visible inside the sandbox");
    let bash = a
        .post(
            &format!("/v1/sandboxes/{id}/execute"),
            &json!({"language": "bash", "code": "env | grep -ci s3cret || true"}),
        )
        .expect(200)
        .clone();
    assert_eq!(bash["stdout"].as_str().unwrap().trim(), "0", "{bash:#}");

    // Replaced live: the new value goes out, the old one no more.
    let value2 = format!("Token {}", random_alnum(24));
    let r = a.put(
        &format!("/v1/sandboxes/{id}/network"),
        &json!({
            "allow": [format!("api.test:{ap}"), "127.0.0.3/32"],
            "secrets": [{ "name": "tok2", "hosts": ["api.test"], "header": "X-Api-Key", "value": value2 }],
        }),
    );
    assert_eq!(r.expect(200)["secrets"], json!(["tok2"]));
    assert!(!r.text.contains(&value2));
    let r = a.run_json(
        &id,
        &format!("{PY_NET}\nprint(json.dumps(fetch('http://api.test:{ap}/second')))"),
    );
    assert_eq!(r[0], 200, "{r}");
    let seen = api.seen();
    let second = seen.iter().find(|s| s.target == "/second").unwrap();
    assert_eq!(
        second.header("x-api-key"),
        Some(value2.as_str()),
        "{second:?}"
    );
    assert!(second.header("authorization").is_none(), "{second:?}");

    // Secret names are checked.
    let r = a.post(
        "/v1/sandboxes",
        &json!({ "network": ["api.test"], "secrets": [{ "name": "bad name!", "hosts": ["api.test"], "header": "X", "value": "v" }] }),
    );
    assert_eq!(r.status, 400, "{}", r.text);

    // A restart in place keeps them (new processes, the same proxy settings).
    let r = a.execute(&id, "import os\nos.kill(os.getpid(), 9)");
    assert_eq!(r.expect(200)["end_state"], "killed");
    let r = a.run_json(
        &id,
        &format!("{PY_NET}\nprint(json.dumps(fetch('http://api.test:{ap}/after-restart')))"),
    );
    assert_eq!(r[0], 200, "{r}");
    let seen = api.seen();
    let after = seen.iter().find(|s| s.target == "/after-restart").unwrap();
    assert_eq!(
        after.header("x-api-key"),
        Some(value2.as_str()),
        "{after:?}"
    );
}

/// Python that prints where inside the sandbox `value` is found: its environment, any
/// process's environ or command line, files, and its own anonymous memory. The code carries the value
/// in two reversed halves, so neither a copy of the code nor the probe's own variables are a
/// hit; the memory scan must read something, or it proves nothing.
fn secret_probe(value: &str) -> String {
    let (a, b) = value.split_at(value.len() / 2);
    let (ra, rb): (String, String) = (a.chars().rev().collect(), b.chars().rev().collect());
    format!(
        r#"
import os, json
a, b = {ra:?}[::-1].encode(), {rb:?}[::-1].encode()
def found(data):
    i = data.find(a)
    while i >= 0:
        if data.startswith(b, i + len(a)):
            return True
        i = data.find(a, i + 1)
    return False
hits = []
if any(found((k + "=" + v).encode()) for k, v in os.environ.items()):
    hits.append("os.environ")
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    for f in ("environ", "cmdline"):
        try:
            if found(open(f"/proc/{{pid}}/{{f}}", "rb").read()):
                hits.append(f"/proc/{{pid}}/{{f}}")
        except OSError:
            pass
for root in ("/workspace", "/tmp", "/etc", "/home", "/opt/sandlot/env/bin", "/dev/shm"):
    for d, _, files in os.walk(root):
        for name in files:
            p = os.path.join(d, name)
            try:
                if os.path.getsize(p) < (8 << 20) and found(open(p, "rb").read()):
                    hits.append(p)
            except OSError:
                pass
# /proc/self/mem is closed to the sandbox; its own anonymous memory (heap, stacks, arenas:
# where anything it was sent would be) is read in place instead.
import ctypes
scanned = 0
with open("/proc/self/maps") as maps:
    for line in maps:
        fields = line.split()
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        anonymous = len(fields) < 6 or fields[5] in ("[heap]", "[stack]")
        if "r" not in fields[1] or not anonymous or hi - lo > (256 << 20):
            continue
        chunk = ctypes.string_at(lo, hi - lo)
        scanned += len(chunk)
        if found(chunk):
            hits.append("memory " + fields[0])
if scanned < (1 << 20):
    hits.append(f"memory scan read only {{scanned}} bytes")
print(json.dumps(hits))
"#
    )
}

#[test]
fn secrets_for_https_hosts_are_set_by_the_proxy_through_its_own_ca() {
    let upstream_ca = TestCa::new("test upstream CA");
    let trusted = upstream_ca.server_config(&["secure.test", "open.test"]);
    let secure = Upstream::start_tls("127.0.0.3", "secure", trusted.clone());
    let open = Upstream::start_tls("127.0.0.3", "open", trusted);
    let rogue = Upstream::start_tls(
        "127.0.0.3",
        "rogue",
        TestCa::new("nobody trusts this CA").server_config(&["rogue.test"]),
    );
    let (sp, op, rp) = (secure.port(), open.port(), rogue.port());
    let dir = tempfile::tempdir().unwrap();
    let roots = dir.path().join("extra-roots.pem");
    std::fs::write(&roots, upstream_ca.cert.pem()).unwrap();
    let hosts =
        format!("{EGRESS_HOSTS},secure.test=127.0.0.3,open.test=127.0.0.3,rogue.test=127.0.0.3");
    let server = TestServer::start_with_env(&[
        ("SANDLOT_EGRESS_HOSTS", hosts.as_str()),
        ("SANDLOT_EGRESS_EXTRA_ROOTS", roots.to_str().unwrap()),
        ("SANDLOT_POOL_SIZE", "1"),
    ]);
    let a = admin(&server);
    let value = format!("Bearer tls-{}", random_alnum(24));
    let s = a.create(&json!({
        "network": [format!("secure.test:{sp}"), format!("open.test:{op}"), format!("rogue.test:{rp}"), "127.0.0.3/32"],
        "secrets": [{ "name": "tok", "hosts": ["secure.test", "rogue.test"], "header": "Authorization", "value": value }],
    }));
    let id = s["id"].as_str().unwrap().to_owned();
    // The sandbox's default TLS trust (SSL_CERT_FILE) reaches the secret's host; the host
    // without a secret is an opaque tunnel, verified by the sandbox against the upstream's
    // own CA (which the proxy's certificates would fail).
    let r = a.run_json(
        &id,
        &format!(
            "{PY_NET}\nimport ssl\nctx = ssl.create_default_context(cafile=None)\n\
             ctx.load_verify_locations(cadata={ca:?})\n\
             def tunnel(url):\n    try:\n        with urllib.request.urlopen(url, timeout=20, context=ctx) as r:\n            return [r.status, r.read().decode()]\n    except Exception as e:\n        return [0, repr(e)]\n\
             print(json.dumps([fetch('https://secure.test:{sp}/with'), tunnel('https://open.test:{op}/without'), \
             fetch('https://rogue.test:{rp}/rogue'), os.environ.get('SSL_CERT_FILE')]))",
            ca = upstream_ca.cert.pem(),
        ),
    );
    assert_eq!(r[0], json!([200, "hello from secure"]), "{r}");
    assert_eq!(r[1], json!([200, "hello from open"]), "{r}");
    assert_eq!(r[2][0], 502, "an upstream the proxy does not trust: {r}");
    assert!(r[2][1].as_str().unwrap().contains("certificate"), "{r}");
    assert_eq!(r[3], "/workspace/.sandlot-egress-ca.pem", "{r}");
    let seen = secure.seen();
    let with = seen.iter().find(|s| s.target == "/with").unwrap();
    assert_eq!(
        with.header("authorization"),
        Some(value.as_str()),
        "{seen:?}"
    );
    assert!(
        open.seen()
            .iter()
            .all(|s| s.header("authorization").is_none()),
        "{:?}",
        open.seen()
    );
    assert_eq!(open.seen().len(), 1, "{:?}", open.seen());
    assert!(rogue.seen().is_empty(), "{:?}", rogue.seen());

    // Each request inside an intercepted tunnel is recorded like a plain one; the refused one
    // says why.
    let e = egress_until(&a, &id, "the intercepted requests recorded", |e| {
        e.iter()
            .any(|e| e["host"] == "secure.test" && e["method"] == "GET")
            && e.iter()
                .any(|e| is_refused_record(e, "rogue.test") && e["method"] == "GET")
    });
    let get = e
        .iter()
        .find(|e| e["host"] == "secure.test" && e["method"] == "GET")
        .unwrap();
    assert_eq!(get["allowed"], true, "{get:#}");
    assert_eq!(get["reason"], "", "{get:#}");
    let refused = e
        .iter()
        .find(|e| is_refused_record(e, "rogue.test") && e["method"] == "GET")
        .unwrap();
    assert!(
        refused["reason"].as_str().unwrap().contains("certificate"),
        "{refused:#}"
    );

    // The value is nowhere inside; the bundle holds certificates only. (The probe does find a
    // value the sandbox holds.)
    let planted = format!("planted-{}", random_alnum(24));
    let (head, tail) = planted.split_at(planted.len() / 2);
    a.run(&id, &format!("kept = {head:?} + {tail:?}"));
    let hits = a.run_json(&id, &secret_probe(&planted));
    assert!(
        hits.as_array()
            .unwrap()
            .iter()
            .any(|h| h.as_str().unwrap().starts_with("memory ")),
        "{hits}"
    );
    assert_eq!(
        a.run_json(&id, &secret_probe(&value)),
        json!([]),
        "the secret is visible inside"
    );
    let bundle = a.run_json(
        &id,
        "import json\nt = open('/workspace/.sandlot-egress-ca.pem').read()\n\
         print(json.dumps(['PRIVATE' in t, t.count('BEGIN CERTIFICATE') >= 1]))",
    );
    assert_eq!(bundle, json!([false, true]), "{bundle}");

    // Inside the tunnel a request is checked like a plain one: no TRACE (it would echo the
    // secret back), no other host in `Host`.
    let r = a.run_json(
        &id,
        &format!(
            r#"{PY_NET}
def call(method, url, headers=None):
    req = urllib.request.Request(url, method=method, headers=headers or {{}})
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return [r.status, r.read().decode()]
    except urllib.error.HTTPError as e:
        return [e.code, e.read().decode()]
    except Exception as e:
        return [0, repr(e)]
print(json.dumps([call("TRACE", "https://secure.test:{sp}/trace"),
                  call("GET", "https://secure.test:{sp}/fronted", {{"Host": "open.test:{op}"}})]))"#
        ),
    );
    assert_eq!(r[0][0], 405, "{r}");
    assert_eq!(r[1][0], 403, "{r}");
    assert!(r[1][1].as_str().unwrap().contains("does not match"), "{r}");
    assert!(
        secure.seen().iter().all(|s| s.target == "/with"),
        "{:?}",
        secure.seen()
    );

    // Secrets given later, live: the sandbox's processes are told to trust its CA then.
    let t = a.create(&json!({ "network": [format!("secure.test:{sp}"), "127.0.0.3/32"] }));
    let tid = t["id"].as_str().unwrap().to_owned();
    let fetch_later =
        format!("{PY_NET}\nprint(json.dumps(fetch('https://secure.test:{sp}/later')))");
    let r = a.run_json(&tid, &fetch_later);
    assert_eq!(
        r[0], 0,
        "an opaque tunnel to a CA the sandbox does not trust: {r}"
    );
    assert!(
        r[1].as_str().unwrap().contains("CERTIFICATE_VERIFY_FAILED"),
        "{r}"
    );
    let value2 = format!("Token later-{}", random_alnum(24));
    a.put(
        &format!("/v1/sandboxes/{tid}/network"),
        &json!({
            "allow": [format!("secure.test:{sp}"), "127.0.0.3/32"],
            "secrets": [{ "name": "later", "hosts": ["secure.test"], "header": "X-Api-Key", "value": value2 }],
        }),
    )
    .expect(200);
    let r = a.run_json(&tid, &fetch_later);
    assert_eq!(r, json!([200, "hello from secure"]), "{r}");
    let seen = secure.seen();
    let later: Vec<_> = seen.iter().filter(|s| s.target == "/later").collect();
    assert_eq!(later.len(), 1, "{seen:?}");
    assert_eq!(
        later[0].header("x-api-key"),
        Some(value2.as_str()),
        "{seen:?}"
    );
}

/// Regression (found by this suite): secrets are kept in memory only; after a server
/// restart the sandbox still lists them but the proxy no longer sends them, silently.
#[test]
fn after_a_server_restart_a_listed_secret_is_still_sent() {
    let api = Upstream::start("127.0.0.3", "api", HashMap::new());
    let ap = api.port();
    let mut server = server();
    let value = format!("Bearer {}", random_alnum(24));
    let id = admin(&server).create(&json!({
        "network": [format!("api.test:{ap}"), "127.0.0.3/32"],
        "secrets": [{ "name": "tok", "hosts": ["api.test"], "header": "Authorization", "value": value }],
    }))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    server.restart();
    let a = admin(&server);
    let listed = a.sandbox(&id)["secrets"].clone();
    let r = a.run_json(
        &id,
        &format!("{PY_NET}\nprint(json.dumps(fetch('http://api.test:{ap}/after-server-restart')))"),
    );
    assert_eq!(r[0], 200, "{r}");
    let seen = api.seen();
    let after = seen
        .iter()
        .find(|s| s.target == "/after-server-restart")
        .unwrap();
    let sent = after.header("authorization") == Some(value.as_str());
    assert!(
        sent || listed.as_array().is_none_or(|l| l.is_empty()),
        "after a server restart the sandbox lists secrets {listed} but the proxy no \
         longer sends them: {after:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Output guardrails.

/// Python that prints `token` without the code containing it (built from two halves).
fn print_split(token: &str) -> String {
    let (head, tail) = token.split_at(6);
    format!("t = {head:?} + {tail:?}\nprint('token:', t)\nt")
}

/// The events of an SSE response as (event, raw data).
fn sse(server: &TestServer, id: &str, code: &str) -> (String, Vec<(String, String)>) {
    let resp = server
        .client()
        .post(format!("{}/v1/sandboxes/{id}/execute", server.url()))
        .header(reqwest::header::ACCEPT, "text/event-stream")
        .json(&json!({ "code": code }))
        .send()
        .expect("stream");
    assert_eq!(resp.status().as_u16(), 200);
    let text = resp.text().unwrap();
    let mut events = Vec::new();
    let (mut event, mut data) = (String::new(), String::new());
    for line in text.lines() {
        if line.is_empty() {
            if !event.is_empty() {
                events.push((std::mem::take(&mut event), std::mem::take(&mut data)));
            }
            data.clear();
        } else if let Some(v) = line.strip_prefix("event:") {
            event = v.trim().to_owned();
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push_str(v.strip_prefix(' ').unwrap_or(v));
        }
    }
    (text, events)
}

#[test]
fn secrets_in_output_are_redacted_in_results_streams_and_downloads() {
    let server = server();
    let a = admin(&server);
    let id = a.create(&json!({}))["id"].as_str().unwrap().to_owned();
    let gh = format!("ghp_{}", random_alnum(36));
    let aws_id = format!("AKIA{}", "QWERTYUIOPLKJHG2");

    // The JSON result: stdout and the cell's value.
    let r = a.execute(&id, &print_split(&gh));
    let b = r.expect(200).clone();
    assert!(!r.text.contains(&gh), "the token leaked: {b:#}");
    assert_eq!(b["stdout"], "token: [REDACTED:github-token]\n", "{b:#}");
    assert!(
        b["result"]["text/plain"]
            .as_str()
            .unwrap()
            .contains("[REDACTED:github-token]"),
        "{b:#}"
    );
    let f = a.findings(&id);
    assert!(!serde_json::to_string(&f).unwrap().contains(&gh));
    let hit = f
        .iter()
        .find(|f| f["rule"] == "github-token" && f["stream"] == "stdout")
        .unwrap_or_else(|| panic!("{f:#?}"));
    assert_eq!(hit["sha256"], sha256_hex(&gh), "{hit:#}");
    assert_eq!(hit["kind"], "secret");
    assert_eq!(hit["outcome"], "redact");
    assert_eq!(hit["execution_id"], b["id"], "{hit:#}");
    let v = a.policy_version();
    let d = a
        .decisions("output_redact")
        .into_iter()
        .find(|d| Some(&d["id"]) == hit.get("decision_id"))
        .unwrap_or_else(|| {
            panic!(
                "the finding's decision: {:#?}",
                a.decisions("output_redact")
            )
        });
    assert_decision(&d, true, &["redact-secrets"], &v);

    // An AWS access key id on stderr.
    let r = a.execute(
        &id,
        &format!(
            "import sys\nk = {:?} + {:?}\nprint('key', k, file=sys.stderr)",
            &aws_id[..4],
            &aws_id[4..]
        ),
    );
    let b = r.expect(200).clone();
    assert!(!r.text.contains(&aws_id), "{b:#}");
    assert!(
        b["stderr"]
            .as_str()
            .unwrap()
            .contains("[REDACTED:aws-access-key-id]"),
        "{b:#}"
    );

    // The stream: no event carries the token, stdout is redacted, the final result too.
    let (raw, events) = sse(&server, &id, &print_split(&gh));
    assert!(!raw.contains(&gh), "the token leaked in the stream: {raw}");
    let stdout: String = events
        .iter()
        .filter(|(e, _)| e == "stdout")
        .map(|(_, d)| {
            serde_json::from_str::<Value>(d).unwrap()["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(stdout, "token: [REDACTED:github-token]\n", "{events:?}");
    assert_eq!(events.last().unwrap().0, "done", "{events:?}");
    // A token written in two pieces, in two writes, is still caught.
    let (raw, _) = sse(
        &server,
        &id,
        &format!(
            "import sys, time\nsys.stdout.write({:?}); sys.stdout.flush(); time.sleep(0.3)\nsys.stdout.write({:?} + '\\n')",
            &gh[..10],
            &gh[10..]
        ),
    );
    assert!(!raw.contains(&gh[10..]), "a split token leaked: {raw}");

    // Downloads: a file written by code, and one uploaded.
    a.run(
        &id,
        &format!(
            "open('/workspace/creds.txt', 'w').write('key=' + {:?} + {:?} + '\\n')",
            &gh[..6],
            &gh[6..]
        ),
    );
    let (status, _, bytes) = server.get_bytes(&format!("/v1/sandboxes/{id}/files/creds.txt"));
    let text = String::from_utf8_lossy(&bytes);
    assert_eq!(status, 200, "{text}");
    assert!(!text.contains(&gh), "the download leaked: {text}");
    assert!(text.contains("[REDACTED:github-token]"), "{text}");
    let f = a.findings(&id);
    assert!(
        f.iter()
            .any(|f| f["stream"] == "file" && f["sha256"] == sha256_hex(&gh)),
        "{f:#?}"
    );
    server
        .put_bytes(
            &format!("/v1/sandboxes/{id}/files/up.txt"),
            format!("token {gh}\n"),
        )
        .expect(201);
    let (_, _, bytes) = server.get_bytes(&format!("/v1/sandboxes/{id}/files/up.txt"));
    assert!(!String::from_utf8_lossy(&bytes).contains(&gh));

    // A policy that withholds secrets instead.
    let withhold = format!(
        "{}\n@id(\"withhold-secrets\")\n@reason(\"secrets are withheld\")\npermit (principal, action == Sandlot::Action::\"output_withhold\", resource)\nwhen {{ context.kind == \"secret\" }};\n",
        sandlot_policy::DEFAULT_POLICIES
    );
    let v2 = a.put_policies(&withhold).expect(200)["version"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = a.execute(&id, &print_split(&gh));
    let b = r.expect(200).clone();
    assert!(!r.text.contains(&gh), "{b:#}");
    assert!(
        !r.text.contains("[REDACTED"),
        "withheld, not redacted: {b:#}"
    );
    assert!(b["stdout"].as_str().unwrap().contains("withheld"), "{b:#}");
    let (raw, _) = sse(&server, &id, &print_split(&gh));
    assert!(!raw.contains(&gh), "{raw}");
    let f = a.findings(&id);
    assert!(
        f.iter()
            .any(|f| f["outcome"] == "withhold" && f["sha256"] == sha256_hex(&gh)),
        "{f:#?}"
    );
    let d = a.decisions("output_withhold");
    assert!(
        d.iter().any(|d| d["allowed"] == true
            && d["policies"] == json!(["withhold-secrets"])
            && d["version"] == v2),
        "{d:#?}"
    );
    // Withholding does not contain: the sandbox works on.
    assert_eq!(a.run(&id, "print('fine')"), "fine\n");
    assert!(a.sandbox(&id).get("contained").is_none());
}

/// One MCP tool call over `/mcp` in a fresh session; the raw response text.
fn mcp_call(server: &TestServer, tool: &str, arguments: Value) -> String {
    mcp_call_as(server, server.key(), tool, arguments)
}

/// [`mcp_call`] with `key`.
fn mcp_call_as(server: &TestServer, key: &str, tool: &str, arguments: Value) -> String {
    const PROTOCOL: &str = "2025-06-18";
    let http = server.client();
    let post = |session: Option<&str>, body: Value| {
        let mut req = http
            .post(format!("{}/mcp", server.url()))
            .bearer_auth(key)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", PROTOCOL)
            .json(&body);
        if let Some(s) = session {
            req = req.header("mcp-session-id", s);
        }
        req.send().expect("mcp request")
    };
    let init = post(
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL, "capabilities": {},
            "clientInfo": {"name": "governance", "version": "1"}}}),
    );
    let session = init
        .headers()
        .get("mcp-session-id")
        .expect("an MCP session")
        .to_str()
        .unwrap()
        .to_owned();
    let _ = init.text();
    let _ = post(
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .text();
    post(
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": tool, "arguments": arguments}}),
    )
    .text()
    .unwrap_or_default()
}

/// Every other way output leaves a sandbox through the REST API, each scanned like a
/// download: error values and tracebacks, rich display data, the execution history, the
/// background output of processes a cell left running, artifacts, the workspace archive,
/// volume files and MCP's `read_file`. Regression (found by this suite): the archive,
/// artifacts, background output and volume files are not scanned.
#[test]
fn every_other_way_out_of_a_sandbox_is_scanned_too() {
    let server = server();
    let a = admin(&server);
    a.post("/v1/volumes", &json!({ "name": "govvol" }))
        .expect(201);
    let id = a.create(&json!({ "volumes": [{ "name": "govvol", "path": "vol" }] }))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let gh = format!("ghp_{}", random_alnum(36));
    let (head, tail) = gh.split_at(6);
    let t = format!("({head:?} + {tail:?})");
    let mut leaks: Vec<String> = Vec::new();
    let mut check = |what: &str, text: &str| {
        if text.contains(&gh) {
            leaks.push(format!(
                "{what}: {}",
                text.chars().take(300).collect::<String>()
            ));
        }
    };

    let r = a.execute(&id, &format!("raise ValueError('bad ' + {t})"));
    check("an error's value and traceback", &r.text);
    let r = a.execute(
        &id,
        &format!("from IPython.display import display, HTML\ndisplay(HTML('<b>' + {t} + '</b>'))\ndisplay({{'text/markdown': {t}}}, raw=True)"),
    );
    check("display data", &r.text);
    let r = a.execute(
        &id,
        &format!("open('/workspace/vol/v.txt', 'w').write({t})\nimport subprocess\nsubprocess.Popen(['sh', '-c', 'sleep 0.5; echo \"$0$1\"', {head:?}, {tail:?}])\nprint('started')"),
    );
    let b = r.expect(200).clone();
    check("the execution's result", &r.text);
    check(
        "the execution history",
        &a.get(&format!("/v1/sandboxes/{id}/executions")).text,
    );
    // Waits for the process's line itself: a check of a buffer it has not written to yet
    // would pass whatever the redaction does.
    let background = || a.get(&format!("/v1/sandboxes/{id}/background"));
    assert!(
        common::wait_until(Duration::from_secs(60), || background().body["entries"]
            .as_array()
            .is_some_and(|e| !e.is_empty())),
        "the background process never wrote: {}",
        background().text
    );
    let bg = background();
    assert_eq!(bg.status, 200, "{}", bg.text);
    check("background output", &bg.text);
    let _ = b;
    // An artifact: the file a cell wrote, fetched by its hash.
    let r = a.execute(&id, &format!("open('/workspace/out.txt', 'w').write({t})"));
    let art = r.expect(200)["artifacts"]
        .as_array()
        .and_then(|l| l.iter().find(|x| x["path"] == "out.txt").cloned())
        .unwrap_or_else(|| panic!("out.txt is an artifact: {}", r.text));
    let (status, _, bytes) = server.get_bytes(&format!(
        "/v1/artifacts/{}",
        art["sha256"].as_str().unwrap()
    ));
    eprintln!(
        "artifact download: {status} {}",
        String::from_utf8_lossy(&bytes)
    );
    check("an artifact", &String::from_utf8_lossy(&bytes));
    // An archive cannot be redacted (its sizes would lie): with a finding it is withheld.
    let (status, _, tar) = server.get_bytes(&format!("/v1/sandboxes/{id}/archive"));
    if status == 403 {
        assert!(String::from_utf8_lossy(&tar).contains("policy_denied"));
    } else {
        assert_eq!(status, 200);
        check("the workspace archive", &String::from_utf8_lossy(&tar));
    }
    let (status, _, bytes) = server.get_bytes(&format!("/v1/sandboxes/{id}/files/out.txt"));
    assert_eq!(status, 200);
    check("a file download", &String::from_utf8_lossy(&bytes));
    let (_, _, bytes) = server.get_bytes(&format!("/v1/sandboxes/{id}/files/vol/v.txt"));
    check(
        "a file download from a volume mount",
        &String::from_utf8_lossy(&bytes),
    );
    check(
        "MCP read_file",
        &mcp_call(
            &server,
            "read_file",
            json!({ "sandbox_id": id, "path": "out.txt" }),
        ),
    );
    a.delete(&format!("/v1/sandboxes/{id}")).expect(204);
    let (status, _, bytes) = server.get_bytes("/v1/volumes/govvol/files/v.txt");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    check("a volume file", &String::from_utf8_lossy(&bytes));
    assert!(
        leaks.is_empty(),
        "the token leaves unscanned through:\n{}",
        leaks.join("\n")
    );
}

/// The sandbox's canary, learnt from inside without printing it (each character shifted by
/// one, which no detector looks for): the test needs the value to prove it never leaves.
fn canary_of(a: &As, id: &str) -> (String, String) {
    let shifted = a.run_json(
        id,
        "import os, json\nprint(json.dumps([''.join(chr(ord(c) + 1) for c in os.environ[k]) for k in ('AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY')]))",
    );
    let unshift = |v: &Value| -> String {
        v.as_str()
            .unwrap()
            .chars()
            .map(|c| char::from_u32(c as u32 - 1).unwrap())
            .collect()
    };
    (unshift(&shifted[0]), unshift(&shifted[1]))
}

/// The pids in sandbox `id`'s cgroups.
fn sandbox_pids(server: &TestServer, id: &str) -> Vec<String> {
    common::HostView::of(server)
        .cgroup_dirs(id)
        .iter()
        .flat_map(|d| {
            std::fs::read_to_string(d.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[track_caller]
fn assert_contained(server: &TestServer, a: &As, id: &str) {
    let ok = common::wait_until(SETTLE, || a.sandbox(id).get("contained").is_some());
    assert!(ok, "not contained: {:#}", a.sandbox(id));
    let s = a.sandbox(id);
    common::assert_schema("Sandbox", &s);
    a.execute(id, "print(1)")
        .expect_error(409, "sandbox_contained");
    a.put_raw(
        &format!("/v1/sandboxes/{id}/files/after.txt"),
        "application/octet-stream",
        "x",
    )
    .expect_error(409, "sandbox_contained");
    // Contained sandboxes refuse network changes too (they would reopen egress).
    let r = a.put(
        &format!("/v1/sandboxes/{id}/network"),
        &json!({ "allow": ["pkgs.test"] }),
    );
    r.expect_error(409, "sandbox_contained");
    let _ = server;
}

/// Regression (found by this suite): containment kills the sandbox's processes, then
/// restart in place boots fresh ones (`restart_count` + 1, `state: running`).
#[track_caller]
fn assert_no_processes(server: &TestServer, a: &As, id: &str) {
    // Reading its files must not bring its processes back either.
    let _ = a.get(&format!("/v1/sandboxes/{id}/files"));
    let ok = common::wait_until(SETTLE, || sandbox_pids(server, id).is_empty());
    assert!(
        ok,
        "a contained sandbox runs processes again (restarted in place): pids {:?}, sandbox {:#}",
        sandbox_pids(server, id),
        a.sandbox(id)
    );
}

#[test]
fn a_sandbox_printing_its_canary_is_contained() {
    let server = server();
    let a = admin(&server);
    let id = a.create(&json!({}))["id"].as_str().unwrap().to_owned();
    a.run(&id, "open('/workspace/keep.txt', 'w').write('kept')");
    let (key_id, secret) = canary_of(&a, &id);
    assert!(key_id.starts_with("AKIA") && secret.len() == 40, "{key_id}");

    let r = a.execute(
        &id,
        "import os\nprint('before')\nprint(os.environ['AWS_SECRET_ACCESS_KEY'])\nprint('after')",
    );
    let b = r.expect(200).clone();
    assert!(!r.text.contains(&secret), "the canary leaked: {b:#}");
    assert!(
        !b["stdout"].as_str().unwrap().contains("before"),
        "withheld whole: {b:#}"
    );
    assert_eq!(b["error"]["name"], "SandboxContained", "{b:#}");
    assert_contained(&server, &a, &id);
    // Its files stay readable; deleting works.
    let (status, _, bytes) = server.get_bytes(&format!("/v1/sandboxes/{id}/files/keep.txt"));
    assert_eq!((status, bytes.as_slice()), (200, b"kept".as_slice()));
    let f = a.findings(&id);
    let hit = f
        .iter()
        .find(|f| f["kind"] == "canary")
        .unwrap_or_else(|| panic!("{f:#?}"));
    assert_eq!(hit["outcome"], "contain");
    assert_eq!(hit["sha256"], sha256_hex(&secret), "{hit:#}");
    assert!(!serde_json::to_string(&f).unwrap().contains(&secret));
    let v = a.policy_version();
    let d = a
        .decisions("output_contain")
        .into_iter()
        .find(|d| Some(&d["id"]) == hit.get("decision_id"))
        .unwrap_or_else(|| panic!("{:#?}", a.decisions("output_contain")));
    assert_decision(&d, true, &["contain-canary"], &v);
    a.delete(&format!("/v1/sandboxes/{id}")).expect(204);

    // The stream: the canary never goes out, the sandbox is contained.
    let id = a.create(&json!({}))["id"].as_str().unwrap().to_owned();
    let (key_id, secret) = canary_of(&a, &id);
    let (raw, events) = sse(
        &server,
        &id,
        "import os, time\nprint('start', flush=True)\ntime.sleep(0.3)\nprint(os.environ['AWS_ACCESS_KEY_ID'], os.environ['AWS_SECRET_ACCESS_KEY'], flush=True)\ntime.sleep(0.3)\nprint('end')",
    );
    assert!(
        !raw.contains(&secret) && !raw.contains(&key_id),
        "canary leaked: {raw}"
    );
    assert_eq!(events.last().unwrap().0, "done", "{raw}");
    assert_contained(&server, &a, &id);
    assert_no_processes(&server, &a, &id);
}

#[test]
fn the_canary_in_an_egress_request_is_refused_and_contains() {
    let pkgs = Upstream::start("127.0.0.2", "pkgs", HashMap::new());
    let pp = pkgs.port();
    let server = server();
    let a = admin(&server);
    let id = a.create(&json!({ "network": [format!("pkgs.test:{pp}"), "127.0.0.2/32"] }))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, secret) = canary_of(&a, &id);
    let ok = a.run_json(
        &id,
        &format!("{PY_NET}\nprint(json.dumps(fetch('http://pkgs.test:{pp}/ok')))"),
    );
    assert_eq!(ok, json!([200, "hello from pkgs"]));
    // The cell that sends it is cut short: containment kills the sandbox's processes.
    let r = a.execute(
        &id,
        &format!("{PY_NET}\nprint(json.dumps(fetch('http://pkgs.test:{pp}/leak', {{'X-Leak': os.environ['AWS_SECRET_ACCESS_KEY']}})))"),
    );
    let b = r.expect(200).clone();
    assert!(!r.text.contains(&secret), "{b:#}");
    assert!(
        pkgs.seen().iter().all(|s| s.target != "/leak"),
        "the canary reached the host: {:?}",
        pkgs.seen()
    );
    assert_contained(&server, &a, &id);
    let e = egress_until(&a, &id, "the canary refusal recorded", |e| {
        e.iter()
            .any(|e| e["allowed"] == false && e["host"] == "pkgs.test")
    });
    let rec = e
        .iter()
        .find(|e| e["allowed"] == false && e["host"] == "pkgs.test")
        .unwrap();
    assert!(
        rec["reason"].as_str().unwrap().contains("canary"),
        "{rec:#}"
    );
    assert!(!serde_json::to_string(&e).unwrap().contains(&secret));
    // In a body too (another sandbox).
    let id2 = a.create(&json!({ "network": [format!("pkgs.test:{pp}"), "127.0.0.2/32"] }))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = a.execute(
        &id2,
        &format!("{PY_NET}\nprint(json.dumps(fetch('http://pkgs.test:{pp}/post', data=('k=' + os.environ['AWS_SECRET_ACCESS_KEY']).encode())))"),
    );
    r.expect(200);
    assert!(pkgs.seen().iter().all(|s| s.target != "/post"));
    assert_contained(&server, &a, &id2);
    // Egress stays cut: nothing more reaches the host.
    let before = pkgs.seen().len();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(pkgs.seen().len(), before);
    assert_no_processes(&server, &a, &id);
    assert_no_processes(&server, &a, &id2);
}

/// `pip install` and `%pip install` with no `--target` (the sandbox's `PIP_TARGET`,
/// `/workspace/.packages`), and the package imports. Regression (found by this suite): after
/// `%pip install` the package is importable from the next cell only, not in the same cell as
/// in Jupyter.
#[test]
fn plain_pip_install_and_percent_pip_install_work_when_the_index_is_allowed() {
    let dist = "sandlot-gov-plain";
    let marker = random_alnum(12);
    let index = Upstream::start("127.0.0.2", "pkgs", package_index(dist, &marker));
    let p = index.port();
    let server = server();
    let a = admin(&server);
    let id = a.create(&json!({ "network": [format!("pkgs.test:{p}"), "127.0.0.2/32"] }))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = bash(
        &a,
        &id,
        &format!("{} {dist} 2>&1; echo exit=$?", pip_command(p)),
    );
    let out = r["stdout"].as_str().unwrap_or_default();
    assert!(
        out.contains("exit=0"),
        "`pip install {dist}` (no --target) in a sandbox: {out}"
    );
    assert_eq!(
        a.run(
            &id,
            "import sandlot_gov_plain\nprint(sandlot_gov_plain.MARKER)"
        )
        .trim(),
        marker
    );
    let id2 = a.create(&json!({ "network": [format!("pkgs.test:{p}"), "127.0.0.2/32"] }))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = a.execute(
        &id2,
        &format!("%pip install -q --index-url http://pkgs.test:{p}/simple/ --trusted-host pkgs.test {dist}\nimport sandlot_gov_plain\nprint(sandlot_gov_plain.MARKER)"),
    );
    let b = r.expect(200);
    assert_eq!(
        b["end_state"], "ok",
        "`%pip install {dist}` then import in the same cell: {b:#}"
    );
}

/// Regression (found by this suite): a fork, or a sandbox restored from a snapshot,
/// carries its source's Python state, including any copy of the source's canary, but gets a
/// canary of its own and is scanned for that one only: the source's canary printed there goes
/// out in clear.
#[test]
fn forks_and_restores_printing_their_sources_canary_are_contained() {
    let server = server();
    let a = admin(&server);
    let id = a.create(&json!({}))["id"].as_str().unwrap().to_owned();
    let (_, secret) = canary_of(&a, &id);
    a.run(&id, "import os\nc = os.environ['AWS_SECRET_ACCESS_KEY']");
    let fork = a.post(&format!("/v1/sandboxes/{id}/fork"), &json!({}));
    let fid = fork.expect(201)["sandboxes"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let snap = a.post(&format!("/v1/sandboxes/{id}/snapshots"), &json!({}));
    let snap = snap.expect(201)["id"].as_str().unwrap().to_owned();
    let rid = a.create(&json!({ "from_snapshot": snap }))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut leaks = Vec::new();
    for (what, sid) in [("a fork", &fid), ("a restore", &rid)] {
        // Its own canary is a new one.
        let (_, own) = canary_of(&a, sid);
        assert_ne!(own, secret, "{what}");
        let r = a.execute(sid, "print(c)");
        r.expect(200);
        if r.text.contains(&secret) {
            leaks.push(format!("{what}: {}", r.text));
        } else {
            assert_contained(&server, &a, sid);
        }
    }
    assert!(
        leaks.is_empty(),
        "the source's canary leaves in clear through {leaks:#?}"
    );
}

/// Fork, resume and creation from a snapshot make sandboxes as a creation does, so they pass
/// the same gates: a policy that forbids a tenant to create forbids it to fork, to resume a
/// paused sandbox and to start one from its snapshot, through `/v1` and MCP alike, and each
/// refusal is journaled. Regression: all four went through with no decision at all.
#[test]
fn fork_resume_and_from_snapshot_pass_the_creation_gates() {
    let server = server();
    let a = admin(&server);
    let key = server.tenant("frozen").role("member").key();
    let f = As::key(&server, &key);
    let running = f.create(&json!({}))["id"].as_str().unwrap().to_owned();
    assert_eq!(f.run(&running, "x = 41\nprint(x + 1)"), "42\n");
    let paused = f.create(&json!({}))["id"].as_str().unwrap().to_owned();
    f.post(&format!("/v1/sandboxes/{paused}/pause"), &json!({}))
        .expect(200);
    let snapshot = f
        .post(&format!("/v1/sandboxes/{running}/snapshots"), &json!({}))
        .expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Before the policy all three work for this tenant (the forks are deleted again).
    let forked = f.post(&format!("/v1/sandboxes/{running}/fork"), &json!({}));
    let child = forked.expect(201)["sandboxes"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    f.delete(&format!("/v1/sandboxes/{child}")).expect(204);

    let shipped =
        std::fs::read_to_string(server.data_dir().join("policies/policies.cedar")).unwrap();
    let frozen = format!(
        "{shipped}\n@id(\"frozen-tenant\")\n@reason(\"tenant frozen makes no more sandboxes\")\n\
         forbid (principal in Sandlot::Tenant::\"frozen\", \
         action == Sandlot::Action::\"create_sandbox\", resource);\n"
    );
    a.put_policies(&frozen).expect(200);
    // The policy names tenant frozen: that tenant sees it, another tenant does not (nor the
    // name), the operator sees the whole set.
    let ids = |who: &As| -> Vec<String> {
        let r = who.get("/v1/policies");
        common::assert_schema("PolicyInfo", r.expect(200));
        r.body["policies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let other = As::key(&server, &server.tenant("bystander").role("member").key());
    assert!(ids(&f).contains(&"frozen-tenant".to_owned()));
    assert!(ids(&a).contains(&"frozen-tenant".to_owned()));
    let seen = ids(&other);
    assert!(!seen.contains(&"frozen-tenant".to_owned()), "{seen:?}");
    assert!(seen.contains(&"allow-all-gates".to_owned()), "{seen:?}");
    assert!(!other.get("/v1/policies").text.contains("frozen"));

    assert_denied_by(
        &f.post(
            &format!("/v1/sandboxes/{running}/fork"),
            &json!({"count": 2}),
        ),
        "frozen-tenant",
    );
    assert_denied_by(
        &f.post(&format!("/v1/sandboxes/{paused}/resume"), &json!({})),
        "frozen-tenant",
    );
    assert_denied_by(
        &f.post("/v1/sandboxes", &json!({ "from_snapshot": snapshot })),
        "frozen-tenant",
    );
    for (tool, id) in [("fork_sandbox", &running), ("resume_sandbox", &paused)] {
        let out = mcp_call_as(&server, &key, tool, json!({ "sandbox_id": id }));
        assert!(
            out.contains("frozen-tenant") && out.contains("isError"),
            "MCP {tool} should be refused by the policy: {out}"
        );
    }
    // Nothing was made or brought back: the tenant still has its two sandboxes, one paused.
    let list = f.get("/v1/sandboxes").expect(200).clone();
    let states: Vec<(String, String)> = list["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap().to_owned(),
                s["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(states.len(), 2, "{states:?}");
    assert!(
        states.contains(&(paused.clone(), "paused".to_owned())),
        "{states:?}"
    );
    // Every refusal is journaled with the tenant that asked.
    let denials: Vec<Value> = f
        .decisions("create_sandbox")
        .into_iter()
        .filter(|d| d["allowed"] == false)
        .collect();
    assert!(denials.len() >= 5, "{denials:#?}");
    assert!(
        denials.iter().all(|d| d["tenant"] == "frozen"),
        "{denials:#?}"
    );
    assert!(
        denials
            .iter()
            .all(|d| d["policies"] == json!(["frozen-tenant"])),
        "{denials:#?}"
    );
}
