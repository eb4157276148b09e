//! Every built-in rule: at least one positive (the exact value is found, under that rule id) and
//! negatives that look close (placeholders, short or low-entropy values, publishable keys).

use crate::common;

use common::*;
use sandlot_guard::{redact, Kind, Scanner};
use sha2::{Digest, Sha256};

/// A positive case: `text` must yield exactly one finding, for `rule`, covering `value`.
struct Positive {
    rule: &'static str,
    text: String,
    value: String,
}

fn positive(rule: &'static str, before: &str, value: String, after: &str) -> Positive {
    Positive {
        rule,
        text: format!("{before}{value}{after}"),
        value,
    }
}

fn pem(kind: &str, rng: &mut Rng, lines: usize, end: bool) -> String {
    let mut s = format!("-----BEGIN {kind}-----\n");
    for _ in 0..lines {
        s.push_str(&rng.token(BASE64, 64));
        s.push('\n');
    }
    s.push_str(&rng.token(BASE64, 20));
    s.push_str("==");
    if end {
        s.push_str(&format!("\n-----END {kind}-----"));
    }
    s
}

fn positives() -> Vec<Positive> {
    let r = &mut Rng::new(7);
    vec![
        positive(
            "private-key",
            "key:\n",
            pem("RSA PRIVATE KEY", r, 12, true),
            "\nok\n",
        ),
        positive(
            "private-key",
            "",
            pem("OPENSSH PRIVATE KEY", r, 6, true),
            "\n",
        ),
        positive("private-key", "", pem("PRIVATE KEY", r, 4, true), ""),
        positive(
            "private-key",
            "",
            pem("EC PRIVATE KEY", r, 2, true),
            " trailing",
        ),
        positive(
            "private-key",
            "",
            pem("PGP PRIVATE KEY BLOCK", r, 3, true),
            "\n",
        ),
        // Truncated by `head`: still a leaked key.
        positive(
            "private-key",
            "$ head key.pem\n",
            pem("RSA PRIVATE KEY", r, 5, false),
            "",
        ),
        positive(
            "aws-access-key-id",
            "id=",
            format!("AKIA{}", r.token(BASE32, 16)),
            "\n",
        ),
        positive(
            "aws-access-key-id",
            "",
            format!("ASIA{}", r.token(BASE32, 16)),
            " ",
        ),
        positive(
            "aws-secret-access-key",
            "aws_secret_access_key = ",
            r.token(BASE64, 40),
            "\n",
        ),
        positive(
            "aws-secret-access-key",
            "export AWS_SECRET_ACCESS_KEY=",
            r.token(BASE64, 40),
            "",
        ),
        positive(
            "aws-secret-access-key",
            r#"{"AccessKeyId": "x", "SecretAccessKey": ""#,
            r.token(BASE64, 40),
            r#"", "SessionToken": "y"}"#,
        ),
        positive(
            "github-token",
            "token: ",
            format!("ghp_{}", r.token(ALNUM, 36)),
            "\n",
        ),
        positive(
            "github-token",
            "",
            format!("gho_{}", r.token(ALNUM, 36)),
            "",
        ),
        positive(
            "github-token",
            "(",
            format!("ghs_{}", r.token(ALNUM, 36)),
            ")",
        ),
        positive(
            "github-token",
            "",
            format!("ghu_{}", r.token(ALNUM, 36)),
            "",
        ),
        positive(
            "github-token",
            "",
            format!("ghr_{}", r.token(ALNUM, 76)),
            "",
        ),
        positive(
            "github-fine-grained-pat",
            "GH=",
            format!("github_pat_{}", r.token(ALNUM, 82)),
            "\n",
        ),
        positive(
            "gitlab-token",
            "",
            format!("glpat-{}", r.token(ALNUM, 20)),
            "\n",
        ),
        positive(
            "slack-token",
            "SLACK=",
            format!(
                "xoxb-{}-{}-{}",
                r.token("0123456789", 12),
                r.token("0123456789", 13),
                r.token(ALNUM, 24)
            ),
            "\n",
        ),
        positive(
            "slack-token",
            "",
            format!(
                "xoxp-{}-{}-{}-{}",
                r.token("0123456789", 11),
                r.token("0123456789", 11),
                r.token("0123456789", 12),
                r.token(HEX, 32)
            ),
            "",
        ),
        positive(
            "slack-app-token",
            "",
            format!(
                "xapp-1-A{}-{}-{}",
                r.token("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", 10),
                r.token("0123456789", 13),
                r.token(HEX, 64)
            ),
            "\n",
        ),
        positive(
            "slack-webhook-url",
            "POST ",
            format!(
                "https://hooks.slack.com/services/T{}/B{}/{}",
                r.token(UPPER, 8),
                r.token(UPPER, 10),
                r.token(ALNUM, 24)
            ),
            "\n",
        ),
        positive(
            "stripe-secret-key",
            "",
            format!("sk_live_{}", r.token(ALNUM, 24)),
            "\n",
        ),
        positive(
            "stripe-secret-key",
            "",
            format!("rk_test_{}", r.token(ALNUM, 99)),
            "",
        ),
        positive(
            "google-api-key",
            "key=",
            format!("AIza{}", r.token(URLSAFE, 35)),
            "&q=1",
        ),
        positive(
            "anthropic-api-key",
            "ANTHROPIC_API_KEY=",
            format!("sk-ant-api03-{}AA", r.token(URLSAFE, 93)),
            "\n",
        ),
        positive(
            "openai-api-key",
            "",
            format!("sk-proj-{}", r.token(URLSAFE, 120)),
            "\n",
        ),
        positive(
            "openai-api-key",
            "'",
            format!("sk-{}T3BlbkFJ{}", r.token(ALNUM, 20), r.token(ALNUM, 20)),
            "'",
        ),
        positive(
            "openai-api-key",
            "",
            format!("sk-{}", r.token(ALNUM, 48)),
            "",
        ),
        positive(
            "huggingface-token",
            "",
            format!("hf_{}", r.token(LETTERS, 34)),
            "\n",
        ),
        positive(
            "pypi-token",
            "password = ",
            format!("pypi-AgEIcHlwaS5vcmc{}", r.token(URLSAFE, 150)),
            "\n",
        ),
        positive(
            "jwt",
            "Cookie: session=",
            format!(
                "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJ{}.{}",
                r.token(URLSAFE, 40),
                r.token(URLSAFE, 43)
            ),
            "; Path=/",
        ),
        positive(
            "url-credentials",
            "connecting to postgres://admin:",
            "S3cr3tP4ss2024".to_string(),
            "@db.internal:5432/app\n",
        ),
        positive(
            "url-credentials",
            "pip install --index-url https://__token__:",
            r.token(ALNUM, 30),
            "@pkgs.internal/simple x\n",
        ),
        positive(
            "generic-secret-assignment",
            "DB_PASSWORD = \"",
            "k9Xq2LmW7vPz".to_string(),
            "\"\n",
        ),
        positive(
            "generic-secret-assignment",
            "API_TOKEN=",
            r.token(ALNUM, 24),
            "\n",
        ),
        positive(
            "generic-secret-assignment",
            "{\"client_secret\": \"",
            r.token(ALNUM, 32),
            "\"}",
        ),
        positive(
            "generic-secret-assignment",
            "config.secretKey = '",
            r.token(HEX, 32),
            "'",
        ),
        positive(
            "high-entropy-near-keyword",
            "Authorization: Bearer ",
            r.token(URLSAFE, 40),
            "\r\n",
        ),
        positive(
            "high-entropy-near-keyword",
            "your new api key is ",
            r.token(ALNUM, 32),
            ", keep it safe\n",
        ),
    ]
}

#[test]
fn every_rule_has_a_positive_case_and_finds_it() {
    let scanner = Scanner::default();
    let cases = positives();
    for rule in Scanner::rules() {
        assert!(
            cases.iter().any(|c| c.rule == rule.id),
            "no positive case for {}",
            rule.id
        );
    }
    for case in &cases {
        let findings = scanner.scan(&case.text);
        assert_eq!(
            rules(&findings),
            vec![case.rule],
            "rule {} on {:?}",
            case.rule,
            case.text
        );
        let f = &findings[0];
        assert_eq!(&case.text[f.start..f.end], case.value, "rule {}", case.rule);
        assert_eq!(f.kind, Kind::Secret);
        assert_eq!(f.sha256, hex::encode(Sha256::digest(case.value.as_bytes())));
        let redacted = redact(&case.text, &findings);
        assert!(!redacted.contains(&case.value));
        assert!(redacted.contains(&format!("[REDACTED:{}]", case.rule)));
    }
}

#[test]
fn findings_never_show_the_value() {
    let scanner = Scanner::default();
    for case in positives() {
        let findings = scanner.scan(&case.text);
        let shown = format!("{findings:?} {}", serde_json::to_string(&findings).unwrap());
        assert!(!shown.contains(&case.value), "rule {}", case.rule);
    }
}

#[test]
fn near_misses_are_not_findings() {
    let r = &mut Rng::new(11);
    let negatives = [
        // private-key: a certificate, a public key, a doc placeholder.
        pem("CERTIFICATE", r, 10, true),
        pem("PUBLIC KEY", r, 4, true),
        "-----BEGIN PRIVATE KEY-----\n...\n-----END PRIVATE KEY-----".to_string(),
        // aws: the documented example, too short, lowercase, inside a longer word.
        "AKIAIOSFODNN7EXAMPLE".to_string(),
        format!("AKIA{}", r.token(BASE32, 12)),
        format!("akia{}", r.token(BASE32, 16).to_lowercase()),
        format!("XAKIA{}", r.token(BASE32, 16)),
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".to_string(),
        format!(
            "aws_region = {}",
            r.token(BASE64, 40).replace(['+', '/'], "a")[..9].to_owned()
        ),
        // github: short, filler.
        format!("ghp_{}", r.token(ALNUM, 10)),
        format!("ghp_{}", "a".repeat(36)),
        format!("github_pat_{}", r.token(ALNUM, 20)),
        "glpat-short".to_string(),
        // slack: placeholders without the numeric team/user parts.
        "xoxb-your-token-here-please".to_string(),
        "xapp-1-short".to_string(),
        "https://hooks.slack.com/services/".to_string(),
        // stripe publishable keys are public.
        format!("pk_live_{}", r.token(ALNUM, 24)),
        format!("AIza{}", r.token(ALNUM, 10)),
        "sk-ant-api03-short".to_string(),
        "task-1234 disk-usage sk-learn scikit-learn".to_string(),
        "from huggingface_hub import hf_hub_download".to_string(),
        "pip install pypi-simple".to_string(),
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9".to_string(),
        // url-credentials: placeholders, ports, no password.
        "https://user:password@example.com/".to_string(),
        "https://example.com:8080/path".to_string(),
        "ssh://git@github.com/org/repo.git".to_string(),
        "postgres://user:${DB_PASS}@db/app".to_string(),
        // generic: placeholders, references, words.
        "password = \"changeme\"".to_string(),
        "token = os.environ[\"TOKEN\"]".to_string(),
        "tokenizer = \"bert-base-uncased\"".to_string(),
        "secret_key = \"${SECRET_KEY}\"".to_string(),
        "api_key = \"<your-api-key>\"".to_string(),
        "PASSWORD=xxxxxxxxxxxxxxxxxxxx".to_string(),
        "token_id: 123e4567-e89b-12d3-a456-426614174000".to_string(),
        "password: str = Field(default=None)".to_string(),
        "tests_passed = \"12 of 12\"".to_string(),
        // near-keyword: prose, counts, UUIDs, words.
        "the key is not found in the dictionary".to_string(),
        "token count: 123456789012345678901234".to_string(),
        "key: 123e4567-e89b-12d3-a456-426614174000".to_string(),
        "Bearer authentication_is_required_for_this_route".to_string(),
        "primary key (customer_id, order_id_and_line)".to_string(),
    ];
    let scanner = Scanner::default();
    for text in &negatives {
        let findings = scanner.scan(text);
        assert!(
            findings.is_empty(),
            "false positive {:?} on {text:?}",
            rules(&findings)
        );
    }
}

#[test]
fn specific_rules_win_over_generic_ones() {
    let r = &mut Rng::new(3);
    let token = format!("ghp_{}", r.token(ALNUM, 36));
    let text = format!(
        "GITHUB_TOKEN={token}\nexport STRIPE_SECRET=\"sk_live_{}\"\n",
        r.token(ALNUM, 24)
    );
    let findings = Scanner::default().scan(&text);
    assert_eq!(rules(&findings), vec!["github-token", "stripe-secret-key"]);
    assert_eq!(values(&text, &findings)[0], token);
}

#[test]
fn several_secrets_in_one_text_are_all_found_in_order() {
    let cases = positives();
    // `#` ends the truncated PEM case's base64 run, as any ordinary next line would.
    let text: String = cases.iter().map(|c| format!("{}\n#\n", c.text)).collect();
    let findings = Scanner::default().scan(&text);
    let expected: Vec<&str> = cases.iter().map(|c| c.rule).collect();
    assert_eq!(rules(&findings), expected);
    let redacted = redact(&text, &findings);
    for c in &cases {
        assert!(!redacted.contains(&c.value), "rule {}", c.rule);
    }
}

#[test]
fn scan_bytes_handles_non_utf8() {
    let r = &mut Rng::new(5);
    let token = format!("ghp_{}", r.token(ALNUM, 36));
    let mut bytes = vec![0xff, 0xfe, 0x00, b' '];
    bytes.extend_from_slice(token.as_bytes());
    bytes.extend_from_slice(&[b' ', 0xc3]);
    let findings = Scanner::default().scan_bytes(&bytes);
    assert_eq!(rules(&findings), vec!["github-token"]);
    let out = sandlot_guard::redact_bytes(&bytes, &findings);
    assert_eq!(&out[..4], &[0xff, 0xfe, 0x00, b' ']);
    assert!(out.ends_with(b"[REDACTED:github-token] \xc3"));
}

#[test]
fn offsets_fall_on_char_boundaries_in_unicode_text() {
    let r = &mut Rng::new(9);
    let text = format!(
        "密码 password = \"{}\" ✓ ключ: Bearer {} 終わり",
        r.token(ALNUM, 16),
        r.token(ALNUM, 40)
    );
    let findings = Scanner::default().scan(&text);
    assert_eq!(findings.len(), 2);
    for f in &findings {
        assert!(text.is_char_boundary(f.start) && text.is_char_boundary(f.end));
    }
}
