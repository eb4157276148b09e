"""Durable jobs, the lifecycle event stream, and what a sandbox's record says (its metrics,
lineage and run bundle): the synchronous client's side of the server's record."""

from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Union
from urllib.parse import quote

import httpx

from ._core import ConnectionConfig, decode_json, execute_body, sandbox_path, transport_error
from ._http import SyncHTTP
from ._sse import SSEDecoder
from .models import Execution

__all__ = ["Job", "events", "ENDED_STATES"]

#: The states a job ends in; ``queued`` and ``running`` are the others.
ENDED_STATES = frozenset({"succeeded", "failed", "cancelled", "lost"})


class Job:
    """An execution queued on a sandbox (:meth:`Sandbox.submit_job`), stored by the server
    before it answered: it runs in order after the sandbox's earlier jobs, survives a server
    restart (one cut off by it ends ``lost`` with the reason, or runs again if it was declared
    ``idempotent``), and is read later. ``state`` is one of ``queued``, ``running``,
    ``succeeded``, ``failed``, ``cancelled``, ``lost``; :meth:`wait` blocks until it ends."""

    def __init__(self, http: SyncHTTP, doc: Mapping[str, Any]) -> None:
        self._http = http
        self._doc: Dict[str, Any] = dict(doc)

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

    def refresh(self) -> "Job":
        """Read the job again from the server."""
        self._doc = dict(decode_json(self._http.request("GET", _job_path(self.id))))
        return self

    def wait(self, timeout: Optional[float] = None, poll: float = 0.25) -> Optional[Execution]:
        """Block until the job ends (at most ``timeout`` seconds; ``TimeoutError`` past it) and
        return its :attr:`result` (``None`` when it never ran: cancelled while queued, lost)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = min(poll, 0.05)
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

    def __repr__(self) -> str:
        return f"Job(id={self.id!r}, state={self.state!r})"


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
    body = execute_body(code, language, timeout, False)
    body.pop("stream", None)
    body["idempotent"] = bool(idempotent)
    if metadata is not None:
        body["metadata"] = dict(metadata)
    doc = decode_json(sb._http.request("POST", sandbox_path(sb.id, "jobs"), json=body))
    return Job(sb._http, doc)


def list_jobs(sb: Any) -> List[Job]:
    doc = decode_json(sb._http.request("GET", sandbox_path(sb.id, "jobs")))
    return [Job(sb._http, d) for d in (doc.get("jobs") or [])] if isinstance(doc, dict) else []


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
    params: Dict[str, str] = {}
    if kinds:
        params["kinds"] = ",".join(kinds)
    if tenant is not None:
        params["tenant"] = tenant
    no_read_timeout = httpx.Timeout(cfg.timeout().connect or 10.0, read=None)
    try:
        resp = http.request("GET", "/v1/events", params=params or None, timeout=no_read_timeout, stream=True)
        try:
            dec = SSEDecoder()
            for line in resp.iter_lines():
                ev = dec.feed(line)
                if ev is None:
                    continue
                try:
                    data = json.loads(ev.data) if ev.data else None
                except ValueError:
                    data = None
                if ev.event == "lagged":
                    missed = data.get("missed") if isinstance(data, dict) else None
                    yield {"kind": "lagged", "missed": missed}
                elif isinstance(data, dict):
                    yield data
        except httpx.TransportError as e:
            raise transport_error(e, "GET", "/v1/events") from e
        finally:
            resp.close()
    finally:
        http.close()


def sandbox_metrics(sb: Any) -> Dict[str, Any]:
    return dict(decode_json(sb._http.request("GET", sandbox_path(sb.id, "metrics"))))


def sandbox_lineage(sb: Any) -> Dict[str, Any]:
    return dict(decode_json(sb._http.request("GET", f"/v1/lineage/sandbox/{quote(sb.id, safe='')}")))


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
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    finally:
        resp.close()
    return target

