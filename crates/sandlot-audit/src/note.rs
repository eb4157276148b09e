//! Checkpoints as C2SP signed notes (<https://c2sp.org/signed-note>,
//! <https://c2sp.org/tlog-checkpoint>): the body is the origin, the tree size and the base64
//! RFC 6962 root, one per line; a blank line; then `— <key name> <base64(key id || sig)>`
//! with an Ed25519 signature over the body (its final newline included). The key id is the
//! first four bytes of `SHA-256(name || 0x0A || 0x01 || public key)`. Keys are written in the
//! text forms Go's `sumdb/note` uses, so its tools read them: `PRIVATE+KEY+<name>+<id>+<b64>`
//! and the verifier key `<name>+<id>+<b64(0x01 || public key)>`.

use crate::AuditError;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use sha2::{Digest, Sha256};

/// The signature type byte of Ed25519 in signed notes.
const ALG_ED25519: u8 = 0x01;
/// The em dash and space that open a signature line.
const SIG_PREFIX: &str = "\u{2014} ";

/// `SHA-256(name || 0x0A || 0x01 || public key)[:4]`.
pub fn key_id(name: &str, public: &[u8; 32]) -> [u8; 4] {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update([b'\n', ALG_ED25519]);
    h.update(public);
    let d = h.finalize();
    [d[0], d[1], d[2], d[3]]
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('+') && !name.chars().any(char::is_whitespace)
}

/// The log's signing key and its name (the log's origin).
pub struct NoteSigner {
    name: String,
    key: SigningKey,
    id: [u8; 4],
}

impl NoteSigner {
    /// A fresh key from the kernel's randomness.
    pub fn generate(name: &str) -> Result<Self, AuditError> {
        if !valid_name(name) {
            return Err(AuditError::Key(format!("invalid key name {name:?}")));
        }
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| AuditError::Key(format!("randomness: {e}")))?;
        Ok(Self::from_seed(name, seed))
    }

    pub fn from_seed(name: &str, seed: [u8; 32]) -> Self {
        let key = SigningKey::from_bytes(&seed);
        let id = key_id(name, key.verifying_key().as_bytes());
        Self {
            name: name.to_owned(),
            key,
            id,
        }
    }

    /// `PRIVATE+KEY+<name>+<hex id>+<base64(0x01 || seed)>`.
    pub fn to_text(&self) -> String {
        let mut raw = vec![ALG_ED25519];
        raw.extend_from_slice(self.key.as_bytes());
        format!(
            "PRIVATE+KEY+{}+{}+{}",
            self.name,
            hex::encode(self.id),
            B64.encode(raw)
        )
    }

    pub fn from_text(text: &str) -> Result<Self, AuditError> {
        let bad = || AuditError::Key("the signing key file is malformed".into());
        let rest = text.trim().strip_prefix("PRIVATE+KEY+").ok_or_else(bad)?;
        // Names hold no `+`; base64 may.
        let mut parts = rest.splitn(3, '+');
        let (Some(name), Some(id), Some(b64)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad());
        };
        let raw = B64.decode(b64).map_err(|_| bad())?;
        if raw.len() != 33 || raw[0] != ALG_ED25519 || !valid_name(name) {
            return Err(bad());
        }
        let seed: [u8; 32] = raw[1..].try_into().map_err(|_| bad())?;
        let s = Self::from_seed(name, seed);
        if hex::encode(s.id) != id {
            return Err(bad());
        }
        Ok(s)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn verifier(&self) -> NoteVerifier {
        NoteVerifier {
            name: self.name.clone(),
            key: self.key.verifying_key(),
            id: self.id,
        }
    }

    /// The signed note of `body` (which must end in a newline).
    pub fn sign(&self, body: &str) -> String {
        debug_assert!(body.ends_with('\n'));
        let sig = self.key.sign(body.as_bytes());
        let mut raw = self.id.to_vec();
        raw.extend_from_slice(&sig.to_bytes());
        format!("{body}\n{SIG_PREFIX}{} {}\n", self.name, B64.encode(raw))
    }
}

/// A public key that checks notes.
#[derive(Clone, Debug)]
pub struct NoteVerifier {
    name: String,
    key: VerifyingKey,
    id: [u8; 4],
}

impl NoteVerifier {
    /// `<name>+<hex id>+<base64(0x01 || public key)>`.
    pub fn to_text(&self) -> String {
        let mut raw = vec![ALG_ED25519];
        raw.extend_from_slice(self.key.as_bytes());
        format!("{}+{}+{}", self.name, hex::encode(self.id), B64.encode(raw))
    }

    pub fn from_text(text: &str) -> Result<Self, AuditError> {
        let bad = |why: &str| AuditError::Key(format!("verifier key: {why}"));
        let mut parts = text.trim().splitn(3, '+');
        let (Some(name), Some(id), Some(b64)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad("not <name>+<id>+<key>"));
        };
        let raw = B64.decode(b64).map_err(|_| bad("the key is not base64"))?;
        if raw.len() != 33 || raw[0] != ALG_ED25519 {
            return Err(bad("not an Ed25519 key"));
        }
        let public: [u8; 32] = raw[1..].try_into().map_err(|_| bad("length"))?;
        let key = VerifyingKey::from_bytes(&public).map_err(|_| bad("not a curve point"))?;
        if !valid_name(name) || hex::encode(key_id(name, &public)) != id {
            return Err(bad("the key id does not match the name and key"));
        }
        Ok(Self {
            name: name.to_owned(),
            key,
            id: key_id(name, &public),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The body of `note` if one of its signature lines is this key's and verifies.
    pub fn open<'a>(&self, note: &'a str) -> Result<&'a str, String> {
        if note.len() > 1 << 20 || !note.ends_with('\n') {
            return Err("not a signed note".into());
        }
        if note.bytes().any(|b| b < 0x20 && b != b'\n') {
            return Err("a control character in the note".into());
        }
        let split = note
            .rfind("\n\n")
            .ok_or("no blank line before the signatures")?;
        let body = &note[..split + 1];
        let sigs = &note[split + 2..];
        for line in sigs.lines() {
            let rest = line
                .strip_prefix(SIG_PREFIX)
                .ok_or("a malformed signature line")?;
            let (name, b64) = rest.split_once(' ').ok_or("a malformed signature line")?;
            if name != self.name {
                continue;
            }
            let raw = B64.decode(b64).map_err(|_| "a signature is not base64")?;
            if raw.len() != 68 || raw[..4] != self.id {
                continue;
            }
            let sig = Signature::from_slice(&raw[4..]).map_err(|_| "a malformed signature")?;
            return self
                .key
                .verify(body.as_bytes(), &sig)
                .map(|()| body)
                .map_err(|_| "the signature does not verify".into());
        }
        Err(format!("no signature by {}", self.name))
    }
}

/// The body of a checkpoint.
pub fn checkpoint_body(origin: &str, size: u64, root: &[u8; 32]) -> String {
    format!("{origin}\n{size}\n{}\n", B64.encode(root))
}

/// Origin, size and root of a checkpoint body.
pub fn parse_checkpoint_body(body: &str) -> Result<(String, u64, [u8; 32]), String> {
    let mut lines = body.split('\n');
    let origin = lines
        .next()
        .filter(|s| !s.is_empty())
        .ok_or("no origin line")?;
    let size = lines.next().ok_or("no size line")?;
    if size.is_empty() || (size.len() > 1 && size.starts_with('0')) {
        return Err("a malformed tree size".into());
    }
    let size: u64 = size.parse().map_err(|_| "a malformed tree size")?;
    let root = B64
        .decode(lines.next().ok_or("no root line")?)
        .map_err(|_| "the root is not base64")?;
    let root: [u8; 32] = root.try_into().map_err(|_| "the root is not 32 bytes")?;
    Ok((origin.to_owned(), size, root))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_open_roundtrip_and_format() {
        let s = NoteSigner::from_seed("example.com/log", [7u8; 32]);
        let body = checkpoint_body("example.com/log", 5, &[9u8; 32]);
        let note = s.sign(&body);
        let lines: Vec<&str> = note.split('\n').collect();
        assert_eq!(lines[0], "example.com/log");
        assert_eq!(lines[1], "5");
        assert_eq!(lines[2], B64.encode([9u8; 32]));
        assert_eq!(lines[3], "");
        assert!(lines[4].starts_with("\u{2014} example.com/log "));
        let sig = B64.decode(lines[4].rsplit(' ').next().unwrap()).unwrap();
        assert_eq!(sig.len(), 4 + 64);
        let v = s.verifier();
        assert_eq!(v.open(&note).unwrap(), body);
        let v2 = NoteVerifier::from_text(&v.to_text()).unwrap();
        assert_eq!(v2.open(&note).unwrap(), body);
        let s2 = NoteSigner::from_text(&s.to_text()).unwrap();
        assert_eq!(s2.sign(&body), note);
        assert_eq!(
            parse_checkpoint_body(&body).unwrap(),
            ("example.com/log".into(), 5, [9u8; 32])
        );
        // One flipped bit anywhere in the body or signature fails.
        for i in 0..note.len() - 1 {
            let mut b = note.clone().into_bytes();
            b[i] ^= 1;
            if let Ok(t) = String::from_utf8(b) {
                if t != note {
                    assert!(
                        v.open(&t).is_err() || v.open(&t).unwrap() != body,
                        "byte {i}"
                    );
                }
            }
        }
    }

    #[test]
    fn key_id_is_the_c2sp_one() {
        // Independent: SHA-256 over the concatenation, by hand.
        let pk = [3u8; 32];
        let mut buf = b"n\n\x01".to_vec();
        buf.extend_from_slice(&pk);
        let d = Sha256::digest(&buf);
        assert_eq!(key_id("n", &pk), [d[0], d[1], d[2], d[3]]);
    }
}
