"""``state_digest`` (``digest_state``): per code context, each variable a saved state would
carry, digested with the same reductions as a save (``pickling``), canonically: equal values
give equal digests however their parts are shared, for the server to compare two sandboxes of
one family (``GET /v1/sandboxes/{a}/diff/{b}``) without ever seeing a pickle. Nothing is
written.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import pickle
import traceback

import cloudpickle

from .capture import write_stderr
from .jsonsafe import safe_str
from .pickling import (
    DEFAULT_OBJECT_SECS,
    DEFAULT_TOTAL_SECS,
    TimeBounds,
    bound_to_target,
    dump_variable,
    module_alias,
    positive_secs,
    refuse_open_file,
    user_variables,
    why_not,
)
from .state import state


def digest_state(message: dict) -> dict:
    """Answers a state_digest (for ``GET /v1/sandboxes/{a}/diff/{b}``, the server's
    ``diff.rs``): per code context, each variable a save would carry, with its type's name,
    the size of the pickle a save writes for it, and a SHA-256 digest that equal values share
    however their parts are shared (``_DigestPickler``); nothing is kept. Same names,
    reductions and time bounds as ``state_save``; what could not be pickled is listed in
    ``not_digested``. The server compares two sandboxes' digests; it never sees a pickle."""
    reply = {"type": "state_digested", "id": message.get("id")}
    try:
        object_secs = positive_secs(message.get("object_secs"), DEFAULT_OBJECT_SECS)
        total_secs = positive_secs(message.get("total_secs"), DEFAULT_TOTAL_SECS)
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
    with TimeBounds(object_secs, total_secs) as bounds:
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


def _digest_context(name: str, bounds: TimeBounds, room: int) -> tuple[dict, list, int]:
    """One context's ``{variable: {type, size, sha256}}``, what of it was not digested, and
    the room left."""
    ns, variables = user_variables(name)
    pickler = _DigestPickler(ns)  # one per context: parts two variables share are hashed once
    entries: dict = {}
    failed: list[dict] = []
    over = 0
    for var, value in variables:
        if room <= 0 or len(var) > MAX_DIGEST_NAME:
            over += 1
            continue
        room -= 1
        module = module_alias(value)
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
                           "reason": why_not(exc, bounds, "digest")})
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
    dump_variable(counter, value, pickler.namespace)  # the size a save writes for it, exactly
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
        refuse_open_file(obj)
        reduced = cloudpickle.Pickler.reducer_override(self, obj)
        if isinstance(obj, type) and isinstance(reduced, tuple) and len(reduced) > 2:
            state_ = reduced[2]
            if isinstance(state_, tuple) and state_ and isinstance(state_[0], dict):
                clsdict = _class_dict_digested(obj, state_[0])
                reduced = (*reduced[:2], (clsdict, *state_[1:]), *reduced[3:])
        return reduced

    def _dynamic_function_reduce(self, func):
        return bound_to_target(cloudpickle.Pickler._dynamic_function_reduce(self, func), func,
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
