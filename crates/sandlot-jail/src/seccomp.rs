//! Seccomp allowlist: the last layer applied before user code runs.
//!
//! The policy is data: `seccomp_policy.json` (embedded with `include_str!`) lists every allowed
//! syscall with a one-line reason, the few syscalls that answer a specific errno instead of the
//! default (`errno_rules`), and the dangerous syscalls that are refused on purpose (`denied`, for
//! documentation and tests). Everything not allowed fails with `EPERM`.
//!
//! Special answers:
//! - `clone3` fails with `ENOSYS`: seccomp cannot read its flags (they are in memory), and glibc
//!   falls back to `clone`, whose flags argument the filter checks.
//! - `clone` is allowed only without any `CLONE_NEW*` flag; otherwise `EPERM`.
//! - `socket` is allowed for `AF_UNIX`, `AF_INET`, `AF_INET6`; every other family (netlink,
//!   packet, vsock, alg, ...) fails with `EAFNOSUPPORT`, the answer of a kernel built without that
//!   family, so libraries take their usual fallback paths. `socketpair` likewise, `AF_UNIX` only.
//! - `ioctl` is allowed except `TIOCSTI`, `TIOCLINUX`, `TIOCSETD` and the four Btrfs calls that
//!   create a subvolume (`EPERM`).
//! - `personality` is allowed only for `PER_LINUX` (0) and the query `0xffffffff`.
//! - `mknod`/`mknodat` are allowed only for FIFOs (`mkfifo`); device nodes get `EPERM`.
//!
//! The BPF program is compiled with seccompiler. seccompiler gives one filter a single
//! "match" and a single "mismatch" action, so the program is a chain: one small sub-filter per
//! special errno (whose "mismatch" returns are rewritten into jumps to the next sub-filter), then
//! the allowlist proper (match: allow, mismatch: `EPERM`). Every sub-filter starts with
//! seccompiler's architecture check, which kills the process on a foreign ABI (e.g. i386
//! `int 0x80`); x32 syscall numbers (bit 30 set) match no rule and fail with `EPERM`.
//!
//! Everything here may run in a freshly forked child of a single-threaded zygote and is called
//! from a C-ABI entry point: no panics, no threads. [`install_program`] does not allocate, so a
//! parent can [`build_program`] once and install the result in many children.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use seccompiler::{
    BackendError, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};
use serde::Deserialize;

mod syscalls;

pub use syscalls::syscall_number;

/// The policy, as shipped.
pub const POLICY_JSON: &str = include_str!("seccomp_policy.json");

/// Largest BPF program the kernel accepts (`BPF_MAXINSNS`).
pub const MAX_PROGRAM_LEN: usize = 4096;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    /// The embedded policy is not valid JSON for [`Policy`].
    #[error("the embedded seccomp policy cannot be parsed")]
    ParsePolicy(#[source] serde_json::Error),
    /// This CPU architecture has no syscall table here.
    #[error("seccomp filters are not supported on this architecture")]
    UnsupportedArch,
    /// A syscall named by the policy has no number on this architecture.
    #[error("syscall {name:?} of the seccomp policy is unknown on this architecture")]
    ResolveSyscall { name: String },
    /// A symbolic argument value of the policy is unknown.
    #[error("value {symbol:?} in the seccomp rule for {syscall:?} is unknown")]
    ResolveValue { syscall: String, symbol: String },
    /// An errno name of the policy is unknown.
    #[error("errno {errno:?} in the seccomp policy is unknown")]
    ResolveErrno { errno: String },
    /// A syscall is both allowed (or given an errno rule) and listed as denied.
    #[error("syscall {name:?} is both allowed and denied by the seccomp policy")]
    Conflict { name: String },
    /// A syscall has an unconditional entry and a conditional one: the conditions would be moot.
    #[error("syscall {name:?} has both an unconditional and a conditional seccomp rule")]
    MixedRules { name: String },
    /// seccompiler refused an argument condition.
    #[error("invalid argument condition in the seccomp rule for {syscall:?}")]
    BuildCondition {
        syscall: String,
        #[source]
        source: BackendError,
    },
    /// seccompiler refused a rule.
    #[error("invalid seccomp rule for {syscall:?}")]
    BuildRule {
        syscall: String,
        #[source]
        source: BackendError,
    },
    /// seccompiler refused a filter.
    #[error("invalid seccomp filter")]
    BuildFilter(#[source] BackendError),
    /// seccompiler could not compile a filter to BPF.
    #[error("cannot compile the seccomp filter to BPF")]
    CompileFilter(#[source] BackendError),
    /// The compiled program is larger than the kernel accepts.
    #[error(
        "seccomp program has {len} instructions, more than the kernel's limit of {MAX_PROGRAM_LEN}"
    )]
    ProgramTooLarge { len: usize },
    /// A `zygote` entry of the policy names a syscall sandboxes are not denied.
    #[error("syscall {name:?} is in the seccomp policy's zygote list but not denied to sandboxes")]
    ZygoteNotDenied { name: String },
    /// An empty program was given to [`install_program`].
    #[error("refusing to install an empty seccomp program")]
    EmptyProgram,
    /// `PR_SET_NO_NEW_PRIVS` (required for an unprivileged filter) failed.
    #[error("cannot set no_new_privs before installing the seccomp filter")]
    SetNoNewPrivs(#[source] crate::caps::CapsError),
    /// The `seccomp(SECCOMP_SET_MODE_FILTER)` call failed.
    #[error("seccomp(SECCOMP_SET_MODE_FILTER) failed")]
    LoadFilter(#[source] std::io::Error),
}

/// The parsed policy.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// What the policy is and how to read it.
    pub description: String,
    /// The errno every syscall not allowed fails with (`EPERM`).
    pub default_errno: String,
    /// Syscalls (or syscall/argument combinations) that fail with a specific errno; checked
    /// before the allowlist.
    pub errno_rules: Vec<ErrnoRule>,
    /// The allowlist. Several entries for one syscall are alternatives (OR).
    pub allowed: Vec<AllowedSyscall>,
    /// Dangerous syscalls refused on purpose (not in `allowed`), with the reason.
    pub denied: Vec<DeniedSyscall>,
    /// What a zygote may call beyond the allowlist, each one taken out of `denied`: what its
    /// forked children need to build a sandbox's namespaces and mounts before they confine
    /// themselves. Each is refused by the kernel to the zygote itself (it holds no capability);
    /// `unshare` is also handed to the server by [`install_unshare_notifier`].
    #[serde(default)]
    pub zygote: Vec<AllowedSyscall>,
}

/// Which program to build from the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// A sandbox's processes: the allowlist.
    Sandbox,
    /// A zygote: the allowlist plus the policy's `zygote` entries.
    Zygote,
}

/// One allowlist entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllowedSyscall {
    /// The syscall's name, as in the kernel's syscall table.
    pub syscall: String,
    /// Only on these architectures (`x86_64`, `aarch64`); all when absent.
    #[serde(default)]
    pub arches: Option<Vec<String>>,
    /// Conditions that must all hold (AND); none means the syscall is always allowed.
    #[serde(default)]
    pub args: Vec<ArgCondition>,
    /// Why the sandbox needs it.
    pub reason: String,
}

/// A syscall (with optional argument conditions) that answers a specific errno.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrnoRule {
    /// The syscall's name.
    pub syscall: String,
    /// The errno's name, e.g. `ENOSYS`.
    pub errno: String,
    /// Only on these architectures; all when absent.
    #[serde(default)]
    pub arches: Option<Vec<String>>,
    /// Conditions that must all hold for the errno to be returned.
    #[serde(default)]
    pub args: Vec<ArgCondition>,
    /// Why.
    pub reason: String,
}

/// A dangerous syscall that is refused on purpose.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeniedSyscall {
    /// The syscall's name.
    pub syscall: String,
    /// Only exists on these architectures; all when absent.
    #[serde(default)]
    pub arches: Option<Vec<String>>,
    /// Why it is refused.
    pub reason: String,
}

/// A condition on one syscall argument.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArgCondition {
    /// Argument index, 0 to 5.
    pub index: u8,
    /// `dword` compares the low 32 bits, `qword` all 64.
    #[serde(rename = "type")]
    pub width: ArgWidth,
    /// The comparison.
    pub op: ArgOp,
    /// The value compared with (after masking, for `masked_eq`).
    pub val: ArgValue,
    /// The mask of `masked_eq`.
    #[serde(default)]
    pub mask: Option<ArgValue>,
    /// Free text.
    #[serde(default)]
    pub comment: Option<String>,
}

/// Width of a compared argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArgWidth {
    /// Low 32 bits.
    Dword,
    /// All 64 bits.
    Qword,
}

/// Comparison operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArgOp {
    /// `arg == val`
    Eq,
    /// `arg != val`
    Ne,
    /// `arg < val`
    Lt,
    /// `arg <= val`
    Le,
    /// `arg > val`
    Gt,
    /// `arg >= val`
    Ge,
    /// `arg & mask == val`
    MaskedEq,
}

/// A number, or symbolic names joined by `|` (e.g. `"CLONE_NEWNS|CLONE_NEWUSER"`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum ArgValue {
    /// A literal.
    Number(u64),
    /// Names from [`symbol_value`], OR'ed.
    Symbol(String),
}

/// A name in the policy that [`symbol_value`] does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown symbol {0}")]
pub struct UnknownSymbol(pub String);

impl ArgValue {
    /// The numeric value, or the first unknown symbol.
    pub fn resolve(&self) -> Result<u64, UnknownSymbol> {
        match self {
            ArgValue::Number(n) => Ok(*n),
            ArgValue::Symbol(s) => {
                let mut acc = 0u64;
                for part in s.split('|') {
                    let part = part.trim();
                    match symbol_value(part) {
                        Some(v) => acc |= v,
                        None => return Err(UnknownSymbol(part.to_owned())),
                    }
                }
                Ok(acc)
            }
        }
    }
}

fn applies_here(arches: &Option<Vec<String>>) -> bool {
    match arches {
        None => true,
        Some(list) => list.iter().any(|a| a == std::env::consts::ARCH),
    }
}

impl AllowedSyscall {
    /// Whether the entry applies on the architecture this was compiled for.
    pub fn applies_here(&self) -> bool {
        applies_here(&self.arches)
    }
}

impl ErrnoRule {
    /// Whether the rule applies on the architecture this was compiled for.
    pub fn applies_here(&self) -> bool {
        applies_here(&self.arches)
    }
}

impl DeniedSyscall {
    /// Whether the syscall exists on the architecture this was compiled for.
    pub fn applies_here(&self) -> bool {
        applies_here(&self.arches)
    }
}

static POLICY: OnceLock<Option<Policy>> = OnceLock::new();
static EMPTY_POLICY: OnceLock<Policy> = OnceLock::new();

fn parse_policy() -> Result<Policy, serde_json::Error> {
    serde_json::from_str(POLICY_JSON)
}

/// The embedded policy, parsed once.
///
/// Never panics: if the embedded JSON were malformed (the tests make sure it is not) this returns
/// an empty policy, and [`build_program`] reports the parse error.
pub fn policy() -> &'static Policy {
    match POLICY.get_or_init(|| parse_policy().ok()) {
        Some(p) => p,
        None => EMPTY_POLICY.get_or_init(Policy::default),
    }
}

fn try_policy() -> Result<&'static Policy, SeccompError> {
    match POLICY.get_or_init(|| parse_policy().ok()) {
        Some(p) => Ok(p),
        None => match parse_policy() {
            Err(e) => Err(SeccompError::ParsePolicy(e)),
            // Unreachable in practice (parsing is deterministic); use the fresh parse.
            Ok(p) => Ok(Box::leak(Box::new(p))),
        },
    }
}

/// The value of a symbolic name usable in the policy's argument conditions.
pub fn symbol_value(name: &str) -> Option<u64> {
    // Widening casts of small positive kernel constants; none is negative.
    let v: u64 = match name {
        "AF_UNIX" => libc::AF_UNIX as u64,
        "AF_INET" => libc::AF_INET as u64,
        "AF_INET6" => libc::AF_INET6 as u64,
        "TIOCSTI" => ioctl_value(libc::TIOCSTI),
        "TIOCLINUX" => ioctl_value(libc::TIOCLINUX),
        "TIOCSETD" => ioctl_value(libc::TIOCSETD),
        // _IOW(0x94, nr, struct btrfs_ioctl_vol_args{,_v2}); linux/btrfs.h.
        "BTRFS_IOC_SNAP_CREATE" => 0x5000_9401,
        "BTRFS_IOC_SUBVOL_CREATE" => 0x5000_940e,
        "BTRFS_IOC_SNAP_CREATE_V2" => 0x5000_9417,
        "BTRFS_IOC_SUBVOL_CREATE_V2" => 0x5000_9418,
        "CLONE_NEWNS" => libc::CLONE_NEWNS as u64,
        "CLONE_NEWUSER" => libc::CLONE_NEWUSER as u64,
        "CLONE_NEWPID" => libc::CLONE_NEWPID as u64,
        "CLONE_NEWNET" => libc::CLONE_NEWNET as u64,
        "CLONE_NEWIPC" => libc::CLONE_NEWIPC as u64,
        "CLONE_NEWUTS" => libc::CLONE_NEWUTS as u64,
        "CLONE_NEWCGROUP" => libc::CLONE_NEWCGROUP as u64,
        "CLONE_NEWTIME" => libc::CLONE_NEWTIME as u64,
        "S_IFMT" => u64::from(libc::S_IFMT),
        "S_IFIFO" => u64::from(libc::S_IFIFO),
        "PER_LINUX" => 0,
        "PERSONALITY_QUERY" => 0xffff_ffff,
        _ => return None,
    };
    Some(v)
}

// `Ioctl` is `c_ulong` on glibc targets but `c_int` on others.
#[allow(clippy::unnecessary_cast)]
fn ioctl_value(v: libc::Ioctl) -> u64 {
    v as u64
}

/// The value of an errno name usable in the policy.
pub fn errno_value(name: &str) -> Option<u32> {
    let v = match name {
        "EPERM" => libc::EPERM,
        "EACCES" => libc::EACCES,
        "ENOSYS" => libc::ENOSYS,
        "EAFNOSUPPORT" => libc::EAFNOSUPPORT,
        "EINVAL" => libc::EINVAL,
        "EOPNOTSUPP" => libc::EOPNOTSUPP,
        _ => return None,
    };
    u32::try_from(v).ok()
}

fn target_arch() -> Result<TargetArch, SeccompError> {
    if cfg!(target_arch = "x86_64") {
        Ok(TargetArch::x86_64)
    } else if cfg!(target_arch = "aarch64") {
        Ok(TargetArch::aarch64)
    } else {
        Err(SeccompError::UnsupportedArch)
    }
}

fn resolve(name: &str) -> Result<i64, SeccompError> {
    syscall_number(name).ok_or_else(|| SeccompError::ResolveSyscall {
        name: name.to_owned(),
    })
}

fn build_rule(syscall: &str, args: &[ArgCondition]) -> Result<SeccompRule, SeccompError> {
    let mut conditions = Vec::with_capacity(args.len());
    for a in args {
        let unknown = |UnknownSymbol(symbol)| SeccompError::ResolveValue {
            syscall: syscall.to_owned(),
            symbol,
        };
        let val = a.val.resolve().map_err(unknown)?;
        let op = match a.op {
            ArgOp::Eq => SeccompCmpOp::Eq,
            ArgOp::Ne => SeccompCmpOp::Ne,
            ArgOp::Lt => SeccompCmpOp::Lt,
            ArgOp::Le => SeccompCmpOp::Le,
            ArgOp::Gt => SeccompCmpOp::Gt,
            ArgOp::Ge => SeccompCmpOp::Ge,
            ArgOp::MaskedEq => {
                let mask = match &a.mask {
                    Some(m) => m.resolve().map_err(unknown)?,
                    None => u64::MAX,
                };
                SeccompCmpOp::MaskedEq(mask)
            }
        };
        let width = match a.width {
            ArgWidth::Dword => SeccompCmpArgLen::Dword,
            ArgWidth::Qword => SeccompCmpArgLen::Qword,
        };
        let cond = SeccompCondition::new(a.index, width, op, val).map_err(|source| {
            SeccompError::BuildCondition {
                syscall: syscall.to_owned(),
                source,
            }
        })?;
        conditions.push(cond);
    }
    SeccompRule::new(conditions).map_err(|source| SeccompError::BuildRule {
        syscall: syscall.to_owned(),
        source,
    })
}

/// Rules of one seccompiler filter, by syscall number.
type RuleMap = BTreeMap<i64, Vec<SeccompRule>>;

/// Adds one entry to a rule map: no args = unconditional (empty rule vector).
fn add_entry(
    map: &mut RuleMap,
    unconditional: &mut BTreeMap<i64, bool>,
    syscall: &str,
    args: &[ArgCondition],
) -> Result<(), SeccompError> {
    let nr = resolve(syscall)?;
    let is_unconditional = args.is_empty();
    if let Some(prev) = unconditional.insert(nr, is_unconditional) {
        if prev || is_unconditional {
            return Err(SeccompError::MixedRules {
                name: syscall.to_owned(),
            });
        }
    }
    let rules = map.entry(nr).or_default();
    if !is_unconditional {
        rules.push(build_rule(syscall, args)?);
    }
    Ok(())
}

// Classic BPF opcodes used when chaining sub-filters.
const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K
const BPF_JMP_JA: u16 = 0x05; // BPF_JMP | BPF_JA

/// Marker return value of an errno sub-filter meaning "no opinion, go on". Never reaches the
/// kernel: every such return is rewritten into a jump past the sub-filter.
const CONTINUE_MARKER: SeccompAction = SeccompAction::Trace(0x5a17);

fn compile(filter: SeccompFilter) -> Result<BpfProgram, SeccompError> {
    BpfProgram::try_from(filter).map_err(SeccompError::CompileFilter)
}

/// Compiles the embedded policy into a BPF program for the architecture this was compiled for.
///
/// Takes well under a millisecond (see the `layers_seccomp` tests, which print it). Allocates:
/// call it in the parent and hand the program to [`install_program`] in each child.
pub fn build_program() -> Result<BpfProgram, SeccompError> {
    build_program_for(Profile::Sandbox)
}

/// Compiles the embedded policy for `profile`.
pub fn build_program_for(profile: Profile) -> Result<BpfProgram, SeccompError> {
    let sandbox = try_policy()?;
    let zygote;
    let policy = match profile {
        Profile::Sandbox => sandbox,
        Profile::Zygote => {
            zygote = zygote_policy(sandbox)?;
            &zygote
        }
    };
    let arch = target_arch()?;
    let default_errno =
        errno_value(&policy.default_errno).ok_or_else(|| SeccompError::ResolveErrno {
            errno: policy.default_errno.clone(),
        })?;

    // Nothing may be both allowed and denied.
    for d in &policy.denied {
        let clash = policy.allowed.iter().any(|a| a.syscall == d.syscall)
            || policy.errno_rules.iter().any(|r| r.syscall == d.syscall);
        if clash {
            return Err(SeccompError::Conflict {
                name: d.syscall.clone(),
            });
        }
    }

    // Errno sub-filters, one per errno value.
    let mut groups: BTreeMap<u32, (RuleMap, BTreeMap<i64, bool>)> = BTreeMap::new();
    for r in policy.errno_rules.iter().filter(|r| r.applies_here()) {
        let errno = errno_value(&r.errno).ok_or_else(|| SeccompError::ResolveErrno {
            errno: r.errno.clone(),
        })?;
        let (map, unconditional) = groups.entry(errno).or_default();
        add_entry(map, unconditional, &r.syscall, &r.args)?;
    }

    let mut program: BpfProgram = Vec::with_capacity(2048);
    for (errno, (rules, _)) in groups {
        let filter = SeccompFilter::new(rules, CONTINUE_MARKER, SeccompAction::Errno(errno), arch)
            .map_err(SeccompError::BuildFilter)?;
        let mut sub = compile(filter)?;
        let marker = u32::from(CONTINUE_MARKER);
        let len = sub.len();
        for (i, insn) in sub.iter_mut().enumerate() {
            if insn.code == BPF_RET_K && insn.k == marker {
                // Jump to the first instruction after this sub-filter.
                let skip = len.saturating_sub(i + 1);
                insn.code = BPF_JMP_JA;
                insn.jt = 0;
                insn.jf = 0;
                insn.k = u32::try_from(skip).map_err(|_| SeccompError::ProgramTooLarge { len })?;
            }
        }
        program.append(&mut sub);
    }

    // The allowlist.
    let mut allowed = BTreeMap::new();
    let mut unconditional = BTreeMap::new();
    for a in policy.allowed.iter().filter(|a| a.applies_here()) {
        add_entry(&mut allowed, &mut unconditional, &a.syscall, &a.args)?;
    }
    let filter = SeccompFilter::new(
        allowed,
        SeccompAction::Errno(default_errno),
        SeccompAction::Allow,
        arch,
    )
    .map_err(SeccompError::BuildFilter)?;
    program.append(&mut compile(filter)?);

    if program.len() > MAX_PROGRAM_LEN {
        return Err(SeccompError::ProgramTooLarge { len: program.len() });
    }
    Ok(program)
}

/// The sandbox policy with its `zygote` entries moved from `denied` to `allowed`. An entry that
/// is not denied to sandboxes is a mistake in the policy (it would widen nothing).
fn zygote_policy(sandbox: &Policy) -> Result<Policy, SeccompError> {
    let mut p = sandbox.clone();
    for extra in &sandbox.zygote {
        let before = p.denied.len();
        p.denied.retain(|d| d.syscall != extra.syscall);
        if p.denied.len() == before {
            return Err(SeccompError::ZygoteNotDenied {
                name: extra.syscall.clone(),
            });
        }
        p.allowed.push(extra.clone());
    }
    p.zygote.clear();
    Ok(p)
}

/// The `AUDIT_ARCH_*` value of the architecture this was compiled for.
fn audit_arch() -> Result<u32, SeccompError> {
    if cfg!(target_arch = "x86_64") {
        Ok(0xC000_003E)
    } else if cfg!(target_arch = "aarch64") {
        Ok(0xC000_00B7)
    } else {
        Err(SeccompError::UnsupportedArch)
    }
}

/// Installs a filter that hands every `unshare(2)` of the calling process and its descendants
/// to a supervisor, and returns the supervisor's end (the listener fd). Everything else passes
/// through to the filters below (stacked filters: the strictest answer wins, so a sandbox's own
/// allowlist, which refuses `unshare` with an errno, keeps answering for sandboxes).
///
/// Four instructions, written by hand: seccompiler has no user-notification action. A foreign
/// architecture passes here and is killed by the allowlist.
pub fn install_unshare_notifier() -> Result<std::os::fd::OwnedFd, SeccompError> {
    use seccompiler::sock_filter;
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    let arch = audit_arch()?;
    let nr = u32::try_from(resolve("unshare")?).map_err(|_| SeccompError::UnsupportedArch)?;
    let insn = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    let prog = [
        insn(LD_W_ABS, 0, 0, 4), // seccomp_data.arch
        insn(JEQ_K, 0, 3, arch),
        insn(LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        insn(JEQ_K, 0, 1, nr),
        insn(BPF_RET_K, 0, 0, libc::SECCOMP_RET_USER_NOTIF),
        insn(BPF_RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ];
    let fprog = SockFprog {
        len: prog.len() as libc::c_ushort,
        filter: prog.as_ptr(),
    };
    // SAFETY: `fprog` points to six initialised `sock_filter`s that outlive the call; the
    // kernel copies the program. With FLAG_NEW_LISTENER the return value is a new fd.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER as libc::c_uint,
            &fprog as *const SockFprog,
        )
    };
    if fd < 0 {
        return Err(SeccompError::LoadFilter(std::io::Error::last_os_error()));
    }
    // SAFETY: the kernel just returned this fd and nothing else owns it.
    Ok(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) })
}

/// Builds the policy's program and installs it on the calling thread (see [`install_program`]).
pub fn install() -> Result<(), SeccompError> {
    let program = build_program()?;
    install_program(&program)
}

#[repr(C)]
struct SockFprog {
    len: libc::c_ushort,
    filter: *const seccompiler::sock_filter,
}

/// Installs a compiled program on the calling thread (children inherit it across fork/exec).
///
/// Sets `no_new_privs` first if it is not set yet (the kernel requires it for a filter installed
/// without `CAP_SYS_ADMIN`). Does not allocate.
pub fn install_program(prog: &BpfProgram) -> Result<(), SeccompError> {
    if prog.is_empty() {
        return Err(SeccompError::EmptyProgram);
    }
    let len = match libc::c_ushort::try_from(prog.len()) {
        Ok(l) if prog.len() <= MAX_PROGRAM_LEN => l,
        _ => return Err(SeccompError::ProgramTooLarge { len: prog.len() }),
    };
    // SAFETY: PR_GET_NO_NEW_PRIVS takes no pointers; the unused arguments must be zero.
    let nnp = unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) };
    if nnp != 1 {
        crate::caps::set_no_new_privs().map_err(SeccompError::SetNoNewPrivs)?;
    }
    let fprog = SockFprog {
        len,
        filter: prog.as_ptr(),
    };
    // SAFETY: `fprog` points to `len` valid, initialised `sock_filter`s (same layout as the
    // kernel's `struct sock_filter`) that outlive the call; the kernel copies the program and
    // keeps no reference to our memory.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0 as libc::c_uint,
            &fprog as *const SockFprog,
        )
    };
    if rc != 0 {
        return Err(SeccompError::LoadFilter(std::io::Error::last_os_error()));
    }
    Ok(())
}
