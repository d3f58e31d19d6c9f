"""Discovery documents for the fake API server: ``/api``, ``/apis``, ``/api/v1`` and ``/apis/G/V``.

Built on every request from what the fake serves: a table of built-in
resources (core, apps, batch, apiextensions, Tollgate's policies and the
wg-policy reports) plus every CustomResourceDefinition stored in the fake
(``customresourcedefinitions``), with its served versions, plural, kind and
scope, so creating or deleting a CRD object changes discovery as the real
API server's apiextensions controller does. The shapes are those of
``metav1.APIVersions``, ``APIGroupList`` and ``APIResourceList``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.fakeapi.server import FakeApiServer

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True)
class Served:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    verbs: tuple[str, ...] = tuple(VERBS)


BUILTIN: tuple[Served, ...] = (
    Served("", "v1", "namespaces", "Namespace", False),
    Served("", "v1", "configmaps", "ConfigMap", True),
    Served("", "v1", "secrets", "Secret", True),
    Served("", "v1", "pods", "Pod", True),
    Served("", "v1", "services", "Service", True),
    Served("", "v1", "bindings", "Binding", True, ("create",)),
    Served("apps", "v1", "deployments", "Deployment", True),
    Served("apps", "v1", "daemonsets", "DaemonSet", True),
    Served("batch", "v1", "jobs", "Job", True),
    Served("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False),
    Served("tollgate.dev", "v1alpha1", "clusteradmissionpolicies", "ClusterAdmissionPolicy", False),
    Served("tollgate.dev", "v1alpha1", "admissionpolicies", "AdmissionPolicy", True),
    Served("wgpolicyk8s.io", "v1alpha2", "policyreports", "PolicyReport", True),
    Served("wgpolicyk8s.io", "v1alpha2", "clusterpolicyreports", "ClusterPolicyReport", False),
)


class FakeDiscovery:
    """Answers discovery paths for a :class:`FakeApiServer`; ``builtin`` may be edited by tests."""

    def __init__(self, server: FakeApiServer) -> None:
        self.server = server
        self.builtin: list[Served] = list(BUILTIN)

    def served(self) -> list[Served]:
        """Built-ins plus every served version of every stored CRD."""
        out = list(self.builtin)
        for crd in self.server.objects.get("customresourcedefinitions", {}).values():
            spec = crd.get("spec") or {}
            names = spec.get("names") or {}
            for v in spec.get("versions") or ():
                if v.get("served", True):
                    out.append(Served(spec["group"], v["name"], names["plural"], names["kind"],
                                      spec.get("scope", "Namespaced") == "Namespaced"))
        return out

    @staticmethod
    def is_discovery_path(path: str) -> bool:
        """``/api``, ``/apis``, ``/api/V`` or ``/apis/G/V``."""
        parts = [p for p in path.split("/") if p]
        return parts in (["api"], ["apis"]) or (len(parts) == 2 and parts[0] == "api") or \
            (len(parts) == 3 and parts[0] == "apis")

    def document(self, path: str) -> dict[str, Any] | None:
        """The discovery document at ``path``, or None when nothing is served there (404)."""
        parts = [p for p in path.split("/") if p]
        served = self.served()
        if parts == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        if parts == ["apis"]:
            groups: dict[str, list[str]] = {}
            for s in served:
                if s.group and s.version not in groups.setdefault(s.group, []):
                    groups[s.group].append(s.version)
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                 "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]}}
                for g, vs in sorted(groups.items())]}
        if parts == ["api", "v1"]:
            group, version = "", "v1"
        elif len(parts) == 3 and parts[0] == "apis":
            group, version = parts[1], parts[2]
        else:
            return None
        resources = [s for s in served if s.group == group and s.version == version]
        if not resources:
            return None
        gv = f"{group}/{version}" if group else version
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": [
            {"name": s.plural, "singularName": "", "namespaced": s.namespaced, "kind": s.kind,
             "verbs": list(s.verbs)} for s in resources]}
