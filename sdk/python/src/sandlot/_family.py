"""A sandbox's family: what a fork returns (:class:`ForkResult`) and how two members of one
family differ (:class:`Diff`, ``sb.diff(other)``). Part of :mod:`sandlot.models`, which
re-exports every name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, TypeVar

from ._resources import NotCaptured, SandboxInfo, not_captured_list

T = TypeVar("T")


class ForkResult(List[T]):
    """What ``sb.fork(n)`` returns: a list of the new sandboxes (handles of the same kind as
    the parent, each already running with the parent's state), plus what the fork could not
    carry over (``not_captured``, the same for every child), ``took_ms`` as the server
    measured it, and each child as the server reported it (``infos``)."""

    not_captured: List[NotCaptured]
    took_ms: float
    infos: List[SandboxInfo]
    raw: Dict[str, Any]

    def __init__(
        self,
        sandboxes: Iterable[T] = (),
        *,
        not_captured: Optional[List[NotCaptured]] = None,
        took_ms: float = 0.0,
        infos: Optional[List[SandboxInfo]] = None,
        raw: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__(sandboxes)
        self.not_captured = list(not_captured or [])
        self.took_ms = took_ms
        self.infos = list(infos or [])
        self.raw = dict(raw or {})

    @staticmethod
    def parse(d: Mapping[str, Any]) -> Tuple[List[SandboxInfo], List[NotCaptured], float]:
        """(children, not captured, took_ms) of a ForkResult body."""
        kids = d.get("sandboxes")
        infos = [SandboxInfo.from_json(x) for x in (kids if isinstance(kids, list) else []) if isinstance(x, Mapping)]
        took = d.get("took_ms")
        return infos, not_captured_list(d.get("not_captured")), float(took) if isinstance(took, (int, float)) else 0.0

    def __repr__(self) -> str:
        return f"ForkResult({list.__repr__(self)}, not_captured={self.not_captured!r}, took_ms={self.took_ms!r})"


# -- divergence: sb.diff(other) -------------------------------------------------------------

def _opt_int(value: Any) -> Optional[int]:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _opt_str(value: Any) -> Optional[str]:
    return str(value) if value is not None else None


@dataclass
class VariableSummary:
    """One side of a differing variable: its ``type`` name and ``size``, the bytes of its
    pickle as a save writes it."""

    type: str
    size: int = 0

    @classmethod
    def from_json(cls, d: Any) -> Optional["VariableSummary"]:
        if not isinstance(d, Mapping):
            return None
        return cls(type=str(d.get("type", "")), size=_opt_int(d.get("size")) or 0)


@dataclass
class VariableChange:
    """A variable that differs between the two sandboxes of a :class:`Diff`: ``change`` is
    ``added`` (only in ``b``), ``removed`` (only in ``a``) or ``changed``; ``a`` and ``b``
    are each side's :class:`VariableSummary`, None on the side without it."""

    context: str
    name: str
    change: str
    a: Optional[VariableSummary] = None
    b: Optional[VariableSummary] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "VariableChange":
        return cls(
            context=str(d.get("context", "")),
            name=str(d.get("name", "")),
            change=str(d.get("change", "")),
            a=VariableSummary.from_json(d.get("a")),
            b=VariableSummary.from_json(d.get("b")),
        )


@dataclass
class FileChange:
    """A workspace entry that differs: its ``path`` (relative to ``/workspace``), ``change``
    as for variables, and on each side its kind (``file``, ``dir``, ``symlink``, ``other``;
    symlinks are never followed) and size, None on the side without it."""

    path: str
    change: str
    a_kind: Optional[str] = None
    b_kind: Optional[str] = None
    a_size: Optional[int] = None
    b_size: Optional[int] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "FileChange":
        return cls(
            path=str(d.get("path", "")),
            change=str(d.get("change", "")),
            a_kind=_opt_str(d.get("a_kind")),
            b_kind=_opt_str(d.get("b_kind")),
            a_size=_opt_int(d.get("a_size")),
            b_size=_opt_int(d.get("b_size")),
        )


@dataclass
class NotCompared:
    """Something a diff could not compare: a variable (``kind == "variable"``, with its
    ``context``) one sandbox could not digest, or a workspace entry (``kind == "file"``) it
    could not read; ``sandbox`` is the sandbox concerned, None for both."""

    sandbox: Optional[str]
    kind: str
    context: Optional[str]
    name: str
    reason: str

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "NotCompared":
        return cls(
            sandbox=_opt_str(d.get("sandbox")),
            kind=str(d.get("kind", "")),
            context=_opt_str(d.get("context")),
            name=str(d.get("name", "")),
            reason=str(d.get("reason", "")),
        )


def _listed(value: Any, make: Any) -> List[Any]:
    return [make(x) for x in (value if isinstance(value, list) else []) if isinstance(x, Mapping)]


@dataclass
class Diff:
    """What ``sb.diff(other)`` returns: which variables and workspace files differ between
    sandbox ``a`` (``sb``) and sandbox ``b`` (``other``), two sandboxes of one family (a fork's
    parent and children, sandboxes from one snapshot, their descendants).

    ``variables`` are :class:`VariableChange` s, ``files`` :class:`FileChange` s; ``added``
    means only in ``b``. ``truncated`` says the file comparison stopped short (a workspace
    too large to walk whole, or too many differences listed); ``not_compared`` lists what
    could not be compared (:class:`NotCompared`: a lock, an open file, a pickling that timed
    out...). ``identical`` is True when nothing compared differs."""

    a: str
    b: str
    variables: List[VariableChange] = field(default_factory=list)
    files: List[FileChange] = field(default_factory=list)
    truncated: bool = False
    not_compared: List[NotCompared] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Diff":
        return cls(
            a=str(d.get("a", "")),
            b=str(d.get("b", "")),
            variables=_listed(d.get("variables"), VariableChange.from_json),
            files=_listed(d.get("files"), FileChange.from_json),
            truncated=bool(d.get("truncated")),
            not_compared=_listed(d.get("not_compared"), NotCompared.from_json),
            raw=dict(d),
        )

    @property
    def identical(self) -> bool:
        return not self.variables and not self.files

    @staticmethod
    def target(other: Any) -> str:
        """The id of what a diff compares with: a sandbox handle (sync or async), a
        :class:`SandboxInfo`, or an id."""
        if isinstance(other, str):
            return other
        other_id = getattr(other, "id", None)
        if not isinstance(other_id, str) or not other_id:
            raise TypeError(f"diff() compares with a sandbox or a sandbox id, not {type(other).__name__}")
        return other_id
