//! The API's errors: the stable codes (each one HTTP status in `sandlot-api`) and the body
//! every failure answers with.

use serde::{Deserialize, Serialize};

/// Stable error codes of the API. Each stands for one HTTP status (`ErrorCode::http_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The body is not valid JSON, has unknown fields or wrong types (400).
    InvalidRequest,
    /// A value is out of range or not allowed (400/422).
    InvalidArgument,
    /// The body or the code is larger than the server accepts (413).
    PayloadTooLarge,
    /// No sandbox with that id (404).
    SandboxNotFound,
    /// The sandbox existed but ended: deleted, expired or lost (410).
    SandboxGone,
    /// No execution with that id (404).
    ExecutionNotFound,
    /// No template with that name (404).
    TemplateNotFound,
    /// The template is still building, or its build failed (409).
    TemplateNotReady,
    /// The path is absolute, escapes the workspace, or contains forbidden parts (400).
    InvalidPath,
    /// No such file or directory in the workspace (404).
    FileNotFound,
    /// The path is not a regular file (a directory, a symlink, a device) (400).
    NotARegularFile,
    /// The file is larger than the server accepts (413).
    FileTooLarge,
    /// The sandbox's workspace is full (507).
    WorkspaceFull,
    /// Another execution is running in this sandbox and the queue is full (409).
    SandboxBusy,
    /// The server cannot take more sandboxes right now (503).
    CapacityExhausted,
    /// The sandbox died while starting, or is in the `failed` state (409).
    SandboxFailed,
    /// The sandbox's disk quota (`disk_mb`) was hit while writing (507).
    QuotaExceeded,
    /// The host's disk is too full to create a workspace (507).
    InsufficientStorage,
    /// An archive entry is hostile or malformed (400).
    InvalidArchive,
    /// No snapshot with that id (404).
    SnapshotNotFound,
    /// A saved state on disk is truncated or corrupted (422).
    StateCorrupt,
    /// The sandbox's state could not be saved; the sandbox is unchanged (409).
    CaptureFailed,
    /// No volume with that name (404).
    VolumeNotFound,
    /// The volume exists already, or is mounted where that is not allowed (409).
    VolumeInUse,
    /// The sandbox was not created to expose that port (403).
    PortNotExposed,
    /// Nothing inside the sandbox accepts connections on that port (502).
    PortUnreachable,
    /// No API key, or a key that is malformed, unknown or revoked (401).
    Unauthenticated,
    /// The key may not do this (an admin-only operation) (403).
    Forbidden,
    /// A policy denied the request; the message names the deciding policies and why (403).
    PolicyDenied,
    /// A tenant quota (sandboxes, CPU, memory, creation rate) stayed full for the whole wait
    /// bound; the message says which and `Retry-After` when to retry (429).
    TenantQuotaExceeded,
    /// No tenant with that name (404).
    TenantNotFound,
    /// No API key with that id (404).
    KeyNotFound,
    /// The name is taken (a tenant's name; volume and template names are per tenant) (409).
    NameTaken,
    /// The template is still needed: a sandbox that has not ended or a snapshot names it
    /// (409).
    TemplateInUse,
    /// The policy set does not parse or does not validate against the schema (422).
    InvalidPolicy,
    /// The sandbox was contained after a guardrail finding; it takes no more work (409).
    SandboxContained,
    /// The audit log cannot record (its disk is full, or a corrupted segment stops it until an
    /// operator acts); actions are refused rather than run unrecorded (503).
    AuditUnavailable,
    /// No job with that id (404).
    JobNotFound,
    /// The job queue (the sandbox's or the server's) is full; `Retry-After` says when to retry
    /// (429).
    JobQueueFull,
    /// The job has ended and cannot be cancelled (409).
    JobEnded,
    /// No webhook with that id (404).
    WebhookNotFound,
    /// A bundle written by a newer sandlot, or not a bundle at all (400).
    UnsupportedBundle,
    /// No review with that id (or another tenant's) (404).
    ReviewNotFound,
    /// The held action was denied by a person or by its review's timeout; the message says
    /// who and why (403).
    ReviewDenied,
    /// The review was decided already, or its approved action was released already (409).
    ReviewDecided,
    /// The action is held for a person's review, still pending when the call stopped
    /// waiting; the message names the review (409). REST answers 202 with the review
    /// instead; E2B and MCP, whose clients cannot poll, answer this.
    ReviewPending,
    /// A request with the console's session cookie that its pages did not make: no or a wrong
    /// `X-Sandlot-CSRF` token, or another origin (403).
    CsrfFailed,
    /// Something went wrong on the server (500).
    Internal,
}

impl ErrorCode {
    /// The HTTP status this code stands for, on every protocol that speaks HTTP (REST, E2B,
    /// MCP's transport): part of the code's contract, like its name.
    pub fn http_status(self) -> u16 {
        match self {
            Self::InvalidRequest => 400,
            Self::InvalidArgument => 400,
            Self::PayloadTooLarge => 413,
            Self::SandboxNotFound => 404,
            Self::SandboxGone => 410,
            Self::ExecutionNotFound => 404,
            Self::TemplateNotFound => 404,
            Self::TemplateNotReady => 409,
            Self::InvalidPath => 400,
            Self::FileNotFound => 404,
            Self::NotARegularFile => 400,
            Self::FileTooLarge => 413,
            Self::WorkspaceFull => 507,
            Self::SandboxBusy => 409,
            Self::CapacityExhausted => 503,
            Self::SandboxFailed => 409,
            Self::QuotaExceeded => 507,
            Self::InsufficientStorage => 507,
            Self::InvalidArchive => 400,
            Self::SnapshotNotFound => 404,
            Self::StateCorrupt => 422,
            Self::CaptureFailed => 409,
            Self::VolumeNotFound => 404,
            Self::VolumeInUse => 409,
            Self::PortNotExposed => 403,
            Self::PortUnreachable => 502,
            Self::Unauthenticated => 401,
            Self::Forbidden => 403,
            Self::PolicyDenied => 403,
            Self::TenantQuotaExceeded => 429,
            Self::TenantNotFound => 404,
            Self::KeyNotFound => 404,
            Self::NameTaken => 409,
            Self::TemplateInUse => 409,
            Self::InvalidPolicy => 422,
            Self::SandboxContained => 409,
            Self::AuditUnavailable => 503,
            Self::JobNotFound => 404,
            Self::JobQueueFull => 429,
            Self::JobEnded => 409,
            Self::WebhookNotFound => 404,
            Self::UnsupportedBundle => 400,
            Self::ReviewNotFound => 404,
            Self::ReviewDenied => 403,
            Self::ReviewDecided => 409,
            Self::ReviewPending => 409,
            Self::CsrfFailed => 403,
            Self::Internal => 500,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::InvalidArgument => "invalid_argument",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::SandboxNotFound => "sandbox_not_found",
            ErrorCode::SandboxGone => "sandbox_gone",
            ErrorCode::ExecutionNotFound => "execution_not_found",
            ErrorCode::TemplateNotFound => "template_not_found",
            ErrorCode::TemplateNotReady => "template_not_ready",
            ErrorCode::InvalidPath => "invalid_path",
            ErrorCode::FileNotFound => "file_not_found",
            ErrorCode::NotARegularFile => "not_a_regular_file",
            ErrorCode::FileTooLarge => "file_too_large",
            ErrorCode::WorkspaceFull => "workspace_full",
            ErrorCode::SandboxBusy => "sandbox_busy",
            ErrorCode::CapacityExhausted => "capacity_exhausted",
            ErrorCode::SandboxFailed => "sandbox_failed",
            ErrorCode::QuotaExceeded => "quota_exceeded",
            ErrorCode::InsufficientStorage => "insufficient_storage",
            ErrorCode::InvalidArchive => "invalid_archive",
            ErrorCode::SnapshotNotFound => "snapshot_not_found",
            ErrorCode::StateCorrupt => "state_corrupt",
            ErrorCode::CaptureFailed => "capture_failed",
            ErrorCode::VolumeNotFound => "volume_not_found",
            ErrorCode::VolumeInUse => "volume_in_use",
            ErrorCode::PortNotExposed => "port_not_exposed",
            ErrorCode::PortUnreachable => "port_unreachable",
            ErrorCode::Unauthenticated => "unauthenticated",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::PolicyDenied => "policy_denied",
            ErrorCode::TenantQuotaExceeded => "tenant_quota_exceeded",
            ErrorCode::TenantNotFound => "tenant_not_found",
            ErrorCode::KeyNotFound => "key_not_found",
            ErrorCode::NameTaken => "name_taken",
            ErrorCode::TemplateInUse => "template_in_use",
            ErrorCode::InvalidPolicy => "invalid_policy",
            ErrorCode::SandboxContained => "sandbox_contained",
            ErrorCode::AuditUnavailable => "audit_unavailable",
            ErrorCode::JobNotFound => "job_not_found",
            ErrorCode::JobQueueFull => "job_queue_full",
            ErrorCode::JobEnded => "job_ended",
            ErrorCode::WebhookNotFound => "webhook_not_found",
            ErrorCode::UnsupportedBundle => "unsupported_bundle",
            ErrorCode::ReviewNotFound => "review_not_found",
            ErrorCode::ReviewDenied => "review_denied",
            ErrorCode::ReviewDecided => "review_decided",
            ErrorCode::ReviewPending => "review_pending",
            ErrorCode::CsrfFailed => "csrf_failed",
            ErrorCode::Internal => "internal",
        }
    }
}

/// An error with a stable code and a client-safe message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for ApiError {}

/// JSON body of every error response: `{"error": {"code": "...", "message": "..."}}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub code: ErrorCode,
    pub message: String,
}

impl From<&ApiError> for ErrorBody {
    fn from(e: &ApiError) -> Self {
        ErrorBody {
            error: ErrorDetail {
                code: e.code,
                message: e.message.clone(),
            },
        }
    }
}
