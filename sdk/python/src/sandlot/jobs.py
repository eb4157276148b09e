"""Durable jobs, the lifecycle event stream, and what a sandbox's record says (its metrics,
lineage and run bundle): the client's side of the server's record, synchronous (:class:`Job`,
:func:`events`) and asyncio (:class:`AsyncJob`, :func:`async_events`), one request shape each."""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any, AsyncIterator, Dict, Iterator, List, Mapping, Optional, Sequence, Union
from urllib.parse import quote

import httpx

from ._core import ConnectionConfig, decode_json, execute_body, sandbox_path, transport_error
from ._http import AsyncHTTP, SyncHTTP
from ._sse import SSEDecoder
from .models import Execution

__all__ = ["Job", "AsyncJob", "events", "async_events", "ENDED_STATES"]

#: The states a job ends in; ``queued`` and ``running`` are the others.
ENDED_STATES = frozenset({"succeeded", "failed", "cancelled", "lost"})


class _JobView:
    """What a job's document says; :class:`Job` and :class:`AsyncJob` add the requests."""

    _http: Any
    _doc: Dict[str, Any]

    @property
    def id(self) -> str:
        return str(self._doc.get("id", ""))

    @property
    def sandbox_id(self) -> str:
        return str(self._doc.get("sandbox_id", ""))

    @property
    def state(self) -> str:
        return str(self._doc.get("state", ""))

    @property
    def reason(self) -> Optional[str]:
        """Why it failed, was cancelled or was lost, when the server says."""
        r = self._doc.get("reason")
        return str(r) if r is not None else None

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES

    @property
    def result(self) -> Optional[Execution]:
        """The execution's result once it ran (also for a failed or cancelled job that ran)."""
        r = self._doc.get("result")
        return Execution.from_json(r, client=self._http) if isinstance(r, Mapping) else None

    @property
    def raw(self) -> Dict[str, Any]:
        """The job as the server answered it."""
        return dict(self._doc)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self.id!r}, state={self.state!r})"


def _first_delay(poll: float) -> float:
    return min(poll, 0.05)


class Job(_JobView):
    """An execution queued on a sandbox (:meth:`Sandbox.submit_job`), stored by the server
    before it answered: it runs in order after the sandbox's earlier jobs, survives a server
    restart (one cut off by it ends ``lost`` with the reason, or runs again if it was declared
    ``idempotent``), and is read later. ``state`` is one of ``queued``, ``running``,
    ``succeeded``, ``failed``, ``cancelled``, ``lost``; :meth:`wait` blocks until it ends."""

    def __init__(self, http: SyncHTTP, doc: Mapping[str, Any]) -> None:
        self._http = http
        self._doc = dict(doc)

    def refresh(self) -> "Job":
        """Read the job again from the server."""
        self._doc = dict(decode_json(self._http.request("GET", _job_path(self.id))))
        return self

    def wait(self, timeout: Optional[float] = None, poll: float = 0.25) -> Optional[Execution]:
        """Block until the job ends (at most ``timeout`` seconds; ``TimeoutError`` past it) and
        return its :attr:`result` (``None`` when it never ran: cancelled while queued, lost)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = _first_delay(poll)
        while not self.refresh().ended:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {self.id} is still {self.state} after {timeout} s")
            time.sleep(delay)
            delay = min(delay * 2, poll)
        return self.result

    def cancel(self) -> "Job":
        """Cancel it: a queued job never runs, a running one is interrupted. Raises
        :class:`~sandlot.JobEnded` for a job that had already ended."""
        self._doc = dict(decode_json(self._http.request("DELETE", _job_path(self.id))))
        return self


class AsyncJob(_JobView):
    """:class:`Job` for asyncio (:meth:`AsyncSandbox.submit_job`): the same properties, with
    :meth:`refresh`, :meth:`wait` and :meth:`cancel` as coroutines."""

    def __init__(self, http: AsyncHTTP, doc: Mapping[str, Any]) -> None:
        self._http = http
        self._doc = dict(doc)

    async def refresh(self) -> "AsyncJob":
        """Read the job again from the server."""
        self._doc = dict(decode_json(await self._http.request("GET", _job_path(self.id))))
        return self

    async def wait(self, timeout: Optional[float] = None, poll: float = 0.25) -> Optional[Execution]:
        """See :meth:`Job.wait`; ``TimeoutError`` past ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = _first_delay(poll)
        while not (await self.refresh()).ended:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {self.id} is still {self.state} after {timeout} s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, poll)
        return self.result

    async def cancel(self) -> "AsyncJob":
        """See :meth:`Job.cancel`."""
        self._doc = dict(decode_json(await self._http.request("DELETE", _job_path(self.id))))
        return self


def _job_path(job_id: str) -> str:
    return f"/v1/jobs/{quote(job_id, safe='')}"


def submit_job(
    sb: Any,
    code: str,
    language: str = "python",
    *,
    timeout: Optional[float] = None,
    idempotent: bool = False,
    metadata: Optional[Mapping[str, Any]] = None,
) -> Job:
    doc = decode_json(sb._http.request("POST", sandbox_path(sb.id, "jobs"), json=job_body(code, language, timeout, idempotent, metadata)))
    return Job(sb._http, doc)


def job_body(
    code: str, language: str, timeout: Optional[float], idempotent: bool, metadata: Optional[Mapping[str, Any]]
) -> Dict[str, Any]:
    """``POST /v1/sandboxes/{id}/jobs``'s body."""
    body = execute_body(code, language, timeout, False)
    body.pop("stream", None)
    body["idempotent"] = bool(idempotent)
    if metadata is not None:
        body["metadata"] = dict(metadata)
    return body


def _job_docs(doc: Any) -> List[Mapping[str, Any]]:
    return [d for d in (doc.get("jobs") or []) if isinstance(d, Mapping)] if isinstance(doc, dict) else []


def list_jobs(sb: Any) -> List[Job]:
    return [Job(sb._http, d) for d in _job_docs(decode_json(sb._http.request("GET", sandbox_path(sb.id, "jobs"))))]


async def async_submit_job(
    sb: Any,
    code: str,
    language: str = "python",
    *,
    timeout: Optional[float] = None,
    idempotent: bool = False,
    metadata: Optional[Mapping[str, Any]] = None,
) -> AsyncJob:
    body = job_body(code, language, timeout, idempotent, metadata)
    return AsyncJob(sb._http, decode_json(await sb._http.request("POST", sandbox_path(sb.id, "jobs"), json=body)))


async def async_list_jobs(sb: Any) -> List[AsyncJob]:
    doc = decode_json(await sb._http.request("GET", sandbox_path(sb.id, "jobs")))
    return [AsyncJob(sb._http, d) for d in _job_docs(doc)]


def events(
    url: Optional[str] = None,
    api_key: Optional[str] = None,
    *,
    kinds: Optional[Sequence[str]] = None,
    tenant: Optional[str] = None,
    transport: Optional[httpx.BaseTransport] = None,
) -> Iterator[Dict[str, Any]]:
    """Yield the server's lifecycle events as they happen (``created``, ``executed``,
    ``paused``, ``resumed``, ``forked``, ``killed``, ``expired``, ``contained``, ...): each a
    dict with ``seq``, ``kind``, ``sandbox_id``, ``tenant``, ``at``, ``execution_id`` and
    ``detail``, of the key's tenant (the operator may pass ``tenant="*"``). A ``lagged`` dict
    (``{"kind": "lagged", "missed": n}``) says the stream fell behind. Runs until the caller
    stops iterating or the server stops."""
    cfg = ConnectionConfig.resolve(url, api_key, None, None)
    http = SyncHTTP(cfg, transport)
    try:
        resp = http.request("GET", "/v1/events", params=_events_params(kinds, tenant), timeout=_stream_timeout(cfg), stream=True)
        try:
            dec = SSEDecoder()
            for line in resp.iter_lines():
                out = _event(dec, line)
                if out is not None:
                    yield out
        except httpx.TransportError as e:
            raise transport_error(e, "GET", "/v1/events") from e
        finally:
            resp.close()
    finally:
        http.close()


async def async_events(
    url: Optional[str] = None,
    api_key: Optional[str] = None,
    *,
    kinds: Optional[Sequence[str]] = None,
    tenant: Optional[str] = None,
    transport: Optional[httpx.AsyncBaseTransport] = None,
) -> AsyncIterator[Dict[str, Any]]:
    """:func:`events` for asyncio: ``async for ev in sandlot.async_events(...)``."""
    cfg = ConnectionConfig.resolve(url, api_key, None, None)
    http = AsyncHTTP(cfg, transport)
    try:
        resp = await http.request(
            "GET", "/v1/events", params=_events_params(kinds, tenant), timeout=_stream_timeout(cfg), stream=True
        )
        try:
            dec = SSEDecoder()
            async for line in resp.aiter_lines():
                out = _event(dec, line)
                if out is not None:
                    yield out
        except httpx.TransportError as e:
            raise transport_error(e, "GET", "/v1/events") from e
        finally:
            await resp.aclose()
    finally:
        await http.aclose()


def _events_params(kinds: Optional[Sequence[str]], tenant: Optional[str]) -> Optional[Dict[str, str]]:
    params: Dict[str, str] = {}
    if kinds:
        params["kinds"] = ",".join(kinds)
    if tenant is not None:
        params["tenant"] = tenant
    return params or None


def _stream_timeout(cfg: ConnectionConfig) -> httpx.Timeout:
    """A stream waits for its next event as long as it takes."""
    return httpx.Timeout(cfg.timeout().connect or 10.0, read=None)


def _event(dec: SSEDecoder, line: str) -> Optional[Dict[str, Any]]:
    """The event ``line`` completes, as :func:`events` yields it, or ``None``."""
    ev = dec.feed(line)
    if ev is None:
        return None
    try:
        data = json.loads(ev.data) if ev.data else None
    except ValueError:
        data = None
    if ev.event == "lagged":
        missed = data.get("missed") if isinstance(data, dict) else None
        return {"kind": "lagged", "missed": missed}
    return data if isinstance(data, dict) else None


def _lineage_path(sb: Any) -> str:
    return f"/v1/lineage/sandbox/{quote(sb.id, safe='')}"


def sandbox_metrics(sb: Any) -> Dict[str, Any]:
    return dict(decode_json(sb._http.request("GET", sandbox_path(sb.id, "metrics"))))


def sandbox_lineage(sb: Any) -> Dict[str, Any]:
    return dict(decode_json(sb._http.request("GET", _lineage_path(sb))))


async def async_sandbox_metrics(sb: Any) -> Dict[str, Any]:
    return dict(decode_json(await sb._http.request("GET", sandbox_path(sb.id, "metrics"))))


async def async_sandbox_lineage(sb: Any) -> Dict[str, Any]:
    return dict(decode_json(await sb._http.request("GET", _lineage_path(sb))))


def _discard(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass


def save_bundle(sb: Any, path: Union[str, "os.PathLike[str]"]) -> str:
    target = os.fspath(path)
    resp = sb._http.request("GET", sandbox_path(sb.id, "bundle"), stream=True)
    tmp = target + ".partial"
    try:
        with open(tmp, "wb") as f:
            for chunk in resp.iter_bytes():
                f.write(chunk)
        os.replace(tmp, target)
    except BaseException:
        _discard(tmp)
        raise
    finally:
        resp.close()
    return target


async def async_save_bundle(sb: Any, path: Union[str, "os.PathLike[str]"]) -> str:
    target = os.fspath(path)
    resp = await sb._http.request("GET", sandbox_path(sb.id, "bundle"), stream=True)
    tmp = target + ".partial"
    try:
        with open(tmp, "wb") as f:
            async for chunk in resp.aiter_bytes():
                f.write(chunk)
        os.replace(tmp, target)
    except BaseException:
        _discard(tmp)
        raise
    finally:
        await resp.aclose()
    return target

