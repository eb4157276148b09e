//! Canary credentials: fake AWS keys planted in each sandbox; seeing one leave means exfiltration.
//!
//! A canary looks exactly like a real AWS key pair so that code hunting for credentials (in the
//! environment or in `~/.aws/credentials`) picks it up. It is fresh per sandbox, drawn from the
//! OS random source, and never valid anywhere, so any appearance in output or egress is a signal,
//! never a false positive. Detection also covers encoded forms (see `scanner.rs`), since
//! exfiltration usually encodes.

use crate::GuardError;

/// Base32 alphabet AWS uses for the 16 characters after the key id prefix.
const KEY_ID_ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
/// Base64 alphabet of AWS secret access keys (40 characters).
const SECRET_ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// A fake AWS credential pair. `Debug` hides the secret half, so logging a `Canary` by accident
/// does not plant the canary in the server's own logs.
#[derive(Clone, PartialEq, Eq)]
pub struct Canary {
    /// `AKIA` followed by 16 base32 characters.
    pub access_key_id: String,
    /// 40 base64 characters.
    pub secret: String,
}

impl std::fmt::Debug for Canary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Canary")
            .field("access_key_id", &self.access_key_id)
            .field("secret", &"<hidden>")
            .finish()
    }
}

impl Canary {
    /// A fresh canary from the OS random source.
    ///
    /// # Panics
    /// If the OS random source is unavailable (as `rand::random` would); use
    /// [`Canary::try_generate`] to get the error instead.
    pub fn generate() -> Canary {
        match Canary::try_generate() {
            Ok(canary) => canary,
            Err(e) => panic!("{e}"),
        }
    }

    /// A fresh canary from the OS random source (one `getrandom` call, no userspace RNG state).
    pub fn try_generate() -> Result<Canary, GuardError> {
        let mut bytes = [0u8; 56];
        getrandom::fill(&mut bytes).map_err(|e| GuardError::Random(e.to_string()))?;
        let (id_bytes, secret_bytes) = bytes.split_at(16);
        // 256 is a multiple of both 32 and 64, so `b % len` is unbiased.
        let pick = |alphabet: &[u8], b: &u8| char::from(alphabet[*b as usize % alphabet.len()]);
        let mut access_key_id = String::from("AKIA");
        access_key_id.extend(id_bytes.iter().map(|b| pick(KEY_ID_ALPHABET, b)));
        let secret = secret_bytes
            .iter()
            .map(|b| pick(SECRET_ALPHABET, b))
            .collect();
        Ok(Canary {
            access_key_id,
            secret,
        })
    }

    /// The strings to watch for: the key id and the secret.
    pub fn values(&self) -> [&str; 2] {
        [&self.access_key_id, &self.secret]
    }

    /// Environment variables the sandbox receives.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID".to_string(), self.access_key_id.clone()),
            ("AWS_SECRET_ACCESS_KEY".to_string(), self.secret.clone()),
        ]
    }

    /// Text of an `~/.aws/credentials` file holding the canary as the default profile.
    pub fn credentials_file(&self) -> String {
        format!(
            "[default]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
            self.access_key_id, self.secret
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_canaries_look_like_aws_keys_and_differ() {
        let a = Canary::generate();
        let b = Canary::generate();
        assert_ne!(a, b);
        for c in [&a, &b] {
            assert_eq!(c.access_key_id.len(), 20);
            assert!(c.access_key_id.starts_with("AKIA"));
            assert!(c.access_key_id[4..]
                .bytes()
                .all(|ch| KEY_ID_ALPHABET.contains(&ch)));
            assert_eq!(c.secret.len(), 40);
            assert!(c.secret.bytes().all(|ch| SECRET_ALPHABET.contains(&ch)));
        }
    }

    #[test]
    fn env_and_credentials_file_carry_both_halves() {
        let c = Canary::generate();
        let env = c.env();
        assert_eq!(
            env[0],
            ("AWS_ACCESS_KEY_ID".into(), c.access_key_id.clone())
        );
        assert_eq!(env[1], ("AWS_SECRET_ACCESS_KEY".into(), c.secret.clone()));
        let file = c.credentials_file();
        assert!(file.starts_with("[default]\n"));
        assert!(file.contains(&format!("aws_access_key_id = {}\n", c.access_key_id)));
        assert!(file.contains(&format!("aws_secret_access_key = {}\n", c.secret)));
        assert!(!format!("{c:?}").contains(&c.secret));
    }
}
