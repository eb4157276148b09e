//! Running interpreters: probing the base Python, and the child processes of a build.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

use crate::error::EnvError;

/// The interpreter used when `SANDLOT_PYTHON` is not set. Never a `PATH` lookup: a pyenv or
/// other per-user interpreter under `/root` is invisible to sandboxes.
pub const DEFAULT_BASE_PYTHON: &str = "/usr/bin/python3";

/// The environment variable that overrides [`DEFAULT_BASE_PYTHON`].
pub const BASE_PYTHON_VAR: &str = "SANDLOT_PYTHON";

/// The oldest supported base interpreter.
pub const MIN_PYTHON: (u32, u32) = (3, 9);

/// Variables that would make an interpreter or pip look somewhere other than the venv. Index and
/// network settings (`PIP_INDEX_URL`, `PIP_CERT`, ...) are kept: they are the user's.
const SCRUBBED_VARS: &[&str] = &[
    "PYTHONHOME",
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "PYTHONUSERBASE",
    "PYTHONEXECUTABLE",
    "VIRTUAL_ENV",
    "PIP_USER",
    "PIP_TARGET",
    "PIP_PREFIX",
    "PIP_ROOT",
    "PIP_REQUIRE_HASHES",
];

/// Prints implementation, version, release level and resolved executable, tab-separated.
/// Run with `-I -S`: no site, so it takes a few milliseconds.
const PROBE_SCRIPT: &str = "import os, sys; v = sys.version_info; \
print(sys.implementation.name, '%d.%d.%d' % v[:3], v.releaselevel, \
os.path.realpath(sys.executable), sep='\\t')";

/// Fails (non-zero, message on stderr) when venv or ensurepip (with its bundled pip) is missing.
const VENV_CHECK_SCRIPT: &str = "import venv, ensurepip; ensurepip.version()";

/// Describes a venv interpreter as JSON.
pub(crate) const INSPECT_SCRIPT: &str = "import json, sys, sysconfig; \
print(json.dumps({'version': '%d.%d.%d' % sys.version_info[:3], 'prefix': sys.prefix, \
'base_prefix': sys.base_prefix, 'site_packages': sysconfig.get_paths()['purelib']}))";

/// Prints pip's own default index (its simple URL) and the host its files are on,
/// tab-separated: the index a build may reach when the operator configured none. Asked of pip
/// so that no index is named here.
pub(crate) const DEFAULT_INDEX_SCRIPT: &str = "from pip._internal.models.index import PyPI; \
print(PyPI.simple_url, PyPI.file_storage_domain, sep='\\t')";

/// The line prefix of the verifier's JSON answer (imports may print to stdout too).
pub(crate) const VERIFY_SENTINEL: &str = "SANDLOT-VERIFY:";

/// Imports every top-level module of each requested distribution (argv: `name==version`),
/// checks the installed versions, and prints the failures and every installed version.
pub(crate) const VERIFY_SCRIPT: &str = r#"
import importlib, importlib.metadata as md, json, os, sys
os.environ.setdefault("MPLBACKEND", "Agg")

def same_version(a, b):
    try:
        from pip._vendor.packaging.version import Version
        return Version(a) == Version(b)
    except Exception:
        return a == b

def modules_of(dist):
    names = (dist.read_text("top_level.txt") or "").split()
    if not names:
        for f in dist.files or ():
            parts = f.parts
            if len(parts) == 1:
                if parts[0].endswith((".py", ".so")):
                    names.append(parts[0].split(".")[0])
            elif parts:
                names.append(parts[0])
    out = []
    for n in names:
        if n.isidentifier() and not n.startswith("_") and n not in out:
            out.append(n)
    return out

failures = []
for req in sys.argv[1:]:
    name, _, want = req.partition("==")
    name = name.split("[", 1)[0]
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        failures.append(req + ": not installed")
        continue
    if want and not same_version(dist.version, want):
        failures.append(req + ": installed version is " + dist.version)
        continue
    for mod in modules_of(dist):
        try:
            importlib.import_module(mod)
        except BaseException as e:
            failures.append("%s: import %s: %s: %s" % (req, mod, type(e).__name__, e))

versions = {}
for d in md.distributions():
    n = d.metadata["Name"]
    if n:
        versions[n] = d.version
sys.stdout.flush()
print("SANDLOT-VERIFY:" + json.dumps({"failures": failures, "versions": versions}))
"#;

/// What the base interpreter says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BaseInfo {
    pub implementation: String,
    /// `major.minor.micro`.
    pub version: String,
    pub version_tuple: (u32, u32, u32),
    pub release_level: String,
    /// `realpath(sys.executable)`.
    pub executable: PathBuf,
}

impl BaseInfo {
    /// What the content hash covers: another version or another installation is another env.
    pub fn identity(&self) -> String {
        format!(
            "{} {} {} {}",
            self.implementation,
            self.version,
            self.release_level,
            self.executable.display()
        )
    }
}

/// `SANDLOT_PYTHON` if set and not empty, else [`DEFAULT_BASE_PYTHON`].
pub(crate) fn base_python_candidate() -> PathBuf {
    match std::env::var_os(BASE_PYTHON_VAR) {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(DEFAULT_BASE_PYTHON),
    }
}

/// Finds the base interpreter: `SANDLOT_PYTHON`, else `/usr/bin/python3`; checks that it runs,
/// is CPython >= 3.9 and can create venvs (has venv and ensurepip).
pub fn find_base_python() -> Result<PathBuf, EnvError> {
    let path = base_python_candidate();
    probe_base(&path)?;
    check_venv(&path)?;
    Ok(path)
}

/// Probes a base interpreter (once per path per process) and checks its version.
pub(crate) fn probe_base(path: &Path) -> Result<BaseInfo, EnvError> {
    static CACHE: OnceLock<Mutex<HashMap<PathBuf, BaseInfo>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(info) = lock_ignoring_poison(cache).get(path) {
        return Ok(info.clone());
    }
    let output = command(path)
        .args(["-I", "-S", "-c", PROBE_SCRIPT])
        .output()
        .map_err(|source| EnvError::NoBasePython {
            path: path.to_path_buf(),
            source,
        })?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let info = if output.status.success() {
        parse_probe(stdout.trim())
    } else {
        None
    };
    let Some(info) = info else {
        return Err(EnvError::BasePythonBroken {
            path: path.to_path_buf(),
            status: output.status.to_string(),
            output: last_lines(&combined(&output), 10),
        });
    };
    let (major, minor, _) = info.version_tuple;
    if (major, minor) < MIN_PYTHON {
        return Err(EnvError::BasePythonTooOld {
            path: path.to_path_buf(),
            version: info.version,
            minimum: format!("{}.{}", MIN_PYTHON.0, MIN_PYTHON.1),
        });
    }
    lock_ignoring_poison(cache).insert(path.to_path_buf(), info.clone());
    Ok(info)
}

/// Checks that the base interpreter has venv and ensurepip (Debian: python3-venv).
pub(crate) fn check_venv(path: &Path) -> Result<(), EnvError> {
    let output = command(path)
        .args(["-I", "-c", VENV_CHECK_SCRIPT])
        .output()
        .map_err(|source| EnvError::NoBasePython {
            path: path.to_path_buf(),
            source,
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(EnvError::BasePythonNoVenv {
            path: path.to_path_buf(),
            detail: last_lines(&String::from_utf8_lossy(&output.stderr), 1),
        })
    }
}

fn parse_probe(line: &str) -> Option<BaseInfo> {
    let mut fields = line.split('\t');
    let implementation = fields.next()?.to_string();
    let version = fields.next()?.to_string();
    let release_level = fields.next()?.to_string();
    let executable = PathBuf::from(fields.next()?);
    let mut nums = version.split('.').map(|n| n.parse::<u32>().ok());
    let version_tuple = (nums.next()??, nums.next()??, nums.next()??);
    Some(BaseInfo {
        implementation,
        version,
        version_tuple,
        release_level,
        executable,
    })
}

/// A command for a child of the build: umask 022 (sandboxes run as another uid and must read
/// everything), and no variables that would send Python or pip outside the venv.
pub(crate) fn command(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    for var in SCRUBBED_VARS {
        cmd.env_remove(var);
    }
    // SAFETY: the closure runs in the forked child before exec; umask(2) is async-signal-safe,
    // cannot fail, and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0o022);
            Ok(())
        });
    }
    cmd
}

/// Makes a build child hold the build lock with us, and die with the thread that waits for it.
///
/// The child inherits the lock's open file description (flock locks belong to it), so if this
/// process is killed mid-build, the next builder still waits until pip is gone before it wipes
/// the half-built directory. `PR_SET_PDEATHSIG` makes that wait short.
pub(crate) fn hold_lock_in_child(cmd: &mut Command, lock_fd: RawFd) {
    // SAFETY: runs in the forked child before exec and only makes async-signal-safe system calls
    // (getppid, fcntl, prctl, _exit) on plain integers; it touches no memory of the parent.
    unsafe {
        let parent = libc::getpid();
        cmd.pre_exec(move || {
            let flags = libc::fcntl(lock_fd, libc::F_GETFD);
            if flags < 0 || libc::fcntl(lock_fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

/// stdout then stderr of a finished child, as text.
pub(crate) fn combined(output: &Output) -> String {
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    text
}

/// The last `n` non-empty lines of `text`.
pub(crate) fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn lock_ignoring_poison<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_line_parses() {
        let info = parse_probe("cpython\t3.11.2\tfinal\t/usr/bin/python3.11").unwrap();
        assert_eq!(info.version_tuple, (3, 11, 2));
        assert_eq!(info.identity(), "cpython 3.11.2 final /usr/bin/python3.11");
        assert!(parse_probe("cpython\t3.x\tfinal\t/p").is_none());
        assert!(parse_probe("garbage").is_none());
    }

    #[test]
    fn missing_python_says_how_to_fix() {
        let err = probe_base(Path::new("/nonexistent/python3")).unwrap_err();
        assert!(matches!(err, EnvError::NoBasePython { .. }));
        let msg = err.to_string();
        assert!(
            msg.contains("apt-get install python3 python3-venv"),
            "{msg}"
        );
        assert!(msg.contains("SANDLOT_PYTHON"), "{msg}");
    }

    #[test]
    fn non_python_is_broken() {
        let err = probe_base(Path::new("/bin/false")).unwrap_err();
        assert!(matches!(err, EnvError::BasePythonBroken { .. }), "{err}");
    }

    #[test]
    fn last_lines_skips_blank() {
        assert_eq!(last_lines("a\n\nb\nc\n\n", 2), "b\nc");
        assert_eq!(last_lines("a", 5), "a");
    }
}
