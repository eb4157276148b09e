//! What the REST router needs beyond the service's [`sandlot_service::Backend`]: forwarding
//! an HTTP request into a sandbox's port, which only an HTTP adapter has to hand over.

use sandlot_runtime::Runtime;
use sandlot_types::ApiError;
use std::future::Future;

/// [`sandlot_service::Backend`] plus the port proxy. The router is generic over it so its
/// tests can script every route; [`Runtime`] is the only implementation outside tests.
pub(crate) trait Backend: sandlot_service::Backend {
    /// Forwards `req` to port `port` of sandbox `id` as `path_and_query` (`crate::ports`).
    fn proxy_port(
        &self,
        id: &str,
        port: u16,
        req: axum::extract::Request,
        path_and_query: String,
    ) -> impl Future<Output = Result<axum::response::Response, ApiError>> + Send {
        let _ = (id, port, req, path_and_query);
        async { Err(sandlot_service::backend::not_served()) }
    }
}

impl Backend for Runtime {
    async fn proxy_port(
        &self,
        id: &str,
        port: u16,
        req: axum::extract::Request,
        path_and_query: String,
    ) -> Result<axum::response::Response, ApiError> {
        sandlot_ports::proxy(self, id, port, req, &path_and_query).await
    }
}
