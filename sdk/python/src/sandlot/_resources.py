"""Sandboxes and what they are made of and from, as the server reports them: a sandbox
(:class:`SandboxInfo`), its files, limits and code contexts, templates, snapshots (and what a
saved state could not carry, or a restore bring back), volumes. Part of :mod:`sandlot.models`,
which re-exports every name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from .errors import TemplateBuildFailed


@dataclass
class FileEntry:
    """One entry of a workspace listing, or the file a write created."""

    path: str
    name: str
    kind: str
    size: int
    modified: int
    mode: int
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_dir(self) -> bool:
        return self.kind == "dir"

    @property
    def is_file(self) -> bool:
        return self.kind == "file"

    @property
    def type(self) -> str:  # E2B spelling
        return self.kind

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "FileEntry":
        path = str(d.get("path", ""))
        return cls(
            path=path,
            name=str(d.get("name") or path.rsplit("/", 1)[-1]),
            kind=str(d.get("kind", "file")),
            size=int(d.get("size") or 0),
            modified=int(d.get("modified") or 0),
            mode=int(d.get("mode") or 0),
            raw=dict(d),
        )


@dataclass
class SandboxInfo:
    """A sandbox as the server reports it."""

    id: str
    template: str
    state: str
    template_version: str = ""
    env: Dict[str, str] = field(default_factory=dict)
    metadata: Dict[str, str] = field(default_factory=dict)
    limits: Dict[str, int] = field(default_factory=dict)
    idle_timeout: Optional[int] = None
    max_lifetime: Optional[int] = None
    created_at: Optional[str] = None
    last_active_at: Optional[str] = None
    expires_at: Optional[str] = None
    ended_reason: Optional[str] = None
    on_idle: str = "delete"
    forked_from: Optional[str] = None
    from_snapshot: Optional[str] = None
    paused_at: Optional[str] = None
    last_restore: Optional["LastRestore"] = None
    volumes: List["VolumeMount"] = field(default_factory=list)
    #: Read-only host paths it mounts (trusted tier): ``{"host": ..., "path": ...}`` each.
    mounts: List[Dict[str, str]] = field(default_factory=list)
    ports: List[int] = field(default_factory=list)
    all_ports: bool = False
    tenant: str = "default"
    tier: str = "isolated"
    network: List[str] = field(default_factory=list)
    secrets: List[str] = field(default_factory=list)
    contained: Optional[str] = None
    port_token: Optional[str] = field(default=None, repr=False)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def sandbox_id(self) -> str:  # E2B spelling
        return self.id

    @property
    def running(self) -> bool:
        return self.state == "running"

    @property
    def paused(self) -> bool:
        return self.state == "paused"

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SandboxInfo":
        return cls(
            id=str(d.get("id", "")),
            template=str(d.get("template", "")),
            state=str(d.get("state", "")),
            template_version=str(d.get("template_version", "")),
            env=dict(d.get("env") or {}),
            metadata=dict(d.get("metadata") or {}),
            limits=dict(d.get("limits") or {}),
            idle_timeout=d.get("idle_timeout"),
            max_lifetime=d.get("max_lifetime"),
            created_at=d.get("created_at"),
            last_active_at=d.get("last_active_at"),
            expires_at=d.get("expires_at"),
            ended_reason=d.get("ended_reason"),
            on_idle=str(d.get("on_idle") or "delete"),
            forked_from=d.get("forked_from"),
            from_snapshot=d.get("from_snapshot"),
            paused_at=d.get("paused_at"),
            last_restore=LastRestore.from_json(lr) if isinstance((lr := d.get("last_restore")), Mapping) else None,
            volumes=[VolumeMount.from_json(m) for m in (d.get("volumes") or []) if isinstance(m, Mapping)],
            mounts=[
                {"host": str(m.get("host", "")), "path": str(m.get("path", ""))}
                for m in (d.get("mounts") or [])
                if isinstance(m, Mapping)
            ],
            ports=[int(p) for p in (d.get("ports") or []) if isinstance(p, int)],
            all_ports=bool(d.get("all_ports", False)),
            tenant=str(d.get("tenant") or "default"),
            tier=str(d.get("tier") or "isolated"),
            network=[str(x) for x in (d.get("network") or [])],
            secrets=[str(x) for x in (d.get("secrets") or [])],
            contained=d.get("contained"),
            port_token=d.get("port_token"),
            raw=dict(d),
        )


@dataclass
class Limits:
    """Resource limits to ask for; ``None`` leaves the server's default. The server clamps to
    its maxima, and :attr:`SandboxInfo.limits` has the effective values."""

    memory_mb: Optional[int] = None
    cpu_millis: Optional[int] = None
    pids: Optional[int] = None
    disk_mb: Optional[int] = None

    def to_json(self) -> Dict[str, int]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


# -- code contexts --------------------------------------------------------------------------

@dataclass
class Context:
    """A code context of a sandbox: an independent Python namespace (own variables, imports,
    execution counter) with its own Bash session, sharing the sandbox's files. Pass it (or its
    ``id``) as ``run_code(..., context=ctx)``; every sandbox has the context ``default``."""

    id: str
    created_at: Optional[str] = None
    #: The directory it was created to work in (None: the sandbox's, ``/workspace``).
    cwd: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Context":
        return cls(id=str(d.get("id", "")), created_at=d.get("created_at"), cwd=d.get("cwd"), raw=dict(d))

    def __str__(self) -> str:
        return self.id


# -- templates ------------------------------------------------------------------------------

@dataclass
class Template:
    """A template as the server reports it (``GET /v1/templates/{name}``).

    ``status`` is ``building``, ``ready`` or ``failed`` (then ``error`` says why); ``spec`` is
    the TemplateSpec it was created with; ``version`` the content hash recorded with every
    sandbox made from it; ``prepare_seconds`` how long its setup took, once ready; ``tenant``
    the tenant whose template it is (names are per tenant; the built-in ``default`` is every
    tenant's to use).
    """

    name: str
    status: str
    version: str = ""
    error: Optional[str] = None
    spec: Dict[str, Any] = field(default_factory=dict)
    created_at: Optional[str] = None
    prepare_seconds: Optional[float] = None
    tenant: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_ready(self) -> bool:
        return self.status == "ready"

    @property
    def is_failed(self) -> bool:
        return self.status == "failed"

    @property
    def is_building(self) -> bool:
        return self.status == "building"

    def raise_for_failure(self) -> "Template":
        """Raise :class:`~sandlot.TemplateBuildFailed` if the build failed; else return self."""
        if self.is_failed:
            raise TemplateBuildFailed(
                f"template {self.name!r} failed to build: {self.error or 'no reason given'}",
                template=self.name,
                error=self.error or "",
            )
        return self

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Template":
        ps = d.get("prepare_seconds")
        err = d.get("error")
        return cls(
            name=str(d.get("name", "")),
            status=str(d.get("status", "")),
            version=str(d.get("version") or ""),
            error=str(err) if err else None,
            spec=dict(spec) if isinstance((spec := d.get("spec")), Mapping) else {},
            created_at=d.get("created_at"),
            prepare_seconds=float(ps) if isinstance(ps, (int, float)) else None,
            tenant=d.get("tenant"),
            raw=dict(d),
        )


# -- saved state: forks, pauses, snapshots --------------------------------------------------

@dataclass
class NotCaptured:
    """Something a fork, pause or snapshot could not carry over, or a restore could not bring
    back: ``name`` (a variable, or a module that failed to re-import), the code ``context`` it
    belongs to (``default`` or ``ctx_...``) and ``reason`` (e.g. ``TypeError: cannot pickle
    '_thread.lock' object``, ``timed out after 2 s``)."""

    name: str
    context: str
    reason: str

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "NotCaptured":
        return cls(name=str(d.get("name", "")), context=str(d.get("context", "")), reason=str(d.get("reason", "")))


def not_captured_list(value: Any) -> List[NotCaptured]:
    """The :class:`NotCaptured` entries of a JSON list (a fork's, a snapshot's, a restore's)."""
    return [NotCaptured.from_json(x) for x in (value if isinstance(value, list) else []) if isinstance(x, Mapping)]


@dataclass
class LastRestore:
    """The last time a sandbox's interpreter state was loaded from a saved state
    (:attr:`SandboxInfo.last_restore`): ``at`` (RFC 3339), ``source`` (``fork``, ``snapshot``
    or ``resume``), how many ``variables`` were restored and what was ``not_restored``."""

    at: str
    source: str
    variables: int = 0
    not_restored: List[NotCaptured] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "LastRestore":
        return cls(
            at=str(d.get("at", "")),
            source=str(d.get("source", "")),
            variables=int(d.get("variables") or 0),
            not_restored=not_captured_list(d.get("not_restored")),
        )


@dataclass
class Snapshot:
    """A sandbox's interpreter state and workspace, saved (``sb.snapshot(name)``); start any
    number of sandboxes from it with ``Sandbox(from_snapshot=snap)``. It outlives its sandbox
    until deleted.

    ``sandbox_id`` is the sandbox it was taken from; ``state_bytes`` the size of the saved
    state; ``workspace`` whether the files were captured; ``variables`` how many were saved
    and ``not_captured`` what was not; ``version`` the state's format version.
    """

    id: str
    name: Optional[str] = None
    sandbox_id: str = ""
    template: str = ""
    template_version: str = ""
    created_at: Optional[str] = None
    state_bytes: int = 0
    workspace: bool = False
    variables: int = 0
    not_captured: List[NotCaptured] = field(default_factory=list)
    version: int = 1
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Snapshot":
        name = d.get("name")
        return cls(
            id=str(d.get("id", "")),
            name=str(name) if name is not None else None,
            sandbox_id=str(d.get("sandbox_id", "")),
            template=str(d.get("template", "")),
            template_version=str(d.get("template_version", "")),
            created_at=d.get("created_at"),
            state_bytes=int(d.get("state_bytes") or 0),
            workspace=bool(d.get("workspace")),
            variables=int(d.get("variables") or 0),
            not_captured=not_captured_list(d.get("not_captured")),
            version=int(d.get("version") or 1),
            raw=dict(d),
        )

    def __str__(self) -> str:
        return self.id


# -- volumes --------------------------------------------------------------------------------

@dataclass
class VolumeMount:
    """A named volume mounted into a sandbox: ask for it with ``Sandbox(volumes=[...])``, read
    it back in :attr:`SandboxInfo.volumes`. ``path`` is a directory under ``/workspace``
    (``"/workspace/data"`` or ``"data"``; the server answers the relative form). Any number of
    sandboxes may mount a volume ``read_only`` at once; read-write, one at a time."""

    name: str
    path: str
    read_only: bool = False

    def to_json(self) -> Dict[str, Any]:
        return {"name": self.name, "path": self.path, "read_only": self.read_only}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "VolumeMount":
        return cls(name=str(d.get("name", "")), path=str(d.get("path", "")), read_only=bool(d.get("read_only")))


@dataclass
class VolumeUse:
    """A sandbox that mounts a volume (:attr:`Volume.mounted_by`): where, and whether read-only."""

    sandbox_id: str
    path: str
    read_only: bool

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "VolumeUse":
        return cls(sandbox_id=str(d.get("sandbox_id", "")), path=str(d.get("path", "")), read_only=bool(d.get("read_only")))


@dataclass
class Volume:
    """A named volume: files that live apart from any sandbox (deleting a sandbox never deletes
    a volume), capped at ``size_mb``. ``mounted_by`` lists the sandboxes that mount it (running,
    paused, stopped or failed).

    ``files`` is its files API (``volume.files.write(path, data)``, ``read``, ``list``,
    ``remove``, ...), set on the volumes that :class:`~sandlot.Volumes` and
    :class:`~sandlot.AsyncVolumes` return (coroutines on the latter); ``None`` on one built by
    hand. ``str(volume)`` is its name, so a Volume goes wherever a name does.
    """

    name: str
    size_mb: int = 0
    created_at: Optional[str] = None
    mounted_by: List[VolumeUse] = field(default_factory=list)
    files: Any = field(default=None, repr=False, compare=False)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any], files: Any = None) -> "Volume":
        users = d.get("mounted_by")
        return cls(
            name=str(d.get("name", "")),
            size_mb=int(d.get("size_mb") or 0),
            created_at=d.get("created_at"),
            mounted_by=[VolumeUse.from_json(u) for u in (users if isinstance(users, list) else []) if isinstance(u, Mapping)],
            files=files,
            raw=dict(d),
        )

    def __str__(self) -> str:
        return self.name


class Review:
    """A held action's review, as the server answered it (``raw`` has every field)."""

    def __init__(self, doc: Mapping[str, Any]) -> None:
        self.raw: Dict[str, Any] = dict(doc)

    def _get(self, name: str) -> Any:
        return self.raw.get(name)

    @property
    def id(self) -> str:
        return str(self.raw.get("id", ""))

    @property
    def state(self) -> str:
        """``pending``, ``approved`` or ``denied``."""
        return str(self.raw.get("state", ""))

    @property
    def gate(self) -> str:
        return str(self.raw.get("gate", ""))

    @property
    def reason(self) -> str:
        """Why it is held: the holding policies' ``@review`` text."""
        return str(self.raw.get("reason", ""))

    @property
    def request(self) -> Dict[str, Any]:
        """The held request (an execution's sandbox, language and code)."""
        r = self.raw.get("request")
        return dict(r) if isinstance(r, Mapping) else {}

    @property
    def decided_by(self) -> Optional[str]:
        return self._get("decided_by")

    @property
    def decision_reason(self) -> Optional[str]:
        return self._get("decision_reason")

    @property
    def consumed_at(self) -> Optional[str]:
        """When the approved action was released (it is released once)."""
        return self._get("consumed_at")

    @property
    def expires_at(self) -> str:
        return str(self.raw.get("expires_at", ""))

    @classmethod
    def from_json(cls, doc: Any) -> "Review":
        return cls(doc if isinstance(doc, Mapping) else {})

    def __repr__(self) -> str:
        return f"Review(id={self.id!r}, gate={self.gate!r}, state={self.state!r})"


# The policy history and the what-if evaluator's answers (sandlot.policies).


@dataclass(frozen=True)
class PolicyEvaluation:
    """How a request would be decided (``POST /v1/policies/evaluate``)."""

    decision: str
    allowed: bool
    needs_review: bool
    policies: List[str] = field(default_factory=list)
    reasons: List[str] = field(default_factory=list)
    errors: List[str] = field(default_factory=list)
    #: The version of the set that decided (the draft's when one was given).
    version: str = ""
    draft: bool = False
    #: The principal and request decided, with the server's defaults filled in.
    query: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: Any) -> "PolicyEvaluation":
        d = d if isinstance(d, Mapping) else {}
        return cls(
            decision=str(d.get("decision", "")),
            allowed=bool(d.get("allowed", False)),
            needs_review=bool(d.get("needs_review", False)),
            policies=[str(p) for p in d.get("policies") or []],
            reasons=[str(r) for r in d.get("reasons") or []],
            errors=[str(e) for e in d.get("errors") or []],
            version=str(d.get("version", "")),
            draft=bool(d.get("draft", False)),
            query=dict(d.get("query") or {}),
        )


@dataclass(frozen=True)
class PolicyVersion:
    """One policy set that was put in force."""

    seq: int
    version: str
    #: The prefix of the key that put it in force (``startup``: the set the server started with).
    set_by: str
    at: str
    #: The Cedar text (from :meth:`Policies.version` only).
    text: Optional[str] = None

    @classmethod
    def from_json(cls, d: Any) -> "PolicyVersion":
        d = d if isinstance(d, Mapping) else {}
        return cls(
            seq=int(d.get("seq", 0)),
            version=str(d.get("version", "")),
            set_by=str(d.get("set_by", "")),
            at=str(d.get("at", "")),
            text=d.get("text"),
        )
