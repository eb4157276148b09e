"""Live tests of saved interpreter state against a real `sandlot serve` (see conftest.py): fork,
pause and resume (by request, by the idle action, by ``close(pause=True)``), and snapshots.
Like test_live.py, skipped only when the sandlot binary does not exist."""

from __future__ import annotations

import os
import re
import time

import httpx
import pytest

import sandlot
from sandlot import AsyncSandbox, Sandbox

pytestmark = pytest.mark.live

# A parent's state: a variable, a function and a class of the session (pickled by value), a
# module bound to a name, and a lock (which no pickler can carry: reported, not fatal).
PARENT_STATE = """
import math
import threading
x = 41
def f():
    return x + 1
class Point:
    def __init__(self, a):
        self.a = a
p = Point(7)
lock = threading.Lock()
"""


def _ok(ex):
    assert ex.end_state == "ok", ex.raw
    return ex


def test_fork_children_start_with_the_parents_state(sandlot_url):
    with Sandbox(url=sandlot_url, metadata={"test": "fork"}) as parent:
        _ok(parent.run_code(PARENT_STATE))
        parent.files.write("data/notes.txt", "from the parent")
        _ok(parent.run_bash("mkdir -p /workspace/sub && cd /workspace/sub && export GREETING=hello"))
        forks = parent.fork(3)
        try:
            assert len(forks) == 3 and len({c.id for c in forks} | {parent.id}) == 4
            assert forks.took_ms >= 0
            missing = {n.name for n in forks.not_captured}
            assert "lock" in missing and not missing & {"x", "f", "Point", "p", "math"}, forks.not_captured
            for child in forks:
                info = child.info()
                assert info.state == "running" and info.forked_from == parent.id
                assert info.metadata == {"test": "fork"} and info.last_restore.source == "fork"
                assert _ok(child.run_code("f()")).text == "42"
                assert _ok(child.run_code("p.a * math.sqrt(4)")).text == "14.0"
                assert _ok(child.run_code("type(p).__name__")).text == "'Point'"
                # read before writing: a sibling's write must not show here
                assert child.files.read_text("data/notes.txt") == "from the parent"
                assert _ok(child.run_bash("pwd; echo $GREETING")).stdout.split() == ["/workspace/sub", "hello"]
                _ok(child.run_code("x = 0"))
                child.files.write("data/notes.txt", f"from {child.id}")
            # the parent is untouched by the fork and by what its children did
            assert _ok(parent.run_code("f()")).text == "42"
            assert _ok(parent.run_code("lock.acquire(); lock.release(); 'usable'")).text == "'usable'"
            assert parent.files.read_text("data/notes.txt") == "from the parent"
            assert parent.info().forked_from is None
        finally:
            for child in forks:
                child.kill()


def test_fork_reseeds_children_unless_same_seed(sandlot_url):
    with Sandbox(url=sandlot_url) as parent:
        _ok(parent.run_code("import random\nimport numpy as np\nrandom.seed(1234)\nnp.random.seed(1234)"))
        fresh = parent.fork(2)
        same = parent.fork(2, same_seed=True)
        try:
            draw = "(random.random(), float(np.random.rand()))"
            expected = _ok(parent.run_code(draw)).text
            fresh_draws = [_ok(c.run_code(draw)).text for c in fresh]
            assert fresh_draws[0] != fresh_draws[1] and expected not in fresh_draws
            assert [_ok(c.run_code(draw)).text for c in same] == [expected, expected]
        finally:
            for child in list(fresh) + list(same):
                child.kill()


def test_fork_count_out_of_range_is_refused(sandlot_url, sandbox):
    # The SDK refuses such a count itself, so ask the server directly.
    for count in (0, 101):
        resp = httpx.post(
            f"{sandlot_url}/v1/sandboxes/{sandbox.id}/fork",
            json={"count": count},
            headers={"Authorization": f"Bearer {os.environ['SANDLOT_API_KEY']}"},
        )
        assert resp.status_code == 400 and resp.json()["error"]["code"] in ("invalid_request", "invalid_argument")
    assert [s.forked_from for s in Sandbox.list(url=sandlot_url)].count(sandbox.id) == 0
    assert _ok(sandbox.run_code("1 + 1")).text == "2"


def test_pause_then_execute_resumes_with_variables_intact(sandlot_url):
    with Sandbox(url=sandlot_url) as sb:
        _ok(sb.run_code("import pandas as pd\ndf = pd.DataFrame({'a': range(1000)})\ny = 'kept'"))
        sb.files.write("kept.txt", "file kept")
        info = sb.pause()
        assert info.state == "paused" and info.paused_at
        assert sb.info().state == "paused"
        assert sb.id in [s.id for s in Sandbox.list(url=sandlot_url)]  # paused is not ended
        assert sb.files.read_text("kept.txt") == "file kept"  # files stay readable meanwhile
        assert _ok(sb.run_code("len(df), y")).text == "(1000, 'kept')"
        info = sb.info()
        assert info.state == "running" and info.paused_at is None
        assert info.last_restore.source == "resume" and info.last_restore.variables >= 2
        # an explicit pause and resume, twice each (both answer the sandbox unchanged)
        sb.pause()
        assert sb.pause().state == "paused"
        assert sb.resume().state == "running"
        assert sb.resume().state == "running"
        assert _ok(sb.run_code("int(df['a'].sum()), y")).text == "(499500, 'kept')"


def test_snapshot_then_two_sandboxes_from_it(sandlot_url):
    with Sandbox(url=sandlot_url) as src:
        _ok(src.run_code("import collections\ncounts = collections.Counter('hello')\ndef top():\n    return counts.most_common(1)[0]"))
        src.files.write("in/data.csv", "a,b\n1,2\n")
        snap = src.snapshot("greeting")
        assert re.fullmatch(r"snap_[0-9a-f]{32}", snap.id) and snap.name == "greeting"
        assert snap.sandbox_id == src.id and snap.template == "default"
        assert snap.template_version == src.info().template_version
        assert snap.variables >= 2 and snap.state_bytes > 0 and snap.workspace and snap.version == 1
        assert snap.not_captured == []
        # what the source does next is not in the snapshot
        _ok(src.run_code("counts.clear()"))
        src.files.write("in/data.csv", "changed")
    # the snapshot outlives its sandbox
    try:
        with Sandbox(url=sandlot_url, from_snapshot=snap) as a, Sandbox(url=sandlot_url, from_snapshot=snap.id) as b:
            for sb in (a, b):
                info = sb.info()
                assert info.from_snapshot == snap.id and info.last_restore.source == "snapshot"
                assert _ok(sb.run_code("top()")).text == "('l', 2)"
                assert sb.files.read_text("in/data.csv") == "a,b\n1,2\n"
            _ok(a.run_code("counts['z'] = 9"))
            assert _ok(b.run_code("counts['z']")).text == "0"
        listed = {s.id: s for s in sandlot.list_snapshots(url=sandlot_url)}
        assert listed[snap.id].name == "greeting"
        got = sandlot.get_snapshot(snap.id, url=sandlot_url)
        assert (got.id, got.sandbox_id, got.state_bytes) == (snap.id, snap.sandbox_id, snap.state_bytes)
        with Sandbox(url=sandlot_url) as other:
            unnamed = other.snapshot()
        assert unnamed.name is None
        sandlot.delete_snapshot(unnamed, url=sandlot_url)
    finally:
        sandlot.delete_snapshot(snap, url=sandlot_url)
    with pytest.raises(sandlot.SnapshotNotFound):
        sandlot.get_snapshot(snap.id, url=sandlot_url)
    with pytest.raises(sandlot.SnapshotNotFound):
        sandlot.delete_snapshot(snap.id, url=sandlot_url)
    with pytest.raises(sandlot.SnapshotNotFound):
        Sandbox(url=sandlot_url, from_snapshot=snap)


def test_close_with_pause_then_connect(sandlot_url):
    sb = Sandbox(url=sandlot_url)
    _ok(sb.run_code("z = 123"))
    sid = sb.id
    sb.close(pause=True)
    peek = Sandbox.connect(sid, url=sandlot_url, resume=False)
    try:
        assert peek.info().state == "paused"
    finally:
        peek.close(kill=False)
    again = Sandbox.connect(sid, url=sandlot_url)
    try:
        info = again.info()
        assert info.state == "running" and info.last_restore.source == "resume"
        assert _ok(again.run_code("z")).text == "123"
    finally:
        again.kill()


def test_idle_action_pause_keeps_the_sandbox(sandlot_url):
    with Sandbox(url=sandlot_url, timeout=2, on_idle="pause") as sb:
        assert sb.info().on_idle == "pause"
        _ok(sb.run_code("w = 5"))
        deadline = time.monotonic() + 30
        while sb.info().state != "paused":
            assert time.monotonic() < deadline, "the idle sandbox was not paused within 30 s"
            time.sleep(0.5)
        assert _ok(sb.run_code("w * 2")).text == "10"


async def test_async_fork_pause_snapshot(sandlot_url):
    async with AsyncSandbox.create(url=sandlot_url) as sb:
        _ok(await sb.run_code("v = [1, 2, 3]"))
        forks = await sb.fork(2)
        try:
            assert [_ok(await c.run_code("sum(v)")).text for c in forks] == ["6", "6"]
        finally:
            for c in forks:
                await c.kill()
        assert (await sb.pause()).state == "paused"
        assert _ok(await sb.run_code("len(v)")).text == "3"
        snap = await sb.snapshot("async")
        try:
            async with AsyncSandbox.create(url=sandlot_url, from_snapshot=snap) as child:
                assert _ok(await child.run_code("v[-1]")).text == "3"
        finally:
            async with sandlot.AsyncSnapshots(url=sandlot_url) as snapshots:
                await snapshots.delete(snap)


def test_diff_of_a_fork_shows_what_diverged(sandlot_url):
    with Sandbox(url=sandlot_url) as parent:
        _ok(parent.run_code(PARENT_STATE))
        parent.files.write("notes.txt", "from the parent")
        [child] = parent.fork(1)
        try:
            fresh = parent.diff(child)
            assert isinstance(fresh, sandlot.models.Diff) and fresh.identical, fresh
            assert (fresh.a, fresh.b) == (parent.id, child.id)
            assert [(n.name, n.kind, n.sandbox) for n in fresh.not_compared] == [("lock", "variable", parent.id)]

            _ok(child.run_code("x = 0\ny = [1, 2]\ndel p"))
            child.files.write("notes.txt", "FROM the parent")
            child.files.write("new/file.bin", b"\0" * 10)
            d = parent.diff(child.id)
            assert not d.identical and not d.truncated
            changes = {(v.context, v.name): (v.change, v.a and v.a.type, v.b and v.b.type) for v in d.variables}
            assert changes == {
                ("default", "x"): ("changed", "int", "int"),
                ("default", "y"): ("added", None, "list"),
                ("default", "p"): ("removed", "Point", None),
            }
            files = {f.path: (f.change, f.a_kind, f.b_kind, f.a_size, f.b_size) for f in d.files}
            assert files == {
                "notes.txt": ("changed", "file", "file", 15, 15),
                "new": ("added", None, "dir", None, 0),
                "new/file.bin": ("added", None, "file", None, 10),
            }
        finally:
            child.kill()
    with Sandbox(url=sandlot_url) as one, Sandbox(url=sandlot_url) as other:
        with pytest.raises(sandlot.InvalidArgument):
            one.diff(other)


async def test_async_diff(sandlot_url):
    async with AsyncSandbox.create(url=sandlot_url) as sb:
        _ok(await sb.run_code("v = 1"))
        [child] = await sb.fork(1)
        try:
            _ok(await child.run_code("v = 2"))
            d = await child.diff(sb)
            assert [(v.name, v.change) for v in d.variables] == [("v", "changed")] and d.files == []
        finally:
            await child.kill()
