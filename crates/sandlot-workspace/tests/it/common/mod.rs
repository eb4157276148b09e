//! Test fixture: a temporary data dir with small real images, torn down (mounts unmounted, so
//! the autoclear loop devices detach) even when the test fails; a time bound for each test; and
//! a forked writer that fills a workspace as its owner and reports the errno it got.

#![allow(dead_code)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use sandlot_workspace::{BackendChoice, ImageConfig, Reserve, WorkspaceConfig, Workspaces};

pub const MIB: u64 = 1 << 20;
pub const OWNER: u32 = 60_001;
pub const OTHER: u32 = 60_002;

/// A temp dir holding one workspace store.
pub struct Fixture {
    pub tmp: tempfile::TempDir,
    pub cfg: WorkspaceConfig,
    /// Last: released after the store is torn down and its files are gone.
    _serial: Serial,
}

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

thread_local! {
    static SERIAL_DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// One fixture's stores at a time in the test binary, whichever suite (file) it belongs to: all
/// of them share the one process and this lock (a thread that opens a second one, as the
/// benches do, already holds it). Two stores side by side made the Btrfs cleaner and the
/// image shrink race each other's I/O: `deleted_data_returns_to_the_host` waited 30 s for a
/// dropped subvolume in one run of three under `--test-threads 2`, never alone.
struct Serial(Option<std::sync::MutexGuard<'static, ()>>);

impl Serial {
    fn take() -> Serial {
        let depth = SERIAL_DEPTH.with(|d| d.replace(d.get() + 1));
        if depth > 0 {
            return Serial(None);
        }
        Serial(Some(SERIAL.lock().unwrap_or_else(|e| e.into_inner())))
    }
}

impl Drop for Serial {
    fn drop(&mut self) {
        SERIAL_DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

impl Fixture {
    pub fn new(backend: BackendChoice) -> Fixture {
        let serial = Serial::take();
        let tmp = tempfile::Builder::new()
            .prefix("sandlot-ws-test-")
            .tempdir()
            .expect("tempdir");
        let mut cfg = WorkspaceConfig::new(tmp.path().join("disk"));
        cfg.backend = backend;
        cfg.image = ImageConfig {
            initial_bytes: 512 * MIB,
            max_bytes: Some(512 * MIB),
            grow_step_bytes: 128 * MIB,
            headroom_bytes: 64 * MIB,
            sparse: false,
        };
        cfg.host_reserve = Reserve {
            bytes: 256 * MIB,
            percent: 0,
        };
        cfg.maintenance_interval = None;
        cfg.fs_reserve = Reserve {
            bytes: 16 * MIB,
            percent: 0,
        };
        Fixture {
            tmp,
            cfg,
            _serial: serial,
        }
    }

    pub fn open(&self) -> Workspaces {
        Workspaces::open(self.cfg.clone()).expect("open workspaces")
    }

    pub fn dir(&self) -> &Path {
        &self.cfg.dir
    }

    /// Unmounts through the API and checks that no mount and no loop device is left.
    pub fn finish(&self, ws: Workspaces) {
        ws.unmount().expect("unmount");
        assert_eq!(
            mounts_under(&self.cfg.dir),
            Vec::<PathBuf>::new(),
            "mounts left"
        );
        wait_until(Duration::from_secs(5), || {
            loops_backed_under(self.tmp.path()).is_empty()
        });
        assert_eq!(
            loops_backed_under(self.tmp.path()),
            Vec::<String>::new(),
            "loop devices left"
        );
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // A failed test may have left mounts: detach them deepest first; the loop devices
        // (autoclear) go with them.
        let mut mps = mounts_under(self.tmp.path());
        mps.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
        for mp in mps {
            let _ = nix::mount::umount2(&mp, nix::mount::MntFlags::MNT_DETACH);
        }
        wait_until(Duration::from_secs(5), || {
            loops_backed_under(self.tmp.path()).is_empty()
        });
    }
}

/// Mount points at or below `dir`, from /proc/self/mountinfo.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(p.replace("\\040", " ")))
        .filter(|p| p.starts_with(dir))
        .collect()
}

/// Mount options of the mount at `mp` (per-mount and superblock), if mounted.
pub fn mount_options(mp: &Path) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    text.lines().rev().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let fields: Vec<&str> = left.split(' ').collect();
        (Path::new(fields[4]) == mp)
            .then(|| format!("{} {}", fields[5], right.split(' ').nth(2).unwrap_or("")))
    })
}

/// Loop devices whose backing file lies under `dir` (from sysfs).
pub fn loops_backed_under(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/sys/block").unwrap().flatten() {
        let backing = entry.path().join("loop/backing_file");
        if let Ok(file) = std::fs::read_to_string(&backing) {
            if Path::new(file.trim().trim_end_matches(" (deleted)")).starts_with(dir) {
                found.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
    }
    found
}

pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// Runs `f` on its own thread and fails the test if it takes longer than `limit`.
pub fn bounded<F: FnOnce() + Send + 'static>(limit: Duration, f: F) {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    match rx.recv_timeout(limit) {
        Ok(()) => handle.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            // The body panicked: re-raise its panic here.
            if let Err(p) = handle.join() {
                std::panic::resume_unwind(p);
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("test exceeded its time bound of {limit:?}"),
    }
}

/// What the forked writer saw.
#[derive(Debug)]
pub struct FillResult {
    pub errno: i32,
    pub written: u64,
}

/// Forks a child that becomes `uid:gid` (no supplementary groups), writes 1 MiB blocks to
/// `file` until a write fails (or `max` bytes), and reports the errno and the bytes written.
/// The child reaches the file through a directory fd opened before the fork, as a sandbox
/// reaches its workspace through its own mount: the host path is root-only by design.
pub fn fill_as(uid: u32, gid: u32, file: &Path, max: u64) -> FillResult {
    let dir = std::fs::File::open(file.parent().unwrap()).unwrap();
    let dirfd = std::os::fd::AsRawFd::as_raw_fd(&dir);
    let path = CString::new(file.file_name().unwrap().as_bytes()).unwrap();
    let buf = vec![0xabu8; MIB as usize];
    let mut fds = [0i32; 2];
    // SAFETY: pipe(2) into a two-int array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child only makes async-signal-safe calls (setgroups, setres*id, open, write,
    // _exit) on memory allocated before the fork.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        // SAFETY: raw syscalls on valid pointers; the child never returns into Rust code.
        unsafe {
            let report = |errno: i32, written: u64| {
                let mut msg = [0u8; 12];
                msg[..4].copy_from_slice(&errno.to_ne_bytes());
                msg[4..].copy_from_slice(&written.to_ne_bytes());
                libc::write(fds[1], msg.as_ptr().cast(), msg.len());
                libc::_exit(0);
            };
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setresgid(gid, gid, gid) != 0
                || libc::setresuid(uid, uid, uid) != 0
            {
                report(-1, 0);
            }
            let fd = libc::openat(
                dirfd,
                path.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
                0o644,
            );
            if fd < 0 {
                report(-2, 0);
            }
            let mut written = 0u64;
            while written < max {
                let n = libc::write(fd, buf.as_ptr().cast(), buf.len());
                if n < 0 {
                    report(*libc::__errno_location(), written);
                }
                written += n as u64;
            }
            // Errors can also surface at writeback.
            if libc::fsync(fd) != 0 {
                report(*libc::__errno_location(), written);
            }
            report(0, written);
        }
    }
    // SAFETY: closing our copy of the write end.
    unsafe { libc::close(fds[1]) };
    let mut msg = [0u8; 12];
    // SAFETY: reading into a buffer we own.
    let n = unsafe { libc::read(fds[0], msg.as_mut_ptr().cast(), msg.len()) };
    // SAFETY: reaping our child; closing our read end.
    unsafe {
        libc::waitpid(pid, std::ptr::null_mut(), 0);
        libc::close(fds[0]);
    }
    assert_eq!(n, 12, "the writer child reported nothing");
    FillResult {
        errno: i32::from_ne_bytes(msg[..4].try_into().unwrap()),
        written: u64::from_ne_bytes(msg[4..].try_into().unwrap()),
    }
}

/// Runs `program args` as `uid:gid` with `dir` as its working directory (entered through an
/// inherited fd, since the host path is root-only) and returns whether it succeeded.
pub fn run_in(dir: &Path, uid: u32, gid: u32, program: &str, args: &[&str]) -> bool {
    use std::os::unix::process::CommandExt;
    let dir = std::fs::File::open(dir).unwrap();
    let raw = std::os::fd::AsRawFd::as_raw_fd(&dir);
    let mut cmd = std::process::Command::new(program);
    cmd.args(args);
    // SAFETY: fchdir(2) and setres*id(2) only, between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fchdir(raw) != 0
                || libc::setgroups(0, std::ptr::null()) != 0
                || libc::setresgid(gid, gid, gid) != 0
                || libc::setresuid(uid, uid, uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let ok = cmd.status().map(|s| s.success()).unwrap_or(false);
    // `dir` closes here: an fd left open would keep the filesystem (and its loop device) alive.
    drop(dir);
    ok
}

/// syncfs on the filesystem holding `path`.
pub fn syncfs(path: &Path) {
    let f = std::fs::File::open(path).unwrap();
    // SAFETY: syncfs(2) on an fd we own.
    unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&f)) };
}

/// Asserts a write of a few MiB to `dir` works (as root), to show a filesystem is unharmed.
pub fn assert_writable(dir: &Path) {
    let file = dir.join("probe");
    std::fs::write(&file, vec![1u8; 4 * MIB as usize]).expect("write to a healthy workspace");
    std::fs::remove_file(&file).unwrap();
}
