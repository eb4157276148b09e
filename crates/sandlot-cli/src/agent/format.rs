//! What the model reads after a tool call: a port of the Python SDK's
//! `sandlot.tools.format_execution`, rule for rule, so that an agent sees the same text
//! whether it runs through the SDK's dispatcher or through `sandlot agent` (the SDK's tests
//! compare the two on the same executions).
//!
//! stdout and stderr share one budget (cut in the middle, with a note of what was dropped),
//! displays and the last expression's value have their own, a traceback keeps its tail; images
//! are noted in the text (chat tool messages cannot carry them) and handed back apart.

use sandlot_types::{EndState, ExecutionResult, Language, OutputEvent, Truncation};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Budgets, in characters, as the SDK's defaults.
#[derive(Debug, Clone, Copy)]
pub struct Budgets {
    pub output: usize,
    pub result: usize,
    pub traceback: usize,
    pub images: usize,
}

impl Default for Budgets {
    fn default() -> Self {
        Self {
            output: 6000,
            result: 3000,
            traceback: 4000,
            images: 4,
        }
    }
}

/// The note ending an image's line when the images do not reach the model with the text (the
/// SDK's `_OPENAI_IMAGE_NOTE`).
pub const IMAGE_NOT_SHOWN: &str =
    "images cannot be shown in a tool message; it is not visible here";

/// An image an execution produced, base64-encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub media_type: String,
    pub data: String,
}

impl Image {
    pub fn data_url(&self) -> String {
        format!("data:{};base64,{}", self.media_type, self.data)
    }
}

/// The model-facing text of one tool call and the images it produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolText {
    pub text: String,
    pub images: Vec<Image>,
    pub is_error: bool,
}

impl ToolText {
    /// A call that could not run (bad arguments, unknown tool): the SDK's `[error]` section.
    pub fn error(message: &str) -> Self {
        Self {
            text: format!("[error]\n{message}"),
            images: Vec::new(),
            is_error: true,
        }
    }
}

/// `format_execution(ex, image_note=..., timeout=...)` of the SDK.
pub fn format_execution(
    ex: &ExecutionResult,
    budgets: Budgets,
    image_note: &str,
    timeout: Option<f64>,
) -> ToolText {
    let mut parts: Vec<String> = Vec::new();
    let mut images: Vec<Image> = Vec::new();
    let mut dropped_images = 0usize;

    let (out_budget, err_budget) = split_budget(&ex.stdout, &ex.stderr, budgets.output);
    for (label, stream, budget, trunc) in [
        ("stdout", &ex.stdout, out_budget, ex.stdout_truncation),
        ("stderr", &ex.stderr, err_budget, ex.stderr_truncation),
    ] {
        if !stream.is_empty() || trunc.dropped_bytes > 0 {
            let mut section = clip(stream, budget, label, 0.5)
                .trim_end_matches('\n')
                .to_owned();
            if trunc.dropped_bytes > 0 {
                let Truncation { dropped_bytes, .. } = trunc;
                let _ = write!(
                    section,
                    "\n[... the server dropped {dropped_bytes} more bytes of {label} over its output budget ...]"
                );
            }
            parts.push(format!("[{label}]\n{section}"));
        }
    }

    let mut add_images = |data: &BTreeMap<String, Value>, parts: &mut Vec<String>| -> bool {
        let mut found = false;
        for mime in ["image/png", "image/jpeg"] {
            let Some(b64) = data.get(mime).filter(|v| !v.is_null()).map(b64) else {
                continue;
            };
            found = true;
            if images.len() >= budgets.images {
                dropped_images += 1;
                continue;
            }
            let img = Image {
                media_type: mime.to_owned(),
                data: b64,
            };
            parts.push(format!(
                "[image {}: {} — {image_note}]",
                images.len() + 1,
                describe(&img)
            ));
            images.push(img);
            break; // one image per result is enough
        }
        found
    };

    let mut main: Option<&BTreeMap<String, Value>> = None;
    for ev in &ex.outputs {
        match ev {
            OutputEvent::DisplayData { data, .. } => {
                if add_images(data, &mut parts) {
                    continue;
                }
                let text = display_text(data);
                if let Some(text) = text.filter(|t| !t.is_empty()) {
                    parts.push(format!(
                        "[display]\n{}",
                        clip(&text, budgets.result, "display output", 0.5).trim_end_matches('\n')
                    ));
                }
            }
            OutputEvent::Result { data, .. } if main.is_none() => main = Some(data),
            _ => {}
        }
    }
    // An execution without an event list (never from a server that streams) has its result
    // in the summary field only.
    let main = main.or(ex.result.as_ref());
    if let Some(data) = main {
        let had_image = add_images(data, &mut parts);
        if let Some(text) = mime_text(data, "text/plain").filter(|t| !t.is_empty()) {
            if !had_image {
                parts.push(format!(
                    "[result]\n{}",
                    clip(&text, budgets.result, "the result", 0.5).trim_end_matches('\n')
                ));
            }
        }
    }
    if dropped_images > 0 {
        parts.push(format!("[{dropped_images} more image(s) not included]"));
    }

    if let Some(err) = error_of(ex) {
        let tb = err
            .traceback
            .iter()
            .map(|l| l.trim_end_matches('\n'))
            .collect::<Vec<_>>()
            .join("\n");
        let tb = tb.trim_matches('\n');
        let head = if err.value.is_empty() {
            err.name.clone()
        } else {
            format!("{}: {}", err.name, err.value)
        };
        let body = if tb.is_empty() {
            head
        } else {
            let mut body = clip(tb, budgets.traceback, "traceback", 0.75);
            if !head.is_empty() && !tb.contains(&head) {
                body.push('\n');
                body.push_str(&head);
            }
            body
        };
        parts.push(format!("[error]\n{body}"));
    }

    let after = timeout.map_or(String::new(), |t| format!(" after {} s", python_g(t)));
    match ex.end_state {
        EndState::Timeout if ex.sandbox_alive => parts.push(format!(
            "[the execution timed out{after} and was interrupted; the session's state is kept]"
        )),
        EndState::Timeout => parts.push(format!(
            "[the execution timed out{after} and had to be killed; the session's state was lost]"
        )),
        EndState::Interrupted => parts.push("[the execution was interrupted]".into()),
        EndState::Oom => parts.push(format!(
            "[the execution ran out of memory{}]",
            if ex.sandbox_alive {
                ""
            } else {
                "; the session's state was lost"
            }
        )),
        EndState::Killed => {
            parts.push("[the sandbox was killed during the execution; its state was lost]".into())
        }
        EndState::Ok | EndState::Error => {}
    }
    if ex.language == Language::Bash {
        if let Some(code) = ex.exit_code.filter(|c| *c != 0) {
            parts.push(format!("[exit code: {code}]"));
        }
    }
    if parts.is_empty() {
        parts.push("[no output]".into());
    }
    ToolText {
        text: parts.join("\n"),
        images,
        is_error: ex.end_state != EndState::Ok,
    }
}

/// The execution's error: the error event (the SDK takes the last one), else the summary field.
fn error_of(ex: &ExecutionResult) -> Option<&sandlot_types::ExecError> {
    ex.outputs
        .iter()
        .rev()
        .find_map(|ev| match ev {
            OutputEvent::Error(e) => Some(e),
            _ => None,
        })
        .or(ex.error.as_ref())
}

/// `text` cut to about `limit` characters, keeping its head and tail, with a note.
fn clip(text: &str, limit: usize, label: &str, tail_share: f64) -> String {
    let len = text.chars().count();
    if limit == 0 || len <= limit {
        return text.to_owned();
    }
    let tail_n = (limit as f64 * tail_share) as usize;
    let head_n = limit - tail_n;
    let at = |n: usize| text.char_indices().nth(n).map_or(text.len(), |(i, _)| i);
    let (head_end, tail_start) = (at(head_n), at(len - tail_n));
    let dropped = &text[head_end..tail_start];
    format!(
        "{}\n[... {} characters ({} lines) of {label} dropped ...]\n{}",
        &text[..head_end],
        dropped.chars().count(),
        dropped.matches('\n').count(),
        &text[tail_start..]
    )
}

/// Budgets for two streams sharing `budget`: each gets what it needs if both fit, else the
/// smaller keeps up to a third and the larger takes the rest.
fn split_budget(a: &str, b: &str, budget: usize) -> (usize, usize) {
    let (la, lb) = (a.chars().count(), b.chars().count());
    if la + lb <= budget {
        return (la, lb);
    }
    let b_budget = lb.min((budget / 3).max(budget.saturating_sub(la)));
    (budget - b_budget, b_budget)
}

/// What a display without an image reads as: its first non-empty text among plain text,
/// Markdown, HTML without tags and SVG, else its JSON (when it has no SVG entry at all, as the
/// SDK's `or` chain falls through).
fn display_text(data: &BTreeMap<String, Value>) -> Option<String> {
    let html = || {
        mime_text(data, "text/html")
            .filter(|h| !h.is_empty())
            .map(|h| strip_tags(&h))
    };
    let candidates = [
        mime_text(data, "text/plain"),
        mime_text(data, "text/markdown"),
        html(),
    ];
    if let Some(t) = candidates.into_iter().flatten().find(|t| !t.is_empty()) {
        return Some(t);
    }
    match mime_text(data, "image/svg+xml") {
        Some(svg) => Some(svg),
        None => data
            .get("application/json")
            .filter(|v| !v.is_null())
            .map(python_json),
    }
}

/// A MIME entry as text: a string, lines joined (Jupyter's list form), or the value printed;
/// `None` when absent or null.
fn mime_text(data: &BTreeMap<String, Value>, mime: &str) -> Option<String> {
    match data.get(mime)? {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        Value::Array(lines) => Some(lines.iter().map(value_str).collect()),
        other => Some(value_str(other)),
    }
}

fn value_str(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A base64 entry without the line breaks Jupyter may put in.
fn b64(v: &Value) -> String {
    let text = match v {
        Value::Array(lines) => lines.iter().map(value_str).collect(),
        other => value_str(other),
    };
    text.split_whitespace().collect()
}

/// HTML with its tags removed, as the SDK's `<[^>]+>` substitution does.
fn strip_tags(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut rest = html;
    while let Some(lt) = rest.find('<') {
        out.push_str(&rest[..lt]);
        let after = &rest[lt + 1..];
        match after.find('>') {
            // `<>` is not a tag to the pattern: keep it and go on after the `<`.
            Some(0) | None => {
                out.push('<');
                rest = after;
            }
            Some(gt) => rest = &after[gt + 1..],
        }
    }
    out.push_str(rest);
    out
}

/// "PNG image, 640x480 px" (size read from the PNG header when there is one).
fn describe(img: &Image) -> String {
    let kind = img
        .media_type
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_uppercase();
    match png_size(img) {
        Some((w, h)) if w > 0 && h > 0 => format!("{kind} image, {w}x{h} px"),
        _ => format!("{kind} image"),
    }
}

fn png_size(img: &Image) -> Option<(u32, u32)> {
    if img.media_type != "image/png" {
        return None;
    }
    let head = decode_b64_prefix(img.data.get(..32)?)?;
    if head.len() >= 24 && head[..8] == *b"\x89PNG\r\n\x1a\n" && head[12..16] == *b"IHDR" {
        let w = u32::from_be_bytes(head[16..20].try_into().ok()?);
        let h = u32::from_be_bytes(head[20..24].try_into().ok()?);
        return Some((w, h));
    }
    None
}

/// Decodes whole 4-character groups of standard base64. Only the 24 bytes of a PNG header are
/// ever needed here, which does not warrant a dependency.
fn decode_b64_prefix(s: &str) -> Option<Vec<u8>> {
    fn val(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    for group in s.as_bytes().chunks_exact(4) {
        let mut n = 0u32;
        for &c in group {
            n = (n << 6) | val(c)?;
        }
        out.extend_from_slice(&n.to_be_bytes()[1..]);
    }
    Some(out)
}

/// A float as Python's `{:g}` prints the timeouts people give (`30`, `2.5`).
fn python_g(t: f64) -> String {
    if t.fract() == 0.0 && t.abs() < 1e15 {
        format!("{}", t as i64)
    } else {
        format!("{t}")
    }
}

/// JSON as Python's `json.dumps` writes it by default (`", "` and `": "` separators, non-ASCII
/// escaped), so a JSON display reads the same as through the SDK.
fn python_json(v: &Value) -> String {
    let mut out = String::new();
    write_python_json(v, &mut out);
    out
}

fn write_python_json(v: &Value, out: &mut String) {
    match v {
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_python_json(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_ascii_string(k, out);
                out.push_str(": ");
                write_python_json(item, out);
            }
            out.push('}');
        }
        Value::String(s) => write_ascii_string(s, out),
        other => out.push_str(&other.to_string()),
    }
}

fn write_ascii_string(s: &str, out: &mut String) {
    let quoted = Value::String(s.to_owned()).to_string();
    for c in quoted.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut buf = [0u16; 2];
            for unit in c.encode_utf16(&mut buf) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn exec(v: Value) -> ExecutionResult {
        let mut base = json!({
            "id": "e", "sandbox_id": "s", "language": "python", "end_state": "ok",
            "stdout": "", "stderr": "", "outputs": [],
            "stdout_truncation": {"kept_bytes": 0, "dropped_bytes": 0},
            "stderr_truncation": {"kept_bytes": 0, "dropped_bytes": 0},
            "started_at": "", "duration_ms": 1.0, "cpu_time_ms": 1.0,
            "peak_memory_bytes": 0, "sandbox_alive": true
        });
        for (k, x) in v.as_object().unwrap() {
            base[k] = x.clone();
        }
        serde_json::from_value(base).unwrap()
    }

    fn text(v: Value) -> String {
        format_execution(&exec(v), Budgets::default(), IMAGE_NOT_SHOWN, None).text
    }

    #[test]
    fn nothing_reads_no_output() {
        assert_eq!(text(json!({})), "[no output]");
    }

    #[test]
    fn streams_result_and_error() {
        let t = text(json!({
            "stdout": "hi\n", "end_state": "error",
            "outputs": [
                {"type": "stdout", "text": "hi\n"},
                {"type": "error", "name": "KeyError", "value": "'x'",
                 "traceback": ["Traceback (most recent call last):", "KeyError: 'x'"]}
            ]
        }));
        assert_eq!(
            t,
            "[stdout]\nhi\n[error]\nTraceback (most recent call last):\nKeyError: 'x'"
        );
        let t = text(json!({"outputs": [{"type": "result", "data": {"text/plain": "42"}}]}));
        assert_eq!(t, "[result]\n42");
    }

    #[test]
    fn clipping_keeps_head_and_tail() {
        let s = "a\n".repeat(10);
        let c = clip(&s, 4, "stdout", 0.5);
        assert_eq!(
            c,
            "a\n\n[... 16 characters (8 lines) of stdout dropped ...]\na\n"
        );
        assert_eq!(split_budget("aaaa", "bb", 10), (4, 2));
        assert_eq!(split_budget(&"a".repeat(100), "bb", 9), (7, 2));
        assert_eq!(split_budget(&"a".repeat(100), &"b".repeat(100), 9), (6, 3));
    }

    #[test]
    fn images_are_noted_with_their_size() {
        // A 1x1 PNG's first bytes.
        let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk";
        let t = text(json!({"outputs": [
            {"type": "display_data", "data": {"image/png": png, "text/plain": "<Figure>"}}
        ]}));
        assert_eq!(
            t,
            format!("[image 1: PNG image, 1x1 px — {IMAGE_NOT_SHOWN}]")
        );
    }

    #[test]
    fn bash_exit_codes_and_states() {
        let t = text(json!({"language": "bash", "exit_code": 3, "end_state": "error"}));
        assert_eq!(t, "[exit code: 3]");
        let ex = exec(json!({"end_state": "timeout"}));
        let t = format_execution(&ex, Budgets::default(), "", Some(30.0)).text;
        assert_eq!(
            t,
            "[the execution timed out after 30 s and was interrupted; the session's state is kept]"
        );
    }

    #[test]
    fn helpers_match_python() {
        assert_eq!(strip_tags("<b>x</b> <> y<z"), "x <> y<z");
        assert_eq!(
            python_json(&json!({"a": [1, "é"]})),
            "{\"a\": [1, \"\\u00e9\"]}"
        );
        assert_eq!(python_g(2.5), "2.5");
        assert_eq!(python_g(30.0), "30");
    }
}
