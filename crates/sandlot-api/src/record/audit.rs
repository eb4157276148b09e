//! Every request's audit record (skeleton: the audit work fills it in).

use super::{RecordContext, RecordError, Recording};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use std::sync::Arc;

/// The server's audit log.
pub struct Audit {}

impl Audit {
    pub async fn start(_ctx: &RecordContext) -> Result<Self, RecordError> {
        Ok(Self {})
    }

    pub async fn shutdown(&self) {}
}

/// Records the request in the audit log.
pub(crate) async fn middleware(
    State(_rec): State<Arc<Recording>>,
    req: Request,
    next: Next,
) -> Response {
    next.run(req).await
}

pub(crate) fn routes(_rec: Arc<Recording>) -> Router {
    Router::new()
}
