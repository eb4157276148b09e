"""IPython's display system wired to the control stream: ``display()`` and figures become
``display_data`` events, a cell's last value becomes the ``result`` event, and the formatter
guarantees a text/plain even when a repr raised. A figure's bundle also carries its chart and a
DataFrame's its data (``charts``), and a PIL image saved to a file during a cell is shown too,
as E2B's code interpreter shows it."""

from __future__ import annotations

import os
import sys
import threading

from IPython.core.displayhook import DisplayHook
from IPython.core.displaypub import DisplayPublisher
from IPython.core.formatters import DisplayFormatter

from .charts import extras
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
            if data:  # after the PNG: the figure has been drawn
                data.update(extras(obj, include, exclude))
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


# Most saved images one cell shows: a loop that writes thousands of thumbnails must not send
# each one back (every one is encoded again to be shown).
MAX_SAVED_IMAGES = 8
_saved_shown: list = [None, 0]  # [execution id, images shown in it]


def show_saved_images() -> None:
    """Makes ``PIL.Image.Image.save`` to a file, and ``Image.show()``, show the image (a
    ``display_data`` PNG), as E2B's code interpreter does; once per process, no-op without
    Pillow. Without the viewer, ``show()`` would look for a desktop image viewer the sandbox
    has not and show nothing."""
    try:
        from PIL import Image, ImageShow
    except ImportError:
        return
    original = Image.Image.save
    if getattr(original, "_sandlot_shows", False):
        return

    class CellViewer(ImageShow.Viewer):
        """``Image.show()`` inside a cell: the image as the cell's display output."""

        def show(self, image, **options) -> int:
            if state.phase != "cell" or \
                    threading.current_thread() is not threading.main_thread():
                return 0
            _display_counted(image)
            return 1

    ImageShow.register(CellViewer, order=-1)  # before any desktop viewer

    def save(self, fp, *args, **kwargs):
        result = original(self, fp, *args, **kwargs)
        _show_saved(self, fp, sys._getframe(1))
        return result

    save.__name__, save.__qualname__ = original.__name__, original.__qualname__
    save.__doc__, save.__wrapped__ = original.__doc__, original
    save._sandlot_shows = True
    Image.Image.save = save


def _show_saved(image, fp, caller) -> None:
    """Shows an image just saved, when it was saved to a path by the cell itself: not into a
    buffer (how its own PNG is made, and how libraries encode), not by matplotlib (savefig to
    JPEG or TIFF goes through Pillow; the figure is shown anyway), not while formatting, not
    from another thread or outside a cell, and at most MAX_SAVED_IMAGES times per execution."""
    if state.phase != "cell" or state.formatting or \
            threading.current_thread() is not threading.main_thread() or \
            not isinstance(fp, (str, bytes, os.PathLike)):
        return
    if caller.f_globals.get("__name__", "").split(".")[0] in ("matplotlib", "PIL"):
        return
    _display_counted(image)


def _display_counted(image) -> None:
    """Displays ``image``, at most MAX_SAVED_IMAGES times per execution; never raises."""
    if _saved_shown[0] != state.exec_id:
        _saved_shown[:] = [state.exec_id, 0]
    if _saved_shown[1] >= MAX_SAVED_IMAGES:
        return
    _saved_shown[1] += 1
    try:
        from IPython.display import display

        display(image)
    except Exception:  # noqa: BLE001 - the image is saved; showing it is a courtesy
        pass
