//! A sandbox's egress allowlist, and the address ranges that stay refused whatever it says.
//!
//! # Grammar
//!
//! An allowlist ([`NetworkRules`]) is a list of entries, each a destination and an optional
//! port:
//!
//! ```text
//! entry   = dest [ ":" port ]          port: 1-65535
//! dest    = domain                     example.com (that name only)
//!         | "*." domain                *.example.com (any name below it, at any depth, but
//!                                      not example.com itself, as in browsers' and cloud
//!                                      firewalls' wildcard rules)
//!         | ipv4 [ "/" prefix ]        203.0.113.7, 10.0.0.0/8
//!         | ipv6 [ "/" prefix ]        ::1/128 (without a port)
//!         | "[" ipv6 [ "/" prefix ] "]"  [2001:db8::/32] (with a port: [2001:db8::1]:8443)
//! ```
//!
//! An entry without a port allows port 443 for `CONNECT` (HTTPS) and port 80 for plain HTTP,
//! nothing else: `pypi.org` allows `CONNECT pypi.org:443` and `GET http://pypi.org/`, not
//! `CONNECT pypi.org:25` nor `CONNECT pypi.org:80`. An entry with a port allows that port only,
//! for both: `git.example.com:8443`, `*.internal.example:8080`, `10.0.0.0/8:5432`. Entries
//! written before ports existed mean what they always did for the default ports. Empty means
//! no egress at all.
//!
//! # Checks
//!
//! A request passes two checks. Its *host and port* must be named by the list: a domain by a
//! domain entry, a raw IP by an IP/CIDR entry (so `http://1.2.3.4/` cannot bypass a domain
//! list), each on a port the entry allows. Then *every* address the host resolves to must be
//! acceptable (so one public and one private answer cannot smuggle the private one in): an
//! address the classifier ([`crate::classify`]) refuses (loopback, private, link-local, CGNAT,
//! metadata, the host's own, ...) is refused unless a CIDR entry of the list covers it *and
//! lies inside the narrowest range the classifier names*. The second condition is what
//! "explicitly" means: `0.0.0.0/0` or `::/0` do not open loopback or the metadata address;
//! `127.0.0.0/8` opens loopback, and `169.254.169.254/32` (and only that, or the bare IP) opens
//! the metadata address, which sits inside link-local but is its own, narrower range; a host's
//! own public address is opened only by an entry for that address alone. This is what defeats
//! DNS rebinding: an allowed domain whose name starts resolving to 127.0.0.1 or 10.x is refused
//! because the address is checked, not the name. (Opening an address is about the address:
//! the port was checked with the host.)
//!
//! IPv4-mapped IPv6 addresses (`::ffff:127.0.0.1`) are checked as the IPv4 address they are;
//! the IPv6 transition ranges that embed an IPv4 address (IPv4-compatible, NAT64, 6to4,
//! Teredo) are refused as a whole, since the embedded address could be anything.

use crate::addr::{canonical, classify};
use crate::error::EgressError;
use ipnet::IpNet;
use std::fmt;
use std::net::IpAddr;

/// The port a rule without one allows for `CONNECT` (HTTPS).
pub const DEFAULT_CONNECT_PORT: u16 = 443;
/// The port a rule without one allows for plain HTTP.
pub const DEFAULT_HTTP_PORT: u16 = 80;

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
        return Err("a domain name has no port or path".into());
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

/// Whether a rule's port (`None`: the defaults) allows `port` for a `CONNECT` (`connect`) or
/// a plain-HTTP request.
fn port_allows(rule: Option<u16>, port: u16, connect: bool) -> bool {
    match rule {
        Some(listed) => listed == port,
        None if connect => port == DEFAULT_CONNECT_PORT,
        None => port == DEFAULT_HTTP_PORT,
    }
}

/// `dest:port` as written back (`[v6]:port` for IPv6).
fn with_port(dest: String, port: Option<u16>) -> String {
    match port {
        None => dest,
        Some(p) if dest.contains(':') => format!("[{dest}]:{p}"),
        Some(p) => format!("{dest}:{p}"),
    }
}

/// Splits `entry` into its destination and port: `host:port`, `[v6]:port`, `[v6]`, or no
/// port (a bare IPv6 address or CIDR has colons of its own and no port).
fn split_port(entry: &str) -> Result<(&str, Option<u16>), String> {
    let parse_port = |p: &str| -> Result<u16, String> {
        match p.parse::<u16>() {
            Ok(0) | Err(_) => Err(format!("the port {p:?} is not a number from 1 to 65535")),
            Ok(port) => Ok(port),
        }
    };
    if let Some(rest) = entry.strip_prefix('[') {
        let (inner, after) = rest
            .split_once(']')
            .ok_or("an unclosed '[' (write [ipv6]:port)")?;
        return match after {
            "" => Ok((inner, None)),
            _ => match after.strip_prefix(':') {
                Some(p) => Ok((inner, Some(parse_port(p)?))),
                None => Err("after ']' comes ':port' or nothing".into()),
            },
        };
    }
    match entry.rsplit_once(':') {
        // More than one colon and no brackets: an IPv6 address or CIDR, without a port.
        Some((dest, _)) if dest.contains(':') => Ok((entry, None)),
        Some((dest, p)) => Ok((dest, Some(parse_port(p)?))),
        None => Ok((entry, None)),
    }
}

/// A sandbox's egress allowlist; see the module docs for what it allows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkRules {
    domains: Vec<(DomainPattern, Option<u16>)>,
    nets: Vec<(IpNet, Option<u16>)>,
    /// `service:<name>` entries: the operator's named internal services (issue 23's trusted
    /// tier), reached by name at exactly the address and port the operator configured.
    services: Vec<String>,
}

/// The prefix of an allowlist entry naming an internal service.
pub const SERVICE_PREFIX: &str = "service:";

/// Whether `name` is a valid internal service name: 1 to 63 of `a-z 0-9 -`, starting with a
/// letter or digit (so it is never an IP, a CIDR or a domain with dots).
pub fn valid_service_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
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
            if let Some(name) = entry.strip_prefix(SERVICE_PREFIX) {
                if !valid_service_name(name) {
                    return Err(bad(
                        "a service name is 1 to 63 of a-z 0-9 - (service:<name>)".into(),
                    ));
                }
                if !rules.services.iter().any(|s| s == name) {
                    rules.services.push(name.to_owned());
                }
                continue;
            }
            if entry.contains("://") {
                return Err(bad("an entry is a domain, IP or CIDR, not a URL".into()));
            }
            let (dest, port) = split_port(entry).map_err(bad)?;
            let bracketed = dest.len() + 2 <= entry.len() && entry.starts_with('[');
            if let Ok(ip) = dest.parse::<IpAddr>() {
                if bracketed && ip.is_ipv4() {
                    return Err(bad("brackets are for IPv6 addresses only".into()));
                }
                rules.nets.push((IpNet::from(canonical(ip)), port));
                continue;
            }
            if let Ok(net) = dest.parse::<IpNet>() {
                if net.trunc() != net {
                    return Err(bad(format!(
                        "the address has bits set past the /{} prefix (did you mean {}?)",
                        net.prefix_len(),
                        net.trunc()
                    )));
                }
                rules.nets.push((net, port));
                continue;
            }
            if bracketed {
                return Err(bad(
                    "not a valid IPv6 address or CIDR inside the brackets".into()
                ));
            }
            if dest.contains('/') {
                return Err(bad(
                    "not a valid CIDR (address/prefix, e.g. 10.0.0.0/8)".into()
                ));
            }
            if dest.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
                return Err(bad("not a valid IPv4 address".into()));
            }
            let pattern = DomainPattern::parse(dest).map_err(bad)?;
            rules.domains.push((pattern, port));
        }
        Ok(rules)
    }

    /// Whether the list is empty (no egress).
    pub fn is_empty(&self) -> bool {
        self.domains.is_empty() && self.nets.is_empty() && self.services.is_empty()
    }

    /// Whether the list names internal service `name` (`service:<name>`).
    pub fn names_service(&self, name: &str) -> bool {
        self.services.iter().any(|s| s == name)
    }

    /// The internal services the list names.
    pub fn services(&self) -> &[String] {
        &self.services
    }

    /// The entries, as they parse back.
    pub fn entries(&self) -> Vec<String> {
        self.domains
            .iter()
            .map(|(d, port)| with_port(d.to_string(), *port))
            .chain(
                self.nets
                    .iter()
                    .map(|(n, port)| with_port(n.to_string(), *port)),
            )
            .chain(self.services.iter().map(|n| format!("{SERVICE_PREFIX}{n}")))
            .collect()
    }

    /// Whether the request host `host` on `port` is named by the list: a domain by a domain
    /// entry, an IP by an IP/CIDR entry, each allowing that port for a `CONNECT` (`connect`)
    /// or a plain-HTTP request. `Err` says why not.
    pub fn check_host(&self, host: &Host, port: u16, connect: bool) -> Result<(), String> {
        if self.is_empty() {
            return Err("this sandbox has no network allowlist (egress is off)".into());
        }
        let ports: Vec<Option<u16>> = match host {
            // The proxy connects it to the operator's address and checks the port there.
            Host::Domain(name) if self.names_service(name) => return Ok(()),
            Host::Domain(name) => {
                let named: Vec<Option<u16>> = self
                    .domains
                    .iter()
                    .filter(|(d, _)| d.matches(name))
                    .map(|(_, p)| *p)
                    .collect();
                if named.is_empty() {
                    return Err(format!("{name} is not in this sandbox's allowlist"));
                }
                named
            }
            Host::Ip(ip) => {
                let ip = canonical(*ip);
                let named: Vec<Option<u16>> = self
                    .nets
                    .iter()
                    .filter(|(n, _)| n.contains(&ip))
                    .map(|(_, p)| *p)
                    .collect();
                if named.is_empty() {
                    return Err(format!(
                        "the address {ip} is not in this sandbox's allowlist (raw IPs need an IP \
                         or CIDR entry)"
                    ));
                }
                named
            }
        };
        if ports.iter().any(|p| port_allows(*p, port, connect)) {
            return Ok(());
        }
        let (kind, default) = if connect {
            ("CONNECT", DEFAULT_CONNECT_PORT)
        } else {
            ("plain HTTP", DEFAULT_HTTP_PORT)
        };
        Err(format!(
            "{host} is in this sandbox's allowlist, but not on port {port} (an entry without a \
             port allows {default} for {kind}; others must be listed, as {host}:{port})"
        ))
    }

    /// The first entry that opens part of an always-refused range (loopback, private,
    /// metadata, ...), with the range's description: what only an operator should list.
    pub fn opens_special(&self) -> Option<(String, &'static str)> {
        let own = crate::addr::own_addresses();
        for (n, port) in &self.nets {
            let opened = crate::addr::special_ranges()
                .find(|(range, _, _)| range.contains(n))
                .map(|(_, what, _)| what)
                .or_else(|| {
                    // Only an entry for that address alone opens one of the host's own.
                    let single = n.prefix_len() == n.max_prefix_len();
                    (single && own.iter().any(|a| canonical(*a) == n.addr()))
                        .then_some("one of this host's own addresses")
                });
            if let Some(what) = opened {
                return Some((with_port(n.to_string(), *port), what));
            }
        }
        None
    }

    /// Whether the proxy may connect to `ip`: `Err` says what the address is when no CIDR of
    /// the list inside the narrowest range the classifier names covers it.
    pub fn check_addr(&self, ip: IpAddr) -> Result<(), String> {
        let ip = canonical(ip);
        let Some(why) = classify(ip) else {
            return Ok(());
        };
        let range = why.range;
        if self
            .nets
            .iter()
            .any(|(n, _)| n.contains(&ip) && range.contains(n))
        {
            return Ok(());
        }
        Err(format!(
            "{ip} is {why}, refused unless a CIDR inside {range} is listed explicitly"
        ))
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

    /// The host check for a CONNECT to port 443.
    fn ck(r: &NetworkRules, host: &Host) -> Result<(), String> {
        r.check_host(host, 443, true)
    }

    #[test]
    fn ports_default_to_443_for_connect_and_80_for_plain_http() {
        let r = rules(&[
            "pkg.test",
            "git.test:8443",
            "*.int.test:8080",
            "198.51.100.0/24",
            "203.0.113.7:25",
            "[2001:db8::1]:8443",
        ]);
        let ok = |h: &str, port: u16, connect: bool| r.check_host(&host(h), port, connect);
        assert!(ok("pkg.test", 443, true).is_ok());
        assert!(ok("pkg.test", 80, false).is_ok());
        for (port, connect) in [(80, true), (25, true), (443, false), (8080, false)] {
            let why = ok("pkg.test", port, connect).unwrap_err();
            assert!(
                why.contains(&format!("not on port {port}"))
                    && why.contains(&format!("pkg.test:{port}")),
                "{why}"
            );
        }
        assert!(ok("git.test", 8443, true).is_ok());
        assert!(ok("git.test", 8443, false).is_ok());
        assert!(ok("git.test", 443, true).is_err());
        assert!(ok("git.test", 80, false).is_err());
        assert!(ok("a.int.test", 8080, false).is_ok());
        assert!(ok("a.int.test", 443, true).is_err());
        assert!(ok("198.51.100.9", 443, true).is_ok());
        assert!(ok("198.51.100.9", 25, true).is_err());
        assert!(ok("203.0.113.7", 25, true).is_ok());
        assert!(ok("203.0.113.7", 443, true).is_err());
        assert!(ok("[2001:db8::1]", 8443, true).is_ok());
        let v6 = ok("[2001:db8::1]", 443, true).unwrap_err();
        assert!(v6.contains("[2001:db8::1]:443"), "{v6}");
        // The same name under two entries: either's port.
        let two = rules(&["pkg.test", "pkg.test:8080"]);
        assert!(two.check_host(&host("pkg.test"), 443, true).is_ok());
        assert!(two.check_host(&host("pkg.test"), 8080, true).is_ok());
        assert!(two.check_host(&host("pkg.test"), 25, true).is_err());
    }

    #[test]
    fn parses_every_kind_of_entry() {
        let r = rules(&[
            "Example.COM.",
            "*.pkg.test",
            "10.0.0.0/8",
            "::1/128",
            "203.0.113.7",
            "git.test:8443",
            "*.int.test:8080",
            "10.0.0.0/8:5432",
            "198.51.100.7:25",
            "[2001:db8::1]:443",
            "[2001:db8::/32]:8443",
            "[::1]",
        ]);
        assert_eq!(
            r.entries(),
            vec![
                "example.com",
                "*.pkg.test",
                "git.test:8443",
                "*.int.test:8080",
                "10.0.0.0/8",
                "::1/128",
                "203.0.113.7/32",
                "10.0.0.0/8:5432",
                "198.51.100.7/32:25",
                "[2001:db8::1/128]:443",
                "[2001:db8::/32]:8443",
                "::1/128",
            ]
        );
        // What they print parses back to the same rules.
        assert_eq!(
            NetworkRules::parse(&r.entries()).unwrap().entries(),
            r.entries()
        );
        assert!(rules(&[]).is_empty());
    }

    #[test]
    fn bad_entries_say_why() {
        assert!(err("").contains("empty"));
        assert!(err(" a.test").contains("whitespace"));
        assert!(err("http://a.test").contains("not a URL"));
        assert!(err("a.test:0").contains("1 to 65535"));
        assert!(err("a.test:65536").contains("1 to 65535"));
        assert!(err("a.test:").contains("1 to 65535"));
        assert!(err("a.test/x").contains("not a valid CIDR"));
        assert!(err("[1.2.3.4]:80").contains("IPv6 addresses only"));
        assert!(err("[::1").contains("unclosed"));
        assert!(err("[::1]80").contains("':port'"));
        assert!(err("[a.test]:80").contains("inside the brackets"));
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
    }

    #[test]
    fn domains_match_exactly_and_wildcards_below_the_apex() {
        let r = rules(&["pkg.test", "*.files.test"]);
        assert!(ck(&r, &host("pkg.test")).is_ok());
        assert!(ck(&r, &host("PKG.test.")).is_ok());
        assert!(ck(&r, &host("a.pkg.test")).is_err());
        assert!(ck(&r, &host("a.files.test")).is_ok());
        assert!(ck(&r, &host("a.b.files.test")).is_ok());
        assert!(ck(&r, &host("files.test")).is_err());
        assert!(ck(&r, &host("evilfiles.test")).is_err());
        assert!(ck(&r, &host("files.test.evil.test")).is_err());
        let no = ck(&r, &host("other.test")).unwrap_err();
        assert!(no.contains("other.test is not in"), "{no}");
        assert!(NetworkRules::none()
            .check_host(&host("pkg.test"), 443, true)
            .unwrap_err()
            .contains("egress is off"));
    }

    #[test]
    fn raw_ips_need_a_cidr_entry() {
        let r = rules(&["pkg.test", "198.51.100.0/24", "2001:db8::/32"]);
        assert!(ck(&r, &host("198.51.100.9")).is_ok());
        assert!(ck(&r, &host("[2001:db8::1]")).is_ok());
        assert!(ck(&r, &host("8.8.8.8")).is_err());
        assert!(ck(&r, &host("::ffff:198.51.100.9")).is_ok());
    }

    #[test]
    fn service_entries_name_internal_services_only() {
        let rules = NetworkRules::parse(&["service:db".into(), "pkgs.test".into()]).unwrap();
        assert!(rules.names_service("db") && !rules.names_service("pkgs.test"));
        assert_eq!(rules.services(), ["db".to_string()]);
        assert!(rules.entries().contains(&"service:db".to_string()));
        assert!(rules
            .check_host(&Host::parse("db").unwrap(), 5432, true)
            .is_ok());
        assert!(rules
            .check_host(&Host::parse("other").unwrap(), 5432, true)
            .is_err());
        // A service entry opens no address range.
        assert!(rules.opens_special().is_none());
        assert!(rules.check_addr("127.0.0.1".parse().unwrap()).is_err());
        for bad in [
            "service:",
            "service:DB",
            "service:a.b",
            "service:-x",
            "service:a/b",
        ] {
            assert!(NetworkRules::parse(&[bad.into()]).is_err(), "{bad}");
        }
        let only = NetworkRules::parse(&["service:db".into()]).unwrap();
        assert!(!only.is_empty());
        let svc = crate::parse_services("db=127.0.0.1:5432, cache=[::1]:6379").unwrap();
        assert_eq!(svc["db"], "127.0.0.1:5432".parse().unwrap());
        assert_eq!(svc["cache"], "[::1]:6379".parse().unwrap());
        for bad in [
            "db",
            "db=127.0.0.1",
            "DB=127.0.0.1:1",
            "db=1.2.3.4:1,db=1.2.3.4:2",
        ] {
            assert!(crate::parse_services(bad).is_err(), "{bad}");
        }
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
            "64:ff9b:1::1",
            "::127.0.0.1",
            "2001:0:4136:e378:8000:63bf:80ff:fffe",
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
