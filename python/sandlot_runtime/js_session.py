"""Running JavaScript and TypeScript cells: one persistent ``node`` per code context, started on
the context's first such cell (a sandbox that never runs one pays nothing), running
``js_kernel.js`` (see ARCHITECTURE.md, "The JavaScript kernel").

The driver and the kernel speak JSON lines over two pipes: cells go in on one, and the
kernel's output, results, errors and each cell's end come back on the other, in the order they
happened. Output tagged with the running execution is its output; output tagged with an earlier
one (a timer that fired after its cell ended) is that execution's background output. node's own
stdout and stderr are the server's pipes, like bash's: only node's own messages and processes a
cell started with inherited stdio write there.

An interrupt (or a timeout) is SIGINT to node: a cell waiting on a promise is abandoned and the
context's state kept. A cell that does not stop within ``JS_INTERRUPT_GRACE`` (one running
synchronous code, ``while (true) {}``, never lets node's handler run) has its node killed: the
cell says so on stderr, and the next cell starts a new node with nothing of the old one's
state. node that died (``process.exit()``, the OOM killer) is replaced the same way.

A context's JavaScript state outlives a pause, a fork or a snapshot by replay: each session
keeps a bounded log of the top-level cells that ran to their end (``ok`` or ``error``; an
interrupted cell is left out), the saved state carries it (``snapshot.py``), and the restored
context's first JavaScript cell starts node and replays the log first, its output muted
(ARCHITECTURE.md, "The JavaScript kernel", says why replay and what it cannot give back). A
context whose state could not be carried or replayed says so on the stderr of that first cell.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import time

from . import output
from .capture import write_stderr
from .jsonsafe import safe_str
from .protocol import emit
from .state import state

KERNEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "js_kernel.js")
# How long a cell gets to stop after an interrupt before its node is killed: under the
# server's own grace (1 s), so the cell still answers and only the context's JavaScript state
# is lost.
JS_INTERRUPT_GRACE = 0.5
# How long a deleted or restarted context's node gets to exit on EOF before it is killed.
JS_STOP_GRACE = 0.5
_CHECK_INTERVAL_MS = 100
_RESET = "its variables, functions and imports are reset"
# Bounds of a context's log of cells (what a save carries): past either, the log is dropped and
# the context's JavaScript state is not carried (it says so after a restore).
MAX_LOG_BYTES = 1 << 20
MAX_LOG_CELLS = 1000
# How long a restored context's replay may take before node is ended and its state given up.
REPLAY_SECS = 30.0
# The `name` of a context's JavaScript state in not_captured (never a Python identifier).
JS_STATE = "javascript state"


class JsUnavailable(Exception):
    """A cell that could not be handed to node: it is not installed, or could not start."""

    def __init__(self, message: str, name: str = "RuntimeError") -> None:
        super().__init__(message)
        self.name = name


def node_binary() -> str | None:
    """The host's node (``nodejs`` on Debian), as the sandbox sees it."""
    return shutil.which("node") or shutil.which("nodejs")


class JsSession:
    """One context's node: started on first use, replaced when it died or was killed."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._to_node: int | None = None
        self._from_node: int | None = None
        self._pending = b""
        # The cells that made this node's state, in order: [code, typescript, status].
        self.log: list[list] = []
        self._log_bytes = 0
        # Why this context's state is not what its log says (the log overflowed, a replay
        # failed); None: the log is whole.
        self.lost: str | None = None
        # A restored session: its log is replayed when node starts.
        self._replay = False
        # What the next cell says on stderr first (a restore that could not be whole).
        self._notice: str | None = None

    @classmethod
    def restored(cls, saved: object) -> "JsSession":
        """A session of a restored context, from what ``saved_state`` gave: node starts on the
        context's next JavaScript cell and replays the log first."""
        session = cls()
        saved = saved if isinstance(saved, dict) else {}
        cells = saved.get("cells")
        if isinstance(cells, list):
            for cell in cells:
                if isinstance(cell, list) and len(cell) == 3 and isinstance(cell[0], str):
                    session._record(cell[0], bool(cell[1]), str(cell[2]))
        lost = saved.get("lost")
        if isinstance(lost, str):
            session.lost = lost
            session._notice = (f"sandlot: this context's JavaScript state was not restored "
                               f"({lost}); {_RESET}")
        elif not isinstance(cells, list):
            session.lost = "its saved state is unreadable"
            session._notice = f"sandlot: this context's JavaScript state was not restored; {_RESET}"
        session._replay = bool(session.log) and session.lost is None
        return session

    def saved_state(self) -> dict:
        """What a save carries of this context's JavaScript: the log, or why it cannot."""
        return {"cells": [list(c) for c in self.log], "lost": self.lost}

    def run(self, code: str, typescript: bool) -> str:
        """Runs one cell; returns its status ("ok", "error", "interrupted")."""
        self._ensure_running()
        exec_id = state.exec_id or ""
        line = json.dumps({"id": exec_id, "code": code, "ts": typescript},
                          ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n"
        self._drain_idle()
        if not self._send(line):
            self._replace("the JavaScript kernel had ended")
            if not self._send(line):
                raise JsUnavailable("the JavaScript kernel could not start")
        state.js_pid = self._proc.pid
        try:
            status = self._wait_done(exec_id)
        finally:
            state.js_pid = None
        if status in ("ok", "error") and self._proc is not None:
            self._record(code, typescript, status)
        return status

    def _record(self, code: str, typescript: bool, status: str) -> None:
        if self.lost is not None:
            return
        self._log_bytes += len(code.encode("utf-8", "surrogatepass"))
        if self._log_bytes > MAX_LOG_BYTES or len(self.log) >= MAX_LOG_CELLS:
            self.log, self._log_bytes = [], 0
            self.lost = (f"its cells passed the log's bounds ({MAX_LOG_CELLS} cells, "
                         f"{MAX_LOG_BYTES >> 20} MiB of code)")
            return
        self.log.append([code, typescript, status])

    def stop(self) -> None:
        """Ends node: EOF on its input first, then SIGKILL."""
        if self._proc is None:
            return
        proc = self._proc
        self.close()
        try:
            proc.wait(timeout=JS_STOP_GRACE)
        except subprocess.TimeoutExpired:
            _kill(proc)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self._proc = None

    def close(self) -> None:
        """Closes our ends of the pipes: node reads end of file and exits."""
        for fd in (self._to_node, self._from_node):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._to_node = self._from_node = None
        self._pending = b""

    # -- node's life ---------------------------------------------------------------------

    def _ensure_running(self) -> None:
        if self._proc is None:
            self._start()
            if self._replay:
                self._replay = False
                self._replay_log()
        elif (code := self._proc.poll()) is not None:
            self._replace(f"the JavaScript kernel had ended ({_describe_status(code)})")
        if self._notice is not None:
            write_stderr(self._notice)
            self._notice = None

    def _replace(self, what: str) -> None:
        self.stop()
        self._start()
        self._forget()
        write_stderr(f"sandlot: {what}; a new one was started ({_RESET})")

    def _forget(self) -> None:
        """node's state is gone: so is the log of what made it."""
        self.log, self._log_bytes, self.lost, self._replay = [], 0, None, False

    def _replay_log(self) -> None:
        """Replays a restored context's log into the node just started. A cell that ended
        ``ok`` when it first ran and fails now, node dying, or the replay outlasting
        ``REPLAY_SECS`` leaves the context with a fresh node and says so on the next cell."""
        replay_id = "replay-" + os.urandom(8).hex()
        line = json.dumps({"id": replay_id, "replay": self.log},
                          ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n"
        why = None
        if not self._send(line):
            why = "the JavaScript kernel ended before its cells were replayed"
        else:
            why = self._wait_replayed(replay_id)
        if why is None:
            return
        self.stop()  # a node still replaying reads EOF and exits, or is killed
        self._start()
        self._forget()
        self._notice = (f"sandlot: this context's JavaScript state was not restored: {why}; "
                        f"{_RESET}")

    def _wait_replayed(self, replay_id: str) -> str | None:
        """Waits for the kernel's answer to a replay: None when every cell replayed, else why
        not."""
        deadline = time.monotonic() + REPLAY_SECS
        poller = select.poll()
        poller.register(self._from_node, select.POLLIN)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return f"replaying its {len(self.log)} cells took over {REPLAY_SECS:g} s"
            if not poller.poll(int(min(left, 0.1) * 1000) + 1):
                if self._proc.poll() is not None:
                    return "the JavaScript kernel exited while its cells were replayed"
                continue
            if not self._read_some():
                return "the JavaScript kernel exited while its cells were replayed"
            for message in self._messages():
                if message.get("t") != "replayed" or message.get("c") != replay_id:
                    self._background(message)
                    continue
                failed = message.get("failed")
                if not isinstance(failed, dict):
                    return None
                return (f"replaying cell {failed.get('index', '?')} of {len(self.log)} failed "
                        f"with {safe_str(failed.get('name'))}: {safe_str(failed.get('value'))}")

    def _start(self) -> None:
        node = node_binary()
        if node is None:
            raise JsUnavailable("JavaScript needs Node.js, which is not installed on the host: "
                                "install the distribution's nodejs package (see `sandlot "
                                "doctor`)", name="NodeNotFound")
        cells_r, cells_w = os.pipe2(os.O_CLOEXEC)
        events_r, events_w = os.pipe2(os.O_CLOEXEC)
        try:
            self._proc = subprocess.Popen(
                [node, "--expose-internals", KERNEL, str(cells_r), str(events_w)],
                stdin=subprocess.DEVNULL, stdout=output.server_fd(1), stderr=output.server_fd(2),
                pass_fds=(cells_r, events_w), start_new_session=True, cwd=_cwd())
        except OSError as exc:
            for fd in (cells_r, cells_w, events_r, events_w):
                os.close(fd)
            raise JsUnavailable(f"the JavaScript kernel could not start: {exc}",
                                name=type(exc).__name__) from None
        os.close(cells_r)
        os.close(events_w)
        self._to_node, self._from_node = cells_w, events_r
        self._pending = b""

    def _send(self, data: bytes) -> bool:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._to_node, view):]
        except (OSError, TypeError):
            return False
        return True

    # -- one cell ------------------------------------------------------------------------

    def _drain_idle(self) -> None:
        """What node wrote since the last cell (timers, promises that outlived it): the
        background output of the execution it names."""
        while self._from_node is not None and select.select([self._from_node], [], [], 0)[0]:
            if not self._read_some():
                return
            for message in self._messages():
                self._background(message)

    def _read_some(self) -> bool:
        try:
            chunk = os.read(self._from_node, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            return False
        self._pending += chunk
        return True

    def _messages(self):
        while b"\n" in self._pending:
            line, self._pending = self._pending.split(b"\n", 1)
            try:
                message = json.loads(line.decode("utf-8", "replace"))
            except ValueError:
                continue
            if isinstance(message, dict):
                yield message

    @staticmethod
    def _background(message: dict) -> None:
        if message.get("t") == "out" and isinstance(message.get("d"), str):
            stream = "stderr" if message.get("s") == 2 else "stdout"
            output.send_background(stream, message["d"], message.get("c") or None)

    def _wait_done(self, exec_id: str) -> str:
        poller = select.poll()
        poller.register(self._from_node, select.POLLIN)
        interrupted_at = None
        while True:
            if poller.poll(_CHECK_INTERVAL_MS):
                if not self._read_some():
                    return self._died("")
                for message in self._messages():
                    if message.get("c") != exec_id:
                        self._background(message)
                        continue
                    status = self._handle(message)
                    if status is not None:
                        return status
                continue
            if self._proc.poll() is not None:
                return self._died("")
            if state.interrupted:
                interrupted_at = interrupted_at or time.monotonic()
                if time.monotonic() - interrupted_at >= JS_INTERRUPT_GRACE:
                    _kill(self._proc)
                    self._proc.wait()
                    self._died(f"it did not stop within {JS_INTERRUPT_GRACE} s of the "
                               "interrupt and was ended")
                    return "interrupted"

    @staticmethod
    def _handle(message: dict) -> str | None:
        kind = message.get("t")
        if kind == "out":
            text = message.get("d")
            if isinstance(text, str):
                output.forward(2 if message.get("s") == 2 else 1,
                               text.encode("utf-8", "replace"))
        elif kind == "result" and isinstance(message.get("data"), dict):
            emit({"type": "result", "data": {str(k): str(v) for k, v in message["data"].items()},
                  "metadata": {}})
        elif kind == "error":
            traceback = message.get("traceback")
            emit({"type": "error", "name": str(message.get("name") or "Error"),
                  "value": str(message.get("value") or ""),
                  "traceback": [str(x) for x in traceback] if isinstance(traceback, list) else []})
        elif kind == "done":
            status = message.get("status")
            return status if status in ("ok", "error", "interrupted") else "error"
        return None

    def _died(self, why: str) -> str:
        """node ended in the middle of a cell: the cell's error; the next cell starts anew."""
        code = self._proc.wait()
        self.close()
        self._proc = None
        self._forget()
        what = (f"the JavaScript kernel exited ({_describe_status(code)})"
                f"{'; ' + why if why else ''}; the next JavaScript cell starts a new one "
                f"({_RESET})")
        write_stderr(f"sandlot: {what}")
        if state.interrupted:
            return "interrupted"
        emit({"type": "error", "name": "KernelDied", "value": what, "traceback": []})
        return "error"


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # its own process group: the processes it started too
    except OSError:
        pass


def _describe_status(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:
        return None


def run_js(code: str, typescript: bool) -> str:
    """Runs one cell in the active context's node, started on first use."""
    if state.js is None:
        state.js = JsSession()
    return state.js.run(code, typescript)
