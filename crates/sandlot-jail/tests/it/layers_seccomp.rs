//! Real enforcement tests of the seccomp allowlist (`sandlot_jail::seccomp`).
//!
//! Each case forks a child that installs the filter, attempts one operation and `_exit`s with
//! the errno it got (0: success); the parent asserts the exact value. The program is built once
//! in the parent, so the child only calls the allocation-free `install_program`.
//!
//! Cases whose operation would change the host if the filter let it through run in "scratch"
//! namespaces (a fresh user + mount + uts + ipc + net namespace, entered before the filter):
//! there the kernel itself would allow them, so the EPERM really comes from seccomp.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::sync::OnceLock;
use std::time::Instant;

use crate::common;

use common::{errno, errno_of, skip, wait_code, SETUP_FAILED};
use sandlot_jail::seccomp::{self, ArgCondition};
use seccompiler::BpfProgram;

// ---------------------------------------------------------------------------------------------
// fork helpers

const UNEXPECTED_SUCCESS: i32 = 251;

fn program() -> &'static BpfProgram {
    static P: OnceLock<BpfProgram> = OnceLock::new();
    P.get_or_init(|| seccomp::build_program().expect("build_program"))
}

/// Every fork of this file goes through here. The program (and the policy behind it) is built
/// in the parent first: a child forked while another test thread was initialising a `OnceLock`
/// would otherwise wait for an initialisation that, in the child, never finishes.
fn in_child(f: impl FnOnce() -> i32) -> i32 {
    program();
    common::in_child(f)
}

/// Installs the filter in the child; exits the child on failure.
fn install() {
    if seccomp::install_program(program()).is_err() {
        // SAFETY: exiting the forked child.
        unsafe { libc::_exit(SETUP_FAILED) };
    }
}

/// Enters fresh user, mount, uts, ipc and net namespaces (full capabilities there), so an
/// operation that slipped through the filter could not touch the host.
fn enter_scratch_namespaces() {
    let flags = libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWNET;
    // SAFETY: plain unshare in a single-threaded forked child.
    if unsafe { libc::unshare(flags) } != 0 {
        // SAFETY: exiting the forked child.
        unsafe { libc::_exit(SETUP_FAILED) };
    }
}

/// Runs `op` in a child after installing the filter; returns what `op` returned.
fn with_filter(op: impl FnOnce() -> i32) -> i32 {
    in_child(|| {
        program();
        install();
        op()
    })
}

/// Like [`with_filter`], inside scratch namespaces.
fn with_filter_scratch(op: impl FnOnce() -> i32) -> i32 {
    in_child(|| {
        program();
        enter_scratch_namespaces();
        install();
        op()
    })
}

/// Same as [`with_filter_scratch`] but without the filter: the control experiment.
fn without_filter_scratch(op: impl FnOnce() -> i32) -> i32 {
    in_child(|| {
        enter_scratch_namespaces();
        op()
    })
}

fn nr(name: &str) -> libc::c_long {
    seccomp::syscall_number(name).unwrap_or_else(|| panic!("no number for {name}"))
}

// ---------------------------------------------------------------------------------------------
// policy and program

#[test]
fn policy_parses_and_is_consistent() {
    let p = seccomp::policy();
    assert!(!p.description.is_empty());
    assert_eq!(p.default_errno, "EPERM");
    assert!(p.allowed.len() > 200, "allowlist suspiciously short");

    let mut allowed = BTreeSet::new();
    let mut unconditional = BTreeSet::new();
    for a in &p.allowed {
        assert!(!a.reason.trim().is_empty(), "{} has no reason", a.syscall);
        if !a.applies_here() {
            continue;
        }
        assert!(
            seccomp::syscall_number(&a.syscall).is_some(),
            "allowed syscall {} has no number on {}",
            a.syscall,
            std::env::consts::ARCH
        );
        if a.args.is_empty() {
            assert!(
                unconditional.insert(a.syscall.clone()),
                "{} listed twice",
                a.syscall
            );
        }
        allowed.insert(a.syscall.clone());
        check_args(&a.syscall, &a.args);
    }
    for a in p.allowed.iter().filter(|a| !a.args.is_empty()) {
        assert!(
            !unconditional.contains(&a.syscall),
            "{} both conditional and unconditional",
            a.syscall
        );
    }
    for r in &p.errno_rules {
        assert!(seccomp::errno_value(&r.errno).is_some(), "{}", r.errno);
        assert!(
            seccomp::syscall_number(&r.syscall).is_some(),
            "{}",
            r.syscall
        );
        assert!(!r.reason.trim().is_empty());
        check_args(&r.syscall, &r.args);
    }
    let mut denied = BTreeSet::new();
    for d in &p.denied {
        assert!(!d.reason.trim().is_empty(), "{} has no reason", d.syscall);
        assert!(
            denied.insert(d.syscall.clone()),
            "{} denied twice",
            d.syscall
        );
        assert!(
            !allowed.contains(&d.syscall),
            "{} is both allowed and denied",
            d.syscall
        );
        assert!(
            !p.errno_rules.iter().any(|r| r.syscall == d.syscall),
            "{} both denied and in errno_rules",
            d.syscall
        );
        if d.applies_here() {
            assert!(
                seccomp::syscall_number(&d.syscall).is_some(),
                "denied syscall {} has no number",
                d.syscall
            );
        }
    }
    // The brief's explicit refusals are all documented in `denied`.
    for name in [
        "mount",
        "umount2",
        "pivot_root",
        "chroot",
        "fsopen",
        "fsconfig",
        "fsmount",
        "fspick",
        "move_mount",
        "open_tree",
        "mount_setattr",
        "unshare",
        "setns",
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "kcmp",
        "pidfd_getfd",
        "bpf",
        "perf_event_open",
        "keyctl",
        "add_key",
        "request_key",
        "userfaultfd",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "open_by_handle_at",
        "name_to_handle_at",
        "init_module",
        "finit_module",
        "delete_module",
        "kexec_load",
        "kexec_file_load",
        "reboot",
        "swapon",
        "swapoff",
        "acct",
        "quotactl",
        "syslog",
        "settimeofday",
        "clock_settime",
        "adjtimex",
        "clock_adjtime",
        "sethostname",
        "setdomainname",
        "vhangup",
        "lookup_dcookie",
    ] {
        assert!(denied.contains(name), "{name} missing from denied");
    }
    #[cfg(target_arch = "x86_64")]
    for name in ["iopl", "ioperm", "uselib"] {
        assert!(denied.contains(name), "{name} missing from denied");
    }
    // What the brief requires to work is allowed.
    for name in [
        "mmap",
        "epoll_create1",
        "eventfd2",
        "timerfd_create",
        "signalfd4",
        "inotify_init1",
        "getrandom",
        "memfd_create",
        "rseq",
        "futex",
        "futex_waitv",
        "close_range",
        "pidfd_open",
        "pidfd_send_signal",
        "statx",
        "faccessat2",
        "fchmodat2",
        "openat2",
        "landlock_create_ruleset",
        "landlock_add_rule",
        "landlock_restrict_self",
        "sched_getaffinity",
        "sched_setaffinity",
        "sched_getparam",
        "prlimit64",
        "clone",
        "execve",
        "wait4",
        "socket",
        "ioctl",
        "personality",
    ] {
        assert!(allowed.contains(name), "{name} not allowed");
    }
}

fn check_args(syscall: &str, args: &[ArgCondition]) {
    for a in args {
        assert!(a.index <= 5, "{syscall}: bad arg index");
        a.val.resolve().unwrap_or_else(|s| panic!("{syscall}: {s}"));
        if let Some(m) = &a.mask {
            m.resolve().unwrap_or_else(|s| panic!("{syscall}: {s}"));
        }
    }
}

#[test]
fn symbols_have_kernel_values() {
    let v = |s: &str| seccomp::symbol_value(s).unwrap();
    assert_eq!(v("AF_UNIX"), 1);
    assert_eq!(v("AF_INET"), 2);
    assert_eq!(v("AF_INET6"), 10);
    assert_eq!(v("TIOCSTI"), 0x5412);
    assert_eq!(v("TIOCLINUX"), 0x541c);
    assert_eq!(v("TIOCSETD"), 0x5423);
    assert_eq!(v("S_IFIFO"), 0o010000);
    let ns = seccomp::ArgValue::Symbol(
        "CLONE_NEWNS|CLONE_NEWUSER|CLONE_NEWPID|CLONE_NEWNET|CLONE_NEWIPC|CLONE_NEWUTS|CLONE_NEWCGROUP|CLONE_NEWTIME"
            .into(),
    );
    assert_eq!(ns.resolve().unwrap(), 0x7e02_0080);
}

#[test]
fn build_program_is_fast_and_fits() {
    // Warm the parsed policy, then time a full build (parse is cached, compile is not).
    let t0 = Instant::now();
    let first = seccomp::build_program().expect("build_program");
    let cold = t0.elapsed();
    let n = 50;
    let t1 = Instant::now();
    for _ in 0..n {
        let p = seccomp::build_program().expect("build_program");
        assert_eq!(p, first);
    }
    let warm = t1.elapsed() / n;
    eprintln!(
        "seccomp build_program: {} BPF instructions; first call (incl. JSON parse) {:?}, then {:?} per build",
        first.len(),
        cold,
        warm
    );
    assert!(first.len() <= seccomp::MAX_PROGRAM_LEN);
    assert!(warm.as_millis() < 50, "build too slow: {warm:?}");
}

#[cfg(target_arch = "x86_64")]
#[test]
fn syscall_numbers_match_libc() {
    let table: &[(&str, libc::c_long)] = &[
        ("_sysctl", libc::SYS__sysctl),
        ("accept", libc::SYS_accept),
        ("accept4", libc::SYS_accept4),
        ("access", libc::SYS_access),
        ("acct", libc::SYS_acct),
        ("add_key", libc::SYS_add_key),
        ("adjtimex", libc::SYS_adjtimex),
        ("alarm", libc::SYS_alarm),
        ("arch_prctl", libc::SYS_arch_prctl),
        ("bind", libc::SYS_bind),
        ("bpf", libc::SYS_bpf),
        ("brk", libc::SYS_brk),
        ("capget", libc::SYS_capget),
        ("capset", libc::SYS_capset),
        ("chdir", libc::SYS_chdir),
        ("chmod", libc::SYS_chmod),
        ("chown", libc::SYS_chown),
        ("chroot", libc::SYS_chroot),
        ("clock_adjtime", libc::SYS_clock_adjtime),
        ("clock_getres", libc::SYS_clock_getres),
        ("clock_gettime", libc::SYS_clock_gettime),
        ("clock_nanosleep", libc::SYS_clock_nanosleep),
        ("clock_settime", libc::SYS_clock_settime),
        ("clone", libc::SYS_clone),
        ("clone3", libc::SYS_clone3),
        ("close", libc::SYS_close),
        ("close_range", libc::SYS_close_range),
        ("connect", libc::SYS_connect),
        ("copy_file_range", libc::SYS_copy_file_range),
        ("creat", libc::SYS_creat),
        ("delete_module", libc::SYS_delete_module),
        ("dup", libc::SYS_dup),
        ("dup2", libc::SYS_dup2),
        ("dup3", libc::SYS_dup3),
        ("epoll_create", libc::SYS_epoll_create),
        ("epoll_create1", libc::SYS_epoll_create1),
        ("epoll_ctl", libc::SYS_epoll_ctl),
        ("epoll_pwait", libc::SYS_epoll_pwait),
        ("epoll_pwait2", libc::SYS_epoll_pwait2),
        ("epoll_wait", libc::SYS_epoll_wait),
        ("eventfd", libc::SYS_eventfd),
        ("eventfd2", libc::SYS_eventfd2),
        ("execve", libc::SYS_execve),
        ("execveat", libc::SYS_execveat),
        ("exit", libc::SYS_exit),
        ("exit_group", libc::SYS_exit_group),
        ("faccessat", libc::SYS_faccessat),
        ("faccessat2", libc::SYS_faccessat2),
        ("fadvise64", libc::SYS_fadvise64),
        ("fallocate", libc::SYS_fallocate),
        ("fanotify_init", libc::SYS_fanotify_init),
        ("fanotify_mark", libc::SYS_fanotify_mark),
        ("fchdir", libc::SYS_fchdir),
        ("fchmod", libc::SYS_fchmod),
        ("fchmodat", libc::SYS_fchmodat),
        ("fchmodat2", libc::SYS_fchmodat2),
        ("fchown", libc::SYS_fchown),
        ("fchownat", libc::SYS_fchownat),
        ("fcntl", libc::SYS_fcntl),
        ("fdatasync", libc::SYS_fdatasync),
        ("fgetxattr", libc::SYS_fgetxattr),
        ("finit_module", libc::SYS_finit_module),
        ("flistxattr", libc::SYS_flistxattr),
        ("flock", libc::SYS_flock),
        ("fork", libc::SYS_fork),
        ("fremovexattr", libc::SYS_fremovexattr),
        ("fsconfig", libc::SYS_fsconfig),
        ("fsetxattr", libc::SYS_fsetxattr),
        ("fsmount", libc::SYS_fsmount),
        ("fsopen", libc::SYS_fsopen),
        ("fspick", libc::SYS_fspick),
        ("fstat", libc::SYS_fstat),
        ("fstatfs", libc::SYS_fstatfs),
        ("fsync", libc::SYS_fsync),
        ("ftruncate", libc::SYS_ftruncate),
        ("futex", libc::SYS_futex),
        ("futex_waitv", libc::SYS_futex_waitv),
        ("futimesat", libc::SYS_futimesat),
        ("get_mempolicy", libc::SYS_get_mempolicy),
        ("get_thread_area", libc::SYS_get_thread_area),
        ("getcpu", libc::SYS_getcpu),
        ("getcwd", libc::SYS_getcwd),
        ("getdents", libc::SYS_getdents),
        ("getdents64", libc::SYS_getdents64),
        ("getegid", libc::SYS_getegid),
        ("geteuid", libc::SYS_geteuid),
        ("getgid", libc::SYS_getgid),
        ("getgroups", libc::SYS_getgroups),
        ("getitimer", libc::SYS_getitimer),
        ("getpeername", libc::SYS_getpeername),
        ("getpgid", libc::SYS_getpgid),
        ("getpgrp", libc::SYS_getpgrp),
        ("getpid", libc::SYS_getpid),
        ("getppid", libc::SYS_getppid),
        ("getpriority", libc::SYS_getpriority),
        ("getrandom", libc::SYS_getrandom),
        ("getresgid", libc::SYS_getresgid),
        ("getresuid", libc::SYS_getresuid),
        ("getrlimit", libc::SYS_getrlimit),
        ("getrusage", libc::SYS_getrusage),
        ("getsid", libc::SYS_getsid),
        ("getsockname", libc::SYS_getsockname),
        ("getsockopt", libc::SYS_getsockopt),
        ("gettid", libc::SYS_gettid),
        ("gettimeofday", libc::SYS_gettimeofday),
        ("getuid", libc::SYS_getuid),
        ("getxattr", libc::SYS_getxattr),
        ("init_module", libc::SYS_init_module),
        ("inotify_add_watch", libc::SYS_inotify_add_watch),
        ("inotify_init", libc::SYS_inotify_init),
        ("inotify_init1", libc::SYS_inotify_init1),
        ("inotify_rm_watch", libc::SYS_inotify_rm_watch),
        ("io_cancel", libc::SYS_io_cancel),
        ("io_destroy", libc::SYS_io_destroy),
        ("io_getevents", libc::SYS_io_getevents),
        ("io_setup", libc::SYS_io_setup),
        ("io_submit", libc::SYS_io_submit),
        ("io_uring_enter", libc::SYS_io_uring_enter),
        ("io_uring_register", libc::SYS_io_uring_register),
        ("io_uring_setup", libc::SYS_io_uring_setup),
        ("ioctl", libc::SYS_ioctl),
        ("ioperm", libc::SYS_ioperm),
        ("iopl", libc::SYS_iopl),
        ("ioprio_get", libc::SYS_ioprio_get),
        ("ioprio_set", libc::SYS_ioprio_set),
        ("kcmp", libc::SYS_kcmp),
        ("kexec_file_load", libc::SYS_kexec_file_load),
        ("kexec_load", libc::SYS_kexec_load),
        ("keyctl", libc::SYS_keyctl),
        ("kill", libc::SYS_kill),
        ("landlock_add_rule", libc::SYS_landlock_add_rule),
        ("landlock_create_ruleset", libc::SYS_landlock_create_ruleset),
        ("landlock_restrict_self", libc::SYS_landlock_restrict_self),
        ("lchown", libc::SYS_lchown),
        ("lgetxattr", libc::SYS_lgetxattr),
        ("link", libc::SYS_link),
        ("linkat", libc::SYS_linkat),
        ("listen", libc::SYS_listen),
        ("listxattr", libc::SYS_listxattr),
        ("llistxattr", libc::SYS_llistxattr),
        ("lookup_dcookie", libc::SYS_lookup_dcookie),
        ("lremovexattr", libc::SYS_lremovexattr),
        ("lseek", libc::SYS_lseek),
        ("lsetxattr", libc::SYS_lsetxattr),
        ("lstat", libc::SYS_lstat),
        ("madvise", libc::SYS_madvise),
        ("mbind", libc::SYS_mbind),
        ("membarrier", libc::SYS_membarrier),
        ("memfd_create", libc::SYS_memfd_create),
        ("memfd_secret", libc::SYS_memfd_secret),
        ("migrate_pages", libc::SYS_migrate_pages),
        ("mincore", libc::SYS_mincore),
        ("mkdir", libc::SYS_mkdir),
        ("mkdirat", libc::SYS_mkdirat),
        ("mknod", libc::SYS_mknod),
        ("mknodat", libc::SYS_mknodat),
        ("mlock", libc::SYS_mlock),
        ("mlock2", libc::SYS_mlock2),
        ("mlockall", libc::SYS_mlockall),
        ("mmap", libc::SYS_mmap),
        ("modify_ldt", libc::SYS_modify_ldt),
        ("mount", libc::SYS_mount),
        ("mount_setattr", libc::SYS_mount_setattr),
        ("move_mount", libc::SYS_move_mount),
        ("move_pages", libc::SYS_move_pages),
        ("mprotect", libc::SYS_mprotect),
        ("mq_getsetattr", libc::SYS_mq_getsetattr),
        ("mq_notify", libc::SYS_mq_notify),
        ("mq_open", libc::SYS_mq_open),
        ("mq_timedreceive", libc::SYS_mq_timedreceive),
        ("mq_timedsend", libc::SYS_mq_timedsend),
        ("mq_unlink", libc::SYS_mq_unlink),
        ("mremap", libc::SYS_mremap),
        ("mseal", libc::SYS_mseal),
        ("msgctl", libc::SYS_msgctl),
        ("msgget", libc::SYS_msgget),
        ("msgrcv", libc::SYS_msgrcv),
        ("msgsnd", libc::SYS_msgsnd),
        ("msync", libc::SYS_msync),
        ("munlock", libc::SYS_munlock),
        ("munlockall", libc::SYS_munlockall),
        ("munmap", libc::SYS_munmap),
        ("name_to_handle_at", libc::SYS_name_to_handle_at),
        ("nanosleep", libc::SYS_nanosleep),
        ("newfstatat", libc::SYS_newfstatat),
        ("nfsservctl", libc::SYS_nfsservctl),
        ("open", libc::SYS_open),
        ("open_by_handle_at", libc::SYS_open_by_handle_at),
        ("open_tree", libc::SYS_open_tree),
        ("openat", libc::SYS_openat),
        ("openat2", libc::SYS_openat2),
        ("pause", libc::SYS_pause),
        ("perf_event_open", libc::SYS_perf_event_open),
        ("personality", libc::SYS_personality),
        ("pidfd_getfd", libc::SYS_pidfd_getfd),
        ("pidfd_open", libc::SYS_pidfd_open),
        ("pidfd_send_signal", libc::SYS_pidfd_send_signal),
        ("pipe", libc::SYS_pipe),
        ("pipe2", libc::SYS_pipe2),
        ("pivot_root", libc::SYS_pivot_root),
        ("pkey_alloc", libc::SYS_pkey_alloc),
        ("pkey_free", libc::SYS_pkey_free),
        ("pkey_mprotect", libc::SYS_pkey_mprotect),
        ("poll", libc::SYS_poll),
        ("ppoll", libc::SYS_ppoll),
        ("prctl", libc::SYS_prctl),
        ("pread64", libc::SYS_pread64),
        ("preadv", libc::SYS_preadv),
        ("preadv2", libc::SYS_preadv2),
        ("prlimit64", libc::SYS_prlimit64),
        ("process_madvise", libc::SYS_process_madvise),
        ("process_mrelease", libc::SYS_process_mrelease),
        ("process_vm_readv", libc::SYS_process_vm_readv),
        ("process_vm_writev", libc::SYS_process_vm_writev),
        ("pselect6", libc::SYS_pselect6),
        ("ptrace", libc::SYS_ptrace),
        ("pwrite64", libc::SYS_pwrite64),
        ("pwritev", libc::SYS_pwritev),
        ("pwritev2", libc::SYS_pwritev2),
        ("quotactl", libc::SYS_quotactl),
        ("quotactl_fd", libc::SYS_quotactl_fd),
        ("read", libc::SYS_read),
        ("readahead", libc::SYS_readahead),
        ("readlink", libc::SYS_readlink),
        ("readlinkat", libc::SYS_readlinkat),
        ("readv", libc::SYS_readv),
        ("reboot", libc::SYS_reboot),
        ("recvfrom", libc::SYS_recvfrom),
        ("recvmmsg", libc::SYS_recvmmsg),
        ("recvmsg", libc::SYS_recvmsg),
        ("remap_file_pages", libc::SYS_remap_file_pages),
        ("removexattr", libc::SYS_removexattr),
        ("rename", libc::SYS_rename),
        ("renameat", libc::SYS_renameat),
        ("renameat2", libc::SYS_renameat2),
        ("request_key", libc::SYS_request_key),
        ("restart_syscall", libc::SYS_restart_syscall),
        ("rmdir", libc::SYS_rmdir),
        ("rseq", libc::SYS_rseq),
        ("rt_sigaction", libc::SYS_rt_sigaction),
        ("rt_sigpending", libc::SYS_rt_sigpending),
        ("rt_sigprocmask", libc::SYS_rt_sigprocmask),
        ("rt_sigqueueinfo", libc::SYS_rt_sigqueueinfo),
        ("rt_sigreturn", libc::SYS_rt_sigreturn),
        ("rt_sigsuspend", libc::SYS_rt_sigsuspend),
        ("rt_sigtimedwait", libc::SYS_rt_sigtimedwait),
        ("rt_tgsigqueueinfo", libc::SYS_rt_tgsigqueueinfo),
        ("sched_get_priority_max", libc::SYS_sched_get_priority_max),
        ("sched_get_priority_min", libc::SYS_sched_get_priority_min),
        ("sched_getaffinity", libc::SYS_sched_getaffinity),
        ("sched_getattr", libc::SYS_sched_getattr),
        ("sched_getparam", libc::SYS_sched_getparam),
        ("sched_getscheduler", libc::SYS_sched_getscheduler),
        ("sched_rr_get_interval", libc::SYS_sched_rr_get_interval),
        ("sched_setaffinity", libc::SYS_sched_setaffinity),
        ("sched_setattr", libc::SYS_sched_setattr),
        ("sched_setparam", libc::SYS_sched_setparam),
        ("sched_setscheduler", libc::SYS_sched_setscheduler),
        ("sched_yield", libc::SYS_sched_yield),
        ("seccomp", libc::SYS_seccomp),
        ("select", libc::SYS_select),
        ("semctl", libc::SYS_semctl),
        ("semget", libc::SYS_semget),
        ("semop", libc::SYS_semop),
        ("semtimedop", libc::SYS_semtimedop),
        ("sendfile", libc::SYS_sendfile),
        ("sendmmsg", libc::SYS_sendmmsg),
        ("sendmsg", libc::SYS_sendmsg),
        ("sendto", libc::SYS_sendto),
        ("set_mempolicy", libc::SYS_set_mempolicy),
        ("set_mempolicy_home_node", libc::SYS_set_mempolicy_home_node),
        ("set_robust_list", libc::SYS_set_robust_list),
        ("set_thread_area", libc::SYS_set_thread_area),
        ("set_tid_address", libc::SYS_set_tid_address),
        ("setdomainname", libc::SYS_setdomainname),
        ("setfsgid", libc::SYS_setfsgid),
        ("setfsuid", libc::SYS_setfsuid),
        ("setgid", libc::SYS_setgid),
        ("setgroups", libc::SYS_setgroups),
        ("sethostname", libc::SYS_sethostname),
        ("setitimer", libc::SYS_setitimer),
        ("setns", libc::SYS_setns),
        ("setpgid", libc::SYS_setpgid),
        ("setpriority", libc::SYS_setpriority),
        ("setregid", libc::SYS_setregid),
        ("setresgid", libc::SYS_setresgid),
        ("setresuid", libc::SYS_setresuid),
        ("setreuid", libc::SYS_setreuid),
        ("setrlimit", libc::SYS_setrlimit),
        ("setsid", libc::SYS_setsid),
        ("setsockopt", libc::SYS_setsockopt),
        ("settimeofday", libc::SYS_settimeofday),
        ("setuid", libc::SYS_setuid),
        ("setxattr", libc::SYS_setxattr),
        ("shmat", libc::SYS_shmat),
        ("shmctl", libc::SYS_shmctl),
        ("shmdt", libc::SYS_shmdt),
        ("shmget", libc::SYS_shmget),
        ("shutdown", libc::SYS_shutdown),
        ("sigaltstack", libc::SYS_sigaltstack),
        ("signalfd", libc::SYS_signalfd),
        ("signalfd4", libc::SYS_signalfd4),
        ("socket", libc::SYS_socket),
        ("socketpair", libc::SYS_socketpair),
        ("splice", libc::SYS_splice),
        ("stat", libc::SYS_stat),
        ("statfs", libc::SYS_statfs),
        ("statx", libc::SYS_statx),
        ("swapoff", libc::SYS_swapoff),
        ("swapon", libc::SYS_swapon),
        ("symlink", libc::SYS_symlink),
        ("symlinkat", libc::SYS_symlinkat),
        ("sync", libc::SYS_sync),
        ("sync_file_range", libc::SYS_sync_file_range),
        ("syncfs", libc::SYS_syncfs),
        ("sysfs", libc::SYS_sysfs),
        ("sysinfo", libc::SYS_sysinfo),
        ("syslog", libc::SYS_syslog),
        ("tee", libc::SYS_tee),
        ("tgkill", libc::SYS_tgkill),
        ("time", libc::SYS_time),
        ("timer_create", libc::SYS_timer_create),
        ("timer_delete", libc::SYS_timer_delete),
        ("timer_getoverrun", libc::SYS_timer_getoverrun),
        ("timer_gettime", libc::SYS_timer_gettime),
        ("timer_settime", libc::SYS_timer_settime),
        ("timerfd_create", libc::SYS_timerfd_create),
        ("timerfd_gettime", libc::SYS_timerfd_gettime),
        ("timerfd_settime", libc::SYS_timerfd_settime),
        ("times", libc::SYS_times),
        ("tkill", libc::SYS_tkill),
        ("truncate", libc::SYS_truncate),
        ("umask", libc::SYS_umask),
        ("umount2", libc::SYS_umount2),
        ("uname", libc::SYS_uname),
        ("unlink", libc::SYS_unlink),
        ("unlinkat", libc::SYS_unlinkat),
        ("unshare", libc::SYS_unshare),
        ("uselib", libc::SYS_uselib),
        ("userfaultfd", libc::SYS_userfaultfd),
        ("ustat", libc::SYS_ustat),
        ("utime", libc::SYS_utime),
        ("utimensat", libc::SYS_utimensat),
        ("utimes", libc::SYS_utimes),
        ("vfork", libc::SYS_vfork),
        ("vhangup", libc::SYS_vhangup),
        ("vmsplice", libc::SYS_vmsplice),
        ("wait4", libc::SYS_wait4),
        ("waitid", libc::SYS_waitid),
        ("write", libc::SYS_write),
        ("writev", libc::SYS_writev),
    ];
    for (name, expected) in table {
        assert_eq!(
            seccomp::syscall_number(name),
            Some(*expected),
            "syscall number of {name}"
        );
    }
    // Syscalls newer than the libc crate's table, checked against the kernel's numbering.
    for (name, n) in [
        ("cachestat", 451),
        ("fchmodat2", 452),
        ("map_shadow_stack", 453),
        ("futex_wake", 454),
        ("futex_wait", 455),
        ("futex_requeue", 456),
        ("statmount", 457),
        ("listmount", 458),
        ("lsm_set_self_attr", 460),
        ("mseal", 462),
        ("setxattrat", 463),
        ("getxattrat", 464),
        ("listxattrat", 465),
        ("removexattrat", 466),
        ("open_tree_attr", 467),
        ("io_pgetevents", 333),
    ] {
        assert_eq!(seccomp::syscall_number(name), Some(n), "{name}");
    }
}

// ---------------------------------------------------------------------------------------------
// The program's decisions, evaluated by a small classic-BPF interpreter for every syscall number

const RET_ALLOW: u32 = 0x7fff_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;

fn ret_errno(e: i32) -> u32 {
    0x0005_0000 | (e as u32 & 0xffff)
}

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;

fn run_bpf(prog: &[seccompiler::sock_filter], arch: u32, nr: i32, args: [u64; 6]) -> u32 {
    let mut data = [0u8; 64];
    data[0..4].copy_from_slice(&nr.to_ne_bytes());
    data[4..8].copy_from_slice(&arch.to_ne_bytes());
    for (i, a) in args.iter().enumerate() {
        data[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_ne_bytes());
    }
    let mut acc: u32 = 0;
    let mut pc = 0usize;
    for _ in 0..100_000 {
        let ins = &prog[pc];
        pc += 1;
        let jump = |cond: bool| usize::from(if cond { ins.jt } else { ins.jf });
        match ins.code {
            0x20 => {
                let off = ins.k as usize;
                acc = u32::from_ne_bytes(data[off..off + 4].try_into().unwrap());
            }
            0x54 => acc &= ins.k,
            0x05 => pc += ins.k as usize,
            0x15 => pc += jump(acc == ins.k),
            0x25 => pc += jump(acc > ins.k),
            0x35 => pc += jump(acc >= ins.k),
            0x45 => pc += jump(acc & ins.k != 0),
            0x06 => return ins.k,
            c => panic!("unexpected BPF opcode {c:#x} at {}", pc - 1),
        }
    }
    panic!("BPF program did not terminate");
}

#[test]
fn program_decides_every_syscall_as_the_policy_says() {
    let prog = program();
    let p = seccomp::policy();
    let mut expected: BTreeMap<i64, u32> = BTreeMap::new();
    let mut conditional = BTreeSet::new();
    for a in p.allowed.iter().filter(|a| a.applies_here()) {
        let n = nr(&a.syscall);
        if a.args.is_empty() {
            expected.insert(n, RET_ALLOW);
        } else {
            conditional.insert(n);
        }
    }
    for r in p.errno_rules.iter().filter(|r| r.applies_here()) {
        let n = nr(&r.syscall);
        if r.args.is_empty() {
            expected.insert(n, ret_errno(seccomp::errno_value(&r.errno).unwrap() as i32));
        } else {
            conditional.insert(n);
        }
    }
    let mut checked = 0;
    for n in 0..1100i64 {
        if conditional.contains(&n) {
            continue;
        }
        let want = expected.get(&n).copied().unwrap_or(ret_errno(libc::EPERM));
        for args in [[0u64; 6], [u64::MAX; 6], [1, 2, 3, 4, 5, 6]] {
            let got = run_bpf(prog, AUDIT_ARCH, n as i32, args);
            assert_eq!(
                got, want,
                "syscall {n} with {args:?}: {got:#x} != {want:#x}"
            );
        }
        checked += 1;
    }
    assert!(checked > 1000);
    // Denied syscalls: EPERM.
    for d in p.denied.iter().filter(|d| d.applies_here()) {
        let got = run_bpf(prog, AUDIT_ARCH, nr(&d.syscall) as i32, [0; 6]);
        assert_eq!(got, ret_errno(libc::EPERM), "{}", d.syscall);
    }
    // A foreign ABI is killed; x32 numbers (bit 30) match nothing.
    assert_eq!(run_bpf(prog, 0x4000_0003, 0, [0; 6]), RET_KILL_PROCESS);
    #[cfg(target_arch = "x86_64")]
    assert_eq!(
        run_bpf(
            prog,
            AUDIT_ARCH,
            (libc::SYS_read | 0x4000_0000) as i32,
            [0; 6]
        ),
        ret_errno(libc::EPERM)
    );
}

#[test]
fn program_argument_rules() {
    let prog = program();
    let eperm = ret_errno(libc::EPERM);
    let eafnosupport = ret_errno(libc::EAFNOSUPPORT);
    let call = |name: &str, args: [u64; 6]| run_bpf(prog, AUDIT_ARCH, nr(name) as i32, args);
    let a0 = |v: u64| [v, 0, 0, 0, 0, 0];
    let sigchld = libc::SIGCHLD as u64;

    // clone: fork, vfork and thread flag sets pass, any namespace flag does not.
    let thread_flags = (libc::CLONE_VM
        | libc::CLONE_FS
        | libc::CLONE_FILES
        | libc::CLONE_SIGHAND
        | libc::CLONE_THREAD
        | libc::CLONE_SYSVSEM
        | libc::CLONE_SETTLS
        | libc::CLONE_PARENT_SETTID
        | libc::CLONE_CHILD_CLEARTID) as u64;
    assert_eq!(call("clone", a0(sigchld)), RET_ALLOW);
    assert_eq!(call("clone", a0(thread_flags)), RET_ALLOW);
    assert_eq!(
        call(
            "clone",
            a0((libc::CLONE_VM | libc::CLONE_VFORK) as u64 | sigchld)
        ),
        RET_ALLOW
    );
    for f in [
        libc::CLONE_NEWNS,
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWCGROUP,
        libc::CLONE_NEWTIME,
    ] {
        assert_eq!(
            call("clone", a0(f as u64 | sigchld)),
            eperm,
            "clone flag {f:#x}"
        );
        assert_eq!(call("clone", a0(f as u64 | thread_flags)), eperm);
    }
    assert_eq!(
        run_bpf(prog, AUDIT_ARCH, nr("clone3") as i32, [0; 6]),
        ret_errno(libc::ENOSYS)
    );

    // socket / socketpair families.
    for fam in [libc::AF_UNIX, libc::AF_INET, libc::AF_INET6] {
        assert_eq!(call("socket", a0(fam as u64)), RET_ALLOW, "family {fam}");
    }
    for fam in [
        0,
        libc::AF_NETLINK,
        libc::AF_PACKET,
        libc::AF_VSOCK,
        libc::AF_ALG,
        libc::AF_BLUETOOTH,
        libc::AF_KEY,
        libc::AF_XDP,
        3,
    ] {
        assert_eq!(call("socket", a0(fam as u64)), eafnosupport, "family {fam}");
    }
    // The kernel reads the family as an int: upper bits are ignored, as here.
    assert_eq!(
        call("socket", a0((1 << 32) | libc::AF_UNIX as u64)),
        RET_ALLOW
    );
    assert_eq!(
        call("socket", a0((1 << 32) | libc::AF_NETLINK as u64)),
        eafnosupport
    );
    assert_eq!(call("socketpair", a0(libc::AF_UNIX as u64)), RET_ALLOW);
    assert_eq!(call("socketpair", a0(libc::AF_INET as u64)), eafnosupport);

    // ioctl.
    let io = |cmd: u64| call("ioctl", [0, cmd, 0, 0, 0, 0]);
    assert_eq!(io(libc::TCGETS), RET_ALLOW);
    assert_eq!(io(libc::TIOCGWINSZ), RET_ALLOW);
    assert_eq!(io(libc::FIONREAD), RET_ALLOW);
    assert_eq!(io(libc::TIOCSTI), eperm);
    assert_eq!(io(libc::TIOCLINUX), eperm);
    assert_eq!(io(libc::TIOCSETD), eperm);
    // Btrfs subvolume and snapshot creation (a quota escape on disk workspaces) is refused;
    // FICLONE (reflink copies) shares the ioctl type and stays allowed.
    for cmd in [0x5000_9401u64, 0x5000_940e, 0x5000_9417, 0x5000_9418] {
        assert_eq!(io(cmd), eperm, "btrfs ioctl {cmd:#x}");
    }
    assert_eq!(io(0x4004_9409), RET_ALLOW, "FICLONE");
    assert_eq!(
        io((1 << 32) | libc::TIOCSTI),
        eperm,
        "high bits must not bypass"
    );

    // personality.
    assert_eq!(call("personality", a0(0)), RET_ALLOW);
    assert_eq!(call("personality", a0(0xffff_ffff)), RET_ALLOW);
    assert_eq!(
        call("personality", a0(0x0040000)),
        eperm,
        "ADDR_NO_RANDOMIZE"
    );
    assert_eq!(call("personality", a0(0x0008)), eperm, "PER_LINUX32");

    // mknodat: FIFOs only.
    let mk = |mode: u32| call("mknodat", [0, 0, u64::from(mode), 0, 0, 0]);
    assert_eq!(mk(libc::S_IFIFO | 0o644), RET_ALLOW);
    for t in [
        libc::S_IFCHR,
        libc::S_IFBLK,
        libc::S_IFREG,
        libc::S_IFSOCK,
        0,
    ] {
        assert_eq!(mk(t | 0o600), eperm, "mknodat type {t:o}");
    }
}

// ---------------------------------------------------------------------------------------------
// Real enforcement

#[test]
fn installed_filter_shows_in_proc_status() {
    let code = with_filter(|| {
        let s = sandlot_jail::caps::current();
        match (s.seccomp, s.no_new_privs, s.seccomp_filters) {
            (Some(2), Some(true), Some(1)) => 0,
            (Some(2), Some(true), None) => 0,
            _ => 1,
        }
    });
    assert_eq!(code, 0);
}

#[test]
fn install_sets_no_new_privs_itself() {
    let code = in_child(|| {
        // SAFETY: integer-only prctl.
        if unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) } != 0 {
            return SETUP_FAILED;
        }
        if seccomp::install().is_err() {
            return 1;
        }
        // SAFETY: integer-only prctl.
        let nnp = unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) };
        if nnp == 1 {
            0
        } else {
            2
        }
    });
    assert_eq!(code, 0);
}

#[test]
fn unshare_newuser_is_eperm() {
    // SAFETY: plain syscall in the forked child.
    let got = with_filter(|| errno_of(unsafe { libc::unshare(libc::CLONE_NEWUSER) } as _));
    assert_eq!(got, libc::EPERM);
}

/// Raw `clone(flags | SIGCHLD)`; a child that gets created exits at once.
fn raw_clone(flags: libc::c_int) -> i32 {
    // SAFETY: fork-like clone (no CLONE_VM, no new stack): the child continues on a copy of
    // our stack and `_exit`s immediately.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (flags | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    if rc == 0 {
        // SAFETY: leaving the clone child.
        unsafe { libc::_exit(0) };
    }
    if rc > 0 {
        wait_code(rc as libc::pid_t);
        return 0;
    }
    errno()
}

#[test]
fn clone_with_namespace_flags_is_eperm() {
    assert_eq!(with_filter(|| raw_clone(libc::CLONE_NEWNET)), libc::EPERM);
    assert_eq!(with_filter(|| raw_clone(libc::CLONE_NEWUSER)), libc::EPERM);
    assert_eq!(with_filter(|| raw_clone(libc::CLONE_NEWPID)), libc::EPERM);
    // The control: the same raw clone without namespace flags works.
    assert_eq!(with_filter(|| raw_clone(0)), 0);
}

#[test]
fn clone3_is_enosys() {
    let got = with_filter(|| {
        // struct clone_args: flags, pidfd, child_tid, parent_tid, exit_signal, stack,
        // stack_size, tls (CLONE_ARGS_SIZE_VER0 = 64 bytes).
        let mut args = [0u64; 8];
        args[4] = libc::SIGCHLD as u64;
        // SAFETY: `args` is a valid clone_args of the size passed.
        let rc = unsafe { libc::syscall(libc::SYS_clone3, args.as_mut_ptr(), 64usize) };
        if rc == 0 {
            // SAFETY: leaving the clone child.
            unsafe { libc::_exit(0) };
        }
        if rc > 0 {
            wait_code(rc as libc::pid_t);
            return UNEXPECTED_SUCCESS;
        }
        errno()
    });
    assert_eq!(got, libc::ENOSYS);
}

#[test]
fn fork_and_threads_work() {
    let got = with_filter(|| {
        // SAFETY: fork in the single-threaded child; the grandchild `_exit`s.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: leaving the grandchild.
            unsafe { libc::_exit(42) };
        }
        if pid < 0 {
            return errno();
        }
        if wait_code(pid) != 42 {
            return 1;
        }
        // pthread_create goes through clone3 (ENOSYS) and falls back to clone.
        match std::thread::spawn(|| 7).join() {
            Ok(7) => 0,
            _ => 2,
        }
    });
    assert_eq!(got, 0);
}

#[test]
fn execve_of_bin_true_works() {
    let got = with_filter(|| {
        let path = c"/bin/true";
        let argv = [path.as_ptr(), std::ptr::null()];
        let envp = [std::ptr::null::<libc::c_char>()];
        // SAFETY: NUL-terminated argv/envp arrays of valid C strings.
        unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
        100 + errno()
    });
    assert_eq!(got, 0);
}

#[test]
fn mount_is_eperm() {
    let op = || {
        // SAFETY: valid C strings; in scratch namespaces this would only mount privately.
        errno_of(unsafe {
            libc::mount(
                c"none".as_ptr(),
                c"/tmp".as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                std::ptr::null(),
            )
        } as _)
    };
    assert_eq!(with_filter_scratch(op), libc::EPERM);
    // Control: the kernel alone would allow it there.
    assert_eq!(without_filter_scratch(op), 0);
}

#[test]
fn fsopen_is_eperm() {
    let op = || {
        // SAFETY: valid C string; fsopen only creates a filesystem context descriptor.
        errno_of(unsafe { libc::syscall(nr("fsopen"), c"tmpfs".as_ptr(), 0u32) })
    };
    assert_eq!(with_filter_scratch(op), libc::EPERM);
    assert_eq!(without_filter_scratch(op), 0);
}

#[test]
fn open_tree_is_eperm() {
    const OPEN_TREE_CLONE: u32 = 1;
    let op = || {
        // SAFETY: valid C string; makes a detached copy of the (scratch) mount tree
        // (recursive: a user namespace may not clone a mount with locked children without it).
        errno_of(unsafe {
            libc::syscall(
                nr("open_tree"),
                libc::AT_FDCWD,
                c"/".as_ptr(),
                OPEN_TREE_CLONE | libc::O_CLOEXEC as u32 | libc::AT_RECURSIVE as u32,
            )
        })
    };
    assert_eq!(with_filter_scratch(op), libc::EPERM);
    assert_eq!(without_filter_scratch(op), 0);
}

#[test]
fn ptrace_traceme_is_eperm() {
    // SAFETY: PTRACE_TRACEME takes no pointers.
    let got = with_filter(|| errno_of(unsafe { libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) }));
    assert_eq!(got, libc::EPERM);
}

#[test]
fn bpf_is_eperm() {
    // BPF_MAP_CREATE with a NULL attribute: EFAULT/EINVAL if it reached the kernel.
    // SAFETY: the kernel would only read the (NULL) attribute and fail.
    let got = with_filter(|| errno_of(unsafe { libc::syscall(libc::SYS_bpf, 0, 0usize, 0u32) }));
    assert_eq!(got, libc::EPERM);
}

#[test]
fn perf_event_open_is_eperm() {
    let got = with_filter(|| {
        // SAFETY: NULL attribute: EFAULT if it reached the kernel.
        let rc = unsafe { libc::syscall(libc::SYS_perf_event_open, 0usize, 0, -1, -1, 0) };
        errno_of(rc)
    });
    assert_eq!(got, libc::EPERM);
}

#[test]
fn keyctl_is_eperm() {
    const KEYCTL_GET_KEYRING_ID: libc::c_long = 0;
    const KEY_SPEC_SESSION_KEYRING: libc::c_long = -3;
    let op = || {
        // SAFETY: integer-only keyctl query (create = 0).
        errno_of(unsafe {
            libc::syscall(
                libc::SYS_keyctl,
                KEYCTL_GET_KEYRING_ID,
                KEY_SPEC_SESSION_KEYRING,
                0,
            )
        })
    };
    assert_eq!(with_filter(op), libc::EPERM);
}

#[test]
fn userfaultfd_is_eperm() {
    let op = || {
        // SAFETY: integer-only syscall; a descriptor that got created is closed.
        let rc = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC) };
        errno_of(rc)
    };
    assert_eq!(with_filter(op), libc::EPERM);
}

#[test]
fn io_uring_setup_is_eperm() {
    let op = || {
        let mut params = [0u8; 120];
        // SAFETY: `params` is a zeroed io_uring_params of the kernel's size.
        errno_of(unsafe { libc::syscall(nr("io_uring_setup"), 1u32, params.as_mut_ptr()) })
    };
    assert_eq!(with_filter(op), libc::EPERM);
    // Control: without the filter the kernel answers by its own setting. A kernel with
    // `kernel.io_uring_disabled = 2` refuses io_uring to everyone with EPERM too, so the refusal
    // above is then not seccomp's alone; 0 or 1 (root stays allowed) must let it through.
    let disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .map_or(0, |s| s.trim().parse::<u32>().unwrap_or(0));
    let expected = if disabled == 2 { libc::EPERM } else { 0 };
    assert_eq!(in_child(op), expected, "io_uring_disabled = {disabled}");
}

#[test]
fn open_by_handle_at_is_eperm() {
    let got = with_filter(|| {
        // SAFETY: NULL handle: EFAULT if it reached the kernel.
        let rc = unsafe { libc::syscall(libc::SYS_open_by_handle_at, libc::AT_FDCWD, 0usize, 0) };
        errno_of(rc)
    });
    assert_eq!(got, libc::EPERM);
}

#[test]
fn init_module_is_eperm() {
    let got = with_filter(|| {
        // SAFETY: NULL image of length 0: EINVAL/EFAULT if it reached the kernel (we are root).
        let rc = unsafe { libc::syscall(libc::SYS_init_module, 0usize, 0usize, c"".as_ptr()) };
        errno_of(rc)
    });
    assert_eq!(got, libc::EPERM);
}

#[test]
fn setns_is_eperm() {
    let got = with_filter(|| {
        // SAFETY: opening our own namespace file and passing it to setns.
        let fd = unsafe { libc::open(c"/proc/self/ns/uts".as_ptr(), libc::O_RDONLY) };
        if fd < 0 {
            return SETUP_FAILED;
        }
        // SAFETY: `fd` is a namespace descriptor.
        errno_of(unsafe { libc::setns(fd, libc::CLONE_NEWUTS) } as _)
    });
    assert_eq!(got, libc::EPERM);
}

fn socket_errno(family: libc::c_int, ty: libc::c_int, proto: libc::c_int) -> i32 {
    // SAFETY: integer-only syscall; the child exits right after.
    errno_of(unsafe { libc::socket(family, ty, proto) } as _)
}

#[test]
fn netlink_and_packet_sockets_are_eafnosupport() {
    let netlink = || socket_errno(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_ROUTE);
    let packet = || socket_errno(libc::AF_PACKET, libc::SOCK_RAW, 0);
    let vsock = || socket_errno(libc::AF_VSOCK, libc::SOCK_STREAM, 0);
    assert_eq!(with_filter(netlink), libc::EAFNOSUPPORT);
    assert_eq!(with_filter(packet), libc::EAFNOSUPPORT);
    assert_eq!(with_filter(vsock), libc::EAFNOSUPPORT);
    // Controls: both families exist on this kernel (we are root).
    assert_eq!(in_child(netlink), 0);
    assert_eq!(in_child(packet), 0);
    // Allowed families still work.
    assert_eq!(
        with_filter(|| socket_errno(libc::AF_UNIX, libc::SOCK_STREAM, 0)),
        0
    );
    assert_eq!(
        with_filter(|| socket_errno(libc::AF_INET, libc::SOCK_STREAM, 0)),
        0
    );
    assert_eq!(
        with_filter(|| socket_errno(libc::AF_INET6, libc::SOCK_DGRAM, 0)),
        0
    );
    let pair = || {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for two descriptors.
        errno_of(
            unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, fds.as_mut_ptr()) } as _,
        )
    };
    assert_eq!(with_filter(pair), 0);
}

/// Opens a pseudo-terminal pair; returns the secondary side.
fn open_pty() -> libc::c_int {
    // SAFETY: plain libc pty calls on descriptors we own.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        if m < 0 || libc::grantpt(m) != 0 || libc::unlockpt(m) != 0 {
            return -1;
        }
        let name = libc::ptsname(m);
        if name.is_null() {
            return -1;
        }
        libc::open(name, libc::O_RDWR | libc::O_NOCTTY)
    }
}

#[test]
fn ioctl_tiocsti_is_eperm_other_ioctls_work() {
    let sti = |cmd: u64| {
        move || {
            let fd = open_pty();
            if fd < 0 {
                return SETUP_FAILED;
            }
            program();
            install();
            let c: u8 = b'x';
            // SAFETY: TIOCSTI reads one byte from the pointer.
            errno_of(unsafe { libc::syscall(libc::SYS_ioctl, fd, cmd, &c as *const u8) })
        }
    };
    assert_eq!(in_child(sti(libc::TIOCSTI)), libc::EPERM);
    // The kernel truncates the command to 32 bits; so does the filter's comparison.
    assert_eq!(in_child(sti((1 << 32) | libc::TIOCSTI)), libc::EPERM);
    // Control: as root, TIOCSTI on a pty we own works without the filter.
    assert_eq!(
        in_child(|| {
            let fd = open_pty();
            let c: u8 = b'x';
            // SAFETY: as above.
            errno_of(unsafe { libc::ioctl(fd, libc::TIOCSTI, &c as *const u8) } as _)
        }),
        0
    );
    let got = in_child(|| {
        let fd = open_pty();
        if fd < 0 {
            return SETUP_FAILED;
        }
        program();
        install();
        // SAFETY: `t` is a writable termios and `w` a writable winsize.
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(fd, &mut t) != 0 {
                return 100 + errno();
            }
            let mut w: libc::winsize = std::mem::zeroed();
            if libc::ioctl(fd, libc::TIOCGWINSZ, &mut w) != 0 {
                return 150 + errno();
            }
        }
        0
    });
    assert_eq!(got, 0);
}

#[test]
fn unknown_and_unlisted_syscalls_fail_with_eperm() {
    let unknown = || {
        // SAFETY: syscall 1000 does not exist (ENOSYS without the filter).
        let rc = unsafe { libc::syscall(1000) };
        errno_of(rc)
    };
    assert_eq!(with_filter(unknown), libc::EPERM);
    let dcookie = nr("lookup_dcookie");
    // SAFETY: lookup_dcookie with a NULL buffer (removed from recent kernels: ENOSYS).
    let got = with_filter(|| errno_of(unsafe { libc::syscall(dcookie, 0u64, 0usize, 0usize) }));
    assert_eq!(got, libc::EPERM);
    // An unlisted but harmless syscall: get_robust_list.
    let mut head = 0usize;
    let mut len = 0usize;
    let got = with_filter(|| {
        // SAFETY: valid out-pointers.
        errno_of(unsafe {
            libc::syscall(
                libc::SYS_get_robust_list,
                0,
                &mut head as *mut usize,
                &mut len,
            )
        })
    });
    assert_eq!(got, libc::EPERM);
}

#[test]
fn mknod_fifo_only_and_personality_query_only() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = CString::new(
        dir.path()
            .join("fifo")
            .into_os_string()
            .into_encoded_bytes(),
    )
    .unwrap();
    let dev = CString::new(dir.path().join("dev").into_os_string().into_encoded_bytes()).unwrap();
    let fifo_ptr = fifo.as_ptr();
    let dev_ptr = dev.as_ptr();
    // SAFETY: valid C strings.
    let got = with_filter(|| errno_of(unsafe { libc::mkfifo(fifo_ptr, 0o600) } as _));
    assert_eq!(got, 0);
    // /dev/null's device number, as a character device: root could, the filter refuses.
    let got = with_filter(|| {
        // SAFETY: valid C string.
        errno_of(unsafe { libc::mknod(dev_ptr, libc::S_IFCHR | 0o600, libc::makedev(1, 3)) } as _)
    });
    assert_eq!(got, libc::EPERM);

    let persona = |p: libc::c_ulong| {
        move || {
            // SAFETY: personality only changes the persona of this (child) process.
            let rc = unsafe { libc::personality(p) };
            errno_of(rc as _)
        }
    };
    assert_eq!(with_filter(persona(0xffff_ffff)), 0, "query");
    assert_eq!(with_filter(persona(0)), 0, "PER_LINUX");
    assert_eq!(
        with_filter(persona(0x0040000)),
        libc::EPERM,
        "ADDR_NO_RANDOMIZE"
    );
}

#[test]
fn every_denied_syscall_is_refused() {
    let p = seccomp::policy();
    let numbers: Vec<(String, libc::c_long)> = p
        .denied
        .iter()
        .filter(|d| d.applies_here())
        .map(|d| (d.syscall.clone(), nr(&d.syscall)))
        .collect();
    let run = |filtered: bool| -> Vec<(libc::c_long, i32)> {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let nums: Vec<libc::c_long> = numbers.iter().map(|(_, n)| *n).collect();
        let code = in_child(|| {
            // SAFETY: closing the read end in the child.
            unsafe { libc::close(fds[0]) };
            program();
            enter_scratch_namespaces();
            // SAFETY: no controlling terminal, so vhangup could not hang up the test's terminal.
            unsafe { libc::setsid() };
            if filtered {
                install();
            }
            for &n in &nums {
                // All arguments -1: invalid pointers, flags and descriptors, so nothing could
                // happen even without the filter (and we are in scratch namespaces).
                // SAFETY: see above.
                let rc = unsafe { libc::syscall(n, -1i64, -1i64, -1i64, -1i64, -1i64, -1i64) };
                let e = errno_of(rc);
                let rec = [n as i32, e];
                // SAFETY: writing 8 bytes from a local array to our pipe.
                unsafe { libc::write(fds[1], rec.as_ptr().cast(), 8) };
            }
            0
        });
        // SAFETY: closing our copy of the write end, then reading what the child wrote.
        unsafe { libc::close(fds[1]) };
        assert_eq!(code, 0);
        let mut out = Vec::new();
        let mut rec = [0i32; 2];
        // SAFETY: reading 8-byte records into a local array.
        while unsafe { libc::read(fds[0], rec.as_mut_ptr().cast(), 8) } == 8 {
            out.push((rec[0] as libc::c_long, rec[1]));
        }
        // SAFETY: closing the read end.
        unsafe { libc::close(fds[0]) };
        out
    };
    let filtered = run(true);
    assert_eq!(filtered.len(), numbers.len());
    let wrong: Vec<String> = filtered
        .iter()
        .zip(&numbers)
        .filter(|((_, e), _)| *e != libc::EPERM)
        .map(|((_, e), (name, _))| format!("{name}: errno {e}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "denied syscalls not refused with EPERM: {wrong:?}"
    );
    // The control run shows how many of those EPERMs only seccomp can explain.
    let control = run(false);
    let distinct = control.iter().filter(|(_, e)| *e != libc::EPERM).count();
    eprintln!(
        "{} denied syscalls refused with EPERM; without the filter {} of them answer another errno",
        numbers.len(),
        distinct
    );
    assert!(distinct * 2 > numbers.len());
}

// ---------------------------------------------------------------------------------------------
// Smoke tests: real programs under the filter

fn exec_under_filter(argv: &[&str]) -> i32 {
    let cargs: Vec<CString> = argv.iter().map(|a| CString::new(*a).unwrap()).collect();
    let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    with_filter(|| {
        // SAFETY: `ptrs` is a NULL-terminated array of valid C strings; environ is inherited.
        unsafe { libc::execv(ptrs[0], ptrs.as_ptr()) };
        100 + errno()
    })
}

const PYTHON_SMOKE: &str = r#"
import json, subprocess, threading, multiprocessing, asyncio, os, sys, math, socket, tempfile
async def amain():
    p = await asyncio.create_subprocess_exec("/bin/echo", "hi", stdout=asyncio.subprocess.PIPE)
    out, _ = await p.communicate()
    await asyncio.sleep(0.01)
    return out
pid = os.fork()
if pid == 0:
    os._exit(7)
_, st = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(st) == 7
box = []
t = threading.Thread(target=lambda: box.append(1)); t.start(); t.join()
assert box == [1]
assert subprocess.run(["/bin/echo", "ok"], capture_output=True).stdout == b"ok\n"
assert subprocess.run("echo $((2+3))", shell=True, capture_output=True).stdout == b"5\n"
assert asyncio.run(amain()) == b"hi\n"
for method in ("fork", "spawn", "forkserver"):
    with multiprocessing.get_context(method).Pool(2) as pool:
        assert pool.map(math.factorial, range(6)) == [1, 1, 2, 6, 24, 120]
lock = multiprocessing.Lock(); sem = multiprocessing.Semaphore(2)
with lock:
    sem.acquire(); sem.release()
q = multiprocessing.Queue(); q.put({"a": 1}); assert q.get() == {"a": 1}
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
c = socket.create_connection(s.getsockname()); c.close(); s.close()
with tempfile.TemporaryDirectory() as d:
    os.mkfifo(os.path.join(d, "f"))
    with open(os.path.join(d, "x"), "w") as f:
        json.dump({"ok": True}, f)
os.urandom(8)
"#;

#[test]
fn python_smoke_under_filter() {
    let code = exec_under_filter(&["/usr/bin/python3", "-I", "-c", PYTHON_SMOKE]);
    assert_eq!(code, 0, "python3 under the seccomp filter failed");
}

const BASH_SMOKE: &str = r#"
set -euo pipefail
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
cd "$d"
echo hello > f
x=$(tr a-z A-Z < f)
[ "$x" = HELLO ]
mkfifo p
(echo z > p) &
read -r y < p
[ "$y" = z ]
wait
ls -la > /dev/null
cp f g && mv g h && ln -s h s && readlink s > /dev/null && ln h hard
sort < f | uniq -c > /dev/null
stat f > /dev/null
du -s . > /dev/null
df . > /dev/null
date > /dev/null
nproc > /dev/null
id > /dev/null
sleep 0.01 &
wait
chmod 600 f
touch -d '2020-01-01' f
tar cf t.tar f && tar xf t.tar -O > /dev/null
git init -q r
cd r
echo x > a
git add a
git -c user.name=t -c user.email=t@t commit -qm init
git log --oneline | grep -q init
git status --short > /dev/null
"#;

#[test]
fn bash_coreutils_git_smoke_under_filter() {
    let code = exec_under_filter(&["/bin/bash", "-c", BASH_SMOKE]);
    assert_eq!(
        code, 0,
        "bash/coreutils/git under the seccomp filter failed"
    );
}

/// With `SANDLOT_TEST_PYTHON` pointing at an interpreter that has numpy, pandas, matplotlib and
/// IPython (e.g. a sandlot venv), runs a data-science workload under the filter.
#[test]
fn scientific_python_under_filter_if_available() {
    let Ok(python) = std::env::var("SANDLOT_TEST_PYTHON") else {
        skip("SANDLOT_TEST_PYTHON not set: no scientific stack to smoke-test");
        return;
    };
    let code = exec_under_filter(&[&python, "-c", SCIENTIFIC_SMOKE]);
    assert_eq!(code, 0, "scientific python under the seccomp filter failed");
}

const SCIENTIFIC_SMOKE: &str = r#"
import os, tempfile, subprocess, sys, multiprocessing as mp
import numpy as np, pandas as pd
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from IPython.core.interactiveshell import InteractiveShell
d = tempfile.mkdtemp(); os.chdir(d)
a = np.random.rand(300, 300); b = a @ a; np.linalg.svd(a[:50, :50])
df = pd.DataFrame({"x": np.arange(1000), "y": np.random.rand(1000)})
df.to_csv("d.csv"); pd.read_csv("d.csv").describe(); df.groupby(df.x % 7).y.mean()
fig, ax = plt.subplots(); ax.plot(df.x, df.y); fig.savefig("f.png"); fig.savefig("f.svg")
with mp.get_context("fork").Pool(2) as p:
    assert p.map(abs, [-1, -2]) == [1, 2]
subprocess.run([sys.executable, "-m", "pip", "--version"], check=True, stdout=subprocess.DEVNULL)
subprocess.run([sys.executable, "-m", "pip", "list"], check=True, stdout=subprocess.DEVNULL)
sh = InteractiveShell.instance()
r = sh.run_cell("import math\nx = math.sqrt(2)\nx")
assert r.success and abs(r.result - 2 ** 0.5) < 1e-12
"#;

/// The zygote's profile widens the sandbox's by exactly its `zygote` list, each entry taken out of
/// `denied`; everything else denied to sandboxes stays denied to zygotes.
#[test]
fn zygote_profile_adds_only_its_list() {
    let p = seccomp::policy();
    let extra: BTreeSet<&str> = p.zygote.iter().map(|a| a.syscall.as_str()).collect();
    assert_eq!(
        extra,
        BTreeSet::from([
            "mount",
            "move_mount",
            "mount_setattr",
            "sethostname",
            "unshare"
        ])
    );
    let denied: BTreeSet<&str> = p.denied.iter().map(|d| d.syscall.as_str()).collect();
    for name in &extra {
        assert!(denied.contains(name), "{name} must be denied to sandboxes");
    }
    for still in [
        "setns",
        "ptrace",
        "bpf",
        "io_uring_setup",
        "keyctl",
        "pivot_root",
        "open_tree",
    ] {
        assert!(
            !extra.contains(still),
            "{still} must stay denied to zygotes"
        );
    }
    let zygote = seccomp::build_program_for(seccomp::Profile::Zygote).expect("zygote program");
    assert!(zygote.len() <= seccomp::MAX_PROGRAM_LEN);
    assert_ne!(&zygote, program());
}

/// Under the unshare notifier, a call nobody supervises fails (`ENOSYS` once the listener is
/// closed), and a supervisor's refusal is the caller's errno; other syscalls pass through.
#[test]
fn unshare_notifier_hands_unshare_to_its_listener() {
    let code = in_child(|| {
        let listener = match seccomp::install_unshare_notifier() {
            Ok(l) => l,
            Err(_) => return SETUP_FAILED,
        };
        let raw = std::os::fd::AsRawFd::as_raw_fd(&listener);
        // Answer one notification with EPERM from a thread of this very process.
        let answered = std::thread::spawn(move || {
            // SAFETY: zeroed POD for the kernel to fill; ioctls on a listener we own.
            unsafe {
                let mut n: libc::seccomp_notif = std::mem::zeroed();
                if libc::ioctl(raw, libc::SECCOMP_IOCTL_NOTIF_RECV as _, &mut n) != 0 {
                    return false;
                }
                let mut r = libc::seccomp_notif_resp {
                    id: n.id,
                    val: 0,
                    error: -libc::EACCES,
                    flags: 0,
                };
                n.data.nr == libc::SYS_unshare as i32
                    && libc::ioctl(raw, libc::SECCOMP_IOCTL_NOTIF_SEND as _, &mut r) == 0
            }
        });
        // SAFETY: unshare with an integer flag; the supervisor refuses it.
        let first = unsafe { libc::unshare(libc::CLONE_NEWUTS) };
        let e1 = errno();
        if first == 0 || e1 != libc::EACCES || !answered.join().unwrap_or(false) {
            return 1;
        }
        drop(listener);
        // SAFETY: as above; nobody listens any more.
        let second = unsafe { libc::unshare(libc::CLONE_NEWUTS) };
        if second == 0 || errno() != libc::ENOSYS {
            return 2;
        }
        // SAFETY: getpid has no arguments; it is not unshare, so it passes.
        if unsafe { libc::getpid() } <= 0 {
            return 3;
        }
        0
    });
    assert_eq!(code, 0);
}
