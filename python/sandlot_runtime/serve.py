"""The protocol loop: reads each message the server sends and dispatches it (execute, warm,
context operations, saving, loading and digesting state, env); every execute is answered with
exactly one done frame, every state request with one state_saved, state_loaded or
state_digested."""

from __future__ import annotations

import os
import sys
import traceback

from . import output
from .bash_session import BashUnavailable, run_bash
from .capture import restore_output, write_stderr
from .changes import changes_between, safe_snapshot
from .contexts import context_op, enter_context, set_workdir
from .js_session import JsUnavailable, run_js
from .jsonsafe import safe_str
from .protocol import Channel, emit
from .python_cells import run_python
from .snapshot import digest_state, load_state, save_state
from .state import state


# Requests that come with a descriptor (the state file).
_TAKES_FD = ("state_save", "state_load")


def _execute(message: dict) -> None:
    """Runs one execute request and always answers with exactly one done."""
    state.exec_id = message.get("id")
    state.interrupted = False
    state.deferred_interrupt = False
    status, exit_code = "error", None
    before = safe_snapshot(racy=True)
    try:
        restore_output()
        code, language = message.get("code"), message.get("language") or "python"
        if not isinstance(code, str):
            emit({"type": "error", "name": "ValueError", "value": "code must be a string",
                  "traceback": []})
        elif (problem := enter_context(message.get("context"))) is not None:
            emit({"type": "error", "name": "ValueError", "value": problem, "traceback": []})
        elif language == "python":
            status = run_python(code)
        elif language == "bash":
            try:
                status, exit_code = run_bash(code)
            except BashUnavailable as exc:  # a limit hit, not a driver bug: the cell's error
                emit({"type": "error", "name": exc.name, "value": safe_str(exc), "traceback": []})
        elif language in ("javascript", "typescript"):
            try:
                status = run_js(code, typescript=language == "typescript")
            except JsUnavailable as exc:  # no node on the host: the cell's error
                emit({"type": "error", "name": exc.name, "value": safe_str(exc), "traceback": []})
        else:
            emit({"type": "error", "name": "ValueError",
                  "value": f"unsupported language {safe_str(language)}", "traceback": []})
    except KeyboardInterrupt:
        status = "interrupted"
    except Exception:  # a driver bug: report it, keep the sandbox
        write_stderr("sandlot: internal driver error\n" + traceback.format_exc())
    if os.getpid() != state.pid:
        os._exit(0)  # a child that user code forked (os.fork()) and that fell out of the cell
    try:
        # What the execution's processes and threads write from now on is its background output.
        output.end_execution(state.exec_id)
    except Exception:  # a driver bug: report it, keep the sandbox
        write_stderr("sandlot: internal driver error\n" + traceback.format_exc())
    _refresh_packages()
    changes = changes_between(before, None if before is None else safe_snapshot())
    state.channel.send({"type": "done", "id": state.exec_id, "status": status,
                        "exit_code": exit_code, **changes}, wait_until_read=False)
    state.exec_id = None


def _packages_dir() -> str | None:
    return os.environ.get("PIP_TARGET") or None


def _place_packages() -> None:
    """Keeps the pip target (`/workspace/.packages`) last on the driver's path: packages a cell
    installs are importable, and never shadow the ones the driver itself runs on."""
    target = _packages_dir()
    if not target:
        return
    sys.path[:] = [p for p in sys.path if p != target] + [target]
    _refresh_packages()
    _wrap_pip_magic()


def _wrap_pip_magic() -> None:
    """`%pip install x` then `import x` in the same cell: the magic refreshes the import
    caches as soon as pip returns, not only at the end of the cell."""
    shell = getattr(state, "shell", None)
    if shell is None:
        return
    try:
        original = shell.find_line_magic("pip")
    except Exception:  # no magics machinery: nothing to wrap
        return
    if original is None or getattr(original, "_sandlot_refreshes", False):
        return

    def pip(line: str = ""):
        try:
            return original(line)
        finally:
            _refresh_packages()

    pip._sandlot_refreshes = True  # type: ignore[attr-defined]
    shell.register_magic_function(pip, "line", "pip")


def _refresh_packages() -> None:
    """Once the pip target exists, forgets the import system's note that it did not (made when
    the interpreter started, before any install), so `import` finds what `pip install` put there."""
    target = _packages_dir()
    if target and sys.path_importer_cache.get(target, False) is None and os.path.isdir(target):
        del sys.path_importer_cache[target]
        import importlib
        importlib.invalidate_caches()


def _warm() -> None:
    """Runs a throwaway cell before any client does, so a pooled sandbox has already paid for
    the pages its first cell touches. Leaves no history and no output."""
    try:
        state.shell.run_cell("pass", store_history=False, silent=True)
    except BaseException:  # warming must never break the sandbox
        pass


def serve(channel: Channel) -> None:
    """Answers the server's messages until it closes the control stream."""
    if state.module_baseline is None:  # what the sandbox got from the zygote (see snapshot.py)
        state.module_baseline = frozenset(sys.modules)
    _place_packages()
    while True:
        try:
            message = channel.recv()
        except (ValueError, UnicodeError) as exc:  # framing stays in sync; skip the frame
            write_stderr(f"sandlot: ignoring a malformed frame: {exc}")
            continue
        if message is None:
            return
        # The descriptor a frame with "fd": true carried: ours to close, and closed before
        # anything runs unless the request is one that uses it.
        fd = channel.take_fd()
        if fd is not None and message.get("type") not in _TAKES_FD:
            fd = _close(fd)
        try:
            _dispatch(message, fd)
        finally:
            _close(fd)


def _close(fd: int | None) -> None:
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


def _dispatch(message: dict, fd: int | None) -> None:
    kind = message.get("type")
    if kind == "execute":
        _execute(message)
    elif kind == "warm":
        _warm()
    elif kind in ("context_create", "context_restart", "context_delete"):
        context_op(kind, message)
    elif kind == "state_save":
        state.channel.send(save_state(message, fd), wait_until_read=False)
    elif kind == "state_load":
        state.channel.send(load_state(message, fd), wait_until_read=False)
    elif kind == "state_digest":
        state.channel.send(digest_state(message), wait_until_read=False)
    elif kind == "env":
        # The creator's environment variables come on the sandbox's own channel, never
        # through the zygote, so no other sandbox's memory ever holds them.
        env = message.get("env")
        if isinstance(env, dict):
            os.environ.update({str(k): str(v) for k, v in env.items()})
        # With them, the directory the creator's code starts in, when not /workspace.
        if "workdir" in message:
            set_workdir(message["workdir"])
