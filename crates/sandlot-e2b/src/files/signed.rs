//! Signed file URLs: what E2B's `download_url` and `upload_url` hand out for a secured
//! sandbox, usable without any header (a browser, `curl`, another service).
//!
//! The SDKs make the signature themselves from the sandbox's envd access token: `v1_` and
//! the unpadded base64 of SHA-256 over `<path>:<read|write>:<user>:<token>`, with
//! `:<expiry>` (Unix seconds) appended when the URL expires; the URL carries `signature` and
//! `signature_expiration`. The server remakes it from the token it would hand out (never
//! stored: tokens are MACs of the sandbox id, see `auth`) and compares in constant time.
//! Only a URL signed for this path, operation, user and expiry, with this sandbox's current
//! token, opens anything: another sandbox's, a rotated token's, an altered path's or
//! expiry's signature is refused alike (401 `invalid signature`); a genuine one past its
//! expiry is 401 `signature is already expired`, in envd's shape (`{"code", "message"}`).
//!
//! A URL without `E2b-Sandbox-Id` names no sandbox: the signature is checked against each
//! live sandbox's (one SHA-256 each), and the one it matches is the sandbox. On a server
//! whose tokens expire (`SANDLOT_ENVD_TOKEN_TTL`) a token is not remade from the id alone,
//! so signed URLs are refused there (401, saying why).

use crate::Ctx;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// `v1_` and 43 base64 characters (32 bytes, unpadded).
const SIGNATURE_LEN: usize = 3 + 43;
/// Most sandboxes one signature without a sandbox header is checked against.
const MAX_CANDIDATES: usize = 100_000;

/// What a signed URL may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Read,
    Write,
}

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
        }
    }
}

/// What a signed request claims: the query's fields as sent.
pub(crate) struct Claim<'a> {
    pub(crate) path: &'a str,
    pub(crate) op: Op,
    pub(crate) user: &'a str,
    pub(crate) signature: &'a str,
    pub(crate) expiration: Option<&'a str>,
}

/// Why a signed request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Not a signature of any candidate sandbox for this claim.
    Invalid,
    /// Genuine, past its expiry.
    Expired,
    /// This server's tokens expire: signatures cannot be checked.
    Unavailable,
}

impl Refused {
    fn code(self) -> &'static str {
        match self {
            Refused::Invalid => "signature_invalid",
            Refused::Expired => "signature_expired",
            Refused::Unavailable => "signature_unavailable",
        }
    }

    fn message(self) -> &'static str {
        match self {
            Refused::Invalid => "invalid signature",
            Refused::Expired => "signature is already expired",
            Refused::Unavailable => {
                "signed URLs are not available on this server: its sandbox tokens expire \
                 (SANDLOT_ENVD_TOKEN_TTL), so a signature cannot be checked"
            }
        }
    }

    /// envd's answer: 401 with `{"code": 401, "message"}`; the reason's code is noted for
    /// the audit record.
    pub(crate) fn into_response(self) -> Response {
        sandlot_service::Note::set_refusal(self.code());
        (
            StatusCode::UNAUTHORIZED,
            Json(serde_json::json!({"code": 401, "message": self.message()})),
        )
            .into_response()
    }
}

/// The signature of `claim` made with `token`.
fn sign(claim: &Claim<'_>, token: &str) -> String {
    let mut h = Sha256::new();
    h.update(claim.path.as_bytes());
    h.update(b":");
    h.update(claim.op.as_str().as_bytes());
    h.update(b":");
    h.update(claim.user.as_bytes());
    h.update(b":");
    h.update(token.as_bytes());
    if let Some(exp) = claim.expiration {
        h.update(b":");
        h.update(exp.as_bytes());
    }
    format!(
        "v1_{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(h.finalize())
    )
}

/// A canonical decimal expiry (an optional `-`, digits, no leading zero, at most 19).
fn expiry(s: &str) -> Option<i64> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let canonical = !digits.is_empty()
        && digits.len() <= 18
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits.len() == 1 || !digits.starts_with('0'));
    canonical.then(|| s.parse().ok()).flatten()
}

/// The sandbox among `candidates` whose signature `claim` carries, checked in constant time
/// for each; then its expiry.
pub(crate) fn verify(
    ctx: &Ctx,
    claim: &Claim<'_>,
    candidates: &[String],
) -> Result<String, Refused> {
    let presented = claim.signature.as_bytes();
    if presented.len() != SIGNATURE_LEN {
        return Err(Refused::Invalid);
    }
    let exp = match claim.expiration {
        None => None,
        Some(s) => Some(expiry(s).ok_or(Refused::Invalid)?),
    };
    let mut unavailable = false;
    let mut found = None;
    for id in candidates.iter().take(MAX_CANDIDATES) {
        let Some(token) = ctx.auth.signing_token(id) else {
            unavailable = true;
            continue;
        };
        if bool::from(sign(claim, &token).as_bytes().ct_eq(presented)) {
            found = Some(id.clone());
            break;
        }
    }
    let Some(id) = found else {
        return Err(if unavailable {
            Refused::Unavailable
        } else {
            Refused::Invalid
        });
    };
    if let Some(at) = exp {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(i64::MAX);
        if now > at {
            return Err(Refused::Expired);
        }
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim<'a>(sig: &'a str, exp: Option<&'a str>) -> Claim<'a> {
        Claim {
            path: "a.txt",
            op: Op::Read,
            user: "user",
            signature: sig,
            expiration: exp,
        }
    }

    #[test]
    fn signatures_are_the_sdks() {
        // Made by E2B's Python SDK (`get_signature("a.txt", "read", "user", "tok")`) and
        // checked by hand: sha256("a.txt:read:user:tok"), base64 without padding.
        let s = sign(&claim("", None), "tok");
        assert!(s.starts_with("v1_") && s.len() == SIGNATURE_LEN, "{s}");
        let mut h = Sha256::new();
        h.update(b"a.txt:read:user:tok");
        let want = format!(
            "v1_{}",
            base64::engine::general_purpose::STANDARD_NO_PAD.encode(h.finalize())
        );
        assert_eq!(s, want);
        // The expiry, the operation and the user are covered.
        assert_ne!(sign(&claim("", Some("1")), "tok"), s);
        let w = Claim {
            op: Op::Write,
            ..claim("", None)
        };
        assert_ne!(sign(&w, "tok"), s);
        let u = Claim {
            user: "",
            ..claim("", None)
        };
        assert_ne!(sign(&u, "tok"), s);
    }

    #[test]
    fn expiries_are_canonical_decimals() {
        assert_eq!(expiry("1700000000"), Some(1_700_000_000));
        assert_eq!(expiry("-5"), Some(-5));
        for bad in [
            "",
            "-",
            "01",
            "1e9",
            " 1",
            "+1",
            "99999999999999999999",
            "1.0",
        ] {
            assert_eq!(expiry(bad), None, "{bad}");
        }
    }
}
