"""The package as the server ships it: its modules stand in floors (each imports only from
floors below it), and every one of them is embedded in the binary
(crates/sandlot-runtime/src/assets.rs), since the zygote imports them all from there."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PYTHON_DIR = Path(__file__).resolve().parents[1]
PACKAGE = PYTHON_DIR / "sandlot_runtime"
ASSETS = PYTHON_DIR.parent / "crates" / "sandlot-runtime" / "src" / "assets.rs"

# Lowest first (the map is in sandlot_runtime/__init__.py). A new module must be given a floor.
FLOORS = [
    ["__init__", "state", "jsonsafe"],
    ["output", "changes", "charts"],
    ["capture", "cell_output"],
    ["protocol", "bash_session"],
    ["display", "python_cells", "js_session"],
    ["shell"],
    ["contexts"],
    ["pickling"],
    ["digest"],
    ["snapshot"],
    ["serve"],
    ["driver"],
    ["zygote"],
]
# The zygote imports the driver inside _prepare on purpose: its time is part of the prepare
# time it reports.
LATE_IMPORTS = {"zygote"}


def _imports(tree: ast.Module):
    """(line, imported module of the package, inside a function, under TYPE_CHECKING)."""

    def walk(node, in_function, type_only):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ImportFrom):
                if child.level == 1:
                    names = [child.module] if child.module else [a.name for a in child.names]
                elif child.module == "sandlot_runtime":
                    names = [a.name for a in child.names]
                elif (child.module or "").startswith("sandlot_runtime."):
                    names = [child.module.split(".")[1]]
                else:
                    names = []
                for name in names:
                    yield child.lineno, name.split(".")[0], in_function, type_only
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    parts = alias.name.split(".") + ["__init__"]
                    if parts[0] == "sandlot_runtime":
                        yield child.lineno, parts[1], in_function, type_only
            function = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            type_check = isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test)
            yield from walk(child, in_function or function, type_only or type_check)

    yield from walk(tree, False, False)


def test_modules_stand_in_floors():
    floor = {name: i for i, names in enumerate(FLOORS) for name in names}
    modules = {p.stem: ast.parse(p.read_text(), str(p)) for p in PACKAGE.glob("*.py")}
    assert sorted(modules) == sorted(floor)
    problems = []
    for name, tree in modules.items():
        for line, target, in_function, _type_only in _imports(tree):
            where = f"{name}.py:{line} imports {target}"
            if target not in floor:
                problems.append(f"{where}, not a module of the package")
            elif in_function and name not in LATE_IMPORTS:
                problems.append(f"{where} inside a function")
            elif floor[target] >= floor[name]:  # annotations (TYPE_CHECKING) included
                problems.append(f"{where}, not on a lower floor")
    assert problems == []


def test_every_module_is_embedded_in_the_binary():
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert "driver.py" in modules and len(modules) > 10
    text = ASSETS.read_text()
    entry = (r'"python/sandlot_runtime/([\w.]+\.py)",\s*'
             r'include_str!\("[./]*/python/sandlot_runtime/\1"\)')
    listed = re.findall(entry, text)
    assert sorted(listed) == modules
    # The JavaScript kernel's files ship the same way (js_session.py starts node on them).
    scripts = sorted(p.name for p in PACKAGE.glob("*.js"))
    assert "js_kernel.js" in scripts
    entry_js = (r'"python/sandlot_runtime/([\w.]+\.js)",\s*'
                r'include_str!\("[./]*/python/sandlot_runtime/\1"\)')
    assert sorted(re.findall(entry_js, text)) == scripts
