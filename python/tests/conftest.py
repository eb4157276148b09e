"""Runs the driver as the server would: a subprocess with a socketpair for frames and pipes for
stdout/stderr, read the way the server reads them (drain both pipes when a frame arrives)."""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PYTHON_DIR = Path(__file__).resolve().parents[1]
# The interpreter the driver runs in; it needs ipython, numpy, pandas, matplotlib.
DRIVER_PYTHON = os.environ.get("SANDLOT_TEST_PYTHON", sys.executable)


@dataclass
class Execution:
    """Everything one execution produced, in order. Stream chunks are ("stdout"|"stderr", text);
    frames are the decoded JSON objects."""

    events: list = field(default_factory=list)
    done: dict | None = None

    @property
    def stdout(self) -> str:
        return "".join(text for kind, text in self._chunks() if kind == "stdout")

    @property
    def stderr(self) -> str:
        return "".join(text for kind, text in self._chunks() if kind == "stderr")

    @property
    def frames(self) -> list[dict]:
        return [e for e in self.events if isinstance(e, dict)]

    def of_type(self, kind: str) -> list[dict]:
        return [f for f in self.frames if f["type"] == kind]

    @property
    def result(self) -> dict | None:
        results = self.of_type("result")
        return results[-1] if results else None

    @property
    def error(self) -> dict | None:
        errors = self.of_type("error")
        return errors[-1] if errors else None

    @property
    def status(self) -> str:
        return self.done["status"]

    def _chunks(self):
        return [e for e in self.events if isinstance(e, tuple)]

    def timeline(self) -> list:
        """Events with adjacent chunks of the same stream merged and frames reduced to their
        type: the order output was produced in."""
        merged: list = []
        for event in self.events:
            if isinstance(event, dict):
                merged.append(event["type"])
            elif merged and isinstance(merged[-1], tuple) and merged[-1][0] == event[0]:
                merged[-1] = (event[0], merged[-1][1] + event[1])
            else:
                merged.append(event)
        return merged


def driver_env(home: Path, extra_env: dict | None = None) -> dict:
    """The environment the driver runs in: this checkout's package, a HOME of the test's own,
    one shared matplotlib cache, single-threaded BLAS (prepare() insists on it)."""
    env = dict(os.environ)
    env.update({
        "PYTHONPATH": str(PYTHON_DIR),
        "HOME": str(home),
        "MPLCONFIGDIR": str(mpl_config_dir()),
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    })
    env.pop("IPYTHONDIR", None)
    env.pop("MPLBACKEND", None)
    env.update(extra_env or {})
    return env


class DriverProcess:
    """A driver started with `python -m sandlot_runtime.driver --fd N`, or with `script`, a
    Python program that gets the control stream's fd number as its first argument."""

    def __init__(self, workdir: Path, home: Path, extra_env: dict | None = None,
                 script: str | None = None) -> None:
        self.server_sock, child_sock = socket.socketpair()
        env = driver_env(home, extra_env)
        fd = child_sock.fileno()
        args = ["-m", "sandlot_runtime.driver", "--fd", str(fd)] if script is None else \
            ["-c", script, str(fd)]
        self.proc = subprocess.Popen(
            [DRIVER_PYTHON, *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=(fd,), cwd=workdir, env=env)
        child_sock.close()
        self.buffer = b""
        self.pending: list = []  # chunks and frames read but not yet claimed by an execution
        # (stream, text, execution id or None) of `background` frames: kept apart whenever they
        # come, as the server keeps them.
        self.background: list = []
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.server_sock, selectors.EVENT_READ, "ctrl")
        self.selector.register(self.proc.stdout, selectors.EVENT_READ, "stdout")
        self.selector.register(self.proc.stderr, selectors.EVENT_READ, "stderr")
        self.hello = self.next_frame(timeout=60)

    # -- wire ------------------------------------------------------------------------------

    def send(self, message: dict) -> None:
        body = json.dumps(message).encode()
        self.server_sock.sendall(len(body).to_bytes(4, "little") + body)

    def _read_pipe(self, name: str) -> bool:
        """Reads what one pipe holds now, without blocking; False once nothing was read."""
        pipe = getattr(self.proc, name)
        if self.selector.get_map().get(pipe.fileno()) is None:
            return False
        os.set_blocking(pipe.fileno(), False)
        try:
            data = os.read(pipe.fileno(), 65536)
        except BlockingIOError:
            return False
        finally:
            os.set_blocking(pipe.fileno(), True)
        if not data:
            self.selector.unregister(pipe)
            return False
        self.pending.append((name, data.decode("utf-8", "backslashreplace")))
        return True

    def _drain_pipes(self) -> None:
        for name in ("stdout", "stderr"):
            while self._read_pipe(name):
                pass

    def _take_frames(self) -> list[dict]:
        frames = []
        while len(self.buffer) >= 4:
            size = int.from_bytes(self.buffer[:4], "little")
            if len(self.buffer) < 4 + size:
                break
            body, self.buffer = self.buffer[4:4 + size], self.buffer[4 + size:]
            frame = json.loads(body)
            if frame.get("type") == "background":
                self.background.append((frame["stream"], frame["text"], frame.get("id")))
            else:
                frames.append(frame)
        self.pending.extend(frames)
        return frames

    def _read_ctrl(self) -> list[dict]:
        # What the server must do too: drain the pipes before reading a frame. The driver wrote
        # that output before sending the frame, and writes nothing more until it has been read,
        # so frames land between exactly the right chunks.
        self._drain_pipes()
        data = self.server_sock.recv(1 << 20)
        if not data:
            raise EOFError("the driver closed the control stream")
        self.buffer += data
        return self._take_frames()

    def pump(self, timeout: float) -> dict | None:
        """Reads until a frame arrives (the first one is returned) or the timeout passes."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            for key, _ in self.selector.select(remaining):
                if key.data != "ctrl":
                    self._read_pipe(key.data)
                elif frames := self._read_ctrl():
                    return frames[0]

    def next_frame(self, timeout: float = 30) -> dict:
        frame = self.pump(timeout)
        if frame is None:
            raise TimeoutError("no frame from the driver")
        self.pending.remove(frame)
        return frame

    # -- executions ------------------------------------------------------------------------

    def start(self, code: str, language: str = "python") -> str:
        self.pending.clear()
        exec_id = uuid.uuid4().hex
        self.send({"type": "execute", "id": exec_id, "code": code, "language": language})
        return exec_id

    def background_text(self, stream: str = "stdout", execution: str | None = None) -> str:
        """The background output of ``stream``; with ``execution``, only what the driver
        attributed to that execution."""
        return "".join(text for name, text, exec_id in self.background
                       if name == stream and (execution is None or exec_id == execution))

    def wait_for_background(self, text: str, timeout: float = 30, stream: str = "stdout") -> None:
        deadline = time.monotonic() + timeout
        while text not in self.background_text(stream):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{text!r} never appeared in the background output")
            self.pump(0.05)

    def wait_for_stdout(self, text: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while text not in "".join(e[1] for e in self.pending if isinstance(e, tuple)
                                  and e[0] == "stdout"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{text!r} never appeared on stdout")
            self.pump(0.05)

    def collect(self, exec_id: str, timeout: float = 60) -> Execution:
        deadline = time.monotonic() + timeout
        while True:
            frames = [e for e in self.pending if isinstance(e, dict)]
            if frames and frames[-1]["type"] == "done":
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (self.pump(remaining) is None and time.monotonic() >= deadline):
                raise TimeoutError(f"no done within {timeout}s; got {self.pending!r}")
        # Output that trails the done frame in a pipe belongs to it too (subprocess writes).
        self._drain_pipes()
        execution = Execution(events=list(self.pending))
        self.pending.clear()
        execution.done = execution.frames[-1]
        for frame in execution.frames:
            assert frame.get("id") == exec_id, frame
        return execution

    def run(self, code: str, language: str = "python", timeout: float = 60) -> Execution:
        return self.collect(self.start(code, language), timeout)

    def interrupt(self) -> None:
        self.proc.send_signal(signal.SIGINT)

    def close(self) -> int:
        self.server_sock.close()
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        finally:
            self.proc.stdout.close()
            self.proc.stderr.close()


_MPL_DIR: Path | None = None


def mpl_config_dir() -> Path:
    # One matplotlib cache for the whole run, so the font cache is built once.
    global _MPL_DIR
    if _MPL_DIR is None:
        import tempfile

        _MPL_DIR = Path(tempfile.mkdtemp(prefix="sandlot-test-mpl-"))
    return _MPL_DIR


def _start_driver(base: Path, script: str | None = None, **extra_env) -> DriverProcess:
    workdir, home = base / "workspace", base / "home"
    workdir.mkdir()
    home.mkdir()
    extra_env = {"SANDLOT_WORKSPACE": str(workdir), **extra_env}  # changes are reported there
    driver = DriverProcess(workdir, home, extra_env, script)
    driver.workdir, driver.home = workdir, home
    return driver


def _stop(driver: DriverProcess) -> None:
    if driver.proc.poll() is None:
        driver.close()


@pytest.fixture
def make_driver(tmp_path_factory):
    """Starts fresh drivers (each in its own workspace and home) and stops them afterwards."""
    drivers = []

    def start(script: str | None = None, **extra_env) -> DriverProcess:
        drivers.append(_start_driver(tmp_path_factory.mktemp("driver"), script, **extra_env))
        return drivers[-1]

    yield start
    for driver in drivers:
        _stop(driver)


@pytest.fixture
def python_process():
    """Runs a Python snippet in the driver's interpreter and environment, without a driver."""

    def run(script: str, home: Path) -> subprocess.CompletedProcess:
        return subprocess.run([DRIVER_PYTHON, "-c", script], env=driver_env(home),
                              capture_output=True, text=True, timeout=120)

    return run


@pytest.fixture
def driver(make_driver) -> DriverProcess:
    """A fresh driver, for tests that break or inspect state."""
    return make_driver()


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> DriverProcess:
    """One driver for a module's tests that leave it usable (starting one takes about a second)."""
    driver = _start_driver(tmp_path_factory.mktemp("shared"))
    yield driver
    _stop(driver)


# -- Under CI, a test that cannot run fails ------------------------------------------------------
# Kept the same in python/tests/conftest.py and sdk/python/tests/conftest.py (two suites on two
# interpreters, with no module both can import).


def _under_ci() -> bool:
    return bool(os.environ.get("CI"))


def pytest_configure(config: pytest.Config) -> None:
    if _under_ci() and not config.pluginmanager.hasplugin("timeout"):
        raise pytest.UsageError("under CI every test runs with a time limit: install pytest-timeout")


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A skip (``pytest.skip``, a skip marker, a fixture that skips) is a failure under CI: a
    layer that could not be tested must never pass as tested."""
    outcome = yield
    report = outcome.get_result()
    if _under_ci() and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped under CI, which fails instead: {_skip_reason(report)}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """The same for a whole module skipped at import (``pytest.importorskip``)."""
    outcome = yield
    report = outcome.get_result()
    if _under_ci() and report.skipped:
        report.outcome = "failed"
        report.longrepr = f"skipped under CI, which fails instead: {_skip_reason(report)}"
