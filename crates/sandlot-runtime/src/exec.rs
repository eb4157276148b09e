//! Executions. The runtime's side (`impl Runtime`): checks a request, queues it behind the
//! sandbox's running execution (at most [`MAX_QUEUED`] wait), records it, and restarts in place
//! a sandbox whose processes died in it (`restart.rs`); interrupts; the execution history. One execution itself ([`run`]): send the cell,
//! collect the ordered events under the output budget, enforce the timeout from outside
//! (interrupt, then kill), and classify how it ended.

use crate::artifacts;
use crate::error::{store, RuntimeError};
use crate::sandbox::{Budgeted, Live, Pumped};
use crate::util::{lock, new_id, now_rfc3339};
use crate::Runtime;
use sandlot_types::{
    Artifact, EndState, ExecError, ExecuteRequest, ExecutionRecord, ExecutionResult, OnFailure,
    Outcome as GuardOutcome, OutputEvent, Rollback, Truncation,
};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Most executions that may wait behind a running one on the same sandbox.
const MAX_QUEUED: usize = 16;

impl Runtime {
    /// The longest execution timeout the server accepts, in seconds (the bound of jobs', and
    /// of E2B's executions, which carry none: they run until the client gives up).
    pub fn max_exec_timeout(&self) -> f64 {
        self.inner.config.max_exec_timeout
    }

    /// Runs code; when `events` is given every output event is also sent there as it is
    /// produced (for SSE). Executions on one sandbox run one at a time, in arrival order.
    pub async fn execute(
        &self,
        id: &str,
        req: ExecuteRequest,
        events: Option<mpsc::UnboundedSender<OutputEvent>>,
    ) -> Result<ExecutionResult, RuntimeError> {
        let cfg = &self.inner.config;
        if req.code.len() > cfg.max_code_bytes {
            return Err(RuntimeError::CodeTooLarge {
                size: req.code.len(),
                limit: cfg.max_code_bytes,
            });
        }
        let timeout = match req.timeout {
            None => cfg.default_exec_timeout,
            Some(t) if t.is_finite() && t > 0.0 && t <= cfg.max_exec_timeout => t,
            Some(t) => {
                return Err(RuntimeError::BadTimeout {
                    timeout: t,
                    max: cfg.max_exec_timeout,
                })
            }
        };
        let e = self.entry(id)?;
        self.check_not_contained(&e)?;
        if e.waiting.fetch_add(1, Ordering::SeqCst) >= MAX_QUEUED {
            e.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(RuntimeError::SandboxBusy {
                waiting: MAX_QUEUED,
            });
        }
        let turn = self.turn(&e).await;
        e.waiting.fetch_sub(1, Ordering::SeqCst);
        // Processes that died since the last request (or a sandbox stopped by a server
        // restart) restart in place first.
        let (turn, live, restarted_before) = self.ready_live(&e, turn).await?;
        // Checked under the lock: a context deleted by a request queued ahead is gone.
        live.check_context(req.context.as_deref())?;
        // Before the cell: its variables and files, when a failure is to be rolled back.
        let (turn, capture) = if req.on_failure == OnFailure::Rollback {
            let (turn, cap) = self.capture(&e, turn, &live).await?;
            (turn, Some(cap))
        } else {
            (turn, None)
        };
        self.touch(&e);
        let exec_id = new_id("ex_");
        let record = ExecutionRecord {
            id: exec_id.clone(),
            sandbox_id: id.to_string(),
            code: req.code.clone(),
            language: req.language,
            started_at: now_rfc3339(),
            result: None,
        };
        self.inner.storage.recorder.started(record);
        // With guardrails, streamed events pass the guard on their way to the client.
        let (events, guard) = match events {
            Some(sink) => {
                let (tx, rx) = mpsc::unbounded_channel();
                match self.guard_stream(id, &exec_id, rx, sink.clone()) {
                    Some(task) => (Some(tx), Some(task)),
                    None => (Some(sink), None),
                }
            }
            None => (None, None),
        };
        let mut result = run(
            &live,
            &exec_id,
            &req,
            timeout,
            cfg.max_output_bytes,
            events,
            &self.inner.storage.artifacts,
        )
        .await;
        let streamed = match guard {
            Some(task) => task.await.unwrap_or(GuardOutcome::Pass),
            None => GuardOutcome::Pass,
        };
        let guarded = self.guard_result(&mut result).await.max(streamed);
        let failure = capture.as_ref().and_then(|_| {
            let contained = lock(&e.info).contained.is_some();
            failure_reason(&result, guarded, contained)
        });
        let (turn, rolled) = match (capture, failure) {
            (Some(cap), Some(reason)) => {
                let capture_ms = cap.capture_ms;
                let (turn, restored) = self.roll_back(&e, turn, cap).await;
                match restored {
                    Ok(r) => {
                        result.rolled_back = true;
                        result.rollback = Some(Rollback {
                            reason: reason.to_string(),
                            variables: r.variables,
                            not_restored: r.not_restored,
                            capture_ms,
                            restore_ms: r.restore_ms,
                        });
                    }
                    Err(err) => {
                        tracing::warn!(sandbox = %id, error = %err, "rolling back a failed cell failed");
                        if let Some(e) = result.error.as_mut() {
                            e.value = format!("{}\n[the rollback failed: {err}]", e.value);
                        }
                    }
                }
                (turn, true)
            }
            (Some(cap), None) => {
                self.discard_capture(cap).await;
                (turn, false)
            }
            (None, _) => (turn, false),
        };
        result.restarted = if rolled {
            // The rollback replaced the processes (or, contained, left none) itself.
            drop(turn);
            restarted_before
        } else if result.sandbox_alive {
            drop(turn);
            restarted_before
        } else {
            let why = restart_reason(&result);
            self.restart_after(&e, turn, why)
        };
        if !result.sandbox_alive && e.state() == sandlot_types::SandboxState::Failed {
            // The restart loop's bound was hit: say so instead of promising a restart.
            let reason = lock(&e.info).ended_reason.clone().unwrap_or_default();
            if let Some(err) = result.error.as_mut().filter(|e| e.name == "SandboxDied") {
                err.value = format!("the sandbox's processes died and it is now failed: {reason}");
            }
        }
        if !result.artifacts.is_empty() {
            self.guard_artifacts(&mut result).await;
            // Who may fetch them by hash: tenants whose executions produced them.
            let shas: Vec<String> = result
                .artifacts
                .iter()
                .filter(|a| !a.url.is_empty())
                .map(|a| a.sha256.clone())
                .collect();
            let tenant = lock(&e.info).tenant.clone();
            if let Err(err) = self.inner.storage.store.add_artifact_owners(&tenant, &shas) {
                tracing::warn!(sandbox = %id, error = %err, "artifact owners not recorded");
            }
        }
        self.inner.storage.recorder.finished(&exec_id, &result);
        self.touch(&e);
        self.emit_for(
            sandlot_types::LifecycleKind::Executed,
            &e,
            Some(&exec_id),
            serde_json::json!({
                "language": req.language,
                "end_state": result.end_state,
                "duration_ms": result.duration_ms,
                "cpu_time_ms": result.cpu_time_ms,
                "peak_memory_bytes": result.peak_memory_bytes,
                "restarted": result.restarted.is_some(),
                "rolled_back": result.rolled_back,
            }),
        );
        Ok(result)
    }

    /// Interrupts the running execution (KeyboardInterrupt in Python, SIGINT in Bash).
    /// Returns whether an execution was running.
    pub async fn interrupt(&self, id: &str) -> Result<bool, RuntimeError> {
        let e = self.entry(id)?;
        let Some(live) = e.live() else {
            return Ok(false);
        };
        let running = live.busy();
        if running {
            live.interrupt.notify_one();
        }
        Ok(running)
    }

    /// The executions of a live or ended sandbox, oldest first, including every one already
    /// answered (the write-behind queue is drained first).
    pub async fn list_executions(&self, id: &str) -> Result<Vec<ExecutionRecord>, RuntimeError> {
        let known = self.inner.registry.contains(id)
            || matches!(self.inner.storage.store.get_sandbox(id), Ok(Some(_)));
        if !known {
            return Err(RuntimeError::SandboxNotFound { id: id.to_string() });
        }
        self.inner.storage.recorder.flush().await;
        self.inner
            .storage
            .store
            .list_executions(id)
            .map_err(store("listing executions"))
    }
}

/// How long an interrupted execution gets to stop before the sandbox's processes are killed
/// (and restarted in place). With the kill signalled without waiting, an execution answers
/// within its timeout plus this plus a few milliseconds, whatever its code does.
const GRACE: Duration = Duration::from_secs(1);

/// Why an execution asked to roll back on failure counts as failed, or `None` when it
/// succeeded: how it ended, or its output withheld or its sandbox contained by the guardrails.
fn failure_reason(
    r: &ExecutionResult,
    guarded: GuardOutcome,
    contained: bool,
) -> Option<&'static str> {
    if contained || guarded >= GuardOutcome::Withhold {
        return Some("guardrails");
    }
    match r.end_state {
        EndState::Ok => None,
        EndState::Error => Some("error"),
        EndState::Timeout => Some("timeout"),
        EndState::Interrupted => Some("interrupted"),
        EndState::Oom => Some("oom"),
        EndState::Killed => Some("killed"),
    }
}

/// Why an execution's processes have to restart, from how it ended.
fn restart_reason(r: &ExecutionResult) -> &'static str {
    use crate::restart::reason;
    match r.end_state {
        EndState::Oom => reason::OOM,
        EndState::Timeout => reason::TIMEOUT,
        EndState::Interrupted => reason::INTERRUPT_IGNORED,
        _ => reason::CRASHED,
    }
}

struct Collector {
    outputs: Vec<OutputEvent>,
    sink: Option<mpsc::UnboundedSender<OutputEvent>>,
    stdout: Budgeted,
    stderr: Budgeted,
    result: Option<BTreeMap<String, Value>>,
    error: Option<ExecError>,
    /// Bytes of rich output (display data, results) still allowed in this execution.
    rich_left: usize,
}

/// Rich output (display data and results) kept per execution, as a multiple of the text budget.
const RICH_BUDGET_FACTOR: usize = 16;
/// Longest error value and traceback kept, in bytes.
const MAX_ERROR_TEXT: usize = 64 << 10;
const MAX_TRACEBACK: usize = 256 << 10;

/// Cuts the middle out of `s` so it is at most `max` bytes, saying how much was cut.
fn cut_middle(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut head = max / 2;
    while !s.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = s.len() - max / 2;
    while !s.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}\n[... {} bytes cut ...]\n{}",
        &s[..head],
        tail - head,
        &s[tail..]
    )
}

impl Collector {
    fn emit(&mut self, ev: OutputEvent) {
        if let Some(s) = &self.sink {
            let _ = s.send(ev.clone());
        }
        // Merge adjacent chunks of one stream so the record stays compact.
        match (&ev, self.outputs.last_mut()) {
            (OutputEvent::Stdout { text }, Some(OutputEvent::Stdout { text: last })) => {
                last.push_str(text)
            }
            (OutputEvent::Stderr { text }, Some(OutputEvent::Stderr { text: last })) => {
                last.push_str(text)
            }
            _ => self.outputs.push(ev),
        }
    }

    fn stdout(&mut self, b: &[u8]) {
        let t = self.stdout.push(b);
        if !t.is_empty() {
            self.emit(OutputEvent::Stdout { text: t });
        }
    }

    fn stderr(&mut self, b: &[u8]) {
        let t = self.stderr.push(b);
        if !t.is_empty() {
            self.emit(OutputEvent::Stderr { text: t });
        }
    }

    fn frame(&mut self, v: &Value) {
        let data = || -> BTreeMap<String, Value> {
            v.get("data")
                .and_then(|d| d.as_object())
                .map(|o| o.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                .unwrap_or_default()
        };
        let metadata = v
            .get("metadata")
            .cloned()
            .unwrap_or(Value::Object(Default::default()));
        let kind = v.get("type").and_then(|t| t.as_str());
        if matches!(kind, Some("display_data") | Some("result")) {
            let size = serde_json::to_vec(v).map(|b| b.len()).unwrap_or(usize::MAX);
            if size > self.rich_left {
                // Over budget: keep a short text/plain in its place, so the order and the fact
                // that something was shown survive.
                let text = v
                    .pointer("/data/text~1plain")
                    .and_then(|t| t.as_str())
                    .map(|t| cut_middle(t, 4096))
                    .unwrap_or_default();
                let note = format!(
                    "{text}\n[rich output of {size} bytes dropped: this execution's budget for display data is spent]"
                );
                let mut d = BTreeMap::new();
                d.insert("text/plain".to_string(), Value::String(note));
                let meta = serde_json::json!({"sandlot": {"dropped_bytes": size}});
                if kind == Some("result") {
                    self.result = Some(d.clone());
                    self.emit(OutputEvent::Result {
                        data: d,
                        metadata: meta,
                    });
                } else {
                    self.emit(OutputEvent::DisplayData {
                        data: d,
                        metadata: meta,
                    });
                }
                return;
            }
            self.rich_left -= size;
        }
        match kind {
            Some("display_data") => self.emit(OutputEvent::DisplayData {
                data: data(),
                metadata,
            }),
            Some("result") => {
                let d = data();
                self.result = Some(d.clone());
                self.emit(OutputEvent::Result { data: d, metadata });
            }
            Some("error") => {
                let s = |k: &str, max: usize| {
                    cut_middle(v.get(k).and_then(|x| x.as_str()).unwrap_or(""), max)
                };
                // Keep the last frames (where the error is) within the traceback budget.
                let mut traceback: Vec<String> = Vec::new();
                let mut used = 0;
                if let Some(lines) = v.get("traceback").and_then(|t| t.as_array()) {
                    for line in lines.iter().rev().filter_map(|l| l.as_str()) {
                        let line = cut_middle(line, MAX_ERROR_TEXT);
                        used += line.len();
                        if used > MAX_TRACEBACK {
                            traceback.push("[... earlier traceback lines cut ...]".into());
                            break;
                        }
                        traceback.push(line);
                    }
                }
                traceback.reverse();
                let e = ExecError {
                    name: s("name", 1024),
                    value: s("value", MAX_ERROR_TEXT),
                    traceback,
                };
                self.error = Some(e.clone());
                self.emit(OutputEvent::Error(e));
            }
            _ => {}
        }
    }

    fn finish(&mut self) {
        let t = self.stdout.finish();
        if !t.is_empty() {
            self.emit(OutputEvent::Stdout { text: t });
        }
        let t = self.stderr.finish();
        if !t.is_empty() {
            self.emit(OutputEvent::Stderr { text: t });
        }
    }
}

/// Why the loop stopped.
enum Outcome {
    Done {
        status: String,
        exit_code: Option<i32>,
    },
    Died(String),
    Killed,
}

pub async fn run(
    live: &Live,
    exec_id: &str,
    req: &ExecuteRequest,
    timeout: f64,
    budget: usize,
    sink: Option<mpsc::UnboundedSender<OutputEvent>>,
    artifact_store: &Arc<artifacts::Store>,
) -> ExecutionResult {
    let started_at = now_rfc3339();
    let t0 = Instant::now();
    let cpu0 = live.cgroup.cpu_time();
    let oom0 = live.cgroup.oom_kills();
    let mut c = Collector {
        outputs: Vec::new(),
        sink,
        stdout: Budgeted::new(budget),
        stderr: Budgeted::new(budget),
        result: None,
        error: None,
        rich_left: budget.saturating_mul(RICH_BUDGET_FACTOR),
    };
    let mut events = live.events.lock().await;
    // The output that follows is this execution's; what came before went to the background
    // buffer, and frames of an earlier, abandoned execution are discarded.
    let closed = live.pump.begin(&mut events, exec_id).await;
    *lock(&live.running) = Some(exec_id.to_string());
    let msg = serde_json::json!({
        "type": "execute", "id": exec_id, "code": req.code, "language": req.language,
        "context": context_of(req),
    });
    let mut timed_out = false;
    let mut user_interrupt = false;
    let mut changes = Vec::new();
    let outcome = if let Some(why) = closed {
        Outcome::Died(why)
    } else if let Err(e) = live.send(&msg).await {
        Outcome::Died(format!("sending the cell failed: {e}"))
    } else {
        let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(timeout);
        let mut kill_at: Option<tokio::time::Instant> = None;
        loop {
            let wake = kill_at.unwrap_or(deadline);
            tokio::select! {
                ev = events.recv() => match ev {
                    Some(Pumped::Stdout(b)) => c.stdout(&b),
                    Some(Pumped::Stderr(b)) => c.stderr(&b),
                    Some(Pumped::Frame(v)) => {
                        if v.get("id").and_then(|i| i.as_str()) != Some(exec_id) { continue }
                        if v.get("type").and_then(|t| t.as_str()) == Some("done") {
                            let status = v.get("status").and_then(|s| s.as_str()).unwrap_or("error").to_string();
                            let exit_code = v.get("exit_code").and_then(|x| x.as_i64()).map(|x| x as i32);
                            changes = artifacts::parse_changes(&v);
                            break Outcome::Done { status, exit_code };
                        }
                        c.frame(&v);
                    }
                    Some(Pumped::Closed(why)) => break Outcome::Died(why),
                    None => break Outcome::Died("the sandbox's event stream ended".into()),
                },
                _ = live.interrupt.notified(), if kill_at.is_none() => {
                    user_interrupt = true;
                    live.interrupt();
                    kill_at = Some(tokio::time::Instant::now() + GRACE);
                }
                _ = tokio::time::sleep_until(wake) => {
                    if kill_at.is_some() {
                        // Signalled, not waited for: the processes are gone (or going) and the
                        // restart that follows waits for them, not the client.
                        live.signal_kill();
                        break Outcome::Killed;
                    }
                    timed_out = true;
                    live.interrupt();
                    kill_at = Some(tokio::time::Instant::now() + GRACE);
                }
            }
        }
    };
    *lock(&live.running) = None;
    // Output written just before the end may still be in the channel.
    if matches!(outcome, Outcome::Done { .. }) {
        while let Ok(ev) = events.try_recv() {
            match ev {
                Pumped::Stdout(b) => c.stdout(&b),
                Pumped::Stderr(b) => c.stderr(&b),
                _ => {}
            }
        }
    }
    drop(events);
    c.finish();
    let oom = live.cgroup.oom_kills() > oom0;
    let died_why = match &outcome {
        Outcome::Died(why) => why.clone(),
        _ => "killed after it would not stop".to_string(),
    };
    let (end_state, alive, exit_code) = match outcome {
        Outcome::Done { status, exit_code } => {
            let state = if oom {
                EndState::Oom
            } else if timed_out {
                EndState::Timeout
            } else {
                match status.as_str() {
                    "ok" => EndState::Ok,
                    "interrupted" if user_interrupt => EndState::Interrupted,
                    "interrupted" => EndState::Interrupted,
                    _ => EndState::Error,
                }
            };
            (state, true, exit_code)
        }
        Outcome::Died(_) | Outcome::Killed => {
            live.signal_kill();
            let state = if oom {
                EndState::Oom
            } else if timed_out {
                EndState::Timeout
            } else if user_interrupt {
                EndState::Interrupted
            } else {
                EndState::Killed
            };
            (state, false, None)
        }
    };
    if matches!(end_state, EndState::Timeout) && c.error.is_none() {
        c.error = Some(ExecError {
            name: "TimeoutError".into(),
            value: format!("execution exceeded its timeout of {timeout} s"),
            traceback: vec![],
        });
    }
    if !alive && c.error.is_none() {
        let value = match end_state {
            EndState::Oom => {
                "the sandbox ran out of memory; its processes restart in place and their state \
                 is lost (files are kept)"
                    .to_string()
            }
            _ => format!(
                "the sandbox's processes died ({died_why}); they restart in place and their \
                 state is lost (files are kept)"
            ),
        };
        c.error = Some(ExecError {
            name: "SandboxDied".into(),
            value,
            traceback: vec![],
        });
    }
    let artifacts = if alive && !changes.is_empty() {
        collect_artifacts(live, artifact_store, changes).await
    } else {
        Vec::new()
    };
    ExecutionResult {
        output_held: None,
        id: exec_id.to_string(),
        sandbox_id: live.id.clone(),
        language: req.language,
        end_state,
        stdout_truncation: Truncation {
            kept_bytes: c.stdout.kept(),
            dropped_bytes: c.stdout.dropped_raw(),
        },
        stderr_truncation: Truncation {
            kept_bytes: c.stderr.kept(),
            dropped_bytes: c.stderr.dropped_raw(),
        },
        stdout: std::mem::take(&mut c.stdout.head),
        stderr: std::mem::take(&mut c.stderr.head),
        result: c.result,
        error: c.error,
        exit_code,
        outputs: c.outputs,
        started_at,
        duration_ms: t0.elapsed().as_secs_f64() * 1000.0,
        cpu_time_ms: live.cgroup.cpu_time().saturating_sub(cpu0).as_secs_f64() * 1000.0,
        peak_memory_bytes: live.cgroup.peak_memory(),
        sandbox_alive: alive,
        artifacts,
        context: Some(context_of(req).to_string()),
        restarted: None,
        background_bytes: live.pump.background_bytes(),
        rolled_back: false,
        rollback: None,
    }
}

/// Copies the files the driver reported changed into the artifact store, reading them through
/// the workspace fd (never by host path).
async fn collect_artifacts(
    live: &Live,
    store: &Arc<artifacts::Store>,
    changes: Vec<artifacts::Change>,
) -> Vec<Artifact> {
    let ws = match live.workspace() {
        Ok(ws) => ws,
        Err(e) => {
            tracing::warn!(sandbox = %live.id, error = %e, "no workspace for artifacts");
            return Vec::new();
        }
    };
    let store = store.clone();
    tokio::task::spawn_blocking(move || store.collect(&ws, &changes))
        .await
        .unwrap_or_default()
}

/// The context an execution runs in: the one it names, or the sandbox's default.
fn context_of(req: &ExecuteRequest) -> &str {
    req.context
        .as_deref()
        .unwrap_or(crate::contexts::DEFAULT_CONTEXT)
}
