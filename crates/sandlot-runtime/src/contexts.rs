//! Code contexts: independent Python namespaces (each with its own Bash session) inside one
//! sandbox, sharing its filesystem and process. The driver holds them; the runtime keeps the
//! list and asks the driver to create, restart and delete them between executions (under the
//! sandbox's execution lock, so they take their turn with executions).
//!
//! Protocol (server → driver): `{"type": "context_create" | "context_restart" |
//! "context_delete", "context": "<id>"}` (a creation may add `"cwd"`: the directory the
//! context starts in); the driver answers `{"type": "context_done", "context": "<id>", "ok":
//! bool, "error": "..."}`.

use crate::error::RuntimeError;
use crate::request::{ask, Failure};
use crate::restart::Turn;
use crate::sandbox::Live;
use crate::util::{lock, new_id, now_rfc3339};
use crate::{Entry, Runtime};
use sandlot_types::Context;
use std::sync::Arc;
use std::time::Duration;

/// The context every sandbox boots with; executions without a context run in it.
pub(crate) const DEFAULT_CONTEXT: &str = "default";
/// Most contexts one sandbox may have, `default` included.
pub(crate) const MAX_CONTEXTS: usize = 32;
/// How long the driver gets to answer a context request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest working directory a context may be created in (Linux's `PATH_MAX`).
const MAX_CWD_BYTES: usize = 4096;

/// A context's requested working directory, checked before the driver sees it: absolute, no
/// NUL, at most [`MAX_CWD_BYTES`]. Whether it is a directory inside the sandbox is the
/// driver's to say (it answers a refusal naming it).
fn check_cwd(ctx: &str, cwd: &str) -> Result<(), RuntimeError> {
    let why = if !cwd.starts_with('/') {
        "must be an absolute path"
    } else if cwd.contains('\0') {
        "must not contain NUL"
    } else if cwd.len() > MAX_CWD_BYTES {
        "is longer than 4096 bytes"
    } else {
        return Ok(());
    };
    Err(RuntimeError::ContextRefused {
        kind: "context_create",
        context: ctx.to_string(),
        reason: format!("cwd {why}"),
    })
}

pub(crate) fn default_context() -> Context {
    Context {
        id: DEFAULT_CONTEXT.to_string(),
        created_at: now_rfc3339(),
        cwd: None,
    }
}

fn no_context(sandbox: &str, ctx: &str) -> RuntimeError {
    RuntimeError::NoContext {
        sandbox: sandbox.to_string(),
        context: ctx.to_string(),
    }
}

impl Live {
    fn context_list(&self) -> Vec<Context> {
        lock(&self.contexts).clone()
    }

    /// The context an execution asked for (the default one when `None`), if the sandbox has it.
    pub(crate) fn check_context(&self, ctx: Option<&str>) -> Result<String, RuntimeError> {
        let ctx = ctx.unwrap_or(DEFAULT_CONTEXT);
        if self.context_list().iter().any(|c| c.id == ctx) {
            Ok(ctx.to_string())
        } else {
            Err(no_context(&self.id, ctx))
        }
    }
}

/// Sends one context request and waits for its `context_done`. Must be called with the
/// sandbox's execution lock held.
async fn ask_driver(
    live: &Live,
    kind: &'static str,
    ctx: &str,
    cwd: Option<&str>,
) -> Result<(), Failure> {
    let mut msg = serde_json::json!({ "type": kind, "context": ctx });
    if let Some(cwd) = cwd {
        msg["cwd"] = cwd.into();
    }
    ask(
        live,
        &msg,
        None,
        "context_done",
        ("context", ctx),
        ANSWER_TIMEOUT,
    )
    .await
    .map(|_| ())
}

impl Runtime {
    /// Takes the sandbox's execution lock and runs one context request through the driver;
    /// `check` runs under the lock, before the request is sent. Processes found dead are
    /// restarted in place first; processes that die during the request restart after it.
    /// Returns the processes that answered, with the turn still held so the caller updates
    /// their list of contexts before the next request.
    async fn context_request(
        &self,
        e: &Arc<Entry>,
        kind: &'static str,
        ctx: &str,
        cwd: Option<&str>,
        check: impl FnOnce(&[Context]) -> Result<(), RuntimeError>,
    ) -> Result<(Turn, Arc<Live>), RuntimeError> {
        let turn = self.turn(e).await;
        let (turn, live, _) = self.ready_live(e, turn).await?;
        check(&live.context_list())?;
        self.touch(e);
        let answer = ask_driver(&live, kind, ctx, cwd).await;
        match answer {
            Ok(()) => Ok((turn, live)),
            Err(Failure::Refused(reason)) => Err(RuntimeError::ContextRefused {
                kind,
                context: ctx.to_string(),
                reason,
            }),
            Err(Failure::NoAnswer) => Err(RuntimeError::ContextNoAnswer {
                kind,
                secs: ANSWER_TIMEOUT.as_secs(),
            }),
            Err(Failure::Died(why)) => {
                tracing::warn!(sandbox = %e.id, %why, "sandbox died during a context request");
                live.signal_kill();
                self.restart_after(e, turn, crate::restart::reason::CRASHED);
                Err(RuntimeError::DiedInContextRequest { why })
            }
        }
    }

    /// Creates a new, empty code context (id `ctx_...`) in a sandbox, starting in `cwd` (an
    /// absolute directory inside the sandbox) or, without one, where the sandbox's code starts.
    pub async fn create_context(
        &self,
        id: &str,
        cwd: Option<&str>,
    ) -> Result<Context, RuntimeError> {
        let e = self.entry(id)?;
        let ctx = Context {
            id: new_id("ctx_"),
            created_at: now_rfc3339(),
            cwd: cwd.map(str::to_owned),
        };
        if let Some(cwd) = cwd {
            check_cwd(&ctx.id, cwd)?;
        }
        let (turn, live) = self
            .context_request(&e, "context_create", &ctx.id, cwd, |list| {
                if list.len() >= MAX_CONTEXTS {
                    return Err(RuntimeError::TooManyContexts {
                        sandbox: id.to_string(),
                        max: MAX_CONTEXTS,
                    });
                }
                Ok(())
            })
            .await?;
        lock(&live.contexts).push(ctx.clone());
        drop(turn);
        Ok(ctx)
    }

    /// The sandbox's contexts, oldest first (`default` is always there).
    pub async fn list_contexts(&self, id: &str) -> Result<Vec<Context>, RuntimeError> {
        let e = self.entry(id)?;
        Ok(match e.live() {
            Some(live) if !live.is_dead() => live.context_list(),
            // Paused: the contexts its saved state brings back.
            _ if e.state() == sandlot_types::SandboxState::Paused => self
                .paused_contexts(&e.id)
                .unwrap_or_else(|| vec![default_context()]),
            // Stopped, failed or restarting: a restart brings only the default context back.
            _ => vec![default_context()],
        })
    }

    /// Gives a context a fresh namespace and a new Bash session; other contexts keep theirs.
    pub async fn restart_context(&self, id: &str, ctx: &str) -> Result<Context, RuntimeError> {
        let e = self.entry(id)?;
        let (_turn, live) = self
            .context_request(&e, "context_restart", ctx, None, |list| {
                if list.iter().any(|c| c.id == ctx) {
                    Ok(())
                } else {
                    Err(no_context(id, ctx))
                }
            })
            .await?;
        live.context_list()
            .into_iter()
            .find(|c| c.id == ctx)
            .ok_or_else(|| no_context(id, ctx))
    }

    /// Removes a context (its namespace and Bash session); `default` cannot be removed.
    pub async fn delete_context(&self, id: &str, ctx: &str) -> Result<(), RuntimeError> {
        let e = self.entry(id)?;
        if ctx == DEFAULT_CONTEXT {
            return Err(RuntimeError::DefaultContextPermanent);
        }
        let (turn, live) = self
            .context_request(&e, "context_delete", ctx, None, |list| {
                if list.iter().any(|c| c.id == ctx) {
                    Ok(())
                } else {
                    Err(no_context(id, ctx))
                }
            })
            .await?;
        lock(&live.contexts).retain(|c| c.id != ctx);
        drop(turn);
        Ok(())
    }
}
