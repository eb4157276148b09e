//! The SSE event names of an execution's stream: what the server writes
//! (`/v1/sandboxes/{id}/execute` and a job's `GET /v1/jobs/{id}/events`) and its clients read
//! (`sandlot-client`), defined once for both.

use crate::OutputEvent;

/// SSE event that ends a stream: its data is the `ExecutionResult`.
pub const DONE_EVENT: &str = "done";
/// SSE event that ends a stream when the execution failed after its stream had started; its
/// data is the usual error body. (An error before the stream starts is a plain JSON error.)
pub const API_ERROR_EVENT: &str = "api_error";

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
