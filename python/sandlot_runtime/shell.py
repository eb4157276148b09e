"""The IPython shell every cell runs in, built once in the zygote: no history database, no
threads, no terminal; its display system sends events (see display.py), its tracebacks point at
the user's code, ``exit()`` is reported instead of obeyed, and figures render inline. Also the
warm-up and the template's setup code, run before the zygote forks."""

from __future__ import annotations

import builtins
import os
import sys
import traceback

import IPython
from IPython.core.autocall import ExitAutocall
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.profiledir import ProfileDir
from traitlets import Type, default
from traitlets.config import Config

from .capture import write_stderr
from .display import EventDisplayHook, EventDisplayPublisher, SafeDisplayFormatter
from .state import state

# Frames of this package (the SIGINT handler that raised KeyboardInterrupt, a write to a closed
# fd) are cut from the end of tracebacks; IPython's own are skipped at their start.
_PACKAGE_DIR = os.path.dirname(__file__) + os.sep
_IPYTHON_DIR = os.path.dirname(IPython.__file__) + os.sep
_EXCEPTION_GROUP = getattr(builtins, "BaseExceptionGroup", None)  # Python 3.11+


def _trim_driver_frames(tb) -> None:
    """Cuts trailing traceback entries that are the driver's own frames (the SIGINT handler that
    raised KeyboardInterrupt, a write to a closed fd): tracebacks point at the user's code."""
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    keep = len(entries)
    while keep > 1 and entries[keep - 1].tb_frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        keep -= 1
    if keep < len(entries):
        entries[keep - 1].tb_next = None


def _skip_ipython_frames(tb):
    """The traceback from the first frame that is not IPython's (run_code's exec)."""
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_IPYTHON_DIR):
        tb = tb.tb_next
    return tb


def _has_exception_group(value: BaseException | None, depth: int = 0) -> bool:
    if value is None or depth > 100:
        return False
    if _EXCEPTION_GROUP is not None and isinstance(value, _EXCEPTION_GROUP):
        return True
    return _has_exception_group(value.__context__, depth + 1)


class _Exit(ExitAutocall):
    """exit()/quit() raise SystemExit like plain Python, which the driver reports instead of
    ending the sandbox (IPython's default only sets a flag nobody reads here)."""

    def __call__(self, code=None):
        raise SystemExit() if code is None else SystemExit(code)


class Shell(InteractiveShell):
    displayhook_class = Type(EventDisplayHook)
    display_pub_class = Type(EventDisplayPublisher)

    @default("exiter")
    def _exiter_default(self):
        return _Exit(self)

    def init_display_formatter(self) -> None:
        self.display_formatter = SafeDisplayFormatter(parent=self)
        self.configurables.append(self.display_formatter)

    def ask_exit(self) -> None:
        raise SystemExit()

    def enable_gui(self, gui=None) -> None:
        # Inline figures need no event loop; a sandbox has no display for any other.
        if gui not in (None, "inline"):
            raise UsageError(f"GUI event loops ({gui}) are not available in a sandbox")

    def showtraceback(self, exc_tuple=None, *args, **kwargs):
        try:
            etype, value, tb = self._get_exc_info(exc_tuple)
        except ValueError:
            return super().showtraceback(exc_tuple, *args, **kwargs)
        _trim_driver_frames(tb)
        if _has_exception_group(value) and not kwargs.get("exception_only"):
            # IPython prints these with traceback.print_exc() (its own frames included) and
            # hands nothing to _showtraceback; format them the plain-Python way instead.
            stb = traceback.format_exception(etype, value, _skip_ipython_frames(tb))
            return self._showtraceback(etype, value, stb)
        return super().showtraceback(exc_tuple, *args, **kwargs)

    def _showtraceback(self, etype, evalue, stb) -> None:
        # During the cell, a traceback is probably the cell's error: keep it for the error
        # event. Anything else (a failing _repr_html_, a figure that cannot render, a
        # post-execute hook) is not fatal and goes to stderr where it happened.
        if state.phase == "cell" and state.formatting == 0:
            state.tracebacks.append((evalue, list(stb)))
        else:
            write_stderr(self.InteractiveTB.stb2text(stb))


def _on_pre_execute() -> None:
    state.phase = "cell"


def _on_post_execute() -> None:
    state.phase = "post"


def make_shell() -> Shell:
    config = Config()
    # No SQLite, no history-saving thread: the zygote must stay single-threaded.
    config.HistoryManager.enabled = False
    config.InteractiveShell.colors = "nocolor"
    config.InteractiveShell.autocall = 0
    # ipython_dir="" equals the trait default, so nothing is created on disk, and a bare
    # ProfileDir has no location: IPython never touches HOME or IPYTHONDIR.
    shell = Shell.instance(config=config, ipython_dir="", profile_dir=ProfileDir())
    # !cmd runs through the shell at the fd level (the default uses pexpect and a pty).
    shell.system = shell.system_raw
    shell.events.register("pre_execute", _on_pre_execute)
    shell.events.register("post_execute", _on_post_execute)
    return shell


def enable_inline_figures(shell: Shell) -> None:
    """Matplotlib figures become image/png display_data after each cell (Agg underneath)."""
    try:
        import matplotlib  # noqa: F401 - optional: a template may leave it out
    except ImportError:
        return  # a template without matplotlib
    shell.enable_matplotlib("inline")


def warm_up(shell: Shell) -> None:
    """Runs once in the zygote what every sandbox would otherwise do on its first cell
    (compile a cell, render a PNG, an HTML table, a traceback), so the lazy imports and caches
    are shared copy-on-write instead of paid per sandbox."""
    shell.run_cell("None", store_history=False, silent=True)
    shell.logger  # noqa: B018 - built lazily by the first non-silent cell
    if "matplotlib" in sys.modules:
        from matplotlib.figure import Figure  # only once matplotlib is known to be there

        figure = Figure(figsize=(1, 1))
        figure.add_subplot().plot([0, 1], [0, 1])
        shell.display_formatter.format(figure)
    if "pandas" in sys.modules:
        shell.display_formatter.format(sys.modules["pandas"].DataFrame({"a": [1]}))
    # A failing cell: the traceback machinery parses IPython's own run_code module (tens of
    # milliseconds and megabytes) and caches it.
    shell.run_cell("1 / 0", store_history=False, silent=True)
    state.tracebacks.clear()
    state.phase = "idle"


def run_setup(shell: Shell, setup_code: str) -> None:
    """Runs the template's setup code in the default namespace; raises if it fails."""
    result = shell.run_cell(setup_code, store_history=False, silent=True)
    state.phase = "idle"
    recorded, state.tracebacks = state.tracebacks, []
    if not result.success:
        error = result.error_before_exec or result.error_in_exec
        text = "".join(shell.InteractiveTB.stb2text(stb) for _, stb in recorded)
        raise RuntimeError(f"the template's setup code failed: {type(error).__name__}: "
                           f"{error}\n{text}") from error
