//! Reaching an app inside a sandbox from outside: HTTP (and WebSocket upgrades) forwarded to a
//! TCP port the sandbox was created to expose, for every protocol that serves ports (REST's
//! `/v1/sandboxes/{id}/ports/{port}/...` and port URLs, E2B's traffic host).
//!
//! [`proxy`] is the one forwarding path. Each request
//! gets its own connection, dialled into the sandbox's network namespace by the runtime
//! (`Runtime::dial_port`: always `127.0.0.1:<port>` there, or `[::1]:<port>`), and is sent over
//! it as HTTP/1.1 in origin form (`GET /path?query`), whatever the client spoke: the
//! connection's destination is fixed before anything of the request is read, so no path, `Host`
//! header or absolute URI can point it elsewhere. On the way: hop-by-hop headers are dropped
//! (RFC 9110 §7.6.1), `Host` is the app's own (`127.0.0.1:<port>`),
//! `X-Forwarded-Host`/`-Proto`/`-Prefix` say where the client was, and the server's
//! credentials (E2B's `X-API-Key`, `X-Access-Token`, ...) never reach the sandbox. Bodies
//! stream both ways. An `Upgrade` request (WebSocket) that the app
//! answers with 101 becomes a byte relay between the two upgraded connections.
//!
//! The app is untrusted: its response head must arrive within [`RESPONSE_HEAD_TIMEOUT`] and fit
//! in [`MAX_RESPONSE_HEAD_BYTES`] and [`MAX_RESPONSE_HEADERS`], or the client gets 502
//! `port_unreachable`; its `Service-Worker-Allowed` header is dropped (it would let a page of
//! the app install a service worker over the server's whole origin).
//!
//! The app's pages share the server's origin with the web console (`sandlot-console`): the
//! console's session cookie ([`CONSOLE_COOKIE`]) is taken out of the `Cookie` the app gets, an
//! app's `Set-Cookie` of that name is dropped (it could replace the console's session), and so
//! is its `Cross-Origin-Opener-Policy` (the console's pages set `same-origin`, so a console
//! window an app's page opens is cut off from it, unless that page had set the same).

use axum::body::Body;
use axum::extract::Request;
use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::http::uri::PathAndQuery;
use axum::http::{StatusCode, Uri, Version};
use axum::response::Response;
use hyper_util::rt::TokioIo;
use sandlot_egress::HOP_BY_HOP;
use sandlot_runtime::Runtime;
use sandlot_service::api_error;
use sandlot_types::{ApiError, ErrorCode};
use std::time::Duration;

/// How long the app may take to send its response head once the request is sent.
pub const RESPONSE_HEAD_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest response head (status line and headers) accepted from an app.
pub const MAX_RESPONSE_HEAD_BYTES: usize = 64 << 10;
/// Most headers accepted in an app's response.
pub const MAX_RESPONSE_HEADERS: usize = 128;
/// How long one direction of a relayed upgrade may go on once the other has finished.
const RELAY_DRAIN: Duration = Duration::from_secs(10);
/// How often an open connection to an app counts as activity for the sandbox's idle timeout.
const ACTIVITY_EVERY: Duration = Duration::from_secs(30);

/// Request headers that carry the server's credentials or its routing, not the app's.
const SERVER_ONLY: [&str; 5] = [
    "x-api-key",
    "x-access-token",
    "e2b-traffic-access-token",
    "e2b-sandbox-id",
    "e2b-sandbox-port",
];

/// The web console's session cookie (`sandlot_console::COOKIE`; the same name, checked by a
/// test in `sandlot-api`, which sees both crates).
pub const CONSOLE_COOKIE: &str = "sandlot_session";

/// Forwards `req` to `127.0.0.1:port` inside sandbox `id` as `path_and_query` (origin form,
/// e.g. `/static/app.js?v=2`), and answers with the app's response.
///
/// Errors: those of `Runtime::dial_port` (404 for an unknown sandbox, 403 `port_not_exposed`,
/// 502 `port_unreachable`), 400 `invalid_request` for a `path_and_query` that is not an
/// origin-form target, and 502 `port_unreachable` when the app does not answer with a valid
/// HTTP/1.1 response head in time.
pub async fn proxy(
    rt: &Runtime,
    id: &str,
    port: u16,
    mut req: Request,
    path_and_query: &str,
) -> Result<Response, ApiError> {
    let target = origin_form(path_and_query)?;
    let upgrade = upgrade_protocol(req.headers());
    let client_upgrade = upgrade.is_some().then(|| hyper::upgrade::on(&mut req));
    // A relay outlives this response: it ends by itself when the key that opened it is revoked.
    let revoked = req
        .extensions()
        .get::<sandlot_service::KeyWatch>()
        .map(|w| w.revoked());
    let stream = rt.dial_port(id, port).await.map_err(api_error)?;
    let unreachable = |reason: String| {
        ApiError::new(
            ErrorCode::PortUnreachable,
            format!("the app on port {port} of sandbox {id} {reason}"),
        )
    };

    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .max_buf_size(MAX_RESPONSE_HEAD_BYTES.max(8192))
        .max_headers(MAX_RESPONSE_HEADERS)
        .handshake::<_, Body>(TokioIo::new(stream))
        .await
        .map_err(|e| unreachable(format!("could not be spoken to: {e}")))?;
    tokio::spawn(keep_active(rt.clone(), id.to_string(), async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "a connection to a sandbox's app ended with an error");
        }
    }));

    let out = outgoing(req, target, port, upgrade.as_ref(), path_and_query);
    let mut resp = match tokio::time::timeout(RESPONSE_HEAD_TIMEOUT, sender.send_request(out)).await
    {
        Ok(Ok(resp)) => resp,
        Ok(Err(e)) => return Err(unreachable(format!("did not answer: {e}"))),
        Err(_) => {
            return Err(unreachable(format!(
                "sent no response head within {} s",
                RESPONSE_HEAD_TIMEOUT.as_secs()
            )))
        }
    };
    drop(sender);

    let switching = resp.status() == StatusCode::SWITCHING_PROTOCOLS;
    if switching {
        match (client_upgrade, upgrade) {
            (Some(client), Some(_)) => {
                let app = hyper::upgrade::on(&mut resp);
                let relayed = async move {
                    match revoked {
                        Some(revoked) => tokio::select! {
                            () = relay(client, app) => {}
                            () = revoked => {}
                        },
                        None => relay(client, app).await,
                    }
                };
                tokio::spawn(keep_active(rt.clone(), id.to_string(), relayed));
            }
            _ => {
                return Err(unreachable(
                    "switched protocols on a request that asked for no upgrade".into(),
                ))
            }
        }
    }
    let (mut parts, body) = resp.into_parts();
    strip_response_headers(&mut parts.headers, switching);
    Ok(Response::from_parts(parts, Body::new(body)))
}

/// Runs `work` and, while it runs, marks the sandbox active every [`ACTIVITY_EVERY`], so a
/// sandbox serving a long download or an open WebSocket is not idled out under its user.
async fn keep_active(rt: Runtime, id: String, work: impl std::future::Future<Output = ()>) {
    let mut tick =
        tokio::time::interval_at(tokio::time::Instant::now() + ACTIVITY_EVERY, ACTIVITY_EVERY);
    tokio::pin!(work);
    loop {
        tokio::select! {
            () = &mut work => return,
            _ = tick.tick() => rt.port_activity(&id),
        }
    }
}

/// Copies bytes both ways between the client's and the app's upgraded connections. When one
/// side has finished sending, the other gets [`RELAY_DRAIN`] to finish too; then both are
/// dropped, so a peer that never closes its half cannot keep the relay (and the sandbox's
/// activity) alive.
async fn relay(client: hyper::upgrade::OnUpgrade, app: hyper::upgrade::OnUpgrade) {
    use tokio::io::AsyncWriteExt;
    let (client, app) = match tokio::try_join!(client, app) {
        Ok(both) => both,
        Err(e) => {
            tracing::debug!(error = %e, "an upgrade through the ports proxy did not complete");
            return;
        }
    };
    let (mut client_r, mut client_w) = tokio::io::split(TokioIo::new(client));
    let (mut app_r, mut app_w) = tokio::io::split(TokioIo::new(app));
    let up = async {
        let _ = tokio::io::copy(&mut client_r, &mut app_w).await;
        let _ = app_w.shutdown().await;
    };
    let down = async {
        let _ = tokio::io::copy(&mut app_r, &mut client_w).await;
        let _ = client_w.shutdown().await;
    };
    tokio::pin!(up, down);
    tokio::select! {
        () = &mut up => { let _ = tokio::time::timeout(RELAY_DRAIN, down).await; }
        () = &mut down => { let _ = tokio::time::timeout(RELAY_DRAIN, up).await; }
    }
}

/// `path_and_query` as an origin-form request target: it must start with `/` (so it can
/// never be read as an absolute URI or an authority) and be a valid target.
fn origin_form(path_and_query: &str) -> Result<PathAndQuery, ApiError> {
    let bad = |why: &str| {
        ApiError::new(
            ErrorCode::InvalidRequest,
            format!("the path to forward {why}"),
        )
    };
    if !path_and_query.starts_with('/') {
        return Err(bad("must start with '/'"));
    }
    path_and_query
        .parse::<PathAndQuery>()
        .map_err(|_| bad("is not a valid request target"))
}

/// The protocol an `Upgrade` request asks for (`websocket`), when it asks with both
/// `Connection: upgrade` and `Upgrade`.
fn upgrade_protocol(h: &HeaderMap) -> Option<HeaderValue> {
    let asks = connection_tokens(h).any(|t| t.eq_ignore_ascii_case("upgrade"));
    asks.then(|| h.get(header::UPGRADE).cloned()).flatten()
}

/// The tokens of every `Connection` header.
fn connection_tokens(h: &HeaderMap) -> impl Iterator<Item = &str> {
    h.get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// Removes hop-by-hop headers: the fixed list and every header `Connection` names.
fn strip_hop_by_hop(h: &mut HeaderMap) {
    let named: Vec<HeaderName> = connection_tokens(h)
        .filter_map(|t| HeaderName::from_bytes(t.as_bytes()).ok())
        .collect();
    for name in named.iter().map(HeaderName::as_str).chain(HOP_BY_HOP) {
        h.remove(name);
    }
}

/// The request the app gets: HTTP/1.1, origin form, its own `Host`, hop-by-hop and server
/// headers dropped, `X-Forwarded-*` set, the body as it streams in.
fn outgoing(
    req: Request,
    target: PathAndQuery,
    port: u16,
    upgrade: Option<&HeaderValue>,
    path_and_query: &str,
) -> Request {
    let (mut parts, body) = req.into_parts();
    let client_host = parts.headers.get(header::HOST).cloned().or_else(|| {
        let authority = parts.uri.authority()?;
        HeaderValue::from_str(authority.as_str()).ok()
    });
    let prefix = forwarded_prefix(parts.uri.path(), path_and_query);
    let h = &mut parts.headers;
    strip_hop_by_hop(h);
    for name in SERVER_ONLY {
        h.remove(name);
    }
    strip_console_cookie(h);
    for name in [
        "x-forwarded-host",
        "x-forwarded-proto",
        "x-forwarded-prefix",
    ] {
        h.remove(name);
    }
    h.insert(
        header::HOST,
        HeaderValue::from_str(&format!("127.0.0.1:{port}")).expect("an address is a header"),
    );
    if let Some(host) = client_host {
        h.insert("x-forwarded-host", host);
    }
    h.insert("x-forwarded-proto", HeaderValue::from_static("http"));
    if let Some(prefix) = prefix.and_then(|p| HeaderValue::from_str(&p).ok()) {
        h.insert("x-forwarded-prefix", prefix);
    }
    if let Some(protocol) = upgrade {
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        h.insert(header::UPGRADE, protocol.clone());
    }
    parts.uri = Uri::from(target);
    parts.version = Version::HTTP_11;
    // The server's own request extensions (its upgrade handle, matched path) stay here.
    parts.extensions = Default::default();
    Request::from_parts(parts, body)
}

/// Takes the console's session cookie out of the request's `Cookie` headers (the app's own
/// cookies stay, in their order).
fn strip_console_cookie(h: &mut HeaderMap) {
    let kept: Vec<HeaderValue> = h
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| {
            let pairs: Vec<&[u8]> = v
                .as_bytes()
                .split(|b| *b == b';')
                .map(<[u8]>::trim_ascii)
                .filter(|p| !p.is_empty() && cookie_name(p) != CONSOLE_COOKIE.as_bytes())
                .collect();
            (!pairs.is_empty())
                .then(|| HeaderValue::from_bytes(&pairs.join(&b"; "[..])).ok())
                .flatten()
        })
        .collect();
    h.remove(header::COOKIE);
    for v in kept {
        h.append(header::COOKIE, v);
    }
}

/// The name of a `name=value...` cookie pair or `Set-Cookie` value.
fn cookie_name(pair: &[u8]) -> &[u8] {
    let name = pair.split(|b| *b == b'=').next().unwrap_or(pair);
    name.trim_ascii()
}

/// The part of the client's path in front of the forwarded one (`/v1/sandboxes/sb/ports/80`),
/// if there is one.
fn forwarded_prefix(client_path: &str, path_and_query: &str) -> Option<String> {
    let forwarded = path_and_query.split('?').next().unwrap_or("");
    let prefix = client_path.strip_suffix(forwarded)?;
    (!prefix.is_empty()).then(|| prefix.to_string())
}

/// Drops the app's hop-by-hop headers (but keeps `Connection`/`Upgrade` of a 101, which the
/// server needs to switch), a `Content-Length` its `Transfer-Encoding` overrides, and
/// `Service-Worker-Allowed`.
fn strip_response_headers(h: &mut HeaderMap, switching: bool) {
    let kept = switching.then(|| h.get(header::UPGRADE).cloned());
    // The app's body was framed by its Transfer-Encoding, which overrides a Content-Length
    // beside it (RFC 9112 §6.3); the body is framed again for the client, and a Content-Length
    // kept from such a response would cut it short there.
    if h.contains_key(header::TRANSFER_ENCODING) {
        h.remove(header::CONTENT_LENGTH);
    }
    strip_hop_by_hop(h);
    h.remove("service-worker-allowed");
    h.remove("cross-origin-opener-policy");
    let cookies: Vec<HeaderValue> = h
        .get_all(header::SET_COOKIE)
        .iter()
        .filter(|v| cookie_name(v.as_bytes()) != CONSOLE_COOKIE.as_bytes())
        .cloned()
        .collect();
    h.remove(header::SET_COOKIE);
    for v in cookies {
        h.append(header::SET_COOKIE, v);
    }
    if let Some(Some(protocol)) = kept {
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        h.insert(header::UPGRADE, protocol);
    }
}

// ---------------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_origin_form_targets_are_forwarded() {
        assert!(origin_form("/a?b").is_ok());
        for bad in [
            "http://evil.test/",
            "evil.test:80",
            "*",
            "",
            "/a b",
            "/a\r\nHost: x",
        ] {
            let e = origin_form(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidRequest, "{bad:?}");
        }
        // A target that looks like a scheme-relative URL is still only a path.
        let t = Uri::from(origin_form("//evil.test/x").unwrap());
        assert_eq!((t.host(), t.path()), (None, "//evil.test/x"));
    }

    #[test]
    fn prefix_is_what_precedes_the_forwarded_path() {
        assert_eq!(
            forwarded_prefix("/v1/sandboxes/sb/ports/80/a", "/a?x").as_deref(),
            Some("/v1/sandboxes/sb/ports/80")
        );
        assert_eq!(forwarded_prefix("/a", "/a"), None);
    }

    #[test]
    fn the_console_cookie_never_reaches_an_app_nor_comes_from_one() {
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            "a=1; sandlot_session=abc; b=2".parse().unwrap(),
        );
        h.append(header::COOKIE, "sandlot_session=def".parse().unwrap());
        h.append(header::COOKIE, "c=3".parse().unwrap());
        strip_console_cookie(&mut h);
        let left: Vec<&[u8]> = h
            .get_all(header::COOKIE)
            .iter()
            .map(|v| v.as_bytes())
            .collect();
        assert_eq!(left, [&b"a=1; b=2"[..], b"c=3"]);

        let mut h = HeaderMap::new();
        h.append(
            header::SET_COOKIE,
            "sandlot_session=x; Path=/".parse().unwrap(),
        );
        h.append(header::SET_COOKIE, " sandlot_session =y".parse().unwrap());
        h.append(header::SET_COOKIE, "app=1; Path=/".parse().unwrap());
        h.insert("cross-origin-opener-policy", "same-origin".parse().unwrap());
        strip_response_headers(&mut h, false);
        let left: Vec<&[u8]> = h
            .get_all(header::SET_COOKIE)
            .iter()
            .map(|v| v.as_bytes())
            .collect();
        assert_eq!(left, [&b"app=1; Path=/"[..]]);
        assert!(!h.contains_key("cross-origin-opener-policy"));
    }

    #[test]
    fn hop_by_hop_and_named_headers_are_dropped() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, "keep-alive, X-Secret".parse().unwrap());
        h.insert("x-secret", "1".parse().unwrap());
        h.insert("keep-alive", "timeout=5".parse().unwrap());
        h.insert(header::TRANSFER_ENCODING, "chunked".parse().unwrap());
        h.insert("service-worker-allowed", "/".parse().unwrap());
        h.insert(header::CONTENT_TYPE, "text/html".parse().unwrap());
        strip_response_headers(&mut h, false);
        let left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["content-type"]);

        // Chunked framing overrides a Content-Length beside it: neither reaches the client.
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, "5".parse().unwrap());
        h.insert(header::TRANSFER_ENCODING, "chunked".parse().unwrap());
        strip_response_headers(&mut h, false);
        assert!(h.is_empty(), "{h:?}");
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, "5".parse().unwrap());
        strip_response_headers(&mut h, false);
        assert_eq!(h[header::CONTENT_LENGTH], "5");
    }

    #[test]
    fn upgrades_need_both_headers() {
        let mut h = HeaderMap::new();
        h.insert(header::UPGRADE, "websocket".parse().unwrap());
        assert!(upgrade_protocol(&h).is_none());
        h.insert(header::CONNECTION, "keep-alive, Upgrade".parse().unwrap());
        assert_eq!(upgrade_protocol(&h).unwrap(), "websocket");
    }
}
