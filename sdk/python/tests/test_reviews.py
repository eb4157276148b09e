"""Reviews (human approval as a policy outcome) through the SDK: the error classes
(offline), and live against a real `sandlot serve` (see conftest.py): an execution a
``@review`` permit holds raises :class:`ReviewPending`, runs once after
:meth:`Reviews.approve` when called again with ``review=``, and raises :class:`ReviewDenied`
once denied; the waiting form (``review_wait``) returns the result; sync and async.

The policy holds only a tenant this module makes, and the set is put back afterwards, so the
session's other tests are not held."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import uuid
from typing import Iterator, Tuple

import httpx
import pytest

import sandlot
from sandlot import AsyncReviews, AsyncSandbox, Reviews, Sandbox
from sandlot import errors as E


@pytest.mark.parametrize(
    "status,code,cls",
    [
        (404, "review_not_found", E.ReviewNotFound),
        (403, "review_denied", E.ReviewDenied),
        (409, "review_decided", E.ReviewDecided),
    ],
)
def test_review_codes_map_to_classes(status: int, code: str, cls: type) -> None:
    err = E.error_from_response(status, json.dumps({"error": {"code": code, "message": "m"}}).encode(), {})
    assert type(err) is cls and (err.code, err.status, err.message) == (code, status, "m")
    assert issubclass(E.ReviewNotFound, E.NotFoundError) and issubclass(E.ReviewDenied, E.Forbidden)


def test_a_202_raises_review_pending_with_the_review() -> None:
    review = {"id": "rev_abc", "state": "pending", "gate": "execute", "reason": "why", "request": {"code": "x"}}

    def handler(req: httpx.Request) -> httpx.Response:
        if req.url.path.endswith("/execute"):
            assert req.url.params.get("review_wait") == "0"
            return httpx.Response(202, json={"review": review})
        return httpx.Response(200, json={"id": "sb_1", "template": "default", "state": "running"})

    sb = Sandbox.connect("sb_1", url="http://sandlot.test", api_key="sl_x", transport=httpx.MockTransport(handler))
    with pytest.raises(E.ReviewPending) as info:
        sb.run_code("x", review_wait=0)
    assert info.value.review.id == "rev_abc" and info.value.review.state == "pending"
    assert info.value.review.request == {"code": "x"}


def test_held_create_fork_and_resume_raise_review_pending_and_resubmit_with_the_review() -> None:
    review = {"id": "rev_c", "state": "pending", "gate": "create_sandbox", "reason": "big", "request": {"action": "create"}}
    seen = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append((req.method, req.url.path, dict(req.url.params)))
        if req.method == "POST" and req.url.params.get("review") is None:
            return httpx.Response(202, json={"review": review})
        if req.url.path.endswith("/fork"):
            return httpx.Response(201, json={"sandboxes": [{"id": "sb_2", "template": "default", "state": "running"}]})
        code = 201 if req.url.path == "/v1/sandboxes" else 200
        return httpx.Response(code, json={"id": "sb_1", "template": "default", "state": "running"})

    kw = dict(url="http://sandlot.test", api_key="sl_x", transport=httpx.MockTransport(handler))
    with pytest.raises(E.ReviewPending) as info:
        Sandbox(limits={"memory_mb": 200}, review_wait=0, **kw)
    assert info.value.review.id == "rev_c" and info.value.review.gate == "create_sandbox"
    assert seen[-1] == ("POST", "/v1/sandboxes", {"review_wait": "0"})
    sb = Sandbox(limits={"memory_mb": 200}, review="rev_c", **kw)
    assert sb.id == "sb_1" and seen[-1][2] == {"review": "rev_c"}
    with pytest.raises(E.ReviewPending):
        sb.fork()
    assert len(sb.fork(review="rev_c")) == 1
    with pytest.raises(E.ReviewPending):
        sb.resume(review_wait=5)
    assert seen[-1] == ("POST", "/v1/sandboxes/sb_1/resume", {"review_wait": "5"})
    assert sb.resume(review="rev_c").state == "running"

    async def main() -> None:
        akw = dict(url="http://sandlot.test", api_key="sl_x", transport=httpx.MockTransport(handler))
        with pytest.raises(E.ReviewPending):
            await AsyncSandbox.create(limits={"memory_mb": 200}, **akw)
        asb = await AsyncSandbox.create(limits={"memory_mb": 200}, review="rev_c", **akw)
        with pytest.raises(E.ReviewPending):
            await asb.fork()
        assert len(await asb.fork(review="rev_c")) == 1
        with pytest.raises(E.ReviewPending):
            await asb.resume()
        assert (await asb.resume(review="rev_c")).state == "running"

    asyncio.run(main())


HELD_TENANT = "sdkreview" + uuid.uuid4().hex[:6]


def _admin(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {os.environ['SANDLOT_API_KEY']}"}, timeout=60)


@pytest.fixture(scope="module")
def held(sandlot_url: str) -> Iterator[Tuple[str, str, str]]:
    """(url, asking key, approving key) of a tenant whose bash executions are held."""
    with _admin(sandlot_url) as op:
        original = op.get("/v1/policies").json()["policies"]

        def source(p: dict) -> str:
            # An entry's text is its policy's source; add the annotations when it has none.
            text = p["text"]
            if text.lstrip().startswith("@"):
                return text
            reason = f"@reason({json.dumps(p['reason'])})\n" if p.get("reason") else ""
            return f'@id("{p["id"]}")\n{reason}{text}'

        full = "\n\n".join(source(p) for p in original) + "\n"
        rules = (
            f'\n@id("sdk-review-bash")\n@review("the SDK test holds bash")\n'
            f'permit (principal, action == Sandlot::Action::"execute", resource)\n'
            f'when {{ context.language == "bash" && principal.tenant == Sandlot::Tenant::"{HELD_TENANT}" }};\n'
            f'\n@id("sdk-review-create")\n@review("the SDK test holds 200 MB sandboxes")\n'
            f'permit (principal, action == Sandlot::Action::"create_sandbox", resource)\n'
            f'when {{ context.memory_mb == 200 && principal.tenant == Sandlot::Tenant::"{HELD_TENANT}" }};\n'
        )
        r = op.put("/v1/policies", content=full + rules, headers={"content-type": "text/plain"})
        assert r.status_code == 200, r.text
        assert op.post("/v1/tenants", json={"name": HELD_TENANT}).status_code == 201
        asker = op.post("/v1/keys", json={"tenant": HELD_TENANT, "role": "admin"}).json()["key"]
        approver = op.post("/v1/keys", json={"tenant": HELD_TENANT, "role": "admin"}).json()["key"]
        try:
            yield sandlot_url, asker, approver
        finally:
            r = op.put("/v1/policies", content=full, headers={"content-type": "text/plain"})
            assert r.status_code == 200, r.text
            assert [p["id"] for p in op.get("/v1/policies").json()["policies"]] == [p["id"] for p in original]


@pytest.mark.live
def test_held_execution_runs_once_after_approval(held: Tuple[str, str, str]) -> None:
    url, asker, approver = held
    with Sandbox(url=url, api_key=asker) as sb, Reviews(url=url, api_key=approver) as reviews:
        assert sb.run_code("1 + 1").text == "2"  # python is not held
        with pytest.raises(E.ReviewPending) as info:
            sb.run_bash("echo once >> /workspace/ran.txt; echo ran")
        review = info.value.review
        assert review.state == "pending" and review.gate == "execute"
        assert review.reason == "the SDK test holds bash"
        assert "echo once" in review.request["code"]
        assert [r.id for r in reviews.list(state="pending")] == [review.id]
        # The key that asked cannot decide its own.
        with Reviews(url=url, api_key=asker) as mine, pytest.raises(E.Forbidden):
            mine.approve(review.id, "mine")
        approved = reviews.approve(review.id, "looked at it")
        assert approved.state == "approved" and approved.decision_reason == "looked at it"
        ex = sb.run_bash("echo once >> /workspace/ran.txt; echo ran", review=review.id)
        assert ex.stdout == "ran\n"
        with pytest.raises(E.ReviewDecided):
            sb.run_bash("echo once >> /workspace/ran.txt; echo ran", review=review.id)
        assert sb.run_code("print(open('/workspace/ran.txt').read(), end='')").stdout == "once\n"
        assert reviews.get(review.id).consumed_at is not None
        with pytest.raises(E.ReviewNotFound):
            reviews.get("rev_doesnotexist")

        # Denied: refused with the reason, never ran.
        with pytest.raises(E.ReviewPending) as info:
            sb.run_bash("echo bad > /workspace/denied.txt")
        reviews.deny(info.value.review.id, "not today")
        with pytest.raises(E.ReviewDenied) as denied:
            sb.run_bash("echo bad > /workspace/denied.txt", review=info.value.review.id)
        assert "not today" in str(denied.value)
        assert sb.run_code("import os; os.path.exists('/workspace/denied.txt')").text == "False"

        # Waiting for the decision: the call returns the result once approved.
        def approve_when_held() -> None:
            for _ in range(400):
                pending = reviews.list(state="pending")
                if pending:
                    reviews.approve(pending[0].id, "waited for")
                    return
                time.sleep(0.05)

        t = threading.Thread(target=approve_when_held)
        t.start()
        ex = sb.run_bash("echo waited", review_wait=60, timeout=30)
        t.join()
        assert ex.stdout == "waited\n"


@pytest.mark.live
def test_async_reviews(held: Tuple[str, str, str]) -> None:
    url, asker, approver = held

    async def main() -> None:
        sb = await AsyncSandbox.create(url=url, api_key=asker)
        try:
            async with AsyncReviews(url=url, api_key=approver) as reviews:
                with pytest.raises(E.ReviewPending) as info:
                    await sb.run_code("echo async", language="bash")
                rid = info.value.review.id
                assert (await reviews.get(rid)).state == "pending"
                assert rid in [r.id for r in await reviews.list(state="pending")]
                assert (await reviews.approve(rid, "ok")).state == "approved"
                ex = await sb.run_code("echo async", language="bash", review=rid)
                assert ex.stdout == "async\n"
        finally:
            await sb.kill()

    asyncio.run(main())


@pytest.mark.live
def test_held_creation_and_fork_run_once_after_approval(held: Tuple[str, str, str]) -> None:
    url, asker, approver = held
    big = {"memory_mb": 200}
    with Reviews(url=url, api_key=approver) as reviews:
        with pytest.raises(E.ReviewPending) as info:
            Sandbox(limits=big, url=url, api_key=asker)
        review = info.value.review
        assert review.gate == "create_sandbox" and review.request["limits"]["memory_mb"] == 200
        assert reviews.approve(review.id, "ok").state == "approved"
        with Sandbox(limits=big, url=url, api_key=asker, review=review.id) as sb:
            assert sb.run_code("1 + 1").text == "2"
            with pytest.raises(E.ReviewDecided):
                Sandbox(limits=big, url=url, api_key=asker, review=review.id)
            # A fork of it is held as its creation was; the waiting form returns the children.
            def approve_when_held() -> None:
                for _ in range(400):
                    pending = [r for r in reviews.list(state="pending") if r.gate == "create_sandbox"]
                    if pending:
                        reviews.approve(pending[0].id, "fork ok")
                        return
                    time.sleep(0.05)

            t = threading.Thread(target=approve_when_held)
            t.start()
            children = sb.fork(review_wait=60)
            t.join()
            assert len(children) == 1
            for c in children:
                c.kill()
        # Denied: never made.
        with pytest.raises(E.ReviewPending) as info:
            Sandbox(limits=big, url=url, api_key=asker)
        reviews.deny(info.value.review.id, "not today")
        with pytest.raises(E.ReviewDenied):
            Sandbox(limits=big, url=url, api_key=asker, review=info.value.review.id)


@pytest.mark.live
def test_async_held_creation(held: Tuple[str, str, str]) -> None:
    url, asker, approver = held

    async def main() -> None:
        async with AsyncReviews(url=url, api_key=approver) as reviews:
            with pytest.raises(E.ReviewPending) as info:
                await AsyncSandbox.create(limits={"memory_mb": 200}, url=url, api_key=asker)
            rid = info.value.review.id
            assert (await reviews.approve(rid, "ok")).state == "approved"
            sb = await AsyncSandbox.create(limits={"memory_mb": 200}, url=url, api_key=asker, review=rid)
            try:
                assert (await sb.run_code("6 * 7")).text == "42"
            finally:
                await sb.kill()

    asyncio.run(main())
