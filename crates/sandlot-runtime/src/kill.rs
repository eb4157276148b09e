//! The bounded kill of everything in a cgroup: teardown's first step for a sandbox or a
//! zygote, and what a zygote's restart clears first (`templates.rs`), so it sits below both.

use sandlot_jail::cgroup::Cgroup;
use std::time::{Duration, Instant};

/// How long a kill waits for the sandbox's processes to be gone before it leaves the rest to
/// housekeeping.
pub(crate) const KILL_WAIT: Duration = Duration::from_millis(1500);
/// Kills what is in `cg` until it is empty or `wait` has passed; true when empty.
pub(crate) fn empty_cgroup(cg: &Cgroup, wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    loop {
        if cg.pids().is_empty() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        let _ = cg.kill_all(Duration::from_millis(20));
    }
}
