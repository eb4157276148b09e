//! An exclusive `flock(2)` on a lock file, released when dropped.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::EnvError;

/// Holds an exclusive lock on a file until dropped (closing the file releases it). Locks of
/// separate opens conflict, so this serializes threads of one process as well as processes.
#[derive(Debug)]
pub(crate) struct FileLock {
    file: File,
}

impl FileLock {
    /// Locks `path` (creating it, mode 0644), calling `on_wait` first if someone else holds it.
    pub fn exclusive(path: &Path, on_wait: impl FnOnce()) -> Result<FileLock, EnvError> {
        let lock_err = |source| EnvError::Lock {
            path: path.to_path_buf(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(lock_err)?;
        match flock(&file, libc::LOCK_EX | libc::LOCK_NB) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => {
                on_wait();
                flock(&file, libc::LOCK_EX).map_err(lock_err)?;
            }
            Err(e) => return Err(lock_err(e)),
        }
        Ok(FileLock { file })
    }

    /// Locks `path` (creating it, mode 0600) if nobody holds it; `None` if somebody does.
    pub fn try_exclusive(path: &Path) -> Result<Option<FileLock>, EnvError> {
        let lock_err = |source| EnvError::Lock {
            path: path.to_path_buf(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(path)
            .map_err(lock_err)?;
        match flock(&file, libc::LOCK_EX | libc::LOCK_NB) {
            Ok(()) => Ok(Some(FileLock { file })),
            Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Ok(None),
            Err(e) => Err(lock_err(e)),
        }
    }

    /// The locked fd (close-on-exec; see [`crate::python::hold_lock_in_child`]).
    pub fn raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// `flock(2)`, retried on EINTR.
fn flock(file: &File, op: libc::c_int) -> io::Result<()> {
    loop {
        // SAFETY: the fd is valid for the duration of the call (borrowed from a live File);
        // flock only takes an fd and flags and does not touch our memory.
        let rc = unsafe { libc::flock(file.as_raw_fd(), op) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn second_locker_waits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let first = FileLock::exclusive(&path, || panic!("uncontended")).unwrap();
        let released = Arc::new(AtomicBool::new(false));
        let waited = Arc::new(AtomicBool::new(false));
        let t = {
            let (path, released, waited) = (path.clone(), released.clone(), waited.clone());
            std::thread::spawn(move || {
                let _second =
                    FileLock::exclusive(&path, || waited.store(true, Ordering::SeqCst)).unwrap();
                assert!(
                    released.load(Ordering::SeqCst),
                    "got the lock while it was held"
                );
            })
        };
        // Release only once the second locker has reported that it waits: a fixed sleep would
        // let a busy machine release before the second thread even tried.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !waited.load(Ordering::SeqCst) {
            assert!(Instant::now() < deadline, "the second locker never waited");
            std::thread::sleep(Duration::from_millis(10));
        }
        released.store(true, Ordering::SeqCst);
        drop(first);
        t.join().unwrap();
    }
}
