//! A request as the proxy decides it: where it goes ([`Target`]), its record ([`Attempt`], and
//! the [`Recorder`] that files an allowed one when its connection ends) and how a refusal is
//! answered ([`Refusal`]).

use crate::hooks::{EgressEvent, EgressHooks};
use crate::io::Traffic;
use crate::rules::Host;
use hyper::header::{self, HeaderMap};
use hyper::http::request::Parts;
use hyper::http::uri::Authority;
use hyper::{Method, StatusCode};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// A request being decided, for its record.
pub(super) struct Attempt {
    pub(super) host: String,
    /// `host:port` as shown in answers (`[::1]:443`).
    pub(super) shown: String,
    pub(super) port: u16,
    pub(super) ip: Option<IpAddr>,
    pub(super) method: String,
    pub(super) decision_id: Option<String>,
    pub(super) started: SystemTime,
}

impl Attempt {
    pub(super) fn event(
        &self,
        sandbox_id: &str,
        allowed: bool,
        status: u16,
        reason: String,
    ) -> EgressEvent {
        EgressEvent {
            sandbox_id: sandbox_id.to_string(),
            host: self.host.clone(),
            port: self.port,
            ip: self.ip,
            method: self.method.clone(),
            allowed,
            reason,
            status,
            decision_id: self.decision_id.clone(),
            bytes_up: 0,
            bytes_down: 0,
            started: self.started,
            ended: SystemTime::now(),
        }
    }
}

/// How a refusal is answered.
pub(super) struct Refusal {
    pub(super) status: StatusCode,
    /// The RFC 9209 error type for `Proxy-Status`.
    pub(super) proxy_error: &'static str,
    pub(super) reason: String,
    /// Whether the request had been allowed (a failure to reach an allowed destination).
    pub(super) allowed: bool,
}

impl Refusal {
    pub(super) fn new(
        status: StatusCode,
        proxy_error: &'static str,
        reason: impl Into<String>,
    ) -> Refusal {
        Refusal {
            status,
            proxy_error,
            reason: reason.into(),
            allowed: false,
        }
    }

    pub(super) fn denied(reason: impl Into<String>) -> Refusal {
        Refusal::new(StatusCode::FORBIDDEN, "http_request_denied", reason)
    }

    pub(super) fn bad(reason: impl Into<String>) -> Refusal {
        Refusal::new(StatusCode::BAD_REQUEST, "http_request_error", reason)
    }
}

/// Records an allowed attempt once, when the last holder lets go: the handler (which knows the
/// status) and the task driving the upstream connection (which knows when it ended).
pub(super) struct Recorder {
    pub(super) hooks: Arc<dyn EgressHooks>,
    pub(super) event: Mutex<Option<EgressEvent>>,
    pub(super) traffic: Arc<Traffic>,
}

impl Recorder {
    pub(super) fn new(
        hooks: Arc<dyn EgressHooks>,
        event: EgressEvent,
        traffic: Arc<Traffic>,
    ) -> Recorder {
        Recorder {
            hooks,
            event: Mutex::new(Some(event)),
            traffic,
        }
    }

    pub(super) fn note(&self, change: impl FnOnce(&mut EgressEvent)) {
        let mut event = self.event.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(event) = event.as_mut() {
            change(event);
        }
    }

    /// Sets the reason unless one is set already (the first cause of an ending wins).
    pub(super) fn note_reason(&self, reason: String) {
        self.note(|e| {
            if e.reason.is_empty() {
                e.reason = reason;
            }
        });
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let event = self
            .event
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(mut event) = event {
            event.bytes_up = self.traffic.up();
            event.bytes_down = self.traffic.down();
            event.ended = SystemTime::now();
            self.hooks.record(event);
        }
    }
}

/// Where a request goes.
#[derive(Clone)]
pub(super) struct Target {
    pub(super) host: Host,
    pub(super) port: u16,
    /// The URL's authority as sent (`pkg.test:8080`), the `Host` of a forwarded request.
    pub(super) authority: Authority,
}

impl Target {
    pub(super) fn host_str(&self) -> String {
        match &self.host {
            Host::Domain(name) => name.clone(),
            Host::Ip(ip) => ip.to_string(),
        }
    }

    pub(super) fn of(parts: &Parts) -> Result<Target, Refusal> {
        let connect = parts.method == Method::CONNECT;
        let authority = if connect {
            parts
                .uri
                .authority()
                .ok_or_else(|| Refusal::bad("CONNECT needs a host:port target"))?
        } else {
            match parts.uri.scheme_str() {
                Some("http") => {}
                Some("https") => {
                    return Err(Refusal::bad(
                        "https:// URLs go through CONNECT (set HTTPS_PROXY to this proxy)",
                    ))
                }
                Some(other) => {
                    return Err(Refusal::bad(format!(
                        "the {other}:// scheme is not proxied (http and https only)"
                    )))
                }
                None => {
                    return Err(Refusal::bad(
                        "this is an HTTP proxy: the request target must be an absolute URL \
                         (http://host/path) or CONNECT host:port",
                    ))
                }
            }
            parts
                .uri
                .authority()
                .ok_or_else(|| Refusal::bad("the URL has no host"))?
        };
        if authority.as_str().contains('@') {
            return Err(Refusal::bad("credentials in the URL are not forwarded"));
        }
        let port = match (authority.port_u16(), connect) {
            (Some(0), _) => return Err(Refusal::bad("port 0 is not a destination")),
            (Some(port), _) => port,
            (None, true) => return Err(Refusal::bad("CONNECT needs a host:port target")),
            (None, false) => 80,
        };
        let host = Host::parse(authority.host())
            .map_err(|why| Refusal::bad(format!("the host {:?}: {why}", authority.host())))?;
        Ok(Target {
            host,
            port,
            authority: authority.clone(),
        })
    }

    /// A request's `Host` header, if any, must name the URL's host and port (`default_port`
    /// when it names none: 80 for plain HTTP, 443 inside an intercepted tunnel).
    pub(super) fn check_host_header(
        &self,
        headers: &HeaderMap,
        default_port: u16,
    ) -> Result<(), Refusal> {
        let mut values = headers.get_all(header::HOST).iter();
        let Some(value) = values.next() else {
            return Ok(()); // HTTP/1.0: the URL is the only authority
        };
        if values.next().is_some() {
            return Err(Refusal::bad("more than one Host header"));
        }
        let given: Authority = value
            .to_str()
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| Refusal::bad("the Host header is not a host[:port]"))?;
        let same = Host::parse(given.host()).is_ok_and(|h| h == self.host)
            && given.port_u16().unwrap_or(default_port) == self.port;
        if !same {
            return Err(Refusal::denied(format!(
                "the Host header {given} does not match the URL's host {}",
                self.authority
            )));
        }
        Ok(())
    }
}
