//! A sandbox's life against a real server: restart in place after its processes die (a crash,
//! an OOM, a timeout they ignore), the restart count and the `failed` state of a restart loop,
//! timeouts that land whatever the code does, `DELETE` in any state, and reaping: after
//! deletes racing executions and creations, and after creations cancelled by their client, no
//! process, zombie or cgroup of a sandbox is left on the host and none ever ran outside its
//! cgroup.

use crate::common;

use common::{HostProc, HostView, TestServer};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The most an execution may take beyond its timeout, whatever its code does.
const TIMEOUT_SLACK: Duration = Duration::from_secs(2);

fn text_plain(r: &Value) -> &str {
    r["result"]["text/plain"].as_str().unwrap_or("")
}

fn sandbox(server: &TestServer, id: &str) -> Value {
    let s = server
        .get(&format!("/v1/sandboxes/{id}"))
        .expect(200)
        .clone();
    common::assert_schema("Sandbox", &s);
    s
}

/// Runs Python with a timeout; returns the result and how long the request took.
fn timed(server: &TestServer, id: &str, code: &str, timeout: f64) -> (Value, Duration) {
    let t0 = Instant::now();
    let r = server
        .execute_with(id, &json!({ "code": code, "timeout": timeout }))
        .expect(200)
        .clone();
    common::assert_schema("ExecutionResult", &r);
    (r, t0.elapsed())
}

fn bash_timed(server: &TestServer, id: &str, code: &str, timeout: f64) -> (Value, Duration) {
    let t0 = Instant::now();
    let body = json!({ "code": code, "timeout": timeout, "language": "bash" });
    let r = server.execute_with(id, &body).expect(200).clone();
    common::assert_schema("ExecutionResult", &r);
    (r, t0.elapsed())
}

#[track_caller]
fn assert_restarted(r: &Value, end_state: &str, reason: &str) {
    assert_eq!(r["end_state"], end_state, "{r:#}");
    assert_eq!(r["sandbox_alive"], false, "{r:#}");
    assert_eq!(
        r["restarted"],
        json!({ "reason": reason, "lost": ["python state", "bash session"] }),
        "{r:#}"
    );
}

// ---------------------------------------------------------------------------------------------
// The host's view of one server (`common::HostView`), narrowed to what these tests check.

/// The server's sandbox cgroups in the memory and pids controllers, as `<controller>:<id>`.
fn sandbox_cgroups(host: &HostView) -> Vec<String> {
    host.sandbox_cgroups()
        .into_iter()
        .filter(|c| c.starts_with("memory:") || c.starts_with("pids:"))
        .collect()
}

/// Sandbox processes that are zombies, or live outside a sandbox cgroup of this server
/// (in the pids or memory hierarchy).
fn misplaced(host: &HostView) -> Vec<HostProc> {
    let prefix = format!("/{}/sb_", host.cgroup_rel.display());
    host.sandbox_processes()
        .into_iter()
        .filter(|p| {
            p.zombie || !p.memory_cgroup.starts_with(&prefix) || !p.pids_cgroup.starts_with(&prefix)
        })
        .collect()
}

/// Waits until the server has no sandbox left but its warm pool (`pool` sandboxes), every
/// sandbox process is in its cgroup and none is a zombie; then stops the server and checks
/// nothing of any sandbox is left at all.
#[track_caller]
fn assert_nothing_left(mut server: TestServer, pool: usize) {
    let host = HostView::of(&server);
    let settled = common::wait_until(Duration::from_secs(20), || {
        sandbox_cgroups(&host).len() <= pool * 2 && misplaced(&host).is_empty()
    });
    assert!(
        settled,
        "sandbox cgroups: {:?}\nmisplaced or zombie sandbox processes: {:#?}",
        sandbox_cgroups(&host),
        misplaced(&host)
    );
    let status = server.stop();
    assert!(status.success(), "sandlot serve exited with {status}");
    let gone = common::wait_until(Duration::from_secs(10), || {
        host.sandbox_processes().is_empty() && sandbox_cgroups(&host).is_empty()
    });
    assert!(
        gone,
        "after shutdown: processes {:#?}, cgroups {:?}",
        host.sandbox_processes(),
        sandbox_cgroups(&host)
    );
}

// ---------------------------------------------------------------------------------------------
// Restart in place.

#[test]
fn a_crashed_driver_restarts_in_place() {
    let server = TestServer::start();
    let created = server.create_sandbox_with(&json!({
        "env": { "SECRET": "s3" },
        "metadata": { "owner": "me" },
        "limits": { "memory_mb": 256 },
    }));
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["restart_count"], 0);
    assert!(created.get("last_restart").is_none(), "{created:#}");
    assert_eq!(server.execute(&id, "x = 1\nx")["end_state"], "ok");

    let (r, _) = timed(&server, &id, "import os\nos.kill(os.getpid(), 9)", 30.0);
    let killed_at = Instant::now();
    assert_restarted(&r, "killed", "crashed");
    assert_eq!(r["error"]["name"], "SandboxDied", "{r:#}");

    // The next cell runs in fresh processes of the same sandbox: same id, env and limits.
    let next = server.execute(&id, "import os\nos.environ['SECRET']");
    let restart_to_result = killed_at.elapsed();
    assert_eq!(text_plain(&next), "'s3'", "{next:#}");
    assert!(next.get("restarted").is_none(), "{next:#}");
    eprintln!("restart in place: kill to next result {restart_to_result:?}");
    let lost = server.execute(&id, "x");
    assert_eq!(lost["end_state"], "error");
    assert_eq!(lost["error"]["name"], "NameError");

    let s = sandbox(&server, &id);
    assert_eq!(s["state"], "running");
    assert_eq!(s["restart_count"], 1);
    assert_eq!(s["last_restart"]["reason"], "crashed");
    assert_eq!(s["metadata"], json!({ "owner": "me" }));
    assert_eq!(s["limits"]["memory_mb"], 256);
    // Contexts reset to the default one.
    let ctx = server
        .get(&format!("/v1/sandboxes/{id}/contexts"))
        .expect(200)["contexts"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(ctx, 1);
}

#[test]
fn an_oom_killed_driver_restarts_in_place() {
    let server = TestServer::start();
    let id = server.create_sandbox_with(&json!({ "limits": { "memory_mb": 128 } }))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (r, _) = timed(
        &server,
        &id,
        "hog = []\nwhile True:\n    hog.append(bytearray(16 * 2**20))",
        60.0,
    );
    assert_restarted(&r, "oom", "oom");
    assert_eq!(text_plain(&server.execute(&id, "6 * 7")), "42");
    let s = sandbox(&server, &id);
    assert_eq!(
        (
            s["restart_count"].as_u64(),
            s["last_restart"]["reason"].as_str()
        ),
        (Some(1), Some("oom"))
    );
}

#[test]
fn a_restart_loop_fails_the_sandbox_and_delete_still_answers_once() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    for n in 1..=5 {
        let (r, _) = timed(&server, &id, "import os\nos.kill(os.getpid(), 9)", 30.0);
        assert_restarted(&r, "killed", "crashed");
        assert_eq!(sandbox(&server, &id)["restart_count"], n);
    }
    // The sixth death within a minute: no more restarts.
    let (r, _) = timed(&server, &id, "import os\nos.kill(os.getpid(), 9)", 30.0);
    assert_eq!(r["end_state"], "killed");
    assert!(r.get("restarted").is_none(), "{r:#}");
    assert!(
        r["error"]["value"]
            .as_str()
            .unwrap_or("")
            .contains("now failed"),
        "{r:#}"
    );
    let s = sandbox(&server, &id);
    assert_eq!(s["state"], "failed", "{s:#}");
    assert_eq!(s["restart_count"], 5);
    assert!(
        s["ended_reason"]
            .as_str()
            .unwrap_or("")
            .contains("restarts"),
        "{s:#}"
    );
    server
        .execute_with(&id, &json!({ "code": "1" }))
        .expect_error(409, "sandbox_failed");
    // Listed with the sandboxes that have not ended.
    let listed = server.get("/v1/sandboxes").expect(200)["sandboxes"].clone();
    assert!(listed
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["id"] == id.as_str()));

    server.delete(&format!("/v1/sandboxes/{id}")).expect(204);
    server
        .delete(&format!("/v1/sandboxes/{id}"))
        .expect_error(404, "sandbox_not_found");
    let running = server.create_sandbox();
    server
        .delete(&format!("/v1/sandboxes/{running}"))
        .expect(204);
    server
        .delete(&format!("/v1/sandboxes/{running}"))
        .expect_error(404, "sandbox_not_found");
}

// ---------------------------------------------------------------------------------------------
// Timeouts that land.

#[test]
fn timeouts_land_whatever_the_code_does() {
    let server = TestServer::start();
    let bound = |timeout: f64| Duration::from_secs_f64(timeout) + TIMEOUT_SLACK;

    // SIGINT ignored in a CPU loop: killed 1 s after the deadline, restarted in place.
    let id = server.create_sandbox();
    let code = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass";
    let (r, took) = timed(&server, &id, code, 1.0);
    assert_restarted(&r, "timeout", "timeout");
    assert!(
        took >= Duration::from_secs(2) && took < bound(1.0),
        "took {took:?}"
    );
    assert_eq!(text_plain(&server.execute(&id, "6 * 7")), "42");

    // A driver that stops itself.
    let (r, took) = timed(
        &server,
        &id,
        "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)",
        1.0,
    );
    assert_restarted(&r, "timeout", "timeout");
    assert!(took < bound(1.0), "took {took:?}");
    assert_eq!(text_plain(&server.execute(&id, "6 * 7")), "42");

    // Bash that traps SIGINT: the driver ends the Bash session itself (a new one starts with
    // the next cell), or the processes restart in place; either way within the bound.
    let (r, took) = bash_timed(&server, &id, "trap '' INT\nsleep 1000", 1.0);
    assert_eq!(r["end_state"], "timeout", "{r:#}");
    assert!(took < bound(1.0), "took {took:?}");
    let (r, _) = bash_timed(&server, &id, "echo alive", 30.0);
    assert_eq!(r["stdout"], "alive\n", "{r:#}");

    // A fork bomb at the pids limit.
    let bomb = server.create_sandbox_with(&json!({ "limits": { "pids": 64 } }))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let code = "import os, signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass";
    let (r, took) = timed(&server, &bomb, code, 3.0);
    assert_eq!(r["end_state"], "timeout", "{r:#}");
    assert!(took < bound(3.0), "took {took:?}");
    assert_eq!(text_plain(&server.execute(&bomb, "6 * 7")), "42");

    // Processes that cannot be interrupted at all: the test freezes the sandbox's cgroup from
    // the host while the cell runs (frozen tasks sleep uninterruptibly).
    let host = HostView::of(&server);
    let frozen = server.create_sandbox();
    let freezer = Path::new("/sys/fs/cgroup/freezer")
        .join(&host.cgroup_rel)
        .join(&frozen)
        .join("freezer.state");
    let froze = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        std::fs::write(&freezer, "FROZEN").unwrap();
    });
    let (r, took) = timed(
        &server,
        &frozen,
        "import time\nwhile True:\n    time.sleep(0.01)",
        2.0,
    );
    froze.join().unwrap();
    assert_restarted(&r, "timeout", "timeout");
    assert!(took < bound(2.0), "took {took:?}");
    assert_eq!(text_plain(&server.execute(&frozen, "6 * 7")), "42");
}

// ---------------------------------------------------------------------------------------------
// Reaping.

/// The soak of the issue: three threads run a short cell in random sandboxes of a set of ten
/// while a fourth replaces one sandbox (create a new one, delete a random old one) every
/// 20 ms for 100 rounds. Afterwards no sandbox process may be left anywhere but in a pooled
/// sandbox's cgroup, and nothing at all once the server stops.
#[test]
fn deletes_racing_executions_and_creations_leave_nothing() {
    let pool = 2;
    let server = TestServer::start_with_env(&[("SANDLOT_POOL_SIZE", "2")]);
    let ids: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(
        (0..10).map(|_| server.create_sandbox()).collect(),
    ));
    let done = Arc::new(AtomicBool::new(false));
    let url = server.url().to_owned();
    let mut runners = Vec::new();
    for seed in 0..3u64 {
        let (ids, done, url) = (ids.clone(), done.clone(), url.clone());
        let client = server.client().clone();
        runners.push(std::thread::spawn(move || {
            let mut rng = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
            let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
            while !done.load(Ordering::SeqCst) {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let id = {
                    let ids = ids.lock().unwrap();
                    ids[(rng % ids.len() as u64) as usize].clone()
                };
                let body = json!({ "code": "import time; time.sleep(0.01); 1+1" });
                let status = client
                    .post(format!("{url}/v1/sandboxes/{id}/execute"))
                    .json(&body)
                    .send()
                    .map(|r| r.status().as_u16())
                    .unwrap_or(0);
                *statuses.entry(status).or_default() += 1;
            }
            statuses
        }));
    }
    // A fourth client uploads into random sandboxes meanwhile.
    let uploader = {
        let (ids, done, url) = (ids.clone(), done.clone(), url.clone());
        let client = server.client().clone();
        std::thread::spawn(move || {
            let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
            let mut n = 0usize;
            while !done.load(Ordering::SeqCst) {
                n += 1;
                let id = {
                    let ids = ids.lock().unwrap();
                    ids[n % ids.len()].clone()
                };
                let status = client
                    .put(format!("{url}/v1/sandboxes/{id}/files/up-{n}.bin"))
                    .body(vec![b'x'; 64 << 10])
                    .send()
                    .map(|r| r.status().as_u16())
                    .unwrap_or(0);
                *statuses.entry(status).or_default() += 1;
            }
            statuses
        })
    };
    let started = Instant::now();
    let mut rng: u64 = 0x2545F4914F6CDD1D;
    for _ in 0..100 {
        let fresh = server.create_sandbox();
        let old = {
            let mut ids = ids.lock().unwrap();
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let i = (rng % ids.len() as u64) as usize;
            std::mem::replace(&mut ids[i], fresh)
        };
        server.delete(&format!("/v1/sandboxes/{old}")).expect(204);
        std::thread::sleep(Duration::from_millis(20));
    }
    done.store(true, Ordering::SeqCst);
    let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
    for r in runners {
        for (k, v) in r.join().unwrap() {
            *statuses.entry(k).or_default() += v;
        }
    }
    let uploads = uploader.join().unwrap();
    eprintln!(
        "soak: {:?}, executions by status {statuses:?}, uploads by status {uploads:?}",
        started.elapsed()
    );
    assert!(
        uploads.keys().all(|s| *s == 201 || *s == 410),
        "{uploads:?}"
    );
    assert!(
        statuses.get(&200).copied().unwrap_or(0) > 100,
        "{statuses:?}"
    );
    // Only 200 (ran) and 410 (deleted meanwhile) are right; anything else is a failure.
    assert!(
        statuses.keys().all(|s| *s == 200 || *s == 410),
        "{statuses:?}"
    );
    for id in ids.lock().unwrap().iter() {
        server.delete(&format!("/v1/sandboxes/{id}")).expect(204);
    }
    let listed = server.get("/v1/sandboxes").expect(200)["sandboxes"].clone();
    assert_eq!(listed, json!([]));
    assert_nothing_left(server, pool);
}

/// A sandbox that made 200 zombies, 50 orphans and a process in uninterruptible sleep (a
/// vfork parent whose child stopped itself) leaves nothing on the host once deleted.
#[test]
fn delete_reaps_zombies_orphans_and_stuck_processes() {
    let server = TestServer::start_with_env(&[("SANDLOT_POOL_SIZE", "0")]);
    let host = HostView::of(&server);
    let id = server.create_sandbox_with(&json!({ "limits": { "pids": 512 } }))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let code = r#"
import ctypes, os, signal, time
libc = ctypes.CDLL(None)
for _ in range(200):
    if os.fork() == 0:
        os._exit(0)
for _ in range(50):
    if os.fork() == 0:
        if os.fork() == 0:
            time.sleep(1000)
        os._exit(0)
if os.fork() == 0:
    if libc.syscall(58) == 0:
        libc.kill(libc.getpid(), signal.SIGSTOP)
        libc._exit(0)
    os._exit(0)
time.sleep(1)
states = {}
for pid in os.listdir('/proc'):
    if pid.isdigit():
        try:
            st = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[0]
        except OSError:
            continue
        states[st] = states.get(st, 0) + 1
print(sorted(states.items()))
"#;
    let r = server.execute(&id, code);
    assert_eq!(r["end_state"], "ok", "{r:#}");
    let on_host = host.sandbox_processes();
    let zombies = on_host.iter().filter(|p| p.zombie).count();
    assert!(
        zombies >= 200 && on_host.len() >= 250,
        "{} processes, {zombies} zombies: {}",
        on_host.len(),
        r["stdout"]
    );
    server.delete(&format!("/v1/sandboxes/{id}")).expect(204);
    let gone = common::wait_until(Duration::from_secs(10), || {
        host.sandbox_processes().is_empty() && sandbox_cgroups(&host).is_empty()
    });
    assert!(
        gone,
        "left after DELETE: {:#?}, cgroups {:?}",
        host.sandbox_processes(),
        sandbox_cgroups(&host)
    );
    assert_nothing_left(server, 0);
}

/// Clients that give up while their sandbox is being created: every creation runs to its end
/// (HTTP/1 connections allow half-close, so the server cannot tell a client that went away from
/// one that only shut down its write side), and its sandbox is then whole and listed, never
/// half-made or unlisted. Deleting them leaves nothing.
#[test]
fn creations_cut_short_by_their_client_leave_nothing_unlisted() {
    let server = TestServer::start_with_env(&[("SANDLOT_POOL_SIZE", "0")]);
    let host = HostView::of(&server);
    let impatient = reqwest::blocking::Client::builder()
        .pool_idle_timeout(common::POOL_IDLE)
        .default_headers(
            [(
                reqwest::header::AUTHORIZATION,
                format!("Bearer {}", server.key()).parse().unwrap(),
            )]
            .into_iter()
            .collect(),
        )
        .timeout(Duration::from_millis(5))
        .build()
        .unwrap();
    let mut cut = 0;
    for _ in 0..30 {
        let sent = impatient
            .post(format!("{}/v1/sandboxes", server.url()))
            .json(&json!({}))
            .send();
        if sent.is_err() {
            cut += 1;
        }
    }
    assert!(cut > 0, "no creation was cut short by its client");
    // Once the creations have finished, every sandbox on the host is a listed one.
    let listed_ids = || -> Vec<String> {
        let listed = server.get("/v1/sandboxes").expect(200)["sandboxes"].clone();
        let mut ids: Vec<String> = listed
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_owned())
            .collect();
        ids.sort();
        ids
    };
    let on_host = || -> Vec<String> {
        let mut ids: Vec<String> = host
            .sandbox_cgroups()
            .into_iter()
            .filter_map(|c| c.strip_prefix("memory:").map(str::to_owned))
            .collect();
        ids.sort();
        ids
    };
    // A creation whose request future was dropped finishes in its own task and is then deleted
    // (its creator is gone); one whose client merely went away is listed. Either way, once no
    // creation is in flight (the same answer twice, a second apart), what runs on the host is
    // exactly what is listed.
    let settled = common::wait_until(Duration::from_secs(20), || {
        let ids = listed_ids();
        if ids.is_empty() || ids.len() > 30 || on_host() != ids {
            return false;
        }
        std::thread::sleep(Duration::from_secs(1));
        listed_ids() == ids && on_host() == ids
    });
    assert!(
        settled,
        "listed {:?}, on the host {:?}",
        listed_ids(),
        on_host()
    );
    eprintln!(
        "{cut} of 30 creations cut short by their client; {} finished and are listed",
        listed_ids().len()
    );
    for id in listed_ids() {
        let r = server.execute(&id, "6 * 7");
        assert_eq!(text_plain(&r), "42", "{r:#}");
        server.delete(&format!("/v1/sandboxes/{id}")).expect(204);
    }
    assert_nothing_left(server, 0);
}

// ---------------------------------------------------------------------------------------------
// Workspaces on disk.

/// The host directory of a sandbox's workspace (the Btrfs backend's layout).
fn workspace_dir(server: &TestServer, id: &str) -> PathBuf {
    server.data_dir().join("disk/mnt/ws").join(id)
}

/// The workspaces on disk, by id.
fn workspaces_on_disk(server: &TestServer) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(server.data_dir().join("disk/mnt/ws"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("sb_"))
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

fn read_file(server: &TestServer, id: &str, path: &str) -> (u16, Vec<u8>) {
    let (status, _, body) = server.get_bytes(&format!("/v1/sandboxes/{id}/files/{path}"));
    (status, body)
}

#[test]
fn files_survive_a_restart_in_place() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    server
        .put_bytes(
            &format!("/v1/sandboxes/{id}/files/in/data.csv"),
            b"a,b\n1,2\n".to_vec(),
        )
        .expect(201);
    let r = server.execute(&id, "open('/workspace/made.txt', 'w').write('by the cell')");
    assert_eq!(r["end_state"], "ok", "{r:#}");
    assert!(workspace_dir(&server, &id).join("made.txt").is_file());

    let (r, _) = timed(&server, &id, "import os\nos.kill(os.getpid(), 9)", 30.0);
    assert_restarted(&r, "killed", "crashed");
    // Readable through the API whatever the processes are doing.
    assert_eq!(
        read_file(&server, &id, "made.txt"),
        (200, b"by the cell".to_vec())
    );
    let r = server.execute(
        &id,
        "import os\n(open('/workspace/in/data.csv').read(), open('made.txt').read(), os.stat('made.txt').st_uid, os.getcwd())",
    );
    assert_eq!(
        text_plain(&r),
        "('a,b\\n1,2\\n', 'by the cell', 1000, '/workspace')",
        "{r:#}"
    );
}

#[test]
fn the_workspace_quota_holds_inside_and_on_upload() {
    let server = TestServer::start();
    let id = server.create_sandbox_with(&json!({ "limits": { "disk_mb": 64, "memory_mb": 256 } }))
        ["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(sandbox(&server, &id)["limits"]["disk_mb"], 64);
    // Filling the workspace fails the write with EDQUOT (or ENOSPC) and nothing else.
    let code = "import errno, os\ntry:\n    with open('/workspace/big', 'wb') as f:\n        for _ in range(128):\n            f.write(os.urandom(1 << 20))\n            f.flush()\n        os.fsync(f.fileno())\n    r = 'OK'\nexcept OSError as e:\n    r = errno.errorcode[e.errno]\nos.remove('/workspace/big')\nr";
    let r = server.execute(&id, code);
    assert!(matches!(text_plain(&r), "'EDQUOT'" | "'ENOSPC'"), "{r:#}");
    assert_eq!(r["sandbox_alive"], true, "{r:#}");
    // An upload past the quota: 507 quota_exceeded naming disk_mb, nothing left behind.
    let big = vec![7u8; 100 << 20];
    let resp = server.put_bytes(&format!("/v1/sandboxes/{id}/files/upload.bin"), big);
    resp.expect_error(507, "quota_exceeded");
    assert!(resp.message().contains("disk_mb = 64"), "{}", resp.text);
    let (status, _) = read_file(&server, &id, "upload.bin");
    assert_eq!(status, 404);
    assert_eq!(text_plain(&server.execute(&id, "6 * 7")), "42");

    // Disk is not memory: a file four times the memory limit fits.
    let roomy = server
        .create_sandbox_with(&json!({ "limits": { "disk_mb": 2048, "memory_mb": 256 } }))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let code = "import os\nchunk = os.urandom(1 << 20)\nwith open('/workspace/big', 'wb') as f:\n    for _ in range(1024):\n        f.write(chunk)\nos.path.getsize('/workspace/big') >> 20";
    let r = server
        .execute_with(&roomy, &json!({ "code": code, "timeout": 120 }))
        .expect(200)
        .clone();
    assert_eq!(text_plain(&r), "1024", "{r:#}");
    assert_eq!(r["sandbox_alive"], true);
}

#[test]
fn pooled_sandboxes_take_the_requested_quota() {
    let server = TestServer::start_with_env(&[("SANDLOT_POOL_SIZE", "2")]);
    // Let the pool fill, then take from it with a small quota.
    std::thread::sleep(Duration::from_secs(2));
    let id = server.create_sandbox_with(&json!({ "limits": { "disk_mb": 32 } }))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let resp = server.put_bytes(
        &format!("/v1/sandboxes/{id}/files/x.bin"),
        vec![1u8; 48 << 20],
    );
    resp.expect_error(507, "quota_exceeded");
    assert!(resp.message().contains("disk_mb = 32"), "{}", resp.text);
}

#[test]
fn delete_removes_the_workspace() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    server
        .put_bytes(&format!("/v1/sandboxes/{id}/files/a.txt"), b"x".to_vec())
        .expect(201);
    assert!(workspace_dir(&server, &id).is_dir());
    server.delete(&format!("/v1/sandboxes/{id}")).expect(204);
    assert!(!workspace_dir(&server, &id).exists());
    server
        .get(&format!("/v1/sandboxes/{id}/files/a.txt"))
        .expect_error(410, "sandbox_gone");
}

/// A `kill -9` of the server: its sandboxes stop with it (nothing runs unsupervised), and the
/// next start reports them `stopped` with their files readable; the next execution restarts
/// each in place with its env and uid. Workspaces no record claims are reclaimed.
#[test]
fn a_server_crash_stops_sandboxes_and_keeps_their_files() {
    let mut server = TestServer::start_with_env(&[("SANDLOT_POOL_SIZE", "0")]);
    let host = HostView::of(&server);
    let id = server.create_sandbox_with(&json!({ "env": { "K": "v" }, "idle_timeout": 3600 }))
        ["id"]
        .as_str()
        .unwrap()
        .to_owned();
    server
        .put_bytes(
            &format!("/v1/sandboxes/{id}/files/up.txt"),
            b"uploaded".to_vec(),
        )
        .expect(201);
    let r = server.execute(&id, "x = 1\nopen('/workspace/made.txt', 'w').write('made')");
    assert_eq!(r["end_state"], "ok", "{r:#}");
    let gone = server.create_sandbox();
    server.delete(&format!("/v1/sandboxes/{gone}")).expect(204);
    // A workspace no record claims, as a crash in the middle of a creation would leave.
    let stray = std::process::Command::new("btrfs")
        .args(["subvolume", "create"])
        .arg(server.data_dir().join("disk/mnt/ws/sb_stray"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    let running = host.sandbox_processes();
    assert!(!running.is_empty());

    server.kill9();
    // Sandboxes stop with the server: nothing runs unsupervised.
    let stopped = common::wait_until(Duration::from_secs(10), || {
        host.sandbox_processes().iter().all(|p| p.zombie)
    });
    assert!(
        stopped,
        "sandbox processes outlived the server: {:#?}",
        host.sandbox_processes()
    );

    server.restart();
    let s = sandbox(&server, &id);
    assert_eq!(s["state"], "stopped", "{s:#}");
    assert_eq!(
        workspaces_on_disk(&server),
        vec![id.clone()],
        "stray workspaces reclaimed"
    );
    assert!(stray, "could not make a stray subvolume");
    let listed = server.get("/v1/sandboxes").expect(200)["sandboxes"].clone();
    assert!(listed
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["id"] == id.as_str()));
    assert_eq!(
        read_file(&server, &id, "up.txt"),
        (200, b"uploaded".to_vec())
    );
    assert_eq!(read_file(&server, &id, "made.txt"), (200, b"made".to_vec()));
    let files = server
        .get(&format!("/v1/sandboxes/{id}/files"))
        .expect(200)
        .clone();
    assert_eq!(
        files["entries"].as_array().map(Vec::len),
        Some(2),
        "{files:#}"
    );

    // The next execution restarts it in place: same env, same uid (its files are still its
    // own), fresh Python state.
    let r = server
        .execute_with(&id, &json!({ "code": "import os\n(os.environ['K'], os.stat('made.txt').st_uid, 'x' in globals())" }))
        .expect(200)
        .clone();
    assert_eq!(text_plain(&r), "('v', 1000, False)", "{r:#}");
    assert_eq!(
        r["restarted"],
        json!({ "reason": "server restarted", "lost": ["python state", "bash session"] })
    );
    let s = sandbox(&server, &id);
    assert_eq!(s["state"], "running");
    assert_eq!(s["restart_count"], 1);
    assert_eq!(s["last_restart"]["reason"], "server restarted");

    // A graceful stop keeps it too.
    server.restart();
    assert_eq!(sandbox(&server, &id)["state"], "stopped");
    assert_eq!(read_file(&server, &id, "made.txt"), (200, b"made".to_vec()));
    server.delete(&format!("/v1/sandboxes/{id}")).expect(204);
    assert!(workspaces_on_disk(&server).is_empty());
    assert_nothing_left(server, 0);
}

/// Uploads are written aside and renamed into place: a download racing uploads of the same
/// file always gets one whole version, its body as long as its `Content-Length`.
#[test]
fn downloads_racing_uploads_see_whole_files() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let path = format!("/v1/sandboxes/{id}/files/race.bin");
    let versions: Vec<Vec<u8>> = (0..4u8)
        .map(|v| vec![b'a' + v; (1 + v as usize) << 20])
        .collect();
    server.put_bytes(&path, versions[0].clone()).expect(201);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (url, stop, versions) = (server.url().to_string(), stop.clone(), versions.clone());
        let path = path.clone();
        let client = server.client().clone();
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                i += 1;
                let body = versions[i % versions.len()].clone();
                let r = client
                    .put(format!("{url}{path}"))
                    .body(body)
                    .send()
                    .unwrap();
                assert_eq!(r.status().as_u16(), 201);
            }
            i
        })
    };
    let mut reads = 0;
    let deadline = Instant::now() + Duration::from_secs(6);
    while Instant::now() < deadline {
        let (status, headers, body) = server.get_bytes(&path);
        assert_eq!(status, 200);
        let declared: usize = headers["content-length"].to_str().unwrap().parse().unwrap();
        assert_eq!(
            body.len(),
            declared,
            "a body shorter than its Content-Length"
        );
        assert!(
            versions.contains(&body),
            "a download saw a mix of versions ({} bytes, first {:?})",
            body.len(),
            body.first()
        );
        reads += 1;
    }
    stop.store(true, Ordering::SeqCst);
    let writes = writer.join().unwrap();
    // Enough of each to have raced: a debug build scans and hashes every download (a 4 MiB
    // one takes about a second there on a loaded machine), so counts stay small.
    assert!(reads >= 2 && writes >= 2, "reads {reads}, writes {writes}");
    // No upload's temporary file is left behind.
    let listing = server
        .get(&format!("/v1/sandboxes/{id}/files"))
        .expect(200)
        .clone();
    assert!(
        !listing.to_string().contains(".sandlot-upload-"),
        "{listing}"
    );
}
