//! Host uids: each server owns a block of 65,536 ids derived from its data dir (so servers
//! with different data dirs on one host never hand out the same uid), split into disjoint
//! ranges by what runs as them, so a uid never serves two kinds of process:
//!
//! | offsets from the base | what runs as them |
//! | --- | --- |
//! | 0 | nothing (the base itself is never handed out) |
//! | [`SANDBOX_FIRST`]..=[`SANDBOX_LAST`] | sandboxes (and volumes' owners) |
//! | [`ZYGOTE_FIRST`]..=[`ZYGOTE_LAST`] | zygotes |
//! | [`BUILDER_FIRST`]..=[`BUILDER_LAST`] | environment builds (throw-away, one per build) |

/// The first sandbox offset.
pub const SANDBOX_FIRST: u32 = 1;
/// The last sandbox offset.
pub const SANDBOX_LAST: u32 = 0xDFFF;
/// The first zygote offset.
pub const ZYGOTE_FIRST: u32 = 0xE000;
/// The last zygote offset.
pub const ZYGOTE_LAST: u32 = 0xEFFF;
/// The first environment-build offset.
pub const BUILDER_FIRST: u32 = 0xF000;
/// The last environment-build offset.
pub const BUILDER_LAST: u32 = 0xFFFE;

/// The base of the uid block of the server whose instance name (a short hash of its data dir)
/// is `instance`.
pub fn block_base(instance: &str) -> u32 {
    let h = instance
        .bytes()
        .fold(0u32, |a, b| a.wrapping_mul(31).wrapping_add(b as u32));
    0x4000_0000 + (h % 16000) * 65536
}

/// The host uids environment builds of the server with this data dir run as.
pub fn builder_uids(data_dir: &std::path::Path) -> std::ops::RangeInclusive<u32> {
    let base = block_base(&crate::util::short_hash(
        data_dir.to_string_lossy().as_bytes(),
    ));
    base + BUILDER_FIRST..=base + BUILDER_LAST
}

/// Where the environment builds of the server with this (canonical) data dir keep their
/// per-uid lock files (`sandlot_env`'s build jail; see `env_build.rs`).
pub fn builder_state_dir(data_dir: &std::path::Path) -> std::path::PathBuf {
    data_dir.join("run").join("build")
}

/// How many uids of `uids` environment builds hold now, this server's or a `sandlot` CLI's
/// with the same data dir: a build holds an exclusive `flock` on `<state_dir>/<uid>.lock` for
/// its whole life and drops it once nothing runs as the uid any more. Each such file is tried
/// with a shared lock that is dropped at once; a file a build holds refuses it. (A build that
/// looks for a uid in that instant takes the next one.) Reads a directory of a few files.
pub(crate) fn builders_held(
    state_dir: &std::path::Path,
    uids: &std::ops::RangeInclusive<u32>,
) -> u64 {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(entries) = std::fs::read_dir(state_dir) else {
        return 0; // no build has run yet
    };
    let mut held = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(uid) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".lock"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if !uids.contains(&uid) {
            continue;
        }
        let Ok(file) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(entry.path())
        else {
            continue;
        };
        // SAFETY: the fd is valid for the duration of the call (borrowed from a live File);
        // flock only takes an fd and flags and does not touch our memory. The lock, if taken,
        // goes when the file is closed at the end of this iteration.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
        if rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EWOULDBLOCK) {
            held += 1;
        }
    }
    held
}

/// How long a freed uid waits before it is handed out again. A uid is freed only once its
/// cgroup is empty, so nothing of its last holder runs any more; the wait covers what a process
/// can leave behind keyed by uid alone (a pending signal's sender, an entry in a kernel table
/// that outlives the process, a log or metric that names the uid) and makes sure two holders of
/// one uid are never close enough in time to be confused.
pub const QUARANTINE: std::time::Duration = std::time::Duration::from_secs(600);

/// What a uid handed out by [`Slots`] is used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// A sandbox's processes run as it (also a sandbox found on disk at start, whatever range
    /// its uid lies in: servers before the ranges handed every kind out of one pool).
    Sandbox,
    /// A volume's files are owned by it while no sandbox holds the volume read-write.
    Volume,
    /// A template's zygote and everything its imports and setup started run as it.
    Zygote,
}

impl Kind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Sandbox => "sandbox",
            Kind::Volume => "volume",
            Kind::Zygote => "zygote",
        }
    }
}

/// One range of the block: uids never handed out since this server started (lowest first:
/// nothing has run as them in this run, and the previous run's processes were killed with its
/// cgroups at start), then uids freed in this run, oldest first once [`QUARANTINE`] has passed.
/// Freed uids are never handed out lowest-first: the next holder of a uid is as far from its
/// last one as the range allows.
struct Range {
    first: u32,
    last: u32,
    /// Offsets not handed out since start. A set, so a server that finds thousands of paused
    /// sandboxes on disk reserves their uids quickly.
    fresh: std::collections::BTreeSet<u32>,
    /// Offsets freed in this run with when, in the order they were freed.
    freed: std::collections::VecDeque<(u32, std::time::Instant)>,
}

impl Range {
    fn new(first: u32, last: u32) -> Self {
        Self {
            first,
            last,
            fresh: (first..=last).collect(),
            freed: Default::default(),
        }
    }

    fn contains(&self, slot: u32) -> bool {
        (self.first..=self.last).contains(&slot)
    }

    fn take(&mut self, now: std::time::Instant, quarantine: std::time::Duration) -> Option<u32> {
        if let Some(slot) = self.fresh.pop_first() {
            return Some(slot);
        }
        match self.freed.front() {
            Some((_, at)) if now.saturating_duration_since(*at) >= quarantine => {
                self.freed.pop_front().map(|(slot, _)| slot)
            }
            _ => None,
        }
    }

    /// Takes `slot` out of the pool; false when it was not in it.
    fn remove(&mut self, slot: u32) -> bool {
        if self.fresh.remove(&slot) {
            return true;
        }
        // Only at start (nothing is freed yet) or for a uid a caller reserves twice.
        match self.freed.iter().position(|(s, _)| *s == slot) {
            Some(i) => self.freed.remove(i).is_some(),
            None => false,
        }
    }

    /// (free now, quarantined) at `now`.
    fn counts(&self, now: std::time::Instant, quarantine: std::time::Duration) -> (u64, u64) {
        // Freed in order, so the quarantined ones are a suffix.
        let waiting = self
            .freed
            .iter()
            .rev()
            .take_while(|(_, at)| now.saturating_duration_since(*at) < quarantine)
            .count();
        let free = self.fresh.len() + self.freed.len() - waiting;
        (free as u64, waiting as u64)
    }
}

/// The uid pool's use at one moment (`/metrics`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct UidUse {
    /// Uids that can be handed out now, by range (`sandbox`, `zygote`, `builder`).
    pub free: Vec<(String, u64)>,
    /// Uids freed less than [`QUARANTINE`] ago, by range. (A builder's uid has no quarantine:
    /// it goes back once its build's cgroup is empty, so `builder` is always 0.)
    pub quarantined: Vec<(String, u64)>,
    /// Uids held, by what holds them (`sandbox`, `volume`, `zygote`, `builder`).
    pub in_use: Vec<(String, u64)>,
}

impl UidUse {
    /// Adds the builders' range, of which environment builds hold `held` uids now.
    pub(crate) fn with_builders(mut self, held: u64) -> Self {
        let size = u64::from(BUILDER_LAST - BUILDER_FIRST + 1);
        self.free
            .push(("builder".to_owned(), size.saturating_sub(held)));
        self.quarantined.push(("builder".to_owned(), 0));
        self.in_use.push(("builder".to_owned(), held.min(size)));
        self
    }
}

/// The host uids this server hands out: a block of 65,536 ids derived from the data dir (so
/// servers with different data dirs on one host do not hand out the same uid), sandboxes and
/// volumes from one range, zygotes from another (see the table above). The builders' range is
/// never handed out here.
///
/// A uid comes back with [`Slots::release`], which callers reach only once the uid's cgroup is
/// killed and empty (`teardown.rs`); it is then quarantined before it is handed out again.
pub(crate) struct Slots {
    base: u32,
    quarantine: std::time::Duration,
    sandboxes: Range,
    zygotes: Range,
    /// Offsets handed out (or reserved at start), with what holds them.
    held: std::collections::HashMap<u32, Kind>,
}

impl Slots {
    pub(crate) fn new(instance: &str) -> Self {
        Self::with_quarantine(block_base(instance), QUARANTINE)
    }

    fn with_quarantine(base: u32, quarantine: std::time::Duration) -> Self {
        Self {
            base,
            quarantine,
            sandboxes: Range::new(SANDBOX_FIRST, SANDBOX_LAST),
            zygotes: Range::new(ZYGOTE_FIRST, ZYGOTE_LAST),
            held: Default::default(),
        }
    }

    fn slot(&self, uid: u32) -> Option<u32> {
        uid.checked_sub(self.base)
            .filter(|s| (SANDBOX_FIRST..=BUILDER_LAST).contains(s))
    }

    fn range_of(&mut self, slot: u32) -> Option<&mut Range> {
        if self.sandboxes.contains(slot) {
            Some(&mut self.sandboxes)
        } else if self.zygotes.contains(slot) {
            Some(&mut self.zygotes)
        } else {
            None
        }
    }

    /// A uid for `kind` from its range; `None` when every uid of the range is held or still in
    /// quarantine.
    pub(crate) fn alloc(&mut self, kind: Kind) -> Option<u32> {
        let now = std::time::Instant::now();
        let range = match kind {
            Kind::Sandbox | Kind::Volume => &mut self.sandboxes,
            Kind::Zygote => &mut self.zygotes,
        };
        let slot = range.take(now, self.quarantine)?;
        self.held.insert(slot, kind);
        Some(self.base + slot)
    }

    /// Takes a specific uid for `kind`: a sandbox or volume found on disk at start keeps the
    /// uid it had, whichever range it lies in (a server before the ranges may have given a
    /// sandbox any uid of the block). False when the uid is not this server's or is held.
    pub(crate) fn reserve(&mut self, uid: u32, kind: Kind) -> bool {
        let Some(slot) = self.slot(uid) else {
            return false;
        };
        if self.held.contains_key(&slot) {
            return false;
        }
        // A builder's uid is in no pool here; held all the same, so it is counted and a
        // release of it is recognised.
        if let Some(range) = self.range_of(slot) {
            range.remove(slot);
        }
        self.held.insert(slot, kind);
        true
    }

    /// Gives a uid back: call only once nothing runs as it (its cgroup killed and empty). It
    /// is handed out again after the quarantine. Releasing a uid not held does nothing.
    pub(crate) fn release(&mut self, uid: u32) {
        let Some(slot) = self.slot(uid) else { return };
        if self.held.remove(&slot).is_none() {
            return;
        }
        let now = std::time::Instant::now();
        if let Some(range) = self.range_of(slot) {
            range.freed.push_back((slot, now));
        }
    }

    /// Whether processes running as `uid` are a sandbox's (a zombie the server may reap):
    /// a uid held by a sandbox, or a free one of the sandbox range (its sandbox is gone, a
    /// zombie of it may be left). Never a zygote's nor a builder's.
    pub(crate) fn is_sandbox_uid(&self, uid: u32) -> bool {
        let Some(slot) = self.slot(uid) else {
            return false;
        };
        match self.held.get(&slot) {
            Some(kind) => *kind != Kind::Zygote,
            None => self.sandboxes.contains(slot),
        }
    }

    /// The pool's use now.
    pub(crate) fn usage(&self) -> UidUse {
        let now = std::time::Instant::now();
        let (sf, sq) = self.sandboxes.counts(now, self.quarantine);
        let (zf, zq) = self.zygotes.counts(now, self.quarantine);
        let mut in_use: std::collections::BTreeMap<Kind, u64> =
            [Kind::Sandbox, Kind::Volume, Kind::Zygote]
                .into_iter()
                .map(|k| (k, 0))
                .collect();
        for kind in self.held.values() {
            *in_use.entry(*kind).or_default() += 1;
        }
        let pair = |name: &str, n: u64| (name.to_owned(), n);
        UidUse {
            free: vec![pair("sandbox", sf), pair("zygote", zf)],
            quarantined: vec![pair("sandbox", sq), pair("zygote", zq)],
            in_use: in_use
                .into_iter()
                .map(|(k, n)| pair(k.as_str(), n))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const BASE: u32 = 0x4000_0000;

    fn slots(quarantine: Duration) -> Slots {
        Slots::with_quarantine(BASE, quarantine)
    }

    fn count(v: &[(String, u64)], name: &str) -> u64 {
        v.iter().find(|(n, _)| n == name).map_or(0, |(_, c)| *c)
    }

    #[test]
    fn kinds_come_from_disjoint_ranges_and_never_the_builders() {
        let mut s = slots(Duration::ZERO);
        let sandbox = s.alloc(Kind::Sandbox).unwrap() - BASE;
        let volume = s.alloc(Kind::Volume).unwrap() - BASE;
        let zygote = s.alloc(Kind::Zygote).unwrap() - BASE;
        assert!((SANDBOX_FIRST..=SANDBOX_LAST).contains(&sandbox));
        assert!((SANDBOX_FIRST..=SANDBOX_LAST).contains(&volume));
        assert!((ZYGOTE_FIRST..=ZYGOTE_LAST).contains(&zygote));
        // Every zygote uid, then none: the builders' range is not a zygote's spare.
        let mut zygotes = vec![zygote];
        while let Some(uid) = s.alloc(Kind::Zygote) {
            zygotes.push(uid - BASE);
        }
        assert_eq!(zygotes.len() as u32, ZYGOTE_LAST - ZYGOTE_FIRST + 1);
        assert!(zygotes
            .iter()
            .all(|z| (ZYGOTE_FIRST..=ZYGOTE_LAST).contains(z)));
        let mut sandboxes = vec![sandbox, volume];
        while let Some(uid) = s.alloc(Kind::Sandbox) {
            sandboxes.push(uid - BASE);
        }
        assert_eq!(sandboxes.len() as u32, SANDBOX_LAST - SANDBOX_FIRST + 1);
        assert!(sandboxes
            .iter()
            .all(|o| (SANDBOX_FIRST..=SANDBOX_LAST).contains(o)));
        // A zygote's uid freed goes back to the zygotes, never to a sandbox.
        s.release(BASE + zygotes[7]);
        assert_eq!(s.alloc(Kind::Sandbox), None);
        assert_eq!(s.alloc(Kind::Zygote), Some(BASE + zygotes[7]));
    }

    #[test]
    fn a_freed_uid_waits_out_the_quarantine_and_comes_back_oldest_first() {
        let mut s = slots(Duration::from_millis(300));
        let mut all = Vec::new();
        while let Some(uid) = s.alloc(Kind::Zygote) {
            all.push(uid);
        }
        // Freed highest first: the lowest free uid is not the next one handed out.
        let (a, b, c) = (all[40], all[3], all[20]);
        for uid in [a, b, c] {
            s.release(uid);
        }
        let u = s.usage();
        assert_eq!(count(&u.quarantined, "zygote"), 3);
        assert_eq!(count(&u.free, "zygote"), 0);
        assert_eq!(
            s.alloc(Kind::Zygote),
            None,
            "handed out during its quarantine"
        );
        std::thread::sleep(Duration::from_millis(350));
        let u = s.usage();
        assert_eq!(count(&u.quarantined, "zygote"), 0);
        assert_eq!(count(&u.free, "zygote"), 3);
        assert_eq!(s.alloc(Kind::Zygote), Some(a));
        assert_eq!(s.alloc(Kind::Zygote), Some(b));
        assert_eq!(s.alloc(Kind::Zygote), Some(c));
        assert_eq!(s.alloc(Kind::Zygote), None);
    }

    #[test]
    fn never_used_uids_go_before_freed_ones() {
        let mut s = slots(Duration::ZERO);
        let first = s.alloc(Kind::Sandbox).unwrap();
        s.release(first);
        let next = s.alloc(Kind::Sandbox).unwrap();
        assert_ne!(next, first);
        assert_eq!(next, first + 1);
    }

    #[test]
    fn releasing_twice_or_a_foreign_uid_does_nothing() {
        let mut s = slots(Duration::ZERO);
        let uid = s.alloc(Kind::Sandbox).unwrap();
        s.release(uid);
        s.release(uid);
        s.release(BASE);
        s.release(BASE + 0xFFFF);
        s.release(7);
        let u = s.usage();
        assert_eq!(
            count(&u.free, "sandbox"),
            (SANDBOX_LAST - SANDBOX_FIRST + 1) as u64
        );
        assert_eq!(u.in_use.iter().map(|(_, n)| n).sum::<u64>(), 0);
    }

    #[test]
    fn uids_found_on_disk_are_reserved_in_any_range() {
        let mut s = slots(Duration::ZERO);
        // In the sandbox range, in the zygotes' (a server before the ranges), in the
        // builders': all kept by the sandbox that had them.
        let in_sandboxes = BASE + 5;
        let in_zygotes = BASE + ZYGOTE_FIRST;
        let in_builders = BASE + BUILDER_FIRST + 2;
        for uid in [in_sandboxes, in_zygotes, in_builders] {
            assert!(s.reserve(uid, Kind::Sandbox), "{uid:#x}");
            assert!(!s.reserve(uid, Kind::Sandbox), "reserved twice: {uid:#x}");
            assert!(s.is_sandbox_uid(uid));
        }
        assert!(s.reserve(BASE + 6, Kind::Volume));
        // Not this server's: the base itself, the last id of the block, another block.
        assert!(!s.reserve(BASE, Kind::Sandbox));
        assert!(!s.reserve(BASE + 0xFFFF, Kind::Sandbox));
        assert!(!s.reserve(BASE + 0x1_0000, Kind::Sandbox));
        let u = s.usage();
        assert_eq!(count(&u.in_use, "sandbox"), 3);
        assert_eq!(count(&u.in_use, "volume"), 1);
        assert_eq!(
            count(&u.free, "zygote"),
            (ZYGOTE_LAST - ZYGOTE_FIRST) as u64
        );
        // Nobody else gets them while they are held.
        let mut zygotes = std::collections::HashSet::new();
        while let Some(uid) = s.alloc(Kind::Zygote) {
            zygotes.insert(uid);
        }
        assert!(!zygotes.contains(&in_zygotes));
        let mut sandboxes = std::collections::HashSet::new();
        while let Some(uid) = s.alloc(Kind::Sandbox) {
            sandboxes.insert(uid);
        }
        assert!(!sandboxes.contains(&in_sandboxes) && !sandboxes.contains(&(BASE + 6)));
        assert!(!sandboxes.contains(&in_builders));
        // Freed, the zygote-range uid goes to the zygotes' pool; the builder-range one to
        // no pool at all.
        s.release(in_zygotes);
        s.release(in_builders);
        assert_eq!(s.alloc(Kind::Zygote), Some(in_zygotes));
        assert_eq!(s.alloc(Kind::Zygote), None);
        assert_eq!(s.alloc(Kind::Sandbox), None);
        assert!(!s.is_sandbox_uid(in_builders));
    }

    #[test]
    fn builder_uids_held_are_those_whose_lock_a_build_holds() {
        let dir = tempfile::tempdir().unwrap();
        let range = BASE + BUILDER_FIRST..=BASE + BUILDER_LAST;
        assert_eq!(builders_held(&dir.path().join("missing"), &range), 0);
        let lock = |uid: u32| {
            let f = std::fs::File::create(dir.path().join(format!("{uid}.lock"))).unwrap();
            // SAFETY: a valid fd borrowed from a live File; flock touches no memory of ours.
            let rc = unsafe {
                libc::flock(
                    std::os::fd::AsRawFd::as_raw_fd(&f),
                    libc::LOCK_EX | libc::LOCK_NB,
                )
            };
            assert_eq!(rc, 0);
            f
        };
        // Two builds hold theirs; a third build's lock file is left over from a build that
        // ended; a lock outside the range and a file that is no lock are not counted.
        let a = lock(BASE + BUILDER_FIRST);
        let _b = lock(BASE + BUILDER_FIRST + 1);
        drop(lock(BASE + BUILDER_FIRST + 2));
        let _foreign = lock(BASE + ZYGOTE_FIRST);
        std::fs::write(
            dir.path()
                .join(format!("{}.root", BASE + BUILDER_FIRST + 3)),
            "",
        )
        .unwrap();
        assert_eq!(builders_held(dir.path(), &range), 2);
        drop(a);
        assert_eq!(builders_held(dir.path(), &range), 1);
        // Probing takes nothing away: the build that holds one still holds it.
        assert_eq!(builders_held(dir.path(), &range), 1);

        let u = slots(Duration::ZERO).usage().with_builders(1);
        let size = u64::from(BUILDER_LAST - BUILDER_FIRST + 1);
        assert_eq!(count(&u.free, "builder"), size - 1);
        assert_eq!(count(&u.quarantined, "builder"), 0);
        assert_eq!(count(&u.in_use, "builder"), 1);
        assert_eq!(count(&u.in_use, "sandbox"), 0);
    }

    #[test]
    fn zygote_uids_are_not_sandbox_uids() {
        let mut s = slots(Duration::ZERO);
        let z = s.alloc(Kind::Zygote).unwrap();
        let sb = s.alloc(Kind::Sandbox).unwrap();
        assert!(!s.is_sandbox_uid(z));
        assert!(s.is_sandbox_uid(sb));
        s.release(z);
        s.release(sb);
        assert!(!s.is_sandbox_uid(z));
        assert!(
            s.is_sandbox_uid(sb),
            "a zombie of a freed sandbox uid is still reaped"
        );
        assert!(!s.is_sandbox_uid(BASE + BUILDER_FIRST));
    }
}
