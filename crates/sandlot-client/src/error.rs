//! [`ClientError`], the crate's one error type: what a call to a sandlot server can fail with.

use sandlot_types::ApiError;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The URL given is not one of a server (not http(s), or not a URL at all).
    #[error("{0}")]
    InvalidUrl(String),
    /// The API key cannot be sent in a header.
    #[error("the API key has characters a header cannot carry")]
    InvalidKey,
    /// reqwest could not build its client (no TLS backend, ...).
    #[error("could not build the HTTP client")]
    Build(#[source] reqwest::Error),
    /// The request did not get an answer: nothing listens, the connection was refused or
    /// reset, or the call's time bound passed before the answer's head came.
    #[error("could not reach the server at {url}")]
    Transport {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// The answer's body broke off (the connection dropped, or the time bound passed).
    #[error("the connection to the server at {url} broke")]
    Broken {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// The sandlot API refused the call: its stable code and message, as the server sent them.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// A non-2xx answer whose body is not sandlot's error body (a proxy's page, a redirect, a
    /// server that is not sandlot): its status and the start of its body.
    #[error("the server at {url} answered {status}: {body}")]
    Status {
        url: String,
        status: reqwest::StatusCode,
        body: String,
    },
    /// The answer (or one event of a stream) is larger than this client reads.
    #[error("the server at {url} sent {what} larger than {limit} bytes")]
    TooLarge {
        url: String,
        what: &'static str,
        limit: u64,
    },
    /// A 2xx answer (or an event of a stream) that is not the JSON expected.
    #[error("the server at {url} answered something that is not the expected JSON")]
    Decode {
        url: String,
        #[source]
        source: serde_json::Error,
    },
    /// An execution's stream ended with an error event that is not sandlot's error body.
    #[error("the execution failed: {0}")]
    Execution(String),
    /// An execution's stream ended before its result.
    #[error("the server closed the stream before the execution finished")]
    StreamEnded,
}

impl ClientError {
    /// The API's refusal, when that is what this is.
    pub fn api(&self) -> Option<&ApiError> {
        match self {
            ClientError::Api(e) => Some(e),
            _ => None,
        }
    }
}
