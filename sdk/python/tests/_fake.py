"""An in-memory stand-in for the sandlot HTTP API, served through ``httpx.MockTransport`` so
the client's requests and its handling of responses can be tested without a server."""

from __future__ import annotations

import copy
import json
import os
import time
from typing import Any, Callable, Dict, List, Optional
from urllib.parse import unquote

import httpx

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def fixture(name: str) -> Any:
    with open(os.path.join(FIXTURES, name)) as f:
        if name.endswith(".json"):
            return json.load(f)
        return f.read()


def api_error(status: int, code: str, message: str) -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": message}})


class FakeSandlot:
    """Routes like the real API. ``execute_result`` is what every execute returns;
    ``requests`` records (method, path, headers, body bytes) of each request."""

    def __init__(self) -> None:
        self.sandboxes: Dict[str, Dict[str, Any]] = {}
        self.files: Dict[str, Dict[str, bytes]] = {}
        self.requests: List[Dict[str, Any]] = []
        self.execute_result: Dict[str, Any] = fixture("exec_dataframe_plots.json")
        self.sse_override: Optional[str] = None
        self.ignore_stream = False
        self.hook: Optional[Callable[[httpx.Request], Optional[httpx.Response]]] = None
        self.counter = 0

    # the MockTransport handler (sync and async transports accept the same callable)
    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        self.requests.append(
            {"method": request.method, "path": request.url.raw_path.decode(), "headers": dict(request.headers), "body": body}
        )
        if self.hook is not None:
            resp = self.hook(request)
            if resp is not None:
                return resp
        return self.route(request, body)

    def route(self, request: httpx.Request, body: bytes) -> httpx.Response:
        raw_path = request.url.raw_path.decode().split("?")[0]
        parts = raw_path.split("/")[1:]  # ["v1", "sandboxes", id, ...]
        m = request.method
        if parts[:2] == ["v1", "health"]:
            return httpx.Response(200, json={"status": "ok"})
        if parts[:2] != ["v1", "sandboxes"]:
            return api_error(404, "invalid_request", "no such route")
        if len(parts) == 2:
            if m == "POST":
                req = json.loads(body)
                self.counter += 1
                sid = f"sbx_fake{self.counter:04d}"
                sb = copy.deepcopy(fixture("sandbox.json"))
                sb.update(id=sid, env=req.get("env", {}), metadata=req.get("metadata", {}), template=req.get("template") or "default")
                if "idle_timeout" in req:
                    sb["idle_timeout"] = req["idle_timeout"]
                self.sandboxes[sid] = sb
                self.files[sid] = {}
                return httpx.Response(201, json=sb)
            allowed = request.url.params.get("all") == "true"
            return httpx.Response(200, json={"sandboxes": [s for s in self.sandboxes.values() if allowed or s["state"] == "running"]})
        sid = unquote(parts[2])
        sb = self.sandboxes.get(sid)
        if sb is None:
            return api_error(404, "sandbox_not_found", f"no sandbox {sid}")
        rest = parts[3:]
        if not rest:
            if m == "GET":
                return httpx.Response(200, json=sb)
            if m == "DELETE":
                if sb["state"] != "running":
                    return api_error(410, "sandbox_gone", "already deleted")
                sb["state"] = "deleted"
                return httpx.Response(204)
        if sb["state"] != "running":
            return api_error(410, "sandbox_gone", f"sandbox {sid} was deleted")
        if rest == ["execute"] and m == "POST":
            req = json.loads(body)
            res = dict(self.execute_result, sandbox_id=sid, language=req.get("language", "python"))
            wants_stream = req.get("stream") or "text/event-stream" in request.headers.get("accept", "")
            if wants_stream and not self.ignore_stream:
                text = self.sse_override if self.sse_override is not None else sse_transcript(res)
                return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=text.encode())
            return httpx.Response(200, json=res)
        if rest == ["interrupt"] and m == "POST":
            return httpx.Response(200, json={"interrupted": False})
        if rest == ["executions"] and m == "GET":
            return httpx.Response(200, json=fixture("executions.json"))
        if rest and rest[0] == "files":
            return self.files_route(sid, request, rest[1:])
        return api_error(404, "invalid_request", "no such route")

    def files_route(self, sid: str, request: httpx.Request, rest: List[str]) -> httpx.Response:
        store = self.files[sid]
        m = request.method
        if not rest:
            prefix = request.url.params.get("path", "").strip("/")
            recursive = request.url.params.get("recursive") == "true"
            entries = []
            for p, data in sorted(store.items()):
                if prefix and not p.startswith(prefix + "/"):
                    continue
                rel = p[len(prefix) + 1 :] if prefix else p
                if not recursive and "/" in rel:
                    continue
                entries.append(entry(p, len(data)))
            return httpx.Response(200, json={"entries": entries})
        path = "/".join(unquote(seg) for seg in rest)
        if path.startswith("/") or ".." in path.split("/"):
            return api_error(400, "invalid_path", f"path {path!r} escapes the workspace")
        if m == "PUT":
            store[path] = request.read()
            return httpx.Response(201, json=entry(path, len(store[path])))
        if path not in store:
            return api_error(404, "file_not_found", f"no file {path}")
        if m == "GET":
            return httpx.Response(200, content=store[path], headers={"content-type": "application/octet-stream"})
        if m == "DELETE":
            del store[path]
            return httpx.Response(204)
        return api_error(405, "invalid_request", "method not allowed")


def entry(path: str, size: int) -> Dict[str, Any]:
    return {"path": path, "name": path.rsplit("/", 1)[-1], "kind": "file", "size": size, "modified": int(time.time()), "mode": 33188}


def sse_transcript(result: Dict[str, Any]) -> str:
    out = []
    for ev in result.get("outputs", []):
        out.append(f"event: {ev['type']}\ndata: {json.dumps(ev)}\n\n")
    out.append(f"event: done\ndata: {json.dumps(result)}\n\n")
    return "".join(out)
