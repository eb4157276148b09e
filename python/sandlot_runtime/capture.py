"""sys.stdout and sys.stderr: unbuffered text streams whose writes the driver routes itself
(``output.write``): into the server's pipes in order with what processes and C extensions wrote
to fds 1 and 2, or, from a thread an earlier execution started, as that execution's background
output. Also what puts them back after a cell closed or replaced them."""

from __future__ import annotations

import io
import sys

from . import output
from .state import state


class FdWriter(io.FileIO):
    """Unbuffered writer over fd 1 or 2 (its ``fileno``, which subprocesses given
    ``sys.stdout`` inherit) whose writes go where ``output.write`` says, whole: a signal can
    interrupt a large write to a pipe part-way, and TextIOWrapper would silently drop the rest."""

    def write(self, data) -> int:
        if self.closed:
            raise ValueError("I/O operation on closed file")
        view = memoryview(data).cast("B")
        output.write(self.fileno(), view)
        return len(view)


def open_text_stream(fd: int) -> io.TextIOWrapper:
    # write_through + line_buffering over an unbuffered writer: output streams as produced.
    return io.TextIOWrapper(FdWriter(fd, "w", closefd=False), encoding="utf-8",
                            errors="backslashreplace", line_buffering=True, write_through=True)


def flush_output() -> None:
    for stream in (sys.stdout, sys.stderr, state.stdout, state.stderr):
        try:
            stream.flush()
        except Exception:  # closed or replaced by user code: nothing to flush
            pass
    if state.libc_fflush is not None:
        state.libc_fflush(None)  # C stdio buffers of extensions (printf into a pipe)
    output.drain()  # what processes wrote into the execution's pipes, before what follows


def restore_output() -> None:
    """Puts sys.stdout/sys.stderr back the way main() set them up. (fds 1 and 2 get new pipes
    after every execution: ``output.end_execution``.)"""
    if state.stdout is None or state.stdout.closed:
        state.stdout = open_text_stream(1)
    if state.stderr is None or state.stderr.closed:
        state.stderr = open_text_stream(2)
    sys.stdout = sys.__stdout__ = state.stdout
    sys.stderr = sys.__stderr__ = state.stderr


def write_stderr(text: str) -> None:
    try:
        state.stderr.write(text if text.endswith("\n") else text + "\n")
    except Exception:  # fd 2 gone: the message has nowhere to go
        pass
