//! E2B's code interpreter (port 49999) over sandlot's executions and code contexts:
//! `POST /execute` answers newline-delimited JSON events as the sandbox produces them
//! (`stdout`, `stderr`, `result` with one field per MIME type, `error`,
//! `number_of_executions`, then `end_of_execution`), and `/contexts` creates, lists, restarts
//! and deletes contexts.
//!
//! Languages: sandlot runs Python, Bash (`bash`, `sh`), JavaScript (`js`, `javascript`) and
//! TypeScript (`ts`, `typescript`); any other language E2B knows (r, java) is refused with 400.
//! A sandlot context holds a Python namespace, a Bash session and a JavaScript kernel; an E2B
//! context has one language, so a Bash, JavaScript or TypeScript context's id is the sandlot
//! context's id with `.bash`, `.js` or `.ts` appended (nothing to store; it survives restarts).
//! The listing shows the default context twice, as E2B's does: python and javascript.
//! Contexts start in `/home/user` (the workspace, mounted there too) or in the `cwd` they are
//! created with (a directory inside the sandbox: the driver moves into a context's directory
//! when it runs that context's cell, and back when another context's comes; its node starts
//! there).
//!
//! E2B executions carry no timeout (the client's read timeout bounds them), so they run up to
//! the server's longest execution timeout; a client that disconnects interrupts its execution.
//! `env_vars` apply to one execution: set before it and restored after it, by two executions
//! of the same language whose output is not shown.
//!
//! Every `/execute` passes the policy's `execute` gate first (its language, the code's size;
//! the `env_vars` bookkeeping around it is the server's, not gated); a denial is a 403 with
//! `policy_denied: <why>` as the body, in the interpreter's plain-text error shape.

use crate::auth::{self, check_sandbox};
use crate::error::Failure;
use crate::files::{envd_failure, HOME};
use crate::Ctx;
use axum::body::Body;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::{header::CONTENT_TYPE, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use bytes::Bytes;
use sandlot_runtime::{Runtime, RuntimeError};
use sandlot_service::execution::{self, Dropped, Events, ExecutionHandle, Step};
use sandlot_types::{ExecuteRequest, ExecutionResult, Language, OutputEvent};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The suffixes of a Bash, JavaScript and TypeScript context's E2B id.
const SUFFIXES: [(&str, Language); 3] = [
    (".bash", Language::Bash),
    (".js", Language::Javascript),
    (".ts", Language::Typescript),
];
/// The context executions run in when they name none.
const DEFAULT_CONTEXT: &str = "default";
/// How long a response stays silent before a `keepalive` line: writing is how a client that
/// went away is noticed (the server allows half-closed connections, so a read of EOF is not),
/// and so its execution interrupted. The SDKs ignore event types they do not know.
const KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(1);

pub(crate) fn routes() -> Router<Ctx> {
    Router::new()
        .route("/execute", post(execute))
        .route("/contexts", post(create_context).get(list_contexts))
        .route("/contexts/{ctx}", delete(delete_context))
        .route("/contexts/{ctx}/restart", post(restart_context))
        .route("/health", get(|| async { Json("OK") }))
}

/// What the interpreter keeps per sandbox: one E2B execution at a time (so a client that
/// disconnects interrupts its own execution and no other), the execution counts, and the
/// language each context was created with, when not Python (for listing).
#[derive(Default)]
pub(crate) struct Sessions {
    map: Mutex<HashMap<String, Arc<Session>>>,
}

#[derive(Default)]
struct Session {
    turn: Arc<tokio::sync::Mutex<()>>,
    counts: Mutex<HashMap<String, u64>>,
    languages: Mutex<HashMap<String, Language>>,
}

impl Sessions {
    fn get(&self, id: &str) -> Arc<Session> {
        lock(&self.map).entry(id.to_owned()).or_default().clone()
    }

    /// Forgets a sandbox that was killed.
    pub(crate) fn forget(&self, id: &str) {
        lock(&self.map).remove(id);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The code interpreter's errors: plain text, as E2B's interpreter answers them.
struct Plain(Failure);

impl IntoResponse for Plain {
    fn into_response(self) -> Response {
        self.0.plain()
    }
}

impl From<Failure> for Plain {
    fn from(f: Failure) -> Self {
        Self(f)
    }
}

impl From<auth::Denied> for Plain {
    fn from(d: auth::Denied) -> Self {
        Self(d.into())
    }
}

/// A runtime failure for sandbox `id` in the interpreter's terms: an unknown context is 404.
fn failure(id: &str, e: RuntimeError) -> Plain {
    match e {
        RuntimeError::NoContext { .. } => Plain(Failure::new(StatusCode::NOT_FOUND, e.to_string())),
        e => Plain(envd_failure(id, e)),
    }
}

/// An E2B language name as sandlot's.
fn language_of(name: Option<&str>) -> Result<Language, Failure> {
    let name = name
        .map(|s| s.trim().to_ascii_lowercase())
        .unwrap_or_default();
    match name.as_str() {
        "" | "python" | "python3" => Ok(Language::Python),
        "bash" | "sh" => Ok(Language::Bash),
        "js" | "javascript" | "node" | "nodejs" => Ok(Language::Javascript),
        "ts" | "typescript" => Ok(Language::Typescript),
        other => Err(Failure::bad_request(format!(
            "language {other:?} is not available: sandlot runs python, bash, javascript and typescript"
        ))),
    }
}

fn language_name(l: Language) -> &'static str {
    l.as_str()
}

/// An E2B context id as the sandlot context and its language.
fn context_of(e2b: &str) -> (String, Language) {
    SUFFIXES
        .iter()
        .find_map(|(suffix, lang)| Some((e2b.strip_suffix(suffix)?.to_owned(), *lang)))
        .unwrap_or_else(|| (e2b.to_owned(), Language::Python))
}

fn e2b_context(ctx: &str, lang: Language, cwd: Option<&str>) -> Value {
    let id = match SUFFIXES.iter().find(|(_, l)| *l == lang) {
        Some((suffix, _)) => format!("{ctx}{suffix}"),
        None => ctx.to_owned(),
    };
    json!({ "id": id, "language": language_name(lang), "cwd": cwd.unwrap_or(HOME) })
}

/// `POST /execute` body.
#[derive(Deserialize)]
struct ExecBody {
    code: String,
    #[serde(default)]
    context_id: Option<String>,
    #[serde(default)]
    language: Option<String>,
    #[serde(default)]
    env_vars: Option<BTreeMap<String, String>>,
}

async fn execute(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    b: Result<Json<ExecBody>, JsonRejection>,
) -> Result<Response, Plain> {
    // Running code needs the envd token (or the key): the traffic token opens ports only.
    let id = check_sandbox(&ctx, &headers)?;
    auth::require_everything(&ctx, &id, &headers)?;
    let Json(body) = b.map_err(|e| Plain(crate::error::bad_json(e)))?;
    if body.context_id.is_some() && body.language.is_some() {
        return Err(Plain(Failure::bad_request(
            "Only one of context_id or language can be provided",
        )));
    }
    let (context, language) = match body.context_id.as_deref().filter(|c| !c.is_empty()) {
        Some(c) => context_of(c),
        None => (
            DEFAULT_CONTEXT.to_owned(),
            language_of(body.language.as_deref())?,
        ),
    };
    let env = body.env_vars.unwrap_or_default();
    if let Some(bad) = env.keys().find(|k| !valid_env_name(k)) {
        return Err(Plain(Failure::bad_request(format!(
            "invalid environment variable name {bad:?}"
        ))));
    }
    crate::gates::Gate::open(&ctx, &headers, &id)
        .await
        .map_err(|e| failure(&id, e))?
        .execute(&body.code, language, Some(&context))
        .await
        .map_err(|e| Plain(Failure::from_api(&e)))?;
    let session = ctx.interp.get(&id);
    let req = ExecuteRequest {
        code: body.code,
        language,
        timeout: Some(ctx.rt.max_exec_timeout()),
        stream: false,
        context: Some(context.clone()),
        on_failure: Default::default(),
    };
    // A policy that requires rollback for what it allowed (issue 23) holds here too.
    let req = sandlot_service::trusted::apply_policy_rollback(req);
    let running = Arc::new(AtomicBool::new(false));
    // A client that goes away interrupts the execution (once the user's code runs: not the
    // env_vars set before it).
    let interrupt = {
        let (rt, id, running) = (ctx.rt.clone(), id.clone(), running.clone());
        Dropped::Interrupt(Box::new(move || {
            if running.load(Ordering::SeqCst) {
                tracing::debug!(sandbox = %id, "E2B client went away: interrupting its execution");
                tokio::spawn(async move {
                    let _ = rt.interrupt(&id).await;
                });
            }
        }))
    };
    let mut run = {
        let (rt, id, session) = (ctx.rt.clone(), id.clone(), session.clone());
        execution::start(
            move |tx| run_with_env(rt, id, session, req, env, tx, running),
            interrupt,
        )
    };
    // Held back until the first event or the end (for at most KEEPALIVE, after which the
    // stream starts and its keepalives notice a client that left), so a failure before the
    // code runs (unknown sandbox or context, too large) is an HTTP error the SDK raises as such.
    let (initial, finished) = match tokio::time::timeout(KEEPALIVE, run.next()).await {
        Err(_) => (vec![], None),
        Ok(Step::Event(ev)) => (vec![ev], None),
        Ok(Step::Done(result)) => {
            let early = run.drain();
            match result {
                Err(e) if early.is_empty() => return Err(failure(&id, e)),
                r => (early, Some(r)),
            }
        }
    };
    let count_key = format!("{context}/{}", language_name(language));
    let stream = ndjson(
        initial,
        run,
        finished,
        session,
        count_key,
        (ctx.rt.clone(), id.clone()),
    );
    Ok((
        [(CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(stream),
    )
        .into_response())
}

/// The execution, with `env` set before and restored after; one E2B execution per sandbox at
/// a time. `running` is set while the user's code runs (what a disconnect interrupts).
async fn run_with_env(
    rt: Runtime,
    id: String,
    session: Arc<Session>,
    req: ExecuteRequest,
    env: BTreeMap<String, String>,
    tx: Events,
    running: Arc<AtomicBool>,
) -> Result<ExecutionResult, RuntimeError> {
    let _turn = session.turn.clone().lock_owned().await;
    // The sandbox's command launcher, started before the first cell if need be: a command
    // started while this cell runs then starts at once instead of waiting for it.
    crate::process::warm(&rt, &id).await;
    let hidden = |code: String| ExecuteRequest {
        code,
        language: req.language,
        timeout: Some(30.0),
        stream: false,
        context: req.context.clone(),
        on_failure: Default::default(),
    };
    if !env.is_empty() {
        let set = hidden(set_env_code(req.language, &env));
        let r = rt.execute(&id, set, None).await?;
        if let Some(e) = r.error {
            return Err(RuntimeError::ContextRefused {
                kind: "setting env_vars",
                context: req.context.clone().unwrap_or_default(),
                reason: format!("{}: {}", e.name, e.value),
            });
        }
    }
    running.store(true, Ordering::SeqCst);
    let result = rt.execute(&id, req.clone(), Some(tx)).await;
    running.store(false, Ordering::SeqCst);
    if !env.is_empty() {
        let _ = rt
            .execute(&id, hidden(restore_env_code(req.language, &env)), None)
            .await;
    }
    result
}

fn valid_env_name(k: &str) -> bool {
    let mut chars = k.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        && k.len() <= 256
}

/// Code that saves the variables' values and sets them. Names are checked
/// ([`valid_env_name`]); values are quoted (JSON is a Python string literal; Bash gets single
/// quotes).
fn set_env_code(lang: Language, env: &BTreeMap<String, String>) -> String {
    match lang {
        Language::Python => {
            let keys: Vec<&String> = env.keys().collect();
            format!(
                "__import__('sys').__dict__['_e2b_saved_env'] = {{k: __import__('os').environ.get(k) for k in {keys}}}; __import__('os').environ.update({env})",
                keys = serde_json::to_string(&keys).unwrap_or_default(),
                env = serde_json::to_string(env).unwrap_or_default(),
            )
        }
        Language::Javascript | Language::Typescript => format!(
            "globalThis.__e2b_saved_env = Object.fromEntries({keys}.map((k) => [k, process.env[k]])); Object.assign(process.env, {env}); undefined",
            keys = serde_json::to_string(&env.keys().collect::<Vec<_>>()).unwrap_or_default(),
            env = serde_json::to_string(env).unwrap_or_default(),
        ),
        Language::Bash => env
            .iter()
            .map(|(k, v)| {
                format!(
                    "__e2b_had_{k}=${{{k}+x}}; __e2b_old_{k}=\"${k}\"; export {k}={}",
                    sh_quote(v)
                )
            })
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

/// Code that puts back what [`set_env_code`] saved.
fn restore_env_code(lang: Language, env: &BTreeMap<String, String>) -> String {
    match lang {
        Language::Python => "[__import__('os').environ.pop(k, None) if v is None else __import__('os').environ.__setitem__(k, v) for k, v in __import__('sys').__dict__.pop('_e2b_saved_env', {}).items()] and None".to_owned(),
        Language::Javascript | Language::Typescript => "for (const [k, v] of Object.entries(globalThis.__e2b_saved_env ?? {})) { if (v === undefined) delete process.env[k]; else process.env[k] = v } delete globalThis.__e2b_saved_env".to_owned(),
        Language::Bash => env
            .keys()
            .map(|k| {
                format!(
                    "if [ -n \"$__e2b_had_{k}\" ]; then export {k}=\"$__e2b_old_{k}\"; else unset {k}; fi; unset __e2b_had_{k} __e2b_old_{k}"
                )
            })
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

fn sh_quote(v: &str) -> String {
    format!("'{}'", v.replace('\'', "'\\''"))
}

/// The response body: each event as one JSON line, as it comes; then the execution count
/// and `end_of_execution`.
///
/// An execution that fails because its sandbox was killed (or is otherwise gone: `sandbox`
/// is checked after the failure) ends the body with an error instead: the connection is cut
/// without the last chunk, which the SDKs see as a transport error; they then ask envd's
/// `/health` (502 for a gone sandbox) and raise "the sandbox was killed while the request
/// was in progress", as against E2B, instead of returning an execution that looks finished.
fn ndjson(
    initial: Vec<OutputEvent>,
    mut run: ExecutionHandle<RuntimeError>,
    finished: Option<Result<ExecutionResult, RuntimeError>>,
    session: Arc<Session>,
    count_key: String,
    sandbox: (Runtime, String),
) -> impl futures::Stream<Item = Result<Bytes, SandboxGone>> + Send {
    async_stream::stream! {
        let mut saw_error = false;
        for ev in initial {
            saw_error |= matches!(ev, OutputEvent::Error(_));
            yield Ok(line(&event_json(&ev)));
        }
        let result = match finished {
            Some(r) => r,
            None => loop {
                match tokio::time::timeout(KEEPALIVE, run.next()).await {
                    Ok(Step::Event(ev)) => {
                        saw_error |= matches!(ev, OutputEvent::Error(_));
                        yield Ok(line(&event_json(&ev)));
                    }
                    Ok(Step::Done(r)) => break r,
                    Err(_) => yield Ok(Bytes::from_static(b"{\"type\":\"keepalive\"}\n")),
                }
            },
        };
        for ev in run.drain() {
            saw_error |= matches!(ev, OutputEvent::Error(_));
            yield Ok(line(&event_json(&ev)));
        }
        // A kill ends the execution as its processes die (`SandboxDied`) or as a failure; the
        // registry no longer has the sandbox by then (the kill removes it first).
        let died = match &result {
            Ok(r) => !r.sandbox_alive,
            Err(_) => true,
        };
        if died {
            let (rt, id) = &sandbox;
            if matches!(rt.get_sandbox(id).await, Err(ref e) if gone(e)) {
                tracing::debug!(sandbox = %id, "E2B execution's sandbox is gone: cutting its stream");
                yield Err(SandboxGone);
                return;
            }
        }
        match result {
            Ok(r) => {
                if let (Some(e), false) = (&r.error, saw_error) {
                    yield Ok(line(&error_json(&e.name, &e.value, &e.traceback.join("\n"))));
                }
                let n = {
                    let mut counts = lock(&session.counts);
                    let n = counts.entry(count_key).or_insert(0);
                    *n += 1;
                    *n
                };
                yield Ok(line(&json!({ "type": "number_of_executions", "execution_count": n })));
            }
            Err(e) => {
                let f = Failure::runtime(e);
                yield Ok(line(&error_json(f.code, &f.message, "")));
            }
        }
        yield Ok(line(&json!({ "type": "end_of_execution" })));
    }
}

/// Why an execution's body ends without its last chunk: its sandbox was killed meanwhile.
#[derive(Debug, thiserror::Error)]
#[error("the sandbox was killed while the execution ran")]
pub(crate) struct SandboxGone;

/// Whether a runtime failure says the sandbox no longer exists.
fn gone(e: &RuntimeError) -> bool {
    matches!(
        e,
        RuntimeError::SandboxNotFound { .. } | RuntimeError::SandboxGone { .. }
    )
}

fn line(v: &Value) -> Bytes {
    let mut s = v.to_string();
    s.push('\n');
    Bytes::from(s)
}

fn error_json(name: &str, value: &str, traceback: &str) -> Value {
    json!({ "type": "error", "name": name, "value": value, "traceback": traceback })
}

fn event_json(ev: &OutputEvent) -> Value {
    let now = sandlot_runtime::now_rfc3339();
    match ev {
        OutputEvent::Stdout { text } => json!({ "type": "stdout", "text": text, "timestamp": now }),
        OutputEvent::Stderr { text } => json!({ "type": "stderr", "text": text, "timestamp": now }),
        OutputEvent::Result { data, .. } => result_json(data, true),
        OutputEvent::DisplayData { data, .. } => result_json(data, false),
        OutputEvent::Error(e) => error_json(&e.name, &e.value, &e.traceback.join("\n")),
    }
}

/// A MIME bundle as E2B's `result` event: one field per known type, the rest in `extra`. The
/// driver's structured data (a figure's chart, a DataFrame's columns: `python/sandlot_runtime/
/// charts.py`) become E2B's `chart` and `data` fields; so do E2B's own `e2b/chart` and
/// `e2b/data`, which code written for E2B's kernel may publish itself. Those two fields are
/// objects in E2B's shape; anything else a cell published under their MIME types stays in
/// `extra`, where the SDKs do not try to parse it as a chart.
fn result_json(data: &BTreeMap<String, Value>, main: bool) -> Value {
    let mut out = Map::new();
    out.insert("type".into(), "result".into());
    let mut extra = Map::new();
    for (mime, value) in data {
        let field = match mime.as_str() {
            "text/plain" => "text",
            "text/html" => "html",
            "text/markdown" => "markdown",
            "image/svg+xml" => "svg",
            "image/png" => "png",
            "image/jpeg" => "jpeg",
            "application/pdf" => "pdf",
            "text/latex" => "latex",
            "application/json" => "json",
            "application/javascript" => "javascript",
            "application/vnd.sandlot.data+json" | "e2b/data" => "data",
            "application/vnd.sandlot.chart+json" | "e2b/chart" => "chart",
            _ => {
                extra.insert(mime.clone(), value.clone());
                continue;
            }
        };
        let value = match (field, value) {
            // E2B shows a string result without its quotes.
            ("text", Value::String(s)) => Value::String(unquote(s).to_owned()),
            ("chart" | "data", v) if !v.is_object() => {
                extra.insert(mime.clone(), value.clone());
                continue;
            }
            _ => value.clone(),
        };
        out.insert(field.into(), value);
    }
    out.insert("is_main_result".into(), main.into());
    out.insert("extra".into(), Value::Object(extra));
    Value::Object(out)
}

fn unquote(s: &str) -> &str {
    let quoted = s.len() >= 2
        && ((s.starts_with('\'') && s.ends_with('\'')) || (s.starts_with('"') && s.ends_with('"')));
    if quoted {
        &s[1..s.len() - 1]
    } else {
        s
    }
}

/// `POST /contexts` body.
#[derive(Deserialize, Default)]
struct NewContext {
    #[serde(default)]
    language: Option<String>,
    #[serde(default)]
    cwd: Option<String>,
}

async fn create_context(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    b: Result<Json<NewContext>, JsonRejection>,
) -> Result<Response, Plain> {
    let id = check_sandbox(&ctx, &headers)?;
    let req = match b {
        Ok(Json(r)) => r,
        Err(JsonRejection::MissingJsonContentType(_)) => NewContext::default(),
        Err(e) => return Err(Plain(crate::error::bad_json(e))),
    };
    let lang = language_of(req.language.as_deref())?;
    // E2B's contexts start in the user's home unless told otherwise; `~` is that home.
    let cwd = match req.cwd.as_deref().map(str::trim) {
        None | Some("" | "~") => HOME.to_owned(),
        Some(c) => match c.strip_prefix("~/") {
            Some(rest) => format!("{HOME}/{rest}"),
            None => c.to_owned(),
        },
    };
    let created = ctx
        .rt
        .create_context(&id, Some(&cwd))
        .await
        .map_err(|e| failure(&id, e))?;
    if lang != Language::Python {
        lock(&ctx.interp.get(&id).languages).insert(created.id.clone(), lang);
    }
    Ok(Json(e2b_context(&created.id, lang, created.cwd.as_deref())).into_response())
}

async fn list_contexts(State(ctx): State<Ctx>, headers: HeaderMap) -> Result<Response, Plain> {
    let id = check_sandbox(&ctx, &headers)?;
    let list = ctx
        .rt
        .list_contexts(&id)
        .await
        .map_err(|e| failure(&id, e))?;
    let languages = lock(&ctx.interp.get(&id).languages).clone();
    let mut out: Vec<Value> = Vec::with_capacity(list.len() + 1);
    for c in &list {
        let lang = languages.get(&c.id).copied().unwrap_or(Language::Python);
        out.push(e2b_context(&c.id, lang, c.cwd.as_deref()));
        // E2B's sandboxes start with a Python and a JavaScript context: sandlot's default
        // context is both.
        if c.id == DEFAULT_CONTEXT {
            out.push(e2b_context(&c.id, Language::Javascript, c.cwd.as_deref()));
        }
    }
    Ok(Json(out).into_response())
}

async fn delete_context(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    Path(e2b): Path<String>,
) -> Result<Response, Plain> {
    let id = check_sandbox(&ctx, &headers)?;
    let (c, _) = context_of(&e2b);
    ctx.rt
        .delete_context(&id, &c)
        .await
        .map_err(|e| failure(&id, e))?;
    lock(&ctx.interp.get(&id).languages).remove(&c);
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn restart_context(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    Path(e2b): Path<String>,
) -> Result<Response, Plain> {
    let id = check_sandbox(&ctx, &headers)?;
    let (c, _) = context_of(&e2b);
    ctx.rt
        .restart_context(&id, &c)
        .await
        .map_err(|e| failure(&id, e))?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_map_mime_types_to_fields() {
        let mut data = BTreeMap::new();
        data.insert("text/plain".to_owned(), json!("'hi'"));
        data.insert("image/png".to_owned(), json!("iVBOR"));
        data.insert("application/x-thing".to_owned(), json!(1));
        let v = result_json(&data, true);
        assert_eq!(v["text"], "hi");
        assert_eq!(v["png"], "iVBOR");
        assert_eq!(v["is_main_result"], true);
        assert_eq!(v["extra"]["application/x-thing"], 1);
    }

    #[test]
    fn charts_and_frame_data_are_fields_not_extra() {
        let mut data = BTreeMap::new();
        data.insert("image/png".to_owned(), json!("iVBOR"));
        data.insert(
            "application/vnd.sandlot.chart+json".to_owned(),
            json!({"type": "line", "title": null, "elements": []}),
        );
        let v = result_json(&data, false);
        assert_eq!(v["chart"]["type"], "line");
        assert_eq!(v["extra"], json!({}));
        let mut data = BTreeMap::new();
        data.insert(
            "application/vnd.sandlot.data+json".to_owned(),
            json!({"a": [1, 2, 3]}),
        );
        data.insert("e2b/chart".to_owned(), json!({"type": "bar"}));
        let v = result_json(&data, true);
        assert_eq!(v["data"]["a"], json!([1, 2, 3]));
        assert_eq!(v["chart"]["type"], "bar");
        assert_eq!(v["extra"], json!({}));
    }

    #[test]
    fn a_chart_that_is_not_an_object_stays_in_extra() {
        // A cell can publish anything under these MIME types (display(..., raw=True)).
        let mut data = BTreeMap::new();
        data.insert(
            "application/vnd.sandlot.chart+json".to_owned(),
            json!("not a chart"),
        );
        data.insert("e2b/data".to_owned(), json!([1, 2]));
        let v = result_json(&data, false);
        assert!(v.get("chart").is_none() && v.get("data").is_none());
        assert_eq!(
            v["extra"]["application/vnd.sandlot.chart+json"],
            "not a chart"
        );
        assert_eq!(v["extra"]["e2b/data"], json!([1, 2]));
    }

    #[test]
    fn languages_and_contexts() {
        assert_eq!(language_of(None).unwrap(), Language::Python);
        assert_eq!(language_of(Some("Bash")).unwrap(), Language::Bash);
        assert_eq!(language_of(Some("js")).unwrap(), Language::Javascript);
        assert_eq!(
            language_of(Some("TypeScript")).unwrap(),
            Language::Typescript
        );
        assert!(language_of(Some("r")).is_err() && language_of(Some("java")).is_err());
        assert_eq!(context_of("ctx_1.bash"), ("ctx_1".into(), Language::Bash));
        assert_eq!(
            context_of("ctx_1.js"),
            ("ctx_1".into(), Language::Javascript)
        );
        assert_eq!(
            context_of("ctx_1.ts"),
            ("ctx_1".into(), Language::Typescript)
        );
        assert_eq!(e2b_context("c", Language::Typescript, None)["id"], "c.ts");
        assert_eq!(
            e2b_context("c", Language::Javascript, None)["language"],
            "javascript"
        );
        assert_eq!(context_of("ctx_1"), ("ctx_1".into(), Language::Python));
    }

    #[test]
    fn env_code_quotes_values() {
        let mut env = BTreeMap::new();
        env.insert("A".to_owned(), "it's".to_owned());
        assert!(set_env_code(Language::Bash, &env).contains("export A='it'\\''s'"));
        assert!(set_env_code(Language::Python, &env).contains(r#"{"A":"it's"}"#));
        assert!(set_env_code(Language::Javascript, &env)
            .contains(r#"Object.assign(process.env, {"A":"it's"})"#));
        assert!(!valid_env_name("1A") && !valid_env_name("A-B") && valid_env_name("_a1"));
    }
}
