//! Throughput on plain text (prose and logs with the odd keyword, no secrets): the target is
//! ≥ 100 MB/s in a release build. Debug builds only print the figure.

use crate::common;

use common::*;
use sandlot_guard::{Scanner, StreamScanner};

const WORDS: &[&str] = &[
    "the",
    "model",
    "loss",
    "epoch",
    "training",
    "data",
    "value",
    "result",
    "error",
    "file",
    "for",
    "with",
    "and",
    "batch",
    "step",
    "accuracy",
    "function",
    "return",
    "import",
    "numpy",
    "pandas",
    "dataframe",
    "column",
    "index",
    "request",
    "response",
    "server",
    "client",
    "user",
    "config",
    "output",
    "input",
    "print",
    "list",
    "dict",
    "of",
    "to",
    "in",
    "is",
    "was",
    "a",
    "this",
    "that",
    "we",
    "it",
    "on",
    "by",
    "from",
    "as",
    "at",
    "be",
    "are",
    "which",
    "after",
];
const KEYWORDS: &[&str] = &["key", "token", "password", "secret", "api_key", "Bearer"];

/// Log lines and prose; `keyword_per_mille` of the words are keywords the generic rules look
/// for (English prose has about 1 in 1000; 100 is a deliberately hostile density).
fn plain_text(bytes: usize, keyword_per_mille: usize) -> String {
    let rng = &mut Rng::new(99);
    let mut text = String::with_capacity(bytes + 200);
    while text.len() < bytes {
        match rng.below(4) {
            0 => text.push_str(&format!(
                "2025-01-{:02} 12:{:02}:{:02} INFO epoch={} loss={:.5} acc={:.3} lr=0.0003 path=/data/run-{}/ckpt.pt\n",
                1 + rng.below(28),
                rng.below(60),
                rng.below(60),
                rng.below(100),
                rng.below(100_000) as f64 / 1e5,
                rng.below(1000) as f64 / 1e3,
                rng.below(1000),
            )),
            _ => {
                let n = 8 + rng.below(12);
                let line: Vec<&str> = (0..n)
                    .map(|_| {
                        if rng.below(1000) < keyword_per_mille {
                            KEYWORDS[rng.below(KEYWORDS.len())]
                        } else {
                            WORDS[rng.below(WORDS.len())]
                        }
                    })
                    .collect();
                text.push_str(&line.join(" "));
                text.push_str(".\n");
            }
        }
    }
    text
}

fn mb_per_s(bytes: usize, elapsed: std::time::Duration) -> f64 {
    bytes as f64 / 1e6 / elapsed.as_secs_f64()
}

fn measure(text: &str) -> (f64, f64) {
    let scanner = Scanner::default()
        .with_canaries(&["AKIAQWERTYUIOPASDFGH"])
        .unwrap();
    scanner.scan("warm up: token key secret password"); // compile the rules outside the timing
    let start = std::time::Instant::now();
    let findings = scanner.scan(text);
    let whole = mb_per_s(text.len(), start.elapsed());
    assert!(findings.is_empty(), "{:?}", rules(&findings));

    let start = std::time::Instant::now();
    let mut stream = StreamScanner::new(scanner.clone());
    let mut released = 0;
    for chunk in text.as_bytes().chunks(64 * 1024) {
        released += stream.push(std::str::from_utf8(chunk).unwrap()).text.len();
    }
    released += stream.finish().text.len();
    let streamed = mb_per_s(text.len(), start.elapsed());
    assert_eq!(released, text.len());
    (whole, streamed)
}

#[test]
fn plain_text_throughput() {
    let size = if cfg!(debug_assertions) { 4 } else { 32 } << 20;
    let (whole, streamed) = measure(&plain_text(size, 1));
    let (dense, dense_streamed) = measure(&plain_text(size, 100));
    println!(
        "sandlot-guard throughput, {} MB plain text: scan {whole:.0} MB/s, stream (64 KiB chunks) {streamed:.0} MB/s; \
         with 10% keywords: scan {dense:.0} MB/s, stream {dense_streamed:.0} MB/s",
        size >> 20
    );
    #[cfg(not(debug_assertions))]
    {
        // Loose bounds: the target is 100 MB/s on plain text; test machines are shared.
        assert!(whole >= 100.0, "scan {whole:.0} MB/s < 100 MB/s");
        assert!(streamed >= 50.0, "stream {streamed:.0} MB/s < 50 MB/s");
    }
}
