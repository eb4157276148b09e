//! Pipes between the host and a process running detached inside a sandbox (the E2B layer's
//! commands): FIFOs the host makes in the sandbox's own `/tmp/.e2b-proc`, whose read ends
//! (stdout, stderr, and a status channel) and optional stdin write end the host opens before
//! the sandbox's process does; and signals to that process's group, sent from the host.
//!
//! The sandbox controls the directory and every name in it, so nothing here trusts a name
//! after the host has opened it. `/tmp` is a mount point on the sandbox's read-only, locked
//! base root (it cannot be swapped), reached through the driver's `/proc/<pid>/root` and
//! checked against the driver's pidfd afterwards (as the workspace is). Below it every lookup
//! is `openat2` with `RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
//! RESOLVE_NO_XDEV`; each FIFO is made fresh by the host (as the sandbox's uid), opened
//! non-blocking, and must then `fstat` as a FIFO owned by the sandbox's uid (a symlink, a
//! regular file, a device swapped in between is refused). From then on the host holds its
//! own descriptors: renaming, replacing or deleting the names, or the directory, only
//! misdirects the sandbox's own output. Reads are non-blocking and bounded by the caller's
//! buffer; a FIFO never blocks the host.
//!
//! Signals go through pidfds to processes listed in the sandbox's cgroup whose process group
//! is the command's, never to a bare pid number, so a pid reused on the host is never hit, and
//! never to the sandbox's init or driver.

use crate::error::{FileError, RuntimeError};
use crate::files::{as_sandbox, fstat, map_errno, openat2};
use crate::sandbox::{pidfd_open, pidfd_signal, Live};
use crate::task::blocking;
use crate::Runtime;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use tokio::net::unix::pipe;

/// The directory, under the sandbox's `/tmp`, holding the FIFOs of its commands.
pub const PROC_DIR: &str = ".e2b-proc";

/// The host's ends of one command's pipes (see the module doc).
pub struct CommandPipes {
    pub stdout: pipe::Receiver,
    pub stderr: pipe::Receiver,
    /// What the command's wrapper reports: its pid, then its exit status; end of file when it
    /// has exited.
    pub status: pipe::Receiver,
    /// The command's stdin, when asked for (opened read-write, so the command's open of it
    /// never waits and it sees end of file only when this is dropped).
    pub stdin: Option<pipe::Sender>,
    /// Paths inside the sandbox, for the launch cell.
    pub paths: CommandPaths,
    pub control: CommandControl,
}

/// What the host does to a command besides reading and writing its pipes.
pub struct CommandControl {
    /// Write ends the host holds until the command has opened its own, so that a command that
    /// never starts reads as ended (end of file) rather than as never started.
    keepers: std::sync::Mutex<Vec<OwnedFd>>,
    dir: Arc<OwnedFd>,
    names: Vec<String>,
    live: Arc<Live>,
}

/// Where the command's redirections point, as paths inside the sandbox.
#[derive(Debug, Clone)]
pub struct CommandPaths {
    pub stdout: String,
    pub stderr: String,
    pub status: String,
    pub stdin: Option<String>,
}

impl CommandControl {
    /// Drops the host's keeper write ends: call once the launch has run (whatever its result).
    pub fn launched(&self) {
        crate::util::lock(&self.keepers).clear();
    }

    /// Whether the processes the pipes were made in have ended (a restart in place, a kill).
    pub fn processes_gone(&self) -> bool {
        self.live.is_dead() || !self.live.driver_alive()
    }

    /// Sends `sig` to every process of the sandbox in the process group led by the process
    /// whose pid inside the sandbox is `leader`. Returns how many were signalled.
    pub async fn signal_group(&self, leader: i32, sig: i32) -> usize {
        let live = self.live.clone();
        blocking("signalling a command", move || {
            signal_group(&live, leader, sig)
        })
        .await
        .unwrap_or(0)
    }

    /// Removes the names of the FIFOs (the host's descriptors stay valid). Best effort: the
    /// sandbox may have removed or replaced them already; `unlinkat` acts on the name itself.
    pub async fn remove_names(&self) {
        let dir = self.dir.clone();
        let names = self.names.clone();
        let _ = blocking("removing a command's pipes", move || {
            for n in names {
                if let Ok(c) = CString::new(n) {
                    // SAFETY: unlinkat on a directory fd we own with a valid C string.
                    unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) };
                }
            }
        })
        .await;
    }
}

impl Runtime {
    /// Makes the pipes of a command named `name` (letters, digits, `-`) in sandbox `id`'s
    /// `/tmp/.e2b-proc` (see the module doc). The sandbox must be running.
    pub async fn command_pipes(
        &self,
        id: &str,
        name: &str,
        stdin: bool,
    ) -> Result<CommandPipes, RuntimeError> {
        if name.is_empty()
            || name.len() > 64
            || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(FileError::Os {
                path: name.to_owned(),
                errno: nix::Error::EINVAL,
            }
            .into());
        }
        let e = self.entry(id)?;
        self.touch(&e);
        let live = e.live().ok_or(FileError::ProcessesGone)?;
        if live.is_dead() {
            return Err(FileError::ProcessesGone.into());
        }
        let name = name.to_owned();
        let made = blocking("making a command's pipes", move || make(live, &name, stdin)).await?;
        let made = made?;
        let to_err = FileError::Write;
        let [stdout, stderr, status] = made.reads;
        let stdout = pipe::Receiver::from_owned_fd(stdout).map_err(to_err)?;
        let stderr = pipe::Receiver::from_owned_fd(stderr).map_err(to_err)?;
        let status = pipe::Receiver::from_owned_fd(status).map_err(to_err)?;
        let stdin = match made.stdin {
            Some(fd) => Some(pipe::Sender::from_owned_fd(fd).map_err(to_err)?),
            None => None,
        };
        Ok(CommandPipes {
            stdout,
            stderr,
            status,
            stdin,
            paths: made.paths,
            control: CommandControl {
                keepers: std::sync::Mutex::new(made.keepers),
                dir: Arc::new(made.dir),
                names: made.names,
                live: made.live,
            },
        })
    }
}

struct Made {
    reads: [OwnedFd; 3],
    keepers: Vec<OwnedFd>,
    stdin: Option<OwnedFd>,
    dir: OwnedFd,
    names: Vec<String>,
    live: Arc<Live>,
    paths: CommandPaths,
}

fn cstr(s: &str) -> Result<CString, FileError> {
    CString::new(s).map_err(|_| FileError::PathHasNul)
}

/// The sandbox's `/tmp` as an `O_PATH` directory fd, checked against the driver's pidfd.
fn tmp_dir(live: &Live) -> Result<OwnedFd, FileError> {
    let root = cstr(&format!("/proc/{}/root", live.driver_pid))?;
    // SAFETY: opening a path we built; O_PATH gives no access by itself.
    let fd = unsafe {
        libc::open(
            root.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(FileError::ProcessesGone);
    }
    // SAFETY: a fresh fd we own.
    let root = unsafe { OwnedFd::from_raw_fd(fd) };
    let tmp = cstr("tmp")?;
    // SAFETY: openat relative to an fd we own, a static name, not following a symlink. `tmp`
    // is a mount point on the read-only, locked base root, so it is crossed into on purpose.
    let fd = unsafe {
        libc::openat(
            root.as_raw_fd(),
            tmp.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(map_errno(nix::Error::last(), "/tmp"));
    }
    // SAFETY: a fresh fd we own.
    let tmp = unsafe { OwnedFd::from_raw_fd(fd) };
    // The pid could have been reused between the open and now; a live pidfd says it was not.
    if !live.driver_alive() {
        return Err(FileError::ProcessesGone);
    }
    Ok(tmp)
}

/// `/tmp/.e2b-proc`, made if missing; whatever else the sandbox left at that name (a symlink,
/// a file, a FIFO) is removed first. Must be a directory owned by the sandbox's uid.
fn proc_dir(tmp: &OwnedFd, uid: u32) -> Result<OwnedFd, FileError> {
    let name = cstr(PROC_DIR)?;
    for attempt in 0..2 {
        // SAFETY: mkdirat relative to an fd we own with a valid C string; as the sandbox's uid.
        as_sandbox(uid, || unsafe {
            libc::mkdirat(tmp.as_raw_fd(), name.as_ptr(), 0o700)
        });
        match openat2(
            tmp.as_raw_fd(),
            PROC_DIR,
            libc::O_PATH | libc::O_DIRECTORY,
            0,
        ) {
            Ok(dir) => {
                let st = fstat(dir.as_raw_fd()).map_err(|e| map_errno(e, PROC_DIR))?;
                if st.st_uid != uid || st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                    return Err(FileError::Os {
                        path: format!("/tmp/{PROC_DIR}"),
                        errno: nix::Error::EPERM,
                    });
                }
                return Ok(dir);
            }
            Err(e) if attempt == 0 && e != nix::Error::ENOENT => {
                // As the sandbox's uid, like every change the host makes in its `/tmp`: root's
                // CAP_FOWNER would otherwise override the sticky bit there.
                // SAFETY: unlinkat of a name (not followed) in a directory fd we own.
                as_sandbox(uid, || unsafe {
                    libc::unlinkat(tmp.as_raw_fd(), name.as_ptr(), 0)
                });
            }
            Err(e) => return Err(map_errno(e, PROC_DIR)),
        }
    }
    Err(FileError::Os {
        path: format!("/tmp/{PROC_DIR}"),
        errno: nix::Error::EAGAIN,
    })
}

/// Makes a fresh FIFO `name` in `dir` (as the sandbox's uid) and opens it with `flags`
/// (non-blocking); refuses anything but a FIFO owned by `uid`.
fn fresh_fifo(dir: RawFd, name: &str, uid: u32, flags: i32) -> Result<OwnedFd, FileError> {
    let c = cstr(name)?;
    // SAFETY: unlinkat/mknodat relative to a directory fd we own, valid C strings; whatever
    // the sandbox left at the name is removed (not followed).
    let made = as_sandbox(uid, || unsafe {
        libc::unlinkat(dir, c.as_ptr(), 0);
        libc::mknodat(dir, c.as_ptr(), libc::S_IFIFO | 0o600, 0)
    });
    if made != 0 {
        return Err(map_errno(nix::Error::last(), name));
    }
    let fd = openat2(dir, name, flags | libc::O_NONBLOCK | libc::O_NOCTTY, 0)
        .map_err(|e| map_errno(e, name))?;
    check_fifo(&fd, uid, name)?;
    Ok(fd)
}

fn check_fifo(fd: &OwnedFd, uid: u32, name: &str) -> Result<libc::stat, FileError> {
    let st = fstat(fd.as_raw_fd()).map_err(|e| map_errno(e, name))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFIFO || st.st_uid != uid {
        return Err(FileError::Os {
            path: name.to_owned(),
            errno: nix::Error::EPERM,
        });
    }
    Ok(st)
}

/// Opens `name` again for writing and checks it is the same FIFO as `read` (the sandbox may
/// have swapped the name in between).
fn keeper(dir: RawFd, name: &str, uid: u32, read: &OwnedFd) -> Result<OwnedFd, FileError> {
    let w = openat2(
        dir,
        name,
        libc::O_WRONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
        0,
    )
    .map_err(|e| map_errno(e, name))?;
    let a = check_fifo(&w, uid, name)?;
    let b = fstat(read.as_raw_fd()).map_err(|e| map_errno(e, name))?;
    if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino) {
        return Err(FileError::Os {
            path: name.to_owned(),
            errno: nix::Error::EAGAIN,
        });
    }
    Ok(w)
}

fn make(live: Arc<Live>, name: &str, stdin: bool) -> Result<Made, FileError> {
    let uid = live.host_uid;
    let tmp = tmp_dir(&live)?;
    let dir = proc_dir(&tmp, uid)?;
    let d = dir.as_raw_fd();
    let mut names = Vec::new();
    let mut reads = Vec::new();
    let mut keepers = Vec::new();
    for suffix in ["out", "err", "st"] {
        let n = format!("{name}.{suffix}");
        let r = fresh_fifo(d, &n, uid, libc::O_RDONLY)?;
        keepers.push(keeper(d, &n, uid, &r)?);
        reads.push(r);
        names.push(n);
    }
    let stdin = if stdin {
        let n = format!("{name}.in");
        let fd = fresh_fifo(d, &n, uid, libc::O_RDWR)?;
        names.push(n);
        Some(fd)
    } else {
        None
    };
    if !live.driver_alive() {
        return Err(FileError::ProcessesGone);
    }
    let at = |s: &str| format!("/tmp/{PROC_DIR}/{name}.{s}");
    let paths = CommandPaths {
        stdout: at("out"),
        stderr: at("err"),
        status: at("st"),
        stdin: stdin.is_some().then(|| at("in")),
    };
    let Ok(reads) = <[OwnedFd; 3]>::try_from(reads) else {
        return Err(FileError::ProcessesGone);
    };
    Ok(Made {
        reads,
        keepers,
        stdin,
        dir,
        names,
        live,
        paths,
    })
}

/// A field of `/proc/<pid>/stat` after the command name (which may hold spaces and `)`):
/// index 2 is the process group.
fn stat_field(pid: i32, index: usize) -> Option<i32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    rest.split_whitespace().nth(index)?.parse().ok()
}

/// The innermost pid of host pid `pid` (its pid inside the sandbox's namespace).
fn ns_pid(pid: i32) -> Option<i32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("NSpid:"))?;
    line.split_whitespace().last()?.parse().ok()
}

fn signal_group(live: &Live, leader: i32, sig: i32) -> usize {
    if leader <= 1 || live.is_dead() {
        return 0;
    }
    let spared = [live.init_pid, live.driver_pid];
    let pids = live.cgroup.pids();
    // The leader's host pid: the cgroup's process whose pid in the sandbox is `leader`. A
    // process group id stays taken while any member lives, so the host number names the
    // command's group for as long as there is something in it to signal.
    let Some(host_leader) = pids
        .iter()
        .copied()
        .find(|&p| !spared.contains(&p) && ns_pid(p) == Some(leader))
    else {
        return 0;
    };
    if stat_field(host_leader, 2) != Some(host_leader) {
        // Not a group leader: the command's wrapper always is, so this is not it.
        return 0;
    }
    let mut sent = 0;
    // A few passes: members may fork while they are being signalled.
    for _ in 0..3 {
        let mut this_pass = 0;
        for p in live.cgroup.pids() {
            if spared.contains(&p) || stat_field(p, 2) != Some(host_leader) {
                continue;
            }
            let Ok(fd) = pidfd_open(p) else { continue };
            // Checked again through the pidfd's process: alive now, so `/proc/<p>` is it.
            if stat_field(p, 2) == Some(host_leader)
                && pidfd_signal(&fd, 0)
                && pidfd_signal(&fd, sig)
            {
                this_pass += 1;
            }
        }
        sent += this_pass;
        if this_pass == 0 || sig != libc::SIGKILL {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    sent
}
