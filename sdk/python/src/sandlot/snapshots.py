"""Snapshots: a sandbox's interpreter state and workspace, saved on the server, that any number
of sandboxes can start from. They are taken with ``sb.snapshot(name)``; this module lists, gets
and deletes them.

::

    from sandlot import Sandbox, list_snapshots, delete_snapshot

    with Sandbox() as sb:
        sb.run_code("import pandas as pd; df = pd.DataFrame({'a': [1, 2, 3]})")
        snap = sb.snapshot("with-df")
    with Sandbox(from_snapshot=snap) as again:
        print(again.run_code("len(df)").text)   # "3"
    [s.name for s in list_snapshots()]          # ["with-df", ...]
    delete_snapshot(snap)
"""

from __future__ import annotations

from typing import Any, List, Optional

import httpx

from ._core import ConnectionConfig, SnapshotArg, decode_json, snapshot_path
from ._http import AsyncHTTP, SyncHTTP
from .models import Snapshot

__all__ = ["Snapshots", "AsyncSnapshots", "list_snapshots", "get_snapshot", "delete_snapshot"]


def _snapshots_of(doc: Any) -> List[Snapshot]:
    items = doc.get("snapshots") if isinstance(doc, dict) else None
    return [Snapshot.from_json(d) for d in (items if isinstance(items, list) else []) if isinstance(d, dict)]


class Snapshots:
    """The server's snapshots (``/v1/snapshots``)::

        with Snapshots(url=..., api_key=...) as snapshots:   # $SANDLOT_URL / $SANDLOT_API_KEY
            snapshots.list()          # [Snapshot, ...], oldest first
            snapshots.get("snap_...") # SnapshotNotFound if there is none
            snapshots.delete(snap)    # a Snapshot or its id

    Use it as a context manager, or call :meth:`close`, to release the connection.
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

    def list(self) -> List[Snapshot]:
        """Every snapshot on the server, oldest first."""
        return _snapshots_of(decode_json(self._http.request("GET", snapshot_path())))

    def get(self, snapshot: SnapshotArg) -> Snapshot:
        """The snapshot; :class:`~sandlot.SnapshotNotFound` if there is none."""
        return Snapshot.from_json(decode_json(self._http.request("GET", snapshot_path(snapshot))))

    def delete(self, snapshot: SnapshotArg) -> None:
        """Delete the snapshot (sandboxes created from it are untouched);
        :class:`~sandlot.SnapshotNotFound` if it is already gone."""
        self._http.request("DELETE", snapshot_path(snapshot)).close()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Snapshots":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Snapshots(url={self._http.cfg.url!r})"


class AsyncSnapshots:
    """:class:`Snapshots` for asyncio: the same methods as coroutines
    (``async with AsyncSnapshots() as s: await s.list()``)."""

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

    async def list(self) -> List[Snapshot]:
        return _snapshots_of(decode_json(await self._http.request("GET", snapshot_path())))

    async def get(self, snapshot: SnapshotArg) -> Snapshot:
        return Snapshot.from_json(decode_json(await self._http.request("GET", snapshot_path(snapshot))))

    async def delete(self, snapshot: SnapshotArg) -> None:
        resp = await self._http.request("DELETE", snapshot_path(snapshot))
        await resp.aclose()

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncSnapshots":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncSnapshots(url={self._http.cfg.url!r})"


# One-call helpers: each opens a connection for the call and closes it.


def list_snapshots(
    url: Optional[str] = None, api_key: Optional[str] = None, *, transport: Optional[httpx.BaseTransport] = None
) -> List[Snapshot]:
    """Every snapshot on the server, oldest first (see :class:`Snapshots`)."""
    with Snapshots(url, api_key, transport=transport) as snapshots:
        return snapshots.list()


def get_snapshot(
    snapshot: SnapshotArg,
    url: Optional[str] = None,
    api_key: Optional[str] = None,
    *,
    transport: Optional[httpx.BaseTransport] = None,
) -> Snapshot:
    """One snapshot by id; :class:`~sandlot.SnapshotNotFound` if there is none."""
    with Snapshots(url, api_key, transport=transport) as snapshots:
        return snapshots.get(snapshot)


def delete_snapshot(
    snapshot: SnapshotArg,
    url: Optional[str] = None,
    api_key: Optional[str] = None,
    *,
    transport: Optional[httpx.BaseTransport] = None,
) -> None:
    """Delete a snapshot (a :class:`~sandlot.Snapshot` or its id)."""
    with Snapshots(url, api_key, transport=transport) as snapshots:
        snapshots.delete(snapshot)
