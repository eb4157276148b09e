//! A sandbox's run as a bundle to replay: `GET /v1/sandboxes/{id}/bundle` (live or ended
//! sandboxes; scoped to the caller's tenant by the authentication layer, and checked again
//! here) streams a gzip-compressed tar archive, format version [`BUNDLE_VERSION`]:
//!
//! ```text
//! manifest.json        bundle_version, sandlot version, template name and version, policy
//!                      version, the sandbox's environment and seeds, the steps in order
//! steps/000001.json    one file per step: an input (path, sha256, size, where its content
//!                      is) or an execution (code, language, its whole result: stdout,
//!                      stderr, outputs, error, artifacts' hashes; template and policy)
//! inputs/<sha256>      each input's content, once per content, when the artifacts store
//!                      still holds it
//! ```
//!
//! The archive is written by a blocking task into a bounded channel the response streams
//! from, so a large bundle is never held in memory and a client that goes away stops it.
//! `sandlot replay` reads it (`crates/sandlot-cli/src/replay.rs`); a reader refuses a
//! `bundle_version` newer than it knows with `unsupported_bundle`.

use super::lineage::{self, Step};
use super::Recording;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use sandlot_http::Caller;
use sandlot_http::HttpError;
use sandlot_types::Sandbox;
use serde_json::{json, Value};
use std::io::Write;
use std::sync::Arc;
use tokio::sync::mpsc;

/// The bundle format this server writes (and the newest `sandlot replay` reads).
pub const BUNDLE_VERSION: u64 = 1;
/// The seed replay gives `random` and numpy's global generator before the first step.
pub const REPLAY_SEED: u64 = 0;

pub(crate) fn routes(rec: Arc<Recording>) -> Router {
    Router::new()
        .route("/v1/sandboxes/{id}/bundle", get(bundle))
        .with_state(rec)
}

/// `GET /v1/sandboxes/{id}/bundle`.
async fn bundle(
    State(rec): State<Arc<Recording>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, HttpError> {
    let sb = lineage::visible_sandbox(&rec, &caller, &id).await?;
    let steps = lineage::steps(&rec, &sb).await?;
    let policy_version = rec.ctx.gov.as_ref().map(|g| g.policy.version());
    let artifacts = rec.ctx.data_dir.join("artifacts");
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(8);
    let filename = format!("{}.bundle.tar.gz", sb.id);
    tokio::task::spawn_blocking(move || {
        let out = ChannelWriter { tx: tx.clone() };
        if let Err(e) = write_bundle(out, &sb, &steps, policy_version, &artifacts) {
            // A client that went away is not worth a warning.
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                tracing::warn!(sandbox = %sb.id, error = %e, "a bundle could not be written");
                let _ = tx.blocking_send(Err(e));
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    Ok((
        [
            (header::CONTENT_TYPE, "application/gzip".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{filename}\""),
            ),
        ],
        Body::from_stream(stream),
    )
        .into_response())
}

/// A `Write` into the response's channel, from a blocking task.
struct ChannelWriter {
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
}

impl Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.tx
            .blocking_send(Ok(Bytes::copy_from_slice(buf)))
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The manifest of a sandbox's bundle (its `steps` name the step files in order).
pub(crate) fn manifest(
    sb: &Sandbox,
    steps: &[Step],
    policy_version: Option<String>,
    created_at: &str,
) -> Value {
    let mut versions_seen: Vec<String> = Vec::new();
    let mut step_list = Vec::with_capacity(steps.len());
    for (i, s) in steps.iter().enumerate() {
        let kind = match s {
            Step::Input { .. } => "input",
            Step::Execution(e) => {
                if let Some(v) = &e.policy_version {
                    if !versions_seen.contains(v) {
                        versions_seen.push(v.clone());
                    }
                }
                "execution"
            }
        };
        step_list.push(json!({"index": i + 1, "kind": kind, "file": step_file(i + 1)}));
    }
    let env = &sb.env;
    json!({
        "bundle_version": BUNDLE_VERSION,
        "sandlot_version": env!("CARGO_PKG_VERSION"),
        "created_at": created_at,
        "sandbox": {
            "id": sb.id,
            "state": sb.state.as_str(),
            "created_at": sb.created_at,
            "ended_reason": sb.ended_reason,
            "tier": sb.tier,
            "limits": sb.limits,
            "forked_from": sb.forked_from,
            "from_snapshot": sb.from_snapshot,
        },
        "template": {"name": sb.template, "version": sb.template_version},
        "policy": {"version": policy_version, "versions_seen": versions_seen},
        // The creator's environment as the sandbox got it (the tenant's own record; secrets
        // are injected by name and never part of it).
        "environment": {"env": env, "network": sb.network},
        "seeds": {
            "PYTHONHASHSEED": env.get("PYTHONHASHSEED"),
            "TZ": env.get("TZ"),
            "LC_ALL": env.get("LC_ALL"),
            "random": null,
            "numpy": null,
            "replay_seed": REPLAY_SEED,
            "note": "the run's random and numpy generators were seeded by its own code or from \
                     entropy (null: not controlled); replay seeds both with replay_seed before \
                     the first step",
        },
        "steps": step_list,
    })
}

fn step_file(index: usize) -> String {
    format!("steps/{index:06}.json")
}

/// One step's file.
fn step_json(index: usize, s: &Step, has_content: &dyn Fn(&str) -> bool) -> Value {
    match s {
        Step::Input {
            path,
            sha256,
            size,
            at,
            stored,
        } => {
            let (content, missing) = if !*stored {
                (
                    None,
                    Some("larger than the artifact size limit: recorded by hash only"),
                )
            } else if !has_content(sha256) {
                (
                    None,
                    Some("no longer in the artifacts store (past its retention)"),
                )
            } else {
                (Some(format!("inputs/{sha256}")), None)
            };
            json!({"index": index, "kind": "input", "path": path, "sha256": sha256,
                   "size": size, "at": at, "content": content, "missing": missing})
        }
        Step::Execution(e) => {
            let r = &e.rec;
            json!({
                "index": index,
                "kind": "execution",
                "id": r.id,
                "language": r.language,
                "code": r.code,
                "started_at": r.started_at,
                "template": e.template,
                "template_version": e.template_version,
                "policy_version": e.policy_version,
                "decisions": e.decisions,
                "result": r.result,
            })
        }
    }
}

fn append_json<W: Write>(tar: &mut tar::Builder<W>, path: &str, v: &Value) -> std::io::Result<()> {
    let bytes = serde_json::to_vec_pretty(v).map_err(std::io::Error::other)?;
    append_bytes(tar, path, &bytes)
}

fn header(size: u64) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    h.set_size(size);
    h.set_mode(0o644);
    h.set_entry_type(tar::EntryType::Regular);
    h.set_mtime(0);
    h
}

fn append_bytes<W: Write>(
    tar: &mut tar::Builder<W>,
    path: &str,
    bytes: &[u8],
) -> std::io::Result<()> {
    let mut h = header(bytes.len() as u64);
    tar.append_data(&mut h, path, bytes)
}

/// Writes the whole bundle to `out`. Blocking.
fn write_bundle(
    out: impl Write,
    sb: &Sandbox,
    steps: &[Step],
    policy_version: Option<String>,
    artifacts: &std::path::Path,
) -> std::io::Result<()> {
    let gz = flate2::write::GzEncoder::new(
        std::io::BufWriter::with_capacity(64 << 10, out),
        flate2::Compression::default(),
    );
    let mut tar = tar::Builder::new(gz);
    let has_content =
        |sha: &str| sandlot_runtime::artifacts::valid_sha256(sha) && artifacts.join(sha).is_file();
    let created_at = sandlot_runtime::now_rfc3339();
    append_json(
        &mut tar,
        "manifest.json",
        &manifest(sb, steps, policy_version, &created_at),
    )?;
    let mut written = std::collections::HashSet::new();
    for (i, s) in steps.iter().enumerate() {
        let v = step_json(i + 1, s, &has_content);
        append_json(&mut tar, &step_file(i + 1), &v)?;
        if let Some(content) = v["content"].as_str() {
            let sha = v["sha256"].as_str().unwrap_or_default();
            if !written.insert(sha.to_owned()) {
                continue;
            }
            // Checked above; a content swept since is left out (the reader says so).
            let Ok(f) = std::fs::File::open(artifacts.join(sha)) else {
                continue;
            };
            let size = f.metadata()?.len();
            let mut h = header(size);
            tar.append_data(&mut h, content, f.take_exact(size))?;
        }
    }
    let gz = tar.into_inner()?;
    let mut buffered = gz.finish()?;
    buffered.flush()
}

/// `Read::take` that fails instead of ending early when the file shrank under it (a tar
/// entry must have exactly its declared size).
trait TakeExact: std::io::Read + Sized {
    fn take_exact(self, n: u64) -> Exact<Self> {
        Exact {
            inner: self,
            left: n,
        }
    }
}
impl<R: std::io::Read> TakeExact for R {}

struct Exact<R> {
    inner: R,
    left: u64,
}

impl<R: std::io::Read> std::io::Read for Exact<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let max = buf.len().min(self.left as usize);
        let n = self.inner.read(&mut buf[..max])?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "an input's content shrank while it was bundled",
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests;
