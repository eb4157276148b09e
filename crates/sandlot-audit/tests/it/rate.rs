//! The targets, measured on this machine: 1 million appends (≥ 20 000 records/s) and
//! `verify` of them (≤ 10 s). Ignored by default (it writes ~600 MiB); run with
//! `cargo test --release -p sandlot-audit --test it -- rate:: --ignored --nocapture`.

use sandlot_audit::{verify, AuditLog, Config, Entry};
use std::time::Instant;

#[test]
#[ignore]
fn a_million_records_append_and_verify() {
    let n: u64 = std::env::var("AUDIT_RATE_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let base = std::env::var("AUDIT_RATE_DIR").unwrap_or_else(|_| "/var/tmp".into());
    let d = tempfile::tempdir_in(base).unwrap();
    let log = AuditLog::open(d.path(), Config::default()).unwrap();
    let e = |i: u64| Entry {
        actor: serde_json::json!({"key_id": format!("key_{:032x}", i % 50), "key_prefix": "sl_4f2a9c"}),
        tenant: Some(format!("tenant{}", i % 20)),
        action: "POST /v1/sandboxes/{id}/execute".into(),
        target: serde_json::json!({"sandbox": format!("sb_{:032x}", i % 1000)}),
        outcome: "ok".into(),
        status: Some(200),
        decisions: vec![format!("dec_{i:032x}")],
        request_sha256: Some(format!("{:064x}", i)),
        response_sha256: Some(format!("{:064x}", !i)),
        execution_id: Some(format!("ex_{i:032x}")),
        trace_id: Some(format!("{:032x}", i * 7919)),
    };
    let entries: Vec<Entry> = (0..1000).map(e).collect();
    let t = Instant::now();
    for i in 0..n {
        log.append(entries[(i % 1000) as usize].clone()).unwrap();
    }
    log.close().unwrap();
    let secs = t.elapsed().as_secs_f64();
    drop(log);
    let r = verify(d.path(), None).unwrap();
    assert!(r.failure.is_none(), "{:?}", r.failure);
    println!(
        "append: {n} records in {secs:.2} s = {:.0} records/s; verify: {:.2} s ({} checkpoints)",
        n as f64 / secs,
        r.seconds,
        r.checkpoints
    );
}
