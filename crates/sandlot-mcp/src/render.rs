//! How a tool's result reads to a model: an execution's outputs in order (figures as images,
//! tables as text), files as text, images or base64, sandboxes and entries as JSON.

use base64::Engine as _;
use rmcp::model::{CallToolResult, ContentBlock};
use sandlot_types::{EndState, ExecutionResult, FileEntry, Language, OutputEvent, Sandbox};
use serde_json::{json, Value};
use std::collections::BTreeMap;

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
    if let Some(rb) = r.rollback.as_ref().filter(|_| r.rolled_back) {
        b.out.push(ContentBlock::text(format!(
            "[rolled back ({}): the sandbox's variables and files are as they were before this code]",
            rb.reason
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
pub(crate) fn file_content(bytes: Vec<u8>) -> ContentBlock {
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

pub(crate) fn entry_json(e: &FileEntry) -> Value {
    json!({ "path": e.path, "kind": e.kind, "size": e.size })
}

pub(crate) fn sandbox_json(sb: &Sandbox, own: Option<&str>) -> Value {
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
