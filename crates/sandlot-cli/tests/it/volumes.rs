//! Named volumes against a real server: files that live apart from any sandbox, read-only by
//! many sandboxes at once, read-write by one at a time, surviving sandbox deletes and server
//! restarts, and what bad input and hostile workspaces get (a planted symlink where a volume
//! goes, paths outside `/workspace`, unknown and duplicate names).

use crate::common;

use common::TestServer;
use serde_json::{json, Value};
use std::os::unix::fs::MetadataExt;

fn text(r: &Value) -> String {
    assert_eq!(r["end_state"], "ok", "{r:#}");
    r["result"]["text/plain"].as_str().unwrap_or("").to_string()
}

fn create(server: &TestServer, body: &Value) -> String {
    server.create_sandbox_with(body)["id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Where the tenant `default`'s volume `name` keeps its files: its workspace id is
/// `vol-<sha256 of "<tenant>\0<name>", 40 hex digits>` (names are per tenant).
fn volume_dir(server: &TestServer, name: &str) -> std::path::PathBuf {
    use sha2::Digest;
    let h = hex::encode(sha2::Sha256::digest(format!("default\0{name}").as_bytes()));
    server
        .data_dir()
        .join(format!("disk/mnt/ws/vol-{}", &h[..40]))
}

#[test]
fn read_only_by_many_read_write_by_one_and_outliving_every_sandbox() {
    let mut server = TestServer::start();
    let v = server
        .post("/v1/volumes", &json!({ "name": "shared", "size_mb": 64 }))
        .expect(201)
        .clone();
    common::assert_schema("Volume", &v);
    server
        .put_bytes(
            "/v1/volumes/shared/files/in/data.csv",
            b"a,b\n1,2\n".to_vec(),
        )
        .expect(201);
    let ro =
        json!({ "volumes": [{ "name": "shared", "path": "/workspace/data", "read_only": true }] });
    let (r1, r2) = (create(&server, &ro), create(&server, &ro));
    for id in [&r1, &r2] {
        let got = text(&server.execute(id, "open('/workspace/data/in/data.csv').read()"));
        assert_eq!(got, "'a,b\\n1,2\\n'");
        let r = server.execute(
            id,
            "import errno\ntry:\n    open('/workspace/data/x', 'w')\n    got = 'written'\nexcept OSError as e:\n    got = errno.errorcode[e.errno]\ngot",
        );
        assert_eq!(text(&r), "'EROFS'");
    }
    let s = server
        .get(&format!("/v1/sandboxes/{r1}"))
        .expect(200)
        .clone();
    assert_eq!(
        s["volumes"],
        json!([{ "name": "shared", "path": "data", "read_only": true }])
    );

    let rw = json!({ "volumes": [{ "name": "shared", "path": "data" }] });
    let w = create(&server, &rw);
    let r = server.execute(&w, "open('/workspace/data/out.txt', 'w').write('written')");
    assert_eq!(r["end_state"], "ok", "{r:#}");
    // Readers see it; a second writer is refused, naming the holder.
    assert_eq!(
        text(&server.execute(&r1, "open('/workspace/data/out.txt').read()")),
        "'written'"
    );
    let refused = server.post("/v1/sandboxes", &rw);
    refused.expect_error(409, "volume_in_use");
    assert!(refused.message().contains(&w), "{}", refused.message());
    let v = server.get("/v1/volumes/shared").expect(200).clone();
    assert_eq!(v["mounted_by"].as_array().unwrap().len(), 3, "{v:#}");
    server
        .delete("/v1/volumes/shared")
        .expect_error(409, "volume_in_use");

    // The writer's files belong to it while it holds the volume, to the volume after.
    let writer_uid = std::fs::metadata(server.data_dir().join(format!("disk/mnt/ws/{w}")))
        .unwrap()
        .uid();
    let out = volume_dir(&server, "shared").join("out.txt");
    assert_eq!(std::fs::metadata(&out).unwrap().uid(), writer_uid);
    assert_eq!(server.delete(&format!("/v1/sandboxes/{w}")).status, 204);
    let volume_uid = std::fs::metadata(&out).unwrap().uid();
    assert_ne!(volume_uid, writer_uid);
    assert_eq!(
        std::fs::metadata(volume_dir(&server, "shared"))
            .unwrap()
            .uid(),
        volume_uid
    );

    // A new writer may take it; the volume and its files survive every sandbox and a restart.
    let w2 = create(&server, &rw);
    assert_eq!(
        text(&server.execute(&w2, "open('/workspace/data/out.txt').read()")),
        "'written'"
    );
    for id in [&r1, &r2, &w2] {
        server.delete(&format!("/v1/sandboxes/{id}"));
    }
    server.restart();
    let (status, _, body) = server.get_bytes("/v1/volumes/shared/files/out.txt");
    assert_eq!((status, body), (200, b"written".to_vec()));
    let listed = server
        .get("/v1/volumes/shared/files?recursive=true")
        .expect(200)
        .clone();
    assert_eq!(listed["entries"].as_array().unwrap().len(), 3, "{listed:#}");
    assert_eq!(server.delete("/v1/volumes/shared").status, 204);
    assert!(!volume_dir(&server, "shared").exists());
    server
        .get("/v1/volumes/shared")
        .expect_error(404, "volume_not_found");
}

#[test]
fn forks_carry_read_only_volumes_and_report_read_write_ones() {
    let server = TestServer::start();
    for name in ["ref", "scratch"] {
        server
            .post("/v1/volumes", &json!({ "name": name }))
            .expect(201);
    }
    server
        .put_bytes("/v1/volumes/ref/files/r.txt", b"ref".to_vec())
        .expect(201);
    let parent = create(
        &server,
        &json!({ "volumes": [
            { "name": "ref", "path": "ref", "read_only": true },
            { "name": "scratch", "path": "scratch" },
        ] }),
    );
    let out = server
        .post(
            &format!("/v1/sandboxes/{parent}/fork"),
            &json!({ "count": 2 }),
        )
        .expect(201)
        .clone();
    let lost: Vec<&str> = out["not_captured"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(lost, ["volume scratch"], "{out:#}");
    for child in out["sandboxes"].as_array().unwrap() {
        let id = child["id"].as_str().unwrap();
        assert_eq!(
            child["volumes"],
            json!([{ "name": "ref", "path": "ref", "read_only": true }])
        );
        assert_eq!(
            text(&server.execute(id, "open('/workspace/ref/r.txt').read()")),
            "'ref'"
        );
    }
}

#[test]
fn a_symlink_planted_where_a_volume_goes_is_never_followed() {
    let server = TestServer::start();
    server
        .post("/v1/volumes", &json!({ "name": "v" }))
        .expect(201);
    let id = server.create_sandbox();
    // The workspace (carried by a snapshot) holds `data -> /opt/sandlot`, where the driver's
    // code lives.
    let r = server.execute(
        &id,
        "import os\nos.symlink('/opt/sandlot', '/workspace/data')",
    );
    assert_eq!(r["end_state"], "ok", "{r:#}");
    let snap = server
        .post(&format!("/v1/sandboxes/{id}/snapshots"), &json!({}))
        .expect(201)["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = server.post(
        "/v1/sandboxes",
        &json!({ "from_snapshot": snap, "volumes": [{ "name": "v", "path": "data/inner" }] }),
    );
    assert_eq!(r.status, 409, "{:?}", r.body);
    assert!(r.message().contains("volume"), "{}", r.message());
    // Nothing of the refused sandbox is left, and the volume is free again.
    let list = server.get("/v1/sandboxes").expect(200).clone();
    assert_eq!(list["sandboxes"].as_array().unwrap().len(), 1, "{list:#}");
    let rw = create(
        &server,
        &json!({ "volumes": [{ "name": "v", "path": "data2" }] }),
    );
    assert_eq!(
        text(&server.execute(&rw, "import os\nos.path.ismount('/workspace/data2')")),
        "True"
    );
}

#[test]
fn bad_volume_requests_get_clear_errors() {
    let server = TestServer::start();
    for name in ["", "UPPER", "-dash", "a/b", "..", &"x".repeat(49)] {
        server
            .post("/v1/volumes", &json!({ "name": name }))
            .expect_error(400, "invalid_argument");
    }
    server
        .post("/v1/volumes", &json!({ "name": "v", "size_mb": 0 }))
        .expect_error(400, "invalid_argument");
    server
        .post("/v1/volumes", &json!({ "name": "v" }))
        .expect(201);
    server
        .post("/v1/volumes", &json!({ "name": "v" }))
        .expect_error(409, "volume_in_use");
    for path in [
        "/etc",
        "/workspace",
        "../x",
        "a/../b",
        "/workspacex/a",
        "a//b",
    ] {
        server
            .post(
                "/v1/sandboxes",
                &json!({ "volumes": [{ "name": "v", "path": path, "read_only": true }] }),
            )
            .expect_error(400, "invalid_argument");
    }
    server
        .post(
            "/v1/sandboxes",
            &json!({ "volumes": [
            { "name": "v", "path": "a", "read_only": true },
            { "name": "v", "path": "b", "read_only": true },
        ] }),
        )
        .expect_error(400, "invalid_argument");
    server
        .post(
            "/v1/sandboxes",
            &json!({ "volumes": [{ "name": "nope", "path": "a" }] }),
        )
        .expect_error(404, "volume_not_found");
    server
        .get("/v1/volumes/nope/files")
        .expect_error(404, "volume_not_found");
    server
        .put_bytes("/v1/volumes/v/files/a%2F..%2F..%2Fescape", b"x".to_vec())
        .expect_error(400, "invalid_path");
    server
        .delete("/v1/volumes/nope")
        .expect_error(404, "volume_not_found");
}
