"""IPython's display system wired to the control stream: ``display()`` and figures become
``display_data`` events, a cell's last value becomes the ``result`` event, and the formatter
guarantees a text/plain even when a repr raised."""

from __future__ import annotations

from IPython.core.displayhook import DisplayHook
from IPython.core.displaypub import DisplayPublisher
from IPython.core.formatters import DisplayFormatter

from .jsonsafe import jsonable, mime_bundle
from .protocol import emit
from .state import state


class EventDisplayPublisher(DisplayPublisher):
    """display(), and figures flushed after a cell, become display_data events."""

    def publish(self, data, metadata=None, source=None, *, transient=None, update=False,
                **kwargs) -> None:
        emit({"type": "display_data", "data": mime_bundle(data),
              "metadata": jsonable(metadata or {})})

    def clear_output(self, wait=False) -> None:
        pass  # the protocol has no clear_output; the default writes terminal escapes


class EventDisplayHook(DisplayHook):
    """The value of a cell's last expression becomes the result event."""

    def write_output_prompt(self) -> None:
        pass  # no "Out[n]:" on stdout

    def write_format_data(self, format_dict, md_dict=None) -> None:
        emit({"type": "result", "data": mime_bundle(format_dict),
              "metadata": jsonable(md_dict or {}), "execution_count": self.prompt_count})

    def log_output(self, format_dict) -> None:
        pass  # IPython would keep every bundle (PNGs included) in memory for %history -o

    def finish_displayhook(self) -> None:
        self._is_active = False  # the default writes a separator to stdout


# Builtin scalars have no rich representation in IPython: only text/plain ever comes out.
_PLAIN_ONLY_TYPES = (int, float, complex, bool, str, bytes, type(None))


class SafeDisplayFormatter(DisplayFormatter):
    """Counts formatting depth (tracebacks inside are formatter failures, not the cell's error)
    and guarantees a text/plain when a repr raised."""

    def _plain_only(self, obj, include, exclude):
        """For a builtin scalar, the plain formatter alone, unless someone registered a printer
        for its type: the other eleven formatters would each find nothing, at about 10 us each."""
        kind = type(obj)
        if include is not None or exclude is not None or kind not in _PLAIN_ONLY_TYPES:
            return None
        others = [f for mime, f in self.formatters.items() if mime != "text/plain"]
        others += [self.ipython_display_formatter, self.mimebundle_formatter]
        key = (kind.__module__, kind.__name__)
        for f in others:
            if kind in getattr(f, "type_printers", {}) or key in getattr(f, "deferred_printers", {}):
                return None
        text = self.formatters["text/plain"](obj)
        return None if text is None else ({"text/plain": text}, {})

    def format(self, obj, include=None, exclude=None):
        state.formatting += 1
        try:
            fast = self._plain_only(obj, include, exclude)
            if fast is not None:
                return fast
            data, metadata = super().format(obj, include=include, exclude=exclude)
        finally:
            state.formatting -= 1
        if "text/plain" not in data and _wants_plain(obj, include, exclude):
            data["text/plain"] = f"<{type(obj).__qualname__} object at {id(obj):#x}>"
        return data, metadata


def _wants_plain(obj, include, exclude) -> bool:
    """Whether a missing text/plain means its formatter failed (not excluded by the caller, not
    an object that displays itself through _ipython_display_)."""
    if (include is not None and "text/plain" not in include) or \
            (exclude is not None and "text/plain" in exclude):
        return False
    try:
        return not callable(getattr(obj, "_ipython_display_", None))
    except Exception:
        return True
