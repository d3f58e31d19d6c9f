"""Kyverno's CEL PolicyException (``policies.kyverno.io``) as a Tollgate exception (pure; no I/O).

Kyverno's CEL policies are exempted by a namespaced ``PolicyException`` of ``policies.kyverno.io``
(kyverno/kyverno ``api/policies.kyverno.io/v1alpha1/policy_exception.go``, aliased by ``v1beta1`` and
restated by ``v1``): ``spec.policyRefs[] {name, kind}`` names the policies, ``spec.matchConditions``
(``admissionregistration/v1`` MatchConditions, CEL) select the requests, and ``v1`` adds
``spec.expiresAt`` (RFC 3339) and ``spec.reportResult`` (``skip``/``pass``).

:func:`to_tollgate` rewrites one into the Tollgate ``PolicyException`` of the same namespace and name,
and :func:`compile_kyverno_exception` compiles that with :func:`webhook.policy.exceptions.compile_exception`,
so an imported exception means exactly what Tollgate's own does (one home of the semantics):

* ``policyRefs[i]`` of kind ``ValidatingPolicy`` names the imported policy ``ValidatingPolicy/<name>``;
  of kind ``NamespacedValidatingPolicy``, the exception's own namespace's twin
  ``<namespace>/NamespacedValidatingPolicy/<name>`` (:func:`webhook.policy.provenance.imported_name`).
  Other kinds (``MutatingPolicy``, ``ImageValidatingPolicy``, ...) are refused at that path: Tollgate
  exempts validation results only, and an exception it cannot honour must not look Ready.
* It exempts only objects in its own namespace, as Tollgate's ``PolicyException``. Kyverno applies a
  ``PolicyException`` to resources of every namespace (its ``--exceptionNamespace`` flag only restricts
  where exceptions may be created: kyverno.io/docs/exceptions); Tollgate confines it, so that the right
  to create one in a namespace never reaches another tenant's objects.
* ``expiresAt`` is compared with each decision's clock (admission, background audit and the CLI alike;
  Kyverno's background scan and CLI ignore it: kyverno#17473).
* Kyverno's exception has no ``reason``: results say it was imported from Kyverno, and name it.
* ``spec.images`` and ``spec.allowedValues`` (fine-grained exceptions, read by the policy's own CEL as
  ``exceptions.allowedImages``/``allowedValues``) are refused: Tollgate's policies have no
  ``exceptions`` variable, and reading such an exception as a whole-object exemption would fail open.
* ``reportResult: pass`` is accepted; Tollgate reports every exempted result as ``skip`` naming the exception.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from webhook.formats.kinds import KYVERNO_GROUP
from webhook.policy.exceptions import (
    ExceptionCompileResult,
    ExceptionKind,
    ExceptionSpecError,
    compile_exception,
)
from webhook.policy.provenance import imported_name
from webhook.policy.status import ready_condition
from webhook.policy.vocabulary import policy_key

__all__ = ["KYVERNO_EXCEPTION_KIND", "KYVERNO_EXCEPTION_LABEL", "KYVERNO_EXCEPTION_VERSIONS", "compile_any_exception",
           "compile_kyverno_exception", "is_kyverno_exception", "policy_label", "to_tollgate"]

#: The kind, and the versions of ``policies.kyverno.io`` Tollgate reads (preferred first).
KYVERNO_EXCEPTION_KIND = "PolicyException"
KYVERNO_EXCEPTION_VERSIONS = ("v1", "v1beta1", "v1alpha1")
#: The ``kind`` a compiled Kyverno exception carries: results name it ``PolicyException.policies.kyverno.io ns/name``.
KYVERNO_EXCEPTION_LABEL = f"{KYVERNO_EXCEPTION_KIND}.{KYVERNO_GROUP}"
#: The policy kinds a Kyverno exception may name (their results are validation results).
_EXEMPTABLE = {"ValidatingPolicy": False, "NamespacedValidatingPolicy": True}
#: Fields of the spec Tollgate reads; every other one is refused at its path.
_KNOWN = {"policyRefs", "matchConditions", "expiresAt", "reportResult"}
_REFUSED = {
    "images": "fine-grained exceptions (exceptions.allowedImages in the policy's CEL) are not supported: "
              "Tollgate's policies have no exceptions variable",
    "allowedValues": "fine-grained exceptions (exceptions.allowedValues in the policy's CEL) are not "
                     "supported: Tollgate's policies have no exceptions variable",
}
_VERSION = re.compile(r"^policies\.kyverno\.io/(v1|v1beta1|v1alpha1)$")


def is_kyverno_exception(obj: Any) -> bool:
    """Whether a raw object is Kyverno's CEL ``PolicyException`` (``policies.kyverno.io``, any version)."""
    if not isinstance(obj, dict) or obj.get("kind") != KYVERNO_EXCEPTION_KIND:
        return False
    api_version = obj.get("apiVersion")
    return isinstance(api_version, str) and api_version.rpartition("/")[0] == KYVERNO_GROUP


def policy_label(ref: Any, namespace: str, index: int) -> str:
    """The Tollgate label of the imported policy ``spec.policyRefs[index]`` names.

    Args:
        ref: the ``{name, kind}`` entry.
        namespace: the exception's namespace (a ``NamespacedValidatingPolicy`` is looked up there).
        index: its position, for the spec path.

    Raises:
        ExceptionSpecError: no name, no kind, or a kind whose results Tollgate cannot exempt.
    """
    where = f"spec.policyRefs[{index}]"
    if not isinstance(ref, dict):
        raise ExceptionSpecError(where, "must be an object {name, kind}")
    name, kind = ref.get("name"), ref.get("kind")
    if not isinstance(name, str) or not name.strip():
        raise ExceptionSpecError(f"{where}.name", "must specify policy name")
    if not isinstance(kind, str) or not kind.strip():
        raise ExceptionSpecError(f"{where}.kind", "must specify policy kind")
    if kind not in _EXEMPTABLE:
        raise ExceptionSpecError(f"{where}.kind", f"{kind}: Tollgate exempts only {' and '.join(_EXEMPTABLE)} "
                                                  "results (an exception it cannot honour exempts nothing)")
    label = imported_name(kind, name.strip())
    return policy_key(namespace, label) if _EXEMPTABLE[kind] else label


def to_tollgate(obj: dict[str, Any]) -> dict[str, Any]:
    """The Tollgate ``PolicyException`` a Kyverno CEL ``PolicyException`` means (see the module docstring).

    Args:
        obj: a ``policies.kyverno.io`` ``PolicyException`` as a raw dict.

    Returns:
        A ``tollgate.dev/v1alpha1`` ``PolicyException`` of the same namespace, name and generation.

    Raises:
        ExceptionSpecError: an unread ``apiVersion``, no namespace, no ``policyRefs``, a ref Tollgate
            cannot honour, a refused or unknown field (each at its spec path).
    """
    api_version = obj.get("apiVersion")
    if not isinstance(api_version, str) or not _VERSION.match(api_version):
        read = ", ".join(f"{KYVERNO_GROUP}/{v}" for v in KYVERNO_EXCEPTION_VERSIONS)
        raise ExceptionSpecError("apiVersion", f"{api_version!r}: Tollgate reads Kyverno's PolicyException at {read}")
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise ExceptionSpecError("metadata.name", "required")
    namespace = meta.get("namespace")
    if not isinstance(namespace, str) or not namespace:
        raise ExceptionSpecError("metadata.namespace", "required: a Kyverno PolicyException is namespaced "
                                                       "(it exempts objects of its own namespace only)")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise ExceptionSpecError("spec", "required")
    for key in spec:
        if key in _REFUSED:
            raise ExceptionSpecError(f"spec.{key}", _REFUSED[key])
        if key not in _KNOWN:
            raise ExceptionSpecError(f"spec.{key}", "unknown field")
    refs = spec.get("policyRefs")
    if not isinstance(refs, list) or not refs:
        raise ExceptionSpecError("spec.policyRefs", "must specify at least one policy ref")
    report = spec.get("reportResult", "skip")
    if report not in ("skip", "pass"):
        raise ExceptionSpecError("spec.reportResult", f"must be skip or pass, got {report!r}")
    tollgate_spec: dict[str, Any] = {
        "policies": [{"name": policy_label(ref, namespace, i)} for i, ref in enumerate(refs)],
        "reason": "imported from Kyverno (its PolicyException has no reason field)",
    }
    if spec.get("matchConditions") is not None:
        tollgate_spec["matchConditions"] = spec["matchConditions"]
    if spec.get("expiresAt") is not None:
        tollgate_spec["expiresAt"] = spec["expiresAt"]
    tollgate_meta = {"name": meta["name"], "namespace": namespace}
    if isinstance(meta.get("generation"), int):
        tollgate_meta["generation"] = meta["generation"]
    return {"apiVersion": "tollgate.dev/v1alpha1", "kind": ExceptionKind.NAMESPACED.value,
            "metadata": tollgate_meta, "spec": tollgate_spec}


def compile_kyverno_exception(obj: dict[str, Any]) -> ExceptionCompileResult:
    """Compile a Kyverno CEL ``PolicyException``; never raises for bad input.

    Returns:
        As :func:`~webhook.policy.exceptions.compile_exception`: the exception (kind
        :data:`KYVERNO_EXCEPTION_LABEL`, ``source`` the Kyverno object, so an evaluation worker compiles it
        again through here) and ``Ready=True``; or none and ``Ready=False`` with the spec path (of the
        Kyverno object: ``spec.policyRefs[0].kind``, ``spec.matchConditions[0].expression``).
    """
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    generation = meta.get("generation") if isinstance(meta, dict) else None
    try:
        converted = to_tollgate(obj)
    except ExceptionSpecError as e:
        return ExceptionCompileResult(None, ready_condition(False, "InvalidSpec", str(e), generation))
    result = compile_exception(converted)
    if result.exception is None:
        return result  # matchConditions and expiresAt keep their Kyverno spec paths
    exception = replace(result.exception, kind=KYVERNO_EXCEPTION_LABEL, source=obj)
    return ExceptionCompileResult(exception, result.condition, result.policies)


def compile_any_exception(obj: dict[str, Any]) -> ExceptionCompileResult:
    """Compile an exception of any source; never raises for bad input.

    Kyverno's CEL ``PolicyException`` by :func:`compile_kyverno_exception`, Tollgate's kinds by
    :func:`~webhook.policy.exceptions.compile_exception`: what an exception cache and an evaluation
    worker fed both sources call.
    """
    return compile_kyverno_exception(obj) if is_kyverno_exception(obj) else compile_exception(obj)
