//! What the runtime installs into `<data-dir>/lib` at start: the Python side of sandlot (the
//! zygote and the driver, embedded in the binary) and the jail's shared library, which the
//! zygote loads to enter each sandbox's jail. The directory is bound read-only at
//! `/opt/sandlot` in every zygote and sandbox.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const PY_FILES: &[(&str, &str)] = &[
    (
        "python/sandlot_runtime/__init__.py",
        include_str!("../../../python/sandlot_runtime/__init__.py"),
    ),
    (
        "python/sandlot_runtime/zygote.py",
        include_str!("../../../python/sandlot_runtime/zygote.py"),
    ),
    (
        "python/sandlot_runtime/driver.py",
        include_str!("../../../python/sandlot_runtime/driver.py"),
    ),
    (
        "python/sandlot_runtime/state.py",
        include_str!("../../../python/sandlot_runtime/state.py"),
    ),
    (
        "python/sandlot_runtime/jsonsafe.py",
        include_str!("../../../python/sandlot_runtime/jsonsafe.py"),
    ),
    (
        "python/sandlot_runtime/charts.py",
        include_str!("../../../python/sandlot_runtime/charts.py"),
    ),
    (
        "python/sandlot_runtime/output.py",
        include_str!("../../../python/sandlot_runtime/output.py"),
    ),
    (
        "python/sandlot_runtime/capture.py",
        include_str!("../../../python/sandlot_runtime/capture.py"),
    ),
    (
        "python/sandlot_runtime/cell_output.py",
        include_str!("../../../python/sandlot_runtime/cell_output.py"),
    ),
    (
        "python/sandlot_runtime/protocol.py",
        include_str!("../../../python/sandlot_runtime/protocol.py"),
    ),
    (
        "python/sandlot_runtime/display.py",
        include_str!("../../../python/sandlot_runtime/display.py"),
    ),
    (
        "python/sandlot_runtime/shell.py",
        include_str!("../../../python/sandlot_runtime/shell.py"),
    ),
    (
        "python/sandlot_runtime/python_cells.py",
        include_str!("../../../python/sandlot_runtime/python_cells.py"),
    ),
    (
        "python/sandlot_runtime/bash_session.py",
        include_str!("../../../python/sandlot_runtime/bash_session.py"),
    ),
    (
        "python/sandlot_runtime/js_session.py",
        include_str!("../../../python/sandlot_runtime/js_session.py"),
    ),
    (
        "python/sandlot_runtime/js_kernel.js",
        include_str!("../../../python/sandlot_runtime/js_kernel.js"),
    ),
    (
        "python/sandlot_runtime/ts_strip.js",
        include_str!("../../../python/sandlot_runtime/ts_strip.js"),
    ),
    (
        "python/sandlot_runtime/contexts.py",
        include_str!("../../../python/sandlot_runtime/contexts.py"),
    ),
    (
        "python/sandlot_runtime/changes.py",
        include_str!("../../../python/sandlot_runtime/changes.py"),
    ),
    (
        "python/sandlot_runtime/pickling.py",
        include_str!("../../../python/sandlot_runtime/pickling.py"),
    ),
    (
        "python/sandlot_runtime/digest.py",
        include_str!("../../../python/sandlot_runtime/digest.py"),
    ),
    (
        "python/sandlot_runtime/snapshot.py",
        include_str!("../../../python/sandlot_runtime/snapshot.py"),
    ),
    (
        "python/sandlot_runtime/serve.py",
        include_str!("../../../python/sandlot_runtime/serve.py"),
    ),
];

/// The file name of the jail's shared library.
pub const JAIL_LIB: &str = "libsandlot_jail.so";

/// Where `/opt/sandlot` paths point inside zygotes and sandboxes.
pub const INSIDE_ROOT: &str = "/opt/sandlot";

#[derive(Debug, thiserror::Error)]
pub enum AssetError {
    #[error("writing {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error(
        "cannot find {JAIL_LIB} (looked in {looked}); build the whole workspace (`cargo build --release --workspace`) \
         or set SANDLOT_JAIL_LIB to its path"
    )]
    NoJailLib { looked: String },
}

/// Finds the jail library: `SANDLOT_JAIL_LIB`, else next to the running executable, in its
/// `deps/` (where cargo leaves a dependency's cdylib), or one level up (test binaries live in
/// `deps/`).
pub fn find_jail_lib() -> Result<PathBuf, AssetError> {
    if let Some(p) = std::env::var_os("SANDLOT_JAIL_LIB") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().unwrap_or_default();
    let mut looked = Vec::new();
    let mut dir = exe.parent().map(Path::to_path_buf);
    for _ in 0..2 {
        let Some(d) = dir else { break };
        for cand in [d.join(JAIL_LIB), d.join("deps").join(JAIL_LIB)] {
            if cand.is_file() {
                return Ok(cand);
            }
        }
        looked.push(d.display().to_string());
        dir = d.parent().map(Path::to_path_buf);
    }
    Err(AssetError::NoJailLib {
        looked: looked.join(", "),
    })
}

/// Writes the embedded Python files and copies the jail library into `lib_dir`, world-readable.
pub fn install(lib_dir: &Path, templates: &[(String, String)]) -> Result<(), AssetError> {
    install_files(lib_dir, templates, true)
}

/// Writes only template files (the rest was installed at start).
pub fn install_templates(lib_dir: &Path, templates: &[(String, String)]) -> Result<(), AssetError> {
    install_files(lib_dir, templates, false)
}

fn install_files(
    lib_dir: &Path,
    templates: &[(String, String)],
    everything: bool,
) -> Result<(), AssetError> {
    let jail = if everything {
        Some(find_jail_lib()?)
    } else {
        None
    };
    let write = |rel: &str, bytes: &[u8]| -> Result<(), AssetError> {
        let path = lib_dir.join(rel);
        let wrap = |source| AssetError::Write {
            path: path.clone(),
            source,
        };
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(wrap)?;
            fs::set_permissions(parent, fs::Permissions::from_mode(0o755)).map_err(wrap)?;
        }
        // Write aside under a unique name and rename, so a running zygote never sees a
        // half-written file and concurrent installs never share a temporary.
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = path.with_extension(format!("tmp.{}.{n}", std::process::id()));
        fs::write(&tmp, bytes).map_err(wrap)?;
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o644)).map_err(wrap)?;
        fs::rename(&tmp, &path).map_err(wrap)
    };
    fs::create_dir_all(lib_dir).map_err(|source| AssetError::Write {
        path: lib_dir.into(),
        source,
    })?;
    fs::set_permissions(lib_dir, fs::Permissions::from_mode(0o755)).map_err(|source| {
        AssetError::Write {
            path: lib_dir.into(),
            source,
        }
    })?;
    if let Some(jail) = jail {
        for (rel, text) in PY_FILES {
            write(rel, text.as_bytes())?;
        }
        let lib = fs::read(&jail).map_err(|source| AssetError::Write {
            path: jail.clone(),
            source,
        })?;
        write(&format!("lib/{JAIL_LIB}"), &lib)?;
    }
    for (name, json) in templates {
        write(&format!("templates/{name}.json"), json.as_bytes())?;
    }
    Ok(())
}
