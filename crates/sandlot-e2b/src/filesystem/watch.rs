//! envd's directory watches: `WatchDir` (a server stream of events) and the polling watchers
//! the synchronous SDKs use (`CreateWatcher`, `GetWatcherEvents`, `RemoveWatcher`), over the
//! runtime's inotify watches (`sandlot_runtime::e2b::watch`: the directory is opened beneath
//! the workspace's fd, so a watch never lands outside it).
//!
//! Bounds and lifetime: a sandbox has at most [`MAX_WATCHES`] watches (streams and polling
//! watchers together; more: `resource_exhausted`). A polling watcher is its sandbox's only
//! (its id is random and checked against the caller's sandbox), holds what the kernel queued
//! since the last poll (the kernel bounds that), and ends when removed, when the sandbox is
//! killed through E2B, when a poll finds the sandbox no longer running, or when a sweep
//! (every [`SWEEP`]) finds it paused, ended or unpolled for [`IDLE`]. A stream ends when the
//! client goes away, the directory is removed, or the sandbox stops running (checked every
//! [`LIVENESS`]). The polling watchers' queues are read at each poll, so a write the client
//! made before polling is in the answer.

use super::{entry, workspace_path, EntryInfo};
use crate::connect::{self, Call, Code, Messages, RpcError};
use crate::gates::Gate;
use crate::Ctx;
use axum::extract::{Request, State};
use axum::response::Response;
use futures::StreamExt;
use sandlot_runtime::e2b::watch::{DirWatch, WatchEvent, WatchEventKind};
use sandlot_types::SandboxState;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Most watches one sandbox may hold at once.
pub(crate) const MAX_WATCHES: usize = 16;
/// How often a stream checks that its sandbox still runs.
const LIVENESS: Duration = Duration::from_secs(1);
/// How often polling watchers are swept, and how long one may go unpolled.
const SWEEP: Duration = Duration::from_secs(5);
const IDLE: Duration = Duration::from_secs(3600);

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WatchRequest {
    #[serde(default)]
    path: String,
    #[serde(default)]
    recursive: bool,
    #[serde(default)]
    include_entry: bool,
    /// envd refuses network mounts unless asked; a workspace is never one, so either way.
    #[serde(default)]
    #[allow(dead_code)]
    allow_network_mounts: bool,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WatcherRequest {
    #[serde(default)]
    watcher_id: String,
}

/// `filesystem.FilesystemEvent`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FsEvent {
    name: String,
    r#type: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    entry: Option<EntryInfo>,
}

/// `filesystem.WatchDirResponse`: one of its events.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum WatchDirResponse {
    Start {},
    Filesystem(Box<FsEvent>),
    Keepalive {},
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct CreateWatcherResponse {
    watcher_id: String,
}

#[derive(Debug, Serialize)]
struct EventsResponse {
    events: Vec<FsEvent>,
}

#[derive(Debug, Serialize)]
struct Empty {}

fn type_name(kind: WatchEventKind) -> &'static str {
    match kind {
        WatchEventKind::Create => "EVENT_TYPE_CREATE",
        WatchEventKind::Write => "EVENT_TYPE_WRITE",
        WatchEventKind::Remove => "EVENT_TYPE_REMOVE",
        WatchEventKind::Rename => "EVENT_TYPE_RENAME",
        WatchEventKind::Chmod => "EVENT_TYPE_CHMOD",
    }
}

/// A polling watcher.
struct Polling {
    sandbox: String,
    /// The watched directory, relative to the workspace.
    root: String,
    include_entry: bool,
    watch: tokio::sync::Mutex<DirWatch>,
    last_poll: Mutex<Instant>,
    _slot: Slot,
}

/// Every sandbox's watches: the polling watchers by id, and how many watches each sandbox
/// holds.
#[derive(Default)]
pub(crate) struct Watches {
    polling: Mutex<HashMap<String, Arc<Polling>>>,
    counts: Arc<Mutex<HashMap<String, usize>>>,
    sweeping: std::sync::atomic::AtomicBool,
}

/// One of a sandbox's watches, counted while it lives.
#[derive(Debug)]
struct Slot {
    counts: Arc<Mutex<HashMap<String, usize>>>,
    sandbox: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = c.get_mut(&self.sandbox) {
            *n -= 1;
            if *n == 0 {
                c.remove(&self.sandbox);
            }
        }
    }
}

impl Watches {
    /// A slot for one more watch of `sandbox`, or `resource_exhausted` past the bound.
    fn slot(&self, sandbox: &str) -> Result<Slot, RpcError> {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let n = c.entry(sandbox.to_owned()).or_insert(0);
        if *n >= MAX_WATCHES {
            return Err(RpcError::new(
                Code::ResourceExhausted,
                format!(
                    "a sandbox may watch at most {MAX_WATCHES} directories at once: stop one first"
                ),
            ));
        }
        *n += 1;
        Ok(Slot {
            counts: self.counts.clone(),
            sandbox: sandbox.to_owned(),
        })
    }

    fn get(&self, id: &str) -> Option<Arc<Polling>> {
        self.polling
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    fn remove(&self, id: &str) -> Option<Arc<Polling>> {
        self.polling
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id)
    }

    /// Drops every polling watcher of `sandbox` (it was killed).
    pub(crate) fn forget(&self, sandbox: &str) {
        self.polling
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|_, w| w.sandbox != sandbox);
    }

    /// How many watches `sandbox` holds.
    #[cfg(test)]
    fn count(&self, sandbox: &str) -> usize {
        self.counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(sandbox)
            .copied()
            .unwrap_or(0)
    }
}

/// Whether watches of sandbox `id` may go on: it is running.
async fn running(ctx: &Ctx, id: &str) -> bool {
    matches!(ctx.rt.get_sandbox(id).await, Ok(s) if s.state == SandboxState::Running)
}

/// Starts the sweep of polling watchers, once per server.
fn sweep(ctx: &Ctx) {
    use std::sync::atomic::Ordering;
    if ctx.watches.sweeping.swap(true, Ordering::SeqCst) {
        return;
    }
    let ctx = ctx.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SWEEP);
        loop {
            tick.tick().await;
            let all: Vec<(String, Arc<Polling>)> = ctx
                .watches
                .polling
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            for (id, w) in all {
                let idle = w
                    .last_poll
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .elapsed()
                    > IDLE;
                if idle || !running(&ctx, &w.sandbox).await {
                    ctx.watches.remove(&id);
                }
            }
        }
    });
}

/// Opens a watch for `call` after its checks: the path in the workspace, the `read_file`
/// gate, the sandbox running, a free slot.
async fn open(
    ctx: &Ctx,
    call: &Call,
    req: &WatchRequest,
) -> Result<(DirWatch, String, Slot), RpcError> {
    let rel = workspace_path(&req.path).map_err(|f| RpcError::invalid(f.message))?;
    Gate::open(ctx, &call.headers, &call.sandbox)
        .await?
        .read(&rel)?;
    if !running(ctx, &call.sandbox).await {
        return Err(RpcError::new(
            Code::FailedPrecondition,
            format!(
                "sandbox {} is not running: directories are watched while it runs",
                call.sandbox
            ),
        ));
    }
    let slot = ctx.watches.slot(&call.sandbox)?;
    let watch = ctx.rt.watch_dir(&call.sandbox, &rel, req.recursive).await?;
    Ok((watch, rel, slot))
}

/// The envd events of `events`, with their entries when asked (best effort: an entry gone
/// since has none).
async fn to_envd(
    ctx: &Ctx,
    sandbox: &str,
    root: &str,
    include_entry: bool,
    events: Vec<WatchEvent>,
) -> Vec<FsEvent> {
    let mut out = Vec::with_capacity(events.len());
    for e in events {
        let entry = if include_entry {
            let rel = if root.is_empty() {
                e.name.clone()
            } else {
                format!("{root}/{}", e.name)
            };
            match ctx.rt.stat_path(sandbox, &rel).await {
                Ok(fe) => entry(ctx, sandbox, fe).await.ok(),
                Err(_) => None,
            }
        } else {
            None
        };
        out.push(FsEvent {
            name: e.name,
            r#type: type_name(e.kind),
            entry,
        });
    }
    out
}

pub(crate) async fn watch_dir(State(ctx): State<Ctx>, req: Request) -> Response {
    connect::server_stream(
        ctx,
        req,
        Some(WatchDirResponse::Keepalive {}),
        |ctx, call: Call, req: WatchRequest| async move {
            let (mut watch, root, slot) = open(&ctx, &call, &req).await?;
            let sandbox = call.sandbox.clone();
            let include = req.include_entry;
            let s = async_stream::stream! {
                let _slot = slot;
                yield Ok(WatchDirResponse::Start {});
                let mut alive = tokio::time::interval(LIVENESS);
                alive.tick().await;
                loop {
                    tokio::select! {
                        events = watch.next() => {
                            if events.is_empty() && watch.ended() {
                                return;
                            }
                            for e in to_envd(&ctx, &sandbox, &root, include, events).await {
                                yield Ok(WatchDirResponse::Filesystem(Box::new(e)));
                            }
                        }
                        _ = alive.tick() => {
                            if !running(&ctx, &sandbox).await {
                                yield Err(RpcError::new(
                                    Code::Unavailable,
                                    format!("the watch ended: sandbox {sandbox} is not running"),
                                ));
                                return;
                            }
                        }
                    }
                }
            };
            Ok::<Messages<WatchDirResponse>, RpcError>(s.boxed())
        },
    )
    .await
}

pub(crate) async fn create_watcher(State(ctx): State<Ctx>, req: Request) -> Response {
    connect::unary(ctx, req, |ctx, call: Call, req: WatchRequest| async move {
        let (watch, root, slot) = open(&ctx, &call, &req).await?;
        sweep(&ctx);
        let id = sandlot_runtime::new_id("w");
        let w = Arc::new(Polling {
            sandbox: call.sandbox.clone(),
            root,
            include_entry: req.include_entry,
            watch: tokio::sync::Mutex::new(watch),
            last_poll: Mutex::new(Instant::now()),
            _slot: slot,
        });
        ctx.watches
            .polling
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone(), w);
        Ok(CreateWatcherResponse { watcher_id: id })
    })
    .await
}

/// The polling watcher `id` of the caller's sandbox (another sandbox's is not found).
fn watcher_of(ctx: &Ctx, call: &Call, id: &str) -> Result<Arc<Polling>, RpcError> {
    ctx.watches
        .get(id)
        .filter(|w| w.sandbox == call.sandbox)
        .ok_or_else(|| RpcError::new(Code::NotFound, format!("watcher {id:?} not found")))
}

pub(crate) async fn get_watcher_events(State(ctx): State<Ctx>, req: Request) -> Response {
    connect::unary(
        ctx,
        req,
        |ctx, call: Call, req: WatcherRequest| async move {
            let w = watcher_of(&ctx, &call, &req.watcher_id)?;
            if !running(&ctx, &call.sandbox).await {
                ctx.watches.remove(&req.watcher_id);
                return Err(RpcError::new(
                    Code::NotFound,
                    format!(
                        "watcher {:?} ended: sandbox {} is not running",
                        req.watcher_id, call.sandbox
                    ),
                ));
            }
            *w.last_poll.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
            let events = w.watch.lock().await.read();
            let events = to_envd(&ctx, &w.sandbox, &w.root, w.include_entry, events).await;
            Ok(EventsResponse { events })
        },
    )
    .await
}

pub(crate) async fn remove_watcher(State(ctx): State<Ctx>, req: Request) -> Response {
    connect::unary(
        ctx,
        req,
        |ctx, call: Call, req: WatcherRequest| async move {
            watcher_of(&ctx, &call, &req.watcher_id)?;
            ctx.watches.remove(&req.watcher_id);
            Ok(Empty {})
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_bounded_per_sandbox_and_freed_on_drop() {
        let w = Watches::default();
        let slots: Vec<Slot> = (0..MAX_WATCHES).map(|_| w.slot("a").unwrap()).collect();
        assert_eq!(w.slot("a").unwrap_err().code, Code::ResourceExhausted);
        // Another sandbox's bound is its own.
        let _b = w.slot("b").unwrap();
        drop(slots);
        assert_eq!(w.count("a"), 0);
        assert!(w.slot("a").is_ok());
    }

    #[test]
    fn responses_are_envd_s_json() {
        let v = serde_json::to_value(WatchDirResponse::Start {}).unwrap();
        assert_eq!(v, serde_json::json!({"start": {}}));
        let e = FsEvent {
            name: "a/b".into(),
            r#type: type_name(WatchEventKind::Write),
            entry: None,
        };
        let v = serde_json::to_value(WatchDirResponse::Filesystem(Box::new(e))).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"filesystem": {"name": "a/b", "type": "EVENT_TYPE_WRITE"}})
        );
        let v = serde_json::to_value(CreateWatcherResponse {
            watcher_id: "w1".into(),
        })
        .unwrap();
        assert_eq!(v, serde_json::json!({"watcherId": "w1"}));
    }
}
