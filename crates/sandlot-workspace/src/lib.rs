//! The host side of disk-backed sandbox workspaces (DESIGN §3): a directory on disk per
//! sandbox, owned by the sandbox's uid, capped in bytes, that outlives the sandbox's processes
//! and the server itself. The runtime creates one per sandbox, hands the sandbox a detached
//! mount of it ([`Workspaces::open_tree`]) to attach as `/workspace`, and removes it on `DELETE`.
//!
//! # Backends
//!
//! - **Btrfs** (primary, `btrfs.rs`): one image `<dir>/workspaces.btrfs` on a loop device
//!   (`loopdev.rs`: `LOOP_CTL_GET_FREE` + `LOOP_CONFIGURE` with direct I/O and autoclear),
//!   mounted at `<dir>/mnt` with nosuid, nodev, noatime. A workspace is a subvolume
//!   `<dir>/mnt/ws/<id>` whose level-0 qgroup carries the byte limit (referenced bytes). Every
//!   operation is an ioctl (`btrfs_ioctl.rs`); only `mkfs.btrfs` runs as a program, once.
//! - **LoopImage** (fallback, `loop_image.rs`): per workspace a sparse ext4 image
//!   `<dir>/images/<id>.img` of exactly the limit, on its own loop device, mounted at
//!   `<dir>/mnt/ws/<id>`. The image size is the quota (ENOSPC), mkfs's inode count is the inode
//!   cap. No snapshots; the limit can grow online (needs CAP_SYS_RESOURCE) but not shrink.
//! - `Auto` picks Btrfs when the kernel has it (`/proc/filesystems`, or a module to load) and
//!   `mkfs.btrfs` is installed, else LoopImage; an existing image in the directory always
//!   decides, so a backend switch never strands data. [`Workspaces::backend`] says which and why.
//!
//! # Crash safety
//!
//! Nothing is made under its final name until it is complete: the image is formatted as
//! `workspaces.btrfs.new` and renamed, a workspace is built as `.new-<id>` (subvolume, owner,
//! mode, limit) and renamed with `RENAME_NOREPLACE`. So an image under the real name is never
//! formatted again, and a create that fails at any step leaves nothing behind. After a `kill -9`
//! of the server, [`Workspaces::open`] reuses the mount if it is still there, mounts the loop
//! device still bound to the image if only the mount is gone (a second device with the same
//! Btrfs fsid would confuse the kernel), attaches a new one otherwise, and deletes `.new-*`
//! leftovers; [`Workspaces::list`] gives the runtime every workspace to reconcile with its
//! records. If an existing image does not mount, `open` fails with
//! [`WorkspaceError::MountExisting`] and leaves the image untouched. Dropping [`Workspaces`]
//! leaves everything mounted (a restart finds it); [`Workspaces::unmount`] takes it down.
//!
//! # Quotas
//!
//! Filling a workspace gives its writer `EDQUOT` (Btrfs) or `ENOSPC` (LoopImage) and nothing
//! else: other workspaces and the filesystem are unaffected (tested with a real write as the
//! owner uid). Btrfs has no inode cap: inodes are metadata, and metadata is charged to the
//! qgroup, so the byte limit bounds them too, but loosely (see "Files").
//!
//! # Tenants
//!
//! Every workspace of a tenant can be made a member of one level-1 qgroup `1/n` of that tenant
//! ([`Workspaces::create_for`], [`Workspaces::snapshot_for`]: `BTRFS_SUBVOL_QGROUP_INHERIT` in
//! the create and snapshot ioctls, so the relation is made in the same transaction as the
//! subvolume; [`Workspaces::assign`] for a workspace made before its owner was known, which
//! under simple quotas moves its bytes into the group exactly, without a rescan). The group's
//! limit ([`Workspaces::set_tenant_limit`]) bounds all of them together: the kernel checks a
//! write against the workspace's own limit and every group it belongs to, so the write that
//! would pass the tenant's total fails with `EDQUOT` in whichever workspace makes it, and
//! deleting a workspace gives its bytes back once the cleaner drops it. `n` comes from the
//! tenant's name and is recorded in `<dir>/tenant-qgroups` (`tenants.rs`); the relations and
//! limits are on disk and survive restarts. [`Workspaces::tenant_usage`] reads the group's
//! charge (accounted plus reserved bytes, so it is current without a commit). Under simple
//! quotas a snapshot's shared extents stay charged to its source, so a snapshot or fork costs
//! its tenant only what changes after; a source deleted while a copy shares its extents keeps
//! charging them (its qgroup lives on, in the group) until the copy is gone too.
//!
//! # Files
//!
//! Measured here (kernel 6.18, simple quotas): each empty file costs about 360 bytes of
//! metadata charged to the qgroup, so a 16 MiB limit stops an empty-file loop with `EDQUOT`
//! after ~46,000 files, and the default 5 GiB after ~15 million, created at ~31,000 a second.
//! That bounds the filesystem's metadata, but loosely, so a file (inode) cap
//! ([`WorkspaceConfig::max_files`], default [`DEFAULT_MAX_FILES`]) is enforced by the
//! maintenance thread, every interval (250 ms), for every workspace (`file_cap.rs`):
//!
//! 1. one `BTRFS_IOC_TREE_SEARCH_V2` for any item of an inode numbered `max_files + 256` or
//!    higher: Btrfs numbers inodes in increasing order from 256, so none means at most
//!    `max_files` inodes, with one tree descent;
//! 2. otherwise it counts the subvolume's INODE_ITEMs (the search returns every item, about
//!    400 bytes copied per file, stopping once past the cap);
//! 3. over the cap, the workspace's byte limit is clamped to the bytes it uses (ratcheting down
//!    while clamped); a new file needs metadata bytes, so creating one fails with `EDQUOT`,
//!    as do writes that need new space. Unlinking still works (the kernel lets deletions use
//!    the global reserve past a qgroup limit). The limit to give back is recorded in
//!    `<dir>/clamped/<id>` (a restart finds it), [`Workspaces::set_limit`] changes that record
//!    while clamped, and a snapshot of a clamped workspace takes the recorded limit;
//! 4. at or under the cap, the recorded limit is given back.
//!
//! The bound: a burst overshoots the cap by what the sandbox creates between two checks plus
//! one count, a quarter to half a second's worth (tested through the server: a cap of 5,000
//! stopped a Python loop at 6,100 to 25,600 files after 0.1 to 0.4 s). A sandbox keeping its
//! inode numbers high (create and delete) costs the thread a count of at most `max_files + 1`
//! inodes per interval.
//!
//! A removed workspace's bytes leave its qgroups (and its tenant's) only once the cleaner
//! drops the subvolume, which the kernel does at its commit interval (30 s); after a remove the
//! maintenance pass (and [`Workspaces::shrink`]) issues `BTRFS_IOC_SYNC`, which wakes it at
//! once (`syncfs` does not). `remove` lifts the limit of a workspace with nested
//! subvolumes before deleting them (deleting one inside a full workspace otherwise fails with
//! EDQUOT) and deletes the qgroups, so none accumulate (the kernel refuses while the cleaner has
//! not dropped the subvolume, so stale ones are swept again at open, after each remove and by the
//! maintenance thread).
//!
//! **Simple quotas** (`BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA`, kernel ≥ 6.7) are the default: an
//! extent is charged to the subvolume that wrote it, once, with no backref walk at each
//! transaction commit and no rescans (full qgroups re-walk shared extents at every commit, go
//! "inconsistent" after deleting a large subvolume, and then need a rescan). Measured here
//! (kernel 6.18, 2 cores, 200 rounds): create p50 0.08 ms in both modes; remove p50 1.4–1.7 ms
//! in both; snapshot p50 2.9 ms with simple quotas against 5.1 ms with full qgroups. The
//! semantic difference is shared data: a snapshot starts at ~0 bytes used under simple quotas
//! (the shared extents stay charged to the source), where full qgroups charge it the source's
//! whole size. [`QuotaMode::Full`] remains available; an existing filesystem keeps its mode, and
//! kernels without simple quotas fall back to full qgroups. Debian 12's btrfs-progs 6.2 does
//! not know the simple-quota feature flag: use the kernel interfaces (this crate, sysfs) rather
//! than `btrfs check` / `btrfs qgroup show` on the image.
//!
//! A sandbox that can reach the subvolume ioctls can escape its quota: a subvolume (or snapshot)
//! it makes inside its workspace gets its own qgroup without a limit (unprivileged users may do
//! this on Btrfs). The jail's seccomp policy must refuse `BTRFS_IOC_SUBVOL_CREATE(_V2)` and
//! `BTRFS_IOC_SNAP_CREATE(_V2)`; `remove` still deletes any such subvolume.
//!
//! # Host disk safety
//!
//! A sparse image that cannot grow because the host disk is full fails the write at the loop
//! device; Btrfs then aborts its transaction and turns the whole filesystem read-only: every
//! running sandbox gets EROFS (shown by the ignored test
//! `a_full_host_disk_turns_a_sparse_image_read_only`). So by default the image is **allocated**
//! (`fallocate`): it starts at [`ImageConfig::initial_bytes`] (4 GiB), and a maintenance thread
//! grows it by [`ImageConfig::grow_step_bytes`] (2 GiB; allocate, `LOOP_SET_CAPACITY`,
//! `BTRFS_IOC_RESIZE max`) whenever the filesystem's free space drops below
//! [`ImageConfig::headroom_bytes`] (2 GiB), up to [`ImageConfig::max_bytes`] (default: current
//! size + 80% of the host's free space, at most 1 TiB) and never into the host reserve
//! ([`WorkspaceConfig::host_reserve`], default max(1 GiB, 2%)). Every block Btrfs can write is
//! then already the image's, so a full host disk reaches sandboxes only as ENOSPC inside the
//! workspace filesystem once its headroom is used, never as an I/O error; `create` is refused
//! with [`WorkspaceError::HostSpaceLow`] below the host reserve and with
//! [`WorkspaceError::FilesystemFull`] when Btrfs is below [`WorkspaceConfig::fs_reserve`] and
//! cannot grow (tested on a tmpfs data dir filled to the last byte). The filesystem is mounted
//! `nodiscard` (a discard would punch holes into the allocation); space comes back to the host
//! by shrinking instead: every [`SWEEP_EVERY`] the maintenance thread checks whether the image
//! is a grow step or more larger than what the filesystem holds plus its headroom plus one step
//! (never below the initial size), and if so Btrfs moves its chunks below that size
//! (`BTRFS_IOC_RESIZE`, milliseconds on a mostly empty filesystem), the image is truncated to
//! it and the loop device told ([`Workspaces::shrink`]; tested: 1 GiB written and deleted
//! leaves the image's allocated blocks where they started). [`ImageConfig::sparse`] trades the
//! allocation away (sparse image, `discard=async`, the loop driver punches a hole for every
//! freed extent) for the risk above; [`Health`] then reports how much the image could still
//! need, and `sandlot doctor` shows the image's size and allocation against what it holds
//! ([`image_usage`]). LoopImage images are sparse (one image per workspace: an error stays
//! in that workspace), with the same reserve check.
//!
//! # The sandbox's view
//!
//! The host paths are root-only (`<dir>`, `<dir>/mnt` and `<dir>/mnt/ws` are mode 0700); a
//! sandbox reaches its workspace only through the detached mount from [`Workspaces::open_tree`]
//! (`open_tree(OPEN_TREE_CLONE)`, then `mount_setattr` forcing nosuid and nodev with private
//! propagation), which it `move_mount`s onto `/workspace` from inside its own user and mount
//! namespaces (tested). The fd pins the mount: close it once attached. A process forked (not
//! exec'd) while the fd is open holds a copy too.

mod btrfs;
mod btrfs_ioctl;
mod copy;
mod error;
mod file_cap;
pub mod fsat;
mod id;
mod loop_image;
mod loopdev;
mod mounts;
mod space;
mod tenants;
mod tools;

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

pub use copy::MAX_DEPTH as MAX_COPY_DEPTH;
pub use error::{Result, WorkspaceError};
pub use id::{validate as validate_id, MAX_ID_LEN};
pub use space::{Reserve, SpaceReport};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Which backend to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// Btrfs when the kernel has it and mkfs.btrfs is installed, else LoopImage; an existing
    /// image in the directory always wins, so data is never stranded by a backend switch.
    #[default]
    Auto,
    Btrfs,
    LoopImage,
}

/// The backend in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    Btrfs,
    LoopImage,
}

impl std::fmt::Display for BackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BackendKind::Btrfs => "btrfs",
            BackendKind::LoopImage => "loop-image",
        })
    }
}

/// The backend in use and why it was chosen (for `sandlot doctor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendInfo {
    pub kind: BackendKind,
    pub reason: String,
}

/// Btrfs quota accounting mode, used when quotas are first enabled on a new image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaMode {
    /// Simple quotas (kernel ≥ 6.7): each extent is charged to the subvolume that wrote it.
    Simple,
    /// Full qgroups: shared extents are charged to every subvolume that references them.
    Full,
}

/// How the Btrfs image is sized. Ignored by the LoopImage backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageConfig {
    /// Size of the image when it is first made (fully allocated unless `sparse`).
    pub initial_bytes: u64,
    /// Largest size the image may grow to. `None`: its current size plus 80% of the host's free
    /// space, at most 1 TiB, evaluated at each open.
    pub max_bytes: Option<u64>,
    /// Grow by this much when the filesystem's free space falls below `headroom_bytes`.
    pub grow_step_bytes: u64,
    pub headroom_bytes: u64,
    /// Make the image sparse at `max_bytes` instead of allocated and grown in steps. Cheaper on
    /// the host disk, but a host disk that fills can then turn into I/O errors and a read-only
    /// workspace filesystem (see the crate doc).
    pub sparse: bool,
}

impl Default for ImageConfig {
    fn default() -> Self {
        ImageConfig {
            initial_bytes: 4 * GIB,
            max_bytes: None,
            grow_step_bytes: 2 * GIB,
            headroom_bytes: 2 * GIB,
            sparse: false,
        }
    }
}

/// Where and how workspaces are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceConfig {
    /// The directory this crate owns, for example `<data-dir>/disk`.
    pub dir: PathBuf,
    pub backend: BackendChoice,
    pub image: ImageConfig,
    /// Free space kept on the filesystem holding `dir`: below it, `create` is refused and the
    /// image does not grow.
    pub host_reserve: Reserve,
    /// Free space kept inside the Btrfs filesystem: below it (once it cannot grow), `create` is
    /// refused.
    pub fs_reserve: Reserve,
    pub quota: QuotaMode,
    /// How often the Btrfs maintenance thread checks the image's headroom (and, every
    /// [`SWEEP_EVERY`], removes qgroups of dropped subvolumes). `None`: no thread; `create`
    /// grows the image when it must and [`Workspaces::maintain`] does the rest.
    pub maintenance_interval: Option<Duration>,
    /// Most inodes (files, directories, links) one workspace may hold (Btrfs; see "Files" in
    /// the crate doc); `None`: no cap beyond the byte limit. Enforced by the maintenance thread.
    pub max_files: Option<u64>,
}

/// The default of [`WorkspaceConfig::max_files`].
pub const DEFAULT_MAX_FILES: u64 = 1_000_000;

/// How often the maintenance thread sweeps qgroups left by removed workspaces.
pub const SWEEP_EVERY: Duration = Duration::from_secs(30);

impl WorkspaceConfig {
    /// The defaults for `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        WorkspaceConfig {
            dir: dir.into(),
            backend: BackendChoice::Auto,
            image: ImageConfig::default(),
            host_reserve: Reserve {
                bytes: GIB,
                percent: 2,
            },
            fs_reserve: Reserve {
                bytes: 256 * MIB,
                percent: 1,
            },
            quota: QuotaMode::Simple,
            maintenance_interval: Some(Duration::from_millis(250)),
            max_files: Some(DEFAULT_MAX_FILES),
        }
    }
}

/// One workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    pub id: String,
    /// Its directory on the host (a root-only path; sandboxes get the workspace through
    /// [`Workspaces::open_tree`]).
    pub path: PathBuf,
    /// The byte limit (`u64::MAX` if none is set).
    pub limit_bytes: u64,
    /// The inode cap, where the backend has one. Btrfs has none: inodes are metadata, and
    /// metadata counts against the byte limit.
    pub inode_limit: Option<u64>,
}

/// The Btrfs image, for doctor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageReport {
    pub path: PathBuf,
    pub size_bytes: u64,
    /// Bytes the image occupies on the host disk.
    pub allocated_bytes: u64,
    pub max_bytes: u64,
    pub loop_device: PathBuf,
    pub direct_io: bool,
    /// Every byte of the image is allocated on the host, so a full host disk cannot reach it.
    pub fully_backed: bool,
}

/// Everything `sandlot doctor` shows about workspaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    pub backend: BackendInfo,
    /// The filesystem holding the data dir.
    pub host: SpaceReport,
    /// The workspace filesystem (Btrfs only).
    pub filesystem: Option<SpaceReport>,
    pub image: Option<ImageReport>,
    pub quota: Option<QuotaMode>,
    pub workspaces: usize,
    /// What is wrong, in words; empty when healthy.
    pub problems: Vec<String>,
}

impl Health {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// The Btrfs workspace image of a data dir's `disk` directory, for `sandlot doctor`: how big it
/// is, how much of the host disk it takes, and how much the filesystem in it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageUsage {
    pub path: PathBuf,
    pub size_bytes: u64,
    /// Bytes the image occupies on the host disk (its allocated blocks).
    pub allocated_bytes: u64,
    /// Bytes the workspace filesystem holds (size less free), when it is mounted.
    pub held_bytes: Option<u64>,
}

/// Reads [`ImageUsage`] of the Btrfs image in `dir` (`<data-dir>/disk`) without mounting or
/// changing anything; `None` when there is no image.
pub fn image_usage(dir: &Path) -> Option<ImageUsage> {
    use std::os::unix::fs::MetadataExt;
    let path = dir.join(btrfs::IMAGE_NAME);
    let meta = std::fs::metadata(&path).ok()?;
    let mnt = dir.join("mnt");
    let held_bytes = match mounts::mount_at(&mnt) {
        Ok(Some(m)) if m.fstype == "btrfs" => space::statvfs(&mnt)
            .ok()
            .map(|(total, free)| total.saturating_sub(free)),
        _ => None,
    };
    Some(ImageUsage {
        path,
        size_bytes: meta.len(),
        allocated_bytes: meta.blocks() * 512,
        held_bytes,
    })
}

enum Backend {
    Btrfs(btrfs::Btrfs),
    LoopImage(loop_image::LoopImages),
}

/// The workspaces of one data dir. Shareable across threads (`&self` everywhere).
pub struct Workspaces {
    backend: Arc<Backend>,
    info: BackendInfo,
    grower: Option<Grower>,
    max_files: Option<u64>,
}

impl Workspaces {
    /// Opens (making it the first time) the workspace store in `cfg.dir`. After a crash this
    /// reuses the mount and loop devices that survived, mounts what did not, and removes
    /// half-made workspaces; it never formats an image that exists.
    pub fn open(cfg: WorkspaceConfig) -> Result<Workspaces> {
        let info = choose_backend(&cfg)?;
        let interval = cfg.maintenance_interval;
        let max_files = cfg.max_files;
        let backend = Arc::new(match info.kind {
            BackendKind::Btrfs => Backend::Btrfs(btrfs::Btrfs::open(cfg)?),
            BackendKind::LoopImage => Backend::LoopImage(loop_image::LoopImages::open(cfg)?),
        });
        let grower = match (&*backend, interval) {
            (Backend::Btrfs(_), Some(every)) => {
                Some(Grower::start(backend.clone(), every, max_files))
            }
            _ => None,
        };
        Ok(Workspaces {
            backend,
            info,
            grower,
            max_files,
        })
    }

    /// The backend in use and why.
    pub fn backend(&self) -> &BackendInfo {
        &self.info
    }

    /// Makes the workspace `id` owned by `owner_uid:owner_gid` (mode 0755) and capped at
    /// `limit_bytes`. Refused with [`WorkspaceError::HostSpaceLow`] or
    /// [`WorkspaceError::FilesystemFull`] when the disk is below its reserve. A failure at any
    /// step leaves nothing behind.
    pub fn create(
        &self,
        id: &str,
        owner_uid: u32,
        owner_gid: u32,
        limit_bytes: u64,
    ) -> Result<Workspace> {
        self.create_for(id, owner_uid, owner_gid, limit_bytes, None)
    }

    /// [`Workspaces::create`], the workspace counting toward `tenant`'s cap
    /// ([`Workspaces::set_tenant_limit`]) from its first byte (Btrfs; LoopImage has no
    /// tenant caps).
    pub fn create_for(
        &self,
        id: &str,
        owner_uid: u32,
        owner_gid: u32,
        limit_bytes: u64,
        tenant: Option<&str>,
    ) -> Result<Workspace> {
        id::validate(id)?;
        match &*self.backend {
            Backend::Btrfs(b) => b.create(id, owner_uid, owner_gid, limit_bytes, tenant),
            Backend::LoopImage(l) => l.create(id, owner_uid, owner_gid, limit_bytes),
        }
    }

    /// Sets (`None`: lifts) the cap on the bytes of all of `tenant`'s workspaces together: a
    /// level-1 qgroup `1/n` holding each of their level-0 qgroups, so a write past it fails
    /// with `EDQUOT` in whichever workspace makes it. No-op on LoopImage.
    pub fn set_tenant_limit(&self, tenant: &str, bytes: Option<u64>) -> Result<()> {
        match &*self.backend {
            Backend::Btrfs(b) => b.set_tenant_limit(tenant, bytes),
            Backend::LoopImage(_) => Ok(()),
        }
    }

    /// Makes an existing workspace (a pooled sandbox's, handed to `tenant`) count toward
    /// `tenant`'s cap; one that already does is left alone. No-op on LoopImage.
    pub fn assign(&self, id: &str, tenant: &str) -> Result<()> {
        id::validate(id)?;
        match &*self.backend {
            Backend::Btrfs(b) => b.assign(id, tenant),
            Backend::LoopImage(_) => Ok(()),
        }
    }

    /// The bytes `tenant`'s workspaces use together (as of the last transaction commit) and
    /// its cap; `(0, None)` on LoopImage.
    pub fn tenant_usage(&self, tenant: &str) -> Result<(u64, Option<u64>)> {
        match &*self.backend {
            Backend::Btrfs(b) => b.tenant_usage(tenant),
            Backend::LoopImage(_) => Ok((0, None)),
        }
    }

    /// Every tenant with a qgroup and its number `n` (the qgroup is `1/n`).
    pub fn tenant_groups(&self) -> Vec<(String, u64)> {
        match &*self.backend {
            Backend::Btrfs(b) => b.tenants(),
            Backend::LoopImage(_) => Vec::new(),
        }
    }

    /// One pass of the file cap now (the maintenance thread runs one every interval);
    /// returns how many workspaces are clamped.
    pub fn enforce_file_cap(&self) -> Result<usize> {
        match (&*self.backend, self.max_files) {
            (Backend::Btrfs(b), Some(max)) => b.enforce_file_cap(max),
            _ => Ok(0),
        }
    }

    /// The file cap in force (see [`WorkspaceConfig::max_files`]); `None` on LoopImage, whose
    /// images have mkfs's inode count instead.
    pub fn max_files(&self) -> Option<u64> {
        match &*self.backend {
            Backend::Btrfs(_) => self.max_files,
            Backend::LoopImage(_) => None,
        }
    }

    /// Deletes the workspace and everything in it (including subvolumes a sandbox made in it).
    /// A sandbox that still has it mounted keeps its view until its mount namespace goes.
    pub fn remove(&self, id: &str) -> Result<()> {
        id::validate(id)?;
        match &*self.backend {
            Backend::Btrfs(b) => b.remove(id),
            Backend::LoopImage(l) => l.remove(id),
        }
    }

    /// A writable copy-on-write snapshot of `src` as the new workspace `dst`, with `src`'s
    /// owner and limit (Btrfs only). A fork that runs under another uid should attach it through
    /// an idmapped mount rather than chown every file.
    pub fn snapshot(&self, src: &str, dst: &str) -> Result<Workspace> {
        self.snapshot_for(src, dst, None)
    }

    /// [`Workspaces::snapshot`], the copy counting toward `tenant`'s cap from the start.
    pub fn snapshot_for(&self, src: &str, dst: &str, tenant: Option<&str>) -> Result<Workspace> {
        id::validate(src)?;
        id::validate(dst)?;
        match &*self.backend {
            Backend::Btrfs(b) => b.snapshot(src, dst, tenant),
            Backend::LoopImage(_) => Err(WorkspaceError::Unsupported {
                op: "snapshot",
                backend: BackendKind::LoopImage,
            }),
        }
    }

    /// Gives every file of workspace `id` (the directory itself included) to `uid:gid`, so a
    /// copy made for another sandbox (a fork, a sandbox from a snapshot) shares no uid with
    /// its source. The walk is fd-relative and never follows a symlink (`fsat`); call it before
    /// any sandbox mounts the workspace. Returns how many entries were re-owned.
    pub fn reown(&self, id: &str, uid: u32, gid: u32) -> Result<u64> {
        id::validate(id)?;
        copy::reown_tree(&self.path(id)?, uid, gid)
    }

    /// Copies every file of workspace `src` into workspace `dst` (whose existing entries stay),
    /// owned by `uid:gid`: regular files as reflinks (copy-on-write clones sharing `src`'s
    /// extents, so the copy costs metadata only; a plain copy where the filesystem cannot
    /// clone), directories and symlinks recreated, modes kept without setuid and setgid.
    /// `dst` may belong to a sandbox whose code is running (a pooled sandbox): both walks are
    /// fd-relative, every name is resolved refusing symlinks, `..` and other mounts, and the
    /// `dst` side runs with `uid:gid` as the filesystem ids, so a sandbox that swaps a directory
    /// for a symlink meanwhile makes the copy fail and nothing outside `dst` change. Returns the
    /// entries made.
    pub fn clone_files_into(&self, src: &str, dst: &str, uid: u32, gid: u32) -> Result<u64> {
        id::validate(src)?;
        id::validate(dst)?;
        copy::clone_tree(&self.path(src)?, &self.path(dst)?, uid, gid)
    }

    /// Changes the byte limit. Setting it below the current usage is allowed on Btrfs (further
    /// writes fail); the LoopImage backend can only grow.
    pub fn set_limit(&self, id: &str, bytes: u64) -> Result<()> {
        id::validate(id)?;
        match &*self.backend {
            Backend::Btrfs(b) => b.set_limit(id, bytes),
            Backend::LoopImage(l) => l.set_limit(id, bytes),
        }
    }

    /// Bytes the workspace uses. On Btrfs the number is as of the last transaction commit
    /// (at most 30 s old; `sync` makes it current).
    pub fn usage(&self, id: &str) -> Result<u64> {
        id::validate(id)?;
        match &*self.backend {
            Backend::Btrfs(b) => b.usage(id),
            Backend::LoopImage(l) => l.usage(id),
        }
    }

    /// The workspace `id` as it is now (after a restart, to re-adopt it).
    pub fn get(&self, id: &str) -> Result<Workspace> {
        id::validate(id)?;
        match &*self.backend {
            Backend::Btrfs(b) => b.get(id),
            Backend::LoopImage(l) => l.get(id),
        }
    }

    /// Every workspace on disk, sorted. After a crash the runtime compares this with its
    /// records and decides which to keep.
    pub fn list(&self) -> Result<Vec<String>> {
        match &*self.backend {
            Backend::Btrfs(b) => b.list(),
            Backend::LoopImage(l) => l.list(),
        }
    }

    /// The workspace's directory on the host (whether or not it exists).
    pub fn path(&self, id: &str) -> Result<PathBuf> {
        id::validate(id)?;
        Ok(match &*self.backend {
            Backend::Btrfs(b) => b.path(id),
            Backend::LoopImage(l) => l.path(id),
        })
    }

    /// A detached mount of the workspace (`open_tree(OPEN_TREE_CLONE)`, then nosuid and nodev
    /// forced, private propagation). The sandbox `move_mount`s it onto `/workspace`; that works
    /// from a mount namespace owned by the sandbox's user namespace. Dropping the fd unattached
    /// discards the mount.
    pub fn open_tree(&self, id: &str) -> Result<OwnedFd> {
        id::validate(id)?;
        let path = match &*self.backend {
            Backend::Btrfs(b) => {
                if !b.exists(id) {
                    return Err(WorkspaceError::NotFound { id: id.into() });
                }
                b.path(id)
            }
            Backend::LoopImage(l) => l.mounted(id)?,
        };
        mounts::open_tree_detached(&path)
    }

    /// Bytes a new workspace could use now, counting what the image may still grow by.
    pub fn free_bytes(&self) -> Result<u64> {
        match &*self.backend {
            Backend::Btrfs(b) => b.free_bytes(),
            Backend::LoopImage(l) => l.free_bytes(),
        }
    }

    /// State and problems, for `sandlot doctor`.
    pub fn health(&self) -> Result<Health> {
        let mut problems = Vec::new();
        let workspaces = match self.list() {
            Ok(ids) => ids.len(),
            Err(e) => {
                problems.push(format!("cannot list workspaces: {e}"));
                0
            }
        };
        let (host, filesystem, image, quota) = match &*self.backend {
            Backend::Btrfs(b) => {
                let (fs, image) = b.health(&mut problems)?;
                (b.host_space()?, Some(fs), Some(image), Some(b.quota_mode()))
            }
            Backend::LoopImage(l) => {
                l.health(&mut problems)?;
                (l.host_space()?, None, None, None)
            }
        };
        if host.below_reserve() {
            problems.push(format!(
                "host disk below its reserve ({} bytes free, reserve {}): \
                 new workspaces are refused",
                host.free_bytes, host.reserve_bytes
            ));
        }
        Ok(Health {
            backend: self.info.clone(),
            host,
            filesystem,
            image,
            quota,
            workspaces,
            problems,
        })
    }

    /// Grows the Btrfs image now if its headroom is low and removes qgroups of dropped
    /// subvolumes (the maintenance thread does both on its own; this is for callers that
    /// disabled it). Returns whether the image grew.
    pub fn maintain(&self) -> Result<bool> {
        match &*self.backend {
            Backend::Btrfs(b) => {
                let grew = b.grow_if_needed()?;
                b.poke_cleaner();
                b.sweep_qgroups();
                if let Some(max) = self.max_files {
                    b.enforce_file_cap(max)?;
                }
                if !grew {
                    b.shrink_if_idle()?;
                }
                Ok(grew)
            }
            Backend::LoopImage(_) => Ok(false),
        }
    }

    /// Gives the Btrfs image's unused space back to the host now, if it holds a grow step or
    /// more beyond what its content, its headroom and one more step need (the maintenance
    /// thread does this every [`SWEEP_EVERY`]). Returns whether it shrank. Deleted
    /// LoopImage workspaces take their whole image with them.
    pub fn shrink(&self) -> Result<bool> {
        match &*self.backend {
            Backend::Btrfs(b) => {
                // Removed workspaces' space is free only once the cleaner has dropped them.
                b.poke_cleaner();
                b.shrink_if_idle()
            }
            Backend::LoopImage(_) => Ok(false),
        }
    }

    /// Where the Btrfs filesystem is mounted (`None` for LoopImage).
    pub fn mount_point(&self) -> Option<&Path> {
        match &*self.backend {
            Backend::Btrfs(b) => Some(b.mount_point()),
            Backend::LoopImage(_) => None,
        }
    }

    /// Unmounts everything (the loop devices detach themselves). The data stays on disk and the
    /// next `open` mounts it again. Dropping `Workspaces` without this leaves everything mounted,
    /// which is what a server restart wants.
    pub fn unmount(self) -> Result<()> {
        let Workspaces {
            backend, grower, ..
        } = self;
        // Stops the thread, which holds the other reference to the backend.
        drop(grower);
        match Arc::try_unwrap(backend) {
            Ok(Backend::Btrfs(b)) => b.unmount(),
            Ok(Backend::LoopImage(l)) => l.unmount(),
            Err(_) => unreachable!("only the grower thread shares the backend"),
        }
    }
}

/// The Btrfs maintenance thread (image headroom, qgroup sweep); stopped and joined on drop.
struct Grower {
    stop: Arc<(Mutex<bool>, Condvar)>,
    handle: Option<JoinHandle<()>>,
}

impl Grower {
    fn start(backend: Arc<Backend>, every: Duration, max_files: Option<u64>) -> Grower {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("sandlot-ws-maint".into())
            .spawn(move || {
                let Backend::Btrfs(b) = &*backend else { return };
                let (lock, cvar) = &*flag;
                let mut stopped = lock.lock().unwrap_or_else(|e| e.into_inner());
                let mut last_error = None;
                let mut last_sweep = std::time::Instant::now();
                while !*stopped {
                    stopped = cvar
                        .wait_timeout(stopped, every)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                    if *stopped {
                        break;
                    }
                    // Log an error once, not four times a second.
                    let err = b.grow_if_needed().err().map(|e| e.to_string());
                    if err.is_some() && err != last_error {
                        tracing::warn!(
                            "growing the workspace image: {}",
                            err.as_deref().unwrap_or("")
                        );
                    }
                    last_error = err;
                    b.poke_cleaner();
                    if let Some(max) = max_files {
                        if let Err(e) = b.enforce_file_cap(max) {
                            tracing::warn!("enforcing the file cap: {e}");
                        }
                    }
                    if last_sweep.elapsed() >= SWEEP_EVERY {
                        b.sweep_qgroups();
                        if let Err(e) = b.shrink_if_idle() {
                            tracing::warn!("shrinking the workspace image: {e}");
                        }
                        last_sweep = std::time::Instant::now();
                    }
                }
            })
            .expect("spawning a thread");
        Grower {
            stop,
            handle: Some(handle),
        }
    }
}

impl Drop for Grower {
    fn drop(&mut self) {
        let (lock, cvar) = &*self.stop;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cvar.notify_all();
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

fn kernel_has_btrfs() -> bool {
    std::fs::read_to_string("/proc/filesystems")
        .map(|s| {
            s.lines()
                .any(|l| l.split_whitespace().last() == Some("btrfs"))
        })
        .unwrap_or(false)
}

/// Why Btrfs workspaces cannot be used here.
struct BtrfsMissing(String);

fn choose_backend(cfg: &WorkspaceConfig) -> Result<BackendInfo> {
    // Whether Btrfs can be used, and why (or why not), in words for doctor.
    let btrfs_ok = || -> std::result::Result<String, BtrfsMissing> {
        if !kernel_has_btrfs() {
            return Err(BtrfsMissing(
                "the kernel has no btrfs (not in /proc/filesystems, no module)".into(),
            ));
        }
        match tools::MKFS_BTRFS.find() {
            Some(p) => Ok(format!(
                "the kernel has btrfs and {} is installed",
                p.display()
            )),
            None => Err(BtrfsMissing(
                "mkfs.btrfs is not installed (install btrfs-progs)".into(),
            )),
        }
    };
    let info = |kind, reason: String| Ok(BackendInfo { kind, reason });
    match cfg.backend {
        BackendChoice::Btrfs => match btrfs_ok() {
            Ok(why) => info(BackendKind::Btrfs, format!("configured; {why}")),
            // An existing image only needs the kernel, not mkfs.
            Err(_) if kernel_has_btrfs() && cfg.dir.join(btrfs::IMAGE_NAME).exists() => {
                info(BackendKind::Btrfs, "configured; the image exists".into())
            }
            Err(BtrfsMissing(reason)) => Err(WorkspaceError::BackendUnavailable {
                backend: BackendKind::Btrfs,
                reason,
            }),
        },
        BackendChoice::LoopImage => info(BackendKind::LoopImage, "configured".into()),
        BackendChoice::Auto => {
            if cfg.dir.join(btrfs::IMAGE_NAME).exists() {
                return info(
                    BackendKind::Btrfs,
                    "a Btrfs workspace image exists in the data dir".into(),
                );
            }
            let has_images = std::fs::read_dir(cfg.dir.join(loop_image::IMAGES_DIR))
                .map(|mut d| d.next().is_some())
                .unwrap_or(false);
            if has_images {
                return info(
                    BackendKind::LoopImage,
                    "loop-image workspaces exist in the data dir".into(),
                );
            }
            match btrfs_ok() {
                Ok(why) => info(BackendKind::Btrfs, why),
                Err(BtrfsMissing(why)) => info(BackendKind::LoopImage, format!("no Btrfs: {why}")),
            }
        }
    }
}
