//! The stream of lifecycle events (skeleton: the events work fills it in).

use super::{RecordContext, RecordError, Recording};
use axum::Router;
use std::sync::Arc;

pub struct Hub {}

impl Hub {
    pub async fn start(_ctx: &RecordContext) -> Result<Self, RecordError> {
        Ok(Self {})
    }
}

pub(crate) fn routes(_rec: Arc<Recording>) -> Router {
    Router::new()
}
