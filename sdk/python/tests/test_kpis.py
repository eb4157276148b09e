"""``sandlot.kpis`` / ``AsyncKpis`` (issue 23), offline: the call is ``GET /v1/kpis?window=``,
the answer is the server's document, and the server's refusals are the SDK's errors. The live
server's side is tested in ``crates/sandlot-cli/tests/it/kpis.rs`` and the console's KPI page
in ``test_console_kpis.py``."""

from __future__ import annotations

import asyncio
import json
from typing import List

import httpx
import pytest

import sandlot
from sandlot import errors as E

URL = "http://sandlot.test"
DOC = {"window": "1h", "buckets": 360, "step_seconds": 10, "summary": {"error_rate": {"ratio": 0.1}}, "series": {}, "queues": {}}


def transport(seen: List[httpx.Request], status: int = 200) -> httpx.MockTransport:
    def handle(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        if status != 200:
            body = {"error": {"code": "forbidden" if status == 403 else "invalid_argument", "message": "no"}}
            return httpx.Response(status, json=body)
        return httpx.Response(200, json={**DOC, "window": req.url.params.get("window")})

    return httpx.MockTransport(handle)


def test_kpis_asks_for_the_window():
    seen: List[httpx.Request] = []
    doc = sandlot.kpis("1d", URL, "sl_k", transport=transport(seen))
    assert doc["window"] == "1d" and doc["buckets"] == 360
    assert seen[0].method == "GET" and seen[0].url.path == "/v1/kpis"
    assert seen[0].url.params["window"] == "1d"
    with sandlot.Kpis(URL, "sl_k", transport=transport(seen)) as k:
        assert k.get()["window"] == "1h"


def test_async_kpis_match():
    seen: List[httpx.Request] = []

    async def go():
        doc = await sandlot.async_kpis("1h", URL, "sl_k", transport=transport(seen))
        async with sandlot.AsyncKpis(URL, "sl_k", transport=transport(seen)) as k:
            day = await k.get("1d")
        return doc, day

    doc, day = asyncio.run(go())
    assert doc["summary"]["error_rate"]["ratio"] == 0.1
    assert day["window"] == "1d"
    assert [r.url.params["window"] for r in seen] == ["1h", "1d"]


def test_refusals_are_errors():
    with pytest.raises(E.Forbidden):
        sandlot.kpis("1h", URL, "sl_tenant", transport=transport([], 403))
    with pytest.raises(E.InvalidArgument):
        sandlot.kpis("7d", URL, "sl_k", transport=transport([], 400))
