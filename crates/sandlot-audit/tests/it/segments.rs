//! Segments and archives on real files: a small segment size makes many segments, each
//! opened by a checkpoint; `archive` moves the oldest out and the log still verifies from
//! the signed boundary, the archive verifies and ends exactly there, and every way of
//! hiding or editing records across the cut is found and named.

use sandlot_audit::{verify, verify_archive, AuditError, AuditLog, Config, Entry, Failure};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn cfg() -> Config {
    Config {
        checkpoint_every: 1000,
        checkpoint_interval: Duration::from_secs(3600),
        segment_bytes: 4 << 10,
        segment_daily: false,
        origin: Some("test.example/audit".into()),
        ..Default::default()
    }
}

fn entry(i: u64) -> Entry {
    Entry {
        actor: serde_json::json!({"key_id": "k1", "key_prefix": "sl_test"}),
        tenant: Some("t1".into()),
        action: "POST /v1/sandboxes/{id}/execute".into(),
        target: serde_json::json!({"sandbox": format!("sb{i}")}),
        outcome: "ok".into(),
        status: Some(200),
        ..Default::default()
    }
}

fn segs(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("seg-"))
        .collect();
    v.sort();
    v
}

/// 120 records, then a cut time, then 120 more: returns the cut.
fn fill(dir: &Path) -> String {
    let log = AuditLog::open(dir, cfg()).unwrap();
    for i in 0..120 {
        log.append(entry(i)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(20));
    let cut = sandlot_audit::now_rfc3339();
    std::thread::sleep(Duration::from_millis(20));
    for i in 120..240 {
        log.append(entry(i)).unwrap();
    }
    log.close().unwrap();
    cut
}

fn flip(path: &Path, line: usize) {
    let mut data = std::fs::read(path).unwrap();
    let start: usize = data
        .split_inclusive(|&b| b == b'\n')
        .take(line - 1)
        .map(<[u8]>::len)
        .sum();
    // Inside the record's target, well before its hash.
    data[start + 120] ^= 0x01;
    std::fs::write(path, data).unwrap();
}

fn bad_record(f: &Option<Failure>) -> sandlot_audit::Bad {
    match f {
        Some(Failure::Record(b)) => b.clone(),
        other => panic!("expected a bad record, got {other:?}"),
    }
}

#[test]
fn segments_each_open_on_a_checkpoint_and_verify() {
    let d = tempfile::tempdir().unwrap();
    fill(d.path());
    let n = segs(d.path()).len();
    assert!(n >= 6, "{n} segments");
    for s in &segs(d.path()) {
        // A segment past the size is sealed before the next record, never much bigger.
        assert!(std::fs::metadata(s).unwrap().len() < (4 << 10) + 1024);
    }
    let cps = std::fs::read_to_string(d.path().join("checkpoints.jsonl")).unwrap();
    let starts = cps
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|c| c["offset"] == 0 && c["segment"].as_u64().unwrap() > 1)
        .count();
    assert_eq!(
        starts,
        n - 1,
        "one signed checkpoint opens each later segment"
    );
    let r = verify(d.path(), None).unwrap();
    assert!(r.failure.is_none(), "{:?}", r.failure);
    assert_eq!(r.records, 240);
    assert_eq!(r.segments, n);
}

#[test]
fn archive_moves_old_segments_and_both_halves_verify() {
    let d = tempfile::tempdir().unwrap();
    let a = tempfile::tempdir().unwrap();
    let to = a.path().join("archive");
    let cut = fill(d.path());
    let before = segs(d.path()).len();
    let log = AuditLog::open(d.path(), cfg()).unwrap();
    let report = log
        .archive(&cut, &to, serde_json::json!({"operator_cli": "test"}))
        .unwrap();
    log.close().unwrap();
    drop(log);
    assert_eq!(report.from_record, 1);
    assert!(report.boundary > 0 && report.boundary <= 120, "{report:?}");
    let moved = segs(&to).len();
    assert_eq!(moved, report.segments.len());
    assert!(moved >= 2, "{report:?}");
    // (The audit.archived record may open one more segment.)
    assert!((before..=before + 1).contains(&(segs(d.path()).len() + moved)));
    for s in segs(&to) {
        assert!(!d.path().join(s.file_name().unwrap()).exists());
    }
    assert!(d.path().join("boundary.json").exists());

    let r = verify(d.path(), None).unwrap();
    assert!(r.failure.is_none(), "{:?}", r.failure);
    assert_eq!(r.from, report.boundary + 1);
    assert_eq!(r.records, 241, "the records and the audit.archived one");
    let ar = verify_archive(&to, d.path(), None).unwrap();
    assert!(ar.failure.is_none(), "{:?}", ar.failure);
    assert_eq!(ar.records, report.boundary);
    assert_eq!(ar.root, report.root);

    // The log reopens from the boundary and keeps the chain.
    let log = AuditLog::open(d.path(), cfg()).unwrap();
    assert_eq!(log.status().state, "ok");
    assert_eq!(log.append(entry(999)).unwrap(), 242);
    log.close().unwrap();
    drop(log);
    assert!(verify(d.path(), None).unwrap().failure.is_none());

    // A second archive starts where the first ended, and ends at the new boundary.
    let log = AuditLog::open(d.path(), cfg()).unwrap();
    let to2 = a.path().join("archive2");
    let r2 = log
        .archive("9999-01-01", &to2, serde_json::json!("test"))
        .unwrap();
    log.close().unwrap();
    drop(log);
    assert_eq!(r2.from_record, report.boundary + 1);
    assert!(verify(d.path(), None).unwrap().failure.is_none());
    let ar2 = verify_archive(&to2, d.path(), None).unwrap();
    assert!(ar2.failure.is_none(), "{:?}", ar2.failure);
    assert_eq!(ar2.from, report.boundary + 1);
    // The second archive's first segment cut off, its start moved to a later genuine
    // checkpoint: it proves itself alone, but not the start the log's record names.
    let to2_segs = segs(&to2);
    assert!(to2_segs.len() >= 2, "{r2:?}");
    let b2 = std::fs::read(to2.join("boundary.json")).unwrap();
    let first2 = std::fs::read(&to2_segs[0]).unwrap();
    let seg_no = |p: &Path| -> u64 {
        p.file_name()
            .unwrap()
            .to_string_lossy()
            .trim_start_matches("seg-")
            .trim_end_matches(".jsonl")
            .parse()
            .unwrap()
    };
    let next = seg_no(&to2_segs[1]);
    let later = std::fs::read_to_string(to2.join("checkpoints.jsonl"))
        .unwrap()
        .lines()
        .find(|l| {
            let c: serde_json::Value = serde_json::from_str(l).unwrap();
            c["segment"] == next && c["offset"] == 0
        })
        .unwrap()
        .to_owned();
    std::fs::write(to2.join("boundary.json"), format!("{later}\n")).unwrap();
    std::fs::remove_file(&to2_segs[0]).unwrap();
    match verify_archive(&to2, d.path(), None).unwrap().failure {
        Some(Failure::Boundary { reason }) => assert!(reason.contains("starts at"), "{reason}"),
        other => panic!("{other:?}"),
    }
    std::fs::write(&to2_segs[0], first2).unwrap();
    std::fs::write(to2.join("boundary.json"), b2).unwrap();
    assert!(verify_archive(&to2, d.path(), None)
        .unwrap()
        .failure
        .is_none());
    // The first archive no longer ends where the log starts: it is proven against its own
    // successor, not this log.
    assert!(verify_archive(&to, d.path(), None)
        .unwrap()
        .failure
        .is_some());
}

#[test]
fn edits_and_deletions_across_the_cut_are_named() {
    let d = tempfile::tempdir().unwrap();
    let a = tempfile::tempdir().unwrap();
    let to = a.path().join("archive");
    let cut = fill(d.path());
    let log = AuditLog::open(d.path(), cfg()).unwrap();
    let report = log.archive(&cut, &to, serde_json::json!("test")).unwrap();
    log.close().unwrap();
    drop(log);
    let kept = segs(d.path());
    let archived = segs(&to);

    // One record edited in the remaining log: named by segment and line.
    let backup = std::fs::read(&kept[0]).unwrap();
    flip(&kept[0], 2);
    let b = bad_record(&verify(d.path(), None).unwrap().failure);
    assert_eq!(b.seq, report.boundary + 2);
    assert_eq!(
        b.segment,
        kept[0].file_name().unwrap().to_string_lossy().as_ref()
    );
    assert_eq!(b.line, 2);
    std::fs::write(&kept[0], &backup).unwrap();
    assert!(verify(d.path(), None).unwrap().failure.is_none());

    // One record edited in the archive: named there.
    let backup = std::fs::read(&archived[1]).unwrap();
    flip(&archived[1], 3);
    let b = bad_record(&verify_archive(&to, d.path(), None).unwrap().failure);
    assert_eq!(
        b.segment,
        archived[1].file_name().unwrap().to_string_lossy().as_ref()
    );
    assert_eq!(b.line, 3);
    std::fs::write(&archived[1], &backup).unwrap();
    assert!(verify_archive(&to, d.path(), None)
        .unwrap()
        .failure
        .is_none());

    // The archive's last segment and its checkpoints deleted: it no longer reaches the cut.
    let last = archived.last().unwrap();
    let backup_seg = std::fs::read(last).unwrap();
    let cps_path = to.join("checkpoints.jsonl");
    let backup_cps = std::fs::read(&cps_path).unwrap();
    std::fs::remove_file(last).unwrap();
    let first_of_last = {
        let l = backup_seg.split(|&b| b == b'\n').next().unwrap();
        serde_json::from_slice::<serde_json::Value>(l).unwrap()["seq"]
            .as_u64()
            .unwrap()
    };
    let cps: String = String::from_utf8(backup_cps.clone())
        .unwrap()
        .lines()
        .filter(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["size"]
                .as_u64()
                .unwrap()
                < first_of_last
        })
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&cps_path, cps).unwrap();
    match verify_archive(&to, d.path(), None).unwrap().failure {
        Some(Failure::Boundary { reason }) => assert!(reason.contains("ends at"), "{reason}"),
        other => panic!("{other:?}"),
    }
    std::fs::write(last, backup_seg).unwrap();
    std::fs::write(&cps_path, backup_cps).unwrap();

    // The first remaining segment deleted and the boundary moved past it, with a genuine
    // signed checkpoint: no audit.archived record names that boundary.
    let boundary = std::fs::read(d.path().join("boundary.json")).unwrap();
    let first = std::fs::read(&kept[0]).unwrap();
    let next_seg: u64 = kept[1]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .trim_start_matches("seg-")
        .trim_end_matches(".jsonl")
        .parse()
        .unwrap();
    let cps = std::fs::read_to_string(d.path().join("checkpoints.jsonl")).unwrap();
    let moved = cps
        .lines()
        .find(|l| {
            let c: serde_json::Value = serde_json::from_str(l).unwrap();
            c["segment"] == next_seg && c["offset"] == 0
        })
        .unwrap();
    std::fs::write(d.path().join("boundary.json"), format!("{moved}\n")).unwrap();
    std::fs::remove_file(&kept[0]).unwrap();
    match verify(d.path(), None).unwrap().failure {
        Some(Failure::Boundary { reason }) => {
            assert!(reason.contains("audit.archived"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    // boundary.json deleted too: the records start in the middle of the chain.
    std::fs::remove_file(d.path().join("boundary.json")).unwrap();
    let b = bad_record(&verify(d.path(), None).unwrap().failure);
    assert!(b.reason.contains("where 1 was due"), "{b:?}");
    std::fs::write(&kept[0], first).unwrap();
    std::fs::write(d.path().join("boundary.json"), &boundary).unwrap();
    assert!(verify(d.path(), None).unwrap().failure.is_none());

    // A forged boundary (its signature broken) is refused.
    let mut forged: serde_json::Value = serde_json::from_slice(&boundary).unwrap();
    forged["size"] = (forged["size"].as_u64().unwrap() + 1).into();
    std::fs::write(d.path().join("boundary.json"), forged.to_string()).unwrap();
    assert!(matches!(
        verify(d.path(), None).unwrap().failure,
        Some(Failure::Boundary { .. })
    ));
}

#[test]
fn nothing_to_archive_and_a_used_target_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let a = tempfile::tempdir().unwrap();
    fill(d.path());
    let log = AuditLog::open(d.path(), cfg()).unwrap();
    let e = log
        .archive("2000-01-01", &a.path().join("x"), serde_json::json!("t"))
        .unwrap_err();
    assert!(matches!(e, AuditError::Invalid(_)), "{e}");
    std::fs::write(a.path().join("checkpoints.jsonl"), b"").unwrap();
    let e = log
        .archive("9999-01-01", a.path(), serde_json::json!("t"))
        .unwrap_err();
    assert!(
        matches!(e, AuditError::Invalid(ref m) if m.contains("empty")),
        "{e}"
    );
    log.close().unwrap();
    drop(log);
    assert!(verify(d.path(), None).unwrap().failure.is_none());
}
