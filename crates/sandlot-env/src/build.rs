//! `ensure`: the fast path, the lock, and the four stages of a build.

use std::collections::{BTreeMap, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::EnvError;
use crate::jail::{Access, IndexAccess, Isolation, Runner, Step, StepOutput};
use crate::lock::FileLock;
use crate::progress::{parse_pip_line, plural, PipEvent, Progress, Reporter, Stage, STAGES};
use crate::python::{self, BaseInfo};
use crate::relocate::{self, SANDBOX_ROOT};
use crate::seal;
use crate::spec::{self, EnvSpec};

/// The marker a finished environment has; written last.
pub const MARKER_FILE: &str = ".sandlot-ready";

/// The description of a finished environment, in its root.
pub const DESCRIPTION_FILE: &str = "sandlot-env.json";

/// Version of the marker and description layout (2: relocatable, paths in the description
/// relative to the environment's root).
const FORMAT: u32 = 2;

/// How many lines of pip's output a [`EnvError::PipFailed`] carries.
const TAIL_LINES: usize = 20;

/// A provisioned environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PythonEnv {
    /// `<envs_dir>/<spec_hash>`.
    pub root: PathBuf,
    /// `<root>/bin/python`.
    pub python: PathBuf,
    /// The interpreter version, e.g. `3.11.2`.
    pub version: String,
    /// `sys.base_prefix` of the venv, e.g. `/usr`: the stdlib sandboxes must also see.
    pub base_prefix: PathBuf,
    /// The venv's site-packages.
    pub site_packages: PathBuf,
    /// The content hash of the spec (the directory name).
    pub spec_hash: String,
}

/// `.sandlot-ready`.
#[derive(Debug, Serialize, Deserialize)]
struct Marker {
    format: u32,
    spec_hash: String,
    spec: EnvSpec,
    python_version: String,
    /// Every installed distribution and its version.
    versions: BTreeMap<String, String>,
    created_at: String,
}

/// `sandlot-env.json`. Paths inside the environment are relative to its root: it is
/// relocatable, and sandboxes see it elsewhere than at its build path.
#[derive(Debug, Serialize)]
struct Description<'a> {
    format: u32,
    spec_hash: &'a str,
    version: &'a str,
    base_prefix: &'a Path,
    python: &'a Path,
    site_packages: &'a Path,
    base_python: &'a Path,
    base_python_resolved: &'a Path,
    implementation: &'a str,
    requested: &'a [String],
    installed: &'a BTreeMap<String, String>,
    created_at: &'a str,
    build_seconds: f64,
    builder: String,
}

/// The verifier's answer.
#[derive(Debug, Deserialize)]
struct VerifyReport {
    failures: Vec<String>,
    versions: BTreeMap<String, String>,
}

/// What `sys` says inside the venv.
#[derive(Debug, Deserialize)]
struct Inspection {
    version: String,
    prefix: PathBuf,
    base_prefix: PathBuf,
    site_packages: PathBuf,
}

/// Why the fast path did not apply.
enum NotReady {
    /// No marker: never built, or a build died half-way.
    Missing,
    /// A marker, but the env does not work (or the marker is for something else): rebuild.
    Broken(String),
    /// Cannot tell right now (the marker cannot be read, python cannot be started for lack of
    /// resources): fail rather than wipe an env that may be fine.
    Unavailable(EnvError),
}

/// Ensures an environment for `spec` exists under `envs_dir/<hash>` and returns it.
///
/// Fast path (marker present, python runs): a few tens of milliseconds, no lock. Otherwise takes
/// an exclusive flock on `envs_dir/<hash>.lock` (a concurrent caller waits, then sees the finished
/// env), wipes any half-built directory, and builds: create venv, install packages, verify
/// (import each one), write `sandlot-env.json` and then the `.sandlot-ready` marker.
///
/// `isolation` says where every child process of the build (and the fast path's interpreter)
/// runs: in the build jail, as a throw-away uid, for a root caller (see `jail`).
pub fn ensure(
    envs_dir: &Path,
    spec: &EnvSpec,
    progress: Progress,
    isolation: &Isolation,
) -> Result<PythonEnv, EnvError> {
    spec.validate()?;
    // Children run in other directories, and the paths handed back must stay valid.
    let envs_dir = &std::path::absolute(envs_dir).map_err(|source| EnvError::ResolveDir {
        path: envs_dir.to_path_buf(),
        source,
    })?;
    let base = python::probe_base(&spec.base_python)?;
    let hash = spec::hash_parts(&base.identity(), &spec.packages);
    let root = envs_dir.join(&hash);
    let mut runner = Runner::new(isolation, &base.executable)?;
    match ready_env(&root, &hash, &runner) {
        Ok(env) => return Ok(env),
        Err(NotReady::Unavailable(e)) => return Err(e),
        Err(NotReady::Missing | NotReady::Broken(_)) => {}
    }

    create_envs_dir(envs_dir)?;
    let mut reporter = Reporter::new(progress, spec.packages.len());
    let lock_path = envs_dir.join(format!("{hash}.lock"));
    let lock = FileLock::exclusive(&lock_path, || {
        reporter.note(&format!(
            "waiting for another process building {} (lock {})",
            root.display(),
            lock_path.display()
        ));
    })?;
    match ready_env(&root, &hash, &runner) {
        Ok(env) => {
            reporter.clear();
            return Ok(env);
        }
        Err(NotReady::Broken(why)) => {
            reporter.note(&format!("rebuilding {}: {why}", root.display()));
        }
        Err(NotReady::Unavailable(e)) => {
            reporter.clear();
            return Err(e);
        }
        Err(NotReady::Missing) => {}
    }
    python::check_venv(&spec.base_python)?;
    runner.hold_lock(lock.raw_fd());

    let build = Build {
        envs_dir,
        root: &root,
        hash: &hash,
        spec,
        base: &base,
        runner: &runner,
    };
    match build.run(&mut reporter) {
        Ok(env) => {
            reporter.finish(&format!("environment ready at {}", env.root.display()));
            Ok(env)
        }
        Err(e) => {
            reporter.fail();
            Err(e)
        }
    }
}

/// The fast path: the marker matches and the venv's python runs (jailed: it runs whatever
/// `.pth` files the environment holds).
fn ready_env(root: &Path, hash: &str, runner: &Runner) -> Result<PythonEnv, NotReady> {
    let marker_path = root.join(MARKER_FILE);
    let bytes = match fs::read(&marker_path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(NotReady::Missing),
        Err(source) => {
            return Err(NotReady::Unavailable(EnvError::ReadMarker {
                path: marker_path,
                source,
            }))
        }
    };
    let marker: Marker = serde_json::from_slice(&bytes)
        .map_err(|e| NotReady::Broken(format!("unreadable marker: {e}")))?;
    if marker.format != FORMAT || marker.spec_hash != hash {
        return Err(NotReady::Broken(format!(
            "marker is for {} (format {})",
            marker.spec_hash, marker.format
        )));
    }
    inspect(root, hash, runner).map_err(|e| match e {
        // The interpreter could not be started for a reason that says nothing about the env
        // (out of processes or memory under load): do not wipe an env sandboxes may be using.
        EnvError::InspectSpawn { ref source, .. }
            if !matches!(
                source.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied
            ) =>
        {
            NotReady::Unavailable(e)
        }
        other => NotReady::Broken(other.to_string()),
    })
}

/// Asks the venv's python where it is.
fn inspect(root: &Path, hash: &str, runner: &Runner) -> Result<PythonEnv, EnvError> {
    let python = root.join("bin").join("python");
    let inspect_err = |detail: String| EnvError::Inspect {
        python: python.clone(),
        detail,
    };
    let step = Step {
        argv: vec![
            python.display().to_string(),
            "-I".into(),
            "-c".into(),
            python::INSPECT_SCRIPT.into(),
        ],
        env: Vec::new(),
        cwd: root,
        root,
        access: Access::ReadOnly,
        network: None,
    };
    let output = runner
        .run(&step, QUIET_TICK, &mut |_| {})
        .map_err(|e| match e {
            EnvError::Spawn { source, .. } => EnvError::InspectSpawn {
                python: python.clone(),
                source,
            },
            other => other,
        })?;
    if !output.status.success() {
        return Err(inspect_err(format!(
            "{}: {}",
            output.status,
            python::last_lines(&combined(&output), 5)
        )));
    }
    // The last line: a `.pth` file of the environment may have printed before it.
    let last = output.stdout.lines().rev().find(|l| !l.trim().is_empty());
    let info: Inspection = serde_json::from_str(last.unwrap_or_default())
        .map_err(|e| inspect_err(format!("unexpected output ({e})")))?;
    let same_root = match (fs::canonicalize(&info.prefix), fs::canonicalize(root)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same_root {
        return Err(inspect_err(format!(
            "sys.prefix is {}, not the environment",
            info.prefix.display()
        )));
    }
    Ok(PythonEnv {
        root: root.to_path_buf(),
        python,
        version: info.version,
        base_prefix: info.base_prefix,
        site_packages: info.site_packages,
        spec_hash: hash.to_string(),
    })
}

/// Creates the envs dir world-readable if it is missing (an existing one is left as it is).
fn create_envs_dir(envs_dir: &Path) -> Result<(), EnvError> {
    if envs_dir.is_dir() {
        return Ok(());
    }
    let create_err = |source| EnvError::CreateDir {
        path: envs_dir.to_path_buf(),
        source,
    };
    fs::create_dir_all(envs_dir).map_err(create_err)?;
    fs::set_permissions(envs_dir, fs::Permissions::from_mode(0o755)).map_err(create_err)
}

/// One build, under the lock.
struct Build<'a> {
    envs_dir: &'a Path,
    root: &'a Path,
    hash: &'a str,
    spec: &'a EnvSpec,
    base: &'a BaseInfo,
    /// Where its children run.
    runner: &'a Runner,
}

impl Build<'_> {
    fn run(&self, reporter: &mut Reporter) -> Result<PythonEnv, EnvError> {
        let started = Instant::now();
        let created_at = now_rfc3339();
        let mut log = BuildLog::open(&self.envs_dir.join(format!("{}.log", self.hash)))?;
        log.line(&format!(
            "=== build {} started {created_at} (pid {}) base {} packages {}{}",
            self.hash,
            std::process::id(),
            self.base.identity(),
            self.spec.packages.join(" "),
            match self.runner.build_uid() {
                Some(uid) => format!(" jailed as uid {uid}"),
                None => String::new(),
            }
        ));

        if fs::symlink_metadata(self.root).is_ok() {
            log.line(&format!("removing half-built {}", self.root.display()));
            // std's remove_dir_all never follows a symlink a build may have planted.
            fs::remove_dir_all(self.root).map_err(|source| EnvError::RemoveStale {
                path: self.root.to_path_buf(),
                source,
            })?;
        }
        self.make_root()?;

        enter(
            reporter,
            &mut log,
            Stage::CreateVenv,
            &self.root.display().to_string(),
        );
        self.create_venv(&mut log)?;

        enter(
            reporter,
            &mut log,
            Stage::Install,
            &plural(self.spec.packages.len(), "requested package"),
        );
        self.install(&mut log, reporter)?;
        self.relocate(&mut log)?;
        if let Some(uid) = self.runner.build_uid() {
            let sealed = seal::seal(self.root, uid)?;
            log.line(&format!(
                "sealed: {} entries handed to root, read-only; removed {:?}",
                sealed.entries, sealed.removed
            ));
        }

        enter(
            reporter,
            &mut log,
            Stage::Verify,
            &format!(
                "importing {}",
                plural(self.spec.packages.len(), "requested package")
            ),
        );
        let versions = self.verify(&mut log)?;

        enter(reporter, &mut log, Stage::Marker, MARKER_FILE);
        let env = inspect(self.root, self.hash, self.runner)?;
        let build_seconds = started.elapsed().as_secs_f64();
        let inside = |p: &Path| p.strip_prefix(&env.root).unwrap_or(p).to_path_buf();
        let (python_rel, site_rel) = (inside(&env.python), inside(&env.site_packages));
        let description = Description {
            format: FORMAT,
            spec_hash: &env.spec_hash,
            version: &env.version,
            base_prefix: &env.base_prefix,
            python: &python_rel,
            site_packages: &site_rel,
            base_python: &self.spec.base_python,
            base_python_resolved: &self.base.executable,
            implementation: &self.base.implementation,
            requested: &self.spec.packages,
            installed: &versions,
            created_at: &created_at,
            build_seconds,
            builder: format!("sandlot-env {}", env!("CARGO_PKG_VERSION")),
        };
        let description_path = self.root.join(DESCRIPTION_FILE);
        write_json_atomic(&description_path, &description).map_err(|source| {
            EnvError::WriteDescription {
                path: description_path.clone(),
                source,
            }
        })?;
        let marker = Marker {
            format: FORMAT,
            spec_hash: self.hash.to_string(),
            spec: self.spec.clone(),
            python_version: env.version.clone(),
            versions,
            created_at,
        };
        let marker_path = self.root.join(MARKER_FILE);
        write_json_atomic(&marker_path, &marker).map_err(|source| EnvError::WriteMarker {
            path: marker_path.clone(),
            source,
        })?;
        log.line(&format!(
            "=== build {} ready in {build_seconds:.1}s",
            self.hash
        ));
        Ok(env)
    }

    /// Makes the (empty) environment root: owned by the build's uid when jailed, the one
    /// directory its steps may write.
    fn make_root(&self) -> Result<(), EnvError> {
        let err = |source| EnvError::CreateDir {
            path: self.root.to_path_buf(),
            source,
        };
        fs::create_dir(self.root).map_err(err)?;
        fs::set_permissions(self.root, fs::Permissions::from_mode(0o755)).map_err(err)?;
        if let Some(uid) = self.runner.build_uid() {
            std::os::unix::fs::lchown(self.root, Some(uid), Some(uid)).map_err(err)?;
        }
        Ok(())
    }

    fn python(&self) -> String {
        self.root.join("bin").join("python").display().to_string()
    }

    /// A step on the environment, without network.
    fn step(&self, argv: Vec<String>, access: Access) -> Step<'_> {
        Step {
            argv,
            env: Vec::new(),
            cwd: self.root,
            root: self.root,
            access,
            network: None,
        }
    }

    /// Runs `step` with its command line and output in the build log; returns the command
    /// as logged and its output.
    fn run_logged(
        &self,
        step: &Step<'_>,
        log: &mut BuildLog,
    ) -> Result<(String, StepOutput), EnvError> {
        let command = describe(&step.argv);
        log.line(&format!("$ {command}"));
        let output = self.runner.run(step, QUIET_TICK, &mut |_| {})?;
        log.text(&combined(&output));
        Ok((command, output))
    }

    fn create_venv(&self, log: &mut BuildLog) -> Result<(), EnvError> {
        let argv = vec![
            self.spec.base_python.display().to_string(),
            "-m".into(),
            "venv".into(),
            self.root.display().to_string(),
        ];
        let (command, output) = self.run_logged(&self.step(argv, Access::ReadWrite), log)?;
        if !output.status.success() {
            return Err(EnvError::CreateVenv {
                command,
                status: output.status.to_string(),
                output: python::last_lines(&combined(&output), TAIL_LINES),
            });
        }
        Ok(())
    }

    /// The index the download step may reach: the configured one, or pip's own default (asked
    /// of the fresh venv's pip, which no package has touched yet).
    fn index(&self, log: &mut BuildLog) -> Result<IndexAccess, EnvError> {
        let (simple_url, file_host) = match self.runner.configured_index() {
            Some(_) => (String::new(), String::new()),
            None => {
                let argv = vec![
                    self.python(),
                    "-I".into(),
                    "-c".into(),
                    python::DEFAULT_INDEX_SCRIPT.into(),
                ];
                let (_, output) = self.run_logged(&self.step(argv, Access::ReadOnly), log)?;
                let line = output.stdout.lines().last().unwrap_or_default().to_string();
                match line.split_once('\t') {
                    Some((url, host)) if output.status.success() => {
                        (url.to_string(), host.to_string())
                    }
                    _ => {
                        return Err(EnvError::DefaultIndex {
                            detail: python::last_lines(&combined(&output), 5),
                        })
                    }
                }
            }
        };
        IndexAccess::new(self.runner.configured_index(), &simple_url, &file_host)
    }

    /// Installs the packages. Jailed, in two steps: `pip download` (the only step with a
    /// network: the proxy to the index) into a wheel directory in the environment, then
    /// `pip install --no-index` from it with no network at all. As the caller, one
    /// `pip install`.
    fn install(&self, log: &mut BuildLog, reporter: &mut Reporter) -> Result<(), EnvError> {
        let common = [
            "--no-input",
            "--disable-pip-version-check",
            "--only-binary",
            ":all:",
            "--progress-bar",
            "off",
        ];
        let pip = |args: &[&str]| -> Vec<String> {
            let mut argv = vec![self.python(), "-m".into(), "pip".into()];
            argv.extend(args.iter().map(|a| a.to_string()));
            argv.extend(common.iter().map(|a| a.to_string()));
            argv
        };
        if !self.runner.is_jailed() {
            // Compiled after relocating, with the paths sandboxes see (`relocate` below).
            let mut argv = pip(&["install", "--no-compile"]);
            argv.extend(self.spec.packages.iter().cloned());
            return self.pip_step(&self.step(argv, Access::ReadWrite), log, reporter);
        }
        let index = self.index(log)?;
        let wheels = self.root.join(WHEELS_DIR).display().to_string();
        let mut download = pip(&["download", "--dest", &wheels]);
        download.extend(self.spec.packages.iter().cloned());
        let mut step = self.step(download, Access::ReadWrite);
        step.network = Some(&index);
        log.line(&format!(
            "network: only {} through the egress proxy",
            index
                .allowed
                .iter()
                .map(|(h, p)| format!("{h}:{p}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        self.pip_step(&step, log, reporter)?;
        let mut install = pip(&[
            "install",
            "--no-index",
            "--find-links",
            &wheels,
            "--no-compile",
        ]);
        install.extend(self.spec.packages.iter().cloned());
        self.pip_step(&self.step(install, Access::ReadWrite), log, reporter)?;
        // The step's processes are gone (its cgroup is empty), and std's remove_dir_all never
        // follows a symlink.
        let wheels = self.root.join(WHEELS_DIR);
        fs::remove_dir_all(&wheels).map_err(|source| EnvError::RemoveStale {
            path: wheels,
            source,
        })
    }

    /// Runs a pip step, its lines to the progress bar and the log, the installed count polled
    /// while pip prints nothing.
    fn pip_step(
        &self,
        step: &Step<'_>,
        log: &mut BuildLog,
        reporter: &mut Reporter,
    ) -> Result<(), EnvError> {
        let command = describe(&step.argv);
        log.line(&format!("$ {command}"));
        let installs = InstallCounter::start(self.root);
        let mut tail: VecDeque<String> = VecDeque::with_capacity(TAIL_LINES);
        let mut errors: Vec<String> = Vec::new();
        let mut not_found: Option<String> = None;
        let output = self.runner.run(step, INSTALL_POLL, &mut |line| {
            let Some(line) = line else {
                // pip prints nothing while it installs package after package: count their
                // dist-infos.
                if reporter.installing() {
                    reporter.install_progress(installs.count());
                }
                return;
            };
            log.line(line);
            reporter.pip_line(line);
            if let Some(PipEvent::Error { message }) = parse_pip_line(line) {
                if let Some(req) = message.strip_prefix("No matching distribution found for ") {
                    not_found.get_or_insert_with(|| req.trim().to_string());
                }
                errors.push(message);
            }
            if !line.trim().is_empty() {
                if tail.len() == TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(line.to_string());
            }
        })?;
        if output.status.success() {
            return Ok(());
        }
        if let Some(package) = not_found {
            let mut message = errors
                .iter()
                .map(|e| shorten(e, 300))
                .collect::<Vec<_>>()
                .join("\n");
            message.push_str("\n(only binary wheels are accepted: pip runs with --only-binary :all:, with your pip configuration and index)");
            return Err(EnvError::PackageNotFound { package, message });
        }
        Err(EnvError::PipFailed {
            command,
            status: output.status.to_string(),
            tail: Vec::from(tail).join("\n"),
        })
    }

    /// Makes the environment relocatable (see `relocate`) and compiles its bytecode, which
    /// sandboxes cannot write (they see the environment read-only): with source paths under
    /// [`SANDBOX_ROOT`], where sandboxes see it, so no `.pyc` names the build path. A file that
    /// does not compile (pip's own `--compile` skips those the same way) runs from source.
    ///
    /// `relocate` runs here as the caller on a tree the install wrote; nothing of the build
    /// runs any more (its cgroup is empty), and it never follows a symlink.
    fn relocate(&self, log: &mut BuildLog) -> Result<(), EnvError> {
        let done = relocate::relocate(self.root)?;
        log.line(&format!(
            "relocatable: {} console scripts rewritten; removed {:?}; still naming the build path: {:?}",
            done.scripts, done.removed, done.left
        ));
        let mut argv = vec![self.python()];
        argv.extend(
            ["-m", "compileall", "-q", "-f", "-j", "0", "-d"]
                .iter()
                .map(|a| a.to_string()),
        );
        argv.push(Path::new(SANDBOX_ROOT).join("lib").display().to_string());
        argv.push(self.root.join("lib").display().to_string());
        let (_, output) = self.run_logged(&self.step(argv, Access::ReadWrite), log)?;
        if !output.status.success() {
            log.line(&format!(
                "compileall: {}: the files above run from source",
                output.status
            ));
        }
        Ok(())
    }

    /// Imports every requested package, jailed on the sealed (read-only) environment.
    fn verify(&self, log: &mut BuildLog) -> Result<BTreeMap<String, String>, EnvError> {
        let python = self.root.join("bin").join("python");
        let mut argv = vec![
            self.python(),
            "-I".into(),
            "-c".into(),
            python::VERIFY_SCRIPT.into(),
        ];
        argv.extend(self.spec.packages.iter().cloned());
        let mut step = self.step(argv, Access::ReadOnly);
        step.env.push(("MPLBACKEND".into(), "Agg".into()));
        log.line(&format!(
            "$ {python} -I -c <verify> {}",
            self.spec.packages.join(" "),
            python = python.display()
        ));
        let verify_err = |detail: String| EnvError::Verify {
            python: python.clone(),
            detail,
        };
        let output = self
            .runner
            .run(&step, QUIET_TICK, &mut |_| {})
            .map_err(|e| verify_err(format!("cannot run it: {e}")))?;
        let text = combined(&output);
        log.text(&text);
        let report = output
            .stdout
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix(python::VERIFY_SENTINEL))
            .and_then(|json| serde_json::from_str::<VerifyReport>(json).ok());
        match report {
            Some(report) if output.status.success() && report.failures.is_empty() => {
                Ok(report.versions)
            }
            Some(report) if !report.failures.is_empty() => {
                Err(verify_err(report.failures.join("; ")))
            }
            _ => Err(verify_err(format!(
                "{}: {}",
                output.status,
                python::last_lines(&text, TAIL_LINES)
            ))),
        }
    }
}

/// Where the download step puts the wheels the install step installs, inside the environment
/// (the one directory both may write); removed before the environment is sealed.
const WHEELS_DIR: &str = ".sandlot-wheels";

/// How often a step that reports no progress is looked at (it is not).
const QUIET_TICK: Duration = Duration::from_secs(3600);

/// stdout then stderr of a finished step, as text.
fn combined(output: &StepOutput) -> String {
    let mut text = output.stdout.clone();
    text.push_str(&output.stderr);
    text
}

/// A command line for messages and the log (an argument with spaces quoted, its first line).
fn describe(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if a.contains(char::is_whitespace) {
                format!(
                    "'{}'",
                    a.lines().find(|l| !l.trim().is_empty()).unwrap_or_default()
                )
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// How often the install phase counts installed packages.
const INSTALL_POLL: Duration = Duration::from_millis(250);

/// Counts the `*.dist-info` directories pip has written so far, less the ones the venv came
/// with (pip, setuptools).
struct InstallCounter {
    site_packages: Option<PathBuf>,
    baseline: usize,
}

impl InstallCounter {
    /// Takes the baseline: call before pip starts.
    fn start(root: &Path) -> InstallCounter {
        let site_packages = fs::read_dir(root.join("lib"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("site-packages"))
            .find(|p| p.is_dir());
        let mut counter = InstallCounter {
            site_packages,
            baseline: 0,
        };
        counter.baseline = counter.dist_infos();
        counter
    }

    /// Packages installed since [`InstallCounter::start`].
    fn count(&self) -> usize {
        self.dist_infos().saturating_sub(self.baseline)
    }

    fn dist_infos(&self) -> usize {
        let Some(dir) = &self.site_packages else {
            return 0;
        };
        fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".dist-info"))
            .count()
    }
}

/// Enters a stage on the reporter and in the log (with the time since the build started).
fn enter(reporter: &mut Reporter, log: &mut BuildLog, stage: Stage, detail: &str) {
    reporter.stage(stage, detail);
    log.line(&format!(
        "--- [{}/{STAGES}] {} (+{:.1}s) {detail}",
        stage as u64,
        stage.label(),
        log.opened.elapsed().as_secs_f64()
    ));
}

/// `<envs_dir>/<hash>.log`: every build's commands and output, appended. Writes after opening
/// are best effort: a full disk shows up in the build itself.
struct BuildLog {
    file: File,
    opened: Instant,
}

impl BuildLog {
    fn open(path: &Path) -> Result<BuildLog, EnvError> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o644)
            .open(path)
            .map_err(|source| EnvError::BuildLog {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(BuildLog {
            file,
            opened: Instant::now(),
        })
    }

    fn line(&mut self, line: &str) {
        let _ = writeln!(self.file, "{line}");
    }

    fn text(&mut self, text: &str) {
        if !text.is_empty() {
            let _ = self.file.write_all(text.as_bytes());
            if !text.ends_with('\n') {
                let _ = self.file.write_all(b"\n");
            }
        }
    }
}

/// Writes JSON to a temporary file beside `path`, mode 0644 whatever the umask, then renames it
/// into place, so readers see the whole file or none. The temporary file is made new
/// (`O_EXCL`, which never follows a symlink), whatever a build left under its name.
fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    bytes.push(b'\n');
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    match fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut file = OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o644)
        .open(&tmp)?;
    file.write_all(&bytes)?;
    file.set_permissions(fs::Permissions::from_mode(0o644))?;
    file.sync_all()?;
    drop(file);
    fs::rename(&tmp, path)
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(max).collect();
        out.push('…');
        out
    }
}

fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
