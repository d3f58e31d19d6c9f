"""The resources Tollgate caches, and the one static kind ↔ resource table for offline use.

In a cluster the API server's discovery is the authority; offline (``--local``,
``tollgate test``) and for Tollgate's own informers this table is. Identities
come from :mod:`webhook.policy.vocabulary`.
"""

from __future__ import annotations

from dataclasses import dataclass

from webhook.policy.vocabulary import GROUP, VERSION, PolicyKind


@dataclass(frozen=True, slots=True)
class Resource:
    """A Kubernetes resource: its GroupVersionResource, kind and scope.

    Attributes:
        group: API group (``""`` for core).
        version: API version.
        plural: resource name (``configmaps``).
        kind: the kind of its objects (``ConfigMap``).
        namespaced: whether objects live in a namespace.
    """

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def informer_resource(self) -> str:
        """``plural`` for the core group, else ``plural.group`` (kubectl's resource.group form)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def api_version(self) -> str:
        """``version`` for the core group, else ``group/version`` (an object's ``apiVersion``)."""
        return f"{self.group}/{self.version}" if self.group else self.version


NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap", namespaced=True)
CLUSTER_POLICIES = Resource(GROUP, VERSION, "clusteradmissionpolicies", PolicyKind.CLUSTER, namespaced=False)
NAMESPACED_POLICIES = Resource(GROUP, VERSION, "admissionpolicies", PolicyKind.NAMESPACED, namespaced=True)
#: PolicyException (namespaced) and ClusterPolicyException (:mod:`webhook.policy.exceptions`).
POLICY_EXCEPTIONS = Resource(GROUP, VERSION, "policyexceptions", "PolicyException", namespaced=True)
CLUSTER_POLICY_EXCEPTIONS = Resource(GROUP, VERSION, "clusterpolicyexceptions", "ClusterPolicyException",
                                     namespaced=False)

#: Built-in kinds offline tools need to build AdmissionRequests for, by kind.
BUILTIN: dict[str, Resource] = {r.kind: r for r in (
    NAMESPACES, CONFIGMAPS, CLUSTER_POLICIES, NAMESPACED_POLICIES, POLICY_EXCEPTIONS, CLUSTER_POLICY_EXCEPTIONS,
    Resource("", "v1", "pods", "Pod", namespaced=True),
    Resource("", "v1", "services", "Service", namespaced=True),
    Resource("", "v1", "secrets", "Secret", namespaced=True),
    Resource("", "v1", "serviceaccounts", "ServiceAccount", namespaced=True),
    Resource("", "v1", "replicationcontrollers", "ReplicationController", namespaced=True),
    Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", namespaced=True),
    Resource("", "v1", "nodes", "Node", namespaced=False),
    Resource("apps", "v1", "deployments", "Deployment", namespaced=True),
    Resource("apps", "v1", "statefulsets", "StatefulSet", namespaced=True),
    Resource("apps", "v1", "daemonsets", "DaemonSet", namespaced=True),
    Resource("apps", "v1", "replicasets", "ReplicaSet", namespaced=True),
    Resource("batch", "v1", "jobs", "Job", namespaced=True),
    Resource("batch", "v1", "cronjobs", "CronJob", namespaced=True),
    Resource("networking.k8s.io", "v1", "ingresses", "Ingress", namespaced=True),
    Resource("rbac.authorization.k8s.io", "v1", "roles", "Role", namespaced=True),
    Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", namespaced=True),
    Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False),
    Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False),
)}


#: Built-in cluster-scoped kinds not in :data:`BUILTIN` (requests for them carry no namespace).
CLUSTER_SCOPED_KINDS = frozenset({
    "Namespace", "Node", "PersistentVolume", "ClusterRole", "ClusterRoleBinding", "StorageClass",
    "CustomResourceDefinition", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "PriorityClass", "IngressClass",
    "RuntimeClass", "APIService", "CertificateSigningRequest", "ClusterAdmissionPolicy", "CSIDriver", "CSINode",
    "ClusterPolicyReport", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "VolumeAttachment",
    "ClusterPolicyException",
})
_IRREGULAR_PLURALS = {"Endpoints": "endpoints"}


def plural(kind: str) -> str:
    """The resource name of a kind, by the API machinery's English rules.

    ``Pod`` → ``pods``, ``Ingress`` → ``ingresses``, ``NetworkPolicy`` → ``networkpolicies``
    (k8s.io/apimachinery ``meta.UnsafeGuessKindToResource``).
    """
    if kind in _IRREGULAR_PLURALS:
        return _IRREGULAR_PLURALS[kind]
    low = kind.lower()
    if low.endswith("s"):
        return low + "es"
    if low.endswith("y"):
        return low[:-1] + "ies"
    return low + "s"


def resource_for_kind(kind: str, api_version: str = "") -> Resource:
    """The resource of ``kind`` from the static table, or the API machinery's guess for other kinds.

    A guess takes the group and version from ``api_version``, the resource name
    from :func:`plural`, and the scope from :data:`CLUSTER_SCOPED_KINDS`
    (namespaced otherwise), as kubectl's RESTMapper falls back to.
    """
    known = BUILTIN.get(kind)
    if known is not None:
        return known
    group, _, version = api_version.rpartition("/")
    return Resource(group, version, plural(kind), kind, namespaced=kind not in CLUSTER_SCOPED_KINDS)
