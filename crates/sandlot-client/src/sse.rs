//! A Server-Sent Events reader for streamed executions: bytes in, whole events out.

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
    /// Bytes held for an event not complete yet: what a stream that never ends an event
    /// would grow without a bound.
    pub fn buffered(&self) -> usize {
        self.buf.len() + self.partial.len()
    }

    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        self.partial.extend_from_slice(chunk);
        let valid = match std::str::from_utf8(&self.partial) {
            Ok(s) => s.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            // Not UTF-8 at all: replace rather than stall.
            Err(_) => self.partial.len(),
        };
        let rest = self.partial.split_off(valid);
        // Only the new text (and the character before it) is looked at: rescanning the whole
        // buffer for every chunk of a large event would cost its size squared.
        let start = self.buf.len();
        self.buf.push_str(&String::from_utf8_lossy(&self.partial));
        self.partial = rest;
        // Normalize line ends so one separator search covers all three forms; a trailing CR
        // waits for the next chunk, which may start with its LF.
        let from = if self.buf[..start].ends_with('\r') {
            start - 1
        } else {
            start
        };
        if self.buf[from..].contains('\r') {
            let tail = &self.buf[from..];
            let trailing_cr = tail.ends_with('\r');
            let body = tail.strip_suffix('\r').unwrap_or(tail);
            let mut normalized = body.replace("\r\n", "\n").replace('\r', "\n");
            if trailing_cr {
                normalized.push('\r');
            }
            self.buf.truncate(from);
            self.buf.push_str(&normalized);
        }
        // The buffer held no blank line before this chunk; one may end in the last two
        // characters before it (`\n` + a CR that became `\n`) or anywhere after.
        let mut search_from = floor_boundary(&self.buf, from.saturating_sub(1));
        let mut events = Vec::new();
        while let Some(at) = self.buf[search_from..].find("\n\n") {
            let block: String = self.buf.drain(..search_from + at + 2).collect();
            if let Some(ev) = parse_block(&block) {
                events.push(ev);
            }
            search_from = 0;
        }
        events
    }
}

/// The largest char boundary of `s` at or before `i`.
fn floor_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
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

    #[test]
    fn any_split_into_two_or_three_chunks_gives_the_same_events() {
        let text = "event: a\r\ndata: é1\r\n\r\n: note\n\nevent: b\rdata: 2\r\rdata: x\ndata: y\n\n\ndata: z\r\n\r";
        let whole = SseParser::default().push(text.as_bytes());
        assert_eq!(whole.len(), 3, "{whole:?}");
        let bytes = text.as_bytes();
        for i in 0..=bytes.len() {
            for j in i..=bytes.len() {
                let mut p = SseParser::default();
                let mut got = p.push(&bytes[..i]);
                got.extend(p.push(&bytes[i..j]));
                got.extend(p.push(&bytes[j..]));
                assert_eq!(got, whole, "split at {i} and {j}");
            }
        }
    }

    #[test]
    fn a_large_event_in_many_chunks() {
        let mut p = SseParser::default();
        assert!(p.push(b"event: done\ndata: ").is_empty());
        for _ in 0..4096 {
            assert!(p.push(&[b'x'; 1024]).is_empty());
        }
        assert!(p.buffered() > 4 << 20);
        let evs = p.push(b"\n\n");
        assert_eq!(evs[0].data.len(), 4 << 20);
        assert_eq!(p.buffered(), 0);
    }
}
