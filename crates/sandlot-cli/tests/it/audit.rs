//! The audit log on the real server: every request (REST, refusals, lifecycle events) leaves a
//! record with the right actor, tenant, action and outcome, with digests and never contents;
//! `sandlot audit verify` proves the log with the server running or not and names a record
//! whose byte was edited; a corrupt log refuses actions until the operator seals it; a full
//! disk refuses actions with 503 `audit_unavailable` and nothing runs unrecorded; turning
//! audit off is recorded; `kill -9` and a restart keep the chain; tenants can neither read nor
//! change the log; hostile query parameters get 400s.

use crate::common;

use common::TestServer;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn records(server: &TestServer, query: &str) -> Vec<Value> {
    let r = server.get(&format!("/v1/audit?limit=1000{query}"));
    r.expect(200)["records"].as_array().unwrap().clone()
}

fn put_json(server: &TestServer, path: &str, body: &Value) -> common::Resp {
    let r = server
        .client()
        .put(format!("{}{path}", server.url()))
        .json(body)
        .send()
        .unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r.text().unwrap_or_default();
    common::Resp {
        status,
        headers,
        body: serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    }
}

fn audit_dir(server: &TestServer) -> PathBuf {
    server.data_dir().join("audit")
}

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

fn verify(server: &TestServer) -> (i32, String, String) {
    cli(&["verify", "--data-dir", server.data_dir().to_str().unwrap()])
}

fn all_bytes(dir: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    for e in walk(dir) {
        out.extend(std::fs::read(e).unwrap_or_default());
    }
    out
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            v.extend(walk(&p));
        } else {
            v.push(p);
        }
    }
    v
}

fn wait_records(server: &TestServer, query: &str, n: usize) -> Vec<Value> {
    let mut last = Vec::new();
    common::wait_until(Duration::from_secs(10), || {
        last = records(server, query);
        last.len() >= n
    });
    last
}

#[test]
fn requests_and_lifecycle_are_recorded_with_digests_not_contents() {
    // Unauthenticated refusals are tallied per source and written once per interval.
    let server = TestServer::start_with_env(&[("SANDLOT_AUDIT_REFUSALS_SECONDS", "1")]);
    let id = server.create_sandbox();
    let marker = "AUDIT_MARKER_8f3e2a";
    let body = json!({"code": format!("print('{marker}')")});
    let r = server.execute_with(&id, &body);
    r.expect(200);
    server
        .get("/v1/sandboxes/sb_nope")
        .expect_error(404, "sandbox_not_found");
    let anon = reqwest::blocking::Client::new()
        .get(format!("{}/v1/sandboxes", server.url()))
        .send()
        .unwrap();
    assert_eq!(anon.status(), 401);

    let recs = wait_records(&server, "&action=POST%20/v1/sandboxes/%7Bid%7D/execute", 1);
    let ex = &recs[0];
    assert_eq!(ex["target"]["sandbox"], id.as_str());
    assert_eq!(ex["outcome"], "ok");
    assert_eq!(ex["status"], 200);
    assert_eq!(ex["tenant"], "default");
    assert!(
        ex["actor"]["key_prefix"].as_str().unwrap().len() > 3,
        "{ex}"
    );
    // The execution is named once the execute handler notes it (`Note::set_execution`); the
    // lifecycle record below always names it.
    let ex_id = ex["execution_id"].clone();
    let sent = serde_json::to_vec(&body).unwrap();
    assert_eq!(ex["request_sha256"], hex::encode(Sha256::digest(&sent)));
    assert_eq!(
        ex["response_sha256"],
        hex::encode(Sha256::digest(r.text.as_bytes()))
    );

    let created = records(&server, "&action=POST%20/v1/sandboxes&to=1000000");
    assert!(created
        .iter()
        .any(|r| r["action"] == "POST /v1/sandboxes" && r["status"] == 201));
    let life = wait_records(&server, "&action=sandbox.executed", 1);
    assert_eq!(life[0]["actor"], "system");
    assert_eq!(life[0]["target"]["sandbox"], id.as_str());
    assert!(life[0]["execution_id"].as_str().is_some(), "{:?}", life[0]);
    if !ex_id.is_null() {
        assert_eq!(ex_id, life[0]["execution_id"]);
    }
    let missing = records(&server, "&action=GET%20/v1/sandboxes/%7Bid%7D");
    assert!(missing
        .iter()
        .any(|r| r["outcome"] == "error:sandbox_not_found" && r["status"] == 404));
    let refused = wait_records(&server, "&action=requests.refused", 1);
    assert!(
        refused.iter().any(|r| r["actor"] == "anonymous"
            && r["target"]["reasons"]["unauthenticated"].as_u64() >= Some(1)
            && r["target"]["paths"]
                .as_array()
                .is_some_and(|p| p.iter().any(|p| p == "GET /v1/sandboxes"))),
        "{refused:?}"
    );
    // E2B's control plane is recorded the same way (with its own key).
    let e2b_key = std::fs::read_to_string(server.data_dir().join("e2b-api-key")).unwrap();
    let r = reqwest::blocking::Client::new()
        .get(format!("{}/sandboxes", server.url()))
        .header("X-API-KEY", e2b_key.trim())
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let e2b = wait_records(&server, "&action=GET%20/sandboxes", 1);
    assert_eq!(e2b[0]["outcome"], "ok");
    assert_ne!(e2b[0]["actor"], "anonymous");

    // MCP too, with the caller's key.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {},
        "clientInfo": {"name": "audit-test", "version": "1"}}});
    let r = server
        .client()
        .post(format!("{}/mcp", server.url()))
        .header("Accept", "application/json, text/event-stream")
        .json(&init)
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    drop(r.text());
    let mcp = wait_records(&server, "&action=POST%20/mcp", 1);
    assert_eq!(mcp[0]["tenant"], "default");
    assert!(mcp[0]["actor"]["key_id"].is_string(), "{:?}", mcp[0]);
    assert_eq!(
        mcp[0]["request_sha256"],
        hex::encode(Sha256::digest(serde_json::to_vec(&init).unwrap()))
    );

    // Digests only: the code's text is nowhere in the audit files.
    let bytes = all_bytes(&audit_dir(&server));
    let hay = String::from_utf8_lossy(&bytes);
    assert!(!hay.contains(marker), "the code's text is in the audit log");

    // Verified with the server running.
    let (code, out, err) = verify(&server);
    assert_eq!(code, 0, "{out}{err}");
    // The checkpoint view: a C2SP note and the verifier key, which verify pins.
    let cp = server.get("/v1/audit/checkpoint");
    let cp = cp.expect(200).clone();
    assert_eq!(cp["status"]["state"], "ok");
    let key = cp["verifier_key"].as_str().unwrap();
    let (code, out, err) = cli(&[
        "verify",
        "--dir",
        audit_dir(&server).to_str().unwrap(),
        "--key",
        key,
    ]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn tenants_cannot_read_or_change_the_log_and_hostile_params_are_refused() {
    let server = TestServer::start();
    let key = server.tenant("acme").role("admin").key();
    let t = server.client_with_key(Some(&key));
    let u = |p: &str| format!("{}{p}", server.url());
    for (m, p) in [
        ("GET", "/v1/audit"),
        ("GET", "/v1/audit/checkpoint"),
        ("PUT", "/v1/audit"),
        ("POST", "/v1/audit/seal"),
    ] {
        let req = match m {
            "GET" => t.get(u(p)),
            "PUT" => t.put(u(p)).json(&json!({"enabled": false})),
            _ => t.post(u(p)),
        };
        let r = req.send().unwrap();
        assert_eq!(r.status(), 403, "{m} {p}");
    }
    let recs = wait_records(&server, "&tenant=acme&action=PUT%20/v1/audit", 1);
    assert_eq!(recs[0]["outcome"], "error:forbidden");
    assert_eq!(
        server.get("/v1/audit/checkpoint").expect(200)["enabled"],
        true
    );

    for q in [
        "limit=0",
        "limit=100000",
        "from=9&to=2",
        "bogus=1",
        "limit=-1",
        "from=abc",
        "after=99999999999999999999999",
    ] {
        let r = server.get(&format!("/v1/audit?{q}"));
        r.expect_error(400, "invalid_request");
    }
    let big = "x".repeat(300);
    server
        .get(&format!("/v1/audit?action={big}"))
        .expect_error(400, "invalid_request");
    // Huge ranges are paged, never all at once.
    let r = server.get("/v1/audit?from=1&to=18446744073709551615&limit=2");
    let page = r.expect(200);
    assert_eq!(page["records"].as_array().unwrap().len(), 2);
    assert!(page["next"].as_u64().is_some());
    let r = server.get("/v1/audit?from=18446744073709551615");
    assert_eq!(r.expect(200)["records"].as_array().unwrap().len(), 0);
    put_json(&server, "/v1/audit", &json!({"enabled": "nope"}))
        .expect_error(400, "invalid_request");
}

#[test]
fn turning_audit_off_is_recorded() {
    let mut server = TestServer::start();
    put_json(&server, "/v1/audit", &json!({"enabled": false})).expect(200);
    server.get("/v1/sandboxes").expect(200);
    put_json(&server, "/v1/audit", &json!({"enabled": true})).expect(200);
    let recs = records(&server, "&action=audit.");
    let actions: Vec<&str> = recs.iter().map(|r| r["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["audit.disabled", "audit.enabled"], "{recs:?}");
    assert!(recs[0]["actor"]["key_id"].is_string());
    // Nothing was recorded while it was off (the GET between).
    let gets = records(&server, "&action=GET%20/v1/sandboxes");
    assert!(gets.is_empty(), "{gets:?}");
    // Off at start, by the environment, is recorded too.
    server.stop();
    let mut off = TestServer::start_with_env(&[("SANDLOT_AUDIT", "off")]);
    off.stop();
    let mut out = Vec::new();
    let n = sandlot_audit::export(&off.data_dir().join("audit"), None, None, &mut out).unwrap();
    assert!(n >= 1);
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("\"action\":\"audit.disabled\""), "{text}");
    assert!(text.contains("SANDLOT_AUDIT=off"), "{text}");
}

#[test]
fn an_edited_byte_is_named_by_verify_and_refused_until_sealed() {
    let mut server = TestServer::start();
    for _ in 0..5 {
        server.get("/v1/sandboxes").expect(200);
    }
    server.stop();
    let (code, out, err) = verify(&server);
    assert_eq!(code, 0, "{out}{err}");
    let seg = audit_dir(&server).join("seg-00000001.jsonl");
    let mut data = std::fs::read(&seg).unwrap();
    let nl: Vec<usize> = data
        .iter()
        .enumerate()
        .filter(|(_, &b)| b == b'\n')
        .map(|(i, _)| i)
        .collect();
    let at = nl[1] + 40; // a byte of record 3
    data[at] = if data[at] == b'7' { b'8' } else { b'7' };
    std::fs::write(&seg, &data).unwrap();
    let (code, _out, err) = verify(&server);
    assert_eq!(code, 1);
    assert!(
        err.contains("record 3 (seg-00000001.jsonl line 3)"),
        "{err}"
    );

    // The server refuses to append past it: actions answer 503 until the operator seals.
    server.restart();
    server
        .get("/v1/sandboxes")
        .expect_error(503, "audit_unavailable");
    server
        .post("/v1/sandboxes", &json!({}))
        .expect_error(503, "audit_unavailable");
    let cp = server.get("/v1/audit/checkpoint");
    let st = &cp.expect(200)["status"];
    assert_eq!(st["state"], "corrupt");
    assert_eq!(st["first_bad"]["seq"], 3);
    let sealed = server.post("/v1/audit/seal", &json!({}));
    let report = sealed.expect(200);
    assert_eq!(report["kept"], 2);
    server.get("/v1/sandboxes").expect(200);
    let seals = records(&server, "&action=audit.sealed");
    assert_eq!(seals.len(), 1);
    assert_eq!(seals[0]["seq"], 3);
    let (code, out, err) = verify(&server);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("sealed"), "{out}");
    // A second seal has nothing to do.
    server
        .post("/v1/audit/seal", &json!({}))
        .expect_error(400, "invalid_request");
}

#[test]
fn kill9_and_restart_keep_the_chain() {
    let mut server = TestServer::start();
    let id = server.create_sandbox();
    server.execute(&id, "1+1");
    server.kill9();
    server.restart();
    server.get("/v1/sandboxes").expect(200);
    let (code, out, err) = verify(&server);
    assert_eq!(code, 0, "{out}{err}");
    // Export gives the records as stored, by range.
    let f = tempfile::NamedTempFile::new().unwrap();
    let (code, _, err) = cli(&[
        "export",
        "--data-dir",
        server.data_dir().to_str().unwrap(),
        "--format",
        "jsonl",
        "--from",
        "2",
        "--to",
        "3",
        "-o",
        f.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(f.path()).unwrap();
    let seqs: Vec<u64> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(seqs, [2, 3]);
}

fn mount_tmpfs(at: &Path, kib: u64) -> bool {
    Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
        .arg(at)
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn a_full_disk_refuses_actions_and_nothing_runs_unrecorded() {
    let mut server = TestServer::start();
    server.create_sandbox();
    server.stop();
    // Move the audit dir onto a small tmpfs.
    let dir = audit_dir(&server);
    let saved = server.data_dir().join("audit.saved");
    std::fs::rename(&dir, &saved).unwrap();
    std::fs::create_dir(&dir).unwrap();
    if !mount_tmpfs(&dir, 4096) {
        // Under CI a test that cannot run fails: a full disk must never pass untested.
        assert!(
            std::env::var_os("CI").is_none(),
            "cannot mount a tmpfs (not root?): this test may not be skipped under CI"
        );
        eprintln!("cannot mount a tmpfs (not root?): skipped");
        return;
    }
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for e in std::fs::read_dir(&saved).unwrap().flatten() {
            if e.path().is_file() {
                std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
            }
        }
        server.restart();
        server.get("/v1/sandboxes").expect(200);
        // Fill the tmpfs.
        let filler = dir.join("filler");
        let mut f = std::fs::File::create(&filler).unwrap();
        use std::io::Write;
        let chunk = vec![0u8; 64 << 10];
        while f.write_all(&chunk).is_ok() {}
        drop(f);
        // The reserve lets some requests through, then actions are refused before they run.
        let mut ok = 0usize;
        let mut refused = false;
        for _ in 0..20_000 {
            let r = server.get("/v1/sandboxes");
            if r.status == 503 {
                r.expect_error(503, "audit_unavailable");
                refused = true;
                break;
            }
            r.expect(200);
            ok += 1;
        }
        assert!(refused, "never refused after {ok} requests");
        let before = std::fs::read_dir(server.data_dir()).unwrap().count();
        server
            .post("/v1/sandboxes", &json!({}))
            .expect_error(503, "audit_unavailable");
        let cp = server.get("/v1/audit/checkpoint");
        assert_eq!(cp.expect(200)["status"]["state"], "unavailable");
        // Room again: actions run, and every one that ran is on record.
        std::fs::remove_file(&filler).unwrap();
        std::thread::sleep(Duration::from_millis(1200));
        let listed = server.get("/v1/sandboxes");
        listed.expect(200);
        // Nothing was created while refused.
        assert_eq!(
            std::fs::read_dir(server.data_dir()).unwrap().count(),
            before
        );
        let mut seen = 0usize;
        let mut after = 0u64;
        loop {
            let r = server.get(&format!(
                "/v1/audit?limit=1000&after={after}&action=GET%20/v1/sandboxes&outcome=ok"
            ));
            let page = r.expect(200).clone();
            seen += page["records"].as_array().unwrap().len();
            match page["next"].as_u64() {
                Some(n) => after = n,
                None => break,
            }
        }
        // The ones before the fill, the ones admitted during it, and the one after.
        assert_eq!(seen, ok + 2, "records of the GETs that ran");
        let refused_recs = records(&server, "&outcome=error:audit_unavailable");
        assert!(
            refused_recs.is_empty(),
            "a refused request left a record in a full log?"
        );
        server.stop();
        let (code, out, err) = verify(&server);
        assert_eq!(code, 0, "{out}{err}");
    }));
    server.kill9();
    let _ = Command::new("umount").arg(&dir).status();
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}
