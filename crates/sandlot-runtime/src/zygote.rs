//! The server's side of a zygote: launches it confined (through `sandlot __zygote-launch`),
//! waits for it to be ready, asks it to fork sandboxes, and restarts it when it dies.

use crate::util::lock;
use nix::sys::socket::{
    recv, sendmsg, socketpair, AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType,
};
use sandlot_jail::ZygoteConfig;
use std::io::IoSlice;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
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
            }),
            _ => {
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

    /// Kills the zygote (sandboxes already forked live on).
    pub fn kill(&self) {
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
        let n = match recv(sock.as_raw_fd(), &mut buf, MsgFlags::empty()) {
            Ok(n) => n,
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(e.into()),
        };
        if n == 0 {
            return Err(ZygoteError::Died);
        }
        return serde_json::from_slice(&buf[..n])
            .map_err(|e| ZygoteError::Failed(format!("bad message: {e}")));
    }
}
