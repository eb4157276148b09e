//! The client against a tiny server on 127.0.0.1, answering each route the way a test needs.

use super::*;
use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode as Code};
use axum::response::{IntoResponse, Response as AxumResponse};
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use sandlot_types::ErrorCode;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Serves `app` on 127.0.0.1:0; returns its base URL.
async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// A body sent as the given chunks, each flushed on its own with a pause between them, so the
/// client sees them as separate reads.
fn chunked(chunks: Vec<Vec<u8>>) -> Body {
    let stream = futures::stream::iter(chunks).then(|c| async move {
        tokio::time::sleep(Duration::from_millis(5)).await;
        Ok::<_, std::io::Error>(Bytes::from(c))
    });
    Body::from_stream(stream)
}

/// A body that never ends (64 KiB chunks of spaces).
fn endless() -> Body {
    let chunk = Bytes::from(vec![b' '; 64 << 10]);
    Body::from_stream(futures::stream::repeat_with(move || {
        Ok::<_, std::io::Error>(chunk.clone())
    }))
}

fn result_json(id: &str) -> Value {
    json!({
        "id": "ex_1", "sandbox_id": id, "language": "python", "end_state": "ok",
        "stdout": "hi\n", "stderr": "", "outputs": [],
        "stdout_truncation": {"kept_bytes": 3, "dropped_bytes": 0},
        "stderr_truncation": {"kept_bytes": 0, "dropped_bytes": 0},
        "started_at": "2026-01-01T00:00:00Z", "duration_ms": 1.0, "cpu_time_ms": 1.0,
        "peak_memory_bytes": 1, "sandbox_alive": true,
    })
}

use futures::StreamExt;

#[tokio::test]
async fn an_error_body_comes_back_as_its_api_error() {
    let not_found = || async {
        (
            Code::NOT_FOUND,
            [(header::CONTENT_TYPE, "application/json")],
            r#"{"error":{"code":"sandbox_not_found","message":"no sandbox sb_x"}}"#,
        )
    };
    let app = Router::new().route("/v1/sandboxes/{id}", get(not_found).delete(not_found));
    let c = Client::new(&serve(app).await, None).unwrap();
    let e = c.get_json::<Value>("/v1/sandboxes/sb_x").await.unwrap_err();
    let api = e.api().expect("an API error");
    assert_eq!(api.code, ErrorCode::SandboxNotFound);
    assert_eq!(api.message, "no sandbox sb_x");
    // It displays as the API error does: code, then message.
    assert_eq!(e.to_string(), api.to_string());
    assert!(matches!(
        c.delete("/v1/sandboxes/sb_x").await,
        Err(ClientError::Api(_))
    ));
}

#[tokio::test]
async fn a_non_sandlot_error_is_its_status_and_the_start_of_its_body() {
    let long = format!("<html>bad gateway{}</html>", "x".repeat(10_000));
    let app = Router::new().route(
        "/v1/x",
        get(move || async move { (Code::BAD_GATEWAY, long) }),
    );
    let base = serve(app).await;
    let c = Client::new(&format!("{base}/"), None).unwrap();
    match c.get_json::<Value>("/v1/x").await.unwrap_err() {
        ClientError::Status { url, status, body } => {
            assert_eq!(url, base);
            assert_eq!(status, StatusCode::BAD_GATEWAY);
            assert!(body.starts_with("<html>bad gateway"), "{body}");
            assert_eq!(body.chars().count(), ERROR_START_CHARS);
        }
        e => panic!("{e:?}"),
    }
    // An error body that never ends is read up to its bound, not to the end.
    let app = Router::new().route(
        "/",
        get(|| async { (Code::INTERNAL_SERVER_ERROR, endless()) }),
    );
    let c = Client::new(&serve(app).await, None).unwrap();
    assert!(matches!(
        c.get_json::<Value>("/").await,
        Err(ClientError::Status {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            ..
        })
    ));
}

#[tokio::test]
async fn an_oversized_answer_is_refused() {
    let app = Router::new()
        .route("/endless", get(|| async { endless() }))
        .route("/sized", get(|| async { vec![b'1'; 100] }))
        .route("/not-json", get(|| async { "not json" }));
    let c = Client::new(&serve(app).await, None).unwrap();
    // Streamed without a length: cut off past the bound.
    match c.get_json::<Value>("/endless").await.unwrap_err() {
        ClientError::TooLarge { limit, .. } => assert_eq!(limit, MAX_ANSWER_BYTES),
        e => panic!("{e:?}"),
    }
    // With a length past the bound: refused before reading.
    match c.get_bytes("/sized", 99).await.unwrap_err() {
        ClientError::TooLarge { limit: 99, .. } => {}
        e => panic!("{e:?}"),
    }
    assert_eq!(c.get_bytes("/sized", 100).await.unwrap().len(), 100);
    assert!(matches!(
        c.get_json::<Value>("/not-json").await,
        Err(ClientError::Decode { .. })
    ));
}

#[tokio::test]
async fn a_redirect_is_not_followed() {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let app = Router::new()
        .route(
            "/v1/sandboxes",
            post(|| async {
                (Code::TEMPORARY_REDIRECT, [(header::LOCATION, "/elsewhere")]).into_response()
            }),
        )
        .route(
            "/elsewhere",
            post(move || async move {
                counter.fetch_add(1, Ordering::SeqCst);
                "{}"
            }),
        );
    let c = Client::new(&serve(app).await, None).unwrap();
    match c
        .post_json::<Value>("/v1/sandboxes", &json!({"code": "secret"}))
        .await
    {
        Err(ClientError::Status { status, .. }) => {
            assert_eq!(status, StatusCode::TEMPORARY_REDIRECT)
        }
        r => panic!("{r:?}"),
    }
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}

#[test]
fn a_url_that_is_not_a_server_is_refused() {
    for bad in [
        "not a url",
        "ftp://127.0.0.1/",
        "mailto:a@b.test",
        "127.0.0.1:7878",
        "",
    ] {
        match Client::new(bad, None) {
            Err(ClientError::InvalidUrl(msg)) => {
                assert!(msg.contains("expected e.g. http://127.0.0.1:7878"), "{msg}")
            }
            Err(e) => panic!("{bad}: {e:?}"),
            Ok(_) => panic!("{bad} accepted"),
        }
    }
    assert!(matches!(
        Client::new("http://127.0.0.1:1", Some("a\nb")),
        Err(ClientError::InvalidKey)
    ));
    let c = Client::new("https://127.0.0.1:1/prefix//", None).unwrap();
    assert_eq!(c.base(), "https://127.0.0.1:1/prefix");
    assert_eq!(c.url("/v1/x"), "https://127.0.0.1:1/prefix/v1/x");
}

#[tokio::test]
async fn an_unreachable_server_says_so() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let e = Client::new(&url, None)
        .unwrap()
        .get_json::<Value>("/v1/sandboxes")
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::Transport { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        format!("could not reach the server at {url}")
    );
}

#[tokio::test]
async fn the_key_is_sent_as_the_bearer_key() {
    let app = Router::new().route(
        "/v1/whoami",
        get(|h: HeaderMap| async move {
            let auth = h
                .get(header::AUTHORIZATION)
                .map(|v| v.to_str().unwrap().to_owned());
            axum::Json(json!({ "authorization": auth }))
        }),
    );
    let base = serve(app).await;
    let with = Client::new(&base, Some("sl_key")).unwrap();
    let v: Value = with.get_json("/v1/whoami").await.unwrap();
    assert_eq!(v["authorization"], "Bearer sl_key");
    let without = Client::new(&base, None).unwrap();
    let v: Value = without.get_json("/v1/whoami").await.unwrap();
    assert_eq!(v["authorization"], Value::Null);
}

#[test]
fn paths_encode_each_part_as_one_segment() {
    assert_eq!(
        path(&["v1", "sandboxes", "sb_1", "files", "a/b c.txt"]),
        "/v1/sandboxes/sb_1/files/a%2Fb%20c.txt"
    );
    assert_eq!(path(&["v1", "sandboxes", "..", "x"]), "/v1/sandboxes/x");
    assert_eq!(segment("data.csv"), "data.csv");
    assert_eq!(segment("a b#?/"), "a%20b%23%3F%2F");
    assert_eq!(segment(".."), "%2E%2E");
}

/// (Moved from `sandlot agent`'s uploads, whose file names go into paths through [`segment`].)
#[test]
fn segments_are_encoded() {
    assert_eq!(segment("data.csv"), "data.csv");
    assert_eq!(segment("a b#?"), "a%20b%23%3F");
}

/// (Moved from `sandlot keys`, whose names and ids go into paths through [`segment`].)
#[test]
fn names_stay_one_path_segment() {
    assert_eq!(segment("acme-1_x"), "acme-1_x");
    assert_eq!(segment("../keys"), "..%2Fkeys");
    assert_eq!(segment(".."), "%2E%2E");
    assert_eq!(segment("a?b=c&d"), "a%3Fb%3Dc%26d");
}

/// An SSE answer to `POST /v1/sandboxes/{id}/execute` made of `chunks`; records the request's
/// Accept header and body.
async fn sse_server(chunks: Vec<Vec<u8>>) -> (String, Arc<std::sync::Mutex<Vec<(String, Value)>>>) {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let app = Router::new().route(
        "/v1/sandboxes/{id}/execute",
        post(move |h: HeaderMap, body: axum::Json<Value>| {
            let chunks = chunks.clone();
            let log = log.clone();
            async move {
                let accept = h
                    .get(header::ACCEPT)
                    .map(|v| v.to_str().unwrap().to_owned())
                    .unwrap_or_default();
                log.lock().unwrap().push((accept, body.0));
                AxumResponse::builder()
                    .header(header::CONTENT_TYPE, "text/event-stream")
                    .body(chunked(chunks))
                    .unwrap()
            }
        }),
    );
    (serve(app).await, seen)
}

fn exec_request() -> ExecuteRequest {
    ExecuteRequest {
        code: "print('hé')".into(),
        language: Default::default(),
        timeout: Some(5.0),
        stream: false,
        context: None,
        on_failure: Default::default(),
    }
}

#[tokio::test]
async fn a_stream_split_at_awkward_boundaries_gives_its_events_then_the_result() {
    let text = format!(
        "event: stdout\ndata: {}\n\n:keep-alive\r\n\r\nevent: stdout\r\ndata: {}\r\n\r\nevent: done\ndata: {}\n\n",
        json!({"type": "stdout", "text": "hé\n"}),
        json!({"type": "stderr", "text": "w"}),
        result_json("sb_1"),
    )
    .into_bytes();
    // Split inside the multibyte é, between a CR and its LF, inside a field name, and then
    // one byte at a time for a stretch.
    let e_at = text.windows(2).position(|w| w == "é".as_bytes()).unwrap() + 1;
    let cr_at = text.windows(2).position(|w| w == b"\r\n").unwrap() + 1;
    let mut cuts = vec![3, e_at, cr_at, cr_at + 9];
    cuts.extend(cr_at + 20..cr_at + 40);
    cuts.sort();
    cuts.dedup();
    let mut chunks = Vec::new();
    let mut from = 0;
    for cut in cuts.into_iter().chain([text.len()]) {
        chunks.push(text[from..cut].to_vec());
        from = cut;
    }
    let (base, seen) = sse_server(chunks).await;
    let c = Client::new(&base, None).unwrap();
    let mut s = c.execute_stream("sb_1", exec_request()).await.unwrap();
    let mut outputs = Vec::new();
    let result = loop {
        match s.next().await.unwrap() {
            Streamed::Output(ev) => outputs.push(ev),
            Streamed::Done(r) => break r,
        }
    };
    assert_eq!(
        outputs,
        [
            OutputEvent::Stdout {
                text: "hé\n".into()
            },
            OutputEvent::Stderr { text: "w".into() }
        ]
    );
    assert_eq!(result.sandbox_id, "sb_1");
    assert!(matches!(s.next().await, Err(ClientError::StreamEnded)));
    let seen = seen.lock().unwrap();
    assert_eq!(seen[0].0, "text/event-stream");
    assert_eq!(seen[0].1["stream"], true);
    assert_eq!(seen[0].1["code"], "print('hé')");
}

#[tokio::test]
async fn a_stream_ends_with_its_error_or_early() {
    let (base, _) = sse_server(vec![
        b"event: api_error\ndata: {\"error\":{\"code\":\"sandbox_busy\",\"message\":\"busy\"}}\n\n"
            .to_vec(),
    ])
    .await;
    let mut s = Client::new(&base, None)
        .unwrap()
        .execute_stream("sb_1", exec_request())
        .await
        .unwrap();
    match s.next().await.unwrap_err() {
        ClientError::Api(e) => assert_eq!(e.code, ErrorCode::SandboxBusy),
        e => panic!("{e:?}"),
    }

    let (base, _) = sse_server(vec![b"event: api_error\ndata: boom\n\n".to_vec()]).await;
    let mut s = Client::new(&base, None)
        .unwrap()
        .execute_stream("sb_1", exec_request())
        .await
        .unwrap();
    let e = s.next().await.unwrap_err();
    assert_eq!(e.to_string(), "the execution failed: boom");

    let (base, _) = sse_server(vec![
        b"event: stdout\ndata: {\"type\":\"stdout\",\"text\":\"a\"}\n\n".to_vec(),
    ])
    .await;
    let mut s = Client::new(&base, None)
        .unwrap()
        .execute_stream("sb_1", exec_request())
        .await
        .unwrap();
    assert!(matches!(s.next().await, Ok(Streamed::Output(_))));
    assert!(matches!(s.next().await, Err(ClientError::StreamEnded)));
}

#[tokio::test]
async fn a_stream_that_never_ends_an_event_is_cut_off() {
    let app = Router::new().route(
        "/v1/sandboxes/{id}/execute",
        post(|| async {
            AxumResponse::builder()
                .header(header::CONTENT_TYPE, "text/event-stream")
                .body(endless())
                .unwrap()
        }),
    );
    let c = Client::new(&serve(app).await, None).unwrap();
    let mut s = c.execute_stream("sb_1", exec_request()).await.unwrap();
    match s.next().await.unwrap_err() {
        ClientError::TooLarge { limit, what, .. } => {
            assert_eq!((limit, what), (MAX_EVENT_BYTES, "an event"))
        }
        e => panic!("{e:?}"),
    }
}

#[tokio::test]
async fn execute_posts_json_and_reads_the_result() {
    let app = Router::new().route(
        "/v1/sandboxes/{id}/execute",
        post(|axum::extract::Path(id): axum::extract::Path<String>, body: axum::Json<Value>| async move {
            assert_eq!(body.0["stream"], false);
            axum::Json(result_json(&id))
        }),
    );
    let c = Client::new(&serve(app).await, None).unwrap();
    let r = c.execute("sb_9", &exec_request()).await.unwrap();
    assert_eq!(r.sandbox_id, "sb_9");
    assert_eq!(r.stdout, "hi\n");
}
