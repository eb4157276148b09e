"""Adapters that run other agent frameworks' code in sandlot sandboxes.

* :class:`sandlot.integrations.smolagents.SandlotExecutor`: a smolagents remote Python
  executor, so ``CodeAgent(..., executor=SandlotExecutor())`` runs its code actions in a
  sandbox (``pip install smolagents``).
* :class:`sandlot.integrations.langchain.SandlotPythonTool` and
  :class:`~sandlot.integrations.langchain.SandlotBashTool`: LangChain tools
  (``pip install langchain-core``).

Each framework is an optional dependency: importing ``sandlot.integrations`` imports none of
them; a name is resolved (and its framework imported) on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SandlotExecutor", "SandlotPythonTool", "SandlotBashTool", "sandlot_tools"]

_WHERE = {
    "SandlotExecutor": "smolagents",
    "SandlotPythonTool": "langchain",
    "SandlotBashTool": "langchain",
    "sandlot_tools": "langchain",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{module}"), name)
