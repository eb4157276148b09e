"""The asyncio client: :class:`AsyncSandbox` and its :class:`AsyncFiles`, the same shape as
the synchronous :class:`~sandlot.Sandbox` with coroutines."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import tempfile
from typing import (
    Any,
    AsyncContextManager,
    AsyncIterator,
    Awaitable,
    Callable,
    Dict,
    Generator,
    List,
    Mapping,
    Optional,
    Sequence,
    Union,
)
from urllib.parse import quote

import httpx

from . import errors
from . import jobs as _jobs
from ._core import (
    ConnectionConfig,
    ContextArg,
    LimitsArg,
    PortsArg,
    SnapshotArg,
    StreamState,
    VolumesArg,
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
from ._archive import DirUpload, extract_file
from ._archive import remote_dir as remote_dir_param
from ._http import AsyncHTTP, Data, async_body
from ._sse import SSEDecoder
from .jobs import AsyncJob
from .models import BackgroundOutput, Context, Diff, Execution, ExecutionRecord, FileEntry, ForkResult, SandboxInfo, Snapshot
from .sandbox import (
    WriteEntries,
    _check_running,
    _context_path,
    _entry_from_response,
    iter_write_entries,
    list_params,
)

__all__ = ["AsyncSandbox", "AsyncFiles", "AsyncContexts"]

PathLike = Union[str, "os.PathLike[str]"]
AnyCallback = Callable[[Any], Union[Any, Awaitable[Any]]]


async def _call(cb: AnyCallback, arg: Any) -> None:
    out = cb(arg)
    if inspect.isawaitable(out):
        await out


class _Creating:
    """What :meth:`AsyncSandbox.create` returns: await it for the sandbox, or use it directly
    as ``async with AsyncSandbox.create() as sb:``."""

    def __init__(self, coro_factory: Callable[[], Awaitable["AsyncSandbox"]]) -> None:
        self._factory = coro_factory
        self._sb: Optional[AsyncSandbox] = None

    def __await__(self) -> Generator[Any, None, "AsyncSandbox"]:
        return self._factory().__await__()

    async def __aenter__(self) -> "AsyncSandbox":
        self._sb = await self._factory()
        return self._sb

    async def __aexit__(self, *exc: Any) -> None:
        if self._sb is not None:
            await self._sb.kill()


class AsyncSandbox:
    """A sandbox driven from asyncio::

        async with AsyncSandbox.create() as sb:
            ex = await sb.run_code("print('hi')", on_stdout=print)

    Create one with ``await AsyncSandbox.create(...)`` (same arguments as
    :class:`~sandlot.Sandbox`); callbacks of :meth:`run_code` may be plain functions or
    coroutine functions.
    """

    files: "AsyncFiles"
    contexts: "AsyncContexts"
    _http: AsyncHTTP
    _info: SandboxInfo
    _closed: bool

    def __init__(self, *_: Any, **__: Any) -> None:
        raise TypeError("use `await AsyncSandbox.create(...)` (or `async with AsyncSandbox.create(...)`)")

    @classmethod
    def _from(cls, http: AsyncHTTP, info: SandboxInfo) -> "AsyncSandbox":
        obj = cls.__new__(cls)
        obj._http = http
        obj._info = info
        obj._closed = False
        obj.files = AsyncFiles(obj)
        obj.contexts = AsyncContexts(obj)
        return obj

    @classmethod
    def create(
        cls,
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
        transport: Optional[httpx.AsyncBaseTransport] = None,
        review_wait: Optional[float] = None,
        review: Optional[str] = None,
    ) -> _Creating:
        """Create a sandbox; see :class:`~sandlot.Sandbox` for the arguments."""
        body = create_body(
            template, timeout, env, metadata, limits, max_lifetime, from_snapshot, on_idle, volumes, ports, all_ports,
            tier, mounts,
        )

        async def make() -> "AsyncSandbox":
            cfg = ConnectionConfig.resolve(url, api_key, request_timeout, retries)
            http = AsyncHTTP(cfg, transport)
            try:
                base = state_timeout(cfg) if from_snapshot or review_wait else None
                resp = await http.request(
                    "POST",
                    "/v1/sandboxes",
                    json=body,
                    params=review_params(review_wait, review),
                    timeout=held_timeout(base, review_wait) if base is not None else None,
                )
                raise_if_held(resp)
                info = SandboxInfo.from_json(decode_json(resp))
            except BaseException:
                await http.aclose()
                raise
            return cls._from(http, info)

        return _Creating(make)

    @classmethod
    async def connect(
        cls,
        sandbox_id: str,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        resume: bool = True,
        request_timeout: Optional[float] = None,
        retries: Optional[int] = None,
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ) -> "AsyncSandbox":
        """See :meth:`Sandbox.connect <sandlot.Sandbox.connect>`: a paused sandbox is resumed
        unless ``resume=False``."""
        http = AsyncHTTP(ConnectionConfig.resolve(url, api_key, request_timeout, retries), transport)
        try:
            info = SandboxInfo.from_json(decode_json(await http.request("GET", sandbox_path(sandbox_id))))
            if info.state == "paused":
                if resume:
                    resp = await http.request("POST", sandbox_path(sandbox_id, "resume"), timeout=state_timeout(http.cfg))
                    info = SandboxInfo.from_json(decode_json(resp))
            else:
                _check_running(info)
        except BaseException:
            await http.aclose()
            raise
        return cls._from(http, info)

    @staticmethod
    async def list(
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        all: bool = False,  # noqa: A002
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ) -> List[SandboxInfo]:
        http = AsyncHTTP(ConnectionConfig.resolve(url, api_key), transport)
        try:
            doc = decode_json(await http.request("GET", "/v1/sandboxes", params={"all": "true"} if all else None))
        finally:
            await http.aclose()
        return [SandboxInfo.from_json(d) for d in (doc.get("sandboxes") or [])]

    @staticmethod
    async def health(
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ) -> Dict[str, Any]:
        """See :meth:`Sandbox.health <sandlot.Sandbox.health>`."""
        http = AsyncHTTP(ConnectionConfig.resolve(url, api_key), transport)
        try:
            resp = await http.request("GET", "/v1/health")
            try:
                doc = resp.json()
            except ValueError:
                doc = {"status": resp.text}
        finally:
            await http.aclose()
        return doc if isinstance(doc, dict) else {"status": doc}

    # -- identity and lifecycle -----------------------------------------------------------
    @property
    def id(self) -> str:
        return self._info.id

    @property
    def sandbox_id(self) -> str:
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

    async def info(self) -> SandboxInfo:
        self._info = SandboxInfo.from_json(decode_json(await self._http.request("GET", sandbox_path(self.id))))
        return self._info

    async def is_running(self) -> bool:
        try:
            return (await self.info()).state == "running"
        except (errors.SandboxNotFound, errors.SandboxGone):
            return False

    async def kill(self) -> bool:
        if self._closed:
            return False
        try:
            resp = await self._http.request("DELETE", sandbox_path(self.id))
            await resp.aclose()
            deleted = True
        except (errors.SandboxNotFound, errors.SandboxGone):
            deleted = False
        self._closed = True
        await self._http.aclose()
        return deleted

    async def close(self, kill: bool = True, *, pause: bool = False) -> None:
        """See :meth:`Sandbox.close <sandlot.Sandbox.close>`; ``pause=True`` pauses the
        sandbox instead of deleting it."""
        if pause:
            async with self._http.open() as http:
                resp = await http.request("POST", sandbox_path(self.id, "pause"), timeout=state_timeout(http.cfg))
                self._info = SandboxInfo.from_json(decode_json(resp))
            if not self._closed:
                self._closed = True
                await self._http.aclose()
        elif kill:
            await self.kill()
        elif not self._closed:
            self._closed = True
            await self._http.aclose()

    # -- saved state: fork, pause and resume, snapshots ------------------------------------
    async def fork(
        self, n: int = 1, same_seed: bool = False, *, review_wait: Optional[float] = None, review: Optional[str] = None
    ) -> "ForkResult[AsyncSandbox]":
        """See :meth:`Sandbox.fork <sandlot.Sandbox.fork>`: the children are
        :class:`AsyncSandbox` handles."""
        resp = await self._http.request(
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
        children = [type(self)._from(self._http.sibling(), info) for info in infos]
        return ForkResult(children, not_captured=not_captured, took_ms=took_ms, infos=infos, raw=raw)

    async def pause(self) -> SandboxInfo:
        """See :meth:`Sandbox.pause <sandlot.Sandbox.pause>`."""
        resp = await self._http.request("POST", sandbox_path(self.id, "pause"), timeout=state_timeout(self._http.cfg))
        self._info = SandboxInfo.from_json(decode_json(resp))
        return self._info

    async def resume(self, *, review_wait: Optional[float] = None, review: Optional[str] = None) -> SandboxInfo:
        """See :meth:`Sandbox.resume <sandlot.Sandbox.resume>`."""
        resp = await self._http.request(
            "POST",
            sandbox_path(self.id, "resume"),
            params=review_params(review_wait, review),
            timeout=held_timeout(state_timeout(self._http.cfg), review_wait),
        )
        raise_if_held(resp)
        self._info = SandboxInfo.from_json(decode_json(resp))
        return self._info

    async def snapshot(self, name: Optional[str] = None) -> Snapshot:
        """See :meth:`Sandbox.snapshot <sandlot.Sandbox.snapshot>`."""
        resp = await self._http.request(
            "POST", sandbox_path(self.id, "snapshots"), json=snapshot_body(name), timeout=state_timeout(self._http.cfg)
        )
        return Snapshot.from_json(decode_json(resp))

    async def diff(self, other: Union["AsyncSandbox", SandboxInfo, str]) -> Diff:
        """See :meth:`Sandbox.diff <sandlot.Sandbox.diff>`."""
        path = sandbox_path(self.id, "diff", quote(Diff.target(other), safe=""))
        resp = await self._http.request("GET", path, timeout=state_timeout(self._http.cfg))
        return Diff.from_json(decode_json(resp))

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.kill()

    def __repr__(self) -> str:
        return f"AsyncSandbox(id={self.id!r}, template={self._info.template!r})"

    # -- execution ------------------------------------------------------------------------
    async def run_code(
        self,
        code: str,
        language: str = "python",
        on_stdout: Optional[AnyCallback] = None,
        on_stderr: Optional[AnyCallback] = None,
        on_result: Optional[AnyCallback] = None,
        on_error: Optional[AnyCallback] = None,
        timeout: Optional[float] = None,
        *,
        stream: Optional[bool] = None,
        context: ContextArg = None,
        review_wait: Optional[float] = None,
        review: Optional[str] = None,
        on_failure: Optional[str] = None,
    ) -> Execution:
        """See :meth:`Sandbox.run_code`; callbacks may be coroutine functions."""
        streaming = stream if stream is not None else any(cb is not None for cb in (on_stdout, on_stderr, on_result, on_error))
        path = sandbox_path(self.id, "execute")
        body = execute_body(code, language, timeout, streaming, context, on_failure)
        held = review_params(review_wait, review)
        # The read must outlast the wait for a person too.
        http_timeout = execute_timeout(self._http.cfg, None if timeout is None else timeout + float(review_wait or 0))
        if not streaming:
            resp = await self._http.request(
                "POST", path, json=body, params=held, timeout=http_timeout, headers={"Accept": "application/json"}
            )
            raise_if_held(resp)
            return Execution.from_json(decode_json(resp), client=self._http)
        state = StreamState(on_stdout, on_stderr, on_result, on_error, client=self._http)
        resp = await self._http.request(
            "POST", path, json=body, params=held, timeout=http_timeout, headers={"Accept": "text/event-stream"}, stream=True
        )
        try:
            if not is_event_stream(resp):
                await resp.aread()
                raise_if_held(resp)
                ex = Execution.from_json(decode_json(resp), client=self._http)
                for cb, arg in replay_callbacks(ex, state):
                    await _call(cb, arg)
                return ex
            dec = SSEDecoder()
            try:
                async for line in resp.aiter_lines():
                    ev = dec.feed(line)
                    if ev is None:
                        continue
                    for cb, arg in state.handle(ev):
                        await _call(cb, arg)
                    if state.final is not None:
                        break
                else:
                    ev = dec.flush()
                    if ev is not None:
                        for cb, arg in state.handle(ev):
                            await _call(cb, arg)
            except httpx.TransportError as e:
                raise transport_error(e, "POST", path) from e
        finally:
            await resp.aclose()
        return state.finish()

    async def run_bash(self, code: str, **kwargs: Any) -> Execution:
        return await self.run_code(code, language="bash", **kwargs)

    async def interrupt(self) -> bool:
        doc = decode_json(await self._http.request("POST", sandbox_path(self.id, "interrupt")))
        return bool(doc.get("interrupted")) if isinstance(doc, dict) else False

    async def executions(self) -> List[ExecutionRecord]:
        doc = decode_json(await self._http.request("GET", sandbox_path(self.id, "executions")))
        return [ExecutionRecord.from_json(d, client=self._http) for d in (doc.get("executions") or [])]

    async def background_output(self, clear: bool = False) -> BackgroundOutput:
        """See :meth:`Sandbox.background_output <sandlot.Sandbox.background_output>`."""
        params = {"clear": "true"} if clear else None
        doc = decode_json(await self._http.request("GET", sandbox_path(self.id, "background"), params=params))
        return BackgroundOutput.from_json(doc if isinstance(doc, dict) else {})

    # -- the record: jobs, metrics, lineage, run bundles -----------------------------------
    async def submit_job(
        self,
        code: str,
        language: str = "python",
        *,
        timeout: Optional[float] = None,
        idempotent: bool = False,
        metadata: Optional[Mapping[str, Any]] = None,
    ) -> AsyncJob:
        """See :meth:`Sandbox.submit_job <sandlot.Sandbox.submit_job>`: an
        :class:`~sandlot.AsyncJob`."""
        return await _jobs.async_submit_job(
            self, code, language, timeout=timeout, idempotent=idempotent, metadata=metadata
        )

    async def jobs(self) -> List[AsyncJob]:
        """The sandbox's jobs, in submission order."""
        return await _jobs.async_list_jobs(self)

    async def metrics(self) -> Dict[str, Any]:
        """See :meth:`Sandbox.metrics <sandlot.Sandbox.metrics>`."""
        return await _jobs.async_sandbox_metrics(self)

    async def lineage(self) -> Dict[str, Any]:
        """See :meth:`Sandbox.lineage <sandlot.Sandbox.lineage>`."""
        return await _jobs.async_sandbox_lineage(self)

    async def save_bundle(self, path: PathLike) -> str:
        """See :meth:`Sandbox.save_bundle <sandlot.Sandbox.save_bundle>`."""
        return await _jobs.async_save_bundle(self, path)


class AsyncContexts:
    """The sandbox's code contexts; see :class:`~sandlot.sandbox.Contexts`."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sb = sandbox

    async def create(self, cwd: Optional[str] = None) -> Context:
        body = {"cwd": cwd} if cwd is not None else None
        return Context.from_json(
            decode_json(await self._sb._http.request("POST", sandbox_path(self._sb.id, "contexts"), json=body))
        )

    async def list(self) -> List[Context]:
        doc = decode_json(await self._sb._http.request("GET", sandbox_path(self._sb.id, "contexts")))
        return [Context.from_json(d) for d in (doc.get("contexts") or [])]

    async def restart(self, context: ContextArg) -> Context:
        resp = await self._sb._http.request("POST", _context_path(self._sb.id, context, "restart"))
        return Context.from_json(decode_json(resp))

    async def remove(self, context: ContextArg) -> None:
        resp = await self._sb._http.request("DELETE", _context_path(self._sb.id, context))
        await resp.aclose()


@contextlib.asynccontextmanager
async def _same(http: AsyncHTTP) -> AsyncIterator[AsyncHTTP]:
    # contextlib.nullcontext is an async context manager only from Python 3.10 on
    yield http


class AsyncBaseFiles:
    """:class:`~sandlot.sandbox.BaseFiles` for asyncio: the files API of a sandbox's
    ``/workspace`` (:class:`AsyncFiles`) or of a named volume
    (:class:`~sandlot.volumes.AsyncVolumeFiles`), as coroutines."""

    def _root(self) -> str:
        raise NotImplementedError

    def _open(self) -> AsyncContextManager[AsyncHTTP]:
        raise NotImplementedError

    def _path(self, path: PathLike) -> str:
        return self._root() + "/" + encode_file_path(path)

    async def write(self, path: PathLike, data: Data) -> FileEntry:
        """Create or replace ``path`` with bytes, str, or a file-like object (sync or with an
        ``async read``), streamed in chunks."""
        factory, headers = async_body(data)
        async with self._open() as http:
            resp = await http.request("PUT", self._path(path), body=factory, headers=headers, timeout=transfer_timeout(http.cfg))
            return _entry_from_response(resp, path)

    async def write_many(self, files: WriteEntries) -> List[FileEntry]:
        return [await self.write(p, d) for p, d in iter_write_entries(files)]

    async def upload(self, local_path: PathLike, path: Optional[PathLike] = None) -> FileEntry:
        remote = os.fspath(path) if path is not None else os.path.basename(os.fspath(local_path))
        with open(local_path, "rb") as f:
            return await self.write(remote, f)

    async def read(self, path: PathLike) -> bytes:
        async with self._open() as http:
            resp = await http.request("GET", self._path(path), timeout=transfer_timeout(http.cfg))
            return resp.content

    async def read_text(self, path: PathLike, encoding: str = "utf-8", errors: str = "strict") -> str:
        return (await self.read(path)).decode(encoding, errors)

    async def download(self, path: PathLike, local_path: PathLike) -> str:
        local = os.fspath(local_path)
        async with self._open() as http:
            return await http.download(self._path(path), local)

    async def list(self, path: PathLike = "", recursive: bool = False) -> List[FileEntry]:
        async with self._open() as http:
            doc = decode_json(await http.request("GET", self._root(), params=list_params(path, recursive)))
        return [FileEntry.from_json(d) for d in (doc.get("entries") or [])]

    async def exists(self, path: PathLike) -> bool:
        rel = workspace_relative(path).strip("/")
        if rel == "":
            return True
        parent, _, name = rel.rpartition("/")
        try:
            return any(e.name == name for e in await self.list(parent))
        except (errors.FileNotFound, errors.NotARegularFile):
            return False

    async def remove(self, path: PathLike) -> None:
        async with self._open() as http:
            resp = await http.request("DELETE", self._path(path))
            await resp.aclose()


class AsyncFiles(AsyncBaseFiles):
    """The sandbox's ``/workspace``; see :class:`~sandlot.sandbox.Files`."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sb = sandbox

    def _root(self) -> str:
        return sandbox_path(self._sb.id, "files")

    def _open(self) -> AsyncContextManager[AsyncHTTP]:
        return _same(self._sb._http)

    async def upload_dir(self, local_dir: PathLike, remote_dir: PathLike = "") -> List[FileEntry]:
        """See :meth:`~sandlot.sandbox.Files.upload_dir`."""
        plan = DirUpload(local_dir, remote_dir)
        resp = await self._sb._http.request(
            "PUT",
            sandbox_path(self._sb.id, "archive"),
            params={"path": plan.remote},
            body=plan.abody(),
            headers={"Content-Type": "application/x-tar"},
            timeout=transfer_timeout(self._sb._http.cfg),
        )
        await resp.aclose()
        return plan.files()

    async def download_dir(self, remote_dir: PathLike, local_dir: PathLike, *, gzip: bool = False) -> str:
        """See :meth:`~sandlot.sandbox.Files.download_dir`. The tar is spooled to a temporary
        file as it arrives and extracted in a worker thread, so the event loop never blocks on
        the disk for long."""
        params = {"path": remote_dir_param(remote_dir)}
        if gzip:
            params["gzip"] = "true"
        resp = await self._sb._http.request(
            "GET",
            sandbox_path(self._sb.id, "archive"),
            params=params,
            stream=True,
            timeout=transfer_timeout(self._sb._http.cfg),
        )
        with tempfile.TemporaryFile() as spool:
            try:
                async for chunk in resp.aiter_bytes():
                    spool.write(chunk)
            except httpx.TransportError as e:
                raise transport_error(e, "GET", str(resp.request.url)) from e
            finally:
                await resp.aclose()
            spool.seek(0)
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, extract_file, spool, local_dir)
