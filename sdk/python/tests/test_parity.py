"""The async client has every method of the sync one, with the same parameters (issue 20).

Offline: it compares the classes, it calls nothing. The pairs are found, not listed: every
public class or function whose name starts with ``Async`` / ``async_`` in ``sandlot.__all__``,
in a public module's ``__all__`` or defined in a public module, and its sync counterpart (the
name without the prefix). A new pair is compared the day it is added. An ``AsyncX`` without
an ``X``, or an exported class or function ``X`` without its ``AsyncX`` / ``async_x`` (values
aside: the models and errors both clients return), fails unless listed in ``UNPAIRED`` with
the reason.

For each pair of classes: the same public methods and properties (``__enter__`` /
``__aenter__`` and the like matched), the same attributes set on instances, every async method
a coroutine function (an async generator where the sync one is a generator) unless listed in
``SYNC_IN_ASYNC`` with the reason, and the same parameters (names, kinds, defaults; not
annotations) by ``inspect.signature``.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import textwrap
from types import ModuleType
from typing import Any, Dict, List, Optional, Tuple

import pytest

import sandlot

# The public modules: sandlot and its submodules without a leading underscore (integrations
# import third-party frameworks and have no sync/async pairs).
PUBLIC_MODULES: List[ModuleType] = [sandlot] + [
    importlib.import_module(f"sandlot.{m.name}")
    for m in pkgutil.iter_modules(sandlot.__path__)
    if not m.name.startswith("_") and m.name != "integrations"
]

# Exported names with no twin, each with its reason. The objects the SDK returns (models) and
# its errors are values, the same for both clients, and are not listed.
_ONE_CALL = "a one-call shortcut opening a sync connection; asyncio code writes `async with {0}() as c: await c.{1}(...)`"
UNPAIRED: Dict[str, str] = {
    "ConnectionConfig": "configuration (URL, key, timeouts), no I/O; both clients resolve it",
    "list_snapshots": _ONE_CALL.format("AsyncSnapshots", "list"),
    "get_snapshot": _ONE_CALL.format("AsyncSnapshots", "get"),
    "delete_snapshot": _ONE_CALL.format("AsyncSnapshots", "delete"),
    "create_volume": _ONE_CALL.format("AsyncVolumes", "create"),
    "list_volumes": _ONE_CALL.format("AsyncVolumes", "list"),
    "get_volume": _ONE_CALL.format("AsyncVolumes", "get"),
    "delete_volume": _ONE_CALL.format("AsyncVolumes", "delete"),
    "run_python_tool": "a tool declaration for a model, no I/O",
    "run_bash_tool": "a tool declaration for a model, no I/O",
    "declarations": "tool declarations for a model, no I/O",
    "format_execution": "shapes an Execution for a model, no I/O",
    "ToolImage": "a value a dispatcher returns",
    "ToolOutput": "a value a dispatcher returns",
}
# Where the values are defined: modules whose exports need no twin.
VALUE_MODULES = {"sandlot.errors", "sandlot.models", "sandlot._artifacts", "sandlot._execution", "sandlot._resources", "sandlot._family"}

# Sync names whose async twin is spelled differently (sync name -> async name).
RENAMED: Dict[str, str] = {
    "__enter__": "__aenter__",  # `with` / `async with`
    "__exit__": "__aexit__",
    "__iter__": "__aiter__",  # `for` / `async for`
}

# Methods of an async class that are not coroutines although they are defined on the async
# class itself (methods inherited from a base the sync class shares are pure by construction:
# one function serves both). Each does no I/O.
SYNC_IN_ASYNC: Dict[Tuple[str, str], str] = {
    ("AsyncSandbox", "get_url"): "builds the port's URL from the sandbox's id and address; no request",
    ("AsyncSandbox", "port_url"): "the same URL as a module-level helper computes; no request",
    ("AsyncVolumes", "files"): "hands back the volume's files API without asking the server (as Volumes.files)",
    ("AsyncSandbox", "create"): "returns an awaitable (_Creating) that is also an async context manager, "
    "so that both `await AsyncSandbox.create()` and `async with AsyncSandbox.create()` work",
}

# Methods whose parameters are compared with another method of the twin: the sync sandbox is
# created by its constructor (Sandbox.create forwards *args, **kwargs to it), the async one by
# AsyncSandbox.create (its constructor refuses, since creating is a request to await).
COMPARED_WITH: Dict[Tuple[str, str], Tuple[str, str]] = {
    ("AsyncSandbox", "create"): ("Sandbox", "__init__"),
    ("AsyncSandbox", "__init__"): ("", ""),  # raises TypeError, pointing at create
    ("Sandbox", "create"): ("", ""),  # (*args, **kwargs) for __init__, compared above
}

# Dunder methods compared (others, such as __repr__ or __eq__, are the same object's protocol).
DUNDERS = {"__init__", "__enter__", "__exit__", "__aenter__", "__aexit__", "__iter__", "__aiter__", "__len__"}


def _public_names(module: ModuleType) -> List[str]:
    return list(getattr(module, "__all__", []))


def _is_ours(obj: Any) -> bool:
    return (inspect.isclass(obj) or inspect.isfunction(obj)) and getattr(obj, "__module__", "").startswith("sandlot")


def _defined_in_public_module(obj: Any) -> bool:
    module = getattr(obj, "__module__", "")
    return module == "sandlot" or (module.startswith("sandlot.") and not module.split(".")[1].startswith("_"))


def _sync_name(name: str) -> Optional[str]:
    for prefix in ("Async", "async_"):
        if name.startswith(prefix) and len(name) > len(prefix):
            return name[len(prefix):]
    return None


def _lookup(name: str) -> Optional[Any]:
    for module in PUBLIC_MODULES:
        obj = getattr(module, name, None)
        if obj is not None and _is_ours(obj):
            return obj
    return None


def discover() -> Tuple[Dict[str, Tuple[Any, Any]], List[str]]:
    """{async name: (sync object, async object)} and the problems: an async name without its
    sync twin, or an exported sync name without its async twin."""
    asyncs: Dict[str, Any] = {}
    exported = set()
    for module in PUBLIC_MODULES:
        exported.update(_public_names(module))
        candidates = {name: getattr(module, name, None) for name in _public_names(module)}
        candidates.update({name: obj for name, obj in vars(module).items() if _is_ours(obj) and _defined_in_public_module(obj)})
        for name, obj in candidates.items():
            if _sync_name(name) is not None and _is_ours(obj):
                asyncs[name] = obj
    pairs: Dict[str, Tuple[Any, Any]] = {}
    problems: List[str] = []
    for name, obj in sorted(asyncs.items()):
        sync = _lookup(_sync_name(name) or "")
        if sync is None:
            if name not in UNPAIRED:
                problems.append(f"{name} has no sync twin {_sync_name(name)}")
            continue
        pairs[name] = (sync, obj)
    twins = {_sync_name(name) for name in asyncs}
    for name in sorted(exported):
        obj = _lookup(name)
        if obj is None or _sync_name(name) is not None or obj.__module__ in VALUE_MODULES:
            continue  # a constant, an async name (above) or a value
        if name not in twins and name not in UNPAIRED:
            twin = f"Async{name}" if inspect.isclass(obj) else f"async_{name}"
            problems.append(f"{name} is exported without an async twin ({twin})")
    return pairs, problems


PAIRS, DISCOVERY_PROBLEMS = discover()


def test_every_async_name_has_its_sync_twin():
    assert DISCOVERY_PROBLEMS == []
    twins = {_sync_name(name) for name in PAIRS}
    for name in UNPAIRED:  # no stale entry: each is still exported and still has no twin
        assert _lookup(name) is not None and name not in twins, name


def test_discovery_finds_the_pairs_it_must():
    # Positive control: the pairs the SDK is known to have are among those found.
    expected = {
        "AsyncSandbox", "AsyncFiles", "AsyncBaseFiles", "AsyncContexts", "AsyncTemplates",
        "AsyncSnapshots", "AsyncVolumes", "AsyncVolumeFiles", "AsyncJob", "AsyncToolDispatcher",
        "async_events",
    }
    assert expected <= set(PAIRS), sorted(expected - set(PAIRS))


def _members(cls: type) -> Dict[str, Any]:
    """Public attributes of ``cls`` (with the dunders compared), as found on the class."""
    names = [n for n in dir(cls) if not n.startswith("_") or n in DUNDERS]
    return {n: inspect.getattr_static(cls, n) for n in names}


def _renamed(name: str) -> str:
    return RENAMED.get(name, name)


def _signature_of(owner: Any, name: str) -> Optional[inspect.Signature]:
    try:
        return inspect.signature(getattr(owner, name))
    except (TypeError, ValueError):  # a builtin slot wrapper (object.__init__ and the like)
        return None


def _params(sig: inspect.Signature) -> List[Tuple[str, Any, Any]]:
    # Names, kinds and defaults; annotations differ by design (httpx.BaseTransport and
    # httpx.AsyncBaseTransport, Iterator and AsyncIterator...).
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


def _function(member: Any) -> Optional[Any]:
    if isinstance(member, (staticmethod, classmethod)):
        return member.__func__
    return member if inspect.isfunction(member) else None


def _class_pairs() -> List[Tuple[str, type, type]]:
    return [(name, sync, asy) for name, (sync, asy) in sorted(PAIRS.items()) if inspect.isclass(asy)]


def _function_pairs() -> List[Tuple[str, Any, Any]]:
    return [(name, sync, asy) for name, (sync, asy) in sorted(PAIRS.items()) if inspect.isfunction(asy)]


@pytest.mark.parametrize("name,sync,asy", _class_pairs(), ids=[p[0] for p in _class_pairs()])
def test_the_async_class_has_the_sync_class_methods(name: str, sync: type, asy: type):
    sync_members, async_members = _members(sync), _members(asy)
    assert sorted(_renamed(n) for n in sync_members) == sorted(async_members)


def _instance_attributes(cls: type) -> List[str]:
    """Public attributes the class's own code sets on its instances (``self.files = ...``, or
    ``obj.files`` in an alternative constructor), which ``dir(cls)`` does not show."""
    found = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("sandlot"):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            for target in targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                        and target.value.id in ("self", "obj") and not target.attr.startswith("_"):
                    found.add(target.attr)
    return sorted(found)


@pytest.mark.parametrize("name,sync,asy", _class_pairs(), ids=[p[0] for p in _class_pairs()])
def test_the_async_class_has_the_sync_class_attributes(name: str, sync: type, asy: type):
    assert _instance_attributes(sync) == _instance_attributes(asy)


@pytest.mark.parametrize("name,sync,asy", _class_pairs(), ids=[p[0] for p in _class_pairs()])
def test_async_methods_are_coroutines_and_properties_stay_properties(name: str, sync: type, asy: type):
    sync_members, async_members = _members(sync), _members(asy)
    problems = []
    for sync_name, sync_member in sync_members.items():
        async_name = _renamed(sync_name)
        async_member = async_members.get(async_name)
        if async_member is None:
            continue  # reported by the test above
        if isinstance(sync_member, property) or isinstance(async_member, property):
            if not (isinstance(sync_member, property) and isinstance(async_member, property)):
                problems.append(f"{async_name}: a property on one side only")
            continue
        if type(sync_member) is not type(async_member):  # classmethod, staticmethod, function, value
            problems.append(f"{async_name}: {type(sync_member).__name__} vs {type(async_member).__name__}")
            continue
        fn = _function(async_member)
        if fn is None or async_name == "__init__":
            continue
        if async_member is sync_member:
            continue  # one function, inherited from a base both share: no I/O of its own
        sync_fn = _function(sync_member)
        if inspect.isasyncgenfunction(fn):
            if not (sync_fn is not None and inspect.isgeneratorfunction(sync_fn)) and async_name != "__aiter__":
                problems.append(f"{async_name}: an async generator where the sync one is not a generator")
        elif not inspect.iscoroutinefunction(fn) and (name, async_name) not in SYNC_IN_ASYNC:
            if sync_fn is not None and inspect.isgeneratorfunction(sync_fn):
                problems.append(f"{async_name}: the sync one is a generator, this is not an async generator")
            else:
                problems.append(f"{async_name} is not a coroutine function")
    assert problems == []


@pytest.mark.parametrize("name,sync,asy", _class_pairs(), ids=[p[0] for p in _class_pairs()])
def test_async_methods_take_the_sync_methods_parameters(name: str, sync: type, asy: type):
    sync_name = sync.__name__
    problems = []
    for method, sync_member in _members(sync).items():
        async_method = _renamed(method)
        if (sync_name, method) in COMPARED_WITH or (name, async_method) in COMPARED_WITH:
            continue
        if isinstance(sync_member, property) or not hasattr(asy, async_method):
            continue
        sync_sig, async_sig = _signature_of(sync, method), _signature_of(asy, async_method)
        if sync_sig is None or async_sig is None:
            assert sync_sig is async_sig is None, f"{async_method}: a signature on one side only"
            continue
        if _params(sync_sig) != _params(async_sig):
            problems.append(f"{async_method}{async_sig} differs from {method}{sync_sig}")
    for (owner, method), (other_owner, other_method) in COMPARED_WITH.items():
        if owner != name or not other_owner:
            continue
        mine = _signature_of(asy, method)
        theirs = _signature_of(_lookup(other_owner), other_method)
        assert mine is not None and theirs is not None
        # The constructor's self is not a parameter of the classmethod's bound signature.
        theirs_params = [p for p in _params(theirs) if p[0] != "self"]
        if _params(mine) != theirs_params:
            problems.append(f"{owner}.{method}{mine} differs from {other_owner}.{other_method}{theirs}")
    assert problems == []


def test_the_exceptions_are_still_needed():
    # Each listed exception names a method that exists and is still not a coroutine: once it
    # becomes one (or goes), its entry must go too.
    for (owner, method), reason in SYNC_IN_ASYNC.items():
        fn = _function(inspect.getattr_static(PAIRS[owner][1], method))
        assert fn is not None and not inspect.iscoroutinefunction(fn), (owner, method, reason)
    creating = inspect.signature(sandlot.AsyncSandbox.create).return_annotation
    made = eval(creating, vars(importlib.import_module("sandlot.async_sandbox"))) if isinstance(creating, str) else creating
    assert hasattr(made, "__await__") and hasattr(made, "__aenter__") and hasattr(made, "__aexit__")


@pytest.mark.parametrize("name,sync,asy", _function_pairs(), ids=[p[0] for p in _function_pairs()])
def test_async_functions_match_their_sync_twin(name: str, sync: Any, asy: Any):
    if inspect.isgeneratorfunction(sync):
        assert inspect.isasyncgenfunction(asy), f"{name}: the sync one is a generator"
    else:
        assert inspect.iscoroutinefunction(asy), f"{name} is not a coroutine function"
    assert _params(inspect.signature(sync)) == _params(inspect.signature(asy))


def test_the_comparison_sees_drift():
    # Negative control: a missing method, a sync method on the async side, a differing
    # parameter and a differing default are each caught.
    class Sync:
        def __init__(self, x: int) -> None: ...

        def read(self, path: str, mode: str = "r") -> str: ...

        def write(self, path: str) -> None: ...

        def gone(self) -> None: ...

    class AsyncGood:
        def __init__(self, x: int) -> None: ...

        async def read(self, path: str, mode: str = "r") -> str: ...

        async def write(self, path: str) -> None: ...

        async def gone(self) -> None: ...

    class AsyncBad:
        def __init__(self, x: int) -> None: ...

        async def read(self, path: str, mode: str = "rb") -> str: ...

        def write(self, file: str) -> None: ...

    assert sorted(_members(Sync)) == sorted(_members(AsyncGood))
    assert sorted(_members(Sync)) != sorted(_members(AsyncBad))
    assert _params(inspect.signature(Sync.read)) == _params(inspect.signature(AsyncGood.read))
    assert _params(inspect.signature(Sync.read)) != _params(inspect.signature(AsyncBad.read))
    assert _params(inspect.signature(Sync.write)) != _params(inspect.signature(AsyncBad.write))
    assert not inspect.iscoroutinefunction(_function(inspect.getattr_static(AsyncBad, "write")))
