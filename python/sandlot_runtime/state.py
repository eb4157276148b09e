"""The driver's one mutable state: a single module-level ``state`` that the SIGINT handler,
IPython's hooks, the control channel and the protocol loop all read and write."""

from __future__ import annotations

import io
from collections import deque

# The code context that exists from the start and that an execute without "context" runs in.
DEFAULT_CONTEXT = "default"


class State:
    """Everything the driver keeps between calls. One instance, module-level: the signal
    handler, IPython's hooks and the protocol loop all need to see the same values."""

    def __init__(self) -> None:
        # The objects the modules above keep here are named in comments, not imported: this
        # module sits below every other one, annotations included.
        self.shell = None  # shell.Shell, once the driver made it
        self.channel = None  # protocol.Channel, the control stream
        self.exec_id: str | None = None
        # SIGINT raises KeyboardInterrupt only while this is true (user Python code runs).
        self.python_running = False
        # The process group a running bash cell lives in; SIGINT is forwarded there.
        self.bash_pgid: int | None = None
        # Set when SIGINT acted on the current execution.
        self.interrupted = False
        # While a frame is being written, an interrupt waits so a frame is never cut in half.
        self.sending = 0
        self.deferred_interrupt = False
        # "cell" from pre_execute to post_execute: tracebacks shown then may be the cell's error.
        self.phase = "idle"
        # Depth of display formatting: tracebacks shown inside it are formatter failures.
        self.formatting = 0
        # (exception, structured traceback) recorded during the cell phase.
        self.tracebacks: list[tuple[BaseException, list[str]]] = []
        # Our stdout/stderr text streams and saved duplicates of the original fds 1 and 2.
        self.stdout: io.TextIOWrapper | None = None
        self.stderr: io.TextIOWrapper | None = None
        self.saved_fds: dict[int, int] = {}
        self.bash = None  # bash_session.BashSession: the active context's session
        self.js = None  # js_session.JsSession: the active context's node, once started
        # The node running a JavaScript cell; SIGINT is forwarded to it.
        self.js_pid: int | None = None
        # Code contexts by id (see contexts.Context); the active one's namespace is in the shell.
        self.contexts: dict = {}  # id -> contexts.Context
        self.active_context = DEFAULT_CONTEXT
        # Where the sandbox's code starts (the creator's choice, e.g. E2B's /home/user): new
        # contexts start there. None: where the driver started (/workspace).
        self.workdir: str | None = None
        # What every fresh namespace starts with: the names the template's setup code bound,
        # and the compiler flags after it.
        self.setup_names: dict = {}
        self.base_compile_flags = 0
        self.libc_fflush = None
        self.pid = 0  # the driver's own pid, set by main()
        # The zygote's sys.stdout/sys.stderr, kept referenced so they are never flushed (on
        # garbage collection) into this sandbox's pipes.
        self.inherited_streams: tuple = ()
        # Descriptors that came on the control stream, oldest first, until the frame they came
        # with is complete: it claims the first, the rest are closed (see protocol.Channel).
        self.received_fds: deque[int] = deque()
        # sys.modules' names when this sandbox began serving (what it inherited from the
        # zygote): a saved state records the modules imported since, to import them on load.
        self.module_baseline: frozenset[str] | None = None
        # The namespace a state_load is unpickling a variable into (see snapshot.py).
        self.loading_namespace: dict | None = None


state = State()
