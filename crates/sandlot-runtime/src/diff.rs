//! Divergence: `GET /v1/sandboxes/{a}/diff/{b}`, which variables and which workspace entries
//! differ between two sandboxes of one family (a fork's parent and children, sandboxes from
//! one snapshot, and their descendants), with sizes.
//!
//! Family: each sandbox's ancestry is followed through the store (`forked_from`, and
//! `from_snapshot` to the snapshot's sandbox) to its first ancestor; two sandboxes whose first
//! ancestors differ are refused. Variables: each sandbox's driver answers a `state_digest`
//! (the driver's `digest.py`): per code context, each variable a save would carry, with its
//! type, the size of its pickle and a digest of it that equal values share however their parts are
//! shared. The host compares digests and never sees a pickle. The two sandboxes are asked one
//! after the other, each under its own execution lock (never both at once, so two diffs in
//! opposite directions cannot deadlock); a paused sandbox is resumed for it like for any call
//! that needs its processes.
//!
//! Files: under the same lock, just after its digest, each workspace is walked on the host from
//! its directory fd: names listed from directory fds, `fstatat(AT_SYMLINK_NOFOLLOW)`, and
//! directories entered only through `openat2` with the resolve flags of `files.rs` (no
//! symlink, no magic link, no other mount), so a symlink is an entry of kind `symlink` (its
//! target compared as bytes, never followed) and nothing outside the workspace is ever
//! reached. Walks are sorted depth first, at most [`MAX_WALK`] entries and [`MAX_DEPTH`]
//! levels each; past the bound only paths up to where both walks stopped are compared and the
//! answer says `truncated`. Two regular files differ when their sizes do, or, at equal sizes
//! and different modification times, when their contents do (read through fresh `openat2`
//! lookups, at most [`MAX_CONTENT_BYTES`] per diff; a copy-on-write copy keeps its
//! original's times, so unchanged files are never read).

use crate::error::{store, RuntimeError};
use crate::files::{fstat, kind_of, openat2};
use crate::request::{ask, Failure};
use crate::saved::{ANSWER_SLACK, OBJECT_SECS, TOTAL_SECS};
use crate::task::blocking;
use crate::util::new_id;
use crate::{Entry, Runtime};
use nix::dir::Dir;
use nix::fcntl::{readlinkat, AtFlags};
use nix::sys::stat::fstatat;
use sandlot_types::{
    DiffChange, DiffItemKind, FileDiff, NotCaptured, NotCompared, SandboxDiff, VariableDiff,
    VariableSummary,
};
use serde::Deserialize;
use sha2::{Digest as _, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::Duration;

/// Most entries one workspace walk records.
pub(crate) const MAX_WALK: usize = 100_000;
/// Deepest directory level a walk enters.
pub(crate) const MAX_DEPTH: usize = 64;
/// Most differing workspace entries one diff lists.
pub(crate) const MAX_FILE_DIFFS: usize = 20_000;
/// Most bytes of file contents one diff reads (each side counted).
pub(crate) const MAX_CONTENT_BYTES: u64 = 4 << 30;
/// Bytes read from each file at a time when comparing contents.
const CHUNK: usize = 1 << 20;
/// Longest chain of ancestors followed (ids are fresh, so there is no cycle; a bound anyway).
const MAX_ANCESTRY: usize = 10_000;
/// Names a walk leaves out: uploads and extractions in flight (`files.rs`, `archive/`).
const IN_FLIGHT: [&[u8]; 2] = [b".sandlot-upload-", b".sandlot-extract-"];
/// The context listed first.
const DEFAULT_CONTEXT: &str = "default";

/// What a driver's `state_digested` says.
#[derive(Debug, Default, Deserialize)]
struct DigestAnswer {
    #[serde(default)]
    contexts: BTreeMap<String, BTreeMap<String, Digested>>,
    #[serde(default)]
    not_digested: Vec<NotCaptured>,
}

/// One variable's digest.
#[derive(Debug, Deserialize)]
struct Digested {
    #[serde(rename = "type", default)]
    type_name: String,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    sha256: String,
}

/// One sandbox as a diff sees it.
struct Side {
    id: String,
    vars: DigestAnswer,
    /// Its workspace's root, which the contents are read beneath.
    root: OwnedFd,
    walk: Walk,
}

/// A workspace walked: entries by path (components joined by NUL, the smallest byte, so the
/// map's order is the walk's: sorted depth first).
#[derive(Default)]
struct Walk {
    entries: BTreeMap<Vec<u8>, Node>,
    /// Where the walk stopped at its bound: nothing past this path is known.
    cut: Option<Vec<u8>>,
    /// Directories too deep to enter.
    too_deep: Vec<Vec<u8>>,
    /// Names listed but not yet recorded (in the directories being walked): they count
    /// against the bound too, so what a walk holds never passes it.
    pending: usize,
}

/// One entry: `fstatat` without following, and a symlink's target hashed.
struct Node {
    kind: &'static str,
    size: u64,
    mtime: (i64, i64),
    link: Option<[u8; 32]>,
}

impl Runtime {
    /// What differs between sandboxes `a` and `b` (see the module documentation).
    pub async fn diff_sandboxes(&self, a: &str, b: &str) -> Result<SandboxDiff, RuntimeError> {
        let (ea, eb) = (self.entry(a)?, self.entry(b)?);
        let (rt, ia, ib) = (self.clone(), a.to_string(), b.to_string());
        let (ra, rb) = blocking("reading sandboxes' ancestry", move || {
            Ok::<_, RuntimeError>((rt.family_root(&ia)?, rt.family_root(&ib)?))
        })
        .await??;
        if ra != rb {
            return Err(RuntimeError::NotOneFamily {
                a: a.to_string(),
                b: b.to_string(),
            });
        }
        let side_a = self.observe(&ea).await?;
        let side_b = self.observe(&eb).await?;
        blocking("comparing two sandboxes", move || compare(side_a, side_b)).await
    }

    /// The first ancestor of sandbox `id`: a sandbox id, or the id of a snapshot whose record
    /// is gone. Blocking (the store).
    fn family_root(&self, id: &str) -> Result<String, RuntimeError> {
        let st = &self.inner.storage.store;
        let (mut node, mut is_snapshot) = (id.to_string(), false);
        for _ in 0..MAX_ANCESTRY {
            let parent = if is_snapshot {
                st.get_snapshot(&node)
                    .map_err(store("reading a snapshot"))?
                    .map(|r| (r.snapshot.sandbox_id, false))
            } else {
                st.get_sandbox(&node)
                    .map_err(store("reading a sandbox"))?
                    .and_then(|s| match (s.forked_from, s.from_snapshot) {
                        (Some(parent), _) => Some((parent, false)),
                        (None, Some(snapshot)) => Some((snapshot, true)),
                        (None, None) => None,
                    })
            };
            match parent {
                Some((p, snap)) => (node, is_snapshot) = (p, snap),
                None => break,
            }
        }
        Ok(node)
    }

    /// Under the sandbox's execution lock: its processes' digest of their variables, then its
    /// workspace walked.
    async fn observe(&self, e: &Arc<Entry>) -> Result<Side, RuntimeError> {
        let turn = self.turn(e).await;
        let (turn, live, _) = self.ready_live(e, turn).await?;
        self.touch(e);
        let op = new_id("digest_");
        let msg = serde_json::json!({
            "type": "state_digest",
            "id": op,
            "object_secs": OBJECT_SECS,
            "total_secs": TOTAL_SECS,
        });
        let wait = Duration::from_secs_f64(TOTAL_SECS) + ANSWER_SLACK;
        let answer = match ask(&live, &msg, None, "state_digested", ("id", &op), wait).await {
            Ok(v) => v,
            Err(Failure::Refused(reason)) => {
                return Err(RuntimeError::DigestFailed {
                    sandbox: e.id.clone(),
                    reason,
                })
            }
            Err(Failure::NoAnswer) => {
                return Err(RuntimeError::ContextNoAnswer {
                    kind: "state_digest",
                    secs: wait.as_secs(),
                })
            }
            Err(Failure::Died(why)) => {
                tracing::warn!(sandbox = %e.id, %why, "sandbox died during a digest");
                live.signal_kill();
                self.restart_after(e, turn, crate::restart::reason::CRASHED);
                return Err(RuntimeError::DiedInContextRequest { why });
            }
        };
        let vars: DigestAnswer =
            serde_json::from_value(answer).map_err(|err| RuntimeError::DigestFailed {
                sandbox: e.id.clone(),
                reason: format!("its answer is garbled ({err})"),
            })?;
        let root = self.workspace_root(&e.id)?;
        let (root, walk) = blocking("walking a workspace", move || {
            let fd = root.open()?;
            let walk = walk(&fd);
            Ok::<_, RuntimeError>((fd, walk))
        })
        .await??;
        drop(turn);
        Ok(Side {
            id: e.id.clone(),
            vars,
            root,
            walk,
        })
    }
}

// -- walking a workspace --------------------------------------------------------------------

/// Walks the workspace beneath `root` (see the module documentation). Blocking.
fn walk(root: &OwnedFd) -> Walk {
    let mut w = Walk::default();
    match openat2(root.as_raw_fd(), ".", libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .and_then(Dir::from_fd)
    {
        Ok(dir) => {
            walk_dir(dir, &[], 0, &mut w);
        }
        // An unreadable root: nothing is known of it.
        Err(_) => w.cut = Some(Vec::new()),
    }
    w
}

/// Records what `dir` (at path `prefix`) holds, entering directories as it meets them;
/// false once the walk's bound is reached.
fn walk_dir(mut dir: Dir, prefix: &[u8], depth: usize, w: &mut Walk) -> bool {
    let room = MAX_WALK.saturating_sub(w.entries.len() + w.pending);
    let mut names: Vec<Vec<u8>> = Vec::new();
    for ent in dir.iter() {
        let Ok(ent) = ent else {
            break;
        };
        let name = ent.file_name().to_bytes();
        if name == b"." || name == b".." || IN_FLIGHT.iter().any(|p| name.starts_with(p)) {
            continue;
        }
        if names.len() == room {
            // It cannot be listed whole within the bound: nothing in it is known.
            w.cut = Some(prefix.to_vec());
            return false;
        }
        names.push(name.to_vec());
    }
    names.sort_unstable();
    w.pending += names.len();
    for name in names {
        w.pending -= 1;
        // Gone since the listing (the sandbox may be running): left out.
        let Ok(st) = fstatat(&dir, name.as_slice(), AtFlags::AT_SYMLINK_NOFOLLOW) else {
            continue;
        };
        let key = join(prefix, &name);
        let kind = kind_of(st.st_mode);
        let link = (kind == "symlink")
            .then(|| readlinkat(&dir, name.as_slice()).ok())
            .flatten()
            .map(|target| Sha256::digest(target.as_bytes()).into());
        let node = Node {
            kind,
            size: if kind == "dir" {
                0
            } else {
                st.st_size.max(0) as u64
            },
            mtime: (st.st_mtime, st.st_mtime_nsec),
            link,
        };
        w.entries.insert(key.clone(), node);
        if kind != "dir" {
            continue;
        }
        if depth + 1 >= MAX_DEPTH {
            w.too_deep.push(key);
            continue;
        }
        // Through the safe resolution: if it became a symlink meanwhile, it is not entered.
        let Ok(sub) = openat2(
            dir.as_raw_fd(),
            &name,
            libc::O_RDONLY | libc::O_DIRECTORY,
            0,
        )
        .and_then(Dir::from_fd) else {
            continue;
        };
        if !walk_dir(sub, &key, depth + 1, w) {
            return false;
        }
    }
    true
}

fn join(prefix: &[u8], name: &[u8]) -> Vec<u8> {
    if prefix.is_empty() {
        return name.to_vec();
    }
    let mut key = Vec::with_capacity(prefix.len() + 1 + name.len());
    key.extend_from_slice(prefix);
    key.push(0);
    key.extend_from_slice(name);
    key
}

/// A walk's key as a path relative to the workspace.
fn path_of(key: &[u8]) -> Vec<u8> {
    key.iter().map(|&b| if b == 0 { b'/' } else { b }).collect()
}

fn shown(key: &[u8]) -> String {
    String::from_utf8_lossy(&path_of(key)).into_owned()
}

// -- comparing --------------------------------------------------------------------------------

/// Both sides compared. Blocking (file contents may be read).
fn compare(a: Side, b: Side) -> SandboxDiff {
    let mut not_compared = Vec::new();
    let variables = compare_variables(&a, &b, &mut not_compared);
    let (files, truncated) = compare_files(&a, &b, &mut not_compared);
    SandboxDiff {
        a: a.id,
        b: b.id,
        variables,
        files,
        truncated,
        not_compared,
    }
}

fn summary(d: &Digested) -> VariableSummary {
    VariableSummary {
        type_name: d.type_name.clone(),
        size: d.size,
    }
}

/// Per context, names only in `a`, only in `b`, and in both with different digests. A name
/// one side could not digest is listed in `not_compared`, not as a difference.
fn compare_variables(a: &Side, b: &Side, out: &mut Vec<NotCompared>) -> Vec<VariableDiff> {
    let mut skipped: BTreeSet<(&str, &str)> = BTreeSet::new();
    for side in [a, b] {
        for n in &side.vars.not_digested {
            skipped.insert((&n.context, &n.name));
            out.push(NotCompared {
                sandbox: Some(side.id.clone()),
                kind: DiffItemKind::Variable,
                context: Some(n.context.clone()),
                name: n.name.clone(),
                reason: n.reason.clone(),
            });
        }
    }
    let mut contexts: Vec<&String> = a
        .vars
        .contexts
        .keys()
        .chain(b.vars.contexts.keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    contexts.sort_by_key(|c| (c.as_str() != DEFAULT_CONTEXT, c.as_str()));
    let none = BTreeMap::new();
    let mut diffs = Vec::new();
    for ctx in contexts {
        let va = a.vars.contexts.get(ctx).unwrap_or(&none);
        let vb = b.vars.contexts.get(ctx).unwrap_or(&none);
        let names: BTreeSet<&String> = va.keys().chain(vb.keys()).collect();
        for name in names {
            if skipped.contains(&(ctx.as_str(), name.as_str())) {
                continue;
            }
            let (da, db) = (va.get(name), vb.get(name));
            let change = match (da, db) {
                (Some(x), Some(y)) if x.sha256 == y.sha256 => continue,
                (Some(_), Some(_)) => DiffChange::Changed,
                (Some(_), None) => DiffChange::Removed,
                (None, Some(_)) => DiffChange::Added,
                (None, None) => continue,
            };
            diffs.push(VariableDiff {
                context: ctx.clone(),
                name: name.clone(),
                change,
                a: da.map(summary),
                b: db.map(summary),
            });
        }
    }
    diffs
}

/// Entries only in `a`, only in `b`, and in both but different, up to where both walks
/// stopped; whether the answer is cut short.
fn compare_files(a: &Side, b: &Side, out: &mut Vec<NotCompared>) -> (Vec<FileDiff>, bool) {
    let mut truncated = a.walk.cut.is_some() || b.walk.cut.is_some();
    let limit = match (&a.walk.cut, &b.walk.cut) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.as_ref().or(y.as_ref()),
    };
    not_entered(a, b, out);
    let mut reader = Contents::new(&a.root, &b.root);
    let mut diffs = Vec::new();
    let (mut ia, mut ib) = (
        a.walk.entries.iter().peekable(),
        b.walk.entries.iter().peekable(),
    );
    loop {
        let (key, na, nb) = match (ia.peek(), ib.peek()) {
            (None, None) => break,
            (Some((ka, _)), Some((kb, _))) if ka == kb => {
                let ((k, na), (_, nb)) = (ia.next().unwrap(), ib.next().unwrap());
                (k, Some(na), Some(nb))
            }
            (Some((ka, _)), Some((kb, _))) if ka < kb => {
                let (k, n) = ia.next().unwrap();
                (k, Some(n), None)
            }
            (Some(_), Some(_)) | (None, Some(_)) => {
                let (k, n) = ib.next().unwrap();
                (k, None, Some(n))
            }
            (Some(_), None) => {
                let (k, n) = ia.next().unwrap();
                (k, Some(n), None)
            }
        };
        if limit.is_some_and(|cut| key > cut) {
            break;
        }
        let change = match (na, nb) {
            (Some(x), Some(y)) => match differ(x, y, key, &mut reader) {
                Ok(false) => continue,
                Ok(true) => DiffChange::Changed,
                Err(reason) => {
                    out.push(NotCompared {
                        sandbox: None,
                        kind: DiffItemKind::File,
                        context: None,
                        name: shown(key),
                        reason,
                    });
                    continue;
                }
            },
            (Some(_), None) => DiffChange::Removed,
            _ => DiffChange::Added,
        };
        if diffs.len() == MAX_FILE_DIFFS {
            truncated = true;
            break;
        }
        diffs.push(FileDiff {
            path: shown(key),
            change,
            a_kind: na.map(|n| n.kind.to_string()),
            b_kind: nb.map(|n| n.kind.to_string()),
            a_size: na.map(|n| n.size),
            b_size: nb.map(|n| n.size),
        });
    }
    (diffs, truncated)
}

/// Directories a walk did not enter (too deep), once per path.
fn not_entered(a: &Side, b: &Side, out: &mut Vec<NotCompared>) {
    let mut deep: BTreeMap<&[u8], (bool, bool)> = BTreeMap::new();
    for k in &a.walk.too_deep {
        deep.entry(k).or_default().0 = true;
    }
    for k in &b.walk.too_deep {
        deep.entry(k).or_default().1 = true;
    }
    for (key, (in_a, in_b)) in deep {
        out.push(NotCompared {
            sandbox: match (in_a, in_b) {
                (true, false) => Some(a.id.clone()),
                (false, true) => Some(b.id.clone()),
                _ => None,
            },
            kind: DiffItemKind::File,
            context: None,
            name: shown(key),
            reason: format!("deeper than {MAX_DEPTH} levels: what it holds was not compared"),
        });
    }
}

/// Whether two entries at the same path differ, or why that could not be told.
fn differ(x: &Node, y: &Node, key: &[u8], reader: &mut Contents) -> Result<bool, String> {
    if x.kind != y.kind || x.size != y.size {
        return Ok(true);
    }
    match x.kind {
        "symlink" => Ok(x.link.is_none() || x.link != y.link),
        "file" if x.mtime != y.mtime => reader.differ(&path_of(key), x.size),
        // Same size and time (a copy-on-write copy keeps both), directories, FIFOs, sockets.
        _ => Ok(false),
    }
}

/// Reads pairs of files to compare them, within [`MAX_CONTENT_BYTES`] per diff.
struct Contents<'a> {
    roots: (&'a OwnedFd, &'a OwnedFd),
    left: u64,
    bufs: (Vec<u8>, Vec<u8>),
}

impl<'a> Contents<'a> {
    fn new(a: &'a OwnedFd, b: &'a OwnedFd) -> Self {
        Contents {
            roots: (a, b),
            left: MAX_CONTENT_BYTES,
            bufs: (Vec::new(), Vec::new()),
        }
    }

    /// Whether the regular files at `path` in both workspaces differ in content.
    fn differ(&mut self, path: &[u8], size: u64) -> Result<bool, String> {
        if size.saturating_mul(2) > self.left {
            return Err(format!(
                "content not compared: a diff reads at most {} GiB of files",
                MAX_CONTENT_BYTES >> 30
            ));
        }
        self.left -= size * 2;
        let mut fa = open_regular(self.roots.0, path)?;
        let mut fb = open_regular(self.roots.1, path)?;
        if self.bufs.0.is_empty() {
            self.bufs = (vec![0; CHUNK], vec![0; CHUNK]);
        }
        loop {
            let na = read_full(&mut fa, &mut self.bufs.0)?;
            let nb = read_full(&mut fb, &mut self.bufs.1)?;
            if self.bufs.0[..na] != self.bufs.1[..nb] {
                return Ok(true);
            }
            if na == 0 {
                return Ok(false);
            }
        }
    }
}

/// The regular file at `path` beneath `root`, through the safe resolution.
fn open_regular(root: &OwnedFd, path: &[u8]) -> Result<std::fs::File, String> {
    // O_NONBLOCK: if it became a FIFO meanwhile, opening it must not hang.
    let fd = openat2(
        root.as_raw_fd(),
        path,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
        0,
    )
    .map_err(|e| format!("content not compared: it could not be opened ({e})"))?;
    let st = fstat(fd.as_raw_fd()).map_err(|e| format!("content not compared: {e}"))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err("content not compared: it is no longer a regular file".into());
    }
    Ok(std::fs::File::from(fd))
}

/// Fills `buf` as far as the file goes; the bytes read.
fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> Result<usize, String> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("content not compared: reading it failed ({e})")),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn root(dir: &std::path::Path) -> OwnedFd {
        crate::workspace::open_dir(dir).unwrap()
    }

    fn side(id: &str, dir: &std::path::Path) -> Side {
        let root = root(dir);
        let walk = walk(&root);
        Side {
            id: id.into(),
            vars: DigestAnswer::default(),
            root,
            walk,
        }
    }

    fn changes(d: &SandboxDiff) -> Vec<(String, DiffChange)> {
        d.files.iter().map(|f| (f.path.clone(), f.change)).collect()
    }

    #[test]
    fn walks_in_path_order_without_following_symlinks() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        std::fs::create_dir_all(d.join("a/b")).unwrap();
        std::fs::write(d.join("a/b/f"), "x").unwrap();
        std::fs::write(d.join("a-c"), "yy").unwrap();
        symlink("/etc", d.join("out")).unwrap();
        std::fs::write(d.join(".sandlot-upload-123"), "in flight").unwrap();
        let w = walk(&root(d));
        let paths: Vec<String> = w.entries.keys().map(|k| shown(k)).collect();
        assert_eq!(paths, ["a", "a/b", "a/b/f", "a-c", "out"]);
        let out = &w.entries[&b"out".to_vec()];
        assert_eq!((out.kind, out.size), ("symlink", 4));
        assert!(w.cut.is_none() && w.too_deep.is_empty());
    }

    #[test]
    fn compares_sizes_times_contents_and_link_targets() {
        let (ta, tb) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (a, b) = (ta.path(), tb.path());
        for d in [a, b] {
            std::fs::write(d.join("same"), "same").unwrap();
            std::fs::create_dir(d.join("dir")).unwrap();
        }
        std::fs::write(a.join("grown"), "1").unwrap();
        std::fs::write(b.join("grown"), "12").unwrap();
        std::fs::write(a.join("edited"), "abc").unwrap();
        std::fs::write(b.join("edited"), "abd").unwrap();
        std::fs::write(a.join("gone"), "g").unwrap();
        std::fs::create_dir(b.join("new")).unwrap();
        std::fs::write(b.join("new/f"), "f").unwrap();
        symlink("x", a.join("link")).unwrap();
        symlink("y", b.join("link")).unwrap();
        std::fs::write(a.join("kind"), "k").unwrap();
        std::fs::create_dir(b.join("kind")).unwrap();
        // Same bytes, different times: read, found equal.
        std::fs::write(a.join("touched"), "t").unwrap();
        std::fs::write(b.join("touched"), "t").unwrap();
        // Files written this close together may share a time (the clock's tick): the edited
        // one and the touched one get times of their own, as a later write would.
        let old = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        for f in [a.join("touched"), a.join("edited")] {
            let file = std::fs::File::options().write(true).open(f).unwrap();
            file.set_modified(old).unwrap();
        }
        let diff = compare(side("sb_a", a), side("sb_b", b));
        use DiffChange::*;
        assert_eq!(
            changes(&diff),
            [
                ("edited".to_string(), Changed),
                ("gone".to_string(), Removed),
                ("grown".to_string(), Changed),
                ("kind".to_string(), Changed),
                ("link".to_string(), Changed),
                ("new".to_string(), Added),
                ("new/f".to_string(), Added),
            ]
        );
        let grown = &diff.files[2];
        assert_eq!((grown.a_size, grown.b_size), (Some(1), Some(2)));
        let kind = &diff.files[3];
        assert_eq!(
            (kind.a_kind.as_deref(), kind.b_kind.as_deref()),
            (Some("file"), Some("dir"))
        );
        assert!(!diff.truncated && diff.not_compared.is_empty());
    }

    #[test]
    fn a_walk_past_its_bound_compares_only_what_both_saw() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        std::fs::create_dir(d.join("big")).unwrap();
        for i in 0..(MAX_WALK + 1) {
            std::fs::File::create(d.join(format!("big/{i}"))).unwrap();
        }
        std::fs::write(d.join("after"), "a").unwrap();
        let w = walk(&root(d));
        assert_eq!(w.cut.as_deref(), Some(&b"big"[..]));
        // The other side has a path past the cut: not compared.
        let t2 = tempfile::tempdir().unwrap();
        std::fs::write(t2.path().join("aa"), "b").unwrap();
        std::fs::write(t2.path().join("zz"), "b").unwrap();
        let diff = compare(side("sb_a", d), side("sb_b", t2.path()));
        assert!(diff.truncated);
        let paths: Vec<String> = diff.files.iter().map(|f| f.path.clone()).collect();
        assert_eq!(paths, ["aa", "after", "big"]);
    }

    #[test]
    fn variables_compare_by_digest_and_skip_what_was_not_digested() {
        let t = tempfile::tempdir().unwrap();
        let digest = |v: serde_json::Value| -> DigestAnswer { serde_json::from_value(v).unwrap() };
        let mut a = side("sb_a", t.path());
        let mut b = side("sb_b", t.path());
        a.vars = digest(serde_json::json!({
            "contexts": {
                "ctx_1": {"only_a": {"type": "int", "size": 5, "sha256": "1"}},
                "default": {
                    "x": {"type": "int", "size": 5, "sha256": "a"},
                    "df": {"type": "DataFrame", "size": 100, "sha256": "b"},
                    "gone": {"type": "str", "size": 9, "sha256": "c"},
                    "lock": {"type": "lock", "size": 0, "sha256": "d"},
                }
            },
            "not_digested": [],
        }));
        b.vars = digest(serde_json::json!({
            "contexts": {"default": {
                "x": {"type": "int", "size": 5, "sha256": "a"},
                "df": {"type": "DataFrame", "size": 120, "sha256": "e"},
                "new": {"type": "list", "size": 7, "sha256": "f"},
            }},
            "not_digested": [{"name": "lock", "context": "default", "reason": "TypeError"}],
        }));
        let diff = compare(a, b);
        let got: Vec<(&str, &str, DiffChange)> = diff
            .variables
            .iter()
            .map(|v| (v.context.as_str(), v.name.as_str(), v.change))
            .collect();
        use DiffChange::*;
        assert_eq!(
            got,
            [
                ("default", "df", Changed),
                ("default", "gone", Removed),
                ("default", "new", Added),
                ("ctx_1", "only_a", Removed),
            ]
        );
        let df = &diff.variables[0];
        assert_eq!(df.a.as_ref().map(|s| s.size), Some(100));
        assert_eq!(df.b.as_ref().map(|s| s.size), Some(120));
        assert_eq!(diff.not_compared.len(), 1);
        assert_eq!(diff.not_compared[0].sandbox.as_deref(), Some("sb_b"));
    }
}
