"""Tool declarations and a dispatcher for LLM agents that run code in a sandbox.

Declare the tools to the model::

    from sandlot.tools import run_python_tool, ToolDispatcher
    tools = [run_python_tool("openai")]          # or "anthropic", "json_schema"

then turn each tool call into the message the model should see next::

    dispatcher = ToolDispatcher(sandbox)
    messages.append(dispatcher.handle_openai_tool_call(tool_call))        # {"role": "tool", ...}
    content.append(dispatcher.handle_anthropic_tool_use(tool_use_block))  # {"type": "tool_result", ...}

The text the model gets holds stdout and stderr (cut to a budget, with a note of how much was
dropped), display outputs, the value of the last expression, the error with its traceback and
how the execution ended. Images (matplotlib figures, PNG/JPEG displays) become image blocks in
Anthropic tool results; OpenAI chat tool messages cannot carry images, so there the text notes
each image and the images are kept on ``dispatcher.last_output.images`` (see
:meth:`ToolDispatcher.openai_image_message` to show them to a vision model).
"""

from __future__ import annotations

import base64
import binascii
import copy
import inspect
import json
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from . import errors
from .models import Execution

__all__ = [
    "PYTHON_TOOL_NAME",
    "BASH_TOOL_NAME",
    "run_python_tool",
    "run_bash_tool",
    "declarations",
    "ToolImage",
    "ToolOutput",
    "ToolDispatcher",
    "AsyncToolDispatcher",
    "format_execution",
]

# The declarations live in a data file shipped with the package, which the ``sandlot tools``
# and ``sandlot agent`` commands embed too: one source for every place a model sees them.
_DECLARATIONS_FILE = "tool_declarations.json"


def _load_declarations() -> Dict[str, Dict[str, Any]]:
    path = Path(__file__).with_name(_DECLARATIONS_FILE)
    doc = json.loads(path.read_text(encoding="utf-8"))
    return {t["language"]: t for t in doc["tools"]}


_DECLARATIONS = _load_declarations()

PYTHON_TOOL_NAME: str = _DECLARATIONS["python"]["name"]
BASH_TOOL_NAME: str = _DECLARATIONS["bash"]["name"]
PYTHON_DESCRIPTION: str = _DECLARATIONS["python"]["description"]
BASH_DESCRIPTION: str = _DECLARATIONS["bash"]["description"]

_FORMATS = ("openai", "anthropic", "json_schema")


def _schema(language: str) -> Dict[str, Any]:
    return copy.deepcopy(_DECLARATIONS[language]["parameters"])


def _declare(name: str, description: str, language: str, format: str) -> Dict[str, Any]:  # noqa: A002
    schema = _schema(language)
    if format == "openai":
        return {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}
    if format == "anthropic":
        return {"name": name, "description": description, "input_schema": schema}
    if format == "json_schema":
        return {"name": name, "description": description, "parameters": schema}
    raise ValueError(f"format must be one of {', '.join(_FORMATS)}, not {format!r}")


def declarations(format: str = "openai") -> List[Dict[str, Any]]:  # noqa: A002
    """Every tool's declaration in ``format`` (``run_python`` then ``run_bash``): what
    ``sandlot tools --format`` prints."""
    return [run_python_tool(format), run_bash_tool(format)]


def run_python_tool(format: str = "openai", *, name: str = PYTHON_TOOL_NAME, description: Optional[str] = None) -> Dict[str, Any]:  # noqa: A002
    """The declaration of the ``run_python`` tool.

    ``format="openai"`` gives a chat-completions ``{"type": "function", "function": {...}}``;
    ``"anthropic"`` a Messages API ``{"name", "description", "input_schema"}``; ``"json_schema"``
    a plain ``{"name", "description", "parameters"}`` with the JSON Schema of the arguments.
    """
    return _declare(name, description or PYTHON_DESCRIPTION, "python", format)


def run_bash_tool(format: str = "openai", *, name: str = BASH_TOOL_NAME, description: Optional[str] = None) -> Dict[str, Any]:  # noqa: A002
    """The declaration of the ``run_bash`` tool; see :func:`run_python_tool`."""
    return _declare(name, description or BASH_DESCRIPTION, "bash", format)


@dataclass
class ToolImage:
    """An image an execution produced, base64-encoded."""

    media_type: str
    data: str
    width: Optional[int] = None
    height: Optional[int] = None

    def to_bytes(self) -> bytes:
        return base64.b64decode(self.data)

    def describe(self) -> str:
        kind = self.media_type.split("/")[-1].upper()
        size = f", {self.width}x{self.height} px" if self.width and self.height else ""
        return f"{kind} image{size}"

    def data_url(self) -> str:
        return f"data:{self.media_type};base64,{self.data}"


@dataclass
class ToolOutput:
    """What one tool call produced, ready to be shaped into a provider's message."""

    text: str
    images: List[ToolImage] = field(default_factory=list)
    is_error: bool = False
    execution: Optional[Execution] = None
    tool_call_id: Optional[str] = None


# -- formatting -----------------------------------------------------------------------------

def _clip(text: str, limit: int, label: str, tail_share: float = 0.5) -> str:
    """``text`` cut to about ``limit`` characters, keeping its head and tail, with a note."""
    if limit <= 0 or len(text) <= limit:
        return text
    tail_n = int(limit * tail_share)
    head_n = limit - tail_n
    head, tail = text[:head_n], text[len(text) - tail_n :] if tail_n else ""
    dropped = text[head_n : len(text) - tail_n]
    lines = dropped.count("\n")
    return f"{head}\n[... {len(dropped)} characters ({lines} lines) of {label} dropped ...]\n{tail}"


def _split_budget(a: str, b: str, budget: int) -> Tuple[int, int]:
    """Character budgets for two streams sharing ``budget``: each gets what it needs if both
    fit, else the smaller keeps up to a third and the larger takes the rest."""
    if len(a) + len(b) <= budget:
        return len(a), len(b)
    b_budget = min(len(b), max(budget // 3, budget - len(a)))
    return budget - b_budget, b_budget


def _image_size(media_type: str, b64: str) -> Tuple[Optional[int], Optional[int]]:
    if media_type != "image/png":
        return None, None
    try:
        head = base64.b64decode(b64[:64])
    except (binascii.Error, ValueError):
        return None, None
    if len(head) >= 24 and head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR":
        w, h = struct.unpack(">II", head[16:24])
        return int(w), int(h)
    return None, None


_TAG_RE = re.compile(r"<[^>]+>")


def format_execution(
    ex: Execution,
    *,
    max_output_chars: int = 6000,
    max_result_chars: int = 3000,
    max_traceback_chars: int = 4000,
    max_images: int = 4,
    image_note: str = "attached",
    timeout: Optional[float] = None,
) -> ToolOutput:
    """The model-facing text and the images of an execution.

    ``max_output_chars`` is shared by stdout and stderr; results and tracebacks have their own
    budgets. ``image_note`` ends each image's placeholder line (``attached`` for providers that
    get the image blocks, or a sentence saying they are not visible).
    """
    parts: List[str] = []
    images: List[ToolImage] = []
    dropped_images = 0

    out_budget, err_budget = _split_budget(ex.stdout, ex.stderr, max_output_chars)
    for label, stream, budget, trunc in (
        ("stdout", ex.stdout, out_budget, ex.stdout_truncation),
        ("stderr", ex.stderr, err_budget, ex.stderr_truncation),
    ):
        if stream or trunc.dropped_bytes:
            section = _clip(stream, budget, label).rstrip("\n")
            if trunc.dropped_bytes:
                section += f"\n[... the server dropped {trunc.dropped_bytes} more bytes of {label} over its output budget ...]"
            parts.append(f"[{label}]\n{section}")

    def add_images(r: Any) -> bool:
        nonlocal dropped_images
        found = False
        for mime, b64 in (("image/png", r.png), ("image/jpeg", r.jpeg)):
            if b64 is None:
                continue
            found = True
            if len(images) >= max_images:
                dropped_images += 1
                continue
            w, h = _image_size(mime, b64)
            img = ToolImage(media_type=mime, data=b64, width=w, height=h)
            images.append(img)
            parts.append(f"[image {len(images)}: {img.describe()} — {image_note}]")
            break  # one image per result is enough
        return found

    text: Optional[str]
    for r in ex.results:
        if r.is_main_result:
            continue
        if add_images(r):
            continue
        text = r.text or r.markdown or (_TAG_RE.sub("", r.html) if r.html else None) or r.svg
        if text is None and r.json is not None:
            text = json.dumps(r.json)
        if text:
            parts.append("[display]\n" + _clip(text, max_result_chars, "display output").rstrip("\n"))
    main = ex.main_result
    if main is not None:
        had_image = add_images(main)
        text = main.text
        if text and not had_image:
            parts.append("[result]\n" + _clip(text, max_result_chars, "the result").rstrip("\n"))
    if dropped_images:
        parts.append(f"[{dropped_images} more image(s) not included]")

    if ex.error is not None:
        tb = ex.error.traceback.strip("\n")
        head = str(ex.error)
        if not tb:
            body = head
        else:
            body = _clip(tb, max_traceback_chars, "traceback", tail_share=0.75)
            if head and head not in tb:
                body += "\n" + head
        parts.append("[error]\n" + body)

    state = ex.end_state
    after = f" after {timeout:g} s" if timeout is not None else ""
    if state == "timeout":
        if ex.sandbox_alive:
            parts.append(f"[the execution timed out{after} and was interrupted; the session's state is kept]")
        else:
            parts.append(f"[the execution timed out{after} and had to be killed; the session's state was lost]")
    elif state == "interrupted":
        parts.append("[the execution was interrupted]")
    elif state == "oom":
        parts.append("[the execution ran out of memory" + ("" if ex.sandbox_alive else "; the session's state was lost") + "]")
    elif state == "killed":
        parts.append("[the sandbox was killed during the execution; its state was lost]")
    if ex.language == "bash" and ex.exit_code not in (None, 0):
        parts.append(f"[exit code: {ex.exit_code}]")
    if not parts:
        parts.append("[no output]")
    return ToolOutput(text="\n".join(parts), images=images, is_error=state != "ok", execution=ex)


# -- dispatching ----------------------------------------------------------------------------

def _get(obj: Any, key: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _parse_arguments(raw: Any) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    if isinstance(raw, Mapping):
        return dict(raw), None
    if raw is None or raw == "":
        return {}, None
    if isinstance(raw, str):
        try:
            doc = json.loads(raw)
        except ValueError as e:
            return None, f"the tool arguments are not valid JSON ({e}); send {{\"code\": \"...\"}}"
        if isinstance(doc, dict):
            return doc, None
        return None, "the tool arguments must be a JSON object like {\"code\": \"...\"}"
    return None, f"unexpected tool arguments of type {type(raw).__name__}"


# API errors that are about the model's input: reported to the model, not raised.
_MODEL_FACING = (errors.InvalidRequest, errors.PayloadTooLarge, errors.SandboxBusy)


class _DispatcherBase:
    def __init__(
        self,
        sandbox: Any,
        *,
        python_tool_name: str = PYTHON_TOOL_NAME,
        bash_tool_name: str = BASH_TOOL_NAME,
        timeout: Optional[float] = None,
        max_output_chars: int = 6000,
        max_result_chars: int = 3000,
        max_traceback_chars: int = 4000,
        max_images: int = 4,
    ) -> None:
        self.sandbox = sandbox
        self.python_tool_name = python_tool_name
        self.bash_tool_name = bash_tool_name
        self.timeout = timeout
        self.max_output_chars = max_output_chars
        self.max_result_chars = max_result_chars
        self.max_traceback_chars = max_traceback_chars
        self.max_images = max_images
        self.last_output: Optional[ToolOutput] = None
        self.outputs: List[ToolOutput] = []

    @property
    def tool_names(self) -> List[str]:
        return [self.python_tool_name, self.bash_tool_name]

    def tools(self, format: str = "openai", *, bash: bool = True) -> List[Dict[str, Any]]:  # noqa: A002
        """Declarations of the tools this dispatcher handles, in ``format``."""
        out = [run_python_tool(format, name=self.python_tool_name)]
        if bash:
            out.append(run_bash_tool(format, name=self.bash_tool_name))
        return out

    @property
    def last_images(self) -> List[ToolImage]:
        return self.last_output.images if self.last_output is not None else []

    def _language(self, name: str) -> Optional[str]:
        if name == self.python_tool_name:
            return "python"
        if name == self.bash_tool_name:
            return "bash"
        return None

    def _prepare(self, name: str, arguments: Any) -> Tuple[Optional[str], Optional[str], Optional[ToolOutput]]:
        """(language, code, None) to run, or (None, None, error output)."""
        language = self._language(name)
        if language is None:
            return None, None, ToolOutput(text=f"[error]\nunknown tool {name!r}; available: {', '.join(self.tool_names)}", is_error=True)
        args, problem = _parse_arguments(arguments)
        if problem is not None or args is None:
            return None, None, ToolOutput(text=f"[error]\n{problem}", is_error=True)
        code = args.get("code")
        if not isinstance(code, str) or not code.strip():
            return None, None, ToolOutput(text="[error]\nthe 'code' argument is required and must be a non-empty string", is_error=True)
        return language, code, None

    def format(self, ex: Execution, image_note: str = "attached") -> ToolOutput:
        return format_execution(
            ex,
            max_output_chars=self.max_output_chars,
            max_result_chars=self.max_result_chars,
            max_traceback_chars=self.max_traceback_chars,
            max_images=self.max_images,
            image_note=image_note,
            timeout=self.timeout,
        )

    def _api_error_output(self, e: errors.SandlotError) -> ToolOutput:
        return ToolOutput(text=f"[error]\nthe sandbox rejected the code: {e.code}: {e.message}", is_error=True)

    def _record(self, out: ToolOutput, call_id: Optional[str]) -> ToolOutput:
        out.tool_call_id = call_id
        self.last_output = out
        self.outputs.append(out)
        return out

    # -- provider shapes ------------------------------------------------------------------
    @staticmethod
    def _openai_message(out: ToolOutput, call_id: Optional[str]) -> Dict[str, Any]:
        return {"role": "tool", "tool_call_id": call_id, "content": out.text}

    @staticmethod
    def _anthropic_block(out: ToolOutput, call_id: Optional[str]) -> Dict[str, Any]:
        content: List[Dict[str, Any]] = [{"type": "text", "text": out.text}]
        for img in out.images:
            content.append({"type": "image", "source": {"type": "base64", "media_type": img.media_type, "data": img.data}})
        block: Dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id, "content": content}
        if out.is_error:
            block["is_error"] = True
        return block

    @staticmethod
    def openai_image_message(images: List[ToolImage], text: str = "Images produced by the last tool call:") -> Optional[Dict[str, Any]]:
        """A chat-completions user message that shows ``images`` to a vision model (tool
        messages cannot carry images); ``None`` when there are none."""
        if not images:
            return None
        parts: List[Dict[str, Any]] = [{"type": "text", "text": text}]
        parts.extend({"type": "image_url", "image_url": {"url": img.data_url()}} for img in images)
        return {"role": "user", "content": parts}

    @staticmethod
    def _openai_call(tool_call: Any) -> Tuple[Optional[str], str, Any]:
        fn = _get(tool_call, "function", {}) or {}
        return _get(tool_call, "id"), str(_get(fn, "name", "")), _get(fn, "arguments")

    @staticmethod
    def _anthropic_call(block: Any) -> Tuple[Optional[str], str, Any]:
        return _get(block, "id"), str(_get(block, "name", "")), _get(block, "input")


_OPENAI_IMAGE_NOTE = "images cannot be shown in a tool message; it is not visible here"


class ToolDispatcher(_DispatcherBase):
    """Runs ``run_python`` / ``run_bash`` tool calls in a :class:`~sandlot.Sandbox` and shapes
    the outcome for the model.

    Errors about the call itself (unknown tool, bad arguments, code the server rejects) are
    returned to the model as error results; anything else (the sandbox is gone, the server is
    unreachable) is raised.
    """

    def run(self, name: str, arguments: Any, *, image_note: str = "attached", call_id: Optional[str] = None) -> ToolOutput:
        """Run one tool call (``arguments`` a dict or a JSON string) and return its output."""
        language, code, early = self._prepare(name, arguments)
        if early is not None:
            return self._record(early, call_id)
        try:
            ex = self.sandbox.run_code(code, language=language, timeout=self.timeout)
        except _MODEL_FACING as e:
            return self._record(self._api_error_output(e), call_id)
        return self._record(self.format(ex, image_note=image_note), call_id)

    def handle_openai_tool_call(self, tool_call: Any) -> Dict[str, Any]:
        """The ``{"role": "tool", ...}`` message answering one chat-completions tool call (a
        dict or an ``openai`` SDK object). Images are noted in the text and kept on
        :attr:`last_images`."""
        call_id, name, arguments = self._openai_call(tool_call)
        out = self.run(name, arguments, image_note=_OPENAI_IMAGE_NOTE, call_id=call_id)
        return self._openai_message(out, call_id)

    def handle_anthropic_tool_use(self, block: Any) -> Dict[str, Any]:
        """The ``{"type": "tool_result", ...}`` block answering one ``tool_use`` block (a dict
        or an ``anthropic`` SDK object), with images as base64 image blocks."""
        call_id, name, arguments = self._anthropic_call(block)
        out = self.run(name, arguments, call_id=call_id)
        return self._anthropic_block(out, call_id)


class AsyncToolDispatcher(_DispatcherBase):
    """:class:`ToolDispatcher` for an :class:`~sandlot.AsyncSandbox` (coroutine methods)."""

    async def run(self, name: str, arguments: Any, *, image_note: str = "attached", call_id: Optional[str] = None) -> ToolOutput:
        language, code, early = self._prepare(name, arguments)
        if early is not None:
            return self._record(early, call_id)
        try:
            ex = self.sandbox.run_code(code, language=language, timeout=self.timeout)
            if inspect.isawaitable(ex):
                ex = await ex
        except _MODEL_FACING as e:
            return self._record(self._api_error_output(e), call_id)
        return self._record(self.format(ex, image_note=image_note), call_id)

    async def handle_openai_tool_call(self, tool_call: Any) -> Dict[str, Any]:
        call_id, name, arguments = self._openai_call(tool_call)
        out = await self.run(name, arguments, image_note=_OPENAI_IMAGE_NOTE, call_id=call_id)
        return self._openai_message(out, call_id)

    async def handle_anthropic_tool_use(self, block: Any) -> Dict[str, Any]:
        call_id, name, arguments = self._anthropic_call(block)
        out = await self.run(name, arguments, call_id=call_id)
        return self._anthropic_block(out, call_id)
