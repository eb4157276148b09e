"""The unmodified E2B SDKs (`e2b`, `e2b-code-interpreter`, installed from the registry)
against a real `sandlot serve` (see conftest.py), configured only by environment variables:
E2B_API_URL and E2B_SANDBOX_URL point at the server, E2B_API_KEY is the server's E2B key.

The key is read from the test server's data dir (`<data-dir>/e2b-api-key`, found from the
server's command line); with SANDLOT_TEST_URL (an external server) set E2B_API_KEY too."""

from __future__ import annotations

import base64
import os
import time

import pytest

from ._e2b import e2b_env  # noqa: F401  (a fixture)

e2b = pytest.importorskip("e2b")
e2b_ci = pytest.importorskip("e2b_code_interpreter")

pytestmark = pytest.mark.live

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def sbx(e2b_env):
    sb = e2b_ci.Sandbox.create(timeout=120, metadata={"suite": "e2b"})
    try:
        yield sb
    finally:
        sb.kill()


def test_acceptance_script(e2b_env):
    """The issue's acceptance list, in the order a user would write it."""
    from e2b_code_interpreter import Sandbox

    sbx = Sandbox.create(timeout=120)
    try:
        assert sbx.sandbox_id
        assert sbx.is_running()

        first = sbx.run_code("x = 1")
        assert first.error is None, first.error
        assert sbx.run_code("x + 1").text == "2"

        df = sbx.run_code("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})")
        assert df.error is None, df.error
        assert df.results and df.results[0].html and "<table" in df.results[0].html

        fig = sbx.run_code(
            "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()"
        )
        assert fig.error is None, fig.error
        pngs = [r.png for r in fig.results if r.png]
        assert pngs and base64.b64decode(pngs[0]).startswith(PNG_MAGIC)

        info = sbx.files.write("/home/user/hello.txt", "hello from e2b")
        assert info.path == "/home/user/hello.txt" and info.name == "hello.txt"
        assert sbx.files.read("/home/user/hello.txt") == "hello from e2b"
        # The file is the workspace's: code sees it in its working directory.
        assert sbx.run_code("open('hello.txt').read()").text == "hello from e2b"

        ctx = sbx.create_code_context()
        sbx.run_code("y = 'in context'", context=ctx)
        assert sbx.run_code("y", context=ctx).text == "in context"
        assert sbx.run_code("'y' in globals()").text == "False"  # the default context

        sbx.set_timeout(300)
        info = sbx.get_info()
        assert info.end_at.timestamp() > time.time() + 200

        listed = [s.sandbox_id for s in Sandbox.list().next_items()]
        assert sbx.sandbox_id in listed
    finally:
        assert sbx.kill() is True
    assert sbx.sandbox_id not in [s.sandbox_id for s in e2b_ci.Sandbox.list().next_items()]
    # Killed twice: E2B answers False.
    assert e2b_ci.Sandbox.kill(sbx.sandbox_id) is False


def test_files_list_and_several_files(sbx):
    sbx.files.write_files(
        [
            {"path": "/home/user/d/a.txt", "data": "A"},
            {"path": "d/b.bin", "data": b"\x00\x01"},
        ]
    )
    assert sbx.files.read("/home/user/d/b.bin", format="bytes") == bytearray(b"\x00\x01")
    names = sorted(e.name for e in sbx.files.list("/home/user/d"))
    assert names == ["a.txt", "b.bin"]


def test_streaming_callbacks_and_errors(sbx):
    seen = []
    ex = sbx.run_code(
        "import sys\nprint('out'); print('err', file=sys.stderr)\n1/0",
        on_stdout=lambda m: seen.append(("out", m.line)),
        on_stderr=lambda m: seen.append(("err", m.line)),
    )
    # Output comes in the chunks the sandbox wrote it in.
    assert "".join(t for k, t in seen if k == "out") == "out\n"
    assert "".join(t for k, t in seen if k == "err") == "err\n"
    assert "".join(ex.logs.stdout) == "out\n"
    assert ex.error is not None and ex.error.name == "ZeroDivisionError"
    assert "ZeroDivisionError" in ex.error.traceback
    assert ex.execution_count and ex.execution_count >= 1


def test_bash_language_and_env_vars(sbx):
    ex = sbx.run_code("echo hi from $SHELL_NAME", language="bash", envs={"SHELL_NAME": "bash"})
    assert "".join(ex.logs.stdout) == "hi from bash\n", ex
    # The variable was for that execution only.
    after = sbx.run_code("echo \"[${SHELL_NAME:-}]\"", language="bash")
    assert "".join(after.logs.stdout) == "[]\n"
    py = sbx.run_code("import os; os.environ.get('K')", envs={"K": "it's"})
    assert py.text == "it's"
    assert sbx.run_code("import os; os.environ.get('K') is None").text == "True"


def test_unsupported_language_is_a_clear_error(sbx):
    # JavaScript and TypeScript run (test_e2b_js_kernel.py); R and Java are refused.
    with pytest.raises(e2b.SandboxException, match="not available"):
        sbx.run_code("print(1)", language="r")


def test_contexts_list_restart_remove(sbx):
    ctx = sbx.create_code_context(language="bash")
    assert ctx.language == "bash" and ctx.cwd == "/home/user"
    sbx.run_code("export A=1", context=ctx)
    assert "".join(sbx.run_code("echo $A", context=ctx).logs.stdout) == "1\n"
    ids = [c.id for c in sbx.list_code_contexts()]
    assert ctx.id in ids
    sbx.restart_code_context(ctx)
    assert "".join(sbx.run_code("echo \"[$A]\"", context=ctx).logs.stdout) == "[]\n"
    sbx.remove_code_context(ctx)
    assert ctx.id not in [c.id for c in sbx.list_code_contexts()]
    with pytest.raises(e2b.NotFoundException):
        sbx.run_code("echo 1", context=ctx)


def test_code_commands_and_contexts_work_in_home(sbx):
    """E2B's sandboxes work in /home/user (the workspace, mounted there): code, Bash cells and
    commands start there and say so; a context works where it was created to."""
    assert sbx.run_code("import os; os.getcwd()").text == "/home/user"
    assert "".join(sbx.run_code("pwd", language="bash").logs.stdout) == "/home/user\n"
    assert sbx.commands.run("pwd").stdout == "/home/user\n"
    sbx.run_code("open('made-here.txt', 'w').write('x')")
    assert sbx.files.read("/home/user/made-here.txt") == "x"
    assert sbx.commands.run("cat /workspace/made-here.txt").stdout == "x"

    ctx = sbx.create_code_context(cwd="/tmp")
    assert ctx.cwd == "/tmp"
    assert sbx.run_code("import os; os.getcwd()", context=ctx).text == "/tmp"
    assert [c.cwd for c in sbx.list_code_contexts() if c.id == ctx.id] == ["/tmp"]
    assert sbx.run_code("os.getcwd()").text == "/home/user"
    with pytest.raises(e2b.SandboxException, match="not a directory"):
        sbx.create_code_context(cwd="/no/such/dir")


def test_connect_pause_resume(sbx):
    sbx.run_code("kept = 42")
    sbx.run_code("import os; os.makedirs('sub', exist_ok=True); os.chdir('sub')")
    assert sbx.pause() is True
    assert e2b_ci.Sandbox.get_info(sbx.sandbox_id).state.value == "paused"
    assert sbx.is_running() is False  # envd's /health: a 502 while paused
    again = e2b_ci.Sandbox.connect(sbx.sandbox_id)
    assert again.is_running() is True
    assert again.run_code("kept").text == "42"
    # Where the code left its working directory comes back with its variables.
    assert again.run_code("os.getcwd()").text == "/home/user/sub"


def test_connect_extends_a_running_sandboxs_time_and_never_shortens_it(sbx):
    sbx.set_timeout(300)
    before = e2b_ci.Sandbox.get_info(sbx.sandbox_id).end_at
    e2b_ci.Sandbox.connect(sbx.sandbox_id, timeout=10)
    assert e2b_ci.Sandbox.get_info(sbx.sandbox_id).end_at == before
    e2b_ci.Sandbox.connect(sbx.sandbox_id, timeout=600)
    assert e2b_ci.Sandbox.get_info(sbx.sandbox_id).end_at > before


def test_wrong_key_and_unknown_sandbox(e2b_env):
    with pytest.raises(e2b.AuthenticationException):
        e2b_ci.Sandbox.create(api_key="e2b_" + "0" * 40)
    with pytest.raises(e2b.SandboxException):
        e2b_ci.Sandbox.connect("sb_doesnotexist")
    with pytest.raises(e2b.NotFoundException):
        e2b_ci.Sandbox.get_info("sb_doesnotexist")


def test_paths_outside_home_are_refused(sbx):
    with pytest.raises(e2b.InvalidArgumentException, match="outside /home/user"):
        sbx.files.write("/etc/evil", "x")
    with pytest.raises(e2b.InvalidArgumentException):
        sbx.files.read("/home/user/../../etc/passwd")
    with pytest.raises(e2b.FileNotFoundException):
        sbx.files.read("/home/user/missing.txt")


def test_metadata_filter(e2b_env):
    sb = e2b_ci.Sandbox.create(timeout=60, metadata={"team": "a b/c"})
    try:
        from e2b import SandboxQuery

        found = e2b_ci.Sandbox.list(query=SandboxQuery(metadata={"team": "a b/c"})).next_items()
        assert [s.sandbox_id for s in found] == [sb.sandbox_id]
        assert found[0].metadata == {"team": "a b/c"}
    finally:
        sb.kill()


def _rotate(sandlot_url: str, sandbox_id: str) -> dict:
    """`POST /v1/sandboxes/{id}/ports/rotate` with the test server's local admin key."""
    import json
    import urllib.request
    from pathlib import Path

    pid = os.environ["SANDLOT_TEST_SERVER_PID"]
    args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    data_dir = Path(args[args.index(b"--data-dir") + 1].decode())
    key = (data_dir / "api-key").read_text().strip()
    req = urllib.request.Request(
        f"{sandlot_url}/v1/sandboxes/{sandbox_id}/ports/rotate",
        data=b"{}",
        method="POST",
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def test_rotated_tokens_are_refused_and_connect_hands_out_new_ones(e2b_env, sandlot_url):
    """Rotating a sandbox's tokens (sandlot's `POST /v1/sandboxes/{id}/ports/rotate`) ends the
    ones a Sandbox object holds at once: files, commands and run_code raise; the unmodified
    SDK's `Sandbox.connect(id)` gets the current ones and everything works (issue 19)."""
    if os.environ.get("SANDLOT_TEST_URL"):
        pytest.skip("rotation needs the test server's admin key")
    sb = e2b_ci.Sandbox.create(timeout=120)
    try:
        sb.files.write("/home/user/kept.txt", "kept")
        assert sb.run_code("1 + 1").text == "2"
        _rotate(sandlot_url, sb.sandbox_id)
        with pytest.raises(e2b.AuthenticationException, match="rotated"):
            sb.files.read("/home/user/kept.txt")
        with pytest.raises(e2b.AuthenticationException, match="token_revoked"):
            sb.commands.run("true")
        with pytest.raises(e2b.SandboxException, match="401.*token_revoked"):
            sb.run_code("open('/home/user/kept.txt', 'w').write('pwned')")
        again = e2b_ci.Sandbox.connect(sb.sandbox_id)
        assert again.files.read("/home/user/kept.txt") == "kept"
        assert again.commands.run("echo hi").stdout == "hi\n"
        assert again.run_code("6 * 7").text == "42"
    finally:
        sb.kill()
