"""sandlot's MCP server through the official MCP Python SDK (`mcp`, installed from the
registry) as the client, against a real `sandlot serve` (see conftest.py):

* over stdio: `sandlot mcp` launched exactly as Claude Desktop launches it, from the config
  snippet the README shows (examples/claude_desktop_config.json: command, args, env;
  only SANDLOT_URL is pointed at the test server and PATH given the binary's directory);
* over streamable HTTP: `<server>/mcp`, with the API key in the headers of the client's own
  `httpx2.AsyncClient` (the `mcp` SDK's way to authenticate).

`sandlot mcp` is given no key: like Claude Desktop on the server's machine, it finds the local
admin key in the default data dir (`$HOME/.local/share/sandlot/api-key`; HOME here is a temp
dir holding the test server's key, see conftest.py's local_key_home).

Covered: the tool list, running Python (values, stdout, tracebacks with isError), figures as
image content, DataFrames as text, a session's sandbox kept across calls and deleted when the
session ends, explicit sandbox_id sharing across sessions and transports, a client killed
mid-execution (`while True: pass`) leaving the sandbox usable with its state, and bad tool
arguments answered as MCP errors; requests without a key, with a wrong one, or with it in
`X-Api-Key`.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Dict, List

import pytest

mcp = pytest.importorskip("mcp")
from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

import anyio  # noqa: E402
import httpx2  # noqa: E402  (the HTTP client the mcp SDK uses)

pytestmark = pytest.mark.live

FIXTURE = Path(__file__).resolve().parents[3] / "examples" / "claude_desktop_config.json"
README = Path(__file__).resolve().parents[3] / "README.md"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TOOLS = [
    "run_python",
    "run_bash",
    "write_file",
    "read_file",
    "list_files",
    "create_sandbox",
    "list_sandboxes",
    "delete_sandbox",
    "fork_sandbox",
    "pause_sandbox",
    "resume_sandbox",
    "snapshot_sandbox",
]
# Bound of every test (the first sandbox of a run may take a few seconds to boot).
TEST_BOUND = 120


def _bin() -> Path:
    return Path(os.environ.get("SANDLOT_BIN") or Path(__file__).resolve().parents[3] / "target" / "debug" / "sandlot")


def _key() -> str:
    key = os.environ.get("SANDLOT_API_KEY", "")
    assert key, "the live tests need $SANDLOT_API_KEY (conftest.py sets it for the server it starts)"
    return key


def _auth() -> Dict[str, str]:
    return {"Authorization": f"Bearer {_key()}"}


# Home directories for `sandlot mcp`: one holding the test server's key where `sandlot serve`
# keeps it by default (conftest.py's local_key_home), so that given only SANDLOT_URL, as in the
# config, it finds the key; and one without.
_HOMES: Dict[str, Path] = {}


@pytest.fixture(autouse=True)
def _desktop_homes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> None:
    if "sandlot_url" in request.fixturenames and not _HOMES:
        _HOMES["with_key"] = request.getfixturevalue("local_key_home")
        _HOMES["without_key"] = tmp_path_factory.mktemp("home-without-key")


def _claude_desktop_params(url: str, home: str = "with_key") -> StdioServerParameters:
    """The server entry of the config snippet, launched as Claude Desktop does: its command
    (found on PATH), its args and its env (plus HOME, which Claude Desktop passes on too)."""
    cfg = json.loads(FIXTURE.read_text())["mcpServers"]["sandlot"]
    env = dict(cfg["env"])
    env["SANDLOT_URL"] = url
    env["PATH"] = f"{_bin().parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env["HOME"] = str(_HOMES[home])
    return StdioServerParameters(command=cfg["command"], args=cfg["args"], env=env)


def _http_client(headers: Dict[str, str]) -> httpx2.AsyncClient:
    # The mcp SDK's own default timeouts (a response stream may stay open for minutes).
    return httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0))


@asynccontextmanager
async def _client(kind: str, url: str, headers: Any = None) -> AsyncIterator[Client]:
    if kind == "stdio":
        async with Client(_claude_desktop_params(url), read_timeout_seconds=90) as client:
            yield client
        return
    async with _http_client(_auth() if headers is None else headers) as http:
        transport = streamable_http_client(f"{url}/mcp", http_client=http)
        async with Client(transport, read_timeout_seconds=90) as client:
            yield client


def _texts(result: Any) -> List[str]:
    return [c.text for c in result.content if c.type == "text"]


def _text(result: Any) -> str:
    return "\n".join(_texts(result))


def _json(result: Any) -> Any:
    assert not result.is_error, _text(result)
    return json.loads(_texts(result)[-1])


def _api(url: str, method: str, path: str) -> Dict[str, Any]:
    req = urllib.request.Request(f"{url}{path}", method=method, headers=_auth())
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            body = resp.read()
            return {"status": resp.status, "body": json.loads(body) if body else None}
    except urllib.error.HTTPError as e:
        return {"status": e.code, "body": json.loads(e.read() or b"null")}


def _alive(url: str, sandbox_id: str) -> bool:
    r = _api(url, "GET", f"/v1/sandboxes/{sandbox_id}")
    return r["status"] == 200 and r["body"]["state"] not in ("deleted", "expired", "lost")


async def _own_sandbox(client: Client) -> str:
    listed = _json(await client.call_tool("list_sandboxes", {}))
    own = [s["sandbox_id"] for s in listed if s.get("this_session")]
    assert len(own) == 1, listed
    return own[0]


async def _wait_gone(url: str, sandbox_id: str, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while _alive(url, sandbox_id):
        assert time.monotonic() < deadline, f"sandbox {sandbox_id} still alive {within} s after its session ended"
        await anyio.sleep(0.2)


def test_config_snippet_is_claude_desktops_shape() -> None:
    cfg = json.loads(FIXTURE.read_text())
    entry = cfg["mcpServers"]["sandlot"]
    assert entry["command"] == "sandlot"
    assert entry["args"] == ["mcp"]
    assert set(entry["env"]) == {"SANDLOT_URL"}
    if README.exists() and '"mcpServers"' in README.read_text():
        # The README shows this very snippet: find its JSON block and compare.
        text = README.read_text()
        start = text.rfind("{", 0, text.index('"mcpServers"'))
        block, _ = json.JSONDecoder().raw_decode(text[start:])
        assert block == cfg, "the README's Claude Desktop snippet differs from examples/claude_desktop_config.json"


@pytest.mark.parametrize("kind", ["stdio", "http"])
async def test_tools_python_images_tables(kind: str, sandlot_url: str) -> None:
    with anyio.fail_after(TEST_BOUND):
        async with _client(kind, sandlot_url) as client:
            tools = await client.list_tools()
            assert [t.name for t in tools.tools] == TOOLS
            run = next(t for t in tools.tools if t.name == "run_python")
            assert run.input_schema["required"] == ["code"]

            r = await client.call_tool("run_python", {"code": "print('hi'); 1+1"})
            assert not r.is_error, _text(r)
            assert _texts(r) == ["hi\n", "2"]

            # The session's sandbox persists across calls.
            r = await client.call_tool("run_python", {"code": "x = 41"})
            assert not r.is_error, _text(r)
            r = await client.call_tool("run_python", {"code": "x + 1"})
            assert _texts(r) == ["42"]

            # A figure comes back as MCP image content.
            r = await client.call_tool(
                "run_python",
                {"code": "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()"},
            )
            assert not r.is_error, _text(r)
            images = [c for c in r.content if c.type == "image"]
            assert len(images) == 1, r.content
            assert images[0].mime_type == "image/png"
            assert base64.b64decode(images[0].data).startswith(PNG_MAGIC)

            # A DataFrame comes back as its text table.
            r = await client.call_tool(
                "run_python", {"code": "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})"}
            )
            assert not r.is_error, _text(r)
            table = _text(r)
            assert "a" in table and "b" in table and "<table" not in table, table

            # Code that raises: isError, with the traceback.
            r = await client.call_tool("run_python", {"code": "def f():\n    return 1/0\nf()"})
            assert r.is_error
            assert "ZeroDivisionError" in _text(r) and "f()" in _text(r), _text(r)

            # Bash shares the workspace; a non-zero exit is an error with its status.
            r = await client.call_tool("write_file", {"path": "data/in.txt", "content": "hello\n"})
            assert not r.is_error, _text(r)
            r = await client.call_tool("run_bash", {"code": "cat data/in.txt; exit 3"})
            assert r.is_error
            assert "hello" in _text(r) and "exit code 3" in _text(r), _text(r)
            r = await client.call_tool("read_file", {"path": "/workspace/data/in.txt"})
            assert _texts(r) == ["hello\n"]
            r = await client.call_tool("list_files", {"recursive": True})
            assert {"path": "data/in.txt", "kind": "file", "size": 6} in _json(r)
            own = await _own_sandbox(client)
            # Idle, the session's sandbox is paused (not deleted): the next call resumes it.
            info = _api(sandlot_url, "GET", f"/v1/sandboxes/{own}")["body"]
            assert info["on_idle"] == "pause" and info["metadata"]["created_by"] == "mcp", info
            # A session sandbox deleted behind the session's back is replaced, and the model
            # is told its state is gone.
            assert _api(sandlot_url, "DELETE", f"/v1/sandboxes/{own}")["status"] == 204
            r = await client.call_tool("run_python", {"code": "1+1"})
            assert not r.is_error, _text(r)
            assert "was gone" in _texts(r)[0] and _texts(r)[-1] == "2", _texts(r)
            replaced = await _own_sandbox(client)
            assert replaced != own
            own = replaced
        # The session ended (stdio: EOF; HTTP: the client's DELETE): its sandbox is deleted.
        await _wait_gone(sandlot_url, own)


@pytest.mark.parametrize("kind", ["stdio", "http"])
async def test_bad_arguments_are_mcp_errors(kind: str, sandlot_url: str) -> None:
    with anyio.fail_after(TEST_BOUND):
        async with _client(kind, sandlot_url) as client:
            await client.list_tools()
            for name, args in [
                ("run_python", {}),  # missing code
                ("run_python", {"code": 5}),  # wrong type
                ("run_python", {"code": "1", "bogus": True}),  # unknown field
                ("write_file", {"path": "a", "content": "%%%", "encoding": "base64"}),
                ("fork_sandbox", {"count": "many"}),
                ("no_such_tool", {}),
            ]:
                with pytest.raises(MCPError) as err:
                    await client.call_tool(name, args)
                assert err.value.code == -32602, (name, args, err.value)
            # An unknown sandbox is the tool's own failure, readable by the model.
            r = await client.call_tool("run_python", {"code": "1", "sandbox_id": "sb_nope"})
            assert r.is_error and "sandbox_not_found" in _text(r), _text(r)
            r = await client.call_tool("read_file", {"path": "../../etc/passwd"})
            assert r.is_error and "invalid_path" in _text(r), _text(r)
            # The server is unaffected.
            r = await client.call_tool("run_python", {"code": "2*21"})
            assert _texts(r) == ["42"]


async def test_explicit_sandbox_is_shared_across_sessions_and_transports(sandlot_url: str) -> None:
    with anyio.fail_after(TEST_BOUND):
        async with _client("http", sandlot_url) as a:
            shared = _json(await a.call_tool("create_sandbox", {}))["sandbox_id"]
            r = await a.call_tool("run_python", {"code": "shared = 6", "sandbox_id": shared})
            assert not r.is_error, _text(r)
            async with _client("stdio", sandlot_url) as b:
                r = await b.call_tool("run_python", {"code": "shared * 7", "sandbox_id": shared})
                assert _texts(r) == ["42"]
                # b's own sandbox is another one.
                r = await b.call_tool("run_python", {"code": "'shared' in globals()"})
                assert _texts(r) == ["False"]
        # Sandboxes named explicitly outlive the sessions that used them.
        assert _alive(sandlot_url, shared)
        async with _client("http", sandlot_url) as c:
            forked = _json(await c.call_tool("fork_sandbox", {"sandbox_id": shared}))["sandboxes"]
            assert len(forked) == 1
            r = await c.call_tool("run_python", {"code": "shared + 1", "sandbox_id": forked[0]})
            assert _texts(r) == ["7"]
            snap = _json(await c.call_tool("snapshot_sandbox", {"sandbox_id": shared, "name": "mcp"}))
            assert snap["snapshot_id"]
            paused = _json(await c.call_tool("pause_sandbox", {"sandbox_id": shared}))
            assert paused["state"] == "paused"
            resumed = _json(await c.call_tool("resume_sandbox", {"sandbox_id": shared}))
            assert resumed["state"] == "running"
            r = await c.call_tool("run_python", {"code": "shared", "sandbox_id": shared})
            assert _texts(r) == ["6"]
            for sb in [shared, *forked]:
                assert _json(await c.call_tool("delete_sandbox", {"sandbox_id": sb}))["deleted"] == sb
        assert not _alive(sandlot_url, shared)


# A client that calls run_python("while True: pass") on a shared sandbox and is then killed.
DISCONNECTING_CLIENT = textwrap.dedent(
    """
    import json, os, sys, anyio, httpx2
    from mcp import Client, StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client

    kind, server, sandbox_id = sys.argv[1], sys.argv[2], sys.argv[3]

    async def main():
        headers = {"Authorization": "Bearer " + os.environ["SANDLOT_API_KEY"]}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0)) as http:
            if kind == "stdio":
                target = StdioServerParameters(**json.loads(server))
            else:
                target = streamable_http_client(server, http_client=http)
            async with Client(target) as client:
                await client.list_tools()
                print("calling", flush=True)
                await client.call_tool("run_python", {"code": "while True: pass", "sandbox_id": sandbox_id})

    anyio.run(main)
    """
)


@pytest.mark.parametrize("kind", ["stdio", "http"])
async def test_client_killed_mid_execution_leaves_sandbox_usable(kind: str, sandlot_url: str) -> None:
    with anyio.fail_after(TEST_BOUND):
        async with _client("http", sandlot_url) as c:
            shared = _json(await c.call_tool("create_sandbox", {}))["sandbox_id"]
            r = await c.call_tool("run_python", {"code": "kept = 'state'", "sandbox_id": shared})
            assert not r.is_error, _text(r)
        if kind == "stdio":
            p = _claude_desktop_params(sandlot_url)
            server = json.dumps({"command": p.command, "args": p.args, "env": p.env})
        else:
            server = f"{sandlot_url}/mcp"
        proc = subprocess.Popen(
            [sys.executable, "-c", DISCONNECTING_CLIENT, kind, server, shared],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            assert proc.stdout is not None
            line = await anyio.to_thread.run_sync(proc.stdout.readline)
            assert line.strip() == b"calling", line
            # Let the execution start and spin, then kill the client (and, for stdio, nothing
            # else: `sandlot mcp` sees its stdin close).
            await anyio.sleep(2.0)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        # The execution was interrupted (well before its 60 s timeout): the sandbox answers
        # again, with its state.
        started = time.monotonic()
        async with _client("http", sandlot_url) as c:
            r = await c.call_tool("run_python", {"code": "kept", "sandbox_id": shared})
            assert _texts(r) == ["'state'"], _text(r)
            waited = time.monotonic() - started
            assert waited < 30, f"the sandbox answered only after {waited:.1f} s"
            history = _api(sandlot_url, "GET", f"/v1/sandboxes/{shared}/executions")["body"]["executions"]
            spin = [e for e in history if e["code"] == "while True: pass"]
            assert spin and spin[-1]["result"]["end_state"] == "interrupted", spin
            _json(await c.call_tool("delete_sandbox", {"sandbox_id": shared}))


def _mcp_errors(exc: BaseException) -> List[MCPError]:
    """The MCPErrors in an exception, looking inside exception groups (anyio task groups)."""
    if isinstance(exc, MCPError):
        return [exc]
    found: List[MCPError] = []
    for inner in getattr(exc, "exceptions", None) or [exc.__cause__, exc.__context__]:
        if inner is not None and inner is not exc:
            found.extend(_mcp_errors(inner))
    return found


# A key of the right shape that the server never issued, and strings that are not keys at all.
UNKNOWN_KEY = "sl_aaaaaaaa_" + "a" * 32
BAD_HEADERS = [
    {},
    {"Authorization": f"Bearer {UNKNOWN_KEY}"},
    {"Authorization": "Bearer not-a-key"},
    {"Authorization": "Basic c2FuZGxvdDpzYW5kbG90"},
    {"X-Api-Key": UNKNOWN_KEY},
]


@pytest.mark.parametrize("headers", BAD_HEADERS, ids=["none", "unknown", "malformed", "basic", "x-api-key-unknown"])
async def test_http_without_a_valid_key_is_refused(headers: Dict[str, str], sandlot_url: str) -> None:
    with anyio.fail_after(TEST_BOUND):
        # What any HTTP client sees: 401, a Bearer challenge and a JSON-RPC error body.
        init = json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
        ).encode()
        req = urllib.request.Request(
            f"{sandlot_url}/mcp", data=init, method="POST",
            headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers},
        )
        with pytest.raises(urllib.error.HTTPError) as raw:
            urllib.request.urlopen(req, timeout=30)
        assert raw.value.code == 401
        assert raw.value.headers.get("WWW-Authenticate", "").startswith("Bearer"), dict(raw.value.headers)
        body = json.loads(raw.value.read())
        assert body["jsonrpc"] == "2.0" and "API key" in body["error"]["message"], body
        assert UNKNOWN_KEY not in json.dumps(body), "the refusal echoes the key it was sent"
        # What the official client sees: the session never starts, with the server's reason.
        try:
            async with _client("http", sandlot_url, headers) as client:
                await client.list_tools()
        except BaseException as e:  # noqa: BLE001 - an exception group from the client's task group
            errs = _mcp_errors(e)
            assert errs and "API key" in str(errs[0]), repr(e)
        else:
            pytest.fail(f"an MCP session started with {headers}")


async def test_http_key_in_x_api_key_works(sandlot_url: str) -> None:
    with anyio.fail_after(TEST_BOUND):
        async with _client("http", sandlot_url, {"X-Api-Key": _key()}) as client:
            r = await client.call_tool("run_python", {"code": "6 * 7"})
            assert _texts(r) == ["42"], _text(r)


async def test_stdio_without_a_key_says_so(sandlot_url: str) -> None:
    with anyio.fail_after(TEST_BOUND):
        # No $SANDLOT_API_KEY and no key file in the default data dir: every tool that reaches
        # the server answers the server's reason, readable by the model and the user.
        async with Client(_claude_desktop_params(sandlot_url, "without_key"), read_timeout_seconds=90) as client:
            r = await client.call_tool("run_python", {"code": "1"})
            assert r.is_error and "unauthenticated" in _text(r) and "API key" in _text(r), _text(r)
        # A wrong key given explicitly wins over the key file, and is refused.
        params = _claude_desktop_params(sandlot_url)
        params.env = dict(params.env or {}, SANDLOT_API_KEY=UNKNOWN_KEY)
        async with Client(params, read_timeout_seconds=90) as client:
            r = await client.call_tool("list_sandboxes", {})
            assert r.is_error and "unauthenticated" in _text(r), _text(r)
            assert UNKNOWN_KEY not in _text(r)
