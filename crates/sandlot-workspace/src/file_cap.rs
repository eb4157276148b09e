//! The cap on files (inodes) per workspace, as a decision: Btrfs has no inode limit, so the
//! maintenance thread counts each workspace's inodes and clamps its byte limit to what it uses
//! once it holds more than the cap (new files, which need metadata bytes, then fail with
//! `EDQUOT`), and gives the limit back once it is at or under the cap again. How it counts and
//! how far a burst can overshoot are in the crate doc ("Files").

/// What one check does to a workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Leave its limit as it is.
    Keep,
    /// Clamp (or keep clamping, ratcheting down) its byte limit to its usage.
    Clamp,
    /// Give it back the limit it had before the clamp.
    Release,
}

/// The decision for a workspace holding `count` inodes (0 when the cheap check proved it
/// holds no more than `max_files`), `clamped` or not.
pub(crate) fn decide(clamped: bool, count: u64, max_files: u64) -> Decision {
    match (clamped, count > max_files) {
        (false, false) => Decision::Keep,
        (_, true) => Decision::Clamp,
        (true, false) => Decision::Release,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamps_over_the_cap_and_releases_at_or_under_it() {
        assert_eq!(decide(false, 0, 10), Decision::Keep);
        assert_eq!(decide(false, 10, 10), Decision::Keep);
        assert_eq!(decide(false, 11, 10), Decision::Clamp);
        assert_eq!(decide(true, 11, 10), Decision::Clamp);
        assert_eq!(decide(true, 10, 10), Decision::Release);
        assert_eq!(decide(true, 0, 10), Decision::Release);
    }
}
