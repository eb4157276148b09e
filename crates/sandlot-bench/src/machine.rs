//! What the machine is, and how much memory is in use on it.

use serde::Serialize;
use std::path::Path;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub nproc: usize,
    pub mem_total_bytes: u64,
    pub kernel: String,
    pub cpu_model: String,
    pub os: String,
}

impl Machine {
    pub fn detect() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == "model name").then(|| v.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".into());
        let nproc = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_owned();
        let os = std::fs::read_to_string("/etc/os-release")
            .unwrap_or_default()
            .lines()
            .find_map(|l| {
                l.strip_prefix("PRETTY_NAME=")
                    .map(|v| v.trim_matches('"').to_owned())
            })
            .unwrap_or_else(|| "Linux".into());
        Machine {
            nproc,
            mem_total_bytes: meminfo().total,
            kernel,
            cpu_model,
            os,
        }
    }

    pub fn describe(&self) -> String {
        format!(
            "{} × {}, {:.1} GiB RAM, {}, kernel {}",
            self.nproc,
            self.cpu_model,
            self.mem_total_bytes as f64 / (1u64 << 30) as f64,
            self.os,
            self.kernel
        )
    }
}

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct MemInfo {
    pub total: u64,
    pub available: u64,
    /// Kernel-side memory that no memory cgroup of a sandbox is charged for in full.
    pub page_tables: u64,
    pub slab_unreclaimable: u64,
    pub kernel_stack: u64,
    pub shmem: u64,
}

impl MemInfo {
    /// Host memory in use: MemTotal − MemAvailable.
    pub fn used(&self) -> u64 {
        self.total.saturating_sub(self.available)
    }
}

pub fn meminfo() -> MemInfo {
    let s = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mut m = MemInfo::default();
    for l in s.lines() {
        let mut it = l.split_whitespace();
        let (Some(k), Some(v)) = (it.next(), it.next()) else {
            continue;
        };
        let kib: u64 = v.parse().unwrap_or(0);
        match k {
            "MemTotal:" => m.total = kib * 1024,
            "MemAvailable:" => m.available = kib * 1024,
            "PageTables:" => m.page_tables = kib * 1024,
            "SUnreclaim:" => m.slab_unreclaimable = kib * 1024,
            "KernelStack:" => m.kernel_stack = kib * 1024,
            "Shmem:" => m.shmem = kib * 1024,
            _ => {}
        }
    }
    m
}

/// Memory of a set of sandbox cgroups (cgroup v1 memory controller).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct GroupMemory {
    /// Groups read.
    pub groups: usize,
    /// Sum of `memory.usage_in_bytes`.
    pub usage: u64,
    /// Sums of `rss` and `cache` from `memory.stat`.
    pub rss: u64,
    pub cache: u64,
    /// Processes in the groups, and the sum of their proportional set sizes (shared pages
    /// divided among the processes that map them, the zygote included).
    pub procs: usize,
    pub pss: u64,
}

/// Reads the memory of every group `instance/<id>`, giving up on PSS after `limit`.
pub fn group_memory(instance: &Path, ids: &[String], limit: Duration) -> GroupMemory {
    let t = Instant::now();
    let mut g = GroupMemory::default();
    for id in ids {
        let dir = instance.join(id);
        let Ok(usage) = std::fs::read_to_string(dir.join("memory.usage_in_bytes")) else {
            continue;
        };
        g.groups += 1;
        g.usage += usage.trim().parse::<u64>().unwrap_or(0);
        let stat = std::fs::read_to_string(dir.join("memory.stat")).unwrap_or_default();
        for l in stat.lines() {
            match l.split_once(' ') {
                Some(("rss", v)) => g.rss += v.parse::<u64>().unwrap_or(0),
                Some(("cache", v)) => g.cache += v.parse::<u64>().unwrap_or(0),
                _ => {}
            }
        }
        if t.elapsed() < limit {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.split_whitespace() {
                if let Some(p) = pss_of(pid) {
                    g.procs += 1;
                    g.pss += p;
                }
            }
        }
    }
    g
}

/// The 1, 5 and 15 minute load averages.
pub fn loadavg() -> String {
    let s = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    s.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// PSS of one process in bytes, from `/proc/<pid>/smaps_rollup`.
pub fn pss_of(pid: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    s.lines().find_map(|l| {
        let rest = l.strip_prefix("Pss:")?;
        rest.split_whitespace()
            .next()?
            .parse::<u64>()
            .ok()
            .map(|kib| kib * 1024)
    })
}

/// PSS of every process in a group (the zygote's, for instance).
pub fn group_pss(dir: &Path) -> (usize, u64) {
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    procs
        .split_whitespace()
        .filter_map(pss_of)
        .fold((0, 0), |(n, s), p| (n + 1, s + p))
}

/// RSS of one process in bytes (the server's, for instance).
pub fn rss_of(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| {
            l.strip_prefix("VmRSS:")?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
        .map(|kib| kib * 1024)
        .unwrap_or(0)
}

/// The short commit of the work tree, with `-dirty` when it has changes.
pub fn git_commit(repo: &Path) -> String {
    let run = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(args)
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    match run(&["rev-parse", "--short", "HEAD"]) {
        Some(c) if !c.is_empty() => {
            let dirty = run(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{c}-dirty")
            } else {
                c
            }
        }
        _ => "unknown".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_machine() {
        let m = Machine::detect();
        assert!(m.nproc >= 1);
        assert!(m.mem_total_bytes > 0);
        let mi = meminfo();
        assert!(mi.available > 0 && mi.used() < mi.total);
        assert!(rss_of(std::process::id()) > 0);
        assert!(pss_of("self").is_some());
    }
}
