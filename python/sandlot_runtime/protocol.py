"""The control stream (see ARCHITECTURE.md, "The execution protocol"): frames of a 4-byte
little-endian length then a UTF-8 JSON object, the same format as the jail's frame codec
(``crates/sandlot-jail/src/frame.rs``). Holds the frame encoder, the channel that reads and
writes frames while keeping output and events in order (and takes the descriptors the server
attaches to some frames), ``emit`` for the events of the running execution, and ``exit_driver``
for when the server is gone."""

from __future__ import annotations

import array
import fcntl
import json
import os
import socket
import struct
import termios
import threading
import time
from typing import NoReturn

from .capture import flush_output
from .jsonsafe import jsonable
from .state import state


def encode_frame(message: dict) -> bytes:
    body = json.dumps(jsonable(message), ensure_ascii=False, allow_nan=False,
                      separators=(",", ":")).encode("utf-8")
    return len(body).to_bytes(4, "little") + body


# Room for the descriptors one read may bring. The server attaches one to a frame at most; more
# than this and the kernel closes the rest itself (MSG_CTRUNC).
_MAX_FDS = 8
_ANCILLARY_SPACE = socket.CMSG_SPACE(_MAX_FDS * array.array("i").itemsize)


class Channel:
    """Frames on the control stream: 4-byte little-endian length, then a UTF-8 JSON object.

    Ordering: output written before an event must reach the server before the event, and
    output written after it, after. Flushing before each frame gives the first. For the second,
    the driver waits until the server has read an event frame before user code runs on; a
    server that drains the pipes when the control stream becomes readable, before reading the
    frame, then never sees later output early.

    Descriptors: the server may attach one (SCM_RIGHTS) to the first bytes of a frame whose JSON
    says ``"fd": true`` (state_save, state_load). Every read is a recvmsg, so a descriptor is
    never lost to a plain read; what arrives waits in ``state.received_fds`` until its frame is
    complete. That frame claims the first one (``take_fd``); every other descriptor is closed
    before the frame is dispatched, so none ever reaches user code."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._can_wait = True  # cleared if the fd cannot report its unread bytes
        try:
            # The same descriptor (no dup): kept for the driver's life, never closed by us.
            self._sock: socket.socket | None = socket.socket(fileno=fd)
        except OSError:
            self._sock = None  # not a socket (a pipe, in a test): no descriptors can come
        self._claimed: int | None = None
        # Frames are written whole: background frames (of the relay thread and of threads that
        # outlived their execution, see output) and the main thread's never interleave.
        self._write_lock = threading.Lock()

    def recv(self) -> dict | None:
        """The next message, or None when the server closed the stream."""
        self._close(self.take_fd())  # a frame that was never asked for its descriptor
        try:
            header = self._read_exact(4)
            body = None if header is None else self._read_exact(int.from_bytes(header, "little"))
            if body is None:
                return None
            message = json.loads(body.decode("utf-8", "replace"))
            if not isinstance(message, dict):
                raise ValueError("a frame must hold a JSON object")
            if message.get("fd") is True and state.received_fds:
                self._claimed = state.received_fds.popleft()
            return message
        finally:
            while state.received_fds:  # unclaimed: never left open for user code to find
                self._close(state.received_fds.popleft())

    def take_fd(self) -> int | None:
        """The descriptor the last frame carried (it said ``"fd": true``), now the caller's to
        close; None when it carried none or it was already taken."""
        fd, self._claimed = self._claimed, None
        return fd

    def send(self, message: dict, wait_until_read: bool = True) -> None:
        if os.getpid() != state.pid:
            return  # a process that user code forked: the control stream is not its to use
        flush_output()
        frame = encode_frame(message)
        state.sending += 1
        try:
            with self._write_lock:
                self._write_all(frame)
            if wait_until_read:
                self._wait_until_read()
        except OSError:
            exit_driver()  # the server is gone; nobody is left to report to
        finally:
            state.sending -= 1
        if state.deferred_interrupt and state.sending == 0 and state.python_running:
            state.deferred_interrupt = False
            raise KeyboardInterrupt

    def send_background(self, stream: str, text: str, exec_id: str | None) -> None:
        """Output of a process or thread that outlived the execution ``exec_id`` that started
        it (see output): the server keeps it as background output of that execution, never as
        another's. From the relay thread or that thread; not waited for."""
        if os.getpid() != state.pid:
            return
        message = {"type": "background", "stream": stream, "text": text}
        if exec_id:
            message["id"] = exec_id
        frame = encode_frame(message)
        try:
            with self._write_lock:
                self._write_all(frame)
        except OSError:
            pass  # the server is gone: the main thread finds out and ends the driver

    def _read_exact(self, size: int) -> bytes | None:
        if self._sock is None:
            return self._read_plain(size)
        parts, got = [], 0
        while got < size:
            # MSG_CMSG_CLOEXEC: a descriptor is close-on-exec from the moment it exists here.
            part, ancillary, _flags, _addr = self._sock.recvmsg(
                size - got, _ANCILLARY_SPACE, socket.MSG_CMSG_CLOEXEC)
            if ancillary:
                _keep_fds(ancillary)
            if not part:
                return None
            parts.append(part)
            got += len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _read_plain(self, size: int) -> bytes | None:
        data = bytearray()
        while len(data) < size:
            part = os.read(self.fd, size - len(data))
            if not part:
                return None
            data += part
        return bytes(data)

    @staticmethod
    def _close(fd: int | None) -> None:
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

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


def _keep_fds(ancillary: list) -> None:
    """Queues the descriptors of SCM_RIGHTS messages in arrival order."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds = array.array("i")
            fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
            state.received_fds.extend(fds)


def emit(message: dict) -> None:
    """Sends an event of the running execution. Before main() (in the zygote) there is no one
    to send to, and setup code's displays are dropped."""
    if state.channel is None:
        return
    kind = message.pop("type")
    # A cell's result comes last, after everything it printed: nothing can follow it that the
    # server must order after it, so the round trip of waiting until it is read is skipped.
    state.channel.send({"type": kind, "id": state.exec_id, **message},
                       wait_until_read=kind != "result")


def exit_driver() -> NoReturn:
    """Ends the driver: output flushed, every context's bash told to exit (EOF), no cleanup
    that could block; the sandbox ends with it."""
    flush_output()
    if state.bash is not None:
        state.bash.close()  # bash reads EOF and exits
    if state.js is not None:
        state.js.close()  # node reads EOF and exits
    for ctx in state.contexts.values():
        if ctx.bash is not None:
            ctx.bash.close()
        if ctx.js is not None:
            ctx.js.close()
    os._exit(0)
