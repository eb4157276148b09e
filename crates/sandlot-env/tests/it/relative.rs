//! A relative envs dir. The test changes the current directory, which is per process unless a
//! thread takes its own copy: it runs in such a thread ([`with_own_fs`]), so the tests beside it
//! in this process keep theirs.

use std::path::Path;

use crate::common::with_own_fs;
use sandlot_env::{ensure, find_base_python, EnvSpec, Progress};

fn tiny_spec() -> EnvSpec {
    EnvSpec {
        base_python: find_base_python().expect("a base python (apt-get install python3-venv)"),
        packages: vec!["six==1.16.0".to_string()],
    }
}

#[test]
fn relative_envs_dir_gives_absolute_paths() {
    with_own_fs(relative_envs_dir);
}

fn relative_envs_dir() {
    let dir = tempfile::tempdir().unwrap();
    std::env::set_current_dir(dir.path()).unwrap();
    let env = ensure(
        Path::new("envs"),
        &tiny_spec(),
        Progress::Quiet,
        &sandlot_env::Isolation::None,
    )
    .expect("builds");
    assert!(env.root.is_absolute(), "{}", env.root.display());
    assert_eq!(
        env.root.canonicalize().unwrap(),
        dir.path()
            .join("envs")
            .join(&env.spec_hash)
            .canonicalize()
            .unwrap()
    );
    assert!(env.python.exists());
}
