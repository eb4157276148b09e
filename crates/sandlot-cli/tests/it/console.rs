//! The web console against a real `sandlot serve` on 127.0.0.1: signing in turns a key into an
//! `HttpOnly`, `SameSite=Strict` session cookie (a bad key gets 401 and no cookie); that cookie
//! acts on `/v1` only with the session's CSRF token, from the server's own origin (403
//! `csrf_failed` otherwise, reads included); a key in `Authorization` ignores the cookie;
//! sign-out ends the session; another tenant's sandbox is a 404 in a console URL as in `/v1`;
//! a revoked key ends its sessions at their next use; a key's sessions are bounded; and every
//! console response carries the strict CSP and its companions.

use crate::common;

use common::{As, TestServer};
use reqwest::blocking::{Client, RequestBuilder, Response};
use reqwest::header::HeaderMap;
use serde_json::{json, Value};

const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
    img-src 'self' data: blob:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; \
    form-action 'self'";

/// One response, read whole, its console headers checked.
struct Got {
    status: u16,
    headers: HeaderMap,
    text: String,
}

impl Got {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or(Value::Null)
    }

    fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The headers every console response carries (point 4 of `sandlot-console`'s docs).
    fn assert_console_headers(&self, what: &str) {
        assert_eq!(self.header("content-security-policy"), Some(CSP), "{what}");
        assert_eq!(
            self.header("x-content-type-options"),
            Some("nosniff"),
            "{what}"
        );
        assert_eq!(
            self.header("referrer-policy"),
            Some("no-referrer"),
            "{what}"
        );
        assert_eq!(self.header("x-frame-options"), Some("DENY"), "{what}");
        assert_eq!(
            self.header("cross-origin-opener-policy"),
            Some("same-origin"),
            "{what}"
        );
        if self
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/html"))
        {
            assert_eq!(self.header("cache-control"), Some("no-store"), "{what}");
        }
    }

    /// The session cookie this response set, and the whole `Set-Cookie` line.
    fn session_cookie(&self) -> Option<(String, String)> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|v| v.starts_with("sandlot_session="))
            .map(|line| {
                let value = line["sandlot_session=".len()..]
                    .split(';')
                    .next()
                    .unwrap()
                    .to_owned();
                (value, line.to_owned())
            })
    }

    /// The CSRF token of a console page.
    fn csrf(&self) -> String {
        let marker = "<meta name=\"sandlot-csrf\" content=\"";
        let start = self.text.find(marker).expect("a page with a CSRF meta") + marker.len();
        let end = start + self.text[start..].find('"').unwrap();
        self.text[start..end].to_owned()
    }
}

/// A browser-like client: no key, no redirects followed, cookies sent by hand.
struct Browser<'a> {
    server: &'a TestServer,
    http: Client,
    cookie: Option<String>,
    csrf: Option<String>,
}

impl<'a> Browser<'a> {
    fn new(server: &'a TestServer) -> Self {
        Browser {
            server,
            http: common::client_builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            cookie: None,
            csrf: None,
        }
    }

    fn origin(&self) -> String {
        self.server.url().trim_end_matches('/').to_owned()
    }

    fn req(&self, method: &str, path: &str) -> RequestBuilder {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.server.url()));
        if let Some(c) = &self.cookie {
            req = req.header("cookie", format!("theme=dark; sandlot_session={c}"));
        }
        req
    }

    /// `req` as the console's script sends it: the CSRF token, the page's own origin.
    fn script(&self, method: &str, path: &str) -> RequestBuilder {
        self.req(method, path)
            .header("x-sandlot-csrf", self.csrf.clone().unwrap_or_default())
            .header("origin", self.origin())
            .header("sec-fetch-site", "same-origin")
    }

    fn send(&self, req: RequestBuilder) -> Got {
        let resp: Response = req
            .send()
            .unwrap_or_else(|e| panic!("{e}\n{}", self.server.stderr()));
        Got {
            status: resp.status().as_u16(),
            headers: resp.headers().clone(),
            text: resp.text().unwrap_or_default(),
        }
    }

    /// Signs in with `key` (JSON), keeps the cookie, and reads the CSRF token from the page.
    fn sign_in(&mut self, key: &str) -> Got {
        let got = self.send(
            self.req("POST", "/console/session")
                .json(&json!({ "key": key })),
        );
        assert_eq!(got.status, 200, "{}", got.text);
        got.assert_console_headers("sign-in");
        self.cookie = Some(got.session_cookie().expect("a session cookie").0);
        let page = self.send(self.req("GET", "/console"));
        assert_eq!(page.status, 200);
        self.csrf = Some(page.csrf());
        got
    }
}

#[test]
fn sign_in_sets_an_http_only_strict_cookie_that_acts_only_with_its_csrf_token() {
    let server = TestServer::start();
    let key = server.key().to_owned();
    let mut b = Browser::new(&server);

    // Signed out: the sign-in page, with the console's headers; the scripts are files here.
    let page = b.send(b.req("GET", "/console"));
    assert_eq!(page.status, 200);
    page.assert_console_headers("sign-in page");
    assert!(page.text.contains("name=\"key\""), "{}", page.text);
    for asset in [
        "console.js",
        "sandboxes.js",
        "sandbox.js",
        "render.js",
        "sandbox-panels.js",
        "console.css",
    ] {
        let got = b.send(b.req("GET", &format!("/console/assets/{asset}")));
        assert_eq!(got.status, 200, "{asset}");
        got.assert_console_headers(asset);
    }
    let missing = b.send(b.req("GET", "/console/assets/nope.js"));
    assert_eq!(missing.status, 404);
    missing.assert_console_headers("a missing asset");
    let unknown = b.send(b.req("GET", "/console/no/such/page"));
    assert_eq!(unknown.status, 404);
    unknown.assert_console_headers("an unknown console page");
    let wrong_method = b.send(b.req("PUT", "/console"));
    assert_eq!(wrong_method.status, 405);
    wrong_method.assert_console_headers("a method the console does not serve");

    // A bad key: 401, no cookie, in JSON and from the form.
    let bad = b.send(
        b.req("POST", "/console/session")
            .json(&json!({ "key": "sl_aaaaaaaa_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb" })),
    );
    assert_eq!((bad.status, bad.code().as_str()), (401, "unauthenticated"));
    assert!(bad.headers.get("set-cookie").is_none());
    bad.assert_console_headers("a refused sign-in");
    let bad_form = b.send(
        b.req("POST", "/console/session")
            .header("content-type", "application/x-www-form-urlencoded")
            .body("key=nope"),
    );
    assert_eq!(bad_form.status, 401);
    assert!(bad_form.headers.get("set-cookie").is_none());
    assert!(
        bad_form.text.contains("sign-in refused"),
        "{}",
        bad_form.text
    );
    bad_form.assert_console_headers("a refused form sign-in");

    // Another origin's page cannot sign a browser in (login CSRF), even with a good key.
    let foreign = b.send(
        b.req("POST", "/console/session")
            .header("origin", "http://evil.test")
            .json(&json!({ "key": key })),
    );
    assert_eq!(
        (foreign.status, foreign.code().as_str()),
        (403, "csrf_failed")
    );
    assert!(foreign.headers.get("set-cookie").is_none());

    // The form signs in with a redirect to the console.
    let form = b.send(
        b.req("POST", "/console/session")
            .header("content-type", "application/x-www-form-urlencoded")
            .header("origin", b.origin())
            .body(format!("key={key}")),
    );
    assert_eq!(form.status, 303, "{}", form.text);
    assert_eq!(form.header("location"), Some("/console"));
    assert!(form.session_cookie().is_some());
    // What a browser sends for that form under `no-referrer`: `Origin: null`, which counts as
    // the page's own only with fetch metadata saying so.
    let null_origin = |site: Option<&str>| {
        let mut req = b
            .req("POST", "/console/session")
            .header("content-type", "application/x-www-form-urlencoded")
            .header("origin", "null")
            .body(format!("key={key}"));
        if let Some(site) = site {
            req = req.header("sec-fetch-site", site);
        }
        b.send(req)
    };
    assert_eq!(null_origin(Some("same-origin")).status, 303);
    for site in [None, Some("cross-site"), Some("same-site")] {
        let got = null_origin(site);
        assert_eq!(
            (got.status, got.code().as_str()),
            (403, "csrf_failed"),
            "{site:?}"
        );
        assert!(got.session_cookie().is_none());
    }

    // A good key: a random 256-bit id in an HttpOnly, SameSite=Strict cookie for the whole
    // site, plain on loopback HTTP; the key is in neither the cookie nor the page.
    let signed = b.sign_in(&key);
    let (value, line) = signed.session_cookie().unwrap();
    assert_eq!(value.len(), 64, "{line}");
    assert!(value.bytes().all(|c| c.is_ascii_hexdigit()), "{line}");
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age="] {
        assert!(line.contains(attr), "{attr} missing: {line}");
    }
    assert!(!line.contains("Secure"), "plain HTTP on loopback: {line}");
    assert!(!line.contains(&key) && !signed.text.contains(&key));
    let page = b.send(b.req("GET", "/console"));
    page.assert_console_headers("the sandboxes page");
    assert!(page.text.contains("sandboxes.js"));
    assert!(!page.text.contains(&key), "the key never reaches a page");
    let csrf = b.csrf.clone().unwrap();
    assert_eq!(csrf.len(), 64);
    assert_ne!(csrf, value);
    // The page with the token goes to navigations only, not to a script's fetch or a frame.
    for dest in ["empty", "iframe"] {
        let got = b.send(b.req("GET", "/console").header("sec-fetch-dest", dest));
        assert_eq!(got.status, 403, "{dest}");
        assert!(!got.text.contains(&csrf));
    }
    let nav = b.send(
        b.req("GET", "/console")
            .header("sec-fetch-dest", "document")
            .header("sec-fetch-site", "same-origin"),
    );
    assert_eq!(nav.status, 200);

    // The cookie reads and writes /v1 with its token...
    let list = b.send(b.script("GET", "/v1/sandboxes"));
    assert_eq!(list.status, 200, "{}", list.text);
    let created = b.send(b.script("POST", "/v1/sandboxes").json(&json!({})));
    assert_eq!(created.status, 201, "{}", created.text);
    let id = created.json()["id"].as_str().unwrap().to_owned();
    let sandbox_page = b.send(b.req("GET", &format!("/console/sandboxes/{id}")));
    assert_eq!(sandbox_page.status, 200);
    sandbox_page.assert_console_headers("a sandbox page");
    assert!(sandbox_page
        .text
        .contains(&format!("data-sandbox=\"{id}\"")));

    // ...and nothing without it: no token, a wrong one, another origin, another site.
    let cases: Vec<(&str, RequestBuilder)> = vec![
        (
            "no token, unsafe",
            b.req("POST", "/v1/sandboxes").json(&json!({})),
        ),
        ("no token, a read", b.req("GET", "/v1/sandboxes")),
        (
            "a wrong token",
            b.req("POST", "/v1/sandboxes")
                .header("x-sandlot-csrf", "0".repeat(64))
                .json(&json!({})),
        ),
        (
            "the session id as the token",
            b.req("DELETE", &format!("/v1/sandboxes/{id}"))
                .header("x-sandlot-csrf", value.clone()),
        ),
        (
            "only a foreign Origin",
            b.req("DELETE", &format!("/v1/sandboxes/{id}"))
                .header("x-sandlot-csrf", csrf.clone())
                .header("origin", "http://evil.test"),
        ),
        (
            "a foreign Origin beside the own one",
            b.script("DELETE", &format!("/v1/sandboxes/{id}"))
                .header("origin", "http://evil.test"),
        ),
        (
            "a cross-site fetch (beside a same-origin claim)",
            b.script("DELETE", &format!("/v1/sandboxes/{id}"))
                .header("sec-fetch-site", "cross-site"),
        ),
    ];
    for (what, req) in cases {
        let got = b.send(req);
        assert_eq!(
            (got.status, got.code().as_str()),
            (403, "csrf_failed"),
            "{what}: {}",
            got.text
        );
    }
    // The sandbox is still there.
    assert_eq!(
        b.send(b.script("GET", &format!("/v1/sandboxes/{id}")))
            .status,
        200
    );

    // A key in Authorization is used as ever, whatever cookie comes with it.
    let with_key = b.send(
        b.req("GET", "/v1/sandboxes")
            .header("authorization", format!("Bearer {key}"))
            .header("cookie", format!("sandlot_session={}", "f".repeat(64))),
    );
    assert_eq!(with_key.status, 200);
    // A made-up session is not one.
    let real = b.cookie.replace("f".repeat(64)).unwrap();
    let forged = b.send(b.script("GET", "/v1/sandboxes"));
    assert_eq!(
        (forged.status, forged.code().as_str()),
        (401, "unauthenticated")
    );
    b.cookie = Some(real.clone());
    // A second session cookie planted beside the real one (a narrower Path, set by a
    // same-origin page's script) changes nothing: the session is the one the token matches.
    let planted = b.send(
        b.script("GET", "/v1/sandboxes")
            .header("cookie", format!("sandlot_session={}", "f".repeat(64))),
    );
    assert_eq!(planted.status, 200, "{}", planted.text);

    // Sign-out needs the token too, then ends the session and clears the cookie.
    let out = b.send(b.req("DELETE", "/console/session"));
    assert_eq!((out.status, out.code().as_str()), (403, "csrf_failed"));
    let out = b.send(b.script("DELETE", "/console/session"));
    assert_eq!(out.status, 204, "{}", out.text);
    out.assert_console_headers("sign-out");
    assert!(out.session_cookie().unwrap().1.contains("Max-Age=0"));
    let after = b.send(b.script("GET", "/v1/sandboxes"));
    assert_eq!(
        (after.status, after.code().as_str()),
        (401, "unauthenticated")
    );
    let page = b.send(b.req("GET", "/console"));
    assert!(page.text.contains("name=\"key\""), "the sign-in page again");
    let gone = b.send(b.req("GET", &format!("/console/sandboxes/{id}")));
    assert_eq!(gone.status, 303);
}

#[test]
fn a_tenant_sees_its_own_a_revoked_key_ends_its_sessions_and_sessions_are_bounded() {
    let server = TestServer::start();
    let theirs = server.create_sandbox();
    let acme = server.tenant("acme").role("admin").create();
    let mut b = Browser::new(&server);
    b.sign_in(&acme.key);
    let who = b.send(b.script("GET", "/v1/whoami"));
    assert_eq!(who.json()["tenant"], "acme", "{}", who.text);

    // Another tenant's sandbox: 404 in a console URL exactly as through /v1.
    let page = b.send(b.req("GET", &format!("/console/sandboxes/{theirs}")));
    assert_eq!(page.status, 404);
    page.assert_console_headers("a 404 page");
    assert!(!page.text.contains(&theirs));
    let api = b.send(b.script("GET", &format!("/v1/sandboxes/{theirs}")));
    assert_eq!(
        (api.status, api.code().as_str()),
        (404, "sandbox_not_found")
    );
    let never = b.send(b.req("GET", "/console/sandboxes/sb_never_was"));
    assert_eq!(never.status, 404);
    let del = b.send(b.script("DELETE", &format!("/v1/sandboxes/{theirs}")));
    assert_eq!(del.status, 404);
    let list = b.send(b.script("GET", "/v1/sandboxes"));
    assert_eq!(list.json()["sandboxes"], json!([]), "{}", list.text);
    // Its own sandbox is there.
    let mine = b.send(b.script("POST", "/v1/sandboxes").json(&json!({})));
    assert_eq!(mine.status, 201, "{}", mine.text);
    let mine = mine.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(
        b.send(b.req("GET", &format!("/console/sandboxes/{mine}")))
            .status,
        200
    );

    // A key's sessions are bounded (32): the 33rd sign-in ends its least recently used one.
    let first = b.cookie.clone().unwrap();
    let mut others = Vec::new();
    for _ in 0..32 {
        let got = b.send(
            b.req("POST", "/console/session")
                .json(&json!({ "key": acme.key })),
        );
        assert_eq!(got.status, 200);
        others.push(got.session_cookie().unwrap().0);
    }
    let stale = b.send(b.script("GET", "/v1/whoami"));
    assert_eq!(
        (stale.status, stale.code().as_str()),
        (401, "unauthenticated")
    );
    b.cookie = others.last().cloned();
    let page = b.send(b.req("GET", "/console"));
    b.csrf = Some(page.csrf());
    assert_eq!(b.send(b.script("GET", "/v1/whoami")).status, 200);
    assert_ne!(b.cookie.as_deref(), Some(first.as_str()));

    // The key revoked: its session ends at its next request, and the console signs it out.
    let revoked = server.delete(&format!("/v1/keys/{}", acme.id));
    revoked.expect(200);
    let after = b.send(b.script("GET", "/v1/whoami"));
    assert_eq!(
        (after.status, after.code().as_str()),
        (401, "unauthenticated")
    );
    let page = b.send(b.req("GET", "/console"));
    assert!(page.text.contains("name=\"key\""), "the sign-in page again");
    let again = b.send(
        b.req("POST", "/console/session")
            .json(&json!({ "key": acme.key })),
    );
    assert_eq!(
        (again.status, again.code().as_str()),
        (401, "unauthenticated")
    );
    assert!(again.session_cookie().is_none());
}

/// The operator's console lists every tenant's sandboxes (`?tenant=*`, or one tenant's); a
/// tenant's key lists only its own and may not name another tenant; the Policy, Approvals and
/// Record pages are served to a session only; and a session survives the server's `kill -9`:
/// the same cookie and CSRF token work after the restart, while the store holds only the
/// sha256 of the session id, and revoking the key still ends a restored session.
#[test]
fn the_operator_sees_every_tenant_and_sessions_survive_kill_9() {
    use sha2::{Digest, Sha256};
    let mut server = TestServer::start();
    let own = server.create_sandbox();
    let acme = server.tenant("acme").role("admin").create();
    let theirs = As::key(&server, &acme.key)
        .post("/v1/sandboxes", &json!({}))
        .expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let operator_key = server.key().to_owned();

    let (op_cookie, op_csrf, acme_cookie, acme_csrf) = {
        let mut op = Browser::new(&server);
        op.sign_in(&operator_key);
        let ids = |got: &Got| -> Vec<(String, String)> {
            let mut v: Vec<(String, String)> = got.json()["sandboxes"]
                .as_array()
                .unwrap_or_else(|| panic!("{}", got.text))
                .iter()
                .map(|s| {
                    (
                        s["id"].as_str().unwrap().to_owned(),
                        s["tenant"].as_str().unwrap().to_owned(),
                    )
                })
                .collect();
            v.sort();
            v
        };
        let mut both = vec![
            (own.clone(), "default".to_owned()),
            (theirs.clone(), "acme".to_owned()),
        ];
        both.sort();
        assert_eq!(
            ids(&op.send(op.script("GET", "/v1/sandboxes?tenant=*"))),
            both
        );
        assert_eq!(
            ids(&op.send(op.script("GET", "/v1/sandboxes?tenant=acme"))),
            [(theirs.clone(), "acme".to_owned())]
        );
        assert_eq!(
            ids(&op.send(op.script("GET", "/v1/sandboxes"))),
            [(own.clone(), "default".to_owned())],
            "without ?tenant= the operator's own, as before"
        );

        let mut b = Browser::new(&server);
        b.sign_in(&acme.key);
        for asked in ["*", "default"] {
            let got = b.send(b.script("GET", &format!("/v1/sandboxes?tenant={asked}")));
            assert_eq!(
                (got.status, got.code().as_str()),
                (403, "forbidden"),
                "{asked}"
            );
            let got = b.send(b.script("GET", &format!("/v1/decisions?tenant={asked}")));
            assert_eq!(
                (got.status, got.code().as_str()),
                (403, "forbidden"),
                "{asked}"
            );
        }
        assert_eq!(
            ids(&b.send(b.script("GET", "/v1/sandboxes?tenant=acme"))),
            [(theirs.clone(), "acme".to_owned())]
        );

        // The new pages: served to a session (with the console's headers), not to a stranger.
        for page in ["/console/policy", "/console/approvals", "/console/record"] {
            let got = b.send(b.req("GET", page));
            assert_eq!(got.status, 200, "{page}: {}", got.text);
            got.assert_console_headers(page);
            assert_eq!(got.csrf(), b.csrf.clone().unwrap());
            let framed = b.send(b.req("GET", page).header("sec-fetch-dest", "iframe"));
            assert_eq!(framed.status, 403, "{page} in a frame");
            let stranger = Browser::new(&server);
            let got = stranger.send(stranger.req("GET", page));
            assert_eq!(got.status, 303, "{page} signed out");
        }
        for asset in ["policy.js", "diff.js", "approvals.js", "record.js"] {
            let got = b.send(b.req("GET", &format!("/console/assets/{asset}")));
            assert_eq!(got.status, 200, "{asset}");
            got.assert_console_headers(asset);
        }
        (
            op.cookie.clone().unwrap(),
            op.csrf.clone().unwrap(),
            b.cookie.clone().unwrap(),
            b.csrf.clone().unwrap(),
        )
    };

    // The store holds the sessions by the sha256 of their ids, never the ids.
    let rows = std::process::Command::new("sqlite3")
        .arg(server.data_dir().join("sandlot.db"))
        .arg("SELECT id_sha256 || ' ' || key_id || ' ' || csrf FROM console_sessions")
        .output()
        .expect("sqlite3");
    let rows = String::from_utf8_lossy(&rows.stdout).into_owned();
    assert!(
        !rows.contains(&op_cookie) && !rows.contains(&acme_cookie),
        "{rows}"
    );
    for cookie in [&op_cookie, &acme_cookie] {
        let hash = hex::encode(Sha256::digest(cookie.as_bytes()));
        assert!(rows.contains(&hash), "{rows}");
    }
    assert!(!rows.contains(&acme.key), "the key is never stored");

    server.kill9();
    server.restart();

    let restored = |cookie: &str, csrf: &str| {
        let mut b = Browser::new(&server);
        b.cookie = Some(cookie.to_owned());
        b.csrf = Some(csrf.to_owned());
        b
    };
    let op = restored(&op_cookie, &op_csrf);
    let who = op.send(op.script("GET", "/v1/whoami"));
    assert_eq!(
        (who.status, who.json()["tenant"].as_str()),
        (200, Some("default")),
        "the operator's session survives kill -9: {}",
        who.text
    );
    let page = op.send(op.req("GET", "/console/policy"));
    assert_eq!((page.status, page.csrf()), (200, op_csrf.clone()));
    let b = restored(&acme_cookie, &acme_csrf);
    assert_eq!(b.send(b.script("GET", "/v1/whoami")).status, 200);
    // Without its token the restored cookie still acts on nothing.
    let forged = b.send(b.req("GET", "/v1/whoami"));
    assert_eq!(
        (forged.status, forged.code().as_str()),
        (403, "csrf_failed")
    );

    // Revoking the key ends the restored session, and its row.
    server.delete(&format!("/v1/keys/{}", acme.id)).expect(200);
    let after = b.send(b.script("GET", "/v1/whoami"));
    assert_eq!(
        (after.status, after.code().as_str()),
        (401, "unauthenticated")
    );
    let rows = std::process::Command::new("sqlite3")
        .arg(server.data_dir().join("sandlot.db"))
        .arg("SELECT count(*) FROM console_sessions")
        .output()
        .expect("sqlite3");
    assert_eq!(String::from_utf8_lossy(&rows.stdout).trim(), "1");
}

/// `POST /v1/policies/evaluate` answers as the gate would without acting (no decision is
/// journaled, nothing is held or run), against the set in force or a draft; a bad draft is a
/// 400 with the validator's message and a too large one 413; only admin keys may ask, and a
/// tenant's admin only as its own tenant. The policy history keeps every set with who put it
/// in force (the operator's only), decisions filter by outcome and policy, and the audit
/// status (the operator's only) says the chain verified.
#[test]
fn what_if_decides_without_acting_and_history_and_audit_status_are_the_operators() {
    // A checkpoint every second, for the audit status's last checkpoint.
    let server = TestServer::start_with_env(&[("SANDLOT_AUDIT_CHECKPOINT_SECONDS", "1")]);
    let op = As::key(&server, server.key());
    let acme = server.tenant("acme").role("admin").create();
    let member = server.tenant("beta").create();
    let (acme_as, member_as) = (As::key(&server, &acme.key), As::key(&server, &member.key));

    // History: the set the server started with, then one the operator puts in force.
    let first = op.get("/v1/policies/versions").expect(200).clone();
    assert_eq!(first["versions"].as_array().unwrap().len(), 1, "{first}");
    assert_eq!(first["versions"][0]["set_by"], "startup");
    let review = format!(
        "{}\n@id(\"review-os\")\n@review(\"code that imports os\")\n\
         permit (principal, action == Sandlot::Action::\"execute\", resource)\n\
         when {{ context.code like \"*import os*\" }};\n",
        sandlot_policy::DEFAULT_POLICIES
    );
    op.put_raw("/v1/policies", "text/plain", review.clone())
        .expect(200);
    let list = op.get("/v1/policies/versions").expect(200).clone();
    let versions = list["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 2, "{list}");
    assert_eq!(versions[0]["version"], list["current"]);
    assert!(versions[0]["set_by"].as_str().unwrap().starts_with("sl_"));
    assert!(versions[0].get("text").is_none(), "the list has no texts");
    let seq = versions[0]["seq"].as_i64().unwrap();
    let one = op
        .get(&format!("/v1/policies/versions/{seq}"))
        .expect(200)
        .clone();
    assert_eq!(one["text"], review.as_str());
    let by_version = op
        .get(&format!(
            "/v1/policies/versions/{}",
            versions[1]["version"].as_str().unwrap()
        ))
        .expect(200)
        .clone();
    assert_eq!(by_version["text"], sandlot_policy::DEFAULT_POLICIES);
    op.get("/v1/policies/versions/nope")
        .expect_error(404, "not_found");
    for who in [&acme_as, &member_as] {
        who.get("/v1/policies/versions")
            .expect_error(403, "forbidden");
        who.get(&format!("/v1/policies/versions/{seq}"))
            .expect_error(403, "forbidden");
    }

    // What if: the set in force holds code that imports os, permits other code.
    let ask = |who: &As, body: Value| who.post("/v1/policies/evaluate", &body);
    let held = ask(
        &op,
        json!({"request": {"gate": "execute", "code": "import os\nos.listdir('.')"}}),
    );
    let held = held.expect(200).clone();
    assert_eq!(held["decision"], "review", "{held}");
    assert_eq!(held["needs_review"], true);
    assert_eq!(held["policies"], json!(["review-os"]));
    assert_eq!(held["dry_run"], true);
    let ok = ask(
        &op,
        json!({"request": {"gate": "execute", "code": "print(1)"}}),
    );
    let ok = ok.expect(200).clone();
    assert_eq!(
        (ok["decision"].as_str(), ok["allowed"].as_bool()),
        (Some("allow"), Some(true)),
        "{ok}"
    );
    assert_eq!(ok["policies"], json!(["allow-all-gates"]));
    // A draft without the execute permit: the default deny.
    let draft = "@id(\"only-tiers\")\npermit (principal, action == Sandlot::Action::\"select_tier\", resource);\n";
    let denied = ask(
        &op,
        json!({"request": {"gate": "execute", "code": "print(1)"}, "policies": draft}),
    );
    let denied = denied.expect(200).clone();
    assert_eq!(
        (denied["decision"].as_str(), denied["draft"].as_bool()),
        (Some("deny"), Some(true)),
        "{denied}"
    );
    assert_eq!(denied["policies"], json!([]));
    // As another tenant's principal (the operator may), egress with defaults filled in.
    let as_acme = ask(
        &op,
        json!({"request": {"gate": "egress", "host": "example.test", "principal": {"tenant": "acme"}}}),
    );
    let as_acme = as_acme.expect(200).clone();
    assert_eq!(as_acme["query"]["principal"]["tenant"], "acme");
    assert_eq!(as_acme["query"]["request"]["port"], 443);

    // Nothing acted: no decision about the what-if's sandbox was journaled, no review held.
    let decisions = op
        .get("/v1/decisions?tenant=*&limit=1000")
        .expect(200)
        .clone();
    assert!(
        !decisions.to_string().contains("sb_whatif"),
        "a what-if is not a decision: {decisions}"
    );
    assert_eq!(op.get("/v1/reviews").expect(200)["reviews"], json!([]));

    // Attacks: a malformed draft, a too large one, an unknown gate, a member key, a tenant's
    // admin asking as another tenant.
    let bad = ask(
        &op,
        json!({"request": {"gate": "execute"}, "policies": "permit (principal"}),
    );
    bad.expect_error(400, "invalid_request");
    assert!(bad.message().contains("draft"), "{}", bad.message());
    let no_id = ask(
        &op,
        json!({"request": {"gate": "execute"}, "policies": "permit (principal, action, resource);"}),
    );
    no_id.expect_error(400, "invalid_request");
    let huge = "/".repeat(sandlot_policy::MAX_POLICY_BYTES + 1);
    ask(
        &op,
        json!({"request": {"gate": "execute"}, "policies": huge}),
    )
    .expect_error(413, "payload_too_large");
    ask(&op, json!({"request": {"gate": "launch_missiles"}})).expect_error(400, "invalid_request");
    ask(&op, json!({"request": "execute"})).expect_error(400, "invalid_request");
    ask(&op, json!({"request": {"gate": "execute"}, "extra": 1}))
        .expect_error(400, "invalid_request");
    ask(&member_as, json!({"request": {"gate": "execute"}})).expect_error(403, "forbidden");
    ask(
        &acme_as,
        json!({"request": {"gate": "execute", "principal": {"tenant": "default"}}}),
    )
    .expect_error(403, "forbidden");
    let mine = ask(
        &acme_as,
        json!({"request": {"gate": "execute", "code": "print(2)"}}),
    );
    assert_eq!(mine.expect(200)["query"]["principal"]["tenant"], "acme");

    // Decisions filter by outcome and deciding policy (a real, denied decision first).
    let sb = server.create_sandbox();
    server.execute(&sb, "print(3)");
    let allowed = op
        .get("/v1/decisions?gate=execute&outcome=allowed&policy=allow-all-gates")
        .expect(200)
        .clone();
    let rows = allowed["decisions"].as_array().unwrap();
    assert!(!rows.is_empty(), "{allowed}");
    assert!(rows
        .iter()
        .all(|d| d["allowed"] == true && d["gate"] == "execute"));
    let none = op
        .get("/v1/decisions?outcome=denied&policy=allow-all-gates")
        .expect(200)
        .clone();
    assert_eq!(none["decisions"], json!([]));
    op.get("/v1/decisions?outcome=maybe")
        .expect_error(400, "invalid_request");

    // The audit chain's status: the operator's, verified, cached while nothing changes.
    let s = op.get("/v1/audit/status").expect(200).clone();
    assert_eq!(s["verified"], true, "{s}");
    assert!(s["verified_to"].as_u64().unwrap() >= 1, "{s}");
    assert!(s["records"].as_u64().unwrap() >= s["verified_to"].as_u64().unwrap());
    assert!(s["verifier_key"].as_str().unwrap().contains('+'));
    for who in [&acme_as, &member_as] {
        who.get("/v1/audit/status").expect_error(403, "forbidden");
    }
    let s = wait_for_checkpoint(&op);
    assert!(s["checkpoint"]["seq"].as_u64().unwrap() >= 1, "{s}");
    assert!(
        !s["checkpoint"]["key_id"].as_str().unwrap().is_empty(),
        "{s}"
    );
}

/// The audit status once a checkpoint is signed (the server signs one a second here).
fn wait_for_checkpoint(op: &As) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let s = op.get("/v1/audit/status").expect(200).clone();
        if !s["checkpoint"].is_null() || std::time::Instant::now() > deadline {
            return s;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

/// `GET /v1/metrics/sandboxes?ids=…` (the list's sparklines): a tenant gets its own sandboxes'
/// usage and readings only (another tenant's ids and unknown ids are left out, never an error,
/// so it learns nothing about them); the operator gets any tenant's; more than 200 ids is a 400
/// that reads nothing; a session's request needs its CSRF token from the console's origin like
/// every other `/v1` read; no key is a 401.
#[test]
fn batch_metrics_are_tenant_scoped_bounded_and_csrf_checked() {
    let server = TestServer::start();
    let theirs = server.create_sandbox();
    let acme = server.tenant("acme").role("admin").create();
    let as_acme = As::key(&server, &acme.key);
    let mine = as_acme.post("/v1/sandboxes", &json!({}));
    mine.expect(201);
    let mine = mine.body["id"].as_str().unwrap().to_owned();

    // A tenant: its own sandbox only; another tenant's and a made-up id are omitted.
    let path = format!("/v1/metrics/sandboxes?ids={mine},{theirs},sb_never_was,{mine}");
    let got = as_acme.get(&path);
    got.expect(200);
    let list = got.body["sandboxes"].as_array().unwrap().clone();
    assert_eq!(list.len(), 1, "{}", got.text);
    assert_eq!(list[0]["sandbox_id"], mine.as_str());
    assert!(
        list[0]["memory_limit_bytes"].as_u64().unwrap() > 0,
        "{}",
        got.text
    );
    assert_eq!(
        list[0]["history"].as_array().unwrap().len(),
        1,
        "{}",
        got.text
    );
    assert!(!got.text.contains(&theirs), "{}", got.text);
    // Only another tenant's ids: an empty answer, as for ids that never were.
    let other = as_acme.get(&format!("/v1/metrics/sandboxes?ids={theirs}"));
    let never = as_acme.get("/v1/metrics/sandboxes?ids=sb_never_was");
    assert_eq!((other.status, never.status), (200, 200));
    assert_eq!(other.body, never.body);
    assert_eq!(other.body["sandboxes"], json!([]));

    // Readings a second apart are kept as the sparkline's history.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let again = as_acme.get(&format!("/v1/metrics/sandboxes?ids={mine}"));
    again.expect(200);
    assert_eq!(
        again.body["sandboxes"][0]["history"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "{}",
        again.text
    );

    // The operator: any tenant's.
    let op = server.get(&format!("/v1/metrics/sandboxes?ids={mine},{theirs}"));
    op.expect(200);
    assert_eq!(
        op.body["sandboxes"].as_array().unwrap().len(),
        2,
        "{}",
        op.text
    );

    // Bounds: 201 ids is a 400; 200 is fine; an over-long id is a 400; none is an empty list.
    let ids = |n: usize| {
        (0..n)
            .map(|i| format!("sb_{i}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    as_acme
        .get(&format!("/v1/metrics/sandboxes?ids={}", ids(201)))
        .expect_error(400, "invalid_request");
    as_acme
        .get(&format!("/v1/metrics/sandboxes?ids={}", ids(200)))
        .expect(200);
    as_acme
        .get(&format!("/v1/metrics/sandboxes?ids={}", "x".repeat(129)))
        .expect_error(400, "invalid_request");
    let none = as_acme.get("/v1/metrics/sandboxes");
    assert_eq!(none.expect(200)["sandboxes"], json!([]));

    // No key: 401.
    let anon = server.client_with_key(None);
    let status = anon
        .get(format!("{}/v1/metrics/sandboxes?ids={mine}", server.url()))
        .send()
        .unwrap()
        .status()
        .as_u16();
    assert_eq!(status, 401);

    // A console session: with its CSRF token from its own origin it reads; without the token,
    // or from another origin, it is refused as every /v1 request is.
    let mut b = Browser::new(&server);
    b.sign_in(&acme.key);
    let path = format!("/v1/metrics/sandboxes?ids={mine},{theirs}");
    let ok = b.send(b.script("GET", &path));
    assert_eq!(ok.status, 200, "{}", ok.text);
    assert_eq!(ok.json()["sandboxes"].as_array().unwrap().len(), 1);
    let no_token = b.send(
        b.req("GET", &path)
            .header("origin", b.origin())
            .header("sec-fetch-site", "same-origin"),
    );
    assert_eq!(
        (no_token.status, no_token.code().as_str()),
        (403, "csrf_failed")
    );
    let cross = b.send(
        b.req("GET", &path)
            .header("x-sandlot-csrf", b.csrf.clone().unwrap())
            .header("origin", "http://evil.test")
            .header("sec-fetch-site", "cross-site"),
    );
    assert_eq!(cross.status, 403, "{}", cross.text);
}
