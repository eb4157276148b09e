//! Execution routes: run code (one JSON result, or a Server-Sent Events stream of its output
//! events), interrupt, and the list of recorded executions.
//!
//! Every execution runs in a task of its own, so a client that goes away (closing the stream or
//! dropping the request) never cancels it halfway: it still completes and is recorded.

use crate::backend::Backend;
use crate::error::{error_body, HttpError};
use crate::extract::{ApiJson, ApiPath};
use crate::AppState;
use axum::extract::State;
use axum::http::header::ACCEPT;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::Stream;
use sandlot_types::{
    ApiError, ErrorCode, ExecuteRequest, ExecutionRecord, ExecutionResult, OutputEvent,
};
use serde::{Deserialize, Serialize};
use std::convert::Infallible;
use tokio::sync::mpsc;
use tokio::task::{JoinError, JoinHandle};
use tracing::Instrument;

/// SSE event that ends a stream: its data is the [`ExecutionResult`].
pub const DONE_EVENT: &str = "done";
/// SSE event that ends a stream when the execution failed after its stream had started; its
/// data is the usual error body. (An error before the stream starts is a plain JSON error.)
pub const API_ERROR_EVENT: &str = "api_error";

/// `POST /v1/sandboxes/{id}/interrupt` response.
#[derive(Debug, Serialize, Deserialize)]
pub struct InterruptResponse {
    pub interrupted: bool,
}

/// `GET /v1/sandboxes/{id}/executions` response.
#[derive(Debug, Serialize, Deserialize)]
pub struct ExecutionList {
    pub executions: Vec<ExecutionRecord>,
}

type RunHandle = JoinHandle<Result<ExecutionResult, ApiError>>;

pub(crate) async fn execute<B: Backend>(
    State(st): State<AppState<B>>,
    caller: crate::govern::Caller,
    ApiPath(id): ApiPath<String>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<ExecuteRequest>,
) -> Result<Response, HttpError> {
    if req.code.len() > st.cfg.max_code_bytes {
        return Err(HttpError::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "the code is {} bytes; this server accepts at most {} bytes",
                req.code.len(),
                st.cfg.max_code_bytes
            ),
        ));
    }
    if let Some(g) = st.gov.as_deref() {
        let sandbox = st.backend.get_sandbox(&id).await?;
        g.gate(
            &caller.0,
            sandlot_policy::GateRequest::Execute {
                sandbox: crate::gates::sandbox_ref(&sandbox),
                code_bytes: req.code.len() as u64,
                language: req.language.as_str().into(),
            },
            format!("Sandbox::{id:?}"),
        )?;
    }
    if req.stream || accepts_event_stream(&headers) {
        return execute_streaming(st.backend, id, req).await;
    }
    let backend = st.backend;
    // The request's note goes with it: the execution's lineage names the decisions taken here.
    let note = crate::record::Note::current().unwrap_or_default();
    let run = tokio::spawn(
        note.scope(async move { backend.execute(&id, req, None).await })
            .in_current_span(),
    );
    Ok(Json(joined(run.await)?).into_response())
}

fn accepts_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains("text/event-stream"))
}

type Outcome = Result<ExecutionResult, HttpError>;

fn joined(r: Result<Result<ExecutionResult, ApiError>, JoinError>) -> Outcome {
    match r {
        Ok(result) => Ok(result?),
        Err(e) => Err(HttpError::internal(format!(
            "the execution task failed: {e}"
        ))),
    }
}

/// What happened first after the execution was started.
enum Start {
    Event(OutputEvent),
    Finished(Box<Outcome>),
}

/// Starts the execution and answers with an SSE stream of its events. The response is held
/// back until the execution has produced its first event or finished, so that an error raised
/// before it runs (unknown sandbox, busy, too large) is a normal JSON error response.
async fn execute_streaming<B: Backend>(
    backend: B,
    id: String,
    req: ExecuteRequest,
) -> Result<Response, HttpError> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let note = crate::record::Note::current().unwrap_or_default();
    let mut run: RunHandle = tokio::spawn(
        note.scope(async move { backend.execute(&id, req, Some(tx)).await })
            .in_current_span(),
    );
    let start = tokio::select! {
        biased;
        Some(ev) = rx.recv() => Start::Event(ev),
        done = &mut run => Start::Finished(Box::new(joined(done))),
    };
    let stream = match start {
        Start::Event(ev) => event_stream(vec![ev], rx, Execution::Running(run)),
        Start::Finished(result) => {
            let early: Vec<OutputEvent> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
            match *result {
                Err(e) if early.is_empty() => return Err(e),
                result => event_stream(early, rx, Execution::Finished(Box::new(result))),
            }
        }
    };
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// The execution behind a stream: still running in its task, or already done.
enum Execution {
    Running(RunHandle),
    Finished(Box<Outcome>),
}

/// Sends `initial`, then forwards events as they come; ends with `done` (or `api_error`) once
/// the execution has finished and every event it sent has been forwarded.
fn event_stream(
    initial: Vec<OutputEvent>,
    mut rx: mpsc::UnboundedReceiver<OutputEvent>,
    execution: Execution,
) -> impl Stream<Item = Result<Event, Infallible>> + Send {
    async_stream::stream! {
        for ev in initial {
            yield Ok(output_event(&ev));
        }
        let result = match execution {
            Execution::Finished(result) => *result,
            Execution::Running(mut run) => loop {
                let step = tokio::select! {
                    biased;
                    Some(ev) = rx.recv() => Start::Event(ev),
                    done = &mut run => Start::Finished(Box::new(joined(done))),
                };
                match step {
                    Start::Event(ev) => yield Ok(output_event(&ev)),
                    Start::Finished(result) => break *result,
                }
            },
        };
        while let Ok(ev) = rx.try_recv() {
            yield Ok(output_event(&ev));
        }
        yield Ok(final_event(result));
    }
}

/// The SSE event name of an output event: its `type`.
pub fn event_name(ev: &OutputEvent) -> &'static str {
    match ev {
        OutputEvent::Stdout { .. } => "stdout",
        OutputEvent::Stderr { .. } => "stderr",
        OutputEvent::DisplayData { .. } => "display_data",
        OutputEvent::Result { .. } => "result",
        OutputEvent::Error(_) => "error",
    }
}

fn output_event(ev: &OutputEvent) -> Event {
    json_event(event_name(ev), ev)
}

fn final_event(result: Outcome) -> Event {
    match result {
        Ok(result) => json_event(DONE_EVENT, &result),
        Err(e) => {
            let (_, code, message) = e.client_view();
            json_event(API_ERROR_EVENT, &error_body(code, &message))
        }
    }
}

fn json_event<T: Serialize>(name: &str, value: &T) -> Event {
    match serde_json::to_string(value) {
        Ok(data) => Event::default().event(name).data(data),
        Err(e) => {
            tracing::error!(error = %e, event = name, "could not serialize an SSE event");
            let body = error_body(ErrorCode::Internal.as_str(), "internal server error");
            Event::default()
                .event(API_ERROR_EVENT)
                .data(body.to_string())
        }
    }
}

pub(crate) async fn interrupt<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<InterruptResponse>, HttpError> {
    let interrupted = st.backend.interrupt(&id).await?;
    Ok(Json(InterruptResponse { interrupted }))
}

pub(crate) async fn list<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<ExecutionList>, HttpError> {
    let executions = st.backend.list_executions(&id).await?;
    Ok(Json(ExecutionList { executions }))
}
