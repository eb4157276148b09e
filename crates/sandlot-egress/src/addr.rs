//! The one address classifier: which destinations the server never reaches on a tenant's
//! behalf, and why. Egress uses it for every address a request's host resolves to (a range it
//! names is then reachable only through a CIDR rule inside that range); webhooks use it when a
//! URL is registered and on every address a delivery connects to.
//!
//! [`classify`] refuses, with words for the refusal:
//!
//! - every range of [`SPECIAL_RANGES`]: loopback, private (RFC 1918, unique-local, site-local),
//!   link-local and the cloud metadata addresses, carrier-grade NAT, unspecified, broadcast,
//!   multicast, reserved, documentation, benchmarking, IETF protocol assignments;
//! - the IPv6 spellings of an IPv4 address: IPv4-mapped (`::ffff:a.b.c.d`) is classified as the
//!   IPv4 address it is; IPv4-compatible (`::a.b.c.d`), NAT64 (`64:ff9b::/96`,
//!   `64:ff9b:1::/48`), 6to4 (`2002::/16`) and Teredo (`2001::/32`) are refused as whole
//!   ranges, since the network may translate them to any IPv4 address (the refusal names the
//!   embedded address);
//! - the host's own addresses, read from its interfaces (getifaddrs, at most once a second):
//!   a public address of the server reaches the same services its loopback does.
//!
//! A [`Forbidden`] says whether the address is on the server's own side of the network
//! ([`Forbidden::private`]: loopback, private, CGNAT, benchmarking, the host's own), which an
//! operator may open (an explicit CIDR rule for egress, `SANDLOT_WEBHOOK_ALLOW_PRIVATE=1` for
//! webhooks), or never to be called by a webhook (metadata, link-local, multicast, the
//! transition spellings...).

use ipnet::IpNet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Whether a range is the server's own side of the network (an operator may open it) or a
/// destination that is never a legitimate callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Loopback, private, CGNAT, benchmarking: an operator may open it.
    Private,
    /// Metadata, link-local, multicast, documentation, transition spellings: never for a
    /// webhook; egress opens it only through a CIDR rule inside it.
    Never,
}

/// Address ranges refused unless a CIDR of the rules inside the range covers the address, each
/// with the words used in refusals and whether it is the server's own side of the network.
pub const SPECIAL_RANGES: &[(&str, &str, Reach)] = &[
    (
        "0.0.0.0/8",
        "an unspecified ('this network') address",
        Reach::Never,
    ),
    ("10.0.0.0/8", "a private (RFC 1918) address", Reach::Private),
    (
        "100.64.0.0/10",
        "a carrier-grade NAT address",
        Reach::Private,
    ),
    ("127.0.0.0/8", "a loopback address", Reach::Private),
    ("169.254.0.0/16", "a link-local address", Reach::Never),
    (
        "169.254.169.254/32",
        "the cloud metadata address (link-local)",
        Reach::Never,
    ),
    (
        "172.16.0.0/12",
        "a private (RFC 1918) address",
        Reach::Private,
    ),
    (
        "192.0.0.0/24",
        "an IETF protocol assignment address",
        Reach::Never,
    ),
    ("192.0.2.0/24", "a documentation address", Reach::Never),
    ("192.88.99.0/24", "a 6to4 relay address", Reach::Never),
    (
        "192.168.0.0/16",
        "a private (RFC 1918) address",
        Reach::Private,
    ),
    ("198.18.0.0/15", "a benchmarking address", Reach::Private),
    ("198.51.100.0/24", "a documentation address", Reach::Never),
    ("203.0.113.0/24", "a documentation address", Reach::Never),
    ("224.0.0.0/4", "a multicast address", Reach::Never),
    ("240.0.0.0/4", "a reserved address", Reach::Never),
    ("255.255.255.255/32", "the broadcast address", Reach::Never),
    ("::/96", "an IPv4-compatible IPv6 address", Reach::Never),
    ("::/128", "the unspecified address", Reach::Never),
    ("::1/128", "a loopback address", Reach::Private),
    ("::ffff:0:0/96", "an IPv4-mapped IPv6 address", Reach::Never),
    ("64:ff9b::/96", "a NAT64 address", Reach::Never),
    ("64:ff9b:1::/48", "a NAT64 address", Reach::Never),
    ("100::/64", "a discard-only address", Reach::Never),
    ("2001::/32", "a Teredo address", Reach::Never),
    ("2001:db8::/32", "a documentation address", Reach::Never),
    ("2002::/16", "a 6to4 address", Reach::Never),
    ("3fff::/20", "a documentation address", Reach::Never),
    (
        "fc00::/7",
        "a unique local (private) IPv6 address",
        Reach::Private,
    ),
    (
        "fd00:ec2::254/128",
        "the cloud metadata address (link-local)",
        Reach::Never,
    ),
    ("fe80::/10", "a link-local address", Reach::Never),
    (
        "fec0::/10",
        "a site-local (private) address",
        Reach::Private,
    ),
    ("ff00::/8", "a multicast address", Reach::Never),
];

/// Why an address is refused: what it is, the range that says so, and the IPv4 address an
/// IPv6 transition spelling carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forbidden {
    /// The words for a refusal ("a loopback address").
    pub what: &'static str,
    /// The narrowest range naming the address: only a CIDR inside it opens the address.
    pub range: IpNet,
    /// Whether an operator may open it (see [`Reach`]).
    pub reach: Reach,
    /// The IPv4 address a transition spelling (compatible, NAT64, 6to4, Teredo) embeds.
    pub embeds: Option<Ipv4Addr>,
}

impl Forbidden {
    /// Whether the address is the server's own side of the network ([`Reach::Private`]).
    pub fn private(&self) -> bool {
        self.reach == Reach::Private
    }
}

impl fmt::Display for Forbidden {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.what)?;
        if let Some(v4) = self.embeds {
            write!(f, " (embedding {v4}")?;
            if let Some(inner) = classify_table(IpAddr::V4(v4)) {
                write!(f, ", {}", inner.what)?;
            }
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// Why the server must not connect to `ip`, or `None` when it may.
pub fn classify(ip: IpAddr) -> Option<Forbidden> {
    classify_among(ip, &own_addresses())
}

/// [`classify`], with `own` as the host's addresses.
pub fn classify_among(ip: IpAddr, own: &[IpAddr]) -> Option<Forbidden> {
    let ip = canonical(ip);
    let listed = classify_table(ip);
    let loopback = match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6.is_loopback(),
    };
    // The host's own address is narrower than any range it sits in (so only a rule naming it
    // opens it); loopback stays loopback, which an operator opens as a range.
    if !loopback && own.iter().any(|a| canonical(*a) == ip) {
        return Some(Forbidden {
            what: "one of this host's own addresses",
            range: IpNet::from(ip),
            reach: listed.as_ref().map_or(Reach::Private, |l| l.reach),
            embeds: None,
        });
    }
    listed
}

/// The narrowest range of [`SPECIAL_RANGES`] holding `ip` (already canonical).
fn classify_table(ip: IpAddr) -> Option<Forbidden> {
    let (range, what, reach) = special_ranges()
        .filter(|(net, _, _)| net.contains(&ip))
        .max_by_key(|(net, _, _)| net.prefix_len())?;
    Some(Forbidden {
        what,
        range,
        reach,
        embeds: match ip {
            IpAddr::V6(v6) => embedded_v4(v6),
            IpAddr::V4(_) => None,
        },
    })
}

/// The IPv4 address an IPv4-compatible, NAT64, 6to4 or Teredo address carries.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let o = ip.octets();
    let last32 = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    match s {
        [0, 0, 0, 0, 0, 0, hi, _] if hi != 0 => Some(last32),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(last32),
        // RFC 8215 leaves the layout of the local-use prefix to the operator; the last 32 bits
        // are the common choice.
        [0x64, 0xff9b, 1, ..] => Some(last32),
        [0x2002, ..] => Some(Ipv4Addr::new(o[2], o[3], o[4], o[5])),
        // Teredo: the client's public address, inverted, in the last 32 bits.
        [0x2001, 0, ..] => Some(Ipv4Addr::from(!u32::from(last32))),
        _ => None,
    }
}

/// The parsed [`SPECIAL_RANGES`].
pub(crate) fn special_ranges() -> impl Iterator<Item = (IpNet, &'static str, Reach)> {
    static PARSED: OnceLock<Vec<(IpNet, &'static str, Reach)>> = OnceLock::new();
    PARSED
        .get_or_init(|| {
            SPECIAL_RANGES
                .iter()
                .map(|(net, what, reach)| {
                    (
                        net.parse::<IpNet>()
                            .expect("the special ranges are valid CIDRs"),
                        *what,
                        *reach,
                    )
                })
                .collect()
        })
        .iter()
        .copied()
}

/// `ip`, with an IPv4-mapped IPv6 address turned into the IPv4 address it carries.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => ip,
        },
        v4 => v4,
    }
}

/// How long the host's addresses are reused before its interfaces are read again.
const OWN_ADDRESSES_TTL: Duration = Duration::from_secs(1);

/// The host's interface addresses (of the calling thread's network namespace), read at most
/// once per [`OWN_ADDRESSES_TTL`]. A failure to read them keeps the previous ones.
pub fn own_addresses() -> Arc<Vec<IpAddr>> {
    static CACHE: Mutex<Option<(Instant, Arc<Vec<IpAddr>>)>> = Mutex::new(None);
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((read, addrs)) = cache.as_ref() {
        if read.elapsed() < OWN_ADDRESSES_TTL {
            return addrs.clone();
        }
    }
    let addrs = match read_own_addresses() {
        Ok(addrs) => Arc::new(addrs),
        Err(err) => {
            tracing::warn!(error = %err, "reading the host's interface addresses failed");
            cache
                .as_ref()
                .map_or_else(|| Arc::new(Vec::new()), |(_, a)| a.clone())
        }
    };
    *cache = Some((Instant::now(), addrs.clone()));
    addrs
}

/// The calling thread's network namespace's interface addresses, read now.
pub fn read_own_addresses() -> nix::Result<Vec<IpAddr>> {
    let mut addrs: Vec<IpAddr> = Vec::new();
    for ifa in nix::ifaddrs::getifaddrs()? {
        let Some(addr) = ifa.address else { continue };
        let ip = if let Some(v4) = addr.as_sockaddr_in() {
            IpAddr::V4(v4.ip())
        } else if let Some(v6) = addr.as_sockaddr_in6() {
            IpAddr::V6(v6.ip())
        } else {
            continue;
        };
        if !addrs.contains(&ip) {
            addrs.push(ip);
        }
    }
    Ok(addrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn why(ip: &str) -> Option<Forbidden> {
        classify_among(ip.parse().unwrap(), &[])
    }

    #[test]
    fn every_refused_spelling_is_classified() {
        for (ip, words) in [
            ("127.0.0.1", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("192.168.1.1", "private"),
            ("100.64.0.1", "carrier-grade NAT"),
            ("169.254.1.1", "link-local"),
            ("169.254.169.254", "cloud metadata"),
            ("0.0.0.0", "unspecified"),
            ("255.255.255.255", "broadcast"),
            ("224.0.0.1", "multicast"),
            ("192.0.2.1", "documentation"),
            ("198.18.0.1", "benchmarking"),
            ("::", "unspecified"),
            ("::1", "loopback"),
            (
                "::127.0.0.1",
                "IPv4-compatible IPv6 address (embedding 127.0.0.1, a loopback",
            ),
            ("::8.8.8.8", "IPv4-compatible"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:169.254.169.254", "cloud metadata"),
            (
                "64:ff9b::7f00:1",
                "NAT64 address (embedding 127.0.0.1, a loopback",
            ),
            ("64:ff9b::808:808", "NAT64"),
            ("64:ff9b:1::1", "NAT64"),
            (
                "2002:7f00:1::1",
                "6to4 address (embedding 127.0.0.1, a loopback",
            ),
            (
                "2001:0:4136:e378:8000:63bf:80ff:fffe",
                "Teredo address (embedding 127.0.0.1, a loopback",
            ),
            ("2001:db8::1", "documentation"),
            ("fd12::1", "unique local"),
            ("fd00:ec2::254", "cloud metadata"),
            ("fe80::1", "link-local"),
            ("fec0::1", "site-local"),
            ("ff02::1", "multicast"),
        ] {
            let got = why(ip)
                .unwrap_or_else(|| panic!("{ip} allowed"))
                .to_string();
            assert!(got.contains(words), "{ip}: {got}");
        }
        for ip in [
            "93.184.215.14",
            "8.8.8.8",
            "2606:4700::1111",
            "2a00:1450::1",
        ] {
            assert_eq!(why(ip), None, "{ip}");
        }
    }

    #[test]
    fn reach_says_what_an_operator_may_open() {
        for ip in [
            "127.0.0.1",
            "10.0.0.1",
            "::1",
            "fd12::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(why(ip).unwrap().private(), "{ip}");
        }
        for ip in [
            "169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::7f00:1",
            "2002:7f00:1::1",
            "2001:0:4136:e378:8000:63bf:80ff:fffe",
            "fd00:ec2::254",
        ] {
            assert!(!why(ip).unwrap().private(), "{ip}");
        }
        // The narrowest range names the address: a rule for link-local is not one for metadata.
        assert_eq!(
            why("169.254.169.254").unwrap().range,
            "169.254.169.254/32".parse::<IpNet>().unwrap()
        );
    }

    #[test]
    fn the_hosts_own_addresses_are_refused() {
        let own: Vec<IpAddr> = vec![
            "93.184.215.14".parse().unwrap(),
            "2606:4700::1111".parse().unwrap(),
            "127.0.0.1".parse().unwrap(),
            "192.0.2.2".parse().unwrap(),
        ];
        let pub4 = classify_among("93.184.215.14".parse().unwrap(), &own).unwrap();
        assert!(pub4.what.contains("this host's own"), "{pub4}");
        assert!(pub4.private());
        assert_eq!(pub4.range, "93.184.215.14/32".parse::<IpNet>().unwrap());
        let mapped = classify_among("::ffff:93.184.215.14".parse().unwrap(), &own).unwrap();
        assert!(mapped.what.contains("this host's own"), "{mapped}");
        let pub6 = classify_among("2606:4700::1111".parse().unwrap(), &own).unwrap();
        assert!(pub6.what.contains("this host's own"), "{pub6}");
        // Loopback stays loopback; a documentation address of the host stays never-reachable.
        let lo = classify_among("127.0.0.1".parse().unwrap(), &own).unwrap();
        assert_eq!(lo.what, "a loopback address");
        assert!(!classify_among("192.0.2.2".parse().unwrap(), &own)
            .unwrap()
            .private());
        assert_eq!(classify_among("93.184.215.15".parse().unwrap(), &own), None);
    }

    #[test]
    fn the_hosts_interfaces_are_read() {
        // A network namespace of this test's own, with a public address on its loopback
        // interface: nothing routes there, and it is the only way to know the host's set.
        let got = std::thread::spawn(|| {
            // SAFETY: unshare of the network namespace affects only this thread.
            let unshared = unsafe { libc::unshare(libc::CLONE_NEWNET) };
            assert_eq!(unshared, 0, "unshare (needs root)");
            let added = std::process::Command::new("ip")
                .args(["addr", "add", "93.184.215.14/32", "dev", "lo"])
                .status()
                .expect("running ip");
            assert!(added.success());
            read_own_addresses().unwrap()
        })
        .join()
        .unwrap();
        let ip: IpAddr = "93.184.215.14".parse().unwrap();
        assert!(got.contains(&ip), "{got:?}");
        assert!(classify_among(ip, &got)
            .unwrap()
            .what
            .contains("this host's own"));
        // The server's namespace: whatever its addresses are, each is refused.
        for a in own_addresses().iter() {
            assert!(classify(*a).is_some(), "{a} allowed");
        }
    }
}
