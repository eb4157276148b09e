"""Live tests of named volumes against a real `sandlot serve` (see conftest.py): a volume filled
through its files API, mounted read-only by many sandboxes and read-write by one at a time,
refused when taken, kept until every sandbox that mounts it is gone. Like test_live.py, skipped
only when the sandlot binary does not exist."""

from __future__ import annotations

import uuid

import pytest

import sandlot
from sandlot import AsyncSandbox, AsyncVolumes, Sandbox, VolumeMount, Volumes

pytestmark = pytest.mark.live

# What a write to /workspace/data/x does inside a sandbox: "written" or the errno's name.
TRY_WRITE = """
import errno
try:
    with open('/workspace/data/x', 'w') as f:
        f.write('x')
    got = 'written'
except OSError as e:
    got = errno.errorcode[e.errno]
got
"""


def _ok(ex):
    assert ex.end_state == "ok", ex.raw
    return ex


def _name(prefix: str) -> str:
    # unique, so that a server given by $SANDLOT_TEST_URL may hold volumes of earlier runs
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def test_read_only_by_many_read_write_by_one(sandlot_url):
    name = _name("shared")
    volumes = Volumes(url=sandlot_url)
    opened = []
    try:
        vol = volumes.create(name, size_mb=64)
        assert (vol.name, vol.size_mb, vol.mounted_by) == (name, 64, [])
        assert vol.created_at and vol.name in [v.name for v in volumes.list()]
        entry = vol.files.write("in/data.csv", "a,b\n1,2\n")
        assert (entry.path, entry.size) == ("in/data.csv", 8)
        assert [e.path for e in vol.files.list(recursive=True) if e.is_file] == ["in/data.csv"]
        assert vol.files.read_text("in/data.csv") == "a,b\n1,2\n"

        # two readers at once: a dict with an absolute path, a VolumeMount with a relative one
        r1 = Sandbox(url=sandlot_url, volumes=[{"name": name, "path": "/workspace/data", "read_only": True}])
        opened.append(r1)
        r2 = Sandbox(url=sandlot_url, volumes=[VolumeMount(name, "data", read_only=True)])
        opened.append(r2)
        for sb in (r1, r2):
            assert sb.info().volumes == [VolumeMount(name, "data", read_only=True)]
            assert _ok(sb.run_code("open('/workspace/data/in/data.csv').read()")).text == "'a,b\\n1,2\\n'"
            assert _ok(sb.run_code(TRY_WRITE)).text == "'EROFS'"
        # a file written through the volume's files API shows in the mounts at once
        vol.files.write("late.txt", "late")
        assert _ok(r2.run_code("open('/workspace/data/late.txt').read()")).text == "'late'"

        # one writer; the readers see what it writes
        w = Sandbox(url=sandlot_url, volumes=[{"name": vol, "path": "data"}])
        opened.append(w)
        assert w.info().volumes == [VolumeMount(name, "data", read_only=False)]
        assert _ok(w.run_code(TRY_WRITE)).text == "'written'"
        _ok(w.run_code("open('/workspace/data/out.txt', 'w').write('from the writer')"))
        assert _ok(r1.run_code("open('/workspace/data/out.txt').read()")).text == "'from the writer'"
        assert vol.files.read_text("out.txt") == "from the writer"
        # the files API may write while the writer holds the volume; the writer may change it
        vol.files.write("from-api.txt", "api")
        appended = "p = '/workspace/data/from-api.txt'\nopen(p, 'a').write('+w')\nopen(p).read()"
        assert _ok(w.run_code(appended)).text == "'api+w'"

        # a second writer is refused, naming the holder; nothing of it is left behind
        with pytest.raises(sandlot.VolumeInUse) as err:
            Sandbox(url=sandlot_url, volumes=[{"name": name, "path": "data"}])
        assert err.value.status == 409 and w.id in err.value.message
        users = volumes.get(name).mounted_by
        assert sorted((u.sandbox_id, u.path, u.read_only) for u in users) == sorted(
            [(r1.id, "data", True), (r2.id, "data", True), (w.id, "data", False)]
        )
        # a mounted volume cannot be deleted
        with pytest.raises(sandlot.VolumeInUse):
            volumes.delete(name)

        # the writer gone, another may take it and finds its files
        w.kill()
        w2 = Sandbox(url=sandlot_url, volumes=[VolumeMount(name, "data")])
        opened.append(w2)
        assert _ok(w2.run_code("open('/workspace/data/out.txt').read()")).text == "'from the writer'"
        for sb in opened:
            sb.kill()
        # deleting sandboxes never deleted the volume
        assert volumes.get(name).mounted_by == []
        assert sorted(e.path for e in vol.files.list(recursive=True) if e.is_file) == ["from-api.txt", "in/data.csv", "late.txt", "out.txt", "x"]
        volumes.delete(name)
        with pytest.raises(sandlot.VolumeNotFound):
            volumes.get(name)
        assert name not in [v.name for v in volumes.list()]
    finally:
        for sb in opened:
            sb.kill()
        try:
            volumes.delete(name)
        except sandlot.VolumeNotFound:
            pass
        volumes.close()


def test_unknown_and_taken_names(sandlot_url):
    missing = _name("missing")
    with pytest.raises(sandlot.VolumeNotFound) as err:
        Sandbox(url=sandlot_url, volumes=[{"name": missing, "path": "data", "read_only": True}])
    assert err.value.status == 404 and isinstance(err.value, sandlot.NotFoundError)
    for call in (sandlot.get_volume, sandlot.delete_volume):
        with pytest.raises(sandlot.VolumeNotFound):
            call(missing, url=sandlot_url)
    with Volumes(url=sandlot_url) as volumes:
        with pytest.raises(sandlot.VolumeNotFound):
            volumes.files(missing).read("a.txt")
    # module helpers: the volume they return reaches its files on its own
    name = _name("helpers")
    vol = sandlot.create_volume(name, 16, url=sandlot_url)
    try:
        with pytest.raises(sandlot.VolumeInUse):
            sandlot.create_volume(name, url=sandlot_url)
        vol.files.write("a.txt", "A")
        assert sandlot.get_volume(name, url=sandlot_url).files.read("a.txt") == b"A"
        with pytest.raises(sandlot.FileNotFound):
            vol.files.read("b.txt")
        with pytest.raises(sandlot.InvalidPath):
            vol.files.write("../escape", "x")
        assert name in [v.name for v in sandlot.list_volumes(url=sandlot_url)]
    finally:
        sandlot.delete_volume(vol, url=sandlot_url)
    with pytest.raises(sandlot.InvalidArgument):
        sandlot.create_volume("Not A Name", url=sandlot_url)


async def test_async_volumes(sandlot_url):
    name = _name("async")
    async with AsyncVolumes(url=sandlot_url) as volumes:
        vol = await volumes.create(name)
        try:
            await vol.files.write("nums.txt", "1 2 3")
            mount = VolumeMount(name, "/workspace/nums", read_only=True)
            async with AsyncSandbox.create(url=sandlot_url, volumes=[mount]) as a, AsyncSandbox.create(
                url=sandlot_url, volumes=[mount]
            ) as b:
                for sb in (a, b):
                    assert (await sb.info()).volumes == [VolumeMount(name, "nums", read_only=True)]
                    assert _ok(await sb.run_code("sum(map(int, open('/workspace/nums/nums.txt').read().split()))")).text == "6"
                assert len((await volumes.get(name)).mounted_by) == 2
                with pytest.raises(sandlot.VolumeInUse):
                    await volumes.delete(vol)
            assert [e.path for e in await vol.files.list()] == ["nums.txt"]
        finally:
            await volumes.delete(vol)
        with pytest.raises(sandlot.VolumeNotFound):
            await volumes.get(name)
