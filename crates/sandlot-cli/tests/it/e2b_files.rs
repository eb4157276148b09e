//! E2B's files surface at the protocol level, against a real `sandlot serve`, and its
//! attacks: signed URLs (wrong, altered, expired, another sandbox's, the wrong operation's
//! signature: 401 and nothing done), directory watches (paths outside the workspace, through
//! a symlink, NUL; the per-sandbox bound; another sandbox's watcher; a killed sandbox's),
//! and uploads with hostile metadata or gzip bodies (too many, too long, non-ASCII; corrupt
//! gzip, unknown encodings: refused, nothing written; a high-ratio body inflated whole).

use crate::common;

use common::TestServer;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

const ENVD: &str = "49983";

struct Sb {
    id: String,
    token: String,
}

fn e2b_key(server: &TestServer) -> String {
    std::fs::read_to_string(server.data_dir().join("e2b-api-key"))
        .expect("the server's E2B key file")
        .trim()
        .to_owned()
}

fn create(server: &TestServer) -> Sb {
    let resp = server
        .client()
        .post(format!("{}/sandboxes", server.url()))
        .header("X-API-KEY", e2b_key(server))
        .json(&json!({"templateID": "base", "timeout": 600, "secure": true}))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201, "create");
    let body: Value = resp.json().unwrap();
    Sb {
        id: body["sandboxID"].as_str().unwrap().to_owned(),
        token: body["envdAccessToken"].as_str().unwrap().to_owned(),
    }
}

/// Standard base64 without padding (what the SDKs' signatures use).
fn b64(bytes: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..=c.len() {
            out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// The SDKs' v1 signature of a file URL.
fn sign(path: &str, op: &str, user: &str, token: &str, exp: Option<i64>) -> String {
    let raw = match exp {
        None => format!("{path}:{op}:{user}:{token}"),
        Some(e) => format!("{path}:{op}:{user}:{token}:{e}"),
    };
    format!("v1_{}", b64(&Sha256::digest(raw.as_bytes())))
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// `GET /files` with `query` and no credentials but what the query carries (as a browser
/// would follow a signed URL), optionally naming a sandbox by header.
fn signed_get(server: &TestServer, query: &[(&str, &str)], named: Option<&str>) -> (u16, Value) {
    let mut req = server
        .client()
        .get(format!("{}/files", server.url()))
        .query(query);
    if let Some(id) = named {
        req = req
            .header("E2b-Sandbox-Id", id)
            .header("E2b-Sandbox-Port", ENVD);
    }
    let resp = req.send().unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn upload(
    server: &TestServer,
    sb: &Sb,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (u16, String) {
    let mut req = server
        .client()
        .post(format!("{}/files", server.url()))
        .query(&[("path", path)])
        .header("E2b-Sandbox-Id", &sb.id)
        .header("E2b-Sandbox-Port", ENVD)
        .header("X-Access-Token", &sb.token)
        .header("Content-Type", "application/octet-stream")
        .body(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().unwrap();
    (resp.status().as_u16(), resp.text().unwrap())
}

fn exists(server: &TestServer, sb: &Sb, path: &str) -> bool {
    let a = rpc(
        server,
        sb,
        "filesystem.Filesystem/Stat",
        json!({"path": path}),
    );
    a.0 == 200
}

fn rpc(server: &TestServer, sb: &Sb, method: &str, msg: Value) -> (u16, Value) {
    let resp = server
        .client()
        .post(format!("{}/{method}", server.url()))
        .header("Content-Type", "application/json")
        .header("E2b-Sandbox-Id", &sb.id)
        .header("E2b-Sandbox-Port", ENVD)
        .header("X-Access-Token", &sb.token)
        .body(msg.to_string())
        .send()
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().unwrap_or(Value::Null))
}

#[test]
fn signed_urls_open_only_what_they_sign() {
    let server = TestServer::start();
    let (a, b) = (create(&server), create(&server));
    let (st, _) = upload(&server, &a, "s.txt", &[], b"secret of a".to_vec());
    assert_eq!(st, 200);
    let (st, _) = upload(&server, &b, "s.txt", &[], b"secret of b".to_vec());
    assert_eq!(st, 200);

    let sig = sign("s.txt", "read", "user", &a.token, None);
    fn q(sig: &str) -> Vec<(&str, &str)> {
        vec![("path", "s.txt"), ("username", "user"), ("signature", sig)]
    }
    // Without a header, the signature names the sandbox; with one, it must be that one's.
    let (st, body) = signed_get(&server, &q(&sig), None);
    assert_eq!((st, body), (200, Value::String("secret of a".into())));
    let (st, _) = signed_get(&server, &q(&sig), Some(&a.id));
    assert_eq!(st, 200);
    let invalid = json!({"code": 401, "message": "invalid signature"});
    assert_eq!(
        signed_get(&server, &q(&sig), Some(&b.id)),
        (401, invalid.clone())
    );

    // Altered, truncated, garbage, another operation's, another user's, another path's.
    let mut flipped = sig.clone().into_bytes();
    let last = flipped.len() - 1;
    flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
    let flipped = String::from_utf8(flipped).unwrap();
    let write_sig = sign("s.txt", "write", "user", &a.token, None);
    let root_sig = sign("s.txt", "read", "root", &a.token, None);
    let other_path = sign("t.txt", "read", "user", &a.token, None);
    let long = "v1_".to_owned() + &"A".repeat(4000);
    for bad in [
        flipped.as_str(),
        &sig[..sig.len() - 1],
        "",
        "v1_",
        "garbage",
        &long,
        &write_sig,
        &root_sig,
        &other_path,
        &a.token,
    ] {
        let (st, body) = signed_get(&server, &q(bad), None);
        assert_eq!((st, &body), (401, &invalid), "{bad:.40}");
    }

    // Expiry: covered by the signature, refused once past, malformed refused.
    let future = now() + 120;
    let fut = future.to_string();
    let good = sign("s.txt", "read", "user", &a.token, Some(future));
    let mut qe = q(&good);
    qe.push(("signature_expiration", &fut));
    assert_eq!(signed_get(&server, &qe, None).0, 200);
    let later = (future + 1000).to_string();
    let mut moved = q(&good);
    moved.push(("signature_expiration", &later));
    assert_eq!(signed_get(&server, &moved, None), (401, invalid.clone()));
    let past = now() - 120;
    let pst = past.to_string();
    let old = sign("s.txt", "read", "user", &a.token, Some(past));
    let mut qo = q(&old);
    qo.push(("signature_expiration", &pst));
    assert_eq!(
        signed_get(&server, &qo, None),
        (
            401,
            json!({"code": 401, "message": "signature is already expired"})
        )
    );
    for bad_exp in ["", "01", "1e9", "abc", "99999999999999999999999"] {
        let mut qb = q(&good);
        qb.push(("signature_expiration", bad_exp));
        assert_eq!(signed_get(&server, &qb, None).0, 401, "{bad_exp:?}");
    }

    // A read signature does not upload; a write signature does, to its path only.
    let post = |path: &str, sig: &str| {
        server
            .client()
            .post(format!("{}/files", server.url()))
            .query(&[("path", path), ("username", "user"), ("signature", sig)])
            .header("Content-Type", "application/octet-stream")
            .body("uploaded")
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    let read_new = sign("new.txt", "read", "user", &a.token, None);
    assert_eq!(post("new.txt", &read_new), 401);
    let write_new = sign("new.txt", "write", "user", &a.token, None);
    assert_eq!(post("other.txt", &write_new), 401);
    assert!(!exists(&server, &a, "new.txt") && !exists(&server, &a, "other.txt"));
    assert_eq!(post("new.txt", &write_new), 200);
    assert!(exists(&server, &a, "new.txt"));
    // Nothing outside the workspace, even signed.
    let etc = sign("/etc/passwd", "read", "user", &a.token, None);
    let (st, _) = signed_get(
        &server,
        &[
            ("path", "/etc/passwd"),
            ("username", "user"),
            ("signature", &etc),
        ],
        None,
    );
    assert_eq!(st, 400);
}

#[test]
fn watches_stay_in_the_workspace_and_are_bounded() {
    let server = TestServer::start();
    let (a, b) = (create(&server), create(&server));
    let (st, _) = rpc(
        &server,
        &a,
        "filesystem.Filesystem/MakeDir",
        json!({"path": "w"}),
    );
    assert_eq!(st, 200);
    // A symlink out of the workspace, made inside the sandbox.
    let (st, _) = upload(&server, &a, "f.txt", &[], b"x".to_vec());
    assert_eq!(st, 200);
    let mk = server
        .client()
        .post(format!("{}/execute", server.url()))
        .header("E2b-Sandbox-Id", &a.id)
        .header("E2b-Sandbox-Port", "49999")
        .header("X-Access-Token", &a.token)
        .json(&json!({"code": "ln -s /etc /workspace/etc_link", "language": "bash"}))
        .send()
        .unwrap();
    assert_eq!(mk.status().as_u16(), 200);
    for (path, code) in [
        ("/etc", "invalid_argument"),
        ("/", "invalid_argument"),
        ("/home/user/../../etc", "invalid_argument"),
        ("../..", "invalid_argument"),
        ("etc_link", "invalid_argument"),
        ("etc_link/ssl", "invalid_argument"),
        ("a\u{0}b", "invalid_argument"),
        ("missing", "not_found"),
        ("f.txt", "invalid_argument"),
    ] {
        let (st, body) = rpc(
            &server,
            &a,
            "filesystem.Filesystem/CreateWatcher",
            json!({"path": path, "recursive": true}),
        );
        assert!(st >= 400, "{path:?}: {st} {body}");
        assert_eq!(body["code"], code, "{path:?}: {body}");
    }

    // At most 16 watches per sandbox; another sandbox's bound is its own.
    let mut ids = Vec::new();
    for _ in 0..16 {
        let (st, body) = rpc(
            &server,
            &a,
            "filesystem.Filesystem/CreateWatcher",
            json!({"path": "w"}),
        );
        assert_eq!(st, 200, "{body}");
        ids.push(body["watcherId"].as_str().unwrap().to_owned());
    }
    let (st, body) = rpc(
        &server,
        &a,
        "filesystem.Filesystem/CreateWatcher",
        json!({"path": "w"}),
    );
    assert_eq!(
        (st, body["code"].as_str()),
        (429, Some("resource_exhausted"))
    );
    let (st, _) = rpc(
        &server,
        &b,
        "filesystem.Filesystem/CreateWatcher",
        json!({"path": ""}),
    );
    assert_eq!(st, 200);
    // Another sandbox cannot read or remove a's watcher.
    for m in ["GetWatcherEvents", "RemoveWatcher"] {
        let (st, body) = rpc(
            &server,
            &b,
            &format!("filesystem.Filesystem/{m}"),
            json!({"watcherId": ids[0]}),
        );
        assert_eq!((st, body["code"].as_str()), (404, Some("not_found")), "{m}");
    }
    // Removing one frees its slot.
    let (st, _) = rpc(
        &server,
        &a,
        "filesystem.Filesystem/RemoveWatcher",
        json!({"watcherId": ids[0]}),
    );
    assert_eq!(st, 200);
    let (st, _) = rpc(
        &server,
        &a,
        "filesystem.Filesystem/CreateWatcher",
        json!({"path": "w"}),
    );
    assert_eq!(st, 200);
    // An event arrives, then the sandbox is killed and its watchers end.
    let (st, _) = upload(&server, &a, "w/e.txt", &[], b"x".to_vec());
    assert_eq!(st, 200);
    let (st, body) = rpc(
        &server,
        &a,
        "filesystem.Filesystem/GetWatcherEvents",
        json!({"watcherId": ids[1]}),
    );
    assert_eq!(st, 200);
    assert_eq!(body["events"][0]["name"], "e.txt", "{body}");
    let killed = server
        .client()
        .delete(format!("{}/sandboxes/{}", server.url(), a.id))
        .header("X-API-KEY", e2b_key(&server))
        .send()
        .unwrap();
    assert_eq!(killed.status().as_u16(), 204);
    let (st, _) = rpc(
        &server,
        &a,
        "filesystem.Filesystem/GetWatcherEvents",
        json!({"watcherId": ids[1]}),
    );
    assert!(st >= 400, "{st}");
}

#[test]
fn hostile_metadata_and_gzip_bodies_write_nothing() {
    use std::io::Write;
    let server = TestServer::start();
    let a = create(&server);
    let many: Vec<(String, String)> = (0..33)
        .map(|i| (format!("X-Metadata-k{i}"), "v".to_owned()))
        .collect();
    let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let long_key = format!("X-Metadata-{}", "k".repeat(200));
    let long_value = "v".repeat(2000);
    let wide: Vec<(String, String)> = (0..12)
        .map(|i| (format!("X-Metadata-w{i}"), "v".repeat(1000)))
        .collect();
    let wide: Vec<(&str, &str)> = wide.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let cases: Vec<Vec<(&str, &str)>> = vec![
        many,
        vec![(long_key.as_str(), "v")],
        vec![("X-Metadata-k", long_value.as_str())],
        wide,
        vec![("X-Metadata-", "v")],
    ];
    for headers in &cases {
        let (st, body) = upload(&server, &a, "m.txt", headers, b"x".to_vec());
        assert_eq!(st, 400, "{body}");
    }
    // A value with bytes outside printable ASCII (reqwest sends obs-text as is).
    let resp = server
        .client()
        .post(format!("{}/files", server.url()))
        .query(&[("path", "m.txt")])
        .header("E2b-Sandbox-Id", &a.id)
        .header("E2b-Sandbox-Port", ENVD)
        .header("X-Access-Token", &a.token)
        .header("Content-Type", "application/octet-stream")
        .header(
            "X-Metadata-k",
            reqwest::header::HeaderValue::from_bytes(b"caf\xe9").unwrap(),
        )
        .body("x")
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    assert!(!exists(&server, &a, "m.txt"));

    // Corrupt or truncated gzip, an unknown encoding: refused, nothing written.
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(b"hello gzip").unwrap();
    let gz = enc.finish().unwrap();
    for (body, enc) in [
        (b"not gzip at all".to_vec(), "gzip"),
        (gz[..gz.len() - 6].to_vec(), "gzip"),
        (gz.clone(), "br"),
    ] {
        let (st, text) = upload(&server, &a, "g.txt", &[("Content-Encoding", enc)], body);
        assert!(st == 400 || st == 415, "{enc}: {st} {text}");
    }
    assert!(!exists(&server, &a, "g.txt"));
    let (st, _) = upload(&server, &a, "g.txt", &[("Content-Encoding", "gzip")], gz);
    assert_eq!(st, 200);
    // A high-ratio body (64 MiB of zeros in ~64 KB) inflates as it streams, whole. (That a
    // bomb costs bounded memory is files.rs's unit test; the size limit is the runtime's.)
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..64 {
        enc.write_all(&zeros).unwrap();
    }
    let dense = enc.finish().unwrap();
    assert!(dense.len() < 1 << 20, "{}", dense.len());
    let (st, text) = upload(
        &server,
        &a,
        "dense.bin",
        &[("Content-Encoding", "gzip")],
        dense,
    );
    assert_eq!(st, 200, "{text}");
    let (st, body) = rpc(
        &server,
        &a,
        "filesystem.Filesystem/Stat",
        json!({"path": "dense.bin"}),
    );
    assert_eq!(
        (st, body["entry"]["size"].as_str()),
        (200, Some("67108864"))
    );
}
