"""LangChain tools that run code in a sandlot sandbox.

::

    from sandlot.integrations.langchain import SandlotPythonTool

    tool = SandlotPythonTool()                 # a sandbox on $SANDLOT_URL, made on first use
    tool.invoke({"code": "import numpy as np; np.arange(5).sum()"})   # '[result]\\nnp.int64(10)'
    llm_with_tools = llm.bind_tools([tool])    # any chat model that takes tools
    tool.close()                               # deletes the sandbox it made

They are ``langchain_core.tools.BaseTool`` s named and described as the SDK's declarations
(``run_python``, ``run_bash``), answering with the text the SDK's dispatcher writes (stdout,
stderr, results, the error with its traceback, cut to budgets). Invoked with a tool call (as an
agent does), the answer is a ``ToolMessage`` whose ``artifact`` holds the images the code made
and the :class:`~sandlot.models.Execution`. Errors of the model's own making (code the server
rejects) come back as text; a sandbox that is gone or a server that is down raise.

:func:`sandlot_tools` gives both tools sharing one sandbox, so the shell sees the files Python
wrote.
"""

from __future__ import annotations

from typing import Any, ClassVar, Dict, List, Literal, Optional, Tuple, Type

from langchain_core.tools import BaseTool
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from ..sandbox import Sandbox
from ..tools import BASH_DESCRIPTION, BASH_TOOL_NAME, PYTHON_DESCRIPTION, PYTHON_TOOL_NAME, ToolDispatcher, _schema

__all__ = ["SandlotPythonTool", "SandlotBashTool", "sandlot_tools"]

_IMAGE_NOTE = "returned as an artifact of this tool call"


class _PythonInput(BaseModel):
    code: str = Field(description=_schema("python")["properties"]["code"]["description"])


class _BashInput(BaseModel):
    code: str = Field(description=_schema("bash")["properties"]["code"]["description"])


class _SandlotTool(BaseTool):
    """Shared by both tools: the sandbox (given, or made on first use and deleted by
    :meth:`close`) and the dispatcher that runs and formats."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    sandbox: Optional[Any] = None
    """A :class:`~sandlot.Sandbox` to run in; None makes one on first use."""
    url: Optional[str] = None
    api_key: Optional[str] = None
    timeout: Optional[float] = None
    """Seconds each execution may take (the server's default otherwise)."""
    sandbox_kwargs: Dict[str, Any] = Field(default_factory=dict)
    """More arguments for the :class:`~sandlot.Sandbox` made on first use (template, limits...)."""
    response_format: Literal["content", "content_and_artifact"] = "content_and_artifact"

    language: ClassVar[str] = "python"
    _owned: bool = PrivateAttr(default=False)
    _shared: Optional[List[Any]] = PrivateAttr(default=None)

    def _get_sandbox(self) -> Sandbox:
        if self.sandbox is None:
            self.sandbox = Sandbox(url=self.url, api_key=self.api_key, **self.sandbox_kwargs)
            self._owned = True
            for other in self._shared or []:
                if other is not self and other.sandbox is None:
                    other.sandbox = self.sandbox
        return self.sandbox

    def _run(self, code: str, run_manager: Any = None, **kwargs: Any) -> Tuple[str, Dict[str, Any]]:
        dispatcher = ToolDispatcher(self._get_sandbox(), timeout=self.timeout)
        name = dispatcher.python_tool_name if self.language == "python" else dispatcher.bash_tool_name
        out = dispatcher.run(name, {"code": code}, image_note=_IMAGE_NOTE)
        return out.text, {"images": out.images, "execution": out.execution, "is_error": out.is_error}

    def close(self) -> None:
        """Deletes the sandbox if this tool (or one sharing it) made it."""
        owner = self._owned or any(o._owned for o in self._shared or [])
        if self.sandbox is not None and owner:
            self.sandbox.kill()
        for o in self._shared or [self]:
            o.sandbox = None
            o._owned = False


class SandlotPythonTool(_SandlotTool):
    """``run_python``: Python in the sandbox's persistent IPython session."""

    name: str = PYTHON_TOOL_NAME
    description: str = PYTHON_DESCRIPTION
    args_schema: Type[BaseModel] = _PythonInput


class SandlotBashTool(_SandlotTool):
    """``run_bash``: a script in the sandbox's persistent Bash session."""

    name: str = BASH_TOOL_NAME
    description: str = BASH_DESCRIPTION
    args_schema: Type[BaseModel] = _BashInput
    language: ClassVar[str] = "bash"


def sandlot_tools(sandbox: Optional[Sandbox] = None, **kwargs: Any) -> List[_SandlotTool]:
    """``[SandlotPythonTool, SandlotBashTool]`` on one sandbox (``sandbox``, or one made on
    first use by either; ``close()`` on either deletes it). ``kwargs`` go to both tools."""
    tools: List[_SandlotTool] = [SandlotPythonTool(sandbox=sandbox, **kwargs), SandlotBashTool(sandbox=sandbox, **kwargs)]
    for t in tools:
        t._shared = tools
    return tools
