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

/// Host uids of sandboxes: a block of 65536 ids derived from the data dir, so that servers
/// with different data dirs on one host do not hand out the same uid.
pub(crate) struct Slots {
    base: u32,
    /// Free slots (offsets from `base`); the lowest is handed out first. A set, so a server
    /// that finds thousands of paused sandboxes on disk reserves their uids quickly.
    free: std::collections::BTreeSet<u32>,
    /// Uids held by zygotes (the rest of those handed out are sandboxes').
    zygotes: std::collections::HashSet<u32>,
}

impl Slots {
    pub(crate) fn new(instance: &str) -> Self {
        let base = block_base(instance);
        Self {
            base,
            free: (1..65535).collect(),
            zygotes: Default::default(),
        }
    }
    pub(crate) fn alloc(&mut self) -> Option<u32> {
        self.free.pop_first().map(|s| self.base + s)
    }
    pub(crate) fn alloc_zygote(&mut self) -> Option<u32> {
        let uid = self.alloc()?;
        self.zygotes.insert(uid);
        Some(uid)
    }
    /// Takes a specific uid (a sandbox found on disk at start keeps the uid it had).
    pub(crate) fn reserve(&mut self, uid: u32) -> bool {
        match uid.checked_sub(self.base) {
            Some(slot) => self.free.remove(&slot),
            None => false,
        }
    }
    pub(crate) fn release(&mut self, uid: u32) {
        self.zygotes.remove(&uid);
        if let Some(slot) = uid.checked_sub(self.base).filter(|s| *s > 0 && *s < 65535) {
            self.free.insert(slot);
        }
    }
    /// Whether `uid` is one this server gives sandboxes (not a zygote's).
    pub(crate) fn is_sandbox_uid(&self, uid: u32) -> bool {
        uid > self.base && uid < self.base + 65535 && !self.zygotes.contains(&uid)
    }
}
