"""Objects the SDK returns: executions and their results, sandboxes, files.

Each wraps the JSON the server sent (kept in ``raw``) and exposes it as attributes. The shapes
follow the wire model in ``crates/sandlot-types`` and, where it fits, E2B's code interpreter SDK.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Protocol, Tuple, TypeVar, Union, runtime_checkable

from .errors import (
    ExecutionError,
    ExecutionTimeout,
    FileTooLarge,
    InvalidArgument,
    TemplateBuildFailed,
)

__all__ = [
    "OutputMessage",
    "Result",
    "Logs",
    "ExecError",
    "Truncation",
    "Execution",
    "ImageResults",
    "FileEntry",
    "SandboxInfo",
    "ExecutionRecord",
    "Limits",
    "Artifact",
    "Context",
    "Template",
    "Restarted",
    "BackgroundEntry",
    "BackgroundOutput",
    "NotCaptured",
    "LastRestore",
    "Snapshot",
    "ForkResult",
    "VolumeMount",
    "VolumeUse",
    "Volume",
]

PathLike = Union[str, "os.PathLike[str]"]


@runtime_checkable
class ArtifactReader(Protocol):
    """How an :class:`Artifact` of a :class:`~sandlot.Sandbox` gets its bytes: the sandbox's
    HTTP connection (``_http.SyncHTTP``), handed to the objects it parses. A protocol, so that
    this module needs nothing from the HTTP layer above it. ``path`` is
    ``/v1/artifacts/<sha256>``; artifacts outlive their sandbox, so an implementation must still
    work once the sandbox (and its connection) is closed."""

    def read_artifact(self, path: str) -> bytes: ...

    def download_artifact(self, path: str, local: str) -> str: ...


@runtime_checkable
class AsyncArtifactReader(Protocol):
    """:class:`ArtifactReader` for an :class:`~sandlot.AsyncSandbox` (``_http.AsyncHTTP``)."""

    async def aread_artifact(self, path: str) -> bytes: ...

    async def adownload_artifact(self, path: str, local: str) -> str: ...


# What parsed objects hand to their artifacts; None for objects parsed without a connection.
ArtifactClient = Union[ArtifactReader, AsyncArtifactReader, None]

# MIME type of each named format of a Result.
_FORMATS: Dict[str, str] = {
    "text": "text/plain",
    "html": "text/html",
    "markdown": "text/markdown",
    "svg": "image/svg+xml",
    "png": "image/png",
    "jpeg": "image/jpeg",
    "pdf": "application/pdf",
    "latex": "text/latex",
    "json": "application/json",
    "javascript": "application/javascript",
}
_BINARY_FORMATS = ("png", "jpeg", "pdf")
_EXTENSIONS: Dict[str, str] = {
    ".png": "png",
    ".jpg": "jpeg",
    ".jpeg": "jpeg",
    ".pdf": "pdf",
    ".svg": "svg",
    ".html": "html",
    ".htm": "html",
    ".md": "markdown",
    ".tex": "latex",
    ".json": "json",
    ".js": "javascript",
    ".txt": "text",
}


class OutputMessage(str):
    """A chunk of stdout or stderr as handed to ``on_stdout`` / ``on_stderr`` callbacks.

    It is the chunk's text (a ``str``); ``line`` is the same text and ``error`` tells whether it
    came from stderr (both for E2B compatibility).
    """

    error: bool

    def __new__(cls, text: str, error: bool = False) -> "OutputMessage":
        obj = super().__new__(cls, text)
        obj.error = error
        return obj

    @property
    def line(self) -> str:
        return str(self)

    @property
    def text(self) -> str:
        return str(self)


def _mime_text(value: Any) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, list):  # Jupyter allows multi-line strings as lists of lines
        return "".join(str(v) for v in value)
    return value if isinstance(value, str) else str(value)


class Result:
    """One rich output of an execution: a ``display()``-ed value, a figure, or the value of the
    cell's last expression (``is_main_result``).

    ``raw`` is the MIME bundle as sent (``{"text/plain": ..., "image/png": <base64>, ...}``);
    ``text``, ``html``, ``png`` ... are its entries (images stay base64 strings, as in Jupyter
    and E2B; use :meth:`png_bytes` / :meth:`save` for the decoded bytes).
    """

    def __init__(
        self,
        data: Mapping[str, Any],
        *,
        is_main_result: bool = False,
        metadata: Optional[Mapping[str, Any]] = None,
    ) -> None:
        self.raw: Dict[str, Any] = dict(data)
        self.is_main_result = is_main_result
        self.metadata: Dict[str, Any] = dict(metadata or {})

    # -- formats --------------------------------------------------------------------------
    @property
    def text(self) -> Optional[str]:
        return _mime_text(self.raw.get("text/plain"))

    @property
    def html(self) -> Optional[str]:
        return _mime_text(self.raw.get("text/html"))

    @property
    def markdown(self) -> Optional[str]:
        return _mime_text(self.raw.get("text/markdown"))

    @property
    def svg(self) -> Optional[str]:
        return _mime_text(self.raw.get("image/svg+xml"))

    @property
    def png(self) -> Optional[str]:
        """The PNG image, base64-encoded."""
        return _b64(self.raw.get("image/png"))

    @property
    def jpeg(self) -> Optional[str]:
        """The JPEG image, base64-encoded."""
        return _b64(self.raw.get("image/jpeg"))

    @property
    def pdf(self) -> Optional[str]:
        return _b64(self.raw.get("application/pdf"))

    @property
    def latex(self) -> Optional[str]:
        return _mime_text(self.raw.get("text/latex"))

    @property
    def json(self) -> Any:
        return self.raw.get("application/json")

    @property
    def javascript(self) -> Optional[str]:
        return _mime_text(self.raw.get("application/javascript"))

    @property
    def extra(self) -> Dict[str, Any]:
        """MIME entries that have no named property."""
        known = set(_FORMATS.values())
        return {k: v for k, v in self.raw.items() if k not in known}

    def formats(self) -> List[str]:
        """Names of the formats present, e.g. ``["text", "html"]``; unnamed MIME types as is."""
        names = [name for name, mime in _FORMATS.items() if mime in self.raw]
        names.extend(self.extra.keys())
        return names

    @property
    def is_image(self) -> bool:
        return any(m in self.raw for m in ("image/png", "image/jpeg", "image/svg+xml"))

    # -- decoding -------------------------------------------------------------------------
    def png_bytes(self) -> Optional[bytes]:
        png = self.png
        return base64.b64decode(png) if png is not None else None

    def jpeg_bytes(self) -> Optional[bytes]:
        jpeg = self.jpeg
        return base64.b64decode(jpeg) if jpeg is not None else None

    def save_png(self, path: PathLike) -> str:
        """Write the decoded PNG to ``path``; raises ``ValueError`` if there is no PNG."""
        return self.save(path, format="png")

    def save(self, path: PathLike, format: Optional[str] = None) -> str:  # noqa: A002
        """Write one format of this result to ``path`` and return the path.

        The format is ``format`` if given, else the one the file extension names (``.png``,
        ``.jpg``, ``.svg``, ``.html``, ``.json``, ``.txt`` ...), else the first image format
        present. PNG, JPEG and PDF are base64-decoded; text formats are written as UTF-8.
        """
        path = os.fspath(path)
        fmt = format
        if fmt is None:
            fmt = _EXTENSIONS.get(os.path.splitext(path)[1].lower())
        if fmt is None:
            fmt = next((f for f in ("png", "jpeg", "svg", "pdf") if _FORMATS[f] in self.raw), None)
        if fmt is None or fmt not in _FORMATS:
            raise ValueError(f"cannot tell which format to save to {path!r}; pass format=")
        mime = _FORMATS[fmt]
        if mime not in self.raw:
            raise ValueError(f"result has no {fmt} output (formats: {', '.join(self.formats())})")
        value = self.raw[mime]
        if fmt in _BINARY_FORMATS:
            payload = base64.b64decode(_b64(value) or "")
        elif fmt == "json":
            payload = json.dumps(value, indent=2).encode("utf-8")
        else:
            payload = (_mime_text(value) or "").encode("utf-8")
        with open(path, "wb") as f:
            f.write(payload)
        return path

    # -- Jupyter display hooks ------------------------------------------------------------
    def _repr_html_(self) -> Optional[str]:
        return self.html

    def _repr_markdown_(self) -> Optional[str]:
        return self.markdown

    def _repr_svg_(self) -> Optional[str]:
        return self.svg

    def _repr_png_(self) -> Optional[str]:
        return self.png

    def _repr_jpeg_(self) -> Optional[str]:
        return self.jpeg

    def _repr_latex_(self) -> Optional[str]:
        return self.latex

    def _repr_json_(self) -> Any:
        return self.json

    def __str__(self) -> str:
        return self.text or ""

    def __repr__(self) -> str:
        kind = "main result" if self.is_main_result else "display"
        return f"Result({kind}, formats={self.formats()})"


def _b64(value: Any) -> Optional[str]:
    if value is None:
        return None
    text = _mime_text(value) or ""
    return "".join(text.split())  # Jupyter may wrap base64 over lines


@dataclass
class Logs:
    """stdout and stderr of an execution, as the chunks in which they arrived."""

    stdout: List[str] = field(default_factory=list)
    stderr: List[str] = field(default_factory=list)


@dataclass
class ExecError:
    """The error an execution raised (Python exception, or a Bash failure the server reports)."""

    name: str
    value: str
    traceback_lines: List[str] = field(default_factory=list)

    @property
    def traceback(self) -> str:
        """The traceback as one string (lines joined by newlines)."""
        return "\n".join(line.rstrip("\n") for line in self.traceback_lines)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ExecError":
        tb = d.get("traceback") or []
        if isinstance(tb, str):
            tb = tb.splitlines()
        return cls(name=str(d.get("name", "")), value=str(d.get("value", "")), traceback_lines=[str(x) for x in tb])

    def __str__(self) -> str:
        return f"{self.name}: {self.value}" if self.value else self.name


@dataclass
class Truncation:
    """Bytes of a text stream kept and dropped under the server's output budget."""

    kept_bytes: int = 0
    dropped_bytes: int = 0

    @classmethod
    def from_json(cls, d: Optional[Mapping[str, Any]]) -> "Truncation":
        d = d or {}
        return cls(kept_bytes=int(d.get("kept_bytes") or 0), dropped_bytes=int(d.get("dropped_bytes") or 0))


class Execution:
    """The outcome of one ``run_code`` call.

    ``results`` holds the rich outputs (``display()`` values and figures, then the value of the
    last expression) in the order they were produced; ``logs`` the stdout/stderr chunks;
    ``error`` the error raised, if any; ``end_state`` one of ``ok``, ``error``, ``timeout``,
    ``interrupted``, ``oom``, ``killed``. An execution that failed or timed out is returned, not
    raised: call :meth:`raise_for_error` to turn it into an exception.
    """

    def __init__(
        self,
        *,
        results: Optional[List[Result]] = None,
        logs: Optional[Logs] = None,
        error: Optional[ExecError] = None,
        raw: Optional[Dict[str, Any]] = None,
        client: ArtifactClient = None,
    ) -> None:
        self.results: List[Result] = results if results is not None else []
        self.logs: Logs = logs if logs is not None else Logs()
        self.error: Optional[ExecError] = error
        self.raw: Dict[str, Any] = raw if raw is not None else {}
        self._client = client
        self._artifacts: Optional[List[Artifact]] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any], client: ArtifactClient = None) -> "Execution":
        """Build an Execution from an ``ExecutionResult`` JSON object. ``client`` is the
        connection its :attr:`artifacts` download through (set by the sandbox that ran it)."""
        results: List[Result] = []
        logs = Logs()
        error: Optional[ExecError] = None
        outputs = d.get("outputs")
        if isinstance(outputs, list):
            for ev in outputs:
                if not isinstance(ev, Mapping):
                    continue
                kind = ev.get("type")
                if kind == "stdout":
                    logs.stdout.append(str(ev.get("text", "")))
                elif kind == "stderr":
                    logs.stderr.append(str(ev.get("text", "")))
                elif kind in ("display_data", "result"):
                    results.append(
                        Result(ev.get("data") or {}, is_main_result=kind == "result", metadata=_as_dict(ev.get("metadata")))
                    )
                elif kind == "error":
                    error = ExecError.from_json(ev)
        else:  # no event list: fall back to the summary fields
            if d.get("stdout"):
                logs.stdout.append(str(d["stdout"]))
            if d.get("stderr"):
                logs.stderr.append(str(d["stderr"]))
        if not any(r.is_main_result for r in results) and isinstance(d.get("result"), Mapping):
            results.append(Result(d["result"], is_main_result=True))
        if error is None and isinstance(d.get("error"), Mapping):
            error = ExecError.from_json(d["error"])
        return cls(results=results, logs=logs, error=error, raw=dict(d), client=client)

    # -- summary fields -------------------------------------------------------------------
    @property
    def id(self) -> Optional[str]:
        return self.raw.get("id")

    @property
    def sandbox_id(self) -> Optional[str]:
        return self.raw.get("sandbox_id")

    @property
    def language(self) -> Optional[str]:
        return self.raw.get("language")

    @property
    def end_state(self) -> str:
        return str(self.raw.get("end_state", "ok" if self.error is None else "error"))

    @property
    def ok(self) -> bool:
        """True when the execution ran to completion without an error."""
        return self.end_state == "ok"

    @property
    def exit_code(self) -> Optional[int]:
        return self.raw.get("exit_code")

    @property
    def duration_ms(self) -> Optional[float]:
        return self.raw.get("duration_ms")

    @property
    def cpu_time_ms(self) -> Optional[float]:
        return self.raw.get("cpu_time_ms")

    @property
    def peak_memory_bytes(self) -> Optional[int]:
        return self.raw.get("peak_memory_bytes")

    @property
    def started_at(self) -> Optional[str]:
        return self.raw.get("started_at")

    @property
    def sandbox_alive(self) -> bool:
        return bool(self.raw.get("sandbox_alive", True))

    @property
    def context(self) -> Optional[str]:
        """The code context the execution ran in (``default`` unless one was named)."""
        return self.raw.get("context")

    @property
    def restarted(self) -> Optional["Restarted"]:
        """Set when the sandbox's processes died or were killed during (or just before) this
        execution and were restarted in place: why, and what state was lost. Not an error:
        the sandbox, its files and its id carry on."""
        r = self.raw.get("restarted")
        return Restarted.from_json(r) if isinstance(r, Mapping) else None

    @property
    def background_bytes(self) -> int:
        """Bytes of background output (written while no execution ran) waiting on the server
        when this execution ended; read them with ``sandbox.background_output()``."""
        return int(self.raw.get("background_bytes") or 0)

    @property
    def artifacts(self) -> List["Artifact"]:
        """Workspace files the execution created or changed, as :class:`Artifact` objects
        (``[]`` when there were none). Their bytes stay downloadable from the server after the
        sandbox is gone, for as long as its retention says."""
        if self._artifacts is None:
            arts = self.raw.get("artifacts")
            self._artifacts = [
                Artifact.from_json(a, client=self._client) for a in (arts if isinstance(arts, list) else []) if isinstance(a, Mapping)
            ]
        return list(self._artifacts)

    @property
    def stdout(self) -> str:
        """All of stdout (after the server's output budget)."""
        if "stdout" in self.raw:
            return str(self.raw["stdout"])
        return "".join(self.logs.stdout)

    @property
    def stderr(self) -> str:
        if "stderr" in self.raw:
            return str(self.raw["stderr"])
        return "".join(self.logs.stderr)

    @property
    def stdout_truncation(self) -> Truncation:
        return Truncation.from_json(self.raw.get("stdout_truncation"))

    @property
    def stderr_truncation(self) -> Truncation:
        return Truncation.from_json(self.raw.get("stderr_truncation"))

    @property
    def main_result(self) -> Optional[Result]:
        for r in self.results:
            if r.is_main_result:
                return r
        return None

    @property
    def text(self) -> Optional[str]:
        """The text of the last expression's value, if the cell had one."""
        main = self.main_result
        return main.text if main is not None else None

    @property
    def images(self) -> "ImageResults":
        """The results that carry a PNG or JPEG image (figures, displayed images), in the order
        they were produced, wherever they sit among the other results: a list.

        ``plt.plot([1, 3, 2])`` makes the list of lines the cell's value *and* a figure, so
        the figure is ``ex.images[0]`` (or :attr:`image`) while ``ex.results[0]`` is the
        lines. Calling it (``ex.images()``, the spelling of earlier versions) gives an
        iterator over the same results."""
        return ImageResults(r for r in self.results if r.png is not None or r.jpeg is not None)

    @property
    def image(self) -> Optional[Result]:
        """The first image result (:attr:`images`), or ``None``."""
        imgs = self.images
        return imgs[0] if imgs else None

    @property
    def png(self) -> Optional[str]:
        """The first PNG image the execution produced, base64-encoded as :attr:`Result.png`
        is; ``None`` when there is none. :meth:`png_bytes` decodes it."""
        return next((r.png for r in self.results if r.png is not None), None)

    def png_bytes(self) -> Optional[bytes]:
        """The first PNG image, decoded; ``None`` when there is none."""
        png = self.png
        return base64.b64decode(png) if png is not None else None

    def save_png(self, path: PathLike) -> str:
        """Write the first PNG image (the first figure) to ``path`` and return the path;
        raises ``ValueError`` when the execution produced none."""
        data = self.png_bytes()
        if data is None:
            made = ", ".join(sorted({f for r in self.results for f in r.formats()})) or "no rich output"
            raise ValueError(f"the execution produced no PNG image ({made})")
        path = os.fspath(path)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def raise_for_error(self) -> "Execution":
        """Raise :class:`ExecutionTimeout` or :class:`ExecutionError` unless the execution
        ended ``ok``; return ``self`` otherwise (so it chains)."""
        state = self.end_state
        if state == "ok":
            return self
        if state == "timeout":
            raise ExecutionTimeout("execution timed out" + _alive_note(self), execution=self)
        if self.error is not None:
            msg = str(self.error)
            if state != "error":
                msg = f"{msg} (end state {state})"
            raise ExecutionError(msg, execution=self)
        if state == "error" and self.exit_code is not None:
            raise ExecutionError(f"command exited with status {self.exit_code}", execution=self)
        raise ExecutionError(f"execution ended {state}" + _alive_note(self), execution=self)

    def to_json(self) -> Dict[str, Any]:
        return dict(self.raw)

    def __repr__(self) -> str:
        parts = [f"end_state={self.end_state!r}", f"results={len(self.results)}"]
        if self.logs.stdout:
            parts.append(f"stdout={len(self.stdout)} chars")
        if self.logs.stderr:
            parts.append(f"stderr={len(self.stderr)} chars")
        if self.error is not None:
            parts.append(f"error={str(self.error)!r}")
        arts = self.raw.get("artifacts")
        if isinstance(arts, list) and arts:
            parts.append(f"artifacts={len(arts)}")
        return f"Execution({', '.join(parts)})"


class ImageResults(List[Result]):
    """What :attr:`Execution.images` returns: a list of image results. Calling it returns an
    iterator over them, so code written for the method ``images()`` of earlier versions keeps
    working."""

    def __call__(self) -> Iterator[Result]:
        return iter(self)


def _alive_note(ex: Execution) -> str:
    return "" if ex.sandbox_alive else "; the sandbox did not survive"


def _as_dict(value: Any) -> Dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


@dataclass
class FileEntry:
    """One entry of a workspace listing, or the file a write created."""

    path: str
    name: str
    kind: str
    size: int
    modified: int
    mode: int
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_dir(self) -> bool:
        return self.kind == "dir"

    @property
    def is_file(self) -> bool:
        return self.kind == "file"

    @property
    def type(self) -> str:  # E2B spelling
        return self.kind

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "FileEntry":
        path = str(d.get("path", ""))
        return cls(
            path=path,
            name=str(d.get("name") or path.rsplit("/", 1)[-1]),
            kind=str(d.get("kind", "file")),
            size=int(d.get("size") or 0),
            modified=int(d.get("modified") or 0),
            mode=int(d.get("mode") or 0),
            raw=dict(d),
        )


@dataclass
class SandboxInfo:
    """A sandbox as the server reports it."""

    id: str
    template: str
    state: str
    template_version: str = ""
    env: Dict[str, str] = field(default_factory=dict)
    metadata: Dict[str, str] = field(default_factory=dict)
    limits: Dict[str, int] = field(default_factory=dict)
    idle_timeout: Optional[int] = None
    max_lifetime: Optional[int] = None
    created_at: Optional[str] = None
    last_active_at: Optional[str] = None
    expires_at: Optional[str] = None
    ended_reason: Optional[str] = None
    on_idle: str = "delete"
    forked_from: Optional[str] = None
    from_snapshot: Optional[str] = None
    paused_at: Optional[str] = None
    last_restore: Optional["LastRestore"] = None
    volumes: List["VolumeMount"] = field(default_factory=list)
    ports: List[int] = field(default_factory=list)
    all_ports: bool = False
    tenant: str = "default"
    tier: str = "isolated"
    network: List[str] = field(default_factory=list)
    secrets: List[str] = field(default_factory=list)
    contained: Optional[str] = None
    port_token: Optional[str] = field(default=None, repr=False)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def sandbox_id(self) -> str:  # E2B spelling
        return self.id

    @property
    def running(self) -> bool:
        return self.state == "running"

    @property
    def paused(self) -> bool:
        return self.state == "paused"

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SandboxInfo":
        return cls(
            id=str(d.get("id", "")),
            template=str(d.get("template", "")),
            state=str(d.get("state", "")),
            template_version=str(d.get("template_version", "")),
            env=dict(d.get("env") or {}),
            metadata=dict(d.get("metadata") or {}),
            limits=dict(d.get("limits") or {}),
            idle_timeout=d.get("idle_timeout"),
            max_lifetime=d.get("max_lifetime"),
            created_at=d.get("created_at"),
            last_active_at=d.get("last_active_at"),
            expires_at=d.get("expires_at"),
            ended_reason=d.get("ended_reason"),
            on_idle=str(d.get("on_idle") or "delete"),
            forked_from=d.get("forked_from"),
            from_snapshot=d.get("from_snapshot"),
            paused_at=d.get("paused_at"),
            last_restore=LastRestore.from_json(lr) if isinstance((lr := d.get("last_restore")), Mapping) else None,
            volumes=[VolumeMount.from_json(m) for m in (d.get("volumes") or []) if isinstance(m, Mapping)],
            ports=[int(p) for p in (d.get("ports") or []) if isinstance(p, int)],
            all_ports=bool(d.get("all_ports", False)),
            tenant=str(d.get("tenant") or "default"),
            tier=str(d.get("tier") or "isolated"),
            network=[str(x) for x in (d.get("network") or [])],
            secrets=[str(x) for x in (d.get("secrets") or [])],
            contained=d.get("contained"),
            port_token=d.get("port_token"),
            raw=dict(d),
        )


@dataclass
class ExecutionRecord:
    """An execution as recorded by the server (``GET /v1/sandboxes/{id}/executions``).

    ``execution`` is ``None`` while the execution is still running.
    """

    id: str
    sandbox_id: str
    code: str
    language: str
    started_at: Optional[str]
    execution: Optional[Execution]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def running(self) -> bool:
        return self.execution is None

    @property
    def end_state(self) -> Optional[str]:
        return self.execution.end_state if self.execution is not None else None

    @classmethod
    def from_json(cls, d: Mapping[str, Any], client: ArtifactClient = None) -> "ExecutionRecord":
        res = d.get("result")
        return cls(
            id=str(d.get("id", "")),
            sandbox_id=str(d.get("sandbox_id", "")),
            code=str(d.get("code", "")),
            language=str(d.get("language", "python")),
            started_at=d.get("started_at"),
            execution=Execution.from_json(res, client=client) if isinstance(res, Mapping) else None,
            raw=dict(d),
        )


@dataclass
class Limits:
    """Resource limits to ask for; ``None`` leaves the server's default. The server clamps to
    its maxima, and :attr:`SandboxInfo.limits` has the effective values."""

    memory_mb: Optional[int] = None
    cpu_millis: Optional[int] = None
    pids: Optional[int] = None
    disk_mb: Optional[int] = None

    def to_json(self) -> Dict[str, int]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


# -- artifacts ------------------------------------------------------------------------------

def artifact_path(sha256: str) -> str:
    """``/v1/artifacts/<sha256>``; the hash must be 64 hex digits."""
    sha = sha256.strip().lower()
    if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        raise InvalidArgument(f"not a SHA-256 hex digest: {sha256!r}", code="invalid_argument")
    return "/v1/artifacts/" + sha


class Artifact:
    """A workspace file an execution created or changed (:attr:`Execution.artifacts`).

    The server keeps its bytes content-addressed, so they stay downloadable after the sandbox
    is gone (until the server's retention passes): :meth:`read` / :meth:`download` for an
    execution of a :class:`~sandlot.Sandbox`, ``await`` :meth:`aread` / :meth:`adownload` for
    one of an :class:`~sandlot.AsyncSandbox`. Files larger than the server keeps are listed
    with an empty ``sha256`` and ``url`` (:attr:`available` is False) and cannot be read.
    """

    def __init__(
        self,
        path: str,
        size: int,
        sha256: str,
        mime_type: str,
        change: str,
        url: str,
        *,
        raw: Optional[Dict[str, Any]] = None,
        client: ArtifactClient = None,
    ) -> None:
        self.path = path
        self.size = size
        self.sha256 = sha256
        self.mime_type = mime_type
        self.change = change
        self.url = url
        self.raw: Dict[str, Any] = raw if raw is not None else {}
        self._client = client

    @classmethod
    def from_json(cls, d: Mapping[str, Any], client: ArtifactClient = None) -> "Artifact":
        return cls(
            path=str(d.get("path", "")),
            size=int(d.get("size") or 0),
            sha256=str(d.get("sha256") or ""),
            mime_type=str(d.get("mime_type") or "application/octet-stream"),
            change=str(d.get("change") or ""),
            url=str(d.get("url") or ""),
            raw=dict(d),
            client=client,
        )

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def available(self) -> bool:
        """Whether the server kept the bytes (False for files larger than it keeps)."""
        return bool(self.sha256)

    def _request_path(self) -> str:
        if not self.available:
            raise FileTooLarge(
                f"artifact {self.path!r} ({self.size} bytes) was too large for the server to keep; "
                "read it from the sandbox's files while the sandbox runs",
                code="artifact_not_kept",
            )
        return artifact_path(self.sha256)

    def _sync_reader(self) -> ArtifactReader:
        if isinstance(self._client, ArtifactReader):
            return self._client
        if self._client is None:
            raise RuntimeError("this artifact is not bound to a server connection (parse it with a sandbox's client)")
        raise RuntimeError("this artifact came from an AsyncSandbox: use `await artifact.aread()` / `adownload()`")

    def _async_reader(self) -> AsyncArtifactReader:
        if isinstance(self._client, AsyncArtifactReader):
            return self._client
        if self._client is None:
            raise RuntimeError("this artifact is not bound to a server connection (parse it with a sandbox's client)")
        raise RuntimeError("this artifact came from a Sandbox: use `artifact.read()` / `download()`")

    def read(self) -> bytes:
        """The artifact's bytes, from ``GET /v1/artifacts/{sha256}``."""
        path = self._request_path()
        return self._sync_reader().read_artifact(path)

    def read_text(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return self.read().decode(encoding, errors)

    def download(self, local_path: PathLike) -> str:
        """Stream the artifact to ``local_path`` (through ``<local_path>.part``, renamed at the
        end). Returns ``local_path``."""
        path = self._request_path()
        local = os.fspath(local_path)
        return self._sync_reader().download_artifact(path, local)

    async def aread(self) -> bytes:
        """:meth:`read` for an artifact of an :class:`~sandlot.AsyncSandbox`."""
        path = self._request_path()
        return await self._async_reader().aread_artifact(path)

    async def adownload(self, local_path: PathLike) -> str:
        """:meth:`download` for an artifact of an :class:`~sandlot.AsyncSandbox`."""
        path = self._request_path()
        local = os.fspath(local_path)
        return await self._async_reader().adownload_artifact(path, local)

    def to_json(self) -> Dict[str, Any]:
        return dict(self.raw) if self.raw else {
            "path": self.path,
            "size": self.size,
            "sha256": self.sha256,
            "mime_type": self.mime_type,
            "change": self.change,
            "url": self.url,
        }

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Artifact):
            return NotImplemented
        return (self.path, self.size, self.sha256, self.mime_type, self.change, self.url) == (
            other.path,
            other.size,
            other.sha256,
            other.mime_type,
            other.change,
            other.url,
        )

    def __hash__(self) -> int:
        return hash((self.path, self.sha256))

    def __repr__(self) -> str:
        return f"Artifact(path={self.path!r}, size={self.size}, change={self.change!r}, mime_type={self.mime_type!r})"


@dataclass
class Restarted:
    """A restart in place of a sandbox's processes (:attr:`Execution.restarted`): ``reason``
    (``oom``, ``timeout``, ``crashed``, ...) and what did not survive (``lost``, e.g.
    ``["python state", "bash session"]``)."""

    reason: str
    lost: List[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Restarted":
        lost = d.get("lost")
        return cls(reason=str(d.get("reason", "")), lost=[str(x) for x in lost] if isinstance(lost, list) else [])


# -- background output ----------------------------------------------------------------------

@dataclass
class BackgroundEntry:
    """One piece of output a sandbox's processes wrote outside the execution that started them:
    ``stream`` (``stdout`` or ``stderr``), ``text``, ``at``, when it arrived (RFC 3339), and
    ``execution_id``, the execution that started the process, job or thread that wrote it
    (``None`` when no execution can be named)."""

    stream: str
    text: str
    at: str
    execution_id: Optional[str] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "BackgroundEntry":
        execution = d.get("execution_id")
        return cls(
            stream=str(d.get("stream", "")),
            text=str(d.get("text", "")),
            at=str(d.get("at", "")),
            execution_id=str(execution) if execution is not None else None,
        )


@dataclass
class BackgroundOutput:
    """Output a sandbox's processes wrote while no execution ran (a background process, a
    ``subprocess.Popen`` that outlived its cell), which never appears in an execution's own
    output (``sandbox.background_output()``). Iterating it yields its entries, oldest first;
    ``dropped_bytes`` counts what the server's bounded buffer (256 KiB) had to drop."""

    entries: List[BackgroundEntry] = field(default_factory=list)
    dropped_bytes: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "BackgroundOutput":
        entries = d.get("entries")
        return cls(
            entries=[BackgroundEntry.from_json(e) for e in (entries if isinstance(entries, list) else []) if isinstance(e, Mapping)],
            dropped_bytes=int(d.get("dropped_bytes") or 0),
            raw=dict(d),
        )

    @property
    def stdout(self) -> str:
        """The stdout entries' text, joined."""
        return "".join(e.text for e in self.entries if e.stream == "stdout")

    @property
    def stderr(self) -> str:
        """The stderr entries' text, joined."""
        return "".join(e.text for e in self.entries if e.stream == "stderr")

    def __iter__(self) -> Iterator[BackgroundEntry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)


# -- code contexts --------------------------------------------------------------------------

@dataclass
class Context:
    """A code context of a sandbox: an independent Python namespace (own variables, imports,
    execution counter) with its own Bash session, sharing the sandbox's files. Pass it (or its
    ``id``) as ``run_code(..., context=ctx)``; every sandbox has the context ``default``."""

    id: str
    created_at: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Context":
        return cls(id=str(d.get("id", "")), created_at=d.get("created_at"), raw=dict(d))

    def __str__(self) -> str:
        return self.id


# -- templates ------------------------------------------------------------------------------

@dataclass
class Template:
    """A template as the server reports it (``GET /v1/templates/{name}``).

    ``status`` is ``building``, ``ready`` or ``failed`` (then ``error`` says why); ``spec`` is
    the TemplateSpec it was created with; ``version`` the content hash recorded with every
    sandbox made from it; ``prepare_seconds`` how long its setup took, once ready; ``tenant``
    the tenant whose template it is (names are per tenant; the built-in ``default`` is every
    tenant's to use).
    """

    name: str
    status: str
    version: str = ""
    error: Optional[str] = None
    spec: Dict[str, Any] = field(default_factory=dict)
    created_at: Optional[str] = None
    prepare_seconds: Optional[float] = None
    tenant: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_ready(self) -> bool:
        return self.status == "ready"

    @property
    def is_failed(self) -> bool:
        return self.status == "failed"

    @property
    def is_building(self) -> bool:
        return self.status == "building"

    def raise_for_failure(self) -> "Template":
        """Raise :class:`~sandlot.TemplateBuildFailed` if the build failed; else return self."""
        if self.is_failed:
            raise TemplateBuildFailed(
                f"template {self.name!r} failed to build: {self.error or 'no reason given'}",
                template=self.name,
                error=self.error or "",
            )
        return self

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Template":
        ps = d.get("prepare_seconds")
        err = d.get("error")
        return cls(
            name=str(d.get("name", "")),
            status=str(d.get("status", "")),
            version=str(d.get("version") or ""),
            error=str(err) if err else None,
            spec=_as_dict(d.get("spec")),
            created_at=d.get("created_at"),
            prepare_seconds=float(ps) if isinstance(ps, (int, float)) else None,
            tenant=d.get("tenant"),
            raw=dict(d),
        )


# -- saved state: forks, pauses, snapshots --------------------------------------------------

@dataclass
class NotCaptured:
    """Something a fork, pause or snapshot could not carry over, or a restore could not bring
    back: ``name`` (a variable, or a module that failed to re-import), the code ``context`` it
    belongs to (``default`` or ``ctx_...``) and ``reason`` (e.g. ``TypeError: cannot pickle
    '_thread.lock' object``, ``timed out after 2 s``)."""

    name: str
    context: str
    reason: str

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "NotCaptured":
        return cls(name=str(d.get("name", "")), context=str(d.get("context", "")), reason=str(d.get("reason", "")))


def _not_captured(value: Any) -> List[NotCaptured]:
    return [NotCaptured.from_json(x) for x in (value if isinstance(value, list) else []) if isinstance(x, Mapping)]


@dataclass
class LastRestore:
    """The last time a sandbox's interpreter state was loaded from a saved state
    (:attr:`SandboxInfo.last_restore`): ``at`` (RFC 3339), ``source`` (``fork``, ``snapshot``
    or ``resume``), how many ``variables`` were restored and what was ``not_restored``."""

    at: str
    source: str
    variables: int = 0
    not_restored: List[NotCaptured] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "LastRestore":
        return cls(
            at=str(d.get("at", "")),
            source=str(d.get("source", "")),
            variables=int(d.get("variables") or 0),
            not_restored=_not_captured(d.get("not_restored")),
        )


@dataclass
class Snapshot:
    """A sandbox's interpreter state and workspace, saved (``sb.snapshot(name)``); start any
    number of sandboxes from it with ``Sandbox(from_snapshot=snap)``. It outlives its sandbox
    until deleted.

    ``sandbox_id`` is the sandbox it was taken from; ``state_bytes`` the size of the saved
    state; ``workspace`` whether the files were captured; ``variables`` how many were saved
    and ``not_captured`` what was not; ``version`` the state's format version.
    """

    id: str
    name: Optional[str] = None
    sandbox_id: str = ""
    template: str = ""
    template_version: str = ""
    created_at: Optional[str] = None
    state_bytes: int = 0
    workspace: bool = False
    variables: int = 0
    not_captured: List[NotCaptured] = field(default_factory=list)
    version: int = 1
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Snapshot":
        name = d.get("name")
        return cls(
            id=str(d.get("id", "")),
            name=str(name) if name is not None else None,
            sandbox_id=str(d.get("sandbox_id", "")),
            template=str(d.get("template", "")),
            template_version=str(d.get("template_version", "")),
            created_at=d.get("created_at"),
            state_bytes=int(d.get("state_bytes") or 0),
            workspace=bool(d.get("workspace")),
            variables=int(d.get("variables") or 0),
            not_captured=_not_captured(d.get("not_captured")),
            version=int(d.get("version") or 1),
            raw=dict(d),
        )

    def __str__(self) -> str:
        return self.id


# -- volumes --------------------------------------------------------------------------------

@dataclass
class VolumeMount:
    """A named volume mounted into a sandbox: ask for it with ``Sandbox(volumes=[...])``, read
    it back in :attr:`SandboxInfo.volumes`. ``path`` is a directory under ``/workspace``
    (``"/workspace/data"`` or ``"data"``; the server answers the relative form). Any number of
    sandboxes may mount a volume ``read_only`` at once; read-write, one at a time."""

    name: str
    path: str
    read_only: bool = False

    def to_json(self) -> Dict[str, Any]:
        return {"name": self.name, "path": self.path, "read_only": self.read_only}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "VolumeMount":
        return cls(name=str(d.get("name", "")), path=str(d.get("path", "")), read_only=bool(d.get("read_only")))


@dataclass
class VolumeUse:
    """A sandbox that mounts a volume (:attr:`Volume.mounted_by`): where, and whether read-only."""

    sandbox_id: str
    path: str
    read_only: bool

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "VolumeUse":
        return cls(sandbox_id=str(d.get("sandbox_id", "")), path=str(d.get("path", "")), read_only=bool(d.get("read_only")))


@dataclass
class Volume:
    """A named volume: files that live apart from any sandbox (deleting a sandbox never deletes
    a volume), capped at ``size_mb``. ``mounted_by`` lists the sandboxes that mount it (running,
    paused, stopped or failed).

    ``files`` is its files API (``volume.files.write(path, data)``, ``read``, ``list``,
    ``remove``, ...), set on the volumes that :class:`~sandlot.Volumes` and
    :class:`~sandlot.AsyncVolumes` return (coroutines on the latter); ``None`` on one built by
    hand. ``str(volume)`` is its name, so a Volume goes wherever a name does.
    """

    name: str
    size_mb: int = 0
    created_at: Optional[str] = None
    mounted_by: List[VolumeUse] = field(default_factory=list)
    files: Any = field(default=None, repr=False, compare=False)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any], files: Any = None) -> "Volume":
        users = d.get("mounted_by")
        return cls(
            name=str(d.get("name", "")),
            size_mb=int(d.get("size_mb") or 0),
            created_at=d.get("created_at"),
            mounted_by=[VolumeUse.from_json(u) for u in (users if isinstance(users, list) else []) if isinstance(u, Mapping)],
            files=files,
            raw=dict(d),
        )

    def __str__(self) -> str:
        return self.name


T = TypeVar("T")


class ForkResult(List[T]):
    """What ``sb.fork(n)`` returns: a list of the new sandboxes (handles of the same kind as
    the parent, each already running with the parent's state), plus what the fork could not
    carry over (``not_captured``, the same for every child), ``took_ms`` as the server
    measured it, and each child as the server reported it (``infos``)."""

    not_captured: List[NotCaptured]
    took_ms: float
    infos: List[SandboxInfo]
    raw: Dict[str, Any]

    def __init__(
        self,
        sandboxes: Iterable[T] = (),
        *,
        not_captured: Optional[List[NotCaptured]] = None,
        took_ms: float = 0.0,
        infos: Optional[List[SandboxInfo]] = None,
        raw: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__(sandboxes)
        self.not_captured = list(not_captured or [])
        self.took_ms = took_ms
        self.infos = list(infos or [])
        self.raw = dict(raw or {})

    @staticmethod
    def parse(d: Mapping[str, Any]) -> Tuple[List[SandboxInfo], List[NotCaptured], float]:
        """(children, not captured, took_ms) of a ForkResult body."""
        kids = d.get("sandboxes")
        infos = [SandboxInfo.from_json(x) for x in (kids if isinstance(kids, list) else []) if isinstance(x, Mapping)]
        took = d.get("took_ms")
        return infos, _not_captured(d.get("not_captured")), float(took) if isinstance(took, (int, float)) else 0.0

    def __repr__(self) -> str:
        return f"ForkResult({list.__repr__(self)}, not_captured={self.not_captured!r}, took_ms={self.took_ms!r})"


# -- divergence: sb.diff(other) -------------------------------------------------------------

def _opt_int(value: Any) -> Optional[int]:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _opt_str(value: Any) -> Optional[str]:
    return str(value) if value is not None else None


@dataclass
class VariableSummary:
    """One side of a differing variable: its ``type`` name and ``size``, the bytes of its
    pickle as a save writes it."""

    type: str
    size: int = 0

    @classmethod
    def from_json(cls, d: Any) -> Optional["VariableSummary"]:
        if not isinstance(d, Mapping):
            return None
        return cls(type=str(d.get("type", "")), size=_opt_int(d.get("size")) or 0)


@dataclass
class VariableChange:
    """A variable that differs between the two sandboxes of a :class:`Diff`: ``change`` is
    ``added`` (only in ``b``), ``removed`` (only in ``a``) or ``changed``; ``a`` and ``b``
    are each side's :class:`VariableSummary`, None on the side without it."""

    context: str
    name: str
    change: str
    a: Optional[VariableSummary] = None
    b: Optional[VariableSummary] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "VariableChange":
        return cls(
            context=str(d.get("context", "")),
            name=str(d.get("name", "")),
            change=str(d.get("change", "")),
            a=VariableSummary.from_json(d.get("a")),
            b=VariableSummary.from_json(d.get("b")),
        )


@dataclass
class FileChange:
    """A workspace entry that differs: its ``path`` (relative to ``/workspace``), ``change``
    as for variables, and on each side its kind (``file``, ``dir``, ``symlink``, ``other``;
    symlinks are never followed) and size, None on the side without it."""

    path: str
    change: str
    a_kind: Optional[str] = None
    b_kind: Optional[str] = None
    a_size: Optional[int] = None
    b_size: Optional[int] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "FileChange":
        return cls(
            path=str(d.get("path", "")),
            change=str(d.get("change", "")),
            a_kind=_opt_str(d.get("a_kind")),
            b_kind=_opt_str(d.get("b_kind")),
            a_size=_opt_int(d.get("a_size")),
            b_size=_opt_int(d.get("b_size")),
        )


@dataclass
class NotCompared:
    """Something a diff could not compare: a variable (``kind == "variable"``, with its
    ``context``) one sandbox could not digest, or a workspace entry (``kind == "file"``) it
    could not read; ``sandbox`` is the sandbox concerned, None for both."""

    sandbox: Optional[str]
    kind: str
    context: Optional[str]
    name: str
    reason: str

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "NotCompared":
        return cls(
            sandbox=_opt_str(d.get("sandbox")),
            kind=str(d.get("kind", "")),
            context=_opt_str(d.get("context")),
            name=str(d.get("name", "")),
            reason=str(d.get("reason", "")),
        )


def _listed(value: Any, make: Any) -> List[Any]:
    return [make(x) for x in (value if isinstance(value, list) else []) if isinstance(x, Mapping)]


@dataclass
class Diff:
    """What ``sb.diff(other)`` returns: which variables and workspace files differ between
    sandbox ``a`` (``sb``) and sandbox ``b`` (``other``), two sandboxes of one family (a fork's
    parent and children, sandboxes from one snapshot, their descendants).

    ``variables`` are :class:`VariableChange` s, ``files`` :class:`FileChange` s; ``added``
    means only in ``b``. ``truncated`` says the file comparison stopped short (a workspace
    too large to walk whole, or too many differences listed); ``not_compared`` lists what
    could not be compared (:class:`NotCompared`: a lock, an open file, a pickling that timed
    out...). ``identical`` is True when nothing compared differs."""

    a: str
    b: str
    variables: List[VariableChange] = field(default_factory=list)
    files: List[FileChange] = field(default_factory=list)
    truncated: bool = False
    not_compared: List[NotCompared] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Diff":
        return cls(
            a=str(d.get("a", "")),
            b=str(d.get("b", "")),
            variables=_listed(d.get("variables"), VariableChange.from_json),
            files=_listed(d.get("files"), FileChange.from_json),
            truncated=bool(d.get("truncated")),
            not_compared=_listed(d.get("not_compared"), NotCompared.from_json),
            raw=dict(d),
        )

    @property
    def identical(self) -> bool:
        return not self.variables and not self.files

    @staticmethod
    def target(other: Any) -> str:
        """The id of what a diff compares with: a sandbox handle (sync or async), a
        :class:`SandboxInfo`, or an id."""
        if isinstance(other, str):
            return other
        other_id = getattr(other, "id", None)
        if not isinstance(other_id, str) or not other_id:
            raise TypeError(f"diff() compares with a sandbox or a sandbox id, not {type(other).__name__}")
        return other_id
