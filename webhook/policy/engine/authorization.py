"""One policy's ``authorizer``: RBAC decisions from the informer caches of the RBAC objects, never the API server.

:class:`PolicyAuthorizer` answers the CEL library's ``check`` (:mod:`webhook.policy.cel.authz`) with
:func:`webhook.policy.rbac.authorize` over :data:`~webhook.policy.model.RBAC_REFERENCES`, which the server caches
for every policy that reads ``authorizer`` (a policy whose RBAC caches have not synced is answered per its
``onUnsynced`` before any check runs). An AdmissionPolicy (a tenant's) may ask only about its own namespace, as
its ``paramRef`` and ``spec.references`` may read only there: a check of another namespace, of a cluster-scoped
resource or of a non-resource path is an errored Decision, so RBAC elsewhere in the cluster cannot be probed. That
is what a namespace's admins may already ask the API server (a ``LocalSubjectAccessReview`` in their namespace,
which Kubernetes' default ``admin`` ClusterRole lets them create).
"""

from __future__ import annotations

from collections.abc import Iterable

from webhook.policy.lookups import Lookups
from webhook.policy.model import RBAC_REFERENCES, PolicySpec
from webhook.policy.rbac import Attributes, Decision, Obj, authorize
from webhook.policy.vocabulary import PolicyKind

__all__ = ["PolicyAuthorizer"]

_CLUSTER_ROLE_BINDINGS, _ROLE_BINDINGS, _CLUSTER_ROLES, _ROLES = RBAC_REFERENCES


class PolicyAuthorizer:
    """The authorizer one policy's checks ask (implements :class:`webhook.policy.rbac.Authorizer` and ``RbacLister``).

    Args:
        spec: the policy (its kind and namespace decide what it may ask).
        lookups: the caches.
    """

    __slots__ = ("lookups", "tenant")

    def __init__(self, spec: PolicySpec, lookups: Lookups) -> None:
        self.lookups = lookups
        self.tenant = spec.namespace if spec.kind is PolicyKind.NAMESPACED else None

    def authorize(self, attributes: Attributes) -> tuple[Decision, str, str | None]:
        """See :class:`webhook.policy.rbac.Authorizer`."""
        if self.tenant is not None and (not attributes.resource_request or attributes.namespace != self.tenant):
            asked = attributes.namespace or ("a non-resource path" if not attributes.resource_request
                                            else "cluster-scoped resources")
            return Decision.NO_OPINION, "", (f"an AdmissionPolicy may only check access in its own namespace "
                                             f"{self.tenant!r}, not {asked!r}")
        decision, reason = authorize(self, attributes)
        return decision, reason, None

    def cluster_role_bindings(self) -> Iterable[Obj]:
        """Every cached ClusterRoleBinding."""
        return self.lookups.list_objects(_CLUSTER_ROLE_BINDINGS, "", {})

    def role_bindings(self, namespace: str) -> Iterable[Obj]:
        """The cached RoleBindings of ``namespace``."""
        return self.lookups.list_objects(_ROLE_BINDINGS, namespace, {})

    def cluster_role(self, name: str) -> Obj | None:
        """The cached ClusterRole ``name``."""
        return self.lookups.get_object(_CLUSTER_ROLES, "", name)

    def role(self, namespace: str, name: str) -> Obj | None:
        """The cached Role ``namespace/name``."""
        return self.lookups.get_object(_ROLES, namespace, name)
