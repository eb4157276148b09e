"""Running Python cells in the shell, and SIGINT: an interrupt from the server stops the
running cell (Python, Bash or JavaScript) and never the driver itself."""

from __future__ import annotations

import errno
import os
import signal
import traceback

from .bash_session import limit_hint
from .capture import write_stderr
from .jsonsafe import clean_str, safe_str
from .protocol import emit
from .state import state


def on_sigint(signum, frame) -> None:
    """SIGINT from the server: interrupt what runs, and never the driver itself."""
    if state.bash_pgid is not None:
        state.interrupted = True
        try:
            os.killpg(state.bash_pgid, signal.SIGINT)
        except OSError:
            pass
        return
    if state.js_pid is not None:
        state.interrupted = True
        try:
            os.kill(state.js_pid, signal.SIGINT)
        except OSError:
            pass
        return
    if not state.python_running:
        return  # idle, or sending the last frames of a cell: nothing to interrupt
    state.interrupted = True
    if state.sending:
        state.deferred_interrupt = True  # raised once the frame is out (see Channel.send)
        return
    raise KeyboardInterrupt


def _error_event(error: BaseException, recorded) -> dict:
    stb = next((stb for value, stb in recorded if value is error), None)
    if stb is None or isinstance(error, SystemExit):
        # IPython printed it itself (UsageError), or it is a SystemExit, whose IPython text
        # only points at %tb: the exception line says it all.
        stb = traceback.format_exception_only(type(error), error)
    return {"type": "error", "name": type(error).__name__, "value": safe_str(error),
            "traceback": [clean_str(line) for line in stb]}


def _limit_hit(error: BaseException) -> str | None:
    """What to tell the user when a cell failed on one of the sandbox's limits: the errno's
    own words and the limit behind them. None for any other error."""
    if isinstance(error, RuntimeError) and "can't start new thread" in str(error):
        code, what = errno.EAGAIN, "a thread could not start"
    elif isinstance(error, OSError) and error.errno is not None:
        code, what = error.errno, type(error).__name__
    else:
        return None
    hint = limit_hint(code)
    if not hint:
        return None
    return f"{what}: {os.strerror(code)} ({errno.errorcode.get(code, code)}): {hint}"


def run_python(code: str) -> str:
    """Runs one cell; returns its status. The error, if any, is sent as an event here."""
    shell = state.shell
    state.tracebacks = []
    escaped: BaseException | None = None
    result = None
    state.python_running = True
    try:
        try:
            result = shell.run_cell(code, store_history=True)
        finally:
            # Straight after run_cell with no call in between: a SIGINT handled later sees
            # python_running false and is ignored.
            state.python_running = False
    except KeyboardInterrupt as exc:  # landed in IPython's machinery, outside run_code
        escaped = exc
    state.phase = "idle"
    recorded, state.tracebacks = state.tracebacks, []

    error = escaped if result is None else (result.error_before_exec or result.error_in_exec)
    for value, stb in recorded:
        if value is not error:  # shown but not what ended the cell (%run, showtraceback())
            write_stderr(shell.InteractiveTB.stb2text(stb))
    if error is not None:
        if (hint := _limit_hit(error)) is not None:
            write_stderr(f"sandlot: {hint}")
        emit(_error_event(error, recorded))
    if state.interrupted or isinstance(error, KeyboardInterrupt):
        return "interrupted"
    return "ok" if error is None else "error"
