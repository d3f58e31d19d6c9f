"""Which requests a policy's ``match`` selects (pure; no I/O).

Follows ``admissionregistration.k8s.io`` rule semantics as the API server's
``generic/policy_matcher.go`` applies them to ValidatingAdmissionPolicy:
``resources`` entries ``pods`` (no subresource), ``pods/status``,
``pods/*`` (every subresource of pods), ``*`` (every resource, no
subresources), ``*/*`` (everything), ``*/scale``; ``scope`` ``Cluster`` for
requests without a namespace, ``Namespaced`` for requests with one.
"""

from __future__ import annotations

from typing import Any

from webhook.policy.model import ResourceRule

#: Pod controllers and the path of their pod template (``autogen.podControllers``).
POD_CONTROLLERS: dict[tuple[str, str], tuple[str, ...]] = {
    ("apps", "deployments"): ("spec", "template"),
    ("apps", "statefulsets"): ("spec", "template"),
    ("apps", "daemonsets"): ("spec", "template"),
    ("apps", "replicasets"): ("spec", "template"),
    ("", "replicationcontrollers"): ("spec", "template"),
    ("batch", "jobs"): ("spec", "template"),
    ("batch", "cronjobs"): ("spec", "jobTemplate", "spec", "template"),
}


def resource_matches(patterns: frozenset[str], resource: str, sub_resource: str) -> bool:
    """Whether ``resource[/sub_resource]`` is named by a rule's ``resources``."""
    if sub_resource:
        return bool(
            {f"{resource}/{sub_resource}", f"{resource}/*", f"*/{sub_resource}", "*/*"} & patterns
        )
    return bool({resource, "*", "*/*"} & patterns)


def rule_matches(rule: ResourceRule, *, group: str, version: str, resource: str, sub_resource: str,
                 operation: str, namespaced: bool) -> bool:
    """Whether one RuleWithOperations selects the request."""
    if operation not in rule.operations and "*" not in rule.operations:
        return False
    if group not in rule.api_groups and "*" not in rule.api_groups:
        return False
    if version not in rule.api_versions and "*" not in rule.api_versions:
        return False
    if rule.scope == "Cluster" and namespaced:
        return False
    if rule.scope == "Namespaced" and not namespaced:
        return False
    return resource_matches(rule.resources, resource, sub_resource)


def request_coordinates(request: dict[str, Any]) -> tuple[str, str, str, str, str, bool]:
    """``(group, version, resource, subResource, operation, namespaced)`` of an AdmissionRequest."""
    res = request.get("resource") or {}
    return (
        res.get("group", ""),
        res.get("version", ""),
        res.get("resource", ""),
        request.get("subResource", "") or "",
        request.get("operation", ""),
        bool(request.get("namespace")),
    )


def template_path(group: str, resource: str, sub_resource: str) -> tuple[str, ...] | None:
    """The pod-template path when the request is for a pod controller itself."""
    if sub_resource:
        return None
    return POD_CONTROLLERS.get((group, resource))
