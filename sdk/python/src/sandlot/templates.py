"""Templates: named environments sandboxes are forked from (extra pinned packages, modules
imported once, setup code whose variables every sandbox starts with).

::

    from sandlot import Sandbox, Templates

    with Templates() as templates:
        templates.create(name="answer", setup="x = 41")
        templates.wait_ready("answer", timeout=600)
    with Sandbox(template="answer") as sb:
        print(sb.run_code("x + 1").text)   # "42"
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, List, Mapping, Optional

import httpx

from . import errors
from ._core import ConnectionConfig, decode_json, template_body, template_path
from ._http import AsyncHTTP, SyncHTTP
from .models import Template

__all__ = ["Templates", "AsyncTemplates"]

DEFAULT_WAIT_TIMEOUT = 900.0
DEFAULT_POLL_INTERVAL = 1.0


def _check_wait(tpl: Template, name: str, timeout: Optional[float], started: float) -> bool:
    """True when ``tpl`` is ready; raises when it failed or the wait is over."""
    if tpl.is_ready:
        return True
    tpl.raise_for_failure()
    if timeout is not None and time.monotonic() - started >= timeout:
        raise errors.TemplateBuildTimeout(
            f"template {name!r} was still {tpl.status or 'building'} after {timeout:g} s", template=name
        )
    return False


class Templates:
    """The server's templates (``/v1/templates``)::

        templates = Templates(url=..., api_key=...)   # $SANDLOT_URL / $SANDLOT_API_KEY by default
        templates.create(name="ds", packages=["scikit-learn==1.5.2"], imports=["sklearn"])
        tpl = templates.wait_ready("ds")              # Template, or TemplateBuildFailed
        Sandbox(template="ds")

    Use it as a context manager, or call :meth:`close`, to release the connection.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = None,
        retries: Optional[int] = None,
        transport: Optional[httpx.BaseTransport] = None,
    ) -> None:
        self._http = SyncHTTP(ConnectionConfig.resolve(url, api_key, request_timeout, retries), transport)

    def create(self, spec: Optional[Mapping[str, Any]] = None, **fields: Any) -> Template:
        """Create (or replace) a template and start building it; returns it with status
        ``building``. Give the TemplateSpec as a dict, as keywords (``name``, ``description``,
        ``packages`` as ``["name==version"]``, ``imports``, ``setup``, ``limits``), or both
        (keywords win). Poll with :meth:`get` or block with :meth:`wait_ready`."""
        resp = self._http.request("POST", template_path(), json=template_body(spec, fields))
        return Template.from_json(decode_json(resp))

    def get(self, name: str) -> Template:
        """The template and where its build is; :class:`~sandlot.TemplateNotFound` if none."""
        return Template.from_json(decode_json(self._http.request("GET", template_path(name))))

    def list(self) -> List[Template]:
        """Every template of the caller's tenant by name, the built-in ``default`` among them
        (an operator key: every tenant's)."""
        doc = decode_json(self._http.request("GET", template_path()))
        return [Template.from_json(d) for d in (doc.get("templates") or [])]

    def delete(self, name: str, *, tenant: Optional[str] = None) -> None:
        """Delete the template: its zygote and warm pool go and the tenant's template slot is
        freed. :class:`~sandlot.TemplateInUse` while a sandbox that has not ended or a snapshot
        uses it; :class:`~sandlot.TemplateNotFound` if the tenant has none of that name.
        ``tenant``: another tenant's (operator keys only)."""
        self._http.request("DELETE", template_path(name, tenant))

    def wait_ready(
        self, name: str, timeout: Optional[float] = DEFAULT_WAIT_TIMEOUT, poll_interval: float = DEFAULT_POLL_INTERVAL
    ) -> Template:
        """Poll until the template is ``ready`` and return it. Raises
        :class:`~sandlot.TemplateBuildFailed` (with the server's ``error``) if its build
        failed, :class:`~sandlot.TemplateBuildTimeout` after ``timeout`` seconds (``None``:
        wait forever)."""
        started = time.monotonic()
        while True:
            tpl = self.get(name)
            if _check_wait(tpl, name, timeout, started):
                return tpl
            time.sleep(poll_interval)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Templates":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Templates(url={self._http.cfg.url!r})"


class AsyncTemplates:
    """:class:`Templates` for asyncio: the same methods as coroutines
    (``async with AsyncTemplates() as t: await t.wait_ready(...)``)."""

    def __init__(
        self,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = None,
        retries: Optional[int] = None,
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ) -> None:
        self._http = AsyncHTTP(ConnectionConfig.resolve(url, api_key, request_timeout, retries), transport)

    async def create(self, spec: Optional[Mapping[str, Any]] = None, **fields: Any) -> Template:
        resp = await self._http.request("POST", template_path(), json=template_body(spec, fields))
        return Template.from_json(decode_json(resp))

    async def get(self, name: str) -> Template:
        return Template.from_json(decode_json(await self._http.request("GET", template_path(name))))

    async def list(self) -> List[Template]:
        doc = decode_json(await self._http.request("GET", template_path()))
        return [Template.from_json(d) for d in (doc.get("templates") or [])]

    async def delete(self, name: str, *, tenant: Optional[str] = None) -> None:
        await self._http.request("DELETE", template_path(name, tenant))

    async def wait_ready(
        self, name: str, timeout: Optional[float] = DEFAULT_WAIT_TIMEOUT, poll_interval: float = DEFAULT_POLL_INTERVAL
    ) -> Template:
        started = time.monotonic()
        while True:
            tpl = await self.get(name)
            if _check_wait(tpl, name, timeout, started):
                return tpl
            await asyncio.sleep(poll_interval)

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncTemplates":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncTemplates(url={self._http.cfg.url!r})"
