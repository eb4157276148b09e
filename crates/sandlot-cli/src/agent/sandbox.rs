//! The sandbox side of `sandlot agent`: a sandbox on a running server, reached over its HTTP
//! API like the other client commands, each tool call one streamed execution whose events are
//! shown as they arrive.

use anyhow::{anyhow, Context};
use sandlot_client::{segment, Client, ClientError, Method, Streamed};
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

pub struct Remote {
    api: Client,
    pub id: String,
    /// Whether the agent created the sandbox (and so deletes it at the end).
    pub owned: bool,
}

impl Remote {
    /// The sandbox `id` on the server at `url`, or a new one.
    pub async fn open(url: &str, id: Option<&str>) -> anyhow::Result<Remote> {
        let api = crate::client::connect(url)?;
        let (id, owned) = match id {
            Some(id) => {
                let sb: Sandbox = api
                    .get_json(&format!("/v1/sandboxes/{}", segment(id)))
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
        Ok(Remote { api, id, owned })
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
        let encoded: Vec<String> = path.split('/').map(segment).collect();
        let req = self
            .api
            .request(
                Method::PUT,
                &format!("/v1/sandboxes/{}/files/{}", self.id, encoded.join("/")),
            )
            .body(data);
        self.api.send(req).await?;
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
            on_failure: Default::default(),
        };
        let limit = timeout
            .filter(|t| t.is_finite() && *t > 0.0)
            .map_or(SERVER_DEFAULT_TIMEOUT, Duration::from_secs_f64)
            + EXECUTION_GRACE;
        let run = async {
            let mut stream = self.api.execute_stream(&self.id, req).await?;
            loop {
                match stream.next().await? {
                    Streamed::Output(ev) => on_event(&ev),
                    Streamed::Done(result) => return Ok(*result),
                }
            }
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
    let api = e
        .downcast_ref::<ClientError>()
        .and_then(ClientError::api)
        .or_else(|| e.downcast_ref::<ApiError>());
    api.filter(|a| {
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
