"""The unmodified E2B Python SDK's PTY sessions (`sandbox.pty`: create with a size, envs and a
cwd, input, resize, kill, reconnect) and a command whose sandbox is killed while it runs,
against a real `sandlot serve` (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY only)."""

from __future__ import annotations

import time

import pytest

from ._e2b import e2b_env, sbx  # noqa: F401  (fixtures)

e2b = pytest.importorskip("e2b")
from e2b.sandbox.commands.command_handle import PtySize  # noqa: E402

pytestmark = pytest.mark.live


def _run(sbx, terminal, data: bytes) -> tuple[int, str]:
    """Types `data` into the session and waits for its end: (exit code, what it printed)."""
    sbx.pty.send_stdin(terminal.pid, data)
    chunks: list[bytes] = []
    result = terminal.wait(on_pty=chunks.append)
    return result.exit_code, b"".join(chunks).decode("utf-8", "replace")


def test_a_session_gets_its_envs_cwd_and_input(sbx):
    terminal = sbx.pty.create(PtySize(cols=80, rows=24), envs={"GREETING": "from-the-env"}, cwd="/tmp")
    code, out = _run(sbx, terminal, b"echo [$GREETING]; pwd; tty\nexit\n")
    assert code == 0
    assert "[from-the-env]" in out
    assert "\n/tmp\r\n" in out
    assert "/dev/pts/" in out
    # An exit status other than 0 is the session's, as with commands.
    terminal = sbx.pty.create(PtySize(cols=80, rows=24))
    with pytest.raises(e2b.CommandExitException):
        _run(sbx, terminal, b"exit 5\n")


def test_a_session_is_resized(sbx):
    terminal = sbx.pty.create(PtySize(cols=80, rows=24))
    code, out = _run(sbx, terminal, b"tput cols; tput lines\nexit\n")
    assert code == 0
    assert "80\r\n24\r\n" in out

    terminal = sbx.pty.create(PtySize(cols=80, rows=24))
    sbx.pty.resize(terminal.pid, PtySize(cols=120, rows=40))
    code, out = _run(sbx, terminal, b"tput cols; tput lines\nexit\n")
    assert code == 0
    assert "120\r\n40\r\n" in out


def test_a_session_is_killed_and_unknown_ones_are_not(sbx):
    terminal = sbx.pty.create(PtySize(cols=80, rows=24))
    assert sbx.pty.kill(terminal.pid) is True
    with pytest.raises(e2b.CommandExitException):
        terminal.wait()
    assert all(p.pid != terminal.pid for p in sbx.commands.list())
    assert sbx.pty.kill(999_999) is False
    # Absurd sizes are the SDK's invalid-argument exception.
    with pytest.raises(e2b.InvalidArgumentException):
        sbx.pty.create(PtySize(cols=0, rows=24)).wait()


def test_a_session_is_reconnected(sbx):
    terminal = sbx.pty.create(PtySize(cols=80, rows=24), envs={"WHO": "again"})
    sbx.pty.send_stdin(terminal.pid, b"echo first\n")
    terminal.disconnect()
    back = sbx.pty.connect(terminal.pid)
    assert back.pid == terminal.pid
    sbx.pty.send_stdin(terminal.pid, b"echo [$WHO]\nexit\n")
    chunks: list[bytes] = []
    result = back.wait(on_pty=chunks.append)
    assert result.exit_code == 0
    assert "[again]" in b"".join(chunks).decode()


def test_pty_input_is_bounded(sbx):
    terminal = sbx.pty.create(PtySize(cols=80, rows=24))
    with pytest.raises(e2b.InvalidArgumentException):
        sbx.pty.send_stdin(terminal.pid, b"x" * (64 * 1024 + 1))
    code, _ = _run(sbx, terminal, b"exit\n")
    assert code == 0


@pytest.mark.parametrize("when", ["listed", "at once"])
def test_a_command_whose_sandbox_is_killed_raises_promptly(e2b_env, when):
    sb = e2b.Sandbox.create(timeout=120)
    cmd = sb.commands.run("sleep 60", background=True)
    # Killed once it is listed, or at once (racing its launch: nothing will report its end,
    # and the stream still ends as a lost sandbox's, not after the launch's 10 s bound).
    deadline = time.monotonic() + 10
    while when == "listed" and cmd.pid not in [p.pid for p in sb.commands.list()] \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    t = time.monotonic()
    sb.kill()
    with pytest.raises(e2b.TimeoutException) as info:
        cmd.wait()
    assert "sandbox was killed or reached its end of life" in str(info.value)
    assert time.monotonic() - t < 10


def test_ctrl_c_interrupts_the_foreground_program(sbx):
    terminal = sbx.pty.create(PtySize(cols=80, rows=24))
    sbx.pty.send_stdin(terminal.pid, b"sleep 30\n")
    time.sleep(1)
    t = time.monotonic()
    sbx.pty.send_stdin(terminal.pid, b"\x03")
    code, out = _run(sbx, terminal, b"echo status-$?\nexit\n")
    assert code == 0
    assert time.monotonic() - t < 10
    assert "status-130" in out  # 128 + SIGINT: the sleep was interrupted
