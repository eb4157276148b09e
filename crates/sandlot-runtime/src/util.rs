//! Small helpers that need nothing else of the runtime: a poison-tolerant `lock`, timestamps,
//! ids, UTF-8 stream decoding, short content hashes.

use std::sync::{Mutex, MutexGuard};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// Locks `m`, recovering the data from a poisoned lock: every value the runtime keeps behind a
/// std mutex stays consistent across a panic (each critical section is a single assignment,
/// insert or read), so a panic elsewhere must not take the server down with it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The monotonic instant of an RFC 3339 time (now when it does not parse).
pub(crate) fn instant_of(text: &str) -> std::time::Instant {
    let now = std::time::Instant::now();
    let Ok(t) = OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339) else {
        return now;
    };
    let delta = t - OffsetDateTime::now_utc();
    if delta.is_negative() {
        now.checked_sub(delta.unsigned_abs()).unwrap_or(now)
    } else {
        now + delta.unsigned_abs()
    }
}

/// Seconds from the RFC 3339 time `since` until now (0 when it does not parse or is ahead).
pub(crate) fn secs_since(since: &str) -> f64 {
    OffsetDateTime::parse(since, &time::format_description::well_known::Rfc3339)
        .map(|t| (OffsetDateTime::now_utc() - t).as_seconds_f64().max(0.0))
        .unwrap_or(0.0)
}

/// Now as RFC 3339 UTC with microseconds (fixed width, so text order is time order).
pub fn now_rfc3339() -> String {
    rfc3339(OffsetDateTime::now_utc())
}

pub fn rfc3339(t: OffsetDateTime) -> String {
    let t = t
        .replace_nanosecond((t.nanosecond() / 1000) * 1000)
        .unwrap_or(t);
    let s = t.format(&Rfc3339).unwrap_or_default();
    // Rfc3339 drops trailing zeros of the fraction; pad to 6 digits for a fixed width.
    match s.find('.') {
        Some(dot) => {
            let (head, rest) = s.split_at(dot + 1);
            let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
            let tail = &rest[digits.len()..];
            format!("{head}{digits:0<6}{tail}")
        }
        None => s.replacen('Z', ".000000Z", 1),
    }
}

/// A fresh id: `prefix` and 128 random bits from the kernel as 32 hex digits. Until API keys
/// exist an id is the only capability a client holds, so it must not be guessable.
pub fn new_id(prefix: &str) -> String {
    let mut bytes = [0u8; 16];
    let mut filled = 0;
    while filled < bytes.len() {
        let rest = &mut bytes[filled..];
        // SAFETY: getrandom writes at most `rest.len()` bytes into the buffer we own.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n > 0 {
            filled += n as usize;
        } else if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // getrandom cannot fail otherwise on the kernels sandlot runs on (>= 3.17); fall
            // back to uuid's generator rather than hand out a weak id.
            bytes = *uuid::Uuid::new_v4().as_bytes();
            let more = *uuid::Uuid::new_v4().as_bytes();
            for (b, m) in bytes.iter_mut().zip(more) {
                *b ^= m;
            }
            break;
        }
    }
    format!("{prefix}{}", hex::encode(bytes))
}

/// Decodes a byte stream as UTF-8 chunk by chunk: a character split across reads is carried
/// over, invalid bytes become U+FFFD.
#[derive(Default)]
pub struct Utf8Stream {
    carry: Vec<u8>,
}

impl Utf8Stream {
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.carry.extend_from_slice(bytes);
        let cut = incomplete_tail(&self.carry);
        let keep = self.carry.split_off(self.carry.len() - cut);
        let text = String::from_utf8_lossy(&self.carry).into_owned();
        self.carry = keep;
        text
    }

    pub fn finish(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.carry).into_owned();
        self.carry.clear();
        text
    }
}

/// Length of a trailing, possibly incomplete UTF-8 sequence (0..=3 bytes).
fn incomplete_tail(b: &[u8]) -> usize {
    for back in 1..=3.min(b.len()) {
        let c = b[b.len() - back];
        if c & 0xC0 == 0x80 {
            continue; // continuation byte: look further back
        }
        let need = if c >= 0xF0 {
            4
        } else if c >= 0xE0 {
            3
        } else if c >= 0xC0 {
            2
        } else {
            1
        };
        return if need > back { back } else { 0 };
    }
    0
}

/// A short stable hex hash (FNV-1a 64) for names derived from content.
pub fn short_hash(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("{h:016x}")[..12].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_split_across_chunks() {
        let mut s = Utf8Stream::default();
        let e = "é€😀".as_bytes();
        let mut out = String::new();
        for b in e {
            out.push_str(&s.push(&[*b]));
        }
        out.push_str(&s.finish());
        assert_eq!(out, "é€😀");
    }

    #[test]
    fn invalid_bytes_become_replacement() {
        let mut s = Utf8Stream::default();
        let out = s.push(b"a\xff\xfeb") + &s.finish();
        assert_eq!(out, "a\u{FFFD}\u{FFFD}b");
    }

    #[test]
    fn ids_carry_128_random_bits() {
        let a = new_id("sb_");
        let b = new_id("sb_");
        assert_eq!(a.len(), 3 + 32, "{a}");
        assert!(a[3..].chars().all(|c| c.is_ascii_hexdigit()), "{a}");
        assert_ne!(a, b);
    }

    #[test]
    fn timestamps_fixed_width() {
        let a = now_rfc3339();
        assert_eq!(a.len(), "2026-11-22T03:17:00.000000Z".len(), "{a}");
    }
}
