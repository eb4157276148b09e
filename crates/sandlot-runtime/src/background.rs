//! Background output: what a sandbox's processes write to stdout and stderr while no execution
//! runs (a server started with `&`, a `subprocess.Popen` that outlives its cell, output of a
//! context request). The pump (`sandbox.rs`) routes it here instead of into the next
//! execution; it is kept per sandbox in a bounded buffer ([`LIMIT`] bytes of text, oldest
//! dropped first and counted) and served by `GET /v1/sandboxes/{id}/background`. Each
//! execution's result says how many bytes are waiting (`background_bytes`).
//!
//! Output of a process, job or thread that outlived the execution that started it never reaches
//! the pipes at all: the driver gives each execution its own stdout and stderr (Python: pipes
//! on fds 1 and 2, `python/sandlot_runtime/output.py`; Bash: FIFOs per cell) and relays what
//! they carry after the execution ended as `background` frames naming it ([`relayed`]), which
//! land here, with that execution's id, even while another execution runs.
//!
//! The buffer belongs to the sandbox's processes: a restart in place starts an empty one (the
//! processes that wrote the old one are gone with it).

use crate::error::RuntimeError;
use crate::util::{lock, rfc3339, Utf8Stream};
use crate::Runtime;
use sandlot_types::{BackgroundEntry, BackgroundOutput, StreamName};
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use time::OffsetDateTime;

/// Most bytes of text the buffer keeps.
pub(crate) const LIMIT: usize = 256 << 10;
/// Most entries it keeps: a process writing a byte at a time must not cost more in entry
/// overhead than in text.
const MAX_ENTRIES: usize = 4096;
/// Chunks of one stream arriving within this time of an entry's first chunk join that entry,
/// so a line written in pieces (or a burst of lines) is one entry with one timestamp.
const MERGE_WINDOW: Duration = Duration::from_millis(100);

struct Entry {
    stream: StreamName,
    /// The execution that started the writer, when the driver named it.
    execution: Option<String>,
    text: String,
    at: OffsetDateTime,
    since: Instant,
}

/// The bounded buffer of one sandbox's background output.
#[derive(Default)]
pub struct Background {
    entries: VecDeque<Entry>,
    /// Bytes of text in `entries`.
    bytes: usize,
    /// Bytes dropped since the buffer was last cleared.
    dropped: u64,
    stdout: Utf8Stream,
    stderr: Utf8Stream,
}

impl Background {
    /// Adds what one stream produced now, written by a process or thread that `execution`
    /// started (if known); drops the oldest text past [`LIMIT`].
    pub fn push(&mut self, stream: StreamName, bytes: &[u8], execution: Option<&str>) {
        let decoder = match stream {
            StreamName::Stdout => &mut self.stdout,
            StreamName::Stderr => &mut self.stderr,
        };
        let text = decoder.push(bytes);
        if text.is_empty() {
            return;
        }
        let now = Instant::now();
        self.bytes += text.len();
        match self.entries.back_mut() {
            Some(last)
                if last.stream == stream
                    && last.execution.as_deref() == execution
                    && now.duration_since(last.since) < MERGE_WINDOW =>
            {
                last.text.push_str(&text)
            }
            _ => self.entries.push_back(Entry {
                stream,
                execution: execution.map(str::to_owned),
                text,
                at: OffsetDateTime::now_utc(),
                since: now,
            }),
        }
        self.trim();
    }

    /// Drops the oldest text until the buffer is within its bounds.
    fn trim(&mut self) {
        while self.bytes > LIMIT || self.entries.len() > MAX_ENTRIES {
            let excess = self.bytes.saturating_sub(LIMIT);
            let too_many = self.entries.len() > MAX_ENTRIES;
            let Some(front) = self.entries.front_mut() else {
                break;
            };
            if too_many || front.text.len() <= excess {
                let gone = front.text.len();
                self.entries.pop_front();
                self.bytes -= gone;
                self.dropped += gone as u64;
            } else {
                let mut cut = excess;
                while !front.text.is_char_boundary(cut) {
                    cut += 1;
                }
                front.text.drain(..cut);
                self.bytes -= cut;
                self.dropped += cut as u64;
            }
        }
    }

    /// Bytes of text waiting.
    pub fn bytes(&self) -> u64 {
        self.bytes as u64
    }

    /// What the buffer holds, oldest first; with `clear`, it is emptied (and its count of
    /// dropped bytes reset) in the same step, so nothing is lost or read twice between calls.
    pub fn read(&mut self, clear: bool) -> BackgroundOutput {
        let out = BackgroundOutput {
            entries: self
                .entries
                .iter()
                .map(|e| BackgroundEntry {
                    stream: e.stream,
                    text: e.text.clone(),
                    at: rfc3339(e.at),
                    execution_id: e.execution.clone(),
                })
                .collect(),
            dropped_bytes: self.dropped,
        };
        if clear {
            self.entries.clear();
            self.bytes = 0;
            self.dropped = 0;
        }
        out
    }
}

/// The stream, text and execution of a `background` frame: output the driver relays from a
/// process, job or thread that outlived the execution `id` that started it
/// (`python/sandlot_runtime/output.py`), which is background output whenever it arrives, even
/// while an execution runs. A frame without a (string) `id` is still background output, of no
/// execution in particular. `None` for any other frame.
pub(crate) fn relayed(frame: &serde_json::Value) -> Option<(StreamName, &str, Option<&str>)> {
    if frame.get("type")?.as_str()? != "background" {
        return None;
    }
    let stream = match frame.get("stream")?.as_str()? {
        "stdout" => StreamName::Stdout,
        "stderr" => StreamName::Stderr,
        _ => return None,
    };
    let execution = frame.get("id").and_then(|id| id.as_str());
    Some((stream, frame.get("text")?.as_str()?, execution))
}

impl Runtime {
    /// The sandbox's background output (see the module's doc); with `clear` the buffer is
    /// emptied. A sandbox whose processes are not running (stopped, failed, restarting) has
    /// none.
    pub fn background_output(
        &self,
        id: &str,
        clear: bool,
    ) -> Result<BackgroundOutput, RuntimeError> {
        let e = self.entry(id)?;
        Ok(match e.live() {
            Some(live) => lock(&live.pump.background).read(clear),
            None => BackgroundOutput::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(b: &mut Background) -> Vec<(StreamName, String)> {
        b.read(false)
            .entries
            .into_iter()
            .map(|e| (e.stream, e.text))
            .collect()
    }

    #[test]
    fn chunks_of_one_stream_close_together_share_an_entry() {
        let mut b = Background::default();
        b.push(StreamName::Stdout, b"la", None);
        b.push(StreamName::Stdout, b"te\n", None);
        b.push(StreamName::Stderr, b"oops\n", None);
        b.push(StreamName::Stdout, b"more\n", None);
        assert_eq!(
            texts(&mut b),
            vec![
                (StreamName::Stdout, "late\n".to_string()),
                (StreamName::Stderr, "oops\n".to_string()),
                (StreamName::Stdout, "more\n".to_string()),
            ]
        );
        assert_eq!(b.bytes(), 15);
        let read = b.read(false);
        assert!(read.entries[0].at.ends_with('Z'), "{}", read.entries[0].at);
    }

    #[test]
    fn a_character_split_across_chunks_is_whole() {
        let mut b = Background::default();
        let e_acute = "é".as_bytes();
        b.push(StreamName::Stdout, &e_acute[..1], None);
        b.push(StreamName::Stdout, &e_acute[1..], None);
        assert_eq!(texts(&mut b), vec![(StreamName::Stdout, "é".to_string())]);
    }

    #[test]
    fn the_oldest_text_is_dropped_and_counted() {
        let mut b = Background::default();
        let chunk = vec![b'a'; 64 << 10];
        for _ in 0..5 {
            b.push(StreamName::Stdout, &chunk, None);
        }
        b.push(StreamName::Stderr, b"newest", None);
        let read = b.read(false);
        assert_eq!(b.bytes(), LIMIT as u64);
        assert_eq!(read.dropped_bytes, (5 * (64 << 10) + 6 - LIMIT) as u64);
        assert_eq!(read.entries.last().unwrap().text, "newest");
        let kept: usize = read.entries.iter().map(|e| e.text.len()).sum();
        assert_eq!(kept, LIMIT);
    }

    #[test]
    fn dropping_never_cuts_a_character() {
        let mut b = Background::default();
        b.push(StreamName::Stdout, "é".repeat(LIMIT / 2).as_bytes(), None);
        b.push(StreamName::Stdout, b"x", None);
        let read = b.read(false);
        assert!(read.entries[0].text.ends_with('x'));
        assert!(read.entries[0].text.starts_with('é'));
        assert_eq!(read.dropped_bytes, 2);
    }

    #[test]
    fn entries_are_bounded_in_number_too() {
        let mut b = Background::default();
        for i in 0..(MAX_ENTRIES + 10) {
            let stream = if i % 2 == 0 {
                StreamName::Stdout
            } else {
                StreamName::Stderr
            };
            b.push(stream, b"x", None);
        }
        let read = b.read(false);
        assert_eq!(read.entries.len(), MAX_ENTRIES);
        assert_eq!(read.dropped_bytes, 10);
    }

    #[test]
    fn entries_name_the_execution_that_started_the_writer() {
        let mut b = Background::default();
        b.push(StreamName::Stdout, b"one\n", Some("ex_1"));
        b.push(StreamName::Stdout, b"two\n", Some("ex_2"));
        b.push(StreamName::Stdout, b"more two\n", Some("ex_2"));
        b.push(StreamName::Stdout, b"nobody's\n", None);
        let read = b.read(false);
        let got: Vec<_> = read
            .entries
            .iter()
            .map(|e| (e.execution_id.as_deref(), e.text.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                (Some("ex_1"), "one\n"),
                (Some("ex_2"), "two\nmore two\n"),
                (None, "nobody's\n"),
            ]
        );
        let json = serde_json::to_value(&read.entries[2]).unwrap();
        assert!(json.get("execution_id").is_none(), "{json}");
    }

    #[test]
    fn relayed_frames_are_told_from_every_other_frame() {
        let frame = serde_json::json!({"type": "background", "stream": "stderr", "text": "late\n"});
        assert_eq!(relayed(&frame), Some((StreamName::Stderr, "late\n", None)));
        let frame = serde_json::json!(
            {"type": "background", "stream": "stdout", "text": "x", "id": "ex_1"});
        assert_eq!(
            relayed(&frame),
            Some((StreamName::Stdout, "x", Some("ex_1")))
        );
        let frame = serde_json::json!(
            {"type": "background", "stream": "stdout", "text": "x", "id": 7});
        assert_eq!(relayed(&frame), Some((StreamName::Stdout, "x", None)));
        for other in [
            serde_json::json!({"type": "done", "id": "x"}),
            serde_json::json!({"type": "background", "stream": "stdin", "text": "x"}),
            serde_json::json!({"type": "background", "stream": "stdout"}),
            serde_json::json!({"type": "background", "stream": "stdout", "text": 1}),
        ] {
            assert_eq!(relayed(&other), None, "{other}");
        }
    }

    #[test]
    fn clearing_empties_the_buffer_and_its_count() {
        let mut b = Background::default();
        b.push(StreamName::Stdout, &vec![b'a'; LIMIT + 1], None);
        let first = b.read(true);
        assert_eq!(first.dropped_bytes, 1);
        assert_eq!(first.entries.len(), 1);
        assert_eq!(b.read(false), BackgroundOutput::default());
        assert_eq!(b.bytes(), 0);
    }
}
