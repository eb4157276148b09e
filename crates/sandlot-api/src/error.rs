//! Errors as HTTP responses. Every failure leaves the server as
//! `{"error": {"code": "...", "message": "..."}}`. This is the one place that decides the
//! stable code of each runtime failure ([`code_of`]) and the HTTP status of each code
//! ([`status_of`]).

use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandlot_runtime::{FileError, RuntimeError};
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

/// A runtime failure as the API reports it: its stable code, and its message.
pub fn api_error(e: RuntimeError) -> ApiError {
    ApiError::new(code_of(&e), e.to_string())
}

/// The stable code of every runtime failure.
pub fn code_of(e: &RuntimeError) -> ErrorCode {
    use ErrorCode as C;
    use RuntimeError as R;
    match e {
        R::File(f) => file_code(f),

        R::InvalidTemplate(_)
        | R::DefaultTemplateReadOnly
        | R::NotPositive { .. }
        | R::AboveMax { .. }
        | R::OverOneYear { .. }
        | R::TooManyEnvVars
        | R::InvalidEnvName { .. }
        | R::InvalidEnvValue { .. }
        | R::MetadataTooLarge
        | R::BadTimeout { .. }
        | R::NoContext { .. }
        | R::TooManyContexts { .. }
        | R::DefaultContextPermanent
        | R::ContextRefused { .. }
        | R::BadForkCount { .. }
        | R::BadSnapshotName
        | R::SnapshotTemplate { .. }
        | R::NotOneFamily { .. }
        | R::BadVolumeName { .. }
        | R::BadVolumePath { .. }
        | R::TooManyVolumes { .. }
        | R::BadArtifactName => C::InvalidArgument,
        R::SnapshotNotFound { .. } => C::SnapshotNotFound,
        R::StateCorrupt { .. } => C::StateCorrupt,
        R::CaptureFailed { .. } | R::DiedSaving { .. } | R::DigestFailed { .. } => C::CaptureFailed,
        R::VolumeNotFound { .. } => C::VolumeNotFound,
        R::VolumeExists { .. } | R::VolumeInUse { .. } => C::VolumeInUse,
        R::UploadRead { .. } | R::BadPorts { .. } => C::InvalidRequest,
        R::PortNotExposed { .. } => C::PortNotExposed,
        R::PortUnreachable { .. } => C::PortUnreachable,
        R::CodeTooLarge { .. } => C::PayloadTooLarge,
        R::UploadTooLarge { .. } => C::FileTooLarge,
        R::QuotaExceeded { .. } => C::QuotaExceeded,
        R::InvalidArchive { .. } => C::InvalidArchive,
        R::InsufficientStorage => C::InsufficientStorage,

        R::SandboxNotFound { .. } => C::SandboxNotFound,
        R::SandboxGone { .. } => C::SandboxGone,
        R::TemplateNotFound { .. } => C::TemplateNotFound,
        R::TemplateInUse { .. } => C::TemplateInUse,
        R::ArtifactNotFound { .. } => C::FileNotFound,
        R::NetworkUnavailable | R::BadNetwork { .. } => C::InvalidArgument,
        R::Contained { .. } => C::SandboxContained,

        R::TemplateBuilding { .. }
        | R::TemplateReplaced { .. }
        | R::TemplateFailed { .. }
        | R::TemplateNoEnvironment
        | R::ZygoteStart { .. } => C::TemplateNotReady,
        R::SandboxBusy { .. } => C::SandboxBusy,
        R::AtCapacity { .. } | R::CreateQueueFull { .. } | R::NoFreeUid => C::CapacityExhausted,

        R::Create { .. }
        | R::SandboxInFailedState { .. }
        | R::JailFailed { .. }
        | R::DiedStarting { .. }
        | R::ContextNoAnswer { .. }
        | R::StateLoad { .. }
        | R::DiedInContextRequest { .. } => C::SandboxFailed,

        R::NotRoot
        | R::DetectCgroups { .. }
        | R::DataDir { .. }
        | R::PythonEnv { .. }
        | R::EnvShadowed { .. }
        | R::Assets(_)
        | R::Store { .. }
        | R::SaveTemplate { .. }
        | R::NoFreeZygoteUid
        | R::NoEnvsDir
        | R::Environment(_)
        | R::AdmissionClosed
        | R::SandboxCgroup { .. }
        | R::Workspace { .. }
        | R::OpenWorkspaces { .. }
        | R::Artifacts { .. }
        | R::EgressListener { .. }
        | R::Task { .. }
        | R::StateFile { .. }
        | R::VolumeMount { .. }
        | R::Encode { .. } => C::Internal,
    }
}

/// The stable code of a failed file operation.
fn file_code(e: &FileError) -> ErrorCode {
    use ErrorCode as C;
    use FileError as F;
    match e {
        F::PathHasNul
        | F::PathTooLong
        | F::OutsideWorkspace(_)
        | F::DotDot(_)
        | F::ComponentTooLong
        | F::NamesWorkspace
        | F::RemoveWorkspace
        | F::LeavesWorkspace(_)
        | F::NameTooLong(_)
        | F::NotADirectory(_) => C::InvalidPath,
        F::ReadWorkspace
        | F::Symlink(_)
        | F::IsDirectory(_)
        | F::NotRegular { .. }
        | F::Fifo(_) => C::NotARegularFile,
        F::NotFound(_) | F::ParentNotDirectory(_) => C::FileNotFound,
        F::TooLarge(_) | F::WriteTooLarge => C::FileTooLarge,
        F::WorkspaceFull => C::WorkspaceFull,
        F::SandboxGone | F::ProcessesGone | F::NoWorkspace => C::SandboxFailed,
        F::Os { .. } | F::Write(_) => C::Internal,
    }
}

/// The HTTP status every stable error code stands for.
pub fn status_of(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::InvalidRequest => StatusCode::BAD_REQUEST,
        ErrorCode::InvalidArgument => StatusCode::BAD_REQUEST,
        ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::SandboxNotFound => StatusCode::NOT_FOUND,
        ErrorCode::SandboxGone => StatusCode::GONE,
        ErrorCode::ExecutionNotFound => StatusCode::NOT_FOUND,
        ErrorCode::TemplateNotFound => StatusCode::NOT_FOUND,
        ErrorCode::TemplateNotReady => StatusCode::CONFLICT,
        ErrorCode::InvalidPath => StatusCode::BAD_REQUEST,
        ErrorCode::FileNotFound => StatusCode::NOT_FOUND,
        ErrorCode::NotARegularFile => StatusCode::BAD_REQUEST,
        ErrorCode::FileTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::WorkspaceFull => StatusCode::INSUFFICIENT_STORAGE,
        ErrorCode::SandboxBusy => StatusCode::CONFLICT,
        ErrorCode::CapacityExhausted => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::SandboxFailed => StatusCode::CONFLICT,
        ErrorCode::QuotaExceeded => StatusCode::INSUFFICIENT_STORAGE,
        ErrorCode::InsufficientStorage => StatusCode::INSUFFICIENT_STORAGE,
        ErrorCode::InvalidArchive => StatusCode::BAD_REQUEST,
        ErrorCode::SnapshotNotFound => StatusCode::NOT_FOUND,
        ErrorCode::StateCorrupt => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorCode::CaptureFailed => StatusCode::CONFLICT,
        ErrorCode::VolumeNotFound => StatusCode::NOT_FOUND,
        ErrorCode::VolumeInUse => StatusCode::CONFLICT,
        ErrorCode::PortNotExposed => StatusCode::FORBIDDEN,
        ErrorCode::PortUnreachable => StatusCode::BAD_GATEWAY,
        ErrorCode::Unauthenticated => StatusCode::UNAUTHORIZED,
        ErrorCode::Forbidden => StatusCode::FORBIDDEN,
        ErrorCode::PolicyDenied => StatusCode::FORBIDDEN,
        ErrorCode::TenantQuotaExceeded => StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::TenantNotFound => StatusCode::NOT_FOUND,
        ErrorCode::KeyNotFound => StatusCode::NOT_FOUND,
        ErrorCode::NameTaken => StatusCode::CONFLICT,
        ErrorCode::TemplateInUse => StatusCode::CONFLICT,
        ErrorCode::InvalidPolicy => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorCode::SandboxContained => StatusCode::CONFLICT,
        ErrorCode::AuditUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::JobNotFound => StatusCode::NOT_FOUND,
        ErrorCode::JobQueueFull => StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::JobEnded => StatusCode::CONFLICT,
        ErrorCode::WebhookNotFound => StatusCode::NOT_FOUND,
        ErrorCode::UnsupportedBundle => StatusCode::BAD_REQUEST,
        ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// What clients see instead of the message of an `internal` error, which may name paths or
/// other details of the host; the original goes to the log.
const INTERNAL_MESSAGE: &str = "internal server error";

impl HttpError {
    /// Status, code and the message a client may see.
    pub(crate) fn client_view(self) -> (StatusCode, &'static str, String) {
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

#[cfg(test)]
mod mapping_tests {
    use super::*;

    /// Runtime failures keep the code and the message they had when the runtime returned
    /// `ApiError` itself.
    #[test]
    fn runtime_errors_keep_their_codes_and_messages() {
        let cases: Vec<(RuntimeError, ErrorCode, &str)> = vec![
            (
                RuntimeError::SandboxNotFound { id: "sb_x".into() },
                ErrorCode::SandboxNotFound,
                "no sandbox with id \"sb_x\"",
            ),
            (
                RuntimeError::SandboxGone {
                    id: "sb_x".into(),
                    state: "deleted",
                    reason: "deleted by request".into(),
                },
                ErrorCode::SandboxGone,
                "sandbox sb_x is deleted: deleted by request",
            ),
            (
                RuntimeError::TemplateBuilding { name: "t".into() },
                ErrorCode::TemplateNotReady,
                "template \"t\" is still building",
            ),
            (
                RuntimeError::AboveMax {
                    field: "limits.pids",
                    value: 9,
                    max: 8,
                },
                ErrorCode::InvalidArgument,
                "limits.pids = 9 is above the server's maximum of 8",
            ),
            (
                RuntimeError::CreateQueueFull {
                    queued: 3,
                    limit: 3,
                },
                ErrorCode::CapacityExhausted,
                "3 sandbox creations are already queued (the limit is 3); retry shortly",
            ),
            (
                RuntimeError::NoFreeUid,
                ErrorCode::CapacityExhausted,
                "no free sandbox uid",
            ),
            (
                RuntimeError::Create {
                    step: "verify",
                    source: sandlot_runtime::error::CreateFailure::NotOurs(7),
                },
                ErrorCode::SandboxFailed,
                "creating the sandbox failed at verify: process 7 does not belong to the sandbox",
            ),
            (
                RuntimeError::CodeTooLarge { size: 2, limit: 1 },
                ErrorCode::PayloadTooLarge,
                "code is 2 bytes; the limit is 1",
            ),
            (
                RuntimeError::SandboxBusy { waiting: 16 },
                ErrorCode::SandboxBusy,
                "16 executions are already waiting on this sandbox",
            ),
            (
                RuntimeError::UploadTooLarge { limit: 5 },
                ErrorCode::FileTooLarge,
                "the upload is larger than the limit of 5 bytes",
            ),
            (
                FileError::DotDot("../x".into()).into(),
                ErrorCode::InvalidPath,
                "path \"../x\" contains '..'",
            ),
            (
                FileError::NotRegular {
                    path: "d".into(),
                    kind: "dir",
                }
                .into(),
                ErrorCode::NotARegularFile,
                "d: is a dir, not a regular file",
            ),
            (
                FileError::WorkspaceFull.into(),
                ErrorCode::WorkspaceFull,
                "the workspace is full",
            ),
            (
                FileError::ProcessesGone.into(),
                ErrorCode::SandboxFailed,
                "the sandbox's processes are gone",
            ),
            (
                RuntimeError::ArtifactNotFound { sha: "ab".into() },
                ErrorCode::FileNotFound,
                "no artifact ab (never stored, or past its retention)",
            ),
            (
                RuntimeError::QuotaExceeded { disk_mb: 64 },
                ErrorCode::QuotaExceeded,
                "the sandbox's disk quota is full (disk_mb = 64); the partial file was removed",
            ),
            (
                RuntimeError::InsufficientStorage,
                ErrorCode::InsufficientStorage,
                "the server's disk is too full for a new workspace; retry later or free disk space",
            ),
            (
                RuntimeError::SandboxInFailedState {
                    id: "sb_x".into(),
                    reason: "looping".into(),
                },
                ErrorCode::SandboxFailed,
                "sandbox sb_x has failed: looping",
            ),
            (
                RuntimeError::PortNotExposed {
                    id: "sb_x".into(),
                    port: 8000,
                },
                ErrorCode::PortNotExposed,
                "sandbox sb_x does not expose port 8000; create it with \"ports\": [8000] (or \
                 \"all_ports\": true for ports 1024-65535)",
            ),
            (
                RuntimeError::PortUnreachable {
                    id: "sb_x".into(),
                    port: 8000,
                    reason: "nothing listens on it (connection refused)".into(),
                },
                ErrorCode::PortUnreachable,
                "nothing in sandbox sb_x answers on port 8000: nothing listens on it \
                 (connection refused)",
            ),
            (
                RuntimeError::BadPorts {
                    reason: "a port is 1 to 65535, not 0".into(),
                },
                ErrorCode::InvalidRequest,
                "ports: a port is 1 to 65535, not 0",
            ),
        ];
        for (err, code, message) in cases {
            let api = api_error(err);
            assert_eq!((api.code, api.message.as_str()), (code, message));
        }
    }
}
