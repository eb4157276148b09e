"""The offline tests stand in for the server: their fixtures and the fake server must answer
what the server's OpenAPI document (``crates/sandlot-api/openapi.json``) says it answers, so
the SDK tested offline is the SDK that works against the real server."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from typing import Any, Dict, List, Tuple

import httpx
import pytest

from ._fake import FIXTURES, FakeSandlot, fixture
from ._openapi import OpenAPI, errors_of

SPEC = OpenAPI()

# Every fixture, with the responses (operationId, status) it stands for.
JSON_FIXTURES: Dict[str, List[Tuple[str, str]]] = {
    "exec_dataframe_plots.json": [("execute", "200")],
    "exec_error.json": [("execute", "200")],
    "exec_bash.json": [("execute", "200")],
    "exec_timeout.json": [("execute", "200")],
    "exec_truncated.json": [("execute", "200")],
    "exec_artifacts.json": [("execute", "200")],
    "executions.json": [("listExecutions", "200")],
    "sandbox.json": [("createSandbox", "201"), ("getSandbox", "200")],
    "files_list.json": [("listFiles", "200")],
    "contexts.json": [("listContexts", "200")],
    "background.json": [("getBackgroundOutput", "200")],
    "template_building.json": [("createTemplate", "202"), ("getTemplate", "200")],
    "template_ready.json": [("getTemplate", "200")],
    "template_failed.json": [("getTemplate", "200")],
    "templates_list.json": [("listTemplates", "200")],
    "sandbox_paused.json": [("pauseSandbox", "200"), ("getSandbox", "200")],
    "sandbox_resumed.json": [("resumeSandbox", "200"), ("getSandbox", "200")],
    "fork_result.json": [("forkSandbox", "201")],
    "snapshot.json": [("createSnapshot", "201"), ("getSnapshot", "200")],
    "snapshots_list.json": [("listSnapshots", "200")],
    "sandbox_from_snapshot.json": [("createSandbox", "201"), ("getSandbox", "200")],
    "volume.json": [("createVolume", "201"), ("getVolume", "200")],
    "volumes_list.json": [("listVolumes", "200")],
    "sandbox_with_volumes.json": [("createSandbox", "201"), ("getSandbox", "200")],
}
SSE_FIXTURES = {"stream_dataframe_plots.sse": ("execute", "200")}
BYTES_FIXTURES = {"artifact_scores.csv": ("getArtifact", "200")}
NOT_FIXTURES = {"make_fixtures.py"}


def test_every_fixture_is_checked():
    checked = set(JSON_FIXTURES) | set(SSE_FIXTURES) | set(BYTES_FIXTURES) | NOT_FIXTURES
    assert sorted(os.listdir(FIXTURES)) == sorted(checked)


@pytest.mark.parametrize(
    "name,operation,status",
    [(name, op, status) for name, responses in JSON_FIXTURES.items() for op, status in responses],
)
def test_json_fixture_matches_the_openapi_document(name, operation, status):
    assert errors_of(SPEC.validator(operation, status), fixture(name)) == []


def _sse_events(text: str) -> List[Tuple[str, str]]:
    """(event, data) of each event of a transcript; comment lines skipped."""
    events = []
    for block in text.split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        fields: Dict[str, List[str]] = {}
        for line in lines:
            key, _, value = line.partition(":")
            fields.setdefault(key, []).append(value[1:] if value.startswith(" ") else value)
        events.append(("".join(fields.get("event", ["message"])), "\n".join(fields.get("data", []))))
    return events


def _check_sse(text: str, operation: str, status: str) -> List[str]:
    """Problems of an execute event stream: each output event is an OutputEvent named by its
    type, and the stream ends with one done whose data is the JSON response (or, when the
    execution failed after the stream started, one api_error whose data is an Error)."""
    assert "text/event-stream" in SPEC.content_types(operation, status)
    output = SPEC.component("OutputEvent")
    kinds = set(SPEC.doc["components"]["schemas"]["OutputEvent"]["discriminator"]["mapping"])
    last = {"done": SPEC.validator(operation, status), "api_error": SPEC.component("Error")}
    events = _sse_events(text)
    problems = []
    for i, (event, data) in enumerate(events):
        body: Any = json.loads(data)
        if event in last:
            problems += [f"{event}: {e}" for e in errors_of(last[event], body)]
            if i != len(events) - 1:
                problems.append(f"event {i}: {event} is not the last event")
        elif event in kinds:
            problems += [f"event {i} ({event}): {e}" for e in errors_of(output, body)]
            if body.get("type") != event:
                problems.append(f"event {i}: named {event!r} but its type is {body.get('type')!r}")
        else:
            problems.append(f"event {i}: unknown event {event!r}")
    if not events or events[-1][0] not in last:
        problems.append("the stream does not end with done or api_error")
    return problems


@pytest.mark.parametrize("name", sorted(SSE_FIXTURES))
def test_sse_fixture_matches_the_openapi_document(name):
    assert _check_sse(fixture(name), *SSE_FIXTURES[name]) == []


def test_the_checks_refuse_what_the_server_would_not_send():
    # Positive controls: a field the server does not have, a missing one, a wrong enum value,
    # an event stream without its done.
    result = fixture("exec_bash.json")
    assert errors_of(SPEC.validator("execute", "200"), dict(result, surprise=1)) != []
    assert errors_of(SPEC.validator("execute", "200"), {k: v for k, v in result.items() if k != "stdout"}) != []
    assert errors_of(SPEC.validator("getSandbox", "200"), dict(fixture("sandbox.json"), state="napping")) != []
    assert errors_of(SPEC.validator("getSandbox", "200"), dict(fixture("sandbox.json"), created_at="yesterday")) != []
    assert errors_of(SPEC.validator("getSandbox", "200"), {k: v for k, v in fixture("sandbox.json").items() if k != "on_idle"}) != []
    assert errors_of(SPEC.validator("getSandbox", "200"), dict(fixture("sandbox.json"), on_idle="sleep")) != []
    restore = fixture("sandbox_resumed.json")["last_restore"]
    assert errors_of(SPEC.validator("resumeSandbox", "200"), dict(fixture("sandbox.json"), last_restore=dict(restore, source="magic"))) != []
    assert errors_of(SPEC.validator("getSnapshot", "200"), dict(fixture("snapshot.json"), id="snap_xyz")) != []
    assert errors_of(SPEC.validator("getSnapshot", "200"), dict(fixture("snapshot.json"), name=None)) == []
    assert errors_of(SPEC.validator("forkSandbox", "201"), dict(fixture("fork_result.json"), not_captured=[{"name": "x"}])) != []
    assert errors_of(SPEC.validator("getVolume", "200"), {k: v for k, v in fixture("volume.json").items() if k != "mounted_by"}) != []
    assert errors_of(SPEC.validator("getSandbox", "200"), dict(fixture("sandbox.json"), volumes=[{"name": "v", "path": "p", "ro": True}])) != []
    for code in ("snapshot_not_found", "state_corrupt", "capture_failed", "volume_not_found", "volume_in_use"):
        assert errors_of(SPEC.component("Error"), {"error": {"code": code, "message": "m"}}) == []
    assert _check_sse('event: stdout\ndata: {"type":"stdout","text":"x"}\n\n', "execute", "200") != []
    assert _check_sse('event: api_error\ndata: {"error":{"code":"sandbox_gone","message":"m"}}\n\n', "execute", "200") == []
    assert _check_sse('event: api_error\ndata: {"error":{"code":"gone","message":"m"}}\n\n', "execute", "200") != []


def test_the_artifact_fixture_is_the_one_the_execution_lists():
    with open(os.path.join(FIXTURES, "artifact_scores.csv"), "rb") as f:
        data = f.read()
    operation, status = BYTES_FIXTURES["artifact_scores.csv"]
    assert SPEC.content_types(operation, status)  # a body of bytes, any media type
    sha = hashlib.sha256(data).hexdigest()
    listed = [a for a in fixture("exec_artifacts.json")["artifacts"] if a["sha256"] == sha]
    assert [(a["size"], a["url"]) for a in listed] == [(len(data), f"/v1/artifacts/{sha}")]


def test_fixtures_are_what_make_fixtures_writes(tmp_path):
    # The files checked above are the generator's output, so regenerating them keeps them valid.
    spec = importlib.util.spec_from_file_location("make_fixtures", os.path.join(FIXTURES, "make_fixtures.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.HERE = str(tmp_path)
    module.main()
    written = sorted(os.listdir(tmp_path))
    assert written == sorted(set(os.listdir(FIXTURES)) - NOT_FIXTURES)
    for name in written:
        with open(os.path.join(FIXTURES, name), "rb") as kept, open(tmp_path / name, "rb") as fresh:
            assert kept.read() == fresh.read(), f"{name} differs from what make_fixtures.py writes"


def test_the_fake_server_answers_like_the_server():
    # Every route of the fake, once: its JSON answers (built from the fixtures or by itself)
    # must validate against the operation and status the real server would answer with.
    fake = FakeSandlot()
    client = httpx.Client(base_url="http://sandlot.test", transport=httpx.MockTransport(fake))
    calls = [
        ("POST", "/v1/sandboxes", {"template": "default", "env": {"A": "1"}}),
        ("GET", "/v1/sandboxes", None),
        ("GET", "/v1/sandboxes/sbx_fake0001", None),
        ("POST", "/v1/sandboxes/sbx_fake0001/execute", {"code": "1", "language": "python"}),
        ("POST", "/v1/sandboxes/sbx_fake0001/interrupt", None),
        ("GET", "/v1/sandboxes/sbx_fake0001/executions", None),
        ("POST", "/v1/sandboxes/sbx_fake0001/contexts", {}),
        ("GET", "/v1/sandboxes/sbx_fake0001/contexts", None),
        ("POST", "/v1/sandboxes/sbx_fake0001/contexts/ctx_fake0002/restart", None),
        ("PUT", "/v1/sandboxes/sbx_fake0001/files/dir/a.txt", b"hello"),
        ("GET", "/v1/sandboxes/sbx_fake0001/files", None),
        ("POST", "/v1/templates", {"name": "answer", "setup": "x = 41"}),
        ("GET", "/v1/templates", None),
        ("GET", "/v1/templates/answer", None),
        ("GET", "/v1/templates/answer", None),
        ("GET", "/v1/sandboxes/sbx_missing", None),
        ("GET", "/v1/health", None),
        # saved state: fork, pause (and the auto-resume of an execute), resume, snapshots
        ("POST", "/v1/sandboxes/sbx_fake0001/fork", {"count": 2, "same_seed": False}),
        ("POST", "/v1/sandboxes/sbx_fake0001/fork", {"count": 101}),
        ("POST", "/v1/sandboxes/sbx_fake0001/pause", None),
        ("POST", "/v1/sandboxes/sbx_fake0001/pause", None),
        ("GET", "/v1/sandboxes/sbx_fake0001", None),
        ("POST", "/v1/sandboxes/sbx_fake0001/execute", {"code": "1"}),
        ("POST", "/v1/sandboxes/sbx_fake0001/pause", None),
        ("POST", "/v1/sandboxes/sbx_fake0001/resume", None),
        ("POST", "/v1/sandboxes/sbx_fake0001/resume", None),
        ("POST", "/v1/sandboxes/sbx_fake0001/snapshots", {"name": "base"}),  # the fake's 5th id
        ("POST", "/v1/sandboxes/sbx_fake0001/snapshots", {}),
        ("GET", "/v1/snapshots", None),
        ("GET", f"/v1/snapshots/snap_{5:032x}", None),
        ("POST", "/v1/sandboxes", {"from_snapshot": f"snap_{5:032x}", "on_idle": "pause"}),
        ("POST", "/v1/sandboxes", {"from_snapshot": "snap_missing"}),
        ("DELETE", f"/v1/snapshots/snap_{5:032x}", None),
        ("GET", f"/v1/snapshots/snap_{5:032x}", None),
        # volumes: created (and a name taken), its files, mounted read-only and read-write (a
        # second writer, an unknown volume refused), deleting one in use refused
        ("POST", "/v1/volumes", {"name": "dataset", "size_mb": 64}),
        ("POST", "/v1/volumes", {"name": "dataset"}),
        ("POST", "/v1/volumes", {"name": "Bad/Name"}),
        ("PUT", "/v1/volumes/dataset/files/in/a.csv", b"a,b\n1,2\n"),
        ("GET", "/v1/volumes/dataset/files", None),
        ("POST", "/v1/sandboxes", {"volumes": [{"name": "dataset", "path": "/workspace/data", "read_only": True}]}),
        ("POST", "/v1/sandboxes", {"volumes": [{"name": "dataset", "path": "data"}]}),
        ("POST", "/v1/sandboxes", {"volumes": [{"name": "dataset", "path": "data2"}]}),
        ("POST", "/v1/sandboxes", {"volumes": [{"name": "nope", "path": "data"}]}),
        ("GET", "/v1/volumes", None),
        ("GET", "/v1/volumes/dataset", None),
        ("DELETE", "/v1/volumes/dataset", None),
        ("GET", "/v1/volumes/nope", None),
        ("GET", "/v1/volumes/nope/files", None),
    ]
    problems = []
    for method, path, body in calls:
        kwargs: Dict[str, Any] = {"content": body} if isinstance(body, bytes) else {"json": body}
        resp = client.request(method, path, **kwargs)
        operation = SPEC.match(method, path)
        assert operation is not None, f"{method} {path} is not an operation of the API"
        status = str(resp.status_code)
        if resp.status_code == 204:
            assert SPEC.content_types(operation, status) == {}, f"{method} {path}: 204 with a body"
            continue
        problems += [f"{method} {path} {status}: {e}" for e in errors_of(SPEC.validator(operation, status), resp.json())]
    stream = client.post("/v1/sandboxes/sbx_fake0001/execute", json={"code": "1", "stream": True})
    problems += [f"stream: {p}" for p in _check_sse(stream.text, "execute", "200")]
    assert problems == []
