"""Live tests of the SDK's side of the server's record against a real `sandlot serve` (see
conftest.py): durable jobs, the lifecycle event stream, per-sandbox metrics, lineage and run
bundles; plus the record's error codes mapped to classes (offline)."""

from __future__ import annotations

import json
import tarfile
import threading
from typing import Any, Dict, List

import pytest

import sandlot
from sandlot import Sandbox
from sandlot import errors as E


@pytest.mark.parametrize(
    "status,code,cls",
    [
        (503, "audit_unavailable", E.AuditUnavailable),
        (404, "job_not_found", E.JobNotFound),
        (429, "job_queue_full", E.JobQueueFull),
        (409, "job_ended", E.JobEnded),
        (404, "webhook_not_found", E.WebhookNotFound),
        (400, "unsupported_bundle", E.UnsupportedBundle),
    ],
)
def test_record_codes_map_to_classes(status: int, code: str, cls: type) -> None:
    err = E.error_from_response(status, json.dumps({"error": {"code": code, "message": "m"}}).encode(), {"Retry-After": "3"})
    assert type(err) is cls and (err.code, err.status, err.message) == (code, status, "m")
    if cls is E.JobQueueFull:
        assert err.retry_after == 3.0
    assert issubclass(E.JobNotFound, E.NotFoundError) and issubclass(E.UnsupportedBundle, E.InvalidRequest)


@pytest.mark.live
def test_jobs_run_in_order_and_keep_their_results(sandlot_url: str) -> None:
    with Sandbox(url=sandlot_url) as sb:
        first = sb.submit_job("import time\ntime.sleep(0.3)\nx = 20")
        second = sb.submit_job("x + 22", metadata={"step": 2})
        assert first.state in ("queued", "running") and first.id.startswith("job_")
        ex = second.wait(timeout=60)
        assert second.state == "succeeded" and ex is not None and ex.text == "42"
        assert first.refresh().state == "succeeded"
        assert [j.id for j in sb.jobs()] == [first.id, second.id]
        # A queued job can be cancelled and never runs; an ended one cannot be cancelled.
        slow = sb.submit_job("import time\ntime.sleep(30)")
        queued = sb.submit_job("y = 1")
        assert queued.cancel().state == "cancelled"
        assert slow.cancel().state == "cancelled"
        with pytest.raises(E.JobEnded):
            second.cancel()
        assert sb.run_code("'y' in dir()").text == "False"
        with pytest.raises(E.JobNotFound):
            sandlot.Job(sb._http, {"id": "job_neverseen0000"}).refresh()


@pytest.mark.live
def test_the_event_stream_tells_what_happened(sandlot_url: str) -> None:
    seen: List[Dict[str, Any]] = []
    ready = threading.Event()
    done = threading.Event()
    target: Dict[str, str] = {}

    def listen() -> None:
        for ev in sandlot.events(url=sandlot_url, kinds=["created", "executed", "killed"]):
            ready.set()
            seen.append(ev)
            if ev.get("kind") == "killed" and ev.get("sandbox_id") == target.get("id"):
                break
        done.set()

    # The stream starts empty: a first sandbox's events tell the listener is attached.
    t = threading.Thread(target=listen, daemon=True)
    t.start()
    for _ in range(20):
        with Sandbox(url=sandlot_url):
            pass
        if ready.wait(timeout=0.5):
            break
    assert ready.is_set(), "no event arrived"
    with Sandbox(url=sandlot_url) as sb:
        target["id"] = sb.id
        ex = sb.run_code("1 + 1")
    assert done.wait(timeout=30), seen
    mine = [e for e in seen if e.get("sandbox_id") == sb.id]
    assert [e["kind"] for e in mine] == ["created", "executed", "killed"], seen
    assert mine[1]["execution_id"] == ex.id and mine[1]["detail"]["end_state"] == "ok"
    assert all(isinstance(e["seq"], int) for e in mine) and mine[0]["seq"] < mine[2]["seq"]


@pytest.mark.live
def test_metrics_lineage_and_a_bundle(sandlot_url: str, tmp_path) -> None:
    with Sandbox(url=sandlot_url) as sb:
        sb.files.write("data.csv", b"x\n1\n2\n3\n")
        before = sb.metrics()
        assert before["sandbox_id"] == sb.id and before["memory_limit_bytes"] > 0
        sb.run_code("import pandas as pd\nbig = bytearray(64 << 20)\nint(pd.read_csv('data.csv').x.sum())")
        after = sb.metrics()
        assert after["memory_bytes"] >= before["memory_bytes"] + (48 << 20)
        assert after["cpu_time_ms"] >= before["cpu_time_ms"]
        lineage = sb.lineage()
        text = json.dumps(lineage)
        assert sb.id in text and "data.csv" in text
        path = sb.save_bundle(tmp_path / "run.tar.gz")
    with tarfile.open(path) as tar:
        names = tar.getnames()
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
    assert manifest["bundle_version"] == 1 and any(n.startswith("steps/") for n in names)
    assert any(n.startswith("inputs/") for n in names)


@pytest.mark.live
async def test_the_async_client_has_the_record_too(sandlot_url: str, tmp_path) -> None:
    """The asyncio client reaches every part of the record the synchronous one does, with the
    same answers: jobs (submit, wait, cancel, list), metrics, lineage, run bundles, health and
    the event stream."""
    import asyncio

    assert (await sandlot.AsyncSandbox.health(url=sandlot_url))["status"] == "ok"
    seen: List[Dict[str, Any]] = []

    async def listen(target: str) -> None:
        async for ev in sandlot.async_events(url=sandlot_url, kinds=["created", "executed", "killed"]):
            seen.append(ev)
            if ev.get("kind") == "killed" and ev.get("sandbox_id") == target:
                return

    async with sandlot.AsyncSandbox.create(url=sandlot_url) as sb:
        listener = asyncio.create_task(listen(sb.id))
        first = await sb.submit_job("import time\ntime.sleep(0.3)\nx = 20")
        second = await sb.submit_job("x + 22", metadata={"step": 2})
        assert isinstance(first, sandlot.AsyncJob) and first.id.startswith("job_")
        ex = await second.wait(timeout=60)
        assert second.state == "succeeded" and ex is not None and ex.text == "42"
        assert (await first.refresh()).state == "succeeded"
        assert [j.id for j in await sb.jobs()] == [first.id, second.id]
        slow = await sb.submit_job("import time\ntime.sleep(30)")
        queued = await sb.submit_job("y = 1")
        assert (await queued.cancel()).state == "cancelled"
        assert (await slow.cancel()).state == "cancelled"
        with pytest.raises(E.JobEnded):
            await second.cancel()
        with pytest.raises(E.JobNotFound):
            await sandlot.AsyncJob(sb._http, {"id": "job_neverseen0000"}).refresh()
        with pytest.raises(TimeoutError):
            await (await sb.submit_job("import time\ntime.sleep(5)")).wait(timeout=0.3)

        await sb.files.write("data.csv", b"x\n1\n2\n3\n")
        metrics = await sb.metrics()
        assert metrics["sandbox_id"] == sb.id and metrics["memory_limit_bytes"] > 0
        assert "data.csv" in json.dumps(await sb.lineage())
        path = await sb.save_bundle(tmp_path / "run.tar.gz")
        sid = sb.id
    await asyncio.wait_for(listener, timeout=30)
    assert not (tmp_path / "run.tar.gz.partial").exists()
    with tarfile.open(path) as tar:
        assert json.load(tar.extractfile("manifest.json"))["bundle_version"] == 1  # type: ignore[arg-type]
    mine = [e["kind"] for e in seen if e.get("sandbox_id") == sid]
    # The listener may attach after the creation; what it saw ends with the kill.
    assert mine and mine[-1] == "killed" and "executed" in mine, seen
