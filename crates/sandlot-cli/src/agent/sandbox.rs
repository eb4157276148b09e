//! The sandbox side of `sandlot agent`: a sandbox on a running server, reached over its HTTP
//! API like the other client commands, each tool call one streamed execution whose events are
//! shown as they arrive.

use crate::client::Client;
use sandlot_client::SseParser;
use anyhow::{anyhow, Context};
use futures::StreamExt;
use sandlot_types::{
    ApiError, CreateSandbox, ErrorCode, ExecuteRequest, ExecutionResult, Language, OutputEvent,
    Sandbox,
};
use std::time::Duration;

/// How long past its own timeout an execution may take before the agent stops waiting: the
/// server ends executions itself, so this only guards against a server that stopped answering.
const EXECUTION_GRACE: Duration = Duration::from_secs(60);
/// The server's default execution timeout when none is given (the runtime's default).
const SERVER_DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest event of an execution's stream (the last one holds the whole result, whose output
/// the runtime caps at a few MiB): a server that sends more without ending an event is cut
/// off rather than buffered.
const MAX_EVENT_BYTES: usize = 32 << 20;

pub struct Remote {
    api: Client,
    http: reqwest::Client,
    base: String,
    pub id: String,
    /// Whether the agent created the sandbox (and so deletes it at the end).
    pub owned: bool,
}

impl Remote {
    /// The sandbox `id` on the server at `url`, or a new one.
    pub async fn open(url: &str, id: Option<&str>) -> anyhow::Result<Remote> {
        let api = Client::new(url)?;
        let (id, owned) = match id {
            Some(id) => {
                let sb: Sandbox = api
                    .get_json(&format!("/v1/sandboxes/{id}"))
                    .await
                    .with_context(|| format!("sandbox {id}"))?;
                (sb.id, false)
            }
            None => {
                let sb: Sandbox = api
                    .post_json("/v1/sandboxes", &CreateSandbox::default())
                    .await
                    .context("could not create a sandbox")?;
                (sb.id, true)
            }
        };
        let http = crate::config::http_builder(url)
            .connect_timeout(Duration::from_secs(10))
            .build()
            .context("could not build the HTTP client")?;
        Ok(Remote {
            api,
            http,
            base: url.trim_end_matches('/').to_owned(),
            id,
            owned,
        })
    }

    /// Deletes the sandbox if the agent created it.
    pub async fn close(&self) {
        if self.owned {
            if let Err(e) = self.api.delete(&format!("/v1/sandboxes/{}", self.id)).await {
                tracing::warn!(error = %e, "could not delete the sandbox");
            }
        }
    }

    /// Writes `data` to `path` (relative to /workspace) in the sandbox.
    pub async fn upload(&self, path: &str, data: Vec<u8>) -> anyhow::Result<()> {
        let encoded: Vec<String> = path.split('/').map(percent_encode).collect();
        let url = format!(
            "{}/v1/sandboxes/{}/files/{}",
            self.base,
            self.id,
            encoded.join("/")
        );
        let resp = self
            .http
            .put(url)
            .timeout(Duration::from_secs(600))
            .body(data)
            .send()
            .await
            .with_context(|| format!("could not reach the server at {}", self.base))?;
        crate::client::api_result(resp).await?;
        Ok(())
    }

    /// Runs `code`, calling `on_event` for each output event as the server streams it.
    pub async fn execute(
        &self,
        code: &str,
        language: Language,
        timeout: Option<f64>,
        mut on_event: impl FnMut(&OutputEvent),
    ) -> anyhow::Result<ExecutionResult> {
        let req = ExecuteRequest {
            code: code.to_owned(),
            language,
            timeout,
            stream: true,
            context: None,
        };
        let limit = timeout
            .filter(|t| t.is_finite() && *t > 0.0)
            .map_or(SERVER_DEFAULT_TIMEOUT, Duration::from_secs_f64)
            + EXECUTION_GRACE;
        let run = async {
            let resp = self
                .http
                .post(format!("{}/v1/sandboxes/{}/execute", self.base, self.id))
                .header(reqwest::header::ACCEPT, "text/event-stream")
                .json(&req)
                .send()
                .await
                .with_context(|| format!("could not reach the server at {}", self.base))?;
            let mut body = crate::client::api_result(resp).await?.bytes_stream();
            let mut parser = SseParser::default();
            let mut pending = 0usize;
            while let Some(chunk) = body.next().await {
                let chunk = chunk.context("the connection to the server broke")?;
                let events = parser.push(&chunk);
                pending = if events.is_empty() {
                    pending + chunk.len()
                } else {
                    0
                };
                if pending > MAX_EVENT_BYTES {
                    return Err(anyhow!(
                        "the server sent more than {MAX_EVENT_BYTES} bytes without ending an event"
                    ));
                }
                for ev in events {
                    match ev.event.as_str() {
                        sandlot_api::DONE_EVENT => return Ok(serde_json::from_str(&ev.data)?),
                        sandlot_api::API_ERROR_EVENT => {
                            return Err(crate::client::stream_error(&ev.data))
                        }
                        _ => on_event(&serde_json::from_str(&ev.data)?),
                    }
                }
            }
            Err(anyhow!(
                "the server closed the stream before the execution finished"
            ))
        };
        tokio::time::timeout(limit, run).await.map_err(|_| {
            anyhow!(
                "the server did not finish the execution within {} s",
                limit.as_secs()
            )
        })?
    }
}

/// Whether an error is about the code the model sent (the server refused it) rather than the
/// sandbox or the server: those go back to the model as the tool's answer.
pub fn model_facing(e: &anyhow::Error) -> Option<&ApiError> {
    // The same set as the SDK's dispatcher (`_MODEL_FACING`, with the subclasses).
    e.downcast_ref::<ApiError>().filter(|a| {
        matches!(
            a.code,
            ErrorCode::InvalidRequest
                | ErrorCode::InvalidArgument
                | ErrorCode::PayloadTooLarge
                | ErrorCode::FileTooLarge
                | ErrorCode::SandboxBusy
        )
    })
}

/// One path segment, percent-encoded outside the unreserved set.
fn percent_encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_encoded() {
        assert_eq!(percent_encode("data.csv"), "data.csv");
        assert_eq!(percent_encode("a b#?"), "a%20b%23%3F");
    }
}
