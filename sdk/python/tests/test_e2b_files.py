"""E2B's files surface with the unmodified E2B Python SDK against a real `sandlot serve`:
gzip on upload and download, `get_info`'s fields and symlink targets, file metadata
(`user.e2b.*` extended attributes), removing what is not there, signed download/upload URLs,
and directory watches (polling and streamed, recursive, with entry info)."""

from __future__ import annotations

import asyncio
import io
import json
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from ._e2b import e2b_env, sbx  # noqa: F401  (fixtures)

e2b = pytest.importorskip("e2b")

pytestmark = pytest.mark.live


def test_gzip_uploads_and_downloads(sbx):
    info = sbx.files.write("gz/one.txt", "compressed on the way in", gzip=True)
    assert info.path == "/home/user/gz/one.txt"
    # Read back compressed and plain: both give the text.
    assert sbx.files.read("gz/one.txt", gzip=True) == "compressed on the way in"
    assert sbx.files.read("gz/one.txt") == "compressed on the way in"
    got = sbx.files.read("gz/one.txt", format="bytes", gzip=True)
    assert bytes(got) == b"compressed on the way in"
    # Several files, and a large streamed one.
    entries = [{"path": f"gz/m{i}.txt", "data": f"file {i}"} for i in range(3)]
    assert len(sbx.files.write_files(entries, gzip=True)) == 3
    for i in range(3):
        assert sbx.files.read(f"gz/m{i}.txt") == f"file {i}"
    big = "streamed and gzipped " * 20_000
    sbx.files.write("gz/big.txt", io.BytesIO(big.encode()), use_octet_stream=True, gzip=True)
    assert sbx.files.read("gz/big.txt") == big


def test_get_info_fields(sbx):
    sbx.files.write("info/f.txt", "four")
    f = sbx.files.get_info("info/f.txt")
    assert (f.name, f.type, f.path) == ("f.txt", e2b.FileType.FILE, "/home/user/info/f.txt")
    assert (f.size, f.mode, f.permissions) == (4, 0o644, "-rw-r--r--")
    assert (f.owner, f.group) == ("user", "user")
    assert f.modified_time.tzinfo is not None
    assert f.symlink_target is None
    d = sbx.files.get_info("info")
    assert (d.type, d.mode, d.permissions) == (e2b.FileType.DIR, 0o755, "drwxr-xr-x")
    assert d.size > 0
    for missing in ("info/nope.txt", "no_such_dir"):
        with pytest.raises(e2b.FileNotFoundException):
            sbx.files.get_info(missing)


def test_symlink_reports_its_target(sbx):
    sbx.files.write("link/target.txt", "hi")
    sbx.commands.run("ln -sfn target.txt alias.txt", cwd="/home/user/link")
    info = sbx.files.get_info("link/alias.txt")
    assert info.type == e2b.FileType.FILE
    assert info.symlink_target == "/home/user/link/target.txt"
    # A link out of the workspace is shown as a link, not followed.
    sbx.commands.run("ln -sfn /etc/passwd out", cwd="/home/user/link")
    out = sbx.files.get_info("link/out")
    assert out.type == e2b.FileType.SYMLINK
    assert out.symlink_target == "/etc/passwd"


def test_metadata_written_listed_renamed_and_cleared(sbx):
    meta = {"author": "ada", "purpose": "upload"}
    info = sbx.files.write("meta/a.txt", "x", metadata=meta)
    assert info.metadata == meta
    assert sbx.files.get_info("meta/a.txt").metadata == meta
    # Octet-stream uploads and several files at once carry it too.
    info = sbx.files.write("meta/b.txt", "x", metadata=meta, use_octet_stream=True)
    assert sbx.files.get_info("meta/b.txt").metadata == meta
    infos = sbx.files.write_files(
        [{"path": "meta/c.txt", "data": "1"}, {"path": "meta/d.txt", "data": "2"}],
        metadata={"source": "suite"},
    )
    assert [i.metadata for i in infos] == [{"source": "suite"}] * 2
    listed = {e.name: e.metadata for e in sbx.files.list("meta")}
    assert listed["a.txt"] == meta and listed["d.txt"] == {"source": "suite"}
    # Kept across a rename; an overwrite without metadata clears it.
    assert sbx.files.rename("meta/a.txt", "meta/a2.txt").metadata == meta
    assert sbx.files.write("meta/a2.txt", "y").metadata is None
    assert sbx.files.get_info("meta/a2.txt").metadata is None
    assert sbx.files.write("meta/plain.txt", "p").metadata is None
    assert sbx.files.get_info("meta/plain.txt").metadata is None


def test_metadata_set_inside_the_sandbox_is_shown(sbx):
    sbx.files.write("meta/x.txt", "x")
    r = sbx.commands.run(
        "python3 -c \"import os; os.setxattr('meta/x.txt', 'user.e2b.origin', b'inside'); "
        "os.setxattr('meta/x.txt', 'user.other', b'hidden')\"",
        cwd="/home/user",
    )
    assert r.exit_code == 0
    assert sbx.files.get_info("meta/x.txt").metadata == {"origin": "inside"}


def test_bad_metadata_is_refused_and_writes_nothing(sbx, e2b_env):
    import httpx

    for bad in ({"bad key": "v"}, {"": "v"}, {"k": "a\nb"}):
        with pytest.raises(e2b.InvalidArgumentException):
            sbx.files.write("meta/bad.txt", "x", metadata=bad)
    # What the SDK would not send, the server refuses itself: too many, too long.
    url = f"{sbx.envd_api_url}/files"
    headers = {
        "E2b-Sandbox-Id": sbx.sandbox_id,
        "E2b-Sandbox-Port": "49983",
        "X-Access-Token": sbx._envd_access_token,
        "Content-Type": "application/octet-stream",
    }
    too_many = {f"X-Metadata-k{i}": "v" for i in range(40)}
    too_long = {"X-Metadata-k": "v" * 5000}
    for extra in (too_many, too_long):
        r = httpx.post(url, params={"path": "meta/bad.txt"}, headers={**headers, **extra}, content=b"x")
        assert r.status_code == 400, r.text
    assert not sbx.files.exists("meta/bad.txt")


def test_removing_a_missing_file_succeeds(sbx):
    sbx.files.remove("never_there.txt")
    assert not sbx.files.exists("never_there.txt")


def test_signed_urls(e2b_env):
    sb = e2b.Sandbox.create(timeout=120, secure=True)
    other = e2b.Sandbox.create(timeout=120, secure=True)
    try:
        sb.files.write("signed.txt", "signed content")
        with urllib.request.urlopen(sb.download_url("signed.txt", "user")) as resp:
            assert resp.read() == b"signed content"
        with urllib.request.urlopen(sb.download_url("signed.txt", "user", 120)) as resp:
            assert resp.read() == b"signed content"

        def refused(url: str, method: str = "GET", data: bytes | None = None) -> dict:
            req = urllib.request.Request(url, method=method, data=data)
            if data is not None:
                req.add_header("Content-Type", "application/octet-stream")
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(req)
            assert err.value.code == 401
            return json.loads(err.value.read().decode())

        expired = sb.download_url("signed.txt", "user", use_signature_expiration=-120)
        assert refused(expired) == {"code": 401, "message": "signature is already expired"}
        good = sb.download_url("signed.txt", "user")
        # Altered path, operation, user or signature: refused alike.
        for bad in (
            good.replace("signed.txt", "other.txt"),
            good.replace("username=user", "username=root"),
            good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB"),
        ):
            assert refused(bad) == {"code": 401, "message": "invalid signature"}
        # The other sandbox's signature does not open this one's file through its header.
        import httpx

        r = httpx.get(
            f"{sb.envd_api_url}/files",
            params=dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(other.download_url("signed.txt", "user")).query)),
            headers={"E2b-Sandbox-Id": sb.sandbox_id, "E2b-Sandbox-Port": "49983"},
        )
        assert r.status_code == 401
        # An upload URL writes; a download URL does not upload.
        up = sb.upload_url("up.txt", "user")
        req = urllib.request.Request(up, method="POST", data=b"uploaded")
        req.add_header("Content-Type", "application/octet-stream")
        with urllib.request.urlopen(req) as resp:
            assert resp.status == 200
        assert sb.files.read("up.txt") == "uploaded"
        down_as_up = sb.download_url("up2.txt", "user")
        assert refused(down_as_up, "POST", b"nope")["message"] == "invalid signature"
        assert not sb.files.exists("up2.txt")
    finally:
        sb.kill()
        other.kill()


def _events(handle, want, timeout=5.0):
    """Polls until `want(events)` holds (writes from commands arrive asynchronously)."""
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen += handle.get_new_events()
        if want(seen):
            return seen
        time.sleep(0.02)
    return seen


def test_watch_dir_polling(sbx):
    sbx.files.make_dir("w")
    h = sbx.files.watch_dir("w", include_entry=True)
    sbx.files.write("w/a.txt", "one")
    evs = h.get_new_events()
    assert [e.type for e in evs] == [
        e2b.FilesystemEventType.CREATE,
        e2b.FilesystemEventType.WRITE,
        e2b.FilesystemEventType.CHMOD,
    ]
    assert all(e.name == "a.txt" for e in evs)
    assert evs[0].entry.path == "/home/user/w/a.txt" and evs[0].entry.type == e2b.FileType.FILE
    # A command's write, rename and remove inside the sandbox.
    sbx.commands.run("echo more >> a.txt && mv a.txt b.txt && rm b.txt", cwd="/home/user/w")
    evs = _events(h, lambda s: any(e.type == e2b.FilesystemEventType.REMOVE for e in s))
    kinds = [(e.type, e.name) for e in evs]
    assert (e2b.FilesystemEventType.WRITE, "a.txt") in kinds
    assert (e2b.FilesystemEventType.RENAME, "a.txt") in kinds
    assert (e2b.FilesystemEventType.REMOVE, "b.txt") in kinds
    h.stop()


def test_watch_dir_recursive_and_new_folders(sbx):
    sbx.files.make_dir("r/nested")
    h = sbx.files.watch_dir("r", recursive=True)
    sbx.files.write("r/nested/f.txt", "x")
    evs = h.get_new_events()
    assert len(evs) == 3 and evs[0].type == e2b.FilesystemEventType.CREATE
    assert evs[0].name == "nested/f.txt"
    # A folder made after the watch started is watched too.
    sbx.files.make_dir("r/later")
    sbx.files.write("r/later/g.txt", "y")
    names = {(e.type, e.name) for e in h.get_new_events()}
    assert (e2b.FilesystemEventType.CREATE, "later") in names
    assert (e2b.FilesystemEventType.WRITE, "later/g.txt") in names
    h.stop()
    # Not recursive: nothing from below.
    h = sbx.files.watch_dir("r")
    sbx.files.write("r/nested/h.txt", "z")
    assert h.get_new_events() == []
    h.stop()


def test_watch_dir_refusals(sbx):
    with pytest.raises(e2b.FileNotFoundException):
        sbx.files.watch_dir("no_such_watch_dir")
    sbx.files.write("plain.txt", "x")
    with pytest.raises(e2b.SandboxException):
        sbx.files.watch_dir("plain.txt")
    for outside in ("/etc", "/tmp", "/home/user/../../etc"):
        with pytest.raises(e2b.SandboxException):
            sbx.files.watch_dir(outside)
    sbx.commands.run("ln -sfn /etc etc_watch_link", cwd="/home/user")
    with pytest.raises(e2b.SandboxException):
        sbx.files.watch_dir("etc_watch_link")


def test_watch_dir_secured_and_streamed(e2b_env):
    async def main() -> None:
        sb = await e2b.AsyncSandbox.create(timeout=120, secure=True)
        try:
            got: list = []
            seen = asyncio.Event()

            def on_event(ev):
                got.append(ev)
                if ev.type == e2b.FilesystemEventType.WRITE:
                    seen.set()

            h = await sb.files.watch_dir("/home/user/", on_event, recursive=True)
            await sb.files.write("streamed.txt", "x")
            await asyncio.wait_for(seen.wait(), 10)
            assert any(e.name == "streamed.txt" for e in got)
            await h.stop()
        finally:
            await sb.kill()

    asyncio.run(main())


def test_watches_end_when_the_sandbox_is_killed(e2b_env):
    sb = e2b.Sandbox.create(timeout=60)
    h = sb.files.watch_dir("/home/user")
    sb.kill()
    with pytest.raises(e2b.SandboxException):
        h.get_new_events()
