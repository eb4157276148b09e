//! Who is calling: the [`Principal`] the REST adapter's authentication (`sandlot-api`'s
//! `govern.rs::authenticate`) put in the request, as handlers of the API and of the record ask
//! for it.
//!
//! Without a `Governance` (the router's own tests; `SANDLOT_AUTH=off` for benchmarks on
//! loopback) every request acts as the local admin of the tenant `default`.

use crate::error::HttpError;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use sandlot_service::Governance;
use sandlot_tenancy::TenancyError;
use sandlot_types::{ErrorCode, Principal, Role, DEFAULT_TENANT};

/// The principal of a request (see the module docs for requests without governance).
#[derive(Debug, Clone)]
pub struct Caller(pub Principal);

impl Caller {
    pub fn tenant(&self) -> &str {
        &self.0.tenant
    }

    pub fn require_admin(&self) -> Result<(), HttpError> {
        if self.0.role == Role::Admin {
            Ok(())
        } else {
            Err(HttpError::new(
                ErrorCode::Forbidden,
                "this operation needs an admin key",
            ))
        }
    }

    /// The operator: an admin of the tenant `default` (the server's own). Only it manages
    /// tenants, their quotas and plans, other tenants' keys and the policy set; a tenant's
    /// admin manages its own tenant's keys and nothing beyond.
    pub fn is_operator(&self) -> bool {
        self.0.role == Role::Admin && self.0.tenant == DEFAULT_TENANT
    }

    pub fn require_operator(&self) -> Result<(), HttpError> {
        if self.is_operator() {
            Ok(())
        } else {
            Err(HttpError::new(
                ErrorCode::Forbidden,
                "this operation needs an operator key (an admin key of tenant default)",
            ))
        }
    }
}

/// A handler that asks for its caller gets the principal authentication put in the
/// request (the local admin without governance). A request that reached it without one took
/// a path past authentication that the handler did not expect: that is never the operator.
/// It is a bug (500) in debug builds, so tests find it, and 401 in release.
impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        match parts.extensions.get::<Principal>() {
            Some(p) => Ok(Caller(p.clone())),
            None if cfg!(debug_assertions) => Err(HttpError::new(
                ErrorCode::Internal,
                format!("{} reached a handler without a principal", parts.uri.path()),
            )),
            None => Err(HttpError::new(
                ErrorCode::Unauthenticated,
                "this request needs an API key",
            )),
        }
    }
}

/// The bearer key of a request: `Authorization: Bearer <key>` (or `X-Api-Key: <key>`, which
/// some tools find easier to set).
pub fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    if let Some(v) = headers.get(axum::http::header::AUTHORIZATION) {
        let v = v.to_str().ok()?;
        let (scheme, key) = v.split_once(' ')?;
        return scheme.eq_ignore_ascii_case("bearer").then(|| key.trim());
    }
    headers.get("x-api-key").and_then(|v| v.to_str().ok())
}

/// The principal `headers` authenticate as, or the 401 to answer.
pub fn principal_of(
    gov: &Governance,
    headers: &axum::http::HeaderMap,
) -> Result<Principal, HttpError> {
    let key = bearer(headers).ok_or(TenancyError::MissingKey);
    key.and_then(|k| gov.keys.authenticate(k))
        .map_err(|e| HttpError::new(ErrorCode::Unauthenticated, e.to_string()))
}
