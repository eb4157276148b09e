//! What `sandlot agent` shows while it works, on stderr (stdout carries only the answer, so
//! `answer=$(sandlot agent ...)` works): each step's model text, the code of each tool call,
//! the sandbox's output as it streams, and how each execution ended.

use sandlot_types::{EndState, ExecutionResult, OutputEvent};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

pub struct Trace {
    quiet: bool,
    /// Whether the last thing written ended a line, so a marker after partial output starts
    /// on a line of its own.
    at_line_start: bool,
}

impl Trace {
    pub fn new(quiet: bool) -> Self {
        Self {
            quiet,
            at_line_start: true,
        }
    }

    fn write(&mut self, text: &str) {
        if self.quiet || text.is_empty() {
            return;
        }
        let text = &printable(text);
        let mut err = std::io::stderr().lock();
        // A closed stderr must not stop the run; the transcript and the answer still matter.
        let _ = err.write_all(text.as_bytes()).and_then(|_| err.flush());
        self.at_line_start = text.ends_with('\n');
    }

    /// A line of its own.
    pub fn line(&mut self, text: &str) {
        let mut s = String::new();
        if !self.at_line_start {
            s.push('\n');
        }
        s.push_str(text);
        if !text.ends_with('\n') {
            s.push('\n');
        }
        self.write(&s);
    }

    pub fn step(&mut self, step: u32, max: u32, elapsed: Duration) {
        self.line(&format!(
            "── step {step}/{max} · the model answered in {:.1} s",
            elapsed.as_secs_f64()
        ));
    }

    pub fn model_text(&mut self, text: &str) {
        let text = text.trim();
        if !text.is_empty() {
            self.line(text);
        }
    }

    pub fn call(&mut self, name: &str, id: &str, code: &str) {
        let mut s = format!("── {name} ({id})\n");
        for l in code.trim_end().lines() {
            s.push_str("│ ");
            s.push_str(l);
            s.push('\n');
        }
        self.line(&s);
    }

    pub fn event(&mut self, ev: &OutputEvent) {
        match ev {
            OutputEvent::Stdout { text } | OutputEvent::Stderr { text } => self.write(text),
            OutputEvent::DisplayData { data, .. } | OutputEvent::Result { data, .. } => {
                self.line(&render(data))
            }
            OutputEvent::Error(e) => {
                let tb: Vec<&str> = e.traceback.iter().map(|l| l.trim_end()).collect();
                if tb.is_empty() {
                    self.line(&format!("{}: {}", e.name, e.value));
                } else {
                    self.line(&tb.join("\n"));
                }
            }
        }
    }

    pub fn ended(&mut self, ex: &ExecutionResult) {
        let how = match ex.end_state {
            EndState::Ok => "ok".to_owned(),
            EndState::Error => match (&ex.error, ex.exit_code) {
                (Some(e), _) => format!("error: {}", e.name),
                (None, Some(code)) => format!("exit code {code}"),
                (None, None) => "error".to_owned(),
            },
            other => format!("{other:?}").to_lowercase(),
        };
        self.line(&format!("── {how} in {:.0} ms", ex.duration_ms));
    }

    pub fn rejected(&mut self, name: &str, id: &str, why: &str) {
        self.line(&format!(
            "── {name} ({id}) not run: {}",
            why.trim_start_matches("[error]\n")
        ));
    }
}

/// `text` without the control characters a terminal would act on (escape sequences that move
/// the cursor, retitle the window, ...): what the model and the sandbox write is untrusted, and
/// this is shown to a person. Bidirectional overrides and isolates go too: they make a
/// terminal show text in an order other than the one it has ("Trojan Source"), so the code
/// shown could differ from the code run.
pub fn printable(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control() || matches!(c, '\n' | '\t'))
        .filter(|c| !matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'))
        .collect()
}

/// A rich output for a terminal: its text, else a placeholder naming what it holds.
fn render(data: &BTreeMap<String, Value>) -> String {
    if let Some((mime, v)) = data.iter().find(|(m, _)| m.starts_with("image/")) {
        let chars = v.as_str().map_or(0, str::len);
        return format!("[{mime}, {chars} characters of base64]");
    }
    match data.get("text/plain") {
        Some(Value::String(t)) => t.clone(),
        _ => format!("[{}]", data.keys().cloned().collect::<Vec<_>>().join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_do_not_reach_the_terminal() {
        assert_eq!(
            printable("a\x1b]0;title\x07b\r\n\tc\u{9b}2J"),
            "a]0;titleb\n\tc2J"
        );
        assert_eq!(
            printable("x = 1 \u{202e}# ;)\u{2066}y\u{2069}"),
            "x = 1 # ;)y"
        );
    }
}
