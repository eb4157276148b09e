"""The in-sandbox driver: runs Python cells with IPython and Bash cells in one persistent bash.

Two entry points (see ARCHITECTURE.md, "Processes" and "The execution protocol"):

- ``prepare(setup_code)`` runs once in the zygote, before any fork: it builds the IPython shell,
  wires its display system to the control stream, turns on inline matplotlib, warms the code
  paths every sandbox will use, runs the template's setup code, then freezes the heap so forked
  children share it copy-on-write. It starts no thread: the zygote must be single-threaded to fork.
- ``main(ctrl_fd)`` runs in the forked, jailed child: it speaks the framed JSON protocol on
  ``ctrl_fd`` until the stream closes.

``python -m sandlot_runtime.driver --fd N`` does both without any jail, for tests.

Output: fds 1 and 2 are pipes the server reads. Python's ``sys.stdout``/``sys.stderr`` write
through to them, so prints, C extensions and subprocesses all land in the same pipes. Every frame
is sent after flushing them, and user code goes on only once the server has read an event frame
(see _Channel), so output and events keep the order they were produced in.
"""

from __future__ import annotations

import argparse
import base64
import builtins
import fcntl
import gc
import io
import json
import math
import numbers
import os
import platform
import secrets
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
import traceback
import warnings
from typing import NoReturn

import IPython
from IPython.core.autocall import ExitAutocall
from IPython.core.displayhook import DisplayHook
from IPython.core.displaypub import DisplayPublisher
from IPython.core.error import UsageError
from IPython.core.formatters import DisplayFormatter
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.profiledir import ProfileDir
from traitlets import Type, default
from traitlets.config import Config

# Bash cells are written here (inside the sandbox's private /tmp) and sourced by the session.
BASH_CELL_DIR = "/tmp/.sandlot"
# The bash status pipe is moved to the lowest free fd at or above this number, out of the range
# scripts use for their own redirections (0-9).
BASH_STATUS_FD_MIN = 100
# MIME types whose values are binary: Jupyter carries them as base64 strings.
BINARY_MIME_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "application/pdf"})
# Text-like MIME types that are not under text/.
TEXT_MIME_TYPES = frozenset({"image/svg+xml", "application/javascript"})
# How deep _jsonable follows nested containers before it settles for repr().
MAX_JSON_DEPTH = 64
# The code context that exists from the start and that an execute without "context" runs in.
DEFAULT_CONTEXT = "default"
# How long a restarted or deleted context's bash session gets to exit on EOF before it is killed.
BASH_STOP_GRACE = 0.5


class _State:
    """Everything the driver keeps between calls. One instance, module-level: the signal
    handler, IPython's hooks and the protocol loop all need to see the same values."""

    def __init__(self) -> None:
        self.shell: _Shell | None = None
        self.channel: _Channel | None = None
        self.exec_id: str | None = None
        # SIGINT raises KeyboardInterrupt only while this is true (user Python code runs).
        self.python_running = False
        # The process group a running bash cell lives in; SIGINT is forwarded there.
        self.bash_pgid: int | None = None
        # Set when SIGINT acted on the current execution.
        self.interrupted = False
        # While a frame is being written, an interrupt waits so a frame is never cut in half.
        self.sending = 0
        self.deferred_interrupt = False
        # "cell" from pre_execute to post_execute: tracebacks shown then may be the cell's error.
        self.phase = "idle"
        # Depth of display formatting: tracebacks shown inside it are formatter failures.
        self.formatting = 0
        # (exception, structured traceback) recorded during the cell phase.
        self.tracebacks: list[tuple[BaseException, list[str]]] = []
        # Our stdout/stderr text streams and saved duplicates of the original fds 1 and 2.
        self.stdout: io.TextIOWrapper | None = None
        self.stderr: io.TextIOWrapper | None = None
        self.saved_fds: dict[int, int] = {}
        self.bash: _BashSession | None = None  # the active context's session
        # Code contexts by id (see _Context); the active one's namespace is in the shell.
        self.contexts: dict[str, _Context] = {}
        self.active_context = DEFAULT_CONTEXT
        # What every fresh namespace starts with: the names the template's setup code bound,
        # and the compiler flags after it.
        self.setup_names: dict = {}
        self.base_compile_flags = 0
        self.libc_fflush = None
        self.pid = 0  # the driver's own pid, set by main()
        # The zygote's sys.stdout/sys.stderr, kept referenced so they are never flushed (on
        # garbage collection) into this sandbox's pipes.
        self.inherited_streams: tuple = ()


_state = _State()


# ---------------------------------------------------------------------------------------------
# JSON: nothing that json.dumps (or serde_json on the server) would reject ever reaches it
# ---------------------------------------------------------------------------------------------


def _clean_str(value: str) -> str:
    """A str that encodes as UTF-8. Lone surrogates (from surrogateescape'd bytes or bad
    escapes) become visible backslash escapes instead of crashing the encoder; serde_json
    rejects them even when they are \\u-escaped."""
    if type(value) is not str:
        value = str.__str__(value)
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        # Pairs written as two escapes ("\ud83d\ude00") are one character; join them first.
        value = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
        return value.encode("utf-8", "backslashreplace").decode("utf-8")


def _safe_repr(value: object) -> str:
    try:
        return _clean_str(repr(value))
    except Exception:  # a broken __repr__ must not break the driver
        return f"<unrepresentable {type(value).__name__} object>"


def _safe_str(value: object) -> str:
    try:
        return _clean_str(str(value))
    except Exception:
        return _safe_repr(value)


def _jsonable(value: object, depth: int = 0) -> object:
    """Coerces any object into JSON data: str/int/float/bool/None, lists and str-keyed dicts.
    Never raises; whatever it cannot convert becomes its repr."""
    try:
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, str):
            return _clean_str(value)
        if isinstance(value, int):
            # Beyond 64 bits serde_json would lose it, and str() of a huge int can raise.
            return int(value) if value.bit_length() <= 64 else f"<int of {value.bit_length()} bits>"
        if isinstance(value, float):
            return float(value) if math.isfinite(value) else repr(float(value))
        if depth >= MAX_JSON_DEPTH:
            return _safe_repr(value)
        if isinstance(value, dict):
            return {
                (_clean_str(k) if isinstance(k, str) else _safe_str(k)): _jsonable(v, depth + 1)
                for k, v in list(value.items())
            }
        if isinstance(value, (list, tuple, set, frozenset)):
            return [_jsonable(v, depth + 1) for v in list(value)]
        if isinstance(value, (bytes, bytearray, memoryview)):
            return base64.b64encode(bytes(value)).decode("ascii")
        if isinstance(value, numbers.Integral):  # numpy integers and friends
            return _jsonable(int(value), depth + 1)
        if isinstance(value, numbers.Real):
            return _jsonable(float(value), depth + 1)
        tolist = getattr(value, "tolist", None)  # numpy arrays
        if callable(tolist):
            return _jsonable(tolist(), depth + 1)
    except Exception:  # (not BaseException: an interrupt must still get through)
        pass
    return _safe_repr(value)


def _mime_bundle(data: object) -> dict:
    """A Jupyter MIME bundle: text types as str, binary types as base64 str, JSON types as JSON."""
    if not isinstance(data, dict):
        return {"text/plain": _safe_repr(data)}
    bundle = {}
    for key, value in list(data.items()):
        mime = _safe_str(key)
        textual = mime.startswith("text/") or mime in TEXT_MIME_TYPES
        if isinstance(value, (bytes, bytearray, memoryview)):
            raw = bytes(value)
            bundle[mime] = _clean_str(raw.decode("utf-8", "replace")) if textual else \
                base64.b64encode(raw).decode("ascii")
        elif mime in BINARY_MIME_TYPES and isinstance(value, str):
            # Some encoders wrap base64 in newlines; strict decoders reject them.
            bundle[mime] = "".join(_clean_str(value).split())
        elif textual and not isinstance(value, str):
            bundle[mime] = _safe_str(value)
        else:
            bundle[mime] = _jsonable(value)
    return bundle


def _encode_frame(message: dict) -> bytes:
    body = json.dumps(_jsonable(message), ensure_ascii=False, allow_nan=False,
                      separators=(",", ":")).encode("utf-8")
    return len(body).to_bytes(4, "little") + body


# ---------------------------------------------------------------------------------------------
# The control stream
# ---------------------------------------------------------------------------------------------


class _Channel:
    """Frames on the control stream: 4-byte little-endian length, then a UTF-8 JSON object.

    Ordering: output written before an event must reach the server before the event, and
    output written after it, after. Flushing before each frame gives the first. For the second,
    the driver waits until the server has read an event frame before user code runs on; a
    server that drains the pipes when the control stream becomes readable, before reading the
    frame, then never sees later output early."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._can_wait = True  # cleared if the fd cannot report its unread bytes

    def recv(self) -> dict | None:
        """The next message, or None when the server closed the stream."""
        header = self._read_exact(4)
        if header is None:
            return None
        body = self._read_exact(int.from_bytes(header, "little"))
        if body is None:
            return None
        message = json.loads(body.decode("utf-8", "replace"))
        if not isinstance(message, dict):
            raise ValueError("a frame must hold a JSON object")
        return message

    def send(self, message: dict, wait_until_read: bool = True) -> None:
        if os.getpid() != _state.pid:
            return  # a process that user code forked: the control stream is not its to use
        _flush_output()
        frame = _encode_frame(message)
        _state.sending += 1
        try:
            self._write_all(frame)
            if wait_until_read:
                self._wait_until_read()
        except OSError:
            _exit_driver()  # the server is gone; nobody is left to report to
        finally:
            _state.sending -= 1
        if _state.deferred_interrupt and _state.sending == 0 and _state.python_running:
            _state.deferred_interrupt = False
            raise KeyboardInterrupt

    def _read_exact(self, size: int) -> bytes | None:
        data = bytearray()
        while len(data) < size:
            part = os.read(self.fd, size - len(data))
            if not part:
                return None
            data += part
        return bytes(data)

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]

    def _wait_until_read(self) -> None:
        # SIOCOUTQ (same number as TIOCOUTQ) on a Unix stream socket: bytes the peer has not
        # read yet. The server reads within microseconds; back off so a slow one costs no CPU.
        delay = 0.00002
        while self._can_wait:
            try:
                unread = struct.unpack("i", fcntl.ioctl(self.fd, termios.TIOCOUTQ, bytes(4)))[0]
            except OSError:
                self._can_wait = False  # not a socket: best effort ordering only
                return
            if unread <= 0:
                return
            time.sleep(delay)
            delay = min(delay * 2, 0.002)


def _emit(message: dict) -> None:
    """Sends an event of the running execution. Before main() (in the zygote) there is no one
    to send to, and setup code's displays are dropped."""
    if _state.channel is None:
        return
    kind = message.pop("type")
    # A cell's result comes last, after everything it printed: nothing can follow it that the
    # server must order after it, so the round trip of waiting until it is read is skipped.
    _state.channel.send({"type": kind, "id": _state.exec_id, **message},
                        wait_until_read=kind != "result")


# ---------------------------------------------------------------------------------------------
# stdout and stderr
# ---------------------------------------------------------------------------------------------


class _FdWriter(io.FileIO):
    """Unbuffered writer that finishes short writes: a signal can interrupt a large write to a
    pipe part-way, and TextIOWrapper would silently drop the rest."""

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        written = 0
        while written < len(view):
            count = super().write(view[written:])
            if count is None:  # O_NONBLOCK pipe is full: wait until it drains
                select.select([], [self.fileno()], [])
                continue
            written += count
        return written


def _open_text_stream(fd: int) -> io.TextIOWrapper:
    # write_through + line_buffering over an unbuffered writer: output streams as produced.
    return io.TextIOWrapper(_FdWriter(fd, "w", closefd=False), encoding="utf-8",
                            errors="backslashreplace", line_buffering=True, write_through=True)


def _flush_output() -> None:
    for stream in (sys.stdout, sys.stderr, _state.stdout, _state.stderr):
        try:
            stream.flush()
        except Exception:  # closed or replaced by user code: nothing to flush
            pass
    if _state.libc_fflush is not None:
        _state.libc_fflush(None)  # C stdio buffers of extensions (printf into a pipe)


def _same_file(fd_a: int, fd_b: int) -> bool:
    try:
        a, b = os.fstat(fd_a), os.fstat(fd_b)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _save_output_fds() -> None:
    """Keeps close-on-exec duplicates of fds 1 and 2 so a cell that closes or redirects them
    does not cut off every later cell."""
    for fd in (1, 2):
        try:
            _state.saved_fds[fd] = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
        except OSError:
            pass
        try:
            os.set_blocking(fd, True)  # _FdWriter copes either way; blocking is simpler
        except OSError:
            pass


def _restore_output() -> None:
    """Puts fds 1/2 and sys.stdout/sys.stderr back the way main() set them up."""
    for fd, saved in _state.saved_fds.items():
        if not _same_file(fd, saved):
            try:
                os.dup2(saved, fd)
            except OSError:
                pass
    if _state.stdout is None or _state.stdout.closed:
        _state.stdout = _open_text_stream(1)
    if _state.stderr is None or _state.stderr.closed:
        _state.stderr = _open_text_stream(2)
    sys.stdout = sys.__stdout__ = _state.stdout
    sys.stderr = sys.__stderr__ = _state.stderr


def _write_stderr(text: str) -> None:
    try:
        _state.stderr.write(text if text.endswith("\n") else text + "\n")
    except Exception:  # fd 2 gone: the message has nowhere to go
        pass


# ---------------------------------------------------------------------------------------------
# IPython: the shell and the hooks that turn its output into events
# ---------------------------------------------------------------------------------------------


def _trim_driver_frames(tb) -> None:
    """Cuts trailing traceback entries that are this file's own frames (the SIGINT handler that
    raised KeyboardInterrupt, a write to a closed fd): tracebacks point at the user's code."""
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    keep = len(entries)
    while keep > 1 and entries[keep - 1].tb_frame.f_code.co_filename == _THIS_FILE:
        keep -= 1
    if keep < len(entries):
        entries[keep - 1].tb_next = None


def _skip_ipython_frames(tb):
    """The traceback from the first frame that is not IPython's (run_code's exec)."""
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_IPYTHON_DIR):
        tb = tb.tb_next
    return tb


def _has_exception_group(value: BaseException | None, depth: int = 0) -> bool:
    if value is None or depth > 100:
        return False
    if _EXCEPTION_GROUP is not None and isinstance(value, _EXCEPTION_GROUP):
        return True
    return _has_exception_group(value.__context__, depth + 1)


class _DisplayPublisher(DisplayPublisher):
    """display(), and figures flushed after a cell, become display_data events."""

    def publish(self, data, metadata=None, source=None, *, transient=None, update=False,
                **kwargs) -> None:
        _emit({"type": "display_data", "data": _mime_bundle(data),
               "metadata": _jsonable(metadata or {})})

    def clear_output(self, wait=False) -> None:
        pass  # the protocol has no clear_output; the default writes terminal escapes


class _DisplayHook(DisplayHook):
    """The value of a cell's last expression becomes the result event."""

    def write_output_prompt(self) -> None:
        pass  # no "Out[n]:" on stdout

    def write_format_data(self, format_dict, md_dict=None) -> None:
        _emit({"type": "result", "data": _mime_bundle(format_dict),
               "metadata": _jsonable(md_dict or {}), "execution_count": self.prompt_count})

    def log_output(self, format_dict) -> None:
        pass  # IPython would keep every bundle (PNGs included) in memory for %history -o

    def finish_displayhook(self) -> None:
        self._is_active = False  # the default writes a separator to stdout


# Builtin scalars have no rich representation in IPython: only text/plain ever comes out.
_PLAIN_ONLY_TYPES = (int, float, complex, bool, str, bytes, type(None))


class _DisplayFormatter(DisplayFormatter):
    """Counts formatting depth (tracebacks inside are formatter failures, not the cell's error)
    and guarantees a text/plain when a repr raised."""

    def _plain_only(self, obj, include, exclude):
        """For a builtin scalar, the plain formatter alone, unless someone registered a printer
        for its type: the other eleven formatters would each find nothing, at about 10 us each."""
        kind = type(obj)
        if include is not None or exclude is not None or kind not in _PLAIN_ONLY_TYPES:
            return None
        others = [f for mime, f in self.formatters.items() if mime != "text/plain"]
        others += [self.ipython_display_formatter, self.mimebundle_formatter]
        key = (kind.__module__, kind.__name__)
        for f in others:
            if kind in getattr(f, "type_printers", {}) or key in getattr(f, "deferred_printers", {}):
                return None
        text = self.formatters["text/plain"](obj)
        return None if text is None else ({"text/plain": text}, {})

    def format(self, obj, include=None, exclude=None):
        _state.formatting += 1
        try:
            fast = self._plain_only(obj, include, exclude)
            if fast is not None:
                return fast
            data, metadata = super().format(obj, include=include, exclude=exclude)
        finally:
            _state.formatting -= 1
        if "text/plain" not in data and _wants_plain(obj, include, exclude):
            data["text/plain"] = f"<{type(obj).__qualname__} object at {id(obj):#x}>"
        return data, metadata


def _wants_plain(obj, include, exclude) -> bool:
    """Whether a missing text/plain means its formatter failed (not excluded by the caller, not
    an object that displays itself through _ipython_display_)."""
    if (include is not None and "text/plain" not in include) or \
            (exclude is not None and "text/plain" in exclude):
        return False
    try:
        return not callable(getattr(obj, "_ipython_display_", None))
    except Exception:
        return True


class _Exit(ExitAutocall):
    """exit()/quit() raise SystemExit like plain Python, which the driver reports instead of
    ending the sandbox (IPython's default only sets a flag nobody reads here)."""

    def __call__(self, code=None):
        raise SystemExit() if code is None else SystemExit(code)


class _Shell(InteractiveShell):
    displayhook_class = Type(_DisplayHook)
    display_pub_class = Type(_DisplayPublisher)

    @default("exiter")
    def _exiter_default(self):
        return _Exit(self)

    def init_display_formatter(self) -> None:
        self.display_formatter = _DisplayFormatter(parent=self)
        self.configurables.append(self.display_formatter)

    def ask_exit(self) -> None:
        raise SystemExit()

    def enable_gui(self, gui=None) -> None:
        # Inline figures need no event loop; a sandbox has no display for any other.
        if gui not in (None, "inline"):
            raise UsageError(f"GUI event loops ({gui}) are not available in a sandbox")

    def showtraceback(self, exc_tuple=None, *args, **kwargs):
        try:
            etype, value, tb = self._get_exc_info(exc_tuple)
        except ValueError:
            return super().showtraceback(exc_tuple, *args, **kwargs)
        _trim_driver_frames(tb)
        if _has_exception_group(value) and not kwargs.get("exception_only"):
            # IPython prints these with traceback.print_exc() (its own frames included) and
            # hands nothing to _showtraceback; format them the plain-Python way instead.
            stb = traceback.format_exception(etype, value, _skip_ipython_frames(tb))
            return self._showtraceback(etype, value, stb)
        return super().showtraceback(exc_tuple, *args, **kwargs)

    def _showtraceback(self, etype, evalue, stb) -> None:
        # During the cell, a traceback is probably the cell's error: keep it for the error
        # event. Anything else (a failing _repr_html_, a figure that cannot render, a
        # post-execute hook) is not fatal and goes to stderr where it happened.
        if _state.phase == "cell" and _state.formatting == 0:
            _state.tracebacks.append((evalue, list(stb)))
        else:
            _write_stderr(self.InteractiveTB.stb2text(stb))


def _on_pre_execute() -> None:
    _state.phase = "cell"


def _on_post_execute() -> None:
    _state.phase = "post"


def _make_shell() -> _Shell:
    config = Config()
    # No SQLite, no history-saving thread: the zygote must stay single-threaded.
    config.HistoryManager.enabled = False
    config.InteractiveShell.colors = "nocolor"
    config.InteractiveShell.autocall = 0
    # ipython_dir="" equals the trait default, so nothing is created on disk, and a bare
    # ProfileDir has no location: IPython never touches HOME or IPYTHONDIR.
    shell = _Shell.instance(config=config, ipython_dir="", profile_dir=ProfileDir())
    # !cmd runs through the shell at the fd level (the default uses pexpect and a pty).
    shell.system = shell.system_raw
    shell.events.register("pre_execute", _on_pre_execute)
    shell.events.register("post_execute", _on_post_execute)
    return shell


def _enable_inline_figures(shell: _Shell) -> None:
    """Matplotlib figures become image/png display_data after each cell (Agg underneath)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return  # a template without matplotlib
    shell.enable_matplotlib("inline")


def _warm_up(shell: _Shell) -> None:
    """Runs once in the zygote what every sandbox would otherwise do on its first cell
    (compile a cell, render a PNG, an HTML table, a traceback), so the lazy imports and caches
    are shared copy-on-write instead of paid per sandbox."""
    shell.run_cell("None", store_history=False, silent=True)
    shell.logger  # noqa: B018 - built lazily by the first non-silent cell
    if "matplotlib" in sys.modules:
        from matplotlib.figure import Figure

        figure = Figure(figsize=(1, 1))
        figure.add_subplot().plot([0, 1], [0, 1])
        shell.display_formatter.format(figure)
    if "pandas" in sys.modules:
        shell.display_formatter.format(sys.modules["pandas"].DataFrame({"a": [1]}))
    # A failing cell: the traceback machinery parses IPython's own run_code module (tens of
    # milliseconds and megabytes) and caches it.
    shell.run_cell("1 / 0", store_history=False, silent=True)
    _state.tracebacks.clear()
    _state.phase = "idle"


def _run_setup(shell: _Shell, setup_code: str) -> None:
    result = shell.run_cell(setup_code, store_history=False, silent=True)
    _state.phase = "idle"
    recorded, _state.tracebacks = _state.tracebacks, []
    if not result.success:
        error = result.error_before_exec or result.error_in_exec
        text = "".join(shell.InteractiveTB.stb2text(stb) for _, stb in recorded)
        raise RuntimeError(f"the template's setup code failed: {type(error).__name__}: "
                           f"{error}\n{text}") from error


def _load_libc_fflush():
    try:
        import ctypes

        fflush = ctypes.CDLL(None).fflush
        fflush.argtypes = [ctypes.c_void_p]
        return fflush
    except Exception:
        return None


def _check_single_threaded() -> None:
    python_threads = threading.active_count()
    if python_threads != 1:
        raise RuntimeError(f"prepare() left {python_threads} Python threads running; "
                           "the zygote must be single-threaded to fork")
    try:
        native_threads = len(os.listdir("/proc/self/task"))
    except OSError:
        return
    if native_threads != 1:
        raise RuntimeError(f"the process has {native_threads} native threads after prepare(); "
                           "cap BLAS/OpenMP pools (OPENBLAS_NUM_THREADS=1, OMP_NUM_THREADS=1, "
                           "MKL_NUM_THREADS=1) before importing numpy")


def prepare(setup_code: str | None = None) -> None:
    """Builds and warms the IPython shell, once, in the zygote. Starts no thread."""
    if _state.shell is not None:
        raise RuntimeError("prepare() already ran in this process")
    # IPython warns this after every SystemExit; here exiting is reported, not done.
    warnings.filterwarnings("ignore", message="To exit: use 'exit', 'quit', or Ctrl-D.")
    shell = _make_shell()
    _state.shell = shell
    _enable_inline_figures(shell)
    _warm_up(shell)
    _state.libc_fflush = _load_libc_fflush()
    if setup_code:
        _run_setup(shell, setup_code)
    _init_contexts(shell)
    _flush_output()  # a buffer left here would be copied into every sandbox
    gc.collect()
    gc.freeze()  # the heap so far never moves again: children share it copy-on-write
    _check_single_threaded()


# ---------------------------------------------------------------------------------------------
# Running Python cells
# ---------------------------------------------------------------------------------------------


def _on_sigint(signum, frame) -> None:
    """SIGINT from the server: interrupt what runs, and never the driver itself."""
    if _state.bash_pgid is not None:
        _state.interrupted = True
        try:
            os.killpg(_state.bash_pgid, signal.SIGINT)
        except OSError:
            pass
        return
    if not _state.python_running:
        return  # idle, or sending the last frames of a cell: nothing to interrupt
    _state.interrupted = True
    if _state.sending:
        _state.deferred_interrupt = True  # raised once the frame is out (see _Channel.send)
        return
    raise KeyboardInterrupt


def _error_event(error: BaseException, recorded) -> dict:
    stb = next((stb for value, stb in recorded if value is error), None)
    if stb is None or isinstance(error, SystemExit):
        # IPython printed it itself (UsageError), or it is a SystemExit, whose IPython text
        # only points at %tb: the exception line says it all.
        stb = traceback.format_exception_only(type(error), error)
    return {"type": "error", "name": type(error).__name__, "value": _safe_str(error),
            "traceback": [_clean_str(line) for line in stb]}


def _run_python(code: str) -> str:
    """Runs one cell; returns its status. The error, if any, is sent as an event here."""
    shell = _state.shell
    _state.tracebacks = []
    escaped: BaseException | None = None
    result = None
    _state.python_running = True
    try:
        try:
            result = shell.run_cell(code, store_history=True)
        finally:
            # Straight after run_cell with no call in between: a SIGINT handled later sees
            # python_running false and is ignored.
            _state.python_running = False
    except KeyboardInterrupt as exc:  # landed in IPython's machinery, outside run_code
        escaped = exc
    _state.phase = "idle"
    recorded, _state.tracebacks = _state.tracebacks, []

    error = escaped if result is None else (result.error_before_exec or result.error_in_exec)
    for value, stb in recorded:
        if value is not error:  # shown but not what ended the cell (%run, showtraceback())
            _write_stderr(shell.InteractiveTB.stb2text(stb))
    if error is not None:
        _emit(_error_event(error, recorded))
    if _state.interrupted or isinstance(error, KeyboardInterrupt):
        return "interrupted"
    return "ok" if error is None else "error"


# ---------------------------------------------------------------------------------------------
# Running Bash cells: one persistent session per sandbox
# ---------------------------------------------------------------------------------------------


class _BashSession:
    """A bash reading commands from a pipe. Each cell is written to a file and `source`d, so
    cwd, variables and functions persist; the exit status comes back on a dedicated pipe.

    bash runs in its own process group so an interrupt can reach the running command without
    touching the driver; `trap 'return 130' INT` makes it abandon the sourced cell (at top
    level or in a loop; inside a shell function it returns from that function) and keep the
    session."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._status_r = -1
        self._status_fd = -1
        self._cells = 0

    def run(self, code: str) -> tuple[str, int]:
        if self._proc is None:
            self._start()
        self._cells += 1
        path = self._write_cell(code)
        token = secrets.token_hex(8)  # status lines from a cell's own writes cannot match
        command = (f"builtin source {path} </dev/null; "
                   f"builtin printf '{token} %d\\n' \"$?\" >&{self._status_fd}\n")
        _state.bash_pgid = self._proc.pid
        try:
            try:
                self._proc.stdin.write(command.encode())
                self._proc.stdin.flush()
            except OSError:  # bash is gone
                exit_code = None
            else:
                exit_code = self._wait_status(token)
        finally:
            _state.bash_pgid = None
            _remove(path)
        if exit_code is None:
            exit_code = self._reap()
        if _state.interrupted:
            return "interrupted", exit_code
        return ("ok" if exit_code == 0 else "error"), exit_code

    def close(self) -> None:
        if self._proc is not None:
            try:
                self._proc.stdin.close()
            except OSError:
                pass

    def _start(self) -> None:
        bash = shutil.which("bash") or "/bin/bash"
        read_end, write_end = os.pipe()
        status_fd = fcntl.fcntl(write_end, fcntl.F_DUPFD_CLOEXEC, BASH_STATUS_FD_MIN)
        os.close(write_end)
        try:
            # stdout/stderr inherit fds 1/2: bash output streams at the fd level like ours.
            self._proc = subprocess.Popen([bash, "--noprofile", "--norc"], stdin=subprocess.PIPE,
                                          pass_fds=(status_fd,), start_new_session=True)
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(status_fd)
        self._status_r, self._status_fd = read_end, status_fd
        # 2>/dev/null: a SIGINT racing the end of a cell finds bash idle, where `return` fails.
        self._proc.stdin.write(b"trap 'return 130 2>/dev/null' INT\n")
        self._proc.stdin.flush()

    def _write_cell(self, code: str) -> str:
        os.makedirs(BASH_CELL_DIR, mode=0o700, exist_ok=True)
        # The pid keeps drivers that share a /tmp (tests, no jail) from sourcing each other's cells.
        path = f"{BASH_CELL_DIR}/cell-{os.getpid()}-{self._cells}.sh"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with open(fd, "wb") as f:
            f.write(code.encode("utf-8", "replace"))
            if not code.endswith("\n"):
                f.write(b"\n")
        return path

    def _wait_status(self, token: str) -> int | None:
        """The cell's exit status, or None if bash exited. Polls for bash's death as well: a
        background job can hold the status pipe open after bash is gone."""
        expected = token.encode()
        pending = b""
        poller = select.poll()
        poller.register(self._status_r, select.POLLIN)
        while True:
            if poller.poll(100):
                chunk = os.read(self._status_r, 4096)
                if not chunk:
                    return None
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    fields = line.split()
                    if len(fields) == 2 and fields[0] == expected:
                        return int(fields[1])
            elif self._proc.poll() is not None:
                return None

    def _reap(self) -> int:
        code = self._proc.wait()
        if code < 0:
            code = 128 - code  # killed by a signal: report it the way shells do
        self.close()
        os.close(self._status_r)
        self._proc = None
        _write_stderr(f"sandlot: the bash session exited with status {code}; the next bash cell "
                      "starts a new one (working directory and variables are reset)")
        return code


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _run_bash(code: str) -> tuple[str, int]:
    if _state.bash is None:
        _state.bash = _BashSession()
    return _state.bash.run(code)


# ---------------------------------------------------------------------------------------------
# Code contexts: independent namespaces (and Bash sessions) in one shell and one process
# ---------------------------------------------------------------------------------------------


class _Context:
    """One code context. The active context's state lives in the shell (and its Bash session in
    _state.bash); the others' is parked here. A context whose user_ns is None has never been
    active: its namespace is built the first time it is installed."""

    def __init__(self) -> None:
        self.user_module = None
        self.user_ns: dict | None = None
        self.user_ns_hidden: dict = {}
        self.execution_count = 1
        self.unders = ("", "", "")  # the displayhook's _, __, ___
        self.inputs = ("", "", "", "")  # the history manager's _i00, _i, _ii, _iii
        self.input_hist_parsed = [""]
        self.input_hist_raw = [""]
        self.output_hist: dict = {}
        self.output_hist_reprs: dict = {}
        self.dir_hist: list = []
        self.compile_flags = _state.base_compile_flags
        self.bash: _BashSession | None = None


def _init_contexts(shell: _Shell) -> None:
    """Records what a fresh namespace starts with and makes the shell's state "default"."""
    hidden = shell.user_ns_hidden
    _state.setup_names = {
        name: value for name, value in shell.user_ns.items()
        if name not in hidden and name not in ("_", "__", "___")
        and not (name.startswith("__") and name.endswith("__"))
    }
    _state.base_compile_flags = shell.compile.flags
    _state.contexts = {DEFAULT_CONTEXT: _Context()}
    _state.active_context = DEFAULT_CONTEXT


def _park(ctx: _Context) -> None:
    """Moves the shell's (active) state into ctx."""
    shell = _state.shell
    history = shell.history_manager
    dh = shell.displayhook
    ctx.user_module, ctx.user_ns = shell.user_module, shell.user_ns
    ctx.user_ns_hidden = shell.user_ns_hidden
    ctx.execution_count = shell.execution_count
    ctx.unders = (dh._, dh.__, dh.___)  # (no name mangling outside a class body)
    ctx.inputs = (history._i00, history._i, history._ii, history._iii)
    # The history containers are referenced by every namespace (In, Out, _ih, _oh, _dh) and
    # traitlets would copy a replacement: their contents move, the objects stay.
    ctx.input_hist_parsed = list(history.input_hist_parsed)
    ctx.input_hist_raw = list(history.input_hist_raw)
    ctx.output_hist = dict(history.output_hist)
    ctx.output_hist_reprs = dict(history.output_hist_reprs)
    ctx.dir_hist = list(history.dir_hist)
    ctx.compile_flags = shell.compile.flags
    ctx.bash = _state.bash


def _install(ctx: _Context) -> None:
    """Puts ctx's state into the shell, building a fresh namespace if it has none yet."""
    shell = _state.shell
    history = shell.history_manager
    dh = shell.displayhook
    history.input_hist_parsed[:] = ctx.input_hist_parsed
    history.input_hist_raw[:] = ctx.input_hist_raw
    history.output_hist.clear()
    history.output_hist.update(ctx.output_hist)
    history.output_hist_reprs.clear()
    history.output_hist_reprs.update(ctx.output_hist_reprs)
    history.dir_hist[:] = ctx.dir_hist or [_cwd()]
    history._i00, history._i, history._ii, history._iii = ctx.inputs
    dh._, dh.__, dh.___ = ctx.unders
    shell.execution_count = ctx.execution_count
    shell.compile.flags = ctx.compile_flags
    shell.last_execution_result = None
    shell.last_execution_succeeded = True
    fresh = ctx.user_ns is None
    if fresh:
        ctx.user_module, ctx.user_ns = shell.prepare_user_module()
        ctx.user_ns_hidden = {}
    shell.user_module, shell.user_ns = ctx.user_module, ctx.user_ns
    shell.user_ns_hidden = ctx.user_ns_hidden
    shell.ns_table["user_global"] = shell.user_module.__dict__
    shell.ns_table["user_local"] = shell.user_ns
    sys.modules["__main__"] = shell.user_module  # pickle finds the context's classes
    if fresh:
        shell.init_user_ns()
        for name, value in _state.setup_names.items():
            shell.user_ns.setdefault(name, value)
    _state.bash = ctx.bash
    # Parked state lives in ctx alone from now on.
    ctx.input_hist_parsed, ctx.input_hist_raw = [""], [""]
    ctx.output_hist, ctx.output_hist_reprs, ctx.dir_hist = {}, {}, []
    ctx.bash = None


def _cwd() -> str:
    try:
        return os.getcwd()
    except OSError:  # removed by user code
        return "/"


def _enter_context(name: object) -> str | None:
    """Makes the named context (default when None) active; the error text if there is none."""
    if name is None:
        name = DEFAULT_CONTEXT
    if not isinstance(name, str) or name not in _state.contexts:
        return f"no context {_safe_str(name)!r} in this sandbox"
    _switch_context(name)
    return None


def _switch_context(name: str) -> None:
    if name == _state.active_context:
        return
    _park(_state.contexts[_state.active_context])
    _install(_state.contexts[name])
    _state.active_context = name


def _stop_bash(session: _BashSession | None) -> None:
    """Ends a context's Bash session: EOF first, then SIGKILL to its process group."""
    if session is None or session._proc is None:
        return
    proc = session._proc
    session.close()
    try:
        proc.wait(timeout=BASH_STOP_GRACE)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.close(session._status_r)
    except OSError:
        pass
    session._proc = None


def _discard_context(ctx: _Context) -> None:
    """Drops a context's state: its Bash session ends, its objects are released."""
    _stop_bash(ctx.bash)
    ctx.bash = None
    ctx.user_module = ctx.user_ns = None
    ctx.output_hist = {}
    gc.collect()


def _context_op(kind: str, message: dict) -> None:
    """Creates, restarts or deletes a context; always answers with one context_done."""
    name = message.get("context")
    error = None
    try:
        if not isinstance(name, str) or not name:
            error = "context must be a non-empty string"
        elif kind == "context_create":
            if name in _state.contexts:
                error = f"context {name!r} already exists"
            else:
                _state.contexts[name] = _Context()
        elif name not in _state.contexts:
            error = f"no context {name!r}"
        elif kind == "context_restart":
            old, fresh = _state.contexts[name], _Context()
            _state.contexts[name] = fresh
            if name == _state.active_context:
                old.bash, _state.bash = _state.bash, None
                _install(fresh)  # replaces the shell's namespace and history
            _discard_context(old)
        elif name == DEFAULT_CONTEXT:
            error = "the default context cannot be deleted"
        else:
            _switch_context(DEFAULT_CONTEXT)
            _discard_context(_state.contexts.pop(name))
    except Exception as exc:  # a driver bug: report it, keep the sandbox
        _write_stderr("sandlot: internal driver error\n" + traceback.format_exc())
        error = f"{type(exc).__name__}: {_safe_str(exc)}"
    reply = {"type": "context_done", "context": name if isinstance(name, str) else None,
             "ok": error is None}
    if error is not None:
        reply["error"] = error
    _state.channel.send(reply, wait_until_read=False)


# ---------------------------------------------------------------------------------------------
# Workspace changes: which regular files a cell created or modified (the server keeps them as
# artifacts, reading them itself through fd-relative paths; see ARCHITECTURE.md)
# ---------------------------------------------------------------------------------------------

# The workspace the driver watches; tests without a jail point it elsewhere.
WORKSPACE = os.environ.get("SANDLOT_WORKSPACE") or "/workspace"
# Most directory entries a snapshot visits; past it a cell's changes are not reported.
MAX_SNAPSHOT_ENTRIES = 20_000
# Most changes one done frame lists.
MAX_CHANGES = 200
# A file modified this close to a snapshot may be modified again within the same timestamp
# tick without its stat changing ("racy" in git's terms); small ones are checksummed too.
RACY_NS = 50_000_000
RACY_MAX_BYTES = 4 << 20
RACY_TOTAL_BYTES = 16 << 20


def _checksum(path: str) -> int | None:
    import zlib

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        crc = 0
        while chunk := os.read(fd, 1 << 20):
            crc = zlib.crc32(chunk, crc)
        return crc
    except OSError:
        return None
    finally:
        os.close(fd)


def _snapshot(root: str = "", racy: bool = False) -> dict | None:
    """Regular files under the workspace, not following symlinks: relative path → (size,
    mtime_ns, inode, checksum or None). With `racy`, files modified within RACY_NS of now are
    checksummed while small enough. None when the workspace holds more than
    MAX_SNAPSHOT_ENTRIES entries or cannot be read."""
    root = root or WORKSPACE
    files: dict = {}
    seen = 0
    racy_budget = RACY_TOTAL_BYTES if racy else 0
    now = time.time_ns()
    pending = [(root, "")]
    try:
        while pending:
            path, rel = pending.pop()
            try:
                it = os.scandir(path)
            except OSError:
                continue  # unreadable or vanished directory: its files are not reported
            with it:
                for entry in it:
                    seen += 1
                    if seen > MAX_SNAPSHOT_ENTRIES:
                        return None
                    name = rel + entry.name
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            pending.append((entry.path, name + "/"))
                        elif entry.is_file(follow_symlinks=False):
                            st = entry.stat(follow_symlinks=False)
                            crc = None
                            if (st.st_size <= min(racy_budget, RACY_MAX_BYTES)
                                    and now - st.st_mtime_ns < RACY_NS):
                                racy_budget -= st.st_size
                                crc = _checksum(entry.path)
                            files[name] = (st.st_size, st.st_mtime_ns, st.st_ino, crc)
                    except OSError:
                        continue
    except OSError:
        return None
    return files


def _safe_snapshot(racy: bool = False) -> dict | None:
    try:
        return _snapshot(racy=racy)
    except Exception:  # a driver bug must not cost the cell its done frame
        return None


def _changes(before: dict | None, after: dict | None) -> dict:
    """The fields the done frame gets: `changes`, and `changes_truncated` when incomplete."""
    if before is None or after is None:
        return {"changes": [], "changes_truncated": True}
    changes = []
    for name in sorted(after):
        size, mtime, ino, _crc = after[name]
        old = before.get(name)
        if old is None:
            kind = "created"
        elif old[:3] != (size, mtime, ino):
            kind = "modified"
        elif old[3] is not None and _checksum(os.path.join(WORKSPACE, name)) != old[3]:
            kind = "modified"
        else:
            continue
        if len(changes) >= MAX_CHANGES:
            return {"changes": changes, "changes_truncated": True}
        changes.append({"path": _clean_str(name), "size": size, "change": kind})
    return {"changes": changes}


# ---------------------------------------------------------------------------------------------
# The protocol loop
# ---------------------------------------------------------------------------------------------


def _execute(message: dict) -> None:
    """Runs one execute request and always answers with exactly one done."""
    _state.exec_id = message.get("id")
    _state.interrupted = False
    _state.deferred_interrupt = False
    status, exit_code = "error", None
    before = _safe_snapshot(racy=True)
    try:
        _restore_output()
        code, language = message.get("code"), message.get("language") or "python"
        if not isinstance(code, str):
            _emit({"type": "error", "name": "ValueError", "value": "code must be a string",
                   "traceback": []})
        elif (problem := _enter_context(message.get("context"))) is not None:
            _emit({"type": "error", "name": "ValueError", "value": problem, "traceback": []})
        elif language == "python":
            status = _run_python(code)
        elif language == "bash":
            status, exit_code = _run_bash(code)
        else:
            _emit({"type": "error", "name": "ValueError",
                   "value": f"unsupported language {_safe_str(language)}", "traceback": []})
    except KeyboardInterrupt:
        status = "interrupted"
    except Exception:  # a driver bug: report it, keep the sandbox
        _write_stderr("sandlot: internal driver error\n" + traceback.format_exc())
    if os.getpid() != _state.pid:
        os._exit(0)  # a child that user code forked (os.fork()) and that fell out of the cell
    changes = _changes(before, None if before is None else _safe_snapshot())
    _state.channel.send({"type": "done", "id": _state.exec_id, "status": status,
                         "exit_code": exit_code, **changes}, wait_until_read=False)
    _state.exec_id = None


def _serve(channel: _Channel) -> None:
    while True:
        try:
            message = channel.recv()
        except (ValueError, UnicodeError) as exc:  # framing stays in sync; skip the frame
            _write_stderr(f"sandlot: ignoring a malformed frame: {exc}")
            continue
        if message is None:
            return
        kind = message.get("type")
        if kind == "execute":
            _execute(message)
        elif kind == "warm":
            _warm()
        elif kind in ("context_create", "context_restart", "context_delete"):
            _context_op(kind, message)
        elif kind == "env":
            # The creator's environment variables come on the sandbox's own channel, never
            # through the zygote, so no other sandbox's memory ever holds them.
            env = message.get("env")
            if isinstance(env, dict):
                os.environ.update({str(k): str(v) for k, v in env.items()})


def _precise_sleeps() -> None:
    """The default timer slack (50 us) would stretch every short wait for the server."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(29, 1000, 0, 0, 0)  # PR_SET_TIMERSLACK, 1 us
    except Exception:
        pass


def _warm() -> None:
    """Runs a throwaway cell before any client does, so a pooled sandbox has already paid for
    the pages its first cell touches. Leaves no history and no output."""
    try:
        _state.shell.run_cell("pass", store_history=False, silent=True)
    except BaseException:  # warming must never break the sandbox
        pass


def _exit_driver() -> NoReturn:
    _flush_output()
    if _state.bash is not None:
        _state.bash.close()  # bash reads EOF and exits
    for ctx in _state.contexts.values():
        if ctx.bash is not None:
            ctx.bash.close()
    os._exit(0)


def _adopt_sandbox() -> None:
    """Undoes what the child inherited from the zygote but must not share with it."""
    _state.pid = os.getpid()
    # Every sandbox is a fork of the same zygote: numpy's global generator would hand all of
    # them the same numbers. (The random module reseeds itself after fork.)
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        try:
            numpy_random.seed()
        except Exception:
            pass
    _state.shell.home_dir = os.path.expanduser("~")  # %cd with no argument: the sandbox's HOME


def main(ctrl_fd: int) -> NoReturn:
    """Serves the execution protocol on ctrl_fd until the server closes it."""
    if _state.shell is None:
        prepare()
    _precise_sleeps()
    os.set_inheritable(ctrl_fd, False)  # no subprocess may hold or write the control stream
    os.set_blocking(ctrl_fd, True)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # subprocess needs to wait for its children
    signal.signal(signal.SIGINT, _on_sigint)
    _adopt_sandbox()
    _state.inherited_streams = (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)
    _save_output_fds()
    _restore_output()
    _state.channel = _Channel(ctrl_fd)
    _state.channel.send({"type": "hello", "python": platform.python_version()},
                        wait_until_read=False)
    while True:
        try:
            _serve(_state.channel)
            break
        except KeyboardInterrupt:  # unreachable by design; a stray one must not end the sandbox
            continue
    _exit_driver()


_THIS_FILE = _on_sigint.__code__.co_filename
_IPYTHON_DIR = os.path.dirname(IPython.__file__) + os.sep
_EXCEPTION_GROUP = getattr(builtins, "BaseExceptionGroup", None)  # Python 3.11+


def _cli(argv: list[str] | None = None) -> NoReturn:
    parser = argparse.ArgumentParser(description="Run the sandlot driver without a jail.")
    parser.add_argument("--fd", type=int, required=True, help="the control stream's fd")
    args = parser.parse_args(argv)
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")  # before numpy loads: prepare() must stay single-threaded
    prepare()
    main(args.fd)


if __name__ == "__main__":
    _cli()
