"""Import Kubernetes admission policies and Kyverno CEL policies as Tollgate policies (pure; no I/O).

``tollgate serve``, ``test``, ``lint`` and ``audit`` accept, beside Tollgate's own kinds,
``admissionregistration.k8s.io`` v1/v1beta1 ValidatingAdmissionPolicy and MutatingAdmissionPolicy with
their bindings, and Kyverno's ``policies.kyverno.io`` v1/v1beta1 ValidatingPolicy and MutatingPolicy.
Each becomes a ``ClusterAdmissionPolicy`` object evaluated by the same engine with the same failure
semantics; what it cannot honour is a :class:`Problem` naming the source's field, carried by the object
so that it is not Ready (reason ``ImportError``) and answered per its ``failurePolicy``.

Modules: :mod:`.kinds` (what is imported), :mod:`.matching` (match rules and their intersection),
:mod:`.admission` (a Kubernetes policy and a binding), :mod:`.kyverno` (a Kyverno policy),
:mod:`.libraries` (CEL libraries Tollgate lacks, resource reads), :mod:`.catalog` (a set of objects),
:mod:`.events` (informer notifications → policy notifications), :mod:`.provenance` (names and the
annotations the policy object carries), :mod:`.imported` (the result types).
"""

from __future__ import annotations

from webhook.policy.imports.provenance import (
    IMPORT_ERROR_ANNOTATION,
    IMPORTED_FROM_ANNOTATION,
    import_error,
    imported_from,
    imported_name,
)

__all__ = ["IMPORTED_FROM_ANNOTATION", "IMPORT_ERROR_ANNOTATION", "import_error", "imported_from", "imported_name"]
