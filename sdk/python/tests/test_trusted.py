"""Live tests of the trusted tier's read-only host paths (``Sandbox(tier="trusted",
mounts=[...])``) against a real ``sandlot serve`` (see conftest.py), sync and async: a path the
operator's policy grants is readable and read-only inside, listed on the sandbox; an isolated
sandbox or a path not granted raises PolicyDenied; a symlinked host path InvalidArgument.
Skipped only when the sandlot binary does not exist."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Iterator

import httpx
import pytest

import sandlot
from sandlot import AsyncSandbox, Sandbox

pytestmark = pytest.mark.live


def _admin(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {os.environ['SANDLOT_API_KEY']}"}, timeout=60)


@pytest.fixture(scope="module")
def granted(sandlot_url: str) -> Iterator[str]:
    """A host directory under a prefix the policy grants to the trusted tier (restored after)."""
    with tempfile.TemporaryDirectory(prefix="sandlot-sdk-trusted-") as tmp:
        os.chmod(tmp, 0o755)
        root = os.path.join(tmp, "granted")
        data = os.path.join(root, "data")
        os.makedirs(data)
        os.chmod(root, 0o755)
        os.chmod(data, 0o777)
        with open(os.path.join(data, "a.txt"), "w") as f:
            f.write("from the host")
        os.chmod(os.path.join(data, "a.txt"), 0o666)
        os.symlink(data, os.path.join(root, "link"))
        with _admin(sandlot_url) as op:
            original = op.get("/v1/policies").json()["policies"]

            def source(p: dict) -> str:
                text = p["text"]
                if text.lstrip().startswith("@"):
                    return text
                reason = f"@reason({json.dumps(p['reason'])})\n" if p.get("reason") else ""
                return f'@id("{p["id"]}")\n{reason}{text}'

            full = "\n\n".join(source(p) for p in original) + "\n"
            rule = (
                f'\n@id("sdk-grant-host-path")\n'
                f'permit (principal, action == Sandlot::Action::"mount_host_path", resource)\n'
                f'when {{ resource.path like "{root}/*" && context.tier == "trusted" }};\n'
            )
            r = op.put("/v1/policies", content=full + rule, headers={"content-type": "text/plain"})
            assert r.status_code == 200, r.text
            try:
                yield root
            finally:
                r = op.put("/v1/policies", content=full, headers={"content-type": "text/plain"})
                assert r.status_code == 200, r.text


PROBE = """
import errno
try:
    open('/mnt/data/new.txt', 'w')
    w = 'ok'
except OSError as e:
    w = errno.errorcode[e.errno]
(open('/mnt/data/a.txt').read(), w)
"""


def test_a_granted_host_path_is_mounted_read_only(granted: str, sandlot_url: str) -> None:
    mounts = [{"host": os.path.join(granted, "data"), "path": "/mnt/data"}]
    with Sandbox(url=sandlot_url, tier="trusted", mounts=mounts) as sb:
        assert sb.info().tier == "trusted"
        assert sb.info().mounts == mounts
        ex = sb.run_code(PROBE)
        assert ex.end_state == "ok", ex.raw
        assert ex.text == "('from the host', 'EROFS')"
    with pytest.raises(sandlot.PolicyDenied):
        Sandbox(url=sandlot_url, mounts=mounts)
    with pytest.raises(sandlot.PolicyDenied):
        Sandbox(url=sandlot_url, tier="trusted", mounts=[("/usr/share", "/mnt/data")])
    with pytest.raises(sandlot.InvalidArgument):
        Sandbox(url=sandlot_url, tier="trusted", mounts=[(os.path.join(granted, "link"), "/mnt/data")])
    with pytest.raises(sandlot.InvalidArgument):
        Sandbox(url=sandlot_url, tier="trusted", mounts=[(os.path.join(granted, "data"), "/workspace/data")])
    with pytest.raises(TypeError):
        Sandbox(url=sandlot_url, tier="trusted", mounts={"host": "/x", "path": "/mnt/x"})  # type: ignore[arg-type]


async def test_a_granted_host_path_is_mounted_read_only_async(granted: str, sandlot_url: str) -> None:
    mounts = [{"host": os.path.join(granted, "data"), "path": "/mnt/data"}]
    async with AsyncSandbox.create(url=sandlot_url, tier="trusted", mounts=mounts) as sb:
        assert (await sb.info()).mounts == mounts
        ex = await sb.run_code(PROBE)
        assert ex.text == "('from the host', 'EROFS')", ex.raw
    with pytest.raises(sandlot.PolicyDenied):
        await AsyncSandbox.create(url=sandlot_url, tier="isolated", mounts=mounts)
