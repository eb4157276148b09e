//! One live sandbox: its processes, cgroup, control stream and output pipes, and the pump that
//! turns them into one ordered stream of events.

use crate::util::Utf8Stream;
use sandlot_jail::cgroup::Cgroup;
use serde_json::Value;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex as StdMutex;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, Mutex};

/// Largest frame the server accepts from a sandbox; a larger one means a broken or hostile
/// driver and ends the sandbox.
pub const MAX_FRAME: usize = 64 << 20;

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
    /// The limits it was booted with (the workspace size cannot change later).
    pub limits: sandlot_types::EffectiveLimits,
    pub host_uid: u32,
    pub cgroup: Cgroup,
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
    /// One execution at a time, in arrival order (tokio's Mutex is fair).
    pub exec_lock: Mutex<()>,
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

    /// Sends one frame to the driver.
    pub async fn send(&self, v: &Value) -> std::io::Result<()> {
        let payload = v.to_string();
        let mut buf = Vec::with_capacity(payload.len() + 4);
        buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        buf.extend_from_slice(payload.as_bytes());
        let mut w = self.writer.lock().await;
        w.write_all(&buf).await
    }

    /// Sends SIGINT to the driver.
    pub fn interrupt(&self) {
        pidfd_signal(&self.driver_fd, libc::SIGINT);
    }

    /// Whether the driver is still alive (so `/proc/<driver_pid>` is still the sandbox's).
    pub fn driver_alive(&self) -> bool {
        pidfd_signal(&self.driver_fd, 0)
    }

    /// The sandbox's workspace as a directory fd, reached through the driver's `/proc` root
    /// and checked against the driver's pidfd afterwards, so a recycled pid cannot redirect it.
    pub fn workspace(&self) -> Result<OwnedFd, sandlot_types::ApiError> {
        let ws = crate::files::workspace_fd(self.driver_pid)?;
        if !self.driver_alive() {
            return Err(sandlot_types::ApiError::new(
                sandlot_types::ErrorCode::SandboxFailed,
                "the sandbox's processes are gone",
            ));
        }
        Ok(ws)
    }

    /// Kills every process of the sandbox: SIGKILL to its pid-namespace init takes the whole
    /// namespace with it; if anything is still in the cgroup after a moment (it cannot have
    /// left the pid namespace, but be sure), the cgroup is frozen and killed.
    pub fn kill(&self) {
        tracing::debug!(sandbox = %self.id, init = self.init_pid, "killing the sandbox");
        self.dead.store(true, Ordering::SeqCst);
        pidfd_signal(&self.init_fd, libc::SIGKILL);
        let deadline = std::time::Instant::now() + Duration::from_millis(200);
        while !self.cgroup.pids().is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        if !self.cgroup.pids().is_empty() {
            let _ = self.cgroup.kill_all(Duration::from_secs(5));
        }
        reap(&self.init_fd);
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

/// Reads one frame from the control stream.
pub async fn read_frame(r: &mut tokio::net::unix::OwnedReadHalf) -> Result<Value, String> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)
        .await
        .map_err(|e| format!("control stream closed: {e}"))?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(format!("frame of {len} bytes exceeds the limit"));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf)
        .await
        .map_err(|e| format!("control stream closed: {e}"))?;
    serde_json::from_slice(&buf).map_err(|e| format!("malformed frame: {e}"))
}

/// Reads the handshake byte `U` from a fresh control stream.
pub async fn read_byte(s: &mut UnixStream) -> std::io::Result<u8> {
    let mut b = [0u8; 1];
    s.read_exact(&mut b).await?;
    Ok(b[0])
}

/// Starts the pump: one task owning the control stream's read half and both pipes. Whenever
/// the control stream has bytes, it first drains whatever the pipes hold and only then reads the
/// stream, so output written before a frame is delivered before it. The driver waits until a
/// display frame has been read before it writes more, so this keeps the exact order.
pub fn start_pump(
    ctrl: tokio::net::unix::OwnedReadHalf,
    stdout: OwnedFd,
    stderr: OwnedFd,
) -> std::io::Result<mpsc::Receiver<Pumped>> {
    let mut out = pipe::Receiver::from_owned_fd(stdout)?;
    let mut err = pipe::Receiver::from_owned_fd(stderr)?;
    let (tx, rx) = mpsc::channel(256);
    tokio::spawn(async move {
        let mut obuf = vec![0u8; 64 << 10];
        let mut ebuf = vec![0u8; 64 << 10];
        let mut frames = FrameBuf::default();
        let (mut out_open, mut err_open) = (true, true);
        loop {
            tokio::select! {
                biased;
                r = out.read(&mut obuf), if out_open => match r {
                    Ok(0) | Err(_) => out_open = false,
                    Ok(n) => if tx.send(Pumped::Stdout(obuf[..n].to_vec())).await.is_err() { return },
                },
                r = err.read(&mut ebuf), if err_open => match r {
                    Ok(0) | Err(_) => err_open = false,
                    Ok(n) => if tx.send(Pumped::Stderr(ebuf[..n].to_vec())).await.is_err() { return },
                },
                r = ctrl.readable() => {
                    if let Err(e) = r {
                        let _ = tx.send(Pumped::Closed(format!("control stream: {e}"))).await;
                        return;
                    }
                    // Drain what was written before the bytes now waiting on the stream.
                    drain(&out, &mut obuf, &tx, true).await;
                    drain(&err, &mut ebuf, &tx, false).await;
                    match frames.fill(&ctrl) {
                        Ok(true) => {}
                        Ok(false) => {
                            let _ = tx.send(Pumped::Closed("control stream closed".into())).await;
                            return;
                        }
                        Err(e) => {
                            let _ = tx.send(Pumped::Closed(e)).await;
                            return;
                        }
                    }
                    loop {
                        match frames.next_frame() {
                            Ok(Some(v)) => if tx.send(Pumped::Frame(v)).await.is_err() { return },
                            Ok(None) => break,
                            Err(e) => {
                                let _ = tx.send(Pumped::Closed(e)).await;
                                return;
                            }
                        }
                    }
                }
            }
        }
    });
    Ok(rx)
}

/// Bytes read from the control stream and not yet parsed into frames.
#[derive(Default)]
struct FrameBuf {
    buf: Vec<u8>,
}

impl FrameBuf {
    /// Reads what the stream has without blocking. `Ok(false)` at end of stream.
    fn fill(&mut self, ctrl: &tokio::net::unix::OwnedReadHalf) -> Result<bool, String> {
        let mut chunk = [0u8; 64 << 10];
        loop {
            match ctrl.try_read(&mut chunk) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    if self.buf.len() > MAX_FRAME + 4 {
                        return Ok(true);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(format!("control stream: {e}")),
            }
        }
    }

    fn next_frame(&mut self) -> Result<Option<Value>, String> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_le_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
        if len > MAX_FRAME {
            return Err(format!("frame of {len} bytes exceeds the limit"));
        }
        if self.buf.len() < 4 + len {
            return Ok(None);
        }
        let v = serde_json::from_slice(&self.buf[4..4 + len])
            .map_err(|e| format!("malformed frame: {e}"));
        self.buf.drain(..4 + len);
        v.map(Some)
    }
}

async fn drain(p: &pipe::Receiver, buf: &mut [u8], tx: &mpsc::Sender<Pumped>, is_out: bool) {
    loop {
        match p.try_read(buf) {
            Ok(0) => return,
            Ok(n) => {
                let chunk = buf[..n].to_vec();
                let ev = if is_out {
                    Pumped::Stdout(chunk)
                } else {
                    Pumped::Stderr(chunk)
                };
                if tx.send(ev).await.is_err() {
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
