//! One table of protocols × operations (issue 20): sandlot serves the same sandboxes over its
//! REST API (`/v1`), E2B's API (control plane, envd's `/files` and Connect process service, the
//! code interpreter's `/execute`), MCP (`/mcp`, JSON-RPC `tools/call`) and durable jobs
//! (`POST /v1/sandboxes/{id}/jobs`, run later by the server). All four go through one service,
//! so a policy that denies an operation must deny it on each, and another tenant's sandbox must
//! be missing on each. E2B is in the table twice: with an API key, and with a sandbox's own
//! `envdAccessToken` (as E2B's SDKs call envd), which is decided for the sandbox's tenant.
//!
//! [`perform`] says, for every (protocol, operation), how to do it and which answer shape to read
//! it with, or why that protocol has no such operation; its `match` has no wildcard, so a new
//! [`Protocol`] or [`Op`] does not compile until its row is written. [`verdict`] recognises, per
//! answer shape, "done", "denied by policy" (with the text naming the policy) and "no such
//! sandbox". The two tests iterate over every protocol × operation:
//!
//! - `a_policy_denies_an_operation_on_every_protocol`: a Cedar policy forbidding each gate to
//!   tenant `t1` denies it through every protocol, naming the policy; with the policy lifted the
//!   very same calls succeed (so the denial is the policy's, not a broken call). A job accepted
//!   before the policy is refused when its turn comes.
//! - `another_tenants_sandbox_is_missing_on_every_protocol`: tenant `tb` naming tenant `ta`'s
//!   sandbox gets what it gets for an id never seen (the id aside), on every protocol, and `ta`'s
//!   sandbox is untouched; `ta` itself reaches it through the same rows.
//!
//! Helpers copied from the other suites (common has no such ones): the MCP session client (from
//! mcp.rs), `tenant_key` (governance.rs), the Connect envelope (e2b_rpc.rs).

use crate::common;

use common::{As, TestServer};
use reqwest::blocking::{Client, RequestBuilder};
use reqwest::Method;
use serde_json::{json, Value};
use std::cell::Cell;
use std::time::{Duration, Instant};

/// envd's port and the code interpreter's, addressed by `E2b-Sandbox-Port`.
const ENVD: &str = "49983";
const JUPYTER: &str = "49999";
/// MCP's protocol version the tests speak.
const MCP_PROTOCOL: &str = "2025-06-18";
/// A sandbox id no tenant has.
const NEVER: &str = "sb_neverseen0000";
/// The file the file operations write and read (in the workspace, `/home/user` to E2B).
const FILE: &str = "notes.txt";
/// How long a job may take to end.
const JOB_WAIT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// The table.

/// The protocols sandlot serves sandboxes over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Rest,
    /// E2B with an API key (`X-API-KEY`), on the control plane and on a sandbox's ports.
    E2b,
    /// E2B with the sandbox's own `envdAccessToken` (`X-Access-Token`), as E2B's SDKs call
    /// envd and the interpreter: decided for the sandbox's tenant.
    E2bToken,
    Mcp,
    Jobs,
}

impl Protocol {
    /// The one after this one. Exhaustive on purpose: a new protocol must be given its place,
    /// and then [`perform`] does not compile until its rows are written.
    fn next(self) -> Option<Protocol> {
        match self {
            Protocol::Rest => Some(Protocol::E2b),
            Protocol::E2b => Some(Protocol::E2bToken),
            Protocol::E2bToken => Some(Protocol::Mcp),
            Protocol::Mcp => Some(Protocol::Jobs),
            Protocol::Jobs => None,
        }
    }

    fn all() -> Vec<Protocol> {
        std::iter::successors(Some(Protocol::Rest), |p| p.next()).collect()
    }

    /// Whether another tenant can name a sandbox through this protocol at all (else why not),
    /// for the cross-tenant test.
    fn reaches_by_id(self) -> Result<(), &'static str> {
        match self {
            Protocol::Rest | Protocol::E2b | Protocol::Mcp | Protocol::Jobs => Ok(()),
            Protocol::E2bToken => Err(
                "a token opens its own sandbox only, whoever holds it (another sandbox's token: \
                 401, e2b_api.rs, e2b_rpc.rs); another tenant never sees the token (E2b × Get)",
            ),
        }
    }
}

/// The operations on a sandbox. The order matters to the tests: the file is written before it
/// is read, and the destructive operations come last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Create,
    /// See the sandbox (get it, or find it in a list where a protocol has no get).
    Get,
    /// Run Python.
    Execute,
    /// Run a shell command.
    Command,
    WriteFile,
    ReadFile,
    /// Delete the file: a write of it, to the policy.
    DeleteFile,
    Fork,
    Pause,
    Delete,
}

impl Op {
    /// The one after this one (exhaustive, like [`Protocol::next`]).
    fn next(self) -> Option<Op> {
        match self {
            Op::Create => Some(Op::Get),
            Op::Get => Some(Op::Execute),
            Op::Execute => Some(Op::Command),
            Op::Command => Some(Op::WriteFile),
            Op::WriteFile => Some(Op::ReadFile),
            Op::ReadFile => Some(Op::DeleteFile),
            Op::DeleteFile => Some(Op::Fork),
            Op::Fork => Some(Op::Pause),
            Op::Pause => Some(Op::Delete),
            Op::Delete => None,
        }
    }

    fn all() -> Vec<Op> {
        std::iter::successors(Some(Op::Create), |o| o.next()).collect()
    }

    /// The policy of [`deny_t1`] that forbids this operation to tenant `t1`, or why no policy
    /// gates it.
    fn denied_by(self) -> Result<&'static str, &'static str> {
        match self {
            // A fork makes sandboxes as a creation does: it passes the creation gate.
            Op::Create | Op::Fork => Ok("t1-no-create"),
            Op::Execute | Op::Command => Ok("t1-no-execute"),
            Op::WriteFile | Op::DeleteFile => Ok("t1-no-write"),
            Op::ReadFile => Ok("t1-no-read"),
            Op::Get => Err("seeing one's own sandbox is not a policy gate"),
            Op::Pause => Err("pausing one's own sandbox is not a policy gate"),
            Op::Delete => Err("deleting one's own sandbox is not a policy gate"),
        }
    }

    /// Whether the operation names an existing sandbox (else why not), for the cross-tenant
    /// test.
    fn names_a_sandbox(self) -> Result<(), &'static str> {
        match self {
            Op::Create => Err(
                "a creation names no existing sandbox (creation from another tenant's snapshot: \
                 tenancy.rs, mcp.rs)",
            ),
            Op::Get
            | Op::Execute
            | Op::Command
            | Op::WriteFile
            | Op::ReadFile
            | Op::DeleteFile
            | Op::Fork
            | Op::Pause
            | Op::Delete => Ok(()),
        }
    }

    /// Whether the owner may do it to its own sandbox in the cross-tenant test without
    /// changing what the test checks afterwards (the sandbox running, its file, no children).
    fn harmless(self) -> bool {
        match self {
            Op::Get | Op::Execute | Op::Command | Op::WriteFile | Op::ReadFile => true,
            // Deleting the file would change what the test reads afterwards.
            Op::Create | Op::DeleteFile | Op::Fork | Op::Pause | Op::Delete => false,
        }
    }
}

/// How an answer is read: each protocol's surfaces have their own formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// `/v1`: a status and `{"error": {"code", "message"}}`.
    Rest,
    /// A job submission: 202 and the job (polled to its end), or a `/v1` error.
    Job,
    /// E2B's control plane: `{"code": status, "message", "sandlot_code"}`; an unknown sandbox 404.
    E2bControl,
    /// envd's `/files`: E2B's JSON errors; an unknown sandbox is E2B's proxy answer, 502.
    E2bFiles,
    /// The code interpreter's `/execute`: plain-text errors `policy_denied: ...`; an unknown
    /// sandbox 502.
    E2bJupyter,
    /// A Connect unary call (envd's filesystem service): 200 and the message, or an error status
    /// with `{"code", "message"}` (`permission_denied`); an unknown sandbox 502.
    ConnectUnary,
    /// A Connect server stream: errors in its end-of-stream message (`permission_denied`; an
    /// unknown sandbox `unavailable`).
    Connect,
    /// An MCP tool result: errors are `isError` results whose text starts with the code.
    McpTool,
    /// MCP's `list_sandboxes` (MCP has no get): the sandbox is there or not.
    McpList,
}

/// One answer.
#[derive(Debug)]
struct Got {
    shape: Shape,
    status: u16,
    /// The body as text (a Connect stream: its messages' JSON, one a line), to compare answers.
    text: String,
    /// The body as JSON (a job submission: the job at its end; MCP: the JSON-RPC reply).
    json: Value,
}

/// What an answer means.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    Done,
    /// Denied by the policy; the text the caller is given.
    Denied(String),
    /// No such sandbox.
    Missing,
    Unexpected,
}

/// Performs `op` on sandbox `id` (ignored by a creation) through `p` as `who`, or says why `p`
/// has no such operation.
fn perform(who: &Caller, p: Protocol, op: Op, id: &str) -> Result<Got, &'static str> {
    let py = json!({ "code": "print('ran')" });
    let sh = json!({ "code": "echo ran", "language": "bash" });
    let content = format!("written by {}", who.tenant);
    let e2b_file = format!("/files?path=/home/user/{FILE}");
    Ok(match (p, op) {
        (Protocol::Rest, Op::Create) => who.rest(Method::POST, "/v1/sandboxes", Some(json!({}))),
        (Protocol::Rest, Op::Get) => who.rest(Method::GET, &format!("/v1/sandboxes/{id}"), None),
        (Protocol::Rest, Op::Execute) => who.rest(
            Method::POST,
            &format!("/v1/sandboxes/{id}/execute"),
            Some(py),
        ),
        (Protocol::Rest, Op::Command) => who.rest(
            Method::POST,
            &format!("/v1/sandboxes/{id}/execute"),
            Some(sh),
        ),
        (Protocol::Rest, Op::WriteFile) => who.read(
            Shape::Rest,
            who.bearer
                .put(who.url(&format!("/v1/sandboxes/{id}/files/{FILE}")))
                .body(content),
        ),
        (Protocol::Rest, Op::ReadFile) => who.rest(
            Method::GET,
            &format!("/v1/sandboxes/{id}/files/{FILE}"),
            None,
        ),
        (Protocol::Rest, Op::DeleteFile) => who.rest(
            Method::DELETE,
            &format!("/v1/sandboxes/{id}/files/{FILE}"),
            None,
        ),
        (Protocol::Rest, Op::Fork) => who.rest(
            Method::POST,
            &format!("/v1/sandboxes/{id}/fork"),
            Some(json!({})),
        ),
        (Protocol::Rest, Op::Pause) => who.rest(
            Method::POST,
            &format!("/v1/sandboxes/{id}/pause"),
            Some(json!({})),
        ),
        (Protocol::Rest, Op::Delete) => {
            who.rest(Method::DELETE, &format!("/v1/sandboxes/{id}"), None)
        }

        (Protocol::E2b, Op::Create) => who.read(
            Shape::E2bControl,
            who.e2b(Method::POST, "/sandboxes")
                .json(&json!({ "templateID": "base", "timeout": 120 })),
        ),
        (Protocol::E2b, Op::Get) => who.read(
            Shape::E2bControl,
            who.e2b(Method::GET, &format!("/sandboxes/{id}")),
        ),
        (Protocol::E2b | Protocol::E2bToken, Op::Execute) => who.read(
            Shape::E2bJupyter,
            who.envd(p, Method::POST, id, JUPYTER, "/execute").json(&py),
        ),
        (Protocol::E2b | Protocol::E2bToken, Op::Command) => {
            let start = json!({
                "process": { "cmd": "/bin/bash", "args": ["-l", "-c", "echo ran"] },
                "stdin": false,
            });
            who.read(
                Shape::Connect,
                who.envd(p, Method::POST, id, ENVD, "/process.Process/Start")
                    .header("content-type", "application/connect+json")
                    .body(crate::e2b_rpc::envelope(0, start.to_string().as_bytes())),
            )
        }
        (Protocol::E2b | Protocol::E2bToken, Op::WriteFile) => who.read(
            Shape::E2bFiles,
            who.envd(p, Method::POST, id, ENVD, &e2b_file)
                .header("content-type", "application/octet-stream")
                .body(content),
        ),
        (Protocol::E2b | Protocol::E2bToken, Op::ReadFile) => who.read(
            Shape::E2bFiles,
            who.envd(p, Method::GET, id, ENVD, &e2b_file),
        ),
        (Protocol::E2b | Protocol::E2bToken, Op::DeleteFile) => who.read(
            Shape::ConnectUnary,
            who.envd(p, Method::POST, id, ENVD, "/filesystem.Filesystem/Remove")
                .header("content-type", "application/json")
                .body(json!({ "path": format!("/home/user/{FILE}") }).to_string()),
        ),
        (Protocol::E2b, Op::Fork) => who.read(
            Shape::E2bControl,
            who.e2b(Method::POST, &format!("/sandboxes/{id}/fork"))
                .json(&json!({})),
        ),
        (Protocol::E2b, Op::Pause) => who.read(
            Shape::E2bControl,
            who.e2b(Method::POST, &format!("/sandboxes/{id}/pause")),
        ),
        (Protocol::E2b, Op::Delete) => who.read(
            Shape::E2bControl,
            who.e2b(Method::DELETE, &format!("/sandboxes/{id}")),
        ),
        (Protocol::E2bToken, Op::Create | Op::Get | Op::Fork | Op::Pause | Op::Delete) => {
            return Err("E2B's control plane takes API keys, not a sandbox's token")
        }

        (Protocol::Mcp, Op::Create) => who.mcp.call(Shape::McpTool, "create_sandbox", json!({})),
        (Protocol::Mcp, Op::Get) => who.mcp.call(Shape::McpList, "list_sandboxes", json!({})),
        (Protocol::Mcp, Op::Execute) => who.mcp.call(
            Shape::McpTool,
            "run_python",
            json!({ "sandbox_id": id, "code": "print('ran')" }),
        ),
        (Protocol::Mcp, Op::Command) => who.mcp.call(
            Shape::McpTool,
            "run_bash",
            json!({ "sandbox_id": id, "code": "echo ran" }),
        ),
        (Protocol::Mcp, Op::WriteFile) => who.mcp.call(
            Shape::McpTool,
            "write_file",
            json!({ "sandbox_id": id, "path": FILE, "content": content }),
        ),
        (Protocol::Mcp, Op::ReadFile) => who.mcp.call(
            Shape::McpTool,
            "read_file",
            json!({ "sandbox_id": id, "path": FILE }),
        ),
        (Protocol::Mcp, Op::DeleteFile) => {
            return Err("MCP's tools write and read files; none deletes one")
        }
        (Protocol::Mcp, Op::Fork) => {
            who.mcp
                .call(Shape::McpTool, "fork_sandbox", json!({ "sandbox_id": id }))
        }
        (Protocol::Mcp, Op::Pause) => {
            who.mcp
                .call(Shape::McpTool, "pause_sandbox", json!({ "sandbox_id": id }))
        }
        (Protocol::Mcp, Op::Delete) => who.mcp.call(
            Shape::McpTool,
            "delete_sandbox",
            json!({ "sandbox_id": id }),
        ),

        (Protocol::Jobs, Op::Create) => {
            return Err("a job runs code in a sandbox that exists; it makes none")
        }
        (Protocol::Jobs, Op::Get) => {
            who.rest(Method::GET, &format!("/v1/sandboxes/{id}/jobs"), None)
        }
        (Protocol::Jobs, Op::Execute) => who.job(id, py),
        (Protocol::Jobs, Op::Command) => who.job(id, sh),
        (Protocol::Jobs, Op::WriteFile | Op::ReadFile | Op::DeleteFile) => {
            return Err("a job is an execution; files go through the other protocols")
        }
        (Protocol::Jobs, Op::Fork) => return Err("a job does not fork its sandbox"),
        (Protocol::Jobs, Op::Pause) => return Err("a job does not pause its sandbox"),
        (Protocol::Jobs, Op::Delete) => {
            return Err(
                "cancelling a job names a job, not a sandbox (another tenant's job ids: jobs.rs)",
            )
        }
    })
}

/// What `got` means, read the way its protocol writes it; `id` is the sandbox asked about.
fn verdict(got: &Got, id: &str) -> Verdict {
    let ok = (200..300).contains(&got.status);
    let rest_code = got.json["error"]["code"].as_str().unwrap_or("");
    let rest_message = || {
        got.json["error"]["message"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    let e2b_denied = || {
        got.status == 403 && got.json["code"] == 403 && got.json["sandlot_code"] == "policy_denied"
    };
    let e2b_message = || got.json["message"].as_str().unwrap_or("").to_owned();
    match got.shape {
        Shape::Rest => match (got.status, rest_code) {
            _ if ok => Verdict::Done,
            (403, "policy_denied") => Verdict::Denied(rest_message()),
            (404, "sandbox_not_found") => Verdict::Missing,
            _ => Verdict::Unexpected,
        },
        Shape::Job => match (got.status, rest_code) {
            (202, _) => match got.json["state"].as_str() {
                Some("succeeded") => Verdict::Done,
                // Accepted, then refused when its turn came (the policy is read again then).
                Some("failed")
                    if got.json["reason"]
                        .as_str()
                        .is_some_and(|r| r.contains("policy")) =>
                {
                    Verdict::Denied(got.json["reason"].as_str().unwrap_or("").to_owned())
                }
                _ => Verdict::Unexpected,
            },
            (403, "policy_denied") => Verdict::Denied(rest_message()),
            (404, "sandbox_not_found") => Verdict::Missing,
            _ => Verdict::Unexpected,
        },
        Shape::E2bControl => {
            if ok {
                Verdict::Done
            } else if e2b_denied() {
                Verdict::Denied(e2b_message())
            } else if got.status == 404 && got.json["code"] == 404 {
                Verdict::Missing
            } else {
                Verdict::Unexpected
            }
        }
        Shape::E2bFiles => {
            if ok {
                Verdict::Done
            } else if e2b_denied() {
                Verdict::Denied(e2b_message())
            } else if got.status == 502 {
                Verdict::Missing
            } else {
                Verdict::Unexpected
            }
        }
        Shape::E2bJupyter => {
            if ok {
                Verdict::Done
            } else if got.status == 403 && got.text.starts_with("policy_denied: ") {
                Verdict::Denied(got.text.clone())
            } else if got.status == 502 {
                Verdict::Missing
            } else {
                Verdict::Unexpected
            }
        }
        Shape::ConnectUnary => {
            let message = || got.json["message"].as_str().unwrap_or("").to_owned();
            match (got.status, got.json["code"].as_str()) {
                _ if ok => Verdict::Done,
                (_, Some("permission_denied")) => Verdict::Denied(message()),
                (502, _) | (_, Some("unavailable")) => Verdict::Missing,
                _ => Verdict::Unexpected,
            }
        }
        Shape::Connect => {
            let end: Value = got
                .text
                .lines()
                .last()
                .and_then(|l| serde_json::from_str(l).ok())
                .unwrap_or(Value::Null);
            let message = end
                .pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            match (
                got.status,
                end.pointer("/error/code").and_then(Value::as_str),
            ) {
                (200, None) if !got.text.is_empty() => Verdict::Done,
                (200, Some("permission_denied")) => Verdict::Denied(message),
                (200, Some("unavailable")) => Verdict::Missing,
                _ => Verdict::Unexpected,
            }
        }
        Shape::McpTool => {
            let result = &got.json["result"];
            let text = mcp_text(&got.json);
            if !got.json["error"].is_null() || result.is_null() {
                Verdict::Unexpected
            } else if result["isError"] != json!(true) {
                Verdict::Done
            } else if text.contains("policy_denied") {
                Verdict::Denied(text)
            } else if text.starts_with("sandbox_not_found: ") {
                Verdict::Missing
            } else {
                Verdict::Unexpected
            }
        }
        Shape::McpList => {
            if !got.json["error"].is_null() || got.json["result"]["isError"] == json!(true) {
                return Verdict::Unexpected;
            }
            let listed: Value = serde_json::from_str(&mcp_text(&got.json)).unwrap_or(Value::Null);
            let Some(listed) = listed.as_array() else {
                return Verdict::Unexpected;
            };
            if listed.iter().any(|s| s["sandbox_id"] == id) {
                Verdict::Done
            } else {
                Verdict::Missing
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A caller: one key, through every protocol.

struct Caller<'a> {
    server: &'a TestServer,
    tenant: String,
    key: String,
    /// Sends the key as the bearer key (`/v1`, jobs).
    bearer: Client,
    /// Sends no bearer key (E2B clients send `X-API-KEY`).
    plain: Client,
    mcp: Mcp,
}

impl<'a> Caller<'a> {
    fn new(server: &'a TestServer, tenant: &str, key: &str) -> Caller<'a> {
        Caller {
            server,
            tenant: tenant.to_owned(),
            key: key.to_owned(),
            bearer: server.client_with_key(Some(key)),
            plain: server.client_with_key(None),
            mcp: Mcp::open(server, key),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.url())
    }

    fn read(&self, shape: Shape, req: RequestBuilder) -> Got {
        let resp = req
            .send()
            .unwrap_or_else(|e| panic!("request failed: {e}\n{}", self.server.stderr()));
        let status = resp.status().as_u16();
        let bytes = resp.bytes().map(|b| b.to_vec()).unwrap_or_default();
        let text = if shape == Shape::Connect && status == 200 {
            connect_messages(&bytes)
        } else {
            String::from_utf8_lossy(&bytes).into_owned()
        };
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Got {
            shape,
            status,
            text,
            json,
        }
    }

    fn rest(&self, method: Method, path: &str, body: Option<Value>) -> Got {
        let mut req = self.bearer.request(method, self.url(path));
        if let Some(b) = body {
            req = req.json(&b);
        }
        self.read(Shape::Rest, req)
    }

    /// A request to E2B's control plane.
    fn e2b(&self, method: Method, path: &str) -> RequestBuilder {
        self.plain
            .request(method, self.url(path))
            .header("X-API-KEY", &self.key)
    }

    /// A request to a port of sandbox `id` (envd's or the interpreter's), with the key, or
    /// through [`Protocol::E2bToken`] with the sandbox's token.
    fn envd(
        &self,
        p: Protocol,
        method: Method,
        id: &str,
        port: &str,
        path: &str,
    ) -> RequestBuilder {
        let req = self
            .plain
            .request(method, self.url(path))
            .header("E2b-Sandbox-Id", id)
            .header("E2b-Sandbox-Port", port);
        match p {
            Protocol::E2bToken => req.header("X-Access-Token", self.token_of(id)),
            _ => req.header("X-API-KEY", &self.key),
        }
    }

    /// Sandbox `id`'s `envdAccessToken`, as E2B's control plane gives it to the key's tenant
    /// (empty when it does not).
    fn token_of(&self, id: &str) -> String {
        let got = self.read(
            Shape::E2bControl,
            self.e2b(Method::GET, &format!("/sandboxes/{id}")),
        );
        got.json["envdAccessToken"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Submits a job to sandbox `id`; when accepted, waits (bounded) for it to end and answers
    /// the job as it ended.
    fn job(&self, id: &str, body: Value) -> Got {
        let mut got = self.read(
            Shape::Job,
            self.bearer
                .post(self.url(&format!("/v1/sandboxes/{id}/jobs")))
                .json(&body),
        );
        if got.status != 202 {
            return got;
        }
        let job_id = got.json["id"].as_str().expect("a job id").to_owned();
        got.json = self.wait_job(&job_id, &["succeeded", "failed", "cancelled", "lost"]);
        got
    }

    /// Waits (bounded) until job `id` is in one of `states`; returns it.
    #[track_caller]
    fn wait_job(&self, id: &str, states: &[&str]) -> Value {
        let deadline = Instant::now() + JOB_WAIT;
        loop {
            let j = self.rest(Method::GET, &format!("/v1/jobs/{id}"), None);
            if states.contains(&j.json["state"].as_str().unwrap_or("")) {
                return j.json;
            }
            assert!(
                Instant::now() < deadline,
                "job {id} not {states:?}: {}",
                j.text
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The ids of this tenant's sandboxes that are not deleted, through `/v1`.
    fn sandboxes(&self) -> Vec<String> {
        let r = self.rest(Method::GET, "/v1/sandboxes", None);
        assert_eq!(r.status, 200, "{}", r.text);
        r.json["sandboxes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| !["deleted", "expired", "lost"].contains(&s["state"].as_str().unwrap()))
            .map(|s| s["id"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// A Connect stream's messages as JSON text, one a line (the envelopes' lengths left out, so
/// that two answers differing only in an id's length compare equal once the id is replaced).
fn connect_messages(mut b: &[u8]) -> String {
    let mut out = Vec::new();
    while b.len() >= 5 {
        let len = u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
        let Some(payload) = b.get(5..5 + len) else {
            break;
        };
        out.push(String::from_utf8_lossy(payload).into_owned());
        b = &b[5 + len..];
    }
    out.join("\n")
}

/// An MCP session over streamable HTTP, for one key.
struct Mcp {
    http: Client,
    url: String,
    session: String,
    next_id: Cell<u64>,
}

impl Mcp {
    fn post(&self, session: Option<&str>, body: &Value) -> reqwest::blocking::Response {
        let mut req = self
            .http
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", MCP_PROTOCOL)
            .json(body);
        if let Some(s) = session {
            req = req.header("mcp-session-id", s);
        }
        req.send().expect("MCP request")
    }

    fn open(server: &TestServer, key: &str) -> Mcp {
        let mut mcp = Mcp {
            http: server.client_with_key(Some(key)),
            url: format!("{}/mcp", server.url()),
            session: String::new(),
            next_id: Cell::new(1),
        };
        let init = mcp.post(
            None,
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": MCP_PROTOCOL, "capabilities": {},
                "clientInfo": {"name": "protocols", "version": "1"}}}),
        );
        assert_eq!(init.status().as_u16(), 200);
        mcp.session = init
            .headers()
            .get("mcp-session-id")
            .expect("an MCP session")
            .to_str()
            .unwrap()
            .to_owned();
        let _ = init.text();
        let note = mcp.post(
            Some(&mcp.session),
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        );
        assert_eq!(note.status().as_u16(), 202);
        mcp
    }

    /// `tools/call`: the JSON-RPC reply, read as `shape`.
    fn call(&self, shape: Shape, tool: &str, arguments: Value) -> Got {
        let id = self.next_id.get() + 1;
        self.next_id.set(id);
        let resp = self.post(
            Some(&self.session),
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": tool, "arguments": arguments}}),
        );
        let status = resp.status().as_u16();
        let body = resp.text().unwrap_or_default();
        // A JSON body, or SSE `data:` lines.
        let messages: Vec<Value> = match serde_json::from_str::<Value>(&body) {
            Ok(v) => vec![v],
            Err(_) => body
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .filter_map(|d| serde_json::from_str(d.trim()).ok())
                .collect(),
        };
        let reply = messages
            .into_iter()
            .find(|m| m["id"] == json!(id))
            .unwrap_or(Value::Null);
        Got {
            shape,
            status,
            text: mcp_text(&reply),
            json: reply,
        }
    }

    fn close(&self) {
        let _ = self
            .http
            .delete(&self.url)
            .header("mcp-session-id", &self.session)
            .send();
    }
}

/// The text of a tool result's content blocks.
fn mcp_text(reply: &Value) -> String {
    reply["result"]["content"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// A server with API keys (the test server's default) and one warm sandbox.
fn server() -> TestServer {
    TestServer::start_with_env(&[("SANDLOT_POOL_SIZE", "1")])
}

/// `protocol × op`, for messages.
fn row(p: Protocol, op: Op) -> String {
    format!("{p:?} × {op:?}")
}

/// Shortens an answer for a failure message.
fn brief(got: &Got) -> String {
    let t: String = got.text.chars().take(400).collect();
    format!("{} {t}", got.status)
}

// ---------------------------------------------------------------------------------------------
// The tests.

/// The shipped policy set plus one forbid per gate for tenant `t1`, each with the id
/// [`Op::denied_by`] names.
fn deny_t1() -> String {
    let mut text = sandlot_policy::DEFAULT_POLICIES.to_owned();
    for (id, action) in [
        ("t1-no-create", "create_sandbox"),
        ("t1-no-execute", "execute"),
        ("t1-no-write", "write_file"),
        ("t1-no-read", "read_file"),
    ] {
        text.push_str(&format!(
            "\n@id(\"{id}\")\n@reason(\"tenant t1 may not {action}\")\n\
             forbid (principal in Sandlot::Tenant::\"t1\", \
             action == Sandlot::Action::\"{action}\", resource);\n"
        ));
    }
    text
}

/// A policy that forbids an operation to a tenant forbids it on every protocol that has the
/// operation, with the protocol's own "denied by policy" answer naming the policy; nothing is
/// made, run, written or read; and with the policy lifted the very same calls succeed.
#[test]
fn a_policy_denies_an_operation_on_every_protocol() {
    let server = server();
    let admin = As::key(&server, server.key());
    let key = server.tenant("t1").role("member").key();
    let t1 = Caller::new(&server, "t1", &key);
    // The sandbox every row acts on, with the file the reads read.
    let target = create_through_rest(&t1);
    let w = perform(&t1, Protocol::Rest, Op::WriteFile, &target).unwrap();
    assert_eq!(verdict(&w, &target), Verdict::Done, "{}", brief(&w));

    // A job accepted before the policy and run after it: the gate is passed again when its
    // turn comes (behind a job that is running when the policy arrives).
    let submit = |code: &str| {
        let r = t1.rest(
            Method::POST,
            &format!("/v1/sandboxes/{target}/jobs"),
            Some(json!({ "code": code })),
        );
        assert_eq!(r.status, 202, "{}", r.text);
        r.json["id"].as_str().unwrap().to_owned()
    };
    // Five seconds: room for the submission and the policy behind it on a loaded machine.
    let running = submit("import time\ntime.sleep(5)");
    t1.wait_job(&running, &["running"]);
    let queued = submit("print('late')");

    admin
        .put_raw("/v1/policies", "text/plain", deny_t1())
        .expect(200);
    let mut failures = Vec::new();
    let mut denied = 0;
    for p in Protocol::all() {
        for op in Op::all() {
            let Ok(policy) = op.denied_by() else {
                continue;
            };
            let Ok(got) = perform(&t1, p, op, &target) else {
                continue;
            };
            let v = verdict(&got, &target);
            eprintln!("{} under the policy: {v:?}", row(p, op));
            match v {
                Verdict::Denied(text) if text.contains(policy) => denied += 1,
                v => failures.push(format!(
                    "{}: expected denied by {policy}, got {v:?}: {}",
                    row(p, op),
                    brief(&got)
                )),
            }
        }
    }
    let late = Got {
        shape: Shape::Job,
        status: 202,
        text: String::new(),
        json: t1.wait_job(&queued, &["succeeded", "failed", "cancelled", "lost"]),
    };
    match verdict(&late, &target) {
        Verdict::Denied(text) if text.contains("t1-no-execute") => {}
        v => failures.push(format!(
            "a job queued before the policy: expected denied when it runs, got {v:?}: {}",
            late.json
        )),
    }
    assert_eq!(
        t1.wait_job(&running, &["succeeded", "failed"])["state"],
        "succeeded"
    );

    // Nothing was made, and every decision of the tenant's under this policy set is a denial,
    // journaled (so no row got through on a path that skipped the gate).
    assert_eq!(t1.sandboxes(), vec![target.clone()]);
    let version = admin.get("/v1/policies").expect(200)["version"]
        .as_str()
        .unwrap()
        .to_owned();
    for gate in ["create_sandbox", "execute", "write_file", "read_file"] {
        // A tenant's own key sees its decisions (the operator's, its own tenant's).
        let r = t1.rest(
            Method::GET,
            &format!("/v1/decisions?gate={gate}&limit=200"),
            None,
        );
        assert_eq!(r.status, 200, "{}", r.text);
        let under: Vec<&Value> = r.json["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["tenant"] == "t1" && d["version"] == version.as_str())
            .collect();
        assert!(!under.is_empty(), "no {gate} decision journaled");
        assert!(
            under.iter().all(|d| d["allowed"] == false),
            "{gate} allowed under the policy: {under:#?}"
        );
    }

    // Lifted: the same rows succeed.
    admin
        .put_raw(
            "/v1/policies",
            "text/plain",
            sandlot_policy::DEFAULT_POLICIES,
        )
        .expect(200);
    let mut done = 0;
    for p in Protocol::all() {
        for op in Op::all() {
            if op.denied_by().is_err() {
                continue;
            }
            let Ok(got) = perform(&t1, p, op, &target) else {
                continue;
            };
            let v = verdict(&got, &target);
            eprintln!("{} with the policy lifted: {v:?}", row(p, op));
            match v {
                Verdict::Done => done += 1,
                v => failures.push(format!(
                    "{}: expected done with the policy lifted, got {v:?}: {}",
                    row(p, op),
                    brief(&got)
                )),
            }
        }
        // What the creations and forks made goes again, so the sandboxes stay few.
        for id in t1.sandboxes() {
            if id != target {
                let r = t1.rest(Method::DELETE, &format!("/v1/sandboxes/{id}"), None);
                assert_eq!(r.status, 204, "{}", r.text);
            }
        }
    }
    t1.mcp.close();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Every gated row ran both ways: 7 gated operations on REST and E2B (key), 6 on MCP (it
    // deletes no file), the 5 on a sandbox's ports with E2B's token, and the 2 executions of
    // jobs.
    assert_eq!((denied, done), (27, 27));
}

/// Creates a sandbox for `who` through `/v1`; returns its id.
fn create_through_rest(who: &Caller) -> String {
    let got = perform(who, Protocol::Rest, Op::Create, "").unwrap();
    assert_eq!(got.status, 201, "{}", got.text);
    got.json["id"].as_str().unwrap().to_owned()
}

/// Another tenant's sandbox is missing on every protocol: tenant `tb` naming `ta`'s sandbox gets
/// exactly the answer it gets for an id never seen (the id aside), and `ta`'s sandbox is
/// untouched. `ta` reaches its sandbox through the same rows (so "missing" is not a broken call).
#[test]
fn another_tenants_sandbox_is_missing_on_every_protocol() {
    let server = server();
    let ta = Caller::new(&server, "ta", &server.tenant("ta").role("member").key());
    let tb = Caller::new(&server, "tb", &server.tenant("tb").role("member").key());
    let target = create_through_rest(&ta);

    let mut failures = Vec::new();
    let mut probes = 0;
    // The owner first: every harmless row reaches the sandbox.
    for p in Protocol::all() {
        for op in Op::all() {
            if op.names_a_sandbox().is_err() || !op.harmless() {
                continue;
            }
            let Ok(got) = perform(&ta, p, op, &target) else {
                continue;
            };
            let v = verdict(&got, &target);
            if v != Verdict::Done {
                failures.push(format!(
                    "{} as the owner: expected done, got {v:?}: {}",
                    row(p, op),
                    brief(&got)
                ));
            }
        }
    }
    let owner_wrote = ta
        .rest(
            Method::GET,
            &format!("/v1/sandboxes/{target}/files/{FILE}"),
            None,
        )
        .text;
    assert_eq!(owner_wrote, "written by ta");

    // Then the other tenant, on every row: the owner's sandbox and one never seen.
    for p in Protocol::all() {
        if p.reaches_by_id().is_err() {
            continue;
        }
        for op in Op::all() {
            if op.names_a_sandbox().is_err() {
                continue;
            }
            let Ok(never) = perform(&tb, p, op, NEVER) else {
                continue;
            };
            let foreign = perform(&tb, p, op, &target).expect("the same row");
            probes += 1;
            eprintln!(
                "{} by another tenant: {:?} (never seen: {:?})",
                row(p, op),
                verdict(&foreign, &target),
                verdict(&never, NEVER)
            );
            for (what, got, id) in [
                ("never seen", &never, NEVER),
                ("foreign", &foreign, &target),
            ] {
                let v = verdict(got, id);
                if v != Verdict::Missing {
                    failures.push(format!(
                        "{} ({what} id): expected missing, got {v:?}: {}",
                        row(p, op),
                        brief(got)
                    ));
                }
            }
            if (foreign.status, foreign.text.replace(target.as_str(), NEVER))
                != (never.status, never.text.clone())
            {
                failures.push(format!(
                    "{}: the foreign answer differs from the never-seen one:\n  {}\n  {}",
                    row(p, op),
                    brief(&foreign),
                    brief(&never)
                ));
            }
        }
    }

    // The owner's sandbox is untouched: running, its file as it wrote it, no fork of it, and the
    // other tenant has nothing.
    let got = ta.rest(Method::GET, &format!("/v1/sandboxes/{target}"), None);
    assert_eq!(got.status, 200, "{}", got.text);
    assert_eq!(got.json["state"], "running", "{}", got.text);
    let file = ta.rest(
        Method::GET,
        &format!("/v1/sandboxes/{target}/files/{FILE}"),
        None,
    );
    assert_eq!(file.text, "written by ta");
    assert_eq!(ta.sandboxes(), vec![target.clone()]);
    assert!(tb.sandboxes().is_empty(), "{:?}", tb.sandboxes());
    ta.mcp.close();
    tb.mcp.close();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // 4 protocols × 9 operations naming a sandbox, less the 6 jobs have not and the file
    // deletion MCP has not.
    assert_eq!(probes, 29);
}
