//! Micro-benchmark of the workspace backends: create, remove, snapshot and open_tree times for
//! each backend and quota mode, and 1 GiB write/read throughput in a workspace against the host
//! disk. A benchmark, not a test: `cargo test` does not run it.
//!
//! `cargo bench -p sandlot-workspace --bench backends` (root: it mounts Btrfs images).

#[path = "../tests/it/common/mod.rs"]
mod common;

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use sandlot_workspace::{BackendChoice, QuotaMode, Workspaces};

const ROUNDS: usize = 200;
const GIB: u64 = 1 << 30;

fn percentiles(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let at = |p: f64| samples[((samples.len() - 1) as f64 * p).round() as usize];
    println!(
        "{name:<44} n={:<4} p50 {:>8.3} ms  p90 {:>8.3} ms  p99 {:>8.3} ms",
        samples.len(),
        at(0.5).as_secs_f64() * 1e3,
        at(0.9).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
    );
}

fn time<T>(f: impl FnOnce() -> T) -> (Duration, T) {
    let start = Instant::now();
    let out = f();
    (start.elapsed(), out)
}

fn bench_backend(label: &str, ws: &Workspaces, snapshots: bool) {
    // A source workspace with some content, for snapshots.
    let src = ws.create("src", OWNER, OWNER, 5 * GIB).unwrap();
    for i in 0..200 {
        std::fs::write(src.path.join(format!("f{i}")), vec![7u8; 64 * 1024]).unwrap();
    }
    syncfs(&src.path);

    let mut create = Vec::new();
    let mut remove = Vec::new();
    let mut open_tree = Vec::new();
    for i in 0..ROUNDS {
        let id = format!("w{i}");
        let (t, _) = time(|| ws.create(&id, OWNER, OWNER, 5 * GIB).unwrap());
        create.push(t);
        let (t, fd) = time(|| ws.open_tree(&id).unwrap());
        open_tree.push(t);
        drop(fd);
    }
    let mut maintain = Vec::new();
    for _ in 0..20 {
        maintain.push(time(|| ws.maintain().unwrap()).0);
    }
    for i in 0..ROUNDS {
        let (t, _) = time(|| ws.remove(&format!("w{i}")).unwrap());
        remove.push(t);
    }
    let mut pair = Vec::new();
    let mut pair_create = Vec::new();
    let mut pair_remove = Vec::new();
    for i in 0..ROUNDS {
        let id = format!("p{i}");
        let (c, _) = time(|| ws.create(&id, OWNER, OWNER, 5 * GIB).unwrap());
        let (r, _) = time(|| ws.remove(&id).unwrap());
        pair_create.push(c);
        pair_remove.push(r);
        pair.push(c + r);
    }
    percentiles(&format!("{label}: maintain (sweep, 200 live)"), maintain);
    percentiles(
        &format!("{label}: create, one live, after removes"),
        pair_create,
    );
    percentiles(&format!("{label}: remove, one live"), pair_remove);
    percentiles(&format!("{label}: create (200 live)"), create);
    percentiles(&format!("{label}: open_tree"), open_tree);
    percentiles(&format!("{label}: remove"), remove);
    percentiles(&format!("{label}: create+remove, one live"), pair);
    if snapshots {
        let mut snap = Vec::new();
        for i in 0..50 {
            let id = format!("s{i}");
            let (t, _) = time(|| ws.snapshot("src", &id).unwrap());
            snap.push(t);
        }
        for i in 0..50 {
            ws.remove(&format!("s{i}")).unwrap();
        }
        percentiles(&format!("{label}: snapshot (12.5 MiB, 200 files)"), snap);
    }
    ws.remove("src").unwrap();
}

fn create_remove_snapshot() {
    for (label, quota) in [
        ("btrfs squota", QuotaMode::Simple),
        ("btrfs qgroup", QuotaMode::Full),
    ] {
        let mut fx = Fixture::new(BackendChoice::Btrfs);
        fx.cfg.image.initial_bytes = 4 * GIB;
        fx.cfg.image.max_bytes = Some(4 * GIB);
        fx.cfg.quota = quota;
        let (t, ws) = time(|| fx.open());
        println!(
            "{label}: first open (fallocate 4 GiB + mkfs + mount) {:.1} ms",
            t.as_secs_f64() * 1e3
        );
        bench_backend(label, &ws, true);
        drop(ws);
        let (t, ws) = time(|| fx.open());
        println!(
            "{label}: reopen, still mounted {:.1} ms",
            t.as_secs_f64() * 1e3
        );
        fx.finish(ws);
    }
    let fx = Fixture::new(BackendChoice::LoopImage);
    let ws = fx.open();
    bench_backend("loop-image ext4", &ws, false);
    fx.finish(ws);
}

/// Writes then reads back `bytes` at `path` (buffered write + fsync; page cache dropped before
/// the read), returning MB/s for each.
fn throughput(path: &Path, bytes: u64) -> (f64, f64) {
    let block = vec![0x5au8; 4 << 20];
    let start = Instant::now();
    let mut f = std::fs::File::create(path).unwrap();
    for _ in 0..bytes / block.len() as u64 {
        f.write_all(&block).unwrap();
    }
    f.sync_all().unwrap();
    let write = bytes as f64 / start.elapsed().as_secs_f64() / 1e6;
    // SAFETY: posix_fadvise on an fd we own: drop the file's cached pages.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    drop(f);
    let mut buf = vec![0u8; 4 << 20];
    let mut f = std::fs::File::open(path).unwrap();
    let start = Instant::now();
    while f.read(&mut buf).unwrap() > 0 {}
    let read = bytes as f64 / start.elapsed().as_secs_f64() / 1e6;
    std::fs::remove_file(path).unwrap();
    (write, read)
}

fn write_read_1gib() {
    let mut fx = Fixture::new(BackendChoice::Btrfs);
    fx.cfg.image.initial_bytes = 3 * GIB;
    fx.cfg.image.max_bytes = Some(3 * GIB);
    let ws = fx.open();
    let w = ws.create("io", 0, 0, 2 * GIB).unwrap();
    let lw = Fixture::new(BackendChoice::LoopImage);
    let lws = lw.open();
    let l = lws.create("io", 0, 0, 2 * GIB).unwrap();
    for round in 0..2 {
        let host = throughput(&fx.tmp.path().join("host.bin"), GIB);
        let btrfs = throughput(&w.path.join("ws.bin"), GIB);
        let ext4 = throughput(&l.path.join("ws.bin"), GIB);
        println!(
            "round {round}: host write {:.0} MB/s read {:.0} MB/s | btrfs workspace write {:.0} \
             read {:.0} | loop-image workspace write {:.0} read {:.0}",
            host.0, host.1, btrfs.0, btrfs.1, ext4.0, ext4.1
        );
    }
    fx.finish(ws);
    lw.finish(lws);
}

fn main() {
    create_remove_snapshot();
    write_read_1gib();
}
