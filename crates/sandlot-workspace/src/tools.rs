//! The external programs the backends need (only the mkfs tools: everything after formatting is
//! done with syscalls), found on PATH or in the sbin directories a service's PATH often lacks.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::{IoStep, Result, WorkspaceError};

/// A program and the Debian package that provides it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tool {
    pub name: &'static str,
    pub package: &'static str,
}

pub(crate) const MKFS_BTRFS: Tool = Tool {
    name: "mkfs.btrfs",
    package: "btrfs-progs",
};

pub(crate) const MKFS_EXT4: Tool = Tool {
    name: "mkfs.ext4",
    package: "e2fsprogs",
};

const SBIN_DIRS: [&str; 4] = ["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin"];

impl Tool {
    /// The program's full path, if it is installed.
    pub fn find(&self) -> Option<PathBuf> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .chain(SBIN_DIRS.iter().map(PathBuf::from))
            .map(|dir| dir.join(self.name))
            .find(|p| is_executable(p))
    }

    pub fn require(&self) -> Result<PathBuf> {
        self.find().ok_or(WorkspaceError::MissingTool {
            tool: self.name,
            package: self.package,
        })
    }

    /// Runs the program with `args` then `target`; fails with its stderr when it exits non-zero.
    pub fn run(&self, args: &[&str], target: &Path) -> Result<()> {
        let program = self.require()?;
        let out = Command::new(&program)
            .args(args)
            .arg(target)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .at("spawn", &program)?;
        if out.status.success() {
            return Ok(());
        }
        Err(WorkspaceError::Tool {
            tool: self.name,
            path: target.to_path_buf(),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}
