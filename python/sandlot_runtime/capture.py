"""stdout and stderr: fds 1 and 2 are pipes the server reads, and Python's ``sys.stdout`` and
``sys.stderr`` write through to them unbuffered, so prints, C extensions and subprocesses all
land in the same pipes in the order they wrote. Also what puts them back after a cell closed
or redirected them."""

from __future__ import annotations

import fcntl
import io
import os
import select
import sys

from .state import state


class FdWriter(io.FileIO):
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


def _same_file(fd_a: int, fd_b: int) -> bool:
    try:
        a, b = os.fstat(fd_a), os.fstat(fd_b)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def save_output_fds() -> None:
    """Keeps close-on-exec duplicates of fds 1 and 2 so a cell that closes or redirects them
    does not cut off every later cell."""
    for fd in (1, 2):
        try:
            state.saved_fds[fd] = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
        except OSError:
            pass
        try:
            os.set_blocking(fd, True)  # FdWriter copes either way; blocking is simpler
        except OSError:
            pass


def restore_output() -> None:
    """Puts fds 1/2 and sys.stdout/sys.stderr back the way main() set them up."""
    for fd, saved in state.saved_fds.items():
        if not _same_file(fd, saved):
            try:
                os.dup2(saved, fd)
            except OSError:
                pass
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
