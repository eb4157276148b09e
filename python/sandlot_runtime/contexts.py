"""Code contexts: independent namespaces (and Bash sessions) in one shell and one process. The
active context's state lives in the shell; the others' is parked in their ``Context``, and
switching moves it in and out (see ARCHITECTURE.md, "The execution protocol")."""

from __future__ import annotations

import gc
import os
import sys
import traceback

from .bash_session import BashSession
from .capture import write_stderr
from .jsonsafe import safe_str
from .shell import Shell
from .state import DEFAULT_CONTEXT, state


class Context:
    """One code context. The active context's state lives in the shell (and its Bash session in
    state.bash); the others' is parked here. A context whose user_ns is None has never been
    active: its namespace is built the first time it is installed.

    Each context has its own working directory, as each of a notebook's kernels does: ``home``
    is where it starts (and restarts), ``cwd`` where its code last left it (the process's own
    while it is active; installing a context moves the process there)."""

    def __init__(self, home: str | None = None) -> None:
        self.home = home
        self.cwd = home
        self.user_module = None
        self.user_ns: dict | None = None
        self.user_ns_hidden: dict = {}
        self.execution_count = 1
        self.unders = ("", "", "")  # the displayhook's _, __, ___
        self.inputs = ("", "", "", "")  # the history manager's _i00, _i, _ii, _iii
        self.input_hist_parsed = [""]
        self.input_hist_raw = [""]
        self.output_hist: dict = {}
        self.output_hist_reprs: dict = {}
        self.dir_hist: list = []
        self.compile_flags = state.base_compile_flags
        self.bash: BashSession | None = None
        self.js = None  # js_session.JsSession, once a JavaScript cell ran in this context


def init_contexts(shell: Shell) -> None:
    """Records what a fresh namespace starts with and makes the shell's state "default"."""
    hidden = shell.user_ns_hidden
    state.setup_names = {
        name: value for name, value in shell.user_ns.items()
        if name not in hidden and name not in ("_", "__", "___")
        and not (name.startswith("__") and name.endswith("__"))
    }
    state.base_compile_flags = shell.compile.flags
    state.contexts = {DEFAULT_CONTEXT: Context()}
    state.active_context = DEFAULT_CONTEXT


def _park(ctx: Context) -> None:
    """Moves the shell's (active) state into ctx."""
    shell = state.shell
    history = shell.history_manager
    dh = shell.displayhook
    ctx.user_module, ctx.user_ns = shell.user_module, shell.user_ns
    ctx.user_ns_hidden = shell.user_ns_hidden
    ctx.execution_count = shell.execution_count
    ctx.unders = (dh._, dh.__, dh.___)  # (no name mangling outside a class body)
    ctx.inputs = (history._i00, history._i, history._ii, history._iii)
    # The history containers are referenced by every namespace (In, Out, _ih, _oh, _dh) and
    # traitlets would copy a replacement: their contents move, the objects stay.
    ctx.input_hist_parsed = list(history.input_hist_parsed)
    ctx.input_hist_raw = list(history.input_hist_raw)
    ctx.output_hist = dict(history.output_hist)
    ctx.output_hist_reprs = dict(history.output_hist_reprs)
    ctx.dir_hist = list(history.dir_hist)
    ctx.compile_flags = shell.compile.flags
    ctx.bash = state.bash
    ctx.cwd = _cwd()
    ctx.js = state.js


def _install(ctx: Context) -> None:
    """Puts ctx's state into the shell, building a fresh namespace if it has none yet."""
    shell = state.shell
    history = shell.history_manager
    dh = shell.displayhook
    history.input_hist_parsed[:] = ctx.input_hist_parsed
    history.input_hist_raw[:] = ctx.input_hist_raw
    history.output_hist.clear()
    history.output_hist.update(ctx.output_hist)
    history.output_hist_reprs.clear()
    history.output_hist_reprs.update(ctx.output_hist_reprs)
    history.dir_hist[:] = ctx.dir_hist or [_cwd()]
    history._i00, history._i, history._ii, history._iii = ctx.inputs
    dh._, dh.__, dh.___ = ctx.unders
    shell.execution_count = ctx.execution_count
    shell.compile.flags = ctx.compile_flags
    shell.last_execution_result = None
    shell.last_execution_succeeded = True
    fresh = ctx.user_ns is None
    if fresh:
        ctx.user_module, ctx.user_ns = shell.prepare_user_module()
        ctx.user_ns_hidden = {}
    shell.user_module, shell.user_ns = ctx.user_module, ctx.user_ns
    shell.user_ns_hidden = ctx.user_ns_hidden
    shell.ns_table["user_global"] = shell.user_module.__dict__
    shell.ns_table["user_local"] = shell.user_ns
    sys.modules["__main__"] = shell.user_module  # pickle finds the context's classes
    if fresh:
        shell.init_user_ns()
        for name, value in state.setup_names.items():
            shell.user_ns.setdefault(name, value)
    state.bash = ctx.bash
    _chdir(ctx.cwd or ctx.home or state.workdir)
    state.js = ctx.js
    # Parked state lives in ctx alone from now on.
    ctx.input_hist_parsed, ctx.input_hist_raw = [""], [""]
    ctx.output_hist, ctx.output_hist_reprs, ctx.dir_hist = {}, {}, []
    ctx.bash = None
    ctx.js = None


def _cwd() -> str:
    try:
        return os.getcwd()
    except OSError:  # removed by user code
        return "/"


def _chdir(path: str | None) -> None:
    """Moves the process into a context's directory; one that user code removed since leaves
    the process where it is (the context's next cell sees that directory)."""
    if path and path != _cwd():
        try:
            os.chdir(path)
        except OSError:
            pass


def set_workdir(path: object) -> None:
    """The creator's working directory for the sandbox's code: the default context (and every
    context created without one) starts there. Not a directory: ignored."""
    if not isinstance(path, str) or not os.path.isdir(path):
        return
    state.workdir = path
    default = state.contexts.get(DEFAULT_CONTEXT)
    if default is not None:
        default.home = path
    if state.active_context == DEFAULT_CONTEXT:
        _chdir(path)
    elif default is not None:
        default.cwd = path


def set_context_cwd(name: str, path: object) -> None:
    """Puts a context where a saved state left it (the process too, when it is active)."""
    ctx = state.contexts.get(name)
    if ctx is None or not isinstance(path, str):
        return
    if name == state.active_context:
        _chdir(path)
    else:
        ctx.cwd = path


def _check_cwd(cwd: object) -> str | None:
    """Why a context cannot be created to work in cwd (None: it can)."""
    if cwd is None:
        return None
    if not isinstance(cwd, str) or not cwd.startswith("/") or "\0" in cwd:
        return "cwd must be an absolute path"
    if not os.path.isdir(cwd):
        return f"cwd {cwd!r} is not a directory in the sandbox"
    return None


def enter_context(name: object) -> str | None:
    """Makes the named context (default when None) active; the error text if there is none."""
    if name is None:
        name = DEFAULT_CONTEXT
    if not isinstance(name, str) or name not in state.contexts:
        return f"no context {safe_str(name)!r} in this sandbox"
    _switch_context(name)
    return None


def _switch_context(name: str) -> None:
    if name == state.active_context:
        return
    _park(state.contexts[state.active_context])
    _install(state.contexts[name])
    state.active_context = name


def _discard_context(ctx: Context) -> None:
    """Drops a context's state: its Bash session and its node end, its objects are released."""
    if ctx.bash is not None:
        ctx.bash.stop()
    ctx.bash = None
    if ctx.js is not None:
        ctx.js.stop()
    ctx.js = None
    ctx.user_module = ctx.user_ns = None
    ctx.output_hist = {}
    gc.collect()


def context_op(kind: str, message: dict) -> None:
    """Creates, restarts or deletes a context; always answers with one context_done."""
    name = message.get("context")
    error = None
    try:
        if not isinstance(name, str) or not name:
            error = "context must be a non-empty string"
        elif kind == "context_create":
            cwd = message.get("cwd")
            if name in state.contexts:
                error = f"context {name!r} already exists"
            elif (error := _check_cwd(cwd)) is None:
                state.contexts[name] = Context(cwd or state.workdir)
        elif name not in state.contexts:
            error = f"no context {name!r}"
        elif kind == "context_restart":
            old = state.contexts[name]
            fresh = Context(old.home)
            state.contexts[name] = fresh
            if name == state.active_context:
                old.bash, state.bash = state.bash, None
                old.js, state.js = state.js, None
                _install(fresh)  # replaces the shell's namespace and history
            _discard_context(old)
        elif name == DEFAULT_CONTEXT:
            error = "the default context cannot be deleted"
        else:
            _switch_context(DEFAULT_CONTEXT)
            _discard_context(state.contexts.pop(name))
    except Exception as exc:  # a driver bug: report it, keep the sandbox
        write_stderr("sandlot: internal driver error\n" + traceback.format_exc())
        error = f"{type(exc).__name__}: {safe_str(exc)}"
    reply = {"type": "context_done", "context": name if isinstance(name, str) else None,
             "ok": error is None}
    if error is not None:
        reply["error"] = error
    state.channel.send(reply, wait_until_read=False)
