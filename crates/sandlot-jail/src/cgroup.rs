//! Cgroups of sandboxes and zygotes: memory, pids and CPU limits, accounting (CPU time, peak
//! memory, OOM kills) and a guaranteed kill. Supports cgroup v1 (one hierarchy per controller,
//! as on the machines this is built on) and v2. sandlot never writes the root of a hierarchy:
//! everything lives under a configurable parent, and the hierarchy's mount point is a path so
//! tests can point it at a temp dir.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("no usable cgroup hierarchy: need memory, pids, cpu and freezer (v1) or a v2 mount with those controllers")]
    Unavailable,
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("cgroup {path} still has processes after kill")]
    NotEmpty { path: PathBuf },
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> CgroupError + 'a {
    move |source| CgroupError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Which cgroup version is in use and where.
#[derive(Debug, Clone)]
pub enum Hierarchy {
    /// v1: the mount point of each controller we use.
    V1 {
        memory: PathBuf,
        pids: PathBuf,
        cpu: PathBuf,
        cpuacct: PathBuf,
        freezer: PathBuf,
    },
    /// v2: the unified mount point.
    V2 { root: PathBuf },
}

impl Hierarchy {
    /// Detects the hierarchy under `mount_root` (normally `/sys/fs/cgroup`). Prefers v2 when it
    /// has the controllers we need enabled at the root.
    pub fn detect(mount_root: &Path) -> Result<Hierarchy, CgroupError> {
        let controllers =
            fs::read_to_string(mount_root.join("cgroup.controllers")).unwrap_or_default();
        let has = |c: &str| controllers.split_whitespace().any(|x| x == c);
        if has("memory") && has("pids") && has("cpu") {
            return Ok(Hierarchy::V2 {
                root: mount_root.to_path_buf(),
            });
        }
        let v1 = |c: &str| {
            let p = mount_root.join(c);
            p.join("cgroup.procs").exists().then_some(p)
        };
        match (
            v1("memory"),
            v1("pids"),
            v1("cpu"),
            v1("cpuacct"),
            v1("freezer"),
        ) {
            (Some(memory), Some(pids), Some(cpu), Some(cpuacct), Some(freezer)) => {
                Ok(Hierarchy::V1 {
                    memory,
                    pids,
                    cpu,
                    cpuacct,
                    freezer,
                })
            }
            _ => Err(CgroupError::Unavailable),
        }
    }

    pub fn version(&self) -> u8 {
        match self {
            Hierarchy::V1 { .. } => 1,
            Hierarchy::V2 { .. } => 2,
        }
    }

    fn dirs(&self, rel: &Path) -> Vec<PathBuf> {
        match self {
            Hierarchy::V1 {
                memory,
                pids,
                cpu,
                cpuacct,
                freezer,
            } => [memory, pids, cpu, cpuacct, freezer]
                .iter()
                .map(|m| m.join(rel))
                .collect(),
            Hierarchy::V2 { root } => vec![root.join(rel)],
        }
    }

    /// Lists the child groups of `rel` (used to find what a previous server run left).
    pub fn children(&self, rel: &Path) -> Vec<String> {
        let base = &self.dirs(rel)[0];
        let Ok(rd) = fs::read_dir(base) else {
            return vec![];
        };
        rd.filter_map(|e| e.ok())
            .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect()
    }
}

/// Limits of one cgroup.
#[derive(Debug, Clone, Copy)]
pub struct CgroupLimits {
    pub memory_bytes: u64,
    pub pids: u64,
    /// Thousandths of a core; 0 = unlimited.
    pub cpu_millis: u64,
}

/// One sandbox's (or zygote's) cgroup, the same relative path in every controller.
#[derive(Debug, Clone)]
pub struct Cgroup {
    hierarchy: Hierarchy,
    rel: PathBuf,
}

impl Cgroup {
    /// Creates the group (and its parents) and applies `limits`.
    pub fn create(
        hierarchy: &Hierarchy,
        rel: &Path,
        limits: &CgroupLimits,
    ) -> Result<Cgroup, CgroupError> {
        let cg = Cgroup {
            hierarchy: hierarchy.clone(),
            rel: rel.to_path_buf(),
        };
        if let Hierarchy::V2 { root } = hierarchy {
            enable_v2_controllers(root, rel)?;
        }
        for d in hierarchy.dirs(rel) {
            fs::create_dir_all(&d).map_err(io_err("mkdir", &d))?;
        }
        cg.apply(limits)?;
        Ok(cg)
    }

    /// Opens an existing group (for cleanup) without touching it.
    pub fn open(hierarchy: &Hierarchy, rel: &Path) -> Cgroup {
        Cgroup {
            hierarchy: hierarchy.clone(),
            rel: rel.to_path_buf(),
        }
    }

    pub fn rel(&self) -> &Path {
        &self.rel
    }

    fn write(&self, dir: &Path, file: &str, value: &str) -> Result<(), CgroupError> {
        let p = dir.join(file);
        fs::write(&p, value).map_err(io_err("write", &p))
    }

    fn apply(&self, l: &CgroupLimits) -> Result<(), CgroupError> {
        match &self.hierarchy {
            Hierarchy::V1 {
                memory, pids, cpu, ..
            } => {
                let m = memory.join(&self.rel);
                self.write(&m, "memory.limit_in_bytes", &l.memory_bytes.to_string())?;
                // Where swap is accounted, swap counts against the same limit.
                if m.join("memory.memsw.limit_in_bytes").exists() {
                    let _ = self.write(
                        &m,
                        "memory.memsw.limit_in_bytes",
                        &l.memory_bytes.to_string(),
                    );
                }
                self.write(&pids.join(&self.rel), "pids.max", &l.pids.to_string())?;
                let c = cpu.join(&self.rel);
                if l.cpu_millis > 0 {
                    self.write(&c, "cpu.cfs_period_us", "100000")?;
                    self.write(&c, "cpu.cfs_quota_us", &(l.cpu_millis * 100).to_string())?;
                }
            }
            Hierarchy::V2 { root } => {
                let d = root.join(&self.rel);
                self.write(&d, "memory.max", &l.memory_bytes.to_string())?;
                if d.join("memory.swap.max").exists() {
                    let _ = self.write(&d, "memory.swap.max", "0");
                }
                self.write(&d, "pids.max", &l.pids.to_string())?;
                if l.cpu_millis > 0 {
                    self.write(&d, "cpu.max", &format!("{} 100000", l.cpu_millis * 100))?;
                }
            }
        }
        Ok(())
    }

    /// Changes the limits of an existing group.
    pub fn set_limits(&self, limits: &CgroupLimits) -> Result<(), CgroupError> {
        self.apply(limits)
    }

    /// The files a process writes its pid into to join this group.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.hierarchy
            .dirs(&self.rel)
            .into_iter()
            .map(|d| d.join("cgroup.procs"))
            .collect()
    }

    /// Moves `pid` into the group.
    pub fn add(&self, pid: i32) -> Result<(), CgroupError> {
        for f in self.procs_files() {
            fs::write(&f, pid.to_string()).map_err(io_err("join", &f))?;
        }
        Ok(())
    }

    /// Pids currently in the group.
    pub fn pids(&self) -> Vec<i32> {
        let f = self.hierarchy.dirs(&self.rel)[0].join("cgroup.procs");
        fs::read_to_string(f)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// CPU time used by the group so far.
    pub fn cpu_time(&self) -> Duration {
        match &self.hierarchy {
            Hierarchy::V1 { cpuacct, .. } => {
                let ns = read_u64(&cpuacct.join(&self.rel).join("cpuacct.usage")).unwrap_or(0);
                Duration::from_nanos(ns)
            }
            Hierarchy::V2 { root } => {
                let stat =
                    fs::read_to_string(root.join(&self.rel).join("cpu.stat")).unwrap_or_default();
                let us = keyed(&stat, "usage_usec").unwrap_or(0);
                Duration::from_micros(us)
            }
        }
    }

    /// Peak memory use of the group, in bytes.
    pub fn peak_memory(&self) -> u64 {
        match &self.hierarchy {
            Hierarchy::V1 { memory, .. } => {
                read_u64(&memory.join(&self.rel).join("memory.max_usage_in_bytes")).unwrap_or(0)
            }
            Hierarchy::V2 { root } => {
                let d = root.join(&self.rel);
                read_u64(&d.join("memory.peak"))
                    .or_else(|| read_u64(&d.join("memory.current")))
                    .unwrap_or(0)
            }
        }
    }

    /// Current memory use of the group, in bytes.
    pub fn current_memory(&self) -> u64 {
        match &self.hierarchy {
            Hierarchy::V1 { memory, .. } => {
                read_u64(&memory.join(&self.rel).join("memory.usage_in_bytes")).unwrap_or(0)
            }
            Hierarchy::V2 { root } => {
                read_u64(&root.join(&self.rel).join("memory.current")).unwrap_or(0)
            }
        }
    }

    /// How many times the kernel's OOM killer killed a process of this group.
    pub fn oom_kills(&self) -> u64 {
        match &self.hierarchy {
            Hierarchy::V1 { memory, .. } => {
                let s = fs::read_to_string(memory.join(&self.rel).join("memory.oom_control"))
                    .unwrap_or_default();
                keyed(&s, "oom_kill").unwrap_or(0)
            }
            Hierarchy::V2 { root } => {
                let s = fs::read_to_string(root.join(&self.rel).join("memory.events"))
                    .unwrap_or_default();
                keyed(&s, "oom_kill").unwrap_or(0)
            }
        }
    }

    /// Kills every process in the group: freeze (so nothing forks away), SIGKILL all, thaw,
    /// then wait (bounded) until the group is empty.
    pub fn kill_all(&self, wait: Duration) -> Result<(), CgroupError> {
        match &self.hierarchy {
            Hierarchy::V2 { root } => {
                let d = root.join(&self.rel);
                if d.join("cgroup.kill").exists() {
                    let _ = self.write(&d, "cgroup.kill", "1");
                } else {
                    self.freeze_kill_thaw(&d.join("cgroup.freeze"), "1", "0");
                }
            }
            Hierarchy::V1 { freezer, .. } => {
                self.freeze_kill_thaw(
                    &freezer.join(&self.rel).join("freezer.state"),
                    "FROZEN",
                    "THAWED",
                );
            }
        }
        let deadline = Instant::now() + wait;
        loop {
            if self.pids().is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(CgroupError::NotEmpty {
                    path: self.rel.clone(),
                });
            }
            for pid in self.pids() {
                // SAFETY: kill has no memory effects.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn freeze_kill_thaw(&self, state: &Path, frozen: &str, thawed: &str) {
        let _ = fs::write(state, frozen);
        for pid in self.pids() {
            // SAFETY: kill has no memory effects.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let _ = fs::write(state, thawed);
    }

    /// Removes the group from every controller. Fails while processes remain.
    pub fn remove(&self) -> Result<(), CgroupError> {
        for d in self.hierarchy.dirs(&self.rel) {
            match fs::remove_dir(&d) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(CgroupError::Io {
                        op: "rmdir",
                        path: d,
                        source: e,
                    })
                }
            }
        }
        Ok(())
    }
}

fn enable_v2_controllers(root: &Path, rel: &Path) -> Result<(), CgroupError> {
    // Every ancestor of the leaf must delegate the controllers to its children.
    let mut dir = root.to_path_buf();
    for comp in rel
        .parent()
        .map(|p| p.components().collect::<Vec<_>>())
        .unwrap_or_default()
    {
        dir.push(comp);
        fs::create_dir_all(&dir).map_err(io_err("mkdir", &dir))?;
        let f = dir.join("cgroup.subtree_control");
        let _ = fs::write(&f, "+memory +pids +cpu");
    }
    Ok(())
}

fn read_u64(p: &Path) -> Option<u64> {
    fs::read_to_string(p).ok()?.trim().parse().ok()
}

fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next() == Some(key)).then(|| it.next()?.parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_v1() -> (tempfile::TempDir, Hierarchy) {
        let dir = tempfile::tempdir().unwrap();
        for c in ["memory", "pids", "cpu", "cpuacct", "freezer"] {
            fs::create_dir_all(dir.path().join(c)).unwrap();
            fs::write(dir.path().join(c).join("cgroup.procs"), "").unwrap();
        }
        let h = Hierarchy::detect(dir.path()).unwrap();
        (dir, h)
    }

    #[test]
    fn detects_v1_and_writes_limits() {
        let (dir, h) = fake_v1();
        assert_eq!(h.version(), 1);
        let limits = CgroupLimits {
            memory_bytes: 512 << 20,
            pids: 128,
            cpu_millis: 500,
        };
        let cg = Cgroup::create(&h, Path::new("sandlot/x/sb1"), &limits).unwrap();
        let read = |c: &str, f: &str| {
            fs::read_to_string(dir.path().join(c).join("sandlot/x/sb1").join(f)).unwrap()
        };
        assert_eq!(
            read("memory", "memory.limit_in_bytes"),
            (512u64 << 20).to_string()
        );
        assert_eq!(read("pids", "pids.max"), "128");
        assert_eq!(read("cpu", "cpu.cfs_quota_us"), "50000");
        assert_eq!(cg.procs_files().len(), 5);
        assert_eq!(h.children(Path::new("sandlot/x")), vec!["sb1".to_string()]);
    }

    #[test]
    fn parses_keyed_files() {
        assert_eq!(
            keyed("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", "oom_kill"),
            Some(3)
        );
        assert_eq!(
            keyed("usage_usec 1234\nuser_usec 1000", "usage_usec"),
            Some(1234)
        );
    }

    #[test]
    fn unavailable_without_controllers() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            Hierarchy::detect(dir.path()),
            Err(CgroupError::Unavailable)
        ));
    }
}
