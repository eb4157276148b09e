//! The JSONL transcript of `sandlot agent`: one JSON object a line, written and flushed as
//! each step happens, so a run that crashes or is stopped still leaves what it did.
//!
//! Records (`"type"`): `start` (task, model, endpoint, sandbox, limits, tools, system prompt),
//! `model` (one per step: the messages added since the previous request, the count sent, the
//! reply, finish reason, usage, time), `tool` (one per tool call: its id, name, raw arguments,
//! the code, the execution as the server returned it, the text the model got back, time),
//! `end` (how the run ended, the answer or the error, steps, total time). The messages of
//! every request are the `new_messages` of the `model` records so far, in order.

use anyhow::Context;
use serde_json::{json, Value};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

pub struct Transcript {
    out: Option<(PathBuf, BufWriter<File>)>,
}

impl Transcript {
    /// A transcript written to `path` (created or truncated), or none.
    pub fn create(path: Option<&Path>) -> anyhow::Result<Transcript> {
        let out = match path {
            Some(p) => {
                let f = File::create(p)
                    .with_context(|| format!("could not create the transcript {}", p.display()))?;
                Some((p.to_owned(), BufWriter::new(f)))
            }
            None => None,
        };
        Ok(Transcript { out })
    }

    pub fn path(&self) -> Option<&Path> {
        self.out.as_ref().map(|(p, _)| p.as_path())
    }

    /// Writes `record` with its `type` and a timestamp. A transcript that cannot be written is
    /// a failure of the run: the user asked for it.
    pub fn record(&mut self, kind: &str, mut record: Value) -> anyhow::Result<()> {
        let Some((path, out)) = self.out.as_mut() else {
            return Ok(());
        };
        let mut line = json!({ "type": kind, "time": now() });
        if let (Some(line), Some(fields)) = (line.as_object_mut(), record.as_object_mut()) {
            line.append(fields);
        }
        serde_json::to_writer(&mut *out, &line)
            .map_err(anyhow::Error::from)
            .and_then(|_| Ok(out.write_all(b"\n")?))
            .and_then(|_| Ok(out.flush()?))
            .with_context(|| format!("could not write the transcript {}", path.display()))
    }
}

fn now() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_one_line_per_record() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        let mut t = Transcript::create(Some(&p)).unwrap();
        t.record("start", json!({"task": "x"})).unwrap();
        t.record("end", json!({"status": "answered"})).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["type"], "start");
        assert_eq!(lines[0]["task"], "x");
        assert!(lines[1]["time"].as_str().unwrap().ends_with('Z'));
        Transcript::create(None)
            .unwrap()
            .record("start", json!({}))
            .unwrap();
    }
}
