//! Releasing held output: an output gate (`output_withhold`, `output_contain`,
//! `output_redact`) whose decision a `@review` permit holds withholds the output as before, and
//! the execution's original result (before the guardrails) is kept on the server's disk
//! (`<data>/held-output/<execution>.json`, written whole and synced before the caller hears of
//! it, at most [`MAX_HELD_OUTPUT`] bytes) with a review of it. The caller's execution says
//! `output_held: {"review": "rev_..."}`. Once a person approves,
//! `GET /v1/sandboxes/{id}/executions/{eid}/held-output` answers the original result (the
//! review is marked used the first time); pending, 202 with the review; denied (by a person or
//! by the timeout), the kept copy is deleted and the answer is 403 `review_denied`: it stays
//! withheld. The hold and the decision are journaled (gate of the output, then `review`); the
//! release is a request like any other, audited.
//!
//! The review's summary shows the sandbox, the execution and the sizes, never the output: the
//! tenant's keys read reviews, and the output is what is withheld from them.

use crate::governance::Governance;
use crate::reviews::{fingerprint, review_denied};
use sandlot_store::ReviewRecord;
use sandlot_types::{ApiError, ErrorCode, ExecutionResult, Principal, Sandbox};
use serde::{Deserialize, Serialize};
use std::io::Write;

/// The largest result kept for a release (as JSON); a larger one stays withheld, unkept.
pub const MAX_HELD_OUTPUT: usize = 16 << 20;
/// What is kept on disk for one execution.
#[derive(Serialize, Deserialize)]
struct Kept {
    review: String,
    tenant: String,
    sandbox_id: String,
    result: ExecutionResult,
}

/// What a read of held output answers.
pub enum Held {
    /// Not decided yet: the review.
    Pending(Box<ReviewRecord>),
    /// Approved: the original result.
    Released(Box<ExecutionResult>),
}

/// An execution id that can name a file: 1 to 128 ASCII letters, digits, `_` or `-`.
fn valid_execution_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn no_held_output(eid: &str) -> ApiError {
    ApiError::new(
        ErrorCode::ExecutionNotFound,
        format!("no held output of execution {}", crate::error::short(eid)),
    )
}

impl Governance {
    /// Keeps `original` (execution `exec_id` of `sandbox`) for a release when a held decision
    /// withheld its output (`withheld`: not contained, whose output is never released); the
    /// review's id.
    pub(crate) fn hold_output(
        &self,
        sandbox: &Sandbox,
        exec_id: &str,
        withheld: bool,
        original: &ExecutionResult,
    ) -> Option<String> {
        let (d, pp) = self.held_outputs.take(exec_id)?;
        if !withheld {
            return None;
        }
        let dir = self.held_output_dir.as_ref()?;
        if !valid_execution_id(exec_id) {
            return None;
        }
        let bytes = serde_json::to_vec(original).ok()?;
        if bytes.len() > MAX_HELD_OUTPUT {
            tracing::warn!(
                execution = exec_id,
                bytes = bytes.len(),
                "held output too large to keep: it stays withheld"
            );
            return None;
        }
        let resource = format!("Output::\"{}/{exec_id}\"", sandbox.id);
        let decision = self.record(
            &pp,
            resource.clone(),
            &d,
            Some(serde_json::json!({"held_output": exec_id})),
        );
        let fp = fingerprint(&[b"output", sandbox.id.as_bytes(), exec_id.as_bytes()]);
        let summary = serde_json::json!({
            "sandbox": sandbox.id,
            "execution": exec_id,
            "bytes": bytes.len(),
            "stdout_bytes": original.stdout.len(),
            "stderr_bytes": original.stderr.len(),
        });
        let review = match self.reviews.hold(&pp, &d, &decision, resource, fp, summary) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(execution = exec_id, error = %e.message, "held output: no review");
                return None;
            }
        };
        let kept = Kept {
            review: review.id.clone(),
            tenant: sandbox.tenant.clone(),
            sandbox_id: sandbox.id.clone(),
            result: original.clone(),
        };
        match write_synced(dir, exec_id, &kept) {
            Ok(()) => Some(review.id),
            Err(e) => {
                tracing::error!(execution = exec_id, error = %e, "held output not kept: it stays withheld");
                None
            }
        }
    }

    /// The held output of execution `eid` of sandbox `sandbox_id`, for `who` (its tenant's
    /// keys; anyone else is answered as if there were none).
    pub fn held_output(
        &self,
        who: &Principal,
        sandbox_id: &str,
        eid: &str,
    ) -> Result<Held, ApiError> {
        let Some(dir) = &self.held_output_dir else {
            return Err(no_held_output(eid));
        };
        if !valid_execution_id(eid) {
            return Err(no_held_output(eid));
        }
        let path = dir.join(format!("{eid}.json"));
        let kept: Kept = match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| {
                ApiError::new(ErrorCode::Internal, format!("held output unreadable: {e}"))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(no_held_output(eid)),
            Err(e) => {
                return Err(ApiError::new(
                    ErrorCode::Internal,
                    format!("held output unreadable: {e}"),
                ))
            }
        };
        if kept.tenant != who.tenant || kept.sandbox_id != sandbox_id {
            return Err(no_held_output(eid));
        }
        let review = self
            .reviews
            .get(&kept.review)?
            .ok_or_else(|| no_held_output(eid))?;
        match review.state.as_str() {
            "approved" => {
                // Released: marked used the first time (a later read answers it again).
                if review.consumed_at.is_none() {
                    let _ = self.reviews.release(&review);
                }
                Ok(Held::Released(Box::new(kept.result)))
            }
            "denied" => {
                // Dropped: it stays withheld for good.
                let _ = std::fs::remove_file(&path);
                Err(review_denied(&review))
            }
            _ => Ok(Held::Pending(Box::new(review))),
        }
    }

    /// Drops the kept output a denied review held (called when a review is denied).
    pub fn drop_denied_output(&self, r: &ReviewRecord) {
        if r.state != "denied" || !r.gate.starts_with("output_") {
            return;
        }
        let Some(dir) = &self.held_output_dir else {
            return;
        };
        if let Some(exec) = r.request["execution"]
            .as_str()
            .filter(|e| valid_execution_id(e))
        {
            let _ = std::fs::remove_file(dir.join(format!("{exec}.json")));
        }
    }
}

/// Writes `kept` as `<dir>/<exec>.json` whole: a temporary file synced, then renamed.
fn write_synced(dir: &std::path::Path, exec: &str, kept: &Kept) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{exec}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&serde_json::to_vec(kept).map_err(std::io::Error::other)?)?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(format!("{exec}.json")))?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::valid_execution_id;

    #[test]
    fn only_plain_execution_ids_name_files() {
        assert!(valid_execution_id("ex_abc123"));
        assert!(valid_execution_id("exec-1"));
        for bad in ["", "../x", "a/b", "a.json", ".", "..", &"x".repeat(129)] {
            assert!(!valid_execution_id(bad), "{bad:?}");
        }
    }
}
