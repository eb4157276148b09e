//! envd's `process.Process` service: the E2B SDKs' `commands.run/list/kill/connect` and stdin.
//!
//! A command is a fresh process in E2B, running beside every other command and beside
//! `run_code`. Here it is launched by a short Bash execution of the sandbox (a cell of a few
//! milliseconds, `Runtime::execute`) that starts it detached in a session of its own and
//! returns at once:
//!
//! ```text
//! ( exec 4<IN >DIR/N.out 2>DIR/N.err 3>DIR/N.st || exit 1
//!   export 'K=V'...
//!   /usr/bin/setsid /bin/bash -c WRAPPER sandlot-command 'CWD' 'CMD' 'ARGS'... <&4 4<&- & )
//! ```
//!
//! where `WRAPPER` reports its pid (which is its process group's and session's id) on fd 3,
//! `cd`s, runs the program with fd 3 closed, and reports its exit status on fd 3. `DIR` is
//! `/tmp/.e2b-proc` in the sandbox's own `/tmp`, and the `N.*` names are FIFOs the host made
//! and opened (non-blocking, checked: `sandlot-runtime/src/proctail.rs`) before the cell ran,
//! so the server reads the command's stdout and stderr as it writes them (epoll, no polling),
//! and the status FIFO's end of file says the wrapper has exited: with an `x N` line, exit
//! status N; without one, it was killed. `IN` is `/dev/null`, or a FIFO the host writes
//! (`SendInput`) and closes (`CloseStdin`) when the Start asked for stdin. The subshell keeps
//! the user's persistent Bash session as it was (no `cd`, no export leaks into it); the
//! session of its own keeps the command out of the Bash session's process group, so an
//! interrupted `run_code` cell does not take it down.
//!
//! Pids are numbers this module hands out per sandbox from 1000 (the program's real pid stays
//! inside the sandbox); they name a command for `List`, `SendSignal`, `Connect` and the stdin
//! calls while it runs. `SendSignal` (SIGKILL or SIGTERM) removes the command from `List` at
//! once and signals its process group from the host through pidfds
//! (`CommandControl::signal_group`), so a kill does not wait for the sandbox's executions; the
//! streams end with `signal: killed` once the wrapper is gone. The client's deadline
//! (`Connect-Timeout-Ms` on the Start) kills the command, as envd's does.
//!
//! Limits, said plainly (also in the docs): the launch is an execution, so a command started
//! while a long `run_code` cell (or another execution) runs waits for it before it starts;
//! once started it runs beside everything else. Output is streamed, not kept: a stream whose
//! client does not read for [`SLOW_CLIENT`] is dropped (the command goes on), and output
//! written while no stream is attached is discarded. A wrapper killed by anything but
//! `SendSignal` (say `kill -9` from a cell) ends with `signal: killed`; a program killed by a
//! signal while its wrapper lives ends with `exit status 128+N`, as a shell reports it. There
//! is no PTY, `StreamInput` (a client stream) is not served, and the `user` is the sandbox's
//! one user.
//!
//! Policy: `Start` passes the `execute` gate (language `bash`, the command line's length as
//! its code size) before anything is registered; stdin sent to a running command is its
//! data, not a new execution, and is not gated again.

use crate::connect::{self, Call, Code, Messages, RpcError};
use crate::gates::Gate;
use crate::Ctx;
use axum::extract::{Request, State};
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use futures::StreamExt;
use sandlot_runtime::proctail::{CommandControl, CommandPaths, CommandPipes};
use sandlot_runtime::{Runtime, RuntimeError};
use sandlot_types::{ExecuteRequest, Language, Sandbox};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::mpsc;
use tracing::Instrument;

/// Most commands one sandbox may have running or starting (each holds a few descriptors and a
/// task on the server).
const MAX_PROCS: usize = 32;
/// Most streams (the Start's and `Connect`s) attached to one command.
const MAX_SUBSCRIBERS: usize = 8;
/// Most arguments and environment variables of a command.
const MAX_ARGS: usize = 4096;
const MAX_ENVS: usize = 1024;
/// Linux's signal numbers (the crate does not depend on libc for two constants).
const SIGKILL: i32 = 9;
const SIGTERM: i32 = 15;
/// The first pid handed out in a sandbox (low numbers look like system processes).
const FIRST_PID: u32 = 1000;
/// How long the launch cell may run (it takes milliseconds; waiting for its turn is not
/// counted). Lowered to the runtime's maximum when that is lower.
const LAUNCH_TIMEOUT: f64 = 30.0;
/// Bytes read from a pipe at once, and events queued per stream: at most 2 MiB per stream.
const CHUNK: usize = 64 << 10;
const QUEUE: usize = 32;
/// A stream whose queue stays full this long is dropped; until then the command's output
/// waits for it (the command blocks on its full pipe, as with any reader).
const SLOW_CLIENT: Duration = Duration::from_secs(10);
/// After the wrapper has exited, how long output still in flight is awaited (a process the
/// command left behind may hold the pipes open; its later output is not the command's).
const DRAIN_GRACE: Duration = Duration::from_millis(100);
/// Most bytes of the status channel kept (two short lines are expected).
const MAX_STATUS: usize = 256;
/// The longest `SendInput` waits for room in the command's stdin.
const INPUT_WAIT: Duration = Duration::from_secs(10);

pub(crate) fn routes() -> Router<Ctx> {
    Router::new()
        .route("/process.Process/Start", post(start))
        .route("/process.Process/Connect", post(connect_to))
        .route("/process.Process/List", post(list))
        .route("/process.Process/SendSignal", post(send_signal))
        .route("/process.Process/SendInput", post(send_input))
        .route("/process.Process/StreamInput", post(stream_input))
        .route("/process.Process/CloseStdin", post(close_stdin))
        .route("/process.Process/Update", post(update))
}

// ---- messages (proto3 JSON: lowerCamelCase names, enums as strings, bytes as base64) ----

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ProcessConfig {
    #[serde(default)]
    cmd: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    envs: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cwd: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StartRequest {
    #[serde(default)]
    process: Option<ProcessConfig>,
    #[serde(default)]
    pty: Option<serde_json::Value>,
    #[serde(default)]
    tag: Option<String>,
    #[serde(default)]
    stdin: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Selector {
    #[serde(default)]
    pid: Option<u32>,
    #[serde(default)]
    tag: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Selected {
    #[serde(default)]
    process: Option<Selector>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SendInputRequest {
    #[serde(default)]
    process: Option<Selector>,
    #[serde(default)]
    input: Option<ProcessInput>,
}

/// `ProcessInput`: bytes for the command's stdin (base64, as proto3 JSON writes `bytes`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProcessInput {
    #[serde(default)]
    stdin: Option<String>,
    #[serde(default)]
    pty: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SendSignalRequest {
    #[serde(default)]
    process: Option<Selector>,
    #[serde(default)]
    signal: Option<serde_json::Value>,
}

/// `ProcessEvent` inside `StartResponse`/`ConnectResponse`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Event {
    Start { pid: u32 },
    Data(Data),
    End(End),
    Keepalive {},
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Data {
    Stdout(String),
    Stderr(String),
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct End {
    exit_code: i32,
    exited: bool,
    status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct EventMessage {
    event: Event,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ProcessInfo {
    config: ProcessConfig,
    pid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    tag: Option<String>,
}

#[derive(Debug, Serialize)]
struct ListResponse {
    processes: Vec<ProcessInfo>,
}

#[derive(Debug, Serialize)]
struct Empty {}

// ---- the commands of each sandbox ----

struct Proc {
    pid: u32,
    config: ProcessConfig,
    tag: Option<String>,
    /// Whether the Start asked for stdin (a FIFO the server writes) rather than `/dev/null`.
    wants_stdin: bool,
    state: Mutex<ProcState>,
    /// The command's stdin; `None` after `CloseStdin` or its end. Locked by the command's
    /// task from its registration until its launch has run, so input and a close wait until
    /// the command holds its stdin (a close before that would leave it no writer to open).
    stdin: Arc<tokio::sync::Mutex<Option<pipe::Sender>>>,
    /// The command's pipes' control, once they exist.
    control: OnceLock<Arc<CommandControl>>,
}

#[derive(Default)]
struct ProcState {
    /// The signal `SendSignal` (or the deadline) sent, if any.
    killed: Option<i32>,
    /// The wrapper's pid inside the sandbox (its process group), once it reported it.
    leader: Option<i32>,
    /// Open streams; emptied (so they end) once the command's end is sent.
    subs: Vec<mpsc::Sender<Event>>,
}

impl Proc {
    fn state(&self) -> MutexGuard<'_, ProcState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Passes an event to every stream, waiting for room (see [`SLOW_CLIENT`]); a stream
    /// that is gone or stays full is dropped.
    async fn emit(&self, ev: Event) {
        let subs = self.state().subs.clone();
        let mut dropped = Vec::new();
        for s in subs {
            if s.send_timeout(ev.clone(), SLOW_CLIENT).await.is_err() {
                dropped.push(s);
            }
        }
        if !dropped.is_empty() {
            self.state()
                .subs
                .retain(|s| !dropped.iter().any(|d| d.same_channel(s)));
        }
    }

    /// Sends the end to every stream and closes them.
    fn finish(&self, end: End) {
        let subs = std::mem::take(&mut self.state().subs);
        for s in subs {
            let end = end.clone();
            tokio::spawn(async move {
                let _ = s.send_timeout(Event::End(end), SLOW_CLIENT).await;
            });
        }
    }

    /// Signals the command's process group, now if its wrapper has reported its pid, else the
    /// moment it does (see `tail`).
    async fn signal(&self, sig: i32) {
        let leader = {
            let mut st = self.state();
            st.killed = Some(sig);
            st.leader
        };
        if let (Some(leader), Some(control)) = (leader, self.control.get()) {
            control.signal_group(leader, sig).await;
        }
    }
}

#[derive(Default)]
struct SandboxProcs {
    next_pid: u32,
    procs: BTreeMap<u32, Arc<Proc>>,
}

/// The running and starting commands of every sandbox of this server, by sandbox id. A
/// process global rather than a field of `Ctx`: the commands belong to the sandboxes (whose
/// ids are unique), not to one router instance, and nothing else needs them.
static PROCS: Mutex<Option<HashMap<String, SandboxProcs>>> = Mutex::new(None);

fn with_procs<T>(f: impl FnOnce(&mut HashMap<String, SandboxProcs>) -> T) -> T {
    let mut g = PROCS.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(HashMap::new))
}

fn register(
    sandbox: &str,
    config: ProcessConfig,
    tag: Option<String>,
    wants_stdin: bool,
) -> Result<Arc<Proc>, RpcError> {
    with_procs(|all| {
        let sb = all.entry(sandbox.to_owned()).or_default();
        if sb.procs.len() >= MAX_PROCS {
            return Err(RpcError::new(
                Code::ResourceExhausted,
                format!("this sandbox already has {MAX_PROCS} commands running"),
            ));
        }
        if let Some(t) = &tag {
            if sb.procs.values().any(|p| p.tag.as_ref() == Some(t)) {
                return Err(RpcError::new(
                    Code::AlreadyExists,
                    format!("a command tagged {t:?} is already running"),
                ));
            }
        }
        if sb.next_pid < FIRST_PID {
            sb.next_pid = FIRST_PID;
        }
        let mut pid = sb.next_pid;
        while sb.procs.contains_key(&pid) {
            pid = pid.checked_add(1).unwrap_or(FIRST_PID);
        }
        sb.next_pid = pid.checked_add(1).unwrap_or(FIRST_PID);
        let proc = Arc::new(Proc {
            pid,
            config,
            tag,
            wants_stdin,
            state: Mutex::default(),
            stdin: Default::default(),
            control: OnceLock::new(),
        });
        sb.procs.insert(pid, proc.clone());
        Ok(proc)
    })
}

fn unregister(sandbox: &str, pid: u32) {
    with_procs(|all| {
        if let Some(sb) = all.get_mut(sandbox) {
            sb.procs.remove(&pid);
            if sb.procs.is_empty() {
                all.remove(sandbox);
            }
        }
    })
}

fn find(sandbox: &str, sel: Option<&Selector>) -> Result<Arc<Proc>, RpcError> {
    let sel = sel.ok_or_else(|| RpcError::invalid("the request names no process (pid or tag)"))?;
    with_procs(|all| {
        let procs = all.get(sandbox).map(|sb| &sb.procs);
        let found = match (sel.pid, &sel.tag) {
            (Some(pid), _) => procs.and_then(|p| p.get(&pid)).cloned(),
            (None, Some(tag)) => procs
                .and_then(|p| p.values().find(|p| p.tag.as_ref() == Some(tag)))
                .cloned(),
            (None, None) => return Err(RpcError::invalid("the selector has neither pid nor tag")),
        };
        found.ok_or_else(|| {
            let what = match (sel.pid, &sel.tag) {
                (Some(pid), _) => format!("pid {pid}"),
                (_, Some(tag)) => format!("tag {tag:?}"),
                _ => String::new(),
            };
            RpcError::new(Code::NotFound, format!("process with {what} not found"))
        })
    })
}

// ---- handlers ----

fn keepalive() -> EventMessage {
    EventMessage {
        event: Event::Keepalive {},
    }
}

async fn start(State(ctx): State<Ctx>, req: Request) -> Response {
    connect::server_stream(ctx, req, Some(keepalive()), start_call).await
}

async fn start_call(
    ctx: Ctx,
    call: Call,
    req: StartRequest,
) -> Result<Messages<EventMessage>, RpcError> {
    if req.pty.is_some() {
        return Err(RpcError::new(
            Code::Unimplemented,
            "PTY sessions are not supported by sandlot: run commands without a pty",
        ));
    }
    let config = req
        .process
        .ok_or_else(|| RpcError::invalid("StartRequest.process is required"))?;
    check_config(&config)?;
    let sandbox = check_running(&ctx.rt, &call.sandbox).await?;
    // A command is code run in the sandbox: the `execute` gate, as Bash, sized by its
    // command line (what E2B's `commands.run` sends is `bash -l -c <command>`).
    let line = std::iter::once(&config.cmd)
        .chain(&config.args)
        .map(|w| w.len() + 1)
        .sum::<usize>()
        .saturating_sub(1);
    Gate::with_sandbox(&ctx, &call.headers, sandbox).execute(line, Language::Bash)?;
    let proc = register(&call.sandbox, config, req.tag, req.stdin == Some(true))?;
    let (tx, rx) = mpsc::channel(QUEUE);
    proc.state().subs.push(tx);
    let stdin = proc
        .stdin
        .clone()
        .try_lock_owned()
        .map_err(|_| RpcError::new(Code::Internal, "a new command's stdin is taken"))?;
    let note = sandlot_service::Note::current().unwrap_or_default();
    tokio::spawn(
        note.scope(run(
            ctx.rt.clone(),
            call.sandbox.clone(),
            proc.clone(),
            call.deadline,
            stdin,
        ))
        .in_current_span(),
    );
    Ok(events(proc.pid, rx))
}

/// The stream a client reads: the start event, then the command's events until its end.
fn events(pid: u32, rx: mpsc::Receiver<Event>) -> Messages<EventMessage> {
    let rest = futures::stream::unfold(
        rx,
        |mut rx| async move { rx.recv().await.map(|ev| (ev, rx)) },
    );
    futures::stream::once(async move { Event::Start { pid } })
        .chain(rest)
        .map(|event| Ok(EventMessage { event }))
        .boxed()
}

/// Refuses a sandbox that does not exist or has ended before anything is registered; the
/// sandbox otherwise.
async fn check_running(rt: &Runtime, id: &str) -> Result<Sandbox, RpcError> {
    use sandlot_types::SandboxState as S;
    let sb = rt.get_sandbox(id).await?;
    match sb.state {
        S::Failed => Err(RpcError::new(
            Code::FailedPrecondition,
            format!("sandbox {id} has failed; commands are refused"),
        )),
        S::Running | S::Stopped | S::Paused => Ok(sb),
        _ => Err(RpcError::new(
            Code::NotFound,
            format!("sandbox {id} has ended"),
        )),
    }
}

async fn connect_to(State(ctx): State<Ctx>, req: Request) -> Response {
    connect::server_stream(
        ctx,
        req,
        Some(keepalive()),
        |_ctx, call: Call, req: Selected| async move {
            let proc = find(&call.sandbox, req.process.as_ref())?;
            let (tx, rx) = mpsc::channel(QUEUE);
            {
                let mut st = proc.state();
                if st.subs.len() >= MAX_SUBSCRIBERS {
                    return Err(RpcError::new(
                        Code::ResourceExhausted,
                        format!("process {} already has {MAX_SUBSCRIBERS} streams", proc.pid),
                    ));
                }
                st.subs.push(tx);
            }
            Ok(events(proc.pid, rx))
        },
    )
    .await
}

async fn list(State(ctx): State<Ctx>, req: Request) -> Response {
    connect::unary(
        ctx,
        req,
        |_ctx, call: Call, _: serde_json::Value| async move {
            let processes = with_procs(|all| {
                all.get(&call.sandbox)
                    .map(|sb| {
                        sb.procs
                            .values()
                            .map(|p| ProcessInfo {
                                config: p.config.clone(),
                                pid: p.pid,
                                tag: p.tag.clone(),
                            })
                            .collect()
                    })
                    .unwrap_or_default()
            });
            Ok(ListResponse { processes })
        },
    )
    .await
}

async fn send_signal(State(ctx): State<Ctx>, req: Request) -> Response {
    connect::unary(
        ctx,
        req,
        |_ctx, call: Call, req: SendSignalRequest| async move {
            let sig = match req.signal.as_ref() {
                Some(serde_json::Value::String(s)) if s == "SIGNAL_SIGKILL" => SIGKILL,
                Some(serde_json::Value::String(s)) if s == "SIGNAL_SIGTERM" => SIGTERM,
                Some(serde_json::Value::Number(n)) if n.as_u64() == Some(9) => SIGKILL,
                Some(serde_json::Value::Number(n)) if n.as_u64() == Some(15) => SIGTERM,
                other => {
                    return Err(RpcError::invalid(format!(
                        "signal {other:?} is not one of SIGNAL_SIGKILL, SIGNAL_SIGTERM"
                    )))
                }
            };
            let proc = find(&call.sandbox, req.process.as_ref())?;
            unregister(&call.sandbox, proc.pid);
            proc.signal(sig).await;
            Ok(Empty {})
        },
    )
    .await
}

/// The stdin of a command that was started with one.
async fn stdin_of(call: &Call, sel: Option<&Selector>) -> Result<Arc<Proc>, RpcError> {
    let proc = find(&call.sandbox, sel)?;
    if !proc.wants_stdin {
        return Err(RpcError::new(
            Code::FailedPrecondition,
            format!(
                "process {} was started without stdin (start it with stdin=True)",
                proc.pid
            ),
        ));
    }
    Ok(proc)
}

async fn send_input(State(ctx): State<Ctx>, req: Request) -> Response {
    connect::unary(
        ctx,
        req,
        |_ctx, call: Call, req: SendInputRequest| async move {
            let proc = stdin_of(&call, req.process.as_ref()).await?;
            let input = req
                .input
                .ok_or_else(|| RpcError::invalid("SendInputRequest.input is required"))?;
            if input.pty.is_some() {
                return Err(RpcError::new(
                    Code::Unimplemented,
                    "PTY sessions are not supported by sandlot",
                ));
            }
            let bytes = unbase64(input.stdin.as_deref().unwrap_or(""))
                .ok_or_else(|| RpcError::invalid("input.stdin is not valid base64"))?;
            let mut stdin = proc.stdin.lock().await;
            let Some(w) = stdin.as_mut() else {
                return Err(RpcError::new(
                    Code::FailedPrecondition,
                    format!("the stdin of process {} is closed", proc.pid),
                ));
            };
            match tokio::time::timeout(INPUT_WAIT, w.write_all(&bytes)).await {
                Ok(Ok(())) => Ok(Empty {}),
                Ok(Err(e)) => Err(RpcError::new(
                    Code::FailedPrecondition,
                    format!("the stdin of process {} cannot be written: {e}", proc.pid),
                )),
                Err(_) => Err(RpcError::new(
                    Code::DeadlineExceeded,
                    format!(
                        "process {} did not read its stdin for {} s",
                        proc.pid,
                        INPUT_WAIT.as_secs()
                    ),
                )),
            }
        },
    )
    .await
}

async fn close_stdin(State(ctx): State<Ctx>, req: Request) -> Response {
    connect::unary(ctx, req, |_ctx, call: Call, req: Selected| async move {
        let proc = stdin_of(&call, req.process.as_ref()).await?;
        proc.stdin.lock().await.take();
        Ok(Empty {})
    })
    .await
}

async fn stream_input(State(ctx): State<Ctx>, req: Request) -> Response {
    // A client-streaming call: answered as a stream whose end carries the error, which is
    // how Connect clients read the answer of any streaming call.
    connect::unimplemented_stream(
        ctx,
        req,
        "StreamInput is not supported by sandlot: send stdin with SendInput",
    )
    .await
}

async fn update(State(ctx): State<Ctx>, req: Request) -> Response {
    connect::unimplemented_unary(
        ctx,
        req,
        "PTY sessions are not supported by sandlot, so there is nothing to resize",
    )
    .await
}

// ---- running one command ----

/// Standard base64 with padding, as proto3 JSON writes `bytes`. Written here (a few lines
/// each way) rather than adding a dependency for two small functions.
fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> shift) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes standard (or URL-safe) base64, padded or not; `None` for anything else.
fn unbase64(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' | b'-' => Some(62),
        b'/' | b'_' => Some(63),
        _ => None,
    };
    let s = s.trim_end_matches('=');
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    for chunk in s.as_bytes().chunks(4) {
        if chunk.len() == 1 {
            return None;
        }
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= u32::from(val(c)?) << (18 - 6 * i);
        }
        for i in 0..chunk.len() - 1 {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    Some(out)
}

/// Single-quotes a word for Bash.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Refuses what cannot be a command: nothing to run, NUL bytes, bad variable names, too much.
fn check_config(c: &ProcessConfig) -> Result<(), RpcError> {
    if c.cmd.is_empty() {
        return Err(RpcError::invalid("ProcessConfig.cmd is empty"));
    }
    if c.args.len() > MAX_ARGS || c.envs.len() > MAX_ENVS {
        return Err(RpcError::invalid(format!(
            "at most {MAX_ARGS} arguments and {MAX_ENVS} environment variables"
        )));
    }
    let all = std::iter::once(&c.cmd)
        .chain(&c.args)
        .chain(c.envs.keys())
        .chain(c.envs.values());
    if all.clone().any(|w| w.contains('\0')) || c.cwd.as_deref().is_some_and(|d| d.contains('\0')) {
        return Err(RpcError::invalid("the command contains a NUL byte"));
    }
    for k in c.envs.keys() {
        let ok = !k.is_empty()
            && !k.as_bytes()[0].is_ascii_digit()
            && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !ok {
            return Err(RpcError::invalid(format!(
                "{k:?} is not a valid environment variable name"
            )));
        }
    }
    Ok(())
}

/// What the wrapper runs (its `$0` is `sandlot-command`, `$1` the cwd, the rest the command):
/// its pid on fd 3, the program with fd 3 closed, its exit status on fd 3.
const WRAPPER: &str = r#"echo "p $$" >&3; cd -- "$1" || { echo "x 1" >&3; exit 1; }; shift; "$@" 3>&-; echo "x $?" >&3"#;

/// The launch cell (see the module's doc). The subshell opens the pipes itself (`exec`
/// redirections) before it forks the wrapper, so they are open by the time the cell ends and
/// the host lets go of its keeper ends. Setsid and bash by absolute path: the command's own
/// `PATH` (an env of the request) applies to the command, not to the launch.
fn command_cell(c: &ProcessConfig, paths: &CommandPaths) -> String {
    let cwd = crate::filesystem::command_dir(c.cwd.as_deref());
    let stdin = paths.stdin.as_deref().unwrap_or("/dev/null");
    let mut cell = format!(
        "(\nexec 4<{} >{} 2>{} 3>{} || exit 1\n",
        quote(stdin),
        quote(&paths.stdout),
        quote(&paths.stderr),
        quote(&paths.status)
    );
    for (k, v) in &c.envs {
        cell.push_str(&format!("export {}\n", quote(&format!("{k}={v}"))));
    }
    cell.push_str(&format!(
        "/usr/bin/setsid /bin/bash -c {} sandlot-command {}",
        quote(WRAPPER),
        quote(&cwd)
    ));
    for w in std::iter::once(&c.cmd).chain(&c.args) {
        cell.push(' ');
        cell.push_str(&quote(w));
    }
    // Stdin through fd 4: without job control an asynchronous command's stdin is /dev/null
    // unless redirected on the command itself.
    cell.push_str(" <&4 4<&- &\n)\n");
    cell
}

type StdinGuard = tokio::sync::OwnedMutexGuard<Option<pipe::Sender>>;

/// Runs a registered command to its end (see the module's doc), feeding its streams.
async fn run(
    rt: Runtime,
    sandbox: String,
    proc: Arc<Proc>,
    deadline: Option<tokio::time::Instant>,
    stdin: StdinGuard,
) {
    let end = match launch_and_tail(&rt, &sandbox, &proc, deadline, stdin).await {
        Ok(end) => end,
        Err(e) => End {
            exit_code: -1,
            exited: false,
            status: "error".into(),
            error: Some(e.message),
        },
    };
    unregister(&sandbox, proc.pid);
    proc.stdin.lock().await.take();
    proc.finish(end);
}

async fn launch_and_tail(
    rt: &Runtime,
    sandbox: &str,
    proc: &Arc<Proc>,
    deadline: Option<tokio::time::Instant>,
    mut stdin_guard: StdinGuard,
) -> Result<End, RpcError> {
    // Unique per command and server run, so names a sandbox made earlier are not in the way.
    let name = format!("{}-{}", proc.pid, nonce());
    let CommandPipes {
        stdout,
        stderr,
        status,
        stdin,
        paths,
        control,
    } = rt.command_pipes(sandbox, &name, proc.wants_stdin).await?;
    let control = Arc::new(control);
    let _ = proc.control.set(control.clone());
    *stdin_guard = stdin;
    let launch = launch(rt, sandbox, command_cell(&proc.config, &paths)).await;
    control.launched();
    drop(stdin_guard);
    let failed = match launch {
        Ok(r) if r.exit_code == Some(0) => None,
        Ok(r) => Some(format!(
            "the command could not be started ({:?}, exit code {:?}): {}{}",
            r.end_state,
            r.exit_code,
            r.stderr.trim(),
            r.error
                .map(|e| format!(" {}: {}", e.name, e.value))
                .unwrap_or_default()
        )),
        Err(e) => Some(format!(
            "the command could not be started: {}",
            RpcError::from(e).message
        )),
    };
    let end = tail(proc, &control, [stdout, stderr], status, deadline, failed).await;
    control.remove_names().await;
    Ok(end)
}

/// Runs the launch cell as a Bash execution.
async fn launch(
    rt: &Runtime,
    sandbox: &str,
    code: String,
) -> Result<sandlot_types::ExecutionResult, RuntimeError> {
    let mut timeout = LAUNCH_TIMEOUT;
    loop {
        let req = ExecuteRequest {
            code: code.clone(),
            language: Language::Bash,
            timeout: Some(timeout),
            stream: false,
            context: None,
        };
        match rt.execute(sandbox, req, None).await {
            Err(RuntimeError::BadTimeout { max, .. }) if timeout > max && max > 0.0 => {
                timeout = max;
            }
            r => return r,
        }
    }
}

/// A few random hex digits.
fn nonce() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    format!("{:012x}", h.finish() & 0xffff_ffff_ffff)
}

/// What the wrapper said on the status channel: its pid, then its exit status.
#[derive(Debug, Default, PartialEq)]
struct Status {
    leader: Option<i32>,
    exit: Option<i32>,
}

fn parse_status(text: &[u8]) -> Status {
    let mut st = Status::default();
    // Only complete lines count: a number cut short is not the number.
    let complete = match text.iter().rposition(|&b| b == b'\n') {
        Some(at) => &text[..at],
        None => return st,
    };
    for line in String::from_utf8_lossy(complete).lines() {
        match line.split_once(' ') {
            Some(("p", n)) if st.leader.is_none() => {
                st.leader = n.parse().ok().filter(|&p: &i32| p > 1);
            }
            Some(("x", n)) if st.exit.is_none() => st.exit = n.parse().ok(),
            _ => {}
        }
    }
    st
}

/// Reads the command's output into its streams until its wrapper has exited, then builds its
/// end. `failed` says why the launch failed, if it did.
async fn tail(
    proc: &Proc,
    control: &CommandControl,
    [mut out, mut err]: [pipe::Receiver; 2],
    mut status: pipe::Receiver,
    deadline: Option<tokio::time::Instant>,
    failed: Option<String>,
) -> End {
    let mut obuf = vec![0u8; CHUNK];
    let mut ebuf = vec![0u8; CHUNK];
    let mut sbuf = [0u8; 64];
    let mut said: Vec<u8> = Vec::new();
    let (mut out_open, mut err_open) = (true, true);
    let mut timed_out = false;
    let far = tokio::time::Instant::now() + Duration::from_secs(100 * 365 * 86400);
    let sleep = tokio::time::sleep_until(deadline.unwrap_or(far));
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            r = out.read(&mut obuf), if out_open => match r {
                Ok(n) if n > 0 => proc.emit(Event::Data(Data::Stdout(base64(&obuf[..n])))).await,
                _ => out_open = false,
            },
            r = err.read(&mut ebuf), if err_open => match r {
                Ok(n) if n > 0 => proc.emit(Event::Data(Data::Stderr(base64(&ebuf[..n])))).await,
                _ => err_open = false,
            },
            r = status.read(&mut sbuf) => match r {
                Ok(n) if n > 0 => {
                    let room = MAX_STATUS.saturating_sub(said.len()).min(n);
                    said.extend_from_slice(&sbuf[..room]);
                    let leader = parse_status(&said).leader;
                    let kill = {
                        let mut st = proc.state();
                        let new = st.leader.is_none() && leader.is_some();
                        st.leader = leader;
                        new.then_some(st.killed).flatten()
                    };
                    if let (Some(sig), Some(leader)) = (kill, leader) {
                        control.signal_group(leader, sig).await;
                    }
                }
                _ => break,
            },
            _ = &mut sleep, if !timed_out => {
                timed_out = true;
                proc.signal(SIGKILL).await;
            }
        }
    }
    // The wrapper has exited: what the command wrote is in the pipes; take it, waiting a
    // moment for writes in flight, but not for processes it left behind.
    let grace = tokio::time::sleep(DRAIN_GRACE);
    tokio::pin!(grace);
    while out_open || err_open {
        tokio::select! {
            r = out.read(&mut obuf), if out_open => match r {
                Ok(n) if n > 0 => proc.emit(Event::Data(Data::Stdout(base64(&obuf[..n])))).await,
                _ => out_open = false,
            },
            r = err.read(&mut ebuf), if err_open => match r {
                Ok(n) if n > 0 => proc.emit(Event::Data(Data::Stderr(base64(&ebuf[..n])))).await,
                _ => err_open = false,
            },
            _ = &mut grace => break,
        }
    }
    let said = parse_status(&said);
    let killed = proc.state().killed;
    end_of(said, killed, timed_out, failed, control.processes_gone())
}

/// The end event of a finished command, in envd's terms (Go's `ProcessState` wording).
fn end_of(
    said: Status,
    killed: Option<i32>,
    timed_out: bool,
    failed: Option<String>,
    processes_gone: bool,
) -> End {
    let signalled = |status: &str, error: Option<String>| End {
        exit_code: -1,
        exited: false,
        status: status.into(),
        error,
    };
    if timed_out {
        return signalled(
            "signal: killed",
            Some("the command ran past its timeout and was stopped".into()),
        );
    }
    match (killed, said.exit) {
        (Some(SIGTERM), _) => return signalled("signal: terminated", None),
        (Some(_), _) => return signalled("signal: killed", None),
        (None, Some(code)) => {
            return End {
                exit_code: code,
                exited: true,
                status: format!("exit status {code}"),
                error: None,
            }
        }
        (None, None) => {}
    }
    if said.leader.is_none() {
        return End {
            exit_code: -1,
            exited: false,
            status: "error".into(),
            error: Some(failed.unwrap_or_else(|| "the command could not be started".into())),
        };
    }
    if processes_gone {
        return signalled(
            "signal: killed",
            Some("the sandbox's processes ended (restarted, paused or stopped)".into()),
        );
    }
    signalled("signal: killed", None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_rfc_vectors() {
        let cases = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (raw, enc) in cases {
            assert_eq!(base64(raw.as_bytes()), enc);
            assert_eq!(unbase64(enc).unwrap(), raw.as_bytes());
            assert_eq!(unbase64(enc.trim_end_matches('=')).unwrap(), raw.as_bytes());
        }
        assert_eq!(unbase64("Z"), None);
        assert_eq!(unbase64("Zm9v!"), None);
    }

    #[test]
    fn quoting_survives_quotes() {
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
    }

    #[test]
    fn the_cell_launches_the_program_detached() {
        let c = ProcessConfig {
            cmd: "/bin/bash".into(),
            args: vec!["-l".into(), "-c".into(), "echo 'hi'; cd /".into()],
            envs: BTreeMap::from([("FOO".into(), "a b".into())]),
            cwd: None,
        };
        let paths = CommandPaths {
            stdout: "/tmp/.e2b-proc/1.out".into(),
            stderr: "/tmp/.e2b-proc/1.err".into(),
            status: "/tmp/.e2b-proc/1.st".into(),
            stdin: None,
        };
        let cell = command_cell(&c, &paths);
        assert_eq!(
            cell,
            format!(
                "(\nexec 4<'/dev/null' >'/tmp/.e2b-proc/1.out' 2>'/tmp/.e2b-proc/1.err' 3>'/tmp/.e2b-proc/1.st' || exit 1\nexport 'FOO=a b'\n/usr/bin/setsid /bin/bash -c {} sandlot-command '/workspace' '/bin/bash' '-l' '-c' 'echo '\\''hi'\\''; cd /' <&4 4<&- &\n)\n",
                quote(WRAPPER)
            )
        );
    }

    #[test]
    fn bad_commands_are_refused() {
        let mut c = ProcessConfig {
            cmd: "ls".into(),
            ..Default::default()
        };
        c.envs.insert("A=B".into(), "x".into());
        assert!(check_config(&c).is_err());
        c.envs.clear();
        c.args.push("a\0b".into());
        assert!(check_config(&c).is_err());
        c.args.clear();
        c.cmd.clear();
        assert!(check_config(&c).is_err());
    }

    #[test]
    fn the_status_channel_is_read_warily() {
        assert_eq!(parse_status(b""), Status::default());
        assert_eq!(parse_status(b"p 12"), Status::default(), "no complete line");
        assert_eq!(
            parse_status(b"p 12\nx 3\n"),
            Status {
                leader: Some(12),
                exit: Some(3)
            }
        );
        assert_eq!(
            parse_status(b"p 1\n").leader,
            None,
            "never the sandbox's init"
        );
        assert_eq!(parse_status(b"p -5\nx 99999999999\n"), Status::default());
        assert_eq!(
            parse_status(b"p 7\np 8\n").leader,
            Some(7),
            "the first says"
        );
    }

    #[test]
    fn ends_read_like_envd_s() {
        let exited = Status {
            leader: Some(5),
            exit: Some(2),
        };
        let e = end_of(exited, None, false, None, false);
        assert_eq!((e.exit_code, e.status.as_str()), (2, "exit status 2"));
        let e = end_of(Status::default(), None, false, Some("no".into()), false);
        assert_eq!(e.error.as_deref(), Some("no"));
        let gone = Status {
            leader: Some(5),
            exit: None,
        };
        let e = end_of(gone, Some(SIGKILL), false, None, false);
        assert_eq!(e.status, "signal: killed");
    }

    #[test]
    fn events_serialize_as_envd_json() {
        let m = EventMessage {
            event: Event::End(End {
                exit_code: 1,
                exited: true,
                status: "exit status 1".into(),
                error: None,
            }),
        };
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            serde_json::json!({"event": {"end": {"exitCode": 1, "exited": true, "status": "exit status 1"}}})
        );
        let m = EventMessage {
            event: Event::Data(Data::Stdout("aGk=".into())),
        };
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            serde_json::json!({"event": {"data": {"stdout": "aGk="}}})
        );
        let k = serde_json::to_value(keepalive()).unwrap();
        assert_eq!(k, serde_json::json!({"event": {"keepalive": {}}}));
    }
}
