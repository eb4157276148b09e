//! Whose refusals a request's are: the TCP peer, or the client a trusted reverse proxy names
//! (`SANDLOT_TRUSTED_PROXIES`).

use axum::http::HeaderMap;
use std::net::IpAddr;

/// The variable that names the trusted reverse proxies.
pub const TRUSTED_PROXIES: &str = "SANDLOT_TRUSTED_PROXIES";

/// Parses `SANDLOT_TRUSTED_PROXIES`: addresses and CIDR ranges, separated by commas or
/// spaces.
pub fn parse_trusted_proxies(value: &str) -> Result<Vec<ipnet::IpNet>, String> {
    value
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<ipnet::IpNet>()
                .or_else(|_| s.parse::<IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| format!("{s:?} is neither an address nor a CIDR range"))
        })
        .collect()
}

/// How many `X-Forwarded-For` hops are read, from the right, before the search stops.
const MAX_FORWARDED_HOPS: usize = 32;

/// The source a request's refusals are tallied under: the TCP peer, unless the peer is one of
/// the `trusted` proxies; then the right-most `X-Forwarded-For` hop that is not a trusted proxy
/// (what a proxy appended, not what the client wrote: a client can put anything on the left).
/// A hop that is not an address ends the search at the last trusted hop, so a forged header
/// never tallies under a name its sender chose beyond what it could already send from.
pub(super) fn request_source(
    peer: Option<IpAddr>,
    headers: &HeaderMap,
    trusted: &[ipnet::IpNet],
) -> String {
    let Some(peer) = peer else {
        return "unknown".to_owned();
    };
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|n| n.contains(ip));
    if !is_trusted(&peer) {
        return peer.to_string();
    }
    let hops: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    let mut source = peer;
    for hop in hops.iter().rev().take(MAX_FORWARDED_HOPS) {
        let Some(ip) = forwarded_ip(hop) else {
            break;
        };
        source = ip;
        if !is_trusted(&ip) {
            break;
        }
    }
    source.to_string()
}

/// One `X-Forwarded-For` hop as an address: bare, or with a port (`[v6]:p`, `v4:p`).
fn forwarded_ip(hop: &str) -> Option<IpAddr> {
    hop.parse::<IpAddr>()
        .ok()
        .or_else(|| hop.parse::<std::net::SocketAddr>().ok().map(|s| s.ip()))
}

#[cfg(test)]
mod tests {
    use super::{parse_trusted_proxies, request_source};
    use axum::http::HeaderMap;

    fn source(peer: &str, forwarded: &[&str], trusted: &str) -> String {
        let mut headers = HeaderMap::new();
        for f in forwarded {
            headers.append("x-forwarded-for", f.parse().unwrap());
        }
        let trusted = parse_trusted_proxies(trusted).unwrap();
        request_source(Some(peer.parse().unwrap()), &headers, &trusted)
    }

    #[test]
    fn forwarded_for_counts_only_behind_a_trusted_proxy() {
        // No proxy trusted: the header is the client's to write and is ignored.
        assert_eq!(source("127.0.0.1", &["203.0.113.7"], ""), "127.0.0.1");
        // An untrusted peer's header is ignored even when proxies are trusted.
        assert_eq!(
            source("192.0.2.1", &["203.0.113.7"], "127.0.0.1"),
            "192.0.2.1"
        );
        // Behind a trusted proxy: the hop it appended, not what the client put on the left.
        let t = "127.0.0.1, 10.0.0.0/8";
        assert_eq!(source("127.0.0.1", &["203.0.113.7"], t), "203.0.113.7");
        assert_eq!(
            source("127.0.0.1", &["1.1.1.1, 203.0.113.7, 10.0.0.2"], t),
            "203.0.113.7"
        );
        assert_eq!(
            source("127.0.0.1", &["1.1.1.1", "203.0.113.7"], t),
            "203.0.113.7"
        );
        assert_eq!(
            source("127.0.0.1", &["[2001:db8::7]:443"], t),
            "2001:db8::7"
        );
        assert_eq!(source("127.0.0.1", &["203.0.113.7:8080"], t), "203.0.113.7");
        // A hop that is not an address stops at the last trusted one.
        assert_eq!(source("127.0.0.1", &["203.0.113.7, junk"], t), "127.0.0.1");
        assert_eq!(
            source("127.0.0.1", &["203.0.113.7, junk, 10.0.0.2"], t),
            "10.0.0.2"
        );
        // Only trusted hops (or none): the left-most trusted one, else the peer.
        assert_eq!(source("127.0.0.1", &["10.0.0.3, 10.0.0.2"], t), "10.0.0.3");
        assert_eq!(source("127.0.0.1", &[], t), "127.0.0.1");
        // A long forged chain of trusted-looking hops is read only so far.
        let chain = vec!["10.9.9.9"; 100].join(", ");
        assert_eq!(source("127.0.0.1", &[&chain], t), "10.9.9.9");
    }

    #[test]
    fn trusted_proxies_parse_addresses_and_ranges() {
        assert_eq!(
            parse_trusted_proxies(" 127.0.0.1, ::1 10.0.0.0/8,")
                .unwrap()
                .len(),
            3
        );
        assert!(parse_trusted_proxies("").unwrap().is_empty());
        for bad in ["localhost", "10.0.0.0/33", "1.2.3"] {
            assert!(parse_trusted_proxies(bad).is_err(), "{bad}");
        }
    }
}
