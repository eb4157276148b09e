//! A minimal W3C WebDriver client for the console benchmark: Debian's `chromedriver` started as
//! a child on 127.0.0.1 (a port it picks), driving headless `chromium`, spoken to with the
//! harness's own HTTP client ([`crate::http::Conn`]): a new session, navigate, execute a script,
//! delete the session. No Selenium: the benchmark needs five commands, and every one of them is
//! a JSON POST whose answer is `{"value": …}`.

use crate::http::{Conn, Endpoint};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long chromedriver may take to say which port it listens on.
const DRIVER_START: Duration = Duration::from_secs(30);

/// Why the browser could not be driven. Each says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum WebDriverError {
    /// A program the benchmark needs is not installed (or not where it was said to be).
    #[error(
        "{what} not found at {}: the console benchmark drives Debian's headless chromium \
         (apt-get install {package}; scripts/test installs it) or pass --{flag} PATH",
        path.display()
    )]
    Missing {
        what: &'static str,
        path: PathBuf,
        package: &'static str,
        flag: &'static str,
    },
    /// chromedriver could not be started, or exited, or never said which port it took.
    #[error("chromedriver ({}) did not start: {reason}", path.display())]
    DriverStart { path: PathBuf, reason: String },
    /// chromedriver answered a command with a WebDriver error.
    #[error("WebDriver {command} failed (HTTP {status}): {error}: {message}")]
    Command {
        command: String,
        status: u16,
        error: String,
        message: String,
    },
    /// The connection to chromedriver failed, or it answered something that is not WebDriver.
    #[error("WebDriver {command}: {source:#}")]
    Transport {
        command: String,
        source: anyhow::Error,
    },
    /// A condition polled for in the page did not become true in time.
    #[error("timed out after {after:?} waiting for {what} (the page last answered {last})")]
    Timeout {
        what: String,
        after: Duration,
        last: Value,
    },
}

/// The programs to drive, as given (a bare name is looked up on `PATH`).
#[derive(Debug, Clone)]
pub struct BrowserPaths {
    pub chromium: PathBuf,
    pub chromedriver: PathBuf,
}

/// Finds `p` as given (a path with a slash) or on `PATH` (a bare name).
fn resolve(p: &Path) -> Option<PathBuf> {
    if p.components().count() > 1 || p.is_absolute() {
        return p.is_file().then(|| p.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(p))
        .find(|c| c.is_file())
}

impl BrowserPaths {
    /// Both programs, resolved; the first one missing is the error.
    pub fn check(&self) -> Result<BrowserPaths, WebDriverError> {
        let chromedriver = resolve(&self.chromedriver).ok_or_else(|| WebDriverError::Missing {
            what: "chromedriver",
            path: self.chromedriver.clone(),
            package: "chromium-driver",
            flag: "chromedriver",
        })?;
        let chromium = resolve(&self.chromium).ok_or_else(|| WebDriverError::Missing {
            what: "chromium",
            path: self.chromium.clone(),
            package: "chromium",
            flag: "chromium",
        })?;
        Ok(BrowserPaths {
            chromium,
            chromedriver,
        })
    }
}

/// A running chromedriver with one browser session. Dropping it ends the session and stops
/// the driver (and with it the browser).
pub struct Browser {
    driver: Child,
    conn: Conn,
    session: String,
    /// The browser's version, as the new session reported it.
    pub version: String,
    /// Where the browser keeps its profile (removed with the scratch directory).
    profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver on a port of its choosing and opens a headless session; `scratch`
    /// holds the browser's profile.
    pub fn start(paths: &BrowserPaths, scratch: &Path) -> Result<Browser, WebDriverError> {
        let paths = paths.check()?;
        let profile = tempfile::Builder::new()
            .prefix("chromium-profile-")
            .tempdir_in(scratch)
            .map_err(|e| WebDriverError::DriverStart {
                path: paths.chromedriver.clone(),
                reason: format!("no profile directory in {}: {e}", scratch.display()),
            })?;
        let (driver, addr) = start_driver(&paths.chromedriver)?;
        let mut b = Browser {
            driver,
            conn: Conn::new(&Endpoint::new(addr, None)),
            session: String::new(),
            version: String::new(),
            profile,
        };
        let args = [
            "--headless=new".to_owned(),
            // Root (the benchmark runs as root) cannot use chromium's own sandbox.
            "--no-sandbox".into(),
            "--disable-dev-shm-usage".into(),
            "--disable-gpu".into(),
            "--window-size=1280,1000".into(),
            "--no-first-run".into(),
            "--disable-extensions".into(),
            format!("--user-data-dir={}", b.profile.path().display()),
        ];
        let v = b.command(
            "new session",
            "POST",
            "/session",
            Some(&json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "pageLoadStrategy": "normal",
                "goog:chromeOptions": {
                    "binary": paths.chromium.to_string_lossy(),
                    "args": args,
                },
            }}})),
        )?;
        b.session = v["sessionId"]
            .as_str()
            .ok_or_else(|| WebDriverError::Transport {
                command: "new session".into(),
                source: anyhow::anyhow!("no sessionId in {v}"),
            })?
            .to_owned();
        b.version = v["capabilities"]["browserVersion"]
            .as_str()
            .unwrap_or("unknown")
            .to_owned();
        b.command(
            "timeouts",
            "POST",
            &format!("/session/{}/timeouts", b.session),
            Some(&json!({"pageLoad": 60_000, "script": 60_000})),
        )?;
        Ok(b)
    }

    /// Loads `url` (returns once the page's `load` event has fired).
    pub fn navigate(&mut self, url: &str) -> Result<(), WebDriverError> {
        let path = format!("/session/{}/url", self.session);
        self.command("navigate", "POST", &path, Some(&json!({ "url": url })))?;
        Ok(())
    }

    /// Runs `script` (a function body; `arguments[i]` are `args`) in the page; its return value.
    pub fn execute(&mut self, script: &str, args: &[Value]) -> Result<Value, WebDriverError> {
        let path = format!("/session/{}/execute/sync", self.session);
        self.command(
            "execute script",
            "POST",
            &path,
            Some(&json!({ "script": script, "args": args })),
        )
    }

    /// Polls `script` every 10 ms until it returns something other than null/false, or
    /// `limit` passes. A script error (the page is between documents, or not yet the one the
    /// script expects) counts as "not yet".
    pub fn wait_for(
        &mut self,
        what: &str,
        script: &str,
        args: &[Value],
        limit: Duration,
    ) -> Result<Value, WebDriverError> {
        let t = Instant::now();
        loop {
            let last = match self.execute(script, args) {
                Ok(v) if !(v.is_null() || v == Value::Bool(false)) => return Ok(v),
                Ok(v) => v,
                Err(WebDriverError::Command { error, message, .. }) => {
                    json!({ "error": error, "message": message })
                }
                Err(e) => return Err(e),
            };
            if t.elapsed() > limit {
                return Err(WebDriverError::Timeout {
                    what: what.to_owned(),
                    after: limit,
                    last,
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// One WebDriver command; the `value` of its answer, or its error.
    fn command(
        &mut self,
        command: &str,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, WebDriverError> {
        let transport = |source: anyhow::Error| WebDriverError::Transport {
            command: command.to_owned(),
            source,
        };
        let body = body
            .map(serde_json::to_vec)
            .transpose()
            .map_err(|e| transport(e.into()))?;
        let r = self
            .conn
            .request(method, path, body.as_deref())
            .map_err(transport)?;
        answer(command, r.status, &r.body)
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let path = format!("/session/{}", self.session);
            let _ = self.command("delete session", "DELETE", &path, None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// A WebDriver answer: `{"value": …}` on success, `{"value": {"error", "message"}}` otherwise.
fn answer(command: &str, status: u16, body: &[u8]) -> Result<Value, WebDriverError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| WebDriverError::Transport {
        command: command.to_owned(),
        source: anyhow::anyhow!(
            "HTTP {status}, not JSON ({e}): {}",
            String::from_utf8_lossy(&body[..body.len().min(300)])
        ),
    })?;
    let value = v.get("value").cloned().unwrap_or(Value::Null);
    if (200..300).contains(&status) && value.get("error").is_none() {
        return Ok(value);
    }
    let text = |k: &str| value[k].as_str().unwrap_or_default().to_owned();
    let message = text("message");
    Err(WebDriverError::Command {
        command: command.to_owned(),
        status,
        error: text("error"),
        // chromedriver's messages carry a long native stack trace after the first lines.
        message: message.lines().take(3).collect::<Vec<_>>().join(" "),
    })
}

/// Starts chromedriver on `--port=0` and reads the port it took from its first lines.
fn start_driver(bin: &Path) -> Result<(Child, SocketAddr), WebDriverError> {
    let fail = |reason: String| WebDriverError::DriverStart {
        path: bin.to_path_buf(),
        reason,
    };
    let mut child = Command::new(bin)
        .args(["--port=0", "--allowed-ips=127.0.0.1", "--log-level=WARNING"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| fail(e.to_string()))?;
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        // Drained to the end, so the driver never blocks on a full pipe.
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let t = Instant::now();
    let mut seen = Vec::new();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(fail(format!(
                "it exited with {status}: {}",
                seen.join(" | ")
            )));
        }
        if t.elapsed() > DRIVER_START {
            let _ = child.kill();
            let _ = child.wait();
            return Err(fail(format!(
                "it did not say its port in {DRIVER_START:?}: {}",
                seen.join(" | ")
            )));
        }
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(line) => {
                if let Some(port) = started_port(&line) {
                    return Ok((child, SocketAddr::from(([127, 0, 0, 1], port))));
                }
                seen.push(line);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                std::thread::sleep(Duration::from_millis(20))
            }
        }
    }
}

/// The port in chromedriver's "ChromeDriver was started successfully on port 45901." line.
fn started_port(line: &str) -> Option<u16> {
    line.split_once("started successfully on port ")?
        .1
        .trim()
        .trim_end_matches('.')
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_port_chromedriver_took() {
        assert_eq!(
            started_port("ChromeDriver was started successfully on port 45901."),
            Some(45901)
        );
        assert_eq!(
            started_port("Starting ChromeDriver 148.0 (abc) on port 0"),
            None
        );
    }

    #[test]
    fn a_missing_chromedriver_or_chromium_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let paths = BrowserPaths {
            chromium: dir.path().join("no-chromium"),
            chromedriver: dir.path().join("no-chromedriver"),
        };
        let e = Browser::start(&paths, dir.path()).err().expect("an error");
        assert!(
            matches!(
                e,
                WebDriverError::Missing {
                    what: "chromedriver",
                    ..
                }
            ),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(msg.contains("no-chromedriver"), "{msg}");
        assert!(msg.contains("apt-get install chromium-driver"), "{msg}");
        assert!(msg.contains("--chromedriver"), "{msg}");
        // A driver that is there but a browser that is not: the browser is named.
        let fake = dir.path().join("chromedriver");
        std::fs::write(&fake, "").unwrap();
        let paths = BrowserPaths {
            chromium: "surely-no-such-chromium-on-path".into(),
            chromedriver: fake,
        };
        let msg = paths.check().expect_err("an error").to_string();
        assert!(msg.contains("chromium not found"), "{msg}");
        assert!(msg.contains("apt-get install chromium"), "{msg}");
    }

    #[test]
    fn a_driver_that_exits_at_once_is_a_start_error() {
        // `false` is a program that exits 1 without a word: the error says it exited.
        let Some(f) = resolve(Path::new("false")) else {
            return;
        };
        let e = start_driver(&f).expect_err("an error");
        assert!(matches!(e, WebDriverError::DriverStart { .. }), "{e:?}");
        assert!(e.to_string().contains("exited"), "{e}");
    }

    #[test]
    fn webdriver_errors_carry_their_code_and_first_lines() {
        let body = br#"{"value":{"error":"session not created","message":"session not created: Chrome failed to start\nline2\nline3\n  #0 0x55 <unknown>","stacktrace":"..."}}"#;
        let e = answer("new session", 500, body).expect_err("an error");
        let msg = e.to_string();
        assert!(msg.contains("HTTP 500"), "{msg}");
        assert!(
            msg.contains("session not created: Chrome failed to start"),
            "{msg}"
        );
        assert!(!msg.contains("#0 0x55"), "{msg}");
        assert_eq!(
            answer("execute", 200, br#"{"value":42}"#).unwrap(),
            json!(42)
        );
        let e = answer("execute", 502, b"<html>bad gateway</html>")
            .err()
            .unwrap();
        assert!(matches!(e, WebDriverError::Transport { .. }), "{e:?}");
    }
}
