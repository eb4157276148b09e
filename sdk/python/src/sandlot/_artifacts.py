"""Artifacts: workspace files an execution created or changed, whose bytes the server keeps
content-addressed after the sandbox is gone, and the protocols through which they are read
(implemented by the HTTP layer above, so this module needs nothing from it). Part of
:mod:`sandlot.models`, which re-exports every name.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Mapping, Optional, Protocol, Union, runtime_checkable

from .errors import FileTooLarge, InvalidArgument

PathLike = Union[str, "os.PathLike[str]"]


@runtime_checkable
class ArtifactReader(Protocol):
    """How an :class:`Artifact` of a :class:`~sandlot.Sandbox` gets its bytes: the sandbox's
    HTTP connection (``_http.SyncHTTP``), handed to the objects it parses. A protocol, so that
    this module needs nothing from the HTTP layer above it. ``path`` is
    ``/v1/artifacts/<sha256>``; artifacts outlive their sandbox, so an implementation must still
    work once the sandbox (and its connection) is closed."""

    def read_artifact(self, path: str) -> bytes: ...

    def download_artifact(self, path: str, local: str) -> str: ...


@runtime_checkable
class AsyncArtifactReader(Protocol):
    """:class:`ArtifactReader` for an :class:`~sandlot.AsyncSandbox` (``_http.AsyncHTTP``)."""

    async def aread_artifact(self, path: str) -> bytes: ...

    async def adownload_artifact(self, path: str, local: str) -> str: ...


# What parsed objects hand to their artifacts; None for objects parsed without a connection.
ArtifactClient = Union[ArtifactReader, AsyncArtifactReader, None]


def artifact_path(sha256: str) -> str:
    """``/v1/artifacts/<sha256>``; the hash must be 64 hex digits."""
    sha = sha256.strip().lower()
    if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        raise InvalidArgument(f"not a SHA-256 hex digest: {sha256!r}", code="invalid_argument")
    return "/v1/artifacts/" + sha


class Artifact:
    """A workspace file an execution created or changed (:attr:`Execution.artifacts`).

    The server keeps its bytes content-addressed, so they stay downloadable after the sandbox
    is gone (until the server's retention passes): :meth:`read` / :meth:`download` for an
    execution of a :class:`~sandlot.Sandbox`, ``await`` :meth:`aread` / :meth:`adownload` for
    one of an :class:`~sandlot.AsyncSandbox`. Files larger than the server keeps are listed
    with an empty ``sha256`` and ``url`` (:attr:`available` is False) and cannot be read.
    """

    def __init__(
        self,
        path: str,
        size: int,
        sha256: str,
        mime_type: str,
        change: str,
        url: str,
        *,
        raw: Optional[Dict[str, Any]] = None,
        client: ArtifactClient = None,
    ) -> None:
        self.path = path
        self.size = size
        self.sha256 = sha256
        self.mime_type = mime_type
        self.change = change
        self.url = url
        self.raw: Dict[str, Any] = raw if raw is not None else {}
        self._client = client

    @classmethod
    def from_json(cls, d: Mapping[str, Any], client: ArtifactClient = None) -> "Artifact":
        return cls(
            path=str(d.get("path", "")),
            size=int(d.get("size") or 0),
            sha256=str(d.get("sha256") or ""),
            mime_type=str(d.get("mime_type") or "application/octet-stream"),
            change=str(d.get("change") or ""),
            url=str(d.get("url") or ""),
            raw=dict(d),
            client=client,
        )

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def available(self) -> bool:
        """Whether the server kept the bytes (False for files larger than it keeps)."""
        return bool(self.sha256)

    def _request_path(self) -> str:
        if not self.available:
            raise FileTooLarge(
                f"artifact {self.path!r} ({self.size} bytes) was too large for the server to keep; "
                "read it from the sandbox's files while the sandbox runs",
                code="artifact_not_kept",
            )
        return artifact_path(self.sha256)

    def _sync_reader(self) -> ArtifactReader:
        if isinstance(self._client, ArtifactReader):
            return self._client
        if self._client is None:
            raise RuntimeError("this artifact is not bound to a server connection (parse it with a sandbox's client)")
        raise RuntimeError("this artifact came from an AsyncSandbox: use `await artifact.aread()` / `adownload()`")

    def _async_reader(self) -> AsyncArtifactReader:
        if isinstance(self._client, AsyncArtifactReader):
            return self._client
        if self._client is None:
            raise RuntimeError("this artifact is not bound to a server connection (parse it with a sandbox's client)")
        raise RuntimeError("this artifact came from a Sandbox: use `artifact.read()` / `download()`")

    def read(self) -> bytes:
        """The artifact's bytes, from ``GET /v1/artifacts/{sha256}``."""
        path = self._request_path()
        return self._sync_reader().read_artifact(path)

    def read_text(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return self.read().decode(encoding, errors)

    def download(self, local_path: PathLike) -> str:
        """Stream the artifact to ``local_path`` (through ``<local_path>.part``, renamed at the
        end). Returns ``local_path``."""
        path = self._request_path()
        local = os.fspath(local_path)
        return self._sync_reader().download_artifact(path, local)

    async def aread(self) -> bytes:
        """:meth:`read` for an artifact of an :class:`~sandlot.AsyncSandbox`."""
        path = self._request_path()
        return await self._async_reader().aread_artifact(path)

    async def adownload(self, local_path: PathLike) -> str:
        """:meth:`download` for an artifact of an :class:`~sandlot.AsyncSandbox`."""
        path = self._request_path()
        local = os.fspath(local_path)
        return await self._async_reader().adownload_artifact(path, local)

    def to_json(self) -> Dict[str, Any]:
        return dict(self.raw) if self.raw else {
            "path": self.path,
            "size": self.size,
            "sha256": self.sha256,
            "mime_type": self.mime_type,
            "change": self.change,
            "url": self.url,
        }

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Artifact):
            return NotImplemented
        return (self.path, self.size, self.sha256, self.mime_type, self.change, self.url) == (
            other.path,
            other.size,
            other.sha256,
            other.mime_type,
            other.change,
            other.url,
        )

    def __hash__(self) -> int:
        return hash((self.path, self.sha256))

    def __repr__(self) -> str:
        return f"Artifact(path={self.path!r}, size={self.size}, change={self.change!r}, mime_type={self.mime_type!r})"
