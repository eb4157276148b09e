"""The unmodified E2B Python SDK's `commands` and `files` (envd's process and filesystem
services, Connect RPC with the JSON codec over HTTP/2) against a real `sandlot serve`,
configured by environment variables only (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY)."""

from __future__ import annotations

import asyncio
import time

import pytest

from ._e2b import e2b_env, sbx  # noqa: F401  (fixtures)

e2b = pytest.importorskip("e2b")

pytestmark = pytest.mark.live


def test_run_echo_and_streams(sbx):
    r = sbx.commands.run("echo hello")
    assert r.stdout == "hello\n"
    assert r.stderr == ""
    assert r.exit_code == 0

    seen: list[str] = []
    r = sbx.commands.run("echo one; echo two >&2; echo three", on_stdout=seen.append)
    assert "".join(seen) == "one\nthree\n"
    assert r.stderr == "two\n"


def test_nonzero_exit_raises_the_sdks_exception(sbx):
    with pytest.raises(e2b.CommandExitException) as info:
        sbx.commands.run("echo bad >&2; exit 3")
    assert info.value.exit_code == 3
    assert info.value.stderr == "bad\n"


def test_cwd_envs_and_a_fresh_process_each_time(sbx):
    sbx.commands.run("mkdir -p /home/user/work")
    r = sbx.commands.run("pwd; echo $GREETING", cwd="/home/user/work", envs={"GREETING": "hi there"})
    assert r.stdout == "/home/user/work\nhi there\n"
    # A command's cd and exports do not carry over to the next one.
    sbx.commands.run("cd /tmp; export LEFT=1")
    r = sbx.commands.run("pwd; echo \"[$LEFT]\"")
    assert r.stdout == "/home/user\n[]\n"
    # Files written by a command are files of the home.
    sbx.commands.run("echo -n data > /workspace/from_cmd.txt")
    assert sbx.files.read("/home/user/from_cmd.txt") == "data"


def test_sudo_runs_the_command_as_the_user_and_grants_nothing(sbx):
    # E2B's scripts put `sudo` in front of commands; a sandlot sandbox has no root to become:
    # the command runs as the sandbox's user, and one that needs root still fails.
    r = sbx.commands.run("echo $FOO", envs={"FOO": "bar"})
    assert r.stdout.strip() == "bar"
    r = sbx.commands.run('sudo echo "[$FOO]"')
    assert r.stdout.strip() == "[]"
    r = sbx.commands.run("id -u; sudo -E -u root id -u; sudo -- whoami")
    uid = r.stdout.split()[0]
    assert r.stdout.split() == [uid, uid, "user"], r.stdout
    assert uid != "0"
    with pytest.raises(e2b.CommandExitException):
        sbx.commands.run("sudo touch /etc/owned")


def test_background_command_list_connect_and_kill(sbx):
    h = sbx.commands.run("echo started; sleep 60", background=True)
    assert h.pid > 0
    assert any(p.pid == h.pid for p in sbx.commands.list())
    other = sbx.commands.connect(h.pid)
    assert other.pid == h.pid
    t = time.monotonic()
    assert sbx.commands.kill(h.pid) is True
    assert all(p.pid != h.pid for p in sbx.commands.list())
    with pytest.raises(e2b.CommandExitException):
        h.wait()
    with pytest.raises(e2b.CommandExitException):
        other.wait()
    assert time.monotonic() - t < 20
    assert sbx.commands.kill(h.pid) is False
    # The sandbox runs commands again.
    assert sbx.commands.run("echo next").stdout == "next\n"


def test_stdin_is_sent_and_closed(sbx):
    h = sbx.commands.run("tr a-z A-Z", background=True, stdin=True)
    sbx.commands.send_stdin(h.pid, "hello\n")
    sbx.commands.close_stdin(h.pid)
    r = h.wait()
    assert (r.stdout, r.exit_code) == ("HELLO\n", 0)


def test_stdin_streamed_in_order_on_one_stream(sbx):
    h = sbx.commands.run("tr a-z A-Z", background=True, stdin=True)

    def chunks():
        for word in ["one ", "two ", "three\n"]:
            time.sleep(0.05)  # sent as the iterable yields them, on one request
            yield word

    sbx.commands.stream_input(h.pid, chunks())
    sbx.commands.close_stdin(h.pid)
    assert h.wait().stdout == "ONE TWO THREE\n"
    # A process that is not there: the SDK's not-found error, nothing written anywhere.
    with pytest.raises(e2b.NotFoundException):
        sbx.commands.stream_input(999_999, ["lost"])


def test_async_stdin_handle_and_pty_stream(e2b_env):
    async def main() -> None:
        sb = await e2b.AsyncSandbox.create(timeout=120)
        try:
            h = await sb.commands.run("cat", background=True, stdin=True)
            handle = sb.commands.stream_input(h.pid)
            for part in ["a", "b", "c\n"]:
                await handle.send(part)
            await handle.close()
            await sb.commands.close_stdin(h.pid)
            assert (await h.wait()).stdout == "abc\n"
            out = bytearray()
            pty = await sb.pty.create(e2b.PtySize(rows=24, cols=80), on_data=out.extend)
            term = sb.pty.stream_input(pty.pid)
            await term.send("echo streamed-$((6*7))\n")
            await term.close()
            for _ in range(200):
                if b"streamed-42" in out:
                    break
                await asyncio.sleep(0.02)
            assert b"streamed-42" in out, out
            assert await sb.pty.kill(pty.pid) is True
        finally:
            await sb.kill()

    asyncio.run(main())


def test_a_background_server_does_not_hold_the_sandbox(e2b_env):
    from e2b_code_interpreter import Sandbox

    sb = Sandbox.create(timeout=300)
    try:
        server = sb.commands.run("python3 -m http.server 8000", background=True)
        t = time.monotonic()
        assert sb.run_code("1+1").text == "2"
        assert time.monotonic() - t < 5
        fetch = (
            "for i in $(seq 50); do python3 -c \"import urllib.request as u;"
            " print(u.urlopen('http://localhost:8000').status)\" 2>/dev/null && exit 0;"
            " sleep 0.1; done; exit 1"
        )
        assert sb.commands.run(fetch, timeout=30).stdout == "200\n"
        assert server.pid in [p.pid for p in sb.commands.list()]
        assert server.kill() is True
        with pytest.raises(e2b.CommandExitException):
            server.wait()
        assert server.pid not in [p.pid for p in sb.commands.list()]
    finally:
        sb.kill()


def test_a_command_started_during_a_long_cell_starts_at_once(e2b_env):
    import threading

    from e2b_code_interpreter import Sandbox

    sb = Sandbox.create(timeout=300)
    try:
        cell = threading.Thread(target=lambda: sb.run_code("import time; time.sleep(4)"))
        cell.start()
        time.sleep(0.5)  # the cell is running
        t = time.monotonic()
        assert sb.commands.run("echo hi").stdout == "hi\n"
        assert time.monotonic() - t < 1.0
        assert cell.is_alive(), "answered while the cell still ran"
        cell.join()
    finally:
        sb.kill()


def test_commands_run_side_by_side_and_stream(sbx):
    import threading

    outs: list[str] = []
    t = time.monotonic()
    threads = [
        threading.Thread(target=lambda i=i: outs.append(sbx.commands.run(f"sleep 1; echo {i}").stdout))
        for i in range(2)
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(outs) == ["0\n", "1\n"]
    assert time.monotonic() - t < 1.8

    seen: list[tuple[str, float]] = []
    t = time.monotonic()
    r = sbx.commands.run("echo first; sleep 1.5; echo second",
                         on_stdout=lambda s: seen.append((s, time.monotonic() - t)))
    assert r.stdout == "first\nsecond\n"
    assert seen[0][0] == "first\n" and seen[0][1] < 1.0, seen

    with pytest.raises(e2b.CommandExitException) as info:
        sbx.commands.run("exit 7")
    assert info.value.exit_code == 7


def test_command_timeout(sbx):
    t = time.monotonic()
    with pytest.raises(e2b.TimeoutException):
        sbx.commands.run("sleep 30", timeout=1.5)
    assert time.monotonic() - t < 15
    assert sbx.commands.run("echo ok").stdout == "ok\n"


def test_files_management(sbx):
    assert sbx.files.make_dir("/home/user/proj/src") is True
    assert sbx.files.make_dir("/home/user/proj/src") is False
    sbx.files.write("/home/user/proj/src/main.py", "print('hi')\n")
    assert sbx.files.exists("/home/user/proj/src/main.py")
    assert not sbx.files.exists("/home/user/proj/nope.py")

    info = sbx.files.get_info("/home/user/proj/src/main.py")
    assert info.name == "main.py"
    assert info.type == e2b.FileType.FILE
    assert info.size == len("print('hi')\n")
    assert info.path == "/home/user/proj/src/main.py"

    top = sbx.files.list("/home/user/proj")
    assert [(e.name, e.type) for e in top] == [("src", e2b.FileType.DIR)]
    deep = sbx.files.list("/home/user/proj", depth=2)
    assert sorted(e.path for e in deep) == ["/home/user/proj/src", "/home/user/proj/src/main.py"]

    moved = sbx.files.rename("/home/user/proj/src/main.py", "/home/user/proj/app.py")
    assert moved.path == "/home/user/proj/app.py"
    assert sbx.files.read("/home/user/proj/app.py") == "print('hi')\n"
    assert not sbx.files.exists("/home/user/proj/src/main.py")

    sbx.files.remove("/home/user/proj")
    assert not sbx.files.exists("/home/user/proj")


def test_files_outside_the_home_are_refused(sbx):
    for bad in ("/etc/passwd", "/home/user/../../etc/passwd"):
        with pytest.raises(e2b.SandboxException):
            sbx.files.get_info(bad)
    sbx.commands.run("ln -sfn /etc /home/user/etc_link")
    with pytest.raises(e2b.SandboxException):
        sbx.files.list("/home/user/etc_link")
    info = sbx.files.get_info("/home/user/etc_link")
    assert info.type == e2b.FileType.SYMLINK


def test_watch_dir_outside_the_home_is_a_clear_error(sbx):
    # Watches are served (tests/test_e2b_files.py); outside the home they are refused.
    with pytest.raises(e2b.SandboxException) as info:
        sbx.files.watch_dir("/etc")
    assert "outside /home/user" in str(info.value)


def test_async_sdk_commands_and_files(e2b_env):
    async def main() -> None:
        sb = await e2b.AsyncSandbox.create(timeout=120)
        try:
            r = await sb.commands.run("echo async")
            assert r.stdout == "async\n"
            assert await sb.files.make_dir("/home/user/a") is True
            assert [e.name for e in await sb.files.list("/home/user") if e.name == "a"] == ["a"]
            h = await sb.commands.run("sleep 60", background=True)
            assert await sb.commands.kill(h.pid) is True
        finally:
            await sb.kill()

    asyncio.run(main())
