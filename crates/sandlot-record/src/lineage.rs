//! What came from what: artifact → execution → sandbox → template version, policy-set version
//! and the sandbox's parents (forks and snapshots), for live and ended sandboxes alike.
//!
//! - `GET /v1/lineage/artifact/{sha256}`: the executions that produced the content and the
//!   uploads that brought it in.
//! - `GET /v1/lineage/execution/{id}`: the execution, its template version, policy version and
//!   decisions, guardrail findings, the inputs written before it, the artifacts it produced,
//!   its sandbox and the sandbox's parents.
//! - `GET /v1/lineage/sandbox/{id}`: the sandbox, its parents and its steps in order (inputs
//!   and executions).
//! - `GET /v1/lineage/sandbox/{id}/openlineage`: the same as OpenLineage `RunEvent`s, one JSON
//!   object per line: the sandbox is the parent run, each execution a child run (`parent`
//!   facet), inputs and artifacts are datasets named by their sha256, and the custom facets
//!   `sandlot_execution`, `sandlot_policy` and `sandlot_guardrails` (schemas in
//!   `crates/sandlot-cli/tests/it/fixtures/openlineage/SandlotFacets.json`) say how it ran.
//!
//! These paths are not under `/v1/sandboxes/{id}`, so the authentication layer does not scope
//! them: every handler checks that what it names belongs to the caller's tenant and answers
//! another tenant's id exactly as a missing one (same status, code and message).
//!
//! Where the records come from: inputs are recorded by the runtime on every upload
//! (`sandlot-runtime/src/inputs.rs`); the template of each execution and the artifact index are
//! written by store triggers; the policy version and decision ids of each execution are noted
//! by an inline lifecycle listener installed here (from the request's [`Note`] when the
//! execution ran in the request's task, else the last `execute` decision about the sandbox
//! before the execution started).

use super::Recording;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use sandlot_http::Caller;
use sandlot_http::HttpError;
use sandlot_service::Note;
use sandlot_types::{ErrorCode, ExecutionRecord, LifecycleKind, Sandbox, SandboxState};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// The `producer` of every OpenLineage event and the `_producer` of every facet.
pub fn producer() -> String {
    format!("urn:sandlot:{}", env!("CARGO_PKG_VERSION"))
}

/// Where the OpenLineage spec this module writes lives.
pub const OPENLINEAGE_SCHEMA: &str = "https://openlineage.io/spec/2-0-2/OpenLineage.json";
const PARENT_FACET_SCHEMA: &str =
    "https://openlineage.io/spec/facets/1-2-0/ParentRunFacet.json#/$defs/ParentRunFacet";
const ERROR_FACET_SCHEMA: &str =
    "https://openlineage.io/spec/facets/1-0-1/ErrorMessageRunFacet.json#/$defs/ErrorMessageRunFacet";
/// The custom facets' schema document (shipped as test data, see the module docs).
pub const SANDLOT_FACETS_SCHEMA: &str = "urn:sandlot:openlineage:facets:1-0-0";

/// Longest parent chain followed (forks of forks...).
const MAX_PARENTS: usize = 64;

/// Sandboxes whose recordings have a listener (the router may be built more than once).
static LISTENING: Mutex<Vec<Weak<Recording>>> = Mutex::new(Vec::new());

pub(crate) fn routes(rec: Arc<Recording>) -> Router {
    install_listener(&rec);
    Router::new()
        .route("/v1/lineage/artifact/{sha256}", get(artifact))
        .route("/v1/lineage/execution/{id}", get(execution))
        .route("/v1/lineage/sandbox/{id}", get(sandbox))
        .route("/v1/lineage/sandbox/{id}/openlineage", get(openlineage))
        .with_state(rec)
}

/// Notes the policy version and decisions of every execution, once per recording.
fn install_listener(rec: &Arc<Recording>) {
    {
        let mut seen = LISTENING.lock().unwrap_or_else(PoisonError::into_inner);
        seen.retain(|w| w.strong_count() > 0);
        if seen
            .iter()
            .any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(rec)))
        {
            return;
        }
        seen.push(Arc::downgrade(rec));
    }
    // Writes happen on a task of their own: a listener must not wait for SQLite.
    let (tx, mut rx) =
        tokio::sync::mpsc::unbounded_channel::<(String, String, Option<String>, Vec<String>)>();
    let store = rec.ctx.store.clone();
    tokio::spawn(async move {
        while let Some((exec, sandbox, version, decisions)) = rx.recv().await {
            let store = store.clone();
            let _ = tokio::task::spawn_blocking(move || {
                if let Err(e) =
                    store.note_execution_policy(&exec, &sandbox, version.as_deref(), &decisions)
                {
                    tracing::warn!(execution = %exec, error = %e, "execution lineage not noted");
                }
            })
            .await;
        }
    });
    let gov = rec.ctx.gov.clone();
    rec.ctx.rt.on_event(Arc::new(move |ev| {
        if ev.kind != LifecycleKind::Executed {
            return;
        }
        let Some(exec) = ev.execution_id.clone() else {
            return;
        };
        let decisions = Note::current()
            .map(|n| n.data().decisions)
            .unwrap_or_default();
        let version = gov.as_ref().map(|g| g.policy.version());
        let _ = tx.send((exec, ev.sandbox_id.clone(), version, decisions));
    }));
}

fn not_found_sandbox(id: &str) -> HttpError {
    HttpError(sandlot_service::governance::sandbox_not_found(id))
}

fn not_found_execution(id: &str) -> HttpError {
    HttpError::new(
        ErrorCode::ExecutionNotFound,
        format!("no execution {}", short(id)),
    )
}

fn not_found_artifact(sha: &str) -> HttpError {
    HttpError::new(
        ErrorCode::FileNotFound,
        format!("no artifact {} in this tenant's lineage", short(sha)),
    )
}

fn short(id: &str) -> String {
    id.chars().take(64).collect()
}

fn internal(what: &str, e: impl std::fmt::Display) -> HttpError {
    HttpError::new(ErrorCode::Internal, format!("{what}: {e}"))
}

/// Runs store reads off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, HttpError> + Send + 'static,
) -> Result<T, HttpError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| internal("a lineage read failed", e))?
}

/// The recorded sandbox `id` when it is the caller's (live or ended); another tenant's is
/// not found, exactly like a missing one.
pub(crate) async fn visible_sandbox(
    rec: &Recording,
    caller: &Caller,
    id: &str,
) -> Result<Sandbox, HttpError> {
    let store = rec.ctx.store.clone();
    let (tenant, id2) = (caller.tenant().to_owned(), id.to_owned());
    blocking(move || match store.get_sandbox(&id2) {
        Ok(Some(s)) if s.tenant == tenant => Ok(s),
        Ok(_) => Err(not_found_sandbox(&id2)),
        Err(e) => Err(internal("reading the sandbox", e)),
    })
    .await
}

/// One step of a sandbox's run, in order: an upload or an execution.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    Input {
        path: String,
        sha256: String,
        size: u64,
        at: String,
        stored: bool,
    },
    Execution(Box<ExecStep>),
}

/// An execution and what it ran under.
#[derive(Debug, Clone)]
pub(crate) struct ExecStep {
    pub rec: ExecutionRecord,
    pub template: String,
    pub template_version: String,
    pub policy_version: Option<String>,
    pub decisions: Vec<String>,
}

impl Step {
    fn at(&self) -> &str {
        match self {
            Step::Input { at, .. } => at,
            Step::Execution(e) => &e.rec.started_at,
        }
    }
}

/// A sandbox's steps, inputs and executions merged by time (executions first on a tie: an
/// upload recorded at the same microsecond as an execution's start raced it).
pub(crate) async fn steps(rec: &Recording, sb: &Sandbox) -> Result<Vec<Step>, HttpError> {
    // Drains the runtime's write-behind queue first, so every answered execution is listed.
    let executions = match rec.ctx.rt.list_executions(&sb.id).await {
        Ok(v) => v,
        Err(e) => return Err(internal("listing executions", e)),
    };
    let store = rec.ctx.store.clone();
    let sb = sb.clone();
    blocking(move || {
        let inputs = store
            .list_inputs(&sb.id)
            .map_err(|e| internal("listing inputs", e))?;
        let lineage: HashMap<String, _> = store
            .list_execution_lineage(&sb.id)
            .map_err(|e| internal("reading execution lineage", e))?
            .into_iter()
            .map(|l| (l.execution_id.clone(), l))
            .collect();
        let mut out: Vec<Step> = Vec::with_capacity(inputs.len() + executions.len());
        for r in executions {
            let (mut policy_version, mut decisions) = (None, Vec::new());
            let (mut template, mut template_version) =
                (sb.template.clone(), sb.template_version.clone());
            if let Some(l) = lineage.get(&r.id) {
                policy_version = l.policy_version.clone();
                decisions = l.decisions.clone();
                template = l.template.clone();
                template_version = l.template_version.clone();
            }
            let (v, d) = decided(&store, &sb.id, &r.started_at, policy_version, decisions);
            out.push(Step::Execution(Box::new(ExecStep {
                rec: r,
                template,
                template_version,
                policy_version: v,
                decisions: d,
            })));
        }
        for i in inputs {
            out.push(Step::Input {
                path: i.path,
                sha256: i.sha256,
                size: i.size,
                at: i.at,
                stored: i.stored,
            });
        }
        // Stable: executions (pushed first) stay before inputs of the same instant.
        out.sort_by(|a, b| a.at().cmp(b.at()));
        Ok(out)
    })
    .await
}

/// The policy version and decisions of an execution: as noted, else the last `execute`
/// decision about the sandbox before it started. The version the deciding set had wins over
/// the one noted after the execution (the set may have been replaced while it ran).
fn decided(
    store: &sandlot_store::Store,
    sandbox_id: &str,
    started_at: &str,
    noted_version: Option<String>,
    mut decisions: Vec<String>,
) -> (Option<String>, Vec<String>) {
    let mut version = noted_version;
    if decisions.is_empty() {
        if let Ok(Some(d)) = store.execute_decision_before(sandbox_id, started_at) {
            decisions.push(d.id);
            version = Some(d.version);
        }
    } else if let Ok(found) = store.decisions_by_id(&decisions) {
        if let Some(d) = found.iter().find(|d| d.gate == "execute").or(found.first()) {
            version = Some(d.version.clone());
        }
    }
    (version, decisions)
}

/// The chain of parents of `sb`, nearest first: forks (`forked_from`) and snapshots
/// (`from_snapshot`, then the snapshot's sandbox). Stops at a parent of another tenant or
/// one no longer recorded, and after [`MAX_PARENTS`].
pub(crate) fn parents(store: &sandlot_store::Store, sb: &Sandbox) -> Vec<Value> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    seen.insert(sb.id.clone());
    let mut cur = sb.clone();
    while out.len() < MAX_PARENTS {
        let (entry, next) = if let Some(p) = &cur.forked_from {
            (
                json!({"relation": "forked_from", "sandbox_id": p}),
                p.clone(),
            )
        } else if let Some(snap) = &cur.from_snapshot {
            match store.get_snapshot(snap) {
                Ok(Some(r)) if r.snapshot.tenant == sb.tenant => (
                    json!({"relation": "from_snapshot", "snapshot_id": snap,
                           "sandbox_id": r.snapshot.sandbox_id,
                           "snapshot_created_at": r.snapshot.created_at}),
                    r.snapshot.sandbox_id,
                ),
                _ => {
                    out.push(json!({"relation": "from_snapshot", "snapshot_id": snap,
                                    "sandbox_id": null}));
                    break;
                }
            }
        } else {
            break;
        };
        let parent = match store.get_sandbox(&next) {
            Ok(Some(p)) if p.tenant == sb.tenant => p,
            _ => {
                out.push(entry);
                break;
            }
        };
        let mut entry = entry;
        entry["template"] = json!(parent.template);
        entry["template_version"] = json!(parent.template_version);
        entry["state"] = json!(parent.state.as_str());
        out.push(entry);
        if !seen.insert(parent.id.clone()) {
            break;
        }
        cur = parent;
    }
    out
}

fn sandbox_json(sb: &Sandbox) -> Value {
    json!({
        "id": sb.id,
        "tenant": sb.tenant,
        "state": sb.state.as_str(),
        "template": sb.template,
        "template_version": sb.template_version,
        "tier": sb.tier,
        "created_at": sb.created_at,
        "last_active_at": sb.last_active_at,
        "ended_reason": sb.ended_reason,
        "forked_from": sb.forked_from,
        "from_snapshot": sb.from_snapshot,
    })
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The artifacts of an execution's result that have content (by path, with their hashes).
fn artifacts_json(r: &ExecutionRecord) -> Vec<Value> {
    r.result
        .iter()
        .flat_map(|res| res.artifacts.iter())
        .map(|a| {
            json!({"path": a.path, "sha256": a.sha256, "size": a.size,
                   "mime_type": a.mime_type, "change": a.change,
                   "stored": !a.sha256.is_empty()})
        })
        .collect()
}

fn step_json(step: &Step) -> Value {
    match step {
        Step::Input {
            path,
            sha256,
            size,
            at,
            stored,
        } => json!({"kind": "input", "path": path, "sha256": sha256, "size": size,
                    "at": at, "stored": stored}),
        Step::Execution(e) => {
            let r = &e.rec;
            let res = r.result.as_ref();
            json!({
                "kind": "execution",
                "id": r.id,
                "language": r.language,
                "started_at": r.started_at,
                "end_state": res.map(|x| x.end_state),
                "duration_ms": res.map(|x| x.duration_ms),
                "code_sha256": sha256_hex(r.code.as_bytes()),
                "template": e.template,
                "template_version": e.template_version,
                "policy_version": e.policy_version,
                "decisions": e.decisions,
                "artifacts": artifacts_json(r),
            })
        }
    }
}

/// `GET /v1/lineage/sandbox/{id}`.
async fn sandbox(
    State(rec): State<Arc<Recording>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, HttpError> {
    let sb = visible_sandbox(&rec, &caller, &id).await?;
    let steps = steps(&rec, &sb).await?;
    let store = rec.ctx.store.clone();
    let sb2 = sb.clone();
    let parents = blocking(move || Ok(parents(&store, &sb2))).await?;
    Ok(Json(json!({
        "sandbox": sandbox_json(&sb),
        "parents": parents,
        "steps": steps.iter().map(step_json).collect::<Vec<_>>(),
    })))
}

/// `GET /v1/lineage/execution/{id}`.
async fn execution(
    State(rec): State<Arc<Recording>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, HttpError> {
    let store = rec.ctx.store.clone();
    let id2 = id.clone();
    let found = blocking(move || {
        store
            .get_execution(&id2)
            .map_err(|e| internal("reading the execution", e))
    })
    .await?;
    let Some(found) = found else {
        return Err(not_found_execution(&id));
    };
    let sb = visible_sandbox(&rec, &caller, &found.sandbox_id)
        .await
        .map_err(|_| not_found_execution(&id))?;
    let steps = steps(&rec, &sb).await?;
    let Some(pos) = steps
        .iter()
        .position(|s| matches!(s, Step::Execution(e) if e.rec.id == id))
    else {
        return Err(not_found_execution(&id));
    };
    let Step::Execution(e) = &steps[pos] else {
        return Err(not_found_execution(&id));
    };
    let inputs: Vec<Value> = steps[..pos]
        .iter()
        .filter(|s| matches!(s, Step::Input { .. }))
        .map(step_json)
        .collect();
    let store = rec.ctx.store.clone();
    let (sb2, ids) = (sb.clone(), e.decisions.clone());
    let exec_id = id.clone();
    let (parents, findings, decisions) = blocking(move || {
        let findings: Vec<Value> = store
            .list_findings(&sb2.id)
            .map_err(|e| internal("reading findings", e))?
            .into_iter()
            .filter(|f| f.execution_id.as_deref() == Some(exec_id.as_str()))
            .map(|f| {
                json!({"rule": f.rule, "kind": f.kind, "stream": f.stream, "sha256": f.sha256,
                       "outcome": f.outcome, "decision_id": f.decision_id, "at": f.at})
            })
            .collect();
        let decisions: Vec<Value> = store
            .decisions_by_id(&ids)
            .map_err(|e| internal("reading decisions", e))?
            .into_iter()
            .map(|d| {
                json!({"id": d.id, "gate": d.gate, "allowed": d.allowed, "version": d.version,
                       "policies": d.policies, "at": d.at})
            })
            .collect();
        Ok((parents(&store, &sb2), findings, decisions))
    })
    .await?;
    let r = &e.rec;
    let res = r.result.as_ref();
    Ok(Json(json!({
        "execution": {
            "id": r.id,
            "sandbox_id": r.sandbox_id,
            "language": r.language,
            "started_at": r.started_at,
            "end_state": res.map(|x| x.end_state),
            "duration_ms": res.map(|x| x.duration_ms),
            "code_sha256": sha256_hex(r.code.as_bytes()),
        },
        "template": {"name": e.template, "version": e.template_version},
        "policy": {
            "version": e.policy_version,
            "decision_ids": e.decisions,
            "decisions": decisions,
        },
        "guardrails": {"findings": findings},
        "inputs": inputs,
        "outputs": artifacts_json(r),
        "sandbox": sandbox_json(&sb),
        "parents": parents,
    })))
}

/// `GET /v1/lineage/artifact/{sha256}`.
async fn artifact(
    State(rec): State<Arc<Recording>>,
    caller: Caller,
    Path(sha): Path<String>,
) -> Result<Json<Value>, HttpError> {
    if !sandlot_runtime::artifacts::valid_sha256(&sha) {
        return Err(HttpError::new(
            ErrorCode::InvalidArgument,
            "an artifact is named by its sha256: 64 lowercase hex digits",
        ));
    }
    let store = rec.ctx.store.clone();
    let tenant = caller.tenant().to_owned();
    let sha2 = sha.clone();
    let (produced, uploaded) = blocking(move || {
        let mut tenants: HashMap<String, Option<Sandbox>> = HashMap::new();
        let mut sandbox_of = |id: &str| -> Option<Sandbox> {
            tenants
                .entry(id.to_owned())
                .or_insert_with(|| {
                    store
                        .get_sandbox(id)
                        .ok()
                        .flatten()
                        .filter(|s| s.tenant == tenant)
                })
                .clone()
        };
        let mut produced = Vec::new();
        for p in store
            .artifact_producers(&sha2)
            .map_err(|e| internal("reading the artifact index", e))?
        {
            let Some(sb) = sandbox_of(&p.sandbox_id) else {
                continue;
            };
            let l = store.execution_lineage(&p.execution_id).ok().flatten();
            let (noted_v, noted_d) = l
                .as_ref()
                .map(|l| (l.policy_version.clone(), l.decisions.clone()))
                .unwrap_or_default();
            let (version, decisions) = decided(&store, &sb.id, &p.at, noted_v, noted_d);
            produced.push(json!({
                "execution_id": p.execution_id,
                "sandbox_id": p.sandbox_id,
                "path": p.path,
                "size": p.size,
                "mime_type": p.mime_type,
                "at": p.at,
                "template": l.as_ref().map(|l| l.template.clone()).unwrap_or(sb.template.clone()),
                "template_version": l.as_ref().map(|l| l.template_version.clone())
                    .unwrap_or(sb.template_version.clone()),
                "policy_version": version,
                "decisions": decisions,
                "sandbox_state": sb.state.as_str(),
                "parents": parents(&store, &sb),
            }));
        }
        let mut uploaded = Vec::new();
        for i in store
            .inputs_with_sha256(&sha2)
            .map_err(|e| internal("reading inputs", e))?
        {
            if sandbox_of(&i.sandbox_id).is_none() {
                continue;
            }
            uploaded.push(
                json!({"sandbox_id": i.sandbox_id, "path": i.path, "size": i.size,
                                 "at": i.at, "stored": i.stored}),
            );
        }
        Ok((produced, uploaded))
    })
    .await?;
    if produced.is_empty() && uploaded.is_empty() {
        return Err(not_found_artifact(&sha));
    }
    Ok(Json(json!({
        "sha256": sha,
        "produced_by": produced,
        "uploaded_as": uploaded,
    })))
}

/// `GET /v1/lineage/sandbox/{id}/openlineage`: JSON lines.
async fn openlineage(
    State(rec): State<Arc<Recording>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, HttpError> {
    let sb = visible_sandbox(&rec, &caller, &id).await?;
    let events = openlineage_events(&rec, &sb).await?;
    let mut body = String::new();
    for ev in events {
        body.push_str(&ev.to_string());
        body.push('\n');
    }
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response())
}

/// A stable run id (a UUID, as OpenLineage wants) for a sandbox or execution id: name-based,
/// so exporting twice names the same runs.
pub fn run_id(id: &str) -> String {
    let h = Sha256::digest(format!("sandlot-run:{id}").as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&h[..16]);
    b[6] = (b[6] & 0x0f) | 0x50;
    b[8] = (b[8] & 0x3f) | 0x80;
    let x = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &x[0..8],
        &x[8..12],
        &x[12..16],
        &x[16..20],
        &x[20..32]
    )
}

fn facet(schema_def: &str, mut body: Value) -> Value {
    body["_producer"] = json!(producer());
    body["_schemaURL"] = json!(format!("{SANDLOT_FACETS_SCHEMA}#/$defs/{schema_def}"));
    body
}

fn namespace(tenant: &str) -> String {
    format!("sandlot/{tenant}")
}

/// An input or artifact as an OpenLineage dataset.
fn dataset(tenant: &str, sha: &str, path: &str, size: u64, mime: Option<&str>) -> Value {
    json!({
        "namespace": namespace(tenant),
        "name": format!("sha256:{sha}"),
        "facets": {
            "sandlot_content": facet("SandlotContentDatasetFacet", json!({
                "sha256": sha, "path": path, "size": size, "mime_type": mime,
            })),
        },
    })
}

fn event(
    kind: &str,
    at: &str,
    run: Value,
    job: Value,
    inputs: Vec<Value>,
    outputs: Vec<Value>,
) -> Value {
    json!({
        "eventType": kind,
        "eventTime": at,
        "run": run,
        "job": job,
        "inputs": inputs,
        "outputs": outputs,
        "producer": producer(),
        "schemaURL": format!("{OPENLINEAGE_SCHEMA}#/$defs/RunEvent"),
    })
}

/// `at` plus `ms` milliseconds, in the runtime's RFC 3339 form (`at` as is if it does not
/// parse).
fn plus_ms(at: &str, ms: f64) -> String {
    use time::format_description::well_known::Rfc3339;
    match time::OffsetDateTime::parse(at, &Rfc3339) {
        Ok(t) if ms.is_finite() && ms >= 0.0 => {
            (t + time::Duration::microseconds((ms * 1000.0) as i64))
                .format(&Rfc3339)
                .unwrap_or_else(|_| at.to_owned())
        }
        _ => at.to_owned(),
    }
}

/// The OpenLineage events of a sandbox's run, in time order.
pub(crate) async fn openlineage_events(
    rec: &Recording,
    sb: &Sandbox,
) -> Result<Vec<Value>, HttpError> {
    let steps = steps(rec, sb).await?;
    let store = rec.ctx.store.clone();
    let sb2 = sb.clone();
    let (parents, findings) = blocking(move || {
        let findings = store
            .list_findings(&sb2.id)
            .map_err(|e| internal("reading findings", e))?;
        Ok((parents(&store, &sb2), findings))
    })
    .await?;
    Ok(openlineage_of(sb, &steps, &parents, &findings))
}

/// The OpenLineage events of a sandbox's run from what was read of it: its steps in order, its
/// parents (nearest first) and its guardrail findings.
pub(crate) fn openlineage_of(
    sb: &Sandbox,
    steps: &[Step],
    parents: &[Value],
    findings: &[sandlot_store::FindingRecord],
) -> Vec<Value> {
    let ns = namespace(&sb.tenant);
    let sandbox_job = json!({"namespace": ns, "name": sb.id});
    let sandbox_run_id = run_id(&sb.id);
    let mut sandbox_facets = serde_json::Map::new();
    sandbox_facets.insert(
        "sandlot_sandbox".into(),
        facet(
            "SandlotSandboxRunFacet",
            json!({
                "sandbox_id": sb.id, "template": sb.template,
                "template_version": sb.template_version, "tier": sb.tier,
                "state": sb.state.as_str(), "parents": parents,
            }),
        ),
    );
    // A fork or a sandbox started from a snapshot is a child run of the sandbox it came from.
    if let Some(p) = parents.first().and_then(|p| p["sandbox_id"].as_str()) {
        sandbox_facets.insert(
            "parent".into(),
            json!({
                "_producer": producer(),
                "_schemaURL": PARENT_FACET_SCHEMA,
                "run": {"runId": run_id(p)},
                "job": {"namespace": ns, "name": p},
            }),
        );
    }
    let sandbox_run = json!({"runId": sandbox_run_id, "facets": sandbox_facets});
    let mut events = vec![event(
        "START",
        &sb.created_at,
        sandbox_run.clone(),
        sandbox_job.clone(),
        vec![],
        vec![],
    )];
    let mut inputs_so_far: Vec<Value> = Vec::new();
    let mut all_outputs: Vec<Value> = Vec::new();
    for step in steps {
        let e = match step {
            Step::Input {
                path, sha256, size, ..
            } => {
                inputs_so_far.push(dataset(&sb.tenant, sha256, path, *size, None));
                continue;
            }
            Step::Execution(e) => e,
        };
        let r = &e.rec;
        let parent = json!({
            "_producer": producer(),
            "_schemaURL": PARENT_FACET_SCHEMA,
            "run": {"runId": sandbox_run_id},
            "job": {"namespace": ns, "name": sb.id},
        });
        let job = json!({"namespace": ns, "name": format!("{}/{}", sb.id, r.id)});
        let mine: Vec<Value> = findings
            .iter()
            .filter(|f| f.execution_id.as_deref() == Some(r.id.as_str()))
            .map(|f| {
                json!({"rule": f.rule, "kind": f.kind, "stream": f.stream, "sha256": f.sha256,
                       "outcome": f.outcome, "decision_id": f.decision_id})
            })
            .collect();
        let res = r.result.as_ref();
        let mut facets = serde_json::Map::new();
        facets.insert("parent".into(), parent);
        facets.insert(
            "sandlot_execution".into(),
            facet(
                "SandlotExecutionRunFacet",
                json!({
                    "execution_id": r.id, "language": r.language,
                    "code_sha256": sha256_hex(r.code.as_bytes()),
                    "end_state": res.map(|x| x.end_state),
                    "duration_ms": res.map(|x| x.duration_ms),
                    "template": e.template, "template_version": e.template_version,
                }),
            ),
        );
        facets.insert(
            "sandlot_policy".into(),
            facet(
                "SandlotPolicyRunFacet",
                json!({"version": e.policy_version, "decisions": e.decisions}),
            ),
        );
        facets.insert(
            "sandlot_guardrails".into(),
            facet("SandlotGuardrailsRunFacet", json!({"findings": mine})),
        );
        let run_start = json!({"runId": run_id(&r.id), "facets": facets.clone()});
        events.push(event(
            "START",
            &r.started_at,
            run_start,
            job.clone(),
            inputs_so_far.clone(),
            vec![],
        ));
        let Some(res) = res else {
            continue;
        };
        let outputs: Vec<Value> = res
            .artifacts
            .iter()
            .filter(|a| !a.sha256.is_empty())
            .map(|a| dataset(&sb.tenant, &a.sha256, &a.path, a.size, Some(&a.mime_type)))
            .collect();
        all_outputs.extend(outputs.iter().cloned());
        let ok = res.end_state == sandlot_types::EndState::Ok;
        if !ok {
            let (message, trace) = match &res.error {
                Some(err) => (
                    format!("{}: {}", err.name, err.value),
                    err.traceback.join("\n"),
                ),
                None => (
                    format!("the execution ended {:?}", res.end_state).to_lowercase(),
                    String::new(),
                ),
            };
            facets.insert(
                "errorMessage".into(),
                json!({
                    "_producer": producer(),
                    "_schemaURL": ERROR_FACET_SCHEMA,
                    "message": message,
                    "programmingLanguage": format!("{:?}", r.language).to_lowercase(),
                    "stackTrace": trace,
                }),
            );
        }
        events.push(event(
            if ok { "COMPLETE" } else { "FAIL" },
            &plus_ms(&r.started_at, res.duration_ms),
            json!({"runId": run_id(&r.id), "facets": facets}),
            job,
            inputs_so_far.clone(),
            outputs,
        ));
    }
    let end = match sb.state {
        SandboxState::Deleted | SandboxState::Expired => Some("COMPLETE"),
        SandboxState::Failed | SandboxState::Lost => Some("FAIL"),
        _ => None,
    };
    if let Some(kind) = end {
        events.push(event(
            kind,
            &sb.last_active_at,
            sandbox_run,
            sandbox_job,
            inputs_so_far,
            all_outputs,
        ));
    }
    events
}

#[cfg(test)]
mod tests;
