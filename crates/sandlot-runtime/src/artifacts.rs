//! Artifacts: the files an execution created or changed in the workspace, kept
//! content-addressed under `<data-dir>/artifacts/` so they outlive their sandbox.
//!
//! Layout: `<sha256>` holds the bytes, `<sha256>.json` the MIME type, size and the first path
//! the content was seen at; `.tmp-*` are copies in progress. The driver only *names* the
//! changed files (its `done` frame's `changes`); the server reads each one itself through the
//! workspace fd with [`files::open_file`] (never by host path, never through a symlink, regular
//! files only), so a lying driver can at worst name files of its own workspace. The mtime of
//! `<sha256>` is when the content was last stored; files older than the retention are swept.
//! The runtime serves stored artifacts by hash (`impl Runtime` at the end).

use crate::error::RuntimeError;
use crate::files;
use crate::task::blocking;
use crate::util::lock;
use crate::Runtime;
use sandlot_types::Artifact;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// Most artifacts one execution keeps (the driver caps its list too; it is not trusted to).
pub const MAX_ARTIFACTS: usize = 200;
/// How often the retention sweep runs.
const SWEEP_EVERY: Duration = Duration::from_secs(300);
/// Copies in progress older than this were abandoned (a crash) and are removed.
const STALE_TMP: Duration = Duration::from_secs(3600);
const OCTET_STREAM: &str = "application/octet-stream";

/// A file the driver reported as created or modified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub path: String,
    /// `created` or `modified`.
    pub change: String,
}

/// The `changes` of a `done` frame, at most [`MAX_ARTIFACTS`]; malformed entries are skipped.
pub fn parse_changes(done: &Value) -> Vec<Change> {
    let Some(list) = done.get("changes").and_then(|c| c.as_array()) else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|c| {
            let path = c.get("path")?.as_str()?.to_string();
            let change = match c.get("change").and_then(|k| k.as_str()) {
                Some("created") => "created",
                _ => "modified",
            };
            Some(Change {
                path,
                change: change.to_string(),
            })
        })
        .take(MAX_ARTIFACTS)
        .collect()
}

/// Whether `s` is a SHA-256 as the store names it: 64 lowercase hex digits.
pub fn valid_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The MIME type of a file, from its name.
pub fn mime_of(path: &str) -> String {
    mime_guess::from_path(path)
        .first()
        .map(|m| m.essence_str().to_string())
        .unwrap_or_else(|| OCTET_STREAM.to_string())
}

/// The content-addressed store.
pub struct Store {
    dir: PathBuf,
    max_bytes: u64,
    retention: Duration,
    /// Serializes the last step of storing (exists? touch : rename) with the sweep's
    /// check-and-delete, so a content stored again is never deleted under its new report.
    publish: Mutex<()>,
    last_sweep: Mutex<Option<Instant>>,
}

fn io(op: &'static str) -> impl FnOnce(std::io::Error) -> RuntimeError {
    move |source| RuntimeError::Artifacts { op, source }
}

impl Store {
    /// Opens (creating) the store in `dir`.
    pub fn open(dir: PathBuf, max_bytes: u64, retention: Duration) -> std::io::Result<Self> {
        std::fs::create_dir_all(&dir)?;
        Ok(Self {
            dir,
            max_bytes,
            retention,
            publish: Mutex::new(()),
            last_sweep: Mutex::new(None),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Copies each changed file of the workspace into the store. Blocking: call it from
    /// `spawn_blocking`. Files that cannot be opened as regular files (gone again, symlinks,
    /// FIFOs, paths outside the workspace) are left out; files over the size limit are listed
    /// with an empty `sha256` and `url`.
    pub fn collect(&self, ws: &OwnedFd, changes: &[Change]) -> Vec<Artifact> {
        let mut out = Vec::new();
        for c in changes.iter().take(MAX_ARTIFACTS) {
            match self.store_one(ws, c) {
                Ok(Some(a)) => out.push(a),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(path = %c.path, error = %e, "artifact not stored")
                }
            }
        }
        out
    }

    fn store_one(&self, ws: &OwnedFd, c: &Change) -> Result<Option<Artifact>, RuntimeError> {
        let Ok(parts) = files::normalize(&c.path) else {
            return Ok(None);
        };
        let path = parts.join("/");
        let Ok((file, size)) = files::open_file(ws, &path) else {
            return Ok(None);
        };
        let mime_type = mime_of(&path);
        let too_large = |size| Artifact {
            path: path.clone(),
            size,
            sha256: String::new(),
            mime_type: mime_type.clone(),
            change: c.change.clone(),
            url: String::new(),
        };
        if size > self.max_bytes {
            return Ok(Some(too_large(size)));
        }
        let tmp = self
            .dir
            .join(format!(".tmp-{}", uuid::Uuid::new_v4().simple()));
        let copied = self.copy(file, &tmp);
        let (sha, copied_size) = match copied {
            Ok(Some(x)) => x,
            Ok(None) => {
                let _ = std::fs::remove_file(&tmp);
                // It grew past the limit while being copied.
                return Ok(Some(too_large(self.max_bytes.saturating_add(1))));
            }
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(io("copy")(e));
            }
        };
        self.publish(&tmp, &sha, &path, &mime_type, copied_size)
            .map_err(io("publish"))?;
        Ok(Some(Artifact {
            url: format!("/v1/artifacts/{sha}"),
            path,
            size: copied_size,
            sha256: sha,
            mime_type,
            change: c.change.clone(),
        }))
    }

    /// Streams `file` into `tmp` through SHA-256; None when it is larger than the limit.
    fn copy(&self, file: std::fs::File, tmp: &Path) -> std::io::Result<Option<(String, u64)>> {
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(tmp)?;
        let mut input = file.take(self.max_bytes.saturating_add(1));
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 256 << 10];
        let mut total = 0u64;
        loop {
            let n = match input.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            total += n as u64;
            if total > self.max_bytes {
                return Ok(None);
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n])?;
        }
        out.flush()?;
        Ok(Some((hex::encode(hasher.finalize()), total)))
    }

    /// Moves a finished copy to its content address, or drops it when the content is already
    /// there (then the stored copy's mtime is renewed, restarting its retention).
    fn publish(
        &self,
        tmp: &Path,
        sha: &str,
        path: &str,
        mime_type: &str,
        size: u64,
    ) -> std::io::Result<()> {
        let target = self.dir.join(sha);
        let meta = self.dir.join(format!("{sha}.json"));
        let _guard = lock(&self.publish);
        let existing = std::fs::OpenOptions::new().write(true).open(&target);
        match existing {
            Ok(f) => {
                let _ = std::fs::remove_file(tmp);
                f.set_modified(SystemTime::now())?;
            }
            Err(_) => std::fs::rename(tmp, &target)?,
        }
        if !meta.exists() {
            let body = serde_json::json!({"mime_type": mime_type, "size": size, "path": path});
            let tmp_meta = self
                .dir
                .join(format!(".tmp-{}", uuid::Uuid::new_v4().simple()));
            std::fs::write(&tmp_meta, body.to_string())?;
            std::fs::rename(&tmp_meta, &meta)?;
        }
        Ok(())
    }

    /// Opens a stored artifact: its size, MIME type and the file. Blocking.
    pub fn open_artifact(&self, sha: &str) -> Result<(u64, String, std::fs::File), RuntimeError> {
        if !valid_sha256(sha) {
            return Err(RuntimeError::BadArtifactName);
        }
        let file = match std::fs::File::open(self.dir.join(sha)) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(RuntimeError::ArtifactNotFound {
                    sha: sha.to_string(),
                })
            }
            Err(e) => return Err(io("open")(e)),
        };
        let size = file.metadata().map_err(io("stat"))?.len();
        let mime = std::fs::read(self.dir.join(format!("{sha}.json")))
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .and_then(|v| v.get("mime_type")?.as_str().map(str::to_string))
            .unwrap_or_else(|| OCTET_STREAM.to_string());
        Ok((size, mime, file))
    }

    /// Whether a retention sweep is due (every few minutes; the first call says yes).
    pub fn sweep_due(&self) -> bool {
        let mut last = lock(&self.last_sweep);
        if last.is_some_and(|t| t.elapsed() < SWEEP_EVERY) {
            return false;
        }
        *last = Some(Instant::now());
        true
    }

    /// Deletes artifacts not stored again within the retention, their metadata, orphaned
    /// metadata and abandoned copies. Blocking. Returns how many artifacts were deleted.
    pub fn sweep(&self) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let now = SystemTime::now();
        let age = |p: &Path| -> Option<Duration> {
            let m = std::fs::symlink_metadata(p).ok()?.modified().ok()?;
            Some(now.duration_since(m).unwrap_or_default())
        };
        let mut deleted = 0;
        for ent in entries.flatten() {
            let name = ent.file_name().to_string_lossy().into_owned();
            let path = ent.path();
            if name.starts_with(".tmp-") {
                if age(&path).is_some_and(|a| a > STALE_TMP) {
                    let _ = std::fs::remove_file(&path);
                }
            } else if valid_sha256(&name) {
                let _guard = lock(&self.publish);
                if age(&path).is_some_and(|a| a > self.retention) {
                    let _ = std::fs::remove_file(self.dir.join(format!("{name}.json")));
                    if std::fs::remove_file(&path).is_ok() {
                        deleted += 1;
                    }
                }
            } else if let Some(sha) = name.strip_suffix(".json") {
                if valid_sha256(sha)
                    && !self.dir.join(sha).exists()
                    && age(&path).is_some_and(|a| a > STALE_TMP)
                {
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        if deleted > 0 {
            tracing::info!(deleted, "artifacts past their retention deleted");
        }
        deleted
    }
}

impl Runtime {
    /// Opens a stored artifact by its SHA-256: its size, MIME type and a reader. Artifacts
    /// outlive their sandboxes (until their retention passes).
    pub async fn open_artifact(
        &self,
        sha256: &str,
    ) -> Result<(u64, String, tokio::fs::File), RuntimeError> {
        let store = self.inner.storage.artifacts.clone();
        let sha = sha256.to_string();
        let (size, mime, f) =
            blocking("opening an artifact", move || store.open_artifact(&sha)).await??;
        Ok((size, mime, tokio::fs::File::from_std(f)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{FromRawFd, IntoRawFd};

    fn ws_fd(dir: &Path) -> OwnedFd {
        let f = std::fs::File::open(dir).unwrap();
        // SAFETY: a fresh fd from File that we now own.
        unsafe { OwnedFd::from_raw_fd(f.into_raw_fd()) }
    }

    fn change(path: &str) -> Change {
        Change {
            path: path.into(),
            change: "created".into(),
        }
    }

    #[test]
    fn parses_and_caps_changes() {
        let mut list: Vec<Value> = (0..300)
            .map(|i| serde_json::json!({"path": format!("f{i}"), "size": 1, "change": "created"}))
            .collect();
        list.insert(0, serde_json::json!({"path": 5}));
        list.insert(1, serde_json::json!({"path": "m", "change": "weird"}));
        let got = parse_changes(&serde_json::json!({"changes": list}));
        assert_eq!(got.len(), MAX_ARTIFACTS);
        assert_eq!(got[0].path, "m");
        assert_eq!(got[0].change, "modified");
        assert_eq!(got[1].change, "created");
        assert!(parse_changes(&serde_json::json!({})).is_empty());
    }

    #[test]
    fn validates_names_and_guesses_mime() {
        assert!(valid_sha256(&"a".repeat(64)));
        assert!(!valid_sha256(&"A".repeat(64)));
        assert!(!valid_sha256(&"a".repeat(63)));
        assert!(!valid_sha256("../../etc/passwd"));
        assert_eq!(mime_of("out/report.csv"), "text/csv");
        assert_eq!(mime_of("plot.png"), "image/png");
        assert_eq!(mime_of("noext"), OCTET_STREAM);
    }

    #[test]
    fn stores_dedups_skips_and_sweeps() {
        let ws = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("a.txt"), b"hello").unwrap();
        std::fs::write(ws.path().join("b.txt"), b"hello").unwrap();
        std::fs::write(ws.path().join("big.bin"), vec![0u8; 100]).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", ws.path().join("link")).unwrap();
        let store =
            Store::open(data.path().join("artifacts"), 64, Duration::from_secs(3600)).unwrap();
        let fd = ws_fd(ws.path());
        let changes: Vec<Change> = ["a.txt", "b.txt", "big.bin", "link", "../x", "missing"]
            .into_iter()
            .map(change)
            .collect();
        let got = store.collect(&fd, &changes);
        assert_eq!(got.len(), 3, "{got:?}");
        let sha = hex::encode(Sha256::digest(b"hello"));
        assert_eq!(got[0].sha256, sha);
        assert_eq!(got[0].url, format!("/v1/artifacts/{sha}"));
        assert_eq!(got[0].mime_type, "text/plain");
        assert_eq!(got[1].sha256, sha);
        assert_eq!(
            (got[2].size, got[2].sha256.as_str(), got[2].url.as_str()),
            (100, "", "")
        );
        let (size, mime, mut f) = store.open_artifact(&sha).unwrap();
        let mut body = String::new();
        f.read_to_string(&mut body).unwrap();
        assert_eq!(
            (size, mime.as_str(), body.as_str()),
            (5, "text/plain", "hello")
        );
        let names: Vec<String> = std::fs::read_dir(store.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}"); // the bytes and the metadata, once
        assert!(matches!(
            store.open_artifact(&"0".repeat(64)),
            Err(RuntimeError::ArtifactNotFound { .. })
        ));
        assert!(matches!(
            store.open_artifact("nope"),
            Err(RuntimeError::BadArtifactName)
        ));

        assert!(store.sweep_due());
        assert!(!store.sweep_due());
        assert_eq!(store.sweep(), 0);
        let old = SystemTime::now() - Duration::from_secs(7200);
        std::fs::File::options()
            .write(true)
            .open(store.dir().join(&sha))
            .unwrap()
            .set_modified(old)
            .unwrap();
        assert_eq!(store.sweep(), 1);
        assert!(std::fs::read_dir(store.dir()).unwrap().next().is_none());
    }
}
