"""Tests against a real `sandlot serve` (see conftest.py). Skipped only when the sandlot binary
does not exist; a server that fails to start or misbehaves fails them."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Dict, List

import pytest

import sandlot
from sandlot import AsyncSandbox, ExecutionError, ExecutionTimeout, Sandbox
from sandlot.tools import ToolDispatcher

from .conftest import local_client_env

pytestmark = pytest.mark.live

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
REPO = Path(__file__).resolve().parents[3]

DATAFRAME_CELL = """
import pandas as pd
import matplotlib.pyplot as plt
from IPython.display import display

df = pd.DataFrame({"a": [1, 2, 3], "b": [4, 5, 6]})
display(df)

plt.figure()
plt.plot([1, 2, 3], [1, 4, 9])
plt.title("first")
plt.show()

plt.figure()
plt.bar(["x", "y"], [3, 5])
plt.title("second")
plt.show()

print("rows:", len(df))
int(df["a"].sum())
"""


def test_health(sandlot_url):
    assert isinstance(Sandbox.health(url=sandlot_url), dict)


def test_state_persists_between_calls(sandbox):
    first = sandbox.run_code("x = 41\nimport math")
    assert first.end_state == "ok", first.raw
    ex = sandbox.run_code("x + 1")
    assert ex.text == "42" and ex.results[-1].is_main_result
    assert sandbox.run_code("math.sqrt(x + 8)").text == "7.0"
    assert ex.duration_ms is not None and ex.duration_ms >= 0
    assert ex.cpu_time_ms is not None and ex.peak_memory_bytes and ex.peak_memory_bytes > 0


def _check_dataframe_cell(ex):
    assert ex.end_state == "ok", ex.raw.get("error")
    kinds = []
    for r in ex.results:
        if r.is_main_result:
            kinds.append("main")
        elif r.png is not None:
            kinds.append("png")
        elif r.html is not None:
            kinds.append("html")
        else:
            kinds.append("other:" + ",".join(r.formats()))
    assert kinds == ["html", "png", "png", "main"], kinds
    table = ex.results[0]
    assert "<table" in table.html and table.text and "a" in table.text
    for fig in ex.results[1:3]:
        raw = fig.png_bytes()
        assert raw[:8] == PNG_MAGIC and len(raw) > 1000
    assert ex.results[1].png != ex.results[2].png
    assert ex.text == "6"
    assert "rows: 3" in "".join(ex.logs.stdout)
    # and in the raw event order: the printed text comes after both figures, before the value
    types = [o["type"] for o in ex.raw["outputs"]]
    assert types.index("stdout") > max(i for i, t in enumerate(types) if t == "display_data")
    assert types[-1] == "result"


def test_dataframe_display_plots_print_value(sandbox, tmp_path):
    ex = sandbox.run_code(DATAFRAME_CELL)
    _check_dataframe_cell(ex)
    path = ex.results[1].save_png(tmp_path / "fig.png")
    assert Path(path).read_bytes()[:8] == PNG_MAGIC


def test_dataframe_cell_streamed(sandbox):
    got: List[Any] = []
    ex = sandbox.run_code(DATAFRAME_CELL, on_result=got.append, on_stdout=got.append)
    _check_dataframe_cell(ex)
    order: List[Any] = []
    for g in got:  # stdout may arrive in any number of chunks: collapse runs of them
        item = g.is_main_result if isinstance(g, sandlot.Result) else "out"
        if not (item == "out" and order and order[-1] == "out"):
            order.append(item)
    assert order == [False, False, False, "out", True]
    assert "".join(g for g in got if isinstance(g, str)) == "rows: 3\n"


def test_error_traceback_points_to_user_code(sandbox):
    ex = sandbox.run_code("def inner():\n    return 1/0\n\nprint('before')\ninner()\n")
    assert ex.end_state == "error"
    assert ex.error.name == "ZeroDivisionError" and "division by zero" in ex.error.value
    tb = ex.error.traceback
    assert "return 1/0" in tb and "inner" in tb, tb
    assert "\x1b[" not in tb  # plain text, no ANSI colour
    assert "sandlot_runtime" not in tb and "driver.py" not in tb, tb
    assert "".join(ex.logs.stdout) == "before\n"
    with pytest.raises(ExecutionError) as info:
        ex.raise_for_error()
    assert info.value.name == "ZeroDivisionError"
    # the session survives an error
    assert sandbox.run_code("1 + 1").text == "2"


def test_streaming_callbacks_get_chunks_before_return(sandbox):
    stamps: List[Any] = []
    code = "import time, sys\nprint('first', flush=True)\ntime.sleep(2)\nprint('second', flush=True)\nsys.stderr.write('warn\\n')\n"
    ex = sandbox.run_code(
        code,
        on_stdout=lambda m: stamps.append((time.monotonic(), "out", str(m))),
        on_stderr=lambda m: stamps.append((time.monotonic(), "err", str(m))),
    )
    done = time.monotonic()
    assert ex.end_state == "ok"
    assert "".join(s[2] for s in stamps if s[1] == "out") == "first\nsecond\n"
    assert "".join(s[2] for s in stamps if s[1] == "err") == "warn\n"
    first = next(s for s in stamps if "first" in s[2])
    assert done - first[0] >= 1.5, "the first chunk should arrive while the cell is still sleeping"
    assert ex.logs.stdout and "".join(ex.logs.stdout) == "first\nsecond\n"


def test_bash(sandbox):
    ex = sandbox.run_bash("echo hello; echo oops >&2; ls /workspace >/dev/null")
    assert ex.end_state == "ok" and ex.exit_code == 0
    assert "".join(ex.logs.stdout) == "hello\n" and "".join(ex.logs.stderr) == "oops\n"
    bad = sandbox.run_bash("ls /definitely/missing")
    assert bad.end_state == "error" and bad.exit_code not in (None, 0)
    with pytest.raises(ExecutionError):
        bad.raise_for_error()
    sandbox.run_bash("export GREETING=hi; cd /tmp")
    again = sandbox.run_bash('echo "$GREETING $(pwd)"')
    assert "".join(again.logs.stdout).strip() == "hi /tmp"


def test_files_roundtrip(sandbox, tmp_path):
    f = sandbox.files
    entry = f.write("notes/hello world.txt", "héllo\n")
    assert entry.path == "notes/hello world.txt" and entry.size == len("héllo\n".encode())
    assert f.read("notes/hello world.txt") == "héllo\n".encode()
    assert f.read_text("/workspace/notes/hello world.txt") == "héllo\n"
    f.write("data.bin", bytes(range(256)) * 10)
    assert f.read("data.bin") == bytes(range(256)) * 10
    # files are visible to code, and files code writes are visible to the API
    ex = sandbox.run_code("open('/workspace/notes/hello world.txt', encoding='utf-8').read()")
    assert ex.text == repr("héllo\n")
    sandbox.run_code("import os\nos.makedirs('out', exist_ok=True)\nopen('out/r.csv', 'w').write('a,b\\n1,2\\n')")
    assert f.read_text("out/r.csv") == "a,b\n1,2\n"
    top = {e.name: e for e in f.list()}
    assert top["notes"].is_dir and top["data.bin"].is_file and top["data.bin"].size == 2560
    deep = {e.path for e in f.list(recursive=True)}
    assert {"notes/hello world.txt", "data.bin", "out/r.csv"} <= deep
    assert [e.name for e in f.list("notes")] == ["hello world.txt"]
    assert f.exists("out/r.csv") and not f.exists("out/nope.csv")
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_text("A")
    (tree / "sub" / "b.txt").write_text("B")
    assert [e.path for e in f.upload_dir(tree, "proj")] == ["proj/a.txt", "proj/sub/b.txt"]
    assert sandbox.run_bash("cat /workspace/proj/sub/b.txt").stdout == "B"
    assert [e.path for e in f.write_many({"m/1.txt": "1", "m/2.txt": b"2"})] == ["m/1.txt", "m/2.txt"]
    f.remove("data.bin")
    with pytest.raises(sandlot.FileNotFound):
        f.read("data.bin")


@pytest.mark.slow
def test_100mb_upload_download_streamed(sandlot_url, tmp_path):
    size = 100 * 1024 * 1024
    src = tmp_path / "big.bin"
    h = hashlib.sha256()
    block = os.urandom(1024 * 1024)
    with open(src, "wb") as out:
        for i in range(100):
            chunk = hashlib.sha256(i.to_bytes(4, "little")).digest() + block[32:]
            h.update(chunk)
            out.write(chunk)
    want = h.hexdigest()
    server_pid = os.environ.get("SANDLOT_TEST_SERVER_PID")
    peak_before = _peak_rss(server_pid)
    with Sandbox(url=sandlot_url, limits={"disk_mb": 1024, "memory_mb": 2048}) as sb:
        entry = sb.files.upload(src, "big/big.bin")
        assert entry.size == size
        listed = {e.path: e for e in sb.files.list("big")}
        assert listed["big/big.bin"].size == size
        # the sandbox sees the same bytes
        ex = sb.run_code(
            "import hashlib\nh = hashlib.sha256()\n"
            "with open('/workspace/big/big.bin', 'rb') as f:\n"
            "    for b in iter(lambda: f.read(1 << 20), b''):\n        h.update(b)\nh.hexdigest()"
        )
        assert ex.text == repr(want), ex.raw
        dst = tmp_path / "back.bin"
        sb.files.download("big/big.bin", dst)
    got = hashlib.sha256()
    with open(dst, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            got.update(b)
    assert dst.stat().st_size == size and got.hexdigest() == want
    if peak_before is not None:
        # The server streams both ways: its peak resident memory must not grow by the file.
        grown = _peak_rss(server_pid) - peak_before
        assert grown < 32 * 1024 * 1024, f"server peak RSS grew by {grown} bytes"


def _peak_rss(pid):
    """Peak resident memory (VmHWM) of the test server, when the test started it."""
    if not pid:
        return None
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return None


def test_typed_errors(sandlot_url, sandbox):
    with pytest.raises(sandlot.SandboxNotFound) as info:
        Sandbox.connect("sbx_does_not_exist_0000", url=sandlot_url)
    assert info.value.status == 404 and info.value.code == "sandbox_not_found"
    with pytest.raises(sandlot.InvalidPath) as info:
        sandbox.files.read("../etc/passwd")
    assert info.value.code == "invalid_path"
    with pytest.raises(sandlot.InvalidPath):
        sandbox.files.write("/etc/passwd", b"x")
    with pytest.raises(sandlot.FileNotFound):
        sandbox.files.read("no/such/file.txt")
    sandbox.run_code("import os; os.makedirs('/workspace/adir', exist_ok=True)")
    with pytest.raises(sandlot.NotARegularFile):
        sandbox.files.read("adir")
    with pytest.raises(sandlot.InvalidRequest):
        sandbox.run_code("1", timeout=-1)


def test_lifecycle_connect_list_kill(sandlot_url):
    sb = Sandbox(url=sandlot_url, metadata={"who": "lifecycle"}, env={"GREETING": "hey"}, timeout=300)
    try:
        info = sb.info()
        assert info.state == "running" and info.metadata == {"who": "lifecycle"} and info.idle_timeout == 300
        assert sb.run_code("import os; os.environ['GREETING']").text == "'hey'"
        assert sb.id in {s.id for s in Sandbox.list(url=sandlot_url)}
        other = Sandbox.connect(sb.id, url=sandlot_url)
        assert other.run_code("1 + 1").text == "2"
        other.close(kill=False)
        recs = sb.executions()
        assert len(recs) == 2
        rec = next(r for r in recs if r.code == "1 + 1")
        assert rec.language == "python" and rec.execution is not None and rec.execution.text == "2"
    finally:
        assert sb.kill() is True
    with pytest.raises(sandlot.SandboxGone):
        sb2 = Sandbox.connect(sb.id, url=sandlot_url)  # noqa: F841
    assert sb.id not in {s.id for s in Sandbox.list(url=sandlot_url)}
    assert sb.id in {s.id for s in Sandbox.list(url=sandlot_url, all=True)}


@pytest.mark.slow
def test_timeout_and_interrupt_keep_state(sandbox):
    sandbox.run_code("kept = 'yes'")
    ex = sandbox.run_code("import time\ntime.sleep(30)", timeout=1)
    assert ex.end_state == "timeout" and ex.sandbox_alive
    with pytest.raises(ExecutionTimeout):
        ex.raise_for_error()
    result: Dict[str, Any] = {}
    t = threading.Thread(target=lambda: result.update(ex=sandbox.run_code("import time\ntime.sleep(30)")))
    t.start()
    time.sleep(1.5)
    assert sandbox.interrupt() is True
    t.join(20)
    assert not t.is_alive() and result["ex"].end_state == "interrupted"
    assert sandbox.run_code("kept").text == "'yes'"
    assert sandbox.interrupt() is False


def _wait_for_background(sandbox, text: str):
    deadline = time.monotonic() + 20
    while True:
        out = sandbox.background_output()
        if text in out.stdout + out.stderr:
            return out
        assert time.monotonic() < deadline, f"{text!r} never arrived: {out!r}"
        time.sleep(0.05)


def test_background_output_is_kept_apart(sandbox):
    ex = sandbox.run_code("import subprocess\nsubprocess.Popen('sleep 0.3; echo late; echo oops >&2', shell=True)\nprint('cell')")
    assert ex.stdout == "cell\n"
    out = _wait_for_background(sandbox, "oops")
    assert [(e.stream, e.text) for e in out] == [("stdout", "late\n"), ("stderr", "oops\n")]
    assert out.dropped_bytes == 0 and all(e.at.endswith("Z") for e in out)
    assert [e.execution_id for e in out] == [ex.id, ex.id]  # the execution that started it
    nxt = sandbox.run_code("print('next')")
    assert nxt.stdout == "next\n" and nxt.background_bytes == len("late\noops\n")
    assert nxt.restarted is None
    assert len(sandbox.background_output(clear=True)) == 2
    assert len(sandbox.background_output()) == 0
    assert sandbox.run_bash("echo now").background_bytes == 0


async def test_async_background_output(sandlot_url):
    async with AsyncSandbox.create(url=sandlot_url) as sb:
        await sb.run_bash("(sleep 0.3; echo async-late) &")
        deadline = time.monotonic() + 20
        while "async-late" not in (await sb.background_output()).stdout:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        out = await sb.background_output(clear=True)
        assert out.stdout == "async-late\n"
        assert (await sb.run_code("1")).background_bytes == 0


async def test_async_sandbox_flow(sandlot_url):
    chunks: List[str] = []

    async def on_stdout(m):
        chunks.append(str(m))

    async with AsyncSandbox.create(url=sandlot_url) as sb:
        await sb.run_code("y = 20")
        ex = await sb.run_code("print('async hi')\ny * 2 + 2", on_stdout=on_stdout)
        assert ex.text == "42" and "".join(chunks) == "async hi\n"
        await sb.files.write("a.txt", b"async file")
        assert await sb.files.read("a.txt") == b"async file"
        assert "a.txt" in {e.name for e in await sb.files.list()}
        bx = await sb.run_bash("cat a.txt")
        assert bx.stdout == "async file"
        sid = sb.id
    with pytest.raises(sandlot.SandboxGone):
        await AsyncSandbox.connect(sid, url=sandlot_url)


def test_tool_dispatcher_formats(sandbox):
    d = ToolDispatcher(sandbox, timeout=60)
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "run_python", "arguments": json.dumps({"code": DATAFRAME_CELL})},
    }
    msg = d.handle_openai_tool_call(call)
    assert msg["role"] == "tool" and msg["tool_call_id"] == "call_1"
    text = msg["content"]
    assert "[stdout]\nrows: 3" in text and "[result]\n6" in text
    assert text.count("PNG image") == 2 and "base64" not in text
    assert len(d.last_images) == 2 and d.last_images[0].to_bytes()[:8] == PNG_MAGIC

    block = d.handle_anthropic_tool_use({"type": "tool_use", "id": "toolu_1", "name": "run_python", "input": {"code": "1/0"}})
    assert block["tool_use_id"] == "toolu_1" and block["is_error"] is True
    assert "ZeroDivisionError" in block["content"][0]["text"]
    fig = d.handle_anthropic_tool_use(
        {"id": "toolu_2", "name": "run_python", "input": {"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.show()"}}
    )
    images = [c for c in fig["content"] if c["type"] == "image"]
    assert len(images) == 1 and base64.b64decode(images[0]["source"]["data"])[:8] == PNG_MAGIC
    sh = d.handle_anthropic_tool_use({"id": "toolu_3", "name": "run_bash", "input": {"code": "echo from-bash; (exit 3)"}})
    assert "[stdout]\nfrom-bash" in sh["content"][0]["text"] and "[exit code: 3]" in sh["content"][0]["text"]
    assert sh["is_error"] is True


# ---------------------------------------------------------------------------------------------
# The agent loop example against a scripted OpenAI-compatible endpoint
# ---------------------------------------------------------------------------------------------


class ScriptedChat(BaseHTTPRequestHandler):
    """First answer: a run_python tool call; second: checks the tool result and answers."""

    requests: List[Dict[str, Any]] = []
    problems: List[str] = []

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        type(self).requests.append(body)
        if self.path != "/v1/chat/completions":
            type(self).problems.append(f"unexpected path {self.path}")
        if len(type(self).requests) == 1:
            if body["tools"][0]["function"]["name"] != "run_python":
                type(self).problems.append("run_python tool not declared")
            code = "import statistics\nvals = [3, 5, 7, 11]\nprint('mean is', statistics.mean(vals))\nsum(vals) * 1000"
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_xyz", "type": "function", "function": {"name": "run_python", "arguments": json.dumps({"code": code})}}
                ],
            }
        else:
            tool = [m for m in body["messages"] if m.get("role") == "tool"]
            if not tool or tool[0].get("tool_call_id") != "call_xyz":
                type(self).problems.append(f"no tool message for call_xyz: {body['messages']}")
            else:
                content = tool[0]["content"]
                if "mean is 6.5" not in content or "26000" not in content:
                    type(self).problems.append(f"tool result lacks the output: {content!r}")
            message = {"role": "assistant", "content": "FINAL: the mean is 6.5"}
        payload = json.dumps({"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def test_agent_loop_example(sandlot_url, local_key_home):
    ScriptedChat.requests = []
    ScriptedChat.problems = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), ScriptedChat)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        # Run as on the server's machine: no $SANDLOT_API_KEY, the SDK finds the local key.
        env = local_client_env(
            local_key_home,
            OPENAI_BASE_URL=f"http://127.0.0.1:{srv.server_port}/v1",
            OPENAI_API_KEY="sk-test",
            SANDLOT_URL=sandlot_url,
        )
        proc = subprocess.run(
            [sys.executable, str(REPO / "examples" / "agent_loop.py"), "What is the mean of 3, 5, 7, 11?"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        srv.shutdown()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "FINAL: the mean is 6.5"
    assert len(ScriptedChat.requests) == 2 and ScriptedChat.problems == []
    assert "mean is 6.5" in proc.stderr  # the loop logs tool output


# ---------------------------------------------------------------------------------------------
# Code contexts, artifacts, templates
# ---------------------------------------------------------------------------------------------


def test_contexts_are_isolated_namespaces(sandbox):
    assert sandbox.run_code("secret = 'default-only'").ok
    ctx = sandbox.contexts.create()
    assert isinstance(ctx, sandlot.Context) and ctx.id.startswith("ctx_") and ctx.created_at
    assert [c.id for c in sandbox.contexts.list()] == ["default", ctx.id]
    ex = sandbox.run_code("'secret' in dir()", context=ctx)
    assert ex.text == "False" and ex.context == ctx.id, ex.raw
    missing = sandbox.run_code("secret", context=ctx.id)
    assert missing.error is not None and missing.error.name == "NameError"
    assert sandbox.run_code("mine = 7", context=ctx).ok
    assert sandbox.run_code("'mine' in dir()").text == "False"
    assert sandbox.run_code("secret").text == "'default-only'"
    # files are shared between contexts
    sandbox.run_code("open('/workspace/shared.txt', 'w').write('hi')", context=ctx)
    assert sandbox.run_code("open('/workspace/shared.txt').read()").text == "'hi'"
    assert sandbox.contexts.restart(ctx).id == ctx.id
    assert sandbox.run_code("'mine' in dir()", context=ctx).text == "False"
    sandbox.contexts.remove(ctx)
    assert [c.id for c in sandbox.contexts.list()] == ["default"]
    with pytest.raises(sandlot.InvalidArgument):
        sandbox.run_code("1", context=ctx)
    with pytest.raises(sandlot.InvalidArgument):
        sandbox.contexts.remove("default")
    # A context may work in its own directory; a path that is none is refused by name.
    there = sandbox.contexts.create(cwd="/tmp")
    assert there.cwd == "/tmp" and ctx.cwd is None
    assert sandbox.run_code("import os; os.getcwd()", context=there).text == "'/tmp'"
    assert sandbox.run_code("import os; os.getcwd()").text == "'/workspace'"
    with pytest.raises(sandlot.InvalidArgument, match="not a directory"):
        sandbox.contexts.create(cwd="/no/such/dir")


def test_artifacts_outlive_the_sandbox(sandlot_url, tmp_path):
    content = "name,score\nada,3\nbob,5\n"
    sb = Sandbox(url=sandlot_url)
    try:
        ex = sb.run_code(
            "import csv\n"
            "with open('/workspace/scores.csv', 'w', newline='') as f:\n"
            "    w = csv.writer(f, lineterminator='\\n')\n"
            "    w.writerows([['name', 'score'], ['ada', 3], ['bob', 5]])\n"
        )
        assert ex.ok, ex.raw
        assert len(ex.artifacts) == 1, ex.raw.get("artifacts")
        art = ex.artifacts[0]
        assert isinstance(art, sandlot.Artifact)
        assert (art.path, art.size, art.change) == ("scores.csv", len(content), "created")
        assert art.sha256 == hashlib.sha256(content.encode()).hexdigest() and art.url.endswith(art.sha256)
        assert art.mime_type.startswith("text/csv"), art.mime_type
        assert art.read() == content.encode()
        # an unchanged file is not reported again; a modified one is
        assert sb.run_code("1 + 1").artifacts == []
        mod = sb.run_code("open('/workspace/scores.csv', 'a').write('cy,1\\n')", on_stdout=lambda m: None)
        assert [(a.path, a.change) for a in mod.artifacts] == [("scores.csv", "modified")]
        assert mod.artifacts[0].read() == (content + "cy,1\n").encode()
    finally:
        assert sb.kill() is True
    assert art.read() == content.encode()
    dest = tmp_path / "scores.csv"
    assert art.download(dest) == str(dest) and dest.read_text() == content
    with pytest.raises(sandlot.FileNotFound):
        sandlot.Artifact.from_json(dict(art.to_json(), sha256="0" * 64), client=art._client).read()


async def test_async_contexts_and_artifacts(sandlot_url, tmp_path):
    async with AsyncSandbox.create(url=sandlot_url) as sb:
        await sb.run_code("v = 1")
        ctx = await sb.contexts.create()
        assert (await sb.run_code("'v' in dir()", context=ctx)).text == "False"
        there = await sb.contexts.create(cwd="/tmp")
        assert (await sb.run_code("import os; os.getcwd()", context=there)).text == "'/tmp'"
        ex = await sb.run_code("open('/workspace/a.txt', 'w').write('async artifact')", context=ctx)
        (art,) = ex.artifacts
        await sb.contexts.remove(ctx)
    assert await art.aread() == b"async artifact"
    await art.adownload(tmp_path / "a.txt")
    assert (tmp_path / "a.txt").read_bytes() == b"async artifact"


def test_template_setup_code(sandlot_url):
    name = f"sdk-answer-{os.getpid()}-{int(time.time())}"
    with sandlot.Templates(url=sandlot_url) as templates:
        tpl = templates.create(name=name, description="x is 41", setup="x = 41")
        assert tpl.name == name and tpl.status in ("building", "ready")
        ready = templates.wait_ready(name, timeout=600, poll_interval=0.5)
        assert ready.is_ready and ready.spec["setup"] == "x = 41" and ready.version
        assert name in {t.name for t in templates.list()}
        assert "default" in {t.name for t in templates.list()}
        with pytest.raises(sandlot.TemplateNotFound):
            templates.get("sdk-no-such-template")
    with Sandbox(url=sandlot_url, template=name) as sb:
        assert sb.info().template == name
        assert sb.run_code("x + 1").text == "42"
        ctx = sb.contexts.create()  # a new context starts with the setup's names too
        assert sb.run_code("x + 1", context=ctx).text == "42"


def test_template_build_failure_is_typed(sandlot_url):
    name = f"sdk-broken-{os.getpid()}-{int(time.time())}"
    with sandlot.Templates(url=sandlot_url) as templates:
        templates.create({"name": name, "setup": "raise RuntimeError('setup boom')"})
        with pytest.raises(sandlot.TemplateBuildFailed) as info:
            templates.wait_ready(name, timeout=600, poll_interval=0.5)
    assert info.value.template == name and "boom" in info.value.error, info.value.error
    with pytest.raises(sandlot.TemplateNotReady):
        Sandbox(url=sandlot_url, template=name)
