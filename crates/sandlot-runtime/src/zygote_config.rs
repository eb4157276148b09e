//! The configuration of zygotes and the environment sandboxes inherit: what a zygote's
//! private base root binds, the environment allowlist, the paths a Python environment must not
//! lie under, and the entry point of `sandlot __zygote-launch`, which confines a process as a
//! zygote and execs it.

use crate::assets;
use crate::error::{RuntimeError, ZygoteLaunchError};
use sandlot_jail::cgroup::Cgroup;
use sandlot_jail::config::{Bind, ZygoteConfig};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Paths every sandbox (or zygote) mounts something of its own over: a Python environment
/// there would be hidden from the code that needs it.
const SHADOWED: &[&str] = &[
    "/tmp",
    "/var/tmp",
    "/workspace",
    "/dev",
    "/proc",
    "/opt/sandlot",
    "/etc",
];

/// The environment is bound into sandboxes at its own path (scripts in it name that path), so
/// it must not lie where a sandbox mounts its own directories.
pub(crate) fn check_env_visible(env_root: &Path) -> Result<(), RuntimeError> {
    for p in SHADOWED {
        if env_root.starts_with(p) {
            return Err(RuntimeError::EnvShadowed {
                env: env_root.to_path_buf(),
                under: p,
            });
        }
    }
    Ok(())
}

/// The environment of zygotes and sandboxes: nothing of the server's own, an allowlist only.
pub(crate) fn sandbox_env(env_root: &Path) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let bin = env_root.join("bin");
    let pairs = [
        (
            "PATH",
            format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display()),
        ),
        ("HOME", "/workspace".into()),
        ("USER", "user".into()),
        ("LANG", "C.UTF-8".into()),
        ("LC_ALL", "C.UTF-8".into()),
        ("TERM", "dumb".into()),
        ("SHELL", "/bin/bash".into()),
        ("VIRTUAL_ENV", env_root.display().to_string()),
        ("PYTHONPATH", format!("{}/python", assets::INSIDE_ROOT)),
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

/// How a template's zygote is launched: the private base root it sees (the Python environment
/// and sandlot's own files bound read-only), its uid and cgroup, and the Python program it
/// runs.
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
            source: env_root.to_path_buf(),
            target: env_root.to_path_buf(),
        },
        Bind {
            source: lib_dir.to_path_buf(),
            target: PathBuf::from(assets::INSIDE_ROOT),
        },
    ];
    // The venv's interpreter lives in its base prefix; bind it too when it is not under /usr.
    if let Ok(cfg) = std::fs::read_to_string(env_root.join("pyvenv.cfg")) {
        for line in cfg.lines() {
            if let Some(home) = line
                .strip_prefix("home")
                .map(|r| r.trim_start_matches([' ', '=']))
            {
                let home = Path::new(home.trim());
                if let Some(prefix) = home.parent() {
                    if !prefix.starts_with("/usr") && prefix.is_dir() {
                        binds.push(Bind {
                            source: prefix.to_path_buf(),
                            target: prefix.to_path_buf(),
                        });
                    }
                }
            }
        }
    }
    let python = env_root.join("bin/python");
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
        env: sandbox_env(env_root).into_iter().collect(),
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
