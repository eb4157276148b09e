//! The audit log cannot be flooded, and every refusal names who asked (issue 19).
//!
//! - 50,000 unauthenticated requests (no key, a wrong key, a revoked key, on REST and MCP)
//!   from eight keep-alive clients grow the audit directory by less than 1 MiB: they are
//!   written as one `requests.refused` record per source per interval, whose counts add up to
//!   exactly what was sent (the last interval written at a clean stop); the chain verifies.
//! - Tenant B's refused requests on tenant A's sandbox (REST DELETE and metrics, E2B's
//!   control plane and envd, A's MCP session) are recorded with B's key id and tenant.
//! - With a tiny segment size the log rolls into many segments; `sandlot audit archive`
//!   moves the older ones out; `sandlot audit verify` proves what remains and, with
//!   `--archive`, the archive; an edited record in either is named; the server restarts on
//!   the archived log and keeps the chain.
//! - Behind a reverse proxy named in `SANDLOT_TRUSTED_PROXIES`, refusals are tallied under
//!   the `X-Forwarded-For` hop the proxy appended; without one, the header is ignored (the
//!   flood above sends a forged one).

use crate::common;

use common::{As, TestServer};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// `sandlot audit <args>`: exit code, stdout, stderr.
fn cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sandlot"))
        .arg("audit")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn audit_dir(server: &TestServer) -> PathBuf {
    server.data_dir().join("audit")
}

/// Every record, read from the files (`sandlot audit export`).
fn export(dir: &Path) -> Vec<Value> {
    let (code, out, err) = cli(&["export", "--dir", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The sum of the lengths of the files under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let m = e.metadata().unwrap();
        total += if m.is_dir() {
            bytes_under(&e.path())
        } else {
            m.len()
        };
    }
    total
}

/// Requests sent by the flood's clients, per kind.
const CLIENTS: usize = 8;
const PER_CLIENT: usize = 6_250;

#[test]
fn fifty_thousand_unauthenticated_requests_are_a_few_records() {
    let mut server = TestServer::start_with_env(&[("SANDLOT_AUDIT_REFUSALS_SECONDS", "5")]);
    let common::TenantKey {
        key: revoked,
        id: revoked_id,
    } = server.tenant("flooded").role("admin").create();
    server.delete(&format!("/v1/keys/{revoked_id}")).expect(200);
    let dir = audit_dir(&server);
    let before = bytes_under(&dir);
    let t0 = Instant::now();
    let url = server.url().to_owned();
    let threads: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let url = url.clone();
            let revoked = revoked.clone();
            std::thread::spawn(move || {
                // One keep-alive connection per client.
                let http = common::client_builder().build().unwrap();
                for i in 0..PER_CLIENT {
                    let r = match (c + i) % 4 {
                        // No proxy is trusted: a forged header changes nothing.
                        0 => http
                            .get(format!("{url}/v1/sandboxes"))
                            .header("X-Forwarded-For", "203.0.113.66"),
                        1 => http
                            .get(format!("{url}/v1/sandboxes/sb_nope"))
                            .bearer_auth("sl_not_a_key"),
                        2 => http
                            .get(format!("{url}/v1/sandboxes"))
                            .bearer_auth(&revoked),
                        _ => http
                            .post(format!("{url}/mcp"))
                            .header("Accept", "application/json, text/event-stream")
                            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})),
                    };
                    let r = r.send().unwrap();
                    assert_eq!(r.status(), 401);
                    let _ = r.bytes();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let took = t0.elapsed();
    let sent = (CLIENTS * PER_CLIENT) as u64;
    // A clean stop writes the last interval's tallies.
    assert!(server.stop().success());
    let grown = bytes_under(&dir).saturating_sub(before);
    assert!(
        grown < 1 << 20,
        "{sent} refused requests grew the audit directory by {grown} bytes (in {took:?})"
    );

    let records = export(&dir);
    let tallies: Vec<&Value> = records
        .iter()
        .filter(|r| r["action"] == "requests.refused")
        .collect();
    assert!(!tallies.is_empty());
    for t in &tallies {
        assert_eq!(t["target"]["source"], "127.0.0.1", "{t}");
        assert_eq!(t["actor"], "anonymous");
        assert_eq!(t["outcome"], "refused");
    }
    // One record per interval of 5 s (and the last at the stop), not one per request.
    let intervals = took.as_secs() / 5 + 3;
    assert!(
        tallies.len() as u64 <= intervals,
        "{} tallies in {took:?}",
        tallies.len()
    );
    let count: u64 = tallies
        .iter()
        .map(|t| t["target"]["count"].as_u64().unwrap())
        .sum();
    assert_eq!(count, sent);
    let reason = |name: &str| -> u64 {
        tallies
            .iter()
            .filter_map(|t| t["target"]["reasons"][name].as_u64())
            .sum()
    };
    // REST's 401s carry `unauthenticated`; MCP's JSON-RPC error its code.
    assert_eq!(reason("unauthenticated"), sent / 4 * 3);
    assert_eq!(reason("-32001"), sent / 4);
    let paths: Vec<&str> = tallies
        .iter()
        .flat_map(|t| t["target"]["paths"].as_array().unwrap())
        .map(|p| p.as_str().unwrap())
        .collect();
    for want in ["GET /v1/sandboxes", "GET /v1/sandboxes/{id}", "POST /mcp"] {
        assert!(paths.contains(&want), "{want} not in {paths:?}");
    }
    // No refusal was recorded on its own.
    let single = records
        .iter()
        .filter(|r| r["actor"] == "anonymous" && r["status"] == 401)
        .count();
    assert_eq!(single, 0);

    let (code, out, err) = cli(&["verify", "--dir", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn behind_a_trusted_proxy_refusals_are_tallied_per_client() {
    let mut server = TestServer::start_with_env(&[
        ("SANDLOT_AUDIT_REFUSALS_SECONDS", "60"),
        ("SANDLOT_TRUSTED_PROXIES", "127.0.0.1, 10.0.0.0/8"),
    ]);
    let dir = audit_dir(&server);
    let http = common::client_builder().build().unwrap();
    let url = server.url().to_owned();
    // (what the proxy chain sent, how many times): the client is the right-most hop that is
    // not a trusted proxy, whatever the client itself wrote further left.
    let sent = [
        ("198.51.100.1", 3),
        ("1.2.3.4, 198.51.100.2", 2),
        ("198.51.100.3, 10.0.0.9", 4),
        ("198.51.100.4, not-an-address", 1),
    ];
    for (forwarded, n) in sent {
        for _ in 0..n {
            let r = http
                .get(format!("{url}/v1/sandboxes"))
                .header("X-Forwarded-For", forwarded)
                .send()
                .unwrap();
            assert_eq!(r.status(), 401);
        }
    }
    assert!(server.stop().success());
    let mut by_source = std::collections::BTreeMap::new();
    for t in export(&dir)
        .iter()
        .filter(|r| r["action"] == "requests.refused")
    {
        *by_source
            .entry(t["target"]["source"].as_str().unwrap().to_owned())
            .or_insert(0) += t["target"]["count"].as_u64().unwrap();
    }
    let want: std::collections::BTreeMap<String, u64> = [
        ("198.51.100.1", 3),
        ("198.51.100.2", 2),
        ("198.51.100.3", 4),
        // A hop that is not an address: tallied under the proxy that passed it on.
        ("127.0.0.1", 1),
    ]
    .into_iter()
    .map(|(s, n)| (s.to_owned(), n))
    .collect();
    assert_eq!(by_source, want);

    // A value that names no address stops the server before it serves anything.
    let out = Command::new(env!("CARGO_BIN_EXE_sandlot"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(server.data_dir())
        .env("SANDLOT_TRUSTED_PROXIES", "127.0.0.1, the-proxy")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("SANDLOT_TRUSTED_PROXIES") && err.contains("the-proxy"),
        "{err}"
    );
}

#[test]
fn refusals_with_a_key_name_the_key_and_its_tenant() {
    let server = TestServer::start();
    let key_a = server.tenant("alpha").role("admin").key();
    let common::TenantKey {
        key: key_b,
        id: id_b,
    } = server.tenant("beta").role("admin").create();
    let a = As::key(&server, &key_a);
    let b = As::key(&server, &key_b);
    let sb = a.post("/v1/sandboxes", &json!({})).expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();

    b.delete(&format!("/v1/sandboxes/{sb}"))
        .expect_error(404, "sandbox_not_found");
    b.get(&format!("/v1/sandboxes/{sb}/metrics"))
        .expect_error(404, "sandbox_not_found");
    // E2B's control plane and envd, with B's key.
    let http = common::client_builder().build().unwrap();
    let r = http
        .delete(format!("{}/sandboxes/{sb}", server.url()))
        .header("X-API-KEY", &key_b)
        .send()
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = http
        .get(format!("{}/files?path=/etc/hostname", server.url()))
        .header("E2b-Sandbox-Id", &sb)
        .header("E2b-Sandbox-Port", "49983")
        .header("X-API-KEY", &key_b)
        .send()
        .unwrap();
    assert_eq!(r.status(), 502, "{}", r.text().unwrap_or_default());
    // MCP: B with A's session.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {},
        "clientInfo": {"name": "audit-flood", "version": "1"}}});
    let r = a
        .http
        .post(a.url("/mcp"))
        .header("Accept", "application/json, text/event-stream")
        .json(&init)
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let session = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    drop(r.text());
    let r = b
        .http
        .post(b.url("/mcp"))
        .header("Accept", "application/json, text/event-stream")
        .header("Mcp-Session-Id", &session)
        .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        .send()
        .unwrap();
    let mcp_status = r.status().as_u16();
    assert!((400..500).contains(&mcp_status), "{mcp_status}");
    drop(r.text());
    // A's sandbox is untouched.
    a.get(&format!("/v1/sandboxes/{sb}")).expect(200);

    let deadline = Instant::now() + Duration::from_secs(10);
    let records = loop {
        let r = server.get("/v1/audit?limit=1000&tenant=beta");
        let records = r.expect(200)["records"].as_array().unwrap().clone();
        if records.len() >= 5 || Instant::now() > deadline {
            break records;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let find = |action: &str| -> Value {
        records
            .iter()
            .find(|r| r["action"] == action)
            .unwrap_or_else(|| panic!("no {action} in {records:?}"))
            .clone()
    };
    for (action, status) in [
        ("DELETE /v1/sandboxes/{id}", 404),
        ("GET /v1/sandboxes/{id}/metrics", 404),
        ("DELETE /sandboxes/{id}", 404),
        ("GET sandbox:/files", 502),
        ("POST /mcp", mcp_status),
    ] {
        let r = find(action);
        assert_eq!(r["status"], status, "{r}");
        assert_eq!(r["actor"]["key_id"], id_b.as_str(), "{r}");
        assert_eq!(r["tenant"], "beta", "{r}");
        if action != "POST /mcp" {
            assert_eq!(r["target"]["sandbox"], sb.as_str(), "{r}");
        }
    }
}

#[test]
fn segments_roll_and_archive_with_the_chain_verified_across_the_cut() {
    let mut server = TestServer::start_with_env(&[("SANDLOT_AUDIT_SEGMENT_BYTES", "8192")]);
    for _ in 0..150 {
        server.get("/v1/sandboxes").expect(200);
    }
    std::thread::sleep(Duration::from_millis(50));
    server.get("/v1/health").expect(200);
    std::thread::sleep(Duration::from_millis(50));
    for _ in 0..150 {
        server.get("/v1/sandboxes").expect(200);
    }
    assert!(server.stop().success());
    let dir = audit_dir(&server);
    let dir_s = dir.to_str().unwrap().to_owned();
    let records = export(&dir);
    let segs = |d: &Path| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("seg-"))
            .collect();
        v.sort();
        v
    };
    let before = segs(&dir).len();
    assert!(before >= 8, "{before} segments");
    // The cut: the time of the first request of the second batch.
    let listed: Vec<&Value> = records
        .iter()
        .filter(|r| r["action"] == "GET /v1/sandboxes")
        .collect();
    assert_eq!(listed.len(), 300);
    let cut = listed[150]["at"].as_str().unwrap().to_owned();

    let archive = tempfile::tempdir().unwrap();
    let to = archive.path().join("2026");
    let (code, out, err) = cli(&[
        "archive",
        "--dir",
        &dir_s,
        "--before",
        &cut,
        "--to",
        to.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    let boundary = report["boundary"].as_u64().unwrap();
    let moved = segs(&to);
    assert!(moved.len() >= 3, "{report}");
    // (The audit.archived record may open one more segment.)
    assert!((before..=before + 1).contains(&(segs(&dir).len() + moved.len())));
    // Everything archived was recorded before the cut.
    let last_archived = records.iter().find(|r| r["seq"] == boundary).unwrap();
    assert!(last_archived["at"].as_str().unwrap() < cut.as_str());

    let (code, out, err) = cli(&["verify", "--dir", &dir_s]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("from record {}", boundary + 1)),
        "{out}"
    );
    let (code, out, err) = cli(&["verify", "--dir", &dir_s, "--archive", to.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("archive "), "{out}");

    // One record edited in what remains: named.
    let kept = segs(&dir);
    let flip = |path: &Path, line: usize| -> Vec<u8> {
        let orig = std::fs::read(path).unwrap();
        let mut data = orig.clone();
        let start: usize = data
            .split_inclusive(|&b| b == b'\n')
            .take(line - 1)
            .map(<[u8]>::len)
            .sum();
        let at = start
            + data[start..]
                .windows(8)
                .position(|w| w == b"sandboxe")
                .unwrap();
        data[at] = b'S';
        std::fs::write(path, data).unwrap();
        orig
    };
    let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
    let orig = flip(&kept[0], 2);
    let (code, _, err) = cli(&["verify", "--dir", &dir_s]);
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!(
            "record {} ({} line 2)",
            boundary + 2,
            name(&kept[0])
        )),
        "{err}"
    );
    std::fs::write(&kept[0], orig).unwrap();
    // One record edited in the archive: named there.
    let orig = flip(&moved[1], 3);
    let (code, out, err) = cli(&["verify", "--dir", &dir_s, "--archive", to.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(err.contains("archive "), "{err}");
    assert!(
        err.contains(&format!("({} line 3)", name(&moved[1]))),
        "{err}"
    );
    std::fs::write(&moved[1], orig).unwrap();
    let (code, out, err) = cli(&["verify", "--dir", &dir_s, "--archive", to.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");

    // The server starts on the archived log and keeps the chain.
    server.restart();
    server.get("/v1/sandboxes").expect(200);
    let cp = server.get("/v1/audit/checkpoint");
    assert_eq!(cp.expect(200)["status"]["state"], "ok");
    let archived = server.get("/v1/audit?limit=10&action=audit.archived");
    let archived = archived.expect(200)["records"].as_array().unwrap().clone();
    assert_eq!(archived.len(), 1);
    assert_eq!(archived[0]["target"]["boundary"], boundary);
    assert!(server.stop().success());
    let (code, out, err) = cli(&["verify", "--dir", &dir_s]);
    assert_eq!(code, 0, "{out}{err}");
}
