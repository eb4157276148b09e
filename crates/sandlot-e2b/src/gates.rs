//! The policy gates on what E2B's routes do to a sandbox: `execute` (the interpreter's
//! `/execute`, process `Start`), `read_file` (`GET /files`, filesystem `Stat`/`ListDir`) and
//! `write_file` (`POST /files`, filesystem `MakeDir`/`Move`/`Remove`), decided and recorded by
//! the server's [`Governance`] exactly as `/v1`'s are, so no interface is a way round the
//! policy. Downloads are scanned by the output guardrails as `/v1`'s are.
//!
//! Who is decided for: the API key the request carries when that key's tenant owns the
//! sandbox; a per-sandbox token is not a key, so a request holding one is decided for the
//! sandbox's tenant as a member ([`Governance::sandbox_principal`]).
//!
//! Paths reach the policy as `/workspace/<path>` with `.` and empty components dropped (the
//! runtime ignores them too), so `./secret` or `a//b` are decided as the file they name.
//! Without governance (`SANDLOT_AUTH=off`) every gate is open and nothing is fetched.

use crate::Ctx;
use axum::http::HeaderMap;
use sandlot_runtime::RuntimeError;
use sandlot_service::{Governance, ReviewAsk};
use sandlot_types::{ApiError, Language, Principal, Sandbox};
use std::sync::Arc;

/// Downloads scanned by the guardrails at most: `/v1`'s bound (larger files go out as they
/// are, documented).
pub(crate) const MAX_SCANNED_DOWNLOAD: u64 = 16 << 20;

/// The header an E2B client may send to say how long a call a policy holds for review waits
/// for a person (seconds, at most `MAX_REVIEW_WAIT`); absent, the server's
/// `SANDLOT_REVIEW_WAIT` (default 30 s).
pub const REVIEW_WAIT_HEADER: &str = "x-sandlot-review-wait";

/// The ask of an E2B call: E2B's SDKs cannot poll a review, so a held call waits (the
/// header's seconds, or the server's default) and, still pending, fails with 409
/// `review_pending` naming the review; the identical call retried after approval is
/// released once (`sandlot_service::ReviewAsk::retry`). A header that is not a number of
/// seconds within the bound is 400.
pub(crate) fn review_ask(headers: &HeaderMap) -> Result<ReviewAsk, crate::error::Failure> {
    let wait = match headers.get(REVIEW_WAIT_HEADER) {
        None => None,
        Some(v) => match v.to_str().ok().and_then(|v| v.trim().parse::<u64>().ok()) {
            Some(w) if w <= sandlot_service::reviews::MAX_REVIEW_WAIT => Some(w),
            _ => {
                return Err(crate::error::Failure::bad_request(format!(
                    "{REVIEW_WAIT_HEADER} must be a number of seconds, at most {}",
                    sandlot_service::reviews::MAX_REVIEW_WAIT
                )))
            }
        },
    };
    Ok(ReviewAsk::retrying(wait))
}

/// The gates of one request on one sandbox.
pub(crate) struct Gate {
    governed: Option<Governed>,
    /// The wait for a person asked by the request (see [`review_ask`]); `Err` when the header
    /// was malformed (the execute gate then refuses with 400).
    ask: Result<ReviewAsk, crate::error::Failure>,
}

struct Governed {
    gov: Arc<Governance>,
    who: Principal,
    sandbox: Sandbox,
}

impl Gate {
    /// The gates for sandbox `id` as `headers` authenticate (already checked by
    /// `auth::check_sandbox`). Fails as the runtime does for a sandbox that is not there.
    pub(crate) async fn open(
        ctx: &Ctx,
        headers: &HeaderMap,
        id: &str,
    ) -> Result<Gate, RuntimeError> {
        if ctx.gov.is_none() {
            return Ok(Gate {
                governed: None,
                ask: Ok(ReviewAsk::default()),
            });
        }
        let sandbox = ctx.rt.get_sandbox(id).await?;
        Ok(Self::with_sandbox(ctx, headers, sandbox))
    }

    /// [`Gate::open`] for a sandbox already fetched.
    pub(crate) fn with_sandbox(ctx: &Ctx, headers: &HeaderMap, sandbox: Sandbox) -> Gate {
        let Some(gov) = ctx.gov.clone() else {
            return Gate {
                governed: None,
                ask: Ok(ReviewAsk::default()),
            };
        };
        let who = match crate::auth::principal(ctx, headers) {
            Ok(p) if p.tenant == sandbox.tenant => p,
            _ => gov.sandbox_principal(&sandbox),
        };
        Gate {
            governed: Some(Governed { gov, who, sandbox }),
            ask: review_ask(headers),
        }
    }

    /// The `execute` gate for `code` in `language` (in interpreter context `context`): held
    /// for review as [`review_ask`] says.
    pub(crate) async fn execute(
        &self,
        code: &str,
        language: Language,
        context: Option<&str>,
    ) -> Result<(), ApiError> {
        match &self.governed {
            Some(g) => {
                g.not_contained()?;
                let ask = self.ask.clone().map_err(|f| {
                    ApiError::new(sandlot_types::ErrorCode::InvalidArgument, f.message)
                })?;
                ask.scope(
                    g.gov
                        .gate_execute_settled(&g.who, &g.sandbox, code, language, context),
                )
                .await
            }
            None => Ok(()),
        }
    }

    /// The `read_file` gate for workspace-relative `rel`.
    pub(crate) fn read(&self, rel: &str) -> Result<(), ApiError> {
        self.file(rel, None)
    }

    /// The `write_file` gate for `bytes` into workspace-relative `rel`.
    pub(crate) fn write(&self, rel: &str, bytes: u64) -> Result<(), ApiError> {
        self.file(rel, Some(bytes))
    }

    fn file(&self, rel: &str, write: Option<u64>) -> Result<(), ApiError> {
        match &self.governed {
            Some(g) => {
                if write.is_some() {
                    g.not_contained()?;
                }
                // The governance puts `rel` in the policy's form (`gates::policy_path`).
                g.gov.gate_file(&g.who, &g.sandbox, rel, write)
            }
            None => Ok(()),
        }
    }

    /// Whether downloads pass through the guardrails (the server has governance).
    pub(crate) fn scans_downloads(&self) -> bool {
        self.governed.is_some()
    }
}

impl Governed {
    /// A contained sandbox takes no more work nor writes, whatever the route: the runtime
    /// refuses executions, uploads and deletions itself, but not envd's `MakeDir` and `Move`
    /// (they once went through), so every E2B write and execution is refused here too.
    fn not_contained(&self) -> Result<(), ApiError> {
        match self.sandbox.contained {
            Some(_) => Err(sandlot_service::api_error(RuntimeError::Contained {
                id: self.sandbox.id.clone(),
            })),
            None => Ok(()),
        }
    }
}
