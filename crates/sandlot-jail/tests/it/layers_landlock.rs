//! Real enforcement tests of the Landlock layer (`sandlot_jail::landlock`).
//!
//! Each case forks a child that restricts itself, attempts one operation and `_exit`s with the
//! errno it got (0: success); the parent asserts the exact value.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::common;

use common::{errno, errno_of, in_child, skip, wait_code, SETUP_FAILED};
use sandlot_jail::landlock::{self, LandlockOptions, LandlockStatus};

const UNEXPECTED_STATUS: i32 = 251;

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// What user code needs to run programs: read and execute.
const SYSTEM: &[&str] = &["/usr", "/bin", "/lib", "/lib64", "/etc", "/proc", "/dev"];

fn system_paths() -> Vec<&'static Path> {
    SYSTEM.iter().map(Path::new).collect()
}

/// Restricts the child to `rw` + the system paths; exits the child if that fails or is not
/// fully enforced.
fn restrict_or_exit(rw: &[&Path], opts: &LandlockOptions<'_>) {
    match landlock::restrict_with(rw, &system_paths(), opts) {
        Ok(LandlockStatus::FullyEnforced { .. }) => {}
        Ok(_) => {
            // SAFETY: exiting the forked child.
            unsafe { libc::_exit(UNEXPECTED_STATUS) }
        }
        Err(_) => {
            // SAFETY: exiting the forked child.
            unsafe { libc::_exit(SETUP_FAILED) }
        }
    }
}

fn open_errno(path: &CString, flags: libc::c_int) -> i32 {
    // SAFETY: valid C string; the descriptor is left to the child's exit.
    errno_of(unsafe { libc::open(path.as_ptr(), flags, 0o600) } as _)
}

#[test]
fn status_reports_the_kernel_abi() {
    let abi = landlock::kernel_abi();
    eprintln!("kernel Landlock ABI: {abi}");
    let code = in_child(|| {
        let dir = Path::new("/tmp");
        match landlock::restrict(&[dir], &system_paths()) {
            Ok(s) if s.abi() == abi && (abi == 0) != s.is_enforced() => {
                let full = matches!(s, LandlockStatus::FullyEnforced { .. });
                // ABI >= 6 has everything requested (fs rights of ABI 6 + scopes).
                if abi >= 6 && !full {
                    return 2;
                }
                0
            }
            Ok(_) => 1,
            Err(_) => SETUP_FAILED,
        }
    });
    assert_eq!(code, 0);
}

#[test]
fn write_outside_read_write_set_is_eacces() {
    let inside = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(inside.path().join("in.txt"), b"inside").unwrap();
    std::fs::write(outside.path().join("out.txt"), b"outside").unwrap();
    let inside_path = inside.path().to_path_buf();
    let new_outside = cpath(&outside.path().join("new.txt"));
    let existing_outside = cpath(&outside.path().join("out.txt"));
    let root_file = cpath(Path::new("/sandlot-landlock-test-should-not-exist"));

    let attempt = |path: &CString, flags: libc::c_int| {
        let inside_path = inside_path.clone();
        let path = path.clone();
        in_child(move || {
            restrict_or_exit(&[&inside_path], &LandlockOptions::default());
            open_errno(&path, flags)
        })
    };
    let create = libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC;
    assert_eq!(attempt(&new_outside, create), libc::EACCES);
    assert_eq!(
        attempt(&existing_outside, libc::O_WRONLY | libc::O_CLOEXEC),
        libc::EACCES
    );
    assert_eq!(
        attempt(&existing_outside, libc::O_RDONLY | libc::O_CLOEXEC),
        libc::EACCES
    );
    assert_eq!(attempt(&root_file, create), libc::EACCES);
    // Read-only system paths: readable, not writable.
    assert_eq!(
        attempt(&cpath(Path::new("/etc/hostname")), libc::O_RDONLY),
        0
    );
    assert_eq!(
        attempt(&cpath(Path::new("/etc/hostname")), libc::O_WRONLY),
        libc::EACCES
    );
    assert!(!outside.path().join("new.txt").exists());
    assert!(!Path::new("/sandlot-landlock-test-should-not-exist").exists());
}

#[test]
fn read_and_write_inside_work() {
    let inside = tempfile::tempdir().unwrap();
    std::fs::write(inside.path().join("in.txt"), b"inside").unwrap();
    let dir = inside.path().to_path_buf();
    let code = in_child(|| {
        restrict_or_exit(&[&dir], &LandlockOptions::default());
        let data = match std::fs::read(dir.join("in.txt")) {
            Ok(d) => d,
            Err(e) => return 100 + e.raw_os_error().unwrap_or(0),
        };
        if data != b"inside" {
            return 1;
        }
        if let Err(e) = std::fs::create_dir(dir.join("sub")) {
            return 150 + e.raw_os_error().unwrap_or(0);
        }
        if let Err(e) = std::fs::write(dir.join("sub/new.txt"), b"x") {
            return 200 + e.raw_os_error().unwrap_or(0);
        }
        match std::fs::rename(dir.join("sub/new.txt"), dir.join("moved.txt")) {
            Ok(()) => 0,
            Err(e) => 50 + e.raw_os_error().unwrap_or(0),
        }
    });
    assert_eq!(code, 0);
    assert!(inside.path().join("moved.txt").exists());
}

#[test]
fn exec_from_read_exec_paths_works_and_missing_paths_are_skipped() {
    let inside = tempfile::tempdir().unwrap();
    let dir = inside.path().to_path_buf();
    let code = in_child(|| {
        let missing = Path::new("/nonexistent/sandlot/path");
        let under_file = Path::new("/etc/hostname/not-a-dir");
        match landlock::restrict(&[&dir, missing, under_file], &system_paths()) {
            Ok(LandlockStatus::FullyEnforced { .. }) => {}
            Ok(_) => return UNEXPECTED_STATUS,
            Err(_) => return SETUP_FAILED,
        }
        let path = c"/bin/true";
        let argv = [path.as_ptr(), std::ptr::null()];
        let envp = [std::ptr::null::<libc::c_char>()];
        // SAFETY: NUL-terminated argv/envp arrays of valid C strings.
        unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
        100 + errno()
    });
    assert_eq!(code, 0);
}

#[test]
fn signals_outside_the_domain_are_eperm() {
    if landlock::kernel_abi() < 6 {
        skip("Landlock ABI < 6: signal scoping not available");
        return;
    }
    // A process outside the sandbox's Landlock domain.
    // SAFETY: the sleeper child only pauses until killed.
    let sleeper = unsafe { libc::fork() };
    if sleeper == 0 {
        loop {
            // SAFETY: waiting for a signal.
            unsafe { libc::pause() };
        }
    }
    assert!(sleeper > 0);
    let code = in_child(|| {
        restrict_or_exit(&[], &LandlockOptions::default());
        // SAFETY: signalling a process we know.
        let outside = errno_of(unsafe { libc::kill(sleeper, libc::SIGTERM) } as _);
        // SAFETY: as above; signal 0 is only a permission check.
        let parent = errno_of(unsafe { libc::kill(libc::getppid(), 0) } as _);
        // A process created inside the domain can be signalled.
        // SAFETY: the grandchild pauses until killed.
        let inner = unsafe { libc::fork() };
        if inner == 0 {
            loop {
                // SAFETY: waiting for a signal.
                unsafe { libc::pause() };
            }
        }
        // SAFETY: signalling our own child.
        let inside = errno_of(unsafe { libc::kill(inner, libc::SIGKILL) } as _);
        if inside == 0 {
            wait_code(inner);
        }
        match (outside, parent, inside) {
            (libc::EPERM, libc::EPERM, 0) => 0,
            (o, _, _) if o != libc::EPERM => 10,
            (_, p, _) if p != libc::EPERM => 20,
            _ => 30,
        }
    });
    // The sleeper survived the sandbox's attempt.
    // SAFETY: signal 0 checks the sleeper still exists; then we kill and reap it.
    let alive = unsafe { libc::kill(sleeper, 0) } == 0;
    // SAFETY: killing our own child.
    unsafe { libc::kill(sleeper, libc::SIGKILL) };
    wait_code(sleeper);
    assert_eq!(code, 0);
    assert!(alive);
}

/// Binds a listening abstract UNIX socket; returns (fd, address, address length).
fn abstract_listener(name: &[u8]) -> (libc::c_int, libc::sockaddr_un, libc::socklen_t) {
    // SAFETY: plain socket calls on a zeroed sockaddr_un we fill within bounds.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0);
        let mut addr: libc::sockaddr_un = std::mem::zeroed();
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        // sun_path[0] = 0: abstract namespace.
        for (i, b) in name.iter().enumerate() {
            addr.sun_path[i + 1] = *b as libc::c_char;
        }
        let len = (std::mem::size_of::<libc::sa_family_t>() + 1 + name.len()) as libc::socklen_t;
        assert_eq!(
            libc::bind(fd, (&addr as *const libc::sockaddr_un).cast(), len),
            0
        );
        assert_eq!(libc::listen(fd, 4), 0);
        (fd, addr, len)
    }
}

fn connect_errno(addr: &libc::sockaddr_un, len: libc::socklen_t) -> i32 {
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return SETUP_FAILED;
        }
        errno_of(libc::connect(fd, (addr as *const libc::sockaddr_un).cast(), len) as _)
    }
}

#[test]
fn abstract_unix_sockets_outside_the_domain_are_eperm() {
    if landlock::kernel_abi() < 6 {
        skip("Landlock ABI < 6: abstract socket scoping not available");
        return;
    }
    // SAFETY: getpid has no preconditions.
    let name = format!("sandlot-landlock-test-{}", unsafe { libc::getpid() });
    let (fd, addr, len) = abstract_listener(name.as_bytes());
    let restricted = in_child(|| {
        restrict_or_exit(&[], &LandlockOptions::default());
        connect_errno(&addr, len)
    });
    // Control: without Landlock the same connect works; with scoping off it works too.
    let unrestricted = in_child(|| connect_errno(&addr, len));
    let unscoped = in_child(|| {
        let opts = LandlockOptions {
            scope_abstract_unix_sockets: false,
            ..LandlockOptions::default()
        };
        restrict_or_exit(&[], &opts);
        connect_errno(&addr, len)
    });
    // SAFETY: closing our listener.
    unsafe { libc::close(fd) };
    assert_eq!(restricted, libc::EPERM);
    assert_eq!(unrestricted, 0);
    assert_eq!(unscoped, 0);
}

fn tcp_listener() -> (std::net::TcpListener, u16) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    (l, port)
}

fn tcp_connect_errno(port: u16) -> i32 {
    match std::net::TcpStream::connect(("127.0.0.1", port)) {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(SETUP_FAILED),
    }
}

#[test]
fn tcp_restriction_only_when_asked() {
    if landlock::kernel_abi() < 4 {
        skip("Landlock ABI < 4: TCP restriction not available");
        return;
    }
    let (_listener, port) = tcp_listener();
    // Default: network not handled by Landlock.
    let default = in_child(|| {
        restrict_or_exit(&[], &LandlockOptions::default());
        tcp_connect_errno(port)
    });
    assert_eq!(default, 0);
    // net: true without ports: connect refused.
    let denied = in_child(|| {
        let opts = LandlockOptions {
            net: true,
            ..LandlockOptions::default()
        };
        restrict_or_exit(&[], &opts);
        tcp_connect_errno(port)
    });
    assert_eq!(denied, libc::EACCES);
    // net: true with the port allowed.
    let ports = [port];
    let allowed = in_child(|| {
        let opts = LandlockOptions {
            net: true,
            tcp_connect_ports: &ports,
            ..LandlockOptions::default()
        };
        restrict_or_exit(&[], &opts);
        tcp_connect_errno(port)
    });
    assert_eq!(allowed, 0);
    // Binding is refused too unless the port is listed.
    let bind = in_child(|| {
        let opts = LandlockOptions {
            net: true,
            ..LandlockOptions::default()
        };
        restrict_or_exit(&[], &opts);
        match std::net::TcpListener::bind("127.0.0.1:0") {
            Ok(_) => 0,
            Err(e) => e.raw_os_error().unwrap_or(SETUP_FAILED),
        }
    });
    assert_eq!(bind, libc::EACCES);
}
