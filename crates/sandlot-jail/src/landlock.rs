//! Landlock: filesystem access control, plus (ABI 6) scoping of signals and abstract UNIX
//! sockets to the sandbox's own Landlock domain, and optionally (ABI 4) TCP bind/connect.
//!
//! Best effort across ABIs: on a kernel with an older Landlock the newer rights are left out and
//! the result says [`LandlockStatus::PartiallyEnforced`]; without Landlock at all it says
//! [`LandlockStatus::NotEnforced`] and nothing fails. Both report the kernel's ABI version.
//!
//! What the ruleset handles (ABI 6 view): every filesystem right the crate knows for that ABI
//! (execute, read file/dir, write, remove, make char/dir/reg/sock/fifo/block/sym, refer, truncate,
//! ioctl on devices). `read_write` paths get all of them, `read_exec` paths get execute + read
//! file + read dir. Everything else is denied (`EACCES`), including device ioctls (other than
//! the few Landlock always allows) on device files opened after the restriction under a
//! `read_exec` path: give `/dev` (or the device files) read-write if programs must configure a
//! terminal they open themselves.
//!
//! Scoping (on by default, ABI >= 6): a sandboxed process cannot send a signal to, nor connect to
//! an abstract UNIX socket of, a process outside its Landlock domain (e.g. on the host or in
//! another sandbox that shares a network namespace); both fail with `EPERM`.
//!
//! Runs in a freshly forked child, reached from a C-ABI entry point: never panics, no threads.
//! It allocates a little (the landlock crate's builder), which is safe after `fork` in a process
//! that was single-threaded when it forked.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, NetPort, PathBeneath, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetError, RulesetStatus, Scope, ABI,
};

/// The Landlock ABI whose rights are requested (and that the tests exercise). ABI 7 only adds
/// audit-logging flags, so requesting ABI 6 rights on ABI 7 kernels is fully enforced.
const TARGET_ABI: ABI = ABI::V6;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    /// Declaring the handled filesystem rights failed.
    #[error("cannot declare the handled Landlock filesystem rights")]
    HandleFs(#[source] RulesetError),
    /// Declaring the handled network rights failed.
    #[error("cannot declare the handled Landlock network rights")]
    HandleNet(#[source] RulesetError),
    /// Declaring the signal / abstract-socket scopes failed.
    #[error("cannot declare the Landlock scopes")]
    Scope(#[source] RulesetError),
    /// `landlock_create_ruleset` failed.
    #[error("cannot create the Landlock ruleset")]
    CreateRuleset(#[source] RulesetError),
    /// Opening a path of a rule failed for a reason other than its absence.
    #[error("cannot open {path:?} for a Landlock rule")]
    OpenPath {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Adding a path rule failed.
    #[error("cannot add the Landlock rule for {path:?}")]
    AddPathRule {
        path: PathBuf,
        #[source]
        source: RulesetError,
    },
    /// Adding a TCP port rule failed.
    #[error("cannot add the Landlock rule for TCP port {port}")]
    AddPortRule {
        port: u16,
        #[source]
        source: RulesetError,
    },
    /// `landlock_restrict_self` failed.
    #[error("cannot enforce the Landlock ruleset")]
    RestrictSelf(#[source] RulesetError),
}

/// What was enforced, with the kernel's Landlock ABI version (0 when Landlock is unavailable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LandlockStatus {
    /// Every requested restriction is in force.
    FullyEnforced { abi: u32 },
    /// The kernel's Landlock is older than requested: some rights or scopes are not restricted.
    PartiallyEnforced { abi: u32 },
    /// No Landlock restriction applies (kernel without Landlock, or Landlock disabled).
    NotEnforced { abi: u32 },
}

impl LandlockStatus {
    /// The kernel's Landlock ABI version (0: none).
    pub fn abi(&self) -> u32 {
        match *self {
            LandlockStatus::FullyEnforced { abi }
            | LandlockStatus::PartiallyEnforced { abi }
            | LandlockStatus::NotEnforced { abi } => abi,
        }
    }

    /// Whether any restriction is in force.
    pub fn is_enforced(&self) -> bool {
        !matches!(self, LandlockStatus::NotEnforced { .. })
    }

    /// Whether signal and abstract-socket scoping can be in force (ABI 6 or later).
    pub fn scoping_available(&self) -> bool {
        self.is_enforced() && self.abi() >= 6
    }
}

/// Options of [`restrict_with`].
#[derive(Debug, Clone, Copy)]
pub struct LandlockOptions<'a> {
    /// Restrict TCP bind and connect (ABI >= 4) to the ports below. Off by default: the sandbox's
    /// network namespace already decides what the network is.
    pub net: bool,
    /// TCP ports that may be bound when `net` is set.
    pub tcp_bind_ports: &'a [u16],
    /// TCP ports that may be connected to when `net` is set.
    pub tcp_connect_ports: &'a [u16],
    /// Refuse signals to processes outside the Landlock domain (ABI >= 6). On by default.
    pub scope_signals: bool,
    /// Refuse connecting to abstract UNIX sockets created outside the Landlock domain
    /// (ABI >= 6). On by default.
    pub scope_abstract_unix_sockets: bool,
}

impl Default for LandlockOptions<'_> {
    fn default() -> Self {
        LandlockOptions {
            net: false,
            tcp_bind_ports: &[],
            tcp_connect_ports: &[],
            scope_signals: true,
            scope_abstract_unix_sockets: true,
        }
    }
}

/// Restricts the calling thread (and its future children) with the default options: filesystem
/// access limited to `read_write` (everything) and `read_exec` (read and execute), signal and
/// abstract-socket scoping on, network off. Paths that do not exist are skipped.
pub fn restrict(
    read_write: &[&Path],
    read_exec: &[&Path],
) -> Result<LandlockStatus, LandlockError> {
    restrict_with(read_write, read_exec, &LandlockOptions::default())
}

/// [`restrict`] with explicit options.
pub fn restrict_with(
    read_write: &[&Path],
    read_exec: &[&Path],
    opts: &LandlockOptions<'_>,
) -> Result<LandlockStatus, LandlockError> {
    let fs_all = AccessFs::from_all(TARGET_ABI);
    let fs_read_exec = AccessFs::from_read(TARGET_ABI);

    let mut ruleset = Ruleset::default()
        .handle_access(fs_all)
        .map_err(LandlockError::HandleFs)?;
    if opts.net {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(ABI::V4))
            .map_err(LandlockError::HandleNet)?;
    }
    let mut scopes = BitFlags::<Scope>::EMPTY;
    if opts.scope_signals {
        scopes |= Scope::Signal;
    }
    if opts.scope_abstract_unix_sockets {
        scopes |= Scope::AbstractUnixSocket;
    }
    if !scopes.is_empty() {
        ruleset = ruleset.scope(scopes).map_err(LandlockError::Scope)?;
    }

    let mut created = ruleset.create().map_err(LandlockError::CreateRuleset)?;

    for (paths, access) in [(read_write, fs_all), (read_exec, fs_read_exec)] {
        for path in paths.iter().copied() {
            let Some((file, is_dir)) = open_path(path)? else {
                continue;
            };
            let access = if is_dir {
                access
            } else {
                access & AccessFs::from_file(TARGET_ABI)
            };
            created = created
                .add_rule(PathBeneath::new(file, access))
                .map_err(|source| LandlockError::AddPathRule {
                    path: path.to_path_buf(),
                    source,
                })?;
        }
    }

    if opts.net {
        for (ports, access) in [
            (opts.tcp_bind_ports, AccessNet::BindTcp),
            (opts.tcp_connect_ports, AccessNet::ConnectTcp),
        ] {
            for &port in ports {
                created = created
                    .add_rule(NetPort::new(port, access))
                    .map_err(|source| LandlockError::AddPortRule { port, source })?;
            }
        }
    }

    let status = created
        .restrict_self()
        .map_err(LandlockError::RestrictSelf)?;
    let abi = abi_number(&status.landlock);
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => LandlockStatus::FullyEnforced { abi },
        RulesetStatus::PartiallyEnforced => LandlockStatus::PartiallyEnforced { abi },
        RulesetStatus::NotEnforced => LandlockStatus::NotEnforced { abi },
    })
}

/// Opens `path` with `O_PATH`; `None` when it does not exist.
fn open_path(path: &Path) -> Result<Option<(File, bool)>, LandlockError> {
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(path);
    let file = match opened {
        Ok(f) => f,
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(libc::ENOTDIR) =>
        {
            return Ok(None)
        }
        Err(source) => {
            return Err(LandlockError::OpenPath {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let is_dir = file
        .metadata()
        .map_err(|source| LandlockError::OpenPath {
            path: path.to_path_buf(),
            source,
        })?
        .is_dir();
    Ok(Some((file, is_dir)))
}

fn abi_number(status: &landlock::LandlockStatus) -> u32 {
    match status {
        landlock::LandlockStatus::Available {
            kernel_abi: Some(n),
            ..
        } => u32::try_from(*n).unwrap_or(0),
        landlock::LandlockStatus::Available { effective_abi, .. } => match effective_abi {
            ABI::Unsupported => 0,
            ABI::V1 => 1,
            ABI::V2 => 2,
            ABI::V3 => 3,
            ABI::V4 => 4,
            ABI::V5 => 5,
            ABI::V6 => 6,
            ABI::V7 => 7,
            ABI::V8 => 8,
            _ => 9,
        },
        _ => 0,
    }
}

/// The running kernel's Landlock ABI version (0: none), for `sandlot doctor`.
pub fn kernel_abi() -> u32 {
    // SAFETY: with a NULL attribute, size 0 and LANDLOCK_CREATE_RULESET_VERSION the syscall only
    // returns the ABI version; no memory is read or written.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    u32::try_from(v).unwrap_or(0)
}
