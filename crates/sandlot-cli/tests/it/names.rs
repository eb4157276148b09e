//! Volume and template names are per tenant (sandlot issue 19), against a real `sandlot serve`
//! on 127.0.0.1: two tenants each have a volume `data` and a template `t1` and each sandbox
//! sees its own; another tenant's name answers exactly as a name never used (no existence
//! oracle); the operator sees and manages every tenant's with `?tenant=`; deleting a template
//! frees its share slot and is refused while a paused sandbox or a snapshot needs it; bad
//! names are 400 with a stable code; a flat template spec from before names were per tenant
//! comes back as its tenant's after a restart.

use crate::common;

use common::{wait_until, As, Resp, TestServer};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::time::Duration;

const BUILD: Duration = Duration::from_secs(120);

/// A tenant whose shares are capped at `max_templates` and an admin key of it.
fn tenant(server: &TestServer, name: &str, max_templates: u64) -> String {
    server
        .post(
            "/v1/tenants",
            &json!({"name": name, "quotas": {"max_templates": max_templates}}),
        )
        .expect(201);
    server
        .post("/v1/keys", &json!({"tenant": name, "role": "admin"}))
        .expect(201)["key"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Builds template `name` (setup `who = '<value>'`) and waits until it is ready.
#[track_caller]
fn template(a: &As, name: &str, value: &str) {
    let r = a.post(
        "/v1/templates",
        &json!({"name": name, "setup": format!("who = '{value}'")}),
    );
    r.expect(202);
    let ready = wait_until(BUILD, || {
        a.get(&format!("/v1/templates/{name}")).body["status"] != "building"
    });
    let t = a.get(&format!("/v1/templates/{name}"));
    assert!(ready && t.body["status"] == "ready", "{}", t.text);
}

#[track_caller]
fn text(a: &As, id: &str, code: &str) -> String {
    let r = a.post(
        &format!("/v1/sandboxes/{id}/execute"),
        &json!({ "code": code }),
    );
    let b = r.expect(200);
    assert_eq!(b["end_state"], "ok", "{}", r.text);
    b["result"]["text/plain"].as_str().unwrap_or("").to_owned()
}

/// The answer with `name` spelled `*`: an owned name's answer must equal a never-used one's.
fn shape(r: &Resp, name: &str) -> (u16, String) {
    (r.status, r.text.replace(name, "*"))
}

/// Sends one request as raw bytes (a path no HTTP client would send as written) and returns
/// the status and the body.
fn raw(server: &TestServer, key: &str, method: &str, path: &[u8]) -> (u16, Value) {
    let addr = server.url().trim_start_matches("http://").to_owned();
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut req = format!("{method} ").into_bytes();
    req.extend_from_slice(path);
    req.extend_from_slice(
        format!(
            " HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\nConnection: close\r\n\
             Content-Length: 0\r\n\r\n"
        )
        .as_bytes(),
    );
    s.write_all(&req).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    // A chunked body: the JSON is between the first size line and the end.
    let json = body
        .find('{')
        .and_then(|i| body.rfind('}').map(|j| &body[i..=j]))
        .unwrap_or("null");
    (status, serde_json::from_str(json).unwrap_or(Value::Null))
}

#[test]
fn two_tenants_have_their_own_data_and_t1() {
    let server = TestServer::start();
    let ka = tenant(&server, "alpha", 4);
    let kb = tenant(&server, "beta", 4);
    let (a, b) = (As::key(&server, &ka), As::key(&server, &kb));
    for (who, c) in [("alpha", &a), ("beta", &b)] {
        let v = c.post("/v1/volumes", &json!({"name": "data", "size_mb": 64}));
        assert_eq!(v.expect(201)["tenant"], who, "{}", v.text);
        c.server_put(
            "/v1/volumes/data/files/who.txt",
            format!("{who} data").into_bytes(),
        )
        .expect(201);
        template(c, "t1", &format!("{who} t1"));
    }
    for (who, c) in [("alpha", &a), ("beta", &b)] {
        let id = c
            .post(
                "/v1/sandboxes",
                &json!({"template": "t1", "volumes": [{"name": "data", "path": "data"}]}),
            )
            .expect(201)["id"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(text(c, &id, "who"), format!("'{who} t1'"));
        assert_eq!(
            text(c, &id, "open('data/who.txt').read()"),
            format!("'{who} data'")
        );
        let t = c.get("/v1/templates/t1");
        assert_eq!(t.expect(200)["tenant"], who, "{}", t.text);
        // Each lists its own `data` and `t1` (and the built-in `default`), nobody else's.
        let vols = c.get("/v1/volumes");
        let vols = vols.expect(200)["volumes"].as_array().unwrap().clone();
        assert_eq!(vols.len(), 1, "{vols:?}");
        assert_eq!(vols[0]["tenant"], who);
        let tmpls = c.get("/v1/templates");
        let names: Vec<(String, String)> = tmpls.expect(200)["templates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["name"].as_str().unwrap().to_owned(),
                    t["tenant"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                ("default".into(), "default".into()),
                ("t1".into(), who.into())
            ],
            "{}",
            tmpls.text
        );
        c.delete(&format!("/v1/sandboxes/{id}")).expect(204);
    }

    // The operator lists both tenants' (each with its tenant), or one tenant's.
    let all = server.get("/v1/volumes");
    let tenants: Vec<&str> = all.expect(200)["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["name"] == "data")
        .map(|v| v["tenant"].as_str().unwrap())
        .collect();
    assert_eq!(tenants, ["alpha", "beta"], "{}", all.text);
    let t1s = server.get("/v1/templates");
    let n = t1s.expect(200)["templates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"] == "t1")
        .count();
    assert_eq!(n, 2, "{}", t1s.text);
    let only = server.get("/v1/volumes?tenant=beta");
    assert_eq!(only.expect(200)["volumes"][0]["tenant"], "beta");
    assert_eq!(
        only.body["volumes"].as_array().unwrap().len(),
        1,
        "{}",
        only.text
    );
    // The operator addresses one tenant's object with `?tenant=`; its own name is its own.
    let got = server.get("/v1/volumes/data?tenant=alpha");
    assert_eq!(got.expect(200)["tenant"], "alpha", "{}", got.text);
    let got = server.get("/v1/templates/t1?tenant=beta");
    assert_eq!(got.expect(200)["tenant"], "beta", "{}", got.text);
    server
        .get("/v1/volumes/data")
        .expect_error(404, "volume_not_found");
    let (st, _, bytes) = server.get_bytes("/v1/volumes/data/files/who.txt?tenant=beta");
    assert_eq!((st, bytes), (200, b"beta data".to_vec()));
    // A tenant naming another tenant is refused whether or not it has the name (no oracle);
    // naming itself is the same as not naming.
    for path in [
        "/v1/volumes/data?tenant=beta",
        "/v1/volumes/nothing-here?tenant=beta",
        "/v1/volumes?tenant=beta",
        "/v1/templates/t1?tenant=beta",
        "/v1/templates?tenant=beta",
        "/v1/volumes/data/files?tenant=beta",
    ] {
        a.get(path).expect_error(403, "forbidden");
    }
    a.delete("/v1/templates/t1?tenant=beta")
        .expect_error(403, "forbidden");
    a.get("/v1/volumes/data?tenant=alpha").expect(200);
    for bad in ["", "Beta", "a/b", "..", &"x".repeat(49)] {
        let path = format!("/v1/volumes/data?tenant={}", bad.replace('/', "%2F"));
        server.get(&path).expect_error(400, "invalid_argument");
    }

    // The operator deletes a tenant's volume and template; the other tenant's stay.
    server.delete("/v1/volumes/data?tenant=beta").expect(204);
    server.delete("/v1/templates/t1?tenant=beta").expect(204);
    b.get("/v1/volumes/data")
        .expect_error(404, "volume_not_found");
    b.get("/v1/templates/t1")
        .expect_error(404, "template_not_found");
    a.get("/v1/volumes/data").expect(200);
    assert_eq!(a.get("/v1/templates/t1").expect(200)["status"], "ready");
}

#[test]
fn another_tenants_names_are_as_missing_as_names_never_used() {
    let server = TestServer::start();
    let ka = tenant(&server, "alpha", 4);
    let kb = tenant(&server, "beta", 4);
    let (a, b) = (As::key(&server, &ka), As::key(&server, &kb));
    a.post("/v1/volumes", &json!({"name": "only-a", "size_mb": 64}))
        .expect(201);
    a.server_put("/v1/volumes/only-a/files/f.txt", b"a".to_vec())
        .expect(201);
    template(&a, "only-a-t", "alpha");
    let (owned_v, never) = ("only-a", "never-seen");
    type Probe = fn(&As, &str) -> Resp;
    let probes: [(&str, Probe); 10] = [
        ("GET volume", |c, n| c.get(&format!("/v1/volumes/{n}"))),
        ("DELETE volume", |c, n| {
            c.delete(&format!("/v1/volumes/{n}"))
        }),
        ("list volume files", |c, n| {
            c.get(&format!("/v1/volumes/{n}/files"))
        }),
        ("GET volume file", |c, n| {
            c.get(&format!("/v1/volumes/{n}/files/f.txt"))
        }),
        ("PUT volume file", |c, n| {
            c.server_put(&format!("/v1/volumes/{n}/files/f.txt"), b"b".to_vec())
        }),
        ("DELETE volume file", |c, n| {
            c.delete(&format!("/v1/volumes/{n}/files/f.txt"))
        }),
        ("mount", |c, n| {
            c.post(
                "/v1/sandboxes",
                &json!({"volumes": [{"name": n, "path": "d"}]}),
            )
        }),
        ("GET template", |c, n| c.get(&format!("/v1/templates/{n}t"))),
        ("DELETE template", |c, n| {
            c.delete(&format!("/v1/templates/{n}t"))
        }),
        ("create from template", |c, n| {
            c.post("/v1/sandboxes", &json!({"template": format!("{n}t")}))
        }),
    ];
    // Template probes add a `t` to the name they are given (`only-a-` + `t`).
    for (what, probe) in probes {
        let (owned, missing) = if what.contains("template") {
            ("only-a-", "never-seen-")
        } else {
            (owned_v, never)
        };
        let r = probe(&b, owned);
        let n = probe(&b, missing);
        let full = |s: &str| {
            if what.contains("template") {
                format!("{s}t")
            } else {
                s.to_owned()
            }
        };
        assert!(
            r.status == 404,
            "{what}: another tenant's: {} {}",
            r.status,
            r.text
        );
        assert_eq!(
            shape(&r, &full(owned)),
            shape(&n, &full(missing)),
            "{what}: another tenant's name answers unlike a name never used"
        );
    }
    // B may take A's names for its own; A's are untouched.
    b.post("/v1/volumes", &json!({"name": "only-a", "size_mb": 64}))
        .expect(201);
    assert_eq!(
        a.get_bytes_as("/v1/volumes/only-a/files/f.txt"),
        b"a".to_vec()
    );
    assert_eq!(
        a.get("/v1/templates/only-a-t").expect(200)["tenant"],
        "alpha"
    );
}

#[test]
fn deleting_a_template_frees_its_share_and_waits_for_what_needs_it() {
    let server = TestServer::start();
    let ka = tenant(&server, "alpha", 1);
    let a = As::key(&server, &ka);
    template(&a, "t1", "one");
    // At the cap: a second template is refused until the first is deleted.
    let r = a.post("/v1/templates", &json!({"name": "t2"}));
    r.expect_error(429, "tenant_quota_exceeded");
    assert!(r.message().contains("max_templates"), "{}", r.text);

    // A paused sandbox of it: the deletion is refused, the sandbox resumes and still works.
    let id = a
        .post("/v1/sandboxes", &json!({"template": "t1"}))
        .expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    a.post(&format!("/v1/sandboxes/{id}/pause"), &json!({}))
        .expect(200);
    let r = a.delete("/v1/templates/t1");
    r.expect_error(409, "template_in_use");
    assert!(r.message().contains(&id), "{}", r.text);
    a.post(&format!("/v1/sandboxes/{id}/resume"), &json!({}))
        .expect(200);
    assert_eq!(text(&a, &id, "who"), "'one'");
    // A snapshot of it: refused too, until the snapshot goes.
    let snap = a
        .post(&format!("/v1/sandboxes/{id}/snapshots"), &json!({}))
        .expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    a.delete(&format!("/v1/sandboxes/{id}")).expect(204);
    let r = a.delete("/v1/templates/t1");
    r.expect_error(409, "template_in_use");
    assert!(r.message().contains(&snap), "{}", r.text);
    a.delete(&format!("/v1/snapshots/{snap}")).expect(204);

    // Nothing needs it now: deleted; gone for its tenant; the slot is free again.
    a.delete("/v1/templates/t1").expect(204);
    a.get("/v1/templates/t1")
        .expect_error(404, "template_not_found");
    a.delete("/v1/templates/t1")
        .expect_error(404, "template_not_found");
    a.post("/v1/sandboxes", &json!({"template": "t1"}))
        .expect_error(404, "template_not_found");
    template(&a, "t2", "two");
    // The same name again is a new template with its own setup.
    a.delete("/v1/templates/t2").expect(204);
    template(&a, "t1", "again");
    let id = a
        .post("/v1/sandboxes", &json!({"template": "t1"}))
        .expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(text(&a, &id, "who"), "'again'");

    // The built-in template is nobody's to delete.
    a.delete("/v1/templates/default")
        .expect_error(400, "invalid_argument");
    server
        .delete("/v1/templates/default")
        .expect_error(400, "invalid_argument");
    assert_eq!(
        a.get("/v1/templates/default").expect(200)["status"],
        "ready"
    );
}

#[test]
fn bad_names_are_refused_with_a_stable_code() {
    let server = TestServer::start();
    let ka = tenant(&server, "alpha", 4);
    let a = As::key(&server, &ka);
    let long = "x".repeat(300);
    for name in ["", "..", "a/b", "Data", long.as_str(), "default\n"] {
        a.post("/v1/volumes", &json!({ "name": name }))
            .expect_error(400, "invalid_argument");
        a.post("/v1/templates", &json!({ "name": name }))
            .expect_error(400, "invalid_argument");
    }
    // In paths: `..` as written, `/` percent-encoded, too long, upper case: 400.
    for (method, kind) in [
        ("GET", "volumes"),
        ("DELETE", "volumes"),
        ("GET", "templates"),
        ("DELETE", "templates"),
    ] {
        let code = "invalid_argument";
        for seg in ["..", "a%2Fb", "%2E%2E", long.as_str(), "Data", "a%00b"] {
            let path = format!("/v1/{kind}/{seg}");
            let (st, body) = raw(&server, &ka, method, path.as_bytes());
            assert_eq!(
                (st, body["error"]["code"].as_str().unwrap_or("")),
                (400, code),
                "{method} {path}: {body}"
            );
        }
        // Not UTF-8 once decoded.
        let path = format!("/v1/{kind}/a%FFb");
        let (st, body) = raw(&server, &ka, method, path.as_bytes());
        assert_eq!(
            (st, body["error"]["code"].as_str().unwrap_or("")),
            (400, "invalid_request"),
            "{method} {path}: {body}"
        );
        // Raw bytes that are not UTF-8 in the request line.
        let mut path = format!("/v1/{kind}/a").into_bytes();
        path.push(0xff);
        let (st, _) = raw(&server, &ka, method, &path);
        assert_eq!(st, 400, "{method} raw 0xff");
    }
    // Volume file routes check the volume's name first.
    let (st, body) = raw(&server, &ka, "GET", b"/v1/volumes/../files/x");
    assert_eq!(st, 400, "{body}");
    // Nothing was made by any of it.
    assert!(a.get("/v1/volumes").expect(200)["volumes"]
        .as_array()
        .unwrap()
        .is_empty());
}

#[test]
fn a_flat_template_spec_from_before_comes_back_as_its_tenants() {
    let mut server = TestServer::start();
    let ka = tenant(&server, "alpha", 4);
    let kb = tenant(&server, "beta", 4);
    server.stop();
    // What a data dir of schema 8 holds for a template alpha built: the flat spec and an
    // owner row (the migration marks every row then as a flat spec's).
    let dir = server.data_dir().to_owned();
    std::fs::write(
        dir.join("templates/legacy.json"),
        json!({"name": "legacy", "setup": "who = 'legacy'"}).to_string(),
    )
    .unwrap();
    let db = dir.join("sandlot.db");
    let out = std::process::Command::new("sqlite3")
        .arg(&db)
        .arg("INSERT INTO template_owners (tenant, name, flat) VALUES ('alpha', 'legacy', 1);")
        .output()
        .expect("sqlite3");
    assert!(out.status.success(), "{out:?}");
    server.restart();
    let (a, b) = (As::key(&server, &ka), As::key(&server, &kb));
    let ready = wait_until(BUILD, || {
        a.get("/v1/templates/legacy").body["status"] == "ready"
    });
    assert!(ready, "{}", a.get("/v1/templates/legacy").text);
    assert_eq!(a.get("/v1/templates/legacy").body["tenant"], "alpha");
    b.get("/v1/templates/legacy")
        .expect_error(404, "template_not_found");
    let id = a
        .post("/v1/sandboxes", &json!({"template": "legacy"}))
        .expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(text(&a, &id, "who"), "'legacy'");
    // Its spec moves to the per-tenant layout when it is built again (at this start).
    assert!(dir.join("templates/alpha/legacy.json").exists());
    assert!(!dir.join("templates/legacy.json").exists());
}

/// Helpers on `As` this file needs beyond `common`'s.
trait More {
    fn server_put(&self, path: &str, bytes: Vec<u8>) -> Resp;
    fn get_bytes_as(&self, path: &str) -> Vec<u8>;
}

impl More for As<'_> {
    fn server_put(&self, path: &str, bytes: Vec<u8>) -> Resp {
        self.put_raw(path, "application/octet-stream", bytes)
    }

    fn get_bytes_as(&self, path: &str) -> Vec<u8> {
        let r = self.get(path);
        assert_eq!(r.status, 200, "{}", r.text);
        r.text.into_bytes()
    }
}

/// Deleting a template is decided at the gate that decides building one (`build_template`):
/// a policy that forbids a tenant to build a template forbids it to delete one, and the
/// template stays.
#[test]
fn a_policy_that_forbids_building_forbids_deleting() {
    let server = TestServer::start();
    let ka = tenant(&server, "alpha", 4);
    let a = As::key(&server, &ka);
    template(&a, "t1", "kept");
    let shipped =
        std::fs::read_to_string(server.data_dir().join("policies/policies.cedar")).unwrap();
    let frozen = format!(
        "{shipped}\n@id(\"no-template-changes\")\n@reason(\"alpha's templates are fixed\")\n\
         forbid (principal in Sandlot::Tenant::\"alpha\", \
         action == Sandlot::Action::\"build_template\", resource);\n"
    );
    server
        .put_raw_as_operator("/v1/policies", frozen.into_bytes())
        .expect(200);
    let r = a.delete("/v1/templates/t1");
    r.expect_error(403, "policy_denied");
    assert!(r.message().contains("no-template-changes"), "{}", r.text);
    assert_eq!(a.get("/v1/templates/t1").expect(200)["status"], "ready");
    // The operator is not alpha: its deletion of alpha's template passes the gate.
    server.delete("/v1/templates/t1?tenant=alpha").expect(204);
    a.get("/v1/templates/t1")
        .expect_error(404, "template_not_found");
}

trait Operator {
    fn put_raw_as_operator(&self, path: &str, body: Vec<u8>) -> Resp;
}

impl Operator for TestServer {
    fn put_raw_as_operator(&self, path: &str, body: Vec<u8>) -> Resp {
        As::key(self, self.key()).put_raw(path, "text/plain", body)
    }
}

/// A data dir as the release before left it (schema 8, one namespace: the volume's files at
/// `vol_<name>`, the template's spec flat at `templates/<name>.json`, owner rows without
/// `flat`) opens with tenant alpha's volume and template intact and still alpha's alone; then
/// another tenant may take the same names.
#[test]
fn a_data_dir_of_schema_8_keeps_its_volumes_and_templates() {
    let mut server = TestServer::start();
    let ka = tenant(&server, "alpha", 4);
    let kb = tenant(&server, "beta", 4);
    {
        let a = As::key(&server, &ka);
        a.post("/v1/volumes", &json!({"name": "data", "size_mb": 64}))
            .expect(201);
        a.server_put("/v1/volumes/data/files/f.txt", b"kept".to_vec())
            .expect(201);
        template(&a, "t1", "old");
    }
    // Where the release before kept them: the volume's subvolume at `vol_data` (renamed while
    // the disk is mounted and nothing holds the volume), the spec flat.
    let dir = server.data_dir().to_owned();
    let ws = dir.join("disk/mnt/ws");
    let now = std::fs::read_dir(&ws)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("vol-"))
        .expect("the volume's workspace");
    std::fs::rename(ws.join(&now), ws.join("vol_data")).unwrap();
    server.stop();
    std::fs::rename(
        dir.join("templates/alpha/t1.json"),
        dir.join("templates/t1.json"),
    )
    .unwrap();
    let downgrade = "BEGIN;
        CREATE TABLE v8 (name TEXT PRIMARY KEY NOT NULL, size_mb INTEGER NOT NULL,
            created_at TEXT NOT NULL, host_uid INTEGER NOT NULL,
            tenant TEXT NOT NULL DEFAULT 'default');
        INSERT INTO v8 SELECT name, size_mb, created_at, host_uid, tenant FROM volumes;
        DROP TABLE volumes; ALTER TABLE v8 RENAME TO volumes;
        CREATE TABLE t8 (name TEXT PRIMARY KEY NOT NULL, tenant TEXT NOT NULL);
        INSERT INTO t8 SELECT name, tenant FROM template_owners;
        DROP TABLE template_owners; ALTER TABLE t8 RENAME TO template_owners;
        DROP TABLE reviews; DROP TABLE policy_versions; DROP TABLE console_sessions;
        PRAGMA user_version = 8;
        COMMIT;";
    let out = std::process::Command::new("sqlite3")
        .arg(dir.join("sandlot.db"))
        .arg(downgrade)
        .output()
        .expect("sqlite3");
    assert!(out.status.success(), "{out:?}");

    server.restart();
    let (a, b) = (As::key(&server, &ka), As::key(&server, &kb));
    assert_eq!(a.get_bytes_as("/v1/volumes/data/files/f.txt"), b"kept");
    let ready = wait_until(BUILD, || {
        a.get("/v1/templates/t1").body["status"] == "ready"
    });
    assert!(ready, "{}", a.get("/v1/templates/t1").text);
    let id = a
        .post(
            "/v1/sandboxes",
            &json!({"template": "t1", "volumes": [{"name": "data", "path": "d"}]}),
        )
        .expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(text(&a, &id, "who"), "'old'");
    assert_eq!(text(&a, &id, "open('d/f.txt').read()"), "'kept'");
    b.get("/v1/volumes/data")
        .expect_error(404, "volume_not_found");
    b.get("/v1/templates/t1")
        .expect_error(404, "template_not_found");
    // The names are free for another tenant now, and alpha's stay alpha's.
    b.post("/v1/volumes", &json!({"name": "data", "size_mb": 64}))
        .expect(201);
    template(&b, "t1", "new");
    assert_eq!(text(&a, &id, "who"), "'old'");
    assert_eq!(a.get_bytes_as("/v1/volumes/data/files/f.txt"), b"kept");
    // Deleting the old volume removes its old directory.
    a.delete(&format!("/v1/sandboxes/{id}")).expect(204);
    a.delete("/v1/volumes/data").expect(204);
    assert!(!ws.join("vol_data").exists());
}
