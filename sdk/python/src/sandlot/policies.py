"""The server's policy set, seen from a client: its history (every set put in force, with who
set it and when; the operator's key only) and the "what if" evaluator, which asks how the set
in force, or a draft set, would decide a request, without acting::

    from sandlot import Policies

    with Policies(api_key=admin_key) as policies:
        answer = policies.evaluate({"gate": "execute", "code": "import os"})
        answer.decision                  # "allow" | "deny" | "review"
        answer.policies                  # the deciding policies' ids
        policies.evaluate({"gate": "egress", "host": "example.com"}, policies=draft_text)
        [v.version for v in policies.versions()]   # newest first; the first is in force
        policies.version(3).text

An evaluation runs nothing, holds nothing for review and is not journaled as a decision. It
needs an admin key; a tenant's admin asks as its own tenant (the operator may name any
``principal``). A draft that does not validate raises :class:`~sandlot.InvalidRequest` with
the validator's message.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Union
from urllib.parse import quote

import httpx

from ._core import ConnectionConfig, decode_json
from ._http import AsyncHTTP, SyncHTTP
from .models import PolicyEvaluation, PolicyVersion

__all__ = ["Policies", "AsyncPolicies", "PolicyEvaluation", "PolicyVersion"]


def _body(request: Mapping[str, Any], policies: Optional[str]) -> Dict[str, Any]:
    if "gate" not in request:
        raise ValueError("request needs a gate (execute, egress, create_sandbox, ...)")
    body: Dict[str, Any] = {"request": dict(request)}
    if policies is not None:
        body["policies"] = policies
    return body


def _versions(doc: Any) -> List[PolicyVersion]:
    items = doc.get("versions") if isinstance(doc, Mapping) else None
    return [PolicyVersion.from_json(v) for v in (items if isinstance(items, list) else [])]


def _version_path(v: Union[int, str]) -> str:
    return "/v1/policies/versions/" + quote(str(v), safe="")


class Policies:
    """The policy history and the what-if evaluator. Use it as a context manager, or call
    :meth:`close`."""

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

    def evaluate(self, request: Mapping[str, Any], policies: Optional[str] = None) -> PolicyEvaluation:
        """How ``request`` (``{"gate": ..., "principal"?: {...}, ...fields}``) would be decided
        by the set in force, or by ``policies`` (a draft's Cedar text). Acts on nothing."""
        doc = decode_json(self._http.request("POST", "/v1/policies/evaluate", json=_body(request, policies)))
        return PolicyEvaluation.from_json(doc)

    def versions(self) -> List[PolicyVersion]:
        """Every set put in force, newest first, without their text (operator key)."""
        return _versions(decode_json(self._http.request("GET", "/v1/policies/versions")))

    def version(self, v: Union[int, str]) -> PolicyVersion:
        """One set, by its ``seq`` or its version, with its text (operator key)."""
        return PolicyVersion.from_json(decode_json(self._http.request("GET", _version_path(v))))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Policies":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Policies(url={self._http.cfg.url!r})"


class AsyncPolicies:
    """:class:`Policies` for asyncio: the same methods as coroutines."""

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

    async def evaluate(self, request: Mapping[str, Any], policies: Optional[str] = None) -> PolicyEvaluation:
        doc = decode_json(await self._http.request("POST", "/v1/policies/evaluate", json=_body(request, policies)))
        return PolicyEvaluation.from_json(doc)

    async def versions(self) -> List[PolicyVersion]:
        return _versions(decode_json(await self._http.request("GET", "/v1/policies/versions")))

    async def version(self, v: Union[int, str]) -> PolicyVersion:
        return PolicyVersion.from_json(decode_json(await self._http.request("GET", _version_path(v))))

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncPolicies":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncPolicies(url={self._http.cfg.url!r})"
