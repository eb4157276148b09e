//! Connections into a sandbox's network namespace, to a TCP port it was created to expose.
//!
//! A sandbox's network namespace has only its own loopback, so an app it serves (`python -m
//! http.server`, a FastAPI or Streamlit server) listens on `127.0.0.1:<port>` there and nothing
//! outside can connect to it. [`Runtime::dial_port`] makes the socket *inside* that namespace:
//! a short-lived thread enters the namespace (`setns` on the driver's pidfd, so a recycled pid
//! can never redirect it), creates non-blocking TCP sockets (IPv4, and IPv6 for apps bound to
//! `::1` only) and exits; a socket keeps the namespace it was created in, and is connected to
//! `127.0.0.1:<port>` (then `[::1]:<port>` if that is refused) back on the server's runtime,
//! bounded by [`CONNECT_TIMEOUT`]. No thread of the server stays in a sandbox's
//! namespace, and the address is a constant: nothing a client or the sandbox sends can point
//! the connection anywhere but that sandbox's loopback.
//!
//! Which ports may be dialled is fixed when the sandbox is created (`ports`, at most
//! [`MAX_PORTS`]; `all_ports` for 1024-65535, as E2B's contract has it); forks inherit their
//! parent's. A paused sandbox is not resumed for a port: its processes (and so the app) do not
//! survive a pause, and a resume would cost a boot only to find nothing listening; it answers
//! `port_unreachable` saying why. Each dial counts as activity for the idle timeout, and
//! [`Runtime::port_activity`] lets a long-lived relay (a WebSocket) keep counting.

use crate::error::RuntimeError;
use crate::sandbox::Live;
use crate::util::lock;
use crate::Runtime;
use sandlot_types::{CreateSandbox, Sandbox, SandboxState};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpSocket, TcpStream};

/// Most ports one sandbox may list in `ports`.
pub(crate) const MAX_PORTS: usize = 32;

/// The ports `all_ports` exposes: every unprivileged one (a sandbox has no capability to bind
/// below 1024 anyway).
pub(crate) const ALL_PORTS: std::ops::RangeInclusive<u16> = 1024..=65535;

/// How long connecting to an app may take. On loopback a listening socket answers at once; a
/// full accept backlog (an app that stopped accepting) is what this bounds.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Checks the `ports` of a creation request: at most [`MAX_PORTS`], each 1-65535.
pub(crate) fn check_ports(req: &CreateSandbox) -> Result<(), RuntimeError> {
    if req.ports.len() > MAX_PORTS {
        return Err(RuntimeError::BadPorts {
            reason: format!(
                "at most {MAX_PORTS} ports, not {} (all_ports: true exposes 1024-65535)",
                req.ports.len()
            ),
        });
    }
    if req.ports.contains(&0) {
        return Err(RuntimeError::BadPorts {
            reason: "a port is 1 to 65535, not 0".into(),
        });
    }
    Ok(())
}

/// The ports a sandbox created for `req` exposes, sorted, each once.
pub(crate) fn requested_ports(req: &CreateSandbox) -> Vec<u16> {
    let mut ports = req.ports.clone();
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// Whether a sandbox recorded as `info` exposes `port`.
pub(crate) fn exposes(info: &Sandbox, port: u16) -> bool {
    info.ports.contains(&port) || (info.all_ports && ALL_PORTS.contains(&port))
}

impl Runtime {
    /// A TCP connection to `127.0.0.1:port` inside sandbox `id`'s network namespace.
    ///
    /// Errors: `SandboxNotFound`/`SandboxGone` for an unknown or ended sandbox,
    /// `PortNotExposed` for a port it was not created to expose (checked first, whatever its
    /// state), `SandboxInFailedState`, and `PortUnreachable` when it has no processes (paused,
    /// stopped by a server restart, restarting) or nothing accepts on the port in time.
    pub async fn dial_port(&self, id: &str, port: u16) -> Result<TcpStream, RuntimeError> {
        let e = self.entry(id)?;
        let state = {
            let info = lock(&e.info);
            if !exposes(&info, port) {
                return Err(RuntimeError::PortNotExposed {
                    id: id.to_string(),
                    port,
                });
            }
            info.state
        };
        let unreachable = |reason: &str| RuntimeError::PortUnreachable {
            id: id.to_string(),
            port,
            reason: reason.to_string(),
        };
        match state {
            SandboxState::Running => {}
            SandboxState::Paused => {
                return Err(unreachable(
                    "the sandbox is paused, and its processes (with any app they served) \
                     stopped; resume it and start the app again",
                ))
            }
            SandboxState::Failed => {
                return Err(RuntimeError::SandboxInFailedState {
                    id: id.to_string(),
                    reason: lock(&e.info).ended_reason.clone().unwrap_or_default(),
                })
            }
            _ => {
                return Err(unreachable(
                    "the sandbox has no processes (the server restarted); run code in it to \
                     restart them, then start the app again",
                ))
            }
        }
        let live = e
            .live()
            .filter(|l| !l.is_dead())
            .ok_or_else(|| unreachable("the sandbox's processes are restarting"))?;
        self.touch(&e);
        let (v4, v6) = sockets_in_sandbox(live)
            .await
            .map_err(|err| unreachable(&format!("entering its network: {err}")))?;
        // An app bound to `localhost` may listen on ::1 only (Node, Vite): IPv6 loopback is
        // tried when IPv4's refuses.
        match connect(v4, Ipv4Addr::LOCALHOST.into(), port).await {
            Ok(stream) => return Ok(stream),
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionRefused => {}
            Err(err) => return Err(unreachable(&err.to_string())),
        }
        let Some(v6) = v6 else {
            return Err(unreachable(&refused_reason()));
        };
        match connect(v6, Ipv6Addr::LOCALHOST.into(), port).await {
            Ok(stream) => Ok(stream),
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionRefused => {
                Err(unreachable(&refused_reason()))
            }
            Err(err) => Err(unreachable(&err.to_string())),
        }
    }

    /// Marks sandbox `id` active (restarting its idle timeout) while a connection to one of its
    /// ports stays open; an ended sandbox is ignored.
    pub fn port_activity(&self, id: &str) {
        if let Ok(e) = self.entry(id) {
            self.touch(&e);
        }
    }
}

fn refused_reason() -> String {
    "nothing listens on it (connection refused on 127.0.0.1 and ::1)".into()
}

/// Connects `fd`, a fresh TCP socket of `ip`'s family, to `ip:port` within
/// [`CONNECT_TIMEOUT`].
async fn connect(fd: OwnedFd, ip: IpAddr, port: u16) -> std::io::Result<TcpStream> {
    let raw = std::os::fd::IntoRawFd::into_raw_fd(fd);
    // SAFETY: `raw` is a fresh TCP socket we owned, handed over whole to the TcpSocket.
    let socket = unsafe { TcpSocket::from_raw_fd(raw) };
    match tokio::time::timeout(CONNECT_TIMEOUT, socket.connect(SocketAddr::new(ip, port))).await {
        Ok(Ok(stream)) => {
            let _ = stream.set_nodelay(true);
            Ok(stream)
        }
        Ok(Err(err)) => Err(err),
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "the connection was not accepted within {} s",
                CONNECT_TIMEOUT.as_secs()
            ),
        )),
    }
}

/// A non-blocking IPv4 TCP socket, and an IPv6 one unless the kernel has no IPv6, created in
/// the network namespace of `live`'s processes.
///
/// `setns` changes the namespace of the calling thread only, so it runs on a thread of its
/// own, which exits right after: a thread of tokio's pools would carry the sandbox's namespace
/// into whatever ran on it next.
async fn sockets_in_sandbox(live: Arc<Live>) -> std::io::Result<(OwnedFd, Option<OwnedFd>)> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("sandlot-netns".into())
        .spawn(move || {
            let made = enter_netns(&live).and_then(|()| {
                let v4 = tcp_socket(libc::AF_INET)?;
                Ok((v4, tcp_socket(libc::AF_INET6).ok()))
            });
            let _ = tx.send(made);
        })?;
    rx.await
        .unwrap_or_else(|_| Err(std::io::Error::other("the namespace thread died")))
}

/// A non-blocking, close-on-exec TCP socket of `family` in the calling thread's namespace.
fn tcp_socket(family: libc::c_int) -> std::io::Result<OwnedFd> {
    // SAFETY: socket(2) with constant arguments; the result is checked before it is owned.
    let fd = unsafe {
        libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Moves the calling thread into the network namespace of `live`'s driver: through its pidfd
/// (Linux 5.8+), which names that very process; on older kernels through
/// `/proc/<pid>/ns/net`, trusted only if the driver is still alive once it is open (so the pid
/// was not recycled in between).
fn enter_netns(live: &Live) -> std::io::Result<()> {
    // SAFETY: setns on a pidfd we own; it changes only this thread's network namespace.
    if unsafe { libc::setns(live.driver_fd.as_raw_fd(), libc::CLONE_NEWNET) } == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EINVAL) {
        return Err(err);
    }
    let ns = std::fs::File::open(format!("/proc/{}/ns/net", live.driver_pid))?;
    if !live.driver_alive() {
        return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
    }
    // SAFETY: setns on a namespace fd we just opened; only this thread moves.
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(ports: Vec<u16>) -> CreateSandbox {
        CreateSandbox {
            ports,
            ..Default::default()
        }
    }

    #[test]
    fn port_lists_are_bounded_and_nonzero() {
        assert!(check_ports(&req(vec![])).is_ok());
        assert!(check_ports(&req(vec![1, 8000, 65535])).is_ok());
        assert!(check_ports(&req((1..=32).collect())).is_ok());
        let too_many = check_ports(&req((1..=33).collect())).unwrap_err();
        assert!(
            too_many.to_string().contains("at most 32 ports"),
            "{too_many}"
        );
        let zero = check_ports(&req(vec![8000, 0])).unwrap_err();
        assert!(zero.to_string().contains("not 0"), "{zero}");
        assert_eq!(requested_ports(&req(vec![9, 3, 9, 1])), vec![1, 3, 9]);
    }
}
