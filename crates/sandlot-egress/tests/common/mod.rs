//! Test rig for the egress proxy: a real network namespace (loopback only, like a sandbox's),
//! the proxy listening inside it, clients connecting from inside it, and real upstream servers
//! on the host's 127.0.0.x. Needs root (unshare and setns of network namespaces). All traffic
//! stays on loopback.

#![allow(dead_code)]

use sandlot_egress::{
    listen_in_netns, Egress, EgressConfig, EgressEvent, EgressHooks, GateDecision, NetworkRules,
    PROXY_PORT,
};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Upper bound for anything a test waits on.
pub const WAIT: Duration = Duration::from_secs(10);

/// A fresh network namespace with only `lo` (up), held by a parked thread (so it has a tid
/// whose `/proc/<tid>/ns/net` names it) and an open fd.
pub struct Netns {
    pub fd: OwnedFd,
    pub tid: u32,
    stop: Option<mpsc::Sender<()>>,
}

impl Netns {
    pub fn new() -> Netns {
        let (tx, rx) = mpsc::channel();
        let (stop, stopped) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            let made = (|| -> io::Result<(OwnedFd, u32)> {
                // SAFETY: unshare of the network namespace affects only this thread.
                if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                    return Err(io::Error::last_os_error());
                }
                lo_up()?;
                let fd = std::fs::File::open("/proc/thread-self/ns/net")?;
                // SAFETY: gettid has no preconditions.
                let tid = unsafe { libc::gettid() } as u32;
                Ok((fd.into(), tid))
            })();
            let _ = tx.send(made);
            let _ = stopped.recv();
        });
        let (fd, tid) = rx
            .recv()
            .unwrap()
            .expect("creating a network namespace (the egress tests run as root)");
        Netns {
            fd,
            tid,
            stop: Some(stop),
        }
    }

    /// Runs `f` on a thread inside this namespace.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let fd = self.fd.try_clone().unwrap();
        std::thread::spawn(move || {
            // SAFETY: setns on a namespace fd we own; only this short-lived thread moves.
            let entered = unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(entered, 0, "setns: {}", io::Error::last_os_error());
            f()
        })
        .join()
        .unwrap()
    }

    /// A TCP connection made from inside this namespace.
    pub fn connect(&self, addr: SocketAddr) -> io::Result<TcpStream> {
        let std = self.run(move || std::net::TcpStream::connect_timeout(&addr, WAIT))?;
        std.set_nonblocking(true)?;
        TcpStream::from_std(std)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        self.stop.take();
    }
}

/// Brings `lo` up in the calling thread's namespace.
fn lo_up() -> io::Result<()> {
    // SAFETY: socket(2) with constant arguments; checked below.
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if sock < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: ifreq is plain data; all zeroes is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in ifr.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write the ifreq we own; sock is ours.
    let res = unsafe {
        if libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut ifr) != 0 {
            -1
        } else {
            ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            libc::ioctl(sock, libc::SIOCSIFFLAGS, &ifr)
        }
    };
    let err = io::Error::last_os_error();
    // SAFETY: closing the socket we opened.
    unsafe { libc::close(sock) };
    if res != 0 {
        return Err(err);
    }
    Ok(())
}

/// Hooks that record everything and deny the hosts in `deny`.
#[derive(Default)]
pub struct TestHooks {
    pub events: Mutex<Vec<EgressEvent>>,
    pub canaries: Mutex<Vec<(String, String)>>,
    pub deny: Mutex<Vec<String>>,
    pub gates: AtomicUsize,
}

impl EgressHooks for TestHooks {
    fn gate(&self, _: &str, host: &str, _: u16, _: IpAddr, _: &str) -> GateDecision {
        let n = self.gates.fetch_add(1, Ordering::SeqCst);
        if self.deny.lock().unwrap().iter().any(|d| d == host) {
            GateDecision::deny("test policy says no", format!("dec-{n}"))
        } else {
            GateDecision::allow(format!("dec-{n}"))
        }
    }

    fn record(&self, event: EgressEvent) {
        self.events.lock().unwrap().push(event);
    }

    fn canary(&self, sandbox_id: &str, location: &str) {
        self.canaries
            .lock()
            .unwrap()
            .push((sandbox_id.into(), location.into()));
    }
}

impl TestHooks {
    /// Waits for (and returns) the first recorded event matching `pred`.
    pub async fn wait_event(&self, pred: impl Fn(&EgressEvent) -> bool) -> EgressEvent {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(e) = self.events.lock().unwrap().iter().find(|e| pred(e)) {
                return e.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no matching event; have {:#?}",
                self.events.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// An upstream HTTP/1.1 server on `ip`: answers 200 with the request it got (head and body) as
/// the body, and keeps every request it got.
pub struct Upstream {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<String>>>,
}

impl Upstream {
    pub fn http(ip: &str) -> Upstream {
        let listener = std::net::TcpListener::bind((ip, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let log = log.clone();
                std::thread::spawn(move || {
                    let _ = serve_http(conn, &log);
                });
            }
        });
        Upstream { addr, seen }
    }

    /// A server that echoes every byte back (a stand-in for TLS through a tunnel).
    pub fn echo(ip: &str) -> Upstream {
        let listener = std::net::TcpListener::bind((ip, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let log = log.clone();
                std::thread::spawn(move || {
                    log.lock().unwrap().push("connection".into());
                    let mut conn = conn;
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
                    let mut buf = [0u8; 16384];
                    while let Ok(n) = conn.read(&mut buf) {
                        if n == 0 || conn.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = conn.shutdown(std::net::Shutdown::Write);
                });
            }
        });
        Upstream { addr, seen }
    }

    pub fn requests(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

fn serve_http(mut conn: std::net::TcpStream, log: &Mutex<Vec<String>>) -> io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        let n = conn.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let len = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = conn.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let got = String::from_utf8_lossy(&buf).to_string();
    log.lock().unwrap().push(got.clone());
    let resp = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\nkeep-alive: timeout=5\r\nx-upstream: yes\r\n\r\n{got}",
        got.len()
    );
    conn.write_all(resp.as_bytes())?;
    Ok(())
}

/// A sandbox's egress: its namespace, the proxy listening in it, and the hooks' records.
pub struct Rig {
    pub ns: Netns,
    pub egress: Egress,
    pub hooks: Arc<TestHooks>,
    pub id: String,
}

/// Names the tests resolve through the hosts map (the `.test` TLD is reserved for this).
pub fn hosts() -> HashMap<String, Vec<IpAddr>> {
    let mut map = HashMap::new();
    let mut add = |name: &str, ip: &str| {
        map.insert(name.to_string(), vec![ip.parse().unwrap()]);
    };
    add("pkg.sandlot.test", "127.0.0.2");
    add("denied.sandlot.test", "127.0.0.2");
    add("other.sandlot.test", "127.0.0.3");
    add("rebind.sandlot.test", "127.0.0.1");
    add("meta.sandlot.test", "169.254.169.254");
    map
}

pub fn rules(entries: &[&str]) -> NetworkRules {
    NetworkRules::parse(&entries.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
}

impl Rig {
    pub async fn new(cfg: EgressConfig, allow: &[&str]) -> Rig {
        let ns = Netns::new();
        let hooks = Arc::new(TestHooks::default());
        let egress = Egress::new(
            EgressConfig {
                hosts: hosts(),
                ..cfg
            },
            hooks.clone(),
        );
        let id = "sb-test".to_string();
        // Through the thread id: `listen_in_netns` is what the server calls with a pid.
        let listener = listen_in_netns(ns.tid, PROXY_PORT).unwrap();
        egress.attach(&id, listener).unwrap();
        egress.set_rules(&id, rules(allow));
        Rig {
            ns,
            egress,
            hooks,
            id,
        }
    }

    /// A connection to the proxy from inside the sandbox's namespace.
    pub fn client(&self) -> TcpStream {
        self.ns
            .connect(SocketAddr::from(([127, 0, 0, 1], PROXY_PORT)))
            .expect("connecting to the proxy inside the namespace")
    }

    /// Sends `raw` on a new connection and reads the whole answer (tests send
    /// `Connection: close`).
    pub async fn send(&self, raw: &[u8]) -> String {
        let mut c = self.client();
        c.write_all(raw).await.unwrap();
        read_all(&mut c).await
    }

    /// A plain-HTTP GET through the proxy.
    pub async fn get(&self, url: &str, extra_headers: &str) -> String {
        let authority = url
            .strip_prefix("http://")
            .and_then(|r| r.split('/').next())
            .unwrap_or("");
        self.send(
            format!(
                "GET {url} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n{extra_headers}\r\n"
            )
            .as_bytes(),
        )
        .await
    }

    /// Sends `CONNECT authority` and returns the connection and the answer's head.
    pub async fn connect(&self, authority: &str) -> (TcpStream, String) {
        let mut c = self.client();
        c.write_all(
            format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            let n = tokio::time::timeout(WAIT, c.read(&mut byte))
                .await
                .expect("CONNECT answer in time")
                .unwrap();
            if n == 0 {
                break;
            }
            head.push(byte[0]);
        }
        let mut head = String::from_utf8_lossy(&head).to_string();
        if !head.starts_with("HTTP/1.1 200") {
            // A refusal: read its body too.
            head.push_str(&read_all(&mut c).await);
        }
        (c, head)
    }
}

pub async fn read_all(c: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(WAIT, c.read_to_end(&mut out))
        .await
        .expect("the answer (and the close) in time");
    String::from_utf8_lossy(&out).to_string()
}

pub fn status(resp: &str) -> u16 {
    resp.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {resp:?}"))
}

pub fn body(resp: &str) -> &str {
    resp.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}
