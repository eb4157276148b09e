//! What a forwarded request becomes upstream: origin form, no hop-by-hop headers, the
//! sandbox's secrets for its host, and a body whose first bytes were read (and scanned) before
//! it was sent.

use super::request::Target;
use super::Policy;
use crate::rules::Host;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::http::request::Parts;
use hyper::{Request, Version};
use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1), plus the legacy
/// `Proxy-Connection`: never forwarded either way. `Proxy-Authorization` is among them, so
/// nothing the sandbox meant for a proxy reaches a server. The ports proxy
/// (`sandlot-ports`) drops the same ones on its way into a sandbox.
pub const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Drops hop-by-hop headers and those the `Connection` header names.
pub(super) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// The request sent upstream: origin form, HTTP/1.1, the URL's authority as `Host`, no
/// hop-by-hop headers, the sandbox's secrets for this host set, and `Connection: close` (one
/// upstream connection per request).
pub(super) fn outgoing(
    mut parts: Parts,
    target: &Target,
    policy: &Policy,
    body: PrefixedBody,
) -> Request<PrefixedBody> {
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .to_string();
    let mut req = Request::new(body);
    *req.method_mut() = parts.method;
    *req.uri_mut() = path
        .parse()
        .unwrap_or_else(|_| hyper::Uri::from_static("/"));
    *req.version_mut() = Version::HTTP_11;
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.remove(header::EXPECT); // 100-continue was handled with the sandbox
    if let Ok(host) = HeaderValue::from_str(target.authority.as_str()) {
        parts.headers.insert(header::HOST, host);
    }
    if let Host::Domain(name) = &target.host {
        for secret in &policy.secrets {
            if secret.hosts.iter().any(|p| p.matches(name)) {
                parts
                    .headers
                    .insert(secret.header.clone(), secret.value.clone());
            }
        }
    }
    parts
        .headers
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    *req.headers_mut() = parts.headers;
    req
}

/// A request body whose first bytes were read (and scanned) before the request was sent.
pub(super) struct PrefixedBody {
    pub(super) prefix: VecDeque<Frame<Bytes>>,
    pub(super) rest: Incoming,
}

impl PrefixedBody {
    /// Reads frames until `limit` bytes of data are held (or the body ends) and returns those
    /// bytes for scanning; each frame must come within `idle`.
    pub(super) async fn hold_prefix(
        &mut self,
        limit: usize,
        idle: Duration,
    ) -> Result<Vec<u8>, String> {
        let mut scanned = Vec::new();
        while scanned.len() < limit && !self.rest.is_end_stream() {
            let frame = match tokio::time::timeout(idle, self.rest.frame()).await {
                Err(_) => {
                    return Err(format!(
                        "the request body stalled for {} s",
                        idle.as_secs_f64()
                    ))
                }
                Ok(None) => break,
                Ok(Some(Err(err))) => return Err(format!("the request body is malformed: {err}")),
                Ok(Some(Ok(frame))) => frame,
            };
            if let Some(data) = frame.data_ref() {
                let room = limit - scanned.len();
                scanned.extend_from_slice(&data[..data.len().min(room)]);
            }
            self.prefix.push_back(frame);
        }
        Ok(scanned)
    }
}

impl Body for PrefixedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        if let Some(frame) = self.prefix.pop_front() {
            return Poll::Ready(Some(Ok(frame)));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_empty() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let held: u64 = self
            .prefix
            .iter()
            .filter_map(|f| f.data_ref().map(|d| d.len() as u64))
            .sum();
        let rest = self.rest.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + held);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + held);
        }
        hint
    }
}
