//! The audit log's routes: its records (`GET /v1/audit`), its latest checkpoint, turning it
//! on and off, and sealing it.

use super::*;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    from: Option<u64>,
    to: Option<u64>,
    after: Option<u64>,
    limit: Option<usize>,
    actor: Option<String>,
    tenant: Option<String>,
    action: Option<String>,
    target: Option<String>,
    outcome: Option<String>,
}

/// Most records one page returns.
const MAX_LIMIT: usize = 1000;
/// Most stored lines one request reads (the rest is the next page's).
const SCAN_CAP: usize = 200_000;

#[derive(Serialize)]
struct RecordPage {
    records: Vec<sandlot_audit::Record>,
    /// Pass as `after` for the next page; null at the end.
    next: Option<u64>,
}

async fn list(
    State(rec): State<Arc<Recording>>,
    caller: Caller,
    ApiQuery(p): ApiQuery<ListParams>,
) -> Result<Json<RecordPage>, HttpError> {
    caller.require_operator()?;
    let limit = p.limit.unwrap_or(100);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(HttpError::invalid_request(format!(
            "limit must be 1..={MAX_LIMIT}"
        )));
    }
    if let (Some(f), Some(t)) = (p.from, p.to) {
        if f > t {
            return Err(HttpError::invalid_request("from is after to"));
        }
    }
    for s in [&p.actor, &p.tenant, &p.action, &p.target, &p.outcome]
        .into_iter()
        .flatten()
    {
        if s.len() > 256 {
            return Err(HttpError::invalid_request(
                "a filter is longer than 256 bytes",
            ));
        }
    }
    let q = sandlot_audit::Query {
        from: p.from,
        to: p.to,
        actor: p.actor,
        tenant: p.tenant,
        action: p.action,
        target: p.target,
        outcome: p.outcome,
    };
    let dir = rec.audit.dir.clone();
    let after = p.after.unwrap_or(0);
    let (records, next) = tokio::task::spawn_blocking(move || {
        sandlot_audit::read_records(&dir, &q, after, limit, SCAN_CAP)
    })
    .await
    .map_err(|e| HttpError::new(ErrorCode::Internal, e.to_string()))?
    .map_err(|e| HttpError::new(ErrorCode::Internal, e.to_string()))?;
    Ok(Json(RecordPage { records, next }))
}

#[derive(Serialize)]
struct CheckpointView {
    /// The latest signed checkpoint (C2SP tlog-checkpoint signed note), if one was signed.
    checkpoint: Option<String>,
    size: Option<u64>,
    /// The verifier key: `sandlot audit verify --key` pins it.
    verifier_key: String,
    origin: String,
    enabled: bool,
    status: sandlot_audit::Status,
}

async fn checkpoint(
    State(rec): State<Arc<Recording>>,
    caller: Caller,
) -> Result<Json<CheckpointView>, HttpError> {
    caller.require_operator()?;
    let log = &rec.audit.log;
    let latest = log.latest_checkpoint();
    Ok(Json(CheckpointView {
        size: latest.as_ref().map(|c| c.0),
        checkpoint: latest.map(|c| c.1),
        verifier_key: log.verifier_key(),
        origin: log.origin().to_owned(),
        enabled: rec.audit.enabled(),
        status: log.status(),
    }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Toggle {
    enabled: bool,
}

async fn put(
    State(rec): State<Arc<Recording>>,
    caller: Caller,
    req: Request,
) -> Result<Json<serde_json::Value>, HttpError> {
    caller.require_operator()?;
    let body = axum::body::to_bytes(req.into_body(), 4096)
        .await
        .map_err(|_| HttpError::invalid_request("the body must be a JSON object under 4 KiB"))?;
    let t: Toggle = serde_json::from_slice(&body).map_err(|e| {
        HttpError::invalid_request(format!("the body must be {{\"enabled\": true|false}}: {e}"))
    })?;
    let audit = &rec.audit;
    let was = audit.enabled();
    if was != t.enabled {
        let marker = audit.dir.join(DISABLED_MARKER);
        let action = if t.enabled {
            "audit.enabled"
        } else {
            "audit.disabled"
        };
        let entry = Entry {
            actor: serde_json::json!({"key_id": caller.0.key_id, "key_prefix": caller.0.key_prefix}),
            tenant: Some(caller.0.tenant.clone()),
            action: action.into(),
            target: serde_json::json!({"was": was}),
            outcome: "ok".into(),
            ..Default::default()
        };
        // Turning it off must be on record, or it does not happen.
        audit
            .log
            .append(entry)
            .map_err(|e| HttpError::new(ErrorCode::AuditUnavailable, e.to_string()))?;
        let r = if t.enabled {
            std::fs::remove_file(&marker).or_else(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Ok(()),
                _ => Err(e),
            })
        } else {
            std::fs::write(&marker, b"PUT /v1/audit\n")
        };
        r.map_err(|e| HttpError::new(ErrorCode::Internal, format!("saving the setting: {e}")))?;
        audit.enabled.store(t.enabled, Ordering::Relaxed);
    }
    Ok(Json(serde_json::json!({"enabled": t.enabled, "was": was})))
}

async fn seal(
    State(rec): State<Arc<Recording>>,
    caller: Caller,
) -> Result<Json<sandlot_audit::SealReport>, HttpError> {
    caller.require_operator()?;
    let log = rec.audit.log.clone();
    let actor = serde_json::json!({"key_id": caller.0.key_id, "key_prefix": caller.0.key_prefix});
    let tenant = Some(caller.0.tenant.clone());
    let r = tokio::task::spawn_blocking(move || log.seal(actor, tenant))
        .await
        .map_err(|e| HttpError::new(ErrorCode::Internal, e.to_string()))?;
    match r {
        Ok(report) => Ok(Json(report)),
        Err(sandlot_audit::AuditError::Invalid(m)) => Err(HttpError::invalid_request(m)),
        Err(e) => Err(HttpError::new(ErrorCode::AuditUnavailable, e.to_string())),
    }
}

/// A full verification of the log is redone at most this often (a status asked for more often
/// answers the last one, saying when it ran and up to which record).
pub(crate) const VERIFY_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// The last full verification of the log.
#[derive(Debug, Clone)]
pub(crate) struct Verified {
    report: sandlot_audit::VerifyReport,
    ran: std::time::Instant,
    at: String,
}

/// `GET /v1/audit/status`.
#[derive(Serialize)]
struct StatusView {
    /// `ok`, `unavailable` or `corrupt` (the writer's view).
    state: &'static str,
    reason: Option<String>,
    enabled: bool,
    /// Records written so far.
    records: u64,
    /// The chain, hashes and signed checkpoints were proven for records `verified_from..=
    /// verified_to` (`verified_to` 0: nothing yet); `verified` false when that proof failed.
    verified: bool,
    verified_from: u64,
    verified_to: u64,
    /// Why the proof failed.
    failure: Option<serde_json::Value>,
    /// When the proof ran, and how long it took.
    verified_at: String,
    verify_seconds: f64,
    /// The latest signed checkpoint: how many records it covers, the time of the last of them,
    /// and the signing key's id (`<origin>+<id>+<key>`'s middle part).
    checkpoint: Option<CheckpointSummary>,
    checkpoints: usize,
    verifier_key: String,
}

#[derive(Serialize)]
struct CheckpointSummary {
    seq: u64,
    at: Option<String>,
    key_id: String,
}

/// `GET /v1/audit/status` (operator): the chain's state, verified over the files (cached: a
/// log that has not grown is not verified again, and one that has is at most every
/// [`VERIFY_EVERY`]), and the latest checkpoint.
async fn status(
    State(rec): State<Arc<Recording>>,
    caller: Caller,
) -> Result<Json<StatusView>, HttpError> {
    caller.require_operator()?;
    let log = rec.audit.log.clone();
    let now = log.status();
    let verified = {
        let mut cache = rec.audit.verified.lock().await;
        let fresh = cache
            .as_ref()
            .is_some_and(|v| v.report.records == now.records || v.ran.elapsed() < VERIFY_EVERY);
        if !fresh {
            let dir = rec.audit.dir.clone();
            let t0 = std::time::Instant::now();
            let report = tokio::task::spawn_blocking(move || sandlot_audit::verify(&dir, None))
                .await
                .map_err(|e| HttpError::new(ErrorCode::Internal, e.to_string()))?
                .map_err(|e| HttpError::new(ErrorCode::Internal, e.to_string()))?;
            *cache = Some(Verified {
                report,
                ran: t0,
                at: sandlot_audit::now_rfc3339(),
            });
        }
        cache.clone().expect("set above")
    };
    let r = &verified.report;
    let checkpoint = match log.latest_checkpoint() {
        Some((seq, _)) => {
            let dir = rec.audit.dir.clone();
            let q = sandlot_audit::Query {
                from: Some(seq),
                to: Some(seq),
                ..Default::default()
            };
            let at = tokio::task::spawn_blocking(move || {
                sandlot_audit::read_records(&dir, &q, seq.saturating_sub(1), 1, SCAN_CAP)
            })
            .await
            .ok()
            .and_then(Result::ok)
            .and_then(|(records, _)| records.into_iter().next())
            .map(|r| r.at);
            Some(CheckpointSummary {
                seq,
                at,
                key_id: now.verifier_key.split('+').nth(1).unwrap_or("").to_owned(),
            })
        }
        None => None,
    };
    Ok(Json(StatusView {
        state: now.state,
        reason: now.reason,
        enabled: rec.audit.enabled(),
        records: now.records,
        verified: r.failure.is_none(),
        verified_from: r.from,
        verified_to: if r.failure.is_none() {
            r.records
        } else {
            r.records.min(now.records)
        },
        failure: r
            .failure
            .as_ref()
            .and_then(|f| serde_json::to_value(f).ok()),
        verified_at: verified.at,
        verify_seconds: r.seconds,
        checkpoint,
        checkpoints: r.checkpoints,
        verifier_key: now.verifier_key,
    }))
}

pub(crate) fn routes(rec: Arc<Recording>) -> Router {
    Router::new()
        .route("/v1/audit", get(list).put(put))
        .route("/v1/audit/status", get(status))
        .route("/v1/audit/checkpoint", get(checkpoint))
        .route("/v1/audit/seal", post(seal))
        .with_state(rec)
}
