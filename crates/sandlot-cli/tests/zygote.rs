//! The zygote's life: sandboxes outlive it, it comes back when killed (also in the middle of
//! creations), and a burst of creations larger than the queue is refused cleanly.

mod common;

use common::{alive, descendants, wait_until, Proc, TestServer};
use serde_json::json;
use std::time::Duration;

/// The server's zygotes: processes running `zygote.py` in the host's pid namespace whose parent
/// is the server, each with its start time, so a later process that reuses the pid is not taken
/// for it. (Sandboxes are forks of a zygote too: each lives in a pid namespace of its own, so its
/// `NSpid` line has two entries, except for a moment while the zygote's fresh child has not
/// unshared yet; that child's parent is the zygote.)
fn zygotes(server: &TestServer) -> Vec<Proc> {
    descendants(server.pid())
        .into_iter()
        .filter(|p| {
            let pid = p.pid;
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let nspids = status
                .lines()
                .find(|l| l.starts_with("NSpid:"))
                .map(|l| l.split_whitespace().count() - 1)
                .unwrap_or(0);
            let ppid = status
                .lines()
                .find(|l| l.starts_with("PPid:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u32>().ok());
            String::from_utf8_lossy(&cmd).contains("zygote.py")
                && nspids == 1
                && ppid == Some(server.pid())
        })
        .collect()
}

/// SIGKILLs a zygote and waits until it is gone, so a test never goes on believing it killed
/// one that still runs.
fn kill9(zygote: Proc) {
    sigkill(zygote);
    wait_gone(zygote);
}

fn sigkill(zygote: Proc) {
    // SAFETY: kill has no memory effects.
    let rc = unsafe { libc::kill(zygote.pid as i32, libc::SIGKILL) };
    assert_eq!(
        rc,
        0,
        "kill {}: {}",
        zygote.pid,
        std::io::Error::last_os_error()
    );
}

fn wait_gone(zygote: Proc) {
    assert!(
        wait_until(Duration::from_secs(30), || !alive(zygote)),
        "zygote {} survived SIGKILL",
        zygote.pid
    );
}

#[test]
fn sandboxes_outlive_a_killed_zygote_and_it_restarts() {
    let server = TestServer::start();
    let before = server.create_sandbox();
    let r = server.execute(&before, "x = 41");
    assert_eq!(r["end_state"], "ok", "{r}");
    let z = zygotes(&server);
    assert_eq!(z.len(), 1, "one zygote for the default template: {z:?}");
    kill9(z[0]);

    // The sandbox forked before does not depend on it.
    let r = server.execute(&before, "x + 1");
    assert_eq!(r["result"]["text/plain"], "42", "{r}");

    // A new zygote comes up (by itself, or on the next creation) and creations work.
    for _ in 0..5 {
        let id = server.create_sandbox();
        let r = server.execute(&id, "import numpy; int(numpy.arange(4).sum())");
        assert_eq!(r["result"]["text/plain"], "6", "{r}");
    }
    assert!(
        wait_until(Duration::from_secs(30), || {
            let now = zygotes(&server);
            now.len() == 1 && now[0] != z[0]
        }),
        "a new zygote replaced the killed one"
    );
}

#[test]
fn zygote_killed_during_a_burst_of_creations() {
    let server = TestServer::start();
    // The zygote is up before the burst: killing it below is what the test is about, so an
    // empty list there must fail rather than pass as "survived a kill" that never happened.
    assert!(
        wait_until(Duration::from_secs(30), || !zygotes(&server).is_empty()),
        "no zygote before the burst"
    );
    let url = server.url().to_string();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let url = url.clone();
            let client = server.client().clone();
            std::thread::spawn(move || {
                let resp = client
                    .post(format!("{url}/v1/sandboxes"))
                    .json(&json!({}))
                    .timeout(Duration::from_secs(120))
                    .send()
                    .expect("request");
                (resp.status().as_u16(), resp.text().unwrap_or_default())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(20));
    let killed = zygotes(&server);
    assert!(!killed.is_empty(), "no zygote to kill during the burst");
    for z in &killed {
        sigkill(*z);
    }
    // The kill landed while creations were still under way (else it tested a plain restart).
    let in_flight = threads.iter().filter(|t| !t.is_finished()).count();
    assert!(in_flight > 0, "the whole burst was over before the kill");
    for z in &killed {
        wait_gone(*z);
    }
    for t in threads {
        let (status, body) = t.join().expect("thread");
        // Each creation either succeeded (a retry on a restarted zygote) or failed cleanly
        // with a JSON error: never a hang, never a crash.
        assert!(
            status == 201 || status == 500 || status == 503,
            "unexpected {status}: {body}"
        );
        let v: serde_json::Value = serde_json::from_str(&body).expect("JSON body");
        if status != 201 {
            assert!(v["error"]["code"].is_string(), "{v}");
        }
    }
    // Afterwards the server is healthy and creates sandboxes again.
    let id = server.create_sandbox();
    let r = server.execute(&id, "1 + 1");
    assert_eq!(r["result"]["text/plain"], "2", "{r}");
}
