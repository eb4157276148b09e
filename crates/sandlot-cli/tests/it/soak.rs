//! Soak: the load under which issue 9 found sandboxes leaking, as an operator would run it, and
//! bounded to about a minute. Three clients run a short cell in random sandboxes of a set of
//! ten while a fourth replaces one sandbox of the set every 20 ms (creates a new one, deletes a
//! random old one) for 100 rounds; meanwhile a fifth uploads a file into random sandboxes and a
//! sixth downloads it. Every request must be answered with a status that fits the race it ran
//! into, every download must be whole (an upload is atomic: a reader gets the old file or the
//! new one), and once everything is deleted the host must be back at its baseline: the
//! server's processes and the processes running as its sandboxes' uids exactly those of its
//! warm pool, no zombie, no cgroup of a deleted sandbox. Then the server stops and nothing of
//! any sandbox is left at all.
//!
//! The leak this reproduces: 2–6 sandbox processes per run remained as children of the server,
//! in the root memory and pids cgroups, with sandbox uids, listed by no API.

use crate::common;

use common::{descendants, wait_until, HostProc, HostView, Proc, TestServer};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Sandboxes the warm pool keeps booted.
const POOL: usize = 2;
/// Sandboxes the clients work in at any time.
const SET: usize = 10;
/// Replacements (create one, delete one).
const ROUNDS: usize = 100;
/// The replacement loop must finish within this; the soak is bounded.
const ROUNDS_DEADLINE: Duration = Duration::from_secs(75);
/// How long the host may take to settle after the last delete (pool refills, reaping).
const SETTLE: Duration = Duration::from_secs(20);
/// The uploader's and the downloader's pause between requests: the file race stays frequent
/// and the two leave the CPU to the replacements.
const PAUSE: Duration = Duration::from_millis(5);
/// The file the uploader writes and the downloader reads.
const FILE: &str = "soak.bin";

/// A tiny xorshift generator: the soak needs no statistical quality, only variety.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The `n`th upload's content: one byte value repeated, at one of seven lengths, so a body cut
/// short or mixed from two uploads is told from any whole one.
fn content(n: u64) -> Vec<u8> {
    vec![(n % 251) as u8; (64 << 10) + (n % 7) as usize * (8 << 10)]
}

fn is_whole(body: &[u8]) -> bool {
    let whole_len = (0..7).any(|i| body.len() == (64 << 10) + i * (8 << 10));
    whole_len && body.iter().all(|b| *b == body[0])
}

/// A client error with its causes (`error sending request: connection closed before message
/// completed`), without the URL.
fn chain(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut out = e.to_string();
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        out.push_str(&format!(": {c}"));
        cause = c.source();
    }
    out
}

/// What each kind of request was answered, by answer (`"200"`, `"200 killed"`, `"no answer:
/// …"`).
type Tally = BTreeMap<String, usize>;

fn count(tally: &mut Tally, answer: String) {
    *tally.entry(answer).or_default() += 1;
}

/// The host's side of the server at one moment.
#[derive(Debug)]
struct Snapshot {
    /// Processes descending from the server (zygotes and sandboxes).
    server_descendants: Vec<Proc>,
    /// Processes running as the server's sandbox uids (not its zygotes'), zombies included.
    sandbox_processes: Vec<HostProc>,
    /// Sandbox ids with a cgroup in some hierarchy.
    cgroup_ids: BTreeSet<String>,
    /// Every process on the host (informational: other work shares the machine).
    host_total: usize,
}

impl Snapshot {
    fn take(server: &TestServer, host: &HostView) -> Snapshot {
        let cgroup_ids = host
            .sandbox_cgroups()
            .into_iter()
            .filter_map(|c| c.split_once(':').map(|(_, id)| id.to_string()))
            .collect();
        Snapshot {
            server_descendants: descendants(server.pid()),
            sandbox_processes: host.sandbox_processes(),
            cgroup_ids,
            host_total: std::fs::read_dir("/proc")
                .map(|d| {
                    d.flatten()
                        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
                        .count()
                })
                .unwrap_or(0),
        }
    }

    /// Sandbox processes that are zombies or outside a sandbox cgroup of this server (in the
    /// memory or pids hierarchy): the shape of the leak.
    fn misplaced(&self, host: &HostView) -> Vec<&HostProc> {
        let prefix = format!("/{}/sb_", host.cgroup_rel.display());
        self.sandbox_processes
            .iter()
            .filter(|p| {
                p.zombie
                    || !p.memory_cgroup.starts_with(&prefix)
                    || !p.pids_cgroup.starts_with(&prefix)
            })
            .collect()
    }

    /// Whether every sandbox with a cgroup has processes, and all as many (pooled sandboxes
    /// that finished booting).
    fn evenly_spread(&self, host: &HostView) -> bool {
        let prefix = format!("/{}/", host.cgroup_rel.display());
        let mut per_sandbox: BTreeMap<&str, usize> =
            self.cgroup_ids.iter().map(|id| (id.as_str(), 0)).collect();
        for p in &self.sandbox_processes {
            let id = p
                .memory_cgroup
                .strip_prefix(&prefix)
                .and_then(|rest| rest.split('/').next());
            if let Some(id) = id {
                if let Some(n) = per_sandbox.get_mut(id) {
                    *n += 1;
                }
            }
        }
        let counts: BTreeSet<usize> = per_sandbox.values().copied().collect();
        counts.len() == 1 && !counts.contains(&0)
    }

    /// Zombies among the server's descendants.
    fn zombies(&self) -> Vec<HostProc> {
        self.server_descendants
            .iter()
            .filter_map(|p| HostProc::read(p.pid))
            .filter(|p| p.zombie)
            .collect()
    }
}

#[test]
fn deletes_racing_executions_uploads_and_downloads_leave_the_host_at_baseline() {
    // The machine to itself, as when this was a test binary of its own: the 100 rounds have a
    // deadline, and the load of this soak would slow a neighbour's timed assertions.
    let _machine = common::serial();
    let pool = POOL.to_string();
    let server = TestServer::start_with_env(&[("SANDLOT_POOL_SIZE", pool.as_str())]);
    let host = HostView::of(&server);

    // The baseline: the warm pool booted, nothing handed out, and settled (a pooled sandbox
    // still booting has fewer processes than a booted one).
    let mut last: Option<(usize, usize)> = None;
    let pool_full = wait_until(Duration::from_secs(60), || {
        std::thread::sleep(Duration::from_millis(400));
        let s = Snapshot::take(&server, &host);
        let counts = (s.sandbox_processes.len(), s.server_descendants.len());
        let ready = s.cgroup_ids.len() == POOL
            && s.misplaced(&host).is_empty()
            && s.evenly_spread(&host)
            && last == Some(counts);
        last = Some(counts);
        ready
    });
    let baseline = Snapshot::take(&server, &host);
    assert!(
        pool_full && !baseline.sandbox_processes.is_empty(),
        "the warm pool never filled: {baseline:#?}"
    );
    let pooled_at_start = baseline.cgroup_ids.clone();
    eprintln!(
        "baseline: {} server descendants, {} sandbox processes in {} pooled sandboxes, {} host processes",
        baseline.server_descendants.len(),
        baseline.sandbox_processes.len(),
        POOL,
        baseline.host_total
    );

    // Every id the API handed out, to tell a leaked sandbox from a pooled one afterwards.
    let handed_out: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let create = |handed_out: &Mutex<BTreeSet<String>>| {
        let id = server.create_sandbox();
        handed_out.lock().unwrap().insert(id.clone());
        id
    };
    let ids: Arc<Mutex<Vec<String>>> =
        Arc::new(Mutex::new((0..SET).map(|_| create(&handed_out)).collect()));
    let done = Arc::new(AtomicBool::new(false));
    let url = server.url().to_owned();
    let client = || server.client().clone();
    let pick = |ids: &Mutex<Vec<String>>, rng: &mut Rng, among: usize| {
        let ids = ids.lock().unwrap();
        ids[rng.below(among.min(ids.len()))].clone()
    };

    let mut clients = Vec::new();
    for seed in 0..3u64 {
        let (ids, done, url, client) = (ids.clone(), done.clone(), url.clone(), client());
        clients.push(std::thread::spawn(move || {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let mut tally = Tally::new();
            while !done.load(Ordering::SeqCst) {
                let id = pick(&ids, &mut rng, SET);
                let body = json!({ "code": "import time; time.sleep(0.01); 1+1" });
                let answer = match client
                    .post(format!("{url}/v1/sandboxes/{id}/execute"))
                    .json(&body)
                    .send()
                    .and_then(|r| Ok((r.status().as_u16(), r.json::<Value>()?)))
                {
                    Ok((200, r)) => format!("200 {}", r["end_state"].as_str().unwrap_or("?")),
                    Ok((status, r)) => {
                        format!("{status} {}", r["error"]["code"].as_str().unwrap_or("?"))
                    }
                    Err(e) => format!("no answer: {}", chain(e)),
                };
                count(&mut tally, answer);
            }
            ("execute", tally)
        }));
    }
    // The uploader and the downloader share three slots of the set, so they often meet on the
    // same file.
    {
        let (ids, done, url, client) = (ids.clone(), done.clone(), url.clone(), client());
        clients.push(std::thread::spawn(move || {
            let mut rng = Rng(0x005E_ED0F_0A1D);
            let mut tally = Tally::new();
            let mut n = 0u64;
            while !done.load(Ordering::SeqCst) {
                n += 1;
                let id = pick(&ids, &mut rng, 3);
                let answer = match client
                    .put(format!("{url}/v1/sandboxes/{id}/files/{FILE}"))
                    .body(content(n))
                    .send()
                    .and_then(|r| Ok((r.status().as_u16(), r.json::<Value>()?)))
                {
                    Ok((201, _)) => "201".to_string(),
                    Ok((status, r)) => {
                        format!("{status} {}", r["error"]["code"].as_str().unwrap_or("?"))
                    }
                    Err(e) => format!("no answer: {}", chain(e)),
                };
                count(&mut tally, answer);
                std::thread::sleep(PAUSE);
            }
            ("upload", tally)
        }));
    }
    {
        let (ids, done, url, client) = (ids.clone(), done.clone(), url.clone(), client());
        clients.push(std::thread::spawn(move || {
            let mut rng = Rng(0xD03E_4AD5);
            let mut tally = Tally::new();
            while !done.load(Ordering::SeqCst) {
                let id = pick(&ids, &mut rng, 3);
                let answer = match client
                    .get(format!("{url}/v1/sandboxes/{id}/files/{FILE}"))
                    .send()
                {
                    Err(e) => format!("no answer: {}", chain(e)),
                    Ok(r) => {
                        let status = r.status().as_u16();
                        let length = r.content_length();
                        match (status, r.bytes()) {
                            (_, Err(e)) => format!(
                                "{status} body cut short (Content-Length {}): {}",
                                if length.is_some() { "set" } else { "absent" },
                                chain(e)
                            ),
                            (200, Ok(body)) if is_whole(&body) => "200 whole".to_string(),
                            (200, Ok(body)) if body.is_empty() => "200 empty body".to_string(),
                            (200, Ok(_)) => "200 body not one whole upload".to_string(),
                            (_, Ok(body)) => {
                                let code = serde_json::from_slice::<Value>(&body)
                                    .ok()
                                    .and_then(|v| v["error"]["code"].as_str().map(String::from))
                                    .unwrap_or_else(|| "?".into());
                                format!("{status} {code}")
                            }
                        }
                    }
                };
                count(&mut tally, answer);
                std::thread::sleep(PAUSE);
            }
            ("download", tally)
        }));
    }

    // The fourth client of the issue: one replacement every 20 ms.
    let started = Instant::now();
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let mut deletes = Tally::new();
    let mut rounds = 0;
    while rounds < ROUNDS && started.elapsed() < ROUNDS_DEADLINE {
        let fresh = create(&handed_out);
        let old = {
            let mut ids = ids.lock().unwrap();
            let i = rng.below(ids.len());
            std::mem::replace(&mut ids[i], fresh)
        };
        let d = server.delete(&format!("/v1/sandboxes/{old}"));
        count(&mut deletes, format!("{} {}", d.status, d.code()));
        rounds += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = started.elapsed();
    done.store(true, Ordering::SeqCst);
    let mut answers: BTreeMap<&str, Tally> = BTreeMap::new();
    answers.insert("delete", deletes);
    for c in clients {
        let (kind, tally) = c.join().unwrap();
        answers.insert(kind, tally);
    }
    eprintln!("soak: {rounds} rounds in {took:?}; answers {answers:#?}");
    // Every problem found, so that one run shows them all (the host is checked whatever the
    // answers were).
    let mut problems: Vec<String> = Vec::new();
    if rounds != ROUNDS {
        problems.push(format!(
            "only {rounds} of {ROUNDS} rounds within {ROUNDS_DEADLINE:?}"
        ));
    }

    // Every request answered, each with what its race allows: an execution ran (`ok`) or was
    // cut by the delete (`killed`), or its sandbox was already deleted (410); a file was
    // written or read whole, was not there yet (404), or its sandbox was deleted (410).
    let allowed: BTreeMap<&str, &[&str]> = BTreeMap::from([
        ("delete", &["204 "][..]),
        ("execute", &["200 ok", "200 killed", "410 sandbox_gone"][..]),
        ("upload", &["201", "410 sandbox_gone"][..]),
        (
            "download",
            &["200 whole", "404 file_not_found", "410 sandbox_gone"][..],
        ),
    ]);
    for (kind, tally) in &answers {
        let unexpected: Vec<_> = tally
            .iter()
            .filter(|(answer, _)| !allowed[kind].contains(&answer.as_str()))
            .collect();
        if !unexpected.is_empty() {
            let n: usize = unexpected.iter().map(|(_, n)| **n).sum();
            let total: usize = tally.values().sum();
            let shown: Vec<_> = unexpected.iter().take(12).collect();
            problems.push(format!(
                "{kind}: {n} of {total} answers outside {:?}, e.g. {shown:?}",
                allowed[kind]
            ));
        }
    }
    let ran = answers["execute"].get("200 ok").copied().unwrap_or(0);
    if ran <= 100 {
        problems.push(format!("only {ran} executions ran"));
    }
    let whole = answers["download"].get("200 whole").copied().unwrap_or(0);
    if whole == 0 {
        problems.push("no download found the file whole".into());
    }

    for id in ids.lock().unwrap().iter() {
        let d = server.delete(&format!("/v1/sandboxes/{id}"));
        if d.status != 204 {
            problems.push(format!("final DELETE {id}: {} {}", d.status, d.text));
        }
    }
    let listed = server.get("/v1/sandboxes").expect(200)["sandboxes"].clone();
    if listed != json!([]) {
        problems.push(format!("sandboxes still listed: {listed}"));
    }

    // Back at the baseline once the pool has refilled: as many server descendants and sandbox
    // processes as at the start, all of them in pooled sandboxes' cgroups, no zombie, no cgroup
    // of a sandbox the API handed out.
    let handed_out = handed_out.lock().unwrap().clone();
    let settled = wait_until(SETTLE, || {
        let now = Snapshot::take(&server, &host);
        now.cgroup_ids.len() == POOL
            && now.cgroup_ids.is_disjoint(&handed_out)
            && now.misplaced(&host).is_empty()
            && now.zombies().is_empty()
            && now.sandbox_processes.len() == baseline.sandbox_processes.len()
            && now.server_descendants.len() == baseline.server_descendants.len()
    });
    let end = Snapshot::take(&server, &host);
    eprintln!(
        "after: {} server descendants, {} sandbox processes, {} host processes (baseline {})",
        end.server_descendants.len(),
        end.sandbox_processes.len(),
        end.host_total,
        baseline.host_total
    );
    if !settled {
        let leaked_cgroups: Vec<&String> = end.cgroup_ids.intersection(&handed_out).collect();
        problems.push(format!(
            "not back at the baseline within {SETTLE:?}:\n\
             server descendants {} (baseline {}), sandbox processes {} (baseline {}),\n\
             cgroups of deleted sandboxes {leaked_cgroups:?}, pooled {:?} (at the start {pooled_at_start:?}),\n\
             zombies {:#?},\nmisplaced {:#?}",
            end.server_descendants.len(),
            baseline.server_descendants.len(),
            end.sandbox_processes.len(),
            baseline.sandbox_processes.len(),
            end.cgroup_ids.difference(&handed_out).collect::<Vec<_>>(),
            end.zombies(),
            end.misplaced(&host),
        ));
    }

    // And nothing at all once the server stops.
    let mut server = server;
    let status = server.stop();
    if !status.success() {
        problems.push(format!("sandlot serve exited with {status}"));
    }
    let gone = wait_until(Duration::from_secs(10), || {
        host.sandbox_processes().is_empty() && host.sandbox_cgroups().is_empty()
    });
    if !gone {
        problems.push(format!(
            "after shutdown: processes {:#?}, cgroups {:?}",
            host.sandbox_processes(),
            host.sandbox_cgroups()
        ));
    }
    assert!(
        problems.is_empty(),
        "{} problems:\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}
