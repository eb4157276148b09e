//! The configuration of zygotes and the environment sandboxes inherit: what a zygote's
//! private base root binds, the environment allowlist, the paths a base interpreter must not
//! lie under, and the entry point of `sandlot __zygote-launch`, which confines a process as a
//! zygote and execs it.
//!
//! The host's layout stays out of sight: sandlot's lib dir appears at `/opt/sandlot`
//! ([`assets::INSIDE_ROOT`]) and the template's Python environment at `/opt/sandlot/env`
//! ([`SANDBOX_ROOT`]), whatever their paths under the data dir (the base root shows them
//! through overlays that name no host path). Only a base interpreter outside `/usr` is bound at
//! its own path, since the venv's `bin/python` links to it there.

use crate::assets;
use crate::error::{RuntimeError, ZygoteLaunchError};
use sandlot_env::SANDBOX_ROOT;
use sandlot_jail::cgroup::Cgroup;
use sandlot_jail::config::{Bind, ZygoteConfig};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Paths every sandbox (or zygote) mounts something of its own over: a base interpreter there
/// would be hidden from the code that needs it.
const SHADOWED: &[&str] = &[
    "/tmp",
    "/var/tmp",
    "/workspace",
    "/dev",
    "/proc",
    "/opt/sandlot",
    "/etc",
];

/// The environment itself may lie anywhere (sandboxes see it at [`SANDBOX_ROOT`]), but a base
/// interpreter outside `/usr` is bound at its own path, so it must not lie where a sandbox
/// mounts its own directories.
pub(crate) fn check_env_visible(env_root: &Path) -> Result<(), RuntimeError> {
    let Some(prefix) = base_prefix(env_root) else {
        return Ok(());
    };
    for p in SHADOWED {
        if prefix.starts_with(p) {
            return Err(RuntimeError::EnvShadowed {
                env: prefix,
                under: p,
            });
        }
    }
    Ok(())
}

/// The prefix of the venv's base interpreter (from `home` in its `pyvenv.cfg`), when it is not
/// under `/usr` (which every base root binds) and exists.
fn base_prefix(env_root: &Path) -> Option<PathBuf> {
    let cfg = std::fs::read_to_string(env_root.join("pyvenv.cfg")).ok()?;
    cfg.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        if key.trim() != "home" {
            return None;
        }
        let prefix = Path::new(value.trim()).parent()?;
        (!prefix.starts_with("/usr") && prefix.is_dir()).then(|| prefix.to_path_buf())
    })
}

/// Where `pip install` inside a sandbox puts packages: in its workspace, so they last as long as
/// its files (restarts, pause, forks, snapshots), and skipped by the driver's change tracking.
pub(crate) const PACKAGES_DIR: &str = "/workspace/.packages";

/// The environment of zygotes and sandboxes: nothing of the server's own, an allowlist only.
/// Every template's Python environment is at [`SANDBOX_ROOT`] inside.
pub(crate) fn sandbox_env() -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let pairs = [
        (
            "PATH",
            format!("{SANDBOX_ROOT}/bin:/usr/local/bin:/usr/bin:/bin"),
        ),
        ("HOME", "/workspace".into()),
        ("USER", "user".into()),
        ("LANG", "C.UTF-8".into()),
        ("LC_ALL", "C.UTF-8".into()),
        ("TERM", "dumb".into()),
        ("SHELL", "/bin/bash".into()),
        ("VIRTUAL_ENV", SANDBOX_ROOT.into()),
        // `/workspace/.packages` is where `pip install` puts packages (`PIP_TARGET`: the
        // environment is read-only, and a venv has no user site); it is on the path of the
        // sandbox's own Python programs, and the driver keeps it last on its own path, so an
        // install adds packages and never replaces the ones the driver runs on.
        (
            "PYTHONPATH",
            format!("{}/python:{PACKAGES_DIR}", assets::INSIDE_ROOT),
        ),
        ("PIP_TARGET", PACKAGES_DIR.into()),
        ("PYTHONDONTWRITEBYTECODE", "1".into()),
        ("PYTHONUNBUFFERED", "1".into()),
        ("MPLBACKEND", "Agg".into()),
        ("MPLCONFIGDIR", "/tmp/.config/matplotlib".into()),
        ("IPYTHONDIR", "/tmp/.ipython".into()),
        ("XDG_CACHE_HOME", "/tmp/.cache".into()),
        ("PIP_NO_INPUT", "1".into()),
        ("OPENBLAS_NUM_THREADS", "1".into()),
        ("OMP_NUM_THREADS", "1".into()),
        ("MKL_NUM_THREADS", "1".into()),
        ("NUMEXPR_NUM_THREADS", "1".into()),
    ];
    for (k, v) in pairs {
        m.insert(k.to_string(), v);
    }
    // Some CPUs need OpenBLAS told which kernel to use; pass that through.
    for k in ["OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"] {
        if let Ok(v) = std::env::var(k) {
            m.insert(k.to_string(), v);
        }
    }
    m
}

/// How a template's zygote is launched: the private base root it sees (sandlot's own files
/// and the Python environment, read-only at neutral paths), its uid and cgroup, and the Python
/// program it runs.
pub(crate) fn zygote_config(
    env_root: &Path,
    lib_dir: &Path,
    staging: &Path,
    uid: u32,
    cgroup: &Cgroup,
    template: &str,
) -> ZygoteConfig {
    let mut binds = vec![
        Bind {
            source: lib_dir.to_path_buf(),
            target: PathBuf::from(assets::INSIDE_ROOT),
        },
        // Nested in the lib dir's view, which the base root provides a mount point for.
        Bind {
            source: env_root.to_path_buf(),
            target: PathBuf::from(SANDBOX_ROOT),
        },
    ];
    // The venv's interpreter lives in its base prefix, linked to by its path: bind it there
    // when it is not under /usr.
    if let Some(prefix) = base_prefix(env_root) {
        binds.push(Bind {
            source: prefix.clone(),
            target: prefix,
        });
    }
    let python = Path::new(SANDBOX_ROOT).join("bin/python");
    ZygoteConfig {
        staging_dir: staging.to_path_buf(),
        binds,
        uid,
        gid: uid,
        cgroup_procs: cgroup.procs_files(),
        argv: vec![
            python.display().to_string(),
            "-s".into(),
            format!("{}/python/sandlot_runtime/zygote.py", assets::INSIDE_ROOT),
            format!("{}/templates/{template}.json", assets::INSIDE_ROOT),
            format!("{}/lib/{}", assets::INSIDE_ROOT, assets::JAIL_LIB),
        ],
        env: sandbox_env().into_iter().collect(),
        tmp_bytes: 64 << 20,
        nofile: 4096,
    }
}

/// Entry point of `sandlot __zygote-launch <config json>`: confines this process as a zygote
/// and execs it. Never returns on success.
pub fn zygote_launch_main(config_json: &str) -> ZygoteLaunchError {
    let cfg: ZygoteConfig = match serde_json::from_str(config_json) {
        Ok(c) => c,
        Err(e) => return ZygoteLaunchError::Config(e),
    };
    match sandlot_jail::zygote::launch(&cfg) {
        Ok(never) => match never {},
        Err(e) => ZygoteLaunchError::Launch(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sandbox_environment_names_only_neutral_paths() {
        let env = sandbox_env();
        assert_eq!(env["VIRTUAL_ENV"], "/opt/sandlot/env");
        assert_eq!(
            env["PATH"],
            "/opt/sandlot/env/bin:/usr/local/bin:/usr/bin:/bin"
        );
        assert_eq!(
            env["PYTHONPATH"],
            "/opt/sandlot/python:/workspace/.packages"
        );
        assert_eq!(env["PIP_TARGET"], "/workspace/.packages");
    }

    #[test]
    fn an_environment_may_lie_anywhere_its_base_interpreter_may_not() {
        let dir = tempfile::tempdir_in("/tmp").unwrap();
        // Under /tmp (where sandboxes mount their own /tmp): fine, it is seen at SANDBOX_ROOT.
        std::fs::write(dir.path().join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
        assert!(check_env_visible(dir.path()).is_ok());
        assert_eq!(base_prefix(dir.path()), None);
        // A base interpreter under /tmp is bound at its own path, where /tmp would hide it.
        let prefix = dir.path().join("python");
        std::fs::create_dir_all(prefix.join("bin")).unwrap();
        let cfg = format!(
            "home = {}\nversion = 3.12.0\n",
            prefix.join("bin").display()
        );
        std::fs::write(dir.path().join("pyvenv.cfg"), cfg).unwrap();
        assert_eq!(base_prefix(dir.path()), Some(prefix.clone()));
        match check_env_visible(dir.path()) {
            Err(RuntimeError::EnvShadowed { env, under }) => {
                assert_eq!((env, under), (prefix, "/tmp"));
            }
            other => panic!("expected EnvShadowed, got {other:?}"),
        }
    }
}
