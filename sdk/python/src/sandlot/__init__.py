"""Python SDK for sandlot: self-hosted code execution sandboxes for AI agents.

::

    from sandlot import Sandbox

    with Sandbox() as sb:
        ex = sb.run_code("import pandas as pd; pd.DataFrame({'a': [1, 2]})")
        print(ex.text)
"""

from ._core import ConnectionConfig
from ._version import __version__
from .async_sandbox import AsyncFiles, AsyncSandbox
from .errors import (
    AuthenticationError,
    CapacityExhausted,
    ConnectionError,
    ExecutionError,
    ExecutionNotFound,
    ExecutionTimeout,
    FileNotFound,
    FileTooLarge,
    InvalidArgument,
    InvalidPath,
    InvalidRequest,
    NotARegularFile,
    NotFoundError,
    PayloadTooLarge,
    SandboxBusy,
    SandboxFailed,
    SandboxGone,
    SandboxNotFound,
    SandlotError,
    ServerError,
    TemplateNotFound,
    TemplateNotReady,
    WorkspaceFull,
)
from .models import (
    ExecError,
    Execution,
    ExecutionRecord,
    FileEntry,
    Limits,
    Logs,
    OutputMessage,
    Result,
    SandboxInfo,
    Truncation,
)
from .sandbox import Files, Sandbox

__all__ = [
    "__version__",
    "Sandbox",
    "AsyncSandbox",
    "Files",
    "AsyncFiles",
    "ConnectionConfig",
    "Execution",
    "ExecError",
    "ExecutionRecord",
    "FileEntry",
    "Limits",
    "Logs",
    "OutputMessage",
    "Result",
    "SandboxInfo",
    "Truncation",
    "SandlotError",
    "InvalidRequest",
    "InvalidArgument",
    "PayloadTooLarge",
    "FileTooLarge",
    "NotFoundError",
    "SandboxNotFound",
    "ExecutionNotFound",
    "TemplateNotFound",
    "TemplateNotReady",
    "FileNotFound",
    "SandboxGone",
    "InvalidPath",
    "NotARegularFile",
    "WorkspaceFull",
    "SandboxBusy",
    "CapacityExhausted",
    "AuthenticationError",
    "ServerError",
    "SandboxFailed",
    "ConnectionError",
    "ExecutionError",
    "ExecutionTimeout",
]
