//! Benchmark 7, disk throughput of the workspace (issue 9): `dd` writes a file of `--disk-mib` MiB
//! into `/workspace` of a sandbox with 512 MiB of memory (disk is not memory) and reads it back;
//! the same `dd` runs on the host, outside any sandbox, in a directory of the scratch dir, which is
//! on the filesystem holding the server's data dir (and so the workspaces' image). Both sides are
//! timed by `dd` itself. Reads are measured as they come right after the write (whatever is
//! cached), and again after the harness dropped the host's page cache when it may (root): a sandbox
//! cannot drop caches itself, but the host's drop empties its cache too. Repeated `--disk-reps`
//! times, alternating which side goes first; medians are reported.

use crate::bench::{Conditions, Ctx, Watch};
use crate::server;
use crate::stats::median;
use anyhow::{bail, Context};
use serde::Serialize;
use serde_json::json;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;

/// The sandbox's memory: small, so a 1 GiB file could not fit in memory.
pub const MEMORY_MB: u64 = 512;
/// Longest one `dd` cell may take.
const DD_TIMEOUT_S: f64 = 600.0;

/// One repetition on one side, in MiB/s as `dd` reports them.
#[derive(Debug, Clone, Copy, Serialize, Default)]
pub struct DiskRun {
    pub write: f64,
    pub read: f64,
    pub read_cold: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DiskResult {
    pub conditions: Conditions,
    pub size_mib: u64,
    pub reps: usize,
    pub memory_mb: u64,
    pub disk_mb: u64,
    /// The server's workspace backend as it logged it, and the filesystem `/workspace` is
    /// inside the sandbox.
    pub workspaces: Option<String>,
    pub sandbox_fs: String,
    pub host_fs: String,
    pub caches_dropped: bool,
    pub sandbox: Vec<DiskRun>,
    pub host: Vec<DiskRun>,
    /// Medians, MiB/s.
    pub sandbox_write: f64,
    pub sandbox_read: f64,
    pub sandbox_read_cold: Option<f64>,
    pub host_write: f64,
    pub host_read: f64,
    pub host_read_cold: Option<f64>,
    /// Sandbox / host, medians; the read ratio is the cold one where caches were dropped.
    pub write_ratio: f64,
    pub read_ratio: f64,
    pub read_ratio_cold: bool,
    /// Highest `peak_memory_bytes` the sandbox reported during the writes.
    pub sandbox_peak_memory: u64,
}

pub fn disk(ctx: &mut Ctx) -> anyhow::Result<DiskResult> {
    let o = ctx.opts;
    let watch = Watch::start(ctx);
    let size = o.disk_mib;
    let disk_mb = (2 * size).max(2048);
    let host_dir = ctx.work.join("host-disk");
    std::fs::create_dir_all(&host_dir)?;
    let host_fs = fs_type(&host_dir);
    eprintln!(
        "[disk] {} × write + read of {size} MiB with dd: in /workspace of a sandbox (memory_mb {MEMORY_MB}, disk_mb {disk_mb}) and on the host in {} ({host_fs})",
        o.disk_reps,
        host_dir.display()
    );
    let mut c = ctx.conn();
    let id = server::create_with(
        &mut c,
        &json!({"idle_timeout": 3600, "limits": {"memory_mb": MEMORY_MB, "disk_mb": disk_mb}}),
    )?;
    ctx.note_instance(&id);
    let out = (|| {
        let fs = server::execute_bash(&mut c, &id, "stat -f -c %T /workspace", 30.0)?;
        let sandbox_fs = fs["stdout"].as_str().unwrap_or("?").trim().to_owned();
        let mut caches_dropped = !o.no_drop_caches;
        let mut sandbox = Vec::new();
        let mut host = Vec::new();
        let mut peak = 0;
        for rep in 0..o.disk_reps {
            let sandbox_first = rep % 2 == 0;
            for side in 0..2 {
                if (side == 0) == sandbox_first {
                    let (run, p) = sandbox_rep(&mut c, &id, size, &mut caches_dropped)?;
                    peak = peak.max(p);
                    eprintln!("[disk] sandbox: {}", describe(&run));
                    sandbox.push(run);
                } else {
                    let run = host_rep(&host_dir, size, &mut caches_dropped)?;
                    eprintln!("[disk] host:    {}", describe(&run));
                    host.push(run);
                }
            }
        }
        Ok::<_, anyhow::Error>((sandbox_fs, caches_dropped, sandbox, host, peak))
    })();
    let _ = std::fs::remove_dir_all(&host_dir);
    let deleted = server::delete(&mut c, &id);
    let (sandbox_fs, caches_dropped, sandbox, host, peak) = out?;
    deleted?;
    let med =
        |runs: &[DiskRun], f: fn(&DiskRun) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
    let cold = |runs: &[DiskRun]| {
        let v: Vec<f64> = runs.iter().filter_map(|r| r.read_cold).collect();
        (caches_dropped && v.len() == runs.len()).then(|| median(&v))
    };
    let (sandbox_read_cold, host_read_cold) = (cold(&sandbox), cold(&host));
    let (sandbox_write, host_write) = (med(&sandbox, |r| r.write), med(&host, |r| r.write));
    let (sandbox_read, host_read) = (med(&sandbox, |r| r.read), med(&host, |r| r.read));
    let (read_ratio, read_ratio_cold) = match (sandbox_read_cold, host_read_cold) {
        (Some(s), Some(h)) => (s / h, true),
        _ => (sandbox_read / host_read, false),
    };
    let r = DiskResult {
        conditions: watch.finish(ctx),
        size_mib: size,
        reps: sandbox.len(),
        memory_mb: MEMORY_MB,
        disk_mb,
        workspaces: ctx.server.workspaces(),
        sandbox_fs,
        host_fs,
        caches_dropped,
        write_ratio: sandbox_write / host_write,
        read_ratio,
        read_ratio_cold,
        sandbox_write,
        sandbox_read,
        sandbox_read_cold,
        host_write,
        host_read,
        host_read_cold,
        sandbox,
        host,
        sandbox_peak_memory: peak,
    };
    eprintln!(
        "[disk] medians: write {:.0} vs {:.0} MiB/s ({:.0}%), read {:.0}% of the host's",
        r.sandbox_write,
        r.host_write,
        100.0 * r.write_ratio,
        100.0 * r.read_ratio
    );
    Ok(r)
}

fn describe(r: &DiskRun) -> String {
    format!(
        "write {:.0} MiB/s, read {:.0} MiB/s{}",
        r.write,
        r.read,
        r.read_cold
            .map(|c| format!(", read after dropping caches {c:.0} MiB/s"))
            .unwrap_or_default()
    )
}

fn dd_write(path: &str, size_mib: u64) -> String {
    format!("LC_ALL=C dd if=/dev/zero of={path} bs=1M count={size_mib} conv=fsync 2>&1")
}

fn dd_read(path: &str) -> String {
    format!("LC_ALL=C dd if={path} of=/dev/null bs=1M 2>&1")
}

/// One write + reads in the sandbox; also the sandbox's peak memory after the write.
fn sandbox_rep(
    c: &mut crate::http::Conn,
    id: &str,
    size_mib: u64,
    drop: &mut bool,
) -> anyhow::Result<(DiskRun, u64)> {
    const FILE: &str = "/workspace/big";
    let w = server::execute_bash(c, id, &dd_write(FILE, size_mib), DD_TIMEOUT_S)
        .context("writing in the sandbox")?;
    let peak = w["peak_memory_bytes"].as_u64().unwrap_or(0);
    let write = dd_rate(w["stdout"].as_str().unwrap_or(""), size_mib)?;
    let r = server::execute_bash(c, id, &dd_read(FILE), DD_TIMEOUT_S)
        .context("reading in the sandbox")?;
    let read = dd_rate(r["stdout"].as_str().unwrap_or(""), size_mib)?;
    let read_cold = if *drop && drop_caches() {
        let r = server::execute_bash(c, id, &dd_read(FILE), DD_TIMEOUT_S)
            .context("reading in the sandbox after dropping caches")?;
        Some(dd_rate(r["stdout"].as_str().unwrap_or(""), size_mib)?)
    } else {
        *drop = false;
        None
    };
    server::execute_bash(c, id, &format!("rm -f {FILE}"), 60.0)?;
    Ok((
        DiskRun {
            write,
            read,
            read_cold,
        },
        peak,
    ))
}

/// The same on the host, outside any sandbox.
fn host_rep(dir: &Path, size_mib: u64, drop: &mut bool) -> anyhow::Result<DiskRun> {
    let file = dir.join("big");
    let file_s = file.to_str().context("the scratch path is not UTF-8")?;
    let write = dd_rate(&sh(&dd_write(file_s, size_mib))?, size_mib)?;
    let read = dd_rate(&sh(&dd_read(file_s))?, size_mib)?;
    let read_cold = if *drop && drop_caches() {
        Some(dd_rate(&sh(&dd_read(file_s))?, size_mib)?)
    } else {
        *drop = false;
        None
    };
    std::fs::remove_file(&file)?;
    Ok(DiskRun {
        write,
        read,
        read_cold,
    })
}

/// Runs a shell line on the host; its output (stdout, where `2>&1` sent `dd`'s report).
fn sh(line: &str) -> anyhow::Result<String> {
    let out = Command::new("sh")
        .args(["-c", line])
        .output()
        .with_context(|| format!("running `{line}`"))?;
    if !out.status.success() {
        bail!(
            "`{line}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stdout)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// MiB/s from `dd`'s last line (`N bytes (…) copied, S s, …`), checking all bytes went through.
fn dd_rate(report: &str, size_mib: u64) -> anyhow::Result<f64> {
    let line = report
        .lines()
        .rev()
        .find(|l| l.contains(" bytes") && l.contains("copied"))
        .with_context(|| format!("no dd report in {report:?}"))?;
    let bytes: u64 = line
        .split_whitespace()
        .next()
        .and_then(|b| b.parse().ok())
        .with_context(|| format!("no byte count in {line:?}"))?;
    let secs: f64 = line
        .split_once("copied,")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no duration in {line:?}"))?;
    if bytes != size_mib << 20 {
        bail!("dd moved {bytes} bytes, not {} ({line})", size_mib << 20);
    }
    if secs <= 0.0 {
        bail!("dd reported {secs} s ({line})");
    }
    Ok(bytes as f64 / (1u64 << 20) as f64 / secs)
}

/// Writes back dirty pages and drops the host's page cache (every cgroup's included);
/// false when this process may not (not root).
fn drop_caches() -> bool {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}

/// The filesystem type of `dir`, by its statfs magic number.
fn fs_type(dir: &Path) -> String {
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return "?".into();
    };
    // SAFETY: statfs is plain old data; zeroed is a valid value for it.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a NUL-terminated string and `st` a valid statfs to fill in.
    if unsafe { libc::statfs(path.as_ptr(), &mut st) } != 0 {
        return "?".into();
    }
    match st.f_type as u64 {
        0xEF53 => "ext4".into(),
        0x5846_5342 => "xfs".into(),
        0x9123_683E => "btrfs".into(),
        0x0102_1994 => "tmpfs".into(),
        0x794C_7630 => "overlayfs".into(),
        0x2FC1_2FC1 => "zfs".into(),
        other => format!("0x{other:x}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_dd_reports() {
        let out = "1024+0 records in\n1024+0 records out\n1073741824 bytes (1.1 GB, 1.0 GiB) copied, 2 s, 537 MB/s\n";
        assert_eq!(dd_rate(out, 1024).unwrap(), 512.0);
        assert!(dd_rate(out, 2048).is_err(), "a short copy is an error");
        assert!(dd_rate("dd: error writing: No space left on device\n", 1024).is_err());
    }

    #[test]
    fn knows_the_scratch_filesystem() {
        assert_ne!(fs_type(&std::env::temp_dir()), "?");
    }
}
