//! An execution in flight, for every protocol: [`start`] runs it in a task of its own (with
//! the request's [`Note`] and span, so its record and trace name the request), and hands back
//! an [`ExecutionHandle`] that yields its output events as they come and then its result.
//!
//! The execution is never cancelled halfway by the code that started it: its task runs on
//! whatever happens to the handle, and the sandbox takes the next call with its state. What a
//! dropped handle (a client that went away) does is said when it is started: [`Dropped::RunOn`]
//! lets the execution finish, [`Dropped::Interrupt`] interrupts it (the way a user's Ctrl-C
//! would) unless it has finished already.
//!
//! REST (JSON and SSE), E2B's code interpreter (NDJSON), MCP's tools and the durable jobs all
//! consume it; each only puts the events and the result in its own shape.

use crate::note::Note;
use sandlot_runtime::RuntimeError;
use sandlot_types::{ApiError, ErrorCode, ExecutionResult, OutputEvent};
use std::future::Future;
use tokio::sync::mpsc;
use tokio::task::{JoinError, JoinHandle};
use tracing::Instrument;

/// Where an execution sends its output events as they happen.
pub type Events = mpsc::UnboundedSender<OutputEvent>;

/// The execution's task ended without an answer (it panicked): each protocol's error type
/// says so in its own words through `From`.
#[derive(Debug)]
pub struct TaskFailed(pub JoinError);

impl From<TaskFailed> for ApiError {
    fn from(e: TaskFailed) -> Self {
        ApiError::new(
            ErrorCode::Internal,
            format!("the execution task failed: {}", e.0),
        )
    }
}

impl From<TaskFailed> for RuntimeError {
    fn from(e: TaskFailed) -> Self {
        RuntimeError::Task {
            task: "the execution",
            source: e.0,
        }
    }
}

/// What a dropped [`ExecutionHandle`] does to an execution that has not finished.
pub enum Dropped {
    /// Nothing: the execution finishes and is recorded (a REST call whose client left, a job).
    RunOn,
    /// Calls this (once) to interrupt it: the client went away and nobody will read the
    /// answer. It runs in the dropping task, so it should only start the interrupt.
    Interrupt(Box<dyn FnOnce() + Send>),
}

/// The next thing an execution did.
// One per event, matched and moved out at once, never stored: boxing the result would only
// add an allocation per execution.
#[allow(clippy::large_enum_variant)]
pub enum Step<E> {
    /// An output event (stdout, stderr, a display, a result, an error).
    Event(OutputEvent),
    /// It finished: its result. Events it sent before may still be waiting
    /// ([`ExecutionHandle::drain`]).
    Done(Result<ExecutionResult, E>),
}

/// An execution in flight (see the module docs).
pub struct ExecutionHandle<E> {
    events: mpsc::UnboundedReceiver<OutputEvent>,
    task: JoinHandle<Result<ExecutionResult, E>>,
    finished: bool,
    dropped: Option<Box<dyn FnOnce() + Send>>,
}

/// Starts `run` in a task of its own, with the current request's note and span; `run` gets
/// the sender for its output events (it may drop it: then only the result comes).
pub fn start<E, F>(run: impl FnOnce(Events) -> F, dropped: Dropped) -> ExecutionHandle<E>
where
    E: Send + 'static,
    F: Future<Output = Result<ExecutionResult, E>> + Send + 'static,
{
    let (tx, events) = mpsc::unbounded_channel();
    let work = run(tx);
    let task = match Note::current() {
        Some(note) => tokio::spawn(note.scope(work).in_current_span()),
        None => tokio::spawn(work.in_current_span()),
    };
    ExecutionHandle {
        events,
        task,
        finished: false,
        dropped: match dropped {
            Dropped::RunOn => None,
            Dropped::Interrupt(f) => Some(f),
        },
    }
}

impl<E: From<TaskFailed>> ExecutionHandle<E> {
    /// The next event, or the result once it has finished (events first: an event sent before
    /// the end comes before it). Cancel-safe: dropping the future loses nothing. After
    /// `Done`, call [`ExecutionHandle::drain`] for events that raced the end, not this again.
    pub async fn next(&mut self) -> Step<E> {
        tokio::select! {
            biased;
            Some(ev) = self.events.recv() => Step::Event(ev),
            done = &mut self.task => {
                self.finished = true;
                Step::Done(done.unwrap_or_else(|e| Err(TaskFailed(e).into())))
            }
        }
    }

    /// Waits for the result, leaving events unread. Cancel-safe.
    pub async fn wait(&mut self) -> Result<ExecutionResult, E> {
        let done = (&mut self.task).await;
        self.finished = true;
        done.unwrap_or_else(|e| Err(TaskFailed(e).into()))
    }

    /// The events sent and not read yet (after `Done`: every event there will be).
    pub fn drain(&mut self) -> Vec<OutputEvent> {
        std::iter::from_fn(|| self.events.try_recv().ok()).collect()
    }

    /// Whether the result has been taken: dropping the handle then does nothing.
    pub fn finished(&self) -> bool {
        self.finished
    }
}

impl<E> Drop for ExecutionHandle<E> {
    fn drop(&mut self) {
        if self.finished || self.task.is_finished() {
            return;
        }
        if let Some(interrupt) = self.dropped.take() {
            interrupt();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    fn result() -> ExecutionResult {
        ExecutionResult {
            output_held: None,
            id: "ex_1".into(),
            sandbox_id: "sb_1".into(),
            language: sandlot_types::Language::Python,
            end_state: sandlot_types::EndState::Ok,
            stdout: String::new(),
            stderr: String::new(),
            result: None,
            error: None,
            exit_code: None,
            outputs: Vec::new(),
            stdout_truncation: Default::default(),
            stderr_truncation: Default::default(),
            started_at: String::new(),
            duration_ms: 0.0,
            cpu_time_ms: 0.0,
            peak_memory_bytes: 0,
            sandbox_alive: true,
            artifacts: Vec::new(),
            context: None,
            restarted: None,
            background_bytes: 0,
            rolled_back: false,
            rollback: None,
        }
    }

    fn stdout(text: &str) -> OutputEvent {
        OutputEvent::Stdout { text: text.into() }
    }

    #[tokio::test]
    async fn events_come_before_the_result_and_none_is_lost() {
        let mut h: ExecutionHandle<ApiError> = start(
            |tx| async move {
                for i in 0..100 {
                    let _ = tx.send(stdout(&i.to_string()));
                }
                Ok(result())
            },
            Dropped::RunOn,
        );
        let mut seen = Vec::new();
        loop {
            match h.next().await {
                Step::Event(OutputEvent::Stdout { text }) => seen.push(text),
                Step::Event(_) => unreachable!(),
                Step::Done(r) => {
                    r.expect("it succeeded");
                    break;
                }
            }
        }
        for ev in h.drain() {
            if let OutputEvent::Stdout { text } = ev {
                seen.push(text);
            }
        }
        let want: Vec<String> = (0..100).map(|i| i.to_string()).collect();
        assert_eq!(seen, want);
        assert!(h.finished());
    }

    #[tokio::test]
    async fn a_dropped_handle_interrupts_only_what_runs_and_only_when_asked() {
        let interrupted = Arc::new(AtomicBool::new(false));
        let flag = interrupted.clone();
        let h: ExecutionHandle<ApiError> = start(
            |_| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok(result())
            },
            Dropped::Interrupt(Box::new(move || flag.store(true, Ordering::SeqCst))),
        );
        drop(h);
        assert!(
            interrupted.load(Ordering::SeqCst),
            "a running execution is interrupted"
        );

        let interrupted = Arc::new(AtomicBool::new(false));
        let flag = interrupted.clone();
        let mut h: ExecutionHandle<ApiError> = start(
            |_| async { Ok(result()) },
            Dropped::Interrupt(Box::new(move || flag.store(true, Ordering::SeqCst))),
        );
        h.wait().await.expect("it succeeded");
        drop(h);
        assert!(!interrupted.load(Ordering::SeqCst), "a finished one is not");
    }

    #[tokio::test]
    async fn a_panicking_execution_is_an_error_in_the_callers_type() {
        let mut h: ExecutionHandle<ApiError> = start(|_| async { panic!("boom") }, Dropped::RunOn);
        let e = h.wait().await.expect_err("the task failed");
        assert_eq!(e.code, ErrorCode::Internal);
        assert!(
            e.message.starts_with("the execution task failed"),
            "{}",
            e.message
        );
    }

    #[tokio::test]
    async fn run_on_lets_the_execution_finish() {
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let h: ExecutionHandle<ApiError> = start(
            |_| async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let _ = done_tx.send(());
                Ok(result())
            },
            Dropped::RunOn,
        );
        drop(h);
        tokio::time::timeout(Duration::from_secs(5), done_rx)
            .await
            .expect("it ran to its end")
            .expect("it sent");
    }
}
