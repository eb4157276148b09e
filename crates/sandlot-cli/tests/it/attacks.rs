//! The attack suite: snippets an attacker controlling a sandbox would run, each run inside a real
//! sandbox of a real `sandlot serve` through the HTTP API, each asserting the exact outcome (the
//! errno name, exit status, signal or end state the snippet reports on an `ATTACK {json}` line)
//! and, where it matters, that the host, the server and a neighbour sandbox came out unaffected.
//!
//! Layout: one `#[test]` per category, each with its own server (a start costs about two
//! seconds), running a table of cases and custom checks through [`kit::Report`], which runs every
//! case and lists all that failed. Run with `--nocapture` to see each case's outcome.
//!
//! Cases named `FINDING: …` (and the `finding_*` tests) are regression tests for holes this suite
//! once found and that have since been fixed: each asserts the secure or documented outcome, and
//! all of them pass.
//!
//! Outcomes that depend on the kernel (a file one kernel lacks) accept each refusal a stock kernel
//! gives, through [`kit::any_of`]; time limits allow [`kit::SLACK`] past the deadline the server
//! enforces: the suite checks that limits hold, not how fast.
//!
//! Syscall numbers are x86_64's.

use crate::common;
mod kit;

use common::{alive, wait_until, TestServer};
use kit::{
    any_of, attack_line, bash, brief, ensure, environ_of, exec, exec_timed,
    expect_bash_session_ended, expect_eq, expect_restarted, health, masked_proc, procs_with_uid,
    py, sandbox_host_uid, token, HostCanary, Lang, Neighbour, Report, PRELUDE, SLACK,
};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::io::ErrorKind;
use std::net::TcpListener;
use std::time::{Duration, Instant};

/// Output kept per stream and execution (the server's `max_output_bytes`).
const OUTPUT_BUDGET: u64 = 1 << 20;

/// The documented environment allowlist of a sandbox (`sandbox_env` in the runtime).
const ALLOWED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "LC_ALL",
    "TERM",
    "SHELL",
    "VIRTUAL_ENV",
    "PYTHONPATH",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONUNBUFFERED",
    "MPLBACKEND",
    "MPLCONFIGDIR",
    "IPYTHONDIR",
    "XDG_CACHE_HOME",
    "PIP_NO_INPUT",
    "PIP_TARGET",
    // The egress proxy (inside the sandbox's own namespace) and the canary credentials.
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "http_proxy",
    "https_proxy",
    "NO_PROXY",
    "no_proxy",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
];

fn create_with_limits(server: &TestServer, limits: Value) -> String {
    let sb = server.create_sandbox_with(&json!({ "limits": limits }));
    sb["id"].as_str().unwrap().to_owned()
}

/// The errno a sandbox may get for a kernel file that is refused to it: ENOENT where this kernel
/// lacks the file (no module support, no sysrq), EACCES/EPERM/EROFS where it has it (root-owned,
/// and /proc/sys is not the sandbox's to write).
const REFUSED_KERNEL_FILE: &[&str] = &["ENOENT", "EACCES", "EPERM", "EROFS"];

/// Every entry under `dir`, by path relative to `dir`: its kind and, for a file, its bytes (for
/// a symlink, its target).
fn tree_contents(dir: &std::path::Path) -> BTreeMap<std::path::PathBuf, (&'static str, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = e.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let entry = if meta.is_dir() {
                stack.push(path.clone());
                ("dir", Vec::new())
            } else if meta.is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                ("symlink", target.into_os_string().into_encoded_bytes())
            } else if meta.is_file() {
                ("file", std::fs::read(&path).unwrap())
            } else {
                ("other", Vec::new())
            };
            out.insert(path.strip_prefix(dir).unwrap().to_path_buf(), entry);
        }
    }
    out
}

/// Python that lists the visible pids and checks they form one tree rooted at pid 1 (the
/// sandbox's own init, whose parent is outside the namespace and shows as 0).
const PROC_TREE: &str = r#"
def proc_tree():
    pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
    ppid = {}
    for p in pids:
        try:
            ppid[p] = int(open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[1])
        except OSError:
            pass
    roots = sorted(p for p, pp in ppid.items() if pp not in ppid)
    return pids, roots, ppid.get(1)
"#;

// =============================================================================================
// Reading host files and secrets.

#[test]
fn host_files_and_secrets() {
    // A secret in the server's environment must not reach code. It is given to this server
    // only, not set in this process: every suite shares the test process, and `set_var` would
    // race other tests' threads reading the environment (each `Command::spawn` does).
    let secret = format!("attack-secret-{}", token());
    let server = TestServer::start_with_env(&[("SANDLOT_ATTACK_SECRET", &secret)]);
    let canary = HostCanary::new();
    let neighbour = Neighbour::new(&server);
    let id = server.create_sandbox();
    let data_dir = server.data_dir().display().to_string();
    let repo = env!("CARGO_MANIFEST_DIR");
    let server_pid = server.pid();
    let canary_path = canary.path.display().to_string();
    let mut rep = Report::new("host files");

    let cases = vec![
        py(
            "read /etc/shadow",
            "report(open=op(lambda: open('/etc/shadow', 'rb').read()), stat=op(os.stat, '/etc/shadow'), \
             gshadow=op(os.stat, '/etc/gshadow'))",
            json!({"open": "ENOENT", "stat": "ENOENT", "gshadow": "ENOENT"}),
        ),
        py(
            "generated /etc/passwd has no host accounts",
            "names = [l.split(':')[0] for l in open('/etc/passwd')]\nreport(names=names)",
            json!({"names": ["root", "user", "nobody"]}),
        ),
        py(
            "list /root and its ssh key",
            // /root may exist only as the path down to the Python environment when that lives
            // under root's home (the default data dir): nothing of the host's /root is there.
            "def root_view():\n    try:\n        names = os.listdir('/root')\n    except OSError as e:\n        return _errno.errorcode[e.errno]\n    env = os.environ.get('VIRTUAL_ENV', '')\n    only_env = all(env.startswith('/root/' + n + '/') for n in names)\n    return 'ONLY_ENV_PATH' if only_env else names\nv = root_view()\nreport(listdir='ENOENT' if v in ('ENOENT', 'ONLY_ENV_PATH') else v, key=op(lambda: open('/root/.ssh/id_rsa').read()))",
            json!({"listdir": "ENOENT", "key": "ENOENT"}),
        ),
        py(
            "host /home",
            "open('/workspace/.same-probe', 'w').close()\nreport(home=os.listdir('/home'), user=os.path.samefile('/home/user', '/workspace'), \
             probe=os.path.exists('/home/user/.same-probe'), cloudsdk=op(os.listdir, '/home/cloudsdk'))",
            // Only E2B's home, which is the workspace itself (bound there).
            json!({"home": ["user"], "user": true, "probe": true, "cloudsdk": "ENOENT"}),
        ),
        // That no host path (the data dir, the env dir) appears anywhere inside, in mounts,
        // maps, the environment or files, is `tests/it/host_layout.rs`'s to check.
        py(
            "the server's data dir",
            &format!(
                "d = {data_dir:?}\nreport(listdir=op(os.listdir, d), store=op(os.stat, d + '/sandlot.db'), \
                 sandboxes=op(os.listdir, d + '/sandboxes'))"
            ),
            json!({"listdir": "ENOENT", "store": "ENOENT", "sandboxes": "ENOENT"}),
        ),
        py(
            "the host source tree",
            &format!("report(repo=op(os.listdir, {repo:?}), work_main=op(os.listdir, '/work/main'))"),
            json!({"repo": "ENOENT", "work_main": "ENOENT"}),
        ),
        py(
            "a host canary file by its host path",
            &format!("report(read=op(lambda: open({canary_path:?}).read()))"),
            json!({"read": "ENOENT"}),
        ),
        py(
            "host /proc/1/environ and the host process list",
            &format!(
                "{PROC_TREE}\npids, roots, init_ppid = proc_tree()\n\
                 report(environ=op(lambda: open('/proc/1/environ', 'rb').read()), roots=roots, init_ppid=init_ppid, \
                 server_visible=os.path.exists('/proc/{server_pid}'))"
            ),
            json!({"environ": "EACCES", "roots": [1], "init_ppid": 0, "server_visible": false}),
        ),
        py(
            "/sys",
            "report(sys=op(os.listdir, '/sys'), net=op(os.listdir, '/sys/class/net'), \
             cgroup=op(os.listdir, '/sys/fs/cgroup'))",
            json!({"sys": "ENOENT", "net": "ENOENT", "cgroup": "ENOENT"}),
        ),
        py(
            "kernel memory devices and files",
            "report(**{p: rd(p, 16) for p in \
             ['/dev/mem', '/dev/kmem', '/dev/port', '/proc/kcore', '/proc/kmsg', '/proc/kpagecount', '/proc/kpageflags']})",
            // /proc/kcore and /proc/kmsg are masked with /dev/null since issue 9 (they read
            // empty; kcore is absent on kernels without it); kpagecount/kpageflags are root's.
            json!({"/dev/mem": "ENOENT", "/dev/kmem": "ENOENT", "/dev/port": "ENOENT", "/proc/kcore": masked_proc("kcore"),
                   "/proc/kmsg": masked_proc("kmsg"), "/proc/kpagecount": "EACCES", "/proc/kpageflags": "EACCES"}),
        ),
        py(
            "kernel addresses in /proc/kallsyms",
            // Masked since issue 9: no line at all, so no address either.
            "lines = open('/proc/kallsyms').read().splitlines()\n\
             report(nonzero=sum(1 for l in lines if int(l.split()[0], 16) != 0), lines=len(lines))",
            json!({"nonzero": 0, "lines": 0}),
        ),
        py(
            "inherited descriptors",
            "fds = []\nfor f in sorted(os.listdir('/proc/self/fd'), key=int):\n    \
             try: fds.append(os.readlink('/proc/self/fd/' + f))\n    except OSError: pass\n\
             report(files=sorted(set(t for t in fds if t.startswith('/'))), sockets=sum(t.startswith('socket:') for t in fds))",
            json!({"files": ["/dev/null"], "sockets": 1}),
        ),
        bash(
            "bash: cat /etc/shadow",
            "cat /etc/shadow >/dev/null 2>&1; printf 'ATTACK {\"rc\": %d}\\n' $?",
            json!({"rc": 1}),
        ),
    ];
    rep.table(&server, &id, &cases);

    rep.check("server environment not inherited", || {
        let server_env = environ_of(server_pid);
        ensure(server_env.iter().any(|(k, v)| k == "SANDLOT_ATTACK_SECRET" && *v == secret), || {
            "the server process did not get the secret (test setup)".into()
        })?;
        // Names only: printing the values would print the sandbox's canary, which contains it.
        let code = format!(
            "import os, json\nprint('ATTACK ' + json.dumps({{k: {secret:?} in v for k, v in os.environ.items()}}))"
        );
        let r = exec(&server, &id, Lang::Py, &code, 30.0)?;
        let env = attack_line(&r).ok_or_else(|| brief(&r))?;
        let env = env.as_object().ok_or("environment is not an object")?;
        ensure(env.values().all(|v| v == &json!(false)), || "the secret is in a variable's value".into())?;
        let extra: Vec<&String> = env.keys().filter(|k| !ALLOWED_ENV.contains(&k.as_str())).collect();
        ensure(extra.is_empty(), || format!("variables outside the allowlist: {extra:?}"))?;
        let leaked: Vec<&String> = server_env
            .iter()
            .map(|(k, _)| k)
            .filter(|k| !ALLOWED_ENV.contains(&k.as_str()) && env.contains_key(*k))
            .collect();
        ensure(leaked.is_empty(), || format!("server variables visible in the sandbox: {leaked:?}"))?;
        ensure(!r["stdout"].as_str().unwrap_or("").contains(&secret), || "the secret leaked".into())?;
        let r = exec(
            &server,
            &id,
            Lang::Bash,
            "n=$(env | grep -c -e SANDLOT_ATTACK_SECRET -e CARGO_ -e RUST); printf 'ATTACK {\"n\": %d}\\n' \"$n\"",
            30.0,
        )?;
        expect_eq("server variables in the bash environment", attack_line(&r), Some(json!({"n": 0})))
    });

    rep.check("host canary intact", || canary.intact());
    rep.check("neighbour intact", || neighbour.intact(&server));
    rep.check("server healthy", || health(&server));
    rep.finish();
}

// =============================================================================================
// Writing outside the workspace.

#[test]
fn writes_outside_workspace() {
    let server = TestServer::start();
    let canary = HostCanary::new();
    let neighbour = Neighbour::new(&server);
    let id = server.create_sandbox();
    // The server's lib dir as installed, checked after the attacks. It must hold the driver the
    // "write /opt/sandlot" case aims at: should it move, this fails here instead of comparing
    // one missing file with another.
    let lib_dir = server.data_dir().join("lib");
    let lib_before = tree_contents(&lib_dir);
    let driver_py = std::path::Path::new("python/sandlot_runtime/driver.py");
    assert!(
        lib_before.contains_key(driver_py),
        "no {} in the server's lib dir {}: {:?}",
        driver_py.display(),
        lib_dir.display(),
        lib_before.keys().collect::<Vec<_>>()
    );
    let mut rep = Report::new("writes");

    let w = "def w(p, mode='w'):\n    with open(p, mode) as f:\n        f.write('pwned')\n";
    let cases = vec![
        py(
            "write /",
            &format!("{w}report(create=op(w, '/pwned'), mkdir=op(os.mkdir, '/pwned-dir'))"),
            json!({"create": "EROFS", "mkdir": "EROFS"}),
        ),
        py(
            "write /usr",
            &format!(
                "{w}report(create=op(w, '/usr/pwned'), bin=op(w, '/usr/bin/pwned'), \
                 python=op(w, '/usr/bin/python3', 'ab'), libc=op(w, '/usr/lib/x86_64-linux-gnu/libc.so.6', 'ab'))"
            ),
            // Existing files belong to host uids unmapped in the sandbox: EACCES before the read-only
            // mount is consulted; new names get EROFS.
            json!({"create": "EROFS", "bin": "EROFS", "python": "EACCES", "libc": "EACCES"}),
        ),
        py(
            "write /etc",
            &format!(
                "{w}report(create=op(w, '/etc/pwned'), passwd=op(w, '/etc/passwd', 'a'), hosts=op(w, '/etc/hosts', 'a'), \
                 preload=op(w, '/etc/ld.so.preload'), ssl=op(w, '/etc/ssl/pwned'))"
            ),
            json!({"create": "EROFS", "passwd": "EACCES", "hosts": "EACCES", "preload": "EROFS", "ssl": "EROFS"}),
        ),
        py(
            "write /opt/sandlot (the server's lib dir)",
            &format!(
                "{w}report(create=op(w, '/opt/sandlot/pwned'), \
                 driver=op(w, '/opt/sandlot/python/sandlot_runtime/driver.py', 'a'), \
                 jail=op(w, '/opt/sandlot/lib/libsandlot_jail.so', 'ab'))"
            ),
            // Since issue 9 /opt/sandlot is a read-only overlay (no upper layer): every write,
            // to an existing file too, is EROFS before ownership is looked at.
            json!({"create": "EROFS", "driver": "EROFS", "jail": "EROFS"}),
        ),
        py(
            "write the python env",
            &format!(
                "{w}import numpy\nreport(create=op(w, sys.prefix + '/pwned'), \
                 numpy=op(w, numpy.__file__, 'a'), site=op(w, os.path.dirname(numpy.__path__[0]) + '/pwned.pth'))"
            ),
            // The env is a read-only overlay at /opt/sandlot/env since issue 9: EROFS throughout.
            json!({"create": "EROFS", "numpy": "EROFS", "site": "EROFS"}),
        ),
        py(
            "write /proc/sys/kernel/*",
            &format!(
                "{w}report(hostname=op(w, '/proc/sys/kernel/hostname'), core_pattern=op(w, '/proc/sys/kernel/core_pattern'), \
                 modprobe=op(w, '/proc/sys/kernel/modprobe'), ns_max=op(w, '/proc/sys/user/max_user_namespaces'))"
            ),
            // kernel/modprobe exists only on kernels with module support. /proc/sys is bound
            // read-only since issue 9: EROFS before the owner (host root) is looked at.
            json!({"hostname": "EROFS", "core_pattern": "EROFS", "modprobe": any_of(REFUSED_KERNEL_FILE),
                   "ns_max": "EROFS"}),
        ),
        py(
            "write /sys",
            &format!(
                "{w}report(uevent_helper=op(w, '/sys/kernel/uevent_helper'), cgroup=op(w, '/sys/fs/cgroup/pids/tasks'))"
            ),
            json!({"uevent_helper": "ENOENT", "cgroup": "ENOENT"}),
        ),
        py(
            "chmod and chown of base files",
            "report(setuid_python=op(os.chmod, '/usr/bin/python3', 0o4777), setuid_bash=op(os.chmod, '/bin/bash', 0o4755), \
             chown_passwd=op(os.chown, '/etc/passwd', 1000, 1000), chmod_root=op(os.chmod, '/', 0o777), \
             chown_opt=op(os.chown, '/opt/sandlot', 1000, 1000))",
            json!({"setuid_python": "EROFS", "setuid_bash": "EROFS", "chown_passwd": "EROFS", "chmod_root": "EROFS",
                   "chown_opt": "EROFS"}),
        ),
        py(
            "rename, unlink, link, symlink, truncate, utime, xattr on base files",
            "report(rename=op(os.rename, '/etc/hosts', '/etc/hosts2'), unlink=op(os.unlink, '/etc/resolv.conf'), \
             link=op(os.link, '/etc/hosts', '/workspace/hosts'), symlink=op(os.symlink, '/workspace', '/etc/evil'), \
             truncate=op(os.truncate, '/etc/hosts', 0), utime=op(os.utime, '/etc/hosts', (0, 0)), \
             xattr=op(os.setxattr, '/etc/hosts', 'user.x', b'1'), rmdir=op(os.rmdir, '/home'))",
            json!({"rename": "EROFS", "unlink": "EROFS", "link": "EXDEV", "symlink": "EROFS", "truncate": "EACCES",
                   "utime": "EROFS", "xattr": "EROFS", "rmdir": "EROFS"}),
        ),
        py(
            "write /dev, /home, /var/tmp, /run",
            &format!(
                "{w}report(dev=op(w, '/dev/pwned'), home=op(w, '/home/pwned'), var_tmp=op(w, '/var/tmp/pwned'), \
                 run=op(w, '/run/pwned'))"
            ),
            json!({"dev": "EROFS", "home": "EROFS", "var_tmp": "EROFS", "run": "EROFS"}),
        ),
        bash(
            "bash: redirect and copy into the base",
            "echo pwned >> /etc/passwd 2>/dev/null; a=$?; touch /usr/pwned 2>/dev/null; b=$?; \
             cp /bin/sh /opt/sandlot/sh 2>/dev/null; c=$?; chmod u+s /bin/bash 2>/dev/null; d=$?\n\
             printf 'ATTACK {\"etc\": %d, \"usr\": %d, \"opt\": %d, \"chmod\": %d}\\n' $a $b $c $d",
            json!({"etc": 1, "usr": 1, "opt": 1, "chmod": 1}),
        ),
        py(
            "control: the writable mounts are writable",
            &format!("{w}report(ws=op(w, '/workspace/ok'), tmp=op(w, '/tmp/ok'), shm=op(w, '/dev/shm/ok'))"),
            json!({"ws": "OK", "tmp": "OK", "shm": "OK"}),
        ),
    ];
    rep.table(&server, &id, &cases);

    rep.check("host: lib dir and env dir unchanged", || {
        let lib_after = tree_contents(&lib_dir);
        let changed: Vec<_> = lib_before
            .keys()
            .chain(lib_after.keys())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .filter(|p| lib_before.get(*p) != lib_after.get(*p))
            .collect();
        ensure(changed.is_empty(), || {
            format!("files of the lib dir changed, appeared or went: {changed:?}")
        })?;
        for e in std::fs::read_dir(common::env_dir()).unwrap().flatten() {
            let p = e.path().join("pwned");
            ensure(!p.exists(), || {
                format!("{} exists on the host", p.display())
            })?;
        }
        Ok(())
    });
    rep.check("host canary intact", || canary.intact());
    rep.check("neighbour intact", || neighbour.intact(&server));
    rep.check("server healthy", || health(&server));
    rep.finish();
}

// =============================================================================================
// Device nodes, /proc/sys, sysrq, oom_score_adj.

#[test]
fn devices_and_proc() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let host_hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let mut rep = Report::new("devices and /proc");
    let cases = vec![
        py(
            "the minimal /dev",
            "report(dev=sorted(os.listdir('/dev')))",
            json!({"dev": ["fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout", "tty", "urandom", "zero"]}),
        ),
        py(
            "the sandbox's own devpts: no host terminal, a new one is the sandbox user's",
            "m, s = os.openpty()\nst = os.stat(os.ttyname(s))\n\
             report(pts=sorted(os.listdir('/dev/pts')), name=os.ttyname(s), uid=st.st_uid, mode=oct(st.st_mode & 0o777))\n\
             os.close(m); os.close(s)",
            json!({"pts": ["0", "ptmx"], "name": "/dev/pts/0", "uid": 1000, "mode": "0o600"}),
        ),
        py("open /dev/kvm", "report(kvm=op(lambda: open('/dev/kvm', 'rb')))", json!({"kvm": "ENOENT"})),
        py(
            "open disks",
            "report(**{d: op(lambda: open('/dev/' + d, 'rb')) for d in ['vda', 'sda', 'nvme0n1', 'loop0', 'loop-control', 'dm-0']})",
            json!({"vda": "ENOENT", "sda": "ENOENT", "nvme0n1": "ENOENT", "loop0": "ENOENT", "loop-control": "ENOENT",
                   "dm-0": "ENOENT"}),
        ),
        py(
            "create device nodes",
            "report(chr_mem=op(os.mknod, '/workspace/mem', 0o20600, os.makedev(1, 1)), \
             blk_vda=op(os.mknod, '/workspace/vda', 0o60600, os.makedev(254, 0)), \
             chr_kvm_shm=op(os.mknod, '/dev/shm/kvm', 0o20666, os.makedev(10, 232)), \
             chr_in_dev=op(os.mknod, '/dev/mem', 0o20600, os.makedev(1, 1)), \
             fifo=op(os.mkfifo, '/workspace/fifo'))",
            json!({"chr_mem": "EPERM", "blk_vda": "EPERM", "chr_kvm_shm": "EPERM", "chr_in_dev": "EPERM", "fifo": "OK"}),
        ),
        py(
            "/dev/null, /dev/zero, /dev/full, /dev/urandom work",
            "def wr(p):\n    with open(p, 'wb', buffering=0) as f: f.write(b'x')\n\
             report(null_w=op(wr, '/dev/null'), null_r=open('/dev/null', 'rb').read().hex(), zero=open('/dev/zero', 'rb').read(4).hex(), \
             full=op(wr, '/dev/full'), urandom=len(open('/dev/urandom', 'rb').read(16)))",
            json!({"null_w": "OK", "null_r": "", "zero": "00000000", "full": "ENOSPC", "urandom": 16}),
        ),
        py("open /dev/tty (no controlling terminal)", "report(tty=op(lambda: open('/dev/tty', 'rb')))", json!({"tty": "ENXIO"})),
        py(
            "writes under /proc/sys",
            "def w(p):\n    with open(p, 'w') as f: f.write('1')\n\
             report(**{p: op(w, '/proc/sys/' + p) for p in ['kernel/hostname', 'net/ipv4/ip_forward', 'vm/drop_caches', \
             'kernel/sysrq', 'vm/overcommit_memory', 'fs/suid_dumpable']})",
            // kernel/sysrq exists only on kernels built with magic SysRq. /proc/sys is bound
            // read-only since issue 9: EROFS before the owner (host root) is looked at.
            json!({"kernel/hostname": "EROFS", "net/ipv4/ip_forward": "EROFS", "vm/drop_caches": "EROFS",
                   "kernel/sysrq": any_of(REFUSED_KERNEL_FILE), "vm/overcommit_memory": "EROFS",
                   "fs/suid_dumpable": "EROFS"}),
        ),
        bash(
            "bash: echo into /proc/sys and /proc/sysrq-trigger",
            "echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; a=$?; echo b > /proc/sysrq-trigger 2>/dev/null; b=$?\n\
             printf 'ATTACK {\"drop_caches\": %d, \"sysrq\": %d}\\n' $a $b",
            json!({"drop_caches": 1, "sysrq": 1}),
        ),
        py(
            "/proc/sysrq-trigger",
            "def w(p):\n    with open(p, 'w') as f: f.write('b')\nreport(sysrq=op(w, '/proc/sysrq-trigger'))",
            // /proc/sysrq-trigger exists only on kernels built with magic SysRq.
            json!({"sysrq": any_of(REFUSED_KERNEL_FILE)}),
        ),
        py(
            "lower /proc/self/oom_score_adj",
            "def w(p, v):\n    with open(p, 'w') as f: f.write(v)\n\
             report(lower=op(w, '/proc/self/oom_score_adj', '-1000'), legacy=op(w, '/proc/self/oom_adj', '-17'), \
             now=open('/proc/self/oom_score_adj').read().strip())",
            json!({"lower": "EACCES", "legacy": "EACCES", "now": "0"}),
        ),
        py(
            "the init's memory and maps",
            "report(mem=op(lambda: open('/proc/1/mem', 'rb')), maps=op(lambda: open('/proc/1/maps').read()), \
             root=op(os.listdir, '/proc/1/root'), attr=op(lambda: open('/proc/self/attr/current', 'w').write('x')))",
            json!({"mem": "EACCES", "maps": "EACCES", "root": "EACCES", "attr": "EACCES"}),
        ),
    ];
    rep.table(&server, &id, &cases);
    rep.check("host hostname unchanged", || {
        expect_eq(
            "hostname",
            std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap(),
            host_hostname.clone(),
        )
    });
    rep.check("server healthy", || health(&server));
    rep.finish();
}

// =============================================================================================
// Network egress.

#[test]
fn network_egress() {
    let server = TestServer::start();
    let neighbour = Neighbour::new(&server);
    let id = server.create_sandbox();
    let server_port: u16 = server
        .url()
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .parse()
        .unwrap();
    // A service on the host's loopback the sandbox must not reach.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let host_port = listener.local_addr().unwrap().port();
    let mut rep = Report::new("network");

    let conn = "def conn(addr, fam=socket.AF_INET):\n    s = socket.socket(fam, socket.SOCK_STREAM)\n    s.settimeout(3)\n    \
                try:\n        s.connect(addr)\n    finally:\n        s.close()\n";
    let cases = vec![
        py(
            "TCP to 1.1.1.1:80",
            &format!("{conn}report(r=op(conn, ('1.1.1.1', 80)))"),
            json!({"r": "ENETUNREACH"}),
        ),
        py(
            "TCP to private addresses",
            &format!(
                "{conn}report(ten=op(conn, ('10.0.0.1', 80)), one92=op(conn, ('192.168.1.1', 80)), \
                 one72=op(conn, ('172.16.0.1', 443)), gateway=op(conn, ('10.0.2.2', 22)))"
            ),
            json!({"ten": "ENETUNREACH", "one92": "ENETUNREACH", "one72": "ENETUNREACH", "gateway": "ENETUNREACH"}),
        ),
        py(
            "TCP to the cloud metadata service",
            &format!("{conn}report(r=op(conn, ('169.254.169.254', 80)))"),
            json!({"r": "ENETUNREACH"}),
        ),
        py(
            "TCP over IPv6",
            &format!("{conn}report(r=op(conn, ('2606:4700:4700::1111', 80), socket.AF_INET6))"),
            json!({"r": "ENETUNREACH"}),
        ),
        py(
            "UDP send",
            "def udp(addr):\n    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n    try:\n        s.sendto(b'x', addr)\n    \
             finally:\n        s.close()\nreport(dns=op(udp, ('8.8.8.8', 53)), private=op(udp, ('192.168.1.1', 9)))",
            json!({"dns": "ENETUNREACH", "private": "ENETUNREACH"}),
        ),
        py(
            "DNS resolution of any name",
            "def resolve(n):\n    try:\n        socket.getaddrinfo(n, 80)\n        return 'resolved'\n    \
             except socket.gaierror as e:\n        return e.errno\n\
             report(example=resolve('example.com'), local=socket.getaddrinfo('localhost', 80, socket.AF_INET)[0][4][0])",
            // EAI_AGAIN (-3): no resolver; only /etc/hosts names resolve.
            json!({"example": -3, "local": "127.0.0.1"}),
        ),
        py(
            "raw sockets",
            "report(raw4=op(socket.socket, socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP), \
             raw6=op(socket.socket, socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6), \
             raw_tcp=op(socket.socket, socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP), \
             ping=op(socket.socket, socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP))",
            json!({"raw4": "EPERM", "raw6": "EPERM", "raw_tcp": "EPERM", "ping": "EACCES"}),
        ),
        py(
            "AF_PACKET, AF_NETLINK and other families",
            "report(packet=op(socket.socket, socket.AF_PACKET, socket.SOCK_RAW, 0), \
             netlink=op(socket.socket, socket.AF_NETLINK, socket.SOCK_RAW, 0), \
             vsock=op(socket.socket, 40, socket.SOCK_STREAM, 0), alg=op(socket.socket, 38, socket.SOCK_SEQPACKET, 0), \
             pair_inet=op(socket.socketpair, socket.AF_INET))",
            json!({"packet": "EAFNOSUPPORT", "netlink": "EAFNOSUPPORT", "vsock": "EAFNOSUPPORT", "alg": "EAFNOSUPPORT",
                   "pair_inet": "EAFNOSUPPORT"}),
        ),
        py(
            "interfaces and routes",
            "report(ifaces=[l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:]], \
             routes=open('/proc/net/route').read().splitlines()[1:])",
            json!({"ifaces": ["lo"], "routes": []}),
        ),
        py(
            "sandlot's own port on 127.0.0.1",
            &format!("{conn}report(v4=op(conn, ('127.0.0.1', {server_port})), v6=op(conn, ('::1', {server_port}), socket.AF_INET6))"),
            json!({"v4": "ECONNREFUSED", "v6": "ECONNREFUSED"}),
        ),
        py(
            "a host loopback service",
            &format!("{conn}report(r=op(conn, ('127.0.0.1', {host_port})))"),
            json!({"r": "ECONNREFUSED"}),
        ),
        bash(
            "bash: /dev/tcp to the internet and the host service",
            &format!(
                "(exec 3<>/dev/tcp/1.1.1.1/80) 2>/dev/null; a=$?; (exec 3<>/dev/tcp/127.0.0.1/{host_port}) 2>/dev/null; b=$?\n\
                 printf 'ATTACK {{\"internet\": %d, \"host\": %d}}\\n' $a $b"
            ),
            json!({"internet": 1, "host": 1}),
        ),
        bash(
            "bash: ip link add",
            "ip link add pwn0 type dummy >/dev/null 2>&1; a=$?; ip addr add 10.9.9.9/24 dev lo >/dev/null 2>&1; b=$?\n\
             printf 'ATTACK {\"link\": %d, \"addr\": %d}\\n' $a $b",
            json!({"link": 1, "addr": 1}),
        ),
    ];
    rep.table(&server, &id, &cases);
    rep.check("the host listener saw no connection", || {
        match listener.accept() {
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(()),
            Ok((_, peer)) => Err(format!(
                "the host listener accepted a connection from {peer}"
            )),
            Err(e) => Err(format!("accept: {e}")),
        }
    });
    rep.check("neighbour intact", || neighbour.intact(&server));
    rep.check("server healthy", || health(&server));
    rep.finish();
}

// =============================================================================================
// Dangerous syscalls (seccomp: EPERM by default, clone3 ENOSYS).

#[test]
fn dangerous_syscalls() {
    let server = TestServer::start();
    let neighbour = Neighbour::new(&server);
    let id = server.create_sandbox();
    let host_hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let mut rep = Report::new("syscalls");
    let eperm = || json!({"r": "EPERM"});
    // A sibling process to aim at.
    let sibling = "child = subprocess.Popen(['sleep', '100'])\ntime.sleep(0.1)\n";
    let iov = "buf = _ct.create_string_buffer(16)\n\
               class iovec(_ct.Structure): _fields_ = [('b', _ct.c_void_p), ('l', _ct.c_size_t)]\n\
               l = iovec(_ct.cast(buf, _ct.c_void_p), 16)\nrv = iovec(0x400000, 16)\n\
               lp, rp = _ct.c_void_p(_ct.addressof(l)), _ct.c_void_p(_ct.addressof(rv))\n";
    // clone(2) with namespace flags; a child that somehow appears exits at once.
    let clone = |flags: &str| {
        format!(
            "r = _libc.syscall(_ct.c_long(56), _ct.c_long({flags} | 17), _ct.c_long(0), _ct.c_long(0), _ct.c_long(0), _ct.c_long(0))\n\
             if r == 0:\n    os._exit(0)\nif r > 0:\n    os.waitpid(r, 0)\n\
             report(r=en(_ct.get_errno()) if r < 0 else 'CLONED')"
        )
    };
    let cases = vec![
        py("mount(2) a tmpfs", "report(r=sc(165, b'none', b'/workspace', b'tmpfs', 0, None))", eperm()),
        py("mount(2) remount / read-write", "report(r=sc(165, None, b'/', None, 0x20 | 0x1000, None))", eperm()),
        py("umount2(/proc)", "report(r=sc(166, b'/proc', 2))", eperm()),
        py("fsopen", "report(r=sc(430, b'tmpfs', 0))", eperm()),
        py("open_tree", "report(r=sc(428, -100, b'/workspace', 1))", eperm()),
        py("move_mount", "report(r=sc(429, -100, b'/workspace', -100, b'/tmp', 0))", eperm()),
        py(
            "fsconfig, fsmount, fspick, mount_setattr",
            "report(fsconfig=sc(431, 3, 6, None, None, 0), fsmount=sc(432, 3, 0, 0), fspick=sc(433, -100, b'/', 0), \
             mount_setattr=sc(442, -100, b'/', 0, None, 0))",
            json!({"fsconfig": "EPERM", "fsmount": "EPERM", "fspick": "EPERM", "mount_setattr": "EPERM"}),
        ),
        py("unshare(CLONE_NEWUSER)", "report(r=sc(272, 0x10000000))", eperm()),
        py("unshare(CLONE_NEWNS)", "report(r=sc(272, 0x00020000))", eperm()),
        py(
            "unshare(CLONE_NEWNET|NEWPID|NEWIPC|NEWUTS|NEWCGROUP)",
            "report(net=sc(272, 0x40000000), pid=sc(272, 0x20000000), ipc=sc(272, 0x08000000), uts=sc(272, 0x04000000), \
             cgroup=sc(272, 0x02000000))",
            json!({"net": "EPERM", "pid": "EPERM", "ipc": "EPERM", "uts": "EPERM", "cgroup": "EPERM"}),
        ),
        py(
            "setns into the init's namespaces",
            "fd = os.open('/proc/self/ns/net', os.O_RDONLY) if os.access('/proc/self/ns/net', os.R_OK) else -1\n\
             report(r=sc(308, max(fd, 0), 0), user=sc(308, max(fd, 0), 0x10000000))",
            json!({"r": "EPERM", "user": "EPERM"}),
        ),
        py("clone(CLONE_NEWUSER)", &clone("0x10000000"), eperm()),
        py("clone(CLONE_NEWNS|CLONE_NEWPID)", &clone("0x00020000 | 0x20000000"), eperm()),
        py(
            "clone3 answers ENOSYS, fork still works",
            "r = sc(435, None, 88)\npid = os.fork()\nif pid == 0:\n    os._exit(7)\n\
             report(clone3=r, fork_status=os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))",
            json!({"clone3": "ENOSYS", "fork_status": 7}),
        ),
        py("ptrace(PTRACE_TRACEME)", "report(r=sc(101, 0, 0, 0, 0))", eperm()),
        py(
            "ptrace(PTRACE_ATTACH/SEIZE) of a sibling",
            &format!("{sibling}r = dict(attach=sc(101, 16, child.pid, 0, 0), seize=sc(101, 0x4206, child.pid, 0, 0))\n\
                      child.kill(); child.wait()\nreport(**r)"),
            json!({"attach": "EPERM", "seize": "EPERM"}),
        ),
        py(
            "process_vm_readv/writev of a sibling",
            &format!("{sibling}{iov}r = dict(readv=sc(310, child.pid, lp, 1, rp, 1, 0), writev=sc(311, child.pid, lp, 1, rp, 1, 0))\n\
                      child.kill(); child.wait()\nreport(**r)"),
            json!({"readv": "EPERM", "writev": "EPERM"}),
        ),
        py(
            "bpf(BPF_MAP_CREATE) and bpf(BPF_PROG_LOAD)",
            "attr = _ct.create_string_buffer(128)\nstruct.pack_into('IIII', attr, 0, 2, 4, 8, 16)\n\
             report(map=sc(321, 0, attr, 128), prog=sc(321, 5, attr, 128))",
            json!({"map": "EPERM", "prog": "EPERM"}),
        ),
        py(
            "perf_event_open",
            "attr = _ct.create_string_buffer(128)\nstruct.pack_into('II', attr, 0, 1, 128)\n\
             report(r=sc(298, attr, 0, -1, -1, 0))",
            eperm(),
        ),
        py(
            "keyctl, add_key, request_key",
            "report(keyctl=sc(250, 0, -3, 1), add_key=sc(248, b'user', b'x', b'secret', 6, -3), \
             request_key=sc(249, b'user', b'x', None, -3))",
            json!({"keyctl": "EPERM", "add_key": "EPERM", "request_key": "EPERM"}),
        ),
        py("userfaultfd", "report(r=sc(323, 0))", eperm()),
        py(
            "io_uring_setup, io_uring_enter, io_uring_register",
            "params = _ct.create_string_buffer(120)\nreport(setup=sc(425, 8, params), enter=sc(426, 0, 1, 0, 0, None, 0), \
             register=sc(427, 0, 0, None, 0))",
            json!({"setup": "EPERM", "enter": "EPERM", "register": "EPERM"}),
        ),
        py(
            "open_by_handle_at and name_to_handle_at",
            "h = _ct.create_string_buffer(136)\nstruct.pack_into('Ii', h, 0, 128, 1)\nmid = _ct.c_int(0)\n\
             report(open=sc(304, -100, h, 0), name=sc(303, -100, b'/etc/hosts', h, _ct.byref(mid), 0))",
            json!({"open": "EPERM", "name": "EPERM"}),
        ),
        py(
            "init_module, finit_module, delete_module",
            "fd = os.open('/dev/null', os.O_RDONLY)\n\
             report(init=sc(175, None, 0, b''), finit=sc(313, fd, b'', 0), delete=sc(176, b'ext4', 0x800))",
            json!({"init": "EPERM", "finit": "EPERM", "delete": "EPERM"}),
        ),
        py(
            "kexec_load and kexec_file_load",
            "report(load=sc(246, 0, 0, None, 0), file=sc(320, 0, 0, 0, None, 4))",
            json!({"load": "EPERM", "file": "EPERM"}),
        ),
        py(
            "reboot(LINUX_REBOOT_CMD_CAD_OFF)",
            "report(r=sc(169, 0xfee1dead, 672274793, 0, None))",
            eperm(),
        ),
        py(
            "swapon and swapoff",
            "open('/workspace/swap', 'wb').write(b'\\0' * 65536)\nreport(on=sc(167, b'/workspace/swap', 0), off=sc(168, b'/workspace/swap'))",
            json!({"on": "EPERM", "off": "EPERM"}),
        ),
        py("chroot", "os.makedirs('/workspace/jail', exist_ok=True)\nreport(r=sc(161, b'/workspace/jail'))", eperm()),
        py(
            "pivot_root",
            "os.makedirs('/workspace/new/old', exist_ok=True)\nreport(r=sc(155, b'/workspace/new', b'/workspace/new/old'))",
            eperm(),
        ),
        py(
            "mknod(2)/mknodat(2) of a device, raw",
            "report(chr=sc(133, b'/workspace/null2', 0o20666, os.makedev(1, 3)), blk=sc(259, -100, b'/workspace/vda', 0o60600, \
             os.makedev(254, 0)), sock=sc(133, b'/workspace/sock', 0o140666, 0))",
            json!({"chr": "EPERM", "blk": "EPERM", "sock": "EPERM"}),
        ),
        py(
            "iopl and ioperm",
            "report(iopl=sc(172, 3), ioperm=sc(173, 0x80, 1, 1))",
            json!({"iopl": "EPERM", "ioperm": "EPERM"}),
        ),
        py(
            "personality with odd values",
            "report(read_implies_exec=sc(135, 0x0400000), no_randomize=sc(135, 0x0040000), linux32=sc(135, 0x0008), \
             query=sc(135, 0xffffffff))",
            json!({"read_implies_exec": "EPERM", "no_randomize": "EPERM", "linux32": "EPERM", "query": "OK"}),
        ),
        py(
            "settimeofday, clock_settime, adjtimex",
            "tv = _ct.create_string_buffer(16)\nstruct.pack_into('qq', tv, 0, 1, 0)\ntx = _ct.create_string_buffer(256)\n\
             struct.pack_into('I', tx, 0, 0x0001)\n\
             report(settimeofday=sc(164, tv, None), clock_settime=sc(227, 0, tv), adjtimex=sc(159, tx))",
            json!({"settimeofday": "EPERM", "clock_settime": "EPERM", "adjtimex": "EPERM"}),
        ),
        py(
            "sethostname and setdomainname",
            "report(host=sc(170, b'pwned', 5), domain=sc(171, b'pwned', 5), now=socket.gethostname())",
            json!({"host": "EPERM", "domain": "EPERM", "now": "sandbox"}),
        ),
        py(
            "syslog, acct, quotactl, modify_ldt",
            "report(syslog=sc(103, 3, None, 0), acct=sc(163, b'/workspace/acct'), quotactl=sc(179, 0x800002, b'/', 0, None), \
             modify_ldt=sc(154, 0, None, 0))",
            json!({"syslog": "EPERM", "acct": "EPERM", "quotactl": "EPERM", "modify_ldt": "EPERM"}),
        ),
        py(
            "kcmp, pidfd_getfd, memfd_secret, fanotify_init",
            &format!("{sibling}fd = os.pidfd_open(child.pid)\n\
                      r = dict(kcmp=sc(312, os.getpid(), child.pid, 0, 0, 0), getfd=sc(438, fd, 0, 0), secret=sc(447, 0), \
                      fanotify=sc(300, 0, 0))\nchild.kill(); child.wait()\nreport(**r)"),
            json!({"kcmp": "EPERM", "getfd": "EPERM", "secret": "EPERM", "fanotify": "EPERM"}),
        ),
        py(
            "terminal injection ioctls (TIOCSTI, TIOCLINUX, TIOCSETD)",
            "c = _ct.c_char(b'x')\nreport(sti=sc(16, 0, 0x5412, _ct.byref(c)), linux=sc(16, 0, 0x541C, _ct.byref(c)), \
             setd=sc(16, 0, 0x5423, _ct.byref(_ct.c_int(0))))",
            json!({"sti": "EPERM", "linux": "EPERM", "setd": "EPERM"}),
        ),
        py(
            "NUMA policy syscalls",
            "report(set_mempolicy=sc(238, 0, None, 0), mbind=sc(237, 0, 4096, 0, None, 0, 0), migrate=sc(256, 1, 0, None, None))",
            json!({"set_mempolicy": "EPERM", "mbind": "EPERM", "migrate": "EPERM"}),
        ),
    ];
    rep.table(&server, &id, &cases);
    rep.check("host hostname unchanged", || {
        expect_eq(
            "hostname",
            std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap(),
            host_hostname.clone(),
        )
    });
    rep.check("neighbour intact", || neighbour.intact(&server));
    rep.check("server healthy", || health(&server));
    rep.finish();
}

// =============================================================================================
// Privilege: ids, capabilities, setuid binaries, nested namespaces.

#[test]
fn privilege() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let mut rep = Report::new("privilege");
    let cases = vec![
        py(
            "setuid(0) and friends",
            // uid 0 is not mapped in the sandbox's user namespace: the kernel answers EINVAL
            // before it would check CAP_SETUID.
            "report(setuid=op(os.setuid, 0), setgid=op(os.setgid, 0), setresuid=op(os.setresuid, 0, 0, 0), \
             setreuid=op(os.setreuid, 0, 0), other_uid=op(os.setuid, 1001), setgroups=op(os.setgroups, [0]), \
             ids=[os.getuid(), os.geteuid(), os.getgid()])",
            json!({"setuid": "EINVAL", "setgid": "EINVAL", "setresuid": "EINVAL", "setreuid": "EINVAL",
                   "other_uid": "EINVAL", "setgroups": "EPERM", "ids": [1000, 1000, 1000]}),
        ),
        py(
            "capabilities, no_new_privs, seccomp mode",
            "st = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())\n\
             report(**{k: st[k].strip() for k in ['CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp']})",
            json!({"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
                   "CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"}),
        ),
        py(
            "capset to raise every capability",
            "hdr = (_ct.c_uint32 * 2)(0x20080522, 0)\ndata = (_ct.c_uint32 * 6)(0xffffffff, 0xffffffff, 0xffffffff, \
             0xffffffff, 0xffffffff, 0xffffffff)\nreport(r=sc(126, hdr, data), nnp_off=sc(157, 38, 0, 0, 0, 0), \
             ambient=sc(157, 47, 2, 21, 0, 0))",
            json!({"r": "EPERM", "nnp_off": "EINVAL", "ambient": "EPERM"}),
        ),
        py(
            "a setuid-root binary runs without privilege",
            "p = subprocess.run(['/usr/bin/su', '--help'], env=dict(os.environ, LD_SHOW_AUXV='1'), capture_output=True, text=True)\n\
             aux = dict(l.split(':', 1) for l in p.stdout.splitlines() if l.startswith('AT_'))\n\
             report(setuid_bit=bool(os.stat('/usr/bin/su').st_mode & 0o4000), euid=aux['AT_EUID'].strip(), \
             secure=aux['AT_SECURE'].strip())",
            json!({"setuid_bit": true, "euid": "1000", "secure": "0"}),
        ),
        py(
            "su root",
            "p = subprocess.run(['/usr/bin/su', '-c', 'id -u', 'root'], capture_output=True, text=True, \
             stdin=subprocess.DEVNULL, timeout=20)\nreport(rc=p.returncode, stdout=p.stdout)",
            json!({"rc": 1, "stdout": ""}),
        ),
        py(
            "setuid passwd and mount",
            "run = lambda a: subprocess.run(a, capture_output=True, stdin=subprocess.DEVNULL, timeout=20).returncode\n\
             report(passwd=run(['/usr/bin/passwd', '-S', 'root']), mount=run(['/usr/bin/mount', '-t', 'tmpfs', 'none', '/tmp']), \
             umount=run(['/usr/bin/umount', '/proc']))",
            json!({"passwd": 1, "mount": 32, "umount": 32}),
        ),
        py(
            "raise scheduling and I/O priority",
            "report(nice=op(os.nice, -5), fifo=op(os.sched_setscheduler, 0, os.SCHED_FIFO, os.sched_param(10)), \
             ioprio_rt=sc(251, 1, 0, (1 << 13) | 0))",
            json!({"nice": "EPERM", "fifo": "EPERM", "ioprio_rt": "EPERM"}),
        ),
        bash(
            "bash: unshare -U (nested user namespace)",
            "unshare -U true 2>/dev/null; a=$?; unshare -r id -u 2>/dev/null; b=$?; unshare -m true 2>/dev/null; c=$?\n\
             printf 'ATTACK {\"user\": %d, \"root_map\": %d, \"mount\": %d}\\n' $a $b $c",
            json!({"user": 1, "root_map": 1, "mount": 1}),
        ),
        bash(
            "bash: nsenter into the init's namespaces",
            "nsenter -t 1 -a true 2>/dev/null; printf 'ATTACK {\"rc\": %d}\\n' $?",
            json!({"rc": 1}),
        ),
        py(
            "write own uid_map, gid_map, setgroups",
            "def w(p, v):\n    with open(p, 'w') as f: f.write(v)\n\
             report(uid_map=op(w, '/proc/self/uid_map', '0 1000 1'), gid_map=op(w, '/proc/self/gid_map', '0 1000 1'), \
             setgroups=op(w, '/proc/self/setgroups', 'allow'), map=open('/proc/self/uid_map').read().split()[0::2])",
            json!({"uid_map": "EACCES", "gid_map": "EACCES", "setgroups": "EACCES", "map": ["1000", "1"]}),
        ),
        py(
            "setuid and nosuid flags of the base mounts",
            "flags = {l.split()[4]: l.split()[5].split(',') for l in open('/proc/self/mountinfo')}\n\
             report(**{m: ('nosuid' in flags[m], 'ro' in flags[m]) for m in ['/', '/usr', '/opt/sandlot', '/etc/ssl']}, \
             **{'w' + m: ('nosuid' in flags[m], 'nodev' in flags[m]) for m in ['/workspace', '/tmp', '/dev/shm']})",
            json!({"/": [true, true], "/usr": [true, true], "/opt/sandlot": [true, true], "/etc/ssl": [true, true],
                   "w/workspace": [true, true], "w/tmp": [true, true], "w/dev/shm": [true, true]}),
        ),
    ];
    rep.table(&server, &id, &cases);
    rep.check("server healthy", || health(&server));
    rep.finish();
}

// =============================================================================================
// Signals to processes outside the sandbox.

#[test]
fn signals_outside() {
    let server = TestServer::start();
    let neighbour = Neighbour::new(&server);
    let id = server.create_sandbox();
    let server_pid = server.pid();
    // A host process the sandbox must not be able to signal.
    let mut sentinel = std::process::Command::new("sleep")
        .arg("300")
        .spawn()
        .unwrap();
    let sentinel_pid = sentinel.id();
    let sentinel_proc = kit::proc_of(sentinel_pid).unwrap();
    let mut rep = Report::new("signals");
    let cases = vec![
        py(
            "kill the server's host pid",
            &format!("report(probe=op(os.kill, {server_pid}, 0), kill=op(os.kill, {server_pid}, signal.SIGKILL))"),
            json!({"probe": "ESRCH", "kill": "ESRCH"}),
        ),
        py(
            "kill a host process by pid",
            &format!("report(kill=op(os.kill, {sentinel_pid}, signal.SIGKILL), group=op(os.killpg, {sentinel_pid}, signal.SIGKILL))"),
            json!({"kill": "ESRCH", "group": "ESRCH"}),
        ),
        py(
            "pidfd_open of the server",
            &format!("report(r=op(os.pidfd_open, {server_pid}))"),
            json!({"r": "ESRCH"}),
        ),
        py(
            "signal the sandbox's init (kill and pidfd)",
            "fd = os.pidfd_open(1)\nreport(kill=op(os.kill, 1, signal.SIGKILL), term=op(os.kill, 1, signal.SIGTERM), \
             pidfd=op(signal.pidfd_send_signal, fd, signal.SIGKILL), getfd=sc(438, fd, 0, 0))",
            json!({"kill": "EPERM", "term": "EPERM", "pidfd": "EPERM", "getfd": "EPERM"}),
        ),
        py(
            "kill(-1, SIGKILL) from the driver kills only the sandbox's own processes",
            "kids = [subprocess.Popen(['sleep', '100']) for _ in range(3)] + [subprocess.Popen(['setsid', 'sleep', '100'])]\n\
             time.sleep(0.2)\nr = op(os.kill, -1, signal.SIGKILL)\ncodes = [k.wait(timeout=10) for k in kids]\n\
             report(kill=r, codes=codes, me=os.getpid(), pids=sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))",
            json!({"kill": "OK", "codes": [-9, -9, -9, -9], "me": 2, "pids": [1, 2]}),
        ),
    ];
    rep.table(&server, &id, &cases);

    rep.check(
        "bash: kill -9 -1 ends only this sandbox's processes",
        || {
            let r = exec(&server, &id, Lang::Bash, "kill -9 -1", 30.0)?;
            expect_restarted(&r, "killed", "crashed")?;
            // Since issue 9 the sandbox restarts in place (same id) instead of answering 410.
            let again = exec(&server, &id, Lang::Py, "6 * 7", 30.0)?;
            expect_eq(
                "execute after the restart",
                again["result"]["text/plain"].as_str(),
                Some("42"),
            )
            .map_err(|e| format!("{e}: {}", brief(&again)))
        },
    );
    rep.check("host process survived", || {
        ensure(alive(sentinel_proc), || "the host sentinel died".into())
    });
    rep.check("neighbour intact", || neighbour.intact(&server));
    rep.check("the zygote still forks sandboxes", || {
        let id2 = server.create_sandbox();
        let r = server.execute(&id2, "6 * 7");
        expect_eq("result", r["result"]["text/plain"].as_str(), Some("42"))
    });
    rep.check("server healthy", || health(&server));
    let _ = sentinel.kill();
    let _ = sentinel.wait();
    rep.finish();
}

// =============================================================================================
// One sandbox against another.

#[test]
fn cross_sandbox() {
    let server = TestServer::start();
    let a = server.create_sandbox();
    let b = server.create_sandbox();
    let secret = format!("secret-of-a-{}", token());
    let mut rep = Report::new("cross-sandbox");

    // A: files in each writable mount, SysV IPC objects, a POSIX queue, an abstract unix socket
    // and TCP/unix listeners that hand out the secret.
    let setup = format!(
        r#"{PRELUDE}
import threading
SECRET = {secret:?}
for d in ['/workspace', '/tmp', '/dev/shm']:
    open(d + '/secret.txt', 'w').write(SECRET)
_libc.shmat.restype = _ct.c_void_p
shmid = _libc.shmget(0x5A4D, 4096, 0o1000 | 0o666)
_ct.memmove(_libc.shmat(shmid, None, 0), SECRET.encode(), len(SECRET))
msqid = _libc.msgget(0x5A4E, 0o1000 | 0o666)
semid = _libc.semget(0x5A4F, 1, 0o1000 | 0o666)
_rt = _ct.CDLL('librt.so.1', use_errno=True)
_ct.set_errno(0)
mq_err = 'OK' if _rt.mq_open(b'/sandlot-attack', os.O_CREAT | os.O_RDWR, 0o666, None) >= 0 else en(_ct.get_errno())
servers = []
for fam, addr in [(socket.AF_UNIX, '\0sandlot-attack-a'), (socket.AF_UNIX, '/tmp/a.sock'), (socket.AF_INET, ('127.0.0.1', 7777))]:
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.bind(addr)
    s.listen()
    servers.append(s)
def serve(s):
    while True:
        c, _ = s.accept()
        c.sendall(SECRET.encode())
        c.close()
for s in servers:
    threading.Thread(target=serve, args=(s,), daemon=True).start()
def fetch(fam, addr):
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect(addr)
    data = s.recv(100).decode()
    s.close()
    return data == SECRET
report(ipc=[shmid >= 0, msqid >= 0, semid >= 0], mq=mq_err,
       self_fetch=[fetch(socket.AF_UNIX, '\0sandlot-attack-a'), fetch(socket.AF_UNIX, '/tmp/a.sock'), fetch(socket.AF_INET, ('127.0.0.1', 7777))])
"#
    );
    rep.check("A sets up its secrets (control)", || {
        let r = exec(&server, &a, Lang::Py, &setup, 30.0)?;
        expect_eq(
            "setup",
            attack_line(&r),
            // POSIX queues cannot even be created in a sandbox (EACCES); B still looks for one.
            Some(json!({"ipc": [true, true, true], "mq": "EACCES", "self_fetch": [true, true, true]})),
        )
        .map_err(|e| format!("{e}: {}", brief(&r)))
    });
    let a_uid = sandbox_host_uid(&server, &a);
    let a_pids: Vec<u32> = procs_with_uid(a_uid).iter().map(|p| p.pid).collect();
    // B probes each of them except the ones that are also pids of its own namespace (a fresh
    // host hands out low pids too); there must be some, or the probe compares empty lists.
    assert!(!a_pids.is_empty(), "no host pid runs as A's uid {a_uid}");
    let cases = vec![
        py(
            "guess A's files at the same paths",
            "report(**{d: op(lambda: open(d + '/secret.txt').read()) for d in ['/workspace', '/tmp', '/dev/shm']})",
            json!({"/workspace": "ENOENT", "/tmp": "ENOENT", "/dev/shm": "ENOENT"}),
        ),
        py(
            "scan /proc/*/root and /proc/*/cwd",
            &format!(
                "{PROC_TREE}\nSECRET = {secret:?}\npids, roots, _ = proc_tree()\nhits = []\n\
                 for p in pids:\n    for sub in ['root/workspace/secret.txt', 'cwd/secret.txt', 'root/tmp/secret.txt', \
                 'root/dev/shm/secret.txt', 'environ', 'cmdline']:\n        try:\n            \
                 if SECRET in open(f'/proc/{{p}}/{{sub}}', errors='replace').read():\n                hits.append(f'{{p}}/{{sub}}')\n        \
                 except OSError:\n            pass\nreport(hits=hits, roots=roots)"
            ),
            json!({"hits": [], "roots": [1]}),
        ),
        py(
            "A's host pids through B's /proc",
            &format!(
                "own = {{int(p) for p in os.listdir('/proc') if p.isdigit()}}\n\
                 a = [p for p in {a_pids:?} if p not in own]\n\
                 report(probed=len(a) > 0, root=sorted({{op(os.listdir, f'/proc/{{p}}/root/workspace') for p in a}}), \
                 kill=sorted({{op(os.kill, p, 0) for p in a}}))"
            ),
            json!({"probed": true, "root": ["ENOENT"], "kill": ["ESRCH"]}),
        ),
        py(
            "A's abstract and TCP sockets",
            "def conn(fam, addr):\n    s = socket.socket(fam, socket.SOCK_STREAM)\n    s.settimeout(3)\n    try:\n        \
             s.connect(addr)\n    finally:\n        s.close()\n\
             report(abstract=op(conn, socket.AF_UNIX, '\\0sandlot-attack-a'), unix=op(conn, socket.AF_UNIX, '/tmp/a.sock'), \
             tcp=op(conn, socket.AF_INET, ('127.0.0.1', 7777)))",
            json!({"abstract": "ECONNREFUSED", "unix": "ENOENT", "tcp": "ECONNREFUSED"}),
        ),
        py(
            "A's SysV shared memory, queues, semaphores",
            "def ipc(fn, *a):\n    _ct.set_errno(0)\n    r = fn(*a)\n    return 'OK' if r >= 0 else en(_ct.get_errno())\n\
             report(shm=ipc(_libc.shmget, 0x5A4D, 0, 0), msg=ipc(_libc.msgget, 0x5A4E, 0), sem=ipc(_libc.semget, 0x5A4F, 0, 0), \
             listed=len(open('/proc/sysvipc/shm').read().splitlines()) - 1)",
            json!({"shm": "ENOENT", "msg": "ENOENT", "sem": "ENOENT", "listed": 0}),
        ),
        py(
            "A's POSIX message queue",
            "_rt = _ct.CDLL('librt.so.1', use_errno=True)\n_ct.set_errno(0)\nr = _rt.mq_open(b'/sandlot-attack', os.O_RDONLY)\n\
             report(r='OK' if r >= 0 else en(_ct.get_errno()))",
            json!({"r": "ENOENT"}),
        ),
    ];
    rep.table(&server, &b, &cases);
    rep.check(
        "B cannot read A's files through B's id in the files API",
        || {
            let (status, _, body) =
                server.get_bytes(&format!("/v1/sandboxes/{b}/files/secret.txt"));
            ensure(
                status == 404 && !String::from_utf8_lossy(&body).contains(&secret),
                || {
                    format!(
                        "B's files API answered {status}: {}",
                        String::from_utf8_lossy(&body)
                    )
                },
            )
        },
    );
    rep.check("A's secrets intact and its listeners still answer", || {
        let r = exec(
            &server,
            &a,
            Lang::Py,
            "report(files=[open(d + '/secret.txt').read() == SECRET for d in ['/workspace', '/tmp', '/dev/shm']], \
             fetch=[fetch(socket.AF_UNIX, '\\0sandlot-attack-a'), fetch(socket.AF_INET, ('127.0.0.1', 7777))])",
            30.0,
        )?;
        expect_eq("A", attack_line(&r), Some(json!({"files": [true, true, true], "fetch": [true, true]})))
            .map_err(|e| format!("{e}: {}", brief(&r)))
    });
    rep.check("server healthy", || health(&server));
    rep.finish();
}

// =============================================================================================
// Fork bomb.

#[test]
fn fork_bomb() {
    let server = TestServer::start();
    let neighbour = Neighbour::new(&server);
    const PIDS: u64 = 32;
    let id = create_with_limits(&server, json!({ "pids": PIDS }));
    let uid = sandbox_host_uid(&server, &id);
    let mut rep = Report::new("fork bomb");
    rep.table(
        &server,
        &id,
        &[py(
            "fork until the pids limit",
            &format!(
                "tasks = sum(len(os.listdir(f'/proc/{{p}}/task')) for p in os.listdir('/proc') if p.isdigit())\n\
                 pids, err = [], None\nwhile len(pids) < 1000:\n    try:\n        pid = os.fork()\n    except OSError as e:\n        \
                 err = en(e.errno)\n        break\n    if pid == 0:\n        time.sleep(60)\n        os._exit(0)\n    pids.append(pid)\n\
                 for p in pids:\n    os.kill(p, signal.SIGKILL)\nfor p in pids:\n    os.waitpid(p, 0)\n\
                 report(errno=err, at_limit=len(pids) + tasks == {PIDS})"
            ),
            json!({"errno": "EAGAIN", "at_limit": true}),
        )],
    );
    rep.check(
        "bash fork bomb: the host, server and neighbour keep working",
        || {
            let r = exec(
                &server,
                &id,
                Lang::Bash,
                "bomb() { bomb | bomb & }; bomb; echo started",
                30.0,
            )?;
            ensure(
                r["stdout"].as_str().unwrap_or("").contains("started"),
                || brief(&r),
            )?;
            std::thread::sleep(Duration::from_secs(3));
            health(&server)?;
            let n = procs_with_uid(uid).len() as u64;
            ensure(n <= PIDS, || {
                format!("{n} processes run as the sandbox's uid; the limit is {PIDS}")
            })?;
            ensure(n >= PIDS / 2, || {
                format!("only {n} processes: the bomb did not run")
            })?;
            neighbour.intact(&server)?;
            // The driver needs no new process to run Python: the bombed sandbox still answers.
            let r = exec(&server, &id, Lang::Py, "6 * 7", 30.0)?;
            expect_eq(
                "bombed sandbox answers",
                r["result"]["text/plain"].as_str(),
                Some("42"),
            )
        },
    );
    rep.check("deleting the bombed sandbox kills every process", || {
        let d = server.delete(&format!("/v1/sandboxes/{id}"));
        expect_eq("delete status", d.status, 204)?;
        ensure(
            wait_until(Duration::from_secs(30), || procs_with_uid(uid).is_empty()),
            || format!("processes of uid {uid} remain: {:?}", procs_with_uid(uid)),
        )
    });
    rep.check("neighbour intact", || neighbour.intact(&server));
    rep.check("server healthy", || health(&server));
    rep.finish();
}

// =============================================================================================
// Memory bomb.

#[test]
fn memory_bomb() {
    let server = TestServer::start();
    let neighbour = Neighbour::new(&server);
    let id = create_with_limits(&server, json!({ "memory_mb": 128 }));
    let mut rep = Report::new("memory bomb");
    rep.check("a child process over the limit is OOM-killed, the sandbox lives", || {
        let r = exec(
            &server,
            &id,
            Lang::Py,
            &format!("{PRELUDE}\np = subprocess.run([sys.executable, '-c', 'b = bytearray(512 * 2**20)'])\nreport(rc=p.returncode)"),
            60.0,
        )?;
        expect_eq("child", attack_line(&r), Some(json!({"rc": -9})))?;
        expect_eq("end_state", r["end_state"].as_str(), Some("oom"))?;
        expect_eq("sandbox_alive", r["sandbox_alive"].as_bool(), Some(true))?;
        let r = exec(&server, &id, Lang::Py, "6 * 7", 30.0)?;
        expect_eq("sandbox answers after", r["result"]["text/plain"].as_str(), Some("42"))
    });
    rep.check(
        "the driver itself over the limit: oom, restarted in place",
        || {
            exec(&server, &id, Lang::Py, "before_oom = 1", 30.0)?;
            let r = exec(
                &server,
                &id,
                Lang::Py,
                "hog = []\nwhile True:\n    hog.append(bytearray(16 * 2**20))",
                60.0,
            )?;
            // Since issue 9 the sandbox restarts in place (same id, files kept) instead of
            // answering 410 afterwards; the Python state is what is lost.
            expect_restarted(&r, "oom", "oom")?;
            expect_eq("error", r["error"]["name"].as_str(), Some("SandboxDied"))?;
            let again = exec(&server, &id, Lang::Py, "6 * 7", 30.0)?;
            expect_eq(
                "execute after",
                again["result"]["text/plain"].as_str(),
                Some("42"),
            )?;
            let lost = exec(&server, &id, Lang::Py, "before_oom", 30.0)?;
            expect_eq(
                "state after",
                lost["error"]["name"].as_str(),
                Some("NameError"),
            )
        },
    );
    rep.check("bash memory bomb", || {
        let id = create_with_limits(&server, json!({ "memory_mb": 128 }));
        let r = exec(
            &server,
            &id,
            Lang::Bash,
            "python3 -c 'b = bytearray(512 * 2**20)'; echo \"rc=$?\"",
            60.0,
        )?;
        expect_eq(
            "stdout",
            r["stdout"].as_str().map(str::trim),
            Some("rc=137"),
        )?;
        expect_eq("end_state", r["end_state"].as_str(), Some("oom"))?;
        expect_eq("sandbox_alive", r["sandbox_alive"].as_bool(), Some(true))
    });
    rep.check("neighbour intact", || neighbour.intact(&server));
    rep.check("server healthy", || health(&server));
    rep.finish();
}

// =============================================================================================
// Disk and inode fill.

#[test]
fn disk_and_inode_fill() {
    let server = TestServer::start();
    let neighbour = Neighbour::new(&server);
    // The warm pool (booted with the default limits) is full when the attacked sandbox is
    // created: its tmpfs sizes must still be its own limits' (a pooled sandbox once kept the
    // pool's 1 GiB /tmp, and filling it killed the sandbox with an OOM).
    kit::wait_for_pool(&server, 1);
    // disk_mb caps /workspace (a Btrfs qgroup limit since issue 9) and /tmp (tmpfs); /dev/shm
    // gets a quarter of memory_mb.
    let id = create_with_limits(&server, json!({ "disk_mb": 16, "memory_mb": 256 }));
    let mut rep = Report::new("disk fill");
    // /tmp and /dev/shm are tmpfs charged to the sandbox's memory: sized by its own limits,
    // filling them is ENOSPC, never an OOM of the whole sandbox.
    rep.table(
        &server,
        &id,
        &[py(
            "the tmpfs sizes follow the sandbox's limits",
            "def size(d):\n    st = os.statvfs(d)\n    return (st.f_blocks * st.f_frsize) >> 20\n\
             report(tmp=size('/tmp'), shm=size('/dev/shm'))",
            json!({"tmp": 16, "shm": 64}),
        )],
    );
    let fill = r#"
def fill(d, chunk_mb=1):
    os.makedirs(d, exist_ok=True)
    n, chunk = 0, b'\xaa' * (chunk_mb << 20)
    try:
        while n < 100000:
            with open(f'{d}/fill-{n}', 'wb') as f:
                f.write(chunk)
            n += 1
    except OSError as e:
        return [en(e.errno), n]
    return ['OK', n]
def inodes(d):
    os.makedirs(d, exist_ok=True)
    n = 0
    try:
        while n < 1000000:
            os.close(os.open(f'{d}/i{n}', os.O_CREAT | os.O_WRONLY, 0o600))
            n += 1
    except OSError as e:
        return [en(e.errno), n]
    return ['OK', n]
import shutil
"#;
    let cases = vec![
        py(
            "fill /workspace",
            &format!("{fill}\nr = fill('/workspace/f')\nshutil.rmtree('/workspace/f')\nreport(errno=r[0], within_cap=14 <= r[1] <= 16)"),
            // The workspace is a Btrfs subvolume with a qgroup limit since issue 9: EDQUOT.
            json!({"errno": "EDQUOT", "within_cap": true}),
        ),
        py(
            "fill /tmp",
            &format!("{fill}\nr = fill('/tmp/f')\nshutil.rmtree('/tmp/f')\nreport(errno=r[0], within_cap=14 <= r[1] <= 16)"),
            json!({"errno": "ENOSPC", "within_cap": true}),
        ),
        py(
            "fill /dev/shm",
            &format!("{fill}\nr = fill('/dev/shm/f')\nshutil.rmtree('/dev/shm/f')\nreport(errno=r[0], within_cap=60 <= r[1] <= 64)"),
            json!({"errno": "ENOSPC", "within_cap": true}),
        ),
        py(
            "fill /tmp and /dev/shm together",
            &format!("{fill}\nr = [fill('/tmp/f'), fill('/dev/shm/f')]\nshutil.rmtree('/tmp/f')\nshutil.rmtree('/dev/shm/f')\n\
                      report(tmp=r[0][0], shm=r[1][0], within_cap=14 <= r[0][1] <= 16 and 60 <= r[1][1] <= 64)"),
            json!({"tmp": "ENOSPC", "shm": "ENOSPC", "within_cap": true}),
        ),
        py(
            "one file past the size limit",
            "def big():\n    with open('/workspace/big', 'wb') as f:\n        f.write(b'x' * (17 << 20))\n\
             r = op(big)\nos.unlink('/workspace/big')\nreport(r=r)",
            // Since issue 9 the qgroup stops the file at the quota (EDQUOT); RLIMIT_FSIZE is the
            // server's largest disk_mb (a pooled sandbox may get any quota), checked with the
            // other rlimits in finding_hard_rlimits_are_finite.
            json!({"r": "EDQUOT"}),
        ),
        py(
            "inode fill of /workspace",
            &format!("{fill}\nr = inodes('/workspace/i')\nshutil.rmtree('/workspace/i')\nreport(errno=r[0], within_cap=1000 <= r[1] <= 65536)"),
            // Btrfs has no inode cap: since issue 9 the files' metadata fills the byte quota
            // (EDQUOT). Each empty file costs well over 256 bytes of metadata, so 16 MiB holds
            // fewer than 65536 of them (about 46000 here).
            json!({"errno": "EDQUOT", "within_cap": true}),
        ),
        py(
            "inode fill of /dev/shm",
            &format!("{fill}\nr = inodes('/dev/shm/i')\nshutil.rmtree('/dev/shm/i')\nreport(errno=r[0], within_cap=4000 <= r[1] <= 4096)"),
            json!({"errno": "ENOSPC", "within_cap": true}),
        ),
        bash(
            "bash: dd into /workspace",
            "a=0; for i in 1 2 3 4 5 6 7 8; do dd if=/dev/zero of=/workspace/dd$i bs=1M count=4 2>/dev/null || { a=$?; break; }; done\n\
             n=$(cat /workspace/dd* | wc -c); rm -f /workspace/dd*\n\
             printf 'ATTACK {\"rc\": %d, \"within_cap\": %s}\\n' $a $([ \"$n\" -le 16777216 ] && echo true || echo false)",
            json!({"rc": 1, "within_cap": true}),
        ),
    ];
    rep.table(&server, &id, &cases);
    rep.check(
        "fill /tmp and /dev/shm together in a 128 MiB sandbox with the default disk",
        || {
            // /tmp gets half of the memory and /dev/shm a quarter, both charged to it: full
            // together, with the interpreter's own memory, they must still end in ENOSPC.
            let small = create_with_limits(&server, json!({ "memory_mb": 128 }));
            let r = exec(
                &server,
                &small,
                Lang::Py,
                &format!(
                    "{PRELUDE}\n{fill}\nr = [fill('/tmp/f'), fill('/dev/shm/f')]\n\
                     report(tmp=r[0][0], shm=r[1][0], mib=[r[0][1], r[1][1]])"
                ),
                60.0,
            )?;
            expect_eq(
                "fill",
                attack_line(&r),
                Some(json!({"tmp": "ENOSPC", "shm": "ENOSPC", "mib": [64, 32]})),
            )
            .map_err(|e| format!("{e}: {}", brief(&r)))?;
            expect_eq("end_state", r["end_state"].as_str(), Some("ok"))
        },
    );
    rep.check("upload past the workspace cap is refused", || {
        let r = server.put_bytes(
            &format!("/v1/sandboxes/{id}/files/upload.bin"),
            vec![0u8; 32 << 20],
        );
        // Since issue 9: the disk quota's own code, naming the limit, the partial file removed.
        expect_eq(
            "upload of 32 MiB into a 16 MiB workspace",
            (r.status, r.code()),
            (507, "quota_exceeded"),
        )
        .map_err(|e| format!("{e}: {}", r.text))?;
        ensure(r.message().contains("disk_mb = 16"), || {
            format!("message: {}", r.text)
        })?;
        let (status, _, _) = server.get_bytes(&format!("/v1/sandboxes/{id}/files/upload.bin"));
        expect_eq("the partial upload", status, 404)
    });
    rep.check("the filled sandbox still answers", || {
        let r = exec(&server, &id, Lang::Py, "6 * 7", 30.0)?;
        expect_eq("result", r["result"]["text/plain"].as_str(), Some("42"))
    });
    rep.check("the neighbour can still write its own workspace", || {
        let r = exec(
            &server,
            &neighbour.id,
            Lang::Py,
            "open('/workspace/ten.bin', 'wb').write(b'y' * (10 << 20))",
            30.0,
        )?;
        expect_eq(
            "bytes written",
            r["result"]["text/plain"].as_str(),
            Some("10485760"),
        )
    });
    rep.check("neighbour intact", || neighbour.intact(&server));
    rep.check("server healthy", || health(&server));
    rep.finish();
}

// =============================================================================================
// Output floods.

/// A flood ended `ok` (within its execution timeout, which bounds how long it may take) and
/// was cut to the budget.
fn flood_checks(r: &Value, total: u64, stream: &str) -> Result<(), String> {
    expect_eq("end_state", r["end_state"].as_str(), Some("ok"))
        .map_err(|e| format!("{e}: {}", brief(r)))?;
    let t = &r[format!("{stream}_truncation")];
    let dropped = t["dropped_bytes"].as_u64().unwrap_or(0);
    // Exact for valid text. Invalid UTF-8 is kept as U+FFFD, three bytes of text for each byte
    // written, so there only the bound holds.
    if stream == "stdout" {
        expect_eq("dropped bytes", dropped, total - OUTPUT_BUDGET)?;
    } else {
        ensure(dropped >= total - OUTPUT_BUDGET, || {
            format!("dropped only {dropped} of {total}")
        })?;
    }
    let kept_text = r[stream].as_str().unwrap_or("").len() as u64;
    ensure(kept_text <= OUTPUT_BUDGET + 256, || {
        format!("{kept_text} bytes of {stream} returned")
    })
}

#[test]
fn output_flood() {
    let server = TestServer::start();
    let neighbour = Neighbour::new(&server);
    let id = server.create_sandbox();
    let total: u64 = 200 << 20;
    let mut rep = Report::new("output flood");
    rep.check("200 MiB to stdout from Python", || {
        let r = exec(
            &server,
            &id,
            Lang::Py,
            "import os\nc = b'x' * (1 << 20)\nfor _ in range(200):\n    os.write(1, c)",
            120.0,
        )?;
        flood_checks(&r, total, "stdout")
    });
    rep.check("200 MiB to stdout from bash", || {
        let r = exec(
            &server,
            &id,
            Lang::Bash,
            "head -c 209715200 /dev/zero | tr '\\0' y",
            120.0,
        )?;
        flood_checks(&r, total, "stdout")
    });
    rep.check("200 MiB of invalid UTF-8 to stderr", || {
        let r = exec(
            &server,
            &id,
            Lang::Py,
            "import os\nc = b'\\xff\\xfe' * (1 << 19)\nfor _ in range(200):\n    os.write(2, c)",
            120.0,
        )?;
        flood_checks(&r, total, "stderr")
    });
    rep.check("a background process flooding between executions", || {
        let r = exec(
            &server,
            &id,
            Lang::Bash,
            "(yes flood | head -c 104857600) & sleep 0.2; echo started",
            60.0,
        )?;
        ensure(
            r["stdout"].as_str().unwrap_or("").starts_with("started")
                || r["stdout_truncation"]["dropped_bytes"].as_u64() > Some(0),
            || brief(&r),
        )?;
        std::thread::sleep(Duration::from_secs(2));
        // Not held up by the background flood: it ends `ok` within its own 60 s timeout.
        let r = exec(&server, &id, Lang::Py, "print('after')", 60.0)?;
        ensure(
            r["stdout"].as_str().unwrap_or("").len() as u64 <= OUTPUT_BUDGET + 256,
            || "unbounded stdout".into(),
        )?;
        expect_eq("end_state", r["end_state"].as_str(), Some("ok"))
    });
    rep.check("neighbour intact", || neighbour.intact(&server));
    rep.check("server healthy", || health(&server));
    rep.finish();
}

/// Fixed finding (not a security hole; metadata the agent relies on), kept as a regression test:
/// - `stdout_truncation.kept_bytes` was always 0, even for short untruncated output: the runtime
///   moved the kept text out of the budget before it read its length.
/// - `dropped_bytes` counted bytes after lossy UTF-8 decoding: each invalid byte the program
///   wrote counted as the three bytes of U+FFFD, so 20 MiB of 0xff reported about 60 MiB dropped.
///   It now counts the bytes the program wrote.
#[test]
fn finding_output_truncation_reports_kept_bytes() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let mut rep = Report::new("truncation metadata");
    rep.check("FINDING: kept_bytes of a short output", || {
        let r = exec(&server, &id, Lang::Py, "print('hello')", 30.0)?;
        expect_eq("stdout", r["stdout"].as_str(), Some("hello\n"))?;
        expect_eq(
            "stdout_truncation",
            r["stdout_truncation"].clone(),
            json!({"kept_bytes": 6, "dropped_bytes": 0}),
        )
    });
    rep.check("FINDING: kept_bytes of a flood", || {
        let r = exec(&server, &id, Lang::Py, "import os\nc = b'x' * (1 << 20)\nfor _ in range(20):\n    os.write(1, c)", 120.0)?;
        let kept = r["stdout_truncation"]["kept_bytes"].as_u64().unwrap_or(0);
        let dropped = r["stdout_truncation"]["dropped_bytes"].as_u64().unwrap_or(0);
        ensure((20 << 20..=(20 << 20) + 256).contains(&(kept + dropped)) && kept >= OUTPUT_BUDGET, || {
            format!("kept {kept} + dropped {dropped} should account for the 20 MiB written, kept at least {OUTPUT_BUDGET}")
        })
    });
    rep.check(
        "FINDING: dropped_bytes counts the bytes the program wrote",
        || {
            // 20 MiB of 0xff bytes: each becomes U+FFFD (3 bytes) before the budget counts it.
            let r = exec(
                &server,
                &id,
                Lang::Py,
                "import os\nc = b'\\xff' * (1 << 20)\nfor _ in range(20):\n    os.write(1, c)",
                120.0,
            )?;
            let dropped = r["stdout_truncation"]["dropped_bytes"]
                .as_u64()
                .unwrap_or(0);
            ensure(dropped <= 20 << 20, || {
                format!("{dropped} bytes reported dropped of the 20 MiB written")
            })
        },
    );
    rep.finish();
}

// =============================================================================================
// CPU spin, sleeping, and ignoring the interrupt.

#[test]
fn timeouts() {
    // The server's grace between the interrupt at the timeout and the kill (`GRACE` in the
    // runtime's exec.rs; keep the two equal).
    const KILL_GRACE: Duration = Duration::from_secs(1);
    // The driver's grace between the interrupt of a Bash cell and the kill of its session
    // (`BASH_INTERRUPT_GRACE` in python/sandlot_runtime/bash_session.py).
    const BASH_GRACE: Duration = Duration::from_millis(500);
    let secs = Duration::from_secs;
    let server = TestServer::start();
    let neighbour = Neighbour::new(&server);
    let mut rep = Report::new("timeouts");
    let timed =
        |id: &str, lang: Lang, code: &str, timeout: f64| -> Result<(Value, Duration), String> {
            let t0 = Instant::now();
            let r = exec(&server, id, lang, code, timeout)?;
            Ok((r, t0.elapsed()))
        };
    let id = server.create_sandbox();
    rep.check("CPU spin past the timeout: interrupted, state kept", || {
        let (r, took) = timed(&id, Lang::Py, "kept = 42\nwhile True:\n    pass", 2.0)?;
        expect_eq("end_state", r["end_state"].as_str(), Some("timeout"))
            .map_err(|e| format!("{e}: {}", brief(&r)))?;
        expect_eq("sandbox_alive", r["sandbox_alive"].as_bool(), Some(true))?;
        expect_eq(
            "error",
            r["error"]["name"].as_str(),
            Some("KeyboardInterrupt"),
        )?;
        ensure(took < secs(2) + SLACK, || format!("took {took:?}"))?;
        let r = exec(&server, &id, Lang::Py, "kept", 30.0)?;
        expect_eq(
            "state after",
            r["result"]["text/plain"].as_str(),
            Some("42"),
        )
    });
    rep.check("sleep past the timeout (Python)", || {
        let (r, took) = timed(&id, Lang::Py, "import time\ntime.sleep(1000)", 1.0)?;
        expect_eq("end_state", r["end_state"].as_str(), Some("timeout"))?;
        expect_eq("sandbox_alive", r["sandbox_alive"].as_bool(), Some(true))?;
        ensure(took < secs(1) + SLACK, || format!("took {took:?}"))
    });
    rep.check("sleep past the timeout (bash)", || {
        let (r, took) = timed(&id, Lang::Bash, "sleep 1000", 1.0)?;
        expect_eq("end_state", r["end_state"].as_str(), Some("timeout"))?;
        expect_eq("sandbox_alive", r["sandbox_alive"].as_bool(), Some(true))?;
        expect_eq("exit_code", r["exit_code"].as_i64(), Some(130))?;
        ensure(took < secs(1) + SLACK, || format!("took {took:?}"))?;
        let r = exec(&server, &id, Lang::Bash, "echo alive", 30.0)?;
        expect_eq("bash after", r["stdout"].as_str(), Some("alive\n"))
    });
    rep.check("CPU spin ignoring SIGINT: killed after the grace period", || {
        let id = server.create_sandbox();
        let (r, took) = timed(&id, Lang::Py, "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass", 1.0)?;
        expect_restarted(&r, "timeout", "timeout")?;
        // Killed only after the grace period, and then without waiting for the spin to end.
        ensure(took >= KILL_GRACE && took < secs(1) + KILL_GRACE + SLACK, || format!("took {took:?}"))?;
        // Since issue 9 the sandbox restarts in place instead of answering 410.
        let again = exec(&server, &id, Lang::Py, "6 * 7", 30.0)?;
        expect_eq("execute after", again["result"]["text/plain"].as_str(), Some("42"))
    });
    rep.check(
        "a driver that SIGSTOPs itself: killed after the grace period",
        || {
            let id = server.create_sandbox();
            let (r, took) = timed(
                &id,
                Lang::Py,
                "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)",
                1.0,
            )?;
            // Restarted in place since issue 9.
            expect_restarted(&r, "timeout", "timeout")?;
            ensure(took < secs(1) + KILL_GRACE + SLACK, || {
                format!("took {took:?}")
            })
        },
    );
    rep.check(
        "bash ignoring SIGINT: its session killed after the bash grace period",
        || {
            let id = server.create_sandbox();
            exec(&server, &id, Lang::Py, "kept = 'python state'", 30.0)?;
            let (r, took) = timed(&id, Lang::Bash, "trap '' INT\nsleep 1000", 1.0)?;
            // Since issue 9 only the Bash session's process group is killed, 0.5 s after the
            // interrupt: the sandbox and its Python state live on.
            expect_bash_session_ended(&r)?;
            ensure(took < secs(1) + BASH_GRACE + SLACK, || {
                format!("took {took:?}")
            })?;
            let r = exec(&server, &id, Lang::Py, "kept", 30.0)?;
            expect_eq(
                "python state after",
                r["result"]["text/plain"].as_str(),
                Some("'python state'"),
            )?;
            let r = exec(&server, &id, Lang::Bash, "echo alive", 30.0)?;
            expect_eq("bash after", r["stdout"].as_str(), Some("alive\n"))
        },
    );
    rep.check("neighbour intact", || neighbour.intact(&server));
    rep.check("server healthy", || health(&server));
    rep.finish();
}

#[test]
fn cpu_quota() {
    let server = TestServer::start();
    let id = create_with_limits(&server, json!({ "cpu_millis": 200 }));
    let mut rep = Report::new("cpu quota");
    rep.check("two spinning processes get at most 0.2 of a core together", || {
        let code = format!(
            "{PRELUDE}\nspin = 'import time\\nt = time.time()\\nwhile time.time() - t < 2: pass'\nt0 = time.time()\n\
             ps = [subprocess.Popen([sys.executable, '-c', spin]) for _ in range(2)]\nfor p in ps: p.wait()\n\
             wall = time.time() - t0\nc = os.times()\nreport(cpu=c.children_user + c.children_system, wall=wall)"
        );
        let r = exec(&server, &id, Lang::Py, &code, 60.0)?;
        let v = attack_line(&r).ok_or_else(|| brief(&r))?;
        let (cpu, wall) = (v["cpu"].as_f64().unwrap(), v["wall"].as_f64().unwrap());
        ensure(cpu > 0.05 && cpu <= 0.2 * wall * 1.5 + 0.1, || format!("{cpu:.2} s of CPU in {wall:.2} s of wall time"))
    });
    rep.check("server healthy", || health(&server));
    rep.finish();
}

// =============================================================================================
// Processes that try to outlive their sandbox.

const DAEMONS: &str = r#"
subprocess.Popen(['setsid', 'sleep', '1000'])
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp('sleep', ['sleep', '1001'])
    os._exit(0)
os.waitpid(pid, 0)
subprocess.run(['bash', '-c', 'nohup sleep 1002 >/dev/null 2>&1 & disown'])
time.sleep(0.3)
report(sleepers=sum(1 for p in os.listdir('/proc') if p.isdigit() and open(f'/proc/{p}/cmdline').read().startswith('sleep')))
"#;

#[test]
fn orphans_die_with_sandbox() {
    // No warm pool: a uid freed by a delete is handed out again, and a pooled sandbox booted
    // meanwhile could take it while the check below still looks for processes of that uid.
    let server = TestServer::start_with_env(&[("SANDLOT_POOL_SIZE", "0")]);
    let mut rep = Report::new("orphans");
    for how in ["delete", "driver suicide"] {
        rep.check(
            &format!("setsid and double-forked daemons die on {how}"),
            || {
                let id = server.create_sandbox();
                let uid = sandbox_host_uid(&server, &id);
                let r = exec(
                    &server,
                    &id,
                    Lang::Py,
                    &format!("{PRELUDE}\n{DAEMONS}"),
                    30.0,
                )?;
                expect_eq("daemons", attack_line(&r), Some(json!({"sleepers": 3})))
                    .map_err(|e| format!("{e}: {}", brief(&r)))?;
                let before = procs_with_uid(uid);
                // init, driver and the three sleepers at least.
                ensure(before.len() >= 5, || {
                    format!("only {} processes of uid {uid} on the host", before.len())
                })?;
                match how {
                    "delete" => expect_eq(
                        "delete",
                        server.delete(&format!("/v1/sandboxes/{id}")).status,
                        204,
                    )?,
                    _ => {
                        let r = exec(
                            &server,
                            &id,
                            Lang::Py,
                            "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
                            30.0,
                        )?;
                        expect_restarted(&r, "killed", "crashed")?;
                    }
                }
                ensure(
                    wait_until(Duration::from_secs(30), || {
                        before.iter().all(|p| !alive(*p))
                    }),
                    || {
                        format!(
                            "processes survived: {:?}",
                            before.iter().filter(|p| alive(**p)).collect::<Vec<_>>()
                        )
                    },
                )?;
                if how != "delete" {
                    // Since issue 9 the sandbox restarts in place with the same host uid: the
                    // processes of that uid must be exactly its fresh ones (what it sees of
                    // itself), no sleeper among them; then DELETE must leave none.
                    let r = exec(
                        &server,
                        &id,
                        Lang::Py,
                        &format!("{PRELUDE}\n{PROC_TREE}\npids, roots, _ = proc_tree()\n\
                                  report(n=len(pids), sleepers=sum(1 for p in pids if open(f'/proc/{{p}}/cmdline').read().startswith('sleep')))"),
                        30.0,
                    )?;
                    let inside = attack_line(&r).ok_or_else(|| brief(&r))?;
                    expect_eq("sleepers after the restart", inside["sleepers"].as_u64(), Some(0))?;
                    let now = procs_with_uid(uid);
                    ensure(now.iter().all(|p| !before.contains(p)), || {
                        format!("processes from before the restart: {now:?}")
                    })?;
                    // The cell's own listing ran while no other process started: the host sees
                    // as many processes of the uid as the sandbox saw of itself.
                    expect_eq(
                        "host processes of the restarted sandbox's uid",
                        now.len() as u64,
                        inside["n"].as_u64().unwrap_or(0),
                    )?;
                    expect_eq(
                        "delete",
                        server.delete(&format!("/v1/sandboxes/{id}")).status,
                        204,
                    )?;
                }
                // No process of that uid survives the delete.
                ensure(
                    wait_until(Duration::from_secs(30), || procs_with_uid(uid).is_empty()),
                    || {
                        let left: BTreeSet<u32> =
                            procs_with_uid(uid).iter().map(|p| p.pid).collect();
                        format!("processes of uid {uid} remain: {left:?}")
                    },
                )
            },
        );
    }
    rep.check("server healthy", || health(&server));
    rep.finish();
}

// =============================================================================================
// Confusing the server: forged control frames, hostile workspace entries.

#[test]
fn server_confusion() {
    let server = TestServer::start();
    let neighbour = Neighbour::new(&server);
    let mut rep = Report::new("server confusion");
    rep.check("a forged giant frame on the control stream ends only this sandbox", || {
        let id = server.create_sandbox();
        let r = exec(
            &server,
            &id,
            Lang::Py,
            "import os, struct, time\nos.write(3, struct.pack('<I', 0xFFFFFFF0) + b'{')\ntime.sleep(5)",
            30.0,
        )?;
        expect_eq("end_state", r["end_state"].as_str(), Some("killed")).map_err(|e| format!("{e}: {}", brief(&r)))?;
        expect_eq("sandbox_alive", r["sandbox_alive"].as_bool(), Some(false))
    });
    rep.check("a malformed frame ends only this sandbox", || {
        let id = server.create_sandbox();
        let r = exec(
            &server,
            &id,
            Lang::Py,
            "import os, struct, time\nb = b'not json'\nos.write(3, struct.pack('<I', len(b)) + b)\ntime.sleep(5)",
            30.0,
        )?;
        expect_eq("end_state", r["end_state"].as_str(), Some("killed")).map_err(|e| format!("{e}: {}", brief(&r)))?;
        expect_eq("sandbox_alive", r["sandbox_alive"].as_bool(), Some(false))
    });
    let id = server.create_sandbox();
    rep.check("symlinks to host files are not followed by the files API", || {
        let r = exec(
            &server,
            &id,
            Lang::Py,
            "import os\nos.symlink('/etc/passwd', '/workspace/link')\nos.symlink('/proc/1/root', '/workspace/rootlink')\n\
             os.symlink('/', '/workspace/slash')",
            30.0,
        )?;
        expect_eq("setup", r["end_state"].as_str(), Some("ok"))?;
        for p in ["link", "rootlink/etc/hosts", "slash/etc/passwd"] {
            let resp = server.get(&format!("/v1/sandboxes/{id}/files/{p}"));
            ensure(resp.status == 400 && resp.code() == "not_a_regular_file", || format!("GET {p}: {} {}", resp.status, resp.text))?;
            ensure(!resp.text.contains("root:x:0:0"), || format!("GET {p} returned host content"))?;
        }
        let before = std::fs::read("/etc/passwd").unwrap();
        let resp = server.put_bytes(&format!("/v1/sandboxes/{id}/files/link"), "pwned");
        ensure(resp.status == 400 && resp.code() == "not_a_regular_file", || format!("PUT link: {} {}", resp.status, resp.text))?;
        expect_eq("host /etc/passwd", std::fs::read("/etc/passwd").unwrap(), before)
    });
    rep.check("a FIFO with a reader is refused without blocking", || {
        let r = exec(
            &server,
            &id,
            Lang::Bash,
            "mkfifo /workspace/fifo2; sleep 1000 < /workspace/fifo2 & sleep 0.3; echo ok",
            30.0,
        )?;
        expect_eq("setup", r["end_state"].as_str(), Some("ok"))?;
        // Blocked, either call would hang until the client's 120 s request timeout.
        let t0 = Instant::now();
        let get = server.get(&format!("/v1/sandboxes/{id}/files/fifo2"));
        let put = server.put_bytes(&format!("/v1/sandboxes/{id}/files/fifo2"), "pwned");
        ensure(t0.elapsed() < Duration::from_secs(30), || {
            format!("took {:?}", t0.elapsed())
        })?;
        expect_eq("GET", (get.status, get.code()), (400, "not_a_regular_file"))?;
        expect_eq("PUT", (put.status, put.code()), (400, "not_a_regular_file"))
    });
    rep.check(
        "FINDING: a FIFO without a reader is refused as not a regular file",
        || {
            let r = exec(
                &server,
                &id,
                Lang::Py,
                "import os\nos.mkfifo('/workspace/fifo')",
                30.0,
            )?;
            expect_eq("setup", r["end_state"].as_str(), Some("ok"))?;
            let t0 = Instant::now();
            let get = server.get(&format!("/v1/sandboxes/{id}/files/fifo"));
            let put = server.put_bytes(&format!("/v1/sandboxes/{id}/files/fifo"), "pwned");
            ensure(t0.elapsed() < Duration::from_secs(30), || {
                format!("took {:?}", t0.elapsed())
            })?;
            expect_eq("GET", (get.status, get.code()), (400, "not_a_regular_file"))?;
            expect_eq("PUT", (put.status, put.code()), (400, "not_a_regular_file"))
        },
    );
    rep.check("neighbour intact", || neighbour.intact(&server));
    rep.check("server healthy", || health(&server));
    rep.finish();
}

// =============================================================================================
// Fixed findings: holes this suite once demonstrated. Each asserts the secure outcome and guards
// against the hole coming back.

/// Fixed finding (cross-sandbox secret leak): every sandbox is a fork of the zygote, and the
/// zygote used to parse the `spawn` message of every earlier sandbox, whose `env` carried the
/// variables a client passed at creation (API keys, tokens). Those strings stayed in the
/// zygote's heap and were copied into every later sandbox, which can read its own memory. The
/// creator's variables now go on the sandbox's own channel, never through the zygote.
#[test]
fn finding_zygote_heap_leaks_other_sandboxes_env() {
    // No warm pool: each sandbox is forked from the zygote when it is created, so B below is a
    // fork of the zygote as it was after A's creation. (With a pool, B could be a sandbox booted
    // before A was even asked for, and the test would pass whatever the zygote keeps.)
    let server = TestServer::start_with_env(&[("SANDLOT_POOL_SIZE", "0")]);
    let secret_hex = token();
    let a = server.create_sandbox_with(
        &json!({ "env": { "TENANT_API_KEY": format!("tenant-secret-{secret_hex}") } }),
    );
    let a = a["id"].as_str().unwrap().to_owned();
    let r = server.execute(
        &a,
        "import os\nos.environ['TENANT_API_KEY'].startswith('tenant-secret-')",
    );
    assert_eq!(r["result"]["text/plain"], "True", "{}", brief(&r));
    // B gets a secret of its own the same way: the positive control of the scan below, which
    // must find it in B's memory (else the scan is broken and finding nothing proves nothing).
    let own_hex = token();
    let b = server.create_sandbox_with(
        &json!({ "env": { "TENANT_API_KEY": format!("tenant-secret-{own_hex}") } }),
    );
    let b = b["id"].as_str().unwrap().to_owned();
    let mut rep = Report::new("zygote heap");
    rep.check("FINDING: B's memory holds no trace of A's environment", || {
        // The marker is split so that B's own code never holds it in one piece; what follows
        // each occurrence in B's anonymous memory is reported, never the secret itself (B does
        // not know it).
        let code = format!(
            "{PRELUDE}\nimport re\nmarker = b'tenant-' + b'secret-'\nfound = set()\n\
             for line in open('/proc/self/maps').read().splitlines():\n    f = line.split()\n    \
             name = f[5] if len(f) > 5 else '[anon]'\n    \
             if not f[1].startswith('r') or name not in ('[anon]', '[heap]'):\n        continue\n    \
             lo, hi = (int(x, 16) for x in f[0].split('-'))\n    data = _ct.string_at(lo, hi - lo)\n    \
             i = data.find(marker)\n    while i >= 0:\n        \
             m = re.match(rb'[0-9a-f]{{8,}}', data[i + len(marker):i + len(marker) + 64])\n        \
             if m:\n            found.add(m.group().decode())\n        i = data.find(marker, i + 1)\n\
             report(found=sorted(found))"
        );
        let r = exec(&server, &b, Lang::Py, &code, 60.0)?;
        let v = attack_line(&r).ok_or_else(|| brief(&r))?;
        let found: Vec<String> =
            v["found"].as_array().into_iter().flatten().filter_map(|s| s.as_str().map(String::from)).collect();
        ensure(found.iter().any(|f| f.starts_with(&own_hex)), || {
            format!("the scan did not find B's own TENANT_API_KEY (tenant-secret-{own_hex}) in B's memory: found {found:?}")
        })?;
        ensure(!found.iter().any(|f| f.starts_with(&secret_hex)), || {
            format!("sandbox B read sandbox A's TENANT_API_KEY (tenant-secret-{secret_hex}) from its own memory")
        })
    });
    rep.finish();
}

/// The host pid of a sandbox's init (P1): the process of that uid whose innermost pid is 1.
fn init_host_pid(uid: u32) -> Option<u32> {
    procs_with_uid(uid).into_iter().map(|p| p.pid).find(|pid| {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("NSpid:"))
                    .map(|l| l.split_whitespace().last() == Some("1"))
            })
            .unwrap_or(false)
    })
}

/// Fixed finding (the root server SIGKILLed an unrelated host process): when a driver died during
/// an execution, the server reaped the sandbox's init and then sent `kill(init_pid, SIGKILL)`
/// again, to a pid by then free for reuse. With `pid_max` at 32768 a sandbox can cycle the pid
/// counter to just below its init's pid before it kills its own driver; here the test stands in
/// for that with `ns_last_pid` and plays the victim: a host `sleep` that gets the freed pid.
/// Signals now go through pidfds, which never name another process.
#[test]
fn finding_server_kills_a_recycled_init_pid() {
    let server = TestServer::start();
    let mut rep = Report::new("pid reuse");
    rep.check("FINDING: a host process that reuses a dead sandbox's init pid survives", || {
        for attempt in 1..=5 {
            let id = server.create_sandbox();
            let uid = sandbox_host_uid(&server, &id);
            let init = init_host_pid(uid).ok_or("no init process found")?;
            // 1 MiB on each stream makes the store write between the two kills take a while.
            let code = "import os, sys\nsys.stdout.write('x' * (1 << 20)); sys.stderr.write('y' * (1 << 20))\n\
                        sys.stdout.flush(); sys.stderr.flush()\nimport time; time.sleep(0.2)\nos.kill(os.getpid(), 9)";
            let outcome = std::thread::scope(|s| -> Result<Option<bool>, String> {
                let run = s.spawn(|| exec(&server, &id, Lang::Py, code, 30.0));
                let deadline = Instant::now() + Duration::from_secs(30);
                while std::path::Path::new(&format!("/proc/{init}")).exists() {
                    if Instant::now() > deadline {
                        return Err("the sandbox's init was never reaped".into());
                    }
                    std::hint::spin_loop();
                }
                // The sandbox's init is reaped and its pid free: the next process gets it.
                std::fs::write("/proc/sys/kernel/ns_last_pid", (init - 1).to_string())
                    .map_err(|e| format!("ns_last_pid: {e}"))?;
                let mut victim = std::process::Command::new("sleep").arg("30").spawn().unwrap();
                let landed = victim.id() == init;
                let r = run.join().unwrap();
                std::thread::sleep(Duration::from_millis(500));
                let status = victim.try_wait().unwrap();
                let _ = victim.kill();
                let _ = victim.wait();
                expect_eq("end_state", r?["end_state"].as_str(), Some("killed"))?;
                if !landed {
                    return Ok(None);
                }
                Ok(Some(status.is_none()))
            })?;
            match outcome {
                Some(true) => return Ok(()),
                Some(false) => {
                    return Err(format!(
                        "the server SIGKILLed host process {init} (a root `sleep` that reused the pid of the dead \
                         sandbox's init) on attempt {attempt}"
                    ))
                }
                None => eprintln!("attempt {attempt}: another process took pid {init}; retrying"),
            }
        }
        Err("the victim never got the freed pid in 5 attempts (inconclusive)".into())
    });
    rep.check("server healthy", || health(&server));
    rep.finish();
}

/// Fixed finding (server memory and disk DoS): display data, results and errors are frames on
/// the control stream, and they used to bypass the per-execution output budget that bounds
/// stdout and stderr: any sandbox could send frames of up to 64 MiB each, as many as it liked,
/// and the server held them all in memory, returned them, and wrote them into the SQLite store
/// on the host's disk. They now have a budget of their own.
#[test]
fn finding_rich_outputs_bypass_the_output_budget() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let store_size = |dir: &std::path::Path| -> u64 {
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("sandlot.db"))
                    .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
                    .sum()
            })
            .unwrap_or(0)
    };
    let bound = 8 * OUTPUT_BUDGET;
    let mut rep = Report::new("rich output budget");
    rep.check("FINDING: 64 MiB of display data", || {
        let before = store_size(server.data_dir());
        let resp = server.execute_with(
            &id,
            &json!({ "code": "from IPython.display import display\nblob = 'x' * (16 << 20)\nfor _ in range(4):\n    display({'text/plain': blob}, raw=True)", "timeout": 120 }),
        );
        expect_eq("status", resp.status, 200)?;
        let grown = store_size(server.data_dir()).saturating_sub(before);
        ensure(resp.text.len() as u64 <= bound && grown <= bound, || {
            format!(
                "a response of {} bytes and {} bytes more in the store, for a per-stream budget of {OUTPUT_BUDGET}",
                resp.text.len(),
                grown
            )
        })
    });
    rep.check("FINDING: a 16 MiB exception message", || {
        let resp = server.execute_with(
            &id,
            &json!({ "code": "raise ValueError('x' * (16 << 20))", "timeout": 120 }),
        );
        expect_eq("status", resp.status, 200)?;
        ensure(resp.text.len() as u64 <= bound, || {
            format!("a response of {} bytes", resp.text.len())
        })
    });
    rep.check("server healthy", || health(&server));
    rep.finish();
}

// =============================================================================================
// Issue 9: the failures that attack cases outside this suite found (87 of 98 were contained),
// each now a regression test asserting the outcome the fixes give.

/// Fixed finding (lost work): `/workspace` was a tmpfs charged to the sandbox's memory, so
/// writing a large file into a sandbox with 1 GiB of memory and a 1 GiB workspace ended in
/// `oom`, and the sandbox died with every file. The workspace is on disk now, with a quota of
/// its own: a 1 GiB file fits in a sandbox with 512 MiB of memory, and nothing restarts.
#[test]
fn finding_disk_is_not_memory() {
    let server = TestServer::start();
    let id = create_with_limits(&server, json!({ "memory_mb": 512, "disk_mb": 2048 }));
    let mut rep = Report::new("disk is not memory");
    rep.check("FINDING: a 1 GiB file in a sandbox with 512 MiB of memory", || {
        exec(&server, &id, Lang::Py, "kept = 'python state'", 30.0)?;
        let code = format!(
            "{PRELUDE}\nchunk = os.urandom(1 << 20)\n\
             def write():\n    with open('/workspace/big.bin', 'wb') as f:\n        for _ in range(1024):\n            \
             f.write(chunk)\n        f.flush()\n        os.fsync(f.fileno())\n\
             w = op(write)\nwith open('/workspace/big.bin', 'rb') as f:\n    \
             whole = all(f.read(1 << 20) == chunk for _ in range(1024)) and f.read(1) == b''\n\
             report(write=w, mib=os.path.getsize('/workspace/big.bin') >> 20, whole=whole)"
        );
        let r = exec(&server, &id, Lang::Py, &code, 120.0)?;
        expect_eq(
            "the write",
            attack_line(&r),
            Some(json!({"write": "OK", "mib": 1024, "whole": true})),
        )
        .map_err(|e| format!("{e}: {}", brief(&r)))?;
        expect_eq("end_state", r["end_state"].as_str(), Some("ok"))?;
        expect_eq("sandbox_alive", r["sandbox_alive"].as_bool(), Some(true))?;
        ensure(r["restarted"].is_null(), || format!("restarted: {}", r["restarted"]))?;
        let r = exec(&server, &id, Lang::Py, "kept", 30.0)?;
        expect_eq(
            "python state after",
            r["result"]["text/plain"].as_str(),
            Some("'python state'"),
        )?;
        let files = server.get(&format!("/v1/sandboxes/{id}/files"));
        let size = files.body["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["path"] == "big.bin")
            .and_then(|e| e["size"].as_u64());
        expect_eq("size the files API lists", size, Some(1 << 30))?;
        let s = server.get(&format!("/v1/sandboxes/{id}"));
        expect_eq(
            "state and restart count",
            (s.body["state"].as_str(), s.body["restart_count"].as_u64()),
            (Some("running"), Some(0)),
        )
    });
    rep.check("server healthy", || health(&server));
    rep.finish();
}

/// Fixed finding (lost sandbox): a cell that ignored SIGINT, or a shell loop that did not stop
/// at the interrupt, ended in `timeout` and then the sandbox was gone: the next call answered
/// 410 "sandbox is lost", its files were lost, and even `DELETE` answered 410. Now Python that
/// ignores the interrupt is killed 1 s after it and the sandbox restarts in place (same id,
/// files kept); Bash that ignores it loses only its session, 0.5 s after it. Either way the
/// answer comes within the timeout + 2 s, and `DELETE` answers 204 once, then 404.
#[test]
fn finding_ignoring_the_interrupt_keeps_the_sandbox() {
    let server = TestServer::start();
    let neighbour = Neighbour::new(&server);
    let within = |timeout: f64| Duration::from_secs_f64(timeout) + Duration::from_secs(2);
    let mut rep = Report::new("ignored interrupt");
    let python_cells = [
        (
            "SIG_IGN",
            "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass",
        ),
        (
            "catching KeyboardInterrupt",
            "while True:\n    try:\n        while True:\n            pass\n    except KeyboardInterrupt:\n        pass",
        ),
        (
            "a SIGINT handler that sleeps",
            "import signal, time\nsignal.signal(signal.SIGINT, lambda *a: time.sleep(1000))\nwhile True:\n    pass",
        ),
    ];
    for (how, cell) in python_cells {
        rep.check(
            &format!("FINDING: Python ({how}): timeout, restarted in place, files kept"),
            || {
                let id = server.create_sandbox();
                let up = server.put_bytes(
                    &format!("/v1/sandboxes/{id}/files/in/data.csv"),
                    "a,b\n1,2\n",
                );
                expect_eq("upload", up.status, 201)?;
                exec(
                    &server,
                    &id,
                    Lang::Py,
                    "open('/workspace/made.txt', 'w').write('by the cell')",
                    30.0,
                )?;
                let (r, took) = exec_timed(&server, &id, Lang::Py, cell, 2.0)?;
                expect_restarted(&r, "timeout", "timeout")?;
                ensure(took < within(2.0), || format!("answered after {took:?}"))?;
                // The files are readable through the API at once, restart or not.
                let (status, _, body) =
                    server.get_bytes(&format!("/v1/sandboxes/{id}/files/made.txt"));
                expect_eq(
                    "made.txt through the API",
                    (status, body),
                    (200, b"by the cell".to_vec()),
                )?;
                let r = exec(
                    &server,
                    &id,
                    Lang::Py,
                    "(open('/workspace/in/data.csv').read(), open('made.txt').read())",
                    30.0,
                )?;
                expect_eq(
                    "files in the next call",
                    r["result"]["text/plain"].as_str(),
                    Some("('a,b\\n1,2\\n', 'by the cell')"),
                )
                .map_err(|e| format!("{e}: {}", brief(&r)))?;
                let s = server.get(&format!("/v1/sandboxes/{id}"));
                expect_eq(
                    "state, restart count, last reason",
                    (
                        s.body["state"].as_str(),
                        s.body["restart_count"].as_u64(),
                        s.body["last_restart"]["reason"].as_str(),
                    ),
                    (Some("running"), Some(1), Some("timeout")),
                )?;
                let d = server.delete(&format!("/v1/sandboxes/{id}"));
                expect_eq("first DELETE", d.status, 204)?;
                let d = server.delete(&format!("/v1/sandboxes/{id}"));
                expect_eq(
                    "second DELETE",
                    (d.status, d.code()),
                    (404, "sandbox_not_found"),
                )?;
                let again = server.execute_with(&id, &json!({ "code": "1" }));
                expect_eq(
                    "execute after DELETE",
                    (again.status, again.code()),
                    (410, "sandbox_gone"),
                )
            },
        );
    }
    let id = server.create_sandbox();
    let bash_cells = [
        (
            "trap '' INT; a busy loop",
            "trap '' INT\nwhile :; do :; done",
        ),
        ("trap '' INT; sleep", "trap '' INT\nsleep 1000"),
        (
            "a loop whose trap goes on",
            "trap 'echo ignored' INT\nwhile :; do sleep 0.1; done",
        ),
    ];
    rep.check("setup: Python state, a Bash variable and a file", || {
        exec(&server, &id, Lang::Py, "kept = 'python state'", 30.0)?;
        let r = exec(
            &server,
            &id,
            Lang::Bash,
            "echo kept > /workspace/bash.txt",
            30.0,
        )?;
        expect_eq("setup", r["end_state"].as_str(), Some("ok"))
    });
    for (how, cell) in bash_cells {
        rep.check(
            &format!("FINDING: Bash ({how}): timeout, only the session ended"),
            || {
                let (r, took) = exec_timed(&server, &id, Lang::Bash, cell, 1.0)?;
                expect_bash_session_ended(&r)?;
                ensure(took < within(1.0), || format!("answered after {took:?}"))?;
                let r = exec(&server, &id, Lang::Py, "kept", 30.0)?;
                expect_eq(
                    "python state after",
                    r["result"]["text/plain"].as_str(),
                    Some("'python state'"),
                )?;
                let r = exec(&server, &id, Lang::Bash, "cat /workspace/bash.txt", 30.0)?;
                expect_eq(
                    "bash after",
                    (r["end_state"].as_str(), r["stdout"].as_str()),
                    (Some("ok"), Some("kept\n")),
                )
            },
        );
    }
    rep.check("DELETE answers 204 once, then 404", || {
        let d = server.delete(&format!("/v1/sandboxes/{id}"));
        expect_eq("first DELETE", d.status, 204)?;
        let d = server.delete(&format!("/v1/sandboxes/{id}"));
        expect_eq(
            "second DELETE",
            (d.status, d.code()),
            (404, "sandbox_not_found"),
        )
    });
    rep.check("neighbour intact", || neighbour.intact(&server));
    rep.check("server healthy", || health(&server));
    rep.finish();
}

/// Fixed finding: a thread bomb that hit the pids limit left the Bash session broken
/// ("internal driver error") for every later call. The cell that hit the limit ends with the
/// error and names it; both sessions keep working, with their state.
#[test]
fn finding_thread_bomb_leaves_the_sessions_working() {
    let server = TestServer::start();
    let id = create_with_limits(&server, json!({ "pids": 32 }));
    let mut rep = Report::new("thread bomb");
    rep.check("setup: both sessions up, with state", || {
        exec(&server, &id, Lang::Py, "kept = 'python state'", 30.0)?;
        let r = exec(
            &server,
            &id,
            Lang::Bash,
            "KEPT=bash-state; /bin/echo up",
            30.0,
        )?;
        expect_eq("bash", r["stdout"].as_str(), Some("up\n"))
    });
    rep.check("FINDING: a Python thread bomb at the pids limit", || {
        let r = exec(
            &server,
            &id,
            Lang::Py,
            "import threading, time\nfor _ in range(200):\n    \
             threading.Thread(target=time.sleep, args=(2,), daemon=True).start()",
            30.0,
        )?;
        let stderr = r["stderr"].as_str().unwrap_or("");
        ensure(
            r["end_state"] == "error"
                && r["sandbox_alive"] == true
                && r["restarted"].is_null()
                && r["error"]["name"] == "RuntimeError"
                && r["error"]["value"] == "can't start new thread"
                && stderr.contains("limits.pids"),
            || {
                format!(
                    "expected a RuntimeError naming limits.pids, sandbox alive: {}",
                    brief(&r)
                )
            },
        )?;
        // While the threads hold every pid, Python (no new process needed) answers.
        let r = exec(&server, &id, Lang::Py, "kept", 30.0)?;
        expect_eq(
            "python while the threads live",
            r["result"]["text/plain"].as_str(),
            Some("'python state'"),
        )?;
        // Once they are gone, a Bash command that must fork works in the same session.
        let gone = wait_until(Duration::from_secs(20), || {
            exec(
                &server,
                &id,
                Lang::Py,
                "import threading\nthreading.active_count()",
                30.0,
            )
            .is_ok_and(|r| r["result"]["text/plain"] == "1")
        });
        ensure(gone, || "the bomb's threads never ended".into())?;
        let r = exec(&server, &id, Lang::Bash, "/bin/echo \"$KEPT\"", 30.0)?;
        expect_eq(
            "bash after",
            (
                r["end_state"].as_str(),
                r["stdout"].as_str(),
                r["stderr"].as_str(),
            ),
            (Some("ok"), Some("bash-state\n"), Some("")),
        )
    });
    rep.check("FINDING: a thread bomb in a command of the Bash session", || {
        let r = exec(
            &server,
            &id,
            Lang::Bash,
            "python3 -c 'import threading, time\nfor _ in range(200): threading.Thread(target=time.sleep, args=(2,), daemon=True).start()' \
             2>/dev/null; echo rc=$?",
            30.0,
        )?;
        expect_eq("the command", (r["end_state"].as_str(), r["stdout"].as_str()), (Some("ok"), Some("rc=1\n")))
            .map_err(|e| format!("{e}: {}", brief(&r)))?;
        let r = exec(&server, &id, Lang::Bash, "/bin/echo \"$KEPT\"", 30.0)?;
        expect_eq("bash after", (r["end_state"].as_str(), r["stdout"].as_str()), (Some("ok"), Some("bash-state\n")))?;
        let r = exec(&server, &id, Lang::Py, "kept", 30.0)?;
        expect_eq("python after", r["result"]["text/plain"].as_str(), Some("'python state'"))
    });
    rep.check("server healthy", || health(&server));
    rep.finish();
}

/// Fixed finding: a Python fork bomb with a 10 s timeout came back after 14 s. The answer now
/// comes within the timeout + 2 s (the interrupt at 10 s, the cgroup frozen and killed 1 s
/// later), the sandbox restarts in place and the next call works.
#[test]
fn finding_fork_bomb_timeout_lands() {
    let server = TestServer::start();
    let neighbour = Neighbour::new(&server);
    let mut rep = Report::new("fork bomb timeout");
    let bombs = [
        (
            "a fork bomb",
            "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        ),
        (
            "a fork bomb ignoring SIGINT",
            "import os, signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        ),
    ];
    for (how, cell) in bombs {
        rep.check(
            &format!("FINDING: {how} with a 10 s timeout answers within 12 s"),
            || {
                // Default limits, as the finding had them.
                let id = server.create_sandbox();
                let uid = sandbox_host_uid(&server, &id);
                let (r, took) = exec_timed(&server, &id, Lang::Py, cell, 10.0)?;
                expect_restarted(&r, "timeout", "timeout")?;
                ensure(took < Duration::from_secs(12), || {
                    format!("answered after {took:?}")
                })?;
                let r = exec(
                    &server,
                    &id,
                    Lang::Py,
                    &format!("{PRELUDE}\n{PROC_TREE}\nreport(n=len(proc_tree()[0]))"),
                    30.0,
                )?;
                let inside = attack_line(&r).ok_or_else(|| brief(&r))?;
                // Nothing of the bomb is left: the host sees only the fresh processes. The old
                // group was killed before the restart; on a loaded machine its last processes
                // may take a moment to be reaped, so the count gets a few seconds to settle.
                let want = inside["n"].as_u64().unwrap_or(0);
                let settle = Instant::now() + Duration::from_secs(10);
                while procs_with_uid(uid).len() as u64 != want && Instant::now() < settle {
                    std::thread::sleep(Duration::from_millis(100));
                }
                expect_eq(
                    "host processes of the sandbox's uid",
                    procs_with_uid(uid).len() as u64,
                    want,
                )?;
                expect_eq(
                    "delete",
                    server.delete(&format!("/v1/sandboxes/{id}")).status,
                    204,
                )
            },
        );
    }
    rep.check("neighbour intact", || neighbour.intact(&server));
    rep.check("server healthy", || health(&server));
    rep.finish();
}

/// Fixed finding: output a background process wrote between two executions showed up as the
/// next execution's stdout, so code could forge what a later cell printed. It is background
/// output now (`GET /v1/sandboxes/{id}/background`); the next execution only says how much
/// is waiting.
#[test]
fn finding_background_output_stays_out_of_the_next_execution() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let mut rep = Report::new("background output");
    let background = |id: &str| server.get(&format!("/v1/sandboxes/{id}/background"));
    let wait_for = |id: &str, text: &str| {
        wait_until(Duration::from_secs(20), || {
            background(id).text.contains(text)
        })
    };
    rep.check("FINDING: a Python background process writes after its cell", || {
        let forged = format!("FORGED-{}", token());
        let r = exec(
            &server,
            &id,
            Lang::Py,
            &format!("import subprocess\nsubprocess.Popen('sleep 0.3; echo {forged}; echo {forged}-err >&2', shell=True)\nprint('cell')"),
            30.0,
        )?;
        expect_eq("the cell's own stdout", r["stdout"].as_str(), Some("cell\n"))?;
        ensure(wait_for(&id, &format!("{forged}-err")), || format!("never in the background output: {}", background(&id).text))?;
        let next = exec(&server, &id, Lang::Py, "print('next')", 30.0)?;
        expect_eq(
            "the next execution",
            (next["stdout"].as_str(), next["stderr"].as_str(), next["background_bytes"].as_u64()),
            // "FORGED-…\n" on stdout and "FORGED-…-err\n" on stderr.
            (Some("next\n"), Some(""), Some((2 * forged.len() + 6) as u64)),
        )?;
        let out = server.get(&format!("/v1/sandboxes/{id}/background?clear=true"));
        let texts: Vec<(String, String)> = out.body["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| (e["stream"].as_str().unwrap_or("").into(), e["text"].as_str().unwrap_or("").into()))
            .collect();
        expect_eq(
            "background entries",
            texts,
            vec![("stdout".into(), format!("{forged}\n")), ("stderr".into(), format!("{forged}-err\n"))],
        )
    });
    rep.check(
        "FINDING: a Bash background job writes after its cell",
        || {
            let forged = format!("FORGED-{}", token());
            let r = exec(
                &server,
                &id,
                Lang::Bash,
                &format!("(sleep 0.3; echo {forged}) &"),
                30.0,
            )?;
            expect_eq("the cell's own stdout", r["stdout"].as_str(), Some(""))?;
            ensure(wait_for(&id, &forged), || {
                format!("never in the background output: {}", background(&id).text)
            })?;
            let next = exec(&server, &id, Lang::Bash, "echo now", 30.0)?;
            expect_eq(
                "the next execution",
                (next["stdout"].as_str(), next["background_bytes"].as_u64()),
                (Some("now\n"), Some(forged.len() as u64 + 1)),
            )
        },
    );
    rep.finish();
}

/// Fixed finding: processes user code started inherited an extra pipe (fd 100) besides stdin,
/// stdout and stderr. The long list of ways to start a process is `tests/it/hygiene.rs`'s; here
/// the two the finding used, and fd 100 by number.
#[test]
fn finding_user_processes_hold_only_fds_0_1_2() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let mut rep = Report::new("fds");
    let probe = "import os, json\nfds = []\nfor n in os.listdir('/proc/self/fd'):\n    try:\n        os.fstat(int(n))\n    \
                 except OSError:\n        continue\n    fds.append(int(n))\ntry:\n    os.fstat(100)\n    fd100 = 'OK'\n\
                 except OSError as e:\n    fd100 = __import__('errno').errorcode[e.errno]\n\
                 print('ATTACK ' + json.dumps({'fds': sorted(fds), 'fd100': fd100}))\n";
    rep.check("setup: the probe", || {
        let r = exec(
            &server,
            &id,
            Lang::Py,
            &format!("open('/tmp/fds.py', 'w').write({probe:?})"),
            30.0,
        )?;
        expect_eq("setup", r["end_state"].as_str(), Some("ok"))
    });
    let want = json!({"fds": [0, 1, 2], "fd100": "EBADF"});
    rep.table(
        &server,
        &id,
        &[
            py(
                "FINDING: a Python subprocess holds fds 0, 1, 2",
                "p = subprocess.run([sys.executable, '/tmp/fds.py'], capture_output=True, text=True)\nprint(p.stdout, end='')",
                want.clone(),
            ),
            bash("FINDING: a Bash command holds fds 0, 1, 2", "python3 /tmp/fds.py", want.clone()),
            bash("FINDING: a Bash background job holds fds 0, 1, 2", "python3 /tmp/fds.py & wait", want),
        ],
    );
    rep.finish();
}

/// Fixed finding: `/proc/config.gz` was readable inside the sandbox. The init now masks the
/// kernel-information files container runtimes mask; each must read empty where this kernel
/// has it (ENOENT where it does not), and the masks cannot be lifted.
#[test]
fn finding_kernel_information_in_proc_is_masked() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let mut rep = Report::new("/proc masks");
    let files = [
        "config.gz",
        "kcore",
        "keys",
        "key-users",
        "timer_list",
        "timer_stats",
        "sched_debug",
        "latency_stats",
        "kallsyms",
        "kmsg",
    ];
    let host_has = |p: &str| std::path::Path::new(p).exists();
    let empty_dir = |name: &str| {
        if host_has(&format!("/proc/{name}")) {
            json!([])
        } else {
            json!("ENOENT")
        }
    };
    // Bound read-only: a write is EROFS where the file exists.
    let read_only = |p: &str| {
        if host_has(p) {
            json!("EROFS")
        } else {
            json!("ENOENT")
        }
    };
    let want_files: serde_json::Map<String, Value> = files
        .iter()
        .map(|f| (f.to_string(), masked_proc(f)))
        .collect();
    rep.table(
        &server,
        &id,
        &[
            py(
                "FINDING: kernel-information files read empty",
                &format!("report(**{{f: rd('/proc/' + f) for f in {files:?}}})"),
                Value::Object(want_files),
            ),
            py(
                "/proc/acpi, /proc/scsi, /proc/asound are empty",
                "def ls(d):\n    try:\n        return sorted(os.listdir(d))\n    except OSError as e:\n        return en(e.errno)\n\
                 report(acpi=ls('/proc/acpi'), scsi=ls('/proc/scsi'), asound=ls('/proc/asound'))",
                json!({"acpi": empty_dir("acpi"), "scsi": empty_dir("scsi"), "asound": empty_dir("asound")}),
            ),
            py(
                "/proc/sys, sysrq-trigger and /proc/irq are read-only",
                "def w(p):\n    with open(p, 'w') as f: f.write('1')\n\
                 report(sys=op(w, '/proc/sys/kernel/core_pattern'), sysrq=op(w, '/proc/sysrq-trigger'), \
                 irq=op(w, '/proc/irq/default_smp_affinity'))",
                json!({"sys": "EROFS", "sysrq": read_only("/proc/sysrq-trigger"),
                       "irq": read_only("/proc/irq/default_smp_affinity")}),
            ),
            py(
                "/sys/firmware is not there",
                "report(firmware=op(os.listdir, '/sys/firmware'))",
                json!({"firmware": "ENOENT"}),
            ),
            py(
                "the masks cannot be lifted",
                "report(umount=sc(166, b'/proc/config.gz', 2), umount_kcore=sc(166, b'/proc/kallsyms', 0), \
                 umount_sys=sc(166, b'/proc/sys', 2), still=rd('/proc/kallsyms'))",
                json!({"umount": "EPERM", "umount_kcore": "EPERM", "umount_sys": "EPERM", "still": ""}),
            ),
            bash(
                "bash: zcat /proc/config.gz",
                "n=$(cat /proc/config.gz 2>/dev/null | wc -c); zcat /proc/config.gz >/dev/null 2>&1; \
                 printf 'ATTACK {\"bytes\": %d, \"zcat\": %d}\\n' \"$n\" $?",
                // Empty input is not gzip data: zcat fails (where the kernel has no file, cat
                // fails and zcat too).
                json!({"bytes": 0, "zcat": 1}),
            ),
        ],
    );
    // A sandbox forked from a template's zygote goes through the same init: the same masks.
    server
        .post(
            "/v1/templates",
            &json!({"name": "proc-masks", "setup": "x = 1"}),
        )
        .expect(202);
    let deadline = Instant::now() + Duration::from_secs(600);
    while server.get("/v1/templates/proc-masks").expect(200)["status"] == "building" {
        assert!(Instant::now() < deadline, "the template never built");
        std::thread::sleep(Duration::from_millis(200));
    }
    let t = server.get("/v1/templates/proc-masks");
    assert_eq!(t.expect(200)["status"], "ready", "{}", t.text);
    let forked = server.create_sandbox_with(&json!({"template": "proc-masks"}))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    rep.table(
        &server,
        &forked,
        &[py(
            "FINDING: a template's sandbox reads /proc/config.gz empty too",
            "report(config=rd('/proc/config.gz'), kallsyms=rd('/proc/kallsyms'))",
            json!({"config": masked_proc("config.gz"), "kallsyms": masked_proc("kallsyms")}),
        )],
    );
    rep.finish();
}

/// Fixed finding: RLIMIT_AS had an unlimited hard limit. Every hard limit is finite now except
/// RLIMIT_CPU (SECURITY.md says why), soft equals hard, and nothing inside can raise one.
#[test]
fn finding_hard_rlimits_are_finite() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let mut rep = Report::new("rlimits");
    const TIB: u64 = 1 << 40;
    const MIB: u64 = 1 << 20;
    // RLIMIT_FSIZE is the server's largest disk_mb (16384 by default): the quota bounds the
    // workspace, and a pooled sandbox may be handed out with any quota up to that.
    let limits = json!({
        "AS": [TIB, TIB], "CORE": [0, 0], "CPU": [-1, -1], "DATA": [TIB, TIB], "FSIZE": [16384 * MIB, 16384 * MIB],
        "MEMLOCK": [8 * MIB, 8 * MIB], "MSGQUEUE": [819200, 819200], "NICE": [0, 0], "NOFILE": [4096, 4096],
        "NPROC": [16384, 16384], "RSS": [TIB, TIB], "RTPRIO": [0, 0], "RTTIME": [1000000, 1000000],
        "SIGPENDING": [4096, 4096], "STACK": [8 * MIB, 8 * MIB],
    });
    let names: Vec<&str> = limits
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    rep.table(
        &server,
        &id,
        &[
            py(
                "FINDING: every hard limit is finite but CPU's",
                &format!("import resource\nreport(**{{n: list(resource.getrlimit(getattr(resource, 'RLIMIT_' + n))) for n in {names:?}}})"),
                limits.clone(),
            ),
            py(
                "a subprocess inherits them",
                "p = subprocess.run([sys.executable, '-c', 'import resource; print(resource.getrlimit(resource.RLIMIT_AS))'], \
                 capture_output=True, text=True)\nreport(r=p.stdout.strip())",
                json!({"r": format!("({TIB}, {TIB})")}),
            ),
            py(
                "raising a limit",
                // Raw setrlimit(2) (160) and prlimit64(2) (302): Python's resource module turns
                // EPERM and EINVAL into ValueError. RLIMIT_NOFILE is 7, RLIMIT_AS 9.
                "import resource\nlim = lambda soft, hard: (_ct.c_ulong * 2)(soft, hard)\nINF = (1 << 64) - 1\n\
                 report(as_inf=sc(160, 9, lim(INF, INF)), as_plus=sc(160, 9, lim((1 << 40) + 1, (1 << 40) + 1)), \
                 nofile=sc(160, 7, lim(4097, 4097)), soft_over_hard=sc(160, 7, lim(8192, 4096)), \
                 prlimit_init=sc(302, 1, 9, lim(INF, INF), None), prlimit_self=sc(302, 0, 9, lim(INF, INF), None), \
                 now=list(resource.getrlimit(resource.RLIMIT_AS)))",
                json!({"as_inf": "EPERM", "as_plus": "EPERM", "nofile": "EPERM", "soft_over_hard": "EINVAL",
                       "prlimit_init": "EPERM", "prlimit_self": "EPERM", "now": [TIB, TIB]}),
            ),
            bash(
                "bash: ulimit -H",
                "printf 'ATTACK {\"v\": \"%s\", \"n\": \"%s\", \"u\": \"%s\", \"t\": \"%s\"}\\n' \
                 \"$(ulimit -Hv)\" \"$(ulimit -Hn)\" \"$(ulimit -Hu)\" \"$(ulimit -Ht)\"",
                json!({"v": (TIB / 1024).to_string(), "n": "4096", "u": "16384", "t": "unlimited"}),
            ),
        ],
    );
    rep.finish();
}

/// Fixed finding: sandbox ids carried about 80 random bits, and until API keys exist an id is
/// the only capability a client holds. Ids of sandboxes, executions and contexts are now a
/// prefix and 32 hex digits of randomness; no digit is the same across a batch (a counter or a
/// clock would keep some), and nothing but the exact id names a sandbox.
#[test]
fn finding_ids_carry_128_random_bits() {
    let server = TestServer::start();
    let mut rep = Report::new("ids");
    /// Every id is `prefix` and 32 lower-case hex digits, all distinct, and every digit
    /// position takes more than one value across the batch.
    fn random_ids(what: &str, prefix: &str, ids: &[String]) -> Result<(), String> {
        for id in ids {
            let hex = id.strip_prefix(prefix).unwrap_or("");
            ensure(
                hex.len() == 32
                    && hex
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
                || format!("{what} id {id:?} is not {prefix} and 32 hex digits"),
            )?;
        }
        let distinct: BTreeSet<&String> = ids.iter().collect();
        expect_eq(&format!("distinct {what} ids"), distinct.len(), ids.len())?;
        let fixed: Vec<usize> = (0..32)
            .filter(|&i| {
                ids.iter()
                    .map(|id| id.as_bytes()[prefix.len() + i])
                    .collect::<BTreeSet<u8>>()
                    .len()
                    == 1
            })
            .collect();
        ensure(fixed.is_empty(), || {
            format!(
                "{what} id digits {fixed:?} are the same in all {} ids: {ids:?}",
                ids.len()
            )
        })
    }
    let sandboxes: Vec<String> = (0..24).map(|_| server.create_sandbox()).collect();
    rep.check("FINDING: sandbox ids", || {
        random_ids("sandbox", "sb_", &sandboxes)
    });
    rep.check("execution ids", || {
        let ids = (0..24)
            .map(|_| {
                exec(&server, &sandboxes[0], Lang::Py, "1", 30.0)
                    .map(|r| r["id"].as_str().unwrap_or("").to_owned())
            })
            .collect::<Result<Vec<_>, _>>()?;
        random_ids("execution", "ex_", &ids)
    });
    rep.check("context ids", || {
        let ids: Vec<String> = (0..24)
            .map(|_| {
                let r = server.post(
                    &format!("/v1/sandboxes/{}/contexts", sandboxes[1]),
                    &json!({}),
                );
                r.body["id"].as_str().unwrap_or("").to_owned()
            })
            .collect();
        random_ids("context", "ctx_", &ids)
    });
    rep.check("only the exact id names a sandbox", || {
        let real = &sandboxes[2];
        let guesses = [
            format!("sb_{}", "0".repeat(32)),
            real[..20].to_string(),
            real.to_uppercase().replacen("SB_", "sb_", 1),
            format!("{real}0"),
        ];
        for g in guesses {
            let r = server.get(&format!("/v1/sandboxes/{g}"));
            expect_eq(
                &format!("GET {g}"),
                (r.status, r.code()),
                (404, "sandbox_not_found"),
            )?;
        }
        Ok(())
    });
    rep.finish();
}

/// Fixed finding: a zombie was left on the host after deleting a sandbox whose code created
/// zombies. A farm of 200 zombies, 50 orphans, a process in uninterruptible sleep (the parent
/// of a vfork whose child stopped itself waits in D state; a process reading a FIFO would only
/// sleep interruptibly) and a stopped process, then `DELETE`: no process and no zombie of the
/// sandbox's uid remains on the host, and its cgroups are gone from every hierarchy.
#[test]
fn finding_delete_reaps_a_zombie_and_orphan_farm() {
    // No warm pool: no other sandbox may be handed the uid the delete frees while it is
    // checked.
    let server = TestServer::start_with_env(&[("SANDLOT_POOL_SIZE", "0")]);
    let host = common::HostView::of(&server);
    let id = create_with_limits(&server, json!({ "pids": 512 }));
    let uid = sandbox_host_uid(&server, &id);
    let mut rep = Report::new("zombie farm");
    let farm = format!(
        "{PRELUDE}\n\
         for _ in range(200):\n    if os.fork() == 0:\n        os._exit(0)\n\
         for _ in range(50):\n    if os.fork() == 0:\n        if os.fork() == 0:\n            time.sleep(1000)\n        os._exit(0)\n\
         if os.fork() == 0:\n    if _libc.syscall(_ct.c_long(58)) == 0:\n        _libc.kill(_libc.getpid(), signal.SIGSTOP)\n        \
         _libc._exit(0)\n    os._exit(0)\n\
         os.mkfifo('/tmp/fifo')\nsubprocess.Popen(['sh', '-c', 'cat /tmp/fifo'])\n\
         time.sleep(1)\nstates = {{}}\n\
         for p in os.listdir('/proc'):\n    if p.isdigit():\n        try:\n            \
         s = open(f'/proc/{{p}}/stat').read().rsplit(')', 1)[1].split()[0]\n        except OSError:\n            continue\n        \
         states[s] = states.get(s, 0) + 1\n\
         me = open('/proc/self/cmdline').read()\n\
         orphans = sum(1 for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid() \
         and open(f'/proc/{{p}}/cmdline').read() == me and int(open(f'/proc/{{p}}/stat').read().rsplit(')', 1)[1].split()[1]) == 1)\n\
         report(zombies=states.get('Z', 0), stuck=states.get('D', 0), stopped=states.get('T', 0), orphans=orphans)"
    );
    rep.check("the farm: 250 zombies, 50 orphans, one D, one T", || {
        let r = exec(&server, &id, Lang::Py, &farm, 60.0)?;
        // 200 zombies and the 50 orphans' exited parents; the orphans are children of the
        // sandbox's init now.
        expect_eq(
            "inside",
            attack_line(&r),
            Some(json!({"zombies": 250, "stuck": 1, "stopped": 1, "orphans": 50})),
        )
        .map_err(|e| format!("{e}: {}", brief(&r)))?;
        let on_host: Vec<common::HostProc> = host
            .sandbox_processes()
            .into_iter()
            .filter(|p| p.uid == uid)
            .collect();
        let count = |st: char| on_host.iter().filter(|p| p.state == st).count();
        ensure(
            count('Z') == 250 && count('D') == 1 && on_host.len() >= 305,
            || {
                format!(
                    "the host sees {} processes of uid {uid}: {} zombies, {} in D state",
                    on_host.len(),
                    count('Z'),
                    count('D')
                )
            },
        )
    });
    rep.check(
        "FINDING: DELETE leaves no process, zombie or cgroup",
        || {
            expect_eq(
                "delete",
                server.delete(&format!("/v1/sandboxes/{id}")).status,
                204,
            )?;
            let left = || -> Vec<common::HostProc> {
                host.sandbox_processes()
                    .into_iter()
                    .filter(|p| p.uid == uid)
                    .collect()
            };
            ensure(
                wait_until(Duration::from_secs(10), || left().is_empty()),
                || format!("left on the host: {:?}", left()),
            )?;
            ensure(
                wait_until(Duration::from_secs(10), || host.cgroup_dirs(&id).is_empty()),
                || format!("cgroups left: {:?}", host.cgroup_dirs(&id)),
            )?;
            // Nor any zombie the server itself holds (an init it never reaped).
            let server_zombies: Vec<u32> = common::descendants(server.pid())
                .into_iter()
                .filter_map(|p| common::HostProc::read(p.pid))
                .filter(|p| p.zombie)
                .map(|p| p.pid)
                .collect();
            ensure(server_zombies.is_empty(), || {
                format!("zombies under the server: {server_zombies:?}")
            })
        },
    );
    rep.check("server healthy", || health(&server));
    rep.finish();
}

/// Disk workspaces (issue 9) bring a Btrfs attack: a subvolume an unprivileged owner creates
/// gets its own qgroup, outside the workspace's byte limit. Seccomp refuses the four creation
/// ioctls (compared on the low 32 bits, as the kernel reads the command), while the harmless
/// Btrfs and file ioctls still work.
#[test]
fn finding_btrfs_subvolume_creation_is_refused() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let mut rep = Report::new("btrfs ioctls");
    let setup = "fd = os.open('/workspace', os.O_RDONLY | os.O_DIRECTORY)\n\
                 def vol(name, v2=False):\n    b = _ct.create_string_buffer(4096)\n    \
                 struct.pack_into('q', b, 0, fd)\n    off = 56 if v2 else 8\n    b[off:off + len(name)] = name\n    return b\n";
    rep.table(
        &server,
        &id,
        &[
            py(
                "FINDING: subvolume and snapshot creation ioctls",
                &format!(
                    "{setup}report(subvol=sc(16, fd, 0x5000940e, vol(b'sv1')), subvol_v2=sc(16, fd, 0x50009418, vol(b'sv2', True)), \
                     snap=sc(16, fd, 0x50009401, vol(b'sn1')), snap_v2=sc(16, fd, 0x50009417, vol(b'sn2', True)), \
                     high_bits=sc(16, fd, (0xffffffff << 32) | 0x5000940e, vol(b'sv3')), \
                     made=[os.path.exists('/workspace/' + n) for n in ['sv1', 'sv2', 'sn1', 'sn2', 'sv3']])"
                ),
                json!({"subvol": "EPERM", "subvol_v2": "EPERM", "snap": "EPERM", "snap_v2": "EPERM",
                       "high_bits": "EPERM", "made": [false, false, false, false, false]}),
            ),
            py(
                "control: BTRFS_IOC_FS_INFO and FICLONE work (the workspace is Btrfs)",
                &format!(
                    "{setup}info = sc(16, fd, 0x8400941f, _ct.create_string_buffer(1024))\n\
                     open('/workspace/src', 'wb').write(b'x' * 65536)\nsrc = os.open('/workspace/src', os.O_RDONLY)\n\
                     dst = os.open('/workspace/dst', os.O_WRONLY | os.O_CREAT, 0o600)\n\
                     report(fs_info=info, ficlone=sc(16, dst, 0x40049409, src), same=open('/workspace/dst', 'rb').read() == b'x' * 65536)"
                ),
                json!({"fs_info": "OK", "ficlone": "OK", "same": true}),
            ),
        ],
    );
    rep.finish();
}

/// Restart in place (issue 9) brought a new moment for the files API: the sandbox's processes
/// are gone or booting, and the host reaches the workspace by its host path. Symlinks the
/// sandbox planted before the restart, after it, or swaps in and out in a loop while the host
/// writes are still never followed: every write lands inside the workspace or is refused.
#[test]
fn finding_symlinks_planted_across_a_restart_stay_refused() {
    let server = TestServer::start();
    let id = server.create_sandbox();
    let tok = token();
    let passwd = std::fs::read("/etc/passwd").unwrap();
    let mut rep = Report::new("symlinks across a restart");
    let refused = |method: &str, path: &str, status: u16, code: &str, text: &str| {
        ensure(
            status == 400 && code == "not_a_regular_file" && !text.contains("root:x:0:0"),
            || format!("{method} {path}: {status} {text}"),
        )
    };
    let tar_of = |name: &str| -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(5);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, name, &b"pwned"[..]).unwrap();
        b.into_inner().unwrap()
    };
    let attempts = |when: &str, prefix: &str| -> Result<(), String> {
        let pwned = format!("pwned-{tok}");
        for p in [
            format!("{prefix}link"),
            format!("{prefix}esc/tmp/{pwned}"),
            format!("{prefix}esc/etc/passwd"),
            format!("{prefix}etc/passwd"),
            format!("{prefix}tmpl/{pwned}"),
        ] {
            let r = server.put_bytes(&format!("/v1/sandboxes/{id}/files/{p}"), "pwned");
            refused(&format!("{when}: PUT"), &p, r.status, r.code(), &r.text)?;
        }
        for p in [
            format!("{prefix}link"),
            format!("{prefix}esc/etc/passwd"),
            format!("{prefix}etc/shadow"),
        ] {
            let r = server.get(&format!("/v1/sandboxes/{id}/files/{p}"));
            refused(&format!("{when}: GET"), &p, r.status, r.code(), &r.text)?;
        }
        for p in [
            format!("{prefix}esc"),
            format!("{prefix}esc/tmp"),
            format!("{prefix}tmpl"),
        ] {
            let r = server
                .client()
                .put(format!(
                    "{}/v1/sandboxes/{id}/archive?path={p}",
                    server.url()
                ))
                .body(tar_of(&pwned))
                .send();
            let r = r.map_err(|e| format!("PUT archive {p}: {e}"))?;
            let status = r.status().as_u16();
            let text = r.text().unwrap_or_default();
            let code = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v["error"]["code"].as_str().map(String::from))
                .unwrap_or_default();
            refused(&format!("{when}: PUT archive"), &p, status, &code, &text)?;
            let r = server.get(&format!("/v1/sandboxes/{id}/archive?path={p}"));
            refused(
                &format!("{when}: GET archive"),
                &p,
                r.status,
                r.code(),
                &r.text,
            )?;
        }
        for host in [format!("/tmp/{pwned}"), format!("/{pwned}")] {
            ensure(!std::path::Path::new(&host).exists(), || {
                format!("{when}: {host} was written on the host")
            })?;
        }
        expect_eq(
            &format!("{when}: host /etc/passwd"),
            std::fs::read("/etc/passwd").unwrap(),
            passwd.clone(),
        )
    };
    rep.check("setup: symlinks to the host's paths", || {
        let r = exec(
            &server,
            &id,
            Lang::Py,
            "import os\nos.symlink('/', '/workspace/esc')\nos.symlink('/etc/passwd', '/workspace/link')\n\
             os.symlink('/etc', '/workspace/etc')\nos.symlink('/tmp', '/workspace/tmpl')\nos.mkdir('/workspace/real')",
            30.0,
        )?;
        expect_eq("setup", r["end_state"].as_str(), Some("ok"))
    });
    rep.check(
        "FINDING: through symlinks planted before the restart, while it restarts",
        || {
            let r = exec(
                &server,
                &id,
                Lang::Py,
                "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
                30.0,
            )?;
            expect_restarted(&r, "killed", "crashed")?;
            attempts("restarting", "")
        },
    );
    rep.check("FINDING: through symlinks planted after the restart", || {
        let r = exec(
            &server,
            &id,
            Lang::Bash,
            "mkdir /workspace/after && cd /workspace/after && ln -s / esc && ln -s /etc/passwd link && ln -s /etc etc && ln -s /tmp tmpl",
            30.0,
        )?;
        expect_eq("setup", (r["end_state"].as_str(), r["stderr"].as_str()), (Some("ok"), Some("")))?;
        attempts("after", "after/")
    });
    rep.check("a directory swapped with a symlink to / in a loop while the host writes", || {
        let r = exec(
            &server,
            &id,
            Lang::Bash,
            "mkdir -p /workspace/d; cd /workspace; (while :; do mv d d.real; ln -sfn / d; rm -f d; mv d.real d; done) \
             >/dev/null 2>&1 & echo started",
            30.0,
        )?;
        expect_eq("setup", r["stdout"].as_str(), Some("started\n"))?;
        let mut answers: BTreeMap<(u16, String), usize> = BTreeMap::new();
        for _ in 0..200 {
            let r = server.put_bytes(&format!("/v1/sandboxes/{id}/files/d/pwned-{tok}"), "pwned");
            *answers.entry((r.status, r.code().to_owned())).or_default() += 1;
        }
        // Into the real directory (201), refused at the symlink, or its parent missing for a
        // moment: never outside.
        let allowed = [(201, ""), (400, "not_a_regular_file"), (404, "file_not_found")];
        ensure(answers.keys().all(|(s, c)| allowed.contains(&(*s, c.as_str()))), || format!("answers: {answers:?}"))?;
        ensure(answers.contains_key(&(201, String::new())), || format!("no write got through the real directory: {answers:?}"))?;
        ensure(!std::path::Path::new(&format!("/pwned-{tok}")).exists(), || format!("/pwned-{tok} was written on the host"))
    });
    rep.check("control: a real directory takes the same upload", || {
        let r = server.put_bytes(&format!("/v1/sandboxes/{id}/files/real/ok"), "fine");
        expect_eq("upload", r.status, 201)
    });
    rep.check("server healthy", || health(&server));
    rep.finish();
}
