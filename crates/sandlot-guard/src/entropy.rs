//! Value checks: Shannon entropy and the detect-secrets style filters for generic rules.
//!
//! Provider formats (ghp_, AKIA, ...) are specific enough that a low entropy floor only weeds
//! out `ghp_aaaa...` style fillers. Generic rules ("a token-ish key name, then a value") are where
//! false positives come from, so their values must also look random for their charset: hex and
//! base64 have different maximum entropies, and short strings cannot reach a high one.

/// Shannon entropy of `value` in bits per byte.
pub(crate) fn shannon(value: &[u8]) -> f64 {
    if value.is_empty() {
        return 0.0;
    }
    let mut counts = [0u32; 256];
    for &b in value {
        counts[b as usize] += 1;
    }
    let len = value.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / len;
            -p * p.log2()
        })
        .sum()
}

/// Substrings (lowercase) that mark a value as a placeholder or a reference, not a secret.
const PLACEHOLDERS: &[&str] = &[
    "${",
    "{{",
    "<",
    ">",
    "***",
    "xxxx",
    "...",
    "example",
    "changeme",
    "change_me",
    "password",
    "placeholder",
    "your_",
    "your-",
    "dummy",
    "redacted",
    "sample",
    "test1234",
    "12345678",
    "abcdefgh",
    "getenv",
    "environ",
    "process.env",
    "none",
    "null",
    "undefined",
    "todo",
];

fn is_placeholder(value: &[u8]) -> bool {
    let lower = value.to_ascii_lowercase();
    if lower.windows(1).all(|w| w[0] == lower[0]) {
        return true;
    }
    PLACEHOLDERS
        .iter()
        .any(|p| lower.windows(p.len()).any(|w| w == p.as_bytes()))
}

/// `8-4-4-4-12` hex: an identifier, never treated as a generic secret.
fn is_uuid(value: &[u8]) -> bool {
    value.len() == 36
        && value.iter().enumerate().all(|(i, &b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

/// Generic rule check: not a placeholder, not a UUID, and random-looking for its charset.
///
/// Thresholds: hex values need 16+ chars and 3.0 bits (detect-secrets' hex limit); other values
/// need two of {lower, upper, digit} and an entropy of 0.8·log2(len) (0.85 when `strict`), capped
/// at 4.0 (4.2 strict): a random base62 string of length n scores close to log2(n), prose and
/// identifiers well under it.
pub(crate) fn looks_random(value: &[u8], strict: bool) -> bool {
    if value.len() < 3 || is_placeholder(value) || is_uuid(value) {
        return false;
    }
    let entropy = shannon(value);
    if value.iter().all(u8::is_ascii_hexdigit) {
        let min_len = if strict { 32 } else { 16 };
        return value.len() >= min_len && entropy >= 3.0;
    }
    let classes = [
        value.iter().any(u8::is_ascii_lowercase),
        value.iter().any(u8::is_ascii_uppercase),
        value.iter().any(u8::is_ascii_digit),
    ]
    .iter()
    .filter(|&&c| c)
    .count();
    if classes < 2 {
        return false;
    }
    let (factor, cap) = if strict { (0.85, 4.2) } else { (0.8, 4.0) };
    let threshold = (factor * (value.len() as f64).log2()).min(cap);
    entropy >= threshold
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entropy_of_known_strings() {
        assert_eq!(shannon(b""), 0.0);
        assert_eq!(shannon(b"aaaa"), 0.0);
        assert!((shannon(b"ab") - 1.0).abs() < 1e-9);
        assert!((shannon(b"0123456789abcdef") - 4.0).abs() < 1e-9);
    }

    #[test]
    fn generic_values() {
        assert!(looks_random(b"q8Vz3LmP0wXr7TbN2kYc", false));
        assert!(looks_random(b"9f86d081884c7d659a2feaa0c55ad015", false));
        assert!(!looks_random(b"my_secret_password_here", false));
        assert!(!looks_random(
            b"123e4567-e89b-12d3-a456-426614174000",
            false
        ));
        assert!(!looks_random(b"${API_TOKEN}", false));
        assert!(!looks_random(b"bert-base-uncased", false));
        assert!(!looks_random(b"xxxxxxxxxxxxxxxx", false));
    }
}
