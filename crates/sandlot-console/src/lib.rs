//! sandlot's web console, served by `sandlot serve` at `/console`: plain HTML pages and vanilla
//! JavaScript modules (`assets/`, embedded in the binary; no Node at build or run time, nothing
//! loaded from elsewhere) that call the same `/v1` API every other client calls, so a console
//! user sees exactly what their key sees.
//!
//! The whole story:
//!
//! 1. `GET /console` without a session is the sign-in page (one field: an API key).
//!    `POST /console/session` (form or JSON) authenticates the key exactly as `/v1` does and
//!    answers `Set-Cookie: sandlot_session=<256 random bits>; HttpOnly; SameSite=Strict;
//!    Path=/; Max-Age=...` (`Secure` when configured, behind TLS). The server keeps the key's
//!    id (not the key) under the sha256 of the session id, in memory and in the store, so a
//!    session survives a restart ([`sessions`]); the cookie holds only the id.
//! 2. Each session has a CSRF token, put in the pages' `<meta name="sandlot-csrf">` (never in a
//!    cookie). The REST adapter's authentication asks [`Console::authenticate`] for a request
//!    with the cookie and no `Authorization`: it is accepted only with `X-Sandlot-CSRF` equal to
//!    the token, an `Origin` (when sent) equal to the server's own and a `Sec-Fetch-Site` (when
//!    sent) of `same-origin`; and the key is authenticated again, so a revoked key ends its
//!    sessions at their next use. The token is asked of every method, reads included: pages an
//!    app serves through `/v1/sandboxes/{id}/ports/` share this origin, so `SameSite` and
//!    `Origin` alone cannot tell the console's requests from theirs; only the token can.
//! 3. Pages that carry the token are served to top-level navigations only (`Sec-Fetch-Dest:
//!    document`, or no fetch metadata at all), never framed (`frame-ancestors 'none'`), and
//!    with `Cross-Origin-Opener-Policy: same-origin`, so a same-origin page that opens one gets
//!    no handle on its document.
//! 4. Every console response carries a strict CSP (no inline script or style; the scripts are
//!    files), `nosniff`, `no-referrer`, and `no-store` on HTML. Sandbox output is
//!    attacker-controlled: the scripts build the DOM with `textContent` only, render figures
//!    as `data:` images and HTML output in a sandboxed, script-less frame.

pub mod sessions;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Json, Router};
use sandlot_http::HttpError;
use sandlot_service::Governance;
use sandlot_types::{ErrorCode, Principal};
use serde::Deserialize;
use sessions::{same_token, Limits, Sessions};
use std::sync::Arc;

/// The session cookie's name.
pub const COOKIE: &str = "sandlot_session";
/// The header that carries the session's CSRF token.
pub const CSRF_HEADER: &str = "x-sandlot-csrf";

/// The policy every console response carries.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
    img-src 'self' data: blob:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; \
    form-action 'self'";

/// Largest sign-in body (a key is 44 characters).
const MAX_SIGN_IN_BYTES: usize = 4096;

/// How the console is served.
#[derive(Debug, Clone, Default)]
pub struct ConsoleConfig {
    /// Mark the cookie `Secure` and expect `https://` origins: set when sandlot is reached
    /// through a TLS-terminating proxy (sandlot itself serves plain HTTP).
    pub secure_cookie: bool,
    pub limits: Limits,
}

/// Who owns a sandbox id (its tenant), for the sandbox page's 404.
pub type SandboxTenant = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The console: its sessions and what it needs to check them.
pub struct Console {
    sessions: Sessions,
    gov: Option<Arc<Governance>>,
    cfg: ConsoleConfig,
    sandbox_tenant: SandboxTenant,
}

impl Console {
    /// Without a governance (`SANDLOT_AUTH=off`) there are no keys to sign in with: the
    /// console says so and serves nothing else.
    pub fn new(
        gov: Option<Arc<Governance>>,
        cfg: ConsoleConfig,
        sandbox_tenant: SandboxTenant,
    ) -> Arc<Self> {
        let sessions = match &gov {
            Some(g) => Sessions::open(cfg.limits, g.store.clone()),
            None => Sessions::new(cfg.limits),
        };
        Arc::new(Self {
            sessions,
            gov,
            cfg,
            sandbox_tenant,
        })
    }

    /// The principal of a `/v1` request that carries the session cookie, or why it is refused
    /// (401 `unauthenticated` for a session that ended, 403 `csrf_failed` for a request the
    /// console's pages did not make). `None` when the request has no session cookie: the
    /// caller goes on with its bearer key (and the cookie is never looked at when a request
    /// has `Authorization` or `X-Api-Key`: the caller checks that first).
    pub fn authenticate(&self, headers: &HeaderMap) -> Option<Result<Principal, HttpError>> {
        let ids = session_cookies(headers);
        (!ids.is_empty()).then(|| self.check(&ids, headers))
    }

    /// A browser sends several cookies of one name when a page set another with a narrower
    /// `Path` (a same-origin app's script can): the session used is the one whose token the
    /// request carries, so a planted session of someone else's is never acted as.
    fn check(&self, ids: &[&str], headers: &HeaderMap) -> Result<Principal, HttpError> {
        let gov = self.gov.as_deref().ok_or_else(session_ended)?;
        self.same_origin(headers)?;
        let sent = headers
            .get(CSRF_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let mut live = false;
        for id in ids {
            let Some(session) = self.sessions.resolve(id) else {
                continue;
            };
            live = true;
            if same_token(sent, &session.csrf) {
                return self.principal_of_key(gov, id, &session.key_id);
            }
        }
        if !live {
            return Err(session_ended());
        }
        Err(csrf_failed(if sent.is_empty() {
            "a request with the console's session cookie needs its X-Sandlot-CSRF header"
        } else {
            "the X-Sandlot-CSRF header does not match the console session"
        }))
    }

    /// The principal of the session's key, looked up now; a key revoked (or gone) ends it.
    fn principal_of_key(
        &self,
        gov: &Governance,
        id: &str,
        key_id: &str,
    ) -> Result<Principal, HttpError> {
        gov.keys.principal_by_id(key_id).map_err(|e| {
            self.sessions.remove(id);
            HttpError::new(
                ErrorCode::Unauthenticated,
                format!("the console session ended: {e}"),
            )
        })
    }

    /// Refuses a request a page of another origin made: its `Origin` (sent by browsers on every
    /// cross-origin request and every non-GET) must be this server's, and its fetch metadata
    /// (when sent) must say same-origin.
    fn same_origin(&self, headers: &HeaderMap) -> Result<(), HttpError> {
        // Every value counts: a request with two of either header is judged by the worst.
        let cross_site = headers
            .get_all("sec-fetch-site")
            .iter()
            .any(|site| site.as_bytes() != b"same-origin");
        if cross_site {
            return Err(csrf_failed(
                "the console's cookie is accepted from its own pages only",
            ));
        }
        let own = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(|host| format!("{}://{host}", self.scheme()));
        // Under `Referrer-Policy: no-referrer` a browser sends `Origin: null` on its page's
        // own form posts; that is taken as the page's own only when the browser's fetch
        // metadata says same-origin (checked above when present; scripts cannot set it, and an
        // opaque origin, a sandboxed frame, is cross-site there).
        let vouched = headers.contains_key("sec-fetch-site");
        let foreign = headers.get_all(header::ORIGIN).iter().any(|origin| {
            let same = match (origin.to_str(), &own) {
                (Ok("null"), _) => vouched,
                (Ok(o), Some(own)) => o.eq_ignore_ascii_case(own),
                _ => false,
            };
            !same
        });
        if foreign {
            return Err(csrf_failed(
                "the request's Origin is not this server's: the console's cookie is accepted \
                 from its own pages only",
            ));
        }
        Ok(())
    }

    fn scheme(&self) -> &'static str {
        if self.cfg.secure_cookie {
            "https"
        } else {
            "http"
        }
    }

    /// The live session of a page request and its principal.
    /// Only with exactly one session cookie: of several (see [`Console::check`]) the page
    /// could not tell whose session to show, and shows the sign-in page.
    fn page_session(&self, headers: &HeaderMap) -> Option<(Principal, String)> {
        let gov = self.gov.as_deref()?;
        let ids = session_cookies(headers);
        let [id] = ids.as_slice() else {
            return None;
        };
        let session = self.sessions.resolve(id)?;
        let principal = self.principal_of_key(gov, id, &session.key_id).ok()?;
        Some((principal, session.csrf))
    }

    fn cookie(&self, value: &str, max_age: u64) -> HeaderValue {
        let secure = if self.cfg.secure_cookie {
            "; Secure"
        } else {
            ""
        };
        let text = format!(
            "{COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age}{secure}"
        );
        HeaderValue::from_str(&text).expect("a cookie of hex digits is a header value")
    }
}

/// Whether `headers` carry a console session cookie (what lets a page's request through the
/// API's refusal of page requests, to be checked by [`Console::authenticate`]).
pub fn has_session_cookie(headers: &HeaderMap) -> bool {
    !session_cookies(headers).is_empty()
}

/// The distinct values of the session cookie, from every `Cookie` header.
fn session_cookies(headers: &HeaderMap) -> Vec<&str> {
    let mut ids: Vec<&str> = Vec::new();
    let values = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim());
    for v in values {
        if !ids.contains(&v) {
            ids.push(v);
        }
    }
    ids
}

fn session_ended() -> HttpError {
    HttpError::new(
        ErrorCode::Unauthenticated,
        "the console session ended (signed out, expired, or its key was revoked); sign in again",
    )
}

fn csrf_failed(message: &str) -> HttpError {
    HttpError::new(ErrorCode::CsrfFailed, message)
}

/// The console's routes, every response with the security headers.
pub fn router(console: Arc<Console>) -> Router {
    // Each route answers methods it does not serve itself (405), so that answer has the
    // console's headers too.
    Router::new()
        .route("/console", get(home).fallback(method_not_allowed))
        .route(
            "/console/session",
            axum::routing::post(sign_in)
                .delete(sign_out)
                .fallback(method_not_allowed),
        )
        .route(
            "/console/sandboxes/{id}",
            get(sandbox_page).fallback(method_not_allowed),
        )
        .route("/console/kpis", get(kpis_page).fallback(method_not_allowed))
        .route(
            "/console/policy",
            get(policy_page).fallback(method_not_allowed),
        )
        .route(
            "/console/approvals",
            get(approvals_page).fallback(method_not_allowed),
        )
        .route(
            "/console/record",
            get(record_page).fallback(method_not_allowed),
        )
        .route(
            "/console/assets/{name}",
            get(asset).fallback(method_not_allowed),
        )
        // Anything else under /console is the console's own 404, with its headers.
        .route("/console/{*rest}", axum::routing::any(unknown_page))
        .with_state(console)
        .layer(axum::middleware::from_fn(security_headers))
}

/// The headers of every console response (see the module docs, point 4).
async fn security_headers(req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let is_html = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/html"));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        HeaderName::from_static("cross-origin-opener-policy"),
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        HeaderName::from_static("cross-origin-resource-policy"),
        HeaderValue::from_static("same-origin"),
    );
    let cache = if is_html { "no-store" } else { "no-cache" };
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    resp
}

// ---------------------------------------------------------------------------------------------
// Pages.

const PAGE: &str = include_str!("../assets/page.html");
const SIGN_IN: &str = include_str!("../assets/sign-in.html");
const SANDBOXES: &str = include_str!("../assets/sandboxes.html");
const SANDBOX: &str = include_str!("../assets/sandbox.html");
const NOT_FOUND: &str = include_str!("../assets/not-found.html");
const KPIS: &str = include_str!("../assets/kpis.html");
const POLICY: &str = include_str!("../assets/policy.html");
const APPROVALS: &str = include_str!("../assets/approvals.html");
const RECORD: &str = include_str!("../assets/record.html");
const NO_AUTH: &str = include_str!("../assets/no-auth.html");

/// One page: the frame (`page.html`) around `main`, with its script and, signed in, the nav,
/// the CSRF token and who is signed in.
struct Page<'a> {
    title: &'a str,
    main: &'a str,
    script: &'a str,
    signed_in: Option<(&'a Principal, &'a str)>,
    sandbox: &'a str,
}

impl Page<'_> {
    fn render(&self, status: StatusCode) -> Response {
        let (csrf, who, nav_hidden) = match self.signed_in {
            Some((p, csrf)) => (
                csrf.to_owned(),
                format!("{} · {} ({:?})", p.tenant, p.key_prefix, p.role).to_lowercase(),
                "",
            ),
            None => (String::new(), String::new(), " hidden"),
        };
        // The page's own fragment goes in last, so nothing in it is taken for a placeholder.
        let html = PAGE
            .replace("{{title}}", &escape(self.title))
            .replace("{{script}}", &escape(self.script))
            .replace("{{csrf}}", &escape(&csrf))
            .replace("{{who}}", &escape(&who))
            .replace("{{nav_hidden}}", nav_hidden)
            .replace("{{sandbox}}", &escape(self.sandbox))
            .replace("{{main}}", self.main);
        (
            status,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            html,
        )
            .into_response()
    }
}

/// Pages that carry the CSRF token go to top-level navigations only: a script's `fetch` of
/// the page (`Sec-Fetch-Dest: empty`) or a frame gets a 403 and no token.
fn is_navigation(headers: &HeaderMap) -> bool {
    headers
        .get("sec-fetch-dest")
        .is_none_or(|v| v.as_bytes() == b"document")
}

fn not_a_navigation() -> Response {
    (
        StatusCode::FORBIDDEN,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "console pages are served to top-level navigations only\n",
    )
        .into_response()
}

fn no_auth_page() -> Response {
    Page {
        title: "Console unavailable",
        main: NO_AUTH,
        script: "console.js",
        signed_in: None,
        sandbox: "",
    }
    .render(StatusCode::SERVICE_UNAVAILABLE)
}

fn sign_in_page(status: StatusCode, error: Option<&str>) -> Response {
    let main = SIGN_IN.replace("{{error}}", &escape(error.unwrap_or("")));
    let main = main.replace(
        "{{error_hidden}}",
        if error.is_some() { "" } else { " hidden" },
    );
    Page {
        title: "Sign in",
        main: &main,
        script: "sign-in.js",
        signed_in: None,
        sandbox: "",
    }
    .render(status)
}

/// `GET /console`: the sandboxes, or the sign-in page.
async fn home(State(c): State<Arc<Console>>, headers: HeaderMap) -> Response {
    if c.gov.is_none() {
        return no_auth_page();
    }
    let Some((principal, csrf)) = c.page_session(&headers) else {
        return sign_in_page(StatusCode::OK, None);
    };
    if !is_navigation(&headers) {
        return not_a_navigation();
    }
    Page {
        title: "Sandboxes",
        main: SANDBOXES,
        script: "sandboxes.js",
        signed_in: Some((&principal, &csrf)),
        sandbox: "",
    }
    .render(StatusCode::OK)
}

/// `GET /console/sandboxes/{id}`: one sandbox's notebook and files; another tenant's sandbox
/// is a 404, exactly as an id never seen.
async fn sandbox_page(
    State(c): State<Arc<Console>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if c.gov.is_none() {
        return no_auth_page();
    }
    let Some((principal, csrf)) = c.page_session(&headers) else {
        return Redirect::to("/console").into_response();
    };
    if !is_navigation(&headers) {
        return not_a_navigation();
    }
    let visible = (c.sandbox_tenant)(&id).is_some_and(|t| t == principal.tenant);
    if !visible {
        return Page {
            title: "Not found",
            main: NOT_FOUND,
            script: "console.js",
            signed_in: Some((&principal, &csrf)),
            sandbox: "",
        }
        .render(StatusCode::NOT_FOUND);
    }
    Page {
        title: "Sandbox",
        main: SANDBOX,
        script: "sandbox.js",
        signed_in: Some((&principal, &csrf)),
        sandbox: &id,
    }
    .render(StatusCode::OK)
}

/// A page of the signed-in console that shows what the session's key may read through `/v1`
/// (the page itself holds no data: its script asks the API, which scopes every answer).
fn signed_in_page(
    c: &Console,
    headers: &HeaderMap,
    title: &str,
    main: &str,
    script: &str,
) -> Response {
    if c.gov.is_none() {
        return no_auth_page();
    }
    let Some((principal, csrf)) = c.page_session(headers) else {
        return Redirect::to("/console").into_response();
    };
    if !is_navigation(headers) {
        return not_a_navigation();
    }
    Page {
        title,
        main,
        script,
        signed_in: Some((&principal, &csrf)),
        sandbox: "",
    }
    .render(StatusCode::OK)
}

/// `GET /console/kpis`: the server's KPIs, drawn from `/v1/kpis` (the page tells a key that
/// is not the operator's that they are the operator's).
async fn kpis_page(State(c): State<Arc<Console>>, headers: HeaderMap) -> Response {
    signed_in_page(&c, &headers, "KPIs", KPIS, "kpis.js")
}

/// `GET /console/policy`: the set in force, its history and diffs (operator), decisions, and
/// the "what if" evaluator.
async fn policy_page(State(c): State<Arc<Console>>, headers: HeaderMap) -> Response {
    signed_in_page(&c, &headers, "Policy", POLICY, "policy.js")
}

/// `GET /console/approvals`: the held actions, to approve or deny.
async fn approvals_page(State(c): State<Arc<Console>>, headers: HeaderMap) -> Response {
    signed_in_page(&c, &headers, "Approvals", APPROVALS, "approvals.js")
}

/// `GET /console/record`: the audit chain's state, its export, and lineage graphs.
async fn record_page(State(c): State<Arc<Console>>, headers: HeaderMap) -> Response {
    signed_in_page(&c, &headers, "Record", RECORD, "record.js")
}

async fn method_not_allowed() -> Response {
    sandlot_http::error_response(
        StatusCode::METHOD_NOT_ALLOWED,
        sandlot_http::METHOD_NOT_ALLOWED,
        "this console path does not serve that method",
    )
}

async fn unknown_page() -> Response {
    Page {
        title: "Not found",
        main: NOT_FOUND,
        script: "console.js",
        signed_in: None,
        sandbox: "",
    }
    .render(StatusCode::NOT_FOUND)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SignIn {
    key: String,
}

/// `POST /console/session`: a form (from the sign-in page; answered with a redirect) or JSON
/// `{"key": ...}` (answered with JSON). A key that does not authenticate gets 401 and no
/// cookie; a sign-in posted by another origin's page (login CSRF) gets 403.
async fn sign_in(State(c): State<Arc<Console>>, req: Request) -> Response {
    let Some(gov) = c.gov.as_deref() else {
        return no_auth_page();
    };
    let is_json = req
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if let Err(e) = c.same_origin(req.headers()) {
        return e.into_response();
    }
    let body = match axum::body::to_bytes(req.into_body(), MAX_SIGN_IN_BYTES).await {
        Ok(b) => b,
        Err(_) => {
            return HttpError::new(ErrorCode::PayloadTooLarge, "the sign-in body is too large")
                .into_response()
        }
    };
    let parsed: Result<SignIn, String> = if is_json {
        serde_json::from_slice(&body).map_err(|e| e.to_string())
    } else {
        serde_urlencoded_key(&body)
    };
    let key = match parsed {
        Ok(s) => s.key.trim().to_owned(),
        Err(e) => {
            return HttpError::invalid_request(format!(
                "the sign-in body must be a form or JSON with one field, key: {e}"
            ))
            .into_response()
        }
    };
    let principal = match gov.keys.authenticate(&key) {
        Ok(p) => p,
        Err(e) => {
            let message = format!("sign-in refused: {e}");
            return if is_json {
                HttpError::new(ErrorCode::Unauthenticated, message).into_response()
            } else {
                sign_in_page(StatusCode::UNAUTHORIZED, Some(&message))
            };
        }
    };
    let created = match c.sessions.create(&principal.key_id) {
        Ok(s) => s,
        Err(sessions::Full) => {
            return HttpError::new(
                ErrorCode::CapacityExhausted,
                "the server holds as many console sessions as it may; try again later",
            )
            .into_response()
        }
    };
    let max_age = c.cfg.limits.absolute.as_secs();
    let cookie = c.cookie(&created.id, max_age);
    let mut resp = if is_json {
        Json(serde_json::json!({
            "tenant": principal.tenant,
            "role": principal.role,
            "key_prefix": principal.key_prefix,
            "idle_timeout": c.cfg.limits.idle.as_secs(),
            "max_age": max_age,
        }))
        .into_response()
    } else {
        Redirect::to("/console").into_response()
    };
    resp.headers_mut().insert(header::SET_COOKIE, cookie);
    resp
}

/// The `key` of a form body (`key=...`, percent- and plus-decoded).
fn serde_urlencoded_key(body: &[u8]) -> Result<SignIn, String> {
    let text = std::str::from_utf8(body).map_err(|_| "the form is not UTF-8".to_owned())?;
    let mut key = None;
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if name != "key" {
            return Err(format!("unknown field {name:?}"));
        }
        key = Some(form_decode(value)?);
    }
    key.map(|key| SignIn { key })
        .ok_or_else(|| "no key".to_owned())
}

fn form_decode(v: &str) -> Result<String, String> {
    let bytes = v.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = v.get(i + 1..i + 3).ok_or("a truncated %-escape")?;
                out.push(u8::from_str_radix(hex, 16).map_err(|_| "a bad %-escape")?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| "the key is not UTF-8".to_owned())
}

/// `DELETE /console/session`: signs out (the page's own request: CSRF and origin checked)
/// and clears the cookie.
async fn sign_out(State(c): State<Arc<Console>>, headers: HeaderMap) -> Response {
    let ids = session_cookies(&headers);
    if !ids.is_empty() {
        if let Err(e) = c.same_origin(&headers) {
            return e.into_response();
        }
        let sent = headers
            .get(CSRF_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let live: Vec<(&str, sessions::Resolved)> = ids
            .iter()
            .filter_map(|id| c.sessions.resolve(id).map(|s| (*id, s)))
            .collect();
        if !live.is_empty() {
            let Some((id, _)) = live.iter().find(|(_, s)| same_token(sent, &s.csrf)) else {
                return csrf_failed("signing out needs the session's X-Sandlot-CSRF header")
                    .into_response();
            };
            c.sessions.remove(id);
        }
    }
    let mut resp = StatusCode::NO_CONTENT.into_response();
    resp.headers_mut()
        .insert(header::SET_COOKIE, c.cookie("", 0));
    resp
}

// ---------------------------------------------------------------------------------------------
// Static assets: the scripts and the style sheet, plain files embedded at build time.

const ASSETS: &[(&str, &str, &str)] = &[
    (
        "console.css",
        "text/css; charset=utf-8",
        include_str!("../assets/console.css"),
    ),
    (
        "console.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/console.js"),
    ),
    (
        "sign-in.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/sign-in.js"),
    ),
    (
        "sandboxes.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/sandboxes.js"),
    ),
    (
        "sandbox.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/sandbox.js"),
    ),
    (
        "sandbox-panels.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/sandbox-panels.js"),
    ),
    (
        "render.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/render.js"),
    ),
    (
        "kpis.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/kpis.js"),
    ),
    (
        "policy.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/policy.js"),
    ),
    (
        "diff.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/diff.js"),
    ),
    (
        "approvals.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/approvals.js"),
    ),
    (
        "record.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/record.js"),
    ),
];

async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|(n, _, _)| *n == name) {
        Some((_, content_type, body)) => {
            ([(header::CONTENT_TYPE, *content_type)], Body::from(*body)).into_response()
        }
        None => sandlot_http::error_response(
            StatusCode::NOT_FOUND,
            sandlot_http::ROUTE_NOT_FOUND,
            "no such console asset",
        ),
    }
}

/// HTML-escapes text put into a page.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ` on<letters>=`: an inline event handler attribute.
    fn has_event_handler(html: &str) -> bool {
        html.match_indices(" on").any(|(i, _)| {
            let rest = &html[i + 3..];
            let name_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
            name_len > 0 && rest[name_len..].starts_with('=')
        })
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; sandlot_session=abc ; b=2"),
        );
        h.append(
            header::COOKIE,
            HeaderValue::from_static("sandlot_session=def; sandlot_session=abc"),
        );
        assert_eq!(session_cookies(&h), ["abc", "def"]);
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static("x_sandlot_session=abc"),
        );
        assert!(session_cookies(&h).is_empty());
    }

    #[test]
    fn pages_escape_what_they_insert() {
        assert_eq!(
            escape("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn form_bodies_decode() {
        assert_eq!(
            serde_urlencoded_key(b"key=sl_a%5Fb+c").unwrap().key,
            "sl_a_b c"
        );
        assert!(serde_urlencoded_key(b"key=1&other=2").is_err());
        assert!(serde_urlencoded_key(b"").is_err());
        assert!(serde_urlencoded_key(b"key=%zz").is_err());
    }

    #[test]
    fn assets_have_no_inline_script_and_pages_load_only_files() {
        for html in [
            PAGE, SIGN_IN, SANDBOXES, SANDBOX, NOT_FOUND, NO_AUTH, POLICY, APPROVALS, RECORD, KPIS,
        ] {
            assert!(!html.contains("<script>"), "inline script");
            assert!(!html.contains("style="), "inline style");
            assert!(!has_event_handler(html), "an inline event handler");
            assert!(!html.contains("http"), "only relative URLs");
        }
        for (name, _, body) in ASSETS {
            assert!(!body.contains("innerHTML"), "{name} uses innerHTML");
            assert!(!body.contains("eval("), "{name} uses eval");
        }
    }
}
