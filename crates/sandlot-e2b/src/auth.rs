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
//! The MAC also covers the sandbox's credential epoch (`sandlot_service::epochs`, moved on by
//! `POST /v1/sandboxes/{id}/ports/rotate`: every earlier token is refused at once, across
//! restarts) and an expiry (`SANDLOT_ENVD_TOKEN_TTL` after the answer that handed it out; 0:
//! none): `<epoch>-<expiry>.<32 hex>`. A sandbox never rotated, on a server without a TTL,
//! keeps the older form (64 hex, the id only), so tokens handed out before stay valid. A
//! refused token is 401 with a stable code: `token_invalid` (not this sandbox's, malformed,
//! too long), `token_revoked` (an earlier epoch), `token_expired`; clients get fresh tokens
//! from E2B's connect.
//! Two tokens, with different labels, because E2B gives them different reach: the envd
//! access token opens everything in the sandbox (files, processes, code), the traffic token
//! only its ports other than envd's (what E2B hands out for its public URLs). An API key in
//! `X-API-KEY` opens its own tenant's sandboxes and no other: another tenant's sandbox is
//! answered as one that does not exist.

use crate::{Ctx, E2bError};
use axum::http::{HeaderMap, StatusCode};
use hmac::{Hmac, Mac};
use sandlot_service::epochs::Epochs;
use sandlot_types::{Principal, DEFAULT_TENANT};
use sha2::Sha256;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
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

/// The longest token looked at: longer ones are refused before any MAC is computed.
const MAX_TOKEN_LEN: usize = 96;

/// The server's E2B credentials.
pub(crate) struct Auth {
    key: String,
    /// Keyed once with the token secret; cloned per token (cheaper than re-keying).
    mac: Hmac<Sha256>,
    /// Sandboxes' credential epochs (shared with `/v1`'s port URLs).
    epochs: Arc<Epochs>,
    /// How long a token handed out stays valid (none: until its sandbox's epoch moves on).
    ttl: Option<Duration>,
}

/// Which of a sandbox's tokens: each has its own label in the MAC, and its own reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `envdAccessToken` (`X-Access-Token`): everything in the sandbox.
    Envd,
    /// `trafficAccessToken` (`E2B-Traffic-Access-Token`): its ports other than envd's.
    Traffic,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Envd => "envd:",
            Kind::Traffic => "traffic:",
        }
    }
}

/// What a presented token is, for a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Verdict {
    /// Not a token of this sandbox and kind: garbage, truncated, too long, another
    /// sandbox's, made with another secret.
    Invalid,
    /// Genuine, past its expiry (or without one while tokens expire).
    Expired,
    /// Genuine, of an earlier epoch: the sandbox's tokens were rotated since.
    Revoked,
    Valid,
}

impl Verdict {
    /// The stable code a refusal for this reason carries.
    pub(crate) fn code(self) -> &'static str {
        match self {
            Verdict::Invalid => "token_invalid",
            Verdict::Expired => "token_expired",
            Verdict::Revoked => "token_revoked",
            Verdict::Valid => "ok",
        }
    }

    fn message(self) -> &'static str {
        match self {
            Verdict::Expired => {
                "the sandbox's access token has expired: connect to the sandbox again \
                 (Sandbox.connect) for a new one"
            }
            Verdict::Revoked => {
                "the sandbox's access tokens were rotated: connect to the sandbox again \
                 (Sandbox.connect) for the new ones"
            }
            Verdict::Invalid | Verdict::Valid => "invalid access token for this sandbox",
        }
    }
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

    /// A sandbox token refused: 401 with the reason's stable code, also noted for the audit
    /// record (whose body the code interpreter's plain text and Connect's errors do not
    /// carry it in).
    pub(crate) fn token(verdict: Verdict) -> Self {
        sandlot_service::Note::set_refusal(verdict.code());
        Self {
            status: StatusCode::UNAUTHORIZED,
            message: verdict.message().to_owned(),
            code: Some(verdict.code()),
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
    pub(crate) fn load(
        data_dir: &Path,
        epochs: Arc<Epochs>,
        ttl: Option<Duration>,
    ) -> Result<Self, E2bError> {
        let key = match std::env::var(KEY_ENV) {
            Ok(k) if !k.trim().is_empty() => k.trim().to_owned(),
            _ => load_or_create(&data_dir.join(KEY_FILE), "e2b_")?,
        };
        let secret = load_or_create(&data_dir.join(TOKEN_SECRET_FILE), "")?;
        Ok(Self::new(key, &secret, epochs, ttl))
    }

    pub(crate) fn new(
        key: String,
        token_secret: &str,
        epochs: Arc<Epochs>,
        ttl: Option<Duration>,
    ) -> Self {
        let mac = Hmac::<Sha256>::new_from_slice(token_secret.as_bytes())
            .expect("HMAC takes keys of any length");
        Self {
            key,
            mac,
            epochs,
            ttl: ttl.filter(|t| !t.is_zero()),
        }
    }

    /// The token envd requests of sandbox `id` carry (`envdAccessToken`).
    pub(crate) fn envd_token(&self, id: &str) -> String {
        self.token(Kind::Envd, id)
    }

    /// The token requests to the sandbox's other ports may carry instead
    /// (`trafficAccessToken`).
    pub(crate) fn traffic_token(&self, id: &str) -> String {
        self.token(Kind::Traffic, id)
    }

    /// The envd token of sandbox `id` as a signed URL's signature covers it (see
    /// `files::signed`): the token handed out, remade from the id. `None` on a server whose
    /// tokens expire: each carries the time it was handed out, which is not kept.
    pub(crate) fn signing_token(&self, id: &str) -> Option<String> {
        self.ttl.is_none().then(|| self.token(Kind::Envd, id))
    }

    /// A token of sandbox `id` made now: of its current epoch, expiring `ttl` from now.
    fn token(&self, kind: Kind, id: &str) -> String {
        let epoch = self.epochs.get(id);
        let expiry = self
            .ttl
            .map(|ttl| unix_now().saturating_add(ttl.as_secs()))
            .unwrap_or(0);
        if epoch == 0 && expiry == 0 {
            return hex::encode(self.legacy_mac(kind, id));
        }
        format!(
            "{epoch}-{expiry}.{}",
            hex::encode(self.mac(kind, id, epoch, expiry))
        )
    }

    /// The MAC of the older form: the label and the id.
    fn legacy_mac(&self, kind: Kind, id: &str) -> [u8; 32] {
        let mut mac = self.mac.clone();
        mac.update(kind.label().as_bytes());
        mac.update(id.as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// The MAC of the epoch form (16 bytes): the label, the id, the epoch and the expiry (ids
    /// hold no NUL: header values cannot).
    fn mac(&self, kind: Kind, id: &str, epoch: u64, expiry: u64) -> [u8; 16] {
        let mut mac = self.mac.clone();
        mac.update(kind.label().as_bytes());
        mac.update(id.as_bytes());
        mac.update(format!("\0{epoch}\0{expiry}").as_bytes());
        let full = mac.finalize().into_bytes();
        let mut out = [0u8; 16];
        out.copy_from_slice(&full[..16]);
        out
    }

    /// What `presented` is for sandbox `id`: the MAC is checked (in constant time) before
    /// anything else, so the epoch is looked up for genuine tokens only.
    pub(crate) fn verify(&self, kind: Kind, id: &str, presented: &[u8]) -> Verdict {
        if presented.len() > MAX_TOKEN_LEN {
            return Verdict::Invalid;
        }
        let (epoch, expiry) = match presented.iter().rposition(|b| *b == b'.') {
            None => {
                let mut want = [0u8; 64];
                // Lower case, as handed out: one spelling per token.
                hex::encode_to_slice(self.legacy_mac(kind, id), &mut want)
                    .expect("64 hex digits for 32 bytes");
                if !bool::from(presented.ct_eq(&want)) {
                    return Verdict::Invalid;
                }
                (0, None)
            }
            Some(dot) => {
                let Some((epoch, expiry)) = parse_head(&presented[..dot]) else {
                    return Verdict::Invalid;
                };
                let mut want = [0u8; 32];
                hex::encode_to_slice(self.mac(kind, id, epoch, expiry), &mut want)
                    .expect("32 hex digits for 16 bytes");
                if !bool::from(presented[dot + 1..].ct_eq(&want)) {
                    return Verdict::Invalid;
                }
                (epoch, Some(expiry))
            }
        };
        let current = self.epochs.get(id);
        // `u64::MAX`: the store could not say; nothing passes then.
        if current == u64::MAX || epoch != current {
            return Verdict::Revoked;
        }
        let expired = match (self.ttl, expiry) {
            // The older form, and the epoch form made without a TTL, while tokens expire.
            (Some(_), None | Some(0)) => true,
            (_, None | Some(0)) => false,
            (_, Some(at)) => unix_now() > at,
        };
        if expired {
            Verdict::Expired
        } else {
            Verdict::Valid
        }
    }

    /// The best verdict among the values of header `name` (a request may repeat it).
    fn verify_header(
        &self,
        kind: Kind,
        id: &str,
        headers: &HeaderMap,
        name: &str,
    ) -> Option<Verdict> {
        headers
            .get_all(name)
            .iter()
            .map(|v| self.verify(kind, id, v.as_bytes()))
            .max()
    }

    /// Whether `headers` carry the server's E2B key in `X-API-KEY`.
    fn has_e2b_key(&self, headers: &HeaderMap) -> bool {
        header_eq(headers, API_KEY_HEADER, &self.key)
    }
}

/// `<epoch>-<expiry>`, each canonical decimal (digits only, no leading zero, at most 20).
fn parse_head(head: &[u8]) -> Option<(u64, u64)> {
    let dash = head.iter().position(|b| *b == b'-')?;
    Some((decimal(&head[..dash])?, decimal(&head[dash + 1..])?))
}

fn decimal(s: &[u8]) -> Option<u64> {
    let canonical = !s.is_empty()
        && s.len() <= 20
        && s.iter().all(u8::is_ascii_digit)
        && (s.len() == 1 || s[0] != b'0');
    if !canonical {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Who the server's E2B key is: a member of the tenant `default` (its sandboxes are that
/// tenant's, as every E2B request's were before tenants). Not an admin, so never the operator:
/// the key is typed into clients and environments, and a policy that gives the operator more
/// (templates with packages, special egress) must not give it to whoever holds the E2B key.
fn e2b_key_principal(ctx: &Ctx) -> Principal {
    let mut p = sandlot_service::local_principal();
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

/// Whether sandbox `id` (live, or recorded after it ended) belongs to `who`'s tenant. An id
/// never seen belongs to nobody.
pub(crate) fn owns(ctx: &Ctx, who: &Principal, id: &str) -> bool {
    ctx.rt.sandbox_tenant(id).as_deref() == Some(who.tenant.as_str())
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
    sandlot_service::Note::set_principal(&who);
    Some(owns(ctx, &who, id))
}

/// Whether `headers` carry what opens everything in sandbox `id`: its envd token, or an API
/// key of its tenant (not the traffic token, which opens its ports only).
fn opens_everything(ctx: &Ctx, id: &str, headers: &HeaderMap) -> bool {
    ctx.auth
        .verify_header(Kind::Envd, id, headers, ACCESS_TOKEN_HEADER)
        == Some(Verdict::Valid)
        || key_owns(ctx, id, headers) == Some(true)
}

/// Checks a request addressed to a sandbox (by `E2b-Sandbox-Id`) and returns the sandbox's id.
///
/// Accepted: `X-Access-Token` = the sandbox's envd token, or, for a port other than envd's
/// (`E2b-Sandbox-Port`), `E2B-Traffic-Access-Token` = the sandbox's traffic token, or
/// `X-API-KEY` = an API key of the sandbox's tenant (the E2B key: the tenant `default`'s).
/// With a token, whether the sandbox exists is the runtime's to say: a valid token cannot be
/// made for an id without the server's key. With an API key, another tenant's sandbox is
/// answered as a missing one, whatever the route. A token refused is 401 with the reason's
/// stable code (see the module docs).
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
    let envd = auth.verify_header(Kind::Envd, id, headers, ACCESS_TOKEN_HEADER);
    if envd == Some(Verdict::Valid) {
        return Ok(id.to_owned());
    }
    let port = sandbox_port(headers);
    let traffic = if port != Some(ENVD_PORT) {
        auth.verify_header(Kind::Traffic, id, headers, TRAFFIC_TOKEN_HEADER)
    } else {
        None
    };
    if traffic == Some(Verdict::Valid) {
        return Ok(id.to_owned());
    }
    match key_owns(ctx, id, headers) {
        Some(true) => return Ok(id.to_owned()),
        Some(false) => return Err(Denied::sandbox_missing(id)),
        None => {}
    }
    // The most telling reason among the tokens presented: a client holding a genuine token
    // that was rotated or expired learns to connect again.
    if let Some(verdict) = envd.max(traffic) {
        return Err(Denied::token(verdict));
    }
    // A token where it opens nothing (the traffic token on envd's port).
    if [ACCESS_TOKEN_HEADER, TRAFFIC_TOKEN_HEADER]
        .iter()
        .any(|h| headers.contains_key(*h))
    {
        return Err(Denied::token(Verdict::Invalid));
    }
    Err(Denied::new(
        StatusCode::UNAUTHORIZED,
        if headers.contains_key(API_KEY_HEADER) {
            "invalid X-API-KEY for this sandbox"
        } else {
            "missing X-Access-Token header (the sandbox's envdAccessToken)"
        },
    ))
}

/// What running code in sandbox `id` needs beyond [`check_sandbox`]: its envd token or an API
/// key of its tenant (the traffic token opens its ports only).
pub(crate) fn require_everything(ctx: &Ctx, id: &str, headers: &HeaderMap) -> Result<(), Denied> {
    if opens_everything(ctx, id, headers) {
        return Ok(());
    }
    match ctx
        .auth
        .verify_header(Kind::Envd, id, headers, ACCESS_TOKEN_HEADER)
    {
        Some(verdict) if verdict != Verdict::Valid => Err(Denied::token(verdict)),
        _ => Err(Denied::new(
            StatusCode::UNAUTHORIZED,
            "running code needs the sandbox's X-Access-Token",
        )),
    }
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

    /// Epochs over a store of their own.
    fn epochs(_name: &str) -> Arc<Epochs> {
        let store = sandlot_store::Store::open_in_memory().unwrap();
        Arc::new(Epochs::new(Arc::new(store)))
    }

    fn auth(secret: &str, epochs: &Arc<Epochs>, ttl: Option<u64>) -> Auth {
        Auth::new(
            "e2b_k".into(),
            secret,
            epochs.clone(),
            ttl.map(Duration::from_secs),
        )
    }

    #[test]
    fn tokens_differ_by_sandbox_and_purpose() {
        let e = epochs("differ");
        let a = auth("secret", &e, None);
        assert_eq!(a.envd_token("sb1"), a.envd_token("sb1"));
        assert_ne!(a.envd_token("sb1"), a.envd_token("sb2"));
        assert_ne!(a.envd_token("sb1"), a.traffic_token("sb1"));
        assert_ne!(
            a.envd_token("sb1"),
            auth("another secret", &e, None).envd_token("sb1")
        );
        // The key alone makes no token: tokens depend on the secret only.
        assert_eq!(
            a.envd_token("sb1"),
            Auth::new("e2b_other".into(), "secret", e.clone(), None).envd_token("sb1")
        );
        // Never rotated, no TTL: the older form, as handed out before epochs.
        assert_eq!(a.envd_token("x").len(), 64);
        assert_eq!(
            a.verify(Kind::Envd, "x", a.envd_token("x").as_bytes()),
            Verdict::Valid
        );
    }

    #[test]
    fn every_bad_spelling_is_refused_with_its_reason() {
        let e = epochs("spellings");
        let a = auth("secret", &e, None);
        let legacy = a.envd_token("sb1");
        let v = |t: &str| a.verify(Kind::Envd, "sb1", t.as_bytes());
        assert_eq!(v(&legacy), Verdict::Valid);
        assert_eq!(v(&legacy.to_uppercase()), Verdict::Invalid);
        assert_eq!(v(&legacy[..63]), Verdict::Invalid);
        assert_eq!(v(""), Verdict::Invalid);
        assert_eq!(v("garbage"), Verdict::Invalid);
        assert_eq!(v(&a.envd_token("sb2")), Verdict::Invalid);
        assert_eq!(v(&a.traffic_token("sb1")), Verdict::Invalid);
        assert_eq!(v(&"a".repeat(100_000)), Verdict::Invalid);

        e.rotate("sb1").unwrap();
        let new = a.envd_token("sb1");
        assert!(new.starts_with("1-0."), "{new}");
        assert_eq!(v(&new), Verdict::Valid);
        assert_eq!(v(&legacy), Verdict::Revoked);
        let (head, mac) = new.rsplit_once('.').unwrap();
        for bad in [
            format!("01-0.{mac}"),
            format!("+1-0.{mac}"),
            format!("1-00.{mac}"),
            format!("1-0.{}", &mac[..31]),
            format!("1-0.{}", mac.to_uppercase()),
            format!("1-1.{mac}"),
            format!("2-0.{mac}"),
            format!("{head}.{mac}0"),
            format!("{head}{mac}"),
            format!("1-0-0.{mac}"),
            format!("99999999999999999999999-0.{mac}"),
            format!(".{mac}"),
            format!("{head}."),
        ] {
            assert_eq!(v(&bad), Verdict::Invalid, "{bad}");
        }
        e.rotate("sb1").unwrap();
        assert_eq!(v(&new), Verdict::Revoked);
        // Another server's secret: invalid, whatever the epoch.
        assert_eq!(
            v(&auth("other", &e, None).envd_token("sb1")),
            Verdict::Invalid
        );
    }

    #[test]
    fn tokens_expire_under_a_ttl() {
        let e = epochs("ttl");
        let plain = auth("secret", &e, None);
        let timed = auth("secret", &e, Some(60));
        let legacy = plain.envd_token("sb1");
        // Under a TTL, a token without an expiry is refused; one with a future expiry opens.
        assert_eq!(
            timed.verify(Kind::Envd, "sb1", legacy.as_bytes()),
            Verdict::Expired
        );
        let t = timed.envd_token("sb1");
        assert!(t.starts_with("0-"), "{t}");
        assert_eq!(
            timed.verify(Kind::Envd, "sb1", t.as_bytes()),
            Verdict::Valid
        );
        // An expiry in the past (made by hand with the right MAC) is expired, also on a server
        // that dropped its TTL since.
        let past = unix_now() - 1;
        let old = format!(
            "0-{past}.{}",
            hex::encode(plain.mac(Kind::Envd, "sb1", 0, past))
        );
        assert_eq!(
            timed.verify(Kind::Envd, "sb1", old.as_bytes()),
            Verdict::Expired
        );
        assert_eq!(
            plain.verify(Kind::Envd, "sb1", old.as_bytes()),
            Verdict::Expired
        );
        // Rotated and expired: the rotation is what it is told as.
        e.rotate("sb1").unwrap();
        assert_eq!(
            plain.verify(Kind::Envd, "sb1", old.as_bytes()),
            Verdict::Revoked
        );
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
