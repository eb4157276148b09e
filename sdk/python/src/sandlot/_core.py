"""Pieces shared by the sync and the async client: configuration, request bodies, path
encoding, response decoding, retry policy and the streaming-execution state machine."""

from __future__ import annotations

import ipaddress
import json
import os
import urllib.parse
import random
from dataclasses import dataclass, field
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    Union,
)
from urllib.parse import quote

import httpx

from . import errors
from ._sse import SSEEvent
from ._version import __version__
from .models import (
    ArtifactClient,
    Context,
    ExecError,
    Execution,
    Limits,
    Logs,
    OutputMessage,
    Result,
    Review,
    Snapshot,
    Volume,
    VolumeMount,
)

DEFAULT_URL = "http://127.0.0.1:7878"
DEFAULT_REQUEST_TIMEOUT = 60.0
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_RETRIES = 3
CHUNK_SIZE = 1024 * 1024
WORKSPACE = "/workspace"

LimitsArg = Union[Limits, Mapping[str, Any], None]
ContextArg = Union[Context, str, None]
SnapshotArg = Union[Snapshot, str]
VolumeArg = Union[Volume, str]
# A mount: a VolumeMount, or a dict with "name" (a str or a Volume), "path" and "read_only"
VolumesArg = Optional[Iterable[Union[VolumeMount, Mapping[str, Any]]]]
PortsArg = Optional[Iterable[int]]
IDLE_ACTIONS = ("delete", "pause")
MAX_PORTS = 32
MAX_FORK = 100


def _is_loopback(url: str) -> bool:
    """Whether ``url`` names this machine: ``localhost`` or a loopback address, never a host
    name that merely starts like one (``127.0.0.1.example.com``)."""
    host = (urllib.parse.urlsplit(url).hostname or "").lower().rstrip(".")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _local_key_file() -> str:
    """Where `sandlot serve` keeps the local admin key: ``$SANDLOT_DATA_DIR/api-key``, else
    ``$XDG_DATA_HOME/sandlot/api-key``, else ``~/.local/share/sandlot/api-key``."""
    data_dir = os.environ.get("SANDLOT_DATA_DIR")
    if not data_dir:
        xdg = os.environ.get("XDG_DATA_HOME")
        base = xdg if xdg and os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".local", "share")
        data_dir = os.path.join(base, "sandlot")
    return os.path.join(data_dir, "api-key")


def _local_key() -> Optional[str]:
    """The local admin key `sandlot serve` keeps in its data dir, if this user can read it."""
    try:
        with open(_local_key_file(), encoding="utf-8") as f:
            key = f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return key or None


@dataclass
class ConnectionConfig:
    """Where the server is and how to talk to it.

    ``url`` falls back to ``$SANDLOT_URL`` then ``http://127.0.0.1:7878``; ``api_key`` to
    ``$SANDLOT_API_KEY``, then, for a server on this machine (a loopback URL), to the local admin
    key a server keeps in its data dir (``$SANDLOT_DATA_DIR/api-key``, else
    ``~/.local/share/sandlot/api-key``) when this user can read it. ``retries`` is how many times a request whose connection could not be
    established is tried again (with exponential backoff); nothing else is retried.
    """

    url: str
    api_key: Optional[str] = field(repr=False)
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    retries: int = DEFAULT_RETRIES
    backoff: float = 0.25
    # Where api_key came from ("api_key=", "$SANDLOT_API_KEY" or the key file's path), for
    # error messages: never the key itself.
    key_source: Optional[str] = None

    @classmethod
    def resolve(
        cls,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        request_timeout: Optional[float] = None,
        retries: Optional[int] = None,
    ) -> "ConnectionConfig":
        url = url or os.environ.get("SANDLOT_URL") or DEFAULT_URL
        url = url.strip().rstrip("/")
        if url.endswith("/v1"):
            url = url[: -len("/v1")]
        if "://" not in url:
            url = "http://" + url
        source: Optional[str] = "api_key=" if api_key else None
        if api_key is None:
            api_key = os.environ.get("SANDLOT_API_KEY") or None
            source = "$SANDLOT_API_KEY" if api_key else None
        if api_key is None and _is_loopback(url):
            api_key = _local_key()
            source = _local_key_file() if api_key else None
        return cls(
            url=url,
            api_key=api_key,
            key_source=source,
            request_timeout=DEFAULT_REQUEST_TIMEOUT if request_timeout is None else request_timeout,
            retries=DEFAULT_RETRIES if retries is None else retries,
        )

    def headers(self) -> Dict[str, str]:
        h = {"User-Agent": f"sandlot-python/{__version__}"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def key_hint(self) -> str:
        """What the SDK did about the API key, for an ``unauthenticated`` error."""
        if self.api_key:
            return f"(the SDK sent the key from {self.key_source or 'api_key='})"
        where = "pass api_key= or set $SANDLOT_API_KEY"
        if _is_loopback(self.url):
            return f"(the SDK sent no key: {where}, or make {_local_key_file()} readable by this user)"
        return f"(the SDK sent no key: {where}; the local key file is read only for a server on this machine)"

    def timeout(self) -> httpx.Timeout:
        return httpx.Timeout(self.request_timeout, connect=min(DEFAULT_CONNECT_TIMEOUT, self.request_timeout))

    def backoff_delay(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based): exponential with jitter."""
        base = self.backoff * (2**attempt)
        return float(min(base, 8.0) * (0.5 + random.random() / 2))


# Errors that happen before a request reaches the server: always safe to retry.
CONNECT_ERRORS: Tuple[Type[BaseException], ...] = (httpx.ConnectError, httpx.ConnectTimeout)


def transport_error(exc: BaseException, method: str, url: str) -> errors.ConnectionError:
    if isinstance(exc, CONNECT_ERRORS):
        msg = f"cannot connect to the sandlot server for {method} {url}: {exc}"
    elif isinstance(exc, httpx.TimeoutException):
        msg = f"{method} {url} timed out: {exc or type(exc).__name__}"
        return errors.ConnectionError(msg, code="timeout")
    else:
        msg = f"connection to the sandlot server broke during {method} {url}: {exc or type(exc).__name__}"
    return errors.ConnectionError(msg)


# -- paths ----------------------------------------------------------------------------------

def workspace_relative(path: Union[str, "os.PathLike[str]"]) -> str:
    """``/workspace/a/b`` → ``a/b``; relative paths are kept; other absolute paths are kept as
    they are for the server to reject."""
    p = os.fspath(path)
    if p == WORKSPACE or p == WORKSPACE + "/":
        return ""
    if p.startswith(WORKSPACE + "/"):
        return p[len(WORKSPACE) + 1 :]
    return p


def encode_file_path(path: Union[str, "os.PathLike[str]"]) -> str:
    """The URL path segment for a workspace path: each segment percent-encoded, and ``.`` and
    ``..`` encoded so that no HTTP layer resolves them (the server decides what is allowed)."""
    rel = workspace_relative(path)
    if rel == "":
        raise errors.InvalidPath("a file path is required", code="invalid_path")
    segments = []
    for seg in rel.split("/"):
        if seg in (".", ".."):
            segments.append(seg.replace(".", "%2E"))
        else:
            segments.append(quote(seg, safe=""))
    # a leading "/" (absolute path outside the workspace) becomes "%2F" so it survives routing
    out = "/".join(segments)
    if out.startswith("/"):
        out = "%2F" + out[1:]
    return out


def context_id(context: ContextArg) -> Optional[str]:
    """The id of a :class:`~sandlot.Context` or a context id given as a string."""
    if context is None:
        return None
    if isinstance(context, Context):
        return context.id
    if isinstance(context, str):
        return context
    raise TypeError(f"context must be a Context or a context id (str), not {type(context).__name__}")


def template_path(name: Optional[str] = None, tenant: Optional[str] = None) -> str:
    """``/v1/templates[/<name>]``, with ``?tenant=`` when the operator names another tenant's."""
    path = "/v1/templates" if name is None else "/v1/templates/" + quote(name, safe="")
    return path if tenant is None else path + "?tenant=" + quote(tenant, safe="")


def _limits_json(limits: LimitsArg) -> Dict[str, Any]:
    if limits is None:
        return {}
    return limits.to_json() if isinstance(limits, Limits) else {k: v for k, v in dict(limits).items() if v is not None}


def template_body(spec: Optional[Mapping[str, Any]], fields: Mapping[str, Any]) -> Dict[str, Any]:
    """A TemplateSpec from a dict and/or keyword fields (the keywords win); ``None`` values are
    left out and ``limits`` may be a :class:`~sandlot.Limits`."""
    merged: Dict[str, Any] = dict(spec or {})
    merged.update(fields)
    body: Dict[str, Any] = {}
    for key, value in merged.items():
        if value is None:
            continue
        if key == "limits":
            lim = _limits_json(value)
            if lim:
                body["limits"] = lim
        elif key in ("packages", "imports"):
            if isinstance(value, str):
                raise TypeError(f"{key} must be a list of strings, not a string")
            body[key] = [str(v) for v in value]
        else:
            body[key] = value
    if not isinstance(body.get("name"), str) or not body["name"]:
        raise errors.InvalidArgument("a template spec needs a name", code="invalid_argument")
    return body


def snapshot_id(snapshot: SnapshotArg) -> str:
    """The id of a :class:`~sandlot.Snapshot` or a snapshot id given as a string."""
    if isinstance(snapshot, Snapshot):
        return snapshot.id
    if isinstance(snapshot, str) and snapshot:
        return snapshot
    raise TypeError(f"a snapshot must be a Snapshot or a snapshot id (str), not {snapshot!r}")


def snapshot_path(snapshot: Optional[SnapshotArg] = None) -> str:
    return "/v1/snapshots" if snapshot is None else "/v1/snapshots/" + quote(snapshot_id(snapshot), safe="")


def volume_name(volume: VolumeArg) -> str:
    """The name of a :class:`~sandlot.Volume` or a volume name given as a string."""
    if isinstance(volume, Volume):
        return volume.name
    if isinstance(volume, str) and volume:
        return volume
    raise TypeError(f"a volume must be a Volume or a volume name (str), not {volume!r}")


def volume_path(volume: Optional[VolumeArg] = None, *rest: str) -> str:
    p = "/v1/volumes" if volume is None else "/v1/volumes/" + quote(volume_name(volume), safe="")
    for r in rest:
        p += "/" + r
    return p


def volume_body(name: VolumeArg, size_mb: Optional[int]) -> Dict[str, Any]:
    body: Dict[str, Any] = {"name": volume_name(name)}
    if size_mb is not None:
        if isinstance(size_mb, bool) or not isinstance(size_mb, int):
            raise TypeError(f"size_mb must be an int (MiB), not {size_mb!r}")
        body["size_mb"] = size_mb
    return body


_MOUNT_KEYS = frozenset(("name", "path", "read_only"))


def volume_mounts_json(volumes: VolumesArg) -> List[Dict[str, Any]]:
    """The ``volumes`` of a CreateSandbox from :class:`~sandlot.VolumeMount` objects or dicts
    (``{"name": ..., "path": ..., "read_only": True}``); ``read_only`` defaults to False. The
    server checks names, paths and conflicts; this refuses only what is not a mount at all."""
    if volumes is None:
        return []
    if isinstance(volumes, (str, bytes, Mapping, VolumeMount)):
        raise TypeError("volumes must be a list of mounts (VolumeMount or dict), not a single one")
    out: List[Dict[str, Any]] = []
    for m in volumes:
        if isinstance(m, VolumeMount):
            m = m.to_json()
        if not isinstance(m, Mapping):
            raise TypeError(f"a volume mount must be a VolumeMount or a dict with name and path, not {m!r}")
        unknown = set(m) - _MOUNT_KEYS
        if unknown or "name" not in m or "path" not in m:
            raise TypeError(f"a volume mount has name, path and optionally read_only, not {dict(m)!r}")
        out.append({"name": volume_name(m["name"]), "path": os.fspath(m["path"]), "read_only": bool(m.get("read_only", False))})
    return out


def valid_port(port: Any) -> int:
    """``port`` as a TCP port number (1-65535), or :class:`~sandlot.InvalidRequest`."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise errors.InvalidRequest(f"a port is a number from 1 to 65535, not {port!r}", code="invalid_request")
    return port


def ports_json(ports: PortsArg) -> List[int]:
    """The ``ports`` of a CreateSandbox: at most 32, each 1-65535 (the server checks the same)."""
    if ports is None:
        return []
    if isinstance(ports, (int, str, bytes)):
        raise TypeError("ports must be a list of port numbers, not a single one")
    out = [valid_port(p) for p in ports]
    if len(out) > MAX_PORTS:
        raise errors.InvalidRequest(
            f"at most {MAX_PORTS} ports, not {len(out)} (all_ports=True exposes 1024-65535)", code="invalid_request"
        )
    return out


def port_url(base_url: str, sandbox_id: str, port: Any, path: str = "", token: Optional[str] = None) -> str:
    """The URL an app listening on ``port`` inside the sandbox answers at, through the server:
    with the sandbox's port token, ``<url>/v1/ports/<token>/<port>/`` (a capability URL a
    browser can open without an API key), else ``<url>/v1/sandboxes/<id>/ports/<port>/``
    (which needs the key); plus ``path``."""
    if token:
        base = base_url.rstrip("/") + "/v1/ports/" + quote(token, safe=".") + f"/{valid_port(port)}/"
    else:
        base = base_url.rstrip("/") + sandbox_path(sandbox_id, "ports", str(valid_port(port))) + "/"
    return base + path.lstrip("/")


def sandbox_path(sandbox_id: str, *rest: str) -> str:
    p = "/v1/sandboxes/" + quote(sandbox_id, safe="")
    for r in rest:
        p += "/" + r
    return p


# -- bodies ---------------------------------------------------------------------------------

def create_body(
    template: Optional[str],
    timeout: Optional[int],
    env: Optional[Mapping[str, str]],
    metadata: Optional[Mapping[str, str]],
    limits: LimitsArg,
    max_lifetime: Optional[int],
    from_snapshot: Optional[SnapshotArg] = None,
    on_idle: Optional[str] = None,
    volumes: VolumesArg = None,
    ports: PortsArg = None,
    all_ports: bool = False,
    tier: Optional[str] = None,
    mounts: Optional[Sequence[Any]] = None,
) -> Dict[str, Any]:
    body: Dict[str, Any] = {}
    if template is not None:
        body["template"] = template
    if env:
        body["env"] = {str(k): str(v) for k, v in env.items()}
    if metadata:
        body["metadata"] = {str(k): str(v) for k, v in metadata.items()}
    lim = _limits_json(limits)
    if lim:
        body["limits"] = lim
    if timeout is not None:
        body["idle_timeout"] = int(timeout)
    if max_lifetime is not None:
        body["max_lifetime"] = int(max_lifetime)
    if from_snapshot is not None:
        body["from_snapshot"] = snapshot_id(from_snapshot)
    if on_idle is not None:
        if on_idle not in IDLE_ACTIONS:
            raise errors.InvalidArgument(f"on_idle must be 'delete' or 'pause', not {on_idle!r}", code="invalid_argument")
        body["on_idle"] = on_idle
    vols = volume_mounts_json(volumes)
    if vols:
        body["volumes"] = vols
    exposed = ports_json(ports)
    if exposed:
        body["ports"] = exposed
    if all_ports:
        body["all_ports"] = True
    if tier is not None:
        body["tier"] = str(tier)
    host = host_mounts_json(mounts)
    if host:
        body["mounts"] = host
    return body


def host_mounts_json(mounts: Optional[Sequence[Any]]) -> List[Dict[str, str]]:
    """The ``mounts`` of a CreateSandbox (read-only host paths, trusted tier only) from dicts
    ``{"host": ..., "path": ...}`` or ``(host, path)`` pairs."""
    if mounts is None:
        return []
    if isinstance(mounts, (str, bytes, Mapping)):
        raise TypeError("mounts must be a list of {'host': ..., 'path': ...} (or (host, path) pairs), not a single one")
    out: List[Dict[str, str]] = []
    for m in mounts:
        if isinstance(m, Mapping):
            out.append({"host": str(m["host"]), "path": str(m["path"])})
        elif isinstance(m, (tuple, list)) and len(m) == 2:
            out.append({"host": str(m[0]), "path": str(m[1])})
        else:
            raise TypeError(f"a mount is {{'host': ..., 'path': ...}} or (host, path), not {m!r}")
    return out


def fork_body(n: int, same_seed: bool) -> Dict[str, Any]:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_FORK:
        raise errors.InvalidArgument(f"a fork makes 1 to {MAX_FORK} sandboxes, not {n!r}", code="invalid_argument")
    return {"count": n, "same_seed": bool(same_seed)}


def snapshot_body(name: Optional[str]) -> Dict[str, Any]:
    return {} if name is None else {"name": str(name)}


def state_timeout(cfg: ConnectionConfig, n: int = 1) -> httpx.Timeout:
    """HTTP timeouts for a fork (of ``n`` sandboxes), pause, resume or snapshot: the server
    waits for a running cell to end before it saves the state, and a fork then starts ``n``
    sandboxes, so the answer may take longer than an ordinary request's."""
    read = max(cfg.request_timeout, 120.0) + 2.0 * n
    return httpx.Timeout(cfg.request_timeout, connect=min(DEFAULT_CONNECT_TIMEOUT, cfg.request_timeout), read=read)


# The languages an execution can run in (the server's `Language`).
LANGUAGES = ("python", "bash", "javascript", "typescript")


# What a failing execution leaves behind (the server's `OnFailure`).
ON_FAILURE = ("keep", "rollback")


def execute_body(
    code: str,
    language: str,
    timeout: Optional[float],
    stream: bool,
    context: ContextArg = None,
    on_failure: Optional[str] = None,
) -> Dict[str, Any]:
    if language not in LANGUAGES:
        raise errors.InvalidArgument(
            f"language must be one of {', '.join(map(repr, LANGUAGES))}, not {language!r}", code="invalid_argument"
        )
    if on_failure is not None and on_failure not in ON_FAILURE:
        raise errors.InvalidArgument(
            f"on_failure must be one of {', '.join(map(repr, ON_FAILURE))}, not {on_failure!r}",
            code="invalid_argument",
        )
    body: Dict[str, Any] = {"code": code, "language": language, "stream": stream}
    if on_failure is not None and on_failure != "keep":
        body["on_failure"] = on_failure
    if timeout is not None:
        body["timeout"] = float(timeout)
    ctx = context_id(context)
    if ctx is not None:
        body["context"] = ctx
    return body


def review_params(review_wait: Optional[float], review: Optional[str]) -> Dict[str, str]:
    """The query of a call a policy may hold for review (execute, create, fork, resume)."""
    params: Dict[str, str] = {}
    if review_wait is not None:
        params["review_wait"] = str(int(review_wait))
    if review is not None:
        params["review"] = str(review)
    return params


def raise_if_held(resp: httpx.Response) -> None:
    """A 202 with ``{"review": ...}`` (execute, create, fork, resume): the action is held for
    review (:class:`~sandlot.ReviewPending`)."""
    if resp.status_code != 202:
        return
    doc = decode_json(resp)
    review = Review.from_json(doc.get("review") if isinstance(doc, dict) else None)
    raise errors.ReviewPending(
        f"held for review {review.id}: {review.reason} (approve it, then call again with review={review.id!r})",
        review=review,
    )


def held_timeout(base: httpx.Timeout, review_wait: Optional[float]) -> httpx.Timeout:
    """``base`` with a read timeout that also outlasts a wait of ``review_wait`` seconds for a
    person's review (``base`` itself when there is none)."""
    if not review_wait or base.read is None:
        return base
    return httpx.Timeout(base.connect, connect=base.connect, read=base.read + float(review_wait), write=base.write, pool=base.pool)


def execute_timeout(cfg: ConnectionConfig, timeout: Optional[float]) -> httpx.Timeout:
    """HTTP timeouts for an execute call: the read timeout must outlast the execution."""
    read = None if timeout is None else float(timeout) + max(30.0, cfg.request_timeout)
    return httpx.Timeout(cfg.request_timeout, connect=min(DEFAULT_CONNECT_TIMEOUT, cfg.request_timeout), read=read)


def transfer_timeout(cfg: ConnectionConfig) -> httpx.Timeout:
    """HTTP timeouts for file transfers: per chunk, not for the whole body."""
    t = max(cfg.request_timeout, 120.0)
    return httpx.Timeout(t, connect=min(DEFAULT_CONNECT_TIMEOUT, cfg.request_timeout))


# -- responses ------------------------------------------------------------------------------

def decode_json(resp: httpx.Response) -> Any:
    try:
        return resp.json()
    except ValueError as e:
        raise errors.ServerError(
            f"the server sent a response that is not JSON ({resp.status_code}): {resp.text[:200]!r}",
            code="bad_response",
            status=resp.status_code,
        ) from e


def is_event_stream(resp: httpx.Response) -> bool:
    ctype = str(resp.headers.get("content-type", ""))
    return ctype.split(";")[0].strip().lower() == "text/event-stream"


# -- streaming executions -------------------------------------------------------------------

Callback = Callable[[Any], Any]


class StreamState:
    """Turns SSE events of one execution into callback invocations and, at ``done``, the
    final :class:`Execution`.

    ``handle`` returns the (callback, argument) pairs to invoke for an event, so the sync and
    async clients can call (or await) them in their own way.
    """

    def __init__(
        self,
        on_stdout: Optional[Callback] = None,
        on_stderr: Optional[Callback] = None,
        on_result: Optional[Callback] = None,
        on_error: Optional[Callback] = None,
        *,
        client: ArtifactClient = None,
    ) -> None:
        self.client = client
        self.on_stdout = on_stdout
        self.on_stderr = on_stderr
        self.on_result = on_result
        self.on_error = on_error
        self.results: List[Result] = []
        self.logs = Logs()
        self.error: Optional[ExecError] = None
        self.final: Optional[Execution] = None

    def handle(self, ev: SSEEvent) -> List[Tuple[Callback, Any]]:
        calls: List[Tuple[Callback, Any]] = []
        if ev.event in ("ping", "keepalive", "keep-alive") or ev.data == "":
            return calls
        try:
            data = json.loads(ev.data)
        except ValueError as e:
            raise errors.ServerError(f"malformed event {ev.event!r} in the stream: {ev.data[:200]!r}", code="bad_response") from e
        kind = ev.event
        if kind == "message" and isinstance(data, dict):
            kind = str(data.get("type", "message"))
        if kind == "done":
            if isinstance(data, dict) and isinstance(data.get("error"), dict) and "code" in data["error"] and "end_state" not in data:
                raise _stream_api_error(data)
            self.final = Execution.from_json(data, client=self.client) if isinstance(data, dict) else Execution(raw={}, client=self.client)
            return calls
        if not isinstance(data, dict):
            return calls
        if kind == "api_error" and isinstance(data.get("error"), dict):
            # the server's end of a stream whose execution failed after it had started
            raise _stream_api_error(data)
        if kind == "error" and isinstance(data.get("error"), dict) and "name" not in data:
            # an API error reported inside the stream, not an error the code raised
            raise _stream_api_error(data)
        if kind == "stdout":
            text = str(data.get("text", ""))
            self.logs.stdout.append(text)
            if self.on_stdout is not None:
                calls.append((self.on_stdout, OutputMessage(text, error=False)))
        elif kind == "stderr":
            text = str(data.get("text", ""))
            self.logs.stderr.append(text)
            if self.on_stderr is not None:
                calls.append((self.on_stderr, OutputMessage(text, error=True)))
        elif kind in ("display_data", "result"):
            res = Result(data.get("data") or {}, is_main_result=kind == "result", metadata=data.get("metadata") or {})
            self.results.append(res)
            if self.on_result is not None:
                calls.append((self.on_result, res))
        elif kind == "error":
            self.error = ExecError.from_json(data)
            if self.on_error is not None:
                calls.append((self.on_error, self.error))
        return calls

    def finish(self) -> Execution:
        if self.final is None:
            raise errors.ConnectionError(
                "the execution stream ended before its 'done' event; the execution may still be "
                "running in the sandbox (see executions())",
                code="stream_incomplete",
            )
        return self.final


def _stream_api_error(data: Mapping[str, Any]) -> errors.SandlotError:
    body = json.dumps(data).encode("utf-8")
    code = str(data["error"].get("code", ""))
    status = {
        "sandbox_gone": 410,
        "sandbox_not_found": 404,
        "sandbox_busy": 409,
        "state_corrupt": 422,
        "policy_denied": 403,
        "sandbox_contained": 409,
    }.get(code, 500)
    return errors.error_from_response(status, body)


def replay_callbacks(ex: Execution, state: StreamState) -> List[Tuple[Callback, Any]]:
    """Callbacks for an execution that came back as one JSON body (a server that does not
    stream): every event, in order, after the fact."""
    calls: List[Tuple[Callback, Any]] = []
    for ev in ex.raw.get("outputs") or []:
        if isinstance(ev, Mapping):
            calls.extend(state.handle(SSEEvent(event=str(ev.get("type", "message")), data=json.dumps(ev))))
    return calls
