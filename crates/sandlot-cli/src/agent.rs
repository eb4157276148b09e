//! `sandlot agent`: a CodeAct loop against any OpenAI-compatible chat endpoint.
//!
//! The model gets the task and the `run_python` / `run_bash` tools (the declarations the SDK
//! ships, see [`crate::tools`]); each tool call runs in a sandbox of a running server, and its
//! outcome goes back as the tool's answer, written as the SDK's dispatcher writes it (stdout,
//! stderr, results, the error with its traceback, cut to budgets), so the model can read what
//! failed and repair it. A step is one request to the model; the loop ends when the model
//! answers without calling a tool, or fails at the step limit. Everything is shown on stderr as
//! it happens, the answer alone goes to stdout, and `--transcript` keeps every step as JSONL.
//!
//! A model's mistakes (arguments that are not JSON, an unknown tool, no code, code the server
//! refuses) are answered with an error tool message and the loop goes on; failures of the
//! endpoint or the server end the run with an error.

mod chat;
mod format;
mod sandbox;
mod trace;
mod transcript;

use crate::config;
use crate::tools;
use anyhow::Context;
use chat::{ChatClient, ChatError};
use clap::Args;
use format::{Budgets, Image, ToolText};
use sandbox::Remote;
use sandlot_types::Language;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Instant;
use trace::Trace;
use transcript::Transcript;

/// Exit status when the model was still calling tools at the step limit.
pub const EXIT_STEP_LIMIT: u8 = 3;

/// The API key's variable, read as OpenAI's own clients read it.
/// Most tool calls of one reply that run. A model (or an endpoint) that asks for thousands at
/// once gets the rest answered with an error instead of holding the run for thousands of
/// executions; every call still gets an answer, as the chat API requires.
pub const MAX_CALLS_PER_REPLY: usize = 32;

const API_KEY_VAR: &str = "OPENAI_API_KEY";

const SYSTEM_PROMPT: &str = "You are a careful assistant with a sandbox. Use the run_python tool \
(and run_bash for shell commands) to compute, check and explore instead of guessing; variables, \
imports and files persist between calls, and the working directory is /workspace. When a call \
fails, read the error and its traceback, fix the code and try again. When you are done, answer \
the user directly, without calling a tool.";

#[derive(Debug, Args)]
#[command(after_help = after_help())]
pub struct AgentArgs {
    /// The task, or `-` to read it from stdin
    #[arg(value_name = "TASK|-")]
    task: String,
    /// The chat endpoint's base URL, up to and including /v1 (its /chat/completions is called)
    #[arg(long, value_name = "URL")]
    base_url: String,
    /// The model name sent to the endpoint
    #[arg(long, value_name = "M")]
    model: String,
    /// Bearer token for the endpoint
    #[arg(long, value_name = "KEY", env = API_KEY_VAR, hide_env_values = true)]
    api_key: Option<String>,
    /// Most requests to the model; past it the run fails (exit status 3)
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    max_steps: u32,
    /// Write every step to this file as JSON lines
    #[arg(long, value_name = "FILE.jsonl")]
    transcript: Option<PathBuf>,
    /// Run in this existing sandbox (kept afterwards) instead of a new one (deleted afterwards)
    #[arg(long, value_name = "ID")]
    sandbox: Option<String>,
    /// Keep the sandbox the agent created, and print its id
    #[arg(long)]
    keep: bool,
    /// Upload a local file into the sandbox's /workspace before starting (repeatable)
    #[arg(long, value_name = "FILE")]
    upload: Vec<PathBuf>,
    /// The sandlot server
    #[arg(long, value_name = "URL", env = config::URL, default_value = config::DEFAULT_URL)]
    url: String,
    /// Seconds each request to the model may take
    #[arg(long, value_name = "S", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    model_timeout: u64,
    /// Seconds each execution may take [default: the server's]
    #[arg(long, value_name = "S")]
    timeout: Option<f64>,
    /// Sampling temperature sent to the model [default: the endpoint's]
    #[arg(long, value_name = "T")]
    temperature: Option<f64>,
    /// Replace the system prompt
    #[arg(long, value_name = "TEXT")]
    system: Option<String>,
    /// Also show the figures the code made to the model (for vision models), in a user message
    #[arg(long)]
    vision: bool,
    /// Show nothing but the answer
    #[arg(long, short)]
    quiet: bool,
}

fn after_help() -> String {
    format!(
        "A step is one request to the model. The steps, the code and the sandbox's output go to \
         stderr as they happen; the final answer alone goes to stdout.\n\n\
         Exit status: 0 answered, 1 error (the endpoint or the server failed), 2 usage error, \
         3 step limit reached, 130 interrupted.\n\n{}  {API_KEY_VAR:<18} bearer token for the model endpoint (--api-key)\n",
        config::env_help(&[config::URL])
    )
}

pub fn run(args: AgentArgs) -> anyhow::Result<u8> {
    crate::init_logging(config::DEFAULT_CLI_LOG);
    let task = if args.task == "-" {
        let mut task = String::new();
        std::io::stdin()
            .read_to_string(&mut task)
            .context("could not read the task from stdin")?;
        task
    } else {
        args.task.clone()
    };
    if task.trim().is_empty() {
        eprintln!("sandlot: error: the task is empty");
        return Ok(crate::EXIT_USAGE);
    }
    if let Some(t) = args.timeout.filter(|t| !t.is_finite() || *t <= 0.0) {
        eprintln!("sandlot: error: --timeout must be a positive number of seconds, not {t}");
        return Ok(crate::EXIT_USAGE);
    }
    crate::tokio_runtime()?.block_on(agent(args, task))
}

/// How a run ended.
enum Outcome {
    Answered(String),
    StepLimit,
    Failed(anyhow::Error),
    Cancelled,
}

async fn agent(args: AgentArgs, task: String) -> anyhow::Result<u8> {
    let chat = ChatClient::new(
        &args.base_url,
        &args.model,
        args.api_key.clone(),
        args.temperature,
        args.model_timeout,
    )?;
    // Files first: a transcript or upload that cannot be opened should not cost a sandbox.
    let mut transcript = Transcript::create(args.transcript.as_deref())?;
    let mut uploads = Vec::new();
    for path in &args.upload {
        let data =
            std::fs::read(path).with_context(|| format!("could not read {}", path.display()))?;
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .with_context(|| format!("{} has no usable file name", path.display()))?;
        uploads.push((name.to_owned(), data));
    }
    let mut trace = Trace::new(args.quiet);
    let remote = Remote::open(&args.url, args.sandbox.as_deref()).await?;
    let started = Instant::now();
    let mut run = Run {
        args: &args,
        chat: &chat,
        remote: &remote,
        transcript: &mut transcript,
        trace: &mut trace,
        steps: 0,
    };
    let outcome = tokio::select! {
        o = run.drive(&task, uploads) => o,
        _ = tokio::signal::ctrl_c() => Outcome::Cancelled,
    };
    let steps = run.steps;
    let keep = args.keep || !remote.owned;
    if !keep {
        remote.close().await;
    }
    let (status, detail) = match &outcome {
        Outcome::Answered(a) => ("answered", json!({ "answer": a })),
        Outcome::StepLimit => ("step_limit", json!({})),
        Outcome::Failed(e) => ("error", json!({ "error": format!("{e:#}") })),
        Outcome::Cancelled => ("cancelled", json!({})),
    };
    let mut end = json!({
        "status": status,
        "steps": steps,
        "sandbox_id": remote.id,
        "sandbox_kept": keep,
        "elapsed_ms": started.elapsed().as_secs_f64() * 1000.0,
    });
    if let (Some(end), Value::Object(mut more)) = (end.as_object_mut(), detail) {
        end.append(&mut more);
    }
    let written = transcript.record("end", end);
    if args.keep && remote.owned {
        trace.line(&format!("── the sandbox {} was kept", remote.id));
    }
    let code = match outcome {
        Outcome::Answered(answer) => {
            use std::io::IsTerminal;
            let mut out = std::io::stdout().lock();
            // The model's words are untrusted: no escape sequences on a terminal; a pipe or a
            // file gets them as they are.
            let answer = if out.is_terminal() {
                trace::printable(&answer)
            } else {
                answer
            };
            writeln!(out, "{}", answer.trim_end())?;
            out.flush()?;
            0
        }
        Outcome::StepLimit => {
            eprintln!(
                "sandlot: error: the model was still calling tools after {} steps (--max-steps {}); \
                 it did not answer{}",
                args.max_steps,
                args.max_steps,
                transcript
                    .path()
                    .map_or(String::new(), |p| format!(" (transcript: {})", p.display()))
            );
            EXIT_STEP_LIMIT
        }
        Outcome::Failed(e) => return Err(e),
        Outcome::Cancelled => {
            eprintln!(
                "sandlot: cancelled{}",
                if keep {
                    ""
                } else {
                    "; the sandbox was deleted"
                }
            );
            crate::run::EXIT_CANCELLED
        }
    };
    written?;
    Ok(code)
}

/// One run's state.
struct Run<'a> {
    args: &'a AgentArgs,
    chat: &'a ChatClient,
    remote: &'a Remote,
    transcript: &'a mut Transcript,
    trace: &'a mut Trace,
    steps: u32,
}

impl Run<'_> {
    async fn drive(&mut self, task: &str, uploads: Vec<(String, Vec<u8>)>) -> Outcome {
        match self.steps_until_done(task, uploads).await {
            Ok(o) => o,
            Err(e) => Outcome::Failed(e),
        }
    }

    async fn steps_until_done(
        &mut self,
        task: &str,
        uploads: Vec<(String, Vec<u8>)>,
    ) -> anyhow::Result<Outcome> {
        let args = self.args;
        let decls = tools::declarations();
        let tool_decls: Vec<Value> = decls
            .iter()
            .map(|d| tools::shape(d, tools::Format::Openai))
            .collect();
        let system = args.system.as_deref().unwrap_or(SYSTEM_PROMPT);
        let mut user = task.to_owned();
        let mut names = Vec::new();
        for (name, data) in uploads {
            let size = data.len();
            self.remote
                .upload(&name, data)
                .await
                .with_context(|| format!("could not upload {name}"))?;
            self.trace
                .line(&format!("── uploaded {name} ({size} bytes) to /workspace"));
            names.push(name);
        }
        if !names.is_empty() {
            user.push_str(&format!("\n\nFiles in /workspace: {}", names.join(", ")));
        }
        self.trace.line(&format!(
            "── sandbox {} · model {} · up to {} steps",
            self.remote.id, args.model, args.max_steps
        ));
        self.transcript.record(
            "start",
            json!({
                "task": task,
                "model": args.model,
                "base_url": args.base_url,
                "sandbox_id": self.remote.id,
                "sandbox_created": self.remote.owned,
                "max_steps": args.max_steps,
                "tools": decls.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
                "system": system,
                "uploads": names,
            }),
        )?;
        let mut messages = vec![
            json!({"role": "system", "content": system}),
            json!({"role": "user", "content": user}),
        ];
        let mut recorded = 0;
        for step in 1..=args.max_steps {
            self.steps = step;
            let reply = match self.chat.complete(&messages, &tool_decls).await {
                Ok(r) => r,
                Err(e) => return Err(step_error(step, e)),
            };
            self.transcript.record(
                "model",
                json!({
                    "step": step,
                    "messages": messages.len(),
                    "new_messages": &messages[recorded..],
                    "reply": reply.message,
                    "finish_reason": reply.finish_reason,
                    "usage": reply.usage,
                    "elapsed_ms": reply.elapsed.as_secs_f64() * 1000.0,
                }),
            )?;
            self.trace.step(step, args.max_steps, reply.elapsed);
            self.trace.model_text(&chat::content_text(&reply.message));
            let mut assistant = reply.message;
            let calls = assistant
                .get("tool_calls")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if calls.is_empty() {
                return Ok(Outcome::Answered(chat::content_text(&assistant)));
            }
            // Every call needs an id to be answered; some servers leave it out.
            let mut ids = Vec::with_capacity(calls.len());
            for (i, call) in calls.iter().enumerate() {
                let id = match call.get("id").and_then(Value::as_str) {
                    Some(id) if !id.is_empty() => id.to_owned(),
                    _ => {
                        let id = format!("call_{step}_{}", i + 1);
                        assistant["tool_calls"][i]["id"] = json!(id);
                        id
                    }
                };
                ids.push(id);
            }
            messages.push(assistant);
            recorded = messages.len();
            let mut images: Vec<Image> = Vec::new();
            let total = calls.len();
            for (i, (call, id)) in calls.iter().zip(ids).enumerate() {
                let over = (i >= MAX_CALLS_PER_REPLY).then(|| {
                    format!(
                        "one reply may make at most {MAX_CALLS_PER_REPLY} tool calls, \
                         and this one made {total}; ask again for what is left"
                    )
                });
                let out = self.tool_call(step, call, &id, over).await?;
                images.extend(out.images);
                messages.push(json!({"role": "tool", "tool_call_id": id, "content": out.text}));
            }
            if args.vision && !images.is_empty() {
                let mut parts =
                    vec![json!({"type": "text", "text": "Images produced by the last tool call:"})];
                parts.extend(
                    images.iter().map(
                        |img| json!({"type": "image_url", "image_url": {"url": img.data_url()}}),
                    ),
                );
                messages.push(json!({"role": "user", "content": parts}));
            }
        }
        Ok(Outcome::StepLimit)
    }

    /// Runs one tool call (or explains to the model why it cannot run) and records it.
    /// `refused` (why the call may not run) answers it without running it.
    async fn tool_call(
        &mut self,
        step: u32,
        call: &Value,
        id: &str,
        refused: Option<String>,
    ) -> anyhow::Result<ToolText> {
        let started = Instant::now();
        let function = call.get("function").cloned().unwrap_or(Value::Null);
        let name = function
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let arguments = function.get("arguments").cloned().unwrap_or(Value::Null);
        let mut record = json!({
            "step": step,
            "id": id,
            "name": name,
            "arguments": arguments,
        });
        let prepared = match refused {
            Some(why) => Err(why),
            None => prepare(&name, &arguments),
        };
        let out = match prepared {
            Err(problem) => {
                let out = ToolText::error(&problem);
                self.trace.rejected(&name, id, &problem);
                out
            }
            Ok((language, code)) => {
                record["language"] = json!(language);
                record["code"] = json!(code);
                self.trace.call(&name, id, &code);
                let trace = &mut *self.trace;
                let result = self
                    .remote
                    .execute(&code, language, self.args.timeout, |ev| trace.event(ev))
                    .await;
                match result {
                    Ok(ex) => {
                        self.trace.ended(&ex);
                        let out = format::format_execution(
                            &ex,
                            Budgets::default(),
                            format::IMAGE_NOT_SHOWN,
                            self.args.timeout,
                        );
                        record["execution"] = serde_json::to_value(&ex)?;
                        out
                    }
                    Err(e) => match sandbox::model_facing(&e) {
                        Some(api) => {
                            let why = format!(
                                "the sandbox rejected the code: {}: {}",
                                api.code.as_str(),
                                api.message
                            );
                            self.trace.rejected(&name, id, &why);
                            ToolText::error(&why)
                        }
                        None => {
                            return Err(e.context(format!("step {step}: running {name} ({id})")))
                        }
                    },
                }
            }
        };
        record["content"] = json!(out.text);
        record["is_error"] = json!(out.is_error);
        record["images"] = json!(out.images.len());
        record["elapsed_ms"] = json!(started.elapsed().as_secs_f64() * 1000.0);
        self.transcript.record("tool", record)?;
        Ok(out)
    }
}

fn step_error(step: u32, e: ChatError) -> anyhow::Error {
    anyhow::Error::new(e).context(format!("step {step}: the model request failed"))
}

/// The language and code of a call, or the message telling the model what is wrong with it
/// (the SDK dispatcher's `_prepare`, word for word where the languages allow).
fn prepare(name: &str, arguments: &Value) -> Result<(Language, String), String> {
    let decls = tools::declarations();
    let Some(decl) = decls.iter().find(|d| d.name == name) else {
        let names: Vec<&str> = decls.iter().map(|d| d.name.as_str()).collect();
        return Err(format!(
            "unknown tool {}; available: {}",
            py_repr(name),
            names.join(", ")
        ));
    };
    let language = match decl.language.as_str() {
        "bash" => Language::Bash,
        _ => Language::Python,
    };
    let args = match arguments {
        Value::Object(map) => map.clone(),
        Value::Null => Default::default(),
        Value::String(s) if s.is_empty() => Default::default(),
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(map)) => map,
            Ok(_) => {
                return Err(
                    "the tool arguments must be a JSON object like {\"code\": \"...\"}".into(),
                )
            }
            Err(e) => {
                return Err(format!(
                    "the tool arguments are not valid JSON ({e}); send {{\"code\": \"...\"}}"
                ))
            }
        },
        other => {
            return Err(format!(
                "unexpected tool arguments of type {}",
                json_type(other)
            ))
        }
    };
    match args.get("code") {
        Some(Value::String(code)) if !code.trim().is_empty() => Ok((language, code.clone())),
        _ => Err("the 'code' argument is required and must be a non-empty string".into()),
    }
}

/// A string as Python's `repr` shows it (quotes chosen the same way), for the messages the
/// SDK writes with `{name!r}`.
fn py_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::from(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_checked_as_the_sdk_checks_them() {
        let ok = prepare("run_python", &json!("{\"code\": \"1 + 1\"}")).unwrap();
        assert_eq!(ok, (Language::Python, "1 + 1".to_owned()));
        let ok = prepare("run_bash", &json!({"code": "ls"})).unwrap();
        assert_eq!(ok.0, Language::Bash);
        assert_eq!(
            prepare("rm_rf", &json!("{}")).unwrap_err(),
            "unknown tool 'rm_rf'; available: run_python, run_bash"
        );
        let e = prepare("run_python", &json!("{code: 1")).unwrap_err();
        assert!(
            e.starts_with("the tool arguments are not valid JSON ("),
            "{e}"
        );
        assert_eq!(
            prepare("run_python", &json!("[1]")).unwrap_err(),
            "the tool arguments must be a JSON object like {\"code\": \"...\"}"
        );
        for missing in [
            json!(""),
            json!("{\"cod\": \"x\"}"),
            json!({"code": "  "}),
            json!({"code": 3}),
        ] {
            assert_eq!(
                prepare("run_python", &missing).unwrap_err(),
                "the 'code' argument is required and must be a non-empty string"
            );
        }
    }

    #[test]
    fn repr_quotes_like_python() {
        assert_eq!(py_repr("a"), "'a'");
        assert_eq!(py_repr("it's"), "\"it's\"");
        assert_eq!(py_repr("a'\"b\n"), "'a\\'\"b\\n'");
    }
}
