"""Where a Bash cell's output goes, and where it goes once the cell has ended.

Each Bash cell runs with its own stdout and stderr: two FIFOs made for that cell (``open_cell``),
which bash opens for the ``source`` of the cell alone. While the cell runs, the driver copies
what they carry into the server's pipes as the execution's output (``output.forward``). When
the cell's status arrives, what they hold by then is the cell's too (``CellOutput.end``).
Anything written into them after that comes from processes that outlived the cell (a job started
with ``&``, a daemon): the FIFOs are handed to the relay thread (``output.relay``) that sends it
to the server as ``background`` frames naming the execution, which the server keeps with the
sandbox's other background output (``GET /v1/sandboxes/{id}/background``). So a process started
by one cell never writes into another execution's output, whichever language that execution
runs. (A Python cell's processes get the execution's own pipes on fds 1 and 2 instead: see
``output``.)

FIFOs, not anonymous pipes: bash is already running when a cell starts, so the only way to
hand it a new descriptor is a name it can open. The names live in the driver's private cell
directory and are unlinked as soon as the cell ends; the driver's read ends are close-on-exec,
so no user process ever holds one.
"""

from __future__ import annotations

import os
import select

from . import output
from .output import _read, _unread  # one copy, in the module below this one
from .state import state

# Most bytes one read takes from a cell's FIFO.
_CHUNK = 65536


class CellOutput:
    """The two FIFOs of one Bash cell: the paths bash opens, the driver's read ends."""

    def __init__(self, directory: str, name: str) -> None:
        self.paths = (f"{directory}/{name}.out", f"{directory}/{name}.err")
        self.fds: list[int] = []
        try:
            for path in self.paths:
                _unlink(path)
                os.mkfifo(path, 0o600)
                # Non-blocking: opening the read end must not wait for bash, and reading must
                # never wait for a writer.
                self.fds.append(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))
        except OSError:
            self.close()
            raise

    def redirections(self) -> str:
        """What the ``source`` of the cell is given: its stdout and stderr."""
        return f">{self.paths[0]} 2>{self.paths[1]}"

    def forward(self, fd: int) -> bool:
        """Copies what the FIFO ``fd`` holds now into the server's pipe (the running execution's
        output); False at end of file (no writer is left)."""
        data = _read(fd, _CHUNK)
        if data is None:
            return True
        if not data:
            return False
        output.forward(1 if fd == self.fds[0] else 2, data)
        return True

    def end(self) -> None:
        """The cell's status has arrived: what the FIFOs hold now is still the cell's output and
        is copied through; then the names go, and FIFOs that some process still holds open go to
        the relay, so whatever it writes later is background output."""
        for path in self.paths:
            _unlink(path)
        for index, fd in enumerate(self.fds):
            pending = _unread(fd)
            while pending > 0:
                data = _read(fd, min(pending, _CHUNK))
                if not data:
                    break
                output.forward(index + 1, data)
                pending -= len(data)
            if _has_writers(fd):
                output.relay.adopt(fd, index + 1, state.exec_id)
            else:
                _close(fd)
        self.fds = []

    def close(self) -> None:
        """Drops both FIFOs without reading them (the cell never ran)."""
        for path in self.paths:
            _unlink(path)
        for fd in self.fds:
            _close(fd)
        self.fds = []


def _has_writers(fd: int) -> bool:
    """Whether the FIFO may still carry output: some process holds it open for writing, or
    the last one wrote more before it closed it. Once every writer has gone and nothing is
    left to read, poll says POLLHUP alone."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    for _fd, events in poller.poll(0):
        return not (events & select.POLLHUP and not events & select.POLLIN)
    return True


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
