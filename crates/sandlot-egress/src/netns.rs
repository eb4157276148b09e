//! The proxy's listening socket, made inside a sandbox's network namespace.
//!
//! Why a TCP socket inside the namespace rather than a unix socket bind-mounted into the
//! sandbox: the clients that must go through the proxy (pip, requests, urllib, curl, npm...)
//! take `HTTP_PROXY=http://host:port`, a TCP address; none speaks HTTP over a unix socket
//! path. A listening socket keeps the namespace it was created in, so one created in the
//! sandbox's namespace is reachable at `127.0.0.1:3128` from that sandbox and from nowhere
//! else: not from the host (whose loopback is another one), not from another sandbox (each has
//! its own loopback only). The server still accepts on it from its own tokio runtime, and the
//! connections it makes upstream are made in the host's namespace.
//!
//! `setns` changes the namespace of the calling thread only, so the socket is made on a thread
//! of its own that exits right after (as `Runtime::dial_port` does): a thread of tokio's pools
//! would carry the sandbox's namespace into whatever ran on it next.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

/// A TCP listener on `127.0.0.1:port` inside the network namespace of process `pid`
/// (`/proc/<pid>/ns/net`; a thread id works too). Prefer [`listen_in_netns_fd`] with a pidfd
/// when the caller has one: a pid can be recycled between choosing it and opening its
/// namespace.
pub fn listen_in_netns(pid: u32, port: u16) -> io::Result<TcpListener> {
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/net"))?;
    listen_in_netns_fd(ns.as_fd(), port)
}

/// A TCP listener on `127.0.0.1:port` inside the network namespace named by `ns`: a namespace
/// fd (`/proc/<pid>/ns/net`) or a pidfd (Linux 5.8+).
pub fn listen_in_netns_fd(ns: BorrowedFd<'_>, port: u16) -> io::Result<TcpListener> {
    let ns: OwnedFd = ns.try_clone_to_owned()?;
    std::thread::Builder::new()
        .name("sandlot-egress-netns".into())
        .spawn(move || {
            // SAFETY: setns on an fd we own; it changes only this thread's network namespace,
            // and this thread ends once the socket is made.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            // std sets SO_REUSEADDR (a restarted listener need not wait out TIME_WAIT) and
            // close-on-exec.
            TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
        })?
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the namespace thread panicked")))
}
