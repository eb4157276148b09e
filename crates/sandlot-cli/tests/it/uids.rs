//! Uids live as long as their processes (issue 18), against the real server, read from the
//! host's `/proc` as root: a template whose setup double-forks a daemon is re-posted (the old
//! zygote retired), then 200 sandboxes are created; the old zygote's processes, daemon included,
//! are dead, and no sandbox ever runs as a uid any of them had, nor as a uid another sandbox of
//! the run had (freed uids are quarantined). `/metrics` accounts for every uid of the block.

use crate::common;

use common::{alive, wait_until, HostProc, HostView, Proc, TestServer};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const TEMPLATE: &str = "uidtest";
/// Longest wait for the template (no imports: a zygote that runs a short setup) on a loaded
/// two-core machine.
const BUILD_TIMEOUT: Duration = Duration::from_secs(180);
const SANDBOXES: usize = 200;
/// Sandboxes alive at once: the older ones are deleted, so their uids are freed during the
/// run and would be handed out again if freed uids were not quarantined.
const WINDOW: usize = 8;
/// Offsets of the server's uid block (`sandlot-runtime/src/uids.rs`).
const SANDBOX_RANGE: std::ops::RangeInclusive<u32> = 1..=0xDFFF;
const ZYGOTE_RANGE: std::ops::RangeInclusive<u32> = 0xE000..=0xEFFF;

/// A setup that double-forks a daemon (own session, stdio on /dev/null, named `uid-daemon`)
/// that sleeps forever, and leaves `version` for its sandboxes.
fn setup(version: u32) -> String {
    format!(
        r#"import os
def _daemon():
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        try:
            with open("/proc/self/comm", "w") as f:
                f.write("uid-daemon")
        except OSError:
            import ctypes
            ctypes.CDLL(None).prctl(15, b"uid-daemon", 0, 0, 0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, 4096)
        import time
        while True:
            time.sleep(3600)
    os.waitpid(pid, 0)
_daemon()
version = {version}
"#
    )
}

/// Posts the template and waits until it is ready; returns it.
fn post_ready(server: &TestServer, version: u32) -> Value {
    let spec = json!({"name": TEMPLATE, "imports": [], "setup": setup(version)});
    server.post("/v1/templates", &spec).expect(202);
    let deadline = Instant::now() + BUILD_TIMEOUT;
    loop {
        let t = server
            .get(&format!("/v1/templates/{TEMPLATE}"))
            .expect(200)
            .clone();
        if t["status"] == "ready" && t["spec"]["setup"] == spec["setup"] {
            return t;
        }
        assert_ne!(t["status"], "failed", "{t}");
        assert!(
            Instant::now() < deadline,
            "template not ready after {BUILD_TIMEOUT:?}: {t}\nserver stderr:\n{}",
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// This very process (pid and start time), if it exists.
fn proc_of(pid: u32) -> Option<Proc> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let start_time = rest.split_whitespace().nth(19)?.parse().ok()?;
    Some(Proc { pid, start_time })
}

/// Every host process, with what /proc says of it.
fn host_processes() -> Vec<(Proc, HostProc)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((proc_of(pid)?, HostProc::read(pid)?)))
        .collect()
}

/// Whether `p` is in one of the template's zygote groups (any version) of this server.
fn in_template_zygote(view: &HostView, p: &HostProc) -> bool {
    let group = view.cgroup_rel.join(format!("zygote-{TEMPLATE}"));
    p.memory_cgroup
        .contains(&format!("/{}", group.to_string_lossy()))
}

/// The template's zygote groups in the memory hierarchy (the unified one on v2).
fn zygote_groups(view: &HostView) -> Vec<String> {
    let dir = [
        PathBuf::from("/sys/fs/cgroup/memory"),
        "/sys/fs/cgroup".into(),
    ]
    .into_iter()
    .map(|h| h.join(&view.cgroup_rel))
    .find(|d| d.is_dir())
    .expect("the server's cgroup directory");
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("zygote-{TEMPLATE}")))
        .collect();
    out.sort();
    out
}

/// The host uids the processes of sandbox `id` run as (read from its cgroup membership).
fn sandbox_uids(id: &str) -> HashSet<u32> {
    host_processes()
        .into_iter()
        .filter(|(_, p)| p.memory_cgroup.ends_with(&format!("/{id}")) && !p.zombie)
        .map(|(_, p)| p.uid)
        .collect()
}

/// The value of one sample of the OpenMetrics text, e.g. `sandlot_uids_free{range="zygote"}`.
fn sample(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{series} is not in /metrics:\n{text}"))
        .trim()
        .parse::<f64>()
        .unwrap() as u64
}

#[test]
fn daemon_survives_retirement_without_sharing_a_uid_with_any_sandbox() {
    // The machine to itself, as when this was a test binary of its own: 200 sandboxes against
    // waits bounded for a two-core machine, a load that would slow a neighbour's timed assertions.
    let _machine = common::serial();
    let began = Instant::now();
    let server = TestServer::start();
    let view = HostView::of(&server);
    let offset = |uid: u32| uid.wrapping_sub(view.uid_base);

    let v1 = post_ready(&server, 1);
    // A sandbox of the first version, alive across the retirement.
    let s0 = server.create_sandbox_with(&json!({"template": TEMPLATE}));
    let s0 = s0["id"].as_str().unwrap().to_owned();
    let r = server.execute(&s0, "version");
    assert_eq!(r["result"]["text/plain"], "1", "{r}");

    // The first zygote and what its setup left running, as the host sees them.
    let mut old: Vec<(Proc, HostProc)> = Vec::new();
    assert!(
        wait_until(Duration::from_secs(20), || {
            old = host_processes()
                .into_iter()
                .filter(|(_, p)| in_template_zygote(&view, p) && !p.zombie)
                .collect();
            old.iter().any(|(_, p)| p.comm == "uid-daemon")
        }),
        "the setup's daemon never showed up in the zygote's group: {old:?}"
    );
    let old_uids: HashSet<u32> = old.iter().map(|(_, p)| p.uid).collect();
    for uid in &old_uids {
        assert!(
            ZYGOTE_RANGE.contains(&offset(*uid)),
            "a zygote process runs as {uid} (offset {:#x}), outside the zygotes' range: {old:?}",
            offset(*uid)
        );
    }
    let daemon = old.iter().find(|(_, p)| p.comm == "uid-daemon").unwrap();
    assert_eq!(zygote_groups(&view).len(), 1, "{:?}", zygote_groups(&view));

    // Re-posted: the first zygote is retired.
    let v2 = post_ready(&server, 2);
    assert_ne!(v1["version"], v2["version"]);
    assert!(
        wait_until(Duration::from_secs(15), || old
            .iter()
            .all(|(p, _)| !alive(*p))),
        "processes of the retired zygote still run: {:?}",
        old.iter()
            .filter(|(p, _)| alive(*p))
            .map(|(_, h)| h)
            .collect::<Vec<_>>()
    );
    assert!(!alive(daemon.0), "the daemon outlived its zygote");
    // Its group is gone; the new zygote has its own.
    assert!(
        wait_until(Duration::from_secs(5), || zygote_groups(&view).len() == 1),
        "{:?}",
        zygote_groups(&view)
    );
    // The sandbox of the first version lives on.
    let r = server.execute(&s0, "version");
    assert_eq!(r["result"]["text/plain"], "1", "{r}");
    let s0_uids = sandbox_uids(&s0);
    assert_eq!(s0_uids.len(), 1, "{s0_uids:?}");

    let live_old_uids = || -> HashSet<u32> {
        old.iter()
            .filter(|(p, _)| alive(*p))
            .map(|(_, h)| h.uid)
            .collect()
    };
    // Uid -> the sandbox that had it.
    let mut had: HashMap<u32, String> = s0_uids.iter().map(|u| (*u, s0.clone())).collect();
    let mut window: VecDeque<String> = VecDeque::new();
    for i in 0..SANDBOXES {
        let sb = server.create_sandbox_with(&json!({"template": TEMPLATE}));
        let id = sb["id"].as_str().unwrap().to_owned();
        assert_eq!(sb["template_version"], v2["version"], "{sb}");
        let uids = sandbox_uids(&id);
        assert_eq!(uids.len(), 1, "sandbox {id} runs as {uids:?}");
        let uid = *uids.iter().next().unwrap();
        assert!(
            SANDBOX_RANGE.contains(&offset(uid)),
            "sandbox {id} runs as {uid} (offset {:#x}), outside the sandboxes' range",
            offset(uid)
        );
        assert!(
            !old_uids.contains(&uid),
            "sandbox {id} (#{i}) runs as {uid}, a uid of the retired zygote"
        );
        if let Some(before) = had.insert(uid, id.clone()) {
            panic!("sandbox {id} (#{i}) got uid {uid} of sandbox {before}, freed moments ago");
        }
        // Every process of the server's block that is not the old zygote's: none shares a
        // uid with a live process of the old zygote.
        if i % 10 == 0 {
            let live = live_old_uids();
            let olds: HashSet<Proc> = old.iter().map(|(p, _)| *p).collect();
            for (p, h) in host_processes() {
                if view.in_block(h.uid) && !h.zombie && !olds.contains(&p) {
                    assert!(
                        !live.contains(&h.uid),
                        "{h:?} shares its uid with a live process of the retired zygote"
                    );
                }
            }
        }
        window.push_back(id);
        if window.len() > WINDOW {
            let gone = window.pop_front().unwrap();
            server.delete(&format!("/v1/sandboxes/{gone}")).expect(204);
        }
    }
    assert!(live_old_uids().is_empty());

    // The pool on /metrics: every uid of both ranges is free, quarantined or held.
    let r = server.get("/metrics");
    assert_eq!(r.status, 200, "{}", r.text);
    let text = r.text;
    let free_sb = sample(&text, r#"sandlot_uids_free{range="sandbox"}"#);
    let quarantined_sb = sample(&text, r#"sandlot_uids_quarantined{range="sandbox"}"#);
    let held_sb = sample(&text, r#"sandlot_uids_in_use{kind="sandbox"}"#);
    let held_vol = sample(&text, r#"sandlot_uids_in_use{kind="volume"}"#);
    assert_eq!(
        free_sb + quarantined_sb + held_sb + held_vol,
        (*SANDBOX_RANGE.end() - *SANDBOX_RANGE.start() + 1) as u64,
        "{text}"
    );
    // The deleted ones wait out their quarantine; the window, s0 and the pools are held.
    assert!(
        quarantined_sb >= (SANDBOXES - WINDOW) as u64,
        "{quarantined_sb}"
    );
    assert!(held_sb > WINDOW as u64, "{held_sb}");
    let free_z = sample(&text, r#"sandlot_uids_free{range="zygote"}"#);
    let quarantined_z = sample(&text, r#"sandlot_uids_quarantined{range="zygote"}"#);
    let held_z = sample(&text, r#"sandlot_uids_in_use{kind="zygote"}"#);
    assert_eq!(
        free_z + quarantined_z + held_z,
        (*ZYGOTE_RANGE.end() - *ZYGOTE_RANGE.start() + 1) as u64,
        "{text}"
    );
    // The default template's zygote and the new one; the retired one waits.
    assert_eq!(held_z, 2, "{text}");
    assert!(quarantined_z >= 1, "{text}");
    eprintln!(
        "{SANDBOXES} sandboxes after a retirement in {:.1} s",
        began.elapsed().as_secs_f64()
    );
}
