//! The trusted tier's grants (issue 23), against a real `sandlot serve` with real sandboxes:
//! read-only host paths (`mounts: [{host, path}]`) granted by the policy's `mount_host_path`
//! gate only, on the trusted tier only, refused in every malformed or dangerous form with the
//! exact code, mounted read-only (EROFS), nosuid, nodev, noexec (EACCES), recorded on the
//! sandbox and in the decision journal, carried into forks, and never redirected by a symlink
//! swapped in later; and a policy that requires rollback for a tier (`@on_failure`).

use crate::common;

use common::TestServer;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The host side: `<root>/data` (a directory with a file, a script and a subdirectory, all
/// writable by anyone on the host, so only the mount can refuse a write), `<root>/one.txt`
/// (a file), and `<root>/other` (never granted: outside the permit's prefix).
struct Host {
    _dir: tempfile::TempDir,
    root: PathBuf,
    other: PathBuf,
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn host() -> Host {
    let dir = tempfile::Builder::new()
        .prefix("sandlot-trusted-")
        .tempdir()
        .unwrap();
    chmod(dir.path(), 0o755);
    let root = dir.path().join("granted");
    let data = root.join("data");
    std::fs::create_dir_all(data.join("sub")).unwrap();
    std::fs::write(data.join("a.txt"), "from the host").unwrap();
    std::fs::write(data.join("run.sh"), "#!/bin/sh\necho ran\n").unwrap();
    std::fs::write(root.join("one.txt"), "one file").unwrap();
    for (p, m) in [
        (root.clone(), 0o755),
        (data.clone(), 0o777),
        (data.join("sub"), 0o777),
        (data.join("a.txt"), 0o666),
        (data.join("run.sh"), 0o4777),
        (root.join("one.txt"), 0o644),
    ] {
        chmod(&p, m);
    }
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    chmod(&other, 0o755);
    Host {
        root,
        other,
        _dir: dir,
    }
}

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_owned()
}

/// The shipped set plus a grant of every path under `root` to the trusted tier, and a permit
/// that makes every execution in a trusted sandbox roll back on failure.
fn policies(root: &Path) -> String {
    format!(
        "{}\n@id(\"grant-granted\")\n@reason(\"the operator grants {root} to the trusted tier\")\n\
         permit (principal, action == Sandlot::Action::\"mount_host_path\", resource)\n\
         when {{ resource.path like \"{root}/*\" && context.tier == \"trusted\" }};\n\
         @id(\"trusted-rolls-back\")\n@on_failure(\"rollback\")\n\
         permit (principal, action == Sandlot::Action::\"execute\", resource)\n\
         when {{ resource.tier == \"trusted\" }};\n",
        sandlot_policy::DEFAULT_POLICIES,
        root = root.display()
    )
}

fn put_policies(server: &TestServer, text: String) {
    server
        .client()
        .put(format!("{}/v1/policies", server.url()))
        .header("content-type", "text/plain")
        .body(text)
        .send()
        .unwrap()
        .error_for_status()
        .unwrap();
}

fn create(server: &TestServer, tier: &str, mounts: Value) -> common::Resp {
    server.post("/v1/sandboxes", &json!({"tier": tier, "mounts": mounts}))
}

fn sandbox_count(server: &TestServer) -> usize {
    server.get("/v1/sandboxes").expect(200)["sandboxes"]
        .as_array()
        .unwrap()
        .len()
}

/// Runs Python `code`; its last stdout line as JSON.
fn py(server: &TestServer, id: &str, code: &str) -> Value {
    let r = server.execute(id, code);
    assert_eq!(r["end_state"], "ok", "{r:#}");
    let out = r["stdout"].as_str().unwrap();
    serde_json::from_str(out.lines().last().unwrap()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// What the sandbox sees at its mounts: reads, the errno of a write, a create and an exec,
/// and the mount's flags.
const PROBE: &str = r#"
import json, os, errno, subprocess
def err(f):
    try:
        f()
        return 'ok'
    except OSError as e:
        return errno.errorcode[e.errno]
def remount():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    # MS_REMOUNT | MS_BIND without MS_RDONLY: asking for it writable again.
    rc = libc.mount(None, b'/mnt/data', None, 32 | 4096, None)
    return 'ok' if rc == 0 else errno.errorcode[ctypes.get_errno()]
st = os.statvfs('/mnt/data')
print(json.dumps({
    'read': open('/mnt/data/a.txt').read(),
    'one': open('/mnt/one.txt').read(),
    'write': err(lambda: open('/mnt/data/a.txt', 'w').write('x')),
    'create': err(lambda: open('/mnt/data/new.txt', 'w').write('x')),
    'mkdir': err(lambda: os.mkdir('/mnt/data/sub/d')),
    'unlink': err(lambda: os.unlink('/mnt/data/a.txt')),
    'chmod': err(lambda: os.chmod('/mnt/data/a.txt', 0o777)),
    'exec': err(lambda: subprocess.run(['/mnt/data/run.sh'], capture_output=True)),
    'setuid_bit': bool(os.stat('/mnt/data/run.sh').st_mode & 0o4000),
    'rdonly': bool(st.f_flag & os.ST_RDONLY),
    'nosuid': bool(st.f_flag & os.ST_NOSUID),
    'nodev': bool(st.f_flag & os.ST_NODEV),
    'noexec': bool(st.f_flag & os.ST_NOEXEC),
    'mnt_create': err(lambda: open('/mnt/planted', 'w').write('x')),
    'remount': remount(),
}))
"#;

#[test]
fn host_paths_are_granted_by_policy_to_the_trusted_tier_read_only() {
    let h = host();
    let data = s(&h.root.join("data"));
    let one = s(&h.root.join("one.txt"));
    let mounts =
        json!([{"host": data, "path": "/mnt/data"}, {"host": one, "path": "/mnt/one.txt"}]);
    let server = TestServer::start_with_env(&[("SANDLOT_POOL_SIZE", "1")]);

    // The shipped policy grants no host path to anyone: 403, nothing made.
    let before = sandbox_count(&server);
    create(&server, "trusted", mounts.clone()).expect_error(403, "policy_denied");
    assert_eq!(sandbox_count(&server), before);

    put_policies(&server, policies(&h.root));

    // The isolated tier never mounts host paths; nor does one that does not name a tier.
    let r = create(&server, "isolated", mounts.clone());
    r.expect_error(403, "policy_denied");
    assert!(r.message().contains("trusted tier only"), "{}", r.message());
    server
        .post("/v1/sandboxes", &json!({"mounts": mounts}))
        .expect_error(403, "policy_denied");
    // A path no permit grants.
    let r = create(
        &server,
        "trusted",
        json!([{"host": s(&h.other), "path": "/mnt/data"}]),
    );
    r.expect_error(403, "policy_denied");
    assert!(r.message().contains("mount_host_path"), "{}", r.message());

    // Malformed or dangerous forms: 400, nothing made.
    std::os::unix::fs::symlink(h.root.join("data"), h.root.join("link")).unwrap();
    std::os::unix::fs::symlink("/etc", h.root.join("etc-link")).unwrap();
    for (host, path) in [
        ("granted/data".to_owned(), "/mnt/data"),
        (format!("{}/../other", h.root.display()), "/mnt/data"),
        (format!("{}/./data", h.root.display()), "/mnt/data"),
        ("/".to_owned(), "/mnt/data"),
        ("/proc".to_owned(), "/mnt/data"),
        ("/proc/1/root".to_owned(), "/mnt/data"),
        ("/sys".to_owned(), "/mnt/data"),
        (s(&h.root.join("link")), "/mnt/data"),
        (s(&h.root.join("link/sub")), "/mnt/data"),
        (s(&h.root.join("etc-link")), "/mnt/data"),
        (s(&h.root.join("missing")), "/mnt/data"),
        (data.clone(), "/workspace"),
        (data.clone(), "/workspace/data"),
        (data.clone(), "/etc"),
        (data.clone(), "/usr/lib"),
        (data.clone(), "/mnt"),
        (data.clone(), "/mnt/../etc"),
        (data.clone(), "mnt/data"),
    ] {
        let r = create(&server, "trusted", json!([{"host": host, "path": path}]));
        assert_eq!(r.status, 400, "{host} → {path}: {}", r.text);
        assert_eq!(r.code(), "invalid_argument", "{host}: {}", r.text);
    }
    let r = create(
        &server,
        "trusted",
        json!([{"host": s(&h.root.join("link")), "path": "/mnt/data"}]),
    );
    assert!(r.message().contains("symlink"), "{}", r.message());
    assert_eq!(sandbox_count(&server), before);

    // Granted: mounted read-only, nosuid, nodev, noexec, without a way to remount it.
    let sb = create(&server, "trusted", mounts.clone())
        .expect(201)
        .clone();
    common::assert_schema("Sandbox", &sb);
    assert_eq!(sb["tier"], "trusted");
    assert_eq!(sb["mounts"], mounts);
    let id = sb["id"].as_str().unwrap().to_owned();
    let seen = py(&server, &id, PROBE);
    assert_eq!(
        seen,
        json!({
            "read": "from the host", "one": "one file",
            "write": "EROFS", "create": "EROFS", "mkdir": "EROFS", "unlink": "EROFS",
            "chmod": "EROFS", "exec": "EACCES", "setuid_bit": true,
            "rdonly": true, "nosuid": true, "nodev": true, "noexec": true,
            "mnt_create": "EROFS", "remount": seen["remount"].clone(),
        }),
        "{seen:#}"
    );
    assert_ne!(seen["remount"], "ok", "{seen:#}");
    // Nothing reached the host.
    assert_eq!(
        std::fs::read_to_string(h.root.join("data/a.txt")).unwrap(),
        "from the host"
    );
    assert!(!h.root.join("data/new.txt").exists());
    // The record: the sandbox lists its mounts; each grant is a journaled decision.
    assert_eq!(
        server.get(&format!("/v1/sandboxes/{id}")).expect(200)["mounts"],
        mounts
    );
    let decisions = server.get("/v1/decisions?gate=mount_host_path&limit=100");
    let list = decisions.expect(200)["decisions"]
        .as_array()
        .unwrap()
        .clone();
    for host in [&data, &one] {
        assert!(
            list.iter().any(|d| d["allowed"] == true
                && d["resource"] == format!("HostPath::{host:?}")
                && d["policies"] == json!(["grant-granted"])),
            "{list:#?}"
        );
    }

    // A fork by a key that passes the gate again gets the same mounts.
    let fork = server.post(&format!("/v1/sandboxes/{id}/fork"), &json!({}));
    let forked = fork.expect(201).clone();
    let child = forked["sandboxes"][0].clone();
    assert_eq!(child["mounts"], mounts, "{forked:#}");
    let cid = child["id"].as_str().unwrap();
    assert_eq!(py(&server, cid, PROBE)["read"], "from the host");

    // The granted path swapped for a symlink afterwards: every later mount of it opens it
    // again without following a symlink, so it is refused, never redirected (here to /etc).
    let real = h.root.join("data.real");
    std::fs::rename(h.root.join("data"), &real).unwrap();
    std::os::unix::fs::symlink("/etc", h.root.join("data")).unwrap();
    let r = create(
        &server,
        "trusted",
        json!([{"host": data, "path": "/mnt/data"}]),
    );
    r.expect_error(400, "invalid_argument");
    assert!(r.message().contains("symlink"), "{}", r.message());
    let r = server.post(&format!("/v1/sandboxes/{id}/fork"), &json!({}));
    r.expect_error(400, "invalid_argument");
    // What is mounted already stays what it was.
    assert_eq!(py(&server, &id, PROBE)["read"], "from the host");
}

/// A permit with `@on_failure("rollback")` scoped to the trusted tier: a failing cell in a
/// trusted sandbox rolls back though its caller did not ask (and cannot opt out); the same
/// cell in an isolated sandbox keeps what it did.
#[test]
fn a_policy_requires_rollback_for_the_trusted_tier() {
    let h = host();
    let server = TestServer::start_with_env(&[("SANDLOT_POOL_SIZE", "1")]);
    put_policies(&server, policies(&h.root));
    let trusted = create(&server, "trusted", json!([])).expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let isolated = server.create_sandbox();
    let fail = "x = 2\nopen('/workspace/f.txt', 'w').write('after')\nraise RuntimeError('boom')";
    for id in [&trusted, &isolated] {
        let r = server.execute(id, "x = 1\nopen('/workspace/f.txt', 'w').write('before')");
        assert_eq!(r["end_state"], "ok", "{r:#}");
    }
    let look = "import json\nprint(json.dumps([x, open('/workspace/f.txt').read()]))";

    let r = server
        .execute_with(&trusted, &json!({"code": fail, "on_failure": "keep"}))
        .expect(200)
        .clone();
    assert_eq!(r["end_state"], "error", "{r:#}");
    assert_eq!(r["rolled_back"], true, "{r:#}");
    assert_eq!(py(&server, &trusted, look), json!([1, "before"]));

    let r = server.execute(&isolated, fail);
    assert_eq!(r["end_state"], "error", "{r:#}");
    assert_ne!(r["rolled_back"], true, "{r:#}");
    assert_eq!(py(&server, &isolated, look), json!([2, "after"]));

    // The decision that allowed it says so.
    let list = server
        .get("/v1/decisions?gate=execute&limit=200")
        .expect(200)["decisions"]
        .as_array()
        .unwrap()
        .clone();
    assert!(
        list.iter().any(|d| d["policies"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p == "trusted-rolls-back")),
        "{list:#?}"
    );
}

/// A sandbox's host paths are part of it: after a pause and resume, and after the server is
/// killed (`kill -9`) and started again (its record read back from the store), it mounts them
/// again, read-only as before.
#[test]
fn host_paths_survive_pause_resume_and_a_server_kill() {
    let h = host();
    let data = s(&h.root.join("data"));
    let one = s(&h.root.join("one.txt"));
    let mounts =
        json!([{"host": data, "path": "/mnt/data"}, {"host": one, "path": "/mnt/one.txt"}]);
    let mut server = TestServer::start_with_env(&[("SANDLOT_POOL_SIZE", "1")]);
    put_policies(&server, policies(&h.root));
    let id = create(&server, "trusted", mounts.clone()).expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let check = |server: &TestServer| {
        let seen = py(server, &id, PROBE);
        assert_eq!(seen["read"], "from the host", "{seen:#}");
        assert_eq!(seen["one"], "one file", "{seen:#}");
        assert_eq!(seen["create"], "EROFS", "{seen:#}");
        assert_eq!(seen["exec"], "EACCES", "{seen:#}");
    };
    check(&server);

    server
        .post(&format!("/v1/sandboxes/{id}/pause"), &json!({}))
        .expect(200);
    server
        .post(&format!("/v1/sandboxes/{id}/resume"), &json!({}))
        .expect(200);
    check(&server);

    server.kill9();
    server.restart();
    let sb = server
        .get(&format!("/v1/sandboxes/{id}"))
        .expect(200)
        .clone();
    assert_eq!(sb["mounts"], mounts, "{sb:#}");
    check(&server);
}

/// Asks the sandbox's egress proxy (inside its namespace) to `CONNECT target`; on a 200 sends
/// `ping` through the tunnel and reads the answer. Prints `[status, echoed]`.
fn connect_code(target: &str) -> String {
    format!(
        r#"
import json, socket
s = socket.create_connection(('127.0.0.1', 3128), timeout=10)
s.sendall(b'CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n')
head = b''
while b'\r\n\r\n' not in head:
    chunk = s.recv(4096)
    if not chunk:
        break
    head += chunk
status = int(head.split(b' ')[1]) if head else 0
echoed = None
if status == 200:
    s.sendall(b'ping')
    echoed = s.recv(16).decode()
print(json.dumps([status, echoed]))
"#
    )
}

/// An internal service the operator names (`SANDLOT_INTERNAL_SERVICES`) is reachable through
/// the egress proxy from a trusted sandbox that lists `service:<name>`, at exactly its address
/// and port; an isolated sandbox cannot list it (403), a name the sandbox does not list or the
/// server does not know, another port, and the address itself stay refused; every attempt is
/// recorded.
#[test]
fn internal_services_are_reachable_from_granted_trusted_sandboxes_only() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { break };
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut buf = [0u8; 16];
                if let Ok(n) = conn.read(&mut buf) {
                    let _ = conn.write_all(&buf[..n]);
                }
            });
        }
    });
    let services = format!("db=127.0.0.1:{port},other=127.0.0.1:{}", port + 1);
    let server = TestServer::start_with_env(&[
        ("SANDLOT_POOL_SIZE", "1"),
        ("SANDLOT_INTERNAL_SERVICES", &services),
    ]);

    // Only the trusted tier lists a service, at creation and in a later allowlist.
    let r = server.post("/v1/sandboxes", &json!({"network": ["service:db"]}));
    r.expect_error(403, "policy_denied");
    assert!(r.message().contains("trusted tier only"), "{}", r.message());
    let isolated = server.create_sandbox_with(&json!({"network": ["pkgs.test"]}))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    common::As::key(&server, server.key())
        .put(
            &format!("/v1/sandboxes/{isolated}/network"),
            &json!({"allow": ["service:db"]}),
        )
        .expect_error(403, "policy_denied");
    assert_eq!(
        py(&server, &isolated, &connect_code(&format!("db:{port}"))),
        json!([403, null])
    );

    let sb = server.create_sandbox_with(&json!({"tier": "trusted", "network": ["service:db"]}));
    assert_eq!(sb["network"], json!(["service:db"]));
    let id = sb["id"].as_str().unwrap().to_owned();
    assert_eq!(
        py(&server, &id, &connect_code(&format!("db:{port}"))),
        json!([200, "ping"])
    );
    for refused in [
        format!("db:{}", port + 1),
        format!("other:{}", port + 1),
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("nope:{port}"),
    ] {
        assert_eq!(
            py(&server, &id, &connect_code(&refused)),
            json!([403, null]),
            "{refused}"
        );
    }
    let egress = server
        .get(&format!("/v1/sandboxes/{id}/egress"))
        .expect(200)["egress"]
        .as_array()
        .unwrap()
        .clone();
    assert!(
        egress.iter().any(|e| e["host"] == "db"
            && e["port"] == port
            && e["allowed"] == true
            && e["ip"] == "127.0.0.1"),
        "{egress:#?}"
    );
    assert!(
        egress
            .iter()
            .any(|e| e["host"] == "db" && e["port"] == port + 1 && e["allowed"] == false),
        "{egress:#?}"
    );
}
