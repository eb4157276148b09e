//! The crate's one error type: what a backend call can fail with. Tools turn it into a tool
//! result with `isError` (the model reads the stable code and the message); the stdio command
//! reports it on stderr.

use sandlot_client::ClientError;
use sandlot_types::{ApiError, ErrorCode};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The sandlot API refused the call: its stable code and message.
    #[error("{0}")]
    Api(#[from] ApiError),
    /// The sandlot server (stdio mode) could not be reached, or answered something that is
    /// not its API's format, or its URL is not one. Never [`ClientError::Api`]: that converts
    /// to [`Error::Api`]. Shown with its causes, since the model sees only this text.
    #[error("{}", with_causes(.0))]
    Server(ClientError),
    /// The session is over; no new sandbox is created for it.
    #[error("this MCP session has ended")]
    SessionClosed,
    /// The MCP transport failed (stdio).
    #[error("MCP transport: {0}")]
    Transport(String),
}

impl Error {
    /// The stable code of the failure, as the HTTP API spells it.
    pub fn code(&self) -> &'static str {
        match self {
            Error::Api(e) => e.code.as_str(),
            Error::Server(_) | Error::Transport(_) => "server_unreachable",
            Error::SessionClosed => "session_closed",
        }
    }

    /// Whether the sandbox named does not exist (any more): never did, or was deleted or
    /// expired.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Api(e) if matches!(e.code, ErrorCode::SandboxNotFound | ErrorCode::SandboxGone))
    }

    /// `code: message`, as a tool result shows it to the model.
    pub fn for_model(&self) -> String {
        match self {
            // An API error displays as that already.
            Error::Api(e) => e.to_string(),
            other => format!("{}: {other}", other.code()),
        }
    }
}

impl From<ClientError> for Error {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::Api(e) => Error::Api(e),
            other => Error::Server(other),
        }
    }
}

/// `e: its cause: its cause's cause`.
fn with_causes(e: &ClientError) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

impl From<sandlot_service::execution::TaskFailed> for Error {
    fn from(e: sandlot_service::execution::TaskFailed) -> Self {
        Error::Api(e.into())
    }
}
