"""Workspace changes: which regular files a cell created or modified, from a stat snapshot of
the workspace taken before and after each cell. The done frame lists them; the server keeps
them as artifacts, reading each file itself through fd-relative paths (see ARCHITECTURE.md)."""

from __future__ import annotations

import errno
import os
import time
import zlib

from .jsonsafe import clean_str

# The workspace the driver watches; tests without a jail point it elsewhere.
WORKSPACE = os.environ.get("SANDLOT_WORKSPACE") or "/workspace"
# Where `pip install` puts packages (PIP_TARGET): thousands of files that are not the cell's
# results, so the snapshot does not walk them.
PACKAGES = ".packages"
# Most directory entries a snapshot visits; past it a cell's changes are not reported.
MAX_SNAPSHOT_ENTRIES = 20_000
# Most changes one done frame lists.
MAX_CHANGES = 200
# A file modified this close to a snapshot may be modified again within the same timestamp
# tick without its stat changing ("racy" in git's terms); small ones are checksummed too.
RACY_NS = 50_000_000
RACY_MAX_BYTES = 4 << 20
RACY_TOTAL_BYTES = 16 << 20


def _checksum(path: str) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        crc = 0
        while chunk := os.read(fd, 1 << 20):
            crc = zlib.crc32(chunk, crc)
        return crc
    except OSError:
        return None
    finally:
        os.close(fd)


def snapshot(root: str = "", racy: bool = False) -> dict | None:
    """Regular files under the workspace, not following symlinks: relative path → (size,
    mtime_ns, inode, checksum or None). With `racy`, files modified within RACY_NS of now are
    checksummed while small enough. None when the workspace holds more than
    MAX_SNAPSHOT_ENTRIES entries or cannot be read."""
    root = root or WORKSPACE
    files: dict = {}
    seen = 0
    racy_budget = RACY_TOTAL_BYTES if racy else 0
    now = time.time_ns()
    pending = [(root, "")]
    try:
        while pending:
            path, rel = pending.pop()
            try:
                it = os.scandir(path)
            except OSError as exc:
                if not rel and exc.errno != errno.ENOENT:
                    # The workspace itself unreadable (no fd left: RLIMIT_NOFILE): an empty
                    # snapshot would report every file as created by the next cell.
                    return None
                continue  # unreadable or vanished directory: its files are not reported
            with it:
                for entry in it:
                    seen += 1
                    if seen > MAX_SNAPSHOT_ENTRIES:
                        return None
                    name = rel + entry.name
                    if name == PACKAGES:
                        continue
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            pending.append((entry.path, name + "/"))
                        elif entry.is_file(follow_symlinks=False):
                            st = entry.stat(follow_symlinks=False)
                            crc = None
                            if (st.st_size <= min(racy_budget, RACY_MAX_BYTES)
                                    and now - st.st_mtime_ns < RACY_NS):
                                racy_budget -= st.st_size
                                crc = _checksum(entry.path)
                            files[name] = (st.st_size, st.st_mtime_ns, st.st_ino, crc)
                    except OSError:
                        continue
    except OSError:
        return None
    return files


def safe_snapshot(racy: bool = False) -> dict | None:
    try:
        return snapshot(racy=racy)
    except Exception:  # a driver bug must not cost the cell its done frame
        return None


def changes_between(before: dict | None, after: dict | None) -> dict:
    """The fields the done frame gets: `changes`, and `changes_truncated` when incomplete."""
    if before is None or after is None:
        return {"changes": [], "changes_truncated": True}
    changes = []
    for name in sorted(after):
        size, mtime, ino, _crc = after[name]
        old = before.get(name)
        if old is None:
            kind = "created"
        elif old[:3] != (size, mtime, ino):
            kind = "modified"
        elif old[3] is not None and _checksum(os.path.join(WORKSPACE, name)) != old[3]:
            kind = "modified"
        else:
            continue
        if len(changes) >= MAX_CHANGES:
            return {"changes": changes, "changes_truncated": True}
        changes.append({"path": clean_str(name), "size": size, "change": kind})
    return {"changes": changes}
