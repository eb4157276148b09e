//! The errors of provisioning: one variant per failing operation.

use std::io;
use std::path::PathBuf;

use crate::pins::EXTRA_GROUP_NAMES;

/// How to get a usable base interpreter; appended to every "no base python" error.
pub(crate) const BASE_PYTHON_FIX: &str =
    "install Debian's Python with `apt-get install python3 python3-venv`, \
     or point SANDLOT_PYTHON at a CPython >= 3.9 that has the venv module \
     (outside /root: sandboxes cannot see it)";

/// Everything that can go wrong while finding a base Python or provisioning an environment.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// The base interpreter could not be started at all (missing file, not executable).
    #[error("base python {path} cannot be run: {source}; to fix: {fix}", fix = BASE_PYTHON_FIX)]
    NoBasePython {
        /// The interpreter that was tried.
        path: PathBuf,
        /// Why it could not be started.
        source: io::Error,
    },

    /// The base interpreter started but its probe script failed or printed garbage.
    #[error("base python {path} failed its probe ({status}): {output}; to fix: {fix}", fix = BASE_PYTHON_FIX)]
    BasePythonBroken {
        /// The interpreter that was probed.
        path: PathBuf,
        /// Its exit status.
        status: String,
        /// What it printed (stderr, or the unparseable stdout).
        output: String,
    },

    /// The base interpreter is older than the oldest we support.
    #[error("base python {path} is {version}, sandlot needs CPython >= {minimum}; to fix: {fix}", fix = BASE_PYTHON_FIX)]
    BasePythonTooOld {
        /// The interpreter that was probed.
        path: PathBuf,
        /// Its version, e.g. `3.8.10`.
        version: String,
        /// The oldest supported version.
        minimum: String,
    },

    /// The base interpreter has no `venv`/`ensurepip` (Debian ships them in python3-venv).
    #[error(
        "base python {path} cannot create virtual environments ({detail}); \
         to fix: `apt-get install python3-venv` (or the python3.X-venv package of that version)"
    )]
    BasePythonNoVenv {
        /// The interpreter that was probed.
        path: PathBuf,
        /// The import error it reported.
        detail: String,
    },

    /// An entry of `EnvSpec::packages` is not a pinned `name==version` requirement.
    #[error(
        "invalid requirement {requirement:?}: expected a pinned `name==version` \
         (or an extra group: {groups})",
        groups = EXTRA_GROUP_NAMES.join(", ")
    )]
    InvalidRequirement {
        /// The offending entry.
        requirement: String,
    },

    /// `EnvSpec::try_with_extras` got a name that is neither a group nor a pinned requirement.
    #[error("unknown extra group {name:?} (known: {groups})", groups = EXTRA_GROUP_NAMES.join(", "))]
    UnknownExtra {
        /// The name asked for.
        name: String,
    },

    /// A relative envs dir could not be made absolute (the current directory is gone).
    #[error("cannot resolve {path}: {source}")]
    ResolveDir {
        /// The directory as given.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },

    /// A directory (the envs dir) could not be created or made world-readable.
    #[error("cannot create directory {path}: {source}")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },

    /// The per-environment lock file could not be opened or locked.
    #[error("cannot lock {path}: {source}")]
    Lock {
        /// The lock file (`<envs_dir>/<hash>.lock`).
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },

    /// A half-built environment could not be removed.
    #[error("cannot remove the half-built environment {path}: {source}")]
    RemoveStale {
        /// The environment root.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },

    /// The build log could not be opened or written.
    #[error("cannot write the build log {path}: {source}")]
    BuildLog {
        /// The log file (`<envs_dir>/<hash>.log`).
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },

    /// A child process (venv, pip, the verifier) could not be started.
    #[error("cannot run `{command}`: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// The underlying error.
        source: io::Error,
    },

    /// `python -m venv` failed.
    #[error("`{command}` failed ({status}):\n{output}")]
    CreateVenv {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// Its last lines of output.
        output: String,
    },

    /// pip could not find a requested package or version.
    #[error("package not found: {package}: {message}")]
    PackageNotFound {
        /// The requirement pip could not satisfy, e.g. `numpy==99.0`.
        package: String,
        /// pip's own explanation (its `ERROR:` lines).
        message: String,
    },

    /// pip failed for another reason (resolution conflict, network, build...).
    #[error("`{command}` failed ({status}); last lines of its output:\n{tail}")]
    PipFailed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// The last ~20 lines of its combined output.
        tail: String,
    },

    /// The freshly installed packages did not import (or have the wrong version).
    #[error("verifying the environment with {python} failed: {detail}")]
    Verify {
        /// The venv interpreter.
        python: PathBuf,
        /// What failed, e.g. `import pandas: ImportError: ...`.
        detail: String,
    },

    /// The `.sandlot-ready` marker exists but could not be read.
    #[error("cannot read the ready marker {path}: {source}")]
    ReadMarker {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },

    /// The venv interpreter could not be started to describe itself.
    #[error("cannot run {python}: {source}")]
    InspectSpawn {
        /// The venv interpreter.
        python: PathBuf,
        /// The underlying error.
        source: io::Error,
    },

    /// The venv interpreter could not describe itself (version, prefix, site-packages).
    #[error("inspecting the environment with {python} failed: {detail}")]
    Inspect {
        /// The venv interpreter.
        python: PathBuf,
        /// Why.
        detail: String,
    },

    /// A file of the built environment could not be rewritten to be relocatable.
    #[error("cannot make the environment relocatable at {path}: {source}")]
    Relocate {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },

    /// `sandlot-env.json` could not be written.
    #[error("cannot write the environment description {path}: {source}")]
    WriteDescription {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },

    /// The `.sandlot-ready` marker could not be written.
    #[error("cannot write the ready marker {path}: {source}")]
    WriteMarker {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },

    /// The package index URL is not one a build can use.
    #[error("package index {url:?} cannot be used: {reason}")]
    IndexUrl {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },

    /// The builds' state directory (uid locks, staging directories) could not be made.
    #[error("cannot prepare the build state directory {path}: {source}")]
    BuildState {
        /// The directory.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },

    /// Every uid of the builder range is held by a running build.
    #[error("no free build uid in {first}..={last}: too many builds at once")]
    NoBuildUid {
        /// The first uid of the range.
        first: u32,
        /// The last uid of the range.
        last: u32,
    },

    /// The build's cgroup could not be made, limited or emptied.
    #[error("the build's cgroup: {source}")]
    BuildCgroup {
        /// The underlying error.
        source: sandlot_jail::cgroup::CgroupError,
    },

    /// A step of the build ran past its wall time and was killed.
    #[error("`{command}` ran longer than {seconds} s and was killed")]
    StepTimeout {
        /// The command line.
        command: String,
        /// The limit.
        seconds: u64,
    },

    /// The download step's egress proxy could not be set up.
    #[error("the build's egress proxy: {what}: {detail}")]
    Egress {
        /// What was being done.
        what: String,
        /// Why it failed.
        detail: String,
    },

    /// pip could not tell its default index.
    #[error("asking pip for its default index failed: {detail}")]
    DefaultIndex {
        /// What pip printed.
        detail: String,
    },

    /// The built tree could not be handed to root and made read-only, or holds something a
    /// build cannot have made honestly (a file of another owner).
    #[error("cannot seal the built environment at {path}: {detail}")]
    Seal {
        /// The entry.
        path: PathBuf,
        /// Why.
        detail: String,
    },
}
