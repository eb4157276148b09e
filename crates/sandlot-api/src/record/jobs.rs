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
//! Cancelling a queued job removes it; cancelling a running one interrupts the sandbox until
//! the job's execution ends (interrupt is per sandbox: a direct execution the job waits behind
//! at that moment is interrupted too), and the job ends `cancelled` with what it produced.

use super::{RecordContext, RecordError, Recording};
use crate::error::HttpError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::govern::Caller;
use crate::ApiConfig;
use axum::extract::{FromRef, State};
use axum::http::{header, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use sandlot_runtime::{now_rfc3339, Runtime};
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
    pub const ALL: [&str; 6] = [QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED, LOST];
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
    gov: Option<Arc<crate::govern::Governance>>,
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
}

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
    let mut b = [0u8; 12];
    getrandom::fill(&mut b).expect("the kernel's random source works");
    format!("job_{}", hex::encode(b))
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
}

fn sandbox_ended_reason(sb: &str) -> String {
    format!("sandbox {sb} ended (deleted, expired or failed) before the job ran")
}

impl Inner {
    fn depth(&self) -> (usize, usize) {
        let s = lock(&self.sched);
        (s.queued, s.running.len())
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
            self.run(&sb, &job, &cancel).await;
            lock(&self.sched).running.remove(&job.id);
        }
    }

    async fn run(&self, sb: &str, job: &Queued, cancel: &AtomicBool) {
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
        if let Err(why) = self.still_allowed(sb, job).await {
            self.end(&job.id, state::FAILED, None, None, &why);
            return;
        }
        let outcome = self.execute(sb, job).await;
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
            let (tx, mut rx) = mpsc::unbounded_channel();
            let (rt, id, req) = (self.rt.clone(), sb.to_owned(), job.request.clone());
            let run = tokio::spawn(async move { rt.execute(&id, req, Some(tx)).await });
            let key: Arc<str> = Arc::from(job.id.as_str());
            while let Some(ev) = rx.recv().await {
                let _ = self.told.send((key.clone(), Told::Output(ev)));
            }
            let outcome = match run.await {
                Ok(r) => r.map_err(crate::error::api_error),
                Err(e) => Err(ApiError::new(
                    ErrorCode::Internal,
                    format!("the execution task failed: {e}"),
                )),
            };
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
    async fn still_allowed(&self, sb: &str, job: &Queued) -> Result<(), String> {
        let Some(g) = self.gov.as_deref() else {
            return Ok(());
        };
        let key = g
            .keys
            .list_keys(Some(&job.tenant))
            .into_iter()
            .find(|k| k.id == job.key_id);
        let Some(key) = key.filter(|k| k.revoked_at.is_none()) else {
            return Err("the key that submitted it was revoked before it ran".into());
        };
        let Some(tenant) = g.keys.tenant(&job.tenant) else {
            return Err(format!("its tenant {} no longer exists", job.tenant));
        };
        let sandbox = self
            .rt
            .get_sandbox(sb)
            .await
            .map_err(|_| sandbox_ended_reason(sb))?;
        let who = sandlot_types::Principal {
            key_id: key.id,
            key_prefix: key.prefix,
            tenant: job.tenant.clone(),
            role: key.role,
            plan: tenant.plan,
        };
        g.gate(
            &who,
            sandlot_policy::GateRequest::Execute {
                sandbox: crate::gates::sandbox_ref(&sandbox),
                code_bytes: job.request.code.len() as u64,
                language: job.request.language.as_str().into(),
            },
            format!("Sandbox::{sb:?}"),
        )
        .map_err(|e| format!("the policy no longer allows it: {}", e.0.message))
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

// ---------------------------------------------------------------------------------------------
// Routes.

#[derive(Clone)]
struct St {
    rec: Arc<Recording>,
    cfg: Arc<ApiConfig>,
}

impl FromRef<St> for Arc<ApiConfig> {
    fn from_ref(st: &St) -> Self {
        st.cfg.clone()
    }
}

pub(crate) fn routes(rec: Arc<Recording>) -> Router {
    let st = St {
        rec,
        // The runtime's default limits: `sandlot serve` does not change the code limit.
        cfg: Arc::new(ApiConfig::default()),
    };
    Router::new()
        .route("/v1/sandboxes/{id}/jobs", post(submit).get(list))
        .route("/v1/jobs/{id}", get(show).delete(cancel))
        .route("/v1/jobs/{id}/events", get(events))
        .with_state(st)
}

/// `POST /v1/sandboxes/{id}/jobs`: an execution request, plus what the job is.
#[derive(Debug, Deserialize)]
pub struct SubmitJob {
    pub code: String,
    #[serde(default)]
    pub language: Language,
    #[serde(default)]
    pub timeout: Option<f64>,
    #[serde(default)]
    pub context: Option<String>,
    /// Run it again after a server restart cut it off (else it is `lost`).
    #[serde(default)]
    pub idempotent: bool,
    /// The client's own labels, returned with the job.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
}

/// `GET /v1/sandboxes/{id}/jobs` response.
#[derive(Debug, Serialize, Deserialize)]
pub struct JobList {
    pub jobs: Vec<Value>,
    /// Pass as `after` for the next page; absent on the last one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_after: Option<i64>,
}

#[derive(Debug, Deserialize, Default)]
struct ListQuery {
    state: Option<String>,
    after: Option<i64>,
    limit: Option<u32>,
}

async fn submit(
    State(st): State<St>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<SubmitJob>,
) -> Result<Response, HttpError> {
    let ctx = &st.rec.ctx;
    let jobs = &st.rec.jobs.inner;
    if body.code.len() > st.cfg.max_code_bytes {
        return Err(HttpError::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "the code is {} bytes; this server accepts at most {} bytes",
                body.code.len(),
                st.cfg.max_code_bytes
            ),
        ));
    }
    if let Some(t) = body.timeout {
        let max = ctx.rt.max_exec_timeout();
        if !(t.is_finite() && t > 0.0 && t <= max) {
            return Err(HttpError::new(
                ErrorCode::InvalidArgument,
                format!("timeout must be a number of seconds above 0 and at most {max}"),
            ));
        }
    }
    let metadata = Value::Object(body.metadata.unwrap_or_default());
    if metadata.to_string().len() > MAX_METADATA_BYTES {
        return Err(HttpError::new(
            ErrorCode::InvalidArgument,
            format!("metadata is larger than {MAX_METADATA_BYTES} bytes as JSON"),
        ));
    }
    // Unknown (or another tenant's, refused by the path's scoping already) sandbox: 404.
    let sandbox = ctx.rt.get_sandbox(&id).await?;
    if let Some(g) = ctx.gov.as_deref() {
        g.gate(
            &caller.0,
            sandlot_policy::GateRequest::Execute {
                sandbox: crate::gates::sandbox_ref(&sandbox),
                code_bytes: body.code.len() as u64,
                language: body.language.as_str().into(),
            },
            format!("Sandbox::{id:?}"),
        )?;
    }
    if jobs.stopping.load(Ordering::SeqCst) {
        return Err(HttpError::new(
            ErrorCode::JobQueueFull,
            "the server is shutting down; retry in 5 s",
        ));
    }
    let request = ExecuteRequest {
        code: body.code,
        language: body.language,
        timeout: body.timeout,
        stream: false,
        context: body.context,
    };
    let job_id = new_job_id();
    let job = json!({
        "id": job_id,
        "sandbox_id": id,
        "tenant": caller.tenant(),
        "key_id": caller.0.key_id,
        "state": state::QUEUED,
        "request": request,
        "metadata": metadata,
        "idempotent": body.idempotent,
        "submitted_at": now_rfc3339(),
    });
    {
        let mut s = lock(&jobs.sched);
        let on_sandbox = s.queues.get(&id).map_or(0, VecDeque::len);
        let of_tenant = s
            .queues
            .values()
            .flatten()
            .filter(|q| q.tenant == caller.tenant())
            .count();
        // The tenant's share of the server's job slots: its queued and running jobs, counted
        // under the same lock the insertion below takes.
        if let Some(gov) = ctx.gov.as_deref() {
            if let Some(tenant) = crate::shares::capped(gov, &caller.0).map_err(HttpError)? {
                let running = s
                    .running
                    .values()
                    .filter(|r| r.tenant == tenant.name)
                    .count();
                sandlot_tenancy::check_share(
                    &tenant,
                    sandlot_tenancy::Share::Jobs,
                    (of_tenant + running) as u64,
                )
                .map_err(|e| HttpError(crate::shares::quota_error(e)))?;
            }
        }
        let full = [
            (on_sandbox, jobs.limits.per_sandbox, "this sandbox"),
            (of_tenant, jobs.limits.per_tenant, "this tenant's sandboxes"),
            (s.queued, jobs.limits.global, "this server"),
        ]
        .into_iter()
        .find(|(waiting, limit, _)| waiting >= limit);
        if let Some((waiting, limit, which)) = full {
            // A rough time for a slot to free: a second per job a permit runs ahead of it.
            let retry = (waiting / jobs.limits.concurrency.max(1)).clamp(1, 60);
            return Err(HttpError::new(
                ErrorCode::JobQueueFull,
                format!("{limit} jobs already wait on {which}; retry in {retry} s"),
            ));
        }
        // Committed before the answer, under the lock so that queue order is store order.
        jobs.store.insert_job(&job).map_err(store_err)?;
        s.queues.entry(id.clone()).or_default().push_back(Queued {
            id: job_id.clone(),
            tenant: caller.tenant().to_owned(),
            key_id: caller.0.key_id.clone(),
            request,
        });
        s.queued += 1;
    }
    jobs.ensure_worker(&id);
    let stored = jobs
        .store
        .get_job(&job_id)
        .map_err(store_err)?
        .unwrap_or(job);
    Ok((
        StatusCode::ACCEPTED,
        [(header::LOCATION, format!("/v1/jobs/{job_id}"))],
        Json(view(stored)),
    )
        .into_response())
}

/// A job as the API shows it (the store's wire shape, without who-knows-what internals).
fn view(mut job: Value) -> Value {
    if let Some(m) = job.as_object_mut() {
        m.remove("tenant");
    }
    job
}

/// The caller's job `id`; another tenant's is reported exactly as a missing one.
fn owned(st: &St, caller: &Caller, id: &str) -> Result<Value, HttpError> {
    match st.rec.ctx.store.get_job(id).map_err(store_err)? {
        Some(job) if job["tenant"].as_str() == Some(caller.tenant()) => Ok(job),
        _ => Err(job_not_found(id)),
    }
}

async fn show(
    State(st): State<St>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Value>, HttpError> {
    owned(&st, &caller, &id).map(|j| Json(view(j)))
}

async fn list(
    State(st): State<St>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<JobList>, HttpError> {
    if let Some(s) = q.state.as_deref() {
        if !state::ALL.contains(&s) {
            return Err(HttpError::new(
                ErrorCode::InvalidArgument,
                format!("state must be one of {}", state::ALL.join(", ")),
            ));
        }
    }
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    // The sandbox's tenant was checked by the path's scoping; an unknown one has no jobs but
    // still answers 404, as for any other sandbox route.
    if st.rec.ctx.rt.sandbox_tenant(&id).is_none() {
        return Err(crate::govern::sandbox_not_found(&id));
    }
    let jobs = st
        .rec
        .ctx
        .store
        .list_jobs(&id, q.state.as_deref(), q.after.unwrap_or(0), limit)
        .map_err(store_err)?;
    let next_after = (jobs.len() == limit as usize)
        .then(|| jobs.last().and_then(|j| j["position"].as_i64()))
        .flatten();
    Ok(Json(JobList {
        jobs: jobs.into_iter().map(view).collect(),
        next_after,
    }))
}

async fn cancel(
    State(st): State<St>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, HttpError> {
    let job = owned(&st, &caller, &id)?;
    let inner = st.rec.jobs.inner.clone();
    let running = {
        let mut s = lock(&inner.sched);
        let sb = job["sandbox_id"].as_str().unwrap_or_default();
        let queued = s
            .queues
            .get_mut(sb)
            .and_then(|q| q.iter().position(|j| j.id == id).and_then(|i| q.remove(i)));
        if queued.is_some() {
            s.queued -= 1;
            None
        } else {
            s.running.get(&id).map(|r| {
                r.cancel.store(true, Ordering::SeqCst);
                r.sandbox_id.clone()
            })
        }
    };
    match running {
        None => {
            let by = format!("cancelled by key {} before it ran", caller.0.key_prefix);
            if !inner.end(&id, state::CANCELLED, None, None, &by) {
                let now = owned(&st, &caller, &id)?;
                if now["state"] != state::QUEUED && now["state"] != state::RUNNING {
                    return Err(HttpError::new(
                        ErrorCode::JobEnded,
                        format!(
                            "job {} already ended ({})",
                            short(&id),
                            now["state"].as_str().unwrap_or("?")
                        ),
                    ));
                }
            }
            Ok(Json(view(owned(&st, &caller, &id)?)).into_response())
        }
        Some(sb) => {
            let mut told = inner.told.subscribe();
            // Interrupt until the job's execution ends: it may still be waiting for its turn
            // behind another execution on the sandbox when the first interrupt lands.
            let (rt, job_id, watch) = (inner.rt.clone(), id.clone(), inner.clone());
            tokio::spawn(async move {
                let deadline = tokio::time::Instant::now()
                    + Duration::from_secs_f64(rt.max_exec_timeout() + 60.0);
                while lock(&watch.sched).running.contains_key(&job_id)
                    && tokio::time::Instant::now() < deadline
                {
                    let _ = rt.interrupt(&sb).await;
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            });
            let ended = tokio::time::timeout(CANCEL_WAIT, async {
                loop {
                    match told.recv().await {
                        Ok((j, Told::Ended)) if *j == *id => return,
                        Err(broadcast::error::RecvError::Closed) => return,
                        _ => {}
                    }
                }
            })
            .await
            .is_ok();
            let job = view(owned(&st, &caller, &id)?);
            let status = if ended {
                StatusCode::OK
            } else {
                StatusCode::ACCEPTED
            };
            Ok((status, Json(job)).into_response())
        }
    }
}

/// `GET /v1/jobs/{id}/events`: `state` (the job now), then its execution's output events as
/// they come (`stdout`, `stderr`, ... as in an execute stream) once it runs, and `done` (the
/// job with its result) when it ends; a job already ended gets `done` at once.
async fn events(
    State(st): State<St>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, HttpError> {
    let guard = st.rec.hub.admit(st.rec.ctx.gov.as_deref(), &caller.0)?;
    // Subscribed before reading the job, so that nothing between the two is missed.
    let mut rx = st.rec.jobs.inner.told.subscribe();
    let job = owned(&st, &caller, &id)?;
    let store = st.rec.ctx.store.clone();
    let read = move |id: &str| store.get_job(id).ok().flatten().map(view);
    let stream = async_stream::stream! {
        let _guard = guard;
        let open = |j: &Value| j["state"] == state::QUEUED || j["state"] == state::RUNNING;
        if !open(&job) {
            yield Ok::<_, std::convert::Infallible>(json_event("done", &view(job)));
            return;
        }
        yield Ok(json_event("state", &view(job)));
        loop {
            match rx.recv().await {
                Ok((j, told)) if *j == *id => match told {
                    Told::Output(ev) => {
                        yield Ok(json_event(crate::execute::event_name(&ev), &ev));
                    }
                    Told::Started => {
                        if let Some(j) = read(&id) {
                            yield Ok(json_event("state", &j));
                        }
                    }
                    Told::Ended => {
                        if let Some(j) = read(&id).filter(|j| !open(j)) {
                            yield Ok(json_event("done", &j));
                            return;
                        }
                        // Queued again (a stopping server): keep telling.
                    }
                },
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    yield Ok(json_event("lagged", &json!({ "missed": n })));
                    if let Some(j) = read(&id).filter(|j| !open(j)) {
                        yield Ok(json_event("done", &j));
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    };
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

fn json_event(name: &str, v: &impl Serialize) -> Event {
    Event::default()
        .event(name)
        .data(serde_json::to_string(v).unwrap_or_else(|_| "null".into()))
}
