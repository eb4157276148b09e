//! Builds real (tiny) environments with the machine's base Python and pip.
//! Needs `/usr/bin/python3` with venv (or `SANDLOT_PYTHON`) and access to the package index.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::time::Instant;

use sandlot_env::{ensure, find_base_python, EnvError, EnvSpec, Progress, MARKER_FILE};

fn tiny_spec() -> EnvSpec {
    EnvSpec {
        base_python: find_base_python().expect("a base python (apt-get install python3-venv)"),
        packages: vec!["six==1.16.0".to_string()],
    }
}

fn builds_in_log(envs_dir: &Path, hash: &str) -> usize {
    fs::read_to_string(envs_dir.join(format!("{hash}.log")))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("=== build ") && l.contains(" started "))
        .count()
}

#[test]
fn provisions_then_takes_the_fast_path() {
    let dir = tempfile::tempdir().unwrap();
    let spec = tiny_spec();
    let env = ensure(
        dir.path(),
        &spec,
        Progress::Plain,
        &sandlot_env::Isolation::None,
    )
    .expect("first ensure builds");

    assert_eq!(env.spec_hash, spec.hash());
    assert_eq!(env.root, dir.path().join(&env.spec_hash));
    assert_eq!(env.python, env.root.join("bin/python"));
    assert!(env.version.starts_with("3."), "{}", env.version);
    assert!(env.site_packages.join("six.py").is_file());
    assert!(env.base_prefix.is_absolute());
    assert!(!env.base_prefix.starts_with(&env.root));

    // The marker (last) and the description, both world-readable JSON.
    for name in [MARKER_FILE, "sandlot-env.json"] {
        let path = env.root.join(name);
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o044, 0o044, "{name} mode {mode:o}");
        let json: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        assert_eq!(json["spec_hash"], env.spec_hash.as_str());
    }
    let marker: serde_json::Value =
        serde_json::from_slice(&fs::read(env.root.join(MARKER_FILE)).unwrap()).unwrap();
    assert_eq!(marker["versions"]["six"], "1.16.0");
    assert_eq!(marker["spec"]["packages"][0], "six==1.16.0");
    assert!(marker["created_at"].as_str().unwrap().contains('T'));

    let out = Command::new(&env.python)
        .args(["-c", "import six, sys; print(six.__version__, sys.prefix)"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.starts_with("1.16.0 "), "{stdout}");

    // The second call takes the fast path: it finds the marker and builds nothing (no second
    // build in the log). How fast that path is belongs to the benchmark, not to this test.
    let started = Instant::now();
    let again = ensure(
        dir.path(),
        &spec,
        Progress::Plain,
        &sandlot_env::Isolation::None,
    )
    .expect("fast path");
    eprintln!("fast path took {:?}", started.elapsed());
    assert_eq!(again, env);
    assert_eq!(builds_in_log(dir.path(), &env.spec_hash), 1);
}

#[test]
fn concurrent_callers_build_once() {
    let dir = tempfile::tempdir().unwrap();
    let spec = tiny_spec();
    let barrier = Arc::new(Barrier::new(2));
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let (dir, spec, barrier) = (dir.path().to_path_buf(), spec.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                ensure(&dir, &spec, Progress::Quiet, &sandlot_env::Isolation::None)
            })
        })
        .collect();
    let envs: Vec<_> = handles
        .into_iter()
        .map(|h| h.join().unwrap().expect("both callers succeed"))
        .collect();
    assert_eq!(envs[0], envs[1]);
    assert_eq!(builds_in_log(dir.path(), &envs[0].spec_hash), 1);
}

#[test]
fn half_built_env_is_wiped_and_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let spec = tiny_spec();
    let root = dir.path().join(spec.hash());
    fs::create_dir_all(root.join("bin")).unwrap();
    fs::write(root.join("leftover"), b"from a build that died").unwrap();

    let env = ensure(
        dir.path(),
        &spec,
        Progress::Quiet,
        &sandlot_env::Isolation::None,
    )
    .expect("rebuilds");
    assert_eq!(env.root, root);
    assert!(!root.join("leftover").exists());
    assert!(root.join(MARKER_FILE).is_file());
}

#[test]
fn unknown_package_is_package_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let spec = EnvSpec {
        packages: vec!["sandlot-no-such-package-xyz==1.0".to_string()],
        ..tiny_spec()
    };
    match ensure(
        dir.path(),
        &spec,
        Progress::Quiet,
        &sandlot_env::Isolation::None,
    ) {
        Err(err @ EnvError::PackageNotFound { .. }) => {
            eprintln!("{err}");
            let EnvError::PackageNotFound { package, message } = err else {
                unreachable!()
            };
            assert_eq!(package, "sandlot-no-such-package-xyz==1.0");
            assert!(message.contains("sandlot-no-such-package-xyz"), "{message}");
        }
        other => panic!("expected PackageNotFound, got {other:?}"),
    }
    // Nothing was marked ready.
    assert!(!dir.path().join(spec.hash()).join(MARKER_FILE).exists());
}

#[test]
fn invalid_requirement_is_rejected_before_pip() {
    let dir = tempfile::tempdir().unwrap();
    let spec = tiny_spec().with_extras(&["--index-url=x"]);
    assert!(matches!(
        ensure(
            dir.path(),
            &spec,
            Progress::Quiet,
            &sandlot_env::Isolation::None
        ),
        Err(EnvError::InvalidRequirement { .. })
    ));
    assert!(fs::read_dir(dir.path()).unwrap().next().is_none());
}

#[test]
fn missing_base_python_says_how_to_fix() {
    let dir = tempfile::tempdir().unwrap();
    let spec = EnvSpec {
        base_python: "/nonexistent/bin/python3".into(),
        ..tiny_spec()
    };
    let err = ensure(
        dir.path(),
        &spec,
        Progress::Quiet,
        &sandlot_env::Isolation::None,
    )
    .unwrap_err();
    assert!(matches!(err, EnvError::NoBasePython { .. }), "{err}");
    assert!(err
        .to_string()
        .contains("apt-get install python3 python3-venv"));
}

#[test]
fn broken_env_with_marker_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let spec = tiny_spec();
    let env = ensure(
        dir.path(),
        &spec,
        Progress::Quiet,
        &sandlot_env::Isolation::None,
    )
    .expect("builds");
    fs::remove_file(&env.python).unwrap();
    let again = ensure(
        dir.path(),
        &spec,
        Progress::Plain,
        &sandlot_env::Isolation::None,
    )
    .expect("rebuilds");
    assert_eq!(again, env);
    assert!(again.python.exists());
    assert_eq!(builds_in_log(dir.path(), &env.spec_hash), 2);
}

/// Every file under `dir` (symlinks not followed) whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            let meta = fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file() {
                let bytes = fs::read(&path).unwrap();
                if bytes.windows(needle.len()).any(|w| w == needle) {
                    found.push(path.strip_prefix(dir).unwrap().display().to_string());
                }
            }
        }
    }
    found.sort();
    found
}

#[test]
fn built_env_names_no_build_path_and_works_moved() {
    let dir = tempfile::tempdir().unwrap();
    let env = ensure(
        dir.path(),
        &tiny_spec(),
        Progress::Quiet,
        &sandlot_env::Isolation::None,
    )
    .expect("builds");
    // Scripts, bytecode, pyvenv.cfg and the description: nothing names where it was built.
    let root = env.root.to_str().unwrap().as_bytes().to_vec();
    assert_eq!(files_containing(&env.root, &root), Vec::<String>::new());
    assert!(!fs::read_to_string(env.root.join("pyvenv.cfg"))
        .unwrap()
        .contains("command"));
    let description: serde_json::Value =
        serde_json::from_slice(&fs::read(env.root.join("sandlot-env.json")).unwrap()).unwrap();
    assert_eq!(description["python"], "bin/python");
    // Bytecode names the paths sandboxes see.
    let site = env.site_packages.strip_prefix(&env.root).unwrap();
    let pyc = fs::read_dir(env.site_packages.join("__pycache__"))
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("six."))
        .expect("six is compiled");
    let inside = Path::new(sandlot_env::SANDBOX_ROOT)
        .join(site)
        .join("six.py");
    let bytes = fs::read(pyc.path()).unwrap();
    let want = inside.to_str().unwrap().as_bytes();
    assert!(bytes.windows(want.len()).any(|w| w == want));

    // Moved elsewhere, the interpreter and a console script still work, and know where they
    // are.
    let moved = dir.path().join("moved");
    fs::rename(&env.root, &moved).unwrap();
    let out = Command::new(moved.join("bin/pip"))
        .args(["--version"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains(&format!("from {}", moved.display())),
        "{stdout}"
    );
    let out = Command::new(moved.join("bin/python"))
        .args(["-c", "import six, sys; print(sys.prefix)"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        moved.display().to_string()
    );
}
