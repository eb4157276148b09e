//! The built-in secret rules, as data.
//!
//! Each rule follows the shape gitleaks uses: a cheap keyword pattern that must occur somewhere in
//! the text before the rule runs (all keywords together form one `RegexSet` prefilter; the two
//! generic rules, anchored on case-insensitive keywords, always run), a full
//! pattern whose first non-empty capture group is the secret, and a check on the captured value
//! (a fixed Shannon entropy floor for the provider formats, the charset-aware thresholds of
//! detect-secrets plus placeholder filters for the generic ones).
//!
//! Patterns are compiled byte-oriented with Unicode off (ASCII `\b`, `\s` and case folding), so
//! the lazy DFA never has to give up on non-ASCII input. Every capture group starts and ends on an
//! ASCII byte, so offsets handed out are always UTF-8 character boundaries of a `&str` input.
//! Order matters: when two rules claim overlapping text the earlier (more specific) one wins.

/// How the captured value is checked before a match becomes a finding.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Check {
    /// Shannon entropy (bits per byte) of the value must be at least this.
    Entropy(f64),
    /// detect-secrets style: placeholder filter, then a threshold that depends on the charset
    /// (hex or base64-like) and the length. `strict` is for rules with a weaker anchor.
    Generic { strict: bool },
    /// At least this many bytes (a PEM block with a real body, not a documentation stub).
    MinLen(usize),
}

/// One built-in rule.
#[derive(Debug)]
pub(crate) struct Rule {
    pub id: &'static str,
    pub description: &'static str,
    /// Prefilter pattern, case-sensitive literals; the full pattern only runs when this matches
    /// somewhere. `None` for the generic rules: their patterns start with case-insensitive
    /// keywords that are common in prose, and the regex's own literal search over those keywords
    /// is the prefilter (a `RegexSet` holding them ran at ~165 MB/s on its own, the literal-only
    /// set at ~3 GB/s).
    pub keywords: Option<&'static str>,
    /// Full pattern; the first capture group that participated is the secret.
    pub pattern: &'static str,
    pub check: Check,
    /// Values ending with one of these are documentation examples, not secrets.
    pub allow_suffixes: &'static [&'static str],
}

/// Characters of the separator between a key name and its value: `=`, `:`, `:=`, `=>`.
macro_rules! assign {
    () => {
        r#"["']?[ \t]{0,5}(?:=>|:=|=|:)[ \t]{0,5}"#
    };
}

/// Key names that announce a secret in an assignment. The optional suffix must start with a
/// separator or a capital (camelCase), so `api_key_id` and `secretKey` count but `tokenizer` and
/// `passed` do not.
macro_rules! secret_key_name {
    () => {
        r#"(?i:passw(?:or)?d|passphrase|pwd|secret|token|api[_.-]?key|apikey|access[_.-]?key|auth[_.-]?key|private[_.-]?key|credentials?)(?:[_.\-A-Z][A-Za-z0-9_.\-]{0,20})?"#
    };
}

/// The built-in rules, most specific first.
pub(crate) static RULES: &[Rule] = &[
    Rule {
        id: "private-key",
        description: "PEM private key block (RSA, EC, DSA, OpenSSH, PGP, PKCS#8), or its truncated head",
        keywords: Some(r"-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY"),
        // Optional RFC 1421 headers (Proc-Type, DEK-Info), then base64 lines, then the END line;
        // without an END (output cut short) the match runs to the end of the base64 lines: a
        // truncated key is still a leaked key.
        pattern: r"(-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----[ \t]*\r?\n(?:[A-Za-z\-]{1,40}:[^\r\n]{0,200}\r?\n)*\s{0,4}(?:[A-Za-z0-9+/=]{1,200}\s{0,4})+(?:-----END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----)?)",
        check: Check::MinLen(100),
        allow_suffixes: &[],
    },
    Rule {
        id: "aws-access-key-id",
        description: "AWS access key id (AKIA/ASIA/ABIA/ACCA/A3T prefix, 16 base32 characters)",
        keywords: Some(r"A3T|AKIA|ASIA|ABIA|ACCA"),
        pattern: r"\b((?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16})\b",
        check: Check::Entropy(3.0),
        allow_suffixes: &["EXAMPLE"],
    },
    Rule {
        id: "aws-secret-access-key",
        description: "AWS secret access key (40 base64 characters after an aws...secret key name)",
        keywords: Some(r"aws|AWS|Aws|SecretAccessKey|secretAccessKey|secret_access_key|SECRET_ACCESS_KEY|secret-access-key"),
        pattern: concat!(
            r#"(?:(?:aws|AWS|Aws)[A-Za-z0-9_.\-]{0,20}(?i:secret|private)[A-Za-z0-9_.\-]{0,20}|SecretAccessKey|secretAccessKey|secret_access_key|SECRET_ACCESS_KEY|secret-access-key)"#,
            assign!(),
            r#"["']?([A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+=]|\z)"#
        ),
        check: Check::Entropy(3.5),
        allow_suffixes: &["EXAMPLEKEY"],
    },
    Rule {
        id: "github-token",
        description: "GitHub token: personal (ghp_), OAuth (gho_), user-to-server (ghu_), server-to-server (ghs_), refresh (ghr_)",
        keywords: Some(r"gh[pousr]_"),
        pattern: r"\b(gh[pousr]_[A-Za-z0-9]{36,255})\b",
        check: Check::Entropy(3.0),
        allow_suffixes: &[],
    },
    Rule {
        id: "github-fine-grained-pat",
        description: "GitHub fine-grained personal access token (github_pat_)",
        keywords: Some(r"github_pat_"),
        pattern: r"\b(github_pat_[A-Za-z0-9_]{82})\b",
        check: Check::Entropy(3.0),
        allow_suffixes: &[],
    },
    Rule {
        id: "gitlab-token",
        description: "GitLab personal access token (glpat-)",
        keywords: Some(r"glpat-"),
        pattern: r"\b(glpat-[A-Za-z0-9_\-]{20,60})(?:[^A-Za-z0-9_\-]|\z)",
        check: Check::Entropy(3.0),
        allow_suffixes: &[],
    },
    Rule {
        id: "slack-token",
        description: "Slack bot, user, app, legacy or refresh token (xoxb-, xoxp-, xoxa-, xoxo-, xoxs-, xoxr-, xoxe-)",
        keywords: Some(r"xox[abposre]-"),
        pattern: r"\b(xox[abposre]-[0-9]{1,15}-[0-9A-Za-z\-]{10,250})",
        check: Check::Entropy(3.0),
        allow_suffixes: &[],
    },
    Rule {
        id: "slack-app-token",
        description: "Slack app-level token (xapp-)",
        keywords: Some(r"xapp-"),
        pattern: r"\b(xapp-[0-9]-[A-Z0-9]{6,20}-[0-9]{6,20}-[a-z0-9]{32,80})\b",
        check: Check::Entropy(3.0),
        allow_suffixes: &[],
    },
    Rule {
        id: "slack-webhook-url",
        description: "Slack incoming webhook URL",
        keywords: Some(r"hooks\.slack\.com/"),
        pattern: r"(https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/]{43,120})",
        check: Check::Entropy(3.0),
        allow_suffixes: &[],
    },
    Rule {
        id: "stripe-secret-key",
        description: "Stripe secret or restricted key (sk_live_, sk_test_, rk_live_, ...)",
        keywords: Some(r"[sr]k_(?:live|test|prod)_"),
        pattern: r"\b((?:sk|rk)_(?:live|test|prod)_[0-9A-Za-z]{16,247})\b",
        check: Check::Entropy(3.0),
        allow_suffixes: &[],
    },
    Rule {
        id: "google-api-key",
        description: "Google API key (AIza, 39 characters)",
        keywords: Some(r"AIza"),
        pattern: r"\b(AIza[0-9A-Za-z_\-]{35})(?:[^0-9A-Za-z_\-]|\z)",
        check: Check::Entropy(3.0),
        allow_suffixes: &[],
    },
    Rule {
        id: "anthropic-api-key",
        description: "Anthropic API or admin key (sk-ant-api03-, sk-ant-admin01-, ...)",
        keywords: Some(r"sk-ant-"),
        pattern: r"\b(sk-ant-(?:api|admin|oat|sid)[0-9]{2}-[A-Za-z0-9_\-]{80,120})(?:[^A-Za-z0-9_\-]|\z)",
        check: Check::Entropy(3.5),
        allow_suffixes: &[],
    },
    Rule {
        id: "openai-api-key",
        description: "OpenAI API key (sk-proj-, sk-svcacct-, sk-admin-, legacy sk- with T3BlbkFJ)",
        keywords: Some(r"sk-"),
        pattern: r"\b(sk-(?:(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{40,250}|[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}|[A-Za-z0-9]{48}))(?:[^A-Za-z0-9_\-]|\z)",
        check: Check::Entropy(3.5),
        allow_suffixes: &[],
    },
    Rule {
        id: "huggingface-token",
        description: "Hugging Face access token (hf_)",
        keywords: Some(r"hf_"),
        pattern: r"\b(hf_[A-Za-z]{34})\b",
        check: Check::Entropy(3.5),
        allow_suffixes: &[],
    },
    Rule {
        id: "pypi-token",
        description: "PyPI upload token (pypi-AgEIcHlwaS5vcmc...)",
        keywords: Some(r"pypi-AgEIcHlwaS5vcmc"),
        pattern: r"\b(pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{50,1000})(?:[^A-Za-z0-9_\-]|\z)",
        check: Check::Entropy(3.0),
        allow_suffixes: &[],
    },
    Rule {
        id: "jwt",
        description: "JSON Web Token (base64url header and payload starting eyJ, optional signature)",
        keywords: Some(r"eyJ"),
        pattern: r"\b(eyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.(?:[A-Za-z0-9_\-]{10,})?)",
        check: Check::Entropy(3.0),
        allow_suffixes: &[],
    },
    Rule {
        id: "url-credentials",
        description: "password embedded in a URL (scheme://user:password@host)",
        keywords: Some(r"://"),
        pattern: r"\b[A-Za-z][A-Za-z0-9+.\-]{1,20}://[^\s:/@'\x22]{1,100}:([^\s:/@'\x22]{3,200})@[A-Za-z0-9.\-\[\]]+",
        check: Check::Generic { strict: false },
        allow_suffixes: &[],
    },
    Rule {
        id: "generic-secret-assignment",
        description: "a value assigned to a secret-sounding key name (password, secret, token, api_key, ...): quoted (8+ chars) or bare (16+ chars), entropy-checked",
        keywords: None,
        pattern: concat!(
            secret_key_name!(),
            assign!(),
            r#"(?:["'`]([^"'`\s]{8,200})["'`]|([A-Za-z0-9/+_.~!@#$%^&*=\-]{16,200})(?:[^A-Za-z0-9/+_.~!@#$%^&*=\-]|\z))"#
        ),
        check: Check::Generic { strict: false },
        allow_suffixes: &[],
    },
    Rule {
        id: "high-entropy-near-keyword",
        description: "a high-entropy base64 or hex string right after a keyword in prose or headers (\"Bearer ...\", \"token: ...\", \"the key is ...\")",
        keywords: None,
        pattern: r#"(?i:\b(?:bearer|basic|token|key|secret|password|credential)s?)(?:[ \t]+(?i:is|was)|[ \t]*(?:=>|:=|=|:))?[ \t]+["'`]?([A-Za-z0-9+/_=.\-]{20,200})(?:[^A-Za-z0-9+/_=.\-]|\z)"#,
        check: Check::Generic { strict: true },
        allow_suffixes: &[],
    },
];
