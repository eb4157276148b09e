//! Saved interpreter state (DESIGN §4): what pause, fork and snapshots carry besides the
//! workspace's files. The driver serializes its code contexts (variables, functions, classes,
//! imports, each Bash session's cwd and exports) *inside the sandbox* into a host file whose
//! descriptor the server passes it on the control stream; loading is the same in reverse, in a
//! fresh sandbox of the same family. The server never unpickles anything: it only moves bytes
//! and checks the file's header.
//!
//! Files: `<data-dir>/state/<sandbox>.state` (+ `.json`, what [`Saved`] says) for a paused
//! sandbox, `<data-dir>/state/fork-<op>.state` while a fork runs, and
//! `<data-dir>/snapshots/<snapshot>.state` for a snapshot. Each is written under a `.partial`
//! name, fsynced and renamed into place, so a crash never leaves half a state under a real name.
//!
//! Format (version 1, written by `python/sandlot_runtime/snapshot.py`): a header of
//! [`HEADER_LEN`] bytes (`SANDLOT-STATE\n`, the version line, the body's SHA-256 in hex, padded),
//! then the body. The driver checks the hash before it unpickles anything; the server compares
//! the header's hash with the one it recorded when the state was saved, and `verify` hashes the
//! body on the host.

use crate::error::RuntimeError;
use crate::request::{ask, Failure};
use crate::sandbox::Live;
use crate::task::blocking;
use crate::util::new_id;
use crate::Runtime;
use sandlot_types::{Context, NotCaptured};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The data dir's directory of paused sandboxes' states and forks in flight.
pub(crate) const STATE_DIR: &str = "state";
/// The data dir's directory of snapshots' states.
pub(crate) const SNAPSHOT_DIR: &str = "snapshots";
/// First line of every state file.
const MAGIC: &[u8] = b"SANDLOT-STATE\n";
/// The format version this server reads and asks for.
pub(crate) const FORMAT_VERSION: u32 = 1;
/// Bytes before the body.
pub(crate) const HEADER_LEN: u64 = 96;
/// Bounds the driver applies to pickling: one object, and the whole save (a digest, `diff.rs`,
/// has the same).
pub(crate) const OBJECT_SECS: f64 = 2.0;
pub(crate) const TOTAL_SECS: f64 = 20.0;
/// How long the server waits for an answer beyond the driver's own bound.
pub(crate) const ANSWER_SLACK: Duration = Duration::from_secs(10);
/// How long a load may take (a large state unpickles at hundreds of MB/s).
const LOAD_WAIT: Duration = Duration::from_secs(60);

/// What a save wrote, as the driver reported it and the server recorded it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Saved {
    pub bytes: u64,
    /// SHA-256 of the body, as in the header.
    pub sha256: String,
    pub variables: u64,
    pub not_captured: Vec<NotCaptured>,
    /// The sandbox's code contexts when it was saved.
    pub contexts: Vec<Context>,
}

/// What a load restored.
#[derive(Debug, Clone)]
pub(crate) struct Loaded {
    pub variables: u64,
    pub not_restored: Vec<NotCaptured>,
}

/// Why a save or load did not happen.
pub(crate) enum StateFailure {
    /// The driver could not do it and says why; the sandbox is as it was (a save) or holds
    /// whatever it loaded before the failure (a load; callers discard such processes).
    Refused(String),
    /// The sandbox's processes died (or stopped answering) meanwhile.
    Died(String),
    /// The host side failed (files in the data dir).
    Host(RuntimeError),
}

impl StateFailure {
    fn from_request(f: Failure, what: &str) -> Self {
        match f {
            Failure::Refused(why) => StateFailure::Refused(why),
            Failure::NoAnswer => StateFailure::Died(format!("no answer to {what} in time")),
            Failure::Died(why) => StateFailure::Died(why),
        }
    }
}

impl Runtime {
    /// Where paused sandboxes' states live.
    pub(crate) fn state_dir(&self) -> PathBuf {
        self.inner.storage.data_dir.join(STATE_DIR)
    }

    /// The state file of a paused sandbox.
    pub(crate) fn paused_state(&self, id: &str) -> PathBuf {
        self.state_dir().join(format!("{id}.state"))
    }

    /// A snapshot's state file.
    pub(crate) fn snapshot_state(&self, id: &str) -> PathBuf {
        self.inner
            .storage
            .data_dir
            .join(SNAPSHOT_DIR)
            .join(format!("{id}.state"))
    }

    /// Saves `live`'s state to `path` with the sandbox's turn held, and gives the turn back.
    /// When that fails the sandbox is left as it was (`capture_failed`), or, if its processes
    /// died meanwhile, restarting in place, holding the turn until they are up, and the error
    /// says its variables are lost.
    pub(crate) async fn save_state(
        &self,
        e: &std::sync::Arc<crate::Entry>,
        turn: crate::restart::Turn,
        live: &Live,
        path: &Path,
        durability: Durability,
    ) -> Result<(crate::restart::Turn, Saved), RuntimeError> {
        match save(live, path, durability).await {
            Ok(s) => Ok((turn, s)),
            Err(StateFailure::Refused(reason)) => Err(RuntimeError::CaptureFailed { reason }),
            Err(StateFailure::Died(why)) => {
                live.signal_kill();
                self.restart_after(e, turn, crate::restart::reason::CRASHED);
                Err(RuntimeError::DiedSaving { why })
            }
            Err(StateFailure::Host(err)) => Err(err),
        }
    }

    /// A path for the state of one fork in flight.
    pub(crate) fn fork_state(&self) -> PathBuf {
        self.state_dir().join(format!("{}.state", new_id("fork-")))
    }
}

/// How long a saved state must last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    /// It must survive a crash of the host (a pause, a snapshot): fsynced before it counts.
    Durable,
    /// It lives for one operation (a fork): a crash discards it anyway.
    Transient,
}

/// Asks the driver of `live` to save its state into `dest` (written aside, fsynced when
/// durable, renamed into place). Call with the sandbox's execution lock held.
pub(crate) async fn save(
    live: &Live,
    dest: &Path,
    durability: Durability,
) -> Result<Saved, StateFailure> {
    let partial = partial_of(dest);
    let file = {
        let partial = partial.clone();
        blocking("creating a state file", move || create_file(&partial))
            .await
            .map_err(StateFailure::Host)?
            .map_err(StateFailure::Host)?
    };
    let op = new_id("save_");
    let msg = json!({
        "type": "state_save",
        "id": op,
        "fd": true,
        "object_secs": OBJECT_SECS,
        "total_secs": TOTAL_SECS,
    });
    let wait = Duration::from_secs_f64(TOTAL_SECS) + ANSWER_SLACK;
    let answer = ask(
        live,
        &msg,
        Some(file.as_fd()),
        "state_saved",
        ("id", &op),
        wait,
    )
    .await;
    let answer = match answer {
        Ok(v) => v,
        Err(f) => {
            let _ = std::fs::remove_file(&partial);
            return Err(StateFailure::from_request(f, "the save"));
        }
    };
    let saved = Saved {
        bytes: answer.get("bytes").and_then(Value::as_u64).unwrap_or(0),
        sha256: answer
            .get("sha256")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        variables: answer.get("variables").and_then(Value::as_u64).unwrap_or(0),
        not_captured: not_captured(&answer, "not_captured"),
        contexts: crate::util::lock(&live.contexts).clone(),
    };
    let dest = dest.to_path_buf();
    let expected = saved.clone();
    let placed = blocking("placing a state file", move || {
        let checked = check_header(&file, Some(&expected.sha256)).and_then(|len| {
            if len == expected.bytes {
                Ok(())
            } else {
                Err(format!(
                    "the driver reported {} bytes but wrote {len}",
                    expected.bytes
                ))
            }
        });
        if let Err(why) = checked {
            let _ = std::fs::remove_file(&partial);
            return Err(StateFailure::Refused(why));
        }
        let done = if durability == Durability::Durable {
            file.sync_all()
                .and_then(|()| std::fs::rename(&partial, &dest))
                .and_then(|()| sync_dir(&dest))
        } else {
            std::fs::rename(&partial, &dest)
        };
        if let Err(source) = done {
            let _ = std::fs::remove_file(&partial);
            return Err(StateFailure::Host(RuntimeError::StateFile {
                op: "writing",
                path: dest,
                source,
            }));
        }
        Ok(())
    })
    .await
    .map_err(StateFailure::Host)?;
    placed?;
    Ok(saved)
}

/// Asks the driver of a fresh `live` to load the state in `path` (whose body must hash to
/// `sha256`): fresh entropy when `reseed`. Call with the sandbox's execution lock held (or
/// before anyone else can reach it).
pub(crate) async fn load(
    live: &Live,
    path: &Path,
    sha256: &str,
    reseed: bool,
) -> Result<Loaded, StateFailure> {
    let (p, sha) = (path.to_path_buf(), sha256.to_string());
    let file = blocking("opening a state file", move || {
        let file = std::fs::File::open(&p).map_err(|source| format!("cannot open it: {source}"))?;
        check_header(&file, Some(&sha))?;
        Ok::<_, String>(file)
    })
    .await
    .map_err(StateFailure::Host)?
    .map_err(StateFailure::Refused)?;
    let op = new_id("load_");
    let msg = json!({"type": "state_load", "id": op, "fd": true, "reseed": reseed});
    let answer = ask(
        live,
        &msg,
        Some(file.as_fd()),
        "state_loaded",
        ("id", &op),
        LOAD_WAIT,
    )
    .await
    .map_err(|f| StateFailure::from_request(f, "the load"))?;
    Ok(Loaded {
        variables: answer.get("variables").and_then(Value::as_u64).unwrap_or(0),
        not_restored: not_captured(&answer, "not_restored"),
    })
}

/// Checks a state file on the host without unpickling it: its header, its length, and that
/// its body hashes to what the header (and `expected`, when given) says. Blocking; reads the
/// whole file.
pub(crate) fn verify(path: &Path, expected: Option<&str>) -> Result<u64, String> {
    use sha2::Digest;
    let mut file = std::fs::File::open(path).map_err(|e| format!("cannot open it: {e}"))?;
    let header_sha = read_header(&mut file)?;
    if let Some(expected) = expected {
        if header_sha != expected {
            return Err("its header names another state than the one recorded".into());
        }
    }
    file.seek(SeekFrom::Start(HEADER_LEN))
        .map_err(|e| format!("cannot read it: {e}"))?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut len = 0u64;
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| format!("cannot read it: {e}"))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        len += n as u64;
    }
    if hex::encode(hasher.finalize()) != header_sha {
        return Err("its body does not match its checksum (truncated or altered)".into());
    }
    Ok(len + HEADER_LEN)
}

/// Reads and checks the header; returns the file's length. `expected`: the body hash the
/// server recorded.
fn check_header(file: &std::fs::File, expected: Option<&str>) -> Result<u64, String> {
    let mut f = file;
    f.seek(SeekFrom::Start(0))
        .map_err(|e| format!("cannot read it: {e}"))?;
    let sha = read_header(&mut f)?;
    if expected.is_some_and(|e| e != sha) {
        return Err("its header names another state than the one recorded".into());
    }
    let len = file
        .metadata()
        .map_err(|e| format!("cannot stat it: {e}"))?
        .len();
    if len <= HEADER_LEN {
        return Err("it ends inside its header (truncated)".into());
    }
    Ok(len)
}

/// The body hash from a state file's header, or what is wrong with the header.
fn read_header(file: &mut impl Read) -> Result<String, String> {
    let mut header = [0u8; HEADER_LEN as usize];
    file.read_exact(&mut header)
        .map_err(|_| "it is shorter than its header (truncated)".to_string())?;
    let Some(rest) = header.strip_prefix(MAGIC) else {
        return Err("it is not a sandlot state file".into());
    };
    let text = std::str::from_utf8(rest).map_err(|_| "its header is garbled".to_string())?;
    let mut lines = text.lines();
    let version = lines.next().unwrap_or_default().trim();
    if version != FORMAT_VERSION.to_string() {
        return Err(format!(
            "it has format version {version:?}; this server reads {FORMAT_VERSION}"
        ));
    }
    let sha = lines.next().unwrap_or_default().trim();
    if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("its header has no valid checksum".into());
    }
    Ok(sha.to_ascii_lowercase())
}

/// The `.partial` name a state file is written under.
fn partial_of(dest: &Path) -> PathBuf {
    let mut name = dest.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    dest.with_file_name(name)
}

/// Creates an empty state file, readable by root only, for the driver to write through its
/// descriptor.
fn create_file(path: &Path) -> Result<std::fs::File, RuntimeError> {
    let error = |op, source| RuntimeError::StateFile {
        op,
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| error("creating the directory of", e))?;
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| error("creating", e))
}

/// Makes a rename in `path`'s directory durable.
fn sync_dir(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) => std::fs::File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

/// Writes `value` as JSON to `path` atomically (aside, fsynced, renamed). Blocking.
pub(crate) fn write_json(path: &Path, value: &impl Serialize) -> std::io::Result<()> {
    let partial = partial_of(path);
    let text = serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&partial)?;
    std::io::Write::write_all(&mut f, &text)?;
    f.sync_all()?;
    std::fs::rename(&partial, path)?;
    sync_dir(path)
}

/// The `[{name, context, reason}]` list under `key` of a driver's answer.
fn not_captured(answer: &Value, key: &str) -> Vec<NotCaptured> {
    answer
        .get(key)
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default()
}
