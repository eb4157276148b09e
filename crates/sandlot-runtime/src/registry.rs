//! The registry: the sandboxes this server knows right now ([`Entry`]: running, stopped,
//! failed or paused), the uid block they draw from, the creations under way and the queue
//! that admits them, the graves of sandboxes whose cgroup could not be removed yet, and what
//! the start of this run recovered. Its own state only: how an entry is booted, restarted or
//! ended is the `Runtime`'s (`spawn.rs`, `restart.rs`, `teardown.rs`).

use crate::sandbox::Live;
use crate::sandboxes::TenantUsage;
use crate::teardown::Grave;
use crate::util::{self, lock};
use crate::{uids, Recovery};
use sandlot_jail::cgroup::Cgroup;
use sandlot_types::{Sandbox, SandboxState};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The sandboxes of this server and what admits, numbers and buries them.
pub(crate) struct Registry {
    /// Every sandbox the runtime knows about, by id.
    pub(crate) sandboxes: Mutex<HashMap<String, Arc<Entry>>>,
    /// The uid block: sandboxes, volumes, zygotes, environment builds (`uids.rs`).
    pub(crate) slots: Mutex<uids::Slots>,
    /// Sandboxes being created or waiting to be (counted against capacity).
    pub(crate) creating: AtomicUsize,
    pub(crate) create_slots: tokio::sync::Semaphore,
    /// Set on shutdown: no more pool refills.
    closing: AtomicBool,
    /// Sandboxes whose processes were killed but whose cgroup could not be removed yet (a
    /// process stuck in uninterruptible sleep): housekeeping retries, then frees the uid.
    graves: Mutex<Vec<Grave>>,
    /// How long the last start took to recover what the previous run left (`housekeeping.rs`).
    pub(crate) recovery: Mutex<Option<Recovery>>,
}

impl Registry {
    /// An empty registry drawing uids from `slots`, with `create_slots` creations at a time.
    pub(crate) fn new(slots: uids::Slots, create_slots: usize) -> Self {
        Self {
            sandboxes: Mutex::new(HashMap::new()),
            slots: Mutex::new(slots),
            creating: AtomicUsize::new(0),
            create_slots: tokio::sync::Semaphore::new(create_slots),
            closing: Default::default(),
            graves: Default::default(),
            recovery: Default::default(),
        }
    }

    /// The entry of sandbox `id`, if the runtime knows it.
    pub(crate) fn get(&self, id: &str) -> Option<Arc<Entry>> {
        lock(&self.sandboxes).get(id).cloned()
    }

    /// Whether the runtime knows sandbox `id`.
    pub(crate) fn contains(&self, id: &str) -> bool {
        lock(&self.sandboxes).contains_key(id)
    }

    /// Every entry, at this moment.
    pub(crate) fn entries(&self) -> Vec<Arc<Entry>> {
        lock(&self.sandboxes).values().cloned().collect()
    }

    /// Whether shutdown has begun.
    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    /// Marks shutdown begun: no more pool refills.
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
    }

    /// Keeps a sandbox's cgroup, workspace and uid for housekeeping to retry.
    pub(crate) fn bury(&self, grave: Grave) {
        lock(&self.graves).push(grave);
    }

    /// Every grave, taken out for a retry; what is left goes back with [`Registry::rebury`].
    pub(crate) fn take_graves(&self) -> Vec<Grave> {
        std::mem::take(&mut *lock(&self.graves))
    }

    /// Puts back the graves a retry could not clear.
    pub(crate) fn rebury(&self, left: Vec<Grave>) {
        lock(&self.graves).extend(left);
    }

    /// What `tenant`'s sandboxes hold now (see [`crate::Runtime::tenant_usage`]).
    pub(crate) fn tenant_usage(&self, tenant: &str) -> TenantUsage {
        let mut u = TenantUsage::default();
        for e in lock(&self.sandboxes).values() {
            let info = lock(&e.info);
            if info.tenant == tenant
                && matches!(info.state, SandboxState::Running | SandboxState::Stopped)
            {
                u.sandboxes += 1;
                u.cpu_millis += info.limits.cpu_millis;
                u.memory_mb += info.limits.memory_mb;
            }
        }
        u
    }

    /// How many of `tenant`'s sandboxes are paused (see [`crate::Runtime::tenant_paused`]).
    pub(crate) fn tenant_paused(&self, tenant: &str) -> u64 {
        lock(&self.sandboxes)
            .values()
            .filter(|e| {
                let info = lock(&e.info);
                info.tenant == tenant && info.state == SandboxState::Paused
            })
            .count() as u64
    }

    /// Frees a host uid of a sandbox or zygote for reuse.
    pub(crate) fn release_uid(&self, uid: u32) {
        lock(&self.slots).release(uid);
    }
}

/// A sandbox the runtime knows about right now: running (its processes may be restarting in
/// place), stopped or failed. Its id, host uid, cgroup and workspace belong to it for its whole
/// life; its processes ([`Live`]) are swapped when they restart in place (`restart.rs`).
pub(crate) struct Entry {
    pub(crate) id: String,
    pub(crate) host_uid: u32,
    pub(crate) cgroup: Cgroup,
    /// Whether its workspace is on disk (`workspace.rs`) rather than in its processes' tmpfs.
    pub(crate) disk: bool,
    pub(crate) info: Mutex<Sandbox>,
    /// Its current processes, and whether the sandbox has ended.
    pub(crate) slot: Mutex<Slot>,
    /// One execution, context request or restart at a time, in arrival order (tokio's Mutex is
    /// fair). Owned guards let a restart keep it after the request that caused it answered.
    pub(crate) exec_lock: Arc<tokio::sync::Mutex<()>>,
    pub(crate) last_active: Mutex<Instant>,
    /// When its maximum lifetime is reached (moved later by the time it spends paused).
    pub(crate) expires: Mutex<Instant>,
    pub(crate) waiting: AtomicUsize,
    /// When its recent restarts happened, for the restart-loop bound.
    pub(crate) restarts: Mutex<std::collections::VecDeque<Instant>>,
}

/// What an [`Entry`] runs right now.
#[derive(Default)]
pub(crate) struct Slot {
    /// `None` while stopped or failed, and after a restart that could not boot.
    pub(crate) live: Option<Arc<Live>>,
    /// Set once by `end`: nothing may be installed any more.
    pub(crate) ended: bool,
}

impl Entry {
    /// A new entry for a sandbox running in `live`.
    pub(crate) fn new(info: Sandbox, live: Arc<Live>) -> Self {
        let lifetime = Duration::from_secs(info.max_lifetime);
        Self {
            id: info.id.clone(),
            host_uid: live.host_uid,
            cgroup: live.cgroup.clone(),
            disk: live.disk(),
            info: Mutex::new(info),
            slot: Mutex::new(Slot {
                live: Some(live),
                ended: false,
            }),
            exec_lock: Default::default(),
            last_active: Mutex::new(Instant::now()),
            expires: Mutex::new(Instant::now() + lifetime),
            waiting: AtomicUsize::new(0),
            restarts: Default::default(),
        }
    }

    /// An entry for a sandbox a previous server run left `stopped`, `failed` or `paused` with
    /// its workspace on disk: no processes until its next execution restarts (or resumes) them
    /// in place. Its lifetime ends at its recorded `expires_at`; its idle time counts from now.
    pub(crate) fn restored(info: Sandbox, host_uid: u32, cgroup: Cgroup) -> Self {
        let expires = util::instant_of(&info.expires_at);
        Self {
            id: info.id.clone(),
            host_uid,
            cgroup,
            disk: true,
            info: Mutex::new(info),
            slot: Default::default(),
            exec_lock: Default::default(),
            last_active: Mutex::new(Instant::now()),
            expires: Mutex::new(expires),
            waiting: AtomicUsize::new(0),
            restarts: Default::default(),
        }
    }

    /// Its current processes, if any.
    pub(crate) fn live(&self) -> Option<Arc<Live>> {
        util::lock(&self.slot).live.clone()
    }

    pub(crate) fn state(&self) -> sandlot_types::SandboxState {
        util::lock(&self.info).state
    }
}
