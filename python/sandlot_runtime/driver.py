"""The in-sandbox driver's entry points: runs Python cells with IPython and Bash cells in one
persistent bash. The package's other modules hold the parts (the map is in __init__.py).

Two entry points (see ARCHITECTURE.md, "Processes" and "The execution protocol"):

- ``prepare(setup_code)`` runs once in the zygote, before any fork: it builds the IPython shell,
  wires its display system to the control stream, turns on inline matplotlib (and the showing
  of PIL images saved to a file, as E2B does), warms the code paths every sandbox will use,
  runs the template's setup code, then freezes the heap so forked children share it
  copy-on-write. It starts no thread: the zygote must be single-threaded to fork.
- ``main(ctrl_fd)`` runs in the forked, jailed child: it speaks the framed JSON protocol on
  ``ctrl_fd`` until the stream closes.

``python -m sandlot_runtime.driver --fd N`` does both without any jail, for tests.

Importing this module imports every other module of the package, so the zygote, which imports
it before it forks, leaves nothing for a sandbox to load.

Output: the server reads two pipes, which only the driver writes into. fds 1 and 2 are each
execution's own pipes, which a relay thread copies into the server's as they fill; prints go
into the server's pipes after what those hold, and every frame is sent after moving what they
hold, and user code goes on only once the server has read an event frame (see
protocol.Channel), so output and events keep the order they were produced in. When an execution
ends, fds 1 and 2 get new pipes: what a process it started writes later is its background
output, never another execution's (see output.py).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import platform
import signal
import sys
import threading
import warnings
from typing import NoReturn

from . import output
from .capture import flush_output, restore_output
from .contexts import init_contexts
from .display import show_saved_images
from .protocol import Channel, exit_driver
from .python_cells import on_sigint
from .serve import serve
from .shell import enable_inline_figures, make_shell, run_setup, warm_up
from .state import state


def _load_libc_fflush():
    try:
        fflush = ctypes.CDLL(None).fflush
        fflush.argtypes = [ctypes.c_void_p]
        return fflush
    except Exception:
        return None


def _check_single_threaded() -> None:
    python_threads = threading.active_count()
    if python_threads != 1:
        raise RuntimeError(f"prepare() left {python_threads} Python threads running; "
                           "the zygote must be single-threaded to fork")
    try:
        native_threads = len(os.listdir("/proc/self/task"))
    except OSError:
        return
    if native_threads != 1:
        raise RuntimeError(f"the process has {native_threads} native threads after prepare(); "
                           "cap BLAS/OpenMP pools (OPENBLAS_NUM_THREADS=1, OMP_NUM_THREADS=1, "
                           "MKL_NUM_THREADS=1) before importing numpy")


def prepare(setup_code: str | None = None) -> None:
    """Builds and warms the IPython shell, once, in the zygote. Starts no thread."""
    if state.shell is not None:
        raise RuntimeError("prepare() already ran in this process")
    # IPython warns this after every SystemExit; here exiting is reported, not done.
    warnings.filterwarnings("ignore", message="To exit: use 'exit', 'quit', or Ctrl-D.")
    shell = make_shell()
    state.shell = shell
    enable_inline_figures(shell)
    show_saved_images()
    warm_up(shell)
    state.libc_fflush = _load_libc_fflush()
    if setup_code:
        run_setup(shell, setup_code)
    init_contexts(shell)
    flush_output()  # a buffer left here would be copied into every sandbox
    gc.collect()
    gc.freeze()  # the heap so far never moves again: children share it copy-on-write
    _check_single_threaded()


def _precise_sleeps() -> None:
    """The default timer slack (50 us) would stretch every short wait for the server."""
    try:
        ctypes.CDLL(None).prctl(29, 1000, 0, 0, 0)  # PR_SET_TIMERSLACK, 1 us
    except Exception:
        pass


def _adopt_sandbox() -> None:
    """Undoes what the child inherited from the zygote but must not share with it."""
    state.pid = os.getpid()
    # Every sandbox is a fork of the same zygote: numpy's global generator would hand all of
    # them the same numbers. (The random module reseeds itself after fork.)
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        try:
            numpy_random.seed()
        except Exception:
            pass
    state.shell.home_dir = os.path.expanduser("~")  # %cd with no argument: the sandbox's HOME


def main(ctrl_fd: int) -> NoReturn:
    """Serves the execution protocol on ctrl_fd until the server closes it."""
    if state.shell is None:
        prepare()
    _precise_sleeps()
    os.set_inheritable(ctrl_fd, False)  # no subprocess may hold or write the control stream
    os.set_blocking(ctrl_fd, True)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # subprocess needs to wait for its children
    signal.signal(signal.SIGINT, on_sigint)
    _adopt_sandbox()
    state.inherited_streams = (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)
    output.setup()  # the server's pipes kept aside, the first execution's pipes on fds 1 and 2
    restore_output()
    state.channel = Channel(ctrl_fd)
    state.channel.send({"type": "hello", "python": platform.python_version()},
                       wait_until_read=False)
    while True:
        try:
            serve(state.channel)
            break
        except KeyboardInterrupt:  # unreachable by design; a stray one must not end the sandbox
            continue
    exit_driver()


def _cli(argv: list[str] | None = None) -> NoReturn:
    parser = argparse.ArgumentParser(description="Run the sandlot driver without a jail.")
    parser.add_argument("--fd", type=int, required=True, help="the control stream's fd")
    args = parser.parse_args(argv)
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")  # before numpy loads: prepare() must stay single-threaded
    prepare()
    main(args.fd)


if __name__ == "__main__":
    _cli()
