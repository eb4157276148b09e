"""Named volumes: files that live apart from any sandbox, with a size cap, mounted into
sandboxes under ``/workspace`` when they are created. Any number of sandboxes may mount a
volume read-only at once; read-write, one at a time. Deleting a sandbox never deletes a volume.

::

    from sandlot import Sandbox, VolumeMount, Volumes, delete_volume

    with Volumes() as volumes:
        vol = volumes.create("dataset", size_mb=256)
        vol.files.write("train.csv", open("train.csv", "rb"))     # the volume's files API
    readers = [Sandbox(volumes=[{"name": "dataset", "path": "data", "read_only": True}]) for _ in range(3)]
    readers[0].run_code("open('/workspace/data/train.csv').readline()")
    writer = Sandbox(volumes=[VolumeMount("dataset", "data")])  # read-write: VolumeInUse if taken
    ...
    delete_volume("dataset")    # VolumeInUse while any sandbox mounts it

A volume's ``files`` go through the connection of the client that returned it while that client
is open, else through a connection opened for each call, so a volume from
:func:`create_volume` or :func:`get_volume` works on its own.
"""

from __future__ import annotations

from typing import Any, AsyncContextManager, ContextManager, List, Optional

import httpx

from ._core import ConnectionConfig, VolumeArg, decode_json, volume_body, volume_name, volume_path
from ._http import AsyncHTTP, SyncHTTP
from .async_sandbox import AsyncBaseFiles
from .models import Volume
from .sandbox import BaseFiles

__all__ = [
    "Volumes",
    "AsyncVolumes",
    "VolumeFiles",
    "AsyncVolumeFiles",
    "create_volume",
    "list_volumes",
    "get_volume",
    "delete_volume",
]


class VolumeFiles(BaseFiles):
    """A volume's files (``volume.files``): ``write``, ``write_many``, ``upload``, ``read``,
    ``read_text``, ``download``, ``list``, ``exists``, ``remove``, as on a sandbox's
    :class:`~sandlot.Files`, with paths relative to the volume's root. Writing while a sandbox
    holds the volume read-write is allowed (the file then belongs to that sandbox); what
    read-only mounts see changes at once."""

    def __init__(self, http: SyncHTTP, name: str) -> None:
        self._http = http
        self.name = name

    def _root(self) -> str:
        return volume_path(self.name, "files")

    def _open(self) -> ContextManager[SyncHTTP]:
        return self._http.open()

    def __repr__(self) -> str:
        return f"VolumeFiles(name={self.name!r})"


class AsyncVolumeFiles(AsyncBaseFiles):
    """:class:`VolumeFiles` as coroutines (the ``files`` of a volume from
    :class:`AsyncVolumes`)."""

    def __init__(self, http: AsyncHTTP, name: str) -> None:
        self._http = http
        self.name = name

    def _root(self) -> str:
        return volume_path(self.name, "files")

    def _open(self) -> AsyncContextManager[AsyncHTTP]:
        return self._http.open()

    def __repr__(self) -> str:
        return f"AsyncVolumeFiles(name={self.name!r})"


def _volumes_of(doc: Any) -> List[Any]:
    items = doc.get("volumes") if isinstance(doc, dict) else None
    return [d for d in (items if isinstance(items, list) else []) if isinstance(d, dict)]


class Volumes:
    """The server's named volumes (``/v1/volumes``)::

        with Volumes(url=..., api_key=...) as volumes:   # $SANDLOT_URL / $SANDLOT_API_KEY
            vol = volumes.create("dataset", size_mb=256)  # VolumeInUse if the name is taken
            vol.files.write("a.csv", "a,b\\n1,2\\n")
            volumes.list()                                # [Volume, ...]
            volumes.get("dataset").mounted_by             # [VolumeUse(sandbox_id, path, read_only)]
            volumes.delete(vol)                           # VolumeInUse while a sandbox mounts it

    Names are 1 to 48 characters of ``a-z``, ``0-9``, ``_`` and ``-``, starting with a letter
    or digit; ``size_mb`` defaults to the server's (1024, at most its maximum ``disk_mb``).
    Unknown names raise :class:`~sandlot.VolumeNotFound`. Use it as a context manager, or call
    :meth:`close`, to release the connection.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = None,
        retries: Optional[int] = None,
        transport: Optional[httpx.BaseTransport] = None,
    ) -> None:
        self._http = SyncHTTP(ConnectionConfig.resolve(url, api_key, request_timeout, retries), transport)

    def _volume(self, doc: Any) -> Volume:
        vol = Volume.from_json(doc if isinstance(doc, dict) else {})
        vol.files = VolumeFiles(self._http, vol.name)
        return vol

    def create(self, name: str, size_mb: Optional[int] = None) -> Volume:
        """A new, empty volume of ``size_mb`` MiB."""
        return self._volume(decode_json(self._http.request("POST", volume_path(), json=volume_body(name, size_mb))))

    def list(self) -> List[Volume]:
        """Every volume on the server."""
        return [self._volume(d) for d in _volumes_of(decode_json(self._http.request("GET", volume_path())))]

    def get(self, name: VolumeArg) -> Volume:
        """The volume (a :class:`~sandlot.Volume` or its name), with who mounts it now."""
        return self._volume(decode_json(self._http.request("GET", volume_path(name))))

    def delete(self, name: VolumeArg) -> None:
        """Delete the volume and its files; :class:`~sandlot.VolumeInUse` while any sandbox
        (running, paused, stopped or failed) mounts it."""
        self._http.request("DELETE", volume_path(name)).close()

    def files(self, name: VolumeArg) -> VolumeFiles:
        """The files API of the volume ``name``, without asking the server for the volume."""
        return VolumeFiles(self._http, volume_name(name))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Volumes":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Volumes(url={self._http.cfg.url!r})"


class AsyncVolumes:
    """:class:`Volumes` for asyncio: the same methods as coroutines
    (``async with AsyncVolumes() as v: vol = await v.create("data")``); a volume's ``files``
    are an :class:`AsyncVolumeFiles` (``await vol.files.write(...)``)."""

    def __init__(
        self,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = None,
        retries: Optional[int] = None,
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ) -> None:
        self._http = AsyncHTTP(ConnectionConfig.resolve(url, api_key, request_timeout, retries), transport)

    def _volume(self, doc: Any) -> Volume:
        vol = Volume.from_json(doc if isinstance(doc, dict) else {})
        vol.files = AsyncVolumeFiles(self._http, vol.name)
        return vol

    async def create(self, name: str, size_mb: Optional[int] = None) -> Volume:
        return self._volume(decode_json(await self._http.request("POST", volume_path(), json=volume_body(name, size_mb))))

    async def list(self) -> List[Volume]:
        return [self._volume(d) for d in _volumes_of(decode_json(await self._http.request("GET", volume_path())))]

    async def get(self, name: VolumeArg) -> Volume:
        return self._volume(decode_json(await self._http.request("GET", volume_path(name))))

    async def delete(self, name: VolumeArg) -> None:
        resp = await self._http.request("DELETE", volume_path(name))
        await resp.aclose()

    def files(self, name: VolumeArg) -> AsyncVolumeFiles:
        return AsyncVolumeFiles(self._http, volume_name(name))

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncVolumes":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncVolumes(url={self._http.cfg.url!r})"


# One-call helpers: each opens a connection for the call and closes it; the volume they return
# opens one for each call of its files.


def create_volume(
    name: str,
    size_mb: Optional[int] = None,
    url: Optional[str] = None,
    api_key: Optional[str] = None,
    *,
    transport: Optional[httpx.BaseTransport] = None,
) -> Volume:
    """A new, empty named volume (see :class:`Volumes`)."""
    with Volumes(url, api_key, transport=transport) as volumes:
        return volumes.create(name, size_mb)


def list_volumes(
    url: Optional[str] = None, api_key: Optional[str] = None, *, transport: Optional[httpx.BaseTransport] = None
) -> List[Volume]:
    """Every volume on the server."""
    with Volumes(url, api_key, transport=transport) as volumes:
        return volumes.list()


def get_volume(
    name: VolumeArg,
    url: Optional[str] = None,
    api_key: Optional[str] = None,
    *,
    transport: Optional[httpx.BaseTransport] = None,
) -> Volume:
    """One volume by name; :class:`~sandlot.VolumeNotFound` if there is none."""
    with Volumes(url, api_key, transport=transport) as volumes:
        return volumes.get(name)


def delete_volume(
    name: VolumeArg,
    url: Optional[str] = None,
    api_key: Optional[str] = None,
    *,
    transport: Optional[httpx.BaseTransport] = None,
) -> None:
    """Delete a volume (a :class:`~sandlot.Volume` or its name) and its files;
    :class:`~sandlot.VolumeInUse` while any sandbox mounts it."""
    with Volumes(url, api_key, transport=transport) as volumes:
        volumes.delete(name)
