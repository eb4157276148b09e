//! The peers sandlot is measured against in the same run: a cold start of the env's Python
//! with the same imports, bubblewrap around that cold start, and jupyter_client talking to a
//! local ipykernel; and the cached venvs the Python peers and clients run in.

use crate::stats::Samples;
use anyhow::{bail, Context};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The imports of sandlot's default template, and the cell the create benchmark runs.
pub const COLD_CODE: &str =
    "import numpy, pandas, matplotlib, matplotlib.pyplot, IPython; print(1)";

/// The jupyter peer script, also in `bench/` for running by hand.
const JUPYTER_PEER: &str = include_str!("../../../bench/jupyter_peer.py");
pub const IPYKERNEL: &str = "ipykernel==6.31.0";
pub const JUPYTER_CLIENT: &str = "jupyter_client==8.10.0";

/// Longest one cold start may take.
const COLD_TIMEOUT: Duration = Duration::from_secs(60);

/// The same environment sandlot gives sandboxes (thread caps, Agg backend, unbuffered
/// output), with matplotlib's font cache in a warmed directory so no run rebuilds it.
fn python_env(env_root: &Path, home: &str, mpl: &str) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let path = format!("{}/bin:/usr/local/bin:/usr/bin:/bin", env_root.display());
    for (k, v) in [
        ("PATH", path.as_str()),
        ("HOME", home),
        ("LANG", "C.UTF-8"),
        ("LC_ALL", "C.UTF-8"),
        ("PYTHONDONTWRITEBYTECODE", "1"),
        ("PYTHONUNBUFFERED", "1"),
        ("MPLBACKEND", "Agg"),
        ("MPLCONFIGDIR", mpl),
        ("OPENBLAS_NUM_THREADS", "1"),
        ("OMP_NUM_THREADS", "1"),
        ("MKL_NUM_THREADS", "1"),
        ("NUMEXPR_NUM_THREADS", "1"),
    ] {
        m.insert(k.to_owned(), v.to_owned());
    }
    m.insert("IPYTHONDIR".into(), format!("{home}/.ipython"));
    m.insert("XDG_CACHE_HOME".into(), format!("{home}/.cache"));
    m
}

/// A way to start the cold-start peer.
pub struct ColdPeer {
    pub name: &'static str,
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
}

impl ColdPeer {
    /// `<env>/bin/python -c COLD_CODE`.
    pub fn plain(env_root: &Path, work: &Path) -> anyhow::Result<ColdPeer> {
        let home = work.join("peer-home");
        let mpl = home.join("mpl");
        std::fs::create_dir_all(&mpl)?;
        Ok(ColdPeer {
            name: "cold start",
            argv: vec![
                env_root.join("bin/python").display().to_string(),
                "-c".into(),
                COLD_CODE.into(),
            ],
            env: python_env(
                env_root,
                &home.display().to_string(),
                &mpl.display().to_string(),
            ),
        })
    }

    /// bubblewrap around the same cold start: every namespace unshared, the system and the env
    /// read-only, a tmpfs /tmp, and the warmed matplotlib cache bound in.
    pub fn bwrap(bwrap: &Path, env_root: &Path, work: &Path) -> anyhow::Result<ColdPeer> {
        let mpl = work.join("peer-home/mpl");
        std::fs::create_dir_all(&mpl)?;
        let env_s = env_root.display().to_string();
        let mut argv: Vec<String> = vec![bwrap.display().to_string()];
        let ro = |a: &mut Vec<String>, p: &str| {
            if Path::new(p).exists() {
                a.extend(["--ro-bind".into(), p.into(), p.into()]);
            }
        };
        ro(&mut argv, "/usr");
        ro(&mut argv, "/etc");
        for (link, target) in [
            ("/bin", "usr/bin"),
            ("/sbin", "usr/sbin"),
            ("/lib", "usr/lib"),
            ("/lib64", "usr/lib64"),
        ] {
            match std::fs::read_link(link) {
                Ok(_) => argv.extend(["--symlink".into(), target.into(), link.into()]),
                Err(_) => ro(&mut argv, link),
            }
        }
        ro(&mut argv, &env_s);
        // The env's interpreter lives in its base prefix; bind that too when it is not in /usr.
        let real = std::fs::canonicalize(env_root.join("bin/python"))?;
        if !real.starts_with("/usr") {
            if let Some(prefix) = real.parent().and_then(Path::parent) {
                ro(&mut argv, &prefix.display().to_string());
            }
        }
        argv.extend(
            [
                "--bind",
                &mpl.display().to_string(),
                "/mpl",
                "--proc",
                "/proc",
                "--dev",
                "/dev",
                "--tmpfs",
                "/tmp",
                "--unshare-all",
                "--die-with-parent",
                "--new-session",
                "--chdir",
                "/tmp",
                "--",
            ]
            .map(str::to_owned),
        );
        argv.extend([
            env_root.join("bin/python").display().to_string(),
            "-c".into(),
            COLD_CODE.into(),
        ]);
        Ok(ColdPeer {
            name: "bubblewrap + cold start",
            argv,
            env: python_env(env_root, "/tmp", "/mpl"),
        })
    }

    fn spawn(&self) -> anyhow::Result<Child> {
        Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .env_clear()
            .envs(&self.env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("could not start {}", self.argv[0]))
    }

    /// One run: time until `1` is on stdout (the first result), and until the process exited.
    pub fn run_once(&self) -> anyhow::Result<(Duration, Duration)> {
        let t = Instant::now();
        let mut child = self.spawn()?;
        let mut out = child.stdout.take().expect("piped");
        let mut got = Vec::new();
        let mut first = None;
        let mut buf = [0u8; 256];
        while first.is_none() {
            let left = COLD_TIMEOUT.saturating_sub(t.elapsed());
            if left.is_zero() || !wait_readable(out.as_raw_fd(), left) {
                let _ = child.kill();
                let _ = child.wait();
                bail!("{}: no output in {COLD_TIMEOUT:?}", self.name);
            }
            let n = out.read(&mut buf)?;
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            if got.ends_with(b"\n") {
                first = Some(t.elapsed());
            }
        }
        let status = child.wait()?;
        let exit = t.elapsed();
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        if !status.success() || got != b"1\n" {
            bail!(
                "{} failed ({status}), stdout {:?}, stderr: {}",
                self.name,
                String::from_utf8_lossy(&got),
                err.chars()
                    .rev()
                    .take(1500)
                    .collect::<String>()
                    .chars()
                    .rev()
                    .collect::<String>()
            );
        }
        Ok((first.unwrap_or(exit), exit))
    }

    /// `warmup` untimed runs (page cache, font cache), then up to `iters` timed ones within
    /// `limit`. Returns (first result, process exit) samples.
    pub fn measure(
        &self,
        warmup: usize,
        iters: usize,
        limit: Duration,
    ) -> anyhow::Result<(Samples, Samples)> {
        for _ in 0..warmup {
            self.run_once()?;
        }
        let t = Instant::now();
        let (mut first, mut exit) = (Samples::new(), Samples::new());
        for _ in 0..iters {
            if t.elapsed() > limit {
                break;
            }
            let (f, e) = self.run_once()?;
            first.push(f);
            exit.push(e);
        }
        Ok((first, exit))
    }
}

fn wait_readable(fd: i32, timeout: Duration) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: poll on one valid pollfd for a bounded time.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    r > 0
}

/// `bwrap` on PATH, if installed.
pub fn find_bwrap() -> Option<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("bwrap"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
        .into_iter()
        .find(|p| p.is_file())
}

/// The venv the Jupyter peer runs in: the env's base Python, the env's pinned
/// numpy/pandas/matplotlib/ipython, plus ipykernel and jupyter_client. Built once and reused
/// (keyed by what it contains).
pub struct JupyterVenv {
    pub dir: PathBuf,
    pub requirements: Vec<String>,
}

impl JupyterVenv {
    pub fn requirements(manifest: &Value) -> Vec<String> {
        let mut reqs = Vec::new();
        for name in ["numpy", "pandas", "matplotlib", "ipython"] {
            match manifest["versions"][name].as_str() {
                Some(v) => reqs.push(format!("{name}=={v}")),
                None => reqs.push(name.to_owned()),
            }
        }
        reqs.push(IPYKERNEL.into());
        reqs.push(JUPYTER_CLIENT.into());
        reqs
    }

    pub fn ensure(cache: &Path, manifest: &Value) -> anyhow::Result<JupyterVenv> {
        let requirements = Self::requirements(manifest);
        let base = manifest["spec"]["base_python"]
            .as_str()
            .unwrap_or("/usr/bin/python3")
            .to_owned();
        let dir = ensure_venv(cache, "jupyter-peer", &base, &requirements)?;
        Ok(JupyterVenv { dir, requirements })
    }

    /// Runs the peer script; returns its JSON report.
    pub fn run(
        &self,
        work: &Path,
        iters: usize,
        warmup: usize,
        limit: Duration,
    ) -> anyhow::Result<Value> {
        let script = work.join("jupyter_peer.py");
        std::fs::write(&script, JUPYTER_PEER)?;
        let home = work.join("jupyter-home");
        let mpl = home.join("mpl");
        std::fs::create_dir_all(&mpl)?;
        let mut env = python_env(
            &self.dir,
            &home.display().to_string(),
            &mpl.display().to_string(),
        );
        env.insert(
            "JUPYTER_RUNTIME_DIR".into(),
            home.join("runtime").display().to_string(),
        );
        env.insert(
            "JUPYTER_DATA_DIR".into(),
            home.join("data").display().to_string(),
        );
        env.insert(
            "JUPYTER_CONFIG_DIR".into(),
            home.join("config").display().to_string(),
        );
        env.insert("JUPYTER_PLATFORM_DIRS".into(), "1".into());
        let out = run_bounded(
            Command::new(self.dir.join("bin/python"))
                .arg(&script)
                .args([
                    "--iterations",
                    &iters.to_string(),
                    "--warmup",
                    &warmup.to_string(),
                ])
                .args(["--time-limit", &limit.as_secs_f64().to_string()])
                .env_clear()
                .envs(&env),
            limit + Duration::from_secs(300),
        )?;
        let line = out
            .lines()
            .rev()
            .find(|l| l.trim_start().starts_with('{'))
            .context("no JSON from the peer")?;
        Ok(serde_json::from_str(line)?)
    }
}

/// A venv of `base` with `requirements` installed, under `cache/<prefix>-<hash>` where the hash
/// keys what it contains; built once (with pip, bounded in time) and reused after that.
pub fn ensure_venv(
    cache: &Path,
    prefix: &str,
    base: &str,
    requirements: &[String],
) -> anyhow::Result<PathBuf> {
    let key = short_hash(&format!("{base} {}", requirements.join(" ")));
    let dir = cache.join(format!("{prefix}-{key}"));
    let ready = dir.join(".bench-ready");
    if ready.exists() {
        return Ok(dir);
    }
    eprintln!(
        "building the {prefix} venv in {} ({})",
        dir.display(),
        requirements.join(" ")
    );
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(cache)?;
    run_bounded(
        Command::new(base).args(["-m", "venv"]).arg(&dir),
        Duration::from_secs(300),
    )?;
    run_bounded(
        Command::new(dir.join("bin/python"))
            .args(["-m", "pip", "install", "--disable-pip-version-check", "-q"])
            .args(requirements),
        Duration::from_secs(1200),
    )?;
    std::fs::write(&ready, requirements.join("\n"))?;
    Ok(dir)
}

/// Runs a command to completion within `limit`; returns its stdout, or an error with its
/// stderr.
pub fn run_bounded(cmd: &mut Command, limit: Duration) -> anyhow::Result<String> {
    let desc = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not run {desc}"))?;
    let mut out_pipe = child.stdout.take().expect("piped");
    let mut err_pipe = child.stderr.take().expect("piped");
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out_pipe.read_to_string(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{desc} took longer than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = out_t.join().unwrap_or_default();
    let err = err_t.join().unwrap_or_default();
    if !status.success() {
        let tail: String = err
            .chars()
            .rev()
            .take(3000)
            .collect::<String>()
            .chars()
            .rev()
            .collect();
        bail!("{desc} failed ({status}):\n{tail}");
    }
    Ok(out)
}

/// FNV-1a, hex: a stable key for cache directories.
pub fn short_hash(s: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn peer_requirements_pin_the_env_versions() {
        let m = json!({"versions": {"numpy": "2.2.6", "pandas": "2.3.3", "matplotlib": "3.10.9", "ipython": "8.39.0"}});
        let r = JupyterVenv::requirements(&m);
        assert_eq!(
            r,
            [
                "numpy==2.2.6",
                "pandas==2.3.3",
                "matplotlib==3.10.9",
                "ipython==8.39.0",
                IPYKERNEL,
                JUPYTER_CLIENT
            ]
        );
    }

    #[test]
    fn hash_is_stable() {
        assert_eq!(short_hash(""), "cbf29ce484222325");
        assert_ne!(short_hash("a"), short_hash("b"));
    }
}
