"""What an execution returns: its rich results, logs and error (:class:`Execution`), the record
the server keeps of it, a restart in place, and the background output of a sandbox's processes.
Part of :mod:`sandlot.models`, which re-exports every name.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional

from ._artifacts import Artifact, ArtifactClient, PathLike
from .errors import ExecutionError, ExecutionTimeout

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
    # Structured data the sandbox adds beside a rendering: a DataFrame's columns, a matplotlib
    # figure's chart (see Result.data and Result.chart).
    "data": "application/vnd.sandlot.data+json",
    "chart": "application/vnd.sandlot.chart+json",
}
_BINARY_FORMATS = ("png", "jpeg", "pdf")
_JSON_FORMATS = ("json", "data", "chart")
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
    def data(self) -> Optional[Dict[str, List[Any]]]:
        """A DataFrame's columns as JSON: ``{column: [values]}`` (its index left out; dates as
        ISO 8601 text, missing values as None). Absent for frames of more than 50,000 cells or
        1,000 columns."""
        value = self.raw.get(_FORMATS["data"])
        return value if isinstance(value, dict) else None

    @property
    def chart(self) -> Optional[Dict[str, Any]]:
        """A matplotlib figure's chart as data, beside its PNG: ``type`` (``line``,
        ``scatter``, ``bar``, ``pie``, ``box_and_whisker``, ``superchart`` whose ``elements``
        are charts, or ``unknown``), ``title``, ``x_label``/``y_label`` and their units,
        ``x_scale``/``y_scale`` (``linear``, ``log``, ``datetime``, ``categorical``, ...),
        ticks and tick labels, and ``elements`` (points of each line or series, each bar's
        ``label``/``group``/``value``, each wedge's ``angle``, each box's five numbers and
        outliers); the shape of E2B's ``Result.chart``. Absent for a figure the sandbox could
        not read within its bounds (the PNG is still there)."""
        value = self.raw.get(_FORMATS["chart"])
        return value if isinstance(value, dict) else None

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
        present. PNG, JPEG and PDF are base64-decoded; json, data and chart are written as JSON;
        text formats as UTF-8.
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
        elif fmt in _JSON_FORMATS:
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
    def rolled_back(self) -> bool:
        """True when the execution asked for ``on_failure="rollback"``, failed, and the
        sandbox's variables and files are back as they were before it (see :attr:`rollback`)."""
        return bool(self.raw.get("rolled_back", False))

    @property
    def rollback(self) -> Optional["Rollback"]:
        """How the rollback went: why the cell counted as failed (``reason``: ``error``,
        ``timeout``, ``oom``, ``interrupted``, ``killed`` or ``guardrails``), the variables put
        back, what could not be (``not_restored``), and what the capture and the restore cost."""
        r = self.raw.get("rollback")
        return Rollback.from_json(r) if isinstance(r, Mapping) else None

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


@dataclass
class Rollback:
    """A failed execution's rollback (:attr:`Execution.rollback`): ``reason`` (``error``,
    ``timeout``, ``oom``, ``interrupted``, ``killed``, ``guardrails``), ``variables`` put back,
    ``not_restored`` (dicts with ``name``, ``context``, ``reason``), ``capture_ms`` and
    ``restore_ms``."""

    reason: str
    variables: int = 0
    not_restored: List[Dict[str, Any]] = field(default_factory=list)
    capture_ms: float = 0.0
    restore_ms: float = 0.0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Rollback":
        nr = d.get("not_restored")
        return cls(
            reason=str(d.get("reason", "")),
            variables=int(d.get("variables") or 0),
            not_restored=[dict(x) for x in nr if isinstance(x, Mapping)] if isinstance(nr, list) else [],
            capture_ms=float(d.get("capture_ms") or 0.0),
            restore_ms=float(d.get("restore_ms") or 0.0),
        )


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
