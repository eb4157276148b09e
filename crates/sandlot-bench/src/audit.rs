//! The audit log (issue 8): append rate of 1 million records of a request's size (digests,
//! ids, a decision) into a fresh log on the data dir's disk, checkpoints every 1000 as the
//! server signs them, against the target of 20 000 records/s; then `verify` of the whole log
//! (every hash, the chain, every checkpoint's signature and Merkle root) against the target of
//! 10 s. In process, no server: this measures the log itself; the per-request cost on the
//! server shows in the hot `1+1` with audit on and off.

use anyhow::Context;
use sandlot_audit::{AuditLog, Config, Entry};
use serde::Serialize;
use std::path::Path;
use std::time::Instant;

pub const TARGET_APPEND_PER_S: f64 = 20_000.0;
pub const TARGET_VERIFY_S: f64 = 10.0;

#[derive(Debug, Clone, Serialize)]
pub struct AuditBenchResult {
    pub records: u64,
    pub bytes: u64,
    pub checkpoints: usize,
    pub append_seconds: f64,
    pub append_per_s: f64,
    pub append_target_per_s: f64,
    pub append_met: bool,
    pub verify_seconds: f64,
    pub verify_target_s: f64,
    pub verify_met: bool,
}

fn entry(i: u64) -> Entry {
    use sha2_free::hex64;
    Entry {
        actor: serde_json::json!({"key_id": format!("key_{:032x}", i % 50), "key_prefix": "sl_4f2a9c"}),
        tenant: Some(format!("tenant{}", i % 20)),
        action: "POST /v1/sandboxes/{id}/execute".into(),
        target: serde_json::json!({"sandbox": format!("sb_{:032x}", i % 1000)}),
        outcome: "ok".into(),
        status: Some(200),
        decisions: vec![format!("dec_{:032x}", i)],
        request_sha256: Some(hex64(i)),
        response_sha256: Some(hex64(i ^ 0xffff)),
        execution_id: Some(format!("ex_{:032x}", i)),
        trace_id: Some(format!("{:032x}", i * 7919)),
    }
}

/// A 64-hex-digit stand-in for a digest (the log hashes it like any text).
mod sha2_free {
    pub fn hex64(i: u64) -> String {
        format!(
            "{:016x}{:016x}{:016x}{:016x}",
            i,
            i.rotate_left(17),
            i.rotate_left(31),
            !i
        )
    }
}

/// Appends `records` records into a fresh log under `base` (a temporary dir in it), then
/// verifies it; the log is removed afterwards.
pub fn audit(records: u64, base: &Path) -> anyhow::Result<AuditBenchResult> {
    std::fs::create_dir_all(base).with_context(|| format!("creating {}", base.display()))?;
    let tmp = tempfile::Builder::new()
        .prefix("sandlot-bench-audit-")
        .tempdir_in(base)?;
    let dir = tmp.path().join("audit");
    let log = AuditLog::open(&dir, Config::default())?;
    let entries: Vec<Entry> = (0..1000).map(entry).collect();
    let t = Instant::now();
    for i in 0..records {
        log.append(entries[(i % 1000) as usize].clone())?;
    }
    log.close()?;
    let append_seconds = t.elapsed().as_secs_f64();
    drop(log);
    let bytes = std::fs::read_dir(&dir)?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("seg-"))
        .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
        .sum();
    let r = sandlot_audit::verify(&dir, None)?;
    if let Some(f) = r.failure {
        anyhow::bail!("the benchmark's own log does not verify: {f}");
    }
    let append_per_s = records as f64 / append_seconds;
    Ok(AuditBenchResult {
        records,
        bytes,
        checkpoints: r.checkpoints,
        append_seconds,
        append_per_s,
        append_target_per_s: TARGET_APPEND_PER_S,
        append_met: append_per_s >= TARGET_APPEND_PER_S,
        verify_seconds: r.seconds,
        verify_target_s: TARGET_VERIFY_S,
        verify_met: r.seconds <= TARGET_VERIFY_S,
    })
}

pub fn print(r: &AuditBenchResult) {
    println!(
        "audit: {} records ({:.0} MiB, {} checkpoints): append {:.0} records/s (target ≥ {:.0}: {}); verify {:.2} s (target ≤ {:.0} s: {})",
        r.records,
        r.bytes as f64 / (1 << 20) as f64,
        r.checkpoints,
        r.append_per_s,
        r.append_target_per_s,
        if r.append_met { "met" } else { "missed" },
        r.verify_seconds,
        r.verify_target_s,
        if r.verify_met { "met" } else { "missed" },
    );
}

/// The paragraph for BENCHMARKS.md.
pub fn markdown(r: &AuditBenchResult) -> String {
    format!(
        "**Audit log.** {} records of a request's size ({:.0} MiB in segments, a signed \
         checkpoint every 1000: {}) appended in {:.2} s: **{:.0} records/s** (target ≥ {:.0}: \
         {}). `sandlot audit verify` of the whole log (every record's hash, the chain, every \
         checkpoint's Ed25519 signature and RFC 6962 root): **{:.2} s** (target ≤ {:.0} s: {}).\n",
        r.records,
        r.bytes as f64 / (1 << 20) as f64,
        r.checkpoints,
        r.append_seconds,
        r.append_per_s,
        r.append_target_per_s,
        if r.append_met { "met" } else { "missed" },
        r.verify_seconds,
        r.verify_target_s,
        if r.verify_met { "met" } else { "missed" },
    )
}
