use super::*;

/// A record of a new UTC day opens a new segment (the clock is the caller's `at` here).
#[test]
fn a_new_day_opens_a_new_segment_at_a_checkpoint() {
    let d = tempfile::tempdir().unwrap();
    let cfg = Config {
        origin: Some("test.example/audit".into()),
        checkpoint_interval: Duration::from_secs(3600),
        ..Default::default()
    };
    let log = AuditLog::open(d.path(), cfg.clone()).unwrap();
    let middle = Entry {
        actor: "system".into(),
        action: "test".into(),
        outcome: "ok".into(),
        ..Default::default()
    }
    .middle();
    let mut inner = lock_of(&log.inner);
    for at in [
        "2026-01-01T23:59:59.000000Z",
        "2026-01-01T23:59:59.500000Z",
        "2026-01-02T00:00:00.000000Z",
        "2026-01-02T12:00:00.000000Z",
        "2026-01-03T00:00:00.000001Z",
    ] {
        log.append_locked(&mut inner, &middle, at).unwrap();
    }
    assert_eq!(inner.seg, 3);
    drop(inner);
    log.close().unwrap();
    drop(log);
    let lines = |n: u32| {
        std::fs::read_to_string(d.path().join(seg_name(n)))
            .unwrap()
            .lines()
            .count()
    };
    assert_eq!((lines(1), lines(2), lines(3)), (2, 2, 1));
    let r = verify::verify(d.path(), None).unwrap();
    assert!(r.failure.is_none(), "{:?}", r.failure);
    // The day is read back at open: a record of another day still rolls.
    let log = AuditLog::open(d.path(), cfg).unwrap();
    let mut inner = lock_of(&log.inner);
    assert_eq!(inner.seg_day.as_deref(), Some("2026-01-03"));
    log.append_locked(&mut inner, &middle, "2026-01-04T00:00:00.000000Z")
        .unwrap();
    assert_eq!(inner.seg, 4);
}
