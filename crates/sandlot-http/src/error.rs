//! Errors as HTTP responses. Every failure leaves the server as
//! `{"error": {"code": "...", "message": "..."}}`, with the HTTP status its code stands for
//! (`ErrorCode::http_status`); the code of each runtime failure is the service's
//! (`sandlot_service::error::code_of`).

use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandlot_runtime::RuntimeError;
pub use sandlot_service::error::{api_error, code_of};
use sandlot_types::{ApiError, ErrorCode};
use std::any::Any;

/// Code of the 404 for a path no route matches. Routing errors are not about a sandbox, so they
/// have no [`ErrorCode`]; the body has the same shape.
pub const ROUTE_NOT_FOUND: &str = "not_found";
/// Code of the 405 for a known path called with a method it does not serve.
pub const METHOD_NOT_ALLOWED: &str = "method_not_allowed";

/// An [`ApiError`] on its way out as a response (a newtype: both the trait and the type are
/// foreign to this crate).
#[derive(Debug)]
pub struct HttpError(pub ApiError);

impl HttpError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self(ApiError::new(code, message))
    }

    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }
}

impl From<ApiError> for HttpError {
    fn from(e: ApiError) -> Self {
        Self(e)
    }
}

impl From<RuntimeError> for HttpError {
    fn from(e: RuntimeError) -> Self {
        Self(api_error(e))
    }
}

/// The HTTP status every stable error code stands for (`ErrorCode::http_status`).
pub fn status_of(code: ErrorCode) -> StatusCode {
    StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// What clients see instead of the message of an `internal` error, which may name paths or
/// other details of the host; the original goes to the log.
const INTERNAL_MESSAGE: &str = "internal server error";

impl HttpError {
    /// Status, code and the message a client may see.
    pub fn client_view(self) -> (StatusCode, &'static str, String) {
        let ApiError { code, message } = self.0;
        let status = status_of(code);
        let message = if code == ErrorCode::Internal {
            tracing::error!(code = code.as_str(), %message, "internal error");
            INTERNAL_MESSAGE.to_owned()
        } else {
            if status.is_server_error() {
                tracing::warn!(code = code.as_str(), %message, "request failed");
            }
            message
        };
        (status, code.as_str(), message)
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let (status, code, message) = self.client_view();
        let mut resp = error_response(status, code, &message);
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer realm=\"sandlot\""),
            );
        }
        if status == StatusCode::TOO_MANY_REQUESTS {
            // Quota messages end with "retry in N s" (`sandlot_tenancy::QuotaError`).
            let secs = message
                .rsplit_once("retry in ")
                .and_then(|(_, t)| t.split(' ').next())
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(1);
            resp.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        resp
    }
}

/// The error body: `{"error": {"code": ..., "message": ...}}`.
pub fn error_body(code: &str, message: &str) -> serde_json::Value {
    serde_json::json!({ "error": { "code": code, "message": message } })
}

/// The one place the error body is built.
pub fn error_response(status: StatusCode, code: &str, message: &str) -> Response {
    (status, Json(error_body(code, message))).into_response()
}

/// Fallback for paths no route matches.
pub async fn route_not_found(uri: Uri) -> Response {
    error_response(
        StatusCode::NOT_FOUND,
        ROUTE_NOT_FOUND,
        &format!(
            "no route for {}; the API lives under /v1 (see /v1/openapi.json)",
            uri.path()
        ),
    )
}

/// Fallback for a known path called with a method it does not serve.
pub async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    error_response(
        StatusCode::METHOD_NOT_ALLOWED,
        METHOD_NOT_ALLOWED,
        &format!("{method} is not allowed on {}", uri.path()),
    )
}

/// Turns a panic in a handler into a 500 `internal` error; the panic message is logged, never
/// sent.
pub fn panic_response(panic: Box<dyn Any + Send + 'static>) -> Response {
    let detail = if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    };
    tracing::error!(panic = %detail, "handler panicked");
    error_response(
        StatusCode::INTERNAL_SERVER_ERROR,
        ErrorCode::Internal.as_str(),
        INTERNAL_MESSAGE,
    )
}
