//! A sandbox's run as a bundle to replay (skeleton: the lineage work fills it in).

use super::Recording;
use axum::Router;
use std::sync::Arc;

pub(crate) fn routes(_rec: Arc<Recording>) -> Router {
    Router::new()
}
