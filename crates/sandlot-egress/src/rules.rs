//! A sandbox's egress allowlist, and the address ranges that stay refused whatever it says.
//!
//! An allowlist ([`NetworkRules`]) has three kinds of entries: exact domains (`example.com`),
//! wildcards (`*.example.com`: any name below it, at any depth, but not `example.com` itself,
//! as in browsers' and cloud firewalls' wildcard rules), and IP addresses or CIDRs
//! (`203.0.113.7`, `10.0.0.0/8`, `::1/128`). Empty means no egress at all.
//!
//! A request passes two checks. Its *host* must be named by the list: a domain by a domain
//! entry, a raw IP by an IP/CIDR entry (so `http://1.2.3.4/` cannot bypass a domain list).
//! Then *every* address the host resolves to must be acceptable (so one public and one private
//! answer cannot smuggle the private one in): an address in one of the [`SPECIAL_RANGES`]
//! (loopback, private, link-local, CGNAT, metadata, ...) is refused unless a CIDR entry of the
//! list covers it *and lies inside that range*. The second condition is what "explicitly" means:
//! `0.0.0.0/0` or `::/0` do not open loopback or the metadata address; `127.0.0.0/8` opens
//! loopback, and `169.254.169.254/32` (and only that, or the bare IP) opens the metadata
//! address, which sits inside link-local but is its own, narrower range. This is what defeats
//! DNS rebinding: an allowed domain whose name starts resolving to 127.0.0.1 or 10.x is refused
//! because the address is checked, not the name.
//!
//! IPv4-mapped IPv6 addresses (`::ffff:127.0.0.1`) are checked as the IPv4 address they are;
//! the IPv6 transition ranges that embed an IPv4 address (NAT64, 6to4, Teredo) are refused as a
//! whole, since the embedded address could be anything.

use crate::error::EgressError;
use ipnet::IpNet;
use std::fmt;
use std::net::IpAddr;

/// Address ranges refused unless a CIDR of the rules inside the range covers the address, each
/// with the words used in refusals.
pub const SPECIAL_RANGES: &[(&str, &str)] = &[
    ("0.0.0.0/8", "an unspecified ('this network') address"),
    ("10.0.0.0/8", "a private (RFC 1918) address"),
    ("100.64.0.0/10", "a carrier-grade NAT address"),
    ("127.0.0.0/8", "a loopback address"),
    ("169.254.0.0/16", "a link-local address"),
    ("169.254.169.254/32", "the cloud metadata address"),
    ("172.16.0.0/12", "a private (RFC 1918) address"),
    ("192.0.0.0/24", "an IETF protocol assignment address"),
    ("192.0.2.0/24", "a documentation address"),
    ("192.88.99.0/24", "a 6to4 relay address"),
    ("192.168.0.0/16", "a private (RFC 1918) address"),
    ("198.18.0.0/15", "a benchmarking address"),
    ("198.51.100.0/24", "a documentation address"),
    ("203.0.113.0/24", "a documentation address"),
    ("224.0.0.0/4", "a multicast address"),
    ("240.0.0.0/4", "a reserved address"),
    ("255.255.255.255/32", "the broadcast address"),
    (
        "::/96",
        "an unspecified, loopback or IPv4-compatible IPv6 address",
    ),
    ("::1/128", "a loopback address"),
    ("::ffff:0:0/96", "an IPv4-mapped IPv6 address"),
    ("64:ff9b::/96", "a NAT64 address"),
    ("64:ff9b:1::/48", "a NAT64 address"),
    ("100::/64", "a discard-only address"),
    ("2001::/32", "a Teredo address"),
    ("2001:db8::/32", "a documentation address"),
    ("2002::/16", "a 6to4 address"),
    ("3fff::/20", "a documentation address"),
    ("fc00::/7", "a unique local (private) IPv6 address"),
    ("fd00:ec2::254/128", "the cloud metadata address"),
    ("fe80::/10", "a link-local address"),
    ("fec0::/10", "a site-local address"),
    ("ff00::/8", "a multicast address"),
];

/// One domain entry: an exact name or every name below a suffix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DomainPattern {
    /// `example.com`: that name only.
    Exact(String),
    /// `*.example.com`: any name ending in `.example.com` (stored without the `*.`).
    Subdomains(String),
}

impl DomainPattern {
    /// Parses `entry` as a domain pattern (lowercased, one trailing dot dropped).
    pub fn parse(entry: &str) -> Result<DomainPattern, String> {
        if let Some(rest) = entry.strip_prefix("*.") {
            let name = normalize_domain(rest)?;
            if !name.contains('.') {
                return Err(format!(
                    "a wildcard must name a domain with at least two labels (*.{name} would \
                     match a whole top-level domain)"
                ));
            }
            return Ok(DomainPattern::Subdomains(name));
        }
        if entry.contains('*') {
            return Err("'*' is only allowed as the whole first label ('*.example.com')".into());
        }
        normalize_domain(entry).map(DomainPattern::Exact)
    }

    /// Whether `host` (already normalized, lowercase) is named by this pattern.
    pub fn matches(&self, host: &str) -> bool {
        match self {
            DomainPattern::Exact(name) => host == name,
            DomainPattern::Subdomains(suffix) => {
                host.len() > suffix.len() + 1
                    && host.ends_with(suffix.as_str())
                    && host.as_bytes()[host.len() - suffix.len() - 1] == b'.'
            }
        }
    }
}

impl fmt::Display for DomainPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DomainPattern::Exact(name) => f.write_str(name),
            DomainPattern::Subdomains(suffix) => write!(f, "*.{suffix}"),
        }
    }
}

/// `name` as a DNS host name: lowercase, without one trailing dot, labels of 1-63 letters,
/// digits and inner hyphens, at most 253 characters, and a last label that is not all digits
/// (so it can never be read as an IPv4 address in one of getaddrinfo's legacy forms).
pub fn normalize_domain(name: &str) -> Result<String, String> {
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if name.is_empty() {
        return Err("empty domain name".into());
    }
    if name.len() > 253 {
        return Err("a domain name is at most 253 characters".into());
    }
    if name.contains("://") {
        return Err("an entry is a domain, IP or CIDR, not a URL".into());
    }
    if name.contains(':') || name.contains('/') {
        return Err("a domain entry has no port or path (ports are not part of rules)".into());
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err("each label of a domain name is 1 to 63 characters".into());
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(format!(
                "label {label:?} may hold only letters, digits and '-' (IDNs in their \
                 xn-- form)"
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!("label {label:?} may not start or end with '-'"));
        }
    }
    let last = name.rsplit('.').next().unwrap_or_default();
    if last.bytes().all(|b| b.is_ascii_digit()) {
        return Err(
            "the last label of a domain name is not all digits (write IPs in dotted \
                    form, CIDRs with a /prefix)"
                .into(),
        );
    }
    Ok(name)
}

/// A sandbox's egress allowlist; see the module docs for what it allows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkRules {
    domains: Vec<DomainPattern>,
    nets: Vec<IpNet>,
}

impl NetworkRules {
    /// No egress at all.
    pub fn none() -> NetworkRules {
        NetworkRules::default()
    }

    /// Parses an allowlist. Every entry must parse; the error names the first bad one and why.
    pub fn parse(entries: &[String]) -> Result<NetworkRules, EgressError> {
        let mut rules = NetworkRules::default();
        for entry in entries {
            let bad = |reason: String| EgressError::BadRule {
                entry: entry.clone(),
                reason,
            };
            if entry.is_empty() || entry.trim() != entry {
                return Err(bad("empty, or with surrounding whitespace".into()));
            }
            if let Ok(ip) = entry.parse::<IpAddr>() {
                rules.nets.push(IpNet::from(canonical(ip)));
                continue;
            }
            if let Ok(net) = entry.parse::<IpNet>() {
                if net.trunc() != net {
                    return Err(bad(format!(
                        "the address has bits set past the /{} prefix (did you mean {}?)",
                        net.prefix_len(),
                        net.trunc()
                    )));
                }
                rules.nets.push(net);
                continue;
            }
            if entry.starts_with('[') {
                return Err(bad(
                    "write an IPv6 address without brackets (::1, fd00::/8)".into(),
                ));
            }
            if entry.contains('/') && !entry.contains("://") {
                return Err(bad(
                    "not a valid CIDR (address/prefix, e.g. 10.0.0.0/8)".into()
                ));
            }
            if entry.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
                return Err(bad("not a valid IPv4 address".into()));
            }
            rules
                .domains
                .push(DomainPattern::parse(entry).map_err(bad)?);
        }
        Ok(rules)
    }

    /// Whether the list is empty (no egress).
    pub fn is_empty(&self) -> bool {
        self.domains.is_empty() && self.nets.is_empty()
    }

    /// The entries, as they parse back.
    pub fn entries(&self) -> Vec<String> {
        self.domains
            .iter()
            .map(ToString::to_string)
            .chain(self.nets.iter().map(ToString::to_string))
            .collect()
    }

    /// Whether the request host `host` is named by the list: a domain by a domain entry, an IP
    /// by an IP/CIDR entry. `Err` says why not.
    pub fn check_host(&self, host: &Host) -> Result<(), String> {
        if self.is_empty() {
            return Err("this sandbox has no network allowlist (egress is off)".into());
        }
        match host {
            Host::Domain(name) => {
                if self.domains.iter().any(|d| d.matches(name)) {
                    Ok(())
                } else {
                    Err(format!("{name} is not in this sandbox's allowlist"))
                }
            }
            Host::Ip(ip) => {
                let ip = canonical(*ip);
                if self.nets.iter().any(|n| n.contains(&ip)) {
                    Ok(())
                } else {
                    Err(format!(
                        "the address {ip} is not in this sandbox's allowlist (raw IPs need an IP \
                         or CIDR entry)"
                    ))
                }
            }
        }
    }

    /// The first entry that opens part of an always-refused range (loopback, private,
    /// metadata, ...), with the range's description: what only an operator should list.
    pub fn opens_special(&self) -> Option<(String, &'static str)> {
        for n in &self.nets {
            for (range, what) in special_ranges() {
                if range.contains(n) {
                    return Some((n.to_string(), what));
                }
            }
        }
        None
    }

    /// Whether the proxy may connect to `ip`: `Err` names the special range it is in when no
    /// CIDR of the list inside that range covers it.
    pub fn check_addr(&self, ip: IpAddr) -> Result<(), String> {
        let ip = canonical(ip);
        for (range, what) in special_ranges() {
            if range.contains(&ip)
                && !self
                    .nets
                    .iter()
                    .any(|n| n.contains(&ip) && range.contains(n))
            {
                return Err(format!(
                    "{ip} is {what}, refused unless a CIDR inside {range} is listed explicitly"
                ));
            }
        }
        Ok(())
    }
}

fn special_ranges() -> impl Iterator<Item = (IpNet, &'static str)> {
    SPECIAL_RANGES.iter().map(|(net, what)| {
        (
            net.parse::<IpNet>()
                .expect("the special ranges are valid CIDRs"),
            *what,
        )
    })
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

/// The host of a request: a DNS name (normalized) or an IP literal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    Domain(String),
    Ip(IpAddr),
}

impl Host {
    /// Parses a request's host (`example.com`, `1.2.3.4`, `[::1]` or `::1`).
    pub fn parse(s: &str) -> Result<Host, String> {
        let bare = s
            .strip_prefix('[')
            .and_then(|r| r.strip_suffix(']'))
            .unwrap_or(s);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return Ok(Host::Ip(ip));
        }
        if bare.len() != s.len() {
            return Err(format!("{s:?} is not a valid IPv6 address"));
        }
        normalize_domain(s).map(Host::Domain)
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Domain(name) => f.write_str(name),
            Host::Ip(IpAddr::V6(v6)) => write!(f, "[{v6}]"),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(entries: &[&str]) -> NetworkRules {
        NetworkRules::parse(&entries.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .expect("valid rules")
    }

    fn err(entry: &str) -> String {
        NetworkRules::parse(&[entry.to_string()])
            .expect_err(entry)
            .to_string()
    }

    fn host(s: &str) -> Host {
        Host::parse(s).unwrap()
    }

    #[test]
    fn parses_every_kind_of_entry() {
        let r = rules(&[
            "Example.COM.",
            "*.pkg.test",
            "10.0.0.0/8",
            "::1/128",
            "203.0.113.7",
        ]);
        assert_eq!(
            r.entries(),
            vec![
                "example.com",
                "*.pkg.test",
                "10.0.0.0/8",
                "::1/128",
                "203.0.113.7/32"
            ]
        );
        assert!(rules(&[]).is_empty());
    }

    #[test]
    fn bad_entries_say_why() {
        assert!(err("").contains("empty"));
        assert!(err(" a.test").contains("whitespace"));
        assert!(err("http://a.test").contains("not a URL"));
        assert!(err("a.test:443").contains("no port"));
        assert!(err("10.0.0.1/8").contains("did you mean 10.0.0.0/8"));
        assert!(err("10.0.0.0/33").contains("not a valid CIDR"));
        assert!(err("300.1.1.1").contains("not a valid IPv4"));
        assert!(err("*").contains("'*'"));
        assert!(err("a.*.test").contains("'*'"));
        assert!(err("*.test").contains("two labels"));
        assert!(err("under_score.test").contains("letters, digits"));
        assert!(err("-a.test").contains("start or end"));
        assert!(err("a..test").contains("1 to 63"));
        assert!(err(&format!("{}.test", "a".repeat(64))).contains("1 to 63"));
        assert!(err("1.2.3").contains("not a valid IPv4"));
        assert!(err("a.123").contains("all digits"));
        assert!(err("[::1]").contains("without brackets"));
    }

    #[test]
    fn domains_match_exactly_and_wildcards_below_the_apex() {
        let r = rules(&["pkg.test", "*.files.test"]);
        assert!(r.check_host(&host("pkg.test")).is_ok());
        assert!(r.check_host(&host("PKG.test.")).is_ok());
        assert!(r.check_host(&host("a.pkg.test")).is_err());
        assert!(r.check_host(&host("a.files.test")).is_ok());
        assert!(r.check_host(&host("a.b.files.test")).is_ok());
        assert!(r.check_host(&host("files.test")).is_err());
        assert!(r.check_host(&host("evilfiles.test")).is_err());
        assert!(r.check_host(&host("files.test.evil.test")).is_err());
        let no = r.check_host(&host("other.test")).unwrap_err();
        assert!(no.contains("other.test is not in"), "{no}");
        assert!(NetworkRules::none()
            .check_host(&host("pkg.test"))
            .unwrap_err()
            .contains("egress is off"));
    }

    #[test]
    fn raw_ips_need_a_cidr_entry() {
        let r = rules(&["pkg.test", "198.51.100.0/24", "2001:db8::/32"]);
        assert!(r.check_host(&host("198.51.100.9")).is_ok());
        assert!(r.check_host(&host("[2001:db8::1]")).is_ok());
        assert!(r.check_host(&host("8.8.8.8")).is_err());
        assert!(r.check_host(&host("::ffff:198.51.100.9")).is_ok());
    }

    #[test]
    fn special_ranges_need_an_explicit_cidr_inside_them() {
        let open = rules(&["0.0.0.0/0", "::/0"]);
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "169.254.1.1",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "192.0.2.1",
            "::1",
            "::",
            "fd00:ec2::254",
            "fd12::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "64:ff9b::7f00:1",
            "2002:7f00:1::",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(open.check_addr(ip).is_err(), "{ip} should be refused");
        }
        assert!(open.check_addr("93.184.215.14".parse().unwrap()).is_ok());
        assert!(open.check_addr("2606:4700::1".parse().unwrap()).is_ok());

        let lo = rules(&["127.0.0.0/8"]);
        assert!(lo.check_addr("127.0.0.2".parse().unwrap()).is_ok());
        assert!(lo.check_addr("::ffff:127.0.0.2".parse().unwrap()).is_ok());
        assert!(lo.check_addr("::1".parse().unwrap()).is_err());

        // Link-local opened, but the metadata address is its own, narrower range.
        let ll = rules(&["169.254.0.0/16"]);
        assert!(ll.check_addr("169.254.1.1".parse().unwrap()).is_ok());
        let md = ll
            .check_addr("169.254.169.254".parse().unwrap())
            .unwrap_err();
        assert!(md.contains("cloud metadata"), "{md}");
        assert!(rules(&["169.254.169.254"])
            .check_addr("169.254.169.254".parse().unwrap())
            .is_ok());
        let why = NetworkRules::none()
            .check_addr("127.0.0.1".parse().unwrap())
            .unwrap_err();
        assert!(why.contains("loopback"), "{why}");
    }

    #[test]
    fn hosts_parse() {
        assert_eq!(host("[::1]"), Host::Ip("::1".parse().unwrap()));
        assert_eq!(host("A.Test"), Host::Domain("a.test".into()));
        assert!(Host::parse("[a.test]").is_err());
        assert!(Host::parse("2130706433").is_err());
        assert!(Host::parse("a b").is_err());
        assert_eq!(host("[::1]").to_string(), "[::1]");
    }
}
