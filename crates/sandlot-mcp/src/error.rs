//! The crate's one error type: what a backend call can fail with. Tools turn it into a tool
//! result with `isError` (the model reads the stable code and the message); the stdio command
//! reports it on stderr.

use sandlot_types::{ApiError, ErrorCode};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The sandlot API refused the call: its stable code and message.
    #[error("{0}")]
    Api(#[from] ApiError),
    /// The server could not be reached (stdio mode).
    #[error("could not reach the sandlot server at {url}: {source}")]
    Unreachable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// The server answered something that is not its API's format.
    #[error("the sandlot server at {url} answered {status}: {body}")]
    BadResponse {
        url: String,
        status: u16,
        body: String,
    },
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
            Error::Unreachable { .. } | Error::BadResponse { .. } | Error::Transport(_) => {
                "server_unreachable"
            }
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

impl From<sandlot_service::execution::TaskFailed> for Error {
    fn from(e: sandlot_service::execution::TaskFailed) -> Self {
        Error::Api(e.into())
    }
}
