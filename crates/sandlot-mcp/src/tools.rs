//! The MCP tools: the dispatch of a `tools/call` (their declarations are `declarations.rs`,
//! how a result reads to a model `render.rs`).
//!
//! Two kinds of failure, as MCP has them: arguments that do not fit the schema (missing
//! `code`, wrong types, unknown fields, an unknown tool) are JSON-RPC errors (`-32602`), the
//! request itself being wrong; anything the call did (code that raised, a sandbox that does
//! not exist, a file too large, a policy denial: `policy_denied: <why>`) is a tool result with
//! `isError: true`, so the model reads it. The policy's gates are `tenancy`'s.

use crate::backend::{Backend, ReadFile};
use crate::error::Error;
use crate::server::McpServer;
use crate::session::Session;
use crate::tenancy::Scope;
use base64::Engine as _;
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use sandlot_service::execution::{self, Dropped, ExecutionHandle};
use sandlot_types::{
    CreateSandbox, CreateSnapshot, ExecuteRequest, ExecutionResult, ForkRequest, Language,
};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::declarations::*;
use crate::render::*;

/// How long an interrupted execution is given to end before the tool call returns anyway
/// (the execution then ends by its own timeout).
const INTERRUPT_WAIT: Duration = Duration::from_secs(10);
/// Interval at which an interrupt is repeated while the execution has not ended: one that
/// was still queued behind another when the first interrupt came is caught when it starts.
const INTERRUPT_EVERY: Duration = Duration::from_millis(200);

/// The arguments of `req` as `T`, or the JSON-RPC error naming what is wrong with them.
fn args<T: DeserializeOwned>(req: &CallToolRequestParams) -> Result<T, McpError> {
    let value = Value::Object(req.arguments.clone().unwrap_or_default());
    serde_json::from_value(value).map_err(|e| {
        McpError::invalid_params(
            format!("invalid arguments for tool {}: {e}", req.name),
            Some(json!({ "tool": req.name })),
        )
    })
}

/// Runs one `tools/call`.
pub(crate) async fn call<B: Backend>(
    server: &McpServer<B>,
    req: CallToolRequestParams,
    ctx: RequestContext<RoleServer>,
) -> Result<CallToolResult, McpError> {
    let who = ctx
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|p| p.extensions.get::<sandlot_types::Principal>());
    let scope = match Scope::of(server.tenancy.as_ref(), who) {
        Ok(scope) => scope,
        Err(e) => {
            return Ok(CallToolResult::error(vec![ContentBlock::text(
                e.for_model(),
            )]))
        }
    };
    let call = Call {
        server,
        label: session_label(&ctx),
        ctx: &ctx,
        scope,
        notes: Vec::new(),
    };
    match req.name.as_ref() {
        "run_python" => {
            let a: RunPythonArgs = args(&req)?;
            Ok(call
                .run(
                    a.code,
                    Language::Python,
                    a.timeout,
                    a.on_failure.into(),
                    a.sandbox_id,
                )
                .await)
        }
        "run_bash" => {
            let a: RunBashArgs = args(&req)?;
            Ok(call
                .run(
                    a.code,
                    Language::Bash,
                    a.timeout,
                    a.on_failure.into(),
                    a.sandbox_id,
                )
                .await)
        }
        "write_file" => {
            let a: WriteFileArgs = args(&req)?;
            let content = match a.encoding {
                Encoding::Text => bytes::Bytes::from(a.content),
                Encoding::Base64 => {
                    match base64::engine::general_purpose::STANDARD.decode(a.content.trim()) {
                        Ok(b) => bytes::Bytes::from(b),
                        Err(e) => {
                            return Err(McpError::invalid_params(
                                format!(
                                "invalid arguments for tool write_file: content is not base64: {e}"
                            ),
                                None,
                            ))
                        }
                    }
                }
            };
            Ok(call.write_file(a.path, content, a.sandbox_id).await)
        }
        "read_file" => {
            let a: ReadFileArgs = args(&req)?;
            Ok(call.read_file(a.path, a.sandbox_id).await)
        }
        "list_files" => {
            let a: ListFilesArgs = args(&req)?;
            Ok(call.list_files(a.path, a.recursive, a.sandbox_id).await)
        }
        "create_sandbox" => {
            let a: CreateSandboxArgs = args(&req)?;
            Ok(call.create_sandbox(a).await)
        }
        "list_sandboxes" => {
            let _: NoArgs = args(&req)?;
            Ok(call.list_sandboxes().await)
        }
        "delete_sandbox" => {
            let a: SandboxArgs = args(&req)?;
            Ok(call.delete_sandbox(a.sandbox_id).await)
        }
        "fork_sandbox" => {
            let a: ForkArgs = args(&req)?;
            Ok(call.fork(a.sandbox_id, a.count.unwrap_or(1)).await)
        }
        "pause_sandbox" => {
            let a: SandboxArgs = args(&req)?;
            Ok(call.lifecycle(a.sandbox_id, Lifecycle::Pause).await)
        }
        "resume_sandbox" => {
            let a: SandboxArgs = args(&req)?;
            Ok(call.lifecycle(a.sandbox_id, Lifecycle::Resume).await)
        }
        "snapshot_sandbox" => {
            let a: SnapshotArgs = args(&req)?;
            Ok(call.snapshot(a.sandbox_id, a.name).await)
        }
        other => Err(McpError::invalid_params(
            format!("unknown tool: {other:?}"),
            Some(json!({ "tool": other })),
        )),
    }
}

/// The session as its sandbox's metadata names it: the streamable HTTP session id, or
/// `stdio`.
fn session_label(ctx: &RequestContext<RoleServer>) -> String {
    ctx.extensions
        .get::<axum::http::request::Parts>()
        .and_then(|p| p.headers.get("mcp-session-id"))
        .and_then(|v| v.to_str().ok())
        .map_or_else(|| "stdio".to_string(), str::to_string)
}

/// Resolves when the caller is gone: the request was cancelled (`notifications/cancelled`),
/// the session ended (stdio EOF, DELETE), or the HTTP response it waits on was dropped.
async fn caller_gone<B: Backend>(ctx: &RequestContext<RoleServer>, session: &Session<B>) {
    let http = ctx
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|p| p.extensions.get::<crate::server::ClientGone>())
        .map(|g| g.0.clone());
    let http = async move {
        match http {
            Some(gone) => gone.cancelled().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = ctx.ct.cancelled() => {}
        () = session.client_gone.cancelled() => {}
        () = http => {}
    }
}

enum Lifecycle {
    Pause,
    Resume,
}

/// One tool call in progress: the sandbox it resolves to and notes for the model.
struct Call<'a, B: Backend> {
    server: &'a McpServer<B>,
    ctx: &'a RequestContext<RoleServer>,
    label: String,
    /// The tenant the call acts for (in-process `/mcp` with API keys).
    scope: Option<Scope>,
    notes: Vec<String>,
}

impl<B: Backend> Call<'_, B> {
    fn backend(&self) -> Arc<B> {
        self.server.backend.clone()
    }

    /// `Ok` when the call may name sandbox `id` (its tenant's; anyone's without a scope).
    fn check(&self, id: &str) -> Result<(), Error> {
        match &self.scope {
            Some(scope) => scope.check_sandbox(id),
            None => Ok(()),
        }
    }

    /// Runs `op` on the sandbox named, or on the session's own (created if need be, and
    /// replaced once, with a note, if it had gone: expired or deleted elsewhere).
    async fn on_sandbox<T, F, Fut>(&mut self, explicit: Option<String>, op: F) -> Result<T, Error>
    where
        F: Fn(String) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        if let Some(id) = explicit {
            self.check(&id)?;
            return op(id).await;
        }
        let session = &self.server.session;
        let scope = self.scope.as_ref();
        let own = session.sandbox(&self.label, scope).await?;
        match op(own.id.clone()).await {
            Err(e) if e.is_not_found() => {
                let own = session.replace(&own.id, &self.label, scope).await?;
                if let Some(old) = &own.replaced {
                    self.notes.push(format!(
                        "[this session's sandbox {old} was gone (it reached its maximum \
                         lifetime, or was deleted); a new one, {}, was created: earlier \
                         variables and files are lost]",
                        own.id
                    ));
                }
                op(own.id).await
            }
            other => other,
        }
    }

    fn failed(&self, e: &Error) -> CallToolResult {
        let mut blocks: Vec<ContentBlock> = self
            .notes
            .iter()
            .map(|n| ContentBlock::text(n.clone()))
            .collect();
        blocks.push(ContentBlock::text(e.for_model()));
        CallToolResult::error(blocks)
    }

    fn json(&self, v: Value) -> CallToolResult {
        let mut blocks: Vec<ContentBlock> = self
            .notes
            .iter()
            .map(|n| ContentBlock::text(n.clone()))
            .collect();
        blocks.push(ContentBlock::text(
            serde_json::to_string_pretty(&v).unwrap_or_default(),
        ));
        CallToolResult::success(blocks)
    }

    async fn run(
        mut self,
        code: String,
        language: Language,
        timeout: Option<f64>,
        on_failure: sandlot_types::OnFailure,
        explicit: Option<String>,
    ) -> CallToolResult {
        // Counted so `sandlot mcp` lets it end (interrupted) before exiting at EOF.
        let _inflight = self.server.session.calls.token();
        let ctx = self.ctx;
        let session = self.server.session.clone();
        let session = &*session;
        let backend = self.backend();
        let scope = self.scope.clone();
        let result = self
            .on_sandbox(explicit, |id| {
                let req = ExecuteRequest {
                    code: code.clone(),
                    language,
                    timeout,
                    stream: false,
                    context: None,
                    on_failure,
                };
                let (backend, scope) = (backend.clone(), scope.clone());
                async move {
                    if let Some(s) = &scope {
                        s.gate_execute(&id, &req.code, language).await?;
                    }
                    execute_interruptible(backend, id, req, ctx, session).await
                }
            })
            .await;
        match result {
            Ok(Some(r)) => render(&r, std::mem::take(&mut self.notes)),
            Ok(None) => CallToolResult::error(vec![ContentBlock::text(
                "[the call was cancelled; the execution was interrupted]",
            )]),
            Err(e) => self.failed(&e),
        }
    }

    async fn write_file(
        mut self,
        path: String,
        content: bytes::Bytes,
        explicit: Option<String>,
    ) -> CallToolResult {
        let backend = self.backend();
        let scope = self.scope.clone();
        let r = self
            .on_sandbox(explicit, |id| {
                let (backend, path, content) = (backend.clone(), path.clone(), content.clone());
                let scope = scope.clone();
                async move {
                    if let Some(s) = &scope {
                        s.gate_file(&id, &path, Some(content.len() as u64)).await?;
                    }
                    backend.write_file(&id, &path, content).await
                }
            })
            .await;
        match r {
            Ok(entry) => self.json(json!({ "written": entry.path, "size": entry.size })),
            Err(e) => self.failed(&e),
        }
    }

    async fn read_file(mut self, path: String, explicit: Option<String>) -> CallToolResult {
        let backend = self.backend();
        let scope = self.scope.clone();
        let r = self
            .on_sandbox(explicit, |id| {
                let (backend, path, scope) = (backend.clone(), path.clone(), scope.clone());
                async move {
                    let Some(s) = &scope else {
                        return backend.read_file(&id, &path, READ_LIMIT).await;
                    };
                    s.gate_file(&id, &path, None).await?;
                    // The bytes leave the sandbox as output does: scanned, and redacted or
                    // withheld as the policy says.
                    match backend.read_file(&id, &path, READ_LIMIT).await? {
                        ReadFile::Content(bytes) => match s.guard_file(&id, &path, bytes).await {
                            Some(bytes) => Ok(ReadFile::Content(bytes)),
                            None => Err(Error::Api(sandlot_types::ApiError::new(
                                sandlot_types::ErrorCode::PolicyDenied,
                                "the file was withheld: the guardrails found secrets in it and \
                                 the policy withholds them",
                            ))),
                        },
                        too_large => Ok(too_large),
                    }
                }
            })
            .await;
        let mut blocks: Vec<ContentBlock> = self
            .notes
            .iter()
            .map(|n| ContentBlock::text(n.clone()))
            .collect();
        match r {
            Ok(ReadFile::Content(bytes)) => {
                blocks.push(file_content(bytes));
                CallToolResult::success(blocks)
            }
            Ok(ReadFile::TooLarge(size)) => {
                blocks.push(ContentBlock::text(format!(
                    "file_too_large: {path} is {size} bytes; read_file returns at most \
                     {READ_LIMIT} bytes (read it in parts with run_python, or download it with \
                     the HTTP API)"
                )));
                CallToolResult::error(blocks)
            }
            Err(e) => self.failed(&e),
        }
    }

    async fn list_files(
        mut self,
        path: String,
        recursive: bool,
        explicit: Option<String>,
    ) -> CallToolResult {
        let backend = self.backend();
        let scope = self.scope.clone();
        let r = self
            .on_sandbox(explicit, |id| {
                let (backend, path, scope) = (backend.clone(), path.clone(), scope.clone());
                async move {
                    if let Some(s) = &scope {
                        s.gate_file(&id, &path, None).await?;
                    }
                    backend.list_files(&id, &path, recursive).await
                }
            })
            .await;
        match r {
            Ok(entries) => self.json(Value::Array(entries.iter().map(entry_json).collect())),
            Err(e) => self.failed(&e),
        }
    }

    async fn create_sandbox(self, a: CreateSandboxArgs) -> CallToolResult {
        let req = CreateSandbox {
            template: a.template,
            from_snapshot: a.from_snapshot,
            env: a.env,
            idle_timeout: a.idle_timeout,
            tier: a.tier,
            mounts: a
                .mounts
                .into_iter()
                .map(|m| sandlot_types::HostMount {
                    host: m.host,
                    path: m.path,
                })
                .collect(),
            metadata: BTreeMap::from([("created_by".to_string(), "mcp".to_string())]),
            ..Default::default()
        };
        let created = match &self.scope {
            Some(scope) => scope.create(req).await,
            None => self.server.backend.create_sandbox(req).await,
        };
        match created {
            Ok(sb) => self.json(sandbox_json(&sb, None)),
            Err(e) => self.failed(&e),
        }
    }

    async fn list_sandboxes(self) -> CallToolResult {
        let own = self.server.session.current().await;
        let tenant = self.scope.as_ref().map(Scope::tenant);
        match self.server.backend.list_sandboxes().await {
            Ok(list) => self.json(Value::Array(
                list.iter()
                    .filter(|sb| tenant.is_none_or(|t| sb.tenant == t))
                    .map(|sb| sandbox_json(sb, own.as_deref()))
                    .collect(),
            )),
            Err(e) => self.failed(&e),
        }
    }

    async fn delete_sandbox(self, explicit: Option<String>) -> CallToolResult {
        let session = &self.server.session;
        let id = match explicit {
            Some(id) => id,
            None => match session.current().await {
                Some(id) => id,
                None => {
                    return self.json(json!({
                        "deleted": null,
                        "note": "this session has no sandbox yet",
                    }))
                }
            },
        };
        if let Err(e) = self.check(&id) {
            return self.failed(&e);
        }
        let deleted = match &self.scope {
            Some(scope) => scope.delete(&id).await,
            None => self.server.backend.delete_sandbox(&id).await,
        };
        match deleted {
            Ok(()) => {
                session.forget(&id).await;
                self.json(json!({ "deleted": id }))
            }
            Err(e) => self.failed(&e),
        }
    }

    async fn fork(mut self, explicit: Option<String>, count: u64) -> CallToolResult {
        let backend = self.backend();
        let scope = self.scope.clone();
        let r = self
            .on_sandbox(explicit, |id| {
                let (backend, scope) = (backend.clone(), scope.clone());
                async move {
                    let req = ForkRequest {
                        count,
                        same_seed: false,
                    };
                    match &scope {
                        Some(s) => s.fork(&id, req).await,
                        None => backend.fork_sandbox(&id, req).await,
                    }
                }
            })
            .await;
        match r {
            Ok(f) => self.json(json!({
                "sandboxes": f.sandboxes.iter().map(|s| s.id.clone()).collect::<Vec<_>>(),
                "not_captured": f.not_captured,
                "took_ms": f.took_ms,
            })),
            Err(e) => self.failed(&e),
        }
    }

    async fn lifecycle(mut self, explicit: Option<String>, what: Lifecycle) -> CallToolResult {
        let backend = self.backend();
        let scope = self.scope.clone();
        let r = self
            .on_sandbox(explicit, |id| {
                let (backend, scope) = (backend.clone(), scope.clone());
                let pause = matches!(what, Lifecycle::Pause);
                async move {
                    match (&scope, pause) {
                        (Some(s), true) => s.pause(&id).await,
                        (Some(s), false) => s.resume(&id).await,
                        (None, true) => backend.pause_sandbox(&id).await,
                        (None, false) => backend.resume_sandbox(&id).await,
                    }
                }
            })
            .await;
        let own = self.server.session.current().await;
        match r {
            Ok(sb) => self.json(sandbox_json(&sb, own.as_deref())),
            Err(e) => self.failed(&e),
        }
    }

    async fn snapshot(mut self, explicit: Option<String>, name: Option<String>) -> CallToolResult {
        let backend = self.backend();
        let scope = self.scope.clone();
        let r = self
            .on_sandbox(explicit, |id| {
                let (backend, name, scope) = (backend.clone(), name.clone(), scope.clone());
                async move {
                    let req = CreateSnapshot { name };
                    match &scope {
                        Some(s) => s.snapshot(&id, req).await,
                        None => backend.snapshot_sandbox(&id, req).await,
                    }
                }
            })
            .await;
        match r {
            Ok(s) => self.json(json!({
                "snapshot_id": s.id,
                "name": s.name,
                "sandbox_id": s.sandbox_id,
                "variables": s.variables,
                "not_captured": s.not_captured,
                "created_at": s.created_at,
            })),
            Err(e) => self.failed(&e),
        }
    }
}

/// Runs an execution in a task of its own and interrupts it if the caller goes away; `None`
/// then (nobody reads the answer). The execution is never dropped halfway: it ends, by the
/// interrupt, and the sandbox takes the next call with its state.
async fn execute_interruptible<B: Backend>(
    backend: Arc<B>,
    id: String,
    req: ExecuteRequest,
    ctx: &RequestContext<RoleServer>,
    session: &Session<B>,
) -> Result<Option<ExecutionResult>, Error> {
    let mut run: ExecutionHandle<Error> = {
        let (backend, id) = (backend.clone(), id.clone());
        execution::start(
            move |_| async move { backend.execute(&id, req).await },
            Dropped::RunOn,
        )
    };
    tokio::select! {
        r = run.wait() => return r.map(Some),
        () = caller_gone(ctx, session) => {}
    }
    tracing::info!(sandbox = %id, "MCP caller went away mid-execution; interrupting it");
    let deadline = tokio::time::Instant::now() + INTERRUPT_WAIT;
    loop {
        if let Err(e) = backend.interrupt(&id).await {
            tracing::debug!(sandbox = %id, error = %e, "interrupt failed");
        }
        tokio::select! {
            r = run.wait() => {
                if let Err(e) = r {
                    tracing::debug!(sandbox = %id, error = %e, "interrupted execution failed");
                }
                return Ok(None);
            }
            () = tokio::time::sleep(INTERRUPT_EVERY) => {}
        }
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!(sandbox = %id, "execution still running {INTERRUPT_WAIT:?} after the interrupt; leaving it to its timeout");
            return Ok(None);
        }
    }
}
