//! The server's side of a zygote: launches it confined (through `sandlot __zygote-launch`),
//! takes the listener of its unshare filter and supervises it (`unshare_guard`), waits for it to
//! be ready, asks it to fork sandboxes, and restarts it when it dies.

use crate::unshare_guard::{self, UnshareGuard};
use crate::util::lock;
use nix::sys::socket::{
    recvmsg, sendmsg, socketpair, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags,
    SockFlag, SockType,
};
use sandlot_jail::ZygoteConfig;
use std::io::IoSlice;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum ZygoteError {
    #[error("starting the zygote launcher {exe}: {source}")]
    Launch {
        exe: PathBuf,
        source: std::io::Error,
    },
    #[error("zygote socket: {0}")]
    Socket(#[from] nix::Error),
    #[error("the zygote failed to start: {0}")]
    Failed(String),
    #[error("the zygote did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the zygote refused: {0}")]
    Refused(String),
    #[error("the zygote died")]
    Died,
    #[error("the zygote launcher did not hand over its unshare listener: {0}")]
    NoListener(String),
}

/// A running zygote.
pub struct Zygote {
    pub template: String,
    conn: Mutex<Conn>,
    pub pid: u32,
    pub prepare_seconds: f64,
    /// Native threads the zygote had when it said it was ready.
    pub threads: u64,
    /// Whether it passes a fourth fd (the sandbox's workspace, a detached mount) on to the
    /// child, which mounts it at `/workspace`; older zygotes give the child a tmpfs there.
    pub workspace_fd: bool,
    /// The supervisor of its children's `unshare` calls.
    guard: Arc<UnshareGuard>,
}

struct Conn {
    sock: OwnedFd,
    child: Child,
}

/// How to start a zygote.
#[derive(Clone)]
pub struct ZygoteSpec {
    pub template: String,
    pub launcher: PathBuf,
    pub config: ZygoteConfig,
    pub ready_timeout: Duration,
}

impl Zygote {
    /// Launches a zygote and waits until it has imported its template and is ready to fork.
    pub fn start(spec: &ZygoteSpec) -> Result<Zygote, ZygoteError> {
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )?;
        let cfg =
            serde_json::to_string(&spec.config).map_err(|e| ZygoteError::Failed(e.to_string()))?;
        let theirs_fd = theirs.as_raw_fd();
        let mut cmd = Command::new(&spec.launcher);
        cmd.arg("__zygote-launch")
            .arg(cfg)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        // SAFETY: the closure only calls dup2, which is async-signal-safe; dup2 also clears
        // FD_CLOEXEC on the target so fd 3 survives exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(theirs_fd, 3) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|source| ZygoteError::Launch {
            exe: spec.launcher.clone(),
            source,
        })?;
        drop(theirs);
        let pid = child.id();
        let conn = Conn { sock: ours, child };
        // The launcher's first message, before anything of the template runs.
        let guard = Arc::new(UnshareGuard::default());
        let (hello, mut fds) = recv_msg(&conn.sock, spec.ready_timeout)?;
        match (hello.get("op").and_then(|v| v.as_str()), fds.len()) {
            (Some("supervise"), 1) => {
                unshare_guard::supervise(&spec.template, fds.remove(0), guard.clone())
            }
            _ => return Err(ZygoteError::NoListener(hello.to_string())),
        }
        let ready = recv_json(&conn.sock, spec.ready_timeout)?;
        match ready.get("op").and_then(|v| v.as_str()) {
            Some("ready") => Ok(Zygote {
                template: spec.template.clone(),
                pid,
                prepare_seconds: ready
                    .get("prepare_seconds")
                    .and_then(|v| v.as_f64())
                    .unwrap_or(0.0),
                threads: ready.get("threads").and_then(|v| v.as_u64()).unwrap_or(1),
                workspace_fd: ready.get("workspace_fd").and_then(|v| v.as_bool()) == Some(true),
                conn: Mutex::new(conn),
                guard,
            }),
            _ => {
                guard.stop();
                let msg = ready
                    .get("message")
                    .and_then(|v| v.as_str())
                    .unwrap_or("no message");
                let tb = ready
                    .get("traceback")
                    .and_then(|v| v.as_str())
                    .unwrap_or("");
                Err(ZygoteError::Failed(format!("{msg}\n{tb}")))
            }
        }
    }

    /// Asks the zygote to fork a sandbox; returns the forked child's host pid. The fds
    /// (control stream, stdout and stderr write ends, and the workspace mount when the zygote
    /// takes one) are passed to the child.
    pub fn spawn(
        &self,
        id: &str,
        jail: &serde_json::Value,
        env: &serde_json::Value,
        fds: &[RawFd],
    ) -> Result<i32, ZygoteError> {
        let conn = lock(&self.conn);
        self.guard.spawn_started();
        let reply = self.ask_spawn(&conn, id, jail, env, fds);
        if let Ok(pid) = reply {
            self.guard.expect(pid);
        }
        self.guard.spawn_ended();
        reply
    }

    fn ask_spawn(
        &self,
        conn: &Conn,
        id: &str,
        jail: &serde_json::Value,
        env: &serde_json::Value,
        fds: &[RawFd],
    ) -> Result<i32, ZygoteError> {
        let msg =
            serde_json::json!({"op": "spawn", "id": id, "jail": jail, "env": env}).to_string();
        let iov = [IoSlice::new(msg.as_bytes())];
        let cmsg = [ControlMessage::ScmRights(fds)];
        sendmsg::<()>(
            conn.sock.as_raw_fd(),
            &iov,
            &cmsg,
            MsgFlags::MSG_NOSIGNAL,
            None,
        )
        .map_err(|e| {
            if e == nix::Error::EPIPE {
                ZygoteError::Died
            } else {
                e.into()
            }
        })?;
        let reply = recv_json(&conn.sock, Duration::from_secs(10))?;
        match reply.get("op").and_then(|v| v.as_str()) {
            Some("spawned") => reply
                .get("pid")
                .and_then(|v| v.as_i64())
                .map(|p| p as i32)
                .ok_or_else(|| ZygoteError::Refused("spawned without pid".into())),
            _ => Err(ZygoteError::Refused(
                reply
                    .get("message")
                    .and_then(|v| v.as_str())
                    .unwrap_or("unknown")
                    .to_string(),
            )),
        }
    }

    /// Whether the zygote process is still alive.
    pub fn alive(&self) -> bool {
        let mut conn = lock(&self.conn);
        matches!(conn.child.try_wait(), Ok(None))
    }

    /// How many `unshare` calls under this zygote were refused (setup code trying, or a child
    /// the server did not ask for).
    pub fn refused_unshares(&self) -> usize {
        self.guard.refused()
    }

    /// Kills the zygote (sandboxes already forked live on).
    pub fn kill(&self) {
        self.guard.stop();
        let mut conn = lock(&self.conn);
        let _ = conn.child.kill();
        let _ = conn.child.wait();
    }
}

impl Drop for Zygote {
    fn drop(&mut self) {
        self.kill();
    }
}

fn recv_json(sock: &OwnedFd, timeout: Duration) -> Result<serde_json::Value, ZygoteError> {
    // Descriptors are only expected where the caller asks for them: any here are closed.
    recv_msg(sock, timeout).map(|(v, _)| v)
}

/// Receives one message and the descriptors attached to it (at most 4).
fn recv_msg(
    sock: &OwnedFd,
    timeout: Duration,
) -> Result<(serde_json::Value, Vec<OwnedFd>), ZygoteError> {
    let deadline = Instant::now() + timeout;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ZygoteError::Timeout(timeout));
        }
        let mut pfd = [nix::poll::PollFd::new(
            std::os::fd::AsFd::as_fd(sock),
            nix::poll::PollFlags::POLLIN,
        )];
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        match nix::poll::poll(
            &mut pfd,
            nix::poll::PollTimeout::try_from(ms).unwrap_or(nix::poll::PollTimeout::MAX),
        ) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
        let mut cmsg = nix::cmsg_space!([RawFd; 4]);
        let mut iov = [std::io::IoSliceMut::new(&mut buf)];
        let (n, fds) = match recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(m) => {
                let mut fds = Vec::new();
                for c in m.cmsgs().into_iter().flatten() {
                    if let ControlMessageOwned::ScmRights(list) = c {
                        // SAFETY: the kernel just installed these fds in this process for us.
                        fds.extend(
                            list.into_iter()
                                .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                        );
                    }
                }
                (m.bytes, fds)
            }
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(e.into()),
        };
        if n == 0 {
            return Err(ZygoteError::Died);
        }
        let value = serde_json::from_slice(&buf[..n])
            .map_err(|e| ZygoteError::Failed(format!("bad message: {e}")))?;
        return Ok((value, fds));
    }
}
