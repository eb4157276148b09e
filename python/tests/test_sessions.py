"""Sessions that survive limits and accidents: a Bash session that died, was stopped or ignored an
interrupt is replaced on the next cell (which says so); a cell that cannot be handed to bash
because a limit is reached ends with that errno, never with a driver error; Python cells that
hit a limit name it. The real-server counterparts (pids, memory) are in
crates/sandlot-cli/tests/it/hygiene.rs."""

from __future__ import annotations

import errno
import os
import time

NOTE = "a new one was started"


def test_a_bash_session_killed_between_cells_is_replaced_on_the_next_cell(driver):
    driver.run("LOST=1; ( sleep 0.2; kill -KILL $$ ) >/dev/null 2>&1 &", language="bash")
    time.sleep(0.6)
    execution = driver.run('echo "fresh:${LOST:-unset}"', language="bash")
    assert (execution.status, execution.stdout) == ("ok", "fresh:unset\n"), execution.events
    assert "the bash session had ended (killed by SIGKILL)" in execution.stderr
    assert NOTE in execution.stderr
    again = driver.run("echo again", language="bash")
    assert (again.stdout, again.stderr) == ("again\n", "")


def test_a_bash_session_stopped_between_cells_is_replaced(driver):
    driver.run("( sleep 0.2; kill -STOP $$ ) >/dev/null 2>&1 &", language="bash")
    time.sleep(0.6)
    execution = driver.run("echo works", language="bash")
    assert (execution.status, execution.stdout) == ("ok", "works\n"), execution.events
    assert "stopped by a signal" in execution.stderr


def test_a_cell_that_stops_its_own_session_ends_and_the_next_cell_works(driver):
    started = time.monotonic()
    stopped = driver.run("echo before; kill -STOP $$; echo not-reached", language="bash")
    assert time.monotonic() - started < 5
    assert stopped.status == "error"
    assert "not-reached" not in stopped.stdout
    assert "stopped by a signal" in stopped.stderr
    assert driver.run("echo works", language="bash").stdout == "works\n"


def test_a_bash_cell_that_ignores_the_interrupt_costs_only_the_bash_session(driver):
    driver.run("kept = 'python state'")
    exec_id = driver.start("trap '' INT; echo started; sleep 30; echo not-reached",
                           language="bash")
    driver.wait_for_stdout("started")
    interrupted_at = time.monotonic()
    driver.interrupt()
    execution = driver.collect(exec_id, timeout=10)
    # Within the server's grace (1 s), so the sandbox is not killed for it.
    assert time.monotonic() - interrupted_at < 1.0
    assert execution.status == "interrupted"
    assert "did not stop within" in execution.stderr
    assert driver.run("kept").result["data"]["text/plain"] == "'python state'"
    fresh = driver.run("echo fresh", language="bash")
    assert (fresh.status, fresh.stdout) == ("ok", "fresh\n")


def _exhaust_fds() -> str:
    # A low soft limit, so exhausting it is quick; the driver's own fds stay open.
    return ("import resource\n"
            "_soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (64, _hard))\n"
            "held = []\n"
            "try:\n"
            "    while True:\n"
            "        held.append(open('/dev/null'))\n"
            "except OSError as exc:\n"
            "    print(exc.errno)\n")


def _release_fds() -> str:
    return ("for f in held:\n"
            "    f.close()\n"
            "held.clear()\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (_soft, _hard))\n")


def test_a_bash_session_that_cannot_start_ends_the_cell_with_the_errno(driver):
    assert driver.run(_exhaust_fds()).stdout == f"{errno.EMFILE}\n"
    refused = driver.run("echo hi", language="bash")
    assert refused.status == "error"
    assert refused.error["name"] == "OSError"
    assert "could not start" in refused.error["value"]
    assert "Too many open files" in refused.error["value"]
    assert "RLIMIT_NOFILE" in refused.error["value"]
    assert "internal driver error" not in refused.stderr
    # The changes of a cell whose snapshot could not be taken are not guessed.
    assert refused.done.get("changes_truncated") is True
    assert driver.run(_release_fds()).status == "ok"
    works = driver.run("echo hi", language="bash")
    assert (works.status, works.stdout) == ("ok", "hi\n")
    assert works.done["changes"] == []


def test_a_bash_cell_that_cannot_be_written_ends_with_the_errno(driver):
    driver.run("KEPT=yes", language="bash")
    driver.run(_exhaust_fds())
    refused = driver.run("echo hi", language="bash")
    assert refused.status == "error"
    assert "could not be written" in refused.error["value"]
    assert "Too many open files" in refused.error["value"]
    driver.run(_release_fds())
    # The session itself was never touched.
    assert driver.run("echo $KEPT", language="bash").stdout == "yes\n"


def test_a_python_cell_that_hits_a_limit_names_it(driver):
    execution = driver.run("import errno, os\n"
                           "raise BlockingIOError(errno.EAGAIN, os.strerror(errno.EAGAIN))")
    assert execution.error["name"] == "BlockingIOError"
    assert "Resource temporarily unavailable (EAGAIN)" in execution.stderr
    assert "limits.pids" in execution.stderr
    threads = driver.run("raise RuntimeError(\"can't start new thread\")")
    assert "a thread could not start" in threads.stderr
    plain = driver.run("raise OSError(errno.ENOENT, 'no such file')")
    assert "sandlot:" not in plain.stderr


def test_limit_hints_name_the_limit():
    from sandlot_runtime.bash_session import BashUnavailable, limit_hint

    assert "limits.pids" in limit_hint(errno.EAGAIN)
    assert "RLIMIT_NOFILE" in limit_hint(errno.EMFILE)
    assert "RLIMIT_FSIZE" in limit_hint(errno.EFBIG)
    assert limit_hint(errno.ENOENT) == ""
    unavailable = BashUnavailable("x", BlockingIOError(errno.EAGAIN, os.strerror(errno.EAGAIN)))
    assert unavailable.name == "BlockingIOError"
    assert str(unavailable).startswith("x: [Errno 11] Resource temporarily unavailable (")


def test_an_unreadable_workspace_gives_no_snapshot(tmp_path, monkeypatch):
    from sandlot_runtime import changes as module

    monkeypatch.setattr(module, "WORKSPACE", str(tmp_path))
    real_scandir = os.scandir

    def no_fds(path):
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

    monkeypatch.setattr(module.os, "scandir", no_fds)
    assert module.safe_snapshot() is None
    monkeypatch.setattr(module.os, "scandir", real_scandir)
    monkeypatch.setattr(module, "WORKSPACE", str(tmp_path / "missing"))
    assert module.safe_snapshot() == {}  # no workspace at all: nothing to report
