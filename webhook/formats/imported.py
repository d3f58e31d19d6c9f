"""What importing gives: the Tollgate policy object, its sources, its problems and notes (pure; no I/O).

A :class:`Problem` is something the policy cannot honour (it is then not Ready, and answered per
its ``failurePolicy`` when its match rules could be read); a note says how a field is honoured
when Tollgate's behaviour differs from the source engine's and the difference does not change a
decision the engine makes (e.g. ``reinvocationPolicy: IfNeeded``, run once).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ConversionError", "Imported", "Problem", "SourceRef"]

PathPart = str | int


@dataclass(frozen=True, slots=True, order=True)
class SourceRef:
    """One source object: its ``kind``, ``metadata.name`` and, for a namespaced kind, ``metadata.namespace``."""

    kind: str
    name: str
    namespace: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"


@dataclass(frozen=True, slots=True)
class Problem:
    """Something a source object asks that Tollgate cannot honour (or that is malformed).

    Attributes:
        source: the object.
        path: its field, as kubectl names it (``spec.paramKind``, ``spec.validations[0].expression``).
        message: what and why, one line.
        unsupported_library: the field's expression calls a library Tollgate lacks (its CEL compile errors
            about that library's names say nothing more, and ``tollgate lint`` leaves them out).
    """

    source: SourceRef
    path: str
    message: str
    unsupported_library: bool = False

    def __str__(self) -> str:
        return f"{self.source}: {self.path}: {self.message}" if self.path else f"{self.source}: {self.message}"


class ConversionError(ValueError):
    """A field that stops the conversion of the match rules (``path``: the source object's field)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


@dataclass(frozen=True, slots=True)
class Imported:
    """One Tollgate policy made from a Kubernetes policy and its binding, or from a Kyverno policy.

    Attributes:
        obj: the ``ClusterAdmissionPolicy`` object to serve (with :data:`IMPORT_ERROR_ANNOTATION
            <webhook.policy.provenance.IMPORT_ERROR_ANNOTATION>` when ``problems``).
        policy: the source policy (for a binding whose policy is missing: the policy it names).
        binding: the source binding, or None (Kyverno).
        problems: what keeps it from being honoured, in field order.
        notes: how fields are honoured differently (a :class:`Problem`'s shape: source, path, what).
        authored_conditions: how many of ``obj``'s matchConditions are the source's own (those after
            them were generated from the match rules).
        missing_policy: the binding names a policy that is not there (``policy`` is the name it gives).
        match_unreadable: its match rules could not be read (a malformed field, among ``problems``): ``obj``
            selects what could be read, every request when nothing could, answered per ``failurePolicy``; a
            watch keeps serving the source's last conversion whose match rules could be read instead
            (:class:`~webhook.formats.events.ImportEventHandler`), as a file that stops parsing keeps its last
            good objects.
        rebased: fields of ``obj``'s spec that sit elsewhere in the policy source: ``(field, source path,
            offset)``, entry ``i`` of the field being entry ``i - offset`` at the source path (a Gatekeeper
            template's ``spec.targets[0].code[0].source.validations``; entries below the offset were generated).
    """

    obj: dict[str, Any]
    policy: SourceRef
    binding: SourceRef | None = None
    problems: tuple[Problem, ...] = ()
    notes: tuple[Problem, ...] = ()
    authored_conditions: int = 0
    missing_policy: bool = False
    match_unreadable: bool = False
    rebased: tuple[tuple[str, tuple[PathPart, ...], int], ...] = ()

    @property
    def key(self) -> str:
        """The policy's key (see :mod:`webhook.policy.provenance`): its name, ``namespace/name`` when namespaced."""
        meta = self.obj["metadata"]
        namespace = meta.get("namespace")
        return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])

    @property
    def sources(self) -> tuple[SourceRef, ...]:
        """The source objects present: the policy (unless missing) and the binding."""
        found = () if self.missing_policy else (self.policy,)
        return found + ((self.binding,) if self.binding is not None else ())

    def origin(self, path: Sequence[PathPart]) -> tuple[SourceRef, tuple[PathPart, ...]]:
        """The source object and field a path of :attr:`obj` came from (for messages naming the author's line).

        Expressions keep their paths (``spec.validations[0].expression`` is the source's own);
        ``match`` comes from the policy's ``matchConstraints``; ``paramRef`` and
        ``validationActions`` from the binding when there is one.
        """
        path = tuple(path)
        head = path[1] if len(path) > 1 and path[0] == "spec" else None
        if self.binding is not None and (self.missing_policy or head in _FROM_BINDING):
            return self.binding, path if head in _FROM_BINDING else ()
        for field, at, offset in self.rebased:
            if head == field and len(path) > 2 and isinstance(path[2], int) and path[2] >= offset:
                return self.policy, (*at, path[2] - offset, *path[3:])
        if head in _KEPT:
            generated = (head == "matchConditions" and len(path) > 2 and isinstance(path[2], int)
                         and path[2] >= self.authored_conditions)
            return self.policy, ("spec", "matchConstraints") if generated else path
        if head in ("match", "autogen"):
            return self.policy, ("spec", "matchConstraints")
        return self.policy, ("spec",) if head is not None else ()


#: Fields of a Tollgate spec that a binding supplies (a Kyverno policy has no binding: its own).
_FROM_BINDING = frozenset({"paramRef", "validationActions"})
#: Fields whose paths are the source policy's own.
_KEPT = frozenset({"validations", "variables", "auditAnnotations", "mutations", "failurePolicy", "matchConditions",
                   "validationActions"})
