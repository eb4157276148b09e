"""Objects the SDK returns: executions and their results, sandboxes, files.

Each wraps the JSON the server sent (kept in ``raw``) and exposes it as attributes. The shapes
follow the wire model in ``crates/sandlot-types`` and, where it fits, E2B's code interpreter SDK.

Every name is importable from here (``sandlot.models.X``); they are defined by concern in
``_artifacts`` (artifacts and the protocols that read them), ``_execution`` (an execution's
results, its record, background output), ``_resources`` (sandboxes, files, contexts, templates,
snapshots, volumes) and ``_family`` (forks and diffs).
"""

from __future__ import annotations

# Names outside __all__ are re-exported too (noqa: F401): importable from here as before, left
# out of `import *` as before.
from ._artifacts import Artifact, ArtifactClient, ArtifactReader, AsyncArtifactReader, PathLike, artifact_path  # noqa: F401
from ._execution import (
    BackgroundEntry,
    BackgroundOutput,
    ExecError,
    Execution,
    ExecutionRecord,
    ImageResults,
    Logs,
    OutputMessage,
    Restarted,
    Rollback,
    Result,
    Truncation,
)
from ._family import Diff, FileChange, ForkResult, NotCompared, VariableChange, VariableSummary  # noqa: F401
from ._resources import (
    Context,
    FileEntry,
    LastRestore,
    Limits,
    NotCaptured,
    PolicyEvaluation,
    PolicyVersion,
    Review,
    SandboxInfo,
    Snapshot,
    Template,
    Volume,
    VolumeMount,
    VolumeUse,
)

__all__ = [
    "OutputMessage",
    "Result",
    "Logs",
    "ExecError",
    "Truncation",
    "Execution",
    "ImageResults",
    "FileEntry",
    "SandboxInfo",
    "ExecutionRecord",
    "Limits",
    "Artifact",
    "Context",
    "Template",
    "Restarted",
    "Rollback",
    "BackgroundEntry",
    "BackgroundOutput",
    "NotCaptured",
    "LastRestore",
    "Snapshot",
    "ForkResult",
    "VolumeMount",
    "VolumeUse",
    "Volume",
    "Review",
    "PolicyEvaluation",
    "PolicyVersion",
]
