"""The server's KPIs (``GET /v1/kpis``, an operator key): p50/p99 create and execute latency,
error rate, policy-violation rate, mean time to containment, time to recover and queue depths,
over the last hour (10 s buckets) or day (1 min buckets)::

    import sandlot

    k = sandlot.kpis("1h", api_key=operator_key)
    k["summary"]["execute_latency_ms"]["p99"]          # ms, or None when nothing ran
    k["summary"]["policy_violation_rate"]["ratio"]
    k["series"]["executions"]                           # one count per bucket, oldest first
    k["queues"]                                         # depths now

    async with sandlot.AsyncKpis(api_key=operator_key) as c:
        day = await c.get("1d")

The answer is the JSON document as the server sends it (see the OpenAPI schema ``Kpis``).
A key that is not the operator's raises :class:`~sandlot.Forbidden`; a window other than
``1h`` or ``1d`` raises :class:`~sandlot.InvalidArgument` (from the server).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import httpx

from ._core import ConnectionConfig, decode_json
from ._http import AsyncHTTP, SyncHTTP

__all__ = ["Kpis", "AsyncKpis", "kpis", "async_kpis"]


def _doc(doc: Any) -> Dict[str, Any]:
    return doc if isinstance(doc, dict) else {}


class Kpis:
    """The server's KPIs (``/v1/kpis``). Use it as a context manager, or call :meth:`close`."""

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

    def get(self, window: str = "1h") -> Dict[str, Any]:
        """The window's (``1h`` or ``1d``) summary, series and the queue depths now."""
        return _doc(decode_json(self._http.request("GET", "/v1/kpis", params={"window": window})))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Kpis":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Kpis(url={self._http.cfg.url!r})"


class AsyncKpis:
    """:class:`Kpis` for asyncio: the same methods as coroutines."""

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

    async def get(self, window: str = "1h") -> Dict[str, Any]:
        return _doc(decode_json(await self._http.request("GET", "/v1/kpis", params={"window": window})))

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncKpis":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncKpis(url={self._http.cfg.url!r})"


def kpis(
    window: str = "1h",
    url: Optional[str] = None,
    api_key: Optional[str] = None,
    *,
    transport: Optional[httpx.BaseTransport] = None,
) -> Dict[str, Any]:
    """The server's KPIs over ``window`` (``1h`` or ``1d``), in one call (see :class:`Kpis`)."""
    with Kpis(url, api_key, transport=transport) as c:
        return c.get(window)


async def async_kpis(
    window: str = "1h",
    url: Optional[str] = None,
    api_key: Optional[str] = None,
    *,
    transport: Optional[httpx.AsyncBaseTransport] = None,
) -> Dict[str, Any]:
    """:func:`kpis` for asyncio."""
    async with AsyncKpis(url, api_key, transport=transport) as c:
        return await c.get(window)
