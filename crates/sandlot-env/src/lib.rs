//! Provisions the Python environment sandboxes run in: a venv made from a system interpreter
//! with pinned ipython, numpy, pandas, matplotlib, matplotlib-inline and cloudpickle (plus
//! optional extra groups), with a progress bar on a terminal and log lines elsewhere.
//!
//! [`ensure`] builds `<envs_dir>/<hash>/` once, where the hash covers the base interpreter and the
//! pins; later calls (any process) take a fast path that checks the `.sandlot-ready` marker and
//! runs the venv's python once. Builds are serialized by an exclusive `flock` on
//! `<envs_dir>/<hash>.lock`; the full output of each build is appended to `<envs_dir>/<hash>.log`.
//!
//! Layout of a built environment:
//!
//! ```text
//! <envs_dir>/<hash>.lock          flock(2) target, kept
//! <envs_dir>/<hash>.log           output of every build of this hash
//! <envs_dir>/<hash>/bin/python    -> the base interpreter (venv symlink)
//! <envs_dir>/<hash>/sandlot-env.json   description (versions, installed packages; paths
//!                                      relative to the environment's root)
//! <envs_dir>/<hash>/.sandlot-ready     marker, written last (spec, versions, created_at)
//! ```
//!
//! Everything is world-readable (children run with umask 022): sandboxes run as other uids.
//! A root caller's build runs every child jailed as a throw-away uid (`jail`: only the download
//! step has a network, through the egress proxy to the package index), and the finished tree
//! is handed to root and made read-only, fd-relative (`seal`), before anything imports it.
//! A built environment is relocatable and names nothing of the path it was built at: sandboxes
//! see it at [`SANDBOX_ROOT`] (see `relocate`).
//!
//! The modules stand in floors, each using only the floors below it: `pins` (the pinned
//! packages, plain data) and `progress`; `error`; `lock`, `python` and `relocate`; `spec`;
//! `build`.

mod build;
mod error;
mod jail;
mod lock;
mod pins;
mod progress;
mod python;
mod relocate;
mod seal;
mod spec;

pub use build::{ensure, PythonEnv, DESCRIPTION_FILE, MARKER_FILE};
pub use error::EnvError;
pub use jail::{BuildJail, BuildLimits, Isolation, BUILD_JAIL_ARG};
pub use pins::{extra_group, DEFAULT_PACKAGES, EXTRA_GROUPS};
pub use progress::Progress;
pub use python::{find_base_python, BASE_PYTHON_VAR, DEFAULT_BASE_PYTHON, MIN_PYTHON};
pub use relocate::SANDBOX_ROOT;
pub use spec::EnvSpec;
