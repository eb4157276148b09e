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
//! and opened (non-blocking, checked: `sandlot-runtime/src/e2b/proctail.rs`) before the cell
//! ran, so the server reads the command's stdout and stderr as it writes them (epoll, no polling),
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
//! A PTY session (`Start` with `pty`, what `sandbox.pty.create` sends: `bash -i -l`) runs the
//! same way on a new pseudo-terminal of the sandbox's own devpts instance instead of pipes:
//! the host holds its master (`proctail`), the cell opens `/dev/pts/N` as the command's
//! stdin, stdout and stderr and `setsid --ctty` makes it the session's controlling terminal.
//! Its output streams as `pty` data; `SendInput` with `pty` bytes writes the master, `Update`
//! sets its size. PTY input is bounded: at most [`MAX_PTY_INPUT`] bytes per message and
//! [`MAX_PTY_INFLIGHT`] messages waiting per terminal; a terminal is at most
//! [`MAX_PTY_DIM`] columns or rows; a sandbox has at most [`MAX_PTYS`] PTY sessions (and its
//! devpts instance at most `sandlot_jail::mounts::MAX_PTYS` terminals in all). A kill signals
//! the terminal's whole session (an interactive shell puts its jobs in groups of their own).
//!
//! A command whose sandbox is killed or deleted while it runs ends its streams with an
//! `unavailable` error (not an end event), the answer of envd's proxy when the sandbox under
//! a stream goes away: the SDKs then probe `/health`, find the sandbox gone, and raise their
//! sandbox-not-running exception.
//!
//! Launches go through the sandbox's command launcher when it has one that runs (see
//! `launch::launcher`): a Bash loop, started once by a launch execution, in a session of its
//! own inside the sandbox, that reads launch cells from a FIFO only the host writes and runs
//! each. So a command starts at once even while a `run_code` cell runs (E2B's `run_code` starts
//! the launcher before its first cell). Without a launcher that runs (it was killed, the
//! sandbox restarted or is paused) the launch is an execution as before, which waits for a
//! running cell.
//!
//! Limits, said plainly (also in the docs): output is streamed, not kept: a stream whose
//! client does not read for [`SLOW_CLIENT`] is dropped (the command goes on), and output
//! written while no stream is attached is discarded. A wrapper killed by anything but
//! `SendSignal` (say `kill -9` from a cell) ends with `signal: killed`; a program killed by a
//! signal while its wrapper lives ends with `exit status 128+N`, as a shell reports it.
//! `StreamInput` (a client stream) writes each `data` message as `SendInput` would, in order;
//! the `user` is the sandbox's one user.
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
use sandlot_runtime::e2b::proctail::{
    CommandControl, CommandIo, CommandOutput, CommandPaths, CommandPipes, Launcher, PtyMaster,
};
use sandlot_runtime::{Runtime, RuntimeError};
use sandlot_types::{ExecuteRequest, Language, Sandbox};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::mpsc;
use tracing::Instrument;

mod launch;
use launch::*;

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
/// Most PTY sessions one sandbox may have running or starting (each holds a terminal of the
/// sandbox's devpts instance, which holds at most 32).
const MAX_PTYS: usize = 16;
/// Most bytes of one PTY input message (a paste is split by the client), and most input
/// messages waiting for one terminal: at most 256 KiB of a terminal's input is held here.
const MAX_PTY_INPUT: usize = 64 << 10;
const MAX_PTY_INFLIGHT: usize = 4;
/// The largest terminal, in columns and in rows (a terminal's size is two `u16`s; sizes past
/// this are mistakes, and programs allocate screens by it).
const MAX_PTY_DIM: u32 = 4096;
/// How long a launcher may take to start and report, and a launch cell to be queued to it.
const LAUNCHER_START: Duration = Duration::from_secs(5);
const LAUNCHER_SEND: Duration = Duration::from_secs(2);
/// How long a command launched through the launcher may take to report its pid before it is
/// taken as not started.
const LAUNCHER_REPORT: Duration = Duration::from_secs(10);
/// How long a command whose processes ended with its sandbox's waits for the sandbox's record
/// to say whether it is gone (see `launch::sandbox_lost`).
const LOST_WAIT: Duration = Duration::from_millis(500);
/// The size of a terminal whose Start gave none.
const DEFAULT_PTY: (u16, u16) = (80, 24);

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

/// envd's `PTY` message: the terminal's size.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PtyConfig {
    #[serde(default)]
    size: Option<PtySize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PtySize {
    #[serde(default)]
    cols: u32,
    #[serde(default)]
    rows: u32,
}

impl PtySize {
    /// Columns and rows, each 1 to [`MAX_PTY_DIM`].
    fn checked(&self) -> Result<(u16, u16), RpcError> {
        let ok = |n: u32| (1..=MAX_PTY_DIM).contains(&n);
        if !ok(self.cols) || !ok(self.rows) {
            return Err(RpcError::invalid(format!(
                "a PTY is 1 to {MAX_PTY_DIM} columns and rows, not {}x{}",
                self.cols, self.rows
            )));
        }
        Ok((self.cols as u16, self.rows as u16))
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct UpdateRequest {
    #[serde(default)]
    process: Option<Selector>,
    #[serde(default)]
    pty: Option<PtyConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StartRequest {
    #[serde(default)]
    process: Option<ProcessConfig>,
    #[serde(default)]
    pty: Option<PtyConfig>,
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

/// `StreamInputRequest`: one of `start` (the process), `data` (input) and `keepalive`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StreamInputRequest {
    #[serde(default)]
    start: Option<Selected>,
    #[serde(default)]
    data: Option<StreamInputData>,
    #[serde(default)]
    keepalive: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StreamInputData {
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
    Start {
        pid: u32,
    },
    Data(Data),
    End(End),
    Keepalive {},
    /// Not sent as an event: the stream ends with this error instead of an end event (the
    /// command's sandbox went away under it, or its terminal or pipes could not be made).
    #[serde(skip)]
    Failed(RpcError),
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Data {
    Stdout(String),
    Stderr(String),
    Pty(String),
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
    /// The terminal's size at the Start, for a PTY session.
    pty: Option<(u16, u16)>,
    /// A PTY session's terminal, once it exists.
    master: OnceLock<Arc<PtyMaster>>,
    /// PTY input messages waiting or being written (see [`MAX_PTY_INFLIGHT`]).
    inflight: AtomicUsize,
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

    /// Sends the end (an `End`, or `Failed`) to every stream and closes them.
    fn finish(&self, end: Event) {
        let subs = std::mem::take(&mut self.state().subs);
        for s in subs {
            let end = end.clone();
            tokio::spawn(async move {
                let _ = s.send_timeout(end, SLOW_CLIENT).await;
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

/// Each sandbox's command launcher (see `launch::launcher`), behind an async lock so one is
/// started at a time; a process global for the reason `PROCS` is.
type LauncherSlot = Arc<tokio::sync::Mutex<Option<Arc<Launcher>>>>;
static LAUNCHERS: Mutex<Option<HashMap<String, LauncherSlot>>> = Mutex::new(None);

/// Starts the sandbox's command launcher now if it has none (E2B's `run_code` calls this
/// before its cell, so a command started while the cell runs does not wait for it).
pub(crate) async fn warm(rt: &Runtime, sandbox: &str) {
    launcher(rt, sandbox).await;
}

fn register(
    sandbox: &str,
    config: ProcessConfig,
    tag: Option<String>,
    wants_stdin: bool,
    pty: Option<(u16, u16)>,
) -> Result<Arc<Proc>, RpcError> {
    with_procs(|all| {
        let sb = all.entry(sandbox.to_owned()).or_default();
        if sb.procs.len() >= MAX_PROCS {
            return Err(RpcError::new(
                Code::ResourceExhausted,
                format!("this sandbox already has {MAX_PROCS} commands running"),
            ));
        }
        if pty.is_some() && sb.procs.values().filter(|p| p.pty.is_some()).count() >= MAX_PTYS {
            return Err(RpcError::new(
                Code::ResourceExhausted,
                format!("this sandbox already has {MAX_PTYS} PTY sessions; kill one first"),
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
            pty,
            master: OnceLock::new(),
            inflight: AtomicUsize::new(0),
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
    let pty = match &req.pty {
        Some(p) => Some(match &p.size {
            Some(size) => size.checked()?,
            None => DEFAULT_PTY,
        }),
        None => None,
    };
    let config = req
        .process
        .ok_or_else(|| RpcError::invalid("StartRequest.process is required"))?;
    check_config(&config)?;
    let sandbox = check_running(&ctx.rt, &call.sandbox).await?;
    // A command is code run in the sandbox: the `execute` gate, as Bash, on its command
    // line (what E2B's `commands.run` sends is `bash -l -c <command>`).
    let line = std::iter::once(&config.cmd)
        .chain(&config.args)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(" ");
    Gate::with_sandbox(&ctx, &call.headers, sandbox)
        .execute(&line, Language::Bash, None)
        .await?;
    // A terminal is the command's stdin: no stdin FIFO beside it.
    let wants_stdin = req.stdin == Some(true) && pty.is_none();
    let proc = register(&call.sandbox, config, req.tag, wants_stdin, pty)?;
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
        .map(|event| match event {
            Event::Failed(e) => Err(e),
            event => Ok(EventMessage { event }),
        })
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
    if proc.pty.is_some() {
        return Err(RpcError::new(
            Code::FailedPrecondition,
            format!(
                "process {} is a PTY session: its input is pty input (pty.send_stdin)",
                proc.pid
            ),
        ));
    }
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
            let input = req
                .input
                .ok_or_else(|| RpcError::invalid("SendInputRequest.input is required"))?;
            write_input(&call, req.process.as_ref(), input).await
        },
    )
    .await
}

/// Writes one `ProcessInput` to the selected process: its stdin, or its PTY's terminal.
async fn write_input(
    call: &Call,
    sel: Option<&Selector>,
    input: ProcessInput,
) -> Result<Empty, RpcError> {
    if let Some(data) = input.pty {
        return pty_input(call, sel, &data).await;
    }
    let proc = stdin_of(call, sel).await?;
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
}

/// Writes input to a PTY session's terminal (bounded: see the module's doc).
async fn pty_input(call: &Call, sel: Option<&Selector>, data: &str) -> Result<Empty, RpcError> {
    // Base64 is 4 characters per 3 bytes: refuse an oversized message before decoding it.
    if data.len() > MAX_PTY_INPUT.div_ceil(3) * 4 {
        return Err(too_much_input());
    }
    let bytes = unbase64(data).ok_or_else(|| RpcError::invalid("input.pty is not valid base64"))?;
    if bytes.len() > MAX_PTY_INPUT {
        return Err(too_much_input());
    }
    let proc = find(&call.sandbox, sel)?;
    if proc.pty.is_none() {
        return Err(RpcError::new(
            Code::FailedPrecondition,
            format!(
                "process {} is not a PTY session: send its input as stdin",
                proc.pid
            ),
        ));
    }
    struct Turn<'a>(&'a AtomicUsize);
    impl Drop for Turn<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::AcqRel);
        }
    }
    if proc.inflight.fetch_add(1, Ordering::AcqRel) >= MAX_PTY_INFLIGHT {
        proc.inflight.fetch_sub(1, Ordering::AcqRel);
        return Err(RpcError::new(
            Code::ResourceExhausted,
            format!(
                "process {} already has {MAX_PTY_INFLIGHT} input messages waiting; wait for them",
                proc.pid
            ),
        ));
    }
    let _turn = Turn(&proc.inflight);
    // The stdin lock: held by the command's task until its launch has run (so the terminal
    // exists), then one writer at a time, in order.
    let write = async {
        let _launched = proc.stdin.lock().await;
        let Some(master) = proc.master.get() else {
            return Err(RpcError::new(
                Code::FailedPrecondition,
                format!("the PTY of process {} is gone", proc.pid),
            ));
        };
        master.write_all(&bytes).await.map_err(|e| {
            RpcError::new(
                Code::FailedPrecondition,
                format!("the PTY of process {} cannot be written: {e}", proc.pid),
            )
        })
    };
    match tokio::time::timeout(INPUT_WAIT, write).await {
        Ok(r) => r.map(|()| Empty {}),
        Err(_) => Err(RpcError::new(
            Code::DeadlineExceeded,
            format!(
                "process {} did not read its PTY input for {} s",
                proc.pid,
                INPUT_WAIT.as_secs()
            ),
        )),
    }
}

fn too_much_input() -> RpcError {
    RpcError::new(
        Code::InvalidArgument,
        format!("PTY input is at most {MAX_PTY_INPUT} bytes per message; split it"),
    )
}

async fn close_stdin(State(ctx): State<Ctx>, req: Request) -> Response {
    connect::unary(ctx, req, |_ctx, call: Call, req: Selected| async move {
        let proc = stdin_of(&call, req.process.as_ref()).await?;
        proc.stdin.lock().await.take();
        Ok(Empty {})
    })
    .await
}

/// `StreamInput`, a client stream: a `start` naming the process, then `data` messages written
/// in order (each as `SendInput` writes it, with its bounds), `keepalive`s ignored; answered
/// once the client ends its stream. A `data` before the `start`, a second `start`, or a
/// message with none of the three ends the call with `invalid_argument`.
async fn stream_input(State(ctx): State<Ctx>, req: Request) -> Response {
    connect::client_stream(
        ctx,
        req,
        |_ctx, call: Call, mut messages: connect::Incoming<StreamInputRequest>| async move {
            let mut target: Option<Selector> = None;
            while let Some(message) = messages.next().await {
                let message = message?;
                match (message.start, message.data, message.keepalive) {
                    (Some(start), None, None) => {
                        if target.is_some() {
                            return Err(RpcError::invalid(
                                "StreamInput takes one start message, first",
                            ));
                        }
                        find(&call.sandbox, start.process.as_ref())?;
                        target = Some(start.process.ok_or_else(|| {
                            RpcError::invalid("StreamInputRequest.start.process is required")
                        })?);
                    }
                    (None, Some(data), None) => {
                        let sel = target.as_ref().ok_or_else(|| {
                            RpcError::invalid("StreamInput starts with a start message")
                        })?;
                        let input = data.input.ok_or_else(|| {
                            RpcError::invalid("StreamInputRequest.data.input is required")
                        })?;
                        write_input(&call, Some(sel), input).await?;
                    }
                    (None, None, Some(_)) => {}
                    _ => {
                        return Err(RpcError::invalid(
                            "a StreamInputRequest holds exactly one of start, data and keepalive",
                        ))
                    }
                }
            }
            Ok(Empty {})
        },
    )
    .await
}

/// Resizes a PTY session's terminal.
async fn update(State(ctx): State<Ctx>, req: Request) -> Response {
    connect::unary(
        ctx,
        req,
        |_ctx, call: Call, req: UpdateRequest| async move {
            let size = req
                .pty
                .and_then(|p| p.size)
                .ok_or_else(|| RpcError::invalid("UpdateRequest.pty.size is required"))?;
            let (cols, rows) = size.checked()?;
            let proc = find(&call.sandbox, req.process.as_ref())?;
            if proc.pty.is_none() {
                return Err(RpcError::new(
                    Code::FailedPrecondition,
                    format!("process {} is not a PTY session: it has no size", proc.pid),
                ));
            }
            let _launched = proc.stdin.lock().await;
            let master = proc.master.get().ok_or_else(|| {
                RpcError::new(
                    Code::FailedPrecondition,
                    format!("the PTY of process {} is gone", proc.pid),
                )
            })?;
            master.resize(cols, rows).map_err(|e| {
                RpcError::new(
                    Code::FailedPrecondition,
                    format!("the PTY of process {} cannot be resized: {e}", proc.pid),
                )
            })?;
            Ok(Empty {})
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn pty_data_serializes_as_envd_json_and_sizes_are_bounded() {
        let m = EventMessage {
            event: Event::Data(Data::Pty("aGk=".into())),
        };
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            serde_json::json!({"event": {"data": {"pty": "aGk="}}})
        );
        let size = |cols, rows| PtySize { cols, rows }.checked();
        assert_eq!(size(80, 24).unwrap(), (80, 24));
        assert_eq!(size(MAX_PTY_DIM, 1).unwrap(), (4096, 1));
        for (c, r) in [(0, 24), (80, 0), (MAX_PTY_DIM + 1, 24), (80, u32::MAX)] {
            assert_eq!(size(c, r).unwrap_err().code, Code::InvalidArgument);
        }
        let req: StartRequest = serde_json::from_str(
            r#"{"process":{"cmd":"/bin/bash"},"pty":{"size":{"cols":100,"rows":30}}}"#,
        )
        .unwrap();
        let size = req.pty.unwrap().size.unwrap();
        assert_eq!((size.cols, size.rows), (100, 30));
    }
}
