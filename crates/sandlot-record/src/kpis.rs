//! `GET /v1/kpis?window=1h|1d`: the server's KPIs over the last hour or day, from the bounded
//! in-process history that the metrics feed (`sandlot_telemetry::kpi`), plus the queue depths
//! of now; and the `sandlot_reviews_pending` gauge on `/metrics`.
//!
//! The KPIs are server-wide (no tenant is kept with them: the metrics never carry tenants), so
//! they are the operator's: any other key gets `403 forbidden`. Every [`SAMPLE_EVERY`] a task
//! samples the queue depths (pending reviews, queued jobs, creations being served or waiting)
//! into the history, so their series show the largest depth seen in each bucket.

use super::{RecordContext, RecordError, Recording};
use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use sandlot_http::{ApiQuery, Caller, HttpError};
use sandlot_telemetry::kpi::{Sample, Window};
use sandlot_telemetry::metrics;
use sandlot_types::ErrorCode;
use serde::Deserialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often the queue depths are sampled into the history (a bucket of the hour ring).
const SAMPLE_EVERY: Duration = Duration::from_secs(sandlot_telemetry::kpi::FINE_SECS);

/// Most pending reviews counted (a queue deeper than this reads as this).
const REVIEWS_COUNTED: usize = 10_000;

type Reader = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The KPIs' sampler, and the queue depths it reads.
pub struct Kpis {
    ctx: RecordContext,
    jobs_queued: Reader,
    /// Pending reviews at the last sample: the gauge on `/metrics` reads this (a scrape must
    /// not wait for the store).
    reviews_pending: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

/// Queue depths now.
#[derive(Clone, Copy, Debug, Default)]
struct Queues {
    reviews_pending: u64,
    jobs_queued: u64,
    creates_waiting: u64,
}

/// Pending reviews in the store (none on a server without keys: nothing can be held there).
fn count_reviews(ctx: &RecordContext) -> u64 {
    if ctx.gov.is_none() {
        return 0;
    }
    match ctx
        .store
        .list_reviews(None, Some("pending"), REVIEWS_COUNTED)
    {
        Ok(v) => v.len() as u64,
        Err(e) => {
            tracing::warn!(error = %e, "pending reviews not counted");
            0
        }
    }
}

/// The queue depths now (the store is read off the async threads).
async fn sample(ctx: &RecordContext, jobs_queued: &Reader, reviews: &AtomicU64) -> Queues {
    let c = ctx.clone();
    if let Ok(n) = tokio::task::spawn_blocking(move || count_reviews(&c)).await {
        reviews.store(n, Ordering::Relaxed);
    }
    Queues {
        reviews_pending: reviews.load(Ordering::Relaxed),
        jobs_queued: jobs_queued(),
        creates_waiting: ctx.rt.gauges().creating,
    }
}

impl Kpis {
    /// Registers the `sandlot_reviews_pending` gauge and starts sampling the queue depths;
    /// `jobs_queued` reads the jobs queue.
    pub(crate) async fn start(
        ctx: &RecordContext,
        jobs_queued: impl Fn() -> u64 + Send + Sync + 'static,
    ) -> Result<Self, RecordError> {
        let jobs_queued: Reader = Arc::new(jobs_queued);
        let reviews_pending = Arc::new(AtomicU64::new(0));
        let r = reviews_pending.clone();
        metrics().set_gauge_source(
            "reviews_pending",
            "Actions held for a person's review, not yet decided (as of the last sample, at most 10 s old)",
            move || r.load(Ordering::Relaxed) as i64,
        );
        let (c, j, r) = (ctx.clone(), jobs_queued.clone(), reviews_pending.clone());
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(SAMPLE_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let q = sample(&c, &j, &r).await;
                metrics().kpis().record(Sample::Queues {
                    reviews_pending: q.reviews_pending,
                    jobs_queued: q.jobs_queued,
                    creates_waiting: q.creates_waiting,
                });
            }
        });
        Ok(Self {
            ctx: ctx.clone(),
            jobs_queued,
            reviews_pending,
            task,
        })
    }

    pub async fn shutdown(&self) {
        self.task.abort();
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct KpisQuery {
    /// `1h` (default) or `1d`.
    window: Option<String>,
}

/// `GET /v1/kpis`: the window's summary and series, and the queue depths now.
async fn get_kpis(
    State(rec): State<Arc<Recording>>,
    caller: Caller,
    ApiQuery(q): ApiQuery<KpisQuery>,
) -> Result<Json<serde_json::Value>, HttpError> {
    let window = match q.window.as_deref() {
        None => Window::Hour,
        Some(w) => Window::parse(w).ok_or_else(|| {
            HttpError::new(
                ErrorCode::InvalidArgument,
                format!("window must be 1h or 1d, not {w:?}"),
            )
        })?,
    };
    if !caller.is_operator() {
        return Err(HttpError::new(
            ErrorCode::Forbidden,
            "the KPIs are server-wide: they need an operator key (an admin key of tenant default)",
        ));
    }
    let k = &rec.kpis;
    let now = sample(&k.ctx, &k.jobs_queued, &k.reviews_pending).await;
    let mut body = metrics()
        .kpis()
        .report(window, sandlot_telemetry::kpi::unix_now());
    body["queues"] = serde_json::json!({
        "reviews_pending": now.reviews_pending,
        "jobs_queued": now.jobs_queued,
        "creates_waiting": now.creates_waiting,
    });
    Ok(Json(body))
}

pub(crate) fn routes(rec: Arc<Recording>) -> Router {
    Router::new()
        .route("/v1/kpis", get(get_kpis))
        .with_state(rec)
}
