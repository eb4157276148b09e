"""Reviews: actions a policy of the server held for a person's approval (a Cedar permit
annotated ``@review("why")``). An execution held answers :class:`~sandlot.ReviewPending` (or
waits ``review_wait`` seconds for the decision)::

    from sandlot import Reviews, ReviewPending, Sandbox

    sb = Sandbox()
    try:
        sb.run_code("rm -rf /workspace/cache", language="bash")
    except ReviewPending as held:
        review = held.review                      # a Review: id, reason, state, request ...
    # ... a person with an admin key of the tenant (not the one that asked), or the operator:
    with Reviews(api_key=admin_key) as reviews:
        reviews.list(state="pending")             # [Review, ...]
        reviews.approve(review.id, "looked at it")
    sb.run_code("rm -rf /workspace/cache", language="bash", review=review.id)   # runs once

A denied review raises :class:`~sandlot.ReviewDenied`; an approved action runs once (a second
call with the same review raises :class:`~sandlot.ReviewDecided`); another tenant's review is
:class:`~sandlot.ReviewNotFound`.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional
from urllib.parse import quote

import httpx

from ._core import ConnectionConfig, decode_json
from ._http import AsyncHTTP, SyncHTTP
from .models import Review

__all__ = ["Review", "Reviews", "AsyncReviews"]


def _path(id: Optional[str] = None, verb: Optional[str] = None) -> str:
    p = "/v1/reviews"
    if id is not None:
        p += "/" + quote(id, safe="")
    if verb is not None:
        p += "/" + verb
    return p


def _params(state: Optional[str], tenant: Optional[str], limit: Optional[int]) -> Dict[str, str]:
    params: Dict[str, str] = {}
    if state is not None:
        params["state"] = state
    if tenant is not None:
        params["tenant"] = tenant
    if limit is not None:
        params["limit"] = str(int(limit))
    return params


def _one(doc: Any) -> Review:
    return Review.from_json(doc.get("review") if isinstance(doc, Mapping) else None)


def _many(doc: Any) -> List[Review]:
    items = doc.get("reviews") if isinstance(doc, Mapping) else None
    return [Review.from_json(d) for d in (items if isinstance(items, list) else [])]


class Reviews:
    """The server's reviews (``/v1/reviews``): the key's tenant's (every tenant's for the
    operator). Deciding needs an admin key of the review's tenant other than the one that
    asked, or the operator's. Use it as a context manager, or call :meth:`close`."""

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

    def list(self, state: Optional[str] = None, *, tenant: Optional[str] = None, limit: Optional[int] = None) -> List[Review]:
        """Reviews, newest first; ``state`` one of ``pending``, ``approved``, ``denied``."""
        return _many(decode_json(self._http.request("GET", _path(), params=_params(state, tenant, limit))))

    def get(self, id: str) -> Review:
        return _one(decode_json(self._http.request("GET", _path(id))))

    def approve(self, id: str, reason: str) -> Review:
        """Approve: the held action runs once (for the caller that waited, or the first call
        again with ``review=id``)."""
        return _one(decode_json(self._http.request("POST", _path(id, "approve"), json={"reason": reason})))

    def deny(self, id: str, reason: str) -> Review:
        return _one(decode_json(self._http.request("POST", _path(id, "deny"), json={"reason": reason})))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Reviews":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Reviews(url={self._http.cfg.url!r})"


class AsyncReviews:
    """:class:`Reviews` for asyncio: the same methods as coroutines."""

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

    async def list(self, state: Optional[str] = None, *, tenant: Optional[str] = None, limit: Optional[int] = None) -> List[Review]:
        return _many(decode_json(await self._http.request("GET", _path(), params=_params(state, tenant, limit))))

    async def get(self, id: str) -> Review:
        return _one(decode_json(await self._http.request("GET", _path(id))))

    async def approve(self, id: str, reason: str) -> Review:
        return _one(decode_json(await self._http.request("POST", _path(id, "approve"), json={"reason": reason})))

    async def deny(self, id: str, reason: str) -> Review:
        return _one(decode_json(await self._http.request("POST", _path(id, "deny"), json={"reason": reason})))

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncReviews":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncReviews(url={self._http.cfg.url!r})"
