//! Templates against the real server: setup data shared by every sandbox of a template, builds
//! that fail (a setup that raises, a setup that starts threads, a package that does not exist)
//! with a clear error and no harm to anything else, invalid specs, listing, and
//! `sandlot template build` end to end.

use crate::common;

use common::{assert_schema, TestServer};
use serde_json::{json, Value};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Longest wait for a template without extra packages: a zygote importing pandas and running a
/// short setup, on a loaded two-core machine.
const BUILD_TIMEOUT: Duration = Duration::from_secs(180);
/// Longest wait for a template whose package does not exist: a venv is created and pip gives up
/// on the name.
const PIP_FAILURE_TIMEOUT: Duration = Duration::from_secs(420);

const SALES_SETUP: &str = "import pandas as pd\n\
    sales = pd.DataFrame({\"region\": [\"n\", \"s\"], \"amount\": [10, 20]})\n";

/// POSTs a spec; asserts 202 and a `building` template, and returns it.
fn create_template(server: &TestServer, spec: &Value) -> Value {
    let resp = server.post("/v1/templates", spec);
    let t = resp.expect(202).clone();
    assert_schema("Template", &t);
    assert_eq!(t["status"], "building", "{t}");
    assert_eq!(t["name"], spec["name"]);
    t
}

/// Polls a template until it is no longer building; returns it.
#[track_caller]
fn wait_built(server: &TestServer, name: &str, timeout: Duration) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let t = server
            .get(&format!("/v1/templates/{name}"))
            .expect(200)
            .clone();
        assert_schema("Template", &t);
        if t["status"] != "building" {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "template {name} still building after {timeout:?}: {t}\nserver stderr:\n{}",
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The `text/plain` of an execution's result.
#[track_caller]
fn value(result: &Value) -> &str {
    assert_eq!(result["end_state"], "ok", "{result}");
    result["result"]["text/plain"].as_str().unwrap_or("")
}

#[test]
fn setup_data_is_in_every_sandbox_copy_on_write() {
    let server = TestServer::start();
    let spec = json!({
        "name": "sales",
        "description": "pandas with the sales data loaded",
        "imports": ["numpy", "pandas"],
        "setup": SALES_SETUP,
        "limits": {"memory_mb": 768},
    });
    create_template(&server, &spec);
    let t = wait_built(&server, "sales", BUILD_TIMEOUT);
    assert_eq!(t["status"], "ready", "{t}");
    assert!(t.get("error").is_none(), "{t}");
    assert!(t["prepare_seconds"].as_f64().unwrap() > 0.0, "{t}");
    let version = t["version"].as_str().unwrap().to_owned();
    assert!(!version.is_empty());
    assert_eq!(t["spec"]["setup"], SALES_SETUP);

    let a = server.create_sandbox_with(&json!({"template": "sales"}));
    let b = server.create_sandbox_with(&json!({"template": "sales"}));
    for sb in [&a, &b] {
        assert_eq!(sb["template"], "sales");
        assert_eq!(sb["template_version"], version.as_str());
        // The template's default limits apply.
        assert_eq!(sb["limits"]["memory_mb"], 768);
    }
    let (a, b) = (a["id"].as_str().unwrap(), b["id"].as_str().unwrap());
    let got = server
        .get(&format!("/v1/sandboxes/{a}"))
        .expect(200)
        .clone();
    assert_eq!(got["template_version"], version.as_str());

    // The data is there without any import or load in the sandbox.
    assert_eq!(value(&server.execute(a, "int(sales.amount.sum())")), "30");
    assert_eq!(value(&server.execute(b, "int(sales.amount.sum())")), "30");
    assert_eq!(
        value(&server.execute(a, "'pandas' in __import__('sys').modules")),
        "True"
    );

    // A change in one sandbox stays there.
    let changed = server.execute(
        a,
        "sales.loc[0, 'amount'] = 1000\nsales['extra'] = 1\nmine = 5\nint(sales.amount.sum())",
    );
    assert_eq!(value(&changed), "1020");
    assert_eq!(value(&server.execute(b, "int(sales.amount.sum())")), "30");
    assert_eq!(
        value(&server.execute(b, "list(sales.columns)")),
        "['region', 'amount']"
    );
    assert_eq!(value(&server.execute(b, "'mine' in globals()")), "False");
    // ... and new sandboxes start from the template, not from a's state.
    let c = server.create_sandbox_with(&json!({"template": "sales"}));
    let c = c["id"].as_str().unwrap();
    assert_eq!(value(&server.execute(c, "int(sales.amount.sum())")), "30");

    // A request may override the template's limits; the default template has no `sales`.
    let d = server.create_sandbox_with(&json!({"template": "sales", "limits": {"memory_mb": 512}}));
    assert_eq!(d["limits"]["memory_mb"], 512);
    let plain = server.create_sandbox();
    let r = server.execute(&plain, "sales");
    assert_eq!(r["end_state"], "error", "{r}");
    assert_eq!(r["error"]["name"], "NameError", "{r}");

    // The list has both templates.
    let list = server.get("/v1/templates").expect(200).clone();
    assert_schema("TemplateList", &list);
    let names: Vec<&str> = list["templates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["default", "sales"]);
}

#[test]
fn failing_setups_fail_the_template_only() {
    let server = TestServer::start();
    // One at a time: see `templates_created_together_all_build` for creations that overlap.
    create_template(
        &server,
        &json!({
            "name": "raises",
            "setup": "x = 1\nraise ValueError('the sales data is missing')\n",
        }),
    );
    let raised = wait_built(&server, "raises", BUILD_TIMEOUT);
    create_template(
        &server,
        &json!({
            "name": "threads",
            "setup": "import threading, time\n\
                      threading.Thread(target=time.sleep, args=(1000,), daemon=True).start()\n",
        }),
    );

    // A setup that raises: failed, with the exception in `error`.
    let t = raised;
    assert_eq!(t["status"], "failed", "{t}");
    let error = t["error"].as_str().unwrap();
    assert!(
        error.contains("ValueError") && error.contains("the sales data is missing"),
        "{error}"
    );
    assert!(t.get("prepare_seconds").is_none(), "{t}");
    let resp = server.post("/v1/sandboxes", &json!({"template": "raises"}));
    resp.expect_error(409, "template_not_ready");
    assert!(
        resp.message().contains("raises") && resp.message().contains("ValueError"),
        "{}",
        resp.text
    );

    // A setup that leaves a thread running: failed, saying why.
    let t = wait_built(&server, "threads", BUILD_TIMEOUT);
    assert_eq!(t["status"], "failed", "{t}");
    let error = t["error"].as_str().unwrap();
    assert!(error.contains("thread"), "{error}");
    assert!(error.contains("single-threaded"), "{error}");
    server
        .post("/v1/sandboxes", &json!({"template": "threads"}))
        .expect_error(409, "template_not_ready");

    // The default template is untouched.
    let id = server.create_sandbox();
    assert_eq!(value(&server.execute(&id, "1 + 1")), "2");
    let list = server.get("/v1/templates").expect(200).clone();
    assert_schema("TemplateList", &list);
    let status = |name: &str| {
        list["templates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["status"].clone())
    };
    assert_eq!(status("default"), Some(json!("ready")));
    assert_eq!(status("raises"), Some(json!("failed")));
    assert_eq!(status("threads"), Some(json!("failed")));

    // Replacing a failed template with a good spec makes it ready.
    create_template(&server, &json!({"name": "raises", "setup": "x = 41\n"}));
    let t = wait_built(&server, "raises", BUILD_TIMEOUT);
    assert_eq!(t["status"], "ready", "{t}");
    let sb = server.create_sandbox_with(&json!({"template": "raises"}));
    assert_eq!(sb["template_version"], t["version"]);
    assert_eq!(
        value(&server.execute(sb["id"].as_str().unwrap(), "x + 1")),
        "42"
    );
}

/// Templates POSTed back to back (each one's background registration overlapping the next
/// one's request) are all accepted and all build.
#[test]
fn templates_created_together_all_build() {
    let server = TestServer::start();
    let names = ["t1", "t2", "t3"];
    let responses: Vec<_> = names
        .iter()
        .map(|name| {
            server.post(
                "/v1/templates",
                &json!({"name": name, "setup": format!("who = {name:?}\n")}),
            )
        })
        .collect();
    for (name, resp) in names.iter().zip(&responses) {
        assert_eq!(
            resp.status,
            202,
            "POST template {name}: {}\nserver stderr:\n{}",
            resp.text,
            server.stderr()
        );
    }
    for name in names {
        let t = wait_built(&server, name, BUILD_TIMEOUT);
        assert_eq!(t["status"], "ready", "{t}");
        let sb = server.create_sandbox_with(&json!({"template": name}));
        let r = server.execute(sb["id"].as_str().unwrap(), "who");
        assert_eq!(value(&r), format!("'{name}'"));
    }
}

#[test]
fn a_package_that_does_not_exist_fails_the_template() {
    let server = TestServer::start();
    let package = "sandlot-no-such-package-xyz";
    create_template(
        &server,
        &json!({"name": "nopkg", "packages": [format!("{package}==1.0")]}),
    );
    // While it builds, sandboxes from it are refused.
    let resp = server.post("/v1/sandboxes", &json!({"template": "nopkg"}));
    if resp.status != 201 {
        resp.expect_error(409, "template_not_ready");
    }
    let t = wait_built(&server, "nopkg", PIP_FAILURE_TIMEOUT);
    assert_eq!(t["status"], "failed", "{t}");
    let error = t["error"].as_str().unwrap();
    assert!(error.contains(package), "{error}");
    server
        .post("/v1/sandboxes", &json!({"template": "nopkg"}))
        .expect_error(409, "template_not_ready");
    // Nothing else is affected.
    let id = server.create_sandbox();
    assert_eq!(value(&server.execute(&id, "6 * 7")), "42");
}

#[test]
fn invalid_specs_and_unknown_names() {
    let server = TestServer::start();
    // The default template is there and ready.
    let list = server.get("/v1/templates").expect(200).clone();
    assert_schema("TemplateList", &list);
    let templates = list["templates"].as_array().unwrap();
    assert_eq!(templates.len(), 1, "{list}");
    assert_eq!(templates[0]["name"], "default");
    assert_eq!(templates[0]["status"], "ready");
    let default = server.get("/v1/templates/default").expect(200).clone();
    assert_schema("Template", &default);
    assert_eq!(default, templates[0]);
    let sb = server.create_sandbox_with(&json!({}));
    assert_eq!(sb["template_version"], default["version"]);

    for (spec, code, says) in [
        (json!({"name": "Bad Name"}), "invalid_argument", "Bad Name"),
        (json!({"name": "../etc"}), "invalid_argument", "../etc"),
        (json!({"name": ""}), "invalid_argument", "name"),
        (json!({"name": "x".repeat(64)}), "invalid_argument", "1-63"),
        (
            json!({"name": "unpinned", "packages": ["requests"]}),
            "invalid_argument",
            "name==version",
        ),
        (
            json!({"name": "ranged", "packages": ["requests>=2"]}),
            "invalid_argument",
            "requests>=2",
        ),
        (
            json!({"name": "opt", "packages": ["--index-url==x"]}),
            "invalid_argument",
            "--index-url",
        ),
        (
            json!({"name": "imp", "imports": ["os; import sys"]}),
            "invalid_argument",
            "import",
        ),
        (
            json!({"name": "big", "limits": {"memory_mb": 1_000_000_000u64}}),
            "invalid_argument",
            "memory_mb",
        ),
        (json!({"name": "default"}), "invalid_argument", "default"),
        (
            json!({"name": "typo", "pakages": []}),
            "invalid_request",
            "unknown field `pakages`",
        ),
        (
            json!({"name": "typo", "limits": {"memory": 1}}),
            "invalid_request",
            "unknown field `memory`",
        ),
        (
            json!({"packages": []}),
            "invalid_request",
            "missing field `name`",
        ),
        (
            json!({"name": "t", "setup": 5}),
            "invalid_request",
            "invalid type",
        ),
    ] {
        let resp = server.post("/v1/templates", &spec);
        resp.expect_error(400, code);
        assert!(resp.message().contains(says), "{spec}: {}", resp.text);
    }
    server
        .post_raw("/v1/templates", "application/json", "{\"name\": ")
        .expect_error(400, "invalid_request");

    // None of them was registered.
    let list = server.get("/v1/templates").expect(200).clone();
    assert_eq!(list["templates"].as_array().unwrap().len(), 1, "{list}");

    // Unknown names.
    server
        .get("/v1/templates/nope")
        .expect_error(404, "template_not_found");
    server
        .post("/v1/sandboxes", &json!({"template": "nope"}))
        .expect_error(404, "template_not_found");
    // The built-in template is nobody's to delete; a name never built is not found.
    server
        .delete("/v1/templates/default")
        .expect_error(400, "invalid_argument");
    server
        .delete("/v1/templates/nope")
        .expect_error(404, "template_not_found");
}

// ---------------------------------------------------------------------------------------------
// `sandlot template`.

fn sandlot(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandlot"));
    cmd.args(args)
        .env_remove("SANDLOT_URL")
        .stdin(Stdio::null());
    cmd
}

fn output(cmd: &mut Command) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("run sandlot");
    (
        status.code().expect("sandlot killed by a signal"),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// `key: value` lines of `template build`'s output.
fn field<'a>(out: &'a str, key: &str) -> Option<&'a str> {
    out.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(": "))
}

#[test]
fn template_build_command_end_to_end() {
    let server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sales.toml");
    std::fs::write(
        &file,
        r#"
name = "sales"
description = "pandas with the sales data loaded"
imports = ["numpy", "pandas"]
setup = """
import pandas as pd
sales = pd.DataFrame({"region": ["n", "s"], "amount": [10, 20]})
"""
[limits]
memory_mb = 2048
"#,
    )
    .unwrap();
    let build = |path: &std::path::Path| {
        output(
            sandlot(&["template", "build"])
                .env("SANDLOT_API_KEY", server.key())
                .arg(path)
                .args(["--url", server.url(), "--timeout", "300"]),
        )
    };

    let (code, out, err) = build(&file);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(field(&out, "name"), Some("sales"), "{out}");
    let t = server.get("/v1/templates/sales").expect(200).clone();
    assert_eq!(t["status"], "ready");
    assert_eq!(field(&out, "version"), t["version"].as_str(), "{out}");
    let prepare: f64 = field(&out, "prepare_seconds").unwrap().parse().unwrap();
    assert!(prepare > 0.0, "{out}");
    assert_eq!(t["spec"]["limits"], json!({"memory_mb": 2048}));
    let sb = server.create_sandbox_with(&json!({"template": "sales"}));
    assert_eq!(sb["limits"]["memory_mb"], 2048);
    assert_eq!(
        value(&server.execute(sb["id"].as_str().unwrap(), "int(sales.amount.sum())")),
        "30"
    );

    // A setup that raises: exit 1 with the server's error, traceback included.
    let broken = dir.path().join("broken.toml");
    std::fs::write(
        &broken,
        "name = \"broken\"\nsetup = \"\"\"\ndef load():\n    raise KeyError('region')\nload()\n\"\"\"\n",
    )
    .unwrap();
    let (code, out, err) = build(&broken);
    assert_eq!(code, 1, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("template broken failed"), "{err}");
    assert!(err.contains("KeyError") && err.contains("region"), "{err}");
    assert!(err.contains("Traceback"), "{err}");

    // `template list` shows both.
    let (code, out, err) = output(
        sandlot(&["template", "list", "--url", server.url()]).env("SANDLOT_API_KEY", server.key()),
    );
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("NAME"), "{out}");
    for (name, status) in [
        ("default", "ready"),
        ("sales", "ready"),
        ("broken", "failed"),
    ] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(name) && l.contains(status)),
            "{out}"
        );
    }
    let (code, out, err) = output(
        sandlot(&["template", "list", "--json", "--url", server.url()])
            .env("SANDLOT_API_KEY", server.key()),
    );
    assert_eq!(code, 0, "{err}");
    let list: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 3, "{out}");

    // The server's URL from the environment.
    let (code, out, err) = output(
        sandlot(&["template", "list"])
            .env("SANDLOT_URL", server.url())
            .env("SANDLOT_API_KEY", server.key()),
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("sales"), "{out}");

    // Errors in the file are caught before anything is sent.
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "name = \"bad\"\nimport = [\"numpy\"]\n").unwrap();
    let (code, _, err) = build(&bad);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("unknown field `import`") && err.contains("line 2"),
        "{err}"
    );
    std::fs::write(&bad, "name = \"bad\"\nimports = [\"numpy\"\n").unwrap();
    let (code, _, err) = build(&bad);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("line 2"), "{err}");
    std::fs::write(&bad, "name = \"bad\"\nrequirements = \"req.txt\"\n").unwrap();
    std::fs::write(
        dir.path().join("req.txt"),
        "# pins\ntabulate==0.9.0\npandas\n",
    )
    .unwrap();
    let (code, _, err) = build(&bad);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("req.txt:3") && err.contains("pandas"), "{err}");
    let (code, _, err) = build(&dir.path().join("missing.toml"));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("missing.toml"), "{err}");
    // The server's own refusal.
    std::fs::write(&bad, "name = \"Bad\"\n").unwrap();
    let (code, _, err) = build(&bad);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("invalid_argument"), "{err}");
    let templates = server.get("/v1/templates").expect(200).clone();
    assert_eq!(templates["templates"].as_array().unwrap().len(), 3);

    // `template delete`: refused while a sandbox uses it (the server's code in the message),
    // done once none does; names that are not names are refused before anything is sent.
    let delete = |args: &[&str]| {
        output(
            sandlot(&["template", "delete"])
                .args(args)
                .args(["--url", server.url()])
                .env("SANDLOT_API_KEY", server.key()),
        )
    };
    let (code, _, err) = delete(&["sales"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("template_in_use"), "{err}");
    let (code, _, err) = delete(&["broken"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = delete(&["broken"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("template_not_found"), "{err}");
    for bad in [&["../x"][..], &["a/b"], &["sales", "--tenant", "a/b"]] {
        let (code, _, err) = delete(bad);
        assert_eq!(code, 1, "{bad:?}: {err}");
        assert!(err.contains("[a-z0-9_-]"), "{bad:?}: {err}");
    }
    server
        .delete(&format!("/v1/sandboxes/{}", sb["id"].as_str().unwrap()))
        .expect(204);
    let (code, _, err) = delete(&["sales", "--tenant", "default"]);
    assert_eq!(code, 0, "{err}");
    server
        .get("/v1/templates/sales")
        .expect_error(404, "template_not_found");
}

#[test]
fn env_command_prints_only_the_path() {
    let env_dir = common::env_dir();
    std::fs::create_dir_all(&env_dir).unwrap();
    let (code, out, err) = output(sandlot(&["env", "--print-python", "--env-dir"]).arg(&env_dir));
    assert_eq!(code, 0, "{err}");
    let python = out.strip_suffix('\n').unwrap();
    assert!(!python.contains('\n'), "{out}");
    assert!(python.ends_with("/bin/python"), "{out}");
    let run = Command::new(python)
        .args(["-c", "import numpy, pandas, IPython; print('ok')"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&run.stdout), "ok\n");

    let (code, out, err) = output(sandlot(&["env", "--env-dir"]).arg(&env_dir));
    assert_eq!(code, 0, "{err}");
    let root = out.trim_end();
    assert_eq!(format!("{root}/bin/python"), python);
    let (code, _, err) = output(sandlot(&["env", "--extras", "nope", "--env-dir"]).arg(&env_dir));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("nope"), "{err}");
}
