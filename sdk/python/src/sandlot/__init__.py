"""Python SDK for sandlot: self-hosted code execution sandboxes for AI agents.

::

    from sandlot import Sandbox

    with Sandbox() as sb:
        ex = sb.run_code("import pandas as pd; pd.DataFrame({'a': [1, 2]})")
        print(ex.text)
"""

from ._core import ConnectionConfig
from ._version import __version__
from .async_sandbox import AsyncContexts, AsyncFiles, AsyncSandbox
from .errors import (
    AuthenticationError,
    CapacityExhausted,
    ConnectionError,
    ExecutionError,
    ExecutionNotFound,
    ExecutionTimeout,
    FileNotFound,
    FileTooLarge,
    InvalidArchive,
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
    TemplateBuildFailed,
    TemplateBuildTimeout,
    TemplateNotFound,
    TemplateNotReady,
    WorkspaceFull,
)
from .models import (
    Artifact,
    BackgroundEntry,
    BackgroundOutput,
    Context,
    ExecError,
    Execution,
    ExecutionRecord,
    FileEntry,
    Limits,
    Logs,
    OutputMessage,
    Restarted,
    Result,
    SandboxInfo,
    Template,
    Truncation,
)
from .sandbox import Contexts, Files, Sandbox
from .templates import AsyncTemplates, Templates

__all__ = [
    "__version__",
    "Sandbox",
    "AsyncSandbox",
    "Files",
    "AsyncFiles",
    "Contexts",
    "AsyncContexts",
    "Templates",
    "AsyncTemplates",
    "ConnectionConfig",
    "Artifact",
    "BackgroundEntry",
    "BackgroundOutput",
    "Context",
    "Template",
    "Execution",
    "ExecError",
    "ExecutionRecord",
    "FileEntry",
    "Limits",
    "Logs",
    "OutputMessage",
    "Restarted",
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
    "TemplateBuildFailed",
    "TemplateBuildTimeout",
    "FileNotFound",
    "SandboxGone",
    "InvalidArchive",
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
