//! A Server-Sent Events reader for `sandlot run --url`: bytes in, whole events out.

/// One event: its name (`message` when the server gave none) and its data lines joined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: String,
    pub data: String,
}

/// Accumulates chunks and yields the events they complete.
#[derive(Debug, Default)]
pub struct SseParser {
    buf: String,
    /// Bytes of an incomplete UTF-8 sequence at the end of the last chunk.
    partial: Vec<u8>,
}

impl SseParser {
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        self.partial.extend_from_slice(chunk);
        let valid = match std::str::from_utf8(&self.partial) {
            Ok(s) => s.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            // Not UTF-8 at all: replace rather than stall.
            Err(_) => self.partial.len(),
        };
        let rest = self.partial.split_off(valid);
        self.buf.push_str(&String::from_utf8_lossy(&self.partial));
        self.partial = rest;
        // Normalize line ends so one separator search covers all three forms; a trailing CR
        // waits for the next chunk, which may start with its LF.
        if self.buf.contains('\r') {
            let trailing_cr = self.buf.ends_with('\r');
            let body = self.buf.strip_suffix('\r').unwrap_or(&self.buf);
            let mut normalized = body.replace("\r\n", "\n").replace('\r', "\n");
            if trailing_cr {
                normalized.push('\r');
            }
            self.buf = normalized;
        }
        let mut events = Vec::new();
        while let Some(end) = self.buf.find("\n\n") {
            let block: String = self.buf.drain(..end + 2).collect();
            if let Some(ev) = parse_block(&block) {
                events.push(ev);
            }
        }
        events
    }
}

fn parse_block(block: &str) -> Option<SseEvent> {
    let mut event = None;
    let mut data: Vec<&str> = Vec::new();
    for line in block.lines() {
        if line.is_empty() || line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => event = Some(value.to_owned()),
            "data" => data.push(value),
            _ => {}
        }
    }
    if event.is_none() && data.is_empty() {
        return None;
    }
    Some(SseEvent {
        event: event.unwrap_or_else(|| "message".into()),
        data: data.join("\n"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_events_split_across_chunks() {
        let mut p = SseParser::default();
        assert!(p.push(b"event: stdout\nda").is_empty());
        let evs =
            p.push(b"ta: {\"a\":1}\n\n:keep-alive\n\nevent: done\r\ndata: x\r\ndata: y\r\n\r\n");
        assert_eq!(
            evs,
            [
                SseEvent {
                    event: "stdout".into(),
                    data: "{\"a\":1}".into()
                },
                SseEvent {
                    event: "done".into(),
                    data: "x\ny".into()
                },
            ]
        );
    }

    #[test]
    fn crlf_split_between_chunks_is_one_line_end() {
        let mut p = SseParser::default();
        assert!(p.push(b"event: a\r").is_empty());
        assert!(p.push(b"\ndata: 1\r").is_empty());
        let evs = p.push(b"\n\r\n");
        assert_eq!(
            evs,
            [SseEvent {
                event: "a".into(),
                data: "1".into()
            }]
        );
    }

    #[test]
    fn keeps_multibyte_characters_split_across_chunks() {
        let mut p = SseParser::default();
        let text = "data: é\n\n".as_bytes();
        assert!(p.push(&text[..7]).is_empty());
        assert_eq!(p.push(&text[7..])[0].data, "é");
    }
}
