//! `GET /v1/events`: the stream of lifecycle events (created, executed, paused, resumed,
//! forked, restarted, stopped, killed, expired, contained, failed) as Server-Sent Events.
//!
//! Each event is `event: <kind>`, `id: <seq>` and the [`LifecycleEvent`] as JSON data. A caller
//! sees its own tenant's events only; the operator may ask for another tenant's
//! (`?tenant=NAME`) or every tenant's (`?tenant=*`). `?kinds=executed,killed` keeps those
//! kinds. Events come from the runtime's broadcast ([`sandlot_runtime::Runtime::subscribe`]),
//! which never waits for a slow reader: a stream that falls more than 8192 events behind gets
//! a `lagged` event saying how many it missed (`seq` numbers let a client see the gap too), and
//! carries on. Keep-alive comments every 15 s keep idle proxies from closing the stream.
//!
//! Streams are bounded per tenant (`SANDLOT_EVENT_STREAMS_PER_TENANT`, default 16; the jobs'
//! event streams count too): past it, `429 tenant_quota_exceeded` with `Retry-After`.

use super::{RecordContext, RecordError, Recording};
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use sandlot_http::ApiQuery;
use sandlot_http::Caller;
use sandlot_http::HttpError;
use sandlot_types::{ErrorCode, LifecycleEvent, LifecycleKind};
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;

/// Streams the operator (or, on a server without keys, any tenant) may hold open at once,
/// unless `SANDLOT_EVENT_STREAMS_PER_TENANT` says; with keys, other tenants have their
/// `max_event_streams`.
const DEFAULT_STREAMS_PER_TENANT: usize = 16;
/// How often an idle stream gets a keep-alive comment (and so how soon a stream whose client
/// left is noticed and its slot freed: within about two of these).
const STREAM_KEEP_ALIVE: Duration = Duration::from_secs(2);

/// Every lifecycle kind, as the API spells them.
pub const KINDS: [LifecycleKind; 11] = [
    LifecycleKind::Created,
    LifecycleKind::Executed,
    LifecycleKind::Paused,
    LifecycleKind::Resumed,
    LifecycleKind::Forked,
    LifecycleKind::Restarted,
    LifecycleKind::Stopped,
    LifecycleKind::Killed,
    LifecycleKind::Expired,
    LifecycleKind::Contained,
    LifecycleKind::Failed,
];

/// The review events' kinds (`sandlot_service::reviews::ReviewEvent`): a held action was
/// recorded, or decided (approved, denied, or denied by its timeout).
pub const REVIEW_KINDS: [&str; 2] = ["review.created", "review.decided"];

/// The kind named `s`, if any.
pub fn kind_named(s: &str) -> Option<LifecycleKind> {
    KINDS.into_iter().find(|k| k.as_str() == s)
}

/// Parses a list of kind names (`executed,killed`); empty means every kind.
pub fn parse_kinds<'a>(
    names: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<LifecycleKind>, HttpError> {
    let mut out = Vec::new();
    for name in names.into_iter().map(str::trim).filter(|n| !n.is_empty()) {
        match kind_named(name) {
            Some(k) if !out.contains(&k) => out.push(k),
            Some(_) => {}
            None => {
                let all: Vec<&str> = KINDS.iter().map(|k| k.as_str()).collect();
                return Err(HttpError::new(
                    ErrorCode::InvalidArgument,
                    format!(
                        "unknown event kind {:?}; kinds are {}",
                        name.chars().take(64).collect::<String>(),
                        all.join(", ")
                    ),
                ));
            }
        }
    }
    Ok(out)
}

/// The event streams: how many each tenant holds open.
pub struct Hub {
    open: Arc<Mutex<HashMap<String, usize>>>,
    per_tenant: usize,
    /// Set at shutdown: every open stream ends, so the server's drain does not wait for them.
    closing: tokio::sync::watch::Sender<bool>,
}

/// One open stream, counted against its tenant until dropped: against its share
/// (`max_event_streams`), or the hub's own bound (see [`Hub::admit`]).
pub enum StreamSlot {
    Share(Option<sandlot_tenancy::Slot>),
    Local(LocalSlot),
}

pub struct LocalSlot {
    open: Arc<Mutex<HashMap<String, usize>>>,
    tenant: String,
}

impl Drop for LocalSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = open.get_mut(&self.tenant) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.tenant);
            }
        }
    }
}

impl Hub {
    pub async fn start(_ctx: &RecordContext) -> Result<Self, RecordError> {
        let per_tenant = std::env::var("SANDLOT_EVENT_STREAMS_PER_TENANT")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .filter(|n| *n > 0)
            .unwrap_or(DEFAULT_STREAMS_PER_TENANT);
        Ok(Self {
            open: Arc::default(),
            per_tenant,
            closing: tokio::sync::watch::channel(false).0,
        })
    }

    /// Ends every open stream (at shutdown).
    pub async fn shutdown(&self) {
        self.closing.send_replace(true);
    }

    /// Resolves when the server shuts down.
    pub(crate) fn closed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.closing.subscribe();
        async move {
            let _ = rx.wait_for(|closing| *closing).await;
        }
    }

    /// A slot for one more stream of `who`'s tenant, or the 429 to answer. With keys a
    /// tenant's `max_event_streams` bounds it; the operator's streams, and every stream on a
    /// server without keys, are bounded by the hub's own `per_tenant`.
    pub(crate) fn admit(
        &self,
        gov: Option<&sandlot_service::Governance>,
        who: &sandlot_types::Principal,
    ) -> Result<StreamSlot, HttpError> {
        if let Some(g) = gov {
            if sandlot_service::shares::capped(g, who)
                .map_err(HttpError)?
                .is_some()
            {
                return sandlot_service::shares::open(
                    gov,
                    who,
                    sandlot_tenancy::Share::EventStreams,
                )
                .map(StreamSlot::Share)
                .map_err(HttpError);
            }
        }
        // The operator (and everyone on a server without keys): the hub's own bound.
        self.admit_local(&who.tenant).map(StreamSlot::Local)
    }

    /// Without keys: at most `per_tenant` streams per tenant.
    fn admit_local(&self, tenant: &str) -> Result<LocalSlot, HttpError> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let n = open.entry(tenant.to_owned()).or_default();
        if *n >= self.per_tenant {
            return Err(HttpError::new(
                ErrorCode::TenantQuotaExceeded,
                format!(
                    "tenant {tenant} already holds {} event streams open; close one or retry in 5 s",
                    self.per_tenant
                ),
            ));
        }
        *n += 1;
        Ok(LocalSlot {
            open: self.open.clone(),
            tenant: tenant.to_owned(),
        })
    }
}

pub(crate) fn routes(rec: Arc<Recording>) -> Router {
    Router::new()
        .route("/v1/events", get(stream))
        .with_state(rec)
}

#[derive(Debug, Deserialize, Default)]
struct EventsQuery {
    /// Comma-separated kinds; every kind when absent.
    kinds: Option<String>,
    /// Whose events: the caller's tenant when absent; another one or `*` (all) for the
    /// operator only.
    tenant: Option<String>,
}

/// Which tenants' events a stream carries.
#[derive(Clone)]
enum Scope {
    All,
    Tenant(String),
}

async fn stream(
    State(rec): State<Arc<Recording>>,
    caller: Caller,
    ApiQuery(q): ApiQuery<EventsQuery>,
) -> Result<Response, HttpError> {
    let scope = match q.tenant.as_deref() {
        None => Scope::Tenant(caller.tenant().to_owned()),
        Some(t) if t == caller.tenant() => Scope::Tenant(t.to_owned()),
        Some(t) if caller.is_operator() => match t {
            "*" => Scope::All,
            t => Scope::Tenant(t.to_owned()),
        },
        Some(_) => {
            return Err(HttpError::new(
                ErrorCode::Forbidden,
                "only the operator may stream another tenant's events",
            ))
        }
    };
    let names: Vec<&str> = q
        .kinds
        .as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect();
    let (review_names, life_names): (Vec<&str>, Vec<&str>) =
        names.iter().partition(|n| n.starts_with("review."));
    if let Some(bad) = review_names.iter().find(|n| !REVIEW_KINDS.contains(n)) {
        return Err(HttpError::new(
            ErrorCode::InvalidArgument,
            format!(
                "unknown event kind {:?}; review kinds are {}",
                bad.chars().take(64).collect::<String>(),
                REVIEW_KINDS.join(", ")
            ),
        ));
    }
    let kinds = parse_kinds(life_names)?;
    // No kinds named: every kind, lifecycle and review alike.
    let every = names.is_empty();
    let review_kinds: Vec<String> = review_names.iter().map(|n| (*n).to_owned()).collect();
    let slot = rec.hub.admit(rec.ctx.gov.as_deref(), &caller.0)?;
    let mut rx = rec.ctx.rt.subscribe();
    // Review events come from the governance (a server without it holds nothing).
    let mut reviews = rec.ctx.gov.as_ref().map(|g| g.reviews.subscribe());
    let in_scope = {
        let scope = scope.clone();
        move |tenant: &str| match &scope {
            Scope::All => true,
            Scope::Tenant(t) => tenant == t,
        }
    };
    let wanted = {
        let in_scope = in_scope.clone();
        move |ev: &LifecycleEvent| (every || kinds.contains(&ev.kind)) && in_scope(&ev.tenant)
    };
    let wanted_review = move |ev: &sandlot_service::reviews::ReviewEvent| {
        (every || review_kinds.iter().any(|k| k == ev.kind)) && in_scope(&ev.tenant)
    };
    let closed = rec.hub.closed();
    let events = async_stream::stream! {
        let _slot = slot;
        tokio::pin!(closed);
        loop {
            let review_next = async {
                match reviews.as_mut() {
                    Some(r) => r.recv().await,
                    None => std::future::pending().await,
                }
            };
            let next = tokio::select! {
                next = rx.recv() => next,
                review = review_next => {
                    match review {
                        Ok(ev) if wanted_review(&ev) => {
                            yield Ok::<_, std::convert::Infallible>(review_event_of(&ev));
                        }
                        Ok(_) => {}
                        Err(RecvError::Lagged(n)) => {
                            yield Ok(Event::default()
                                .event("lagged")
                                .data(serde_json::json!({ "missed": n, "of": "reviews" }).to_string()));
                        }
                        // The governance lives as long as the server.
                        Err(RecvError::Closed) => reviews = None,
                    }
                    continue;
                }
                () = &mut closed => return,
            };
            match next {
                Ok(ev) if wanted(&ev) => yield Ok::<_, std::convert::Infallible>(event_of(&ev)),
                Ok(_) => {}
                Err(RecvError::Lagged(n)) => {
                    yield Ok(Event::default()
                        .event("lagged")
                        .data(serde_json::json!({ "missed": n }).to_string()));
                }
                Err(RecvError::Closed) => return,
            }
        }
    };
    // A stream whose client went away is only noticed when a write to it fails, and until
    // then it holds its tenant's slot: a short keep-alive frees the slot of a closed console
    // tab (or a reloaded page) within a few seconds rather than half a minute.
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(STREAM_KEEP_ALIVE))
        .into_response())
}

/// The SSE event of a review event: `event: review.created|review.decided`, the
/// [`sandlot_service::reviews::ReviewEvent`] as JSON data, no `id` (review events are not
/// numbered with the lifecycle's `seq`).
pub fn review_event_of(ev: &sandlot_service::reviews::ReviewEvent) -> Event {
    Event::default()
        .event(ev.kind)
        .data(serde_json::to_string(ev).unwrap_or_else(|_| "null".into()))
}

/// The SSE event of a lifecycle event.
pub fn event_of(ev: &LifecycleEvent) -> Event {
    Event::default()
        .id(ev.seq.to_string())
        .event(ev.kind.as_str())
        .data(serde_json::to_string(ev).unwrap_or_else(|_| "null".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_and_unknown_ones_are_refused() {
        assert!(parse_kinds("".split(',')).unwrap().is_empty());
        assert_eq!(
            parse_kinds("executed, killed,executed".split(',')).unwrap(),
            [LifecycleKind::Executed, LifecycleKind::Killed]
        );
        let e = parse_kinds("executed,nope".split(',')).unwrap_err();
        assert_eq!(e.0.code, ErrorCode::InvalidArgument);
        assert!(e.0.message.contains("nope"));
        for k in KINDS {
            assert_eq!(kind_named(k.as_str()), Some(k));
        }
    }

    #[test]
    fn streams_are_bounded_per_tenant_and_freed_when_dropped() {
        let hub = Hub {
            open: Arc::default(),
            per_tenant: 2,
            closing: tokio::sync::watch::channel(false).0,
        };
        let a = hub.admit_local("t1").unwrap();
        let _b = hub.admit_local("t1").unwrap();
        let e = hub.admit_local("t1").err().unwrap();
        assert_eq!(e.0.code, ErrorCode::TenantQuotaExceeded);
        assert!(e.0.message.contains("retry in 5 s"));
        // Another tenant is not held back by this one.
        let _c = hub.admit_local("t2").unwrap();
        drop(a);
        let _d = hub.admit_local("t1").unwrap();
    }
}
