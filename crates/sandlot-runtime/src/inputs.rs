//! Inputs: files clients write into a sandbox (every interface's uploads go through
//! [`Runtime::write_file`]), recorded for lineage and replay.
//!
//! An upload's body is *tapped* as it streams ([`Runtime::tap_input`]): each chunk (a cheap
//! `Bytes` clone) also goes to a blocking task that hashes it and, up to the artifact size
//! limit, copies it to a staging file under `<data-dir>/run/inputs/`. The upload itself is not
//! slowed beyond that hand-off (the channel is bounded, so a slow disk pushes back rather than
//! buffering without end). Hashing the bytes the client sent, rather than reading the file
//! back, also means code running in the sandbox cannot change what is recorded.
//!
//! Once the upload is committed, [`Runtime::record_input`] writes the input row (path, sha256,
//! size, when) before the response, so an execution that starts after the upload answered is
//! ordered after it; the staged copy is then moved into the content-addressed artifacts store
//! in the background (through [`crate::artifacts::Store::collect`], which holds the store's
//! lock against its retention sweep). An input over the size limit is recorded by hash only
//! (`stored: false`): replay says such a step is not replayable.

use crate::artifacts::Change;
use crate::util::lock;
use crate::Runtime;
use bytes::Bytes;
use futures::StreamExt;
use sandlot_types::FileEntry;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};
use tokio::sync::mpsc;

/// Chunks in flight between the upload and the tap's writer.
const TAP_CHANNEL: usize = 16;
/// Staged copies older than this were abandoned (a crash) and are removed.
const STALE_STAGING: Duration = Duration::from_secs(3600);

/// What the tap saw of an upload.
struct Tapped {
    sha256: String,
    size: u64,
    /// The staging directory holding the copy (`content`), when it fit under the limit.
    staged: Option<PathBuf>,
}

/// The tap on one upload; hand it to [`Runtime::record_input`] whether the upload succeeded
/// or not (it removes the staged copy of a failed one).
pub(crate) struct Tap {
    task: tokio::task::JoinHandle<std::io::Result<Tapped>>,
}

/// Hashes chunks and copies them to `dir/content` while the total stays within `max`.
fn tap_writer(mut rx: mpsc::Receiver<Bytes>, dir: PathBuf, max: u64) -> std::io::Result<Tapped> {
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    std::fs::create_dir_all(&dir)?;
    let mut file = Some(std::io::BufWriter::with_capacity(
        256 << 10,
        std::fs::File::create(dir.join("content"))?,
    ));
    while let Some(chunk) = rx.blocking_recv() {
        hasher.update(&chunk);
        size += chunk.len() as u64;
        if size > max {
            // Over the limit: kept by hash only.
            file = None;
        }
        if let Some(f) = file.as_mut() {
            if let Err(e) = f.write_all(&chunk) {
                tracing::warn!(error = %e, "an input's copy could not be staged; kept by hash");
                file = None;
            }
        }
    }
    let staged = match file {
        Some(mut f) => match f.flush() {
            Ok(()) => Some(dir),
            Err(_) => {
                let _ = std::fs::remove_dir_all(&dir);
                None
            }
        },
        None => {
            let _ = std::fs::remove_dir_all(&dir);
            None
        }
    };
    Ok(Tapped {
        sha256: hex::encode(hasher.finalize()),
        size,
        staged,
    })
}

/// Removes staged copies a crashed server left behind. Blocking.
fn sweep_staging(root: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    let now = SystemTime::now();
    for ent in entries.flatten() {
        let old = ent
            .metadata()
            .and_then(|m| m.modified())
            .map(|m| now.duration_since(m).unwrap_or_default() > STALE_STAGING)
            .unwrap_or(false);
        if old {
            let _ = std::fs::remove_dir_all(ent.path());
        }
    }
}

impl Runtime {
    fn staging_root(&self) -> PathBuf {
        self.inner.storage.data_dir.join("run").join("inputs")
    }

    /// Wraps an upload's body so its bytes are hashed and copied aside as they pass.
    pub(crate) fn tap_input(&self, body: crate::ByteStream) -> (crate::ByteStream, Tap) {
        static SWEPT: std::sync::Once = std::sync::Once::new();
        let root = self.staging_root();
        SWEPT.call_once(|| sweep_staging(&root));
        let dir = root.join(uuid::Uuid::new_v4().simple().to_string());
        let max = self.inner.config.max_artifact_bytes;
        let (tx, rx) = mpsc::channel::<Bytes>(TAP_CHANNEL);
        let task = tokio::task::spawn_blocking(move || tap_writer(rx, dir, max));
        let body = body.then(move |chunk| {
            let tx = tx.clone();
            async move {
                if let Ok(c) = &chunk {
                    // The writer only stops early on its own failure; the upload goes on.
                    let _ = tx.send(c.clone()).await;
                }
                chunk
            }
        });
        (Box::pin(body), Tap { task })
    }

    /// Records the input an upload wrote into sandbox `id` (`written`: the committed file, or
    /// `None` when the upload failed, which records nothing). Never fails the upload: a record
    /// that cannot be written is logged.
    pub(crate) async fn record_input(&self, id: &str, written: Option<&FileEntry>, tap: Tap) {
        let tapped = match tap.task.await {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => {
                tracing::warn!(sandbox = %id, error = %e, "an input could not be tapped");
                return;
            }
            Err(e) => {
                tracing::warn!(sandbox = %id, error = %e, "an input's tap failed");
                return;
            }
        };
        let Some(entry) = written else {
            if let Some(dir) = tapped.staged {
                let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
            }
            return;
        };
        let at = crate::now_rfc3339();
        let stored = tapped.staged.is_some();
        let store = self.inner.storage.store.clone();
        if let Err(e) =
            store.insert_input(id, &entry.path, &tapped.sha256, tapped.size, &at, stored)
        {
            tracing::warn!(sandbox = %id, error = %e, "an input was not recorded");
        }
        let Some(dir) = tapped.staged else {
            return;
        };
        // Who may fetch it by hash (bundles, lineage): the sandbox's tenant.
        let tenant = match lock(&self.inner.registry.sandboxes).get(id) {
            Some(e) => lock(&e.info).tenant.clone(),
            None => return,
        };
        let artifacts = self.inner.storage.artifacts.clone();
        let name = entry.name.clone();
        let sha = tapped.sha256;
        tokio::task::spawn_blocking(move || {
            let published = publish(&artifacts, &dir, &name);
            let _ = std::fs::remove_dir_all(&dir);
            match published {
                Some(got) if got == sha => {
                    if let Err(e) = store.add_artifact_owners(&tenant, &[sha]) {
                        tracing::warn!(error = %e, "an input's owner was not recorded");
                    }
                }
                got => tracing::warn!(?got, want = %sha, "an input was not stored"),
            }
        });
    }
}

/// Moves the staged copy in `dir` into the artifacts store under its own name (so its MIME
/// type and first path are the upload's); returns the stored sha256. Blocking.
fn publish(
    artifacts: &crate::artifacts::Store,
    dir: &std::path::Path,
    name: &str,
) -> Option<String> {
    let named = dir.join(name);
    std::fs::rename(dir.join("content"), &named).ok()?;
    let fd: OwnedFd = std::fs::File::open(dir).ok()?.into();
    let change = Change {
        path: name.to_string(),
        change: "created".into(),
    };
    artifacts
        .collect(&fd, std::slice::from_ref(&change))
        .into_iter()
        .next()
        .map(|a| a.sha256)
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tap_hashes_everything_and_stages_within_the_limit() {
        let root = tempfile::tempdir().unwrap();
        for (max, staged) in [(100u64, true), (5, false)] {
            let (tx, rx) = mpsc::channel(4);
            let dir = root.path().join(format!("d{max}"));
            let writer = std::thread::spawn({
                let dir = dir.clone();
                move || tap_writer(rx, dir, max)
            });
            for part in ["hello ", "world"] {
                tx.blocking_send(Bytes::from(part)).unwrap();
            }
            drop(tx);
            let t = writer.join().unwrap().unwrap();
            assert_eq!(t.sha256, hex::encode(Sha256::digest(b"hello world")));
            assert_eq!(t.size, 11);
            assert_eq!(t.staged.is_some(), staged);
            assert_eq!(dir.exists(), staged);
            if staged {
                assert_eq!(std::fs::read(dir.join("content")).unwrap(), b"hello world");
                let store = crate::artifacts::Store::open(
                    root.path().join("artifacts"),
                    1 << 20,
                    Duration::from_secs(3600),
                )
                .unwrap();
                let got = publish(&store, &dir, "data.csv").unwrap();
                assert_eq!(got, t.sha256);
                let (size, mime, _) = store.open_artifact(&got).unwrap();
                assert_eq!((size, mime.as_str()), (11, "text/csv"));
            }
        }
    }

    #[test]
    fn stale_staging_is_swept() {
        let root = tempfile::tempdir().unwrap();
        let old = root.path().join("old");
        let new = root.path().join("new");
        std::fs::create_dir_all(&old).unwrap();
        std::fs::create_dir_all(&new).unwrap();
        std::fs::File::open(&old)
            .unwrap()
            .set_modified(SystemTime::now() - 2 * STALE_STAGING)
            .unwrap();
        sweep_staging(root.path());
        assert!(!old.exists() && new.exists());
    }
}
