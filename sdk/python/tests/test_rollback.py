"""Live tests of ``run_code(..., on_failure="rollback")`` against a real ``sandlot serve`` (see
conftest.py), sync and async: a failing cell leaves variables and files as they were, a
succeeding one is kept, streaming carries the rollback, and a bad value is refused before any
request. Skipped only when the sandlot binary does not exist."""

from __future__ import annotations

import pytest

import sandlot
from sandlot import AsyncSandbox, Sandbox

pytestmark = pytest.mark.live

SETUP = "x = 1\nopen('/workspace/keep.txt', 'w').write('kept')"
DAMAGE = "import os\nx = 2\nos.remove('/workspace/keep.txt')\nopen('/workspace/new.txt', 'w').write('new')\n"
LOOK = "(x, open('/workspace/keep.txt').read(), os.path.exists('/workspace/new.txt'))"
BEFORE = "(1, 'kept', False)"


def _ok(ex):
    assert ex.end_state == "ok", ex.raw
    return ex


def test_a_failing_cell_is_rolled_back_and_a_succeeding_one_kept(sandlot_url):
    with Sandbox(url=sandlot_url) as sb:
        _ok(sb.run_code(SETUP))
        ex = sb.run_code(DAMAGE + "raise ValueError('after the damage')", on_failure="rollback")
        assert ex.end_state == "error" and ex.error.name == "ValueError"
        assert ex.rolled_back is True
        rb = ex.rollback
        assert isinstance(rb, sandlot.Rollback) and rb.reason == "error" and rb.variables >= 1, ex.raw
        assert rb.capture_ms >= 0 and rb.restore_ms > 0
        assert _ok(sb.run_code("import os\n" + LOOK)).text == BEFORE
        assert sb.files.read_text("keep.txt") == "kept"

        # A timeout too.
        ex = sb.run_code(DAMAGE + "import time\ntime.sleep(30)", timeout=1, on_failure="rollback")
        assert ex.end_state == "timeout" and ex.rolled_back and ex.rollback.reason == "timeout", ex.raw
        assert _ok(sb.run_code(LOOK)).text == BEFORE

        # Streamed: the callbacks see the output, the final result says it was rolled back.
        seen = []
        ex = sb.run_code(DAMAGE + "print('damaged')\n1/0", on_failure="rollback", on_stdout=seen.append)
        assert "damaged" in "".join(str(s) for s in seen)
        assert ex.end_state == "error" and ex.rolled_back, ex.raw
        assert _ok(sb.run_code(LOOK)).text == BEFORE

        # Success keeps its effects; without the parameter nothing changes from before.
        ex = _ok(sb.run_code(DAMAGE + "x", on_failure="rollback"))
        assert ex.rolled_back is False and ex.rollback is None
        assert _ok(sb.run_code("(x, os.path.exists('/workspace/keep.txt'))")).text == "(2, False)"
        ex = sb.run_code("x = 3\nraise KeyError('k')")
        assert ex.end_state == "error" and not ex.rolled_back
        assert _ok(sb.run_code("x")).text == "3"


def test_a_bad_on_failure_is_refused_before_any_request(sandlot_url):
    with Sandbox(url=sandlot_url) as sb:
        _ok(sb.run_code("x = 1"))
        with pytest.raises(sandlot.InvalidArgument):
            sb.run_code("x = 2", on_failure="sometimes")
        assert _ok(sb.run_code("x")).text == "1"
        # "keep" is the default, spelled out.
        ex = sb.run_code("x = 4\n1/0", on_failure="keep")
        assert ex.end_state == "error" and not ex.rolled_back
        assert _ok(sb.run_code("x")).text == "4"


async def test_async_rollback(sandlot_url):
    async with AsyncSandbox.create(url=sandlot_url) as sb:
        _ok(await sb.run_code(SETUP))
        ex = await sb.run_code(DAMAGE + "raise RuntimeError('no')", on_failure="rollback")
        assert ex.rolled_back and ex.rollback.reason == "error", ex.raw
        assert _ok(await sb.run_code("import os\n" + LOOK)).text == BEFORE
        with pytest.raises(sandlot.InvalidArgument):
            await sb.run_code("x = 2", on_failure="ROLLBACK")
