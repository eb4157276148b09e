//! Errors in E2B's formats. The control plane and envd answer `{"code": <HTTP status>,
//! "message": "..."}` (what the SDKs parse: `message`, and the status they map to their
//! exceptions: 401 authentication, 404 not found, 429 rate limit...); sandlot adds its stable
//! code as `sandlot_code`, which the SDKs ignore. The code interpreter answers plain text, as
//! E2B's does (its SDKs put the body in the exception's message).

use crate::auth::Denied;
use axum::http::{header::CONTENT_TYPE, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandlot_runtime::RuntimeError;
use sandlot_types::{ApiError, ErrorCode};

/// A request that failed: the status, a message for the client, and sandlot's stable code.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
    pub(crate) code: &'static str,
}

impl Failure {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        let code = match status {
            StatusCode::UNAUTHORIZED => "unauthorized",
            StatusCode::NOT_FOUND => "not_found",
            StatusCode::BAD_REQUEST => "invalid_request",
            StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
            StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
            _ if status.is_server_error() => "internal",
            _ => "invalid_argument",
        };
        Self {
            status,
            message: message.into(),
            code,
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// A runtime failure, with sandlot's code and the status E2B's SDKs expect for it.
    pub(crate) fn runtime(e: RuntimeError) -> Self {
        Self::from_api(&sandlot_service::api_error(e))
    }

    pub(crate) fn from_api(e: &ApiError) -> Self {
        let status = match e.code {
            // E2B has no 410: an ended sandbox is one that does not exist any more, and the
            // SDKs turn 404 into their "not found" exceptions (kill() answers False).
            ErrorCode::SandboxGone => StatusCode::NOT_FOUND,
            code => StatusCode::from_u16(code.http_status())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        };
        let message = if status.is_server_error() && e.code == ErrorCode::Internal {
            "internal server error".to_owned()
        } else {
            e.message.clone()
        };
        Self {
            status,
            message,
            code: e.code.as_str(),
        }
    }

    /// The code interpreter's format: plain text.
    pub(crate) fn plain(self) -> Response {
        (
            self.status,
            [(CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("{}: {}", self.code, self.message),
        )
            .into_response()
    }
}

impl From<Denied> for Failure {
    fn from(d: Denied) -> Self {
        let mut f = Self::new(d.status, d.message);
        if let Some(code) = d.code {
            f.code = code;
        }
        f
    }
}

impl From<ApiError> for Failure {
    fn from(e: ApiError) -> Self {
        Self::from_api(&e)
    }
}

impl From<RuntimeError> for Failure {
    fn from(e: RuntimeError) -> Self {
        Self::runtime(e)
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "code": self.status.as_u16(),
            "message": self.message,
            "sandlot_code": self.code,
        });
        (self.status, Json(body)).into_response()
    }
}

/// envd's answer to a path it does not serve.
pub(crate) async fn envd_route_not_found(uri: axum::http::Uri) -> Failure {
    Failure::new(
        StatusCode::NOT_FOUND,
        format!("envd has no route {}", uri.path()),
    )
}

/// The code interpreter's answer to a path it does not serve.
pub(crate) async fn interpreter_route_not_found(uri: axum::http::Uri) -> Response {
    Failure::new(
        StatusCode::NOT_FOUND,
        format!("the code interpreter has no route {}", uri.path()),
    )
    .plain()
}

/// The control plane's answer to a malformed JSON body.
pub(crate) fn bad_json(e: axum::extract::rejection::JsonRejection) -> Failure {
    let status = match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => StatusCode::PAYLOAD_TOO_LARGE,
        _ => StatusCode::BAD_REQUEST,
    };
    Failure::new(status, format!("invalid JSON body: {}", e.body_text()))
}
