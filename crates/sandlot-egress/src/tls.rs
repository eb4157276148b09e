//! Reading the server name (SNI) out of a TLS ClientHello, without terminating TLS.
//!
//! A CONNECT tunnel is checked by its host, but the client then speaks TLS to whatever server
//! answers at the checked address; the SNI says which site it asks that server for. A
//! client that CONNECTs to an allowed host and then asks for another name in its ClientHello
//! is domain fronting (a CDN would route it to the other site), so the SNI must equal the
//! CONNECT host; a tunnel that does not begin with a ClientHello, or whose hello names no
//! server, is closed (a tunnel carries TLS to the host it names, not SMTP or plain HTTP past
//! the proxy's checks). Hand-written because only this one field is needed and the parser
//! must accept partial input (the hello may arrive over several reads and TLS records);
//! bounded by [`MAX_HELLO_BYTES`].

/// Most bytes of TLS records read while looking for the end of the ClientHello.
pub const MAX_HELLO_BYTES: usize = 64 << 10;

/// What the first bytes of a tunnel are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hello {
    /// Not a TLS handshake (the first byte is not a handshake record).
    NotTls,
    /// A TLS handshake record, but not all of the ClientHello yet.
    Incomplete,
    /// A whole ClientHello, with its `host_name` SNI if it has one (lowercase, as sent).
    Complete { sni: Option<String> },
    /// A handshake that is not a well-formed ClientHello.
    Malformed(&'static str),
}

const HANDSHAKE: u8 = 0x16;
const CLIENT_HELLO: u8 = 0x01;
const EXT_SERVER_NAME: u16 = 0;
/// Largest TLS record payload (2^14) plus what compression/encryption may add (RFC 8446 5.2).
const MAX_RECORD: usize = (1 << 14) + 2048;

/// Reads the first bytes `buf` of a tunnel. See [`Hello`].
pub fn parse_client_hello(buf: &[u8]) -> Hello {
    match buf.first() {
        None => return Hello::Incomplete,
        Some(&b) if b != HANDSHAKE => return Hello::NotTls,
        Some(_) => {}
    }
    // The handshake message, reassembled from the payloads of consecutive handshake records.
    let mut msg = Vec::new();
    let mut rest = buf;
    loop {
        if rest.len() < 5 {
            return Hello::Incomplete;
        }
        if rest[0] != HANDSHAKE {
            return Hello::Malformed("the ClientHello is interrupted by another record type");
        }
        if rest[1] != 3 {
            return Hello::Malformed("not a TLS record version");
        }
        let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        if len == 0 || len > MAX_RECORD {
            return Hello::Malformed("a TLS record of an invalid length");
        }
        if rest.len() < 5 + len {
            return Hello::Incomplete;
        }
        msg.extend_from_slice(&rest[5..5 + len]);
        rest = &rest[5 + len..];
        if msg.len() >= 4 {
            if msg[0] != CLIENT_HELLO {
                return Hello::Malformed("the first handshake message is not a ClientHello");
            }
            let body_len =
                (usize::from(msg[1]) << 16) | (usize::from(msg[2]) << 8) | usize::from(msg[3]);
            if body_len > MAX_HELLO_BYTES {
                return Hello::Malformed("a ClientHello larger than the proxy accepts");
            }
            if msg.len() >= 4 + body_len {
                return match sni(&msg[4..4 + body_len]) {
                    Ok(sni) => Hello::Complete { sni },
                    Err(why) => Hello::Malformed(why),
                };
            }
        }
    }
}

/// A cursor over a ClientHello body; every read is bounds-checked.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if self.0.len() < n {
            return Err("a truncated ClientHello");
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, &'static str> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, &'static str> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn vec8(&mut self) -> Result<&'a [u8], &'static str> {
        let n = self.u8()?;
        self.take(usize::from(n))
    }

    fn vec16(&mut self) -> Result<&'a [u8], &'static str> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }
}

fn sni(body: &[u8]) -> Result<Option<String>, &'static str> {
    let mut r = Reader(body);
    r.take(2 + 32)?; // legacy_version, random
    let session_id = r.vec8()?;
    if session_id.len() > 32 {
        return Err("a ClientHello session id longer than 32 bytes");
    }
    r.vec16()?; // cipher_suites
    r.vec8()?; // legacy_compression_methods
    if r.0.is_empty() {
        return Ok(None); // no extensions at all (TLS 1.2 and older may omit them)
    }
    let mut exts = Reader(r.vec16()?);
    let mut found = None;
    while !exts.0.is_empty() {
        let kind = exts.u16()?;
        let data = exts.vec16()?;
        if kind != EXT_SERVER_NAME {
            continue;
        }
        if found.is_some() {
            return Err("two server_name extensions");
        }
        let mut list = Reader(data);
        let mut names = Reader(list.vec16()?);
        let mut host = None;
        while !names.0.is_empty() {
            let name_type = names.u8()?;
            let name = names.vec16()?;
            if name_type != 0 {
                continue;
            }
            if host.is_some() {
                return Err("two host names in the server_name extension");
            }
            let name = std::str::from_utf8(name).map_err(|_| "a server name that is not ASCII")?;
            if name.is_empty() || !name.is_ascii() {
                return Err("a server name that is empty or not ASCII");
            }
            host = Some(name.to_ascii_lowercase());
        }
        found = Some(host);
    }
    Ok(found.flatten())
}

/// A ClientHello with `sni` (if any), in `records` TLS records; for tests of the proxy and the
/// parser. Not a usable handshake (no key shares), only well-formed.
#[doc(hidden)]
pub fn client_hello_for_tests(sni: Option<&str>, records: usize) -> Vec<u8> {
    let mut exts = Vec::new();
    // An unrelated extension first (supported_versions), as real clients send several.
    exts.extend_from_slice(&[0x00, 0x2b, 0x00, 0x03, 0x02, 0x03, 0x04]);
    if let Some(name) = sni {
        let n = name.len() as u16;
        exts.extend_from_slice(&0u16.to_be_bytes());
        exts.extend_from_slice(&(n + 5).to_be_bytes());
        exts.extend_from_slice(&(n + 3).to_be_bytes());
        exts.push(0);
        exts.extend_from_slice(&n.to_be_bytes());
        exts.extend_from_slice(name.as_bytes());
    }
    let mut body = vec![0x03, 0x03];
    body.extend_from_slice(&[7u8; 32]);
    body.push(0);
    body.extend_from_slice(&[0x00, 0x02, 0x13, 0x01]);
    body.extend_from_slice(&[0x01, 0x00]);
    body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
    body.extend_from_slice(&exts);
    let mut msg = vec![CLIENT_HELLO];
    msg.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    msg.extend_from_slice(&body);
    let mut out = Vec::new();
    let per = msg.len().div_ceil(records.max(1));
    for chunk in msg.chunks(per) {
        out.extend_from_slice(&[HANDSHAKE, 0x03, 0x01]);
        out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_sni_in_whole_split_and_partial_hellos() {
        let hello = client_hello_for_tests(Some("Pkg.Test"), 1);
        assert_eq!(
            parse_client_hello(&hello),
            Hello::Complete {
                sni: Some("pkg.test".into())
            }
        );
        let split = client_hello_for_tests(Some("pkg.test"), 3);
        assert_eq!(
            parse_client_hello(&split),
            Hello::Complete {
                sni: Some("pkg.test".into())
            }
        );
        for cut in 0..split.len() {
            assert_eq!(
                parse_client_hello(&split[..cut]),
                Hello::Incomplete,
                "{cut}"
            );
        }
        assert_eq!(
            parse_client_hello(&client_hello_for_tests(None, 1)),
            Hello::Complete { sni: None }
        );
    }

    #[test]
    fn refuses_what_is_not_a_hello() {
        assert_eq!(parse_client_hello(b"GET / HTTP/1.1\r\n"), Hello::NotTls);
        assert!(matches!(
            parse_client_hello(&[0x16, 0x03, 0x01, 0x00, 0x00]),
            Hello::Malformed(_)
        ));
        assert!(matches!(
            parse_client_hello(&[0x16, 0x03, 0x01, 0x00, 0x04, 0x02, 0, 0, 0]),
            Hello::Malformed(_)
        ));
        // A hello whose inner lengths lie (claims extensions longer than it has).
        let mut hello = client_hello_for_tests(Some("pkg.test"), 1);
        let n = hello.len();
        hello[n - 12] = 0xff;
        assert!(matches!(parse_client_hello(&hello), Hello::Malformed(_)));
        // Garbage after the first record header never panics.
        for b in 0..=255u8 {
            let _ = parse_client_hello(&[0x16, 0x03, 0x01, 0x00, 0x06, 0x01, 0, 0, 2, b, b]);
        }
    }
}
