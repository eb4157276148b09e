"""A sandbox's life through the unmodified E2B SDKs (`e2b`, `e2b-code-interpreter`) against a
real `sandlot serve`: `run_code` while and after the sandbox is killed, `get_metrics`, a port
served from a command (`python -m http.server`), and E2B's lifecycle (pause on timeout, with
and without `auto_resume`). The protocol and attack side is in
crates/sandlot-cli/tests/it/e2b_life.rs."""

from __future__ import annotations

import datetime
import os
import threading
import time

import pytest

from ._e2b import e2b_env, sbx  # noqa: F401  (fixtures)

e2b = pytest.importorskip("e2b")
e2b_ci = pytest.importorskip("e2b_code_interpreter")
httpx = pytest.importorskip("httpx")

pytestmark = pytest.mark.live


def _port(sb, port: int) -> "httpx.Response":
    """A GET of `/` on a sandbox port through the server's traffic path (what `get_host` names
    on E2B's cloud, a wildcard DNS name with TLS, which a loopback server has not): the
    routing headers and the sandbox's traffic token."""
    return httpx.get(
        os.environ["E2B_SANDBOX_URL"] + "/",
        headers={
            "E2b-Sandbox-Id": sb.sandbox_id,
            "E2b-Sandbox-Port": str(port),
            "E2B-Traffic-Access-Token": sb.traffic_access_token,
        },
        timeout=30,
    )


def _wait_state(sb, state, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while sb.get_info().state != state:
        assert time.monotonic() < deadline, f"never {state}"
        time.sleep(0.2)


def test_run_code_raises_when_the_sandbox_is_killed_during_it(e2b_env):
    sb = e2b_ci.Sandbox.create(timeout=120)
    timer = threading.Timer(1.5, sb.kill)
    timer.start()
    t = time.monotonic()
    try:
        with pytest.raises(e2b.TimeoutException, match="sandbox was killed while the request was in progress"):
            sb.run_code("import time; time.sleep(300)", timeout=300)
    finally:
        timer.cancel()
    assert time.monotonic() - t < 20
    # And on the sandbox once killed: at once, E2B's timeout exception too.
    with pytest.raises(e2b.TimeoutException):
        sb.run_code("1")


def test_metrics_have_a_point_at_once_within_their_range(e2b_env):
    start = datetime.datetime.now(datetime.timezone.utc)
    sb = e2b.Sandbox.create(timeout=60)
    try:
        points = sb.get_metrics()
        assert points, "a fresh sandbox has a point"
        p = points[0]
        assert p.cpu_count >= 1
        assert p.cpu_used_pct >= 0
        assert 0 < p.mem_used <= p.mem_total
        assert 0 <= p.disk_used <= p.disk_total
        end = datetime.datetime.now(datetime.timezone.utc)
        ranged = sb.get_metrics(start=start - datetime.timedelta(seconds=1), end=end)
        assert ranged
        for m in ranged:
            assert start.timestamp() - 2 <= m.timestamp.timestamp() <= end.timestamp() + 1
        before = sb.get_metrics(
            start=start - datetime.timedelta(hours=1), end=start - datetime.timedelta(minutes=30)
        )
        assert before == []
    finally:
        sb.kill()
    with pytest.raises(e2b.SandboxNotFoundException):
        e2b.Sandbox.get_metrics(sb.sandbox_id)


def test_a_port_served_by_a_command_answers(sbx):
    # `python` is the sandbox's Python in a login shell too (E2B's commands are `bash -l`).
    cmd = sbx.commands.run("python -m http.server 8001", background=True)
    try:
        status = None
        for _ in range(40):
            status = _port(sbx, 8001).status_code
            if status == 200:
                break
            time.sleep(0.25)
        assert status == 200
    finally:
        cmd.kill()


def test_an_invalid_on_timeout_falls_back_to_kill(e2b_env):
    sb = e2b.Sandbox.create(timeout=10, lifecycle={"on_timeout": None})  # type: ignore[typeddict-item]
    try:
        assert sb.is_running()
    finally:
        sb.kill()


def test_pause_on_timeout_with_and_without_auto_resume(e2b_env):
    wakes = e2b.Sandbox.create(timeout=2, lifecycle={"on_timeout": "pause", "auto_resume": True})
    sleeps = e2b.Sandbox.create(timeout=2, lifecycle={"on_timeout": "pause", "auto_resume": False})
    try:
        for sb in (wakes, sleeps):
            _wait_state(sb, e2b.SandboxState.PAUSED)
            assert not sb.is_running()
        # Without auto_resume, traffic does not wake it: connect does.
        assert _port(sleeps, 8000).status_code == 502
        assert sleeps.get_info().state == e2b.SandboxState.PAUSED
        sleeps.connect()
        assert sleeps.get_info().state == e2b.SandboxState.RUNNING
        assert sleeps.is_running()
        # With it, a request to one of its ports resumes it (nothing listens there: a pause
        # stops the sandbox's processes, so the app answers 502 until started again).
        assert _port(wakes, 8000).status_code == 502
        assert wakes.get_info().state == e2b.SandboxState.RUNNING
        assert wakes.is_running()
    finally:
        wakes.kill()
        sleeps.kill()


def test_set_timeout_of_a_pausing_sandbox_pauses_it(e2b_env):
    # On a sandbox that pauses on its timeout, set_timeout moves the pause (0: now), never
    # turning it into a kill; connect resumes it with its files.
    sb = e2b_ci.Sandbox.create(timeout=60, lifecycle={"on_timeout": {"action": "pause", "keep_memory": None}})
    try:
        sb.files.write("/home/user/kept.txt", "kept")
        sb.run_code("x = 41")
        sb.set_timeout(0)
        _wait_state(sb, e2b.SandboxState.PAUSED)
        assert not sb.is_running()
        resumed = sb.connect(timeout=2)
        assert resumed.sandbox_id == sb.sandbox_id
        assert resumed.files.read("/home/user/kept.txt") == "kept"
        # keep_memory None is a full-memory pause: the interpreter's state is back.
        assert sb.run_code("x + 1").text == "42"
        # The timeout a connect gives pauses it again, too.
        _wait_state(sb, e2b.SandboxState.PAUSED)
    finally:
        sb.kill()


def test_a_filesystem_only_pause_keeps_the_files_and_drops_the_memory(e2b_env):
    sb = e2b_ci.Sandbox.create(timeout=2, lifecycle={"on_timeout": {"action": "pause", "keep_memory": False}})
    try:
        sb.files.write("/home/user/marker.txt", "fs-only")
        sb.run_code("x = 41")
        _wait_state(sb, e2b.SandboxState.PAUSED)
        sb.connect()
        assert sb.files.read("/home/user/marker.txt") == "fs-only"
        # A fresh boot: the variable is gone.
        execution = sb.run_code("x")
        assert execution.error is not None and execution.error.name == "NameError"
    finally:
        sb.kill()
