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

pub(crate) fn routes(rec: Arc<Recording>) -> Router {
    Router::new()
        .route("/v1/audit", get(list).put(put))
        .route("/v1/audit/checkpoint", get(checkpoint))
        .route("/v1/audit/seal", post(seal))
        .with_state(rec)
}
