//! A minimal blocking HTTP/1.1 client over one keep-alive TCP connection to loopback.
//!
//! The harness measures the server, so the client does as little as it can: one request
//! written in one `write`, `TCP_NODELAY`, the response read with `Content-Length` or chunked
//! framing. Every read and write has a timeout, so no measurement can hang. Every request
//! carries the server's API key (its `Authorization` line is formatted once per connection),
//! as any real client's does.

use anyhow::{bail, Context};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// Longest any single request may take (a create may wait for a zygote restart).
const IO_TIMEOUT: Duration = Duration::from_secs(120);

/// A server to talk to: where it listens and the API key it wants (`None`: send none, for a
/// server started with `SANDLOT_AUTH=off`). Cheap to clone into worker threads.
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub addr: SocketAddr,
    pub key: Option<Arc<str>>,
}

impl Endpoint {
    pub fn new(addr: SocketAddr, key: Option<&str>) -> Self {
        Endpoint {
            addr,
            key: key.map(Arc::from),
        }
    }
}

pub struct Conn {
    addr: SocketAddr,
    /// `Authorization: Bearer <key>\r\n`, or empty.
    auth: Vec<u8>,
    reader: Option<BufReader<TcpStream>>,
    buf: Vec<u8>,
}

pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Response {
    pub fn json(&self) -> anyhow::Result<Value> {
        serde_json::from_slice(&self.body)
            .with_context(|| format!("response is not JSON: {}", self.text()))
    }

    pub fn text(&self) -> String {
        let s = String::from_utf8_lossy(&self.body);
        s.chars().take(500).collect()
    }
}

impl Conn {
    pub fn new(to: &Endpoint) -> Self {
        let auth = to
            .key
            .as_deref()
            .map(|k| format!("Authorization: Bearer {k}\r\n").into_bytes())
            .unwrap_or_default();
        Conn {
            addr: to.addr,
            auth,
            reader: None,
            buf: Vec::with_capacity(1024),
        }
    }

    fn connect(&mut self) -> anyhow::Result<&mut BufReader<TcpStream>> {
        if self.reader.is_none() {
            let s = TcpStream::connect_timeout(&self.addr, Duration::from_secs(5))
                .with_context(|| format!("could not connect to {}", self.addr))?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(IO_TIMEOUT))?;
            s.set_write_timeout(Some(IO_TIMEOUT))?;
            self.reader = Some(BufReader::with_capacity(64 * 1024, s));
        }
        Ok(self.reader.as_mut().expect("connected above"))
    }

    /// Sends one request and reads its response. A connection the server closed while idle
    /// is reopened once, but only when nothing of the response had arrived.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> anyhow::Result<Response> {
        let fresh = self.reader.is_none();
        match self.try_request(method, path, body) {
            Ok(r) => Ok(r),
            Err(Failure::BeforeResponse(e)) if !fresh => {
                self.reader = None;
                self.try_request(method, path, body)
                    .map_err(Failure::into_inner)
                    .context(e)
            }
            Err(e) => {
                self.reader = None;
                Err(e.into_inner())
            }
        }
    }

    pub fn post_json(&mut self, path: &str, body: &Value) -> anyhow::Result<Response> {
        let b = serde_json::to_vec(body)?;
        self.request("POST", path, Some(&b))
    }

    pub fn delete(&mut self, path: &str) -> anyhow::Result<Response> {
        self.request("DELETE", path, None)
    }

    fn try_request(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<Response, Failure> {
        let host = self.addr;
        let mut req = std::mem::take(&mut self.buf);
        req.clear();
        let _ = write!(req, "{method} {path} HTTP/1.1\r\nHost: {host}\r\n");
        req.extend_from_slice(&self.auth);
        if let Some(b) = body {
            let _ = write!(
                req,
                "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                b.len()
            );
            req.extend_from_slice(b);
        } else {
            req.extend_from_slice(b"Content-Length: 0\r\n\r\n");
        }
        let r = self.connect().map_err(Failure::BeforeResponse)?;
        let sent = r.get_mut().write_all(&req);
        self.buf = req;
        sent.map_err(|e| Failure::BeforeResponse(e.into()))?;
        read_response(self.reader.as_mut().expect("connected above"))
    }
}

enum Failure {
    /// Nothing of a response was read: the request may be retried on a new connection.
    BeforeResponse(anyhow::Error),
    During(anyhow::Error),
}

impl Failure {
    fn into_inner(self) -> anyhow::Error {
        match self {
            Failure::BeforeResponse(e) | Failure::During(e) => e,
        }
    }
}

fn read_response(r: &mut BufReader<TcpStream>) -> Result<Response, Failure> {
    let mut line = String::new();
    match r.read_line(&mut line) {
        Ok(0) => {
            return Err(Failure::BeforeResponse(anyhow::anyhow!(
                "the server closed the connection"
            )))
        }
        Ok(_) => {}
        Err(e) => return Err(Failure::BeforeResponse(e.into())),
    }
    read_rest(r, &line).map_err(Failure::During)
}

fn read_rest(r: &mut BufReader<TcpStream>, status_line: &str) -> anyhow::Result<Response> {
    let mut parts = status_line.split_whitespace();
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        bail!("not an HTTP/1 response: {status_line:?}");
    }
    let status: u16 = parts
        .next()
        .unwrap_or_default()
        .parse()
        .context("bad status code")?;
    let mut length: Option<usize> = None;
    let mut chunked = false;
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            bail!("the connection closed inside the headers");
        }
        let h = line.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((name, value)) = h.split_once(':') {
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = Some(value.parse().context("bad Content-Length")?);
            } else if name.eq_ignore_ascii_case("transfer-encoding")
                && value.eq_ignore_ascii_case("chunked")
            {
                chunked = true;
            }
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            r.read_line(&mut line)?;
            let size_hex = line.trim().split(';').next().unwrap_or_default();
            let size = usize::from_str_radix(size_hex, 16).context("bad chunk size")?;
            if size == 0 {
                // Trailers, then the final empty line.
                loop {
                    line.clear();
                    if r.read_line(&mut line)? == 0 || line.trim().is_empty() {
                        break;
                    }
                }
                break;
            }
            let start = body.len();
            body.resize(start + size, 0);
            r.read_exact(&mut body[start..])?;
            let mut crlf = [0u8; 2];
            r.read_exact(&mut crlf)?;
        }
    } else if let Some(n) = length {
        body.resize(n, 0);
        r.read_exact(&mut body)?;
    } else if status != 204 && status != 304 && !(100..200).contains(&status) {
        bail!("response {status} has neither Content-Length nor chunked framing");
    }
    Ok(Response { status, body })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// Answers each request on one connection with the next response; returns the address
    /// and what it received, one request per message.
    fn serve_once(
        responses: Vec<&'static [u8]>,
    ) -> (SocketAddr, std::sync::mpsc::Receiver<String>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            for resp in responses {
                let mut buf = [0u8; 4096];
                let n = s.read(&mut buf).unwrap();
                let _ = tx.send(String::from_utf8_lossy(&buf[..n]).into_owned());
                s.write_all(resp).unwrap();
            }
        });
        (addr, rx)
    }

    #[test]
    fn reads_length_chunked_and_empty_bodies_on_one_connection() {
        let (addr, seen) = serve_once(vec![
            b"HTTP/1.1 201 Created\r\ncontent-length: 11\r\n\r\n{\"id\":\"a\"}\n",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
            b"HTTP/1.1 204 No Content\r\n\r\n",
        ]);
        let mut c = Conn::new(&Endpoint::new(addr, Some("sl_k")));
        let r = c
            .post_json("/v1/sandboxes", &serde_json::json!({}))
            .unwrap();
        assert_eq!(r.status, 201);
        assert_eq!(r.json().unwrap()["id"], "a");
        let r = c.request("GET", "/x", None).unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"abcde"[..]));
        let r = c.delete("/v1/sandboxes/a").unwrap();
        assert_eq!((r.status, r.body.len()), (204, 0));
        // Every request carried the key, in its head.
        let reqs: Vec<String> = seen.try_iter().collect();
        assert_eq!(reqs.len(), 3);
        for req in reqs {
            let head = req.split("\r\n\r\n").next().unwrap();
            assert!(
                head.contains("\r\nAuthorization: Bearer sl_k\r\n"),
                "{req:?}"
            );
        }
    }

    #[test]
    fn no_key_no_authorization_line() {
        let (addr, seen) = serve_once(vec![b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"]);
        let mut c = Conn::new(&Endpoint::new(addr, None));
        assert_eq!(c.request("GET", "/v1/health", None).unwrap().status, 200);
        assert!(!seen
            .recv()
            .unwrap()
            .to_ascii_lowercase()
            .contains("authorization"));
    }
}
