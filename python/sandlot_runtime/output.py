"""Where output goes, so that a process, thread or job never writes into the output of an
execution other than the one that started it.

The server reads two pipes, the sandbox's stdout and stderr ("the server's pipes"). The driver
keeps close-on-exec duplicates of them (``state.saved_fds``) and is the only one that writes
into them while it serves. fds 1 and 2, which every process a cell starts inherits, are instead
the write ends of two pipes of the running execution's own ("its pipes"):

- While the execution runs, a relay thread copies what its pipes carry into the server's pipes
  as it comes (output of subprocesses, ``!cmd``, C extensions writing to fd 1 or 2), and the
  driver moves whatever they hold before each frame it sends and before each of its own writes,
  so output keeps the order it was written in, with events too.
- When the execution ends (``end_execution``, before its ``done``), fds 1 and 2 are pointed at
  two new pipes, the next execution's. If no process holds the old ones any more they are
  closed; if one does (a ``subprocess.Popen``, a daemon, a forked child, a pool worker), they
  stay with the relay, which sends what they carry from then on as ``background`` frames naming
  the execution that started the process: background output, never another execution's.
  When no process or thread was created in the sandbox since the pipes were put in place (the
  last pid of its pid namespace is the same) and fds 1 and 2 are still them, nobody else can
  hold them and they stay: a hot cell pays a ``pread`` and two ``fstat`` calls, not new pipes.

Python-level writes (``print``, ``sys.stdout``, ``sys.stderr``, logging) do not go through the
pipes: the driver writes them into the server's pipes itself (``write``), after what the
execution's pipe holds by then. A write from a thread that an earlier execution started (each
execution stamps the threads alive when it ends with its id) is background output of that
execution; a write from a process forked from the driver goes to that process's fd 1 or 2 like
any other process's output. A thread of the driver that writes to fd 1 or 2 directly (a C
extension's) writes into whichever execution's pipes are in place at the time: a process's
threads share its descriptors.

Bash cells have FIFOs of their own (``cell_output``); their ends go to the same relay once the
cell is over.
"""

from __future__ import annotations

import _thread
import codecs
import fcntl
import os
import select
import termios
import threading

from .state import state

# Most bytes one read takes from a pipe.
_CHUNK = 65536
# The attribute each thread alive when an execution ends gets: that execution's id.
_OWNER = "_sandlot_execution"
_STREAMS = {1: "stdout", 2: "stderr"}
# The last pid handed out in the caller's pid namespace (the sandbox's own, in a jail).
_LAST_PID = "/proc/sys/kernel/ns_last_pid"


class _Pipe:
    """One read end the relay watches: a running execution's pipe (``owner`` None), whose
    bytes are copied into the server's pipe ``index``, or the pipe of an execution that ended,
    whose text goes out as background frames of ``owner``."""

    __slots__ = ("index", "owner", "decoder")

    def __init__(self, index: int, owner: str | None = None) -> None:
        self.index = index
        self.owner = owner
        self.decoder = None if owner is None else \
            codecs.getincrementaldecoder("utf-8")(errors="replace")


class _Relay:
    """The read ends of the pipes and the one thread that reads them. ``lock`` is held while
    bytes of a running execution's pipe are moved, so each write lands in order, and while
    the pipes change."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.live: dict[int, int] = {}  # stream index (1, 2) -> the running execution's read end
        self.live_ids: dict[int, tuple[int, int]] = {}  # stream index -> (st_dev, st_ino)
        self._pipes: dict[int, _Pipe] = {}  # read end -> what it is
        self._epoll: select.epoll | None = None
        self._live_poller = select.poll()  # the live read ends, for drain()
        self._pid = 0  # the process the thread runs in (a fork has no thread)
        # True in that process only: a child forked from it (os.fork, multiprocessing) clears
        # it in an at-fork hook, so no write asks the kernel for its pid.
        self._running = False
        self._hooked = False
        self.main_ident = 0
        # What ns_last_pid of the sandbox's pid namespace said when the live pipes were put
        # in place (see end_execution); False once it proved unreadable.
        self.last_pid_readable = True
        self.last_pid: bytes | None = None

    def start(self) -> None:
        """Starts the thread in this process (a sandbox's driver; never the zygote, which must
        stay single-threaded to fork)."""
        if self._pid == os.getpid():
            return
        self._pid = os.getpid()
        if not self._hooked:
            os.register_at_fork(after_in_child=self._forked)
            self._hooked = True
        self._running = True
        self.main_ident = threading.get_ident()
        self._pipes = {}
        self.live = {}
        self.live_ids = {}
        self._live_poller = select.poll()
        self._epoll = select.epoll()  # close-on-exec
        # A bare thread, not a `threading.Thread`: user code's `threading.active_count()`
        # and `enumerate()` see its own threads only (a `while active_count() > 1` wait ends).
        _thread.start_new_thread(self._run, (self._epoll,))

    def running(self) -> bool:
        """Whether this is the process the relay runs in (not the zygote, not a child forked
        from the driver)."""
        return self._running

    def _forked(self) -> None:
        self._running = False

    def tasks_created(self) -> bytes | None:
        """The last pid handed out in the sandbox's pid namespace: it changes whenever a
        process or thread is created there. None when it cannot be read."""
        # Opened for each read, not held: the driver's descriptors are what a cell sees of
        # its process, and they stay the server's pipes, its socket and /dev/null.
        if not self.last_pid_readable:
            return None
        try:
            fd = os.open(_LAST_PID, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:  # no /proc: every execution gets new pipes
            self.last_pid_readable = False
            return None
        try:
            return os.read(fd, 32)
        except OSError:
            return None
        finally:
            os.close(fd)

    def watch(self, fd: int, pipe: _Pipe) -> None:
        """Starts reading ``fd`` (under ``lock``)."""
        self._pipes[fd] = pipe
        try:
            self._epoll.register(fd, select.EPOLLIN)
        except FileExistsError:  # a number reused behind the relay's back (user code closed it)
            self._epoll.modify(fd, select.EPOLLIN)
        if pipe.owner is None:
            self.live[pipe.index] = fd
            self._live_poller.register(fd, select.POLLIN)

    def unwatch(self, fd: int) -> None:
        """Stops reading ``fd`` (under ``lock``); the caller closes it or watches it again."""
        pipe = self._pipes.pop(fd, None)
        if pipe is not None and pipe.owner is None and self.live.get(pipe.index) == fd:
            del self.live[pipe.index]
            self.live_ids.pop(pipe.index, None)
            self._live_poller.unregister(fd)
        try:
            self._epoll.unregister(fd)
        except (OSError, ValueError):
            pass

    def forget(self, fd: int) -> None:
        """Stops reading ``fd`` and closes it (under ``lock``)."""
        self.unwatch(fd)
        _close(fd)

    def adopt(self, fd: int, index: int, owner: str | None) -> None:
        """Takes a pipe some process still holds after its cell ended (a Bash cell's FIFO):
        what it carries is background output of ``owner``."""
        self.start()
        with self.lock:
            self.watch(fd, _Pipe(index, owner or ""))

    def drain(self, fd: int, index: int) -> None:
        """Moves what the pipe ``fd`` holds now into the server's pipe ``index`` (under
        ``lock``); never waits for more."""
        pending = _unread(fd)
        while pending > 0:
            data = _read(fd, min(pending, _CHUNK))
            if not data:
                return
            _write_all(server_fd(index), data)
            pending -= len(data)

    def drain_live(self) -> None:
        """``drain`` of every live pipe that holds something (under ``lock``): one poll when
        none does, as after most cells."""
        if not self.live:
            return
        ready = self._live_poller.poll(0)
        for fd, _events in ready:
            pipe = self._pipes.get(fd)
            if pipe is not None:
                self.drain(fd, pipe.index)

    def _run(self, epoll: select.epoll) -> None:
        while True:
            try:
                events = epoll.poll()
            except OSError:  # the epoll fd is gone (closed by user code): nothing to watch
                return
            for fd, _events in events:
                try:
                    self._service(fd)
                except Exception:  # one pipe's trouble must not stop the others
                    pass

    def _service(self, fd: int) -> None:
        with self.lock:
            pipe = self._pipes.get(fd)
            if pipe is None:
                return
            data = _read(fd, _CHUNK)
            if data is None:
                return  # the main thread moved it first
            if pipe.owner is None:
                if data:
                    _write_all(server_fd(pipe.index), data)
                else:  # every writer closed it (user code closed fd 1): nothing more comes
                    self.forget(fd)
                return
            if not data:
                self.forget(fd)
        text = pipe.decoder.decode(data, final=not data)
        if text:
            send_background(_STREAMS[pipe.index], text, pipe.owner)


relay = _Relay()


def server_fd(index: int) -> int:
    """The driver's duplicate of the server's pipe for stream ``index`` (1 stdout, 2 stderr)."""
    return state.saved_fds.get(index, index)


def setup() -> None:
    """In a sandbox's driver, before it serves: keeps duplicates of the server's pipes, puts
    the first execution's pipes on fds 1 and 2 and starts the relay."""
    for fd in (1, 2):
        try:
            os.set_blocking(fd, True)  # a blocking write is simpler than waiting for room
            state.saved_fds[fd] = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
        except OSError:  # fd 1 or 2 was not open: that stream has no pipe of its own
            pass
    relay.start()
    relay.last_pid = relay.tasks_created()
    _new_pipes(None)


def end_execution(exec_id: str | None) -> None:
    """The execution ``exec_id`` has ended: the threads alive now are stamped as its, and fds
    1 and 2 get the next execution's pipes, unless no process could have taken the current
    ones: no process or thread was created in the sandbox since they were put in place (its
    pid namespace's last pid is the same) and fds 1 and 2 are still them. The old pipes are
    emptied as the execution's output, then closed or, if some process still holds them,
    left to the relay, whose reads from them are background output of ``exec_id``."""
    if not relay.running():
        return
    with relay.lock:  # a thread's write runs whole before this or after it (see write)
        for thread in threading.enumerate():
            if thread.ident != relay.main_ident and not hasattr(thread, _OWNER):
                setattr(thread, _OWNER, exec_id or "")
    created = relay.tasks_created()
    if created is not None and created == relay.last_pid and _pipes_in_place():
        return
    relay.last_pid = created  # read before the new pipes exist: a fork after it changes it
    if state.libc_fflush is not None:
        state.libc_fflush(None)  # C stdio buffers of extensions: the execution's output too
    _new_pipes(exec_id)


def _pipes_in_place() -> bool:
    """Whether fds 1 and 2 are still the write ends of the live pipes (a cell may have closed
    or replaced them)."""
    for index in state.saved_fds:
        ids = relay.live_ids.get(index)
        if ids is None:
            return False
        try:
            st = os.fstat(index)
        except OSError:
            return False
        if (st.st_dev, st.st_ino) != ids:
            return False
    return True


def _new_pipes(exec_id: str | None) -> None:
    """Points fds 1 and 2 at new pipes, which the relay copies to the server's pipes. The ones
    they replace are emptied into the server's pipes, then closed, or watched as background
    output of ``exec_id`` if some process still holds them. A stream whose new pipe cannot be
    made (no fds left) keeps its old one."""
    made = {}
    for index in state.saved_fds:
        try:
            made[index] = _new_pipe()
        except OSError:
            continue
    if not made:
        return
    poller = select.poll()
    with relay.lock:
        # Unwatched first: the old pipes' last writer may go with the dup2 below, and the
        # relay thread has nothing to wake up for.
        old = {}
        for index in made:
            fd = relay.live.get(index)
            if fd is not None:
                relay.unwatch(fd)
                old[fd] = index
                poller.register(fd, select.POLLIN)
        for index, (read_end, write_end) in made.items():
            os.dup2(write_end, index)  # inheritable, as a process's stdout is
            _close(write_end)
            st = os.fstat(read_end)
            relay.watch(read_end, _Pipe(index))
            relay.live_ids[index] = (st.st_dev, st.st_ino)
        # What the old pipes hold is the execution's. POLLHUP: no writer is left, and nothing
        # more can come once that is read.
        ready = dict(poller.poll(0))
        for fd, index in old.items():
            events = ready.get(fd, 0)
            if events & select.POLLIN:
                relay.drain(fd, index)
            if events & select.POLLHUP:
                _close(fd)
            else:
                relay.watch(fd, _Pipe(index, exec_id or ""))


def drain() -> None:
    """Moves what the running execution's pipes hold now into the server's pipes: what was
    written before this call reaches the server before anything the driver writes after it."""
    if not relay.running():
        return
    with relay.lock:
        relay.drain_live()


def forward(index: int, data: bytes) -> None:
    """Writes ``data`` into the server's pipe ``index`` as the running execution's output,
    after what its pipe holds by now."""
    if not relay.running():
        _write_all(index, data)
        return
    with relay.lock:
        _forward_locked(index, data)


def _forward_locked(index: int, data: bytes) -> None:
    fd = relay.live.get(index)
    if fd is not None:
        relay.drain(fd, index)
    _write_all(server_fd(index), data)


def write(index: int, data: bytes) -> None:
    """A Python-level write to stdout (1) or stderr (2): the running execution's output, or
    background output of the execution that started the writing thread, or, in a process
    forked from the driver, a write to its own fd."""
    if not relay.running():  # a forked child, or the zygote: its fds are its own
        _write_all(index, data)
        return
    ident = threading.get_ident()
    if ident == relay.main_ident:
        forward(index, data)
        return
    # Another thread: whose it is is decided under the lock that end_execution stamps threads
    # under, so a write the execution's thread began before the execution ended is all its.
    with relay.lock:
        owner = getattr(threading._active.get(ident), _OWNER, None)  # noqa: SLF001
        if owner is None:
            _forward_locked(index, data)
            return
    send_background(_STREAMS[index], bytes(data).decode("utf-8", "replace"), owner)


def send_background(stream: str, text: str, owner: str | None) -> None:
    if state.channel is not None:  # in the zygote nobody is listening: setup output is dropped
        state.channel.send_background(stream, text, owner or None)


def _new_pipe() -> tuple[int, int]:
    """A pipe whose read end never blocks and whose write end does, both close-on-exec and
    above fd 2 (a cell may have closed fd 0, 1 or 2, and pipe2 takes the lowest free fds)."""
    ends = list(os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC))
    try:
        fcntl.fcntl(ends[1], fcntl.F_SETFL, 0)
        for i, fd in enumerate(ends):
            if fd <= 2:
                ends[i] = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
                _close(fd)
    except OSError:
        for fd in ends:
            _close(fd)
        raise
    return ends[0], ends[1]


def _unread(fd: int) -> int:
    try:
        return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, bytes(4)), "little")
    except OSError:
        return 0


def _read(fd: int, size: int) -> bytes | None:
    """Up to ``size`` bytes; b"" at end of file, None when nothing is there now."""
    try:
        return os.read(fd, size)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data).cast("B")
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            select.select([], [fd], [])
        except OSError:
            return  # the server's pipe is gone: nobody reads this output


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
