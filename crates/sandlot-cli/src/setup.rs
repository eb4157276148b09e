//! Bringing up a runtime, the same way for `serve` and an embedded `run`: provision the Python
//! environment, open the store, start the runtime.

use crate::config;
use anyhow::Context;
use sandlot_env::{EnvSpec, Progress, PythonEnv};
use sandlot_runtime::{Runtime, RuntimeConfig};
use std::path::{Path, PathBuf};

/// Provisions (or finds, on every start but the first) the Python environment, built jailed
/// as the builds of the server with data dir `data_dir` are. Progress goes to stderr, which
/// keeps stdout for the command's own output.
pub async fn provision_env(env_dir: &Path, data_dir: &Path) -> anyhow::Result<PythonEnv> {
    let dir = env_dir.to_owned();
    let isolation =
        sandlot_runtime::env_build::default_isolation(data_dir, config::pip_index_url());
    tokio::task::spawn_blocking(move || {
        sandlot_env::ensure(&dir, &EnvSpec::default_spec(), Progress::Auto, &isolation)
    })
    .await
    .context("the environment provisioning task failed")?
    .with_context(|| {
        format!(
            "could not provision the Python environment in {}",
            env_dir.display()
        )
    })
}

/// Starts a runtime with its state in `data_dir` and the environment from `env_dir`, where
/// templates with extra packages get theirs too; `capacity` overrides the runtime's defaults.
pub async fn start_runtime(
    data_dir: &Path,
    env_dir: &Path,
    capacity: config::Capacity,
) -> anyhow::Result<(Runtime, RuntimeConfig)> {
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("could not create the data dir {}", data_dir.display()))?;
    let env_dir = absolute(env_dir)?;
    let env = provision_env(&env_dir, data_dir).await?;
    tracing::info!(python = %env.version, env = %env.root.display(), "python environment ready");
    let store_path = config::store_path(data_dir);
    let store = sandlot_store::Store::open(&store_path)
        .with_context(|| format!("could not open the store {}", store_path.display()))?;
    let mut cfg = RuntimeConfig::new(absolute(data_dir)?, env.root.clone());
    cfg.envs_dir = Some(env_dir);
    cfg.pip_index_url = config::pip_index_url();
    capacity.apply(&mut cfg);
    let rt = Runtime::start(cfg.clone(), store)
        .await
        .context("could not start the runtime")?;
    Ok((rt, cfg))
}

/// The runtime hands paths to processes with other working directories: make them absolute.
pub fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("could not resolve {}", path.display()))
}
