//! Router tests with a scripted backend: every route, every error path, SSE framing and timing,
//! streaming uploads and downloads, and the OpenAPI document against the routes and the types.

use crate::{router_with, routes, ApiConfig, OPENAPI_JSON};
use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::response::Response;
use axum::Router;
use bytes::Bytes;
use futures::StreamExt;
use http_body_util::BodyExt;
use sandlot_runtime::ByteStream;
use sandlot_service::Backend;
use sandlot_types::{
    ApiError, CreateSandbox, EffectiveLimits, EndState, ErrorBody, ErrorCode, ExecError,
    ExecuteRequest, ExecutionRecord, ExecutionResult, FileEntry, Language, Limits, OutputEvent,
    Sandbox, SandboxState, Template, TemplateSpec, TemplateStatus, Truncation,
};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tower::ServiceExt;

// ---------------------------------------------------------------------------------------------
// Samples: every field filled in, so they exercise every property of the schemas.

fn bundle(pairs: &[(&str, Value)]) -> BTreeMap<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

fn sample_sandbox(id: &str) -> Sandbox {
    Sandbox {
        id: id.to_owned(),
        template: "default".into(),
        template_version: "sha256:abc".into(),
        state: SandboxState::Lost,
        env: BTreeMap::from([("A".into(), "1".into())]),
        metadata: BTreeMap::from([("owner".into(), "me".into())]),
        limits: EffectiveLimits {
            memory_mb: 512,
            cpu_millis: 1000,
            pids: 256,
            disk_mb: 1024,
        },
        idle_timeout: 600,
        max_lifetime: 86400,
        created_at: "2025-01-01T00:00:00Z".into(),
        last_active_at: "2025-01-01T00:00:01Z".into(),
        expires_at: "2025-01-01T00:10:01Z".into(),
        ended_reason: Some("server restarted".into()),
        restart_count: 1,
        last_restart: Some(sandlot_types::LastRestart {
            reason: "oom".into(),
            at: "2025-01-01T00:00:01Z".into(),
        }),
        on_idle: sandlot_types::IdleAction::Pause,
        forked_from: Some("sb_parent".into()),
        from_snapshot: Some("snap_0123456789abcdef0123456789abcdef".into()),
        paused_at: Some("2025-01-01T00:00:02Z".into()),
        last_restore: Some(sandlot_types::LastRestore {
            at: "2025-01-01T00:00:01Z".into(),
            source: "fork".into(),
            variables: 2,
            not_restored: vec![sandlot_types::NotCaptured {
                name: "f".into(),
                context: "default".into(),
                reason: "open file".into(),
            }],
        }),
        volumes: vec![sandlot_types::VolumeMount {
            name: "data".into(),
            path: "data".into(),
            read_only: true,
        }],
        ports: vec![8501],
        all_ports: true,
        tenant: "default".into(),
        tier: "isolated".into(),
        network: vec!["pkgs.test".into()],
        secrets: vec!["token".into()],
        contained: Some("its canary was printed".into()),
        mounts: vec![sandlot_types::HostMount {
            host: "/srv/data".into(),
            path: "/mnt/data".into(),
        }],
        port_token: Some("sb.0123456789abcdef0123456789abcdef".into()),
    }
}

fn sample_error() -> ExecError {
    ExecError {
        name: "ZeroDivisionError".into(),
        value: "division by zero".into(),
        traceback: vec![
            "Traceback (most recent call last):".into(),
            "ZeroDivisionError".into(),
        ],
    }
}

fn sample_events() -> Vec<OutputEvent> {
    vec![
        OutputEvent::Stdout { text: "0\n".into() },
        OutputEvent::Stderr {
            text: "warn\n".into(),
        },
        OutputEvent::DisplayData {
            data: bundle(&[
                ("image/png", json!("iVBORw0KGgo=")),
                ("text/plain", json!("<Figure>")),
            ]),
            metadata: json!({}),
        },
        OutputEvent::Result {
            data: bundle(&[("text/plain", json!("42"))]),
            metadata: Value::Null,
        },
        OutputEvent::Error(sample_error()),
    ]
}

fn sample_result_rolled_back() -> sandlot_types::Rollback {
    sandlot_types::Rollback {
        reason: "guardrails".into(),
        variables: 2,
        not_restored: vec![sandlot_types::NotCaptured {
            name: "sock".into(),
            context: "default".into(),
            reason: "cannot pickle 'socket' object".into(),
        }],
        capture_ms: 1.0,
        restore_ms: 2.0,
    }
}

fn sample_result(id: &str) -> ExecutionResult {
    ExecutionResult {
        output_held: None,
        id: "ex1".into(),
        sandbox_id: id.to_owned(),
        language: Language::Python,
        end_state: EndState::Error,
        stdout: "0\n".into(),
        stderr: "warn\n".into(),
        result: Some(bundle(&[
            ("text/plain", json!("42")),
            ("application/json", json!({"a": [1]})),
        ])),
        error: Some(sample_error()),
        exit_code: Some(1),
        outputs: sample_events(),
        stdout_truncation: Truncation {
            kept_bytes: 2,
            dropped_bytes: 0,
        },
        stderr_truncation: Truncation {
            kept_bytes: 5,
            dropped_bytes: 7,
        },
        started_at: "2025-01-01T00:00:02Z".into(),
        duration_ms: 12.5,
        cpu_time_ms: 3.25,
        peak_memory_bytes: 1 << 20,
        sandbox_alive: true,
        artifacts: vec![sample_artifact()],
        context: Some("default".into()),
        restarted: Some(sandlot_types::Restarted {
            reason: "timeout".into(),
            lost: vec!["python state".into(), "bash session".into()],
        }),
        background_bytes: 12,
        rolled_back: false,
        rollback: None,
    }
}

const ARTIFACT_SHA: &str = "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8";

fn sample_artifact() -> sandlot_types::Artifact {
    sandlot_types::Artifact {
        path: "out/report.csv".into(),
        size: DOWNLOAD.len() as u64,
        sha256: ARTIFACT_SHA.into(),
        mime_type: "text/csv".into(),
        change: "created".into(),
        url: format!("/v1/artifacts/{ARTIFACT_SHA}"),
    }
}

fn sample_records(id: &str) -> Vec<ExecutionRecord> {
    let rec = |result| ExecutionRecord {
        id: "ex1".into(),
        sandbox_id: id.to_owned(),
        code: "1/0".into(),
        language: Language::Bash,
        started_at: "2025-01-01T00:00:02Z".into(),
        result,
    };
    vec![rec(Some(sample_result(id))), rec(None)]
}

fn sample_entry(path: &str, size: u64) -> FileEntry {
    FileEntry {
        path: path.to_owned(),
        name: path.rsplit('/').next().unwrap_or(path).to_owned(),
        kind: "file".into(),
        size,
        modified: 1_700_000_000,
        mode: 0o644,
    }
}

fn sample_spec(name: &str) -> TemplateSpec {
    TemplateSpec {
        name: name.to_owned(),
        description: Some("pandas with the sales data".into()),
        packages: vec!["tabulate==0.9.0".into()],
        imports: vec!["numpy".into(), "pandas".into()],
        setup: Some("import pandas as pd\nsales = pd.DataFrame({'a': [1]})".into()),
        limits: Limits {
            memory_mb: Some(2048),
            cpu_millis: Some(1000),
            pids: Some(64),
            disk_mb: Some(512),
        },
    }
}

fn sample_template(name: &str, status: TemplateStatus) -> Template {
    Template {
        name: name.to_owned(),
        version: "0123456789abcdef".into(),
        status,
        error: (status == TemplateStatus::Failed)
            .then(|| "setup raised ValueError: boom".to_owned()),
        spec: sample_spec(name),
        created_at: "2025-01-01T00:00:00Z".into(),
        tenant: "default".into(),
        prepare_seconds: (status == TemplateStatus::Ready).then_some(0.75),
    }
}

const DOWNLOAD: &[u8] = b"\x00\x01\xfe\xffbinary";

// ---------------------------------------------------------------------------------------------
// The scripted backend. Sandbox ids choose the behaviour: `missing` and `gone` fail, `panic`
// panics, `internal` fails with a message that must not reach the client, `slow` streams slowly;
// anything else succeeds.

type Uploads = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

#[derive(Clone, Default)]
struct Fake {
    calls: Arc<Mutex<Vec<String>>>,
    finished_executions: Arc<AtomicUsize>,
    uploads: Uploads,
    dir: Arc<Mutex<Option<tempfile::TempDir>>>,
}

impl Fake {
    fn record(&self, call: String) {
        self.calls.lock().unwrap().push(call);
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

fn check_id(id: &str) -> Result<(), ApiError> {
    match id {
        "missing" => Err(ApiError::new(
            ErrorCode::SandboxNotFound,
            "no sandbox missing",
        )),
        "gone" => Err(ApiError::new(
            ErrorCode::SandboxGone,
            "sandbox gone was deleted",
        )),
        "internal" => Err(ApiError::new(
            ErrorCode::Internal,
            "sqlite at /var/lib/secret/db failed",
        )),
        "panic" => panic!("secret detail /root/x"),
        _ => Ok(()),
    }
}

/// What the creation pipeline reads, as a backend without tenants answers: everything is
/// `default`'s, templates but `missing` exist, and nothing has limits of its own.
impl sandlot_service::admission::Lookups for Fake {
    fn has_template(&self, _tenant: &str, name: &str) -> bool {
        name != "missing"
    }

    async fn template_limits(&self, tenant: &str, name: &str) -> Option<sandlot_types::Limits> {
        Backend::get_template(self, tenant, name)
            .await
            .ok()
            .map(|t| t.spec.limits)
    }

    fn snapshot_tenant(&self, _id: &str) -> Option<String> {
        Some(sandlot_types::DEFAULT_TENANT.to_owned())
    }

    async fn snapshot_template(&self, _id: &str) -> Option<String> {
        None
    }

    fn effective_limits(
        &self,
        _limits: &sandlot_types::Limits,
    ) -> Result<sandlot_types::EffectiveLimits, ApiError> {
        Ok(sandlot_types::EffectiveLimits {
            memory_mb: 0,
            cpu_millis: 0,
            pids: 0,
            disk_mb: 0,
        })
    }

    fn effective_limits_trusted(
        &self,
        limits: &sandlot_types::Limits,
    ) -> Result<sandlot_types::EffectiveLimits, ApiError> {
        self.effective_limits(limits)
    }

    async fn sandbox(&self, id: &str) -> Option<Sandbox> {
        Backend::get_sandbox(self, id).await.ok()
    }

    fn sandbox_limits(&self, _id: &str) -> Option<sandlot_types::EffectiveLimits> {
        None
    }

    fn tenant_usage(&self, _tenant: &str) -> sandlot_tenancy::Want {
        sandlot_tenancy::Want::default()
    }

    fn tenant_held(&self, _tenant: &str, _share: sandlot_tenancy::Share) -> Result<u64, ApiError> {
        Ok(0)
    }
}

impl crate::backend::Backend for Fake {}

impl sandlot_service::Backend for Fake {
    async fn create_sandbox(&self, req: CreateSandbox) -> Result<Sandbox, ApiError> {
        self.record(format!("create {}", req.template.as_deref().unwrap_or("-")));
        Ok(sample_sandbox("sb"))
    }

    async fn list_sandboxes(&self, include_ended: bool) -> Result<Vec<Sandbox>, ApiError> {
        self.record(format!("list {include_ended}"));
        Ok(vec![sample_sandbox("sb")])
    }

    async fn get_sandbox(&self, id: &str) -> Result<Sandbox, ApiError> {
        check_id(id)?;
        Ok(sample_sandbox(id))
    }

    async fn delete_sandbox(&self, id: &str) -> Result<(), ApiError> {
        check_id(id)?;
        self.record(format!("delete {id}"));
        Ok(())
    }

    async fn execute(
        &self,
        id: &str,
        req: ExecuteRequest,
        events: Option<mpsc::UnboundedSender<OutputEvent>>,
    ) -> Result<ExecutionResult, ApiError> {
        check_id(id)?;
        self.record(format!("execute {id} {:?} {}", req.language, req.code));
        let gap = if id == "slow" {
            Duration::from_millis(400)
        } else {
            Duration::from_millis(150)
        };
        for ev in sample_events().into_iter().take(2) {
            if let Some(tx) = &events {
                let _ = tx.send(ev);
            }
            tokio::time::sleep(gap).await;
        }
        self.finished_executions.fetch_add(1, Ordering::SeqCst);
        Ok(sample_result(id))
    }

    async fn interrupt(&self, id: &str) -> Result<bool, ApiError> {
        check_id(id)?;
        Ok(true)
    }

    async fn background_output(
        &self,
        id: &str,
        clear: bool,
    ) -> Result<sandlot_types::BackgroundOutput, ApiError> {
        check_id(id)?;
        self.record(format!("background {id} {clear}"));
        Ok(sample_background())
    }

    async fn list_executions(&self, id: &str) -> Result<Vec<ExecutionRecord>, ApiError> {
        check_id(id)?;
        Ok(sample_records(id))
    }

    async fn write_file(
        &self,
        id: &str,
        path: &str,
        mut body: ByteStream,
    ) -> Result<FileEntry, ApiError> {
        check_id(id)?;
        let mut bytes = Vec::new();
        while let Some(chunk) = body.next().await {
            let chunk =
                chunk.map_err(|e| ApiError::new(ErrorCode::Internal, format!("read: {e}")))?;
            bytes.extend_from_slice(&chunk);
        }
        let size = bytes.len() as u64;
        self.uploads.lock().unwrap().push((path.to_owned(), bytes));
        Ok(sample_entry(path, size))
    }

    async fn read_file(&self, id: &str, path: &str) -> Result<(u64, tokio::fs::File), ApiError> {
        check_id(id)?;
        if path == "nope.txt" {
            return Err(ApiError::new(ErrorCode::FileNotFound, "no file nope.txt"));
        }
        let dir = tempfile::tempdir().unwrap();
        let file_path = dir.path().join("f");
        std::fs::File::create(&file_path)
            .unwrap()
            .write_all(DOWNLOAD)
            .unwrap();
        let file = tokio::fs::File::open(&file_path).await.unwrap();
        *self.dir.lock().unwrap() = Some(dir);
        Ok((DOWNLOAD.len() as u64, file))
    }

    async fn list_files(
        &self,
        id: &str,
        path: &str,
        recursive: bool,
    ) -> Result<Vec<FileEntry>, ApiError> {
        check_id(id)?;
        self.record(format!("list_files {path:?} {recursive}"));
        Ok(vec![sample_entry("a/b.txt", 3)])
    }

    async fn delete_file(&self, id: &str, path: &str) -> Result<(), ApiError> {
        check_id(id)?;
        self.record(format!("delete_file {path}"));
        Ok(())
    }

    async fn open_artifact(
        &self,
        sha256: &str,
    ) -> Result<(u64, String, tokio::fs::File), ApiError> {
        if sha256.len() != 64 {
            return Err(ApiError::new(ErrorCode::InvalidArgument, "not a sha256"));
        }
        if sha256 != ARTIFACT_SHA {
            return Err(ApiError::new(ErrorCode::FileNotFound, "no artifact"));
        }
        let (size, file) = self.read_file("sb", "artifact").await?;
        Ok((size, "text/csv".into(), file))
    }

    async fn create_template(
        &self,
        _tenant: &str,
        spec: TemplateSpec,
    ) -> Result<Template, ApiError> {
        self.record(format!("create_template {}", spec.name));
        if spec.name == "default" {
            return Err(ApiError::new(
                ErrorCode::InvalidArgument,
                "the default template cannot be replaced",
            ));
        }
        Ok(Template {
            spec: spec.clone(),
            ..sample_template(&spec.name, TemplateStatus::Building)
        })
    }

    async fn list_templates(&self) -> Vec<Template> {
        self.record("list_templates".into());
        vec![
            sample_template("default", TemplateStatus::Ready),
            sample_template("sales", TemplateStatus::Failed),
        ]
    }

    async fn get_template(&self, _tenant: &str, name: &str) -> Result<Template, ApiError> {
        match name {
            "missing" => Err(ApiError::new(
                ErrorCode::TemplateNotFound,
                "no template named \"missing\"",
            )),
            "internal" => Err(ApiError::new(ErrorCode::Internal, "secret /var/lib/x")),
            _ => Ok(sample_template(name, TemplateStatus::Ready)),
        }
    }

    async fn create_context(
        &self,
        id: &str,
        _cwd: Option<&str>,
    ) -> Result<sandlot_types::Context, ApiError> {
        check_id(id)?;
        self.record(format!("create_context {id}"));
        Ok(sample_context("ctx_1"))
    }

    async fn list_contexts(&self, id: &str) -> Result<Vec<sandlot_types::Context>, ApiError> {
        check_id(id)?;
        Ok(vec![sample_context("default"), sample_context("ctx_1")])
    }

    async fn restart_context(
        &self,
        id: &str,
        ctx: &str,
    ) -> Result<sandlot_types::Context, ApiError> {
        check_id(id)?;
        check_context(id, ctx)?;
        self.record(format!("restart_context {id} {ctx}"));
        Ok(sample_context(ctx))
    }

    async fn delete_context(&self, id: &str, ctx: &str) -> Result<(), ApiError> {
        check_id(id)?;
        check_context(id, ctx)?;
        self.record(format!("delete_context {id} {ctx}"));
        Ok(())
    }
}

fn sample_background() -> sandlot_types::BackgroundOutput {
    sandlot_types::BackgroundOutput {
        entries: vec![sandlot_types::BackgroundEntry {
            stream: sandlot_types::StreamName::Stdout,
            text: "late\n".into(),
            at: "2025-01-01T00:00:03.000000Z".into(),
            execution_id: Some("ex_1".into()),
        }],
        dropped_bytes: 7,
    }
}

fn sample_context(id: &str) -> sandlot_types::Context {
    sandlot_types::Context {
        id: id.to_owned(),
        created_at: "2025-01-01T00:00:03Z".into(),
        cwd: None,
    }
}

/// The fake's contexts: `nope` does not exist.
fn check_context(id: &str, ctx: &str) -> Result<(), ApiError> {
    if ctx == "nope" {
        return Err(ApiError::new(
            ErrorCode::InvalidArgument,
            format!("no context \"nope\" in sandbox {id}"),
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Helpers.

fn small_config() -> ApiConfig {
    ApiConfig {
        max_json_bytes: 4096,
        max_code_bytes: 1000,
        max_file_bytes: 64,
    }
}

fn app() -> (Router, Fake) {
    let fake = Fake::default();
    (
        router_with(fake.clone(), small_config(), crate::Extensions::default()),
        fake,
    )
}

async fn send(app: &Router, req: Request<Body>) -> Response {
    app.clone().oneshot(req).await.unwrap()
}

fn json_req(method: Method, uri: &str, body: &str) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap()
}

fn empty_req(method: Method, uri: &str) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(uri)
        .body(Body::empty())
        .unwrap()
}

async fn body_json(resp: Response) -> Value {
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {bytes:?}"))
}

/// Asserts an error response: status, code, and returns the message.
async fn expect_error(resp: Response, status: StatusCode, code: &str) -> String {
    assert_eq!(resp.status(), status);
    assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/json");
    let body = body_json(resp).await;
    assert_eq!(body["error"]["code"], code, "{body}");
    assert_eq!(body.as_object().unwrap().len(), 1, "{body}");
    assert_eq!(body["error"].as_object().unwrap().len(), 2, "{body}");
    body["error"]["message"].as_str().unwrap().to_owned()
}

/// Reads an SSE body frame by frame: (event, data, executions the backend had finished when the
/// event arrived) per event. The count, not a time, shows whether an event came while its
/// execution still ran: clocks on a busy machine say little.
async fn read_sse(resp: Response, finished: &AtomicUsize) -> Vec<(String, Value, usize)> {
    let mut body = resp.into_body();
    let mut buf = String::new();
    let mut events = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.unwrap();
        let Some(data) = frame.data_ref() else {
            continue;
        };
        buf.push_str(std::str::from_utf8(data).unwrap());
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let mut name = None;
            let mut payload = String::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    name = Some(v.trim().to_owned());
                } else if let Some(v) = line.strip_prefix("data:") {
                    payload.push_str(v.trim_start());
                }
            }
            if let Some(name) = name {
                events.push((
                    name,
                    serde_json::from_str(&payload).unwrap(),
                    finished.load(Ordering::SeqCst),
                ));
            }
        }
    }
    events
}

// ---------------------------------------------------------------------------------------------
// Basic routes.

#[tokio::test]
async fn health_reports_ok_and_version() {
    let (app, _) = app();
    let resp = send(&app, empty_req(Method::GET, "/v1/health")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        body_json(resp).await,
        json!({"status": "ok", "version": crate::VERSION})
    );
}

#[tokio::test]
async fn openapi_is_served_as_json() {
    let (app, _) = app();
    let resp = send(&app, empty_req(Method::GET, "/v1/openapi.json")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/json");
    let doc = body_json(resp).await;
    assert_eq!(doc["openapi"], "3.1.0");
}

#[tokio::test]
async fn sandbox_lifecycle_routes() {
    let (app, fake) = app();
    let resp = send(
        &app,
        json_req(Method::POST, "/v1/sandboxes", r#"{"template":"default"}"#),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::CREATED);
    assert_eq!(body_json(resp).await["id"], "sb");

    // An empty body without a content type creates a sandbox with defaults.
    let resp = send(&app, empty_req(Method::POST, "/v1/sandboxes")).await;
    assert_eq!(resp.status(), StatusCode::CREATED);

    let resp = send(&app, empty_req(Method::GET, "/v1/sandboxes?all=true")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(body_json(resp).await["sandboxes"][0]["id"], "sb");
    let resp = send(&app, empty_req(Method::GET, "/v1/sandboxes")).await;
    assert_eq!(resp.status(), StatusCode::OK);

    let resp = send(&app, empty_req(Method::GET, "/v1/sandboxes/abc")).await;
    assert_eq!(body_json(resp).await["id"], "abc");

    let resp = send(&app, empty_req(Method::DELETE, "/v1/sandboxes/abc")).await;
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    assert!(resp
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .is_empty());

    assert_eq!(
        fake.calls(),
        [
            "create default",
            "create -",
            "list true",
            "list false",
            "delete abc"
        ]
    );
}

#[tokio::test]
async fn background_output_is_read_and_cleared() {
    let (app, fake) = app();
    let resp = send(&app, empty_req(Method::GET, "/v1/sandboxes/sb/background")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        body_json(resp).await,
        json!({"entries": [{"stream": "stdout", "text": "late\n",
                            "at": "2025-01-01T00:00:03.000000Z", "execution_id": "ex_1"}],
               "dropped_bytes": 7})
    );
    let resp = send(
        &app,
        empty_req(Method::GET, "/v1/sandboxes/sb/background?clear=true"),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        fake.calls(),
        vec!["background sb false", "background sb true"]
    );
    let resp = send(
        &app,
        empty_req(Method::GET, "/v1/sandboxes/missing/background"),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn interrupt_and_execution_list() {
    let (app, _) = app();
    let resp = send(&app, empty_req(Method::POST, "/v1/sandboxes/sb/interrupt")).await;
    assert_eq!(body_json(resp).await, json!({"interrupted": true}));
    let resp = send(&app, empty_req(Method::GET, "/v1/sandboxes/sb/executions")).await;
    let body = body_json(resp).await;
    assert_eq!(body["executions"].as_array().unwrap().len(), 2);
    assert_eq!(body["executions"][1]["result"], Value::Null);
}

#[tokio::test]
async fn context_routes() {
    let (app, fake) = app();
    let resp = send(&app, empty_req(Method::POST, "/v1/sandboxes/sb/contexts")).await;
    assert_eq!(resp.status(), StatusCode::CREATED);
    assert_eq!(body_json(resp).await["id"], "ctx_1");
    let resp = send(&app, empty_req(Method::GET, "/v1/sandboxes/sb/contexts")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let body = body_json(resp).await;
    assert_eq!(body["contexts"][0]["id"], "default");
    assert_eq!(body["contexts"].as_array().unwrap().len(), 2);
    let uri = "/v1/sandboxes/sb/contexts/ctx_1/restart";
    let resp = send(&app, empty_req(Method::POST, uri)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(body_json(resp).await["id"], "ctx_1");
    let uri = "/v1/sandboxes/sb/contexts/ctx_1";
    let resp = send(&app, empty_req(Method::DELETE, uri)).await;
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        fake.calls(),
        [
            "create_context sb",
            "restart_context sb ctx_1",
            "delete_context sb ctx_1"
        ]
    );
    // Errors: an unknown context, an unknown or ended sandbox, a wrong method.
    let uri = "/v1/sandboxes/sb/contexts/nope";
    let resp = send(&app, empty_req(Method::DELETE, uri)).await;
    expect_error(resp, StatusCode::BAD_REQUEST, "invalid_argument").await;
    let uri = "/v1/sandboxes/sb/contexts/nope/restart";
    let resp = send(&app, empty_req(Method::POST, uri)).await;
    expect_error(resp, StatusCode::BAD_REQUEST, "invalid_argument").await;
    let uri = "/v1/sandboxes/missing/contexts";
    let resp = send(&app, empty_req(Method::POST, uri)).await;
    expect_error(resp, StatusCode::NOT_FOUND, "sandbox_not_found").await;
    let resp = send(&app, empty_req(Method::GET, "/v1/sandboxes/gone/contexts")).await;
    expect_error(resp, StatusCode::GONE, "sandbox_gone").await;
    let resp = send(&app, empty_req(Method::PUT, "/v1/sandboxes/sb/contexts")).await;
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn template_routes() {
    let (app, fake) = app();
    let body = serde_json::to_string(&sample_spec("sales")).unwrap();
    let resp = send(&app, json_req(Method::POST, "/v1/templates", &body)).await;
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
    let t: Template = serde_json::from_value(body_json(resp).await).unwrap();
    assert_eq!(t.status, TemplateStatus::Building);
    assert_eq!(t.spec, sample_spec("sales"));

    // Only the name is required.
    let resp = send(
        &app,
        json_req(Method::POST, "/v1/templates", r#"{"name":"bare"}"#),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::ACCEPTED);

    let resp = send(&app, empty_req(Method::GET, "/v1/templates")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let list: crate::TemplateList = serde_json::from_value(body_json(resp).await).unwrap();
    let names: Vec<&str> = list.templates.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["default", "sales"]);

    let resp = send(&app, empty_req(Method::GET, "/v1/templates/sales")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(body_json(resp).await["status"], "ready");
    let resp = send(&app, empty_req(Method::GET, "/v1/templates/missing")).await;
    expect_error(resp, StatusCode::NOT_FOUND, "template_not_found").await;
    let resp = send(&app, empty_req(Method::GET, "/v1/templates/internal")).await;
    let m = expect_error(resp, StatusCode::INTERNAL_SERVER_ERROR, "internal").await;
    assert!(!m.contains("/var/lib"), "{m}");

    // The runtime's refusals keep their code.
    let resp = send(
        &app,
        json_req(Method::POST, "/v1/templates", r#"{"name":"default"}"#),
    )
    .await;
    expect_error(resp, StatusCode::BAD_REQUEST, "invalid_argument").await;

    assert_eq!(
        fake.calls(),
        [
            "create_template sales",
            "create_template bare",
            "list_templates",
            "create_template default"
        ]
    );
}

#[tokio::test]
async fn bad_template_specs_are_invalid_requests() {
    let (app, fake) = app();
    for (body, expected) in [
        (r#"{"name":"x","pakages":[]}"#, "unknown field `pakages`"),
        (r#"{"packages":["a==1"]}"#, "missing field `name`"),
        (r#"{"name":"x","packages":"a==1"}"#, "invalid type"),
        (
            r#"{"name":"x","limits":{"memory":1}}"#,
            "unknown field `memory`",
        ),
        (r#"{"name":"#, "invalid JSON"),
    ] {
        let resp = send(&app, json_req(Method::POST, "/v1/templates", body)).await;
        let m = expect_error(resp, StatusCode::BAD_REQUEST, "invalid_request").await;
        assert!(m.contains(expected), "{body}: {m}");
    }
    // A body is required (no defaults to fall back on).
    let resp = send(&app, empty_req(Method::POST, "/v1/templates")).await;
    expect_error(resp, StatusCode::BAD_REQUEST, "invalid_request").await;
    // Too large.
    let big = json!({ "name": "x", "setup": "#".repeat(5000) }).to_string();
    let resp = send(&app, json_req(Method::POST, "/v1/templates", &big)).await;
    expect_error(resp, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large").await;
    // Other methods.
    let resp = send(&app, empty_req(Method::PUT, "/v1/templates/sales")).await;
    expect_error(resp, StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed").await;
    assert!(fake.calls().is_empty(), "{:?}", fake.calls());
}

// ---------------------------------------------------------------------------------------------
// Errors.

/// The status table of the API contract, written out independently of `status_of`.
const STATUS_TABLE: &[(ErrorCode, u16)] = &[
    (ErrorCode::InvalidRequest, 400),
    (ErrorCode::InvalidArgument, 400),
    (ErrorCode::PayloadTooLarge, 413),
    (ErrorCode::SandboxNotFound, 404),
    (ErrorCode::SandboxGone, 410),
    (ErrorCode::ExecutionNotFound, 404),
    (ErrorCode::TemplateNotFound, 404),
    (ErrorCode::TemplateNotReady, 409),
    (ErrorCode::InvalidPath, 400),
    (ErrorCode::FileNotFound, 404),
    (ErrorCode::NotARegularFile, 400),
    (ErrorCode::FileTooLarge, 413),
    (ErrorCode::WorkspaceFull, 507),
    (ErrorCode::SandboxBusy, 409),
    (ErrorCode::CapacityExhausted, 503),
    (ErrorCode::SandboxFailed, 409),
    (ErrorCode::QuotaExceeded, 507),
    (ErrorCode::InsufficientStorage, 507),
    (ErrorCode::InvalidArchive, 400),
    (ErrorCode::SnapshotNotFound, 404),
    (ErrorCode::StateCorrupt, 422),
    (ErrorCode::CaptureFailed, 409),
    (ErrorCode::VolumeNotFound, 404),
    (ErrorCode::VolumeInUse, 409),
    (ErrorCode::PortNotExposed, 403),
    (ErrorCode::PortUnreachable, 502),
    (ErrorCode::Unauthenticated, 401),
    (ErrorCode::Forbidden, 403),
    (ErrorCode::PolicyDenied, 403),
    (ErrorCode::TenantQuotaExceeded, 429),
    (ErrorCode::TenantNotFound, 404),
    (ErrorCode::KeyNotFound, 404),
    (ErrorCode::NameTaken, 409),
    (ErrorCode::TemplateInUse, 409),
    (ErrorCode::InvalidPolicy, 422),
    (ErrorCode::SandboxContained, 409),
    (ErrorCode::Internal, 500),
    (ErrorCode::AuditUnavailable, 503),
    (ErrorCode::JobNotFound, 404),
    (ErrorCode::JobQueueFull, 429),
    (ErrorCode::JobEnded, 409),
    (ErrorCode::WebhookNotFound, 404),
    (ErrorCode::UnsupportedBundle, 400),
    (ErrorCode::ReviewNotFound, 404),
    (ErrorCode::ReviewDenied, 403),
    (ErrorCode::ReviewDecided, 409),
    (ErrorCode::CsrfFailed, 403),
    (ErrorCode::ReviewPending, 409),
];

#[test]
fn every_code_maps_to_its_status() {
    for (code, status) in STATUS_TABLE {
        assert_eq!(
            crate::status_of(*code).as_u16(),
            *status,
            "{}",
            code.as_str()
        );
    }
}

#[tokio::test]
async fn error_response_has_code_message_and_status() {
    for (code, status) in STATUS_TABLE {
        let resp =
            axum::response::IntoResponse::into_response(crate::HttpError::new(*code, "boom"));
        let message =
            expect_error(resp, StatusCode::from_u16(*status).unwrap(), code.as_str()).await;
        if *code == ErrorCode::Internal {
            assert_eq!(message, "internal server error");
        } else {
            assert_eq!(message, "boom");
        }
    }
}

#[tokio::test]
async fn runtime_errors_are_mapped() {
    let (app, _) = app();
    let resp = send(&app, empty_req(Method::GET, "/v1/sandboxes/missing")).await;
    expect_error(resp, StatusCode::NOT_FOUND, "sandbox_not_found").await;
    let resp = send(&app, empty_req(Method::GET, "/v1/sandboxes/gone")).await;
    expect_error(resp, StatusCode::GONE, "sandbox_gone").await;
    let resp = send(
        &app,
        empty_req(Method::GET, "/v1/sandboxes/gone/files/x.txt"),
    )
    .await;
    expect_error(resp, StatusCode::GONE, "sandbox_gone").await;
    let resp = send(
        &app,
        empty_req(Method::GET, "/v1/sandboxes/sb/files/nope.txt"),
    )
    .await;
    expect_error(resp, StatusCode::NOT_FOUND, "file_not_found").await;
}

#[tokio::test]
async fn internal_details_do_not_leak() {
    let (app, _) = app();
    let resp = send(&app, empty_req(Method::GET, "/v1/sandboxes/internal")).await;
    let message = expect_error(resp, StatusCode::INTERNAL_SERVER_ERROR, "internal").await;
    assert!(!message.contains("/var/lib"), "{message}");
}

#[tokio::test]
async fn a_panic_becomes_internal() {
    let (app, _) = app();
    let resp = send(&app, empty_req(Method::GET, "/v1/sandboxes/panic")).await;
    let message = expect_error(resp, StatusCode::INTERNAL_SERVER_ERROR, "internal").await;
    assert!(!message.contains("secret"), "{message}");
    // A panic inside the spawned execution task, too.
    let resp = send(
        &app,
        json_req(
            Method::POST,
            "/v1/sandboxes/panic/execute",
            r#"{"code":"1"}"#,
        ),
    )
    .await;
    let message = expect_error(resp, StatusCode::INTERNAL_SERVER_ERROR, "internal").await;
    assert!(!message.contains("secret"), "{message}");
}

#[tokio::test]
async fn unknown_route_and_method() {
    let (app, _) = app();
    let resp = send(&app, empty_req(Method::GET, "/v2/nothing")).await;
    expect_error(resp, StatusCode::NOT_FOUND, "not_found").await;
    let resp = send(&app, empty_req(Method::GET, "/v1/sandboxes/sb/nothing")).await;
    expect_error(resp, StatusCode::NOT_FOUND, "not_found").await;
    let resp = send(&app, empty_req(Method::PATCH, "/v1/sandboxes")).await;
    expect_error(resp, StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed").await;
    let resp = send(&app, empty_req(Method::GET, "/v1/sandboxes/sb/execute")).await;
    expect_error(resp, StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed").await;
}

#[tokio::test]
async fn bad_json_bodies_are_invalid_requests() {
    let (app, fake) = app();
    let exec = "/v1/sandboxes/sb/execute";

    let resp = send(&app, json_req(Method::POST, exec, r#"{"code": "#)).await;
    let m = expect_error(resp, StatusCode::BAD_REQUEST, "invalid_request").await;
    assert!(m.contains("invalid JSON"), "{m}");

    let resp = send(
        &app,
        json_req(Method::POST, exec, r#"{"code": "1", "foo": 2}"#),
    )
    .await;
    let m = expect_error(resp, StatusCode::BAD_REQUEST, "invalid_request").await;
    assert!(m.contains("unknown field `foo`"), "{m}");

    let resp = send(
        &app,
        json_req(Method::POST, exec, r#"{"code": "1", "language": "ruby"}"#),
    )
    .await;
    let m = expect_error(resp, StatusCode::BAD_REQUEST, "invalid_request").await;
    assert!(m.contains("unknown variant `ruby`"), "{m}");

    let resp = send(
        &app,
        json_req(Method::POST, exec, r#"{"language": "bash"}"#),
    )
    .await;
    let m = expect_error(resp, StatusCode::BAD_REQUEST, "invalid_request").await;
    assert!(m.contains("missing field `code`"), "{m}");

    let resp = send(
        &app,
        json_req(
            Method::POST,
            "/v1/sandboxes",
            r#"{"limits": {"memory_mb": -1}}"#,
        ),
    )
    .await;
    expect_error(resp, StatusCode::BAD_REQUEST, "invalid_request").await;

    let bad_utf8 = Request::builder()
        .method(Method::POST)
        .uri(exec)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(b"{\"code\": \"\xff\xfe\"}".to_vec()))
        .unwrap();
    let m = expect_error(
        send(&app, bad_utf8).await,
        StatusCode::BAD_REQUEST,
        "invalid_request",
    )
    .await;
    assert!(m.contains("UTF-8"), "{m}");

    let text = Request::builder()
        .method(Method::POST)
        .uri(exec)
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from(r#"{"code": "1"}"#))
        .unwrap();
    let m = expect_error(
        send(&app, text).await,
        StatusCode::BAD_REQUEST,
        "invalid_request",
    )
    .await;
    assert!(m.contains("application/json"), "{m}");

    let untyped = Request::builder()
        .method(Method::POST)
        .uri(exec)
        .body(Body::from(r#"{"code": "1"}"#))
        .unwrap();
    expect_error(
        send(&app, untyped).await,
        StatusCode::BAD_REQUEST,
        "invalid_request",
    )
    .await;

    // `application/json; charset=utf-8` is JSON.
    let charset = Request::builder()
        .method(Method::POST)
        .uri(exec)
        .header(header::CONTENT_TYPE, "application/json; charset=utf-8")
        .body(Body::from(r#"{"code": "1"}"#))
        .unwrap();
    assert_eq!(send(&app, charset).await.status(), StatusCode::OK);

    let resp = send(&app, empty_req(Method::GET, "/v1/sandboxes?all=maybe")).await;
    expect_error(resp, StatusCode::BAD_REQUEST, "invalid_request").await;

    assert_eq!(fake.calls(), ["execute sb Python 1"]);
}

#[tokio::test]
async fn oversized_bodies_are_payload_too_large() {
    let (app, fake) = app();
    let exec = "/v1/sandboxes/sb/execute";
    // The code over its limit, the body under its own.
    let code = "x".repeat(1001);
    let resp = send(
        &app,
        json_req(Method::POST, exec, &json!({ "code": code }).to_string()),
    )
    .await;
    expect_error(resp, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large").await;
    // The body over its limit, with and without a Content-Length.
    let big = json!({ "code": "1", "metadata": { "k": "y".repeat(5000) } }).to_string();
    let resp = send(&app, json_req(Method::POST, "/v1/sandboxes", &big)).await;
    expect_error(resp, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large").await;
    let chunks = big
        .into_bytes()
        .chunks(100)
        .map(|c| Ok::<_, std::io::Error>(Bytes::copy_from_slice(c)))
        .collect::<Vec<_>>();
    let streamed = Request::builder()
        .method(Method::POST)
        .uri(exec)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(futures::stream::iter(chunks)))
        .unwrap();
    expect_error(
        send(&app, streamed).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
    )
    .await;
    assert!(fake.calls().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Executions.

#[tokio::test]
async fn execute_returns_the_result_even_for_errors() {
    let (app, _) = app();
    let resp = send(
        &app,
        json_req(
            Method::POST,
            "/v1/sandboxes/sb/execute",
            r#"{"code":"1/0"}"#,
        ),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/json");
    let body = body_json(resp).await;
    assert_eq!(body["end_state"], "error");
    assert_eq!(
        serde_json::from_value::<ExecutionResult>(body).unwrap(),
        sample_result("sb")
    );
    let resp = send(
        &app,
        json_req(
            Method::POST,
            "/v1/sandboxes/missing/execute",
            r#"{"code":"1"}"#,
        ),
    )
    .await;
    expect_error(resp, StatusCode::NOT_FOUND, "sandbox_not_found").await;
}

#[tokio::test]
async fn execute_streams_events_then_done() {
    let (app, fake) = app();
    let body = r#"{"code":"print(0)","language":"python","stream":true}"#;
    let resp = send(
        &app,
        json_req(Method::POST, "/v1/sandboxes/slow/execute", body),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers()[header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let events = read_sse(resp, &fake.finished_executions).await;
    let names: Vec<&str> = events.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(names, ["stdout", "stderr", "done"]);
    assert_eq!(events[0].1, json!({"type": "stdout", "text": "0\n"}));
    assert_eq!(
        serde_json::from_value::<ExecutionResult>(events[2].1.clone()).unwrap(),
        sample_result("slow")
    );
    // Each event is sent as it is produced, not at the end: stdout and stderr arrive while the
    // execution still runs (the slow backend waits 400 ms after each), `done` once it finished.
    let finished_at: Vec<usize> = events.iter().map(|(_, _, n)| *n).collect();
    assert_eq!(finished_at, [0, 0, 1], "{events:?}");
}

#[tokio::test]
async fn accept_header_selects_streaming() {
    let (app, fake) = app();
    let req = Request::builder()
        .method(Method::POST)
        .uri("/v1/sandboxes/sb/execute")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "text/event-stream")
        .body(Body::from(r#"{"code":"1"}"#))
        .unwrap();
    let events = read_sse(send(&app, req).await, &fake.finished_executions).await;
    assert_eq!(events.last().unwrap().0, "done");
}

#[tokio::test]
async fn streaming_error_before_start_is_json() {
    let (app, _) = app();
    let body = r#"{"code":"1","stream":true}"#;
    let resp = send(
        &app,
        json_req(Method::POST, "/v1/sandboxes/gone/execute", body),
    )
    .await;
    expect_error(resp, StatusCode::GONE, "sandbox_gone").await;
}

/// Polls until the backend has finished `n` executions, then checks it finished no more. The
/// deadline is generous: these tests are about whether an execution ends, not how fast.
async fn wait_for_finished(fake: &Fake, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while fake.finished_executions.load(Ordering::SeqCst) < n {
        assert!(
            Instant::now() < deadline,
            "the backend finished {} executions, expected {n}",
            fake.finished_executions.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(fake.finished_executions.load(Ordering::SeqCst), n);
}

#[tokio::test]
async fn a_disconnected_stream_does_not_cancel_the_execution() {
    let (app, fake) = app();
    let body = r#"{"code":"1","stream":true}"#;
    let resp = send(
        &app,
        json_req(Method::POST, "/v1/sandboxes/slow/execute", body),
    )
    .await;
    let mut body = resp.into_body();
    let first = body.frame().await.unwrap().unwrap();
    assert!(first.data_ref().is_some());
    drop(body);
    assert_eq!(fake.finished_executions.load(Ordering::SeqCst), 0);
    wait_for_finished(&fake, 1).await;
}

#[tokio::test]
async fn a_dropped_request_does_not_cancel_the_execution() {
    let (app, fake) = app();
    let req = json_req(
        Method::POST,
        "/v1/sandboxes/slow/execute",
        r#"{"code":"1"}"#,
    );
    let pending = app.clone().oneshot(req);
    assert!(tokio::time::timeout(Duration::from_millis(100), pending)
        .await
        .is_err());
    wait_for_finished(&fake, 1).await;
}

// ---------------------------------------------------------------------------------------------
// Files.

#[tokio::test]
async fn upload_streams_the_body() {
    let (app, fake) = app();
    let bytes: Vec<u8> = (0..=63u8).collect();
    let chunks = bytes
        .chunks(10)
        .map(|c| Ok::<_, std::io::Error>(Bytes::copy_from_slice(c)))
        .collect::<Vec<_>>();
    let req = Request::builder()
        .method(Method::PUT)
        .uri("/v1/sandboxes/sb/files/dir/sub/data.bin")
        .body(Body::from_stream(futures::stream::iter(chunks)))
        .unwrap();
    let resp = send(&app, req).await;
    assert_eq!(resp.status(), StatusCode::CREATED);
    let entry: FileEntry = serde_json::from_value(body_json(resp).await).unwrap();
    assert_eq!(entry.size, 64);
    assert_eq!(
        *fake.uploads.lock().unwrap(),
        [("dir/sub/data.bin".to_owned(), bytes)]
    );
}

#[tokio::test]
async fn upload_over_the_limit_is_file_too_large() {
    let (app, _) = app();
    // Declared too large: refused before reading.
    let req = Request::builder()
        .method(Method::PUT)
        .uri("/v1/sandboxes/sb/files/big.bin")
        .header(header::CONTENT_LENGTH, "65")
        .body(Body::from(vec![0u8; 65]))
        .unwrap();
    expect_error(
        send(&app, req).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "file_too_large",
    )
    .await;
    // Streamed without a length: cut off while streaming.
    let chunks = (0..10)
        .map(|_| Ok::<_, std::io::Error>(Bytes::from_static(&[7u8; 10])))
        .collect::<Vec<_>>();
    let req = Request::builder()
        .method(Method::PUT)
        .uri("/v1/sandboxes/sb/files/big.bin")
        .body(Body::from_stream(futures::stream::iter(chunks)))
        .unwrap();
    expect_error(
        send(&app, req).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "file_too_large",
    )
    .await;
}

#[tokio::test]
async fn download_streams_raw_bytes() {
    let (app, _) = app();
    let resp = send(
        &app,
        empty_req(Method::GET, "/v1/sandboxes/sb/files/a/b.bin"),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        resp.headers()[header::CONTENT_TYPE],
        "application/octet-stream"
    );
    assert_eq!(
        resp.headers()[header::CONTENT_LENGTH],
        DOWNLOAD.len().to_string().as_str()
    );
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&bytes[..], DOWNLOAD);
}

#[tokio::test]
async fn artifact_download_streams_with_its_type() {
    let (app, _) = app();
    let uri = format!("/v1/artifacts/{ARTIFACT_SHA}");
    let resp = send(&app, empty_req(Method::GET, &uri)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()[header::CONTENT_TYPE], "text/csv");
    assert_eq!(
        resp.headers()[header::CONTENT_LENGTH],
        DOWNLOAD.len().to_string().as_str()
    );
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&bytes[..], DOWNLOAD);
    let resp = send(&app, empty_req(Method::GET, "/v1/artifacts/nope")).await;
    expect_error(resp, StatusCode::BAD_REQUEST, "invalid_argument").await;
    let missing = format!("/v1/artifacts/{}", "0".repeat(64));
    let resp = send(&app, empty_req(Method::GET, &missing)).await;
    expect_error(resp, StatusCode::NOT_FOUND, "file_not_found").await;
}

#[tokio::test]
async fn list_and_delete_files() {
    let (app, fake) = app();
    let resp = send(
        &app,
        empty_req(Method::GET, "/v1/sandboxes/sb/files?path=a&recursive=true"),
    )
    .await;
    assert_eq!(body_json(resp).await["entries"][0]["path"], "a/b.txt");
    let resp = send(&app, empty_req(Method::GET, "/v1/sandboxes/sb/files")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let resp = send(
        &app,
        empty_req(Method::GET, "/v1/sandboxes/sb/files?recursive=yes"),
    )
    .await;
    expect_error(resp, StatusCode::BAD_REQUEST, "invalid_request").await;
    let resp = send(
        &app,
        empty_req(Method::DELETE, "/v1/sandboxes/sb/files/a/b%20c.txt"),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    // An encoded slash reaches the runtime decoded, for it to judge.
    let resp = send(
        &app,
        empty_req(Method::DELETE, "/v1/sandboxes/sb/files/..%2F..%2Fetc"),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        fake.calls(),
        [
            "list_files \"a\" true",
            "list_files \"\" false",
            "delete_file a/b c.txt",
            "delete_file ../../etc"
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// The OpenAPI document.

fn doc() -> Value {
    serde_json::from_str(OPENAPI_JSON).expect("openapi.json parses")
}

#[test]
fn openapi_lists_exactly_the_routes() {
    let doc = doc();
    let paths = doc["paths"].as_object().unwrap();
    let served: BTreeSet<(String, String)> = routes::<Fake>()
        .iter()
        .map(|r| (r.path.replace("{*", "{"), r.verb.openapi_key().to_owned()))
        .chain(
            sandlot_record::ROUTES
                .iter()
                .map(|(verb, path)| (path.to_string(), verb.to_string())),
        )
        .collect();
    let documented: BTreeSet<(String, String)> = paths
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .keys()
                .filter(|k| {
                    ["get", "put", "post", "delete", "patch", "head", "options"]
                        .contains(&k.as_str())
                })
                .map(move |k| (path.clone(), k.clone()))
        })
        .collect();
    assert_eq!(served, documented);
}

#[test]
fn openapi_refs_resolve() {
    let doc = doc();
    fn walk(v: &Value, doc: &Value) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref") {
                    let pointer = r.strip_prefix('#').expect("local ref");
                    assert!(doc.pointer(pointer).is_some(), "dangling {r}");
                }
                m.values().for_each(|v| walk(v, doc));
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, doc)),
            _ => {}
        }
    }
    walk(&doc, &doc);
}

fn validator(doc: &Value, schema: &str) -> jsonschema::Validator {
    let root = json!({
        "$ref": format!("#/components/schemas/{schema}"),
        "components": doc["components"],
    });
    jsonschema::draft202012::new(&root).unwrap_or_else(|e| panic!("schema {schema}: {e}"))
}

fn assert_valid(doc: &Value, schema: &str, instance: &Value) {
    let v = validator(doc, schema);
    let errors: Vec<String> = v
        .iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{schema} rejects {instance}: {errors:?}");
}

fn assert_invalid(doc: &Value, schema: &str, instance: &Value) {
    assert!(
        !validator(doc, schema).is_valid(instance),
        "{schema} accepts {instance}"
    );
}

/// Every type of the wire model, with every optional field set, validates against its schema.
#[test]
fn samples_validate_against_the_schemas() {
    let doc = doc();
    let to = |v: &dyn erased::Ser| v.value();
    let full_create = CreateSandbox {
        template: Some("default".into()),
        env: BTreeMap::from([("K".into(), "V".into())]),
        metadata: BTreeMap::from([("m".into(), "n".into())]),
        limits: Limits {
            memory_mb: Some(1),
            cpu_millis: Some(2),
            pids: Some(3),
            disk_mb: Some(4),
        },
        idle_timeout: Some(5),
        max_lifetime: Some(6),
        from_snapshot: Some("snap_0123456789abcdef0123456789abcdef".into()),
        on_idle: Some(sandlot_types::IdleAction::Pause),
        volumes: vec![sandlot_types::VolumeMount {
            name: "data".into(),
            path: "/workspace/data".into(),
            read_only: false,
        }],
        mounts: vec![sandlot_types::HostMount {
            host: "/srv/data".into(),
            path: "/mnt/data".into(),
        }],
        ports: vec![8000],
        all_ports: false,
        tier: Some("trusted".into()),
        network: vec!["*.example.com".into(), "10.0.0.0/8".into()],
        secrets: vec![sandlot_types::SecretSpec {
            name: "gh".into(),
            hosts: vec!["api.github.com".into()],
            header: "Authorization".into(),
            value: "Bearer x".into(),
        }],
        tenant: None,
        workdir: None,
    };
    let cases: Vec<(&str, Value)> = vec![
        ("Sandbox", to(&sample_sandbox("sb"))),
        (
            "Sandbox",
            to(&Sandbox {
                ended_reason: None,
                state: SandboxState::Running,
                ..sample_sandbox("sb")
            }),
        ),
        ("Limits", to(&full_create.limits)),
        ("Limits", to(&Limits::default())),
        ("EffectiveLimits", to(&sample_sandbox("sb").limits)),
        ("CreateSandbox", to(&full_create)),
        ("CreateSandbox", to(&CreateSandbox::default())),
        (
            "ExecuteRequest",
            to(&ExecuteRequest {
                code: "1".into(),
                language: Language::Bash,
                timeout: Some(1.5),
                stream: true,
                context: Some("ctx_1".into()),
                on_failure: sandlot_types::OnFailure::Rollback,
            }),
        ),
        (
            "ExecuteRequest",
            to(&ExecuteRequest {
                code: "1".into(),
                language: Language::Python,
                timeout: None,
                stream: false,
                context: None,
                on_failure: Default::default(),
            }),
        ),
        ("ExecutionResult", to(&sample_result("sb"))),
        (
            "ExecutionResult",
            to(&ExecutionResult {
                output_held: None,
                result: None,
                error: None,
                exit_code: None,
                outputs: vec![],
                ..sample_result("sb")
            }),
        ),
        (
            "ExecutionResult",
            to(&ExecutionResult {
                output_held: Some(sandlot_types::OutputHeld {
                    review: "rev_1".into(),
                }),
                rolled_back: true,
                rollback: Some(sandlot_types::Rollback {
                    reason: "error".into(),
                    variables: 3,
                    not_restored: vec![],
                    capture_ms: 4.5,
                    restore_ms: 120.0,
                }),
                ..sample_result("sb")
            }),
        ),
        ("ExecError", to(&sample_error())),
        ("BackgroundOutput", to(&sample_background())),
        ("BackgroundEntry", to(&sample_background().entries[0])),
        ("Truncation", to(&Truncation::default())),
        ("FileEntry", to(&sample_entry("a/b", 1))),
        (
            "SandboxList",
            json!({ "sandboxes": [to(&sample_sandbox("sb"))] }),
        ),
        (
            "ExecutionList",
            to(&crate::ExecutionList {
                executions: sample_records("sb"),
            }),
        ),
        (
            "FileList",
            to(&crate::FileList {
                entries: vec![sample_entry("a", 0)],
            }),
        ),
        (
            "InterruptResponse",
            to(&crate::InterruptResponse { interrupted: false }),
        ),
        (
            "Context",
            to(&sandlot_types::Context {
                cwd: Some("/tmp".into()),
                ..sample_context("ctx_1")
            }),
        ),
        (
            "ContextList",
            to(&crate::ContextList {
                contexts: vec![sample_context("default")],
            }),
        ),
        (
            "Health",
            json!({ "status": "ok", "version": crate::VERSION }),
        ),
        ("TemplateSpec", to(&sample_spec("sales"))),
        (
            "TemplateSpec",
            to(&TemplateSpec {
                name: "a".into(),
                ..Default::default()
            }),
        ),
        (
            "TemplateSpec",
            json!({"name": "a", "description": null, "setup": null}),
        ),
        ("Template", to(&sample_template("t", TemplateStatus::Ready))),
        (
            "Template",
            to(&sample_template("t", TemplateStatus::Failed)),
        ),
        (
            "Template",
            to(&sample_template("t", TemplateStatus::Building)),
        ),
        (
            "TemplateList",
            to(&crate::TemplateList {
                templates: vec![sample_template("default", TemplateStatus::Ready)],
            }),
        ),
    ];
    for (schema, value) in &cases {
        assert_valid(&doc, schema, value);
    }
    for record in sample_records("sb") {
        assert_valid(&doc, "ExecutionRecord", &to(&record));
    }
    for ev in sample_events() {
        assert_valid(&doc, "OutputEvent", &to(&ev));
    }
    for (code, _) in STATUS_TABLE {
        let body = ErrorBody::from(&ApiError::new(*code, "m"));
        assert_valid(&doc, "Error", &to(&body));
    }
    for code in [crate::ROUTE_NOT_FOUND, crate::METHOD_NOT_ALLOWED] {
        assert_valid(&doc, "Error", &crate::error::error_body(code, "m"));
    }
    // The schemas are strict where the types are.
    assert_invalid(&doc, "ExecuteRequest", &json!({"code": "1", "foo": 1}));
    assert_invalid(
        &doc,
        "ExecuteRequest",
        &json!({"code": "1", "language": "ruby"}),
    );
    assert_invalid(&doc, "TemplateSpec", &json!({"name": "a", "foo": 1}));
    assert_invalid(&doc, "TemplateSpec", &json!({"packages": []}));
    assert_invalid(&doc, "TemplateSpec", &json!({"name": "Bad Name"}));
    assert_invalid(
        &doc,
        "TemplateSpec",
        &json!({"name": "a", "packages": ["requests"]}),
    );
    let mut cooking = to(&sample_template("t", TemplateStatus::Ready));
    cooking["status"] = json!("cooking");
    assert_invalid(&doc, "Template", &cooking);
    assert_invalid(&doc, "OutputEvent", &json!({"type": "stdout"}));
    assert_invalid(&doc, "OutputEvent", &json!({"type": "nope", "text": ""}));
    assert_invalid(
        &doc,
        "Error",
        &json!({"error": {"code": "nope", "message": ""}}),
    );
}

/// Each object schema names exactly the fields its type serializes when all are set, so a field
/// added to a type (or a schema) without the other fails here.
#[test]
fn schema_properties_match_the_types() {
    let doc = doc();
    let schemas = &doc["components"]["schemas"];
    let keys = |v: Value| {
        v.as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect::<BTreeSet<_>>()
    };
    let props = |name: &str| keys(schemas[name]["properties"].clone());
    let to = |v: &dyn erased::Ser| v.value();
    let full_limits = Limits {
        memory_mb: Some(1),
        cpu_millis: Some(2),
        pids: Some(3),
        disk_mb: Some(4),
    };
    let checks: Vec<(&str, Value)> = vec![
        ("Sandbox", to(&sample_sandbox("sb"))),
        ("Limits", to(&full_limits)),
        ("EffectiveLimits", to(&sample_sandbox("sb").limits)),
        (
            "CreateSandbox",
            to(&CreateSandbox {
                template: Some("t".into()),
                limits: full_limits.clone(),
                tier: Some("isolated".into()),
                network: vec!["example.com".into()],
                secrets: vec![sandlot_types::SecretSpec {
                    name: "k".into(),
                    hosts: vec!["example.com".into()],
                    header: "X-Key".into(),
                    value: "v".into(),
                }],
                mounts: vec![sandlot_types::HostMount {
                    host: "/srv/data".into(),
                    path: "/mnt/data".into(),
                }],
                ..Default::default()
            }),
        ),
        (
            "ExecuteRequest",
            to(&ExecuteRequest {
                code: "1".into(),
                language: Language::Bash,
                timeout: Some(1.0),
                stream: true,
                context: Some("ctx_1".into()),
                on_failure: sandlot_types::OnFailure::Rollback,
            }),
        ),
        (
            "ExecutionResult",
            to(&ExecutionResult {
                output_held: Some(sandlot_types::OutputHeld {
                    review: "rev_1".into(),
                }),
                rolled_back: true,
                rollback: Some(sandlot_types::Rollback {
                    reason: "timeout".into(),
                    variables: 1,
                    not_restored: vec![],
                    capture_ms: 1.0,
                    restore_ms: 2.0,
                }),
                ..sample_result("sb")
            }),
        ),
        ("Rollback", to(&sample_result_rolled_back())),
        ("Artifact", to(&sample_artifact())),
        ("ExecutionRecord", to(&sample_records("sb")[0])),
        ("ExecError", to(&sample_error())),
        ("BackgroundOutput", to(&sample_background())),
        ("BackgroundEntry", to(&sample_background().entries[0])),
        ("Truncation", to(&Truncation::default())),
        ("FileEntry", to(&sample_entry("a", 1))),
        (
            "InterruptResponse",
            to(&crate::InterruptResponse { interrupted: true }),
        ),
        (
            "Context",
            to(&sandlot_types::Context {
                cwd: Some("/tmp".into()),
                ..sample_context("ctx_1")
            }),
        ),
        ("ContextList", to(&crate::ContextList { contexts: vec![] })),
        ("TemplateSpec", to(&sample_spec("s"))),
        (
            "Template",
            to(&Template {
                prepare_seconds: Some(1.0),
                ..sample_template("t", TemplateStatus::Failed)
            }),
        ),
        (
            "TemplateList",
            to(&crate::TemplateList { templates: vec![] }),
        ),
    ];
    for (name, value) in checks {
        assert_eq!(props(name), keys(value), "{name}");
    }
    let event_schemas = [
        "StdoutEvent",
        "StderrEvent",
        "DisplayDataEvent",
        "ResultEvent",
        "ErrorEvent",
    ];
    for (ev, schema) in sample_events().iter().zip(event_schemas) {
        assert_eq!(props(schema), keys(to(ev)), "{schema}");
        assert_eq!(
            schemas[schema]["properties"]["type"]["const"],
            crate::event_name(ev)
        );
    }
    // The code enum: every stable code, plus the two routing codes.
    let documented: BTreeSet<String> = schemas["ErrorCode"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    let mut expected: BTreeSet<String> = STATUS_TABLE
        .iter()
        .map(|(c, _)| c.as_str().to_owned())
        .collect();
    expected.insert(crate::ROUTE_NOT_FOUND.into());
    expected.insert(crate::METHOD_NOT_ALLOWED.into());
    assert_eq!(documented, expected);
}

/// A handler that asks for its caller never gets the operator by default: a request that
/// reached it without a principal (a path past authentication) is an error (500 in debug
/// builds, where tests run; 401 in release).
#[tokio::test]
async fn a_request_without_a_principal_is_never_the_operator() {
    use axum::extract::FromRequestParts;
    let (mut parts, ()) = Request::builder()
        .uri("/v1/sandboxes")
        .body(())
        .unwrap()
        .into_parts();
    let refused = crate::govern::Caller::from_request_parts(&mut parts, &())
        .await
        .expect_err("no principal, no caller");
    assert_eq!(refused.0.code, ErrorCode::Internal);
    parts.extensions.insert(sandlot_service::local_principal());
    let caller = crate::govern::Caller::from_request_parts(&mut parts, &())
        .await
        .expect("the principal authentication put there");
    assert_eq!(caller.tenant(), sandlot_types::DEFAULT_TENANT);
}

/// Serializes any of the sample values to a `serde_json::Value` through one closure type.
mod erased {
    pub trait Ser {
        fn value(&self) -> serde_json::Value;
    }
    impl<T: serde::Serialize> Ser for T {
        fn value(&self) -> serde_json::Value {
            serde_json::to_value(self).unwrap()
        }
    }
}

/// The creation pipeline every protocol shares (`sandlot_service::admission::admit_new`) checks in one
/// order: references (template, then snapshot), the special-egress rule, the creation gates,
/// the disk cap, then the quota admission. Each request below fails every check from some
/// point on; the first failing check is the answer.
#[tokio::test]
async fn the_creation_pipeline_checks_in_order() {
    use sandlot_service::admission::admit_new;
    let store = Arc::new(sandlot_store::Store::open_in_memory().unwrap());
    let policies = concat!(
        "@id(\"all\") permit (principal, action, resource);\n",
        "@id(\"no-denied\") forbid (principal, action == Sandlot::Action::\"create_sandbox\", ",
        "resource) when { principal.plan == \"denied\" };\n",
    );
    let engine = sandlot_policy::PolicyEngine::from_text(policies).unwrap();
    let gov = sandlot_service::Governance::new(store, engine, [7; 32]).unwrap();
    let tenant = |name: &str, plan: &str, disk: u64| {
        let quotas = sandlot_types::TenantQuotas {
            max_disk_bytes: Some(disk),
            ..Default::default()
        };
        let req = sandlot_types::CreateTenant {
            name: name.into(),
            plan: Some(plan.into()),
            quotas: Some(quotas),
        };
        gov.keys.put_tenant(name, req, true).unwrap();
    };
    tenant("denied", "denied", 1 << 40);
    tenant("full", "free", 1);
    tenant("roomy", "free", 1 << 40);
    let who = |t: &str| sandlot_types::Principal {
        key_id: format!("key-{t}"),
        key_prefix: "sl_test".into(),
        tenant: t.into(),
        role: sandlot_types::Role::Member,
        plan: if t == "denied" { "denied" } else { "free" }.into(),
    };
    let fake = Fake::default();
    let every = || CreateSandbox {
        template: Some("missing".into()),
        from_snapshot: Some("snap-of-default".into()),
        network: vec!["127.0.0.1".into()],
        ..Default::default()
    };
    let code = |r: Result<Option<sandlot_tenancy::Admission>, ApiError>| match r {
        Ok(_) => "admitted".to_owned(),
        Err(e) => e.code.as_str().to_owned(),
    };
    let mut req = every();
    let r = admit_new(Some(&gov), &fake, &who("denied"), &mut req).await;
    assert_eq!(code(r), "template_not_found");
    assert_eq!(req.tenant.as_deref(), Some("denied"));
    req = CreateSandbox {
        template: None,
        ..every()
    };
    let r = admit_new(Some(&gov), &fake, &who("denied"), &mut req).await;
    assert_eq!(code(r), "snapshot_not_found");
    req = CreateSandbox {
        template: None,
        from_snapshot: None,
        ..every()
    };
    let r = admit_new(Some(&gov), &fake, &who("denied"), &mut req).await;
    assert_eq!(code(r), "forbidden");
    let clean = || CreateSandbox {
        template: Some("sales".into()),
        ..Default::default()
    };
    req = clean();
    let r = admit_new(Some(&gov), &fake, &who("denied"), &mut req).await;
    assert_eq!(code(r), "policy_denied");
    req = clean();
    let r = admit_new(Some(&gov), &fake, &who("full"), &mut req).await;
    assert_eq!(code(r), "tenant_quota_exceeded");
    assert!(req.tier.is_some(), "the gates ran before the disk cap");
    req = clean();
    let r = admit_new(Some(&gov), &fake, &who("roomy"), &mut req).await;
    assert_eq!(code(r), "admitted");
    assert_eq!(req.tier.as_deref(), Some(sandlot_types::ISOLATED_TIER));
    // Without governance: no tenant-scoped checks, the tier asked for (or isolated).
    req = CreateSandbox {
        template: None,
        ..every()
    };
    let r = admit_new(None, &fake, &who("roomy"), &mut req).await;
    assert_eq!(code(r), "admitted");
    assert_eq!(req.tier.as_deref(), Some(sandlot_types::ISOLATED_TIER));
}

/// Every operation of the one service (`sandlot_service::Service`) runs tenant scoping, then
/// the gates, then the tenant's fair shares, and only then reaches the backend: a refusal at
/// any step leaves the backend untouched. The fake's sandboxes are all the `default` tenant's.
#[tokio::test]
async fn the_service_scopes_gates_and_claims_before_the_runtime() {
    use sandlot_service::{OnDrop, Service};
    let store = Arc::new(sandlot_store::Store::open_in_memory().unwrap());
    let policies = concat!(
        "@id(\"all\") permit (principal, action, resource);\n",
        "@id(\"no-code\") forbid (principal, action == Sandlot::Action::\"execute\", ",
        "resource) when { principal.plan == \"no-code\" };\n",
        "@id(\"no-build\") forbid (principal, action == Sandlot::Action::\"build_template\", ",
        "resource) when { principal.plan == \"no-code\" };\n",
    );
    let engine = sandlot_policy::PolicyEngine::from_text(policies).unwrap();
    let gov = sandlot_service::Governance::new(store, engine, [7; 32]).unwrap();
    // The sandboxes' own tenant, with no room for anything it would keep.
    let none = sandlot_types::TenantQuotas {
        max_paused_sandboxes: Some(0),
        max_snapshots: Some(0),
        max_volumes: Some(0),
        max_templates: Some(0),
        ..Default::default()
    };
    let req = sandlot_types::CreateTenant {
        name: "default".into(),
        plan: Some("free".into()),
        quotas: Some(none),
    };
    gov.keys.put_tenant("default", req, true).unwrap();
    let who = |tenant: &str, plan: &str| sandlot_types::Principal {
        key_id: format!("key-{tenant}-{plan}"),
        key_prefix: "sl_test".into(),
        tenant: tenant.into(),
        role: sandlot_types::Role::Member,
        plan: plan.into(),
    };
    let fake = Fake::default();
    let svc = Service::new(&fake, Some(&gov));
    let code = |e: ApiError| e.code.as_str().to_owned();
    let exec = || ExecuteRequest {
        code: "1+1".into(),
        language: Language::Python,
        timeout: None,
        stream: false,
        context: None,
        on_failure: Default::default(),
    };

    // Another tenant's sandbox is a missing one, for every operation.
    let other = who("other", "free");
    let missing = "sandbox_not_found";
    assert_eq!(code(svc.pause(&other, "sb").await.unwrap_err()), missing);
    assert_eq!(code(svc.resume(&other, "sb").await.unwrap_err()), missing);
    assert_eq!(code(svc.delete(&other, "sb").await.unwrap_err()), missing);
    let fork = sandlot_types::ForkRequest {
        count: 2,
        same_seed: false,
    };
    assert_eq!(
        code(svc.fork(&other, "sb", fork).await.unwrap_err()),
        missing
    );
    let snap = sandlot_types::CreateSnapshot { name: None };
    assert_eq!(
        code(svc.snapshot(&other, "sb", snap).await.unwrap_err()),
        missing
    );
    let started = svc.start_execution(&other, "sb", exec(), false, OnDrop::RunOn);
    assert_eq!(code(started.await.err().unwrap()), missing);
    let gate = svc.gate_file(&other, "sb", "a.txt", Some(1)).await;
    assert_eq!(code(gate.unwrap_err()), missing);
    assert_eq!(code(svc.sandbox(&other, "sb").await.unwrap_err()), missing);

    // The gates: the policy forbids this plan's code and builds.
    let gated = who("default", "no-code");
    let started = svc.start_execution(&gated, "sb", exec(), false, OnDrop::RunOn);
    assert_eq!(code(started.await.err().unwrap()), "policy_denied");
    let built = svc.create_template(&gated, sample_spec("sales")).await;
    assert_eq!(code(built.unwrap_err()), "policy_denied");
    let deleted = svc.delete_template(&gated, "default", "sales").await;
    assert_eq!(code(deleted.unwrap_err()), "policy_denied");

    // The fair shares: the tenant may keep no paused sandbox, snapshot, volume or template.
    let member = who("default", "free");
    let quota = "tenant_quota_exceeded";
    assert_eq!(code(svc.pause(&member, "sb").await.unwrap_err()), quota);
    let snap = sandlot_types::CreateSnapshot { name: None };
    assert_eq!(
        code(svc.snapshot(&member, "sb", snap).await.unwrap_err()),
        quota
    );
    let vol = sandlot_types::CreateVolume {
        name: "data".into(),
        size_mb: None,
        tenant: None,
    };
    assert_eq!(
        code(svc.create_volume(&member, vol).await.unwrap_err()),
        quota
    );
    // (A template the tenant has already takes no new share: the fake has all but `missing`.)
    let built = svc.create_template(&member, sample_spec("missing")).await;
    assert_eq!(code(built.unwrap_err()), quota);
    assert_eq!(
        fake.calls(),
        Vec::<String>::new(),
        "nothing refused reached the backend"
    );

    // Past every step, the backend is reached, once per operation.
    let mut run = svc
        .start_execution(&member, "sb", exec(), false, OnDrop::RunOn)
        .await
        .unwrap();
    run.wait().await.unwrap();
    svc.delete(&member, "sb").await.unwrap();
    assert_eq!(fake.calls(), ["execute sb Python 1+1", "delete sb"]);
    // Without governance every caller is the local admin: nothing is scoped, gated or capped.
    let open = Service::new(&fake, None);
    open.delete(&other, "sb").await.unwrap();
    assert_eq!(fake.calls().last().map(String::as_str), Some("delete sb"));
}

/// The ports proxy strips the console's session cookie by name: the same name the console sets.
#[test]
fn the_ports_proxy_strips_the_consoles_own_cookie() {
    assert_eq!(sandlot_ports::CONSOLE_COOKIE, sandlot_console::COOKIE);
}
