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
//! A command may run on a pseudo-terminal instead of pipes (E2B's PTY sessions). The host
//! opens the master of a new terminal in the sandbox's own devpts instance (`/dev/pts`, mounted
//! by the jail with `newinstance`: the host's terminals and other sandboxes' are not in it),
//! as the sandbox's uid so the terminal is the sandbox user's; the sandbox's process opens the
//! terminal by its path (`/dev/pts/N`) and makes it its controlling terminal. The master is
//! checked to be a `ptmx` (character device 5:2) on a devpts that is not the host's, and then
//! only read, written and resized (`TIOCSWINSZ`) by the host; the status channel stays a FIFO.
//!
//! Signals go through pidfds to processes listed in the sandbox's cgroup whose process group
//! (or, for a terminal's command, session) is the command's, never to a bare pid number, so a
//! pid reused on the host is never hit, and never to the sandbox's init or driver.

use crate::error::{FileError, RuntimeError};
use crate::files::{as_sandbox, fstat, map_errno, openat2};
use crate::sandbox::{pidfd_open, pidfd_signal, Live};
use crate::task::blocking;
use crate::Runtime;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

/// The directory, under the sandbox's `/tmp`, holding the FIFOs of its commands.
pub const PROC_DIR: &str = ".e2b-proc";

/// How a command's standard streams are wired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandIo {
    /// Stdout and stderr FIFOs; a stdin FIFO the host writes when `stdin`, else `/dev/null`.
    Pipes { stdin: bool },
    /// All three on a new pseudo-terminal of this size.
    Pty { cols: u16, rows: u16 },
}

/// What the host reads a command's output from.
pub enum CommandOutput {
    Pipes {
        stdout: pipe::Receiver,
        stderr: pipe::Receiver,
    },
    /// The terminal's master: output to read, input to write, a size to set.
    Pty(Arc<PtyMaster>),
}

/// The host's ends of one command's pipes (see the module doc).
pub struct CommandPipes {
    pub output: CommandOutput,
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
    /// Whether signals go to the command's whole session rather than its process group: a
    /// terminal's interactive shell puts its jobs in process groups of their own.
    session: bool,
}

/// Where the command's redirections point, as paths inside the sandbox.
#[derive(Debug, Clone)]
pub struct CommandPaths {
    pub stdout: String,
    pub stderr: String,
    pub status: String,
    pub stdin: Option<String>,
    /// The command's terminal (`/dev/pts/N`) when it runs on one: its stdin, stdout and
    /// stderr, and its controlling terminal; `stdout`, `stderr` and `stdin` then name it too.
    pub tty: Option<String>,
}

/// The devpts filesystem's magic number (`linux/magic.h`).
const DEVPTS_SUPER_MAGIC: i64 = 0x1cd1;
/// `/dev/ptmx`'s device number: major 5, minor 2.
const PTMX_MAJOR: u32 = 5;
const PTMX_MINOR: u32 = 2;

/// The master of a command's pseudo-terminal, held by the host (non-blocking).
pub struct PtyMaster {
    fd: AsyncFd<OwnedFd>,
    /// N of the terminal's `/dev/pts/N` in the sandbox.
    pub number: u32,
}

impl PtyMaster {
    /// Reads what the terminal's programs wrote. `Ok(0)` once every descriptor of the terminal
    /// inside the sandbox is closed (the kernel answers `EIO` then).
    pub async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut ready = self.fd.readable().await?;
            let r = ready.try_io(|fd| nix::unistd::read(fd, buf).map_err(io::Error::from));
            match r {
                Ok(Ok(n)) => return Ok(n),
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Ok(0),
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }

    /// Writes all of `data` as the terminal's input, waiting for room (the caller bounds how
    /// long).
    pub async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let mut ready = self.fd.writable().await?;
            let r = ready.try_io(|fd| nix::unistd::write(fd, data).map_err(io::Error::from));
            match r {
                Ok(Ok(n)) => data = &data[n..],
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
        Ok(())
    }

    /// Sets the terminal's size (the kernel tells its foreground process group, `SIGWINCH`).
    pub fn resize(&self, cols: u16, rows: u16) -> io::Result<()> {
        set_size(self.fd.get_ref(), cols, rows)
    }
}

fn set_size(fd: &OwnedFd, cols: u16, rows: u16) -> io::Result<()> {
    let ws = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize from a valid pointer; the fd is a pty master we own.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &ws) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
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

    /// Sends `sig` to every process of the sandbox in the process group (for a terminal's
    /// command: the session) led by the process whose pid inside the sandbox is `leader`.
    /// Returns how many were signalled.
    pub async fn signal_group(&self, leader: i32, sig: i32) -> usize {
        let live = self.live.clone();
        let field = if self.session { SESSION } else { PGRP };
        blocking("signalling a command", move || {
            signal_group(&live, leader, sig, field)
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

/// A command launcher of a sandbox: a Bash loop the sandbox runs in a session of its own,
/// reading launch cells (NUL-terminated) from a FIFO whose only write end the host holds, and
/// running each in a subshell. Commands launched through it start at once, whatever the
/// sandbox's driver is running (a launch otherwise is an execution, queued behind a cell).
/// The host knows it by a pidfd: it is used only while that process lives and the sandbox's
/// processes are the ones it was started among.
pub struct Launcher {
    queue: tokio::sync::Mutex<pipe::Sender>,
    pidfd: OwnedFd,
    live: std::sync::Weak<Live>,
}

/// A launcher's pipes before the launcher runs (see [`Runtime::launcher_pipes`]).
pub struct LauncherPipes {
    queue: pipe::Sender,
    /// Where the launcher reports its pid (`p N`), then closes.
    pub status: pipe::Receiver,
    /// The host's write end of the status channel until the launch cell has run, so that a
    /// launcher that never starts reads as ended rather than as never started.
    keeper: Option<OwnedFd>,
    dir: OwnedFd,
    names: Vec<String>,
    live: Arc<Live>,
    /// The queue's and the status channel's paths inside the sandbox.
    pub queue_path: String,
    pub status_path: String,
}

impl LauncherPipes {
    /// Drops the host's keeper of the status channel (once the launch cell has run).
    pub fn launched(&mut self) {
        self.keeper = None;
    }

    /// The launcher whose wrapper reported `leader` (its pid inside the sandbox): the
    /// sandbox's process with that pid that leads its own session, known by a pidfd from now
    /// on. The FIFOs' names are removed (the launcher and the host hold them open).
    pub async fn adopt(self, leader: i32) -> Result<Launcher, RuntimeError> {
        let live = self.live.clone();
        let (dir, names) = (self.dir, self.names);
        let pidfd = blocking("adopting a command launcher", move || {
            for n in names {
                if let Ok(c) = CString::new(n) {
                    // SAFETY: unlinkat on a directory fd we own with a valid C string.
                    unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) };
                }
            }
            find_leader(&live, leader, SESSION).and_then(|p| pidfd_open(p).ok())
        })
        .await?
        .ok_or(FileError::ProcessesGone)?;
        Ok(Launcher {
            queue: tokio::sync::Mutex::new(self.queue),
            pidfd,
            live: Arc::downgrade(&self.live),
        })
    }
}

impl Launcher {
    /// Whether the launcher still runs among the sandbox's current processes.
    pub fn alive(&self) -> bool {
        match self.live.upgrade() {
            Some(live) => !live.is_dead() && live.driver_alive() && pidfd_signal(&self.pidfd, 0),
            None => false,
        }
    }

    /// Queues one launch cell (no NUL in it), waiting at most `wait` for room.
    pub async fn send(&self, cell: &str, wait: std::time::Duration) -> io::Result<()> {
        use tokio::io::AsyncWriteExt;
        if cell.contains('\0') {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let mut q = self.queue.lock().await;
        let mut msg = Vec::with_capacity(cell.len() + 1);
        msg.extend_from_slice(cell.as_bytes());
        msg.push(0);
        match tokio::time::timeout(wait, q.write_all(&msg)).await {
            Ok(r) => r,
            Err(_) => Err(io::Error::from_raw_os_error(libc::ETIMEDOUT)),
        }
    }
}

impl Runtime {
    /// Makes the FIFOs of a command launcher named `name` in sandbox `id`'s `/tmp/.e2b-proc`
    /// (the same checks as a command's pipes): its queue, which the host holds read-write
    /// (so the launcher never reads an end of file while the host keeps it), and its status
    /// channel. The launcher itself is started by a launch cell (the caller's).
    pub async fn launcher_pipes(
        &self,
        id: &str,
        name: &str,
    ) -> Result<LauncherPipes, RuntimeError> {
        check_name(name)?;
        let e = self.entry(id)?;
        self.touch(&e);
        let live = e.live().ok_or(FileError::ProcessesGone)?;
        if live.is_dead() {
            return Err(FileError::ProcessesGone.into());
        }
        let name = name.to_owned();
        let made = blocking("making a launcher's pipes", move || {
            let uid = live.host_uid;
            let tmp = tmp_dir(&live)?;
            let dir = proc_dir(&tmp, uid)?;
            let d = dir.as_raw_fd();
            let (q, st) = (format!("{name}.lq"), format!("{name}.ls"));
            let queue = fresh_fifo(d, &q, uid, libc::O_RDWR)?;
            let status = fresh_fifo(d, &st, uid, libc::O_RDONLY)?;
            let keeper = keeper(d, &st, uid, &status)?;
            if !live.driver_alive() {
                return Err(FileError::ProcessesGone);
            }
            Ok((queue, status, keeper, dir, vec![q, st], live))
        })
        .await?;
        let (queue, status, keeper, dir, names, live) = made?;
        let to_err = FileError::Write;
        let at = |n: &str| format!("/tmp/{PROC_DIR}/{n}");
        Ok(LauncherPipes {
            queue_path: at(&names[0]),
            status_path: at(&names[1]),
            queue: pipe::Sender::from_owned_fd(queue).map_err(to_err)?,
            status: pipe::Receiver::from_owned_fd(status).map_err(to_err)?,
            keeper: Some(keeper),
            dir,
            names,
            live,
        })
    }

    /// Makes the pipes of a command named `name` (letters, digits, `-`) in sandbox `id`'s
    /// `/tmp/.e2b-proc`, and its terminal when `io` asks for one (see the module doc). The
    /// sandbox must be running. A sandbox whose devpts instance is full answers
    /// `FileError::NoFreePty`.
    pub async fn command_pipes(
        &self,
        id: &str,
        name: &str,
        io: CommandIo,
    ) -> Result<CommandPipes, RuntimeError> {
        check_name(name)?;
        let e = self.entry(id)?;
        self.touch(&e);
        let live = e.live().ok_or(FileError::ProcessesGone)?;
        if live.is_dead() {
            return Err(FileError::ProcessesGone.into());
        }
        let name = name.to_owned();
        let made = blocking("making a command's pipes", move || make(live, &name, io)).await?;
        let mut made = made?;
        let to_err = FileError::Write;
        let status = pipe::Receiver::from_owned_fd(made.status).map_err(to_err)?;
        let output = match (made.pty.take(), made.reads.pop(), made.reads.pop()) {
            (Some((fd, number)), _, _) => CommandOutput::Pty(Arc::new(PtyMaster {
                // SAFETY: the `OwnedFd` is moved into the `AsyncFd`, which alone holds it: it
                // is neither closed nor replaced while registered.
                fd: unsafe { AsyncFd::register(fd) }.map_err(|e| to_err(e.into_parts().1))?,
                number,
            })),
            (None, Some(stderr), Some(stdout)) => CommandOutput::Pipes {
                stdout: pipe::Receiver::from_owned_fd(stdout).map_err(to_err)?,
                stderr: pipe::Receiver::from_owned_fd(stderr).map_err(to_err)?,
            },
            _ => return Err(FileError::ProcessesGone.into()),
        };
        let stdin = match made.stdin {
            Some(fd) => Some(pipe::Sender::from_owned_fd(fd).map_err(to_err)?),
            None => None,
        };
        Ok(CommandPipes {
            output,
            status,
            stdin,
            paths: made.paths,
            control: CommandControl {
                keepers: std::sync::Mutex::new(made.keepers),
                dir: Arc::new(made.dir),
                names: made.names,
                live: made.live,
                session: matches!(io, CommandIo::Pty { .. }),
            },
        })
    }
}

/// A pipe name: letters, digits, `-`, at most 64 bytes.
fn check_name(name: &str) -> Result<(), FileError> {
    if name.is_empty()
        || name.len() > 64
        || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return Err(FileError::Os {
            path: name.to_owned(),
            errno: nix::Error::EINVAL,
        });
    }
    Ok(())
}

struct Made {
    /// Stdout's and stderr's read ends (none for a terminal).
    reads: Vec<OwnedFd>,
    status: OwnedFd,
    /// A terminal's master and its number.
    pty: Option<(OwnedFd, u32)>,
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

/// The driver's root as an `O_PATH` directory fd (check the driver's pidfd after using it).
fn driver_root(live: &Live) -> Result<OwnedFd, FileError> {
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
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat` of one name below `dir`, never following a symlink at it.
fn open_at(dir: &OwnedFd, name: &str, flags: i32) -> Result<OwnedFd, FileError> {
    let c = cstr(name)?;
    // SAFETY: openat relative to an fd we own with a valid C string, O_NOFOLLOW.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(map_errno(nix::Error::last(), name));
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn fstatfs_type(fd: &OwnedFd) -> Result<i64, nix::Error> {
    // SAFETY: statfs is plain old data; zeroed is valid; fstatfs fills it.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd and out-pointer.
    if unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(nix::Error::last());
    }
    Ok(st.f_type as i64)
}

/// glibc's `major`/`minor` of a `dev_t`.
fn dev_major(dev: u64) -> u32 {
    (((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff)) as u32
}
fn dev_minor(dev: u64) -> u32 {
    ((dev & 0xff) | ((dev >> 12) & !0xff)) as u32
}

fn pty_refused(why: nix::Error) -> FileError {
    FileError::Os {
        path: "/dev/pts/ptmx".into(),
        errno: why,
    }
}

/// Opens a new terminal's master in the sandbox's devpts instance (its `/dev/pts`, a mount
/// the jail made and the sandbox cannot change: no mount syscalls, `/dev` read-only), as the
/// sandbox's uid so the terminal belongs to the sandbox's user; unlocks it and sets its size.
fn open_pty(live: &Live, cols: u16, rows: u16) -> Result<(OwnedFd, u32), FileError> {
    let root = driver_root(live)?;
    let dev = open_at(&root, "dev", libc::O_PATH | libc::O_DIRECTORY)?;
    let pts = open_at(&dev, "pts", libc::O_PATH | libc::O_DIRECTORY)?;
    let uid = live.host_uid;
    let master = as_sandbox(uid, || {
        open_at(
            &pts,
            "ptmx",
            libc::O_RDWR | libc::O_NOCTTY | libc::O_NONBLOCK,
        )
    })
    .map_err(|e| match e {
        // The instance's `max` reached.
        FileError::WorkspaceFull => FileError::NoFreePty,
        e => e,
    })?;
    // A ptmx, on a devpts, and not the host's own instance (whose terminals the host's
    // sessions use): anything else is refused.
    let st = fstat(master.as_raw_fd()).map_err(pty_refused)?;
    let ptmx = st.st_mode & libc::S_IFMT == libc::S_IFCHR
        && dev_major(st.st_rdev) == PTMX_MAJOR
        && dev_minor(st.st_rdev) == PTMX_MINOR;
    if !ptmx || fstatfs_type(&master).map_err(pty_refused)? != DEVPTS_SUPER_MAGIC {
        return Err(pty_refused(nix::Error::EPERM));
    }
    if let Ok(host) = std::fs::metadata("/dev/pts/ptmx") {
        use std::os::unix::fs::MetadataExt;
        if host.dev() == st.st_dev {
            return Err(pty_refused(nix::Error::EPERM));
        }
    }
    let unlock: libc::c_int = 0;
    // SAFETY: TIOCSPTLCK reads one int from a valid pointer; the fd is a ptmx we own.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK, &unlock) } != 0 {
        return Err(pty_refused(nix::Error::last()));
    }
    let mut number: libc::c_uint = 0;
    // SAFETY: TIOCGPTN writes one unsigned int to a valid pointer.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTN, &mut number) } != 0 {
        return Err(pty_refused(nix::Error::last()));
    }
    set_size(&master, cols, rows)
        .map_err(|e| pty_refused(nix::Error::from_raw(e.raw_os_error().unwrap_or(libc::EIO))))?;
    if !live.driver_alive() {
        return Err(FileError::ProcessesGone);
    }
    Ok((master, number))
}

/// The sandbox's `/tmp` as an `O_PATH` directory fd, checked against the driver's pidfd.
fn tmp_dir(live: &Live) -> Result<OwnedFd, FileError> {
    let root = driver_root(live)?;
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

fn make(live: Arc<Live>, name: &str, io: CommandIo) -> Result<Made, FileError> {
    let uid = live.host_uid;
    let pty = match io {
        CommandIo::Pty { cols, rows } => Some(open_pty(&live, cols, rows)?),
        CommandIo::Pipes { .. } => None,
    };
    let tmp = tmp_dir(&live)?;
    let dir = proc_dir(&tmp, uid)?;
    let d = dir.as_raw_fd();
    let mut names = Vec::new();
    let mut reads = Vec::new();
    let mut keepers = Vec::new();
    let suffixes: &[&str] = if pty.is_some() {
        &["st"]
    } else {
        &["out", "err", "st"]
    };
    for suffix in suffixes {
        let n = format!("{name}.{suffix}");
        let r = fresh_fifo(d, &n, uid, libc::O_RDONLY)?;
        keepers.push(keeper(d, &n, uid, &r)?);
        reads.push(r);
        names.push(n);
    }
    let Some(status) = reads.pop() else {
        return Err(FileError::ProcessesGone);
    };
    let stdin = if io == (CommandIo::Pipes { stdin: true }) {
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
    let paths = match &pty {
        Some((_, n)) => {
            let tty = format!("/dev/pts/{n}");
            CommandPaths {
                stdout: tty.clone(),
                stderr: tty.clone(),
                status: at("st"),
                stdin: Some(tty.clone()),
                tty: Some(tty),
            }
        }
        None => CommandPaths {
            stdout: at("out"),
            stderr: at("err"),
            status: at("st"),
            stdin: stdin.is_some().then(|| at("in")),
            tty: None,
        },
    };
    Ok(Made {
        reads,
        status,
        pty,
        keepers,
        stdin,
        dir,
        names,
        live,
        paths,
    })
}

/// Indexes of `/proc/<pid>/stat` fields after the command name: process group, session.
const PGRP: usize = 2;
const SESSION: usize = 3;

/// A field of `/proc/<pid>/stat` after the command name (which may hold spaces and `)`):
/// [`PGRP`], [`SESSION`].
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

/// The host pid of the sandbox's process whose pid inside is `leader`, if it leads its own
/// process group (`field` [`PGRP`]) or session ([`SESSION`]); never the init or the driver.
/// A group (session) id stays taken while any member lives, so the host number names the
/// command's group for as long as there is something in it.
fn find_leader(live: &Live, leader: i32, field: usize) -> Option<i32> {
    if leader <= 1 || live.is_dead() {
        return None;
    }
    let spared = [live.init_pid, live.driver_pid];
    let host_leader = live
        .cgroup
        .pids()
        .into_iter()
        .find(|&p| !spared.contains(&p) && ns_pid(p) == Some(leader))?;
    // Not a group (session) leader: a wrapper always is, so this is not it.
    (stat_field(host_leader, field) == Some(host_leader)).then_some(host_leader)
}

/// Signals the processes whose `field` ([`PGRP`] or [`SESSION`]) is the leader's.
fn signal_group(live: &Live, leader: i32, sig: i32, field: usize) -> usize {
    if leader <= 1 || live.is_dead() {
        return 0;
    }
    let spared = [live.init_pid, live.driver_pid];
    let Some(host_leader) = find_leader(live, leader, field) else {
        return 0;
    };
    let mut sent = 0;
    // A few passes: members may fork while they are being signalled.
    for _ in 0..3 {
        let mut this_pass = 0;
        for p in live.cgroup.pids() {
            if spared.contains(&p) || stat_field(p, field) != Some(host_leader) {
                continue;
            }
            let Ok(fd) = pidfd_open(p) else { continue };
            // Checked again through the pidfd's process: alive now, so `/proc/<p>` is it.
            if stat_field(p, field) == Some(host_leader)
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
