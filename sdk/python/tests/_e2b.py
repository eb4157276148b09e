"""The E2B settings a user sets, for the test server: shared by the suites that drive E2B's
SDKs (and the README test)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

E2B_VARS = ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY", "E2B_DOMAIN")


def server_key() -> str:
    """The test server's E2B key: read from its data dir (found from its command line), or
    E2B_API_KEY when the tests run against an external server (SANDLOT_TEST_URL)."""
    given = os.environ.get("E2B_API_KEY")
    if os.environ.get("SANDLOT_TEST_URL"):
        if not given:
            pytest.skip("SANDLOT_TEST_URL is set: set E2B_API_KEY to that server's E2B key too")
        return given
    pid = os.environ["SANDLOT_TEST_SERVER_PID"]
    args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    data_dir = Path(args[args.index(b"--data-dir") + 1].decode())
    return (data_dir / "e2b-api-key").read_text().strip()


@pytest.fixture(scope="module")
def e2b_env(sandlot_url: str) -> Iterator[str]:
    """E2B_API_URL and E2B_SANDBOX_URL at the test server and its key, in this process's
    environment for the module; yields the key."""
    key = server_key()
    saved = {k: os.environ.get(k) for k in E2B_VARS}
    os.environ.update(E2B_API_URL=sandlot_url, E2B_SANDBOX_URL=sandlot_url, E2B_API_KEY=key)
    os.environ.pop("E2B_DOMAIN", None)
    try:
        yield key
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def sbx(e2b_env: str) -> Iterator[object]:
    """One E2B sandbox (E2B's base SDK) for a test module, killed after it."""
    import e2b

    sb = e2b.Sandbox.create(timeout=300)
    try:
        yield sb
    finally:
        sb.kill()
