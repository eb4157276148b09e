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
module}, "bash": {"cwd", "env"} | None, "js": {"cells", "lost"} (when the context ran
JavaScript)}}, "active", "modules", "random"}``; offsets count from
the body's start), then the index's length in 8 bytes, little-endian. The body is written from
``HEADER_LEN`` on and the header last, so a save cut short never looks whole. Each variable is
streamed straight into the file (a DataFrame's buffer goes from its own memory to the page cache
without a copy) and hashed on a helper thread meanwhile; a load maps the file, checks the hash
before it unpickles anything, and unpickles each variable from the mapping.

``state_digest`` (``digest_state``, in ``digest.py``, re-exported here) digests the same
variables with the same reductions, canonically (equal values, equal digests, however their
parts are shared), for the server to compare two sandboxes of one family without ever seeing a
pickle. What both carry and how each variable is pickled and bounded is ``pickling.py``.

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
import mmap
import os
import pickle
import queue
import random
import re
import stat
import sys
import threading
import traceback

from .bash_session import BashSession, limit_hint
from .capture import write_stderr
from .contexts import Context, enter_context, set_context_cwd, set_workdir
from .digest import MAX_DIGEST_NAME, MAX_DIGESTED, digest_state
from .js_session import JS_STATE, JsSession
from .jsonsafe import safe_str
from .pickling import (
    DEFAULT_OBJECT_SECS,
    DEFAULT_TOTAL_SECS,
    MAX_REASON,
    TimeBounds,
    _target_namespace,
    dump_variable,
    module_alias,
    positive_secs,
    reason_for,
    user_variables,
    why_not,
)
from .state import DEFAULT_CONTEXT, state

# Importable from here as before the split: serve.py's digest_state and its bounds, and
# _target_namespace, which state files saved before the pickling helpers moved name as
# ``sandlot_runtime.snapshot._target_namespace`` (a cell's function refers to it).
__all__ = ["save_state", "load_state", "digest_state", "header_for", "Refused", "MAGIC",
           "FORMAT_VERSION", "HEADER_LEN", "MAX_VARIABLE_BYTES", "DEFAULT_OBJECT_SECS",
           "DEFAULT_TOTAL_SECS", "MAX_REASON", "BASH_SESSION", "MAX_DIGESTED",
           "MAX_DIGEST_NAME", "_target_namespace"]

MAGIC = b"SANDLOT-STATE\n"
FORMAT_VERSION = 1
# Bytes before the body (the server's HEADER_LEN in saved.rs).
HEADER_LEN = 96
# The body ends with the index's length in this many bytes.
_INDEX_LEN_BYTES = 8
# A variable whose pickle passes this is reported, not saved.
MAX_VARIABLE_BYTES = 2 << 30
# The `name` of a Bash session in not_captured / not_restored (never a Python identifier).
BASH_SESSION = "bash session"
# After this many bytes the body is hashed on a helper thread while it is written.
_HASH_THREAD_AFTER = 1 << 20


class Refused(Exception):
    """A request the driver cannot carry out; its text is the answer's error."""




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
        object_secs = positive_secs(message.get("object_secs"), DEFAULT_OBJECT_SECS)
        total_secs = positive_secs(message.get("total_secs"), DEFAULT_TOTAL_SECS)
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
        with TimeBounds(object_secs, total_secs) as bounds:
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
                 "random": _random_state(), "workdir": state.workdir}
        size, digest = writer.finish(pickle.dumps(index, protocol=5))
    finally:
        writer.close()
    return {"bytes": size, "sha256": digest, "variables": count, "not_captured": not_captured}


def _process_cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # removed by user code
        return None


def _save_context(name: str, writer: _BodyWriter, bounds: TimeBounds) -> tuple[dict, list]:
    """One context's entry of the index, and what of it was not captured."""
    ns, variables = user_variables(name)
    ctx = state.contexts[name]
    entry: dict = {"vars": {}, "modules_as": {}, "bash": None, "home": ctx.home,
                   "cwd": _process_cwd() if name == state.active_context else ctx.cwd}
    failed: list[dict] = []
    for var, value in variables:
        module = module_alias(value)
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
            failed.append({"name": BASH_SESSION, "context": name, "reason": reason_for(exc)})
    js = state.js if name == state.active_context else ctx.js
    if js is not None:
        # The log of the cells that made its node's state: replayed on restore (js_session).
        entry["js"] = js.saved_state()
        if js.lost is not None:
            failed.append({"name": JS_STATE, "context": name, "reason": js.lost})
    return entry, failed

def _save_value(value: object, ns: dict, writer: _BodyWriter,
                bounds: TimeBounds) -> tuple[tuple[int, int] | None, str | None]:
    """Streams one variable's pickle into the body: its (offset, length), or why it was not
    saved (and nothing of it stays in the file)."""
    start = writer.mark()
    try:
        bounds.run(dump_variable, writer, value, ns)
    except (_WriteFailed, KeyboardInterrupt):
        raise
    except BaseException as exc:  # its pickling raised or ran out of time: this name only
        writer.rollback()
        if isinstance(exc, _TooLarge):
            return None, f"its pickle is over the limit of {MAX_VARIABLE_BYTES >> 30} GiB"
        return None, why_not(exc, bounds, "save")
    return (start - HEADER_LEN, writer.offset - start), None

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
        raise Refused(f"the state file's index cannot be read: {reason_for(exc)}") from None
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
                not_restored.append({"name": name, "context": "", "reason": reason_for(exc)})
    count = 0
    workdir = index.get("workdir")
    if isinstance(workdir, str):
        set_workdir(workdir)
    for name, entry in index["contexts"].items():
        if not isinstance(name, str) or not name or not isinstance(entry, dict):
            continue
        home = entry.get("home")
        if name not in state.contexts:
            state.contexts[name] = Context(home if isinstance(home, str) else None)
        elif isinstance(home, str):
            state.contexts[name].home = home
        enter_context(name)  # builds the context's namespace if it never had one
        restored, failed = _restore_context(name, entry, body)
        set_context_cwd(name, entry.get("cwd"))  # where its code left it
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
            failed.append({"name": var, "context": name, "reason": reason_for(exc)})
    for var, (offset, length) in (entry.get("vars") or {}).items():
        try:
            ns[var] = _load_value(body[offset:offset + length], ns)
            count += 1
        except BaseException as exc:  # its unpickling raised: this name is skipped
            failed.append({"name": var, "context": name, "reason": reason_for(exc)})
    bash = entry.get("bash")
    if isinstance(bash, dict):
        cwd = bash.get("cwd")
        if state.bash is None:
            state.bash = BashSession()  # started by the context's next bash cell
        state.bash.restore(cwd, bash.get("env") or {})
        if isinstance(cwd, str) and not os.path.isdir(cwd):
            failed.append({"name": BASH_SESSION, "context": name,
                           "reason": f"its working directory {cwd!r} does not exist here"})
    if "js" in entry:
        if state.js is not None:
            state.js.stop()
        state.js = JsSession.restored(entry.get("js"))
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
