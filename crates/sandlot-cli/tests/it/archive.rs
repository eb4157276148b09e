//! Directories in and out of a sandbox (`PUT`/`GET /v1/sandboxes/{id}/archive`) against a real
//! server: round trips checked file by file (SHA-256, modes, symlinks), and hostile archives
//! each refused with `invalid_archive` (or `quota_exceeded`) naming the entry, with nothing
//! written anywhere. Also the HTTP edges of issue 9 that concern every request, exercised over
//! a raw socket: a client that half-closes after its request still gets the answer to
//! `execute` and `DELETE`, and an execution whose client went away runs to its end and is
//! recorded.

use crate::common;

use common::{Resp, TestServer};
use flate2::write::GzEncoder;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Building archives, hostile ones included (the `tar` crate refuses to write those names).

/// One raw tar entry: a GNU header (with a GNU long-name entry first when the name needs it)
/// and the data, padded.
fn entry(name: &[u8], kind: u8, link: &[u8], data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    if name.len() > 99 {
        let mut long = name.to_vec();
        long.push(0);
        out.extend(header(
            b"././@LongLink",
            b'L',
            b"",
            long.len() as u64,
            0o644,
        ));
        out.extend(&long);
        pad(&mut out);
    }
    let short = &name[..name.len().min(99)];
    out.extend(header(short, kind, link, data.len() as u64, 0o644));
    out.extend(data);
    pad(&mut out);
    out
}

fn header(name: &[u8], kind: u8, link: &[u8], size: u64, mode: u32) -> [u8; 512] {
    let mut h = tar::Header::new_gnu();
    {
        let old = h.as_old_mut();
        old.name[..name.len()].copy_from_slice(name);
        old.linkname[..link.len()].copy_from_slice(link);
    }
    h.set_entry_type(tar::EntryType::new(kind));
    h.set_size(size);
    h.set_mode(mode);
    h.set_mtime(1_700_000_000);
    h.set_cksum();
    *h.as_bytes()
}

fn pad(out: &mut Vec<u8>) {
    out.resize(out.len().div_ceil(512) * 512, 0);
}

/// The end of an archive: two zero blocks.
fn end(mut tar: Vec<u8>) -> Vec<u8> {
    tar.extend([0u8; 1024]);
    tar
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(data).unwrap();
    gz.finish().unwrap()
}

/// A GNU sparse entry claiming `real` bytes, with one 512-byte block of data at its end.
fn sparse_entry(name: &[u8], real: u64) -> Vec<u8> {
    let mut h = tar::Header::new_gnu();
    h.as_old_mut().name[..name.len()].copy_from_slice(name);
    h.set_entry_type(tar::EntryType::GNUSparse);
    h.set_size(512);
    h.set_mode(0o644);
    let gnu = h.as_gnu_mut().unwrap();
    gnu.sparse[0].set_offset(real - 512);
    gnu.sparse[0].set_length(512);
    gnu.set_real_size(real);
    h.set_cksum();
    let mut out = h.as_bytes().to_vec();
    out.extend([b'x'; 512]);
    out
}

/// A tar of a local directory, as `tar` would make it (symlinks kept as symlinks).
fn tar_of(dir: &Path) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    b.follow_symlinks(false);
    let mut paths = Vec::new();
    walk(dir, dir, &mut paths);
    for rel in paths {
        b.append_path_with_name(dir.join(&rel), &rel).unwrap();
    }
    b.into_inner().unwrap()
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    for p in names {
        let rel = p.strip_prefix(root).unwrap().to_str().unwrap().to_owned();
        out.push(rel);
        if p.is_dir() && !p.is_symlink() {
            walk(root, &p, out);
        }
    }
}

/// What a tree holds, by path: `file <sha256> <mode>`, `dir <mode>` or `symlink -> target`.
type Tree = BTreeMap<String, String>;

fn local_tree(dir: &Path) -> Tree {
    let mut paths = Vec::new();
    walk(dir, dir, &mut paths);
    paths
        .into_iter()
        .map(|rel| {
            let p = dir.join(&rel);
            let meta = std::fs::symlink_metadata(&p).unwrap();
            let mode = meta.permissions().mode() & 0o777;
            let what = if meta.file_type().is_symlink() {
                format!("symlink -> {}", std::fs::read_link(&p).unwrap().display())
            } else if meta.is_dir() {
                format!("dir {mode:o}")
            } else {
                format!("file {} {mode:o}", sha(&std::fs::read(&p).unwrap()))
            };
            (rel, what)
        })
        .collect()
}

fn tar_tree(bytes: &[u8]) -> Tree {
    let mut tree = Tree::new();
    let mut ar = tar::Archive::new(bytes);
    for e in ar.entries().unwrap() {
        let mut e = e.unwrap();
        let path = e
            .path()
            .unwrap()
            .to_str()
            .unwrap()
            .trim_end_matches('/')
            .to_owned();
        let mode = e.header().mode().unwrap() & 0o777;
        let what = match e.header().entry_type() {
            tar::EntryType::Directory => format!("dir {mode:o}"),
            tar::EntryType::Symlink => {
                format!("symlink -> {}", e.link_name().unwrap().unwrap().display())
            }
            tar::EntryType::Regular => {
                let mut data = Vec::new();
                e.read_to_end(&mut data).unwrap();
                format!("file {} {mode:o}", sha(&data))
            }
            other => panic!("unexpected entry type {other:?} for {path}"),
        };
        tree.insert(path, what);
    }
    tree
}

fn sha(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

// ---------------------------------------------------------------------------------------------
// Talking to the server.

fn put_archive(server: &TestServer, id: &str, path: &str, body: Vec<u8>) -> Resp {
    put_archive_body(server, id, path, reqwest::blocking::Body::from(body))
}

fn put_archive_body(
    server: &TestServer,
    id: &str,
    path: &str,
    body: reqwest::blocking::Body,
) -> Resp {
    let url = format!("{}/v1/sandboxes/{id}/archive", server.url());
    let resp = server
        .client()
        .put(url)
        .query(&[("path", path)])
        .header("content-type", "application/x-tar")
        .body(body)
        .send()
        .unwrap_or_else(|e| panic!("PUT archive: {e}; stderr:\n{}", server.stderr()));
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().unwrap_or_default();
    Resp {
        status,
        headers,
        body: serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    }
}

fn get_archive(server: &TestServer, id: &str, query: &str) -> (u16, String, Vec<u8>) {
    let (status, headers, body) = server.get_bytes(&format!("/v1/sandboxes/{id}/archive?{query}"));
    let kind = headers
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, kind, body)
}

/// Every path in the workspace (recursively), to show that nothing was written.
fn workspace(server: &TestServer, id: &str) -> Vec<String> {
    let r = server.get(&format!("/v1/sandboxes/{id}/files?recursive=true"));
    let mut paths: Vec<String> = r.expect(200)["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_owned())
        .collect();
    paths.sort();
    paths
}

fn text_plain(r: &Value) -> String {
    r["result"]["text/plain"].as_str().unwrap_or("").to_owned()
}

fn sample_tree(dir: &Path) {
    std::fs::create_dir_all(dir.join("sub/deeper")).unwrap();
    std::fs::create_dir_all(dir.join("emptydir")).unwrap();
    std::fs::write(dir.join("a.txt"), "hello\n").unwrap();
    std::fs::write(dir.join("empty"), "").unwrap();
    let mut noise = Vec::with_capacity(3 << 20);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while noise.len() < (3 << 20) + 123 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        noise.extend(x.to_le_bytes());
    }
    std::fs::write(dir.join("sub/b.bin"), &noise).unwrap();
    std::fs::write(dir.join("sub/deeper/c.txt"), "c".repeat(10_000)).unwrap();
    std::fs::write(dir.join("run.sh"), "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(dir.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(dir.join("a.txt"), std::fs::Permissions::from_mode(0o640)).unwrap();
    symlink("b.bin", dir.join("sub/link")).unwrap();
    symlink("../a.txt", dir.join("sub/up")).unwrap();
}

// ---------------------------------------------------------------------------------------------
// Round trips.

#[test]
fn a_directory_round_trips_plain_and_gzip() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let local = tempfile::tempdir().unwrap();
    sample_tree(local.path());
    let want = local_tree(local.path());
    let tar = tar_of(local.path());

    // Plain into a new directory; gzip into one whose parents are missing too.
    let r = put_archive(&server, &id, "proj", tar.clone());
    let summary = r.expect(200).clone();
    common::assert_schema("ArchiveSummary", &summary);
    assert_eq!(
        summary,
        json!({"path": "proj", "files": 5, "dirs": 3, "symlinks": 2, "hardlinks": 0,
               "bytes": 6 + (3 << 20) + 128 + 10_000 + 18})
    );
    let r = put_archive(&server, &id, "/workspace/nested/new/proj_gz", gzip(&tar));
    assert_eq!(r.expect(200)["path"], "nested/new/proj_gz");

    for (query, gz) in [
        ("path=proj", false),
        ("path=nested/new/proj_gz&gzip=true", true),
    ] {
        let (status, kind, body) = get_archive(&server, &id, query);
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let tar = match gz {
            true => {
                assert_eq!(kind, "application/gzip");
                let mut out = Vec::new();
                flate2::read::GzDecoder::new(&body[..])
                    .read_to_end(&mut out)
                    .unwrap();
                out
            }
            false => {
                assert_eq!(kind, "application/x-tar");
                body
            }
        };
        assert_eq!(tar_tree(&tar), want, "{query}");
    }

    // Inside the sandbox: the sandbox's files, with their modes and links.
    let code = "import os, hashlib\n\
        p = '/workspace/proj'\n\
        st = os.stat(p + '/run.sh')\n\
        (st.st_uid == os.getuid(), oct(st.st_mode & 0o7777), oct(os.stat(p + '/a.txt').st_mode & 0o777),\n \
         hashlib.sha256(open(p + '/sub/link', 'rb').read()).hexdigest() == hashlib.sha256(open(p + '/sub/b.bin', 'rb').read()).hexdigest(),\n \
         os.readlink(p + '/sub/up'), os.listdir(p + '/emptydir'), os.stat('/workspace/nested').st_uid == os.getuid())";
    let r = server.execute(&id, code);
    assert_eq!(
        text_plain(&r),
        "(True, '0o755', '0o640', True, '../a.txt', [], True)",
        "{r:#}"
    );

    // Into an existing directory: names merge, files are replaced, the rest stays.
    let update = end([
        entry(b"a.txt", b'0', b"", b"changed"),
        entry(b"sub/new.txt", b'0', b"", b"new"),
    ]
    .concat());
    put_archive(&server, &id, "proj", update).expect(200);
    let r = server.execute(
        &id,
        "p = '/workspace/proj/'\n(open(p + 'a.txt').read(), open(p + 'sub/new.txt').read(), len(open(p + 'sub/b.bin', 'rb').read()))",
    );
    assert_eq!(
        text_plain(&r),
        format!("('changed', 'new', {})", (3 << 20) + 128),
        "{r:#}"
    );

    // A file where the directory has a directory is refused before anything moves.
    let before = workspace(&server, &id);
    let clash = end([
        entry(b"zz-first.txt", b'0', b"", b"x"),
        entry(b"sub", b'0', b"", b"x"),
    ]
    .concat());
    let r = put_archive(&server, &id, "proj", clash);
    r.expect_error(400, "invalid_archive");
    assert!(r.message().contains("\"sub\""), "{}", r.text);
    assert_eq!(workspace(&server, &id), before);

    // GET refuses what is not a directory.
    let (status, _, body) = get_archive(&server, &id, "path=proj/a.txt");
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
    let err: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(err["error"]["code"], "invalid_path");
    let (status, _, _) = get_archive(&server, &id, "path=missing");
    assert_eq!(status, 404);
    // The whole workspace, as the default.
    let (status, _, body) = get_archive(&server, &id, "");
    assert_eq!(status, 200);
    let tree = tar_tree(&body);
    assert!(tree.contains_key("proj/sub/new.txt"), "{tree:?}");
    assert!(tree.contains_key("nested/new/proj_gz/run.sh"), "{tree:?}");
}

#[test]
fn archives_of_special_files_leave_them_out_and_keep_symlinks_as_they_are() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let code = "import os\nos.makedirs('/workspace/d/sub')\nos.mkfifo('/workspace/d/fifo')\n\
        os.symlink('/etc/passwd', '/workspace/d/abs')\nopen('/workspace/d/sub/f', 'w').write('f')\n\
        import socket\ns = socket.socket(socket.AF_UNIX)\ns.bind('/workspace/d/sock')\n'ok'";
    assert_eq!(text_plain(&server.execute(&id, code)), "'ok'");
    let (status, _, body) = get_archive(&server, &id, "path=d");
    assert_eq!(status, 200);
    let tree = tar_tree(&body);
    assert_eq!(
        tree.keys().cloned().collect::<Vec<_>>(),
        vec!["abs", "sub", "sub/f"],
        "{tree:?}"
    );
    assert_eq!(tree["abs"], "symlink -> /etc/passwd");
}

// ---------------------------------------------------------------------------------------------
// Hostile archives.

/// Sends `tar` and expects 400 `invalid_archive` naming `entry`, with the workspace exactly
/// as it was (no target, no staging directory).
#[track_caller]
fn refused(server: &TestServer, id: &str, tar: Vec<u8>, entry: &str, why: &str) {
    let before = workspace(server, id);
    let r = put_archive(server, id, "target", tar);
    r.expect_error(400, "invalid_archive");
    let named = format!("entry {entry:?}");
    assert!(
        r.message().contains(&named) && r.message().contains(why),
        "expected {named} and {why:?} in: {}",
        r.text
    );
    assert_eq!(workspace(server, id), before, "{entry}: something was left");
}

#[test]
fn hostile_archives_are_refused_naming_the_entry_and_leave_nothing() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    server.put_bytes(&format!("/v1/sandboxes/{id}/files/keep.txt"), "keep");
    let ok = entry(b"fine.txt", b'0', b"", b"fine");

    refused(
        &server,
        &id,
        end([ok.clone(), entry(b"../x", b'0', b"", b"pwned")].concat()),
        "../x",
        "'..'",
    );
    refused(
        &server,
        &id,
        end([ok.clone(), entry(b"a/../../x", b'0', b"", b"pwned")].concat()),
        "a/../../x",
        "'..'",
    );
    let host = "/etc/sandlot-archive-test";
    refused(
        &server,
        &id,
        end([ok.clone(), entry(host.as_bytes(), b'0', b"", b"pwned")].concat()),
        host,
        "absolute",
    );
    assert!(!Path::new(host).exists());
    // A symlink to `/`, then a file through it.
    refused(
        &server,
        &id,
        end([
            ok.clone(),
            entry(b"escape", b'2', b"/", b""),
            entry(b"escape/tmp/sandlot-archive-pwned", b'0', b"", b"pwned"),
        ]
        .concat()),
        "escape",
        "points outside",
    );
    assert!(!Path::new("/tmp/sandlot-archive-pwned").exists());
    refused(
        &server,
        &id,
        end([ok.clone(), entry(b"sub/up", b'2', b"../..", b"")].concat()),
        "sub/up",
        "points outside",
    );
    // A symlink that stays inside is fine, but nothing is ever written through one.
    refused(
        &server,
        &id,
        end([
            entry(b"real/", b'5', b"", b""),
            entry(b"alias", b'2', b"real", b""),
            entry(b"alias/f", b'0', b"", b"via a symlink"),
        ]
        .concat()),
        "alias/f",
        "symlink",
    );
    refused(
        &server,
        &id,
        end([ok.clone(), entry(b"passwd", b'1', b"/etc/passwd", b"")].concat()),
        "passwd",
        "hard link to \"/etc/passwd\" points outside",
    );
    refused(
        &server,
        &id,
        end([ok.clone(), entry(b"passwd", b'1', b"../../etc/passwd", b"")].concat()),
        "passwd",
        "points outside",
    );
    refused(
        &server,
        &id,
        end([ok.clone(), entry(b"ghost", b'1', b"not-there", b"")].concat()),
        "ghost",
        "not a regular file extracted earlier",
    );
    refused(
        &server,
        &id,
        end([ok.clone(), entry(b"null", b'3', b"", b"")].concat()),
        "null",
        "character device",
    );
    refused(
        &server,
        &id,
        end([ok.clone(), entry(b"disk", b'4', b"", b"")].concat()),
        "disk",
        "block device",
    );
    refused(
        &server,
        &id,
        end([ok.clone(), entry(b"pipe", b'6', b"", b"")].concat()),
        "pipe",
        "FIFO",
    );
    // 100 levels of directories.
    let deep = "d/".repeat(99) + "f";
    refused(
        &server,
        &id,
        end([ok.clone(), entry(deep.as_bytes(), b'0', b"", b"deep")].concat()),
        &deep,
        "nested deeper than 64",
    );
    // A sparse file claiming 100 GiB.
    refused(
        &server,
        &id,
        end([ok.clone(), sparse_entry(b"sparse.bin", 100 << 30)].concat()),
        "sparse.bin",
        "sparse file",
    );
    // A file whose header claims more than the whole quota: refused before any data.
    let mut huge = header(b"huge.bin", b'0', b"", 1 << 40, 0o644).to_vec();
    huge.extend([0u8; 4096]);
    let r = put_archive(&server, &id, "target", [ok.clone(), huge].concat());
    r.expect_error(507, "quota_exceeded");
    assert!(r.message().contains("disk_mb = "), "{}", r.text);
    // A truncated archive and a body that is no tar at all.
    let mut cut = entry(b"cut.bin", b'0', b"", &[5u8; 4096]);
    cut.truncate(512 + 1000);
    refused(
        &server,
        &id,
        [ok.clone(), cut].concat(),
        "cut.bin",
        "ends inside",
    );
    refused(
        &server,
        &id,
        b"PK\x03\x04 this is a zip, not a tar".repeat(40),
        "(the first entry)",
        "cksum",
    );
    // Everything that was refused left the workspace as it was.
    assert_eq!(workspace(&server, &id), vec!["keep.txt"]);
    assert_eq!(text_plain(&server.execute(&id, "6 * 7")), "42");
}

#[test]
fn tar_bombs_are_refused() {
    let server = TestServer::start();
    let id = server.create_sandbox();

    // 200 000 tiny entries, streamed: refused at the 100 001st.
    struct Many {
        next: usize,
        buf: Vec<u8>,
        pos: usize,
    }
    impl Read for Many {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            if self.pos == self.buf.len() {
                if self.next > 200_000 {
                    return Ok(0);
                }
                self.buf = match self.next {
                    200_000 => vec![0u8; 1024],
                    i => entry(format!("t/{i}").as_bytes(), b'0', b"", b""),
                };
                self.next += 1;
                self.pos = 0;
            }
            let n = out.len().min(self.buf.len() - self.pos);
            out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
            self.pos += n;
            Ok(n)
        }
    }
    let before = workspace(&server, &id);
    let many = Many {
        next: 0,
        buf: Vec::new(),
        pos: 0,
    };
    // Compressed on the fly, so the whole body (about 100 MB as a plain tar) is small enough
    // for the server to read to its end after refusing it, and the client gets the answer
    // rather than a reset connection.
    let many = flate2::read::GzEncoder::new(many, flate2::Compression::fast());
    let r = put_archive_body(&server, &id, "target", reqwest::blocking::Body::new(many));
    r.expect_error(400, "invalid_archive");
    assert!(
        r.message().contains("entry \"t/100000\"") && r.message().contains("more than 100000"),
        "{}",
        r.text
    );
    assert_eq!(workspace(&server, &id), before);

    // A gzip bomb: a 1 GiB file of zeros in about a megabyte (gzip members of 1 MiB zeros).
    let mut bomb = gzip(&header(b"zeros", b'0', b"", 1 << 30, 0o644));
    let member = gzip(&vec![0u8; 1 << 20]);
    for _ in 0..1024 {
        bomb.extend(&member);
    }
    bomb.extend(gzip(&[0u8; 1024]));
    let r = put_archive(&server, &id, "target", bomb);
    r.expect_error(400, "invalid_archive");
    assert!(
        r.message().contains("entry \"zeros\"") && r.message().contains("expands more than 200"),
        "{}",
        r.text
    );
    assert_eq!(workspace(&server, &id), before);
    assert_eq!(text_plain(&server.execute(&id, "6 * 7")), "42");
}

#[test]
fn the_quota_holds_while_extracting() {
    let server = TestServer::start();
    let id = server.create_sandbox_with(&json!({ "limits": { "disk_mb": 16 } }))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let before = workspace(&server, &id);
    // Three 8 MiB files of noise: the third does not fit (nor, on a lagging quota count,
    // does the second's data once the kernel says EDQUOT).
    let mut x: u64 = 7;
    let mut noise = || {
        let mut v = Vec::with_capacity(8 << 20);
        while v.len() < 8 << 20 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            v.extend(x.to_le_bytes());
        }
        v
    };
    let tar = end([
        entry(b"one.bin", b'0', b"", &noise()),
        entry(b"two.bin", b'0', b"", &noise()),
        entry(b"three.bin", b'0', b"", &noise()),
    ]
    .concat());
    let r = put_archive(&server, &id, "data", tar);
    r.expect_error(507, "quota_exceeded");
    assert!(r.message().contains("disk_mb = 16"), "{}", r.text);
    assert_eq!(workspace(&server, &id), before);
    // The sandbox is intact, and the room is back.
    let r = server.execute(
        &id,
        "open('/workspace/x.bin', 'wb').write(b'x' * (4 << 20))",
    );
    assert_eq!(text_plain(&r), (4 << 20).to_string(), "{r:#}");
}

// ---------------------------------------------------------------------------------------------
// HTTP edges: half-close, and clients that go away.

/// Sends a raw HTTP/1.1 request, shuts down the write side, and reads the whole answer.
fn half_closed(server: &TestServer, request: &str) -> (u16, String) {
    let addr = server.url().trim_start_matches("http://").to_owned();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(server.authorize(request).as_bytes()).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {answer:?}"));
    (status, answer)
}

fn request(method: &str, path: &str, body: &str) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

#[test]
fn a_half_closed_client_gets_its_answer() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    // The execution is still running when the server reads the end of the stream.
    let body = json!({ "code": "import time\ntime.sleep(0.5)\n6 * 7" }).to_string();
    let (status, answer) = half_closed(
        &server,
        &request("POST", &format!("/v1/sandboxes/{id}/execute"), &body),
    );
    assert_eq!(status, 200, "{answer}");
    let json_start = answer.find("\r\n\r\n").unwrap() + 4;
    let result: Value = serde_json::from_str(answer[json_start..].trim()).unwrap_or_else(|_| {
        // Chunked: the JSON is between the chunk sizes.
        let body = &answer[json_start..];
        let start = body.find('{').unwrap();
        let stop = body.rfind('}').unwrap();
        serde_json::from_str(&body[start..=stop]).unwrap()
    });
    assert_eq!(text_plain(&result), "42", "{answer}");

    let (status, answer) = half_closed(
        &server,
        &request("DELETE", &format!("/v1/sandboxes/{id}"), ""),
    );
    assert_eq!(status, 204, "{answer}");
    // Deleted: gone (410) or, once deleted sandboxes are forgotten, unknown (404).
    let r = server.get(&format!("/v1/sandboxes/{id}"));
    assert!(
        matches!(
            (r.status, r.code()),
            (404, "sandbox_not_found") | (410, "sandbox_gone")
        ),
        "{}",
        r.text
    );
}

/// The recorded executions of a sandbox.
fn executions(server: &TestServer, id: &str) -> Vec<Value> {
    server
        .get(&format!("/v1/sandboxes/{id}/executions"))
        .expect(200)["executions"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn an_execution_whose_client_went_away_runs_to_its_end_and_is_recorded() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let addr = server.url().trim_start_matches("http://").to_owned();
    for (marker, stream) in [("plain", false), ("streamed", true)] {
        let code = format!(
            "import time\ntime.sleep(1.5)\nopen('/workspace/{marker}', 'w').write('done')\n'{marker}'"
        );
        let body = json!({ "code": code, "stream": stream }).to_string();
        let mut s = TcpStream::connect(&addr).unwrap();
        let raw = request("POST", &format!("/v1/sandboxes/{id}/execute"), &body);
        s.write_all(server.authorize(&raw).as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        drop(s);
        let deadline = Instant::now() + Duration::from_secs(30);
        let record = loop {
            let done = executions(&server, &id)
                .into_iter()
                .find(|e| e["code"].as_str() == Some(code.as_str()) && !e["result"].is_null());
            if let Some(record) = done {
                break record;
            }
            assert!(
                Instant::now() < deadline,
                "{marker}: never recorded as finished"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(record["result"]["end_state"], "ok", "{record:#}");
        assert_eq!(
            text_plain(&record["result"]),
            format!("'{marker}'"),
            "{record:#}"
        );
        let (status, _, bytes) = server.get_bytes(&format!("/v1/sandboxes/{id}/files/{marker}"));
        assert_eq!((status, bytes), (200, b"done".to_vec()));
    }
}
