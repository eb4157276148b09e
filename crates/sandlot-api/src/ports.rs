//! The port routes: `/v1/sandboxes/{id}/ports/{port}[/...]`, port URLs
//! (`/v1/ports/{token}/...`) and their rotation; the forwarding itself is `sandlot_ports`'.

use crate::backend::Backend;
use crate::error::HttpError;
use crate::extract::ApiPath;
use crate::AppState;
use axum::extract::{Request, State};
use axum::http::Uri;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

// The routes: `/v1/sandboxes/{id}/ports/{port}`, with or without a path after it.

#[derive(Deserialize)]
pub(crate) struct Target {
    id: String,
    port: String,
}

/// Any method on `/v1/sandboxes/{id}/ports/{port}[/...]`.
pub(crate) async fn forward<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath(t): ApiPath<Target>,
    mut req: Request,
) -> Response {
    // The API key that opened this route is sandlot's, not the app's: code in the sandbox
    // never sees it. (Through a capability URL, `Authorization` is the app's own.)
    if st.gov.is_some() {
        let h = req.headers_mut();
        h.remove(axum::http::header::AUTHORIZATION);
        h.remove("x-api-key");
    }
    forward_to(st, t, req).await
}

#[derive(Deserialize)]
pub(crate) struct TokenTarget {
    token: String,
    port: String,
}

/// Any method on `/v1/ports/{token}/{port}[/...]`: the capability URL of one sandbox's ports
/// (see `sandlot_service::Governance::port_token`), for browsers that cannot send an API key.
pub(crate) async fn forward_token<B: Backend>(
    State(st): State<AppState<B>>,
    ApiPath(t): ApiPath<TokenTarget>,
    req: Request,
) -> Response {
    let id = st
        .gov
        .as_deref()
        .and_then(|g| g.sandbox_of_port_token(&t.token));
    let Some(id) = id else {
        return HttpError::new(
            sandlot_types::ErrorCode::SandboxNotFound,
            "no sandbox for this port token",
        )
        .into_response();
    };
    forward_to(st, Target { id, port: t.port }, req).await
}

async fn forward_to<B: Backend>(st: AppState<B>, t: Target, req: Request) -> Response {
    let port = match t.port.parse::<u16>() {
        Ok(p) if p > 0 => p,
        _ => {
            return HttpError::invalid_request(format!(
                "port must be a number from 1 to 65535, not {:?}",
                t.port
            ))
            .into_response()
        }
    };
    let path_and_query = forwarded_target(req.uri());
    match st
        .backend
        .proxy_port(&t.id, port, req, path_and_query)
        .await
    {
        Ok(resp) => resp,
        Err(e) => HttpError(e).into_response(),
    }
}

/// What follows `/v1/sandboxes/{id}/ports/{port}` in the client's URI, as it was sent (still
/// percent-encoded: an encoded `/` or `?` reaches the app encoded), with the query; `/` when
/// nothing follows.
fn forwarded_target(uri: &Uri) -> String {
    // "", "v1", "sandboxes", id, "ports", port, then the rest; or, for a capability URL,
    // "", "v1", "ports", token, port, then the rest.
    let path = uri.path();
    let rest = if path.starts_with("/v1/ports/") {
        path.splitn(6, '/').nth(5)
    } else {
        path.splitn(7, '/').nth(6)
    };
    let mut target = format!("/{}", rest.unwrap_or(""));
    if let Some(q) = uri.query() {
        target.push('?');
        target.push_str(q);
    }
    target
}

/// `POST /v1/sandboxes/{id}/ports/rotate` answer.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct RotatedPortToken {
    pub sandbox_id: String,
    /// The new capability token (`/v1/ports/{port_token}/{port}/`); every earlier one is void.
    /// Absent for a sandbox that exposes no ports (its E2B tokens were rotated all the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_token: Option<String>,
    /// When it stops working (RFC 3339), when the server's port URLs expire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

/// `POST /v1/sandboxes/{id}/ports/rotate`: moves the sandbox's credential epoch on, so every
/// port URL and every E2B envd and traffic token handed out before stops working at once;
/// answers the new port token when the sandbox exposes ports (E2B clients get their new
/// tokens from E2B's connect).
pub(crate) async fn rotate<B: Backend>(
    State(st): State<AppState<B>>,
    crate::extract::ApiPath(id): crate::extract::ApiPath<String>,
) -> Result<axum::Json<RotatedPortToken>, HttpError> {
    let sb = st.backend.get_sandbox(&id).await?;
    let Some(gov) = st.gov.as_deref() else {
        return Err(HttpError::invalid_request(
            "this server hands out no port URLs (it runs without API keys)",
        ));
    };
    let port_token = gov.rotate_port_token(&id).map_err(|e| {
        HttpError::new(
            sandlot_types::ErrorCode::Internal,
            format!("could not rotate the sandbox's tokens: {e}"),
        )
    })?;
    let exposes = !sb.ports.is_empty() || sb.all_ports;
    Ok(axum::Json(RotatedPortToken {
        sandbox_id: id,
        port_token: exposes.then_some(port_token),
        expires_at: gov.port_token_expiry().filter(|_| exposes),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_keep_the_clients_encoding_and_query() {
        let t = |s: &str| forwarded_target(&s.parse::<Uri>().unwrap());
        assert_eq!(t("/v1/sandboxes/sb/ports/80"), "/");
        assert_eq!(t("/v1/sandboxes/sb/ports/80/"), "/");
        assert_eq!(t("/v1/sandboxes/sb/ports/80?a=1"), "/?a=1");
        assert_eq!(t("/v1/sandboxes/sb/ports/80/x/y.js?v=2"), "/x/y.js?v=2");
        assert_eq!(t("/v1/ports/sb.abc/80"), "/");
        assert_eq!(t("/v1/ports/sb.abc/80/"), "/");
        assert_eq!(t("/v1/ports/sb.abc/80/x/y.js?v=2"), "/x/y.js?v=2");
        assert_eq!(t("/v1/ports/sb.abc/80/page.html"), "/page.html");
        assert_eq!(
            t("/v1/sandboxes/sb/ports/80/a%2Fb/%2e%2e/"),
            "/a%2Fb/%2e%2e/"
        );
        assert_eq!(t("/v1/sandboxes/sb/ports/80//evil.test/"), "//evil.test/");
    }
}
