//! `sandlot env`: provisions the Python environment sandboxes run in and prints where it is.
//! Progress (a bar on a terminal, plain lines otherwise) goes to stderr; stdout carries only
//! the path, so scripts can take it: `py=$(sandlot env --print-python)`.

use anyhow::Context;
use sandlot_env::{EnvSpec, Progress};
use std::io::Write;
use std::path::Path;

/// `data_dir` names the server whose builder uids the build runs as (the env dir itself when
/// there is none to name).
pub fn env(
    env_dir: &Path,
    data_dir: &Path,
    extras: &[String],
    print_python: bool,
) -> anyhow::Result<u8> {
    let extras: Vec<&str> = extras
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .collect();
    let spec = EnvSpec::default_spec().try_with_extras(&extras)?;
    let isolation =
        sandlot_runtime::env_build::default_isolation(data_dir, crate::config::pip_index_url());
    let env =
        sandlot_env::ensure(env_dir, &spec, Progress::Auto, &isolation).with_context(|| {
            format!(
                "could not provision the Python environment in {}",
                env_dir.display()
            )
        })?;
    let path = if print_python { &env.python } else { &env.root };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", path.display())?;
    out.flush()?;
    Ok(0)
}
