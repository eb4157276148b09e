//! `sandlot run`: one execution in a fresh sandbox, on a server (`--url`) or in an embedded
//! runtime, printed the way a person reads it (or as JSON), with an exit code that says how it
//! ended.

use crate::config::Dirs;
use crate::setup;
use anyhow::Context;
use sandlot_client::{Client, Streamed};
use sandlot_runtime::Runtime;
use sandlot_types::{
    CreateSandbox, EndState, ExecuteRequest, ExecutionResult, OutputEvent, Sandbox,
};
use serde_json::Value;
use std::collections::BTreeMap;
use std::future::Future;
use std::io::Write;
use tokio::sync::mpsc;

/// Exit status of `sandlot run` for an execution that ended in `state`.
pub fn exit_status(state: EndState) -> u8 {
    match state {
        EndState::Ok => 0,
        EndState::Error => 1,
        EndState::Timeout => 124,
        EndState::Interrupted => 130,
        EndState::Oom | EndState::Killed => 137,
    }
}

/// Exit status when the user stopped `sandlot run` with Ctrl-C.
pub const EXIT_CANCELLED: u8 = 130;

/// Where the code runs.
pub enum Target {
    Server(String),
    Embedded(Dirs),
}

/// How an execution ended, from `sandlot run`'s side.
enum Outcome {
    Finished(Box<ExecutionResult>),
    /// Ctrl-C: the sandbox was deleted, taking the execution with it.
    Cancelled,
}

pub async fn run(target: Target, req: ExecuteRequest, json: bool) -> anyhow::Result<u8> {
    let mut printer = Printer::new(json);
    let outcome = match target {
        Target::Server(url) => run_on_server(&url, req, &mut printer).await?,
        Target::Embedded(dirs) => run_embedded(&dirs, req, &mut printer).await?,
    };
    Ok(match outcome {
        Outcome::Finished(result) => {
            printer.finish(&result)?;
            exit_status(result.end_state)
        }
        Outcome::Cancelled => {
            eprintln!("sandlot: cancelled; the sandbox was deleted");
            EXIT_CANCELLED
        }
    })
}

/// Runs `fut` unless Ctrl-C comes first.
async fn unless_cancelled<F>(fut: F) -> anyhow::Result<Outcome>
where
    F: Future<Output = anyhow::Result<ExecutionResult>>,
{
    tokio::select! {
        r = fut => r.map(|r| Outcome::Finished(Box::new(r))),
        _ = tokio::signal::ctrl_c() => Ok(Outcome::Cancelled),
    }
}

// ---------------------------------------------------------------------------------------------
// In-process.

async fn run_embedded(
    dirs: &Dirs,
    req: ExecuteRequest,
    printer: &mut Printer,
) -> anyhow::Result<Outcome> {
    // The runtime's state lives in a private directory for this one run: its start-up recovery
    // must never touch the sandboxes of a server using the same data dir. The Python
    // environment is the shared one.
    std::fs::create_dir_all(&dirs.data_dir)
        .with_context(|| format!("could not create the data dir {}", dirs.data_dir.display()))?;
    let state = tempfile::Builder::new()
        .prefix("run-")
        .tempdir_in(&dirs.data_dir)
        .with_context(|| format!("could not create a run dir in {}", dirs.data_dir.display()))?;
    let (rt, _) = setup::start_runtime(state.path(), &dirs.env_dir, Default::default()).await?;
    let outcome = async {
        // Runtime failures read as the API reports them: stable code, then message.
        let sandbox = rt
            .create_sandbox(CreateSandbox::default())
            .await
            .map_err(sandlot_service::api_error)?;
        let outcome = unless_cancelled(execute_embedded(&rt, &sandbox.id, req, printer)).await;
        if let Err(e) = rt.delete_sandbox(&sandbox.id).await {
            tracing::warn!(error = %e, "could not delete the sandbox");
        }
        outcome
    }
    .await;
    rt.shutdown().await;
    outcome
}

async fn execute_embedded(
    rt: &Runtime,
    id: &str,
    req: ExecuteRequest,
    printer: &mut Printer,
) -> anyhow::Result<ExecutionResult> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let exec = rt.execute(id, req, Some(tx));
    tokio::pin!(exec);
    loop {
        tokio::select! {
            biased;
            Some(ev) = rx.recv() => printer.event(&ev)?,
            result = &mut exec => {
                while let Ok(ev) = rx.try_recv() {
                    printer.event(&ev)?;
                }
                return Ok(result.map_err(sandlot_service::api_error)?);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Over HTTP.

async fn run_on_server(
    url: &str,
    req: ExecuteRequest,
    printer: &mut Printer,
) -> anyhow::Result<Outcome> {
    let client = crate::client::connect(url)?;
    let sandbox: Sandbox = client
        .post_json("/v1/sandboxes", &CreateSandbox::default())
        .await?;
    let outcome = unless_cancelled(execute_on_server(&client, &sandbox.id, req, printer)).await;
    if let Err(e) = client
        .delete(&format!("/v1/sandboxes/{}", sandbox.id))
        .await
    {
        tracing::warn!(error = %e, "could not delete the sandbox");
    }
    outcome
}

/// Runs with output streamed so it shows as it is produced. The stream has no time bound of
/// its own: the server ends the execution at its timeout, and Ctrl-C ends the wait.
async fn execute_on_server(
    client: &Client,
    id: &str,
    req: ExecuteRequest,
    printer: &mut Printer,
) -> anyhow::Result<ExecutionResult> {
    let req = ExecuteRequest {
        context: None,
        on_failure: Default::default(),
        ..req
    };
    let mut stream = client.execute_stream(id, req).await?;
    loop {
        match stream.next().await? {
            Streamed::Output(ev) => printer.event(&ev)?,
            Streamed::Done(result) => return Ok(*result),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Output.

/// Prints events as they arrive: stdout to stdout, stderr and tracebacks to stderr, rich values
/// as their text or a placeholder. With `--json`, prints only the final result, as JSON.
struct Printer {
    json: bool,
    /// Whether stdout is at the start of a line, so a value printed after partial output starts
    /// on a line of its own.
    at_line_start: bool,
}

impl Printer {
    fn new(json: bool) -> Self {
        Self {
            json,
            at_line_start: true,
        }
    }

    fn event(&mut self, ev: &OutputEvent) -> std::io::Result<()> {
        if self.json {
            return Ok(());
        }
        match ev {
            OutputEvent::Stdout { text } => self.stdout(text),
            OutputEvent::Stderr { text } => {
                let mut err = std::io::stderr().lock();
                err.write_all(text.as_bytes())?;
                err.flush()
            }
            OutputEvent::DisplayData { data, .. } => self.line(&render_display(data)),
            OutputEvent::Result { data, .. } => self.line(&render_result(data)),
            OutputEvent::Error(e) => {
                let mut err = std::io::stderr().lock();
                if e.traceback.is_empty() {
                    writeln!(err, "{}: {}", e.name, e.value)?;
                } else {
                    for line in &e.traceback {
                        writeln!(err, "{}", line.trim_end_matches('\n'))?;
                    }
                }
                err.flush()
            }
        }
    }

    fn stdout(&mut self, text: &str) -> std::io::Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())?;
        out.flush()?;
        self.at_line_start = text.ends_with('\n');
        Ok(())
    }

    fn line(&mut self, text: &str) -> std::io::Result<()> {
        let mut s = String::new();
        if !self.at_line_start {
            s.push('\n');
        }
        s.push_str(text);
        if !text.ends_with('\n') {
            s.push('\n');
        }
        self.stdout(&s)
    }

    fn finish(&mut self, result: &ExecutionResult) -> anyhow::Result<()> {
        if self.json {
            let mut out = std::io::stdout().lock();
            serde_json::to_writer_pretty(&mut out, result)?;
            writeln!(out)?;
            out.flush()?;
            return Ok(());
        }
        if !self.at_line_start {
            self.stdout("\n")?;
        }
        for (name, t) in [
            ("stdout", result.stdout_truncation),
            ("stderr", result.stderr_truncation),
        ] {
            if t.dropped_bytes > 0 {
                eprintln!(
                    "sandlot: {name} truncated: {} bytes kept, {} dropped",
                    t.kept_bytes, t.dropped_bytes
                );
            }
        }
        if let Some(note) = end_note(result) {
            eprintln!("sandlot: {note}");
        }
        Ok(())
    }
}

/// What a person should be told about how the execution ended, beyond its own output.
fn end_note(result: &ExecutionResult) -> Option<String> {
    let lost = if result.sandbox_alive {
        ""
    } else {
        "; the sandbox did not survive"
    };
    match result.end_state {
        EndState::Ok | EndState::Error => None,
        EndState::Timeout => Some(format!(
            "timed out after {:.1} s{lost}",
            result.duration_ms / 1000.0
        )),
        EndState::Interrupted => Some("interrupted".into()),
        EndState::Oom => Some(format!(
            "out of memory: the sandbox hit its memory limit{lost}"
        )),
        EndState::Killed => Some(format!("killed{lost}")),
    }
}

/// A result: its text, else a placeholder for its richest value.
fn render_result(data: &BTreeMap<String, Value>) -> String {
    match data.get("text/plain") {
        Some(Value::String(text)) => text.clone(),
        _ => render_display(data),
    }
}

/// Display data: a placeholder for an image (a terminal cannot show it), else its text, else a
/// placeholder for whatever it holds.
fn render_display(data: &BTreeMap<String, Value>) -> String {
    if let Some((mime, value)) = data.iter().find(|(m, _)| m.starts_with("image/")) {
        return placeholder(mime, value);
    }
    if let Some(Value::String(text)) = data.get("text/plain") {
        return text.clone();
    }
    data.iter()
        .map(|(m, v)| placeholder(m, v))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `[image/png 12.3 KiB]`.
fn placeholder(mime: &str, value: &Value) -> String {
    format!("[{mime} {}]", human_size(value_size(mime, value)))
}

/// Bytes the value stands for: binary types are base64 strings.
fn value_size(mime: &str, value: &Value) -> u64 {
    match value {
        Value::String(s) if is_base64_mime(mime) => {
            let len = s.bytes().filter(|b| !b.is_ascii_whitespace()).count() as u64;
            let padding = s
                .trim_end()
                .bytes()
                .rev()
                .take_while(|b| *b == b'=')
                .count() as u64;
            (len / 4 * 3).saturating_sub(padding)
        }
        Value::String(s) => s.len() as u64,
        other => other.to_string().len() as u64,
    }
}

fn is_base64_mime(mime: &str) -> bool {
    mime.starts_with("image/") && mime != "image/svg+xml"
}

fn human_size(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    if b < KIB {
        format!("{bytes} B")
    } else if b < KIB * KIB {
        format!("{:.1} KiB", b / KIB)
    } else {
        format!("{:.1} MiB", b / (KIB * KIB))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bundle(pairs: &[(&str, Value)]) -> BTreeMap<String, Value> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    #[test]
    fn exit_statuses() {
        assert_eq!(exit_status(EndState::Ok), 0);
        assert_eq!(exit_status(EndState::Error), 1);
        assert_eq!(exit_status(EndState::Timeout), 124);
        assert_eq!(exit_status(EndState::Interrupted), 130);
        assert_eq!(exit_status(EndState::Oom), 137);
        assert_eq!(exit_status(EndState::Killed), 137);
    }

    #[test]
    fn images_become_placeholders() {
        // 12.3 KiB of PNG as base64.
        let png = "A".repeat(16796);
        let data = bundle(&[
            ("image/png", json!(png)),
            ("text/plain", json!("<Figure size 640x480>")),
        ]);
        assert_eq!(render_display(&data), "[image/png 12.3 KiB]");
        let data = bundle(&[("image/png", json!("iVBORw0KGgo="))]);
        assert_eq!(render_display(&data), "[image/png 8 B]");
    }

    #[test]
    fn text_is_preferred_where_it_says_enough() {
        let data = bundle(&[
            ("text/html", json!("<table/>")),
            ("text/plain", json!("   a\n0  1")),
        ]);
        assert_eq!(render_display(&data), "   a\n0  1");
        assert_eq!(render_result(&bundle(&[("text/plain", json!("42"))])), "42");
        let data = bundle(&[("application/json", json!({"a": 1}))]);
        assert_eq!(render_result(&data), "[application/json 7 B]");
    }

    #[test]
    fn sizes_read_as_a_person_would() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(1023), "1023 B");
        assert_eq!(human_size(12595), "12.3 KiB");
        assert_eq!(human_size(3 << 20), "3.0 MiB");
    }
}
