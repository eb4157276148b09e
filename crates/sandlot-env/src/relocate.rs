//! Making a built environment relocatable. Sandboxes see every environment at
//! [`SANDBOX_ROOT`], not at its path on the host (which would show them the host's layout), so
//! nothing in an environment may depend on, or name, the path it was built at:
//!
//! - console scripts (`bin/pip`, `bin/ipython`, ...) start with a shebang that finds the
//!   interpreter next to the script, wherever the directory is ([`rewrite_script`]);
//! - `pyvenv.cfg` loses its `command` line (the `venv` command line, with the build path);
//! - `bin/activate` finds the environment from its own location; the csh, fish and PowerShell
//!   activation scripts, which hard-code the build path, are removed;
//! - bytecode is compiled with source paths under [`SANDBOX_ROOT`] (the build does that, with
//!   `compileall -d`; see `build`).
//!
//! The interpreter itself needs nothing: a venv's `bin/python` finds `pyvenv.cfg` next to the
//! path it was started by, so `sys.prefix` is wherever the environment is seen.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::EnvError;

/// Where sandboxes see every environment: the runtime shows an environment's root there,
/// read-only, and its bytecode names source paths under it.
pub const SANDBOX_ROOT: &str = "/opt/sandlot/env";

/// What relocating changed, for the build log.
#[derive(Debug, Default)]
pub(crate) struct Relocated {
    /// Console scripts given the relocatable shebang.
    pub scripts: usize,
    /// Files removed because they hard-code the build path.
    pub removed: Vec<String>,
    /// Files under `bin/` that still name the build path (left as they are).
    pub left: Vec<String>,
}

/// Rewrites the environment at `root` (as the build named it) so that it works, and names
/// nothing of `root`, wherever it is seen.
pub(crate) fn relocate(root: &Path) -> Result<Relocated, EnvError> {
    let mut done = Relocated::default();
    let bin = root.join("bin");
    // The tree was written by a build: its two paths this reads by name must be what they
    // seem, not symlinks out of it.
    for path in [&bin, &root.join("pyvenv.cfg")] {
        let meta = fs::symlink_metadata(path).map_err(err(path))?;
        if meta.file_type().is_symlink() {
            return Err(EnvError::Relocate {
                path: path.clone(),
                source: io::Error::other("is a symlink"),
            });
        }
    }
    scrub_pyvenv_cfg(root)?;
    let bin_real = fs::canonicalize(&bin).map_err(err(&bin))?;
    let root_text = root.to_string_lossy().into_owned();
    let mut entries: Vec<PathBuf> = fs::read_dir(&bin)
        .map_err(err(&bin))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(err(&bin))?;
    entries.sort();
    for path in entries {
        let meta = fs::symlink_metadata(&path).map_err(err(&path))?;
        if !meta.is_file() {
            continue;
        }
        let bytes = fs::read(&path).map_err(err(&path))?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some(new) = rewrite_script(&bytes, &bin, &bin_real) {
            replace_file(&path, &new, meta.permissions().mode())?;
            done.scripts += 1;
            continue;
        }
        if !contains(&bytes, root_text.as_bytes()) {
            continue;
        }
        if name == "activate" {
            let text = String::from_utf8_lossy(&bytes).replace(&root_text, ACTIVATE_ROOT);
            replace_file(&path, text.as_bytes(), meta.permissions().mode())?;
        } else if name.starts_with("activate") || name.starts_with("Activate") {
            fs::remove_file(&path).map_err(err(&path))?;
            done.removed.push(name);
        } else {
            done.left.push(name);
        }
    }
    Ok(done)
}

/// What `bin/activate` says instead of the build path: the directory above the script, found
/// from the script's own path when bash (or zsh) sources it.
const ACTIVATE_ROOT: &str = r#"$(cd -- "$(dirname -- "${BASH_SOURCE[0]:-$0}")/.." && pwd)"#;

/// The script `bytes` with a relocatable first line, if it is a script run by an interpreter
/// of this environment's `bin` (named as `bin`, or as its canonical path `bin_real`);
/// `None` for anything else.
///
/// The new first lines are read by `/bin/sh` as `exec <dir of the script>/<interpreter> <the
/// script> <args>`, and by Python as a string expression, so the rest of the script runs
/// unchanged. pip's own installer writes the same form when a path cannot be a shebang.
pub(crate) fn rewrite_script(bytes: &[u8], bin: &Path, bin_real: &Path) -> Option<Vec<u8>> {
    let rest = bytes.strip_prefix(b"#!")?;
    let end = rest.iter().position(|&b| b == b'\n')?;
    let line = std::str::from_utf8(&rest[..end]).ok()?.trim();
    let (interpreter, args) = match line.split_once(char::is_whitespace) {
        Some((i, a)) => (i, a.trim()),
        None => (line, ""),
    };
    let interpreter = Path::new(interpreter);
    let dir = interpreter.parent()?;
    let ours = dir == bin || fs::canonicalize(dir).is_ok_and(|d| d == bin_real);
    let name = interpreter.file_name()?.to_str()?;
    let plain = |s: &str| {
        s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.=".contains(c))
    };
    if !ours || !name.starts_with("python") || !plain(name) || !args.split(' ').all(plain) {
        return None;
    }
    let args = if args.is_empty() {
        String::new()
    } else {
        format!(" {args}")
    };
    let mut out = format!(
        "#!/bin/sh\n'''exec' \"$(dirname -- \"$(realpath -- \"$0\")\")/{name}\"{args} \"$0\" \"$@\"\n' '''\n"
    )
    .into_bytes();
    out.extend_from_slice(&rest[end + 1..]);
    Some(out)
}

/// Drops the `command` line of `pyvenv.cfg`: it records the `venv` command, build path
/// included, and nothing reads it.
fn scrub_pyvenv_cfg(root: &Path) -> Result<(), EnvError> {
    let path = root.join("pyvenv.cfg");
    let text = fs::read_to_string(&path).map_err(err(&path))?;
    let kept: String = text
        .lines()
        .filter(|l| l.split('=').next().map(str::trim) != Some("command"))
        .map(|l| format!("{l}\n"))
        .collect();
    if kept != text {
        replace_file(&path, kept.as_bytes(), 0o644)?;
    }
    Ok(())
}

/// Replaces `path` with `bytes` (mode `mode`, whatever the umask, and the owner `path` had: a
/// jailed build's uid keeps owning its tree until the tree is sealed): written beside it, then
/// renamed over it.
fn replace_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), EnvError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.relocating"));
    let write = || -> io::Result<()> {
        // Made new (O_EXCL never follows a symlink), whatever the install left under its name.
        match fs::remove_file(&tmp) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let mut file = OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(mode)
            .open(&tmp)?;
        file.write_all(bytes)?;
        let old = fs::symlink_metadata(path)?;
        std::os::unix::fs::fchown(&file, Some(old.uid()), Some(old.gid()))?;
        file.set_permissions(fs::Permissions::from_mode(mode & 0o7777))?;
        drop(file);
        fs::rename(&tmp, path)
    };
    write().map_err(err(path))
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

fn err(path: &Path) -> impl Fn(io::Error) -> EnvError + '_ {
    move |source| EnvError::Relocate {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIP: &str = "#!/data/envs/abc/bin/python3\n# -*- coding: utf-8 -*-\nimport sys\n";

    #[test]
    fn a_script_of_the_env_gets_the_relocatable_shebang() {
        let bin = Path::new("/data/envs/abc/bin");
        let new = rewrite_script(PIP.as_bytes(), bin, bin).unwrap();
        let new = String::from_utf8(new).unwrap();
        assert_eq!(
            new,
            "#!/bin/sh\n\
             '''exec' \"$(dirname -- \"$(realpath -- \"$0\")\")/python3\" \"$0\" \"$@\"\n\
             ' '''\n\
             # -*- coding: utf-8 -*-\nimport sys\n"
        );
        assert!(!new.contains("/data"));
    }

    #[test]
    fn interpreter_arguments_are_kept() {
        let bin = Path::new("/e/bin");
        let new = rewrite_script(b"#!/e/bin/python -E\nx\n", bin, bin).unwrap();
        assert!(String::from_utf8(new)
            .unwrap()
            .contains("/python\" -E \"$0\" \"$@\""));
    }

    #[test]
    fn other_scripts_are_left_alone() {
        let bin = Path::new("/e/bin");
        for script in [
            "#!/usr/bin/python3\nx\n",
            "#!/bin/sh\necho\n",
            "#!/e/bin/bash\n",
            "#!/e/bin/python $(reboot)\n",
            "no shebang",
        ] {
            assert_eq!(
                rewrite_script(script.as_bytes(), bin, bin),
                None,
                "{script}"
            );
        }
    }

    /// The rewritten script runs under /bin/sh with the interpreter beside it, from anywhere,
    /// and Python reads the same file without tripping on the new lines.
    #[test]
    fn a_rewritten_script_runs_from_a_moved_directory() {
        let python = Path::new("/usr/bin/python3");
        if !python.exists() {
            // Under CI a test that cannot run fails instead of passing untested.
            assert!(
                std::env::var_os("CI").is_none(),
                "{} does not exist: this test may not be skipped under CI",
                python.display()
            );
            eprintln!("{} does not exist: skipped", python.display());
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("built/bin");
        fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink(python, bin.join("python3")).unwrap();
        let script = format!(
            "#!{}/python3\nimport sys\nprint(sys.argv[1:], sys.executable)\n",
            bin.display()
        );
        fs::write(bin.join("tool"), script).unwrap();
        fs::set_permissions(bin.join("tool"), fs::Permissions::from_mode(0o755)).unwrap();
        fs::write(
            dir.path().join("built/pyvenv.cfg"),
            "home = /usr/bin\ncommand = /usr/bin/python3 -m venv /built\n",
        )
        .unwrap();
        let done = relocate(&dir.path().join("built")).unwrap();
        assert_eq!(done.scripts, 1);
        assert_eq!(
            fs::read_to_string(dir.path().join("built/pyvenv.cfg")).unwrap(),
            "home = /usr/bin\n"
        );
        fs::rename(dir.path().join("built"), dir.path().join("moved")).unwrap();
        let moved = dir.path().join("moved/bin");
        let out = std::process::Command::new(moved.join("tool"))
            .args(["a b", "c"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("['a b', 'c'] {}/python3\n", moved.display())
        );
        assert_eq!(
            fs::metadata(moved.join("tool"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o755
        );
    }
}
