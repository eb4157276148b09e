//! Who may use the E2B API: API keys for the control plane, and a token per sandbox for what
//! is addressed to a sandbox.
//!
//! The control plane's `X-API-KEY` is either a sandlot API key (`sl_...`: the request acts
//! for that key's tenant, like `/v1` with the same key) or the server's E2B key, which acts
//! as a member (not an admin: never the operator) of the tenant `default` (whose sandboxes
//! every E2B request made before tenants, and what a single-user setup keeps using). The E2B key lives in `<data_dir>/e2b-api-key`
//! (mode 0600, created on first start as `e2b_` and 40 hex characters, the shape E2B's keys
//! have, so SDKs that look at a prefix accept it); `SANDLOT_E2B_API_KEY` overrides it.
//!
//! A sandbox's tokens are HMAC-SHA256 of its id under a server secret of their own
//! (`<data_dir>/e2b-token-secret`, not the E2B key, which clients hold): nothing to store, they
//! survive a server restart, and one sandbox's token opens no other sandbox. They are handed
//! out only by the control plane's answers about that sandbox, which only its tenant gets.
//! Two tokens, with different labels, because E2B gives them different reach: the envd
//! access token opens everything in the sandbox (files, processes, code), the traffic token
//! only its ports other than envd's (what E2B hands out for its public URLs). An API key in
//! `X-API-KEY` opens its own tenant's sandboxes and no other: another tenant's sandbox is
//! answered as one that does not exist.

use crate::{Ctx, E2bError};
use axum::http::{HeaderMap, StatusCode};
use hmac::{Hmac, Mac};
use sandlot_types::{Principal, DEFAULT_TENANT};
use sha2::Sha256;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use subtle::ConstantTimeEq;

/// The file under the data dir that holds the key.
pub const KEY_FILE: &str = "e2b-api-key";
/// The variable that overrides the key file.
pub const KEY_ENV: &str = "SANDLOT_E2B_API_KEY";
/// envd's port: what only the envd token (or the API key) opens.
pub(crate) const ENVD_PORT: u16 = 49983;

/// Header names the SDKs send (lower case: HTTP/2 and the header map use that).
pub(crate) const API_KEY_HEADER: &str = "x-api-key";
pub(crate) const ACCESS_TOKEN_HEADER: &str = "x-access-token";
pub(crate) const TRAFFIC_TOKEN_HEADER: &str = "e2b-traffic-access-token";
pub(crate) const SANDBOX_ID_HEADER: &str = "e2b-sandbox-id";
pub(crate) const SANDBOX_PORT_HEADER: &str = "e2b-sandbox-port";

/// The file under the data dir that holds the secret sandboxes' tokens are made with.
pub const TOKEN_SECRET_FILE: &str = "e2b-token-secret";

/// The server's E2B credentials.
pub(crate) struct Auth {
    key: String,
    /// Keyed once with the token secret; cloned per token (cheaper than re-keying).
    mac: Hmac<Sha256>,
}

/// A request refused: the status, and a message safe to show the client. Each protocol puts
/// it in its own format.
#[derive(Debug, Clone)]
pub(crate) struct Denied {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
    /// sandlot's stable code, when it is not the one the status implies.
    pub(crate) code: Option<&'static str>,
}

impl Denied {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            code: None,
        }
    }

    /// What E2B's proxy answers for a sandbox that does not exist (the SDKs raise their
    /// sandbox-not-running exception on it): also the answer for another tenant's sandbox.
    pub(crate) fn sandbox_missing(id: &str) -> Self {
        Self {
            status: StatusCode::BAD_GATEWAY,
            message: format!("The sandbox {id} was not found"),
            code: Some("sandbox_not_found"),
        }
    }
}

impl Auth {
    /// The key from `SANDLOT_E2B_API_KEY`, else from the key file, which is created when
    /// missing.
    ///
    /// Sandboxes' tokens are keyed with a secret of their own (`<data_dir>/e2b-token-secret`,
    /// made on first start), not with the key: the key is typed into clients and
    /// environments, and whoever learns it must not also be able to make every sandbox's
    /// tokens (nor does setting `SANDLOT_E2B_API_KEY` change them).
    pub(crate) fn load(data_dir: &Path) -> Result<Self, E2bError> {
        let key = match std::env::var(KEY_ENV) {
            Ok(k) if !k.trim().is_empty() => k.trim().to_owned(),
            _ => load_or_create(&data_dir.join(KEY_FILE), "e2b_")?,
        };
        let secret = load_or_create(&data_dir.join(TOKEN_SECRET_FILE), "")?;
        Ok(Self::new(key, &secret))
    }

    pub(crate) fn new(key: String, token_secret: &str) -> Self {
        let mac = Hmac::<Sha256>::new_from_slice(token_secret.as_bytes())
            .expect("HMAC takes keys of any length");
        Self { key, mac }
    }

    /// The token envd requests of sandbox `id` carry (`envdAccessToken`).
    pub(crate) fn envd_token(&self, id: &str) -> String {
        self.token("envd:", id)
    }

    /// The token requests to the sandbox's other ports may carry instead
    /// (`trafficAccessToken`).
    pub(crate) fn traffic_token(&self, id: &str) -> String {
        self.token("traffic:", id)
    }

    fn token(&self, label: &str, id: &str) -> String {
        let mut mac = self.mac.clone();
        mac.update(label.as_bytes());
        mac.update(id.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// Whether `headers` carry the server's E2B key in `X-API-KEY`.
    fn has_e2b_key(&self, headers: &HeaderMap) -> bool {
        header_eq(headers, API_KEY_HEADER, &self.key)
    }
}

/// Who the server's E2B key is: a member of the tenant `default` (its sandboxes are that
/// tenant's, as every E2B request's were before tenants). Not an admin, so never the operator:
/// the key is typed into clients and environments, and a policy that gives the operator more
/// (templates with packages, special egress) must not give it to whoever holds the E2B key.
fn e2b_key_principal(ctx: &Ctx) -> Principal {
    let mut p = sandlot_api::govern::local_principal();
    p.key_id = "e2b".into();
    p.key_prefix = "e2b".into();
    p.role = sandlot_types::Role::Member;
    if let Some(t) = ctx
        .gov
        .as_deref()
        .and_then(|g| g.keys.tenant(DEFAULT_TENANT))
    {
        p.plan = t.plan;
    }
    p
}

/// The control plane's check: who `X-API-KEY` is (see the module docs), or the 401.
pub(crate) fn principal(ctx: &Ctx, headers: &HeaderMap) -> Result<Principal, Denied> {
    let denied = |why: &str| {
        Denied::new(
            StatusCode::UNAUTHORIZED,
            format!(
                "{why}: set E2B_API_KEY to a sandlot API key (`sandlot keys create`) or the \
                 server's E2B key"
            ),
        )
    };
    let Some(value) = headers.get(API_KEY_HEADER) else {
        return Err(denied("missing X-API-KEY header"));
    };
    if ctx.auth.has_e2b_key(headers) {
        return Ok(e2b_key_principal(ctx));
    }
    let Some(gov) = ctx.gov.as_deref() else {
        return Err(denied("invalid API key"));
    };
    let key = value.to_str().map_err(|_| denied("invalid API key"))?;
    gov.keys
        .authenticate(key.trim())
        .map_err(|e| denied(&format!("invalid API key ({e})")))
}

/// Whether `headers` carry an API key whose tenant owns sandbox `id`; `None` when they carry
/// no valid API key at all.
fn key_owns(ctx: &Ctx, id: &str, headers: &HeaderMap) -> Option<bool> {
    if !headers.contains_key(API_KEY_HEADER) {
        return None;
    }
    let who = principal(ctx, headers).ok()?;
    // The audit record names the key (not a sandbox token), whether it opens this sandbox
    // or is refused.
    sandlot_api::record::Note::set_principal(&who);
    Some(crate::tenancy::owns(ctx, &who, id))
}

/// Whether `headers` carry what opens everything in sandbox `id`: its envd token, or an API
/// key of its tenant (not the traffic token, which opens its ports only).
pub(crate) fn opens_everything(ctx: &Ctx, id: &str, headers: &HeaderMap) -> bool {
    header_eq(headers, ACCESS_TOKEN_HEADER, &ctx.auth.envd_token(id))
        || key_owns(ctx, id, headers) == Some(true)
}

/// Checks a request addressed to a sandbox (by `E2b-Sandbox-Id`) and returns the sandbox's id.
///
/// Accepted: `X-Access-Token` = the sandbox's envd token, or, for a port other than envd's
/// (`E2b-Sandbox-Port`), `E2B-Traffic-Access-Token` = the sandbox's traffic token, or
/// `X-API-KEY` = an API key of the sandbox's tenant (the E2B key: the tenant `default`'s).
/// With a token, whether the sandbox exists is the runtime's to say: a valid token cannot be
/// made for an id without the server's key. With an API key, another tenant's sandbox is
/// answered as a missing one, whatever the route.
pub(crate) fn check_sandbox(ctx: &Ctx, headers: &HeaderMap) -> Result<String, Denied> {
    let id = headers
        .get(SANDBOX_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| Denied::new(StatusCode::BAD_REQUEST, "missing E2b-Sandbox-Id header"))?;
    if id.len() > 128 {
        return Err(Denied::new(
            StatusCode::BAD_REQUEST,
            "E2b-Sandbox-Id is too long",
        ));
    }
    let auth = &ctx.auth;
    if header_eq(headers, ACCESS_TOKEN_HEADER, &auth.envd_token(id)) {
        return Ok(id.to_owned());
    }
    let port = sandbox_port(headers);
    if port != Some(ENVD_PORT) && header_eq(headers, TRAFFIC_TOKEN_HEADER, &auth.traffic_token(id))
    {
        return Ok(id.to_owned());
    }
    match key_owns(ctx, id, headers) {
        Some(true) => return Ok(id.to_owned()),
        Some(false) => return Err(Denied::sandbox_missing(id)),
        None => {}
    }
    let present = [ACCESS_TOKEN_HEADER, API_KEY_HEADER, TRAFFIC_TOKEN_HEADER]
        .iter()
        .any(|h| headers.contains_key(*h));
    Err(Denied::new(
        StatusCode::UNAUTHORIZED,
        if present {
            "invalid access token for this sandbox"
        } else {
            "missing X-Access-Token header (the sandbox's envdAccessToken)"
        },
    ))
}

/// The port an E2B request is addressed to (`E2b-Sandbox-Port`), if it names one.
pub(crate) fn sandbox_port(headers: &HeaderMap) -> Option<u16> {
    headers
        .get(SANDBOX_PORT_HEADER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Constant-time comparison of a header's value with `expected` (the length may leak; the
/// content does not).
fn header_eq(headers: &HeaderMap, name: &str, expected: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .any(|v| bool::from(v.as_bytes().ct_eq(expected.as_bytes())))
}

/// The secret in `path`, made (`prefix` and 40 random hex characters, mode 0600) when missing.
fn load_or_create(path: &Path, prefix: &str) -> Result<String, E2bError> {
    let err = |source| E2bError::KeyFile {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::read_to_string(path) {
        Ok(s) if !s.trim().is_empty() => return Ok(s.trim().to_owned()),
        Ok(_) => {
            return Err(err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "the file is empty: delete it to have a new key made",
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e)),
    }
    let mut raw = [0u8; 20];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut raw))
        .map_err(err)?;
    let key = format!("{prefix}{}", hex::encode(raw));
    // create_new: two servers starting on one data dir must not hand out different keys.
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path);
    match created {
        Ok(mut f) => {
            f.write_all(format!("{key}\n").as_bytes())
                .and_then(|()| f.sync_all())
                .map_err(err)?;
            Ok(key)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => std::fs::read_to_string(path)
            .map(|s| s.trim().to_owned())
            .map_err(err),
        Err(e) => Err(err(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_differ_by_sandbox_and_purpose() {
        let a = Auth::new("e2b_k".into(), "secret");
        assert_eq!(a.envd_token("sb1"), a.envd_token("sb1"));
        assert_ne!(a.envd_token("sb1"), a.envd_token("sb2"));
        assert_ne!(a.envd_token("sb1"), a.traffic_token("sb1"));
        assert_ne!(
            a.envd_token("sb1"),
            Auth::new("e2b_k".into(), "another secret").envd_token("sb1")
        );
        // The key alone makes no token: tokens depend on the secret only.
        assert_eq!(
            a.envd_token("sb1"),
            Auth::new("e2b_other".into(), "secret").envd_token("sb1")
        );
        assert_eq!(a.envd_token("x").len(), 64);
    }

    #[test]
    fn key_file_created_once_with_mode_0600() {
        let dir = std::env::temp_dir().join(format!("sandlot-e2b-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(KEY_FILE);
        let _ = std::fs::remove_file(&path);
        let k1 = load_or_create(&path, "e2b_").unwrap();
        let k2 = load_or_create(&path, "e2b_").unwrap();
        assert_eq!(k1, k2);
        assert!(k1.starts_with("e2b_") && k1.len() == 44, "{k1}");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
