"""`sandlot tools` and `sandlot agent` against a live server and a scripted model.

The model is an OpenAI-compatible chat completions endpoint on 127.0.0.1 played by a script:
each request is answered by the next function of a list, which sees the messages the agent
sent (and so can assert that a traceback reached it) and returns the reply. The code the
script asks for runs for real in a sandbox of the test server.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest

from sandlot import Sandbox
from sandlot.models import Execution
from sandlot.tools import _OPENAI_IMAGE_NOTE, declarations, format_execution

from .conftest import local_client_env

REPO = Path(__file__).resolve().parents[3]
RUN_TIMEOUT = 180


def _bin() -> Path:
    return Path(os.environ.get("SANDLOT_BIN") or REPO / "target" / "debug" / "sandlot")


def _need_bin() -> Path:
    b = _bin()
    if not b.exists():
        pytest.skip(f"needs the sandlot binary: {b} does not exist")
    return b


# -- the scripted model ---------------------------------------------------------------------

Reply = Dict[str, Any]
Step = Callable[[List[Dict[str, Any]]], Any]


def tool_call(call_id: str, name: str, arguments: Any) -> Dict[str, Any]:
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def calls(*tool_calls: Dict[str, Any], content: Optional[str] = None) -> Reply:
    return {"role": "assistant", "content": content, "tool_calls": list(tool_calls)}


def answer(text: str) -> Reply:
    return {"role": "assistant", "content": text}


def tool_messages(messages: List[Dict[str, Any]]) -> Dict[str, str]:
    """The tool messages so far, by call id."""
    return {m["tool_call_id"]: m["content"] for m in messages if m.get("role") == "tool"}


class ScriptedModel:
    """A chat completions endpoint whose answers are a script. A step returns a reply message,
    or ``("status", code, body)`` / ``("sleep", seconds)`` to misbehave. Requests past the end
    of the script repeat its last step."""

    def __init__(self, steps: List[Step]) -> None:
        self.steps = steps
        self.requests: List[Dict[str, Any]] = []
        self.failures: List[str] = []
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                assert self.path == "/v1/chat/completions", self.path
                model.requests.append({"body": body, "auth": self.headers.get("authorization")})
                i = min(len(model.requests), len(model.steps)) - 1
                try:
                    out = model.steps[i](body["messages"])
                except AssertionError as e:  # the agent sent something wrong: fail the test
                    model.failures.append(f"step {i + 1}: {e}")
                    out = ("status", 500, "script assertion failed")
                if isinstance(out, tuple) and out[0] == "sleep":
                    time.sleep(out[1])
                    out = answer("too late")
                if isinstance(out, tuple) and out[0] == "status":
                    self._send(out[1], out[2].encode())
                    return
                doc = {
                    "id": f"chatcmpl-{len(model.requests)}",
                    "object": "chat.completion",
                    "model": body.get("model"),
                    "choices": [{"index": 0, "message": out, "finish_reason": "tool_calls" if out.get("tool_calls") else "stop"}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                }
                self._send(200, json.dumps(doc).encode(), "application/json")

            def _send(self, status: int, data: bytes, ctype: str = "text/plain") -> None:
                try:
                    self.send_response(status)
                    self.send_header("content-type", ctype)
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def scripted():
    models: List[ScriptedModel] = []

    def make(steps: List[Step]) -> ScriptedModel:
        m = ScriptedModel(steps)
        models.append(m)
        return m

    yield make
    for m in models:
        m.close()


def run_agent(url: str, model: ScriptedModel, task: str, *extra: str, timeout: float = RUN_TIMEOUT) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("OPENAI_API_KEY", None)
    cmd = [str(_need_bin()), "agent", "--url", url, "--base-url", model.base_url, "--model", "scripted", *extra, task]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def read_transcript(path: Path) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- sandlot tools --------------------------------------------------------------------------

@pytest.mark.parametrize("cli_format,sdk_format", [("openai", "openai"), ("anthropic", "anthropic"), ("json-schema", "json_schema")])
def test_tools_prints_the_sdk_declarations(cli_format: str, sdk_format: str) -> None:
    out = subprocess.run([str(_need_bin()), "tools", "--format", cli_format], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == declarations(sdk_format)


def test_tools_rejects_an_unknown_tool() -> None:
    out = subprocess.run([str(_need_bin()), "tools", "--only", "rm_rf"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert "no tool named" in out.stderr and "run_python, run_bash" in out.stderr
    out = subprocess.run([str(_need_bin()), "tools", "--only", "run_bash", "--format", "anthropic"], capture_output=True, text=True, timeout=30)
    assert [t["name"] for t in json.loads(out.stdout)] == ["run_bash"]


# -- the three-step task --------------------------------------------------------------------

CSV = "region,units,price\nnorth,3,2.5\nsouth,5,4.0\neast,2,10.0\n"
TOTAL = 3 * 2.5 + 5 * 4.0 + 2 * 10.0  # 47.5


@pytest.mark.live
def test_agent_loads_computes_fails_repairs_and_plots(sandlot_url: str, scripted, tmp_path: Path) -> None:
    csv = tmp_path / "sales.csv"
    csv.write_text(CSV)

    def load(messages: List[Dict[str, Any]]) -> Reply:
        assert messages[0]["role"] == "system"
        assert "sales.csv" in messages[1]["content"], "the upload is named in the task"
        return calls(
            tool_call("c_wc", "run_bash", {"code": "wc -l < sales.csv"}),
            tool_call("c_load", "run_python", {"code": "import pandas as pd\ndf = pd.read_csv('sales.csv')\nprint(df.columns.tolist())"}),
            content="Let me look at the data.",
        )

    def compute(messages: List[Dict[str, Any]]) -> Reply:
        tools = tool_messages(messages)
        assert tools["c_wc"].strip() == "[stdout]\n4", tools["c_wc"]
        assert "['region', 'units', 'price']" in tools["c_load"]
        # A mistake: there is no revenue column yet.
        return calls(tool_call("c_sum", "run_python", {"code": "total = df['revenue'].sum()\ntotal"}))

    def repair(messages: List[Dict[str, Any]]) -> Reply:
        failed = tool_messages(messages)["c_sum"]
        assert failed.startswith("[error]\n"), failed
        assert "Traceback" in failed and "KeyError" in failed and "'revenue'" in failed, failed
        assert "total = df['revenue'].sum()" in failed, "the traceback shows the failing line"
        return calls(tool_call("c_fix", "run_python", {"code": "df['revenue'] = df['units'] * df['price']\ntotal = float(df['revenue'].sum())\nprint(f'total={total}')"}))

    def plot(messages: List[Dict[str, Any]]) -> Reply:
        assert tool_messages(messages)["c_fix"] == f"[stdout]\ntotal={TOTAL}"
        return calls(
            tool_call(
                "c_plot",
                "run_python",
                {"code": "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.bar(df['region'], df['revenue'])\nfig.savefig('revenue.png')\nplt.show()"},
            )
        )

    def done(messages: List[Dict[str, Any]]) -> Reply:
        out = tool_messages(messages)["c_plot"]
        assert "[image 1: PNG image" in out and "not visible here" in out, out
        return answer(f"Total revenue is {TOTAL}; the chart is in revenue.png.")

    model = scripted([load, compute, repair, plot, done])
    transcript = tmp_path / "run.jsonl"
    with Sandbox(url=sandlot_url) as sb:
        out = run_agent(
            sandlot_url, model, "Load sales.csv, compute total revenue and plot revenue by region.",
            "--sandbox", sb.id, "--upload", str(csv), "--transcript", str(transcript), "--timeout", "60",
        )
        assert not model.failures, model.failures
        assert out.returncode == 0, out.stderr
        assert out.stdout == f"Total revenue is {TOTAL}; the chart is in revenue.png.\n"
        # The steps and the sandbox's output were shown as they happened (on stderr).
        for shown in ("step 1/20", "Let me look at the data.", "── run_bash (c_wc)", "│ wc -l < sales.csv", "KeyError", f"total={TOTAL}", "step 5/20"):
            assert shown in out.stderr, (shown, out.stderr)
        # The code really ran in this sandbox (kept: it was given with --sandbox).
        assert sb.files.read("revenue.png")[:8] == b"\x89PNG\r\n\x1a\n"
        assert sb.run_code("total").text == str(TOTAL)

    records = read_transcript(transcript)
    kinds = [r["type"] for r in records]
    assert kinds[0] == "start" and kinds[-1] == "end"
    assert kinds.count("model") == 5 and kinds.count("tool") == 5
    start, end = records[0], records[-1]
    assert start["sandbox_id"] == end["sandbox_id"] and start["sandbox_created"] is False
    assert start["tools"] == ["run_python", "run_bash"] and start["uploads"] == ["sales.csv"]
    assert end["status"] == "answered" and end["steps"] == 5 and end["answer"].startswith("Total revenue")
    tools = {r["id"]: r for r in records if r["type"] == "tool"}
    assert set(tools) == {"c_wc", "c_load", "c_sum", "c_fix", "c_plot"}
    assert tools["c_sum"]["is_error"] is True and tools["c_sum"]["execution"]["error"]["name"] == "KeyError"
    assert tools["c_wc"]["language"] == "bash" and tools["c_plot"]["images"] == 1
    # Each model record carries the messages added since the one before: together they are
    # exactly the conversation of each request the endpoint saw.
    models = [r for r in records if r["type"] == "model"]
    convo: List[Dict[str, Any]] = []
    for rec, req in zip(models, model.requests):
        convo = convo + rec["new_messages"]
        assert convo == req["body"]["messages"]
        assert rec["messages"] == len(convo)
        convo.append(rec["reply"])
    assert req["body"]["tools"] == declarations("openai")
    # What the model read is what the SDK's dispatcher writes for the same execution.
    for rec in tools.values():
        ex = Execution.from_json(rec["execution"])
        assert rec["content"] == format_execution(ex, image_note=_OPENAI_IMAGE_NOTE, timeout=60).text


# -- bad input ------------------------------------------------------------------------------

@pytest.mark.live
def test_invalid_tool_calls_are_answered_and_the_loop_goes_on(sandlot_url: str, scripted, tmp_path: Path) -> None:
    def bad(messages: List[Dict[str, Any]]) -> Reply:
        return calls(
            tool_call("c_json", "run_python", '{"code": "print(1)"'),
            tool_call("c_unknown", "rm_rf", {"code": "/"}),
            tool_call("c_nocode", "run_python", {"source": "1"}),
            tool_call("c_array", "run_bash", "[1, 2]"),
            tool_call("c_ok", "run_python", {"code": "print('still here')"}),
        )

    def check(messages: List[Dict[str, Any]]) -> Reply:
        t = tool_messages(messages)
        assert t["c_json"].startswith("[error]\nthe tool arguments are not valid JSON ("), t["c_json"]
        assert t["c_unknown"] == "[error]\nunknown tool 'rm_rf'; available: run_python, run_bash"
        assert t["c_nocode"] == "[error]\nthe 'code' argument is required and must be a non-empty string"
        assert t["c_array"] == '[error]\nthe tool arguments must be a JSON object like {"code": "..."}'
        assert t["c_ok"] == "[stdout]\nstill here"
        return answer("recovered")

    model = scripted([bad, check])
    transcript = tmp_path / "t.jsonl"
    out = run_agent(sandlot_url, model, "do it", "--transcript", str(transcript))
    assert not model.failures, model.failures
    assert out.returncode == 0, out.stderr
    assert out.stdout == "recovered\n"
    assert "rm_rf (c_unknown) not run: unknown tool" in out.stderr
    tools = [r for r in read_transcript(transcript) if r["type"] == "tool"]
    assert [t["is_error"] for t in tools] == [True, True, True, True, False]
    assert "execution" not in tools[0] and tools[-1]["execution"]["stdout"] == "still here\n"


@pytest.mark.live
def test_thousands_of_tool_calls_in_one_reply_are_bounded(sandlot_url: str, scripted, tmp_path: Path) -> None:
    n = 1000

    def flood(messages: List[Dict[str, Any]]) -> Reply:
        return calls(*[tool_call(f"c{i}", "run_python", {"code": f"print({i})"}) for i in range(n)])

    def check(messages: List[Dict[str, Any]]) -> Reply:
        t = tool_messages(messages)
        assert len(t) == n  # every call is answered, as the chat API requires
        assert t["c0"] == "[stdout]\n0" and t["c31"] == "[stdout]\n31"
        assert t["c32"].startswith("[error]\none reply may make at most 32 tool calls, and this one made 1000"), t["c32"]
        return answer("bounded")

    model = scripted([flood, check])
    transcript = tmp_path / "t.jsonl"
    out = run_agent(sandlot_url, model, "flood", "--transcript", str(transcript))
    assert not model.failures, model.failures
    assert out.returncode == 0, out.stderr
    assert out.stdout == "bounded\n"
    tools = [r for r in read_transcript(transcript) if r["type"] == "tool"]
    assert sum("execution" in t for t in tools) == 32 and len(tools) == n


def _endless_endpoint(status: int) -> Any:
    """A chat endpoint that answers every request with a JSON body that never ends."""
    import socket

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    def serve(c: socket.socket) -> None:
        with c:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = c.recv(65536)
                if not chunk:
                    return
                data += chunk
            c.sendall(b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n" % status)
            chunk = b"10000\r\n" + b" " * 0x10000 + b"\r\n"
            try:
                while True:
                    c.sendall(chunk)
            except OSError:
                pass

    def accept() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(c,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return srv


@pytest.mark.live
@pytest.mark.parametrize("status", [200, 500])
def test_an_endless_model_answer_is_cut_off(sandlot_url: str, status: int) -> None:
    srv = _endless_endpoint(status)
    try:
        base = f"http://127.0.0.1:{srv.getsockname()[1]}/v1"
        cmd = [str(_need_bin()), "agent", "--url", sandlot_url, "--base-url", base, "--model", "m", "--model-timeout", "120", "x"]
        t0 = time.monotonic()
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT)
        assert out.returncode == 1, out.stderr
        assert "the model endpoint's answer is larger than 16777216 bytes" in out.stderr, out.stderr[-2000:]
        assert time.monotonic() - t0 < 60
    finally:
        srv.close()


@pytest.mark.live
def test_a_model_that_loops_hits_the_step_limit(sandlot_url: str, scripted, tmp_path: Path) -> None:
    n = [0]

    def again(messages: List[Dict[str, Any]]) -> Reply:
        n[0] += 1
        return calls(tool_call(f"c{n[0]}", "run_python", {"code": "x = 1"}))

    model = scripted([again])
    transcript = tmp_path / "t.jsonl"
    out = run_agent(sandlot_url, model, "loop forever", "--max-steps", "3", "--transcript", str(transcript))
    assert out.returncode == 3, out.stderr
    assert out.stdout == ""
    assert "the model was still calling tools after 3 steps (--max-steps 3)" in out.stderr
    assert str(transcript) in out.stderr
    assert len(model.requests) == 3
    end = read_transcript(transcript)[-1]
    assert end["status"] == "step_limit" and end["steps"] == 3 and end["sandbox_kept"] is False


@pytest.mark.live
def test_an_endpoint_that_fails_or_hangs_ends_the_run_clearly(sandlot_url: str, scripted, tmp_path: Path) -> None:
    model = scripted([lambda m: ("status", 500, "model exploded")])
    t0 = time.monotonic()
    out = run_agent(sandlot_url, model, "x")
    assert out.returncode == 1
    assert "step 1: the model request failed: the model endpoint answered 500 Internal Server Error: model exploded" in out.stderr

    model = scripted([lambda m: ("status", 200, "<html>not json</html>")])
    out = run_agent(sandlot_url, model, "x")
    assert out.returncode == 1 and "is not a chat completion: <html>not json</html>" in out.stderr

    model = scripted([lambda m: ("sleep", 10)])
    t0 = time.monotonic()
    transcript = tmp_path / "t.jsonl"
    out = run_agent(sandlot_url, model, "x", "--model-timeout", "1", "--transcript", str(transcript))
    assert out.returncode == 1
    assert "the model endpoint did not answer within 1 s (--model-timeout)" in out.stderr
    assert time.monotonic() - t0 < 8
    end = read_transcript(transcript)[-1]
    assert end["status"] == "error" and "did not answer" in end["error"]

    # No endpoint at all.
    model.close()
    out = run_agent(sandlot_url, model, "x")
    assert out.returncode == 1 and "could not reach the model endpoint" in out.stderr


@pytest.mark.live
def test_the_api_key_is_sent_and_bad_arguments_are_usage_errors(sandlot_url: str, scripted) -> None:
    model = scripted([lambda m: answer("hi")])
    env = dict(os.environ, OPENAI_API_KEY="sk-test")
    cmd = [str(_need_bin()), "agent", "--url", sandlot_url, "--base-url", model.base_url, "--model", "m", "-q", "hello"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "hi\n" and out.stderr == ""
    assert model.requests[0]["auth"] == "Bearer sk-test"
    assert model.requests[0]["body"]["model"] == "m"
    base = [str(_need_bin()), "agent", "--url", sandlot_url, "--base-url", model.base_url, "--model", "m"]
    for extra in (["--max-steps", "0", "t"], ["  "], ["--timeout", "-1", "t"]):
        out = subprocess.run(base + extra, capture_output=True, text=True, timeout=60)
        assert out.returncode == 2, (extra, out.stderr)
    out = subprocess.run(base + ["--sandbox", "sb_nope", "t"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "sandbox_not_found" in out.stderr
    out = subprocess.run(base[:2] + ["--url", "http://127.0.0.1:9"] + base[4:] + ["t"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "could not reach the server" in out.stderr


@pytest.mark.live
def test_sandlot_key_comes_from_the_key_file_and_never_reaches_the_model(sandlot_url: str, scripted, local_key_home: Path, tmp_path: Path) -> None:
    key = os.environ["SANDLOT_API_KEY"]
    model = scripted([lambda m: calls(tool_call("c1", "run_python", {"code": "6 * 7"})), lambda m: answer("done")])
    cmd = [str(_need_bin()), "agent", "--url", sandlot_url, "--base-url", model.base_url, "--model", "m", "-q", "compute"]
    # As on the server's machine: no $SANDLOT_API_KEY, the key file in the default data dir.
    env = local_client_env(local_key_home)
    env.pop("OPENAI_API_KEY", None)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "done\n" and "42" in tool_messages(model.requests[-1]["body"]["messages"])["c1"]
    # The model endpoint is someone else's: it never sees sandlot's key.
    assert [r["auth"] for r in model.requests] == [None, None]
    assert key not in json.dumps([r["body"] for r in model.requests])

    # No key anywhere: the agent stops before calling the model, saying why.
    model = scripted([lambda m: answer("unreachable")])
    cmd = [str(_need_bin()), "agent", "--url", sandlot_url, "--base-url", model.base_url, "--model", "m", "-q", "compute"]
    env = local_client_env(tmp_path)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT, env=env)
    assert out.returncode == 1 and "unauthenticated" in out.stderr and "API key" in out.stderr, out.stderr
    assert model.requests == []


@pytest.mark.live
def test_tool_text_is_the_sdk_dispatchers_for_every_kind_of_output(sandlot_url: str, scripted, tmp_path: Path) -> None:
    """The agent's port of ``format_execution`` against the SDK's, on executions that take
    every branch: clipping of long and mixed streams, displays of HTML / Markdown / JSON,
    images past the limit, a Bash exit code, an error, a timeout."""
    codes = {
        "long": "print('x' * 9000)\nimport sys\nsys.stderr.write('e\\n' * 3000)",
        "displays": "from IPython.display import display, HTML, Markdown, JSON\nimport pandas as pd\n"
        "display(HTML('<b>bold</b> <i>it</i>'))\ndisplay(Markdown('# title'))\n"
        "display({'application/json': {'a': [1, 'é']}}, raw=True)\npd.DataFrame({'x': [1, 2]})",
        "figures": "import matplotlib.pyplot as plt\nfor i in range(6):\n    plt.figure(); plt.plot([i, 1])\nplt.show()\n'six'",
        "bash": "echo out; echo err >&2; exit 7",
        "error": "def f():\n    return 1 / 0\nf()",
        "timeout": "import time\nprint('before', flush=True)\ntime.sleep(10)",
    }
    ids = list(codes)

    def everything(messages: List[Dict[str, Any]]) -> Reply:
        return calls(*(tool_call(i, "run_bash" if i == "bash" else "run_python", {"code": codes[i]}) for i in ids))

    model = scripted([everything, lambda m: answer("ok")])
    transcript = tmp_path / "t.jsonl"
    out = run_agent(sandlot_url, model, "x", "--transcript", str(transcript), "--timeout", "2")
    assert out.returncode == 0, out.stderr
    tools = {r["id"]: r for r in read_transcript(transcript) if r["type"] == "tool"}
    received = tool_messages(model.requests[1]["body"]["messages"])
    for i in ids:
        ex = Execution.from_json(tools[i]["execution"])
        expected = format_execution(ex, image_note=_OPENAI_IMAGE_NOTE, timeout=2).text
        assert received[i] == tools[i]["content"] == expected, i
    assert "characters (0 lines) of stdout dropped" in received["long"]
    assert "[2 more image(s) not included]" in received["figures"]
    assert received["bash"].endswith("[exit code: 7]")
    assert "timed out after 2 s" in received["timeout"]


@pytest.mark.live
def test_ctrl_c_deletes_the_sandbox(sandlot_url: str, scripted, tmp_path: Path) -> None:
    import signal

    model = scripted([lambda m: ("sleep", 20)])
    transcript = tmp_path / "t.jsonl"
    cmd = [str(_need_bin()), "agent", "--url", sandlot_url, "--base-url", model.base_url, "--model", "m", "--transcript", str(transcript), "x"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not model.requests and time.monotonic() < deadline:
        time.sleep(0.05)
    assert model.requests, "the agent never asked the model"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "cancelled; the sandbox was deleted" in err
    records = read_transcript(transcript)
    assert records[-1]["status"] == "cancelled"
    from sandlot import errors

    with pytest.raises((errors.SandboxNotFound, errors.SandboxGone)):
        Sandbox.connect(records[0]["sandbox_id"], url=sandlot_url)
