"""Tests that need no server: parsing of ExecutionResult JSON and SSE streams, errors, paths,
configuration, the client's requests (through an in-memory fake of the API), retries, and the
agent tool helpers. Fixtures in tests/fixtures follow crates/sandlot-types exactly."""

from __future__ import annotations

import asyncio
import base64
import builtins
import hashlib
import importlib.util
import io
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List

import httpx
import pytest

import sandlot
from sandlot import (
    Artifact,
    AsyncSandbox,
    AsyncTemplates,
    Context,
    Execution,
    ExecutionError,
    ExecutionRecord,
    ExecutionTimeout,
    FileEntry,
    Limits,
    Result,
    Sandbox,
    SandboxInfo,
    Template,
    Templates,
)
from sandlot import errors as E
from sandlot._core import (
    ConnectionConfig,
    StreamState,
    encode_file_path,
    workspace_relative,
)
from sandlot._sse import SSEDecoder, SSEEvent, iter_sse
from sandlot.tools import (
    AsyncToolDispatcher,
    ToolDispatcher,
    format_execution,
    run_bash_tool,
    run_python_tool,
)

from ._fake import FakeSandlot, api_error, fixture

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _no_env(monkeypatch, tmp_path):
    monkeypatch.delenv("SANDLOT_URL", raising=False)
    monkeypatch.delenv("SANDLOT_API_KEY", raising=False)
    # nor a local server's key file (the SDK reads one for a loopback URL)
    monkeypatch.setenv("SANDLOT_DATA_DIR", str(tmp_path / "no-server"))


def fake_sandbox(fake: FakeSandlot, **kw) -> Sandbox:
    return Sandbox(url="http://sandlot.test", transport=httpx.MockTransport(fake), **kw)


# ---------------------------------------------------------------------------------------------
# Execution parsing
# ---------------------------------------------------------------------------------------------


def test_execution_results_in_order():
    ex = Execution.from_json(fixture("exec_dataframe_plots.json"))
    assert [r.formats() for r in ex.results] == [["text", "html"], ["text", "png"], ["text", "png"], ["text"]]
    assert [r.is_main_result for r in ex.results] == [False, False, False, True]
    table = ex.results[0]
    assert "<table" in table.html and table.text.startswith("   a  b")
    for r in ex.results[1:3]:
        raw = r.png_bytes()
        assert raw[:8] == PNG_MAGIC and len(raw) > 1000
        assert r.png == r.raw["image/png"] and r.is_image
    assert ex.text == "6" and ex.main_result is ex.results[3]
    assert ex.logs.stdout == ["rows: 3\n", "done printing\n"] and ex.logs.stderr == []
    assert ex.stdout == "rows: 3\ndone printing\n"
    assert ex.end_state == "ok" and ex.ok and ex.error is None
    assert ex.exit_code is None and ex.duration_ms == 812.4 and ex.cpu_time_ms == 640.2
    assert ex.peak_memory_bytes == 187695104 and ex.sandbox_alive
    assert ex.artifacts == [] and ex.raw["id"] == "exe_01" and ex.id == "exe_01"
    assert len(list(ex.images())) == 2
    assert ex.raise_for_error() is ex
    assert "end_state='ok'" in repr(ex)


def test_execution_artifacts_parsed():
    ex = Execution.from_json(fixture("exec_artifacts.json"))
    assert ex.context == "ctx_5d2c8e1f0a9b4c3d" and "artifacts=2" in repr(ex)
    csv, big = ex.artifacts
    assert isinstance(csv, Artifact) and csv.available and csv.name == "scores.csv"
    data = (Path(__file__).parent / "fixtures" / "artifact_scores.csv").read_bytes()
    assert (csv.path, csv.size, csv.mime_type, csv.change) == ("out/scores.csv", len(data), "text/csv", "created")
    assert csv.sha256 == hashlib.sha256(data).hexdigest() and csv.url == "/v1/artifacts/" + csv.sha256
    assert csv.to_json() == fixture("exec_artifacts.json")["artifacts"][0]
    assert Artifact.from_json(csv.to_json()) == csv
    assert (big.path, big.change, big.sha256, big.url, big.available) == ("model.bin", "modified", "", "", False)
    with pytest.raises(E.FileTooLarge):
        big.read()
    with pytest.raises(RuntimeError, match="not bound"):
        csv.read()  # parsed without a client
    # partial or missing artifact JSON degrades gracefully
    doc = fixture("exec_bash.json")
    doc["artifacts"] = [{"path": "out.csv", "size": 10}, "junk"]
    (a,) = Execution.from_json(doc).artifacts
    assert (a.path, a.size, a.sha256, a.mime_type) == ("out.csv", 10, "", "application/octet-stream")
    del doc["artifacts"]
    assert Execution.from_json(doc).artifacts == []


def test_result_save(tmp_path):
    ex = Execution.from_json(fixture("exec_dataframe_plots.json"))
    fig = ex.results[1]
    p = fig.save_png(tmp_path / "fig.png")
    assert Path(p).read_bytes() == fig.png_bytes()
    assert Path(fig.save(tmp_path / "fig2.png")).read_bytes()[:8] == PNG_MAGIC
    assert Path(fig.save(tmp_path / "noext")).read_bytes()[:8] == PNG_MAGIC  # first image format
    assert Path(ex.results[0].save(tmp_path / "t.html")).read_text() == ex.results[0].html
    with pytest.raises(ValueError):
        ex.results[0].save_png(tmp_path / "x.png")
    with pytest.raises(ValueError):
        ex.results[3].save(tmp_path / "x.unknownext")


def test_result_formats_and_reprs():
    r = Result(
        {
            "text/plain": "x",
            "text/markdown": "**x**",
            "application/json": {"a": 1},
            "text/latex": "$x$",
            "image/svg+xml": "<svg/>",
            "application/javascript": "1",
            "application/vnd.custom+json": {},
        },
        is_main_result=True,
    )
    assert r.formats() == ["text", "markdown", "svg", "latex", "json", "javascript", "application/vnd.custom+json"]
    assert r.json == {"a": 1} and r.markdown == "**x**" and r.latex == "$x$" and r.svg == "<svg/>"
    assert r.extra == {"application/vnd.custom+json": {}}
    assert r._repr_markdown_() == "**x**" and str(r) == "x" and r.png is None and r.jpeg_bytes() is None
    # Jupyter may split strings into lists of lines
    assert Result({"text/plain": ["a\n", "b"]}).text == "a\nb"


def test_execution_error():
    ex = Execution.from_json(fixture("exec_error.json"))
    assert ex.end_state == "error" and not ex.ok
    assert ex.error.name == "ZeroDivisionError" and ex.error.value == "division by zero"
    assert isinstance(ex.error.traceback, str) and "return 1/0" in ex.error.traceback
    assert isinstance(ex.error.traceback_lines, list) and len(ex.error.traceback_lines) == 5
    assert ex.logs.stdout == ["before\n"] and ex.results == []
    with pytest.raises(ExecutionError) as info:
        ex.raise_for_error()
    assert info.value.name == "ZeroDivisionError" and info.value.execution is ex
    assert "division by zero" in str(info.value) and not isinstance(info.value, ExecutionTimeout)
    assert isinstance(info.value, sandlot.SandlotError)


def test_execution_timeout_and_bash():
    ex = Execution.from_json(fixture("exec_timeout.json"))
    with pytest.raises(ExecutionTimeout) as info:
        ex.raise_for_error()
    assert isinstance(info.value, ExecutionError) and info.value.end_state == "timeout"
    bash = Execution.from_json(fixture("exec_bash.json"))
    assert bash.language == "bash" and bash.exit_code == 2 and bash.error is None
    assert bash.logs.stderr == ["ls: cannot access 'missing': No such file or directory\n"]
    with pytest.raises(ExecutionError, match="status 2"):
        bash.raise_for_error()


def test_execution_without_outputs_falls_back_to_summary_fields():
    ex = Execution.from_json(
        {"end_state": "ok", "stdout": "hi\n", "stderr": "", "result": {"text/plain": "3"}, "error": None}
    )
    assert ex.logs.stdout == ["hi\n"] and ex.text == "3" and ex.results[0].is_main_result


def test_records_and_infos():
    recs = [ExecutionRecord.from_json(d) for d in fixture("executions.json")["executions"]]
    assert recs[0].execution.error.name == "ZeroDivisionError" and recs[0].end_state == "error"
    assert recs[1].running and recs[1].execution is None and recs[1].code.startswith("import time")
    info = SandboxInfo.from_json(fixture("sandbox.json"))
    assert info.running and info.limits["memory_mb"] == 1024 and info.metadata == {"user": "alice"}
    entries = [FileEntry.from_json(d) for d in fixture("files_list.json")["entries"]]
    assert entries[0].is_dir and entries[1].is_file and entries[1].path == "data/a.csv" and entries[1].size == 12
    assert Limits(memory_mb=512).to_json() == {"memory_mb": 512}


# ---------------------------------------------------------------------------------------------
# SSE
# ---------------------------------------------------------------------------------------------


def test_sse_decoder_rules():
    text = (
        ": comment\r\n"
        "event: stdout\r\n"
        "data: {\"type\":\"stdout\",\r\n"
        "data:\"text\":\"a\"}\r\n"
        "\r\n"
        "retry: 1000\n"
        "id: 7\n"
        "data: plain\n"
        "\n"
        "event: done\n"
        "data: {}"
    )
    evs = list(iter_sse(text.splitlines(keepends=True)))
    assert evs[0] == SSEEvent(event="stdout", data='{"type":"stdout",\n"text":"a"}')
    assert evs[1].event == "message" and evs[1].data == "plain" and evs[1].id == "7"
    assert evs[2].event == "done" and evs[2].data == "{}"  # flushed at end of stream
    d = SSEDecoder()
    assert d.feed("data:x") is None and d.feed("").data == "x"  # no space after the colon
    assert d.feed("") is None  # a blank line with nothing pending dispatches nothing


def test_stream_state_replays_transcript_in_order():
    seen: List[Any] = []
    state = StreamState(
        on_stdout=lambda m: seen.append(("out", str(m), m.error)),
        on_stderr=lambda m: seen.append(("err", str(m))),
        on_result=lambda r: seen.append(("res", r.is_main_result, tuple(r.formats()))),
        on_error=lambda e: seen.append(("error", e.name)),
    )
    for ev in iter_sse(fixture("stream_dataframe_plots.sse").splitlines()):
        for cb, arg in state.handle(ev):
            cb(arg)
    assert seen == [
        ("res", False, ("text", "html")),
        ("res", False, ("text", "png")),
        ("res", False, ("text", "png")),
        ("out", "rows: 3\n", False),
        ("out", "done printing\n", False),
        ("res", True, ("text",)),
    ]
    ex = state.finish()
    assert ex.text == "6" and len(ex.results) == 4
    assert [r.raw for r in ex.results] == [r.raw for r in state.results]


def test_stream_state_errors():
    st = StreamState()
    with pytest.raises(E.ConnectionError) as info:
        st.finish()
    assert info.value.code == "stream_incomplete"
    with pytest.raises(E.SandboxGone):
        st.handle(SSEEvent("error", json.dumps({"error": {"code": "sandbox_gone", "message": "gone"}})))
    with pytest.raises(E.ServerError):
        st.handle(SSEEvent("stdout", "{not json"))
    got = []
    st2 = StreamState(on_error=got.append)
    for cb, arg in st2.handle(SSEEvent("error", json.dumps({"type": "error", "name": "ValueError", "value": "v", "traceback": ["t"]}))):
        cb(arg)
    assert got[0].name == "ValueError" and st2.error.traceback == "t"


# ---------------------------------------------------------------------------------------------
# Errors, paths, configuration
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "status,code,cls",
    [
        (400, "invalid_request", E.InvalidRequest),
        (422, "invalid_argument", E.InvalidArgument),
        (413, "payload_too_large", E.PayloadTooLarge),
        (404, "sandbox_not_found", E.SandboxNotFound),
        (410, "sandbox_gone", E.SandboxGone),
        (404, "execution_not_found", E.ExecutionNotFound),
        (404, "template_not_found", E.TemplateNotFound),
        (409, "template_not_ready", E.TemplateNotReady),
        (400, "invalid_path", E.InvalidPath),
        (404, "file_not_found", E.FileNotFound),
        (400, "not_a_regular_file", E.NotARegularFile),
        (413, "file_too_large", E.FileTooLarge),
        (507, "workspace_full", E.WorkspaceFull),
        (409, "sandbox_busy", E.SandboxBusy),
        (503, "capacity_exhausted", E.CapacityExhausted),
        (500, "sandbox_failed", E.SandboxFailed),
        (500, "internal", E.ServerError),
        (404, "snapshot_not_found", E.SnapshotNotFound),
        (422, "state_corrupt", E.StateCorrupt),
        (409, "capture_failed", E.CaptureFailed),
        (404, "volume_not_found", E.VolumeNotFound),
        (409, "volume_in_use", E.VolumeInUse),
    ],
)
def test_error_codes_map_to_classes(status, code, cls):
    body = json.dumps({"error": {"code": code, "message": "msg here"}}).encode()
    err = E.error_from_response(status, body)
    assert type(err) is cls and err.code == code and err.status == status and err.message == "msg here"
    assert isinstance(err, sandlot.SandlotError) and code in str(err)


def test_error_fallbacks():
    assert isinstance(E.error_from_response(502, b"<html>bad gateway</html>"), E.ServerError)
    err = E.error_from_response(401, b"")
    assert isinstance(err, E.AuthenticationError) and err.message == "HTTP 401"
    assert isinstance(E.error_from_response(404, b'{"error":{"code":"new_code","message":"m"}}'), E.NotFoundError)
    assert isinstance(E.error_from_response(418, b"teapot"), E.InvalidRequest)
    assert E.SandboxNotFound.__mro__[1] is E.NotFoundError
    assert issubclass(E.FileTooLarge, E.PayloadTooLarge) and issubclass(E.SandboxFailed, E.ServerError)
    assert issubclass(E.SnapshotNotFound, E.NotFoundError) and issubclass(E.VolumeNotFound, E.NotFoundError)
    assert issubclass(sandlot.ConnectionError, builtins.ConnectionError)


def test_paths():
    assert workspace_relative("/workspace/a/b.txt") == "a/b.txt"
    assert workspace_relative("/workspace") == "" and workspace_relative("a") == "a"
    assert encode_file_path("dir with space/ü#?.txt") == "dir%20with%20space/%C3%BC%23%3F.txt"
    assert encode_file_path("/workspace/x/y") == "x/y"
    assert encode_file_path("../escape") == "%2E%2E/escape"
    assert encode_file_path("a/./b") == "a/%2E/b"
    assert encode_file_path("/etc/passwd") == "%2Fetc/passwd"
    with pytest.raises(E.InvalidPath):
        encode_file_path("")
    # httpx must not resolve the encoded dot segments
    url = httpx.URL("http://h/v1/sandboxes/s/files/" + encode_file_path("../x"))
    assert url.raw_path == b"/v1/sandboxes/s/files/%2E%2E/x"


def test_config(monkeypatch):
    cfg = ConnectionConfig.resolve()
    assert cfg.url == "http://127.0.0.1:7878" and cfg.api_key is None and "Authorization" not in cfg.headers()
    monkeypatch.setenv("SANDLOT_URL", "http://10.1.2.3:9000/v1/")
    monkeypatch.setenv("SANDLOT_API_KEY", "k3y")
    cfg = ConnectionConfig.resolve()
    assert cfg.url == "http://10.1.2.3:9000" and cfg.headers()["Authorization"] == "Bearer k3y"
    cfg = ConnectionConfig.resolve("127.0.0.1:1234", "other")
    assert cfg.url == "http://127.0.0.1:1234" and cfg.api_key == "other"
    assert all(0 < cfg.backoff_delay(i) <= 8 for i in range(10))


# ---------------------------------------------------------------------------------------------
# The sync client against the in-memory API
# ---------------------------------------------------------------------------------------------


def test_create_sends_body_and_auth():
    fake = FakeSandlot()
    sb = fake_sandbox(fake, api_key="secret", template="default", timeout=120, env={"A": 1},
                      metadata={"m": "v"}, limits={"memory_mb": 256, "pids": None}, max_lifetime=3600)
    req = fake.requests[0]
    assert req["method"] == "POST" and req["path"] == "/v1/sandboxes"
    assert json.loads(req["body"]) == {
        "template": "default", "env": {"A": "1"}, "metadata": {"m": "v"},
        "limits": {"memory_mb": 256}, "idle_timeout": 120, "max_lifetime": 3600,
    }
    assert req["headers"]["authorization"] == "Bearer secret"
    assert req["headers"]["user-agent"].startswith("sandlot-python/")
    assert sb.id.startswith("sbx_fake") and sb.sandbox_id == sb.id
    assert sb.info().metadata == {"m": "v"} and sb.is_running()
    sb.kill()


def test_minimal_create_body_and_context_manager():
    fake = FakeSandlot()
    with fake_sandbox(fake) as sb:
        assert json.loads(fake.requests[0]["body"]) == {}
        sid = sb.id
    assert fake.requests[-1]["method"] == "DELETE" and fake.sandboxes[sid]["state"] == "deleted"
    assert sb.kill() is False  # idempotent


def test_run_code_json():
    fake = FakeSandlot()
    with fake_sandbox(fake) as sb:
        ex = sb.run_code("df", timeout=5)
        req = fake.requests[-1]
        assert req["path"] == f"/v1/sandboxes/{sb.id}/execute"
        assert json.loads(req["body"]) == {"code": "df", "language": "python", "stream": False, "timeout": 5.0}
        assert req["headers"]["accept"] == "application/json"
        assert ex.text == "6" and len(ex.results) == 4
        fake.execute_result = fixture("exec_bash.json")
        bx = sb.run_bash("ls missing")
        assert json.loads(fake.requests[-1]["body"])["language"] == "bash" and bx.exit_code == 2
        with pytest.raises(E.InvalidArgument):
            sb.run_code("x", language="ruby")
        sb.run_code("x", context="ctx_1")
        assert json.loads(fake.requests[-1]["body"])["context"] == "ctx_1"


def test_run_code_streams_with_callbacks():
    fake = FakeSandlot()
    got: Dict[str, list] = {"out": [], "err": [], "res": [], "error": []}
    with fake_sandbox(fake) as sb:
        ex = sb.run_code("cell", on_stdout=got["out"].append, on_result=got["res"].append)
        req = fake.requests[-1]
        assert json.loads(req["body"])["stream"] is True and req["headers"]["accept"] == "text/event-stream"
        assert got["out"] == ["rows: 3\n", "done printing\n"] and got["out"][0].line == "rows: 3\n"
        assert [r.is_main_result for r in got["res"]] == [False, False, False, True]
        assert ex.text == "6" and ex.logs.stdout == got["out"]
        # errors arrive through on_error
        fake.execute_result = fixture("exec_error.json")
        ex = sb.run_code("1/0", on_error=got["error"].append, on_stderr=got["err"].append)
        assert got["error"][0].name == "ZeroDivisionError" and ex.end_state == "error"
        # stream=True without callbacks also streams
        sb.run_code("x", stream=True)
        assert json.loads(fake.requests[-1]["body"])["stream"] is True


def test_stream_request_answered_with_json_replays_callbacks():
    fake = FakeSandlot()
    fake.ignore_stream = True
    out = []
    with fake_sandbox(fake) as sb:
        ex = sb.run_code("cell", on_stdout=out.append)
    assert out == ["rows: 3\n", "done printing\n"] and ex.text == "6"


def test_stream_cut_before_done_raises():
    fake = FakeSandlot()
    fake.sse_override = 'event: stdout\ndata: {"type":"stdout","text":"partial"}\n\n'
    out = []
    with fake_sandbox(fake) as sb:
        with pytest.raises(E.ConnectionError) as info:
            sb.run_code("cell", on_stdout=out.append)
    assert out == ["partial"] and info.value.code == "stream_incomplete"


def test_stream_ended_by_api_error_raises_the_typed_error():
    # What the server sends when the execution fails after its stream started (openapi.json).
    fake = FakeSandlot()
    fake.sse_override = (
        'event: stdout\ndata: {"type":"stdout","text":"partial"}\n\n'
        'event: api_error\ndata: {"error":{"code":"sandbox_gone","message":"the sandbox was deleted"}}\n\n'
    )
    out = []
    with fake_sandbox(fake) as sb:
        with pytest.raises(E.SandboxGone) as info:
            sb.run_code("cell", on_stdout=out.append)
    assert out == ["partial"] and info.value.code == "sandbox_gone"
    assert "the sandbox was deleted" in str(info.value)


def test_callback_exception_propagates():
    fake = FakeSandlot()

    def boom(_):
        raise RuntimeError("callback failed")

    with fake_sandbox(fake) as sb:
        with pytest.raises(RuntimeError, match="callback failed"):
            sb.run_code("cell", on_stdout=boom)


def test_typed_errors_from_the_api():
    fake = FakeSandlot()
    transport = httpx.MockTransport(fake)
    with pytest.raises(E.SandboxNotFound) as info:
        Sandbox.connect("sbx_nope", url="http://sandlot.test", transport=transport)
    assert info.value.status == 404 and info.value.code == "sandbox_not_found" and "sbx_nope" in info.value.message
    sb = fake_sandbox(fake)
    sid = sb.id
    again = Sandbox.connect(sid, url="http://sandlot.test", transport=transport)
    assert again.id == sid
    with pytest.raises(E.InvalidPath):
        sb.files.read("../outside")
    with pytest.raises(E.InvalidPath):
        sb.files.write("/etc/passwd", b"x")
    with pytest.raises(E.FileNotFound):
        sb.files.read("missing.txt")
    assert sb.kill() is True
    with pytest.raises(E.SandboxGone) as info:
        sb_run = Sandbox.connect(sid, url="http://sandlot.test", transport=transport)  # noqa: F841
    assert info.value.code == "sandbox_gone"
    fake.sandboxes[sid]["state"] = "running"
    sb2 = Sandbox.connect(sid, url="http://sandlot.test", transport=transport)
    fake.sandboxes[sid]["state"] = "deleted"
    with pytest.raises(E.SandboxGone):
        sb2.run_code("1")
    with pytest.raises(E.SandboxGone):
        sb2.run_code("1", on_stdout=print)


def test_list_health_interrupt_executions():
    fake = FakeSandlot()
    t = httpx.MockTransport(fake)
    a, b = fake_sandbox(fake), fake_sandbox(fake)
    b.kill()
    assert [s.id for s in Sandbox.list(url="http://sandlot.test", transport=t)] == [a.id]
    assert {s.id for s in Sandbox.list(url="http://sandlot.test", all=True, transport=t)} == {a.id, b.id}
    assert fake.requests[-1]["path"] == "/v1/sandboxes?all=true"
    assert Sandbox.health(url="http://sandlot.test", transport=t) == {"status": "ok", "version": "0.1.0"}
    assert a.interrupt() is False
    recs = a.executions()
    assert len(recs) == 2 and recs[0].execution.end_state == "error"
    a.close()
    assert fake.sandboxes[a.id]["state"] == "deleted"


def test_background_output_and_the_execution_fields_about_it():
    fake = FakeSandlot()
    fake.execute_result = dict(
        fixture("exec_bash.json"), background_bytes=35, restarted={"reason": "oom", "lost": ["python state", "bash session"]}
    )
    with fake_sandbox(fake) as sb:
        ex = sb.run_code("1")
        assert ex.background_bytes == 35
        assert ex.restarted == sandlot.Restarted(reason="oom", lost=["python state", "bash session"])
        out = sb.background_output()
        assert fake.requests[-1]["path"] == f"/v1/sandboxes/{sb.id}/background"
        assert isinstance(out, sandlot.BackgroundOutput) and len(out) == 2
        assert [(e.stream, e.text) for e in out] == [("stdout", "server listening on 8000\n"), ("stderr", "GET / 200\n")]
        assert out.entries[0].at == "2025-11-22T03:30:01.250000Z"
        assert [e.execution_id for e in out] == ["exe_01", None]
        assert (out.stdout, out.stderr, out.dropped_bytes) == ("server listening on 8000\n", "GET / 200\n", 0)
        assert len(sb.background_output(clear=True)) == 2
        assert fake.requests[-1]["path"] == f"/v1/sandboxes/{sb.id}/background?clear=true"
        assert list(sb.background_output()) == []
    plain = sandlot.Execution.from_json(fixture("exec_error.json"))
    assert (plain.background_bytes, plain.restarted) == (0, None)


def test_close_without_kill_leaves_sandbox_running():
    fake = FakeSandlot()
    sb = fake_sandbox(fake)
    sb.close(kill=False)
    assert fake.sandboxes[sb.id]["state"] == "running"


def test_files_roundtrip_through_fake(tmp_path):
    fake = FakeSandlot()
    with fake_sandbox(fake) as sb:
        e = sb.files.write("notes/a b.txt", "héllo")
        assert e.path == "notes/a b.txt" and e.size == len("héllo".encode())
        assert fake.requests[-1]["path"].endswith("/files/notes/a%20b.txt")
        assert fake.requests[-1]["headers"]["content-type"] == "application/octet-stream"
        assert sb.files.read("/workspace/notes/a b.txt") == "héllo".encode()
        assert sb.files.read_text("notes/a b.txt") == "héllo"
        # a file-like object is streamed with its length
        bio = io.BytesIO(b"0123456789" * 1000)
        bio.seek(10)
        sb.files.write("f.bin", bio)
        req = fake.requests[-1]
        assert req["headers"]["content-length"] == str(9990) and req["body"] == (b"0123456789" * 1000)[10:]
        # an object with only read() (no seek, no fileno) is sent chunked
        class Reader:
            def __init__(self):
                self.parts = [b"ab", b"cd", b""]

            def read(self, n):
                return self.parts.pop(0)

        sb.files.write("r.bin", Reader())
        assert fake.requests[-1]["headers"].get("transfer-encoding") == "chunked"
        assert sb.files.read("r.bin") == b"abcd"
        # list, exists, remove
        assert [x.path for x in sb.files.list()] == ["f.bin", "r.bin"]
        assert [x.path for x in sb.files.list("notes")] == ["notes/a b.txt"]
        assert fake.requests[-1]["path"].endswith("/files?path=notes")
        assert len(sb.files.list(recursive=True)) == 3
        assert "recursive=true" in fake.requests[-1]["path"]
        assert sb.files.exists("notes/a b.txt") and not sb.files.exists("notes/zzz")
        sb.files.remove("r.bin")
        with pytest.raises(E.FileNotFound):
            sb.files.read("r.bin")
        # upload / download / upload_dir / write_many
        local = tmp_path / "local.bin"
        local.write_bytes(os.urandom(300_000))
        sb.files.upload(local, "up/local.bin")
        assert sb.files.upload(local).path == "local.bin"
        out = tmp_path / "down.bin"
        assert sb.files.download("up/local.bin", out) == str(out)
        assert out.read_bytes() == local.read_bytes() and not (tmp_path / "down.bin.part").exists()
        with pytest.raises(E.FileNotFound):
            sb.files.download("nope.bin", tmp_path / "nope.bin")
        assert not (tmp_path / "nope.bin").exists() and not (tmp_path / "nope.bin.part").exists()
        tree = tmp_path / "tree"
        (tree / "sub").mkdir(parents=True)
        (tree / "x.txt").write_text("x")
        (tree / "sub" / "y.txt").write_text("y")
        assert [e.path for e in sb.files.upload_dir(tree, "proj")] == ["proj/x.txt", "proj/sub/y.txt"]
        assert sb.files.read("proj/sub/y.txt") == b"y"
        got = sb.files.write_many([("m/1", b"1"), {"path": "m/2", "data": "2"}, SimpleNamespace(path="m/3", data=b"3")])
        assert [e.path for e in got] == ["m/1", "m/2", "m/3"]
        assert [e.path for e in sb.files.write_many({"m/4": "4"})] == ["m/4"]
        with pytest.raises(TypeError):
            sb.files.write("bad", 12345)


# ---------------------------------------------------------------------------------------------
# Retries: only connect failures are retried
# ---------------------------------------------------------------------------------------------


class Flaky(httpx.BaseTransport):
    def __init__(self, fail: int, exc: type, fake: FakeSandlot):
        self.fail, self.exc, self.calls = fail, exc, 0
        self.inner = httpx.MockTransport(fake)

    def handle_request(self, request):
        self.calls += 1
        if self.calls <= self.fail:
            raise self.exc("simulated", request=request)
        return self.inner.handle_request(request)


def _quick(cfg_kwargs=None):
    return dict(url="http://sandlot.test", retries=3, **(cfg_kwargs or {}))


def test_connect_errors_are_retried(monkeypatch):
    monkeypatch.setattr(ConnectionConfig, "backoff_delay", lambda self, attempt: 0.0)
    fake = FakeSandlot()
    t = Flaky(2, httpx.ConnectError, fake)
    sb = Sandbox(transport=t, **_quick())
    assert t.calls == 3 and sb.id
    t2 = Flaky(100, httpx.ConnectError, fake)
    with pytest.raises(sandlot.ConnectionError) as info:
        Sandbox(transport=t2, **_quick())
    assert t2.calls == 4 and isinstance(info.value, builtins.ConnectionError)
    assert info.value.code == "connection_error"


def test_execute_is_never_resent_after_it_was_sent(monkeypatch):
    monkeypatch.setattr(ConnectionConfig, "backoff_delay", lambda self, attempt: 0.0)
    fake = FakeSandlot()
    sb = fake_sandbox(fake)
    calls = []

    def hook(request):
        if request.url.path.endswith("/execute"):
            calls.append(1)
            raise httpx.ReadError("connection reset", request=request)
        return None

    fake.hook = hook
    with pytest.raises(sandlot.ConnectionError):
        sb.run_code("x = 1")
    with pytest.raises(sandlot.ConnectionError):
        sb.run_code("x = 1", on_stdout=print)
    assert len(calls) == 2  # one attempt each


def test_http_errors_are_not_retried(monkeypatch):
    monkeypatch.setattr(ConnectionConfig, "backoff_delay", lambda self, attempt: 0.0)
    fake = FakeSandlot()
    sb = fake_sandbox(fake)
    n = len(fake.requests)
    fake.hook = lambda request: api_error(500, "internal", "boom")
    with pytest.raises(E.ServerError):
        sb.run_code("x")
    fake.hook = lambda request: api_error(503, "capacity_exhausted", "full")
    with pytest.raises(E.CapacityExhausted):
        sb.info()
    assert len(fake.requests) == n + 2


def test_unreachable_server_raises_connection_error(monkeypatch):
    monkeypatch.setattr(ConnectionConfig, "backoff_delay", lambda self, attempt: 0.0)
    with pytest.raises(sandlot.ConnectionError):
        Sandbox(url="http://127.0.0.1:1", retries=1)


# ---------------------------------------------------------------------------------------------
# Incremental streaming over a real socket (a scripted SSE server on 127.0.0.1)
# ---------------------------------------------------------------------------------------------


class _SlowSSE(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.end_headers()
        res = fixture("exec_dataframe_plots.json")
        first = {"type": "stdout", "text": "first\n"}
        self.wfile.write(f"event: stdout\ndata: {json.dumps(first)}\n\n".encode())
        self.wfile.flush()
        time.sleep(1.0)
        self.wfile.write(f"event: done\ndata: {json.dumps(res)}\n\n".encode())
        self.wfile.flush()


def test_callbacks_fire_before_the_call_returns():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _SlowSSE)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        sb = Sandbox.__new__(Sandbox)
        from sandlot._http import SyncHTTP

        sb._setup(SyncHTTP(ConnectionConfig.resolve(f"http://127.0.0.1:{srv.server_port}")), SandboxInfo("sbx_x", "default", "running"))
        stamps = []
        ex = sb.run_code("x", on_stdout=lambda m: stamps.append((time.monotonic(), str(m))))
        returned = time.monotonic()
        assert stamps and stamps[0][1] == "first\n"
        assert returned - stamps[0][0] >= 0.5
        assert ex.text == "6"
        sb.close(kill=False)
    finally:
        srv.shutdown()


# ---------------------------------------------------------------------------------------------
# Contexts, artifacts, templates
# ---------------------------------------------------------------------------------------------


def test_contexts_and_template_fixtures_parse():
    ctxs = [Context.from_json(d) for d in fixture("contexts.json")["contexts"]]
    assert [c.id for c in ctxs] == ["default", "ctx_5d2c8e1f0a9b4c3d"] and str(ctxs[1]) == "ctx_5d2c8e1f0a9b4c3d"
    assert ctxs[0].created_at == "2025-11-22T03:29:58Z"
    building = Template.from_json(fixture("template_building.json"))
    assert building.is_building and not building.is_ready and building.prepare_seconds is None and building.error is None
    assert building.spec["setup"] == "x = 41" and building.version == "9c1e5b0a7d3f"
    ready = Template.from_json(fixture("template_ready.json"))
    assert ready.is_ready and ready.prepare_seconds == 0.42 and ready.raise_for_failure() is ready
    failed = Template.from_json(fixture("template_failed.json"))
    assert failed.is_failed and "NameError" in (failed.error or "")
    with pytest.raises(E.TemplateBuildFailed) as info:
        failed.raise_for_failure()
    assert info.value.template == "broken" and info.value.error == failed.error and "NameError" in str(info.value)
    names = [Template.from_json(d).name for d in fixture("templates_list.json")["templates"]]
    assert names == ["answer", "default"]


def test_contexts_through_fake():
    fake = FakeSandlot()
    with fake_sandbox(fake) as sb:
        assert [c.id for c in sb.contexts.list()] == ["default"]
        ctx = sb.contexts.create()
        assert isinstance(ctx, Context) and ctx.id.startswith("ctx_")
        assert sb.run_code("x", context=ctx).context == ctx.id
        assert json.loads(fake.requests[-1]["body"])["context"] == ctx.id
        assert sb.run_code("x", context=ctx.id, on_stdout=lambda m: None).context == ctx.id
        assert "context" not in json.loads(sb_body(fake, lambda: sb.run_code("x")))
        assert sb.contexts.restart(ctx).id == ctx.id
        assert fake.requests[-1]["path"].endswith(f"/contexts/{ctx.id}/restart")
        assert sb.contexts.restart("default").id == "default"
        with pytest.raises(E.InvalidArgument):
            sb.contexts.remove("default")
        sb.contexts.remove(ctx)
        assert fake.requests[-1]["method"] == "DELETE"
        assert [c.id for c in sb.contexts.list()] == ["default"]
        with pytest.raises(E.InvalidArgument):
            sb.run_code("x", context=ctx)
        with pytest.raises(E.InvalidArgument):
            sb.contexts.restart("")
        with pytest.raises(TypeError):
            sb.run_code("x", context=3)  # type: ignore[arg-type]


def sb_body(fake: FakeSandlot, call) -> bytes:
    call()
    return fake.requests[-1]["body"]


def test_artifacts_read_and_download_through_fake(tmp_path):
    fake = FakeSandlot()
    data = (Path(__file__).parent / "fixtures" / "artifact_scores.csv").read_bytes()
    fake.execute_result = fixture("exec_artifacts.json")
    fake.artifacts[hashlib.sha256(data).hexdigest()] = data
    sb = fake_sandbox(fake)
    ex = sb.run_code("write files")
    streamed = sb.run_code("write files", on_stdout=lambda m: None)
    rec = sb.executions()  # records parse too (fixture without artifacts)
    assert rec
    art = ex.artifacts[0]
    assert art.read() == data and art.read_text() == data.decode()
    assert fake.requests[-1]["path"] == "/v1/artifacts/" + art.sha256 and fake.requests[-1]["method"] == "GET"
    assert streamed.artifacts[0].read() == data
    assert sb.kill() is True
    # artifacts outlive the sandbox and its closed connection
    assert art.read() == data
    dest = tmp_path / "scores.csv"
    assert art.download(dest) == str(dest) and dest.read_bytes() == data
    assert not (tmp_path / "scores.csv.part").exists()
    gone = Artifact.from_json(dict(art.to_json(), sha256="0" * 64), client=sb._http)
    with pytest.raises(E.FileNotFound):
        gone.read()
    with pytest.raises(E.FileNotFound):
        gone.download(tmp_path / "gone.csv")
    assert not (tmp_path / "gone.csv").exists() and not (tmp_path / "gone.csv.part").exists()
    with pytest.raises(RuntimeError, match="Sandbox"):
        asyncio.run(art.aread())
    bad = Artifact.from_json(dict(art.to_json(), sha256="xyz"), client=sb._http)
    with pytest.raises(E.InvalidArgument):
        bad.read()


async def test_async_contexts_and_artifacts(tmp_path):
    fake = FakeSandlot()
    data = b"a,b\n1,2\n"
    doc = fixture("exec_artifacts.json")
    doc["artifacts"][0].update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    fake.execute_result = doc
    fake.artifacts[hashlib.sha256(data).hexdigest()] = data
    t = httpx.MockTransport(fake)
    async with AsyncSandbox.create(url="http://sandlot.test", transport=t) as sb:
        ctx = await sb.contexts.create()
        assert [c.id for c in await sb.contexts.list()] == ["default", ctx.id]
        ex = await sb.run_code("x", context=ctx)
        assert ex.context == ctx.id
        assert (await sb.contexts.restart(ctx)).id == ctx.id
        await sb.contexts.remove(ctx.id)
        assert [c.id for c in await sb.contexts.list()] == ["default"]
        art = ex.artifacts[0]
        assert await art.aread() == data
        with pytest.raises(RuntimeError, match="aread"):
            art.read()
    assert await art.aread() == data  # after the sandbox is gone
    assert await art.adownload(tmp_path / "x.csv") == str(tmp_path / "x.csv")
    assert (tmp_path / "x.csv").read_bytes() == data


def test_templates_through_fake(monkeypatch):
    fake = FakeSandlot()
    monkeypatch.setattr(time, "sleep", lambda s: None)
    with Templates(url="http://sandlot.test", transport=httpx.MockTransport(fake)) as templates:
        tpl = templates.create(name="answer", setup="x = 41", imports=["math"], description=None, limits=Limits(memory_mb=512))
        assert tpl.is_building and tpl.name == "answer"
        sent = json.loads(fake.requests[-1]["body"])
        assert sent == {"name": "answer", "setup": "x = 41", "imports": ["math"], "limits": {"memory_mb": 512}}
        assert fake.requests[-1]["path"] == "/v1/templates"
        ready = templates.wait_ready("answer", timeout=5, poll_interval=0)
        assert ready.is_ready and ready.prepare_seconds == 0.25
        templates.create({"name": "broken", "setup": "raise RuntimeError('boom')", "packages": ["x==1"]})
        assert json.loads(fake.requests[-1]["body"])["packages"] == ["x==1"]
        with pytest.raises(E.TemplateBuildFailed) as info:
            templates.wait_ready("broken", poll_interval=0)
        assert info.value.error == "setup raised RuntimeError: boom" and info.value.template == "broken"
        assert [t.name for t in templates.list()] == ["answer", "broken"]
        assert templates.get("answer").is_ready
        with pytest.raises(E.TemplateNotFound):
            templates.get("nope")
        with pytest.raises(E.TemplateNotFound):
            templates.wait_ready("nope")
        fake.template_polls = 10**9
        templates.create(name="slow")
        with pytest.raises(E.TemplateBuildTimeout) as tinfo:
            templates.wait_ready("slow", timeout=0, poll_interval=0)
        assert isinstance(tinfo.value, TimeoutError) and isinstance(tinfo.value, E.TemplateNotReady)
        with pytest.raises(E.InvalidArgument):
            templates.create(setup="x = 1")  # no name
        with pytest.raises(TypeError):
            templates.create(name="t", packages="numpy==2.0.0")
        # keywords win over the dict
        templates.create({"name": "a", "setup": "1"}, setup="2")
        assert json.loads(fake.requests[-1]["body"]) == {"name": "a", "setup": "2"}
        # delete: the tenant's own, or (operator) another tenant's with ?tenant=
        templates.delete("a")
        assert fake.requests[-1]["method"] == "DELETE" and fake.requests[-1]["path"] == "/v1/templates/a"
        with pytest.raises(E.TemplateNotFound):
            templates.delete("a")
        templates.delete("broken", tenant="acme")
        assert fake.requests[-1]["path"] == "/v1/templates/broken?tenant=acme"
    # a sandbox from a template: the name goes in the create body
    with fake_sandbox(fake, template="answer") as sb:
        assert sb.info().template == "answer"
        with Templates(url="http://sandlot.test", transport=httpx.MockTransport(fake)) as templates:
            with pytest.raises(E.TemplateInUse) as used:
                templates.delete("answer")
            assert used.value.code == "template_in_use" and sb.id in str(used.value)


async def test_async_templates():
    fake = FakeSandlot()
    fake.template_polls = 1
    async with AsyncTemplates(url="http://sandlot.test", transport=httpx.MockTransport(fake)) as templates:
        assert (await templates.create(name="answer", setup="x = 41")).is_building
        assert (await templates.wait_ready("answer", poll_interval=0)).is_ready
        assert [t.name for t in await templates.list()] == ["answer"]
        assert (await templates.get("answer")).spec["setup"] == "x = 41"
        await templates.create(name="bad", setup="raise X")
        with pytest.raises(E.TemplateBuildFailed):
            await templates.wait_ready("bad", poll_interval=0)
        await templates.delete("bad")
        assert [t.name for t in await templates.list()] == ["answer"]
        with pytest.raises(E.TemplateNotFound):
            await templates.delete("bad")


# ---------------------------------------------------------------------------------------------
# Async client
# ---------------------------------------------------------------------------------------------


async def test_async_sandbox_flow(tmp_path):
    fake = FakeSandlot()
    t = httpx.MockTransport(fake)
    seen = []

    async def on_result(r):
        await asyncio.sleep(0)
        seen.append(r.is_main_result)

    async with AsyncSandbox.create(url="http://sandlot.test", transport=t, metadata={"a": "b"}) as sb:
        assert (await sb.info()).metadata == {"a": "b"}
        assert len(await sb.background_output(clear=True)) == 2
        assert fake.requests[-1]["path"] == f"/v1/sandboxes/{sb.id}/background?clear=true"
        assert (await sb.background_output()).entries == []
        ex = await sb.run_code("cell", on_stdout=lambda m: seen.append(str(m)), on_result=on_result)
        assert ex.text == "6" and seen == [False, False, False, "rows: 3\n", "done printing\n", True]
        ex = await sb.run_code("cell")
        assert len(ex.results) == 4
        await sb.files.write("a.txt", "A")

        class AReader:
            def __init__(self):
                self.parts = [b"x" * 10, b"y", b""]

            async def read(self, n):
                return self.parts.pop(0)

        await sb.files.write("b.bin", AReader())
        await sb.files.write("c.bin", io.BytesIO(b"ccc"))
        assert await sb.files.read("b.bin") == b"x" * 10 + b"y"
        assert await sb.files.read_text("a.txt") == "A" and await sb.files.read("c.bin") == b"ccc"
        await sb.files.download("a.txt", tmp_path / "a.txt")
        assert (tmp_path / "a.txt").read_text() == "A"
        assert [e.path for e in await sb.files.list()] == ["a.txt", "b.bin", "c.bin"]
        await sb.files.remove("a.txt")
        assert not await sb.files.exists("a.txt")
        assert await sb.interrupt() is False and len(await sb.executions()) == 2
        other = await AsyncSandbox.connect(sb.id, url="http://sandlot.test", transport=t)
        assert other.id == sb.id
        await other.close(kill=False)
        sid = sb.id
    assert fake.sandboxes[sid]["state"] == "deleted"
    sb2 = await AsyncSandbox.create(url="http://sandlot.test", transport=t)
    assert [s.id for s in await AsyncSandbox.list(url="http://sandlot.test", transport=t)] == [sb2.id]
    async with sb2:
        pass
    assert fake.sandboxes[sb2.id]["state"] == "deleted"
    with pytest.raises(E.SandboxNotFound):
        await AsyncSandbox.connect("sbx_nope", url="http://sandlot.test", transport=t)
    with pytest.raises(TypeError):
        AsyncSandbox()


# ---------------------------------------------------------------------------------------------
# Saved state: fork, pause and resume, snapshots
# ---------------------------------------------------------------------------------------------

LOCK = sandlot.NotCaptured(name="lock", context="default", reason="TypeError: cannot pickle '_thread.lock' object")


def test_saved_state_fixtures_parse():
    paused = SandboxInfo.from_json(fixture("sandbox_paused.json"))
    assert paused.paused and not paused.running and paused.on_idle == "pause"
    assert paused.paused_at == "2025-11-22T03:49:58Z" and paused.last_restore is None
    resumed = SandboxInfo.from_json(fixture("sandbox_resumed.json"))
    assert resumed.running and resumed.paused_at is None
    assert resumed.last_restore == sandlot.LastRestore(at="2025-11-22T04:10:00.021Z", source="resume", variables=3, not_restored=[])
    plain = SandboxInfo.from_json(fixture("sandbox.json"))
    assert (plain.on_idle, plain.forked_from, plain.from_snapshot, plain.last_restore) == ("delete", None, None, None)
    started = SandboxInfo.from_json(fixture("sandbox_from_snapshot.json"))
    assert started.from_snapshot == "snap_0f1e2d3c4b5a69788796a5b4c3d2e1f0" and started.last_restore.source == "snapshot"
    assert [n.name for n in started.last_restore.not_restored] == ["model"]
    snap = sandlot.Snapshot.from_json(fixture("snapshot.json"))
    assert (snap.id, snap.name, snap.sandbox_id, str(snap)) == (
        "snap_0f1e2d3c4b5a69788796a5b4c3d2e1f0", "with-df", "sbx_7f3a9c2e4b1d4e6f", "snap_0f1e2d3c4b5a69788796a5b4c3d2e1f0")
    assert (snap.state_bytes, snap.workspace, snap.variables, snap.version) == (52613120, True, 3, 1)
    assert snap.not_captured == [LOCK] and snap.created_at == "2025-11-22T03:36:00Z"
    unnamed = sandlot.Snapshot.from_json(fixture("snapshots_list.json")["snapshots"][1])
    assert unnamed.name is None and unnamed.not_captured == []
    infos, not_captured, took = sandlot.ForkResult.parse(fixture("fork_result.json"))
    assert [i.forked_from for i in infos] == ["sbx_7f3a9c2e4b1d4e6f"] * 2 and not_captured == [LOCK] and took == 18.4


def test_fork_through_fake():
    fake = FakeSandlot()
    with fake_sandbox(fake, on_idle="pause", metadata={"m": "v"}) as sb:
        sb.files.write("data.txt", "parent data")
        forks = sb.fork(2)
        req = fake.requests[-1]
        assert (req["method"], req["path"]) == ("POST", f"/v1/sandboxes/{sb.id}/fork")
        assert json.loads(req["body"]) == {"count": 2, "same_seed": False}
        assert isinstance(forks, list) and isinstance(forks, sandlot.ForkResult) and len(forks) == 2
        assert all(type(c) is Sandbox for c in forks) and len({c.id for c in forks} | {sb.id}) == 3
        assert forks.not_captured == [LOCK] and forks.took_ms == 14.5
        assert [i.id for i in forks.infos] == [c.id for c in forks] and forks.raw["took_ms"] == 14.5
        # each child is its own handle: its own connection, closed by its own kill
        assert all(c._http is not sb._http for c in forks) and forks[0]._http is not forks[1]._http
        child = forks[0]
        info = child.info()
        assert info.forked_from == sb.id and info.last_restore.source == "fork"
        assert (info.metadata, info.on_idle) == ({"m": "v"}, "pause")
        assert child.files.read_text("data.txt") == "parent data"
        child.files.write("data.txt", "child data")
        assert sb.files.read_text("data.txt") == "parent data"
        assert child.kill() is True and forks[1].kill() is True
        assert sb.is_running() and fake.sandboxes[child.id]["state"] == "deleted"
        # one child by default, the same seed when asked
        assert len(sb.fork()) == 1 and json.loads(fake.requests[-1]["body"]) == {"count": 1, "same_seed": False}
        sb.fork(same_seed=True)
        assert json.loads(fake.requests[-1]["body"]) == {"count": 1, "same_seed": True}
        # the count is checked before anything is sent
        sent = len(fake.requests)
        for bad in (0, 101, True, 2.0):
            with pytest.raises(E.InvalidArgument):
                sb.fork(bad)
        assert len(fake.requests) == sent
        fake.capture_fails.add(sb.id)
        with pytest.raises(E.CaptureFailed) as err:
            sb.fork(3)
        assert err.value.status == 409 and "saving its state failed" in err.value.message


def test_pause_and_resume_through_fake():
    fake = FakeSandlot()
    with fake_sandbox(fake) as sb:
        sb.run_code("x = 1")
        info = sb.pause()
        assert fake.requests[-1]["method"] == "POST" and fake.requests[-1]["path"] == f"/v1/sandboxes/{sb.id}/pause"
        assert info.paused and info.paused_at and sb.info().state == "paused" and not sb.is_running()
        assert sb.pause().paused  # pausing a paused sandbox answers it unchanged
        # the next call resumes it
        assert sb.run_code("x").end_state == "ok"
        info = sb.info()
        assert info.running and info.paused_at is None and info.last_restore.source == "resume"
        sb.pause()
        info = sb.resume()
        assert fake.requests[-1]["path"] == f"/v1/sandboxes/{sb.id}/resume" and info.running
        assert sb.resume().running  # resuming a running sandbox answers it unchanged
        # a saved state damaged on disk: the sandbox stays paused
        sb.pause()
        fake.corrupt.add(sb.id)
        with pytest.raises(E.StateCorrupt) as err:
            sb.resume()
        assert err.value.status == 422 and sb.id in err.value.message
        with pytest.raises(E.StateCorrupt):
            sb.run_code("x")
        assert sb.info().paused
        fake.corrupt.clear()
        sb.resume()
        # a pause that cannot save: the sandbox keeps running
        fake.capture_fails.add(sb.id)
        with pytest.raises(E.CaptureFailed):
            sb.pause()
        assert sb.is_running()


def test_close_with_pause_then_connect_resumes():
    fake = FakeSandlot()
    t = httpx.MockTransport(fake)
    sb = fake_sandbox(fake)
    sid = sb.id
    sb.close(pause=True)
    assert fake.requests[-1]["path"] == f"/v1/sandboxes/{sid}/pause" and fake.sandboxes[sid]["state"] == "paused"
    assert sb.kill() is False  # the handle is closed; the sandbox is not deleted
    assert fake.sandboxes[sid]["state"] == "paused"
    # connect without resuming: a handle to the paused sandbox
    sent = len(fake.requests)
    idle = Sandbox.connect(sid, url="http://sandlot.test", transport=t, resume=False)
    assert [r["method"] for r in fake.requests[sent:]] == ["GET"] and idle._info.paused
    idle.close(kill=False)
    again = Sandbox.connect(sid, url="http://sandlot.test", transport=t)
    assert [(r["method"], r["path"]) for r in fake.requests[-2:]] == [
        ("GET", f"/v1/sandboxes/{sid}"), ("POST", f"/v1/sandboxes/{sid}/resume")]
    assert again.info().running and again.info().last_restore.source == "resume"
    # close(pause=True) works on a handle already closed with kill=False (a fresh connection)
    again.close(kill=False)
    again.close(pause=True)
    assert fake.sandboxes[sid]["state"] == "paused"
    # a pause that fails leaves the handle open and the sandbox running
    third = Sandbox.connect(sid, url="http://sandlot.test", transport=t)
    fake.capture_fails.add(sid)
    with pytest.raises(E.CaptureFailed):
        third.close(pause=True)
    assert third.is_running()
    fake.capture_fails.clear()
    # the context manager still deletes
    with third:
        pass
    assert fake.sandboxes[sid]["state"] == "deleted"
    with pytest.raises(E.SandboxGone):
        Sandbox.connect(sid, url="http://sandlot.test", transport=t)


def test_on_idle_and_from_snapshot_in_the_create_body():
    fake = FakeSandlot()
    with fake_sandbox(fake, on_idle="pause", timeout=60) as sb:
        assert json.loads(fake.requests[0]["body"]) == {"idle_timeout": 60, "on_idle": "pause"}
        assert sb.info().on_idle == "pause"
    sent = len(fake.requests)
    with pytest.raises(E.InvalidArgument):
        fake_sandbox(fake, on_idle="sleep")
    with pytest.raises(TypeError):
        fake_sandbox(fake, from_snapshot=3)
    assert len(fake.requests) == sent


def test_snapshots_through_fake():
    fake = FakeSandlot()
    t = httpx.MockTransport(fake)
    conn = {"url": "http://sandlot.test", "transport": t}
    with fake_sandbox(fake, template="default") as sb:
        sb.files.write("model.txt", "weights")
        snap = sb.snapshot("base")
        req = fake.requests[-1]
        assert (req["method"], req["path"], json.loads(req["body"])) == ("POST", f"/v1/sandboxes/{sb.id}/snapshots", {"name": "base"})
        assert isinstance(snap, sandlot.Snapshot) and snap.id.startswith("snap_") and snap.name == "base"
        assert snap.sandbox_id == sb.id and snap.not_captured == [LOCK] and snap.version == 1
        unnamed = sb.snapshot()
        assert json.loads(fake.requests[-1]["body"]) == {} and unnamed.name is None
        sb.files.write("model.txt", "changed after the snapshot")
    # two sandboxes from it (a Snapshot or its id), each with the snapshot's files
    with fake_sandbox(fake, from_snapshot=snap) as a, fake_sandbox(fake, from_snapshot=snap.id) as b:
        assert json.loads(fake.requests[-1]["body"]) == {"from_snapshot": snap.id}
        for s in (a, b):
            info = s.info()
            assert info.from_snapshot == snap.id and info.last_restore.source == "snapshot"
            assert s.files.read_text("model.txt") == "weights"
    # list, get, delete: module-level helpers and the client
    assert [s.id for s in sandlot.list_snapshots(**conn)] == [snap.id, unnamed.id]
    assert fake.requests[-1]["path"] == "/v1/snapshots"
    assert sandlot.get_snapshot(snap.id, **conn) == snap
    assert fake.requests[-1]["path"] == f"/v1/snapshots/{snap.id}"
    with sandlot.Snapshots(**conn) as snapshots:
        assert snapshots.get(unnamed).id == unnamed.id
        snapshots.delete(unnamed)
        assert (fake.requests[-1]["method"], fake.requests[-1]["path"]) == ("DELETE", f"/v1/snapshots/{unnamed.id}")
        assert [s.id for s in snapshots.list()] == [snap.id]
        with pytest.raises(E.SnapshotNotFound) as err:
            snapshots.get(unnamed.id)
        assert err.value.status == 404 and isinstance(err.value, E.NotFoundError)
        with pytest.raises(E.SnapshotNotFound):
            snapshots.delete(unnamed.id)
    sandlot.delete_snapshot(snap, **conn)
    assert sandlot.list_snapshots(**conn) == []
    with pytest.raises(E.SnapshotNotFound):
        fake_sandbox(fake, from_snapshot=snap)
    # a snapshot damaged on disk
    with fake_sandbox(fake) as sb:
        bad = sb.snapshot("bad")
    fake.corrupt.add(bad.id)
    with pytest.raises(E.StateCorrupt) as err:
        fake_sandbox(fake, from_snapshot=bad)
    assert bad.id in err.value.message


async def test_async_saved_state():
    fake = FakeSandlot()
    t = httpx.MockTransport(fake)
    async with AsyncSandbox.create(url="http://sandlot.test", transport=t, on_idle="pause") as sb:
        assert json.loads(fake.requests[0]["body"]) == {"on_idle": "pause"}
        forks = await sb.fork(3, same_seed=True)
        assert json.loads(fake.requests[-1]["body"]) == {"count": 3, "same_seed": True}
        assert len(forks) == 3 and all(type(c) is AsyncSandbox for c in forks) and forks.not_captured == [LOCK]
        assert (await forks[0].info()).forked_from == sb.id
        for c in forks:
            assert await c.kill() is True
        with pytest.raises(E.InvalidArgument):
            await sb.fork(0)
        assert (await sb.pause()).paused
        assert (await sb.run_code("x")).end_state == "ok" and (await sb.info()).last_restore.source == "resume"
        await sb.pause()
        assert (await sb.resume()).running
        snap = await sb.snapshot("a")
        assert snap.name == "a" and snap.sandbox_id == sb.id
        async with AsyncSandbox.create(url="http://sandlot.test", transport=t, from_snapshot=snap) as child:
            assert (await child.info()).from_snapshot == snap.id
        async with sandlot.AsyncSnapshots(url="http://sandlot.test", transport=t) as snapshots:
            assert [s.id for s in await snapshots.list()] == [snap.id]
            assert (await snapshots.get(snap)).name == "a"
            await snapshots.delete(snap.id)
            with pytest.raises(E.SnapshotNotFound):
                await snapshots.get(snap.id)
        sid = sb.id
        await sb.close(pause=True)
    assert fake.sandboxes[sid]["state"] == "paused"  # exiting a closed handle deletes nothing
    again = await AsyncSandbox.connect(sid, url="http://sandlot.test", transport=t)
    assert fake.requests[-1]["path"] == f"/v1/sandboxes/{sid}/resume" and (await again.info()).running
    await again.close()
    assert fake.sandboxes[sid]["state"] == "deleted"


# ---------------------------------------------------------------------------------------------
# Volumes
# ---------------------------------------------------------------------------------------------


def test_volume_fixtures_parse():
    vol = sandlot.Volume.from_json(fixture("volume.json"))
    assert (vol.name, vol.size_mb, vol.created_at, str(vol)) == ("dataset", 256, "2025-11-22T03:41:00Z", "dataset")
    assert vol.mounted_by == [
        sandlot.VolumeUse(sandbox_id="sbx_4a8c2e6f0b1d3e5f", path="data", read_only=True),
        sandlot.VolumeUse(sandbox_id="sbx_9d1f3b5a7c2e4d6f", path="shared/dataset", read_only=False),
    ]
    assert vol.files is None  # built by hand: no connection to reach its files through
    unused = sandlot.Volume.from_json(fixture("volumes_list.json")["volumes"][1])
    assert (unused.name, unused.size_mb, unused.mounted_by) == ("scratch", 1024, [])
    info = SandboxInfo.from_json(fixture("sandbox_with_volumes.json"))
    assert info.volumes == [sandlot.VolumeMount(name="dataset", path="data", read_only=True)]
    assert SandboxInfo.from_json(fixture("sandbox.json")).volumes == []
    assert sandlot.VolumeMount("v", "data").to_json() == {"name": "v", "path": "data", "read_only": False}


def test_volumes_through_fake():
    fake = FakeSandlot()
    t = httpx.MockTransport(fake)
    conn = {"url": "http://sandlot.test", "transport": t}
    with sandlot.Volumes(**conn) as volumes:
        vol = volumes.create("dataset", size_mb=64)
        req = fake.requests[-1]
        assert (req["method"], req["path"], json.loads(req["body"])) == ("POST", "/v1/volumes", {"name": "dataset", "size_mb": 64})
        assert (vol.name, vol.size_mb, vol.mounted_by) == ("dataset", 64, [])
        assert volumes.create("other").size_mb == 1024 and json.loads(fake.requests[-1]["body"]) == {"name": "other"}
        with pytest.raises(E.VolumeInUse) as err:
            volumes.create("dataset")  # the name is taken
        assert err.value.status == 409
        # the volume's files: the sandbox files API, pointed at the volume
        assert isinstance(vol.files, sandlot.VolumeFiles)
        entry = vol.files.write("in/a b.csv", "a,b\n1,2\n")
        assert (entry.path, entry.size) == ("in/a b.csv", 8)
        assert (fake.requests[-1]["method"], fake.requests[-1]["path"]) == ("PUT", "/v1/volumes/dataset/files/in/a%20b.csv")
        assert vol.files.read("in/a b.csv") == b"a,b\n1,2\n" and vol.files.read_text("in/a b.csv") == "a,b\n1,2\n"
        vol.files.write_many({"top.txt": b"top", "in/b.txt": "b"})
        assert [e.path for e in vol.files.list()] == ["top.txt"]
        assert [e.path for e in vol.files.list("in", recursive=True)] == ["in/a b.csv", "in/b.txt"]
        assert fake.requests[-1]["path"] == "/v1/volumes/dataset/files?path=in&recursive=true"
        assert vol.files.exists("in/b.txt") and not vol.files.exists("in/zzz")
        vol.files.remove("in/b.txt")
        assert (fake.requests[-1]["method"], fake.requests[-1]["path"]) == ("DELETE", "/v1/volumes/dataset/files/in/b.txt")
        with pytest.raises(E.FileNotFound):
            vol.files.read("in/b.txt")
        assert volumes.files("dataset").read("top.txt") == b"top"  # no GET of the volume first
        assert fake.volume_files["dataset"] == {"in/a b.csv": b"a,b\n1,2\n", "top.txt": b"top"}
        assert fake.files == {}  # no sandbox's workspace was touched
        # mounted read-only by two sandboxes (dicts or VolumeMount, a Volume for its name),
        # read-write by one; a second writer is refused
        ro = [{"name": vol, "path": "/workspace/data", "read_only": True}]
        with fake_sandbox(fake, volumes=ro) as r1:
            assert json.loads(fake.requests[-1]["body"]) == {"volumes": [{"name": "dataset", "path": "/workspace/data", "read_only": True}]}
        with fake_sandbox(fake, volumes=ro) as r1, fake_sandbox(fake, volumes=[sandlot.VolumeMount("dataset", "data", read_only=True)]) as r2:
            assert json.loads(fake.requests[-1]["body"]) == {"volumes": [{"name": "dataset", "path": "data", "read_only": True}]}
            assert r1.info().volumes == r2.info().volumes == [sandlot.VolumeMount("dataset", "data", True)]
            with fake_sandbox(fake, volumes=[{"name": "dataset", "path": "data"}]) as w:
                assert json.loads(fake.requests[-1]["body"]) == {"volumes": [{"name": "dataset", "path": "data", "read_only": False}]}
                with pytest.raises(E.VolumeInUse) as err:
                    fake_sandbox(fake, volumes=[{"name": "dataset", "path": "data"}])
                assert w.id in err.value.message
                users = volumes.get("dataset").mounted_by
                assert sorted((u.sandbox_id, u.read_only) for u in users) == sorted([(r1.id, True), (r2.id, True), (w.id, False)])
                with pytest.raises(E.VolumeInUse):
                    volumes.delete(vol)
            # the writer is gone: another may take it
            with fake_sandbox(fake, volumes=[{"name": "dataset", "path": "data"}]):
                pass
            with pytest.raises(E.VolumeInUse):
                volumes.delete("dataset")
        volumes.delete(vol)
        assert (fake.requests[-1]["method"], fake.requests[-1]["path"]) == ("DELETE", "/v1/volumes/dataset")
        assert [v.name for v in volumes.list()] == ["other"]
        for call in (lambda: volumes.get("dataset"), lambda: volumes.delete("dataset"), lambda: vol.files.read("top.txt")):
            with pytest.raises(E.VolumeNotFound) as err:
                call()
            assert err.value.status == 404 and isinstance(err.value, E.NotFoundError)
        with pytest.raises(E.VolumeNotFound):
            fake_sandbox(fake, volumes=[{"name": "dataset", "path": "data", "read_only": True}])
    # a volume outlives the client that returned it: its files open a connection per call
    assert volumes._http.client.is_closed
    other = [v for v in sandlot.list_volumes(**conn) if v.name == "other"][0]
    other.files.write("x.txt", "x")
    assert sandlot.get_volume("other", **conn).files.read("x.txt") == b"x"
    made = sandlot.create_volume("made", 8, **conn)
    assert made.size_mb == 8 and made.files.list() == []
    sandlot.delete_volume(made, **conn)
    with pytest.raises(E.VolumeNotFound):
        sandlot.get_volume("made", **conn)


def test_volume_arguments_are_checked_before_sending():
    fake = FakeSandlot()
    sent = len(fake.requests)
    for bad in (
        {"name": "v", "path": "data"},  # one mount, not a list of them
        sandlot.VolumeMount("v", "data"),
        ["v"],
        [{"name": "v"}],
        [{"name": "v", "path": "data", "readonly": True}],
        [{"name": 3, "path": "data"}],
    ):
        with pytest.raises(TypeError):
            fake_sandbox(fake, volumes=bad)
    with sandlot.Volumes(url="http://sandlot.test", transport=httpx.MockTransport(fake)) as volumes:
        for name, size in (("", None), (None, None), ("v", "64"), ("v", True)):
            with pytest.raises(TypeError):
                volumes.create(name, size)
    assert len(fake.requests) == sent
    with fake_sandbox(fake, volumes=[]):
        assert json.loads(fake.requests[-1]["body"]) == {}  # no mounts: the field is left out


async def test_async_volumes():
    fake = FakeSandlot()
    t = httpx.MockTransport(fake)
    async with sandlot.AsyncVolumes(url="http://sandlot.test", transport=t) as volumes:
        vol = await volumes.create("shared")
        assert isinstance(vol.files, sandlot.AsyncVolumeFiles)
        assert (await vol.files.write("a.txt", b"A")).path == "a.txt"
        assert await vol.files.read("a.txt") == b"A" and [e.path for e in await vol.files.list()] == ["a.txt"]
        assert await vol.files.exists("a.txt")
        mount = sandlot.VolumeMount("shared", "shared", read_only=True)
        async with AsyncSandbox.create(url="http://sandlot.test", transport=t, volumes=[mount]) as sb:
            assert json.loads(fake.requests[-1]["body"]) == {"volumes": [mount.to_json()]}
            assert (await sb.info()).volumes == [mount]
            assert [u.sandbox_id for u in (await volumes.get(vol)).mounted_by] == [sb.id]
            with pytest.raises(E.VolumeInUse):
                await volumes.delete("shared")
        await vol.files.remove("a.txt")
        assert await volumes.files("shared").list() == []
        assert [v.name for v in await volumes.list()] == ["shared"]
        await volumes.delete(vol)
        with pytest.raises(E.VolumeNotFound):
            await volumes.get("shared")
    # its files still answer, through a connection of their own
    with pytest.raises(E.VolumeNotFound):
        await vol.files.read("a.txt")


# ---------------------------------------------------------------------------------------------
# Tools
# ---------------------------------------------------------------------------------------------


def test_tool_declarations():
    o = run_python_tool("openai")
    assert o["type"] == "function" and o["function"]["name"] == "run_python"
    assert o["function"]["parameters"]["required"] == ["code"]
    a = run_python_tool("anthropic")
    assert set(a) == {"name", "description", "input_schema"} and a["input_schema"]["properties"]["code"]["type"] == "string"
    j = run_bash_tool("json_schema", name="sh")
    assert j["name"] == "sh" and "parameters" in j and "Bash" in j["description"]
    with pytest.raises(ValueError):
        run_python_tool("gemini")
    d = ToolDispatcher(object())
    assert [t["function"]["name"] for t in d.tools()] == ["run_python", "run_bash"]


class ScriptedSandbox:
    """Returns recorded executions; records what it was asked to run."""

    def __init__(self, *names: str):
        self.queue = [Execution.from_json(fixture(n)) for n in names]
        self.calls: List[Dict[str, Any]] = []

    def run_code(self, code, language="python", timeout=None, **kw):
        self.calls.append({"code": code, "language": language, "timeout": timeout})
        item = self.queue.pop(0)
        if isinstance(item, Exception):
            raise item
        return item


def test_openai_tool_call_with_images():
    sb = ScriptedSandbox("exec_dataframe_plots.json")
    d = ToolDispatcher(sb, timeout=30)
    msg = d.handle_openai_tool_call(
        {"id": "call_1", "type": "function", "function": {"name": "run_python", "arguments": json.dumps({"code": "df"})}}
    )
    assert sb.calls == [{"code": "df", "language": "python", "timeout": 30}]
    assert msg["role"] == "tool" and msg["tool_call_id"] == "call_1"
    text = msg["content"]
    assert isinstance(text, str)
    assert "[stdout]\nrows: 3\ndone printing" in text
    assert "[display]\n   a  b" in text
    assert "[image 1: PNG image, 40x30 px" in text and "[image 2: PNG image, 48x32 px" in text
    assert "not visible" in text and "[result]\n6" in text and "base64" not in text
    assert text.index("[stdout]") < text.index("[image 1") < text.index("[result]")
    assert len(d.last_images) == 2 and d.last_images[0].to_bytes()[:8] == PNG_MAGIC
    im = d.openai_image_message(d.last_images)
    assert im["role"] == "user" and im["content"][1]["image_url"]["url"].startswith("data:image/png;base64,iVBOR")
    assert d.openai_image_message([]) is None and d.last_output.is_error is False


def test_openai_sdk_style_objects_and_bad_calls():
    sb = ScriptedSandbox("exec_bash.json")
    d = ToolDispatcher(sb)
    call = SimpleNamespace(id="c2", function=SimpleNamespace(name="run_bash", arguments='{"code": "ls missing"}'))
    msg = d.handle_openai_tool_call(call)
    assert sb.calls[0]["language"] == "bash"
    assert "[stderr]\nls: cannot access" in msg["content"] and "[exit code: 2]" in msg["content"]
    assert d.last_output.is_error
    bad = d.handle_openai_tool_call({"id": "c3", "function": {"name": "run_python", "arguments": "{not json"}})
    assert "not valid JSON" in bad["content"] and bad["tool_call_id"] == "c3"
    unknown = d.handle_openai_tool_call({"id": "c4", "function": {"name": "rm_rf", "arguments": "{}"}})
    assert "unknown tool 'rm_rf'" in unknown["content"]
    empty = d.handle_openai_tool_call({"id": "c5", "function": {"name": "run_python", "arguments": "{}"}})
    assert "'code' argument is required" in empty["content"]
    assert len(sb.calls) == 1  # none of the bad calls ran anything


def test_anthropic_tool_use_with_images_and_errors():
    sb = ScriptedSandbox("exec_dataframe_plots.json", "exec_error.json")
    d = ToolDispatcher(sb)
    block = d.handle_anthropic_tool_use({"type": "tool_use", "id": "toolu_1", "name": "run_python", "input": {"code": "df"}})
    assert block["type"] == "tool_result" and block["tool_use_id"] == "toolu_1" and "is_error" not in block
    content = block["content"]
    assert content[0]["type"] == "text" and "[result]\n6" in content[0]["text"] and "attached" in content[0]["text"]
    imgs = [c for c in content if c["type"] == "image"]
    assert len(imgs) == 2
    for c in imgs:
        assert c["source"]["type"] == "base64" and c["source"]["media_type"] == "image/png"
        assert base64.b64decode(c["source"]["data"])[:8] == PNG_MAGIC
    err = d.handle_anthropic_tool_use(SimpleNamespace(id="toolu_2", name="run_python", input={"code": "1/0"}))
    assert err["is_error"] is True
    text = err["content"][0]["text"]
    assert "[error]" in text and "return 1/0" in text and "ZeroDivisionError: division by zero" in text
    assert "[stdout]\nbefore" in text


def test_tool_output_budget_and_end_states():
    ex = Execution.from_json(fixture("exec_truncated.json"))
    out = format_execution(ex, max_output_chars=2000)
    assert len(out.text) < 2600
    assert "line 00000" in out.text and "line 00299" in out.text  # head and tail kept
    assert "characters (" in out.text and "of stdout dropped" in out.text
    assert "the server dropped 1048576 more bytes of stdout" in out.text
    t = format_execution(Execution.from_json(fixture("exec_timeout.json")), timeout=5)
    assert "timed out after 5 s and was interrupted" in t.text and t.is_error
    dead = fixture("exec_timeout.json")
    dead["sandbox_alive"] = False
    assert "state was lost" in format_execution(Execution.from_json(dead)).text
    empty = Execution.from_json({"end_state": "ok", "outputs": [], "stdout": "", "stderr": ""})
    assert format_execution(empty).text == "[no output]"
    many = fixture("exec_dataframe_plots.json")
    out = format_execution(Execution.from_json(many), max_images=1)
    assert len(out.images) == 1 and "[1 more image(s) not included]" in out.text


def test_dispatcher_reports_rejected_code_and_raises_infrastructure_errors():
    sb = ScriptedSandbox()
    sb.queue = [E.PayloadTooLarge("code too big", code="payload_too_large", status=413), E.SandboxGone("gone", code="sandbox_gone", status=410)]
    d = ToolDispatcher(sb)
    msg = d.handle_openai_tool_call({"id": "c", "function": {"name": "run_python", "arguments": '{"code": "x"}'}})
    assert "payload_too_large" in msg["content"] and d.last_output.is_error
    with pytest.raises(E.SandboxGone):
        d.handle_openai_tool_call({"id": "c", "function": {"name": "run_python", "arguments": '{"code": "x"}'}})


async def test_async_dispatcher():
    class AsyncScripted(ScriptedSandbox):
        async def run_code(self, code, language="python", timeout=None, **kw):
            return ScriptedSandbox.run_code(self, code, language, timeout)

    d = AsyncToolDispatcher(AsyncScripted("exec_dataframe_plots.json", "exec_error.json"))
    msg = await d.handle_openai_tool_call({"id": "c", "function": {"name": "run_python", "arguments": '{"code": "x"}'}})
    assert "[result]\n6" in msg["content"]
    blk = await d.handle_anthropic_tool_use({"id": "t", "name": "run_python", "input": {"code": "1/0"}})
    assert blk["is_error"] and "ZeroDivisionError" in blk["content"][0]["text"]


# ---------------------------------------------------------------------------------------------
# The agent loop example, with a scripted chat endpoint and recorded executions
# ---------------------------------------------------------------------------------------------


def load_agent_loop():
    spec = importlib.util.spec_from_file_location("agent_loop", REPO / "examples" / "agent_loop.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_agent_loop_offline():
    mod = load_agent_loop()
    bodies: List[Dict[str, Any]] = []

    def chat(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/chat/completions"
        assert request.headers["authorization"] == "Bearer sk-test"
        body = json.loads(request.content)
        bodies.append(body)
        if len(bodies) == 1:
            assert body["tools"][0]["function"]["name"] == "run_python"
            msg = {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "call_a", "type": "function", "function": {"name": "run_python", "arguments": '{"code": "df"}'}}],
            }
        else:
            tool_msgs = [m for m in body["messages"] if m["role"] == "tool"]
            assert tool_msgs[0]["tool_call_id"] == "call_a" and "[result]\n6" in tool_msgs[0]["content"]
            assert body["messages"][-1]["role"] == "user" and body["messages"][-1]["content"][1]["type"] == "image_url"
            msg = {"role": "assistant", "content": "The sum is 6."}
        return httpx.Response(200, json={"choices": [{"index": 0, "message": msg, "finish_reason": "stop"}]})

    sb = ScriptedSandbox("exec_dataframe_plots.json")
    client = httpx.Client(transport=httpx.MockTransport(chat))
    answer = mod.run_agent("sum column a", sandbox=sb, base_url="http://llm.test/v1", api_key="sk-test",
                           vision=True, http_client=client)
    assert answer == "The sum is 6." and len(bodies) == 2 and sb.calls[0]["code"] == "df"
    assert bodies[1]["messages"][2]["tool_calls"][0]["id"] == "call_a"


@pytest.mark.parametrize("name", ["Sandbox", "Files", "Contexts", "Job", "Templates", "Volumes", "Snapshots"])
def test_the_async_client_has_every_method_of_the_sync_one(name: str) -> None:
    """The asyncio client keeps up with the synchronous one: each public name of a sync class
    exists on its `Async` twin (and the other way round), so neither drifts again."""
    sync_cls, async_cls = getattr(sandlot, name), getattr(sandlot, "Async" + name)

    def public(cls: type) -> set:
        return {m for m in dir(cls) if not m.startswith("_")}

    assert public(sync_cls) - public(async_cls) == set(), f"missing on Async{name}"
    assert public(async_cls) - public(sync_cls) == set(), f"missing on {name}"
