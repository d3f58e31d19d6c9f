"""Builders for policy CRs and AdmissionRequests used by the engine tests."""

from __future__ import annotations

import copy
from typing import Any


def policy(name: str = "p", *, kind: str = "ClusterAdmissionPolicy", namespace: str | None = None,
           resources: tuple[str, ...] = ("pods",), operations: tuple[str, ...] = ("CREATE", "UPDATE"),
           groups: tuple[str, ...] = ("",), **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "generation": 1}
    if namespace:
        meta["namespace"] = namespace
    body: dict[str, Any] = {
        "match": {"resourceRules": [{"apiGroups": list(groups), "apiVersions": ["*"], "resources": list(resources),
                                     "operations": list(operations)}]},
    }
    match_extra = {k: spec.pop(k) for k in ("namespaceSelector", "objectSelector", "excludeResourceRules")
                   if k in spec}
    body["match"].update(match_extra)
    body.update(spec)
    if "validations" not in body and "mutations" not in body and "auditAnnotations" not in body:
        body["validations"] = [{"expression": "true"}]
    return {"apiVersion": "tollgate.dev/v1alpha1", "kind": kind, "metadata": meta, "spec": body}


def pod(name: str = "web", namespace: str = "default", *, labels: dict[str, str] | None = None,
        images: tuple[str, ...] = ("registry.example.com/app:1",), privileged: bool = False) -> dict[str, Any]:
    containers = [{"name": f"c{i}", "image": img} for i, img in enumerate(images)]
    if privileged:
        containers[0]["securityContext"] = {"privileged": True}
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels is not None:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": containers}}


def request(obj: dict[str, Any] | None, *, operation: str = "CREATE", old: dict[str, Any] | None = None,
            resource: str = "pods", group: str = "", version: str = "v1", kind: str = "Pod",
            sub_resource: str = "", namespace: str | None = "default", username: str = "alice") -> dict[str, Any]:
    req: dict[str, Any] = {
        "uid": "uid-1",
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "operation": operation,
        "userInfo": {"username": username, "groups": ["system:authenticated"]},
        "object": copy.deepcopy(obj),
        "oldObject": copy.deepcopy(old),
        "dryRun": False,
    }
    if sub_resource:
        req["subResource"] = sub_resource
    if namespace:
        req["namespace"] = namespace
    return req
