//! Execution routes: run code (one JSON result, or a Server-Sent Events stream of its output
//! events), interrupt, and the list of recorded executions.
//!
//! Every execution runs in a task of its own, so a client that goes away (closing the stream or
//! dropping the request) never cancels it halfway: it still completes and is recorded.

use crate::backend::Backend;
use crate::error::{error_body, HttpError};
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::AppState;
use axum::extract::State;
use axum::http::header::ACCEPT;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::Stream;
use sandlot_service::execution::{ExecutionHandle, Step};
use sandlot_service::{OnDrop, ReviewAsk, Started};
use sandlot_types::{
    ApiError, ErrorCode, ExecuteRequest, ExecutionRecord, ExecutionResult, OutputEvent,
};
use serde::{Deserialize, Serialize};
use std::convert::Infallible;

pub use sandlot_types::{event_name, API_ERROR_EVENT, DONE_EVENT};

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

/// `POST /v1/sandboxes/{id}/execute` query: for an execution a policy holds for review.
// Unknown parameters stay ignored, as they were before this query was read.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct HeldQuery {
    /// Seconds to wait for a person's decision (0 or absent: answer 202 at once; at most
    /// 300).
    #[serde(default)]
    review_wait: Option<u64>,
    /// The review an earlier call was held for: the re-submission of the same request,
    /// released once its review is approved.
    #[serde(default)]
    review: Option<String>,
}

impl HeldQuery {
    /// The ask of a REST call: wait `review_wait` seconds (0: answer 202 at once), or
    /// re-submit for `review`.
    pub(crate) fn ask(self) -> ReviewAsk {
        ReviewAsk {
            wait: self.review_wait.unwrap_or(0),
            review: self.review,
            retry: false,
        }
    }
}

/// The answer of a REST call that may be held: `status` with the result, or 202 with the
/// review holding it (`{"review": {...}}`), to poll and re-submit with `?review=<id>`.
pub(crate) fn held_or<T: Serialize>(
    started: Started<T>,
    status: axum::http::StatusCode,
) -> Response {
    match started {
        Started::Running(v) => (status, Json(v)).into_response(),
        Started::Held(review) => crate::reviews::held_response(*review),
    }
}

pub(crate) async fn execute<B: Backend>(
    State(st): State<AppState<B>>,
    caller: crate::govern::Caller,
    ApiPath(id): ApiPath<String>,
    headers: HeaderMap,
    ApiQuery(held): ApiQuery<HeldQuery>,
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
    let stream = req.stream || accepts_event_stream(&headers);
    // A client that leaves (a dropped request, a closed stream) does not stop the execution:
    // it is recorded whole.
    // An execution a policy holds for review waits `review_wait` seconds for a person, or
    // answers 202 with the review to poll and re-submit with (`?review=<id>`).
    let ask = held.ask();
    let mut run = match st
        .svc()
        .start_execution_held(&caller.0, &id, req, stream, OnDrop::RunOn, &ask)
        .await?
    {
        Started::Running(run) => run,
        Started::Held(review) => return Ok(crate::reviews::held_response(*review)),
    };
    if stream {
        return execute_streaming(run).await;
    }
    Ok(Json(run.wait().await?).into_response())
}

fn accepts_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains("text/event-stream"))
}

type Outcome = Result<ExecutionResult, HttpError>;

/// Starts the execution and answers with an SSE stream of its events. The response is held
/// back until the execution has produced its first event or finished, so that an error raised
/// before it runs (unknown sandbox, busy, too large) is a normal JSON error response.
async fn execute_streaming(mut run: ExecutionHandle<ApiError>) -> Result<Response, HttpError> {
    let stream = match run.next().await {
        Step::Event(ev) => event_stream(vec![ev], run, None),
        Step::Done(result) => {
            let early = run.drain();
            match result {
                Err(e) if early.is_empty() => return Err(e.into()),
                result => event_stream(early, run, Some(result.map_err(HttpError))),
            }
        }
    };
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// Sends `initial`, then forwards events as they come; ends with `done` (or `api_error`) once
/// the execution has finished and every event it sent has been forwarded.
fn event_stream(
    initial: Vec<OutputEvent>,
    mut run: ExecutionHandle<ApiError>,
    finished: Option<Outcome>,
) -> impl Stream<Item = Result<Event, Infallible>> + Send {
    async_stream::stream! {
        for ev in initial {
            yield Ok(output_event(&ev));
        }
        let result = match finished {
            Some(result) => result,
            None => loop {
                match run.next().await {
                    Step::Event(ev) => yield Ok(output_event(&ev)),
                    Step::Done(result) => break result.map_err(HttpError),
                }
            },
        };
        for ev in run.drain() {
            yield Ok(output_event(&ev));
        }
        yield Ok(final_event(result));
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
    caller: crate::govern::Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<InterruptResponse>, HttpError> {
    let interrupted = st.svc().interrupt(&caller.0, &id).await?;
    Ok(Json(InterruptResponse { interrupted }))
}

pub(crate) async fn list<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<ExecutionList>, HttpError> {
    let executions = st.backend.list_executions(&id).await?;
    Ok(Json(ExecutionList { executions }))
}
