"""Typed errors of the sandlot SDK.

Every error the server reports arrives as ``{"error": {"code": ..., "message": ...}}`` and is
raised as the :class:`SandlotError` subclass that matches its ``code``; the HTTP status and the
server's message are kept on the exception.
"""

from __future__ import annotations

import builtins
import json
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple, Type

if TYPE_CHECKING:  # pragma: no cover
    from ._execution import Execution

__all__ = [
    "SandlotError",
    "InvalidRequest",
    "InvalidArgument",
    "PayloadTooLarge",
    "FileTooLarge",
    "NotFoundError",
    "SandboxNotFound",
    "ExecutionNotFound",
    "TemplateNotFound",
    "SnapshotNotFound",
    "VolumeNotFound",
    "VolumeInUse",
    "PortNotExposed",
    "PortUnreachable",
    "TemplateNotReady",
    "TemplateBuildFailed",
    "TemplateBuildTimeout",
    "FileNotFound",
    "SandboxGone",
    "InvalidPath",
    "NotARegularFile",
    "WorkspaceFull",
    "SandboxBusy",
    "CapacityExhausted",
    "AuthenticationError",
    "Unauthenticated",
    "Forbidden",
    "PolicyDenied",
    "TenantQuotaExceeded",
    "NameTaken",
    "TemplateInUse",
    "TenantNotFound",
    "KeyNotFound",
    "InvalidPolicy",
    "SandboxContained",
    "CsrfFailed",
    "ServerError",
    "SandboxFailed",
    "StateCorrupt",
    "CaptureFailed",
    "ConnectionError",
    "ExecutionError",
    "ExecutionTimeout",
    "error_from_response",
]


class SandlotError(Exception):
    """Base class of every error raised by the SDK.

    ``code`` is the server's stable error code (``sandbox_not_found``, ``invalid_path`` ...) or
    an SDK-side code (``connection_error``, ``execution_error`` ...); ``status`` is the HTTP
    status when the error came from a response, else ``None``.
    """

    def __init__(self, message: str, *, code: str = "error", status: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status

    def __str__(self) -> str:
        if self.status is not None:
            return f"{self.code} (HTTP {self.status}): {self.message}"
        return f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, status={self.status!r}, message={self.message!r})"


class InvalidRequest(SandlotError):
    """The request was malformed or a value was rejected (``invalid_request``, ``invalid_argument``)."""


class InvalidArgument(InvalidRequest):
    """A value is out of range or not allowed (``invalid_argument``)."""


class PayloadTooLarge(SandlotError):
    """The body, the code or a file is larger than the server accepts."""


class FileTooLarge(PayloadTooLarge):
    """A file is larger than the server accepts (``file_too_large``)."""


class NotFoundError(SandlotError):
    """Base class of the ``*_not_found`` errors."""


class SandboxNotFound(NotFoundError):
    """No sandbox with that id (``sandbox_not_found``)."""


class ExecutionNotFound(NotFoundError):
    """No execution with that id (``execution_not_found``)."""


class TemplateNotFound(NotFoundError):
    """No template with that name (``template_not_found``)."""


class SnapshotNotFound(NotFoundError):
    """No snapshot with that id, or it was deleted (``snapshot_not_found``)."""


class VolumeNotFound(NotFoundError):
    """No volume with that name, or it was deleted (``volume_not_found``)."""


class VolumeInUse(SandlotError):
    """The volume is taken (``volume_in_use``, HTTP 409): another sandbox holds it read-write
    (a second read-write mount is refused), it cannot be deleted while any sandbox mounts it,
    or a volume of that name already exists. The message names the sandbox that holds it."""


class PortNotExposed(SandlotError):
    """The sandbox was not created to expose that port (``port_not_exposed``, HTTP 403)."""


class PortUnreachable(SandlotError):
    """Nothing in the sandbox answers on that port (``port_unreachable``, HTTP 502)."""


class TemplateNotReady(SandlotError):
    """The template is still building, or its build failed (``template_not_ready``)."""


class TemplateBuildFailed(SandlotError):
    """A template's build failed (status ``failed``), raised by ``Templates.wait_ready``.

    ``template`` is its name and ``error`` the server's reason (an unknown package, a setup
    script that raised, threads left running).
    """

    def __init__(self, message: str, *, template: str, error: str, code: str = "template_build_failed") -> None:
        super().__init__(message, code=code)
        self.template = template
        self.error = error


class TemplateBuildTimeout(TemplateNotReady, builtins.TimeoutError):
    """``Templates.wait_ready`` gave up while the template was still building.

    Also an instance of the built-in :class:`TimeoutError`.
    """

    def __init__(self, message: str, *, template: str) -> None:
        SandlotError.__init__(self, message, code="template_build_timeout")
        self.template = template


class FileNotFound(NotFoundError):
    """No such file or directory in the workspace (``file_not_found``)."""


class SandboxGone(SandlotError):
    """The sandbox existed but has ended: deleted, expired or lost (``sandbox_gone``)."""


class InvalidPath(SandlotError):
    """The path is absolute outside /workspace, escapes the workspace or is otherwise forbidden."""


class InvalidArchive(InvalidRequest):
    """An archive entry was refused (an absolute name, ``..``, a link pointing outside the
    directory, a device, a tar bomb, ...) by the server, or by ``download_dir`` on this side;
    the message names the entry. Nothing was written outside the target directory."""


class NotARegularFile(SandlotError):
    """The path names a directory, a symlink or a device (``not_a_regular_file``)."""


class WorkspaceFull(SandlotError):
    """The sandbox's workspace is full (``workspace_full``)."""


class SandboxBusy(SandlotError):
    """Another execution is running in the sandbox and the queue is full (``sandbox_busy``)."""


class CapacityExhausted(SandlotError):
    """The server cannot take more sandboxes right now (``capacity_exhausted``)."""


class AuthenticationError(SandlotError):
    """The request was refused for who sent it (HTTP 401/403): base class of
    :class:`Unauthenticated` and :class:`Forbidden`."""


class Unauthenticated(AuthenticationError):
    """No API key, or a key that is malformed, unknown or revoked (``unauthenticated``, HTTP
    401). The SDK sends ``api_key=``, else ``$SANDLOT_API_KEY``, else (for a server on this
    machine) the local admin key in ``$SANDLOT_DATA_DIR/api-key`` or
    ``~/.local/share/sandlot/api-key``; the message says which, if any, it found."""


class Forbidden(AuthenticationError):
    """The key is valid but may not do this, e.g. an admin-only operation with a member key
    (``forbidden``, HTTP 403)."""


class PolicyDenied(Forbidden):
    """A policy of the server denied the request (``policy_denied``, HTTP 403); the message
    names the deciding policies and their reason."""


class TenantQuotaExceeded(SandlotError):
    """A quota of the key's tenant (sandboxes, CPU, memory, creation rate) stayed full for the
    server's whole wait bound (``tenant_quota_exceeded``, HTTP 429). ``retry_after`` is the
    number of seconds the server suggests waiting (its ``Retry-After``), or ``None``."""

    def __init__(
        self, message: str, *, code: str = "tenant_quota_exceeded", status: Optional[int] = None, retry_after: Optional[float] = None
    ) -> None:
        super().__init__(message, code=code, status=status)
        self.retry_after = retry_after


class NameTaken(SandlotError):
    """The name is taken, e.g. a tenant's (``name_taken``, HTTP 409). Volume and template names
    are per tenant: another tenant's of the same name takes nothing."""


class TemplateInUse(SandlotError):
    """The template cannot be deleted yet (``template_in_use``, HTTP 409): a sandbox that has
    not ended (running, paused, stopped) or a snapshot uses it. The message names one."""


class TenantNotFound(NotFoundError):
    """No tenant with that name (``tenant_not_found``)."""


class KeyNotFound(NotFoundError):
    """No API key with that id (``key_not_found``)."""


class InvalidPolicy(InvalidRequest):
    """The policy set does not parse or does not validate against the schema
    (``invalid_policy``, HTTP 422)."""


class SandboxContained(SandlotError):
    """The sandbox was contained after a guardrail finding and takes no more work
    (``sandbox_contained``, HTTP 409)."""


class AuditUnavailable(SandlotError):
    """The server's audit log cannot record (its disk is full, or a damaged segment waits for
    an operator), so the server refuses actions rather than run them unrecorded
    (``audit_unavailable``, HTTP 503). Nothing was done."""


class JobNotFound(NotFoundError):
    """No job with that id (``job_not_found``)."""


class JobQueueFull(SandlotError):
    """The job queue (the sandbox's or the server's) is full (``job_queue_full``, HTTP 429).
    ``retry_after`` is the number of seconds the server suggests waiting, or ``None``."""

    def __init__(self, message: str, *, code: str = "job_queue_full", status: Optional[int] = None, retry_after: Optional[float] = None) -> None:
        super().__init__(message, code=code, status=status)
        self.retry_after = retry_after


class JobEnded(SandlotError):
    """The job has ended and cannot be cancelled (``job_ended``, HTTP 409)."""


class WebhookNotFound(NotFoundError):
    """No webhook with that id (``webhook_not_found``)."""


class UnsupportedBundle(InvalidRequest):
    """A run bundle written by a newer sandlot, or not a bundle at all
    (``unsupported_bundle``, HTTP 400)."""


class ReviewNotFound(NotFoundError):
    """No review with that id, or another tenant's (``review_not_found``)."""


class ReviewDenied(Forbidden):
    """The action was held for a person's review and denied, by a person or by the review's
    timeout (``review_denied``, HTTP 403); the message says who, when and why."""


class ReviewDecided(SandlotError):
    """The review was decided already, or the action it approved was released already
    (``review_decided``, HTTP 409): an approved action runs once."""


class ReviewPending(SandlotError):
    """A policy held the action for a person's review and it was not decided within
    ``review_wait`` (the server answered 202). ``review`` is the :class:`~sandlot.Review`:
    poll it (:meth:`Reviews.get`), then call again with ``review=review.id`` to run it once
    approved."""

    def __init__(self, message: str, *, review: Any) -> None:
        super().__init__(message, code="review_pending", status=202)
        self.review = review


class CsrfFailed(Forbidden):
    """A request with the web console's session cookie that its pages did not make: no or a
    wrong ``X-Sandlot-CSRF`` token, or another origin (``csrf_failed``, HTTP 403)."""


class ServerError(SandlotError):
    """The server failed (``internal``, ``sandbox_failed``, any 5xx without a known code)."""


class SandboxFailed(ServerError):
    """The sandbox died while serving the request (``sandbox_failed``)."""


class StateCorrupt(SandlotError):
    """A saved interpreter state (a snapshot's, or a paused sandbox's) is corrupt or truncated
    on the server's disk (``state_corrupt``); the message names it. Nothing was loaded, other
    snapshots and sandboxes are untouched, and a paused sandbox stays paused."""


class CaptureFailed(SandlotError):
    """The sandbox's state could not be saved for a fork, pause or snapshot (the server's disk
    filled, the save outran its time bound) (``capture_failed``). The sandbox is unchanged and
    keeps running."""


class ConnectionError(SandlotError, builtins.ConnectionError):  # noqa: A001 - public name by design
    """The server could not be reached, or the connection broke before a full response arrived.

    Also an instance of the built-in :class:`ConnectionError`.
    """

    def __init__(self, message: str, *, code: str = "connection_error", status: Optional[int] = None) -> None:
        SandlotError.__init__(self, message, code=code, status=status)


class ExecutionError(SandlotError):
    """Raised by :meth:`Execution.raise_for_error` when an execution did not end ``ok``.

    ``execution`` is the :class:`~sandlot.Execution`; ``name``, ``value`` and ``traceback``
    describe the error the code raised (empty when it ended for another reason, e.g. a Bash
    command's non-zero exit status or an out-of-memory kill).
    """

    def __init__(self, message: str, *, execution: "Execution", code: str = "execution_error") -> None:
        super().__init__(message, code=code)
        self.execution = execution
        err = execution.error
        self.name: str = err.name if err else ""
        self.value: str = err.value if err else ""
        self.traceback: str = err.traceback if err else ""
        self.end_state: str = execution.end_state


class ExecutionTimeout(ExecutionError):
    """The execution ran past its timeout (end state ``timeout``)."""

    def __init__(self, message: str, *, execution: "Execution") -> None:
        super().__init__(message, execution=execution, code="execution_timeout")


_BY_CODE: Dict[str, Type[SandlotError]] = {
    "invalid_request": InvalidRequest,
    "invalid_argument": InvalidArgument,
    "payload_too_large": PayloadTooLarge,
    "file_too_large": FileTooLarge,
    "sandbox_not_found": SandboxNotFound,
    "execution_not_found": ExecutionNotFound,
    "template_not_found": TemplateNotFound,
    "template_not_ready": TemplateNotReady,
    "file_not_found": FileNotFound,
    "sandbox_gone": SandboxGone,
    "invalid_path": InvalidPath,
    "invalid_archive": InvalidArchive,
    "not_a_regular_file": NotARegularFile,
    "workspace_full": WorkspaceFull,
    "sandbox_busy": SandboxBusy,
    "capacity_exhausted": CapacityExhausted,
    "sandbox_failed": SandboxFailed,
    "snapshot_not_found": SnapshotNotFound,
    "volume_not_found": VolumeNotFound,
    "volume_in_use": VolumeInUse,
    "port_not_exposed": PortNotExposed,
    "port_unreachable": PortUnreachable,
    "state_corrupt": StateCorrupt,
    "capture_failed": CaptureFailed,
    "internal": ServerError,
    "unauthenticated": Unauthenticated,
    "unauthorized": Unauthenticated,
    "forbidden": Forbidden,
    "policy_denied": PolicyDenied,
    "tenant_quota_exceeded": TenantQuotaExceeded,
    "name_taken": NameTaken,
    "template_in_use": TemplateInUse,
    "tenant_not_found": TenantNotFound,
    "key_not_found": KeyNotFound,
    "invalid_policy": InvalidPolicy,
    "sandbox_contained": SandboxContained,
    "audit_unavailable": AuditUnavailable,
    "job_not_found": JobNotFound,
    "job_queue_full": JobQueueFull,
    "job_ended": JobEnded,
    "webhook_not_found": WebhookNotFound,
    "unsupported_bundle": UnsupportedBundle,
    "review_not_found": ReviewNotFound,
    "review_denied": ReviewDenied,
    "review_decided": ReviewDecided,
    "csrf_failed": CsrfFailed,
}

_BY_STATUS: List[Tuple[int, Type[SandlotError], str]] = [
    (401, Unauthenticated, "unauthenticated"),
    (403, Forbidden, "forbidden"),
    (404, NotFoundError, "not_found"),
    (409, SandboxBusy, "sandbox_busy"),
    (410, SandboxGone, "sandbox_gone"),
    (413, PayloadTooLarge, "payload_too_large"),
    (429, TenantQuotaExceeded, "too_many_requests"),
    (503, CapacityExhausted, "capacity_exhausted"),
    (507, WorkspaceFull, "workspace_full"),
]


def _retry_after(headers: Optional[Mapping[str, str]]) -> Optional[float]:
    if not headers:
        return None
    value = headers.get("retry-after") or headers.get("Retry-After")
    try:
        secs = float(value) if value is not None else None
    except ValueError:  # an HTTP date: not what sandlot sends
        return None
    return secs if secs is not None and secs >= 0 else None


def error_from_response(status: int, body: bytes, headers: Optional[Mapping[str, str]] = None) -> SandlotError:
    """Build the typed error for an HTTP error response with ``status``, raw ``body`` and
    (optionally) its ``headers`` (for ``Retry-After``)."""
    err = _error_from_body(status, body)
    if isinstance(err, (TenantQuotaExceeded, JobQueueFull)):
        err.retry_after = _retry_after(headers)
    return err


def _error_from_body(status: int, body: bytes) -> SandlotError:
    code: Optional[str] = None
    message: Optional[str] = None
    try:
        doc = json.loads(body.decode("utf-8")) if body else None
    except (ValueError, UnicodeDecodeError):
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        err = doc["error"]
        if isinstance(err.get("code"), str):
            code = err["code"]
        if err.get("message") is not None:
            message = str(err["message"])
    if message is None:
        text = body.decode("utf-8", "replace").strip() if body else ""
        message = text[:2000] or f"HTTP {status}"
    if code is not None and code in _BY_CODE:
        return _BY_CODE[code](message, code=code, status=status)
    for st, cls, default_code in _BY_STATUS:
        if st == status:
            return cls(message, code=code or default_code, status=status)
    if status >= 500:
        return ServerError(message, code=code or "internal", status=status)
    if 400 <= status < 500:
        return InvalidRequest(message, code=code or "invalid_request", status=status)
    return SandlotError(message, code=code or "unexpected_status", status=status)
