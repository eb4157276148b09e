//! Benchmark 20, the console (issue 23): what a person sees in a browser, timed by the browser.
//! Headless Chromium, driven over WebDriver (`webdriver.rs`) on loopback, signs in to the
//! server's `/console` through its sign-in form, then:
//!
//! - **first paint**: N sandboxes exist (created for the benchmark, live or paused, see
//!   `--console-pause`); the Sandboxes page is loaded again and again (each load from
//!   `about:blank`, so each is a navigation of its own) and timed from the navigation's start
//!   (`performance.timeOrigin`) to the `sandlot:list-rendered` mark `sandboxes.js` leaves once
//!   the frame that draws every row has been made; first-contentful-paint and the marks for
//!   "list fetched" and "rows in the document" are read beside it. Every load must show all N
//!   rows, and the page must not have asked for any sandbox one by one.
//! - **live output**: a cell in an open sandbox page prints a line every 50 ms carrying the
//!   sandbox's wall clock (`time.time_ns()`); `sandbox.js` marks when each piece of output is
//!   in the page (`sandlot:output`, with its text); a line's latency is that time
//!   (`performance.timeOrigin + startTime`) minus the time in the line. The sandbox and the
//!   browser run on one host and read one clock (CLOCK_REALTIME; a sandbox's namespaces do not
//!   change it), so the difference is meaningful to well under a millisecond.
//!
//! The floors, in the same run, from the harness's own HTTP client: `GET /v1/sandboxes` with the
//! same N listed (what the page cannot beat), and the same cell's lines read from the execute's
//! SSE stream by a plain client (what the page adds on top of the server's stream).

use crate::bench::{Conditions, Ctx, Watch};
use crate::http::{Conn, Endpoint};
use crate::server;
use crate::stats::{Samples, Summary};
use crate::webdriver::{Browser, BrowserPaths};
use anyhow::{bail, Context};
use serde::Serialize;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The targets, ms.
pub const FIRST_PAINT_TARGET_MS: f64 = 500.0;
pub const LIVE_LINE_TARGET_MS: f64 = 50.0;
/// Threads that create (and pause) the listed sandboxes, and delete them afterwards.
const MAKERS: usize = 2;
/// Lines of the live cell not counted: the first ones race the page's own first paint of the
/// new cell.
const LIVE_WARMUP_LINES: usize = 3;
/// What each live line starts with (then its number and `time.time_ns()`).
const LIVE_TAG: &str = "sandlot-live";

#[derive(Debug, Clone, Serialize)]
pub struct ConsoleResult {
    pub conditions: Conditions,
    /// Chromium's version, as the WebDriver session reported it.
    pub browser: String,
    /// Sandboxes created for the benchmark, and whether they were paused once created.
    pub created: usize,
    pub paused: bool,
    /// Rows the page drew (every timed load drew all of them).
    pub rows: usize,
    /// Requests for one sandbox (`GET /v1/sandboxes/{id}`) the page made while drawing the
    /// list, at most, over the loads (0: one request for the whole list).
    pub row_requests: usize,
    /// Event streams the page asked for and was refused (or that ended) while it drew the
    /// list, over all loads: the page draws the list without its stream and retries it.
    pub streams_refused: usize,
    /// The floor: `GET /v1/sandboxes` from the harness's client, and the body's size.
    pub list_api: Summary,
    pub list_bytes: usize,
    /// Navigation start → first-contentful-paint.
    pub fcp: Summary,
    /// Navigation start → the list arrived (`sandlot:list-fetched`).
    pub list_fetched: Summary,
    /// Navigation start → every row in the document (`sandlot:list-built`).
    pub list_built: Summary,
    /// Navigation start → the frame drawing every row made (`sandlot:list-rendered`): the
    /// first paint the target is about.
    pub first_paint: Summary,
    /// A line printed in the sandbox → in the page (per line).
    pub live_page: Summary,
    /// The same line → read from the SSE stream by the harness's client (the floor).
    pub live_sse: Summary,
}

pub fn console(ctx: &mut Ctx) -> anyhow::Result<ConsoleResult> {
    let o = ctx.opts;
    let n = o.n.iter().copied().max().unwrap_or(1000);
    let paths = BrowserPaths {
        chromium: o.chromium.clone(),
        chromedriver: o.chromedriver.clone(),
    };
    // Before making a thousand sandboxes: a browser that cannot be driven fails the run now.
    let mut browser = Browser::start(&paths, &ctx.work)?;
    eprintln!(
        "[console] chromium {} over WebDriver; making {n} sandboxes{}",
        browser.version,
        if o.console_pause { " (paused)" } else { "" }
    );
    let watch = Watch::start(ctx);
    let endpoint = ctx.server.endpoint();
    let made = make(&endpoint, n, o.console_pause, Duration::from_secs(1800));
    let result = (|| {
        let ids = made.as_ref().map_err(|e| anyhow::anyhow!("{e:#}"))?;
        if let Some(id) = ids.first() {
            ctx.note_instance(id);
        }
        measure(ctx, &mut browser, &endpoint, ids.len())
    })();
    let ids = match made {
        Ok(ids) => ids,
        Err(MakeError { ids, .. }) => ids,
    };
    eprintln!("[console] deleting the {} sandboxes", ids.len());
    let deleted = delete_all(&endpoint, ids);
    let mut r = result?;
    deleted?;
    r.paused = o.console_pause;
    r.browser = browser.version.clone();
    r.conditions = watch.finish(ctx);
    eprintln!(
        "[console] {} rows: first paint p50 {:.1} ms p99 {:.1} ms (FCP p50 {:.1} ms; GET /v1/sandboxes p50 {:.1} ms); live line p50 {:.1} ms p99 {:.1} ms (SSE floor p50 {:.2} ms)",
        r.rows,
        r.first_paint.p50,
        r.first_paint.p99,
        r.fcp.p50,
        r.list_api.p50,
        r.live_page.p50,
        r.live_page.p99,
        r.live_sse.p50
    );
    Ok(r)
}

fn measure(
    ctx: &Ctx,
    browser: &mut Browser,
    endpoint: &Endpoint,
    created: usize,
) -> anyhow::Result<ConsoleResult> {
    let o = ctx.opts;
    let base = format!("http://{}", endpoint.addr);
    let key = endpoint
        .key
        .as_deref()
        .context("the console needs a server with keys (this one runs with SANDLOT_AUTH=off)")?;

    // The floor: the list from a plain client, as many times as the page is loaded.
    let mut c = Conn::new(endpoint);
    let mut list_api = Samples::new();
    let mut list_bytes = 0;
    for i in 0..=o.console_loads {
        let t = Instant::now();
        let r = c.request("GET", "/v1/sandboxes", None)?;
        let d = t.elapsed();
        if r.status != 200 {
            bail!("GET /v1/sandboxes answered {}: {}", r.status, r.text());
        }
        if i > 0 {
            list_api.push(d);
        }
        list_bytes = r.body.len();
    }

    sign_in(browser, &base, key)?;
    eprintln!(
        "[console] signed in; {} loads of the Sandboxes page (after one untimed)",
        o.console_loads
    );
    let (mut fcp, mut fetched, mut built, mut rendered) = (
        Samples::new(),
        Samples::new(),
        Samples::new(),
        Samples::new(),
    );
    let (mut rows, mut row_requests, mut streams_refused) = (usize::MAX, 0, 0);
    for i in 0..=o.console_loads {
        browser.navigate("about:blank")?;
        browser.navigate(&format!("{base}/console"))?;
        let v = browser.wait_for(
            "the Sandboxes page to draw its list",
            LIST_DRAWN,
            &[],
            Duration::from_secs(60),
        )?;
        let ms = |k: &str| {
            v[k].as_f64()
                .with_context(|| format!("the page did not report {k}: {v}"))
        };
        let drew = v["rows"].as_u64().unwrap_or(0) as usize;
        if drew < created {
            bail!("the page drew {drew} rows for {created} sandboxes: {v}");
        }
        rows = rows.min(drew);
        row_requests = row_requests.max(v["row_requests"].as_u64().unwrap_or(0) as usize);
        streams_refused += v["streams_refused"].as_u64().unwrap_or(0) as usize;
        if i == 0 {
            continue;
        }
        rendered.push(Duration::from_secs_f64(ms("rendered")? / 1e3));
        built.push(Duration::from_secs_f64(ms("built")? / 1e3));
        fetched.push(Duration::from_secs_f64(ms("fetched")? / 1e3));
        // Headless Chromium reports first-contentful-paint; a build that does not is not a
        // reason to fail the rest.
        if let Some(f) = v["fcp"].as_f64() {
            fcp.push(Duration::from_secs_f64(f / 1e3));
        }
    }
    let first_paint = rendered.summary();
    eprintln!(
        "[console] first paint with {rows} rows: p50 {:.1} ms p99 {:.1} ms; live output: {} lines 50 ms apart, in the page and from the SSE stream",
        first_paint.p50, first_paint.p99, o.console_lines
    );

    // Live output, on a sandbox of its own (the listed ones may be paused).
    let id = server::create(&mut c)?;
    let live = live_latency(browser, &base, endpoint, &id, o.console_lines);
    let deleted = server::delete(&mut c, &id);
    let (live_page, live_sse) = live?;
    deleted?;
    Ok(ConsoleResult {
        conditions: Conditions::default(),
        browser: String::new(),
        created,
        paused: false,
        rows,
        row_requests,
        streams_refused,
        list_api: list_api.summary(),
        list_bytes,
        fcp: fcp.summary(),
        list_fetched: fetched.summary(),
        list_built: built.summary(),
        first_paint,
        live_page,
        live_sse,
    })
}

/// What the page reports once its list is drawn (null before).
const LIST_DRAWN: &str = "
const at = (n) => { const e = performance.getEntriesByName(n)[0]; return e ? e.startTime : null; };
const rendered = at('sandlot:list-rendered');
if (rendered === null) return null;
const paths = performance.getEntriesByType('resource').map((r) => new URL(r.name).pathname);
const fcp = performance.getEntriesByName('first-contentful-paint')[0];
return {
  rendered,
  built: at('sandlot:list-built'),
  fetched: at('sandlot:list-fetched'),
  fcp: fcp ? fcp.startTime : null,
  rows: document.querySelectorAll('#sandboxes tbody tr').length,
  row_requests: paths.filter((p) => p.startsWith('/v1/sandboxes/')).length,
  // An event stream's request only shows here once it has ended: one that was refused.
  streams_refused: paths.filter((p) => p === '/v1/events').length,
};";

/// Signs in through the page's own form, as a person does: the key is typed into the field
/// and the form posted; the session cookie the server sets is the browser's from then on.
fn sign_in(b: &mut Browser, base: &str, key: &str) -> anyhow::Result<()> {
    b.navigate(&format!("{base}/console"))?;
    b.wait_for(
        "the sign-in page",
        "return document.getElementById('key') !== null",
        &[],
        Duration::from_secs(30),
    )?;
    b.execute(
        "document.getElementById('key').value = arguments[0];
         document.querySelector('form.sign-in').requestSubmit();
         return true;",
        &[json!(key)],
    )?;
    b.wait_for(
        "the Sandboxes page after signing in",
        "return document.getElementById('sandboxes') !== null",
        &[],
        Duration::from_secs(30),
    )
    .context("signing in to the console through its form")?;
    Ok(())
}

/// The cell: `lines` lines, 50 ms apart, each with the sandbox's wall clock in nanoseconds.
fn live_cell(lines: usize) -> String {
    format!(
        "import time\nfor i in range({lines}):\n    print(f'{LIVE_TAG} {{i}} {{time.time_ns()}}', flush=True)\n    time.sleep(0.05)\n"
    )
}

/// Per-line latencies (ms) of the live cell run from the sandbox page, then from a plain SSE
/// client.
fn live_latency(
    b: &mut Browser,
    base: &str,
    endpoint: &Endpoint,
    id: &str,
    lines: usize,
) -> anyhow::Result<(Summary, Summary)> {
    let cell = live_cell(lines);
    let limit = Duration::from_secs(60) + Duration::from_millis(60 * lines as u64);
    b.navigate(&format!("{base}/console/sandboxes/{id}"))?;
    b.wait_for(
        "the sandbox page",
        "return document.querySelectorAll('#facts dd').length > 0",
        &[],
        Duration::from_secs(30),
    )?;
    // Warms the sandbox's interpreter (the first cell imports what the benchmark's uses).
    server::execute(&mut Conn::new(endpoint), id, "import time")?;
    b.execute(
        "document.getElementById('language').value = 'python';
         document.getElementById('code').value = arguments[0];
         document.getElementById('run').requestSubmit();
         return document.getElementById('run-button').disabled;",
        &[json!(cell)],
    )?;
    b.wait_for(
        "the live cell to finish in the page",
        "return !document.getElementById('run-button').disabled",
        &[],
        limit,
    )?;
    let marks = b.execute(
        "return performance.getEntriesByName('sandlot:output')
           .map((e) => [performance.timeOrigin + e.startTime, String(e.detail)]);",
        &[],
    )?;
    let mut seen = vec![None; lines];
    for m in marks.as_array().into_iter().flatten() {
        let (Some(t), Some(text)) = (m[0].as_f64(), m[1].as_str()) else {
            continue;
        };
        note_lines(text, t, &mut seen);
    }
    let page = latencies(&seen, "the page")?;

    let mut seen = vec![None; lines];
    sse_lines(endpoint, id, &cell, limit, &mut seen)?;
    let sse = latencies(&seen, "the SSE stream")?;
    Ok((page, sse))
}

/// Records, for each live line in `text` not seen before, `(at_ms, latency_ms)`.
fn note_lines(text: &str, at_ms: f64, seen: &mut [Option<f64>]) {
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        if parts.next() != Some(LIVE_TAG) {
            continue;
        }
        let (Some(Ok(i)), Some(Ok(ns))) = (
            parts.next().map(str::parse::<usize>),
            parts.next().map(str::parse::<u64>),
        ) else {
            continue;
        };
        if let Some(slot) = seen.get_mut(i) {
            if slot.is_none() {
                *slot = Some(at_ms - ns as f64 / 1e6);
            }
        }
    }
}

/// The latencies of the counted lines; every line must have arrived.
fn latencies(seen: &[Option<f64>], where_: &str) -> anyhow::Result<Summary> {
    let missing = seen.iter().filter(|s| s.is_none()).count();
    if missing > 0 {
        bail!(
            "{missing} of the live cell's {} lines never reached {where_}",
            seen.len()
        );
    }
    let v: Vec<f64> = seen
        .iter()
        .skip(LIVE_WARMUP_LINES)
        .flatten()
        .copied()
        .collect();
    Ok(Summary::of(&v))
}

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
        * 1e3
}

/// Runs `code` with `stream: true` from a plain HTTP client and notes when each stdout line
/// is read off the SSE stream.
fn sse_lines(
    endpoint: &Endpoint,
    id: &str,
    code: &str,
    limit: Duration,
    seen: &mut [Option<f64>],
) -> anyhow::Result<()> {
    let body = serde_json::to_vec(&json!({"code": code, "language": "python", "stream": true}))?;
    let s = TcpStream::connect_timeout(&endpoint.addr, Duration::from_secs(5))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(limit))?;
    let mut req = format!(
        "POST /v1/sandboxes/{id}/execute HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        endpoint.addr,
        body.len()
    );
    if let Some(k) = &endpoint.key {
        req.push_str(&format!("Authorization: Bearer {k}\r\n"));
    }
    req.push_str("\r\n");
    let mut w = s.try_clone()?;
    w.write_all(req.as_bytes())?;
    w.write_all(&body)?;
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line)?;
    if line.split_whitespace().nth(1) != Some("200") {
        bail!("the streaming execute answered {}", line.trim());
    }
    let mut chunked = false;
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            bail!("the connection closed inside the headers");
        }
        let h = line.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((name, value)) = h.split_once(':') {
            if name.eq_ignore_ascii_case("transfer-encoding")
                && value.trim().eq_ignore_ascii_case("chunked")
            {
                chunked = true;
            }
        }
    }
    let t = Instant::now();
    let mut events = SseBuffer::default();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if t.elapsed() > limit {
            bail!("the SSE stream did not end in {limit:?}");
        }
        let piece = if chunked {
            line.clear();
            r.read_line(&mut line)?;
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                .context("bad chunk size")?;
            if size == 0 {
                break;
            }
            let mut chunk = vec![0u8; size + 2];
            r.read_exact(&mut chunk)?;
            chunk.truncate(size);
            chunk
        } else {
            let k = r.read(&mut buf)?;
            if k == 0 {
                break;
            }
            buf[..k].to_vec()
        };
        let at = now_ms();
        for (name, data) in events.push(&piece) {
            if name == "stdout" {
                let v: Value = serde_json::from_str(&data).unwrap_or_default();
                note_lines(v["text"].as_str().unwrap_or_default(), at, seen);
            } else if name == "done" {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Splits a text/event-stream into `(event name, data)` as its bytes arrive.
#[derive(Default)]
struct SseBuffer {
    text: String,
}

impl SseBuffer {
    fn push(&mut self, bytes: &[u8]) -> Vec<(String, String)> {
        self.text
            .push_str(&String::from_utf8_lossy(bytes).replace("\r\n", "\n"));
        let mut out = Vec::new();
        while let Some(end) = self.text.find("\n\n") {
            let block: String = self.text.drain(..end + 2).collect();
            let (mut name, mut data) = ("message".to_owned(), Vec::new());
            for l in block.lines() {
                if let Some(v) = l.strip_prefix("event:") {
                    name = v.trim().to_owned();
                } else if let Some(v) = l.strip_prefix("data:") {
                    data.push(v.strip_prefix(' ').unwrap_or(v).to_owned());
                }
            }
            if !data.is_empty() {
                out.push((name, data.join("\n")));
            }
        }
        out
    }
}

/// What `make` had made when it failed, so those are deleted too.
struct MakeError {
    ids: Vec<String>,
    error: anyhow::Error,
}

impl std::fmt::Display for MakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "making the listed sandboxes stopped after {}: {:#}",
            self.ids.len(),
            self.error
        )
    }
}

/// Creates `n` sandboxes (and pauses each, with `pause`), `MAKERS` at a time.
fn make(to: &Endpoint, n: usize, pause: bool, limit: Duration) -> Result<Vec<String>, MakeError> {
    let left = Arc::new(Mutex::new(n));
    let t = Instant::now();
    let workers: Vec<_> = (0..MAKERS)
        .map(|_| {
            let (left, to) = (left.clone(), to.clone());
            std::thread::spawn(move || {
                let mut c = Conn::new(&to);
                let mut ids = Vec::new();
                loop {
                    {
                        let mut l = left.lock().unwrap_or_else(|p| p.into_inner());
                        if *l == 0 {
                            return (ids, None);
                        }
                        *l -= 1;
                    }
                    if t.elapsed() > limit {
                        return (ids, Some(anyhow::anyhow!("it took longer than {limit:?}")));
                    }
                    let made = server::create(&mut c).and_then(|id| {
                        ids.push(id.clone());
                        if pause {
                            let r =
                                c.post_json(&format!("/v1/sandboxes/{id}/pause"), &json!({}))?;
                            if r.status != 200 {
                                bail!("pause answered {}: {}", r.status, r.text());
                            }
                        }
                        Ok(())
                    });
                    if let Err(e) = made {
                        return (ids, Some(e));
                    }
                }
            })
        })
        .collect();
    let mut ids = Vec::new();
    let mut error = None;
    for w in workers {
        match w.join() {
            Ok((made, e)) => {
                ids.extend(made);
                if error.is_none() {
                    error = e;
                }
            }
            Err(_) => error = Some(anyhow::anyhow!("a maker thread panicked")),
        }
    }
    match error {
        None => Ok(ids),
        Some(error) => Err(MakeError { ids, error }),
    }
}

/// Deletes the sandboxes, `MAKERS` at a time; the first failure is the error (all are tried).
fn delete_all(to: &Endpoint, ids: Vec<String>) -> anyhow::Result<()> {
    let queue = Arc::new(Mutex::new(ids));
    let workers: Vec<_> = (0..MAKERS)
        .map(|_| {
            let (queue, to) = (queue.clone(), to.clone());
            std::thread::spawn(move || {
                let mut c = Conn::new(&to);
                let mut first = None;
                loop {
                    let next = queue.lock().unwrap_or_else(|p| p.into_inner()).pop();
                    let Some(id) = next else { return first };
                    if let Err(e) = server::delete(&mut c, &id) {
                        first.get_or_insert(e);
                    }
                }
            })
        })
        .collect();
    let mut first = None;
    for w in workers {
        match w.join() {
            Ok(Some(e)) => {
                first.get_or_insert(e);
            }
            Ok(None) => {}
            Err(_) => {
                first.get_or_insert(anyhow::anyhow!("a deleting thread panicked"));
            }
        }
    }
    first.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_lines_are_timed_once_each() {
        let mut seen = vec![None; 3];
        // Two lines in one piece, then a repeat of one and a stranger.
        note_lines(
            "sandlot-live 0 1000000000\nsandlot-live 1 1010000000\n",
            1005.0,
            &mut seen,
        );
        note_lines(
            "sandlot-live 1 1010000000\nnoise\nsandlot-live x 1\n",
            2000.0,
            &mut seen,
        );
        assert_eq!(seen[0], Some(5.0));
        assert_eq!(seen[1], Some(-5.0));
        assert_eq!(seen[2], None);
        assert!(latencies(&seen, "the page")
            .unwrap_err()
            .to_string()
            .contains("1 of"));
        note_lines("sandlot-live 2 1000000000 extra", 1001.5, &mut seen);
        note_lines("sandlot-live 99 1", 0.0, &mut seen);
        // The first LIVE_WARMUP_LINES are not counted.
        assert_eq!(latencies(&seen, "x").unwrap().n, 0);
    }

    #[test]
    fn sse_events_are_split_across_pieces() {
        let mut b = SseBuffer::default();
        assert!(b.push(b"event: stdout\ndata: {\"text\":").is_empty());
        let got = b.push(b"\"a\"}\n\n: keep-alive\n\nevent: done\r\ndata: {}\r\n\r\n");
        assert_eq!(
            got,
            vec![
                ("stdout".to_owned(), "{\"text\":\"a\"}".to_owned()),
                ("done".to_owned(), "{}".to_owned())
            ]
        );
    }

    #[test]
    fn the_cell_prints_what_is_parsed() {
        let cell = live_cell(7);
        assert!(cell.contains("range(7)"), "{cell}");
        assert!(
            cell.contains("print(f'sandlot-live {i} {time.time_ns()}', flush=True)"),
            "{cell}"
        );
    }
}
