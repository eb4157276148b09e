//! The jobs' routes: submit, show, list, cancel, and a job's event stream.

use super::*;

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
pub(super) struct ListQuery {
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
    let metadata = Value::Object(body.metadata.clone().unwrap_or_default());
    check_submission(
        &body,
        &metadata,
        st.cfg.max_code_bytes,
        ctx.rt.max_exec_timeout(),
    )?;
    // Unknown (or another tenant's, refused by the path's scoping already) sandbox: 404.
    ctx.rt.get_sandbox(&id).await?;
    // The service's execute gate, as every protocol's execution passes it; one a policy
    // holds for review is accepted `held` (see the module docs).
    let svc = sandlot_service::Service::new(&ctx.rt, ctx.gov.as_deref());
    let review = match ctx.gov.as_deref() {
        Some(g) => {
            svc.scope_sandbox(&caller.0, &id)?;
            let sandbox = ctx.rt.get_sandbox(&id).await?;
            g.gate_execute_later(&caller.0, &sandbox, &body.code, body.language)?
        }
        None => None,
    };
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
        on_failure: Default::default(),
    };
    let job_id = new_job_id();
    let mut job = job_record(
        &job_id,
        &id,
        &caller,
        &request,
        metadata,
        body.idempotent,
        &now_rfc3339(),
    );
    if let Some(r) = &review {
        // The store inserts it queued; held at once below, before anything can run it.
        job["reason"] = json!(super::held_reason(r));
    }
    {
        let mut s = lock(&jobs.sched);
        let on_sandbox = s.queues.get(&id).map_or(0, VecDeque::len);
        // Held jobs wait too: they count against every bound.
        let of_tenant = s
            .queues
            .values()
            .flatten()
            .filter(|q| q.tenant == caller.tenant())
            .count()
            + s.held.values().filter(|t| *t == caller.tenant()).count();
        // The tenant's share of the server's job slots: its queued and running jobs, counted
        // under the same lock the insertion below takes.
        if let Some(gov) = ctx.gov.as_deref() {
            if let Some(tenant) =
                sandlot_service::shares::capped(gov, &caller.0).map_err(HttpError)?
            {
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
                .map_err(|e| HttpError(sandlot_service::shares::quota_error(e)))?;
            }
        }
        if let Some(why) = queue_full(&jobs.limits, on_sandbox, of_tenant, s.queued + s.held.len())
        {
            return Err(HttpError::new(ErrorCode::JobQueueFull, why));
        }
        // Committed before the answer, under the lock so that queue order is store order.
        jobs.store.insert_job(&job).map_err(store_err)?;
        if let Some(r) = &review {
            jobs.store
                .hold_job(&job_id, &super::held_reason(r))
                .map_err(store_err)?;
        }
        let queued = Queued {
            id: job_id.clone(),
            tenant: caller.tenant().to_owned(),
            key_id: caller.0.key_id.clone(),
            request,
        };
        match &review {
            Some(r) => {
                drop(s);
                jobs.watch_held(&id, queued, r.id.clone());
            }
            None => {
                s.queues.entry(id.clone()).or_default().push_back(queued);
                s.queued += 1;
            }
        }
    }
    if review.is_none() {
        jobs.ensure_worker(&id);
    }
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

/// What a submission must be before anything is looked up: code within the server's limit,
/// a timeout in (0, `max_timeout`] seconds, metadata within [`MAX_METADATA_BYTES`] as JSON.
pub(super) fn check_submission(
    body: &SubmitJob,
    metadata: &Value,
    max_code_bytes: usize,
    max_timeout: f64,
) -> Result<(), HttpError> {
    if body.code.len() > max_code_bytes {
        return Err(HttpError::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "the code is {} bytes; this server accepts at most {} bytes",
                body.code.len(),
                max_code_bytes
            ),
        ));
    }
    if let Some(t) = body.timeout {
        let max = max_timeout;
        if !(t.is_finite() && t > 0.0 && t <= max) {
            return Err(HttpError::new(
                ErrorCode::InvalidArgument,
                format!("timeout must be a number of seconds above 0 and at most {max}"),
            ));
        }
    }
    if metadata.to_string().len() > MAX_METADATA_BYTES {
        return Err(HttpError::new(
            ErrorCode::InvalidArgument,
            format!("metadata is larger than {MAX_METADATA_BYTES} bytes as JSON"),
        ));
    }
    Ok(())
}

/// A new job as the store records it (`queued`, its request and who submitted it).
pub(super) fn job_record(
    job_id: &str,
    sandbox_id: &str,
    caller: &Caller,
    request: &ExecuteRequest,
    metadata: Value,
    idempotent: bool,
    at: &str,
) -> Value {
    json!({
        "id": job_id,
        "sandbox_id": sandbox_id,
        "tenant": caller.tenant(),
        "key_id": caller.0.key_id,
        "state": state::QUEUED,
        "request": request,
        "metadata": metadata,
        "idempotent": idempotent,
        "submitted_at": at,
    })
}

/// The first bound a new job would pass (waiting on its sandbox, on its tenant's sandboxes,
/// on the server), as the message of the `429 job_queue_full`; `None` when there is room.
pub(super) fn queue_full(
    limits: &Limits,
    on_sandbox: usize,
    of_tenant: usize,
    queued: usize,
) -> Option<String> {
    let full = [
        (on_sandbox, limits.per_sandbox, "this sandbox"),
        (of_tenant, limits.per_tenant, "this tenant's sandboxes"),
        (queued, limits.global, "this server"),
    ]
    .into_iter()
    .find(|(waiting, limit, _)| waiting >= limit);
    full.map(|(waiting, limit, which)| {
        // A rough time for a slot to free: a second per job a permit runs ahead of it.
        let retry = (waiting / limits.concurrency.max(1)).clamp(1, 60);
        format!("{limit} jobs already wait on {which}; retry in {retry} s")
    })
}

/// A job as the API shows it (the store's wire shape, without who-knows-what internals).
pub(super) fn view(mut job: Value) -> Value {
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
    let limit = list_limit(&q)?;
    // The sandbox's tenant was checked by the path's scoping; an unknown one has no jobs but
    // still answers 404, as for any other sandbox route.
    if st.rec.ctx.rt.sandbox_tenant(&id).is_none() {
        return Err(HttpError(sandlot_service::governance::sandbox_not_found(
            &id,
        )));
    }
    let jobs = st
        .rec
        .ctx
        .store
        .list_jobs(&id, q.state.as_deref(), q.after.unwrap_or(0), limit)
        .map_err(store_err)?;
    let next_after = next_after(&jobs, limit);
    Ok(Json(JobList {
        jobs: jobs.into_iter().map(view).collect(),
        next_after,
    }))
}

/// A list query's page size (100 by default, 1 to 1000), once its `state` is a known one.
pub(super) fn list_limit(q: &ListQuery) -> Result<u32, HttpError> {
    if let Some(s) = q.state.as_deref() {
        if !state::ALL.contains(&s) {
            return Err(HttpError::new(
                ErrorCode::InvalidArgument,
                format!("state must be one of {}", state::ALL.join(", ")),
            ));
        }
    }
    Ok(q.limit.unwrap_or(100).clamp(1, 1000))
}

/// The `after` of the next page: the last job's position when the page is full.
pub(super) fn next_after(jobs: &[Value], limit: u32) -> Option<i64> {
    (jobs.len() == limit as usize)
        .then(|| jobs.last().and_then(|j| j["position"].as_i64()))
        .flatten()
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
        let open = |j: &Value| {
            j["state"] == state::QUEUED || j["state"] == state::RUNNING || j["state"] == state::HELD
        };
        if !open(&job) {
            yield Ok::<_, std::convert::Infallible>(json_event("done", &view(job)));
            return;
        }
        yield Ok(json_event("state", &view(job)));
        loop {
            match rx.recv().await {
                Ok((j, told)) if *j == *id => match told {
                    Told::Output(ev) => {
                        yield Ok(json_event(sandlot_http::event_name(&ev), &ev));
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
