"""The policy history and the what-if evaluator through the SDK (``Policies``,
``AsyncPolicies``): offline against a mock transport (the request each method sends), and
live against the session's real ``sandlot serve`` (see conftest.py): an evaluation answers
without acting, a draft decides instead of the set in force, a bad draft raises
``InvalidRequest``, a member key is refused, and the history lists the set in force first."""

from __future__ import annotations

import asyncio
import json
import os

import httpx
import pytest

from sandlot import AsyncPolicies, Policies, PolicyEvaluation
from sandlot import errors as E

ANSWER = {"decision": "review", "allowed": False, "needs_review": True, "policies": ["hold"],
          "reasons": ["why"], "errors": [], "version": "abc", "draft": True,
          "query": {"principal": {"tenant": "t"}}, "dry_run": True}


def _mock(seen: list) -> httpx.MockTransport:
    def handler(req: httpx.Request) -> httpx.Response:
        seen.append((req.method, req.url.path, json.loads(req.content) if req.content else None))
        if req.url.path == "/v1/policies/evaluate":
            return httpx.Response(200, json=ANSWER)
        if req.url.path == "/v1/policies/versions":
            return httpx.Response(200, json={"current": "v2", "versions": [
                {"seq": 2, "version": "v2", "set_by": "sl_abc", "at": "t2"},
                {"seq": 1, "version": "v1", "set_by": "startup", "at": "t1"}]})
        return httpx.Response(200, json={"seq": 1, "version": "v1", "set_by": "startup", "at": "t1", "text": "x"})
    return httpx.MockTransport(handler)


def test_the_requests_sent_and_the_answers_read() -> None:
    seen: list = []
    with Policies(url="http://sandlot.test", api_key="sl_x", transport=_mock(seen)) as p:
        a = p.evaluate({"gate": "execute", "code": "x"}, policies="draft")
        assert isinstance(a, PolicyEvaluation)
        assert (a.decision, a.needs_review, a.policies, a.draft) == ("review", True, ["hold"], True)
        assert [v.seq for v in p.versions()] == [2, 1]
        assert p.version(1).text == "x"
        with pytest.raises(ValueError):
            p.evaluate({"code": "no gate"})
    assert seen[0] == ("POST", "/v1/policies/evaluate",
                       {"request": {"gate": "execute", "code": "x"}, "policies": "draft"})
    assert seen[2][:2] == ("GET", "/v1/policies/versions/1")


def test_async_sends_the_same() -> None:
    seen: list = []

    async def go() -> None:
        async with AsyncPolicies(url="http://sandlot.test", api_key="sl_x",
                                 transport=httpx.MockTransport(_mock(seen).handle_request)) as p:
            a = await p.evaluate({"gate": "egress", "host": "example.test"})
            assert a.decision == "review"
            assert [v.version for v in await p.versions()] == ["v2", "v1"]
            assert (await p.version("v1")).set_by == "startup"

    asyncio.run(go())
    assert seen[0] == ("POST", "/v1/policies/evaluate", {"request": {"gate": "egress", "host": "example.test"}})


@pytest.mark.live
def test_live_what_if_and_history(sandlot_url: str) -> None:
    key = os.environ["SANDLOT_API_KEY"]
    with Policies(url=sandlot_url, api_key=key) as p:
        a = p.evaluate({"gate": "execute", "code": "print(1)"})
        assert a.decision == "allow" and a.allowed and "allow-all-gates" in a.policies
        denied = p.evaluate({"gate": "execute"}, policies='@id("tiers")\npermit (principal, action == Sandlot::Action::"select_tier", resource);\n')
        assert (denied.decision, denied.draft, denied.policies) == ("deny", True, [])
        with pytest.raises(E.InvalidRequest) as bad:
            p.evaluate({"gate": "execute"}, policies="permit (principal")
        assert "draft" in bad.value.message
        versions = p.versions()
        assert versions and versions[0].version == a.version
        assert p.version(versions[0].seq).text
        member = httpx.post(f"{sandlot_url}/v1/keys", json={"tenant": "default", "role": "member"},
                            headers={"Authorization": f"Bearer {key}"}).json()
    try:
        with Policies(url=sandlot_url, api_key=member["key"]) as m:
            with pytest.raises(E.Forbidden):
                m.evaluate({"gate": "execute"})
            with pytest.raises(E.Forbidden):
                m.versions()

        async def go() -> None:
            async with AsyncPolicies(url=sandlot_url, api_key=key) as ap:
                ans = await ap.evaluate({"gate": "egress", "host": "example.test"})
                assert ans.query["request"]["port"] == 443
                assert (await ap.versions())[0].version == a.version

        asyncio.run(go())
    finally:
        httpx.delete(f"{sandlot_url}/v1/keys/{member['id']}", headers={"Authorization": f"Bearer {key}"})
