//! sandlot-egress: the host-side egress proxy that is a sandbox's only way out.
//!
//! A sandbox's network namespace has a loopback interface and nothing else, so it cannot open
//! a connection to anything outside. When it is given an allowlist, the server makes a TCP
//! listener at `127.0.0.1:3128` *inside* that namespace ([`listen_in_netns`]; see `netns` for
//! why a TCP socket there and not a bind-mounted unix socket) and hands it to [`Egress::attach`].
//! The sandbox's `HTTP_PROXY`/`HTTPS_PROXY` point at it ([`proxy_env`]), so pip, requests, curl
//! and friends send every request there; the proxy, running in the server (the host's
//! namespace), decides and makes the outside connection itself. Nothing in the sandbox ever
//! holds a socket to the outside.
//!
//! Per request (a `CONNECT host:port` for HTTPS, an absolute-form `GET http://host/path` for
//! plain HTTP), in this order, the first failure answering the refusal:
//!
//! 1. the request is well formed (400 otherwise; 431 for a head over 16 KiB; a head not sent
//!    within 10 s closes the connection, against slowloris), the sandbox is not cut, and the
//!    method is not `TRACE` or `TRACK` in any case (405: they echo the request, with any
//!    secret the proxy set on it, back to the sandbox);
//! 2. the canary is not in the head, nor in the first 64 KiB of a plain-HTTP body;
//! 3. the host *and port* are named by the allowlist ([`NetworkRules`]; an entry without a
//!    port allows 443 for CONNECT and 80 for plain HTTP, any other port only when listed, as
//!    `host:8443`); only then is the host resolved, so a sandbox cannot use the proxy's
//!    resolver to leak data through DNS names it makes up;
//! 4. resolution (the configured hosts map first, then getaddrinfo), and *every* address is
//!    checked by the address classifier ([`classify`]: loopback, private, link-local,
//!    metadata, the IPv6 spellings of those, the host's own addresses...), which only a CIDR
//!    rule inside the range it names opens: the check is on addresses, not names, which is
//!    what defeats DNS rebinding;
//! 5. the policy gate ([`EgressHooks::gate`], Cedar in the server);
//! 6. a connection to the checked address itself (never a second resolution), within 10 s;
//! 7. CONNECT: `200`, then the tunnel must begin with a TLS ClientHello whose SNI equals the
//!    CONNECT host (an IP host: no SNI), else it is closed with a TLS `access_denied` alert and
//!    the refusal recorded: no plain HTTP past the checks of step 3, no other protocol on an
//!    allowed port, no domain fronting. Nothing of the upstream's reaches the sandbox before
//!    the hello is checked. Then bytes are relayed both ways until both sides close or nothing
//!    moves for the idle timeout. Plain HTTP: the `Host` header must match the URL,
//!    hop-by-hop headers and `Proxy-Authorization` are dropped, the sandbox's secrets for that
//!    host are set, and the request goes out in origin form, one upstream connection each.
//! 8. A CONNECT to a host the sandbox has a secret for is not relayed: after the ClientHello
//!    check the proxy is the TLS server (a certificate for the host from the sandbox's own CA,
//!    which the sandbox trusts through [`Egress::trust_bundle`]), reads one HTTP/1.1 request,
//!    decides it like a plain-HTTP one (the `Host` must be the tunnel's host, no `TRACE`, the
//!    canary scan, the allowlist and the policy gate again), sets the secret and sends it over
//!    TLS to the checked address, verifying the upstream against the system's roots and
//!    [`EgressConfig::extra_roots`] (502 `tls_certificate_error` otherwise). Every other
//!    tunnel stays opaque.
//!
//! Refusals answer a short plain-text body, `egress to HOST:PORT refused: <why>`, with a
//! `Proxy-Status` header (RFC 9209), and every attempt, allowed or not, is recorded once through
//! [`EgressHooks::record`] with its bytes. A sandbox has at most 64 open connections to the
//! proxy. Rules, secrets and the canary change live ([`Egress::set_rules`]): the next request
//! sees the new ones, and open tunnels and requests the new rules would refuse are closed;
//! [`Egress::cut`] (containment) closes everything and refuses everything from then on.

mod addr;
mod error;
mod hooks;
mod intercept;
mod io;
mod netns;
mod proxy;
pub use proxy::HOP_BY_HOP;
mod rules;
mod secrets;
pub mod tls;

pub use addr::{
    canonical, classify, classify_among, own_addresses, read_own_addresses, Forbidden, Reach,
    SPECIAL_RANGES,
};
pub use error::EgressError;
pub use hooks::{EgressEvent, EgressHooks, GateDecision, NullHooks};
pub use intercept::ExtraRoots;
pub use netns::{listen_in_netns, listen_in_netns_fd};
pub use rules::{
    valid_service_name, DomainPattern, Host, NetworkRules, DEFAULT_CONNECT_PORT, DEFAULT_HTTP_PORT,
    SERVICE_PREFIX,
};
pub use secrets::{Secret, MIN_CANARY_LEN};

use proxy::{Policy, SandboxEntry};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The port the proxy listens on inside each sandbox (squid's, which tools expect).
pub const PROXY_PORT: u16 = 3128;

/// The environment a sandbox with egress gets so its HTTP clients use the proxy.
pub fn proxy_env() -> Vec<(&'static str, String)> {
    let url = format!("http://127.0.0.1:{PROXY_PORT}");
    let no_proxy = "localhost,127.0.0.1,::1".to_string();
    vec![
        ("HTTP_PROXY", url.clone()),
        ("HTTPS_PROXY", url.clone()),
        ("http_proxy", url.clone()),
        ("https_proxy", url),
        ("NO_PROXY", no_proxy.clone()),
        ("no_proxy", no_proxy),
    ]
}

/// The proxy's settings; [`Default`] gives the documented bounds.
#[derive(Debug, Clone)]
pub struct EgressConfig {
    /// Names resolved without DNS (tests, local package indexes); see [`parse_hosts`].
    pub hosts: HashMap<String, Vec<IpAddr>>,
    /// Largest request head (request line and headers); past it, 431.
    pub max_head_bytes: usize,
    /// How long a request head may take to arrive (slowloris); past it the connection closes.
    pub head_timeout: Duration,
    /// How long connecting upstream (and resolving) may take.
    pub connect_timeout: Duration,
    /// How long a tunnel or forwarded request may move no byte before it is closed.
    pub idle_timeout: Duration,
    /// Most connections one sandbox may have open to the proxy.
    pub max_connections: usize,
    /// How much of a plain-HTTP request body is held back and scanned for the canary before
    /// the request is sent.
    pub body_scan_bytes: usize,
    /// Roots trusted for intercepted upstreams besides the system's.
    pub extra_roots: ExtraRoots,
    /// The operator's internal services by name (`SANDLOT_INTERNAL_SERVICES`): a sandbox whose
    /// allowlist names `service:<name>` reaches exactly this address and port through the
    /// proxy (private and loopback addresses included), nothing else of it.
    pub services: HashMap<String, std::net::SocketAddr>,
}

impl Default for EgressConfig {
    fn default() -> EgressConfig {
        EgressConfig {
            hosts: HashMap::new(),
            max_head_bytes: 16 << 10,
            head_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            max_connections: 64,
            body_scan_bytes: 64 << 10,
            extra_roots: ExtraRoots::default(),
            services: HashMap::new(),
        }
    }
}

/// Parses the operator's internal services, `name=ip:port[,name=ip:port...]` (the server's
/// `SANDLOT_INTERNAL_SERVICES`; an IPv6 address in brackets): each name once, valid as
/// [`valid_service_name`] says.
pub fn parse_services(spec: &str) -> Result<HashMap<String, std::net::SocketAddr>, EgressError> {
    let mut out = HashMap::new();
    for item in spec.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let bad = |reason: &str| EgressError::BadRule {
            entry: item.to_owned(),
            reason: reason.to_owned(),
        };
        let (name, addr) = item
            .split_once('=')
            .ok_or_else(|| bad("an internal service is name=ip:port"))?;
        if !rules::valid_service_name(name) {
            return Err(bad("a service name is 1 to 63 of a-z 0-9 -"));
        }
        let addr: std::net::SocketAddr = addr
            .parse()
            .map_err(|_| bad("the address is ip:port ([v6]:port)"))?;
        if out.insert(name.to_owned(), addr).is_some() {
            return Err(bad("a service is named once"));
        }
    }
    Ok(out)
}

/// Parses a hosts override map, `name=ip,name=ip` (the server's `SANDLOT_EGRESS_HOSTS`); a
/// name listed twice resolves to every address given for it.
pub fn parse_hosts(spec: &str) -> Result<HashMap<String, Vec<IpAddr>>, EgressError> {
    let mut map: HashMap<String, Vec<IpAddr>> = HashMap::new();
    for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let bad = |reason: String| EgressError::BadHostsEntry {
            entry: entry.to_string(),
            reason,
        };
        let (name, ip) = entry
            .split_once('=')
            .ok_or_else(|| bad("expected name=ip".into()))?;
        let name = rules::normalize_domain(name.trim()).map_err(bad)?;
        let ip: IpAddr = ip
            .trim()
            .parse()
            .map_err(|_| bad(format!("{:?} is not an IP address", ip.trim())))?;
        map.entry(name).or_default().push(ip);
    }
    Ok(map)
}

/// The egress proxy of one server: every sandbox's listener, rules, secrets and canary.
/// Cheap to clone (one shared state).
#[derive(Clone)]
pub struct Egress {
    inner: Arc<proxy::Inner>,
}

impl Egress {
    pub fn new(cfg: EgressConfig, hooks: Arc<dyn EgressHooks>) -> Egress {
        Egress {
            inner: Arc::new(proxy::Inner {
                upstreams: std::sync::OnceLock::new(),
                cfg,
                hooks,
                sandboxes: Mutex::new(HashMap::new()),
            }),
        }
    }

    fn sandboxes(&self) -> MutexGuard<'_, HashMap<String, Arc<SandboxEntry>>> {
        self.inner
            .sandboxes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn entry(&self, sandbox_id: &str) -> Arc<SandboxEntry> {
        self.sandboxes()
            .entry(sandbox_id.to_string())
            .or_insert_with(|| SandboxEntry::new(sandbox_id, self.inner.cfg.max_connections))
            .clone()
    }

    /// Starts serving `listener` (made by [`listen_in_netns`]) for sandbox `sandbox_id`,
    /// replacing (and closing, with its connections) any listener it had: a restarted sandbox
    /// has a new network namespace. Its rules, secrets and canary are kept; a sandbox never
    /// given rules has none (every request refused). Must be called within a tokio runtime.
    pub fn attach(
        &self,
        sandbox_id: &str,
        listener: std::net::TcpListener,
    ) -> Result<(), EgressError> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| EgressError::NoRuntime)?;
        let io = |what: &str| {
            let what = format!("{what} for sandbox {sandbox_id}");
            move |source| EgressError::Io { what, source }
        };
        listener
            .set_nonblocking(true)
            .map_err(io("making the proxy listener non-blocking"))?;
        let listener = {
            let _guard = handle.enter();
            tokio::net::TcpListener::from_std(listener)
                .map_err(io("registering the proxy listener"))?
        };
        let entry = self.entry(sandbox_id);
        let token = entry.replace_listener();
        handle.spawn(proxy::accept_loop(
            self.inner.clone(),
            entry,
            listener,
            token,
        ));
        Ok(())
    }

    /// Replaces sandbox `sandbox_id`'s allowlist. The next request is decided by it; open
    /// tunnels and requests it would refuse are closed.
    pub fn set_rules(&self, sandbox_id: &str, rules: NetworkRules) {
        self.entry(sandbox_id)
            .update(|p| Policy { rules, ..p.clone() });
    }

    /// Replaces sandbox `sandbox_id`'s secrets (validated first; on error nothing changes).
    pub fn set_secrets(&self, sandbox_id: &str, secrets: Vec<Secret>) -> Result<(), EgressError> {
        let parsed = secrets
            .iter()
            .map(Secret::parse)
            .collect::<Result<Vec<_>, _>>()?;
        self.entry(sandbox_id).update(|p| Policy {
            secrets: parsed,
            ..p.clone()
        });
        Ok(())
    }

    /// Sets sandbox `sandbox_id`'s canary (replacing any). An empty string clears it; one
    /// shorter than [`MIN_CANARY_LEN`] is ignored (it would match ordinary traffic).
    pub fn set_canary(&self, sandbox_id: &str, canary: String) {
        self.set_canaries(sandbox_id, vec![canary]);
    }

    /// Sets several canary strings at once (e.g. an access key id and its secret).
    pub fn set_canaries(&self, sandbox_id: &str, canaries: Vec<String>) {
        let canaries: Vec<String> = canaries
            .into_iter()
            .filter(|c| c.len() >= MIN_CANARY_LEN)
            .collect();
        self.entry(sandbox_id).update(|p| Policy {
            canaries,
            ..p.clone()
        });
    }

    /// The CA bundle a sandbox with secrets trusts: the system's roots and the certificate
    /// of the sandbox's own CA (minted now if it has none), whose key never leaves the server.
    /// Through it the proxy terminates TLS for the hosts that have a secret, to set it.
    pub fn trust_bundle(&self, sandbox_id: &str) -> Result<String, EgressError> {
        let ca = self.entry(sandbox_id).ca()?;
        Ok(format!(
            "{}{}",
            self.inner.upstreams().system_pem,
            ca.cert_pem()
        ))
    }

    /// Containment: refuses every request of sandbox `sandbox_id` from now on and closes its
    /// open tunnels and requests. Sticky until [`Egress::detach`] (a sandbox not attached yet
    /// is cut when it is).
    pub fn cut(&self, sandbox_id: &str) {
        self.entry(sandbox_id).update(|p| Policy {
            cut: true,
            ..p.clone()
        });
    }

    /// Whether sandbox `sandbox_id` is cut.
    pub fn is_cut(&self, sandbox_id: &str) -> bool {
        let entry = self.sandboxes().get(sandbox_id).cloned();
        entry.is_some_and(|e| e.policy().cut)
    }

    /// Stops serving sandbox `sandbox_id`: closes its listener and connections and forgets its
    /// rules, secrets and canary.
    pub fn detach(&self, sandbox_id: &str) {
        if let Some(entry) = self.sandboxes().remove(sandbox_id) {
            entry.close();
        }
    }

    /// How many connections sandbox `sandbox_id` has open to the proxy.
    pub fn open_connections(&self, sandbox_id: &str) -> usize {
        let entry = self.sandboxes().get(sandbox_id).cloned();
        entry.map_or(0, |e| e.open_connections())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_maps_parse() {
        let map = parse_hosts("pkg.test=127.0.0.2, pkg.test=::1,Other.Test.=10.0.0.1,").unwrap();
        assert_eq!(
            map["pkg.test"],
            vec![
                "127.0.0.2".parse::<IpAddr>().unwrap(),
                "::1".parse().unwrap()
            ]
        );
        assert_eq!(map["other.test"].len(), 1);
        assert!(parse_hosts("").unwrap().is_empty());
        for bad in ["pkg.test", "pkg.test=nope", "bad name=1.2.3.4"] {
            let e = parse_hosts(bad).unwrap_err().to_string();
            assert!(e.contains("egress hosts entry"), "{e}");
        }
    }

    #[test]
    fn proxy_env_points_at_the_proxy() {
        let env = proxy_env();
        assert!(env.contains(&("HTTPS_PROXY", "http://127.0.0.1:3128".to_string())));
        assert!(env
            .iter()
            .any(|(k, v)| *k == "no_proxy" && v.contains("::1")));
    }
}
