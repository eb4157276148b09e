//! The service's one error type is [`ApiError`]: a stable [`ErrorCode`] and a message, which
//! every protocol's adapter puts in its own shape. This is the one place that decides the
//! stable code of each runtime failure ([`code_of`]).

use sandlot_runtime::{FileError, RuntimeError};
use sandlot_types::{ApiError, ErrorCode};

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
        R::HostMount { .. } => C::InvalidArgument,
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
        F::NoFreePty => C::QuotaExceeded,
        F::SandboxGone | F::ProcessesGone | F::NoWorkspace => C::SandboxFailed,
        F::Os { .. } | F::Write(_) => C::Internal,
    }
}

/// An id or name as an error message quotes it: at most 64 characters of what was sent.
pub fn short(id: &str) -> String {
    id.chars().take(64).collect()
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
