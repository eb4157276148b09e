//! One live sandbox: its processes (reached only through pidfds), cgroup, control stream and
//! output pipes; the pump that turns stream and pipes into one ordered stream of events for the
//! execution that runs, and routes output produced between executions to the background buffer
//! (`background.rs`); and the output budget of one stream. Frames on the control stream use the
//! shared codec (`sandlot_jail::frame`), whose size cap ends a sandbox that sends more. Killing a
//! sandbox is in `teardown`.

use crate::background::{self, Background};
use crate::error::{CreateFailure, FileError};
use crate::util::{lock, Utf8Stream};
use crate::workspace::{self, workspace_fd};
use sandlot_jail::cgroup::Cgroup;
use sandlot_jail::frame::{self, FrameError};
use sandlot_types::StreamName;
use serde_json::Value;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::{pipe, OwnedReadHalf};
use tokio::sync::{mpsc, oneshot, Mutex};

/// The longest a frame to the driver may wait for room on the control stream (an idle driver
/// reads the largest cell in milliseconds); with the kill grace it keeps an execution within
/// its timeout plus 2 s.
pub const SEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// What the pump delivers, in the order the sandbox produced it.
#[derive(Debug)]
pub enum Pumped {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    Frame(Value),
    /// The control stream closed or broke: the driver is gone.
    Closed(String),
}

/// A live sandbox.
pub struct Live {
    pub id: String,
    /// The limits it was booted with.
    pub limits: sandlot_types::EffectiveLimits,
    pub host_uid: u32,
    pub cgroup: Cgroup,
    /// The host directory of the sandbox's workspace on disk, mounted at its `/workspace`;
    /// `None` when its `/workspace` is a tmpfs of its own.
    pub workspace_dir: Option<std::path::PathBuf>,
    /// Host pids of the sandbox's init (P1) and driver (P2), for logs and `/proc` paths, and
    /// pidfds of both: every signal goes through a pidfd, so a pid recycled after the sandbox
    /// died can never be hit.
    pub init_pid: i32,
    pub driver_pid: i32,
    pub init_fd: OwnedFd,
    pub driver_fd: OwnedFd,
    /// Writes frames to the driver.
    pub writer: Mutex<tokio::net::unix::OwnedWriteHalf>,
    /// Ordered events from the pump; held by the execution that runs.
    pub events: Mutex<mpsc::Receiver<Pumped>>,
    /// The pump's background buffer and the way an execution claims the output that follows.
    pub pump: PumpLink,
    /// The id of the running execution, if any.
    pub running: StdMutex<Option<String>>,
    pub dead: AtomicBool,
    /// Signalled by `POST /interrupt`; the running execution interrupts the driver.
    pub interrupt: tokio::sync::Notify,
    /// The sandbox's code contexts, oldest first; `default` exists from boot.
    pub contexts: StdMutex<Vec<sandlot_types::Context>>,
}

impl Live {
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    /// Sends one frame to the driver. A driver that stops reading its control stream cannot
    /// hold the server up: past [`SEND_TIMEOUT`] the send fails (and the caller treats the
    /// sandbox's processes as broken).
    pub async fn send(&self, v: &Value) -> std::io::Result<()> {
        let buf = frame::encode(v.to_string().as_bytes());
        let write = async {
            let mut w = self.writer.lock().await;
            w.write_all(&buf).await
        };
        match tokio::time::timeout(SEND_TIMEOUT, write).await {
            Ok(r) => r,
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the sandbox stopped reading its control stream",
            )),
        }
    }

    /// Sends one frame carrying `fd` (as `SCM_RIGHTS` on the frame's first bytes; the frame
    /// says `"fd": true`). The driver keeps received descriptors in order and a frame that says
    /// so takes the first; see `saved.rs`. Bounded like [`Live::send`].
    pub async fn send_with_fd(
        &self,
        v: &Value,
        fd: std::os::fd::BorrowedFd<'_>,
    ) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let buf = frame::encode(v.to_string().as_bytes());
        let write = async {
            let mut w = self.writer.lock().await;
            let sent = {
                let sock: &tokio::net::UnixStream = (*w).as_ref();
                loop {
                    sock.writable().await?;
                    let attempt = sock.try_io(tokio::io::Interest::WRITABLE, || {
                        let iov = [std::io::IoSlice::new(&buf)];
                        let fds = [fd.as_raw_fd()];
                        let cmsg = [nix::sys::socket::ControlMessage::ScmRights(&fds)];
                        nix::sys::socket::sendmsg::<()>(
                            sock.as_raw_fd(),
                            &iov,
                            &cmsg,
                            nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
                            None,
                        )
                        .map_err(std::io::Error::from)
                    });
                    match attempt {
                        Ok(n) => break n,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                        Err(e) => return Err(e),
                    }
                }
            };
            // A stream socket may take part of the frame; the descriptor went with the first
            // byte, the rest follows plainly.
            w.write_all(&buf[sent..]).await
        };
        match tokio::time::timeout(SEND_TIMEOUT, write).await {
            Ok(r) => r,
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the sandbox stopped reading its control stream",
            )),
        }
    }

    /// Sends the creator's environment variables (often secrets) on the sandbox's own channel,
    /// never through the zygote, whose memory every later sandbox inherits, with the directory
    /// its code starts in when that is not `/workspace` (the driver keeps it in its saved
    /// state, so forks, resumes and restarts from state keep it). Nothing to send, nothing sent.
    pub(crate) async fn send_env(
        &self,
        env: &std::collections::BTreeMap<String, String>,
        workdir: Option<&str>,
    ) -> Result<(), crate::RuntimeError> {
        if env.is_empty() && workdir.is_none() {
            return Ok(());
        }
        let mut msg = serde_json::json!({"type": "env", "env": env});
        if let Some(dir) = workdir {
            msg["workdir"] = dir.into();
        }
        self.send(&msg)
            .await
            .map_err(|source| crate::RuntimeError::DiedStarting { source })
    }

    /// Sends SIGINT to the driver.
    pub fn interrupt(&self) {
        pidfd_signal(&self.driver_fd, libc::SIGINT);
    }

    /// Whether the driver is still alive (so `/proc/<driver_pid>` is still the sandbox's).
    pub fn driver_alive(&self) -> bool {
        pidfd_signal(&self.driver_fd, 0)
    }

    /// Whether its workspace is on disk (and outlives these processes).
    pub fn disk(&self) -> bool {
        self.workspace_dir.is_some()
    }

    /// The sandbox's workspace as a directory fd: its directory on the host when it is on
    /// disk; else reached through the driver's `/proc` root and checked against the driver's
    /// pidfd afterwards, so a recycled pid cannot redirect it.
    pub fn workspace(&self) -> Result<OwnedFd, FileError> {
        if let Some(dir) = &self.workspace_dir {
            return workspace::open_dir(dir);
        }
        let ws = workspace_fd(self.driver_pid)?;
        if !self.driver_alive() {
            return Err(FileError::ProcessesGone);
        }
        Ok(ws)
    }

    /// Whether an execution is running.
    pub fn busy(&self) -> bool {
        lock(&self.running).is_some()
    }

    /// Reaps the init if it has exited; true when it had.
    pub fn init_exited(&self) -> bool {
        reap(&self.init_fd)
    }
}

/// Opens a pidfd for `pid`.
pub fn pidfd_open(pid: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) })
}

/// Sends `sig` through a pidfd (0 only checks the process is alive). False if it is gone.
pub fn pidfd_signal(fd: &OwnedFd, sig: i32) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: pidfd_send_signal on a pidfd we own, no siginfo.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        ) == 0
    }
}

/// Waits at most `wait` for the process behind `fd` to exit (a pidfd polls readable when it
/// has), then reaps it like [`reap`]. True when it was reaped.
pub fn reap_within(fd: &OwnedFd, wait: std::time::Duration) -> bool {
    use std::os::fd::AsRawFd;
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = wait.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: poll on one pollfd we own, bounded by `ms`.
    unsafe { libc::poll(&mut pfd, 1, ms) };
    reap(fd)
}

/// Reaps the process behind `fd` if it has exited and is our child (we are a subreaper, so a
/// sandbox's init is). Never blocks; true when it had exited.
pub fn reap(fd: &OwnedFd) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: siginfo_t is plain old data; zeroed is valid.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid on a pidfd we own with a valid out-pointer; P_PIDFD is 3.
    let r = unsafe {
        libc::waitid(
            3,
            fd.as_raw_fd() as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG,
        )
    };
    // SAFETY: reading si_pid of a siginfo the kernel filled (0 when nothing exited).
    r == 0 && unsafe { info.si_pid() } != 0
}

/// Reads one whole frame from the control stream, waiting for it: used during the creation
/// handshake, before the pump owns the stream.
pub async fn read_frame(r: &mut OwnedReadHalf) -> Result<Value, CreateFailure> {
    let mut buf = vec![0u8; frame::HEADER];
    r.read_exact(&mut buf)
        .await
        .map_err(CreateFailure::Closed)?;
    let len = frame::payload_len([buf[0], buf[1], buf[2], buf[3]])?;
    buf.resize(frame::HEADER + len, 0);
    r.read_exact(&mut buf[frame::HEADER..])
        .await
        .map_err(CreateFailure::Closed)?;
    frame::decode(&buf)?
        .map(|(v, _)| v)
        .ok_or(CreateFailure::Protocol("incomplete frame"))
}

/// A live sandbox's side of its pump, beside the event channel: the buffer that output produced
/// while no execution runs goes to, and how an execution claims the output that follows.
pub struct PumpLink {
    /// Output produced while no execution ran (see `background.rs`).
    pub background: Arc<StdMutex<Background>>,
    begins: mpsc::UnboundedSender<(String, oneshot::Sender<()>)>,
}

impl PumpLink {
    /// Bytes of background output waiting.
    pub fn background_bytes(&self) -> u64 {
        lock(&self.background).bytes()
    }

    /// Claims the output that follows for execution `id`, until the pump reads its `done`
    /// frame: the pump first moves whatever the pipes hold into the background buffer, so
    /// output written before the execution was sent is never the execution's. Waits for the
    /// pump's answer while discarding what is left in the channel from before this execution
    /// (frames of an abandoned execution, a late context answer), which also keeps a pump
    /// blocked on a full channel from never answering. Returns why the processes are gone, if
    /// they are.
    pub async fn begin(&self, events: &mut mpsc::Receiver<Pumped>, id: &str) -> Option<String> {
        let (ack, mut answered) = oneshot::channel();
        if self.begins.send((id.to_string(), ack)).is_ok() {
            loop {
                tokio::select! {
                    biased;
                    ev = events.recv() => match ev {
                        Some(Pumped::Closed(why)) => return Some(why),
                        None => return Some(EVENTS_ENDED.into()),
                        Some(_) => {}
                    },
                    r = &mut answered => match r {
                        Ok(()) => return None,
                        Err(_) => break,
                    },
                }
            }
        }
        // The pump has ended: it says why last.
        while let Some(ev) = events.recv().await {
            if let Pumped::Closed(why) = ev {
                return Some(why);
            }
        }
        Some(EVENTS_ENDED.into())
    }
}

const EVENTS_ENDED: &str = "the sandbox's event stream ended";

/// Where the pump sends what it reads: to the execution that owns the output (through the
/// channel, in order), or, while none does, stream output to the background buffer.
struct Router {
    tx: mpsc::Sender<Pumped>,
    background: Arc<StdMutex<Background>>,
    /// The execution the output belongs to; `None` between executions.
    owner: Option<String>,
}

impl Router {
    /// Routes stream output; false once nobody receives events any more.
    async fn output(&mut self, stream: StreamName, bytes: &[u8]) -> bool {
        if self.owner.is_none() {
            lock(&self.background).push(stream, bytes, None);
            return true;
        }
        let ev = match stream {
            StreamName::Stdout => Pumped::Stdout(bytes.to_vec()),
            StreamName::Stderr => Pumped::Stderr(bytes.to_vec()),
        };
        self.tx.send(ev).await.is_ok()
    }

    /// Whether `v` is the `done` frame of the execution that owns the output.
    fn ends_owner(&self, v: &Value) -> bool {
        self.owner.is_some()
            && v.get("type").and_then(|t| t.as_str()) == Some("done")
            && v.get("id").and_then(|i| i.as_str()) == self.owner.as_deref()
    }

    async fn closed(&self, why: String) {
        let _ = self.tx.send(Pumped::Closed(why)).await;
    }
}

/// Starts the pump: one task owning the control stream's read half and both pipes. Whenever
/// the control stream has bytes, it first drains whatever the pipes hold and only then reads the
/// stream, so output written before a frame is delivered before it. The driver waits until a
/// display frame has been read before it writes more, so this keeps the exact order.
///
/// Stream output belongs to the execution that claimed it ([`PumpLink::begin`]) up to its
/// `done` frame (the pipes are drained once more just before that frame is delivered, so the
/// cell's last writes are its own); output read at any other time goes to the background
/// buffer, and so are `background` frames, whenever they come: output of processes, jobs and
/// threads that outlived the execution that started them, relayed by the driver with that
/// execution's id. (Only the driver writes into the pipes while it serves: each execution's
/// processes get pipes of their own, see `python/sandlot_runtime/output.py`.)
pub fn start_pump(
    ctrl: OwnedReadHalf,
    stdout: OwnedFd,
    stderr: OwnedFd,
) -> std::io::Result<(mpsc::Receiver<Pumped>, PumpLink)> {
    let mut out = pipe::Receiver::from_owned_fd(stdout)?;
    let mut err = pipe::Receiver::from_owned_fd(stderr)?;
    let (tx, rx) = mpsc::channel(256);
    let (begins_tx, mut begins) = mpsc::unbounded_channel::<(String, oneshot::Sender<()>)>();
    let background = Arc::new(StdMutex::new(Background::default()));
    let link = PumpLink {
        background: background.clone(),
        begins: begins_tx,
    };
    let mut router = Router {
        tx,
        background,
        owner: None,
    };
    tokio::spawn(async move {
        let mut obuf = vec![0u8; 64 << 10];
        let mut ebuf = vec![0u8; 64 << 10];
        let mut frames = FrameBuf::default();
        let (mut out_open, mut err_open) = (true, true);
        loop {
            tokio::select! {
                biased;
                begin = begins.recv() => {
                    // None: the sandbox's processes were dropped; nobody reads what follows.
                    let Some((id, ack)) = begin else { return };
                    router.owner = None;
                    drain(&out, &mut obuf, &mut router, StreamName::Stdout).await;
                    drain(&err, &mut ebuf, &mut router, StreamName::Stderr).await;
                    router.owner = Some(id);
                    let _ = ack.send(());
                }
                r = out.read(&mut obuf), if out_open => match r {
                    Ok(0) | Err(_) => out_open = false,
                    Ok(n) => if !router.output(StreamName::Stdout, &obuf[..n]).await { return },
                },
                r = err.read(&mut ebuf), if err_open => match r {
                    Ok(0) | Err(_) => err_open = false,
                    Ok(n) => if !router.output(StreamName::Stderr, &ebuf[..n]).await { return },
                },
                r = ctrl.readable() => {
                    if let Err(e) = r {
                        router.closed(format!("control stream: {e}")).await;
                        return;
                    }
                    // Drain what was written before the bytes now waiting on the stream.
                    drain(&out, &mut obuf, &mut router, StreamName::Stdout).await;
                    drain(&err, &mut ebuf, &mut router, StreamName::Stderr).await;
                    match frames.fill(&ctrl) {
                        Ok(true) => {}
                        Ok(false) => {
                            router.closed("control stream closed".into()).await;
                            return;
                        }
                        Err(e) => {
                            router.closed(format!("control stream: {e}")).await;
                            return;
                        }
                    }
                    loop {
                        match frames.next_frame() {
                            Ok(Some(v)) => {
                                if let Some((stream, text, exec)) = background::relayed(&v) {
                                    lock(&router.background).push(stream, text.as_bytes(), exec);
                                    continue;
                                }
                                let ends = router.ends_owner(&v);
                                if ends {
                                    // The cell's last writes may trail frames read in the same
                                    // batch as its done (a result frame is not waited for).
                                    drain(&out, &mut obuf, &mut router, StreamName::Stdout).await;
                                    drain(&err, &mut ebuf, &mut router, StreamName::Stderr).await;
                                }
                                if router.tx.send(Pumped::Frame(v)).await.is_err() { return }
                                if ends {
                                    router.owner = None;
                                }
                            }
                            Ok(None) => break,
                            Err(e) => {
                                router.closed(e.to_string()).await;
                                return;
                            }
                        }
                    }
                }
            }
        }
    });
    Ok((rx, link))
}

/// Bytes read from the control stream and not yet parsed into frames.
#[derive(Default)]
struct FrameBuf {
    buf: Vec<u8>,
}

impl FrameBuf {
    /// Reads what the stream has without blocking. `Ok(false)` at end of stream. Stops
    /// filling past one largest frame, so a peer cannot make the buffer grow without bound.
    fn fill(&mut self, ctrl: &OwnedReadHalf) -> std::io::Result<bool> {
        let mut chunk = [0u8; 64 << 10];
        loop {
            match ctrl.try_read(&mut chunk) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    if self.buf.len() > frame::MAX_FRAME + frame::HEADER {
                        return Ok(true);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The next whole frame in the buffer, taken out of it; `None` until one has arrived.
    fn next_frame(&mut self) -> Result<Option<Value>, FrameError> {
        let Some((v, used)) = frame::decode(&self.buf)? else {
            return Ok(None);
        };
        self.buf.drain(..used);
        Ok(Some(v))
    }
}

/// Reads whatever `p` holds now, without waiting, and routes it.
async fn drain(p: &pipe::Receiver, buf: &mut [u8], router: &mut Router, stream: StreamName) {
    loop {
        match p.try_read(buf) {
            Ok(0) => return,
            Ok(n) => {
                if !router.output(stream, &buf[..n]).await {
                    return;
                }
            }
            Err(_) => return,
        }
    }
}

/// Text kept of one output stream under the budget: the head is kept as it streams, then only
/// a rolling tail; what falls between is counted.
pub struct Budgeted {
    decoder: Utf8Stream,
    limit: usize,
    pub head: String,
    tail: std::collections::VecDeque<u8>,
    pub dropped: u64,
    pub total: u64,
    /// Length of the drop note `finish` put into `head`, so it is not counted as output kept.
    note_len: usize,
}

impl Budgeted {
    pub fn new(limit: usize) -> Self {
        Self {
            decoder: Utf8Stream::default(),
            limit,
            head: String::new(),
            tail: Default::default(),
            dropped: 0,
            total: 0,
            note_len: 0,
        }
    }

    /// Adds bytes; returns the text to stream now (empty once the head budget is spent).
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.total += bytes.len() as u64;
        let text = self.decoder.push(bytes);
        self.accept(text)
    }

    fn accept(&mut self, text: String) -> String {
        let head_budget = self.limit / 2;
        if self.head.len() + text.len() <= head_budget && self.tail.is_empty() {
            self.head.push_str(&text);
            return text;
        }
        let room = head_budget.saturating_sub(self.head.len());
        let mut cut = room.min(text.len());
        while cut > 0 && !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let (now, rest) = text.split_at(cut);
        self.head.push_str(now);
        let tail_budget = self.limit - head_budget;
        for b in rest.bytes() {
            if self.tail.len() == tail_budget {
                self.tail.pop_front();
                self.dropped += 1;
            }
            self.tail.push_back(b);
        }
        now.to_string()
    }

    /// Flushes the decoder; returns the closing text to stream (a drop note and the tail).
    pub fn finish(&mut self) -> String {
        let rest = self.decoder.finish();
        let mut closing = self.accept(rest);
        if !self.tail.is_empty() {
            let bytes: Vec<u8> = self.tail.drain(..).collect();
            // The tail may start inside a character; skip to a boundary.
            let text = String::from_utf8_lossy(&bytes);
            let text = text.trim_start_matches('\u{FFFD}');
            if self.dropped > 0 {
                let note = format!(
                    "\n[... {} bytes dropped by the output limit ...]\n",
                    self.dropped
                );
                self.note_len = note.len();
                closing.push_str(&note);
            }
            closing.push_str(text);
            self.head.push_str(&closing);
        }
        closing
    }

    pub fn kept(&self) -> u64 {
        self.head.len() as u64
    }

    /// Bytes the sandbox wrote that are not in the kept text (counted in the bytes it wrote, so
    /// invalid UTF-8 turned into U+FFFD does not inflate it).
    pub fn dropped_raw(&self) -> u64 {
        if self.dropped == 0 {
            0
        } else {
            let kept_output = self.head.len().saturating_sub(self.note_len) as u64;
            self.total.saturating_sub(kept_output)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_keeps_head_and_tail() {
        let mut b = Budgeted::new(20);
        let mut streamed = String::new();
        for _ in 0..100 {
            streamed.push_str(&b.push(b"0123456789"));
        }
        streamed.push_str(&b.finish());
        assert!(b.head.starts_with("0123456789"));
        assert!(b.head.ends_with("0123456789"));
        assert_eq!(b.dropped, 1000 - 20);
        assert!(b.head.contains("980 bytes dropped"));
        assert_eq!(streamed, b.head);
    }

    #[test]
    fn budget_under_limit_is_verbatim() {
        let mut b = Budgeted::new(100);
        assert_eq!(b.push(b"hello"), "hello");
        assert_eq!(b.finish(), "");
        assert_eq!(b.head, "hello");
        assert_eq!(b.dropped, 0);
    }
}
