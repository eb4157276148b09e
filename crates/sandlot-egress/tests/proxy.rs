//! The egress proxy end to end: a real network namespace with the proxy listening inside it,
//! clients in that namespace, real upstream servers on the host's loopback. Every case checks
//! the answer the sandbox gets and the record the server gets. Runs as root; bounded in time.

mod common;

use common::*;
use sandlot_egress::tls::client_hello_for_tests;
use sandlot_egress::{EgressConfig, NetworkRules, Secret, PROXY_PORT};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PKG: &str = "pkg.sandlot.test";

fn quick() -> EgressConfig {
    EgressConfig {
        head_timeout: Duration::from_secs(1),
        ..EgressConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_domain_works_over_plain_http_and_connect() {
    let web = Upstream::http("127.0.0.2");
    let echo = Upstream::echo("127.0.0.2");
    let (on_web, on_echo) = (on(PKG, web.port()), on(PKG, echo.port()));
    let rig = Rig::new(quick(), &[&on_web, &on_echo, "127.0.0.2/32"]).await;

    let url = format!("http://{PKG}:{}/simple/pkg/?q=1", web.port());
    let resp = rig
        .get(&url, "Proxy-Authorization: Basic c2FuZGJveDpzZWNyZXQ=\r\nProxy-Connection: keep-alive\r\nX-Client: yes\r\n")
        .await;
    assert_eq!(status(&resp), 200, "{resp}");
    let got = &web.requests()[0];
    assert!(
        got.starts_with("GET /simple/pkg/?q=1 HTTP/1.1\r\n"),
        "{got}"
    );
    let lower = got.to_ascii_lowercase();
    assert!(
        lower.contains(&format!("host: {PKG}:{}", web.port())),
        "{got}"
    );
    assert!(lower.contains("x-client: yes"), "{got}");
    assert!(!lower.contains("proxy-authorization"), "{got}");
    assert!(!lower.contains("proxy-connection"), "{got}");
    // The upstream's hop-by-hop headers do not reach the sandbox; its own headers do.
    let head = resp.split("\r\n\r\n").next().unwrap().to_ascii_lowercase();
    assert!(
        head.contains("x-upstream: yes") && !head.contains("keep-alive"),
        "{head}"
    );
    let ev = rig.hooks.wait_event(|e| e.method == "GET").await;
    assert!(ev.allowed && ev.status == 200 && ev.host == PKG, "{ev:?}");
    assert_eq!(ev.ip, Some("127.0.0.2".parse().unwrap()));
    assert!(ev.decision_id.is_some(), "{ev:?}");
    assert!(
        ev.bytes_up > 50 && ev.bytes_down > got.len() as u64,
        "{ev:?}"
    );

    // CONNECT, then what pip sends: a ClientHello naming the host, then TLS records. The echo
    // server stands in for the TLS server: everything must come back byte for byte.
    let (mut tunnel, head) = rig.connect(&format!("{PKG}:{}", echo.port())).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut sent = client_hello_for_tests(Some(PKG), 2);
    sent.extend((0..200_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
    let (mut r, mut w) = tunnel.split();
    let writer = async {
        w.write_all(&sent).await.unwrap();
        w.shutdown().await.unwrap();
    };
    let mut back = Vec::new();
    let reader = async {
        tokio::time::timeout(WAIT, r.read_to_end(&mut back))
            .await
            .unwrap()
            .unwrap();
    };
    tokio::join!(writer, reader);
    assert_eq!(back.len(), sent.len());
    assert!(back == sent, "the tunnel altered bytes");
    let ev = rig.hooks.wait_event(|e| e.method == "CONNECT").await;
    assert!(
        ev.allowed && ev.status == 200 && ev.reason.is_empty(),
        "{ev:?}"
    );
    assert_eq!(ev.bytes_up, sent.len() as u64);
    assert_eq!(ev.bytes_down, sent.len() as u64);

    // Keep-alive: each request on one connection is decided on its own.
    let mut c = rig.client();
    let first = format!("GET {url} HTTP/1.1\r\nHost: {PKG}:{}\r\n\r\n", web.port());
    c.write_all(first.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("GET /simple/pkg/?q=1") {
        let n = tokio::time::timeout(WAIT, c.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "closed after the first request");
        got.extend_from_slice(&buf[..n]);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = "GET http://other.sandlot.test/ HTTP/1.1\r\nHost: other.sandlot.test\r\nConnection: close\r\n\r\n";
    c.write_all(second.as_bytes()).await.unwrap();
    let rest = read_all(&mut c).await;
    assert!(
        rest.contains("403 Forbidden") && rest.contains("other.sandlot.test is not in"),
        "{rest}"
    );

    // Content-Length and Transfer-Encoding together (a smuggling attempt): the chunked framing
    // wins and the upstream gets one request with a consistent body.
    let raw = format!(
        "POST {url} HTTP/1.1\r\nHost: {PKG}:{}\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
        web.port()
    );
    let resp = rig.send(raw.as_bytes()).await;
    assert_eq!(status(&resp), 200, "{resp}");
    let all = web.requests();
    assert!(all.iter().all(|r| !r.contains("/smuggled")), "{all:?}");
    let last = all.last().unwrap().to_ascii_lowercase();
    assert!(!last.contains("content-length: 4"), "{last}");
    assert!(
        last.ends_with("hello") || last.ends_with("5\r\nhello\r\n0\r\n\r\n"),
        "{last}"
    );
}

/// `host:port`, an allowlist entry for an upstream on a port of its own.
fn on(host: &str, port: u16) -> String {
    format!("{host}:{port}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_say_why_and_are_recorded() {
    let web = Upstream::http("127.0.0.2");
    let other = Upstream::http("127.0.0.3");
    let p = web.port();
    let rig = Rig::new(
        quick(),
        &[
            &on(PKG, p),
            "127.0.0.2/32",
            &on("denied.sandlot.test", p),
            &on("rebind.sandlot.test", p),
            &on("localhost", p),
            "169.254.0.0/16",
            "0.0.0.0/0",
            &on("0.0.0.0/0", other.port()),
        ],
    )
    .await;
    rig.hooks
        .deny
        .lock()
        .unwrap()
        .push("denied.sandlot.test".into());
    let cases: Vec<(String, &str, u16, &str)> = vec![
        // (url or CONNECT target, extra headers, status, words in the answer)
        (
            format!("http://other.sandlot.test:{}/", other.port()),
            "",
            403,
            "other.sandlot.test is not in this sandbox's allowlist",
        ),
        (
            format!("http://127.0.0.3:{}/", other.port()),
            "",
            403,
            "127.0.0.3 is a loopback address",
        ),
        (
            format!("http://rebind.sandlot.test:{p}/"),
            "",
            403,
            "rebind.sandlot.test resolves to 127.0.0.1 is a loopback address",
        ),
        (format!("http://localhost:{p}/"), "", 403, "loopback"),
        (
            "http://169.254.169.254/latest/meta-data/".into(),
            "",
            403,
            "the cloud metadata address",
        ),
        (
            format!("http://denied.sandlot.test:{p}/"),
            "",
            403,
            "denied by policy: test policy says no",
        ),
        (
            "CONNECT 169.254.169.254:443".into(),
            "",
            403,
            "cloud metadata",
        ),
        (
            "CONNECT other.sandlot.test:443".into(),
            "",
            403,
            "not in this sandbox's allowlist",
        ),
    ];
    for (target, extra, want, words) in &cases {
        let resp = if let Some(t) = target.strip_prefix("CONNECT ") {
            rig.connect(t).await.1
        } else {
            rig.get(target, extra).await
        };
        assert_eq!(status(&resp), *want, "{target}: {resp}");
        assert!(body(&resp).contains(words), "{target}: {resp}");
        assert!(body(&resp).starts_with("egress to "), "{resp}");
        assert!(
            resp.to_ascii_lowercase()
                .contains("proxy-status: sandlot; error="),
            "{resp}"
        );
    }
    // A raw IP the rules do not name at all (0.0.0.0/0 is in the list above, so a fresh rig).
    let strict = Rig::new(quick(), &[&on(PKG, p)]).await;
    let resp = strict.get("http://192.0.2.10/", "").await;
    assert_eq!(status(&resp), 403, "{resp}");
    assert!(
        body(&resp).contains("raw IPs need an IP or CIDR entry"),
        "{resp}"
    );
    let ev = strict.hooks.wait_event(|e| e.host == "192.0.2.10").await;
    assert!(!ev.allowed && ev.status == 403, "{ev:?}");

    // A Host header naming another host than the URL.
    let resp = rig
        .send(format!("GET http://{PKG}:{p}/ HTTP/1.1\r\nHost: other.sandlot.test\r\nConnection: close\r\n\r\n").as_bytes())
        .await;
    assert_eq!(status(&resp), 403, "{resp}");
    assert!(
        body(&resp).contains("does not match the URL's host"),
        "{resp}"
    );
    // Malformed or non-proxy requests: 400.
    for (raw, words) in [
        (
            "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            "absolute URL",
        ),
        (
            "GET https://pkg.sandlot.test/ HTTP/1.1\r\nConnection: close\r\n\r\n",
            "CONNECT",
        ),
        (
            "CONNECT pkg.sandlot.test HTTP/1.1\r\nConnection: close\r\n\r\n",
            "host:port",
        ),
        (
            "GET http://u:p@pkg.sandlot.test/ HTTP/1.1\r\nConnection: close\r\n\r\n",
            "credentials",
        ),
    ] {
        let resp = rig.send(raw.as_bytes()).await;
        assert_eq!(status(&resp), 400, "{raw}: {resp}");
        assert!(body(&resp).contains(words), "{raw}: {resp}");
    }
    let resp = rig.send(b"HELLO THERE\r\n\r\n").await;
    assert_eq!(status(&resp), 400, "{resp}");

    // Nothing reached the upstreams, and every refusal was recorded as one.
    assert!(web.requests().is_empty() && other.requests().is_empty());
    let events = rig.hooks.events.lock().unwrap().clone();
    assert_eq!(events.len(), cases.len() + 1 + 4 + 1, "{events:#?}");
    assert!(events.iter().all(|e| !e.allowed), "{events:#?}");
    let denied = events
        .iter()
        .find(|e| e.host == "denied.sandlot.test")
        .unwrap();
    assert!(
        denied
            .decision_id
            .as_deref()
            .is_some_and(|d| d.starts_with("dec-")),
        "{denied:?}"
    );
    let meta = events.iter().find(|e| e.host == "169.254.169.254").unwrap();
    assert_eq!(meta.ip, Some("169.254.169.254".parse().unwrap()));
    assert!(
        events.iter().any(|e| e.status == 400 && e.host.is_empty()),
        "{events:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sni_must_match_the_connect_host() {
    let echo = Upstream::echo("127.0.0.2");
    let rig = Rig::new(quick(), &[&on(PKG, echo.port()), "127.0.0.2/32"]).await;
    let (mut tunnel, head) = rig.connect(&format!("{PKG}:{}", echo.port())).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    tunnel
        .write_all(&client_hello_for_tests(Some("evil.sandlot.test"), 1))
        .await
        .unwrap();
    let back = read_all(&mut tunnel).await.into_bytes();
    // A TLS access_denied alert, then the close; none of the hello reached the server.
    assert_eq!(back, [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31]);
    let ev = rig.hooks.wait_event(|e| e.method == "CONNECT").await;
    assert!(!ev.allowed, "{ev:?}");
    assert!(
        ev.reason.contains(
            "SNI) \"evil.sandlot.test\" does not match the CONNECT host pkg.sandlot.test"
        ),
        "{ev:?}"
    );
    assert_eq!(ev.bytes_up, 0, "{ev:?}");

    // Over a raw IP, any SNI is a mismatch.
    let ip_rig = Rig::new(quick(), &[&on("127.0.0.2/32", echo.port())]).await;
    let (mut tunnel, head) = ip_rig.connect(&format!("127.0.0.2:{}", echo.port())).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    tunnel
        .write_all(&client_hello_for_tests(Some(PKG), 1))
        .await
        .unwrap();
    let _ = read_all(&mut tunnel).await;
    let ev = ip_rig.hooks.wait_event(|e| e.method == "CONNECT").await;
    assert!(
        !ev.allowed && ev.reason.contains("does not match"),
        "{ev:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_heads_get_431_and_slowloris_is_closed() {
    let web = Upstream::http("127.0.0.2");
    let rig = Rig::new(quick(), &[&on(PKG, web.port()), "127.0.0.2/32"]).await;
    let big = format!("X-Big: {}\r\n", "a".repeat(20 << 10));
    let resp = rig
        .get(&format!("http://{PKG}:{}/", web.port()), &big)
        .await;
    assert_eq!(status(&resp), 431, "{resp}");
    let ev = rig.hooks.wait_event(|e| e.status == 431).await;
    assert!(
        !ev.allowed && ev.reason.contains("over 16384 bytes"),
        "{ev:?}"
    );
    // Many small headers are bounded the same way.
    let many: String = (0..300).map(|i| format!("X-H{i}: v\r\n")).collect();
    let resp = rig
        .get(&format!("http://{PKG}:{}/", web.port()), &many)
        .await;
    assert_eq!(status(&resp), 431, "{resp}");

    // Slowloris: a head dripped one byte at a time is cut at the head timeout (1 s here).
    let mut c = rig.client();
    let start = Instant::now();
    let drip = async {
        for b in b"GET http://pkg.sandlot.test/ HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" {
            if c.write_all(&[*b]).await.is_err() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    };
    let cut = tokio::time::timeout(Duration::from_secs(4), drip).await;
    let elapsed = start.elapsed();
    assert!(
        matches!(cut, Ok(true)) || {
            // The write may still succeed into the closed socket's buffer; a read tells.
            let mut b = [0u8; 64];
            matches!(
                tokio::time::timeout(Duration::from_secs(2), c.read(&mut b)).await,
                Ok(Ok(0)) | Ok(Err(_))
            )
        },
        "the slow connection was not closed"
    );
    assert!(elapsed < Duration::from_secs(4), "{elapsed:?}");
    let ev = rig
        .hooks
        .wait_event(|e| e.reason.contains("no complete request head"))
        .await;
    assert!(!ev.allowed, "{ev:?}");
    // An idle connection that sends nothing is closed too.
    let mut idle = rig.client();
    let mut b = [0u8; 8];
    let n = tokio::time::timeout(Duration::from_secs(4), idle.read(&mut b))
        .await
        .expect("an idle connection is closed within the head timeout");
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    assert!(web.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_reach_their_host_only() {
    let web = Upstream::http("127.0.0.2");
    let other = Upstream::http("127.0.0.3");
    let rig = Rig::new(
        quick(),
        &[
            &on(PKG, web.port()),
            &on("other.sandlot.test", other.port()),
            "127.0.0.2/32",
            "127.0.0.3/32",
        ],
    )
    .await;
    rig.egress
        .set_secrets(
            &rig.id,
            vec![Secret {
                name: "pkg-token".into(),
                hosts: vec![PKG.into()],
                header: "Authorization".into(),
                value: "Bearer s3cr3t-value-9f2".into(),
            }],
        )
        .unwrap();
    // The sandbox's own Authorization is replaced, not doubled.
    let resp = rig
        .get(
            &format!("http://{PKG}:{}/private", web.port()),
            "Authorization: Bearer from-the-sandbox\r\n",
        )
        .await;
    assert_eq!(status(&resp), 200, "{resp}");
    let got = web.requests()[0].to_ascii_lowercase();
    assert!(
        got.contains("authorization: bearer s3cr3t-value-9f2"),
        "{got}"
    );
    assert!(!got.contains("from-the-sandbox"), "{got}");
    assert_eq!(got.matches("authorization:").count(), 1, "{got}");

    let resp = rig
        .get(&format!("http://other.sandlot.test:{}/", other.port()), "")
        .await;
    assert_eq!(status(&resp), 200, "{resp}");
    let got = other.requests()[0].to_ascii_lowercase();
    assert!(
        !got.contains("s3cr3t") && !got.contains("authorization"),
        "{got}"
    );

    let bad = rig.egress.set_secrets(
        &rig.id,
        vec![Secret {
            name: "bad".into(),
            hosts: vec![PKG.into()],
            header: "Host".into(),
            value: "x".into(),
        }],
    );
    assert!(bad.unwrap_err().to_string().contains("frames the request"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_canary_is_refused_and_reported() {
    let web = Upstream::http("127.0.0.2");
    let rig = Rig::new(quick(), &[&on(PKG, web.port()), "127.0.0.2/32"]).await;
    let canary = "AKIASANDLOTCANARY7Q2X";
    rig.egress.set_canary(&rig.id, canary.into());
    let url = format!("http://{PKG}:{}/upload", web.port());

    let resp = rig.get(&url, &format!("X-Leak: {canary}\r\n")).await;
    assert_eq!(status(&resp), 403, "{resp}");
    assert!(body(&resp).contains("canary"), "{resp}");

    let resp = rig
        .get(&format!("{url}?k=AKIASANDLOTCANARY7Q2%58"), "")
        .await;
    assert_eq!(status(&resp), 403, "percent-encoded in the URL: {resp}");

    let form = format!("user=me&key={canary}&x={}", "y".repeat(1000));
    let raw = format!(
        "POST {url} HTTP/1.1\r\nHost: {PKG}:{}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{form}",
        web.port(),
        form.len()
    );
    let resp = rig.send(raw.as_bytes()).await;
    assert_eq!(status(&resp), 403, "{resp}");

    // A chunked body with the canary in its second chunk.
    let raw = format!(
        "POST {url} HTTP/1.1\r\nHost: {PKG}:{}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n{:x}\r\n{canary}\r\n0\r\n\r\n",
        web.port(),
        canary.len()
    );
    let resp = rig.send(raw.as_bytes()).await;
    assert_eq!(status(&resp), 403, "{resp}");

    assert!(web.requests().is_empty(), "{:?}", web.requests());
    let seen = rig.hooks.canaries.lock().unwrap().clone();
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert!(seen.iter().all(|(id, _)| id == &rig.id));
    assert!(
        seen[0].1.contains("request head") && seen[2].1.contains("request body"),
        "{seen:?}"
    );
    assert!(seen.iter().all(|(_, w)| !w.contains(canary)), "{seen:?}");

    // Without the canary, the same POST bodies go through whole (chunked too).
    let raw = format!(
        "POST {url} HTTP/1.1\r\nHost: {PKG}:{}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        web.port()
    );
    let resp = rig.send(raw.as_bytes()).await;
    assert_eq!(status(&resp), 200, "{resp}");
    let big = "z".repeat(200_000);
    let raw = format!(
        "POST {url} HTTP/1.1\r\nHost: {PKG}:{}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{big}",
        web.port(),
        big.len()
    );
    let resp = rig.send(raw.as_bytes()).await;
    assert_eq!(status(&resp), 200, "{resp}");
    assert!(web.requests()[1].ends_with(&big));
    let events = rig.hooks.events.lock().unwrap().clone();
    assert_eq!(
        events
            .iter()
            .filter(|e| !e.allowed && e.reason.contains("canary"))
            .count(),
        4
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_change_live_and_cut_closes_everything() {
    let web = Upstream::http("127.0.0.2");
    let echo = Upstream::echo("127.0.0.2");
    let rig = Rig::new(quick(), &[]).await;
    let url = format!("http://{PKG}:{}/", web.port());
    let resp = rig.get(&url, "").await;
    assert_eq!(status(&resp), 403, "{resp}");
    assert!(body(&resp).contains("egress is off"), "{resp}");

    let (on_web, on_echo) = (on(PKG, web.port()), on(PKG, echo.port()));
    let allow = [on_web.as_str(), on_echo.as_str(), "127.0.0.2/32"];
    rig.egress.set_rules(&rig.id, rules(&allow));
    assert_eq!(status(&rig.get(&url, "").await), 200);

    // An open tunnel the new rules no longer allow is closed.
    let (mut tunnel, head) = rig.connect(&format!("{PKG}:{}", echo.port())).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let hello = client_hello_for_tests(Some(PKG), 1);
    tunnel.write_all(&hello).await.unwrap();
    let mut echoed = vec![0u8; hello.len()];
    tunnel.read_exact(&mut echoed).await.unwrap();
    rig.egress
        .set_rules(&rig.id, rules(&["other.sandlot.test"]));
    let rest = read_all(&mut tunnel).await;
    assert!(rest.is_empty(), "{rest}");
    let ev = rig
        .hooks
        .wait_event(|e| e.method == "CONNECT" && e.reason.contains("allowlist changed"))
        .await;
    assert!(ev.allowed && ev.bytes_up == hello.len() as u64, "{ev:?}");
    assert_eq!(status(&rig.get(&url, "").await), 403);

    // Cut: open tunnels close, and everything is refused from then on.
    rig.egress.set_rules(&rig.id, rules(&allow));
    let (mut tunnel, head) = rig.connect(&format!("{PKG}:{}", echo.port())).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut idle_client = rig.client();
    rig.egress.cut(&rig.id);
    assert!(rig.egress.is_cut(&rig.id));
    assert!(read_all(&mut tunnel).await.is_empty());
    assert!(read_all(&mut idle_client).await.is_empty());
    let resp = rig.get(&url, "").await;
    assert_eq!(status(&resp), 403, "{resp}");
    assert!(body(&resp).contains("cut (containment)"), "{resp}");
    rig.egress.set_rules(&rig.id, rules(&allow));
    assert_eq!(status(&rig.get(&url, "").await), 403, "a cut is sticky");
    rig.hooks
        .wait_event(|e| e.method == "CONNECT" && e.reason.contains("was cut"))
        .await;

    // Detach: the listener is gone from the namespace.
    rig.egress.detach(&rig.id);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let refused = rig
        .ns
        .connect(SocketAddr::from(([127, 0, 0, 1], PROXY_PORT)));
    assert!(refused.is_err(), "the listener still accepts after detach");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_bounded_and_the_listener_is_only_in_its_namespace() {
    let web = Upstream::http("127.0.0.2");
    let rig = Rig::new(
        EgressConfig {
            max_connections: 3,
            head_timeout: Duration::from_secs(5),
            ..EgressConfig::default()
        },
        &[&on(PKG, web.port()), "127.0.0.2/32"],
    )
    .await;
    let held: Vec<_> = (0..3).map(|_| rig.client()).collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(rig.egress.open_connections(&rig.id), 3);
    let mut fourth = rig.client();
    let resp = read_all(&mut fourth).await;
    assert_eq!(status(&resp), 429, "{resp}");
    assert!(body(&resp).contains("at most 3 open connections"), "{resp}");
    drop(held);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        status(&rig.get(&format!("http://{PKG}:{}/", web.port()), "").await),
        200
    );
    rig.hooks.wait_event(|e| e.status == 429).await;

    // Another namespace (another sandbox) cannot reach this proxy.
    let stranger = Netns::new();
    let err = stranger
        .connect(SocketAddr::from(([127, 0, 0, 1], PROXY_PORT)))
        .expect_err("a proxy listener is reachable from another namespace");
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");

    // Re-attaching (a restarted sandbox gets a new namespace) keeps the rules.
    let ns2 = Netns::new();
    let listener =
        sandlot_egress::listen_in_netns_fd(std::os::fd::AsFd::as_fd(&ns2.fd), PROXY_PORT).unwrap();
    rig.egress.attach(&rig.id, listener).unwrap();
    let mut c = ns2
        .connect(SocketAddr::from(([127, 0, 0, 1], PROXY_PORT)))
        .unwrap();
    c.write_all(
        format!(
            "GET http://{PKG}:{}/again HTTP/1.1\r\nHost: {PKG}:{}\r\nConnection: close\r\n\r\n",
            web.port(),
            web.port()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    assert_eq!(status(&read_all(&mut c).await), 200);
    // ... and closed the old one.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(rig
        .ns
        .connect(SocketAddr::from(([127, 0, 0, 1], PROXY_PORT)))
        .is_err());
    let _ = NetworkRules::none();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_carry_ports_and_tunnels_carry_tls_to_their_host_only() {
    let echo = Upstream::echo("127.0.0.2");
    let e = echo.port();
    let rig = Rig::new(quick(), &[PKG, &on(PKG, e), "127.0.0.2/32"]).await;

    // An entry without a port allows 443 for CONNECT (and 80 for plain HTTP) only.
    for port in [80, 25] {
        let (_, resp) = rig.connect(&format!("{PKG}:{port}")).await;
        assert_eq!(status(&resp), 403, "{resp}");
        assert!(
            body(&resp).contains(&format!("not on port {port}")),
            "{resp}"
        );
        let ev = rig
            .hooks
            .wait_event(|ev| ev.method == "CONNECT" && ev.port == port)
            .await;
        assert!(!ev.allowed && ev.status == 403, "{ev:?}");
        assert!(ev.reason.contains(&format!("{PKG}:{port}")), "{ev:?}");
    }

    // The listed port opens, for a ClientHello naming the host (any case, one trailing dot).
    for sni in ["PKG.Sandlot.TEST", "pkg.sandlot.test."] {
        let (mut tunnel, head) = rig.connect(&on(PKG, e)).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let hello = client_hello_for_tests(Some(sni), 1);
        tunnel.write_all(&hello).await.unwrap();
        let mut back = vec![0u8; hello.len()];
        tokio::time::timeout(WAIT, tunnel.read_exact(&mut back))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(back, hello);
    }

    // Anything else is closed with a TLS access_denied alert, nothing of it relayed, and the
    // refusal recorded with why.
    let alert = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31];
    let mut garbage = vec![0x16, 0x03, 0x01, 0x00, 0x08, 0x02];
    garbage.extend_from_slice(&[0xff; 7]);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            b"GET / HTTP/1.1\r\nHost: anything.example\r\n\r\n".to_vec(),
            "did not begin with a TLS ClientHello",
        ),
        (
            b"EHLO sandbox\r\n".to_vec(),
            "did not begin with a TLS ClientHello",
        ),
        (client_hello_for_tests(None, 1), "names no server (SNI)"),
        (
            client_hello_for_tests(Some("evil.sandlot.test"), 1),
            "\"evil.sandlot.test\" does not match the CONNECT host pkg.sandlot.test",
        ),
        (
            client_hello_for_tests(Some("pkg.sandlot.test.."), 1),
            "does not match the CONNECT host",
        ),
        (garbage, "malformed TLS ClientHello"),
    ];
    for (first, why) in &cases {
        let (mut tunnel, head) = rig.connect(&on(PKG, e)).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        tunnel.write_all(first).await.unwrap();
        let back = read_all(&mut tunnel).await.into_bytes();
        assert_eq!(back, alert, "{why}");
        let ev = rig
            .hooks
            .wait_event(|ev| ev.method == "CONNECT" && ev.reason.contains(why))
            .await;
        assert!(
            !ev.allowed && ev.bytes_up == 0 && ev.bytes_down == 0,
            "{ev:?}"
        );
    }

    // An upstream that speaks first (an SMTP banner on a listed port) says nothing to a
    // sandbox that has not sent a good ClientHello.
    let banner = tokio::net::TcpListener::bind("127.0.0.2:0").await.unwrap();
    let b = banner.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = banner.accept().await {
            tokio::spawn(async move {
                let _ = s.write_all(b"220 smtp.sandlot.test ESMTP\r\n").await;
                let mut sink = [0u8; 1024];
                while matches!(s.read(&mut sink).await, Ok(n) if n > 0) {}
            });
        }
    });
    rig.egress
        .set_rules(&rig.id, rules(&[&on(PKG, b), "127.0.0.2/32"]));
    let (mut tunnel, head) = rig.connect(&on(PKG, b)).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    tunnel.write_all(b"EHLO sandbox\r\n").await.unwrap();
    let back = read_all(&mut tunnel).await.into_bytes();
    assert_eq!(back, alert, "{}", String::from_utf8_lossy(&back));
    // ... nor to one that sends nothing at all and closes its side.
    let (mut tunnel, head) = rig.connect(&on(PKG, b)).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    tunnel.shutdown().await.unwrap();
    assert_eq!(read_all(&mut tunnel).await, "");
    let ev = rig.hooks.wait_event(|ev| ev.port == b && !ev.allowed).await;
    assert!(
        ev.reason.contains("did not begin with a TLS ClientHello"),
        "{ev:?}"
    );

    // A raw IP target: only an IP rule with its port, and a hello without SNI (TLS clients
    // send none for an IP).
    rig.egress
        .set_rules(&rig.id, rules(&[&on("127.0.0.2/32", e)]));
    let (mut tunnel, head) = rig.connect(&format!("127.0.0.2:{e}")).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let hello = client_hello_for_tests(None, 1);
    tunnel.write_all(&hello).await.unwrap();
    let mut back = vec![0u8; hello.len()];
    tokio::time::timeout(WAIT, tunnel.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back, hello);
    let (_, resp) = rig.connect("127.0.0.2:443").await;
    assert_eq!(status(&resp), 403, "{resp}");
    assert!(body(&resp).contains("not on port 443"), "{resp}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_and_track_are_refused() {
    let web = Upstream::http("127.0.0.2");
    let rig = Rig::new(quick(), &[&on(PKG, web.port()), "127.0.0.2/32"]).await;
    for method in ["TRACE", "TRACK", "trace", "Track"] {
        let raw = format!(
            "{method} http://{PKG}:{p}/ HTTP/1.1\r\nHost: {PKG}:{p}\r\nConnection: close\r\n\r\n",
            p = web.port()
        );
        let resp = rig.send(raw.as_bytes()).await;
        assert_eq!(status(&resp), 405, "{method}: {resp}");
        assert!(body(&resp).contains("is not proxied"), "{resp}");
        let ev = rig.hooks.wait_event(|e| e.method == method).await;
        assert!(!ev.allowed && ev.status == 405, "{ev:?}");
    }
    assert!(web.requests().is_empty(), "{:?}", web.requests());
    // The same request as a GET goes through: the refusal is the method's.
    let resp = rig.get(&format!("http://{PKG}:{}/", web.port()), "").await;
    assert_eq!(status(&resp), 200, "{resp}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hosts_own_addresses_are_refused_whatever_the_rules() {
    let own: Vec<std::net::IpAddr> = sandlot_egress::own_addresses()
        .iter()
        .copied()
        .filter(|ip| !ip.is_loopback())
        .collect();
    assert!(!own.is_empty(), "this host has no address but loopback");
    let rig = Rig::new(quick(), &["0.0.0.0/0", "::/0"]).await;
    for ip in own {
        let host = sandlot_egress::Host::Ip(ip).to_string();
        let (_, resp) = rig.connect(&format!("{host}:443")).await;
        assert_eq!(status(&resp), 403, "{resp}");
        assert!(
            body(&resp).contains("this host's own addresses"),
            "{ip}: {resp}"
        );
    }
}
