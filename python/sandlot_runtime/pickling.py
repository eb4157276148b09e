"""How a saved state pickles each variable, shared by ``state_save`` (``snapshot``) and
``state_digest`` (``digest``): which names of a context's namespace are carried
(``user_variables``), the pickler (cloudpickle, with a cell's functions bound to the namespace
they are loaded into instead of copies of their globals) and the SIGALRM bounds on each
object's pickling and on the whole operation (``TimeBounds``), and the reasons reported for
what could not be pickled.
"""

from __future__ import annotations

import io
import pickle
import re
import signal
import sys
import time
import types

import cloudpickle

from .jsonsafe import safe_str
from .state import state

# Bounds when the request gives none (the server sends its own).
DEFAULT_OBJECT_SECS = 2.0
DEFAULT_TOTAL_SECS = 20.0
# Longest reason reported for one name.
MAX_REASON = 300
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


class TimedOut(BaseException):
    """One object's pickling passed its bound. A BaseException so that user code's
    ``except Exception`` in a ``__reduce__`` does not swallow it."""


class OutOfTime(Exception):
    """The whole save's bound is used up before this object was tried."""


def user_variables(name: str) -> tuple[dict, list[tuple[str, object]]]:
    """Context ``name``'s namespace and the variables of it a saved state carries (and a digest
    compares): every name but those ``skipped`` leaves out, in the namespace's order."""
    ctx = state.contexts[name]
    active = name == state.active_context
    ns = (state.shell.user_ns if active else ctx.user_ns) or {}
    hidden = state.shell.user_ns_hidden if active else ctx.user_ns_hidden
    return ns, [(var, value) for var, value in list(ns.items())
                if not skipped(var, value, hidden)]


def module_alias(value: object) -> str | None:
    """The module's name when ``value`` is an importable module (saved as a reference to it,
    ``import <module> as <name>``), else None."""
    if isinstance(value, types.ModuleType) and sys.modules.get(value.__name__) is value:
        return value.__name__
    return None


def skipped(name: object, value: object, hidden: dict) -> bool:
    """Names a saved state leaves out: IPython's own, history, dunders, names hidden from the
    user, and the template's setup names still bound to the setup's object."""
    if not isinstance(name, str) or name in _IPYTHON_NAMES or _HISTORY_NAME.fullmatch(name):
        return True
    if name.startswith("__") and name.endswith("__"):
        return True
    missing = object()
    return hidden.get(name, missing) is value or state.setup_names.get(name, missing) is value


def why_not(exc: BaseException, bounds: TimeBounds, what: str) -> str:
    """The reason reported for a variable whose pickling (for a ``what``: save, digest) did
    not finish with ``exc``."""
    if isinstance(exc, TimedOut):
        if bounds.last_was_total:
            return f"timed out: the {what}'s bound of {bounds.total_secs:g} s was reached"
        return f"timed out after {bounds.object_secs:g} s"
    if isinstance(exc, OutOfTime):
        return f"not tried: the {what}'s bound of {bounds.total_secs:g} s was used up"
    return reason_for(exc)


def dump_variable(writer, value: object, ns: dict) -> None:
    """Pickles one variable of namespace ``ns`` into ``writer`` (any object with a ``write``:
    a save's state file, a digest's byte counter)."""
    # In band: a NumPy array's buffer reaches writer.write as a PickleBuffer, written from
    # the array's own memory.
    ContextPickler(writer, ns).dump(value)


def reason_for(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {safe_str(exc)}"
    return text if len(text) <= MAX_REASON else text[:MAX_REASON - 3] + "..."


def positive_secs(value: object, default: float) -> float:
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


class ContextPickler(cloudpickle.Pickler):
    """cloudpickle, except that functions whose globals are the namespace being saved (defined
    in its cells, and methods of its classes) keep no copy of their globals: they get the
    namespace they are loaded into. Copies would go stale on the first assignment after the
    load (a function would never see a redefined helper), and would pull every global a
    function names into each variable that holds it."""

    def __init__(self, file, namespace: dict) -> None:
        super().__init__(file, protocol=5)
        self._namespace = namespace

    def reducer_override(self, obj):
        refuse_open_file(obj)
        return super().reducer_override(obj)

    def _dynamic_function_reduce(self, func):
        return bound_to_target(super()._dynamic_function_reduce(func), func, self._namespace)


def refuse_open_file(obj: object) -> None:
    # cloudpickle would read a file open for reading to its end and load it as a StringIO.
    if isinstance(obj, _OPEN_FILE_TYPES):
        raise TypeError(f"cannot pickle an open file ({type(obj).__name__} "
                        f"{safe_str(getattr(obj, 'name', '?'))!r}); open it again after "
                        "the load")


def bound_to_target(reduced, func, namespace: dict):
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


class TimeBounds:
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

    def __enter__(self) -> TimeBounds:
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
            raise OutOfTime
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
            raise TimedOut
        frame = frame.f_back
