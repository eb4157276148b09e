//! Human approval as a policy outcome: an action a `@review("why")` permit holds waits for a
//! person, for every protocol that can hold one.
//!
//! A gate whose decision [`needs_review`](sandlot_policy::Decision::needs_review) records a
//! review (durable, in the store) and either waits for it (the caller's `review_wait`, at most
//! [`MAX_REVIEW_WAIT`] seconds) or hands its id back at once (REST answers 202). An admin key
//! of the review's tenant (not the key that asked) or the operator approves or denies it; a
//! review no one decides within the timeout (`SANDLOT_REVIEW_TIMEOUT`, default an hour) is
//! denied. The held action runs only after approval and only once: whoever releases it
//! (the waiting caller, or a later re-submission of the same request naming the review) marks
//! the approved review used in the same store statement that checks it
//! ([`sandlot_store::Store::consume_review`]). A sandbox has no key, so nothing it does can
//! approve anything.
//!
//! Every decision on a review (approve, deny, timeout) is a journaled decision (gate
//! `review`) naming who decided, when and why; the request that decided it names that
//! decision in its audit record.

use crate::note::Note;
use sandlot_policy::{Decision, PolicyPrincipal};
use sandlot_store::{DecisionRecord, Journal, ReviewRecord, Store};
use sandlot_types::{ApiError, ErrorCode, Principal, Role, DEFAULT_TENANT};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// The longest a caller may wait for a review in one request, in seconds.
pub const MAX_REVIEW_WAIT: u64 = 300;
/// How long a review waits for a person before it is denied, unless
/// `SANDLOT_REVIEW_TIMEOUT` (seconds) says otherwise.
pub const DEFAULT_REVIEW_TIMEOUT: Duration = Duration::from_secs(3600);
/// The longest reason kept with a decision on a review, in bytes.
pub const MAX_REVIEW_REASON: usize = 4096;

/// What the caller of a gate that may hold asks: how long to wait for a person (0: answer at
/// once with the review), and the review an earlier call was held for (a re-submission).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReviewAsk {
    pub wait: u64,
    pub review: Option<String>,
    /// The caller cannot poll a review nor re-submit with its id (E2B, MCP): a call still
    /// pending after `wait` fails with `review_pending` naming the review, and an identical
    /// retry finds the review again by what it holds (tenant, key, gate, fingerprint): it
    /// waits on the pending one, or is released by the approved one, once.
    pub retry: bool,
}

tokio::task_local! {
    /// The ask of the request being handled (see [`ReviewAsk::run`]).
    static ASK: Held;
}

/// The ask in force for one call, and the review that held it (for the adapter's answer).
#[derive(Clone)]
struct Held {
    ask: ReviewAsk,
    review: Arc<Mutex<Option<ReviewRecord>>>,
}

/// How long a call that cannot answer 202 (E2B, MCP) waits for a person unless its caller
/// says otherwise: `SANDLOT_REVIEW_WAIT` seconds (at most [`MAX_REVIEW_WAIT`]), default 30.
pub fn default_review_wait() -> u64 {
    std::env::var("SANDLOT_REVIEW_WAIT")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(30)
        .min(MAX_REVIEW_WAIT)
}

impl ReviewAsk {
    /// The ask of a caller that waits then retries (E2B, MCP): `wait` seconds when it said
    /// (bounded by [`MAX_REVIEW_WAIT`]), else the server's default.
    pub fn retrying(wait: Option<u64>) -> ReviewAsk {
        ReviewAsk {
            wait: wait
                .unwrap_or_else(default_review_wait)
                .min(MAX_REVIEW_WAIT),
            review: None,
            retry: true,
        }
    }

    /// The ask in force for the call being handled, if its adapter set one: a gate that
    /// needs review holds only a call whose adapter can answer for it; without one, it
    /// refuses (403 `policy_denied`), as every gate did before holds.
    pub fn current() -> Option<ReviewAsk> {
        ASK.try_with(|h| h.ask.clone()).ok()
    }

    /// Notes the review that held the call being handled.
    pub(crate) fn note_held(r: &ReviewRecord) {
        let _ = ASK.try_with(|h| {
            *h.review.lock().unwrap_or_else(PoisonError::into_inner) = Some(r.clone());
        });
    }

    /// Runs `f` (one service call) with this ask in force for every gate it passes: its
    /// result, or [`crate::Started::Held`] with the review when a gate held it (the gate
    /// answered `review_pending`).
    pub async fn run<T, F>(self, f: F) -> Result<crate::Started<T>, ApiError>
    where
        F: std::future::Future<Output = Result<T, ApiError>>,
    {
        self.validate()?;
        let held = Held {
            ask: self,
            review: Arc::default(),
        };
        let slot = held.review.clone();
        match ASK.scope(held, f).await {
            Ok(v) => Ok(crate::Started::Running(v)),
            Err(e) if e.code == ErrorCode::ReviewPending => {
                match slot.lock().unwrap_or_else(PoisonError::into_inner).take() {
                    Some(r) => Ok(crate::Started::Held(Box::new(r))),
                    None => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Runs `f` with this ask in force; its result as it is (`review_pending` stays an
    /// error: the adapters that cannot answer 202).
    pub async fn scope<T, F>(self, f: F) -> Result<T, ApiError>
    where
        F: std::future::Future<Output = Result<T, ApiError>>,
    {
        self.validate()?;
        let held = Held {
            ask: self,
            review: Arc::default(),
        };
        ASK.scope(held, f).await
    }
}

/// The answer of a call still held when it stopped waiting, for a caller that cannot poll:
/// 409 `review_pending`, naming the review and what to do.
pub fn review_pending(r: &ReviewRecord) -> ApiError {
    ApiError::new(
        ErrorCode::ReviewPending,
        format!(
            "{} is held for review {} ({}); ask a person to approve it (POST /v1/reviews/{}/approve), \
             then retry exactly the same call: it runs once",
            r.gate, r.id, r.reason, r.id
        ),
    )
}

/// A review event on `GET /v1/events`: `review.created` or `review.decided`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ReviewEvent {
    /// `review.created` | `review.decided`.
    pub kind: &'static str,
    pub tenant: String,
    pub at: String,
    pub review: String,
    pub gate: String,
    /// `pending` | `approved` | `denied`.
    pub state: String,
    /// Who decided (a key id, or `timeout`), for `review.decided`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why it is held (the `@review` text).
    pub why: String,
}

impl ReviewEvent {
    fn of(kind: &'static str, r: &ReviewRecord) -> ReviewEvent {
        ReviewEvent {
            kind,
            tenant: r.tenant.clone(),
            at: r.decided_at.clone().unwrap_or_else(|| r.created_at.clone()),
            review: r.id.clone(),
            gate: r.gate.clone(),
            state: r.state.clone(),
            by: r.decided_by.clone(),
            reason: r.decision_reason.clone(),
            why: r.reason.clone(),
        }
    }
}

impl ReviewAsk {
    /// Checks the bounds: `wait` at most [`MAX_REVIEW_WAIT`], an id of the review shape.
    pub fn validate(&self) -> Result<(), ApiError> {
        if self.wait > MAX_REVIEW_WAIT {
            return Err(ApiError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "review_wait is {} s; at most {MAX_REVIEW_WAIT} s",
                    self.wait
                ),
            ));
        }
        if let Some(id) = &self.review {
            if !valid_review_id(id) {
                return Err(ApiError::new(
                    ErrorCode::InvalidArgument,
                    format!("review {:?} is not a review id", crate::error::short(id)),
                ));
            }
        }
        Ok(())
    }
}

/// `rev_` and 1 to 64 ASCII letters or digits.
pub fn valid_review_id(id: &str) -> bool {
    id.strip_prefix("rev_").is_some_and(|r| {
        !r.is_empty() && r.len() <= 64 && r.bytes().all(|b| b.is_ascii_alphanumeric())
    })
}

/// The answer of a gate that may hold.
#[derive(Debug)]
pub enum Gated {
    /// Allowed (by policy, or by an approved review released now for this call).
    Proceed,
    /// Held: the review to poll (`GET /v1/reviews/{id}`) and re-submit with.
    Held(Box<ReviewRecord>),
}

/// The held actions of the server.
pub struct Reviews {
    store: Arc<Store>,
    journal: Journal,
    /// Wakes the callers waiting on a review when it is decided.
    waiters: Mutex<HashMap<String, Arc<Notify>>>,
    timeout: Duration,
    /// Review events for `GET /v1/events` (a slow reader loses the oldest, told so).
    events: tokio::sync::broadcast::Sender<ReviewEvent>,
}

fn now() -> String {
    sandlot_runtime::now_rfc3339()
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn store_error(e: sandlot_store::StoreError) -> ApiError {
    ApiError::new(ErrorCode::Internal, format!("reviews: {e}"))
}

pub fn review_not_found(id: &str) -> ApiError {
    ApiError::new(
        ErrorCode::ReviewNotFound,
        format!("no review {}", crate::error::short(id)),
    )
}

/// The refusal of an action whose review was denied: by whom, when, why.
pub fn review_denied(r: &ReviewRecord) -> ApiError {
    ApiError::new(
        ErrorCode::ReviewDenied,
        format!(
            "{} held for review {} was denied by {} at {}: {}",
            r.gate,
            r.id,
            r.decided_by.as_deref().unwrap_or("?"),
            r.decided_at.as_deref().unwrap_or("?"),
            r.decision_reason.as_deref().unwrap_or("")
        ),
    )
}

impl Reviews {
    /// The reviews of `store`; the timeout from `SANDLOT_REVIEW_TIMEOUT` (seconds, > 0).
    pub fn new(store: Arc<Store>, journal: Journal) -> Reviews {
        let timeout = std::env::var("SANDLOT_REVIEW_TIMEOUT")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|s| *s > 0)
            .map_or(DEFAULT_REVIEW_TIMEOUT, Duration::from_secs);
        Reviews {
            store,
            journal,
            waiters: Mutex::new(HashMap::new()),
            timeout,
            events: tokio::sync::broadcast::channel(1024).0,
        }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Review events from now on (`review.created`, `review.decided`).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<ReviewEvent> {
        self.events.subscribe()
    }

    fn publish(&self, kind: &'static str, r: &ReviewRecord) {
        // No subscriber is not an error.
        let _ = self.events.send(ReviewEvent::of(kind, r));
    }

    /// The review an identical retry finds again (see [`ReviewAsk::retry`]).
    pub fn for_retry(
        &self,
        who: &PolicyPrincipal,
        gate: &str,
        fingerprint: &str,
    ) -> Result<Option<ReviewRecord>, ApiError> {
        self.expire();
        self.store
            .review_for_retry(&who.tenant, &who.key_id, gate, fingerprint)
            .map_err(store_error)
    }

    /// Records a new pending review of what `d` (decision `decision_id`) held for `who`.
    #[allow(clippy::too_many_arguments)]
    pub fn hold(
        &self,
        who: &PolicyPrincipal,
        d: &Decision,
        decision_id: &str,
        resource: String,
        fingerprint: String,
        request: serde_json::Value,
    ) -> Result<ReviewRecord, ApiError> {
        let expires = time::OffsetDateTime::now_utc() + self.timeout;
        let r = ReviewRecord {
            id: sandlot_runtime::new_id("rev_"),
            tenant: who.tenant.clone(),
            key_id: who.key_id.clone(),
            gate: d.gate.as_str().to_owned(),
            resource,
            fingerprint,
            request,
            reason: d.review.clone().unwrap_or_default(),
            policies: d.policies.clone(),
            decision_id: decision_id.to_owned(),
            state: "pending".into(),
            created_at: now(),
            expires_at: expires
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default(),
            expires_unix: expires.unix_timestamp(),
            decided_by: None,
            decided_at: None,
            decision_reason: None,
            consumed_at: None,
        };
        self.store.insert_review(&r).map_err(store_error)?;
        self.publish("review.created", &r);
        sandlot_telemetry::metrics().policy_decision("review_held", false);
        tracing::info!(review = %r.id, gate = %r.gate, tenant = %r.tenant, "action held for review");
        Ok(r)
    }

    /// Denies every pending review whose time ran out, journaling each.
    pub fn expire(&self) {
        match self.store.expire_reviews(unix_now(), &now()) {
            Ok(expired) => {
                for r in expired {
                    self.journal_decision(&r, None);
                    self.publish("review.decided", &r);
                    self.wake(&r.id);
                }
            }
            Err(e) => tracing::error!(error = %e, "reviews past their time not denied"),
        }
    }

    /// Review `id` as it stands now (a pending one past its time is denied first).
    pub fn get(&self, id: &str) -> Result<Option<ReviewRecord>, ApiError> {
        self.expire();
        self.store.get_review(id).map_err(store_error)
    }

    /// Review `id` if `who` may see it: its tenant's keys, and the operator. Anyone else
    /// gets the not-found answer, word for word.
    pub fn get_for(&self, who: &Principal, id: &str) -> Result<ReviewRecord, ApiError> {
        if !valid_review_id(id) {
            return Err(review_not_found(id));
        }
        match self.get(id)? {
            Some(r) if is_operator(who) || r.tenant == who.tenant => Ok(r),
            _ => Err(review_not_found(id)),
        }
    }

    /// Reviews `who` may see (its tenant's; all for the operator, or one tenant's when
    /// `tenant` is named), newest first.
    pub fn list_for(
        &self,
        who: &Principal,
        tenant: Option<&str>,
        state: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ReviewRecord>, ApiError> {
        self.expire();
        let tenant = if is_operator(who) {
            tenant
        } else {
            Some(who.tenant.as_str())
        };
        self.store
            .list_reviews(tenant, state, limit)
            .map_err(store_error)
    }

    /// Approves or denies review `id` for `who`, with `reason`. Who may: the operator, or an
    /// admin key of the review's tenant; never the key that asked (nor a sandbox, which has no
    /// key). Another tenant's review is not found; a decided one is 409 `review_decided`.
    pub fn decide(
        &self,
        who: &Principal,
        id: &str,
        approve: bool,
        reason: &str,
    ) -> Result<ReviewRecord, ApiError> {
        let r = self.get_for(who, id)?;
        if who.role != Role::Admin {
            return Err(ApiError::new(
                ErrorCode::Forbidden,
                "deciding a review needs an admin key of its tenant, or the operator's",
            ));
        }
        if who.key_id == r.key_id {
            return Err(ApiError::new(
                ErrorCode::Forbidden,
                "the key that asked for an action cannot decide its own review",
            ));
        }
        if reason.len() > MAX_REVIEW_REASON {
            return Err(ApiError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "the reason is {} bytes; at most {MAX_REVIEW_REASON}",
                    reason.len()
                ),
            ));
        }
        let decided = self
            .store
            .decide_review(id, approve, &who.key_id, &now(), reason)
            .map_err(store_error)?
            .ok_or_else(|| {
                ApiError::new(
                    ErrorCode::ReviewDecided,
                    format!("review {id} was decided already ({})", r.state),
                )
            })?;
        self.journal_decision(&decided, Some(who));
        self.publish("review.decided", &decided);
        self.wake(id);
        Ok(decided)
    }

    /// Marks approved review `r` used by this call: `Ok` for the one call that releases it.
    pub fn release(&self, r: &ReviewRecord) -> Result<(), ApiError> {
        if self
            .store
            .consume_review(&r.id, &now())
            .map_err(store_error)?
        {
            Ok(())
        } else {
            Err(ApiError::new(
                ErrorCode::ReviewDecided,
                format!(
                    "the action approved by review {} was released already",
                    r.id
                ),
            ))
        }
    }

    /// Waits until review `id` is decided, at most `wait` (and never past its timeout, when
    /// it is denied); the review as it stands then.
    pub async fn wait(&self, id: &str, wait: Duration) -> Result<ReviewRecord, ApiError> {
        let until = Instant::now() + wait;
        let notify = self.notify(id);
        loop {
            let notified = notify.notified();
            tokio::pin!(notified);
            // Registered before the state is read: a decision after the read wakes it.
            notified.as_mut().enable();
            let r = self.get(id)?.ok_or_else(|| review_not_found(id))?;
            if r.state != "pending" {
                return Ok(r);
            }
            let expiry = Duration::from_secs((r.expires_unix - unix_now()).max(0) as u64 + 1);
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(r);
            }
            let _ = tokio::time::timeout(left.min(expiry), notified).await;
        }
    }

    fn notify(&self, id: &str) -> Arc<Notify> {
        self.waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(id.to_owned())
            .or_default()
            .clone()
    }

    fn wake(&self, id: &str) {
        let n = self
            .waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
        if let Some(n) = n {
            n.notify_waiters();
        }
    }

    /// The decision on a review in the decision journal (gate `review`), noted in the
    /// request that made it (so its audit record names it). `by: None` is the timeout.
    fn journal_decision(&self, r: &ReviewRecord, by: Option<&Principal>) {
        let id = sandlot_runtime::new_id("dec_");
        let approved = r.state == "approved";
        Note::add_decision(&id);
        sandlot_telemetry::metrics().policy_decision("review", approved);
        self.journal.decision(DecisionRecord {
            id,
            at: r.decided_at.clone().unwrap_or_else(now),
            gate: "review".into(),
            key_id: Some(by.map_or_else(|| "timeout".to_owned(), |p| p.key_id.clone())),
            tenant: Some(r.tenant.clone()),
            resource: format!("Review::{:?}", r.id),
            allowed: approved,
            policies: r.policies.clone(),
            reason: format!(
                "{} {} by {}: {}",
                r.gate,
                if approved { "approved" } else { "denied" },
                r.decided_by.as_deref().unwrap_or("?"),
                r.decision_reason.as_deref().unwrap_or("")
            ),
            version: String::new(),
            latency_us: 0.0,
            detail: Some(serde_json::json!({
                "review": r.id,
                "held_by": r.decision_id,
                "asked_by": r.key_id,
                "decided_by": r.decided_by,
                "decided_at": r.decided_at,
                "decision": r.state,
                "reason": r.decision_reason,
            })),
        });
    }
}

fn is_operator(who: &Principal) -> bool {
    who.role == Role::Admin && who.tenant == DEFAULT_TENANT
}

/// sha256 over the parts, each length-prefixed (no two different lists hash alike).
pub fn fingerprint(parts: &[&[u8]]) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    hex::encode(h.finalize())
}
