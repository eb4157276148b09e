"""Saved interpreter state: ``state_save`` writes every code context's variables, module aliases
and Bash session, the modules imported since the zygote and the random generators' state into a
file the server passes by descriptor; ``state_load`` puts them back in a fresh sandbox of the
same family (see ARCHITECTURE.md, "The execution protocol", and the server's half,
``crates/sandlot-runtime/src/saved.rs``). The server never unpickles anything; it moves bytes
and checks the header.

File, version 1: a header of ``HEADER_LEN`` bytes (``SANDLOT-STATE\\n``, ``1\\n``, the body's
SHA-256 in hex and ``\\n``, padded with spaces to a last ``\\n``), then the body. The body is each
variable's own cloudpickle, one after the other, then the index (a plain pickle of
``{"version", "contexts": {id: {"vars": {name: (offset, length)}, "modules_as": {name:
module}, "bash": {"cwd", "env"} | None}}, "active", "modules", "random"}``; offsets count from
the body's start), then the index's length in 8 bytes, little-endian. The body is written from
``HEADER_LEN`` on and the header last, so a save cut short never looks whole. Each variable is
streamed straight into the file (a DataFrame's buffer goes from its own memory to the page cache
without a copy) and hashed on a helper thread meanwhile; a load maps the file, checks the hash
before it unpickles anything, and unpickles each variable from the mapping.

``state_digest`` (``digest_state``) digests the same variables with the same reductions,
canonically (equal values, equal digests, however their parts are shared), for the server to
compare two sandboxes of one family without ever seeing a pickle.

One pickle per variable, so one failure skips one name (reported with the exception's text);
each is bounded in time by SIGALRM (``object_secs``, and ``total_secs`` for the whole save).
Functions and classes defined in cells are pickled by value, but their globals are not: they
are bound on load to the namespace of the context they are loaded into, so they see the
restored variables and later cells' changes as they did before. What is not carried: the
execution counter, ``In``/``Out``/``_`` history, IPython's own names and the template's setup
names (a fresh namespace has them). An object two variables share comes back as two copies,
except a class defined in a cell (cloudpickle tracks those by id within a process).
"""

from __future__ import annotations

import errno
import hashlib
import importlib
import io
import itertools
import mmap
import os
import pickle
import queue
import random
import re
import signal
import stat
import sys
import threading
import time
import traceback
import types

import cloudpickle

from .bash_session import BashSession, limit_hint
from .capture import write_stderr
from .contexts import Context, enter_context
from .jsonsafe import safe_str
from .state import DEFAULT_CONTEXT, state

MAGIC = b"SANDLOT-STATE\n"
FORMAT_VERSION = 1
# Bytes before the body (the server's HEADER_LEN in saved.rs).
HEADER_LEN = 96
# The body ends with the index's length in this many bytes.
_INDEX_LEN_BYTES = 8
# A variable whose pickle passes this is reported, not saved.
MAX_VARIABLE_BYTES = 2 << 30
# Bounds when the request gives none (the server sends its own).
DEFAULT_OBJECT_SECS = 2.0
DEFAULT_TOTAL_SECS = 20.0
# Longest reason reported for one name.
MAX_REASON = 300
# The `name` of a Bash session in not_captured / not_restored (never a Python identifier).
BASH_SESSION = "bash session"
# After this many bytes the body is hashed on a helper thread while it is written.
_HASH_THREAD_AFTER = 1 << 20
# Once a pickling has passed its bound, SIGALRM comes again this often until it has stopped
# (user code may catch the first exception and carry on).
_ALARM_REPEAT = 0.05

# IPython's own names in every namespace; with dunders, history (_i3, _5) and hidden names.
_IPYTHON_NAMES = frozenset({"In", "Out", "_ih", "_oh", "_dh", "_", "__", "___", "exit", "quit",
                            "get_ipython"})
_HISTORY_NAME = re.compile(r"_i+\d*|_\d+")
# Open files: reported, not pickled.
_OPEN_FILE_TYPES = (io.FileIO, io.BufferedReader, io.BufferedWriter, io.BufferedRandom,
                    io.TextIOWrapper)


class Refused(Exception):
    """A request the driver cannot carry out; its text is the answer's error."""


class _TimedOut(BaseException):
    """One object's pickling passed its bound. A BaseException so that user code's
    ``except Exception`` in a ``__reduce__`` does not swallow it."""


class _OutOfTime(Exception):
    """The whole save's bound is used up before this object was tried."""


class _TooLarge(BaseException):
    """A variable's pickle passed MAX_VARIABLE_BYTES."""


class _WriteFailed(BaseException):
    """Writing the state file failed (ENOSPC, EDQUOT, EFBIG...): the save stops. A
    BaseException so no user code in between can swallow it."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error)
        self.error = error


# -- saving ------------------------------------------------------------------------------------


def save_state(message: dict, fd: int | None) -> dict:
    """Answers a state_save: writes the state file into ``fd`` (the caller closes it). The
    sandbox is unchanged whatever happens; the answer says what was not captured, or why
    nothing was."""
    reply = {"type": "state_saved", "id": message.get("id")}
    try:
        if fd is None:
            raise Refused("no state file came with the request")
        object_secs = _positive(message.get("object_secs"), DEFAULT_OBJECT_SECS)
        total_secs = _positive(message.get("total_secs"), DEFAULT_TOTAL_SECS)
        reply.update(_save(fd, object_secs, total_secs), ok=True)
    except KeyboardInterrupt:
        state.python_running = False
        reply.update(ok=False, error="the save was interrupted")
    except _WriteFailed as failed:
        # The file is the server's (ENOSPC is its disk), but the sandbox's own RLIMIT_FSIZE
        # bounds every write it makes.
        hint = limit_hint(failed.error.errno) if failed.error.errno == errno.EFBIG else ""
        reply.update(ok=False, error=f"writing the state file failed: {failed.error}"
                     + (f" ({hint})" if hint else ""))
    except Refused as exc:
        reply.update(ok=False, error=str(exc))
    except Exception as exc:  # a driver bug: report it, keep the sandbox
        write_stderr("sandlot: internal driver error\n" + traceback.format_exc())
        reply.update(ok=False, error=f"{type(exc).__name__}: {safe_str(exc)}")
    finally:
        state.python_running = False
    return reply


def _save(fd: int, object_secs: float, total_secs: float) -> dict:
    writer = _BodyWriter(fd)
    not_captured: list[dict] = []
    contexts: dict = {}
    count = 0
    try:
        with _TimeBounds(object_secs, total_secs) as bounds:
            # While user code runs (__reduce__, __getstate__), SIGINT interrupts it: the save
            # stops and answers ok false.
            state.python_running = True
            try:
                for name in list(state.contexts):
                    entry, failed = _save_context(name, writer, bounds)
                    contexts[name] = entry
                    not_captured += failed
                    count += len(entry["vars"]) + len(entry["modules_as"])
            finally:
                state.python_running = False
        index = {"version": FORMAT_VERSION, "contexts": contexts,
                 "active": state.active_context, "modules": _new_modules(),
                 "random": _random_state()}
        size, digest = writer.finish(pickle.dumps(index, protocol=5))
    finally:
        writer.close()
    return {"bytes": size, "sha256": digest, "variables": count, "not_captured": not_captured}


def _save_context(name: str, writer: _BodyWriter, bounds: _TimeBounds) -> tuple[dict, list]:
    """One context's entry of the index, and what of it was not captured."""
    ns, variables = _user_variables(name)
    entry: dict = {"vars": {}, "modules_as": {}, "bash": None}
    failed: list[dict] = []
    for var, value in variables:
        module = _module_alias(value)
        if module is not None:
            entry["modules_as"][var] = module
            continue
        span, reason = _save_value(value, ns, writer, bounds)
        if reason is None:
            entry["vars"][var] = span
        else:
            failed.append({"name": var, "context": name, "reason": reason})
    session = state.bash if name == state.active_context else state.contexts[name].bash
    if session is not None:
        try:
            entry["bash"] = session.saved_state(max(min(bounds.object_secs,
                                                        bounds.remaining()), 0.01))
        except (OSError, EOFError, ValueError) as exc:  # TimeoutError is an OSError
            failed.append({"name": BASH_SESSION, "context": name, "reason": _reason(exc)})
    return entry, failed


def _user_variables(name: str) -> tuple[dict, list[tuple[str, object]]]:
    """Context ``name``'s namespace and the variables of it a saved state carries (and a digest
    compares): every name but those ``_skipped`` leaves out, in the namespace's order."""
    ctx = state.contexts[name]
    active = name == state.active_context
    ns = (state.shell.user_ns if active else ctx.user_ns) or {}
    hidden = state.shell.user_ns_hidden if active else ctx.user_ns_hidden
    return ns, [(var, value) for var, value in list(ns.items())
                if not _skipped(var, value, hidden)]


def _module_alias(value: object) -> str | None:
    """The module's name when ``value`` is an importable module (saved as a reference to it,
    ``import <module> as <name>``), else None."""
    if isinstance(value, types.ModuleType) and sys.modules.get(value.__name__) is value:
        return value.__name__
    return None


def _skipped(name: object, value: object, hidden: dict) -> bool:
    """Names a saved state leaves out: IPython's own, history, dunders, names hidden from the
    user, and the template's setup names still bound to the setup's object."""
    if not isinstance(name, str) or name in _IPYTHON_NAMES or _HISTORY_NAME.fullmatch(name):
        return True
    if name.startswith("__") and name.endswith("__"):
        return True
    missing = object()
    return hidden.get(name, missing) is value or state.setup_names.get(name, missing) is value


def _save_value(value: object, ns: dict, writer: _BodyWriter,
                bounds: _TimeBounds) -> tuple[tuple[int, int] | None, str | None]:
    """Streams one variable's pickle into the body: its (offset, length), or why it was not
    saved (and nothing of it stays in the file)."""
    start = writer.mark()
    try:
        bounds.run(_dump, writer, value, ns)
    except (_WriteFailed, KeyboardInterrupt):
        raise
    except BaseException as exc:  # its pickling raised or ran out of time: this name only
        writer.rollback()
        return None, _why_not(exc, bounds, "save")
    return (start - HEADER_LEN, writer.offset - start), None


def _why_not(exc: BaseException, bounds: _TimeBounds, what: str) -> str:
    """The reason reported for a variable whose pickling (for a ``what``: save, digest) did
    not finish with ``exc``."""
    if isinstance(exc, _TimedOut):
        if bounds.last_was_total:
            return f"timed out: the {what}'s bound of {bounds.total_secs:g} s was reached"
        return f"timed out after {bounds.object_secs:g} s"
    if isinstance(exc, _OutOfTime):
        return f"not tried: the {what}'s bound of {bounds.total_secs:g} s was used up"
    if isinstance(exc, _TooLarge):
        return f"its pickle is over the limit of {MAX_VARIABLE_BYTES >> 30} GiB"
    return _reason(exc)


def _dump(writer: _BodyWriter, value: object, ns: dict) -> None:
    # In band: a NumPy array's buffer reaches writer.write as a PickleBuffer, written from
    # the array's own memory.
    _ContextPickler(writer, ns).dump(value)


def _reason(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {safe_str(exc)}"
    return text if len(text) <= MAX_REASON else text[:MAX_REASON - 3] + "..."


def _new_modules() -> list[str]:
    """Modules imported since the sandbox began (importable ones: they have a spec)."""
    baseline = state.module_baseline or frozenset()
    return sorted(name for name, module in list(sys.modules.items())
                  if name not in baseline and module is not None
                  and getattr(module, "__spec__", None) is not None)


def _random_state() -> bytes:
    saved = {"random": random.getstate()}
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        try:
            saved["numpy"] = numpy_random.get_state()
        except Exception:
            pass
    return pickle.dumps(saved, protocol=5)


def _positive(value: object, default: float) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return default


class _TargetNamespace:
    """Stands for "the namespace this is loaded into" in a pickle: a cell's function refers
    to its context's namespace through it, instead of carrying copies of its globals."""

    def __reduce__(self):
        return _target_namespace, ()


_TARGET_NAMESPACE = _TargetNamespace()


def _target_namespace() -> dict:
    """The namespace a variable is being loaded into (called by unpickling)."""
    if state.loading_namespace is None:
        raise pickle.UnpicklingError("a context's function can only be loaded by state_load")
    return state.loading_namespace


class _ContextPickler(cloudpickle.Pickler):
    """cloudpickle, except that functions whose globals are the namespace being saved (defined
    in its cells, and methods of its classes) keep no copy of their globals: they get the
    namespace they are loaded into. Copies would go stale on the first assignment after the
    load (a function would never see a redefined helper), and would pull every global a
    function names into each variable that holds it."""

    def __init__(self, file, namespace: dict) -> None:
        super().__init__(file, protocol=5)
        self._namespace = namespace

    def reducer_override(self, obj):
        _refuse_open_file(obj)
        return super().reducer_override(obj)

    def _dynamic_function_reduce(self, func):
        return _bound_to_target(super()._dynamic_function_reduce(func), func, self._namespace)


def _refuse_open_file(obj: object) -> None:
    # cloudpickle would read a file open for reading to its end and load it as a StringIO.
    if isinstance(obj, _OPEN_FILE_TYPES):
        raise TypeError(f"cannot pickle an open file ({type(obj).__name__} "
                        f"{safe_str(getattr(obj, 'name', '?'))!r}); open it again after "
                        "the load")


def _bound_to_target(reduced, func, namespace: dict):
    """cloudpickle's reduction of ``func``, with the globals of a function of ``namespace``
    replaced by "the namespace it is loaded into"."""
    if func.__globals__ is not namespace:
        return reduced
    try:  # cloudpickle 3.x's shape; anything else is left as cloudpickle made it
        make, (code, _globals, name, argdefs, closure), (attrs, slots), *rest = reduced
        slots = {**slots, "__globals__": {}}
    except (TypeError, ValueError, AttributeError):
        return reduced
    return (make, (code, _TARGET_NAMESPACE, name, argdefs, closure), (attrs, slots), *rest)


class _TimeBounds:
    """SIGALRM (ITIMER_REAL) bounds on each object's pickling and on the whole save. The
    handler raises only inside ``_bounded_call`` (so a late alarm never hits the driver's own
    bookkeeping), and the timer repeats until the pickling stops. Whatever handler and timer
    user code had are put back, the timer less the time the save took."""

    def __init__(self, object_secs: float, total_secs: float) -> None:
        self.object_secs, self.total_secs = object_secs, total_secs
        self.last_was_total = False  # the last object got what was left of the total
        self._started = self._deadline = 0.0
        self._old_handler = None
        self._old_timer = (0.0, 0.0)

    def __enter__(self) -> _TimeBounds:
        self._started = time.monotonic()
        self._deadline = self._started + self.total_secs
        self._old_timer = signal.setitimer(signal.ITIMER_REAL, 0)
        self._old_handler = signal.signal(signal.SIGALRM, _on_alarm)
        return self

    def __exit__(self, *exc) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM,
                      signal.SIG_DFL if self._old_handler is None else self._old_handler)
        delay, interval = self._old_timer
        if delay > 0:
            left = delay - (time.monotonic() - self._started)
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-6), interval)

    def remaining(self) -> float:
        return self._deadline - time.monotonic()

    def run(self, fn, *args) -> None:
        """fn(*args) within the object bound (or what is left of the total, if less)."""
        secs = min(self.object_secs, self.remaining())
        if secs <= 0:
            raise _OutOfTime
        self.last_was_total = secs < self.object_secs
        signal.setitimer(signal.ITIMER_REAL, secs, _ALARM_REPEAT)
        try:
            _bounded_call(fn, args)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)


def _bounded_call(fn, args) -> None:
    fn(*args)


def _on_alarm(signum, frame) -> None:
    while frame is not None:
        if frame.f_code is _bounded_call.__code__:
            raise _TimedOut
        frame = frame.f_back


class _Hasher:
    """SHA-256 of the body in the order it is written. Once the body is more than a little,
    a helper thread hashes while the main thread pickles and writes (hashlib and pwrite both
    release the GIL). ``mark`` and ``rollback`` take a variable that failed half-way back out.
    The chunks are the pickler's own buffers (a DataFrame's memory among them), unchanged
    until the save ends: no user code runs in between but the objects' own reducers."""

    _UPDATE, _MARK, _ROLLBACK, _END = range(4)

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self._saved = None
        self._queue: queue.SimpleQueue | None = None
        self._thread: threading.Thread | None = None
        self._hashed = 0
        self._digest: str | None = None

    def update(self, view: memoryview) -> None:
        if self._queue is None:
            self._hashed += view.nbytes
            if self._hashed < _HASH_THREAD_AFTER or not self._start_thread():
                self._hash.update(view)
                return
        self._queue.put((self._UPDATE, view))

    def mark(self) -> None:
        if self._queue is not None:
            self._queue.put((self._MARK, None))
        else:
            self._saved = self._hash.copy()

    def rollback(self) -> None:
        if self._queue is not None:
            self._queue.put((self._ROLLBACK, None))
        else:
            self._hash, self._saved = self._saved, None

    def hexdigest(self) -> str:
        if self._thread is None:
            return self._hash.hexdigest()
        self.close()
        if self._digest is None:
            raise RuntimeError("the hashing thread ended early")
        return self._digest

    def close(self) -> None:
        """Stops the helper thread, if any (idempotent)."""
        if self._thread is not None:
            self._queue.put((self._END, None))
            self._thread.join()
            self._thread = None

    def _start_thread(self) -> bool:
        thread = threading.Thread(target=self._run, name="sandlot-state-hash", daemon=True)
        self._queue = queue.SimpleQueue()
        try:
            thread.start()
        except RuntimeError:  # no thread left under the sandbox's limit: hash inline
            self._queue = None
            return False
        self._thread = thread
        return True

    def _run(self) -> None:
        hasher, saved, commands = self._hash, self._saved, self._queue
        while True:
            command, view = commands.get()
            if command == self._UPDATE:
                hasher.update(view)
            elif command == self._MARK:
                saved = hasher.copy()
            elif command == self._ROLLBACK:
                hasher, saved = saved, None
            else:
                self._digest = hasher.hexdigest()
                return


class _BodyWriter:
    """The file object the picklers write into: the body, from HEADER_LEN on, with pwrite
    (no copy: large buffers come straight from the objects), hashed as it goes."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.offset = HEADER_LEN
        self._mark = HEADER_LEN
        self._hasher = _Hasher()

    def write(self, data) -> int:
        view = data.raw() if isinstance(data, pickle.PickleBuffer) else memoryview(data)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        size = view.nbytes
        if self.offset + size - self._mark > MAX_VARIABLE_BYTES:
            raise _TooLarge
        self._hasher.update(view)  # first, so the helper thread hashes while this writes
        self._pwrite_all(view, self.offset)
        self.offset += size
        return size

    def mark(self) -> int:
        """Where the next variable starts; ``rollback`` comes back here."""
        self._mark = self.offset
        self._hasher.mark()
        return self.offset

    def rollback(self) -> None:
        self.offset = self._mark
        self._hasher.rollback()

    def finish(self, index: bytes) -> tuple[int, str]:
        """Writes the index, its length and then the header; returns the file's size and the
        body's SHA-256."""
        self._mark = self.offset  # the index is not a variable: no size limit applies
        self.write(index)
        self.write(len(index).to_bytes(_INDEX_LEN_BYTES, "little"))
        digest = self._hasher.hexdigest()
        try:
            # A variable rolled back at the very end may have left bytes past the body.
            if stat.S_ISREG(os.fstat(self.fd).st_mode) and \
                    os.fstat(self.fd).st_size > self.offset:
                os.ftruncate(self.fd, self.offset)
        except OSError as exc:
            raise _WriteFailed(exc) from None
        self._pwrite_all(memoryview(header_for(digest)), 0)
        return self.offset, digest

    def close(self) -> None:
        self._hasher.close()

    def _pwrite_all(self, view: memoryview, offset: int) -> None:
        try:
            while view:
                written = os.pwrite(self.fd, view, offset)
                view, offset = view[written:], offset + written
        except OSError as exc:
            raise _WriteFailed(exc) from None


def header_for(digest: str) -> bytes:
    """The HEADER_LEN bytes before a body whose SHA-256 is ``digest``."""
    head = MAGIC + f"{FORMAT_VERSION}\n{digest}\n".encode()
    return head + b" " * (HEADER_LEN - len(head) - 1) + b"\n"


# -- digests -----------------------------------------------------------------------------------


def digest_state(message: dict) -> dict:
    """Answers a state_digest (for ``GET /v1/sandboxes/{a}/diff/{b}``, the server's
    ``diff.rs``): per code context, each variable a save would carry, with its type's name,
    the size of the pickle a save writes for it, and a SHA-256 digest that equal values share
    however their parts are shared (``_DigestPickler``); nothing is kept. Same names,
    reductions and time bounds as ``state_save``; what could not be pickled is listed in
    ``not_digested``. The server compares two sandboxes' digests; it never sees a pickle."""
    reply = {"type": "state_digested", "id": message.get("id")}
    try:
        object_secs = _positive(message.get("object_secs"), DEFAULT_OBJECT_SECS)
        total_secs = _positive(message.get("total_secs"), DEFAULT_TOTAL_SECS)
        reply.update(_digest(object_secs, total_secs), ok=True)
    except KeyboardInterrupt:
        reply.update(ok=False, error="the digest was interrupted")
    except Exception as exc:  # a driver bug: report it, keep the sandbox
        write_stderr("sandlot: internal driver error\n" + traceback.format_exc())
        reply.update(ok=False, error=f"{type(exc).__name__}: {safe_str(exc)}")
    finally:
        state.python_running = False
    return reply


# Most variables one digest lists, and the longest name it lists: the answer is one frame,
# which must stay well below the control stream's 64 MiB. The rest are counted in
# not_digested.
MAX_DIGESTED = 50_000
MAX_DIGEST_NAME = 1024
# Longest type name reported.
_MAX_TYPE_NAME = 200


def _digest(object_secs: float, total_secs: float) -> dict:
    contexts: dict = {}
    not_digested: list[dict] = []
    room = MAX_DIGESTED
    with _TimeBounds(object_secs, total_secs) as bounds:
        # As in a save: user code (__reduce__) runs, and SIGINT stops it.
        state.python_running = True
        try:
            for name in list(state.contexts):
                entries, failed, room = _digest_context(name, bounds, room)
                contexts[name] = entries
                not_digested += failed
        finally:
            state.python_running = False
    return {"contexts": contexts, "not_digested": not_digested}


def _digest_context(name: str, bounds: _TimeBounds, room: int) -> tuple[dict, list, int]:
    """One context's ``{variable: {type, size, sha256}}``, what of it was not digested, and
    the room left."""
    ns, variables = _user_variables(name)
    pickler = _DigestPickler(ns)  # one per context: parts two variables share are hashed once
    entries: dict = {}
    failed: list[dict] = []
    over = 0
    for var, value in variables:
        if room <= 0 or len(var) > MAX_DIGEST_NAME:
            over += 1
            continue
        room -= 1
        module = _module_alias(value)
        if module is not None:  # saved as a reference: nothing but its module's name
            entries[var] = {"type": "module", "size": 0,
                            "sha256": hashlib.sha256(module.encode("utf-8", "replace")).hexdigest()}
            continue
        result: list = []
        try:
            bounds.run(_digest_into, result, pickler, value)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # its pickling raised or ran out of time: this name only
            failed.append({"name": var, "context": name,
                           "reason": _why_not(exc, bounds, "digest")})
            continue
        size, sha256 = result[0]
        entries[var] = {"type": type(value).__name__[:_MAX_TYPE_NAME], "size": size,
                        "sha256": sha256}
    if over:
        failed.append({"name": "", "context": name,
                       "reason": f"{over} more variables were not digested (at most "
                                 f"{MAX_DIGESTED} per digest, names of at most "
                                 f"{MAX_DIGEST_NAME} characters)"})
    return entries, failed, room


def _digest_into(result: list, pickler: _DigestPickler, value: object) -> None:
    counter = _ByteCounter()
    _dump(counter, value, pickler.namespace)  # the size a save writes for it, exactly
    result.append((counter.size, pickler.digest(value)))


class _ByteCounter:
    """A file object that only counts what a pickler writes into it."""

    def __init__(self) -> None:
        self.size = 0

    def write(self, data) -> int:
        size = data.raw().nbytes if isinstance(data, pickle.PickleBuffer) else \
            memoryview(data).nbytes
        self.size += size
        return size


# What a digest writes inline, without a part of its own: values with no parts, whose bytes
# are the same however many names share them.
_ATOMS = frozenset({type(None), bool, int, float, str, bytes, bytearray})


# Containers made only of atoms and of such containers ("plain") are hashed by the C pickler
# in one go, up to a hundred times faster than part by part: up to this many items (shared
# ones counted each time they are met), this deep, and no bytes longer than this.
_PLAIN_KINDS = frozenset({list, tuple, dict})
_PLAIN_ITEMS = 10_000_000
_PLAIN_DEPTH = 16
_PLAIN_BYTES = 1 << 16
_BYTES_KINDS = frozenset({bytes, bytearray})
_PLAIN_ITEM_KINDS = _ATOMS | _PLAIN_KINDS


def _plain(obj) -> bool:
    """Whether a list, tuple or dict is plain (see _PLAIN_KINDS). Shared and cyclic parts
    cannot fool it: it counts what it meets as often as it meets it, and stops at a depth.
    Each container's item types are gathered at C speed; only containers in it are walked."""
    budget = _PLAIN_ITEMS
    stack = [(obj, 0)]
    while stack:
        container, depth = stack.pop()
        budget -= len(container) * (2 if type(container) is dict else 1)
        if budget < 0:
            return False
        kinds = set(map(type, _items(container)))
        if not kinds <= _PLAIN_ITEM_KINDS:
            return False
        if not kinds.isdisjoint(_BYTES_KINDS) and any(
                type(item) in _BYTES_KINDS and len(item) > _PLAIN_BYTES
                for item in _items(container)):
            return False
        if not kinds.isdisjoint(_PLAIN_KINDS):
            if depth >= _PLAIN_DEPTH:
                return False
            stack.extend((item, depth + 1) for item in _items(container)
                         if type(item) in _PLAIN_KINDS)
    return True


def _items(container):
    """A list's or tuple's items, a dict's keys and values."""
    if type(container) is dict:
        return itertools.chain(container, container.values())
    return container


def _plain_token(obj) -> bytes:
    """The token of a plain container: its C pickle without a memo (``fast``; it has no
    cycle), so a part is written whole wherever it is met, as in the part-by-part path."""
    sink = _HashingFile(b"plain\0")
    pickler = pickle.Pickler(sink, protocol=5)
    pickler.fast = True
    pickler.dump(obj)
    return b"=" + sink.hash.digest()


class _HashingFile:
    """A file object that only hashes what is written into it."""

    def __init__(self, prefix: bytes) -> None:
        self.hash = hashlib.sha256(prefix)

    def write(self, data) -> int:
        self.hash.update(data)
        return memoryview(data).nbytes


class _Part:
    """One object being written by a _DigestPickler: the hash of what it wrote so far, its
    depth, and the shallowest object being written that it refers back to (a cycle)."""

    __slots__ = ("hash", "depth", "reach")

    def __init__(self, depth: int) -> None:
        self.hash = hashlib.sha256()
        self.depth = depth
        self.reach = depth


class _DigestPickler(pickle._Pickler):
    """The digest of a value: the same reductions a save pickles it with (cloudpickle's, and a
    cell's functions bound to their namespace), hashed so that equal values give equal digests
    however their parts are shared. Pickle writes an object it meets a second time as a
    reference to the first, so its bytes say which parts are one object, and a loaded copy
    shares differently from its original (two equal strings become one, one dtype becomes
    two): after a fork, the parent's DataFrames and functions would differ from the child's.
    So each part is hashed on its own and its parent hashes only its digest (a Merkle tree):
    a part met twice counts the same as two equal parts. A reference to an object still being
    written (a cycle, or cloudpickle's state setters) is written as how many levels up it is.
    Also left out: the order of a set's items, whether a buffer is read-only, and what differs
    in a class only by identity (see ``_class_dict_digested``).

    Pure Python (the C pickler has no hook per object), on the interpreter's own pure pickler
    with cloudpickle's reducers: objects of many small parts digest slower than they save;
    large buffers are hashed from their own memory, never copied. Deep nesting reaches the
    recursion limit sooner than a save does (reported by name)."""

    dispatch = dict(pickle._Pickler.dispatch)
    dispatch_table = cloudpickle.Pickler.dispatch_table
    # cloudpickle's function reducers use nothing of its C pickler (no super()).
    _function_reduce = cloudpickle.Pickler._function_reduce
    _function_getnewargs = cloudpickle.Pickler._function_getnewargs

    def __init__(self, namespace: dict) -> None:
        super().__init__(io.BytesIO(), protocol=5)  # never written: every write is hashed
        self.write = self._emit
        self._write_large_bytes = self._emit_large
        self.globals_ref: dict = {}
        self.namespace = namespace
        self._parts = [_Part(0)]
        self._depth: dict[int, int] = {}
        # Parts written whole that refer to nothing outside themselves, by id: (token, the
        # object, kept so its id is not reused), for the next time one is met.
        self._done: dict[int, tuple] = {}

    def digest(self, value: object) -> str:
        """``value``'s digest (hex)."""
        try:
            token = self._token(value)
        except BaseException:
            self._parts, self._depth, self.memo = [_Part(0)], {}, {}
            raise
        return token[1:].hex()

    # -- the parts -----------------------------------------------------------------------------

    def save(self, obj, save_persistent_id=True):
        kind = type(obj)
        if kind in _ATOMS:  # straight to pickle's own writer: no reducer, memo or frame applies
            self.dispatch[kind](self, obj)
        else:
            self._parts[-1].hash.update(self._token(obj, save_persistent_id))

    def _token(self, obj, save_persistent_id=True) -> bytes:
        """What the part being written hashes for ``obj``: ``=`` and its digest, or ``<`` and
        how many levels up it is when it is being written."""
        key = id(obj)
        depth = self._depth.get(key)
        if depth is not None:
            return self.get(depth)
        done = self._done.get(key)
        if done is not None:
            return done[0]
        if type(obj) in _PLAIN_KINDS and _plain(obj):
            token = _plain_token(obj)
            self._done[key] = (token, obj)
            return token
        part = _Part(len(self._parts))
        self._parts.append(part)
        self._depth[key] = part.depth
        try:
            super().save(obj, save_persistent_id)
        finally:
            self._parts.pop()
            del self._depth[key]
            self.memo.pop(key, None)
        token = b"=" + part.hash.digest()
        outer = self._parts[-1]
        outer.reach = min(outer.reach, part.reach)
        if part.reach >= part.depth:
            self._done[key] = (token, obj)
        return token

    def memoize(self, obj):
        # Only objects being written are ever referred to (see get).
        depth = self._depth.get(id(obj))
        if depth is not None:
            self.memo[id(obj)] = depth, obj

    def get(self, i):
        """A reference to the object being written at depth ``i``: how many levels up."""
        top = self._parts[-1]
        top.reach = min(top.reach, i)
        return b"<" + (len(self._parts) - 1 - i).to_bytes(4, "little")

    def _emit(self, data) -> None:
        self._parts[-1].hash.update(data)

    def _emit_large(self, header: bytes, payload) -> None:
        top = self._parts[-1]
        top.hash.update(header)
        top.hash.update(payload)

    # -- what a save would carry -------------------------------------------------------------

    def reducer_override(self, obj):
        _refuse_open_file(obj)
        reduced = cloudpickle.Pickler.reducer_override(self, obj)
        if isinstance(obj, type) and isinstance(reduced, tuple) and len(reduced) > 2:
            state_ = reduced[2]
            if isinstance(state_, tuple) and state_ and isinstance(state_[0], dict):
                clsdict = _class_dict_digested(obj, state_[0])
                reduced = (*reduced[:2], (clsdict, *state_[1:]), *reduced[3:])
        return reduced

    def _dynamic_function_reduce(self, func):
        return _bound_to_target(cloudpickle.Pickler._dynamic_function_reduce(self, func), func,
                                self.namespace)

    # -- what the order of bytes would change ------------------------------------------------

    def _save_items(self, obj, opening: bytes, closing: bytes) -> None:
        tokens = sorted(self._token(item) for item in obj)
        self.write(opening)
        for token in tokens:
            self.write(token)
        self.write(closing)

    def _save_set(self, obj) -> None:
        self.write(pickle.EMPTY_SET)
        self.memoize(obj)
        self._save_items(obj, pickle.MARK, pickle.ADDITEMS)

    def _save_frozenset(self, obj) -> None:
        self.memoize(obj)
        self._save_items(obj, pickle.MARK, pickle.FROZENSET)

    def _save_picklebuffer(self, obj) -> None:
        with obj.raw() as m:
            if not m.contiguous:
                raise pickle.PicklingError("PickleBuffer can not be pickled when pointing to a "
                                           "non-contiguous buffer")
            # One opcode whether it is read-only or not: a loaded copy's may differ.
            self._emit_large(pickle.BYTEARRAY8 + m.nbytes.to_bytes(8, "little"), m)

    dispatch[set] = _save_set
    dispatch[frozenset] = _save_frozenset
    dispatch[pickle.PickleBuffer] = _save_picklebuffer


def _class_dict_digested(cls: type, clsdict: dict) -> dict:
    """The class dict cloudpickle writes for ``cls``, as a digest hashes it: without
    ``__slotnames__`` (copyreg's cache), and without what it inherits as equal atoms.
    cloudpickle leaves out what the class inherits by identity, and a loaded class's
    ``__module__`` is a string of its own where the original's was the base class's."""
    inherited: dict = {}
    for base in reversed(cls.__bases__):
        inherited.update(base.__dict__)
    missing = object()
    kept = {}
    for name, value in clsdict.items():
        if name == "__slotnames__":
            continue
        base_value = inherited.get(name, missing)
        if type(value) in _ATOMS and type(base_value) is type(value) and base_value == value:
            continue
        kept[name] = value
    return kept


# -- loading -----------------------------------------------------------------------------------


def load_state(message: dict, fd: int | None) -> dict:
    """Answers a state_load: checks the file in ``fd`` (the caller closes it), then restores
    it. A file that fails its checks loads nothing."""
    reply = {"type": "state_loaded", "id": message.get("id")}
    try:
        if fd is None:
            raise Refused("no state file came with the request")
        reseed = message.get("reseed", True) is not False
        with _VerifiedBody(fd) as body:
            index = _read_index(body)
            reply.update(_restore(index, body, reseed), ok=True)
    except Refused as exc:
        reply.update(ok=False, error=str(exc))
    except BaseException as exc:  # a driver bug (or a stray interrupt): report, keep the sandbox
        write_stderr("sandlot: internal driver error\n" + traceback.format_exc())
        reply.update(ok=False, error=f"{type(exc).__name__}: {safe_str(exc)}")
    return reply


class _VerifiedBody:
    """The body of the state file in ``fd``, mapped read-only, once its header and SHA-256
    have been checked; refused with what is wrong otherwise."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._map: mmap.mmap | None = None
        self._view: memoryview | None = None

    def __enter__(self) -> memoryview:
        try:
            info = os.fstat(self.fd)
            if not stat.S_ISREG(info.st_mode):
                raise Refused("the state file is not a regular file")
            expected = _check_header(os.pread(self.fd, HEADER_LEN, 0), info.st_size)
            self._map = mmap.mmap(self.fd, info.st_size, access=mmap.ACCESS_READ)
        except OSError as exc:
            raise Refused(f"the state file cannot be read: {exc}") from None
        self._view = memoryview(self._map)[HEADER_LEN:]
        if hashlib.sha256(self._view).hexdigest() != expected:
            self.__exit__()
            raise Refused("the state file is corrupt: its body does not match the SHA-256 in "
                          "its header (truncated or altered); nothing was loaded")
        return self._view

    def __exit__(self, *exc) -> None:
        if self._view is not None:
            self._view.release()
            self._view = None
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # something still views it: it goes when that does
                pass
            self._map = None


def _check_header(header: bytes, size: int) -> str:
    """The body's SHA-256 the header names, or Refused saying what is wrong."""
    if len(header) < HEADER_LEN:
        if MAGIC.startswith(header[:len(MAGIC)]) or header.startswith(MAGIC):
            raise Refused(f"the state file is truncated: {size} bytes, shorter than its "
                          f"{HEADER_LEN}-byte header; nothing was loaded")
        raise Refused("not a sandlot state file (no SANDLOT-STATE header)")
    if not header.startswith(MAGIC):
        raise Refused("not a sandlot state file (no SANDLOT-STATE header)")
    lines = header[len(MAGIC):].split(b"\n")
    version = lines[0].strip()
    if version != str(FORMAT_VERSION).encode():
        raise Refused(f"the state file has format version {safe_str(version)[:20]!r}; this "
                      f"driver reads version {FORMAT_VERSION}")
    digest = lines[1].strip().lower() if len(lines) > 1 else b""
    if not re.fullmatch(rb"[0-9a-f]{64}", digest):
        raise Refused("the state file's header has no valid SHA-256")
    if size < HEADER_LEN + _INDEX_LEN_BYTES:
        raise Refused(f"the state file is truncated: {size} bytes, no room for a body")
    return digest.decode()


def _read_index(body: memoryview) -> dict:
    """The index at the end of a verified body."""
    length = int.from_bytes(body[-_INDEX_LEN_BYTES:], "little")
    if length > len(body) - _INDEX_LEN_BYTES:
        raise Refused("the state file's index is garbled")
    end = len(body) - _INDEX_LEN_BYTES
    try:
        index = pickle.loads(body[end - length:end])
    except Exception as exc:
        raise Refused(f"the state file's index cannot be read: {_reason(exc)}") from None
    if not isinstance(index, dict) or index.get("version") != FORMAT_VERSION \
            or not isinstance(index.get("contexts"), dict):
        raise Refused("the state file's index is garbled")
    return index


def _restore(index: dict, body: memoryview, reseed: bool) -> dict:
    not_restored: list[dict] = []
    for name in index.get("modules") or ():
        if name not in sys.modules:
            try:
                importlib.import_module(name)
            except BaseException as exc:  # a module that no longer imports: reported
                not_restored.append({"name": name, "context": "", "reason": _reason(exc)})
    count = 0
    for name, entry in index["contexts"].items():
        if not isinstance(name, str) or not name or not isinstance(entry, dict):
            continue
        if name not in state.contexts:
            state.contexts[name] = Context()
        enter_context(name)  # builds the context's namespace if it never had one
        restored, failed = _restore_context(name, entry, body)
        count += restored
        not_restored += failed
    active = index.get("active")
    enter_context(active if active in state.contexts else DEFAULT_CONTEXT)
    _restore_random(index.get("random"), reseed)
    contexts = [DEFAULT_CONTEXT] + [c for c in state.contexts if c != DEFAULT_CONTEXT]
    return {"contexts": contexts, "variables": count, "not_restored": not_restored}


def _restore_context(name: str, entry: dict, body: memoryview) -> tuple[int, list]:
    """Loads one context's entry into the (now active) context's namespace."""
    ns = state.shell.user_ns
    failed: list[dict] = []
    count = 0
    for var, module in (entry.get("modules_as") or {}).items():
        try:
            ns[var] = importlib.import_module(module)
            count += 1
        except BaseException as exc:
            failed.append({"name": var, "context": name, "reason": _reason(exc)})
    for var, (offset, length) in (entry.get("vars") or {}).items():
        try:
            ns[var] = _load_value(body[offset:offset + length], ns)
            count += 1
        except BaseException as exc:  # its unpickling raised: this name is skipped
            failed.append({"name": var, "context": name, "reason": _reason(exc)})
    bash = entry.get("bash")
    if isinstance(bash, dict):
        cwd = bash.get("cwd")
        if state.bash is None:
            state.bash = BashSession()  # started by the context's next bash cell
        state.bash.restore(cwd, bash.get("env") or {})
        if isinstance(cwd, str) and not os.path.isdir(cwd):
            failed.append({"name": BASH_SESSION, "context": name,
                           "reason": f"its working directory {cwd!r} does not exist here"})
    return count, failed


def _load_value(data: memoryview, ns: dict) -> object:
    builtins = ns.get("__builtins__")
    state.loading_namespace = ns
    try:
        return pickle.loads(data)
    finally:
        state.loading_namespace = None
        if builtins is not None:  # cloudpickle sets it on the globals it builds functions on
            ns["__builtins__"] = builtins


def _restore_random(saved: object, reseed: bool) -> None:
    """Fresh entropy (as a zygote child gets), or the generators exactly where they were."""
    if reseed:
        random.seed()
        numpy_random = sys.modules.get("numpy.random")
        if numpy_random is not None:
            try:
                numpy_random.seed()
            except Exception:
                pass
        return
    if not isinstance(saved, bytes):
        return
    states = pickle.loads(saved)
    random.setstate(states["random"])
    if "numpy" in states:
        try:
            importlib.import_module("numpy.random").set_state(states["numpy"])
        except Exception:
            pass
