"""Checks and pieces shared by the converters: versions, known fields, actions, the Tollgate object (pure; no I/O)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from webhook.formats.imported import Imported, Problem, SourceRef
from webhook.formats.kinds import ImportKind
from webhook.policy.provenance import IMPORT_ERROR_ANNOTATION, IMPORTED_FROM_ANNOTATION
from webhook.policy.vocabulary import API_VERSION, Action, PolicyKind

__all__ = ["CAPS", "capped", "check_fields", "check_version", "internal_object", "name_of", "source_ref", "spec_of",
           "validation_actions"]

#: Report annotations Tollgate reads (``webhook.audit.evaluate``), carried over from a source object.
REPORT_ANNOTATIONS = ("policies.tollgate.dev/severity", "policies.tollgate.dev/category")


def name_of(obj: dict[str, Any]) -> str:
    """``metadata.name`` ('' when absent or not a string)."""
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def source_ref(kind: ImportKind, obj: dict[str, Any]) -> SourceRef:
    """The :class:`SourceRef` of a source object of ``kind``.

    A namespaced kind's object without ``metadata.namespace`` is in ``default``, where ``kubectl apply``
    puts it (a file read by ``tollgate test``); a cluster-scoped kind's namespace is ignored.
    """
    if not kind.namespaced:
        return SourceRef(kind.kind, name_of(obj))
    meta = obj.get("metadata")
    namespace = meta.get("namespace") if isinstance(meta, dict) else None
    return SourceRef(kind.kind, name_of(obj), namespace if isinstance(namespace, str) and namespace else "default")


def spec_of(obj: dict[str, Any]) -> dict[str, Any]:
    """``spec`` ({} when absent or not an object: the fields it lacks are reported as required)."""
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def check_version(kind: ImportKind, obj: dict[str, Any], source: SourceRef) -> list[Problem]:
    """A problem when ``obj``'s apiVersion is not one Tollgate imports (an older version has other fields)."""
    api_version = obj.get("apiVersion")
    if api_version in kind.api_versions():
        return []
    return [Problem(source, "apiVersion", f"{api_version} is not imported: Tollgate reads "
                                          f"{' and '.join(kind.api_versions())}")]


def check_fields(spec: dict[str, Any], known: Iterable[str], source: SourceRef) -> list[Problem]:
    """A problem for each field of ``spec`` Tollgate does not know (it could not honour it), as kubectl checks."""
    known = frozenset(known)
    return [Problem(source, f"spec.{field}", "unknown field: Tollgate cannot honour it")
            for field in spec if field not in known]


_ACTIONS = frozenset({Action.DENY, Action.WARN, Action.AUDIT})


def validation_actions(raw: Any, path: str, source: SourceRef, *, required: bool) -> tuple[list[str], list[Problem]]:
    """``validationActions`` as the API server validates them: a non-empty set of Deny, Warn, Audit; not Deny with Warn.

    Returns:
        The actions (``["Deny"]`` when absent and not required, or when malformed: an unreadable
        action never opens a policy), and the problems found.
    """
    if raw is None or raw == []:
        return ["Deny"], ([Problem(source, path, "required (a non-empty subset of Deny, Warn, Audit)")]
                          if required else [])
    if not isinstance(raw, list) or not all(isinstance(a, str) for a in raw):
        return ["Deny"], [Problem(source, path, "must be a list of Deny, Warn, Audit")]
    bad = sorted(set(raw) - _ACTIONS)
    if bad:
        return ["Deny"], [Problem(source, path, f"unsupported value(s) {bad}: must be among Audit, Deny, Warn")]
    if len(set(raw)) != len(raw):
        return ["Deny"], [Problem(source, path, "may not list an action twice")]
    if {"Deny", "Warn"} <= set(raw):
        return ["Deny"], [Problem(source, path, "Deny and Warn may not be used together")]
    return list(raw), []


def _annotations(obj: dict[str, Any] | None) -> dict[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    return annotations if isinstance(annotations, dict) else {}


def internal_object(name: str, spec: dict[str, Any], *, sources: Iterable[SourceRef], problems: Iterable[Problem],
                    carried: Iterable[dict[str, Any] | None] = (), extra_annotations: dict[str, str] | None = None,
                    generation: Any = None, namespace: str = "") -> dict[str, Any]:
    """The ClusterAdmissionPolicy object an imported policy is served as (an AdmissionPolicy when namespaced).

    Args:
        name: its name (:func:`~webhook.policy.provenance.imported_name`).
        spec: its spec.
        sources: the source objects (for :data:`IMPORTED_FROM_ANNOTATION`).
        problems: what it cannot honour (for :data:`IMPORT_ERROR_ANNOTATION`, ``; ``-joined).
        carried: source objects whose report annotations (severity, category) it keeps, later ones winning.
        extra_annotations: more annotations (a Kyverno policy's severity as Tollgate's).
        generation: the source policy's ``metadata.generation``.
        namespace: for a namespaced source (Kyverno's Namespaced* kinds), its namespace: the object is then an
            ``AdmissionPolicy`` of that namespace, which the engine confines to it (``policy/matching.py``,
            ``policy/engine/references.py``), as Kyverno confines a NamespacedValidatingPolicy.
    """
    annotations: dict[str, str] = {IMPORTED_FROM_ANNOTATION: ", ".join(str(s) for s in sources)}
    annotations.update(extra_annotations or {})
    for source in carried:
        annotations.update({k: v for k, v in _annotations(source).items() if k in REPORT_ANNOTATIONS
                            and isinstance(v, str)})
    text = "; ".join(str(p) for p in problems)
    if text:
        annotations[IMPORT_ERROR_ANNOTATION] = text
    meta: dict[str, Any] = {"name": name, "annotations": annotations}
    if isinstance(generation, int):
        meta["generation"] = generation
    if namespace:
        meta["namespace"] = namespace
    kind = PolicyKind.NAMESPACED if namespace else PolicyKind.CLUSTER
    return {"apiVersion": API_VERSION, "kind": str(kind), "metadata": meta, "spec": spec}


#: The most items a Tollgate policy's spec lists may hold: the ClusterAdmissionPolicy CRD's ``maxItems``
#: (``manifests/crds/``; a unit test keeps them equal). The API server refuses a Tollgate policy beyond
#: them, and so compiling one never takes longer than the largest policy a cluster accepts; an imported
#: policy has the same caps (a ValidatingAdmissionPolicy itself has none).
CAPS: dict[str, int] = {"validationActions": 2, "references": 16, "matchConditions": 64, "variables": 64,
                        "validations": 64, "auditAnnotations": 20, "mutations": 64}


def capped(imported: Imported) -> Imported:
    """``imported`` with a problem for each list of its spec longer than :data:`CAPS` allows (not Ready then).

    The problem names the source policy's field (``spec.validations``); the object carries it (its
    import error), so it is answered per its failurePolicy without compiling anything.
    """
    spec = imported.obj.get("spec")
    if not isinstance(spec, dict):
        return imported
    found = [Problem(imported.policy, f"spec.{field}", f"{len(spec[field])} items: more than the {cap} a Tollgate "
                                                         "policy may hold")
             for field, cap in CAPS.items() if isinstance(spec.get(field), list) and len(spec[field]) > cap]
    if not found:
        return imported
    problems = (*imported.problems, *found)
    meta = dict(imported.obj["metadata"])
    meta["annotations"] = {**meta.get("annotations", {}),
                           IMPORT_ERROR_ANNOTATION: "; ".join(str(p) for p in problems)}
    return dataclasses.replace(imported, obj={**imported.obj, "metadata": meta}, problems=problems)
