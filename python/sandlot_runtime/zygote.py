"""The zygote: one per template. It imports the template's modules and runs its setup once,
then forks a sandbox per request. Each child enters its jail through sandlot's Rust library
(``sandlot_child_enter``) and becomes the sandbox's driver.

Runs confined (see ARCHITECTURE.md): an unprivileged uid, no capabilities, a read-only base root.
Speaks to the server over the SOCK_SEQPACKET socket at fd 3: one JSON object per message, the
sandbox's fds attached to ``spawn`` with SCM_RIGHTS: its control stream, stdout and stderr, and
(when the server gives the sandbox a disk workspace) the workspace's detached mount, which the
child moves onto ``/workspace``. ``ready`` says ``workspace_fd: true`` so the server knows this
zygote takes that fourth fd; a spawn with three fds gets a tmpfs workspace.
"""

import array
import ctypes
import json
import os
import signal
import socket
import sys
import time

ZYGOTE_FD = 3
MAX_MSG = 1 << 20

# Exit statuses of a forked child, one meaning each; the Rust side names them in
# crates/sandlot-jail/src/exit.rs (which also has 113 and 114, the init's own failures).
EXIT_JAIL_FAILED = 111  # the jail could not be entered (sandlot_child_enter reported the step)
EXIT_DRIVER_FAILED = 112  # the confined driver raised out of driver.main


def _send(sock, obj):
    sock.send(json.dumps(obj).encode())


def _recv(sock):
    fds = array.array("i")
    # Control stream, stdout, stderr, the workspace, and at most 8 volumes.
    msg, anc, _flags, _addr = sock.recvmsg(MAX_MSG, socket.CMSG_SPACE(16 * fds.itemsize))
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    return (json.loads(msg) if msg else None), list(fds)


def _native_threads():
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def _load_template(path):
    with open(path) as f:
        return json.load(f)


def _prepare(template, lib):
    if lib.sandlot_prepare() != 0:
        raise RuntimeError("building the seccomp filter failed")
    started = time.monotonic()
    for name in template.get("imports", []):
        __import__(name)
    from sandlot_runtime import driver

    driver.prepare(template.get("setup") or None)
    return time.monotonic() - started


def _spawn(sock, lib, msg, fds):
    sandbox_id = msg.get("id", "")
    # Control stream, stdout, stderr, then the workspace and up to 8 volumes' mounts.
    if not 3 <= len(fds) <= 16:
        for fd in fds:
            os.close(fd)
        _send(sock, {"op": "error", "id": sandbox_id,
                     "message": f"expected 3 to 16 fds, got {len(fds)}"})
        return
    threads = _native_threads()
    if threads != 1:
        for fd in fds:
            os.close(fd)
        _send(sock, {"op": "error", "id": sandbox_id,
                     "message": f"zygote has {threads} threads; it must be single-threaded to fork"})
        return
    jail = json.dumps(msg["jail"]).encode()
    env = msg.get("env", {})
    pid = os.fork()
    if pid == 0:
        _child(lib, jail, env, fds)
    for fd in fds:
        os.close(fd)
    _send(sock, {"op": "spawned", "id": sandbox_id, "pid": pid})


def _child(lib, jail, env, fds):
    try:
        workspace = fds[3] if len(fds) >= 4 else -1  # -1: a tmpfs workspace
        volumes = fds[4:]  # the volumes' then the host paths' detached mounts, in the config's order
        array = (ctypes.c_int * max(len(volumes), 1))(*volumes)
        rc = lib.sandlot_child_enter(jail, len(jail), fds[0], fds[1], fds[2], workspace,
                                     array, len(volumes))
        if rc != 0:
            os._exit(EXIT_JAIL_FAILED)
        # Only the confined driver gets here; fds 0-3 are in place, everything else (the
        # workspace's fd included) is closed.
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(env)
        from sandlot_runtime import driver

        driver.main(3)
    except BaseException as exc:  # never fall back into the zygote's loop
        try:
            os.write(2, f"sandlot: driver failed: {exc!r}\n".encode())
        finally:
            os._exit(EXIT_DRIVER_FAILED)
    os._exit(0)


def main():
    template = _load_template(sys.argv[1])
    lib = ctypes.CDLL(sys.argv[2])
    lib.sandlot_child_enter.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int,
                                        ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                        ctypes.POINTER(ctypes.c_int), ctypes.c_size_t]
    lib.sandlot_child_enter.restype = ctypes.c_int
    sock = socket.socket(fileno=ZYGOTE_FD)
    try:
        elapsed = _prepare(template, lib)
    except BaseException as exc:
        import traceback

        _send(sock, {"op": "failed", "message": f"{type(exc).__name__}: {exc}",
                     "traceback": traceback.format_exc()[-8000:]})
        return 1
    # Children are reaped automatically; sandboxes reset this before running code.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    _send(sock, {"op": "ready", "pid": os.getpid(), "python": sys.version.split()[0],
                 "prepare_seconds": elapsed, "threads": _native_threads(),
                 "workspace_fd": True})
    while True:
        msg, fds = _recv(sock)
        if msg is None:
            return 0
        if msg.get("op") == "spawn":
            _spawn(sock, lib, msg, fds)
        elif msg.get("op") == "ping":
            _send(sock, {"op": "pong", "threads": _native_threads()})
        else:
            for fd in fds:
                os.close(fd)
            _send(sock, {"op": "error", "message": f"unknown op {msg.get('op')!r}"})


if __name__ == "__main__":
    sys.exit(main())
