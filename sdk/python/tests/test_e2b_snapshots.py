"""E2B's snapshot API through the unmodified E2B SDKs (`e2b` and `e2b-code-interpreter` from the
registry) against a real `sandlot serve`: snapshots taken (named or not, by the instance and the
class method), listed (all, by sandbox, by name, paged), deleted once, and sandboxes started
from one (many, each with its own copy of the files). Also pause and connect, JavaScript and
Python state carried by a snapshot, a pause and a fork, bad names and filesystem-only
snapshots refused, and another tenant's snapshots out of reach everywhere."""

from __future__ import annotations

import os
import secrets
import shutil
from typing import Iterator

import httpx
import pytest

from ._e2b import e2b_env, sbx  # noqa: F401  (fixtures)

e2b = pytest.importorskip("e2b")
e2b_ci = pytest.importorskip("e2b_code_interpreter")

pytestmark = pytest.mark.live

needs_node = pytest.mark.skipif(shutil.which("node") is None,
                                reason="JavaScript cells need node on the host (scripts/test installs it)")


def _admin(url: str, method: str, path: str, **kw) -> httpx.Response:
    headers = {"Authorization": f"Bearer {os.environ['SANDLOT_API_KEY']}"}
    return httpx.request(method, f"{url}{path}", headers=headers, timeout=30, **kw)


@pytest.fixture(scope="module")
def other_key(sandlot_url: str, e2b_env: str) -> Iterator[str]:
    """A member key of a tenant of its own: E2B's SDKs send it as X-API-KEY."""
    name = "snap-" + secrets.token_hex(4)
    r = _admin(sandlot_url, "POST", "/v1/tenants", json={"name": name})
    assert r.status_code == 201, r.text
    r = _admin(sandlot_url, "POST", "/v1/keys", json={"tenant": name, "role": "member", "name": "e2b snapshots"})
    assert r.status_code == 201, r.text
    key = r.json()
    try:
        yield key["key"]
    finally:
        _admin(sandlot_url, "DELETE", f"/v1/keys/{key['id']}")


def _listed(snapshot_id: str, **filters) -> bool:
    return any(s.snapshot_id == snapshot_id for s in e2b.Sandbox.list_snapshots(**filters).next_items())


def test_sandboxes_start_from_a_snapshot_each_with_its_own_files(sbx):
    sbx.files.make_dir("/home/user/app")
    sbx.files.write("/home/user/app/config.json", '{"env": "test"}')
    sbx.files.write("/home/user/shared.txt", "before the snapshot")
    snapshot = sbx.create_snapshot()
    assert snapshot.snapshot_id.startswith("snap_") and snapshot.names == []
    # The source goes on, and what it changes later is not the snapshot's.
    sbx.files.write("/home/user/shared.txt", "after the snapshot")
    try:
        first = e2b.Sandbox.create(snapshot.snapshot_id)
        second = e2b.Sandbox.create(snapshot.snapshot_id)
        try:
            for sb in (first, second):
                assert sb.files.exists("/home/user/app")
                assert sb.files.read("/home/user/app/config.json") == '{"env": "test"}'
                assert sb.files.read("/home/user/shared.txt") == "before the snapshot"
            first.files.write("/home/user/shared.txt", "changed in the first")
            assert first.files.read("/home/user/shared.txt") == "changed in the first"
            assert second.files.read("/home/user/shared.txt") == "before the snapshot"
            # Their code runs in the user's home, as any E2B sandbox's does.
            assert first.commands.run("pwd").stdout.strip() == "/home/user"
        finally:
            first.kill()
            second.kill()
    finally:
        assert e2b.Sandbox.delete_snapshot(snapshot.snapshot_id) is True


def test_snapshots_are_named_listed_filtered_and_deleted_once(sbx):
    name = "snap-" + secrets.token_hex(4)
    named = sbx.create_snapshot(name=name)
    by_class = e2b.Sandbox.create_snapshot(sbx.sandbox_id)
    try:
        assert named.names == [name]
        assert by_class.snapshot_id != named.snapshot_id
        paginator = e2b.Sandbox.list_snapshots()
        assert paginator.has_next
        listed = paginator.next_items()
        assert {named.snapshot_id, by_class.snapshot_id} <= {s.snapshot_id for s in listed}
        assert _listed(named.snapshot_id, sandbox_id=sbx.sandbox_id)
        assert [s.snapshot_id for s in e2b.Sandbox.list_snapshots(name=name).next_items()] == [named.snapshot_id]
        assert e2b.Sandbox.list_snapshots(name=name + "-not-there").next_items() == []
        assert e2b.Sandbox.list_snapshots(sandbox_id="sb_not_there").next_items() == []
        # Pages: one at a time, newest first, until no next token.
        paginator = e2b.Sandbox.list_snapshots(sandbox_id=sbx.sandbox_id, limit=1)
        pages = [paginator.next_items()]
        while paginator.has_next:
            pages.append(paginator.next_items())
        assert all(len(p) == 1 for p in pages) and len(pages) >= 2
        assert pages[0][0].snapshot_id == by_class.snapshot_id
    finally:
        assert e2b.Sandbox.delete_snapshot(named.snapshot_id) is True
        assert e2b.Sandbox.delete_snapshot(by_class.snapshot_id) is True
    assert e2b.Sandbox.delete_snapshot(named.snapshot_id) is False
    assert not _listed(named.snapshot_id)
    # A template id that is no snapshot is not deleted either.
    assert e2b.Sandbox.delete_snapshot("base") is False
    with pytest.raises(e2b.SandboxException):
        e2b.Sandbox.create(named.snapshot_id)


def test_pause_then_connect_resumes_the_same_sandbox(e2b_env):
    sb = e2b.Sandbox.create(timeout=120)
    try:
        sb.files.write("/home/user/kept.txt", "kept")
        assert sb.pause() is True
        assert not sb.is_running()
        resumed = sb.connect()
        assert resumed.sandbox_id == sb.sandbox_id and resumed.is_running() and sb.is_running()
        assert resumed.files.read("/home/user/kept.txt") == "kept"
    finally:
        sb.kill()


@pytest.mark.parametrize("name", ["a/b", "a:b", "has space", "-leading", "é", "x" * 129])
def test_bad_names_are_refused_and_nothing_is_taken(sbx, name):
    before = len(e2b.Sandbox.list_snapshots(sandbox_id=sbx.sandbox_id).next_items())
    with pytest.raises(e2b.SandboxException, match="^400: invalid snapshot name"):
        sbx.create_snapshot(name=name)
    assert len(e2b.Sandbox.list_snapshots(sandbox_id=sbx.sandbox_id).next_items()) == before


def test_a_filesystem_only_snapshot_is_refused_with_its_reason(sbx):
    with pytest.raises(e2b.SandboxException, match="^400: filesystem-only snapshots are not supported"):
        sbx.create_snapshot(mode="filesystem")


def test_another_tenants_snapshots_are_out_of_reach(sbx, other_key):
    mine = sbx.create_snapshot(name="mine-" + secrets.token_hex(3))
    try:
        theirs = {"api_key": other_key}
        assert e2b.Sandbox.list_snapshots(**theirs).next_items() == []
        assert e2b.Sandbox.list_snapshots(sandbox_id=sbx.sandbox_id, **theirs).next_items() == []
        assert e2b.Sandbox.list_snapshots(name=mine.names[0], **theirs).next_items() == []
        assert e2b.Sandbox.delete_snapshot(mine.snapshot_id, **theirs) is False
        with pytest.raises(e2b.SandboxException) as missing:
            e2b.Sandbox.create(mine.snapshot_id, **theirs)
        assert "no snapshot" in str(missing.value)
        with pytest.raises(e2b.SandboxNotFoundException):
            e2b.Sandbox.create_snapshot(sbx.sandbox_id, **theirs)
        # Still there for its owner.
        assert _listed(mine.snapshot_id)
    finally:
        e2b.Sandbox.delete_snapshot(mine.snapshot_id)


@needs_node
def test_javascript_and_python_state_survive_a_snapshot_a_pause_and_a_fork(e2b_env):
    sb = e2b_ci.Sandbox.create(timeout=180)
    try:
        js = sb.create_code_context(language="js")
        for code in ("const greeting = 'hi'", "let count = 1",
                     "function twice(x) { return x * 2 }", "count += 1"):
            assert sb.run_code(code, context=js).error is None
        assert sb.run_code("x = 40").error is None
        probe = "[greeting, count, twice(count)]"
        expected = "[ 'hi', 2, 4 ]"

        snapshot = sb.create_snapshot()
        try:
            child = e2b_ci.Sandbox.create(snapshot.snapshot_id)
            try:
                execution = child.run_code(probe, context=js)
                assert execution.error is None, execution.error
                assert execution.text == expected
                assert execution.logs.stderr == []
                assert child.run_code("x + 2").text == "42"
            finally:
                child.kill()
        finally:
            e2b.Sandbox.delete_snapshot(snapshot.snapshot_id)

        assert sb.pause() is True
        sb.connect()
        assert sb.run_code(probe, context=js).text == expected

        forks = sb.fork()
        assert len(forks) == 1
        fork = forks[0]
        try:
            assert fork.run_code(probe, context=js).text == expected
        finally:
            fork.kill()
    finally:
        sb.kill()
