//! The log on real files: the chain, the Merkle root against an independent computation, the
//! checkpoints' format and signatures, every single-byte edit named, truncation, a full disk
//! (a small tmpfs, when this runs as root), a corrupt tail at open and its seal.

use base64::Engine;
use ed25519_dalek::Verifier;
use sandlot_audit::merkle::{empty_root, leaf_hash, node_hash, Hash};
use sandlot_audit::{verify, AuditError, AuditLog, Config, Entry, Failure};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::time::Duration;

fn cfg(every: u64) -> Config {
    Config {
        checkpoint_every: every,
        checkpoint_interval: Duration::from_secs(3600),
        origin: Some("test.example/audit".into()),
        ..Default::default()
    }
}

fn entry(i: u64) -> Entry {
    Entry {
        actor: serde_json::json!({"key_id": format!("k{}", i % 3), "key_prefix": "sl_test"}),
        tenant: Some(format!("t{}", i % 2)),
        action: "POST /v1/sandboxes/{id}/execute".into(),
        target: serde_json::json!({"sandbox": format!("sb{i}")}),
        outcome: "ok".into(),
        status: Some(200),
        decisions: vec![format!("dec{i}")],
        request_sha256: Some(hex::encode(Sha256::digest(i.to_string()))),
        response_sha256: None,
        execution_id: Some(format!("ex{i}")),
        trace_id: None,
    }
}

fn fill(dir: &Path, n: u64, every: u64) {
    let log = AuditLog::open(dir, cfg(every)).unwrap();
    for i in 0..n {
        log.append(entry(i)).unwrap();
    }
    log.close().unwrap();
}

fn mth(leaves: &[Hash]) -> Hash {
    match leaves.len() {
        0 => empty_root(),
        1 => leaves[0],
        n => {
            let mut k = 1;
            while k * 2 < n {
                k *= 2;
            }
            node_hash(&mth(&leaves[..k]), &mth(&leaves[k..]))
        }
    }
}

fn seg1(dir: &Path) -> std::path::PathBuf {
    dir.join("seg-00000001.jsonl")
}

#[test]
fn chain_checkpoints_and_root_verify() {
    let d = tempfile::tempdir().unwrap();
    fill(d.path(), 2500, 1000);
    let r = verify(d.path(), None).unwrap();
    assert!(r.failure.is_none(), "{:?}", r.failure);
    assert_eq!(r.records, 2500);
    assert_eq!(r.checkpoints, 3); // 1000, 2000, and the close at 2500
    assert_eq!(r.last_checkpoint, Some(2500));

    // The signed root is the RFC 6962 root of the lines, computed independently.
    let data = std::fs::read(seg1(d.path())).unwrap();
    let leaves: Vec<Hash> = data
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(leaf_hash)
        .collect();
    let cps = std::fs::read_to_string(d.path().join("checkpoints.jsonl")).unwrap();
    let last: serde_json::Value = serde_json::from_str(cps.lines().last().unwrap()).unwrap();
    let note = last["note"].as_str().unwrap();
    let (body, sigs) = note.split_at(note.find("\n\n").unwrap() + 1);
    let lines: Vec<&str> = body.lines().collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0], "test.example/audit");
    assert_eq!(lines[1], "2500");
    let b64 = base64::engine::general_purpose::STANDARD;
    assert_eq!(b64.decode(lines[2]).unwrap(), mth(&leaves).to_vec());
    assert_eq!(r.root, lines[2]);

    // The signature line: em dash, name, base64(key id || Ed25519 signature) over the body.
    let sig_line = sigs.trim_start_matches('\n').trim_end_matches('\n');
    let rest = sig_line
        .strip_prefix("\u{2014} test.example/audit ")
        .unwrap();
    let raw = b64.decode(rest).unwrap();
    assert_eq!(raw.len(), 68);
    let vkey = std::fs::read_to_string(d.path().join("verifier.key")).unwrap();
    let parts: Vec<&str> = vkey.trim().splitn(3, '+').collect();
    assert_eq!(parts[0], "test.example/audit");
    let pk = b64.decode(parts[2]).unwrap();
    assert_eq!(pk[0], 1);
    let mut idin = b"test.example/audit\n\x01".to_vec();
    idin.extend_from_slice(&pk[1..]);
    assert_eq!(&raw[..4], &Sha256::digest(&idin)[..4]);
    assert_eq!(parts[1], hex::encode(&raw[..4]));
    let key = ed25519_dalek::VerifyingKey::from_bytes(pk[1..].try_into().unwrap()).unwrap();
    let sig = ed25519_dalek::Signature::from_slice(&raw[4..]).unwrap();
    key.verify(body.as_bytes(), &sig).unwrap();

    // The signing key is the owner's alone.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(d.path().join("signing.key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // Chain: each prev is the hash of the line before, without its hash member.
    let mut prev = "0".repeat(64);
    for l in data.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let v: serde_json::Value = serde_json::from_slice(l).unwrap();
        assert_eq!(v["prev"], prev);
        let split = l.len() - (9 + 64 + 2);
        let mut body = l[..split].to_vec();
        body.push(b'}');
        assert_eq!(v["hash"], hex::encode(Sha256::digest(&body)));
        prev = v["hash"].as_str().unwrap().to_owned();
    }
}

#[test]
fn a_pinned_key_of_another_log_fails() {
    let d = tempfile::tempdir().unwrap();
    fill(d.path(), 10, 5);
    let other = tempfile::tempdir().unwrap();
    fill(other.path(), 1, 5);
    let key = std::fs::read_to_string(other.path().join("verifier.key")).unwrap();
    let r = verify(d.path(), Some(&key)).unwrap();
    assert!(r.failure.is_some());
}

#[test]
fn every_single_byte_edit_is_detected_and_named() {
    let d = tempfile::tempdir().unwrap();
    fill(d.path(), 6, 3);
    assert!(verify(d.path(), None).unwrap().failure.is_none());
    let seg = seg1(d.path());
    let orig = std::fs::read(&seg).unwrap();
    // The line (from 1) each byte is in.
    let mut line_of = Vec::new();
    let mut l = 1u64;
    for &b in &orig {
        line_of.push(l);
        if b == b'\n' {
            l += 1;
        }
    }
    for i in 0..orig.len() {
        let mut e = orig.clone();
        e[i] = if e[i] == b'x' { b'y' } else { b'x' };
        std::fs::write(&seg, &e).unwrap();
        let r = verify(d.path(), None).unwrap();
        match r.failure {
            Some(Failure::Record(b)) => {
                assert_eq!((b.seq, b.line), (line_of[i], line_of[i]), "byte {i}: {b}");
                assert_eq!(b.segment, "seg-00000001.jsonl");
            }
            other => panic!("byte {i} edited: {other:?}"),
        }
    }
    std::fs::write(&seg, &orig).unwrap();
    let cpp = d.path().join("checkpoints.jsonl");
    let cps = std::fs::read(&cpp).unwrap();
    for i in 0..cps.len() {
        let mut e = cps.clone();
        e[i] = if e[i] == b'x' { b'y' } else { b'x' };
        std::fs::write(&cpp, &e).unwrap();
        let r = verify(d.path(), None).unwrap();
        assert!(
            r.failure.is_some(),
            "checkpoints byte {i} edited undetected"
        );
    }
    std::fs::write(&cpp, &cps).unwrap();
    assert!(verify(d.path(), None).unwrap().failure.is_none());
}

#[test]
fn truncation_is_named() {
    let d = tempfile::tempdir().unwrap();
    fill(d.path(), 20, 5);
    let seg = seg1(d.path());
    let orig = std::fs::read(&seg).unwrap();
    // Drop the last record entirely: the checkpoint at 20 names record 20 missing.
    let cut = orig[..orig.len() - 1]
        .iter()
        .rposition(|&b| b == b'\n')
        .unwrap()
        + 1;
    std::fs::write(&seg, &orig[..cut]).unwrap();
    match verify(d.path(), None).unwrap().failure {
        Some(Failure::Record(b)) => assert_eq!(b.seq, 20, "{b}"),
        other => panic!("{other:?}"),
    }
    // Drop a record in the middle: the next one's seq and prev give it away.
    let lines: Vec<&[u8]> = orig.split_inclusive(|&b| b == b'\n').collect();
    let without: Vec<u8> = lines
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 6)
        .flat_map(|(_, l)| l.to_vec())
        .collect();
    std::fs::write(&seg, &without).unwrap();
    match verify(d.path(), None).unwrap().failure {
        Some(Failure::Record(b)) => assert_eq!((b.seq, b.line), (7, 7), "{b}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn corrupt_tail_at_open_refuses_until_sealed() {
    let d = tempfile::tempdir().unwrap();
    let log = AuditLog::open(d.path(), cfg(10)).unwrap();
    for i in 0..25 {
        log.append(entry(i)).unwrap();
    }
    log.abandon(); // a crash: records 21..25 unsigned
    let seg = seg1(d.path());
    let mut data = std::fs::read(&seg).unwrap();
    let lines: Vec<usize> = data
        .iter()
        .enumerate()
        .filter(|(_, &b)| b == b'\n')
        .map(|(i, _)| i)
        .collect();
    let in_23 = lines[21] + 20; // a byte inside record 23
    data[in_23] ^= 0x01;
    std::fs::write(&seg, &data).unwrap();

    let log = AuditLog::open(d.path(), cfg(10)).unwrap();
    let st = log.status();
    assert_eq!(st.state, "corrupt");
    let bad = st.first_bad.unwrap();
    assert_eq!((bad.seq, bad.line), (23, 23));
    assert!(matches!(log.admit(), Err(AuditError::Corrupt(_))));
    assert!(log.append(entry(0)).is_err());

    let report = log
        .seal(
            serde_json::json!({"key_id": "op", "key_prefix": "sl_op"}),
            None,
        )
        .unwrap();
    assert_eq!(report.kept, 22);
    assert_eq!(log.status().state, "ok");
    let seq = log.append(entry(99)).unwrap();
    assert_eq!(seq, 24); // 22 kept, 23 the seal
    log.close().unwrap();
    drop(log);
    let r = verify(d.path(), None).unwrap();
    assert!(r.failure.is_none(), "{:?}", r.failure);
    assert_eq!(r.seals, vec![23]);
    let q = std::fs::read_dir(d.path().join("quarantine"))
        .unwrap()
        .count();
    assert!(q >= 1);
}

#[test]
fn a_record_cut_short_by_a_crash_is_dropped_and_said() {
    let d = tempfile::tempdir().unwrap();
    let log = AuditLog::open(d.path(), cfg(1000)).unwrap();
    for i in 0..5 {
        log.append(entry(i)).unwrap();
    }
    log.abandon();
    let seg = seg1(d.path());
    let mut data = std::fs::read(&seg).unwrap();
    data.extend_from_slice(b"{\"seq\":6,\"at\":\"20");
    std::fs::write(&seg, &data).unwrap();
    let log = AuditLog::open(d.path(), cfg(1000)).unwrap();
    assert_eq!(log.status().state, "ok");
    log.close().unwrap();
    drop(log);
    let r = verify(d.path(), None).unwrap();
    assert!(r.failure.is_none(), "{:?}", r.failure);
    assert_eq!(r.records, 6);
    let text = std::fs::read_to_string(&seg).unwrap();
    assert!(text.lines().last().unwrap().contains("audit.recovered"));
}

#[test]
fn reopen_continues_the_chain_and_export_filters() {
    let d = tempfile::tempdir().unwrap();
    fill(d.path(), 30, 7);
    fill(d.path(), 30, 7);
    let r = verify(d.path(), None).unwrap();
    assert!(r.failure.is_none(), "{:?}", r.failure);
    assert_eq!(r.records, 60);
    let mut out = Vec::new();
    let n = sandlot_audit::export(d.path(), Some(10), Some(19), &mut out).unwrap();
    assert_eq!(n, 10);
    let first: serde_json::Value =
        serde_json::from_slice(out.split(|&b| b == b'\n').next().unwrap()).unwrap();
    assert_eq!(first["seq"], 10);
    let q = sandlot_audit::Query {
        tenant: Some("t1".into()),
        ..Default::default()
    };
    let (recs, next) = sandlot_audit::read_records(d.path(), &q, 0, 5, 10_000).unwrap();
    assert_eq!(recs.len(), 5);
    assert!(recs.iter().all(|r| r.tenant.as_deref() == Some("t1")));
    assert!(next.is_some());
}

#[test]
fn segments_roll_at_checkpoints() {
    let d = tempfile::tempdir().unwrap();
    let log = AuditLog::open(
        d.path(),
        Config {
            segment_bytes: 8 << 10,
            ..cfg(10)
        },
    )
    .unwrap();
    for i in 0..200 {
        log.append(entry(i)).unwrap();
    }
    log.close().unwrap();
    drop(log);
    let segs = std::fs::read_dir(d.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("seg-")
        })
        .count();
    assert!(segs > 3, "{segs} segments");
    let r = verify(d.path(), None).unwrap();
    assert!(r.failure.is_none(), "{:?}", r.failure);
    let log = AuditLog::open(d.path(), cfg(10)).unwrap();
    assert_eq!(log.status().records, 200);
    assert_eq!(log.append(entry(1)).unwrap(), 201);
}

/// A tmpfs of `mb` MiB at a fresh directory (root only); `None` when mounting is not allowed.
fn tmpfs(mb: u64) -> Option<tempfile::TempDir> {
    let d = tempfile::tempdir().ok()?;
    let ok = std::process::Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            &format!("size={}k", mb * 1024),
            "tmpfs",
        ])
        .arg(d.path())
        .status()
        .ok()?
        .success();
    ok.then_some(d)
}

fn umount(d: &Path) {
    let _ = std::process::Command::new("umount").arg(d).status();
}

#[test]
fn a_full_disk_refuses_admissions_and_loses_no_admitted_record() {
    let Some(mnt) = tmpfs(4) else {
        // Under CI a test that cannot run fails: a full disk must never pass untested.
        assert!(
            std::env::var_os("CI").is_none(),
            "cannot mount a tmpfs here: this test may not be skipped under CI"
        );
        eprintln!("cannot mount a tmpfs here: skipped");
        return;
    };
    let dir = mnt.path().join("audit");
    let result = std::panic::catch_unwind(|| {
        let log = AuditLog::open(
            &dir,
            Config {
                reserve_bytes: 256 << 10,
                ..cfg(100)
            },
        )
        .unwrap();
        // Fill the filesystem but for the log's reserve.
        let filler = mnt.path().join("filler");
        let mut f = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 64 << 10];
        use std::io::Write;
        while f.write_all(&chunk).is_ok() {}
        let _ = f.sync_all();
        let mut admitted = 0u64;
        let mut refused = false;
        for i in 0..100_000 {
            match log.admit() {
                Ok(a) => {
                    admitted += 1;
                    a.log()
                        .append(entry(i))
                        .expect("an admitted request's record is written");
                }
                Err(AuditError::Unavailable(_)) => {
                    refused = true;
                    break;
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(refused, "never refused after {admitted} admissions");
        assert_eq!(log.status().state, "unavailable");
        // Room again: admitted after the retry interval.
        drop(f);
        std::fs::remove_file(&filler).unwrap();
        std::thread::sleep(Duration::from_millis(1100));
        let a = log.admit().expect("admitted once there is room");
        a.log().append(entry(0)).unwrap();
        drop(a);
        log.close().unwrap();
        drop(log);
        let r = verify(&dir, None).unwrap();
        assert!(r.failure.is_none(), "{:?}", r.failure);
        assert_eq!(r.records, admitted + 1);
    });
    umount(mnt.path());
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}

#[test]
fn a_second_writer_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let _log = AuditLog::open(d.path(), cfg(10)).unwrap();
    assert!(matches!(
        AuditLog::open(d.path(), cfg(10)),
        Err(AuditError::Locked(_))
    ));
}

#[test]
fn an_edit_under_a_checkpoint_in_the_last_segment_is_found_at_open() {
    let d = tempfile::tempdir().unwrap();
    fill(d.path(), 30, 10);
    let seg = seg1(d.path());
    let mut data = std::fs::read(&seg).unwrap();
    let nl: Vec<usize> = data
        .iter()
        .enumerate()
        .filter(|(_, &b)| b == b'\n')
        .map(|(i, _)| i)
        .collect();
    data[nl[3] + 30] ^= 0x01; // inside record 5
    std::fs::write(&seg, &data).unwrap();
    let log = AuditLog::open(d.path(), cfg(10)).unwrap();
    let st = log.status();
    assert_eq!(st.state, "corrupt");
    assert_eq!(st.first_bad.unwrap().seq, 5);
    let r = log.seal(serde_json::json!("system"), None).unwrap();
    assert_eq!(r.kept, 4);
    log.close().unwrap();
    drop(log);
    let v = verify(d.path(), None).unwrap();
    assert!(v.failure.is_none(), "{:?}", v.failure);
    assert_eq!(v.seals, vec![5]);
}
