//! Hostile output: inputs built to make a scanner slow or confused. Every scan must stay linear
//! (bounded time per byte) and the stream scanner's memory bounded.

use crate::common;

use common::*;
use sandlot_guard::{Scanner, StreamScanner, HARD_CAP};
use std::time::{Duration, Instant};

/// Generous even for an unoptimized build on a shared machine; a quadratic blow-up on 512 KiB
/// would take minutes.
const LIMIT: Duration = Duration::from_secs(20);
const SIZE: usize = 512 * 1024;

fn repeat_to(unit: &str, size: usize) -> String {
    unit.repeat(size / unit.len() + 1)[..size].to_string()
}

#[test]
fn pathological_inputs_scan_in_linear_time() {
    let r = &mut Rng::new(8);
    let unterminated_pem = format!(
        "-----BEGIN RSA PRIVATE KEY-----\n{}",
        repeat_to(&format!("{}\n", r.token(BASE64, 64)), SIZE)
    );
    let inputs = [
        ("one long token", repeat_to("a", SIZE)),
        ("assignments", repeat_to("password=", SIZE)),
        (
            "keywords and separators",
            repeat_to("token: key = secret := ", SIZE),
        ),
        ("jwt heads", repeat_to("eyJ", SIZE)),
        ("jwt without dots", format!("eyJ{}", repeat_to("A", SIZE))),
        ("url userinfo", repeat_to("a://b:", SIZE)),
        ("aws prefixes", repeat_to("AKIA", SIZE)),
        (
            "pem begins",
            repeat_to("-----BEGIN RSA PRIVATE KEY-----\n", SIZE),
        ),
        ("unterminated pem", unterminated_pem),
        ("quotes", repeat_to("secret=\"", SIZE)),
    ];
    let scanner = Scanner::default();
    for (name, text) in &inputs {
        let start = Instant::now();
        let findings = scanner.scan(text);
        let took = start.elapsed();
        println!("{name}: {} findings in {took:?}", findings.len());
        assert!(took < LIMIT, "{name} took {took:?}");
    }
}

#[test]
fn stream_memory_is_bounded_without_line_breaks() {
    let mut s = StreamScanner::new(Scanner::default());
    let chunk = "b".repeat(8 * 1024);
    for _ in 0..64 {
        s.push(&chunk);
        assert!(s.held() <= HARD_CAP);
    }
    // An open private key block is held up to its own bound, then released.
    let mut s = StreamScanner::new(Scanner::default());
    s.push("-----BEGIN RSA PRIVATE KEY-----\n");
    let line = format!("{}\n", Rng::new(3).token(BASE64, 64));
    let mut redacted = String::new();
    for _ in 0..600 {
        redacted.push_str(&s.push(&line).redacted());
        assert!(s.held() <= HARD_CAP + line.len());
    }
    redacted.push_str(&s.finish().redacted());
    // Whatever was released of the block was redacted, never passed through.
    assert!(!redacted.contains(line.trim_end()));
}
