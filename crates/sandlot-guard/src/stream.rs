//! Scanning chunked output without releasing a secret that is split across writes.
//!
//! A program may print `ghp_abc` in one write and the rest of the token in the next; scanning each
//! chunk alone would miss it, and scanning after the fact is too late if the first half was
//! already sent to the client. So [`StreamScanner::push`] releases only the part of the stream
//! that no future bytes can change the findings of, and holds back the rest:
//!
//! - the unfinished last line (after the last `\n` or `\r`), at most [`WINDOW`] bytes of it: every
//!   rule except `private-key` is confined to one line (separators are spaces and tabs, value
//!   classes exclude line breaks), so a complete line is final;
//! - an open PEM private-key block (a `-----BEGIN ... PRIVATE KEY-----` line with no `END` yet),
//!   from its first line, up to [`PEM_HOLD`] bytes;
//! - any finding that straddles the cut is held whole.
//!
//! The last [`CONTEXT`] released bytes are kept as left context so keyword-anchored rules
//! (`aws_secret_access_key = ...`) still see their keyword.
//!
//! **Bound**: a secret whose matched value is at most `WINDOW` (1024) bytes, or a PEM block of at
//! most `PEM_HOLD` (16 KiB), is never released unredacted, however the stream is split. Past
//! that, holding more than [`HARD_CAP`] bytes forces a release: a finding cut by it is released
//! redacted and reported with the release (its `end` lies past the released text), and a
//! private-key block keeps being matched and redacted as a continuation (its BEGIN line is
//! carried as context) until it ends. Other over-long values (a single unbroken line of more than
//! `WINDOW` bytes, an over-long token) may be found only in part, and their findings may start
//! before [`Released::offset`]; the caller treats every finding as the sandbox's: record it and
//! apply the policy.
//!
//! Cost: each push rescans the held tail, so a stream of tiny writes with no line breaks costs up
//! to `WINDOW` bytes of scanning per write; memory is bounded by `HARD_CAP` plus the chunk.

use crate::{redact, Finding, Scanner};

/// Most bytes of an unfinished line held back.
pub const WINDOW: usize = 1024;
/// Released bytes kept as left context for keyword-anchored rules (longer than any rule prefix).
pub const CONTEXT: usize = 256;
/// Most bytes of an open PEM private-key block held back.
pub const PEM_HOLD: usize = 16 * 1024;
/// Above this many held bytes, a release is forced even through a finding.
pub const HARD_CAP: usize = 64 * 1024;

/// What a push or finish releases: the next bytes of the stream, in order, and the findings in
/// them. Emit `text` (policy "pass") or [`Released::redacted`] (policy "redact"); never emit bytes
/// of the stream that were not released.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Released {
    /// The released stream text, unredacted.
    pub text: String,
    /// Absolute stream offset of `text`'s first byte.
    pub offset: usize,
    /// Findings ending inside `text`, with absolute stream offsets (after a forced release, the
    /// last one may end past `text`; see the module docs).
    pub findings: Vec<Finding>,
}

impl Released {
    /// `text` with the findings replaced by `[REDACTED:<rule>]` markers.
    pub fn redacted(&self) -> String {
        let relative: Vec<Finding> = self
            .findings
            .iter()
            .map(|f| Finding {
                start: f.start.saturating_sub(self.offset),
                end: f.end.saturating_sub(self.offset).min(self.text.len()),
                ..f.clone()
            })
            .collect();
        redact(&self.text, &relative)
    }

    pub fn is_empty(&self) -> bool {
        self.text.is_empty() && self.findings.is_empty()
    }
}

/// Scans a stream chunk by chunk. One per output stream (stdout and stderr separately).
#[derive(Debug)]
pub struct StreamScanner {
    scanner: Scanner,
    /// Last released bytes (at most `CONTEXT`), scanned as left context only.
    context: String,
    /// Received, not yet released.
    pending: String,
    /// Absolute offset of `pending`'s first byte (= bytes released so far).
    released: usize,
}

impl StreamScanner {
    pub fn new(scanner: Scanner) -> StreamScanner {
        StreamScanner {
            scanner,
            context: String::new(),
            pending: String::new(),
            released: 0,
        }
    }

    /// Adds a chunk; returns what can now be released (possibly nothing).
    pub fn push(&mut self, chunk: &str) -> Released {
        self.pending.push_str(chunk);
        self.release(false)
    }

    /// End of stream: releases everything still held.
    pub fn finish(&mut self) -> Released {
        self.release(true)
    }

    /// Bytes received but not yet released.
    pub fn held(&self) -> usize {
        self.pending.len()
    }

    fn release(&mut self, all: bool) -> Released {
        let offset = self.released;
        if self.pending.is_empty() {
            return Released {
                offset,
                ..Released::default()
            };
        }
        let mut hay = String::with_capacity(self.context.len() + self.pending.len());
        hay.push_str(&self.context);
        hay.push_str(&self.pending);
        let base = offset - self.context.len();
        let findings: Vec<Finding> = self
            .scanner
            .scan(&hay)
            .into_iter()
            .map(|f| Finding {
                start: f.start + base,
                end: f.end + base,
                ..f
            })
            .filter(|f| f.end > offset)
            .collect();

        let end = offset + self.pending.len();
        let (cut, forced) = if all {
            (end, false)
        } else {
            self.cut(&findings, offset, end)
        };
        // A forced cut releases part of a finding (redacted); keep it with the release.
        let through = forced
            .then(|| {
                findings
                    .iter()
                    .find(|f| f.start < cut && f.end > cut)
                    .cloned()
            })
            .flatten();
        let findings: Vec<Finding> = findings
            .into_iter()
            .filter(|f| f.end <= cut || through.as_ref() == Some(f))
            .collect();
        let carry = open_block_at_cut(&findings, &hay, base, cut).map(str::to_string);
        let text: String = self.pending.drain(..cut - offset).collect();
        self.remember_context(&text);
        if let Some(mut header) = carry {
            // The rest of the block arrives without its BEGIN line; scanning it behind the header
            // (and the block's last released bytes) makes it match, and be redacted, as the
            // continuation of the same key.
            header.push_str(&self.context);
            self.context = header;
        }
        self.released = cut;
        Released {
            text,
            offset,
            findings,
        }
    }

    /// Absolute offset up to which the stream can be released now, and whether the cut was
    /// forced by `HARD_CAP` (possibly through a finding).
    fn cut(&self, findings: &[Finding], offset: usize, end: usize) -> (usize, bool) {
        let mut cut = offset + hold_point(&self.pending);
        // Findings are disjoint, so at most one straddles the cut.
        if let Some(f) = findings.iter().find(|f| f.start < cut && f.end > cut) {
            cut = f.start.max(offset);
        }
        if end - cut > HARD_CAP {
            let forced = offset + floor_boundary(&self.pending, self.pending.len() - WINDOW);
            return (forced, true);
        }
        (cut, false)
    }

    fn remember_context(&mut self, released: &str) {
        self.context.push_str(released);
        if self.context.len() > CONTEXT {
            let from = ceil_boundary(&self.context, self.context.len() - CONTEXT);
            self.context.drain(..from);
        }
    }
}

/// Offset in `pending` before which nothing can change with more input.
fn hold_point(pending: &str) -> usize {
    let line_start = pending.rfind(['\n', '\r']).map_or(0, |i| i + 1);
    let mut hold = floor_boundary(
        pending,
        line_start.max(pending.len().saturating_sub(WINDOW)),
    );
    if let Some(begin) = open_private_key_block(pending) {
        if pending.len() - begin <= PEM_HOLD {
            hold = hold.min(begin);
        }
    }
    hold
}

/// The rule whose blocks may be longer than any hold and are carried across forced releases.
const PRIVATE_KEY_RULE: &str = "private-key";

/// If a private-key block without its END line runs up to the cut (it outgrew the hold), its
/// BEGIN line, with the line break.
fn open_block_at_cut<'h>(
    findings: &[Finding],
    hay: &'h str,
    base: usize,
    cut: usize,
) -> Option<&'h str> {
    let f = findings.last()?;
    let block = &hay[f.start - base..(f.end - base).min(hay.len())];
    let gap = hay.get(f.end.min(cut) - base..cut - base)?;
    if f.rule != PRIVATE_KEY_RULE || block.contains("-----END") || !gap.trim().is_empty() {
        return None;
    }
    Some(&block[..=block.find('\n')?])
}

/// Start of the last `-----BEGIN ... PRIVATE KEY` line with no `-----END` after it.
fn open_private_key_block(pending: &str) -> Option<usize> {
    let begin = pending.rfind("-----BEGIN")?;
    let rest = &pending[begin..];
    let line = rest.split(['\n', '\r']).next().unwrap_or(rest);
    (line.contains("PRIVATE KEY") && !rest.contains("-----END")).then_some(begin)
}

fn floor_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_lines_are_released_at_once() {
        let mut s = StreamScanner::new(Scanner::default());
        let r = s.push("hello\nwor");
        assert_eq!(r.text, "hello\n");
        assert_eq!(s.held(), 3);
        let r = s.push("ld\n");
        assert_eq!((r.text.as_str(), r.offset), ("world\n", 6));
        assert!(s.finish().is_empty());
    }

    #[test]
    fn long_lines_hold_only_the_window() {
        let mut s = StreamScanner::new(Scanner::default());
        let r = s.push(&"a".repeat(5000));
        assert_eq!(r.text.len(), 5000 - WINDOW);
        assert_eq!(s.held(), WINDOW);
        assert_eq!(s.finish().text.len(), WINDOW);
    }

    #[test]
    fn hold_point_respects_char_boundaries() {
        let text = "é".repeat(WINDOW);
        let hold = hold_point(&text);
        assert!(text.is_char_boundary(hold));
    }
}
