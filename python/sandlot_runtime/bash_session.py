"""Running Bash cells: one persistent bash per code context. Each cell is written to a file and
sourced, so the working directory, variables and functions persist.

bash's stdin is one end of a socket pair: the driver writes each command into it, and bash
writes the cell's exit status back into the same socket (``>&0``). The cell itself is sourced
with stdin from /dev/null, so no process a cell starts ever holds the socket: user processes
see fds 0, 1 and 2 only (bash keeps its own saved copy close-on-exec while a cell runs). A
cell's stdout and stderr are its own FIFOs (``cell_output``): what a process the cell started
writes after the cell ended is background output, never another execution's.

A saved state carries each session's working directory and exported variables
(``saved_state``); a loaded one hands them to the context's session (``restore``), which applies
them before its first cell, or at once if it runs.

A session that died (``exit``, a kill, the OOM killer), was stopped by a signal, or ignored an
interrupt is replaced: the next cell starts a new one and says so on stderr. A session that
cannot start, or a cell that cannot be written, because the sandbox hit a limit (processes,
open files, /tmp full) ends that cell with :class:`BashUnavailable`, never with a driver error.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import select
import shlex
import shutil
import signal
import socket
import subprocess
import time

from . import output
from .capture import write_stderr
from .cell_output import CellOutput
from .state import state

# Bash cells are written here (inside the sandbox's private /tmp) and sourced by the session.
BASH_CELL_DIR = "/tmp/.sandlot"
# How long a restarted or deleted context's bash session gets to exit on EOF before it is killed.
BASH_STOP_GRACE = 0.5
# How long a cell gets to stop after an interrupt before its session is killed. Under the
# server's own grace (1 s) so the cell still answers, and only the Bash session is lost.
BASH_INTERRUPT_GRACE = 0.5
# How often the wait for a cell's status looks at the session itself (dead, stopped).
_CHECK_INTERVAL_MS = 100

_RESET = "the working directory, variables and functions are reset"

# Exported variables bash sets itself, never carried by a saved state.
_BASH_OWN_EXPORTS = frozenset({"PWD", "OLDPWD", "SHLVL", "_"})
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Every variable name starts with one of these; "${!X@}" lists the names that start with X.
_NAME_STARTS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_"


class BashUnavailable(Exception):
    """A cell that could not be handed to bash: the session could not start or the cell could
    not be written, most often because the sandbox hit one of its limits. ``name`` is the
    underlying error's type (``BlockingIOError`` for EAGAIN)."""

    def __init__(self, what: str, cause: OSError) -> None:
        hint = limit_hint(cause.errno)
        super().__init__(f"{what}: {cause}" + (f" ({hint})" if hint else ""))
        self.name = type(cause).__name__


def limit_hint(code: int | None) -> str:
    """Which sandbox limit an errno most likely means, as a sentence ('' when none)."""
    if code == errno.EAGAIN:
        return ("the sandbox's limit on processes and threads, limits.pids, is reached; "
                "end some of them and try again")
    if code in (errno.EMFILE, errno.ENFILE):
        return "the limit on open files, RLIMIT_NOFILE, is reached; close some files"
    if code == errno.ENOMEM:
        return "the sandbox is out of memory, limits.memory_mb"
    if code in (errno.ENOSPC, errno.EDQUOT):
        return "no space left: /tmp counts against memory, /workspace against limits.disk_mb"
    if code == errno.EFBIG:
        return "the file size limit, RLIMIT_FSIZE, is reached"
    return ""


class BashSession:
    """A bash reading commands from a socket. Each cell is written to a file and `source`d, so
    cwd, variables and functions persist; the exit status comes back on the same socket.

    bash runs in its own process group so an interrupt can reach the running command without
    touching the driver; `trap 'return 130' INT` makes it abandon the sourced cell (at top
    level or in a loop; inside a shell function it returns from that function) and keep the
    session."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None  # our end: commands out, status lines in
        self._cells = 0
        self._setup = b""  # commands a restored session runs first (see restore)

    def run(self, code: str) -> tuple[str, int]:
        self._ensure_running()
        self._cells += 1
        path = self._write_cell(code)
        try:
            output = CellOutput(BASH_CELL_DIR, f"out-{os.getpid()}-{self._cells}")
        except OSError as exc:
            _remove(path)
            raise BashUnavailable(f"the cell's output could not be set up in {BASH_CELL_DIR}",
                                  exc) from None
        token = secrets.token_hex(8)  # status lines from a cell's own writes cannot match
        # The cell's own stdout and stderr (see cell_output): what a process it starts writes
        # after it ended is background output, never a later execution's.
        command = (f"builtin source {path} </dev/null {output.redirections()}; "
                   f"builtin printf '{token} %d\\n' \"$?\" >&0\n").encode()
        sent = False
        try:
            state.bash_pgid = self._proc.pid
            sent = self._send(command)
            if not sent:
                # bash ended between the check and the write, so it never read the cell.
                self._replace("the bash session had ended")
                state.bash_pgid = self._proc.pid
                sent = self._send(command)
                if not sent:
                    raise BashUnavailable("the bash session could not start",
                                          BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE)))
            exit_code, why = self._wait_status(token, output)
        finally:
            state.bash_pgid = None
            _remove(path)
            if sent:
                output.end()
            else:
                output.close()
        if exit_code is None:
            exit_code = self._reap(why)
        if state.interrupted:
            return "interrupted", exit_code
        return ("ok" if exit_code == 0 else "error"), exit_code

    def close(self) -> None:
        """Closes our end of the socket: bash reads end of file and exits."""
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None

    def stop(self) -> None:
        """Ends the session: EOF first, then SIGKILL to its process group."""
        if self._proc is None:
            return
        proc = self._proc
        self.close()
        try:
            proc.wait(timeout=BASH_STOP_GRACE)
        except subprocess.TimeoutExpired:
            self._kill_group()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self._proc = None

    def saved_state(self, timeout: float) -> dict | None:
        """The session's working directory and the variables it exported beyond the driver's
        own environment, as ``{"cwd", "env"}``; None when it never started or has ended.
        Raises TimeoutError when bash does not answer within ``timeout`` (busy or stopped).

        Builtins only (no subshell, nothing forked), all written back into the command socket:
        a start token, then NUL-terminated fields, the cwd first, then ``NAME=value`` of each
        exported variable, then the token on a line of its own."""
        if self._proc is None or self._proc.poll() is not None or self._sock is None:
            return None
        token = secrets.token_hex(8)
        names = " ".join(f'"${{!{c}@}}"' for c in _NAME_STARTS)
        # Safe under the user's `set -eux` and any IFS: -v is tested first (an unset name
        # under -u would end bash), `if` never fails, stderr (xtrace) is dropped. Arrays are
        # skipped: bash cannot export them.
        command = ("{ "
                   f"builtin printf '%s\\0' {token} \"$PWD\"; "
                   f"for __sandlot_n in {names}; do "
                   "if [[ -v $__sandlot_n && ${!__sandlot_n@a} == *x* "
                   "&& ${!__sandlot_n@a} != *[aA]* ]]; then "
                   'builtin printf \'%s=%s\\0\' "$__sandlot_n" "${!__sandlot_n}"; fi; '
                   "done; builtin unset __sandlot_n; "
                   f"builtin printf '%s\\n' {token}; }} >&0 2>/dev/null\n")
        if not self._send(command.encode()):
            return None
        data = self._read_until(f"\0{token}\n".encode(), timeout)
        start = data.find(f"{token}\0".encode())
        if start < 0:
            raise ValueError("the bash session's answer was garbled")
        fields = data[start + len(token) + 1:].split(b"\0")[:-1]
        env = {}
        for field in fields[1:]:
            name, _, value = field.decode("utf-8", "surrogateescape").partition("=")
            if name not in _BASH_OWN_EXPORTS and os.environ.get(name) != value:
                env[name] = value
        return {"cwd": fields[0].decode("utf-8", "surrogateescape"), "env": env}

    def restore(self, cwd: str | None, env: dict) -> None:
        """Makes the session work in ``cwd`` with ``env`` exported: before its first cell if it
        has not started, at once if it runs. Names that are not shell identifiers are skipped
        (bash could not have exported them); a cwd that does not exist leaves bash where it
        starts."""
        lines = []  # each one harmless under a running session's `set -e`
        if isinstance(cwd, str) and cwd:
            lines.append(f"builtin cd -- {shlex.quote(cwd)} 2>/dev/null || :")
        for name, value in env.items():
            if isinstance(name, str) and _NAME.fullmatch(name) and isinstance(value, str):
                lines.append(f"builtin export {name}={shlex.quote(value)} 2>/dev/null || :")
        if not lines:
            return
        commands = ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")
        if self._proc is not None and self._proc.poll() is None:
            self._send(commands)
        else:
            self._setup = commands

    def _read_until(self, end: bytes, timeout: float) -> bytes:
        """What bash writes into the socket, up to and including ``end``."""
        deadline = time.monotonic() + timeout
        poller = select.poll()
        poller.register(self._sock.fileno(), select.POLLIN)
        data = b""
        while not data.endswith(end):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not poller.poll(remaining * 1000):
                raise TimeoutError(f"the bash session did not answer within {timeout:g} s")
            try:
                chunk = os.read(self._sock.fileno(), 65536)
            except OSError:
                chunk = b""
            if not chunk:
                raise EOFError("the bash session ended")
            data += chunk
        return data

    # -- the session's life -----------------------------------------------------------------

    def _ensure_running(self) -> None:
        """Starts the session on first use, and replaces one that died or was stopped since the
        last cell (saying so on this cell's stderr)."""
        if self._proc is None:
            self._start()
            return
        code = self._proc.poll()
        if code is not None:
            self._replace(f"the bash session had ended ({_describe_status(code)})")
        elif _stopped(self._proc.pid):
            self._kill_group()
            self._proc.wait()
            self._replace("the bash session had been stopped by a signal and was ended")

    def _replace(self, what: str) -> None:
        self.stop()
        self._start()
        write_stderr(f"sandlot: {what}; a new one was started ({_RESET})")

    def _start(self) -> None:
        bash = shutil.which("bash") or "/bin/bash"
        try:
            ours, theirs = socket.socketpair()  # both close-on-exec: only bash gets one, as fd 0
        except OSError as exc:
            raise BashUnavailable("the bash session could not start", exc) from None
        try:
            # bash's own stdout and stderr are the server's pipes, which only its own messages
            # reach (a message about the running cell's redirections, say): each cell has FIFOs
            # of its own, and fds 1 and 2 of the driver are the running execution's pipes,
            # which a session outliving the execution must not hold.
            self._proc = subprocess.Popen([bash, "--noprofile", "--norc"], stdin=theirs.fileno(),
                                          stdout=output.server_fd(1), stderr=output.server_fd(2),
                                          start_new_session=True)
        except OSError as exc:
            ours.close()
            raise BashUnavailable("the bash session could not start", exc) from None
        finally:
            theirs.close()
        self._sock = ours
        # 2>/dev/null: a SIGINT racing the end of a cell finds bash idle, where `return` fails.
        self._send(b"trap 'return 130 2>/dev/null' INT\n")
        if self._setup:  # a restored session: once, a replaced one starts afresh
            self._send(self._setup)
            self._setup = b""

    def _send(self, data: bytes) -> bool:
        """Writes to bash; False when bash is gone."""
        try:
            self._sock.sendall(data)
        except OSError:
            return False
        return True

    def _kill_group(self) -> None:
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)  # SIGKILL ends stopped processes too
        except OSError:
            pass

    # -- one cell ----------------------------------------------------------------------------

    def _write_cell(self, code: str) -> str:
        # The pid keeps drivers that share a /tmp (tests, no jail) from sourcing each other's cells.
        path = f"{BASH_CELL_DIR}/cell-{os.getpid()}-{self._cells}.sh"
        try:
            os.makedirs(BASH_CELL_DIR, mode=0o700, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with open(fd, "wb") as f:
                f.write(code.encode("utf-8", "replace"))
                if not code.endswith("\n"):
                    f.write(b"\n")
        except OSError as exc:
            _remove(path)
            raise BashUnavailable(f"the cell could not be written to {BASH_CELL_DIR}", exc) \
                from None
        return path

    def _wait_status(self, token: str, output: CellOutput) -> tuple[int | None, str]:
        """The cell's exit status, or None and why when the session ended or had to be ended:
        it exited, was stopped by a signal, or did not stop after an interrupt. Looks at the
        session itself only when no status came for a while, so a quick cell pays nothing: a
        background job can hold bash's end of the socket open after bash is gone. Meanwhile
        copies the cell's output through as it comes."""
        expected = token.encode()
        pending = b""
        fd = self._sock.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        for out_fd in output.fds:
            poller.register(out_fd, select.POLLIN)
        interrupted_at = None
        checked_at = time.monotonic()
        while True:
            ready = [ready_fd for ready_fd, _ in poller.poll(_CHECK_INTERVAL_MS)]
            for out_fd in output.fds:
                if out_fd in ready and not output.forward(out_fd):
                    poller.unregister(out_fd)  # every writer closed it: nothing more comes
            if fd in ready:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:
                    chunk = b""
                if not chunk:
                    return None, ""
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    fields = line.split()
                    if len(fields) == 2 and fields[0] == expected:
                        return int(fields[1]), ""
                continue
            # A cell writing without pause still gets its session looked at, as often.
            if ready and time.monotonic() - checked_at < _CHECK_INTERVAL_MS / 1000:
                continue
            checked_at = time.monotonic()
            if self._proc.poll() is not None:
                return None, ""
            if _stopped(self._proc.pid):
                self._kill_group()
                return None, "it was stopped by a signal and was ended"
            if state.interrupted:
                interrupted_at = interrupted_at or time.monotonic()
                if time.monotonic() - interrupted_at >= BASH_INTERRUPT_GRACE:
                    self._kill_group()
                    return None, (f"it did not stop within {BASH_INTERRUPT_GRACE} s of the "
                                  "interrupt and was ended")

    def _reap(self, why: str) -> int:
        code = self._proc.wait()
        if code < 0:
            code = 128 - code  # killed by a signal: report it the way shells do
        self.close()
        self._proc = None
        write_stderr(f"sandlot: the bash session exited with status {code}"
                     f"{'; ' + why if why else ''}; the next bash cell starts a new one ({_RESET})")
        return code


def _describe_status(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _stopped(pid: int) -> bool:
    """Whether the process is stopped (state T or t in /proc/<pid>/stat)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    # The state follows the command name, which is in parentheses and may contain anything.
    fields = stat[stat.rfind(b")") + 2:].split()
    return bool(fields) and fields[0] in (b"T", b"t")


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def run_bash(code: str) -> tuple[str, int]:
    """Runs one cell in the active context's session, started on first use."""
    if state.bash is None:
        state.bash = BashSession()
    return state.bash.run(code)
