"""``files.upload_dir`` and ``files.download_dir``: directories as streamed tars, sync and async.

Offline (the fake server): what the upload sends, the round trip, and the client-side refusals
of a hostile tar from the server, each naming the entry with nothing written outside the
destination. Live (marked ``live``): a tree round-trips through a real server, SHA-256 by
SHA-256, plain and gzip; a hostile archive is refused by the server."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from pathlib import Path
from typing import Dict, List, Tuple

import httpx
import pytest

import sandlot
from sandlot import AsyncSandbox, InvalidArchive, Sandbox

from ._fake import FakeSandlot
from ._openapi import OpenAPI, errors_of


@pytest.fixture(autouse=True)
def _no_env(request, monkeypatch):
    # The offline tests talk to a fake: no server address or key from the environment. The
    # live ones keep the key conftest.py exports for its server.
    if request.node.get_closest_marker("live") is None:
        monkeypatch.delenv("SANDLOT_URL", raising=False)
        monkeypatch.delenv("SANDLOT_API_KEY", raising=False)


def make_tree(root: Path) -> None:
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "empty_dir").mkdir()
    (root / "a.txt").write_text("A")
    (root / "sub" / "b.bin").write_bytes(os.urandom(200_000))
    (root / "sub" / "deeper" / "c.txt").write_text("c" * 5000)
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    os.symlink("a.txt", root / "alias.txt")  # a symlink to a file goes up as the file
    os.symlink("sub", root / "subdir_link")  # a symlink to a directory is left out


def digests(root: Path) -> Dict[str, str]:
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            p = Path(dirpath) / name
            if p.is_file() and not p.is_symlink():
                out[p.relative_to(root).as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def tar_of(members: List[Tuple[tarfile.TarInfo, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for info, data in members:
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data) if data else None)
    return buf.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.mode = 0o644
    return info


# ---------------------------------------------------------------------------------------------
# Offline
# ---------------------------------------------------------------------------------------------


def test_upload_dir_streams_one_tar(tmp_path):
    fake = FakeSandlot()
    tree = tmp_path / "tree"
    make_tree(tree)
    with Sandbox(url="http://sandlot.test", transport=httpx.MockTransport(fake)) as sb:
        got = sb.files.upload_dir(tree, "/workspace/proj")
        req = fake.requests[-1]
        assert req["method"] == "PUT" and req["path"].endswith(f"/sandboxes/{sb.id}/archive?path=proj")
        assert req["headers"]["content-type"] == "application/x-tar"
        with tarfile.open(fileobj=io.BytesIO(req["body"])) as tf:
            names = {m.name: m for m in tf.getmembers()}
        assert sorted(names) == ["a.txt", "alias.txt", "empty_dir", "run.sh", "sub", "sub/b.bin", "sub/deeper", "sub/deeper/c.txt"]
        assert names["run.sh"].mode == 0o755 and names["empty_dir"].isdir() and names["alias.txt"].isreg()
        assert [e.path for e in got] == ["proj/a.txt", "proj/alias.txt", "proj/run.sh", "proj/sub/b.bin", "proj/sub/deeper/c.txt"]
        assert got[3].size == 200_000 and got[2].mode == 0o755 and got[0].kind == "file"
        # and back, plain or gzip
        for gz in (False, True):
            out = tmp_path / f"out-{gz}"
            assert sb.files.download_dir("proj", out, gzip=gz) == str(out)
            assert ("gzip=true" in fake.requests[-1]["path"]) == gz
            want = digests(tree)
            want["alias.txt"] = want["a.txt"]
            assert digests(out) == want
        with pytest.raises(sandlot.FileNotFound):
            sb.files.download_dir("missing", tmp_path / "nope")
        with pytest.raises(NotADirectoryError):
            sb.files.upload_dir(tree / "a.txt", "x")


def test_the_fake_archive_answers_like_the_server(tmp_path):
    spec = OpenAPI()
    fake = FakeSandlot()
    client = httpx.Client(base_url="http://sandlot.test", transport=httpx.MockTransport(fake))
    sid = client.post("/v1/sandboxes", json={}).json()["id"]
    resp = client.put(f"/v1/sandboxes/{sid}/archive", params={"path": "d"}, content=tar_of([(member("x.txt"), b"x")]))
    assert spec.match("PUT", f"/v1/sandboxes/{sid}/archive") == "extractArchive"
    assert errors_of(spec.validator("extractArchive", str(resp.status_code)), resp.json()) == []
    resp = client.put(f"/v1/sandboxes/{sid}/archive", content=tar_of([(member("../x"), b"x")]))
    assert resp.status_code == 400
    assert errors_of(spec.validator("extractArchive", "400"), resp.json()) == []
    resp = client.get(f"/v1/sandboxes/{sid}/archive", params={"path": "d"})
    assert spec.match("GET", f"/v1/sandboxes/{sid}/archive") == "readArchive"
    assert resp.headers["content-type"] in spec.content_types("readArchive", "200")


HOSTILE = [
    ("../x", [(member("../x"), b"pwned")], "'..'"),
    ("/tmp/sandlot-sdk-pwned", [(member("/tmp/sandlot-sdk-pwned"), b"pwned")], "absolute"),
    ("escape", [(member("escape", tarfile.SYMTYPE, "/"), b""), (member("escape/tmp/x"), b"pwned")], "points outside"),
    ("up", [(member("up", tarfile.SYMTYPE, ".."), b""), (member("up/x"), b"pwned")], "points outside"),
    ("passwd", [(member("passwd", tarfile.LNKTYPE, "/etc/passwd"), b"")], "points outside"),
    ("null", [(member("null", tarfile.CHRTYPE), b"")], "device"),
    ("fifo", [(member("fifo", tarfile.FIFOTYPE), b"")], "FIFO"),
]


@pytest.mark.parametrize("name,members,why", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_download_dir_refuses_what_would_land_outside(tmp_path, name, members, why):
    fake = FakeSandlot()
    hostile = tar_of([(member("ok.txt"), b"ok")] + members)
    fake.hook = lambda req: httpx.Response(200, content=hostile) if req.url.path.endswith("/archive") else None
    dest = tmp_path / "dest"
    before = sorted(os.listdir(tmp_path))
    with Sandbox(url="http://sandlot.test", transport=httpx.MockTransport(fake)) as sb:
        with pytest.raises(InvalidArchive) as e:
            sb.files.download_dir("", dest)
    assert f"entry {name!r}" in str(e.value) and why in str(e.value), str(e.value)
    assert isinstance(e.value, sandlot.InvalidRequest) and e.value.code == "invalid_archive"
    assert sorted(os.listdir(tmp_path)) == before + ["dest"]  # nothing beside the destination
    assert os.listdir(dest) == ["ok.txt"]
    assert not os.path.exists("/tmp/sandlot-sdk-pwned")


def test_download_dir_refuses_a_path_through_an_existing_symlink(tmp_path):
    fake = FakeSandlot()
    hostile = tar_of([(member("out/x"), b"pwned")])
    fake.hook = lambda req: httpx.Response(200, content=hostile) if req.url.path.endswith("/archive") else None
    dest = tmp_path / "dest"
    dest.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, dest / "out")
    with Sandbox(url="http://sandlot.test", transport=httpx.MockTransport(fake)) as sb:
        with pytest.raises(InvalidArchive, match="'out/x'"):
            sb.files.download_dir("", dest)
    assert os.listdir(outside) == []


def test_download_dir_refuses_what_is_not_a_tar(tmp_path):
    fake = FakeSandlot()
    fake.hook = lambda req: httpx.Response(200, content=b"not a tar" * 100) if req.url.path.endswith("/archive") else None
    with Sandbox(url="http://sandlot.test", transport=httpx.MockTransport(fake)) as sb:
        with pytest.raises(InvalidArchive):
            sb.files.download_dir("", tmp_path / "dest")


async def test_async_upload_and_download_dir(tmp_path):
    fake = FakeSandlot()
    tree = tmp_path / "tree"
    make_tree(tree)
    async with AsyncSandbox.create(url="http://sandlot.test", transport=httpx.MockTransport(fake)) as sb:
        got = await sb.files.upload_dir(tree, "proj")
        assert [e.path for e in got][:2] == ["proj/a.txt", "proj/alias.txt"]
        out = tmp_path / "out"
        assert await sb.files.download_dir("proj", out, gzip=True) == str(out)
        want = digests(tree)
        want["alias.txt"] = want["a.txt"]
        assert digests(out) == want
        hostile = tar_of([(member("../x"), b"pwned")])
        fake.hook = lambda req: httpx.Response(200, content=hostile) if req.url.path.endswith("/archive") else None
        with pytest.raises(InvalidArchive, match="'../x'"):
            await sb.files.download_dir("proj", tmp_path / "dest")
    assert not (tmp_path / "x").exists()


# ---------------------------------------------------------------------------------------------
# Live
# ---------------------------------------------------------------------------------------------


@pytest.mark.live
def test_live_directory_round_trip(sandbox, tmp_path):
    tree = tmp_path / "tree"
    make_tree(tree)
    files = sandbox.files
    got = files.upload_dir(tree, "proj")
    assert len(got) == 5
    b_sha = hashlib.sha256((tree / "sub" / "b.bin").read_bytes()).hexdigest()
    r = sandbox.run_code(
        "import os, hashlib\n"
        "st = os.stat('/workspace/proj/run.sh')\n"
        "(oct(st.st_mode & 0o777), st.st_uid == os.getuid(), os.path.isdir('/workspace/proj/empty_dir'),\n"
        f" hashlib.sha256(open('/workspace/proj/sub/b.bin', 'rb').read()).hexdigest() == '{b_sha}')"
    )
    assert r.text == "('0o755', True, True, True)"
    want = digests(tree)
    want["alias.txt"] = want["a.txt"]
    for gz in (False, True):
        out = tmp_path / f"out-{gz}"
        files.download_dir("/workspace/proj", out, gzip=gz)
        assert digests(out) == want
        assert (out / "run.sh").stat().st_mode & 0o777 == 0o755


@pytest.mark.live
def test_live_hostile_archive_is_refused(sandbox):
    hostile = tar_of([(member("ok.txt"), b"ok"), (member("escape", tarfile.SYMTYPE, "/"), b""), (member("escape/x"), b"x")])
    http = sandbox._http.client
    resp = http.put(f"/v1/sandboxes/{sandbox.id}/archive", params={"path": "t"}, content=hostile)
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["code"] == "invalid_archive" and 'entry "escape"' in err["message"]
    assert not sandbox.files.exists("t")


@pytest.mark.live
async def test_live_async_round_trip(sandlot_url, tmp_path):
    tree = tmp_path / "tree"
    make_tree(tree)
    async with AsyncSandbox.create(url=sandlot_url) as sb:
        await sb.files.upload_dir(tree, "p")
        out = tmp_path / "out"
        await sb.files.download_dir("p", out)
    want = digests(tree)
    want["alias.txt"] = want["a.txt"]
    assert digests(out) == want
