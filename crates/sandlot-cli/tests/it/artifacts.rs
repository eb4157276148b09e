//! Artifacts end to end: the files an execution creates or changes come back in its result and
//! stay downloadable by content hash, after the sandbox is gone too.

use crate::common;

use common::{assert_schema, TestServer};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::time::{Duration, Instant};

#[track_caller]
fn assert_ok(result: &Value) {
    assert_eq!(result["end_state"], "ok", "{result:#}");
}

fn artifacts(result: &Value) -> Vec<Value> {
    result["artifacts"]
        .as_array()
        .unwrap_or_else(|| panic!("no artifacts: {result:#}"))
        .clone()
}

fn by_path<'a>(list: &'a [Value], path: &str) -> &'a Value {
    list.iter()
        .find(|a| a["path"] == path)
        .unwrap_or_else(|| panic!("no artifact {path}: {list:#?}"))
}

/// Downloads an artifact and checks its hash, size and type against what the result said.
#[track_caller]
fn download(server: &TestServer, a: &Value) -> Vec<u8> {
    let url = a["url"].as_str().unwrap();
    assert_eq!(
        url,
        format!("/v1/artifacts/{}", a["sha256"].as_str().unwrap())
    );
    let (status, headers, bytes) = server.get_bytes(url);
    assert_eq!(status, 200, "{a}");
    assert_eq!(
        hex::encode(Sha256::digest(&bytes)),
        a["sha256"].as_str().unwrap()
    );
    assert_eq!(bytes.len() as u64, a["size"].as_u64().unwrap());
    assert_eq!(headers["content-type"], a["mime_type"].as_str().unwrap());
    assert_eq!(headers["content-length"], bytes.len().to_string().as_str());
    bytes
}

#[test]
fn created_and_modified_files_are_artifacts_that_outlive_the_sandbox() {
    let server = TestServer::start();
    let id = server.create_sandbox();

    let r = server.execute(
        &id,
        "import os\n\
         import matplotlib\n\
         matplotlib.use('Agg')\n\
         import matplotlib.pyplot as plt\n\
         os.makedirs('out', exist_ok=True)\n\
         with open('out/report.csv', 'w') as f:\n    f.write('a,b\\n1,2\\n')\n\
         fig = plt.figure()\n\
         plt.plot([1, 2, 3])\n\
         fig.savefig('plot.png')\n\
         plt.close(fig)",
    );
    assert_ok(&r);
    assert_schema("ExecutionResult", &r);
    let list = artifacts(&r);
    assert_eq!(list.len(), 2, "{list:#?}");
    let csv = by_path(&list, "out/report.csv");
    assert_eq!(csv["change"], "created");
    assert_eq!(csv["size"], 8);
    assert_eq!(csv["mime_type"], "text/csv");
    assert_eq!(download(&server, csv), b"a,b\n1,2\n");
    let png = by_path(&list, "plot.png");
    assert_eq!(png["change"], "created");
    assert_eq!(png["mime_type"], "image/png");
    let png_bytes = download(&server, png);
    assert!(png_bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
    assert!(png_bytes.len() > 1000);

    // Modified in place.
    let r = server.execute(&id, "open('out/report.csv', 'a').write('3,4\\n')");
    assert_ok(&r);
    let list = artifacts(&r);
    assert_eq!(list.len(), 1, "{list:#?}");
    assert_eq!(list[0]["path"], "out/report.csv");
    assert_eq!(list[0]["change"], "modified");
    assert_eq!(download(&server, &list[0]), b"a,b\n1,2\n3,4\n");

    // Nothing written: nothing reported.
    let r = server.execute(&id, "x = open('out/report.csv').read()");
    assert_ok(&r);
    assert!(artifacts(&r).is_empty(), "{r:#}");

    // Bash cells too; identical content is stored once, under the same hash.
    let r = server.execute_bash(
        &id,
        "printf 'a,b\\n1,2\\n' > copy.csv && echo hi > notes.txt",
    );
    assert_ok(&r);
    let list = artifacts(&r);
    assert_eq!(list.len(), 2, "{list:#?}");
    assert_eq!(by_path(&list, "copy.csv")["sha256"], csv["sha256"]);
    let notes = by_path(&list, "notes.txt").clone();
    assert_eq!(notes["mime_type"], "text/plain");
    assert_eq!(notes["change"], "created");

    // The recorded execution carries its artifacts.
    let history = server.get(&format!("/v1/sandboxes/{id}/executions"));
    let last = history.expect(200)["executions"]
        .as_array()
        .unwrap()
        .last()
        .cloned()
        .unwrap();
    assert_eq!(
        last["result"]["artifacts"].as_array().unwrap().len(),
        2,
        "{last:#}"
    );

    // The sandbox goes; its artifacts stay.
    server.delete(&format!("/v1/sandboxes/{id}")).expect(204);
    assert_eq!(download(&server, csv), b"a,b\n1,2\n");
    assert_eq!(download(&server, &notes), b"hi\n");
    assert_eq!(download(&server, png), png_bytes);
}

#[test]
fn symlinks_fifos_and_lies_never_reach_the_store() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let started = Instant::now();
    let r = server.execute(
        &id,
        "import os\n\
         os.symlink('/etc/passwd', 'passwd')\n\
         os.mkfifo('fifo')\n\
         os.makedirs('d')\n\
         open('real.txt', 'w').write('real')",
    );
    assert_ok(&r);
    let list = artifacts(&r);
    assert_eq!(list.len(), 1, "{list:#?}");
    assert_eq!(list[0]["path"], "real.txt");

    // User code runs in the driver's process, so it can make the driver name anything. The
    // server still opens each name inside the workspace only, as a regular file only.
    let r = server.execute(
        &id,
        "import sys\n\
         d = sys.modules['sandlot_runtime.serve']\n\
         names = ['passwd', 'fifo', 'd', '/etc/passwd', '../../../../etc/passwd',\n\
                  '/proc/self/root/etc/passwd', 'missing', 'real.txt']\n\
         d.changes_between = lambda before, after: {'changes': [\n\
             {'path': n, 'size': 1, 'change': 'created'} for n in names]}",
    );
    assert_ok(&r);
    let list = artifacts(&r);
    assert_eq!(list.len(), 1, "{list:#?}");
    assert_eq!(list[0]["path"], "real.txt");
    assert_eq!(download(&server, &list[0]), b"real");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the FIFO held things up"
    );
    // The sandbox still works.
    let r = server.execute(&id, "1 + 1");
    assert_ok(&r);
    assert_eq!(r["result"]["text/plain"], "2");

    // Whatever the store holds is content the sandbox wrote, never a host file.
    let passwd = std::fs::read("/etc/passwd").unwrap();
    let host_sha = hex::encode(Sha256::digest(&passwd));
    let (status, _, _) = server.get_bytes(&format!("/v1/artifacts/{host_sha}"));
    assert_eq!(status, 404);
    for ent in std::fs::read_dir(server.data_dir().join("artifacts")).unwrap() {
        let bytes = std::fs::read(ent.unwrap().path()).unwrap();
        assert_ne!(bytes, passwd);
    }
}

#[test]
fn bad_and_unknown_hashes() {
    let server = TestServer::start();
    server
        .get("/v1/artifacts/not-a-hash")
        .expect_error(400, "invalid_argument");
    server
        .get(&format!("/v1/artifacts/{}", "A".repeat(64)))
        .expect_error(400, "invalid_argument");
    server
        .get("/v1/artifacts/..%2F..%2Fetc%2Fpasswd")
        .expect_error(400, "invalid_argument");
    server
        .get(&format!("/v1/artifacts/{}", "0".repeat(64)))
        .expect_error(404, "file_not_found");
}
