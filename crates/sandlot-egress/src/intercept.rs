//! What the proxy needs to terminate TLS for a host that has a secret: the sandbox's own CA,
//! certificates for the hosts it signs, and the roots the real upstream is verified against.
//!
//! A secret is a header, so the proxy must see the request to set it; through a CONNECT tunnel
//! that means being the TLS server the sandbox talks to. Each sandbox gets a CA of its own,
//! minted in the server's memory when it is first asked for and forgotten with the sandbox: its
//! private key is never written anywhere, and only its certificate is given to the sandbox (in
//! the trust bundle of [`crate::Egress::trust_bundle`]). A leaf certificate for a host is made
//! on the first intercepted tunnel to it and kept for the sandbox's life. The upstream side is
//! an ordinary TLS client that verifies the server against the system's roots and the
//! operator's extra ones ([`ExtraRoots`]), never against a sandbox's CA.

use crate::error::EgressError;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::collections::HashMap;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Where the system's CA bundle usually is (Debian/Ubuntu, then Fedora/RHEL, then Alpine/SUSE).
const SYSTEM_BUNDLES: [&str; 3] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
];

/// Most leaf certificates one sandbox's CA keeps (a wildcard secret could name many hosts).
const MAX_LEAVES: usize = 256;

/// PEM certificates the proxy trusts for intercepted upstreams besides the system's (an
/// internal CA; a test's loopback server). The server reads them from
/// `SANDLOT_EGRESS_EXTRA_ROOTS`.
#[derive(Debug, Clone, Default)]
pub struct ExtraRoots {
    certs: Vec<CertificateDer<'static>>,
}

impl ExtraRoots {
    /// Reads every certificate of the PEM file at `path` (at least one).
    pub fn read(path: &Path) -> Result<ExtraRoots, EgressError> {
        let bad = |reason: String| EgressError::BadRoots {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
        let certs = CertificateDer::pem_slice_iter(&text)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(format!("not PEM certificates: {e}")))?;
        if certs.is_empty() {
            return Err(bad("no certificate in it".into()));
        }
        Ok(ExtraRoots { certs })
    }
}

/// The TLS client for intercepted upstreams, and the system bundle's text (for the sandboxes'
/// trust bundles). Made once per server, when first needed.
pub(crate) struct Upstreams {
    pub config: Arc<rustls::ClientConfig>,
    pub system_pem: String,
}

impl Upstreams {
    pub(crate) fn new(extra: &ExtraRoots) -> Upstreams {
        let system_pem = SYSTEM_BUNDLES
            .iter()
            .find_map(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_else(|| {
                tracing::warn!("no system CA bundle found: intercepted upstreams are verified against SANDLOT_EGRESS_EXTRA_ROOTS only");
                String::new()
            });
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(system_pem.as_bytes()).flatten() {
            // A bundle may hold a root rustls cannot parse; the others still count.
            let _ = roots.add(cert);
        }
        for cert in &extra.certs {
            let _ = roots.add(cert.clone());
        }
        let mut config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("the ring provider supports the default TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let mut system_pem = system_pem;
        if !system_pem.is_empty() && !system_pem.ends_with('\n') {
            system_pem.push('\n');
        }
        Upstreams {
            config: Arc::new(config),
            system_pem,
        }
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// One sandbox's CA and the host certificates it signed.
pub(crate) struct SandboxCa {
    key: KeyPair,
    cert: rcgen::Certificate,
    leaves: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
}

fn tls_error(what: &str, err: impl std::fmt::Display) -> EgressError {
    EgressError::Tls {
        what: what.to_string(),
        reason: err.to_string(),
    }
}

impl SandboxCa {
    pub(crate) fn generate(sandbox_id: &str) -> Result<SandboxCa, EgressError> {
        let err = |e| tls_error("minting the sandbox's egress CA", e);
        let key = KeyPair::generate().map_err(err)?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        params.distinguished_name.push(
            DnType::CommonName,
            format!("sandlot egress CA for sandbox {sandbox_id}"),
        );
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).map_err(err)?;
        Ok(SandboxCa {
            key,
            cert,
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The CA's certificate, PEM (public: what the sandbox trusts).
    pub(crate) fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    /// A TLS server configuration presenting a certificate for `host` signed by this CA.
    pub(crate) fn server_config(
        &self,
        host: &str,
    ) -> Result<Arc<rustls::ServerConfig>, EgressError> {
        let mut leaves = self.leaves.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(config) = leaves.get(host) {
            return Ok(config.clone());
        }
        let err = |e| tls_error("signing a host certificate", e);
        let key = KeyPair::generate().map_err(err)?;
        let mut params = CertificateParams::new(vec![host.to_string()]).map_err(err)?;
        params.distinguished_name.push(DnType::CommonName, host);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let leaf = params.signed_by(&key, &self.cert, &self.key).map_err(err)?;
        let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_error("configuring TLS", e))?
            .with_no_client_auth()
            .with_single_cert(vec![leaf.der().clone()], key_der)
            .map_err(|e| tls_error("configuring TLS", e))?;
        // HTTP/1.1 is what the proxy serves inside; a client offering h2 falls back to it.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        if leaves.len() >= MAX_LEAVES {
            leaves.clear();
        }
        leaves.insert(host.to_string(), config.clone());
        Ok(config)
    }
}

/// A stream whose first bytes, already read from it (the ClientHello, checked), are read again.
pub(crate) struct Replayed<S> {
    prefix: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S> Replayed<S> {
    pub(crate) fn new(prefix: Vec<u8>, inner: S) -> Replayed<S> {
        Replayed {
            prefix,
            at: 0,
            inner,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Replayed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.at < self.prefix.len() {
            let n = buf.remaining().min(self.prefix.len() - self.at);
            let at = self.at;
            buf.put_slice(&self.prefix[at..at + n]);
            self.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Replayed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_certificates_chain_to_the_sandbox_ca_only() {
        let ca = SandboxCa::generate("sb-1").unwrap();
        assert!(ca.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        let first = ca.server_config("api.test").unwrap();
        assert!(Arc::ptr_eq(&first, &ca.server_config("api.test").unwrap()));
        let other = SandboxCa::generate("sb-2").unwrap();
        assert_ne!(ca.cert_pem(), other.cert_pem());
    }

    #[test]
    fn extra_roots_must_hold_a_certificate() {
        let dir = std::env::temp_dir().join(format!("sandlot-roots-{}", std::process::id()));
        std::fs::write(&dir, "not pem").unwrap();
        let e = ExtraRoots::read(&dir).unwrap_err().to_string();
        assert!(e.contains("no certificate"), "{e}");
        let ca = SandboxCa::generate("sb").unwrap();
        std::fs::write(&dir, ca.cert_pem()).unwrap();
        assert_eq!(ExtraRoots::read(&dir).unwrap().certs.len(), 1);
        let _ = std::fs::remove_file(&dir);
    }
}
