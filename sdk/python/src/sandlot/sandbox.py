"""The synchronous client: :class:`Sandbox` and its :class:`Files`."""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, ContextManager, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union
from urllib.parse import quote

import httpx

from . import errors
from . import jobs as _jobs
from .jobs import Job
from ._core import (
    ConnectionConfig,
    ContextArg,
    LimitsArg,
    PortsArg,
    SnapshotArg,
    StreamState,
    VolumesArg,
    context_id,
    create_body,
    decode_json,
    encode_file_path,
    execute_body,
    execute_timeout,
    raise_if_held,
    review_params,
    held_timeout,
    fork_body,
    is_event_stream,
    port_url,
    replay_callbacks,
    sandbox_path,
    snapshot_body,
    state_timeout,
    transfer_timeout,
    transport_error,
    workspace_relative,
)
from ._archive import DirUpload, extract_stream
from ._archive import remote_dir as remote_dir_param
from ._http import Data, SyncHTTP, sync_body
from ._sse import SSEDecoder
from .models import BackgroundOutput, Context, Diff, Execution, ExecutionRecord, FileEntry, ForkResult, SandboxInfo, Snapshot

__all__ = ["Sandbox", "Files", "Contexts"]

PathLike = Union[str, "os.PathLike[str]"]
WriteEntries = Union[Mapping[str, Data], Iterable[Any]]


class Sandbox:
    """A sandbox on a sandlot server: a Python (IPython) and Bash session with its own
    ``/workspace``, state kept between calls.

    Constructing it creates the sandbox::

        with Sandbox() as sb:                 # deleted when the block ends
            sb.run_code("x = 41")
            print(sb.run_code("x + 1").text)  # "42"

    ``timeout`` is the idle timeout in seconds (the server deletes the sandbox after that long
    without an execution or file operation, or pauses it with ``on_idle="pause"``); ``limits``
    is a :class:`~sandlot.Limits` or a dict with ``memory_mb``, ``cpu_millis``, ``pids``,
    ``disk_mb``. ``from_snapshot`` (a :class:`~sandlot.Snapshot` or its id) starts the sandbox
    with the snapshot's variables and files. ``volumes`` mounts named volumes (see
    :class:`~sandlot.Volumes`) under ``/workspace``: a list of :class:`~sandlot.VolumeMount`
    or dicts ``{"name": ..., "path": "data", "read_only": True}``; an unknown volume raises
    :class:`~sandlot.VolumeNotFound`, a read-write mount of a volume another sandbox holds
    read-write :class:`~sandlot.VolumeInUse`. ``ports`` lists TCP ports (at most 32) an app
    inside may serve on, reachable from outside at :meth:`get_url`; ``all_ports=True`` exposes
    1024-65535. ``tier`` asks for ``"isolated"`` (the default) or ``"trusted"``; ``mounts``
    (trusted tier only) lists read-only host paths ``{"host": "/srv/data", "path": "/mnt/data"}``
    that the operator's policy grants (``mount_host_path``): a path not granted, or an isolated
    sandbox, raises :class:`~sandlot.PolicyDenied`; a malformed or symlinked host path
    :class:`~sandlot.InvalidArgument`. A policy may hold the creation for a person's review (a ``@review`` permit):
    ``review_wait`` seconds (at most 300) waits for the decision; still undecided (or with no
    wait) it raises :class:`~sandlot.ReviewPending` with the review; create again with the same
    arguments and ``review=review.id`` once it is approved (it runs once;
    :class:`~sandlot.ReviewDenied` when denied). :meth:`fork` and :meth:`resume` take the same
    two arguments. ``url`` and ``api_key`` default to
    ``$SANDLOT_URL`` (else ``http://127.0.0.1:7878``) and ``$SANDLOT_API_KEY``.
    """

    files: "Files"
    contexts: "Contexts"
    _http: SyncHTTP
    _info: SandboxInfo
    _closed: bool

    def __init__(
        self,
        template: Optional[str] = None,
        timeout: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        metadata: Optional[Mapping[str, str]] = None,
        limits: LimitsArg = None,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        max_lifetime: Optional[int] = None,
        from_snapshot: Optional[SnapshotArg] = None,
        on_idle: Optional[str] = None,
        volumes: VolumesArg = None,
        ports: PortsArg = None,
        all_ports: bool = False,
        tier: Optional[str] = None,
        mounts: Optional[Sequence[Any]] = None,
        request_timeout: Optional[float] = None,
        retries: Optional[int] = None,
        transport: Optional[httpx.BaseTransport] = None,
        review_wait: Optional[float] = None,
        review: Optional[str] = None,
    ) -> None:
        body = create_body(
            template, timeout, env, metadata, limits, max_lifetime, from_snapshot, on_idle, volumes, ports, all_ports,
            tier, mounts,
        )
        cfg = ConnectionConfig.resolve(url, api_key, request_timeout, retries)
        http = SyncHTTP(cfg, transport)
        try:
            base = state_timeout(cfg) if from_snapshot or review_wait else None
            resp = http.request(
                "POST",
                "/v1/sandboxes",
                json=body,
                params=review_params(review_wait, review),
                timeout=held_timeout(base, review_wait) if base is not None else None,
            )
            raise_if_held(resp)
            info = SandboxInfo.from_json(decode_json(resp))
        except BaseException:
            http.close()
            raise
        self._setup(http, info)

    def _setup(self, http: SyncHTTP, info: SandboxInfo) -> None:
        self._http = http
        self._info = info
        self._closed = False
        self.files = Files(self)
        self.contexts = Contexts(self)

    # -- constructors ---------------------------------------------------------------------
    @classmethod
    def create(cls, *args: Any, **kwargs: Any) -> "Sandbox":
        """Same as ``Sandbox(...)``."""
        return cls(*args, **kwargs)

    @classmethod
    def connect(
        cls,
        sandbox_id: str,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        resume: bool = True,
        request_timeout: Optional[float] = None,
        retries: Optional[int] = None,
        transport: Optional[httpx.BaseTransport] = None,
    ) -> "Sandbox":
        """A handle to an existing sandbox. A paused one is resumed (its variables restored)
        unless ``resume=False``; its next call would resume it anyway. Raises
        :class:`~sandlot.SandboxNotFound` for an unknown id and :class:`~sandlot.SandboxGone`
        for one that has ended."""
        http = SyncHTTP(ConnectionConfig.resolve(url, api_key, request_timeout, retries), transport)
        try:
            info = SandboxInfo.from_json(decode_json(http.request("GET", sandbox_path(sandbox_id))))
            if info.state == "paused":
                if resume:
                    resp = http.request("POST", sandbox_path(sandbox_id, "resume"), timeout=state_timeout(http.cfg))
                    info = SandboxInfo.from_json(decode_json(resp))
            else:
                _check_running(info)
        except BaseException:
            http.close()
            raise
        obj = cls.__new__(cls)
        obj._setup(http, info)
        return obj

    @staticmethod
    def list(
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        all: bool = False,  # noqa: A002 - mirrors the ?all= query parameter
        transport: Optional[httpx.BaseTransport] = None,
    ) -> List[SandboxInfo]:
        """The server's sandboxes: running ones, or every recorded one with ``all=True``."""
        http = SyncHTTP(ConnectionConfig.resolve(url, api_key), transport)
        try:
            params = {"all": "true"} if all else None
            doc = decode_json(http.request("GET", "/v1/sandboxes", params=params))
        finally:
            http.close()
        return [SandboxInfo.from_json(d) for d in (doc.get("sandboxes") or [])]

    @staticmethod
    def health(url: Optional[str] = None, api_key: Optional[str] = None, *, transport: Optional[httpx.BaseTransport] = None) -> Dict[str, Any]:
        """``GET /v1/health`` as a dict."""
        http = SyncHTTP(ConnectionConfig.resolve(url, api_key), transport)
        try:
            resp = http.request("GET", "/v1/health")
            try:
                doc = resp.json()
            except ValueError:
                doc = {"status": resp.text}
        finally:
            http.close()
        return doc if isinstance(doc, dict) else {"status": doc}

    # -- identity and lifecycle -----------------------------------------------------------
    @property
    def id(self) -> str:
        return self._info.id

    @property
    def sandbox_id(self) -> str:  # E2B spelling
        return self._info.id

    @property
    def url(self) -> str:
        return self._http.cfg.url

    def get_url(self, port: int, path: str = "") -> str:
        """The URL at which an app listening on ``port`` inside the sandbox answers, HTTP and
        WebSocket (``ws://`` for the same URL), through the server:
        ``<url>/v1/sandboxes/<id>/ports/<port>/`` plus ``path``. The port must be one the
        sandbox was created to expose (``ports=[...]``, or ``all_ports=True`` for 1024-65535);
        another answers 403 ``port_not_exposed``, and one nothing listens on 502
        ``port_unreachable``. The app sees ``/`` + ``path`` and the prefix in
        ``X-Forwarded-Prefix``; the trailing ``/`` keeps its relative links working."""
        return port_url(self.url, self.id, port, path, self._info.port_token)

    port_url = get_url

    def info(self) -> SandboxInfo:
        """The sandbox as the server reports it now."""
        self._info = SandboxInfo.from_json(decode_json(self._http.request("GET", sandbox_path(self.id))))
        return self._info

    def is_running(self) -> bool:
        try:
            return self.info().state == "running"
        except (errors.SandboxNotFound, errors.SandboxGone):
            return False

    def kill(self) -> bool:
        """Delete the sandbox (its processes and workspace) and release the connection.
        Returns False if it was already gone."""
        if self._closed:
            return False
        try:
            self._http.request("DELETE", sandbox_path(self.id)).close()
            deleted = True
        except (errors.SandboxNotFound, errors.SandboxGone):
            deleted = False
        self._closed = True
        self._http.close()
        return deleted

    def close(self, kill: bool = True, *, pause: bool = False) -> None:
        """Release the connection; with ``kill=True`` (the default) delete the sandbox first.
        ``close(kill=False)`` leaves it running for :meth:`connect`; ``close(pause=True)``
        pauses it first (see :meth:`pause`) so that it holds no memory until
        ``Sandbox.connect(id)`` resumes it. If the pause fails (:class:`~sandlot.CaptureFailed`)
        the sandbox keeps running and this handle stays open."""
        if pause:
            with self._http.open() as http:
                self._info = SandboxInfo.from_json(
                    decode_json(http.request("POST", sandbox_path(self.id, "pause"), timeout=state_timeout(http.cfg)))
                )
            if not self._closed:
                self._closed = True
                self._http.close()
        elif kill:
            self.kill()
        elif not self._closed:
            self._closed = True
            self._http.close()

    # -- saved state: fork, pause and resume, snapshots ------------------------------------
    def fork(
        self, n: int = 1, same_seed: bool = False, *, review_wait: Optional[float] = None, review: Optional[str] = None
    ) -> "ForkResult[Sandbox]":
        """``n`` (1 to 100) new sandboxes that start with this one's state: every code
        context's variables, functions, classes and imports, each Bash session's cwd and
        exported variables, and a copy-on-write copy of the workspace. This sandbox keeps
        running untouched (a cell running now is waited for; a paused sandbox is resumed).

        Returns a :class:`~sandlot.ForkResult`: a list of the new :class:`Sandbox` handles
        (each with its own connection; delete them with :meth:`kill`), with ``not_captured``,
        what could not be carried over (open files, sockets, threads, generators, objects
        whose pickling raised or took too long), and ``took_ms``. Each child gets fresh
        entropy (``random``, NumPy's global generator) unless ``same_seed=True``. All or
        nothing: :class:`~sandlot.CapacityExhausted` when the server cannot run ``n`` more."""
        resp = self._http.request(
            "POST",
            sandbox_path(self.id, "fork"),
            json=fork_body(n, same_seed),
            params=review_params(review_wait, review),
            timeout=held_timeout(state_timeout(self._http.cfg, n), review_wait),
        )
        raise_if_held(resp)
        doc = decode_json(resp)
        raw = doc if isinstance(doc, dict) else {}
        infos, not_captured, took_ms = ForkResult.parse(raw)
        children: List[Sandbox] = []
        for info in infos:
            child = type(self).__new__(type(self))
            child._setup(self._http.sibling(), info)
            children.append(child)
        return ForkResult(children, not_captured=not_captured, took_ms=took_ms, infos=infos, raw=raw)

    def pause(self) -> SandboxInfo:
        """Save the sandbox's state on the server's disk and end its processes: a paused
        sandbox holds no memory, survives a server restart and is resumed by its next call
        (or :meth:`resume`, or ``Sandbox.connect(id)``). Raises
        :class:`~sandlot.CaptureFailed` if the state could not be saved (the sandbox then
        keeps running). Returns the sandbox, ``state == "paused"``."""
        resp = self._http.request("POST", sandbox_path(self.id, "pause"), timeout=state_timeout(self._http.cfg))
        self._info = SandboxInfo.from_json(decode_json(resp))
        return self._info

    def resume(self, *, review_wait: Optional[float] = None, review: Optional[str] = None) -> SandboxInfo:
        """Resume a paused sandbox (a running one is returned as it is); ``last_restore`` of
        the result says what was restored. :class:`~sandlot.StateCorrupt` if its saved state
        is damaged on disk (it then stays paused)."""
        resp = self._http.request(
            "POST",
            sandbox_path(self.id, "resume"),
            params=review_params(review_wait, review),
            timeout=held_timeout(state_timeout(self._http.cfg), review_wait),
        )
        raise_if_held(resp)
        self._info = SandboxInfo.from_json(decode_json(resp))
        return self._info

    def snapshot(self, name: Optional[str] = None) -> Snapshot:
        """Save the sandbox's state and workspace as a :class:`~sandlot.Snapshot` (optionally
        named, 1 to 128 characters) that outlives it; the sandbox keeps running untouched.
        Start sandboxes from it with ``Sandbox(from_snapshot=snap)``; list and delete
        snapshots with :func:`~sandlot.list_snapshots`, :func:`~sandlot.delete_snapshot`."""
        resp = self._http.request(
            "POST", sandbox_path(self.id, "snapshots"), json=snapshot_body(name), timeout=state_timeout(self._http.cfg)
        )
        return Snapshot.from_json(decode_json(resp))

    def diff(self, other: Union["Sandbox", SandboxInfo, str]) -> Diff:
        """Which variables (of every code context) and which workspace files differ between
        this sandbox (``a``) and ``other`` (``b``: a sandbox or its id), two sandboxes of one
        family: a fork's parent and children, sandboxes from one snapshot, their descendants.
        Returns a :class:`~sandlot.Diff`; ``added`` means only in ``other``. Each sandbox is
        asked between its cells (a running cell is waited for; a paused sandbox is resumed);
        symlinks are compared as links, never followed. :class:`~sandlot.InvalidArgument`
        for sandboxes of two families."""
        path = sandbox_path(self.id, "diff", quote(Diff.target(other), safe=""))
        return Diff.from_json(decode_json(self._http.request("GET", path, timeout=state_timeout(self._http.cfg))))

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.kill()

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, template={self._info.template!r})"

    # -- execution ------------------------------------------------------------------------
    def run_code(
        self,
        code: str,
        language: str = "python",
        on_stdout: Optional[Callable[[Any], Any]] = None,
        on_stderr: Optional[Callable[[Any], Any]] = None,
        on_result: Optional[Callable[[Any], Any]] = None,
        on_error: Optional[Callable[[Any], Any]] = None,
        timeout: Optional[float] = None,
        *,
        stream: Optional[bool] = None,
        context: ContextArg = None,
        review_wait: Optional[float] = None,
        review: Optional[str] = None,
        on_failure: Optional[str] = None,
    ) -> Execution:
        """Run ``code`` in the sandbox's session and return the :class:`~sandlot.Execution`.

        With any callback the output is streamed and each callback is called as its output
        arrives: ``on_stdout``/``on_stderr`` with each chunk (an :class:`~sandlot.OutputMessage`,
        a ``str``), ``on_result`` with each :class:`~sandlot.Result`, ``on_error`` with the
        :class:`~sandlot.ExecError`. ``timeout`` (seconds) is enforced by the server; a timed-out
        execution is returned with ``end_state == "timeout"`` (see
        :meth:`Execution.raise_for_error`). ``context`` is a code context of the sandbox (an
        independent namespace, see :attr:`contexts`): a :class:`~sandlot.Context` or its id;
        the ``default`` context when ``None``. ``on_failure="rollback"`` saves the sandbox's variables (every context) and workspace files
        before the cell and puts them back if it fails (an error, a timeout, out of memory, killed,
        or output withheld by the guardrails): :attr:`Execution.rolled_back` says so. Background
        processes, sockets and volumes are not rolled back. The request is never re-sent
        once it may have reached the server.
        """
        streaming = stream if stream is not None else any(cb is not None for cb in (on_stdout, on_stderr, on_result, on_error))
        path = sandbox_path(self.id, "execute")
        body = execute_body(code, language, timeout, streaming, context, on_failure)
        held = review_params(review_wait, review)
        # The read must outlast the wait for a person too.
        http_timeout = execute_timeout(self._http.cfg, None if timeout is None else timeout + float(review_wait or 0))
        if not streaming:
            resp = self._http.request(
                "POST", path, json=body, params=held, timeout=http_timeout, headers={"Accept": "application/json"}
            )
            raise_if_held(resp)
            return Execution.from_json(decode_json(resp), client=self._http)
        state = StreamState(on_stdout, on_stderr, on_result, on_error, client=self._http)
        resp = self._http.request(
            "POST", path, json=body, params=held, timeout=http_timeout, headers={"Accept": "text/event-stream"}, stream=True
        )
        try:
            if not is_event_stream(resp):
                resp.read()
                raise_if_held(resp)
                ex = Execution.from_json(decode_json(resp), client=self._http)
                for cb, arg in replay_callbacks(ex, state):
                    cb(arg)
                return ex
            dec = SSEDecoder()
            try:
                for line in resp.iter_lines():
                    ev = dec.feed(line)
                    if ev is None:
                        continue
                    for cb, arg in state.handle(ev):
                        cb(arg)
                    if state.final is not None:
                        break
                else:
                    ev = dec.flush()
                    if ev is not None:
                        for cb, arg in state.handle(ev):
                            cb(arg)
            except httpx.TransportError as e:
                raise transport_error(e, "POST", path) from e
        finally:
            resp.close()
        return state.finish()

    def run_bash(self, code: str, **kwargs: Any) -> Execution:
        """``run_code(code, language="bash", ...)``: runs in the sandbox's Bash session."""
        return self.run_code(code, language="bash", **kwargs)

    def interrupt(self) -> bool:
        """Interrupt the running execution (``KeyboardInterrupt`` in Python, ``SIGINT`` in
        Bash); the session's state survives. Returns whether something was running."""
        doc = decode_json(self._http.request("POST", sandbox_path(self.id, "interrupt")))
        return bool(doc.get("interrupted")) if isinstance(doc, dict) else False

    def executions(self) -> List[ExecutionRecord]:
        """Every execution of this sandbox, oldest first, as the server recorded it."""
        doc = decode_json(self._http.request("GET", sandbox_path(self.id, "executions")))
        return [ExecutionRecord.from_json(d, client=self._http) for d in (doc.get("executions") or [])]

    # -- the record: jobs, metrics, lineage, bundles -------------------------------------------
    def submit_job(
        self,
        code: str,
        language: str = "python",
        *,
        timeout: Optional[float] = None,
        idempotent: bool = False,
        metadata: Optional[Mapping[str, Any]] = None,
    ) -> "Job":
        """Queue ``code`` as a durable :class:`~sandlot.Job` and return at once: the server
        stores it before answering, runs the sandbox's jobs in order, and keeps the result
        (``job.wait()``). A job cut off by a server restart ends ``lost`` unless ``idempotent``
        (then it runs again). :class:`~sandlot.JobQueueFull` (with ``retry_after``) when the
        queue is full."""
        return _jobs.submit_job(self, code, language, timeout=timeout, idempotent=idempotent, metadata=metadata)

    def jobs(self) -> List["Job"]:
        """The sandbox's jobs, in submission order."""
        return _jobs.list_jobs(self)

    def metrics(self) -> Dict[str, Any]:
        """What the sandbox uses now, from its cgroup: ``cpu_time_ms``, ``memory_bytes``,
        ``memory_peak_bytes``, ``memory_limit_bytes``, ``pids``."""
        return _jobs.sandbox_metrics(self)

    def lineage(self) -> Dict[str, Any]:
        """What the sandbox came from and did, as the server's record says: template and
        policy versions, its fork or snapshot parent, its uploads and executions in order."""
        return _jobs.sandbox_lineage(self)

    def save_bundle(self, path: PathLike) -> str:
        """Write the sandbox's run as a replay bundle (a tar.gz) to ``path``; replay it with
        ``sandlot replay PATH``. Returns the path."""
        return _jobs.save_bundle(self, path)

    def background_output(self, clear: bool = False) -> BackgroundOutput:
        """What the sandbox's processes wrote while no execution ran (background processes),
        kept apart from every execution's output; iterate it for its entries. ``clear=True``
        empties the server's buffer in the same request. :attr:`Execution.background_bytes`
        says how much is waiting."""
        params = {"clear": "true"} if clear else None
        doc = decode_json(self._http.request("GET", sandbox_path(self.id, "background"), params=params))
        return BackgroundOutput.from_json(doc if isinstance(doc, dict) else {})


def _check_running(info: SandboxInfo) -> None:
    if info.state and info.state != "running":
        why = f" ({info.ended_reason})" if info.ended_reason else ""
        raise errors.SandboxGone(f"sandbox {info.id} is {info.state}{why}", code="sandbox_gone")


def iter_write_entries(files: WriteEntries) -> List[Tuple[str, Data]]:
    """Normalise ``write_many`` input: a dict path → data, or an iterable of ``(path, data)``
    tuples, ``{"path": ..., "data": ...}`` dicts or objects with ``.path`` and ``.data``."""
    out: List[Tuple[str, Data]] = []
    if isinstance(files, Mapping):
        return [(os.fspath(p), d) for p, d in files.items()]
    for item in files:
        if isinstance(item, tuple) and len(item) == 2:
            out.append((os.fspath(item[0]), item[1]))
        elif isinstance(item, Mapping):
            out.append((os.fspath(item["path"]), item["data"]))
        elif hasattr(item, "path") and hasattr(item, "data"):
            out.append((os.fspath(item.path), item.data))
        else:
            raise TypeError(f"cannot tell path and data of {item!r}")
    return out


def iter_local_dir(local_dir: PathLike, remote_dir: str) -> List[Tuple[str, str]]:
    """(local file, remote path) for every regular file under ``local_dir``, sorted."""
    base = os.fspath(local_dir)
    if not os.path.isdir(base):
        raise NotADirectoryError(base)
    remote = workspace_relative(remote_dir).strip("/") if remote_dir else ""
    pairs: List[Tuple[str, str]] = []
    for root, dirs, names in os.walk(base):
        dirs.sort()
        for name in sorted(names):
            local = os.path.join(root, name)
            if not os.path.isfile(local):
                continue
            rel = os.path.relpath(local, base).replace(os.sep, "/")
            pairs.append((local, f"{remote}/{rel}" if remote else rel))
    return pairs


def _context_path(sandbox_id: str, context: ContextArg, *rest: str) -> str:
    ctx = context_id(context)
    if not ctx:
        raise errors.InvalidArgument("a context (or its id) is required", code="invalid_argument")
    return sandbox_path(sandbox_id, "contexts", quote(ctx, safe=""), *rest)


class Contexts:
    """The sandbox's code contexts (``sb.contexts``): independent Python namespaces, each with
    its own Bash session, sharing the sandbox's files. Run code in one with
    ``sb.run_code(code, context=ctx)``."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sb = sandbox

    def create(self, cwd: Optional[str] = None) -> Context:
        """A new, empty context (it starts with the names the template's setup bound), working
        in ``cwd`` (an absolute directory inside the sandbox) or, without it, ``/workspace``."""
        body = {"cwd": cwd} if cwd is not None else None
        return Context.from_json(
            decode_json(self._sb._http.request("POST", sandbox_path(self._sb.id, "contexts"), json=body))
        )

    def list(self) -> List[Context]:
        """Every context of the sandbox, oldest first (``default`` included)."""
        doc = decode_json(self._sb._http.request("GET", sandbox_path(self._sb.id, "contexts")))
        return [Context.from_json(d) for d in (doc.get("contexts") or [])]

    def restart(self, context: ContextArg) -> Context:
        """Give the context a fresh namespace and Bash session (files are untouched)."""
        return Context.from_json(decode_json(self._sb._http.request("POST", _context_path(self._sb.id, context, "restart"))))

    def remove(self, context: ContextArg) -> None:
        """Delete the context (``default`` cannot be deleted)."""
        self._sb._http.request("DELETE", _context_path(self._sb.id, context)).close()


class BaseFiles:
    """The files API of one place on the server: a sandbox's ``/workspace`` (:class:`Files`)
    or a named volume (:class:`~sandlot.volumes.VolumeFiles`). Subclasses say where its
    endpoint is (``_root``) and which connection to use (``_open``); the calls are the same."""

    def _root(self) -> str:
        """The files endpoint, e.g. ``/v1/sandboxes/{id}/files``."""
        raise NotImplementedError

    def _open(self) -> ContextManager[SyncHTTP]:
        """The connection to send a call through, for the duration of the call."""
        raise NotImplementedError

    def _path(self, path: PathLike) -> str:
        return self._root() + "/" + encode_file_path(path)

    def write(self, path: PathLike, data: Data) -> FileEntry:
        """Create or replace the file at ``path`` (parent directories included) with ``data``:
        bytes, str (UTF-8), or a binary file-like object, streamed in chunks."""
        factory, headers = sync_body(data)
        with self._open() as http:
            resp = http.request("PUT", self._path(path), body=factory, headers=headers, timeout=transfer_timeout(http.cfg))
            return _entry_from_response(resp, path)

    def write_many(self, files: WriteEntries) -> List[FileEntry]:
        """Write several files: a dict path → data, or ``(path, data)`` pairs."""
        return [self.write(p, d) for p, d in iter_write_entries(files)]

    def upload(self, local_path: PathLike, path: Optional[PathLike] = None) -> FileEntry:
        """Stream the local file ``local_path`` to ``path`` (default: its base name)."""
        remote = os.fspath(path) if path is not None else os.path.basename(os.fspath(local_path))
        with open(local_path, "rb") as f:
            return self.write(remote, f)

    def read(self, path: PathLike) -> bytes:
        """The file's bytes."""
        with self._open() as http:
            return http.request("GET", self._path(path), timeout=transfer_timeout(http.cfg)).content

    def read_text(self, path: PathLike, encoding: str = "utf-8", errors: str = "strict") -> str:
        return self.read(path).decode(encoding, errors)

    def download(self, path: PathLike, local_path: PathLike) -> str:
        """Stream the file at ``path`` to ``local_path`` (written to ``<local_path>.part``
        first, then renamed). Returns ``local_path``."""
        local = os.fspath(local_path)
        with self._open() as http:
            return http.download(self._path(path), local)

    def list(self, path: PathLike = "", recursive: bool = False) -> List[FileEntry]:
        """Entries of the directory ``path`` (the root by default)."""
        with self._open() as http:
            doc = decode_json(http.request("GET", self._root(), params=list_params(path, recursive)))
        return [FileEntry.from_json(d) for d in (doc.get("entries") or [])]

    def exists(self, path: PathLike) -> bool:
        """Whether ``path`` exists (file or directory)."""
        rel = workspace_relative(path).strip("/")
        if rel == "":
            return True
        parent, _, name = rel.rpartition("/")
        try:
            return any(e.name == name for e in self.list(parent))
        except (errors.FileNotFound, errors.NotARegularFile):
            return False

    def remove(self, path: PathLike) -> None:
        """Delete the file or directory at ``path``."""
        with self._open() as http:
            http.request("DELETE", self._path(path)).close()


class Files(BaseFiles):
    """The sandbox's ``/workspace``. Paths are relative to it; an absolute path must start with
    ``/workspace/``."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sb = sandbox

    def _root(self) -> str:
        return sandbox_path(self._sb.id, "files")

    def _open(self) -> ContextManager[SyncHTTP]:
        # the sandbox's own connection: once the sandbox is closed, so are its files
        return contextlib.nullcontext(self._sb._http)

    def upload_dir(self, local_dir: PathLike, remote_dir: PathLike = "") -> List[FileEntry]:
        """Upload the tree under ``local_dir`` into the directory ``remote_dir`` (created if
        missing; merged into it if it exists), keeping the layout and file modes, as one
        streamed tar (``PUT /v1/sandboxes/{id}/archive``). Symlinks to files are uploaded as
        the files they point at; symlinks to directories, FIFOs and devices are left out.
        The server writes nothing unless the whole archive is accepted. Returns the files."""
        plan = DirUpload(local_dir, remote_dir)
        resp = self._sb._http.request(
            "PUT",
            sandbox_path(self._sb.id, "archive"),
            params={"path": plan.remote},
            body=plan.body(),
            headers={"Content-Type": "application/x-tar"},
            timeout=transfer_timeout(self._sb._http.cfg),
        )
        resp.close()
        return plan.files()

    def download_dir(self, remote_dir: PathLike, local_dir: PathLike, *, gzip: bool = False) -> str:
        """Stream the workspace directory ``remote_dir`` as a tar (``GET .../archive``;
        ``gzip=True`` compresses it on the wire) and extract it into ``local_dir`` (created if
        missing) as it arrives. Entries that would land outside ``local_dir`` (absolute names,
        ``..``, links pointing out, paths through a symlink that leads out) and devices or FIFOs
        raise :class:`~sandlot.errors.InvalidArchive` naming the entry. Returns ``local_dir``."""
        params = {"path": remote_dir_param(remote_dir)}
        if gzip:
            params["gzip"] = "true"
        resp = self._sb._http.request(
            "GET",
            sandbox_path(self._sb.id, "archive"),
            params=params,
            stream=True,
            timeout=transfer_timeout(self._sb._http.cfg),
        )
        try:
            return extract_stream(resp.iter_bytes(), local_dir)
        except httpx.TransportError as e:
            raise transport_error(e, "GET", str(resp.request.url)) from e
        finally:
            resp.close()


def list_params(path: PathLike, recursive: bool) -> Optional[Dict[str, str]]:
    """The query of a files listing: the directory (the root when empty) and ``recursive``."""
    params: Dict[str, str] = {}
    rel = workspace_relative(path)
    if rel:
        params["path"] = rel
    if recursive:
        params["recursive"] = "true"
    return params or None


def _entry_from_response(resp: httpx.Response, path: PathLike) -> FileEntry:
    if resp.content:
        doc = decode_json(resp)
        if isinstance(doc, dict):
            return FileEntry.from_json(doc)
    rel = workspace_relative(path)
    return FileEntry(path=rel, name=rel.rsplit("/", 1)[-1], kind="file", size=0, modified=0, mode=0)
