//! KPIs (issue 23) against the real server: `GET /v1/kpis` moves after executions, an error
//! and a policy denial; a contained sandbox gives a time to containment; an OOM, a killed
//! driver and a server restart give times to recover; the KPIs are the operator's (a tenant's
//! admin key is refused, bad windows are 400); `/metrics` carries the KPI metrics, and every
//! metric the shipped Grafana board queries exists on a live server's `/metrics`.

use crate::common;

use common::{As, Resp, TestServer};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::Duration;

const SETTLE: Duration = Duration::from_secs(20);

fn kpis(server: &TestServer, window: &str) -> Value {
    let r = server.get(&format!("/v1/kpis?window={window}"));
    let body = r.expect(200).clone();
    common::assert_schema("Kpis", &body);
    body
}

fn summary(server: &TestServer) -> Value {
    kpis(server, "1h")["summary"].clone()
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

fn scrape(server: &TestServer) -> String {
    let r = server.get("/metrics");
    assert_eq!(r.status, 200, "{}", r.text);
    r.text
}

/// The families `/metrics` declares (`# TYPE name kind`) and the series names it has samples
/// of.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            out.insert(name.to_owned());
            // Counters are exposed as `_total`, histograms as `_bucket`/`_sum`/`_count`.
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                _ => &[],
            };
            for s in suffixes {
                out.insert(format!("{name}{s}"));
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            out.insert(line[..end].to_owned());
        }
    }
    out
}

/// The `sandlot_*` metric names in a PromQL expression.
fn queried(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("sandlot_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.push(tail[..end].to_owned());
        rest = &tail[end..];
    }
    out
}

fn get_with(server: &TestServer, key: Option<&str>, path: &str) -> Resp {
    match key {
        Some(k) => As::key(server, k).get(path),
        None => {
            let c = server.client_with_key(None);
            let r = c.get(format!("{}{path}", server.url())).send().unwrap();
            let status = r.status().as_u16();
            let headers = r.headers().clone();
            let text = r.text().unwrap();
            Resp {
                status,
                headers,
                body: serde_json::from_str(&text).unwrap_or(Value::Null),
                text,
            }
        }
    }
}

#[test]
fn kpis_move_with_executions_errors_and_denials_and_are_the_operators() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let before = summary(&server);
    for i in 0..9 {
        server.execute(&id, &format!("{i} * 2"));
    }
    let r = server.execute(&id, "raise ValueError('on purpose')");
    assert_eq!(r["end_state"], "error", "{r:#}");
    // A denial at the execute gate.
    let r = server.put_bytes(
        "/v1/policies",
        std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/policies/code-size-cap.cedar"
        ))
        .unwrap(),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    server
        .execute_with(
            &id,
            &json!({ "code": format!("x = '{}'", "a".repeat(10_050)) }),
        )
        .expect_error(403, "policy_denied");

    let body = kpis(&server, "1h");
    let after = &body["summary"];
    let delta = |path: &[&str]| {
        let pick = |v: &Value| path.iter().fold(v.clone(), |v, k| v[*k].clone());
        n(&pick(after)) - n(&pick(&before))
    };
    assert_eq!(delta(&["error_rate", "executions"]), 10, "{after:#}");
    assert_eq!(delta(&["error_rate", "failed"]), 1, "{after:#}");
    assert!(after["error_rate"]["ratio"].as_f64().unwrap() > 0.0);
    // 10 execute requests answered 200 and one 403, each timed to its response's end.
    assert_eq!(delta(&["execute_latency_ms", "count"]), 11, "{after:#}");
    assert_eq!(delta(&["execute_latency_ms", "errors"]), 1, "{after:#}");
    let p50 = after["execute_latency_ms"]["p50"].as_f64().unwrap();
    let p99 = after["execute_latency_ms"]["p99"].as_f64().unwrap();
    assert!(p50 > 0.0 && p99 >= p50, "{after:#}");
    assert!(n(&after["create_latency_ms"]["count"]) >= 1, "{after:#}");
    assert!(after["create_latency_ms"]["p50"].as_f64().unwrap() > 0.0);
    assert!(
        delta(&["policy_violation_rate", "decisions"]) >= 11,
        "{after:#}"
    );
    assert_eq!(delta(&["policy_violation_rate", "denied"]), 1, "{after:#}");
    let ratio = after["policy_violation_rate"]["ratio"].as_f64().unwrap();
    assert!(ratio > 0.0 && ratio < 0.5, "{after:#}");
    // The series: one value per 10 s bucket of the hour, the last bucket holding the burst.
    assert_eq!(body["buckets"], 360);
    assert_eq!(body["step_seconds"], 10);
    let series = body["series"]["executions"].as_array().unwrap();
    assert_eq!(series.len(), 360);
    let in_series: u64 = series.iter().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(in_series, n(&after["error_rate"]["executions"]));
    assert_eq!(body["queues"]["creates_waiting"], 0, "{body:#}");
    assert_eq!(body["queues"]["reviews_pending"], 0);
    // The day, in minutes.
    let day = kpis(&server, "1d");
    assert_eq!(day["buckets"], 1440);
    assert_eq!(day["step_seconds"], 60);
    assert_eq!(
        day["summary"]["policy_violation_rate"]["denied"],
        after["policy_violation_rate"]["denied"]
    );

    // On /metrics: the ratio the server computes, the decisions it is computed from.
    let text = scrape(&server);
    let names = metric_names(&text);
    for name in [
        "sandlot_policy_decisions_total",
        "sandlot_policy_violation_ratio",
        "sandlot_containment_duration_seconds_bucket",
        "sandlot_recovery_seconds_bucket",
        "sandlot_reviews_pending",
        "sandlot_jobs_queued",
        "sandlot_creation_queue",
    ] {
        assert!(
            names.contains(name),
            "{name} missing from /metrics:\n{text}"
        );
    }
    let ratio_line = text
        .lines()
        .find(|l| l.starts_with("sandlot_policy_violation_ratio "))
        .unwrap();
    let v: f64 = ratio_line.rsplit_once(' ').unwrap().1.parse().unwrap();
    assert!(v > 0.0 && v < 0.5, "{ratio_line}");

    // Bad input: 400, with a code.
    server
        .get("/v1/kpis?window=7d")
        .expect_error(400, "invalid_argument");
    server
        .get("/v1/kpis?window=1h&tenant=acme")
        .expect_error(400, "invalid_request");
    // The KPIs are server-wide: the operator's only.
    get_with(&server, None, "/v1/kpis").expect_error(401, "unauthenticated");
    let other_admin = server.tenant("acme").role("admin").key();
    let r = get_with(&server, Some(&other_admin), "/v1/kpis");
    r.expect_error(403, "forbidden");
    assert!(!r.text.contains("summary"), "{}", r.text);
    // A key of the operator's tenant that is not an admin is not the operator.
    let member = server
        .post(
            "/v1/keys",
            &json!({ "tenant": "default", "role": "member" }),
        )
        .expect(201)["key"]
        .as_str()
        .unwrap()
        .to_owned();
    get_with(&server, Some(&member), "/v1/kpis?window=1d").expect_error(403, "forbidden");
}

#[test]
fn a_contained_sandbox_gives_a_time_to_containment() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let before = summary(&server);
    let r = server.execute(&id, "import os\nprint(os.environ['AWS_SECRET_ACCESS_KEY'])");
    assert_eq!(r["error"]["name"], "SandboxContained", "{r:#}");
    let contained = common::wait_until(SETTLE, || {
        n(&summary(&server)["containment"]["count"]) > n(&before["containment"]["count"])
    });
    assert!(contained, "{:#}", summary(&server));
    let after = summary(&server);
    let mean = after["containment"]["mean_ms"].as_f64().unwrap();
    let max = after["containment"]["max_ms"].as_f64().unwrap();
    assert!(mean >= 0.0 && max >= mean && max < 5_000.0, "{after:#}");
    assert!(
        n(&after["policy_violation_rate"]["findings"]) >= 1,
        "{after:#}"
    );
    let text = scrape(&server);
    assert!(
        text.contains("sandlot_containment_duration_seconds_count 1"),
        "{text}"
    );
}

#[test]
fn an_oom_a_killed_driver_and_a_server_restart_give_times_to_recover() {
    let mut server = TestServer::start();
    let id = server.create_sandbox_with(&json!({ "limits": { "memory_mb": 128 } }))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let recoveries = |s: &TestServer| n(&summary(s)["recovery"]["count"]);
    assert_eq!(recoveries(&server), 0);

    // Out of memory: the execution ends `oom`, the sandbox restarts in place.
    let r = server.execute_with(
        &id,
        &json!({ "code": "hog = []\nwhile True:\n    hog.append(bytearray(16 * 2**20))", "timeout": 60 }),
    );
    assert_eq!(r.body["end_state"], "oom", "{}", r.text);
    assert!(common::wait_until(SETTLE, || recoveries(&server) == 1));
    assert_eq!(server.execute(&id, "1 + 1")["result"]["text/plain"], "2");

    // The driver killed from inside: the next request finds it gone and restarts in place.
    let r = server.execute_with(
        &id,
        &json!({ "code": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)" }),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    let r = server.execute(&id, "2 + 2");
    assert_eq!(r["result"]["text/plain"], "4", "{r:#}");
    assert!(common::wait_until(SETTLE, || recoveries(&server) == 2));
    let s = summary(&server);
    let mean = s["recovery"]["mean_ms"].as_f64().unwrap();
    let max = s["recovery"]["max_ms"].as_f64().unwrap();
    assert!(mean > 0.0 && max >= mean && max < 60_000.0, "{s:#}");
    let text = scrape(&server);
    assert!(
        text.contains("sandlot_recovery_seconds_count{reason=\"oom\"} 1"),
        "{text}"
    );

    // A server restart: the sandbox is stopped, and its first request restarts it in place
    // (the new process's history).
    server.restart();
    assert_eq!(server.execute(&id, "3 + 3")["result"]["text/plain"], "6");
    let s = summary(&server);
    assert_eq!(n(&s["recovery"]["count"]), 1, "{s:#}");
    let text = scrape(&server);
    assert!(
        text.contains("sandlot_recovery_seconds_count{reason=\"server_restarted\"} 1"),
        "{text}"
    );
}

#[test]
fn every_metric_the_grafana_board_queries_is_on_metrics() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    server.execute(&id, "1 + 1");
    let text = scrape(&server);
    let names = metric_names(&text);
    let board: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/grafana/sandlot.json"
        ))
        .unwrap(),
    )
    .expect("the board is JSON");
    assert_eq!(board["uid"], "sandlot-kpis");
    let panels = board["panels"].as_array().unwrap();
    let titles: Vec<&str> = panels
        .iter()
        .map(|p| p["title"].as_str().unwrap())
        .collect();
    for want in [
        "Create latency",
        "Execute latency",
        "Error rate",
        "Policy-violation rate",
        "Mean time to containment",
        "Time to recover",
        "Queue depths",
    ] {
        assert!(
            titles.iter().any(|t| t.starts_with(want)),
            "no {want} panel: {titles:?}"
        );
    }
    let mut checked = 0;
    for p in panels {
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{p:#}");
        for t in targets {
            let expr = t["expr"].as_str().unwrap();
            let used = queried(expr);
            assert!(!used.is_empty(), "{expr}");
            for name in used {
                assert!(
                    names.contains(&name),
                    "the board queries {name}, which /metrics does not have ({expr})"
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 20, "{checked}");
}

#[test]
fn metric_names_and_queries_are_read_right() {
    let names = metric_names(
        "# TYPE sandlot_x counter\nsandlot_x_total 1\n# TYPE sandlot_h histogram\n# TYPE sandlot_g gauge\nsandlot_g{a=\"b\"} 2\n# EOF\n",
    );
    for n in [
        "sandlot_x_total",
        "sandlot_h_bucket",
        "sandlot_h_count",
        "sandlot_g",
    ] {
        assert!(names.contains(n), "{names:?}");
    }
    assert_eq!(
        queried("sum(rate(sandlot_a_total{x=\"y\"}[5m])) / sandlot_b"),
        vec!["sandlot_a_total", "sandlot_b"]
    );
}

#[test]
fn the_console_kpi_page_is_for_a_signed_in_navigation() {
    let server = TestServer::start();
    let http = common::client_builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let url = |p: &str| format!("{}{p}", server.url());
    let csp = |r: &reqwest::blocking::Response| {
        r.headers()
            .get("content-security-policy")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    // Signed out: back to the sign-in page.
    let r = http.get(url("/console/kpis")).send().unwrap();
    assert_eq!(r.status().as_u16(), 303);
    assert_eq!(r.headers()["location"], "/console");
    assert!(csp(&r).starts_with("default-src 'self'; script-src 'self'"));
    // Signed in (the operator).
    let r = http
        .post(url("/console/session"))
        .json(&json!({ "key": server.key() }))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let cookie = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| v.strip_prefix("sandlot_session="))
        .and_then(|v| v.split(';').next())
        .unwrap()
        .to_owned();
    let cookie = format!("sandlot_session={cookie}");
    let r = http
        .get(url("/console/kpis"))
        .header("cookie", &cookie)
        .header("sec-fetch-dest", "document")
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(csp(&r).contains("frame-ancestors 'none'"));
    let page = r.text().unwrap();
    assert!(page.contains("/console/assets/kpis.js"), "{page}");
    assert!(
        page.contains("href=\"/console/kpis\""),
        "the nav links the page"
    );
    let marker = "<meta name=\"sandlot-csrf\" content=\"";
    let at = page.find(marker).unwrap() + marker.len();
    let csrf = &page[at..at + page[at..].find('"').unwrap()];
    // A script's fetch of the page (or a frame) gets no token.
    let r = http
        .get(url("/console/kpis"))
        .header("cookie", &cookie)
        .header("sec-fetch-dest", "empty")
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    assert!(!r.text().unwrap().contains("sandlot-csrf"));
    // The page's own call: the cookie with its token reads the KPIs; without it, refused.
    let r = http
        .get(url("/v1/kpis?window=1d"))
        .header("cookie", &cookie)
        .header("x-sandlot-csrf", csrf)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let r = http
        .get(url("/v1/kpis"))
        .header("cookie", &cookie)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    assert!(r.text().unwrap().contains("csrf_failed"));
    let r = http
        .post(url("/console/kpis"))
        .header("cookie", &cookie)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 405);
    let r = http.get(url("/console/assets/kpis.js")).send().unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let js = r.text().unwrap();
    assert!(!js.contains("setInterval") && !js.contains("innerHTML"));
}

#[test]
fn a_held_action_is_a_queued_review_not_a_violation_until_a_person_denies_it() {
    let server = TestServer::start_with_env(&[("SANDLOT_POOL_SIZE", "1")]);
    let policies = format!(
        "{}\n@id(\"review-bash\")\n@review(\"bash runs only after a person looks at it\")\n\
         permit (principal, action == Sandlot::Action::\"execute\", resource)\n\
         when {{ context.language == \"bash\" }};\n",
        sandlot_policy::DEFAULT_POLICIES
    );
    let r = server.put_bytes("/v1/policies", policies.into_bytes());
    assert_eq!(r.status, 200, "{}", r.text);
    let asker = server.tenant("acme").role("admin").key();
    let a = As::key(&server, &asker);
    let sb = a.post("/v1/sandboxes", &json!({})).expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let before = kpis(&server, "1h");
    let r = a.post(
        &format!("/v1/sandboxes/{sb}/execute"),
        &json!({ "code": "echo held", "language": "bash" }),
    );
    assert_eq!(r.status, 202, "{}", r.text);
    let review = r.body["review"]["id"]
        .as_str()
        .or_else(|| r.body["id"].as_str())
        .unwrap_or_else(|| panic!("{}", r.text))
        .to_owned();
    let held = kpis(&server, "1h");
    assert_eq!(held["queues"]["reviews_pending"], 1, "{:#}", held["queues"]);
    let violations = |k: &Value, f: &str| n(&k["summary"]["policy_violation_rate"][f]);
    // Held is neither allowed nor denied.
    assert_eq!(violations(&held, "denied"), violations(&before, "denied"));
    let text = scrape(&server);
    assert!(
        text.contains("sandlot_policy_decisions_total{gate=\"execute\",outcome=\"review\"} 1"),
        "{text}"
    );
    assert!(text.contains("sandlot_reviews_pending "), "{text}");
    // The operator denies it: one decision, denied; the queue is empty again.
    server
        .post(
            &format!("/v1/reviews/{review}/deny"),
            &json!({ "reason": "not today" }),
        )
        .expect(200);
    let after = kpis(&server, "1h");
    assert_eq!(after["queues"]["reviews_pending"], 0);
    assert_eq!(
        violations(&after, "denied"),
        violations(&before, "denied") + 1
    );
    assert!(violations(&after, "decisions") > violations(&held, "decisions"));
}
