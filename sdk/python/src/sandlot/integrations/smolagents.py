"""A smolagents executor that runs a ``CodeAgent``'s code in a sandlot sandbox.

::

    from smolagents import CodeAgent, InferenceClientModel
    from sandlot.integrations.smolagents import SandlotExecutor

    with CodeAgent(tools=[], model=InferenceClientModel(), executor=SandlotExecutor()) as agent:
        agent.run("What is the 20th Fibonacci number?")

It is one of smolagents' remote executors (a ``RemotePythonExecutor``, like its E2B, Docker and
Modal ones), so it behaves as they do: the agent's tools are defined in the sandbox from their
source and its variables sent there (``send_tools`` / ``send_variables``, called by the agent at
the start of a run), ``final_answer(...)`` ends the run through the exception smolagents patches
into that tool, and the sandbox's IPython session carries variables, imports and files from one
step to the next (and from one ``run`` to the next, unless the agent is reset and the executor
replaced). An error in the code becomes smolagents' ``AgentError`` with the traceback, which the
agent shows the model so it can repair its code.

Sandboxes have no network: ``additional_authorized_imports`` are not pip-installed as other
remote executors do; the executor checks they are importable in the sandbox and logs those that
are not (build a template with them: ``Sandbox(template=...)``, passed through ``**sandbox_kwargs``).
"""

from __future__ import annotations

import base64
import json
from io import BytesIO
from typing import Any, List, Optional

from smolagents.local_python_executor import CodeOutput
from smolagents.monitoring import AgentLogger, LogLevel
from smolagents.remote_executors import RemotePythonExecutor
from smolagents.utils import AgentError

from ..models import Execution
from ..sandbox import Sandbox

__all__ = ["SandlotExecutor"]

# Formats of a cell's value tried in order, as smolagents' own E2B executor does.
_VALUE_FORMATS = ("html", "javascript", "json", "latex", "markdown", "pdf", "svg", "text")


class SandlotExecutor(RemotePythonExecutor):
    """Runs smolagents code actions in a sandlot sandbox.

    ``sandbox`` is a :class:`~sandlot.Sandbox` to use (left running by :meth:`cleanup`);
    without one a sandbox is created (``url``, ``api_key`` and ``**sandbox_kwargs`` go to
    :class:`~sandlot.Sandbox`) and deleted by :meth:`cleanup`, which ``CodeAgent`` calls when
    used as a context manager or on ``agent.cleanup()``. ``timeout`` bounds each code action
    in seconds (the server's default otherwise). ``logger`` defaults to a new
    ``AgentLogger``; ``additional_imports`` and ``allow_pickle`` are smolagents' own.
    """

    def __init__(
        self,
        additional_imports: Optional[List[str]] = None,
        logger: Optional[AgentLogger] = None,
        allow_pickle: bool = False,
        *,
        sandbox: Optional[Sandbox] = None,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: Optional[float] = None,
        **sandbox_kwargs: Any,
    ) -> None:
        super().__init__(list(additional_imports or []), logger or AgentLogger(level=LogLevel.INFO), allow_pickle)
        self.owns_sandbox = sandbox is None
        self.sandbox: Sandbox = sandbox if sandbox is not None else Sandbox(url=url, api_key=api_key, **sandbox_kwargs)
        self.timeout = timeout
        self.last_execution: Optional[Execution] = None
        self.installed_packages = self.install_packages(self.additional_imports)
        self.logger.log(f"sandlot sandbox {self.sandbox.id} is running", level=LogLevel.INFO)

    # -- RemotePythonExecutor ---------------------------------------------------------------
    def run_code_raise_errors(self, code: str) -> CodeOutput:
        ex = self.sandbox.run_code(code, timeout=self.timeout)
        self.last_execution = ex
        logs = ex.stdout
        if ex.end_state not in ("ok", "error"):
            # A timeout interrupts the code (the traceback is a KeyboardInterrupt's): say what
            # happened rather than show that.
            what = {
                "timeout": "timed out" + (f" after {self.timeout:g} s" if self.timeout else "") + " and was interrupted",
                "oom": "ran out of memory",
                "interrupted": "was interrupted",
                "killed": "was killed",
            }.get(ex.end_state, f"ended {ex.end_state}")
            lost = "" if ex.sandbox_alive else "; the sandbox's variables were lost"
            raise AgentError(f"{logs}\nExecuting code yielded an error:\nthe code {what}{lost}", self.logger)
        if ex.error is not None:
            if ex.error.name == RemotePythonExecutor.FINAL_ANSWER_EXCEPTION:
                value = self._deserialize_final_answer(ex.error.value, self.allow_pickle)
                return CodeOutput(output=value, logs=logs, is_final_answer=True)
            raise AgentError(
                f"{logs}\nExecuting code yielded an error:\n{ex.error.name}\n{ex.error.value}\n{ex.error.traceback}",
                self.logger,
            )
        return CodeOutput(output=_value(ex), logs=logs, is_final_answer=False)

    def install_packages(self, additional_imports: List[str]) -> List[str]:
        """Checks the imports are available in the sandbox (it has no network to install
        them) and logs those that are not; returns the list, as other executors do."""
        modules = sorted({m.split(".")[0] for m in additional_imports if m and m != "*"} - {"smolagents"})
        if not modules:
            return list(additional_imports)
        ex = self.sandbox.run_code(
            "import importlib.util as _u, json as _j\n"
            f"print(_j.dumps([_m for _m in {modules!r} if _u.find_spec(_m) is None]))\n"
            "del _u, _j"
        )
        try:
            missing = json.loads(ex.stdout or "[]")
        except ValueError:
            missing = []
        if missing:
            self.logger.log(
                f"not installed in the sandbox (it has no network; use a template that has them): {', '.join(missing)}",
                level=LogLevel.INFO,
            )
        return list(additional_imports)

    def cleanup(self) -> None:
        """Deletes the sandbox if the executor created it (one passed in is left as it is)."""
        sandbox = getattr(self, "sandbox", None)
        if sandbox is None:
            return
        try:
            if self.owns_sandbox:
                sandbox.kill()
        except Exception as e:  # noqa: BLE001 - cleanup must not mask the run's outcome
            self.logger.log_error(f"Error during cleanup: {e}")
        del self.sandbox

    def delete(self) -> None:
        self.cleanup()


def _value(ex: Execution) -> Any:
    """The value of the cell's last expression as smolagents shows it: an image as a PIL
    image, else its richest text."""
    main = ex.main_result
    if main is None:
        return None
    for b64 in (main.jpeg, main.png):
        if b64 is not None:
            import PIL.Image

            return PIL.Image.open(BytesIO(base64.b64decode(b64)))
    for name in _VALUE_FORMATS:
        value = getattr(main, name, None)
        if value is not None:
            return value
    return None
