//! Requests to the driver between executions (context operations, saving and loading state):
//! one frame out, optionally carrying a descriptor, then the one answer frame that matches it.
//! Called with the sandbox's execution lock held, so nothing else talks to the driver; output
//! and frames arriving meanwhile belong to no execution and are discarded.

use crate::sandbox::{Live, Pumped};
use serde_json::Value;
use std::os::fd::BorrowedFd;
use std::time::Duration;

/// Why a request failed.
pub(crate) enum Failure {
    /// The driver answered no (its message, cut to 1000 characters).
    Refused(String),
    /// No answer in time; the sandbox lives on.
    NoAnswer,
    /// The sandbox's processes are gone.
    Died(String),
}

/// Sends `msg` (with `fd` attached when given) and waits up to `wait` for the frame of type
/// `answer` whose `key` field equals `value`. Returns it when its `ok` is true.
pub(crate) async fn ask(
    live: &Live,
    msg: &Value,
    fd: Option<BorrowedFd<'_>>,
    answer: &str,
    (key, value): (&str, &str),
    wait: Duration,
) -> Result<Value, Failure> {
    let mut events = live.events.lock().await;
    while let Ok(stale) = events.try_recv() {
        if let Pumped::Closed(why) = stale {
            return Err(Failure::Died(why));
        }
    }
    let sent = match fd {
        Some(fd) => live.send_with_fd(msg, fd).await,
        None => live.send(msg).await,
    };
    if let Err(e) = sent {
        return Err(Failure::Died(format!("sending the request failed: {e}")));
    }
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Err(_) => return Err(Failure::NoAnswer),
            Ok(None) => return Err(Failure::Died("the sandbox's event stream ended".into())),
            Ok(Some(Pumped::Closed(why))) => return Err(Failure::Died(why)),
            Ok(Some(Pumped::Frame(v)))
                if v.get("type").and_then(Value::as_str) == Some(answer)
                    && v.get(key).and_then(Value::as_str) == Some(value) =>
            {
                if v.get("ok").and_then(Value::as_bool) == Some(true) {
                    return Ok(v);
                }
                let error = v.get("error").and_then(Value::as_str).unwrap_or("refused");
                return Err(Failure::Refused(error.chars().take(1000).collect()));
            }
            Ok(Some(_)) => continue,
        }
    }
}
