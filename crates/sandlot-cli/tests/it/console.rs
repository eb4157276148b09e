//! The web console against a real `sandlot serve` on 127.0.0.1: signing in turns a key into an
//! `HttpOnly`, `SameSite=Strict` session cookie (a bad key gets 401 and no cookie); that cookie
//! acts on `/v1` only with the session's CSRF token, from the server's own origin (403
//! `csrf_failed` otherwise, reads included); a key in `Authorization` ignores the cookie;
//! sign-out ends the session; another tenant's sandbox is a 404 in a console URL as in `/v1`;
//! a revoked key ends its sessions at their next use; a key's sessions are bounded; and every
//! console response carries the strict CSP and its companions.

use crate::common;

use common::TestServer;
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
