"""Resolve admission resource rules against a discovery snapshot into concrete GVRs (pure).

A policy names resources the way ``admissionregistration.k8s.io`` rules do
(``apiGroups``/``apiVersions``/``resources`` with ``*`` wildcards); an informer
needs one concrete ``group/version/resource``. This module holds the
discovery data model (what ``/api``, ``/apis``, ``/api/v1`` and
``/apis/G/V`` say, as client-go's ``discovery.ServerGroupsAndResources``
returns it) and :func:`resolve_rules`, which expands rules into GVRs:

* subresources (``pods/status``, ``*/scale``) are never informed: a rule that
  names only subresources resolves to nothing; ``*`` and ``*/*`` mean every
  top-level resource;
* only resources whose verbs include ``list`` and ``watch`` are resolved;
* a rule's ``scope`` (``Cluster``/``Namespaced``) filters on the resource's
  ``namespaced`` flag;
* when a group/resource is served in several matching versions, one informer
  is enough: the group's preferred version if the rule allows it, else the
  first allowed version in discovery's priority order (client-go's
  RESTMapper picks the same way).

No I/O; ``webhook.kube.discovery`` fetches the documents and calls
:func:`snapshot_from_documents`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True, slots=True, order=True)
class GVR:
    """A group/version/resource (client-go ``schema.GroupVersionResource``); group ``""`` is core."""

    group: str
    version: str
    resource: str

    @property
    def api_version(self) -> str:
        """``apiVersion`` of objects served here: ``v1`` or ``apps/v1``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def __str__(self) -> str:
        """``v1/pods`` or ``apps/v1/deployments`` (metric label and log form)."""
        return f"{self.api_version}/{self.resource}"


@dataclass(frozen=True, slots=True)
class APIResource:
    """One entry of an ``APIResourceList`` (``metav1.APIResource``), top-level resources only.

    Attributes:
        name: the plural resource name, e.g. ``pods``.
        kind: e.g. ``Pod``.
        namespaced: whether objects live in namespaces.
        verbs: e.g. ``{"get", "list", "watch", "create"}``.
    """

    name: str
    kind: str
    namespaced: bool
    verbs: frozenset[str] = frozenset({"get", "list", "watch"})


@dataclass(frozen=True, slots=True)
class DiscoverySnapshot:
    """What the API server serves at one moment.

    Attributes:
        versions: group → its served versions in discovery's priority order
            (preferred first, as ``APIGroup.versions`` lists them).
        preferred: group → ``preferredVersion.version``.
        resources: ``(group, version)`` → its top-level resources.
    """

    versions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    preferred: Mapping[str, str] = field(default_factory=dict)
    resources: Mapping[tuple[str, str], tuple[APIResource, ...]] = field(default_factory=dict)

    def resource(self, gvr: GVR) -> APIResource | None:
        """The discovery entry for ``gvr``, or None if it is not served."""
        for r in self.resources.get((gvr.group, gvr.version), ()):
            if r.name == gvr.resource:
                return r
        return None

    def kind(self, gvr: GVR) -> str | None:
        """``Kind`` served at ``gvr``, or None."""
        r = self.resource(gvr)
        return r.kind if r is not None else None


class RuleLike(Protocol):
    """The part of an admission ``RuleWithOperations`` resolution reads (``policy.model.ResourceRule`` fits)."""

    @property
    def api_groups(self) -> frozenset[str]:
        """``apiGroups``; ``*`` for any."""
        ...

    @property
    def api_versions(self) -> frozenset[str]:
        """``apiVersions``; ``*`` for any."""
        ...

    @property
    def resources(self) -> frozenset[str]:
        """``resources``; ``*``, ``*/*``, ``pods``, ``pods/status``..."""
        ...

    @property
    def scope(self) -> str:
        """``Cluster`` | ``Namespaced`` | ``*``."""
        ...


def _names_resource(patterns: frozenset[str], name: str) -> bool:
    # Top-level resources only: "pods/*" or "*/scale" name subresources, which are not informed.
    return bool({name, "*", "*/*"} & patterns)


def _allowed(values: frozenset[str], value: str) -> bool:
    return "*" in values or value in values


def resolve_rule(rule: RuleLike, snapshot: DiscoverySnapshot) -> set[GVR]:
    """The GVRs one rule selects (see the module docstring for the rules of the expansion).

    Args:
        rule: apiGroups, apiVersions, resources and scope.
        snapshot: discovery.

    Returns:
        A set of GVRs, each served with ``list`` and ``watch``; at most one
        version per group/resource.
    """
    found: set[GVR] = set()
    for group, versions in snapshot.versions.items():
        if not _allowed(rule.api_groups, group):
            continue
        order = list(versions)
        preferred = snapshot.preferred.get(group)
        if preferred in order:
            order.remove(preferred)
            order.insert(0, preferred)
        chosen: set[str] = set()
        for version in order:
            if not _allowed(rule.api_versions, version):
                continue
            for r in snapshot.resources.get((group, version), ()):
                if r.name in chosen or "/" in r.name or not _names_resource(rule.resources, r.name):
                    continue
                if not {"list", "watch"} <= r.verbs:
                    continue
                if (rule.scope == "Cluster" and r.namespaced) or (rule.scope == "Namespaced" and not r.namespaced):
                    continue
                chosen.add(r.name)
                found.add(GVR(group, version, r.name))
    return found


def resolve_rules(rules: Iterable[RuleLike], snapshot: DiscoverySnapshot) -> set[GVR]:
    """The union of :func:`resolve_rule` over ``rules``, one version per group/resource.

    When two rules pick different versions of the same group/resource, the
    one earlier in discovery's priority order wins.
    """
    found: set[GVR] = set()
    for rule in rules:
        found |= resolve_rule(rule, snapshot)
    by_gr: dict[tuple[str, str], GVR] = {}
    for gvr in sorted(found):
        key = (gvr.group, gvr.resource)
        other = by_gr.get(key)
        if other is None or _rank(snapshot, gvr) < _rank(snapshot, other):
            by_gr[key] = gvr
    return set(by_gr.values())


def _rank(snapshot: DiscoverySnapshot, gvr: GVR) -> int:
    versions = list(snapshot.versions.get(gvr.group, ()))
    if snapshot.preferred.get(gvr.group) == gvr.version:
        return -1
    return versions.index(gvr.version) if gvr.version in versions else len(versions)


def snapshot_from_documents(core_versions: dict[str, Any], groups: dict[str, Any],
                            resource_lists: Mapping[tuple[str, str], dict[str, Any]]) -> DiscoverySnapshot:
    """Build a snapshot from the raw discovery documents.

    Args:
        core_versions: ``GET /api`` (``APIVersions``: ``{"versions": ["v1"]}``).
        groups: ``GET /apis`` (``APIGroupList``: ``groups[].name``,
            ``groups[].versions[].version``, ``groups[].preferredVersion.version``).
        resource_lists: ``(group, version)`` → ``GET /api/v1`` or
            ``GET /apis/G/V`` (``APIResourceList``: ``resources[].name``,
            ``kind``, ``namespaced``, ``verbs``). Missing entries (a group
            version that failed to answer) simply contribute no resources.

    Returns:
        The snapshot; subresource entries (names with ``/``) are dropped.
    """
    versions: dict[str, tuple[str, ...]] = {"": tuple(str(v) for v in core_versions.get("versions") or ())}
    preferred: dict[str, str] = {"": versions[""][0]} if versions[""] else {}
    for g in groups.get("groups") or ():
        name = str(g.get("name", ""))
        if not name:
            continue  # a malformed entry; "" is the core group's
        versions[name] = tuple(str(v.get("version", "")) for v in g.get("versions") or ())
        pv = (g.get("preferredVersion") or {}).get("version")
        if pv:
            preferred[name] = str(pv)
    resources: dict[tuple[str, str], tuple[APIResource, ...]] = {}
    for gv, doc in resource_lists.items():
        resources[gv] = tuple(
            APIResource(name=str(r["name"]), kind=str(r.get("kind", "")), namespaced=bool(r.get("namespaced")),
                        verbs=frozenset(str(v) for v in r.get("verbs") or ()))
            for r in doc.get("resources") or ()
            if isinstance(r, dict) and "/" not in str(r.get("name", "/"))
        )
    return DiscoverySnapshot(versions=versions, preferred=preferred, resources=resources)


def group_versions(core_versions: dict[str, Any], groups: dict[str, Any]) -> list[tuple[str, str]]:
    """Every ``(group, version)`` whose APIResourceList must be fetched, from ``/api`` and ``/apis``."""
    out = [("", str(v)) for v in core_versions.get("versions") or ()]
    for g in groups.get("groups") or ():
        if g.get("name"):
            out.extend((str(g["name"]), str(v.get("version", ""))) for v in g.get("versions") or ())
    return out
