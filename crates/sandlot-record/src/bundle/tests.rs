//! Bundles without a server: the manifest, each step's file, and whole archives written from
//! recorded steps and an artifacts directory, read back with `tar` and `flate2` as
//! `sandlot replay` reads them; hostile hashes and contents that shrink while bundled.

use super::*;
use crate::fixtures::{artifact, exec_step, execution, input, sandbox, T0};
use sandlot_types::{EndState, SandboxState};
use std::io::Read;

/// The entries of a bundle: (path, mode, mtime, bytes), in archive order.
fn entries(bundle: &[u8]) -> Vec<(String, u32, u64, Vec<u8>)> {
    let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(bundle));
    ar.entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let path = e.path().unwrap().to_string_lossy().into_owned();
            let (mode, mtime) = (e.header().mode().unwrap(), e.header().mtime().unwrap());
            let mut bytes = Vec::new();
            e.read_to_end(&mut bytes).unwrap();
            (path, mode, mtime, bytes)
        })
        .collect()
}

fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

fn no_content(_: &str) -> bool {
    false
}

#[test]
fn step_files_are_numbered_in_order() {
    assert_eq!(step_file(1), "steps/000001.json");
    assert_eq!(step_file(42), "steps/000042.json");
    assert_eq!(step_file(1_234_567), "steps/1234567.json");
}

#[test]
fn the_manifest_names_the_run_its_versions_and_steps() {
    let mut sb = sandbox("sb_a", "acme", SandboxState::Deleted);
    sb.ended_reason = Some("deleted by its owner".into());
    sb.forked_from = Some("sb_p".into());
    sb.network = vec!["example.org".into()];
    let steps = vec![
        input("in.csv", &"1".repeat(64), 5, T0, true),
        exec_step(
            execution("ex_1", "sb_a", "a", T0, Some(EndState::Ok), vec![]),
            Some("v2"),
        ),
        exec_step(
            execution("ex_2", "sb_a", "b", T0, Some(EndState::Ok), vec![]),
            Some("v1"),
        ),
        exec_step(
            execution("ex_3", "sb_a", "c", T0, Some(EndState::Ok), vec![]),
            Some("v2"),
        ),
        exec_step(execution("ex_4", "sb_a", "d", T0, None, vec![]), None),
    ];
    let m = manifest(&sb, &steps, Some("v3".into()), "2026-02-02T00:00:00Z");
    assert_eq!(m["bundle_version"], 1);
    assert_eq!(m["sandlot_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(m["created_at"], "2026-02-02T00:00:00Z");
    assert_eq!(
        m["sandbox"],
        json!({"id": "sb_a", "state": "deleted", "created_at": T0,
               "ended_reason": "deleted by its owner", "tier": "isolated",
               "limits": {"memory_mb": 512, "cpu_millis": 1000, "pids": 64, "disk_mb": 256},
               "forked_from": "sb_p", "from_snapshot": null})
    );
    assert_eq!(
        m["template"],
        json!({"name": "default", "version": "v-sb_a"})
    );
    // Each version once, in the order the run met them.
    assert_eq!(
        m["policy"],
        json!({"version": "v3", "versions_seen": ["v2", "v1"]})
    );
    assert_eq!(
        m["environment"],
        json!({"env": {"PYTHONHASHSEED": "0", "TZ": "UTC"}, "network": ["example.org"]})
    );
    assert_eq!(m["seeds"]["PYTHONHASHSEED"], "0");
    assert_eq!(m["seeds"]["TZ"], "UTC");
    assert_eq!(m["seeds"]["LC_ALL"], Value::Null);
    assert_eq!(m["seeds"]["random"], Value::Null);
    assert_eq!(m["seeds"]["replay_seed"], REPLAY_SEED);
    assert_eq!(
        m["steps"],
        json!([
            {"index": 1, "kind": "input", "file": "steps/000001.json"},
            {"index": 2, "kind": "execution", "file": "steps/000002.json"},
            {"index": 3, "kind": "execution", "file": "steps/000003.json"},
            {"index": 4, "kind": "execution", "file": "steps/000004.json"},
            {"index": 5, "kind": "execution", "file": "steps/000005.json"},
        ])
    );
}

#[test]
fn a_run_without_steps_or_policy_has_an_empty_manifest_list() {
    let sb = sandbox("sb_a", "acme", SandboxState::Running);
    let m = manifest(&sb, &[], None, T0);
    assert_eq!(m["steps"], json!([]));
    assert_eq!(m["policy"], json!({"version": null, "versions_seen": []}));
}

#[test]
fn an_input_s_file_says_where_its_content_is_or_why_not() {
    let sha = "a".repeat(64);
    let present = |s: &str| s == "a".repeat(64);
    assert_eq!(
        step_json(3, &input("d/x.bin", &sha, 7, T0, true), &present),
        json!({"index": 3, "kind": "input", "path": "d/x.bin", "sha256": sha, "size": 7,
               "at": T0, "content": format!("inputs/{sha}"), "missing": null})
    );
    assert_eq!(
        step_json(3, &input("x", &sha, 7, T0, false), &present),
        json!({"index": 3, "kind": "input", "path": "x", "sha256": sha, "size": 7, "at": T0,
               "content": null,
               "missing": "larger than the artifact size limit: recorded by hash only"})
    );
    assert_eq!(
        step_json(3, &input("x", &sha, 7, T0, true), &no_content),
        json!({"index": 3, "kind": "input", "path": "x", "sha256": sha, "size": 7, "at": T0,
               "content": null,
               "missing": "no longer in the artifacts store (past its retention)"})
    );
}

#[test]
fn an_execution_s_file_has_its_code_and_whole_result() {
    let rec = execution(
        "ex_1",
        "sb_a",
        "print('hi')",
        T0,
        Some(EndState::Error),
        vec![artifact("o.txt", &"b".repeat(64), 2)],
    );
    let v = step_json(2, &exec_step(rec.clone(), Some("v9")), &no_content);
    assert_eq!(v["index"], 2);
    assert_eq!(v["kind"], "execution");
    assert_eq!(v["id"], "ex_1");
    assert_eq!(v["language"], "python");
    assert_eq!(v["code"], "print('hi')");
    assert_eq!(v["started_at"], T0);
    assert_eq!(v["template"], "default");
    assert_eq!(v["template_version"], "v1");
    assert_eq!(v["policy_version"], "v9");
    assert_eq!(v["decisions"], json!(["dec_v9"]));
    assert_eq!(v["result"], serde_json::to_value(&rec.result).unwrap());
    assert_eq!(v["result"]["error"]["name"], "ValueError");
    assert!(v.get("content").is_none());
}

#[test]
fn a_bundle_holds_the_manifest_each_step_and_each_content_once() {
    let dir = tempfile::tempdir().unwrap();
    let (sha_a, sha_b) = ("a".repeat(64), "b".repeat(64));
    std::fs::write(dir.path().join(&sha_a), b"alpha").unwrap();
    let sb = sandbox("sb_a", "acme", SandboxState::Running);
    let steps = vec![
        input("one.txt", &sha_a, 5, T0, true),
        exec_step(
            execution("ex_1", "sb_a", "x", T0, Some(EndState::Ok), vec![]),
            Some("v1"),
        ),
        // The same content uploaded again under another name.
        input("two.txt", &sha_a, 5, T0, true),
        // Swept from the artifacts store.
        input("gone.txt", &sha_b, 4, T0, true),
        // Too large to keep.
        input("big.bin", &sha_b, 1 << 40, T0, false),
    ];
    let mut out = Vec::new();
    write_bundle(&mut out, &sb, &steps, Some("v1".into()), dir.path()).unwrap();
    let got = entries(&out);
    let names: Vec<&str> = got.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "manifest.json",
            "steps/000001.json",
            &format!("inputs/{sha_a}"),
            "steps/000002.json",
            "steps/000003.json",
            "steps/000004.json",
            "steps/000005.json",
        ]
    );
    for (name, mode, mtime, _) in &got {
        assert_eq!((*mode, *mtime), (0o644, 0), "{name}");
    }
    assert_eq!(got[2].3, b"alpha");
    let manifest = json_of(&got[0].3);
    assert_eq!(manifest["sandbox"]["id"], "sb_a");
    assert_eq!(manifest["policy"]["versions_seen"], json!(["v1"]));
    assert_eq!(manifest["steps"].as_array().unwrap().len(), 5);
    assert_eq!(json_of(&got[4].3)["content"], format!("inputs/{sha_a}"));
    assert_eq!(
        json_of(&got[5].3)["missing"],
        "no longer in the artifacts store (past its retention)"
    );
    assert_eq!(
        json_of(&got[6].3)["missing"],
        "larger than the artifact size limit: recorded by hash only"
    );
    assert_eq!(json_of(&got[3].3)["code"], "x");
}

#[test]
fn a_hostile_hash_never_names_a_file_to_bundle() {
    let root = tempfile::tempdir().unwrap();
    let artifacts = root.path().join("artifacts");
    std::fs::create_dir(&artifacts).unwrap();
    // Files a traversal or a non-canonical hash would reach.
    std::fs::write(root.path().join("secret"), b"do not bundle").unwrap();
    let upper = "A".repeat(64);
    std::fs::write(artifacts.join(&upper), b"upper").unwrap();
    let sb = sandbox("sb_a", "acme", SandboxState::Running);
    let steps = vec![
        input("a", "../secret", 13, T0, true),
        input("b", &upper, 5, T0, true),
        input("c", "", 0, T0, true),
    ];
    let mut out = Vec::new();
    write_bundle(&mut out, &sb, &steps, None, &artifacts).unwrap();
    let got = entries(&out);
    let names: Vec<&str> = got.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "manifest.json",
            "steps/000001.json",
            "steps/000002.json",
            "steps/000003.json"
        ]
    );
    for (_, _, _, bytes) in &got[1..] {
        let step = json_of(bytes);
        assert_eq!(step["content"], Value::Null);
        assert_eq!(
            step["missing"],
            "no longer in the artifacts store (past its retention)"
        );
    }
    assert!(got.iter().all(|e| !e.3.windows(6).any(|w| w == b"do not")));
}

#[test]
fn a_content_that_shrank_fails_rather_than_pads() {
    let mut short = b"abc".as_slice().take_exact(5);
    let mut buf = Vec::new();
    let err = short.read_to_end(&mut buf).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
    assert_eq!(
        err.to_string(),
        "an input's content shrank while it was bundled"
    );
    assert_eq!(buf, b"abc");
}

#[test]
fn a_content_is_read_to_its_declared_size_exactly() {
    let mut buf = Vec::new();
    b"abc"
        .as_slice()
        .take_exact(3)
        .read_to_end(&mut buf)
        .unwrap();
    assert_eq!(buf, b"abc");
    // A file that grew since: the entry keeps the size its header declared.
    let mut buf = Vec::new();
    b"abcdef"
        .as_slice()
        .take_exact(4)
        .read_to_end(&mut buf)
        .unwrap();
    assert_eq!(buf, b"abcd");
    let mut buf = Vec::new();
    b"".as_slice().take_exact(0).read_to_end(&mut buf).unwrap();
    assert!(buf.is_empty());
}

#[test]
fn the_response_channel_gets_the_archive_and_a_gone_client_stops_it() {
    let (tx, mut rx) = mpsc::channel(64);
    let sb = sandbox("sb_a", "acme", SandboxState::Running);
    let dir = tempfile::tempdir().unwrap();
    write_bundle(ChannelWriter { tx }, &sb, &[], None, dir.path()).unwrap();
    let mut streamed = Vec::new();
    while let Ok(chunk) = rx.try_recv() {
        streamed.extend_from_slice(&chunk.unwrap());
    }
    let got = entries(&streamed);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, "manifest.json");
    // The client went away: writing fails with a broken pipe, which the route does not log.
    let (tx, rx) = mpsc::channel(1);
    drop(rx);
    let err = write_bundle(ChannelWriter { tx }, &sb, &[], None, dir.path()).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::BrokenPipe);
}
