//! Real tests of the network layer (`sandlot_jail::net`): a forked child in a fresh network
//! namespace sees loopback only, down until `loopback_up`; after it loopback works and every
//! other address answers `ENETUNREACH`. From inside a real sandbox, the host's own loopback
//! services are not reachable either: its `127.0.0.1` is its own.

use serde_json::{json, Value};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};

use crate::common;

use common::sandbox::{in_sandbox, test_config};
use common::{in_child_value, is_root, skip};
use sandlot_jail::net;

/// Devices some kernels create in every new network namespace when their tunnel module is
/// loaded (`net.core.fb_tunnels_only_for_init_net = 0`): always down, no address, no route.
const FALLBACK_TUNNELS: &[&str] = &[
    "tunl0", "sit0", "gre0", "gretap0", "erspan0", "ip_vti0", "ip6_vti0", "ip6tnl0", "ip6gre0",
];

/// The namespace's interfaces, each with whether it is up.
fn interfaces() -> Value {
    // SAFETY: plain libc call; the list is freed below.
    let list = unsafe { libc::if_nameindex() };
    if list.is_null() {
        return json!({"errno": common::errno()});
    }
    let mut out = serde_json::Map::new();
    // SAFETY: the array ends with an entry whose index is 0; each name is a C string.
    unsafe {
        let mut p = list;
        while (*p).if_index != 0 {
            let name = std::ffi::CStr::from_ptr((*p).if_name);
            let up = is_up(name);
            out.insert(name.to_string_lossy().into_owned(), up);
            p = p.add(1);
        }
        libc::if_freenameindex(list);
    }
    Value::Object(out)
}

/// Whether interface `name` is up (`SIOCGIFFLAGS`), or the errno.
fn is_up(name: &std::ffi::CStr) -> Value {
    // SAFETY: creating a socket has no memory effects; it is closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return json!({"errno": common::errno()});
    }
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name.to_bytes()) {
        *dst = *src as libc::c_char;
    }
    // SAFETY: `req` is a valid ifreq for SIOCGIFFLAGS; the union field read is the one it set.
    let v = unsafe {
        if libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) != 0 {
            json!({"errno": common::errno()})
        } else {
            json!(req.ifr_ifru.ifru_flags & libc::IFF_UP as libc::c_short != 0)
        }
    };
    // SAFETY: `fd` is ours and open.
    unsafe { libc::close(fd) };
    v
}

/// Everything but loopback, which must be exactly one device, up or not as `lo_up`.
fn assert_only_loopback(got: &Value, lo_up: bool) {
    let map = got.as_object().expect("interfaces");
    assert_eq!(map.get("lo"), Some(&json!(lo_up)), "{got}");
    for (name, up) in map.iter().filter(|(n, _)| *n != "lo") {
        assert!(
            FALLBACK_TUNNELS.contains(&name.as_str()) && *up == json!(false),
            "unexpected interface {name} (up: {up}) in {got}"
        );
    }
}

/// errno of a TCP connect to `addr` (0: connected).
fn tcp_connect(addr: &str) -> i32 {
    let addr: SocketAddr = addr.parse().unwrap();
    match TcpStream::connect(addr) {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

/// errno of a UDP connect to `addr` (routing is decided at connect for UDP too).
fn udp_connect(addr: &str) -> i32 {
    let addr: SocketAddr = addr.parse().unwrap();
    let local: IpAddr = if addr.is_ipv4() {
        "0.0.0.0".parse().unwrap()
    } else {
        "::".parse().unwrap()
    };
    let sock = match UdpSocket::bind((local, 0)) {
        Ok(s) => s,
        Err(e) => return e.raw_os_error().unwrap_or(-1),
    };
    match sock.connect(addr) {
        Ok(()) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

/// A TCP round trip on the namespace's own loopback (0: it worked).
fn loopback_round_trip() -> i32 {
    let Ok(l) = TcpListener::bind("127.0.0.1:0") else {
        return common::errno();
    };
    let Ok(addr) = l.local_addr() else {
        return common::errno();
    };
    match TcpStream::connect(addr) {
        Ok(_) => l
            .accept()
            .map_or_else(|e| e.raw_os_error().unwrap_or(-1), |_| 0),
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

/// What a non-loopback IPv6 destination answers: `ENETUNREACH`, or `EAFNOSUPPORT` on a kernel
/// booted without IPv6.
fn ipv6_refusal() -> i32 {
    if std::path::Path::new("/proc/net/if_inet6").exists() {
        libc::ENETUNREACH
    } else {
        libc::EAFNOSUPPORT
    }
}

#[test]
fn fresh_namespace_has_only_loopback_and_loopback_up_brings_it_up() {
    let got = in_child_value(|| {
        // A user namespace too, so this needs no privilege on the host.
        // SAFETY: unshare in a single-threaded forked child.
        if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) } != 0 {
            return json!({"setup": "unshare", "errno": common::errno()});
        }
        let before =
            json!({"interfaces": interfaces(), "tcp 127.0.0.1": tcp_connect("127.0.0.1:9")});
        let up = net::loopback_up().map_err(|e| e.to_string()).err();
        json!({
            "before": before,
            "loopback_up error": up,
            "interfaces": interfaces(),
            "loopback round trip": loopback_round_trip(),
        })
    });
    // Control: a fresh namespace's loopback is down, so even 127.0.0.1 is unreachable.
    assert_only_loopback(&got["before"]["interfaces"], false);
    assert_eq!(got["before"]["tcp 127.0.0.1"], libc::ENETUNREACH, "{got}");
    assert_eq!(got["loopback_up error"], Value::Null);
    assert_only_loopback(&got["interfaces"], true);
    assert_eq!(got["loopback round trip"], 0);
}

#[test]
fn non_loopback_addresses_are_enetunreach() {
    let got = in_child_value(|| {
        // SAFETY: unshare in a single-threaded forked child.
        if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) } != 0 {
            return json!({"setup": "unshare", "errno": common::errno()});
        }
        if let Err(e) = net::loopback_up() {
            return json!({"setup": e.to_string()});
        }
        // Documentation and private ranges only: nothing would be reached even with a route.
        json!({
            "tcp 192.0.2.1": tcp_connect("192.0.2.1:80"),
            "tcp 10.0.0.1": tcp_connect("10.0.0.1:443"),
            "udp 198.51.100.1": udp_connect("198.51.100.1:53"),
            "tcp [2001:db8::1]": tcp_connect("[2001:db8::1]:80"),
        })
    });
    let unreach = libc::ENETUNREACH;
    assert_eq!(
        got,
        json!({
            "tcp 192.0.2.1": unreach,
            "tcp 10.0.0.1": unreach,
            "udp 198.51.100.1": unreach,
            "tcp [2001:db8::1]": ipv6_refusal(),
        })
    );
}

#[test]
fn sandbox_reaches_neither_the_network_nor_the_hosts_loopback() {
    if !is_root() {
        skip("not root: a sandbox needs a base root and id maps");
        return;
    }
    // A service on the host's loopback, which the sandbox must not reach.
    let host_service = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = host_service.local_addr().unwrap().port();
    let got = in_sandbox(&test_config(), || {
        json!({
            "interfaces": interfaces(),
            "host service": tcp_connect(&format!("127.0.0.1:{port}")),
            "tcp 192.0.2.1": tcp_connect("192.0.2.1:80"),
            "udp 198.51.100.1": udp_connect("198.51.100.1:53"),
            "own loopback": loopback_round_trip(),
        })
    });
    assert_only_loopback(&got["interfaces"], true);
    // Its 127.0.0.1 is its own loopback, where nothing listens on that port.
    assert_eq!(got["host service"], libc::ECONNREFUSED);
    assert_eq!(got["tcp 192.0.2.1"], libc::ENETUNREACH);
    assert_eq!(got["udp 198.51.100.1"], libc::ENETUNREACH);
    assert_eq!(got["own loopback"], 0);
    // And the host's service saw no connection.
    host_service.set_nonblocking(true).unwrap();
    let accepted = host_service.accept().map_err(|e| e.kind());
    assert_eq!(accepted.map(|_| ()), Err(std::io::ErrorKind::WouldBlock));
}
