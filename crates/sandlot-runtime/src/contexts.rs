//! Code contexts: independent Python namespaces (each with its own Bash session) inside one
//! sandbox, sharing its filesystem and process. The driver holds them; the runtime keeps the
//! list and asks the driver to create, restart and delete them between executions (under the
//! sandbox's execution lock, so they take their turn with executions).
//!
//! Protocol (server → driver): `{"type": "context_create" | "context_restart" |
//! "context_delete", "context": "<id>"}`; the driver answers `{"type": "context_done",
//! "context": "<id>", "ok": bool, "error": "..."}`.

use crate::sandbox::{Live, Pumped};
use crate::util::{new_id, now_rfc3339};
use crate::{Entry, Runtime};
use sandlot_types::{ApiError, Context, ErrorCode, SandboxState};
use std::sync::Arc;
use std::time::Duration;

/// The context every sandbox boots with; executions without a context run in it.
pub(crate) const DEFAULT_CONTEXT: &str = "default";
/// Most contexts one sandbox may have, `default` included.
pub(crate) const MAX_CONTEXTS: usize = 32;
/// How long the driver gets to answer a context request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) fn default_context() -> Context {
    Context {
        id: DEFAULT_CONTEXT.to_string(),
        created_at: now_rfc3339(),
    }
}

fn no_context(sandbox: &str, ctx: &str) -> ApiError {
    ApiError::new(
        ErrorCode::InvalidArgument,
        format!("no context {ctx:?} in sandbox {sandbox}"),
    )
}

impl Live {
    fn context_list(&self) -> Vec<Context> {
        self.contexts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The context an execution asked for (the default one when `None`), if the sandbox has it.
    pub(crate) fn check_context(&self, ctx: Option<&str>) -> Result<String, ApiError> {
        let ctx = ctx.unwrap_or(DEFAULT_CONTEXT);
        if self.context_list().iter().any(|c| c.id == ctx) {
            Ok(ctx.to_string())
        } else {
            Err(no_context(&self.id, ctx))
        }
    }
}

/// Why a context request failed.
enum Failure {
    /// The driver answered no (its message).
    Refused(String),
    /// No answer in time; the sandbox lives on.
    NoAnswer,
    /// The sandbox's processes are gone.
    Died(String),
}

/// Sends one context request and waits for its `context_done`. Must be called with the
/// sandbox's execution lock held. Output and frames arriving meanwhile belong to no execution
/// and are discarded.
async fn ask_driver(live: &Live, kind: &str, ctx: &str) -> Result<(), Failure> {
    let mut events = live.events.lock().await;
    while let Ok(stale) = events.try_recv() {
        if let Pumped::Closed(why) = stale {
            return Err(Failure::Died(why));
        }
    }
    let msg = serde_json::json!({ "type": kind, "context": ctx });
    if let Err(e) = live.send(&msg).await {
        return Err(Failure::Died(format!("sending the request failed: {e}")));
    }
    let deadline = tokio::time::Instant::now() + ANSWER_TIMEOUT;
    loop {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Err(_) => return Err(Failure::NoAnswer),
            Ok(None) => return Err(Failure::Died("the sandbox's event stream ended".into())),
            Ok(Some(Pumped::Closed(why))) => return Err(Failure::Died(why)),
            Ok(Some(Pumped::Frame(v)))
                if v.get("type").and_then(|t| t.as_str()) == Some("context_done")
                    && v.get("context").and_then(|c| c.as_str()) == Some(ctx) =>
            {
                if v.get("ok").and_then(|o| o.as_bool()) == Some(true) {
                    return Ok(());
                }
                let error = v.get("error").and_then(|e| e.as_str()).unwrap_or("refused");
                return Err(Failure::Refused(error.chars().take(1000).collect()));
            }
            Ok(Some(_)) => continue,
        }
    }
}

impl Runtime {
    /// Takes the sandbox's execution lock and runs one context request through the driver;
    /// `check` runs under the lock, before the request is sent.
    async fn context_request(
        &self,
        e: &Arc<Entry>,
        kind: &str,
        ctx: &str,
        check: impl FnOnce(&[Context]) -> Result<(), ApiError>,
    ) -> Result<(), ApiError> {
        let guard = e.live.exec_lock.lock().await;
        if e.live.is_dead() {
            return Err(self.gone_or_missing(&e.live.id));
        }
        check(&e.live.context_list())?;
        self.touch(e);
        let answer = ask_driver(&e.live, kind, ctx).await;
        drop(guard);
        match answer {
            Ok(()) => Ok(()),
            Err(Failure::Refused(why)) => Err(ApiError::new(
                ErrorCode::InvalidArgument,
                format!("the sandbox refused {kind} for {ctx:?}: {why}"),
            )),
            Err(Failure::NoAnswer) => Err(ApiError::new(
                ErrorCode::SandboxFailed,
                format!(
                    "the sandbox did not answer {kind} within {} s",
                    ANSWER_TIMEOUT.as_secs()
                ),
            )),
            Err(Failure::Died(why)) => {
                tracing::warn!(sandbox = %e.live.id, %why, "sandbox died during a context request");
                self.end(
                    e,
                    SandboxState::Lost,
                    "the sandbox's processes died during a context request",
                )
                .await;
                Err(ApiError::new(
                    ErrorCode::SandboxFailed,
                    format!("the sandbox's processes died ({why}); its state is lost"),
                ))
            }
        }
    }

    /// Creates a new, empty code context (id `ctx_...`) in a sandbox.
    pub async fn create_context(&self, id: &str) -> Result<Context, ApiError> {
        let e = self.entry(id)?;
        let ctx = Context {
            id: new_id("ctx_"),
            created_at: now_rfc3339(),
        };
        self.context_request(&e, "context_create", &ctx.id, |list| {
            if list.len() >= MAX_CONTEXTS {
                return Err(ApiError::new(
                    ErrorCode::InvalidArgument,
                    format!(
                        "sandbox {id} already has {MAX_CONTEXTS} contexts, the most it may have"
                    ),
                ));
            }
            Ok(())
        })
        .await?;
        e.live
            .contexts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(ctx.clone());
        Ok(ctx)
    }

    /// The sandbox's contexts, oldest first (`default` is always there).
    pub async fn list_contexts(&self, id: &str) -> Result<Vec<Context>, ApiError> {
        let e = self.entry(id)?;
        Ok(e.live.context_list())
    }

    /// Gives a context a fresh namespace and a new Bash session; other contexts keep theirs.
    pub async fn restart_context(&self, id: &str, ctx: &str) -> Result<Context, ApiError> {
        let e = self.entry(id)?;
        self.context_request(&e, "context_restart", ctx, |list| {
            if list.iter().any(|c| c.id == ctx) {
                Ok(())
            } else {
                Err(no_context(id, ctx))
            }
        })
        .await?;
        e.live
            .context_list()
            .into_iter()
            .find(|c| c.id == ctx)
            .ok_or_else(|| no_context(id, ctx))
    }

    /// Removes a context (its namespace and Bash session); `default` cannot be removed.
    pub async fn delete_context(&self, id: &str, ctx: &str) -> Result<(), ApiError> {
        let e = self.entry(id)?;
        if ctx == DEFAULT_CONTEXT {
            return Err(ApiError::new(
                ErrorCode::InvalidArgument,
                "the default context cannot be deleted (restart it instead)",
            ));
        }
        self.context_request(&e, "context_delete", ctx, |list| {
            if list.iter().any(|c| c.id == ctx) {
                Ok(())
            } else {
                Err(no_context(id, ctx))
            }
        })
        .await?;
        e.live
            .contexts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|c| c.id != ctx);
        Ok(())
    }
}
