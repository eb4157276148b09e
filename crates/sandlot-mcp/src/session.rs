//! One MCP session's sandbox: created on the first tool call that needs one, deleted when the
//! session ends (streamable HTTP: DELETE or idle expiry; stdio: EOF). Sandboxes named by an
//! explicit `sandbox_id` are never owned by a session. On `/mcp` with API keys the sandbox is
//! the tenant's of the key that opened the session (see `tenancy`).

use crate::backend::Backend;
use crate::error::Error;
use crate::tenancy::Scope;
use sandlot_types::{CreateSandbox, IdleAction};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub(crate) struct Session<B: Backend> {
    backend: Arc<B>,
    slot: tokio::sync::Mutex<Slot>,
    /// Tool calls in flight, so the stdio command lets them end (interrupted) before it exits.
    pub(crate) calls: TaskTracker,
    /// Cancelled when the client is known gone (stdio: stdin reached EOF), before the MCP
    /// service itself notices (rmcp first waits a few seconds for handlers to answer).
    pub(crate) client_gone: CancellationToken,
}

#[derive(Default)]
struct Slot {
    id: Option<String>,
    /// The session as its sandbox's metadata names it (`mcp_session`): the streamable HTTP
    /// session id, or `stdio`.
    label: String,
    closed: bool,
}

/// The session's sandbox and whether it was just made to replace one that had gone.
pub(crate) struct Own {
    pub(crate) id: String,
    pub(crate) replaced: Option<String>,
}

impl<B: Backend> Session<B> {
    pub(crate) fn new(backend: Arc<B>) -> Self {
        Self {
            backend,
            slot: tokio::sync::Mutex::new(Slot::default()),
            calls: TaskTracker::new(),
            client_gone: CancellationToken::new(),
        }
    }

    /// The session's sandbox, created now if it has none. The lock is held across the
    /// creation so two first calls at once make one sandbox.
    pub(crate) async fn sandbox(&self, label: &str, scope: Option<&Scope>) -> Result<Own, Error> {
        let mut slot = self.slot.lock().await;
        if slot.closed {
            return Err(Error::SessionClosed);
        }
        if let Some(id) = &slot.id {
            return Ok(Own {
                id: id.clone(),
                replaced: None,
            });
        }
        let id = self.create(label, scope).await?;
        slot.id = Some(id.clone());
        slot.label = label.to_string();
        Ok(Own { id, replaced: None })
    }

    /// Replaces the session's sandbox `gone` (found missing: expired or deleted elsewhere) by
    /// a new one, unless another call did already.
    pub(crate) async fn replace(
        &self,
        gone: &str,
        label: &str,
        scope: Option<&Scope>,
    ) -> Result<Own, Error> {
        let mut slot = self.slot.lock().await;
        if slot.closed {
            return Err(Error::SessionClosed);
        }
        if let Some(id) = slot.id.as_ref().filter(|id| *id != gone) {
            return Ok(Own {
                id: id.clone(),
                replaced: None,
            });
        }
        let id = self.create(label, scope).await?;
        slot.id = Some(id.clone());
        slot.label = label.to_string();
        Ok(Own {
            id,
            replaced: Some(gone.to_string()),
        })
    }

    /// The session's sandbox, if it has one (no creation).
    pub(crate) async fn current(&self) -> Option<String> {
        self.slot.lock().await.id.clone()
    }

    /// Forgets `id` if it is the session's own (it was deleted by a tool call).
    pub(crate) async fn forget(&self, id: &str) {
        let mut slot = self.slot.lock().await;
        if slot.id.as_deref() == Some(id) {
            slot.id = None;
        }
    }

    async fn create(&self, label: &str, scope: Option<&Scope>) -> Result<String, Error> {
        let metadata = BTreeMap::from([
            ("created_by".to_string(), "mcp".to_string()),
            ("mcp_session".to_string(), label.to_string()),
        ]);
        let req = CreateSandbox {
            metadata,
            // Idle (the server's default idle timeout), it is paused rather than deleted:
            // it holds no memory, and the session's next call resumes it with its state.
            on_idle: Some(IdleAction::Pause),
            ..Default::default()
        };
        let sb = match scope {
            Some(scope) => scope.create(req).await?,
            None => self.backend.create_sandbox(req).await?,
        };
        tracing::debug!(sandbox = %sb.id, session = %label, "created the MCP session's sandbox");
        Ok(sb.id)
    }

    /// Ends the session: no sandbox is created for it any more and its own is deleted.
    pub(crate) async fn close(&self) {
        let (id, label) = {
            let mut slot = self.slot.lock().await;
            slot.closed = true;
            (slot.id.take(), std::mem::take(&mut slot.label))
        };
        if let Some(id) = id {
            delete(&*self.backend, &id, &label).await;
        }
    }
}

async fn delete<B: Backend>(backend: &B, id: &str, label: &str) {
    match backend.delete_sandbox(id).await {
        Ok(()) => {
            tracing::debug!(sandbox = %id, session = %label, "deleted the MCP session's sandbox")
        }
        Err(e) if e.is_not_found() => {}
        Err(e) => {
            tracing::warn!(sandbox = %id, session = %label, error = %e, "could not delete the MCP session's sandbox")
        }
    }
}

impl<B: Backend> Drop for Session<B> {
    /// A session dropped without [`Session::close`] (streamable HTTP: the session's worker
    /// ended, by DELETE, idle expiry or shutdown) deletes its sandbox in the background.
    fn drop(&mut self) {
        let slot = self.slot.get_mut();
        slot.closed = true;
        let Some(id) = slot.id.take() else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(sandbox = %id, "MCP session ended outside a runtime; its sandbox is left to its idle timeout");
            return;
        };
        let backend = self.backend.clone();
        let label = std::mem::take(&mut slot.label);
        rt.spawn(async move { delete(&*backend, &id, &label).await });
    }
}
