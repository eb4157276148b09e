//! Divergence against a real server: `GET /v1/sandboxes/{a}/diff/{b}` between a fork's parent
//! and children and between siblings (variables changed, added and removed; files edited in
//! place at the same size, added and deleted), across a snapshot and a pause; a symlink that
//! points outside the workspace is an entry, never followed; what cannot be digested is listed
//! apart; sandboxes of two families are refused and unknown ids are not found.

use crate::common;

use common::TestServer;
use serde_json::{json, Value};
use std::collections::BTreeMap;

fn ok(r: &Value) {
    assert_eq!(r["end_state"], "ok", "{r:#}");
}

fn diff(server: &TestServer, a: &str, b: &str) -> Value {
    let d = server
        .get(&format!("/v1/sandboxes/{a}/diff/{b}"))
        .expect(200)
        .clone();
    common::assert_schema("SandboxDiff", &d);
    assert_eq!((d["a"].as_str(), d["b"].as_str()), (Some(a), Some(b)));
    d
}

/// `name` → `change` of the default context's variables.
fn variables(d: &Value) -> BTreeMap<String, String> {
    d["variables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            assert_eq!(v["context"], "default", "{v:#}");
            (
                v["name"].as_str().unwrap().to_string(),
                v["change"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// `path` → `change` of the files.
fn files(d: &Value) -> BTreeMap<String, String> {
    d["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                f["change"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn entry<'a>(d: &'a Value, list: &str, key: &str, name: &str) -> &'a Value {
    d[list]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v[key] == name)
        .unwrap_or_else(|| panic!("no {name} in {list}: {d:#}"))
}

fn fork2(server: &TestServer, id: &str) -> (String, String) {
    let out = server
        .post(&format!("/v1/sandboxes/{id}/fork"), &json!({ "count": 2 }))
        .expect(201)
        .clone();
    let ids: Vec<String> = out["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    (ids[0].clone(), ids[1].clone())
}

const PARENT: &str = "\
import threading
import numpy as np, pandas as pd
x = 1
keep = 'kept'
df = pd.DataFrame({'a': np.arange(1000), 'b': ['s'] * 1000})
def f(v):
    return v + x
class Point:
    def __init__(self, a):
        self.a = a
p = Point(3)
lock = threading.Lock()
import os
os.makedirs('/workspace/data', exist_ok=True)
open('/workspace/notes.txt', 'w').write('from the parent')
open('/workspace/data/big.bin', 'wb').write(os.urandom(1 << 20))
open('/workspace/same.txt', 'w').write('same everywhere')
";

#[test]
fn forks_diverge_in_variables_and_files_and_nothing_else() {
    let server = TestServer::start();
    let parent = server.create_sandbox();
    ok(&server.execute(&parent, PARENT));
    let (c1, c2) = fork2(&server, &parent);

    // Fresh children hold what the parent holds: nothing differs, though their objects were
    // loaded from a pickle and share their parts differently.
    let d = diff(&server, &parent, &c1);
    assert_eq!(d["variables"], json!([]), "{d:#}");
    assert_eq!(d["files"], json!([]), "{d:#}");
    assert_eq!(d["truncated"], false);
    // The lock could not be digested (nor carried): listed apart, not as removed.
    let nc = entry(&d, "not_compared", "name", "lock");
    assert_eq!(nc["sandbox"], parent.as_str());
    assert_eq!(
        (nc["kind"].as_str(), nc["context"].as_str()),
        (Some("variable"), Some("default"))
    );
    assert!(nc["reason"].as_str().unwrap().contains("lock"), "{nc:#}");

    // c1: a variable and a DataFrame changed, a file edited in place at the same size.
    ok(&server.execute(
        &c1,
        "x = 2\ndf.loc[0, 'a'] = -1\nopen('/workspace/notes.txt', 'w').write('FROM the parent')",
    ));
    // c2: a variable added and one deleted, a file added and one deleted, a symlink out.
    ok(&server.execute(
        &c2,
        "added = [1, 2, 3]\ndel keep\nimport os\nopen('/workspace/new.txt', 'w').write('new!')\n\
         os.remove('/workspace/data/big.bin')\nos.symlink('/etc', '/workspace/out')",
    ));

    let d = diff(&server, &parent, &c1);
    assert_eq!(
        variables(&d),
        BTreeMap::from([
            ("df".into(), "changed".into()),
            ("x".into(), "changed".into())
        ])
    );
    let x = entry(&d, "variables", "name", "x");
    assert_eq!(x["a"]["type"], "int");
    assert_eq!(x["b"]["type"], "int");
    let df = entry(&d, "variables", "name", "df");
    assert_eq!(df["a"]["type"], "DataFrame");
    assert!(df["a"]["size"].as_u64().unwrap() > 8000, "{df:#}");
    assert_eq!(
        files(&d),
        BTreeMap::from([("notes.txt".into(), "changed".into())])
    );
    let notes = entry(&d, "files", "path", "notes.txt");
    assert_eq!(
        (notes["a_size"].as_u64(), notes["b_size"].as_u64()),
        (Some(15), Some(15))
    );
    assert_eq!(
        (notes["a_kind"].as_str(), notes["b_kind"].as_str()),
        (Some("file"), Some("file"))
    );

    // Sibling against sibling: a is c1, b is c2.
    let d = diff(&server, &c1, &c2);
    assert_eq!(
        variables(&d),
        BTreeMap::from([
            ("added".into(), "added".into()),
            ("df".into(), "changed".into()),
            ("keep".into(), "removed".into()),
            ("x".into(), "changed".into()),
        ])
    );
    let added = entry(&d, "variables", "name", "added");
    assert!(added["a"].is_null());
    assert_eq!(added["b"]["type"], "list");
    let keep = entry(&d, "variables", "name", "keep");
    assert_eq!(keep["a"]["type"], "str");
    assert!(keep["b"].is_null());
    assert_eq!(
        files(&d),
        BTreeMap::from([
            ("data/big.bin".into(), "removed".into()),
            ("new.txt".into(), "added".into()),
            ("notes.txt".into(), "changed".into()),
            ("out".into(), "added".into()),
        ])
    );
    let big = entry(&d, "files", "path", "data/big.bin");
    assert_eq!(
        (big["a_size"].as_u64(), big["b_size"].as_u64()),
        (Some(1 << 20), None)
    );
    // The symlink is an entry of its own, its target never followed (nothing of /etc).
    let out = entry(&d, "files", "path", "out");
    assert_eq!(
        (out["a_kind"].as_str(), out["b_kind"].as_str()),
        (None, Some("symlink"))
    );
    assert_eq!(out["b_size"], 4);
    assert!(
        d["files"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| !f["path"].as_str().unwrap().starts_with("out/")),
        "{d:#}"
    );

    // The other direction swaps added and removed.
    let back = diff(&server, &c2, &c1);
    assert_eq!(files(&back)["new.txt"], "removed");
    assert_eq!(variables(&back)["keep"], "added");

    // The diff changed nothing in either sandbox.
    let r = server.execute(&c2, "(added, 'keep' in globals(), x)");
    assert_eq!(r["result"]["text/plain"], "([1, 2, 3], False, 1)");
}

#[test]
fn snapshots_pauses_other_families_and_unknown_ids() {
    let server = TestServer::start();
    let parent = server.create_sandbox();
    ok(&server.execute(&parent, "x = 1\nopen('/workspace/f.txt', 'w').write('f')"));
    let snap = server
        .post(&format!("/v1/sandboxes/{parent}/snapshots"), &json!({}))
        .expect(201)["id"]
        .as_str()
        .unwrap()
        .to_string();
    let from_snap = server.create_sandbox_with(&json!({ "from_snapshot": snap }))["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (child, _) = fork2(&server, &parent);
    ok(&server.execute(&child, "x = 5"));

    // A sandbox from a snapshot is of its sandbox's family, and a paused one is resumed.
    let paused = server
        .post(&format!("/v1/sandboxes/{child}/pause"), &json!({}))
        .expect(200)
        .clone();
    assert_eq!(paused["state"], "paused");
    let d = diff(&server, &from_snap, &child);
    assert_eq!(
        variables(&d),
        BTreeMap::from([("x".into(), "changed".into())])
    );
    assert_eq!(d["files"], json!([]));
    let s = server
        .get(&format!("/v1/sandboxes/{child}"))
        .expect(200)
        .clone();
    assert_eq!(s["state"], "running");

    // A sandbox against itself: nothing differs.
    let d = diff(&server, &parent, &parent);
    assert_eq!(
        (d["variables"].clone(), d["files"].clone()),
        (json!([]), json!([]))
    );

    // Another family, and ids never seen.
    let stranger = server.create_sandbox();
    let r = server.get(&format!("/v1/sandboxes/{parent}/diff/{stranger}"));
    r.expect_error(400, "invalid_argument");
    assert!(r.message().contains("not of one family"), "{}", r.text);
    server
        .get(&format!("/v1/sandboxes/sb_nope/diff/{parent}"))
        .expect_error(404, "sandbox_not_found");
    server
        .get(&format!("/v1/sandboxes/{parent}/diff/sb_nope"))
        .expect_error(404, "sandbox_not_found");
}
