"""Traces (issue 8): an agent's span, made with the OpenTelemetry Python SDK and propagated in
``traceparent``, is the ancestor of sandlot's request, ``sandlot.create_sandbox`` and
``sandlot.execute`` spans, in the same trace; 200 concurrent executions are all traced.

sandlot exports over OTLP/HTTP (protobuf) to a receiver this test runs on loopback, which
decodes each export with the ``opentelemetry-proto`` package. The server is started by this
module with ``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at the receiver (the session's server is
not traced).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

from .conftest import LISTEN_RE, REPO, STARTUP_TIMEOUT, _bin, _die_with_parent, _tail

pytestmark = pytest.mark.live

trace_service_pb2 = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
otel_sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry import propagate  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402


class Receiver:
    """An OTLP/HTTP trace receiver on loopback: every span it was sent, decoded."""

    def __init__(self) -> None:
        self.spans: List[Dict] = []
        self.requests = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                ok = self.path == "/v1/traces" and self.headers.get("Content-Type", "").startswith("application/x-protobuf")
                if ok:
                    req = trace_service_pb2.ExportTraceServiceRequest()
                    req.ParseFromString(body)
                    outer._add(req)
                self.send_response(200 if ok else 400)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:  # quiet
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _add(self, req) -> None:
        found = []
        for rs in req.resource_spans:
            service = {a.key: a.value.string_value for a in rs.resource.attributes}.get("service.name")
            for ss in rs.scope_spans:
                for s in ss.spans:
                    attrs = {}
                    for a in s.attributes:
                        v = a.value
                        attrs[a.key] = v.string_value if v.HasField("string_value") else (v.int_value if v.HasField("int_value") else str(v))
                    found.append(
                        {
                            "service": service,
                            "name": s.name,
                            "trace_id": s.trace_id.hex(),
                            "span_id": s.span_id.hex(),
                            "parent": s.parent_span_id.hex(),
                            "attrs": attrs,
                            "start": s.start_time_unix_nano,
                            "end": s.end_time_unix_nano,
                        }
                    )
        with self.lock:
            self.requests += 1
            self.spans.extend(found)

    def snapshot(self) -> List[Dict]:
        with self.lock:
            return list(self.spans)

    def close(self) -> None:
        self.server.shutdown()


class Server:
    """A ``sandlot serve`` of this module's own, exporting traces to ``receiver``."""

    def __init__(self, receiver: Receiver) -> None:
        binary = _bin()
        if not binary.exists():
            pytest.skip(f"needs the sandlot binary: {binary} does not exist")
        env_dir = os.environ.get("SANDLOT_TEST_ENV_DIR") or str(REPO / "target" / "sandlot-envs")
        self.tmp = Path(tempfile.mkdtemp(prefix="sandlot-otel-test-"))
        data = self.tmp / "data"
        data.mkdir()
        env = dict(os.environ)
        for k in ("SANDLOT_API_KEY", "SANDLOT_URL", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
            env.pop(k, None)
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.url
        env["OTEL_BSP_SCHEDULE_DELAY"] = "200"
        self.stderr_path = self.tmp / "stderr.log"
        self.errf = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [str(binary), "serve", "--listen", "127.0.0.1:0", "--data-dir", str(data), "--env-dir", env_dir],
            stdout=subprocess.PIPE,
            stderr=self.errf,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        found: List[str] = []
        ready = threading.Event()

        def pump() -> None:
            assert self.proc.stdout is not None
            for raw in iter(self.proc.stdout.readline, b""):
                if not found:
                    m = LISTEN_RE.search(raw.decode("utf-8", "replace"))
                    if m:
                        found.append(m.group(1))
                        ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        ready.wait(timeout=STARTUP_TIMEOUT)
        if not found:
            self.stop()
            pytest.fail(f"sandlot serve did not start:\n{_tail(self.stderr_path)}", pytrace=False)
        self.url = found[0]
        self.key = (data / "api-key").read_text().strip()

    def call(self, method: str, path: str, body: Optional[Dict] = None, headers: Optional[Dict[str, str]] = None) -> Dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.key}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            raise AssertionError(f"{method} {path}: {e.code} {e.read()!r}") from None
        return json.loads(raw) if raw else {}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        self.errf.close()
        # The data dir holds the workspaces' disk image (GiBs): only the log is kept.
        shutil.rmtree(self.tmp / "data", ignore_errors=True)


@pytest.fixture(scope="module")
def traced() -> Iterator[tuple]:
    receiver = Receiver()
    server = Server(receiver)
    try:
        yield server, receiver
    finally:
        server.stop()
        receiver.close()
        sys.stderr.write(f"\ntraced sandlot server logs: {server.tmp}\n")


@pytest.fixture(scope="module")
def agent():
    """The agent's tracer (OpenTelemetry Python SDK), its finished spans kept in memory."""
    exporter = InMemorySpanExporter()
    provider = otel_sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("agent"), exporter


def wait_for(receiver: Receiver, pred, timeout: float = 30.0) -> List[Dict]:
    deadline = time.monotonic() + timeout
    while True:
        spans = receiver.snapshot()
        if pred(spans) or time.monotonic() > deadline:
            return spans
        time.sleep(0.1)


def ancestors(span: Dict, by_id: Dict[str, Dict]) -> List[str]:
    """The span ids above ``span`` (its parent first), as far as they were received."""
    out = []
    parent = span["parent"]
    while parent:
        out.append(parent)
        up = by_id.get(parent)
        if up is None:
            break
        parent = up["parent"]
    return out


def test_the_agents_span_is_the_parent_of_sandlots_create_and_execute_spans(traced, agent) -> None:
    server, receiver = traced
    tracer, exporter = agent
    with tracer.start_as_current_span("agent.tool_call") as tool:
        headers: Dict[str, str] = {}
        propagate.inject(headers)
        assert "traceparent" in headers
        sb = server.call("POST", "/v1/sandboxes", {}, headers)
        result = server.call("POST", f"/v1/sandboxes/{sb['id']}/execute", {"code": "6 * 7"}, headers)
        assert result["result"]["text/plain"] == "42"
    ctx = tool.get_span_context()
    trace_id = format(ctx.trace_id, "032x")
    agent_span = format(ctx.span_id, "016x")

    def complete(spans: List[Dict]) -> bool:
        names = {s["name"] for s in spans if s["trace_id"] == trace_id}
        return {"sandlot.create_sandbox", "sandlot.execute"} <= names

    spans = wait_for(receiver, complete)
    mine = [s for s in spans if s["trace_id"] == trace_id]
    assert complete(spans), f"sandlot's spans of trace {trace_id} did not arrive: {mine}"
    by_id = {s["span_id"]: s for s in mine}
    assert all(s["service"] == "sandlot" for s in mine)
    create = next(s for s in mine if s["name"] == "sandlot.create_sandbox")
    execute = next(s for s in mine if s["name"] == "sandlot.execute")
    for s in (create, execute):
        chain = ancestors(s, by_id)
        assert agent_span in chain, f"{s['name']} does not descend from the agent's span: {chain} {mine}"
        # Its parent is sandlot's request span, whose parent is the agent's span.
        request = by_id[s["parent"]]
        assert request["parent"] == agent_span
        assert request["attrs"].get("http.route", "").startswith("/v1/sandboxes")
        assert s["start"] >= request["start"] and s["end"] <= request["end"] + 10_000_000
    assert create["attrs"]["sandlot.sandbox_id"] == sb["id"]
    assert execute["attrs"]["sandlot.sandbox_id"] == sb["id"]
    assert execute["attrs"]["sandlot.execution_id"] == result["id"]
    assert execute["attrs"]["sandlot.end_state"] == "ok"
    assert [s.name for s in exporter.get_finished_spans()][-1] == "agent.tool_call"


def test_200_concurrent_executions_are_all_traced(traced, agent) -> None:
    server, receiver = traced
    tracer, _ = agent
    ids = [server.call("POST", "/v1/sandboxes", {})["id"] for _ in range(20)]

    def one(i: int) -> tuple:
        with tracer.start_as_current_span(f"agent.step.{i}") as span:
            headers: Dict[str, str] = {}
            propagate.inject(headers)
            r = server.call("POST", f"/v1/sandboxes/{ids[i % 20]}/execute", {"code": f"{i} + 1"}, headers)
            assert r["result"]["text/plain"] == str(i + 1)
        return format(span.get_span_context().trace_id, "032x"), r["id"]

    with ThreadPoolExecutor(max_workers=200) as pool:
        runs = list(pool.map(one, range(200)))
    wanted = dict(runs)
    assert len(wanted) == 200

    def traced_executions(spans: List[Dict]) -> Dict[str, str]:
        return {
            s["trace_id"]: s["attrs"].get("sandlot.execution_id", "")
            for s in spans
            if s["name"] == "sandlot.execute" and s["trace_id"] in wanted
        }

    spans = wait_for(receiver, lambda sp: len(traced_executions(sp)) == 200, timeout=60)
    got = traced_executions(spans)
    missing = set(wanted) - set(got)
    assert not missing, f"{len(missing)} of 200 executions have no sandlot.execute span"
    wrong = {t: (got[t], wanted[t]) for t in wanted if got[t] != wanted[t]}
    assert not wrong, f"execution spans name another execution: {list(wrong.items())[:5]}"


def test_a_hostile_traceparent_is_ignored(traced) -> None:
    server, receiver = traced
    bad = "00-ffffffffffffffffffffffffffffffff-00f067aa0ba902b7-01"
    for value in ["00-" + "g" * 32 + "-00f067aa0ba902b7-01", "00-abc-def-01", bad + "-x", "x" * 8000]:
        r = server.call("GET", "/v1/whoami", None, {"traceparent": value})
        assert r  # served as if untraced
    spans = wait_for(receiver, lambda sp: sum(s["attrs"].get("http.route") == "/v1/whoami" for s in sp) >= 4)
    whoami = [s for s in spans if s["attrs"].get("http.route") == "/v1/whoami"]
    assert len(whoami) >= 4
    for s in whoami:
        # A root span of sandlot's own: no parent taken from the malformed headers.
        assert s["parent"] == "", s
        assert s["trace_id"] not in ("g" * 32, "ffffffffffffffffffffffffffffffff")
