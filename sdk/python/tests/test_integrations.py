"""Framework adapters against a live server: smolagents' ``CodeAgent`` with a scripted model
running its code in sandlot, and the LangChain tools; plus the examples that show them."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, List

import pytest

pytestmark = pytest.mark.live

smolagents = pytest.importorskip("smolagents")
pytest.importorskip("langchain_core")

from rich.console import Console  # noqa: E402  (a smolagents dependency)
from smolagents import CodeAgent, Tool  # noqa: E402
from smolagents.models import ChatMessage, MessageRole, Model  # noqa: E402
from smolagents.monitoring import AgentLogger, LogLevel  # noqa: E402

from sandlot import Sandbox, errors  # noqa: E402
from sandlot.integrations.langchain import SandlotBashTool, SandlotPythonTool, sandlot_tools  # noqa: E402
from sandlot.integrations.smolagents import SandlotExecutor  # noqa: E402

REPO = Path(__file__).resolve().parents[3]


def _text(messages: List[Any]) -> str:
    """Everything the model was shown, as one string."""
    out = []
    for m in messages:
        content = m.content if hasattr(m, "content") else m.get("content")
        if isinstance(content, list):
            out.extend(str(part.get("text", "")) for part in content if isinstance(part, dict))
        elif content:
            out.append(str(content))
    return "\n".join(out)


class ScriptedModel(Model):
    """Each step's reply is the next entry: a string, or a function of what the model was
    shown (so a step can check that an error reached it) returning one."""

    def __init__(self, steps: List[Any]) -> None:
        super().__init__(model_id="scripted")
        self.steps = list(steps)
        self.failures: List[str] = []

    def generate(self, messages: List[Any], stop_sequences: Any = None, **kwargs: Any) -> ChatMessage:
        step = self.steps.pop(0)
        if callable(step):
            try:
                step = step(_text(messages))
            except AssertionError as e:
                self.failures.append(str(e))
                step = "<code>\nfinal_answer('script assertion failed')\n</code>"
        return ChatMessage(role=MessageRole.ASSISTANT, content=step)


class Double(Tool):
    name = "double"
    description = "Doubles a number."
    inputs = {"x": {"type": "number", "description": "the number"}}
    output_type = "number"

    def forward(self, x: float) -> float:
        return 2 * x


def code(src: str) -> str:
    return f"Thought: next.\n<code>\n{src}\n</code>"


def quiet_logger() -> AgentLogger:
    return AgentLogger(level=LogLevel.INFO, console=Console(file=io.StringIO(), width=200))


# -- smolagents -----------------------------------------------------------------------------

def test_code_agent_runs_its_code_in_sandlot(sandbox: Sandbox) -> None:
    def repair(seen: str) -> str:
        assert "Executing code yielded an error" in seen and "KeyError" in seen and "Traceback" in seen, seen[-2000:]
        return code("total = double(sum(data['values'])) * factor\nprint('total', total)")

    def finish(seen: str) -> str:
        assert "total 120" in seen, seen[-2000:]
        return code("final_answer({'total': total, 'host': __import__('socket').gethostname()})")

    model = ScriptedModel(
        [
            code("import os\ndata = {'values': [1, 2, 3]}\nopen('from_agent.txt', 'w').write('written by CodeAgent')\nprint(os.getcwd())"),
            code("data['missing']"),
            repair,
            finish,
        ]
    )
    executor = SandlotExecutor(sandbox=sandbox, logger=quiet_logger())
    agent = CodeAgent(tools=[Double()], model=model, executor=executor, max_steps=6)
    try:
        result = agent.run("Sum the values, double it, times the factor.", additional_args={"factor": 10})
    finally:
        agent.cleanup()
    assert not model.failures, model.failures
    assert result["total"] == 120
    # It ran in the sandbox: the file is in its workspace, the host name is the sandbox's, the
    # variables of every step are in its session, and a given sandbox outlives the agent.
    assert sandbox.files.read("from_agent.txt") == b"written by CodeAgent"
    assert result["host"] == sandbox.run_code("import socket; socket.gethostname()").text.strip("'")
    assert result["host"] != os.uname().nodename
    assert sandbox.run_code("total, factor, data['values']").text == "(120, 10, [1, 2, 3])"
    steps = [s for s in agent.memory.steps if type(s).__name__ == "ActionStep"]
    assert "/workspace" in steps[0].observations
    assert steps[1].error is not None and "KeyError" in str(steps[1].error)
    assert executor.last_execution is not None and executor.last_execution.sandbox_id == sandbox.id


def test_the_executor_makes_and_deletes_its_own_sandbox(sandlot_url: str) -> None:
    model = ScriptedModel([code("import numpy as np\nfinal_answer(np.arange(4))")])
    out = io.StringIO()
    logger = AgentLogger(level=LogLevel.INFO, console=Console(file=out, width=200))
    executor = SandlotExecutor(url=sandlot_url, logger=logger, additional_imports=["numpy", "pandas.*", "surely_not_a_module"])
    sandbox_id = executor.sandbox.id
    with CodeAgent(tools=[], model=model, executor=executor, additional_authorized_imports=["numpy"]) as agent:
        result = agent.run("arange")
    assert list(result) == [0, 1, 2, 3]  # an ndarray comes back through smolagents' safe serializer
    assert "not installed in the sandbox" in out.getvalue() and "surely_not_a_module" in out.getvalue()
    assert "numpy" not in out.getvalue().split("not installed in the sandbox")[1].splitlines()[0]
    with pytest.raises((errors.SandboxNotFound, errors.SandboxGone)):
        Sandbox.connect(sandbox_id, url=sandlot_url)


def test_timeouts_and_values(sandbox: Sandbox) -> None:
    executor = SandlotExecutor(sandbox=sandbox, logger=quiet_logger(), timeout=1)
    with pytest.raises(smolagents.utils.AgentError, match="timed out"):
        executor.run_code_raise_errors("import time\ntime.sleep(5)")
    assert executor.run_code_raise_errors("6 * 7").output == "42"
    img = executor.run_code_raise_errors("from PIL import Image\nImage.new('RGB', (3, 2))").output
    assert type(img).__module__.startswith("PIL") and img.size == (3, 2)
    executor.cleanup()
    assert sandbox.run_code("1").ok, "a sandbox passed in is left running"


# -- LangChain ------------------------------------------------------------------------------

def test_langchain_tools(sandlot_url: str) -> None:
    py, sh = sandlot_tools(url=sandlot_url, timeout=60)
    assert isinstance(py, SandlotPythonTool) and isinstance(sh, SandlotBashTool)
    assert (py.name, sh.name) == ("run_python", "run_bash")
    assert py.tool_call_schema.model_json_schema()["properties"]["code"]["type"] == "string"
    try:
        assert py.invoke({"code": "x = 20\nopen('lc.txt', 'w').write('from langchain')\nx + 1"}) == "[result]\n21"
        assert py.invoke({"code": "x * 2"}) == "[result]\n40"  # one session across calls
        assert sh.invoke({"code": "cat lc.txt"}) == "[stdout]\nfrom langchain"  # one sandbox for both
        msg = py.invoke({"type": "tool_call", "id": "c1", "name": "run_python", "args": {"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.show()"}})
        assert msg.tool_call_id == "c1" and msg.content.startswith("[image 1: PNG image")
        assert msg.artifact["images"][0].to_bytes()[:4] == b"\x89PNG"
        assert msg.artifact["execution"].ok
        err = py.invoke({"code": "{}['k']"})
        assert err.startswith("[error]\n") and "KeyError" in err
        with pytest.raises(Exception):
            py.invoke({"source": "1"})  # arguments are validated against the schema
        sandbox_id = py.sandbox.id
        with Sandbox.connect(sandbox_id, url=sandlot_url) as other:
            assert other.files.read("lc.txt") == b"from langchain"
            other.close(kill=False)
    finally:
        sh.close()
    assert py.sandbox is None and sh.sandbox is None
    with pytest.raises((errors.SandboxNotFound, errors.SandboxGone)):
        Sandbox.connect(sandbox_id, url=sandlot_url)


def test_langchain_tool_on_a_given_sandbox(sandbox: Sandbox) -> None:
    tool = SandlotPythonTool(sandbox=sandbox)
    assert tool.invoke({"code": "print('hi')"}) == "[stdout]\nhi"
    tool.close()
    assert sandbox.run_code("1").ok, "a sandbox passed in is left running"


# -- the examples ---------------------------------------------------------------------------

@pytest.mark.parametrize(
    "script,args,expected",
    [
        ("smolagents_executor.py", ["--demo"], ["readings.txt holds ['21.5', '23.0', '19.5']", "mean 70.4 F over 3 readings"]),
        ("langchain_tool.py", [], ["[result]\n6", "artifact: 1 image(s)", "x.png", "KeyError: 'y'"]),
    ],
)
def test_examples_run(sandlot_url: str, script: str, args: List[str], expected: List[str]) -> None:
    env = dict(os.environ, SANDLOT_URL=sandlot_url)
    out = subprocess.run([sys.executable, str(REPO / "examples" / script), *args], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    for e in expected:
        assert e in out.stdout, (e, out.stdout)
    listed = (REPO / "examples" / "README.md").read_text()
    assert f"`{script}`" in listed, f"examples/README.md should list {script}"
