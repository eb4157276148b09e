//! Secrets the proxy adds to a sandbox's requests, and the canary it watches for.
//!
//! A [`Secret`] is a header (`Authorization: Bearer ...`) the proxy sets on requests to the
//! hosts it names, replacing any header of that name the sandbox sent. The value lives in the
//! server only: the sandbox never sees it, and a request to any other host never carries it
//! (the proxy adds it per request, after matching the request's host, and does not follow
//! redirects). Plain-HTTP requests get it as they pass; an `https://` request to such a host
//! is a tunnel the proxy terminates itself, with a certificate from the sandbox's own CA, so
//! it can set the header and send the request on over verified TLS (see `intercept`).
//! Tunnels to hosts without a secret stay opaque.
//!
//! A canary is a credential-looking string planted in the sandbox that nothing legitimate
//! sends anywhere. If it appears in a request head (or the first bytes of a plain-HTTP body,
//! as sent or percent-decoded), the request is refused and the server told. Encoded or split
//! forms (base64, one character per request) are not caught here; the output guardrails and
//! the allowlist are the other layers.

use crate::error::EgressError;
use crate::rules::DomainPattern;
use hyper::header::{HeaderName, HeaderValue};
use std::fmt;

/// A header the proxy sets for a sandbox's requests to matching hosts.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    /// A name to refer to it by (never the value) in records and errors.
    pub name: String,
    /// Host patterns, with the syntax of domain rules (`api.test`, `*.api.test`).
    pub hosts: Vec<String>,
    /// The header to set, e.g. `Authorization`.
    pub header: String,
    /// The header's value.
    pub value: String,
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secret")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .field("header", &self.header)
            .field("value", &"<redacted>")
            .finish()
    }
}

/// A validated secret, ready to be set on requests.
#[derive(Debug, Clone)]
pub(crate) struct ParsedSecret {
    pub hosts: Vec<DomainPattern>,
    pub header: HeaderName,
    pub value: HeaderValue,
}

/// Headers a secret may not set: they frame the message or steer the proxy.
const FORBIDDEN_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "upgrade",
    "expect",
];

impl Secret {
    pub(crate) fn parse(&self) -> Result<ParsedSecret, EgressError> {
        let bad = |reason: String| EgressError::BadSecret {
            name: self.name.clone(),
            reason,
        };
        let header = HeaderName::from_bytes(self.header.as_bytes())
            .map_err(|_| bad(format!("{:?} is not a valid header name", self.header)))?;
        if FORBIDDEN_HEADERS.contains(&header.as_str()) {
            return Err(bad(format!(
                "the header {header} frames the request and cannot carry a secret"
            )));
        }
        let mut value = HeaderValue::from_str(&self.value)
            .map_err(|_| bad("the value is not a valid header value".into()))?;
        value.set_sensitive(true);
        if self.hosts.is_empty() {
            return Err(bad("a secret names at least one host".into()));
        }
        let hosts = self
            .hosts
            .iter()
            .map(|h| DomainPattern::parse(h).map_err(|e| bad(format!("host {h:?}: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ParsedSecret {
            hosts,
            header,
            value,
        })
    }
}

/// Shortest canary the proxy watches for: a shorter one would match ordinary traffic.
pub const MIN_CANARY_LEN: usize = 8;

/// Whether one of `canaries` appears in `haystack`, as sent or percent-decoded.
pub(crate) fn find_canary(haystack: &[u8], canaries: &[String]) -> bool {
    if canaries.is_empty() {
        return false;
    }
    let hit = |h: &[u8]| {
        canaries
            .iter()
            .any(|c| memchr::memmem::find(h, c.as_bytes()).is_some())
    };
    if hit(haystack) {
        return true;
    }
    memchr::memchr(b'%', haystack).is_some() && hit(&percent_decode(haystack))
}

fn percent_decode(s: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' && i + 2 < s.len() {
            if let (Some(h), Some(l)) = (hex(s[i + 1]), hex(s[i + 2])) {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(header: &str, value: &str, hosts: &[&str]) -> Secret {
        Secret {
            name: "t".into(),
            hosts: hosts.iter().map(|s| s.to_string()).collect(),
            header: header.into(),
            value: value.into(),
        }
    }

    #[test]
    fn secrets_are_validated_and_never_printed() {
        assert!(secret("Authorization", "Bearer x", &["api.test"])
            .parse()
            .is_ok());
        let e = |s: Secret| s.parse().unwrap_err().to_string();
        assert!(e(secret("Host", "x", &["a.test"])).contains("frames the request"));
        assert!(e(secret("Bad Header", "x", &["a.test"])).contains("header name"));
        assert!(e(secret("X-Key", "a\nb", &["a.test"])).contains("header value"));
        assert!(e(secret("X-Key", "x", &[])).contains("at least one host"));
        assert!(e(secret("X-Key", "x", &["a.test:80"])).contains("host \"a.test:80\""));
        let printed = format!("{:?}", secret("X-Key", "hunter2-value", &["a.test"]));
        assert!(!printed.contains("hunter2"), "{printed}");
    }

    #[test]
    fn canaries_are_found_raw_and_percent_encoded() {
        let c = vec!["AKIAEXAMPLECANARY1/x+y".to_string()];
        assert!(find_canary(b"GET /?k=AKIAEXAMPLECANARY1/x+y HTTP/1.1", &c));
        assert!(find_canary(b"k=AKIAEXAMPLECANARY1%2Fx%2By", &c));
        assert!(!find_canary(b"k=AKIAEXAMPLECANARY2", &c));
        assert!(!find_canary(b"anything", &[]));
        assert_eq!(percent_decode(b"%4"), b"%4");
        assert_eq!(percent_decode(b"a%41%zz%"), b"aA%zz%");
    }
}
