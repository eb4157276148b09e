//! Durable jobs (skeleton: the jobs work fills it in).

use super::{RecordContext, RecordError, Recording};
use axum::Router;
use std::sync::Arc;

pub struct Jobs {}

impl Jobs {
    pub async fn start(_ctx: &RecordContext) -> Result<Self, RecordError> {
        Ok(Self {})
    }

    pub async fn shutdown(&self) {}
}

pub(crate) fn routes(_rec: Arc<Recording>) -> Router {
    Router::new()
}
