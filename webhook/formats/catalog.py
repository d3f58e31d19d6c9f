"""A set of source objects → the Tollgate policies they amount to (pure; no I/O).

Pairs each binding with the policy its ``spec.policyName`` names (of the kind it binds) and converts
every pair (:func:`~webhook.formats.kubernetes.convert.convert_binding`) and every Kyverno policy
(:func:`~webhook.formats.kyverno.convert.convert_kyverno`), and each Gatekeeper constraint with the
ConstraintTemplate its kind names (:func:`~webhook.formats.gatekeeper.convert.convert_constraint`). As on
the API server, a Kubernetes policy without a binding enforces nothing: it yields no policy, only a note
(so does a ConstraintTemplate without constraints, as in Gatekeeper). Every conversion has a Tollgate
policy's caps (:func:`~webhook.formats.common.capped`: 64 validations, ...).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from webhook.formats.common import capped, name_of, source_ref, spec_of
from webhook.formats.gatekeeper.convert import convert_constraint
from webhook.formats.imported import Imported, Problem, SourceRef
from webhook.formats.kinds import (
    CONSTRAINT_GROUP,
    GATEKEEPER_TEMPLATE,
    IMPORT_KINDS,
    KYVERNO_GROUP,
    ImportKind,
    constraint_import_kind,
    import_kind_of,
)
from webhook.formats.kubernetes.convert import convert_binding
from webhook.formats.kyverno.convert import convert_kyverno
from webhook.formats.matching import EVERYTHING, intersect

__all__ = ["NO_CONSTRAINT", "UNBOUND", "Catalog", "ImportResult", "import_policies", "unbound_note"]

_KINDS = {k.kind: k for k in IMPORT_KINDS}
#: What a Kubernetes policy without a binding does.
UNBOUND = "no binding names it, so it selects nothing (as on the API server)"
#: What a ConstraintTemplate without constraints does.
NO_CONSTRAINT = "no constraint of its kind, so it selects nothing (as in Gatekeeper)"


def _kind(ref: SourceRef) -> ImportKind:
    """The importable kind of a held object (a Gatekeeper constraint kind is any kind not of a fixed name)."""
    return _KINDS.get(ref.kind) or constraint_import_kind(ref.kind)


@dataclass(slots=True)
class ImportResult:
    """What a set of source objects gives.

    Attributes:
        policies: one :class:`Imported` per binding and per Kyverno policy, in (kind, name) order.
        problems: objects that cannot be imported at all (no ``metadata.name``).
        unbound: Kubernetes policies no binding names (they enforce nothing, as on the API server).
    """

    policies: list[Imported] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    unbound: list[SourceRef] = field(default_factory=list)

    @property
    def notes(self) -> list[str]:
        """One line per unbound policy."""
        return [f"{ref}: {unbound_note(ref)}" for ref in self.unbound]


def unbound_note(ref: SourceRef) -> str:
    """Why an unbound policy (:attr:`ImportResult.unbound`) selects nothing."""
    return NO_CONSTRAINT if ref.kind == GATEKEEPER_TEMPLATE.kind else UNBOUND


class Catalog:
    """The source objects by kind and name, converted on demand (a watch's handler keeps one up to date).

    Not thread-safe; one writer.
    """

    def __init__(self) -> None:
        self._objects: dict[SourceRef, dict[str, Any]] = {}

    def put(self, obj: dict[str, Any]) -> SourceRef | None:
        """Add or replace a source object; returns its reference (None: not importable or nameless)."""
        kind = import_kind_of(obj)
        if kind is None or not name_of(obj):
            return None
        ref = source_ref(kind, obj)
        self._objects[ref] = obj
        return ref

    def remove(self, obj: dict[str, Any]) -> SourceRef | None:
        """Forget a source object (by its kind and name); returns its reference, or None."""
        kind = import_kind_of(obj)
        if kind is None or not name_of(obj):
            return None
        ref = source_ref(kind, obj)
        self._objects.pop(ref, None)
        return ref

    def __len__(self) -> int:
        return len(self._objects)

    def affected(self, ref: SourceRef) -> set[SourceRef]:
        """The objects whose conversion depends on ``ref``: itself, and a policy's bindings (by ``policyName``)."""
        out = {ref}
        for other in self._objects:
            kind = _kind(other)
            if kind.binds != ref.kind:
                continue
            if (other.kind.lower() == ref.name if kind.group == CONSTRAINT_GROUP
                    else spec_of(self._objects[other]).get("policyName") == ref.name):
                out.add(other)
        return out

    def convert(self, ref: SourceRef) -> Imported | None:
        """The Tollgate policy ``ref`` gives: a binding's (with its policy), a Kyverno policy's.

        Returns:
            The conversion; None for a Kubernetes policy (its bindings give policies) or an object no
            longer present.
        """
        obj = self._objects.get(ref)
        if obj is None:
            return None
        kind = _kind(ref)
        if kind.group == CONSTRAINT_GROUP:
            return capped(convert_constraint(kind, obj, self._objects.get(SourceRef(GATEKEEPER_TEMPLATE.kind,
                                                                                    ref.kind.lower()))))
        if kind.binds is not None:
            policy_kind = _KINDS[kind.binds]
            policy_name = spec_of(obj).get("policyName")
            policy = self._objects.get(SourceRef(policy_kind.kind, policy_name)) if isinstance(policy_name, str) \
                else None
            return capped(convert_binding(kind, obj, policy_kind, policy))
        if kind.group == KYVERNO_GROUP:
            return capped(_never_selecting_nothing(convert_kyverno(kind, obj)))
        return None

    def unbound(self) -> list[SourceRef]:
        """Kubernetes policies no binding names (they enforce nothing)."""
        bound = {(_kind(r).binds, r.kind.lower() if _kind(r).group == CONSTRAINT_GROUP
                  else spec_of(o).get("policyName")) for r, o in self._objects.items() if _kind(r).binds is not None}
        return sorted(r for r in self._objects
                      if _is_kubernetes_policy(_kind(r)) and (r.kind, r.name) not in bound)

    def refs(self) -> list[SourceRef]:
        """Every object held, in (kind, name) order."""
        return sorted(self._objects)


def _never_selecting_nothing(imported: Imported) -> Imported:
    """A conversion with problems and no ``match`` (its match rules could not be read) selects every request.

    So the requests it might select are answered per its failurePolicy instead of none being selected
    (the Kubernetes converter does this itself, narrowed to what its readable side selects).
    """
    spec = imported.obj.get("spec")
    if not imported.problems or imported.missing_policy or not isinstance(spec, dict) or "match" in spec:
        return imported
    everything = intersect(EVERYTHING)
    assert everything is not None  # one MatchResources always intersects with itself
    obj = {**imported.obj, "spec": {**spec, "match": everything.match}}
    return dataclasses.replace(imported, obj=obj, match_unreadable=True)


def _is_kubernetes_policy(kind: ImportKind) -> bool:
    return kind.binds is None and (kind == GATEKEEPER_TEMPLATE or any(k.binds == kind.kind for k in IMPORT_KINDS))


def import_policies(objects: Iterable[dict[str, Any]]) -> ImportResult:
    """Every Tollgate policy a set of source objects amounts to.

    Args:
        objects: raw objects; those of kinds Tollgate does not import are ignored (callers pick them).

    Returns:
        The :class:`ImportResult`. A second object of the same kind and name replaces the first (callers
        that read files report duplicates themselves, with their locations).
    """
    catalog = Catalog()
    result = ImportResult()
    for obj in objects:
        kind = import_kind_of(obj)
        if kind is None:
            continue
        if catalog.put(obj) is None:
            result.problems.append(Problem(SourceRef(kind.kind, "<unnamed>"), "metadata.name", "required"))
    for ref in catalog.refs():
        imported = catalog.convert(ref)
        if imported is not None:
            result.policies.append(imported)
    result.unbound = catalog.unbound()
    return result
