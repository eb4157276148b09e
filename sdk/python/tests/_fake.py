"""An in-memory stand-in for the sandlot HTTP API, served through ``httpx.MockTransport`` so
the client's requests and its handling of responses can be tested without a server."""

from __future__ import annotations

import copy
import gzip
import io
import json
import os
import re
import tarfile
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


# States of a sandbox that has ended: answered 410 sandbox_gone, left out of a plain list.
ENDED = ("deleted", "expired", "lost")
NOW = "2025-11-22T03:35:00Z"


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
        # sha256 -> bytes served by GET /v1/artifacts/{sha256} (they outlive sandboxes)
        self.artifacts: Dict[str, bytes] = {}
        # sandbox id -> its contexts, oldest first
        self.contexts: Dict[str, List[Dict[str, Any]]] = {}
        # name -> Template JSON; a template turns ready (or failed, when its setup contains
        # "raise") after `template_polls` GETs
        self.templates: Dict[str, Dict[str, Any]] = {}
        self.removed_contexts: List[str] = []
        # sandbox id -> its BackgroundOutput once read with ?clear=true (else the fixture)
        self.background: Dict[str, Dict[str, Any]] = {}
        self.template_polls = 2
        self._polls: Dict[str, int] = {}
        # saved state: snapshot id -> Snapshot JSON (and the files it captured); what a fork,
        # pause or snapshot reports it could not capture; sandboxes whose saved state is
        # "corrupt" (their resume answers 422) and ones whose capture fails (409)
        self.snapshots: Dict[str, Dict[str, Any]] = {}
        self.snapshot_files: Dict[str, Dict[str, bytes]] = {}
        self.not_captured: List[Dict[str, str]] = fixture("fork_result.json")["not_captured"]
        self.corrupt: set = set()
        self.capture_fails: set = set()
        # named volumes: name -> Volume JSON without mounted_by (worked out from the sandboxes
        # that mount it), and each volume's files
        self.volumes: Dict[str, Dict[str, Any]] = {}
        self.volume_files: Dict[str, Dict[str, bytes]] = {}

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
            return httpx.Response(200, json={"status": "ok", "version": "0.1.0"})
        if parts[:2] == ["v1", "artifacts"] and len(parts) == 3 and m == "GET":
            sha = parts[2]
            if len(sha) != 64:
                return api_error(400, "invalid_argument", "not a sha256")
            if sha not in self.artifacts:
                return api_error(404, "file_not_found", f"no artifact {sha}")
            return httpx.Response(200, content=self.artifacts[sha], headers={"content-type": "text/csv"})
        if parts[:2] == ["v1", "templates"]:
            return self.templates_route(request, body, parts[2:])
        if parts[:2] == ["v1", "snapshots"]:
            return self.snapshots_route(m, [unquote(p) for p in parts[2:]])
        if parts[:2] == ["v1", "volumes"]:
            return self.volumes_route(request, body, parts[2:])
        if parts[:2] != ["v1", "sandboxes"]:
            return api_error(404, "invalid_request", "no such route")
        if len(parts) == 2:
            if m == "POST":
                return self.create(json.loads(body) if body else {})
            allowed = request.url.params.get("all") == "true"
            return httpx.Response(200, json={"sandboxes": [s for s in self.sandboxes.values() if allowed or s["state"] not in ENDED]})
        sid = unquote(parts[2])
        sb = self.sandboxes.get(sid)
        if sb is None:
            return api_error(404, "sandbox_not_found", f"no sandbox {sid}")
        rest = parts[3:]
        if not rest:
            if m == "GET":
                return httpx.Response(200, json=sb)
            if m == "DELETE":
                if sb["state"] in ENDED:
                    return api_error(410, "sandbox_gone", "already deleted")
                sb["state"] = "deleted"
                sb.pop("paused_at", None)
                return httpx.Response(204)
        if sb["state"] in ENDED:
            return api_error(410, "sandbox_gone", f"sandbox {sid} was deleted")
        if rest == ["pause"] and m == "POST":
            return self.pause(sid)
        if rest == ["resume"] and m == "POST":
            return self.resume(sid)
        if sb["state"] == "paused" and rest and rest[0] in ("execute", "contexts", "fork", "snapshots"):
            # like the server: the next call to a paused sandbox resumes it
            resumed = self.resume(sid)
            if resumed.status_code != 200:
                return resumed
        if rest == ["fork"] and m == "POST":
            return self.fork(sid, json.loads(body) if body else {})
        if rest == ["snapshots"] and m == "POST":
            return self.snapshot(sid, json.loads(body) if body else {})
        if rest == ["execute"] and m == "POST":
            req = json.loads(body)
            ctx = req.get("context") or "default"
            if ctx in self.removed_contexts:  # other unknown ids are let through
                return api_error(400, "invalid_argument", f"no context {ctx}")
            res = dict(self.execute_result, sandbox_id=sid, language=req.get("language", "python"), context=ctx)
            wants_stream = req.get("stream") or "text/event-stream" in request.headers.get("accept", "")
            if wants_stream and not self.ignore_stream:
                text = self.sse_override if self.sse_override is not None else sse_transcript(res)
                return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=text.encode())
            return httpx.Response(200, json=res)
        if rest == ["interrupt"] and m == "POST":
            return httpx.Response(200, json={"interrupted": False})
        if rest == ["executions"] and m == "GET":
            return httpx.Response(200, json=fixture("executions.json"))
        if rest == ["background"] and m == "GET":
            out = self.background.get(sid) or fixture("background.json")
            if request.url.params.get("clear") == "true":
                self.background[sid] = {"entries": [], "dropped_bytes": 0}
            return httpx.Response(200, json=out)
        if rest == ["archive"]:
            return self.archive_route(sid, request, body)
        if rest and rest[0] == "files":
            return self.files_route(self.files[sid], request, rest[1:])
        if rest and rest[0] == "contexts":
            return self.contexts_route(sid, m, [unquote(r) for r in rest[1:]])
        return api_error(404, "invalid_request", "no such route")

    def new_sandbox(self, **fields: Any) -> Dict[str, Any]:
        self.counter += 1
        sid = f"sbx_fake{self.counter:04d}"
        sb = copy.deepcopy(fixture("sandbox.json"))
        sb.update(fields, id=sid)
        self.sandboxes[sid] = sb
        self.files[sid] = {}
        self.contexts[sid] = [{"id": "default", "created_at": sb["created_at"]}]
        return sb

    def create(self, req: Dict[str, Any]) -> httpx.Response:
        snap = None
        if req.get("from_snapshot") is not None:
            snap = self.snapshots.get(req["from_snapshot"])
            if snap is None:
                return api_error(404, "snapshot_not_found", f"no snapshot {req['from_snapshot']}")
            if req.get("template") not in (None, snap["template"]):
                return api_error(400, "invalid_argument", f"snapshot {snap['id']} is of template {snap['template']}")
        if req.get("on_idle") not in (None, "delete", "pause"):
            return api_error(400, "invalid_request", "on_idle: unknown variant")
        mounts = self.check_mounts(req.get("volumes") or [])
        if isinstance(mounts, httpx.Response):
            return mounts
        sb = self.new_sandbox(
            env=req.get("env", {}),
            metadata=req.get("metadata", {}),
            template=req.get("template") or (snap["template"] if snap else "default"),
            on_idle=req.get("on_idle") or "delete",
        )
        if "idle_timeout" in req:
            sb["idle_timeout"] = req["idle_timeout"]
        if mounts:
            sb["volumes"] = mounts
        if snap is not None:
            if snap["id"] in self.corrupt:
                del self.sandboxes[sb["id"]]
                return api_error(422, "state_corrupt", f"snapshot {snap['id']}: the state file is truncated")
            sb.update(from_snapshot=snap["id"], last_restore=self.restore("snapshot", snap["variables"]))
            self.files[sb["id"]] = dict(self.snapshot_files[snap["id"]])
        return httpx.Response(201, json=sb)

    @staticmethod
    def restore(source: str, variables: int = 3) -> Dict[str, Any]:
        return {"at": NOW, "source": source, "variables": variables, "not_restored": []}

    def pause(self, sid: str) -> httpx.Response:
        sb = self.sandboxes[sid]
        if sid in self.capture_fails:
            return api_error(409, "capture_failed", f"sandbox {sid}: saving its state failed: no space left on device")
        if sb["state"] != "paused":
            sb.update(state="paused", paused_at=NOW)
        return httpx.Response(200, json=sb)

    def resume(self, sid: str) -> httpx.Response:
        sb = self.sandboxes[sid]
        if sb["state"] == "paused":
            if sid in self.corrupt:
                return api_error(422, "state_corrupt", f"sandbox {sid}: its saved state is corrupt (checksum mismatch)")
            sb["state"] = "running"
            sb.pop("paused_at", None)
            sb["last_restore"] = self.restore("resume")
        return httpx.Response(200, json=sb)

    def fork(self, sid: str, req: Dict[str, Any]) -> httpx.Response:
        count = req.get("count", 1)
        if not isinstance(count, int) or not 1 <= count <= 100:
            return api_error(400, "invalid_argument", f"count must be 1 to 100, not {count}")
        if sid in self.capture_fails:
            return api_error(409, "capture_failed", f"sandbox {sid}: saving its state failed")
        parent = self.sandboxes[sid]
        children = []
        for _ in range(count):
            keep = {k: copy.deepcopy(parent[k]) for k in ("template", "template_version", "env", "metadata", "limits", "idle_timeout", "max_lifetime", "on_idle")}
            child = self.new_sandbox(**keep, forked_from=sid, last_restore=self.restore("fork"))
            self.files[child["id"]] = dict(self.files[sid])
            children.append(child)
        return httpx.Response(201, json={"sandboxes": children, "not_captured": self.not_captured, "took_ms": 12.5 + count})

    def snapshot(self, sid: str, req: Dict[str, Any]) -> httpx.Response:
        name = req.get("name")
        if name is not None and not 1 <= len(name) <= 128:
            return api_error(400, "invalid_argument", "a snapshot name has 1 to 128 characters")
        if sid in self.capture_fails:
            return api_error(409, "capture_failed", f"sandbox {sid}: saving its state failed")
        sb = self.sandboxes[sid]
        self.counter += 1
        snap = dict(
            fixture("snapshot.json"),
            id=f"snap_{self.counter:032x}",
            name=name,
            sandbox_id=sid,
            template=sb["template"],
            template_version=sb["template_version"],
            not_captured=self.not_captured,
        )
        self.snapshots[snap["id"]] = snap
        self.snapshot_files[snap["id"]] = dict(self.files[sid])
        return httpx.Response(201, json=snap)

    def snapshots_route(self, m: str, rest: List[str]) -> httpx.Response:
        if not rest and m == "GET":
            return httpx.Response(200, json={"snapshots": list(self.snapshots.values())})
        if len(rest) == 1 and m in ("GET", "DELETE"):
            snap = self.snapshots.get(rest[0])
            if snap is None:
                return api_error(404, "snapshot_not_found", f"no snapshot {rest[0]}")
            if m == "GET":
                return httpx.Response(200, json=snap)
            del self.snapshots[rest[0]]
            del self.snapshot_files[rest[0]]
            return httpx.Response(204)
        return api_error(405, "method_not_allowed", "method not allowed")

    def mounted_by(self, name: str) -> List[Dict[str, Any]]:
        """Like the server: every sandbox not ended that mounts volume ``name``."""
        return [
            {"sandbox_id": sid, "path": m["path"], "read_only": m["read_only"]}
            for sid, sb in sorted(self.sandboxes.items())
            if sb["state"] not in ENDED
            for m in sb.get("volumes", [])
            if m["name"] == name
        ]

    def check_mounts(self, wanted: List[Dict[str, Any]]) -> Any:
        """The mounts of a create as the server records them (paths relative to /workspace),
        or its error: an unknown volume, a path outside /workspace, a volume another sandbox
        holds read-write."""
        mounts = []
        for m in wanted:
            name, path = m["name"], m["path"]
            if name not in self.volumes:
                return api_error(404, "volume_not_found", f"no volume {name}")
            rel = path[len("/workspace/"):] if path.startswith("/workspace/") else path
            if rel.startswith("/") or not rel or ".." in rel.split("/"):
                return api_error(400, "invalid_argument", f"volume path {path!r} is not under /workspace")
            read_only = bool(m.get("read_only", False))
            holder = next((u["sandbox_id"] for u in self.mounted_by(name) if not u["read_only"]), None)
            if not read_only and holder is not None:
                return api_error(409, "volume_in_use", f"volume {name} is mounted read-write by {holder}")
            mounts.append({"name": name, "path": rel, "read_only": read_only})
        return mounts

    def volumes_route(self, request: httpx.Request, body: bytes, rest: List[str]) -> httpx.Response:
        m = request.method
        if not rest:
            if m == "POST":
                req = json.loads(body)
                name, size = req.get("name", ""), req.get("size_mb")
                if not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,47}", name) or size == 0:
                    return api_error(400, "invalid_argument", f"bad volume {req!r}")
                if name in self.volumes:
                    return api_error(409, "volume_in_use", f"a volume named {name} already exists")
                self.volumes[name] = {"name": name, "size_mb": size or 1024, "created_at": NOW}
                self.volume_files[name] = {}
                return httpx.Response(201, json=dict(self.volumes[name], mounted_by=[]))
            return httpx.Response(200, json={"volumes": [dict(v, mounted_by=self.mounted_by(k)) for k, v in sorted(self.volumes.items())]})
        name = unquote(rest[0])
        if name not in self.volumes:
            return api_error(404, "volume_not_found", f"no volume {name}")
        if rest[1:2] == ["files"]:
            return self.files_route(self.volume_files[name], request, rest[2:])
        if len(rest) == 1 and m == "GET":
            return httpx.Response(200, json=dict(self.volumes[name], mounted_by=self.mounted_by(name)))
        if len(rest) == 1 and m == "DELETE":
            users = self.mounted_by(name)
            if users:
                return api_error(409, "volume_in_use", f"volume {name} is mounted by {users[0]['sandbox_id']}")
            del self.volumes[name], self.volume_files[name]
            return httpx.Response(204)
        return api_error(405, "method_not_allowed", "method not allowed")

    def contexts_route(self, sid: str, m: str, rest: List[str]) -> httpx.Response:
        ctxs = self.contexts[sid]
        if not rest:
            if m == "POST":
                self.counter += 1
                ctx = {"id": f"ctx_fake{self.counter:04d}", "created_at": "2025-11-22T03:31:00Z"}
                ctxs.append(ctx)
                return httpx.Response(201, json=ctx)
            return httpx.Response(200, json={"contexts": ctxs})
        found = next((c for c in ctxs if c["id"] == rest[0]), None)
        if found is None:
            return api_error(400, "invalid_argument", f"no context {rest[0]}")
        if rest[1:] == ["restart"] and m == "POST":
            return httpx.Response(200, json=found)
        if len(rest) == 1 and m == "DELETE":
            if found["id"] == "default":
                return api_error(400, "invalid_argument", "the default context cannot be deleted")
            ctxs.remove(found)
            self.removed_contexts.append(found["id"])
            return httpx.Response(204)
        return api_error(405, "invalid_request", "method not allowed")

    def templates_route(self, request: httpx.Request, body: bytes, rest: List[str]) -> httpx.Response:
        m = request.method
        if not rest:
            if m == "POST":
                spec = json.loads(body)
                spec.setdefault("packages", [])
                spec.setdefault("imports", [])
                spec.setdefault("limits", {})
                tpl = {"name": spec["name"], "version": "v" + str(len(body)), "status": "building", "spec": spec, "created_at": "2025-11-22T03:40:00Z"}
                self.templates[spec["name"]] = tpl
                self._polls[spec["name"]] = 0
                return httpx.Response(202, json=tpl)
            return httpx.Response(200, json={"templates": [self.templates[k] for k in sorted(self.templates)]})
        name = unquote(rest[0])
        tpl = self.templates.get(name)
        if tpl is None:
            return api_error(404, "template_not_found", f"no template {name}")
        if m == "DELETE":
            users = [s["id"] for s in self.sandboxes.values() if s.get("template") == name and s.get("state") not in ENDED]
            if users:
                return api_error(409, "template_in_use", f"template {name!r} is in use by sandbox {users[0]}; delete that first")
            del self.templates[name]
            return httpx.Response(204)
        self._polls[name] = self._polls.get(name, 0) + 1
        if tpl["status"] == "building" and self._polls[name] >= self.template_polls:
            if "raise" in (tpl["spec"].get("setup") or ""):
                tpl.update(status="failed", error="setup raised RuntimeError: boom")
            else:
                tpl.update(status="ready", prepare_seconds=0.25)
        return httpx.Response(200, json=tpl)

    def archive_route(self, sid: str, request: httpx.Request, body: bytes) -> httpx.Response:
        """PUT extracts a tar's regular files into the store (names checked like the server
        checks them); GET serves a tar (``gzip=true``: compressed) of a directory's files."""
        store = self.files[sid]
        prefix = request.url.params.get("path", "").strip("/")
        if request.method == "PUT":
            summary = {"path": prefix, "files": 0, "dirs": 0, "symlinks": 0, "hardlinks": 0, "bytes": 0}
            added: Dict[str, bytes] = {}
            with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as tf:
                for m in tf:
                    name = m.name.strip("/")
                    if m.name.startswith("/") or ".." in name.split("/"):
                        return api_error(400, "invalid_archive", f"invalid archive: entry {m.name!r}: refused")
                    if m.isdir():
                        summary["dirs"] += 1
                    elif m.isreg():
                        data = tf.extractfile(m).read()
                        added[f"{prefix}/{name}" if prefix else name] = data
                        summary["files"] += 1
                        summary["bytes"] += len(data)
                    else:
                        return api_error(400, "invalid_archive", f"invalid archive: entry {m.name!r}: refused")
            store.update(added)
            return httpx.Response(200, json=summary)
        if request.method == "GET":
            out = io.BytesIO()
            found = not prefix
            with tarfile.open(fileobj=out, mode="w") as tf:
                for p, data in sorted(store.items()):
                    if prefix and not p.startswith(prefix + "/"):
                        continue
                    found = True
                    info = tarfile.TarInfo(p[len(prefix) + 1 :] if prefix else p)
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))
            if not found:
                return api_error(404, "file_not_found", f"{prefix}: no such file or directory")
            if request.url.params.get("gzip") == "true":
                return httpx.Response(200, content=gzip.compress(out.getvalue()), headers={"content-type": "application/gzip"})
            return httpx.Response(200, content=out.getvalue(), headers={"content-type": "application/x-tar"})
        return api_error(405, "method_not_allowed", "method not allowed")

    def files_route(self, store: Dict[str, bytes], request: httpx.Request, rest: List[str]) -> httpx.Response:
        """The files API over ``store`` (path -> bytes): a sandbox's workspace or a volume."""
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
