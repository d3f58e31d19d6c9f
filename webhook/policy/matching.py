"""Which requests a policy selects — the only matcher (pure; no I/O).

Follows the API server's ``generic/policy_matcher.go`` as it applies
``admissionregistration.k8s.io`` rules to ValidatingAdmissionPolicy: the
:class:`~webhook.policy.index.PolicyIndex` narrows by (group, resource,
operation); :func:`rules_view` (once per request coordinates, in a plan) and
:func:`selectors_match` (per request) then decide exactly — resource rules and
excludes (versions, ``scope``, subresources: ``pods``, ``pods/status``,
``pods/*``, ``*``, ``*/*``, ``*/scale``), namespaced-policy isolation,
``namespaceSelector`` and ``objectSelector`` — and which view of the object
the policy sees (the object itself, or a Pod built from a controller's
template under ``autogen.podControllers``). ``matchConditions`` are CEL and
are evaluated by the engine, as the API server's validator does.

The one home of the pod-controller rule: :func:`autogen_rules` is the rules
``autogen.podControllers`` adds, which the index, the generated webhook
configurations and the background audit route by, and :func:`rules_view`
decides with the same test (:func:`selects_core_pods`).

Scope follows the API server's ``rules.go``: a Namespace is cluster-scoped,
although the API server sets ``request.namespace`` to its own name on its
UPDATE and DELETE; an AdmissionPolicy (a tenant's) never matches a
cluster-scoped object, its own Namespace included.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any

from webhook.policy.model import PolicySpec, ResourceRule
from webhook.policy.request import POD_CONTROLLERS, RequestCoordinates
from webhook.policy.vocabulary import PolicyKind, Scope

#: What names core ``pods`` themselves (no subresource) in a rule's ``resources``.
_POD_NAMES = frozenset({"pods", "*", "*/*"})


class View(StrEnum):
    """Which object a selected policy evaluates: the request's own, or a Pod from its template."""

    OBJECT = "object"
    POD_TEMPLATE = "podTemplate"


def resource_names(resource: str, sub_resource: str) -> tuple[str, ...]:
    """Every ``resources`` entry that names ``resource[/sub_resource]``."""
    if sub_resource:
        return (f"{resource}/{sub_resource}", f"{resource}/*", f"*/{sub_resource}", "*/*")
    return (resource, "*", "*/*")


def rule_matches(rule: ResourceRule, coords: RequestCoordinates, *, group: str | None = None,
                 version: str | None = None, resource: str | None = None) -> bool:
    """Whether one RuleWithOperations selects the request.

    Args:
        rule: the rule.
        coords: the request.
        group: override of ``coords.group`` (autogen matches a controller as ``pods``).
        version: override of ``coords.version``.
        resource: override of ``coords.resource``.
    """
    if coords.operation not in rule.operations and "*" not in rule.operations:
        return False
    g = coords.group if group is None else group
    if g not in rule.api_groups and "*" not in rule.api_groups:
        return False
    v = coords.version if version is None else version
    if v not in rule.api_versions and "*" not in rule.api_versions:
        return False
    if rule.scope is Scope.CLUSTER and coords.namespaced:
        return False
    if rule.scope is Scope.NAMESPACED and not coords.namespaced:
        return False
    names = resource_names(coords.resource if resource is None else resource, coords.sub_resource)
    return not rule.resources.isdisjoint(names)


def selects_core_pods(rule: ResourceRule) -> bool:
    """Whether ``rule`` selects core ``v1`` Pods themselves, the rules ``autogen.podControllers`` extends.

    The same test :func:`rules_view` applies when it matches a controller's request as ``pods``:
    group ``""`` or ``*``, version ``v1`` or ``*``, and ``pods``, ``*`` or ``*/*`` in ``resources``.
    """
    return (bool({"", "*"} & rule.api_groups) and bool({"v1", "*"} & rule.api_versions)
            and not _POD_NAMES.isdisjoint(rule.resources))


def autogen_rules(spec: PolicySpec) -> tuple[ResourceRule, ...]:
    """The rules ``autogen.podControllers`` adds to ``spec``'s: every pod controller, per rule selecting Pods.

    For each of ``spec.resource_rules`` that :func:`selects_core_pods`, one rule per API
    group of :data:`POD_CONTROLLERS` with the pod rule's versions, operations and scope.
    Used to route requests (the index, the generated webhook configurations) and to list
    what the background audit evaluates; :func:`rules_view` then decides exactly.

    Returns:
        ``()`` without ``autogen.podControllers`` or without a rule selecting Pods.
    """
    if not spec.pod_controllers:
        return ()
    by_group: dict[str, set[str]] = {}
    for group, resource in POD_CONTROLLERS:
        by_group.setdefault(group, set()).add(resource)
    return tuple(ResourceRule(api_groups=frozenset({group}), api_versions=rule.api_versions,
                              resources=frozenset(resources), operations=rule.operations, scope=rule.scope)
                 for rule in spec.resource_rules if selects_core_pods(rule)
                 for group, resources in sorted(by_group.items()))


def routed_rules(spec: PolicySpec) -> tuple[ResourceRule, ...]:
    """``spec.resource_rules`` followed by its :func:`autogen_rules`: everything that may select a request."""
    return spec.resource_rules + autogen_rules(spec)


def _rules_select(spec: PolicySpec, coords: RequestCoordinates, **override: str) -> bool:
    if not any(rule_matches(r, coords, **override) for r in spec.resource_rules):
        return False
    return not any(rule_matches(r, coords, **override) for r in spec.exclude_resource_rules)


def _labels(obj: Any) -> Mapping[str, str] | None:
    if not isinstance(obj, dict):
        return None
    meta = obj.get("metadata")
    return meta.get("labels") if isinstance(meta, dict) else None


def rules_view(spec: PolicySpec, coords: RequestCoordinates) -> View | None:
    """The static part of matching: isolation, resource rules and excludes, autogen.

    Depends only on the coordinates, so a plan computes it once per
    coordinates (see :mod:`webhook.policy.plan`).

    Returns:
        The view the policy would see, or None when its rules do not select the request.
    """
    if spec.kind is PolicyKind.NAMESPACED and not (coords.namespaced and coords.namespace == spec.namespace):
        # An AdmissionPolicy sees only requests in its own namespace: never a
        # cluster-scoped object, its own Namespace included.
        return None
    if _rules_select(spec, coords):
        return View.OBJECT
    if spec.pod_controllers and coords.template is not None and _rules_select(
            spec, coords, group="", version="v1", resource="pods"):
        return View.POD_TEMPLATE
    return None


def has_selectors(spec: PolicySpec) -> bool:
    """Whether matching also depends on labels (namespaceSelector or objectSelector)."""
    return not (spec.namespace_selector.empty and spec.object_selector.empty)


def selectors_match(spec: PolicySpec, coords: RequestCoordinates, request: Mapping[str, Any],
                    namespace_object: Callable[[], dict[str, Any] | None]) -> bool:
    """The label part of matching: ``namespaceSelector`` and ``objectSelector``.

    Args:
        spec: the policy's spec.
        coords: the request's coordinates.
        request: the AdmissionRequest (``object``/``oldObject``).
        namespace_object: returns the cached Namespace (called only when needed).
    """
    sel = spec.namespace_selector
    if not sel.empty:
        if coords.namespaced:
            # A Namespace not (yet) in the cache is matched as one without labels.
            if not sel.matches(_labels(namespace_object())):
                return False
        elif coords.is_namespace_object and not sel.matches_object(request.get("object") or request.get("oldObject")):
            # VAP: a Namespace request is matched on its own labels; other
            # cluster-scoped objects are never excluded by namespaceSelector.
            return False
    sel = spec.object_selector
    return sel.empty or sel.matches_object(request.get("object")) or sel.matches_object(request.get("oldObject"))


__all__ = ["POD_CONTROLLERS", "View", "autogen_rules", "has_selectors", "resource_names", "routed_rules",
           "rule_matches", "rules_view", "selectors_match", "selects_core_pods"]
