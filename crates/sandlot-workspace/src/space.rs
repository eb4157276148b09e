//! Free-space accounting: how much room a filesystem has, and the reserves below which a new
//! workspace is refused so a full disk never reaches running sandboxes as I/O errors.

use std::path::{Path, PathBuf};

use crate::error::{Result, SysStep};

/// Size and free space of one filesystem, as an unprivileged writer sees it (`f_bavail`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpaceReport {
    /// A path on the filesystem.
    pub path: PathBuf,
    pub total_bytes: u64,
    pub free_bytes: u64,
    /// Below this many free bytes, `create` is refused.
    pub reserve_bytes: u64,
}

impl SpaceReport {
    pub fn below_reserve(&self) -> bool {
        self.free_bytes < self.reserve_bytes
    }
}

/// A floor of free space: the larger of an absolute number of bytes and a share of the
/// filesystem's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reserve {
    pub bytes: u64,
    /// Per cent of the filesystem's total size.
    pub percent: u8,
}

impl Reserve {
    /// The reserve in bytes for a filesystem of `total_bytes`.
    pub fn for_total(&self, total_bytes: u64) -> u64 {
        self.bytes
            .max(total_bytes / 100 * u64::from(self.percent.min(100)))
    }
}

/// Total and available bytes of the filesystem holding `path`.
pub(crate) fn statvfs(path: &Path) -> Result<(u64, u64)> {
    let st = nix::sys::statvfs::statvfs(path).sys("statvfs", path)?;
    let frsize = st.fragment_size();
    Ok((
        st.blocks().saturating_mul(frsize),
        st.blocks_available().saturating_mul(frsize),
    ))
}

/// Measures the filesystem holding `path` against `reserve`.
pub(crate) fn report(path: &Path, reserve: Reserve) -> Result<SpaceReport> {
    let (total_bytes, free_bytes) = statvfs(path)?;
    Ok(SpaceReport {
        path: path.to_path_buf(),
        total_bytes,
        free_bytes,
        reserve_bytes: reserve.for_total(total_bytes),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_is_the_larger_floor() {
        let r = Reserve {
            bytes: 1 << 30,
            percent: 2,
        };
        assert_eq!(r.for_total(10 << 30), 1 << 30);
        assert_eq!(r.for_total(100 << 30), 2 << 30);
    }
}
