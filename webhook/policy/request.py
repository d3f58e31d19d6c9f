"""The AdmissionRequest as the engine reads it: wire types and coordinates parsed once (pure; no I/O).

``AdmissionRequest`` is ``admission.k8s.io/v1`` ``AdmissionReview.request``
with Kubernetes field names (``webhook.admission.review`` re-exports it for
the HTTP layer). :class:`RequestCoordinates` is what matching needs —
group, version, resource, subresource, operation, namespace — extracted
once per request and shared by the index lookup, the matcher and the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypedDict

#: The pod controllers and the path of their pod template, keyed by (group, resource): the kinds
#: ``autogen.podControllers`` evaluates on a Pod built from that template (routing:
#: :func:`webhook.policy.matching.autogen_rules`).
POD_CONTROLLERS: dict[tuple[str, str], tuple[str, ...]] = {
    ("apps", "deployments"): ("spec", "template"),
    ("apps", "statefulsets"): ("spec", "template"),
    ("apps", "daemonsets"): ("spec", "template"),
    ("apps", "replicasets"): ("spec", "template"),
    ("", "replicationcontrollers"): ("spec", "template"),
    ("batch", "jobs"): ("spec", "template"),
    ("batch", "cronjobs"): ("spec", "jobTemplate", "spec", "template"),
}


class GroupVersionKind(TypedDict):
    """``metav1.GroupVersionKind`` (``request.kind``, ``request.requestKind``)."""

    group: str
    version: str
    kind: str


class GroupVersionResource(TypedDict):
    """``metav1.GroupVersionResource`` (``request.resource``, ``request.requestResource``)."""

    group: str
    version: str
    resource: str


class UserInfo(TypedDict, total=False):
    """``authenticationv1.UserInfo`` of the requesting user (``request.userInfo``)."""

    username: str
    uid: str
    groups: list[str]
    extra: dict[str, list[str]]


class AdmissionRequest(TypedDict, total=False):
    """``AdmissionReview.request`` with Kubernetes field names."""

    uid: str
    kind: GroupVersionKind
    resource: GroupVersionResource
    subResource: str
    requestKind: GroupVersionKind
    requestResource: GroupVersionResource
    requestSubResource: str
    name: str
    namespace: str
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    userInfo: UserInfo
    object: dict[str, Any] | None
    oldObject: dict[str, Any] | None
    dryRun: bool
    options: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class RequestCoordinates:
    """Where a request lands, as admission rules see it.

    Attributes:
        group: ``request.resource.group`` (``""`` for the core group).
        version: ``request.resource.version``.
        resource: plural resource name (``pods``).
        sub_resource: ``request.subResource`` (``""`` when none).
        operation: ``CREATE`` | ``UPDATE`` | ``DELETE`` | ``CONNECT``.
        namespace: ``request.namespace`` (``""`` for cluster-scoped objects).
        template: for a pod controller's own request (no subresource), the
            path of its pod template (``("spec", "template")``), else None.
    """

    group: str
    version: str
    resource: str
    sub_resource: str
    operation: str
    namespace: str
    template: tuple[str, ...] | None

    @property
    def namespaced(self) -> bool:
        """Whether the object lives in a namespace (rule ``scope: Namespaced``).

        As the API server's ``rules.go`` decides scope: a request that names a namespace,
        except for the Namespace resource itself (and its subresources), which is
        cluster-scoped although ``request.namespace`` carries its own name on UPDATE and DELETE.
        """
        return bool(self.namespace) and not (self.group == "" and self.resource == "namespaces")

    @property
    def is_namespace_object(self) -> bool:
        """Whether the request is for a Namespace itself (not a subresource)."""
        return self.group == "" and self.resource == "namespaces" and not self.sub_resource

    @classmethod
    def of(cls, request: AdmissionRequest | dict[str, Any]) -> RequestCoordinates:
        """Parse the coordinates of an AdmissionRequest; missing fields read as ``""``."""
        res: Any = request.get("resource") or {}
        group = str(res.get("group", "") or "")
        resource = str(res.get("resource", "") or "")
        sub_resource = str(request.get("subResource", "") or "")
        return cls(
            group=group,
            version=str(res.get("version", "") or ""),
            resource=resource,
            sub_resource=sub_resource,
            operation=str(request.get("operation", "") or ""),
            namespace=str(request.get("namespace", "") or ""),
            template=None if sub_resource else POD_CONTROLLERS.get((group, resource)),
        )


__all__ = ["POD_CONTROLLERS", "AdmissionRequest", "GroupVersionKind", "GroupVersionResource", "RequestCoordinates",
           "UserInfo"]
