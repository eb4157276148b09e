//! The control stream's framing, shared by both ends: a 4-byte little-endian length, then that
//! many bytes of JSON. The jail writes its `init` and `jail_error` frames with it; the server
//! encodes what it sends to the driver and decodes what the driver sends back. The Python driver
//! (`python/sandlot_runtime/protocol.py`) speaks the same format.

/// Largest frame either end accepts; a larger length prefix means a broken or hostile peer.
pub const MAX_FRAME: usize = 64 << 20;

/// Bytes of the length prefix.
pub const HEADER: usize = 4;

/// Why a buffer could not be decoded into a frame.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("frame of {0} bytes exceeds the limit of {MAX_FRAME}")]
    TooLarge(usize),
    #[error("malformed frame: {0}")]
    Malformed(String),
}

/// One frame: the length prefix followed by `payload`.
pub fn encode(payload: &[u8]) -> Vec<u8> {
    let mut buf = Vec::with_capacity(payload.len() + HEADER);
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buf.extend_from_slice(payload);
    buf
}

/// The payload length announced by a frame header, refused past [`MAX_FRAME`].
pub fn payload_len(header: [u8; HEADER]) -> Result<usize, FrameError> {
    let len = u32::from_le_bytes(header) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    Ok(len)
}

/// Decodes the first frame of `buf` as JSON. `Ok(None)` when `buf` does not hold a whole frame
/// yet; otherwise the value and the number of bytes it took.
pub fn decode(buf: &[u8]) -> Result<Option<(serde_json::Value, usize)>, FrameError> {
    let Some(header) = buf.get(..HEADER) else {
        return Ok(None);
    };
    let len = payload_len([header[0], header[1], header[2], header[3]])?;
    let Some(payload) = buf.get(HEADER..HEADER + len) else {
        return Ok(None);
    };
    let v = serde_json::from_slice(payload).map_err(|e| FrameError::Malformed(e.to_string()))?;
    Ok(Some((v, HEADER + len)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let buf = encode(br#"{"type":"hello"}"#);
        assert_eq!(&buf[..4], &16u32.to_le_bytes());
        let (v, used) = decode(&buf).unwrap().unwrap();
        assert_eq!(v["type"], "hello");
        assert_eq!(used, buf.len());
    }

    #[test]
    fn partial_frames_wait_for_more() {
        let buf = encode(b"{}");
        for cut in 0..buf.len() {
            assert_eq!(decode(&buf[..cut]).unwrap(), None, "cut at {cut}");
        }
    }

    #[test]
    fn two_frames_in_one_buffer() {
        let mut buf = encode(b"1");
        buf.extend(encode(b"[2]"));
        let (a, n) = decode(&buf).unwrap().unwrap();
        assert_eq!(a, serde_json::json!(1));
        let (b, _) = decode(&buf[n..]).unwrap().unwrap();
        assert_eq!(b, serde_json::json!([2]));
    }

    #[test]
    fn oversized_length_is_refused_before_reading_the_payload() {
        let header = ((MAX_FRAME + 1) as u32).to_le_bytes();
        assert_eq!(decode(&header), Err(FrameError::TooLarge(MAX_FRAME + 1)));
    }

    #[test]
    fn malformed_json_is_an_error() {
        assert!(matches!(
            decode(&encode(b"{nope")),
            Err(FrameError::Malformed(_))
        ));
    }
}
