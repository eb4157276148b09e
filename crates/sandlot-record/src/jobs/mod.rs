//! Durable jobs: an execution queued now and run later, whose result is fetched or streamed
//! when the client comes back.
//!
//! `POST /v1/sandboxes/{id}/jobs` decides the execute gate as the submitting key, writes the
//! job to the store (committed) and only then answers `202` with it. Jobs run in submission
//! order per sandbox (one worker task per sandbox with queued jobs) and at most
//! `SANDLOT_JOBS_CONCURRENCY` (default 4) at once over the whole server (a fair semaphore the
//! workers take a permit of per job). Queues are bounded (1000 per sandbox, 10000 in all):
//! past them a submission answers `429 job_queue_full` with `Retry-After`, never an unbounded
//! backlog. Each job runs through [`sandlot_runtime::Runtime::execute`], so it is recorded,
//! guarded and told (the `executed` lifecycle event) like any other execution.
//!
//! At start, a job the previous server left `running` had its execution cut off: it becomes
//! `lost` with the reason, or queued again when its submitter declared it idempotent; jobs
//! still `queued` run again in order. A sandbox that ends (deleted, expired, failed) fails
//! its queued jobs at once, saying so.
//!
//! A job whose execution a policy holds for review (`@review`) is accepted `held`, its
//! `reason` naming the review (`held for review rev_...: why`); it leaves its sandbox's line
//! (later jobs there do not wait for a person) and joins its end once a person approves, then
//! runs as any job does, its runner releasing the approved review once. Denied (by a person,
//! or by the review's timeout) → the job fails saying so (`review_denied`). Held jobs count
//! against the queue bounds; they survive a restart (a `kill -9` too): at start each is
//! waited on again from the review its reason names. Cancelling a held job ends it.
//!
//! Cancelling a queued job removes it; cancelling a running one interrupts the sandbox until
//! the job's execution ends (interrupt is per sandbox: a direct execution the job waits behind
//! at that moment is interrupted too), and the job ends `cancelled` with what it produced.

use super::{RecordContext, RecordError, Recording};
use axum::extract::{FromRef, State};
use axum::http::{header, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use sandlot_http::ApiConfig;
use sandlot_http::Caller;
use sandlot_http::HttpError;
use sandlot_http::{ApiJson, ApiPath, ApiQuery};
use sandlot_runtime::{now_rfc3339, Runtime};
use sandlot_service::api_error;
use sandlot_service::execution::{self, Dropped, ExecutionHandle, Step};

mod routes;
pub(crate) use routes::routes;
pub use routes::{JobList, SubmitJob};
use sandlot_store::Store;
use sandlot_types::{
    ApiError, EndState, ErrorCode, ExecuteRequest, Language, LifecycleKind, OutputEvent,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, Semaphore};

/// Jobs running at once over the whole server, unless `SANDLOT_JOBS_CONCURRENCY` says.
const DEFAULT_CONCURRENCY: usize = 4;
/// Jobs waiting on one sandbox, unless `SANDLOT_JOBS_QUEUE_PER_SANDBOX` says.
const DEFAULT_PER_SANDBOX: usize = 1000;
/// Jobs waiting over the whole server, unless `SANDLOT_JOBS_QUEUE_MAX` says.
const DEFAULT_GLOBAL: usize = 10_000;
/// Largest `metadata` of a job, as JSON.
const MAX_METADATA_BYTES: usize = 16 << 10;
/// Why a job running when the server stopped did not finish.
pub const STOPPED_REASON: &str = "the server stopped while it ran";
/// How long `DELETE` waits for a running job to end after interrupting it.
const CANCEL_WAIT: Duration = Duration::from_secs(10);
/// How long a job waits for its turn when the runtime's own queue on the sandbox is full.
const BUSY_RETRY_FOR: Duration = Duration::from_secs(60);

/// Job states, as the API and the store spell them.
pub mod state {
    pub const QUEUED: &str = "queued";
    pub const RUNNING: &str = "running";
    pub const SUCCEEDED: &str = "succeeded";
    pub const FAILED: &str = "failed";
    pub const CANCELLED: &str = "cancelled";
    pub const LOST: &str = "lost";
    /// Waiting for a person's review of its execution (issue 23).
    pub const HELD: &str = "held";
    pub const ALL: [&str; 7] = [QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED, LOST, HELD];
}

/// The reason of a held job: it names the review (read back at start, see
/// [`review_of_reason`]).
pub fn held_reason(review: &sandlot_store::ReviewRecord) -> String {
    format!("held for review {}: {}", review.id, review.reason)
}

/// The review a held job's reason names.
pub fn review_of_reason(reason: &str) -> Option<&str> {
    let rest = reason.strip_prefix("held for review ")?;
    let id = rest.split(':').next()?.trim();
    sandlot_service::reviews::valid_review_id(id).then_some(id)
}

/// The jobs component: the queues, the workers, and what they tell streams.
pub struct Jobs {
    inner: Arc<Inner>,
}

struct Limits {
    concurrency: usize,
    per_sandbox: usize,
    /// So that one tenant cannot fill the server's queue for every other.
    per_tenant: usize,
    global: usize,
}

struct Inner {
    /// Keys and policy: a job's key and the execute gate are checked again when it runs.
    gov: Option<Arc<sandlot_service::Governance>>,
    rt: Runtime,
    store: Arc<Store>,
    limits: Limits,
    permits: Arc<Semaphore>,
    sched: Mutex<Sched>,
    /// What happens to jobs, for `GET /v1/jobs/{id}/events`.
    told: broadcast::Sender<(Arc<str>, Told)>,
    stopping: AtomicBool,
}

#[derive(Default)]
struct Sched {
    /// Queued jobs by sandbox, in submission order.
    queues: HashMap<String, VecDeque<Queued>>,
    /// Sandboxes with a worker task.
    workers: HashSet<String>,
    /// Running jobs by id.
    running: HashMap<String, Running>,
    queued: usize,
    /// Jobs held for review, by id: their tenant (they count against the queue bounds).
    held: HashMap<String, String>,
}

#[derive(Clone)]
struct Queued {
    id: String,
    /// Whose job it is (the per-tenant bound counts these).
    tenant: String,
    /// The key that submitted it: the job runs as it, if it is still valid when its turn comes.
    key_id: String,
    request: ExecuteRequest,
}

struct Running {
    sandbox_id: String,
    /// Whose job it is (its `max_jobs` counts it).
    tenant: String,
    cancel: Arc<AtomicBool>,
}

/// What a job's stream is told.
#[derive(Clone, Debug)]
enum Told {
    Started,
    Output(OutputEvent),
    Ended,
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn new_job_id() -> String {
    sandlot_runtime::new_id("job_")
}

fn store_err(e: sandlot_store::StoreError) -> HttpError {
    HttpError::internal(format!("the job store: {e}"))
}

fn short(id: &str) -> String {
    id.chars().take(64).collect()
}

fn job_not_found(id: &str) -> HttpError {
    HttpError::new(ErrorCode::JobNotFound, format!("no job {}", short(id)))
}

impl Jobs {
    /// Recovers what the previous server left (see the module docs) and starts the workers.
    pub async fn start(ctx: &RecordContext) -> Result<Self, RecordError> {
        let limits = Limits {
            concurrency: env_usize("SANDLOT_JOBS_CONCURRENCY", DEFAULT_CONCURRENCY),
            per_sandbox: env_usize("SANDLOT_JOBS_QUEUE_PER_SANDBOX", DEFAULT_PER_SANDBOX),
            per_tenant: env_usize(
                "SANDLOT_JOBS_QUEUE_PER_TENANT",
                (env_usize("SANDLOT_JOBS_QUEUE_MAX", DEFAULT_GLOBAL) / 4).max(1),
            ),
            global: env_usize("SANDLOT_JOBS_QUEUE_MAX", DEFAULT_GLOBAL),
        };
        let inner = Arc::new(Inner {
            gov: ctx.gov.clone(),
            rt: ctx.rt.clone(),
            store: ctx.store.clone(),
            permits: Arc::new(Semaphore::new(limits.concurrency)),
            limits,
            sched: Mutex::default(),
            told: broadcast::channel(4096).0,
            stopping: AtomicBool::new(false),
        });
        let now = now_rfc3339();
        let (lost, requeued) = ctx.store.recover_jobs(STOPPED_REASON, &now, None)?;
        let open = ctx.store.open_jobs()?;
        if lost + requeued + open.len() > 0 {
            tracing::info!(lost, requeued, queued = open.len(), "jobs recovered");
        }
        for job in open {
            let (Some(id), Some(sb)) = (job["id"].as_str(), job["sandbox_id"].as_str()) else {
                continue;
            };
            let request = match serde_json::from_value::<ExecuteRequest>(job["request"].clone()) {
                Ok(r) => r,
                Err(e) => {
                    inner.end(
                        id,
                        state::FAILED,
                        None,
                        None,
                        &format!("unreadable job: {e}"),
                    );
                    continue;
                }
            };
            if ctx.rt.get_sandbox(sb).await.is_err() {
                inner.end(id, state::FAILED, None, None, &sandbox_ended_reason(sb));
                continue;
            }
            let queued = Queued {
                id: id.to_owned(),
                tenant: job["tenant"].as_str().unwrap_or_default().to_owned(),
                key_id: job["key_id"].as_str().unwrap_or_default().to_owned(),
                request: request.clone(),
            };
            if job["state"] == state::HELD {
                // Waited on again from the review its reason names.
                match job["reason"].as_str().and_then(review_of_reason) {
                    Some(review) => inner.watch_held(sb, queued, review.to_owned()),
                    None => {
                        inner.end(
                            id,
                            state::FAILED,
                            None,
                            None,
                            "held for a review it no longer names",
                        );
                    }
                }
                continue;
            }
            let mut s = lock(&inner.sched);
            s.queues
                .entry(sb.to_owned())
                .or_default()
                .push_back(Queued {
                    id: id.to_owned(),
                    tenant: job["tenant"].as_str().unwrap_or_default().to_owned(),
                    key_id: job["key_id"].as_str().unwrap_or_default().to_owned(),
                    request,
                });
            s.queued += 1;
        }
        let sandboxes: Vec<String> = lock(&inner.sched).queues.keys().cloned().collect();
        for sb in sandboxes {
            inner.ensure_worker(&sb);
        }
        // A sandbox that ends fails its queued jobs now rather than when their turn comes.
        let (ended_tx, mut ended_rx) = mpsc::unbounded_channel::<String>();
        ctx.rt.on_event(Arc::new(move |ev| {
            if matches!(
                ev.kind,
                LifecycleKind::Killed | LifecycleKind::Expired | LifecycleKind::Failed
            ) {
                let _ = ended_tx.send(ev.sandbox_id.clone());
            }
        }));
        let weak = Arc::downgrade(&inner);
        tokio::spawn(async move {
            while let Some(sb) = ended_rx.recv().await {
                let Some(inner) = weak.upgrade() else { break };
                inner.fail_queued(&sb, &sandbox_ended_reason(&sb));
            }
        });
        // Queue depth for `/metrics`, read at each scrape.
        let depth = |pick: fn((usize, usize)) -> usize, weak: std::sync::Weak<Inner>| {
            move || weak.upgrade().map_or(0, |i| pick(i.depth()) as i64)
        };
        let m = sandlot_telemetry::metrics();
        m.set_gauge_source(
            "jobs_queued",
            "Jobs waiting to run",
            depth(|d| d.0, Arc::downgrade(&inner)),
        );
        m.set_gauge_source(
            "jobs_running",
            "Jobs running",
            depth(|d| d.1, Arc::downgrade(&inner)),
        );
        Ok(Self { inner })
    }

    /// No job starts from now on; the ones running end with the runtime (and are recorded as
    /// stopped by the server, see [`STOPPED_REASON`]).
    pub async fn shutdown(&self) {
        self.inner.stopping.store(true, Ordering::SeqCst);
        self.inner.permits.close();
    }

    /// (queued, running) jobs now: the queue depth.
    pub fn depth(&self) -> (usize, usize) {
        self.inner.depth()
    }

    /// Reads the number of queued jobs without holding the component (the KPIs' sampler).
    pub fn queued_reader(&self) -> impl Fn() -> u64 + Send + Sync + 'static {
        let weak = Arc::downgrade(&self.inner);
        move || weak.upgrade().map_or(0, |i| i.depth().0 as u64)
    }
}

fn sandbox_ended_reason(sb: &str) -> String {
    format!("sandbox {sb} ended (deleted, expired or failed) before the job ran")
}

impl Inner {
    fn depth(&self) -> (usize, usize) {
        let s = lock(&self.sched);
        (s.queued, s.running.len())
    }

    /// Waits for the review holding job `job` of sandbox `sb` (in a task of its own):
    /// approved → the job is queued again at the end of its sandbox's line; denied → it
    /// fails with `review_denied`; cancelled meanwhile → nothing.
    fn watch_held(self: &Arc<Self>, sb: &str, job: Queued, review: String) {
        let Some(gov) = self.gov.clone() else {
            return;
        };
        lock(&self.sched)
            .held
            .insert(job.id.clone(), job.tenant.clone());
        let (inner, sb) = (self.clone(), sb.to_owned());
        tokio::spawn(async move {
            let wait = Duration::from_secs(sandlot_service::reviews::MAX_REVIEW_WAIT);
            let outcome = loop {
                if inner.stopping.load(Ordering::SeqCst) {
                    // Still held in the store: the next start waits on it again.
                    lock(&inner.sched).held.remove(&job.id);
                    return;
                }
                match gov.reviews.wait(&review, wait).await {
                    Ok(r) if r.state == "pending" => continue,
                    other => break other,
                }
            };
            lock(&inner.sched).held.remove(&job.id);
            match outcome {
                Ok(r) if r.state == "approved" => match inner.store.release_held_job(&job.id) {
                    Ok(true) => {
                        {
                            let mut s = lock(&inner.sched);
                            s.queues.entry(sb.clone()).or_default().push_back(job);
                            s.queued += 1;
                        }
                        inner.ensure_worker(&sb);
                    }
                    // Cancelled (or ended) while held.
                    Ok(false) => {}
                    Err(e) => {
                        tracing::error!(job = %job.id, error = %e, "a released job was not queued");
                    }
                },
                Ok(r) => {
                    let e = sandlot_service::reviews::review_denied(&r);
                    inner.end(
                        &job.id,
                        state::FAILED,
                        None,
                        None,
                        &format!("{} ({})", e.message, e.code.as_str()),
                    );
                }
                Err(e) => {
                    inner.end(
                        &job.id,
                        state::FAILED,
                        None,
                        None,
                        &format!("its review {review}: {} ({})", e.message, e.code.as_str()),
                    );
                }
            }
        });
    }

    /// Records the end of a job and tells its streams. False when it had already ended.
    fn end(
        &self,
        id: &str,
        st: &str,
        execution_id: Option<&str>,
        result: Option<&Value>,
        reason: &str,
    ) -> bool {
        let reason = (!reason.is_empty()).then_some(reason);
        let ended = match self
            .store
            .end_job(id, st, &now_rfc3339(), execution_id, result, reason)
        {
            Ok(ended) => ended,
            Err(e) => {
                tracing::error!(job = id, error = %e, "the end of a job was not recorded");
                false
            }
        };
        let _ = self.told.send((Arc::from(id), Told::Ended));
        ended
    }

    fn ensure_worker(self: &Arc<Self>, sb: &str) {
        if !lock(&self.sched).workers.insert(sb.to_owned()) {
            return;
        }
        let inner = self.clone();
        let sb = sb.to_owned();
        tokio::spawn(async move { inner.work(sb).await });
    }

    /// Runs sandbox `sb`'s jobs one after the other, each with a permit of the global bound;
    /// exits when its queue is empty (or the server stops).
    async fn work(self: Arc<Self>, sb: String) {
        loop {
            let permit = self.permits.clone().acquire_owned().await;
            let next = {
                let mut s = lock(&self.sched);
                let next = match permit {
                    Ok(_) if !self.stopping.load(Ordering::SeqCst) => {
                        s.queues.get_mut(&sb).and_then(VecDeque::pop_front)
                    }
                    _ => None,
                };
                match next {
                    Some(job) => {
                        s.queued -= 1;
                        let cancel = Arc::new(AtomicBool::new(false));
                        s.running.insert(
                            job.id.clone(),
                            Running {
                                sandbox_id: sb.clone(),
                                tenant: job.tenant.clone(),
                                cancel: cancel.clone(),
                            },
                        );
                        Some((job, cancel))
                    }
                    None => {
                        if s.queues.get(&sb).is_some_and(VecDeque::is_empty) {
                            s.queues.remove(&sb);
                        }
                        s.workers.remove(&sb);
                        None
                    }
                }
            };
            let Some((job, cancel)) = next else { return };
            self.run(&sb, job.clone(), &cancel).await;
            lock(&self.sched).running.remove(&job.id);
        }
    }

    async fn run(self: &Arc<Self>, sb: &str, job: Queued, cancel: &AtomicBool) {
        let job = &job;
        match self.store.start_job(&job.id, &now_rfc3339()) {
            Ok(true) => {}
            // Cancelled (or ended by its sandbox) between the queue and here.
            Ok(false) => return,
            Err(e) => {
                tracing::error!(job = %job.id, error = %e, "a job could not start");
                self.end(
                    &job.id,
                    state::FAILED,
                    None,
                    None,
                    &format!("the store: {e}"),
                );
                return;
            }
        }
        let _ = self.told.send((Arc::from(job.id.as_str()), Told::Started));
        if cancel.load(Ordering::SeqCst) {
            self.end(
                &job.id,
                state::CANCELLED,
                None,
                None,
                "cancelled before it ran",
            );
            return;
        }
        // One note for the gate and the execution: a policy that requires rollback for what it
        // allowed (issue 23) is noted by the gate and read by the execution.
        let note = sandlot_service::Note::default();
        match note.clone().scope(self.still_allowed(sb, job)).await {
            Ok(()) => {}
            // Held again (its approval was used by an identical job first, or the policy
            // now holds it): out of the line until a person decides.
            Err(Refused::Held(review)) => {
                match self.store.hold_job(&job.id, &held_reason(&review)) {
                    Ok(true) => self.watch_held(sb, job.clone(), review.id.clone()),
                    Ok(false) => {}
                    Err(e) => {
                        self.end(
                            &job.id,
                            state::FAILED,
                            None,
                            None,
                            &format!("the store: {e}"),
                        );
                    }
                }
                return;
            }
            Err(Refused::No(why)) => {
                self.end(&job.id, state::FAILED, None, None, &why);
                return;
            }
        }
        let outcome = note.scope(self.execute(sb, job)).await;
        let stopped = self.stopping.load(Ordering::SeqCst);
        match outcome {
            Ok(result) => {
                let value = serde_json::to_value(&result).unwrap_or(Value::Null);
                let (st, reason) = if cancel.load(Ordering::SeqCst) {
                    (
                        state::CANCELLED,
                        "cancelled while it ran: the execution was interrupted".to_owned(),
                    )
                } else if stopped && result.end_state == EndState::Killed {
                    return self.stopped(&job.id);
                } else if result.end_state == EndState::Ok {
                    (state::SUCCEEDED, String::new())
                } else {
                    (
                        state::FAILED,
                        format!("the execution ended {}", end_state_str(result.end_state)),
                    )
                };
                self.end(&job.id, st, Some(&result.id), Some(&value), &reason);
            }
            Err(_) if stopped => self.stopped(&job.id),
            Err(e) => {
                let st = if cancel.load(Ordering::SeqCst) {
                    state::CANCELLED
                } else {
                    state::FAILED
                };
                let reason = match e.code {
                    ErrorCode::SandboxNotFound | ErrorCode::SandboxGone => {
                        format!("{} ({})", sandbox_ended_reason(sb), e.message)
                    }
                    code => format!(
                        "the execution could not run: {} ({})",
                        e.message,
                        code.as_str()
                    ),
                };
                self.end(&job.id, st, None, None, &reason);
            }
        }
    }

    /// A job the server's shutdown cut off: `lost`, or queued again for the next start.
    fn stopped(&self, id: &str) {
        if let Err(e) = self
            .store
            .recover_jobs(STOPPED_REASON, &now_rfc3339(), Some(id))
        {
            tracing::error!(job = id, error = %e, "a stopped job was not recorded");
        }
        let _ = self.told.send((Arc::from(id), Told::Ended));
    }

    /// Runs the job's execution in a task of its own (nothing cancels it halfway), forwarding
    /// its output events to the job's streams.
    async fn execute(
        &self,
        sb: &str,
        job: &Queued,
    ) -> Result<sandlot_types::ExecutionResult, ApiError> {
        let deadline = tokio::time::Instant::now() + BUSY_RETRY_FOR;
        loop {
            let req = sandlot_service::trusted::apply_policy_rollback(job.request.clone());
            let (rt, id) = (self.rt.clone(), sb.to_owned());
            let mut run: ExecutionHandle<ApiError> = execution::start(
                move |tx| async move { rt.execute(&id, req, Some(tx)).await.map_err(api_error) },
                Dropped::RunOn,
            );
            let key: Arc<str> = Arc::from(job.id.as_str());
            let outcome = loop {
                match run.next().await {
                    Step::Event(ev) => {
                        let _ = self.told.send((key.clone(), Told::Output(ev)));
                    }
                    Step::Done(r) => break r,
                }
            };
            for ev in run.drain() {
                let _ = self.told.send((key.clone(), Told::Output(ev)));
            }
            match outcome {
                // The runtime's own queue on the sandbox is full of direct executions: wait
                // for room rather than fail a job that was accepted.
                Err(e)
                    if e.code == ErrorCode::SandboxBusy
                        && tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                other => return other,
            }
        }
    }

    /// Whether the job may still run when its turn comes: its key not revoked, and the
    /// execute gate (the policy in force now, which may have changed since the submission)
    /// still allowing it. Else why not.
    async fn still_allowed(&self, sb: &str, job: &Queued) -> Result<(), Refused> {
        let Some(g) = self.gov.as_deref() else {
            return Ok(());
        };
        let key = g
            .keys
            .list_keys(Some(&job.tenant))
            .into_iter()
            .find(|k| k.id == job.key_id);
        let Some(key) = key.filter(|k| k.revoked_at.is_none()) else {
            return Err(Refused::No(
                "the key that submitted it was revoked before it ran".into(),
            ));
        };
        let Some(tenant) = g.keys.tenant(&job.tenant) else {
            return Err(Refused::No(format!(
                "its tenant {} no longer exists",
                job.tenant
            )));
        };
        let who = sandlot_types::Principal {
            key_id: key.id,
            key_prefix: key.prefix,
            tenant: job.tenant.clone(),
            role: key.role,
            plan: tenant.plan,
        };
        // The service's execute gate, as every protocol's execution passes it; a sandbox that
        // ended since (or is missing) is why the job cannot run. Held for review: the
        // approved, unreleased review of this key and code releases it (once); else held.
        let ask = sandlot_service::ReviewAsk {
            wait: 0,
            review: None,
            retry: true,
        };
        let svc = sandlot_service::Service::new(&self.rt, Some(g));
        match ask
            .run(svc.gate_execute(&who, sb, &job.request.code, job.request.language))
            .await
        {
            Ok(sandlot_service::Started::Running(())) => Ok(()),
            Ok(sandlot_service::Started::Held(r)) => Err(Refused::Held(r)),
            Err(e) => Err(Refused::No(match e.code {
                ErrorCode::SandboxNotFound | ErrorCode::SandboxGone => sandbox_ended_reason(sb),
                _ => format!("the policy no longer allows it: {}", e.message),
            })),
        }
    }

    /// Fails every queued job of sandbox `sb`.
    fn fail_queued(&self, sb: &str, reason: &str) {
        let jobs = {
            let mut s = lock(&self.sched);
            let jobs = s.queues.remove(sb).unwrap_or_default();
            s.queued -= jobs.len();
            jobs
        };
        for job in jobs {
            self.end(&job.id, state::FAILED, None, None, reason);
        }
    }
}

/// Why a job may not run now.
enum Refused {
    /// Held for a person's review.
    Held(Box<sandlot_store::ReviewRecord>),
    /// Never: why.
    No(String),
}

fn end_state_str(e: EndState) -> &'static str {
    match e {
        EndState::Ok => "ok",
        EndState::Error => "with an error",
        EndState::Timeout => "by its timeout",
        EndState::Interrupted => "interrupted",
        EndState::Oom => "out of memory",
        EndState::Killed => "killed (the sandbox's processes died)",
    }
}

#[cfg(test)]
mod tests;
