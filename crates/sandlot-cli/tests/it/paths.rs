//! Root never follows a path a sandbox can change, against the real server: a template whose
//! `setup` makes every sandbox of it (pooled ones included, before any client has them) run a
//! thread that swaps everything in `/workspace` for symlinks to a canary tree on the host, in a
//! loop. Forks and snapshot restores copy into such pooled sandboxes while their thread runs.
//! The canary (world-writable, so only the copy's refusal to follow a symlink protects it) is
//! exactly as it was after every round: names, contents, modes and owners.

use crate::common;

use common::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const ROUNDS: usize = 12;

/// Everything about a tree that a wrong chmod, chown, create or write would change.
fn tree_state(root: &Path) -> BTreeMap<PathBuf, (u32, u32, u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let m = std::fs::symlink_metadata(&p).unwrap();
        let body = if m.is_file() {
            std::fs::read(&p).unwrap()
        } else if m.file_type().is_symlink() {
            std::fs::read_link(&p)
                .unwrap()
                .as_os_str()
                .as_bytes()
                .to_vec()
        } else {
            Vec::new()
        };
        out.insert(
            p.strip_prefix(root).unwrap().to_path_buf(),
            (m.mode(), m.uid(), m.gid(), body),
        );
        if m.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        }
    }
    out
}

/// The setup of the racing template: wraps the driver's entry point, which every sandbox of
/// the template runs once jailed, so that it first starts the swapping thread. It notes how
/// many entries `/workspace` had when it started: 0 in a pooled sandbox (the copy comes after).
fn racing_setup(canary: &Path) -> String {
    format!(
        r#"
import os, threading, time
import sandlot_runtime.driver as _driver
_CANARY = {canary:?}
_main = _driver.main
def _swap():
    try:
        with open('/tmp/race-start', 'w') as f:
            f.write(str(len(os.listdir('/workspace'))))
    except OSError:
        pass
    n = 0
    while True:
        for root, dirs, files in os.walk('/workspace'):
            for name in dirs + files:
                if name.startswith('.m'):
                    continue
                n += 1
                p = os.path.join(root, name)
                try:
                    os.rename(p, f'/workspace/.m{{n}}')
                    os.symlink(_CANARY, p)
                except OSError:
                    pass
        for i in range(24):
            try:
                os.symlink(_CANARY, f'/workspace/d{{i}}')
            except OSError:
                pass
        time.sleep(0.001)
def _racing_main(*args, **kwargs):
    threading.Thread(target=_swap, daemon=True).start()
    return _main(*args, **kwargs)
_driver.main = _racing_main
"#,
        canary = canary.display().to_string()
    )
}

/// What a sandbox's swapping thread saw in `/workspace` when it started.
fn started_with(server: &TestServer, id: &str) -> String {
    let r = server.execute(id, "print(open('/tmp/race-start').read())");
    assert_eq!(r["end_state"], "ok", "{r}");
    r["stdout"].as_str().unwrap_or("").trim().to_string()
}

#[test]
fn forks_and_restores_into_racing_pooled_sandboxes_never_leave_the_workspace() {
    // The machine to itself, as when this was a test binary of its own: swap threads spin in
    // every pooled sandbox against bounded waits, a load that would slow a neighbour's timed
    // assertions.
    let _machine = common::serial();
    // fork=debug: a copy into a pooled sandbox that a swap refused is logged (and the child
    // booted afresh instead).
    let server = TestServer::start_with_env(&[
        ("SANDLOT_POOL_SIZE", "2"),
        ("SANDLOT_LOG", "info,sandlot_runtime::fork=debug"),
    ]);
    let host = tempfile::Builder::new()
        .prefix("sandlot-race-canary-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(host.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let canary = host.path().join("canary");
    std::fs::create_dir_all(canary.join("sub")).unwrap();
    std::fs::write(canary.join("passwd"), b"root:x:0:0\n").unwrap();
    std::fs::write(canary.join("sub/shadow"), b"secret\n").unwrap();
    for (p, mode) in [
        ("", 0o777),
        ("sub", 0o777),
        ("passwd", 0o666),
        ("sub/shadow", 0o666),
    ] {
        std::fs::set_permissions(canary.join(p), std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let before = tree_state(&canary);

    // Control: with nobody swapping, a fork goes into a pooled sandbox (its init is older than
    // the fork request) and carries the files.
    let quiet = server.create_sandbox();
    let r = server.execute(
        &quiet,
        "import os\nos.makedirs('/workspace/a/b', mode=0o700)\nopen('/workspace/a/b/f', 'w').write('q')",
    );
    assert_eq!(r["end_state"], "ok", "{r}");
    std::thread::sleep(Duration::from_secs(5));
    let t0 = Instant::now();
    let forked = server
        .post(&format!("/v1/sandboxes/{quiet}/fork"), &json!({"count": 1}))
        .expect(201)
        .clone();
    let took = t0.elapsed().as_secs_f64();
    let child = forked["sandboxes"][0]["id"].as_str().unwrap().to_string();
    let r = server.execute(
        &child,
        "import os\n\
         up = float(open('/proc/uptime').read().split()[0])\n\
         start = int(open('/proc/1/stat').read().rsplit(')', 1)[1].split()[19])\n\
         st = os.stat('/workspace/a/b')\n\
         print(up - start / os.sysconf('SC_CLK_TCK'), open('/workspace/a/b/f').read(), \
         oct(st.st_mode & 0o777), st.st_uid == os.getuid())",
    );
    assert_eq!(r["end_state"], "ok", "{r}");
    let out = r["stdout"]
        .as_str()
        .unwrap()
        .split_whitespace()
        .map(str::to_string)
        .collect::<Vec<_>>();
    let age: f64 = out[0].parse().unwrap();
    assert!(
        age > took,
        "the fork booted a fresh sandbox ({age:.2} s old, the fork took {took:.2} s): {}",
        server.stderr()
    );
    assert_eq!(out[1..], ["q", "0o700", "True"]);
    for id in [&child, &quiet] {
        server.delete(&format!("/v1/sandboxes/{id}")).expect(204);
    }

    server
        .post(
            "/v1/templates",
            &json!({"name": "racer", "setup": racing_setup(&canary)}),
        )
        .expect(202);
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let t = server.get("/v1/templates/racer").expect(200).clone();
        if t["status"] == "ready" {
            break;
        }
        assert_eq!(t["status"], "building", "{t}\n{}", server.stderr());
        assert!(Instant::now() < deadline, "template still building: {t}");
        std::thread::sleep(Duration::from_millis(200));
    }

    // The parent: a tree of directories and files (its own thread swaps them too, so some
    // end up under `.m*` names: directories all the same).
    let parent = server.create_sandbox_with(&json!({"template": "racer"}))["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = server.execute(
        &parent,
        "import os\n\
         for d in range(24):\n\
         \x20   for sub in ('', '/a', '/a/b'):\n\
         \x20       try:\n\
         \x20           os.makedirs(f'/workspace/t{d}{sub}', mode=0o700, exist_ok=True)\n\
         \x20           for f in range(3):\n\
         \x20               open(f'/workspace/t{d}{sub}/f{f}', 'w').write('x')\n\
         \x20       except OSError:\n\
         \x20           pass\n\
         print(sum(len(fs) for _, _, fs in os.walk('/workspace')))",
    );
    assert_eq!(r["end_state"], "ok", "{r}");
    let snapshot = server
        .post(&format!("/v1/sandboxes/{parent}/snapshots"), &json!({}))
        .expect(201)["id"]
        .as_str()
        .unwrap()
        .to_string();

    let (mut pooled, mut children) = (0usize, 0usize);
    for round in 0..ROUNDS {
        // Let the pool refill, so the copies go into running pooled sandboxes.
        std::thread::sleep(Duration::from_secs(2));
        let ids: Vec<String> = if round % 2 == 0 {
            let forked = server
                .post(
                    &format!("/v1/sandboxes/{parent}/fork"),
                    &json!({"count": 2}),
                )
                .expect(201)
                .clone();
            forked["sandboxes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["id"].as_str().unwrap().to_string())
                .collect()
        } else {
            let s = server.create_sandbox_with(&json!({"from_snapshot": snapshot}));
            vec![s["id"].as_str().unwrap().to_string()]
        };
        for id in &ids {
            children += 1;
            if started_with(&server, id) == "0" {
                pooled += 1;
            }
            server.delete(&format!("/v1/sandboxes/{id}")).expect(204);
        }
        assert_eq!(
            tree_state(&canary),
            before,
            "round {round}: the canary outside the workspace changed"
        );
    }
    let stderr = server.stderr();
    let refusals: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("restoring into a pooled sandbox failed"))
        .collect();
    let refused = refusals.len();
    // Refused by a swap (the copy met a symlink or a moved entry), not for another reason.
    for l in &refusals {
        assert!(
            ["ELOOP", "EEXIST", "ENOENT", "ENOTDIR"]
                .iter()
                .any(|e| l.contains(e)),
            "{l}"
        );
    }
    eprintln!(
        "{}",
        refusals
            .iter()
            .take(3)
            .copied()
            .collect::<Vec<_>>()
            .join("\n")
    );
    eprintln!(
        "{children} children: {pooled} copied into a running pooled sandbox, {refused} copies \
         into one refused by a swap (those children booted afresh); canary unchanged"
    );
    assert!(
        pooled + refused > 0,
        "no copy went into a running pooled sandbox"
    );
    assert!(!server.stderr().contains("panicked"), "{}", server.stderr());
}
