"""HTTP plumbing: one httpx client per sandbox handle, typed errors, retries on connect
failures only (a request that may have reached the server is never sent again), downloads to
a local file, and upload bodies. ``SyncHTTP`` and ``AsyncHTTP`` are also what artifacts read
through (``models.ArtifactReader``, defined in ``_artifacts``)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import io
import os
import stat
import time
from typing import (
    Any,
    AsyncIterator,
    Callable,
    Dict,
    Iterator,
    Mapping,
    Optional,
    Tuple,
    Union,
)

import httpx

from . import errors
from ._core import CHUNK_SIZE, CONNECT_ERRORS, ConnectionConfig, transfer_timeout, transport_error

BodyFactory = Callable[[], Any]


def _error(resp: httpx.Response, body: bytes, cfg: ConnectionConfig) -> errors.SandlotError:
    err = errors.error_from_response(resp.status_code, body, resp.headers)
    if isinstance(err, errors.Unauthenticated):
        err.message = f"{err.message} {cfg.key_hint()}"
    return err


def _raise_for_status_sync(resp: httpx.Response, cfg: ConnectionConfig) -> None:
    if resp.status_code < 400:
        return
    try:
        body = resp.read()
    except httpx.HTTPError:
        body = b""
    finally:
        resp.close()
    raise _error(resp, body, cfg)


async def _raise_for_status_async(resp: httpx.Response, cfg: ConnectionConfig) -> None:
    if resp.status_code < 400:
        return
    try:
        body = await resp.aread()
    except httpx.HTTPError:
        body = b""
    finally:
        await resp.aclose()
    raise _error(resp, body, cfg)


class SyncHTTP:
    def __init__(self, cfg: ConnectionConfig, transport: Optional[httpx.BaseTransport] = None) -> None:
        self.cfg = cfg
        self._transport = transport
        self.client = httpx.Client(base_url=cfg.url, headers=cfg.headers(), timeout=cfg.timeout(), transport=transport)

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Optional[Mapping[str, str]] = None,
        body: Optional[BodyFactory] = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[httpx.Timeout] = None,
        stream: bool = False,
    ) -> httpx.Response:
        """Send a request and return the response; raise the typed error for a 4xx/5xx.

        ``body`` is a factory giving the request content for each attempt. Only failures to
        connect are retried. With ``stream=True`` the caller must close the response.
        """
        attempt = 0
        while True:
            req = self.client.build_request(
                method,
                path,
                json=json,
                params=params,
                content=body() if body is not None else None,
                headers=headers,
                timeout=timeout if timeout is not None else self.cfg.timeout(),
            )
            try:
                resp = self.client.send(req, stream=stream)
            except CONNECT_ERRORS as e:
                if attempt < self.cfg.retries:
                    time.sleep(self.cfg.backoff_delay(attempt))
                    attempt += 1
                    continue
                raise transport_error(e, method, str(req.url)) from e
            except httpx.TransportError as e:
                raise transport_error(e, method, str(req.url)) from e
            _raise_for_status_sync(resp, self.cfg)
            return resp

    def close(self) -> None:
        self.client.close()

    def sibling(self) -> "SyncHTTP":
        """A new connection to the same server with the same settings, for a sandbox this
        one's calls created (a fork's children): each handle closes its own."""
        return SyncHTTP(self.cfg, self._transport)

    def download(self, path: str, local: str) -> str:
        """Streams ``GET path`` to ``local``, written to ``<local>.part`` first, then renamed.
        Returns ``local``."""
        part = local + ".part"
        resp = self.request("GET", path, stream=True, timeout=transfer_timeout(self.cfg))
        try:
            with open(part, "wb") as f:
                for chunk in resp.iter_bytes():
                    f.write(chunk)
            os.replace(part, local)
        except httpx.TransportError as e:
            raise transport_error(e, "GET", path) from e
        finally:
            resp.close()
            if os.path.exists(part):
                os.unlink(part)
        return local

    # models.ArtifactReader: artifacts outlive their sandbox, hence open().
    def read_artifact(self, path: str) -> bytes:
        with self.open() as http:
            return http.request("GET", path, timeout=transfer_timeout(http.cfg)).content

    def download_artifact(self, path: str, local: str) -> str:
        with self.open() as http:
            return http.download(path, local)

    @contextlib.contextmanager
    def open(self) -> Iterator["SyncHTTP"]:
        """This connection while it is open; once closed (the sandbox was killed), a fresh one
        to the same server for the duration of the block. Artifacts use it: they outlive the
        sandbox that produced them."""
        if not self.client.is_closed:
            yield self
            return
        fresh = SyncHTTP(self.cfg, self._transport)
        try:
            yield fresh
        finally:
            fresh.close()


class AsyncHTTP:
    def __init__(self, cfg: ConnectionConfig, transport: Optional[httpx.AsyncBaseTransport] = None) -> None:
        self.cfg = cfg
        self._transport = transport
        self.client = httpx.AsyncClient(base_url=cfg.url, headers=cfg.headers(), timeout=cfg.timeout(), transport=transport)

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Optional[Mapping[str, str]] = None,
        body: Optional[BodyFactory] = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[httpx.Timeout] = None,
        stream: bool = False,
    ) -> httpx.Response:
        attempt = 0
        while True:
            req = self.client.build_request(
                method,
                path,
                json=json,
                params=params,
                content=body() if body is not None else None,
                headers=headers,
                timeout=timeout if timeout is not None else self.cfg.timeout(),
            )
            try:
                resp = await self.client.send(req, stream=stream)
            except CONNECT_ERRORS as e:
                if attempt < self.cfg.retries:
                    await asyncio.sleep(self.cfg.backoff_delay(attempt))
                    attempt += 1
                    continue
                raise transport_error(e, method, str(req.url)) from e
            except httpx.TransportError as e:
                raise transport_error(e, method, str(req.url)) from e
            await _raise_for_status_async(resp, self.cfg)
            return resp

    async def aclose(self) -> None:
        await self.client.aclose()

    def sibling(self) -> "AsyncHTTP":
        """See :meth:`SyncHTTP.sibling`."""
        return AsyncHTTP(self.cfg, self._transport)

    async def download(self, path: str, local: str) -> str:
        """See :meth:`SyncHTTP.download`."""
        part = local + ".part"
        resp = await self.request("GET", path, stream=True, timeout=transfer_timeout(self.cfg))
        try:
            with open(part, "wb") as f:
                async for chunk in resp.aiter_bytes():
                    f.write(chunk)
            os.replace(part, local)
        except httpx.TransportError as e:
            raise transport_error(e, "GET", path) from e
        finally:
            await resp.aclose()
            if os.path.exists(part):
                os.unlink(part)
        return local

    # models.AsyncArtifactReader: artifacts outlive their sandbox, hence open().
    async def aread_artifact(self, path: str) -> bytes:
        async with self.open() as http:
            resp = await http.request("GET", path, timeout=transfer_timeout(http.cfg))
            return resp.content

    async def adownload_artifact(self, path: str, local: str) -> str:
        async with self.open() as http:
            return await http.download(path, local)

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator["AsyncHTTP"]:
        """See :meth:`SyncHTTP.open`."""
        if not self.client.is_closed:
            yield self
            return
        fresh = AsyncHTTP(self.cfg, self._transport)
        try:
            yield fresh
        finally:
            await fresh.aclose()


# -- upload bodies --------------------------------------------------------------------------

Data = Union[bytes, bytearray, memoryview, str, Any]


def _file_size_and_start(f: Any) -> Tuple[Optional[int], Optional[int]]:
    """(bytes left to read, start position) of a binary file-like, each None when unknown."""
    if isinstance(f, io.TextIOBase):
        return None, None  # characters, not bytes: size unknown
    start: Optional[int] = None
    try:
        if f.seekable():
            start = f.tell()
    except (AttributeError, OSError, ValueError):
        start = None
    try:
        st = os.fstat(f.fileno())
        if stat.S_ISREG(st.st_mode) and start is not None:
            return max(st.st_size - start, 0), start
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        pass
    if start is not None:
        try:
            end = f.seek(0, os.SEEK_END)
            f.seek(start)
            return max(end - start, 0), start
        except (AttributeError, OSError, ValueError):
            pass
    return None, start


def _to_bytes(chunk: Any) -> bytes:
    if isinstance(chunk, str):
        return chunk.encode("utf-8")
    return bytes(chunk)


def sync_body(data: Data) -> Tuple[BodyFactory, Dict[str, str]]:
    """A body factory and headers for uploading ``data`` (bytes, str or a file-like read in
    chunks, never whole)."""
    headers = {"Content-Type": "application/octet-stream"}
    if isinstance(data, str):
        payload = data.encode("utf-8")
        return (lambda: payload), headers
    if isinstance(data, (bytes, bytearray, memoryview)):
        payload = bytes(data)
        return (lambda: payload), headers
    if not hasattr(data, "read"):
        raise TypeError(f"data must be bytes, str or a file-like object, not {type(data).__name__}")
    size, start = _file_size_and_start(data)
    if size is not None:
        headers["Content-Length"] = str(size)

    def factory() -> Iterator[bytes]:
        if start is not None:
            data.seek(start)

        def gen() -> Iterator[bytes]:
            left = size
            while left is None or left > 0:
                n = CHUNK_SIZE if left is None else min(CHUNK_SIZE, left)
                chunk = data.read(n)
                if not chunk:
                    break
                b = _to_bytes(chunk)
                if left is not None:
                    b = b[:left]
                    left -= len(b)
                yield b

        return gen()

    return factory, headers


def async_body(data: Data) -> Tuple[BodyFactory, Dict[str, str]]:
    """Like :func:`sync_body` for the async client; also accepts objects with ``async read``."""
    if isinstance(data, (str, bytes, bytearray, memoryview)):
        return sync_body(data)
    if not hasattr(data, "read"):
        raise TypeError(f"data must be bytes, str or a file-like object, not {type(data).__name__}")
    headers = {"Content-Type": "application/octet-stream"}
    if inspect.iscoroutinefunction(data.read):

        def afactory() -> AsyncIterator[bytes]:
            async def agen() -> AsyncIterator[bytes]:
                while True:
                    chunk = await data.read(CHUNK_SIZE)
                    if not chunk:
                        break
                    yield _to_bytes(chunk)

            return agen()

        return afactory, headers
    factory, headers = sync_body(data)

    def wrapped() -> AsyncIterator[bytes]:
        it = factory()

        async def agen() -> AsyncIterator[bytes]:
            for chunk in it:
                yield chunk

        return agen()

    return wrapped, headers
