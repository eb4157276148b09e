//! Lineage, run bundles and replay against the real server: `sandlot bundle`, `sandlot replay`
//! (a bundle file and a live sandbox id), the lineage routes for live and ended sandboxes,
//! tenant scoping, OpenLineage export (to a file and to an HTTP endpoint on loopback) checked
//! against the published OpenLineage JSON schema shipped in `tests/it/fixtures/openlineage/`, and
//! hostile bundles.

use crate::common;

use common::TestServer;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

fn sha256(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// Runs the `sandlot` binary against `server` (its URL and admin key in the environment).
fn sandlot(server: Option<&TestServer>, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandlot"));
    cmd.args(args)
        .env_remove("SANDLOT_URL")
        .env_remove("SANDLOT_API_KEY");
    if let Some(s) = server {
        cmd.env("SANDLOT_URL", s.url())
            .env("SANDLOT_API_KEY", s.key());
    } else {
        // Nothing listens there: commands that need no server must not try one.
        cmd.env("SANDLOT_URL", "http://127.0.0.1:9");
    }
    cmd.output().expect("run sandlot")
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn replay_json(server: &TestServer, source: &str, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["replay", source, "--json"];
    args.extend_from_slice(extra);
    let o = sandlot(Some(server), &args);
    let report: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("replay did not print JSON ({e}): {}", text(&o)));
    (o.status.code().unwrap_or(-1), report)
}

fn verdicts(report: &Value) -> Vec<(String, String)> {
    report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["kind"].as_str().unwrap().to_owned(),
                s["verdict"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

const CSV: &str = "x,y\n1,2.5\n2,3.1\n3,4.7\n4,4.0\n5,6.2\n";

/// The acceptance run: a CSV loaded, `random` and numpy seeded, a plot; then the clock.
const STEPS: &[(&str, &str)] = &[
    (
        "python",
        "import pandas as pd\ndf = pd.read_csv('data.csv')\nprint(df.describe())\ndf['y'].sum()",
    ),
    (
        "python",
        "import random\nrandom.seed(42)\nprint([random.random() for _ in range(3)])\nrandom.randint(0, 10**9)",
    ),
    (
        "python",
        "import numpy as np\nnp.random.seed(7)\nnoise = np.random.randn(5)\nrng = np.random.default_rng(3)\nprint(noise.round(6), rng.normal(size=3).round(6))\nfloat((df['y'] + noise).mean())",
    ),
    (
        "python",
        "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot(df['x'], df['y'] + noise)\nfig.savefig('plot.png')\nax.lines[:]",
    ),
    ("bash", "wc -l data.csv && sha256sum plot.png | cut -c1-16"),
];
const CLOCK: &str = "import time, datetime\nprint(time.time())\nprint(datetime.datetime.now())";

#[test]
fn a_seeded_data_run_replays_identical_or_equivalent_and_the_clock_diverges() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    server
        .put_bytes(&format!("/v1/sandboxes/{id}/files/data.csv"), CSV)
        .expect(201);
    for (language, code) in STEPS {
        let r = server
            .execute_with(&id, &json!({"code": code, "language": language}))
            .expect(200)
            .clone();
        assert_eq!(r["end_state"], "ok", "{code}: {r:#}");
    }
    let clock = server.execute(&id, CLOCK);
    assert_eq!(clock["end_state"], "ok");

    // The bundle: a file through the CLI.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.bundle.tar.gz");
    let o = sandlot(
        Some(&server),
        &["bundle", &id, "-o", file.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", text(&o));
    let (manifest, files) = unpack(&std::fs::read(&file).unwrap());
    assert_eq!(manifest["bundle_version"], 1);
    assert_eq!(manifest["template"]["name"], "default");
    assert!(manifest["template"]["version"].as_str().unwrap().len() >= 8);
    assert!(manifest["sandlot_version"].is_string());
    assert_eq!(
        manifest["steps"].as_array().unwrap().len(),
        1 + STEPS.len() + 1
    );
    assert_eq!(manifest["steps"][0]["kind"], "input");
    assert_eq!(
        files[&format!("inputs/{}", sha256(CSV.as_bytes()))],
        CSV.as_bytes()
    );
    let step2: Value = serde_json::from_slice(&files["steps/000002.json"]).unwrap();
    assert_eq!(step2["code"], STEPS[0].1);
    assert!(step2["result"]["stdout"].as_str().unwrap().contains("mean"));
    assert!(step2["policy_version"].is_string(), "{step2:#}");

    let expect = |report: &Value| {
        let v = verdicts(report);
        assert_eq!(v.len(), 1 + STEPS.len() + 1, "{report:#}");
        assert_eq!(v[0], ("input".to_owned(), "identical".to_owned()));
        for (kind, verdict) in &v[1..=STEPS.len()] {
            assert_eq!(kind, "execution");
            assert!(
                verdict == "identical" || verdict == "equivalent",
                "{report:#}"
            );
        }
        // The clock is honest: diverged, with the diff.
        let last = report["steps"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["verdict"], "diverged", "{report:#}");
        let diff = last["diff"].as_str().unwrap();
        assert!(
            diff.contains("--- recorded") && diff.contains("+++ replayed"),
            "{diff}"
        );
    };
    let (code, from_file) = replay_json(&server, file.to_str().unwrap(), &[]);
    assert_eq!(code, 1, "a diverged step fails the replay: {from_file:#}");
    expect(&from_file);
    // The plot's step needed the addresses normaliser (Line2D's repr) or nothing else.
    let plot = &from_file["steps"][4];
    assert!(
        plot["verdict"] == "identical" || plot["normalisers_applied"] == json!(["addresses"]),
        "{plot:#}"
    );
    assert!(from_file["controls"]["PYTHONHASHSEED"]
        .as_str()
        .unwrap()
        .contains("NOT for the sandbox's own interpreter"));
    // The replay's sandbox is gone afterwards.
    let replayed = from_file["replay_sandbox"].as_str().unwrap();
    server
        .get(&format!("/v1/sandboxes/{replayed}"))
        .expect_error(410, "sandbox_gone");

    // A live sandbox id, fetched by the CLI.
    let (code, live) = replay_json(&server, &id, &[]);
    assert_eq!(code, 1);
    expect(&live);

    // Declared normalisers make the clock equivalent; the replay then passes.
    let (code, normalised) = replay_json(
        &server,
        file.to_str().unwrap(),
        &["--normalise", "addresses,cells,timestamps"],
    );
    assert_eq!(code, 0, "{normalised:#}");
    let last = normalised["steps"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["verdict"], "equivalent");
    assert_eq!(last["normalisers_applied"], json!(["timestamps"]));

    // Human output names each verdict.
    let o = sandlot(Some(&server), &["replay", file.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("diverged") && out.contains("identical"),
        "{}",
        text(&o)
    );

    // Another template version: every step not replayable, nothing created.
    let before = server.get("/v1/sandboxes").expect(200)["sandboxes"]
        .as_array()
        .unwrap()
        .len();
    let other = dir.path().join("other-version.tar.gz");
    rewrite_manifest(&file, &other, |m| {
        m["template"]["version"] = json!("0000000000000000")
    });
    let (code, refused) = replay_json(&server, other.to_str().unwrap(), &[]);
    assert_eq!(code, 1);
    assert!(verdicts(&refused)
        .iter()
        .all(|(_, v)| v == "not_replayable"));
    assert!(refused["error"]
        .as_str()
        .unwrap()
        .contains("0000000000000000"));
    assert!(refused["replay_sandbox"].is_null());
    let after = server.get("/v1/sandboxes").expect(200)["sandboxes"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(before, after);

    // An ended sandbox keeps its bundle and lineage.
    server.delete(&format!("/v1/sandboxes/{id}")).expect(204);
    let (status, _, body) = server.get_bytes(&format!("/v1/sandboxes/{id}/bundle"));
    assert_eq!(status, 200);
    let (m2, _) = unpack(&body);
    assert_eq!(m2["sandbox"]["state"], "deleted");
    let l = server
        .get(&format!("/v1/lineage/sandbox/{id}"))
        .expect(200)
        .clone();
    assert_eq!(l["sandbox"]["state"], "deleted");
    assert_eq!(l["steps"].as_array().unwrap().len(), 1 + STEPS.len() + 1);
}

/// The bundle's manifest and every file in it.
fn unpack(gz: &[u8]) -> (Value, std::collections::HashMap<String, Vec<u8>>) {
    let mut a = tar::Archive::new(flate2::read::GzDecoder::new(gz));
    let mut files = std::collections::HashMap::new();
    for e in a.entries().unwrap() {
        let mut e = e.unwrap();
        let name = String::from_utf8(e.path_bytes().into_owned()).unwrap();
        let mut buf = Vec::new();
        e.read_to_end(&mut buf).unwrap();
        files.insert(name, buf);
    }
    let m = serde_json::from_slice(&files["manifest.json"]).unwrap();
    (m, files)
}

/// Writes `to`: `from` with its manifest changed by `f`.
fn rewrite_manifest(from: &Path, to: &Path, f: impl FnOnce(&mut Value)) {
    let (mut m, files) = unpack(&std::fs::read(from).unwrap());
    f(&mut m);
    let mut entries: Vec<(String, Vec<u8>)> = files
        .into_iter()
        .filter(|(k, _)| k != "manifest.json")
        .collect();
    entries.sort();
    entries.insert(0, ("manifest.json".into(), serde_json::to_vec(&m).unwrap()));
    std::fs::write(to, tar_gz(&entries)).unwrap();
}

/// A tar.gz with these raw entry names (hostile ones included as they are).
fn tar_gz(entries: &[(String, Vec<u8>)]) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut t = tar::Builder::new(gz);
    for (name, data) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        let raw = name.as_bytes();
        h.as_old_mut().name[..raw.len()].copy_from_slice(raw);
        h.set_cksum();
        t.append(&h, &data[..]).unwrap();
    }
    t.into_inner().unwrap().finish().unwrap()
}

fn good_entries(version: u64) -> Vec<(String, Vec<u8>)> {
    let manifest = json!({
        "bundle_version": version,
        "template": {"name": "default", "version": "x"},
        "steps": [{"index": 1, "kind": "execution", "file": "steps/000001.json"}],
    });
    let step = json!({"index": 1, "kind": "execution", "code": "1", "language": "python",
                      "result": null});
    vec![
        (
            "manifest.json".into(),
            serde_json::to_vec(&manifest).unwrap(),
        ),
        (
            "steps/000001.json".into(),
            serde_json::to_vec(&step).unwrap(),
        ),
    ]
}

/// Replays `entries` as a bundle file with no server: the bundle is refused before any
/// request. Returns the exit status and stderr.
fn refuse(dir: &Path, name: &str, entries: &[(String, Vec<u8>)]) -> (i32, String) {
    let file = dir.join(name);
    std::fs::write(&file, tar_gz(entries)).unwrap();
    let o = sandlot(None, &["replay", file.to_str().unwrap()]);
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn newer_tampered_and_hostile_bundles_are_refused_and_nothing_is_written() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("bundles");
    std::fs::create_dir(&dir).unwrap();

    let (code, err) = refuse(&dir, "newer.tar.gz", &good_entries(2));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("unsupported_bundle") && err.contains("version 2"),
        "{err}"
    );

    for (i, hostile) in [
        "../escaped",
        "../../escaped",
        "/tmp/sandlot-escaped-absolute",
        "steps/../../escaped",
        "inputs/../../escaped",
        "manifest.json/../escaped",
    ]
    .iter()
    .enumerate()
    {
        let mut entries = good_entries(1);
        entries.push((hostile.to_string(), b"pwned".to_vec()));
        let (code, err) = refuse(&dir, &format!("hostile{i}.tar.gz"), &entries);
        assert_eq!(code, 2, "{hostile}: {err}");
        assert!(err.contains("refused"), "{hostile}: {err}");
    }
    assert!(!work.path().join("escaped").exists());
    assert!(!dir.join("escaped").exists());
    assert!(!Path::new("/tmp/sandlot-escaped-absolute").exists());

    // A symlink entry.
    {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut t = tar::Builder::new(gz);
        for (name, data) in good_entries(1) {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_entry_type(tar::EntryType::Regular);
            h.set_mode(0o644);
            t.append_data(&mut h, name, &data[..]).unwrap();
        }
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        t.append_link(&mut h, format!("inputs/{}", "a".repeat(64)), "/etc/passwd")
            .unwrap();
        let file = dir.join("symlink.tar.gz");
        std::fs::write(&file, t.into_inner().unwrap().finish().unwrap()).unwrap();
        let o = sandlot(None, &["replay", file.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(String::from_utf8_lossy(&o.stderr).contains("not a regular file"));
    }

    // A huge manifest (over 16 MiB, mostly zeros: small compressed).
    let mut huge = good_entries(1);
    let mut big = b"{\"bundle_version\": 1, \"pad\": \"".to_vec();
    big.resize(17 << 20, b'0');
    big.extend_from_slice(b"\"}");
    huge[0].1 = big;
    let (code, err) = refuse(&dir, "huge.tar.gz", &huge);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("larger than"), "{err}");

    // Invalid JSON.
    let mut invalid = good_entries(1);
    invalid[0].1 = b"{\"bundle_version\": 1,".to_vec();
    let (code, err) = refuse(&dir, "invalid.tar.gz", &invalid);
    assert_eq!(code, 2);
    assert!(err.contains("not valid JSON"), "{err}");

    // An input whose content does not match its name.
    let mut tampered = good_entries(1);
    tampered.push((
        format!("inputs/{}", sha256(b"original")),
        b"changed".to_vec(),
    ));
    let (code, err) = refuse(&dir, "tampered.tar.gz", &tampered);
    assert_eq!(code, 2);
    assert!(err.contains("does not match its sha256"), "{err}");

    // Not a bundle at all, and a step the manifest does not list.
    let file = dir.join("garbage.tar.gz");
    std::fs::write(&file, b"\x1f\x8b garbage").unwrap();
    let o = sandlot(None, &["replay", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let mut extra = good_entries(1);
    extra.push(("steps/000002.json".into(), b"{}".to_vec()));
    let (code, _) = refuse(&dir, "extra.tar.gz", &extra);
    assert_eq!(code, 2);

    // Nothing but our own files in the work dir.
    let mut names: Vec<String> = std::fs::read_dir(work.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["bundles"]);
}

/// A loopback HTTP endpoint that answers 200 to every POST and keeps the bodies.
fn collector() -> (String, std::sync::mpsc::Receiver<String>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/api/v1/lineage", listener.local_addr().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { break };
            conn.set_read_timeout(Some(Duration::from_secs(10))).ok();
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut conn = conn;
                loop {
                    let mut len = 0usize;
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    loop {
                        let mut h = String::new();
                        if reader.read_line(&mut h).unwrap_or(0) == 0 {
                            return;
                        }
                        if h == "\r\n" {
                            break;
                        }
                        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                            len = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0u8; len];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    let _ = tx.send(String::from_utf8_lossy(&body).into_owned());
                    let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
                }
            });
        }
    });
    (url, rx)
}

/// Validates OpenLineage events against the shipped schemas: the event against
/// `OpenLineage.json`'s RunEvent, every facet against the schema its `_schemaURL` names.
fn validate_openlineage(events: &[Value]) {
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/openlineage");
    let load = |f: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(fixtures.join(f)).unwrap()).unwrap()
    };
    let docs = [
        (
            "https://openlineage.io/spec/2-0-2/OpenLineage.json",
            "OpenLineage.json",
        ),
        (
            "https://openlineage.io/spec/facets/1-2-0/ParentRunFacet.json",
            "ParentRunFacet.json",
        ),
        (
            "https://openlineage.io/spec/facets/1-0-1/ErrorMessageRunFacet.json",
            "ErrorMessageRunFacet.json",
        ),
        ("urn:sandlot:openlineage:facets:1-0-0", "SandlotFacets.json"),
    ];
    let mut registry = jsonschema::Registry::new();
    for (uri, file) in docs {
        registry = registry.add(uri, load(file)).unwrap();
    }
    let registry = registry.prepare().unwrap();
    let validator = |schema_url: &str| {
        jsonschema::options()
            .with_registry(&registry)
            .should_validate_formats(true)
            .build(&json!({"$ref": schema_url}))
            .unwrap_or_else(|e| panic!("schema {schema_url}: {e}"))
    };
    let event_schema =
        validator("https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent");
    let mut facets_seen = std::collections::BTreeSet::new();
    for ev in events {
        let errors: Vec<String> = event_schema
            .iter_errors(ev)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "not a RunEvent: {errors:?}\n{ev:#}");
        assert_eq!(
            ev["schemaURL"],
            "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"
        );
        let mut facets: Vec<(String, &Value)> = Vec::new();
        for (k, v) in ev["run"]["facets"].as_object().into_iter().flatten() {
            facets.push((k.clone(), v));
        }
        for side in ["inputs", "outputs"] {
            for d in ev[side].as_array().into_iter().flatten() {
                for (k, v) in d["facets"].as_object().into_iter().flatten() {
                    facets.push((k.clone(), v));
                }
            }
        }
        for (name, facet) in facets {
            let url = facet["_schemaURL"].as_str().unwrap();
            assert!(facet["_producer"]
                .as_str()
                .unwrap()
                .starts_with("urn:sandlot:"));
            let v = validator(url);
            let errors: Vec<String> = v.iter_errors(facet).map(|e| e.to_string()).collect();
            assert!(
                errors.is_empty(),
                "facet {name} ({url}): {errors:?}\n{facet:#}"
            );
            facets_seen.insert(name);
        }
    }
    for needed in [
        "parent",
        "sandlot_execution",
        "sandlot_policy",
        "sandlot_guardrails",
        "sandlot_content",
        "sandlot_sandbox",
    ] {
        assert!(
            facets_seen.contains(needed),
            "no {needed} facet: {facets_seen:?}"
        );
    }
}

#[test]
fn lineage_routes_scope_to_the_tenant_outlive_the_sandbox_and_export_openlineage() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let input = b"lineage input\n".to_vec();
    server
        .put_bytes(
            &format!("/v1/sandboxes/{id}/files/in/data.txt"),
            input.clone(),
        )
        .expect(201);
    let r = server.execute(
        &id,
        "s = open('in/data.txt').read()\nopen('out.txt', 'w').write(s.upper())",
    );
    assert_eq!(r["end_state"], "ok");
    let exec = r["id"].as_str().unwrap().to_owned();
    let out_sha = sha256(b"LINEAGE INPUT\n");
    assert!(r["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a["sha256"] == out_sha));
    let failing = server.execute(&id, "raise ValueError('on purpose')");
    assert_eq!(failing["end_state"], "error");
    let template_version = server.get(&format!("/v1/sandboxes/{id}")).expect(200)
        ["template_version"]
        .as_str()
        .unwrap()
        .to_owned();
    let policy_version = server.get("/v1/policies").expect(200)["version"]
        .as_str()
        .unwrap()
        .to_owned();

    // artifact → execution → sandbox → template version, policy version.
    let a = server
        .get(&format!("/v1/lineage/artifact/{out_sha}"))
        .expect(200)
        .clone();
    let p = &a["produced_by"][0];
    assert_eq!(p["execution_id"], exec.as_str(), "{a:#}");
    assert_eq!(p["sandbox_id"], id.as_str());
    assert_eq!(p["path"], "out.txt");
    assert_eq!(p["template_version"], template_version.as_str());
    assert_eq!(p["policy_version"], policy_version.as_str(), "{a:#}");
    assert!(!p["decisions"].as_array().unwrap().is_empty(), "{a:#}");
    let i = server
        .get(&format!("/v1/lineage/artifact/{}", sha256(&input)))
        .expect(200)
        .clone();
    assert_eq!(i["uploaded_as"][0]["path"], "in/data.txt", "{i:#}");
    assert_eq!(i["uploaded_as"][0]["stored"], true);
    // The input's content is kept and served by hash.
    let (status, _, body) = server.get_bytes(&format!("/v1/artifacts/{}", sha256(&input)));
    assert_eq!((status, body), (200, input.clone()));

    let e = server
        .get(&format!("/v1/lineage/execution/{exec}"))
        .expect(200)
        .clone();
    assert_eq!(e["template"]["version"], template_version.as_str());
    assert_eq!(e["policy"]["version"], policy_version.as_str());
    assert_eq!(e["policy"]["decisions"][0]["gate"], "execute", "{e:#}");
    assert_eq!(e["inputs"][0]["path"], "in/data.txt");
    assert_eq!(e["outputs"][0]["sha256"], out_sha.as_str());
    assert_eq!(e["sandbox"]["id"], id.as_str());

    // A fork's lineage names its parent.
    let forked = server
        .post(&format!("/v1/sandboxes/{id}/fork"), &json!({"count": 1}))
        .expect(201)
        .clone();
    let child = forked["sandboxes"][0]["id"].as_str().unwrap().to_owned();
    let c = server
        .get(&format!("/v1/lineage/sandbox/{child}"))
        .expect(200)
        .clone();
    assert_eq!(c["parents"][0]["relation"], "forked_from");
    assert_eq!(c["parents"][0]["sandbox_id"], id.as_str());

    // Ended: everything still answers.
    server.delete(&format!("/v1/sandboxes/{id}")).expect(204);
    let s = server
        .get(&format!("/v1/lineage/sandbox/{id}"))
        .expect(200)
        .clone();
    assert_eq!(s["sandbox"]["state"], "deleted");
    let kinds: Vec<&str> = s["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["input", "execution", "execution"]);
    server
        .get(&format!("/v1/lineage/execution/{exec}"))
        .expect(200);
    server
        .get(&format!("/v1/lineage/artifact/{out_sha}"))
        .expect(200);

    // Bad input.
    server
        .get("/v1/lineage/artifact/not-a-hash")
        .expect_error(400, "invalid_argument");
    server
        .get(&format!("/v1/lineage/artifact/{}", "0".repeat(64)))
        .expect_error(404, "file_not_found");
    server
        .get("/v1/lineage/execution/ex_nope")
        .expect_error(404, "execution_not_found");
    server
        .get("/v1/lineage/sandbox/sb_nope")
        .expect_error(404, "sandbox_not_found");

    // Another tenant: every id answers exactly as a missing one.
    let a_key = server.key().to_owned();
    let admin = server.client_with_key(Some(&a_key));
    admin
        .post(format!("{}/v1/tenants", server.url()))
        .json(&json!({"name": "other"}))
        .send()
        .unwrap();
    let k: Value = admin
        .post(format!("{}/v1/keys", server.url()))
        .json(&json!({"tenant": "other", "role": "member"}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let other = server.client_with_key(k["key"].as_str());
    let get = |path: &str| -> (u16, Value) {
        let r = other.get(format!("{}{path}", server.url())).send().unwrap();
        (r.status().as_u16(), r.json().unwrap_or(Value::Null))
    };
    for (theirs, missing) in [
        (
            format!("/v1/lineage/sandbox/{id}"),
            "/v1/lineage/sandbox/sb_00000000000000000000".to_owned(),
        ),
        (
            format!("/v1/lineage/sandbox/{id}/openlineage"),
            "/v1/lineage/sandbox/sb_00000000000000000000/openlineage".to_owned(),
        ),
        (
            format!("/v1/lineage/execution/{exec}"),
            "/v1/lineage/execution/ex_00000000000000000000".to_owned(),
        ),
        (
            format!("/v1/lineage/artifact/{out_sha}"),
            format!("/v1/lineage/artifact/{}", "0".repeat(64)),
        ),
        (
            format!("/v1/sandboxes/{id}/bundle"),
            "/v1/sandboxes/sb_00000000000000000000/bundle".to_owned(),
        ),
    ] {
        let (s1, b1) = get(&theirs);
        let (s2, b2) = get(&missing);
        assert_eq!(
            (s1, &b1["error"]["code"]),
            (s2, &b2["error"]["code"]),
            "{theirs}: {b1}"
        );
        assert_eq!(s1, 404, "{theirs}: {b1}");
        // The message names the id asked for, nothing more.
        let m1 = b1["error"]["message"].as_str().unwrap();
        assert!(!m1.contains("other") && !m1.contains("default"), "{m1}");
    }

    // OpenLineage: to a file, and POSTed to an endpoint on loopback.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    let o = sandlot(
        Some(&server),
        &[
            "lineage",
            "export",
            "--sandbox",
            &id,
            "--to",
            file.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let events: Vec<Value> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Sandbox START, 2 × (START, COMPLETE|FAIL), sandbox COMPLETE.
    let types: Vec<&str> = events
        .iter()
        .map(|e| e["eventType"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        ["START", "START", "COMPLETE", "START", "FAIL", "COMPLETE"]
    );
    validate_openlineage(&events);
    let sandbox_run = events[0]["run"]["runId"].as_str().unwrap();
    assert_eq!(
        events[1]["run"]["facets"]["parent"]["run"]["runId"],
        sandbox_run
    );
    assert_eq!(
        events[2]["inputs"][0]["name"],
        format!("sha256:{}", sha256(&input))
    );
    assert_eq!(events[2]["outputs"][0]["name"], format!("sha256:{out_sha}"));
    assert_eq!(
        events[2]["run"]["facets"]["sandlot_policy"]["version"],
        policy_version.as_str()
    );
    assert!(events[4]["run"]["facets"]["errorMessage"]["message"]
        .as_str()
        .unwrap()
        .contains("ValueError"));
    // The fork's events name the parent sandbox's run as theirs.
    let o = sandlot(
        Some(&server),
        &[
            "lineage",
            "export",
            "--sandbox",
            &child,
            "--to",
            file.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let first: Value = serde_json::from_str(
        std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        first["run"]["facets"]["parent"]["run"]["runId"],
        sandbox_run
    );

    let (url, rx) = collector();
    let o = sandlot(
        Some(&server),
        &["lineage", "export", "--sandbox", &id, "--to", &url],
    );
    assert!(o.status.success(), "{}", text(&o));
    let posted: Vec<Value> = (0..events.len())
        .map(|_| serde_json::from_str(&rx.recv_timeout(Duration::from_secs(10)).unwrap()).unwrap())
        .collect();
    assert_eq!(posted, events);

    let o = sandlot(Some(&server), &["lineage", "show", "execution", &exec]);
    assert!(o.status.success(), "{}", text(&o));
    let shown: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(shown["execution"]["id"], exec.as_str());
    let o = sandlot(Some(&server), &["lineage", "show", "sandbox", "sb_nope"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("sandbox_not_found")
            || String::from_utf8_lossy(&o.stderr).contains("no sandbox"),
        "{}",
        text(&o)
    );
}
