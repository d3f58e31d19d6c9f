"""The kinds Tollgate imports: admission policies and bindings, Kyverno's and Gatekeeper's policies (pure; no I/O).

Kubernetes' admission policies and bindings, Kyverno's CEL policies, Gatekeeper's ConstraintTemplates
and Constraints.

One :class:`ImportKind` per kind, with the versions Tollgate reads (preferred first: an informer
watches the first one the API server serves) and, for a binding, the kind of policy it binds. Every
importable version of a kind has the same fields (``admissionregistration.k8s.io`` v1 and v1beta1;
Kyverno's ``policies.kyverno.io`` v1 aliases v1beta1's types, and v1alpha1's spec has the same fields:
kyverno/kyverno ``config/crds/policies.kyverno.io/policies.kyverno.io_validatingpolicies.yaml`` and
``..._mutatingpolicies.yaml`` give the three versions one schema, as since Kyverno 1.14 released v1alpha1).

Kyverno's namespaced twins (``NamespacedValidatingPolicy``, ``NamespacedMutatingPolicy``) are the
same specs confined to their namespace, as a Tollgate ``AdmissionPolicy`` is. Kyverno's CRDs serve them
at v1 and v1beta1 (v1alpha1 only briefly, between kyverno/kyverno fdb829364a and 2f6f5457f5); Tollgate
reads v1alpha1 too, with the same fields.

Kyverno's other ``policies.kyverno.io`` kinds (GeneratingPolicy, DeletingPolicy, ImageValidatingPolicy
and their namespaced twins) are out of scope: :data:`REFUSED_KINDS` names them so that every reader
refuses them loudly (``tollgate lint`` reports a problem, ``tollgate test`` a warning) instead of ignoring
them; ``serve --import kyverno`` does not watch them (Kyverno enforces them).

Gatekeeper's constraint kinds are dynamic: each ConstraintTemplate defines one
(``spec.crd.spec.names.kind``) in ``constraints.gatekeeper.sh``, and :func:`import_kind_of` gives any kind of that
group (:func:`constraint_import_kind`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "ADMISSION_GROUP",
    "CONSTRAINT_GROUP",
    "GATEKEEPER_TEMPLATE",
    "IMPORT_EXCEPTION_KINDS",
    "IMPORT_KINDS",
    "IMPORT_SOURCES",
    "KYVERNO_GROUP",
    "KYVERNO_MUTATING_POLICY",
    "KYVERNO_NAMESPACED_MUTATING_POLICY",
    "KYVERNO_NAMESPACED_VALIDATING_POLICY",
    "KYVERNO_POLICY_EXCEPTION",
    "KYVERNO_VALIDATING_POLICY",
    "MUTATING_ADMISSION_POLICY",
    "MUTATING_ADMISSION_POLICY_BINDING",
    "REFUSED_KINDS",
    "TEMPLATE_GROUP",
    "VALIDATING_ADMISSION_POLICY",
    "VALIDATING_ADMISSION_POLICY_BINDING",
    "ImportKind",
    "constraint_import_kind",
    "import_kind_of",
    "refused_kind_of",
]

ADMISSION_GROUP = "admissionregistration.k8s.io"
KYVERNO_GROUP = "policies.kyverno.io"
TEMPLATE_GROUP = "templates.gatekeeper.sh"
CONSTRAINT_GROUP = "constraints.gatekeeper.sh"


@dataclass(frozen=True, slots=True)
class ImportKind:
    """One importable kind.

    Attributes:
        group: its API group.
        kind: its ``kind``.
        plural: its resource name.
        versions: the versions Tollgate imports, preferred first.
        binds: for a binding kind, the kind of the policy its ``spec.policyName`` names (a Gatekeeper
            constraint: ``ConstraintTemplate``, named by the constraint's kind in lower case); else None.
        mutating: whether its policies mutate (MutatingAdmissionPolicy, Kyverno MutatingPolicy).
        namespaced: whether its objects live in a namespace (Kyverno's Namespaced* kinds): the policy it
            gives is an ``AdmissionPolicy`` of that namespace, confined to it.
    """

    group: str
    kind: str
    plural: str
    versions: tuple[str, ...]
    binds: str | None = None
    mutating: bool = False
    namespaced: bool = False

    @property
    def is_binding(self) -> bool:
        """Whether it is a binding (``...Binding``), which names its policy."""
        return self.binds is not None

    def api_versions(self) -> tuple[str, ...]:
        """``group/version`` of every importable version, preferred first."""
        return tuple(f"{self.group}/{v}" for v in self.versions)


_ADMISSION_VERSIONS = ("v1", "v1beta1")
VALIDATING_ADMISSION_POLICY = ImportKind(ADMISSION_GROUP, "ValidatingAdmissionPolicy", "validatingadmissionpolicies",
                                         _ADMISSION_VERSIONS)
VALIDATING_ADMISSION_POLICY_BINDING = ImportKind(
    ADMISSION_GROUP, "ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings", _ADMISSION_VERSIONS,
    binds="ValidatingAdmissionPolicy")
MUTATING_ADMISSION_POLICY = ImportKind(ADMISSION_GROUP, "MutatingAdmissionPolicy", "mutatingadmissionpolicies",
                                       _ADMISSION_VERSIONS, mutating=True)
MUTATING_ADMISSION_POLICY_BINDING = ImportKind(
    ADMISSION_GROUP, "MutatingAdmissionPolicyBinding", "mutatingadmissionpolicybindings", _ADMISSION_VERSIONS,
    binds="MutatingAdmissionPolicy", mutating=True)
_KYVERNO_VERSIONS = ("v1", "v1beta1", "v1alpha1")
KYVERNO_VALIDATING_POLICY = ImportKind(KYVERNO_GROUP, "ValidatingPolicy", "validatingpolicies", _KYVERNO_VERSIONS)
KYVERNO_MUTATING_POLICY = ImportKind(KYVERNO_GROUP, "MutatingPolicy", "mutatingpolicies", _KYVERNO_VERSIONS,
                                     mutating=True)
KYVERNO_NAMESPACED_VALIDATING_POLICY = ImportKind(KYVERNO_GROUP, "NamespacedValidatingPolicy",
                                                  "namespacedvalidatingpolicies", _KYVERNO_VERSIONS, namespaced=True)
KYVERNO_NAMESPACED_MUTATING_POLICY = ImportKind(KYVERNO_GROUP, "NamespacedMutatingPolicy",
                                                "namespacedmutatingpolicies", _KYVERNO_VERSIONS, mutating=True,
                                                namespaced=True)
GATEKEEPER_TEMPLATE = ImportKind(TEMPLATE_GROUP, "ConstraintTemplate", "constrainttemplates", ("v1", "v1beta1"))
#: The versions of a constraint kind Gatekeeper's controller serves (the same schema).
CONSTRAINT_VERSIONS = ("v1beta1", "v1alpha1")

#: Kyverno's CEL PolicyException (namespaced): not a policy, so not among :data:`IMPORT_KINDS` (nothing converts
#: it into a policy); ``serve --import kyverno`` watches it too and hands it to the exception cache
#: (:mod:`webhook.formats.kyverno.exceptions` compiles it).
KYVERNO_POLICY_EXCEPTION = ImportKind(KYVERNO_GROUP, "PolicyException", "policyexceptions", _KYVERNO_VERSIONS,
                                      namespaced=True)
#: The imported exception kinds.
IMPORT_EXCEPTION_KINDS = (KYVERNO_POLICY_EXCEPTION,)

#: Every importable kind of fixed name (Gatekeeper's constraint kinds are dynamic: :func:`constraint_import_kind`).
IMPORT_KINDS = (VALIDATING_ADMISSION_POLICY, VALIDATING_ADMISSION_POLICY_BINDING, MUTATING_ADMISSION_POLICY,
                MUTATING_ADMISSION_POLICY_BINDING, KYVERNO_VALIDATING_POLICY, KYVERNO_MUTATING_POLICY,
                KYVERNO_NAMESPACED_VALIDATING_POLICY, KYVERNO_NAMESPACED_MUTATING_POLICY,
                GATEKEEPER_TEMPLATE)
_BY_GROUP_KIND = {(k.group, k.kind): k for k in IMPORT_KINDS}
#: ``tollgate serve --import`` names → API group: which owner's policies a cluster's Tollgate enforces too.
#: Off by default, because their owner enforces them already: the API server its admission policies (its
#: ValidatingAdmissionPolicy/MutatingAdmissionPolicy plugins run wherever it serves the kinds), Kyverno its
#: own; a second enforcement doubles every warning and audit annotation and applies a JSONPatch ``add`` twice.
#: Gatekeeper's are its ConstraintTemplates and, through them, their constraints.
IMPORT_SOURCES = {"admission": ADMISSION_GROUP, "kyverno": KYVERNO_GROUP, "gatekeeper": TEMPLATE_GROUP}


def constraint_import_kind(kind: str) -> ImportKind:
    """The importable kind of a Gatekeeper constraint of ``kind`` (its CRD's plural is the lower-case kind).

    Gatekeeper's controller creates one CRD per ConstraintTemplate, ``<kind lower>.constraints.gatekeeper.sh``
    (``k8srequiredlabels.constraints.gatekeeper.sh`` for ``K8sRequiredLabels``), cluster-scoped.
    """
    return ImportKind(CONSTRAINT_GROUP, kind, kind.lower(), CONSTRAINT_VERSIONS, binds=GATEKEEPER_TEMPLATE.kind)


def import_kind_of(obj: Any) -> ImportKind | None:
    """The importable kind of a raw object (by ``kind`` and the group of ``apiVersion``, any version), or None.

    The version is not checked here: an object of an importable kind in a version Tollgate does not read
    is imported with a problem naming its ``apiVersion``, never ignored.
    """
    if not isinstance(obj, dict):
        return None
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    if not isinstance(kind, str) or not isinstance(api_version, str):
        return None
    group = api_version.rpartition("/")[0]
    if group == CONSTRAINT_GROUP and kind:
        return constraint_import_kind(kind)
    return _BY_GROUP_KIND.get((group, kind))


#: Kinds of an imported group Tollgate refuses (group, kind) → why; read from files, each is a problem.
REFUSED_KINDS = {
    (KYVERNO_GROUP, kind): reason
    for kinds, reason in (
        (("GeneratingPolicy", "NamespacedGeneratingPolicy"),
         "generates or synchronises other objects, which Tollgate never does (it answers admission requests)"),
        (("DeletingPolicy", "NamespacedDeletingPolicy"),
         "deletes stored objects on a schedule, which Tollgate never does (it answers admission requests)"),
        (("ImageValidatingPolicy", "NamespacedImageValidatingPolicy"),
         "verifies image signatures and attestations in registries, which needs the network Tollgate's "
         "decisions never use"),
    )
    for kind in kinds
}


def refused_kind_of(obj: Any) -> str | None:
    """Why Tollgate refuses a raw object's kind (a Kyverno kind out of scope, any version), or None."""
    if not isinstance(obj, dict):
        return None
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    if not isinstance(kind, str) or not isinstance(api_version, str):
        return None
    return REFUSED_KINDS.get((api_version.rpartition("/")[0], kind))
