//! Sandboxes run as other uids: a build under a strict umask must still be world-readable.
//! The umask is per process unless a thread takes its own copy: the test runs in such a thread
//! ([`with_own_fs`]), so the tests beside it in this process keep theirs.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::common::with_own_fs;
use sandlot_env::{ensure, find_base_python, EnvSpec, Progress};

fn check_tree(path: &Path, bad: &mut Vec<String>) {
    let meta = fs::symlink_metadata(path).unwrap();
    if meta.file_type().is_symlink() {
        return;
    }
    let mode = meta.permissions().mode();
    let need = if meta.is_dir() { 0o055 } else { 0o044 };
    if mode & need != need {
        bad.push(format!("{} {:o}", path.display(), mode & 0o777));
    }
    if meta.is_dir() {
        for entry in fs::read_dir(path).unwrap() {
            check_tree(&entry.unwrap().path(), bad);
        }
    }
}

#[test]
fn env_is_world_readable_under_a_strict_umask() {
    with_own_fs(under_a_strict_umask);
}

fn under_a_strict_umask() {
    // SAFETY: umask(2) only sets the file mode mask (this thread's own, see `with_own_fs`); it
    // cannot fail.
    unsafe { libc::umask(0o077) };
    let dir = tempfile::tempdir().unwrap();
    let envs = dir.path().join("envs");
    let spec = EnvSpec {
        base_python: find_base_python().unwrap(),
        packages: vec!["six==1.16.0".to_string()],
    };
    let env = ensure(&envs, &spec, Progress::Quiet, &sandlot_env::Isolation::None).unwrap();
    let mut bad = Vec::new();
    check_tree(&envs.join(&env.spec_hash), &mut bad);
    let mode = fs::metadata(&envs).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o755, "envs dir");
    assert!(bad.is_empty(), "not world-readable: {bad:#?}");
}
