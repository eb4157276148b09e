//! The MCP tools: their declarations (argument structs whose JSON Schema is the tool's input
//! schema), the dispatch of a `tools/call`, and how a result reads to a model.
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
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, Tool, ToolAnnotations};
use rmcp::schemars::JsonSchema;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use sandlot_service::admission::Like;
use sandlot_tenancy::Share;
use sandlot_types::{
    CreateSandbox, CreateSnapshot, EndState, ExecuteRequest, ExecutionResult, FileEntry,
    ForkRequest, Language, OutputEvent, Sandbox,
};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tracing::Instrument;

/// Largest file `read_file` returns (as text, an image, or base64).
pub const READ_LIMIT: u64 = 4 << 20;
/// How long an interrupted execution is given to end before the tool call returns anyway
/// (the execution then ends by its own timeout).
const INTERRUPT_WAIT: Duration = Duration::from_secs(10);
/// Interval at which an interrupt is repeated while the execution has not ended: one that
/// was still queued behind another when the first interrupt came is caught when it starts.
const INTERRUPT_EVERY: Duration = Duration::from_millis(200);

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct RunPythonArgs {
    /// Python code to run
    pub code: String,
    /// Run in this sandbox (from create_sandbox or list_sandboxes) instead of this session's own
    #[serde(default)]
    pub sandbox_id: Option<String>,
    /// Seconds before the execution is interrupted (default 60, at most 3600)
    #[serde(default)]
    pub timeout: Option<f64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct RunBashArgs {
    /// Bash script to run
    pub code: String,
    /// Run in this sandbox (from create_sandbox or list_sandboxes) instead of this session's own
    #[serde(default)]
    pub sandbox_id: Option<String>,
    /// Seconds before the script is interrupted (default 60, at most 3600)
    #[serde(default)]
    pub timeout: Option<f64>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// `content` is the file's text (UTF-8)
    #[default]
    Text,
    /// `content` is the file's bytes, base64-encoded
    Base64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    /// Path under the workspace: `data/x.csv` or `/workspace/data/x.csv`; parent directories are created
    pub path: String,
    /// The file's content
    pub content: String,
    /// How `content` is encoded: `text` (default) or `base64`
    #[serde(default)]
    pub encoding: Encoding,
    /// Use this sandbox instead of this session's own
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// Path under the workspace: `data/x.csv` or `/workspace/data/x.csv`
    pub path: String,
    /// Use this sandbox instead of this session's own
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct ListFilesArgs {
    /// Directory under the workspace (default: the workspace itself)
    #[serde(default)]
    pub path: String,
    /// List subdirectories' contents too
    #[serde(default)]
    pub recursive: bool,
    /// Use this sandbox instead of this session's own
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct CreateSandboxArgs {
    /// Template to start from (default: `default`)
    #[serde(default)]
    pub template: Option<String>,
    /// Start from this snapshot (from snapshot_sandbox): its files and variables
    #[serde(default)]
    pub from_snapshot: Option<String>,
    /// Environment variables for code in the sandbox
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Seconds without use after which the server deletes the sandbox
    #[serde(default)]
    pub idle_timeout: Option<u64>,
    /// Isolation tier: `isolated` (default) or `trusted` (more reach; only where the server's
    /// policy allows it)
    #[serde(default)]
    pub tier: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct SandboxArgs {
    /// The sandbox (default: this session's own)
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct ForkArgs {
    /// The sandbox to fork (default: this session's own)
    #[serde(default)]
    pub sandbox_id: Option<String>,
    /// How many copies (1 to 100; default 1)
    #[serde(default)]
    pub count: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct SnapshotArgs {
    /// The sandbox (default: this session's own)
    #[serde(default)]
    pub sandbox_id: Option<String>,
    /// A name for the snapshot
    #[serde(default)]
    pub name: Option<String>,
}

fn tool<T: JsonSchema + 'static>(name: &'static str, description: &'static str) -> Tool {
    Tool::new(
        name,
        description,
        rmcp::handler::server::tool::schema_for_type::<T>(),
    )
}

fn read_only(t: Tool) -> Tool {
    t.with_annotations(ToolAnnotations::new().read_only(true))
}

/// Every tool, in the order `tools/list` gives them.
pub fn declarations() -> &'static [Tool] {
    static TOOLS: OnceLock<Vec<Tool>> = OnceLock::new();
    TOOLS.get_or_init(|| {
        vec![
            tool::<RunPythonArgs>(
                "run_python",
                "Run Python code in a persistent, sandboxed IPython session. Variables, imports \
                 and files persist between calls. The working directory is /workspace. numpy, \
                 pandas and matplotlib are installed; there is no internet access. Returns \
                 stdout, stderr, the value of the last expression, displayed values, matplotlib \
                 figures (as images) and, on failure, the error with its traceback. Runs in this \
                 session's own sandbox (created on first use, deleted when the session ends) \
                 unless sandbox_id names another.",
            ),
            tool::<RunBashArgs>(
                "run_bash",
                "Run a Bash script in a persistent, sandboxed shell session (the working \
                 directory and exported variables persist between calls; files are shared with \
                 the Python session, under /workspace). There is no internet access. Returns \
                 stdout, stderr and the exit status.",
            ),
            tool::<WriteFileArgs>(
                "write_file",
                "Write a file in the sandbox's workspace (/workspace), creating parent \
                 directories and replacing an existing file.",
            ),
            read_only(tool::<ReadFileArgs>(
                "read_file",
                "Read a file of the sandbox's workspace (at most 4 MiB): text as text, PNG/JPEG/\
                 GIF/WebP images as images, other bytes as base64.",
            )),
            read_only(tool::<ListFilesArgs>(
                "list_files",
                "List a directory of the sandbox's workspace: path, kind (file, dir, symlink) \
                 and size of each entry.",
            )),
            tool::<CreateSandboxArgs>(
                "create_sandbox",
                "Create a new sandbox and return its id. Pass the id as sandbox_id to the other \
                 tools to use it (also from other sessions or clients); it is not deleted when \
                 this session ends, only by delete_sandbox or its idle timeout.",
            ),
            read_only(tool::<NoArgs>(
                "list_sandboxes",
                "List the server's sandboxes that have not ended: id, state, template, \
                 creation and last use, and which one is this session's own.",
            )),
            tool::<SandboxArgs>(
                "delete_sandbox",
                "Delete a sandbox and its files (default: this session's own, which is created \
                 afresh on next use).",
            ),
            tool::<ForkArgs>(
                "fork_sandbox",
                "Copy a running sandbox, its variables and files, into new sandboxes; returns \
                 their ids (use them as sandbox_id to try alternatives side by side).",
            ),
            tool::<SandboxArgs>(
                "pause_sandbox",
                "Pause a sandbox: its variables and files are saved to disk and it holds no \
                 memory; the next call to it (or resume_sandbox) brings it back.",
            ),
            tool::<SandboxArgs>(
                "resume_sandbox",
                "Resume a paused sandbox with its variables and files.",
            ),
            tool::<SnapshotArgs>(
                "snapshot_sandbox",
                "Save a sandbox's variables and files as a snapshot; create_sandbox with \
                 from_snapshot starts new sandboxes from it.",
            ),
        ]
    })
}

/// The declaration of the tool `name`.
pub fn find(name: &str) -> Option<&'static Tool> {
    declarations().iter().find(|t| t.name == name)
}

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
                .run(a.code, Language::Python, a.timeout, a.sandbox_id)
                .await)
        }
        "run_bash" => {
            let a: RunBashArgs = args(&req)?;
            Ok(call
                .run(a.code, Language::Bash, a.timeout, a.sandbox_id)
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
                };
                let (backend, scope) = (backend.clone(), scope.clone());
                async move {
                    if let Some(s) = &scope {
                        s.gate_execute(&id, req.code.len(), language).await?;
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
        let mut req = CreateSandbox {
            template: a.template,
            from_snapshot: a.from_snapshot,
            env: a.env,
            idle_timeout: a.idle_timeout,
            tier: a.tier,
            metadata: BTreeMap::from([("created_by".to_string(), "mcp".to_string())]),
            ..Default::default()
        };
        // Held until the sandbox is created.
        let mut _admission = None;
        if let Some(scope) = &self.scope {
            match scope.admit_new(&mut req).await {
                Ok(a) => _admission = a,
                Err(e) => return self.failed(&e),
            }
        }
        match self.server.backend.create_sandbox(req).await {
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
        match self.server.backend.delete_sandbox(&id).await {
            Ok(()) => {
                session.forget(&id).await;
                if let Some(scope) = &self.scope {
                    scope.released();
                }
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
                    // Held until the children are created; they are the parent's tenant's.
                    let _admission = match &scope {
                        Some(s) => s.admit_like(&id, Like::Fork { count }).await?,
                        None => None,
                    };
                    backend.fork_sandbox(&id, req).await
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
                    if pause {
                        let _claim = match &scope {
                            Some(s) => s.claim(Share::PausedSandboxes).await?,
                            None => None,
                        };
                        let paused = backend.pause_sandbox(&id).await;
                        if let Some(s) = &scope {
                            s.released();
                        }
                        paused
                    } else {
                        let _admission = match &scope {
                            Some(s) => s.admit_like(&id, Like::Resume).await?,
                            None => None,
                        };
                        backend.resume_sandbox(&id).await
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
                    let _claim = match &scope {
                        Some(s) => s.claim(Share::Snapshots).await?,
                        None => None,
                    };
                    backend.snapshot_sandbox(&id, CreateSnapshot { name }).await
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
    let mut task = {
        let (backend, id) = (backend.clone(), id.clone());
        let note = sandlot_service::Note::current().unwrap_or_default();
        tokio::spawn(
            note.scope(async move { backend.execute(&id, req).await })
                .in_current_span(),
        )
    };
    tokio::select! {
        joined = &mut task => return joined_result(joined).map(Some),
        () = caller_gone(ctx, session) => {}
    }
    tracing::info!(sandbox = %id, "MCP caller went away mid-execution; interrupting it");
    let deadline = tokio::time::Instant::now() + INTERRUPT_WAIT;
    loop {
        if let Err(e) = backend.interrupt(&id).await {
            tracing::debug!(sandbox = %id, error = %e, "interrupt failed");
        }
        tokio::select! {
            joined = &mut task => {
                if let Err(e) = joined_result(joined) {
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

fn joined_result(
    joined: Result<Result<ExecutionResult, Error>, tokio::task::JoinError>,
) -> Result<ExecutionResult, Error> {
    joined.unwrap_or_else(|e| {
        Err(Error::Api(sandlot_types::ApiError::new(
            sandlot_types::ErrorCode::Internal,
            format!("the execution task failed: {e}"),
        )))
    })
}

/// Consecutive text of one kind, gathered into one block.
#[derive(PartialEq, Eq, Clone, Copy)]
enum Stream {
    Stdout,
    Stderr,
}

struct Blocks {
    out: Vec<ContentBlock>,
    pending: Option<(Stream, String)>,
}

impl Blocks {
    fn text(&mut self, stream: Stream, text: &str) {
        match &mut self.pending {
            Some((s, buf)) if *s == stream => buf.push_str(text),
            _ => {
                self.flush();
                self.pending = Some((stream, text.to_string()));
            }
        }
    }

    fn flush(&mut self) {
        if let Some((stream, text)) = self.pending.take() {
            let text = match stream {
                Stream::Stdout => text,
                Stream::Stderr => format!("[stderr]\n{text}"),
            };
            self.out.push(ContentBlock::text(text));
        }
    }

    fn push(&mut self, block: ContentBlock) {
        self.flush();
        self.out.push(block);
    }
}

/// An execution as the model reads it: its outputs in order (stdout, stderr, figures as
/// images, other values as their text), then how it ended when that was not plainly.
pub fn render(r: &ExecutionResult, notes: Vec<String>) -> CallToolResult {
    let mut b = Blocks {
        out: notes.into_iter().map(ContentBlock::text).collect(),
        pending: None,
    };
    for event in &r.outputs {
        match event {
            OutputEvent::Stdout { text } => b.text(Stream::Stdout, text),
            OutputEvent::Stderr { text } => b.text(Stream::Stderr, text),
            OutputEvent::DisplayData { data, .. } | OutputEvent::Result { data, .. } => {
                if let Some(block) = bundle(data) {
                    b.push(block);
                }
            }
            OutputEvent::Error(e) => {
                let mut text = e.traceback.join("\n");
                let last = format!("{}: {}", e.name, e.value);
                if !text.contains(&last) {
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(&last);
                }
                b.push(ContentBlock::text(text));
            }
        }
    }
    b.flush();
    for (name, t) in [
        ("stdout", r.stdout_truncation),
        ("stderr", r.stderr_truncation),
    ] {
        if t.dropped_bytes > 0 {
            b.out.push(ContentBlock::text(format!(
                "[{name} truncated: {} bytes dropped]",
                t.dropped_bytes
            )));
        }
    }
    let ending = match r.end_state {
        EndState::Ok => None,
        EndState::Error => match (r.language, r.exit_code) {
            (Language::Bash, Some(code)) => Some(format!("[exit code {code}]")),
            _ => None,
        },
        EndState::Timeout => Some("[the execution timed out and was interrupted]".to_string()),
        EndState::Interrupted => Some("[the execution was interrupted]".to_string()),
        EndState::Oom => Some("[the sandbox ran out of memory]".to_string()),
        EndState::Killed => Some("[the sandbox's processes were killed]".to_string()),
    };
    if let Some(text) = ending {
        b.out.push(ContentBlock::text(text));
    }
    if let Some(restarted) = &r.restarted {
        b.out.push(ContentBlock::text(format!(
            "[the sandbox restarted ({}); lost: {}]",
            restarted.reason,
            restarted.lost.join(", ")
        )));
    }
    if b.out.is_empty() {
        b.out.push(ContentBlock::text("(no output)"));
    }
    if r.end_state == EndState::Ok {
        CallToolResult::success(b.out)
    } else {
        CallToolResult::error(b.out)
    }
}

/// One MIME bundle as one block: a PNG or JPEG figure as an image, anything else as its
/// plain-text form (a DataFrame's `text/plain` table rather than its HTML).
fn bundle(data: &BTreeMap<String, Value>) -> Option<ContentBlock> {
    for mime in ["image/png", "image/jpeg"] {
        if let Some(Value::String(b64)) = data.get(mime) {
            let b64: String = b64.chars().filter(|c| !c.is_ascii_whitespace()).collect();
            return Some(ContentBlock::image(b64, mime));
        }
    }
    for mime in ["text/plain", "text/markdown", "text/latex", "text/html"] {
        if let Some(v) = data.get(mime) {
            return Some(ContentBlock::text(text_of(v)));
        }
    }
    if let Some(v) = data.get("application/json") {
        return Some(ContentBlock::text(v.to_string()));
    }
    let kinds: Vec<&str> = data.keys().map(String::as_str).collect();
    (!kinds.is_empty())
        .then(|| ContentBlock::text(format!("[a value shown as {}]", kinds.join(", "))))
}

/// A MIME bundle's text: a string, or (as Jupyter allows) a list of lines.
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(lines) => lines.iter().filter_map(Value::as_str).collect(),
        other => other.to_string(),
    }
}

/// A file's bytes as a block: an image, text, or base64.
fn file_content(bytes: Vec<u8>) -> ContentBlock {
    let image = if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(b"\xff\xd8\xff") {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() > 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    };
    let b64 = || base64::engine::general_purpose::STANDARD.encode(&bytes);
    if let Some(mime) = image {
        return ContentBlock::image(b64(), mime);
    }
    match std::str::from_utf8(&bytes) {
        Ok(text) => ContentBlock::text(text.to_string()),
        Err(_) => ContentBlock::text(format!(
            "[binary file, {} bytes, base64-encoded]\n{}",
            bytes.len(),
            b64()
        )),
    }
}

fn entry_json(e: &FileEntry) -> Value {
    json!({ "path": e.path, "kind": e.kind, "size": e.size })
}

fn sandbox_json(sb: &Sandbox, own: Option<&str>) -> Value {
    let mut v = json!({
        "sandbox_id": sb.id,
        "state": sb.state.as_str(),
        "template": sb.template,
        "created_at": sb.created_at,
        "last_active_at": sb.last_active_at,
        "idle_timeout": sb.idle_timeout,
        "metadata": sb.metadata,
    });
    if own.is_some() {
        v["this_session"] = Value::Bool(own == Some(sb.id.as_str()));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::JsonObject;

    #[test]
    fn every_tool_has_an_object_schema() {
        let names: Vec<&str> = declarations().iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(
            names,
            [
                "run_python",
                "run_bash",
                "write_file",
                "read_file",
                "list_files",
                "create_sandbox",
                "list_sandboxes",
                "delete_sandbox",
                "fork_sandbox",
                "pause_sandbox",
                "resume_sandbox",
                "snapshot_sandbox"
            ]
        );
        for t in declarations() {
            let schema: &JsonObject = &t.input_schema;
            assert_eq!(schema.get("type"), Some(&json!("object")), "{}", t.name);
        }
        let run = &find("run_python").unwrap().input_schema;
        assert_eq!(run["required"], json!(["code"]));
        assert_eq!(run["additionalProperties"], json!(false));
    }

    #[test]
    fn figures_are_images_and_tables_are_text() {
        let png = BTreeMap::from([
            ("image/png".to_string(), json!("iVBORw0KGgo=\n")),
            ("text/plain".to_string(), json!("<Figure>")),
        ]);
        let Some(ContentBlock::Image(img)) = bundle(&png) else {
            panic!("not an image")
        };
        assert_eq!(img.data, "iVBORw0KGgo=");
        assert_eq!(img.mime_type, "image/png");
        let table = BTreeMap::from([
            ("text/html".to_string(), json!("<table></table>")),
            ("text/plain".to_string(), json!("   a\n0  1")),
        ]);
        let Some(ContentBlock::Text(t)) = bundle(&table) else {
            panic!("not text")
        };
        assert_eq!(t.text, "   a\n0  1");
    }

    #[test]
    fn binary_files_are_base64_and_text_is_text() {
        let Some(ContentBlock::Text(t)) = Some(file_content(b"a,b\n1,2\n".to_vec())) else {
            panic!()
        };
        assert_eq!(t.text, "a,b\n1,2\n");
        let ContentBlock::Text(t) = file_content(vec![0xff, 0x00, 0x01]) else {
            panic!()
        };
        assert!(t.text.contains("base64"), "{}", t.text);
        let ContentBlock::Image(i) = file_content(b"\x89PNG\r\n\x1a\nrest".to_vec()) else {
            panic!()
        };
        assert_eq!(i.mime_type, "image/png");
    }
}
