"""Directories as tar streams, for ``files.upload_dir`` and ``files.download_dir``.

Uploading writes the tar on the fly (headers from :class:`tarfile.TarInfo`, file data read in
chunks), so a large directory is never held in memory. Downloading reads the server's tar as it
arrives and extracts it member by member, refusing (with :class:`~sandlot.errors.InvalidArchive`
naming the entry) anything that would land outside the destination: absolute names, ``..``,
paths through a symlink that leads out, symlinks or hard links pointing out, devices and FIFOs.
"""

from __future__ import annotations

import copy
import io
import os
import stat
import tarfile
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Iterable, Iterator, List, Optional

from . import errors
from ._core import CHUNK_SIZE, workspace_relative
from .models import FileEntry

_BLOCK = 512


@dataclass
class _Local:
    """One entry of a local directory to upload: its path on disk and its name in the tar."""

    path: str
    name: str
    is_dir: bool
    st: os.stat_result


class DirUpload:
    """A local directory about to be uploaded: what goes into the tar, and the tar itself.

    Directories (not symlinks to them) and regular files go in, symlinks to files as the files
    they point at; symlinks to directories, and FIFOs, sockets and devices, are left out."""

    def __init__(self, local_dir: Any, remote_dir: Any) -> None:
        base = os.fspath(local_dir)
        if not os.path.isdir(base):
            raise NotADirectoryError(base)
        self.remote = workspace_relative(os.fspath(remote_dir)).strip("/") if remote_dir else ""
        self.entries: List[_Local] = []
        for root, dirs, names in os.walk(base):
            dirs.sort()
            kept = []
            for d in dirs:
                path = os.path.join(root, d)
                if not os.path.islink(path):
                    kept.append(d)
                    self.entries.append(_Local(path, _rel(base, path), True, os.stat(path)))
            dirs[:] = kept
            for name in sorted(names):
                path = os.path.join(root, name)
                try:
                    st = os.stat(path)
                except OSError:
                    continue  # a dangling symlink
                if stat.S_ISREG(st.st_mode):
                    self.entries.append(_Local(path, _rel(base, path), False, st))

    def files(self) -> List[FileEntry]:
        """The files uploaded, as the workspace will list them, in the order of
        :func:`~sandlot.sandbox.iter_local_dir`."""
        out = []
        for e in self.entries:
            if e.is_dir:
                continue
            path = f"{self.remote}/{e.name}" if self.remote else e.name
            name = e.name.rsplit("/", 1)[-1]
            mode = stat.S_IMODE(e.st.st_mode)
            out.append(FileEntry(path=path, name=name, kind="file", size=e.st.st_size, modified=int(e.st.st_mtime), mode=mode))
        return out

    def chunks(self) -> Iterator[bytes]:
        """The tar, in chunks of at most about :data:`CHUNK_SIZE` bytes."""
        for e in self.entries:
            info = tarfile.TarInfo(e.name)
            info.mtime = int(e.st.st_mtime)
            info.mode = stat.S_IMODE(e.st.st_mode)
            if e.is_dir:
                info.type = tarfile.DIRTYPE
                yield info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
                continue
            try:
                f = open(e.path, "rb")
            except OSError:
                continue  # gone since the walk
            with f:
                # The size when it was opened; a file that changes meanwhile is cut or padded so
                # the tar stays well-formed.
                size = os.fstat(f.fileno()).st_size
                info.size = size
                yield info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
                left = size
                while left > 0:
                    chunk = f.read(min(CHUNK_SIZE, left))
                    if not chunk:
                        chunk = b"\0" * min(CHUNK_SIZE, left)
                    left -= len(chunk)
                    yield chunk
            if size % _BLOCK:
                yield b"\0" * (_BLOCK - size % _BLOCK)
        yield b"\0" * (2 * _BLOCK)

    def body(self) -> Callable[[], Iterator[bytes]]:
        """A body factory for the sync client (a fresh stream per attempt)."""
        return self.chunks

    def abody(self) -> Callable[[], AsyncIterator[bytes]]:
        """A body factory for the async client."""

        def factory() -> AsyncIterator[bytes]:
            it = self.chunks()

            async def agen() -> AsyncIterator[bytes]:
                for chunk in it:
                    yield chunk

            return agen()

        return factory


def _rel(base: str, path: str) -> str:
    return os.path.relpath(path, base).replace(os.sep, "/")


# -- extracting -----------------------------------------------------------------------------


class _ChunkReader(io.RawIOBase):
    """A readable file over an iterator of byte chunks (a streamed response body)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._it = iter(chunks)
        self._buf = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._buf:
            try:
                self._buf = next(self._it)
            except StopIteration:
                return 0
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


def _inside(root: str, path: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _refuse(member: tarfile.TarInfo, why: str) -> errors.InvalidArchive:
    return errors.InvalidArchive(f"invalid archive: entry {member.name!r}: {why}", code="invalid_archive")


def check_member(member: tarfile.TarInfo, root: str) -> None:
    """Raise :class:`~sandlot.errors.InvalidArchive` unless extracting ``member`` under the
    directory ``root`` (a real path) stays inside it, resolving the symlinks already on disk."""
    name = member.name
    if "\0" in name or name.startswith("/") or os.path.isabs(name):
        raise _refuse(member, "absolute paths are not accepted")
    if ".." in name.split("/"):
        raise _refuse(member, "'..' is not accepted in a name")
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        kind = "FIFO" if member.isfifo() else "device" if member.isdev() else "this entry type's"
        raise _refuse(member, f"{kind} entries are not accepted")
    target = os.path.join(root, name)
    if not _inside(root, os.path.realpath(os.path.dirname(target))):
        raise _refuse(member, "a parent of it leads outside the destination")
    if not member.issym() and not _inside(root, os.path.realpath(target)):
        raise _refuse(member, "it leads outside the destination")
    if member.issym():
        link = member.linkname
        if os.path.isabs(link) or not _inside(root, os.path.realpath(os.path.join(os.path.dirname(target), link))):
            raise _refuse(member, f"symlink to {link!r} points outside the destination")
    if member.islnk():
        link = member.linkname
        if os.path.isabs(link) or ".." in link.split("/") or not _inside(root, os.path.realpath(os.path.join(root, link))):
            raise _refuse(member, f"hard link to {link!r} points outside the destination")


def _extract(tf: tarfile.TarFile, member: tarfile.TarInfo, dest: str) -> None:
    if hasattr(tarfile, "data_filter"):
        try:
            tf.extract(member, dest, filter="data")
        except tarfile.FilterError as e:  # our checks come first; this is the second line
            raise _refuse(member, str(e)) from e
        return
    # Pythons without extraction filters: the same sanitizing by hand (ours, not the archive's
    # owner; no setuid/setgid/sticky bits, no group or world write).
    member = copy.copy(member)
    member.uid, member.gid, member.uname, member.gname = os.getuid(), os.getgid(), "", ""
    if member.isreg() or member.islnk():
        member.mode = (member.mode & 0o755) | 0o600
    elif member.isdir():
        member.mode = (member.mode & 0o755) | 0o700
    tf.extract(member, dest)


def extract_stream(chunks: Iterable[bytes], dest: Any) -> str:
    """Extract a (possibly gzip-compressed) tar arriving as ``chunks`` into the directory
    ``dest`` (created if missing), checking each member first. Members extracted before a
    refused one stay (all inside ``dest``). Returns ``dest``."""
    return extract_file(_ChunkReader(chunks), dest)


def extract_file(fileobj: Any, dest: Any) -> str:
    """Like :func:`extract_stream`, from a readable binary file."""
    out = os.fspath(dest)
    os.makedirs(out, exist_ok=True)
    root = os.path.realpath(out)
    try:
        with tarfile.open(fileobj=fileobj, mode="r|*") as tf:
            for member in tf:
                check_member(member, root)
                _extract(tf, member, root)
    except tarfile.ReadError as e:
        raise errors.InvalidArchive(f"invalid archive: {e}", code="invalid_archive") from e
    return out


def remote_dir(path: Optional[Any]) -> str:
    """The ``path`` query value for a workspace directory (``""`` is the workspace)."""
    return workspace_relative(os.fspath(path)).strip("/") if path else ""
