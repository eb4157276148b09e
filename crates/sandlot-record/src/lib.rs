//! The record: what happened on this server, kept and told. Every request leaves an audit
//! record (`audit/`), a span and its metrics (`observe.rs`); lifecycle events are streamed
//! and sent to webhooks (`events.rs`, `webhooks.rs`); executions can be queued as durable jobs
//! (`jobs/`); the KPIs' history is served at `/v1/kpis` (`kpis.rs`); what came from what is answered by `lineage.rs`, and a sandbox's run is
//! written as a bundle to replay (`bundle.rs`).
//!
//! The record sits below the adapters: it shares the HTTP plumbing of the REST adapter
//! (`sandlot-http`) but never depends on it. `sandlot serve` (`sandlot-cli`'s `serve.rs`)
//! composes them: it starts the record ([`Recording::start`]), merges [`router`] beside `/v1`
//! (authenticated by the REST adapter's layer like every route), and wraps the whole
//! application (REST, E2B, MCP alike) in the record's layers, outside every refusal:
//!
//! ```text
//! note → observe → audit → log_request → catch panic → refuse pages → authenticate → routes
//! ```
//!
//! A [`Note`] travels with each request: the layers outside authentication read what the
//! handling learned (who asked, which policy decisions were taken, which execution ran).

pub mod audit;
pub mod bundle;
pub mod events;
pub mod jobs;
pub mod kpis;
pub mod lineage;
pub mod observe;
pub mod webhooks;

#[cfg(test)]
mod fixtures;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use sandlot_runtime::Runtime;
use sandlot_store::Store;
use std::path::PathBuf;
use std::sync::Arc;

use sandlot_service::Governance;
use sandlot_service::Note;

/// Why the record could not start.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("the audit log: {0}")]
    Audit(#[from] sandlot_audit::AuditError),
    #[error("the store: {0}")]
    Store(#[from] sandlot_store::StoreError),
    #[error("telemetry: {0}")]
    Telemetry(String),
    #[error("{name}: {why}")]
    Setting { name: &'static str, why: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

/// What every component is started with.
#[derive(Clone)]
pub struct RecordContext {
    pub rt: Runtime,
    pub gov: Option<Arc<Governance>>,
    pub store: Arc<Store>,
    pub data_dir: PathBuf,
}

/// The record's components.
pub struct Recording {
    pub ctx: RecordContext,
    pub audit: audit::Audit,
    pub telemetry: observe::Telemetry,
    pub hub: events::Hub,
    pub webhooks: webhooks::Webhooks,
    pub jobs: jobs::Jobs,
    pub kpis: kpis::Kpis,
}

impl Recording {
    /// Starts every component; each reads its own settings from the environment.
    pub async fn start(ctx: RecordContext) -> Result<Arc<Self>, RecordError> {
        // An execution runs in the task of the request that asked for it (its note scoped
        // there), so the request's record names the execution it ran, on every interface.
        ctx.rt
            .on_event(Arc::new(|ev: &sandlot_types::LifecycleEvent| {
                if let (sandlot_types::LifecycleKind::Executed, Some(id)) =
                    (ev.kind, ev.execution_id.as_deref())
                {
                    Note::set_execution(id);
                }
            }));
        let audit = audit::Audit::start(&ctx).await?;
        let telemetry = observe::Telemetry::start(&ctx).await?;
        let hub = events::Hub::start(&ctx).await?;
        let webhooks = webhooks::Webhooks::start(&ctx).await?;
        let jobs = jobs::Jobs::start(&ctx).await?;
        let kpis = kpis::Kpis::start(&ctx, jobs.queued_reader()).await?;
        Ok(Arc::new(Self {
            ctx,
            audit,
            telemetry,
            hub,
            webhooks,
            jobs,
            kpis,
        }))
    }

    /// Before the runtime shuts down: no new jobs start, the audit log is sealed with a last
    /// checkpoint, webhooks get a moment to deliver what is queued, traces are flushed.
    pub async fn shutdown(&self) {
        self.jobs.shutdown().await;
        self.kpis.shutdown().await;
        self.hub.shutdown().await;
        self.webhooks.shutdown().await;
        self.audit.shutdown().await;
        self.telemetry.shutdown().await;
    }
}

/// The record's routes, served beside `/v1`'s (authenticated by the same layer).
pub fn router(rec: Arc<Recording>) -> Router {
    Router::new()
        .merge(audit::routes(rec.clone()))
        .merge(observe::routes(rec.clone()))
        .merge(events::routes(rec.clone()))
        .merge(webhooks::routes(rec.clone()))
        .merge(jobs::routes(rec.clone()))
        .merge(kpis::routes(rec.clone()))
        .merge(lineage::routes(rec.clone()))
        .merge(bundle::routes(rec))
}

/// Every route of the record under `/v1` (verb, path), which the OpenAPI document lists with
/// the rest (`/metrics` is outside `/v1` and outside the document). A test checks this list
/// against the routers' source.
pub const ROUTES: &[(&str, &str)] = &[
    ("get", "/v1/audit"),
    ("put", "/v1/audit"),
    ("get", "/v1/audit/checkpoint"),
    ("get", "/v1/audit/status"),
    ("post", "/v1/audit/seal"),
    ("get", "/v1/sandboxes/{id}/bundle"),
    ("get", "/v1/events"),
    ("post", "/v1/sandboxes/{id}/jobs"),
    ("get", "/v1/sandboxes/{id}/jobs"),
    ("get", "/v1/jobs/{id}"),
    ("delete", "/v1/jobs/{id}"),
    ("get", "/v1/jobs/{id}/events"),
    ("get", "/v1/kpis"),
    ("get", "/v1/lineage/artifact/{sha256}"),
    ("get", "/v1/lineage/execution/{id}"),
    ("get", "/v1/lineage/sandbox/{id}"),
    ("get", "/v1/lineage/sandbox/{id}/openlineage"),
    ("get", "/v1/sandboxes/{id}/metrics"),
    ("get", "/v1/metrics/sandboxes"),
    ("get", "/v1/webhooks"),
    ("post", "/v1/webhooks"),
    ("delete", "/v1/webhooks/{id}"),
];

/// The outermost record layer: gives the request its [`Note`] (also as a request extension).
pub async fn note_layer(mut req: Request, next: Next) -> Response {
    let note = Note::default();
    req.extensions_mut().insert(note.clone());
    note.scope(next.run(req)).await
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    /// `.route("/path", get(a).put(b))` calls in the record's routers, as (verb, path).
    fn routed(src: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for call in src.split(".route(\"").skip(1) {
            let Some((path, rest)) = call.split_once('"') else {
                continue;
            };
            let end = rest.find("))").map_or(rest.len(), |i| i + 1);
            for verb in ["get", "put", "post", "delete", "patch"] {
                let first = rest[..end].trim_start_matches([',', ' ', '\n']);
                if first.starts_with(&format!("{verb}("))
                    || rest[..end].contains(&format!(".{verb}("))
                {
                    out.push((verb.to_owned(), path.to_owned()));
                }
            }
        }
        out
    }

    #[test]
    fn routes_lists_what_the_routers_serve() {
        let sources = [
            include_str!("audit/routes.rs"),
            include_str!("bundle.rs"),
            include_str!("events.rs"),
            include_str!("jobs/routes.rs"),
            include_str!("kpis.rs"),
            include_str!("lineage.rs"),
            include_str!("observe.rs"),
            include_str!("webhooks.rs"),
        ];
        let served: BTreeSet<(String, String)> = sources
            .iter()
            .flat_map(|s| routed(s))
            .filter(|(_, p)| p.starts_with("/v1/"))
            .collect();
        let listed: BTreeSet<(String, String)> = super::ROUTES
            .iter()
            .map(|(v, p)| (v.to_string(), p.to_string()))
            .collect();
        assert_eq!(served, listed);
    }
}
