//! The intercepted tunnel: for a host the sandbox has a secret for, the proxy is the TLS server
//! the sandbox talks to and serves it one request, decided like a plain-HTTP one.

use super::*;

impl Conn {
    /// A tunnel to a host the sandbox has a secret for: the proxy is the TLS server the
    /// sandbox talks to (a certificate for the host from the sandbox's CA), and serves it one
    /// HTTP/1.1 request, decided like a plain-HTTP one and sent with the secret over TLS to the
    /// checked address, the upstream's certificate verified. One request per tunnel, as one
    /// upstream connection per plain-HTTP request: the next one is a new CONNECT, checked anew.
    pub(super) async fn intercept(
        self,
        mut client: TokioIo<hyper::upgrade::Upgraded>,
        target: Target,
        ip: IpAddr,
        upstream: Counted<TcpStream>,
        recorder: Recorder,
    ) {
        let cfg = &self.inner.cfg;
        let mut policy = self.entry.policy.subscribe();
        policy.borrow_and_update();
        let hello = tokio::select! {
            res = first_bytes(&mut client, &target.host, cfg.head_timeout) => res,
            () = self.token.cancelled() => return recorder.note_reason(closed_detached()),
        };
        let hello = match hello {
            Ok(hello) if hello.is_empty() => return,
            Ok(hello) => hello,
            Err(refusal) => {
                recorder.note(|e| {
                    e.allowed = false;
                    e.reason = refusal;
                });
                let _ = client.write_all(&TLS_ALERT_ACCESS_DENIED).await;
                let _ = client.shutdown().await;
                return;
            }
        };
        let host = target.host_str();
        let server = match self.entry.ca().and_then(|ca| ca.server_config(&host)) {
            Ok(server) => server,
            Err(err) => {
                recorder.note_reason(format!("closed: {err}"));
                return;
            }
        };
        let session = async {
            let accepted = tokio::time::timeout(
                cfg.head_timeout,
                tokio_rustls::TlsAcceptor::from(server).accept(Replayed::new(hello, client)),
            )
            .await;
            let tls = match accepted {
                Ok(Ok(tls)) => tls,
                Ok(Err(err)) => {
                    return format!("closed: the sandbox's TLS handshake failed: {err}")
                }
                Err(_) => {
                    return "closed: the sandbox's TLS handshake did not finish in time".into()
                }
            };
            let upstream = self.upstream_tls(&host, upstream).await;
            if let Err(why) = &upstream {
                recorder.note_reason(why.clone());
            }
            let slot = Arc::new(Mutex::new(Some(upstream)));
            let (me, target) = (self.clone(), target.clone());
            let svc = hyper::service::service_fn(move |req| {
                let (me, target) = (me.clone(), target.clone());
                let upstream = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
                async move { Ok::<_, Infallible>(me.intercepted(req, target, ip, upstream).await) }
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(cfg.head_timeout)
                .max_header_size(cfg.max_head_bytes)
                .max_buf_size(cfg.max_head_bytes.max(8192).max(cfg.body_scan_bytes))
                .keep_alive(false);
            let _ = builder.serve_connection(TokioIo::new(tls), svc).await;
            String::new()
        };
        let reason = tokio::select! {
            reason = session => reason,
            () = self.token.cancelled() => closed_detached(),
            why = revoked(&mut policy, &target.host, target.port, true, ip) => format!("closed: {why}"),
            () = recorder.traffic.idle(cfg.idle_timeout) => closed_idle(cfg),
        };
        if !reason.is_empty() {
            recorder.note_reason(reason);
        }
    }

    /// TLS to the checked address, for `host`, verified against the system's and the
    /// operator's roots (never a sandbox's CA). `Err` says why, for a 502.
    pub(super) async fn upstream_tls(
        &self,
        host: &str,
        upstream: Counted<TcpStream>,
    ) -> Result<tokio_rustls::client::TlsStream<Counted<TcpStream>>, String> {
        let name = rustls::pki_types::ServerName::try_from(host.to_string())
            .map_err(|e| format!("{host} is not a TLS server name: {e}"))?;
        let connector = tokio_rustls::TlsConnector::from(self.inner.upstreams().config.clone());
        let limit = self.inner.cfg.connect_timeout;
        match tokio::time::timeout(limit, connector.connect(name, upstream)).await {
            Ok(Ok(tls)) => Ok(tls),
            Ok(Err(err)) => Err(format!("the TLS handshake with the upstream failed: {err}")),
            Err(_) => Err(format!(
                "the TLS handshake with the upstream took over {} s",
                limit.as_secs_f64()
            )),
        }
    }

    /// One request inside an intercepted tunnel: the plain-HTTP checks, then `forward`.
    pub(super) async fn intercepted(
        &self,
        req: Request<Incoming>,
        target: Target,
        ip: IpAddr,
        upstream: Option<Result<tokio_rustls::client::TlsStream<Counted<TcpStream>>, String>>,
    ) -> Response<ProxyBody> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let (parts, body) = req.into_parts();
        let mut attempt = Attempt {
            host: target.host_str(),
            shown: format!("{}:{}", target.host, target.port),
            port: target.port,
            ip: Some(ip),
            method: parts.method.to_string(),
            decision_id: None,
            started: SystemTime::now(),
        };
        let decided = self
            .decide_intercepted(&parts, body, &target, ip, &mut attempt)
            .await;
        match (decided, upstream) {
            (Err(refusal), _) => self.refuse(&attempt, refusal),
            (Ok(_), None) => self.refuse(
                &attempt,
                Refusal::bad("one request per intercepted tunnel (open a new connection)"),
            ),
            (Ok(_), Some(Err(why))) => self.refuse(
                &attempt,
                Refusal::new(StatusCode::BAD_GATEWAY, "tls_certificate_error", why),
            ),
            (Ok((body, policy)), Some(Ok(upstream))) => {
                self.forward(attempt, parts, target, ip, upstream, body, &policy, true)
                    .await
            }
        }
    }

    /// The checks of a plain-HTTP request, for one inside an intercepted tunnel to `target`.
    pub(super) async fn decide_intercepted(
        &self,
        parts: &Parts,
        body: Incoming,
        target: &Target,
        ip: IpAddr,
        attempt: &mut Attempt,
    ) -> Result<(PrefixedBody, Arc<Policy>), Refusal> {
        let policy = self.entry.policy();
        refuse_cut_or_echo(parts, &policy)?;
        if parts.method == Method::CONNECT {
            return Err(Refusal::bad("CONNECT inside a tunnel is not proxied"));
        }
        if let Some(authority) = parts.uri.authority() {
            let same = Host::parse(authority.host()).is_ok_and(|h| h == target.host)
                && authority.port_u16().unwrap_or(443) == target.port;
            if !same {
                return Err(Refusal::denied(format!(
                    "the URL's host {authority} does not match the tunnel's host {}",
                    target.authority
                )));
            }
        }
        target.check_host_header(&parts.headers, 443)?;
        self.refuse_canary(&head_text(parts), "head", parts, &policy, attempt)?;
        policy
            .rules
            .check_host(&target.host, target.port, true)
            .and_then(|()| policy.rules.check_addr(ip))
            .map_err(Refusal::denied)?;
        let body = self.scan_body(body, parts, &policy, attempt).await?;
        self.gate(attempt, target.port, ip, parts.method.as_str())?;
        Ok((body, policy))
    }

    /// Holds the first `body_scan_bytes` of a request's body and refuses it if they carry the
    /// canary; the body to send on.
    pub(super) async fn scan_body(
        &self,
        body: Incoming,
        parts: &Parts,
        policy: &Policy,
        attempt: &Attempt,
    ) -> Result<PrefixedBody, Refusal> {
        let cfg = &self.inner.cfg;
        let mut body = PrefixedBody {
            prefix: VecDeque::new(),
            rest: body,
        };
        let scanned = body
            .hold_prefix(cfg.body_scan_bytes, cfg.idle_timeout)
            .await
            .map_err(Refusal::bad)?;
        self.refuse_canary(&scanned, "body", parts, policy, attempt)?;
        Ok(body)
    }

    /// Reports and refuses `bytes` of a request (its `part`) that carry the canary.
    pub(super) fn refuse_canary(
        &self,
        bytes: &[u8],
        part: &str,
        parts: &Parts,
        policy: &Policy,
        attempt: &Attempt,
    ) -> Result<(), Refusal> {
        if !find_canary(bytes, &policy.canaries) {
            return Ok(());
        }
        self.inner.hooks.canary(
            &self.entry.id,
            &format!("egress request {part}: {} {}", parts.method, attempt.shown),
        );
        Err(Refusal::denied(
            "the request carries this sandbox's canary credential",
        ))
    }
}
