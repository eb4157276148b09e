"""Nothing of the driver's reaches the processes user code starts: each sees fds 0, 1 and 2 and
nothing else, whether Python, IPython's ``!cmd``, a Bash command or a background job started it.
The real-server counterpart, inside a jail, is crates/sandlot-cli/tests/it/hygiene.rs."""

from __future__ import annotations

import os
import re
import sys
import time

import pytest

# Lists the probe's own open fds. os.listdir's directory fd is closed again by the time the
# entries are checked, so fstat drops it.
PROBE = """
import os
fds = []
for name in os.listdir("/proc/self/fd"):
    try:
        os.fstat(int(name))
    except OSError:
        continue
    fds.append(int(name))
print("FDS", ",".join(str(fd) for fd in sorted(fds)), flush=True)
"""

ONLY_STDIO = ["FDS 0,1,2"]


def _fd_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("FDS")]


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    path = tmp_path_factory.mktemp("probe") / "probe.py"
    path.write_text(PROBE)
    return path


@pytest.fixture(scope="module")
def python():
    # The driver runs on the interpreter the tests run on (conftest's DRIVER_PYTHON).
    from conftest import DRIVER_PYTHON

    return DRIVER_PYTHON or sys.executable


@pytest.mark.parametrize("cell", [
    "import subprocess\nsubprocess.run([{python!r}, {probe!r}])",
    "import os\nos.system({python!r} + ' ' + {probe!r})",
    "!{python} {probe}",
    "import subprocess\nsubprocess.run(['/bin/sh', '-c', {python!r} + ' ' + {probe!r}])",
])
def test_processes_a_python_cell_starts_see_only_stdio(shared, probe, python, cell):
    execution = shared.run(cell.format(python=python, probe=str(probe)))
    assert execution.status == "ok", execution.events
    assert _fd_lines(execution.stdout) == ONLY_STDIO


@pytest.mark.parametrize("cell", [
    "{python} {probe}",
    "{python} {probe} & wait",
    "( {python} {probe}; true ) & wait",
    "echo | {python} {probe} | cat",
    "bash -c '{python} {probe}'",
])
def test_processes_a_bash_cell_starts_see_only_stdio(shared, probe, python, cell):
    execution = shared.run(cell.format(python=python, probe=probe), language="bash")
    assert execution.status == "ok", execution.events
    # A pipeline's first stage reads the pipe on fd 0: still only 0, 1 and 2.
    assert _fd_lines(execution.stdout) == ONLY_STDIO


def test_a_background_job_that_outlives_its_cell_sees_only_stdio(shared, probe, python):
    shared.run(f"(sleep 0.2; {python} {probe}) &", language="bash")
    shared.wait_for_background("FDS")
    assert _fd_lines(shared.background_text()) == ONLY_STDIO
    shared.background.clear()


def test_whatever_else_the_bash_session_holds_is_close_on_exec(shared):
    # While a cell runs, bash keeps a saved copy of its command socket (its real stdin); no
    # program it runs may inherit it.
    execution = shared.run(
        # Builtins only: a command substitution would add a pipe of its own while it runs.
        "for f in /proc/$$/fdinfo/*; do n=${f##*/}; [ $n -gt 2 ] || continue; "
        "while read -r key value; do [ $key = flags: ] && echo $n $value; done < $f; "
        "done 2>/dev/null; true",
        language="bash")
    assert execution.status == "ok", execution.events
    assert execution.stdout, "bash holds its saved stdin while a cell runs"
    for line in execution.stdout.splitlines():
        fd, flags = line.split()
        assert int(flags, 8) & 0o2000000, f"fd {fd} of the bash session is inherited by programs"


# -- Output of processes that outlive their cell -----------------------------------------------


def test_a_bash_job_that_outlives_its_cell_writes_into_no_later_execution(driver):
    first = driver.run("( sleep 0.3; while true; do echo LEAK; echo LEAK-ERR >&2; sleep 0.05; "
                       "done ) & echo started", language="bash")
    assert (first.status, first.stdout) == ("ok", "started\n"), first.events
    driver.wait_for_background("LEAK")
    # The job writes all along; none of it is a later execution's, in either language.
    for code, language, want in [("sleep 0.5; echo next", "bash", "next\n"),
                                 ("import time\ntime.sleep(0.5)\nprint('py')", "python", "py\n"),
                                 ("sleep 0.5; echo again", "bash", "again\n")]:
        before = len(driver.background_text())
        execution = driver.run(code, language=language)
        assert (execution.status, execution.stdout, execution.stderr) == ("ok", want, ""), \
            execution.events
        driver.pump(0.2)
        assert len(driver.background_text()) > before, "the job stopped writing"
    assert set(driver.background_text().split()) == {"LEAK"}
    assert set(driver.background_text("stderr").split()) == {"LEAK-ERR"}
    driver.run("kill $(jobs -p)", language="bash")


def test_all_a_bash_cell_writes_before_it_ends_is_its_own(driver):
    execution = driver.run("head -c 300000 /dev/zero | tr '\\0' a; echo; echo err >&2; "
                           "( echo sub; echo sub-err >&2 ) & wait", language="bash")
    assert execution.status == "ok", execution.events
    assert execution.stdout == "a" * 300000 + "\nsub\n"
    assert execution.stderr == "err\nsub-err\n"
    assert driver.background == []


def test_bash_cells_leave_no_descriptors_behind(driver):
    driver.run("echo warm", language="bash")
    fds = len(os.listdir(f"/proc/{driver.proc.pid}/fd"))
    for _ in range(20):
        assert driver.run("echo x; echo y >&2", language="bash").stdout == "x\n"
    assert len(os.listdir(f"/proc/{driver.proc.pid}/fd")) == fds
    # A job that outlived its cell holds its cell's output until it ends, then that goes too.
    driver.run("( sleep 0.5; echo late ) &", language="bash")
    driver.wait_for_background("late")
    deadline = time.monotonic() + 10
    while len(os.listdir(f"/proc/{driver.proc.pid}/fd")) != fds:
        assert time.monotonic() < deadline, os.listdir(f"/proc/{driver.proc.pid}/fd")
        time.sleep(0.05)


def test_a_bash_job_is_background_output_of_the_execution_that_started_it(driver):
    first = driver.run("( sleep 0.2; echo late ) &", language="bash")
    driver.wait_for_background("late")
    assert driver.background_text(execution=first.done["id"]) == "late\n"


# Started by one Python cell: a process (subprocess.Popen), a job of os.system, a forked child,
# a multiprocessing worker and a thread, each writing to stdout and stderr until STOP_LEAKERS
# (or until the driver is gone, should the test fail first).
LEAKERS = """
import multiprocessing, os, signal, subprocess, sys, threading, time
stop = threading.Event()
driver = os.getpid()
proc = subprocess.Popen(['sh', '-c', 'sleep 0.2; while kill -0 $PPID; do echo LEAK-PROC; '
                         'echo LEAK-PROC-ERR >&2; sleep 0.05; done'])
os.system('(sleep 0.2; while kill -0 $PPID; do echo LEAK-SYSTEM; sleep 0.05; done) & '
          'echo $! > job.pid')

def chatter(name):
    time.sleep(0.2)
    while not stop.is_set() and driver in (os.getpid(), os.getppid()):
        print(name)
        print(name + '-ERR', file=sys.stderr)
        time.sleep(0.05)

threading.Thread(target=chatter, args=('LEAK-THREAD',), daemon=True).start()
worker = multiprocessing.get_context('fork').Process(target=chatter, args=('LEAK-POOL',))
worker.start()
child = os.fork()
if child == 0:
    chatter('LEAK-FORK')
print('started')
"""

STOP_LEAKERS = """
stop.set()
proc.kill()
worker.kill()
os.kill(child, signal.SIGKILL)
os.kill(int(open('job.pid').read()), signal.SIGKILL)
proc.wait(); worker.join(); os.waitpid(child, 0)
"""

LEAKS = {"stdout": {"LEAK-PROC", "LEAK-SYSTEM", "LEAK-THREAD", "LEAK-POOL", "LEAK-FORK"},
         "stderr": {"LEAK-PROC-ERR", "LEAK-THREAD-ERR", "LEAK-POOL-ERR", "LEAK-FORK-ERR"}}


def _leaks(text: str) -> set[str]:
    # print() writes the text and its newline apart: other writers' lines may come between.
    return set(re.findall(r"LEAK-(?:PROC|SYSTEM|THREAD|POOL|FORK)(?:-ERR)?", text))


def test_what_a_python_cell_starts_writes_into_no_later_execution(driver):
    first = driver.run(LEAKERS)
    assert (first.status, first.stdout, first.stderr) == ("ok", "started\n", ""), first.events
    for stream, words in LEAKS.items():
        for word in words:
            driver.wait_for_background(word, stream=stream)
    # They write all along; none of it is a later execution's, in either language.
    for code, language, want in [("import time\ntime.sleep(0.5)\nprint('py')", "python", "py\n"),
                                 ("sleep 0.5; echo next", "bash", "next\n"),
                                 ("time.sleep(0.5)\n1 + 1", "python", "")]:
        before = len(driver.background_text())
        execution = driver.run(code, language=language)
        assert (execution.status, execution.stdout, execution.stderr) == ("ok", want, ""), \
            execution.events
        assert "LEAK" not in str(execution.events)
        driver.pump(0.2)
        assert len(driver.background_text()) > before, "the writers stopped writing"
    # All of it is background output of the execution that started them.
    for stream, words in LEAKS.items():
        assert _leaks(driver.background_text(stream)) == words
        assert driver.background_text(stream, execution=first.done["id"]) == \
            driver.background_text(stream)
    stopped = driver.run(STOP_LEAKERS)
    assert stopped.status == "ok", stopped.events
    assert "LEAK" not in stopped.stdout + stopped.stderr


def test_all_a_python_cell_and_its_processes_write_before_it_ends_is_its_own(driver):
    execution = driver.run(r"""
import os, subprocess, sys, threading, time
print('one')
subprocess.run(['sh', '-c', 'head -c 300000 /dev/zero | tr "\\0" a; echo; echo sub-err >&2'])
print('two')
thread = threading.Thread(target=print, args=('from-thread',))
thread.start(); thread.join()
os.write(1, b'raw\n')
print('three')
subprocess.Popen(['echo', 'trailing'])
time.sleep(0.3)
""")
    assert execution.status == "ok", execution.events
    assert execution.stdout == "one\n" + "a" * 300000 + "\ntwo\nfrom-thread\nraw\nthree\ntrailing\n"
    assert execution.stderr == "sub-err\n"
    assert driver.background == []


def test_python_cells_leave_no_descriptors_behind(driver):
    driver.run("import os, subprocess\nsubprocess.run(['true'])")
    fds = len(os.listdir(f"/proc/{driver.proc.pid}/fd"))
    for _ in range(20):
        assert driver.run("print('x')\nos.write(2, b'y')").stdout == "x\n"
    assert len(os.listdir(f"/proc/{driver.proc.pid}/fd")) == fds
    # A process that outlived its cell holds the cell's pipes until it ends, then they go too.
    driver.run("subprocess.Popen(['sh', '-c', 'sleep 0.5; echo late'])")
    driver.wait_for_background("late")
    deadline = time.monotonic() + 10
    while len(os.listdir(f"/proc/{driver.proc.pid}/fd")) != fds:
        assert time.monotonic() < deadline, os.listdir(f"/proc/{driver.proc.pid}/fd")
        time.sleep(0.05)
