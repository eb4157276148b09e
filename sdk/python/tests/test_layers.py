"""The SDK's modules stand in floors: each imports only from floors below it, at module level.
No import circle, and none dodged with an import inside a function."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import sandlot

PACKAGE = Path(sandlot.__file__).resolve().parent

# Lowest first. A module may import modules of lower floors only; a new module must be given
# a floor here.
FLOORS: List[List[str]] = [
    ["_version", "_sse", "errors"],
    ["_artifacts"],  # artifacts read through ArtifactReader, which the HTTP layer implements
    ["_execution", "_resources"],  # an execution's results; sandboxes, templates, snapshots, volumes
    ["_family"],  # forks and diffs: lists of the sandboxes of _resources
    ["models"],  # the objects the SDK returns, all importable from here
    ["_core"],  # configuration, request bodies, the streaming state machine
    ["_http", "_archive"],  # httpx clients built from _core's configuration; tar streams
    ["jobs"],  # durable jobs, the event stream, a sandbox's record (the sandbox's methods call it)
    ["reviews"],  # actions held for a person's approval (/v1/reviews)
    ["kpi", "policies"],  # the operator's KPIs; the policy set's history and what-if
    ["sandbox", "templates", "snapshots", "tools"],
    ["async_sandbox"],  # shares helpers with sandbox
    ["volumes"],  # a volume's files are a sandbox's files API pointed at the volume
    ["__init__"],
]

# Imports that only type checkers see, each with its reason. Nothing runs them.
TYPE_ONLY_UPWARD = {
    ("errors", "_execution"): "ExecutionError.execution is annotated as the Execution it carries",
}


def _floor_of() -> Dict[str, int]:
    return {name: i for i, names in enumerate(FLOORS) for name in names}


def _package_imports(tree: ast.Module) -> Iterator[Tuple[ast.stmt, str, bool, bool]]:
    """(statement, imported module, inside a function, under `if TYPE_CHECKING`) for every import
    of a module of this package."""

    def walk(node: ast.AST, in_function: bool, type_only: bool) -> Iterator[Tuple[ast.stmt, str, bool, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ImportFrom):
                if child.level == 1 and child.module:
                    yield child, child.module.split(".")[0], in_function, type_only
                elif child.level == 1:  # from . import errors
                    for alias in child.names:
                        yield child, alias.name, in_function, type_only
                elif child.module and child.module.split(".")[0] == "sandlot":
                    rest = child.module.split(".")[1:]
                    yield child, rest[0] if rest else "__init__", in_function, type_only
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    parts = alias.name.split(".")
                    if parts[0] == "sandlot":
                        yield child, parts[1] if len(parts) > 1 else "__init__", in_function, type_only
            is_function = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            is_type_check = isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test)
            yield from walk(child, in_function or is_function, type_only or is_type_check)

    yield from walk(tree, False, False)


def _modules() -> Dict[str, ast.Module]:
    return {p.stem: ast.parse(p.read_text(), str(p)) for p in sorted(PACKAGE.glob("*.py"))}


def test_every_module_has_a_floor():
    assert sorted(_modules()) == sorted(_floor_of())


def test_modules_import_only_from_lower_floors_at_module_level():
    floor = _floor_of()
    problems = []
    type_only_seen = set()
    for name, tree in _modules().items():
        for stmt, target, in_function, type_only in _package_imports(tree):
            where = f"{name}.py:{stmt.lineno} imports {target}"
            if target not in floor:
                problems.append(f"{where}, which is not a module of the package")
            elif in_function:
                problems.append(f"{where} inside a function")
            elif type_only and (name, target) in TYPE_ONLY_UPWARD:
                type_only_seen.add((name, target))
            elif floor[target] >= floor[name]:
                problems.append(f"{where}, which is not on a lower floor")
    assert problems == []
    assert type_only_seen == set(TYPE_ONLY_UPWARD)  # no stale exception


def test_the_check_sees_what_it_must_refuse():
    # Positive control: the walker finds an import inside a function and one under
    # TYPE_CHECKING, with the relative and absolute spellings.
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "from . import errors\n"
        "if TYPE_CHECKING:\n"
        "    from ._http import SyncHTTP\n"
        "def f():\n"
        "    from sandlot.models import Execution\n"
        "    import sandlot._core\n"
    )
    found = [(target, in_function, type_only) for _, target, in_function, type_only in _package_imports(tree)]
    assert found == [("errors", False, False), ("_http", False, True), ("models", True, False), ("_core", True, False)]
