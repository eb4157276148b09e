//! What the runtime enforces for the server's governance, whatever interface a request came
//! through (REST, E2B, MCP): egress through the host's proxy (`sandlot-egress`), a canary
//! credential per sandbox, output guardrails on everything an execution returns
//! (`sandlot-guard`), and containment.
//!
//! The decisions themselves belong to the server's policy engine: the runtime asks a
//! [`Governor`] (installed once with [`Runtime::install_governor`]) and applies the answer.
//! Without one (`SANDLOT_AUTH=off`) sandboxes get no network, no canary and no scanning.
//!
//! - **Egress.** A sandbox with an allowlist (at creation or `PUT .../network`) gets a proxy
//!   listener inside its network namespace (made through its driver's pidfd) and
//!   `HTTP(S)_PROXY` pointing at it; after a restart in place (a new namespace) the listener is
//!   made again. The allowlist is kept in the sandbox's record; secrets only in memory.
//! - **Canary.** Every sandbox gets AWS-looking credentials in its environment
//!   (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`) that nothing legitimate uses: their
//!   appearance in output or in an egress request is exfiltration.
//! - **Output.** Streamed text passes a [`StreamScanner`] (which holds back an unfinished line,
//!   so a secret split across writes is still caught before any of it is sent); the final
//!   result is scanned whole. Each finding's outcome comes from the governor: pass, redact,
//!   withhold or contain. Findings are recorded by rule and sha256, never by value.
//! - **Containment.** Egress is cut, the sandbox's processes are killed and it is marked
//!   `contained`: it takes no more executions or writes; its files stay on disk and readable
//!   (downloads are scanned too); deleting it works as always.

use crate::util::lock;
use crate::{Entry, Runtime};
use sandlot_egress::{EgressEvent, EgressHooks, GateDecision};
use sandlot_guard::{Canary, Finding, Kind, Scanner, StreamScanner};
use sandlot_types::{ExecutionResult, OutputEvent, Sandbox};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Weak};
use tokio::sync::mpsc;

mod guard;

/// What to do with output that has a finding, most lenient first (the policy engine's type).
pub use sandlot_types::Outcome;

/// One finding in one stream of one sandbox, as the governor is asked about it.
#[derive(Debug, Clone)]
pub struct OutputFinding<'a> {
    pub sandbox: &'a Sandbox,
    pub execution_id: Option<&'a str>,
    pub finding: &'a Finding,
    /// `stdout`, `stderr`, `result`, `file`, `egress`.
    pub stream: &'a str,
    /// Whether to record it: a streamed finding is decided at once but recorded by the final
    /// result's scan, which sees the same text.
    pub record: bool,
}

/// The server's side of governance, called on hot paths: keep every method quick and
/// non-blocking (decide in memory, queue records).
pub trait Governor: Send + Sync + 'static {
    /// The policy gate of an egress attempt that passed the allowlist and the address checks.
    fn egress_gate(
        &self,
        sandbox: &Sandbox,
        host: &str,
        port: u16,
        ip: IpAddr,
        method: &str,
    ) -> GateDecision;
    /// Records an egress attempt (allowed or not).
    fn egress_record(&self, event: EgressEvent);
    /// Decides, and records, what happens to output with this finding; the decision's id.
    fn output(&self, f: &OutputFinding<'_>) -> Outcome;
    /// A sandbox was contained (recorded and, say, announced).
    fn contained(&self, sandbox: &Sandbox, why: &str);
    /// Execution `execution_id`'s output was withheld (`outcome` Withhold) or its sandbox
    /// contained (`Contain`, never released: forget it); when a decision that withheld it was
    /// held for a person's review, keep `original` (the result before the guardrails) for its
    /// release and answer the review's id. By default nothing is held.
    fn hold_output(
        &self,
        _sandbox: &Sandbox,
        _execution_id: &str,
        _outcome: Outcome,
        _original: &sandlot_types::ExecutionResult,
    ) -> Option<String> {
        None
    }
}

/// The runtime's governance state.
pub(crate) struct Governance {
    pub(crate) governor: Arc<dyn Governor>,
    pub(crate) egress: sandlot_egress::Egress,
    scanner: Scanner,
    /// Each sandbox's canary (the values never leave the server but through its env).
    canaries: std::sync::Mutex<HashMap<String, Canary>>,
    /// Canaries a sandbox may hold besides its own: those of the sandbox it was forked or
    /// restored from (its variables and files came from there), transitively.
    inherited: std::sync::Mutex<HashMap<String, Vec<String>>>,
    /// Secrets live here and in the proxy only (never on disk), to be given again after a
    /// restart in place.
    secrets: std::sync::Mutex<HashMap<String, Vec<sandlot_egress::Secret>>>,
    /// Sandboxes whose current processes have a proxy listener.
    attached: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Each sandbox's scanner with its canaries, built once (an Aho-Corasick automaton over
    /// the canaries' encodings costs hundreds of µs: not per execution).
    scanners: std::sync::Mutex<HashMap<String, Arc<Scanner>>>,
}

/// The proxy's hooks: the runtime (weakly, the proxy lives inside it) and its governor.
struct ProxyHooks {
    rt: std::sync::OnceLock<Weak<crate::Inner>>,
    governor: Arc<dyn Governor>,
}

impl EgressHooks for ProxyHooks {
    fn gate(&self, id: &str, host: &str, port: u16, ip: IpAddr, method: &str) -> GateDecision {
        match self.runtime().and_then(|rt| rt.info_of(id)) {
            Some(info) => self.governor.egress_gate(&info, host, port, ip, method),
            None => GateDecision::deny("the sandbox is gone", String::new()),
        }
    }

    fn record(&self, event: EgressEvent) {
        self.governor.egress_record(event);
    }

    fn canary(&self, id: &str, location: &str) {
        if let Some(rt) = self.runtime() {
            let (rt, id, why) = (
                rt,
                id.to_owned(),
                format!("its canary credential was sent out ({location})"),
            );
            sandlot_telemetry::metrics().finding_detected(&id);
            tokio::spawn(async move { rt.contain(&id, &why).await });
        }
    }
}

impl ProxyHooks {
    fn runtime(&self) -> Option<Runtime> {
        self.rt
            .get()
            .and_then(Weak::upgrade)
            .map(|inner| Runtime { inner })
    }
}

/// Where an egress listener for a sandbox comes from.
fn proxy_listener(live: &crate::sandbox::Live) -> std::io::Result<std::net::TcpListener> {
    use std::os::fd::AsFd;
    sandlot_egress::listen_in_netns_fd(live.driver_fd.as_fd(), sandlot_egress::PROXY_PORT)
}

/// The file, in the workspace, of a sandbox's CA bundle (see `install_trust_bundle`).
const TRUST_BUNDLE: &str = ".sandlot-egress-ca.pem";

/// The variables TLS clients (OpenSSL, Python's requests, curl, pip, Node) read a CA bundle from.
const TRUST_BUNDLE_ENV: [&str; 5] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "PIP_CERT",
    "NODE_EXTRA_CA_CERTS",
];

impl Runtime {
    /// Installs the server's governance: the egress proxy (with `hosts`, name overrides from
    /// `SANDLOT_EGRESS_HOSTS`, and `extra_roots`, the roots it trusts for intercepted upstreams
    /// besides the system's, and `services`, the operator's internal services from
    /// `SANDLOT_INTERNAL_SERVICES`), canaries and output guardrails. Once; later calls are
    /// ignored.
    pub fn install_governor(
        &self,
        governor: Arc<dyn Governor>,
        hosts: HashMap<String, Vec<IpAddr>>,
        extra_roots: sandlot_egress::ExtraRoots,
        services: HashMap<String, std::net::SocketAddr>,
    ) {
        let hooks = Arc::new(ProxyHooks {
            rt: std::sync::OnceLock::new(),
            governor: governor.clone(),
        });
        let _ = hooks.rt.set(Arc::downgrade(&self.inner));
        let egress = sandlot_egress::Egress::new(
            sandlot_egress::EgressConfig {
                hosts,
                extra_roots,
                services,
                ..Default::default()
            },
            hooks,
        );
        let _ = self.inner.hooks.governance.set(Governance {
            governor,
            egress,
            scanner: Scanner::default(),
            canaries: Default::default(),
            inherited: Default::default(),
            secrets: Default::default(),
            attached: Default::default(),
            scanners: Default::default(),
        });
    }

    pub(crate) fn governance(&self) -> Option<&Governance> {
        self.inner.hooks.governance.get()
    }

    /// A live sandbox's record, now.
    pub(crate) fn info_of(&self, id: &str) -> Option<Sandbox> {
        lock(&self.inner.registry.sandboxes)
            .get(id)
            .map(|e| lock(&e.info).clone())
    }

    /// Checks a creation's egress allowlist and secrets before anything is booted.
    pub(crate) fn check_network(
        &self,
        req: &sandlot_types::CreateSandbox,
    ) -> Result<(), crate::RuntimeError> {
        if req.network.is_empty() && req.secrets.is_empty() {
            return Ok(());
        }
        if self.governance().is_none() {
            return Err(crate::RuntimeError::NetworkUnavailable);
        }
        sandlot_egress::NetworkRules::parse(&req.network)
            .map_err(|e| crate::RuntimeError::BadNetwork { why: e.to_string() })?;
        to_secrets(&req.secrets)?;
        Ok(())
    }

    /// Governance for a sandbox whose processes just started (created, forked, restored or
    /// restarted in place): its canary and proxy settings in its environment, and its egress
    /// listener when it has an allowlist (or secrets, staged at creation or set by
    /// `PUT .../network`).
    pub(crate) async fn govern_started(
        &self,
        e: &Entry,
        live: &Arc<crate::sandbox::Live>,
    ) -> Result<(), crate::RuntimeError> {
        let Some(g) = self.governance() else {
            return Ok(());
        };
        // A new network namespace: any listener of its previous processes is gone.
        lock(&g.attached).remove(&e.id);
        let canary = {
            let mut canaries = lock(&g.canaries);
            canaries
                .entry(e.id.clone())
                .or_insert_with(Canary::generate)
                .clone()
        };
        self.inherit_canaries(e);
        self.forget_lost_secrets(e);
        lock(&g.scanners).remove(&e.id);
        let mut env: std::collections::BTreeMap<String, String> =
            canary.env().into_iter().collect();
        for (k, v) in sandlot_egress::proxy_env() {
            env.insert(k.to_owned(), v);
        }
        let network = lock(&e.info).network.clone();
        let has_secrets = lock(&g.secrets).get(&e.id).is_some_and(|s| !s.is_empty());
        if has_secrets {
            env.extend(self.install_trust_bundle(e).await?);
        }
        live.send_env(&env, None).await?;
        if !network.is_empty() || has_secrets {
            self.attach_egress(e, live, &network, &canary).await?;
        }
        Ok(())
    }

    async fn attach_egress(
        &self,
        e: &Entry,
        live: &Arc<crate::sandbox::Live>,
        network: &[String],
        canary: &Canary,
    ) -> Result<(), crate::RuntimeError> {
        let Some(g) = self.governance() else {
            return Ok(());
        };
        let rules = sandlot_egress::NetworkRules::parse(network)
            .map_err(|e| crate::RuntimeError::BadNetwork { why: e.to_string() })?;
        let l = live.clone();
        let listener =
            crate::task::blocking("making the egress listener", move || proxy_listener(&l))
                .await?
                .map_err(|source| crate::RuntimeError::EgressListener { source })?;
        g.egress.set_rules(&e.id, rules);
        let secrets = lock(&g.secrets).get(&e.id).cloned().unwrap_or_default();
        g.egress
            .set_secrets(&e.id, secrets)
            .map_err(|err| crate::RuntimeError::BadNetwork {
                why: err.to_string(),
            })?;
        let _ = canary;
        g.egress.set_canaries(&e.id, self.canary_values(&e.id));
        if lock(&e.info).contained.is_some() {
            g.egress.cut(&e.id);
        }
        g.egress
            .attach(&e.id, listener)
            .map_err(|err| crate::RuntimeError::BadNetwork {
                why: err.to_string(),
            })?;
        lock(&g.attached).insert(e.id.clone());
        Ok(())
    }

    /// Writes the CA bundle a sandbox with secrets trusts (the system's roots and its own
    /// egress CA's certificate, through which the proxy terminates TLS for its secrets' hosts)
    /// into its workspace, as its user, through the fd-relative file API; returns the variables
    /// that point TLS clients at it. Only the public certificate is written.
    async fn install_trust_bundle(
        &self,
        e: &Entry,
    ) -> Result<std::collections::BTreeMap<String, String>, crate::RuntimeError> {
        let Some(g) = self.governance() else {
            return Ok(Default::default());
        };
        let bundle =
            g.egress
                .trust_bundle(&e.id)
                .map_err(|err| crate::RuntimeError::BadNetwork {
                    why: err.to_string(),
                })?;
        let body: crate::files::ByteStream = Box::pin(futures::stream::once(async move {
            Ok(bytes::Bytes::from(bundle))
        }));
        let root = self.workspace_root(&e.id)?;
        self.write_file_in(root, TRUST_BUNDLE, body).await?;
        let path = format!("/workspace/{TRUST_BUNDLE}");
        Ok(TRUST_BUNDLE_ENV
            .iter()
            .map(|k| (k.to_string(), path.clone()))
            .collect())
    }

    /// A fork or a restore starts with its source's variables and files, so its source's
    /// canaries (while the server knows them) count as its own for output and egress.
    fn inherit_canaries(&self, e: &Entry) {
        let Some(g) = self.governance() else { return };
        let source = {
            let info = lock(&e.info);
            info.forked_from.clone().or_else(|| {
                info.from_snapshot.as_deref().and_then(|snap| {
                    self.inner
                        .storage
                        .store
                        .get_snapshot(snap)
                        .ok()
                        .flatten()
                        .map(|r| r.snapshot.sandbox_id)
                })
            })
        };
        let Some(source) = source else { return };
        let mut values: Vec<String> = lock(&g.inherited).get(&source).cloned().unwrap_or_default();
        if let Some(c) = lock(&g.canaries).get(&source) {
            values.extend(c.values().iter().map(|v| v.to_string()));
        }
        if !values.is_empty() {
            lock(&g.inherited).insert(e.id.clone(), values);
        }
    }

    /// Secrets live in memory only: after a server restart a sandbox's record may still name
    /// secrets the proxy no longer holds; the names go, so nothing claims they are sent.
    fn forget_lost_secrets(&self, e: &Entry) {
        let Some(g) = self.governance() else { return };
        if lock(&g.secrets).contains_key(&e.id) {
            return;
        }
        let info = {
            let mut info = lock(&e.info);
            if info.secrets.is_empty() {
                return;
            }
            info.secrets.clear();
            info.clone()
        };
        tracing::warn!(sandbox = %e.id, "its secrets were held in memory by a previous server run; set them again with PUT .../network");
        if let Err(err) = self.inner.storage.store.update_sandbox(&info) {
            tracing::warn!(sandbox = %e.id, error = %err, "could not record the forgotten secrets");
        }
    }

    /// Every canary value sandbox `id` may hold (its own and inherited ones).
    fn canary_values(&self, id: &str) -> Vec<String> {
        let Some(g) = self.governance() else {
            return Vec::new();
        };
        let mut v: Vec<String> = lock(&g.canaries)
            .get(id)
            .map(|c| c.values().iter().map(|s| s.to_string()).collect())
            .unwrap_or_default();
        v.extend(lock(&g.inherited).get(id).cloned().unwrap_or_default());
        v
    }

    /// Secrets for a sandbox about to be adopted under `id` (its creation's).
    pub(crate) fn stage_secrets(
        &self,
        id: &str,
        specs: &[sandlot_types::SecretSpec],
    ) -> Result<(), crate::RuntimeError> {
        if let Some(g) = self.governance() {
            if !specs.is_empty() {
                lock(&g.secrets).insert(id.to_owned(), to_secrets(specs)?);
            }
        }
        Ok(())
    }

    /// `PUT /v1/sandboxes/{id}/network`: replaces the allowlist (and, when given, the
    /// secrets) of a sandbox, live.
    pub async fn set_network(
        &self,
        id: &str,
        update: sandlot_types::NetworkUpdate,
    ) -> Result<Sandbox, crate::RuntimeError> {
        let g = self
            .governance()
            .ok_or(crate::RuntimeError::NetworkUnavailable)?;
        let rules = sandlot_egress::NetworkRules::parse(&update.allow)
            .map_err(|e| crate::RuntimeError::BadNetwork { why: e.to_string() })?;
        if let Some(s) = &update.secrets {
            to_secrets(s)?;
        }
        let e = self.entry(id)?;
        if lock(&e.info).contained.is_some() {
            return Err(crate::RuntimeError::Contained { id: id.to_owned() });
        }
        if let Some(s) = &update.secrets {
            lock(&g.secrets).insert(e.id.clone(), to_secrets(s)?);
        }
        let info = {
            let mut info = lock(&e.info);
            info.network = update.allow.clone();
            if let Some(s) = &update.secrets {
                info.secrets = s.iter().map(|s| s.name.clone()).collect();
            }
            info.clone()
        };
        self.inner
            .storage
            .store
            .update_sandbox(&info)
            .map_err(crate::error::store("recording the network allowlist"))?;
        if update.secrets.as_ref().is_some_and(|s| !s.is_empty()) {
            // Secrets given now: its processes trust the CA that intercepts their hosts.
            if let Some(live) = e.live() {
                let env = self.install_trust_bundle(&e).await?;
                live.send_env(&env, None).await?;
            }
        }
        if lock(&g.attached).contains(&e.id) {
            g.egress.set_rules(&e.id, rules);
            let secrets = lock(&g.secrets).get(&e.id).cloned().unwrap_or_default();
            let _ = g.egress.set_secrets(&e.id, secrets);
        } else if let Some(live) = e.live() {
            // Its processes run without a listener yet: one now (a stopped or paused sandbox
            // gets its listener when it starts again).
            let canary = lock(&g.canaries)
                .entry(e.id.clone())
                .or_insert_with(Canary::generate)
                .clone();
            self.attach_egress(&e, &live, &update.allow, &canary)
                .await?;
        }
        Ok(info)
    }

    /// Forgets a sandbox's egress, canary and secrets (it ended).
    pub(crate) fn govern_ended(&self, id: &str) {
        if let Some(g) = self.governance() {
            g.egress.detach(id);
            lock(&g.attached).remove(id);
            lock(&g.canaries).remove(id);
            lock(&g.inherited).remove(id);
            lock(&g.scanners).remove(id);
            lock(&g.secrets).remove(id);
        }
    }

    /// Contains a sandbox: egress cut, processes killed, marked so every later execution or
    /// write is refused. Its files stay.
    pub async fn contain(&self, id: &str, why: &str) {
        let Some(g) = self.governance() else {
            return;
        };
        g.egress.cut(id);
        let Ok(e) = self.entry(id) else {
            return;
        };
        let info = {
            let mut info = lock(&e.info);
            if info.contained.is_some() {
                return;
            }
            info.contained = Some(why.to_owned());
            info.clone()
        };
        tracing::warn!(sandbox = id, why, "sandbox contained");
        if let Err(err) = self.inner.storage.store.update_sandbox(&info) {
            tracing::error!(sandbox = id, error = %err, "containment not recorded");
        }
        g.governor.contained(&info, why);
        if let Some(live) = e.live() {
            live.signal_kill();
        }
        self.emit_for(
            sandlot_types::LifecycleKind::Contained,
            &e,
            None,
            serde_json::json!({"reason": why}),
        );
    }

    /// Refuses work on a contained sandbox.
    pub(crate) fn check_not_contained(&self, e: &Entry) -> Result<(), crate::RuntimeError> {
        if lock(&e.info).contained.is_some() {
            return Err(crate::RuntimeError::Contained { id: e.id.clone() });
        }
        Ok(())
    }
}

/// Files scanned before they leave (larger ones leave unscanned; documented).
pub const MAX_SCANNED_BYTES: u64 = 16 << 20;

/// The proxy's secrets from the API's.
fn to_secrets(
    specs: &[sandlot_types::SecretSpec],
) -> Result<Vec<sandlot_egress::Secret>, crate::RuntimeError> {
    if specs.len() > 32 {
        return Err(crate::RuntimeError::BadNetwork {
            why: "at most 32 secrets".into(),
        });
    }
    let ok_name = |n: &str| {
        !n.is_empty()
            && n.len() <= 64
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
    };
    specs
        .iter()
        .map(|s| {
            if !ok_name(&s.name) {
                return Err(crate::RuntimeError::BadNetwork {
                    why: format!(
                        "secret names are [A-Za-z0-9_.-]{{1,64}}, not {:?}",
                        s.name.chars().take(70).collect::<String>()
                    ),
                });
            }
            Ok(sandlot_egress::Secret {
                name: s.name.clone(),
                hosts: s.hosts.clone(),
                header: s.header.clone(),
                value: s.value.clone(),
            })
        })
        .collect()
}

/// How a finding's kind is named in records and policies.
pub fn kind_str(f: &Finding) -> &'static str {
    match f.kind {
        Kind::Secret => "secret",
        Kind::Canary => "canary",
    }
}
