//! Progress of a build: a bar on a terminal, log lines otherwise, driven by pip's output.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How [`crate::ensure`] reports a build (the fast path reports nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Progress {
    /// A bar when stderr is a terminal (and `TERM` is not `dumb`), else plain lines.
    #[default]
    Auto,
    /// An indicatif bar on stderr.
    Bar,
    /// One log line per step on stderr, for CI and log files.
    Plain,
    /// Nothing.
    Quiet,
}

/// The steps of a build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    CreateVenv = 1,
    Install = 2,
    Verify = 3,
    Marker = 4,
}

pub(crate) const STAGES: u64 = 4;

impl Stage {
    pub fn label(self) -> &'static str {
        match self {
            Stage::CreateVenv => "create venv",
            Stage::Install => "install packages",
            Stage::Verify => "verify",
            Stage::Marker => "write marker",
        }
    }
}

/// A line of pip's output that moves the build along.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PipEvent {
    /// `Collecting numpy==2.2.6` (also dependencies: `Collecting pytz>=2020.1`).
    Collecting { requirement: String },
    /// `Requirement already satisfied: six in ...`.
    AlreadySatisfied { requirement: String },
    /// `Downloading numpy-2.2.6-...whl (16.4 MB)` (a file name or a URL).
    Downloading { file: String, size: Option<String> },
    /// `Using cached numpy-2.2.6-...whl (16.4 MB)`.
    UsingCached { file: String, size: Option<String> },
    /// `Installing collected packages: six, numpy`.
    Installing { packages: Vec<String> },
    /// `Successfully installed numpy-2.2.6 six-1.16.0`.
    Installed { packages: Vec<String> },
    /// `ERROR: ...`.
    Error { message: String },
}

/// Recognizes the lines of `pip install` that tell where it is.
pub(crate) fn parse_pip_line(line: &str) -> Option<PipEvent> {
    let line = line.trim();
    if let Some(rest) = line.strip_prefix("Collecting ") {
        return Some(PipEvent::Collecting {
            requirement: first_word(rest),
        });
    }
    if let Some(rest) = line.strip_prefix("Requirement already satisfied: ") {
        return Some(PipEvent::AlreadySatisfied {
            requirement: first_word(rest),
        });
    }
    if let Some(rest) = line.strip_prefix("Downloading ") {
        let (file, size) = file_and_size(rest);
        return Some(PipEvent::Downloading { file, size });
    }
    if let Some(rest) = line.strip_prefix("Using cached ") {
        let (file, size) = file_and_size(rest);
        return Some(PipEvent::UsingCached { file, size });
    }
    if let Some(rest) = line.strip_prefix("Installing collected packages:") {
        return Some(PipEvent::Installing {
            packages: rest
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(String::from)
                .collect(),
        });
    }
    if let Some(rest) = line.strip_prefix("Successfully installed") {
        return Some(PipEvent::Installed {
            packages: rest.split_whitespace().map(String::from).collect(),
        });
    }
    if let Some(rest) = line.strip_prefix("ERROR:") {
        return Some(PipEvent::Error {
            message: rest.trim().to_string(),
        });
    }
    None
}

fn first_word(s: &str) -> String {
    s.split_whitespace().next().unwrap_or_default().to_string()
}

/// `numpy-2.2.6-...whl (16.4 MB)` or `https://host/path/numpy-...whl (16.4 MB)`.
fn file_and_size(rest: &str) -> (String, Option<String>) {
    let (target, size) = match rest.rsplit_once(" (") {
        Some((target, size)) if size.ends_with(')') => (
            target,
            Some(size.trim_end_matches(')').to_string()).filter(|s| !s.is_empty()),
        ),
        _ => (rest, None),
    };
    let target = target.trim();
    let file = target
        .split(['#', '?'])
        .next()
        .unwrap_or(target)
        .rsplit('/')
        .next()
        .unwrap_or(target);
    (file.to_string(), size)
}

/// The name part of a requirement (`pytz>=2020.1` → `pytz`, `numpy==2.2.6` → `numpy`).
fn requirement_name(req: &str) -> &str {
    let end = req
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')))
        .unwrap_or(req.len());
    &req[..end]
}

/// `1 package`, `3 packages`.
pub(crate) fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("{n} {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Follows pip's output and says where the install is: "(N of M): collecting numpy==2.2.6".
/// While resolving, N counts the packages collected; while installing, the packages installed
/// (pip prints nothing per package then: the caller counts `*.dist-info` in site-packages).
#[derive(Debug, Clone)]
pub(crate) struct PipTracker {
    requested: usize,
    collected: Vec<String>,
    to_install: Option<usize>,
    installed_now: usize,
    installed: Option<usize>,
}

impl PipTracker {
    pub fn new(requested: usize) -> PipTracker {
        PipTracker {
            requested,
            collected: Vec::new(),
            to_install: None,
            installed_now: 0,
            installed: None,
        }
    }

    /// Packages collected so far.
    pub fn collected(&self) -> usize {
        self.collected.len()
    }

    /// Packages installed so far.
    pub fn installed(&self) -> usize {
        match self.installed {
            Some(_) => self.total(),
            None => self.installed_now.min(self.total()),
        }
    }

    /// Packages expected: what pip will install once it says so, else the requested packages or
    /// the ones seen so far, whichever is more.
    pub fn total(&self) -> usize {
        self.to_install
            .unwrap_or(0)
            .max(self.requested)
            .max(self.collected.len())
    }

    /// Whether pip is installing (said "Installing collected packages", not yet "Successfully").
    pub fn installing(&self) -> bool {
        self.to_install.is_some() && self.installed.is_none()
    }

    /// Takes in one event; returns the step message, if the event is worth one.
    pub fn update(&mut self, event: &PipEvent) -> Option<String> {
        let step = match event {
            PipEvent::Collecting { requirement } | PipEvent::AlreadySatisfied { requirement } => {
                let name = requirement_name(requirement).to_ascii_lowercase();
                if !self.collected.contains(&name) {
                    self.collected.push(name);
                }
                if matches!(event, PipEvent::Collecting { .. }) {
                    format!("collecting {requirement}")
                } else {
                    format!("already installed: {requirement}")
                }
            }
            PipEvent::Downloading { file, size } => match size {
                Some(size) => format!("downloading {file} ({size})"),
                None => format!("downloading {file}"),
            },
            PipEvent::UsingCached { file, size } => match size {
                Some(size) => format!("using cached {file} ({size})"),
                None => format!("using cached {file}"),
            },
            PipEvent::Installing { packages } => {
                self.to_install = Some(packages.len());
                return Some(self.install_step());
            }
            PipEvent::Installed { packages } => {
                self.installed = Some(packages.len());
                return Some(format!(
                    "({} of {}): installed {}",
                    self.installed(),
                    self.total(),
                    plural(packages.len(), "package")
                ));
            }
            PipEvent::Error { .. } => return None,
        };
        Some(format!(
            "({} of {}): {step}",
            self.collected(),
            self.total()
        ))
    }

    /// Records how many packages are installed now; returns the step message if it changed.
    pub fn set_installed(&mut self, now: usize) -> Option<String> {
        if !self.installing() || now == self.installed_now {
            return None;
        }
        self.installed_now = now;
        Some(self.install_step())
    }

    fn install_step(&self) -> String {
        format!("({} of {}): installing", self.installed(), self.total())
    }
}

enum Sink {
    Bar(ProgressBar),
    Plain(Box<dyn Write + Send>),
    Quiet,
}

/// Shows a build: stage changes and pip's steps, on a bar or as log lines.
pub(crate) struct Reporter {
    sink: Sink,
    tracker: PipTracker,
    stage: Stage,
    started: Instant,
}

/// The prefix of plain lines.
const PLAIN_PREFIX: &str = "sandlot-env:";

impl Reporter {
    pub fn new(progress: Progress, requested: usize) -> Reporter {
        let mode = match progress {
            Progress::Auto => {
                let dumb = std::env::var_os("TERM").is_some_and(|t| t == "dumb");
                if std::io::stderr().is_terminal() && !dumb {
                    Progress::Bar
                } else {
                    Progress::Plain
                }
            }
            other => other,
        };
        let sink = match mode {
            Progress::Bar => {
                // Hidden until the first stage: a caller that only waits for a lock and then
                // finds the env built sees no bar.
                let bar = ProgressBar::with_draw_target(
                    Some(STAGES + 2 * requested as u64),
                    ProgressDrawTarget::hidden(),
                );
                let style = ProgressStyle::with_template(
                    "{spinner:.green} {prefix:.bold} [{bar:28.cyan/blue}] {wide_msg} {elapsed:>4}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> ");
                bar.set_style(style);
                Sink::Bar(bar)
            }
            Progress::Plain => Sink::Plain(Box::new(std::io::stderr())),
            Progress::Quiet | Progress::Auto => Sink::Quiet,
        };
        Reporter {
            sink,
            tracker: PipTracker::new(requested),
            stage: Stage::CreateVenv,
            started: Instant::now(),
        }
    }

    /// Plain lines into `out` (for tests).
    #[cfg(test)]
    pub fn plain_to(out: Box<dyn Write + Send>, requested: usize) -> Reporter {
        Reporter {
            sink: Sink::Plain(out),
            tracker: PipTracker::new(requested),
            stage: Stage::CreateVenv,
            started: Instant::now(),
        }
    }

    /// A line outside the stages (waiting for a lock, rebuilding a broken env, done).
    pub fn note(&mut self, message: &str) {
        match &mut self.sink {
            Sink::Bar(bar) if bar.is_hidden() => eprintln!("{PLAIN_PREFIX} {message}"),
            Sink::Bar(bar) => bar.println(format!("{PLAIN_PREFIX} {message}")),
            Sink::Plain(out) => {
                let _ = writeln!(out, "{PLAIN_PREFIX} {message}");
            }
            Sink::Quiet => {}
        }
    }

    /// Enters a stage.
    pub fn stage(&mut self, stage: Stage, detail: &str) {
        self.stage = stage;
        let head = format!("[{}/{STAGES}] {}", stage as u64, stage.label());
        match &mut self.sink {
            Sink::Bar(bar) => {
                if bar.is_hidden() {
                    bar.set_draw_target(ProgressDrawTarget::stderr());
                    bar.enable_steady_tick(Duration::from_millis(120));
                }
                bar.set_prefix(head);
                bar.set_message(detail.to_string());
                self.sync_bar();
            }
            Sink::Plain(out) => {
                let _ = if detail.is_empty() {
                    writeln!(out, "{PLAIN_PREFIX} {head}")
                } else {
                    writeln!(out, "{PLAIN_PREFIX} {head}: {detail}")
                };
            }
            Sink::Quiet => {}
        }
    }

    /// Takes in one line of pip's output.
    pub fn pip_line(&mut self, line: &str) {
        let Some(event) = parse_pip_line(line) else {
            return;
        };
        let Some(step) = self.tracker.update(&event) else {
            return;
        };
        match &mut self.sink {
            Sink::Bar(bar) => {
                bar.set_message(step);
                self.sync_bar();
            }
            Sink::Plain(out) => {
                let _ = writeln!(
                    out,
                    "{PLAIN_PREFIX} [{}/{STAGES}] {} {step}",
                    self.stage as u64,
                    self.stage.label()
                );
            }
            Sink::Quiet => {}
        }
    }

    /// While pip installs: `count` packages are installed (bar only; plain lines would be noise).
    pub fn install_progress(&mut self, count: usize) {
        let Some(step) = self.tracker.set_installed(count) else {
            return;
        };
        if let Sink::Bar(bar) = &self.sink {
            bar.set_message(step);
            self.sync_bar();
        }
    }

    /// Whether pip is in its install phase (see [`Reporter::install_progress`]).
    pub fn installing(&self) -> bool {
        self.tracker.installing()
    }

    /// The build finished.
    pub fn finish(&mut self, message: &str) {
        let elapsed = self.started.elapsed().as_secs_f64();
        let line = format!("{message} in {elapsed:.1}s");
        match &mut self.sink {
            Sink::Bar(bar) => {
                let len = bar.length().unwrap_or(STAGES);
                bar.set_position(len);
                bar.set_prefix("ready");
                bar.finish_with_message(line);
            }
            Sink::Plain(out) => {
                let _ = writeln!(out, "{PLAIN_PREFIX} {line}");
            }
            Sink::Quiet => {}
        }
    }

    /// Nothing was built after all (another process did it while we waited for the lock).
    pub fn clear(&mut self) {
        if let Sink::Bar(bar) = &self.sink {
            bar.finish_and_clear();
        }
    }

    /// The build failed (the error itself is the caller's to show).
    pub fn fail(&mut self) {
        let line = format!(
            "failed at [{}/{STAGES}] {} after {:.1}s",
            self.stage as u64,
            self.stage.label(),
            self.started.elapsed().as_secs_f64()
        );
        match &mut self.sink {
            Sink::Bar(bar) => bar.abandon_with_message(line),
            Sink::Plain(out) => {
                let _ = writeln!(out, "{PLAIN_PREFIX} {line}");
            }
            Sink::Quiet => {}
        }
    }

    /// Bar units: one per stage, plus two per package (collected, installed).
    fn sync_bar(&self) {
        let Sink::Bar(bar) = &self.sink else {
            return;
        };
        let packages = self.tracker.total() as u64;
        let (done_stages, package_units) = match self.stage {
            Stage::CreateVenv => (0, 0),
            Stage::Install => (
                1,
                (self.tracker.collected() as u64).min(packages) + self.tracker.installed() as u64,
            ),
            // After the install every package counts, even ones pip did not announce.
            Stage::Verify => (2, 2 * packages),
            Stage::Marker => (3, 2 * packages),
        };
        bar.set_length(STAGES + 2 * packages);
        bar.set_position(done_stages + package_units);
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        if let Sink::Bar(bar) = &self.sink {
            if !bar.is_finished() {
                bar.abandon();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// pip 23's output (stdout and stderr) for a small install, as this crate sees it.
    const PIP_TRANSCRIPT: &str = "\
Looking in links: /opt/wheels
Collecting six==1.16.0
  Downloading six-1.16.0-py2.py3-none-any.whl (11 kB)
Collecting python-dateutil==2.9.0.post0
  Using cached python_dateutil-2.9.0.post0-py2.py3-none-any.whl (229 kB)
Collecting tzdata>=2022.7
  Downloading https://files.example/packages/ab/cd/tzdata-2026.6-py2.py3-none-any.whl (347 kB)
Requirement already satisfied: pip in ./lib/python3.11/site-packages (23.0.1)
Installing collected packages: tzdata, six, python-dateutil
Successfully installed python-dateutil-2.9.0.post0 six-1.16.0 tzdata-2026.6
";

    #[test]
    fn pip_lines_parse() {
        assert_eq!(
            parse_pip_line("Collecting pytz>=2020.1 (from pandas==2.3.3)"),
            Some(PipEvent::Collecting {
                requirement: "pytz>=2020.1".into()
            })
        );
        assert_eq!(
            parse_pip_line(
                "  Downloading numpy-2.2.6-cp311-cp311-manylinux_2_17_x86_64.whl (16.4 MB)"
            ),
            Some(PipEvent::Downloading {
                file: "numpy-2.2.6-cp311-cp311-manylinux_2_17_x86_64.whl".into(),
                size: Some("16.4 MB".into())
            })
        );
        assert_eq!(
            parse_pip_line(
                "  Downloading https://h/p/six-1.16.0-py2.py3-none-any.whl#sha256=abc (11 kB)"
            ),
            Some(PipEvent::Downloading {
                file: "six-1.16.0-py2.py3-none-any.whl".into(),
                size: Some("11 kB".into())
            })
        );
        assert_eq!(
            parse_pip_line("Installing collected packages: six, cycler, python-dateutil"),
            Some(PipEvent::Installing {
                packages: vec!["six".into(), "cycler".into(), "python-dateutil".into()]
            })
        );
        assert_eq!(
            parse_pip_line("Successfully installed cycler-0.12.1 six-1.16.0"),
            Some(PipEvent::Installed {
                packages: vec!["cycler-0.12.1".into(), "six-1.16.0".into()]
            })
        );
        assert_eq!(
            parse_pip_line("ERROR: No matching distribution found for x==1.0"),
            Some(PipEvent::Error {
                message: "No matching distribution found for x==1.0".into()
            })
        );
        assert_eq!(parse_pip_line("Looking in links: /opt/wheels"), None);
        assert_eq!(parse_pip_line(""), None);
    }

    #[test]
    fn tracker_counts_installs() {
        let mut t = PipTracker::new(1);
        assert_eq!(t.set_installed(1), None, "not installing yet");
        t.update(&PipEvent::Collecting {
            requirement: "a==1".into(),
        });
        t.update(&PipEvent::Collecting {
            requirement: "b".into(),
        });
        t.update(&PipEvent::Installing {
            packages: vec!["b".into(), "a".into()],
        });
        assert!(t.installing());
        assert_eq!(t.set_installed(1).as_deref(), Some("(1 of 2): installing"));
        assert_eq!(t.set_installed(1), None, "unchanged");
        assert_eq!(t.set_installed(5).as_deref(), Some("(2 of 2): installing"));
        t.update(&PipEvent::Installed {
            packages: vec!["a-1".into(), "b-2".into()],
        });
        assert_eq!(t.installed(), 2);
        assert_eq!(t.set_installed(2), None, "finished");
    }

    #[test]
    fn tracker_counts_packages() {
        let mut t = PipTracker::new(2);
        let mut steps = Vec::new();
        for line in PIP_TRANSCRIPT.lines() {
            if let Some(ev) = parse_pip_line(line) {
                steps.extend(t.update(&ev));
            }
        }
        assert_eq!(
            steps,
            vec![
                "(1 of 2): collecting six==1.16.0",
                "(1 of 2): downloading six-1.16.0-py2.py3-none-any.whl (11 kB)",
                "(2 of 2): collecting python-dateutil==2.9.0.post0",
                "(2 of 2): using cached python_dateutil-2.9.0.post0-py2.py3-none-any.whl (229 kB)",
                "(3 of 3): collecting tzdata>=2022.7",
                "(3 of 3): downloading tzdata-2026.6-py2.py3-none-any.whl (347 kB)",
                "(4 of 4): already installed: pip",
                "(0 of 4): installing",
                "(4 of 4): installed 3 packages",
            ]
        );
        assert!(!t.installing());
        assert_eq!(t.installed(), 4);
    }

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn plain_progress_lines() {
        let out = Captured::default();
        let mut r = Reporter::plain_to(Box::new(out.clone()), 2);
        r.stage(Stage::CreateVenv, "/envs/abc");
        r.stage(Stage::Install, "2 packages");
        for line in PIP_TRANSCRIPT.lines().take(3) {
            r.pip_line(line);
        }
        r.pip_line("Installing collected packages: six");
        assert!(r.installing());
        r.install_progress(1); // bar only
        r.stage(Stage::Verify, "");
        r.fail();
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "sandlot-env: [1/4] create venv: /envs/abc");
        assert_eq!(lines[1], "sandlot-env: [2/4] install packages: 2 packages");
        assert_eq!(
            lines[2],
            "sandlot-env: [2/4] install packages (1 of 2): collecting six==1.16.0"
        );
        assert_eq!(
            lines[3],
            "sandlot-env: [2/4] install packages (1 of 2): downloading six-1.16.0-py2.py3-none-any.whl (11 kB)"
        );
        assert_eq!(
            lines[4],
            "sandlot-env: [2/4] install packages (0 of 2): installing"
        );
        assert_eq!(lines[5], "sandlot-env: [3/4] verify");
        assert!(lines[6].starts_with("sandlot-env: failed at [3/4] verify after "));
        assert_eq!(lines.len(), 7, "{text}");
    }
}
