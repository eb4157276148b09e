"""Shared fixtures.

Offline tests (test_offline.py) need nothing but the package. Live tests (marked ``live``)
run against a real ``sandlot serve`` that the session-scoped ``sandlot_url`` fixture starts:

* binary: ``$SANDLOT_BIN`` (default ``<repo>/target/debug/sandlot``); when it does not exist,
  the live tests are skipped with that reason. Any other failure (the server does not start,
  misbehaves) fails them.
* ``sandlot serve --listen 127.0.0.1:0 --data-dir <tmp> --env-dir <$SANDLOT_TEST_ENV_DIR or
  <repo>/target/sandlot-envs>``; the address is read from the stdout line
  ``sandlot listening on http://ADDR``, waiting up to 10 minutes (the first start provisions
  the Python environment).
* ``$SANDLOT_TEST_URL`` instead points the live tests at a server that is already running
  (with its key in ``$SANDLOT_API_KEY``).
* The server's local admin key is exported as ``$SANDLOT_API_KEY`` for the session (what the
  SDK and the ``sandlot`` client commands send). ``local_key_home`` is a home directory with
  that key where ``sandlot serve`` keeps it by default (``~/.local/share/sandlot/api-key``),
  for tests of clients that find it there themselves, as on the server's own machine.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import pytest

REPO = Path(__file__).resolve().parents[3]
SDK = Path(__file__).resolve().parents[1]
STARTUP_TIMEOUT = 600.0
LISTEN_RE = re.compile(r"sandlot listening on (http://\S+)")


def _bin() -> Path:
    return Path(os.environ.get("SANDLOT_BIN") or REPO / "target" / "debug" / "sandlot")


def _die_with_parent() -> None:
    """In the server's child process: get SIGTERM if the test process dies (Linux), so a killed
    test run does not leave a server behind."""
    try:
        import ctypes
        import signal

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except Exception:  # noqa: BLE001 - best effort only
        pass


def _tail(path: Path, n: int = 60) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-n:])


@contextlib.contextmanager
def serve(extra_env: Optional[Dict[str, str]] = None) -> Iterator[Tuple[str, str, int]]:
    """Starts a ``sandlot serve`` of its own (see the module docs) and yields (url, its local
    admin key, its pid); stopped and its data removed on exit. ``extra_env``: server settings a
    test needs (``SANDLOT_EGRESS_HOSTS``, say). Changes nothing in this process's environment."""
    binary = _bin()
    if not binary.exists():
        pytest.skip(f"live tests need the sandlot binary: {binary} does not exist (build it with `cargo build`, or set SANDLOT_BIN)")
    env_dir = os.environ.get("SANDLOT_TEST_ENV_DIR") or str(REPO / "target" / "sandlot-envs")
    tmp = Path(tempfile.mkdtemp(prefix="sandlot-sdk-test-"))
    data_dir = tmp / "data"
    data_dir.mkdir()
    stdout_log = tmp / "stdout.log"
    stderr_log = tmp / "stderr.log"
    cmd = [str(binary), "serve", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir), "--env-dir", env_dir]
    env = dict(os.environ)
    env.pop("SANDLOT_API_KEY", None)  # the key is the one this server creates
    env.update(extra_env or {})
    errf = open(stderr_log, "wb")
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=errf,
        env=env,
        start_new_session=True,
        preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
    )
    assert proc.stdout is not None
    found: List[str] = []
    ready = threading.Event()

    def pump() -> None:
        # Keep reading stdout for the whole session so the server never blocks on a full pipe.
        assert proc.stdout is not None
        with open(stdout_log, "wb") as out:
            for raw in iter(proc.stdout.readline, b""):
                out.write(raw)
                out.flush()
                if not found:
                    m = LISTEN_RE.search(raw.decode("utf-8", "replace"))
                    if m:
                        found.append(m.group(1))
                        ready.set()
        ready.set()

    threading.Thread(target=pump, name="sandlot-stdout", daemon=True).start()
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not ready.wait(timeout=1.0):
        if time.monotonic() > deadline:
            break
    try:
        if not found:
            rc = proc.poll()
            why = f"exited with status {rc}" if rc is not None else f"printed no listening line within {STARTUP_TIMEOUT:.0f} s"
            pytest.fail(
                f"`{' '.join(cmd)}` {why}\n--- stdout ---\n{_tail(stdout_log)}\n--- stderr ---\n{_tail(stderr_log)}",
                pytrace=False,
            )
        # The local admin key the server created on its first start (what the SDK sends).
        yield found[0], (data_dir / "api-key").read_text().strip(), proc.pid
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
        errf.close()
        shutil.rmtree(data_dir, ignore_errors=True)
        sys.stderr.write(f"\nsandlot server logs: {tmp}\n")


@pytest.fixture(scope="session")
def sandlot_url() -> Iterator[str]:
    """Base URL of a running sandlot server (started for the session unless given)."""
    given = os.environ.get("SANDLOT_TEST_URL")
    if given:
        yield given.rstrip("/")
        return
    with serve() as (url, key, pid):
        os.environ["SANDLOT_URL"] = url
        os.environ["SANDLOT_API_KEY"] = key
        os.environ["SANDLOT_TEST_SERVER_PID"] = str(pid)
        try:
            yield url
        finally:
            if os.environ.get("SANDLOT_URL") == url:
                del os.environ["SANDLOT_URL"]
                os.environ.pop("SANDLOT_API_KEY", None)


@pytest.fixture(scope="session")
def local_key_home(sandlot_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    key = os.environ.get("SANDLOT_API_KEY", "")
    assert key, "the live tests need $SANDLOT_API_KEY (the server's key)"
    home = tmp_path_factory.mktemp("home")
    keydir = home / ".local" / "share" / "sandlot"
    keydir.mkdir(parents=True)
    (keydir / "api-key").write_text(key + "\n")
    (keydir / "api-key").chmod(0o600)
    return home


def local_client_env(home: Path, **extra: str) -> Dict[str, str]:
    """This process's environment for a client subprocess that must find the key by itself:
    no ``$SANDLOT_API_KEY`` or data dir settings, and ``home`` (see ``local_key_home``) as
    HOME."""
    env = {k: v for k, v in os.environ.items() if k not in ("SANDLOT_API_KEY", "SANDLOT_DATA_DIR", "XDG_DATA_HOME")}
    env["HOME"] = str(home)
    env.update(extra)
    return env


@pytest.fixture
def sandbox(sandlot_url: str):
    from sandlot import Sandbox

    with Sandbox(url=sandlot_url, metadata={"test": "sdk"}) as sb:
        yield sb


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
